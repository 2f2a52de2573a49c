-- sku_unload.lua: undo a load whose database transaction did not commit.
-- Only the load with the given epoch is removed, never a newer one.
-- KEYS: 1 meta, 2 stock, 3 seq, 4 stream.  ARGV: 1 epoch.  Returns 1 or 0.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return 1

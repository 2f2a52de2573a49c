-- sku_load.lua: make a SKU sellable in Redis with its stock and rules.
-- Runs only after the database committed the SKU (or its reload), so nothing
-- is ever sold that PostgreSQL does not know.  Refuses when the SKU is already
-- loaded, so a second load can never double the stock.  Creates the writers'
-- consumer group from the stream's start.
-- KEYS: 1 meta, 2 stock, 3 seq, 4 stream, 5 bought
-- ARGV: 1 epoch, 2 stock, 3 per-user limit, 4 starts_ms ('' none), 5 ends_ms ('' none),
--       6 consumer group, then pairs user id, units already held (a reload)
-- Returns 1 when loaded, 0 when already loaded.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('DEL', KEYS[5])
for i = 7, #ARGV, 2 do
  redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[3], 0)
local ok = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[4], ARGV[6], '0', 'MKSTREAM')
if not ok and redis.call('EXISTS', KEYS[4]) == 0 then
  return redis.error_reply('SECKILL cannot create the order stream group')
end
-- meta last: a SKU is "loaded" only once everything else is in place
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'limit', ARGV[3], 'starts_ms', ARGV[4],
           'ends_ms', ARGV[5])
return 1

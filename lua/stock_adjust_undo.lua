-- stock_adjust_undo.lua: take back an admin delta whose database transaction
-- rolled back, if and only if stock_adjust.lua applied it (its record exists).
-- Unguarded: buyers may have taken the units meanwhile; the database guard then
-- rejects those orders and their stock is returned.
-- KEYS: 1 stock, 2 adjustments.  ARGV: 1 adjustment id.  Returns 1 or 0.
local delta = redis.call('HGET', KEYS[2], ARGV[1])
if not delta then
  return 0
end
redis.call('DECRBY', KEYS[1], delta)
redis.call('HDEL', KEYS[2], ARGV[1])
return 1

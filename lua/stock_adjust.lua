-- stock_adjust.lua: apply an admin delta to the sellable stock in Redis, guarded
-- (available + delta >= 0), and record it under the adjustment's id in the same
-- step, so a caller that never saw the reply can still take back exactly what
-- was applied (stock_adjust_undo.lua) if its database transaction fails.
-- KEYS: 1 meta, 2 stock, 3 adjustments (hash id -> delta)
-- ARGV: 1 delta, 2 adjustment id
-- Returns {'ok', available} | {'insufficient', available} | {'not_loaded'}
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'not_loaded'}
end
local stock = tonumber(redis.call('GET', KEYS[2]))
if not stock then
  return redis.error_reply('SECKILL stock key missing for a loaded SKU')
end
local delta = tonumber(ARGV[1])
if stock + delta < 0 then
  return {'insufficient', stock}
end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[1])
return {'ok', redis.call('INCRBY', KEYS[2], ARGV[1])}

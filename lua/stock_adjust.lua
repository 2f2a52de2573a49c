-- stock_adjust.lua: apply an admin delta to the sellable stock in Redis, and
-- record it under the adjustment's id in the same step, so whoever settles it
-- later (its own completion hook, or the next adjustment after a crash) can
-- take back exactly what was applied if its database transaction failed.
-- A negative delta is guarded (available + delta >= 0); a positive one never
-- is (after an undo the stock may sit below zero, and adding must still work).
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
if delta < 0 and stock + delta < 0 then
  return {'insufficient', stock}
end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[1])
return {'ok', redis.call('INCRBY', KEYS[2], ARGV[1])}

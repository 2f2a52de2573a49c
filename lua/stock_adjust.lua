-- stock_adjust.lua: apply a relative delta to the sellable stock in Redis.
-- Guarded: available + delta must stay >= 0 unless ARGV[2] == 'force' (used only
-- to undo a delta whose database transaction rolled back).
-- KEYS: 1 meta, 2 stock.  ARGV: 1 delta, 2 'guard' | 'force'
-- Returns {'ok', available} | {'insufficient', available} | {'not_loaded'}
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'not_loaded'}
end
local stock = tonumber(redis.call('GET', KEYS[2]))
if not stock then
  return redis.error_reply('SECKILL stock key missing for a loaded SKU')
end
local delta = tonumber(ARGV[1])
if ARGV[2] ~= 'force' and stock + delta < 0 then
  return {'insufficient', stock}
end
return {'ok', redis.call('INCRBY', KEYS[2], ARGV[1])}

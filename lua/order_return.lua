-- order_return.lua: give a rejected order's units back, exactly once.
-- The journal says whether they already were; a replay changes nothing.
-- KEYS: 1 journal, 2 stock, 3 bought.  ARGV: 1 order id, 2 user id, 3 qty, 4 reason
-- Returns 1 when returned now, 0 when already returned.
local state = redis.call('HGET', KEYS[1], ARGV[1])
if state and string.sub(state, 1, 9) == 'returned:' then
  return 0
end
redis.call('INCRBY', KEYS[2], ARGV[3])
local left = redis.call('HINCRBY', KEYS[3], ARGV[2], -tonumber(ARGV[3]))
if left <= 0 then
  redis.call('HDEL', KEYS[3], ARGV[2])
end
redis.call('HSET', KEYS[1], ARGV[1], 'returned:' .. ARGV[4])
return 1

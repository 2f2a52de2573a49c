-- order_return.lua: give the units of orders the database rejected back, each
-- exactly once.  The journal says whether they already were; an order the
-- journal does not know is not held by this Redis any more (it was reloaded
-- from the database after a data loss), so there is nothing to give back.
-- KEYS: 1 journal, 2 stock, 3 bought.
-- ARGV: 1 reason, then triples order id, user id, qty.
-- Returns the number of orders whose units were returned now.
local returned = 0
for i = 2, #ARGV, 3 do
  local id, user, qty = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if redis.call('HGET', KEYS[1], id) == 'pending' then
    redis.call('INCRBY', KEYS[2], qty)
    if redis.call('HINCRBY', KEYS[3], user, -qty) <= 0 then
      redis.call('HDEL', KEYS[3], user)
    end
    redis.call('HSET', KEYS[1], id, 'returned:' .. ARGV[1])
    returned = returned + 1
  end
end
return returned

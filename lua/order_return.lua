-- order_return.lua: give the units of orders the database rejected back, each
-- exactly once.  The journal says whether they already were.  An order
-- reserved under an epoch older than the SKU's last load was never counted by
-- the state that load rebuilt from the database (nor is an order the journal
-- does not know): there is nothing to give back, only the state to record.
-- KEYS: 1 journal, 2 stock, 3 bought, 4 meta.
-- ARGV: 1 orders per epoch, then quads order id, user id, qty, reason.
-- Returns the number of orders whose units were returned now.
local per_epoch = tonumber(ARGV[1])
local loaded = tonumber(redis.call('HGET', KEYS[4], 'loaded') or
                        redis.call('HGET', KEYS[4], 'epoch') or '0')
local returned = 0
for i = 2, #ARGV, 4 do
  local id, user, qty = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local state = redis.call('HGET', KEYS[1], id)
  if state and string.match(state, '^pending') then
    if math.floor(tonumber(id) / per_epoch) >= loaded then
      redis.call('INCRBY', KEYS[2], qty)
      if redis.call('HINCRBY', KEYS[3], user, -qty) <= 0 then
        redis.call('HDEL', KEYS[3], user)
      end
      returned = returned + 1
    end
    redis.call('HSET', KEYS[1], id, 'returned:' .. ARGV[i + 3])
  end
end
return returned

-- order_return.lua: give the units of orders the database rejected back, each
-- exactly once.  The journal says whether they already were.  An order
-- reserved under an epoch older than the SKU's last load was never counted by
-- the state that load rebuilt from the database (nor is an order the journal
-- does not know): there is nothing to give back, only the state to record.
-- Only this reservation's state counts: 'pending:<user>:<entry>' with the
-- same buyer and stream entry (after a failover Redis may have given the id
-- to another reservation, whose units are not these).  A balance held that
-- goes below zero is kept: a debt a rebuild's load pays brings it back.
-- Fenced: nothing is written for a writer whose lock a newer holder took over.
-- KEYS: 1 journal, 2 stock, 3 bought, 4 meta, 5 the writer's lock, 6 the
--       SKU's fencing counter.
-- ARGV: 1 fence ('<token>:<owner>', '' unfenced), 2 orders per epoch, then
--       quintuples order id, user id, qty, entry id, reason.
-- Returns the number of orders whose units were returned now.
local tok, owner = string.match(ARGV[1], '^(%d+):(%x+)$')
if tok and redis.call('GET', KEYS[5]) ~= owner and
   tonumber(redis.call('GET', KEYS[6]) or '0') > tonumber(tok) then
  return redis.error_reply('SECKILL fenced: a newer holder took the lock over')
end
local per_epoch = tonumber(ARGV[2])
local loaded = tonumber(redis.call('HGET', KEYS[4], 'loaded') or
                        redis.call('HGET', KEYS[4], 'epoch') or '0')
local returned = 0
for i = 3, #ARGV, 5 do
  local id, user, qty = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local state = redis.call('HGET', KEYS[1], id)
  if state == 'pending:' .. user .. ':' .. ARGV[i + 3] or state == 'pending:' .. user then
    if math.floor(tonumber(id) / per_epoch) >= loaded then
      redis.call('INCRBY', KEYS[2], qty)
      if redis.call('HINCRBY', KEYS[3], user, -qty) == 0 then
        redis.call('HDEL', KEYS[3], user)
      end
      returned = returned + 1
    end
    redis.call('HSET', KEYS[1], id, 'returned:' .. ARGV[i + 4])
  end
end
return returned

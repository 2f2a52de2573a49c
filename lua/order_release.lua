-- order_release.lua: give the units of confirmed orders that were cancelled
-- or expired back to the buyers who can still reserve (the SKU's stock) and
-- to their buyers (units held, so they may buy again), each exactly once.
-- PostgreSQL took them back first, in the transaction that changed the
-- order's state, and recorded the epoch of the SKU's last load then: the load
-- that read the database before the return, so the one that must get it.
--   Redis holds that load: give the units now.
--   Redis holds an older load, or none (a rebuild committed in the database
--   whose load into Redis has not run yet): leave a debt (a negative take)
--   that sku_load.lua settles when it installs that load.
--   Redis holds a later load: that load read the return from the database.
-- Either way the order is marked released, so a retry (the settler of a dead
-- process, a paused one waking up) gives nothing twice.  A balance held that
-- goes below zero is kept: a debt a rebuild's load pays brings it back.
-- Fenced: nothing is written for a holder whose lock a newer one took over.
-- KEYS: 1 released (hash order -> "<epoch>:<state>"), 2 stock, 3 bought, 4 meta,
--       5 debts (hash "<epoch>:<order>[:return]" -> "<user>:<qty>"), 6 the
--       SKU's lock, 7 the SKU's fencing counter
-- ARGV: 1 fence ('<token>:<owner>', '' unfenced), then quintuples order id,
--       user id, qty, return epoch, state ('cancelled' or 'expired')
-- Returns the number of orders given back or left as debts now.
local tok, owner = string.match(ARGV[1], '^(%d+):(%x+)$')
if tok and redis.call('GET', KEYS[6]) ~= owner and
   tonumber(redis.call('GET', KEYS[7]) or '0') > tonumber(tok) then
  return redis.error_reply('SECKILL fenced: a newer holder took the lock over')
end
local loaded = tonumber(redis.call('HGET', KEYS[4], 'loaded') or
                        redis.call('HGET', KEYS[4], 'epoch') or '0')
-- A loaded SKU without its stock key has lost data: the rebuild that follows
-- reads the units from the database, so none are given to a stock that is not there.
if redis.call('EXISTS', KEYS[2]) == 0 then
  loaded = -1
end
local n = 0
for i = 2, #ARGV, 5 do
  local id, user, qty, epoch = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  if not redis.call('HGET', KEYS[1], id) then
    redis.call('HSET', KEYS[1], id, ARGV[i + 3] .. ':' .. ARGV[i + 4])
    if loaded == epoch then
      redis.call('INCRBY', KEYS[2], qty)
      if redis.call('HINCRBY', KEYS[3], user, -qty) == 0 then
        redis.call('HDEL', KEYS[3], user)
      end
      n = n + 1
    elseif loaded >= 0 and loaded < epoch then
      redis.call('HSET', KEYS[5], ARGV[i + 3] .. ':' .. id .. ':return', user .. ':' .. -qty)
      n = n + 1
    end
  end
end
return n

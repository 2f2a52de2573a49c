-- orders_reapply.lua: confirmed orders that were reserved against a Redis
-- state a reload did not count (reserved under an older epoch, written only
-- after the reload rebuilt the SKU from the database) take their units from
-- the rebuilt state too, once each (journal marker).  Stock may go below zero:
-- that fails closed (sold out) until an admin delta or returns lift it.
-- KEYS: 1 journal, 2 stock, 3 bought.  ARGV: triples order id, user id, qty.
-- Returns the number applied now.
local applied = 0
for i = 1, #ARGV, 3 do
  local id, user, qty = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if redis.call('HGET', KEYS[1], id) ~= 'reapplied' then
    redis.call('DECRBY', KEYS[2], qty)
    redis.call('HINCRBY', KEYS[3], user, qty)
    redis.call('HSET', KEYS[1], id, 'reapplied')
    applied = applied + 1
  end
end
return applied

-- orders_reapply.lua: confirmed orders that were reserved before the SKU's
-- last rebuild in Redis (which counted only what the database held) but
-- written after it take their units from the rebuilt state too, once each.
-- The database records in each order's row which load it must be taken from;
-- if Redis now holds a later load (it counted the order from the database) or
-- none, there is nothing to do.  Stock may go below zero: that fails closed
-- (sold out) until an admin delta or returns lift it.
-- KEYS: 1 journal, 2 stock, 3 bought, 4 meta.
-- ARGV: triples order id, user id, qty, then the load epoch last.
-- Returns the number applied now.
local epoch = ARGV[#ARGV]
local loaded = redis.call('HGET', KEYS[4], 'loaded') or redis.call('HGET', KEYS[4], 'epoch')
if loaded ~= epoch then
  return 0
end
local mark = 'reapplied:' .. epoch
local applied = 0
for i = 1, #ARGV - 1, 3 do
  local id, user, qty = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if redis.call('HGET', KEYS[1], id) ~= mark then
    redis.call('DECRBY', KEYS[2], qty)
    redis.call('HINCRBY', KEYS[3], user, qty)
    redis.call('HSET', KEYS[1], id, mark)
    applied = applied + 1
  end
end
return applied

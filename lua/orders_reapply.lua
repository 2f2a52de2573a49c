-- orders_reapply.lua: confirmed orders that were reserved before the SKU's
-- last rebuild in Redis (which counted only what the database held) but
-- written after it are taken from the rebuilt state too, once each.  The
-- database records in each order's row which load must take it ('epoch').
--   Redis holds that load: take the units now.
--   Redis holds an older load, or none (the rebuild committed in the database
--   but its load into Redis has not run yet): leave a debt that sku_load.lua
--   pays when it installs that load.
--   Redis holds a later load: that load read the order from the database.
-- Either way the journal marks the reservation (field '<order>@<entry>', never
-- the order id alone: another reservation may hold that id after a failover),
-- so a replay (also one by a writer that paused after the acknowledgement)
-- does nothing twice.  Stock may go below zero: that fails closed (sold out)
-- until returns or a delta lift it.
-- Fenced: nothing is written for a writer whose lock a newer holder took over.
-- KEYS: 1 journal, 2 stock, 3 bought, 4 meta, 5 debts (hash "<epoch>:<order>" -> "<user>:<qty>"),
--       6 the writer's lock, 7 the SKU's fencing counter
-- ARGV: 1 fence ('<token>:<owner>', '' unfenced), then quadruples order id,
--       user id, qty, entry id, then the load epoch last.
-- Returns the number taken or left as debts now.
local tok, owner = string.match(ARGV[1], '^(%d+):(%x+)$')
if tok and redis.call('GET', KEYS[6]) ~= owner and
   tonumber(redis.call('GET', KEYS[7]) or '0') > tonumber(tok) then
  return redis.error_reply('SECKILL fenced: a newer holder took the lock over')
end
local epoch = tonumber(ARGV[#ARGV])
local loaded = tonumber(redis.call('HGET', KEYS[4], 'loaded') or '0')
local mark = 'reapplied:' .. ARGV[#ARGV]
local applied = 0
for i = 2, #ARGV - 1, 4 do
  local id, user, qty = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local field = id .. '@' .. ARGV[i + 3]
  -- (a marker under the order id alone was written before markers named the entry)
  if redis.call('HGET', KEYS[1], field) ~= mark and redis.call('HGET', KEYS[1], id) ~= mark then
    if loaded == epoch then
      redis.call('DECRBY', KEYS[2], qty)
      redis.call('HINCRBY', KEYS[3], user, qty)
      applied = applied + 1
    elseif loaded < epoch then
      redis.call('HSET', KEYS[5], ARGV[#ARGV] .. ':' .. id, user .. ':' .. qty)
      applied = applied + 1
    end
    redis.call('HSET', KEYS[1], field, mark)
  end
end
return applied

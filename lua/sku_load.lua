-- sku_load.lua: make a SKU sellable in Redis with its stock and rules.
-- Runs only after the database committed the SKU (or its reload), so nothing
-- is ever sold that PostgreSQL does not know.  Creates the writers' consumer
-- group from the stream's start.  'epoch' names the order ids issued from now
-- on; 'loaded' records that this state was built from the database at that
-- epoch: orders reserved under an older epoch are not counted by it (their
-- writer takes them again, orders_reapply.lua; their returns give nothing back).
-- Debts owed to this load are settled here: orders it must take
-- (orders_reapply.lua, a positive qty) and units it must give back
-- (order_release.lua, a negative one); debts owed to an older load are
-- dropped, because this load read those orders from the database.  A balance
-- held that a debt takes below zero is kept.
-- Fenced, like every write after a COMMIT: a rebuild that committed, then
-- paused past its lease while an admin delta took the SKU's lock and moved
-- the stock, must not install its older snapshot over that delta.
-- A rebuild also writes back, in this same step, the Idempotency-Keys of the
-- orders answered 202 and recorded in PostgreSQL whose reservation Redis lost
-- (the rebuild read them, with no row under their id, under its lock): once
-- this load's epoch is installed Redis issues none of the old epoch's ids
-- again, so the key cannot come to name another buyer's reservation.  A key
-- is written back, with the journal state pending:<user>:<entry>, only when
-- neither the key, nor the stream entry, nor another reservation's journal
-- state under the id is there.
-- KEYS: 1 meta, 2 stock, 3 seq, 4 stream, 5 bought, 6 debts (hash "<epoch>:<order>[:return]"
--       -> "<user>:<qty>", qty negative for units given back), and, when
--       fenced, 7 the SKU's lock, 8 the SKU's fencing counter, 9 the journal,
--       then the buyers' keys to write back
-- ARGV: 1 epoch, 2 stock, 3 per-user limit, 4 starts_ms ('' none), 5 ends_ms ('' none),
--       6 consumer group, 7 'new' (refused when loaded: a second load would double
--       the stock) or 'rebuild' (replaces what Redis holds; the caller read the
--       database under the SKU's lock and row lock), 8 the Redis run id this
--       state is built on ('' unknown: the next reconciliation rebuilds it),
--       9 the parent SKU of a bucket ('' none), 10 its bucket, 11 the parent's
--       number of buckets (reserve.lua sells a bucket only to the buyers whose
--       user id falls in it, through its parent), with 9 keys or more: 12 the
--       fence ('<token>:<owner>', '' unfenced), 13 the number P of pairs,
--       14 the written-back keys' ttl (s); then P pairs user id, units held
--       (with 6 keys: pairs to the end), then per key to write back its order
--       id, stream entry, user id and qty
-- Returns 1 when loaded, 0 when already loaded, -1 when a rebuild's epoch is
-- not newer than the loaded one (a rebuild that paused past its lease while a
-- newer one installed its state: installing the older snapshot would undo
-- the newer one's takes and returns).
local pairs_from, pairs_to = 12, #ARGV
if #KEYS >= 9 then
  pairs_from = 15
  pairs_to = 14 + 2 * tonumber(ARGV[13])
  local tok, owner = string.match(ARGV[12], '^(%d+):(%x+)$')
  if tok and redis.call('GET', KEYS[7]) ~= owner and
     tonumber(redis.call('GET', KEYS[8]) or '0') > tonumber(tok) then
    return redis.error_reply('SECKILL fenced: a newer holder took the lock over')
  end
end
if ARGV[7] ~= 'rebuild' and redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
if ARGV[7] == 'rebuild' and
   tonumber(redis.call('HGET', KEYS[1], 'loaded') or '0') >= tonumber(ARGV[1]) then
  return -1
end
redis.call('DEL', KEYS[5])
for i = pairs_from, pairs_to - 1, 2 do
  redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[3], 0)
local this = tonumber(ARGV[1])
local debts = redis.call('HGETALL', KEYS[6])
for i = 1, #debts, 2 do
  local epoch = tonumber(string.match(debts[i], '^(%d+):'))
  local user, qty = string.match(debts[i + 1], '^(%d+):(-?%d+)$')
  if epoch == this and user then
    redis.call('DECRBY', KEYS[2], qty)
    if redis.call('HINCRBY', KEYS[5], user, qty) == 0 then
      redis.call('HDEL', KEYS[5], user)
    end
  end
  if not epoch or epoch <= this then
    redis.call('HDEL', KEYS[6], debts[i])
  end
end
local ok = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[4], ARGV[6], '0', 'MKSTREAM')
if not ok and redis.call('EXISTS', KEYS[4]) == 0 then
  return redis.error_reply('SECKILL cannot create the order stream group')
end
-- meta last: a SKU is "loaded" only once everything else is in place
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'loaded', ARGV[1], 'limit', ARGV[3],
           'starts_ms', ARGV[4], 'ends_ms', ARGV[5], 'built_run', ARGV[8],
           'parent', ARGV[9] or '', 'bucket', ARGV[10] or '',
           'buckets', ARGV[11] or '')
-- the recorded 202s' keys, now that no old-epoch id can be issued again
for k = 10, #KEYS do
  local a = pairs_to + 1 + 4 * (k - 10)
  local id, entry, user = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  local st = redis.call('HGET', KEYS[9], id)
  if redis.call('EXISTS', KEYS[k]) == 0 and #redis.call('XRANGE', KEYS[4], entry, entry) == 0 and
     (not st or st == 'pending:' .. user .. ':' .. entry) then
    -- the value reserve.lua writes: '<request fingerprint>|<order id>@<entry>'
    redis.call('SET', KEYS[k], user .. ':' .. ARGV[a + 3] .. '|' .. id .. '@' .. entry, 'EX',
               ARGV[14])
    redis.call('HSET', KEYS[9], id, 'pending:' .. user .. ':' .. entry)
  end
end
return 1

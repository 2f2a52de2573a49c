-- order_pending_settled.lua: after the settler's COMMIT, under the SKU's
-- lock, the journal says what became of orders recorded as pending whose
-- reservation Redis had lost (a rebuild's sku_load.lua may have written
-- 'pending:<user>' back for them): a refused or cancelled one
-- 'returned:<reason>', so that a retry with its key answers that, with no
-- unit given back (Redis lost the units with the reservation); one whose
-- row is written and whose entry is gone loses the journal entry, so that
-- nothing looks pending any more.  Confirmed ones also go through
-- orders_reapply.lua, which takes their units from the load that did not
-- count them.  Only an entry that still says 'pending' for the same buyer
-- and stream entry, and whose stream entry is gone (else a writer still owns
-- it), is changed.
-- Fenced: nothing is written for a holder whose lock a newer one took over.
-- KEYS: 1 journal, 2 stream, 3 the SKU's lock, 4 the SKU's fencing counter
-- ARGV: 1 fence ('<token>:<owner>', '' unfenced), then quads order id, user
--       id, stream entry id, new state ('returned:<reason>', or '' to drop
--       the entry)
-- Returns the number of entries changed.
local tok, owner = string.match(ARGV[1], '^(%d+):(%x+)$')
if tok and redis.call('GET', KEYS[3]) ~= owner and
   tonumber(redis.call('GET', KEYS[4]) or '0') > tonumber(tok) then
  return redis.error_reply('SECKILL fenced: a newer holder took the lock over')
end
local changed = 0
for i = 2, #ARGV, 4 do
  local id, user, entry, state = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local cur = redis.call('HGET', KEYS[1], id)
  -- this reservation's state only (another may hold the id after a failover)
  local mine = cur == 'pending:' .. user .. ':' .. entry or cur == 'pending:' .. user
  if mine and #redis.call('XRANGE', KEYS[2], entry, entry) == 0 then
    if state == '' then
      redis.call('HDEL', KEYS[1], id)
    else
      redis.call('HSET', KEYS[1], id, state)
    end
    changed = changed + 1
  end
end
return changed

-- order_pending_settled.lua: after the settler's COMMIT, under the SKU's
-- lock, the journal says what became of orders recorded as pending whose
-- reservation Redis had lost (order_pending_restore.lua may have written
-- 'pending:<user>' back for them): a refused or cancelled one
-- 'returned:<reason>', so that a retry with its key answers that, with no
-- unit given back (Redis lost the units with the reservation); one whose
-- row is written and whose entry is gone loses the journal entry, so that
-- nothing looks pending any more.  Confirmed ones also go through
-- orders_reapply.lua, which takes their units from the load that did not
-- count them.  Only an entry that still says 'pending' for the same buyer,
-- and whose stream entry is gone (else a writer still owns it), is changed.
-- KEYS: 1 journal, 2 stream
-- ARGV: quads order id, user id, stream entry id, new state
--       ('returned:<reason>', or '' to drop the entry)
-- Returns the number of entries changed.
local changed = 0
for i = 1, #ARGV, 4 do
  local id, user, entry, state = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local cur = redis.call('HGET', KEYS[1], id)
  local mine = cur and (cur == 'pending:' .. user or
                        string.sub(cur, 1, 9 + #user) == 'pending:' .. user .. ':')
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

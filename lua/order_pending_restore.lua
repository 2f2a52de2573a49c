-- order_pending_restore.lua: a durable order recorded in PostgreSQL as
-- pending (order_pending), whose reservation Redis may no longer hold (it
-- restarted empty, or failed over to a replica that never had it).  Run by
-- a rebuild before it loads a new epoch (so that Redis issues none of the old
-- epoch's ids again), for records no row holds the id of.  When
-- Redis lost it, the buyer's Idempotency-Key and the order's journal entry
-- are written back ('pending:<user>:<entry>', the state reserve.lua writes),
-- so that a retry with the key finds the order (pending: its settler decides
-- it) instead of reserving again, and a lookup sees it.
-- reserve.lua writes the key and the stream entry in one script, so a key
-- still there means Redis holds the reservation (or a writer already wrote
-- it): nothing is written then.
-- KEYS: 1 journal, 2 stream, 3 the buyer's idempotency key
-- ARGV: 1 order id, 2 stream entry id, 3 user id, 4 qty, 5 the key's ttl (s)
-- Returns 'held' (Redis has the reservation's key, or its entry), 'other'
-- (the key names another order: a retry made after the loss reserved again,
-- and that order took the key's place; or the journal holds another
-- reservation of the same id) or 'restored'.
local id, entry, user = ARGV[1], ARGV[2], ARGV[3]
local v = redis.call('GET', KEYS[3])
if v then
  -- the value reserve.lua writes: '<user>:<qty>|<order id>@<entry>'
  local what = string.match(v, '|([^|]+)$')
  if what == id .. '@' .. entry then
    return 'held'
  end
  return 'other'
end
if #redis.call('XRANGE', KEYS[2], entry, entry) > 0 then
  return 'held'
end
-- another reservation's state under the same id: this one is not written back
local st = redis.call('HGET', KEYS[1], id)
if st and st ~= 'pending:' .. user .. ':' .. entry then
  return 'other'
end
redis.call('SET', KEYS[3], user .. ':' .. ARGV[4] .. '|' .. id .. '@' .. entry, 'EX', ARGV[5])
redis.call('HSET', KEYS[1], id, 'pending:' .. user .. ':' .. entry)
return 'restored'

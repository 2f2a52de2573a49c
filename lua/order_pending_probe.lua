-- order_pending_probe.lua: whether Redis still holds the reservation of an
-- order recorded as pending in PostgreSQL (order_pending), read by its
-- settler under the SKU's lock and fenced row.  A writer acknowledges an
-- entry only after its commit, and no writer commits while the settler holds
-- the row: an entry still in the stream will be written by a writer; one
-- that is gone, with no row, was lost with Redis's data (with the units it
-- took, in the same script), and the settler decides the order itself.
-- KEYS: 1 stream, 2 the buyer's idempotency key (optional)
-- ARGV: 1 order id, 2 stream entry id
-- Returns 'in_flight', 'other' (the key names another order: a retry made
-- after the loss reserved again in this one's place) or 'lost'.
local id, entry = ARGV[1], ARGV[2]
if #redis.call('XRANGE', KEYS[1], entry, entry) > 0 then
  return 'in_flight'
end
if KEYS[2] then
  local v = redis.call('GET', KEYS[2])
  local what = v and string.match(v, '|([^|]+)$')
  if what and what ~= id .. '@' .. entry then
    return 'other'
  end
end
return 'lost'

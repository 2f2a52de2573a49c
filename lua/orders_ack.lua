-- orders_ack.lua: after the database committed a batch, acknowledge and drop
-- its stream entries and forget the journal state of confirmed orders (the
-- database is now their record; returned ones stay so a replay cannot return
-- stock twice).  Variadic commands in chunks: one call per chunk, not per entry.
-- KEYS: 1 stream, 2 journal.  ARGV: 1 group, 2 n entries, 3.. entry ids, then order ids
-- of confirmed orders.  Returns the number of entries acknowledged.
local CHUNK = 500
local n = tonumber(ARGV[2])
local acked = 0
local function each_chunk(first, last, fn)
  local i = first
  while i <= last do
    local j = math.min(i + CHUNK - 1, last)
    fn(unpack(ARGV, i, j))
    i = j + 1
  end
end
each_chunk(3, 2 + n, function(...)
  acked = acked + redis.call('XACK', KEYS[1], ARGV[1], ...)
  redis.call('XDEL', KEYS[1], ...)
end)
each_chunk(3 + n, #ARGV, function(...)
  redis.call('HDEL', KEYS[2], ...)
end)
-- (a confirmed order's journal entry goes; so does a 'reapplied' marker, which
-- is only needed until this acknowledgement makes a replay impossible)
return acked

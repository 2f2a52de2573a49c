-- orders_ack.lua: after the database committed a batch, acknowledge and drop
-- its stream entries, forget the journal state of confirmed orders (the
-- database is now their record; returned ones stay so a replay cannot return
-- stock twice), and tell every instance what was decided, so that buyers
-- waiting for their commit get their answer.  Variadic commands in chunks: one
-- call per chunk, not per entry.
-- KEYS: 1 stream, 2 journal.
-- ARGV: 1 group, 2 n entries, 3 decisions channel, 4 decisions message
--       ('' for none), 5.. entry ids, then order ids of confirmed orders.
-- Returns the number of entries acknowledged.
local CHUNK = 500
local n = tonumber(ARGV[2])
local first = 5
local acked = 0
local function each_chunk(from, last, fn)
  local i = from
  while i <= last do
    local j = math.min(i + CHUNK - 1, last)
    fn(unpack(ARGV, i, j))
    i = j + 1
  end
end
each_chunk(first, first + n - 1, function(...)
  acked = acked + redis.call('XACK', KEYS[1], ARGV[1], ...)
  redis.call('XDEL', KEYS[1], ...)
end)
each_chunk(first + n, #ARGV, function(...)
  redis.call('HDEL', KEYS[2], ...)
end)
-- (a confirmed order's journal entry goes; the writer keeps 'reapplied' markers
-- out of the list: a paused writer may still replay its batch after this)
if ARGV[4] ~= '' then
  redis.call('PUBLISH', ARGV[3], ARGV[4])
end
return acked

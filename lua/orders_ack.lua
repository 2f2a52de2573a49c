-- orders_ack.lua: after the database committed a batch, acknowledge and drop
-- its stream entries and forget the journal state of confirmed orders (the
-- database is now their record; returned ones stay so a replay cannot return
-- stock twice).
-- KEYS: 1 stream, 2 journal.  ARGV: 1 group, 2 n entries, 3.. entry ids, then order ids
-- of confirmed orders.  Returns the number of entries acknowledged.
local n = tonumber(ARGV[2])
local acked = 0
for i = 3, 2 + n do
  acked = acked + redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  redis.call('XDEL', KEYS[1], ARGV[i])
end
for i = 3 + n, #ARGV do
  redis.call('HDEL', KEYS[2], ARGV[i])
end
return acked

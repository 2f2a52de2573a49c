-- orders_ack.lua: after the database committed a batch, acknowledge and drop
-- its stream entries, forget the journal state of confirmed orders (the
-- database is now their record; returned ones stay so a replay cannot return
-- stock twice), and tell every instance what was decided, so that buyers
-- waiting for their commit get their answer.  Variadic commands in chunks: one
-- call per chunk, not per entry.
-- A journal state goes only when it is this reservation's: 'pending:<user>:<entry>'
-- with the same buyer and stream entry.  After a failover Redis may have given
-- the same order id to another buyer's reservation, which keeps its state.
-- Fenced: nothing is written for a writer whose lock a newer holder took over.
-- KEYS: 1 stream, 2 journal, 3 the writer's lock, 4 the SKU's fencing counter.
-- ARGV: 1 fence ('<token>:<owner>', '' unfenced), 2 group, 3 n entries,
--       4 decisions channel, 5 decisions message ('' for none), 6.. entry
--       ids, then triples order id, user id, entry id of confirmed orders.
-- Returns the number of entries acknowledged.
local tok, owner = string.match(ARGV[1], '^(%d+):(%x+)$')
if tok and redis.call('GET', KEYS[3]) ~= owner and
   tonumber(redis.call('GET', KEYS[4]) or '0') > tonumber(tok) then
  return redis.error_reply('SECKILL fenced: a newer holder took the lock over')
end
local CHUNK = 500
local n = tonumber(ARGV[3])
local first = 6
local acked = 0
local i = first
while i < first + n do
  local j = math.min(i + CHUNK - 1, first + n - 1)
  acked = acked + redis.call('XACK', KEYS[1], ARGV[2], unpack(ARGV, i, j))
  redis.call('XDEL', KEYS[1], unpack(ARGV, i, j))
  i = j + 1
end
i = first + n
while i + 2 <= #ARGV do
  local last = math.min(i + 3 * CHUNK - 1, #ARGV)
  local ids = {}
  for k = i, last - 2, 3 do
    ids[#ids + 1] = ARGV[k]
  end
  local states = redis.call('HMGET', KEYS[2], unpack(ids))
  local gone = {}
  for k = 1, #ids do
    local a = i + 3 * (k - 1)
    local s = states[k]
    if s == 'pending:' .. ARGV[a + 1] .. ':' .. ARGV[a + 2] or s == 'pending:' .. ARGV[a + 1] then
      gone[#gone + 1] = ids[k]
    end
  end
  if #gone > 0 then
    redis.call('HDEL', KEYS[2], unpack(gone))
  end
  i = last + 1
end
if ARGV[5] ~= '' then
  redis.call('PUBLISH', ARGV[4], ARGV[5])
end
return acked

-- orders_dead_letter.lua: move stream entries no writer can write (malformed,
-- or an order id the database already holds for another order) to the SKU's
-- dead-letter stream and acknowledge them, so that the SKU's other orders go
-- on.  An entry that named a real reservation gives its units back when this
-- Redis state counted it (its epoch is the loaded one or later): the entry's
-- presence in the stream makes that happen exactly once.  Either way the
-- reservation's journal state ('pending:<user>:<entry>', this buyer and this
-- entry) becomes 'returned:<reason>': the order will never be written, and
-- its buyer is told so.  An operator (or `seckillctl reconcile`) reads the
-- dead letters.  A balance held that goes below zero is kept.
-- Fenced: nothing is written for a writer whose lock a newer holder took over.
-- KEYS: 1 stream, 2 dead-letter stream, 3 journal, 4 stock, 5 bought, 6 meta,
--       7 the writer's lock, 8 the SKU's fencing counter.
-- ARGV: 1 fence ('<token>:<owner>', '' unfenced), 2 group, 3 dead letters
--       kept (approximately), 4 orders per epoch, 5-7 the entry's field names
--       for the order id, user and qty (named once, in service/order/order.c),
--       then triples entry id, reason, '1' to give the units back or '0'.
-- Returns the number moved now.
local tok, owner = string.match(ARGV[1], '^(%d+):(%x+)$')
if tok and redis.call('GET', KEYS[7]) ~= owner and
   tonumber(redis.call('GET', KEYS[8]) or '0') > tonumber(tok) then
  return redis.error_reply('SECKILL fenced: a newer holder took the lock over')
end
local per_epoch = tonumber(ARGV[4])
local f_id, f_user, f_qty = ARGV[5], ARGV[6], ARGV[7]
local loaded = tonumber(redis.call('HGET', KEYS[6], 'loaded') or
                        redis.call('HGET', KEYS[6], 'epoch') or '0')
local moved = 0
for i = 8, #ARGV, 3 do
  local e = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
  if e[1] then
    local fields = {'entry', ARGV[i], 'reason', ARGV[i + 1]}
    local f = {}
    for j = 1, #e[1][2], 2 do
      f[e[1][2][j]] = e[1][2][j + 1]
      fields[#fields + 1] = e[1][2][j]
      fields[#fields + 1] = e[1][2][j + 1]
    end
    local id, qty, user = tonumber(f[f_id]), tonumber(f[f_qty]), f[f_user]
    if ARGV[i + 2] == '1' and id and qty and user then
      -- only a reservation this Redis state counted is given back
      if math.floor(id / per_epoch) >= loaded then
        redis.call('INCRBY', KEYS[4], qty)
        if redis.call('HINCRBY', KEYS[5], user, -qty) == 0 then
          redis.call('HDEL', KEYS[5], user)
        end
      end
      local state = redis.call('HGET', KEYS[3], f[f_id])
      if state == 'pending:' .. user .. ':' .. ARGV[i] or state == 'pending:' .. user then
        redis.call('HSET', KEYS[3], f[f_id], 'returned:' .. ARGV[i + 1])
      end
    end
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', unpack(fields))
    redis.call('XACK', KEYS[1], ARGV[2], ARGV[i])
    redis.call('XDEL', KEYS[1], ARGV[i])
    moved = moved + 1
  end
end
return moved

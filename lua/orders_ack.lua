-- orders_ack.lua: after the database committed a batch, settle it in Redis in
-- one step: give back the units of the orders it rejected, forget the journal
-- state of the confirmed ones (the database is now their record), acknowledge
-- and drop its stream entries, and tell every instance what was decided, so
-- that buyers waiting for their commit get their answer.  One script, so that
-- no failover can land between a rejected order's return and the deletion of
-- its entry (which would leave its journal pending and its units out for
-- ever): whatever the new master lacks, the entry is still there to replay.
--
-- A rejected order's units come back once, as the journal says: only while
-- its state is this reservation's 'pending:<user>:<entry>' (same buyer, same
-- stream entry: after a failover Redis may have given the id to another
-- reservation, whose units are not these), and only when this Redis state
-- counted it (its epoch is the loaded one or later; a rebuild since read the
-- database, which never took them).  Either way the state becomes
-- 'returned:<reason>', which a replay finds.  A balance held that goes below
-- zero is kept: a debt a rebuild's load pays brings it back.  A confirmed
-- order's state goes only when it is this reservation's.
-- Fenced: nothing is written for a writer whose lock a newer holder took over.
-- Variadic commands in chunks: one call per chunk, not per entry.
-- KEYS: 1 stream, 2 journal, 3 stock, 4 bought, 5 meta, 6 the writer's lock,
--       7 the SKU's fencing counter.
-- ARGV: 1 fence ('<token>:<owner>', '' unfenced), 2 group, 3 n entries,
--       4 n confirmed, 5 orders per epoch, 6 decisions channel, 7 decisions
--       message ('' for none), then the n entry ids, then triples order id,
--       user id, entry id of the confirmed orders, then quintuples order id,
--       user id, qty, entry id, reason of the rejected ones.
-- Returns the number of entries acknowledged.
local tok, owner = string.match(ARGV[1], '^(%d+):(%x+)$')
if tok and redis.call('GET', KEYS[6]) ~= owner and
   tonumber(redis.call('GET', KEYS[7]) or '0') > tonumber(tok) then
  return redis.error_reply('SECKILL fenced: a newer holder took the lock over')
end
local CHUNK = 500
local n, nconf, per_epoch = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local first = 8
local conf = first + n              -- the confirmed triples
local rej = conf + 3 * nconf        -- the rejected quintuples

local function mine(state, user, entry)
  return state == 'pending:' .. user .. ':' .. entry or state == 'pending:' .. user
end

-- rejected orders: their units back, exactly once (before their entries go)
if rej <= #ARGV then
  local loaded = tonumber(redis.call('HGET', KEYS[5], 'loaded') or
                          redis.call('HGET', KEYS[5], 'epoch') or '0')
  for i = rej, #ARGV - 4, 5 do
    local id, user, qty = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
    if mine(redis.call('HGET', KEYS[2], id), user, ARGV[i + 3]) then
      if math.floor(tonumber(id) / per_epoch) >= loaded then
        redis.call('INCRBY', KEYS[3], qty)
        if redis.call('HINCRBY', KEYS[4], user, -qty) == 0 then
          redis.call('HDEL', KEYS[4], user)
        end
      end
      redis.call('HSET', KEYS[2], id, 'returned:' .. ARGV[i + 4])
    end
  end
end

-- confirmed orders: their pending state goes
local i = conf
while i < rej do
  local last = math.min(i + 3 * CHUNK - 1, rej - 1)
  local ids = {}
  for k = i, last - 2, 3 do
    ids[#ids + 1] = ARGV[k]
  end
  local states = redis.call('HMGET', KEYS[2], unpack(ids))
  local gone = {}
  for k = 1, #ids do
    local a = i + 3 * (k - 1)
    if mine(states[k], ARGV[a + 1], ARGV[a + 2]) then
      gone[#gone + 1] = ids[k]
    end
  end
  if #gone > 0 then
    redis.call('HDEL', KEYS[2], unpack(gone))
  end
  i = last + 1
end

local acked = 0
i = first
while i < conf do
  local j = math.min(i + CHUNK - 1, conf - 1)
  acked = acked + redis.call('XACK', KEYS[1], ARGV[2], unpack(ARGV, i, j))
  redis.call('XDEL', KEYS[1], unpack(ARGV, i, j))
  i = j + 1
end
if ARGV[7] ~= '' then
  redis.call('PUBLISH', ARGV[6], ARGV[7])
end
return acked

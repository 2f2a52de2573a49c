-- reserve.lua: take stock for a batch of orders on one SKU's keys (a lone
-- order is a batch of one), atomically.  Each order is decided on its own, in
-- the order given, exactly as if it had come in a call of its own right after
-- the one before: an earlier order takes stock first (stream order is batch
-- order), counts toward its buyer's limit and order bucket, and is seen by a
-- later order with the same idempotency key.  Taking the stock and enqueueing
-- the orders in one script leaves no "reserved but never queued" window.
--
-- Redis does not roll back a script that fails half-way, so the script runs
-- in two passes: the first decides every order with reads only (what the
-- orders before it would have written is kept in tables), and is the only
-- place that raises an error, refusing the whole batch with nothing written;
-- the second writes.  (A buyer's bucket token is taken by every attempt that
-- gets as far as the bucket, on purpose, whatever it is answered next.)
--
-- Writes, for the orders taken: the sequence and the stock (one MSET), per
-- order its XADD and its idempotency key, then the journal (one HSET) and the
-- buyers' held units (one HSET) once per batch.  A service-made key lives
-- ARGV[3] seconds (long enough to settle a lost reply), a buyer's ARGV[2], a
-- refusal remembered under a buyer's key ARGV[12].
--
-- KEYS: 1 meta (hash epoch, starts_ms, ends_ms, limit, parent, bucket,
--       buckets), 2 stock, 3 seq, 4 bought (hash user -> units held, and
--       'r:<user>' -> the buyer's bucket as its latest order taken left it),
--       5 journal (hash order -> state, 'pending:<user>:<entry>' until the
--       writer decides), 6 stream; then two per order i = 1..N:
--       5 + 2i its idempotency key (used only when its key arg is not ''),
--       6 + 2i its buyer's order bucket on this SKU (string: the instant, in
--       us on the Redis clock, from which it is full again; absent: full;
--       written by an attempt refused after taking its token)
-- ARGV: 1 N, 2 idempotency ttl in seconds of a buyer's own key, 3 ... of a
--       key the service made up, 4 deadline (Unix ms on the Redis clock; past
--       it the caller has answered "unavailable", so the script must take
--       nothing; the earliest of the batch's), 5 orders per epoch (2^seq bits),
--       6-9 the stream entry's field names for the order id, user, qty and
--       idempotency key (named once, in service/order/order.c), 10 a buyer's
--       bucket gains one order every this many us ('0': no limit), 11 the
--       bucket's size (orders at once), 12 how long (s) a refusal is
--       remembered under a buyer's key (each is Redis memory a buyer can
--       make, so far shorter than an order's); then 7 per order i, from
--       12 + 7(i-1):
--       +1 user_id, +2 qty, +3 idempotency key ('' for none), +4 request
--       fingerprint, +5 '1' to remember a refusal under the key (the buyer's
--       own key), '0' not (a key the service made up: refusals are most of a
--       sale's traffic; such a key is new, nothing to look up: a retry that
--       names it after a 503 comes as the buyer's own key, '1'), '2' as '1'
--       but for sold_out (a bucket's sold_out may end with a transfer),
--       +6 the parent SKU the buyer ordered when these are the keys of one of
--       its buckets ('' none), +7 '1' the order takes a token from the
--       buyer's bucket, '0' not (the same order again after a transfer)
-- Returns one reply per order, in order, each one of
--   {'ok', order_id, remaining, entry} | {'dup', order_id, state, entry} |
--   {'dup_refused', verdict} | {'idem_mismatch'} | {'not_loaded'} |
--   {'expired'} | {'sale_not_active'} | {'limit_exceeded', held} |
--   {'sold_out', remaining} | {'exhausted'} | {'rate_limited', retry_after_ms} |
--   {'wrong_bucket'}
-- 'entry' is the order's stream entry id: unlike the order id, Redis can never
-- issue it twice, so buyers waiting for a decision match on both.
local N = tonumber(ARGV[1])
local NKEYS, NARGS, PER_ORDER = 6, 12, 7
local replies = {}
local meta = redis.call('HMGET', KEYS[1], 'epoch', 'starts_ms', 'ends_ms', 'limit', 'parent',
                        'bucket', 'buckets')
if not meta[1] then
  for i = 1, N do
    replies[i] = {'not_loaded'}
  end
  return replies
end
-- The stock and the sequence in one read (plain keys of the SKU's hash tag).
-- A loaded SKU without a stock key has lost data: unknown is not infinite (I6);
-- an order that gets that far refuses the batch (below).
local stock_seq = redis.call('MGET', KEYS[2], KEYS[3])
local stock = tonumber(stock_seq[1])
-- sku_load.lua sets the sequence; a loaded SKU without one has lost data, and
-- restarting it at 0 would hand out ids that already exist (I4).
local seq = tonumber(stock_seq[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local expired = now > tonumber(ARGV[4])
local in_sale = not ((meta[2] and meta[2] ~= '' and now < tonumber(meta[2])) or
                     (meta[3] and meta[3] ~= '' and now >= tonumber(meta[3])))
local limit, epoch, per_epoch = tonumber(meta[4]), tonumber(meta[1]), tonumber(ARGV[5])
local interval, burst = tonumber(ARGV[10]), tonumber(ARGV[11])
local parent = meta[5] or ''

-- A bucket sells only through its parent, and only to the buyers whose user
-- id falls in it: the per-user limit and the Idempotency-Key live in one
-- bucket, whoever routed the order.
-- The user id mod the number of buckets, digit by digit: ids go up to
-- 2^63-1, past what Lua's doubles hold exactly.
local function user_mod(user, n)
  local r = 0
  for i = 1, #user do
    r = (r * 10 + string.byte(user, i) - 48) % n
  end
  return r
end

-- What the orders decided so far would have written, read once per batch.
local buyers = {}     -- user -> {held, at (bucket), rate_key, took, token}
local buyer_list = {} -- the same, in order of first appearance
local idem = {}       -- idempotency key name -> {fp, what} | {fp, order = i}
local orders = {}     -- i -> the order taken: {id, user, qty, key, ttl}
local taken = {}      -- indexes of the orders taken, in order
local remembered = {} -- {key name, value}: refusals to remember

local function buyer(user, rate_key)
  local b = buyers[user]
  if not b then
    local h = redis.call('HMGET', KEYS[4], user, 'r:' .. user)
    b = {held = tonumber(h[1] or '0'), at = tonumber(h[2] or '0'), rate_key = rate_key, user = user}
    if interval > 0 then
      local at = tonumber(redis.call('GET', rate_key) or '0')
      if at > b.at then
        b.at = at
      end
    end
    buyers[user] = b
    buyer_list[#buyer_list + 1] = b
  end
  return b
end

-- Decides order i; returns its reply, or {fail = message} to refuse the batch.
local function decide(i)
  local a = NARGS + PER_ORDER * (i - 1)
  local user, qty, key, fp = ARGV[a + 1], tonumber(ARGV[a + 2]), ARGV[a + 3], ARGV[a + 4]
  local remember, idem_key = ARGV[a + 5], KEYS[NKEYS + 2 * i - 1]
  if parent ~= ARGV[a + 6] or
     (parent ~= '' and user_mod(user, tonumber(meta[7])) ~= tonumber(meta[6])) then
    return {'wrong_bucket'}
  end
  if not stock then
    return {fail = 'SECKILL stock key missing for a loaded SKU'}
  end
  -- A key the service made up ('0') is new: nothing under it to look up.
  local lookup = key ~= '' and remember ~= '0'
  if lookup then
    local prev = idem[idem_key]
    if not prev then
      local v = redis.call('GET', idem_key)
      if v then
        local pfp, what = string.match(v, '^(.*)|([^|]+)$')
        prev = {fp = pfp, what = what}
      end
    end
    if prev then
      if prev.fp ~= fp then
        return {'idem_mismatch'}
      end
      if prev.order then -- an order of this batch: its entry comes with its XADD
        return {'dup', prev.order}
      end
      local refused = string.match(prev.what, '^refused:(.+)$')
      if refused then
        return {'dup_refused', refused}
      end
      local id, entry = string.match(prev.what, '^(%d+)@?(.*)$')
      return {'dup', id, redis.call('HGET', KEYS[5], id) or 'confirmed', entry}
    end
  end
  if expired then
    return {'expired'}
  end
  local b = buyer(user, KEYS[NKEYS + 2 * i])
  -- The buyer's bucket, here so that it holds across every instance without a
  -- round trip of its own.  Every attempt that gets this far takes an order
  -- from it, refused later or not (it limits how often a buyer asks); a replay
  -- of an Idempotency-Key (above) and a rate-limited attempt take nothing, and
  -- the latter is not remembered under the key, so a retry with it may pass.
  -- GCRA: the bucket holds when it is full again.
  if interval > 0 and ARGV[a + 7] == '1' then
    local full_at = b.at
    if full_at < now_us then
      full_at = now_us
    end
    local over = full_at + interval - now_us - interval * burst
    if over > 0 then
      return {'rate_limited', math.ceil(over / 1000)}
    end
    b.at = full_at + interval
    b.token = true
  end
  if not in_sale then
    return {'sale_not_active'}
  end
  -- A refusal is remembered under the idempotency key like an order, so that
  -- a retry of the same request gets the same answer for the key's lifetime.
  local function refuse(verdict, n)
    if lookup and (remember == '1' or verdict ~= 'sold_out') then
      idem[idem_key] = {fp = fp, what = 'refused:' .. verdict}
      remembered[#remembered + 1] = {idem_key, fp .. '|refused:' .. verdict}
    end
    return {verdict, n}
  end
  -- A negative balance (units given back before a rebuild's debt took them)
  -- gives no extra room; it is kept, so the debt lands on the right number.
  local holds = math.max(b.held, 0)
  if holds + qty > limit then
    return refuse('limit_exceeded', holds)
  end
  if stock < qty then
    return refuse('sold_out', stock)
  end
  if not seq then
    return {fail = 'SECKILL sequence key missing for a loaded SKU'}
  end
  if seq + 1 >= per_epoch then
    return {'exhausted'}
  end
  seq = seq + 1
  stock = stock - qty
  b.held = b.held + qty
  b.took = true
  local id = string.format('%.0f', epoch * per_epoch + seq)
  orders[i] = {id = id, user = user, qty = ARGV[a + 2], key = key, fp = fp,
               ttl = remember == '0' and ARGV[3] or ARGV[2]}
  taken[#taken + 1] = i
  if key ~= '' then
    idem[idem_key] = {fp = fp, order = i}
  end
  return {'ok', id, stock}
end

for i = 1, N do
  local r = decide(i)
  if r.fail then
    return redis.error_reply(r.fail)
  end
  replies[i] = r
end

-- writes start here: nothing below can refuse an order
if #taken > 0 then
  -- the sequence and the stock in one write (this script read both, and
  -- nothing runs between)
  redis.call('MSET', KEYS[3], string.format('%.0f', seq), KEYS[2], string.format('%.0f', stock))
  for _, i in ipairs(taken) do
    local o = orders[i]
    o.entry = redis.call('XADD', KEYS[6], '*', ARGV[6], o.id, ARGV[7], o.user, ARGV[8], o.qty,
                         ARGV[9], o.key)
    replies[i][4] = o.entry
    if o.key ~= '' then
      redis.call('SET', KEYS[NKEYS + 2 * i - 1], o.fp .. '|' .. o.id .. '@' .. o.entry, 'EX', o.ttl)
    end
  end
  -- The journal names the buyer (only they may read the order while it is
  -- pending) and the stream entry: after a failover Redis may issue the same
  -- order id again, never the same entry, so the scripts that settle an order
  -- change its state only when both match ('pending:<user>:<entry>').
  local journal = {}
  for _, i in ipairs(taken) do
    journal[#journal + 1] = orders[i].id
    journal[#journal + 1] = 'pending:' .. orders[i].user .. ':' .. orders[i].entry
  end
  redis.call('HSET', KEYS[5], unpack(journal))
  -- the units held, absolute (read above); the bucket rides along: one write
  -- per buyer instead of two
  local held = {}
  for _, b in ipairs(buyer_list) do
    if b.took then
      held[#held + 1] = b.user
      held[#held + 1] = string.format('%.0f', b.held)
      if b.token then
        held[#held + 1] = 'r:' .. b.user
        held[#held + 1] = string.format('%.0f', b.at)
      end
    end
  end
  redis.call('HSET', KEYS[4], unpack(held))
end
-- A buyer whose token went with no order taken keeps it in the bucket's key,
-- which expires once the bucket is full again.
for _, b in ipairs(buyer_list) do
  if b.token and not b.took then
    redis.call('SET', b.rate_key, string.format('%.0f', b.at), 'PX',
               math.ceil((b.at - now_us) / 1000))
  end
end
for _, r in ipairs(remembered) do
  redis.call('SET', r[1], r[2], 'EX', ARGV[12])
end
for i = 1, N do
  local r = replies[i]
  if r[1] == 'dup' and orders[r[2]] then -- an order of this batch, pending as it was just written
    local o = orders[r[2]]
    replies[i] = {'dup', o.id, 'pending:' .. o.user .. ':' .. o.entry, o.entry}
  end
end
return replies

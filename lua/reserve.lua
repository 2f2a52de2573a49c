-- reserve.lua: take stock for one order, atomically, on one SKU's keys.
-- Every check comes before the first write, because Redis does not roll back
-- a script that fails half-way (but the buyer's bucket: an attempt takes its
-- token where it is checked, on purpose, whatever it is answered next).  Taking the stock and enqueueing the order in
-- one script leaves no "reserved but never queued" window.
--
-- KEYS: 1 meta (hash epoch, starts_ms, ends_ms, limit), 2 stock, 3 seq,
--       4 bought (hash user -> units held), 5 journal (hash order -> state,
--       'pending:<user>' until the writer decides),
--       6 stream, 7 idempotency key (used only when ARGV[3] ~= ''),
--       8 the buyer's order bucket on this SKU (string: the instant, in us on
--       the Redis clock, from which it is full again; absent: full)
-- ARGV: 1 user_id, 2 qty, 3 idempotency key ('' for none), 4 request
--       fingerprint, 5 idempotency ttl in seconds, 6 deadline (Unix ms on the
--       Redis clock; past it the caller has answered "unavailable", so the
--       script must take nothing), 7 orders per epoch (2^seq bits), 8 '1' to
--       remember a refusal under the idempotency key (the buyer's own key), '0'
--       not (a key the service made up: refusals are most of a sale's traffic),
--       '2' as '1' but for sold_out (a bucket's sold_out may end with a transfer),
--       9-12 the stream entry's field names for the order id, user, qty and
--       idempotency key (named once, in service/order/order.c), 13 the
--       buyer's bucket gains one order every this many us ('0': no limit),
--       14 the bucket's size (orders at once), 15 the parent SKU the buyer
--       ordered when these are the keys of one of its buckets ('' none)
-- Returns {'ok', order_id, remaining, entry} | {'dup', order_id, state, entry} |
--   {'dup_refused', verdict} | {'idem_mismatch'} | {'not_loaded'} |
--   {'expired'} | {'sale_not_active'} | {'limit_exceeded', held} |
--   {'sold_out', remaining} | {'exhausted'} | {'rate_limited', retry_after_ms} |
--   {'wrong_bucket'}
-- 'entry' is the order's stream entry id: unlike the order id, Redis can never
-- issue it twice, so buyers waiting for a decision match on both.
local meta = redis.call('HMGET', KEYS[1], 'epoch', 'starts_ms', 'ends_ms', 'limit', 'parent',
                        'bucket', 'buckets')
if not meta[1] then
  return {'not_loaded'}
end
-- A bucket sells only through its parent, and only to the buyers whose user
-- id falls in it: the per-user limit and the Idempotency-Key live in one
-- bucket, whoever routed the order.
-- The user id mod the number of buckets, digit by digit: ids go up to
-- 2^63-1, past what Lua's doubles hold exactly.
local function user_mod(n)
  local r = 0
  for i = 1, #ARGV[1] do
    r = (r * 10 + string.byte(ARGV[1], i) - 48) % n
  end
  return r
end
local parent = meta[5] or ''
if parent ~= (ARGV[15] or '') or
   (parent ~= '' and user_mod(tonumber(meta[7])) ~= tonumber(meta[6])) then
  return {'wrong_bucket'}
end
-- The stock and the sequence in one read (plain keys of the SKU's hash tag).
-- A loaded SKU without a stock key has lost data: unknown is not infinite (I6).
local stock_seq = redis.call('MGET', KEYS[2], KEYS[3])
local stock = tonumber(stock_seq[1])
if not stock then
  return redis.error_reply('SECKILL stock key missing for a loaded SKU')
end
local qty = tonumber(ARGV[2])

-- A key the service made up (ARGV[8] '0') is new: this request is the first
-- to use it, so there is nothing under it to look up (a retry that names it
-- after a 503 comes as the buyer's own key, '1', and is looked up).
local lookup = ARGV[3] ~= '' and ARGV[8] ~= '0'
if lookup then
  local prev = redis.call('GET', KEYS[7])
  if prev then
    local fp, what = string.match(prev, '^(.*)|([^|]+)$')
    if fp ~= ARGV[4] then
      return {'idem_mismatch'}
    end
    local refused = string.match(what, '^refused:(.+)$')
    if refused then
      return {'dup_refused', refused}
    end
    local id, entry = string.match(what, '^(%d+)@?(.*)$')
    return {'dup', id, redis.call('HGET', KEYS[5], id) or 'confirmed', entry}
  end
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now > tonumber(ARGV[6]) then
  return {'expired'}
end
-- The buyer's bucket, here so that it holds across every instance without a
-- round trip of its own.  Every attempt that gets this far takes an order
-- from it, refused later or not (it limits how often a buyer asks); a replay
-- of an Idempotency-Key (above) and a rate-limited attempt take nothing, and
-- the latter is not remembered under the key, so a retry with it may pass.
-- GCRA: the key holds when the bucket is full again, and expires then.
local interval = tonumber(ARGV[13])
if interval > 0 then
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local full_at = tonumber(redis.call('GET', KEYS[8]) or '0')
  if full_at < now_us then
    full_at = now_us
  end
  local over = full_at + interval - now_us - interval * tonumber(ARGV[14])
  if over > 0 then
    return {'rate_limited', math.ceil(over / 1000)}
  end
  redis.call('SET', KEYS[8], string.format('%.0f', full_at + interval), 'PX',
             math.ceil((full_at + interval - now_us) / 1000))
end
if (meta[2] and meta[2] ~= '' and now < tonumber(meta[2])) or
   (meta[3] and meta[3] ~= '' and now >= tonumber(meta[3])) then
  return {'sale_not_active'}
end

-- A refusal is remembered under the idempotency key like an order, so that a
-- retry of the same request gets the same answer for the key's lifetime.
local function refuse(verdict, n)
  if lookup and (ARGV[8] == '1' or verdict ~= 'sold_out') then
    redis.call('SET', KEYS[7], ARGV[4] .. '|refused:' .. verdict, 'EX', ARGV[5])
  end
  return {verdict, n}
end
local held = tonumber(redis.call('HGET', KEYS[4], ARGV[1]) or '0')
if held + qty > tonumber(meta[4]) then
  return refuse('limit_exceeded', held)
end
if stock < qty then
  return refuse('sold_out', stock)
end
-- sku_load.lua sets the sequence; a loaded SKU without one has lost data, and
-- restarting it at 0 would hand out ids that already exist (I4).
local seq = tonumber(stock_seq[2])
if not seq then
  return redis.error_reply('SECKILL sequence key missing for a loaded SKU')
end
seq = seq + 1
local per_epoch = tonumber(ARGV[7])
if seq >= per_epoch then
  return {'exhausted'}
end

-- writes start here; the sequence and the stock in one write (this script
-- read both, and nothing runs between)
redis.call('MSET', KEYS[3], seq, KEYS[2], string.format('%.0f', stock - qty))
local id = string.format('%.0f', tonumber(meta[1]) * per_epoch + seq)
redis.call('HINCRBY', KEYS[4], ARGV[1], qty)
-- the journal names the buyer: only they may read the order while it is pending
redis.call('HSET', KEYS[5], id, 'pending:' .. ARGV[1])
local entry = redis.call('XADD', KEYS[6], '*', ARGV[9], id, ARGV[10], ARGV[1], ARGV[11], ARGV[2],
                         ARGV[12], ARGV[3])
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[7], ARGV[4] .. '|' .. id .. '@' .. entry, 'EX', ARGV[5])
end
return {'ok', id, stock - qty, entry}

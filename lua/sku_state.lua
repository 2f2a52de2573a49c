-- sku_state.lua: one consistent view of a SKU's Redis side, for reconciliation.
-- KEYS: 1 meta, 2 stock, 3 stream, 4 bought, 5 adjustments, 6 dead letters, 7 journal
-- ARGV: 1 '1' for the locked check's full view: count the journal's pending
--       entries and list every buyer's units (both read a whole hash, as long
--       as the sale has buyers: never for every pass's peek, which would stall
--       Redis for milliseconds every reconcile_interval_ms), '0' not
-- Returns {loaded (0/1), stock ('' when missing), entries in flight, open
--   adjustment records, dead letters, run the state was built on ('' unknown),
--   load epoch ('' unknown), bought as a flat user, units list (empty without
--   the full view), journal entries still 'pending'}
local loaded = redis.call('EXISTS', KEYS[1])
local meta = redis.call('HMGET', KEYS[1], 'built_run', 'loaded', 'epoch')
local pending = 0
local bought = {}
if ARGV[1] == '1' then
  -- the buyers' units only: reserve.lua keeps a buyer's order bucket beside
  -- them, under 'r:<user>'
  local all = redis.call('HGETALL', KEYS[4])
  for i = 1, #all, 2 do
    if string.find(all[i], '^%d') then
      bought[#bought + 1] = all[i]
      bought[#bought + 1] = all[i + 1]
    end
  end
  for _, state in ipairs(redis.call('HVALS', KEYS[7])) do
    if string.match(state, '^pending') then
      pending = pending + 1
    end
  end
end
return {loaded, redis.call('GET', KEYS[2]) or '', redis.call('XLEN', KEYS[3]),
        redis.call('HLEN', KEYS[5]), redis.call('XLEN', KEYS[6]), meta[1] or '',
        meta[2] or meta[3] or '', bought, pending}

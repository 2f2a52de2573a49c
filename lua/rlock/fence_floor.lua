-- rlock fence floor: raise a fence counter to at least the highest token the
-- fenced store (PostgreSQL) has already accepted, so the next acquisition
-- draws a larger one.  Used after the store refused a token, which happens
-- when Redis lost the counter and its clock is behind an earlier token.
-- KEYS[1] = fence counter key, ARGV[1] = highest token seen (integer >= 0).
-- Returns the counter after the call (never lowered).
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local seen = tonumber(ARGV[1])
if not cur or not seen then
    return redis.error_reply('rlock fence floor: counter or token is not a number')
end
if seen > cur then
    redis.call('SET', KEYS[1], string.format('%d', seen))
    cur = seen
end
return cur

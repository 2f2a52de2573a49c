-- rlock fenced acquire: take the lock keys exactly as SET NX PX would (value =
-- owner token, expiry = ttl; all or nothing) and, in the same atomic step,
-- draw the fencing token of this acquisition.
-- KEYS[1..n-1] = lock keys, KEYS[n] = fence counter key (same hash tag),
-- ARGV[1] = owner token, ARGV[2] = ttl in milliseconds.
-- Returns 0 if any lock key exists (nothing is written), else the token:
--   max(counter + 1, server time in microseconds), stored back in the counter.
-- "+ 1" keeps tokens increasing while the counter survives, even if the
-- server clock steps back; the clock term keeps them increasing when Redis
-- lost the counter (restart without persistence, failover to a lagging
-- replica, FLUSHALL), because every earlier token was at most the clock of
-- its own moment unless more than 1e6 tokens per second were drawn.  Lua
-- numbers are doubles: exact up to 2^53 microseconds, i.e. until year 2255.
if redis.replicate_commands then
    redis.replicate_commands() -- TIME before a write needs effects replication before Redis 5
end
local n = #KEYS
local fence = KEYS[n]
local cur = tonumber(redis.call('GET', fence) or '0')
if not cur then
    return redis.error_reply('rlock fence counter ' .. fence .. ' is not a number')
end
for i = 1, n - 1 do
    if redis.call('EXISTS', KEYS[i]) == 1 then
        return 0
    end
end
for i = 1, n - 1 do
    redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
local t = redis.call('TIME')
local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
if cur + 1 > token then
    token = cur + 1
end
redis.call('SET', fence, string.format('%d', token))
return token

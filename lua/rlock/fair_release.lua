-- rlock fair release: drop one hold of a fair lock; the last one deletes the
-- lock hash and wakes the waiter at the head of the queue on its own channel
-- (and Redisson's channel of the key, for Redisson waiters on the same lock).
-- KEYS[1] = lock key, KEYS[2] = waiter queue, KEYS[3] = waiter deadlines,
-- KEYS[4] = Redisson wake-up channel of the key.
-- ARGV[1] = lease in ms, ARGV[2] = owner field, ARGV[3] = prefix of the
-- waiters' channels (channel = prefix .. owner field).
-- Returns -1 if the owner holds nothing (refused), 0 if holds remain, 1 if freed.
if redis.replicate_commands then
    redis.replicate_commands()
end
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then
    return -1
end
local holds = redis.call('HINCRBY', KEYS[1], ARGV[2], -1)
if holds > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
    return 0
end
redis.call('DEL', KEYS[1])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stale = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, w in ipairs(stale) do
    redis.call('LREM', KEYS[2], 0, w)
    redis.call('ZREM', KEYS[3], w)
end
local head = redis.call('LINDEX', KEYS[2], 0)
if head then
    redis.call('PUBLISH', ARGV[3] .. head, '0')
end
redis.call('PUBLISH', KEYS[4], '0')
return 1

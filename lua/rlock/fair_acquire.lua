-- rlock fair acquire: FIFO hand-over of a Redisson-format lock hash (see
-- reentrant_acquire.lua) among waiters.
-- KEYS[1] = lock key, KEYS[2] = waiter queue (list of owner fields, oldest
-- first), KEYS[3] = waiter deadlines (zset: owner field -> server-time ms
-- after which the waiter counts as gone).
-- ARGV[1] = lease in ms, ARGV[2] = owner field, ARGV[3] = how long a queued
-- waiter keeps its place without asking again, in ms.
-- Every deadline is on the Redis server's clock (TIME), never the client's,
-- so clients with skewed clocks still agree on who gave up.
-- Returns {1, holds} when taken or re-entered, or {0, ms} when queued (or
-- still queued), ms = how long the lock stays busy (-1: unknown).
if redis.replicate_commands then
    redis.replicate_commands() -- TIME before writes (Redis < 5 needs this)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Waiters that stopped asking (gave up without cancelling, or died) are
-- pruned wherever they stand in the queue.
local stale = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, w in ipairs(stale) do
    redis.call('LREM', KEYS[2], 0, w)
    redis.call('ZREM', KEYS[3], w)
end

local ty = redis.call('TYPE', KEYS[1]).ok
if ty == 'hash' and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
    local holds = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
    return {1, holds}
end
if ty == 'none' then
    local head = redis.call('LINDEX', KEYS[2], 0)
    if not head or head == ARGV[2] then
        if head then
            redis.call('LPOP', KEYS[2])
            redis.call('ZREM', KEYS[3], ARGV[2])
        end
        redis.call('HSET', KEYS[1], ARGV[2], 1)
        redis.call('PEXPIRE', KEYS[1], ARGV[1])
        return {1, 1}
    end
end

-- Not our turn: join the tail, or keep our place by pushing our deadline.
if not redis.call('ZSCORE', KEYS[3], ARGV[2]) then
    redis.call('RPUSH', KEYS[2], ARGV[2])
end
local keep = tonumber(ARGV[3])
redis.call('ZADD', KEYS[3], now + keep, ARGV[2])
-- The queue lives as long as its longest-lived waiter could.
if redis.call('PTTL', KEYS[2]) < keep then
    redis.call('PEXPIRE', KEYS[2], keep)
    redis.call('PEXPIRE', KEYS[3], keep)
end
local ms = redis.call('PTTL', KEYS[1])
if ms < 0 then
    ms = -1 -- free but not our turn, or no expiry: unknown
end
return {0, ms}

-- rlock reentrant acquire, in Redisson's RLock format: the lock is a hash
-- whose one field "<instance-uuid>:<thread-id>" holds the owner's hold count,
-- and the hash carries the lease as its expiry.  A Redisson client and ours
-- therefore exclude each other on the same key.
-- KEYS[1] = lock key, ARGV[1] = lease in ms, ARGV[2] = owner field.
-- Returns {1, holds} when taken or re-entered (holds = new count), or
-- {0, ms} when another owner holds it, ms = its remaining lease (-1: unknown).
-- A key of another type (e.g. a simple lock's string) counts as busy rather
-- than failing with WRONGTYPE.
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' or (t == 'hash' and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1) then
    local holds = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
    return {1, holds}
end
local ms = redis.call('PTTL', KEYS[1])
if ms < 0 then
    ms = -1 -- free but not our turn, or no expiry: unknown
end
return {0, ms}

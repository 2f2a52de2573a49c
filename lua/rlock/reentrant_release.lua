-- rlock reentrant release (Redisson's RLock format, see
-- reentrant_acquire.lua): drop one hold; the last one deletes the hash
-- and publishes "0" on the lock's channel to wake waiters, as Redisson does.
-- KEYS[1] = lock key, KEYS[2] = wake-up channel (same hash tag as the key),
-- ARGV[1] = message ("0"), ARGV[2] = lease in ms (reset while holds remain),
-- ARGV[3] = owner field.
-- Returns -1 if the owner holds nothing (refused: not the owner, or the lease
-- expired), 0 if holds remain, 1 if the lock was freed.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' or redis.call('HEXISTS', KEYS[1], ARGV[3]) == 0 then
    return -1
end
local holds = redis.call('HINCRBY', KEYS[1], ARGV[3], -1)
if holds > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], ARGV[1])
return 1

-- rlock reentrant renew (the watchdog's step): reset the lease of a
-- Redisson-format lock hash, only while the owner field is still in it.
-- KEYS[1] = lock key, ARGV[1] = lease in ms, ARGV[2] = owner field.
-- Returns 1 if renewed, 0 if the lock is gone or held by someone else.
if redis.call('TYPE', KEYS[1]).ok == 'hash' and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
    return 1
end
return 0

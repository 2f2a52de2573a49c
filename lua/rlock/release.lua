-- rlock release: delete the lock only if it still holds our token.
-- KEYS[1] = lock key, ARGV[1] = owner token, ARGV[2] = optional wake-up
-- channel: when given, "0" is published on it after the delete so waiters
-- blocked on the key retry at once instead of at their next poll.
-- Returns 1 if deleted, 0 if the key is gone or held by another token.
-- Same format as redsync / node-redlock / redis-py, so locks interoperate
-- (they call it without ARGV[2]; nothing is published then).
if redis.call('GET', KEYS[1]) == ARGV[1] then
    local n = redis.call('DEL', KEYS[1])
    if ARGV[2] then
        redis.call('PUBLISH', ARGV[2], '0')
    end
    return n
end
return 0

-- rlock release: delete the lock only if it still holds our token.
-- KEYS[1] = lock key, ARGV[1] = owner token.
-- Returns 1 if deleted, 0 if the key is gone or held by another token.
-- Same format as redsync / node-redlock / redis-py, so locks interoperate.
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0

-- rlock multi-release: delete the lock keys that still hold our token and
-- leave alone any key that expired and was taken by someone else.
-- KEYS = lock keys, ARGV[1] = owner token, ARGV[1 + i] = optional wake-up
-- channel of KEYS[i]: when given, "0" is published on it after the delete.
-- Returns the number of keys deleted.
local n = 0
for i = 1, #KEYS do
    if redis.call('GET', KEYS[i]) == ARGV[1] then
        n = n + redis.call('DEL', KEYS[i])
        if ARGV[1 + i] then
            redis.call('PUBLISH', ARGV[1 + i], '0')
        end
    end
end
return n

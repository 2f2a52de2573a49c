-- rlock extend: reset the expiry of every lock key, but only if all of them
-- still hold our token (all-or-nothing, so a multi-lock never ends up with
-- keys expiring at different times).
-- KEYS = lock keys, ARGV[1] = owner token, ARGV[2] = new ttl in milliseconds.
-- Returns 1 if extended, 0 if any key is gone or held by another token.
-- With one key this is the redsync / node-redlock extend script.
for i = 1, #KEYS do
    if redis.call('GET', KEYS[i]) ~= ARGV[1] then
        return 0
    end
end
for i = 1, #KEYS do
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 1

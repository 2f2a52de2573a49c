-- rlock multi-acquire: take several lock keys with one token, all or nothing.
-- KEYS = lock keys (callers give them one hash tag so this runs on a cluster),
-- ARGV[1] = owner token, ARGV[2] = ttl in milliseconds.
-- Returns 1 if every key was set, 0 if any key already existed; in that case
-- nothing was written, so a failed attempt never leaves partial locks behind.
for i = 1, #KEYS do
    if redis.call('EXISTS', KEYS[i]) == 1 then
        return 0
    end
end
for i = 1, #KEYS do
    redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return 1

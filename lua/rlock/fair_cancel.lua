-- rlock fair cancel: a waiter that gives up leaves the queue at once, so the
-- ones behind it need not wait for its deadline to pass.  If it stood at the
-- head of the queue and the lock is free, the new head is woken.
-- KEYS[1] = lock key, KEYS[2] = waiter queue, KEYS[3] = waiter deadlines.
-- ARGV[1] = owner field, ARGV[2] = prefix of the waiters' channels.
-- Returns 1 if the waiter was queued, 0 if it was not.
local removed = redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
    local head = redis.call('LINDEX', KEYS[2], 0)
    if head then
        redis.call('PUBLISH', ARGV[2] .. head, '0')
    end
end
if removed > 0 then
    return 1
end
return 0

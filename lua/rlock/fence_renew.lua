-- rlock fence renew: a holder whose token was refused (a holder of another
-- lock drawn from the same counter wrote first) draws a newer token without
-- letting go: only if every lock key still holds its owner token.
-- KEYS[1..n-1] = lock keys, KEYS[n] = fence counter key (same hash tag),
-- ARGV[1] = owner token, ARGV[2] = floor (the newest token the protected
-- store has seen).  Returns 0 if any key is gone or owned by someone else,
-- else the new token: max(counter + 1, floor + 1, server time in us).
if redis.replicate_commands then
    redis.replicate_commands()
end
local n = #KEYS
for i = 1, n - 1 do
    if redis.call('GET', KEYS[i]) ~= ARGV[1] then
        return 0
    end
end
local cur = tonumber(redis.call('GET', KEYS[n]) or '0')
if not cur then
    return redis.error_reply('rlock fence counter ' .. KEYS[n] .. ' is not a number')
end
local floor = tonumber(ARGV[2])
if floor > cur then
    cur = floor
end
local t = redis.call('TIME')
local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
if cur + 1 > token then
    token = cur + 1
end
redis.call('SET', KEYS[n], string.format('%d', token))
return token

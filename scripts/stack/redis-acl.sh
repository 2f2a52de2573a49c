# shellcheck shell=bash
# Sourced by scripts/stack.sh: the Redis ACL users of every topology, their
# password files under DIR, and what each may do on a data node.  The
# Sentinels' own ACL is in sentinel.sh.

R_PW_BYTES=32
R_SVC_USER=seckill
R_PW_FILE=$DIR/redis-password
R_ADMIN_USER=seckill-admin
R_ADMIN_PW_FILE=$DIR/redis-admin-password
R_FUNC_USER=seckill-functions
R_FUNC_PW_FILE=$DIR/redis-functions-password
R_ADMIN_URL_FILE=$DIR/redis-admin-url
R_FUNC_URL_FILE=$DIR/redis-functions-url
# Sentinel and cluster topologies: replicas log in to their master as this
# user; in the Sentinel topology the Sentinels log in as the other.
R_REPL_USER=seckill-replication
R_REPL_PW_FILE=$DIR/redis-replication-password
R_SENT_USER=seckill-sentinel
R_SENT_PW_FILE=$DIR/redis-sentinel-password

# The service's ACL user may use its own keys and channels and the commands
# that seckilld, seckillctl, seckill-loadtest, the lock library and the Lua
# functions send (functions run with their caller's rights), nothing else: no
# FLUSHALL, FLUSHDB, CONFIG, KEYS, DEBUG, SHUTDOWN, REPLICAOF, MONITOR, MODULE
# or ACL; and no code of its own: it calls the functions `seckilld migrate`
# loaded as the admin user (FCALL, FCALL_RO), never EVAL, EVALSHA, SCRIPT or
# FUNCTION, so that its password cannot block Redis with a endless script.  Keys: every key of a SKU, its locks and fencing counters start with
# seckill: (service/core/keys.c).  Channels: seckill:decisions and the lock
# library's release notices of those locks.
R_SVC_KEYS='~seckill:*'
R_SVC_CHANNELS='&seckill:* &rlock:release:seckill:*'
R_SVC_COMMANDS=(
    # connection: handshake, health, seckillctl's reply alignment
    auth select ping echo
    # run id of the server a SKU was built on (a restart may have lost writes)
    info
    # the service's functions (lua/, loaded by migrate), replicas of a lock
    fcall fcall_ro wait
    # plain keys, in C and in lua/*.lua, lua/rlock/*.lua
    get set mget mset del exists type pttl pexpire incrby decrby time
    hget hset hdel hgetall hkeys hlen hmget hvals hincrby hscan
    # order streams and their consumer group; /metrics reads the group's lag
    xadd xack xdel xlen xrange xreadgroup xautoclaim 'xgroup|create' 'xinfo|groups'
    # decisions and lock wake-ups; seckillctl lock list / force-release
    publish subscribe unsubscribe scan multi exec
)
# Cluster topology: what a cluster client asks besides (where the slots are,
# which node it is on, a key's slot; ASKING during a slot's migration,
# READONLY/READWRITE to read from a replica).  Not CLUSTER RESET, FAILOVER,
# SETSLOT, ADDSLOTS, FORGET, MEET or NODES: the layout is the operator's.
R_SVC_CLUSTER_COMMANDS=(
    'cluster|slots' 'cluster|shards' 'cluster|info' 'cluster|myid' 'cluster|keyslot'
    asking readonly readwrite
)
# The daemon's self-healing (redis_functions_url): after a restart that lost
# everything it loads its functions library again, and may do nothing else:
# no key, no channel, no other code than what FUNCTION LOAD compiles (which
# only registers functions; running them is FCALL, the service's right).
# With it, a leaked password of this user can replace the library; keep it
# apart from the service's if that matters more than healing by itself.
# INFO: behind Sentinel every connection first asks the node whether it is
# the master (INFO replication), as the service's does.
R_FUNC_COMMANDS=(select ping info 'function|load' 'function|list')
# Sentinel and cluster topologies.  A replica logs in to its master with what
# replication takes and nothing else.
R_REPL_COMMANDS=(psync replconf ping)
# What a Sentinel sends to a data node (Redis 7.0's Sentinel documentation):
# hellos on its channel, INFO and ROLE to watch it, and a failover's MULTI,
# SLAVEOF, CONFIG REWRITE, CLIENT KILL (of the old clients) and EXEC.  No key.
R_SENT_CHANNELS='&__sentinel__:hello'
R_SENT_COMMANDS=(
    ping info role publish subscribe 'client|setname' 'client|kill'
    multi exec slaveof 'config|rewrite' 'script|kill'
)

sha256_hex() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }

# acl_allow CMD...: " +cmd1 +cmd2 ..."
acl_allow() {
    local out
    printf -v out ' +%s' "$@"
    printf '%s' "$out"
}

# redis_acl_rules SERVICE_PW ADMIN_PW [REPLICATION_PW [SENTINEL_PW]]: the ACL
# lines of redis.conf (passwords as SHA-256, so the config holds no password);
# the replication and Sentinel users only with their passwords (Sentinel
# topology: both; cluster: replication only).  In the cluster topology
# (CLUSTER=1) the service's user may also ask the cluster's layout.
redis_acl_rules() {
    local svc_hash admin_hash func_hash
    local -a svc_commands=("${R_SVC_COMMANDS[@]}") func_commands=("${R_FUNC_COMMANDS[@]}")
    ((CLUSTER)) && svc_commands+=("${R_SVC_CLUSTER_COMMANDS[@]}") &&
        func_commands+=('cluster|slots' 'cluster|shards')
    svc_hash=$(sha256_hex "$1")
    func_hash=$(sha256_hex "$(ensure_password "$R_FUNC_PW_FILE" "$R_PW_BYTES")")
    admin_hash=$(sha256_hex "$2")
    # Nobody can log in as the default user (off, no password), but it keeps
    # every right: Redis 7.0 replays the AOF as that user and re-checks the
    # ACL at each EXEC, so a default user without rights would silently drop
    # every script's writes (MULTI/EXEC in the AOF) on a restart (redis
    # #14541, valkey #3983).
    printf 'user default off resetpass ~* &* +@all\n'
    printf 'user %s on #%s resetkeys %s resetchannels %s -@all%s\n' \
        "$R_SVC_USER" "$svc_hash" "$R_SVC_KEYS" "$R_SVC_CHANNELS" "$(acl_allow "${svc_commands[@]}")"
    printf 'user %s on #%s ~* &* +@all\n' "$R_ADMIN_USER" "$admin_hash"
    printf 'user %s on #%s resetkeys resetchannels -@all%s\n' \
        "$R_FUNC_USER" "$func_hash" "$(acl_allow "${func_commands[@]}")"
    [[ -n ${3:-} ]] || return 0
    printf 'user %s on #%s resetkeys resetchannels -@all%s\n' \
        "$R_REPL_USER" "$(sha256_hex "$3")" "$(acl_allow "${R_REPL_COMMANDS[@]}")"
    [[ -n ${4:-} ]] || return 0
    printf 'user %s on #%s resetkeys resetchannels %s -@all%s\n' \
        "$R_SENT_USER" "$(sha256_hex "$4")" "$R_SENT_CHANNELS" "$(acl_allow "${R_SENT_COMMANDS[@]}")"
}

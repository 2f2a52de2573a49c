#!/usr/bin/env bash
# Project-local Redis + PostgreSQL, loopback only, no systemd.
#
#   scripts/stack.sh start  DIR   start both (idempotent); writes DIR/env
#   scripts/stack.sh stop   DIR   stop both (missing/stopped parts are fine)
#   scripts/stack.sh status DIR   print state; exit 0 only if both are up
#
# start reads SECKILL_REDIS_PORT (default 6380) and SECKILL_PG_PORT (default
# 5433).  stop/status use the ports recorded in DIR's generated configs.
# Every Redis data node gets maxmemory SECKILL_REDIS_MAXMEMORY (default 64mb)
# with maxmemory-policy noeviction (README, "Redis memory").
#
# SECKILL_REDIS_TOPOLOGY=sentinel (default single: one Redis) makes start run
# Redis behind Sentinel: the master on SECKILL_REDIS_PORT, one replica on
# SECKILL_REDIS_REPLICA_PORT (default the master's + 1) and the Sentinels on
# SECKILL_SENTINEL_PORTS (default 26380,26381,26382), all on loopback, all as
# the same OS user; DIR/env then names the Sentinels (redis-sentinel://).
# stop and status handle whatever DIR holds.  After a failover the replica's
# node stays the master: start asks the Sentinels (or their last config) which
# node is master and starts the other one as its replica.
#
# SECKILL_REDIS_TOPOLOGY=cluster makes start run a Redis Cluster instead: the
# masters on SECKILL_REDIS_CLUSTER_PORTS (default 6390,6391,6392; at least 3),
# SECKILL_REDIS_CLUSTER_REPLICAS replicas of each (default 1; 0 allowed) on
# SECKILL_REDIS_CLUSTER_REPLICA_PORTS (default 6393 and up, one port per
# replica), cluster-node-timeout SECKILL_REDIS_CLUSTER_NODE_TIMEOUT_MS (default
# 1000); each node's cluster bus is on its port + 10000, so ports are at most
# 55535.  The first start of DIR creates the cluster (redis-cli --cluster
# create); later starts start the nodes that are down, on the ports DIR
# recorded, and wait for cluster_state:ok (a master that was failed over comes
# back as a replica by itself).  DIR/env then names the masters' ports as seed
# nodes (redis-cluster://).
#
# Neither server runs as root: as root, PostgreSQL runs as 'postgres' and Redis
# as 'redis' (Debian's package users), else as a 'seckill' system user created
# here; as anyone else, as that user.  Redis has no default user: the service
# authenticates as the ACL user 'seckill' (its keys, channels and commands
# only), this script and the tests' resets as 'seckill-admin'.  PostgreSQL's
# superuser 'seckill' (initdb's) is for this script and the tests' resets
# only: the role 'seckill_owner' owns the database and runs the migrations,
# the service logs in as 'seckill_app' (no attribute beyond LOGIN; the rows
# it uses, granted by migrations/0004_service_role.sql).
#
# Layout of DIR:
#   redis/        redis.conf (ACL users, password hashes), redis.pid, redis.log,
#                 AOF files; owned by the Redis OS user
#   redis-password        password of ACL user seckill (mode 600)
#   redis-admin-password  password of ACL user seckill-admin (mode 600)
#   redis-functions-password  of the ACL user seckill-functions (may only
#                 FUNCTION LOAD: the daemon's self-healing; mode 600)
#   redis-admin-url, redis-functions-url  the Redis URL as seckill-admin
#                 (migrate loads the functions) and as seckill-functions
#                 (mode 600)
#   sentinel topology only:
#   redis-replica/        the same as redis/, for the replica (its own AOF)
#   sentinel-N/           sentinel.conf (written on each start of that
#                 Sentinel, which rewrites it while it runs), sentinel.pid,
#                 sentinel.log; owned by the Redis OS user
#   redis-replication-password  password of ACL user seckill-replication
#                 (replicas log in to their master as it; mode 600)
#   redis-sentinel-password     password of ACL user seckill-sentinel (the
#                 Sentinels log in to the data nodes and to each other; 600)
#   cluster topology only (redis/ is not used):
#   redis-cluster-N/      a node: redis.conf, nodes.conf (the cluster's state,
#                 Redis's own), redis.pid, redis.log, AOF files; N = 1.. the
#                 masters of the first start (SECKILL_REDIS_CLUSTER_PORTS), then
#                 their replicas; owned by the Redis OS user
#   redis-replication-password  as above (replicas log in to their master)
#   redis-topology        the topology of the last start (single, sentinel or
#                 cluster), for status
#   pg/data/      PGDATA (seckill.conf there holds our settings)
#   pg/run/       unix socket directory
#   pg.log        server log (pg_ctl -l)
#   pg-password   superuser password of role seckill (mode 600)
#   pg-owner-password, pg-app-password  passwords of seckill_owner and
#                 seckill_app (mode 600)
#   pgpass        libpq password file of the service: seckill_app only (mode 600)
#   pgpass-owner  the same for seckill_owner (migrations; mode 600)
#   pgpass-admin  the same for the superuser (this script, tests; mode 600)
#   env           `export` lines to source (mode 600: the Redis URL holds the
#                 service user's password): the service's DSN and PGPASSFILE,
#                 and SECKILL_MIGRATE_PG_DSN (the owner, its own passfile),
#                 SECKILL_MIGRATE_REDIS_URL_FILE and
#                 SECKILL_REDIS_FUNCTIONS_URL_FILE (the two files below);
#                 with Sentinel also SECKILL_REDIS_TOPOLOGY,
#                 SECKILL_REDIS_REPLICA_PORT and SECKILL_SENTINEL_PORTS; with
#                 the cluster SECKILL_REDIS_TOPOLOGY,
#                 SECKILL_REDIS_CLUSTER_PORTS, SECKILL_REDIS_CLUSTER_REPLICA_PORTS
#
# Exit codes: 0 ok, 1 failure, 2 usage, 3 a port is already taken by
# something else (callers may retry with other ports).
set -euo pipefail

PROG=stack.sh
SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REDIS_WAIT_TENTHS=100 # 10 s
PG_CTL_TIMEOUT=30
LOCK_WAIT=60

# The Sentinel topology.  Short timings, for tests and a local demo: a master
# that does not answer for S_DOWN_AFTER_MS is down once S_QUORUM Sentinels
# say so; S_FAILOVER_TIMEOUT_MS bounds a failover's steps (and is the pause
# before the same master is failed over again).
# S_DOWN_AFTER_MS is three times the once-a-second rhythm in which a Sentinel
# pings and reconnects (SENTINEL_PING_PERIOD, Redis's own).  At 1000 a
# Sentinel that had just switched to the promoted replica could find it
# silent for that second while its new link came up, and with its peers'
# "down" answers about the old master still fresh (kept 5 s) it took that
# for a quorum and failed over again, back to the old master restarted as
# a replica a moment before (seen in test_stack_ha.sh, about one run in 20
# on a loaded machine; redis/redis#8607 reports the same at 500).
S_MASTER_NAME=seckill
S_QUORUM=2
S_DOWN_AFTER_MS=3000
S_FAILOVER_TIMEOUT_MS=5000
S_PARALLEL_SYNCS=1
S_DEFAULT_PORTS=26380,26381,26382
S_MAX_COUNT=9
# start waits this long for the replica to follow and every Sentinel to know
# the master, the replica and the other Sentinels (a failover needs them).
S_READY_WAIT_TENTHS=300 # 30 s
# A master refuses writes unless this many replicas follow it, none more than
# the lag (s) behind (SECKILL_REDIS_MIN_REPLICAS_TO_WRITE, default 0): with
# 1, a write acknowledged by a master that a failover then discards cannot
# happen, but with this stack's one replica every write stops from a failover
# until the old master is back.  The default keeps selling after a failover
# (the service's durable answers are PostgreSQL commits; what Redis loses,
# the reconciliation rebuilds); a deployment with two replicas sets 1.
R_MIN_REPLICAS_TO_WRITE=${SECKILL_REDIS_MIN_REPLICAS_TO_WRITE:-0}
R_MIN_REPLICAS_MAX_LAG=10
# Every data node's memory bound (SECKILL_REDIS_MAXMEMORY: bytes, or with a
# kb/mb/gb suffix; README "Redis memory" sizes it).  Without one, buyers'
# remembered keys could grow Redis until the OS kills it.  noeviction: Redis
# refuses a write that would need memory (the service answers 503) rather
# than drop a stock, journal or stream key, which would oversell or lose an
# order.  Replicas get the same bound: a failover promotes one.
R_MAXMEMORY=${SECKILL_REDIS_MAXMEMORY:-64mb}
R_MAXMEMORY_POLICY=noeviction

# The cluster topology.  A node that does not answer for the node timeout is
# suspected, failed once most masters say so, and its replica elected about a
# second later: the short default keeps failover tests quick.
C_DEFAULT_PORTS=6390,6391,6392
C_DEFAULT_REPLICA_BASE=6393 # the replicas' default ports: from here up
C_DEFAULT_REPLICAS=1
C_DEFAULT_NODE_TIMEOUT_MS=1000
C_MIN_MASTERS=3 # redis-cli --cluster create wants at least three
C_MAX_MASTERS=9
C_MAX_REPLICAS=3
C_BUS_OFFSET=10000 # a node's cluster bus port is its port + this (Redis's default)
C_MAX_PORT=$((65535 - C_BUS_OFFSET))
C_SLOTS=16384
# redis-cli --cluster create: meets, slots, replicas, and its own wait for
# the nodes to agree.
C_CREATE_TIMEOUT=60
# start waits this long for every node to say cluster_state:ok with every
# slot assigned, to know every node, and for every replica's link to be up.
C_READY_WAIT_TENTHS=300 # 30 s
C_NODE_TIMEOUT_MS=$C_DEFAULT_NODE_TIMEOUT_MS # start: SECKILL_REDIS_CLUSTER_NODE_TIMEOUT_MS
C_SEED_PORTS=    # start: the masters' ports when the cluster was made (DIR/env)
C_REPLICA_PORTS= # start: the other nodes' ports

die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 1
}
# redis_bytes SIZE: SIZE (digits, then kb/mb/gb or nothing) in bytes, as
# Redis reads its config (a kb is 1024).
redis_bytes() {
    local v=${1,,} n
    n=${v%%[a-z]*}
    case ${v#"$n"} in
    kb) echo $((n * 1024)) ;;
    mb) echo $((n * 1048576)) ;;
    gb) echo $((n * 1073741824)) ;;
    *) echo "$n" ;;
    esac
}
warn() { printf '%s: %s\n' "$PROG" "$*" >&2; }
info() { printf '%s: %s\n' "$PROG" "$*"; }

usage() {
    printf 'usage: %s {start|stop|status} DIR\n' "$0" >&2
    exit 2
}

# Print the last lines of a log file to stderr, if it exists.
log_tail() {
    local f=$1
    if [[ -r $f ]]; then
        printf -- '--- last lines of %s ---\n' "$f" >&2
        tail -n 40 "$f" >&2 || true
        printf -- '--- end of %s ---\n' "$f" >&2
    else
        printf '(no log at %s)\n' "$f" >&2
    fi
}

valid_port() { [[ $1 =~ ^[0-9]+$ ]] && ((10#$1 >= 1 && 10#$1 <= 65535)); }

# True if something listens on 127.0.0.1:PORT (or any address with that port).
port_busy() {
    local port=$1
    if command -v ss >/dev/null 2>&1; then
        [[ -n $(ss -ltnH "sport = :$port" 2>/dev/null) ]]
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
    fi
}

# True if PID is alive (not a zombie) and its command name starts with NAME.
pid_is() {
    local pid=$1 name=$2 comm stat
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    [[ -r /proc/$pid/stat ]] || return 0 # no /proc: trust kill -0
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z && $comm == "$name"* ]]
}

random_hex() { # random_hex NBYTES
    od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'
}

# Write stdin to FILE atomically with MODE.
write_file() {
    local file=$1 mode=$2 tmp
    tmp=$(mktemp "$file.XXXXXX")
    cat >"$tmp"
    chmod "$mode" "$tmp"
    mv -f "$tmp" "$file"
}

# ---------------------------------------------------------------- setup

[[ $# -eq 2 ]] || usage
CMD=$1
DIR_ARG=$2
case $CMD in start | stop | status) ;; *) usage ;; esac

if [[ $CMD == start ]]; then
    mkdir -p "$DIR_ARG"
elif [[ ! -d $DIR_ARG ]]; then
    if [[ $CMD == stop ]]; then
        info "nothing to stop: $DIR_ARG does not exist"
        exit 0
    fi
    info "redis: stopped (no $DIR_ARG)"
    info "postgres: stopped (no $DIR_ARG)"
    exit 1
fi
DIR=$(cd "$DIR_ARG" && pwd -P)
case $DIR in
*[\"\'\\]* | *$'\n'*) die "directory path must not contain quotes, backslashes or newlines: $DIR" ;;
esac

R_DIR=$DIR/redis
R_CONF=$R_DIR/redis.conf
PG_DIR=$DIR/pg
PG_DATA=$PG_DIR/data
PG_RUN=$PG_DIR/run
PG_CONF=$PG_DATA/seckill.conf
PG_LOG=$DIR/pg.log
PG_PWFILE=$DIR/pg-password
PG_OWNER_PWFILE=$DIR/pg-owner-password
PG_APP_PWFILE=$DIR/pg-app-password
PGPASS=$DIR/pgpass
PGPASS_OWNER=$DIR/pgpass-owner
PGPASS_ADMIN=$DIR/pgpass-admin
ENV_FILE=$DIR/env
PG_DB=seckill
PG_ROLE=seckill # the superuser: initdb, roles, the tests' resets
PG_OWNER=seckill_owner
PG_APP=seckill_app
R_PW_FILE=$DIR/redis-password
R_ADMIN_PW_FILE=$DIR/redis-admin-password
R_SVC_USER=seckill
R_PW_BYTES=32
PG_PW_BYTES=16
R_ADMIN_USER=seckill-admin
R_FUNC_PW_FILE=$DIR/redis-functions-password
R_FUNC_USER=seckill-functions
R_ADMIN_URL_FILE=$DIR/redis-admin-url
R_FUNC_URL_FILE=$DIR/redis-functions-url
RR_DIR=$DIR/redis-replica
R_REPL_PW_FILE=$DIR/redis-replication-password
R_REPL_USER=seckill-replication
R_SENT_PW_FILE=$DIR/redis-sentinel-password
R_SENT_USER=seckill-sentinel
TOPOLOGY_FILE=$DIR/redis-topology

IS_ROOT=0
[[ $(id -u) -eq 0 ]] && IS_ROOT=1
HA=0      # 1: the Sentinel topology (start: requested; status: DIR's)
CLUSTER=0 # 1: the cluster topology, likewise

# Serialise concurrent invocations on the same DIR.  Daemons are started
# with fd 9 closed so they never inherit the lock.
if command -v flock >/dev/null 2>&1; then
    exec 9>>"$DIR/.stack.lock"
    flock -w "$LOCK_WAIT" 9 || die "could not lock $DIR/.stack.lock within ${LOCK_WAIT}s (another stack.sh running?)"
fi

# ---------------------------------------------------------------- OS users

# stack_os_user DIR PREFERRED: the OS user that owns and runs a server whose
# files are under DIR (root only): DIR's owner when it is not root, else
# PREFERRED (Debian's package user) when it exists, else the system user
# 'seckill', created if missing.
stack_os_user() {
    local dir=$1 preferred=$2 owner
    if [[ -d $dir ]]; then
        owner=$(stat -c %U "$dir")
        if [[ $owner != root && $owner != UNKNOWN ]]; then
            printf '%s\n' "$owner"
            return 0
        fi
    fi
    if id -u "$preferred" >/dev/null 2>&1; then
        printf '%s\n' "$preferred"
        return 0
    fi
    if ! id -u seckill >/dev/null 2>&1; then
        warn "creating system user 'seckill' to run the stack's servers"
        useradd --system --user-group --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin seckill >&2 || die "useradd seckill failed"
    fi
    printf 'seckill\n'
}

# as_user USER CMD...: runs CMD as USER (root), or as ourselves, from / (the
# user's home may be unreadable).
as_user() {
    local user=$1
    shift
    if ((IS_ROOT)); then
        (cd / && runuser -u "$user" -- "$@")
    else
        (cd / && "$@")
    fi
}

# fix_traversal USER TARGET: makes every ancestor of DIR traversable by USER
# (root only), so that it can reach TARGET.
fix_traversal() {
    ((IS_ROOT)) || return 0
    local user=$1 target=$2 d=$DIR
    local -a chain=()
    while :; do
        chain=("$d" "${chain[@]}")
        [[ $d == / ]] && break
        d=$(dirname "$d")
    done
    for d in "${chain[@]}"; do
        if ! runuser -u "$user" -- test -x "$d" 2>/dev/null; then
            warn "note: adding o+x to $d so that user '$user' can reach $target"
            chmod o+x "$d"
            runuser -u "$user" -- test -x "$d" 2>/dev/null ||
                die "user '$user' still cannot traverse $d; move DIR somewhere accessible"
        fi
    done
}

# ensure_password FILE NBYTES: FILE holds NBYTES random bytes in hex (mode
# 600), made if missing; prints them.
ensure_password() {
    local file=$1 nbytes=$2 pw
    if [[ ! -s $file ]]; then
        (
            umask 077
            random_hex "$nbytes" >"$file.tmp"
            mv -f "$file.tmp" "$file"
        )
    fi
    chmod 600 "$file"
    pw=$(tr -dc '0-9a-f' <"$file")
    [[ ${#pw} -eq $((2 * nbytes)) ]] ||
        die "$file does not hold a $((2 * nbytes))-hex-digit password; delete it to regenerate"
    printf '%s\n' "$pw"
}

# ---------------------------------------------------------------- redis

# A Redis process of the stack (a node) lives in its own directory: redis/
# (the data node, the master of a new stack), redis-replica/ and sentinel-N/
# (Sentinel topology), redis-cluster-N/ (cluster topology), each holding
# KIND.conf, KIND.pid and KIND.log, KIND being redis or sentinel.
node_kind() {
    case ${1##*/} in
    sentinel-*) printf 'sentinel\n' ;;
    *) printf 'redis\n' ;;
    esac
}
node_file() { printf '%s/%s.%s\n' "$1" "$(node_kind "$1")" "$2"; } # node_file NODE conf|pid|log
node_label() { printf '%s\n' "${1##*/}"; }
# The command name of the node's process (pid_is) and its server binary.
node_comm() {
    if [[ $(node_kind "$1") == sentinel ]]; then printf 'redis-sentinel\n'; else printf 'redis\n'; fi
}
node_binary() {
    if [[ $(node_kind "$1") == sentinel ]]; then printf 'redis-sentinel\n'; else printf 'redis-server\n'; fi
}

# Port recorded in the node's generated config (empty if none).
node_port() {
    local conf
    conf=$(node_file "$1" conf)
    [[ -r $conf ]] || return 0
    awk '$1 == "port" { print $2; exit }' "$conf"
}

node_pid() {
    local pidfile
    pidfile=$(node_file "$1" pid)
    [[ -r $pidfile ]] || return 0
    head -n1 "$pidfile" 2>/dev/null | tr -dc '0-9'
}

# True if the node's process (pid file) is alive, answering or not.
node_alive() {
    local pid
    pid=$(node_pid "$1")
    [[ -n $pid ]] && pid_is "$pid" "$(node_comm "$1")"
}

# redis_admin PORT ARGS...: redis-cli as the admin ACL user (the password
# goes through the environment, not the command line).  The Sentinels have
# the same admin user.
redis_admin() {
    local port=$1 pw
    shift
    [[ -r $R_ADMIN_PW_FILE ]] || return 1
    pw=$(tr -dc '0-9a-f' <"$R_ADMIN_PW_FILE")
    REDISCLI_AUTH=$pw timeout 5 redis-cli --user "$R_ADMIN_USER" -h 127.0.0.1 -p "$port" "$@"
}

redis_ping() { # redis_ping PORT
    local out
    out=$(redis_admin "$1" ping 2>/dev/null) || return 1
    [[ $out == PONG ]]
}

# True if the node's process (pid file) is alive and answers on its port.
node_up() {
    local pid port
    pid=$(node_pid "$1")
    port=$(node_port "$1")
    [[ -n $pid && -n $port ]] || return 1
    pid_is "$pid" "$(node_comm "$1")" && redis_ping "$port"
}

# The Sentinels' directories, in order (sentinel-1, sentinel-2, ...).
sentinel_dirs() {
    local d
    for d in "$DIR"/sentinel-[0-9]*; do
        [[ -d $d ]] && printf '%s\n' "$d"
    done | sort -V
}

# The cluster's nodes' directories, in order (redis-cluster-1, ...).
cluster_dirs() {
    local d
    for d in "$DIR"/redis-cluster-[0-9]*; do
        [[ -d $d ]] && printf '%s\n' "$d"
    done | sort -V
}

# The topology DIR's Redis was last started with: what start recorded, else
# (a DIR of an older stack.sh) sentinel when the data node's config names a
# replication user (both data nodes' do), else single.
dir_topology() {
    local t=
    if [[ -r $TOPOLOGY_FILE ]]; then read -r t <"$TOPOLOGY_FILE" || true; fi
    case $t in
    single | sentinel | cluster) printf '%s\n' "$t" ;;
    *)
        if [[ -r $R_CONF ]] && grep -q '^masteruser ' "$R_CONF"; then
            printf 'sentinel\n'
        else
            printf 'single\n'
        fi
        ;;
    esac
}

# The topology of what runs in DIR now: none, single, sentinel or cluster.
running_topology() {
    local d
    local -a ha=("$RR_DIR")
    mapfile -t -O 1 ha < <(sentinel_dirs)
    for d in "${ha[@]}"; do
        if node_alive "$d"; then
            printf 'sentinel\n'
            return 0
        fi
    done
    while read -r d; do
        if node_alive "$d"; then
            printf 'cluster\n'
            return 0
        fi
    done < <(cluster_dirs)
    if node_alive "$R_DIR"; then
        d=$(dir_topology)
        printf '%s\n' "${d/cluster/single}"
    else
        printf 'none\n'
    fi
}

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
# On the Sentinels, the service's user may ask where the master is and hear
# of a switch, nothing else (no SENTINEL SET, FAILOVER, RESET or CONFIG).
S_SVC_CHANNELS='&+switch-master'
S_SVC_COMMANDS=(
    auth hello ping role subscribe psubscribe unsubscribe punsubscribe
    'sentinel|get-master-addr-by-name' 'sentinel|masters' 'sentinel|master' 'sentinel|sentinels'
)
# What one Sentinel sends another: its hellos, and in a failover the question
# whether the master is down, which also asks for its vote.
S_PEER_CHANNELS='&__sentinel__:hello'
S_PEER_COMMANDS=(auth ping publish 'client|setname' 'sentinel|is-master-down-by-addr')

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

# sentinel_acl_rules SERVICE_PW ADMIN_PW SENTINEL_PW: the ACL lines of a
# Sentinel: nobody without a password, the service's user to find the master
# (the same password as on the data nodes: one URL), the admin user for this
# script and the tests, and the Sentinels' own user for each other.
sentinel_acl_rules() {
    printf 'user default off resetpass resetkeys resetchannels -@all\n'
    printf 'user %s on #%s resetkeys resetchannels %s -@all%s\n' \
        "$R_SVC_USER" "$(sha256_hex "$1")" "$S_SVC_CHANNELS" "$(acl_allow "${S_SVC_COMMANDS[@]}")"
    printf 'user %s on #%s ~* &* +@all\n' "$R_ADMIN_USER" "$(sha256_hex "$2")"
    # the self-healing user finds the master as the service's does
    printf 'user %s on #%s resetkeys resetchannels %s -@all%s\n' \
        "$R_FUNC_USER" "$(sha256_hex "$(ensure_password "$R_FUNC_PW_FILE" "$R_PW_BYTES")")" \
        "$S_SVC_CHANNELS" "$(acl_allow "${S_SVC_COMMANDS[@]}")"
    printf 'user %s on #%s resetkeys resetchannels %s -@all%s\n' \
        "$R_SENT_USER" "$(sha256_hex "$3")" "$S_PEER_CHANNELS" "$(acl_allow "${S_PEER_COMMANDS[@]}")"
}

# The OS user of every Redis process of the stack: the one of the data node
# redis/ (as root: its directory's owner, else Debian's 'redis'; in a DIR
# that only ever held a cluster, the first cluster node's), so that the
# replica, the Sentinels and the cluster's nodes run as the same user.
R_USER=
redis_user_init() {
    local owner_dir=$R_DIR
    [[ -n $R_USER ]] && return 0
    [[ ! -d $R_DIR && -d $DIR/redis-cluster-1 ]] && owner_dir=$DIR/redis-cluster-1
    if ((IS_ROOT)); then
        R_USER=$(stack_os_user "$owner_dir" redis)
    else
        R_USER=$(id -un)
    fi
}

# redis_write_conf NODE PORT [MASTER_PORT]: a data node's redis.conf; in the
# Sentinel topology (HA=1) the replica of MASTER_PORT when given; in the
# cluster topology (CLUSTER=1) a cluster node (the cluster says who follows
# whom).
redis_write_conf() {
    local d=$1 port=$2 master=${3:-} svc_pw admin_pw repl_pw='' sent_pw=''
    svc_pw=$(ensure_password "$R_PW_FILE" "$R_PW_BYTES")
    admin_pw=$(ensure_password "$R_ADMIN_PW_FILE" "$R_PW_BYTES")
    if ((HA)); then
        repl_pw=$(ensure_password "$R_REPL_PW_FILE" "$R_PW_BYTES")
        sent_pw=$(ensure_password "$R_SENT_PW_FILE" "$R_PW_BYTES")
    elif ((CLUSTER)); then
        repl_pw=$(ensure_password "$R_REPL_PW_FILE" "$R_PW_BYTES")
    fi
    {
        cat <<EOF
# generated by scripts/stack.sh; rewritten on every start
bind 127.0.0.1
port $port
protected-mode yes
daemonize yes
supervised no
dir "$d"
pidfile "$d/redis.pid"
logfile "$d/redis.log"
loglevel notice
appendonly yes
appendfsync everysec
save ""
# DEBUG for the admin user (fault scripts); the ACL keeps it from the service.
enable-debug-command local
maxmemory $R_MAXMEMORY
maxmemory-policy $R_MAXMEMORY_POLICY
$(redis_acl_rules "$svc_pw" "$admin_pw" "$repl_pw" "$sent_pw")
EOF
        # Both data nodes: either may be the replica (now, or once a failover
        # swapped them), and the master must refuse writes no replica takes.
        if ((HA)); then
            cat <<EOF
# Sentinel topology: a replica logs in to its master as $R_REPL_USER.
masteruser $R_REPL_USER
masterauth $repl_pw
min-replicas-to-write $R_MIN_REPLICAS_TO_WRITE
min-replicas-max-lag $R_MIN_REPLICAS_MAX_LAG
EOF
            [[ -z $master ]] || printf 'replicaof 127.0.0.1 %s\n' "$master"
        fi
        # Cluster: the node's state (who it is, its peers, its slots) is
        # Redis's own nodes.conf in its directory, kept across starts; the
        # bus (node to node, no login) listens on loopback like the port.
        if ((CLUSTER)); then
            cat <<EOF
# Cluster topology: a replica logs in to its master as $R_REPL_USER.
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout $C_NODE_TIMEOUT_MS
cluster-port $((port + C_BUS_OFFSET))
masteruser $R_REPL_USER
masterauth $repl_pw
EOF
        fi
    } | write_file "$d/redis.conf" 600
}

# sentinel_write_conf NODE PORT MASTER_PORT: a Sentinel's config, fresh: it
# watches the master on MASTER_PORT (the one that is master now), logs in to
# the data nodes and to the other Sentinels as their own user.
sentinel_write_conf() {
    local d=$1 port=$2 master=$3 conf myid='' svc_pw admin_pw sent_pw
    conf=$d/sentinel.conf
    svc_pw=$(ensure_password "$R_PW_FILE" "$R_PW_BYTES")
    admin_pw=$(ensure_password "$R_ADMIN_PW_FILE" "$R_PW_BYTES")
    sent_pw=$(ensure_password "$R_SENT_PW_FILE" "$R_PW_BYTES")
    # The id it wrote last time is kept: the other Sentinels see the same
    # Sentinel come back, not a new one that takes over its address.
    if [[ -r $conf ]]; then
        myid=$(awk '$1 == "sentinel" && $2 == "myid" { print $3; exit }' "$conf")
        [[ $myid =~ ^[0-9a-f]{40}$ ]] || myid=
    fi
    {
        cat <<EOF
# generated by scripts/stack.sh on every start of this Sentinel, which
# rewrites it while it runs (what it learns of the master and its peers)
bind 127.0.0.1
port $port
protected-mode yes
daemonize yes
dir "$d"
pidfile "$d/sentinel.pid"
logfile "$d/sentinel.log"
loglevel notice
EOF
        [[ -z $myid ]] || printf 'sentinel myid %s\n' "$myid"
        cat <<EOF
sentinel monitor $S_MASTER_NAME 127.0.0.1 $master $S_QUORUM
sentinel down-after-milliseconds $S_MASTER_NAME $S_DOWN_AFTER_MS
sentinel failover-timeout $S_MASTER_NAME $S_FAILOVER_TIMEOUT_MS
sentinel parallel-syncs $S_MASTER_NAME $S_PARALLEL_SYNCS
sentinel auth-user $S_MASTER_NAME $R_SENT_USER
sentinel auth-pass $S_MASTER_NAME $sent_pw
sentinel sentinel-user $R_SENT_USER
sentinel sentinel-pass $sent_pw
$(sentinel_acl_rules "$svc_pw" "$admin_pw" "$sent_pw")
EOF
    } | write_file "$conf" 600
}

# node_start NODE PORT PORTVAR [MASTER_PORT]: starts the node unless it runs
# already: a data node (the replica of MASTER_PORT when given) or a Sentinel
# (watching the master on MASTER_PORT).  PORTVAR: the setting of PORT, for
# messages.  Exit 3 when PORT (or a cluster node's bus port) is taken by
# something else.
node_start() {
    local d=$1 port=$2 portvar=$3 master=${4:-} label bin log pid i
    label=$(node_label "$d")
    bin=$(node_binary "$d")
    command -v "$bin" >/dev/null 2>&1 || die "$bin not found (run scripts/deps.sh)"
    command -v redis-cli >/dev/null 2>&1 || die "redis-cli not found (run scripts/deps.sh)"
    if node_up "$d"; then
        local cur
        cur=$(node_port "$d")
        if [[ $cur != "$port" ]]; then
            warn "$label already running on port $cur (requested $port); stop the stack to change ports"
        fi
        info "$label: already running on 127.0.0.1:$cur (pid $(node_pid "$d"))"
        return 0
    fi
    if node_alive "$d"; then
        die "$label (pid $(node_pid "$d")) is alive but does not answer PING on port $(node_port "$d"); stop it with: $0 stop $DIR"
    fi
    rm -f "$(node_file "$d" pid)"
    if port_busy "$port"; then
        printf '%s: error: port %s is already in use; cannot start %s (set %s)\n' "$PROG" "$port" "$label" "$portvar" >&2
        exit 3
    fi
    if ((CLUSTER)) && port_busy "$((port + C_BUS_OFFSET))"; then
        printf '%s: error: port %s (the cluster bus of %s, its port + %s) is already in use; cannot start %s (set %s)\n' \
            "$PROG" "$((port + C_BUS_OFFSET))" "$port" "$C_BUS_OFFSET" "$label" "$portvar" >&2
        exit 3
    fi
    mkdir -p "$d"
    chmod 700 "$d"
    redis_user_init
    if ((!IS_ROOT)); then
        [[ -O $d ]] || die "$d belongs to $(stat -c %U "$d"); run this as that user or as root"
    fi
    if [[ $(node_kind "$d") == sentinel ]]; then
        sentinel_write_conf "$d" "$port" "$master"
    else
        redis_write_conf "$d" "$port" "$master"
    fi
    log=$(node_file "$d" log)
    : >>"$log"
    if ((IS_ROOT)); then
        # Everything the server writes (AOF, pid, log; a Sentinel its config)
        # belongs to its user.
        chown -R "$R_USER": "$d" 2>/dev/null || chown -R "$R_USER" "$d"
        fix_traversal "$R_USER" "$d"
    fi
    # Sentinel topology: Redis rewrites these configs (a Sentinel at each
    # change, a data node at the CONFIG REWRITE of a failover) with mode 644
    # less its umask, and they hold passwords (auth-pass, masterauth).  A
    # cluster node's files are its own (nodes.conf, AOF): nobody else's.
    (
        ((HA || CLUSTER)) && umask 077
        as_user "$R_USER" "$bin" "$(node_file "$d" conf)" </dev/null >>"$log" 2>&1 9>&-
    ) ||
        {
            warn "$bin failed to start"
            log_tail "$log"
            exit 1
        }
    for ((i = 0; i < REDIS_WAIT_TENTHS; i++)); do
        if node_up "$d"; then
            info "$label: started on 127.0.0.1:$port (pid $(node_pid "$d"), user $R_USER)"
            return 0
        fi
        sleep 0.1
    done
    warn "$label did not answer PING on port $port within $((REDIS_WAIT_TENTHS / 10))s"
    log_tail "$log"
    exit 1
}

node_stop() {
    local d=$1 pid port i label comm
    label=$(node_label "$d")
    comm=$(node_comm "$d")
    pid=$(node_pid "$d")
    port=$(node_port "$d")
    if [[ -z $pid ]] || ! pid_is "$pid" "$comm"; then
        rm -f "$(node_file "$d" pid)"
        info "$label: not running"
        return 0
    fi
    if [[ -n $port ]]; then
        redis_admin "$port" shutdown nosave >/dev/null 2>&1 || true
    fi
    for ((i = 0; i < 100; i++)); do
        pid_is "$pid" "$comm" || break
        if ((i == 50)); then kill -TERM "$pid" 2>/dev/null || true; fi
        sleep 0.1
    done
    if pid_is "$pid" "$comm"; then
        warn "$label (pid $pid) did not exit after 10s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            pid_is "$pid" "$comm" || break
            sleep 0.1
        done
        pid_is "$pid" "$comm" && die "could not stop $label (pid $pid)"
    fi
    rm -f "$(node_file "$d" pid)"
    info "$label: stopped"
}

# ---------------------------------------------------------------- sentinel

# redis_master_node: the directory of the data node that is master now: the
# one a running Sentinel names, else the one the Sentinels' configs name last
# (the highest config epoch: each Sentinel rewrites its config at every
# change), else redis/.  After a failover redis-replica/ is the master and
# redis/, started again, must follow it, not the other way round.
redis_master_node() {
    local s conf port='' p epoch best_epoch=-1 out rport rrport
    local -a sentinels
    rport=$(node_port "$R_DIR")
    rrport=$(node_port "$RR_DIR")
    mapfile -t sentinels < <(sentinel_dirs)
    for s in "${sentinels[@]}"; do
        node_up "$s" || continue
        out=$(redis_admin "$(node_port "$s")" SENTINEL GET-MASTER-ADDR-BY-NAME "$S_MASTER_NAME" 2>/dev/null) ||
            continue
        p=$(sed -n 2p <<<"$out" | tr -dc '0-9')
        if [[ -n $p ]]; then
            port=$p
            break
        fi
    done
    if [[ -z $port ]]; then
        for s in "${sentinels[@]}"; do
            conf=$s/sentinel.conf
            [[ -r $conf ]] || continue
            read -r p epoch < <(awk -v m="$S_MASTER_NAME" '
                $1 == "sentinel" && $2 == "monitor" && $3 == m { p = $5 }
                $1 == "sentinel" && $2 == "config-epoch" && $3 == m { e = $4 }
                END { print (p == "" ? "-" : p), e + 0 }' "$conf")
            [[ $p =~ ^[0-9]+$ && $epoch =~ ^[0-9]+$ ]] || continue
            if ((epoch > best_epoch)); then
                port=$p
                best_epoch=$epoch
            fi
        done
    fi
    if [[ -n $port && -n $rrport && $port == "$rrport" && $port != "$rport" ]]; then
        printf '%s\n' "$RR_DIR"
    else
        printf '%s\n' "$R_DIR"
    fi
}

# sentinel_view PORT: "PORT FLAGS REPLICAS OTHER_SENTINELS" of the master as
# the Sentinel on PORT sees it (SENTINEL MASTER), "- - 0 0" when it cannot say.
sentinel_view() {
    { redis_admin "$1" SENTINEL MASTER "$S_MASTER_NAME" 2>/dev/null || true; } | tr -d '\r' |
        awk 'NR % 2 == 1 { k = $0; next } { v[k] = $0 }
             END { print (v["port"] == "" ? "-" : v["port"]), (v["flags"] == "" ? "-" : v["flags"]),
                         v["num-slaves"] + 0, v["num-other-sentinels"] + 0 }'
}

# ha_not_ready MASTER_PORT REPLICA_PORT SENTINEL_PORT...: prints what keeps
# the topology from being ready; fails (nothing to say) when the replica
# follows the master and every Sentinel sees the master there up, its
# replica and all the other Sentinels (a failover needs them).
ha_not_ready() {
    local mport=$1 rport=$2 s n repl sport flags nrepl nsent
    shift 2
    n=$#
    repl=$(redis_admin "$rport" INFO replication 2>/dev/null | tr -d '\r') || {
        printf 'the replica on :%s does not answer\n' "$rport"
        return 0
    }
    if ! grep -qx "master_port:$mport" <<<"$repl" || ! grep -qx 'master_link_status:up' <<<"$repl"; then
        printf 'the replica on :%s does not follow the master on :%s yet\n' "$rport" "$mport"
        return 0
    fi
    for s in "$@"; do
        read -r sport flags nrepl nsent < <(sentinel_view "$s")
        if [[ $sport != "$mport" || $flags != master ]]; then
            printf 'the Sentinel on :%s does not see the master on :%s up (it sees :%s, %s)\n' \
                "$s" "$mport" "$sport" "$flags"
            return 0
        fi
        if ((nrepl < 1 || nsent < n - 1)); then
            printf 'the Sentinel on :%s knows %d replica(s) and %d other Sentinel(s), not 1 and %d\n' \
                "$s" "$nrepl" "$nsent" "$((n - 1))"
            return 0
        fi
    done
    return 1
}

# ha_wait_ready MASTER_PORT REPLICA_PORT SENTINEL_PORT...: waits (bounded)
# until ha_not_ready has nothing to say.
ha_wait_ready() {
    local i why=
    for ((i = 0; i < S_READY_WAIT_TENTHS; i += 2)); do
        why=$(ha_not_ready "$@") || return 0
        sleep 0.2
    done
    warn "the Sentinel topology is not ready after $((S_READY_WAIT_TENTHS / 10))s: $why"
    local d
    local -a nodes=("$R_DIR" "$RR_DIR")
    mapfile -t -O 2 nodes < <(sentinel_dirs)
    for d in "${nodes[@]}"; do
        log_tail "$(node_file "$d" log)"
    done
    exit 1
}

# ---------------------------------------------------------------- cluster

# info_field TEXT NAME: the value of NAME:value in INFO-style TEXT.
info_field() { awk -F: -v n="$2" '$1 == n { print $2; exit }' <<<"$1"; }

# cluster_info PORT: CLUSTER INFO of the node on PORT (admin), without CRs.
cluster_info() { redis_admin "$1" CLUSTER INFO 2>/dev/null | tr -d '\r'; }

# cluster_formed: true once a node of DIR has been part of a cluster: its
# nodes.conf (Redis's) knows another node, or owns slots.  A node writes one
# alone at its first start, before any --cluster create.
cluster_formed() {
    local d
    while read -r d; do
        [[ -r $d/nodes.conf ]] || continue
        awk '$1 != "vars" && NF >= 8 { n++; if (NF >= 9) slots = 1 }
             END { exit !(n > 1 || slots) }' "$d/nodes.conf" && return 0
    done < <(cluster_dirs)
    return 1
}

# cluster_masters PORT...: the ports of the masters that serve slots now, in
# slot order, as the first of the nodes on PORT... that answers sees them
# (CLUSTER NODES): none failed or suspected.  Prints nothing when none answers.
cluster_masters() {
    local p out
    for p in "$@"; do
        out=$(redis_admin "$p" CLUSTER NODES 2>/dev/null | tr -d '\r') || continue
        [[ -n $out ]] || continue
        awk -f "$SELF_DIR/cluster-masters.awk" <<<"$out"
        return 0
    done
}

# cluster_not_ready NODES PORT...: prints what keeps the cluster from being
# ready; fails (nothing to say) when every node (on PORT...) answers
# cluster_state:ok with every slot assigned, knows all NODES nodes, and every
# replica's link to its master is up (a failover needs a replica in sync).
cluster_not_ready() {
    local want=$1 p out repl
    shift
    for p in "$@"; do
        out=$(cluster_info "$p") || out=
        if [[ -z $out ]]; then
            printf 'the node on :%s does not answer CLUSTER INFO\n' "$p"
            return 0
        fi
        if [[ $(info_field "$out" cluster_state) != ok ||
            $(info_field "$out" cluster_slots_assigned) != "$C_SLOTS" ]]; then
            printf 'the node on :%s says cluster_state:%s, %s of %s slots assigned\n' "$p" \
                "$(info_field "$out" cluster_state)" "$(info_field "$out" cluster_slots_assigned)" "$C_SLOTS"
            return 0
        fi
        if [[ $(info_field "$out" cluster_known_nodes) != "$want" ]]; then
            printf 'the node on :%s knows %s nodes, not %s\n' "$p" "$(info_field "$out" cluster_known_nodes)" "$want"
            return 0
        fi
        repl=$(redis_admin "$p" INFO replication 2>/dev/null | tr -d '\r') || repl=
        if [[ $(info_field "$repl" role) == slave && $(info_field "$repl" master_link_status) != up ]]; then
            printf 'the replica on :%s has no link to its master :%s yet\n' "$p" "$(info_field "$repl" master_port)"
            return 0
        fi
    done
    return 1
}

# cluster_wait_ready NODES PORT...: waits (bounded) until cluster_not_ready
# has nothing to say.
cluster_wait_ready() {
    local i why='' d
    for ((i = 0; i < C_READY_WAIT_TENTHS; i += 2)); do
        why=$(cluster_not_ready "$@") || return 0
        sleep 0.2
    done
    warn "the cluster is not ready after $((C_READY_WAIT_TENTHS / 10))s: $why"
    while read -r d; do
        log_tail "$(node_file "$d" log)"
    done < <(cluster_dirs)
    exit 1
}

# cluster_create REPLICAS PORT...: makes the cluster of the fresh nodes on
# PORT... (the masters first), REPLICAS replicas per master, as the admin
# user (its password through the environment).  redis-cli's output goes to
# DIR/redis-cluster-create.log.
cluster_create() {
    local replicas=$1 pw p log=$DIR/redis-cluster-create.log
    local -a addrs=()
    shift
    for p in "$@"; do
        addrs+=("127.0.0.1:$p")
    done
    pw=$(tr -dc '0-9a-f' <"$R_ADMIN_PW_FILE")
    info "redis: creating the cluster (masters first, $replicas replica(s) each): ${addrs[*]}"
    if ! REDISCLI_AUTH=$pw timeout "$C_CREATE_TIMEOUT" redis-cli --user "$R_ADMIN_USER" \
        --cluster create "${addrs[@]}" --cluster-replicas "$replicas" --cluster-yes \
        </dev/null >"$log" 2>&1; then
        warn "redis-cli --cluster create failed (or took over ${C_CREATE_TIMEOUT}s)"
        log_tail "$log"
        exit 1
    fi
}

# cluster_start MASTER_PORTS REPLICA_PORTS REPLICAS PG_PORT: the cluster's
# nodes (created on DIR's first start, else the nodes DIR holds, on the ports
# they had), PostgreSQL, then waits until the cluster is ok.
cluster_start() {
    local mports=$1 rports=$2 replicas=$3 pport=$4 p i d dup pgpid nmasters
    local -a masters=() reps=() ports=() buses=() dirs=() actual=()
    IFS=, read -r -a masters <<<"$mports"
    IFS=, read -r -a reps <<<"$rports"
    ((${#masters[@]} >= C_MIN_MASTERS && ${#masters[@]} <= C_MAX_MASTERS)) ||
        die "SECKILL_REDIS_CLUSTER_PORTS must list $C_MIN_MASTERS to $C_MAX_MASTERS ports, got '$mports'"
    if ! [[ $replicas =~ ^[0-9]$ ]] || ((replicas > C_MAX_REPLICAS)); then
        die "bad SECKILL_REDIS_CLUSTER_REPLICAS: '$replicas' (0 to $C_MAX_REPLICAS)"
    fi
    ((${#reps[@]} == ${#masters[@]} * replicas)) ||
        die "SECKILL_REDIS_CLUSTER_REPLICA_PORTS must list $((${#masters[@]} * replicas)) ports ($replicas per master), got '$rports'"
    for p in "${masters[@]}" "${reps[@]}"; do
        if ! valid_port "$p" || ((10#$p > C_MAX_PORT)); then
            die "bad port in SECKILL_REDIS_CLUSTER_PORTS or SECKILL_REDIS_CLUSTER_REPLICA_PORTS: '$p'" \
                "(1 to $C_MAX_PORT: its cluster bus is on port + $C_BUS_OFFSET)"
        fi
        ports+=("$((10#$p))")
        buses+=("$((10#$p + C_BUS_OFFSET))")
    done
    dup=$(printf '%s\n' "${ports[@]}" "${buses[@]}" "$((10#$pport))" | sort | uniq -d | tr '\n' ' ')
    [[ -z $dup ]] ||
        die "the cluster's ports, their bus ports (port + $C_BUS_OFFSET) and SECKILL_PG_PORT must all differ: ${dup% } twice"
    record_topology cluster

    if cluster_formed; then
        # The nodes keep their ports: the others know each one by its
        # address (nodes.conf).
        mapfile -t dirs < <(cluster_dirs)
        for d in "${dirs[@]}"; do
            p=$(node_port "$d")
            [[ -n $p ]] || die "$d/redis.conf names no port; remove DIR's redis-cluster-*/ to create the cluster anew"
            actual+=("$p")
        done
        if [[ ${actual[*]} != "${ports[*]}" ]]; then
            warn "note: the cluster in $DIR has its nodes on ${actual[*]} (asked for ${ports[*]});" \
                "they keep those ports (remove DIR's redis-cluster-*/ to create it anew)"
        fi
        for i in "${!dirs[@]}"; do
            node_start "${dirs[i]}" "${actual[i]}" SECKILL_REDIS_CLUSTER_PORTS
        done
    else
        # A fresh cluster: every port must be free before any node starts (a
        # cluster, once made, keeps its ports), PostgreSQL's too.
        for i in "${!ports[@]}"; do
            d=$DIR/redis-cluster-$((i + 1))
            dirs+=("$d")
            if node_up "$d"; then
                # A node of a start that stopped short of creating the
                # cluster: on the requested port, or restarted there.
                [[ $(node_port "$d") == "${ports[i]}" ]] && continue
                node_stop "$d"
            fi
            for p in "${ports[i]}" "${buses[i]}"; do
                if port_busy "$p"; then
                    printf '%s: error: port %s is already in use; cannot start %s (%s; %s)\n' \
                        "$PROG" "$p" "$(node_label "$d")" \
                        "set SECKILL_REDIS_CLUSTER_PORTS / SECKILL_REDIS_CLUSTER_REPLICA_PORTS" \
                        "a node needs its port and its port + $C_BUS_OFFSET" >&2
                    exit 3
                fi
            done
        done
        pgpid=$(pg_pid)
        if ! { [[ -n $pgpid ]] && pid_is "$pgpid" postgres; } && port_busy "$pport"; then
            printf '%s: error: port %s is already in use; cannot start postgres (set SECKILL_PG_PORT)\n' "$PROG" "$pport" >&2
            exit 3
        fi
        # Nodes of an earlier attempt with more of them: not part of this one.
        while read -r d; do
            ((${d##*/redis-cluster-} > ${#ports[@]})) || continue
            node_stop "$d"
            rm -rf "$d"
            info "$(node_label "$d"): removed (the cluster is made of ${#ports[@]} nodes)"
        done < <(cluster_dirs)
        for i in "${!dirs[@]}"; do
            node_start "${dirs[i]}" "${ports[i]}" SECKILL_REDIS_CLUSTER_PORTS
        done
        cluster_create "$replicas" "${ports[@]}"
        actual=("${ports[@]}")
    fi

    pg_start "$pport"
    pport=$(pg_conf_port)
    cluster_wait_ready "${#actual[@]}" "${actual[@]}"
    # The first nodes were the masters when the cluster was made: the seeds
    # of the URL, whichever of them is a replica since a failover.
    nmasters=$(info_field "$(cluster_info "${actual[0]}")" cluster_size)
    if ! [[ $nmasters =~ ^[0-9]+$ ]] || ((nmasters < 1 || nmasters > ${#actual[@]})); then
        die "cannot read cluster_size from the node on :${actual[0]}"
    fi
    C_SEED_PORTS=$(
        IFS=,
        printf '%s' "${actual[*]:0:nmasters}"
    )
    C_REPLICA_PORTS=$(
        IFS=,
        printf '%s' "${actual[*]:nmasters}"
    )
    write_client_files "${actual[0]}" "$pport"
    pg_ensure_roles_db
    info "redis: cluster ok, $C_SLOTS slots over the masters on $(cluster_masters "${actual[@]}" | tr '\n' ' ')(${#actual[@]} nodes)"
}

# ---------------------------------------------------------------- postgres

# Binary dir: the version of an existing cluster, else the newest installed.
pg_bindir() {
    local ver d
    if [[ -r $PG_DATA/PG_VERSION ]]; then
        ver=$(tr -dc '0-9.' <"$PG_DATA/PG_VERSION")
        d=/usr/lib/postgresql/$ver/bin
        [[ -x $d/postgres ]] || die "cluster in $PG_DATA is PostgreSQL $ver but $d/postgres is missing"
        printf '%s\n' "$d"
        return 0
    fi
    d=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null |
        sort -V | tail -n1)
    if [[ -z $d || ! -x $d/initdb ]]; then
        if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
            d=$(dirname "$(command -v initdb)")
        else
            die "no PostgreSQL server binaries in /usr/lib/postgresql/*/bin (run scripts/deps.sh)"
        fi
    fi
    printf '%s\n' "$d"
}

PG_USER=
pg_user_init() {
    [[ -n $PG_USER ]] && return 0
    if ((IS_ROOT)); then
        PG_USER=$(stack_os_user "$PG_DIR" postgres)
    else
        PG_USER=$(id -un)
        if [[ -d $PG_DATA && ! -O $PG_DATA ]]; then
            die "$PG_DATA belongs to $(stat -c %U "$PG_DATA"); run this as that user or as root"
        fi
    fi
}

# Run a command as the cluster's OS user.
as_pg() { as_user "$PG_USER" "$@"; }

pg_conf_port() {
    [[ -r $PG_CONF ]] || return 0
    awk -F= '$1 ~ /^port[ \t]*$/ { gsub(/[^0-9]/, "", $2); print $2; exit }' "$PG_CONF"
}

pg_pid() {
    [[ -r $PG_DATA/postmaster.pid ]] || return 0
    head -n1 "$PG_DATA/postmaster.pid" 2>/dev/null | tr -dc '0-9'
}

pg_ready() { # pg_ready PORT
    timeout 5 "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$1" -t 3 >/dev/null 2>&1
}

pg_up() {
    local pid port
    pid=$(pg_pid)
    port=$(pg_conf_port)
    [[ -n $pid && -n $port ]] || return 1
    pid_is "$pid" postgres && pg_ready "$port"
}

pg_initdb() {
    local tmp=$PG_DIR/data.init pw
    pw=$(ensure_password "$PG_PWFILE" "$PG_PW_BYTES")
    rm -rf "$tmp"
    # The password file for initdb must be readable by the cluster user.
    local initpw=$PG_DIR/.initdb-pw
    (
        umask 077
        printf '%s\n' "$pw" >"$initpw"
    )
    ((IS_ROOT)) && chown "$PG_USER" "$initpw"
    info "postgres: initdb in $PG_DATA (as $PG_USER)"
    if ! as_pg "$PG_BIN/initdb" -D "$tmp" -U "$PG_ROLE" --auth=scram-sha-256 \
        --pwfile="$initpw" -E UTF8 --locale=C >"$DIR/initdb.log" 2>&1; then
        rm -f "$initpw"
        warn "initdb failed"
        log_tail "$DIR/initdb.log"
        exit 1
    fi
    rm -f "$initpw"
    printf "\n# added by scripts/stack.sh\ninclude_if_exists = 'seckill.conf'\n" >>"$tmp/postgresql.conf"
    mv "$tmp" "$PG_DATA"
}

pg_write_conf() {
    local port=$1 sockdirs=$PG_RUN
    # sun_path is 108 bytes; ".s.PGSQL.NNNNN" plus '/' must fit.
    if ((${#PG_RUN} + 16 > 107)); then
        warn "note: $PG_RUN is too long for a unix socket path; PostgreSQL will listen on TCP only"
        sockdirs=
    fi
    write_file "$PG_CONF" 600 <<EOF
# generated by scripts/stack.sh; rewritten on every start
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$sockdirs'
max_connections = 200
shared_buffers = 128MB
password_encryption = 'scram-sha-256'
logging_collector = off
log_line_prefix = '%m [%p] %q%u@%d '
EOF
    ((IS_ROOT)) && chown "$PG_USER" "$PG_CONF"
    return 0
}

pg_start() {
    local port=$1 pid
    pg_user_init
    PG_BIN=$(pg_bindir)
    if pg_up; then
        local cur
        cur=$(pg_conf_port)
        if [[ $cur != "$port" ]]; then
            warn "postgres already running on port $cur (requested $port); stop the stack to change ports"
        fi
        info "postgres: already running on 127.0.0.1:$cur (pid $(pg_pid))"
        return 0
    fi
    pid=$(pg_pid)
    if [[ -n $pid ]] && pid_is "$pid" postgres; then
        die "postgres (pid $pid) is alive but not accepting connections on port $(pg_conf_port); see $PG_LOG or run: $0 stop $DIR"
    fi
    if port_busy "$port"; then
        printf '%s: error: port %s is already in use; cannot start postgres (set SECKILL_PG_PORT)\n' "$PROG" "$port" >&2
        exit 3
    fi
    if [[ -d $PG_DATA && ! -s $PG_PWFILE ]]; then
        die "$PG_DATA exists but $PG_PWFILE is missing; remove $PG_DIR to re-initialise"
    fi

    mkdir -p "$PG_DIR" "$PG_RUN"
    chmod 700 "$PG_DIR" "$PG_RUN"
    : >>"$PG_LOG"
    if ((IS_ROOT)); then
        chown "$PG_USER": "$PG_DIR" "$PG_RUN" "$PG_LOG" 2>/dev/null ||
            chown "$PG_USER" "$PG_DIR" "$PG_RUN" "$PG_LOG"
        fix_traversal "$PG_USER" "$PG_DIR"
    fi
    [[ -f $PG_DATA/PG_VERSION ]] || pg_initdb
    pg_write_conf "$port"

    if ! as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -w -t "$PG_CTL_TIMEOUT" -l "$PG_LOG" start \
        </dev/null >"$DIR/pg_ctl.log" 2>&1 9>&-; then
        warn "pg_ctl start failed (waited at most ${PG_CTL_TIMEOUT}s)"
        cat "$DIR/pg_ctl.log" >&2 || true
        log_tail "$PG_LOG"
        exit 1
    fi
    if ! pg_up; then
        warn "postgres started but is not accepting connections on 127.0.0.1:$port"
        log_tail "$PG_LOG"
        exit 1
    fi
    info "postgres: started on 127.0.0.1:$port (pid $(pg_pid), user $PG_USER)"
}

pg_stop() {
    local pid i
    pid=$(pg_pid)
    if [[ -z $pid ]] || ! pid_is "$pid" postgres; then
        info "postgres: not running"
        return 0
    fi
    pg_user_init
    PG_BIN=$(pg_bindir)
    if ! as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w -t "$PG_CTL_TIMEOUT" stop \
        </dev/null >"$DIR/pg_ctl.log" 2>&1 9>&-; then
        warn "pg_ctl stop -m fast failed; trying -m immediate"
        cat "$DIR/pg_ctl.log" >&2 || true
        as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w -t 10 stop \
            </dev/null >>"$DIR/pg_ctl.log" 2>&1 9>&- || true
    fi
    for ((i = 0; i < 50; i++)); do
        pid_is "$pid" postgres || break
        sleep 0.1
    done
    if pid_is "$pid" postgres; then
        warn "postgres (pid $pid) still alive; sending SIGQUIT"
        kill -QUIT "$pid" 2>/dev/null || true
        sleep 2
        pid_is "$pid" postgres && {
            log_tail "$PG_LOG"
            die "could not stop postgres (pid $pid)"
        }
    fi
    info "postgres: stopped"
}

# ---------------------------------------------------------------- env, db

# pgpass_lines PORT ROLE PASSWORD: one role's libpq password file lines, for
# 127.0.0.1 and localhost.
pgpass_lines() {
    printf '127.0.0.1:%s:*:%s:%s\nlocalhost:%s:*:%s:%s\n' "$1" "$2" "$3" "$1" "$2" "$3"
}

# pg_dsn PORT ROLE [PASSFILE]: a conninfo without a password.  The service's
# DSN names no passfile (PGPASSFILE does); the others name their own, so the
# service's environment leads to no other role's password.
pg_dsn() {
    local dsn="host=127.0.0.1 port=$1 dbname=$PG_DB user=$2"
    [[ -n ${3:-} ]] && dsn+=" passfile='$3'"
    printf '%s connect_timeout=5\n' "$dsn"
}

# write_client_files REDIS_PORT PG_PORT [REPLICA_PORT SENTINEL_PORTS]: the
# password files and DIR/env; with the last two, of the Sentinel topology;
# with CLUSTER=1, of the cluster of C_SEED_PORTS and C_REPLICA_PORTS.
write_client_files() {
    local rport=$1 pport=$2 rrport=${3:-} sports=${4:-} pw rpw opw apw p hosts=''
    local url_head url_tail
    local -a list
    pw=$(tr -dc '0-9a-f' <"$PG_PWFILE")
    opw=$(ensure_password "$PG_OWNER_PWFILE" "$PG_PW_BYTES")
    apw=$(ensure_password "$PG_APP_PWFILE" "$PG_PW_BYTES")
    rpw=$(ensure_password "$R_PW_FILE" "$R_PW_BYTES")
    pgpass_lines "$pport" "$PG_APP" "$apw" | write_file "$PGPASS" 600
    pgpass_lines "$pport" "$PG_OWNER" "$opw" | write_file "$PGPASS_OWNER" 600
    pgpass_lines "$pport" "$PG_ROLE" "$pw" | write_file "$PGPASS_ADMIN" 600
    # Every Redis URL is url_head USER:PASSWORD@ url_tail.
    if ((CLUSTER)); then
        # The masters as seed nodes (any node tells a client where every
        # slot is); no /db: a cluster has only database 0.  The passwords
        # are hex: nothing to percent-encode.
        IFS=, read -r -a list <<<"$C_SEED_PORTS"
        for p in "${list[@]}"; do
            hosts+=${hosts:+,}127.0.0.1:$p
        done
        url_head=redis-cluster:// url_tail=$hosts
    elif [[ -z $sports ]]; then
        url_head=redis:// url_tail=127.0.0.1:$rport/0
    else
        # Behind Sentinel a client asks the Sentinels where the master is,
        # as the same user with the same password.
        IFS=, read -r -a list <<<"$sports"
        for p in "${list[@]}"; do
            hosts+=${hosts:+,}127.0.0.1:$p
        done
        url_head=redis-sentinel:// url_tail=$hosts/$S_MASTER_NAME/0
    fi
    printf '%s%s:%s@%s\n' "$url_head" "$R_ADMIN_USER" \
        "$(ensure_password "$R_ADMIN_PW_FILE" "$R_PW_BYTES")" "$url_tail" |
        write_file "$R_ADMIN_URL_FILE" 600
    printf '%s%s:%s@%s\n' "$url_head" "$R_FUNC_USER" \
        "$(ensure_password "$R_FUNC_PW_FILE" "$R_PW_BYTES")" "$url_tail" |
        write_file "$R_FUNC_URL_FILE" 600
    {
        printf '# generated by scripts/stack.sh start; source me\n'
        # The service's ACL user; the admin user's and the self-healing
        # user's URLs stay in their files (mode 600), which migrate and the
        # daemon read.
        printf 'export SECKILL_REDIS_URL=%s%s:%s@%s\n' "$url_head" "$R_SVC_USER" "$rpw" "$url_tail"
        printf 'export SECKILL_MIGRATE_REDIS_URL_FILE=%q\n' "$R_ADMIN_URL_FILE"
        printf 'export SECKILL_REDIS_FUNCTIONS_URL_FILE=%q\n' "$R_FUNC_URL_FILE"
        # The service's role; `seckilld migrate` logs in as the owner.
        printf 'export SECKILL_PG_DSN=%q\n' "$(pg_dsn "$pport" "$PG_APP")"
        printf 'export SECKILL_MIGRATE_PG_DSN=%q\n' "$(pg_dsn "$pport" "$PG_OWNER" "$PGPASS_OWNER")"
        printf 'export PGPASSFILE=%q\n' "$PGPASS"
        printf 'export SECKILL_REDIS_PORT=%s\n' "$rport"
        printf 'export SECKILL_PG_PORT=%s\n' "$pport"
        if [[ -n $sports ]]; then
            # For scripts: the nodes' ports (SECKILL_REDIS_PORT's node is not
            # the master after a failover: the Sentinels say which is).
            printf 'export SECKILL_REDIS_TOPOLOGY=sentinel\n'
            printf 'export SECKILL_REDIS_REPLICA_PORT=%s\n' "$rrport"
            printf 'export SECKILL_SENTINEL_PORTS=%s\n' "$sports"
        fi
        if ((CLUSTER)); then
            # For scripts: SECKILL_REDIS_PORT above is the first seed; these
            # nodes were the masters and the replicas when the cluster was
            # made (se_cluster_master_ports says which are masters now).
            printf 'export SECKILL_REDIS_TOPOLOGY=cluster\n'
            printf 'export SECKILL_REDIS_CLUSTER_PORTS=%s\n' "$C_SEED_PORTS"
            printf 'export SECKILL_REDIS_CLUSTER_REPLICA_PORTS=%s\n' "$C_REPLICA_PORTS"
        fi
    } | write_file "$ENV_FILE" 600
}

# pg_admin_sql DBNAME: runs the SQL on stdin as the superuser (stdin, not -c:
# role passwords must not show in ps).  Prints the rows; 1 on failure, with
# psql's message in DIR/psql.err.
pg_admin_sql() {
    local port dsn
    port=$(pg_conf_port)
    dsn="host=127.0.0.1 port=$port dbname=$1 user=$PG_ROLE connect_timeout=5"
    PGPASSFILE=$PGPASS_ADMIN timeout 30 "$PG_BIN/psql" "$dsn" -XAtq -v ON_ERROR_STOP=1 -f - \
        2>"$DIR/psql.err"
}

# The owner and the service's login role, their passwords (from their files,
# set on every start so that files and roles agree), and the database, owned
# by the owner.  The service's role has no attribute beyond LOGIN; what it may
# touch is granted by the migrations.  In a cluster made before these roles
# existed the superuser owned everything: it all moves to the owner, whose
# migrations may then grant on it.
pg_ensure_roles_db() {
    local opw apw exists
    opw=$(tr -dc '0-9a-f' <"$PG_OWNER_PWFILE")
    apw=$(tr -dc '0-9a-f' <"$PG_APP_PWFILE")
    # A failing statement is logged with its text (log_min_error_statement):
    # not these, which carry passwords.
    pg_admin_sql postgres >/dev/null <<EOF || {
SET log_min_error_statement = panic;
SET log_statement = none;
SELECT 'CREATE ROLE $PG_OWNER' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$PG_OWNER')
\\gexec
SELECT 'CREATE ROLE $PG_APP' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$PG_APP')
\\gexec
ALTER ROLE $PG_OWNER LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD '$opw';
ALTER ROLE $PG_APP LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD '$apw';
EOF
        warn "cannot create the roles $PG_OWNER and $PG_APP on 127.0.0.1:$(pg_conf_port)"
        cat "$DIR/psql.err" >&2 || true
        log_tail "$PG_LOG"
        exit 1
    }
    exists=$(pg_admin_sql postgres <<<"SELECT 1 FROM pg_database WHERE datname = '$PG_DB'") || {
        warn "cannot connect to postgres on 127.0.0.1:$(pg_conf_port) as $PG_ROLE"
        cat "$DIR/psql.err" >&2 || true
        exit 1
    }
    if [[ $exists != 1 ]]; then
        pg_admin_sql postgres >/dev/null <<<"CREATE DATABASE $PG_DB OWNER $PG_OWNER" || {
            warn "CREATE DATABASE $PG_DB failed"
            cat "$DIR/psql.err" >&2 || true
            exit 1
        }
        info "postgres: created database $PG_DB (owner $PG_OWNER)"
    fi
    # Tables first: a table's identity sequences follow it.
    pg_admin_sql "$PG_DB" >/dev/null <<EOF || {
ALTER DATABASE $PG_DB OWNER TO $PG_OWNER;
SELECT format('ALTER %s public.%I OWNER TO $PG_OWNER',
              CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END,
              c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm')
  AND c.relowner = '$PG_ROLE'::regrole
\\gexec
SELECT format('ALTER SEQUENCE public.%I OWNER TO $PG_OWNER', c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind = 'S' AND c.relowner = '$PG_ROLE'::regrole
\\gexec
EOF
        warn "cannot hand $PG_DB's objects to $PG_OWNER"
        cat "$DIR/psql.err" >&2 || true
        exit 1
    }
    rm -f "$DIR/psql.err"
}

# ---------------------------------------------------------------- commands

# record_topology NAME: DIR's Redis is started as NAME from now on (status
# reads it).
record_topology() { printf '%s\n' "$1" | write_file "$TOPOLOGY_FILE" 644; }

# single_start REDIS_PORT PG_PORT: one Redis, as always.
single_start() {
    local rport=$1 pport=$2
    record_topology single
    if [[ -d $RR_DIR && $(redis_master_node) == "$RR_DIR" ]]; then
        warn "note: redis-replica/ was the master last (Sentinel topology); one Redis uses redis/'s data"
    fi
    node_start "$R_DIR" "$rport" SECKILL_REDIS_PORT
    pg_start "$pport"
    # Actual ports (they differ from the requested ones if already running).
    rport=$(node_port "$R_DIR")
    pport=$(pg_conf_port)
    write_client_files "$rport" "$pport"
    pg_ensure_roles_db
}

# ha_start REDIS_PORT REPLICA_PORT PG_PORT SENTINEL_PORTS: the master and its
# replica, the Sentinels, PostgreSQL (while the Sentinels find each other),
# then waits until a failover could happen.
ha_start() {
    local rport=$1 rrport=$2 pport=$3 sports=$4 p i mnode rnode mport s
    local -a ports sentinels=() actual=()
    IFS=, read -r -a ports <<<"$sports"
    ((${#ports[@]} >= S_QUORUM && ${#ports[@]} <= S_MAX_COUNT)) ||
        die "SECKILL_SENTINEL_PORTS must list $S_QUORUM to $S_MAX_COUNT ports (quorum $S_QUORUM), got '$sports'"
    for p in "${ports[@]}"; do
        valid_port "$p" || die "bad port in SECKILL_SENTINEL_PORTS: '$p'"
    done
    [[ $(printf '%s\n' "$rport" "$rrport" "$pport" "${ports[@]}" | sort | uniq -d) == "" ]] ||
        die "SECKILL_REDIS_PORT, SECKILL_REDIS_REPLICA_PORT, SECKILL_PG_PORT and SECKILL_SENTINEL_PORTS must all differ"
    record_topology sentinel

    mnode=$(redis_master_node)
    if [[ $mnode == "$R_DIR" ]]; then
        rnode=$RR_DIR
        node_start "$R_DIR" "$rport" SECKILL_REDIS_PORT
        mport=$(node_port "$R_DIR")
        node_start "$RR_DIR" "$rrport" SECKILL_REDIS_REPLICA_PORT "$mport"
    else
        rnode=$R_DIR
        info "redis: redis-replica is the master since a failover; redis follows it"
        node_start "$RR_DIR" "$rrport" SECKILL_REDIS_REPLICA_PORT
        mport=$(node_port "$RR_DIR")
        node_start "$R_DIR" "$rport" SECKILL_REDIS_PORT "$mport"
    fi
    for i in "${!ports[@]}"; do
        s=$DIR/sentinel-$((i + 1))
        node_start "$s" "${ports[i]}" SECKILL_SENTINEL_PORTS "$mport"
        sentinels+=("$s")
        actual+=("$(node_port "$s")")
    done
    # Sentinels of an earlier start with more of them: stopped and removed,
    # else status would count them and the others would wait for their votes.
    while read -r s; do
        [[ ${s##*/sentinel-} -gt ${#ports[@]} ]] || continue
        node_stop "$s"
        rm -rf "$s"
        info "$(node_label "$s"): removed (SECKILL_SENTINEL_PORTS names ${#ports[@]} Sentinels)"
    done < <(sentinel_dirs)

    pg_start "$pport"
    rport=$(node_port "$R_DIR")
    rrport=$(node_port "$RR_DIR")
    pport=$(pg_conf_port)
    write_client_files "$rport" "$pport" "$rrport" "$(
        IFS=,
        printf '%s' "${actual[*]}"
    )"
    pg_ensure_roles_db
    ha_wait_ready "$mport" "$(node_port "$rnode")" "${actual[@]}"
    info "redis: master on 127.0.0.1:$mport, its replica on 127.0.0.1:$(node_port "$rnode"), Sentinels on ${actual[*]} (quorum $S_QUORUM)"
}

cmd_start() {
    local rport=${SECKILL_REDIS_PORT:-6380} pport=${SECKILL_PG_PORT:-5433}
    local topology=${SECKILL_REDIS_TOPOLOGY:-single} running
    valid_port "$rport" || die "bad SECKILL_REDIS_PORT: $rport"
    valid_port "$pport" || die "bad SECKILL_PG_PORT: $pport"
    [[ $rport != "$pport" ]] || die "SECKILL_REDIS_PORT and SECKILL_PG_PORT are both $rport"
    case $topology in
    single | sentinel | cluster) ;;
    *) die "bad SECKILL_REDIS_TOPOLOGY: '$topology' (single, sentinel or cluster)" ;;
    esac
    [[ $R_MIN_REPLICAS_TO_WRITE =~ ^[0-9]$ ]] ||
        die "bad SECKILL_REDIS_MIN_REPLICAS_TO_WRITE: '$R_MIN_REPLICAS_TO_WRITE' (0-9)"
    # at least 1mb: below that Redis is full before the first SKU; 0 (no
    # bound) is what this setting exists to rule out
    [[ ${R_MAXMEMORY,,} =~ ^([1-9][0-9]{0,12})(kb|mb|gb)?$ ]] &&
        (($(redis_bytes "$R_MAXMEMORY") >= 1048576)) ||
        die "bad SECKILL_REDIS_MAXMEMORY: '$R_MAXMEMORY' (bytes, or with kb/mb/gb; at least 1mb)"
    # Switching topologies under running processes would mix configs.
    running=$(running_topology)
    if [[ $running != none && $running != "$topology" ]]; then
        die "redis in $DIR runs the $running topology; stop the stack first to change to $topology: $0 stop $DIR"
    fi
    if [[ $topology == single ]]; then
        single_start "$rport" "$pport"
    elif [[ $topology == sentinel ]]; then
        HA=1
        local rrport=${SECKILL_REDIS_REPLICA_PORT:-$((10#$rport + 1))}
        valid_port "$rrport" || die "bad SECKILL_REDIS_REPLICA_PORT: $rrport"
        ha_start "$rport" "$rrport" "$pport" "${SECKILL_SENTINEL_PORTS:-$S_DEFAULT_PORTS}"
    else
        CLUSTER=1
        local mports=${SECKILL_REDIS_CLUSTER_PORTS:-$C_DEFAULT_PORTS}
        local replicas=${SECKILL_REDIS_CLUSTER_REPLICAS:-$C_DEFAULT_REPLICAS} rports nmasters i
        C_NODE_TIMEOUT_MS=${SECKILL_REDIS_CLUSTER_NODE_TIMEOUT_MS:-$C_DEFAULT_NODE_TIMEOUT_MS}
        [[ $C_NODE_TIMEOUT_MS =~ ^[1-9][0-9]{1,5}$ ]] ||
            die "bad SECKILL_REDIS_CLUSTER_NODE_TIMEOUT_MS: '$C_NODE_TIMEOUT_MS' (10 to 999999)"
        [[ $replicas =~ ^[0-9]$ ]] || die "bad SECKILL_REDIS_CLUSTER_REPLICAS: '$replicas'"
        if [[ -n ${SECKILL_REDIS_CLUSTER_REPLICA_PORTS+set} ]]; then
            rports=$SECKILL_REDIS_CLUSTER_REPLICA_PORTS
        else
            # One port per replica from C_DEFAULT_REPLICA_BASE up.
            nmasters=$(tr -cd , <<<"$mports" | wc -c)
            rports=
            for ((i = 0; i < (nmasters + 1) * replicas; i++)); do
                rports+=${rports:+,}$((C_DEFAULT_REPLICA_BASE + i))
            done
        fi
        cluster_start "$mports" "$rports" "$replicas" "$pport"
    fi
    info "env: source $ENV_FILE"
}

cmd_stop() {
    local rc=0 s
    local -a sentinels cnodes masters=()
    # The Sentinels first: they would fail over as the data nodes go.
    mapfile -t sentinels < <(sentinel_dirs)
    for s in "${sentinels[@]}"; do
        node_stop "$s" || rc=1
    done
    # A cluster's replicas before the masters, for the same reason: a
    # replica that saw its master go would be elected in its place.
    mapfile -t cnodes < <(cluster_dirs)
    for s in "${cnodes[@]}"; do
        if node_up "$s" && [[ $(redis_admin "$(node_port "$s")" ROLE 2>/dev/null | head -n1 | tr -d '\r') == master ]]; then
            masters+=("$s")
        else
            node_stop "$s" || rc=1
        fi
    done
    for s in "${masters[@]}"; do
        node_stop "$s" || rc=1
    done
    if [[ -d $PG_DATA ]]; then
        pg_stop || rc=1
    else
        info "postgres: not running"
    fi
    if [[ -d $RR_DIR ]]; then
        node_stop "$RR_DIR" || rc=1
    fi
    if [[ -d $R_DIR ]] || ((${#cnodes[@]} == 0)); then
        node_stop "$R_DIR" || rc=1
    fi
    return "$rc"
}

# node_role NODE: how a running node of the Sentinel topology sees itself.
node_role() {
    local port out
    port=$(node_port "$1")
    if [[ $(node_kind "$1") == sentinel ]]; then
        local sport flags nrepl nsent
        read -r sport flags nrepl nsent < <(sentinel_view "$port")
        printf 'master %s on :%s %s, %d replica(s), %d other Sentinel(s)' \
            "$S_MASTER_NAME" "$sport" "$flags" "$nrepl" "$nsent"
        return 0
    fi
    out=$(redis_admin "$port" INFO replication 2>/dev/null | tr -d '\r') || return 0
    awk -F: '$1 == "role" { role = $2 } $1 == "master_port" { mp = $2 }
             $1 == "master_link_status" { link = $2 } $1 == "connected_slaves" { n = $2 }
             END { if (role == "master") printf "master, %d replica(s)", n
                   else printf "replica of :%s, link %s", mp, link }' <<<"$out"
}

# node_status NODE: one line; fails unless the node is up.
node_status() {
    local d=$1 label pid port extra=
    label=$(node_label "$d")
    pid=$(node_pid "$d")
    port=$(node_port "$d")
    if node_up "$d"; then
        ((HA || CLUSTER)) && extra=$(node_role "$d")
        info "$label: running on 127.0.0.1:$port (pid $pid${extra:+, $extra})"
    elif node_alive "$d"; then
        info "$label: NOT ANSWERING (pid $pid alive, port ${port:-?})"
        return 1
    else
        info "$label: stopped"
        return 1
    fi
}

# cluster_status: one line on the cluster as the first node that answers
# sees it; fails unless cluster_state is ok.
cluster_status() {
    local d out=
    local -a ports=()
    while read -r d; do
        ports+=("$(node_port "$d")")
    done < <(cluster_dirs)
    for d in "${ports[@]}"; do
        out=$(cluster_info "$d") && [[ -n $out ]] && break
    done
    if [[ -z $out ]]; then
        info "cluster: no node answers"
        return 1
    fi
    info "cluster: state $(info_field "$out" cluster_state)," \
        "$(info_field "$out" cluster_slots_assigned) of $C_SLOTS slots assigned," \
        "masters on $(cluster_masters "${ports[@]}" | tr '\n' ' ')($(info_field "$out" cluster_known_nodes) nodes known)"
    [[ $(info_field "$out" cluster_state) == ok ]]
}

cmd_status() {
    local rc=0 pid port s
    local -a sentinels cnodes
    case $(dir_topology) in
    sentinel) HA=1 ;;
    cluster) CLUSTER=1 ;;
    esac
    if ((CLUSTER)); then
        mapfile -t cnodes < <(cluster_dirs)
        if ((${#cnodes[@]} == 0)); then
            info "cluster: no node"
            rc=1
        fi
        for s in "${cnodes[@]}"; do
            node_status "$s" || rc=1
        done
        ((${#cnodes[@]} == 0)) || cluster_status || rc=1
    else
        node_status "$R_DIR" || rc=1
    fi
    if ((HA)); then
        node_status "$RR_DIR" || rc=1
        mapfile -t sentinels < <(sentinel_dirs)
        if ((${#sentinels[@]} == 0)); then
            info "sentinels: none"
            rc=1
        fi
        for s in "${sentinels[@]}"; do
            node_status "$s" || rc=1
        done
    fi
    if [[ -d $PG_DATA ]]; then
        PG_BIN=$(pg_bindir)
        pid=$(pg_pid)
        port=$(pg_conf_port)
        if pg_up; then
            info "postgres: running on 127.0.0.1:$port (pid $pid)"
        elif [[ -n $pid ]] && pid_is "$pid" postgres; then
            info "postgres: NOT ACCEPTING CONNECTIONS (pid $pid alive, port ${port:-?})"
            rc=1
        else
            info "postgres: stopped"
            rc=1
        fi
    else
        info "postgres: stopped (not initialised)"
        rc=1
    fi
    return "$rc"
}

case $CMD in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
esac

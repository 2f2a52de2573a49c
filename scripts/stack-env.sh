# shellcheck shell=bash
# Sourced, not run: a private Redis + PostgreSQL on free loopback ports, for
# scripts/run-tests.sh, loadtest/lt-env.sh and scripts/faults.sh; and the
# local secrets of scripts/run.sh and the load scripts.
#
# The caller sets ROOT before sourcing.

SE_STACK=$ROOT/scripts/stack.sh
SE_PORT_TRIES=50
SE_START_TRIES=3
SE_REDIS_PORT=
SE_PG_PORT=
# SECKILL_REDIS_TOPOLOGY=sentinel: the replica's and the Sentinels' ports too
SE_SENTINEL_COUNT=3
SE_REPLICA_PORT=
SE_SENTINEL_PORTS=

# se_port_busy PORT: true if something listens on PORT.
se_port_busy() {
    if command -v ss >/dev/null 2>&1; then
        [[ -n $(ss -ltnH "sport = :$1" 2>/dev/null) ]]
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}

# se_free_port [EXCLUDE...]: a random port in 20000-32000 nobody listens on
# (below the kernel's ephemeral range, which client connections use), none
# of EXCLUDE (ports already chosen, not listening yet).
se_free_port() {
    local i p
    for ((i = 0; i < SE_PORT_TRIES; i++)); do
        p=$((20000 + (RANDOM * 32768 + RANDOM) % 12001))
        [[ " $* " == *" $p "* ]] && continue
        se_port_busy "$p" || {
            printf '%s\n' "$p"
            return 0
        }
    done
    return 1
}

# se_stack_start_free DIR: starts a stack in DIR on free ports, with other
# ports when one was taken meanwhile (stack.sh exit 3).  Sets SE_REDIS_PORT
# and SE_PG_PORT, and with SECKILL_REDIS_TOPOLOGY=sentinel SE_REPLICA_PORT and
# SE_SENTINEL_PORTS (SE_SENTINEL_COUNT of them, comma-separated).  Returns 0,
# or 1 after stopping what it started.
se_stack_start_free() {
    local dir=$1 attempt st i p
    local -a taken
    for ((attempt = 1; attempt <= SE_START_TRIES; attempt++)); do
        SE_REDIS_PORT=$(se_free_port) || return 1
        SE_PG_PORT=$(se_free_port "$SE_REDIS_PORT") || return 1
        SE_REPLICA_PORT=
        SE_SENTINEL_PORTS=
        if [[ ${SECKILL_REDIS_TOPOLOGY:-single} == sentinel ]]; then
            taken=("$SE_REDIS_PORT" "$SE_PG_PORT")
            SE_REPLICA_PORT=$(se_free_port "${taken[@]}") || return 1
            taken+=("$SE_REPLICA_PORT")
            for ((i = 0; i < SE_SENTINEL_COUNT; i++)); do
                p=$(se_free_port "${taken[@]}") || return 1
                taken+=("$p")
                SE_SENTINEL_PORTS+=${SE_SENTINEL_PORTS:+,}$p
            done
        fi
        st=0
        se_stack start "$dir" || st=$?
        ((st == 0)) && return 0
        "$SE_STACK" stop "$dir" >/dev/null 2>&1 || true
        ((st == 3)) || return 1
        printf 'stack-env: port clash, retrying with other ports\n' >&2
    done
    return 1
}

# se_stack CMD DIR: stack.sh CMD DIR on the ports se_stack_start_free chose.
se_stack() {
    if [[ -n $SE_SENTINEL_PORTS ]]; then
        SECKILL_REDIS_TOPOLOGY=sentinel SECKILL_REDIS_PORT=$SE_REDIS_PORT SECKILL_PG_PORT=$SE_PG_PORT \
            SECKILL_REDIS_REPLICA_PORT=$SE_REPLICA_PORT SECKILL_SENTINEL_PORTS=$SE_SENTINEL_PORTS \
            "$SE_STACK" "$1" "$2"
    else
        SECKILL_REDIS_PORT=$SE_REDIS_PORT SECKILL_PG_PORT=$SE_PG_PORT "$SE_STACK" "$1" "$2"
    fi
}

# se_stack_restart DIR: starts again whatever part of the stack in DIR is down,
# on the ports se_stack_start_free chose.
se_stack_restart() {
    se_stack start "$1"
}

# se_secret_file FILE: prints the secret in FILE, made first (32 random bytes
# in hex, mode 600) when FILE is missing or empty.  For the admin token and the
# buyer token secret of `make run` and the load scripts.
se_secret_file() {
    local file=$1
    if [[ ! -s $file ]]; then
        (
            umask 077
            od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$file.tmp"
            mv -f "$file.tmp" "$file"
        )
    fi
    chmod 600 "$file"
    tr -d ' \r\n' <"$file"
}

# se_redis_admin_url DIR PORT: the stack's Redis as its admin ACL user
# (FLUSHALL, SCRIPT FLUSH, CLIENT KILL: what tests and scripts do to Redis,
# never the service, whose DIR/env URL names the restricted user).  A plain
# redis:// URL to the master: PORT, or in the Sentinel topology the master the
# Sentinels name (another node than PORT's after a failover).
se_redis_admin_url() {
    local pw port
    pw=$(tr -dc '0-9a-f' <"$1/redis-admin-password") || return 1
    [[ -n $pw ]] || return 1
    port=$(se_redis_master_port "$1" "$2")
    printf 'redis://seckill-admin:%s@127.0.0.1:%s/0\n' "$pw" "$port"
}

# se_redis_admin DIR PORT ARGS...: redis-cli as that admin user on PORT (a
# data node or a Sentinel; the password through the environment, never on
# the command line).
se_redis_admin() {
    local dir=$1 port=$2 pw
    shift 2
    pw=$(tr -dc '0-9a-f' <"$dir/redis-admin-password") || return 1
    REDISCLI_AUTH=$pw redis-cli --user seckill-admin -h 127.0.0.1 -p "$port" "$@"
}

# se_redis_master_port DIR PORT: the port of the master of DIR's Redis: in the
# Sentinel topology what the first Sentinel that answers says, else PORT.
se_redis_master_port() {
    local dir=$1 conf sport out p
    if grep -qs '^masteruser ' "$dir/redis/redis.conf"; then
        for conf in "$dir"/sentinel-[0-9]*/sentinel.conf; do
            [[ -r $conf ]] || continue
            sport=$(awk '$1 == "port" { print $2; exit }' "$conf")
            out=$(se_redis_admin "$dir" "$sport" SENTINEL GET-MASTER-ADDR-BY-NAME seckill 2>/dev/null) ||
                continue
            p=$(sed -n 2p <<<"$out" | tr -dc '0-9')
            if [[ -n $p ]]; then
                printf '%s\n' "$p"
                return 0
            fi
        done
    fi
    printf '%s\n' "$2"
}

# se_pg_admin_dsn DIR PORT: the stack's PostgreSQL as its superuser, with the
# superuser's own password file (TRUNCATE between tests, pg_terminate_backend,
# tampering with rows: what tests and scripts do to the database, never the
# service, whose DIR/env DSN names the role seckill_app).
se_pg_admin_dsn() {
    [[ -r $1/pgpass-admin ]] || return 1
    printf "host=127.0.0.1 port=%s dbname=seckill user=seckill passfile='%s' connect_timeout=5\n" \
        "$2" "$1/pgpass-admin"
}

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
# SECKILL_REDIS_TOPOLOGY=cluster: the masters' and the replicas' ports (a
# node's cluster bus is on its port + SE_CLUSTER_BUS_OFFSET, free too).  The
# nodes' ports are drawn below SE_CLUSTER_PORT_HI so that the bus ports stay
# in se_free_port's range, under the kernel's ephemeral ports.
SE_CLUSTER_MASTERS=3
SE_CLUSTER_BUS_OFFSET=10000
SE_CLUSTER_PORT_LO=10000
SE_CLUSTER_PORT_HI=22000
SE_CLUSTER_REPLICAS=
SE_CLUSTER_PORTS=
SE_CLUSTER_REPLICA_PORTS=
# SECKILL_PG_TOPOLOGY=ha: the second PostgreSQL server's, the Patroni REST
# APIs' and etcd's ports too
SE_PG_REPLICA_PORT=
SE_PATRONI_API_PORTS=
SE_ETCD_PORT=
SE_ETCD_PEER_PORT=
# SECKILL_PGBOUNCER=1: pgbouncer's port too
SE_PGBOUNCER_PORT=

# shellcheck source=scripts/stack/pg-dsn.sh
source "$ROOT/scripts/stack/pg-dsn.sh"

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

# se_free_cluster_port [EXCLUDE...]: a port for a cluster node: it and its
# bus port (+ SE_CLUSTER_BUS_OFFSET) free and neither among EXCLUDE.
se_free_cluster_port() {
    local i p b
    for ((i = 0; i < SE_PORT_TRIES; i++)); do
        p=$((SE_CLUSTER_PORT_LO + (RANDOM * 32768 + RANDOM) % (SE_CLUSTER_PORT_HI - SE_CLUSTER_PORT_LO)))
        b=$((p + SE_CLUSTER_BUS_OFFSET))
        [[ " $* " == *" $p "* || " $* " == *" $b "* ]] && continue
        se_port_busy "$p" || se_port_busy "$b" || {
            printf '%s\n' "$p"
            return 0
        }
    done
    return 1
}

# se_env_value DIR NAME: NAME's value in DIR/env (what stack.sh wrote).
se_env_value() {
    # shellcheck disable=SC2016  # expanded by the inner shell
    bash -c 'source "$1" >/dev/null 2>&1 && printf "%s" "${!2:-}"' _ "$1/env" "$2"
}

# se_stack_start_free DIR: starts a stack in DIR on free ports, with other
# ports when one was taken meanwhile (stack.sh exit 3).  Sets SE_REDIS_PORT
# and SE_PG_PORT, and with SECKILL_REDIS_TOPOLOGY=sentinel SE_REPLICA_PORT and
# SE_SENTINEL_PORTS (SE_SENTINEL_COUNT of them, comma-separated); with
# SECKILL_REDIS_TOPOLOGY=cluster SE_CLUSTER_PORTS (SE_CLUSTER_MASTERS masters),
# SE_CLUSTER_REPLICAS (SECKILL_REDIS_CLUSTER_REPLICAS, default 1) and
# SE_CLUSTER_REPLICA_PORTS, as DIR/env names them, and SE_REDIS_PORT the first
# master; with SECKILL_PG_TOPOLOGY=ha SE_PG_REPLICA_PORT, SE_PATRONI_API_PORTS,
# SE_ETCD_PORT and SE_ETCD_PEER_PORT; with SECKILL_PGBOUNCER=1 SE_PGBOUNCER_PORT.
# Returns 0, or 1 after stopping what it started.
se_stack_start_free() {
    local dir=$1 attempt st i p
    local -a taken
    for ((attempt = 1; attempt <= SE_START_TRIES; attempt++)); do
        SE_REPLICA_PORT=
        SE_SENTINEL_PORTS=
        SE_CLUSTER_REPLICAS=
        SE_CLUSTER_PORTS=
        SE_CLUSTER_REPLICA_PORTS=
        if [[ ${SECKILL_REDIS_TOPOLOGY:-single} == cluster ]]; then
            SE_CLUSTER_REPLICAS=${SECKILL_REDIS_CLUSTER_REPLICAS:-1}
            [[ $SE_CLUSTER_REPLICAS =~ ^[0-9]$ ]] || return 1
            taken=()
            for ((i = 0; i < SE_CLUSTER_MASTERS * (1 + SE_CLUSTER_REPLICAS); i++)); do
                p=$(se_free_cluster_port "${taken[@]}") || return 1
                taken+=("$p" "$((p + SE_CLUSTER_BUS_OFFSET))")
                if ((i < SE_CLUSTER_MASTERS)); then
                    SE_CLUSTER_PORTS+=${SE_CLUSTER_PORTS:+,}$p
                else
                    SE_CLUSTER_REPLICA_PORTS+=${SE_CLUSTER_REPLICA_PORTS:+,}$p
                fi
            done
            SE_REDIS_PORT=${SE_CLUSTER_PORTS%%,*}
            SE_PG_PORT=$(se_free_port "${taken[@]}") || return 1
            taken+=("$SE_PG_PORT")
        else
            SE_REDIS_PORT=$(se_free_port) || return 1
            SE_PG_PORT=$(se_free_port "$SE_REDIS_PORT") || return 1
            taken=("$SE_REDIS_PORT" "$SE_PG_PORT")
        fi
        SE_PG_REPLICA_PORT=
        SE_PATRONI_API_PORTS=
        SE_ETCD_PORT=
        SE_ETCD_PEER_PORT=
        if [[ ${SECKILL_PG_TOPOLOGY:-single} == ha ]]; then
            SE_PG_REPLICA_PORT=$(se_free_port "${taken[@]}") || return 1
            taken+=("$SE_PG_REPLICA_PORT")
            for ((i = 0; i < 2; i++)); do
                p=$(se_free_port "${taken[@]}") || return 1
                taken+=("$p")
                SE_PATRONI_API_PORTS+=${SE_PATRONI_API_PORTS:+,}$p
            done
            SE_ETCD_PORT=$(se_free_port "${taken[@]}") || return 1
            taken+=("$SE_ETCD_PORT")
            SE_ETCD_PEER_PORT=$(se_free_port "${taken[@]}") || return 1
            taken+=("$SE_ETCD_PEER_PORT")
        fi
        SE_PGBOUNCER_PORT=
        if [[ ${SECKILL_PGBOUNCER:-0} == 1 ]]; then
            SE_PGBOUNCER_PORT=$(se_free_port "${taken[@]}") || return 1
            taken+=("$SE_PGBOUNCER_PORT")
        fi
        if [[ ${SECKILL_REDIS_TOPOLOGY:-single} == sentinel ]]; then
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
        if ((st == 0)) && [[ -n $SE_CLUSTER_PORTS ]]; then
            # A cluster keeps the ports it was made on (a retry after a
            # clash may have found it made): the ones DIR/env names.
            SE_CLUSTER_PORTS=$(se_env_value "$dir" SECKILL_REDIS_CLUSTER_PORTS)
            SE_CLUSTER_REPLICA_PORTS=$(se_env_value "$dir" SECKILL_REDIS_CLUSTER_REPLICA_PORTS)
            SE_REDIS_PORT=${SE_CLUSTER_PORTS%%,*}
            [[ -n $SE_CLUSTER_PORTS ]] || return 1
        fi
        ((st == 0)) && return 0
        "$SE_STACK" stop "$dir" >/dev/null 2>&1 || true
        ((st == 3)) || return 1
        printf 'stack-env: port clash, retrying with other ports\n' >&2
    done
    return 1
}

# se_stack CMD DIR: stack.sh CMD DIR on the ports se_stack_start_free chose.
se_stack() {
    local -a pg=(SECKILL_PG_PORT="$SE_PG_PORT")
    [[ -z $SE_PGBOUNCER_PORT ]] || pg+=(SECKILL_PGBOUNCER=1 SECKILL_PGBOUNCER_PORT="$SE_PGBOUNCER_PORT")
    if [[ -n $SE_ETCD_PORT ]]; then
        pg+=(SECKILL_PG_TOPOLOGY=ha SECKILL_PG_REPLICA_PORT="$SE_PG_REPLICA_PORT"
            SECKILL_PATRONI_API_PORTS="$SE_PATRONI_API_PORTS" SECKILL_ETCD_PORT="$SE_ETCD_PORT"
            SECKILL_ETCD_PEER_PORT="$SE_ETCD_PEER_PORT")
    fi
    if [[ -n $SE_CLUSTER_PORTS ]]; then
        env "${pg[@]}" SECKILL_REDIS_TOPOLOGY=cluster SECKILL_REDIS_PORT="$SE_REDIS_PORT" \
            SECKILL_REDIS_CLUSTER_PORTS="$SE_CLUSTER_PORTS" SECKILL_REDIS_CLUSTER_REPLICAS="$SE_CLUSTER_REPLICAS" \
            SECKILL_REDIS_CLUSTER_REPLICA_PORTS="$SE_CLUSTER_REPLICA_PORTS" "$SE_STACK" "$1" "$2"
    elif [[ -n $SE_SENTINEL_PORTS ]]; then
        env "${pg[@]}" SECKILL_REDIS_TOPOLOGY=sentinel SECKILL_REDIS_PORT="$SE_REDIS_PORT" \
            SECKILL_REDIS_REPLICA_PORT="$SE_REPLICA_PORT" SECKILL_SENTINEL_PORTS="$SE_SENTINEL_PORTS" \
            "$SE_STACK" "$1" "$2"
    else
        env "${pg[@]}" SECKILL_REDIS_PORT="$SE_REDIS_PORT" "$SE_STACK" "$1" "$2"
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
# Sentinels name (another node than PORT's after a failover), or in the
# cluster topology the first master that answers (one node of several: a
# FLUSHALL there empties its slots only).
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
# Sentinel topology what the first Sentinel that answers says, in the cluster
# topology the first master se_cluster_master_ports names, else PORT.
se_redis_master_port() {
    local dir=$1 conf sport out p
    if [[ $(cat "$dir/redis-topology" 2>/dev/null) == cluster ]]; then
        p=$(se_cluster_master_ports "$dir" | head -n1)
        if [[ -n $p ]]; then
            printf '%s\n' "$p"
            return 0
        fi
    elif grep -qs '^masteruser ' "$dir/redis/redis.conf"; then
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

# se_cluster_master_ports DIR: the ports of the masters of DIR's cluster now
# (one per line, in slot order): those serving slots that the first node
# answering (as the admin user) sees neither failed nor suspected (CLUSTER
# NODES).  Prints nothing (status 1) when no node answers.
se_cluster_master_ports() {
    local dir=$1 conf port out pw
    pw=$(tr -dc '0-9a-f' <"$dir/redis-admin-password") || return 1
    for conf in "$dir"/redis-cluster-[0-9]*/redis.conf; do
        [[ -r $conf ]] || continue
        port=$(awk '$1 == "port" { print $2; exit }' "$conf")
        [[ -n $port ]] || continue
        # Bounded: a node stopped (SIGSTOP) by a fault scenario never answers.
        out=$(REDISCLI_AUTH=$pw timeout 5 redis-cli --user seckill-admin -h 127.0.0.1 -p "$port" \
            CLUSTER NODES 2>/dev/null | tr -d '\r') || continue
        [[ $out == *master* ]] || continue
        awk -f "$ROOT/scripts/cluster-masters.awk" <<<"$out"
        return 0
    done
    return 1
}

# se_pg_admin_dsn DIR PORT: the stack's PostgreSQL as its superuser, with the
# superuser's own password file (TRUNCATE between tests, pg_terminate_backend,
# tampering with rows: what tests and scripts do to the database, never the
# service, whose DIR/env DSN names the role seckill_app).  With the Patroni
# topology (DIR/env's SECKILL_PG_PORTS) every member, whichever is primary.
se_pg_admin_dsn() {
    local ports
    [[ -r $1/pgpass-admin ]] || return 1
    ports=$(se_env_value "$1" SECKILL_PG_PORTS)
    pg_dsn "${ports:-$2}" seckill "$1/pgpass-admin"
}

# HAProxy in front of several daemons (scripts/run.sh, scripts/faults.sh).  It speaks to them from its own
# loopback address (HAPROXY_SOURCE) and opens each connection with the PROXY
# protocol header naming the buyer, which the daemons trust from that address
# only (http_trusted_proxies): their per-address limits see the buyers, and
# the scripts' own checks from 127.0.0.1 stay plain HTTP.  A daemon takes
# HAPROXY_SERVER_MAXCONN requests at once (the others queue for
# HAPROXY_TIMEOUT_QUEUE).
SE_HAPROXY_MAXCONN=2000 # client connections, lowered to what the fd limit allows
HAPROXY_SOURCE=127.0.0.2
HAPROXY_SERVER_MAXCONN=256
# Checks every second; once one fails, or while a daemon is out, every 250 ms:
# two failed in a row take it out (~1.25 s), two good ones bring it back
# (~0.5 s after it is healthy again).
HAPROXY_CHECK='inter 1s fastinter 250ms downinter 250ms fall 2 rise 2'
HAPROXY_TIMEOUT_CONNECT=2s
HAPROXY_TIMEOUT_CHECK=2s
HAPROXY_TIMEOUT_CLIENT=30s
# Longer than any answer of a daemon: an order waits at most order_ack_wait_ms
# (2 s), an admin request a SKU lock (2 s) and the database (6 s).
HAPROXY_TIMEOUT_SERVER=15s
HAPROXY_TIMEOUT_QUEUE=5s
# As the daemon's http_request_timeout_ms and http_idle_timeout_ms.
HAPROXY_TIMEOUT_HTTP_REQUEST=5s
HAPROXY_TIMEOUT_KEEP_ALIVE=10s

# se_haproxy_conf BIND MAXCONN PORT...: HAProxy's config, HTTP on BIND, round
# robin over the daemons on 127.0.0.1:PORT..., each checked on GET /healthz.
se_haproxy_conf() {
    local bind=$1 maxconn=$2 i=0 p
    shift 2
    cat <<EOF
# generated by scripts/stack-env.sh on every start (no secret in it)
global
    maxconn $maxconn
    # In the foreground (run.sh keeps its pid), its log on its standard output
    log stdout format raw local0 info

defaults
    mode http
    log global
    option httplog
    # One connection to a daemon per request: a kept-alive one may be closed
    # by the daemon (its idle timeout) just as a POST goes out on it.
    option http-server-close
    # A request no daemon took (connection refused: it died) tries another.
    option redispatch
    retries 2
    timeout connect $HAPROXY_TIMEOUT_CONNECT
    timeout check $HAPROXY_TIMEOUT_CHECK
    timeout client $HAPROXY_TIMEOUT_CLIENT
    timeout server $HAPROXY_TIMEOUT_SERVER
    timeout queue $HAPROXY_TIMEOUT_QUEUE
    timeout http-request $HAPROXY_TIMEOUT_HTTP_REQUEST
    timeout http-keep-alive $HAPROXY_TIMEOUT_KEEP_ALIVE
    # HAProxy's own 503 (no daemon in service: all failing /healthz, as
    # while Redis fails over) in the daemons' shape: JSON with Retry-After.
    http-error status 503 content-type application/json string "{\\"error\\":\\"unavailable\\",\\"detail\\":\\"no instance in service; try again\\"}" hdr Retry-After 1 hdr Cache-Control no-store

frontend seckill
    bind $bind
    # The buyer API and the cheap /healthz only: /metrics and the admin API
    # are on each daemon's internal listener (metrics_addr), never public.
    http-request return status 404 content-type application/json string "{\"error\":\"not_found\"}" hdr Cache-Control no-store unless { path_beg /api/ } || { path /healthz }
    default_backend seckilld

backend seckilld
    balance roundrobin
    option httpchk
    http-check send meth GET uri /healthz ver HTTP/1.1 hdr Host localhost
    http-check expect status 200
    default-server check $HAPROXY_CHECK maxconn $HAPROXY_SERVER_MAXCONN
EOF
    for p in "$@"; do
        i=$((i + 1))
        printf '    server seckilld-%d 127.0.0.1:%s send-proxy check-send-proxy source %s\n' \
            "$i" "$p" "$HAPROXY_SOURCE"
    done
}

# se_haproxy_start DIR BIND PORT...: HAProxy on BIND in front of the daemons
# on 127.0.0.1:PORT..., its config and log in DIR (rewritten each time), in
# the background; as root it runs as Debian's haproxy user (no_new_privs).
# Sets SE_HAPROXY_PID.  Returns 1 (with a message) when HAProxy refuses its
# config.
se_haproxy_start() {
    local dir=$1 bind=$2 maxconn=$SE_HAPROXY_MAXCONN fd_limit
    shift 2
    mkdir -p "$dir"
    fd_limit=$(ulimit -Hn)
    if [[ $fd_limit =~ ^[0-9]+$ ]] && ((maxconn * 2 + 100 > fd_limit)); then
        maxconn=$(((fd_limit - 100) / 2)) # a client and a server socket each
    fi
    se_haproxy_conf "$bind" "$maxconn" "$@" >"$dir/haproxy.cfg.tmp"
    chmod 644 "$dir/haproxy.cfg.tmp"
    mv -f "$dir/haproxy.cfg.tmp" "$dir/haproxy.cfg"
    SE_HAPROXY=(haproxy)
    if [[ $(id -u) -eq 0 ]]; then
        id -u haproxy >/dev/null 2>&1 || {
            printf 'stack-env: no haproxy user to run HAProxy as (the haproxy package makes it)\n' >&2
            return 1
        }
        SE_HAPROXY=(setpriv --reuid=haproxy --regid=haproxy --init-groups --no-new-privs -- haproxy)
    fi
    "${SE_HAPROXY[@]}" -c -q -f "$dir/haproxy.cfg" || {
        printf 'stack-env: haproxy refuses %s\n' "$dir/haproxy.cfg" >&2
        return 1
    }
    : >"$dir/haproxy.log"
    "${SE_HAPROXY[@]}" -db -f "$dir/haproxy.cfg" </dev/null >>"$dir/haproxy.log" 2>&1 &
    # shellcheck disable=SC2034  # the caller's
    SE_HAPROXY_PID=$!
}

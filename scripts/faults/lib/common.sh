# shellcheck shell=bash
# Sourced by scripts/faults.sh: the run's bookkeeping (what it started,
# froze and observed, and its cleanup), the servers of the stack, the
# daemons and their admin API.

SCRATCH=
STACK_DIR=
HA_DIR=      # the Sentinel stack of redis-failover, while it runs
BALANCER_PID= # the HAProxy of the balancer-* scenarios, while it runs
DAEMON_PIDS=() # every seckilld started here and not yet stopped
FROZEN_PIDS=() # every process SIGSTOPped here and not yet continued
LOAD_PID=
LOAD_T0=     # when the load began
RESHARD_PID= # cluster-reshard's redis-cli --cluster reshard, while it runs
SCEN=        # the scenario running
SDIR=        # its directory
REASONS=()   # why it failed
HEAL_S=      # healing time observed
NOTES=()     # what it observed besides
RESULTS=()

rand_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

fail() {
    REASONS+=("$*")
    printf '%s: [%s] FAIL: %s\n' "$PROG" "$SCEN" "$*" >&2
}
note() {
    NOTES+=("$*")
    say "[$SCEN] $*"
}

# thaw: SIGCONT everything frozen here (a frozen server must never be left).
thaw() {
    local p
    for p in "${FROZEN_PIDS[@]}"; do
        kill -CONT "$p" 2>/dev/null || true
    done
    FROZEN_PIDS=()
}

# freeze PID...: SIGSTOP, remembered for thaw.
freeze() {
    local p
    for p in "$@"; do
        FROZEN_PIDS+=("$p")
        kill -STOP "$p" 2>/dev/null || true
    done
}

stop_daemons() {
    local p
    for p in "${DAEMON_PIDS[@]}"; do
        lt_stop "$p" seckilld
    done
    DAEMON_PIDS=()
}

faults_cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    thaw
    lt_stop "$LOAD_PID" seckill-loadtest
    lt_stop "$RESHARD_PID" redis-cli
    lt_stop "$BALANCER_PID" haproxy
    stop_daemons
    if [[ -n $HA_DIR ]]; then
        "$LT_STACK" stop "$HA_DIR" >/dev/null 2>&1 ||
            printf '%s: warning: stopping the stack in %s failed\n' "$PROG" "$HA_DIR" >&2
    fi
    if [[ -n $STACK_DIR ]]; then
        "$LT_STACK" stop "$STACK_DIR" >/dev/null ||
            printf '%s: warning: stopping the stack in %s failed\n' "$PROG" "$STACK_DIR" >&2
    fi
    if [[ -n $SCRATCH && -d $SCRATCH ]]; then
        if [[ ${FAULTS_KEEP:-0} == 1 ]]; then
            say "FAULTS_KEEP=1: kept $SCRATCH"
        else
            rm -rf "$SCRATCH"
        fi
    fi
    exit "$rc"
}

redis_pid() { tr -dc '0-9' <"$STACK_DIR/redis/redis.pid" 2>/dev/null || true; }
pg_pid() { head -n1 "$STACK_DIR/pg/data/postmaster.pid" 2>/dev/null | tr -dc '0-9' || true; }

# wait_gone PID: bounded wait until PID no longer runs.
wait_gone() {
    local i
    for ((i = 0; i < STACK_WAIT_TENTHS; i++)); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.1
    done
    return 1
}

# The internal listener (metrics, admin) of each daemon started here, by its
# public base URL (and HAProxy's, by the first daemon behind it).
declare -A INTERNAL=()

# internal_url URL: the internal base URL of the daemon whose public base URL
# is URL (URL itself when unknown).
internal_url() {
    printf '%s\n' "${INTERNAL[$1]:-$1}"
}

# start_daemon NAME [PORT]: seckilld with the caller's environment (add
# settings as VAR=value before the call), on PORT or a free port, its
# internal listener on another free port.  Sets D_PID and D_PORT; the log is
# SDIR/NAME.log.
start_daemon() {
    local name=$1 port=${2:-} i mport
    for ((i = 0; i < LT_START_TRIES; i++)); do
        [[ -n ${2:-} ]] || port=$(se_free_port) || die "no free port"
        mport=$(se_free_port "$port") || die "no free port"
        if lt_daemon_start "127.0.0.1:$port" "$SDIR/$name.log" "127.0.0.1:$mport"; then
            INTERNAL["http://127.0.0.1:$port"]=http://127.0.0.1:$mport
            D_PID=$LT_DAEMON_PID D_PORT=$port
            DAEMON_PIDS+=("$D_PID")
            LT_DAEMON_PID=
            return 0
        fi
        [[ -z ${2:-} ]] || break
    done
    fail "seckilld $name did not start (log $SDIR/$name.log)"
    return 1
}

# forget_daemon PID: it was killed here; reap it.
forget_daemon() {
    local p keep=()
    wait "$1" 2>/dev/null || true
    for p in "${DAEMON_PIDS[@]}"; do
        [[ $p == "$1" ]] || keep+=("$p")
    done
    DAEMON_PIDS=("${keep[@]}")
}

admin() { # admin METHOD URL [JSON]: prints the body, then the status on its own line
    # (URL on a daemon's public base goes to its internal listener, as admin requests must)
    # The token reaches curl on stdin, not in its arguments (ps shows those).
    local base=${2%%/admin/*} args=(-sS --max-time "$ADMIN_MAX_TIME_S" -X "$1" -H @- -w '\n%{http_code}')
    [[ -n ${3:-} ]] && args+=(-H 'Content-Type: application/json' -d "$3")
    printf 'Authorization: Bearer %s\n' "$SECKILL_ADMIN_TOKEN" |
        curl "${args[@]}" "$(internal_url "$base")${2#"$base"}" 2>/dev/null || printf '\n000'
}

# create_sku URL ID STOCK LIMIT
create_sku() {
    local out
    out=$(admin POST "$1/admin/v1/skus" \
        "{\"id\":$2,\"name\":\"faults $SCEN $2\",\"stock\":$3,\"per_user_limit\":$4}")
    [[ ${out##*$'\n'} == 201 ]] || {
        fail "creating SKU $2 answered ${out//$'\n'/ }"
        return 1
    }
}

# Redis comes back empty: its AOF (and any RDB) removed.
wipe_redis_data() { rm -rf "$STACK_DIR/redis/appendonlydir" "$STACK_DIR/redis/dump.rdb"; }

# two_daemons SKU: D1 and D2 on one stack sharing the load on SKU.
two_daemons() {
    start_daemon d1 || return 1
    D1_PID=$D_PID D1_URL=http://127.0.0.1:$D_PORT
    start_daemon d2 || return 1
    D2_URL=http://127.0.0.1:$D_PORT
    under_load "$1" "$D1_URL" "$D2_URL"
}

# died_at PID POINT WHY TENTHS: waits up to TENTHS tenths of a second for the
# daemon PID (started with SECKILL_FAULT=POINT) to kill itself there; sets
# DIED_STATUS.  Returns 1 (failing the scenario, WHY in the message) when it
# lives on.
died_at() {
    local pid=$1 i
    for ((i = 0; i < $4; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        fail "SECKILL_FAULT=$2 not honoured: $3"
        return 1
    fi
    DIED_STATUS=0
    wait "$pid" || DIED_STATUS=$?
    forget_daemon "$pid"
}

# balancer_up: two daemons behind HAProxy (scripts/stack-env.sh's, as `make
# run INSTANCES=2`: health checks on /healthz, the PROXY header from its own
# source address, which the daemons trust), on the stack the environment
# names, once HAProxy passes a /healthz.  Sets D1_PID and LB_URL.
balancer_up() {
    local p1 p2 hport i
    SECKILL_HTTP_TRUSTED_PROXIES=$HAPROXY_SOURCE start_daemon d1 || return 1
    D1_PID=$D_PID p1=$D_PORT
    SECKILL_HTTP_TRUSTED_PROXIES=$HAPROXY_SOURCE start_daemon d2 || return 1
    p2=$D_PORT
    hport=$(se_free_port "$p1" "$p2") || {
        fail "no free port for HAProxy"
        return 1
    }
    se_haproxy_start "$SDIR/haproxy" "127.0.0.1:$hport" "$p1" "$p2" || {
        fail "HAProxy did not start ($SDIR/haproxy)"
        return 1
    }
    BALANCER_PID=$SE_HAPROXY_PID
    LB_URL=http://127.0.0.1:$hport
    INTERNAL[$LB_URL]=$(internal_url "http://127.0.0.1:$p1")
    for ((i = 0; i < 100; i++)); do
        curl -fsS --max-time 2 -o /dev/null "$LB_URL/healthz" 2>/dev/null && break
        sleep 0.1
    done
}

# shellcheck shell=bash
# Shared by scripts/loadtest.sh and scripts/bench.sh (sourced, not run):
# bring up the local Redis + PostgreSQL and a seckilld when they are not
# running, and on exit stop only what was started here.
#
# The caller sets PROG, ROOT and BUILD_DIR before sourcing.

# shellcheck source=scripts/stack-env.sh
source "$ROOT/scripts/stack-env.sh"

LT_STACK=$ROOT/scripts/stack.sh
LT_STACK_DIR=
LT_STACK_STARTED=0
LT_DAEMON_PID=
LT_EXTRA_PID=
LT_HEALTH_WAIT_S=20
LT_STOP_WAIT_TENTHS=150
LT_START_TRIES=3
LT_DAEMON_PORT=

die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 1
}
say() { printf '%s: %s\n' "$PROG" "$*"; }

# lt_stack_up DIR: reuse a running stack in DIR or start one; migrate.
lt_stack_up() {
    LT_STACK_DIR=$1
    mkdir -p "$LT_STACK_DIR"
    if "$LT_STACK" status "$LT_STACK_DIR" >/dev/null 2>&1; then
        say "reusing the running stack in $LT_STACK_DIR"
    else
        LT_STACK_STARTED=1
        "$LT_STACK" start "$LT_STACK_DIR" || die "could not start the local stack in $LT_STACK_DIR"
    fi
    # shellcheck source=/dev/null
    source "$LT_STACK_DIR/env"
    export SECKILL_REDIS_URL SECKILL_PG_DSN PGPASSFILE
    "$BUILD_DIR/seckilld" migrate >"$LT_STACK_DIR/migrate.log" 2>&1 || {
        cat "$LT_STACK_DIR/migrate.log" >&2
        die "'$BUILD_DIR/seckilld migrate' failed"
    }
}

# lt_token DIR: SECKILL_ADMIN_TOKEN, else DIR/admin-token (generated if missing).
lt_token() {
    if [[ -z ${SECKILL_ADMIN_TOKEN:-} ]]; then
        SECKILL_ADMIN_TOKEN=$(se_secret_file "$1/admin-token")
    fi
    export SECKILL_ADMIN_TOKEN
}

# lt_buyer_secret DIR: SECKILL_BUYER_TOKEN_SECRET, else DIR/buyer-secret
# (generated if missing, as `make run` does), exported: seckilld verifies the
# buyers' tokens with it, seckill-loadtest and seckillctl token sign them.
lt_buyer_secret() {
    if [[ -z ${SECKILL_BUYER_TOKEN_SECRET:-} ]]; then
        SECKILL_BUYER_TOKEN_SECRET=$(se_secret_file "$1/buyer-secret")
    fi
    export SECKILL_BUYER_TOKEN_SECRET
}

# lt_healthy ADDR: true when http://ADDR/healthz answers 200.
lt_healthy() {
    curl -fsS --max-time 2 -o /dev/null "http://$1/healthz" 2>/dev/null
}

# lt_wait_listening ADDR PID NAME LOG [health|port]: bounded wait for the
# server.  Returns 1 when it exited during start-up (a port taken meanwhile:
# the caller may retry elsewhere); dies when it never came up.
lt_wait_listening() {
    local addr=$1 pid=$2 name=$3 log=$4 how=${5:-health} deadline=$((SECONDS + LT_HEALTH_WAIT_S))
    while :; do
        if [[ $how == health ]]; then
            lt_healthy "$addr" && return 0
        else
            se_port_busy "${addr##*:}" && return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid" 2>/dev/null || true
            tail -n 5 "$log" >&2 || true
            printf '%s: %s exited during start-up (log: %s)\n' "$PROG" "$name" "$log" >&2
            return 1
        fi
        ((SECONDS < deadline)) || {
            tail -n 20 "$log" >&2 || true
            die "$name did not come up on $addr within ${LT_HEALTH_WAIT_S}s (log: $log)"
        }
        sleep 0.2
    done
}

# lt_daemon_start ADDR LOG [MADDR]: seckilld serve in the background on ADDR,
# its internal listener (metrics, admin) on MADDR (default SECKILL_METRICS_ADDR,
# else the daemon's 127.0.0.1:9464), kept in LT_DAEMON_MADDR for --admin-url.
# Returns 1 when it exited during start-up.
lt_daemon_start() {
    local addr=$1 log=$2
    LT_DAEMON_MADDR=${3:-${SECKILL_METRICS_ADDR:-127.0.0.1:9464}}
    : >>"$log"
    SECKILL_HTTP_ADDR=$addr SECKILL_METRICS_ADDR=$LT_DAEMON_MADDR \
        SECKILL_LOG_LEVEL=${SECKILL_LOG_LEVEL:-warn} \
        "$BUILD_DIR/seckilld" serve </dev/null >>"$log" 2>&1 &
    LT_DAEMON_PID=$!
    if ! lt_wait_listening "$addr" "$LT_DAEMON_PID" seckilld "$log"; then
        LT_DAEMON_PID=
        return 1
    fi
    say "started seckilld on $addr (pid $LT_DAEMON_PID, log $log)"
}

# lt_daemon_start_free LOG: seckilld on two free loopback ports (a few tries);
# sets LT_DAEMON_PORT (public) and LT_DAEMON_MADDR (internal).
lt_daemon_start_free() {
    local i mport
    for ((i = 0; i < LT_START_TRIES; i++)); do
        LT_DAEMON_PORT=$(se_free_port) || die "no free port"
        mport=$(se_free_port) || die "no free port"
        [[ $mport != "$LT_DAEMON_PORT" ]] || continue
        lt_daemon_start "127.0.0.1:$LT_DAEMON_PORT" "$1" "127.0.0.1:$mport" && return 0
    done
    die "seckilld did not start in $LT_START_TRIES tries (log: $1)"
}

# lt_stop PID NAME: SIGTERM, bounded wait, SIGKILL.
lt_stop() {
    local pid=$1 name=$2 i
    [[ -n $pid ]] || return 0
    kill -0 "$pid" 2>/dev/null || {
        wait "$pid" 2>/dev/null || true
        return 0
    }
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < LT_STOP_WAIT_TENTHS; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        printf '%s: %s (pid %s) did not stop; killing it\n' "$PROG" "$name" "$pid" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

lt_cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    lt_stop "$LT_EXTRA_PID" http-ceiling
    lt_stop "$LT_DAEMON_PID" seckilld
    if ((LT_STACK_STARTED)); then
        "$LT_STACK" stop "$LT_STACK_DIR" >/dev/null ||
            printf '%s: warning: stopping the stack in %s failed\n' "$PROG" "$LT_STACK_DIR" >&2
    fi
    exit "$rc"
}
trap lt_cleanup EXIT
trap 'printf "\n%s: interrupted\n" "$PROG" >&2; exit 130' INT
trap 'printf "%s: terminated\n" "$PROG" >&2; exit 143' TERM

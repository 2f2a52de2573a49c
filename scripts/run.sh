#!/usr/bin/env bash
# `make run`: start Redis + PostgreSQL under var/, migrate, run the daemon in
# the foreground with a demo SKU.  Ctrl-C stops the daemon and the stack.
# With SECKILL_RUN_INSTANCES=N (`make run INSTANCES=N`, N up to 8) N daemons
# run on loopback ports of their own behind HAProxy, which listens on
# SECKILL_HTTP_ADDR instead; one that dies is taken out of the rotation and
# the others go on.  Ctrl-C stops HAProxy too.  Each daemon's internal
# listener (/metrics, /healthz, the admin API) is on a loopback port of its
# own, never behind HAProxy: SECKILL_METRICS_ADDR (127.0.0.1:9464) for one
# daemon, SECKILL_RUN_METRICS_PORT (9464) and the next ports for several.
#
# Env in: BUILD (default build), SECKILL_REDIS_PORT (6380), SECKILL_PG_PORT
#         (5433), SECKILL_HTTP_ADDR (127.0.0.1:8080), SECKILL_ADMIN_TOKEN
#         (default: var/admin-token, generated on first use and passed as
#         SECKILL_ADMIN_TOKEN_FILE), SECKILL_BUYER_TOKEN_SECRET (default:
#         var/buyer-secret, likewise generated), SECKILL_RUN_INSTANCES (1),
#         SECKILL_RUN_BACKEND_PORT (18081: the first daemon's port behind
#         HAProxy, the others the next ones; a taken port is replaced by a
#         free one), SECKILL_RUN_METRICS_PORT (9464: likewise, their internal
#         listeners), SECKILL_REDIS_TOPOLOGY (single; sentinel: `make run
#         REDIS=sentinel`; cluster: `make run REDIS=cluster`, read by
#         scripts/stack.sh with its SECKILL_REDIS_CLUSTER_* settings),
#         SECKILL_PG_TOPOLOGY (single; ha: `make run PG=ha`, PostgreSQL as a
#         Patroni cluster, scripts/stack/patroni.sh), SECKILL_RUN_VAR
#         (var: the stack, logs, tokens and var/env; service/tests/test_readme.sh
#         runs `make run` in a scratch one); any other SECKILL_*
#         setting is passed through to the daemons.  Secrets go by
#         environment or file, never as flags (they would show in ps).
set -euo pipefail

PROG=run.sh
HEALTH_WAIT=15
STOP_WAIT=15
MAX_INSTANCES=8
BACKEND_BASE_PORT=18081
METRICS_BASE_PORT=9464
HAPROXY_STOP_WAIT=5

die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 1
}
say() { printf '%s: %s\n' "$PROG" "$*"; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
STACK=$ROOT/scripts/stack.sh
# shellcheck source=scripts/stack-env.sh
source "$ROOT/scripts/stack-env.sh"
VAR=${SECKILL_RUN_VAR:-$ROOT/var}
LOG=$VAR/seckilld.log
BUILD_DIR=${BUILD:-build}
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
DAEMON=$BUILD_DIR/seckilld
CTL=$BUILD_DIR/seckillctl
[[ -f $DAEMON && -x $DAEMON ]] || die "$DAEMON is missing; build it first (make $BUILD_DIR/seckilld)"
[[ -f $CTL && -x $CTL ]] || die "$CTL is missing; build it first (make $BUILD_DIR/seckillctl)"
command -v curl >/dev/null 2>&1 || die "curl is not installed (run scripts/deps.sh)"

INSTANCES=${SECKILL_RUN_INSTANCES:-1}
if ! [[ $INSTANCES =~ ^[1-9]$ ]] || ((INSTANCES > MAX_INSTANCES)); then
    die "SECKILL_RUN_INSTANCES (make run INSTANCES=N) must be 1 to $MAX_INSTANCES, got '$INSTANCES'"
fi
if ((INSTANCES > 1)); then
    command -v haproxy >/dev/null 2>&1 || die "haproxy is not installed (run scripts/deps.sh)"
fi

DPIDS=() # the daemons still running (not reaped)
HPID=    # HAProxy
TPIDS=() # the log streams
STACK_STARTED=0
CLEANED=0

log_tail() { # log_tail [FILE]: the last lines of a daemon's log (default LOG)
    local f=${1:-$LOG}
    if [[ -s $f ]]; then
        printf -- '--- last lines of %s ---\n' "$f" >&2
        tail -n 40 "$f" >&2 || true
        printf -- '--- end of log ---\n' >&2
    fi
}

# forget_daemon PID: PID was reaped; it is no longer ours to stop.
forget_daemon() {
    local p keep=()
    for p in "${DPIDS[@]}"; do
        [[ $p == "$1" ]] || keep+=("$p")
    done
    DPIDS=("${keep[@]}")
}

# stop_daemons: SIGTERM to every daemon, SIGKILL to those still there after
# STOP_WAIT seconds.
stop_daemons() {
    local i pid alive
    ((${#DPIDS[@]} > 0)) || return 0
    for pid in "${DPIDS[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            say "stopping seckilld (pid $pid)"
            kill -TERM "$pid" 2>/dev/null || true
        fi
    done
    for ((i = 0; i < STOP_WAIT * 5; i++)); do
        alive=0
        for pid in "${DPIDS[@]}"; do
            kill -0 "$pid" 2>/dev/null && alive=1
        done
        ((alive)) || break
        sleep 0.2
    done
    for pid in "${DPIDS[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            printf '%s: seckilld did not exit within %ss; killing it\n' "$PROG" "$STOP_WAIT" >&2
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
    done
    DPIDS=()
}

stop_haproxy() {
    local i
    [[ -n $HPID ]] || return 0
    if kill -0 "$HPID" 2>/dev/null; then
        say "stopping haproxy (pid $HPID)"
        kill -TERM "$HPID" 2>/dev/null || true
        for ((i = 0; i < HAPROXY_STOP_WAIT * 5; i++)); do
            kill -0 "$HPID" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL "$HPID" 2>/dev/null || true
    fi
    wait "$HPID" 2>/dev/null || true
    HPID=
}

cleanup() {
    local pid
    ((CLEANED)) && return 0
    CLEANED=1
    trap '' INT TERM
    # The balancer first: no request goes to a daemon that is stopping.
    stop_haproxy
    stop_daemons
    for pid in "${TPIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if ((STACK_STARTED)); then
        "$STACK" stop "$VAR" || printf '%s: warning: stopping the stack failed\n' "$PROG" >&2
    fi
}
# shellcheck disable=SC2317  # invoked via trap
on_signal() {
    printf '\n%s: shutting down\n' "$PROG"
    cleanup
    exit 0
}
trap cleanup EXIT
trap on_signal INT TERM

# ---- stack + schema
mkdir -p "$VAR"
STACK_STARTED=1
"$STACK" start "$VAR"
# shellcheck source=/dev/null
source "$VAR/env"
say "migrating: $DAEMON migrate"
"$DAEMON" migrate || die "'$DAEMON migrate' failed"

# secret_file FILE WHAT: prints FILE's secret, generated (and said so) when missing.
secret_file() {
    [[ -s $1 ]] || say "generating the $2 in $1" >&2
    se_secret_file "$1"
}

# ---- admin token (at least 32 bytes; the daemon refuses a shorter one).
# The daemon reads it from the file (SECKILL_ADMIN_TOKEN_FILE), never from a
# flag; this script keeps a copy, unexported, for its own admin requests.
TOKEN_FILE=$VAR/admin-token
if [[ -n ${SECKILL_ADMIN_TOKEN+set} ]]; then
    TOKEN_FROM=environment
    export SECKILL_ADMIN_TOKEN
else
    SECKILL_ADMIN_TOKEN=$(secret_file "$TOKEN_FILE" "admin token")
    [[ -n $SECKILL_ADMIN_TOKEN ]] || die "$TOKEN_FILE is empty; delete it to regenerate"
    ((${#SECKILL_ADMIN_TOKEN} >= 32)) || die "$TOKEN_FILE holds fewer than 32 bytes; delete it to regenerate"
    export SECKILL_ADMIN_TOKEN_FILE=$TOKEN_FILE
    TOKEN_FROM=$TOKEN_FILE
fi

# ---- buyer token secret: the daemon verifies buyers' tokens with it,
# seckillctl token signs them (both read it from the environment).
SECRET_FILE=$VAR/buyer-secret
if [[ -n ${SECKILL_BUYER_TOKEN_SECRET:-} ]]; then
    SECRET_FROM=environment
else
    SECKILL_BUYER_TOKEN_SECRET=$(secret_file "$SECRET_FILE" "buyer token secret")
    SECRET_FROM=$SECRET_FILE
fi
export SECKILL_BUYER_TOKEN_SECRET

# ---- daemon
export SECKILL_HTTP_ADDR=${SECKILL_HTTP_ADDR:-127.0.0.1:8080}
ADDR=$SECKILL_HTTP_ADDR
HTTP_PORT=${ADDR##*:}
HTTP_HOST=${ADDR%:*}
[[ $HTTP_PORT =~ ^[0-9]+$ ]] || die "SECKILL_HTTP_ADDR must be HOST:PORT, got '$ADDR'"
case $HTTP_HOST in
'' | 0.0.0.0 | '*') HTTP_HOST=127.0.0.1 ;;
'[::]' | ::) HTTP_HOST='[::1]' ;;
esac
BASE=http://$HTTP_HOST:$HTTP_PORT
if command -v ss >/dev/null 2>&1 && [[ -n $(ss -ltnH "sport = :$HTTP_PORT" 2>/dev/null) ]]; then
    die "port $HTTP_PORT is already in use (another seckilld?); set SECKILL_HTTP_ADDR"
fi

# wait_healthy URL PID LOG: until URL/healthz answers 200, while PID (its
# daemon, or HAProxy) lives, at most HEALTH_WAIT seconds.
wait_healthy() {
    local url=$1 pid=$2 log=$3 deadline st
    deadline=$((SECONDS + HEALTH_WAIT))
    until curl -fsS --max-time 2 -o /dev/null "$url/healthz" 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null; then
            st=0
            wait "$pid" || st=$?
            forget_daemon "$pid"
            [[ $pid == "$HPID" ]] && HPID=
            log_tail "$log"
            die "$(basename "${log%.log}") exited during startup (status $st)$HINT"
        fi
        if ((SECONDS >= deadline)); then
            log_tail "$log"
            die "$(basename "${log%.log}") did not answer $url/healthz within ${HEALTH_WAIT}s"
        fi
        sleep 0.3
    done
}
HINT=
if [[ ${SECKILL_REDIS_URL:-} == redis-sentinel://* ]]; then
    HINT=" (REDIS=sentinel needs a seckilld that reads redis-sentinel:// URLs)"
elif [[ ${SECKILL_REDIS_URL:-} == redis-cluster://* ]]; then
    HINT=" (REDIS=cluster needs a seckilld that reads redis-cluster:// URLs)"
fi

# start_daemon ADDR LOG MADDR: seckilld serve on ADDR, its internal listener
# on MADDR, in the background.
start_daemon() {
    SECKILL_HTTP_ADDR=$1 SECKILL_METRICS_ADDR=$3 "$DAEMON" serve </dev/null >>"$2" 2>&1 &
    DPIDS+=("$!")
}

if ((INSTANCES == 1)); then
    MADDR=${SECKILL_METRICS_ADDR:-127.0.0.1:$METRICS_BASE_PORT}
    [[ ${MADDR##*:} =~ ^[0-9]+$ ]] || die "SECKILL_METRICS_ADDR must be HOST:PORT, got '$MADDR'"
    ADMIN_BASE=http://$MADDR
    : >>"$LOG"
    LOG_OFFSET=$(($(stat -c %s "$LOG") + 1))
    say "starting $DAEMON serve on $ADDR, internal API on $MADDR (log: $LOG)"
    start_daemon "$ADDR" "$LOG" "$MADDR"
    wait_healthy "$BASE" "${DPIDS[0]}" "$LOG"
    say "healthy: $BASE/healthz"
else
    # The daemons, on BACKEND_BASE_PORT and the next ports (a taken one is
    # replaced by a free one), each with its own log.
    BPORTS=()
    MPORTS=()
    BLOGS=()
    BOFFSETS=()
    p=${SECKILL_RUN_BACKEND_PORT:-$BACKEND_BASE_PORT}
    if ! [[ $p =~ ^[0-9]+$ ]] || ((p < 1 || p + INSTANCES - 1 > 65535)); then
        die "bad SECKILL_RUN_BACKEND_PORT: $p"
    fi
    mp=${SECKILL_RUN_METRICS_PORT:-$METRICS_BASE_PORT}
    if ! [[ $mp =~ ^[0-9]+$ ]] || ((mp < 1 || mp + INSTANCES - 1 > 65535)); then
        die "bad SECKILL_RUN_METRICS_PORT: $mp"
    fi
    for ((i = 1; i <= INSTANCES; i++, p++, mp++)); do
        bp=$p
        if [[ $bp == "$HTTP_PORT" ]] || se_port_busy "$bp"; then
            bp=$(se_free_port "$HTTP_PORT" "${BPORTS[@]}") || die "no free port for seckilld-$i"
            say "port $p is taken; seckilld-$i uses $bp"
        fi
        BPORTS+=("$bp")
        m=$mp
        if [[ $m == "$HTTP_PORT" ]] || [[ " ${BPORTS[*]} ${MPORTS[*]} " == *" $m "* ]] || se_port_busy "$m"; then
            m=$(se_free_port "$HTTP_PORT" "${BPORTS[@]}" "${MPORTS[@]}") || die "no free port for seckilld-$i"
            say "port $mp is taken; seckilld-$i's internal listener uses $m"
        fi
        MPORTS+=("$m")
        BLOGS+=("$VAR/seckilld-$i.log")
        : >>"${BLOGS[-1]}"
        BOFFSETS+=("$(($(stat -c %s "${BLOGS[-1]}") + 1))")
        say "starting $DAEMON serve on 127.0.0.1:$bp, internal 127.0.0.1:$m (seckilld-$i, log: ${BLOGS[-1]})"
        SECKILL_HTTP_TRUSTED_PROXIES=$HAPROXY_SOURCE start_daemon "127.0.0.1:$bp" "${BLOGS[-1]}" "127.0.0.1:$m"
    done
    for ((i = 0; i < INSTANCES; i++)); do
        wait_healthy "http://127.0.0.1:${BPORTS[i]}" "${DPIDS[i]}" "${BLOGS[i]}"
    done
    say "healthy: $INSTANCES daemons on 127.0.0.1:${BPORTS[*]} (internal: ${MPORTS[*]})"
    # the admin API of the first; every daemon serves it for all SKUs
    ADMIN_BASE=http://127.0.0.1:${MPORTS[0]}

    # HAProxy: its config and log under var/haproxy (scripts/stack-env.sh).
    HDIR=$VAR/haproxy
    HLOG=$HDIR/haproxy.log
    say "starting haproxy on $ADDR (config: $HDIR/haproxy.cfg, log: $HLOG)"
    # HAProxy binds what the daemon would have (its syntax is the same).
    se_haproxy_start "$HDIR" "$ADDR" "${BPORTS[@]}" || die "haproxy did not start"
    HPID=$SE_HAPROXY_PID
    wait_healthy "$BASE" "$HPID" "$HLOG"
    say "healthy: $BASE/healthz (haproxy, pid $HPID)"
fi

# curl with the admin token passed on stdin (keeps it out of `ps`).
admin_curl() {
    printf 'Authorization: Bearer %s\n' "$SECKILL_ADMIN_TOKEN" |
        curl -sS --max-time 10 -H @- "$@"
}

# ---- demo SKU
if [[ -z $SECKILL_ADMIN_TOKEN ]]; then
    say "SECKILL_ADMIN_TOKEN is empty: admin API disabled, no demo SKU created"
else
    code=$(admin_curl -o /dev/null -w '%{http_code}' "$ADMIN_BASE/admin/v1/skus/1" || true)
    case $code in
    404)
        out=$(admin_curl -w '\n%{http_code}' -X POST -H 'Content-Type: application/json' \
            -d '{"id":1,"name":"demo flash sale","stock":100,"per_user_limit":2}' \
            "$ADMIN_BASE/admin/v1/skus" || true)
        code=${out##*$'\n'}
        if [[ $code == 2?? ]]; then
            say "created demo SKU 1 (stock 100, 2 per user)"
        else
            printf '%s: warning: creating demo SKU 1 failed (HTTP %s): %s\n' "$PROG" "$code" "${out%$'\n'*}" >&2
        fi
        ;;
    200) say "demo SKU 1 already exists" ;;
    *) printf '%s: warning: GET /admin/v1/skus/1 answered HTTP %s; no demo SKU created\n' "$PROG" "${code:-?}" >&2 ;;
    esac
fi

# ---- usage
if [[ $TOKEN_FROM == environment ]]; then
    token_hint="# admin token: from your SECKILL_ADMIN_TOKEN"
else
    token_hint="export SECKILL_ADMIN_TOKEN=\$(cat $TOKEN_FROM)"
fi
if [[ $SECRET_FROM == environment ]]; then
    secret_hint="# buyer token secret: from your SECKILL_BUYER_TOKEN_SECRET"
else
    secret_hint="export SECKILL_BUYER_TOKEN_SECRET=\$(cat $SECRET_FROM)"
fi
CTL_REL=${CTL#"$ROOT"/}
if ((INSTANCES == 1)); then
    where="daemon log: $LOG"
else
    where="HAProxy in front of $INSTANCES daemons"
fi
cat <<EOF

seckill is running on $BASE   ($where; Ctrl-C stops everything)

  $token_hint
  $secret_hint
  # buy one unit of SKU 1 as user 42 (the buyer is the token's, signed with the secret)
  curl -sS -X POST -H "Authorization: Bearer \$($CTL_REL token --user 42)" -H 'Content-Type: application/json' -d '{"qty":1}' $BASE/api/v1/skus/1/orders
  # user 42's order (another buyer's token gets 404)
  curl -sS -H "Authorization: Bearer \$($CTL_REL token --user 42)" $BASE/api/v1/orders/ORDER_ID
  # view SKU 1
  curl -sS $BASE/api/v1/skus/1
  # admin (the internal listener, $ADMIN_BASE): add 10 units
  curl -sS -X POST -H "Authorization: Bearer \$SECKILL_ADMIN_TOKEN" -H 'Content-Type: application/json' -d '{"delta":10,"reason":"restock"}' $ADMIN_BASE/admin/v1/skus/1/stock-adjustments
  # admin: view SKU 1
  curl -sS -H "Authorization: Bearer \$SECKILL_ADMIN_TOKEN" $ADMIN_BASE/admin/v1/skus/1
  # metrics (the internal listener only; $BASE/metrics is 404)
  curl -sS $ADMIN_BASE/metrics

EOF

if ((INSTANCES == 1)); then
    # Stream the daemon's log (from its start) until it exits.
    tail -c +"$LOG_OFFSET" -f --pid="${DPIDS[0]}" "$LOG" &
    TPIDS+=("$!")

    st=0
    wait "${DPIDS[0]}" || st=$?
    DPIDS=()
    sleep 0.5 # let tail print the last lines
    printf '%s: seckilld exited by itself (status %s)\n' "$PROG" "$st" >&2
    cleanup
    exit "$st"
fi

cat <<EOF
  # behind HAProxy ($HDIR/haproxy.cfg, log $HLOG):
EOF
for ((i = 0; i < INSTANCES; i++)); do
    printf '  #   seckilld-%d on 127.0.0.1:%s, pid %s, log %s\n' "$((i + 1))" "${BPORTS[i]}" "${DPIDS[i]}" "${BLOGS[i]}"
done
cat <<EOF
  # kill one: HAProxy takes it out within ~2 s and the others serve on
  kill ${DPIDS[0]}

EOF

# Stream each log (a daemon's from its start), lines marked with their source.
for ((i = 0; i < INSTANCES; i++)); do
    tail -c +"${BOFFSETS[i]}" -f --pid="${DPIDS[i]}" "${BLOGS[i]}" | sed -u "s/^/[seckilld-$((i + 1))] /" &
    TPIDS+=("$!")
done
tail -n +1 -f --pid="$HPID" "$HLOG" | sed -u 's/^/[haproxy] /' &
TPIDS+=("$!")

# Until HAProxy or the last daemon exits: a daemon that dies is out of
# HAProxy's rotation, the others go on.
while :; do
    st=0
    done_pid=
    wait -n -p done_pid "$HPID" "${DPIDS[@]}" || st=$?
    [[ -n $done_pid ]] || continue # a signal; its trap has run
    if [[ $done_pid == "$HPID" ]]; then
        HPID=
        printf '%s: haproxy exited by itself (status %s)\n' "$PROG" "$st" >&2
        cleanup
        exit 1
    fi
    forget_daemon "$done_pid"
    printf '%s: seckilld (pid %s) exited (status %s); %d left behind HAProxy\n' \
        "$PROG" "$done_pid" "$st" "${#DPIDS[@]}" >&2
    if ((${#DPIDS[@]} == 0)); then
        sleep 0.5 # let tail print the last lines
        cleanup
        exit "$st"
    fi
done

#!/usr/bin/env bash
# `make run`: start Redis + PostgreSQL under var/, migrate, run the daemon in
# the foreground with a demo SKU.  Ctrl-C stops the daemon and the stack.
#
# Env in: BUILD (default build), SECKILL_REDIS_PORT (6380), SECKILL_PG_PORT
#         (5433), SECKILL_HTTP_ADDR (127.0.0.1:8080), SECKILL_ADMIN_TOKEN
#         (default: var/admin-token, generated on first use and passed as
#         SECKILL_ADMIN_TOKEN_FILE), SECKILL_BUYER_TOKEN_SECRET (default:
#         var/buyer-secret, likewise generated); any other SECKILL_* setting
#         is passed through to the daemon.  Secrets go by environment or
#         file, never as flags (they would show in ps).
set -euo pipefail

PROG=run.sh
HEALTH_WAIT=15
STOP_WAIT=15

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
VAR=$ROOT/var
LOG=$VAR/seckilld.log
BUILD_DIR=${BUILD:-build}
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
DAEMON=$BUILD_DIR/seckilld
CTL=$BUILD_DIR/seckillctl
[[ -f $DAEMON && -x $DAEMON ]] || die "$DAEMON is missing; build it first (make $BUILD_DIR/seckilld)"
[[ -f $CTL && -x $CTL ]] || die "$CTL is missing; build it first (make $BUILD_DIR/seckillctl)"
command -v curl >/dev/null 2>&1 || die "curl is not installed (run scripts/deps.sh)"

DPID=
TPID=
STACK_STARTED=0
CLEANED=0

log_tail() {
    if [[ -s $LOG ]]; then
        printf -- '--- last lines of %s ---\n' "$LOG" >&2
        tail -n 40 "$LOG" >&2 || true
        printf -- '--- end of log ---\n' >&2
    fi
}

stop_daemon() {
    local i
    [[ -n $DPID ]] || return 0
    if kill -0 "$DPID" 2>/dev/null; then
        say "stopping seckilld (pid $DPID)"
        kill -TERM "$DPID" 2>/dev/null || true
        for ((i = 0; i < STOP_WAIT * 5; i++)); do
            kill -0 "$DPID" 2>/dev/null || break
            sleep 0.2
        done
        if kill -0 "$DPID" 2>/dev/null; then
            printf '%s: seckilld did not exit within %ss; killing it\n' "$PROG" "$STOP_WAIT" >&2
            kill -KILL "$DPID" 2>/dev/null || true
        fi
    fi
    wait "$DPID" 2>/dev/null || true
    DPID=
}

cleanup() {
    ((CLEANED)) && return 0
    CLEANED=1
    trap '' INT TERM
    stop_daemon
    if [[ -n $TPID ]]; then
        kill "$TPID" 2>/dev/null || true
        wait "$TPID" 2>/dev/null || true
    fi
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

: >>"$LOG"
LOG_OFFSET=$(($(stat -c %s "$LOG") + 1))
say "starting $DAEMON serve on $ADDR (log: $LOG)"
"$DAEMON" serve </dev/null >>"$LOG" 2>&1 &
DPID=$!

deadline=$((SECONDS + HEALTH_WAIT))
until curl -fsS --max-time 2 -o /dev/null "$BASE/healthz" 2>/dev/null; do
    if ! kill -0 "$DPID" 2>/dev/null; then
        st=0
        wait "$DPID" || st=$?
        DPID=
        log_tail
        die "seckilld exited during startup (status $st)"
    fi
    if ((SECONDS >= deadline)); then
        log_tail
        die "seckilld did not answer $BASE/healthz within ${HEALTH_WAIT}s"
    fi
    sleep 0.3
done
say "healthy: $BASE/healthz"

# curl with the admin token passed on stdin (keeps it out of `ps`).
admin_curl() {
    printf 'Authorization: Bearer %s\n' "$SECKILL_ADMIN_TOKEN" |
        curl -sS --max-time 10 -H @- "$@"
}

# ---- demo SKU
if [[ -z $SECKILL_ADMIN_TOKEN ]]; then
    say "SECKILL_ADMIN_TOKEN is empty: admin API disabled, no demo SKU created"
else
    code=$(admin_curl -o /dev/null -w '%{http_code}' "$BASE/admin/v1/skus/1" || true)
    case $code in
    404)
        out=$(admin_curl -w '\n%{http_code}' -X POST -H 'Content-Type: application/json' \
            -d '{"id":1,"name":"demo flash sale","stock":100,"per_user_limit":2}' \
            "$BASE/admin/v1/skus" || true)
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
cat <<EOF

seckill is running on $BASE   (daemon log: $LOG; Ctrl-C stops everything)

  $token_hint
  $secret_hint
  # buy one unit of SKU 1 as user 42 (the buyer is the token's, signed with the secret)
  curl -sS -X POST -H "Authorization: Bearer \$($CTL_REL token --user 42)" -H 'Content-Type: application/json' -d '{"qty":1}' $BASE/api/v1/skus/1/orders
  # user 42's order (another buyer's token gets 404)
  curl -sS -H "Authorization: Bearer \$($CTL_REL token --user 42)" $BASE/api/v1/orders/ORDER_ID
  # view SKU 1
  curl -sS $BASE/api/v1/skus/1
  # admin: add 10 units
  curl -sS -X POST -H "Authorization: Bearer \$SECKILL_ADMIN_TOKEN" -H 'Content-Type: application/json' -d '{"delta":10,"reason":"restock"}' $BASE/admin/v1/skus/1/stock-adjustments
  # admin: view SKU 1
  curl -sS -H "Authorization: Bearer \$SECKILL_ADMIN_TOKEN" $BASE/admin/v1/skus/1

EOF

# Stream the daemon's log (from its start) until it exits.
tail -c +"$LOG_OFFSET" -f --pid="$DPID" "$LOG" &
TPID=$!

st=0
wait "$DPID" || st=$?
DPID=
sleep 0.5 # let tail print the last lines
printf '%s: seckilld exited by itself (status %s)\n' "$PROG" "$st" >&2
cleanup
exit "$st"

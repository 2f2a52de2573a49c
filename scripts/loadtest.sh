#!/usr/bin/env bash
# `make loadtest`: a flash sale against the local service, proven from the
# database.  Starts the local stack and seckilld if they are not running (and
# stops only those it started), then runs four sales with seckill-loadtest:
#
#   1. flash sale: 20,000 buyers on 200 connections for 1,000 units, 1 per user,
#      5 % of the requests retried with the same Idempotency-Key;
#   2. admin deltas: 40,000 orders of 1-3 units for 10,000 units, 3 per user, while 400 random
#      +/-1..20 stock adjustments race them;
#   3. lifecycle: 20,000 buyers on 100 connections for 2,000 units of 1-2, 2 per
#      user, a 3 s payment window; afterwards half of the orders are paid (5 %
#      of the pays twice with the same payment_ref), a fifth cancelled by their
#      buyers, the rest left to expire; the pays and cancels spread over 1.5 s,
#      a tenth of them at their order's deadline, where they race the expiry;
#   4. stock buckets: one SKU of 4,000 units in four stock buckets (on a
#      cluster, `make loadtest REDIS=cluster`, each on a master of its own),
#      40,000 orders of 1-2 units, 2 per user, while 100 stock adjustments are
#      split over the buckets; emptied buckets are refilled from the others
#      until the SKU is sold out, and every bucket is checked.
#
# Each prints its report, writes LT_OUT/<name>.html and .json, and fails the
# script on any invariant violation.
#
# Env in: BUILD (build), LT_VAR (var: the stack's directory), SECKILL_REDIS_PORT /
#         SECKILL_PG_PORT (6380 / 5433, for a stack started here),
#         SECKILL_HTTP_ADDR (127.0.0.1:8080), SECKILL_METRICS_ADDR (127.0.0.1:9464: the
#         admin requests), SECKILL_ADMIN_TOKEN (default
#         LT_VAR/admin-token, as `make run`), SECKILL_BUYER_TOKEN_SECRET
#         (default LT_VAR/buyer-secret, as `make run`), LT_OUT (LT_VAR/loadtest),
#         LT_SEED (1), LT_ARGS (extra flags for both runs).
set -euo pipefail

PROG=loadtest.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
BUILD_DIR=${BUILD:-build}
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
# shellcheck source=loadtest/lt-env.sh
source "$ROOT/loadtest/lt-env.sh"

LOADTEST=$BUILD_DIR/seckill-loadtest
for b in "$BUILD_DIR/seckilld" "$LOADTEST"; do
    [[ -x $b ]] || die "$b is missing; build it first (make all)"
done
command -v curl >/dev/null 2>&1 || die "curl is not installed (run scripts/deps.sh)"

VAR=${LT_VAR:-$ROOT/var}
[[ $VAR == /* ]] || VAR=$ROOT/$VAR
OUT=${LT_OUT:-$VAR/loadtest}
[[ $OUT == /* ]] || OUT=$ROOT/$OUT
SEED=${LT_SEED:-1}
[[ $SEED =~ ^[0-9]+$ ]] || die "LT_SEED must be a number, not '$SEED'"
ADDR=${SECKILL_HTTP_ADDR:-127.0.0.1:8080}
[[ ${ADDR##*:} =~ ^[0-9]+$ ]] || die "SECKILL_HTTP_ADDR must be HOST:PORT, not '$ADDR'"
# the daemon's internal listener: the admin requests (stock deltas, payments)
MADDR=${SECKILL_METRICS_ADDR:-127.0.0.1:9464}
[[ ${MADDR##*:} =~ ^[0-9]+$ ]] || die "SECKILL_METRICS_ADDR must be HOST:PORT, not '$MADDR'"
read -r -a EXTRA <<<"${LT_ARGS:-}"
# The crowd speaks from one address (127.0.0.1), and in the admin-delta run a
# buyer orders several times within a second: the rate limits would refuse
# most of it, and these runs prove the stock, not the limits (test_limits
# does).  A daemon reused here keeps its own limits; its 429s take nothing.
export SECKILL_RATE_ADDR_PER_S=${SECKILL_RATE_ADDR_PER_S:-0}
export SECKILL_RATE_BUYER_ORDERS_PER_MIN=${SECKILL_RATE_BUYER_ORDERS_PER_MIN:-0}
mkdir -p "$OUT"

lt_stack_up "$VAR"
lt_token "$VAR"
lt_buyer_secret "$VAR"
if lt_healthy "$ADDR"; then
    say "reusing the seckilld answering on $ADDR"
else
    se_port_busy "${ADDR##*:}" && die "$ADDR is taken by something that is not a healthy seckilld"
    lt_daemon_start "$ADDR" "$OUT/seckilld.log" "$MADDR" || die "seckilld could not start on $ADDR"
fi

failed=()
# run NAME FLAGS...: one sale; its exit status decides.  NO_ANSWERS=1: no
# answers file (a bucketed run splits its answers by bucket for its check).
run() {
    local name=$1 st=0 keep=()
    shift
    [[ -n ${NO_ANSWERS:-} ]] || keep=(--answers "$OUT/$name.answers")
    say "=== $name"
    "$LOADTEST" --url "http://$ADDR" --admin-url "http://$MADDR" --seed "$SEED" --label "$name" \
        --report "$OUT/$name.html" "${keep[@]}" "$@" "${EXTRA[@]}" || st=$?
    ((st == 0)) || failed+=("$name (exit $st)")
}

run flash-sale --users 20000 --concurrency 200 --stock 1000 --limit 1 --retry-share 0.05
run admin-deltas --users 20000 --requests 40000 --concurrency 100 --stock 10000 --limit 3 \
    --qty 1:70,2:20,3:10 --retry-share 0.1 \
    --admin-deltas 400 --admin-every-ms 10 --admin-max-delta 20
run lifecycle --users 20000 --concurrency 100 --stock 2000 --limit 2 --qty 1:80,2:20 \
    --payment-window 3 --pay-share 0.5 --cancel-share 0.2
NO_ANSWERS=1 run buckets --users 20000 --requests 40000 --concurrency 100 --stock 4000 --limit 2 \
    --qty 1:80,2:20 --retry-share 0.05 --buckets 4 \
    --admin-deltas 100 --admin-every-ms 20 --admin-max-delta 20

if ((${#failed[@]})); then
    printf '%s: FAILED: %s\n' "$PROG" "${failed[*]}" >&2
    exit 1
fi
say "every invariant held in all four runs; reports in $OUT/"

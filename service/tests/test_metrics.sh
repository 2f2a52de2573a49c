#!/usr/bin/env bash
# /metrics as Prometheus and Grafana see it, against the test stack (run by
# scripts/run-tests.sh, which starts Redis and PostgreSQL and exports
# SECKILL_TEST_*):
#
#  1. a daemon without writers in reserved mode takes orders (201 is not
#     possible there: 202s, a 409 sold_out, a 400, a 404): its scrape shows the
#     request, Redis and per-SKU numbers exactly (stream length and lag,
#     stock in Redis and in PostgreSQL, units in flight), the sale open (and
#     not for a SKU whose sale starts later), the oldest entry's age growing;
#  2. a daemon with a writer drains the stream: lag and units in flight go
#     back to 0 (the oldest entry's age too), the writer's batch histograms
#     have samples;
#  3. every scrape passes `promtool check metrics` (Debian's prometheus
#     package, unpacked by scripts/deps.sh into var/tools): any complaint
#     fails, and so does a missing promtool;
#  4. a store failure during a scrape (Redis refuses XINFO) leaves the
#     per-SKU block out, counts seckill_metrics_scrape_errors_total, still 200;
#  5. the stores' health: seckill_store_up is 1 for both, and a Redis that
#     refuses the probe's PING turns it to 0 and counts probe failures;
#  6. docs/grafana/seckill.json is valid JSON and every metric its queries use
#     is in a real scrape (but the names reserved for work not merged yet).
#
#   service/tests/test_metrics.sh      (PROMTOOL overrides var/tools/bin/promtool;
#                                       SECKILL_TEST_METRICS_OUT=FILE keeps a full scrape)
set -euo pipefail

PROG=test_metrics.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
cd "$ROOT"
# shellcheck source=scripts/stack-env.sh
source "$ROOT/scripts/stack-env.sh"

die() {
    printf '%s: FAIL: %s\n' "$PROG" "$*" >&2
    exit 1
}
say() { printf '%s: %s\n' "$PROG" "$*"; }

for v in SECKILL_TEST_DAEMON SECKILL_TEST_REDIS_URL SECKILL_TEST_PG_DSN SECKILL_TEST_PG_ADMIN_DSN \
    SECKILL_TEST_STACK_DIR SECKILL_TEST_REDIS_PORT; do
    [[ -n ${!v:-} ]] || die "$v is not set (run me through scripts/run-tests.sh)"
done
PROMTOOL=${PROMTOOL:-$ROOT/var/tools/bin/promtool}
[[ -x $PROMTOOL ]] || die "promtool not found at $PROMTOOL (scripts/deps.sh installs it)"
for tool in curl jq psql redis-cli; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (scripts/deps.sh installs it)"
done
DASHBOARD=$ROOT/docs/grafana/seckill.json
# Metric names the dashboard may use before the code exports them (none now).
RESERVED=()

ADMIN_TOKEN=test-admin-token-0123456789abcdef
export SECKILL_BUYER_TOKEN_SECRET=test-buyer-token-secret-0123456789abcdef
CTL=$(dirname "$SECKILL_TEST_DAEMON")/seckillctl
SKU=4242
FAIL_SKU=4243
PARENT_SKU=4244 # in two stock buckets, whose ids the sequence draws
LATER_SKU=4245  # its sale opens in an hour

TMP=$(mktemp -d "${TMPDIR:-/tmp}/seckill-metrics.XXXXXX")
DAEMON_PID=
ACL_TAKEN=0
cleanup() {
    if [[ -n $DAEMON_PID ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
        kill -KILL "$DAEMON_PID" 2>/dev/null || true
        wait "$DAEMON_PID" 2>/dev/null || true
    fi
    ((ACL_TAKEN)) && redis_admin ACL SETUSER seckill '+xinfo|groups' '+ping' >/dev/null 2>&1
    rm -rf "$TMP"
}
trap cleanup EXIT

redis_admin() { se_redis_admin "$SECKILL_TEST_STACK_DIR" "$SECKILL_TEST_REDIS_PORT" "$@"; }

# The other tests' leftovers go (as th_reset does).
reset_stores() {
    [[ $(redis_admin FLUSHALL) == OK ]] || die "FLUSHALL failed"
    psql -q -X -v ON_ERROR_STOP=1 "$SECKILL_TEST_PG_ADMIN_DSN" \
        -c 'TRUNCATE stock_ledger, order_cancel_requests, orders, sku_epochs, skus RESTART IDENTITY' >/dev/null ||
        die "TRUNCATE failed"
}

PORT=
MPORT= # the internal listener: /metrics and the admin API
# start_daemon NAME=value...: seckilld serve with the test settings (those of
# service/tests/harness.c) and these, on two free ports; waits until both answer.
start_daemon() {
    local try i
    for ((try = 0; try < 5; try++)); do
        PORT=$(se_free_port) || die "no free port"
        MPORT=$(se_free_port) || die "no free port"
        [[ $MPORT != "$PORT" ]] || continue
        env SECKILL_HTTP_ADDR="127.0.0.1:$PORT" SECKILL_METRICS_ADDR="127.0.0.1:$MPORT" \
            SECKILL_METRICS_REFRESH_MS=0 SECKILL_REDIS_URL="$SECKILL_TEST_REDIS_URL" \
            SECKILL_PG_DSN="$SECKILL_TEST_PG_DSN" SECKILL_ADMIN_TOKEN="$ADMIN_TOKEN" \
            SECKILL_WRITER_CLAIM_IDLE_MS=500 SECKILL_WRITER_REFRESH_MS=100 \
            SECKILL_WRITER_BLOCK_MS=50 SECKILL_LOG_LEVEL=warn SECKILL_RATE_ADDR_PER_S=0 \
            SECKILL_RATE_BUYER_ORDERS_PER_MIN=0 SECKILL_ADMIN_AUTH_FAIL_PER_MIN=0 \
            SECKILL_PAYMENT_AUTH_FAIL_PER_MIN=0 "$@" \
            "$SECKILL_TEST_DAEMON" serve 2>>"$TMP/daemon.log" &
        DAEMON_PID=$!
        for ((i = 0; i < 100; i++)); do
            kill -0 "$DAEMON_PID" 2>/dev/null || break
            curl -s -o /dev/null "http://127.0.0.1:$MPORT/healthz" &&
                curl -s -o /dev/null "http://127.0.0.1:$PORT/healthz" && return 0
            sleep 0.05
        done
        kill -KILL "$DAEMON_PID" 2>/dev/null || true
        wait "$DAEMON_PID" 2>/dev/null || true
        DAEMON_PID=
    done
    cat "$TMP/daemon.log" >&2
    die "seckilld did not start"
}

# stop_daemon: no undeclared answers (as th_daemon_stop), SIGTERM, clean exit.
stop_daemon() {
    scrape "$TMP/last.prom"
    [[ $(sample "$TMP/last.prom" seckill_http_undeclared_answers_total) == 0 ]] ||
        die "seckilld gave answers its routes do not declare (log: $(cat "$TMP/daemon.log"))"
    kill -TERM "$DAEMON_PID"
    local st=0
    wait "$DAEMON_PID" || st=$?
    DAEMON_PID=
    ((st == 0)) || die "seckilld did not exit cleanly (status $st)"
}

# http METHOD PATH [CURL ARGS...]: prints the status; the body is in $TMP/body.
# (PORT=... http ... for another listener)
http() {
    local method=$1 path=$2
    shift 2
    curl -s -o "$TMP/body" -w '%{http_code}' -X "$method" "$@" "http://127.0.0.1:$PORT$path"
}

admin() {
    PORT=$MPORT http "$1" "$2" -H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' \
        ${3:+--data "$3"}
}

# order USER QTY [SKU]: places an order as USER; prints the status.
order() {
    local token
    token=$("$CTL" token --user "$1") || die "seckillctl token failed"
    http POST "/api/v1/skus/${3:-$SKU}/orders" -H "Authorization: Bearer $token" \
        -H 'Content-Type: application/json' --data "{\"qty\":$2}"
}

expect() { # expect WANT GOT WHAT
    [[ $1 == "$2" ]] || die "$3: want $1, got $2 ($(cat "$TMP/body" 2>/dev/null))"
}

# scrape FILE: GET /metrics into FILE; must be 200 and pass promtool.  Asked
# as Prometheus asks (Accept-Encoding: gzip): the compressed copy is checked.
scrape() {
    local st
    st=$(curl -s --compressed -o "$1" -w '%{http_code}' "http://127.0.0.1:$MPORT/metrics")
    [[ $st == 200 ]] || die "GET /metrics answered $st"
    local out rc=0
    out=$("$PROMTOOL" check metrics <"$1" 2>&1) || rc=$?
    if ((rc != 0)) || [[ -n $out ]]; then
        printf '%s\n' "$out" >&2
        die "promtool check metrics complained (exit $rc) about the scrape above"
    fi
}

# sample FILE SERIES: the value of one series (exact name and labels), or "".
sample() {
    awk -v s="$2" '$1 == s { print $2; exit }' "$1"
}

# want FILE SERIES VALUE: the series has exactly this value.
want() {
    local v
    v=$(sample "$1" "$2")
    [[ $v == "$3" ]] || die "$2 is '${v}', want $3"
}

# want_min FILE SERIES MIN: the series is at least MIN.
want_min() {
    local v
    v=$(sample "$1" "$2")
    if [[ -z $v ]] || ! awk -v v="$v" -v m="$3" 'BEGIN { exit !(v + 0 >= m + 0) }'; then
        die "$2 is '${v}', want at least $3"
    fi
}

# ---- 1. reservations only: the numbers in flight are exact
reset_stores
# (a sold-out flag kept for 10 s, so that the scrape below still sees it)
start_daemon SECKILL_WRITER_THREADS=0 SECKILL_ORDER_ACK=reserved SECKILL_SOLD_OUT_FLAG_MS=10000
say "daemon without writers on :$PORT (internal :$MPORT)"
# the public listener has neither the metrics nor the admin API
expect 404 "$(http GET /metrics)" "GET /metrics on the public listener"
expect 404 "$(http POST /admin/v1/skus -H "Authorization: Bearer $ADMIN_TOKEN")" \
    "the admin API on the public listener"
expect 201 "$(admin POST /admin/v1/skus "{\"id\":$SKU,\"name\":\"metrics\",\"stock\":3,\"per_user_limit\":2}")" \
    "create sku"
expect 202 "$(order 1 2)" "order of user 1"
expect 202 "$(order 2 1)" "order of user 2"
expect 409 "$(order 3 1)" "order of user 3 (sold out)"
expect 400 "$(order 4 0)" "order of qty 0"
expect 404 "$(order 5 1 999999)" "order of an unknown SKU"
expect 404 "$(http GET /nowhere)" "an unknown path"
scrape "$TMP/reserved.prom"
P=$TMP/reserved.prom
want "$P" "seckill_sku_stock_db{sku=\"$SKU\"}" 3
want "$P" "seckill_sku_stock_available{sku=\"$SKU\"}" 0
want "$P" "seckill_sku_inflight_units{sku=\"$SKU\"}" 3
want "$P" "seckill_sku_sold_out_flag{sku=\"$SKU\"}" 1
want "$P" "seckill_sku_stream_length{sku=\"$SKU\"}" 2
want "$P" "seckill_sku_stream_lag{sku=\"$SKU\"}" 2
H=seckill_http_request_duration_seconds
want "$P" "seckill_sku_sale_open{sku=\"$SKU\"}" 1
want "$P" "${H}_count{route=\"placeOrder\",code=\"202\"}" 2
want "$P" "${H}_count{route=\"placeOrder\",code=\"409\"}" 1
want "$P" "${H}_count{route=\"placeOrder\",code=\"400\"}" 1
want "$P" "${H}_count{route=\"placeOrder\",code=\"404\"}" 1
# /nowhere, and /metrics and the admin API asked of the public listener
want "$P" "${H}_count{route=\"unrouted\",code=\"404\"}" 3
want "$P" "${H}_count{route=\"createSku\",code=\"201\"}" 1
want "$P" "${H}_bucket{route=\"placeOrder\",code=\"202\",le=\"+Inf\"}" 2
want "$P" "${H}_count{route=\"placeOrder\",code=\"503\"}" 0 # preallocated
want "$P" "${H}_count{route=\"protocol\",code=\"408\"}" 0
# reserve.lua ran for the two orders, the sold-out one and the unknown SKU
want "$P" 'seckill_redis_command_duration_seconds_count{command="seckill_reserve"}' 4
want "$P" seckill_writer_batch_orders_count 0
want "$P" seckill_metrics_scrape_errors_total 0
want "$P" 'seckill_store_up{store="redis"}' 1
want "$P" 'seckill_store_up{store="postgres"}' 1
want "$P" 'seckill_store_probe_failures_total{store="redis"}' 0
# the two orders wait unwritten: their entries age (by the entry ids' time)
sleep 1.1
scrape "$TMP/aged.prom"
want_min "$TMP/aged.prom" "seckill_sku_stream_oldest_age_seconds{sku=\"$SKU\"}" 1
# a sale that opens in an hour is not open (seckill_sku_sale_open, for the alerts)
starts=$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)
expect 201 "$(admin POST /admin/v1/skus "{\"id\":$LATER_SKU,\"name\":\"later\",\"stock\":1,\"per_user_limit\":1,\"sale_starts_at\":\"$starts\"}")" \
    "create a sku on sale later"
scrape "$TMP/later.prom"
want "$TMP/later.prom" "seckill_sku_sale_open{sku=\"$LATER_SKU\"}" 0
want "$TMP/later.prom" "seckill_sku_stream_oldest_age_seconds{sku=\"$LATER_SKU\"}" 0
stop_daemon

# ---- 2. a writer drains the stream
start_daemon
say "daemon with a writer on :$PORT"
for ((i = 0; i < 200; i++)); do
    scrape "$TMP/drained.prom"
    [[ $(sample "$TMP/drained.prom" "seckill_sku_stream_length{sku=\"$SKU\"}") == 0 ]] && break
    sleep 0.05
done
P=$TMP/drained.prom
want "$P" "seckill_sku_stream_length{sku=\"$SKU\"}" 0
want "$P" "seckill_sku_stream_lag{sku=\"$SKU\"}" 0
want "$P" "seckill_sku_inflight_units{sku=\"$SKU\"}" 0
want "$P" "seckill_sku_stream_oldest_age_seconds{sku=\"$SKU\"}" 0
want "$P" "seckill_sku_stock_db{sku=\"$SKU\"}" 0
want "$P" "seckill_sku_stock_available{sku=\"$SKU\"}" 0
want_min "$P" seckill_writer_batch_orders_count 1
want_min "$P" seckill_writer_batch_orders_sum 2
want_min "$P" seckill_writer_batch_duration_seconds_count 1
want_min "$P" 'seckill_writer_batch_duration_seconds_bucket{le="+Inf"}' 1

# ---- 3. a SKU in stock buckets: a series per bucket, labelled with its parent
expect 201 "$(admin POST /admin/v1/skus "{\"id\":$PARENT_SKU,\"name\":\"hot\",\"stock\":4,\"per_user_limit\":1,\"buckets\":2}")" \
    "create a sku in two stock buckets"
scrape "$TMP/buckets.prom" # promtool takes the extra label
n=$(grep -c "^seckill_sku_stock_db{sku=\"[0-9]*\",parent=\"$PARENT_SKU\"} 2\$" "$TMP/buckets.prom" || true)
[[ $n == 2 ]] || die "want two bucket series of seckill_sku_stock_db labelled parent=$PARENT_SKU, got $n"
! grep -q "^seckill_sku_[a-z_]*{sku=\"$PARENT_SKU\"" "$TMP/buckets.prom" ||
    die "the parent $PARENT_SKU has series of its own (it holds no stock)"

# ---- 4. a store fails during a scrape: the rest still answers
expect 201 "$(admin POST /admin/v1/skus "{\"id\":$FAIL_SKU,\"name\":\"fail\",\"stock\":1,\"per_user_limit\":1}")" \
    "create the second sku"
expect 201 "$(order 6 1 "$FAIL_SKU")" "durable order on the second sku"
ACL_TAKEN=1
[[ $(redis_admin ACL SETUSER seckill '-xinfo|groups') == OK ]] || die "ACL SETUSER failed"
scrape "$TMP/failed.prom"
redis_admin ACL SETUSER seckill '+xinfo|groups' >/dev/null
ACL_TAKEN=0
P=$TMP/failed.prom
want "$P" seckill_metrics_scrape_errors_total 1
! grep -Eq '^seckill_sku_(stream|stock|inflight)' "$P" || die "a failed scrape still shows per-SKU gauges"
want "$P" "${H}_count{route=\"placeOrder\",code=\"201\"}" 1
want_min "$P" "${H}_count{route=\"getMetrics\",code=\"200\"}" 1
scrape "$TMP/full.prom"
[[ -z ${SECKILL_TEST_METRICS_OUT:-} ]] || cp "$TMP/full.prom" "$SECKILL_TEST_METRICS_OUT"
want "$TMP/full.prom" "seckill_sku_stock_db{sku=\"$FAIL_SKU\"}" 0
want "$TMP/full.prom" seckill_metrics_scrape_errors_total 1

# ---- 5. a Redis that refuses the health probe: down, and the failures counted
ACL_TAKEN=1
[[ $(redis_admin ACL SETUSER seckill '-ping') == OK ]] || die "ACL SETUSER failed"
for ((i = 0; i < 100; i++)); do
    scrape "$TMP/down.prom"
    [[ $(sample "$TMP/down.prom" 'seckill_store_up{store="redis"}') == 0 ]] && break
    sleep 0.05
done
redis_admin ACL SETUSER seckill '+ping' >/dev/null
ACL_TAKEN=0
want "$TMP/down.prom" 'seckill_store_up{store="redis"}' 0
want "$TMP/down.prom" 'seckill_store_up{store="postgres"}' 1
want_min "$TMP/down.prom" 'seckill_store_probe_failures_total{store="redis"}' 1
want "$TMP/down.prom" 'seckill_store_probe_failures_total{store="postgres"}' 0
for ((i = 0; i < 100; i++)); do
    scrape "$TMP/up.prom"
    [[ $(sample "$TMP/up.prom" 'seckill_store_up{store="redis"}') == 1 ]] && break
    sleep 0.05
done
want "$TMP/up.prom" 'seckill_store_up{store="redis"}' 1

# ---- 6. the dashboard uses only names a real scrape has
jq empty "$DASHBOARD" || die "$DASHBOARD is not valid JSON"
jq -r '.. | objects | (.expr?, .query?, .definition?) | strings' "$DASHBOARD" >"$TMP/exprs"
{ grep -o 'seckill_[a-zA-Z0-9_]*' "$TMP/exprs" || true; } | sort -u >"$TMP/used"
(($(wc -l <"$TMP/used") >= 20)) || die "the dashboard queries fewer metrics than expected"
# a family counts when it is declared, samples or not (no SKU may be flagged now)
awk '/^[a-z]/ { sub(/[{ ].*/, "", $1); print $1 } /^# TYPE / { print $3 }' "$TMP/full.prom" |
    sort -u >"$TMP/have"
missing=0
while read -r name; do
    grep -qxF "$name" "$TMP/have" && continue
    reserved=0
    for r in "${RESERVED[@]}"; do
        [[ $name == "$r" ]] && reserved=1
    done
    if ((reserved)); then
        say "dashboard: $name is reserved (not exported yet)"
        continue
    fi
    printf '%s: dashboard uses %s, which /metrics does not export\n' "$PROG" "$name" >&2
    missing=1
done <"$TMP/used"
((missing == 0)) || die "docs/grafana/seckill.json drifted from /metrics"

stop_daemon
say "ok: $(wc -l <"$TMP/used") metric names of the dashboard checked, promtool clean"

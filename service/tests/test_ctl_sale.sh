#!/usr/bin/env bash
# A whole sale driven through seckillctl's admin groups (run by
# scripts/run-tests.sh against its stack; buyers use the public API with
# tokens from `seckillctl token`, as real buyers would):
#
#  1. the error paths: no token, a token as a flag, a wrong token, the public
#     listener, an unreachable URL, an unknown SKU, a bad delta (refused
#     before any request: exit 2 even against a dead URL);
#  2. create, list, show a SKU; buyers buy it out; sale status shows the
#     numbers; pay one order, cancel another (twice: replayed), refuse to
#     cancel the paid one; adjust +N and -N with Idempotency-Keys (each
#     repeated: applied once), a key reused with another delta and a delta
#     larger than the stock are refused; patch the payment window; reload
#     a SKU whose Redis stock was lost; health of several instances;
#  3. every number the CLI prints is checked against PostgreSQL.
set -euo pipefail

PROG=test_ctl_sale.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
cd "$ROOT"
# shellcheck source=scripts/stack-env.sh
source "$ROOT/scripts/stack-env.sh"

die() {
    printf '%s: FAIL: %s\n' "$PROG" "$*" >&2
    [[ -s ${TMP:-}/daemon.log ]] && tail -20 "$TMP/daemon.log" >&2
    exit 1
}
say() { printf '%s: %s\n' "$PROG" "$*"; }

for v in SECKILL_TEST_DAEMON SECKILL_TEST_REDIS_URL SECKILL_TEST_PG_DSN SECKILL_TEST_PG_ADMIN_DSN \
    SECKILL_TEST_STACK_DIR SECKILL_TEST_REDIS_PORT; do
    [[ -n ${!v:-} ]] || die "$v is not set (run me through scripts/run-tests.sh)"
done
for tool in curl jq psql; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (scripts/deps.sh installs it)"
done

ADMIN_TOKEN=test-admin-token-0123456789abcdef
export SECKILL_BUYER_TOKEN_SECRET=test-buyer-token-secret-0123456789abcdef
CTL=$(dirname "$SECKILL_TEST_DAEMON")/seckillctl
SKU=7001

TMP=$(mktemp -d "${TMPDIR:-/tmp}/seckill-ctl-sale.XXXXXX")
DAEMON_PID=
cleanup() {
    if [[ -n $DAEMON_PID ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
        kill -KILL "$DAEMON_PID" 2>/dev/null || true
        wait "$DAEMON_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT

redis_admin() { se_redis_admin "$SECKILL_TEST_STACK_DIR" "$SECKILL_TEST_REDIS_PORT" "$@"; }
sql() { psql -X -At -v ON_ERROR_STOP=1 "$SECKILL_TEST_PG_ADMIN_DSN" -c "$1"; }

# The other tests' leftovers go (as th_reset does).
[[ $(redis_admin FLUSHALL) == OK ]] || die "FLUSHALL failed"
sql 'TRUNCATE stock_ledger, order_cancel_requests, order_pending, orders, sku_epochs, skus
     RESTART IDENTITY' >/dev/null || die "TRUNCATE failed"

PORT=
MPORT= # the internal listener: the admin API
start_daemon() {
    local try i
    for ((try = 0; try < 5; try++)); do
        PORT=$(se_free_port) || die "no free port"
        MPORT=$(se_free_port) || die "no free port"
        [[ $MPORT != "$PORT" ]] || continue
        env SECKILL_HTTP_ADDR="127.0.0.1:$PORT" SECKILL_METRICS_ADDR="127.0.0.1:$MPORT" \
            SECKILL_REDIS_URL="$SECKILL_TEST_REDIS_URL" SECKILL_PG_DSN="$SECKILL_TEST_PG_DSN" \
            SECKILL_ADMIN_TOKEN="$ADMIN_TOKEN" SECKILL_WRITER_REFRESH_MS=100 \
            SECKILL_WRITER_BLOCK_MS=50 SECKILL_LOG_LEVEL=warn SECKILL_RATE_ADDR_PER_S=0 \
            SECKILL_RATE_BUYER_ORDERS_PER_MIN=0 SECKILL_ADMIN_AUTH_FAIL_PER_MIN=0 \
            SECKILL_SOLD_OUT_FLAG_MS=10000 \
            "$SECKILL_TEST_DAEMON" serve 2>>"$TMP/daemon.log" &
        DAEMON_PID=$!
        for ((i = 0; i < 100; i++)); do
            kill -0 "$DAEMON_PID" 2>/dev/null || break
            curl -s -o /dev/null "http://127.0.0.1:$MPORT/healthz" && return 0
            sleep 0.05
        done
        kill -KILL "$DAEMON_PID" 2>/dev/null || true
        wait "$DAEMON_PID" 2>/dev/null || true
        DAEMON_PID=
    done
    cat "$TMP/daemon.log" >&2
    die "seckilld did not start"
}
start_daemon
say "seckilld on :$PORT (admin :$MPORT)"
export SECKILL_URL="http://127.0.0.1:$MPORT" SECKILL_ADMIN_TOKEN="$ADMIN_TOKEN"

# ctl WANT_EXIT ARGS...: runs seckillctl; its stdout in $TMP/out, stderr in
# $TMP/err; dies unless it exits WANT_EXIT.
ctl() {
    local want=$1 st=0
    shift
    "$CTL" "$@" >"$TMP/out" 2>"$TMP/err" || st=$?
    ((st == want)) || die "seckillctl $* exited $st, want $want (out: $(cat "$TMP/out"); err: $(cat "$TMP/err"))"
}
# field JQ: a value of the last --json output.
field() { jq -er "$1" "$TMP/out" || die "no $1 in $(cat "$TMP/out")"; }
expect() { # expect WANT GOT WHAT
    [[ $1 == "$2" ]] || die "$3: want $1, got $2"
}
err_has() { grep -q -- "$1" "$TMP/err" || die "stderr lacks '$1': $(cat "$TMP/err")"; }

# ---- 1. error paths
DEAD_URL=http://127.0.0.1:$(se_free_port)
SECKILL_ADMIN_TOKEN='' ctl 5 sku show 1
err_has "no admin token"
ctl 2 --token "$ADMIN_TOKEN" sku show 1
err_has "SECKILL_ADMIN_TOKEN"
grep -q -- "$ADMIN_TOKEN" "$TMP/err" "$TMP/out" && die "a token given as a flag was printed"
ctl 2 sku show 1 --admin_token="$ADMIN_TOKEN" # not a flag of ours: refused, not echoed
err_has "unknown flag \"--admin_token\""
grep -q -- "$ADMIN_TOKEN" "$TMP/err" "$TMP/out" && die "an unknown flag's value (a token) was printed"
SECKILL_ADMIN_TOKEN=wrong-token-0123456789abcdef-wrong ctl 5 sku show 1
err_has "refused the admin token"
ctl 1 --url "http://127.0.0.1:$PORT" sku show 1
err_has "metrics_addr"
ctl 1 --url "$DEAD_URL" sku show 1
err_has "cannot reach"
ctl 3 sku show 999999
err_has "unknown_sku"
for bad in 0 +0 abc 1x ++1 - ''; do
    ctl 2 --url "$DEAD_URL" sku adjust "$SKU" --delta "$bad" --reason r
done
ctl 2 --url "$DEAD_URL" sku adjust "$SKU" --delta +1 # no reason
ctl 2 --url "$DEAD_URL" sku create --name x --stock -1 --per-user-limit 1
ctl 2 --url "$DEAD_URL" sku show abc
ctl 2 --url ftp://x sku show 1
ctl 2 --json lock list # admin flags are the admin groups' only

# ---- 2. the sale
ctl 0 --json sku create --id "$SKU" --name "ctl sale" --stock 10 --per-user-limit 2 \
    --payment-window-s 600
expect 10 "$(field .stock)" "created stock"
expect "10|10|2|600" "$(sql "SELECT stock, initial_stock, per_user_limit, payment_window_s FROM skus WHERE id = $SKU" | tr -d ' ')" \
    "the SKU row"
ctl 4 sku create --id "$SKU" --name again --stock 1 --per-user-limit 1
err_has "sku_exists"
ctl 0 sku create --name "second" --stock 3 --per-user-limit 1 \
    --sale-ends-at 2099-01-01T00:00:00Z # the service draws its id; only it has an end
OTHER=$(sql "SELECT id FROM skus WHERE name = 'second'")

# list: the table has a header and one row per SKU; the JSON the same ids
ctl 0 sku list
head -1 "$TMP/out" | grep -q '^id  *name  *db_stock' || die "sku list header: $(cat "$TMP/out")"
expect 3 "$(wc -l <"$TMP/out")" "sku list lines"
ctl 0 --json sku list
expect "$(sql 'SELECT string_agg(id::text, $$,$$ ORDER BY id) FROM skus')" \
    "$(jq -r '[.skus[].id] | map(tostring) | join(",")' "$TMP/out")" "sku list ids"
# each row's own sale window, not the first row's
expect "$OTHER" "$(jq -r '[.skus[] | select(.sale_ends_at != null) | .id] | join(",")' "$TMP/out")" \
    "the SKUs with a sale end"
ctl 0 --json sku list --limit 1
expect 1 "$(jq '.skus | length' "$TMP/out")" "one page of one"
expect "$(sql 'SELECT min(id) FROM skus')" "$(field .next_after)" "next_after"

# buyers (public API) buy it out: 5 x 2 units, then sold out
order() { # order USER QTY: prints the status; the body in $TMP/order
    curl -s -o "$TMP/order" -w '%{http_code}' -H "Authorization: Bearer $("$CTL" token --user "$1")" \
        -H 'Content-Type: application/json' --data "{\"qty\":$2}" \
        "http://127.0.0.1:$PORT/api/v1/skus/$SKU/orders"
}
declare -A ORDER
for u in 1 2 3 4 5; do
    expect 201 "$(order "$u" 2)" "order of user $u"
    ORDER[$u]=$(jq -r .order_id "$TMP/order")
done
expect 409 "$(order 6 1)" "order past the stock"

ctl 0 --json sku show "$SKU"
expect 0 "$(field .db_stock)" "stock after the sale"
expect "$(sql "SELECT stock FROM skus WHERE id = $SKU")" "$(field .db_stock)" "db_stock vs PostgreSQL"
expect 5 "$(field .confirmed_orders)" "confirmed orders"

# sale status: every open SKU, numbers as PostgreSQL has them once the
# writers have acknowledged the stream
for ((i = 0; i < 100; i++)); do
    ctl 0 --json sale status
    [[ $(jq ".skus[] | select(.id == $SKU) | .stream_lag" "$TMP/out") == 0 ]] && break
    sleep 0.05
done
row() { jq -r ".skus[] | select(.id == $SKU) | $1" "$TMP/out"; }
expect 2 "$(jq '.skus | length' "$TMP/out")" "SKUs on sale"
expect 0 "$(row .available)" "available"
expect 0 "$(row .in_flight_units)" "in flight"
expect 0 "$(row .stream_lag)" "stream lag"
expect true "$(row .sold_out)" "sold out"
expect true "$(row .sold_out_flag)" "this instance's sold-out flag"
expect 0 "$(row .drift_units)" "drift"
expect "$(sql "SELECT stock FROM skus WHERE id = $SKU")" "$(row .db_stock)" "sale db_stock"
expect false "$(jq -r ".skus[] | select(.id == $OTHER) | .sold_out" "$TMP/out")" "the other SKU"
ctl 0 sale status
grep -q "^$SKU  *ctl sale " "$TMP/out" || die "sale status table: $(cat "$TMP/out")"

# pay user 1's order, cancel user 2's (twice), refuse to cancel the paid one
ctl 0 --json order pay "${ORDER[1]}" --payment-ref "ref-$SKU-1"
expect paid "$(field .status)" "paid"
expect paid "$(sql "SELECT status FROM orders WHERE id = ${ORDER[1]}")" "paid in PostgreSQL"
ctl 0 --json order cancel "${ORDER[2]}"
expect cancelled "$(field .status)" "cancelled"
expect cancelled "$(sql "SELECT status FROM orders WHERE id = ${ORDER[2]}")" "cancelled in PostgreSQL"
ctl 0 --json order cancel "${ORDER[2]}"
expect true "$(field .replayed)" "a repeated cancel"
expect 2 "$(sql "SELECT stock FROM skus WHERE id = $SKU")" "units back once"
ctl 4 order cancel "${ORDER[1]}"
err_has "order_not_cancellable"
ctl 3 order cancel 999999999
ctl 0 --json order show "${ORDER[3]}"
expect "$(sql "SELECT user_id || ' ' || qty || ' ' || status FROM orders WHERE id = ${ORDER[3]}")" \
    "$(jq -r '"\(.user_id) \(.qty) \(.status)"' "$TMP/out")" "order show"
ctl 0 order show "${ORDER[3]}"
grep -q '^status  *confirmed$' "$TMP/out" || die "order show table: $(cat "$TMP/out")"

# adjust +5 and -3, each twice with its key: applied once
ctl 0 --json sku adjust "$SKU" --delta +5 --reason restock --idempotency-key "up-$SKU"
ctl 0 --json sku adjust "$SKU" --delta +5 --reason restock --idempotency-key "up-$SKU"
expect true "$(field .replayed)" "a repeated +5"
expect 7 "$(sql "SELECT stock FROM skus WHERE id = $SKU")" "+5 once"
ctl 0 --json sku adjust "$SKU" --delta -3 --reason shrink --idempotency-key "down-$SKU"
ctl 0 --json sku adjust "$SKU" --delta -3 --reason shrink --idempotency-key "down-$SKU"
expect 4 "$(sql "SELECT stock FROM skus WHERE id = $SKU")" "-3 once"
expect 2 "$(sql "SELECT count(*) FROM stock_ledger WHERE sku_id = $SKU AND kind = 'admin'")" \
    "ledger rows of the adjustments"
ctl 4 sku adjust "$SKU" --delta +6 --reason other --idempotency-key "up-$SKU"
err_has "idempotency_key_reused"
ctl 4 sku adjust "$SKU" --delta -1000 --reason too-much
err_has "insufficient_stock"
ctl 0 --json sku show "$SKU"
expect 4 "$(field .available)" "available after the adjustments"

# patch the payment window
ctl 0 --json sku patch "$SKU" --payment-window-s 900
expect 900 "$(field .payment_window_s)" "patched window"
expect 900 "$(sql "SELECT payment_window_s FROM skus WHERE id = $SKU")" "window in PostgreSQL"

# reload: refused while Redis agrees; rebuilds a SKU whose Redis stock is lost
ctl 4 sku reload "$SKU"
err_has "already_loaded"
redis_admin DEL "seckill:{sku:$SKU}:stock" >/dev/null
ctl 0 --json sku reload "$SKU"
expect true "$(field .rebuilt)" "reload rebuilt"
expect "$(sql "SELECT stock FROM skus WHERE id = $SKU")" "$(field .available)" "reloaded stock"

# health: one row per instance, a dead one fails the command
ctl 0 --json health --url "http://127.0.0.1:$MPORT,http://127.0.0.1:$PORT"
expect "ok ok" "$(jq -r '[.[].status] | join(" ")' "$TMP/out")" "both listeners healthy"
ctl 1 health --url "http://127.0.0.1:$MPORT" --url "$DEAD_URL"
expect 3 "$(wc -l <"$TMP/out")" "health table lines"
grep -q "unreachable" "$TMP/out" || die "health table: $(cat "$TMP/out")"

# ---- 3. what the sale left is consistent
broken=$(sql "$(sed "s/\\\$1/$SKU/g" sql/invariant_check.sql)") || die "invariant check failed to run"
expect "" "$broken" "sql/invariant_check.sql on the SKU"
# every answer the routes gave is one they declare (docs/openapi.json)
undeclared=$(curl -s "http://127.0.0.1:$MPORT/metrics" |
    awk '$1 == "seckill_http_undeclared_answers_total" { print $2 }')
expect 0 "$undeclared" "seckill_http_undeclared_answers_total"
kill -TERM "$DAEMON_PID"
st=0
wait "$DAEMON_PID" || st=$?
DAEMON_PID=
((st == 0)) || die "seckilld did not exit cleanly (status $st)"
say "ok"

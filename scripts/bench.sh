#!/usr/bin/env bash
# `make bench`: the service against its alternatives, as ratios measured in
# one invocation with the same concurrency (machines here are shared and
# noisy, so absolute numbers mean little; ratios taken minutes apart do).
#
#   1. HTTP ceiling: build/http-ceiling (a fixed 202 body) driven by
#      seckill-loadtest, once with seckilld's own HTTP server (--server own,
#      also driven by wrk when installed) and once with libevent's evhttp
#      (--server evhttp); the ratio own/evhttp says what the strict server costs;
#   2. PostgreSQL-only: pgbench running loadtest/pg_only.sql (guarded hot-row
#      UPDATE + order INSERT per transaction) in its own schema;
#   3. the service: a fresh seckilld on a free port, a SKU with 10^9 units and
#      a per-user limit of 10^6, a million users picked at random; accepted
#      orders/s and p99 from the load generator, confirmed orders/s from the
#      database, then the full invariant check.
#
# Prints the three side by side and the ratios against the issue's targets.
# Exits non-zero only when a phase could not run or an invariant failed; a
# missed target is reported, not fatal.
#
# Env in: BUILD (build), LT_VAR (var), SECKILL_REDIS_PORT / SECKILL_PG_PORT (for
#         a stack started here), BENCH_SECONDS (20), BENCH_WARMUP (2),
#         BENCH_CONNECTIONS (50), BENCH_OUT (LT_VAR/bench), BENCH_WRK (1; 0 skips wrk).
set -euo pipefail

PROG=bench.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
BUILD_DIR=${BUILD:-build}
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
# shellcheck source=loadtest/lt-env.sh
source "$ROOT/loadtest/lt-env.sh"

LOADTEST=$BUILD_DIR/seckill-loadtest
CEILING=$BUILD_DIR/http-ceiling
for b in "$BUILD_DIR/seckilld" "$LOADTEST" "$CEILING"; do
    [[ -x $b ]] || die "$b is missing; build it first (make all)"
done

SECS=${BENCH_SECONDS:-20}
WARMUP=${BENCH_WARMUP:-2}
CONNS=${BENCH_CONNECTIONS:-50}
for v in SECS WARMUP CONNS; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "BENCH_${v/SECS/SECONDS} must be a whole number, not '${!v}'"
done
((SECS >= 5 && SECS > WARMUP && SECS <= 600 && CONNS >= 1 && CONNS <= 1000)) ||
    die "need 5 <= BENCH_SECONDS <= 600, BENCH_WARMUP < BENCH_SECONDS and 1 <= BENCH_CONNECTIONS <= 1000"
RUN_SECS=$((SECS + WARMUP))
HTTP_THREADS=2 # seckilld's http_threads default; the ceiling gets the same
USERS=1000000
BIG_STOCK=1000000000
BIG_LIMIT=1000000
BUDGET=1000000000 # requests: the duration ends the run first
# The generator is one address (127.0.0.1) speaking for a million buyers: the
# per-address limit would measure itself.  The buyer's bucket stays on, as
# deployed (it costs reserve.lua a GET and a SET), and a million buyers picked
# at random never empty it.
export SECKILL_RATE_ADDR_PER_S=${SECKILL_RATE_ADDR_PER_S:-0}

VAR=${LT_VAR:-$ROOT/var}
[[ $VAR == /* ]] || VAR=$ROOT/$VAR
OUT=${BENCH_OUT:-$VAR/bench}
[[ $OUT == /* ]] || OUT=$ROOT/$OUT
mkdir -p "$OUT"

apt_install() { # apt_install PACKAGE: best effort, as root or via sudo
    local sudo=()
    [[ $(id -u) -eq 0 ]] || { command -v sudo >/dev/null 2>&1 && sudo=(sudo -n); } || return 1
    DEBIAN_FRONTEND=noninteractive timeout 300 "${sudo[@]}" apt-get install -y \
        --no-install-recommends "$1" >"$OUT/apt-$1.log" 2>&1
}
# proc_ticks PID: CPU clock ticks (user + system, reaped children included) of
# PID and of its live children (PostgreSQL backends, Redis's rewrite child).
proc_ticks() {
    local t=0 c f
    [[ -n $1 ]] || {
        echo 0
        return
    }
    for c in $1 $(ps -o pid= --ppid "$1" 2>/dev/null); do
        [[ -r /proc/$c/stat ]] || continue
        read -r -a f < <(sed 's/^.*) //' "/proc/$c/stat")
        t=$((t + f[11] + f[12] + f[13] + f[14]))
    done
    echo "$t"
}
# machine_ticks: busy CPU ticks of the whole machine (all processes).
machine_ticks() {
    local f
    read -r -a f </proc/stat
    echo $((f[1] + f[2] + f[3] + f[6] + f[7] + f[8]))
}
# cpu_snapshot PID...: "wall_ns machine ticks-of-each-PID"
cpu_snapshot() {
    local p out
    out="$(date +%s%N) $(machine_ticks)"
    for p in "$@"; do out+=" $(proc_ticks "$p")"; done
    echo "$out"
}
# cpu_share "SNAP1" "SNAP2" NAME...: per-process share of one core, in %
cpu_share() {
    awk -v a="$1" -v b="$2" -v names="$3" -v hz="$(getconf CLK_TCK)" 'BEGIN {
        n = split(a, x, " "); split(b, y, " "); split(names, nm, " ")
        secs = (y[1] - x[1]) / 1e9
        printf "  %-16s %5.0f %%\n", "whole machine", (y[2] - x[2]) / hz / secs * 100
        for (i = 3; i <= n; i++)
            printf "  %-16s %5.0f %%\n", nm[i - 2], (y[i] - x[i]) / hz / secs * 100
    }'
}

# cpu_cores "SNAP1" "SNAP2": cores used by the sampled processes together
cpu_cores() {
    awk -v a="$1" -v b="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN {
        n = split(a, x, " "); split(b, y, " "); t = 0
        for (i = 3; i <= n; i++) t += y[i] - x[i]
        printf "%.3f", t / hz / ((y[1] - x[1]) / 1e9)
    }'
}

command -v jq >/dev/null 2>&1 || apt_install jq || die "jq is needed to read the JSON summaries"
command -v curl >/dev/null 2>&1 || die "curl is not installed (run scripts/deps.sh)"
PGBENCH=$(command -v pgbench || true)
if [[ -z $PGBENCH ]]; then
    PGBENCH=$(find /usr/lib/postgresql -path '*/bin/pgbench' 2>/dev/null | sort -V | tail -n1)
fi
[[ -n $PGBENCH && -x $PGBENCH ]] || die "pgbench not found (Debian: postgresql-contrib / postgresql)"
WRK=
if [[ ${BENCH_WRK:-1} == 1 ]]; then
    command -v wrk >/dev/null 2>&1 || apt_install wrk || say "wrk not installable; its line is skipped"
    WRK=$(command -v wrk || true)
fi

lt_stack_up "$VAR"
export SECKILL_ADMIN_TOKEN SECKILL_BUYER_TOKEN_SECRET
SECKILL_ADMIN_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
# Every buyer, against the ceiling too (same request bytes), carries a token.
SECKILL_BUYER_TOKEN_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')

# ---- 1. HTTP ceiling, with seckilld's own HTTP server and with libevent's evhttp
# run_ceiling SERVER (own|evhttp): sets CEIL_CPU_<SERVER>, CEIL_CORES_<SERVER>,
# CPORT (left running in LT_EXTRA_PID for wrk); writes ceiling-<SERVER>.{txt,json,html}.
run_ceiling() {
    local server=$1
    for ((try = 1; ; try++)); do
        CPORT=$(se_free_port) || die "no free port"
        "$CEILING" --server "$server" --addr "127.0.0.1:$CPORT" --threads "$HTTP_THREADS" \
            --max-seconds $((RUN_SECS * 4 + 120)) >"$OUT/http-ceiling-$server.log" 2>&1 &
        LT_EXTRA_PID=$!
        lt_wait_listening "127.0.0.1:$CPORT" "$LT_EXTRA_PID" http-ceiling "$OUT/http-ceiling-$server.log" port &&
            break
        ((try < LT_START_TRIES)) || die "http-ceiling did not start in $LT_START_TRIES tries"
    done
    say "=== 1. HTTP ceiling ($server server): seckill-loadtest, $CONNS connections, ${SECS}s + ${WARMUP}s warm-up"
    "$LOADTEST" --no-check --url "http://127.0.0.1:$CPORT" --label "HTTP ceiling ($server)" \
        --concurrency "$CONNS" --duration "$RUN_SECS" --warmup "$WARMUP" --requests "$BUDGET" \
        --users "$USERS" --user-pick random --progress-ms 5000 \
        --report "$OUT/ceiling-$server.html" --json "$OUT/ceiling-$server.json" >"$OUT/ceiling-$server.txt" &
    LPID=$!
    sleep "$((WARMUP + 1))" # CPU is sampled inside the measured window, away from its ends
    S1=$(cpu_snapshot "$LT_EXTRA_PID" "$LPID")
    sleep "$((SECS - 2))"
    S2=$(cpu_snapshot "$LT_EXTRA_PID" "$LPID")
    wait "$LPID" || die "the HTTP ceiling run ($server) failed ($OUT/ceiling-$server.txt)"
    sed -n '/^rate/p;/^latency/p' "$OUT/ceiling-$server.txt"
    printf -v "CEIL_CPU_$server" '%s' "$(cpu_share "$S1" "$S2" "http-ceiling generator")"
    printf -v "CEIL_CORES_$server" '%s' "$(cpu_cores "$S1" "$S2")"
}
run_ceiling evhttp
lt_stop "$LT_EXTRA_PID" http-ceiling
run_ceiling own # the service's ceiling: what seckilld's HTTP layer costs
CEIL_CPU=$CEIL_CPU_own
CEIL_CORES=$CEIL_CORES_own
WRK_RPS='' WRK_P99=''
if [[ -n $WRK ]]; then
    say "=== 1b. HTTP ceiling (own server): wrk, 1 thread, $CONNS connections, ${SECS}s"
    "$WRK" -t1 -c"$CONNS" -d"${SECS}s" --timeout 5s --latency -s "$ROOT/loadtest/wrk_order.lua" \
        -H "Authorization: Bearer $("$BUILD_DIR/seckillctl" token --user 1)" \
        "http://127.0.0.1:$CPORT/api/v1/skus/1/orders" >"$OUT/wrk.txt" 2>&1 || say "wrk failed; see $OUT/wrk.txt"
    WRK_RPS=$(awk '/^Requests\/sec:/ { print $2 }' "$OUT/wrk.txt")
    WRK_P99=$(awk '$1 == "99%" { v = $2; u = v; gsub(/[0-9.]/, "", u); sub(/[a-z]+$/, "", v);
              f = (u == "us") ? 0.001 : (u == "s") ? 1000 : 1; printf "%.3f", v * f }' "$OUT/wrk.txt")
    printf 'wrk       %s requests/s, p99 %s ms\n' "${WRK_RPS:-?}" "${WRK_P99:-?}"
fi
lt_stop "$LT_EXTRA_PID" http-ceiling
LT_EXTRA_PID=

# ---- 2. PostgreSQL only
say "=== 2. PostgreSQL-only: pgbench, $CONNS connections, ${SECS}s"
# Its own schema, made and dropped by the owner: the service's role may not.
PG_ONLY_DSN=${SECKILL_MIGRATE_PG_DSN:-$SECKILL_PG_DSN}
psql "$PG_ONLY_DSN" -X -q -v ON_ERROR_STOP=1 -f "$ROOT/loadtest/pg_only_setup.sql" \
    >"$OUT/pgbench-setup.log" 2>&1 || die "pg_only_setup.sql failed ($OUT/pgbench-setup.log)"
rm -f "$OUT"/pgbench_log.*
(cd "$OUT" && timeout $((SECS + 60)) "$PGBENCH" -n -c "$CONNS" -j 2 -T "$SECS" -M prepared \
    -f "$ROOT/loadtest/pg_only.sql" -l --log-prefix=pgbench_log "$PG_ONLY_DSN") \
    >"$OUT/pgbench.txt" 2>&1 || die "pgbench failed ($OUT/pgbench.txt)"
PG_TPS=$(awk -F'[ =]+' '/^tps/ && /without initial/ { print $2 }' "$OUT/pgbench.txt")
# per-transaction log: client xact latency_us script epoch us
PG_P99=$(cat "$OUT"/pgbench_log.* | awk '{ print $3 }' | sort -n |
    awk '{ v[NR] = $1 } END { if (NR) { i = int(NR * 0.99); if (i < NR * 0.99) i++; printf "%.3f", v[i] / 1000 } }')
PG_SOLD=$(psql "$PG_ONLY_DSN" -X -At -c 'SELECT count(*) FROM lt_pgonly.orders')
psql "$PG_ONLY_DSN" -X -q -c 'DROP SCHEMA lt_pgonly CASCADE' >/dev/null 2>&1 || true
rm -f "$OUT"/pgbench_log.*
printf 'pgbench   %s transactions/s, p99 %s ms, %s orders\n' "$PG_TPS" "$PG_P99" "$PG_SOLD"

# ---- 3. the service, in each acknowledgement mode (durable first: the default)
# run_service MODE: one sustained run against a fresh seckilld with order_ack=MODE;
# sets SVC_CPU_<MODE> and SVC_CORES_<MODE>, writes service-<MODE>.{txt,json,html}.
run_service() {
    local mode=$1 st=0
    SECKILL_ORDER_ACK=$mode lt_daemon_start_free "$OUT/seckilld-$mode.log"
    DPORT=$LT_DAEMON_PORT
    say "=== 3. service, order_ack=$mode: seckill-loadtest, $CONNS connections, ${SECS}s + ${WARMUP}s warm-up"
    "$LOADTEST" --url "http://127.0.0.1:$DPORT" --label "service (order_ack=$mode)" \
        --stock "$BIG_STOCK" --limit "$BIG_LIMIT" --users "$USERS" --user-pick random \
        --concurrency "$CONNS" --duration "$RUN_SECS" --warmup "$WARMUP" --requests "$BUDGET" \
        --progress-ms 5000 --drain-timeout 300 --report "$OUT/service-$mode.html" \
        --json "$OUT/service-$mode.json" >"$OUT/service-$mode.txt" &
    LPID=$!
    REDIS_PID=$(tr -dc '0-9' <"$LT_STACK_DIR/redis/redis.pid" 2>/dev/null || true)
    PG_PID=$(head -n1 "$LT_STACK_DIR/pg/data/postmaster.pid" 2>/dev/null | tr -dc '0-9' || true)
    sleep "$((WARMUP + 1))"
    S1=$(cpu_snapshot "$LT_DAEMON_PID" "$REDIS_PID" "$PG_PID" "$LPID")
    sleep "$((SECS - 2))"
    S2=$(cpu_snapshot "$LT_DAEMON_PID" "$REDIS_PID" "$PG_PID" "$LPID")
    wait "$LPID" || st=$?
    printf -v "SVC_CPU_$mode" '%s' "$(cpu_share "$S1" "$S2" "seckilld redis-server postgres generator")"
    printf -v "SVC_CORES_$mode" '%s' "$(cpu_cores "$S1" "$S2")"
    grep -E '^(rate|latency|queue|writer|database|RESULT)' "$OUT/service-$mode.txt" || true
    ((st == 0)) || {
        cat "$OUT/service-$mode.txt"
        die "the service run (order_ack=$mode) failed its invariant check or could not run (exit $st)"
    }
    lt_stop "$LT_DAEMON_PID" seckilld
    LT_DAEMON_PID=
}
run_service durable
run_service reserved
SVC_CPU=$SVC_CPU_durable
SVC_CORES=$SVC_CORES_durable

# ---- the table
C=$OUT/ceiling-own.json E=$OUT/ceiling-evhttp.json S=$OUT/service-durable.json R=$OUT/service-reserved.json
CEIL_RPS=$(jq -r '.run.throughput_rps' "$C")
CEIL_P99=$(jq -r '.latency_ms.p99' "$C")
EV_RPS=$(jq -r '.run.throughput_rps' "$E")
EV_P99=$(jq -r '.latency_ms.p99' "$E")
SVC_RPS=$(jq -r '.run.accepted_per_s' "$S")
SVC_P99=$(jq -r '.latency_ms.p99' "$S")
SVC_ACC=$(jq -r '.writer.accepted_per_s // empty' "$S")
SVC_CONF=$(jq -r '.writer.confirmed_per_s // empty' "$S")
SVC_RATIO=$(jq -r '.writer.ratio // empty' "$S")
SVC_DRAIN=$(jq -r '.writer.drain_s // .invariants.facts.drain_s' "$S")
SVC_QMAX=$(jq -r '.queue_max' "$S")
RES_RPS=$(jq -r '.run.accepted_per_s' "$R")
RES_P99=$(jq -r '.latency_ms.p99' "$R")
RES_CONF=$(jq -r '.writer.confirmed_per_s // empty' "$R")

{
    printf '\nbench: %s connections, %ss measured after %ss warm-up, one invocation on %s (%s cores)\n' \
        "$CONNS" "$SECS" "$WARMUP" "$(hostname)" "$(nproc)"
    printf 'seckilld settings: %s\n' "$(env | grep -E '^SECKILL_(HTTP_THREADS|WORKER|WRITER|REDIS_TIMEOUT|PG_STATEMENT|LOCK)' |
        sort | tr '\n' ' ' | sed 's/ $//' | grep . || echo defaults)"
    printf '  %-50s %12s %10s\n' "" "per second" "p99 ms"
    printf '  %-50s %12.0f %10.3f\n' "HTTP ceiling, own server (seckill-loadtest)" "$CEIL_RPS" "$CEIL_P99"
    printf '  %-50s %12.0f %10.3f\n' "HTTP ceiling, libevent evhttp (seckill-loadtest)" "$EV_RPS" "$EV_P99"
    [[ -n $WRK_RPS ]] && printf '  %-50s %12.0f %10s\n' "HTTP ceiling, own server (wrk -t1)" "$WRK_RPS" "${WRK_P99:--}"
    printf '  %-50s %12.0f %10.3f\n' "PostgreSQL-only (pgbench, guarded UPDATE+INSERT)" "$PG_TPS" "$PG_P99"
    printf '  %-50s %12.0f %10.3f\n' "service, durable: orders answered (201/409/202)" "$SVC_RPS" "$SVC_P99"
    [[ -n $SVC_CONF ]] && printf '  %-50s %12.0f %10s\n' "service, durable: orders confirmed by the writer" "$SVC_CONF" "-"
    printf '  %-50s %12.0f %10.3f\n' "service, reserved: orders accepted (202)" "$RES_RPS" "$RES_P99"
    [[ -n $RES_CONF ]] && printf '  %-50s %12.0f %10s\n' "service, reserved: orders confirmed by the writer" "$RES_CONF" "-"
    printf 'ratios\n'
    awk -v s="$SVC_RPS" -v c="$CEIL_RPS" -v p="$PG_TPS" -v r="${SVC_RATIO:-0}" -v l="$SVC_P99" \
        -v d="$SVC_DRAIN" -v q="$SVC_QMAX" -v acc="${SVC_ACC:-0}" -v cc="$CEIL_CORES" -v sc="$SVC_CORES" \
        -v rs="$RES_RPS" -v rl="$RES_P99" -v e="$EV_RPS" \
        'function v(ok) { return ok ? "met" : "MISSED" }
        BEGIN {
            printf "  own HTTP server / evhttp    %8.2f    target >= 1.0   %s  (HTTP ceilings; met within 5 %% noise)\n", c / e, v(c / e >= 0.95)
            printf "  service / HTTP ceiling      %8.2f    target >= 0.5   %s\n", s / c, v(s / c >= 0.5)
            if (cc > 0 && sc > 0)
                printf "    per core-second used      %8.2f    (%.0f vs %.0f requests per core-second of the processes involved)\n", (s / sc) / (c / cc), s / sc, c / cc
            printf "  service / PostgreSQL-only   %8.1fx   target >= 20x   %s\n", s / p, v(s / p >= 20)
            printf "  confirmed / accepted        %8.3f    target >= 1.0   %s  (+-1 %%; writer %.0f/s vs %.0f/s accepted)\n", r, v(r >= 0.99), r * acc, acc
            printf "  p99 at the service          %8.3f ms target < 10 ms %s\n", l, v(l < 10)
            printf "  durable / reserved          %8.2f    (orders per second; p99 %.3f vs %.3f ms)\n", s / rs, l, rl
            printf "  order queue: at most %d entries; drained %.2f s after the load ended\n", q, d
        }'
    printf 'CPU during the measured window (100 %% = one core; this machine has %s)\n' "$(nproc)"
    printf ' HTTP ceiling (own):\n%s\n HTTP ceiling (evhttp):\n%s\n service, durable:\n%s\n service, reserved:\n%s\n' \
        "$CEIL_CPU" "$CEIL_CPU_evhttp" "$SVC_CPU" "$SVC_CPU_reserved"
    printf 'reports: %s/{ceiling-own,ceiling-evhttp,service-durable,service-reserved}.html, pgbench.txt%s\n' "$OUT" "${WRK:+, wrk.txt}"
} | tee "$OUT/bench.txt"

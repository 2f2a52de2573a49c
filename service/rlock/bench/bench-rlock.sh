#!/usr/bin/env bash
# Lock benchmark: rlock (C, one hiredis async connection on one libevent loop)
# against node-redlock (npm "redlock" on one ioredis connection), both its
# newest release (5.0.0-beta.2) and its "latest" tag (4.2.0), the same
# workloads on the same private Redis in the same invocation, printed side by
# side with the ratios.  rlock runs through the library's async API
# (rlock/async.h, what the ratios are about) and as hand-made commands ("raw":
# SET NX PX and the release script through hiredis' argv formatting, without
# the library's deadlines or waiting), for reference.
#
#   service/rlock/bench/bench-rlock.sh [--duration-ms MS] [--concurrency N] [--retry-ms MS]
#
# Workloads (rlock_bench.c and redlock_bench.js beside this script), the same
# for everyone:
#   uncontended  N loops, one key each: acquire, release, again
#   contended    N waiters on one key, a jittered retry_ms (+-50 %) before
#                every attempt; hand-over = release reply -> next holder's
#                acquire reply
# Fair by construction: one Redis (flushed between runs), concurrency N,
# ttl 10 s, retry_ms with +-50 % jitter (node-redlock: retryDelay = retry_ms,
# retryJitter = retry_ms / 2, driftFactor 0.01; retryCount 0 uncontended,
# endless contended, as rlock waits until the end of the run), and one
# connection carrying the lock commands each.  The async API runs without a
# notifier uncontended (one connection, nobody waits), and contended twice:
# polling only (one connection, as node-redlock) and with its notifier (a
# second connection that carries only release notices, as the daemon runs it).
# Target: every async API row >= 2.0x each node-redlock version's pairs/s,
# uncontended and contended (exit 3 if one is not).
#
# Starts its own redis-server (no persistence) on a free loopback port and
# stops it on exit.  Each node-redlock version is installed with
# `npm install --no-save` (with ioredis) into its own scratch folder,
# BENCH_NODE_DIR/<version> (default var/bench-rlock-node/<version>, never
# committed: var/ is ignored).
#
# Env in: BUILD (default build), BENCH_NODE_DIR, REDLOCK_VERSIONS (default
# "4.2.0 5.0.0-beta.2"), IOREDIS_VERSION (default 5).
set -euo pipefail

PROG=bench-rlock.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd -P)
BUILD_DIR=${BUILD:-build}
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
BENCH=$BUILD_DIR/rlock-bench
NODE_BENCH=$ROOT/service/rlock/bench/redlock_bench.js
NODE_BASE=${BENCH_NODE_DIR:-$ROOT/var/bench-rlock-node}
read -r -a REDLOCK_VERSIONS <<<"${REDLOCK_VERSIONS:-4.2.0 5.0.0-beta.2}"
IOREDIS_VERSION=${IOREDIS_VERSION:-5}
TARGET_RATIO=2.0

DURATION_MS=5000
CONCURRENCY=50
RETRY_MS=10
TTL_MS=10000

die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 1
}
say() { printf '%s: %s\n' "$PROG" "$*" >&2; }

while (($# > 0)); do
    case $1 in
    --duration-ms) DURATION_MS=${2:?}; shift 2 ;;
    --concurrency) CONCURRENCY=${2:?}; shift 2 ;;
    --retry-ms) RETRY_MS=${2:?}; shift 2 ;;
    -h | --help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
    esac
done
for v in DURATION_MS CONCURRENCY RETRY_MS; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "bad ${v,,}: ${!v}"
done
((${#REDLOCK_VERSIONS[@]} > 0)) || die "REDLOCK_VERSIONS is empty"
for v in "${REDLOCK_VERSIONS[@]}"; do
    [[ $v =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$ ]] || die "bad node-redlock version: $v"
done

command -v redis-server >/dev/null || die "redis-server is not installed (scripts/deps.sh)"
command -v redis-cli >/dev/null || die "redis-cli is not installed (scripts/deps.sh)"
command -v node >/dev/null || die "node is not installed (apt-get install nodejs npm)"
command -v npm >/dev/null || die "npm is not installed (apt-get install npm)"
if [[ ! -x $BENCH ]]; then
    say "building $BENCH"
    make -C "$ROOT" -s BUILD="$BUILD_DIR" "$BENCH" >&2 || die "could not build $BENCH"
fi

# ---- a private Redis (another process may take the port we picked: retry)
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
REDIS_DIR=$(mktemp -d /tmp/bench-rlock-redis.XXXXXX)
REDIS_PID=
cleanup() {
    if [[ -n $REDIS_PID ]] && kill -0 "$REDIS_PID" 2>/dev/null; then
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
    rm -rf "$REDIS_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# start_redis PORT: 0 once it answers PING, 1 if it exited or stayed silent.
start_redis() {
    redis-server --port "$1" --bind 127.0.0.1 --save '' --appendonly no --dir "$REDIS_DIR" \
        --daemonize no --loglevel warning >"$REDIS_DIR/log" 2>&1 &
    REDIS_PID=$!
    local _
    for _ in $(seq 1 100); do
        [[ $(redis-cli -p "$1" ping 2>/dev/null) == PONG ]] && return 0
        kill -0 "$REDIS_PID" 2>/dev/null || break
        sleep 0.05
    done
    kill "$REDIS_PID" 2>/dev/null || true
    wait "$REDIS_PID" 2>/dev/null || true
    REDIS_PID=
    return 1
}
PORT=
for _ in $(seq 1 10); do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 25001))
    port_busy "$p" && continue
    if start_redis "$p"; then
        PORT=$p
        break
    fi
done
[[ -n $PORT ]] || die "could not start redis-server on a free port: $(tail -n 3 "$REDIS_DIR/log")"
URL=redis://127.0.0.1:$PORT/0
say "redis-server $(redis-server --version | awk '{print $3}') on 127.0.0.1:$PORT"

# ---- node-redlock, each version in its own scratch folder
# (5.x's package.json says "v5.0.0-beta.2": compare without the "v"; its
# "exports" leave package.json out, so read the file)
for ver in "${REDLOCK_VERSIONS[@]}"; do
    dir=$NODE_BASE/$ver
    mkdir -p "$dir"
    [[ -f $dir/package.json ]] || printf '{ "private": true }\n' >"$dir/package.json"
    if ! (cd "$dir" && node -e "
        const p = require('fs').readFileSync('node_modules/redlock/package.json', 'utf8');
        const v = JSON.parse(p).version.replace(/^v/, '');
        process.exit(v === '$ver' && require.resolve('ioredis') ? 0 : 1)") 2>/dev/null; then
        say "npm install --no-save redlock@$ver ioredis@$IOREDIS_VERSION (in $dir)"
        (cd "$dir" && npm install --no-save --no-audit --no-fund --loglevel=error \
            "redlock@$ver" "ioredis@$IOREDIS_VERSION" >&2) || die "npm install failed"
    fi
done

# ---- run
field() { # field LINE NAME; "-" when not measured
    tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k { print ($2 == "nan" ? "-" : $2) }'
}
# The rows of a workload: rlock's, then one per node-redlock version.
impls() { # impls MODE
    if [[ $1 == contended ]]; then
        echo async-poll async raw
    else
        echo async raw
    fi
    local v
    for v in "${REDLOCK_VERSIONS[@]}"; do echo "node:$v"; done
}
impl_name() { # impl_name IMPL MODE
    case $1 in
    async-poll) echo "rlock async API, polling (C)" ;;
    async) if [[ $2 == contended ]]; then echo "rlock async API + notifier (C)"; else
        echo "rlock async API (C, libevent)"; fi ;;
    raw) echo "rlock ops by hand (C, hiredis)" ;;
    node:*) echo "node-redlock ${1#node:} (ioredis)" ;;
    esac
}
declare -A RESULT
for mode in uncontended contended; do
    for impl in $(impls "$mode"); do
        redis-cli -p "$PORT" flushall >/dev/null
        common=(--redis-url "$URL" --mode "$mode" --concurrency "$CONCURRENCY"
            --duration-ms "$DURATION_MS" --ttl-ms "$TTL_MS" --retry-ms "$RETRY_MS")
        say "$mode: $impl (${DURATION_MS} ms, concurrency $CONCURRENCY)"
        case $impl in
        async-poll)
            line=$("$BENCH" "${common[@]}" --client library --notifier off) ||
                die "rlock-bench --client library --notifier off failed" ;;
        async)
            # Uncontended nobody waits: no notifier, one connection.
            notifier=off
            [[ $mode == contended ]] && notifier=on
            line=$("$BENCH" "${common[@]}" --client library --notifier "$notifier") ||
                die "rlock-bench --client library --notifier $notifier failed" ;;
        raw)
            line=$("$BENCH" "${common[@]}" --client raw) || die "rlock-bench --client raw failed" ;;
        node:*)
            line=$(cd "$NODE_BASE/${impl#node:}" && node "$NODE_BENCH" "${common[@]}") ||
                die "node-redlock ${impl#node:} bench failed" ;;
        esac
        RESULT[$mode.$impl]=$line
    done
done

printf '\n%-12s %-34s %10s %9s %9s %12s %12s\n' workload implementation pairs/s p50_ms p99_ms \
    handover_p50 handover_p99
for mode in uncontended contended; do
    for impl in $(impls "$mode"); do
        line=${RESULT[$mode.$impl]}
        printf '%-12s %-34s %10s %9s %9s %12s %12s\n' "$mode" "$(impl_name "$impl" "$mode")" \
            "$(field "$line" pairs_per_s)" "$(field "$line" pair_p50_ms)" \
            "$(field "$line" pair_p99_ms)" "$(field "$line" handover_p50_ms)" \
            "$(field "$line" handover_p99_ms)"
    done
done
ratio() { # ratio MODE IMPL VERSION
    awk -v a="$(field "${RESULT[$1.$2]}" pairs_per_s)" \
        -v b="$(field "${RESULT[$1.node:$3]}" pairs_per_s)" \
        'BEGIN { printf("%.2f", (b > 0) ? a / b : 0) }'
}
MISSED=()
for ver in "${REDLOCK_VERSIONS[@]}"; do
    printf '\nratio to node-redlock %s, pairs/s (target >= %sx for the async API):\n' "$ver" \
        "$TARGET_RATIO"
    for mode in uncontended contended; do
        for impl in $(impls "$mode"); do
            [[ $impl == node:* ]] && continue
            r=$(ratio "$mode" "$impl" "$ver")
            mark=
            if [[ $impl != raw ]] && awk -v r="$r" -v t="$TARGET_RATIO" 'BEGIN { exit !(r < t) }'
            then
                mark='  << below target'
                MISSED+=("$mode, $(impl_name "$impl" "$mode") / node-redlock $ver = ${r}x")
            fi
            printf '  %-12s %-34s %6sx%s\n' "$mode" "$(impl_name "$impl" "$mode")" "$r" "$mark"
        done
    done
done
printf '\nsame Redis, one connection for the lock commands each, concurrency %s, %s ms per run,\n' \
    "$CONCURRENCY" "$DURATION_MS"
printf 'ttl %s ms, retry %s ms +-50%%; "+ notifier": plus the pub/sub connection that wakes waiters\n' \
    "$TTL_MS" "$RETRY_MS"
if ((${#MISSED[@]} > 0)); then
    for m in "${MISSED[@]}"; do say "below target: $m"; done
    exit 3
fi

#!/usr/bin/env bash
# Lock benchmark: rlock (C, one hiredis async connection on one libevent loop)
# against node-redlock (npm "redlock" on one ioredis connection), the same
# workloads on the same private Redis, printed side by side with the ratio.
# rlock runs twice: through the library's async API (rlock_async.h, what the
# ratio is about) and as hand-made commands ("raw": the same kind of Redis
# operations without the library), which shows what the library itself costs.
#
#   service/rlock/bench/bench-rlock.sh [--duration-ms MS] [--concurrency N] [--retry-ms MS]
#
# Workloads (see rlock_bench.c beside this script):
#   uncontended  N loops, one key each: acquire, release, again
#   contended    N waiters on one key, a jittered retry_ms between attempts;
#                hand-over = release reply -> next holder's acquire reply
# Target: rlock >= 1.5x node-redlock's uncontended pairs/s (exit 3 if not).
#
# Starts its own redis-server (no persistence) on a free loopback port and
# stops it on exit.  node-redlock and ioredis are installed with
# `npm install --no-save` into a scratch folder (BENCH_NODE_DIR, default
# var/bench-rlock-node, never committed: var/ is ignored).
#
# Env in: BUILD (default build), BENCH_NODE_DIR, REDLOCK_VERSION (default 4.2.0,
# npm's "latest"), IOREDIS_VERSION (default 5).
set -euo pipefail

PROG=bench-rlock.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd -P)
BUILD_DIR=${BUILD:-build}
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
BENCH=$BUILD_DIR/rlock-bench
NODE_DIR=${BENCH_NODE_DIR:-$ROOT/var/bench-rlock-node}
REDLOCK_VERSION=${REDLOCK_VERSION:-4.2.0}
IOREDIS_VERSION=${IOREDIS_VERSION:-5}
TARGET_RATIO=1.5

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
    -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
    esac
done
for v in DURATION_MS CONCURRENCY RETRY_MS; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "bad ${v,,}: ${!v}"
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
    local i
    for i in $(seq 1 100); do
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

# ---- node-redlock in a scratch folder
mkdir -p "$NODE_DIR"
[[ -f $NODE_DIR/package.json ]] || printf '{ "private": true }\n' >"$NODE_DIR/package.json"
if ! (cd "$NODE_DIR" && node -e "
    const v = require('redlock/package.json').version;
    process.exit(v === '$REDLOCK_VERSION' && require.resolve('ioredis') ? 0 : 1)") 2>/dev/null; then
    say "npm install --no-save redlock@$REDLOCK_VERSION ioredis@$IOREDIS_VERSION (in $NODE_DIR)"
    (cd "$NODE_DIR" && npm install --no-save --no-audit --no-fund --loglevel=error \
        "redlock@$REDLOCK_VERSION" "ioredis@$IOREDIS_VERSION" >&2) || die "npm install failed"
fi

# The node side of the workloads, the same loops as rlock_bench.c.
cat >"$NODE_DIR/bench.js" <<'EOF'
'use strict';
// node-redlock under the rlock-bench workloads; prints the same key=value line.
const Redis = require('ioredis');
const Redlock = require('redlock');

const arg = (name, dflt) => {
    const i = process.argv.indexOf('--' + name);
    return i > 0 ? process.argv[i + 1] : dflt;
};
const url = arg('redis-url');
const mode = arg('mode');
const concurrency = Number(arg('concurrency', 50));
const durationMs = Number(arg('duration-ms', 5000));
const ttlMs = Number(arg('ttl-ms', 10000));
const retryMs = Number(arg('retry-ms', 10));
const contended = mode === 'contended';

const client = new Redis(url, { enableOfflineQueue: true, maxRetriesPerRequest: 1 });
// Same retry policy as rlock: uniform in [retry/2, retry*3/2].
const redlock = new Redlock([client], {
    driftFactor: 0.01,
    retryCount: contended ? -1 : 0,
    retryDelay: retryMs,
    retryJitter: retryMs / 2,
});
const now = () => Number(process.hrtime.bigint());
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const jitter = () => retryMs / 2 + Math.random() * retryMs;

const runId = now() % 1000000;
let stopping = false;
let pairs = 0, busy = 0, errors = 0, lastRelease = 0, firstError = '';
const pairNs = [], handoverNs = [];
let stopAt = 0;

async function worker(i) {
    const key = contended ? `rlock-bench:${runId}:{contended}` : `rlock-bench:${runId}:{key:${i}}`;
    while (!stopping) {
        if (contended)
            await sleep(jitter());
        if (stopping)
            break;
        const t0 = now();
        let lock;
        try {
            lock = await redlock.lock(key, ttlMs);
        } catch (e) {
            if (!stopping) {
                errors++;
                firstError = firstError || String(e);
            }
            break;
        }
        busy += lock.attempts - 1;
        if (contended && lastRelease)
            handoverNs.push(now() - lastRelease);
        await lock.unlock();
        const t = now();
        lastRelease = t;
        if (t <= stopAt) {
            pairs++;
            pairNs.push(t - t0);
        }
    }
}

const q = (a, p) => {
    if (!a.length)
        return 'nan';
    a.sort((x, y) => x - y);
    return (a[Math.max(0, Math.ceil(p * a.length) - 1)] / 1e6).toFixed(3);
};

(async () => {
    await client.ping();
    stopAt = now() + durationMs * 1e6;
    const workers = [];
    for (let i = 0; i < concurrency; i++)
        workers.push(worker(i));
    await sleep(durationMs);
    stopping = true;
    // Waiters inside an endless retry never return: give in-flight pairs a
    // moment, then report.
    await Promise.race([Promise.all(workers), sleep(2000)]);
    const secs = durationMs / 1000;
    console.log(`mode=${mode} impl=node-redlock concurrency=${concurrency} ` +
        `duration_s=${secs.toFixed(2)} pairs=${pairs} pairs_per_s=${Math.round(pairs / secs)} ` +
        `pair_p50_ms=${q(pairNs, 0.5)} pair_p99_ms=${q(pairNs, 0.99)} ` +
        `handover_p50_ms=${q(handoverNs, 0.5)} handover_p99_ms=${q(handoverNs, 0.99)} ` +
        `busy_retries=${busy} lost=0 errors=${errors}`);
    if (errors)
        console.error(`bench.js: ${errors} errors, first: ${firstError}`);
    client.disconnect();
    process.exit(errors ? 1 : 0);
})().catch((e) => {
    console.error('bench.js:', e);
    process.exit(1);
});
EOF

# ---- run
field() { # field LINE NAME; "-" when not measured
    tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k { print ($2 == "nan" ? "-" : $2) }'
}
declare -A RESULT
for mode in uncontended contended; do
    for impl in async raw node; do
        redis-cli -p "$PORT" flushall >/dev/null
        common=(--redis-url "$URL" --mode "$mode" --concurrency "$CONCURRENCY"
            --duration-ms "$DURATION_MS" --ttl-ms "$TTL_MS" --retry-ms "$RETRY_MS")
        say "$mode: $impl (${DURATION_MS} ms, concurrency $CONCURRENCY)"
        if [[ $impl != node ]]; then
            line=$("$BENCH" "${common[@]}" --client "${impl/async/library}") ||
                die "rlock-bench --client $impl failed"
        else
            line=$(cd "$NODE_DIR" && node bench.js "${common[@]}") || die "node-redlock bench failed"
        fi
        RESULT[$mode.$impl]=$line
    done
done

printf '\n%-12s %-34s %10s %9s %9s %12s %12s\n' workload implementation pairs/s p50_ms p99_ms \
    handover_p50 handover_p99
for mode in uncontended contended; do
    for impl in async raw node; do
        line=${RESULT[$mode.$impl]}
        case $impl in
        async) name="rlock async API (C, libevent)" ;;
        raw) name="rlock ops by hand (C, hiredis)" ;;
        node) name="node-redlock $REDLOCK_VERSION (ioredis)" ;;
        esac
        printf '%-12s %-34s %10s %9s %9s %12s %12s\n' "$mode" "$name" \
            "$(field "$line" pairs_per_s)" "$(field "$line" pair_p50_ms)" \
            "$(field "$line" pair_p99_ms)" "$(field "$line" handover_p50_ms)" \
            "$(field "$line" handover_p99_ms)"
    done
done
ratio() { # ratio MODE IMPL
    awk -v a="$(field "${RESULT[$1.$2]}" pairs_per_s)" \
        -v b="$(field "${RESULT[$1.node]}" pairs_per_s)" 'BEGIN { printf("%.2f", (b > 0) ? a / b : 0) }'
}
UR=$(ratio uncontended async)
printf '\nratio rlock async API / node-redlock, pairs/s: uncontended %sx (target >= %sx), contended %sx\n' \
    "$UR" "$TARGET_RATIO" "$(ratio contended async)"
printf 'ratio rlock ops by hand / node-redlock, pairs/s: uncontended %sx, contended %sx\n' \
    "$(ratio uncontended raw)" "$(ratio contended raw)"
printf 'same Redis, one connection each, concurrency %s, %s ms per run, retry %s ms +-50%%;\n' \
    "$CONCURRENCY" "$DURATION_MS" "$RETRY_MS"
echo 'the async API is also woken early by release notices (pub/sub); node-redlock only polls'
if awk -v r="$UR" -v t="$TARGET_RATIO" 'BEGIN { exit !(r < t) }'; then
    say "below target: uncontended ratio $UR < $TARGET_RATIO"
    exit 3
fi

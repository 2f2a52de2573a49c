#!/usr/bin/env bash
# `make faults`: faults injected into a real local stack under load, each
# judged by `seckill-loadtest --check-only` on what the buyers were answered,
# plus the scenario's own assertions and the time the service took to heal by
# itself (no admin call, no restart beyond what the fault did).
#
# Starts its own Redis + PostgreSQL on free loopback ports in var/faults-*,
# its own seckilld instances, and removes all of it at the end.
#
# Scenarios (FAULTS_ONLY=name,... runs a subset, in this order):
#   daemon-kill          kill -9 of the daemon mid-batch under load, restarted
#   redis-restart-aof    kill -9 of Redis, restarted with its AOF
#   redis-restart-empty  kill -9 of Redis, restarted without its data
#   redis-empty-at-202   the only writer frozen so that durable answers fall back to 202,
#                        then kill -9 of Redis, restarted without its data: no 202 lost
#   pg-stop              PostgreSQL stopped (immediate) under load, started again
#   pg-freeze            PostgreSQL SIGSTOPped (postmaster and children), SIGCONT
#   redis-freeze         Redis SIGSTOPped longer than redis_timeout_ms, SIGCONT
#   redis-full           Redis's maxmemory lowered to what it holds under load (it is
#                        full: noeviction refuses every write that needs memory), then
#                        raised back: 503 store_full meanwhile, nothing taken, no order lost
#   two-daemons-kill-one two daemons share the load, kill -9 of one
#   writer-frozen        two daemons, one SIGSTOPped longer than lock_ttl_ms
#   adjust-crash         a daemon dies between the Redis step and COMMIT of a delta
#   expiry-crash         a daemon dies in an expiry sweep, after its COMMIT and before
#                        Redis got the expired orders' units back
#   redis-failover       Redis behind Sentinel (a master, a replica, three Sentinels):
#                        kill -9 of the master under load; Sentinel promotes the replica
#   sentinel-then-master-kill  the same, after kill -9 of the Sentinel the daemon's
#                        watch follows
#   failover-stale-holder  the same, while a second daemon is stopped holding a writer
#                        lock of the old master, about to write; its token is refused
#   balancer-daemon-kill two daemons behind HAProxy, the load through it; kill -9 of one
#   cluster-master-kill  Redis Cluster (three masters, a replica each): kill -9 of the
#                        master serving the load's SKU; its replica takes over
#   cluster-reshard      Redis Cluster: the SKU's slot migrated to another master with
#                        redis-cli --cluster reshard during the sale, a probe SKU in the
#                        same slot ordered from all along: the longest gap between
#                        decided answers is measured and bounded
#   cluster-buckets      Redis Cluster: one SKU in three stock buckets, one per master,
#                        moves between them; kill -9 of one bucket's master mid-sale
#   transfer-crash       a daemon dies in a move between stock buckets, after Redis took
#                        the units from one bucket and before they reached the other
#   balancer-redis-failover  two daemons behind HAProxy on the Sentinel stack, the load
#                        through HAProxy; kill -9 of the Redis master: sales through
#                        HAProxy again within the Sentinel bound, its checks included
#
# Env in: BUILD (build), FAULTS_SHORT=1 (small loads: the whole suite in a few
#         minutes), FAULTS_ONLY, FAULTS_ORDER_ACK (durable; reserved judges
#         healing by 202s), FAULTS_KEEP=1 (keep var/faults-* for a look),
#         FAULTS_SEED (1); SECKILL_* settings reach every daemon (the short
#         leases and intervals below are defaults only).
set -euo pipefail

PROG=faults.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
BUILD_DIR=${BUILD:-build}
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
# shellcheck source=loadtest/lt-env.sh
source "$ROOT/loadtest/lt-env.sh"

DAEMON=$BUILD_DIR/seckilld
LOADTEST=$BUILD_DIR/seckill-loadtest
for b in "$DAEMON" "$LOADTEST"; do
    [[ -x $b ]] || die "$b is missing; build it first (make all)"
done
for c in curl jq redis-cli ps; do
    command -v "$c" >/dev/null 2>&1 || die "$c is not installed (run scripts/deps.sh)"
done

ALL_SCENARIOS=(daemon-kill redis-restart-aof redis-restart-empty redis-empty-at-202 pg-stop pg-freeze redis-freeze redis-full
    two-daemons-kill-one writer-frozen adjust-crash expiry-crash redis-failover
    sentinel-then-master-kill failover-stale-holder balancer-daemon-kill cluster-master-kill
    cluster-reshard cluster-buckets transfer-crash balancer-redis-failover)

# ---------------------------------------------------------------- settings

SHORT=${FAULTS_SHORT:-0}
SEED=${FAULTS_SEED:-1}
ACK=${FAULTS_ORDER_ACK:-durable}
case $ACK in
durable) OK_CODE=201 ;;
reserved) OK_CODE=202 ;;
*) die "FAULTS_ORDER_ACK must be durable or reserved, not '$ACK'" ;;
esac
if [[ $SHORT == 1 ]]; then
    LOAD_S=8 CONCURRENCY=16
else
    LOAD_S=25 CONCURRENCY=64
fi
FAULT_AT_S=2           # into the load
DOWN_S=2               # a killed or stopped part stays down this long
FREEZE_S=8             # SIGSTOP of PostgreSQL or Redis
FULL_S=4               # redis-full: Redis stays at its bound this long
FULL_BELOW_BYTES=262144 # ... set this far below what it holds: the writers' trims free less
WRITER_FREEZE_S=5      # SIGSTOP of a daemon: longer than its lock lease below
HEALTHZ_BOUND_S=5      # /healthz must answer 503 this fast while PostgreSQL is frozen
PROBE_EVERY_S=0.1      # healing probes
REQUEST_TIMEOUT_MS=4000
DRAIN_TIMEOUT_S=120
STACK_WAIT_TENTHS=300 # a killed server must be gone within 30 s
MID_BATCH_TRIES=100   # samples of the writer's pending entries before a kill
ADMIN_MAX_TIME_S=10
RESHARD_TIMEOUT_S=120  # redis-cli --cluster reshard (a few hundred slots)
PENDING_ACK_WAIT_MS=500 # redis-empty-at-202: the buyers' daemon's order_ack_wait_ms
PENDING_WINDOW_S=2      # ... its writer frozen this long before Redis dies: answers fall back to 202
PENDING_SETTLE_S=30     # ... every order recorded pending settled within this after the load
# cluster-reshard moves the slots of the SKU's master from the first up to
# the SKU's: the SKU is picked (among RESHARD_CANDIDATES ids from the
# scenario's base) so that these are RESHARD_SLOTS_MIN..RESHARD_SLOTS_MAX
# slots, the SKU's the last: enough moves before it that the probes run
# across a reshard, few enough (empty slots move in milliseconds) that the
# SKU's slot moves while the load runs; and so that another id of the
# candidates, the probe SKU, hashes to the same slot.
RESHARD_SLOTS_MIN=64
RESHARD_SLOTS_MAX=512
RESHARD_CANDIDATES=8000
RESHARD_PROBE_EVERY_S=0.02 # its probes: the gap's resolution is about one probe
AFTER_USER_BASE=2000000000 # buyers of the "sales continue" run, apart from the load's
PROBE_STOCK=1000000000 # never sold out during a scenario
PROBE_LIMIT=1000

# Short leases and intervals so that healing fits the bounds below; reserved
# mode or durable mode as asked.  Unknown settings are ignored by a daemon
# that does not have them yet.
export SECKILL_LOG_LEVEL=${SECKILL_LOG_LEVEL:-info}
export SECKILL_ORDER_ACK=${SECKILL_ORDER_ACK:-$ACK}
export SECKILL_ORDER_ACK_WAIT_MS=${SECKILL_ORDER_ACK_WAIT_MS:-2000}
# Loads and probes come from 127.0.0.1 and their buyers retry after faults:
# rate limits off, so that every scenario measures healing, not throttling.
export SECKILL_RATE_ADDR_PER_S=${SECKILL_RATE_ADDR_PER_S:-0}
export SECKILL_RATE_BUYER_ORDERS_PER_MIN=${SECKILL_RATE_BUYER_ORDERS_PER_MIN:-0}
export SECKILL_LOCK_TTL_MS=${SECKILL_LOCK_TTL_MS:-3000}
export SECKILL_REDIS_TIMEOUT_MS=${SECKILL_REDIS_TIMEOUT_MS:-500}
export SECKILL_PG_STATEMENT_TIMEOUT_MS=${SECKILL_PG_STATEMENT_TIMEOUT_MS:-2000}
export SECKILL_PG_CLIENT_TIMEOUT_MS=${SECKILL_PG_CLIENT_TIMEOUT_MS:-2500} # between the two above
export SECKILL_WRITER_CLAIM_IDLE_MS=${SECKILL_WRITER_CLAIM_IDLE_MS:-1000}
export SECKILL_WRITER_REFRESH_MS=${SECKILL_WRITER_REFRESH_MS:-500}
export SECKILL_RECONCILE_INTERVAL_MS=${SECKILL_RECONCILE_INTERVAL_MS:-2000}

# Healing bounds (seconds), stated per scenario: the time from the end of the
# fault (restart, SIGCONT, kill of one of two daemons) to the first order
# answered OK_CODE again (or, for adjust-crash, Redis agreeing with skus.stock).
declare -A HEAL_BOUND=(
    [daemon-kill]=20 [redis-restart-aof]=15 [redis-restart-empty]=30 [redis-empty-at-202]=30
    [pg-stop]=20
    [pg-freeze]=15 [redis-freeze]=15 [redis-full]=10 [two-daemons-kill-one]=20 [writer-frozen]=20
    [adjust-crash]=15 [expiry-crash]=15 [transfer-crash]=15
    # redis-failover, sentinel-then-master-kill, failover-stale-holder,
    # balancer-redis-failover (its heal measured through HAProxy): the
    # issue's "within the Sentinel detection time plus 5 s", set by ha_up
    # from the running Sentinels' down-after-milliseconds (SENTINEL_HEAL_EXTRA_S)
    # cluster-node-timeout (1 s) and the replica's election, plus the issue's 5 s
    [cluster-master-kill]=10 [cluster-buckets]=10
    # cluster-reshard: not a heal but the longest time without a decided
    # answer to the probes while the SKU's slot migrates, set below.  While
    # the slot's keys move, scripts wait out TRYAGAIN and lock calls follow
    # ASK and MOVED (0.2-1.2 s measured); the bound allows a durable order
    # that waits its whole order_ack_wait_ms for a writer the move slowed
    # and is answered 202 (as before those were followed, when a writer's
    # lock release failed mid-move and lived out lock_ttl_ms):
    # order_ack_wait_ms + RESHARD_GAP_EXTRA_S
    # HAProxy's checks (two failures, 250 ms apart after the first) take the dead one out
    [balancer-daemon-kill]=10
)
SENTINEL_HEAL_EXTRA_S=5
RESHARD_GAP_EXTRA_S=2
HEAL_BOUND[cluster-reshard]=$(awk -v w="$SECKILL_ORDER_ACK_WAIT_MS" -v x="$RESHARD_GAP_EXTRA_S" \
    'BEGIN { print w / 1000 + x }')

# ---------------------------------------------------------------- bookkeeping

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
trap faults_cleanup EXIT
trap 'printf "\n%s: interrupted\n" "$PROG" >&2; exit 130' INT
trap 'printf "%s: terminated\n" "$PROG" >&2; exit 143' TERM

# ---------------------------------------------------------------- servers

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

# ---------------------------------------------------------------- load and checks

# load_start SKU URL...: buyers in the background for LOAD_S seconds on a
# new SKU, answers to SDIR/load.answers.
load_start() {
    local sku=$1 urls=() u
    shift
    for u in "$@"; do urls+=(--url "$u"); done
    "$LOADTEST" --load-only "${urls[@]}" --admin-url "$(internal_url "$1")" --sku "$sku" --create-sku --stock "$PROBE_STOCK" \
        --limit 5 --qty 1:80,2:20 --users 100000000 --requests 100000000 \
        --retry-share 0.1 --concurrency "$CONCURRENCY" --duration "$LOAD_S" \
        --timeout-ms "$REQUEST_TIMEOUT_MS" --seed "$SEED" --label "$SCEN" \
        --answers "$SDIR/load.answers" --json "$SDIR/load.json" \
        </dev/null >"$SDIR/load.log" 2>&1 &
    LOAD_PID=$!
    LOAD_T0=$(now)
}

# load_wait: the load ends by itself (duration + request timeout + grace).
load_wait() {
    local st=0 limit=$((LOAD_S + REQUEST_TIMEOUT_MS / 1000 + 30)) i
    for ((i = 0; i < limit * 10; i++)); do
        kill -0 "$LOAD_PID" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$LOAD_PID" 2>/dev/null; then
        fail "the load did not end within ${limit}s"
        lt_stop "$LOAD_PID" seckill-loadtest
    fi
    wait "$LOAD_PID" || st=$?
    LOAD_PID=
    if ((st != 0)); then
        fail "the load exited $st (log $SDIR/load.log)"
        tail -n 5 "$SDIR/load.log" >&2 || true
        return 1
    fi
    note "load: $(jq -r '.run.answers | to_entries | map(select(.value > 0) | "\(.key) \(.value)") | join(", ")' "$SDIR/load.json")"
}

# answers KEY: how many answers of that kind the load got.
answers() { jq -r --arg k "$1" '.run.answers[$k] // 0' "$SDIR/load.json"; }

# check SKU NAME [FLAGS...]: seckill-loadtest --check-only; its report in
# SDIR/NAME.check.  Returns its exit status.
check() {
    local sku=$1 name=$2 st=0
    shift 2
    timeout -k 5 $((DRAIN_TIMEOUT_S + 60)) "$LOADTEST" --check-only --sku "$sku" \
        --drain-timeout "$DRAIN_TIMEOUT_S" --json "$SDIR/$name.check.json" "$@" \
        </dev/null >"$SDIR/$name.check" 2>&1 || st=$?
    return "$st"
}

# judge SKU [FLAGS...]: the scenario's load checked with its answers.
judge() {
    local sku=$1 st=0
    shift
    check "$sku" load --answers "$SDIR/load.answers" "$@" || st=$?
    if ((st != 0)); then
        fail "invariants of the load on SKU $sku (check-only exit $st)"
        return 1
    fi
    note "check: $(jq -r '.invariants.facts | "\(.run_orders) orders, \(.run_units_sold) units sold; answered 201 \(.answered.confirmed_201), 409+id \(.answered.rejected_409), 202 \(.answered.pending_202) (lost \(.answered.lost_202))"' "$SDIR/load.check.json")"
}

# probe URL SKU: one order of a new buyer on the probe SKU.  Prints
# "CODE RETRY_AFTER" (RETRY_AFTER 1 when the header came).
PROBE_USER=0
probe() {
    local code ra hdr=$SDIR/probe.headers
    PROBE_USER=$((PROBE_USER + 1))
    code=$("$BUILD_DIR/seckillctl" token --user "$PROBE_USER" |
        sed 's/^/Authorization: Bearer /' |
        curl -s -o /dev/null -D "$hdr" --max-time 5 -w '%{http_code}' -H @- \
            -H 'Content-Type: application/json' -d '{"qty":1}' \
            "$1/api/v1/skus/$2/orders" 2>/dev/null) || code=${code:-000}
    ra=$(grep -ci '^retry-after:' "$hdr" 2>/dev/null || true)
    printf '%s %s\n' "$code" "${ra:-0}"
}

# heal URL SKU T0 WHAT: probes until an order is answered OK_CODE, at most
# the scenario's bound after T0 (the moment WHAT happened).  Sets HEAL_S;
# every probe answer goes to SDIR/probes.
heal() {
    local url=$1 sku=$2 t0=$3 what=$4 bound=${HEAL_BOUND[$SCEN]} out
    while :; do
        out=$(probe "$url" "$sku")
        printf '%s %s\n' "$(since "$t0")" "$out" >>"$SDIR/probes"
        if [[ ${out%% *} == "$OK_CODE" ]]; then
            HEAL_S=$(since "$t0")
            note "healed: an order answered $OK_CODE ${HEAL_S}s after $what (bound ${bound}s)"
            return 0
        fi
        le "$(since "$t0")" "$bound" || break
        sleep "$PROBE_EVERY_S"
    done
    fail "not healed within ${bound}s: last probe answered ${out%% *} (probes in $SDIR/probes)"
    return 1
}

# sales_continue URL SKU: a short, checked run on the scenario's SKU.
sales_continue() { # sales_continue URL SKU [LOADTEST FLAGS...]
    local st=0 url=$1 sku=$2 keep=(--answers "$SDIR/after.answers")
    shift 2
    # a bucketed run checks its own answers, split by bucket: no file of them
    (($# == 0)) || keep=()
    timeout -k 5 $((DRAIN_TIMEOUT_S + 90)) "$LOADTEST" --url "$url" --admin-url "$(internal_url "$url")" \
        --sku "$sku" "$@" \
        --users 300 --user-base "$AFTER_USER_BASE" --requests 300 --concurrency 8 --duration 30 \
        --timeout-ms "$REQUEST_TIMEOUT_MS" --drain-timeout "$DRAIN_TIMEOUT_S" --seed "$SEED" \
        --label "$SCEN after" --progress-ms 0 "${keep[@]}" \
        --json "$SDIR/after.json" </dev/null >"$SDIR/after.check" 2>&1 || st=$?
    if ((st != 0)); then
        fail "sales after the fault: seckill-loadtest exit $st ($SDIR/after.check)"
        return 1
    fi
    local n
    n=$(jq -r '.run.answers | (.confirmed // 0) + (.accepted // 0) + (.rejected // 0)' "$SDIR/after.json")
    ((n > 0)) || fail "no order taken after the fault"
    note "sales continue: $n new orders afterwards, every invariant held"
}

# pending_of PID SKU: stream entries the consumers of daemon PID still hold
# (stream and group names: service/keys.c, docs/ARCHITECTURE.md).
pending_of() {
    se_redis_admin "$STACK_DIR" "$SE_REDIS_PORT" XPENDING "seckill:{sku:$2}:orders" writers 2>/dev/null |
        awk -v pid="-$1-" 'found { print; exit } index($0, pid) { found = 1 } END { if (!found) print 0 }'
}

# mid_batch PID SKU: waits (a few samples) until daemon PID's writer holds
# entries of SKU's stream, so that a fault hits a batch in flight.  Sets HELD.
mid_batch() {
    local i
    for ((i = 0; i < MID_BATCH_TRIES; i++)); do
        HELD=$(pending_of "$1" "$2")
        [[ $HELD == 0 ]] || break
        sleep 0.02
    done
}

# kill_mid_batch PID SKU: kill -9 of daemon PID mid-batch, reaped.
kill_mid_batch() {
    mid_batch "$1" "$2"
    kill -KILL "$1"
    forget_daemon "$1"
}

# ---------------------------------------------------------------- scenarios
# Each uses SKU base+1 for the load and base+2 for the healing probes.

# under_load SKU URL...: the probe SKU, then the load on SKU across URLs,
# FAULT_AT_S into it.
under_load() {
    local sku=$1
    shift
    create_sku "$1" $((sku + 1)) "$PROBE_STOCK" "$PROBE_LIMIT" || return 1
    load_start "$sku" "$@"
    sleep "$FAULT_AT_S"
}

# after_fault URL SKU T0 WHAT [FLAGS...]: healing timed from T0 (WHAT), the
# load's end, its check (with FLAGS), and sales afterwards.
after_fault() {
    local url=$1 sku=$2 t0=$3 what=$4
    shift 4
    heal "$url" $((sku + 1)) "$t0" "$what"
    load_wait
    judge "$sku" "$@"
    sales_continue "$url" "$sku"
}

# down_and_back PID SIGNAL WHAT [PREPARE]: stops a server of the stack with
# SIGNAL, runs PREPARE while it is down, and starts it again on its port.
down_and_back() {
    local pid=$1 sig=$2 what=$3 prepare=${4:-}
    kill "-$sig" "$pid"
    wait_gone "$pid" || {
        fail "$what (pid $pid) survived SIG$sig"
        return 1
    }
    [[ -z $prepare ]] || "$prepare"
    sleep "$DOWN_S"
    se_stack_restart "$STACK_DIR" >"$SDIR/restart.log" 2>&1 || {
        fail "$what did not start again ($SDIR/restart.log)"
        return 1
    }
}

scenario_daemon_kill() {
    local sku=$1 t0
    start_daemon d1 || return
    local port=$D_PORT pid=$D_PID url=http://127.0.0.1:$D_PORT
    under_load "$sku" "$url" || return
    kill_mid_batch "$pid" "$sku"
    note "kill -9 of seckilld with $HELD stream entries in its writer's hands"
    sleep "$DOWN_S"
    t0=$(now)
    start_daemon d1-restarted "$port" || return
    after_fault "$url" "$sku" "$t0" "the restart began"
}

# Redis comes back empty: its AOF (and any RDB) removed.
wipe_redis_data() { rm -rf "$STACK_DIR/redis/appendonlydir" "$STACK_DIR/redis/dump.rdb"; }

scenario_redis_restart_aof() {
    local sku=$1
    start_daemon d1 || return
    local url=http://127.0.0.1:$D_PORT
    under_load "$sku" "$url" || return
    note "kill -9 of Redis; restarted with its AOF"
    down_and_back "$(redis_pid)" KILL Redis || return
    after_fault "$url" "$sku" "$(now)" "Redis answered again"
}

scenario_redis_restart_empty() {
    local sku=$1 bad
    start_daemon d1 || return
    local url=http://127.0.0.1:$D_PORT
    under_load "$sku" "$url" || return
    note "kill -9 of Redis; restarted without its AOF and RDB"
    down_and_back "$(redis_pid)" KILL Redis wipe_redis_data || return
    after_fault "$url" "$sku" "$(now)" "Redis answered again"
    # Until it is reloaded a SKU is unknown to Redis: 503 with Retry-After,
    # never sold out, unknown or unlimited.
    bad=$(awk -v ok="$OK_CODE" '$2 != ok && !($2 == 503 && $3 > 0)' "$SDIR/probes")
    [[ -z $bad ]] || fail "while reloading, buyers got other than 503 with Retry-After: $(head -n 3 <<<"$bad" | tr '\n' ';')"
    note "probes before the reload: $(awk -v ok="$OK_CODE" '$2 != ok' "$SDIR/probes" | wc -l) answered 503 with Retry-After"
}

# Redis restarted empty at the moment durable answers fall back to 202: the
# buyers' daemon has no writer of its own and waits PENDING_ACK_WAIT_MS for a
# commit; the only writer (a second daemon) is frozen, so the orders of the
# window are answered 202 pending, each recorded in PostgreSQL first.  Then
# Redis dies (reservations, stream entries and keys gone) and comes back
# empty, and the writer thaws.  Every 202 must end as a row, confirmed or
# rejected: the check runs without.
scenario_redis_empty_at_202() {
    local sku=$1 i left=-1
    SECKILL_WRITER_THREADS=0 SECKILL_ORDER_ACK_WAIT_MS=$PENDING_ACK_WAIT_MS start_daemon d1 || return
    local url=http://127.0.0.1:$D_PORT
    start_daemon d2 || return
    local writer=$D_PID
    under_load "$sku" "$url" || return
    freeze "$writer"
    sleep "$PENDING_WINDOW_S"
    note "the only writer frozen ${PENDING_WINDOW_S}s (answers fall back to 202 after ${PENDING_ACK_WAIT_MS} ms); kill -9 of Redis, restarted without its AOF and RDB"
    down_and_back "$(redis_pid)" KILL Redis wipe_redis_data || return
    thaw
    heal "$url" $((sku + 1)) "$(now)" "Redis answered again"
    load_wait || return
    for ((i = 0; i < PENDING_SETTLE_S * 10; i++)); do
        left=$(psql "$SECKILL_PG_DSN" -X -At -c \
            "SELECT count(*) FROM order_pending WHERE sku_id = $sku AND settled_at IS NULL" 2>/dev/null) || left=-1
        [[ $left == 0 ]] && break
        sleep 0.1
    done
    [[ $left == 0 ]] || fail "orders recorded pending not settled ${PENDING_SETTLE_S}s after the load ($left left)"
    note "recorded pending: $(psql "$SECKILL_PG_DSN" -X -At -F ' ' -c "SELECT count(*), count(*) FILTER (WHERE r.reapply_epoch IS NOT NULL AND r.reapply_epoch > p.epoch OR r.status <> 'confirmed'), count(*) FILTER (WHERE p.outcome = 'id_conflict') FROM order_pending p LEFT JOIN orders r ON r.id = p.order_id WHERE p.sku_id = $sku" 2>/dev/null |
        awk '{ printf "%s orders answered 202 and recorded, %s of them written across the loss or refused, %s id conflicts", $1, $2, $3 }')"
    (($(answers accepted) > 0)) ||
        fail "no order was answered 202 pending: the scenario did not test what it names"
    judge "$sku"
    sales_continue "$url" "$sku"
}

scenario_pg_stop() {
    local sku=$1
    start_daemon d1 || return
    local url=http://127.0.0.1:$D_PORT
    under_load "$sku" "$url" || return
    note "PostgreSQL stopped (immediate, as pg_ctl -m immediate) under load"
    down_and_back "$(pg_pid)" QUIT PostgreSQL || return
    after_fault "$url" "$sku" "$(now)" "PostgreSQL accepted connections again"
}

scenario_pg_freeze() {
    local sku=$1 t0 ppid kids out code secs
    start_daemon d1 || return
    local url=http://127.0.0.1:$D_PORT
    under_load "$sku" "$url" || return
    ppid=$(pg_pid)
    freeze "$ppid" # first, so that it forks no child we would miss
    mapfile -t kids < <(ps -o pid= --ppid "$ppid" | tr -d ' ')
    freeze "${kids[@]}"
    t0=$(now)
    note "PostgreSQL frozen: postmaster and ${#kids[@]} children"
    # /healthz answers at once from the probes' latest result, which turns
    # 503 within health_probe_interval_ms + health_timeout_ms of the freeze:
    # asked every 100 ms (each ask bounded, so that the freeze ends on time
    # even when /healthz hangs) until it says so, at most HEALTHZ_BOUND_S.
    while :; do
        out=$(curl -s -o /dev/null --max-time $((HEALTHZ_BOUND_S + 1)) -w '%{http_code}' \
            "$url/healthz" 2>/dev/null) || true
        code=$out secs=$(since "$t0")
        [[ $code == 503 ]] || le "$HEALTHZ_BOUND_S" "$secs" || {
            sleep 0.1
            continue
        }
        break
    done
    note "/healthz while frozen: ${code:-none} ${secs}s after the freeze (bound ${HEALTHZ_BOUND_S}s)"
    if [[ $code != 503 ]] || ! le "$secs" "$HEALTHZ_BOUND_S"; then
        fail "/healthz answered ${code:-nothing} ${secs}s after PostgreSQL froze (want 503 within ${HEALTHZ_BOUND_S}s)"
    fi
    while ! le "$FREEZE_S" "$(since "$t0")"; do sleep 0.1; done
    thaw
    after_fault "$url" "$sku" "$(now)" "SIGCONT"
}

scenario_redis_freeze() {
    local sku=$1
    start_daemon d1 || return
    local url=http://127.0.0.1:$D_PORT
    under_load "$sku" "$url" || return
    freeze "$(redis_pid)"
    note "Redis frozen for ${FREEZE_S}s (redis_timeout_ms $SECKILL_REDIS_TIMEOUT_MS)"
    sleep "$FREEZE_S"
    thaw
    # The check proves the plain 503s took nothing: no row without an answer
    # beyond the requests of open outcome (none, or a 503 naming its key).
    after_fault "$url" "$sku" "$(now)" "SIGCONT"
    (($(answers unavailable) + $(answers uncertain) > 0)) ||
        fail "no buyer got a 503 while Redis was frozen: the fault was not felt"
}

# redis_info_field NAME: a field of the stack's Redis INFO.
redis_info_field() {
    se_redis_admin "$STACK_DIR" "$SE_REDIS_PORT" INFO memory | tr -d '\r' |
        awk -F: -v k="$1" '$1 == k { print $2; exit }'
}

# Redis full under load: maxmemory below what it holds (noeviction: every write that needs memory is refused,
# reads and deletions go on).  Buyers get 503 store_full, nothing taken; the
# writers' settle scripts are refused too and retry, losing no order; once
# the bound is back, sales resume by themselves.
scenario_redis_full() {
    local sku=$1 old used body code t0
    start_daemon d1 || return
    local url=http://127.0.0.1:$D_PORT
    under_load "$sku" "$url" || return
    old=$(se_redis_admin "$STACK_DIR" "$SE_REDIS_PORT" CONFIG GET maxmemory | sed -n 2p)
    used=$(redis_info_field used_memory)
    se_redis_admin "$STACK_DIR" "$SE_REDIS_PORT" CONFIG SET maxmemory $((used - FULL_BELOW_BYTES)) >/dev/null
    note "Redis full: maxmemory $old lowered to $((used - FULL_BELOW_BYTES)), below the $used bytes it held, for ${FULL_S}s"
    sleep 1
    body=$("$BUILD_DIR/seckillctl" token --user $((AFTER_USER_BASE - 1)) |
        sed 's/^/Authorization: Bearer /' |
        curl -s -D "$SDIR/full.headers" --max-time 5 -w '\n%{http_code}' -H @- \
            -H 'Content-Type: application/json' -d '{"qty":1}' \
            "$url/api/v1/skus/$((sku + 1))/orders" 2>/dev/null) || true
    sleep $((FULL_S - 1))
    # back before any check below can return: later scenarios share this Redis
    se_redis_admin "$STACK_DIR" "$SE_REDIS_PORT" CONFIG SET maxmemory "$old" >/dev/null ||
        fail "could not set maxmemory back to $old"
    t0=$(now)
    code=${body##*$'\n'}
    body=$(tr -d '\n' <<<"${body%$'\n'*}")
    note "an order while full: $code $body"
    [[ $code == 503 && $(jq -r .error <<<"$body" 2>/dev/null) == store_full ]] ||
        fail "an order while Redis was full answered $code $body, not 503 store_full"
    grep -qi '^retry-after:' "$SDIR/full.headers" || fail "the 503 store_full came without Retry-After"
    # The check proves the 503s took nothing and every order answered is written.
    after_fault "$url" "$sku" "$t0" "maxmemory was set back"
    (($(answers unavailable) > 0)) || fail "no buyer got a 503 while Redis was full: the fault was not felt"
}

# two_daemons SKU: D1 and D2 on one stack sharing the load on SKU.
two_daemons() {
    start_daemon d1 || return 1
    D1_PID=$D_PID D1_URL=http://127.0.0.1:$D_PORT
    start_daemon d2 || return 1
    D2_URL=http://127.0.0.1:$D_PORT
    under_load "$1" "$D1_URL" "$D2_URL"
}

scenario_two_daemons_kill_one() {
    local sku=$1 t0 left
    two_daemons "$sku" || return
    kill_mid_batch "$D1_PID" "$sku"
    t0=$(now)
    note "kill -9 of one of two daemons with $HELD stream entries in its writer's hands"
    # The survivor's writers claim the dead one's entries (writer_claim_idle_ms).
    while left=$(pending_of "$D1_PID" "$sku") && [[ $left != 0 ]]; do
        le "$(since "$t0")" "${HEAL_BOUND[$SCEN]}" || {
            fail "the dead daemon's $left entries were not taken over within ${HEAL_BOUND[$SCEN]}s"
            break
        }
        sleep "$PROBE_EVERY_S"
    done
    [[ $left == 0 ]] && note "its entries taken over after $(since "$t0")s (writer_claim_idle_ms $SECKILL_WRITER_CLAIM_IDLE_MS)"
    after_fault "$D2_URL" "$sku" "$t0" "the kill"
}

scenario_writer_frozen() {
    local sku=$1 refused
    two_daemons "$sku" || return
    mid_batch "$D1_PID" "$sku"
    freeze "$D1_PID"
    note "one of two daemons frozen for ${WRITER_FREEZE_S}s with $HELD entries in its writer's hands (lock_ttl_ms $SECKILL_LOCK_TTL_MS)"
    sleep "$WRITER_FREEZE_S"
    thaw
    after_fault "$D1_URL" "$sku" "$(now)" "SIGCONT of the frozen daemon"
    refused=$(curl -s --max-time 5 "$(internal_url "$D1_URL")/metrics" 2>/dev/null |
        awk '/^seckill_(lock_lost|lock_release_refused|writer_batches_failed)_total/ { printf "%s %s; ", $1, $2 }')
    note "the frozen daemon afterwards: ${refused:-no metrics}"
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

scenario_adjust_crash() {
    local sku=$1 t0 out st=0 i
    SECKILL_FAULT=adjust_after_redis start_daemon d-fault || return
    local fpid=$D_PID url=http://127.0.0.1:$D_PORT
    create_sku "$url" "$sku" 100 1 || return
    out=$(admin POST "$url/admin/v1/skus/$sku/stock-adjustments" '{"delta":10,"reason":"faults"}')
    died_at "$fpid" adjust_after_redis "the delta answered ${out##*$'\n'} and the daemon lives" 100 ||
        return
    note "the daemon died in the delta (exit status $DIED_STATUS), answer ${out##*$'\n'}"
    # Redis took the delta, PostgreSQL did not: the check must see it.
    check "$sku" crashed && st=0 || st=$?
    if ((st == 1)) && [[ $(jq -r '.invariants.checks[] | select(.key == "i2_stock") | .state' "$SDIR/crashed.check.json") == FAIL ]]; then
        note "before healing: $(jq -r '.invariants.checks[] | select(.key == "i2_stock") | .detail' "$SDIR/crashed.check.json")"
    else
        note "before healing the check exited $st (Redis already agreed: nothing to settle?)"
    fi
    t0=$(now)
    start_daemon d-normal || return
    while :; do
        check "$sku" healed && break
        le "$(since "$t0")" "${HEAL_BOUND[$SCEN]}" || {
            fail "Redis stock did not come back to skus.stock within ${HEAL_BOUND[$SCEN]}s (reconcile_interval_ms $SECKILL_RECONCILE_INTERVAL_MS)"
            return
        }
        sleep 0.5
    done
    HEAL_S=$(since "$t0")
    note "Redis agrees with skus.stock ${HEAL_S}s after a normal daemon started (bound ${HEAL_BOUND[$SCEN]}s): $(jq -r '.invariants.checks[] | select(.key == "i2_stock") | .detail' "$SDIR/healed.check.json")"
}

# order_as URL SKU USER: one order of one unit by USER; prints the status.
order_as() {
    "$BUILD_DIR/seckillctl" token --user "$3" | sed 's/^/Authorization: Bearer /' |
        curl -s -o /dev/null --max-time 5 -w '%{http_code}' -H @- \
            -H 'Content-Type: application/json' -d '{"qty":1}' \
            "$1/api/v1/skus/$2/orders" 2>/dev/null || true
}

# A SKU of 4 units in two stock buckets; the buyers of bucket 0 (even user
# ids) take its 2, and the third needs a move from bucket 1: the daemon
# (SECKILL_FAULT=adjust_moves_half_done) dies after Redis took the unit from
# bucket 1 and before bucket 0 got it, its transaction never committed.
# Bucket 1 is short in Redis until a normal daemon settles the move's record
# (aborted: given back); then every bucket agrees with PostgreSQL again and
# the units are all there.
scenario_transfer_crash() {
    local sku=$1 t0 out st=0 i b ids=() code
    SECKILL_FAULT=adjust_moves_half_done start_daemon d-fault || return
    local fpid=$D_PID url=http://127.0.0.1:$D_PORT
    out=$(admin POST "$url/admin/v1/skus" \
        "{\"id\":$sku,\"name\":\"faults $SCEN\",\"stock\":4,\"per_user_limit\":1,\"buckets\":2}")
    [[ ${out##*$'\n'} == 201 ]] || {
        fail "creating SKU $sku in buckets answered ${out//$'\n'/ }"
        return
    }
    mapfile -t ids < <(printf '%s\n' "${out%$'\n'*}" | jq -r '.bucket_skus[]')
    ((${#ids[@]} == 2)) || {
        fail "the create named ${#ids[@]} buckets, not 2"
        return
    }
    for i in 2 4 6; do
        code=$(order_as "$url" "$sku" "$i")
        note "buyer $i of bucket 0: $code"
    done
    died_at "$fpid" adjust_moves_half_done "the daemon lives" 100 || return
    note "the daemon died in the move (exit status $DIED_STATUS)"
    check "${ids[1]}" crashed || st=$?
    if ((st == 1)); then
        note "before healing, bucket 1: $(jq -r '.invariants.checks[] | select(.key == "i2_stock") | .detail' "$SDIR/crashed.check.json")"
    else
        fail "before healing the check of bucket 1 exited $st: the unit was not taken in Redis?"
    fi
    t0=$(now)
    start_daemon d-normal || return
    url=http://127.0.0.1:$D_PORT
    for b in "${ids[@]}"; do
        while ! check "$b" "healed-$b"; do
            le "$(since "$t0")" "${HEAL_BOUND[$SCEN]}" || {
                fail "bucket SKU $b did not agree with PostgreSQL within ${HEAL_BOUND[$SCEN]}s"
                return
            }
            sleep 0.5
        done
    done
    HEAL_S=$(since "$t0")
    note "both buckets agree with PostgreSQL ${HEAL_S}s after a normal daemon started (bound ${HEAL_BOUND[$SCEN]}s)"
    # the third buyer can buy now: the move runs again, whole this time
    code=$(order_as "$url" "$sku" 8)
    [[ $code == "$OK_CODE" ]] || fail "a buyer of bucket 0 after healing was answered $code, not $OK_CODE"
    for b in "${ids[@]}"; do
        check "$b" "after-$b" || fail "bucket SKU $b after the move: check-only exit $?"
    done
    note "after healing a buyer of the empty bucket got a unit moved from the other: $code"
}

# A sale whose buyers never pay: the daemon's sweeper expires their orders
# and dies (SECKILL_FAULT=release_before_redis) after the transaction that
# put the units back in skus.stock, before order_release.lua gave them to
# Redis.  A normal daemon must finish the return, once: Redis agrees with
# PostgreSQL again, every order expired and gave its units back exactly
# once (the check's ledger and lifecycle items), nobody's units are held.
scenario_expiry_crash() {
    local sku=$1 t0 out st=0 i
    SECKILL_FAULT=release_before_redis SECKILL_EXPIRY_SWEEP_INTERVAL_MS=200 \
        start_daemon d-fault || return
    local fpid=$D_PID url=http://127.0.0.1:$D_PORT
    out=$(admin POST "$url/admin/v1/skus" \
        "{\"id\":$sku,\"name\":\"faults $SCEN $sku\",\"stock\":1000,\"per_user_limit\":5,\"payment_window_s\":2}")
    [[ ${out##*$'\n'} == 201 ]] || {
        fail "creating SKU $sku answered ${out//$'\n'/ }"
        return
    }
    "$LOADTEST" --load-only --url "$url" --admin-url "$(internal_url "$url")" --sku "$sku" --limit 5 --qty 1:80,2:20 \
        --users 100000 --requests 300 --concurrency 8 --duration 10 \
        --timeout-ms "$REQUEST_TIMEOUT_MS" --seed "$SEED" --label "$SCEN" \
        --answers "$SDIR/load.answers" --json "$SDIR/load.json" \
        </dev/null >"$SDIR/load.log" 2>&1 || st=$?
    if ((st != 0)); then
        fail "the load exited $st (log $SDIR/load.log)"
        return
    fi
    note "load: $(jq -r '.run.answers | to_entries | map(select(.value > 0) | "\(.key) \(.value)") | join(", ")' "$SDIR/load.json")"
    # the window (2 s) and a sweep later, the fault point ends the daemon
    died_at "$fpid" release_before_redis "no expiry sweep killed the daemon" 150 || return
    note "the daemon died in its expiry sweep (exit status $DIED_STATUS), its units back in PostgreSQL only"
    st=0
    check "$sku" crashed --answers "$SDIR/load.answers" || st=$?
    if ((st == 1)) && [[ $(jq -r '.invariants.checks[] | select(.key == "i2_stock") | .state' "$SDIR/crashed.check.json") == FAIL ]]; then
        note "before healing: $(jq -r '.invariants.checks[] | select(.key == "i2_stock") | .detail' "$SDIR/crashed.check.json")"
    else
        note "before healing the check exited $st (Redis already agreed?)"
    fi
    t0=$(now)
    SECKILL_EXPIRY_SWEEP_INTERVAL_MS=200 start_daemon d-normal || return
    local nport=$D_PORT
    while :; do
        check "$sku" healed --answers "$SDIR/load.answers" && break
        le "$(since "$t0")" "${HEAL_BOUND[$SCEN]}" || {
            fail "the expired orders' units did not reach Redis within ${HEAL_BOUND[$SCEN]}s (see $SDIR/healed.check)"
            return
        }
        sleep 0.5
    done
    HEAL_S=$(since "$t0")
    out=$(curl -s --max-time 5 "$(internal_url "http://127.0.0.1:$nport")/metrics" |
        awk '/^seckill_(returns_settled_late_total|sku_reloads_total) / { printf "%s %s; ", $1, $2 }')
    note "healed ${HEAL_S}s after a normal daemon started (bound ${HEAL_BOUND[$SCEN]}s): $(jq -r '.invariants.checks[] | select(.key == "i2_stock") | .detail' "$SDIR/healed.check.json"); ${out:-no metrics}"
}

# The service behind Sentinel: a stack of its own (SECKILL_REDIS_TOPOLOGY=
# sentinel: a master, a replica, three Sentinels, on free ports) whose
# redis-sentinel:// URL the daemon, the load and the checks use; kill -9 of
# the master under load.  The Sentinels promote the replica, every
# connection of the daemon finds it, and sales go on within the bound; the
# load's answers are judged (202s Redis lost with the master's last writes,
# not yet replicated, are counted, as after a restart without data); the
# reconciliation rebuilds what the new master lacks.
HA_MASTER_NAME=seckill # scripts/stack.sh's S_MASTER_NAME
HA_SAVED=()
ha_env_on() {
    HA_SAVED=("$STACK_DIR" "$SECKILL_REDIS_URL" "$SECKILL_PG_DSN" "$PGPASSFILE"
        "${SECKILL_MIGRATE_PG_DSN:-}" "${SECKILL_MIGRATE_REDIS_URL_FILE:-}"
        "${SECKILL_REDIS_FUNCTIONS_URL_FILE:-}")
    STACK_DIR=$HA_DIR
    # shellcheck source=/dev/null
    source "$HA_DIR/env"
    export SECKILL_REDIS_URL SECKILL_PG_DSN PGPASSFILE SECKILL_MIGRATE_PG_DSN \
        SECKILL_MIGRATE_REDIS_URL_FILE SECKILL_REDIS_FUNCTIONS_URL_FILE
}
ha_env_off() {
    ((${#HA_SAVED[@]})) || return 0
    STACK_DIR=${HA_SAVED[0]} SECKILL_REDIS_URL=${HA_SAVED[1]} SECKILL_PG_DSN=${HA_SAVED[2]}
    PGPASSFILE=${HA_SAVED[3]} SECKILL_MIGRATE_PG_DSN=${HA_SAVED[4]}
    SECKILL_MIGRATE_REDIS_URL_FILE=${HA_SAVED[5]} SECKILL_REDIS_FUNCTIONS_URL_FILE=${HA_SAVED[6]}
    export SECKILL_REDIS_URL SECKILL_PG_DSN PGPASSFILE SECKILL_MIGRATE_PG_DSN \
        SECKILL_MIGRATE_REDIS_URL_FILE SECKILL_REDIS_FUNCTIONS_URL_FILE
    HA_SAVED=()
}

# ha_up: the Sentinel stack of this scenario, migrated, its settings in
# force (ha_down stops it and restores the main stack's).
HA_PORTS=()
ha_up() { # ha_up [TOPOLOGY]: sentinel (default) or cluster
    local topo=${1:-sentinel}
    HA_DIR=$SDIR/ha-stack
    # the main stack's, set again by ha_down: se_stack_restart (stack_ok after
    # a scenario) starts the topology these name
    HA_PORTS=("$SE_REDIS_PORT" "$SE_PG_PORT" "$SE_REPLICA_PORT" "$SE_SENTINEL_PORTS"
        "$SE_CLUSTER_PORTS" "$SE_CLUSTER_REPLICAS" "$SE_CLUSTER_REPLICA_PORTS")
    mkdir -p "$HA_DIR"
    SECKILL_REDIS_TOPOLOGY=$topo se_stack_start_free "$HA_DIR" >"$SDIR/ha-stack.log" 2>&1 || {
        fail "the $topo stack did not start ($SDIR/ha-stack.log)"
        return 1
    }
    ha_env_on
    "$BUILD_DIR/seckilld" migrate >"$SDIR/ha-migrate.log" 2>&1 || {
        fail "migrating the $topo stack failed ($SDIR/ha-migrate.log)"
        return 1
    }
    [[ $topo != sentinel ]] || sentinel_heal_bound
}

# sentinel_heal_bound: the scenario's heal bound, the issue's "the Sentinel
# detection time plus 5 s": the largest down-after-milliseconds that the
# Sentinels of the HA stack answer (SENTINEL MASTER, as the admin user) plus
# SENTINEL_HEAL_EXTRA_S.  Fails when none answers.
sentinel_heal_bound() {
    local p ms max='' ports=()
    IFS=, read -r -a ports <<<"$SE_SENTINEL_PORTS"
    for p in "${ports[@]}"; do
        ms=$(se_redis_admin "$HA_DIR" "$p" SENTINEL MASTER "$HA_MASTER_NAME" 2>/dev/null | tr -d '\r' |
            awk 'prev == "down-after-milliseconds" { print $0 + 0; exit } { prev = $0 }') || ms=
        [[ $ms =~ ^[0-9]+$ ]] || continue
        if [[ -z $max ]] || ((ms > max)); then max=$ms; fi
    done
    if [[ -z $max ]]; then
        fail "no Sentinel of the HA stack told its down-after-milliseconds (ports $SE_SENTINEL_PORTS)"
        return 1
    fi
    HEAL_BOUND[$SCEN]=$(awk -v ms="$max" -v x="$SENTINEL_HEAL_EXTRA_S" 'BEGIN { print ms / 1000 + x }')
    note "heal bound ${HEAL_BOUND[$SCEN]}s: down-after-milliseconds $max (the Sentinels, asked) + ${SENTINEL_HEAL_EXTRA_S}s"
}
ha_down() {
    [[ -n $HA_DIR ]] || return 0
    thaw
    stop_daemons # while their stack still runs; then the stack
    ha_env_off
    "$LT_STACK" stop "$HA_DIR" >"$SDIR/ha-stop.log" 2>&1 ||
        fail "stopping the HA stack failed ($SDIR/ha-stop.log)"
    HA_DIR=
    SE_REDIS_PORT=${HA_PORTS[0]} SE_PG_PORT=${HA_PORTS[1]} SE_REPLICA_PORT=${HA_PORTS[2]}
    SE_SENTINEL_PORTS=${HA_PORTS[3]} SE_CLUSTER_PORTS=${HA_PORTS[4]}
    SE_CLUSTER_REPLICAS=${HA_PORTS[5]} SE_CLUSTER_REPLICA_PORTS=${HA_PORTS[6]}
}
ha_master_kill() {
    local pid
    pid=$(tr -dc '0-9' <"$HA_DIR/redis/redis.pid")
    note "kill -9 of the Redis master (pid $pid); the Sentinels promote its replica"
    kill -KILL "$pid"
}

scenario_redis_failover() {
    local sku=$1
    if ha_up && start_daemon d1; then
        local url=http://127.0.0.1:$D_PORT
        if under_load "$sku" "$url"; then
            ha_master_kill
            after_fault "$url" "$sku" "$(now)" "the master was killed"
        fi
    fi
    ha_down
}

# The Sentinel that the daemon's watch follows (the URL's first) is killed
# first, then the master: the watch moves on to the next Sentinel, which
# with the third still makes the quorum (2) and the majority that elects a
# leader, hears +switch-master and the daemon sells on the promoted replica
# within the same bound.
scenario_sentinel_then_master_kill() {
    local sku=$1 url pid
    if ha_up && start_daemon d1; then
        url=http://127.0.0.1:$D_PORT
        if under_load "$sku" "$url"; then
            pid=$(tr -dc '0-9' <"$HA_DIR/sentinel-1/sentinel.pid" 2>/dev/null || true)
            if [[ -z $pid ]]; then
                fail "no pid file for the first Sentinel"
            else
                note "kill -9 of the first Sentinel (pid $pid), the one the daemon's watch follows"
                kill -KILL "$pid"
                sleep 1
                ha_master_kill
                after_fault "$url" "$sku" "$(now)" "the master was killed"
                grep -q "the Sentinels name a new master" "$SDIR/d1.log" ||
                    fail "the daemon's watch never named the new master (d1.log)"
            fi
        fi
    fi
    ha_down
}

# A stale lock holder across a failover.  Two daemons on a Sentinel stack;
# one (SECKILL_FAULT=pg_send_under_lock) stops itself in its first batch,
# holding the batch's fenced lock (its token drawn on the first master),
# after its last check of the lease, about to send the fenced statement: a
# pause at the worst moment.  The master is killed; the other daemon's
# writers take the SKU on the promoted replica with tokens drawn there and
# commit; then the stopped daemon is continued.  Its batch must not land
# (its watchdog sees the lock gone and abandons the wait, or PostgreSQL
# refuses the token, whichever comes first), the invariants hold, and the
# old master's token, given to PostgreSQL by the service's own fenced
# statement after the failover, is refused: the new master's tokens are
# larger although its counter may have lost the old master's last ones.
scenario_failover_stale_holder() {
    local sku=$1 d1_url i t0 fence_key token seen accepted d1_said
    if ! ha_up || ! SECKILL_FAULT=pg_send_under_lock start_daemon d1; then
        ha_down
        return
    fi
    D1_PID=$D_PID d1_url=http://127.0.0.1:$D_PORT
    if ! start_daemon d2 || ! under_load "$sku" "$d1_url" "http://127.0.0.1:$D_PORT"; then
        ha_down
        return
    fi
    D2_URL=http://127.0.0.1:$D_PORT
    for ((i = 0; i < STACK_WAIT_TENTHS; i++)); do # until d1 stopped itself
        [[ $(awk '{ print $3 }' "/proc/$D1_PID/stat" 2>/dev/null) == T ]] && break
        sleep 0.1
    done
    if ((i == STACK_WAIT_TENTHS)); then
        fail "the daemon with pg_send_under_lock never stopped with a lock held"
        ha_down
        return
    fi
    FROZEN_PIDS+=("$D1_PID") # continued by thaw, whatever happens
    # The token d1 holds, or a later one: the counter on the first master.
    fence_key="seckill:{sku:$sku}:lock:sku:fence" # every lock of a SKU draws from it
    token=$(se_redis_admin "$HA_DIR" "$SE_REDIS_PORT" GET "$fence_key" 2>/dev/null | tr -dc '0-9')
    note "d1 stopped holding the batch lock, fencing token <= ${token:-?} (lock_ttl_ms $SECKILL_LOCK_TTL_MS)"
    ha_master_kill
    t0=$(now)
    heal "$D2_URL" $((sku + 1)) "$t0" "the master was killed"
    sleep "$WRITER_FREEZE_S" # the other daemon's writers commit the SKU on the new master
    thaw
    note "d1 continued $(since "$t0")s after the kill, its lease long gone"
    load_wait
    judge "$sku"
    sales_continue "$D2_URL" "$sku"
    # The old master's token against the database, by the service's own
    # fenced statement (rolled back): it must be refused now.
    seen=$(psql "$SECKILL_PG_DSN" -X -At -c "SELECT fence_token FROM skus WHERE id = $sku" 2>&1)
    accepted=$(psql "$SECKILL_PG_DSN" -X -q -At -v ON_ERROR_STOP=1 2>&1 <<SQL
BEGIN;
PREPARE fence(bigint, bigint) AS $(grep -v '^--' sql/sku_fence.sql);
EXECUTE fence($sku, ${token:-0});
ROLLBACK;
SQL
    )
    if [[ -z $token ]]; then
        fail "no fencing token was drawn on the first master ($fence_key)"
    elif [[ -n $accepted ]]; then
        fail "PostgreSQL accepted the old master's token $token after the failover (fence_token $seen): $accepted"
    else
        note "PostgreSQL refuses the old master's token $token: it has seen $seen, drawn on the new master"
    fi
    d1_said=$(curl -s --max-time 5 "$(internal_url "$d1_url")/metrics" 2>/dev/null |
        awk '/^seckill_(fence_refused|lock_lost|writer_batches_failed)_total/ { printf "%s %s; ", $1, $2 }')
    note "the stale holder afterwards: ${d1_said:-no metrics}"
    ha_down
}

# ---- Redis Cluster (scripts/stack.sh's cluster topology: three masters,
# a replica each, cluster-node-timeout 1000 ms)

# cluster_admin ARGS...: a command as the admin user, to a master that answers.
cluster_admin() {
    local port
    port=$(se_redis_master_port "$HA_DIR" "") && [[ -n $port ]] || return 1
    se_redis_admin "$HA_DIR" "$port" "$@"
}

# cluster_slot_owner SLOT: "PORT ID" of the master serving SLOT now.
cluster_slot_owner() {
    cluster_admin CLUSTER NODES 2>/dev/null | tr -d '\r' | awk -v s="$1" '
        $3 ~ /master/ && $3 !~ /fail/ {
            for (i = 9; i <= NF; i++) {
                if ($i ~ /^\[/) continue
                n = split($i, r, "-"); if (n == 1) r[2] = r[1]
                if (s + 0 >= r[1] + 0 && s + 0 <= r[2] + 0) {
                    split($2, a, "[:@]"); print a[2], $1; exit
                }
            }
        }'
}

# cluster_node_pid PORT: the pid of the node of the HA stack on PORT.
cluster_node_pid() {
    local d
    for d in "$HA_DIR"/redis-cluster-[0-9]*; do
        if [[ $(awk '$1 == "port" { print $2; exit }' "$d/redis.conf" 2>/dev/null) == "$1" ]]; then
            tr -dc '0-9' <"$d/redis.pid"
            return 0
        fi
    done
    return 1
}

# A SKU's slot (its keys share the tag {sku:N}).
sku_slot() { cluster_admin CLUSTER KEYSLOT "seckill:{sku:$1}:stock" 2>/dev/null | tr -dc '0-9'; }

# Kill -9 of the master that serves the load's SKU (and the probes' SKU),
# mid-sale.  Its replica is promoted (node timeout 1 s); the daemon's
# clients find the new owner (a dead master's slot map is read again) and
# sales go on; 202s the dead master had not replicated are counted as lost,
# as after a crash.
scenario_cluster_master_kill() {
    local sku=$1 url slot port pid i
    # the load's SKU and the healing probes' (sku + 1) on one master, so that
    # the healing time is that of the killed master's slots
    if ha_up cluster; then
        for ((i = 0; i < 50; i++)); do
            [[ $(cluster_slot_owner "$(sku_slot "$sku")") == "$(cluster_slot_owner "$(sku_slot $((sku + 1)))")" ]] &&
                break
            sku=$((sku + 1))
        done
    fi
    if [[ -n $HA_DIR ]] && start_daemon d1; then
        url=http://127.0.0.1:$D_PORT
        if under_load "$sku" "$url"; then
            slot=$(sku_slot "$sku")
            read -r port _ < <(cluster_slot_owner "$slot") || true
            pid=$(cluster_node_pid "${port:-0}") || pid=
            if [[ -z $pid ]]; then
                fail "no master found for the SKU's slot ${slot:-?}"
            else
                note "kill -9 of the master of the SKU's slot $slot (port $port, pid $pid)"
                kill -KILL "$pid"
                after_fault "$url" "$sku" "$(now)" "the SKU's master was killed"
                read -r port _ < <(cluster_slot_owner "$slot") || true
                note "slot $slot is served by port ${port:-?} now"
            fi
        fi
    fi
    ha_down
}

# reshard_pick BASE: in the cluster of HA_DIR, the SKU of cluster-reshard
# and its probe SKU, both in one slot that is the RESHARD_SLOTS_MIN-th to
# RESHARD_SLOTS_MAX-th lowest of its master's (redis-cli --cluster reshard
# takes a node's slots from its lowest), from the ids BASE..
# BASE+RESHARD_CANDIDATES-1 (their slots asked of the cluster in one
# redis-cli run).  Prints "SKU PROBE_SKU SLOT N FIRST": N slots of the
# master, from its lowest FIRST, move up to and including SLOT.
reshard_pick() {
    local port nodes
    port=$(se_redis_master_port "$HA_DIR" "") && [[ -n $port ]] || return 1
    nodes=$(cluster_admin CLUSTER NODES 2>/dev/null | tr -d '\r') || return 1
    seq "$1" $(($1 + RESHARD_CANDIDATES - 1)) |
        awk '{ printf "CLUSTER KEYSLOT seckill:{sku:%s}:stock\n", $1 }' |
        se_redis_admin "$HA_DIR" "$port" 2>/dev/null | tr -dc '0-9\n' |
        awk -v base="$1" -v lo="$RESHARD_SLOTS_MIN" -v hi="$RESHARD_SLOTS_MAX" -v nodes="$nodes" '
            BEGIN { # every slot: its rank among those of its master, and their lowest
                n = split(nodes, line, "\n")
                for (l = 1; l <= n; l++) {
                    k = split(line[l], f, " ")
                    if (f[3] !~ /master/ || f[3] ~ /fail/) continue
                    c = 0; lowest = -1
                    for (i = 9; i <= k; i++) { # the ranges, in ascending order
                        if (f[i] ~ /^\[/) continue
                        m = split(f[i], r, "-"); if (m == 1) r[2] = r[1]
                        if (lowest < 0) lowest = r[1] + 0
                        for (s = r[1] + 0; s <= r[2] + 0; s++) { rank[s] = ++c; first[s] = lowest }
                    }
                }
            }
            $0 != "" { id[NR] = base + NR - 1; slot[NR] = $0 + 0; count[$0 + 0]++ }
            END {
                for (i = 1; i <= NR; i++) {
                    s = slot[i]
                    if (!(s in rank) || count[s] < 2 || rank[s] < lo || rank[s] > hi) continue
                    for (j = i + 1; j <= NR; j++)
                        if (slot[j] == s) { print id[i], id[j], s, rank[s], first[s]; exit }
                }
            }'
}

# decided CODE: an answer that settles the order one way or the other (the
# probe SKU never sells out: 201 or 202).
decided() { [[ $1 == 201 || $1 == 202 ]]; }

# probe_decided URL SKU: probes until one is decided, at most DECIDED_TRIES.
DECIDED_TRIES=20
probe_decided() {
    local i
    for ((i = 0; i < DECIDED_TRIES; i++)); do
        decided "$(probe "$1" "$2" | cut -d' ' -f1)" && return 0
        sleep "$PROBE_EVERY_S"
    done
    return 1
}

# A slot migrated mid-sale with redis-cli --cluster reshard: every slot of
# the SKU's master up to and including the SKU's moves to another master
# (the stream, the hashes, the lock keys and the buyers' keys with it),
# while orders come.  The probe SKU hashes to the SKU's slot and is ordered
# from without pause, from before the reshard until a decided answer after
# it: the longest time between two decided answers (the gap buyers of a
# migrating slot see) is printed and bounded.  The reshard must end while
# the load runs, the slot must be on the other master afterwards, and the
# load's answers hold (MOVED, ASK and TRYAGAIN followed; nothing lost or
# sold twice).
scenario_cluster_reshard() {
    local sku=$1 psku url slot first port id to_port to_id n pw t0 ts t tend='' out code
    local last=0 gap=0 gap_at=0 slow=0 probes=0 ndec=0 bound=${HEAL_BOUND[$SCEN]} rs_st=0
    if ! ha_up cluster; then
        ha_down
        return
    fi
    read -r sku psku slot n first < <(reshard_pick "$sku") || true
    if [[ -z $psku ]]; then
        fail "no SKU and probe SKU sharing a slot $RESHARD_SLOTS_MIN..$RESHARD_SLOTS_MAX into its master's range among $RESHARD_CANDIDATES ids"
        ha_down
        return
    fi
    note "SKU $sku and probe SKU $psku both in slot $slot, the $n-th lowest of its master's (from $first)"
    if start_daemon d1; then
        url=http://127.0.0.1:$D_PORT
        if create_sku "$url" "$psku" "$PROBE_STOCK" "$PROBE_LIMIT"; then
            load_start "$sku" "$url"
            sleep "$FAULT_AT_S"
            read -r port id < <(cluster_slot_owner "$slot") || true
            read -r to_port to_id < <(cluster_admin CLUSTER NODES 2>/dev/null | tr -d '\r' |
                awk -v me="$id" '$3 ~ /master/ && $3 !~ /fail/ && $1 != me && NF >= 9 {
                    split($2, a, "[:@]"); print a[2], $1; exit }') || true
            if [[ -z $id || -z $to_id ]]; then
                fail "cannot tell the SKU's master or another master (slot $slot)"
            elif ! probe_decided "$url" "$psku"; then
                fail "the probe SKU $psku took no order in $DECIDED_TRIES tries before the reshard"
            else
                pw=$(tr -dc '0-9a-f' <"$HA_DIR/redis-admin-password")
                note "resharding the $n lowest slots of the SKU's master ($first..$slot) from port $port to port $to_port under load, probing SKU $psku throughout"
                t0=$(now)
                REDISCLI_AUTH=$pw timeout "$RESHARD_TIMEOUT_S" redis-cli --user seckill-admin \
                    --cluster reshard "127.0.0.1:$port" --cluster-from "$id" --cluster-to "$to_id" \
                    --cluster-slots "$n" --cluster-yes </dev/null >"$SDIR/reshard.log" 2>&1 &
                RESHARD_PID=$!
                # Bounded: the reshard ends within its timeout; then until a
                # decided answer, or the bound without one.
                while :; do
                    ts=$(since "$t0")
                    out=$(probe "$url" "$psku")
                    t=$(since "$t0")
                    code=${out%% *}
                    probes=$((probes + 1))
                    printf '%s %s %s\n' "$t" "$out" "$ts" >>"$SDIR/probes"
                    if decided "$code"; then
                        ndec=$((ndec + 1))
                        le "$(awk -v a="$t" -v b="$ts" 'BEGIN { print a - b }')" "$slow" ||
                            slow=$(awk -v a="$t" -v b="$ts" 'BEGIN { printf "%.2f", a - b }')
                        if ! le "$(awk -v a="$t" -v b="$last" 'BEGIN { print a - b }')" "$gap"; then
                            gap=$(awk -v a="$t" -v b="$last" 'BEGIN { printf "%.2f", a - b }') gap_at=$last
                        fi
                        last=$t
                        [[ -n $tend ]] && break
                    fi
                    if [[ -z $tend ]] && ! kill -0 "$RESHARD_PID" 2>/dev/null; then
                        tend=$t
                        wait "$RESHARD_PID" || rs_st=$?
                        RESHARD_PID=
                    fi
                    if [[ -n $tend ]] && ! le "$(awk -v a="$t" -v b="$last" 'BEGIN { print a - b }')" "$bound"; then
                        gap=$(awk -v a="$t" -v b="$last" 'BEGIN { printf "%.2f", a - b }') gap_at=$last
                        break
                    fi
                    sleep "$RESHARD_PROBE_EVERY_S"
                done
                ((rs_st == 0)) || fail "redis-cli --cluster reshard exited $rs_st ($SDIR/reshard.log)"
                note "resharded in ${tend}s; $probes probes of SKU $psku (one every $(awk -v t="$t" -v n="$probes" 'BEGIN { printf "%.2f", t / n }')s), $ndec decided, the others: $(awk '$2 != 201 && $2 != 202 { c[$2]++; n++ } END { for (k in c) printf "%s x%d ", k, c[k]; if (!n) print "none" }' "$SDIR/probes")"
                HEAL_S=$gap
                note "longest gap between decided answers to the probe SKU in the migrating slot: ${gap}s, from ${gap_at}s into the reshard (bound ${bound}s); the slowest decided answer took ${slow}s"
                le "$gap" "$bound" ||
                    fail "the probe SKU in the migrating slot went ${gap}s without a decided answer (bound ${bound}s; probes in $SDIR/probes)"
                le "$(awk -v a="$t0" -v b="$LOAD_T0" -v e="$tend" 'BEGIN { print a - b + e }')" "$LOAD_S" ||
                    fail "the reshard ended after the load: the SKU's slot did not move under load"
            fi
            load_wait
            judge "$sku"
            sales_continue "$url" "$sku"
            read -r port _ < <(cluster_slot_owner "$slot") || true
            [[ $port == "$to_port" ]] ||
                fail "slot $slot is served by port ${port:-?}, not $to_port, after the reshard"
        fi
    fi
    ha_down
}

# One SKU in three stock buckets, one on each master, sold by a whole
# seckill-loadtest run (--buckets 3: its own drain and check of every bucket
# at the end), the buyers of one bucket refilled from the others as it
# empties.  kill -9 of the master that holds the probes' SKU and one of the
# buckets, mid-sale: its replica is promoted; meanwhile that bucket's buyers
# get 503, a bucket that cannot be read never lets the SKU be called sold
# out, and the others sell on.  Then sales go on in every bucket.
scenario_cluster_buckets() {
    local sku=$1 url slot port pid
    if ha_up cluster && start_daemon d1; then
        url=http://127.0.0.1:$D_PORT
        if create_sku "$url" $((sku + 1)) "$PROBE_STOCK" "$PROBE_LIMIT"; then
            "$LOADTEST" --url "$url" --admin-url "$(internal_url "$url")" --sku "$sku" --create-sku --buckets 3 \
                --stock "$PROBE_STOCK" --limit 5 --qty 1:80,2:20 --users 100000000 \
                --requests 100000000 --retry-share 0.1 --concurrency "$CONCURRENCY" \
                --duration "$LOAD_S" --timeout-ms "$REQUEST_TIMEOUT_MS" \
                --drain-timeout "$DRAIN_TIMEOUT_S" --seed "$SEED" \
                --label "$SCEN" --json "$SDIR/load.json" </dev/null >"$SDIR/load.log" 2>&1 &
            LOAD_PID=$!
            sleep "$FAULT_AT_S"
            slot=$(sku_slot $((sku + 1)))
            read -r port _ < <(cluster_slot_owner "$slot") || true
            pid=$(cluster_node_pid "${port:-0}") || pid=
            if [[ -z $pid ]]; then
                fail "no master found for slot ${slot:-?}"
            else
                note "kill -9 of the master of slot $slot (port $port, pid $pid), which holds a bucket"
                kill -KILL "$pid"
                heal "$url" $((sku + 1)) "$(now)" "a bucket's master was killed"
                # the run's exit is its check: every bucket, the transfers summing to 0
                if load_wait; then
                    note "check: $(jq -r '.invariants.facts | "\(.run_orders) orders, \(.run_units_sold) units sold in 3 buckets; lost 202s \(.answered.lost_202)"' "$SDIR/load.json")"
                fi
                sales_continue "$url" "$sku" --buckets 3
            fi
        fi
    fi
    ha_down
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

# The load through HAProxy; kill -9 of one daemon mid-batch.  HAProxy's
# checks take it out and send its share to the other, whose writers claim
# the dead one's stream entries; answers the dead daemon owed are unknown
# outcomes (HAProxy's 502), every promise made holds.
scenario_balancer_daemon_kill() {
    local sku=$1
    balancer_up || return
    under_load "$sku" "$LB_URL" || return
    kill_mid_batch "$D1_PID" "$sku"
    note "kill -9 of one of two daemons behind HAProxy, $HELD stream entries in its writer's hands"
    after_fault "$LB_URL" "$sku" "$(now)" "the daemon was killed"
}

# secs_of_day HH:MM:SS.frac: seconds since midnight.
secs_of_day() { awk -F: '{ printf "%.3f", $1 * 3600 + $2 * 60 + $3 }' <<<"$1"; }

# balancer_seen SKU T0: what HAProxy answered to the orders on SKU (the load)
# and SKU + 1 (the probes), from its request log (option httplog): its own
# 503s (<NOSRV>: no daemon in service), apart from the daemons' answers, and
# when its own came, in seconds after T0 (HAProxy logs local time; a run
# across midnight reads wrong).  Its check log: how often a daemon went down.
balancer_seen() {
    local sku=$1 t0=$2 log=$SDIR/haproxy/haproxy.log kill_s
    kill_s=$(secs_of_day "$(date -d "@$t0" +%H:%M:%S.%N)")
    awk -v load="/api/v1/skus/$sku/orders " -v probe="/api/v1/skus/$((sku + 1))/orders " -v k="$kill_s" '
        function tod(f, t) { t = f; sub(/^\[[^:]*:/, "", t); sub(/\]$/, "", t); split(t, h, ":"); return h[1] * 3600 + h[2] * 60 + h[3] }
        {
            w = index($0, load) ? "load" : index($0, probe) ? "probes" : ""
            if (w == "") next
            for (i = 3; i < NF; i++) if ($i ~ /^seckilld\//) break
            st = $(i + 2)
            if ($i ~ /<NOSRV>/) {
                own[w]++
                t = tod($2) - k
                if (first == "" || t < first) first = t
                if (last == "" || t > last) last = t
            } else {
                if (st == 503) d503[w]++
                if (st == 502 || st == 504) bad[w]++
            }
        }
        END {
            printf "HAProxy'"'"'s own 503s (no daemon in service): load %d, probes %d", own["load"], own["probes"]
            if (first != "") printf " (from %.1fs to %.1fs after the kill)", first, last
            printf "; the daemons'"'"' 503s through it: load %d, probes %d; 502/504: load %d\n", d503["load"], d503["probes"], bad["load"]
        }' "$log"
    # (each of these is in the log twice: as a log line, and as a warning on stderr)
    note "HAProxy's checks: $(grep -c '^Server .* is DOWN' "$log") daemon(s) taken out, $(grep -c '^Server .* is UP' "$log") brought back, $(grep -c '^backend .* has no server available' "$log") time(s) none in service ($HAPROXY_CHECK)"
}

# Two daemons behind HAProxy on the Sentinel stack, the load through
# HAProxy (the deployed topology, `make run REDIS=sentinel INSTANCES=2`);
# kill -9 of the Redis master.  While no master answers, the daemons'
# /healthz answers 503 and HAProxy's checks (fall 2) take both out: buyers
# get HAProxy's own 503 (JSON, Retry-After); once the Sentinels promote the replica the checks
# (rise 2) bring them back.  Heal: the first probe answered 201 through
# HAProxy, within the Sentinel scenarios' bound (detection + 5 s).
scenario_balancer_redis_failover() {
    local sku=$1 t0 heard bad
    if ha_up && balancer_up && under_load "$sku" "$LB_URL"; then
        ha_master_kill
        t0=$(now)
        after_fault "$LB_URL" "$sku" "$t0" "the master was killed"
        heard=$(grep -h 'the Sentinels name a new master' "$SDIR"/d1.log "$SDIR"/d2.log 2>/dev/null |
            awk '{ print $1 }' | sort | head -n 1)
        if [[ -n $heard ]]; then
            note "the daemons heard of the new master $(awk -v a="$t0" -v b="$(date -d "$heard" +%s.%N)" \
                'BEGIN { printf "%.1f", b - a }')s after the kill (directly; through HAProxy: ${HEAL_S}s)"
        fi
        note "$(balancer_seen "$sku" "$t0")"
        # Whoever answered meanwhile, the daemons or HAProxy itself (its
        # http-error), a buyer was told when to try again.
        bad=$(awk -v ok="$OK_CODE" '$2 != ok && !($2 == 503 && $3 > 0)' "$SDIR/probes")
        [[ -z $bad ]] || fail "through HAProxy, buyers got other than 503 with Retry-After: $(head -n 3 <<<"$bad" | tr '\n' ';')"
    fi
    ha_down
}

# ---------------------------------------------------------------- runner

# report_failure: the check's offending rows and the daemon logs' tails.
report_failure() {
    local f
    for f in "$SDIR"/*.check; do
        [[ -f $f ]] || continue
        if grep -q '^  FAIL\|could not finish' "$f"; then
            printf -- '--- %s: failed checks\n' "${f#"$SDIR"/}"
            awk '/^  FAIL/ { p = 1; print; next } /^  (PASS|skip)/ { p = 0 } /could not finish/ { print } p && /^          / { print }' "$f"
        fi
    done
    for f in "$SDIR"/d*.log; do
        [[ -f $f ]] || continue
        printf -- '--- last lines of %s\n' "${f#"$SDIR"/}"
        tail -n 15 "$f"
    done
    [[ -f $SDIR/load.log ]] && {
        printf -- '--- last lines of load.log\n'
        tail -n 4 "$SDIR/load.log"
    }
    return 0
}

# stack_ok: both servers answer (a scenario may have left one down).
stack_ok() {
    thaw
    "$LT_STACK" status "$STACK_DIR" >/dev/null 2>&1 && return 0
    say "restarting the stack after $SCEN"
    se_stack_restart "$STACK_DIR" >/dev/null 2>&1
}

run_scenario() {
    local idx=$1 name=$2 t0 secs verdict
    SCEN=$name SDIR=$SCRATCH/$name REASONS=() NOTES=() HEAL_S=- PROBE_USER=0
    mkdir -p "$SDIR"
    say "=== $name (heal bound ${HEAL_BOUND[$name]:-"the Sentinels' down-after-milliseconds + $SENTINEL_HEAL_EXTRA_S "}s)"
    t0=$SECONDS
    "scenario_${name//-/_}" $((idx * 100 + 1)) || true
    thaw
    lt_stop "$LOAD_PID" seckill-loadtest
    LOAD_PID=
    lt_stop "$RESHARD_PID" redis-cli
    RESHARD_PID=
    ((${#REASONS[@]} == 0)) || report_failure
    lt_stop "$BALANCER_PID" haproxy
    BALANCER_PID=
    stop_daemons
    stack_ok || fail "the stack could not be brought back"
    secs=$((SECONDS - t0))
    verdict=PASS
    ((${#REASONS[@]} == 0)) || verdict=FAIL
    RESULTS+=("$(printf '%-4s  %-25s %4ss  heal %6s  %s' "$verdict" "$name" "$secs" \
        "${HEAL_S}s" "${REASONS[0]:-}")")
    say "--- $name: $verdict in ${secs}s, healed in ${HEAL_S}s (bound ${HEAL_BOUND[$name]:-?}s)"
}

# ---------------------------------------------------------------- main

SELECTED=("${ALL_SCENARIOS[@]}")
if [[ -n ${FAULTS_ONLY:-} ]]; then
    IFS=, read -r -a SELECTED <<<"$FAULTS_ONLY"
    for s in "${SELECTED[@]}"; do
        [[ " ${ALL_SCENARIOS[*]} " == *" $s "* ]] ||
            die "unknown scenario '$s' in FAULTS_ONLY (known: ${ALL_SCENARIOS[*]})"
    done
fi

mkdir -p "$ROOT/var"
SCRATCH=$ROOT/var/faults-$$-$(rand_hex 4)
mkdir "$SCRATCH"
STACK_DIR=$SCRATCH/stack
mkdir "$STACK_DIR"
se_stack_start_free "$STACK_DIR" >"$SCRATCH/stack.log" 2>&1 || {
    cat "$SCRATCH/stack.log" >&2
    die "could not start the stack in $STACK_DIR"
}
lt_stack_up "$STACK_DIR" >/dev/null
lt_token "$SCRATCH"
lt_buyer_secret "$SCRATCH"
say "stack in $STACK_DIR (redis :$SE_REDIS_PORT, postgres :$SE_PG_PORT), acknowledgement $ACK, loads of ${LOAD_S}s on $CONCURRENCY connections"

start=$SECONDS
for i in "${!ALL_SCENARIOS[@]}"; do
    name=${ALL_SCENARIOS[$i]}
    [[ " ${SELECTED[*]} " == *" $name "* ]] || continue
    run_scenario $((i + 1)) "$name"
done

printf '\n%s: summary (%ss, acknowledgement %s)\n' "$PROG" $((SECONDS - start)) "$ACK"
printf '  %s\n' "${RESULTS[@]}"
failed=$(printf '%s\n' "${RESULTS[@]}" | grep -c '^FAIL' || true)
printf '%s: %d passed, %d failed\n' "$PROG" $((${#RESULTS[@]} - failed)) "$failed"
((failed == 0))

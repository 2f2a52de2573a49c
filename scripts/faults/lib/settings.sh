# shellcheck shell=bash
# Sourced by scripts/faults.sh: the settings every scenario shares.  A
# scenario's own (its heal bound, its timings) are in its file.

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
WRITER_FREEZE_S=5      # SIGSTOP of a daemon: longer than its lock lease below
PROBE_EVERY_S=0.1      # healing probes
REQUEST_TIMEOUT_MS=4000
DRAIN_TIMEOUT_S=120
STACK_WAIT_TENTHS=300 # a killed server must be gone within 30 s
MID_BATCH_TRIES=100   # samples of the writer's pending entries before a kill
ADMIN_MAX_TIME_S=10
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
# Each scenario's file sets its own: HEAL_BOUND[NAME]=SECONDS.
declare -A HEAL_BOUND=()

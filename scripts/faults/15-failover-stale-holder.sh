# shellcheck shell=bash
# Scenario 15 of scripts/faults.sh, which sources it: 15 is its place in a
# run and its SKUs' base (1501 up).
#
#   failover-stale-holder  the same, while a second daemon is stopped holding a writer
#                        lock of the old master, about to write; its token is refused

# No HEAL_BOUND: the issue's "within the Sentinel detection time plus 5 s",
# set by ha_up from the running Sentinels' down-after-milliseconds
# (SENTINEL_HEAL_EXTRA_S).

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

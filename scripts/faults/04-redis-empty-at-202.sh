# shellcheck shell=bash
# Scenario 4 of scripts/faults.sh, which sources it: 4 is its place in a
# run and its SKUs' base (401 up).
#
#   redis-empty-at-202   the only writer frozen so that durable answers fall back to 202,
#                        then kill -9 of Redis, restarted without its data: no 202 lost

HEAL_BOUND[redis-empty-at-202]=30
PENDING_ACK_WAIT_MS=500 # redis-empty-at-202: the buyers' daemon's order_ack_wait_ms
PENDING_WINDOW_S=2      # ... its writer frozen this long before Redis dies: answers fall back to 202
PENDING_SETTLE_S=30     # ... every order recorded pending settled within this after the load

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

# shellcheck shell=bash
# Scenario 10 of scripts/faults.sh, which sources it: 10 is its place in a
# run and its SKUs' base (1001 up).
#
#   writer-frozen        two daemons, one SIGSTOPped longer than lock_ttl_ms

HEAL_BOUND[writer-frozen]=20

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

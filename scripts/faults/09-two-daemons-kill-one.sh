# shellcheck shell=bash
# Scenario 9 of scripts/faults.sh, which sources it: 9 is its place in a
# run and its SKUs' base (901 up).
#
#   two-daemons-kill-one two daemons share the load, kill -9 of one

HEAL_BOUND[two-daemons-kill-one]=20

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

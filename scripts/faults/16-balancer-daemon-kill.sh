# shellcheck shell=bash
# Scenario 16 of scripts/faults.sh, which sources it: 16 is its place in a
# run and its SKUs' base (1601 up).
#
#   balancer-daemon-kill two daemons behind HAProxy, the load through it; kill -9 of one

# HAProxy's checks (two failures, 250 ms apart after the first) take the dead one out
HEAL_BOUND[balancer-daemon-kill]=10

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

# shellcheck shell=bash
# Scenario 17 of scripts/faults.sh, which sources it: 17 is its place in a
# run and its SKUs' base (1701 up).
#
#   cluster-master-kill  Redis Cluster (three masters, a replica each): kill -9 of the
#                        master serving the load's SKU; its replica takes over

# cluster-node-timeout (1 s) and the replica's election, plus the issue's 5 s
HEAL_BOUND[cluster-master-kill]=10

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

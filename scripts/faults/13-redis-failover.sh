# shellcheck shell=bash
# Scenario 13 of scripts/faults.sh, which sources it: 13 is its place in a
# run and its SKUs' base (1301 up).
#
#   redis-failover       Redis behind Sentinel (a master, a replica, three Sentinels):
#                        kill -9 of the master under load; Sentinel promotes the replica

# No HEAL_BOUND: the "within the Sentinel detection time plus 5 s",
# set by ha_up from the running Sentinels' down-after-milliseconds
# (SENTINEL_HEAL_EXTRA_S).

# The service behind Sentinel: a stack of its own (SECKILL_REDIS_TOPOLOGY=
# sentinel: a master, a replica, three Sentinels, on free ports) whose
# redis-sentinel:// URL the daemon, the load and the checks use; kill -9 of
# the master under load.  The Sentinels promote the replica, every
# connection of the daemon finds it, and sales go on within the bound; the
# load's answers are judged (202s Redis lost with the master's last writes,
# not yet replicated, are counted, as after a restart without data); the
# reconciliation rebuilds what the new master lacks.
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

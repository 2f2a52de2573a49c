# shellcheck shell=bash
# Scenario 14 of scripts/faults.sh, which sources it: 14 is its place in a
# run and its SKUs' base (1401 up).
#
#   sentinel-then-master-kill  the same, after kill -9 of the Sentinel the daemon's
#                        watch follows

# No HEAL_BOUND: the "within the Sentinel detection time plus 5 s",
# set by ha_up from the running Sentinels' down-after-milliseconds
# (SENTINEL_HEAL_EXTRA_S).

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

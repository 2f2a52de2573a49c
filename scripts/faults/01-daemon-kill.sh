# shellcheck shell=bash
# Scenario 1 of scripts/faults.sh, which sources it: 1 is its place in a
# run and its SKUs' base (101 up).
#
#   daemon-kill          kill -9 of the daemon mid-batch under load, restarted

HEAL_BOUND[daemon-kill]=20

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

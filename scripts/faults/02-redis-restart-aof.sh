# shellcheck shell=bash
# Scenario 2 of scripts/faults.sh, which sources it: 2 is its place in a
# run and its SKUs' base (201 up).
#
#   redis-restart-aof    kill -9 of Redis, restarted with its AOF

HEAL_BOUND[redis-restart-aof]=15

scenario_redis_restart_aof() {
    local sku=$1
    start_daemon d1 || return
    local url=http://127.0.0.1:$D_PORT
    under_load "$sku" "$url" || return
    note "kill -9 of Redis; restarted with its AOF"
    down_and_back "$(redis_pid)" KILL Redis || return
    after_fault "$url" "$sku" "$(now)" "Redis answered again"
}

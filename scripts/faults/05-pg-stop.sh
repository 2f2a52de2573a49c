# shellcheck shell=bash
# Scenario 5 of scripts/faults.sh, which sources it: 5 is its place in a
# run and its SKUs' base (501 up).
#
#   pg-stop              PostgreSQL stopped (immediate) under load, started again

HEAL_BOUND[pg-stop]=20

scenario_pg_stop() {
    local sku=$1
    start_daemon d1 || return
    local url=http://127.0.0.1:$D_PORT
    under_load "$sku" "$url" || return
    note "PostgreSQL stopped (immediate, as pg_ctl -m immediate) under load"
    down_and_back "$(pg_pid)" QUIT PostgreSQL || return
    after_fault "$url" "$sku" "$(now)" "PostgreSQL accepted connections again"
}

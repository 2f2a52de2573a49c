# shellcheck shell=bash
# Scenario 24 of scripts/faults.sh, which sources it: 24 is its place in a
# run and its SKUs' base (2401 up).
#
#   pg-standby-kill      PostgreSQL under Patroni: kill -9 of the synchronous standby's
#                        machine under load

# No HEAL_BOUND: as pg-primary-kill's (pgha_heal_bound): with
# synchronous_mode_strict false, Patroni takes the lost standby out of
# synchronous_standby_names at its next loop, and the COMMITs waiting for it
# return.

# Sales must not hang for ever on a synchronous commit no standby will
# confirm: the primary goes on alone (the trade: those commits live on one
# server until a standby is back; docs/operations.md).  Measured: how long
# commits waited.
scenario_pg_standby_kill() {
    local sku=$1 standby
    if pgha_up && start_daemon d1; then
        local url=http://127.0.0.1:$D_PORT
        standby=$(pgha_wait_member sync_standby 30) || fail "no synchronous standby to kill"
        if [[ -n $standby ]] && under_load "$sku" "$url"; then
            pgha_kill "$standby"
            after_fault "$url" "$sku" "$(now)" "the standby's machine was killed"
            pgha_report_leader
        fi
    fi
    ha_down
}

# shellcheck shell=bash
# Scenario 22 of scripts/faults.sh, which sources it: 22 is its place in a
# run and its SKUs' base (2201 up).
#
#   pg-primary-kill      PostgreSQL under Patroni (a primary, a synchronous standby, etcd):
#                        kill -9 of the primary's machine (Patroni and PostgreSQL) under load

# No HEAL_BOUND: Patroni's ttl + loop_wait + PGHA_HEAL_EXTRA_S, asked of the
# running cluster (pgha_heal_bound).

# The primary's machine dies mid-sale in durable mode: its leader key
# expires after Patroni's ttl, the synchronous standby (which holds every
# commit a 201 answered) is promoted, the daemons' multi-host DSN finds it,
# and a COMMIT whose answer the kill cut is settled against the new primary.
# Judged from the new primary: no 201 lost, nothing sold twice.
scenario_pg_primary_kill() {
    local sku=$1 primary
    if pgha_up && start_daemon d1; then
        local url=http://127.0.0.1:$D_PORT
        primary=$(pgha_member leader) || fail "no primary to kill"
        if [[ -n $primary ]] && under_load "$sku" "$url"; then
            pgha_kill "$primary"
            after_fault "$url" "$sku" "$(now)" "the primary's machine was killed"
            pgha_report_leader
        fi
    fi
    ha_down
}

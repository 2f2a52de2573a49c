# shellcheck shell=bash
# Scenario 25 of scripts/faults.sh, which sources it: 25 is its place in a
# run and its SKUs' base (2501 up).
#
#   pg-switchover        PostgreSQL under Patroni: a planned switchover (patronictl) under load

# No HEAL_BOUND: as pg-primary-kill's (pgha_heal_bound), though a planned
# switchover should take a few seconds.

# The operator moves the primary during a sale (maintenance of its machine):
# Patroni stops the primary cleanly, promotes the synchronous standby, and
# the old primary follows it; the daemons' connections to the old one end
# and are replaced, a cut COMMIT is settled on the new primary.
scenario_pg_switchover() {
    local sku=$1 primary standby out
    if pgha_up && start_daemon d1; then
        local url=http://127.0.0.1:$D_PORT
        primary=$(pgha_member leader) || fail "no primary"
        standby=$(pgha_wait_member sync_standby 30) || fail "no synchronous standby"
        if [[ -n $primary && -n $standby ]] && under_load "$sku" "$url"; then
            note "switchover from ${primary##*/} to ${standby##*/}"
            local t0
            t0=$(now)
            out=$(timeout 60 patronictl -c "$HA_DIR/patronictl.yml" switchover \
                --leader "pg-${primary##*/patroni-}" --candidate "pg-${standby##*/patroni-}" \
                --force 2>&1) || fail "patronictl switchover: $out"
            after_fault "$url" "$sku" "$t0" "the switchover was asked"
            pgha_report_leader
        fi
    fi
    ha_down
}

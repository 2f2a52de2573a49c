# shellcheck shell=bash
# Scenario 23 of scripts/faults.sh, which sources it: 23 is its place in a
# run and its SKUs' base (2301 up).
#
#   pg-primary-freeze    PostgreSQL under Patroni: the primary's Patroni and PostgreSQL
#                        SIGSTOPped past Patroni's ttl, then SIGCONT

# No HEAL_BOUND: as pg-primary-kill's (pgha_heal_bound).

# A primary that stops answering without dying (a stalled disk, a paused
# VM): past the ttl the standby is promoted and sales go on there; when the
# old primary wakes, its Patroni finds another leader and demotes it (its
# PostgreSQL is stopped and rewound, never a second primary), and connections
# the daemons held to it fail and are replaced.  Frozen for PG_FREEZE_PAST_TTL_S
# beyond the ttl.
PG_FREEZE_PAST_TTL_S=4

# Found a real split-brain once: Debian 12's Patroni 3.0.2 on etcd's v3 API
# wrote the leader key again when the frozen leader woke (patroni#2689); the
# stack runs Patroni on etcd's v2 API since (scripts/stack/patroni.sh).
scenario_pg_primary_freeze() {
    local sku=$1 primary t0 ttl
    if pgha_up && start_daemon d1; then
        local url=http://127.0.0.1:$D_PORT
        primary=$(pgha_member leader) || fail "no primary to freeze"
        if [[ -n $primary ]] && under_load "$sku" "$url"; then
            pgha_freeze "$primary"
            t0=$(now)
            heal "$url" $((sku + 1)) "$t0" "the primary froze"
            ttl=$((HEAL_BOUND[$SCEN] - PGHA_HEAL_EXTRA_S))
            while ! le $((ttl + PG_FREEZE_PAST_TTL_S)) "$(since "$t0")"; do sleep 0.2; done
            thaw
            note "the old primary ${primary##*/} woke $(since "$t0")s after the freeze"
            # its Patroni demotes it (a shutdown, a rewind): judged once it
            # is a standby or down, from the one primary
            pgha_no_second_primary "$primary"
            load_wait
            judge "$sku"
            sales_continue "$url" "$sku"
            pgha_report_leader
        fi
    fi
    ha_down
}

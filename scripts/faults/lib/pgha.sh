# shellcheck shell=bash
# Sourced by scripts/faults.sh: the PostgreSQL scenarios' stack of their own
# (scripts/stack/patroni.sh's topology: one etcd member, a primary and a
# synchronous standby under Patroni), and the faults they inject into one of
# its members.  A member is its directory, HA_DIR/patroni-N.

# pgha_up: the Patroni stack of this scenario (Redis single), migrated, its
# settings in force; its heal bound from Patroni's own timings.  ha_down
# stops it.
pgha_up() {
    SECKILL_PG_TOPOLOGY=ha ha_up single || return 1
    pgha_heal_bound
}

# pgha_api_port MEMBER, pgha_pg_port MEMBER: from the member's ports file
# ("PG API").
pgha_pg_port() { awk '{ print $1; exit }' "$1/ports" 2>/dev/null; }
pgha_api_port() { awk '{ print $2; exit }' "$1/ports" 2>/dev/null; }

# pgha_cluster: Patroni's GET /cluster (JSON) from the first member that
# answers; fails when none does.
pgha_cluster() {
    local m out
    for m in "$HA_DIR"/patroni-*; do
        out=$(curl -sS --max-time 2 "http://127.0.0.1:$(pgha_api_port "$m")/cluster" 2>/dev/null) ||
            continue
        [[ $out == \{* ]] || continue
        printf '%s\n' "$out"
        return 0
    done
    return 1
}

# pgha_member ROLE: the directory of the running member Patroni gives ROLE
# (leader, sync_standby); fails when there is none.
pgha_member() {
    local port m
    port=$(pgha_cluster | jq -r --arg r "$1" \
        '.members[] | select(.role == $r and (.state == "running" or .state == "streaming")) | .port' |
        head -n1) && [[ -n $port ]] || return 1
    for m in "$HA_DIR"/patroni-*; do
        [[ $(pgha_pg_port "$m") == "$port" ]] && printf '%s\n' "$m" && return 0
    done
    return 1
}

# pgha_wait_member ROLE SECONDS: waits until a member has ROLE; prints it.
pgha_wait_member() {
    local t0 m
    t0=$(now)
    until m=$(pgha_member "$1"); do
        le "$(since "$t0")" "$2" || return 1
        sleep 0.2
    done
    printf '%s\n' "$m"
}

# pgha_pids MEMBER: Patroni's pid, then the postmaster's and its children's
# (a member's whole machine).
pgha_pids() {
    local pt pm
    pt=$(tr -dc '0-9' <"$1/patroni.pid" 2>/dev/null) || pt=
    pm=$(head -n1 "$1/data/postmaster.pid" 2>/dev/null | tr -dc '0-9') || pm=
    [[ -n $pt ]] && printf '%s\n' "$pt"
    if [[ -n $pm ]]; then
        printf '%s\n' "$pm"
        ps -o pid= --ppid "$pm" | tr -d ' '
    fi
}

# pgha_kill MEMBER: kill -9 of the member's Patroni and PostgreSQL at once,
# as when its machine dies (PostgreSQL alone killed would be restarted by
# its own Patroni, still the leader).
pgha_kill() {
    local -a pids
    mapfile -t pids < <(pgha_pids "$1")
    ((${#pids[@]} >= 2)) || {
        fail "no Patroni and postmaster pids for ${1##*/}"
        return 1
    }
    kill -KILL "${pids[@]}" 2>/dev/null || true
    note "kill -9 of ${1##*/} (Patroni and PostgreSQL, ${#pids[@]} processes)"
}

# pgha_freeze MEMBER: SIGSTOP of the member's Patroni and PostgreSQL (the
# postmaster first, so that it forks no child we would miss); thaw ends it.
pgha_freeze() {
    local pm
    pm=$(head -n1 "$1/data/postmaster.pid" 2>/dev/null | tr -dc '0-9') || pm=
    [[ -n $pm ]] || {
        fail "no postmaster pid for ${1##*/}"
        return 1
    }
    freeze "$pm"
    local -a pids
    mapfile -t pids < <(pgha_pids "$1")
    freeze "${pids[@]}"
    note "${1##*/} frozen (Patroni, the postmaster and its children)"
}

# pgha_heal_bound: the heal bound of the scenario that loses the primary:
# Patroni's ttl and loop_wait (asked of the cluster's dynamic configuration)
# plus PGHA_HEAL_EXTRA_S: the leader key expires, the standby takes it at its
# next loop, the daemons' connections find it.
PGHA_HEAL_EXTRA_S=8
pgha_heal_bound() {
    local m conf ttl loop
    m=$(pgha_member leader) || {
        fail "no Patroni leader in the stack"
        return 1
    }
    conf=$(curl -sS --max-time 2 "http://127.0.0.1:$(pgha_api_port "$m")/config" 2>/dev/null) || conf=
    ttl=$(jq -r '.ttl // empty' <<<"$conf" 2>/dev/null) || ttl=
    loop=$(jq -r '.loop_wait // empty' <<<"$conf" 2>/dev/null) || loop=
    [[ $ttl =~ ^[0-9]+$ && $loop =~ ^[0-9]+$ ]] || {
        fail "Patroni's /config told no ttl and loop_wait"
        return 1
    }
    HEAL_BOUND[$SCEN]=$((ttl + loop + PGHA_HEAL_EXTRA_S))
    note "heal bound ${HEAL_BOUND[$SCEN]}s: Patroni's ttl ${ttl}s + loop_wait ${loop}s (asked) + ${PGHA_HEAL_EXTRA_S}s"
}

# pgha_report_leader: notes which member leads now, and whether a
# synchronous standby is back.
pgha_report_leader() {
    local out
    out=$(pgha_cluster | jq -r '[.members[] | "\(.name) \(.role) \(.state)"] | join(", ")' 2>/dev/null) ||
        out="no member answered"
    note "Patroni now: $out"
}

# pgha_no_second_primary MEMBER: MEMBER (the old primary, awake again) must
# not accept writes: within PGHA_DEMOTE_WAIT_S it is a standby or stopped.
PGHA_DEMOTE_WAIT_S=30
pgha_no_second_primary() {
    local m=$1 t0 port ro
    port=$(pgha_pg_port "$m")
    t0=$(now)
    while :; do
        # the service's DSN, pinned to that one server (a later keyword wins)
        ro=$(timeout 5 psql "$SECKILL_PG_DSN host=127.0.0.1 port=$port target_session_attrs=any connect_timeout=2" \
            -XAtq -c 'SELECT pg_is_in_recovery()' 2>/dev/null) || ro=down
        [[ $ro == t || $ro == down ]] && break
        le "$(since "$t0")" "$PGHA_DEMOTE_WAIT_S" || {
            fail "the old primary ${m##*/} still takes writes $(since "$t0")s after it woke"
            return 1
        }
        sleep 0.5
    done
    note "the old primary ${m##*/} is $([[ $ro == t ]] && echo 'a standby' || echo 'down') $(since "$t0")s after it woke"
}

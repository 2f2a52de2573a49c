# shellcheck shell=bash
# Scenario 18 of scripts/faults.sh, which sources it: 18 is its place in a
# run and its SKUs' base (1801 up).
#
#   cluster-reshard      Redis Cluster: the SKU's slot migrated to another master with
#                        redis-cli --cluster reshard during the sale, a probe SKU in the
#                        same slot ordered from all along: the longest gap between
#                        decided answers is measured and bounded

# Not a heal but the longest time without a decided answer to the probes
# while the SKU's slot migrates.  While the slot's keys move, scripts wait
# out TRYAGAIN and lock calls follow ASK and MOVED (0.2-1.2 s measured); the
# bound allows a durable order that waits its whole order_ack_wait_ms for a
# writer the move slowed and is answered 202 (as before those were followed,
# when a writer's lock release failed mid-move and lived out lock_ttl_ms):
# order_ack_wait_ms + RESHARD_GAP_EXTRA_S.
RESHARD_GAP_EXTRA_S=2
HEAL_BOUND[cluster-reshard]=$(awk -v w="$SECKILL_ORDER_ACK_WAIT_MS" -v x="$RESHARD_GAP_EXTRA_S" \
    'BEGIN { print w / 1000 + x }')

RESHARD_TIMEOUT_S=120  # redis-cli --cluster reshard (a few hundred slots)
# cluster-reshard moves the slots of the SKU's master from the first up to
# the SKU's: the SKU is picked (among RESHARD_CANDIDATES ids from the
# scenario's base) so that these are RESHARD_SLOTS_MIN..RESHARD_SLOTS_MAX
# slots, the SKU's the last: enough moves before it that the probes run
# across a reshard, few enough (empty slots move in milliseconds) that the
# SKU's slot moves while the load runs; and so that another id of the
# candidates, the probe SKU, hashes to the same slot.
RESHARD_SLOTS_MIN=64
RESHARD_SLOTS_MAX=512
RESHARD_CANDIDATES=8000
RESHARD_PROBE_EVERY_S=0.02 # its probes: the gap's resolution is about one probe

# reshard_pick BASE: in the cluster of HA_DIR, the SKU of cluster-reshard
# and its probe SKU, both in one slot that is the RESHARD_SLOTS_MIN-th to
# RESHARD_SLOTS_MAX-th lowest of its master's (redis-cli --cluster reshard
# takes a node's slots from its lowest), from the ids BASE..
# BASE+RESHARD_CANDIDATES-1 (their slots asked of the cluster in one
# redis-cli run).  Prints "SKU PROBE_SKU SLOT N FIRST": N slots of the
# master, from its lowest FIRST, move up to and including SLOT.
reshard_pick() {
    local port nodes
    port=$(se_redis_master_port "$HA_DIR" "") && [[ -n $port ]] || return 1
    nodes=$(cluster_admin CLUSTER NODES 2>/dev/null | tr -d '\r') || return 1
    seq "$1" $(($1 + RESHARD_CANDIDATES - 1)) |
        awk '{ printf "CLUSTER KEYSLOT seckill:{sku:%s}:stock\n", $1 }' |
        se_redis_admin "$HA_DIR" "$port" 2>/dev/null | tr -dc '0-9\n' |
        awk -v base="$1" -v lo="$RESHARD_SLOTS_MIN" -v hi="$RESHARD_SLOTS_MAX" -v nodes="$nodes" '
            BEGIN { # every slot: its rank among those of its master, and their lowest
                n = split(nodes, line, "\n")
                for (l = 1; l <= n; l++) {
                    k = split(line[l], f, " ")
                    if (f[3] !~ /master/ || f[3] ~ /fail/) continue
                    c = 0; lowest = -1
                    for (i = 9; i <= k; i++) { # the ranges, in ascending order
                        if (f[i] ~ /^\[/) continue
                        m = split(f[i], r, "-"); if (m == 1) r[2] = r[1]
                        if (lowest < 0) lowest = r[1] + 0
                        for (s = r[1] + 0; s <= r[2] + 0; s++) { rank[s] = ++c; first[s] = lowest }
                    }
                }
            }
            $0 != "" { id[NR] = base + NR - 1; slot[NR] = $0 + 0; count[$0 + 0]++ }
            END {
                for (i = 1; i <= NR; i++) {
                    s = slot[i]
                    if (!(s in rank) || count[s] < 2 || rank[s] < lo || rank[s] > hi) continue
                    for (j = i + 1; j <= NR; j++)
                        if (slot[j] == s) { print id[i], id[j], s, rank[s], first[s]; exit }
                }
            }'
}

# decided CODE: an answer that settles the order one way or the other (the
# probe SKU never sells out: 201 or 202).
decided() { [[ $1 == 201 || $1 == 202 ]]; }

# probe_decided URL SKU: probes until one is decided, at most DECIDED_TRIES.
DECIDED_TRIES=20
probe_decided() {
    local i
    for ((i = 0; i < DECIDED_TRIES; i++)); do
        decided "$(probe "$1" "$2" | cut -d' ' -f1)" && return 0
        sleep "$PROBE_EVERY_S"
    done
    return 1
}

# A slot migrated mid-sale with redis-cli --cluster reshard: every slot of
# the SKU's master up to and including the SKU's moves to another master
# (the stream, the hashes, the lock keys and the buyers' keys with it),
# while orders come.  The probe SKU hashes to the SKU's slot and is ordered
# from without pause, from before the reshard until a decided answer after
# it: the longest time between two decided answers (the gap buyers of a
# migrating slot see) is printed and bounded.  The reshard must end while
# the load runs, the slot must be on the other master afterwards, and the
# load's answers hold (MOVED, ASK and TRYAGAIN followed; nothing lost or
# sold twice).
scenario_cluster_reshard() {
    local sku=$1 psku url slot first port id to_port to_id n pw t0 ts t tend='' out code
    local last=0 gap=0 gap_at=0 slow=0 probes=0 ndec=0 bound=${HEAL_BOUND[$SCEN]} rs_st=0
    if ! ha_up cluster; then
        ha_down
        return
    fi
    read -r sku psku slot n first < <(reshard_pick "$sku") || true
    if [[ -z $psku ]]; then
        fail "no SKU and probe SKU sharing a slot $RESHARD_SLOTS_MIN..$RESHARD_SLOTS_MAX into its master's range among $RESHARD_CANDIDATES ids"
        ha_down
        return
    fi
    note "SKU $sku and probe SKU $psku both in slot $slot, the $n-th lowest of its master's (from $first)"
    if start_daemon d1; then
        url=http://127.0.0.1:$D_PORT
        if create_sku "$url" "$psku" "$PROBE_STOCK" "$PROBE_LIMIT"; then
            load_start "$sku" "$url"
            sleep "$FAULT_AT_S"
            read -r port id < <(cluster_slot_owner "$slot") || true
            read -r to_port to_id < <(cluster_admin CLUSTER NODES 2>/dev/null | tr -d '\r' |
                awk -v me="$id" '$3 ~ /master/ && $3 !~ /fail/ && $1 != me && NF >= 9 {
                    split($2, a, "[:@]"); print a[2], $1; exit }') || true
            if [[ -z $id || -z $to_id ]]; then
                fail "cannot tell the SKU's master or another master (slot $slot)"
            elif ! probe_decided "$url" "$psku"; then
                fail "the probe SKU $psku took no order in $DECIDED_TRIES tries before the reshard"
            else
                pw=$(tr -dc '0-9a-f' <"$HA_DIR/redis-admin-password")
                note "resharding the $n lowest slots of the SKU's master ($first..$slot) from port $port to port $to_port under load, probing SKU $psku throughout"
                t0=$(now)
                REDISCLI_AUTH=$pw timeout "$RESHARD_TIMEOUT_S" redis-cli --user seckill-admin \
                    --cluster reshard "127.0.0.1:$port" --cluster-from "$id" --cluster-to "$to_id" \
                    --cluster-slots "$n" --cluster-yes </dev/null >"$SDIR/reshard.log" 2>&1 &
                RESHARD_PID=$!
                # Bounded: the reshard ends within its timeout; then until a
                # decided answer, or the bound without one.
                while :; do
                    ts=$(since "$t0")
                    out=$(probe "$url" "$psku")
                    t=$(since "$t0")
                    code=${out%% *}
                    probes=$((probes + 1))
                    printf '%s %s %s\n' "$t" "$out" "$ts" >>"$SDIR/probes"
                    if decided "$code"; then
                        ndec=$((ndec + 1))
                        le "$(awk -v a="$t" -v b="$ts" 'BEGIN { print a - b }')" "$slow" ||
                            slow=$(awk -v a="$t" -v b="$ts" 'BEGIN { printf "%.2f", a - b }')
                        if ! le "$(awk -v a="$t" -v b="$last" 'BEGIN { print a - b }')" "$gap"; then
                            gap=$(awk -v a="$t" -v b="$last" 'BEGIN { printf "%.2f", a - b }') gap_at=$last
                        fi
                        last=$t
                        [[ -n $tend ]] && break
                    fi
                    if [[ -z $tend ]] && ! kill -0 "$RESHARD_PID" 2>/dev/null; then
                        tend=$t
                        wait "$RESHARD_PID" || rs_st=$?
                        RESHARD_PID=
                    fi
                    if [[ -n $tend ]] && ! le "$(awk -v a="$t" -v b="$last" 'BEGIN { print a - b }')" "$bound"; then
                        gap=$(awk -v a="$t" -v b="$last" 'BEGIN { printf "%.2f", a - b }') gap_at=$last
                        break
                    fi
                    sleep "$RESHARD_PROBE_EVERY_S"
                done
                ((rs_st == 0)) || fail "redis-cli --cluster reshard exited $rs_st ($SDIR/reshard.log)"
                note "resharded in ${tend}s; $probes probes of SKU $psku (one every $(awk -v t="$t" -v n="$probes" 'BEGIN { printf "%.2f", t / n }')s), $ndec decided, the others: $(awk '$2 != 201 && $2 != 202 { c[$2]++; n++ } END { for (k in c) printf "%s x%d ", k, c[k]; if (!n) print "none" }' "$SDIR/probes")"
                HEAL_S=$gap
                note "longest gap between decided answers to the probe SKU in the migrating slot: ${gap}s, from ${gap_at}s into the reshard (bound ${bound}s); the slowest decided answer took ${slow}s"
                le "$gap" "$bound" ||
                    fail "the probe SKU in the migrating slot went ${gap}s without a decided answer (bound ${bound}s; probes in $SDIR/probes)"
                le "$(awk -v a="$t0" -v b="$LOAD_T0" -v e="$tend" 'BEGIN { print a - b + e }')" "$LOAD_S" ||
                    fail "the reshard ended after the load: the SKU's slot did not move under load"
            fi
            load_wait
            judge "$sku"
            sales_continue "$url" "$sku"
            read -r port _ < <(cluster_slot_owner "$slot") || true
            [[ $port == "$to_port" ]] ||
                fail "slot $slot is served by port ${port:-?}, not $to_port, after the reshard"
        fi
    fi
    ha_down
}

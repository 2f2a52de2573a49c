# shellcheck shell=bash
# Scenario 20 of scripts/faults.sh, which sources it: 20 is its place in a
# run and its SKUs' base (2001 up).
#
#   transfer-crash       a daemon dies in a move between stock buckets, after Redis took
#                        the units from one bucket and before they reached the other

HEAL_BOUND[transfer-crash]=15
# order_as URL SKU USER: one order of one unit by USER; prints the status.
order_as() {
    "$BUILD_DIR/seckillctl" token --user "$3" | sed 's/^/Authorization: Bearer /' |
        curl -s -o /dev/null --max-time 5 -w '%{http_code}' -H @- \
            -H 'Content-Type: application/json' -d '{"qty":1}' \
            "$1/api/v1/skus/$2/orders" 2>/dev/null || true
}

# A SKU of 4 units in two stock buckets; the buyers of bucket 0 (even user
# ids) take its 2, and the third needs a move from bucket 1: the daemon
# (SECKILL_FAULT=adjust_moves_half_done) dies after Redis took the unit from
# bucket 1 and before bucket 0 got it, its transaction never committed.
# Bucket 1 is short in Redis until a normal daemon settles the move's record
# (aborted: given back); then every bucket agrees with PostgreSQL again and
# the units are all there.
scenario_transfer_crash() {
    local sku=$1 t0 out st=0 i b ids=() code
    SECKILL_FAULT=adjust_moves_half_done start_daemon d-fault || return
    local fpid=$D_PID url=http://127.0.0.1:$D_PORT
    out=$(admin POST "$url/admin/v1/skus" \
        "{\"id\":$sku,\"name\":\"faults $SCEN\",\"stock\":4,\"per_user_limit\":1,\"buckets\":2}")
    [[ ${out##*$'\n'} == 201 ]] || {
        fail "creating SKU $sku in buckets answered ${out//$'\n'/ }"
        return
    }
    mapfile -t ids < <(printf '%s\n' "${out%$'\n'*}" | jq -r '.bucket_skus[]')
    ((${#ids[@]} == 2)) || {
        fail "the create named ${#ids[@]} buckets, not 2"
        return
    }
    for i in 2 4 6; do
        code=$(order_as "$url" "$sku" "$i")
        note "buyer $i of bucket 0: $code"
    done
    died_at "$fpid" adjust_moves_half_done "the daemon lives" 100 || return
    note "the daemon died in the move (exit status $DIED_STATUS)"
    check "${ids[1]}" crashed || st=$?
    if ((st == 1)); then
        note "before healing, bucket 1: $(jq -r '.invariants.checks[] | select(.key == "i2_stock") | .detail' "$SDIR/crashed.check.json")"
    else
        fail "before healing the check of bucket 1 exited $st: the unit was not taken in Redis?"
    fi
    t0=$(now)
    start_daemon d-normal || return
    url=http://127.0.0.1:$D_PORT
    for b in "${ids[@]}"; do
        while ! check "$b" "healed-$b"; do
            le "$(since "$t0")" "${HEAL_BOUND[$SCEN]}" || {
                fail "bucket SKU $b did not agree with PostgreSQL within ${HEAL_BOUND[$SCEN]}s"
                return
            }
            sleep 0.5
        done
    done
    HEAL_S=$(since "$t0")
    note "both buckets agree with PostgreSQL ${HEAL_S}s after a normal daemon started (bound ${HEAL_BOUND[$SCEN]}s)"
    # the third buyer can buy now: the move runs again, whole this time
    code=$(order_as "$url" "$sku" 8)
    [[ $code == "$OK_CODE" ]] || fail "a buyer of bucket 0 after healing was answered $code, not $OK_CODE"
    for b in "${ids[@]}"; do
        check "$b" "after-$b" || fail "bucket SKU $b after the move: check-only exit $?"
    done
    note "after healing a buyer of the empty bucket got a unit moved from the other: $code"
}

# shellcheck shell=bash
# Scenario 12 of scripts/faults.sh, which sources it: 12 is its place in a
# run and its SKUs' base (1201 up).
#
#   expiry-crash         a daemon dies in an expiry sweep, after its COMMIT and before
#                        Redis got the expired orders' units back

HEAL_BOUND[expiry-crash]=15

# A sale whose buyers never pay: the daemon's sweeper expires their orders
# and dies (SECKILL_FAULT=release_before_redis) after the transaction that
# put the units back in skus.stock, before order_release.lua gave them to
# Redis.  A normal daemon must finish the return, once: Redis agrees with
# PostgreSQL again, every order expired and gave its units back exactly
# once (the check's ledger and lifecycle items), nobody's units are held.
scenario_expiry_crash() {
    local sku=$1 t0 out st=0 i
    SECKILL_FAULT=release_before_redis SECKILL_EXPIRY_SWEEP_INTERVAL_MS=200 \
        start_daemon d-fault || return
    local fpid=$D_PID url=http://127.0.0.1:$D_PORT
    out=$(admin POST "$url/admin/v1/skus" \
        "{\"id\":$sku,\"name\":\"faults $SCEN $sku\",\"stock\":1000,\"per_user_limit\":5,\"payment_window_s\":2}")
    [[ ${out##*$'\n'} == 201 ]] || {
        fail "creating SKU $sku answered ${out//$'\n'/ }"
        return
    }
    "$LOADTEST" --load-only --url "$url" --admin-url "$(internal_url "$url")" --sku "$sku" --limit 5 --qty 1:80,2:20 \
        --users 100000 --requests 300 --concurrency 8 --duration 10 \
        --timeout-ms "$REQUEST_TIMEOUT_MS" --seed "$SEED" --label "$SCEN" \
        --answers "$SDIR/load.answers" --json "$SDIR/load.json" \
        </dev/null >"$SDIR/load.log" 2>&1 || st=$?
    if ((st != 0)); then
        fail "the load exited $st (log $SDIR/load.log)"
        return
    fi
    note "load: $(jq -r '.run.answers | to_entries | map(select(.value > 0) | "\(.key) \(.value)") | join(", ")' "$SDIR/load.json")"
    # the window (2 s) and a sweep later, the fault point ends the daemon
    died_at "$fpid" release_before_redis "no expiry sweep killed the daemon" 150 || return
    note "the daemon died in its expiry sweep (exit status $DIED_STATUS), its units back in PostgreSQL only"
    st=0
    check "$sku" crashed --answers "$SDIR/load.answers" || st=$?
    if ((st == 1)) && [[ $(jq -r '.invariants.checks[] | select(.key == "i2_stock") | .state' "$SDIR/crashed.check.json") == FAIL ]]; then
        note "before healing: $(jq -r '.invariants.checks[] | select(.key == "i2_stock") | .detail' "$SDIR/crashed.check.json")"
    else
        note "before healing the check exited $st (Redis already agreed?)"
    fi
    t0=$(now)
    SECKILL_EXPIRY_SWEEP_INTERVAL_MS=200 start_daemon d-normal || return
    local nport=$D_PORT
    while :; do
        check "$sku" healed --answers "$SDIR/load.answers" && break
        le "$(since "$t0")" "${HEAL_BOUND[$SCEN]}" || {
            fail "the expired orders' units did not reach Redis within ${HEAL_BOUND[$SCEN]}s (see $SDIR/healed.check)"
            return
        }
        sleep 0.5
    done
    HEAL_S=$(since "$t0")
    out=$(curl -s --max-time 5 "$(internal_url "http://127.0.0.1:$nport")/metrics" |
        awk '/^seckill_(returns_settled_late_total|sku_reloads_total) / { printf "%s %s; ", $1, $2 }')
    note "healed ${HEAL_S}s after a normal daemon started (bound ${HEAL_BOUND[$SCEN]}s): $(jq -r '.invariants.checks[] | select(.key == "i2_stock") | .detail' "$SDIR/healed.check.json"); ${out:-no metrics}"
}

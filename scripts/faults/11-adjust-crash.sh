# shellcheck shell=bash
# Scenario 11 of scripts/faults.sh, which sources it: 11 is its place in a
# run and its SKUs' base (1101 up).
#
#   adjust-crash         a daemon dies between the Redis step and COMMIT of a delta

HEAL_BOUND[adjust-crash]=15

scenario_adjust_crash() {
    local sku=$1 t0 out st=0 i
    SECKILL_FAULT=adjust_after_redis start_daemon d-fault || return
    local fpid=$D_PID url=http://127.0.0.1:$D_PORT
    create_sku "$url" "$sku" 100 1 || return
    out=$(admin POST "$url/admin/v1/skus/$sku/stock-adjustments" '{"delta":10,"reason":"faults"}')
    died_at "$fpid" adjust_after_redis "the delta answered ${out##*$'\n'} and the daemon lives" 100 ||
        return
    note "the daemon died in the delta (exit status $DIED_STATUS), answer ${out##*$'\n'}"
    # Redis took the delta, PostgreSQL did not: the check must see it.
    check "$sku" crashed && st=0 || st=$?
    if ((st == 1)) && [[ $(jq -r '.invariants.checks[] | select(.key == "i2_stock") | .state' "$SDIR/crashed.check.json") == FAIL ]]; then
        note "before healing: $(jq -r '.invariants.checks[] | select(.key == "i2_stock") | .detail' "$SDIR/crashed.check.json")"
    else
        note "before healing the check exited $st (Redis already agreed: nothing to settle?)"
    fi
    t0=$(now)
    start_daemon d-normal || return
    while :; do
        check "$sku" healed && break
        le "$(since "$t0")" "${HEAL_BOUND[$SCEN]}" || {
            fail "Redis stock did not come back to skus.stock within ${HEAL_BOUND[$SCEN]}s (reconcile_interval_ms $SECKILL_RECONCILE_INTERVAL_MS)"
            return
        }
        sleep 0.5
    done
    HEAL_S=$(since "$t0")
    note "Redis agrees with skus.stock ${HEAL_S}s after a normal daemon started (bound ${HEAL_BOUND[$SCEN]}s): $(jq -r '.invariants.checks[] | select(.key == "i2_stock") | .detail' "$SDIR/healed.check.json")"
}

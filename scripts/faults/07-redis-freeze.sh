# shellcheck shell=bash
# Scenario 7 of scripts/faults.sh, which sources it: 7 is its place in a
# run and its SKUs' base (701 up).
#
#   redis-freeze         Redis SIGSTOPped longer than redis_timeout_ms, SIGCONT

HEAL_BOUND[redis-freeze]=15

scenario_redis_freeze() {
    local sku=$1
    start_daemon d1 || return
    local url=http://127.0.0.1:$D_PORT
    under_load "$sku" "$url" || return
    freeze "$(redis_pid)"
    note "Redis frozen for ${FREEZE_S}s (redis_timeout_ms $SECKILL_REDIS_TIMEOUT_MS)"
    sleep "$FREEZE_S"
    thaw
    # The check proves the plain 503s took nothing: no row without an answer
    # beyond the requests of open outcome (none, or a 503 naming its key).
    after_fault "$url" "$sku" "$(now)" "SIGCONT"
    (($(answers unavailable) + $(answers uncertain) > 0)) ||
        fail "no buyer got a 503 while Redis was frozen: the fault was not felt"
}

# shellcheck shell=bash
# Scenario 3 of scripts/faults.sh, which sources it: 3 is its place in a
# run and its SKUs' base (301 up).
#
#   redis-restart-empty  kill -9 of Redis, restarted without its data

HEAL_BOUND[redis-restart-empty]=30

scenario_redis_restart_empty() {
    local sku=$1 bad
    start_daemon d1 || return
    local url=http://127.0.0.1:$D_PORT
    under_load "$sku" "$url" || return
    note "kill -9 of Redis; restarted without its AOF and RDB"
    down_and_back "$(redis_pid)" KILL Redis wipe_redis_data || return
    after_fault "$url" "$sku" "$(now)" "Redis answered again"
    # Until it is reloaded a SKU is unknown to Redis: 503 with Retry-After,
    # never sold out, unknown or unlimited.
    bad=$(awk -v ok="$OK_CODE" '$2 != ok && !($2 == 503 && $3 > 0)' "$SDIR/probes")
    [[ -z $bad ]] || fail "while reloading, buyers got other than 503 with Retry-After: $(head -n 3 <<<"$bad" | tr '\n' ';')"
    note "probes before the reload: $(awk -v ok="$OK_CODE" '$2 != ok' "$SDIR/probes" | wc -l) answered 503 with Retry-After"
}

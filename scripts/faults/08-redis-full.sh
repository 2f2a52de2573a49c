# shellcheck shell=bash
# Scenario 8 of scripts/faults.sh, which sources it: 8 is its place in a
# run and its SKUs' base (801 up).
#
#   redis-full           Redis's maxmemory lowered to what it holds under load (it is
#                        full: noeviction refuses every write that needs memory), then
#                        raised back: 503 store_full meanwhile, nothing taken, no order lost

HEAL_BOUND[redis-full]=10
FULL_S=4               # redis-full: Redis stays at its bound this long
FULL_BELOW_BYTES=262144 # ... set this far below what it holds: the writers' trims free less

# redis_info_field NAME: a field of the stack's Redis INFO.
redis_info_field() {
    se_redis_admin "$STACK_DIR" "$SE_REDIS_PORT" INFO memory | tr -d '\r' |
        awk -F: -v k="$1" '$1 == k { print $2; exit }'
}

# Redis full under load: maxmemory below what it holds (noeviction: every write that needs memory is refused,
# reads and deletions go on).  Buyers get 503 store_full, nothing taken; the
# writers' settle scripts are refused too and retry, losing no order; once
# the bound is back, sales resume by themselves.
scenario_redis_full() {
    local sku=$1 old used body code t0
    start_daemon d1 || return
    local url=http://127.0.0.1:$D_PORT
    under_load "$sku" "$url" || return
    old=$(se_redis_admin "$STACK_DIR" "$SE_REDIS_PORT" CONFIG GET maxmemory | sed -n 2p)
    used=$(redis_info_field used_memory)
    se_redis_admin "$STACK_DIR" "$SE_REDIS_PORT" CONFIG SET maxmemory $((used - FULL_BELOW_BYTES)) >/dev/null
    note "Redis full: maxmemory $old lowered to $((used - FULL_BELOW_BYTES)), below the $used bytes it held, for ${FULL_S}s"
    sleep 1
    body=$("$BUILD_DIR/seckillctl" token --user $((AFTER_USER_BASE - 1)) |
        sed 's/^/Authorization: Bearer /' |
        curl -s -D "$SDIR/full.headers" --max-time 5 -w '\n%{http_code}' -H @- \
            -H 'Content-Type: application/json' -d '{"qty":1}' \
            "$url/api/v1/skus/$((sku + 1))/orders" 2>/dev/null) || true
    sleep $((FULL_S - 1))
    # back before any check below can return: later scenarios share this Redis
    se_redis_admin "$STACK_DIR" "$SE_REDIS_PORT" CONFIG SET maxmemory "$old" >/dev/null ||
        fail "could not set maxmemory back to $old"
    t0=$(now)
    code=${body##*$'\n'}
    body=$(tr -d '\n' <<<"${body%$'\n'*}")
    note "an order while full: $code $body"
    [[ $code == 503 && $(jq -r .error <<<"$body" 2>/dev/null) == store_full ]] ||
        fail "an order while Redis was full answered $code $body, not 503 store_full"
    grep -qi '^retry-after:' "$SDIR/full.headers" || fail "the 503 store_full came without Retry-After"
    # The check proves the 503s took nothing and every order answered is written.
    after_fault "$url" "$sku" "$t0" "maxmemory was set back"
    (($(answers unavailable) > 0)) || fail "no buyer got a 503 while Redis was full: the fault was not felt"
}

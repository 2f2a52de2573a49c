# shellcheck shell=bash
# Scenario 19 of scripts/faults.sh, which sources it: 19 is its place in a
# run and its SKUs' base (1901 up).
#
#   cluster-buckets      Redis Cluster: one SKU in three stock buckets, one per master,
#                        moves between them; kill -9 of one bucket's master mid-sale

# cluster-node-timeout (1 s) and the replica's election, plus the issue's 5 s
HEAL_BOUND[cluster-buckets]=10

# One SKU in three stock buckets, one on each master, sold by a whole
# seckill-loadtest run (--buckets 3: its own drain and check of every bucket
# at the end), the buyers of one bucket refilled from the others as it
# empties.  kill -9 of the master that holds the probes' SKU and one of the
# buckets, mid-sale: its replica is promoted; meanwhile that bucket's buyers
# get 503, a bucket that cannot be read never lets the SKU be called sold
# out, and the others sell on.  Then sales go on in every bucket.
scenario_cluster_buckets() {
    local sku=$1 url slot port pid
    if ha_up cluster && start_daemon d1; then
        url=http://127.0.0.1:$D_PORT
        if create_sku "$url" $((sku + 1)) "$PROBE_STOCK" "$PROBE_LIMIT"; then
            "$LOADTEST" --url "$url" --admin-url "$(internal_url "$url")" --sku "$sku" --create-sku --buckets 3 \
                --stock "$PROBE_STOCK" --limit 5 --qty 1:80,2:20 --users 100000000 \
                --requests 100000000 --retry-share 0.1 --concurrency "$CONCURRENCY" \
                --duration "$LOAD_S" --timeout-ms "$REQUEST_TIMEOUT_MS" \
                --drain-timeout "$DRAIN_TIMEOUT_S" --seed "$SEED" \
                --label "$SCEN" --json "$SDIR/load.json" </dev/null >"$SDIR/load.log" 2>&1 &
            LOAD_PID=$!
            sleep "$FAULT_AT_S"
            slot=$(sku_slot $((sku + 1)))
            read -r port _ < <(cluster_slot_owner "$slot") || true
            pid=$(cluster_node_pid "${port:-0}") || pid=
            if [[ -z $pid ]]; then
                fail "no master found for slot ${slot:-?}"
            else
                note "kill -9 of the master of slot $slot (port $port, pid $pid), which holds a bucket"
                kill -KILL "$pid"
                heal "$url" $((sku + 1)) "$(now)" "a bucket's master was killed"
                # the run's exit is its check: every bucket, the transfers summing to 0
                if load_wait; then
                    note "check: $(jq -r '.invariants.facts | "\(.run_orders) orders, \(.run_units_sold) units sold in 3 buckets; lost 202s \(.answered.lost_202)"' "$SDIR/load.json")"
                fi
                sales_continue "$url" "$sku" --buckets 3
            fi
        fi
    fi
    ha_down
}

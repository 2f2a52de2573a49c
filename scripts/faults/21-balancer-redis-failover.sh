# shellcheck shell=bash
# Scenario 21 of scripts/faults.sh, which sources it: 21 is its place in a
# run and its SKUs' base (2101 up).
#
#   balancer-redis-failover  two daemons behind HAProxy on the Sentinel stack, the load
#                        through HAProxy; kill -9 of the Redis master: sales through
#                        HAProxy again within the Sentinel bound, its checks included

# No HEAL_BOUND: the issue's "within the Sentinel detection time plus 5 s",
# set by ha_up from the running Sentinels' down-after-milliseconds
# (SENTINEL_HEAL_EXTRA_S).
# secs_of_day HH:MM:SS.frac: seconds since midnight.
secs_of_day() { awk -F: '{ printf "%.3f", $1 * 3600 + $2 * 60 + $3 }' <<<"$1"; }

# balancer_seen SKU T0: what HAProxy answered to the orders on SKU (the load)
# and SKU + 1 (the probes), from its request log (option httplog): its own
# 503s (<NOSRV>: no daemon in service), apart from the daemons' answers, and
# when its own came, in seconds after T0 (HAProxy logs local time; a run
# across midnight reads wrong).  Its check log: how often a daemon went down.
balancer_seen() {
    local sku=$1 t0=$2 log=$SDIR/haproxy/haproxy.log kill_s
    kill_s=$(secs_of_day "$(date -d "@$t0" +%H:%M:%S.%N)")
    awk -v load="/api/v1/skus/$sku/orders " -v probe="/api/v1/skus/$((sku + 1))/orders " -v k="$kill_s" '
        function tod(f, t) { t = f; sub(/^\[[^:]*:/, "", t); sub(/\]$/, "", t); split(t, h, ":"); return h[1] * 3600 + h[2] * 60 + h[3] }
        {
            w = index($0, load) ? "load" : index($0, probe) ? "probes" : ""
            if (w == "") next
            for (i = 3; i < NF; i++) if ($i ~ /^seckilld\//) break
            st = $(i + 2)
            if ($i ~ /<NOSRV>/) {
                own[w]++
                t = tod($2) - k
                if (first == "" || t < first) first = t
                if (last == "" || t > last) last = t
            } else {
                if (st == 503) d503[w]++
                if (st == 502 || st == 504) bad[w]++
            }
        }
        END {
            printf "HAProxy'"'"'s own 503s (no daemon in service): load %d, probes %d", own["load"], own["probes"]
            if (first != "") printf " (from %.1fs to %.1fs after the kill)", first, last
            printf "; the daemons'"'"' 503s through it: load %d, probes %d; 502/504: load %d\n", d503["load"], d503["probes"], bad["load"]
        }' "$log"
    # (each of these is in the log twice: as a log line, and as a warning on stderr)
    note "HAProxy's checks: $(grep -c '^Server .* is DOWN' "$log") daemon(s) taken out, $(grep -c '^Server .* is UP' "$log") brought back, $(grep -c '^backend .* has no server available' "$log") time(s) none in service ($HAPROXY_CHECK)"
}

# Two daemons behind HAProxy on the Sentinel stack, the load through
# HAProxy (the deployed topology, `make run REDIS=sentinel INSTANCES=2`);
# kill -9 of the Redis master.  While no master answers, the daemons'
# /healthz answers 503 and HAProxy's checks (fall 2) take both out: buyers
# get HAProxy's own 503 (JSON, Retry-After); once the Sentinels promote the replica the checks
# (rise 2) bring them back.  Heal: the first probe answered 201 through
# HAProxy, within the Sentinel scenarios' bound (detection + 5 s).
scenario_balancer_redis_failover() {
    local sku=$1 t0 heard bad
    if ha_up && balancer_up && under_load "$sku" "$LB_URL"; then
        ha_master_kill
        t0=$(now)
        after_fault "$LB_URL" "$sku" "$t0" "the master was killed"
        heard=$(grep -h 'the Sentinels name a new master' "$SDIR"/d1.log "$SDIR"/d2.log 2>/dev/null |
            awk '{ print $1 }' | sort | head -n 1)
        if [[ -n $heard ]]; then
            note "the daemons heard of the new master $(awk -v a="$t0" -v b="$(date -d "$heard" +%s.%N)" \
                'BEGIN { printf "%.1f", b - a }')s after the kill (directly; through HAProxy: ${HEAL_S}s)"
        fi
        note "$(balancer_seen "$sku" "$t0")"
        # Whoever answered meanwhile, the daemons or HAProxy itself (its
        # http-error), a buyer was told when to try again.
        bad=$(awk -v ok="$OK_CODE" '$2 != ok && !($2 == 503 && $3 > 0)' "$SDIR/probes")
        [[ -z $bad ]] || fail "through HAProxy, buyers got other than 503 with Retry-After: $(head -n 3 <<<"$bad" | tr '\n' ';')"
    fi
    ha_down
}

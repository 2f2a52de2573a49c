# shellcheck shell=bash
# Sourced by scripts/faults.sh: the load, its checks and the healing probes,
# and the shape most scenarios share (under_load, after_fault).

# load_start SKU URL...: buyers in the background for LOAD_S seconds on a
# new SKU, answers to SDIR/load.answers.
load_start() {
    local sku=$1 urls=() u
    shift
    for u in "$@"; do urls+=(--url "$u"); done
    "$LOADTEST" --load-only "${urls[@]}" --admin-url "$(internal_url "$1")" --sku "$sku" --create-sku --stock "$PROBE_STOCK" \
        --limit 5 --qty 1:80,2:20 --users 100000000 --requests 100000000 \
        --retry-share 0.1 --concurrency "$CONCURRENCY" --duration "$LOAD_S" \
        --timeout-ms "$REQUEST_TIMEOUT_MS" --seed "$SEED" --label "$SCEN" \
        --answers "$SDIR/load.answers" --json "$SDIR/load.json" \
        </dev/null >"$SDIR/load.log" 2>&1 &
    LOAD_PID=$!
    LOAD_T0=$(now)
}

# load_wait: the load ends by itself (duration + request timeout + grace).
load_wait() {
    local st=0 limit=$((LOAD_S + REQUEST_TIMEOUT_MS / 1000 + 30)) i
    for ((i = 0; i < limit * 10; i++)); do
        kill -0 "$LOAD_PID" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$LOAD_PID" 2>/dev/null; then
        fail "the load did not end within ${limit}s"
        lt_stop "$LOAD_PID" seckill-loadtest
    fi
    wait "$LOAD_PID" || st=$?
    LOAD_PID=
    if ((st != 0)); then
        fail "the load exited $st (log $SDIR/load.log)"
        tail -n 5 "$SDIR/load.log" >&2 || true
        return 1
    fi
    note "load: $(jq -r '.run.answers | to_entries | map(select(.value > 0) | "\(.key) \(.value)") | join(", ")' "$SDIR/load.json")"
}

# answers KEY: how many answers of that kind the load got.
answers() { jq -r --arg k "$1" '.run.answers[$k] // 0' "$SDIR/load.json"; }

# check SKU NAME [FLAGS...]: seckill-loadtest --check-only; its report in
# SDIR/NAME.check.  Returns its exit status.
check() {
    local sku=$1 name=$2 st=0
    shift 2
    timeout -k 5 $((DRAIN_TIMEOUT_S + 60)) "$LOADTEST" --check-only --sku "$sku" \
        --drain-timeout "$DRAIN_TIMEOUT_S" --json "$SDIR/$name.check.json" "$@" \
        </dev/null >"$SDIR/$name.check" 2>&1 || st=$?
    return "$st"
}

# judge SKU [FLAGS...]: the scenario's load checked with its answers.
judge() {
    local sku=$1 st=0
    shift
    check "$sku" load --answers "$SDIR/load.answers" "$@" || st=$?
    if ((st != 0)); then
        fail "invariants of the load on SKU $sku (check-only exit $st)"
        return 1
    fi
    note "check: $(jq -r '.invariants.facts | "\(.run_orders) orders, \(.run_units_sold) units sold; answered 201 \(.answered.confirmed_201), 409+id \(.answered.rejected_409), 202 \(.answered.pending_202) (lost \(.answered.lost_202))"' "$SDIR/load.check.json")"
}

# probe URL SKU: one order of a new buyer on the probe SKU.  Prints
# "CODE RETRY_AFTER" (RETRY_AFTER 1 when the header came).
PROBE_USER=0
probe() {
    local code ra hdr=$SDIR/probe.headers
    PROBE_USER=$((PROBE_USER + 1))
    code=$("$BUILD_DIR/seckillctl" token --user "$PROBE_USER" |
        sed 's/^/Authorization: Bearer /' |
        curl -s -o /dev/null -D "$hdr" --max-time 5 -w '%{http_code}' -H @- \
            -H 'Content-Type: application/json' -d '{"qty":1}' \
            "$1/api/v1/skus/$2/orders" 2>/dev/null) || code=${code:-000}
    ra=$(grep -ci '^retry-after:' "$hdr" 2>/dev/null || true)
    printf '%s %s\n' "$code" "${ra:-0}"
}

# heal URL SKU T0 WHAT: probes until an order is answered OK_CODE, at most
# the scenario's bound after T0 (the moment WHAT happened).  Sets HEAL_S;
# every probe answer goes to SDIR/probes.
heal() {
    local url=$1 sku=$2 t0=$3 what=$4 bound=${HEAL_BOUND[$SCEN]} out
    while :; do
        out=$(probe "$url" "$sku")
        printf '%s %s\n' "$(since "$t0")" "$out" >>"$SDIR/probes"
        if [[ ${out%% *} == "$OK_CODE" ]]; then
            HEAL_S=$(since "$t0")
            note "healed: an order answered $OK_CODE ${HEAL_S}s after $what (bound ${bound}s)"
            return 0
        fi
        le "$(since "$t0")" "$bound" || break
        sleep "$PROBE_EVERY_S"
    done
    fail "not healed within ${bound}s: last probe answered ${out%% *} (probes in $SDIR/probes)"
    return 1
}

# sales_continue URL SKU: a short, checked run on the scenario's SKU.
sales_continue() { # sales_continue URL SKU [LOADTEST FLAGS...]
    local st=0 url=$1 sku=$2 keep=(--answers "$SDIR/after.answers")
    shift 2
    # a bucketed run checks its own answers, split by bucket: no file of them
    (($# == 0)) || keep=()
    timeout -k 5 $((DRAIN_TIMEOUT_S + 90)) "$LOADTEST" --url "$url" --admin-url "$(internal_url "$url")" \
        --sku "$sku" "$@" \
        --users 300 --user-base "$AFTER_USER_BASE" --requests 300 --concurrency 8 --duration 30 \
        --timeout-ms "$REQUEST_TIMEOUT_MS" --drain-timeout "$DRAIN_TIMEOUT_S" --seed "$SEED" \
        --label "$SCEN after" --progress-ms 0 "${keep[@]}" \
        --json "$SDIR/after.json" </dev/null >"$SDIR/after.check" 2>&1 || st=$?
    if ((st != 0)); then
        fail "sales after the fault: seckill-loadtest exit $st ($SDIR/after.check)"
        return 1
    fi
    local n
    n=$(jq -r '.run.answers | (.confirmed // 0) + (.accepted // 0) + (.rejected // 0)' "$SDIR/after.json")
    ((n > 0)) || fail "no order taken after the fault"
    note "sales continue: $n new orders afterwards, every invariant held"
}

# pending_of PID SKU: stream entries the consumers of daemon PID still hold
# (stream and group names: service/keys.c, docs/ARCHITECTURE.md).
pending_of() {
    se_redis_admin "$STACK_DIR" "$SE_REDIS_PORT" XPENDING "seckill:{sku:$2}:orders" writers 2>/dev/null |
        awk -v pid="-$1-" 'found { print; exit } index($0, pid) { found = 1 } END { if (!found) print 0 }'
}

# mid_batch PID SKU: waits (a few samples) until daemon PID's writer holds
# entries of SKU's stream, so that a fault hits a batch in flight.  Sets HELD.
mid_batch() {
    local i
    for ((i = 0; i < MID_BATCH_TRIES; i++)); do
        HELD=$(pending_of "$1" "$2")
        [[ $HELD == 0 ]] || break
        sleep 0.02
    done
}

# kill_mid_batch PID SKU: kill -9 of daemon PID mid-batch, reaped.
kill_mid_batch() {
    mid_batch "$1" "$2"
    kill -KILL "$1"
    forget_daemon "$1"
}

# Each scenario uses SKU base+1 for the load and base+2 for the healing probes.

# under_load SKU URL...: the probe SKU, then the load on SKU across URLs,
# FAULT_AT_S into it.
under_load() {
    local sku=$1
    shift
    create_sku "$1" $((sku + 1)) "$PROBE_STOCK" "$PROBE_LIMIT" || return 1
    load_start "$sku" "$@"
    sleep "$FAULT_AT_S"
}

# after_fault URL SKU T0 WHAT [FLAGS...]: healing timed from T0 (WHAT), the
# load's end, its check (with FLAGS), and sales afterwards.
after_fault() {
    local url=$1 sku=$2 t0=$3 what=$4
    shift 4
    heal "$url" $((sku + 1)) "$t0" "$what"
    load_wait
    judge "$sku" "$@"
    sales_continue "$url" "$sku"
}

# down_and_back PID SIGNAL WHAT [PREPARE]: stops a server of the stack with
# SIGNAL, runs PREPARE while it is down, and starts it again on its port.
down_and_back() {
    local pid=$1 sig=$2 what=$3 prepare=${4:-}
    kill "-$sig" "$pid"
    wait_gone "$pid" || {
        fail "$what (pid $pid) survived SIG$sig"
        return 1
    }
    [[ -z $prepare ]] || "$prepare"
    sleep "$DOWN_S"
    se_stack_restart "$STACK_DIR" >"$SDIR/restart.log" 2>&1 || {
        fail "$what did not start again ($SDIR/restart.log)"
        return 1
    }
}

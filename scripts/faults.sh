#!/usr/bin/env bash
# `make faults`: faults injected into a real local stack under load, each
# judged by `seckill-loadtest --check-only` on what the buyers were answered,
# plus the scenario's own assertions and the time the service took to heal by
# itself (no admin call, no restart beyond what the fault did).
#
# Starts its own Redis + PostgreSQL on free loopback ports in var/faults-*,
# its own seckilld instances, and removes all of it at the end.
#
# Scenarios: one file each, scripts/faults/NN-NAME.sh (the head of each says
# what it injects); NN orders the run and gives the scenario's SKUs (from
# NN*100 + 1), so a new scenario is a new file with the next free number.
# Each file sets HEAL_BOUND[NAME] (seconds; the Sentinel scenarios' is set
# as they run) and defines scenario_NAME (dashes as underscores), called with
# its first SKU.  The shared parts: scripts/faults/lib/settings.sh (loads,
# timings, the daemons' settings), lib/common.sh (bookkeeping, servers,
# daemons), lib/load.sh (load, checks, healing probes), lib/ha.sh (a
# Sentinel or Cluster stack of a scenario's own), lib/pgha.sh (a Patroni
# stack of a scenario's own, and its members' faults).
# FAULTS_ONLY=name,... runs a subset, in the order of the run.
#
# Env in: BUILD (build), FAULTS_SHORT=1 (small loads: the whole suite in a few
#         minutes), FAULTS_ONLY, FAULTS_ORDER_ACK (durable; reserved judges
#         healing by 202s), FAULTS_KEEP=1 (keep var/faults-* for a look),
#         FAULTS_SEED (1); SECKILL_* settings reach every daemon (the short
#         leases and intervals below are defaults only).
set -euo pipefail

PROG=faults.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
BUILD_DIR=${BUILD:-build}
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
# shellcheck source=loadtest/lt-env.sh
source "$ROOT/loadtest/lt-env.sh"

DAEMON=$BUILD_DIR/seckilld
LOADTEST=$BUILD_DIR/seckill-loadtest
for b in "$DAEMON" "$LOADTEST"; do
    [[ -x $b ]] || die "$b is missing; build it first (make all)"
done
for c in curl jq redis-cli ps; do
    command -v "$c" >/dev/null 2>&1 || die "$c is not installed (run scripts/deps.sh)"
done

FAULTS_DIR=$ROOT/scripts/faults
# shellcheck source=scripts/faults/lib/settings.sh
source "$FAULTS_DIR/lib/settings.sh"
# shellcheck source=scripts/faults/lib/common.sh
source "$FAULTS_DIR/lib/common.sh"
# shellcheck source=scripts/faults/lib/load.sh
source "$FAULTS_DIR/lib/load.sh"
# shellcheck source=scripts/faults/lib/ha.sh
source "$FAULTS_DIR/lib/ha.sh"
# shellcheck source=scripts/faults/lib/pgha.sh
source "$FAULTS_DIR/lib/pgha.sh"

trap faults_cleanup EXIT
trap 'printf "\n%s: interrupted\n" "$PROG" >&2; exit 130' INT
trap 'printf "%s: terminated\n" "$PROG" >&2; exit 143' TERM

# Every scenario file, in the order of its number (SCENARIO_NUM[NAME]).  A
# file may set SCENARIO_OFF[NAME] to why it is off (a known defect outside
# this tree): it then runs only when FAULTS_ONLY names it, and the summary
# says so.
ALL_SCENARIOS=()
declare -A SCENARIO_NUM=() SCENARIO_OFF=()
for f in "$FAULTS_DIR"/[0-9][0-9]-*.sh; do
    [[ -f $f ]] || continue
    name=${f##*/} name=${name%.sh}
    num=$((10#${name%%-*})) name=${name#*-}
    for s in "${ALL_SCENARIOS[@]}"; do
        [[ ${SCENARIO_NUM[$s]} != "$num" ]] || die "$f: scenario number $num is also $s's"
    done
    # shellcheck source=/dev/null
    source "$f"
    declare -F "scenario_${name//-/_}" >/dev/null || die "$f defines no scenario_${name//-/_}"
    ALL_SCENARIOS+=("$name")
    SCENARIO_NUM[$name]=$num
done
((${#ALL_SCENARIOS[@]})) || die "no scenario in $FAULTS_DIR"

# ---------------------------------------------------------------- runner

# report_failure: the check's offending rows and the daemon logs' tails.
report_failure() {
    local f
    for f in "$SDIR"/*.check; do
        [[ -f $f ]] || continue
        if grep -q '^  FAIL\|could not finish' "$f"; then
            printf -- '--- %s: failed checks\n' "${f#"$SDIR"/}"
            awk '/^  FAIL/ { p = 1; print; next } /^  (PASS|skip)/ { p = 0 } /could not finish/ { print } p && /^          / { print }' "$f"
        fi
    done
    for f in "$SDIR"/d*.log; do
        [[ -f $f ]] || continue
        printf -- '--- last lines of %s\n' "${f#"$SDIR"/}"
        tail -n 15 "$f"
    done
    [[ -f $SDIR/load.log ]] && {
        printf -- '--- last lines of load.log\n'
        tail -n 4 "$SDIR/load.log"
    }
    return 0
}

# stack_ok: both servers answer (a scenario may have left one down).
stack_ok() {
    thaw
    "$LT_STACK" status "$STACK_DIR" >/dev/null 2>&1 && return 0
    say "restarting the stack after $SCEN"
    se_stack_restart "$STACK_DIR" >/dev/null 2>&1
}

run_scenario() {
    local idx=$1 name=$2 t0 secs verdict bound
    SCEN=$name SDIR=$SCRATCH/$name REASONS=() NOTES=() HEAL_S=- PROBE_USER=0
    mkdir -p "$SDIR"
    # A scenario on a stack of its own (Sentinel, Cluster, Patroni) learns its
    # bound from that stack's timings once it is up, and says it then.
    bound="set by the timings of its stack, below"
    [[ -n ${HEAL_BOUND[$name]:-} ]] && bound="${HEAL_BOUND[$name]}s"
    say "=== $name (heal bound $bound)"
    t0=$SECONDS
    "scenario_${name//-/_}" $((idx * 100 + 1)) || true
    thaw
    lt_stop "$LOAD_PID" seckill-loadtest
    LOAD_PID=
    lt_stop "$RESHARD_PID" redis-cli
    RESHARD_PID=
    ((${#REASONS[@]} == 0)) || report_failure
    lt_stop "$BALANCER_PID" haproxy
    BALANCER_PID=
    stop_daemons
    stack_ok || fail "the stack could not be brought back"
    secs=$((SECONDS - t0))
    verdict=PASS
    ((${#REASONS[@]} == 0)) || verdict=FAIL
    RESULTS+=("$(printf '%-4s  %-25s %4ss  heal %6s  %s' "$verdict" "$name" "$secs" \
        "${HEAL_S}s" "${REASONS[0]:-}")")
    say "--- $name: $verdict in ${secs}s, healed in ${HEAL_S}s (bound ${HEAL_BOUND[$name]:-?}s)"
}

# ---------------------------------------------------------------- main

SELECTED=("${ALL_SCENARIOS[@]}")
if [[ -n ${FAULTS_ONLY:-} ]]; then
    IFS=, read -r -a SELECTED <<<"$FAULTS_ONLY"
    for s in "${SELECTED[@]}"; do
        [[ " ${ALL_SCENARIOS[*]} " == *" $s "* ]] ||
            die "unknown scenario '$s' in FAULTS_ONLY (known: ${ALL_SCENARIOS[*]})"
    done
fi

mkdir -p "$ROOT/var"
SCRATCH=$ROOT/var/faults-$$-$(rand_hex 4)
mkdir "$SCRATCH"
STACK_DIR=$SCRATCH/stack
mkdir "$STACK_DIR"
se_stack_start_free "$STACK_DIR" >"$SCRATCH/stack.log" 2>&1 || {
    cat "$SCRATCH/stack.log" >&2
    die "could not start the stack in $STACK_DIR"
}
lt_stack_up "$STACK_DIR" >/dev/null
lt_token "$SCRATCH"
lt_buyer_secret "$SCRATCH"
say "stack in $STACK_DIR (redis :$SE_REDIS_PORT, postgres :$SE_PG_PORT), acknowledgement $ACK, loads of ${LOAD_S}s on $CONCURRENCY connections"

start=$SECONDS
off=0
for i in "${!ALL_SCENARIOS[@]}"; do
    name=${ALL_SCENARIOS[$i]}
    [[ " ${SELECTED[*]} " == *" $name "* ]] || continue
    if [[ -n ${SCENARIO_OFF[$name]:-} && -z ${FAULTS_ONLY:-} ]]; then
        RESULTS+=("$(printf 'OFF   %-25s %s' "$name" "${SCENARIO_OFF[$name]}")")
        off=$((off + 1))
        continue
    fi
    run_scenario "${SCENARIO_NUM[$name]}" "$name"
done

printf '\n%s: summary (%ss, acknowledgement %s)\n' "$PROG" $((SECONDS - start)) "$ACK"
printf '  %s\n' "${RESULTS[@]}"
failed=$(printf '%s\n' "${RESULTS[@]}" | grep -c '^FAIL' || true)
printf '%s: %d passed, %d failed, %d off\n' "$PROG" $((${#RESULTS[@]} - failed - off)) "$failed" "$off"
((failed == 0))

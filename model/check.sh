#!/usr/bin/env bash
# Checks the protocol model (model/seckill.pml) with spin.
#
#   model/check.sh            every scenario of the fixed protocol, exhaustively,
#                             then each re-inserted bug, which must be found
#   model/check.sh bug N      only bug N: its scenario with -DBUGN, and the
#                             counterexample's trail, in words (also a name:
#                             gap-ack, item5, restore-before-load, ...)
#
# Fails (exit 1) when the fixed model has an assertion violation or an invalid
# end state, when a search was not complete (out of memory, depth too small),
# or when a re-inserted bug or an open counterexample (OPEN) is not found.  Env: MODEL_OUT (default
# build/model) holds each run's pan, output and trail; MODEL_JOBS (2) runs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PML=$ROOT/model/seckill.pml
OUT=${MODEL_OUT:-$ROOT/build/model}
JOBS=${MODEL_JOBS:-2}
DEPTH=20000   # pan -m: far above the deepest run (about 1,600 steps)
MEM_MB=3000   # per run; the largest scenario needs about 1.5 GB
# gcc -O2 takes some 20 s to compile a verifier (pan.m is one huge
# function) and halves the search: worth it only for the long searches, which
# say so with a trailing "@O2"; the others are compiled with -O0 (2 s).

# The fixed protocol: one line per scenario, "name: spin flags", the longest
# searches first (two run at a time).
SCENARIOS=(
    "failover-restore: -DSCEN=9 @O2"
    "rebuilds: -DSCEN=4 @O2"
    "failover-rebuild: -DSCEN=2 @O2"
    "expiry-adjust: -DSCEN=6 @O2"
    "adjust-rebuild: -DSCEN=8 @O2"
    "failover-retry: -DSCEN=1"
    "two-writers: -DSCEN=3"
    "cancel: -DSCEN=5"
    "cancel-failover: -DSCEN=7"
)
# Each bug put back, in the scenario that must find it (README.md tells the
# counterexamples): issue 24's five, the two gaps this model found in main at
# cc7e017, issue 24's item 5 (the 202 answered without its record), and the
# rebuild's write-back of recorded 202s' keys before its load installs the new
# epoch (main's design before the write-back moved into sku_load.lua).
# Bug 1 runs without the 202's record (and without its never-lost check,
# which item5 is about): with the record, the settler's
# order_pending_settled.lua marks the state bug 1 strands returned (the
# buyer was told 202, so the order is recorded); bug 1 still strands an
# order with no record (order_ack = reserved answers 202 without one).
BUGS=(
    "bug1: -DSCEN=2 -DBUG1 -DNO_PENDING_RECORD"
    "bug2: -DSCEN=1 -DBUG2"
    "bug3: -DSCEN=4 -DBUG3"
    "bug4: -DSCEN=5 -DBUG4"
    "bug5: -DSCEN=7 -DBUG5"
    "gap-ack: -DSCEN=7 -DGAP_ACK"
    "gap-load: -DSCEN=8 -DGAP_LOAD"
    "item5: -DSCEN=1 -DNO_PENDING_RECORD -DPENDING_NEVER_LOST"
    "restore-before-load: -DSCEN=9 -DRESTORE_BEFORE_LOAD"
)
# Counterexamples in the design of main as modelled, not fixed yet: each
# must still be found (its trail is printed), so that it is neither hidden
# nor silently lost; once the code is fixed, the model follows and the
# scenario moves to SCENARIOS.  README.md tells each one.
# (None at present: open-restore, the first, is fixed and is now the bug
# restore-before-load.)
OPEN=()

for tool in spin gcc; do
    command -v "$tool" >/dev/null || {
        echo "model: $tool not found (scripts/deps.sh installs it)" >&2
        exit 1
    }
done

# run NAME FLAGS...: generates, compiles and runs the verifier in $OUT/NAME;
# its summary goes to $OUT/NAME/pan.out.
run() {
    local name=$1 opt=-O0
    shift
    if [[ ${*: -1} == @O2 ]]; then
        opt=-O2
        set -- "${@:1:$#-1}"
    fi
    local dir=$OUT/$name
    rm -rf "$dir"
    mkdir -p "$dir"
    cp "$PML" "$dir/seckill.pml"
    (
        cd "$dir"
        spin "$@" -a seckill.pml >spin.out 2>&1 || { cat spin.out; exit 1; }
        # shellcheck disable=SC2086
        gcc $opt -w -DSAFETY -DCOLLAPSE -DMEMLIM=$MEM_MB -o pan pan.c
        start=$(date +%s%N)
        ./pan -m$DEPTH -w24 >pan.out 2>&1 || true
        end=$(date +%s%N)
        echo "wall $(((end - start) / 1000000)) ms" >>pan.out
    )
}

# verdict NAME: "error" (a violation found), "incomplete" (the search stopped
# short: memory, depth, or no summary at all) or "ok".
verdict() {
    local out=$OUT/$1/pan.out
    if grep -q "errors: [1-9]" "$out"; then
        echo error
    elif grep -q -E "out of memory|max search depth too small|MEMLIM bound|insufficient memory|exceeds memory limit|Search not completed" "$out"; then
        echo incomplete
    elif grep -q "errors: 0" "$out"; then
        echo ok
    else
        echo incomplete
    fi
}

summary() {
    local out=$OUT/$1/pan.out
    local states secs
    states=$(awk '/states, stored/ {print $1; exit}' "$out")
    secs=$(awk '/^wall/ {printf "%.1f", $2 / 1000}' "$out")
    printf '%-18s %-10s %12s states  %6s s\n' "$1" "$(verdict "$1")" "${states:-?}" "${secs:-?}"
}

# The counterexample of NAME in words: the printf lines of spin's replay.
trail() {
    local name=$1
    shift
    [[ ${*: -1} == @O2 ]] && set -- "${@:1:$#-1}"
    (cd "$OUT/$name" && spin "$@" -t seckill.pml 2>&1 |
        sed -e 's/^ *//' | awk '/^spin: trail ends/ {exit} NF' || true) >"$OUT/$name/trail.txt"
}

# runs "name: flags" lines, JOBS at a time
run_all() {
    local line name flags
    local -a pids=()
    for line in "$@"; do
        name=${line%%:*}
        flags=${line#*: }
        # shellcheck disable=SC2086
        run "$name" $flags &
        pids+=($!)
        if ((${#pids[@]} >= JOBS)); then
            wait -n || exit 1   # whichever run ends first frees its slot
            local -a left=()
            for p in "${pids[@]}"; do
                kill -0 "$p" 2>/dev/null && left+=("$p")
            done
            pids=("${left[@]}")
        fi
    done
    for p in "${pids[@]}"; do
        wait "$p" || exit 1
    done
}

mkdir -p "$OUT"

if [[ ${1:-} == bug ]]; then
    n=${2:?usage: model/check.sh bug N}
    [[ $n =~ ^[0-9]+$ ]] && n=bug$n
    [[ $n == open-restore ]] && n=restore-before-load   # its name while it was open
    line=
    for b in "${BUGS[@]}" "${OPEN[@]}"; do
        [[ ${b%%:*} == "$n" ]] && line=$b
    done
    [[ -n $line ]] || { echo "model: no $n (there are: ${BUGS[*]%%:*} ${OPEN[*]%%:*})" >&2; exit 2; }
    run_all "$line"
    summary "$n"
    if [[ $(verdict "$n") != error ]]; then
        echo "model: $n was NOT found" >&2
        exit 1
    fi
    # shellcheck disable=SC2086
    trail "$n" ${line#*: }
    grep -E "assertion violated|invalid end state" "$OUT/$n/pan.out" | head -1
    echo "--- the counterexample ($OUT/$n/trail.txt):"
    cat "$OUT/$n/trail.txt"
    exit 0
fi

t0=$(date +%s)
echo "model: the fixed protocol, each scenario exhaustively (spin $(spin -V | awk '{print $3}'))"
run_all "${SCENARIOS[@]}"
fail=0
for line in "${SCENARIOS[@]}"; do
    name=${line%%:*}
    summary "$name"
    v=$(verdict "$name")
    if [[ $v != ok ]]; then
        fail=1
        grep -E "assertion violated|invalid end state|out of memory|depth too small" \
            "$OUT/$name/pan.out" | head -3 >&2 || true
        if [[ $v == error ]]; then
            # shellcheck disable=SC2086
            trail "$name" ${line#*: }
            echo "model: $name: the counterexample is in $OUT/$name/trail.txt" >&2
        fi
    fi
done
echo "model: each bug put back must be found"
run_all "${BUGS[@]}"
for line in "${BUGS[@]}"; do
    name=${line%%:*}
    summary "$name"
    if [[ $(verdict "$name") != error ]]; then
        echo "model: $name was NOT found: the model checks less than it claims" >&2
        fail=1
    else
        # shellcheck disable=SC2086
        trail "$name" ${line#*: }
    fi
done
((${#OPEN[@]})) && echo "model: open counterexamples in main's design (README.md), each must be found"
run_all "${OPEN[@]}"
for line in "${OPEN[@]}"; do
    name=${line%%:*}
    summary "$name"
    if [[ $(verdict "$name") != error ]]; then
        echo "model: $name was NOT found: fixed in the model? then move it to SCENARIOS" >&2
        fail=1
    else
        # shellcheck disable=SC2086
        trail "$name" ${line#*: }
        grep -E "assertion violated" "$OUT/$name/pan.out" | head -1
        echo "model: OPEN: $name, a counterexample in main's design: $OUT/$name/trail.txt"
    fi
done
echo "model: $(($(date +%s) - t0)) s in all"
exit $fail

#!/usr/bin/env bash
# Run libFuzzer targets for a bounded time each (`make fuzz`).
#
#   scripts/fuzz.sh NAME...
#
# For each NAME: $BUILD/fuzz/fuzz_NAME (built by `make fuzz`) starts from the
# seeds in service/fuzz/corpus/NAME, copied into $BUILD/fuzz/work/NAME/corpus
# (the checked-in corpus is never written; the copy keeps what the fuzzer
# learns across runs), with service/fuzz/NAME.dict when there is one, and runs
# FUZZ_SECONDS.  Targets run one after another, a failure does not stop the
# others.  A crash, leak, timeout, out-of-memory or sanitizer report is a
# failure: its reproducer is in $BUILD/fuzz/work/NAME/artifacts/ (emptied at
# the start of each run) and the command that replays it is printed.
#
# Env: BUILD (build), FUZZ_SECONDS (60), FUZZ_MAX_LEN (4096),
#      FUZZ_TIMEOUT_S (10: one input running longer is a failure).
# Exit: 0 when every target ran clean, 1 otherwise, 2 on bad usage.
set -euo pipefail

PROG=fuzz.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"

die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 2
}

BUILD_DIR=${BUILD:-build}
SECONDS_EACH=${FUZZ_SECONDS:-60}
MAX_LEN=${FUZZ_MAX_LEN:-4096}
TIMEOUT_S=${FUZZ_TIMEOUT_S:-10}
for v in "$SECONDS_EACH" "$MAX_LEN" "$TIMEOUT_S"; do
    [[ $v =~ ^[1-9][0-9]*$ ]] || die "FUZZ_SECONDS, FUZZ_MAX_LEN and FUZZ_TIMEOUT_S must be positive integers"
done
(($# > 0)) || die "no targets given (usage: $0 NAME...)"

# Readable stack traces when the symbolizer is there (Debian's llvm package).
if [[ -z ${ASAN_SYMBOLIZER_PATH:-} ]] && command -v llvm-symbolizer >/dev/null 2>&1; then
    export ASAN_SYMBOLIZER_PATH
    ASAN_SYMBOLIZER_PATH=$(command -v llvm-symbolizer)
fi
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

failed=()
summary=()
for name in "$@"; do
    bin=$BUILD_DIR/fuzz/fuzz_$name
    seeds=service/fuzz/corpus/$name
    work=$BUILD_DIR/fuzz/work/$name
    [[ -x $bin ]] || die "$bin is missing (make fuzz builds it)"
    [[ -d $seeds ]] || die "no seed corpus $seeds"
    mkdir -p "$work/corpus"
    rm -rf "$work/artifacts"
    mkdir -p "$work/artifacts"
    cp -R "$seeds/." "$work/corpus/"
    args=(-max_total_time="$SECONDS_EACH" -max_len="$MAX_LEN" -timeout="$TIMEOUT_S"
        -print_final_stats=1 -artifact_prefix="$work/artifacts/")
    if [[ -f service/fuzz/$name.dict ]]; then
        args+=(-dict="service/fuzz/$name.dict")
    fi
    printf '%s: %s for %ss\n' "$PROG" "$name" "$SECONDS_EACH"
    rc=0
    "$bin" "${args[@]}" "$work/corpus" >"$work/log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n1)
    corpus=$(find "$work/corpus" -type f | wc -l)
    found=$(find "$work/artifacts" -type f | sort)
    if ((rc == 0)) && [[ -z $found ]]; then
        summary+=("$(printf '%-14s ok      %10s execs, corpus %s' "$name" "${execs:-?}" "$corpus")")
        continue
    fi
    failed+=("$name")
    summary+=("$(printf '%-14s FAILED  %10s execs (exit %s)' "$name" "${execs:-?}" "$rc")")
    printf '%s: %s FAILED (exit %s); the end of its log (%s):\n' "$PROG" "$name" "$rc" "$work/log"
    tail -n 60 "$work/log"
    for a in $found; do
        printf '%s: reproducer %s\n' "$PROG" "$a"
        printf '%s:   replay:  %s %s\n' "$PROG" "$bin" "$a"
    done
done

printf '%s: summary (%ss per target, inputs up to %s bytes)\n' "$PROG" "$SECONDS_EACH" "$MAX_LEN"
printf '  %s\n' "${summary[@]}"
if ((${#failed[@]} > 0)); then
    printf '%s: failed: %s\n' "$PROG" "${failed[*]}" >&2
    exit 1
fi

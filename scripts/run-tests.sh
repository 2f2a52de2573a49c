#!/usr/bin/env bash
# Run test binaries against a fresh, private Redis + PostgreSQL.
#
#   scripts/run-tests.sh build/tests/test_a build/tests/test_b ...
#
# Starts a stack in var/test-<pid>-<random> on two free random ports, runs
# `$BUILD/seckilld migrate`, then every binary in turn (a failure does not stop
# the others), prints a summary and tears the stack down.
#
# Env in:  BUILD (default build), VALGRIND=1, KEEP_TEST_STACK=1,
#          SECKILL_REDIS_TOPOLOGY (single, sentinel or cluster) and
#          SECKILL_PG_TOPOLOGY (single or ha: a Patroni cluster, the
#          DSNs naming both servers) of the stack (`make test REDIS=... PG=...`),
#          CK_DEFAULT_TIMEOUT (default 120), CK_VERBOSITY (default normal),
#          SECKILL_TEST_TIMEOUT (per binary, seconds, default 900),
#          SECKILL_TEST_FAIL_LINES (default 30: the summary ends with that many
#          last lines of each failed test's output, so that a log of which only
#          the end is kept, as a CI's, still says why).
# Env out (for the tests): SECKILL_TEST_REDIS_URL (the service's ACL user),
#          SECKILL_TEST_REDIS_ADMIN_URL (the admin user), SECKILL_TEST_STACK_DIR,
#          SECKILL_TEST_PG_DSN (the service's role seckill_app),
#          SECKILL_TEST_PG_ADMIN_DSN (the superuser),
#          SECKILL_TEST_PG_WRITER_DSN (with SECKILL_PGBOUNCER=1: the
#          writers' session-pooled DSN; else empty),
#          SECKILL_TEST_REDIS_PORT, SECKILL_TEST_PG_PORT, SECKILL_TEST_DAEMON,
#          SECKILL_TEST_ROOT, SECKILL_REDIS_URL, SECKILL_PG_DSN, PGPASSFILE.
set -euo pipefail

PROG=run-tests.sh

die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 1
}
say() { printf '%s: %s\n' "$PROG" "$*"; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
STACK=$ROOT/scripts/stack.sh
# shellcheck source=scripts/stack-env.sh
source "$ROOT/scripts/stack-env.sh"

(($# > 0)) || die "no test binaries given (usage: $0 BIN...)"

# Resolve binaries against the caller's directory before we cd.
BINS=()
for b in "$@"; do
    [[ $b == /* ]] || b=$PWD/$b
    [[ -f $b && -x $b ]] || die "test binary not found or not executable: $b"
    BINS+=("$b")
done

cd "$ROOT"
BUILD_DIR=${BUILD:-build}
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
DAEMON=$BUILD_DIR/seckilld
[[ -f $DAEMON && -x $DAEMON ]] || die "daemon binary $DAEMON is missing; build it first (make all)"

RUNNER=()
if [[ ${VALGRIND:-0} == 1 ]]; then
    command -v valgrind >/dev/null 2>&1 || die "VALGRIND=1 but valgrind is not installed (VALGRIND=1 scripts/deps.sh)"
    RUNNER=(valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite)
fi
TEST_TIMEOUT=${SECKILL_TEST_TIMEOUT:-900}
[[ $TEST_TIMEOUT =~ ^[0-9]+$ ]] || die "bad SECKILL_TEST_TIMEOUT: $TEST_TIMEOUT"
FAIL_LINES=${SECKILL_TEST_FAIL_LINES:-30}
[[ $FAIL_LINES =~ ^[0-9]+$ ]] || die "bad SECKILL_TEST_FAIL_LINES: $FAIL_LINES"

rand_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

TEST_DIR=
CURRENT_PID=
CLEANED=0
cleanup() {
    local rc=$?
    ((CLEANED)) && return 0
    CLEANED=1
    trap - INT TERM
    if [[ -n $CURRENT_PID ]] && kill -0 "$CURRENT_PID" 2>/dev/null; then
        kill -TERM "$CURRENT_PID" 2>/dev/null || true
        wait "$CURRENT_PID" 2>/dev/null || true
    fi
    if [[ -n $TEST_DIR && -d $TEST_DIR ]]; then
        "$STACK" stop "$TEST_DIR" >/dev/null 2>&1 ||
            printf '%s: warning: stopping the stack in %s failed\n' "$PROG" "$TEST_DIR" >&2
        if [[ ${KEEP_TEST_STACK:-0} == 1 ]]; then
            printf '%s: KEEP_TEST_STACK=1: kept %s (stack stopped; restart with: SECKILL_REDIS_PORT=%s SECKILL_PG_PORT=%s %s start %s)\n' \
                "$PROG" "$TEST_DIR" "${SE_REDIS_PORT:-?}" "${SE_PG_PORT:-?}" "$STACK" "$TEST_DIR" >&2
        else
            rm -rf "$TEST_DIR"
        fi
    fi
    return "$rc"
}
trap cleanup EXIT
trap 'printf "\n%s: interrupted\n" "$PROG" >&2; exit 130' INT
trap 'printf "%s: terminated\n" "$PROG" >&2; exit 143' TERM

mkdir -p "$ROOT/var"

TEST_DIR=$ROOT/var/test-$$-$(rand_hex 4)
mkdir "$TEST_DIR"
say "stack in $TEST_DIR"
se_stack_start_free "$TEST_DIR" || die "could not start the test stack (see above)"
say "redis :$SE_REDIS_PORT, postgres :$SE_PG_PORT${SE_PG_REPLICA_PORT:+ and :$SE_PG_REPLICA_PORT (Patroni, etcd :$SE_ETCD_PORT)}"

# shellcheck source=/dev/null
source "$TEST_DIR/env"

say "migrating: $DAEMON migrate"
"$DAEMON" migrate || die "'$DAEMON migrate' failed (exit $?)"

# The code under test connects as the service's ACL user and role; what a
# test does to Redis or PostgreSQL itself (FLUSHALL and TRUNCATE between
# tests, SCRIPT FLUSH, CLIENT KILL, pg_terminate_backend, tampered rows) and
# the lock library's own tests use the admin user and the superuser.
export SECKILL_TEST_REDIS_URL=$SECKILL_REDIS_URL
SECKILL_TEST_REDIS_ADMIN_URL=$(se_redis_admin_url "$TEST_DIR" "$SECKILL_REDIS_PORT") ||
    die "cannot read the test stack's Redis admin password"
export SECKILL_TEST_REDIS_ADMIN_URL
export SECKILL_TEST_STACK_DIR=$TEST_DIR
export SECKILL_TEST_PG_DSN=$SECKILL_PG_DSN
export SECKILL_TEST_PG_WRITER_DSN=${SECKILL_PG_WRITER_DSN:-}
SECKILL_TEST_PG_ADMIN_DSN=$(se_pg_admin_dsn "$TEST_DIR" "$SECKILL_PG_PORT") ||
    die "cannot read the test stack's PostgreSQL superuser password file"
export SECKILL_TEST_PG_ADMIN_DSN
export SECKILL_TEST_REDIS_PORT=$SECKILL_REDIS_PORT
export SECKILL_TEST_PG_PORT=$SECKILL_PG_PORT
export SECKILL_TEST_DAEMON=$DAEMON
export SECKILL_TEST_ROOT=$ROOT
export SECKILL_REDIS_URL SECKILL_PG_DSN PGPASSFILE
export CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-120}
export CK_VERBOSITY=${CK_VERBOSITY:-normal}

# Each test's output goes to the terminal as before and to OUT_DIR/N.log,
# whose end the summary repeats when the test failed.
OUT_DIR=$TEST_DIR/output
mkdir "$OUT_DIR"

# tee_done PID: waits (bounded) for the tee of a test's output to see the end
# of it; a process the test left running could hold the pipe open forever.
tee_done() {
    local i
    for ((i = 0; i < 50; i++)); do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$1" 2>/dev/null; then
        printf '%s: warning: a process the test left running still holds its output open\n' "$PROG" >&2
        kill -TERM "$1" 2>/dev/null || true
    fi
    wait "$1" 2>/dev/null || true
}

RESULTS=()
FAILED_LOGS=()
failed=0
for i in "${!BINS[@]}"; do
    b=${BINS[i]}
    name=${b#"$ROOT"/}
    say "=== $name"
    start=$SECONDS
    out=$OUT_DIR/$i.log
    exec {tee_fd}> >(tee "$out")
    tee_pid=$!
    # In the background so that INT/TERM reach our trap at once; timeout
    # kills the whole process group of the test (check forks) when it expires.
    timeout -k 10 "$TEST_TIMEOUT" "${RUNNER[@]}" "$b" >&"$tee_fd" 2>&1 &
    CURRENT_PID=$!
    exec {tee_fd}>&-
    set +e
    wait "$CURRENT_PID"
    st=$?
    set -e
    CURRENT_PID=
    tee_done "$tee_pid"
    secs=$((SECONDS - start))
    if ((st == 0)); then
        RESULTS+=("PASS  $name (${secs}s)")
    else
        failed=$((failed + 1))
        why="exit $st"
        ((st == 124)) && why="timed out after ${TEST_TIMEOUT}s"
        ((st == 99)) && [[ ${#RUNNER[@]} -gt 0 ]] && why="valgrind errors (exit 99)"
        ((st > 128 && st != 124)) && why="killed by signal $((st - 128))"
        RESULTS+=("FAIL  $name ($why, ${secs}s)")
        FAILED_LOGS+=("$name" "$out")
        say "--- $name FAILED ($why)"
    fi
done

printf '\n%s: summary\n' "$PROG"
printf '  %s\n' "${RESULTS[@]}"
for ((i = 0; i < ${#FAILED_LOGS[@]}; i += 2)); do
    ((FAIL_LINES > 0)) || break
    printf '%s: the last %d lines of %s:\n' "$PROG" "$FAIL_LINES" "${FAILED_LOGS[i]}"
    tail -n "$FAIL_LINES" "${FAILED_LOGS[i + 1]}" | sed 's/^/  | /'
done
total=${#BINS[@]}
printf '%s: %d passed, %d failed, %d total\n' "$PROG" "$((total - failed))" "$failed" "$total"
((failed == 0))

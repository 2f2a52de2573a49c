# stack_test_lib.sh: what the tests of scripts/stack.sh's topologies share
# (test_stack_ha.sh, test_stack_cluster.sh), sourced after they set PROG,
# ROOT, KEEP_VAR (the variable that keeps the scratch directory) and
# DIR_PREFIX.  It makes the scratch directory's name (DIR, its stack.sh log
# LOG), removes it on any exit (stopping its stack first), and gives:
#   die, say                  messages naming PROG
#   admin PORT ARGS...        redis-cli as seckill-admin (ADMIN_PW)
#   svc PORT ARGS...          redis-cli as the service's user (SVC_PW), as
#                             seckilld logs in; a redirection is shown, not followed
#   wait_for WHAT SECS CMD... until CMD succeeds, bounded in polls and time;
#                             dies naming WHAT (and WHY, which CMD may set)
#   expect WHAT PREFIX GOT    GOT starts with PREFIX, or die
#   field TEXT NAME           NAME's value in INFO-style TEXT
# Set STARTED=1 once the stack was asked to start.
# shellcheck shell=bash

# shellcheck source=scripts/stack-env.sh
source "$ROOT/scripts/stack-env.sh"

die() {
    printf '%s: FAIL: %s\n' "$PROG" "$*" >&2
    exit 1
}
say() { printf '%s: %s\n' "$PROG" "$*"; }

POLL_S=${POLL_S:-0.2}
REDIS_CLI_TIMEOUT=${REDIS_CLI_TIMEOUT:-5}
WHY=
ADMIN_PW=
SVC_PW=

DIR=$ROOT/var/$DIR_PREFIX-$$-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
# shellcheck disable=SC2034  # read by the tests that source this
LOG=$DIR/test-stack.log # stack.sh's output, shown on failure
STARTED=0
# shellcheck disable=SC2317  # invoked via trap
stack_test_cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if ((STARTED)) || [[ -d $DIR ]]; then
        "$SE_STACK" stop "$DIR" >/dev/null 2>&1 ||
            printf '%s: warning: stopping the stack in %s failed\n' "$PROG" "$DIR" >&2
        if [[ ${!KEEP_VAR:-0} == 1 ]]; then
            printf '%s: %s=1: kept %s (stopped)\n' "$PROG" "$KEEP_VAR" "$DIR" >&2
        else
            rm -rf "$DIR"
        fi
    fi
    exit "$rc"
}
trap stack_test_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

admin() {
    local port=$1
    shift
    REDISCLI_AUTH=$ADMIN_PW timeout "$REDIS_CLI_TIMEOUT" redis-cli --user seckill-admin \
        -h 127.0.0.1 -p "$port" "$@" 2>/dev/null | tr -d '\r'
}
svc() {
    local port=$1
    shift
    REDISCLI_AUTH=$SVC_PW timeout "$REDIS_CLI_TIMEOUT" redis-cli --user seckill \
        -h 127.0.0.1 -p "$port" "$@" 2>/dev/null | tr -d '\r'
}

wait_for() {
    local what=$1 secs=$2 i deadline
    shift 2
    deadline=$((SECONDS + secs))
    for ((i = 0; i < secs * 5; i++)); do
        "$@" && return 0
        ((SECONDS < deadline)) || break
        sleep "$POLL_S"
    done
    die "$what: not within ${secs}s${WHY:+ ($WHY)}"
}

expect() {
    [[ $3 == "$2"* ]] || die "$1: want '$2...', got '$3'"
}

field() { awk -F: -v n="$2" '$1 == n { print $2; exit }' <<<"$1"; }

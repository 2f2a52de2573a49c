#!/usr/bin/env bash
# The README, run as a newcomer runs it (by scripts/run-tests.sh, whose stack
# it does not use: `make run` starts one of its own):
#
#  1. README.md's shell blocks are the two commands and the tour, and nothing
#     else: a command added to the README without a test here fails;
#  2. `make run` in a scratch var directory (SECKILL_RUN_VAR) on free ports,
#     until it says seckill is running; then the tour exactly as the README
#     shows it (only localhost:8080, localhost:9464, var/ and build/ replaced
#     by this run's), under `bash -eu -o pipefail`: every status it prints is
#     the one its comments promise, the orders' rows are there, the SKU's
#     gauges are on /metrics; then Ctrl-C (SIGINT to make run's process
#     group) stops everything it started;
#  3. every relative link of README.md and docs/*.md names a file that exists
#     and, with a #fragment into a Markdown file, one of its headings.
#
# (`make test`, the README's other command, is what runs this test.)
#
#   service/tests/test_readme.sh     (KEEP_README_TEST=1 keeps the scratch directory)
set -euo pipefail

PROG=test_readme.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
cd "$ROOT"
# shellcheck source=scripts/stack-env.sh
source "$ROOT/scripts/stack-env.sh"

die() {
    printf '%s: FAIL: %s\n' "$PROG" "$*" >&2
    exit 1
}
say() { printf '%s: %s\n' "$PROG" "$*"; }

README=$ROOT/README.md
RUN_WAIT=180 # make run: deps check, an up-to-date build, a fresh stack (initdb), migrate
STOP_WAIT=60
# What the tour's http calls answer, in order (its comments say the same).
WANT_STATUSES="201 201 201 409 200 404 200 201"

DAEMON=${SECKILL_TEST_DAEMON:-$ROOT/${BUILD:-build}/seckilld}
BUILD_DIR=$(cd "$(dirname "$DAEMON")" && pwd -P)
[[ -x $BUILD_DIR/seckilld && -x $BUILD_DIR/seckillctl ]] ||
    die "no seckilld and seckillctl in $BUILD_DIR (make all first)"
BUILD_REL=${BUILD_DIR#"$ROOT"/}
for tool in curl psql jq setsid; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (scripts/deps.sh installs it)"
done

DIR=$ROOT/var/readme-$$-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
RUN_LOG=$DIR/make-run.log
MAKE_PID=
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n $MAKE_PID ]] && kill -0 "$MAKE_PID" 2>/dev/null; then
        kill -INT -- "-$MAKE_PID" 2>/dev/null || true
        for ((i = 0; i < STOP_WAIT * 5; i++)); do
            kill -0 "$MAKE_PID" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL -- "-$MAKE_PID" 2>/dev/null || true
    fi
    if [[ -d $DIR ]]; then
        "$SE_STACK" stop "$DIR/var" >/dev/null 2>&1 || true
        if [[ ${KEEP_README_TEST:-0} == 1 ]]; then
            printf '%s: KEEP_README_TEST=1: kept %s\n' "$PROG" "$DIR" >&2
        else
            rm -rf "$DIR"
        fi
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$DIR"

# blocks: README.md's fenced shell blocks, each ended by a line "@@END@@".
blocks() {
    awk '/^```sh$/ { on = 1; next } on && /^```$/ { on = 0; print "@@END@@"; next } on' "$README"
}

# ---- 1. the README shows the two commands and the tour, nothing else
[[ $(blocks | grep -c '^@@END@@$') == 2 ]] ||
    die "README.md has $(blocks | grep -c '^@@END@@$') shell blocks; this test runs two (the two commands, the tour): give a new one a test here"
FIRST=$(blocks | awk '/^@@END@@$/ { exit } { sub(/[ \t]*#.*/, ""); if ($0 != "") print }')
[[ $FIRST == $'make run\nmake test' ]] ||
    die "README.md's first shell block is not the two commands 'make run' and 'make test': $FIRST"
TOUR=$(blocks | awk 'n == 1 && !/^@@END@@$/ { print } /^@@END@@$/ { n++ }')
[[ -n $TOUR ]] || die "README.md has no tour"

# ---- 2. make run, then the tour against it
PORT=$(se_free_port) || die "no free port"
MPORT=$(se_free_port "$PORT") || die "no free port"
RPORT=$(se_free_port "$PORT" "$MPORT") || die "no free port"
PPORT=$(se_free_port "$PORT" "$MPORT" "$RPORT") || die "no free port"
# The variables `make test` was given (BUILD=..., SAN=1) go to make run too;
# its job server does not (this is no recipe of it).
MAKE_VARS=()
if [[ ${MAKEFLAGS:-} == *" -- "* ]]; then
    read -r -a MAKE_VARS <<<"${MAKEFLAGS##* -- }"
fi
say "make run (var: $DIR/var, http :$PORT, internal :$MPORT, redis :$RPORT, postgres :$PPORT)"
# As a newcomer's shell: none of the test stack's settings, a process group
# of its own for Ctrl-C.
setsid env -i PATH="$PATH" HOME="${HOME:-/root}" LANG=C.UTF-8 TERM=dumb \
    SECKILL_RUN_VAR="$DIR/var" SECKILL_HTTP_ADDR="127.0.0.1:$PORT" \
    SECKILL_METRICS_ADDR="127.0.0.1:$MPORT" SECKILL_REDIS_PORT="$RPORT" SECKILL_PG_PORT="$PPORT" \
    make --no-print-directory -C "$ROOT" run "${MAKE_VARS[@]}" BUILD="$BUILD_REL" \
    </dev/null >"$RUN_LOG" 2>&1 &
MAKE_PID=$!
[[ $(ps -o pgid= -p "$MAKE_PID" | tr -d ' ') == "$MAKE_PID" ]] ||
    die "make run is not the leader of its process group"
deadline=$((SECONDS + RUN_WAIT))
until grep -q '^seckill is running on ' "$RUN_LOG"; do
    kill -0 "$MAKE_PID" 2>/dev/null || {
        cat "$RUN_LOG" >&2
        die "make run exited before seckill was running"
    }
    ((SECONDS < deadline)) || {
        cat "$RUN_LOG" >&2
        die "make run: seckill not running within ${RUN_WAIT}s"
    }
    sleep 0.3
done
grep -q 'created demo SKU 1' "$RUN_LOG" || die "make run did not create the demo SKU ($(cat "$RUN_LOG"))"
say "make run: seckill is running"

# The tour as the README shows it, on this run's ports and var directory.
sed -e "s#localhost:8080#127.0.0.1:$PORT#g" -e "s#localhost:9464#127.0.0.1:$MPORT#g" \
    -e "s#\([ (\$]\)var/#\1$DIR/var/#g" -e "s#\([ (\$]\)build/#\1$BUILD_DIR/#g" \
    <<<"$TOUR" >"$DIR/tour.sh"
grep -q 'localhost\|[ (]var/\|[ (]build/' "$DIR/tour.sh" && die "the tour names a place this test does not move: $(grep 'localhost\|[ (]var/\|[ (]build/' "$DIR/tour.sh")"
st=0
(cd "$ROOT" && env -u SECKILL_BUYER_TOKEN_SECRET -u SECKILL_PG_DSN -u PGPASSFILE \
    bash -eu -o pipefail "$DIR/tour.sh") >"$DIR/tour.out" 2>&1 || st=$?
cat "$DIR/tour.out"
((st == 0)) || die "the tour failed (exit $st); make run's log: $(tail -n 30 "$RUN_LOG")"
GOT=$(awk '/^[0-9][0-9][0-9]$/ { printf "%s%s", sep, $0; sep = " " }' "$DIR/tour.out")
[[ $GOT == "$WANT_STATUSES" ]] || die "the tour's answers were '$GOT', its comments promise '$WANT_STATUSES'"
grep -q '^(3 rows)$' "$DIR/tour.out" || die "the tour's psql did not show the three orders"
grep -q "\"sold_out\"" "$DIR/tour.out" || die "buyer 4's first order was not sold_out"
grep -Eq '^stock +3$' "$DIR/tour.out" || die "seckillctl sku create did not show SKU 42's 3 units"
grep -Eq '^delta +10$' "$DIR/tour.out" || die "seckillctl sku adjust did not show the +10"
grep -Eq '^42 +phone +10 +10 +0 +no ' "$DIR/tour.out" ||
    die "seckillctl sale status did not show SKU 42 with 10 units in both stores, none in flight"
grep -q '^seckill_sku_stock_db{sku="42"} 10$' "$DIR/tour.out" ||
    die "/metrics did not show SKU 42's 10 units in PostgreSQL"
grep -q '^seckill_sku_stock_available{sku="42"} 10$' "$DIR/tour.out" ||
    die "/metrics did not show SKU 42's 10 units in Redis"
say "the tour: $GOT, as promised"

# Ctrl-C: run.sh stops the daemon and the stack; make exits.
kill -INT -- "-$MAKE_PID"
for ((i = 0; i < STOP_WAIT * 5; i++)); do
    kill -0 "$MAKE_PID" 2>/dev/null || break
    sleep 0.2
done
kill -0 "$MAKE_PID" 2>/dev/null && die "make run still running ${STOP_WAIT}s after Ctrl-C"
wait "$MAKE_PID" 2>/dev/null || true
MAKE_PID=
grep -q 'shutting down' "$RUN_LOG" || die "make run did not shut down on Ctrl-C: $(tail -n 20 "$RUN_LOG")"
left=$(ps -eo pid=,args= | grep -F "$DIR/var" | grep -v grep || true)
[[ -z $left ]] || die "processes left running after Ctrl-C: $left"
say "Ctrl-C stopped make run and its stack"

# ---- 3. links
# slug TEXT: the anchor a heading gets (GitHub's rule: lower case, spaces to
# dashes, every other character but letters, digits, _ and - dropped).
slug() {
    tr '[:upper:]' '[:lower:]' <<<"$1" | sed -e 's/[^a-z0-9 _-]//g' -e 's/ /-/g'
}
anchors() { # anchors FILE: every heading's anchor, outside fenced blocks
    awk '/^```/ { f = !f; next } !f && /^#+ / { sub(/^#+ /, ""); print }' "$1" |
        while IFS= read -r h; do slug "$h"; done
}
bad=0
checked=0
for doc in README.md docs/*.md; do
    dir=$(dirname "$doc")
    while IFS= read -r link; do
        target=${link%%#*}
        frag=
        [[ $link == *"#"* ]] && frag=${link#*#}
        case $target in http://* | https://* | mailto:*) continue ;; esac
        file=$doc
        [[ -n $target ]] && file=$dir/$target
        checked=$((checked + 1))
        if [[ ! -e $file ]]; then
            printf '%s: %s links to %s: no such file\n' "$PROG" "$doc" "$link" >&2
            bad=1
        elif [[ -n $frag && $file == *.md ]] && ! grep -qxF -- "$frag" <<<"$(anchors "$file")"; then
            printf '%s: %s links to %s: no such heading in %s\n' "$PROG" "$doc" "$link" "$file" >&2
            bad=1
        fi
    done < <(awk '/^```/ { f = !f; next } !f' "$doc" | grep -o '\]([^) ]*)' | sed -e 's/^](//' -e 's/)$//')
done
((bad == 0)) || die "broken links (above)"
say "$checked links of README.md and docs/*.md lead somewhere"
say "PASS"

#!/usr/bin/env bash
# The lock library as another project gets it: `make install` into a scratch
# prefix, then only what was installed, found through pkg-config.
#
#  1. the prefix holds exactly the archive, the shared library and its links,
#     the public headers and rlock.pc, and make uninstall removes them all
#     (also when staged with DESTDIR, where rlock.pc still names PREFIX);
#  2. each installed header compiles on its own with pkg-config's flags
#     only, so a public header that includes a service (or private) header
#     fails here;
#  3. every function the headers declare is defined in librlock.a and
#     exported by librlock.so, which exports nothing else;
#  4. examples/lock_counter builds with pkg-config against librlock.so and
#     against librlock.a, and four of them at once (two with the watchdog)
#     add exactly their rounds to a counter under one lock on the test
#     Redis, which is free again at the end; a round that outlives its lease
#     is refused.
#
#   service/rlock/tests/test_install.sh
#
# Env in: SECKILL_TEST_REDIS_ADMIN_URL (scripts/run-tests.sh sets it), BUILD
# (default build), SAN=1 (the objects carry sanitizers: so must the example).
set -euo pipefail

PROG=test_install.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd -P)
EXAMPLES=$ROOT/service/rlock/examples
BUILD_DIR=${BUILD:-build}
URL=${SECKILL_TEST_REDIS_ADMIN_URL:-}

fail() {
    printf '%s: FAIL: %s\n' "$PROG" "$*" >&2
    exit 1
}
say() { printf '%s: %s\n' "$PROG" "$*"; }

[[ $URL == redis://* ]] || fail "SECKILL_TEST_REDIS_ADMIN_URL is unset or not redis://...: '$URL'"
for tool in make cc pkg-config nm readelf ldd redis-cli; do
    command -v "$tool" >/dev/null || fail "$tool is not installed"
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/rlock-install.XXXXXX")
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
cd "$TMP"

# The project's make, on its own (not as a child of the make running the tests).
project_make() {
    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
        make -s -C "$ROOT" BUILD="$BUILD_DIR" SAN="${SAN:-}" "$@" >"$TMP/make.log" 2>&1 ||
        fail "make $*: $(tail -n 20 "$TMP/make.log")"
}

EX_CFLAGS="-O2 -g"
EX_LDFLAGS=
if [[ ${SAN:-} == 1 ]]; then
    EX_CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer"
    EX_LDFLAGS="-fsanitize=address,undefined"
fi

# ---- 1. what make install puts where, and make uninstall takes back
PREFIX=$TMP/prefix
project_make install PREFIX="$PREFIX"
export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig
pkg-config --exists rlock || fail "pkg-config does not find rlock in $PKG_CONFIG_PATH"
VERSION=$(pkg-config --modversion rlock)
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "rlock.pc has no x.y.z version: '$VERSION'"
SONAME=librlock.so.${VERSION%%.*}

expected=$(
    printf '%s\n' lib/librlock.a lib/librlock.so "lib/$SONAME" "lib/librlock.so.$VERSION" \
        lib/pkgconfig/rlock.pc
    for h in "$ROOT"/service/rlock/include/rlock/*.h; do
        printf 'include/rlock/%s\n' "${h##*/}"
    done
)
installed=$(cd "$PREFIX" && find . \( -type f -o -type l \) | sed 's|^\./||')
diff <(sort <<<"$expected") <(sort <<<"$installed") >"$TMP/diff" ||
    fail "installed files differ from the expected (< expected, > installed): $(cat "$TMP/diff")"
[[ $(readlink "$PREFIX/lib/librlock.so") == "$SONAME" &&
    $(readlink "$PREFIX/lib/$SONAME") == "librlock.so.$VERSION" ]] ||
    fail "librlock.so links: $(ls -l "$PREFIX"/lib/librlock.so*)"
readelf -d "$PREFIX/lib/librlock.so.$VERSION" | grep -q "Library soname: \[$SONAME\]" ||
    fail "librlock.so.$VERSION has no soname $SONAME"
[[ $(pkg-config --variable=prefix rlock) == "$PREFIX" ]] || fail "rlock.pc: prefix is not $PREFIX"
requires=$(pkg-config --print-requires rlock)
if ! grep -qx hiredis <<<"$requires" || ! grep -qx libevent <<<"$requires"; then
    fail "rlock.pc does not require hiredis and libevent"
fi
say "installed $(wc -l <<<"$installed") files, version $VERSION, soname $SONAME"

STAGE=$TMP/stage
project_make install DESTDIR="$STAGE" PREFIX=/opt/rlock
[[ -f $STAGE/opt/rlock/lib/librlock.a && -f $STAGE/opt/rlock/include/rlock/rlock.h ]] ||
    fail "DESTDIR: nothing under $STAGE/opt/rlock"
grep -qx 'prefix=/opt/rlock' "$STAGE/opt/rlock/lib/pkgconfig/rlock.pc" ||
    fail "DESTDIR: rlock.pc does not name the final prefix /opt/rlock"
project_make uninstall DESTDIR="$STAGE" PREFIX=/opt/rlock
left=$(find "$STAGE" \( -type f -o -type l \))
[[ -z $left ]] || fail "make uninstall left: $left"
say "DESTDIR staging and uninstall: ok"

# ---- 2. each public header on its own, with pkg-config's flags only
RLOCK_CFLAGS=$(pkg-config --cflags rlock)
for h in "$PREFIX"/include/rlock/*.h; do
    # shellcheck disable=SC2086 # the flags are words
    printf '#include <rlock/%s>\n' "${h##*/}" |
        cc -std=c11 -Wall -Wextra -Werror -fsyntax-only $RLOCK_CFLAGS -x c - 2>"$TMP/cc.log" ||
        fail "<rlock/${h##*/}> does not compile on its own: $(head -n 5 "$TMP/cc.log")"
done
say "each of $(find "$PREFIX"/include/rlock -name '*.h' | wc -l) headers compiles on its own"

# ---- 3. the declared functions are in the archive and the shared library
for h in "$PREFIX"/include/rlock/*.h; do
    printf '#include <rlock/%s>\n' "${h##*/}"
done >"$TMP/all.c"
# shellcheck disable=SC2086
cc -std=c11 -E -P $RLOCK_CFLAGS "$TMP/all.c" |
    grep -oE '\brlock_[a-z0-9_]+[[:space:]]*\(' | sed 's/[[:space:](]//g' | grep -v '_fn$' |
    sort -u >"$TMP/declared"
ndecl=$(wc -l <"$TMP/declared")
((ndecl >= 60)) || fail "only $ndecl functions found in the headers; the parse went wrong"
nm -g --defined-only "$PREFIX/lib/librlock.a" | awk 'NF == 3 && $2 == "T" { print $3 }' |
    sort -u >"$TMP/archive"
nm -D --defined-only "$PREFIX/lib/librlock.so.$VERSION" | awk 'NF == 3 { print $3 }' |
    sort -u >"$TMP/exported"
missing=$(comm -23 "$TMP/declared" "$TMP/archive")
[[ -z $missing ]] || fail "declared but not in librlock.a: $missing"
missing=$(comm -23 "$TMP/declared" "$TMP/exported")
[[ -z $missing ]] || fail "declared but not exported by librlock.so: $missing"
extra=$(comm -13 "$TMP/declared" "$TMP/exported")
[[ -z $extra ]] || fail "librlock.so exports what no header declares: $extra"
say "$ndecl declared functions: all in librlock.a, exactly those exported by librlock.so"

# ---- 4. the example against the installed copy
for link in shared static; do
    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
        make -s -C "$EXAMPLES" BUILD="$TMP/$link" LINK="$link" CFLAGS="$EX_CFLAGS" \
        LDFLAGS="$EX_LDFLAGS" >"$TMP/make.log" 2>&1 ||
        fail "examples, LINK=$link: $(tail -n 20 "$TMP/make.log")"
done
export LD_LIBRARY_PATH=$PREFIX/lib
# ldd's whole output first: `ldd | grep -q` under pipefail fails when grep
# stops reading early and ldd, with a longer (sanitizer) output, gets SIGPIPE.
shared_deps=$(ldd "$TMP/shared/lock_counter") || fail "ldd of the shared example failed"
static_deps=$(ldd "$TMP/static/lock_counter") || true # "not a dynamic executable" is fine
[[ $shared_deps == *"$SONAME => $PREFIX/lib/$SONAME"* ]] ||
    fail "the shared example does not load $PREFIX/lib/$SONAME: $shared_deps"
if [[ $static_deps == *librlock* ]]; then
    fail "the static example loads librlock.so"
fi
say "lock_counter built against librlock.so and librlock.a"

TAG=rlock-install-test:$$
LOCK="$TAG:{counter}:lock"
COUNTER="$TAG:{counter}:count"
# The URL holds a password: it reaches both tools through the environment.
export RLOCK_REDIS_URL=$URL
# redis-cli takes the password from REDISCLI_AUTH (the stack's passwords are
# hex, so nothing in the URL is percent-encoded).
[[ $URL =~ ^redis://(([^:@]*):([^@]*)@)?([^:/@]+):([0-9]+)(/([0-9]+))?$ ]] ||
    fail "cannot split $PROG's Redis URL into user, host, port and database"
R_USER=${BASH_REMATCH[2]:-default} R_PASS=${BASH_REMATCH[3]} R_HOST=${BASH_REMATCH[4]}
R_PORT=${BASH_REMATCH[5]} R_DB=${BASH_REMATCH[7]:-0}
rcli() {
    if [[ -n $R_PASS ]]; then
        REDISCLI_AUTH=$R_PASS redis-cli --user "$R_USER" -h "$R_HOST" -p "$R_PORT" -n "$R_DB" "$@"
    else
        redis-cli -h "$R_HOST" -p "$R_PORT" -n "$R_DB" "$@"
    fi
}
rcli DEL "$LOCK" "$COUNTER" >/dev/null

ROUNDS=20
common=(-k "$LOCK" -c "$COUNTER" -n "$ROUNDS" -s 5 -w 20000)
"$TMP/shared/lock_counter" "${common[@]}" >"$TMP/run1" 2>&1 &
PIDS+=($!)
"$TMP/static/lock_counter" "${common[@]}" >"$TMP/run2" 2>&1 &
PIDS+=($!)
"$TMP/shared/lock_counter" "${common[@]}" -W -t 2000 >"$TMP/run3" 2>&1 &
PIDS+=($!)
"$TMP/static/lock_counter" "${common[@]}" -W -t 2000 >"$TMP/run4" 2>&1 &
PIDS+=($!)
for i in "${!PIDS[@]}"; do
    wait "${PIDS[$i]}" || fail "lock_counter run $((i + 1)) exited $?: $(cat "$TMP/run$((i + 1))")"
done
PIDS=()
count=$(rcli GET "$COUNTER")
[[ $count == $((4 * ROUNDS)) ]] ||
    fail "counter is '$count' after 4 x $ROUNDS locked increments: $(cat "$TMP"/run*)"
[[ $(rcli EXISTS "$LOCK") == 0 ]] || fail "the lock key $LOCK is still there"
say "4 processes x $ROUNDS rounds under one lock: counter $count, lock released"

# The watchdog keeps a lock whose round outlives its lease ...
out=$("$TMP/shared/lock_counter" -k "$LOCK" -c "$COUNTER" -W -t 300 -s 500 2>&1) ||
    fail "a watched lock held past its lease: $out"
grep -qE 'renewed [1-9]' <<<"$out" || fail "the watchdog renewed nothing: $out"
# ... and without it the round is refused, not written.
if out=$("$TMP/static/lock_counter" -k "$LOCK" -c "$COUNTER" -t 100 -s 300 2>&1); then
    fail "a round that outlived its lease succeeded: $out"
fi
grep -q 'ran out before the write' <<<"$out" || fail "unexpected failure: $out"
[[ $(rcli GET "$COUNTER") == $((4 * ROUNDS + 1)) ]] ||
    fail "counter $(rcli GET "$COUNTER"): the refused round wrote, or the watched one did not"
[[ $(rcli EXISTS "$LOCK") == 0 ]] || fail "the lock key $LOCK is still there"
say "a watched lock outlives its lease; an unwatched round past its lease is refused"

rcli DEL "$LOCK" "$COUNTER" >/dev/null
say "ok"

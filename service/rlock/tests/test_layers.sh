#!/usr/bin/env bash
# The lock library's layering, checked from its sources and its objects:
#
#  1. modules do not include each other in a circle: a module is src/X.c
#     with its public header include/rlock/X.h (src/internal.c with
#     src/internal.h); A depends on B when A's .c or .h includes B's header;
#  2. objects do not call each other in a circle: A depends on B when A uses
#     a symbol B defines (nm), which also catches a call declared in a
#     header that does not belong to its module;
#  3. the library includes nothing outside service/rlock/ with "...", and
#     its public headers never include the private one.
#
#   service/rlock/tests/test_layers.sh      (BUILD, default build: the objects)
#
# Prints the layers bottom-up; exits 1 naming what is wrong.
set -euo pipefail

PROG=test_layers.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd -P)
cd "$ROOT"
LIB=service/rlock
BUILD_DIR=${BUILD:-build}
OBJ_DIR=$BUILD_DIR/$LIB/src

fail=0
bad() {
    printf '%s: %s\n' "$PROG" "$*" >&2
    fail=1
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/rlock-layers.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# module FILE: the module a library file belongs to (its base name).
module() {
    local m=${1##*/}
    printf '%s\n' "${m%.*}"
}

# ---- 1 and 3: includes
: >"$TMP/includes"
for f in "$LIB"/src/*.c "$LIB"/src/*.h "$LIB"/include/rlock/*.h; do
    while IFS= read -r h; do
        target=
        for d in "$(dirname "$f")" "$LIB/include" "$LIB/src"; do
            if [[ -f $d/$h ]]; then
                target=$d/$h
                break
            fi
        done
        if [[ -z $target ]]; then
            bad "$f includes \"$h\", which is not a header of the library"
            continue
        fi
        if [[ $f == "$LIB"/include/* && $target == "$LIB"/src/* ]]; then
            bad "public header $f includes the private $target"
        fi
        from=$(module "$f") to=$(module "$target")
        [[ $from == "$to" ]] || printf '%s %s\n' "$to" "$from" >>"$TMP/includes"
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done

# check_order NAME FILE: tsort FILE (edges "lower upper"); prints the order.
check_order() {
    local order
    if ! order=$(sort -u "$2" | tsort 2>"$TMP/tsort.err"); then
        bad "$1 in a circle:$(sed -n 's/^tsort: / /p' "$TMP/tsort.err" | grep -v 'input contains a loop' | tr -d '\n')"
        return
    fi
    printf '%s: %s, bottom up: %s\n' "$PROG" "$1" "$(printf '%s\n' "$order" | tr '\n' ' ')"
}
check_order "modules by includes" "$TMP/includes"

# ---- 2: symbols between the objects
shopt -s nullglob
objs=("$OBJ_DIR"/*.o)
if ((${#objs[@]} == 0)); then
    bad "no objects in $OBJ_DIR (build first: make BUILD=$BUILD_DIR all)"
else
    : >"$TMP/defs"
    for o in "${objs[@]}"; do
        nm -g --defined-only "$o" | awk -v m="$(module "$o")" 'NF == 3 { print $3, m }' >>"$TMP/defs"
    done
    sort -u "$TMP/defs" -o "$TMP/defs"
    : >"$TMP/calls"
    for o in "${objs[@]}"; do
        nm -u "$o" | awk '{ print $NF }' | sort -u |
            join - "$TMP/defs" | awk -v m="$(module "$o")" '$2 != m { print $2, m }' >>"$TMP/calls"
    done
    check_order "objects by symbols" "$TMP/calls"
fi

exit "$fail"

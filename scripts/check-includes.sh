#!/usr/bin/env bash
# Fails when two modules, or two folders, include each other in a circle.
#
#   scripts/check-includes.sh
#
# A module is a .c file and its .h (service/order/order.c + order.h); in the
# lock library a source in src/ and its public header in include/rlock/ are one
# module (src/async.c + include/rlock/async.h).  Module A depends on module B
# when A's .c or .h includes B's .h.  A folder depends on
# another when one of its files includes a file of the other.  Both graphs
# must be acyclic: tsort(1) finds a circle, and this script names its members.
# Includes are resolved the way the Makefile's -I flags resolve them: next to
# the including file first, then service/, the lock library's include/ and
# src/, loadtest/ and service/tests/.  System headers are not followed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
SEARCH=(service service/rlock/include service/rlock/src loadtest service/tests)

mods=$(mktemp)
dirs=$(mktemp)
trap 'rm -f "$mods" "$dirs"' EXIT

# resolve FILE HEADER: prints the repository path HEADER names, or nothing.
resolve() {
    local d
    for d in "$(dirname "$1")" "${SEARCH[@]}"; do
        if [[ -f $d/$2 ]]; then
            realpath --relative-to="$ROOT" "$d/$2"
            return
        fi
    done
}

# module PATH: the module a file belongs to.
module() {
    local m=${1%.*}
    case $m in
    service/rlock/include/rlock/* | service/rlock/src/* | service/rlock/rlock*)
        m=${m##*/}
        [[ $m == rlock ]] || m=${m#rlock_}
        m=service/rlock/$m
        ;;
    esac
    printf '%s\n' "$m"
}

nfiles=0
while IFS= read -r f; do
    nfiles=$((nfiles + 1))
    from=$(module "$f")
    while IFS= read -r h; do
        to=$(resolve "$f" "$h")
        [[ -n $to ]] || continue
        fd=$(dirname "$f") td=$(dirname "$to")
        to=$(module "$to")
        [[ $to == "$from" ]] || printf '%s %s\n' "$from" "$to" >>"$mods"
        [[ $fd == "$td" ]] || printf '%s %s\n' "$fd" "$td" >>"$dirs"
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]\([^>"]*\)[>"].*/\1/p' "$f")
done < <(git ls-files '*.c' '*.h')

rc=0
for g in "$mods:modules" "$dirs:folders"; do
    file=${g%%:*} what=${g#*:}
    if ! out=$(sort -u "$file" | tsort 2>&1 >/dev/null); then
        printf 'check-includes: %s include each other in a circle:\n%s\n' "$what" \
            "$(printf '%s\n' "$out" | sed -n 's/^tsort: /  /p' | grep -v 'input contains a loop')" >&2
        rc=1
    fi
done
((rc == 0)) && printf 'check-includes: %d files, %d module edges, %d folder edges, no circles\n' \
    "$nfiles" "$(sort -u "$mods" | wc -l)" "$(sort -u "$dirs" | wc -l)"
exit "$rc"

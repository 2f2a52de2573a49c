#!/usr/bin/env bash
# Fails when an include runs against the layers, or two modules or two folders
# include each other in a circle.
#
#   scripts/check-includes.sh
#
# The layers (docs/ARCHITECTURE.md), each including only those after it and
# the lock library's public headers (service/rlock/include/rlock/):
#
#   daemon, ctl > http > order > sku > store > core > rlock
#
# Besides:
#   - in http/ only the handlers (handle_*, and metrics_cache, the text
#     handle_metrics serves) reach order/ and sku/: the transport (server,
#     the parsers, routes, limits) knows nothing of the business;
#   - the lock library includes nothing of the service;
#   - the load test (loadtest/) is a client: it may include the service's
#     pure modules only, core/ and order/order.h, and the lock library's
#     public headers; http_ceiling.c, which measures seckilld's own HTTP
#     server, also http/server.h;
#   - the tests, the fuzz targets and the tools may include any layer.
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
layers=$(mktemp)
trap 'rm -f "$mods" "$dirs" "$layers"' EXIT

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

# rank PATH: sets r to the layer of a service file, higher including lower;
# "" for files the layers do not bind (tests, fuzz targets, tools, the lock
# library, the load test: they have rules of their own).
rank() {
    case $1 in
    service/daemon/* | service/ctl/*) r=6 ;;
    service/http/*) r=5 ;;
    service/order/*) r=4 ;;
    service/sku/*) r=3 ;;
    service/store/*) r=2 ;;
    service/core/*) r=1 ;;
    *) r= ;;
    esac
}

# layer_check FILE TARGET: sets why to the reason FILE may not include
# TARGET, or "".  (No subshells: it runs once per include.)
layer_check() {
    local f=$1 to=$2 from_rank
    why=
    case $to in
    service/rlock/include/rlock/*) return ;; # the lock library's public headers: any layer
    esac
    case $f in
    service/rlock/*)
        [[ $to == service/rlock/* ]] || why="the lock library includes nothing of the service"
        return
        ;;
    loadtest/*)
        case $to in
        loadtest/* | service/core/* | service/order/order.h) return ;;
        service/http/server.h) [[ $f == loadtest/http_ceiling.c ]] && return ;;
        esac
        why="the load test may include core/, order/order.h and rlock/ only (a client, not the daemon)"
        return
        ;;
    esac
    rank "$f"
    from_rank=$r
    [[ -n $from_rank ]] || return 0
    if [[ $to == service/rlock/* ]]; then
        why="the lock library's internals are its own: include rlock/<name>.h"
        return
    fi
    rank "$to"
    if [[ -z $r || $r -gt $from_rank ]]; then
        why="a layer includes only the layers below it (daemon > http > order > sku > store > core)"
        return
    fi
    if [[ $f == service/http/* && ($to == service/order/* || $to == service/sku/*) ]]; then
        case ${f##*/} in
        handle_* | metrics_cache.*) ;;
        *) why="in http/ only the handlers (handle_*, metrics_cache) reach order/ and sku/" ;;
        esac
    fi
}

nfiles=0
while IFS= read -r f; do
    nfiles=$((nfiles + 1))
    from=$(module "$f")
    while IFS= read -r h; do
        to=$(resolve "$f" "$h")
        [[ -n $to ]] || continue
        layer_check "$f" "$to"
        [[ -z $why ]] || printf '  %s includes %s: %s\n' "$f" "$to" "$why" >>"$layers"
        fd=$(dirname "$f") td=$(dirname "$to")
        to=$(module "$to")
        [[ $to == "$from" ]] || printf '%s %s\n' "$from" "$to" >>"$mods"
        [[ $fd == "$td" ]] || printf '%s %s\n' "$fd" "$td" >>"$dirs"
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]\([^>"]*\)[>"].*/\1/p' "$f")
done < <(git ls-files '*.c' '*.h')

rc=0
if [[ -s $layers ]]; then
    printf 'check-includes: includes against the layers:\n%s\n' "$(cat "$layers")" >&2
    rc=1
fi
for g in "$mods:modules" "$dirs:folders"; do
    file=${g%%:*} what=${g#*:}
    if ! out=$(sort -u "$file" | tsort 2>&1 >/dev/null); then
        printf 'check-includes: %s include each other in a circle:\n%s\n' "$what" \
            "$(printf '%s\n' "$out" | sed -n 's/^tsort: /  /p' | grep -v 'input contains a loop')" >&2
        rc=1
    fi
done
((rc == 0)) && printf 'check-includes: %d files, %d module edges, %d folder edges, layers kept, no circles\n' \
    "$nfiles" "$(sort -u "$mods" | wc -l)" "$(sort -u "$dirs" | wc -l)"
exit "$rc"

#!/usr/bin/env bash
# scripts/check-includes.sh keeps the layers, not only the absence of
# circles: on a copy of the tree's sources, the load test reaching into the
# daemon's Redis client (store/) and the HTTP server including the order
# desk must each fail it, named.  (That the tree itself passes is make
# test's own call of the script.)  Needs no stack.
#
#   service/tests/test_check_includes.sh
set -euo pipefail

PROG=test_check_includes.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
die() {
    printf '%s: FAIL: %s\n' "$PROG" "$*" >&2
    exit 1
}

copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
(cd "$ROOT" && git ls-files -z '*.c' '*.h' scripts/check-includes.sh |
    xargs -0 cp --parents -t "$copy")
git -C "$copy" init -q
sed -i 's|^#include "lt_redis.h"$|&\n#include "store/redis_conn.h"|' "$copy/loadtest/lt_load.c"
sed -i 's|^#include "store/workers.h"$|&\n#include "order/order_desk.h"|' "$copy/service/http/server.h"
grep -q '"store/redis_conn.h"' "$copy/loadtest/lt_load.c" || die "could not plant the load test's include"
grep -q '"order/order_desk.h"' "$copy/service/http/server.h" || die "could not plant the server's include"
git -C "$copy" add -A

if out=$("$copy/scripts/check-includes.sh" 2>&1); then
    die "check-includes passed a tree whose load test includes store/: $out"
fi
grep -q 'loadtest/lt_load.c includes service/store/redis_conn.h' <<<"$out" ||
    die "the load test's include of store/ is not named: $out"
grep -q 'service/http/server.h includes service/order/order_desk.h' <<<"$out" ||
    die "the server's include of order/ is not named: $out"
printf '%s: ok (both refused)\n' "$PROG"

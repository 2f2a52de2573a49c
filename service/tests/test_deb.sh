#!/usr/bin/env bash
# The Debian packages, built, installed and removed on this machine, their
# programs run against the test stack (scripts/run-tests.sh starts it and
# exports SECKILL_TEST_*):
#
#  1. `make deb` builds seckill, librlock0 and librlock-dev (reused while no
#     source changed) and lintian finds no error or warning not overridden;
#  2. dpkg installs them: the system user seckill exists, the conffile and the
#     secrets the package makes (mode 600, the user's) are there, the units
#     pass `systemd-analyze verify`, librlock-dev is usable (pkg-config rlock);
#  3. the installed seckilld migrates as seckilld-migrate.service would (as
#     the user seckill, the owner's credentials from files of their own), then
#     serves as seckilld.service would, as the user seckill with a copy of the
#     conffile (its secret paths moved to a test copy): an SKU is created, an
#     order placed (201), the installed seckillctl signs the buyer's token and
#     reconciles the SKU (Redis and PostgreSQL agree); SIGTERM stops it cleanly;
#  4. dpkg -r leaves the conffile and the secrets, and nothing else; dpkg -P
#     leaves nothing, the user included.
#
# Needs root (dpkg).  Refuses to run when a seckill package, a user or group
# seckill, or /etc/seckill is there already: this test removes what it installs.
# Under SAN=1 it does nothing (the packages are built without sanitizers; the
# plain run covers them).
#
#   service/tests/test_deb.sh
set -euo pipefail

PROG=test_deb.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
cd "$ROOT"
# shellcheck source=scripts/stack-env.sh
source "$ROOT/scripts/stack-env.sh"

die() {
    printf '%s: FAIL: %s\n' "$PROG" "$*" >&2
    exit 1
}
say() { printf '%s: %s\n' "$PROG" "$*"; }

if [[ ${SAN:-0} == 1 ]]; then
    say "SKIP under SAN=1: the packages are built with Debian's flags, not the sanitizers (the plain run covers them)"
    exit 0
fi
for v in SECKILL_TEST_DAEMON SECKILL_TEST_REDIS_URL SECKILL_TEST_REDIS_ADMIN_URL SECKILL_TEST_PG_DSN \
    SECKILL_TEST_PG_ADMIN_DSN SECKILL_TEST_STACK_DIR SECKILL_TEST_REDIS_PORT PGPASSFILE; do
    [[ -n ${!v:-} ]] || die "$v is not set (run me through scripts/run-tests.sh)"
done
[[ $(id -u) -eq 0 ]] || die "installs packages with dpkg: run as root"
for tool in curl psql dpkg lintian systemd-analyze setpriv pkg-config; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (scripts/deps.sh installs it)"
done

PACKAGES=(seckill librlock0 librlock-dev)
# installed PKG: dpkg knows PKG in any state but "not installed" (config-files counts).
installed() {
    local st
    st=$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null) || return 1
    [[ $st != un* && -n ${st// /} ]]
}
for p in "${PACKAGES[@]}"; do
    ! installed "$p" || die "package $p is already installed, not by this test: remove it first (dpkg -P $p), or run the test on another machine"
done
! getent passwd seckill >/dev/null || die "a user seckill exists already: this test's purge would delete it"
! getent group seckill >/dev/null || die "a group seckill exists already: this test's purge would delete it"
[[ ! -e /etc/seckill ]] || die "/etc/seckill exists already: this test's purge would delete it"
CHECKED=1

BUILD_DIR=$(dirname "$SECKILL_TEST_DAEMON")
ADMIN_TOKEN=
SKU=2828
TMP=$(mktemp -d "${TMPDIR:-/tmp}/seckill-deb.XXXXXX")
DAEMON_PID=
INSTALLED=0
CHECKED=0
cleanup() {
    local rc=$?
    trap - EXIT
    if [[ -n $DAEMON_PID ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
        kill -KILL "$DAEMON_PID" 2>/dev/null || true
        wait "$DAEMON_PID" 2>/dev/null || true
    fi
    if ((INSTALLED)); then
        dpkg -P "${PACKAGES[@]}" >/dev/null 2>&1 ||
            printf '%s: warning: dpkg -P %s failed\n' "$PROG" "${PACKAGES[*]}" >&2
    fi
    # None was there before (checked below): a purge that failed to remove
    # them must not leave them to the next run's refusal.
    if ((CHECKED)) && getent passwd seckill >/dev/null; then
        printf '%s: warning: removing the user seckill the purge left\n' "$PROG" >&2
        userdel seckill >/dev/null 2>&1 || true
    fi
    if ((CHECKED)) && getent group seckill >/dev/null; then
        groupdel seckill >/dev/null 2>&1 || true
    fi
    rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT

# ---- 1. build, lintian (make deb runs it: --fail-on error,warning)
say "make deb (BUILD=$BUILD_DIR)"
start=$SECONDS
make -s -C "$ROOT" BUILD="$BUILD_DIR" deb >"$TMP/build.log" 2>&1 || {
    tail -n 40 "$TMP/build.log" >&2
    die "make deb failed (lintian's findings, if any, are above)"
}
VERSION=$(dpkg-parsechangelog -l "$ROOT/debian/changelog" -S Version)
ARCH=$(dpkg --print-architecture)
DEBS=()
for p in "${PACKAGES[@]}"; do
    f=$BUILD_DIR/deb/${p}_${VERSION}_$ARCH.deb
    [[ -f $f ]] || die "make deb did not make $f"
    DEBS+=("$f")
done
say "built and lintian-clean in $((SECONDS - start)) s: ${DEBS[*]##*/}"

# ---- 2. install
INSTALLED=1
dpkg -i "${DEBS[@]}" >"$TMP/dpkg-i.log" 2>&1 || {
    cat "$TMP/dpkg-i.log" >&2
    die "dpkg -i failed"
}
for f in /usr/sbin/seckilld /usr/bin/seckillctl /usr/bin/seckill-loadtest; do
    [[ -x $f ]] || die "$f is not installed"
done
getent passwd seckill >/dev/null || die "the package made no user seckill"
[[ $(getent passwd seckill | cut -d: -f7) == */nologin ]] || die "the user seckill has a login shell"
[[ $(dpkg-query -W -f='${Conffiles}' seckill) == *" /etc/seckill/seckilld.conf "* ]] ||
    die "/etc/seckill/seckilld.conf is not a conffile"
[[ $(stat -c '%a %U:%G' /etc/seckill/secrets) == "750 root:seckill" ]] ||
    die "/etc/seckill/secrets is $(stat -c '%a %U:%G' /etc/seckill/secrets), not 750 root:seckill"
for s in admin_token buyer_token_secret; do
    f=/etc/seckill/secrets/$s
    [[ $(stat -c '%a %U' "$f") == "600 seckill" ]] || die "$f is $(stat -c '%a %U' "$f"), not 600 seckill"
    [[ $(wc -c <"$f") -ge 33 ]] || die "$f holds less than 32 bytes"
done
[[ $(cat /etc/seckill/secrets/admin_token) != "$(cat /etc/seckill/secrets/buyer_token_secret)" ]] ||
    die "the admin token and the buyer token secret are the same"
# The man pages and /bin/kill of ExecReload must be there: verify checks both.
systemd-analyze verify /lib/systemd/system/seckilld-migrate.service \
    /lib/systemd/system/seckilld.service >"$TMP/verify.log" 2>&1 || {
    cat "$TMP/verify.log" >&2
    die "systemd-analyze verify refused the units"
}
[[ ! -s $TMP/verify.log ]] || die "systemd-analyze verify complained: $(cat "$TMP/verify.log")"
# shellcheck disable=SC2016  # $MAINPID is the unit's, not this shell's
for want in Type=notify User=seckill NoNewPrivileges=yes ProtectSystem=strict PrivateTmp=yes \
    'CapabilityBoundingSet=$' MemoryDenyWriteExecute=yes LimitNOFILE= Requires=seckilld-migrate.service \
    'ExecReload=/bin/kill -HUP \$MAINPID'; do
    grep -q "^$want" /lib/systemd/system/seckilld.service || die "seckilld.service has no $want"
done
[[ $(pkg-config --modversion rlock) == "$(sed -n 's/^RLOCK_VERSION *:= *//p' service/rlock/rlock.mk)" ]] ||
    die "pkg-config finds no rlock of the library's version"
cat >"$TMP/uses_rlock.c" <<'EOF'
#include <rlock/url.h>
int main(void)
{
    struct rlock_url u;
    char err[128];
    return rlock_url_parse("redis://127.0.0.1:6379/0", &u, err, sizeof err) != 0 || u.port != 6379;
}
EOF
# shellcheck disable=SC2046  # pkg-config's words are separate flags
cc -o "$TMP/uses_rlock" "$TMP/uses_rlock.c" $(pkg-config --cflags --libs rlock) ||
    die "a program cannot be built against the installed librlock-dev"
"$TMP/uses_rlock" || die "a program built against librlock-dev fails (rlock_url_parse)"
[[ $(ldd "$TMP/uses_rlock") == *"librlock.so.0 => /"*"/librlock.so.0 ("* ]] ||
    die "the program does not load the installed librlock.so.0: $(ldd "$TMP/uses_rlock")"
say "installed: user seckill, the conffile, secrets 600, units verified, librlock-dev builds a program"

# ---- 3. the installed programs, as the user seckill, against the test stack.
# A copy of the conffile whose secret paths point to TMP/etc/secrets (as the
# package's /etc/seckill/secrets: 750 root:seckill, files 600 seckill), and
# TMP/cred, what LoadCredential= hands the migration.
chmod 711 "$TMP"
mkdir -p "$TMP/etc/secrets" "$TMP/cred"
sed "s|/etc/seckill/secrets/|$TMP/etc/secrets/|" /etc/seckill/seckilld.conf >"$TMP/etc/seckilld.conf"
put_secret() { # put_secret FILE VALUE
    (umask 077 && printf '%s\n' "$2" >"$1")
    chown seckill:seckill "$1"
}
# shellcheck disable=SC2001  # a pattern, not a fixed string
strip_passfile() { sed "s/ *passfile='[^']*'//" <<<"$1"; }
cp -p /etc/seckill/secrets/admin_token /etc/seckill/secrets/buyer_token_secret "$TMP/etc/secrets/"
install -m 600 -o seckill -g seckill "$PGPASSFILE" "$TMP/etc/secrets/pgpass"
put_secret "$TMP/etc/secrets/redis_url" "$SECKILL_TEST_REDIS_URL"
put_secret "$TMP/etc/secrets/pg_dsn" "$(strip_passfile "$SECKILL_TEST_PG_DSN") passfile='$TMP/etc/secrets/pgpass'"
owner_passfile=$(sed -n "s/.*passfile='\([^']*\)'.*/\1/p" <<<"$SECKILL_MIGRATE_PG_DSN")
[[ -n $owner_passfile ]] || die "the stack's SECKILL_MIGRATE_PG_DSN names no passfile"
install -m 600 -o seckill -g seckill "$owner_passfile" "$TMP/cred/pgpass"
put_secret "$TMP/cred/migrate_pg_dsn" "$(strip_passfile "$SECKILL_MIGRATE_PG_DSN") passfile='$TMP/cred/pgpass'"
put_secret "$TMP/cred/migrate_redis_url" "$SECKILL_TEST_REDIS_ADMIN_URL"
chown root:seckill "$TMP/etc/secrets" "$TMP/cred"
chmod 750 "$TMP/etc/secrets" "$TMP/cred"
ADMIN_TOKEN=$(cat "$TMP/etc/secrets/admin_token")

# as_seckill CMD...: CMD as the user seckill with nothing of this shell's
# environment (the stack's SECKILL_* would override the conffile) but its copy.
# An array, not a function: started in the background, $! is then the
# daemon itself (setpriv and env exec it), not a subshell above it.
AS_SECKILL=(setpriv --reuid=seckill --regid=seckill --init-groups
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SECKILL_CONFIG="$TMP/etc/seckilld.conf")
as_seckill() { "${AS_SECKILL[@]}" "$@"; }

# The other tests' leftovers go, the Redis Functions library with them: the
# installed migrate must load it again.
[[ $(se_redis_admin "$SECKILL_TEST_STACK_DIR" "$SECKILL_TEST_REDIS_PORT" FLUSHALL) == OK ]] ||
    die "FLUSHALL failed"
psql -q -X -v ON_ERROR_STOP=1 "$SECKILL_TEST_PG_ADMIN_DSN" \
    -c 'TRUNCATE stock_ledger, order_cancel_requests, orders, sku_epochs, skus RESTART IDENTITY' >/dev/null ||
    die "TRUNCATE failed"
as_seckill /usr/sbin/seckilld --migrate_pg_dsn_file="$TMP/cred/migrate_pg_dsn" \
    --migrate_redis_url_file="$TMP/cred/migrate_redis_url" migrate >"$TMP/migrate.log" 2>&1 || {
    cat "$TMP/migrate.log" >&2
    die "the installed seckilld migrate failed as the user seckill"
}

PORT=
MPORT=
for ((try = 0; try < 5; try++)); do
    PORT=$(se_free_port) || die "no free port"
    MPORT=$(se_free_port "$PORT") || die "no free port"
    sed -i -e "s|^http_addr = .*|http_addr = 127.0.0.1:$PORT|" \
        -e "s|^metrics_addr = .*|metrics_addr = 127.0.0.1:$MPORT|" "$TMP/etc/seckilld.conf"
    "${AS_SECKILL[@]}" /usr/sbin/seckilld serve 2>>"$TMP/daemon.log" &
    DAEMON_PID=$!
    for ((i = 0; i < 200; i++)); do
        kill -0 "$DAEMON_PID" 2>/dev/null || break
        curl -s -o /dev/null "http://127.0.0.1:$MPORT/healthz" &&
            curl -s -o /dev/null "http://127.0.0.1:$PORT/healthz" && break 2
        sleep 0.05
    done
    kill -KILL "$DAEMON_PID" 2>/dev/null || true
    wait "$DAEMON_PID" 2>/dev/null || true
    DAEMON_PID=
done
[[ -n $DAEMON_PID ]] || {
    cat "$TMP/daemon.log" >&2
    die "the installed seckilld did not start as the user seckill"
}
[[ $(stat -c %U "/proc/$DAEMON_PID") == seckill ]] || die "seckilld does not run as the user seckill"
[[ $(readlink "/proc/$DAEMON_PID/exe") == /usr/sbin/seckilld ]] || die "the daemon is not /usr/sbin/seckilld"

status=$(curl -s -o "$TMP/body" -w '%{http_code}' -H "Authorization: Bearer $ADMIN_TOKEN" \
    --json "{\"id\":$SKU,\"name\":\"packaged\",\"stock\":2,\"per_user_limit\":1,\"payment_window_s\":900}" \
    "http://127.0.0.1:$MPORT/admin/v1/skus")
[[ $status == 201 ]] || die "creating SKU $SKU with the package's admin token: $status $(cat "$TMP/body")"
token=$(as_seckill /usr/bin/seckillctl token --user 7) || die "the installed seckillctl token failed"
status=$(curl -s -o "$TMP/body" -w '%{http_code}' -H "Authorization: Bearer $token" --json '{"qty":1}' \
    "http://127.0.0.1:$PORT/api/v1/skus/$SKU/orders")
[[ $status == 201 ]] || die "an order through the installed seckilld: $status $(cat "$TMP/body")"
rows=$(psql -X -A -t -v ON_ERROR_STOP=1 "$SECKILL_TEST_PG_ADMIN_DSN" \
    -c "select count(*) from orders where sku_id = $SKU and user_id = 7") || die "psql failed"
[[ $rows == 1 ]] || die "the order is not in PostgreSQL (rows: $rows)"
as_seckill /usr/bin/seckillctl reconcile --sku "$SKU" >"$TMP/reconcile.log" 2>&1 || {
    cat "$TMP/reconcile.log" >&2
    die "the installed seckillctl reconcile --sku $SKU failed"
}
kill -TERM "$DAEMON_PID"
st=0
wait "$DAEMON_PID" || st=$?
DAEMON_PID=
((st == 0)) || {
    cat "$TMP/daemon.log" >&2
    die "seckilld did not exit cleanly on SIGTERM (status $st)"
}
say "installed seckilld migrated and served as seckill: order 201, seckillctl token and reconcile, clean stop"

# ---- 4. remove: the configuration stays; purge: nothing stays
dpkg -r "${PACKAGES[@]}" >"$TMP/dpkg-r.log" 2>&1 || {
    cat "$TMP/dpkg-r.log" >&2
    die "dpkg -r failed"
}
for f in /usr/sbin/seckilld /usr/bin/seckillctl /usr/bin/seckill-loadtest /lib/systemd/system/seckilld.service \
    /lib/systemd/system/seckilld-migrate.service /usr/include/rlock /usr/lib/*/librlock.so.0; do
    [[ ! -e $f ]] || die "$f is still there after dpkg -r"
done
[[ -f /etc/seckill/seckilld.conf ]] || die "dpkg -r removed the conffile"
[[ -f /etc/seckill/secrets/admin_token ]] || die "dpkg -r removed the secrets"
[[ $(dpkg-query -W -f='${db:Status-Abbrev}' seckill) == rc* ]] || die "seckill is not in state config-files after dpkg -r"
dpkg -P "${PACKAGES[@]}" >"$TMP/dpkg-p.log" 2>&1 || {
    cat "$TMP/dpkg-p.log" >&2
    die "dpkg -P failed"
}
INSTALLED=0
[[ ! -e /etc/seckill ]] || die "/etc/seckill is still there after dpkg -P: $(find /etc/seckill)"
! getent passwd seckill >/dev/null || die "the user seckill is still there after dpkg -P"
! getent group seckill >/dev/null || die "the group seckill is still there after dpkg -P"
for p in "${PACKAGES[@]}"; do
    ! installed "$p" || die "dpkg still knows $p after dpkg -P"
done
[[ -z $(find /var/lib/systemd/deb-systemd-helper-enabled -name 'seckilld*' 2>/dev/null) ]] ||
    die "deb-systemd-helper still remembers seckilld after dpkg -P"
say "removed (conffile and secrets kept), purged (nothing left, the user included)"
say "PASS"

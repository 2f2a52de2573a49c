#!/usr/bin/env bash
# Install the Debian packages this project needs, if any are missing, the
# OpenAPI validator's npm packages (scripts/openapi, from its package-lock.json)
# and promtool (var/tools/bin/promtool, unpacked from Debian's prometheus
# package, never installed: that would start a Prometheus server).
# Prints one line when everything is already present.
#
# Env: VALGRIND=1 also requires valgrind (used by `VALGRIND=1 make test`).
#      FUZZ=1 also requires clang and its libFuzzer runtime (used by `make fuzz`).
set -euo pipefail

PROG=deps.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OPENAPI_DIR=$ROOT/scripts/openapi
PACKAGES=(
    build-essential pkg-config
    libhiredis-dev libevent-dev libpq-dev libjansson-dev
    libssl-dev # libcrypto: HMAC-SHA256 of buyer tokens
    zlib1g-dev # /metrics compressed once per refresh for scrapers that accept gzip
    check libsubunit-dev
    redis-server postgresql # redis-server pulls in redis-tools: redis-cli, and its --cluster create
    redis-sentinel # SECKILL_REDIS_TOPOLOGY=sentinel: scripts/stack.sh's Sentinels
    patroni etcd-server # SECKILL_PG_TOPOLOGY=ha: scripts/stack/patroni.sh's PostgreSQL cluster and its store
    pgbouncer           # SECKILL_PGBOUNCER=1: the connection pooler in front of PostgreSQL
    haproxy        # `make run INSTANCES=N`: the load balancer in front of the daemons
    curl ca-certificates
    iproute2 # ss, used by scripts/run-tests.sh to find free ports
    jq procps # scripts/faults.sh reads the load generator's JSON, finds PostgreSQL's children
    spin      # `make model`: the protocol's Promela model (spin generates C, gcc compiles it)
    chromium  # service/tests/test_api_html.sh opens docs/api.html in it, headless
    debhelper lintian # `make deb` (debian/) and service/tests/test_deb.sh's check of the packages
    systemd           # systemd-analyze verify of the packaged units (PID 1 need not be systemd)
)
if [[ ${VALGRIND:-0} == 1 ]]; then
    PACKAGES+=(valgrind)
fi
# Only on request: clang and LLVM take some 400 MB, and `make test` replays the
# fuzz targets' seeds with the normal compiler.  libclang-rt-dev holds
# libclang_rt.fuzzer (and the sanitizer runtimes); llvm the symbolizer that
# turns sanitizer reports into file:line.
if [[ ${FUZZ:-0} == 1 ]]; then
    PACKAGES+=(clang libclang-rt-dev llvm)
fi
# The OpenAPI validator (scripts/openapi/validate.js) runs on Node.js.  Debian's
# nodejs and npm are required only when the node / npm commands are missing, not
# as packages: a machine that already has Node.js from elsewhere keeps it.
# NodeSource's nodejs package bundles npm and conflicts with Debian's npm package
# (installing it would fail or replace their Node), and nvm's Node is no package
# at all, so dpkg-query cannot be the test here.
if ! command -v node >/dev/null 2>&1; then
    PACKAGES+=(nodejs)
fi
if ! command -v npm >/dev/null 2>&1; then
    PACKAGES+=(npm)
fi

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    printf '%s: error: dpkg-query/apt-get not found; this script supports Debian/Ubuntu only.\n' "$PROG" >&2
    printf '%s: install these packages (or equivalents) by hand: %s\n' "$PROG" "${PACKAGES[*]}" >&2
    exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    if [[ $status != "install ok installed" ]]; then
        missing+=("$p")
    fi
done

# The validator's npm packages: `npm ci` (exactly the lock file's versions) when
# node_modules is missing or older than package-lock.json (a pull changed it).
# Sets openapi_installed=1 when it installed them.
openapi_installed=0
openapi_deps() {
    local modules=$OPENAPI_DIR/node_modules lock=$OPENAPI_DIR/package-lock.json
    if [[ -d $modules && ! $lock -nt $modules ]]; then
        return 0
    fi
    if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)'; then
        printf '%s: error: the OpenAPI validator needs Node.js 18 or newer, not %s\n' "$PROG" \
            "$(node --version)" >&2
        exit 1
    fi
    printf '%s: installing the OpenAPI validator (npm ci in scripts/openapi)\n' "$PROG"
    (cd "$OPENAPI_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    touch "$modules" # npm ci may reuse the directory: mark it newer than the lock file
    openapi_installed=1
}

# promtool checks /metrics in `make test` (service/tests/test_metrics.sh).
# Debian ships it only inside the prometheus package, whose installation would
# start (and enable) a Prometheus server, so the package is downloaded and only
# promtool is unpacked into the project.  Sets promtool_installed=1 when it did.
PROMTOOL=$ROOT/var/tools/bin/promtool
promtool_installed=0
promtool_dep() {
    if [[ -x $PROMTOOL ]] && "$PROMTOOL" --version >/dev/null 2>&1; then
        return 0
    fi
    local tmp sandbox=()
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/seckill-promtool.XXXXXX")
    # As root apt hands the download to its _apt user, who cannot write to our
    # private temporary directory; the package is only unpacked, never run.
    [[ $(id -u) -eq 0 ]] && sandbox=(-o APT::Sandbox::User=root)
    printf '%s: fetching promtool (apt-get download prometheus, unpacked into var/tools)\n' "$PROG"
    if ! (cd "$tmp" && apt-get "${sandbox[@]}" download prometheus >/dev/null 2>&1); then
        # A fresh machine may have no package lists yet.
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update >/dev/null
        (cd "$tmp" && apt-get "${sandbox[@]}" download prometheus >/dev/null) || {
            rm -rf "$tmp"
            printf '%s: error: cannot download Debian'"'"'s prometheus package (for promtool)\n' \
                "$PROG" >&2
            exit 1
        }
    fi
    dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root"
    mkdir -p "${PROMTOOL%/*}"
    install -m 755 "$tmp/root/usr/bin/promtool" "$PROMTOOL"
    rm -rf "$tmp"
    "$PROMTOOL" --version >/dev/null
    promtool_installed=1
}

# root, or sudo when there is one (checked below before it is needed).
SUDO=()
if [[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
fi
if ((${#missing[@]} == 0)); then
    openapi_deps
    promtool_dep
    if ((openapi_installed || promtool_installed)); then
        printf '%s: done\n' "$PROG"
    else
        printf '%s: all %d required packages, the OpenAPI validator and promtool are installed\n' \
            "$PROG" "${#PACKAGES[@]}"
    fi
    exit 0
fi

if [[ $(id -u) -ne 0 && ${#SUDO[@]} -eq 0 ]]; then
    printf '%s: error: missing packages and not root (and no sudo). As root, run:\n' "$PROG" >&2
    printf '  apt-get update && apt-get install -y --no-install-recommends %s\n' "${missing[*]}" >&2
    exit 1
fi

printf '%s: installing missing packages: %s\n' "$PROG" "${missing[*]}"

# Keep apt from starting the distribution's redis, redis-sentinel, postgresql,
# etcd, pgbouncer and haproxy services during the install (we run our own instances on other
# ports).  Only remove the policy file if we created it.
POLICY=/usr/sbin/policy-rc.d
created_policy=0
cleanup() {
    if ((created_policy)); then
        "${SUDO[@]}" rm -f "$POLICY" || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if [[ ! -e $POLICY ]]; then
    printf '#!/bin/sh\n# temporary, from seckill scripts/deps.sh\nexit 101\n' |
        "${SUDO[@]}" tee "$POLICY" >/dev/null
    created_policy=1
    "${SUDO[@]}" chmod 755 "$POLICY"
fi

APT=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
"${APT[@]}" update
"${APT[@]}" install -y --no-install-recommends "${missing[@]}"

openapi_deps
promtool_dep
printf '%s: done\n' "$PROG"

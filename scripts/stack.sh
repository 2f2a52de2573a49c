#!/usr/bin/env bash
# Project-local Redis + PostgreSQL, loopback only, no systemd.
#
#   scripts/stack.sh start  DIR   start both (idempotent); writes DIR/env
#   scripts/stack.sh stop   DIR   stop both (missing/stopped parts are fine)
#   scripts/stack.sh status DIR   print state; exit 0 only if both are up
#
# start reads SECKILL_REDIS_PORT (default 6380) and SECKILL_PG_PORT (default
# 5433).  stop/status use the ports recorded in DIR's generated configs.
# Every Redis data node gets maxmemory SECKILL_REDIS_MAXMEMORY (default 1gb)
# with maxmemory-policy noeviction (docs/operations.md, "Redis memory").
#
# SECKILL_REDIS_TOPOLOGY=sentinel runs Redis behind Sentinel (a master, a
# replica, three Sentinels), SECKILL_REDIS_TOPOLOGY=cluster a Redis Cluster;
# their settings and files are described at the top of stack/sentinel.sh and
# stack/cluster.sh.  stop and status handle whatever DIR holds.
#
# SECKILL_PG_TOPOLOGY=ha runs PostgreSQL as a Patroni cluster instead of one
# server: a primary and a synchronous standby, with one etcd member as
# Patroni's store; its settings and files are described at the top of
# stack/patroni.sh.  It combines with every Redis topology.
#
# SECKILL_PGBOUNCER=1 puts pgbouncer in front of PostgreSQL (either topology)
# on SECKILL_PGBOUNCER_PORT (default 6432): the service's DSNs name it, a
# transaction-pooled database for the request paths and a session-pooled one
# for the order writers (stack/pgbouncer.sh).
#
# The parts, sourced below: stack/common.sh (messages, helpers, OS users,
# passwords), stack/redis.sh (a Redis node: config, start, stop, status),
# stack/redis-acl.sh (the Redis users and their rights), stack/postgres.sh
# (the single server; the roles, database and password files),
# stack/patroni.sh (the Patroni cluster and etcd), stack/pg-dsn.sh (the
# shape of a DSN), stack/env.sh (DIR/env and the client files), and one file
# per Redis topology: stack/single.sh, stack/sentinel.sh, stack/cluster.sh.
#
# Neither server runs as root: as root, PostgreSQL runs as 'postgres' and Redis
# as 'redis' (Debian's package users), else as a 'seckill' system user created
# here; as anyone else, as that user.  Redis has no default user: the service
# authenticates as the ACL user 'seckill' (its keys, channels and commands
# only), this script and the tests' resets as 'seckill-admin'.  PostgreSQL's
# superuser 'seckill' (initdb's) is for this script and the tests' resets
# only: the role 'seckill_owner' owns the database and runs the migrations,
# the service logs in as 'seckill_app' (no attribute beyond LOGIN; the rows
# it uses, granted by migrations/0004_service_role.sql).
#
# Layout of DIR:
#   redis/        redis.conf (ACL users, password hashes), redis.pid, redis.log,
#                 AOF files; owned by the Redis OS user
#   redis-password        password of ACL user seckill (mode 600)
#   redis-admin-password  password of ACL user seckill-admin (mode 600)
#   redis-functions-password  of the ACL user seckill-functions (may only
#                 FUNCTION LOAD: the daemon's self-healing; mode 600)
#   redis-admin-url, redis-functions-url  the Redis URL as seckill-admin
#                 (migrate loads the functions) and as seckill-functions
#                 (mode 600)
#   redis-topology        the topology of the last start (single, sentinel or
#                 cluster), for status
#   (the Sentinel and the cluster topologies' own files: stack/sentinel.sh,
#   stack/cluster.sh)
#   pg/data/      PGDATA (seckill.conf there holds our settings)
#   pg/run/       unix socket directory
#   pg.log        server log (pg_ctl -l)
#   pg-password   superuser password of role seckill (mode 600)
#   pg-owner-password, pg-app-password  passwords of seckill_owner and
#                 seckill_app (mode 600)
#   pgpass        libpq password file of the service: seckill_app only (mode 600)
#   pgpass-owner  the same for seckill_owner (migrations; mode 600)
#   pgpass-admin  the same for the superuser (this script, tests; mode 600)
#   env           `export` lines to source (mode 600: the Redis URL holds the
#                 service user's password): the service's DSN and PGPASSFILE,
#                 and SECKILL_MIGRATE_PG_DSN (the owner, its own passfile),
#                 SECKILL_MIGRATE_REDIS_URL_FILE and
#                 SECKILL_REDIS_FUNCTIONS_URL_FILE (the two files below);
#                 with Sentinel also SECKILL_REDIS_TOPOLOGY,
#                 SECKILL_REDIS_REPLICA_PORT and SECKILL_SENTINEL_PORTS; with
#                 the cluster SECKILL_REDIS_TOPOLOGY,
#                 SECKILL_REDIS_CLUSTER_PORTS, SECKILL_REDIS_CLUSTER_REPLICA_PORTS;
#                 with SECKILL_PG_TOPOLOGY=ha the DSNs name both servers
#                 (target_session_attrs=read-write), and SECKILL_PG_TOPOLOGY,
#                 SECKILL_PG_PORTS, SECKILL_PATRONI_API_PORTS,
#                 SECKILL_ETCD_PORT and SECKILL_PATRONICTL_CONFIG follow
#
# Exit codes: 0 ok, 1 failure, 2 usage, 3 a port is already taken by
# something else (callers may retry with other ports).
set -euo pipefail

PROG=stack.sh
SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
LOCK_WAIT=60

# shellcheck source=scripts/stack/common.sh
source "$SELF_DIR/stack/common.sh"

usage() {
    printf 'usage: %s {start|stop|status} DIR\n' "$0" >&2
    exit 2
}

# ---------------------------------------------------------------- setup

[[ $# -eq 2 ]] || usage
CMD=$1
DIR_ARG=$2
case $CMD in start | stop | status) ;; *) usage ;; esac

if [[ $CMD == start ]]; then
    mkdir -p "$DIR_ARG"
elif [[ ! -d $DIR_ARG ]]; then
    if [[ $CMD == stop ]]; then
        info "nothing to stop: $DIR_ARG does not exist"
        exit 0
    fi
    info "redis: stopped (no $DIR_ARG)"
    info "postgres: stopped (no $DIR_ARG)"
    exit 1
fi
DIR=$(cd "$DIR_ARG" && pwd -P)
case $DIR in
*[\"\'\\]* | *$'\n'*) die "directory path must not contain quotes, backslashes or newlines: $DIR" ;;
esac

# The parts below read DIR (their files in it) at their top.
# shellcheck source=scripts/stack/redis-acl.sh
source "$SELF_DIR/stack/redis-acl.sh"
# shellcheck source=scripts/stack/redis.sh
source "$SELF_DIR/stack/redis.sh"
# shellcheck source=scripts/stack/postgres.sh
source "$SELF_DIR/stack/postgres.sh"
# shellcheck source=scripts/stack/patroni.sh
source "$SELF_DIR/stack/patroni.sh"
# shellcheck source=scripts/stack/pgbouncer.sh
source "$SELF_DIR/stack/pgbouncer.sh"
# shellcheck source=scripts/stack/pg-dsn.sh
source "$SELF_DIR/stack/pg-dsn.sh"
# shellcheck source=scripts/stack/env.sh
source "$SELF_DIR/stack/env.sh"
# shellcheck source=scripts/stack/single.sh
source "$SELF_DIR/stack/single.sh"
# shellcheck source=scripts/stack/sentinel.sh
source "$SELF_DIR/stack/sentinel.sh"
# shellcheck source=scripts/stack/cluster.sh
source "$SELF_DIR/stack/cluster.sh"

IS_ROOT=0
[[ $(id -u) -eq 0 ]] && IS_ROOT=1
HA=0      # 1: the Sentinel topology (start: requested; status: DIR's)
CLUSTER=0 # 1: the cluster topology, likewise
PG_HA=0   # 1: PostgreSQL as a Patroni cluster (start: requested; status: DIR's)
PG_HA_PORTS=
PGB=0     # 1: pgbouncer in front of PostgreSQL (SECKILL_PGBOUNCER=1)
PGB_PORT= # its port (start: the one DIR recorded, else the requested one)

# Serialise concurrent invocations on the same DIR.  Daemons are started
# with fd 9 closed so they never inherit the lock.
if command -v flock >/dev/null 2>&1; then
    exec 9>>"$DIR/.stack.lock"
    flock -w "$LOCK_WAIT" 9 || die "could not lock $DIR/.stack.lock within ${LOCK_WAIT}s (another stack.sh running?)"
fi

# ---------------------------------------------------------------- commands

# pg_topology_start PG_PORT: PostgreSQL as requested (PG_HA): the single
# server on PG_PORT, or the Patroni cluster whose first server is there.
# Called by each Redis topology's start.
pg_topology_start() {
    if ((PG_HA)); then
        pg_ha_start_from_env "$1"
    else
        printf 'single\n' >"$PG_TOPOLOGY_FILE"
        pg_start "$1"
    fi
}

# pg_client_ports: the PostgreSQL ports the clients are given, after
# pg_topology_start: the single server's, or every Patroni member's
# (comma-separated, in order).
pg_client_ports() {
    if ((PG_HA)); then
        printf '%s\n' "$PG_HA_PORTS"
    else
        pg_conf_port
    fi
}

# pg_running_topology: the PostgreSQL topology whose processes run in DIR
# (ha, single or none).
pg_running_topology() {
    local d
    while read -r d; do
        pt_up "$d" && {
            printf 'ha\n'
            return 0
        }
    done < <(pt_dirs)
    if etcd_up; then
        printf 'ha\n'
    elif [[ -n $(pg_pid) ]] && pid_is "$(pg_pid)" postgres; then
        printf 'single\n'
    else
        printf 'none\n'
    fi
}

cmd_start() {
    local rport=${SECKILL_REDIS_PORT:-6380} pport=${SECKILL_PG_PORT:-5433}
    local topology=${SECKILL_REDIS_TOPOLOGY:-single} running
    local pg_topology=${SECKILL_PG_TOPOLOGY:-single}
    valid_port "$rport" || die "bad SECKILL_REDIS_PORT: $rport"
    valid_port "$pport" || die "bad SECKILL_PG_PORT: $pport"
    [[ $rport != "$pport" ]] || die "SECKILL_REDIS_PORT and SECKILL_PG_PORT are both $rport"
    case $topology in
    single | sentinel | cluster) ;;
    *) die "bad SECKILL_REDIS_TOPOLOGY: '$topology' (single, sentinel or cluster)" ;;
    esac
    case $pg_topology in
    single) ;;
    ha) PG_HA=1 ;;
    *) die "bad SECKILL_PG_TOPOLOGY: '$pg_topology' (single or ha)" ;;
    esac
    running=$(pg_running_topology)
    if [[ $running != none && $running != "$pg_topology" ]]; then
        die "postgres in $DIR runs the $running topology; stop the stack first to change to $pg_topology: $0 stop $DIR"
    fi
    case ${SECKILL_PGBOUNCER:-0} in
    0) ;;
    1) PGB=1 ;;
    *) die "bad SECKILL_PGBOUNCER: '$SECKILL_PGBOUNCER' (0 or 1)" ;;
    esac
    if ((PGB)); then
        PGB_PORT=$(pgb_port)
        PGB_PORT=${PGB_PORT:-${SECKILL_PGBOUNCER_PORT:-$PGB_DEFAULT_PORT}}
        valid_port "$PGB_PORT" || die "bad SECKILL_PGBOUNCER_PORT: $PGB_PORT"
    elif pgb_up; then
        die "pgbouncer runs in $DIR; stop the stack first to go without it: $0 stop $DIR"
    fi
    [[ $R_MIN_REPLICAS_TO_WRITE =~ ^[0-9]$ ]] ||
        die "bad SECKILL_REDIS_MIN_REPLICAS_TO_WRITE: '$R_MIN_REPLICAS_TO_WRITE' (0-9)"
    # at least 1mb: below that Redis is full before the first SKU; 0 (no
    # bound) is what this setting exists to rule out
    [[ ${R_MAXMEMORY,,} =~ ^([1-9][0-9]{0,12})(kb|mb|gb)?$ ]] &&
        (($(redis_bytes "$R_MAXMEMORY") >= 1048576)) ||
        die "bad SECKILL_REDIS_MAXMEMORY: '$R_MAXMEMORY' (bytes, or with kb/mb/gb; at least 1mb)"
    # Switching topologies under running processes would mix configs.
    running=$(running_topology)
    if [[ $running != none && $running != "$topology" ]]; then
        die "redis in $DIR runs the $running topology; stop the stack first to change to $topology: $0 stop $DIR"
    fi
    if [[ $topology == single ]]; then
        single_start "$rport" "$pport"
    elif [[ $topology == sentinel ]]; then
        ha_start_from_env "$rport" "$pport"
    else
        cluster_start_from_env "$pport"
    fi
    # After the roles (each topology's start made them): pgbouncer copies the
    # service role's SCRAM verifier.
    if ((PGB)); then
        pgb_start "$PGB_PORT" "${PG_PRIMARY_PORT:-$(pg_conf_port)}"
    fi
    info "env: source $ENV_FILE"
}

cmd_stop() {
    local rc=0 s
    local -a sentinels cnodes masters=()
    # The Sentinels first: they would fail over as the data nodes go.
    mapfile -t sentinels < <(sentinel_dirs)
    for s in "${sentinels[@]}"; do
        node_stop "$s" || rc=1
    done
    # A cluster's replicas before the masters, for the same reason: a
    # replica that saw its master go would be elected in its place.
    mapfile -t cnodes < <(cluster_dirs)
    for s in "${cnodes[@]}"; do
        if node_up "$s" && [[ $(redis_admin "$(node_port "$s")" ROLE 2>/dev/null | head -n1 | tr -d '\r') == master ]]; then
            masters+=("$s")
        else
            node_stop "$s" || rc=1
        fi
    done
    for s in "${masters[@]}"; do
        node_stop "$s" || rc=1
    done
    # pgbouncer first: its clients see a clean error, not a server gone.
    if [[ -d $PGB_DIR ]]; then
        pgb_stop || rc=1
    fi
    if [[ -d $PG_DATA ]]; then
        pg_stop || rc=1
    elif [[ $(pg_topology) != ha ]]; then
        info "postgres: not running"
    fi
    if [[ -n $(pt_dirs) || -d $ETCD_DIR ]]; then
        pg_ha_stop || rc=1
    fi
    if [[ -d $RR_DIR ]]; then
        node_stop "$RR_DIR" || rc=1
    fi
    if [[ -d $R_DIR ]] || ((${#cnodes[@]} == 0)); then
        node_stop "$R_DIR" || rc=1
    fi
    return "$rc"
}

cmd_status() {
    local rc=0 s
    local -a sentinels cnodes
    case $(dir_topology) in
    sentinel) HA=1 ;;
    cluster) CLUSTER=1 ;;
    esac
    if ((CLUSTER)); then
        mapfile -t cnodes < <(cluster_dirs)
        if ((${#cnodes[@]} == 0)); then
            info "cluster: no node"
            rc=1
        fi
        for s in "${cnodes[@]}"; do
            node_status "$s" || rc=1
        done
        ((${#cnodes[@]} == 0)) || cluster_status || rc=1
    else
        node_status "$R_DIR" || rc=1
    fi
    if ((HA)); then
        node_status "$RR_DIR" || rc=1
        mapfile -t sentinels < <(sentinel_dirs)
        if ((${#sentinels[@]} == 0)); then
            info "sentinels: none"
            rc=1
        fi
        for s in "${sentinels[@]}"; do
            node_status "$s" || rc=1
        done
    fi
    if [[ $(pg_topology) == ha ]]; then
        pg_ha_status || rc=1
    else
        pg_status || rc=1
    fi
    if [[ -r $PGB_DIR/pgbouncer.ini ]]; then
        pgb_status || rc=1
    fi
    return "$rc"
}

case $CMD in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
esac

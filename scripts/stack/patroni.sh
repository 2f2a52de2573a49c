# shellcheck shell=bash
# Sourced by scripts/stack.sh: the PostgreSQL HA topology
# (SECKILL_PG_TOPOLOGY=ha, `make run PG=ha`): one etcd member, Patroni's
# store, and two Patroni-managed PostgreSQL servers, a primary and a
# synchronous standby, all on loopback, all as the PostgreSQL OS user
# (etcd as Debian's etcd user when root).
#
# Ports: the first server on SECKILL_PG_PORT, the second on
# SECKILL_PG_REPLICA_PORT (default SECKILL_PG_PORT + 1); their Patroni REST
# APIs on SECKILL_PATRONI_API_PORTS (default 8008,8009); etcd's clients on
# SECKILL_ETCD_PORT (default 2379), its peers on SECKILL_ETCD_PEER_PORT
# (default 2380).  The first start of DIR bootstraps the cluster on the first
# server (initdb) and makes the second its standby (pg_basebackup); later
# starts start what is down, on the ports DIR recorded, and Patroni decides
# who leads (after a failover the second server stays the primary, the first
# comes back as its standby, rewound if need be).  DIR/env then names both
# servers in one DSN (stack/pg-dsn.sh) that reaches whichever is primary.
#
# Its files in DIR (pg/ is not used):
#   etcd/                 etcd's data (data/), etcd.log, etcd.pid, ports
#                 ("CLIENT PEER"); owned by the etcd OS user
#   patroni-N/            a server: patroni.yml (its passwords: mode 600),
#                 patroni.log (Patroni's), postgresql.log (the server's),
#                 patroni.pid, ports ("PG API"), pgpass (Patroni's own, for
#                 replication and pg_rewind), data/ (PGDATA), run/ (socket);
#                 N = 1, 2; owned by the PostgreSQL OS user
#   pg-topology           ha (single after a start of the single topology)
#   pg-replication-password  of role seckill_replication (REPLICATION only:
#                 the standby streams as it; mode 600)
#   pg-rewind-password    of role seckill_rewind (the four functions
#                 pg_rewind reads with; mode 600)
#   patroni-api-password  of the REST API's user (its changing calls:
#                 switchover, restart, reinit; mode 600)
#   patronictl.yml        patronictl's config: etcd and its login, the
#                 cluster's name, the REST API's login; no database password
#                 (mode 600)
#   etcd-root-password    of etcd's root user (this script, once: the users,
#                 the roles, auth enable; mode 600)
#   etcd-patroni-password of etcd's user seckill-patroni, which may read and
#                 write the keys under /seckill/ only (Patroni, patronictl;
#                 mode 600)
#
# Synchronous mode: Patroni names the standby in synchronous_standby_names
# (synchronous_mode: true), so a COMMIT returns once the standby has its WAL:
# a primary lost after a 201 loses no order, and Patroni promotes only that
# standby (maximum_lag_on_failover stays Patroni's 1 MB: it weighs WAL beyond
# the last commit, which the synchronous standby may lack; 0 would refuse
# every promotion after a crash that left such WAL behind).  synchronous_mode_strict is false: when the standby is gone the
# primary, after Patroni's next loop, commits alone instead of hanging every
# COMMIT until the standby is back.  What that trades: while the standby is
# down the commits live on one server only; lose it then (its disk) and they
# are gone.  A third server (a second standby) keeps both: commits stay
# synchronous while one standby is down.

ETCD_DIR=$DIR/etcd
PG_TOPOLOGY_FILE=$DIR/pg-topology
PT_REPL_PWFILE=$DIR/pg-replication-password
PT_REWIND_PWFILE=$DIR/pg-rewind-password
PT_API_PWFILE=$DIR/patroni-api-password
PATRONICTL_CONF=$DIR/patronictl.yml
ETCD_ROOT_PWFILE=$DIR/etcd-root-password
ETCD_PT_PWFILE=$DIR/etcd-patroni-password

# The cluster (Patroni's scope, etcd's namespace) and its members.
PT_SCOPE=seckill
PT_NODES=2
PT_REPL_ROLE=seckill_replication
PT_REWIND_ROLE=seckill_rewind
PT_API_USER=seckill-patroni
ETCD_PT_USER=seckill-patroni
ETCD_PREFIX=/seckill/
ETCD_PREFIX_END=/seckill0 # the prefix's range end: its last byte + 1
# Short timings, for tests and a local demo (production: docs/operations.md,
# ttl 30, loop_wait 10, retry_timeout 10).  A leader that has not renewed its
# key for PT_TTL_S is gone and the synchronous standby takes over at the next
# loop; Patroni loops every PT_LOOP_WAIT_S, and gives up on etcd or
# PostgreSQL after PT_RETRY_TIMEOUT_S (a leader that cannot reach etcd for
# that long demotes itself).  Patroni wants loop_wait + 2 * retry_timeout <=
# ttl: a leader that lost etcd steps down before its key expires.
PT_TTL_S=10
PT_LOOP_WAIT_S=2
PT_RETRY_TIMEOUT_S=3
PT_SYNC_STRICT=false
PT_DEFAULT_API_PORTS=8008,8009
ETCD_DEFAULT_PORT=2379
ETCD_DEFAULT_PEER_PORT=2380
# start waits this long for a leader with its synchronous standby (a first
# start: initdb, then pg_basebackup, on a loaded machine).
PT_READY_WAIT_TENTHS=900
ETCD_READY_WAIT_TENTHS=150
# stop: SIGTERM, and this long for Patroni to stop its server (a fast
# shutdown) before SIGKILL and pg_ctl stop -m immediate.
PT_STOP_WAIT_TENTHS=300
CURL_MAX_S=3

# The Patroni members' directories, in order (patroni-1, patroni-2).
pt_dirs() {
    local d
    for d in "$DIR"/patroni-[0-9]*; do
        [[ -d $d ]] && printf '%s\n' "$d"
    done | sort -V
}

pt_name() { printf 'pg-%s\n' "${1##*/patroni-}"; }

# pt_port D / pt_api_port D: the ports DIR recorded for member D (nothing,
# and success, when none; likewise the pid and port readers below).
pt_port() { awk '{ print $1; exit }' "$1/ports" 2>/dev/null || true; }
pt_api_port() { awk '{ print $2; exit }' "$1/ports" 2>/dev/null || true; }
etcd_port() { awk '{ print $1; exit }' "$ETCD_DIR/ports" 2>/dev/null || true; }

# pg_topology: the PostgreSQL topology of DIR's last start (single if none).
pg_topology() {
    local t
    t=$(cat "$PG_TOPOLOGY_FILE" 2>/dev/null) || t=single
    [[ $t == ha ]] && printf 'ha\n' || printf 'single\n'
}

# pt_get PORT PATH: a GET on the Patroni REST API on PORT (no login: the
# read-only endpoints are open on loopback); prints the body, fails on no
# answer.  /primary and the like answer 503 with a body: -f is not used.
pt_get() {
    curl -sS --max-time "$CURL_MAX_S" "http://127.0.0.1:$1$2" 2>/dev/null
}

# pt_cluster: GET /cluster of the first member that answers (JSON), else fails.
pt_cluster() {
    local d out
    while read -r d; do
        out=$(pt_get "$(pt_api_port "$d")" /cluster) || continue
        [[ $out == \{* ]] || continue
        printf '%s\n' "$out"
        return 0
    done < <(pt_dirs)
    return 1
}

# pt_leader_port: the PostgreSQL port of the member Patroni names leader and
# that runs; nothing (and still success) when there is none.
pt_leader_port() {
    local out
    out=$(pt_cluster) || return 0
    jq -r '.members[] | select(.role == "leader" and .state == "running") | .port' <<<"$out" 2>/dev/null |
        head -n1 || true
}

pt_pid() { tr -dc '0-9' 2>/dev/null <"$1/patroni.pid" || true; }
pt_up() {
    local pid
    pid=$(pt_pid "$1")
    [[ -n $pid ]] && pid_is "$pid" patroni
}
etcd_pid() { tr -dc '0-9' 2>/dev/null <"$ETCD_DIR/etcd.pid" || true; }
etcd_up() {
    local pid port
    pid=$(etcd_pid)
    port=$(etcd_port)
    [[ -n $pid && -n $port ]] && pid_is "$pid" etcd &&
        [[ $(curl -sS --max-time "$CURL_MAX_S" "http://127.0.0.1:$port/health" 2>/dev/null) == *'"true"'* ]]
}

ETCD_USER=
etcd_user_init() {
    [[ -n $ETCD_USER ]] && return 0
    if ((IS_ROOT)); then
        ETCD_USER=$(stack_os_user "$ETCD_DIR" etcd)
    else
        ETCD_USER=$(id -un)
    fi
}

# as_user_exec USER CMD...: execs CMD as USER (setpriv, no new privileges)
# when root, else CMD itself; for servers started in the background, whose
# pid must be the server's own.
as_user_exec() {
    local user=$1
    shift
    if ((IS_ROOT)); then
        exec setpriv --reuid="$user" --regid="$user" --init-groups --no-new-privs -- "$@"
    fi
    exec "$@"
}

# etcd_start CLIENT_PORT PEER_PORT: one etcd member, its own cluster, on
# loopback, unless it already runs (then on the ports DIR recorded).
etcd_start() {
    local port=$1 peer=$2 i p
    etcd_user_init
    if etcd_up; then
        info "etcd: already running on 127.0.0.1:$(etcd_port) (pid $(etcd_pid))"
        return 0
    fi
    if [[ -r $ETCD_DIR/ports ]]; then
        read -r port peer <"$ETCD_DIR/ports"
    fi
    for p in "$port" "$peer"; do
        if port_busy "$p"; then
            printf '%s: error: port %s is already in use; cannot start etcd (set SECKILL_ETCD_PORT, SECKILL_ETCD_PEER_PORT)\n' \
                "$PROG" "$p" >&2
            exit 3
        fi
    done
    mkdir -p "$ETCD_DIR"
    chmod 700 "$ETCD_DIR"
    printf '%s %s\n' "$port" "$peer" >"$ETCD_DIR/ports"
    : >>"$ETCD_DIR/etcd.log"
    if ((IS_ROOT)); then
        chown -R "$ETCD_USER": "$ETCD_DIR"
        fix_traversal "$ETCD_USER" "$ETCD_DIR"
    fi
    # A new cluster of one on its first start; its data dir says the rest
    # on later ones.  The token is DIR's, so two stacks' members never meet.
    (
        cd /
        as_user_exec "$ETCD_USER" setsid etcd --name seckill-etcd-1 --data-dir "$ETCD_DIR/data" \
            --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
            --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
            --initial-cluster "seckill-etcd-1=http://127.0.0.1:$peer" --initial-cluster-state new \
            --initial-cluster-token "seckill-$(sha256_hex "$DIR" | cut -c1-16)" \
            --enable-v2=true \
            </dev/null >>"$ETCD_DIR/etcd.log" 2>&1 9>&-
    ) &
    printf '%s\n' "$!" >"$ETCD_DIR/etcd.pid"
    for ((i = 0; i < ETCD_READY_WAIT_TENTHS; i += 2)); do
        etcd_up && break
        pid_is "$(etcd_pid)" etcd || break
        sleep 0.2
    done
    if ! etcd_up; then
        log_tail "$ETCD_DIR/etcd.log"
        die "etcd did not answer on 127.0.0.1:$port within $((ETCD_READY_WAIT_TENTHS / 10))s"
    fi
    info "etcd: started on 127.0.0.1:$port (peers :$peer, pid $(etcd_pid), user $ETCD_USER)"
}

# etcd_call PATH JSON [TOKEN]: a POST to etcd's v3 JSON gateway; prints the
# answer, fails when etcd answers an error (or nothing).
etcd_call() {
    local out
    out=$(curl -sS --max-time "$CURL_MAX_S" -X POST ${3:+-H "Authorization: $3"} \
        "http://127.0.0.1:$(etcd_port)/v3$1" -d "$2" 2>&1) || {
        printf '%s\n' "$out"
        return 1
    }
    printf '%s\n' "$out"
    [[ $out != *'"error"'* && $out != *'"code"'* ]]
}

# etcd_v2 METHOD PATH [JSON [USER:PASSWORD]]: a call to etcd's v2 API (keys
# and auth); prints the answer, fails on an HTTP error or none.
etcd_v2() {
    local out
    out=$(curl -sS --max-time "$CURL_MAX_S" --fail-with-body -X "$1" ${4:+-u "$4"} \
        ${3:+-H 'Content-Type: application/json' -d "$3"} \
        "http://127.0.0.1:$(etcd_port)/v2$2" 2>&1) || {
        printf '%s\n' "$out"
        return 1
    }
    printf '%s\n' "$out"
}

# etcd_secure: etcd's logins, once per data dir, in both of its APIs: root
# (this script) and seckill-patroni, whose role may read and write the keys
# under ETCD_PREFIX and nothing else; then auth enable.  Anyone on the machine
# reaches the loopback port: without logins they could rewrite who leads.
# Patroni uses the v2 API (pt_write_conf says why); the v3 one is locked too,
# so that nobody else can fill etcd through it.
etcd_secure() {
    local root_pw pt_pw out
    root_pw=$(ensure_password "$ETCD_ROOT_PWFILE" "$PG_PW_BYTES")
    pt_pw=$(ensure_password "$ETCD_PT_PWFILE" "$PG_PW_BYTES")
    if ! out=$(etcd_call /auth/authenticate "{\"name\":\"root\",\"password\":\"$root_pw\"}") ||
        [[ $out != *'"token"'* ]]; then
        etcd_call /auth/role/add '{"name":"root"}' >/dev/null &&
            etcd_call /auth/user/add "{\"name\":\"root\",\"password\":\"$root_pw\"}" >/dev/null &&
            etcd_call /auth/user/grant '{"user":"root","role":"root"}' >/dev/null &&
            etcd_call /auth/role/add "{\"name\":\"$ETCD_PT_USER\"}" >/dev/null &&
            etcd_call /auth/role/grant "{\"name\":\"$ETCD_PT_USER\",\"perm\":{\"permType\":\"READWRITE\",\"key\":\"$(printf %s "$ETCD_PREFIX" | base64)\",\"range_end\":\"$(printf %s "$ETCD_PREFIX_END" | base64)\"}}" >/dev/null &&
            etcd_call /auth/user/add "{\"name\":\"$ETCD_PT_USER\",\"password\":\"$pt_pw\"}" >/dev/null &&
            etcd_call /auth/user/grant "{\"user\":\"$ETCD_PT_USER\",\"role\":\"$ETCD_PT_USER\"}" >/dev/null &&
            out=$(etcd_call /auth/enable '{}') || die "cannot set up etcd's v3 logins: $out"
    fi
    # v2: the guest role (anyone without a login) starts with every right;
    # they are taken away once auth is on.
    if ! out=$(etcd_v2 GET /auth/enable) || [[ $out != *'"enabled":true'* ]]; then
        etcd_v2 PUT /auth/users/root "{\"user\":\"root\",\"password\":\"$root_pw\"}" >/dev/null &&
            etcd_v2 PUT "/auth/roles/$ETCD_PT_USER" "{\"role\":\"$ETCD_PT_USER\",\"permissions\":{\"kv\":{\"read\":[\"$ETCD_PREFIX*\"],\"write\":[\"$ETCD_PREFIX*\"]}}}" >/dev/null &&
            etcd_v2 PUT "/auth/users/$ETCD_PT_USER" "{\"user\":\"$ETCD_PT_USER\",\"password\":\"$pt_pw\",\"roles\":[\"$ETCD_PT_USER\"]}" >/dev/null &&
            out=$(etcd_v2 PUT /auth/enable) || die "cannot set up etcd's v2 logins: $out"
    fi
    if out=$(etcd_v2 GET /auth/roles/guest '' "root:$root_pw") && [[ $out == *'"/*"'* ]]; then
        out=$(etcd_v2 PUT /auth/roles/guest '{"role":"guest","revoke":{"kv":{"read":["/*"],"write":["/*"]}}}' \
            "root:$root_pw") || die "cannot take etcd's v2 guest rights away: $out"
    fi
    info "etcd: logins on (root, $ETCD_PT_USER: $ETCD_PREFIX only; v2 and v3)"
}

# stop_pid PID NAME WHAT: SIGTERM, up to PT_STOP_WAIT_TENTHS, then SIGKILL.
stop_pid() {
    local pid=$1 name=$2 what=$3 i
    pid_is "$pid" "$name" || return 0
    kill -CONT "$pid" 2>/dev/null || true # a frozen one (a fault scenario) must see the TERM
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < PT_STOP_WAIT_TENTHS; i++)); do
        pid_is "$pid" "$name" || return 0
        sleep 0.1
    done
    warn "$what (pid $pid) did not stop within $((PT_STOP_WAIT_TENTHS / 10))s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.2
}

etcd_stop() {
    local pid
    pid=$(etcd_pid)
    if [[ -z $pid ]] || ! pid_is "$pid" etcd; then
        info "etcd: not running"
        return 0
    fi
    stop_pid "$pid" etcd etcd
    info "etcd: stopped"
}

# pt_write_conf D PG_PORT API_PORT: member D's patroni.yml, fresh each start.
# bootstrap: is read once, by the member that initialises the cluster (its
# dcs: part is then the cluster's config in etcd); the rest is this member's.
# Patroni talks to etcd's v2 API (etcd:, not etcd3:): Debian 12's Patroni
# 3.0.2 on v3 lets a leader that was frozen past its ttl write the leader key
# again from its stale view when it wakes, over the promoted standby's
# (patroni/patroni#2689, fixed in 3.0.3); on v2 it renews its key only by a
# compare-and-set on its own name, which fails once another member holds it.
pt_write_conf() {
    local d=$1 port=$2 api=$3 name sockdir=$1/run su_pw repl_pw rewind_pw api_pw
    name=$(pt_name "$d")
    su_pw=$(ensure_password "$PG_PWFILE" "$PG_PW_BYTES")
    repl_pw=$(ensure_password "$PT_REPL_PWFILE" "$PG_PW_BYTES")
    rewind_pw=$(ensure_password "$PT_REWIND_PWFILE" "$PG_PW_BYTES")
    api_pw=$(ensure_password "$PT_API_PWFILE" "$PG_PW_BYTES")
    # sun_path is 108 bytes; ".s.PGSQL.NNNNN" plus '/' must fit.
    if ((${#sockdir} + 16 > 107)); then
        warn "note: $sockdir is too long for a unix socket path; $name listens on TCP only"
        sockdir=
    fi
    write_file "$d/patroni.yml" 600 <<EOF
# generated by scripts/stack.sh on every start of this member (passwords: mode 600)
scope: $PT_SCOPE
namespace: /seckill/
name: $name
log:
  level: INFO
restapi:
  listen: 127.0.0.1:$api
  connect_address: 127.0.0.1:$api
  # the changing calls (switchover, restart, reinit) need this login
  authentication:
    username: $PT_API_USER
    password: '$api_pw'
etcd:
  hosts: 127.0.0.1:$(etcd_port)
  username: $ETCD_PT_USER
  password: '$(ensure_password "$ETCD_PT_PWFILE" "$PG_PW_BYTES")'
bootstrap:
  dcs:
    ttl: $PT_TTL_S
    loop_wait: $PT_LOOP_WAIT_S
    retry_timeout: $PT_RETRY_TIMEOUT_S
    synchronous_mode: true
    synchronous_mode_strict: $PT_SYNC_STRICT
    synchronous_node_count: 1
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        max_connections: 200
        wal_level: replica
        hot_standby: 'on'
        wal_log_hints: 'on'
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 256MB
        synchronous_commit: 'on'
  initdb:
  - encoding: UTF8
  - locale: C
  - auth: scram-sha-256
postgresql:
  listen: 127.0.0.1:$port
  connect_address: 127.0.0.1:$port
  data_dir: $d/data
  bin_dir: $PG_BIN
  pgpass: $d/pgpass
  authentication:
    superuser:
      username: $PG_ROLE
      password: '$su_pw'
    replication:
      username: $PT_REPL_ROLE
      password: '$repl_pw'
    rewind:
      username: $PT_REWIND_ROLE
      password: '$rewind_pw'
  parameters:
    unix_socket_directories: '$sockdir'
    shared_buffers: 128MB
    password_encryption: scram-sha-256
    logging_collector: 'on'
    log_directory: '$d'
    log_filename: postgresql.log
    log_file_mode: '0600'
    log_line_prefix: '%m [%p] %q%u@%d '
  # loopback only, a password always (scram); the replication role streams
  # and does nothing else ("all" databases does not cover replication)
  pg_hba:
  - local all $PT_REPL_ROLE reject
  - host all $PT_REPL_ROLE 127.0.0.1/32 reject
  - local all all scram-sha-256
  - host all all 127.0.0.1/32 scram-sha-256
  - host replication $PT_REPL_ROLE 127.0.0.1/32 scram-sha-256
EOF
    # With pgbouncer (stack/pgbouncer.sh) the member that becomes primary
    # points it at itself.
    if ((PGB)); then
        cat >>"$d/patroni.yml" <<EOF
  callbacks:
    on_start: "'$PGB_DIR/follow.sh' '$PGB_DIR' $port"
    on_role_change: "'$PGB_DIR/follow.sh' '$PGB_DIR' $port"
EOF
    fi
    ((IS_ROOT)) && chown "$PG_USER" "$d/patroni.yml"
    return 0
}

# pt_write_ctl_conf: patronictl's config (DIR/patronictl.yml): where the
# cluster is, etcd's and the REST API's logins, no database password.
pt_write_ctl_conf() {
    write_file "$PATRONICTL_CONF" 600 <<EOF
# generated by scripts/stack.sh: patronictl -c $PATRONICTL_CONF list
scope: $PT_SCOPE
namespace: /seckill/
etcd:
  hosts: 127.0.0.1:$(etcd_port)
  username: $ETCD_PT_USER
  password: '$(ensure_password "$ETCD_PT_PWFILE" "$PG_PW_BYTES")'
ctl:
  auth: '$PT_API_USER:$(ensure_password "$PT_API_PWFILE" "$PG_PW_BYTES")'
EOF
}

# pt_start_node D PG_PORT API_PORT: member D's Patroni, unless it runs; on the
# ports DIR recorded when it has.
pt_start_node() {
    local d=$1 port=$2 api=$3 p pid i
    if pt_up "$d"; then
        info "$(pt_name "$d"): Patroni already running (pid $(pt_pid "$d"))"
        return 0
    fi
    if [[ -r $d/ports ]]; then
        read -r port api <"$d/ports"
    fi
    # A server Patroni left behind (Patroni killed, not its postmaster)
    # would keep the port: Patroni adopts a running one in its data dir.
    pid=
    [[ -r $d/data/postmaster.pid ]] && pid=$(head -n1 "$d/data/postmaster.pid" | tr -dc '0-9')
    for p in "$port" "$api"; do
        [[ $p == "$port" && -n $pid ]] && pid_is "$pid" postgres && continue
        if port_busy "$p"; then
            printf '%s: error: port %s is already in use; cannot start %s (set SECKILL_PG_PORT, SECKILL_PG_REPLICA_PORT, SECKILL_PATRONI_API_PORTS)\n' \
                "$PROG" "$p" "$(pt_name "$d")" >&2
            exit 3
        fi
    done
    mkdir -p "$d" "$d/run"
    chmod 700 "$d" "$d/run"
    printf '%s %s\n' "$port" "$api" >"$d/ports"
    : >>"$d/patroni.log"
    if ((IS_ROOT)); then
        chown "$PG_USER": "$d" "$d/run" "$d/patroni.log" "$d/ports"
        fix_traversal "$PG_USER" "$d"
    fi
    pt_write_conf "$d" "$port" "$api"
    ((PGB)) && pgb_install_follow
    (
        cd /
        as_user_exec "$PG_USER" setsid patroni "$d/patroni.yml" </dev/null >>"$d/patroni.log" 2>&1 9>&-
    ) &
    printf '%s\n' "$!" >"$d/patroni.pid"
    for ((i = 0; i < 20; i++)); do
        pt_up "$d" && break
        sleep 0.1
    done
    pt_up "$d" || {
        log_tail "$d/patroni.log"
        die "$(pt_name "$d"): Patroni exited at once"
    }
    info "$(pt_name "$d"): Patroni started (pid $(pt_pid "$d"), PostgreSQL on 127.0.0.1:$port, REST API on :$api, user $PG_USER)"
}

# pt_not_ready: prints what keeps the cluster from being ready; fails
# (nothing to say) once a leader runs and every other member runs as its
# synchronous standby (a failover would lose nothing).
pt_not_ready() {
    local out n
    out=$(pt_cluster) || {
        printf 'no Patroni REST API answers\n'
        return 0
    }
    if [[ -z $(jq -r '.members[] | select(.role == "leader" and .state == "running") | .name' <<<"$out") ]]; then
        printf 'no running leader yet: %s\n' "$(jq -c '[.members[] | {name, role, state}]' <<<"$out")"
        return 0
    fi
    n=$(jq '[.members[] | select(.role == "sync_standby" and (.state == "running" or .state == "streaming"))] | length' <<<"$out")
    if ((n < PT_NODES - 1)); then
        printf 'no synchronous standby yet: %s\n' "$(jq -c '[.members[] | {name, role, state}]' <<<"$out")"
        return 0
    fi
    return 1
}

pt_wait_ready() {
    local i why=
    for ((i = 0; i < PT_READY_WAIT_TENTHS; i += 2)); do
        why=$(pt_not_ready) || return 0
        sleep 0.2
    done
    warn "the Patroni cluster is not ready after $((PT_READY_WAIT_TENTHS / 10))s: $why"
    local d
    while read -r d; do
        log_tail "$d/patroni.log"
        log_tail "$d/postgresql.log"
    done < <(pt_dirs)
    log_tail "$ETCD_DIR/etcd.log"
    exit 1
}

# pg_ha_start PG_PORT REPLICA_PORT API_PORTS ETCD_PORT ETCD_PEER_PORT: etcd,
# then the members: on a first start the first alone until it leads (it
# bootstraps), then the second; later, whichever is down.  Waits for a
# leader with its synchronous standby; sets PG_PRIMARY_PORT and PG_HA_PORTS
# (every member's PostgreSQL port, in order).
pg_ha_start() {
    local port=$1 rport=$2 apis=$3 eport=$4 epeer=$5 d i p
    local -a api ports=("$port" "$rport")
    IFS=, read -r -a api <<<"$apis"
    ((${#api[@]} == PT_NODES)) || die "SECKILL_PATRONI_API_PORTS must list $PT_NODES ports, got '$apis'"
    for p in "${api[@]}" "$rport" "$eport" "$epeer"; do
        valid_port "$p" || die "bad port '$p' (SECKILL_PG_REPLICA_PORT, SECKILL_PATRONI_API_PORTS, SECKILL_ETCD_PORT, SECKILL_ETCD_PEER_PORT)"
    done
    [[ $(printf '%s\n' "${ports[@]}" "${api[@]}" "$eport" "$epeer" | sort | uniq -d) == "" ]] ||
        die "the PostgreSQL, Patroni and etcd ports must all differ"
    command -v patroni >/dev/null 2>&1 || die "patroni is not installed (run scripts/deps.sh)"
    command -v etcd >/dev/null 2>&1 || die "etcd is not installed (run scripts/deps.sh)"
    if [[ -d $PG_DATA ]]; then
        warn "note: $PG_DIR holds the single server's data; the Patroni cluster starts from its own (patroni-N/)"
    fi
    printf 'ha\n' >"$PG_TOPOLOGY_FILE"
    if ((IS_ROOT)); then
        PG_USER=$(stack_os_user "$DIR/patroni-1" postgres)
    else
        PG_USER=$(id -un)
    fi
    PG_BIN=$(PG_DATA=$DIR/patroni-1/data pg_bindir)
    etcd_start "$eport" "$epeer"
    etcd_secure
    pt_write_ctl_conf
    local first=$DIR/patroni-1
    if [[ ! -f $first/data/PG_VERSION && ! -f $DIR/patroni-2/data/PG_VERSION ]]; then
        # A first start: the first member initialises the cluster alone.
        pt_start_node "$first" "${ports[0]}" "${api[0]}"
        for ((i = 0; i < PT_READY_WAIT_TENTHS; i += 2)); do
            [[ -n $(pt_leader_port) ]] && break
            pt_up "$first" || break
            sleep 0.2
        done
        [[ -n $(pt_leader_port) ]] || {
            log_tail "$first/patroni.log"
            log_tail "$first/postgresql.log"
            die "$(pt_name "$first") did not initialise the cluster"
        }
        info "$(pt_name "$first"): initialised the cluster"
    fi
    for ((i = 1; i <= PT_NODES; i++)); do
        d=$DIR/patroni-$i
        pt_start_node "$d" "${ports[i - 1]}" "${api[i - 1]}"
    done
    pt_wait_ready
    PG_PRIMARY_PORT=$(pt_leader_port)
    PG_HA_PORTS=
    while read -r d; do
        PG_HA_PORTS+=${PG_HA_PORTS:+,}$(pt_port "$d")
    done < <(pt_dirs)
    info "postgres: primary on 127.0.0.1:$PG_PRIMARY_PORT, its synchronous standby on the other of $PG_HA_PORTS (Patroni; etcd on :$(etcd_port))"
}

# pg_ha_start_from_env PG_PORT: pg_ha_start with the other ports of the
# environment (cmd_start has checked PG_PORT).
pg_ha_start_from_env() {
    local port=$1
    local rport=${SECKILL_PG_REPLICA_PORT:-$((10#$port + 1))}
    valid_port "$rport" || die "bad SECKILL_PG_REPLICA_PORT: $rport"
    pg_ha_start "$port" "$rport" "${SECKILL_PATRONI_API_PORTS:-$PT_DEFAULT_API_PORTS}" \
        "${SECKILL_ETCD_PORT:-$ETCD_DEFAULT_PORT}" "${SECKILL_ETCD_PEER_PORT:-$ETCD_DEFAULT_PEER_PORT}"
}

# pt_stop_node D: Patroni (which stops its server), then whatever server it
# left behind.
pt_stop_node() {
    local d=$1 pid name
    name=$(pt_name "$d")
    pid=$(pt_pid "$d")
    if [[ -n $pid ]] && pid_is "$pid" patroni; then
        stop_pid "$pid" patroni "$name's Patroni"
    fi
    pid=
    [[ -r $d/data/postmaster.pid ]] && pid=$(head -n1 "$d/data/postmaster.pid" | tr -dc '0-9')
    if [[ -n $pid ]] && pid_is "$pid" postgres; then
        warn "$name: PostgreSQL (pid $pid) outlived Patroni; stopping it"
        kill -CONT "$pid" 2>/dev/null || true
        PG_USER=${PG_USER:-$(stat -c %U "$d")}
        as_pg "$(PG_DATA=$d/data pg_bindir)/pg_ctl" -D "$d/data" -m immediate -w -t "$PG_CTL_TIMEOUT" stop \
            </dev/null >>"$d/patroni.log" 2>&1 9>&- || kill -KILL "$pid" 2>/dev/null || true
    fi
    info "$name: stopped"
}

# pg_ha_stop: the standbys first, then the leader (a leader stopped first
# would hand over to a standby that is stopping too), then etcd.
pg_ha_stop() {
    local d leader rc=0
    local -a nodes
    mapfile -t nodes < <(pt_dirs)
    leader=$(pt_leader_port)
    for d in "${nodes[@]}"; do
        [[ $(pt_port "$d") == "$leader" ]] && continue
        pt_stop_node "$d" || rc=1
    done
    for d in "${nodes[@]}"; do
        [[ $(pt_port "$d") == "$leader" ]] || continue
        pt_stop_node "$d" || rc=1
    done
    if [[ -d $ETCD_DIR ]]; then
        etcd_stop || rc=1
    fi
    return "$rc"
}

# pg_ha_status: a line per member and etcd; fails unless etcd and every
# member run and a leader accepts connections.
pg_ha_status() {
    local d rc=0 out role state port leader
    if etcd_up; then
        info "etcd: running on 127.0.0.1:$(etcd_port) (pid $(etcd_pid))"
    else
        info "etcd: NOT RUNNING"
        rc=1
    fi
    out=$(pt_cluster) || out='{"members":[]}'
    while read -r d; do
        port=$(pt_port "$d")
        read -r role state < <(jq -r --arg n "$(pt_name "$d")" \
            '[.members[] | select(.name == $n)][0] | "\(.role // "-") \(.state // "-")"' <<<"$out" 2>/dev/null ||
            echo '- -')
        if pt_up "$d"; then
            info "$(pt_name "$d"): Patroni running (pid $(pt_pid "$d")), PostgreSQL on 127.0.0.1:$port: ${role:--} ${state:--}"
        else
            info "$(pt_name "$d"): Patroni NOT RUNNING (PostgreSQL port $port)"
            rc=1
        fi
    done < <(pt_dirs)
    leader=$(pt_leader_port)
    PG_BIN=$(PG_DATA=$DIR/patroni-1/data pg_bindir)
    if [[ -n $leader ]] && pg_ready "$leader"; then
        info "postgres: primary on 127.0.0.1:$leader"
    else
        info "postgres: NO PRIMARY accepting connections"
        rc=1
    fi
    return "$rc"
}

#!/usr/bin/env bash
# Project-local Redis + PostgreSQL, loopback only, no systemd.
#
#   scripts/stack.sh start  DIR   start both (idempotent); writes DIR/env
#   scripts/stack.sh stop   DIR   stop both (missing/stopped parts are fine)
#   scripts/stack.sh status DIR   print state; exit 0 only if both are up
#
# start reads SECKILL_REDIS_PORT (default 6380) and SECKILL_PG_PORT (default
# 5433).  stop/status use the ports recorded in DIR's generated configs.
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
#                 and SECKILL_MIGRATE_PG_DSN (the owner, its own passfile)
#
# Exit codes: 0 ok, 1 failure, 2 usage, 3 a port is already taken by
# something else (callers may retry with other ports).
set -euo pipefail

PROG=stack.sh
REDIS_WAIT_TENTHS=100 # 10 s
PG_CTL_TIMEOUT=30
LOCK_WAIT=60

die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 1
}
warn() { printf '%s: %s\n' "$PROG" "$*" >&2; }
info() { printf '%s: %s\n' "$PROG" "$*"; }

usage() {
    printf 'usage: %s {start|stop|status} DIR\n' "$0" >&2
    exit 2
}

# Print the last lines of a log file to stderr, if it exists.
log_tail() {
    local f=$1
    if [[ -r $f ]]; then
        printf -- '--- last lines of %s ---\n' "$f" >&2
        tail -n 40 "$f" >&2 || true
        printf -- '--- end of %s ---\n' "$f" >&2
    else
        printf '(no log at %s)\n' "$f" >&2
    fi
}

valid_port() { [[ $1 =~ ^[0-9]+$ ]] && ((10#$1 >= 1 && 10#$1 <= 65535)); }

# True if something listens on 127.0.0.1:PORT (or any address with that port).
port_busy() {
    local port=$1
    if command -v ss >/dev/null 2>&1; then
        [[ -n $(ss -ltnH "sport = :$port" 2>/dev/null) ]]
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
    fi
}

# True if PID is alive (not a zombie) and its command name starts with NAME.
pid_is() {
    local pid=$1 name=$2 comm stat
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    [[ -r /proc/$pid/stat ]] || return 0 # no /proc: trust kill -0
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z && $comm == "$name"* ]]
}

random_hex() { # random_hex NBYTES
    od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'
}

# Write stdin to FILE atomically with MODE.
write_file() {
    local file=$1 mode=$2 tmp
    tmp=$(mktemp "$file.XXXXXX")
    cat >"$tmp"
    chmod "$mode" "$tmp"
    mv -f "$tmp" "$file"
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

R_DIR=$DIR/redis
R_CONF=$R_DIR/redis.conf
R_PIDFILE=$R_DIR/redis.pid
R_LOG=$R_DIR/redis.log
PG_DIR=$DIR/pg
PG_DATA=$PG_DIR/data
PG_RUN=$PG_DIR/run
PG_CONF=$PG_DATA/seckill.conf
PG_LOG=$DIR/pg.log
PG_PWFILE=$DIR/pg-password
PG_OWNER_PWFILE=$DIR/pg-owner-password
PG_APP_PWFILE=$DIR/pg-app-password
PGPASS=$DIR/pgpass
PGPASS_OWNER=$DIR/pgpass-owner
PGPASS_ADMIN=$DIR/pgpass-admin
ENV_FILE=$DIR/env
PG_DB=seckill
PG_ROLE=seckill # the superuser: initdb, roles, the tests' resets
PG_OWNER=seckill_owner
PG_APP=seckill_app
R_PW_FILE=$DIR/redis-password
R_ADMIN_PW_FILE=$DIR/redis-admin-password
R_SVC_USER=seckill
R_PW_BYTES=32
PG_PW_BYTES=16
R_ADMIN_USER=seckill-admin

IS_ROOT=0
[[ $(id -u) -eq 0 ]] && IS_ROOT=1

# Serialise concurrent invocations on the same DIR.  Daemons are started
# with fd 9 closed so they never inherit the lock.
if command -v flock >/dev/null 2>&1; then
    exec 9>>"$DIR/.stack.lock"
    flock -w "$LOCK_WAIT" 9 || die "could not lock $DIR/.stack.lock within ${LOCK_WAIT}s (another stack.sh running?)"
fi

# ---------------------------------------------------------------- OS users

# stack_os_user DIR PREFERRED: the OS user that owns and runs a server whose
# files are under DIR (root only): DIR's owner when it is not root, else
# PREFERRED (Debian's package user) when it exists, else the system user
# 'seckill', created if missing.
stack_os_user() {
    local dir=$1 preferred=$2 owner
    if [[ -d $dir ]]; then
        owner=$(stat -c %U "$dir")
        if [[ $owner != root && $owner != UNKNOWN ]]; then
            printf '%s\n' "$owner"
            return 0
        fi
    fi
    if id -u "$preferred" >/dev/null 2>&1; then
        printf '%s\n' "$preferred"
        return 0
    fi
    if ! id -u seckill >/dev/null 2>&1; then
        warn "creating system user 'seckill' to run the stack's servers"
        useradd --system --user-group --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin seckill >&2 || die "useradd seckill failed"
    fi
    printf 'seckill\n'
}

# as_user USER CMD...: runs CMD as USER (root), or as ourselves, from / (the
# user's home may be unreadable).
as_user() {
    local user=$1
    shift
    if ((IS_ROOT)); then
        (cd / && runuser -u "$user" -- "$@")
    else
        (cd / && "$@")
    fi
}

# fix_traversal USER TARGET: makes every ancestor of DIR traversable by USER
# (root only), so that it can reach TARGET.
fix_traversal() {
    ((IS_ROOT)) || return 0
    local user=$1 target=$2 d=$DIR
    local -a chain=()
    while :; do
        chain=("$d" "${chain[@]}")
        [[ $d == / ]] && break
        d=$(dirname "$d")
    done
    for d in "${chain[@]}"; do
        if ! runuser -u "$user" -- test -x "$d" 2>/dev/null; then
            warn "note: adding o+x to $d so that user '$user' can reach $target"
            chmod o+x "$d"
            runuser -u "$user" -- test -x "$d" 2>/dev/null ||
                die "user '$user' still cannot traverse $d; move DIR somewhere accessible"
        fi
    done
}

# ensure_password FILE NBYTES: FILE holds NBYTES random bytes in hex (mode
# 600), made if missing; prints them.
ensure_password() {
    local file=$1 nbytes=$2 pw
    if [[ ! -s $file ]]; then
        (
            umask 077
            random_hex "$nbytes" >"$file.tmp"
            mv -f "$file.tmp" "$file"
        )
    fi
    chmod 600 "$file"
    pw=$(tr -dc '0-9a-f' <"$file")
    [[ ${#pw} -eq $((2 * nbytes)) ]] ||
        die "$file does not hold a $((2 * nbytes))-hex-digit password; delete it to regenerate"
    printf '%s\n' "$pw"
}

# ---------------------------------------------------------------- redis

# Port recorded in the generated redis.conf (empty if none).
redis_conf_port() {
    [[ -r $R_CONF ]] || return 0
    awk '$1 == "port" { print $2; exit }' "$R_CONF"
}

redis_pid() {
    [[ -r $R_PIDFILE ]] || return 0
    head -n1 "$R_PIDFILE" 2>/dev/null | tr -dc '0-9'
}

# redis_admin PORT ARGS...: redis-cli as the admin ACL user (the password
# goes through the environment, not the command line).
redis_admin() {
    local port=$1 pw
    shift
    [[ -r $R_ADMIN_PW_FILE ]] || return 1
    pw=$(tr -dc '0-9a-f' <"$R_ADMIN_PW_FILE")
    REDISCLI_AUTH=$pw timeout 5 redis-cli --user "$R_ADMIN_USER" -h 127.0.0.1 -p "$port" "$@"
}

redis_ping() { # redis_ping PORT
    local out
    out=$(redis_admin "$1" ping 2>/dev/null) || return 1
    [[ $out == PONG ]]
}

# True if our redis (pid file) is alive and answers on its port.
redis_up() {
    local pid port
    pid=$(redis_pid)
    port=$(redis_conf_port)
    [[ -n $pid && -n $port ]] || return 1
    pid_is "$pid" redis && redis_ping "$port"
}

# The service's ACL user may use its own keys and channels and the commands
# that seckilld, seckillctl, seckill-loadtest, the lock library and the Lua
# scripts send (scripts run with their caller's rights), nothing else: no
# FLUSHALL, FLUSHDB, CONFIG, KEYS, DEBUG, SHUTDOWN, REPLICAOF, MONITOR, MODULE
# or ACL.  Keys: every key of a SKU, its locks and fencing counters start with
# seckill: (service/core/keys.c).  Channels: seckill:decisions and the lock
# library's release notices of those locks.
R_SVC_KEYS='~seckill:*'
R_SVC_CHANNELS='&seckill:* &rlock:release:seckill:*'
R_SVC_COMMANDS=(
    # connection: handshake, health, seckillctl's reply alignment
    auth select ping echo
    # run id of the server a SKU was built on (a restart may have lost writes)
    info
    # scripts (EVAL when the script cache was flushed), replicas of a lock
    evalsha eval wait
    # plain keys, in C and in lua/*.lua, lua/rlock/*.lua
    get set mget mset del exists type pttl pexpire incrby decrby time
    hget hset hdel hgetall hkeys hlen hmget hvals hincrby hscan
    # order streams and their consumer group; /metrics reads the group's lag
    xadd xack xdel xlen xrange xreadgroup xautoclaim 'xgroup|create' 'xinfo|groups'
    # decisions and lock wake-ups; seckillctl lock list / force-release
    publish subscribe unsubscribe scan multi exec
)

# redis_acl_rules SERVICE_PW ADMIN_PW: the ACL lines of redis.conf (passwords
# as SHA-256, so the config holds no password).
redis_acl_rules() {
    local svc_hash admin_hash cmds=
    svc_hash=$(printf '%s' "$1" | sha256sum | cut -d' ' -f1)
    admin_hash=$(printf '%s' "$2" | sha256sum | cut -d' ' -f1)
    printf -v cmds ' +%s' "${R_SVC_COMMANDS[@]}"
    # Nobody can log in as the default user (off, no password), but it keeps
    # every right: Redis 7.0 replays the AOF as that user and re-checks the
    # ACL at each EXEC, so a default user without rights would silently drop
    # every script's writes (MULTI/EXEC in the AOF) on a restart (redis
    # #14541, valkey #3983).
    printf 'user default off resetpass ~* &* +@all\n'
    printf 'user %s on #%s resetkeys %s resetchannels %s -@all%s\n' \
        "$R_SVC_USER" "$svc_hash" "$R_SVC_KEYS" "$R_SVC_CHANNELS" "$cmds"
    printf 'user %s on #%s ~* &* +@all\n' "$R_ADMIN_USER" "$admin_hash"
}

redis_start() {
    local port=$1 pid i
    command -v redis-server >/dev/null 2>&1 || die "redis-server not found (run scripts/deps.sh)"
    command -v redis-cli >/dev/null 2>&1 || die "redis-cli not found (run scripts/deps.sh)"
    if redis_up; then
        local cur
        cur=$(redis_conf_port)
        if [[ $cur != "$port" ]]; then
            warn "redis already running on port $cur (requested $port); stop the stack to change ports"
        fi
        info "redis: already running on 127.0.0.1:$cur (pid $(redis_pid))"
        return 0
    fi
    pid=$(redis_pid)
    if [[ -n $pid ]] && pid_is "$pid" redis; then
        die "redis (pid $pid) is alive but does not answer PING on port $(redis_conf_port); stop it with: $0 stop $DIR"
    fi
    rm -f "$R_PIDFILE"
    if port_busy "$port"; then
        printf '%s: error: port %s is already in use; cannot start redis (set SECKILL_REDIS_PORT)\n' "$PROG" "$port" >&2
        exit 3
    fi
    local svc_pw admin_pw r_user
    svc_pw=$(ensure_password "$R_PW_FILE" "$R_PW_BYTES")
    admin_pw=$(ensure_password "$R_ADMIN_PW_FILE" "$R_PW_BYTES")
    mkdir -p "$R_DIR"
    chmod 700 "$R_DIR"
    if ((IS_ROOT)); then
        r_user=$(stack_os_user "$R_DIR" redis)
    else
        r_user=$(id -un)
        [[ -O $R_DIR ]] || die "$R_DIR belongs to $(stat -c %U "$R_DIR"); run this as that user or as root"
    fi
    write_file "$R_CONF" 600 <<EOF
# generated by scripts/stack.sh; rewritten on every start
bind 127.0.0.1
port $port
protected-mode yes
daemonize yes
supervised no
dir "$R_DIR"
pidfile "$R_PIDFILE"
logfile "$R_LOG"
loglevel notice
appendonly yes
appendfsync everysec
save ""
# DEBUG for the admin user (fault scripts); the ACL keeps it from the service.
enable-debug-command local
$(redis_acl_rules "$svc_pw" "$admin_pw")
EOF
    : >>"$R_LOG"
    if ((IS_ROOT)); then
        # Everything the server writes (AOF, pid, log) belongs to its user.
        chown -R "$r_user": "$R_DIR" 2>/dev/null || chown -R "$r_user" "$R_DIR"
        fix_traversal "$r_user" "$R_DIR"
    fi
    as_user "$r_user" redis-server "$R_CONF" </dev/null >>"$R_LOG" 2>&1 9>&- ||
        {
            warn "redis-server failed to start"
            log_tail "$R_LOG"
            exit 1
        }
    for ((i = 0; i < REDIS_WAIT_TENTHS; i++)); do
        if redis_up; then
            info "redis: started on 127.0.0.1:$port (pid $(redis_pid), user $r_user)"
            return 0
        fi
        sleep 0.1
    done
    warn "redis did not answer PING on port $port within $((REDIS_WAIT_TENTHS / 10))s"
    log_tail "$R_LOG"
    exit 1
}

redis_stop() {
    local pid port i
    pid=$(redis_pid)
    port=$(redis_conf_port)
    if [[ -z $pid ]] || ! pid_is "$pid" redis; then
        rm -f "$R_PIDFILE"
        info "redis: not running"
        return 0
    fi
    if [[ -n $port ]]; then
        redis_admin "$port" shutdown nosave >/dev/null 2>&1 || true
    fi
    for ((i = 0; i < 100; i++)); do
        pid_is "$pid" redis || break
        if ((i == 50)); then kill -TERM "$pid" 2>/dev/null || true; fi
        sleep 0.1
    done
    if pid_is "$pid" redis; then
        warn "redis (pid $pid) did not exit after 10s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            pid_is "$pid" redis || break
            sleep 0.1
        done
        pid_is "$pid" redis && die "could not stop redis (pid $pid)"
    fi
    rm -f "$R_PIDFILE"
    info "redis: stopped"
}

# ---------------------------------------------------------------- postgres

# Binary dir: the version of an existing cluster, else the newest installed.
pg_bindir() {
    local ver d
    if [[ -r $PG_DATA/PG_VERSION ]]; then
        ver=$(tr -dc '0-9.' <"$PG_DATA/PG_VERSION")
        d=/usr/lib/postgresql/$ver/bin
        [[ -x $d/postgres ]] || die "cluster in $PG_DATA is PostgreSQL $ver but $d/postgres is missing"
        printf '%s\n' "$d"
        return 0
    fi
    d=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null |
        sort -V | tail -n1)
    if [[ -z $d || ! -x $d/initdb ]]; then
        if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
            d=$(dirname "$(command -v initdb)")
        else
            die "no PostgreSQL server binaries in /usr/lib/postgresql/*/bin (run scripts/deps.sh)"
        fi
    fi
    printf '%s\n' "$d"
}

PG_USER=
pg_user_init() {
    [[ -n $PG_USER ]] && return 0
    if ((IS_ROOT)); then
        PG_USER=$(stack_os_user "$PG_DIR" postgres)
    else
        PG_USER=$(id -un)
        if [[ -d $PG_DATA && ! -O $PG_DATA ]]; then
            die "$PG_DATA belongs to $(stat -c %U "$PG_DATA"); run this as that user or as root"
        fi
    fi
}

# Run a command as the cluster's OS user.
as_pg() { as_user "$PG_USER" "$@"; }

pg_conf_port() {
    [[ -r $PG_CONF ]] || return 0
    awk -F= '$1 ~ /^port[ \t]*$/ { gsub(/[^0-9]/, "", $2); print $2; exit }' "$PG_CONF"
}

pg_pid() {
    [[ -r $PG_DATA/postmaster.pid ]] || return 0
    head -n1 "$PG_DATA/postmaster.pid" 2>/dev/null | tr -dc '0-9'
}

pg_ready() { # pg_ready PORT
    timeout 5 "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$1" -t 3 >/dev/null 2>&1
}

pg_up() {
    local pid port
    pid=$(pg_pid)
    port=$(pg_conf_port)
    [[ -n $pid && -n $port ]] || return 1
    pid_is "$pid" postgres && pg_ready "$port"
}

pg_initdb() {
    local tmp=$PG_DIR/data.init pw
    pw=$(ensure_password "$PG_PWFILE" "$PG_PW_BYTES")
    rm -rf "$tmp"
    # The password file for initdb must be readable by the cluster user.
    local initpw=$PG_DIR/.initdb-pw
    (
        umask 077
        printf '%s\n' "$pw" >"$initpw"
    )
    ((IS_ROOT)) && chown "$PG_USER" "$initpw"
    info "postgres: initdb in $PG_DATA (as $PG_USER)"
    if ! as_pg "$PG_BIN/initdb" -D "$tmp" -U "$PG_ROLE" --auth=scram-sha-256 \
        --pwfile="$initpw" -E UTF8 --locale=C >"$DIR/initdb.log" 2>&1; then
        rm -f "$initpw"
        warn "initdb failed"
        log_tail "$DIR/initdb.log"
        exit 1
    fi
    rm -f "$initpw"
    printf "\n# added by scripts/stack.sh\ninclude_if_exists = 'seckill.conf'\n" >>"$tmp/postgresql.conf"
    mv "$tmp" "$PG_DATA"
}

pg_write_conf() {
    local port=$1 sockdirs=$PG_RUN
    # sun_path is 108 bytes; ".s.PGSQL.NNNNN" plus '/' must fit.
    if ((${#PG_RUN} + 16 > 107)); then
        warn "note: $PG_RUN is too long for a unix socket path; PostgreSQL will listen on TCP only"
        sockdirs=
    fi
    write_file "$PG_CONF" 600 <<EOF
# generated by scripts/stack.sh; rewritten on every start
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$sockdirs'
max_connections = 200
shared_buffers = 128MB
password_encryption = 'scram-sha-256'
logging_collector = off
log_line_prefix = '%m [%p] %q%u@%d '
EOF
    ((IS_ROOT)) && chown "$PG_USER" "$PG_CONF"
    return 0
}

pg_start() {
    local port=$1 pid
    pg_user_init
    PG_BIN=$(pg_bindir)
    if pg_up; then
        local cur
        cur=$(pg_conf_port)
        if [[ $cur != "$port" ]]; then
            warn "postgres already running on port $cur (requested $port); stop the stack to change ports"
        fi
        info "postgres: already running on 127.0.0.1:$cur (pid $(pg_pid))"
        return 0
    fi
    pid=$(pg_pid)
    if [[ -n $pid ]] && pid_is "$pid" postgres; then
        die "postgres (pid $pid) is alive but not accepting connections on port $(pg_conf_port); see $PG_LOG or run: $0 stop $DIR"
    fi
    if port_busy "$port"; then
        printf '%s: error: port %s is already in use; cannot start postgres (set SECKILL_PG_PORT)\n' "$PROG" "$port" >&2
        exit 3
    fi
    if [[ -d $PG_DATA && ! -s $PG_PWFILE ]]; then
        die "$PG_DATA exists but $PG_PWFILE is missing; remove $PG_DIR to re-initialise"
    fi

    mkdir -p "$PG_DIR" "$PG_RUN"
    chmod 700 "$PG_DIR" "$PG_RUN"
    : >>"$PG_LOG"
    if ((IS_ROOT)); then
        chown "$PG_USER": "$PG_DIR" "$PG_RUN" "$PG_LOG" 2>/dev/null ||
            chown "$PG_USER" "$PG_DIR" "$PG_RUN" "$PG_LOG"
        fix_traversal "$PG_USER" "$PG_DIR"
    fi
    [[ -f $PG_DATA/PG_VERSION ]] || pg_initdb
    pg_write_conf "$port"

    if ! as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -w -t "$PG_CTL_TIMEOUT" -l "$PG_LOG" start \
        </dev/null >"$DIR/pg_ctl.log" 2>&1 9>&-; then
        warn "pg_ctl start failed (waited at most ${PG_CTL_TIMEOUT}s)"
        cat "$DIR/pg_ctl.log" >&2 || true
        log_tail "$PG_LOG"
        exit 1
    fi
    if ! pg_up; then
        warn "postgres started but is not accepting connections on 127.0.0.1:$port"
        log_tail "$PG_LOG"
        exit 1
    fi
    info "postgres: started on 127.0.0.1:$port (pid $(pg_pid), user $PG_USER)"
}

pg_stop() {
    local pid i
    pid=$(pg_pid)
    if [[ -z $pid ]] || ! pid_is "$pid" postgres; then
        info "postgres: not running"
        return 0
    fi
    pg_user_init
    PG_BIN=$(pg_bindir)
    if ! as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w -t "$PG_CTL_TIMEOUT" stop \
        </dev/null >"$DIR/pg_ctl.log" 2>&1 9>&-; then
        warn "pg_ctl stop -m fast failed; trying -m immediate"
        cat "$DIR/pg_ctl.log" >&2 || true
        as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w -t 10 stop \
            </dev/null >>"$DIR/pg_ctl.log" 2>&1 9>&- || true
    fi
    for ((i = 0; i < 50; i++)); do
        pid_is "$pid" postgres || break
        sleep 0.1
    done
    if pid_is "$pid" postgres; then
        warn "postgres (pid $pid) still alive; sending SIGQUIT"
        kill -QUIT "$pid" 2>/dev/null || true
        sleep 2
        pid_is "$pid" postgres && {
            log_tail "$PG_LOG"
            die "could not stop postgres (pid $pid)"
        }
    fi
    info "postgres: stopped"
}

# ---------------------------------------------------------------- env, db

# pgpass_lines PORT ROLE PASSWORD: one role's libpq password file lines, for
# 127.0.0.1 and localhost.
pgpass_lines() {
    printf '127.0.0.1:%s:*:%s:%s\nlocalhost:%s:*:%s:%s\n' "$1" "$2" "$3" "$1" "$2" "$3"
}

# pg_dsn PORT ROLE [PASSFILE]: a conninfo without a password.  The service's
# DSN names no passfile (PGPASSFILE does); the others name their own, so the
# service's environment leads to no other role's password.
pg_dsn() {
    local dsn="host=127.0.0.1 port=$1 dbname=$PG_DB user=$2"
    [[ -n ${3:-} ]] && dsn+=" passfile='$3'"
    printf '%s connect_timeout=5\n' "$dsn"
}

write_client_files() {
    local rport=$1 pport=$2 pw rpw opw apw
    pw=$(tr -dc '0-9a-f' <"$PG_PWFILE")
    opw=$(ensure_password "$PG_OWNER_PWFILE" "$PG_PW_BYTES")
    apw=$(ensure_password "$PG_APP_PWFILE" "$PG_PW_BYTES")
    rpw=$(ensure_password "$R_PW_FILE" "$R_PW_BYTES")
    pgpass_lines "$pport" "$PG_APP" "$apw" | write_file "$PGPASS" 600
    pgpass_lines "$pport" "$PG_OWNER" "$opw" | write_file "$PGPASS_OWNER" 600
    pgpass_lines "$pport" "$PG_ROLE" "$pw" | write_file "$PGPASS_ADMIN" 600
    {
        printf '# generated by scripts/stack.sh start; source me\n'
        # The service's ACL user; the admin user's password stays in its file.
        printf 'export SECKILL_REDIS_URL=redis://%s:%s@127.0.0.1:%s/0\n' "$R_SVC_USER" "$rpw" "$rport"
        # The service's role; `seckilld migrate` logs in as the owner.
        printf 'export SECKILL_PG_DSN=%q\n' "$(pg_dsn "$pport" "$PG_APP")"
        printf 'export SECKILL_MIGRATE_PG_DSN=%q\n' "$(pg_dsn "$pport" "$PG_OWNER" "$PGPASS_OWNER")"
        printf 'export PGPASSFILE=%q\n' "$PGPASS"
        printf 'export SECKILL_REDIS_PORT=%s\n' "$rport"
        printf 'export SECKILL_PG_PORT=%s\n' "$pport"
    } | write_file "$ENV_FILE" 600
}

# pg_admin_sql DBNAME: runs the SQL on stdin as the superuser (stdin, not -c:
# role passwords must not show in ps).  Prints the rows; 1 on failure, with
# psql's message in DIR/psql.err.
pg_admin_sql() {
    local port dsn
    port=$(pg_conf_port)
    dsn="host=127.0.0.1 port=$port dbname=$1 user=$PG_ROLE connect_timeout=5"
    PGPASSFILE=$PGPASS_ADMIN timeout 30 "$PG_BIN/psql" "$dsn" -XAtq -v ON_ERROR_STOP=1 -f - \
        2>"$DIR/psql.err"
}

# The owner and the service's login role, their passwords (from their files,
# set on every start so that files and roles agree), and the database, owned
# by the owner.  The service's role has no attribute beyond LOGIN; what it may
# touch is granted by the migrations.  In a cluster made before these roles
# existed the superuser owned everything: it all moves to the owner, whose
# migrations may then grant on it.
pg_ensure_roles_db() {
    local opw apw exists
    opw=$(tr -dc '0-9a-f' <"$PG_OWNER_PWFILE")
    apw=$(tr -dc '0-9a-f' <"$PG_APP_PWFILE")
    # A failing statement is logged with its text (log_min_error_statement):
    # not these, which carry passwords.
    pg_admin_sql postgres >/dev/null <<EOF || {
SET log_min_error_statement = panic;
SET log_statement = none;
SELECT 'CREATE ROLE $PG_OWNER' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$PG_OWNER')
\\gexec
SELECT 'CREATE ROLE $PG_APP' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$PG_APP')
\\gexec
ALTER ROLE $PG_OWNER LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD '$opw';
ALTER ROLE $PG_APP LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD '$apw';
EOF
        warn "cannot create the roles $PG_OWNER and $PG_APP on 127.0.0.1:$(pg_conf_port)"
        cat "$DIR/psql.err" >&2 || true
        log_tail "$PG_LOG"
        exit 1
    }
    exists=$(pg_admin_sql postgres <<<"SELECT 1 FROM pg_database WHERE datname = '$PG_DB'") || {
        warn "cannot connect to postgres on 127.0.0.1:$(pg_conf_port) as $PG_ROLE"
        cat "$DIR/psql.err" >&2 || true
        exit 1
    }
    if [[ $exists != 1 ]]; then
        pg_admin_sql postgres >/dev/null <<<"CREATE DATABASE $PG_DB OWNER $PG_OWNER" || {
            warn "CREATE DATABASE $PG_DB failed"
            cat "$DIR/psql.err" >&2 || true
            exit 1
        }
        info "postgres: created database $PG_DB (owner $PG_OWNER)"
    fi
    # Tables first: a table's identity sequences follow it.
    pg_admin_sql "$PG_DB" >/dev/null <<EOF || {
ALTER DATABASE $PG_DB OWNER TO $PG_OWNER;
SELECT format('ALTER %s public.%I OWNER TO $PG_OWNER',
              CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END,
              c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm')
  AND c.relowner = '$PG_ROLE'::regrole
\\gexec
SELECT format('ALTER SEQUENCE public.%I OWNER TO $PG_OWNER', c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind = 'S' AND c.relowner = '$PG_ROLE'::regrole
\\gexec
EOF
        warn "cannot hand $PG_DB's objects to $PG_OWNER"
        cat "$DIR/psql.err" >&2 || true
        exit 1
    }
    rm -f "$DIR/psql.err"
}

# ---------------------------------------------------------------- commands

cmd_start() {
    local rport=${SECKILL_REDIS_PORT:-6380} pport=${SECKILL_PG_PORT:-5433}
    valid_port "$rport" || die "bad SECKILL_REDIS_PORT: $rport"
    valid_port "$pport" || die "bad SECKILL_PG_PORT: $pport"
    [[ $rport != "$pport" ]] || die "SECKILL_REDIS_PORT and SECKILL_PG_PORT are both $rport"
    redis_start "$rport"
    pg_start "$pport"
    # Actual ports (they differ from the requested ones if already running).
    rport=$(redis_conf_port)
    pport=$(pg_conf_port)
    write_client_files "$rport" "$pport"
    pg_ensure_roles_db
    info "env: source $ENV_FILE"
}

cmd_stop() {
    local rc=0
    if [[ -d $PG_DATA ]]; then
        pg_stop || rc=1
    else
        info "postgres: not running"
    fi
    redis_stop || rc=1
    return "$rc"
}

cmd_status() {
    local rc=0 pid port
    pid=$(redis_pid)
    port=$(redis_conf_port)
    if redis_up; then
        info "redis: running on 127.0.0.1:$port (pid $pid)"
    elif [[ -n $pid ]] && pid_is "$pid" redis; then
        info "redis: NOT ANSWERING (pid $pid alive, port ${port:-?})"
        rc=1
    else
        info "redis: stopped"
        rc=1
    fi
    if [[ -d $PG_DATA ]]; then
        PG_BIN=$(pg_bindir)
        pid=$(pg_pid)
        port=$(pg_conf_port)
        if pg_up; then
            info "postgres: running on 127.0.0.1:$port (pid $pid)"
        elif [[ -n $pid ]] && pid_is "$pid" postgres; then
            info "postgres: NOT ACCEPTING CONNECTIONS (pid $pid alive, port ${port:-?})"
            rc=1
        else
            info "postgres: stopped"
            rc=1
        fi
    else
        info "postgres: stopped (not initialised)"
        rc=1
    fi
    return "$rc"
}

case $CMD in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
esac

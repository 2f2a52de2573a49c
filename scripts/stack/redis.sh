# shellcheck shell=bash
# Sourced by scripts/stack.sh: a Redis process of the stack (a node: a data
# node or a Sentinel), its config, start and stop, and DIR's topology.  What
# is particular to one topology is in single.sh, sentinel.sh, cluster.sh.

R_DIR=$DIR/redis
R_CONF=$R_DIR/redis.conf
TOPOLOGY_FILE=$DIR/redis-topology
REDIS_WAIT_TENTHS=100 # 10 s
# Every data node's memory bound (SECKILL_REDIS_MAXMEMORY: bytes, or with a
# kb/mb/gb suffix; docs/operations.md, "Redis memory", sizes it).  Without one, buyers'
# remembered keys could grow Redis until the OS kills it.  noeviction: Redis
# refuses a write that would need memory (the service answers 503) rather
# than drop a stock, journal or stream key, which would oversell or lose an
# order.  Replicas get the same bound: a failover promotes one.
R_MAXMEMORY=${SECKILL_REDIS_MAXMEMORY:-1gb}
R_MAXMEMORY_POLICY=noeviction

# redis_bytes SIZE: SIZE (digits, then kb/mb/gb or nothing) in bytes, as
# Redis reads its config (a kb is 1024).
redis_bytes() {
    local v=${1,,} n
    n=${v%%[a-z]*}
    case ${v#"$n"} in
    kb) echo $((n * 1024)) ;;
    mb) echo $((n * 1048576)) ;;
    gb) echo $((n * 1073741824)) ;;
    *) echo "$n" ;;
    esac
}

# A Redis process of the stack (a node) lives in its own directory: redis/
# (the data node, the master of a new stack), redis-replica/ and sentinel-N/
# (Sentinel topology), redis-cluster-N/ (cluster topology), each holding
# KIND.conf, KIND.pid and KIND.log, KIND being redis or sentinel.
node_kind() {
    case ${1##*/} in
    sentinel-*) printf 'sentinel\n' ;;
    *) printf 'redis\n' ;;
    esac
}
node_file() { printf '%s/%s.%s\n' "$1" "$(node_kind "$1")" "$2"; } # node_file NODE conf|pid|log
node_label() { printf '%s\n' "${1##*/}"; }
# The command name of the node's process (pid_is) and its server binary.
node_comm() {
    if [[ $(node_kind "$1") == sentinel ]]; then printf 'redis-sentinel\n'; else printf 'redis\n'; fi
}
node_binary() {
    if [[ $(node_kind "$1") == sentinel ]]; then printf 'redis-sentinel\n'; else printf 'redis-server\n'; fi
}

# Port recorded in the node's generated config (empty if none).
node_port() {
    local conf
    conf=$(node_file "$1" conf)
    [[ -r $conf ]] || return 0
    awk '$1 == "port" { print $2; exit }' "$conf"
}

node_pid() {
    local pidfile
    pidfile=$(node_file "$1" pid)
    [[ -r $pidfile ]] || return 0
    head -n1 "$pidfile" 2>/dev/null | tr -dc '0-9'
}

# True if the node's process (pid file) is alive, answering or not.
node_alive() {
    local pid
    pid=$(node_pid "$1")
    [[ -n $pid ]] && pid_is "$pid" "$(node_comm "$1")"
}

# redis_admin PORT ARGS...: redis-cli as the admin ACL user (the password
# goes through the environment, not the command line).  The Sentinels have
# the same admin user.
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

# True if the node's process (pid file) is alive and answers on its port.
node_up() {
    local pid port
    pid=$(node_pid "$1")
    port=$(node_port "$1")
    [[ -n $pid && -n $port ]] || return 1
    pid_is "$pid" "$(node_comm "$1")" && redis_ping "$port"
}

# The topology DIR's Redis was last started with: what start recorded, else
# (a DIR of an older stack.sh) sentinel when the data node's config names a
# replication user (both data nodes' do), else single.
dir_topology() {
    local t=
    if [[ -r $TOPOLOGY_FILE ]]; then read -r t <"$TOPOLOGY_FILE" || true; fi
    case $t in
    single | sentinel | cluster) printf '%s\n' "$t" ;;
    *)
        if [[ -r $R_CONF ]] && grep -q '^masteruser ' "$R_CONF"; then
            printf 'sentinel\n'
        else
            printf 'single\n'
        fi
        ;;
    esac
}

# The topology of what runs in DIR now: none, single, sentinel or cluster.
running_topology() {
    local d
    local -a ha=("$RR_DIR")
    mapfile -t -O 1 ha < <(sentinel_dirs)
    for d in "${ha[@]}"; do
        if node_alive "$d"; then
            printf 'sentinel\n'
            return 0
        fi
    done
    while read -r d; do
        if node_alive "$d"; then
            printf 'cluster\n'
            return 0
        fi
    done < <(cluster_dirs)
    if node_alive "$R_DIR"; then
        d=$(dir_topology)
        printf '%s\n' "${d/cluster/single}"
    else
        printf 'none\n'
    fi
}

# record_topology NAME: DIR's Redis is started as NAME from now on (status
# reads it).
record_topology() { printf '%s\n' "$1" | write_file "$TOPOLOGY_FILE" 644; }

# The OS user of every Redis process of the stack: the one of the data node
# redis/ (as root: its directory's owner, else Debian's 'redis'; in a DIR
# that only ever held a cluster, the first cluster node's), so that the
# replica, the Sentinels and the cluster's nodes run as the same user.
R_USER=
redis_user_init() {
    local owner_dir=$R_DIR
    [[ -n $R_USER ]] && return 0
    [[ ! -d $R_DIR && -d $DIR/redis-cluster-1 ]] && owner_dir=$DIR/redis-cluster-1
    if ((IS_ROOT)); then
        R_USER=$(stack_os_user "$owner_dir" redis)
    else
        R_USER=$(id -un)
    fi
}

# redis_write_conf NODE PORT [MASTER_PORT]: a data node's redis.conf; in the
# Sentinel topology (HA=1) the replica of MASTER_PORT when given; in the
# cluster topology (CLUSTER=1) a cluster node (the cluster says who follows
# whom).
redis_write_conf() {
    local d=$1 port=$2 master=${3:-} svc_pw admin_pw repl_pw='' sent_pw=''
    svc_pw=$(ensure_password "$R_PW_FILE" "$R_PW_BYTES")
    admin_pw=$(ensure_password "$R_ADMIN_PW_FILE" "$R_PW_BYTES")
    if ((HA)); then
        repl_pw=$(ensure_password "$R_REPL_PW_FILE" "$R_PW_BYTES")
        sent_pw=$(ensure_password "$R_SENT_PW_FILE" "$R_PW_BYTES")
    elif ((CLUSTER)); then
        repl_pw=$(ensure_password "$R_REPL_PW_FILE" "$R_PW_BYTES")
    fi
    {
        cat <<EOF
# generated by scripts/stack.sh; rewritten on every start
bind 127.0.0.1
port $port
protected-mode yes
daemonize yes
supervised no
dir "$d"
pidfile "$d/redis.pid"
logfile "$d/redis.log"
loglevel notice
appendonly yes
appendfsync everysec
save ""
# DEBUG for the admin user (fault scripts); the ACL keeps it from the service.
enable-debug-command local
maxmemory $R_MAXMEMORY
maxmemory-policy $R_MAXMEMORY_POLICY
$(redis_acl_rules "$svc_pw" "$admin_pw" "$repl_pw" "$sent_pw")
EOF
        if ((HA)); then
            sentinel_data_node_conf "$repl_pw" "$master"
        fi
        if ((CLUSTER)); then
            cluster_node_conf "$port" "$repl_pw"
        fi
    } | write_file "$d/redis.conf" 600
}

# node_start NODE PORT PORTVAR [MASTER_PORT]: starts the node unless it runs
# already: a data node (the replica of MASTER_PORT when given) or a Sentinel
# (watching the master on MASTER_PORT).  PORTVAR: the setting of PORT, for
# messages.  Exit 3 when PORT (or a cluster node's bus port) is taken by
# something else.
node_start() {
    local d=$1 port=$2 portvar=$3 master=${4:-} label bin log pid i
    label=$(node_label "$d")
    bin=$(node_binary "$d")
    command -v "$bin" >/dev/null 2>&1 || die "$bin not found (run scripts/deps.sh)"
    command -v redis-cli >/dev/null 2>&1 || die "redis-cli not found (run scripts/deps.sh)"
    if node_up "$d"; then
        local cur
        cur=$(node_port "$d")
        if [[ $cur != "$port" ]]; then
            warn "$label already running on port $cur (requested $port); stop the stack to change ports"
        fi
        info "$label: already running on 127.0.0.1:$cur (pid $(node_pid "$d"))"
        return 0
    fi
    if node_alive "$d"; then
        die "$label (pid $(node_pid "$d")) is alive but does not answer PING on port $(node_port "$d"); stop it with: $0 stop $DIR"
    fi
    rm -f "$(node_file "$d" pid)"
    if port_busy "$port"; then
        printf '%s: error: port %s is already in use; cannot start %s (set %s)\n' "$PROG" "$port" "$label" "$portvar" >&2
        exit 3
    fi
    if ((CLUSTER)) && port_busy "$((port + C_BUS_OFFSET))"; then
        printf '%s: error: port %s (the cluster bus of %s, its port + %s) is already in use; cannot start %s (set %s)\n' \
            "$PROG" "$((port + C_BUS_OFFSET))" "$port" "$C_BUS_OFFSET" "$label" "$portvar" >&2
        exit 3
    fi
    mkdir -p "$d"
    chmod 700 "$d"
    redis_user_init
    if ((!IS_ROOT)); then
        [[ -O $d ]] || die "$d belongs to $(stat -c %U "$d"); run this as that user or as root"
    fi
    if [[ $(node_kind "$d") == sentinel ]]; then
        sentinel_write_conf "$d" "$port" "$master"
    else
        redis_write_conf "$d" "$port" "$master"
    fi
    log=$(node_file "$d" log)
    : >>"$log"
    if ((IS_ROOT)); then
        # Everything the server writes (AOF, pid, log; a Sentinel its config)
        # belongs to its user.
        chown -R "$R_USER": "$d" 2>/dev/null || chown -R "$R_USER" "$d"
        fix_traversal "$R_USER" "$d"
    fi
    # Sentinel topology: Redis rewrites these configs (a Sentinel at each
    # change, a data node at the CONFIG REWRITE of a failover) with mode 644
    # less its umask, and they hold passwords (auth-pass, masterauth).  A
    # cluster node's files are its own (nodes.conf, AOF): nobody else's.
    (
        ((HA || CLUSTER)) && umask 077
        as_user "$R_USER" "$bin" "$(node_file "$d" conf)" </dev/null >>"$log" 2>&1 9>&-
    ) ||
        {
            warn "$bin failed to start"
            log_tail "$log"
            exit 1
        }
    for ((i = 0; i < REDIS_WAIT_TENTHS; i++)); do
        if node_up "$d"; then
            info "$label: started on 127.0.0.1:$port (pid $(node_pid "$d"), user $R_USER)"
            return 0
        fi
        sleep 0.1
    done
    warn "$label did not answer PING on port $port within $((REDIS_WAIT_TENTHS / 10))s"
    log_tail "$log"
    exit 1
}

node_stop() {
    local d=$1 pid port i label comm
    label=$(node_label "$d")
    comm=$(node_comm "$d")
    pid=$(node_pid "$d")
    port=$(node_port "$d")
    if [[ -z $pid ]] || ! pid_is "$pid" "$comm"; then
        rm -f "$(node_file "$d" pid)"
        info "$label: not running"
        return 0
    fi
    if [[ -n $port ]]; then
        redis_admin "$port" shutdown nosave >/dev/null 2>&1 || true
    fi
    for ((i = 0; i < 100; i++)); do
        pid_is "$pid" "$comm" || break
        if ((i == 50)); then kill -TERM "$pid" 2>/dev/null || true; fi
        sleep 0.1
    done
    if pid_is "$pid" "$comm"; then
        warn "$label (pid $pid) did not exit after 10s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            pid_is "$pid" "$comm" || break
            sleep 0.1
        done
        pid_is "$pid" "$comm" && die "could not stop $label (pid $pid)"
    fi
    rm -f "$(node_file "$d" pid)"
    info "$label: stopped"
}

# node_role NODE: how a running node of the Sentinel topology sees itself.
node_role() {
    local port out
    port=$(node_port "$1")
    if [[ $(node_kind "$1") == sentinel ]]; then
        local sport flags nrepl nsent
        read -r sport flags nrepl nsent < <(sentinel_view "$port")
        printf 'master %s on :%s %s, %d replica(s), %d other Sentinel(s)' \
            "$S_MASTER_NAME" "$sport" "$flags" "$nrepl" "$nsent"
        return 0
    fi
    out=$(redis_admin "$port" INFO replication 2>/dev/null | tr -d '\r') || return 0
    awk -F: '$1 == "role" { role = $2 } $1 == "master_port" { mp = $2 }
             $1 == "master_link_status" { link = $2 } $1 == "connected_slaves" { n = $2 }
             END { if (role == "master") printf "master, %d replica(s)", n
                   else printf "replica of :%s, link %s", mp, link }' <<<"$out"
}

# node_status NODE: one line; fails unless the node is up.
node_status() {
    local d=$1 label pid port extra=
    label=$(node_label "$d")
    pid=$(node_pid "$d")
    port=$(node_port "$d")
    if node_up "$d"; then
        ((HA || CLUSTER)) && extra=$(node_role "$d")
        info "$label: running on 127.0.0.1:$port (pid $pid${extra:+, $extra})"
    elif node_alive "$d"; then
        info "$label: NOT ANSWERING (pid $pid alive, port ${port:-?})"
        return 1
    else
        info "$label: stopped"
        return 1
    fi
}

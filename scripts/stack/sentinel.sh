# shellcheck shell=bash
# Sourced by scripts/stack.sh: the Sentinel topology.
#
# SECKILL_REDIS_TOPOLOGY=sentinel (default single: one Redis) makes start run
# Redis behind Sentinel: the master on SECKILL_REDIS_PORT, one replica on
# SECKILL_REDIS_REPLICA_PORT (default the master's + 1) and the Sentinels on
# SECKILL_SENTINEL_PORTS (default 26380,26381,26382), all on loopback, all as
# the same OS user; DIR/env then names the Sentinels (redis-sentinel://).
# stop and status handle whatever DIR holds.  After a failover the replica's
# node stays the master: start asks the Sentinels (or their last config) which
# node is master and starts the other one as its replica.
#
# Its files in DIR, besides redis/ (the first master):
#   redis-replica/        the same as redis/, for the replica (its own AOF)
#   sentinel-N/           sentinel.conf (written on each start of that
#                 Sentinel, which rewrites it while it runs), sentinel.pid,
#                 sentinel.log; owned by the Redis OS user
#   redis-replication-password  password of ACL user seckill-replication
#                 (replicas log in to their master as it; mode 600)
#   redis-sentinel-password     password of ACL user seckill-sentinel (the
#                 Sentinels log in to the data nodes and to each other; 600)

RR_DIR=$DIR/redis-replica

# The Sentinel topology.  Short timings, for tests and a local demo: a master
# that does not answer for S_DOWN_AFTER_MS is down once S_QUORUM Sentinels
# say so; S_FAILOVER_TIMEOUT_MS bounds a failover's steps (and is the pause
# before the same master is failed over again).
# S_DOWN_AFTER_MS is three times the once-a-second rhythm in which a Sentinel
# pings and reconnects (SENTINEL_PING_PERIOD, Redis's own).  At 1000 a
# Sentinel that had just switched to the promoted replica could find it
# silent for that second while its new link came up, and with its peers'
# "down" answers about the old master still fresh (kept 5 s) it took that
# for a quorum and failed over again, back to the old master restarted as
# a replica a moment before (seen in test_stack_ha.sh, about one run in 20
# on a loaded machine; redis/redis#8607 reports the same at 500).
S_MASTER_NAME=seckill
S_QUORUM=2
S_DOWN_AFTER_MS=3000
S_FAILOVER_TIMEOUT_MS=5000
S_PARALLEL_SYNCS=1
S_DEFAULT_PORTS=26380,26381,26382
S_MAX_COUNT=9
# start waits this long for the replica to follow and every Sentinel to know
# the master, the replica and the other Sentinels (a failover needs them).
S_READY_WAIT_TENTHS=300 # 30 s
# A master refuses writes unless this many replicas follow it, none more than
# the lag (s) behind (SECKILL_REDIS_MIN_REPLICAS_TO_WRITE, default 0): with
# 1, a write acknowledged by a master that a failover then discards cannot
# happen, but with this stack's one replica every write stops from a failover
# until the old master is back.  The default keeps selling after a failover
# (the service's durable answers are PostgreSQL commits; what Redis loses,
# the reconciliation rebuilds); a deployment with two replicas sets 1.
R_MIN_REPLICAS_TO_WRITE=${SECKILL_REDIS_MIN_REPLICAS_TO_WRITE:-0}
R_MIN_REPLICAS_MAX_LAG=10

# On the Sentinels, the service's user may ask where the master is and hear
# of a switch, nothing else (no SENTINEL SET, FAILOVER, RESET or CONFIG).
S_SVC_CHANNELS='&+switch-master'
S_SVC_COMMANDS=(
    auth hello ping role subscribe psubscribe unsubscribe punsubscribe
    'sentinel|get-master-addr-by-name' 'sentinel|masters' 'sentinel|master' 'sentinel|sentinels'
)
# What one Sentinel sends another: its hellos, and in a failover the question
# whether the master is down, which also asks for its vote.
S_PEER_CHANNELS='&__sentinel__:hello'
S_PEER_COMMANDS=(auth ping publish 'client|setname' 'sentinel|is-master-down-by-addr')

# sentinel_acl_rules SERVICE_PW ADMIN_PW SENTINEL_PW: the ACL lines of a
# Sentinel: nobody without a password, the service's user to find the master
# (the same password as on the data nodes: one URL), the admin user for this
# script and the tests, and the Sentinels' own user for each other.
sentinel_acl_rules() {
    printf 'user default off resetpass resetkeys resetchannels -@all\n'
    printf 'user %s on #%s resetkeys resetchannels %s -@all%s\n' \
        "$R_SVC_USER" "$(sha256_hex "$1")" "$S_SVC_CHANNELS" "$(acl_allow "${S_SVC_COMMANDS[@]}")"
    printf 'user %s on #%s ~* &* +@all\n' "$R_ADMIN_USER" "$(sha256_hex "$2")"
    # the self-healing user finds the master as the service's does
    printf 'user %s on #%s resetkeys resetchannels %s -@all%s\n' \
        "$R_FUNC_USER" "$(sha256_hex "$(ensure_password "$R_FUNC_PW_FILE" "$R_PW_BYTES")")" \
        "$S_SVC_CHANNELS" "$(acl_allow "${S_SVC_COMMANDS[@]}")"
    printf 'user %s on #%s resetkeys resetchannels %s -@all%s\n' \
        "$R_SENT_USER" "$(sha256_hex "$3")" "$S_PEER_CHANNELS" "$(acl_allow "${S_PEER_COMMANDS[@]}")"
}

# sentinel_data_node_conf REPLICATION_PW [MASTER_PORT]: the Sentinel
# topology's lines of a data node's redis.conf (redis_write_conf), the
# replica of MASTER_PORT when given.  Both data nodes get them: either may be
# the replica (now, or once a failover swapped them), and the master must
# refuse writes no replica takes.
sentinel_data_node_conf() {
    cat <<EOF
# Sentinel topology: a replica logs in to its master as $R_REPL_USER.
masteruser $R_REPL_USER
masterauth $1
min-replicas-to-write $R_MIN_REPLICAS_TO_WRITE
min-replicas-max-lag $R_MIN_REPLICAS_MAX_LAG
EOF
    [[ -z ${2:-} ]] || printf 'replicaof 127.0.0.1 %s\n' "$2"
}

# sentinel_write_conf NODE PORT MASTER_PORT: a Sentinel's config, fresh: it
# watches the master on MASTER_PORT (the one that is master now), logs in to
# the data nodes and to the other Sentinels as their own user.
sentinel_write_conf() {
    local d=$1 port=$2 master=$3 conf myid='' svc_pw admin_pw sent_pw
    conf=$d/sentinel.conf
    svc_pw=$(ensure_password "$R_PW_FILE" "$R_PW_BYTES")
    admin_pw=$(ensure_password "$R_ADMIN_PW_FILE" "$R_PW_BYTES")
    sent_pw=$(ensure_password "$R_SENT_PW_FILE" "$R_PW_BYTES")
    # The id it wrote last time is kept: the other Sentinels see the same
    # Sentinel come back, not a new one that takes over its address.
    if [[ -r $conf ]]; then
        myid=$(awk '$1 == "sentinel" && $2 == "myid" { print $3; exit }' "$conf")
        [[ $myid =~ ^[0-9a-f]{40}$ ]] || myid=
    fi
    {
        cat <<EOF
# generated by scripts/stack.sh on every start of this Sentinel, which
# rewrites it while it runs (what it learns of the master and its peers)
bind 127.0.0.1
port $port
protected-mode yes
daemonize yes
dir "$d"
pidfile "$d/sentinel.pid"
logfile "$d/sentinel.log"
loglevel notice
EOF
        [[ -z $myid ]] || printf 'sentinel myid %s\n' "$myid"
        cat <<EOF
sentinel monitor $S_MASTER_NAME 127.0.0.1 $master $S_QUORUM
sentinel down-after-milliseconds $S_MASTER_NAME $S_DOWN_AFTER_MS
sentinel failover-timeout $S_MASTER_NAME $S_FAILOVER_TIMEOUT_MS
sentinel parallel-syncs $S_MASTER_NAME $S_PARALLEL_SYNCS
sentinel auth-user $S_MASTER_NAME $R_SENT_USER
sentinel auth-pass $S_MASTER_NAME $sent_pw
sentinel sentinel-user $R_SENT_USER
sentinel sentinel-pass $sent_pw
$(sentinel_acl_rules "$svc_pw" "$admin_pw" "$sent_pw")
EOF
    } | write_file "$conf" 600
}

# The Sentinels' directories, in order (sentinel-1, sentinel-2, ...).
sentinel_dirs() {
    local d
    for d in "$DIR"/sentinel-[0-9]*; do
        [[ -d $d ]] && printf '%s\n' "$d"
    done | sort -V
}

# redis_master_node: the directory of the data node that is master now: the
# one a running Sentinel names, else the one the Sentinels' configs name last
# (the highest config epoch: each Sentinel rewrites its config at every
# change), else redis/.  After a failover redis-replica/ is the master and
# redis/, started again, must follow it, not the other way round.
redis_master_node() {
    local s conf port='' p epoch best_epoch=-1 out rport rrport
    local -a sentinels
    rport=$(node_port "$R_DIR")
    rrport=$(node_port "$RR_DIR")
    mapfile -t sentinels < <(sentinel_dirs)
    for s in "${sentinels[@]}"; do
        node_up "$s" || continue
        out=$(redis_admin "$(node_port "$s")" SENTINEL GET-MASTER-ADDR-BY-NAME "$S_MASTER_NAME" 2>/dev/null) ||
            continue
        p=$(sed -n 2p <<<"$out" | tr -dc '0-9')
        if [[ -n $p ]]; then
            port=$p
            break
        fi
    done
    if [[ -z $port ]]; then
        for s in "${sentinels[@]}"; do
            conf=$s/sentinel.conf
            [[ -r $conf ]] || continue
            read -r p epoch < <(awk -v m="$S_MASTER_NAME" '
                $1 == "sentinel" && $2 == "monitor" && $3 == m { p = $5 }
                $1 == "sentinel" && $2 == "config-epoch" && $3 == m { e = $4 }
                END { print (p == "" ? "-" : p), e + 0 }' "$conf")
            [[ $p =~ ^[0-9]+$ && $epoch =~ ^[0-9]+$ ]] || continue
            if ((epoch > best_epoch)); then
                port=$p
                best_epoch=$epoch
            fi
        done
    fi
    if [[ -n $port && -n $rrport && $port == "$rrport" && $port != "$rport" ]]; then
        printf '%s\n' "$RR_DIR"
    else
        printf '%s\n' "$R_DIR"
    fi
}

# sentinel_view PORT: "PORT FLAGS REPLICAS OTHER_SENTINELS" of the master as
# the Sentinel on PORT sees it (SENTINEL MASTER), "- - 0 0" when it cannot say.
sentinel_view() {
    { redis_admin "$1" SENTINEL MASTER "$S_MASTER_NAME" 2>/dev/null || true; } | tr -d '\r' |
        awk 'NR % 2 == 1 { k = $0; next } { v[k] = $0 }
             END { print (v["port"] == "" ? "-" : v["port"]), (v["flags"] == "" ? "-" : v["flags"]),
                         v["num-slaves"] + 0, v["num-other-sentinels"] + 0 }'
}

# ha_not_ready MASTER_PORT REPLICA_PORT SENTINEL_PORT...: prints what keeps
# the topology from being ready; fails (nothing to say) when the replica
# follows the master and every Sentinel sees the master there up, its
# replica and all the other Sentinels (a failover needs them).
ha_not_ready() {
    local mport=$1 rport=$2 s n repl sport flags nrepl nsent
    shift 2
    n=$#
    repl=$(redis_admin "$rport" INFO replication 2>/dev/null | tr -d '\r') || {
        printf 'the replica on :%s does not answer\n' "$rport"
        return 0
    }
    if ! grep -qx "master_port:$mport" <<<"$repl" || ! grep -qx 'master_link_status:up' <<<"$repl"; then
        printf 'the replica on :%s does not follow the master on :%s yet\n' "$rport" "$mport"
        return 0
    fi
    for s in "$@"; do
        read -r sport flags nrepl nsent < <(sentinel_view "$s")
        if [[ $sport != "$mport" || $flags != master ]]; then
            printf 'the Sentinel on :%s does not see the master on :%s up (it sees :%s, %s)\n' \
                "$s" "$mport" "$sport" "$flags"
            return 0
        fi
        if ((nrepl < 1 || nsent < n - 1)); then
            printf 'the Sentinel on :%s knows %d replica(s) and %d other Sentinel(s), not 1 and %d\n' \
                "$s" "$nrepl" "$nsent" "$((n - 1))"
            return 0
        fi
    done
    return 1
}

# ha_wait_ready MASTER_PORT REPLICA_PORT SENTINEL_PORT...: waits (bounded)
# until ha_not_ready has nothing to say.
ha_wait_ready() {
    local i why=
    for ((i = 0; i < S_READY_WAIT_TENTHS; i += 2)); do
        why=$(ha_not_ready "$@") || return 0
        sleep 0.2
    done
    warn "the Sentinel topology is not ready after $((S_READY_WAIT_TENTHS / 10))s: $why"
    local d
    local -a nodes=("$R_DIR" "$RR_DIR")
    mapfile -t -O 2 nodes < <(sentinel_dirs)
    for d in "${nodes[@]}"; do
        log_tail "$(node_file "$d" log)"
    done
    exit 1
}

# ha_start REDIS_PORT REPLICA_PORT PG_PORT SENTINEL_PORTS: the master and its
# replica, the Sentinels, PostgreSQL (while the Sentinels find each other),
# then waits until a failover could happen.
ha_start() {
    local rport=$1 rrport=$2 pport=$3 sports=$4 p i mnode rnode mport s
    local -a ports sentinels=() actual=()
    IFS=, read -r -a ports <<<"$sports"
    ((${#ports[@]} >= S_QUORUM && ${#ports[@]} <= S_MAX_COUNT)) ||
        die "SECKILL_SENTINEL_PORTS must list $S_QUORUM to $S_MAX_COUNT ports (quorum $S_QUORUM), got '$sports'"
    for p in "${ports[@]}"; do
        valid_port "$p" || die "bad port in SECKILL_SENTINEL_PORTS: '$p'"
    done
    [[ $(printf '%s\n' "$rport" "$rrport" "$pport" "${ports[@]}" | sort | uniq -d) == "" ]] ||
        die "SECKILL_REDIS_PORT, SECKILL_REDIS_REPLICA_PORT, SECKILL_PG_PORT and SECKILL_SENTINEL_PORTS must all differ"
    record_topology sentinel

    mnode=$(redis_master_node)
    if [[ $mnode == "$R_DIR" ]]; then
        rnode=$RR_DIR
        node_start "$R_DIR" "$rport" SECKILL_REDIS_PORT
        mport=$(node_port "$R_DIR")
        node_start "$RR_DIR" "$rrport" SECKILL_REDIS_REPLICA_PORT "$mport"
    else
        rnode=$R_DIR
        info "redis: redis-replica is the master since a failover; redis follows it"
        node_start "$RR_DIR" "$rrport" SECKILL_REDIS_REPLICA_PORT
        mport=$(node_port "$RR_DIR")
        node_start "$R_DIR" "$rport" SECKILL_REDIS_PORT "$mport"
    fi
    for i in "${!ports[@]}"; do
        s=$DIR/sentinel-$((i + 1))
        node_start "$s" "${ports[i]}" SECKILL_SENTINEL_PORTS "$mport"
        sentinels+=("$s")
        actual+=("$(node_port "$s")")
    done
    # Sentinels of an earlier start with more of them: stopped and removed,
    # else status would count them and the others would wait for their votes.
    while read -r s; do
        [[ ${s##*/sentinel-} -gt ${#ports[@]} ]] || continue
        node_stop "$s"
        rm -rf "$s"
        info "$(node_label "$s"): removed (SECKILL_SENTINEL_PORTS names ${#ports[@]} Sentinels)"
    done < <(sentinel_dirs)

    pg_topology_start "$pport"
    rport=$(node_port "$R_DIR")
    rrport=$(node_port "$RR_DIR")
    pport=$(pg_client_ports)
    write_client_files "$rport" "$pport" "$rrport" "$(
        IFS=,
        printf '%s' "${actual[*]}"
    )"
    pg_ensure_roles_db
    ha_wait_ready "$mport" "$(node_port "$rnode")" "${actual[@]}"
    info "redis: master on 127.0.0.1:$mport, its replica on 127.0.0.1:$(node_port "$rnode"), Sentinels on ${actual[*]} (quorum $S_QUORUM)"
}

# ha_start_from_env REDIS_PORT PG_PORT: ha_start with the replica's and the
# Sentinels' ports of the environment (cmd_start has checked the others).
ha_start_from_env() {
    local rport=$1 pport=$2
    HA=1
    local rrport=${SECKILL_REDIS_REPLICA_PORT:-$((10#$rport + 1))}
    valid_port "$rrport" || die "bad SECKILL_REDIS_REPLICA_PORT: $rrport"
    ha_start "$rport" "$rrport" "$pport" "${SECKILL_SENTINEL_PORTS:-$S_DEFAULT_PORTS}"
}

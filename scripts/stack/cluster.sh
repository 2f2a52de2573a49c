# shellcheck shell=bash
# Sourced by scripts/stack.sh: the cluster topology.
#
# SECKILL_REDIS_TOPOLOGY=cluster makes start run a Redis Cluster instead: the
# masters on SECKILL_REDIS_CLUSTER_PORTS (default 6390,6391,6392; at least 3),
# SECKILL_REDIS_CLUSTER_REPLICAS replicas of each (default 1; 0 allowed) on
# SECKILL_REDIS_CLUSTER_REPLICA_PORTS (default 6393 and up, one port per
# replica), cluster-node-timeout SECKILL_REDIS_CLUSTER_NODE_TIMEOUT_MS (default
# 1000); each node's cluster bus is on its port + 10000, so ports are at most
# 55535.  The first start of DIR creates the cluster (redis-cli --cluster
# create); later starts start the nodes that are down, on the ports DIR
# recorded, and wait for cluster_state:ok (a master that was failed over comes
# back as a replica by itself).  DIR/env then names the masters' ports as seed
# nodes (redis-cluster://).
#
# Its files in DIR (redis/ is not used):
#   redis-cluster-N/      a node: redis.conf, nodes.conf (the cluster's state,
#                 Redis's own), redis.pid, redis.log, AOF files; N = 1.. the
#                 masters of the first start (SECKILL_REDIS_CLUSTER_PORTS), then
#                 their replicas; owned by the Redis OS user
#   redis-replication-password  password of ACL user seckill-replication
#                 (replicas log in to their master as it; mode 600)

# The cluster topology.  A node that does not answer for the node timeout is
# suspected, failed once most masters say so, and its replica elected about a
# second later: the short default keeps failover tests quick.
C_DEFAULT_PORTS=6390,6391,6392
C_DEFAULT_REPLICA_BASE=6393 # the replicas' default ports: from here up
C_DEFAULT_REPLICAS=1
C_DEFAULT_NODE_TIMEOUT_MS=1000
C_MIN_MASTERS=3 # redis-cli --cluster create wants at least three
C_MAX_MASTERS=9
C_MAX_REPLICAS=3
C_BUS_OFFSET=10000 # a node's cluster bus port is its port + this (Redis's default)
C_MAX_PORT=$((65535 - C_BUS_OFFSET))
C_SLOTS=16384
# redis-cli --cluster create: meets, slots, replicas, and its own wait for
# the nodes to agree.
C_CREATE_TIMEOUT=60
# start waits this long for every node to say cluster_state:ok with every
# slot assigned, to know every node, and for every replica's link to be up.
C_READY_WAIT_TENTHS=300 # 30 s
C_NODE_TIMEOUT_MS=$C_DEFAULT_NODE_TIMEOUT_MS # start: SECKILL_REDIS_CLUSTER_NODE_TIMEOUT_MS
C_SEED_PORTS=    # start: the masters' ports when the cluster was made (DIR/env)
C_REPLICA_PORTS= # start: the other nodes' ports

# The cluster's nodes' directories, in order (redis-cluster-1, ...).
cluster_dirs() {
    local d
    for d in "$DIR"/redis-cluster-[0-9]*; do
        [[ -d $d ]] && printf '%s\n' "$d"
    done | sort -V
}

# cluster_node_conf PORT REPLICATION_PW: the cluster topology's lines of a
# node's redis.conf (redis_write_conf).  The node's state (who it is, its
# peers, its slots) is Redis's own nodes.conf in its directory, kept across
# starts; the bus (node to node, no login) listens on loopback like the port.
cluster_node_conf() {
    cat <<EOF
# Cluster topology: a replica logs in to its master as $R_REPL_USER.
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout $C_NODE_TIMEOUT_MS
cluster-port $(($1 + C_BUS_OFFSET))
masteruser $R_REPL_USER
masterauth $2
EOF
}

# info_field TEXT NAME: the value of NAME:value in INFO-style TEXT.
info_field() { awk -F: -v n="$2" '$1 == n { print $2; exit }' <<<"$1"; }

# cluster_info PORT: CLUSTER INFO of the node on PORT (admin), without CRs.
cluster_info() { redis_admin "$1" CLUSTER INFO 2>/dev/null | tr -d '\r'; }

# cluster_formed: true once a node of DIR has been part of a cluster: its
# nodes.conf (Redis's) knows another node, or owns slots.  A node writes one
# alone at its first start, before any --cluster create.
cluster_formed() {
    local d
    while read -r d; do
        [[ -r $d/nodes.conf ]] || continue
        awk '$1 != "vars" && NF >= 8 { n++; if (NF >= 9) slots = 1 }
             END { exit !(n > 1 || slots) }' "$d/nodes.conf" && return 0
    done < <(cluster_dirs)
    return 1
}

# cluster_masters PORT...: the ports of the masters that serve slots now, in
# slot order, as the first of the nodes on PORT... that answers sees them
# (CLUSTER NODES): none failed or suspected.  Prints nothing when none answers.
cluster_masters() {
    local p out
    for p in "$@"; do
        out=$(redis_admin "$p" CLUSTER NODES 2>/dev/null | tr -d '\r') || continue
        [[ -n $out ]] || continue
        awk -f "$SELF_DIR/cluster-masters.awk" <<<"$out"
        return 0
    done
}

# cluster_not_ready NODES PORT...: prints what keeps the cluster from being
# ready; fails (nothing to say) when every node (on PORT...) answers
# cluster_state:ok with every slot assigned, knows all NODES nodes, and every
# replica's link to its master is up (a failover needs a replica in sync).
cluster_not_ready() {
    local want=$1 p out repl
    shift
    for p in "$@"; do
        out=$(cluster_info "$p") || out=
        if [[ -z $out ]]; then
            printf 'the node on :%s does not answer CLUSTER INFO\n' "$p"
            return 0
        fi
        if [[ $(info_field "$out" cluster_state) != ok ||
            $(info_field "$out" cluster_slots_assigned) != "$C_SLOTS" ]]; then
            printf 'the node on :%s says cluster_state:%s, %s of %s slots assigned\n' "$p" \
                "$(info_field "$out" cluster_state)" "$(info_field "$out" cluster_slots_assigned)" "$C_SLOTS"
            return 0
        fi
        if [[ $(info_field "$out" cluster_known_nodes) != "$want" ]]; then
            printf 'the node on :%s knows %s nodes, not %s\n' "$p" "$(info_field "$out" cluster_known_nodes)" "$want"
            return 0
        fi
        repl=$(redis_admin "$p" INFO replication 2>/dev/null | tr -d '\r') || repl=
        if [[ $(info_field "$repl" role) == slave && $(info_field "$repl" master_link_status) != up ]]; then
            printf 'the replica on :%s has no link to its master :%s yet\n' "$p" "$(info_field "$repl" master_port)"
            return 0
        fi
    done
    return 1
}

# cluster_wait_ready NODES PORT...: waits (bounded) until cluster_not_ready
# has nothing to say.
cluster_wait_ready() {
    local i why='' d
    for ((i = 0; i < C_READY_WAIT_TENTHS; i += 2)); do
        why=$(cluster_not_ready "$@") || return 0
        sleep 0.2
    done
    warn "the cluster is not ready after $((C_READY_WAIT_TENTHS / 10))s: $why"
    while read -r d; do
        log_tail "$(node_file "$d" log)"
    done < <(cluster_dirs)
    exit 1
}

# cluster_create REPLICAS PORT...: makes the cluster of the fresh nodes on
# PORT... (the masters first), REPLICAS replicas per master, as the admin
# user (its password through the environment).  redis-cli's output goes to
# DIR/redis-cluster-create.log.
cluster_create() {
    local replicas=$1 pw p log=$DIR/redis-cluster-create.log
    local -a addrs=()
    shift
    for p in "$@"; do
        addrs+=("127.0.0.1:$p")
    done
    pw=$(tr -dc '0-9a-f' <"$R_ADMIN_PW_FILE")
    info "redis: creating the cluster (masters first, $replicas replica(s) each): ${addrs[*]}"
    if ! REDISCLI_AUTH=$pw timeout "$C_CREATE_TIMEOUT" redis-cli --user "$R_ADMIN_USER" \
        --cluster create "${addrs[@]}" --cluster-replicas "$replicas" --cluster-yes \
        </dev/null >"$log" 2>&1; then
        warn "redis-cli --cluster create failed (or took over ${C_CREATE_TIMEOUT}s)"
        log_tail "$log"
        exit 1
    fi
}

# cluster_start MASTER_PORTS REPLICA_PORTS REPLICAS PG_PORT: the cluster's
# nodes (created on DIR's first start, else the nodes DIR holds, on the ports
# they had), PostgreSQL, then waits until the cluster is ok.
cluster_start() {
    local mports=$1 rports=$2 replicas=$3 pport=$4 p i d dup pgpid nmasters
    local -a masters=() reps=() ports=() buses=() dirs=() actual=()
    IFS=, read -r -a masters <<<"$mports"
    IFS=, read -r -a reps <<<"$rports"
    ((${#masters[@]} >= C_MIN_MASTERS && ${#masters[@]} <= C_MAX_MASTERS)) ||
        die "SECKILL_REDIS_CLUSTER_PORTS must list $C_MIN_MASTERS to $C_MAX_MASTERS ports, got '$mports'"
    if ! [[ $replicas =~ ^[0-9]$ ]] || ((replicas > C_MAX_REPLICAS)); then
        die "bad SECKILL_REDIS_CLUSTER_REPLICAS: '$replicas' (0 to $C_MAX_REPLICAS)"
    fi
    ((${#reps[@]} == ${#masters[@]} * replicas)) ||
        die "SECKILL_REDIS_CLUSTER_REPLICA_PORTS must list $((${#masters[@]} * replicas)) ports ($replicas per master), got '$rports'"
    for p in "${masters[@]}" "${reps[@]}"; do
        if ! valid_port "$p" || ((10#$p > C_MAX_PORT)); then
            die "bad port in SECKILL_REDIS_CLUSTER_PORTS or SECKILL_REDIS_CLUSTER_REPLICA_PORTS: '$p'" \
                "(1 to $C_MAX_PORT: its cluster bus is on port + $C_BUS_OFFSET)"
        fi
        ports+=("$((10#$p))")
        buses+=("$((10#$p + C_BUS_OFFSET))")
    done
    dup=$(printf '%s\n' "${ports[@]}" "${buses[@]}" "$((10#$pport))" | sort | uniq -d | tr '\n' ' ')
    [[ -z $dup ]] ||
        die "the cluster's ports, their bus ports (port + $C_BUS_OFFSET) and SECKILL_PG_PORT must all differ: ${dup% } twice"
    record_topology cluster

    if cluster_formed; then
        # The nodes keep their ports: the others know each one by its
        # address (nodes.conf).
        mapfile -t dirs < <(cluster_dirs)
        for d in "${dirs[@]}"; do
            p=$(node_port "$d")
            [[ -n $p ]] || die "$d/redis.conf names no port; remove DIR's redis-cluster-*/ to create the cluster anew"
            actual+=("$p")
        done
        if [[ ${actual[*]} != "${ports[*]}" ]]; then
            warn "note: the cluster in $DIR has its nodes on ${actual[*]} (asked for ${ports[*]});" \
                "they keep those ports (remove DIR's redis-cluster-*/ to create it anew)"
        fi
        for i in "${!dirs[@]}"; do
            node_start "${dirs[i]}" "${actual[i]}" SECKILL_REDIS_CLUSTER_PORTS
        done
    else
        # A fresh cluster: every port must be free before any node starts (a
        # cluster, once made, keeps its ports), PostgreSQL's too.
        for i in "${!ports[@]}"; do
            d=$DIR/redis-cluster-$((i + 1))
            dirs+=("$d")
            if node_up "$d"; then
                # A node of a start that stopped short of creating the
                # cluster: on the requested port, or restarted there.
                [[ $(node_port "$d") == "${ports[i]}" ]] && continue
                node_stop "$d"
            fi
            for p in "${ports[i]}" "${buses[i]}"; do
                if port_busy "$p"; then
                    printf '%s: error: port %s is already in use; cannot start %s (%s; %s)\n' \
                        "$PROG" "$p" "$(node_label "$d")" \
                        "set SECKILL_REDIS_CLUSTER_PORTS / SECKILL_REDIS_CLUSTER_REPLICA_PORTS" \
                        "a node needs its port and its port + $C_BUS_OFFSET" >&2
                    exit 3
                fi
            done
        done
        pgpid=$(pg_pid)
        if ! { [[ -n $pgpid ]] && pid_is "$pgpid" postgres; } && port_busy "$pport"; then
            printf '%s: error: port %s is already in use; cannot start postgres (set SECKILL_PG_PORT)\n' "$PROG" "$pport" >&2
            exit 3
        fi
        # Nodes of an earlier attempt with more of them: not part of this one.
        while read -r d; do
            ((${d##*/redis-cluster-} > ${#ports[@]})) || continue
            node_stop "$d"
            rm -rf "$d"
            info "$(node_label "$d"): removed (the cluster is made of ${#ports[@]} nodes)"
        done < <(cluster_dirs)
        for i in "${!dirs[@]}"; do
            node_start "${dirs[i]}" "${ports[i]}" SECKILL_REDIS_CLUSTER_PORTS
        done
        cluster_create "$replicas" "${ports[@]}"
        actual=("${ports[@]}")
    fi

    pg_topology_start "$pport"
    pport=$(pg_client_ports)
    cluster_wait_ready "${#actual[@]}" "${actual[@]}"
    # The first nodes were the masters when the cluster was made: the seeds
    # of the URL, whichever of them is a replica since a failover.
    nmasters=$(info_field "$(cluster_info "${actual[0]}")" cluster_size)
    if ! [[ $nmasters =~ ^[0-9]+$ ]] || ((nmasters < 1 || nmasters > ${#actual[@]})); then
        die "cannot read cluster_size from the node on :${actual[0]}"
    fi
    C_SEED_PORTS=$(
        IFS=,
        printf '%s' "${actual[*]:0:nmasters}"
    )
    C_REPLICA_PORTS=$(
        IFS=,
        printf '%s' "${actual[*]:nmasters}"
    )
    write_client_files "${actual[0]}" "$pport"
    pg_ensure_roles_db
    info "redis: cluster ok, $C_SLOTS slots over the masters on $(cluster_masters "${actual[@]}" | tr '\n' ' ')(${#actual[@]} nodes)"
}

# cluster_start_from_env PG_PORT: cluster_start with the cluster's settings
# of the environment.
cluster_start_from_env() {
    local pport=$1
    CLUSTER=1
    local mports=${SECKILL_REDIS_CLUSTER_PORTS:-$C_DEFAULT_PORTS}
    local replicas=${SECKILL_REDIS_CLUSTER_REPLICAS:-$C_DEFAULT_REPLICAS} rports nmasters i
    C_NODE_TIMEOUT_MS=${SECKILL_REDIS_CLUSTER_NODE_TIMEOUT_MS:-$C_DEFAULT_NODE_TIMEOUT_MS}
    [[ $C_NODE_TIMEOUT_MS =~ ^[1-9][0-9]{1,5}$ ]] ||
        die "bad SECKILL_REDIS_CLUSTER_NODE_TIMEOUT_MS: '$C_NODE_TIMEOUT_MS' (10 to 999999)"
    [[ $replicas =~ ^[0-9]$ ]] || die "bad SECKILL_REDIS_CLUSTER_REPLICAS: '$replicas'"
    if [[ -n ${SECKILL_REDIS_CLUSTER_REPLICA_PORTS+set} ]]; then
        rports=$SECKILL_REDIS_CLUSTER_REPLICA_PORTS
    else
        # One port per replica from C_DEFAULT_REPLICA_BASE up.
        nmasters=$(tr -cd , <<<"$mports" | wc -c)
        rports=
        for ((i = 0; i < (nmasters + 1) * replicas; i++)); do
            rports+=${rports:+,}$((C_DEFAULT_REPLICA_BASE + i))
        done
    fi
    cluster_start "$mports" "$rports" "$replicas" "$pport"
}

# cluster_status: one line on the cluster as the first node that answers
# sees it; fails unless cluster_state is ok.
cluster_status() {
    local d out=
    local -a ports=()
    while read -r d; do
        ports+=("$(node_port "$d")")
    done < <(cluster_dirs)
    for d in "${ports[@]}"; do
        out=$(cluster_info "$d") && [[ -n $out ]] && break
    done
    if [[ -z $out ]]; then
        info "cluster: no node answers"
        return 1
    fi
    info "cluster: state $(info_field "$out" cluster_state)," \
        "$(info_field "$out" cluster_slots_assigned) of $C_SLOTS slots assigned," \
        "masters on $(cluster_masters "${ports[@]}" | tr '\n' ' ')($(info_field "$out" cluster_known_nodes) nodes known)"
    [[ $(info_field "$out" cluster_state) == ok ]]
}

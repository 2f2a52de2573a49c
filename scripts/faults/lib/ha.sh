# shellcheck shell=bash
# Sourced by scripts/faults.sh: a second stack of a scenario's own, behind
# Sentinel or a Redis Cluster (ha_up, ha_down), and what the Sentinel and the
# cluster scenarios ask of it.

HA_MASTER_NAME=seckill # scripts/stack/sentinel.sh's S_MASTER_NAME
HA_SAVED=()
HA_ENV_NEW=()
ha_env_on() {
    HA_SAVED=("$STACK_DIR" "$SECKILL_REDIS_URL" "$SECKILL_PG_DSN" "$PGPASSFILE"
        "${SECKILL_MIGRATE_PG_DSN:-}" "${SECKILL_MIGRATE_REDIS_URL_FILE:-}"
        "${SECKILL_REDIS_FUNCTIONS_URL_FILE:-}")
    STACK_DIR=$HA_DIR
    # what the HA stack's env sets that the main stack's does not (its
    # topology, Patroni's ports, ...): unset again by ha_env_off
    local name
    HA_ENV_NEW=()
    while read -r name; do
        [[ -v $name ]] || HA_ENV_NEW+=("$name")
    done < <(sed -n 's/^export \([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p' "$HA_DIR/env")
    # shellcheck source=/dev/null
    source "$HA_DIR/env"
    export SECKILL_REDIS_URL SECKILL_PG_DSN PGPASSFILE SECKILL_MIGRATE_PG_DSN \
        SECKILL_MIGRATE_REDIS_URL_FILE SECKILL_REDIS_FUNCTIONS_URL_FILE
}
ha_env_off() {
    ((${#HA_SAVED[@]})) || return 0
    STACK_DIR=${HA_SAVED[0]} SECKILL_REDIS_URL=${HA_SAVED[1]} SECKILL_PG_DSN=${HA_SAVED[2]}
    PGPASSFILE=${HA_SAVED[3]} SECKILL_MIGRATE_PG_DSN=${HA_SAVED[4]}
    SECKILL_MIGRATE_REDIS_URL_FILE=${HA_SAVED[5]} SECKILL_REDIS_FUNCTIONS_URL_FILE=${HA_SAVED[6]}
    export SECKILL_REDIS_URL SECKILL_PG_DSN PGPASSFILE SECKILL_MIGRATE_PG_DSN \
        SECKILL_MIGRATE_REDIS_URL_FILE SECKILL_REDIS_FUNCTIONS_URL_FILE
    ((${#HA_ENV_NEW[@]} == 0)) || unset "${HA_ENV_NEW[@]}"
    HA_ENV_NEW=()
    HA_SAVED=()
}

# ha_up: the Sentinel stack of this scenario, migrated, its settings in
# force (ha_down stops it and restores the main stack's).
HA_PORTS=()
ha_up() { # ha_up [TOPOLOGY]: sentinel (default), cluster or single (with SECKILL_PG_TOPOLOGY=ha)
    local topo=${1:-sentinel}
    HA_DIR=$SDIR/ha-stack
    # the main stack's, set again by ha_down: se_stack_restart (stack_ok after
    # a scenario) starts the topology these name
    HA_PORTS=("$SE_REDIS_PORT" "$SE_PG_PORT" "$SE_REPLICA_PORT" "$SE_SENTINEL_PORTS"
        "$SE_CLUSTER_PORTS" "$SE_CLUSTER_REPLICAS" "$SE_CLUSTER_REPLICA_PORTS"
        "$SE_PG_REPLICA_PORT" "$SE_PATRONI_API_PORTS" "$SE_ETCD_PORT" "$SE_ETCD_PEER_PORT")
    mkdir -p "$HA_DIR"
    SECKILL_REDIS_TOPOLOGY=$topo se_stack_start_free "$HA_DIR" >"$SDIR/ha-stack.log" 2>&1 || {
        fail "the $topo stack did not start ($SDIR/ha-stack.log)"
        return 1
    }
    ha_env_on
    "$BUILD_DIR/seckilld" migrate >"$SDIR/ha-migrate.log" 2>&1 || {
        fail "migrating the $topo stack failed ($SDIR/ha-migrate.log)"
        return 1
    }
    [[ $topo != sentinel ]] || sentinel_heal_bound
}

# sentinel_heal_bound: the scenario's heal bound, the issue's "the Sentinel
# detection time plus 5 s": the largest down-after-milliseconds that the
# Sentinels of the HA stack answer (SENTINEL MASTER, as the admin user) plus
# SENTINEL_HEAL_EXTRA_S.  Fails when none answers.
sentinel_heal_bound() {
    local p ms max='' ports=()
    IFS=, read -r -a ports <<<"$SE_SENTINEL_PORTS"
    for p in "${ports[@]}"; do
        ms=$(se_redis_admin "$HA_DIR" "$p" SENTINEL MASTER "$HA_MASTER_NAME" 2>/dev/null | tr -d '\r' |
            awk 'prev == "down-after-milliseconds" { print $0 + 0; exit } { prev = $0 }') || ms=
        [[ $ms =~ ^[0-9]+$ ]] || continue
        if [[ -z $max ]] || ((ms > max)); then max=$ms; fi
    done
    if [[ -z $max ]]; then
        fail "no Sentinel of the HA stack told its down-after-milliseconds (ports $SE_SENTINEL_PORTS)"
        return 1
    fi
    HEAL_BOUND[$SCEN]=$(awk -v ms="$max" -v x="$SENTINEL_HEAL_EXTRA_S" 'BEGIN { print ms / 1000 + x }')
    note "heal bound ${HEAL_BOUND[$SCEN]}s: down-after-milliseconds $max (the Sentinels, asked) + ${SENTINEL_HEAL_EXTRA_S}s"
}
ha_down() {
    [[ -n $HA_DIR ]] || return 0
    thaw
    stop_daemons # while their stack still runs; then the stack
    ha_env_off
    "$LT_STACK" stop "$HA_DIR" >"$SDIR/ha-stop.log" 2>&1 ||
        fail "stopping the HA stack failed ($SDIR/ha-stop.log)"
    HA_DIR=
    SE_REDIS_PORT=${HA_PORTS[0]} SE_PG_PORT=${HA_PORTS[1]} SE_REPLICA_PORT=${HA_PORTS[2]}
    SE_SENTINEL_PORTS=${HA_PORTS[3]} SE_CLUSTER_PORTS=${HA_PORTS[4]}
    SE_CLUSTER_REPLICAS=${HA_PORTS[5]} SE_CLUSTER_REPLICA_PORTS=${HA_PORTS[6]}
    SE_PG_REPLICA_PORT=${HA_PORTS[7]} SE_PATRONI_API_PORTS=${HA_PORTS[8]}
    SE_ETCD_PORT=${HA_PORTS[9]} SE_ETCD_PEER_PORT=${HA_PORTS[10]}
}
ha_master_kill() {
    local pid
    pid=$(tr -dc '0-9' <"$HA_DIR/redis/redis.pid")
    note "kill -9 of the Redis master (pid $pid); the Sentinels promote its replica"
    kill -KILL "$pid"
}

# The Sentinel scenarios' heal bound: the Sentinels' down-after-milliseconds
# plus this (sentinel_heal_bound).
SENTINEL_HEAL_EXTRA_S=5

# ---- Redis Cluster (scripts/stack/cluster.sh's topology: three masters,
# a replica each, cluster-node-timeout 1000 ms)

# cluster_admin ARGS...: a command as the admin user, to a master that answers.
cluster_admin() {
    local port
    port=$(se_redis_master_port "$HA_DIR" "") && [[ -n $port ]] || return 1
    se_redis_admin "$HA_DIR" "$port" "$@"
}

# cluster_slot_owner SLOT: "PORT ID" of the master serving SLOT now.
cluster_slot_owner() {
    cluster_admin CLUSTER NODES 2>/dev/null | tr -d '\r' | awk -v s="$1" '
        $3 ~ /master/ && $3 !~ /fail/ {
            for (i = 9; i <= NF; i++) {
                if ($i ~ /^\[/) continue
                n = split($i, r, "-"); if (n == 1) r[2] = r[1]
                if (s + 0 >= r[1] + 0 && s + 0 <= r[2] + 0) {
                    split($2, a, "[:@]"); print a[2], $1; exit
                }
            }
        }'
}

# cluster_node_pid PORT: the pid of the node of the HA stack on PORT.
cluster_node_pid() {
    local d
    for d in "$HA_DIR"/redis-cluster-[0-9]*; do
        if [[ $(awk '$1 == "port" { print $2; exit }' "$d/redis.conf" 2>/dev/null) == "$1" ]]; then
            tr -dc '0-9' <"$d/redis.pid"
            return 0
        fi
    done
    return 1
}

# A SKU's slot (its keys share the tag {sku:N}).
sku_slot() { cluster_admin CLUSTER KEYSLOT "seckill:{sku:$1}:stock" 2>/dev/null | tr -dc '0-9'; }

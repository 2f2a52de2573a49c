# shellcheck shell=bash
# Sourced by scripts/stack.sh: the single topology (the default), one Redis
# in DIR/redis/ beside PostgreSQL.

# single_start REDIS_PORT PG_PORT: one Redis, as always.
single_start() {
    local rport=$1 pport=$2
    record_topology single
    if [[ -d $RR_DIR && $(redis_master_node) == "$RR_DIR" ]]; then
        warn "note: redis-replica/ was the master last (Sentinel topology); one Redis uses redis/'s data"
    fi
    node_start "$R_DIR" "$rport" SECKILL_REDIS_PORT
    pg_topology_start "$pport"
    # Actual ports (they differ from the requested ones if already running).
    rport=$(node_port "$R_DIR")
    pport=$(pg_client_ports)
    write_client_files "$rport" "$pport"
    pg_ensure_roles_db
}

# shellcheck shell=bash
# Sourced by scripts/stack/env.sh (DIR/env) and scripts/stack-env.sh (the
# tests' superuser DSN): the one shape of a libpq DSN to the stack's
# PostgreSQL, whatever its topology.

PG_DSN_DB=seckill

# pg_dsn PORTS ROLE [PASSFILE [DBNAME]]: a conninfo without a password, to
# DBNAME (default seckill; pgbouncer's second database: stack/pgbouncer.sh)
# on the server
# on 127.0.0.1:PORT, or with several comma-separated PORTS (SECKILL_PG_TOPOLOGY=ha:
# every Patroni member) to whichever of them accepts writes now: libpq tries
# them in order and keeps the first that is not read-only
# (target_session_attrs=read-write), so a client that reconnects after a
# failover finds the new primary by itself.  connect_timeout bounds each
# host's attempt.  The service's DSN names no passfile (PGPASSFILE does); the
# others name their own, so the service's environment leads to no other
# role's password.
pg_dsn() {
    local ports=$1 hosts='' p
    local -a list
    IFS=, read -r -a list <<<"$ports"
    for p in "${list[@]}"; do
        hosts+=${hosts:+,}127.0.0.1
    done
    local dsn="host=$hosts port=$ports dbname=${4:-$PG_DSN_DB} user=$2"
    [[ -n ${3:-} ]] && dsn+=" passfile='$3'"
    ((${#list[@]} < 2)) || dsn+=" target_session_attrs=read-write"
    printf '%s connect_timeout=5\n' "$dsn"
}

#!/usr/bin/env bash
# The Sentinel topology of scripts/stack.sh (SECKILL_REDIS_TOPOLOGY=sentinel).
# Run by scripts/run-tests.sh like every service/tests/test_*.sh, but on a
# stack of its own: a master, its replica, three Sentinels (and PostgreSQL,
# which stack.sh always starts) on free ports in a scratch directory under
# var/, stopped by pid and removed at the end, failed or not.
#
#  1. the Sentinels agree where the master is; the replica follows it, in sync;
#  2. least privilege: the service's ACL user writes seckill:* on the master,
#     is refused on the replica (READONLY), FLUSHALL anywhere, EVAL and
#     FUNCTION FLUSH, and keys of others; it calls the functions `seckilld
#     migrate` loaded through the Sentinels (on the replica too); on the
#     Sentinels it must log in, may ask for the master, may not SENTINEL
#     FAILOVER or SENTINEL SET;
#  3. a real failover: kill -9 of the master; within down-after + failover
#     timeout + FAILOVER_MARGIN_S every Sentinel names the replica; it holds
#     the functions, and alone refuses writes (min-replicas-to-write);
#     `stack.sh start` brings the old master back as its replica, and the
#     service's user writes again; the
#     Sentinels switched the master once (no failover back to the old one);
#  4. the users the Redis processes use among themselves (replication,
#     Sentinel) were never refused anything (ACL LOG of every node).
#
# Passwords come from the stack's files and reach redis-cli through
# REDISCLI_AUTH, never its command line.
#
#   service/tests/test_stack_ha.sh     (KEEP_HA_STACK=1 keeps the directory, stopped)
set -euo pipefail

PROG=test_stack_ha.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
cd "$ROOT"
KEEP_VAR=KEEP_HA_STACK DIR_PREFIX=test-ha
# shellcheck source=service/tests/stack_test_lib.sh
source "$ROOT/service/tests/stack_test_lib.sh"

for tool in redis-cli redis-server redis-sentinel; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (scripts/deps.sh installs it)"
done

MASTER_NAME=seckill # stack.sh's S_MASTER_NAME
# The failover must be over within the Sentinels' own down-after-milliseconds
# and failover-timeout (read from them) plus this.
FAILOVER_MARGIN_S=10
# Any other wait: the replica's sync, a restarted node's answer.
WAIT_S=15



# all_sentinels_name PORT: every Sentinel, asked as the service's user, names
# 127.0.0.1:PORT as the master.
all_sentinels_name() {
    local s
    for s in "${SENTINELS[@]}"; do
        [[ $(svc "$s" SENTINEL GET-MASTER-ADDR-BY-NAME "$MASTER_NAME") == $'127.0.0.1\n'"$1" ]] || return 1
    done
}

# follows REPLICA MASTER: REPLICA is a replica of MASTER, link up, and has
# everything MASTER wrote (same replication offset).
follows() {
    local r m
    r=$(admin "$1" INFO replication)
    m=$(admin "$2" INFO replication)
    [[ $(field "$r" role) == slave && $(field "$r" master_port) == "$2" &&
        $(field "$r" master_link_status) == up && $(field "$m" role) == master &&
        $(field "$m" connected_slaves) == 1 && -n $(field "$m" master_repl_offset) &&
        $(field "$r" slave_repl_offset) == "$(field "$m" master_repl_offset)" ]]
}

# sentinel_master_field SENTINEL FIELD: FIELD of SENTINEL MASTER.
sentinel_master_field() {
    admin "$1" SENTINEL MASTER "$MASTER_NAME" |
        awk -v f="$2" 'NR % 2 == 1 { k = $0; next } k == f { print; exit }'
}

# no_internal_denials: no node refused the replication or Sentinel user.
no_internal_denials() {
    local p log
    for p in "$MASTER" "$REPLICA" "${SENTINELS[@]}"; do
        log=$(admin "$p" ACL LOG 128)
        if grep -qx -e seckill-replication -e seckill-sentinel <<<"$log"; then
            printf '%s\n' "$log" >&2
            die "the node on :$p refused its own replication or Sentinel user (ACL LOG above)"
        fi
    done
}

# ---- the stack
say "sentinel stack in $DIR"
mkdir -p "$ROOT/var"
mkdir "$DIR"
STARTED=1
# min-replicas-to-write 1: the stack's refusal to write without a replica is
# part of what this test proves (the default, 0, keeps selling instead)
# PostgreSQL as one server whatever `make test PG=` chose: this test is
# about Redis (test_stack_pg_ha.sh is the Patroni cluster's)
SECKILL_PG_TOPOLOGY=single SECKILL_REDIS_TOPOLOGY=sentinel SECKILL_REDIS_MIN_REPLICAS_TO_WRITE=1 \
    se_stack_start_free "$DIR" >"$LOG" 2>&1 || {
    cat "$LOG" >&2
    die "stack.sh start (sentinel) failed"
}
MASTER=$SE_REDIS_PORT
REPLICA=$SE_REPLICA_PORT
IFS=, read -r -a SENTINELS <<<"$SE_SENTINEL_PORTS"
((${#SENTINELS[@]} == 3)) || die "want 3 Sentinels, got '$SE_SENTINEL_PORTS'"
say "master :$MASTER, replica :$REPLICA, Sentinels :${SENTINELS[*]}"
ADMIN_PW=$(tr -dc '0-9a-f' <"$DIR/redis-admin-password")
SVC_PW=$(tr -dc '0-9a-f' <"$DIR/redis-password")
[[ -n $ADMIN_PW && -n $SVC_PW ]] || die "no Redis passwords in $DIR"
# The service's URL names the Sentinels and the master's name, nothing else.
want_url="redis-sentinel://seckill:$SVC_PW@127.0.0.1:${SENTINELS[0]},127.0.0.1:${SENTINELS[1]},127.0.0.1:${SENTINELS[2]}/$MASTER_NAME/0"
[[ $(bash -c 'source "$1" && printf %s "$SECKILL_REDIS_URL"' _ "$DIR/env") == "$want_url" ]] ||
    die "DIR/env does not export the Sentinel URL of the service's user"

# ---- 1. one master for all, a replica in sync
all_sentinels_name "$MASTER" || die "the Sentinels do not all name 127.0.0.1:$MASTER"
for s in "${SENTINELS[@]}"; do
    expect "CKQUORUM on :$s" "OK 3 usable Sentinels" "$(admin "$s" SENTINEL CKQUORUM "$MASTER_NAME")"
done
expect "service user's SET on the master" OK "$(svc "$MASTER" SET seckill:ha:x 1)"
wait_for "the replica :$REPLICA in sync with :$MASTER" "$WAIT_S" follows "$REPLICA" "$MASTER"
[[ $(admin "$REPLICA" GET seckill:ha:x) == 1 ]] || die "the replica does not have the master's write"
say "ok: the Sentinels agree on :$MASTER, the replica :$REPLICA is in sync"

# ---- 2. the service's user: its keys on the master, nothing else
expect "SET on the replica" READONLY "$(svc "$REPLICA" SET seckill:ha:x 2)"
for p in "$MASTER" "$REPLICA"; do
    expect "FLUSHALL on :$p" NOPERM "$(svc "$p" FLUSHALL)"
    expect "CONFIG SET on :$p" NOPERM "$(svc "$p" CONFIG SET min-replicas-to-write 0)"
done
expect "a key outside seckill:*" NOPERM "$(svc "$MASTER" SET other:x 1)"
# Its Lua: the functions migrate loads as the admin user (the Sentinel URL of
# DIR/env); none of its own.
(
    # shellcheck source=/dev/null
    source "$DIR/env"
    "${SECKILL_TEST_DAEMON:?run me by scripts/run-tests.sh}" migrate
) >"$LOG" 2>&1 || {
    cat "$LOG" >&2
    die "seckilld migrate through the Sentinels failed"
}
wait_for "the replica :$REPLICA in sync with :$MASTER" "$WAIT_S" follows "$REPLICA" "$MASTER"
for p in "$MASTER" "$REPLICA"; do
    [[ $(svc "$p" FCALL_RO seckill_version 0) =~ ^[0-9a-f]{40}$ ]] ||
        die "the service's user cannot call the functions on :$p"
    expect "EVAL on :$p" NOPERM "$(svc "$p" EVAL 'while true do end' 0)"
    expect "FUNCTION FLUSH on :$p" NOPERM "$(svc "$p" FUNCTION FLUSH)"
done
# An empty restart loses the library; the daemon's self-healing loads it
# again as the narrow functions user, through the Sentinels like any client
# of theirs (migrate with that URL takes the same path).
[[ $(admin "$MASTER" FUNCTION FLUSH) == OK ]] || die "FUNCTION FLUSH as admin on :$MASTER"
(
    # shellcheck source=/dev/null
    source "$DIR/env"
    SECKILL_MIGRATE_REDIS_URL_FILE=$SECKILL_REDIS_FUNCTIONS_URL_FILE \
        "${SECKILL_TEST_DAEMON:?run me by scripts/run-tests.sh}" migrate
) >"$LOG" 2>&1 || {
    cat "$LOG" >&2
    die "loading the functions as the functions user through the Sentinels failed"
}
[[ $(svc "$MASTER" FCALL_RO seckill_version 0) =~ ^[0-9a-f]{40}$ ]] ||
    die "the functions user's load did not reach the master :$MASTER"
wait_for "the replica :$REPLICA in sync with :$MASTER" "$WAIT_S" follows "$REPLICA" "$MASTER"
for s in "${SENTINELS[@]}"; do
    expect "PING without a login on :$s" NOAUTH \
        "$(timeout "$REDIS_CLI_TIMEOUT" redis-cli -h 127.0.0.1 -p "$s" PING 2>/dev/null | tr -d '\r')"
    expect "SENTINEL FAILOVER on :$s" NOPERM "$(svc "$s" SENTINEL FAILOVER "$MASTER_NAME")"
    expect "SENTINEL SET on :$s" NOPERM "$(svc "$s" SENTINEL SET "$MASTER_NAME" quorum 1)"
    expect "SENTINEL RESET on :$s" NOPERM "$(svc "$s" SENTINEL RESET "$MASTER_NAME")"
    out=$(svc "$s" FLUSHALL)
    [[ $out == NOPERM* || $out == ERR* ]] || die "FLUSHALL on the Sentinel :$s: want an error, got '$out'"
done
no_internal_denials
say "ok: the service's user is held to its keys and to asking the Sentinels"

# ---- 3. failover
down_ms=$(sentinel_master_field "${SENTINELS[0]}" down-after-milliseconds)
failover_ms=$(sentinel_master_field "${SENTINELS[0]}" failover-timeout)
[[ $down_ms =~ ^[0-9]+$ && $failover_ms =~ ^[0-9]+$ ]] || die "cannot read the Sentinels' timings"
bound=$(((down_ms + failover_ms + 999) / 1000 + FAILOVER_MARGIN_S))
pid=$(tr -dc '0-9' <"$DIR/redis/redis.pid")
[[ -n $pid && $(cat "/proc/$pid/comm" 2>/dev/null) == redis-server* ]] ||
    die "the master's pid file does not name a running redis-server"
say "kill -9 of the master (pid $pid); the bound is ${bound}s"
t0=$SECONDS
kill -KILL "$pid"
wait_for "every Sentinel naming the replica :$REPLICA" "$bound" all_sentinels_name "$REPLICA"
say "ok: failed over to :$REPLICA in about $((SECONDS - t0))s"
[[ $(field "$(admin "$REPLICA" INFO replication)" role) == master ]] || die ":$REPLICA is not a master"
# Alone, the new master takes no write: one acknowledged now would be lost if
# it failed before a replica had it.
expect "SET on the new master without a replica" NOREPLICAS "$(svc "$REPLICA" SET seckill:ha:y 1)"
[[ $(svc "$REPLICA" FCALL_RO seckill_version 0) =~ ^[0-9a-f]{40}$ ]] ||
    die "the new master :$REPLICA lacks the functions"

# stack.sh start is idempotent: it starts what is down, here the old master,
# as a replica of the master the Sentinels name.
se_stack_restart "$DIR" >"$LOG" 2>&1 || {
    cat "$LOG" >&2
    all_sentinels_name "$MASTER" &&
        die "stack.sh start after the failover failed: the Sentinels failed over again, back to :$MASTER"
    die "stack.sh start after the failover failed"
}
wait_for "the old master :$MASTER following :$REPLICA" "$WAIT_S" follows "$MASTER" "$REPLICA"
expect "service user's SET on the new master" OK "$(svc "$REPLICA" SET seckill:ha:y 2)"
expect "SET on the old master" READONLY "$(svc "$MASTER" SET seckill:ha:y 3)"
wait_for "the old master :$MASTER in sync" "$WAIT_S" follows "$MASTER" "$REPLICA"
[[ $(admin "$MASTER" GET seckill:ha:y) == 2 ]] || die "the old master does not have the new master's write"
all_sentinels_name "$REPLICA" || die "the Sentinels no longer agree on :$REPLICA"
# The admin URL the scripts use reaches the master directly, also now.
[[ $(se_redis_admin_url "$DIR" "$MASTER") == redis://seckill-admin:*@127.0.0.1:"$REPLICA"/0 ]] ||
    die "se_redis_admin_url does not name the new master :$REPLICA"
say "ok: the old master is back as a replica of :$REPLICA; writes go on"

# One failover, not two: a Sentinel that took the promoted replica for down
# would have switched back to the old master, up again as a replica.
for d in "$DIR"/sentinel-*/; do
    n=$(grep -c -e '+switch-master' "$d/sentinel.log") || n=0
    ((n == 1)) || die "$(basename "$d") switched the master $n times, not once (its log: $d/sentinel.log)"
done

# ---- 4. the processes' own users were refused nothing, failover included
no_internal_denials
say "ok: $((SECONDS)) s in all"

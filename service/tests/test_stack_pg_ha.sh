#!/usr/bin/env bash
# The PostgreSQL HA topology of scripts/stack.sh (SECKILL_PG_TOPOLOGY=ha),
# with pgbouncer in front (SECKILL_PGBOUNCER=1).  Run by scripts/run-tests.sh
# like every service/tests/test_*.sh, but on a stack of its own: etcd, two
# Patroni members, pgbouncer (and Redis, which stack.sh always starts) on
# free ports in a scratch directory under var/, stopped by pid and removed
# at the end, failed or not.
#
#  1. the cluster is up: one leader, the other member its synchronous
#     standby, streaming; the service's DSNs are the ones stack/pg-dsn.sh
#     makes (both members, target_session_attrs=read-write; pgbouncer's two
#     databases);
#  2. synchronous: with the standby's WAL receiver stopped (SIGSTOP), a
#     commit as the service's role does not return; once it runs again the
#     commit returns and the standby has it;
#  3. least privilege: the service's role has no attribute beyond LOGIN and
#     may not create a table; the replication role may not open a session
#     on the database; Patroni's REST API refuses a switchover without its
#     login; etcd refuses a read without a login, and Patroni's etcd user
#     any key outside /seckill/;
#  4. a `patronictl switchover` moves the primary: the multi-host DSN and
#     pgbouncer (re-pointed by Patroni's callback) both reach the new
#     primary, read-write, within SWITCH_WAIT_S; the old primary comes back
#     as the synchronous standby;
#  5. stack.sh stop leaves none of the stack's processes running.
#
#   service/tests/test_stack_pg_ha.sh     (KEEP_PG_HA_STACK=1 keeps the directory, stopped)
set -euo pipefail

PROG=test_stack_pg_ha.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
cd "$ROOT"
KEEP_VAR=KEEP_PG_HA_STACK DIR_PREFIX=test-pg-ha
# shellcheck source=service/tests/stack_test_lib.sh
source "$ROOT/service/tests/stack_test_lib.sh"

for tool in patroni patronictl etcd pgbouncer psql jq curl; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (scripts/deps.sh installs it)"
done

# A commit waiting for the stopped standby must still wait after this long.
SYNC_HOLD_S=2
# The switchover, the callback's re-pointing and the old primary's return
# as a standby: each within this.
SWITCH_WAIT_S=30
# Any other wait (a commit released, a row on the standby).
WAIT_S=10
PSQL_TIMEOUT=10

# psql_as PASSFILE DSN SQL: one value (or the error), bounded.
psql_as() {
    PGPASSFILE=$1 timeout "$PSQL_TIMEOUT" psql "$2" -XAtq -v ON_ERROR_STOP=1 -c "$3" 2>&1
}
# admin_at PORT SQL: as the superuser on the member on PORT.
admin_at() {
    psql_as "$DIR/pgpass-admin" "host=127.0.0.1 port=$1 dbname=seckill user=seckill connect_timeout=5" "$2"
}

# cluster_json: Patroni's view (GET /cluster of the first member's REST API).
cluster_json() {
    curl -sS --max-time 3 "http://127.0.0.1:${API[0]}/cluster" 2>/dev/null ||
        curl -sS --max-time 3 "http://127.0.0.1:${API[1]}/cluster" 2>/dev/null
}
# member_with ROLE: the name of the running member of ROLE (leader, sync_standby).
member_with() {
    cluster_json | jq -r --arg r "$1" '.members[] | select(.role == $r and (.state == "running" or .state == "streaming")) | .name' 2>/dev/null | head -n1
}
port_of() { cluster_json | jq -r --arg n "$1" '.members[] | select(.name == $n) | .port'; }

# leader_is NAME [STANDBY]: NAME leads, STANDBY (if given) is its
# synchronous standby and streams (pg_stat_replication says sync).
leader_is() {
    [[ $(member_with leader) == "$1" ]] || {
        WHY="leader: '$(member_with leader)'"
        return 1
    }
    [[ -z ${2:-} ]] && return 0
    [[ $(member_with sync_standby) == "$2" ]] || {
        WHY="sync standby: '$(member_with sync_standby)'"
        return 1
    }
    local st
    st=$(admin_at "$(port_of "$1")" "SELECT application_name || ':' || state || ':' || sync_state FROM pg_stat_replication")
    [[ $st == "$2:streaming:sync" ]] || {
        WHY="pg_stat_replication: '$st'"
        return 1
    }
}

# reaches_primary PASSFILE DSN PORT: DSN lands on a read-write server on PORT.
reaches_primary() {
    local out
    out=$(psql_as "$1" "$2" "SELECT inet_server_port() || ':' || CASE WHEN pg_is_in_recovery() THEN 't' ELSE 'f' END") || {
        WHY=$out
        return 1
    }
    [[ $out == "$3:f" ]] || {
        WHY="got '$out', want '$3:f'"
        return 1
    }
}

# ---- the stack
say "pg ha stack in $DIR"
mkdir -p "$ROOT/var"
mkdir "$DIR"
STARTED=1
t0=$SECONDS
SECKILL_PG_TOPOLOGY=ha SECKILL_PGBOUNCER=1 SECKILL_REDIS_TOPOLOGY=single \
    se_stack_start_free "$DIR" >"$LOG" 2>&1 || {
    cat "$LOG" >&2
    die "stack.sh start (PG=ha, pgbouncer) failed"
}
say "started in $((SECONDS - t0))s"
env_of() { se_env_value "$DIR" "$1"; }
IFS=, read -r -a PORTS <<<"$(env_of SECKILL_PG_PORTS)"
IFS=, read -r -a API <<<"$(env_of SECKILL_PATRONI_API_PORTS)"
PGB_PORT=$(env_of SECKILL_PGBOUNCER_PORT)
CTL_CONF=$(env_of SECKILL_PATRONICTL_CONFIG)
((${#PORTS[@]} == 2 && ${#API[@]} == 2)) || die "DIR/env names ports '${PORTS[*]}' and APIs '${API[*]}'"
[[ -n $PGB_PORT && -r $CTL_CONF ]] || die "DIR/env names no pgbouncer port or patronictl config"
# Cleanup: a WAL receiver left stopped by a failed step 2 would hold up stop.
WR_PID=
resume_wr() {
    if [[ -n $WR_PID ]]; then
        kill -CONT "$WR_PID" 2>/dev/null || true
    fi
}
# shellcheck disable=SC2317  # invoked via trap
resume_wr_and_clean_up() {
    local rc=$?
    resume_wr
    set +e # the status below is the test's, handed on to the cleanup
    (exit "$rc")
    stack_test_cleanup
}
trap resume_wr_and_clean_up EXIT

# ---- 1. a leader, its synchronous standby; the DSNs' shape
wait_for "pg-1 leading with pg-2 its synchronous standby" "$WAIT_S" leader_is pg-1 pg-2
[[ $(port_of pg-1) == "${PORTS[0]}" && $(port_of pg-2) == "${PORTS[1]}" ]] ||
    die "Patroni's members are not on DIR/env's ports ${PORTS[*]}"
ctl_list=$(timeout 20 patronictl -c "$CTL_CONF" list 2>&1) || die "patronictl list: $ctl_list"
grep -q 'Sync Standby' <<<"$ctl_list" || die "patronictl list shows no Sync Standby: $ctl_list"
MIGRATE_DSN=$(env_of SECKILL_MIGRATE_PG_DSN)
want="host=127.0.0.1,127.0.0.1 port=${PORTS[0]},${PORTS[1]} dbname=seckill user=seckill_owner passfile='$DIR/pgpass-owner' target_session_attrs=read-write connect_timeout=5"
[[ $MIGRATE_DSN == "$want" ]] || die "SECKILL_MIGRATE_PG_DSN is '$MIGRATE_DSN', want '$want'"
APP_DSN=$(env_of SECKILL_PG_DSN)
WRITER_DSN=$(env_of SECKILL_PG_WRITER_DSN)
[[ $APP_DSN == "host=127.0.0.1 port=$PGB_PORT dbname=seckill user=seckill_app connect_timeout=5" ]] ||
    die "SECKILL_PG_DSN does not name pgbouncer's transaction-pooled database: '$APP_DSN'"
[[ $WRITER_DSN == "host=127.0.0.1 port=$PGB_PORT dbname=seckill_session user=seckill_app connect_timeout=5" ]] ||
    die "SECKILL_PG_WRITER_DSN does not name pgbouncer's session-pooled database: '$WRITER_DSN'"
# The service's role straight to the members, as without pgbouncer.
APP_DIRECT_DSN="host=127.0.0.1,127.0.0.1 port=${PORTS[0]},${PORTS[1]} dbname=seckill user=seckill_app target_session_attrs=read-write connect_timeout=5"
PGPASS_APP=$DIR/pgpass
reaches_primary "$PGPASS_APP" "$APP_DIRECT_DSN" "${PORTS[0]}" || die "the multi-host DSN: $WHY"
reaches_primary "$PGPASS_APP" "$APP_DSN" "${PORTS[0]}" || die "pgbouncer's transaction database: $WHY"
reaches_primary "$PGPASS_APP" "$WRITER_DSN" "${PORTS[0]}" || die "pgbouncer's session database: $WHY"
# the schema, as run-tests.sh makes it, through the Patroni DSN
(
    # shellcheck source=/dev/null
    source "$DIR/env"
    "${SECKILL_TEST_DAEMON:?run me by scripts/run-tests.sh}" migrate
) >"$LOG" 2>&1 || {
    cat "$LOG" >&2
    die "seckilld migrate through the multi-host DSN failed"
}
say "ok: pg-1 leads, pg-2 is its synchronous standby; the DSNs reach the primary"

# ---- 2. a commit waits for the standby
WR_PID=$(admin_at "${PORTS[1]}" "SELECT pid FROM pg_stat_wal_receiver")
[[ $WR_PID =~ ^[0-9]+$ && $(cat "/proc/$WR_PID/comm" 2>/dev/null) == postgres ]] ||
    die "no WAL receiver on the standby: '$WR_PID'"
kill -STOP "$WR_PID"
out=$DIR/commit.out
# A row, not only an xid: a transaction that wrote no WAL before its commit
# record does not wait for the standby (PostgreSQL's RecordTransactionCommit).
PGPASSFILE=$PGPASS_APP timeout 60 psql "$APP_DIRECT_DSN" -XAtq -v ON_ERROR_STOP=1 \
    -c "INSERT INTO skus (name, stock, initial_stock, per_user_limit) VALUES ('pg-ha-sync-probe', 1, 1, 1);
        SELECT txid_current()" >"$out" 2>&1 &
commit_pid=$!
sleep "$SYNC_HOLD_S"
if ! kill -0 "$commit_pid" 2>/dev/null; then
    resume_wr
    die "a commit returned while the synchronous standby's WAL receiver was stopped: $(cat "$out")"
fi
kill -CONT "$WR_PID"
WR_PID=
commit_done() { ! kill -0 "$commit_pid" 2>/dev/null; }
wait_for "the commit returning once the standby receives again" "$WAIT_S" commit_done
wait "$commit_pid" || die "the commit failed: $(cat "$out")"
xid=$(tr -dc '0-9' <"$out")
[[ -n $xid ]] || die "no txid from the commit: $(cat "$out")"
on_standby() {
    WHY=$(admin_at "${PORTS[1]}" "SELECT txid_status($xid) || ':' || (SELECT count(*) FROM skus WHERE name = 'pg-ha-sync-probe')")
    [[ $WHY == committed:1 ]]
}
wait_for "transaction $xid committed on the standby" "$WAIT_S" on_standby
say "ok: a commit waited ${SYNC_HOLD_S}s+ for the stopped standby, then returned; the standby has it"

# ---- 3. least privilege
attrs=$(admin_at "${PORTS[0]}" "SELECT rolsuper OR rolcreatedb OR rolcreaterole OR rolreplication OR rolbypassrls FROM pg_roles WHERE rolname = 'seckill_app'")
[[ $attrs == f ]] || die "seckill_app has an attribute beyond LOGIN ($attrs)"
out=$(psql_as "$PGPASS_APP" "$APP_DIRECT_DSN" "CREATE TABLE pg_ha_probe (x int)") &&
    die "seckill_app created a table"
[[ $out == *"permission denied"* ]] || die "CREATE TABLE as seckill_app: want permission denied, got '$out'"
repl_pw=$(tr -dc '0-9a-f' <"$DIR/pg-replication-password")
[[ -n $repl_pw ]] || die "no replication password in $DIR"
out=$(PGPASSWORD=$repl_pw timeout "$PSQL_TIMEOUT" psql \
    "host=127.0.0.1 port=${PORTS[0]} dbname=seckill user=seckill_replication connect_timeout=5" \
    -XAtq -c "SELECT 1" 2>&1) && die "seckill_replication opened a session on the database"
[[ $out == *"pg_hba.conf rejects connection"* ]] ||
    die "seckill_replication on the database: want pg_hba.conf rejects connection, got '$out'"
code=$(curl -sS --max-time 3 -o /dev/null -w '%{http_code}' -X POST \
    -d '{"leader":"pg-1","candidate":"pg-2"}' "http://127.0.0.1:${API[0]}/switchover")
[[ $code == 401 ]] || die "a switchover without the REST API's login answered $code, not 401"
ETCD_PORT=$(env_of SECKILL_ETCD_PORT)
etcd_post() { # etcd_post PATH JSON [TOKEN]: etcd's v3 JSON gateway
    curl -sS --max-time 3 -X POST ${3:+-H "Authorization: $3"} "http://127.0.0.1:$ETCD_PORT/v3$1" -d "$2" 2>&1
}
etcd_v2() { # etcd_v2 METHOD PATH [USER:PASSWORD [DATA]]: etcd's v2 API, Patroni's
    curl -sS --max-time 3 -X "$1" ${3:+-u "$3"} ${4:+-d "$4"} "http://127.0.0.1:$ETCD_PORT/v2$2" 2>&1
}
b64() { printf %s "$1" | base64; }
pt_pw=$(tr -dc '0-9a-f' <"$DIR/etcd-patroni-password")
# v2, where Patroni keeps the cluster's state: no login, no read
out=$(etcd_v2 GET '/keys/seckill/?recursive=true')
[[ $out == *'"errorCode":110'* && $out != *leader* ]] || die "etcd (v2) answered a read without a login: $out"
out=$(etcd_v2 PUT /keys/seckill/x '' '' value=1)
[[ $out == *'"errorCode":110'* ]] || die "etcd (v2) took a write without a login: $out"
out=$(etcd_v2 GET '/keys/seckill/?recursive=true' "seckill-patroni:$pt_pw")
[[ $out == *'/leader"'* ]] || die "Patroni's etcd user cannot read the leader key under /seckill/: $out"
out=$(etcd_v2 PUT /keys/other "seckill-patroni:$pt_pw" value=x)
[[ $out == *'"errorCode":110'* ]] || die "Patroni's etcd user wrote a key outside /seckill/ (v2): $out"
# v3, which Patroni does not use, is locked all the same
out=$(etcd_post /kv/range "{\"key\":\"$(b64 /seckill/)\",\"range_end\":\"$(b64 /seckill0)\"}")
[[ $out == *'"error"'* && $out != *'"kvs"'* ]] || die "etcd (v3) answered a read without a login: $out"
token=$(etcd_post /auth/authenticate "{\"name\":\"seckill-patroni\",\"password\":\"$pt_pw\"}" | jq -r .token)
[[ -n $token && $token != null ]] || die "Patroni's etcd user cannot log in (v3)"
out=$(etcd_post /kv/put "{\"key\":\"$(b64 /other)\",\"value\":\"$(b64 x)\"}" "$token")
[[ $out == *"permission denied"* ]] || die "Patroni's etcd user wrote a key outside /seckill/ (v3): $out"
say "ok: the service's role, the replication role, the REST API and etcd's users hold to their rights"

# ---- 4. switchover
t0=$SECONDS
ctl_out=$(timeout 60 patronictl -c "$CTL_CONF" switchover --leader pg-1 --candidate pg-2 --force 2>&1) ||
    die "patronictl switchover: $ctl_out"
wait_for "pg-2 leading" "$SWITCH_WAIT_S" leader_is pg-2
wait_for "the multi-host DSN reaching pg-2" "$SWITCH_WAIT_S" reaches_primary "$PGPASS_APP" "$APP_DIRECT_DSN" "${PORTS[1]}"
say "ok: switched over to pg-2 in about $((SECONDS - t0))s; the multi-host DSN follows"
wait_for "pgbouncer's transaction database reaching pg-2" "$SWITCH_WAIT_S" \
    reaches_primary "$PGPASS_APP" "$APP_DSN" "${PORTS[1]}"
wait_for "pgbouncer's session database reaching pg-2" "$SWITCH_WAIT_S" \
    reaches_primary "$PGPASS_APP" "$WRITER_DSN" "${PORTS[1]}"
reaches_primary "$DIR/pgpass-owner" "$MIGRATE_DSN" "${PORTS[1]}" || die "the owner's DSN after the switchover: $WHY"
say "ok: pgbouncer follows (Patroni's callback) within $((SECONDS - t0))s of the switchover"
wait_for "pg-1 back as pg-2's synchronous standby" "$SWITCH_WAIT_S" leader_is pg-2 pg-1
say "ok: pg-1 is the synchronous standby of pg-2"

# ---- 5. stop leaves nothing running
pids=()
for f in "$DIR"/etcd/etcd.pid "$DIR"/patroni-*/patroni.pid "$DIR"/pgbouncer/pgbouncer.pid \
    "$DIR"/patroni-*/data/postmaster.pid; do
    [[ -r $f ]] || die "no pid file $f"
    pids+=("$(head -n1 "$f" | tr -dc '0-9')")
done
((${#pids[@]} == 6)) || die "want 6 pids (etcd, 2 Patroni, pgbouncer, 2 postmasters), got ${#pids[@]}"
"$SE_STACK" stop "$DIR" >"$LOG" 2>&1 || {
    cat "$LOG" >&2
    die "stack.sh stop failed"
}
for p in "${pids[@]}"; do
    if [[ -n $p ]] && kill -0 "$p" 2>/dev/null && [[ $(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null) != Z ]]; then
        die "pid $p ($(cat "/proc/$p/comm" 2>/dev/null)) still runs after stack.sh stop"
    fi
done
for p in "${PORTS[@]}" "${API[@]}" "$PGB_PORT" "$(env_of SECKILL_ETCD_PORT)"; do
    se_port_busy "$p" && die "port $p still listens after stack.sh stop"
done
say "ok: stop left nothing running; $((SECONDS)) s in all"

#!/usr/bin/env bash
# The cluster topology of scripts/stack.sh (SECKILL_REDIS_TOPOLOGY=cluster).
# Run by scripts/run-tests.sh like every service/tests/test_*.sh, but on a
# stack of its own: three masters, a replica of each (and PostgreSQL, which
# stack.sh always starts) on free ports in a scratch directory under var/,
# stopped by pid and removed at the end, failed or not.
#
#  1. the cluster is made: every node says cluster_state:ok, all 16384 slots
#     over the three masters, each with one replica; DIR/env names the
#     masters as seeds of a redis-cluster:// URL;
#  2. the service's ACL user: a key with a hash tag lives on the master of
#     its slot (SET/GET there, MOVED from the others, readable on its replica
#     after READONLY); it may ask the layout (CLUSTER SLOTS, SHARDS, INFO,
#     MYID, KEYSLOT), send ASKING, call the functions `seckilld migrate`
#     loaded on every master, and is refused FLUSHALL, CONFIG, KEYS, EVAL,
#     SCRIPT LOAD / FLUSH, FUNCTION LOAD,
#     CLUSTER RESET / SETSLOT / FAILOVER / ADDSLOTS / FORGET / MEET / NODES
#     and keys of others;
#  3. a real failover: kill -9 of the key's master; within the node timeout
#     (read from the nodes) + FAILOVER_MARGIN_S its replica serves the slots,
#     every node says ok again, and the key and the functions are there;
#  4. `stack.sh start` brings the killed node back, as a replica of the node
#     that took its place; the replication user was refused nothing;
#  5. `stack.sh stop` stops every process of the stack.
#
# Passwords come from the stack's files and reach redis-cli through
# REDISCLI_AUTH, never its command line.
#
#   service/tests/test_stack_cluster.sh     (KEEP_CLUSTER_STACK=1 keeps the directory, stopped)
set -euo pipefail

PROG=test_stack_cluster.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
cd "$ROOT"
KEEP_VAR=KEEP_CLUSTER_STACK DIR_PREFIX=test-cluster
# shellcheck source=service/tests/stack_test_lib.sh
source "$ROOT/service/tests/stack_test_lib.sh"

for tool in redis-cli redis-server; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (scripts/deps.sh installs it)"
done

SLOTS=16384
VIEW= # layout_ok's
MASTERS_WANTED=3
# The failover must be over within twice the nodes' cluster-node-timeout (a
# master is failed once most masters have not heard from it for that long;
# its replica is elected about a second later) plus this.
FAILOVER_MARGIN_S=5
# Any other wait: a restarted node's rejoining, the replicas' sync.
WAIT_S=15
KEY='seckill:{sku:1}:stock' # a SKU's keys share its hash tag, so its slot
KEY2='seckill:{sku:1}:seq'



# node_dir PORT: the stack's directory of the node on PORT.
node_dir() {
    local conf
    for conf in "$DIR"/redis-cluster-[0-9]*/redis.conf; do
        if [[ $(awk '$1 == "port" { print $2; exit }' "$conf") == "$1" ]]; then
            printf '%s\n' "${conf%/redis.conf}"
            return 0
        fi
    done
    die "no node of $DIR on :$1"
}
node_pid() { tr -dc '0-9' <"$(node_dir "$1")/redis.pid"; }

# cluster_ok PORT...: every node on PORT... says cluster_state:ok with every
# slot assigned, and knows all of ALL.
cluster_ok() {
    local p out
    for p in "$@"; do
        out=$(svc "$p" CLUSTER INFO)
        [[ $(field "$out" cluster_state) == ok && $(field "$out" cluster_slots_assigned) == "$SLOTS" &&
            $(field "$out" cluster_known_nodes) == "${#ALL[@]}" ]] || return 1
    done
}

# nodes_view PORT: CLUSTER NODES of the node on PORT as "port flags master-port
# slots", one node per line (master-port - for a master).
nodes_view() {
    admin "$1" CLUSTER NODES | awk '
        { addr = $2; sub(/[@,].*/, "", addr); sub(/.*:/, "", addr); port[$1] = addr
          line[NR] = $0 }
        END { for (i = 1; i <= NR; i++) {
                  split(line[i], f, " "); slots = ""
                  for (j = 9; j in f; j++) slots = slots " " f[j]
                  print port[f[1]], f[3], (f[4] == "-" ? "-" : port[f[4]]) slots } }'
}

# owner_of SLOT PORT: the port of the master serving SLOT, as the node on PORT
# sees it.
owner_of() {
    nodes_view "$2" | awk -v s="$1" '$2 ~ /master/ && $2 !~ /fail/ {
        for (i = 4; i <= NF; i++) { n = split($i, r, "-"); lo = r[1]; hi = (n == 2 ? r[2] : r[1])
                                    if (s >= lo + 0 && s <= hi + 0) { print $1; exit } } }'
}

# role PORT: "master" or "slave MASTER_PORT LINK" of the node on PORT.
role() {
    local out
    out=$(admin "$1" INFO replication)
    if [[ $(field "$out" role) == master ]]; then
        printf 'master\n'
    else
        printf 'slave %s %s\n' "$(field "$out" master_port)" "$(field "$out" master_link_status)"
    fi
}

# no_internal_denials PORT...: no node refused the replication user.
no_internal_denials() {
    local p log
    for p in "$@"; do
        log=$(admin "$p" ACL LOG 128)
        if grep -qx seckill-replication <<<"$log"; then
            printf '%s\n' "$log" >&2
            die "the node on :$p refused its replication user (ACL LOG above)"
        fi
    done
}

# ---- the stack
say "cluster stack in $DIR"
mkdir -p "$ROOT/var"
mkdir "$DIR"
STARTED=1
t_start=$SECONDS
# PostgreSQL as one server whatever `make test PG=` chose: this test is
# about Redis (test_stack_pg_ha.sh is the Patroni cluster's)
SECKILL_PG_TOPOLOGY=single SECKILL_REDIS_TOPOLOGY=cluster SECKILL_REDIS_CLUSTER_REPLICAS=1 \
    se_stack_start_free "$DIR" >"$LOG" 2>&1 || {
    cat "$LOG" >&2
    die "stack.sh start (cluster) failed"
}
IFS=, read -r -a MASTERS <<<"$SE_CLUSTER_PORTS"
IFS=, read -r -a REPLICAS <<<"$SE_CLUSTER_REPLICA_PORTS"
ALL=("${MASTERS[@]}" "${REPLICAS[@]}")
((${#MASTERS[@]} == MASTERS_WANTED && ${#REPLICAS[@]} == MASTERS_WANTED)) ||
    die "want $MASTERS_WANTED masters and as many replicas, got '$SE_CLUSTER_PORTS' / '$SE_CLUSTER_REPLICA_PORTS'"
say "masters :${MASTERS[*]}, replicas :${REPLICAS[*]} (started in $((SECONDS - t_start)) s)"
ADMIN_PW=$(tr -dc '0-9a-f' <"$DIR/redis-admin-password")
SVC_PW=$(tr -dc '0-9a-f' <"$DIR/redis-password")
[[ -n $ADMIN_PW && -n $SVC_PW ]] || die "no Redis passwords in $DIR"
# The service's URL names the masters as seeds, no database; the scripts'
# variables name the nodes.
want_url="redis-cluster://seckill:$SVC_PW@127.0.0.1:${MASTERS[0]},127.0.0.1:${MASTERS[1]},127.0.0.1:${MASTERS[2]}"
[[ $(se_env_value "$DIR" SECKILL_REDIS_URL) == "$want_url" ]] ||
    die "DIR/env does not export the cluster URL of the service's user"
[[ $(se_env_value "$DIR" SECKILL_REDIS_TOPOLOGY) == cluster ]] || die "DIR/env: SECKILL_REDIS_TOPOLOGY is not cluster"
[[ $(se_env_value "$DIR" SECKILL_REDIS_CLUSTER_PORTS) == "$SE_CLUSTER_PORTS" &&
    $(se_env_value "$DIR" SECKILL_REDIS_CLUSTER_REPLICA_PORTS) == "$SE_CLUSTER_REPLICA_PORTS" ]] ||
    die "DIR/env does not name the cluster's ports"
for f in "$DIR"/env "$DIR"/redis-*password "$DIR"/redis-cluster-[0-9]*/redis.conf; do
    [[ $(stat -c %a "$f") == 600 ]] || die "$f is mode $(stat -c %a "$f"), not 600"
done
for p in "${ALL[@]}"; do
    pid=$(node_pid "$p")
    [[ $(ps -o user= -p "$pid") != root ]] || die "the node on :$p runs as root"
    if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -e "$SVC_PW" -e "$ADMIN_PW"; then
        die "a password is on the command line of the node on :$p"
    fi
done

# layout_ok PORT: the node on PORT sees each of MASTERS serve slots, all
# SLOTS together, with exactly one of REPLICAS each.  Sets VIEW (its view) and
# WHY (what is wrong).
layout_ok() {
    local p n covered
    VIEW=$(nodes_view "$1")
    for p in "${MASTERS[@]}"; do
        grep -Eq "^$p (myself,)?master - [0-9]" <<<"$VIEW" || {
            WHY=":$p is not a master serving slots"
            return 1
        }
        n=$(awk -v m="$p" '$2 ~ /slave/ && $3 == m' <<<"$VIEW" | wc -l)
        ((n == 1)) || {
            WHY="the master :$p has $n replicas, not 1"
            return 1
        }
    done
    for p in "${REPLICAS[@]}"; do
        grep -Eq "^$p (myself,)?slave [0-9]+$" <<<"$VIEW" || {
            WHY=":$p is not a replica"
            return 1
        }
    done
    covered=$(awk '$2 ~ /master/ { for (i = 4; i <= NF; i++) { n = split($i, r, "-")
                                       c += (n == 2 ? r[2] - r[1] + 1 : 1) } } END { print c + 0 }' <<<"$VIEW")
    ((covered == SLOTS)) || {
        WHY="the masters serve $covered slots, not $SLOTS"
        return 1
    }
}

# ---- 1. the cluster's layout
cluster_ok "${ALL[@]}" || die "not every node says cluster_state:ok with $SLOTS slots and ${#ALL[@]} nodes"
# Each node learns the others' roles by gossip: agreed soon after start.
for p in "${ALL[@]}"; do
    wait_for "the layout as :$p sees it" "$WAIT_S" layout_ok "$p"
done
WHY=
layout_ok "${MASTERS[0]}" || die "the layout as :${MASTERS[0]} sees it: $WHY; $VIEW"
view=$VIEW
[[ $(se_cluster_master_ports "$DIR" | sort | tr '\n' ' ') == "$(printf '%s\n' "${MASTERS[@]}" | sort | tr '\n' ' ')" ]] ||
    die "se_cluster_master_ports does not name the masters ${MASTERS[*]}"
say "ok: $SLOTS slots over the masters :${MASTERS[*]}, one replica each, every node ok"

# ---- 2. the service's user: its keys on their node, the layout, nothing else
slot=$(svc "${REPLICAS[0]}" CLUSTER KEYSLOT "$KEY")
[[ $slot =~ ^[0-9]+$ ]] || die "CLUSTER KEYSLOT as the service's user: '$slot'"
[[ $(svc "${MASTERS[0]}" CLUSTER KEYSLOT "$KEY2") == "$slot" ]] || die "$KEY and $KEY2 are not in one slot"
OWNER=$(owner_of "$slot" "${MASTERS[0]}")
[[ -n $OWNER ]] || die "no master serves slot $slot"
OTHER=
for p in "${MASTERS[@]}"; do
    [[ $p == "$OWNER" ]] || OTHER=$p
done
OWNER_REPLICA=$(awk -v m="$OWNER" '$2 ~ /slave/ && $3 == m { print $1 }' <<<"$view")
say "$KEY: slot $slot on :$OWNER (replica :$OWNER_REPLICA)"
expect "SET on the slot's master" OK "$(svc "$OWNER" SET "$KEY" 42)"
expect "MSET of the tag's two keys" OK "$(svc "$OWNER" MSET "$KEY" 42 "$KEY2" 7)"
expect "GET on the slot's master" 42 "$(svc "$OWNER" GET "$KEY")"
expect "GET on another master" "MOVED $slot 127.0.0.1:$OWNER" "$(svc "$OTHER" GET "$KEY")"
expect "SET on another master" "MOVED $slot 127.0.0.1:$OWNER" "$(svc "$OTHER" SET "$KEY" 1)"
expect "GET on the replica" "MOVED $slot 127.0.0.1:$OWNER" "$(svc "$OWNER_REPLICA" GET "$KEY")"
expect "WAIT for the replica" 1 "$(svc "$OWNER" WAIT 1 2000)"
[[ $(printf 'READONLY\nGET %s\nREADWRITE\nGET %s\n' "$KEY" "$KEY" | svc "$OWNER_REPLICA") == \
    $'OK\n42\nOK\nMOVED '"$slot 127.0.0.1:$OWNER" ]] ||
    die "READONLY, GET, READWRITE, GET on the replica :$OWNER_REPLICA did not read, then redirect"
expect "ASKING" OK "$(svc "$OTHER" ASKING)"
# No code of its own: it calls the functions migrate loaded, as the admin
# user, on every master.
(
    # shellcheck source=/dev/null
    source "$DIR/env"
    "${SECKILL_TEST_DAEMON:?run me by scripts/run-tests.sh}" migrate
) >"$LOG" 2>&1 || {
    cat "$LOG" >&2
    die "seckilld migrate on the cluster failed"
}
for p in "${MASTERS[@]}"; do
    [[ $(svc "$p" FCALL_RO seckill_version 0) =~ ^[0-9a-f]{40}$ ]] ||
        die "the service's user cannot call the functions on :$p"
done
expect "EVAL" NOPERM "$(svc "$OWNER" EVAL 'while true do end' 0)"
expect "SCRIPT LOAD" NOPERM "$(svc "$OWNER" SCRIPT LOAD 'return 1')"
expect "SCRIPT FLUSH" NOPERM "$(svc "$OWNER" SCRIPT FLUSH)"
expect "FUNCTION LOAD" NOPERM "$(svc "$OWNER" FUNCTION LOAD $'#!lua name=x\nredis.register_function(\'x\', function() end)')"
for sub in SLOTS SHARDS INFO MYID; do
    out=$(svc "$OWNER_REPLICA" CLUSTER "$sub")
    [[ -n $out && $out != NOPERM* && $out != ERR* ]] || die "CLUSTER $sub as the service's user: '$out'"
done
for p in "${MASTERS[@]}"; do
    grep -qx "$p" <<<"$(svc "$OTHER" CLUSTER SLOTS)" || die "CLUSTER SLOTS does not name the master :$p"
done
myid=$(svc "$OWNER" CLUSTER MYID)
other_id=$(svc "$OTHER" CLUSTER MYID)
[[ $myid =~ ^[0-9a-f]{40}$ ]] || die "CLUSTER MYID: '$myid'"
expect "FLUSHALL" NOPERM "$(svc "$OWNER" FLUSHALL)"
expect "FLUSHDB" NOPERM "$(svc "$OWNER" FLUSHDB)"
expect "CONFIG GET" NOPERM "$(svc "$OWNER" CONFIG GET cluster-node-timeout)"
expect "KEYS" NOPERM "$(svc "$OWNER" KEYS 'seckill:*')"
expect "CLUSTER RESET" NOPERM "$(svc "$OTHER" CLUSTER RESET SOFT)"
expect "CLUSTER SETSLOT" NOPERM "$(svc "$OTHER" CLUSTER SETSLOT "$slot" NODE "$other_id")"
expect "CLUSTER FAILOVER" NOPERM "$(svc "$OWNER_REPLICA" CLUSTER FAILOVER)"
expect "CLUSTER ADDSLOTS" NOPERM "$(svc "$OTHER" CLUSTER ADDSLOTS "$slot")"
expect "CLUSTER FORGET" NOPERM "$(svc "$OTHER" CLUSTER FORGET "$myid")"
expect "CLUSTER MEET" NOPERM "$(svc "$OTHER" CLUSTER MEET 127.0.0.1 1)"
expect "CLUSTER NODES" NOPERM "$(svc "$OTHER" CLUSTER NODES)"
expect "a key outside seckill:*" NOPERM "$(svc "$OWNER" SET '{sku:1}:x' 1)"
expect "PING without a login" NOAUTH \
    "$(timeout "$REDIS_CLI_TIMEOUT" redis-cli -h 127.0.0.1 -p "$OWNER" PING 2>/dev/null | tr -d '\r')"
[[ $(svc "$OWNER" GET "$KEY") == 42 && $(admin "$OWNER" CLUSTER COUNTKEYSINSLOT "$slot") == 2 ]] ||
    die "a refused command changed the data"
no_internal_denials "${ALL[@]}"
say "ok: the service's user reaches its keys on their node and the layout, nothing else"

# ---- 3. failover
timeout_ms=$(admin "$OWNER" CONFIG GET cluster-node-timeout | sed -n 2p)
[[ $timeout_ms =~ ^[0-9]+$ ]] || die "cannot read cluster-node-timeout"
bound=$(((2 * timeout_ms + 999) / 1000 + FAILOVER_MARGIN_S))
pid=$(node_pid "$OWNER")
[[ -n $pid && $(cat "/proc/$pid/comm" 2>/dev/null) == redis-server* ]] ||
    die "the pid file of :$OWNER does not name a running redis-server"
ALIVE=()
for p in "${ALL[@]}"; do
    [[ $p == "$OWNER" ]] || ALIVE+=("$p")
done
# promoted: the replica serves the slot, every other node says ok.
promoted() {
    [[ $(role "$OWNER_REPLICA") == master && $(owner_of "$slot" "$OWNER_REPLICA") == "$OWNER_REPLICA" ]] &&
        cluster_ok "${ALIVE[@]}"
}
say "kill -9 of the master :$OWNER (pid $pid); the bound is ${bound}s"
t0=$SECONDS
kill -KILL "$pid"
wait_for "the replica :$OWNER_REPLICA serving slot $slot, the cluster ok" "$bound" promoted
say "ok: failed over to :$OWNER_REPLICA in about $((SECONDS - t0))s"
expect "GET on the new master" 42 "$(svc "$OWNER_REPLICA" GET "$KEY")"
[[ $(svc "$OWNER_REPLICA" FCALL_RO seckill_version 0) =~ ^[0-9a-f]{40}$ ]] ||
    die "the new master :$OWNER_REPLICA lacks the functions (replication should have brought them)"
expect "GET on another master" "MOVED $slot 127.0.0.1:$OWNER_REPLICA" "$(svc "$OTHER" GET "$KEY")"
masters_now=" $(se_cluster_master_ports "$DIR" | sort | tr '\n' ' ')"
if [[ $masters_now != *" $OWNER_REPLICA "* || $masters_now == *" $OWNER "* ]]; then
    die "se_cluster_master_ports names '$masters_now' (want :$OWNER_REPLICA, not :$OWNER)"
fi
url=$(se_redis_admin_url "$DIR" "$OWNER")
url_port=${url##*:}
url_port=${url_port%/0}
[[ $url == redis://seckill-admin:*@127.0.0.1:* && $masters_now == *" $url_port "* ]] ||
    die "se_redis_admin_url names :$url_port, not a master ($masters_now)"
say "ok: se_cluster_master_ports names${masters_now% }; se_redis_admin_url the master :$url_port"

# ---- 4. stack.sh start brings the killed node back, as a replica
se_stack_restart "$DIR" >"$LOG" 2>&1 || {
    cat "$LOG" >&2
    die "stack.sh start after the failover failed"
}
[[ $(role "$OWNER") == "slave $OWNER_REPLICA up" ]] ||
    die "the old master :$OWNER is back as '$(role "$OWNER")', not a replica of :$OWNER_REPLICA"
cluster_ok "${ALL[@]}" || die "not every node says ok after the restart"
expect "GET on the old master" "MOVED $slot 127.0.0.1:$OWNER_REPLICA" "$(svc "$OWNER" GET "$KEY")"
expect "SET on the new master" OK "$(svc "$OWNER_REPLICA" SET "$KEY" 43)"
"$SE_STACK" status "$DIR" >"$LOG" 2>&1 || {
    cat "$LOG" >&2
    die "stack.sh status fails after the restart"
}
no_internal_denials "${ALL[@]}"
say "ok: the old master is back as a replica of :$OWNER_REPLICA"

# ---- 5. stop: every process of the stack
pids=()
for p in "${ALL[@]}"; do
    pids+=("$(node_pid "$p")")
done
pids+=("$(head -n1 "$DIR/pg/data/postmaster.pid")")
"$SE_STACK" stop "$DIR" >"$LOG" 2>&1 || {
    cat "$LOG" >&2
    die "stack.sh stop failed"
}
# gone PID: no such process, or one that exited and awaits its reaping.
gone() {
    local stat
    kill -0 "$1" 2>/dev/null || return 0
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) }
    [[ ${stat%% *} == Z ]]
}
for pid in "${pids[@]}"; do
    [[ -n $pid ]] || die "a node or PostgreSQL had no pid file before stop"
    # stop returns once a pid file is gone; its process may take a moment.
    wait_for "pid $pid ($(cat "/proc/$pid/comm" 2>/dev/null)) gone after stack.sh stop" "$WAIT_S" gone "$pid"
done
if "$SE_STACK" status "$DIR" >"$LOG" 2>&1; then
    die "stack.sh status succeeds after stop"
fi
say "ok: stop ended all ${#pids[@]} processes; $((SECONDS)) s in all"

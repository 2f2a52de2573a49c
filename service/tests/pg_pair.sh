#!/usr/bin/env bash
# pg_pair.sh: a PostgreSQL primary (a) and its synchronous streaming standby
# (b), for test_pgfailover.  Both listen on 127.0.0.1 only, on ports the
# caller chose, under DIR (created here, removed by `stop`), run as the
# cluster's OS user (postgres when run as root, like scripts/stack.sh).
# Only the superuser 'pair' and the role 'app' exist; 'app' may only read and
# insert rows of the table failover_probe.  Loopback connections are trusted:
# a scratch cluster for one test, gone when it ends.  Every wait is bounded.
#
#   pg_pair.sh start DIR PORT_A PORT_B  a up, b cloned (pg_basebackup -R), up,
#                                       synchronous ('*') and streaming
#   pg_pair.sh kill9 DIR NODE           SIGKILL to NODE's postmaster and children
#   pg_pair.sh freeze|thaw DIR NODE     SIGSTOP / SIGCONT to them (frozen: the
#                                       kernel still accepts, nobody answers)
#   pg_pair.sh stopnode DIR NODE        fast shutdown of NODE
#   pg_pair.sh startnode DIR NODE       starts NODE again
#   pg_pair.sh promote DIR NODE         promotes NODE, waits until it is
#   pg_pair.sh stop DIR                 stops both (by their pids), removes DIR
set -euo pipefail

PROG=pg_pair.sh
CTL_TIMEOUT=30
SYNC_POLLS=150 # of 0.2 s: the standby streaming and synchronous
SUPER=pair

die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 1
}

BIN=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n1)
[[ -n $BIN && -x $BIN/initdb ]] || die "no PostgreSQL server binaries in /usr/lib/postgresql/*/bin"

OSUSER=$(id -un)
(($(id -u) == 0)) && OSUSER=postgres
as_pg() {
    if (($(id -u) == 0)); then
        (cd / && runuser -u "$OSUSER" -- "$@")
    else
        (cd / && "$@")
    fi
}

node_pid() { # the postmaster's pid of data dir $1, or nothing
    [[ -r $1/postmaster.pid ]] && head -n1 "$1/postmaster.pid" | tr -dc '0-9'
    return 0
}

psql_at() { # psql_at PORT SQL: one value, as the superuser
    timeout 10 "$BIN/psql" -X -Atq -h 127.0.0.1 -p "$1" -U "$SUPER" -d postgres -c "$2"
}

start_node() { # start_node DATADIR
    as_pg "$BIN/pg_ctl" -D "$1" -l "$1.log" -w -t "$CTL_TIMEOUT" start >/dev/null ||
        {
            tail -n 20 "$1.log" >&2
            die "$1 did not start"
        }
}

cmd=${1:-}
DIR=${2:-}
[[ -n $cmd && -n $DIR ]] || die "usage: $PROG start|kill9|stopnode|startnode|promote|stop DIR ..."

case $cmd in
start)
    PA=$3 PB=$4
    [[ ! -e $DIR ]] || die "$DIR exists"
    mkdir -p "$DIR"
    chmod 700 "$DIR"
    (($(id -u) == 0)) && chown "$OSUSER" "$DIR"
    as_pg "$BIN/initdb" -D "$DIR/a" -U "$SUPER" --auth=trust -E UTF8 --locale=C >"$DIR/initdb.log" 2>&1 ||
        die "initdb failed (see $DIR/initdb.log)"
    # fsync off: the test kills processes, never the machine.
    cat >>"$DIR/a/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PA
unix_socket_directories = ''
max_connections = 40
shared_buffers = 16MB
fsync = off
wal_level = replica
max_wal_senders = 4
hot_standby = on
synchronous_commit = on
EOF
    cat >"$DIR/a/pg_hba.conf" <<EOF
host all all 127.0.0.1/32 trust
host replication $SUPER 127.0.0.1/32 trust
EOF
    start_node "$DIR/a"
    psql_at "$PA" "CREATE ROLE app LOGIN; CREATE TABLE failover_probe (k text PRIMARY KEY);
                   GRANT SELECT, INSERT ON failover_probe TO app" >/dev/null
    as_pg "$BIN/pg_basebackup" -D "$DIR/b" -R -X stream -c fast -h 127.0.0.1 -p "$PA" -U "$SUPER" \
        >"$DIR/basebackup.log" 2>&1 || die "pg_basebackup failed (see $DIR/basebackup.log)"
    # Promoted, b has no standby of its own: it must not wait for one.
    printf "port = %s\nsynchronous_standby_names = ''\n" "$PB" >>"$DIR/b/postgresql.conf"
    start_node "$DIR/b"
    # Synchronous ('*': the one standby) once there is one, as Patroni's
    # synchronous_mode configures it: before, every commit would wait.
    psql_at "$PA" "ALTER SYSTEM SET synchronous_standby_names = '*'" >/dev/null
    psql_at "$PA" "SELECT pg_reload_conf()" >/dev/null
    for ((i = 0; i < SYNC_POLLS; i++)); do
        n=$(psql_at "$PA" "SELECT count(*) FROM pg_stat_replication
                           WHERE state = 'streaming' AND sync_state = 'sync'" 2>/dev/null || true)
        [[ $n == 1 ]] && exit 0
        sleep 0.2
    done
    die "the standby is not streaming synchronously"
    ;;
kill9)
    pid=$(node_pid "$DIR/$3")
    [[ -n $pid ]] || die "$3 is not running"
    kids=$(ps -o pid= --ppid "$pid" || true)
    kill -9 "$pid"
    for k in $kids; do kill -9 "$k" 2>/dev/null || true; done
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || exit 0
        sleep 0.1
    done
    die "$3 (pid $pid) survived SIGKILL"
    ;;
freeze | thaw)
    pid=$(node_pid "$DIR/$3")
    [[ -n $pid ]] || die "$3 is not running"
    sig=STOP
    [[ $cmd == thaw ]] && sig=CONT
    # the postmaster first, so that it forks no child we would miss
    kill -s "$sig" "$pid"
    for k in $(ps -o pid= --ppid "$pid"); do kill -s "$sig" "$k" 2>/dev/null || true; done
    ;;
stopnode)
    as_pg "$BIN/pg_ctl" -D "$DIR/$3" -m fast -w -t "$CTL_TIMEOUT" stop >/dev/null
    ;;
startnode)
    start_node "$DIR/$3"
    ;;
promote)
    as_pg "$BIN/pg_ctl" -D "$DIR/$3" -w -t "$CTL_TIMEOUT" promote >/dev/null
    ;;
stop)
    [[ -d $DIR ]] || exit 0
    for n in a b; do
        pid=$(node_pid "$DIR/$n")
        if [[ -z $pid ]] || ! kill -0 "$pid" 2>/dev/null; then
            continue
        fi
        kill -s CONT "$pid" 2>/dev/null || true # a frozen test left it stopped
        for k in $(ps -o pid= --ppid "$pid"); do kill -s CONT "$k" 2>/dev/null || true; done
        as_pg "$BIN/pg_ctl" -D "$DIR/$n" -m immediate -w -t "$CTL_TIMEOUT" stop >/dev/null 2>&1 ||
            kill -9 "$pid" 2>/dev/null || true
    done
    rm -rf "$DIR"
    ;;
*)
    die "unknown command $cmd"
    ;;
esac

#!/usr/bin/env bash
# Patroni's callback (on_start, on_role_change) with the stack's pgbouncer,
# and the one writer of its databases.ini: scripts/stack.sh copies it to DIR/pgbouncer/follow.sh and names it in each
# member's patroni.yml as "follow.sh PGBOUNCER_DIR PORT", PORT that member's
# PostgreSQL; Patroni adds ACTION ROLE SCOPE.  On the member that is primary
# now it points pgbouncer's databases at PORT and makes it reload
# (stack/pgbouncer.sh); on any other it does nothing.  stack.sh runs it too,
# as "follow.sh DIR PORT on_start primary SCOPE", when it starts pgbouncer.  Runs as the
# PostgreSQL OS user, like Patroni and pgbouncer.
set -euo pipefail

(($# >= 4)) || exit 2
dir=$1 port=$2 action=$3 role=$4
[[ $port =~ ^[0-9]+$ ]] || exit 2
case $action in on_start | on_role_change) ;; *) exit 0 ;; esac
# Patroni 3.0 says master; later ones primary
case $role in master | primary) ;; *) exit 0 ;; esac
[[ -d $dir ]] || exit 0 # no pgbouncer in this stack

tmp=$(mktemp "$dir/databases.ini.XXXXXX")
cat >"$tmp" <<EOT
; written by scripts/stack.sh and by follow.sh (Patroni's callback) on the primary
[databases]
seckill = host=127.0.0.1 port=$port dbname=seckill pool_mode=transaction
seckill_session = host=127.0.0.1 port=$port dbname=seckill pool_mode=session
EOT
chmod 600 "$tmp"
mv -f "$tmp" "$dir/databases.ini"
pid=$(tr -dc '0-9' <"$dir/pgbouncer.pid" 2>/dev/null) || exit 0
[[ -n $pid && $(cat "/proc/$pid/comm" 2>/dev/null) == pgbouncer ]] || exit 0
kill -HUP "$pid"
printf '%s: %s %s: pgbouncer (pid %s) now in front of :%s\n' "$(date -u +%FT%TZ)" "$action" "$role" "$pid" "$port" \
    >>"$dir/follow.log"

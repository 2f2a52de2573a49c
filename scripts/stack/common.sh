# shellcheck shell=bash
# Sourced by scripts/stack.sh (before DIR is known): messages, small
# helpers, the servers' OS users and the stack's password files.

die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 1
}
warn() { printf '%s: %s\n' "$PROG" "$*" >&2; }
info() { printf '%s: %s\n' "$PROG" "$*"; }

# Print the last lines of a log file to stderr, if it exists.
log_tail() {
    local f=$1
    if [[ -r $f ]]; then
        printf -- '--- last lines of %s ---\n' "$f" >&2
        tail -n 40 "$f" >&2 || true
        printf -- '--- end of %s ---\n' "$f" >&2
    else
        printf '(no log at %s)\n' "$f" >&2
    fi
}

valid_port() { [[ $1 =~ ^[0-9]+$ ]] && ((10#$1 >= 1 && 10#$1 <= 65535)); }

# True if something listens on 127.0.0.1:PORT (or any address with that port).
port_busy() {
    local port=$1
    if command -v ss >/dev/null 2>&1; then
        [[ -n $(ss -ltnH "sport = :$port" 2>/dev/null) ]]
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
    fi
}

# True if PID is alive (not a zombie) and its command name starts with NAME.
pid_is() {
    local pid=$1 name=$2 comm stat
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    [[ -r /proc/$pid/stat ]] || return 0 # no /proc: trust kill -0
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z && $comm == "$name"* ]]
}

random_hex() { # random_hex NBYTES
    od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'
}

# Write stdin to FILE atomically with MODE.
write_file() {
    local file=$1 mode=$2 tmp
    tmp=$(mktemp "$file.XXXXXX")
    cat >"$tmp"
    chmod "$mode" "$tmp"
    mv -f "$tmp" "$file"
}

# ---------------------------------------------------------------- OS users

# stack_os_user DIR PREFERRED: the OS user that owns and runs a server whose
# files are under DIR (root only): DIR's owner when it is not root, else
# PREFERRED (Debian's package user) when it exists, else the system user
# 'seckill', created if missing.
stack_os_user() {
    local dir=$1 preferred=$2 owner
    if [[ -d $dir ]]; then
        owner=$(stat -c %U "$dir")
        if [[ $owner != root && $owner != UNKNOWN ]]; then
            printf '%s\n' "$owner"
            return 0
        fi
    fi
    if id -u "$preferred" >/dev/null 2>&1; then
        printf '%s\n' "$preferred"
        return 0
    fi
    if ! id -u seckill >/dev/null 2>&1; then
        warn "creating system user 'seckill' to run the stack's servers"
        useradd --system --user-group --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin seckill >&2 || die "useradd seckill failed"
    fi
    printf 'seckill\n'
}

# as_user USER CMD...: runs CMD as USER (root), or as ourselves, from / (the
# user's home may be unreadable).
as_user() {
    local user=$1
    shift
    if ((IS_ROOT)); then
        (cd / && runuser -u "$user" -- "$@")
    else
        (cd / && "$@")
    fi
}

# fix_traversal USER TARGET: makes every ancestor of DIR traversable by USER
# (root only), so that it can reach TARGET.
fix_traversal() {
    ((IS_ROOT)) || return 0
    local user=$1 target=$2 d=$DIR
    local -a chain=()
    while :; do
        chain=("$d" "${chain[@]}")
        [[ $d == / ]] && break
        d=$(dirname "$d")
    done
    for d in "${chain[@]}"; do
        if ! runuser -u "$user" -- test -x "$d" 2>/dev/null; then
            warn "note: adding o+x to $d so that user '$user' can reach $target"
            chmod o+x "$d"
            runuser -u "$user" -- test -x "$d" 2>/dev/null ||
                die "user '$user' still cannot traverse $d; move DIR somewhere accessible"
        fi
    done
}

# ensure_password FILE NBYTES: FILE holds NBYTES random bytes in hex (mode
# 600), made if missing; prints them.
ensure_password() {
    local file=$1 nbytes=$2 pw
    if [[ ! -s $file ]]; then
        (
            umask 077
            random_hex "$nbytes" >"$file.tmp"
            mv -f "$file.tmp" "$file"
        )
    fi
    chmod 600 "$file"
    pw=$(tr -dc '0-9a-f' <"$file")
    [[ ${#pw} -eq $((2 * nbytes)) ]] ||
        die "$file does not hold a $((2 * nbytes))-hex-digit password; delete it to regenerate"
    printf '%s\n' "$pw"
}

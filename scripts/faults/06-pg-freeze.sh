# shellcheck shell=bash
# Scenario 6 of scripts/faults.sh, which sources it: 6 is its place in a
# run and its SKUs' base (601 up).
#
#   pg-freeze            PostgreSQL SIGSTOPped (postmaster and children), SIGCONT

HEAL_BOUND[pg-freeze]=15
HEALTHZ_BOUND_S=5      # /healthz must answer 503 this fast while PostgreSQL is frozen

scenario_pg_freeze() {
    local sku=$1 t0 ppid kids out code secs
    start_daemon d1 || return
    local url=http://127.0.0.1:$D_PORT
    under_load "$sku" "$url" || return
    ppid=$(pg_pid)
    freeze "$ppid" # first, so that it forks no child we would miss
    mapfile -t kids < <(ps -o pid= --ppid "$ppid" | tr -d ' ')
    freeze "${kids[@]}"
    t0=$(now)
    note "PostgreSQL frozen: postmaster and ${#kids[@]} children"
    # /healthz answers at once from the probes' latest result, which turns
    # 503 within health_probe_interval_ms + health_timeout_ms of the freeze:
    # asked every 100 ms (each ask bounded, so that the freeze ends on time
    # even when /healthz hangs) until it says so, at most HEALTHZ_BOUND_S.
    while :; do
        out=$(curl -s -o /dev/null --max-time $((HEALTHZ_BOUND_S + 1)) -w '%{http_code}' \
            "$url/healthz" 2>/dev/null) || true
        code=$out secs=$(since "$t0")
        [[ $code == 503 ]] || le "$HEALTHZ_BOUND_S" "$secs" || {
            sleep 0.1
            continue
        }
        break
    done
    note "/healthz while frozen: ${code:-none} ${secs}s after the freeze (bound ${HEALTHZ_BOUND_S}s)"
    if [[ $code != 503 ]] || ! le "$secs" "$HEALTHZ_BOUND_S"; then
        fail "/healthz answered ${code:-nothing} ${secs}s after PostgreSQL froze (want 503 within ${HEALTHZ_BOUND_S}s)"
    fi
    while ! le "$FREEZE_S" "$(since "$t0")"; do sleep 0.1; done
    thaw
    after_fault "$url" "$sku" "$(now)" "SIGCONT"
}

#!/usr/bin/env bash
# The alerts of docs/prometheus/alerts.yml, against the test stack (run by
# scripts/run-tests.sh, which exports SECKILL_TEST_*):
#
#  1. `promtool check rules` accepts the file, and `promtool test rules` passes
#     docs/prometheus/alerts_test.yml;
#  2. every alert has a `for:`, a severity of page or ticket, a summary, a
#     description, and a runbook annotation naming its section of
#     docs/operations.md ("Alert: NAME"), which exists;
#  3. every alert is proved both ways: made never to fire, the unit tests
#     fail (a firing case checks it), and they hold a case where it must stay
#     quiet (exp_alerts: []);
#  4. every seckill_* name the rules read is in a real scrape: test_metrics.sh
#     runs a daemon on the stack and keeps its full scrape, so a renamed or
#     dropped metric fails here;
#  5. docs/grafana/seckill.json shows the alerts (a panel over
#     ALERTS{alertname=~"Seckill.*"}).
#
#   service/tests/test_alerts.sh      (PROMTOOL overrides var/tools/bin/promtool)
set -euo pipefail
export LC_ALL=C # sort and comm agree

PROG=test_alerts.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
cd "$ROOT"

die() {
    printf '%s: FAIL: %s\n' "$PROG" "$*" >&2
    exit 1
}
say() { printf '%s: %s\n' "$PROG" "$*"; }

PROMTOOL=${PROMTOOL:-$ROOT/var/tools/bin/promtool}
[[ -x $PROMTOOL ]] || die "promtool not found at $PROMTOOL (scripts/deps.sh installs it)"
command -v jq >/dev/null 2>&1 || die "jq not found (scripts/deps.sh installs it)"
RULES=$ROOT/docs/prometheus/alerts.yml
TESTS=$ROOT/docs/prometheus/alerts_test.yml
OPS=$ROOT/docs/operations.md
DASHBOARD=$ROOT/docs/grafana/seckill.json

TMP=$(mktemp -d "${TMPDIR:-/tmp}/seckill-alerts.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# ---- 1. promtool
out=$("$PROMTOOL" check rules "$RULES" 2>&1) || die "promtool check rules: $out"
grep -q 'SUCCESS' <<<"$out" || die "promtool check rules: $out"
out=$("$PROMTOOL" test rules "$TESTS" 2>&1) || die "promtool test rules: $out"

# ---- 2. each alert's parts.  alerts.tsv: name, then every field of its block
# as key=value (for, severity, summary, description, runbook).
awk '
    function flush() { if (name != "") print name "\t" fields; fields = "" }
    /^      - (alert|record): / {
        flush(); name = ""
        if ($2 == "alert:") name = $3
        next
    }
    name != "" && /^        for: / { fields = fields "for=" $2 "\t" }
    name != "" && /^          severity: / { fields = fields "severity=" $2 "\t" }
    name != "" && /^          (summary|description|runbook): / {
        k = $1; sub(/:$/, "", k); v = $0; sub(/^ *[a-z]+: /, "", v); gsub(/"/, "", v)
        fields = fields k "=" v "\t"
    }
    END { flush() }
' "$RULES" >"$TMP/alerts.tsv"
mapfile -t ALERTS < <(cut -f1 "$TMP/alerts.tsv")
((${#ALERTS[@]} >= 9)) || die "only ${#ALERTS[@]} alerts in $RULES"
field() { # field ALERT KEY: the value of KEY in ALERT's block, or ""
    awk -F'\t' -v a="$1" -v k="$2=" '$1 == a { for (i = 2; i <= NF; i++) if (index($i, k) == 1) print substr($i, length(k) + 1) }' \
        "$TMP/alerts.tsv"
}
for a in "${ALERTS[@]}"; do
    [[ $a == Seckill* ]] || die "alert $a: its name must start with Seckill (the dashboard selects Seckill.*)"
    [[ -n $(field "$a" for) ]] || die "alert $a has no for:"
    case $(field "$a" severity) in page | ticket) ;; *) die "alert $a: severity must be page or ticket" ;; esac
    [[ -n $(field "$a" summary) ]] || die "alert $a has no summary"
    [[ -n $(field "$a" description) ]] || die "alert $a has no description"
    want="docs/operations.md#alert-$(tr '[:upper:]' '[:lower:]' <<<"$a")"
    [[ $(field "$a" runbook) == "$want" ]] || die "alert $a: runbook is '$(field "$a" runbook)', want $want"
    grep -qx "#### Alert: $a" "$OPS" || die "alert $a: docs/operations.md has no section '#### Alert: $a'"
done

# ---- 3. each alert fires in a test and is quiet in another
# never_fires NAME: alerts.yml with NAME's expr replaced by one that is never true
never_fires() {
    awk -v a="$1" '
        /^      - (alert|record): / { mine = ($2 == "alert:" && $3 == a) }
        mine && /^        expr: / { print "        expr: vector(0) > 1"; skip = 1; next }
        skip && /^          / { next }
        { skip = 0; print }
    ' "$RULES"
}
cp "$TESTS" "$TMP/alerts_test.yml"
for a in "${ALERTS[@]}"; do
    never_fires "$a" >"$TMP/alerts.yml"
    cmp -s "$TMP/alerts.yml" "$RULES" && die "alert $a: could not neutralise its expr"
    "$PROMTOOL" check rules "$TMP/alerts.yml" >/dev/null 2>&1 || die "alert $a: the neutralised rules do not load"
    if "$PROMTOOL" test rules "$TMP/alerts_test.yml" >/dev/null 2>&1; then
        die "alert $a: the unit tests pass even when it never fires (add a firing case)"
    fi
    awk -v a="$a" '
        $1 == "alertname:" && $2 == a { seen = 1; next }
        seen && $1 == "exp_alerts:" { if ($2 == "[]") quiet = 1; seen = 0 }
        END { exit !quiet }
    ' "$TESTS" || die "alert $a: no test case where it must stay quiet (exp_alerts: [])"
done
say "${#ALERTS[@]} alerts: promtool clean, each fires and stays quiet in its tests"

# ---- 4. every metric name the rules read is exported
[[ -n ${SECKILL_TEST_DAEMON:-} ]] || die "SECKILL_TEST_DAEMON is not set (run me through scripts/run-tests.sh)"
SECKILL_TEST_METRICS_OUT=$TMP/full.prom "$ROOT/service/tests/test_metrics.sh" >"$TMP/metrics.log" 2>&1 ||
    die "test_metrics.sh (for a real scrape) failed: $(tail -n 20 "$TMP/metrics.log")"
awk '/^[a-z]/ { sub(/[{ ].*/, "", $1); print $1 } /^# TYPE / { print $3 }' "$TMP/full.prom" |
    sort -u >"$TMP/have"
{ grep -o 'seckill_[a-zA-Z0-9_]*' "$RULES" || true; } | sort -u >"$TMP/used"
(($(wc -l <"$TMP/used") >= 10)) || die "the rules read fewer metrics than expected"
missing=$(comm -23 "$TMP/used" "$TMP/have")
[[ -z $missing ]] || die "the rules read metrics /metrics does not export: $missing"

# ---- 5. the dashboard shows the alerts
jq -e '[.. | objects | (.expr?, .query?) | strings | select(test("ALERTS\\{alertname=~\"Seckill"))] | length > 0' \
    "$DASHBOARD" >/dev/null || die "$DASHBOARD has no panel over ALERTS{alertname=~\"Seckill.*\"}"

say "ok: $(wc -l <"$TMP/used") metric names of the rules are exported"

#!/usr/bin/env bash
# docs/api.html, the API reference page (run by scripts/run-tests.sh; it needs
# no store):
#
#  1. it is docs/openapi.json rendered by scripts/openapi/render.js, byte for
#     byte: a change to the document without the page (or the other way round)
#     fails, with the command that brings them together;
#  2. headless Chromium (Debian's chromium, from scripts/deps.sh) opens it from
#     its file, offline, and the DOM it builds holds every operation of the
#     document (its section, a link to it from the contents, a row per status
#     it answers) and every schema.
#
#   service/tests/test_api_html.sh     (CHROMIUM overrides the browser's path)
set -euo pipefail

PROG=test_api_html.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
cd "$ROOT"

die() {
    printf '%s: FAIL: %s\n' "$PROG" "$*" >&2
    exit 1
}
say() { printf '%s: %s\n' "$PROG" "$*"; }

DOC=docs/openapi.json
PAGE=docs/api.html
RENDER=scripts/openapi/render.js
CHROMIUM=${CHROMIUM:-chromium}
CHROMIUM_WAIT=90
for tool in node jq "$CHROMIUM"; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (scripts/deps.sh installs it)"
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/seckill-api-html.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# ---- 1. the page is the document, rendered
node "$RENDER" "$DOC" "$TMP/api.html" || die "node $RENDER failed"
cmp -s "$TMP/api.html" "$PAGE" ||
    die "$PAGE is not $DOC rendered; run: node $RENDER $DOC $PAGE ($(diff "$PAGE" "$TMP/api.html" | head -n 5))"
say "$PAGE is $DOC rendered"

# ---- 2. Chromium renders every operation and schema
# (as root Chromium refuses to run without --no-sandbox; a profile of its own
# keeps it out of HOME; no network is needed: the page names nothing outside)
sandbox=()
[[ $(id -u) -eq 0 ]] && sandbox=(--no-sandbox)
st=0
timeout "$CHROMIUM_WAIT" "$CHROMIUM" --headless "${sandbox[@]}" --disable-gpu --no-first-run \
    --user-data-dir="$TMP/profile" --dump-dom "file://$ROOT/$PAGE" \
    >"$TMP/dom.html" 2>"$TMP/chromium.log" || st=$?
((st == 0)) || die "$CHROMIUM --dump-dom failed (exit $st): $(tail -n 5 "$TMP/chromium.log")"
grep -q '</html>' "$TMP/dom.html" || die "Chromium's DOM is not a whole page"

ops=0
while IFS=$'\t' read -r id statuses; do
    ops=$((ops + 1))
    grep -qF "data-operation-id=\"$id\"" "$TMP/dom.html" || die "the rendered page has no section for $id"
    grep -qF "href=\"#op-$id\"" "$TMP/dom.html" || die "the rendered page's contents do not link to $id"
    for s in $statuses; do
        grep -qF "id=\"op-$id-$s\"" "$TMP/dom.html" || die "the rendered page does not show $id's answer $s"
    done
done < <(jq -r '.paths[] | to_entries[] | select(.value | type == "object" and has("operationId"))
    | [.value.operationId, (.value.responses | keys | join(" "))] | @tsv' "$DOC")
((ops > 0)) || die "$DOC has no operation"
schemas=0
while IFS= read -r name; do
    schemas=$((schemas + 1))
    grep -qF "id=\"schema-$name\"" "$TMP/dom.html" || die "the rendered page has no schema $name"
done < <(jq -r '.components.schemas | keys[]' "$DOC")
say "Chromium renders all $ops operations, their answers and $schemas schemas"
say "PASS"

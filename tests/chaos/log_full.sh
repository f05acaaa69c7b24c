#!/usr/bin/env bash
# log_full.sh — the decision log's disk is full. The responder's log file
# is swapped for /dev/full (every write fails with ENOSPC) and the
# responder told to reopen it (SIGHUP), then clients claim keys. Checked:
#   * every request is still answered 201 and every claim is in the
#     database: a log that cannot be written never stops the product;
#   * the failure is reported once on the responder's stderr, not once per
#     line, and its recovery once when the file is back (SIGHUP again);
#   * after the recovery the claims are logged again.
#
#   tests/chaos/log_full.sh [--claims N]          (default 50)
#
# Runs against the test stack that `./dev test` (or `./dev chaos`) starts:
# ONCEGATE_URL, ONCEGATE_API_KEY, ONCEGATE_CONF (its directory holds
# fcgi.pid and fcgi.stderr), ONCEGATE_LOG and the PG* variables.
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"

CLAIMS=50
while [[ $# -gt 0 ]]; do
	case $1 in
	--claims) CLAIMS=${2:?}; shift 2 ;;
	*) echo "usage: $0 [--claims N]" >&2; exit 2 ;;
	esac
done
need_env "./dev test or ./dev chaos" ONCEGATE_URL ONCEGATE_API_KEY ONCEGATE_CONF ONCEGATE_LOG PGHOST
STATE=$(dirname "$ONCEGATE_CONF")
PID=$(head -n1 "$STATE/fcgi.pid")
STDERR=$STATE/fcgi.stderr
[[ $PID =~ ^[0-9]+$ ]] && kill -0 "$PID" || { echo "log_full.sh: no responder running" >&2; exit 2; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-logfull.XXXXXX")
RUN=lf$(date +%s)-$$
SAVED=$ONCEGATE_LOG.before-log-full-$$
restore() {
	if [[ -L $ONCEGATE_LOG ]]; then
		rm -f "$ONCEGATE_LOG"
		[[ -e $SAVED ]] && mv "$SAVED" "$ONCEGATE_LOG"
		kill -HUP "$PID" 2>/dev/null || true
	fi
}
trap 'restore; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM
(umask 077 && printf 'Authorization: Bearer %s\n' "$ONCEGATE_API_KEY" >"$TMP/auth")

claim() {
	curl -sS -o /dev/null -w '%{http_code}\n' --max-time 10 -H @"$TMP/auth" \
		-H 'Content-Type: application/json' -X POST "$ONCEGATE_URL/v1/runs" \
		-d "{\"key\":\"$1\",\"payload\":{\"n\":1}}"
}
count_in() { grep -c -- "$2" "$1" 2>/dev/null || true; }

failed_before=$(count_in "$STDERR" 'decision log write failed')
again_before=$(count_in "$STDERR" 'decision log writes succeed again')

say "the decision log on a full disk: $ONCEGATE_LOG -> /dev/full, SIGHUP"
mv "$ONCEGATE_LOG" "$SAVED"
ln -s /dev/full "$ONCEGATE_LOG"
kill -HUP "$PID"
sleep 0.5
for ((i = 1; i <= CLAIMS; i++)); do claim "$RUN:full:$i"; done >"$TMP/full"
failed=$(($(count_in "$STDERR" 'decision log write failed') - failed_before))

say "the disk has room again: the file back, SIGHUP"
rm -f "$ONCEGATE_LOG"
mv "$SAVED" "$ONCEGATE_LOG"
kill -HUP "$PID"
sleep 0.5
claim "$RUN:after" >"$TMP/after"
sleep 0.3
again=$(($(count_in "$STDERR" 'decision log writes succeed again') - again_before))

ok201=$(grep -c '^201$' "$TMP/full" || true)
rows=$(psql -X -At -c "SELECT count(*) FROM workflow_runs WHERE idempotency_key LIKE '$RUN:full:%'")
logged_full=$(count_in "$ONCEGATE_LOG" "\"key\":\"$RUN:full:")
logged_after=$(count_in "$ONCEGATE_LOG" "\"key\":\"$RUN:after\"")

printf '\ndecision log on a full disk (%s)\n' "$RUN"
printf '  claims answered 201 while the log failed   %d of %d\n' "$ok201" "$CLAIMS"
printf '  their rows in the database                 %d\n' "$rows"
printf '  "write failed" reports on stderr           %d   (must be 1)\n' "$failed"
printf '  "succeed again" reports after recovery     %d   (must be 1)\n' "$again"
printf '  lines of those claims in the log           %d   (must be 0: the disk was full)\n' "$logged_full"
printf '  the claim after recovery answered / logged %s / %d\n' "$(cat "$TMP/after")" "$logged_after"
[[ $ok201 == "$CLAIMS" && $rows == "$CLAIMS" && $failed == 1 && $again == 1 && $logged_full == 0 &&
	$(cat "$TMP/after") == 201 && $logged_after -ge 1 ]]

#!/usr/bin/env bash
# tests/mcp/run.sh — the MCP gateway (/v1/mcp) driven by clients nobody
# here wrote, against the stack that ./dev test started (ONCEGATE_URL,
# ONCEGATE_API_KEY, PG*, ONCEGATE_CTL, ONCEGATE_DISPATCH, …):
#
#   1. a dispatcher of its own sends mail to a loopback SMTP sink
#      (tests/providers/smtp_sink.py), which records what really arrives;
#      a second API client (tenant B) is made with oncegatectl;
#   2. client.mjs, the official TypeScript SDK client
#      (@modelcontextprotocol/sdk, pinned by package-lock.json), initializes,
#      lists the tools and calls them: see client.mjs for every claim;
#   3. the official conformance suite (@modelcontextprotocol/conformance)
#      runs its server scenarios against /v1/mcp through conformance.mjs,
#      which says what passed, what failed and why that is expected.
#
# Exit 0 pass, 1 fail, 77 skipped (no stack: ONCEGATE_URL is unset).
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
SAY_PREFIX='mcp:' DIE_PREFIX='mcp: FAIL'

need_stack mcp ONCEGATE_API_KEY PGHOST PGPORT PGDATABASE PGUSER ONCEGATE_CTL ONCEGATE_CONF \
	ONCEGATE_DISPATCH ONCEGATE_PROVIDERS ONCEGATE_PYTHON
node_tools "$HERE"

WORK=$(mktemp -d)
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do stop_child "$p" 5; done
	"$ONCEGATE_CTL" -c "$ONCEGATE_CONF" sends stop --reason "MCP test done" >/dev/null 2>&1 || true
	rm -rf "$WORK"
}
trap cleanup EXIT

# --- 1. the loopback mail sink, a dispatcher, tenant B -------------------------

"$ONCEGATE_PYTHON" "$ONCEGATE_PROVIDERS/smtp_sink.py" --port 0 --record "$WORK/mail.jsonl" \
	>"$WORK/smtp.out" 2>&1 &
PIDS+=($!)
SMTP_PORT=$(ready_port "$WORK/smtp.out")
[[ -n $SMTP_PORT ]] || die "the SMTP sink did not start: $(cat "$WORK/smtp.out")"
touch "$WORK/mail.jsonl"
cat >"$WORK/dispatch.conf" <<CONF
# tests/mcp/run.sh
log_file = $WORK/dispatch.log
contracts_dir = $(conf_value contracts_dir)
dispatch_workers = 2
dispatch_poll_ms = 100
dispatch_shutdown_seconds = 2

[target demo_smtp]
kind = smtp
url = smtp://127.0.0.1:$SMTP_PORT
mail_from = agent@oncegate.example
timeout_ms = 5000
max_attempts = 2
CONF
# Nothing else may be sent by this dispatcher: other pending work is cancelled.
psql -X -q -At -v ON_ERROR_STOP=1 \
	-c "UPDATE effect_outbox SET state = 'cancelled' WHERE state IN ('pending', 'unknown')" >/dev/null
"$ONCEGATE_CTL" -c "$ONCEGATE_CONF" sends resume --reason "MCP test sends to loopback" >/dev/null
AI_ACTIONS_ENABLED=true "$ONCEGATE_DISPATCH" -c "$WORK/dispatch.conf" </dev/null \
	>"$WORK/dispatch.stderr" 2>&1 &
PIDS+=($!)
KEY_B=$("$ONCEGATE_CTL" -c "$ONCEGATE_CONF" client add "mcp-b-$$-$(date +%s)" \
	--reason "tests/mcp: a second tenant calling the same tools with the same keys") ||
	die "oncegatectl client add failed"

# --- 2. the SDK client -----------------------------------------------------------

cd "$HERE"
rc=0 t0=$SECONDS
MCP_KEY_B=$KEY_B MCP_SMTP_LOG=$WORK/mail.jsonl node client.mjs || rc=$?
[[ $rc -eq 0 ]] || die "client.mjs failed (dispatcher: $(tail -n 3 "$WORK/dispatch.stderr"))"
say "the SDK client's checks took $((SECONDS - t0)) s"
t0=$SECONDS

# --- 3. the conformance suite ------------------------------------------------------

node conformance.mjs "$WORK" || die "the conformance suite failed beyond the failures explained"
say "ok (the conformance suite took $((SECONDS - t0)) s)"

# shellcheck shell=bash
# tests/n8n/agent.sh — sourced by tests/n8n/run.sh: n8n's AI Agent reaching
# oncegate through n8n's MCP Client Tool (examples/n8n/agent-mcp.json), its
# chat model the stand-in (model_server.py, checked first against OpenAI's
# published examples by model_check.py).
#
#   agent_prepare   (before n8n starts) checks the stand-in, imports the two
#                   credentials the workflow names (the model's base URL and
#                   key; oncegate's API key as the MCP Client Tool's header
#                   auth) and publishes the workflow;
#   agent_scenario  (n8n running) g. three agent requests and their repeats:
#                   1. "tag this contact lead": the agent's tool call is one
#                      run (trigger mcp), approved by the contract's rules
#                      (or drawn for sales' sample: then approved on the
#                      card in Chromium), and the demo HTTP provider receives
#                      the tag once, with the contact's multilingual id;
#                   2. "answer this customer": the call waits for support
#                      (the agent says awaiting_approval), is approved on
#                      the card in Chromium, and the mail goes out once;
#                   3. both requests again (same request id, so the same
#                      idempotency key): the agent is told the runs'
#                      outcomes, and nothing new is claimed or sent.
# Uses run.sh's helpers (q, expect, until_true, count_execs, mails,
# notice_arrived, notice_link, provider_requests, provider_committed,
# state_is, MINE, ...) and variables.

AGENT_HOOK=oncegate/agent

agent_prepare() {
	local t=$SECONDS
	# the browser approves a gated tool call: its tooling in place first
	bash "$ROOT/tests/browser/ensure.sh" || fail "the browser tooling is not in place"
	"$PY" "$HERE/model_check.py" "$MODEL/v1" >"$WORK/model_check.out" 2>&1 ||
		{ cat "$WORK/model_check.out" >&2; fail "the model stand-in differs from OpenAI's published examples"; }
	ok "the model stand-in answers OpenAI's published tool-call examples in their shape ($(grep -c '^ok' "$WORK/model_check.out") checks)"
	(umask 077 && "$PY" - "$WORK/agent-credentials.json" "$ONCEGATE_API_KEY" "$MODEL/v1" <<-'EOF'
		import json, sys
		json.dump([
		    {"id": "oncegateMcpKey01", "name": "oncegate MCP key", "type": "httpHeaderAuth",
		     "data": {"name": "Authorization", "value": "Bearer " + sys.argv[2]}},
		    {"id": "modelOpenAiApi01", "name": "Model (OpenAI-compatible)", "type": "openAiApi",
		     "data": {"apiKey": "sk-test-not-a-secret", "url": sys.argv[3]}},
		], open(sys.argv[1], "w"))
	EOF
	)
	n8n_cli import:credentials --input="$WORK/agent-credentials.json"
	rm -f "$WORK/agent-credentials.json"
	n8n_cli publish:workflow --id=ogAgentMcp000001
	AGENT_PREPARE_S=$((SECONDS - t))
}

# agent_ask REQUEST_ID TEXT: one request to the agent's webhook; the
# agent's last answer (its "output") in $WORK/agent.out; prints the status.
agent_ask() {
	local body
	body=$("$PY" -c 'import json,sys; print(json.dumps({"request_id": sys.argv[1],
		"agent_email": "olga.petrova@helpdesk.example", "request": sys.argv[2]}, ensure_ascii=False))' "$1" "$2")
	curl -sS --noproxy '*' --max-time 90 -o "$WORK/agent.json" -w '%{http_code}' -X POST \
		-H 'Content-Type: application/json' --data-binary "$body" "$N8N_ORIGIN/webhook/$AGENT_HOOK"
	"$PY" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("output"))' "$WORK/agent.json" \
		>"$WORK/agent.out" 2>/dev/null || cp "$WORK/agent.json" "$WORK/agent.out"
}
agent_said() { cat "$WORK/agent.out"; }
# agent_tool_messages TEXT: the role: tool messages the model received
# that hold TEXT (what the MCP Client Tool gave the agent).
agent_tool_messages() {
	curl -sS --noproxy '*' "$MODEL/_requests" | "$PY" -c '
import json, sys
seen = set()
for r in json.load(sys.stdin):
    for m in r["messages"]:
        c = json.dumps(m.get("content"), ensure_ascii=False)
        if m.get("role") == "tool" and sys.argv[1] in c:
            seen.add((m.get("tool_call_id"), c))
print(len(seen))' "$1"
}
# agent_called TEXT: the tools the model called (distinct, sorted) in the
# conversations that mention TEXT.
# bare_tools: oncegate's tool names as oncegate lists them; newer n8n
# (2.41) hands the model each MCP tool under its node's name first
# (oncegate__MCP__crm_tag__crm_tag).
bare_tools() { sed -E 's/[^ ]*__(crm_tag__crm_tag|oncegate_run|support_reply__email_send)/\1/g'; }
agent_called() {
	curl -sS --noproxy '*' "$MODEL/_requests" | "$PY" -c '
import json, sys
print(" ".join(sorted({r["called"] for r in json.load(sys.stdin) if r.get("called")
                       and any(sys.argv[1] in json.dumps(m.get("content"), ensure_ascii=False)
                               for m in r["messages"])})))' "$1"
}
# agent_notice KEY: the approval link in the approvers' notice for KEY;
# the agent's executions (finished, not waiting) must hold none.
agent_notice() {
	until_true 60 "the approvers' notice for $1 in the demo mailbox" notice_arrived "$1" >&2
	[[ $(count_execs "e['workflow_id'] == 'ogAgentMcp000001' and e['approval_url']") -eq 0 ]] ||
		fail "an execution of the agent holds an approval link"
	notice_link "$1"
}
agent_active() {
	curl -sS --noproxy '*' --max-time 5 "$N8N_ORIGIN/webhook/$AGENT_HOOK" 2>/dev/null | grep -q 'POST request'
}
mine_runs() { q "$1" "SELECT count(*) || ' ' || string_agg(state || ' ' || coalesce(trigger, '-'), ',') FROM workflow_runs WHERE idempotency_key = :'key' AND $MINE"; }

agent_scenario() {
	local t R1 R2 K1 K2 PK said URL
	t=$(date +%s)
	until_true 30 "the agent's webhook is active" agent_active
	R1=$((TK + 301)) R2=$((TK + 302))
	K1=acme:agent:request-$R1:v1 K2=acme:agent:request-$R2:v1
	local CONTACT="crm-$R1-Ольга-李-שלום-🌟"
	local ASK1="Добавьте тег lead этому контакту, он спрашивал про тариф Pro — 顧客です (crm_tag__crm_tag).
contact_id: $CONTACT"
	local ASK2="Ответьте клиенту: посылка задерживается, 金曜日に発送 (support_reply__email_send).
to: customer-$R2@example.com
ticket: $R2"

	say "g. the AI Agent: request $R1, tag a contact through oncegate's MCP tool"
	expect "the agent's webhook answered" "$(agent_ask "$R1" "$ASK1")" 200
	expect "the tools the model called for request $R1" "$(agent_called "request-$R1:" | bare_tools)" crm_tag__crm_tag
	said=$(agent_said)
	[[ $said =~ ^the\ tool\ answered\ (completed|queued|awaiting_approval)\ \(key\ $K1\)$ ]] ||
		fail "the agent said \"$said\", not the outcome of run $K1"
	ok "the agent said: $said"
	expect "oncegate's tools the model was offered" \
		"$(curl -sS --noproxy '*' "$MODEL/_requests" | "$PY" -c 'import json,sys; r=[x for x in json.load(sys.stdin) if x.get("tools")]; print(" ".join(sorted(r[-1]["tools"])))' | bare_tools)" \
		"crm_tag__crm_tag oncegate_run support_reply__email_send"
	expect "runs for $K1 (the tool call is one run, claimed through MCP)" "$(mine_runs "$K1" | cut -d' ' -f1,3)" "1 mcp"
	if [[ $said == *awaiting_approval* ]]; then
		# crm_tag sends a random tenth of the eligible runs to sales
		say "g. run $K1 was drawn for sales' sample: approved on the card in Chromium"
		URL=$(agent_notice "$K1")
		node "$ROOT/tests/browser/decide.mjs" "$URL" lee@example.com sales approve \
			"$ARTIFACTS/n8n-$FLAVOUR-agent-crm.png" >"$WORK/agent-crm.log" 2>&1 ||
			{ cat "$WORK/agent-crm.log" >&2; fail "decide.mjs approve (sampled agent run) failed"; }
	fi
	PK=$(q "$K1" "SELECT provider_key FROM effect_outbox WHERE idempotency_key = :'key'
		AND effect_type = 'crm.tag' AND provider_key ~ ('^og1/c' || client_id || '/')")
	[[ -n $PK ]] || fail "no crm.tag effect for $K1"
	agent_committed() { [[ $(provider_committed "$PK") -ge 1 ]]; }
	until_true 30 "the demo provider committed the agent's tag" agent_committed
	until_true 30 "run $K1 completed" state_is "$K1" "completed -"
	expect "what the provider received for $PK" "$(curl -sS --noproxy '*' "$ONCEGATE_DEMO_HTTP/_requests" | "$PY" -c '
import json, sys
print(" | ".join(json.dumps(json.loads(r["body"]), ensure_ascii=False, sort_keys=True)
                 for r in json.load(sys.stdin) if r.get("idempotency_key") == sys.argv[1]))' "$PK")" \
		"{\"contact_id\": \"$CONTACT\", \"tag\": \"lead\"}"

	say "g. the AI Agent: request $R2, answer a customer (support approves first)"
	expect "the agent's webhook answered" "$(agent_ask "$R2" "$ASK2")" 200
	expect "the tools the model called for request $R2" "$(agent_called "request-$R2:" | bare_tools)" support_reply__email_send
	expect "what the agent said" "$(agent_said)" "the tool answered awaiting_approval (key $K2)"
	expect "run $K2" "$(mine_runs "$K2")" "1 awaiting_human mcp"
	expect "tool results that named support as the approvers" "$(agent_tool_messages 'group:support')" 1
	expect "mails to customer-$R2 before the decision" "$(mails customer-$R2@example.com)" 0
	URL=$(agent_notice "$K2")
	node "$ROOT/tests/browser/approve.mjs" "$URL" "$APPROVER" "$APPROVER_GROUPS" "$K2" \
		"$ARTIFACTS/n8n-$FLAVOUR-agent-approval.png" '' agent- >"$WORK/agent-approve.log" 2>&1 ||
		{ cat "$WORK/agent-approve.log" >&2; fail "approve.mjs failed for $K2"; }
	ok "approved in Chromium by $APPROVER"
	agent_mailed() { [[ $(mails "$1") -ge 1 ]]; }
	until_true 30 "the mail for customer-$R2" agent_mailed customer-$R2@example.com
	until_true 30 "run $K2 completed" state_is "$K2" "completed -"
	expect "the mail's subject (the agent's draft)" \
		"$("$PY" "$ROOT/tests/providers/mailbox.py" "$ONCEGATE_DEMO_SMTP_LOG" --to customer-$R2@example.com --json |
			"$PY" -c 'import json,sys; print(json.loads(sys.stdin.readline())["subject"])')" \
		"Re: Где моя посылка? 荷物はどこ? 📦"

	say "g. both requests again: the same keys, nothing new"
	expect "the agent's webhook answered" "$(agent_ask "$R1" "$ASK1")" 200
	expect "what the agent said" "$(agent_said)" "the tool answered completed (key $K1)"
	expect "the agent's webhook answered" "$(agent_ask "$R2" "$ASK2")" 200
	expect "what the agent said" "$(agent_said)" "the tool answered completed (key $K2)"
	sleep 1 # five dispatcher polls
	expect "runs for $K1" "$(mine_runs "$K1")" "1 completed mcp"
	expect "runs for $K2" "$(mine_runs "$K2")" "1 completed mcp"
	expect "approvals for $K2" "$(q "$K2" "SELECT count(*) FROM approvals WHERE idempotency_key = :'key'")" 1
	expect "provider requests for $PK" "$(provider_requests "$PK")" 1
	expect "mails to customer-$R2" "$(mails customer-$R2@example.com)" 1
	for k in "$K1" "$K2"; do
		expect "run.claimed lines for $k" "$(grep -F "\"key\":\"$k\"" "$ONCEGATE_LOG" | grep -c '"event":"run.claimed"' || true)" 1
	done
	expect "agent executions that did not succeed" \
		"$(count_execs "e['workflow_id'] == 'ogAgentMcp000001' and e['status'] != 'success'")" 0
	G_S=$(($(date +%s) - t))
	say "g. the AI Agent through MCP: ${G_S}s (and ${AGENT_PREPARE_S}s before n8n started: the stand-in's check, credentials, publish)"
}

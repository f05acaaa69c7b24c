#!/usr/bin/env bash
# replay_contract.sh — dead letters replayed after the contract changed. A
# draft answers the contract it was written for: once the contract changed,
# a replay never carries the old output to a person, still less to the
# provider; the new run starts failed_retryable with no output, approval or
# effect, and the workflow drafts again when it reclaims the new key.
#   1. --runs runs (two API clients sharing each business key; long
#      multilingual mails and CRM reasons from tests/data/corpus), drafted,
#      approved and sent: every effect is refused for good (the CRM answers
#      403, the mail server 550 at RCPT), so each ends as a dead letter;
#   2. the contracts change on disk (support_reply requires tone, crm_tag a
#      reason); the responder and the dispatcher reload them (SIGHUP);
#      oncegatectl loads them itself;
#   3. the operator replays every dead letter: some keys one by one
#      (`oncegatectl replay KEY --new-key NEW`; every key with a space in
#      it, which a map file cannot carry), the rest as one bulk job per
#      client (`--map FILE`), while the dispatcher runs with the kill
#      switch on and AI_ACTIONS_ENABLED=true. Asserted: every replay is a
#      new run in failed_retryable with no output, approval or effect,
#      linked both ways to its original; the provider and the mail sink
#      received nothing new; no original changed; each dead letter shows
#      replay_count 1 and replayed_as; the decision log has replay.done
#      for each;
#   4. the workflow reclaims each new key, drafts under the new contract and
#      the draft is approved (a crm_tag "lead" goes through on its own
#      unless sampled for sales); the CRM's address and the customer's mail
#      address are fixed. Each provider receives exactly one effect per new
#      run, none more for an original.
#
#   tests/chaos/replay_contract.sh [--runs N]     (N even, 2-400; default 6)
#
# Runs against the test stack that `./dev test` (or `./dev chaos`) starts:
# ONCEGATE_URL, ONCEGATE_API_KEY, ONCEGATE_CONF, ONCEGATE_LOG,
# ONCEGATE_DISPATCH, ONCEGATE_PROVIDERS, ONCEGATE_PYTHON, ONCEGATE_CTL and
# the PG* variables; the responder's PID is the fcgi.pid beside the config.
# The stack's contracts are restored (and reloaded) on exit.
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"

RUNS=6
while [[ $# -gt 0 ]]; do
	case $1 in
	--runs) RUNS=$2; shift 2 ;;
	*) echo "usage: replay_contract.sh [--runs N]" >&2; exit 2 ;;
	esac
done
[[ $RUNS =~ ^[1-9][0-9]{0,2}$ ]] && ((RUNS % 2 == 0 && RUNS <= 400)) ||
	{ echo "replay_contract.sh: --runs takes an even number, 2-400" >&2; exit 2; }
need_env "./dev test or ./dev chaos" ONCEGATE_URL ONCEGATE_API_KEY ONCEGATE_CONF ONCEGATE_LOG ONCEGATE_DISPATCH \
	ONCEGATE_PROVIDERS ONCEGATE_PYTHON ONCEGATE_CTL PGHOST
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
FCGI_PID=$(head -n1 "$(dirname "$ONCEGATE_CONF")/fcgi.pid" 2>/dev/null || true)
CONTRACTS=$(conf_value contracts_dir)
[[ $FCGI_PID =~ ^[0-9]+$ && -d $CONTRACTS ]] ||
	{ echo "replay_contract.sh: no responder PID or contracts_dir beside $ONCEGATE_CONF" >&2; exit 2; }
# The contracts are changed in place: only the stack's own copies, never a
# checkout's.
[[ $CONTRACTS == "$(dirname "$ONCEGATE_CONF")"/* ]] ||
	{ echo "replay_contract.sh: contracts_dir $CONTRACTS is not the stack's own copy" >&2; exit 2; }
ctl() { "$ONCEGATE_CTL" -c "$ONCEGATE_CONF" "$@"; }
flow() { "$ONCEGATE_PYTHON" "$HERE/replay_contract_flow.py" "$1" --out "$TMP" "${@:2}"; }
RESTORE=no
# at exit, after the providers and the dispatcher stopped: the contracts
# as they were, reloaded
# shellcheck disable=SC2317 # called by scratch_end
on_cleanup() {
	if [[ $RESTORE == yes ]]; then
		cp "$TMP/crm_tag.json.orig" "$CONTRACTS/crm_tag.json"
		cp "$TMP/support_reply.json.orig" "$CONTRACTS/support_reply.json"
		kill -HUP "$FCGI_PID" 2>/dev/null || true
	fi
}
scratch_begin replay TERM
RUN=rc$(date +%s)x$$
echo "$RUN" >"$TMP/run"
fail=0
sql_is() { [[ $(q "$1") == "$2" ]]; } # SQL EXPECTED

provider_start PROVIDER_PID PORT "$TMP/provider.out" http_provider.py
provider_start SINK_PID SMTP "$TMP/sink.out" smtp_sink.py --record "$TMP/mail.jsonl"
PROVIDER=http://127.0.0.1:$PORT

dispatch_conf() { # FAULT: the CRM's answer to every send ("" once fixed)
	conf_lines log_file="$ONCEGATE_LOG" contracts_dir="$CONTRACTS" dispatch_poll_ms=100 \
		dispatch_shutdown_seconds=2
	target_conf demo_http http "$PROVIDER/effects${1:+?fault=$1}" lookup_url="$PROVIDER/effects/lookup" \
		idempotency_key=1 provider_id_header=X-Provider-Id rejection_pointer='!/ok' timeout_ms=5000
	target_conf demo_smtp smtp "smtp://127.0.0.1:$SMTP" mail_from=oncegate@demo.example timeout_ms=10000
}
dispatch_conf 403 >"$TMP/dispatch.conf"

# Nothing else of the shared test database may be sent by this dispatcher.
outbox_quiet "chaos: replay after a contract change"
CLIENT_B=globex-helpdesk-$RUN
ctl client add "$CLIENT_B" \
	--reason "chaos: the second tenant of replay_contract.sh" >"$TMP/api_key_b" 2>/dev/null
log0=$(stat -c %s "$ONCEGATE_LOG")
AI_ACTIONS_ENABLED=true "$ONCEGATE_DISPATCH" -c "$TMP/dispatch.conf" </dev/null \
	>>"$TMP/dispatch.stderr" 2>&1 &
DISPATCH_PID=$!

flow plan --runs "$RUNS" --run "$RUN" --client-b "$CLIENT_B"
printf '\ndead letters replayed after the contract changed (%s, %d runs, 2 clients)\n' "$RUN" "$RUNS"
t0=$(date +%s.%N)
drafted=$(flow draft --stage old) || true
orig="idempotency_key LIKE '$RUN:o%'"
new="idempotency_key LIKE '$RUN:n%'"
wait_for 120 "$RUNS dead letters" sql_is "SELECT count(*) FROM dead_letters WHERE $orig" "$RUNS" || true
t1=$(date +%s.%N)
letters=$(q "SELECT count(*) FROM dead_letters WHERE $orig AND error_class = 'permanent'")
check "$RUNS runs drafted, approved and refused for good: $letters dead letters ($drafted)" \
	"$(yn test "$letters" == "$RUNS")"
snapshot() { # the originals as a person would compare them: run, effect, approval
	q "SELECT string_agg(r.client_id || '|' || r.idempotency_key || '|' || r.state || '|' ||
	          r.version || '|' || r.output_hash || '|' || e.state || '|' || e.attempt || '|' ||
	          (SELECT string_agg(a.state, ',' ORDER BY a.id) FROM approvals a
	            WHERE a.client_id = r.client_id AND a.idempotency_key = r.idempotency_key),
	          E'\n' ORDER BY r.client_id, r.idempotency_key)
	     FROM workflow_runs r JOIN effect_outbox e USING (client_id, idempotency_key)
	    WHERE r.$orig"
}
before=$(snapshot)
sent0=$(flow sent --provider "$PROVIDER" --sink "$TMP/mail.jsonl")

# 2. The contracts change on disk: each answer now needs a member the old
# drafts were not asked for. The responder and the dispatcher reload.
cp "$CONTRACTS/crm_tag.json" "$TMP/crm_tag.json.orig"
cp "$CONTRACTS/support_reply.json" "$TMP/support_reply.json.orig"
RESTORE=yes
"$ONCEGATE_PYTHON" - "$CONTRACTS" <<'PY'
import json, os, sys
for name, member in (("support_reply", "tone"), ("crm_tag", "reason")):
    path = os.path.join(sys.argv[1], name + ".json")
    with open(path, encoding="utf-8") as f:
        c = json.load(f)
    c["schema"]["required"].append(member)
    c["description"] += " Every answer now states its %s." % member
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(c, f, ensure_ascii=False, indent=2)
    os.replace(path + ".tmp", path)
PY
log1=$(stat -c %s "$ONCEGATE_LOG")
kill -HUP "$FCGI_PID" "$DISPATCH_PID"
for ((i = 0; i < 100; i++)); do
	tail -c +"$((log1 + 1))" "$ONCEGATE_LOG" | grep -q '"responder.reloaded"' && break
	sleep 0.1
done
check "the responder reloaded the changed contracts" \
	"$(yn grep -q '"responder.reloaded"' < <(tail -c +"$((log1 + 1))" "$ONCEGATE_LOG"))"

# 3. The operator replays every dead letter, the dispatcher sending.
t2=$(date +%s.%N)
singles=0 bulk=0 refused=0
while IFS=$'\t' read -r client key nkey; do
	if ctl replay "$key" --new-key "$nkey" --client "$client" \
		--reason "CRM token and mail address fixed; contracts v2 require tone and reason" \
		>>"$TMP/replay.out" 2>&1; then
		singles=$((singles + 1))
	else
		refused=$((refused + 1))
	fi
done <"$TMP/singles.tsv"
for map in "$TMP"/map-*; do
	[[ -s $map ]] || continue
	n=$(wc -l <"$map")
	if ctl replay --map "$map" --client "${map##*/map-}" --rate 200/s \
		--reason "bulk: CRM token and mail address fixed; contracts v2" >>"$TMP/replay.out" 2>&1; then
		bulk=$((bulk + n))
	else
		refused=$((refused + n))
	fi
done
t3=$(date +%s.%N)
sleep 1 # ten dispatcher polls: would anything go out?
check "every dead letter replayed: $singles one by one, $bulk in bulk jobs, $refused refused" \
	"$(yn test "$((singles + bulk))" == "$RUNS" -a "$refused" == 0)"
[[ $refused == 0 ]] || tail -n 20 "$TMP/replay.out" >&2
waiting=$(q "SELECT count(*) FROM workflow_runs r WHERE r.$new AND r.state = 'failed_retryable'
               AND r.trigger = 'replay' AND r.output IS NULL AND r.effect IS NULL
               AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.client_id = r.client_id
                                  AND a.idempotency_key = r.idempotency_key)
               AND NOT EXISTS (SELECT 1 FROM effect_outbox e WHERE e.client_id = r.client_id
                                  AND e.idempotency_key = r.idempotency_key)")
check "every replay waits for a new draft: failed_retryable, no output, approval or effect ($waiting/$RUNS)" \
	"$(yn test "$waiting" == "$RUNS")"
linked=$(q "SELECT count(*) FROM run_replays p WHERE p.original_key LIKE '$RUN:o%'
              AND p.start_state = 'failed_retryable'
              AND p.replay_key = '$RUN:n' || substr(p.original_key, length('$RUN:o') + 1)")
explained=0
while IFS=$'\t' read -r client key nkey; do
	ctl --json explain "$nkey" --client "$client" 2>/dev/null | "$ONCEGATE_PYTHON" -c '
import json, sys
d = json.load(sys.stdin)
sys.exit(0 if any(r.get("direction") == "replay_of" and r.get("key") == sys.argv[1]
                  for r in d.get("replays", [])) else 1)' "$key" || continue
	ctl --json explain "$key" --client "$client" 2>/dev/null | "$ONCEGATE_PYTHON" -c '
import json, sys
d = json.load(sys.stdin)
sys.exit(0 if any(r.get("direction") == "replayed_as" and r.get("key") == sys.argv[1]
                  for r in d.get("replays", [])) else 1)' "$nkey" && explained=$((explained + 1))
done < <("$ONCEGATE_PYTHON" -c '
import json, sys
for it in json.load(open(sys.argv[1], encoding="utf-8")):
    print("%s\t%s\t%s" % (it["client"], it["key"], it["new_key"]))' "$TMP/items.json")
check "each replay linked both ways to its original (run_replays $linked, explain $explained)" \
	"$(yn test "$linked" == "$RUNS" -a "$explained" == "$RUNS")"
sent1=$(flow sent --provider "$PROVIDER" --sink "$TMP/mail.jsonl")
check "the provider and the mail sink received nothing new after the change ($sent0; then $sent1)" \
	"$(yn test "$sent0" == "$sent1")"
after=$(snapshot)
check "no original changed: run, effect and approval as before the replay" \
	"$(yn test "$before" == "$after" -a -n "$before")"
shown=0
for id in $(q "SELECT id FROM dead_letters WHERE $orig"); do
	ctl --json deadletter show "$id" 2>/dev/null | "$ONCEGATE_PYTHON" -c '
import json, sys
d = json.load(sys.stdin)
k = d.get("idempotency_key") or d.get("key") or ""
want = sys.argv[1] + ":n" + k[len(sys.argv[1]) + 2:]
sys.exit(0 if d.get("replay_count") == 1 and d.get("replayed_as") == want else 1)' "$RUN" &&
		shown=$((shown + 1))
done
check "each dead letter shows replay_count 1 and replayed_as the new key ($shown/$RUNS)" \
	"$(yn test "$shown" == "$RUNS")"
logged=$(tail -c +"$((log1 + 1))" "$ONCEGATE_LOG" | "$ONCEGATE_PYTHON" -c '
import json, sys
keys = set()
for line in sys.stdin:
    try:
        d = json.loads(line)
    except ValueError:
        continue
    if d.get("event") == "replay.done" and d.get("state_to") == "failed_retryable" \
            and str(d.get("key", "")).startswith(sys.argv[1] + ":n"):
        keys.add((d.get("client"), d["key"]))
print(len(keys))' "$RUN")
check "the decision log has a replay.done line for each ($logged/$RUNS)" "$(yn test "$logged" == "$RUNS")"

# 4. The workflow drafts again under the new contract; the CRM's address is
# fixed. One effect per new run, none for an original.
dispatch_conf "" >"$TMP/dispatch.conf"
kill -HUP "$DISPATCH_PID"
sleep 0.5
t4=$(date +%s.%N)
redrafted=$(flow draft --stage new) || true
wait_for 120 "$RUNS completed effects" sql_is "SELECT count(*) FROM effect_outbox WHERE $new AND state = 'completed'" "$RUNS" || true
t5=$(date +%s.%N)
sleep 1
done_n=$(q "SELECT count(*) FROM effect_outbox WHERE $new AND state = 'completed'")
check "every new run drafted again, approved and sent: $done_n/$RUNS completed ($redrafted)" \
	"$(yn test "$done_n" == "$RUNS")"
q "SELECT provider_key FROM effect_outbox WHERE $new AND effect_type = 'crm.tag'" >"$TMP/new.keys"
q "SELECT provider_key FROM effect_outbox WHERE $orig AND effect_type = 'crm.tag'" >"$TMP/orig.keys"
n_tag=$("$ONCEGATE_PYTHON" -c '
import json, sys
print(sum(1 for it in json.load(open(sys.argv[1], encoding="utf-8")) if it["contract"] == "crm_tag"))' \
	"$TMP/items.json")
n_mail=$((RUNS - n_tag))
sent2=$(flow sent --provider "$PROVIDER" --sink "$TMP/mail.jsonl" --keys "$TMP/new.keys")
read -r _ r0 _ c0 _ m0 <<<"$sent1"
read -r _ r2 _ c2 _ m2 _ off _ <<<"$sent2"
check "the CRM committed exactly one tag per new run ($n_tag runs; committed $c0 -> $c2, $off off)" \
	"$(yn test "$((c2 - c0))" == "$n_tag" -a "$off" == 0 -a "$((r2 - r0))" == "$n_tag" \
		-a "$(wc -l <"$TMP/new.keys")" == "$n_tag")"
check "the mail sink got exactly one mail per new run ($n_mail runs; mails $m0 -> $m2)" \
	"$(yn test "$((m2 - m0))" == "$n_mail")"
orig_off=$(flow sent --provider "$PROVIDER" --sink "$TMP/mail.jsonl" --keys "$TMP/orig.keys")
check "nothing committed for an original (of its $n_tag CRM keys, ${orig_off##* } have none; $c0 before the change)" \
	"$(yn test "${orig_off##* }" == "$n_tag" -a "$(wc -l <"$TMP/orig.keys")" == "$n_tag" -a "$c0" == 0)"
after=$(snapshot)
check "the originals are still as the dead letters left them" "$(yn test "$before" == "$after")"
if grep -qE 'ERROR: AddressSanitizer|runtime error:|LeakSanitizer' "$TMP/dispatch.stderr"; then
	check "no sanitizer finding in the dispatcher" no
	grep -E -A 20 'ERROR: AddressSanitizer|runtime error:|LeakSanitizer' "$TMP/dispatch.stderr" | head -n 60 >&2
fi
printf '  measured: %d dead letters in %.1f s; %d replays in %.1f s (%.0f ms each); redrafted and sent in %.1f s\n' \
	"$letters" "$(bc <<<"$t1 - $t0")" "$((singles + bulk))" "$(bc <<<"$t3 - $t2")" \
	"$(bc <<<"($t3 - $t2) * 1000 / $RUNS")" "$(bc <<<"$t5 - $t4")"
kill -TERM "$DISPATCH_PID" 2>/dev/null || true
wait "$DISPATCH_PID" 2>/dev/null || true
DISPATCH_PID=''
ctl sends stop --reason "chaos run over" >/dev/null 2>&1 || true
exit "$fail"

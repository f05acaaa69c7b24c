#!/usr/bin/env bash
# skew.sh — clock skew between hosts, simulated by a lease set in the past.
# Leases and expiries are computed by PostgreSQL's now(), never by a host's
# clock, so a host whose clock runs fast or slow cannot stretch or cut a
# lease; what this checks is the behaviour at the moment a lease is over,
# whoever's clock says so:
#   * ledger: a run whose lease ended is reclaimed by another execution
#     (201, attempt 2, a new owner); the first owner's late transition is
#     refused with 409 lease_lost and changes nothing; the new owner's
#     goes through;
#   * outbox: an effect left `sending` under a lease that ended (its
#     dispatcher's host stalled or died) after its send had started is made
#     `unknown` with a dead letter by another dispatcher, and never sent;
#     one whose send had not started (claimed, not yet sent) goes back to
#     `pending` and is sent once.
#
#   tests/chaos/skew.sh
#
# Runs against the test stack that `./dev test` (or `./dev chaos`) starts:
# ONCEGATE_URL, ONCEGATE_API_KEY, ONCEGATE_DISPATCH, ONCEGATE_PROVIDERS,
# ONCEGATE_PYTHON, ONCEGATE_CTL and the PG* variables.
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"

need_env "./dev test or ./dev chaos" ONCEGATE_URL ONCEGATE_API_KEY ONCEGATE_CONF ONCEGATE_DISPATCH ONCEGATE_PROVIDERS ONCEGATE_PYTHON ONCEGATE_CTL PGHOST
scratch_begin skew TERM
RUN=sk$(date +%s)-$$
(umask 077 && printf 'Authorization: Bearer %s\n' "$ONCEGATE_API_KEY" >"$TMP/auth")
post() { # PATH BODY -> "STATUS BODY"
	curl -sS --max-time 10 -w '\n%{http_code}' -H @"$TMP/auth" -H 'Content-Type: application/json' \
		-X POST "$ONCEGATE_URL$1" -d "$2" | awk '{ a[NR] = $0 } END { printf "%s %s\n", a[NR], a[1] }'
}
fail=0

# --- ledger ---------------------------------------------------------------------------
key="$RUN:lead-1:v1"
a=$(post /v1/runs "{\"key\":\"$key\",\"payload\":{\"lead\":1},\"lease_seconds\":30}")
owner_a=$(sed -E 's/.*"lease_owner":"([^"]+)".*/\1/' <<<"$a")
version_a=$(sed -E 's/.*"version":([0-9]+).*/\1/' <<<"$a")
# The host that holds the lease believes it has 30 s left; the database's
# clock says it is over (the lease set in the past).
q "UPDATE workflow_runs SET lease_expires_at = now() - interval '1 second' WHERE idempotency_key = '$key'" >/dev/null
b=$(post /v1/runs "{\"key\":\"$key\",\"payload\":{\"lead\":1}}")
owner_b=$(sed -E 's/.*"lease_owner":"([^"]+)".*/\1/' <<<"$b")
version_b=$(sed -E 's/.*"version":([0-9]+).*/\1/' <<<"$b")
before=$(q "SELECT state || ' ' || version || ' ' || lease_owner FROM workflow_runs WHERE idempotency_key = '$key'")
late=$(post "/v1/runs/$key/transition" "{\"lease_owner\":\"$owner_a\",\"version\":$version_a,\"to\":\"completed\",\"result\":{\"by\":\"a\"}}")
after=$(q "SELECT state || ' ' || version || ' ' || lease_owner FROM workflow_runs WHERE idempotency_key = '$key'")
good=$(post "/v1/runs/$key/transition" "{\"lease_owner\":\"$owner_b\",\"version\":$version_b,\"to\":\"completed\",\"result\":{\"by\":\"b\"}}")
final=$(q "SELECT state || ' ' || (result->>'by') FROM workflow_runs WHERE idempotency_key = '$key'")
printf '\nclock skew: a lease that ended by the database'"'"'s clock (%s)\n' "$RUN"
check "the expired run is reclaimed: 201, attempt 2, another owner" \
	"$([[ ${b%% *} == 201 && $b == *'"attempt":2'* && $owner_b != "$owner_a" ]] && echo yes || echo no)"
check "the first owner's late transition: 409 lease_lost" \
	"$([[ ${late%% *} == 409 && $late == *lease_lost* ]] && echo yes || echo no)"
check "... and it changed nothing" "$([[ $before == "$after" ]] && echo yes || echo no)"
check "the new owner's transition goes through (completed by b)" \
	"$([[ ${good%% *} == 200 && $final == 'completed b' ]] && echo yes || echo no)"

# --- outbox ---------------------------------------------------------------------------
provider_start PROVIDER_PID PORT "$TMP/provider.out" http_provider.py --pid "$TMP/provider.pid"
# The dispatcher re-checks each payload against its run's contract before
# sending: it loads the stack's contracts.
{
	conf_lines log_file="$TMP/decisions.log" contracts_dir="$(conf_value contracts_dir)" dispatch_poll_ms=100
	target_conf skew_plain http "http://127.0.0.1:$PORT/plain/effects"
} >"$TMP/dispatch.conf"
outbox_quiet "chaos: clock skew"
psql -X -q -v ON_ERROR_STOP=1 <<EOF
INSERT INTO workflow_runs (client_id, idempotency_key, payload_hash, state, claim_started_at)
VALUES (1, '$RUN:effect', 'sha256:x', 'approved', now()),
       (1, '$RUN:claimed', 'sha256:x', 'approved', now());
-- held by a dispatcher on another host whose lease the database says is
-- over: one whose send had started, one claimed whose send had not
INSERT INTO effect_outbox (client_id, idempotency_key, effect_type, target, payload,
    payload_hash, provider_key, state, attempt, lease_owner, lease_expires_at, first_attempt_at,
    send_started)
VALUES (1, '$RUN:effect', 'crm.tag', 'skew_plain', '{"n": 1}', 'sha256:y', '$RUN:effect/crm.tag',
    'sending', 1, gen_random_uuid(), now() - interval '1 second', now() - interval '10 seconds', true),
       (1, '$RUN:claimed', 'crm.tag', 'skew_plain', '{"n": 1}',
    'sha256:' || encode(sha256(convert_to('{"n":1}', 'UTF8')), 'hex'), '$RUN:claimed/crm.tag',
    'sending', 1, gen_random_uuid(), now() - interval '1 second', now() - interval '10 seconds', false);
EOF
AI_ACTIONS_ENABLED=true "$ONCEGATE_DISPATCH" -c "$TMP/dispatch.conf" </dev/null >"$TMP/dispatch.stderr" 2>&1 &
DISPATCH_PID=$!
for ((i = 0; i < 50; i++)); do
	[[ $(q "SELECT string_agg(state, ' ' ORDER BY idempotency_key) FROM effect_outbox
	         WHERE idempotency_key IN ('$RUN:effect', '$RUN:claimed')") == 'completed unknown' ]] && break
	sleep 0.1
done
sleep 1 # would it be sent after all?
kill -TERM "$DISPATCH_PID"
wait "$DISPATCH_PID" || true
DISPATCH_PID=''
state=$(q "SELECT state || ' ' || reason FROM effect_outbox WHERE idempotency_key = '$RUN:effect'")
letters=$(q "SELECT count(*) FROM dead_letters WHERE idempotency_key = '$RUN:effect'")
received() { # KEY -> requests the provider received with that idempotency key
	curl -fsS "http://127.0.0.1:$PORT/_requests" | "$ONCEGATE_PYTHON" -c '
import json, sys
print(sum(1 for r in json.load(sys.stdin) if r.get("idempotency_key") == sys.argv[1]))' "$1"
}
sent=$(received "$RUN:effect/crm.tag")
claimed=$(q "SELECT state || ' ' || attempt FROM effect_outbox WHERE idempotency_key = '$RUN:claimed'")
claimed_sent=$(received "$RUN:claimed/crm.tag")
check "the effect whose lease ended mid-send is unknown (lease_expired_while_sending)" \
	"$([[ $state == 'unknown lease_expired_while_sending' ]] && echo yes || echo no)"
check "with a dead letter for an operator" "$([[ $letters == 1 ]] && echo yes || echo no)"
check "and never sent (provider requests: $sent)" "$([[ $sent == 0 ]] && echo yes || echo no)"
check "the one whose lease ended before its send went out once: completed at attempt 1 ($claimed, requests: $claimed_sent)" \
	"$([[ $claimed == 'completed 1' && $claimed_sent == 1 ]] && echo yes || echo no)"
"$ONCEGATE_CTL" sends stop --reason "chaos run over" 2>/dev/null || true
exit "$fail"

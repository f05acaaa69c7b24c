#!/usr/bin/env bash
# backoff_restart.sh — the dispatcher restarted while a retry waits out its
# backoff. A retry's schedule lives in the outbox row (attempt,
# first_attempt_at, next_attempt_at), never in a dispatcher's memory, so a
# dispatcher that dies and comes back while an effect is pending at its
# backoff must:
#   * keep next_attempt_at as it was (not send early, not forget it);
#   * keep the attempt count, so the retry budget is not handed out again;
#   * send the effect exactly once more, when it is due.
# Two effects on a target that honours Idempotency-Key, each failing its
# first attempt with 503 (transient: the provider did nothing):
#   once  — the second attempt succeeds: the provider saw two requests and
#           committed one; attempt 2, completed;
#   spent — the target allows 2 attempts and the second fails too: a dead
#           letter of class exhausted after exactly two requests (a budget
#           reset by the restart would have tried a third time).
# The dispatcher is killed with SIGKILL --restarts times (default 1) during
# the backoff and started again each time.
#
#   tests/chaos/backoff_restart.sh [--restarts N]
#
# Runs against the test stack that `./dev test` (or `./dev chaos`) starts:
# ONCEGATE_DISPATCH, ONCEGATE_PROVIDERS, ONCEGATE_PYTHON, ONCEGATE_CTL and
# the PG* variables.
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"

RESTARTS=1
while [[ $# -gt 0 ]]; do
	case $1 in
	--restarts) RESTARTS=$2; shift 2 ;;
	*) echo "usage: backoff_restart.sh [--restarts N]" >&2; exit 2 ;;
	esac
done
[[ $RESTARTS =~ ^[1-9][0-9]?$ ]] || { echo "backoff_restart.sh: --restarts takes 1-99" >&2; exit 2; }
need_env "./dev test or ./dev chaos" ONCEGATE_CONF ONCEGATE_DISPATCH ONCEGATE_PROVIDERS ONCEGATE_PYTHON ONCEGATE_CTL PGHOST
scratch_begin backoff KILL
RUN=bo$(date +%s)-$$
fail=0

provider_start PROVIDER_PID PORT "$TMP/provider.out" http_provider.py --pid "$TMP/provider.pid"

# The backoff is long enough for every restart to land inside it: each one
# takes well under a second on an idle machine, but a sanitized
# dispatcher's start-up took over 2 s with ten jobs sharing two cores
# (./dev chaos then found 1 of 5 kills inside a backoff of 11.5 s), so 3 s
# is allowed for each.
BASE_MS=$((4000 + 3000 * RESTARTS))
target() { # NAME MAX_ATTEMPTS: a target that honours Idempotency-Key
	target_conf "$1" http "http://127.0.0.1:$PORT/idem/effects" idempotency_key=1 \
		provider_id_header=X-Provider-Id timeout_ms=5000 max_attempts="$2" base_ms="$BASE_MS" \
		cap_ms="$BASE_MS" jitter_percent=0
}
# The dispatcher re-checks each payload against its run's contract before
# sending: it loads the stack's contracts.
{
	conf_lines log_file="$TMP/decisions.log" dispatch_poll_ms=100 dispatch_shutdown_seconds=2 \
		contracts_dir="$(conf_value contracts_dir)"
	target bo_idem 3
	target bo_spent 2
} >"$TMP/dispatch.conf"

# Nothing else of the shared test database may be sent by this dispatcher.
outbox_quiet "chaos: backoff restart"
client=$(q "SELECT id FROM api_clients ORDER BY id LIMIT 1")
psql -X -q -v ON_ERROR_STOP=1 <<SQL
INSERT INTO workflow_runs (client_id, idempotency_key, payload_hash, state, claim_started_at)
VALUES ($client, '$RUN:once', 'sha256:once', 'approved', now()),
       ($client, '$RUN:spent', 'sha256:spent', 'approved', now());
INSERT INTO effect_outbox (client_id, idempotency_key, effect_type, target, payload,
    payload_hash, provider_key)
VALUES ($client, '$RUN:once', 'crm.note', 'bo_idem',
        '{"note": "Заметка · 備考 · ملاحظة · הערה 📝", "fault": ["503", "ok"]}',
        'sha256:' || encode(sha256(convert_to(
            '{"fault":["503","ok"],"note":"Заметка · 備考 · ملاحظة · הערה 📝"}', 'UTF8')), 'hex'),
        '$RUN:once/crm.note'),
       ($client, '$RUN:spent', 'crm.note', 'bo_spent',
        '{"note": "Заметка · 備考 · ملاحظة · הערה 📝", "fault": ["503", "503", "ok"]}',
        'sha256:' || encode(sha256(convert_to(
            '{"fault":["503","503","ok"],"note":"Заметка · 備考 · ملاحظة · הערה 📝"}', 'UTF8')), 'hex'),
        '$RUN:spent/crm.note');
SQL

start_dispatcher() {
	local n=$1 i
	AI_ACTIONS_ENABLED=true "$ONCEGATE_DISPATCH" -c "$TMP/dispatch.conf" </dev/null \
		>>"$TMP/dispatch.stderr" 2>&1 &
	DISPATCH_PID=$!
	for ((i = 0; i < 150; i++)); do
		[[ $(grep -c '"dispatch.started"' "$TMP/decisions.log" 2>/dev/null || true) -ge $n ]] && return 0
		sleep 0.1
	done
	echo "backoff_restart.sh: the dispatcher did not start" >&2
	exit 1
}
requests() { # KEY -> number of effect POSTs the provider received for it
	curl -fsS "http://127.0.0.1:$PORT/_requests" | "$ONCEGATE_PYTHON" -c '
import json, sys
key = sys.argv[1]
print(sum(1 for r in json.load(sys.stdin)
          if r.get("kind") == "effect" and r.get("idempotency_key") == key))' "$1"
}
schedule() { # KEY -> "state attempt first_attempt_at next_attempt_at"
	q "SELECT state || ' ' || attempt || ' ' || first_attempt_at || ' ' || next_attempt_at
	     FROM effect_outbox WHERE idempotency_key = '$1'"
}
# due SCHEDULE: its backoff is over (a restart slower than the backoff, on
# a loaded machine, lets the retry go out when due: that is not early).
due() { [[ $(q "SELECT now() >= '$(cut -d' ' -f5- <<<"$1")'::timestamptz") == t ]]; }
# kept KEY SCHEDULE: the effect's schedule is still SCHEDULE, or it is due.
kept() { [[ $(schedule "$1") == "$2" ]] || due "$2"; }

start_dispatcher 1
# Both effects fail once and wait at their backoff.
for ((i = 0; i < 100; i++)); do
	[[ $(q "SELECT count(*) FROM effect_outbox WHERE idempotency_key LIKE '$RUN:%'
	          AND state = 'pending' AND attempt = 1 AND next_attempt_at > now()") == 2 ]] && break
	sleep 0.1
done
once0=$(schedule "$RUN:once")
spent0=$(schedule "$RUN:spent")
printf '\nthe dispatcher restarted during a backoff (%s, %d restart(s), backoff %d ms)\n' \
	"$RUN" "$RESTARTS" "$BASE_MS"
check "both effects failed once and wait at their backoff (pending, attempt 1)" \
	"$([[ $once0 == 'pending 1 '* && $spent0 == 'pending 1 '* ]] && echo yes || echo no)"

early=no inside=0
for ((r = 1; r <= RESTARTS; r++)); do
	# the fault: a kill while both still wait out their backoff
	[[ $(q "SELECT count(*) FROM effect_outbox WHERE idempotency_key LIKE '$RUN:%'
	          AND state = 'pending' AND next_attempt_at > now()") == 2 ]] &&
		running "$DISPATCH_PID" && inside=$((inside + 1))
	kill -KILL "$DISPATCH_PID"
	wait "$DISPATCH_PID" 2>/dev/null || true
	DISPATCH_PID=''
	kept "$RUN:once" "$once0" && kept "$RUN:spent" "$spent0" || early=yes
	start_dispatcher $((r + 1))
	sleep 0.3
	kept "$RUN:once" "$once0" && kept "$RUN:spent" "$spent0" || early=yes
	[[ $(requests "$RUN:once/crm.note") == 1 ]] || due "$once0" || early=yes
	[[ $(requests "$RUN:spent/crm.note") == 1 ]] || due "$spent0" || early=yes
done
check "every restart killed a running dispatcher inside the backoff ($inside/$RESTARTS)" \
	"$([[ $inside == "$RESTARTS" ]] && echo yes || echo no)"
check "every restart left attempt, first_attempt_at and next_attempt_at as they were, nothing sent early" \
	"$([[ $early == no ]] && echo yes || echo no)"

due=$(q "SELECT extract(epoch FROM next_attempt_at) FROM effect_outbox WHERE idempotency_key = '$RUN:once'")
for ((i = 0; i < 200; i++)); do
	[[ $(q "SELECT count(*) FROM effect_outbox WHERE idempotency_key LIKE '$RUN:%'
	          AND state IN ('completed', 'failed')") == 2 ]] && break
	sleep 0.1
done
sleep 1 # would anything go out again?
sent_at=$(q "SELECT extract(epoch FROM min(started_at)) FROM effect_attempts a
              JOIN effect_outbox e ON e.id = a.effect_id
             WHERE e.idempotency_key = '$RUN:once' AND a.attempt = 2")
once=$(q "SELECT state || ' ' || attempt FROM effect_outbox WHERE idempotency_key = '$RUN:once'")
spent=$(q "SELECT state || ' ' || attempt FROM effect_outbox WHERE idempotency_key = '$RUN:spent'")
letter=$(q "SELECT error_class FROM dead_letters WHERE idempotency_key = '$RUN:spent'")
n_once=$(requests "$RUN:once/crm.note")
n_spent=$(requests "$RUN:spent/crm.note")
committed=$(curl -fsS "http://127.0.0.1:$PORT/_committed" | "$ONCEGATE_PYTHON" -c '
import json, sys
print(sum(1 for c in json.load(sys.stdin) if c.get("idempotency_key") == sys.argv[1]))' "$RUN:once/crm.note")
check "the retry went out when it was due, not before (due $due, sent ${sent_at:-never})" \
	"$([[ -n $sent_at ]] && "$ONCEGATE_PYTHON" -c 'import sys; sys.exit(0 if float(sys.argv[2]) >= float(sys.argv[1]) - 0.05 else 1)' "$due" "$sent_at" && echo yes || echo no)"
check "once: completed at attempt 2 ($once)" "$([[ $once == 'completed 2' ]] && echo yes || echo no)"
check "once: the provider got 2 requests (503, then the send) and committed 1 ($n_once, $committed)" \
	"$([[ $n_once == 2 && $committed == 1 ]] && echo yes || echo no)"
check "spent: the budget of 2 carried over: failed at attempt 2 with an exhausted dead letter ($spent, ${letter:-none})" \
	"$([[ $spent == 'failed 2' && $letter == exhausted ]] && echo yes || echo no)"
check "spent: the provider got exactly 2 requests, never a third ($n_spent)" \
	"$([[ $n_spent == 2 ]] && echo yes || echo no)"
if grep -qE 'ERROR: AddressSanitizer|runtime error:|LeakSanitizer' "$TMP/dispatch.stderr"; then
	check "no sanitizer finding in the dispatcher" no
	grep -E -A 20 'ERROR: AddressSanitizer|runtime error:|LeakSanitizer' "$TMP/dispatch.stderr" | head -n 60 >&2
fi
kill -TERM "$DISPATCH_PID" 2>/dev/null || true
wait "$DISPATCH_PID" 2>/dev/null || true
DISPATCH_PID=''
"$ONCEGATE_CTL" sends stop --reason "chaos run over" >/dev/null 2>&1 || true
exit "$fail"

#!/usr/bin/env bash
# kill9.sh — the dispatcher killed with SIGKILL at random points while it
# drains the outbox to a provider WITHOUT idempotency keys, where a resend
# would be a duplicate the provider cannot detect. Afterwards:
#   * no effect reached the provider twice (its own record of requests);
#   * none is lost: every effect ends `completed`, or `unknown` with a dead
#     letter for an operator (a kill between its send and its settle);
#   * every `completed` effect was received exactly once, and an `unknown`
#     one at most once;
#   * only what was really in flight is `unknown`: each one a send that had
#     started (send_started, committed once the request's headers were
#     written, right before its body) when a dispatcher was killed, and
#     each one reached the provider: it received the request whole, or its
#     headers and then the connection closed (a kill while the mark was
#     being committed; the provider records it as cut_short and acts on
#     nothing). A claim whose send had not started went back to `pending`
#     when its lease ran out and went out once.
# And that the fault happened: every kill hit a running dispatcher after
# it had started, and the kills caught effects in flight (claimed, their
# sends started or not) while the provider was receiving.
#
#   tests/chaos/kill9.sh [--effects N] [--kills K]      (default 1000, 50)
#
# Runs against the test stack that `./dev test` (or `./dev chaos`) starts:
# it needs ONCEGATE_DISPATCH, ONCEGATE_PROVIDERS, ONCEGATE_PYTHON,
# ONCEGATE_CTL and the PG* variables. It starts its own provider
# (tests/providers/http_provider.py, /plain paths: keys ignored) and its
# own dispatchers, one at a time, each killed after a random 0.1-1.2 s;
# then a last one drains what is left and the sending leases of the killed
# ones run out. Everything it starts is stopped by PID on exit. Prints one
# table; exit status 0 when every check above holds.
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"

EFFECTS=1000 KILLS=50
while [[ $# -gt 0 ]]; do
	case $1 in
	--effects) EFFECTS=${2:?}; shift 2 ;;
	--kills) KILLS=${2:?}; shift 2 ;;
	*) echo "usage: $0 [--effects N] [--kills K]" >&2; exit 2 ;;
	esac
done
need_env "./dev test or ./dev chaos" ONCEGATE_CONF ONCEGATE_DISPATCH ONCEGATE_PROVIDERS ONCEGATE_PYTHON ONCEGATE_CTL PGHOST PGPORT PGDATABASE

scratch_begin kill9 KILL
RUN=k9$(date +%s)-$$

# --- the provider ------------------------------------------------------------------
provider_start PROVIDER_PID PORT "$TMP/provider.out" http_provider.py --pid "$TMP/provider.pid"

# The dispatcher re-checks each payload against its run's contract before
# sending: it loads the stack's contracts. The rate is slow enough that the
# kills land mid-drain: about the whole outbox over the dispatchers'
# lifetimes (0.65 s on average each).
{
	echo "# tests/chaos/kill9.sh"
	conf_lines log_file="$TMP/decisions.log" contracts_dir="$(conf_value contracts_dir)" \
		dispatch_workers=4 dispatch_batch=8 dispatch_lease_seconds=5 dispatch_poll_ms=100 \
		dispatch_shutdown_seconds=2
	target_conf chaos_plain http "http://127.0.0.1:$PORT/plain/effects" idempotency_key=0 \
		timeout_ms=2000 connect_timeout_ms=1000 max_attempts=3 base_ms=100 \
		rate_per_second=$((EFFECTS * 3 / (KILLS * 2) > 0 ? EFFECTS * 3 / (KILLS * 2) : 1))
} >"$TMP/dispatch.conf"
"$ONCEGATE_DISPATCH" -c "$TMP/dispatch.conf" -n >/dev/null

# --- the work ------------------------------------------------------------------------
say "kill -9: $EFFECTS effects, $KILLS kills, provider without idempotency keys on :$PORT"
# Nothing else may be sent by these dispatchers: earlier work is cancelled.
outbox_quiet "chaos: kill -9 of the dispatcher"
approved_effects "$RUN:" "$EFFECTS" chaos_plain n

start_dispatcher() {
	AI_ACTIONS_ENABLED=true ASAN_OPTIONS=detect_leaks=0 "$ONCEGATE_DISPATCH" -c "$TMP/dispatch.conf" \
		</dev/null >>"$TMP/dispatch.stderr" 2>&1 &
	DISPATCH_PID=$!
}

# started N: wait (up to 30 s) until the log holds N dispatch.started lines;
# the last one's lease owner (actor) on stdout.
started() {
	local i
	for ((i = 0; i < 300; i++)); do
		if [[ $(grep -c '"dispatch.started"' "$TMP/decisions.log" 2>/dev/null || true) -ge $1 ]]; then
			grep '"dispatch.started"' "$TMP/decisions.log" | tail -n1 |
				sed -n 's/.*"actor": *"\([0-9a-f-]*\)".*/\1/p'
			return 0
		fi
		sleep 0.1
	done
	return 1
}

start=$SECONDS
killed=0
: >"$TMP/inflight"
for ((k = 1; k <= KILLS; k++)); do
	start_dispatcher
	# the random point is counted from its start (a slow start under the
	# sanitizers would otherwise eat the whole life of a dispatcher)
	owner=$(started "$k") || { echo "kill9.sh: dispatcher $k did not start" >&2; exit 1; }
	sleep "$(awk -v r="$RANDOM" 'BEGIN { printf "%.2f", 0.1 + (r % 1100) / 1000 }')"
	if running "$DISPATCH_PID" && kill -KILL "$DISPATCH_PID" 2>/dev/null; then
		killed=$((killed + 1))
	fi
	wait "$DISPATCH_PID" 2>/dev/null || true
	DISPATCH_PID=''
	# what it held when it died: its send started (true) or not (false)
	q "SELECT id, send_started FROM effect_outbox WHERE idempotency_key LIKE '$RUN:%'
	     AND state = 'sending' AND lease_owner = '$owner'::uuid" >>"$TMP/inflight"
done
sent_during_kills=$(curl -fsS "http://127.0.0.1:$PORT/_requests" |
	"$ONCEGATE_PYTHON" -c 'import json, sys; print(sum(1 for r in json.load(sys.stdin) if r.get("kind") == "effect" and (r.get("idempotency_key") or "").startswith(sys.argv[1])))' "$RUN:")
started_at_kill=$(awk -F'|' '$2 == "t"' "$TMP/inflight" | sort -u | wc -l)
unstarted_at_kill=$(awk -F'|' '$2 == "f"' "$TMP/inflight" | sort -u | wc -l)
left=$(q "SELECT count(*) FROM effect_outbox WHERE idempotency_key LIKE '$RUN:%' AND state IN ('pending', 'sending')")
say "after $KILLS kills: $left effects pending or sending; a last dispatcher drains them"
start_dispatcher
# The killed dispatchers' leases run out (up to ~35 s: lease renewed for
# two timeouts and a margin); the sweep makes those effects unknown.
for ((i = 0; i < 600; i++)); do
	left=$(q "SELECT count(*) FROM effect_outbox WHERE idempotency_key LIKE '$RUN:%' AND state IN ('pending', 'sending')")
	[[ $left == 0 ]] && break
	sleep 0.2
done
kill -TERM "$DISPATCH_PID" 2>/dev/null || true
wait "$DISPATCH_PID" 2>/dev/null || true
DISPATCH_PID=''
ELAPSED=$((SECONDS - start))

# --- what happened --------------------------------------------------------------------
curl -fsS "http://127.0.0.1:$PORT/_requests" >"$TMP/requests.json"
# per key: requests received whole, requests cut short after their headers
"$ONCEGATE_PYTHON" - "$TMP/requests.json" "$RUN" >"$TMP/received" <<'EOF'
import json, sys
reqs = json.load(open(sys.argv[1]))
prefix = sys.argv[2] + ":"
counts = {}
for r in reqs:
    k = r.get("idempotency_key") or ""
    kind = r.get("kind")
    if kind in ("effect", "cut_short") and k.startswith(prefix):
        c = counts.setdefault(k, [0, 0])
        c[kind == "cut_short"] += 1
for k, (whole, cut) in sorted(counts.items()):
    print(k, whole, cut)
EOF
psql -X -At -F ' ' -c "SELECT provider_key, state, (SELECT count(*) FROM dead_letters d WHERE d.effect_id = e.id) FROM effect_outbox e WHERE idempotency_key LIKE '$RUN:%' ORDER BY 1" >"$TMP/states"

read -r total completed unknown other dups completed_bad unknown_bad unknown_no_letter unknown_whole unknown_cut < <(
	awk 'FNR == NR { got[$1] = $2; cut[$1] = $3; next }
	{
		total++; n = ($1 in got) ? got[$1] : 0
		if (n > 1) dups++
		if ($2 == "completed") { completed++; if (n != 1) completed_bad++ }
		else if ($2 == "unknown") {
			unknown++; if (n > 1) unknown_bad++; if ($3 == 0) noletter++
			if (n == 1) whole++; else if (n == 0 && cut[$1] > 0) cutshort++
		}
		else other++
	}
	END { printf "%d %d %d %d %d %d %d %d %d %d\n", total, completed, unknown, other, dups,
	      completed_bad, unknown_bad, noletter, whole, cutshort }' \
		"$TMP/received" "$TMP/states")
lost=$((EFFECTS - total + other))
sent=$(awk '{ s += $2 } END { print s + 0 }' "$TMP/received")
cut_short=$(awk '{ s += $3 } END { print s + 0 }' "$TMP/received")
unknown_unsent=$((unknown - unknown_whole - unknown_cut - unknown_bad))
# unknown effects that were not a send started at a kill (claimed ahead)
unknown_unstarted=$(q "SELECT id FROM effect_outbox WHERE idempotency_key LIKE '$RUN:%' AND state = 'unknown'" |
	grep -cvxFf <(awk -F'|' '$2 == "t" { print $1 }' "$TMP/inflight") || true)
sanitizer=$(grep -cE 'ERROR: AddressSanitizer|runtime error:' "$TMP/dispatch.stderr" || true)

printf '\nkill -9 of the dispatcher (%s)\n' "$RUN"
printf '  effects %d, kills %d, %d s\n' "$EFFECTS" "$KILLS" "$ELAPSED"
printf '  kills that hit a running dispatcher    %d   (must be %d)\n' "$killed" "$KILLS"
printf '  received while the kills went on       %d   (must be > 0: the kills landed mid-drain)\n' \
	"$sent_during_kills"
printf '  claims held at a kill, send started    %d\n' "$started_at_kill"
printf '  claims held at a kill, not started     %d   (back to pending when their lease ran out;\n' \
	"$unstarted_at_kill"
printf '                                              with the line above: must be > 0)\n'
printf '  requests received by the provider      %d   (whole; and %d cut short after their headers)\n' \
	"$sent" "$cut_short"
printf '  effects received more than once        %d   (must be 0)\n' "$dups"
printf '  completed                              %d   (each received exactly once: %s)\n' "$completed" \
	"$([[ $completed_bad == 0 ]] && echo yes || echo "NO, $completed_bad not")"
printf '  unknown, listed for reconciliation     %d   (dead letter each: %s)\n' "$unknown" \
	"$([[ $unknown_no_letter == 0 ]] && echo yes || echo "NO, $unknown_no_letter without")"
printf '    of which received whole              %d   (killed between send and settle)\n' "$unknown_whole"
printf '    of which cut short after headers     %d   (killed while its mark was committed)\n' \
	"$unknown_cut"
printf '    never reached the provider           %d   (must be 0)\n' "$unknown_unsent"
printf '    not a send started at a kill         %d   (must be 0: none claimed ahead)\n' "$unknown_unstarted"
printf '    at most the sends started at a kill  %s\n' \
	"$([[ $unknown -le $started_at_kill ]] && echo yes || echo "NO, $unknown > $started_at_kill")"
printf '  lost (neither completed nor unknown)   %d   (must be 0)\n' "$lost"
printf '  sanitizer findings in the dispatchers  %d\n' "$sanitizer"
rc=0
[[ $dups == 0 && $lost == 0 && $completed_bad == 0 && $unknown_bad == 0 && $unknown_no_letter == 0 && $sanitizer == 0 ]] || rc=1
# the fault happened, and it stranded only what was in flight
[[ $killed == "$KILLS" && $sent_during_kills -gt 0 && $((started_at_kill + unstarted_at_kill)) -gt 0 ]] || rc=1
[[ $unknown_unstarted == 0 && $unknown -le $started_at_kill && $unknown_unsent == 0 ]] || rc=1
"$ONCEGATE_CTL" sends stop --reason "chaos run over" 2>/dev/null || true
exit "$rc"

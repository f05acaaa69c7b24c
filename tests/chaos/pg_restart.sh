#!/usr/bin/env bash
# pg_restart.sh — PostgreSQL stopped and started again while clients claim
# keys through nginx. A workflow that gets 503 retries the same key later,
# as n8n does; afterwards:
#   * every answer was 201 (claimed), 200 (duplicate: a retry of a claim
#     that had committed) or 503 — never a 500 or a 502;
#   * every key ends claimed exactly once: one row, at most one 201;
#   * the responder served again without a restart.
#
#   tests/chaos/pg_restart.sh [--clients N] [--down S] [--terminate] [--pooled]
#                              (default 8 clients, 3 s outage)
#
# --pooled: the clients go through a second oncegate-fcgi (ONCEGATE_FCGI,
# the stack's config) that reaches PostgreSQL through PgBouncer in
# transaction mode (pooled_database, tests/lib/pooled.sh); PostgreSQL stops
# (or its connections are terminated) behind the pooler.
#
# --terminate: instead of stopping PostgreSQL, kill the responder's
# connections under it (pg_terminate_backend, every 0.2 s for the outage),
# so requests lose their connection mid-statement. As an operator would: a
# role that is not a superuser and may signal other roles' backends
# (pg_signal_backend), here the operator's login role
# (ONCEGATE_PGUSER_OPERATOR) granted it by the cluster's superuser for the
# run and revoked at exit. The schema owner and the programs' roles may not
# terminate each other's backends; a run that terminated none fails.
#
# Each client claims new keys one after another from 1 s before the outage
# until 2 s after it; a key answered 503 is tried again until it is
# claimed (201) or found claimed (200).
#
# Runs against the test stack that `./dev test` (or `./dev chaos`) starts:
# ONCEGATE_URL, ONCEGATE_API_KEY, the PG* variables and the stack's own
# stop/start commands (ONCEGATE_TEST_PG_STOP, ONCEGATE_TEST_PG_START).
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"
# shellcheck source=tests/lib/pooled.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/pooled.sh"

CLIENTS=8 DOWN=3 TERMINATE=no POOLED=no
while [[ $# -gt 0 ]]; do
	case $1 in
	--clients) CLIENTS=${2:?}; shift 2 ;;
	--down) DOWN=${2:?}; shift 2 ;;
	--terminate) TERMINATE=yes; shift ;;
	--pooled) POOLED=yes; shift ;;
	*) echo "usage: $0 [--clients N] [--down S] [--terminate] [--pooled]" >&2; exit 2 ;;
	esac
done
need_env "./dev test or ./dev chaos" ONCEGATE_URL ONCEGATE_API_KEY ONCEGATE_TEST_PG_STOP ONCEGATE_TEST_PG_START PGHOST

TMP=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-pgrestart.XXXXXX")
RUN=pr$(date +%s)-$$
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	pooled_stop
	wait 2>/dev/null || true
	[[ -z ${SIGNAL_ROLE:-} ]] || as_superuser "REVOKE pg_signal_backend FROM \"$SIGNAL_ROLE\"" || true
	# never leave the stack without its database
	bash -c "$ONCEGATE_TEST_PG_START" >/dev/null 2>&1 || true
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
(umask 077 && printf 'Authorization: Bearer %s\n' "$ONCEGATE_API_KEY" >"$TMP/auth")
if [[ $POOLED == yes ]]; then
	need_env "./dev test or ./dev chaos" ONCEGATE_FCGI ONCEGATE_CONF PGPASSFILE
	pooled_start "$ONCEGATE_FCGI"
	say "through PgBouncer: $POOL_NOTE ($POOL_URL)"
	ONCEGATE_URL=$POOL_URL
fi

# client C: claims new keys one after another until TMP/stop appears; on
# anything but 201/200 it waits a little and tries the same key again (at
# most 200 times).
client() {
	local c=$1 i k status tries
	for ((i = 1; ; i++)); do
		[[ -e $TMP/stop ]] && break
		k="$RUN:$c:$i"
		for ((tries = 0; tries < 200; tries++)); do
			status=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 -H @"$TMP/auth" \
				-H 'Content-Type: application/json' -X POST "$ONCEGATE_URL/v1/runs" \
				-d "{\"key\":\"$k\",\"payload\":{\"n\":$i}}" 2>/dev/null) || status=000
			echo "$k $status" >>"$TMP/answers.$c"
			[[ $status == 201 || $status == 200 ]] && break
			sleep 0.2
		done
	done
}

say "PostgreSQL restart under load: $CLIENTS clients, ${DOWN}s outage"
start=$SECONDS
for ((c = 1; c <= CLIENTS; c++)); do
	client "$c" &
	PIDS+=($!)
done
# as_superuser SQL: run by the cluster's superuser (root may be postgres on
# the stack's socket).
as_superuser() { psql -X -q -At -v ON_ERROR_STOP=1 -U postgres -d "$PGDATABASE" -c "$1" >/dev/null; }
if [[ $TERMINATE == yes ]]; then
	SIGNAL_ROLE=${ONCEGATE_PGUSER_OPERATOR:-oncegate-operator}
	as_superuser "GRANT pg_signal_backend TO \"$SIGNAL_ROLE\"" ||
		{ echo "pg_restart.sh: could not grant pg_signal_backend to $SIGNAL_ROLE" >&2; exit 1; }
fi
sleep 1
if [[ $TERMINATE == yes ]]; then
	say "terminating the responder's connections for ${DOWN}s, as $SIGNAL_ROLE (pg_signal_backend)"
	end=$((SECONDS + DOWN))
	killed=0
	while ((SECONDS < end)); do
		n=$(psql -X -At -U "$SIGNAL_ROLE" -c "SELECT count(*) FILTER (WHERE t) FROM (
			SELECT pg_terminate_backend(pid) AS t FROM pg_stat_activity
			 WHERE datname = current_database() AND pid <> pg_backend_pid()
			   AND application_name LIKE 'oncegate%') x" 2>>"$TMP/terminate.err" || echo 0)
		killed=$((killed + n))
		sleep 0.2
	done
	say "terminated $killed connections"
	[[ ! -s $TMP/terminate.err ]] || sed 's/^/  /' "$TMP/terminate.err" | sort | uniq -c >&2
else
	# a scrape before the outage, so the responder has figures to keep
	curl -sS -o /dev/null --max-time 10 "$ONCEGATE_URL/metrics" || true
	say "stopping PostgreSQL"
	bash -c "$ONCEGATE_TEST_PG_STOP" >/dev/null
	sleep "$DOWN"
	# While the database is down /metrics still answers, with the last
	# figures and oncegate_database_up 0, so alerts do not resolve.
	metrics_status=$(curl -sS -o "$TMP/metrics.down" -w '%{http_code}' --max-time 15 \
		"$ONCEGATE_URL/metrics" || true)
	say "starting PostgreSQL"
	bash -c "$ONCEGATE_TEST_PG_START" >/dev/null
fi
sleep 2
touch "$TMP/stop"
for p in "${PIDS[@]}"; do wait "$p" || true; done
PIDS=()
ELAPSED=$((SECONDS - start))

cat "$TMP"/answers.* >"$TMP/answers"
total=$(wc -l <"$TMP/answers")
declare -A by_status=()
while read -r _ s; do by_status[$s]=$((${by_status[$s]:-0} + 1)); done <"$TMP/answers"
bad=$(awk '$2 != 200 && $2 != 201 && $2 != 503' "$TMP/answers" | wc -l)
doubled=$(awk '$2 == 201 { n[$1]++ } END { for (k in n) if (n[k] > 1) c++; print c + 0 }' "$TMP/answers")
unfinished=$(awk '{ last[$1] = $2 } END { for (k in last) if (last[k] != 201 && last[k] != 200) c++; print c + 0 }' "$TMP/answers")
rows=$(psql -X -At -c "SELECT count(*) FROM workflow_runs WHERE idempotency_key LIKE '$RUN:%'")
keys=$(awk '{ print $1 }' "$TMP/answers" | sort -u | wc -l)
healthy=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 "$ONCEGATE_URL/healthz" || true)
clean=yes
if [[ $POOLED == yes ]]; then pooled_fcgi_stop || clean=no; fi

if [[ $TERMINATE == yes ]]; then
	printf '\nresponder connections terminated for %d s (%d) under %d clients (%s), %d s in all\n' \
		"$DOWN" "$killed" "$CLIENTS" "$RUN" "$ELAPSED"
else
	printf '\nPostgreSQL stopped for %d s under %d clients (%s), %d s in all\n' "$DOWN" "$CLIENTS" "$RUN" "$ELAPSED"
fi
[[ $POOLED == no ]] || printf '  through PgBouncer (transaction pooling, pooled_database)\n'
printf '  requests %d:' "$total"
for s in "${!by_status[@]}"; do printf ' %s x%d' "$s" "${by_status[$s]}"; done
printf '\n'
printf '  answers other than 200/201/503          %d   (must be 0)\n' "$bad"
printf '  keys claimed (201) more than once       %d   (must be 0)\n' "$doubled"
printf '  keys never claimed                      %d   (must be 0)\n' "$unfinished"
printf '  rows for %d keys                       %d   (must be equal)\n' "$keys" "$rows"
printf '  /healthz afterwards                     %s\n' "$healthy"
# A stopped server must show as 503s; terminated connections may all be
# re-established before a request notices.
[[ $POOLED == no ]] || printf '  the pooled responder stopped without sanitizer findings: %s\n' "$clean"
if [[ $TERMINATE == yes ]]; then
	printf '  connections terminated                  %d   (must be > 0)\n' "$killed"
else
	printf '  503 answers during the outage           %d   (must be > 0)\n' "${by_status[503]:-0}"
	metrics_down=no
	[[ ${metrics_status:-} == 200 ]] && grep -qx 'oncegate_database_up 0' "$TMP/metrics.down" &&
		grep -q '^oncegate_effects{' "$TMP/metrics.down" && metrics_down=yes
	printf '  /metrics during the outage              %s, database_up 0 with figures: %s (must be 200, yes)\n' \
		"${metrics_status:-none}" "$metrics_down"
	[[ $metrics_down == yes ]] || {
		echo "pg_restart.sh: /metrics did not answer the outage with its last figures" >&2
		sed -n '1,5p;/database_up/p' "$TMP/metrics.down" >&2 2>/dev/null || true
		exit 1
	}
fi
[[ $bad == 0 && $doubled == 0 && $unfinished == 0 && $rows == "$keys" && $healthy == 200 && $clean == yes &&
	(($TERMINATE == yes && $killed -gt 0) || ($TERMINATE == no && ${by_status[503]:-0} -gt 0)) ]] || {
	[[ $TERMINATE == yes || ${by_status[503]:-0} -gt 0 ]] || echo "  (no 503 seen: the outage missed the load)"
	[[ $TERMINATE == no || $killed -gt 0 ]] || echo "  (no connection terminated: the fault did not happen)"
	exit 1
}

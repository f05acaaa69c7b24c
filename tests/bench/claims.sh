#!/usr/bin/env bash
# claims.sh — the claim benchmark of issue 2: oncegate through nginx against
# the bare atomic claim statement in PostgreSQL, in one run on one machine.
#
#   ./dev up && tests/bench/claims.sh [--duration S] [--connections N]
#
# Runs against the stack `./dev up` leaves running (.dev/env):
#   1. wrk: POST /v1/runs with new keys (every request a key never used);
#   2. wrk: POST /v1/runs with keys that exist in state `completed` (COUNT
#      of them, created through the API first), answered as duplicates;
#   3. pgbench -M prepared: the seed's INSERT … ON CONFLICT DO UPDATE …
#      WHERE … RETURNING on a scratch table bench_claims in the same
#      database, for new keys and for COUNT existing `completed` keys;
#   4. the ceiling: a private copy of the stack's nginx config in front of
#      tests/bench/ceiling_claim.c (the bare claim, new keys) and
#      ceiling_select.c (a primary-key SELECT, existing keys), with wrk and
#      claims.lua exactly as for oncegate;
#   5. through PgBouncer: a second oncegate-fcgi (the stack's build and
#      config, pooled_database) behind a private PgBouncer in transaction
#      mode and a private copy of the nginx config, new and existing keys;
#   6. the responder's peak RSS (VmHWM).
# Same concurrency (--connections) and thread count (--threads) for wrk and
# pgbench. Prints one table on stdout (progress and the tools' own output go
# to stderr): claims/s, p50/p99, the ratio oncegate/pgbench against the
# targets, the CPU each side used in the middle of each run, the machine and
# the exact commands.
#
# Options:
#   --duration S      seconds per run (default 20)
#   --connections N   wrk connections = pgbench clients (default 32)
#   --threads N       wrk threads = pgbench threads (default 2)
#   --existing N      existing keys for the duplicate runs (default 2000)
#   --env FILE        stack environment (default .dev/env of this checkout)
#   --strict          exit 2 when a target is missed
#
# Exit status: 0 measured, 1 a run had errors (a non-201/200 answer, a socket
# error, a failed pgbench transaction) or the set-up failed, 2 --strict and a
# target missed. Keys are bench:RUN:..., RUN unique per invocation, so runs
# never collide; the product's tables keep the rows the benchmark created.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source-path=SCRIPTDIR source=claims_lib.sh
. "$HERE/claims_lib.sh"

DURATION=20 CONNS=32 THREADS=2 EXISTING=2000

bench_option() {
	case $1 in
	--existing) EXISTING=${2:?--existing needs a number}; SHIFT=2 ;;
	*) return 1 ;;
	esac
}
parse_options "$@"
check_options EXISTING

load_stack
start_run

# --- 0. the machine ------------------------------------------------------------------

describe_machine
LOAD_START=$(uptime | sed 's/.*load average: //')

# --- 1. oncegate, new keys -----------------------------------------------------------

claims_run_new

# --- 2. oncegate, existing keys in state completed -----------------------------------

claims_setup_existing
claims_run_existing

# --- 3. pgbench, the bare statement ---------------------------------------------------

claims_table
claims_pgbench

# --- 4. the ceiling: the same nginx → a minimal libfcgi responder → libpq -------------

claims_ceiling
claims_table_drop

# --- 5. oncegate through PgBouncer (transaction pooling) ------------------------------

claims_pgbouncer

# --- 6. the responder's memory ----------------------------------------------------------

HWM_KB=$(hwm_kb "$FCGI_PID")
RSS_KB=$(sed -nE 's/^VmRSS:[[:space:]]+([0-9]+) kB/\1/p' "/proc/$FCGI_PID/status" 2>/dev/null || true)
[[ -n $HWM_KB ]] || { fail "oncegate-fcgi (pid $FCGI_PID) is gone"; HWM_KB=0 RSS_KB=0; }

# --- the table ----------------------------------------------------------------------------

{
	printf '%-20s %17s %7s %7s %12s %7s %7s %6s %8s\n' case 'oncegate claims/s' 'p50 ms' 'p99 ms' \
		'pgbench tps' 'p50 ms' 'p99 ms' ratio target
	for name in new existing; do
		if [[ $name == new ]]; then label='new keys' target=$TARGET_NEW
		else label='existing (terminal)' target=$TARGET_EXISTING; fi
		r=$(ratio "${RATE[$name]}" "${RATE[pg.$name]}")
		v=$(verdict "$r" '>=' "$target")
		p=$(verdict "${P99[$name]}" '<' "$TARGET_CLAIM_P99_MS")
		printf '%-20s %17s %7s %7s %12.1f %7s %7s %6s %8s  %s, p99 %s\n' "$label" "${RATE[$name]}" \
			"${P50[$name]}" "${P99[$name]}" "${RATE[pg.$name]}" "${P50[pg.$name]}" \
			"${P99[pg.$name]}" "$r" ">= $target" "$v" "$p"
	done
	printf '%-20s %17s %7s %7s %12s %7s %7s %6s %8s\n' case 'oncegate claims/s' 'p50 ms' 'p99 ms' \
		'ceiling /s' 'p50 ms' 'p99 ms' ratio target
	for name in new existing; do
		if [[ $name == new ]]; then label='new keys' target=$TARGET_CEIL_NEW p99t=$TARGET_CEIL_NEW_P99_MS
		else label='existing (terminal)' target=$TARGET_CEIL_EXISTING p99t=$TARGET_CEIL_EXISTING_P99_MS; fi
		r=$(ratio "${RATE[$name]}" "${RATE[ceil.$name]}")
		printf '%-20s %17s %7s %7s %12.1f %7s %7s %6s %8s  %s, p99 < %s ms %s\n' "$label" "${RATE[$name]}" \
			"${P50[$name]}" "${P99[$name]}" "${RATE[ceil.$name]}" "${P50[ceil.$name]}" \
			"${P99[ceil.$name]}" "$r" ">= $target" "$(verdict "$r" '>=' "$target")" "$p99t" \
			"$(verdict "${P99[$name]}" '<' "$p99t")"
	done
	for name in new existing; do
		[[ -n ${RATE[pgb.$name]:-} ]] || continue
		printf '%-20s %17s %7s %7s   (through PgBouncer; direct/pooled %s)\n' "$name, pooled" "${RATE[pgb.$name]}" \
			"${P50[pgb.$name]}" "${P99[pgb.$name]}" "$(ratio "${RATE[$name]}" "${RATE[pgb.$name]}")"
	done
	echo "(PgBouncer: ${PGB_NOTE:-not run})"
	echo "server CPU per request, µs (postgres + nginx + responder [+ pgbouncer]; ceiling cost / oncegate cost in brackets):"
	echo "  new keys: oncegate $(cost_us new), ceiling $(cost_us ceil.new) [$(ratio "$(cost_us ceil.new)" "$(cost_us new)")], pooled $(cost_us pgb.new);" \
		"duplicates: oncegate $(cost_us existing), ceiling $(cost_us ceil.existing) [$(ratio "$(cost_us ceil.existing)" "$(cost_us existing)")], pooled $(cost_us pgb.existing)"
	echo "(ceiling: new keys → tests/bench/ceiling_claim.c, the bare claim; existing → ceiling_select.c, a primary-key SELECT)"
	hwm=$(mb "$HWM_KB")
	printf '%-20s %s MB (now %s MB; target < %s MB)  %s\n' 'responder peak RSS' "$hwm" \
		"$(mb "$RSS_KB")" "$TARGET_FCGI_RSS_MB" "$(verdict "$hwm" '<' "$TARGET_FCGI_RSS_MB")"
	echo
	echo "p99 target < $TARGET_CLAIM_P99_MS ms (oncegate). CPU in the middle of each run, % of one core (machine: $((NPROC * 100))%):"
	printf '  oncegate new       %s\n' "${CPU[new]}"
	printf '  oncegate existing  %s\n' "${CPU[existing]}"
	printf '  pgbench new        %s\n' "${CPU[pg.new]}"
	printf '  pgbench existing   %s\n' "${CPU[pg.existing]}"
	printf '  ceiling new        %s   (oncegate-fcgi: the ceiling responder; nginx: its own)\n' "${CPU[ceil.new]}"
	printf '  ceiling existing   %s\n' "${CPU[ceil.existing]}"
	echo "load (uptime) at the start: $LOAD_START; at the end: $(uptime | sed 's/.*load average: //')"
	table_footer
	echo "run:      $RUN"
	echo "command:  tests/bench/claims.sh ${ARGS[*]}"
	printf '          %s\n' "${CMD[new]}" "${CMD[existing]}" "${CMD[pg.new]}" "${CMD[pg.existing]}" \
		"${CMD[ceil.new]}" "${CMD[ceil.existing]}" "${CMD[pgb.new]:-}" "${CMD[pgb.existing]:-}"
} >"$TMP/table"
finish

#!/usr/bin/env bash
# run.sh — the benchmark of issue 7: one script, one run, one table. Every
# figure of oncegate beside its baseline measured in the same run on the
# same machine (pgbench running the same SQL, or nginx alone), as a ratio
# against the targets of issues 2, 3 and 4, plus the peak RSS of each
# program.
#
#   ./dev up && tests/bench/run.sh [--seconds N] [--quick]
#
# Runs against the stack `./dev up` leaves running (.dev/env: the
# non-sanitizer build in .dev/build, PostgreSQL with fsync on), with the
# phases of claims.sh, drain.sh and approvals.sh (claims_lib.sh,
# drain_lib.sh, approvals_lib.sh), in this order:
#   1. claims, 32 connections (issue 2): wrk POST /v1/runs through the
#      stack's nginx with new keys, then with EXISTING keys already
#      `completed` (duplicates); pgbench -M prepared, 32 clients, the bare
#      claim statement of the seed for new and existing keys;
#   2. drain, 4 workers (issue 4): on a scratch database, EFFECTS due
#      effects drained by pgbench running the dispatcher's statements
#      (drain.sql), then by one oncegate-dispatch, then by four, to a
#      private nginx that answers 201 and logs each Idempotency-Key; every
#      effect it received, received once;
#   3. approvals, 16 connections (issue 3), through a private nginx (the
#      stack's config with limit_req raised): TOKENS approval links through
#      the API; wrk GET /approve/{token}; wrk GET of a static copy of one
#      card (same bytes, the page's headers) from the same nginx: the page's
#      baseline; pgbench, the consume transaction's three statements
#      (consume.sql); wrk POST /approve/{token}, each token once (last; the
#      stack's dispatcher is paused meanwhile, and sends those TOKENS
#      effects to demo_smtp after);
#   (1b. the ceiling: a private copy of the stack's nginx config in front of
#      tests/bench/ceiling_claim.c (the bare claim) and ceiling_select.c (a
#      primary-key SELECT), wrk with claims.lua as for oncegate; then
#      through PgBouncer: a second oncegate-fcgi with pooled_database behind
#      a private PgBouncer in transaction mode, new and existing keys;)
#   4. oncegatectl report (the weekly figures, read over every table the
#      run filled) under /usr/bin/time, for its peak RSS.
# Peak RSS is each process's VmHWM, read before it is stopped: the
# responder (its whole life), the dispatchers, oncegatectl, and for context
# nginx's workers (the stack's and the private ones) and PostgreSQL's
# client backends (their RSS includes the shared buffers they touched).
#
# Prints one table on stdout (progress and the tools' own output go to
# stderr): per row what was measured, oncegate's figure and p99, the
# baseline and its figure, the ratio oncegate/baseline, the target and the
# verdict; then the checks, where the CPU went in each run, the machine,
# and the exact commands.
#
# Options:
#   --seconds N      seconds of every timed run (default 30; --duration N too)
#   --quick          a smoke run: 8 s runs and smaller pools (see Time)
#   --existing N     completed keys for the duplicate runs (default 2000; quick 500)
#   --tokens N       approval links in the pool (default 2000; quick 500)
#   --pg-rows N      pending challenges pre-filled for pgbench (default 200000; quick 40000)
#   --effects N      effects in the outbox at the start of each drain phase
#                    (default 200000; quick 30000)
#   --env FILE       stack environment (default .dev/env of this checkout)
#   --strict         exit 2 when a target is missed
#
# Time: at the defaults about 10 min (587 s measured on the 2-vCPU
# development machine while other work kept it busy: 11 timed runs of 30 s
# and the approve POST, 2000 keys and 2000 links created through the API in
# 100 s and 85 s, three fills of 200,000 effects of about 40 s each); with
# --quick about 3 min there (less on a quiet machine). The ceilings and
# the run through PgBouncer add four timed runs (467 s with --quick at load
# 10-13 in all).
#
# Exit status: 0 measured, 1 a run had errors (an unexpected answer or a
# socket error, a failed pgbench transaction, rows not as expected, an
# effect sent twice or lost, a program that died) or the set-up failed, 2
# --strict and a target missed. The stack's tables keep the rows the runs
# created (keys bench:RUN:…); the scratch tables, the scratch database and
# the private nginx instances are removed at exit.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source-path=SCRIPTDIR source=claims_lib.sh
. "$HERE/claims_lib.sh"
# shellcheck source-path=SCRIPTDIR source=drain_lib.sh
. "$HERE/drain_lib.sh"
# shellcheck source-path=SCRIPTDIR source=approvals_lib.sh
. "$HERE/approvals_lib.sh"

# Each benchmark's own concurrency, as its script and its issue have it.
CLAIM_CONNS=32 DRAIN_CONNS=4 APPROVE_CONNS=16

DURATION='' CONNS=- THREADS=2 QUICK=no
EXISTING='' TOKENS='' PG_ROWS='' EFFECTS=''

bench_option() {
	case $1 in
	--seconds) DURATION=${2:?--seconds needs a number}; SHIFT=2 ;;
	--quick) QUICK=yes; SHIFT=1 ;;
	--existing) EXISTING=${2:?--existing needs a number}; SHIFT=2 ;;
	--tokens) TOKENS=${2:?--tokens needs a number}; SHIFT=2 ;;
	--pg-rows) PG_ROWS=${2:?--pg-rows needs a number}; SHIFT=2 ;;
	--effects) EFFECTS=${2:?--effects needs a number}; SHIFT=2 ;;
	*) return 1 ;;
	esac
}
parse_options "$@"
[[ $CONNS == - ]] || die "--connections: run.sh uses each benchmark's own ($CLAIM_CONNS claims, $APPROVE_CONNS approvals, $DRAIN_CONNS drain)"
if [[ $QUICK == yes ]]; then
	: "${DURATION:=8}" "${EXISTING:=500}" "${TOKENS:=500}" "${PG_ROWS:=40000}" "${EFFECTS:=30000}"
else
	: "${DURATION:=30}" "${EXISTING:=2000}" "${TOKENS:=2000}" "${PG_ROWS:=200000}" "${EFFECTS:=200000}"
fi
CONNS=$CLAIM_CONNS
check_options EXISTING TOKENS PG_ROWS EFFECTS
((DURATION >= 8)) || die "--seconds must be at least 8"
((TOKENS >= APPROVE_CONNS)) || die "--tokens must be at least $APPROVE_CONNS (every POST connection needs tokens)"
((PG_ROWS >= APPROVE_CONNS * 100)) || die "--pg-rows must be at least $((APPROVE_CONNS * 100))"
# The drain's first and last windows: 30 s, or a third of shorter runs.
WINDOW=$((DURATION / 3 < 30 ? DURATION / 3 : 30))

load_stack
command -v /usr/bin/time >/dev/null || die "/usr/bin/time is not installed (Debian package time)"
start_run
describe_machine
LOAD_START=$(uptime | sed 's/.*load average: //')

T_START=$SECONDS
declare -A PHASE_S
# phase NAME FUNCTION...: runs the FUNCTIONs and times them as NAME.
phase() {
	local name=$1 start=$SECONDS f
	shift
	for f; do $f; done
	PHASE_S[$name]=$((SECONDS - start))
}

# --- 1. claims ----------------------------------------------------------------------

CONNS=$CLAIM_CONNS
phase claims claims_run_new claims_setup_existing claims_run_existing peak_note_stack claims_table claims_pgbench \
	claims_ceiling claims_table_drop claims_pgbouncer

# --- 2. drain -----------------------------------------------------------------------

CONNS=$DRAIN_CONNS
# shellcheck disable=SC2317  # called by phase
drain_one() { drain_dispatch 1; }
# shellcheck disable=SC2317
drain_four() { drain_dispatch 4; }
phase drain drain_init drain_pgbench drain_one drain_four drain_cleanup

# --- 3. approvals --------------------------------------------------------------------

CONNS=$APPROVE_CONNS
phase approvals approvals_init approvals_start_nginx approvals_setup_tokens approvals_run_page \
	approvals_run_static peak_note_stack approvals_pgbench_consume approvals_run_decide \
	peak_note_stack approvals_stop_nginx

# --- 4. oncegatectl -------------------------------------------------------------------

CTL_ARGS=(report)
CMD[ctl]="/usr/bin/time -f %M $(show_cmd "$CTL" -c "$ONCEGATE_CONF" "${CTL_ARGS[@]}")"
say "oncegatectl: ${CMD[ctl]}"
start=$SECONDS
if /usr/bin/time -f %M -o "$TMP/ctl.time" "$CTL" -c "$ONCEGATE_CONF" "${CTL_ARGS[@]}" >"$TMP/ctl.out" 2>&1; then
	PEAK_KB[oncegatectl]=$(tail -n1 "$TMP/ctl.time")
	PEAK_N[oncegatectl]=1
else
	fail "oncegatectl ${CTL_ARGS[*]} failed: $(tail -n1 "$TMP/ctl.out")"
fi
PHASE_S[oncegatectl]=$((SECONDS - start))
peak_note_stack
running "$FCGI_PID" || fail "oncegate-fcgi (pid $FCGI_PID) is gone"
TOTAL_S=$((SECONDS - T_START))

# --- the table ----------------------------------------------------------------------------

# row WHAT FIGURE P99 BASELINE BASE_FIGURE RATIO TARGET VERDICT: figures
# with one decimal.
row() {
	local fig=$2 base=$5
	[[ $fig =~ ^[0-9]+(\.[0-9]+)?$ ]] && fig=$(printf '%.1f' "$fig")
	[[ $base =~ ^[0-9]+(\.[0-9]+)?$ ]] && base=$(printf '%.1f' "$base")
	printf '%-34s %9s %7s  %-36s %9s %6s  %-24s %s\n' "$1" "$fig" "$3" "$4" "$base" "${@:6}"
}

# claim_row LABEL NAME TARGET: a claim row, the ratio and p99 against their targets.
claim_row() {
	local r
	r=$(ratio "${RATE[$2]}" "${RATE[pg.$2]}")
	row "$1" "${RATE[$2]}" "${P99[$2]}" "pgbench, bare claim (${2} keys)" "${RATE[pg.$2]}" "$r" \
		">= $3; p99 < $TARGET_CLAIM_P99_MS ms" \
		"$(verdict "$r" '>=' "$3"); p99 $(verdict "${P99[$2]}" '<' "$TARGET_CLAIM_P99_MS")"
}

# ceil_row LABEL NAME WHAT TARGET P99_TARGET: a claim row against the ceiling
# responder's run ceil.NAME.
ceil_row() {
	local r
	r=$(ratio "${RATE[$2]}" "${RATE[ceil.$2]}")
	row "$1" "${RATE[$2]}" "${P99[$2]}" "ceiling: $3" "${RATE[ceil.$2]}" "$r" \
		">= $4; p99 < $5 ms" "$(verdict "$r" '>=' "$4"); p99 $(verdict "${P99[$2]}" '<' "$5")"
}

# peak_row LABEL GROUP [TARGET VERDICT]: a peak RSS row (MB).
peak_row() {
	local kb=${PEAK_KB[$2]:-} n=${PEAK_N[$2]:-0} what
	if [[ -z $kb ]]; then
		row "$1" n/a - - - - "${3:--}" "${4:-}"
		return 0
	fi
	what="largest of $n"
	((n == 1)) && what="one process"
	row "$1" "$(mb "$kb") MB" - "($what)" - - "${3:--}" "${4:-}"
}

{
	echo "oncegate benchmark, run $RUN: ${DURATION} s per timed run; concurrency: claims $CLAIM_CONNS, approvals $APPROVE_CONNS, drain $DRAIN_CONNS"
	echo
	row what oncegate 'p99 ms' baseline baseline ratio target verdict
	claim_row 'claims/s, new keys' new "$TARGET_NEW"
	claim_row 'claims/s, duplicates (completed)' existing "$TARGET_EXISTING"
	ceil_row 'claims/s, new keys' new 'bare claim statement' "$TARGET_CEIL_NEW" "$TARGET_CEIL_NEW_P99_MS"
	ceil_row 'claims/s, duplicates (completed)' existing 'primary-key SELECT' \
		"$TARGET_CEIL_EXISTING" "$TARGET_CEIL_EXISTING_P99_MS"
	for name in new existing; do
		label='claims/s, new keys'
		[[ $name == existing ]] && label='claims/s, duplicates (completed)'
		row "${label/claims/pooled}" "${RATE[pgb.$name]:-n/a}" "${P99[pgb.$name]:--}" \
			"through PgBouncer; base: direct" "${RATE[$name]}" "$(ratio "${RATE[pgb.$name]:-0}" "${RATE[$name]}")" - ''
	done
	row 'approval page GET/s' "${RATE[page]}" "${P99[page]}" "nginx alone, static card (${STATIC_BYTES:-?} B)" \
		"${RATE[static]}" "$(ratio "${RATE[page]}" "${RATE[static]}")" "p99 < $TARGET_PAGE_P99_MS ms" \
		"p99 $(verdict "${P99[page]}" '<' "$TARGET_PAGE_P99_MS")"
	r=$(ratio "${RATE[decide]}" "${RATE[pg.consume]}")
	row 'approve POST (consume)/s' "${RATE[decide]}" "${P99[decide]}" 'pgbench, consume transaction' \
		"${RATE[pg.consume]}" "$r" ">= $TARGET_CONSUME (cost <= ${TARGET_COST}x)" "$(verdict "$r" '>=' "$TARGET_CONSUME")"
	r=$(ratio "${MEAN[drain.1]}" "${MEAN[drain.pg]}")
	row 'drain effects/s, 1 dispatcher' "${MEAN[drain.1]}" - "pgbench, dispatcher's statements" \
		"${MEAN[drain.pg]}" "$r" ">= $TARGET_DRAIN" "$(verdict "$r" '>=' "$TARGET_DRAIN")"
	row 'drain effects/s, 4 dispatchers' "${MEAN[drain.4]}" - "pgbench, dispatcher's statements" \
		"${MEAN[drain.pg]}" "$(ratio "${MEAN[drain.4]}" "${MEAN[drain.pg]}")" - ''
	hwm=$(mb "${PEAK_KB[oncegate-fcgi]:-0}")
	peak_row 'peak RSS oncegate-fcgi' oncegate-fcgi "< $TARGET_FCGI_RSS_MB MB" "$(verdict "$hwm" '<' "$TARGET_FCGI_RSS_MB")"
	if ((DURATION >= 20)); then
		# Flat: grown by less than 10% between 10 s in and the end, in
		# each drain phase (its dispatchers together).
		grew='' v=ok
		for name in drain.1 drain.4; do
			g=$((RSS_END[$name] - RSS_WARM[$name]))
			grew+=${grew:+/}+$g
			[[ $(verdict "$g" '<' $((RSS_WARM[$name] / 10 + 1))) == ok ]] || v=MISS
		done
		peak_row 'peak RSS oncegate-dispatch' oncegate-dispatch "flat ($grew kB)" "$v"
	else
		peak_row 'peak RSS oncegate-dispatch' oncegate-dispatch 'flat (runs of 20 s+)' ''
	fi
	peak_row "peak RSS oncegatectl ${CTL_ARGS[*]}" oncegatectl
	peak_row 'peak RSS oncegate-fcgi, pooled' oncegate-fcgi-pgbouncer
	peak_row 'peak RSS ceiling responder (ctx)' ceiling
	peak_row 'peak RSS nginx worker (context)' nginx-worker
	peak_row 'peak RSS PostgreSQL backend (ctx)' pg-backend

	echo
	echo "Ceiling: the stack's nginx config (a private copy, its upstream the ceiling's socket) → tests/bench/ceiling_claim.c or"
	echo "  ceiling_select.c (libfcgi, 8 threads, one libpq connection each, one prepared statement per request) → PostgreSQL;"
	echo "  its p50/p99 ms: bare claim ${P50[ceil.new]:-?}/${P99[ceil.new]:-?}, primary-key SELECT ${P50[ceil.existing]:-?}/${P99[ceil.existing]:-?};"
	echo "  oncegate's p50 ms: new ${P50[new]:-?}, duplicates ${P50[existing]:-?}. Load (uptime) at the start: $LOAD_START; at the end: $(uptime | sed 's/.*load average: //')."
	echo "Pooled: ${PGB_NOTE:-not run}."
	echo "Server CPU per request, µs (postgres + nginx + responder [+ pgbouncer]; ceiling cost / oncegate cost in brackets, steadier than"
	echo "  the rate ratio on a busy machine): new keys: oncegate $(cost_us new), ceiling $(cost_us ceil.new) [$(ratio "$(cost_us ceil.new)" "$(cost_us new)")], pooled $(cost_us pgb.new);" \
		"duplicates: oncegate $(cost_us existing), ceiling $(cost_us ceil.existing) [$(ratio "$(cost_us ceil.existing)" "$(cost_us existing)")], pooled $(cost_us pgb.existing)."
	echo "Rates are per second over each timed run; the approve POST: answers / (first request .. last answer), $TOKENS tokens once each."
	echo "Ratio = oncegate / baseline. The consume costs $(awk -v a="${RATE[decide]}" -v b="${RATE[pg.consume]}" \
		'BEGIN { if (a > 0) printf "%.2f", b / a; else print "inf" }')x the bare statements (target <= ${TARGET_COST}x)."
	echo "Drain, first/last ${WINDOW} s (effects/s): pgbench ${FIRST[drain.pg]}/${LAST[drain.pg]}, 1 dispatcher ${FIRST[drain.1]}/${LAST[drain.1]}, 4 dispatchers ${FIRST[drain.4]}/${LAST[drain.4]}$( ((DURATION >= 40)) || echo " (sustained rate: tests/bench/drain.sh, 120 s runs)")."
	echo "Peak RSS: VmHWM, read before each process stopped; oncegate-fcgi's covers its whole life (since ./dev up); a PostgreSQL"
	echo "backend's includes the shared buffers it touched; nginx: the stack's workers and the private ones."
	echo "checks:"
	echo "  page GET:     ${CHECK[page]:-not run}"
	echo "  approve POST: ${CHECK[decide]:-not run}"
	echo "  pgbench:      ${CHECK[pg.consume]:-not run}"
	for name in drain.1 drain.4; do
		echo "  $name:      the sink received ${SENT[$name]:-?} requests for ${DONE_DB[$name]:-?} completed effects, ${DUPS[$name]:-?} keys twice"
	done
	echo
	echo "CPU in the middle of each run, % of one core (machine: $((NPROC * 100))%):"
	for name in new existing pg.new pg.existing ceil.new ceil.existing pgb.new pgb.existing page static pg.consume decide; do
		printf '  %-13s %s\n' "$name" "${CPU[$name]:-n/a}"
	done
	table_footer
	echo "          RAM $(awk '/^MemTotal:/ { printf "%.1f GB", $2 / 1048576 }' /proc/meminfo); $(nginx -v 2>&1 | sed 's/^nginx version: //'); $("$PGBENCH" --version); oncegate $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '(not a git checkout)')"
	echo "nginx:    claims through the stack's nginx; approvals through $NGINX_NOTE"
	echo "time:     ${TOTAL_S} s (claims ${PHASE_S[claims]} s, drain ${PHASE_S[drain]} s, approvals ${PHASE_S[approvals]} s, oncegatectl ${PHASE_S[oncegatectl]} s)"
	echo "command:  tests/bench/run.sh${ARGS[*]:+ ${ARGS[*]}}"
	for name in new existing pg.new pg.existing ceil.new ceil.existing pgb.new pgb.existing drain.pg drain.1 drain.4 page static pg.consume decide ctl; do
		printf '  %-12s %s\n' "$name" "${CMD[$name]:-not run}"
	done
} >"$TMP/table"
finish

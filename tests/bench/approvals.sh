#!/usr/bin/env bash
# approvals.sh — the approval-gate benchmark of issue 3: the approval page and
# the approve POST through nginx, and the consume transaction against the
# same three statements run by pgbench, in one run on one machine.
#
#   ./dev up && tests/bench/approvals.sh [--duration S] [--tokens N]
#
# Runs against the stack `./dev up` leaves running (.dev/env):
#   1. set-up: TOKENS fresh approval links through the API: for each, a new
#      key (POST /v1/runs) and a valid output for contract support_reply
#      (POST /v1/runs/{key}/output, effect email.send to demo_smtp), which
#      waits for group:support; the raw tokens go to a mode-600 file in a
#      private temporary directory, never to the terminal or a command line;
#   2. wrk: GET /approve/{token} round-robin over the pool for DURATION
#      seconds as a member of group support (X-Dev-User / X-Dev-Groups, the
#      local stand-in for SSO); every answer must be 200 with the card.
#      psql then checks that the GETs changed nothing;
#   3. with --private-nginx, the page's baseline: wrk, the same for a static
#      copy of one card (its CSRF value blanked, same size) that the private
#      nginx serves itself, with the page's headers: what nginx alone costs
#      for that answer;
#   4. pgbench -M prepared for DURATION seconds: the same three statements
#      as the consume in one transaction (tests/bench/consume.sql: consume
#      the challenge, move the run with its timeline row, enqueue the effect
#      with pg_notify) on scratch copies of the tables (bench_runs,
#      bench_run_events, bench_approvals, bench_outbox: LIKE … INCLUDING ALL
#      plus the same foreign keys) pre-filled with PG_ROWS pending
#      challenges; each client consumes its own rows, and a transaction that
#      finds nothing fails. psql checks the rows it changed; the tables are
#      dropped at the end;
#   5. the CSRF value of every card (one GET each, not timed), then wrk:
#      POST /approve/{token} decision=approve for every token exactly once
#      (one wrk thread per connection; each thread stops after its share);
#      every answer must be 303. psql then checks that TOKENS runs are
#      approved, their challenges decided, with one effect_outbox row each.
#      Last, because the stack's dispatcher then sends those TOKENS effects
#      to demo_smtp: no other run competes with it.
# The phases are in tests/bench/approvals_lib.sh (tests/bench/run.sh runs
# them too).
# The same concurrency (--connections) for wrk and pgbench. Prints one table
# on stdout (progress and the tools' own output go to stderr): requests/s,
# p50/p99, the consume ratio oncegate/pgbench against the targets, the CPU
# each side used during each run, the machine and the exact commands.
#
# The local nginx limits approval POSTs per client address (limit_req zone
# oncegate_approve); from the one address of the benchmark, the POST run
# would mostly be answered 429. When the stack's nginx allows less than
# 10000 POSTs/s there, the script stops before the set-up unless
# --private-nginx is given: it then starts a second nginx from the stack's
# rendered config, differing only in its port, the files it writes and its
# limit_req rates and bursts (raised) and a location for the static card, in
# front of the same responder, sends the page, static and POST runs through
# it, and stops it at the end.
#
# Options:
#   --duration S      seconds of the page run and of the pgbench run (default 20)
#   --connections N   wrk connections = pgbench clients (default 16)
#   --threads N       wrk threads of the page run = pgbench threads (default 2)
#   --tokens N        approval links in the pool (default 2000)
#   --pg-rows N       pending challenges pre-filled for pgbench (default 200000)
#   --private-nginx   run the page runs through a private nginx (see above)
#   --env FILE        stack environment (default .dev/env of this checkout)
#   --strict          exit 2 when a target is missed
#
# Exit status: 0 measured, 1 a run had errors (an unexpected answer, a socket
# error, a failed or aborted pgbench transaction, rows not as expected) or
# the set-up failed, 2 --strict and a target missed. Keys are
# bench:RUN:appr:N, RUN unique per invocation; the product's tables keep the
# runs, challenges and outbox rows the benchmark created (email.send effects
# to demo_smtp, which the stack's dispatcher sends when its kill switch is
# on).
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source-path=SCRIPTDIR source=approvals_lib.sh
. "$HERE/approvals_lib.sh"

DURATION=20 CONNS=16 THREADS=2 TOKENS=2000 PG_ROWS=200000 PRIVATE_NGINX=no

bench_option() {
	case $1 in
	--tokens) TOKENS=${2:?--tokens needs a number}; SHIFT=2 ;;
	--pg-rows) PG_ROWS=${2:?--pg-rows needs a number}; SHIFT=2 ;;
	--private-nginx) PRIVATE_NGINX=yes; SHIFT=1 ;;
	*) return 1 ;;
	esac
}
parse_options "$@"
check_options TOKENS PG_ROWS
((TOKENS >= CONNS)) || die "--tokens must be at least --connections (every POST connection needs tokens)"
((PG_ROWS >= CONNS * 100)) || die "--pg-rows must be at least 100 per connection"

# --- the stack -------------------------------------------------------------------

load_stack
start_run
approvals_init

POST_LIMIT=$(post_limit)
if [[ $PRIVATE_NGINX == no && -n $POST_LIMIT ]] && ((POST_LIMIT < MIN_POST_RATE)); then
	die "the stack's nginx allows $POST_LIMIT approval POSTs/s per address (limit_req zone
  oncegate_approve in $NGINX_CONF): the POST run would be answered 429.
  Raise that limit in nginx/oncegate-local.conf.in (as the API's, which the
  benchmark must not measure), or run with --private-nginx."
fi
[[ $PRIVATE_NGINX == yes ]] && approvals_start_nginx

# --- 0. the machine ------------------------------------------------------------------

describe_machine

# --- 1. the pool of approval links ---------------------------------------------------

approvals_setup_tokens

# --- 2. the approval page, and the same bytes from nginx alone ------------------------------

approvals_run_page
[[ $PRIVATE_NGINX == yes ]] && approvals_run_static

# --- 3. pgbench, the bare consume transaction -----------------------------------------------

approvals_pgbench_consume

# --- 4. the approve POST --------------------------------------------------------------------

approvals_run_decide

# --- the table ----------------------------------------------------------------------------

{
	RATIO=$(ratio "${RATE[decide]}" "${RATE[pg.consume]}")
	COST=$(awk -v a="${RATE[decide]}" -v b="${RATE[pg.consume]}" 'BEGIN { if (a > 0) printf "%.2f", b / a; else print "inf" }')
	printf '%-24s %10s %7s %7s %12s %6s  %-28s %s\n' case 'per second' 'p50 ms' 'p99 ms' \
		baseline ratio target verdict
	if [[ -n ${RATE[static]:-} ]]; then base=${RATE[static]} r=$(ratio "${RATE[page]}" "${RATE[static]}")
	else base=- r=-; fi
	printf '%-24s %10s %7s %7s %12s %6s  %-28s %s\n' 'approval page (GET)' "${RATE[page]}" \
		"${P50[page]}" "${P99[page]}" "$base" "$r" "p99 < $TARGET_PAGE_P99_MS ms" \
		"$(verdict "${P99[page]}" '<' "$TARGET_PAGE_P99_MS")"
	printf '%-24s %10s %7s %7s %12.1f %6s  %-28s %s\n' 'approve (POST, consume)' "${RATE[decide]}" \
		"${P50[decide]}" "${P99[decide]}" "${RATE[pg.consume]}" "$RATIO" \
		">= $TARGET_CONSUME (cost <= ${TARGET_COST}x)" "$(verdict "$RATIO" '>=' "$TARGET_CONSUME")"
	if [[ -n ${RATE[static]:-} ]]; then
		printf '%-24s %10s %7s %7s %12s %6s  %s\n' 'nginx, static card' "${RATE[static]}" \
			"${P50[static]}" "${P99[static]}" '-' '-' "the page's baseline ($STATIC_BYTES bytes)"
	fi
	printf '%-24s %10.1f %7s %7s %12s %6s  %s\n' 'pgbench consume (bare)' "${RATE[pg.consume]}" \
		"${P50[pg.consume]}" "${P99[pg.consume]}" '-' '-' "the POST's baseline"
	echo
	echo "consume cost: oncegate's POST costs ${COST}x the three bare statements (target <= ${TARGET_COST}x)."
	echo "approve POST: $TOKENS tokens, each POSTed once; rate = answers / (first request .. last answer)."
	echo "checks: page:   ${CHECK[page]:-not run}"
	echo "        POST:   ${CHECK[decide]:-not run}"
	echo "        pgbench: ${CHECK[pg.consume]:-not run}"
	echo
	echo "CPU during each run, % of one core (machine: $((NPROC * 100))%):"
	printf '  page GET        %s\n' "${CPU[page]:-n/a}"
	[[ -n ${CPU[static]:-} ]] && printf '  static card     %s\n' "${CPU[static]}"
	printf '  approve POST    %s\n' "${CPU[decide]:-n/a}"
	printf '  pgbench consume %s\n' "${CPU[pg.consume]:-n/a}"
	echo "  (page and pgbench: the middle of the run; POST: from 0.3 s in until the first wrk thread ran out of tokens)"
	table_footer
	echo "nginx:    $NGINX_NOTE"
	echo "run:      $RUN ($TOKENS links created through the API in $SETUP_S s; pgbench: $PG_FILLED pre-filled rows)"
	echo "command:  tests/bench/approvals.sh ${ARGS[*]}"
	printf '          %s\n' "${CMD[page]}" ${CMD[static]:+"${CMD[static]}"} "${CMD[pg.consume]}" "${CMD[decide]}"
} >"$TMP/table"
finish

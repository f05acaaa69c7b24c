# shellcheck shell=bash
# tests/run.sh — the stages of ./dev test, in order, as one table.
#
# Sourced by ./dev (cmd_test), which builds with sanitizers, starts the
# throwaway test stack, exports its environment and then calls run_stages;
# the stages use dev's helpers (say, cmd_fuzz, fcgi_stop) and its variables
# (ROOT, DEV_DIR, BUILD, STATE). Every stage runs even when an earlier one
# failed. A failed stage prints its message;
# the exit status is 1 when any stage failed (make check's own status when
# only it failed), 0 otherwise. At the end a table gives each stage's
# duration, to keep ./dev test within its time budget.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	printf 'tests/run.sh: run it through ./dev test (it needs the test stack)\n' >&2
	exit 2
fi

# test_summary MARKER: one closing line counting the Check tests of this run
# (automake keeps Check's own summaries in the .log files). A program that
# failed without a Check summary, or despite one (a crash at exit, a leak),
# counts as one failure; a skipped program as one skip.
test_summary() {
	local trs result c f e own passed=0 failed=0 skipped=0 summaries
	while IFS= read -r -d '' trs; do
		result=$(sed -n 's/^:test-result: //p' "$trs" | head -n1)
		summaries=$(sed -nE 's/^[0-9]+%: Checks: ([0-9]+), Failures: ([0-9]+), Errors: ([0-9]+).*/\1 \2 \3/p' \
			"${trs%.trs}.log")
		own=0
		if [[ -n $summaries ]]; then
			while read -r c f e; do
				passed=$((passed + c - f - e))
				own=$((own + f + e))
			done <<<"$summaries"
		fi
		failed=$((failed + own))
		case $result in
		PASS | XFAIL) [[ -n $summaries ]] || passed=$((passed + 1)) ;;
		SKIP) skipped=$((skipped + 1)) ;;
		*) if [[ $own -eq 0 ]]; then failed=$((failed + 1)); fi ;;
		esac
	done < <(find "$BUILD" -name '*.trs' -newer "$1" -print0)
	printf 'tests: %d passed, %d failed, %d skipped\n' "$passed" "$failed" "$skipped"
}

# Every Check suite under make check: the integration suites in two lanes,
# one on the test stack and one on lane B's, each lane's suites one after
# another; the unit suites in a third lane (Makefile.am). make check would
# build all ~40 suite programs before the first suite; here check-TESTS
# runs with check_PROGRAMS emptied, so each program is built when its log
# is due, and the first suites of the lanes run (waiting on the clock, most
# of the time) while the later programs are compiled: -j5 is a suite of each
# lane and two compilers. The background builds (below) start with it. Then
# each suite's start and duration, and the pass/fail/skip counts. Every API
# answer the suites receive is recorded for run_openapi_answers.
run_make_check() {
	local status=0
	export ONCEGATE_API_RECORD=$STATE/api-answers.jsonl
	rm -f "$ONCEGATE_API_RECORD"
	bg_build_start plain
	bg_build_start upgrade
	make -C "$BUILD" -j5 check-TESTS check_PROGRAMS= check_LTLIBRARIES= VERBOSE=1 || status=$?
	suite_durations "$RUN_MARKER"
	test_summary "$RUN_MARKER"
	return "$status"
}

# suite_durations MARKER: each suite of this run (a NAME.started newer than
# MARKER, written as it started: Makefile.am), in the order they started:
# when, in seconds after MARKER, and how long it ran (to its .trs).
suite_durations() {
	local f t0 start end
	t0=$(stat -c %Y "$1")
	say "suites (started after make check's start, duration):"
	while IFS= read -r -d '' f; do
		start=$(<"$f")
		end=$(stat -c %Y "${f%.started}.trs" 2>/dev/null) || end=$start
		printf '%d %s\n' "$start" "$(printf '  %-28s +%4ds %5ds' "$(basename "${f%.started}")" \
			$((start - t0)) $((end - start)))"
	done < <(find "$BUILD/tests" -name '*.started' -newer "$1" -print0) | sort -n | cut -d' ' -f2- >&2
}

# The OpenAPI document passes a real linter (Redocly, strict), and every
# answer make check received is what the document says (ajv).
run_openapi_lint() { bash "$ROOT/tests/openapi/check.sh" lint; }
run_openapi_answers() { bash "$ROOT/tests/openapi/check.sh" validate "$STATE/api-answers.jsonl"; }

# Each converted table has exactly one file with its SQL.
run_owners() { bash "$ROOT/tests/owners.sh"; }

# The shape of src/: no include or call cycle, no function over 120 lines,
# no backward goto, no provider kind named outside its file, leaf headers.
run_structure() { bash "$ROOT/tests/structure.sh"; }

# Every statement of every module prepares against the migrated schema.
run_statements() { bash "$ROOT/tests/statements.sh"; }

# Every parser under libFuzzer for a few seconds each, so a regression is
# caught in CI (./dev fuzz SECONDS for a real run).
run_fuzz() { (cmd_fuzz --short); }

# The payload hash an n8n Code node computes with a stock RFC 8785 library
# (npm canonicalize) is the one oncegate stores, claimed through nginx.
run_jcs() { bash "$ROOT/tests/jcs/run.sh"; }

# The MCP gateway (/v1/mcp) driven by the official TypeScript SDK client
# and the official conformance suite (npm), through nginx, sending to
# loopback providers.
run_mcp() { bash "$ROOT/tests/mcp/run.sh"; }

# The n8n node's own tests (canned answers, no n8n) and n8n's lint of it;
# ./dev test-n8n runs it in a real n8n.
run_n8n_node() { bash "$ROOT/tests/n8n/node_unit.sh"; }

# Every suite that drives the browser installs its tooling itself (so
# ./dev test-n8n runs alone from a fresh clone): proved on a fresh copy.
run_browser_tooling() { bash "$ROOT/tests/browser/check_ensure.sh"; }

# The approval page in a real browser (headless Chromium), while the stack
# is still up. 77 (skipped) is a failure here too.
run_browser() { ONCEGATE_ARTIFACTS=$DEV_DIR/artifacts bash "$ROOT/tests/browser/run.sh"; }
# The context an approver reads (the customer's message, the ticket's
# subject) on the card and in the inbox, two tenants, in Chromium.
run_browser_context() { ONCEGATE_ARTIFACTS=$DEV_DIR/artifacts bash "$ROOT/tests/browser/context.sh"; }

# Who may reach the stack: no other local user gets into its database or
# reads its secrets.
run_local_access() { bash "$ROOT/tests/identity/local_access.sh"; }

# The production nginx site in front of this responder, with an SSO
# stand-in: approval tokens never reach the SSO, nor the access log.
run_prod_nginx() { bash "$ROOT/tests/identity/prod_nginx.sh"; }

# The dispatcher killed with SIGKILL at random points while it drains a
# provider without idempotency keys: nothing twice, nothing lost (./dev
# chaos for the full run).
run_kill9() { bash "$ROOT/tests/chaos/kill9.sh" --effects 200 --kills 10; }
run_pg_restart() { bash "$ROOT/tests/chaos/pg_restart.sh" --clients 4 --down 2; }
run_pg_terminate() { bash "$ROOT/tests/chaos/pg_restart.sh" --clients 4 --down 2 --terminate; }
# The same through PgBouncer in transaction mode (a second responder with
# pooled_database): PostgreSQL stopped behind the pooler.
run_pg_restart_pooled() {
	ONCEGATE_FCGI=$BUILD/oncegate-fcgi bash "$ROOT/tests/chaos/pg_restart.sh" --clients 4 --down 2 --pooled
}
run_skew() { bash "$ROOT/tests/chaos/skew.sh"; }
run_log_full() { bash "$ROOT/tests/chaos/log_full.sh" --claims 20; }
run_multihost() { ONCEGATE_FCGI=$BUILD/oncegate-fcgi bash "$ROOT/tests/chaos/multihost.sh" --short; }
# PostgreSQL failover as sites run it (Patroni, etcd, two nodes,
# synchronous_mode; oncegate on the multi-host conninfo): the primary
# killed, the standby promoted, and back (./dev chaos: four failovers).
run_failover() { ONCEGATE_FCGI=$BUILD/oncegate-fcgi bash "$ROOT/tests/chaos/failover.sh" --short; }

# From the tree to a server (tests/install): make install under another
# prefix and DESTDIR (every path derived from configure), --version, the
# example config against the config table and config check, mandoc -Tlint,
# systemd-analyze verify and security, logrotate; then the daemons as their
# units run them: socket activation (fd 3) behind nginx, sd_notify
# readiness/watchdog/reload, the same SIGHUP reload in both, log reopen.
run_install() { bash "$ROOT/tests/install/install.sh"; }
run_daemons() { bash "$ROOT/tests/install/daemons.sh"; }
# Without systemd: both daemons started as root with the documented
# commands, binding and switching to their user, a request through nginx,
# a send, the log reopened, a broken contract on SIGHUP kept and reported.
run_foreground() { bash "$ROOT/tests/install/foreground.sh"; }

# Observability: the shipped Prometheus rules load and pass their unit
# tests (promtool, from Debian's prometheus package), and the dispatcher
# restarted during a pending backoff keeps the budget and the due time and
# sends once (./dev chaos runs it with more restarts).
run_promtool() {
	promtool check rules "$ROOT/contrib/prometheus/oncegate.rules.yml" &&
		(cd "$ROOT/contrib/prometheus" && promtool test rules oncegate.rules.test.yml) &&
		bash "$ROOT/tests/runbook.sh" "$BUILD/oncegatectl"
}
run_backoff_restart() { bash "$ROOT/tests/chaos/backoff_restart.sh" --restarts 1; }

# Dead letters replayed after the contract changed ask for a new draft and
# send nothing of the old output (./dev chaos: 60 runs).
run_replay_contract() { bash "$ROOT/tests/chaos/replay_contract.sh" --runs 6; }

# The previous release upgraded to this tree with claims and sends
# running: the window answered 503 with Retry-After, nothing lost or sent
# twice (the previous release is built once, under .dev/).
run_upgrade() {
	bg_build_wait upgrade || { say "upgrade: the previous release did not build"; return 1; }
	bash "$ROOT/tests/upgrade/run.sh"
}

# plain_build DIR: oncegate-fcgi and oncegate-dispatch, built without
# sanitizers (valgrind cannot run a sanitized program) in DIR.
plain_build() {
	local dir=$1
	mkdir -p "$dir"
	if [[ ! -f $dir/Makefile ]]; then
		(cd "$dir" && "$ROOT/configure" --enable-werror CFLAGS="-O1 -g") >"$dir/configure.out" 2>&1 ||
			{ tail -n 20 "$dir/configure.out" >&2; return 1; }
	fi
	make -C "$dir" -j2 oncegate-fcgi oncegate-dispatch >"$dir/make.out" 2>&1 ||
		{ tail -n 40 "$dir/make.out" >&2; return 1; }
}

# Builds started with make check, whose suites mostly wait on the clock:
# plain, the soak's two programs without sanitizers (plain_build), and
# upgrade, the previous release the upgrade stage starts from
# (tests/upgrade/run.sh --build). Each runs at a low CPU priority (nice 15:
# it takes what the suites leave idle, before the build lane at 19, since
# the soak and the upgrade wait for it), its output in STATE/bg-NAME.log and
# its exit status in STATE/bg-NAME.status. bg_build_wait NAME waits for one
# from any lane (polling: a lane is not its parent) and gives its status;
# one never started is built there and then. bg_builds_stop ends those
# still running, by PID, when the run stops first.
declare -A BG_PID=()
bg_build_run() {
	case $1 in
	plain) plain_build "$DEV_DIR/build-test-plain" ;;
	upgrade) bash "$ROOT/tests/upgrade/run.sh" --build ;;
	esac
}
bg_build_start() {
	rm -f "$STATE/bg-$1.status"
	(
		renice -n 15 -p "$BASHPID" >/dev/null
		status=0
		bg_build_run "$1" || status=$?
		echo "$status" >"$STATE/bg-$1.status"
	) >"$STATE/bg-$1.log" 2>&1 </dev/null 9>&- &
	BG_PID[$1]=$!
}
bg_build_wait() {
	local pid=${BG_PID[$1]:-}
	if [[ -z $pid ]]; then
		bg_build_run "$1"
		return
	fi
	while [[ ! -f $STATE/bg-$1.status ]] && kill -0 "$pid" 2>/dev/null; do sleep 1; done
	[[ -f $STATE/bg-$1.status ]] || { cat "$STATE/bg-$1.log" >&2; return 1; }
	[[ $(<"$STATE/bg-$1.status") -eq 0 ]] || { cat "$STATE/bg-$1.log" >&2; return 1; }
}
bg_builds_stop() { jobs_stop BG_PID; }

# jobs_stop ARRAY: TERM to each job of ARRAY (an associative array, name →
# PID) and every process below it, by PID; the array is left empty.
jobs_stop() {
	local -n jobs=$1
	local j
	for j in "${!jobs[@]}"; do
		kill_tree "${jobs[$j]}"
		wait "${jobs[$j]}" 2>/dev/null || true
		unset "jobs[$j]"
	done
}

# The responder and the dispatcher under valgrind for a minute of mixed
# load (./dev soak for the 30-minute run). valgrind needs a build without
# sanitizers: the two programs, built beside this one (bg_build_start
# plain). It runs in the lane on lane B's stack (its PostgreSQL,
# configuration and API key), which nothing else uses once make check is
# over. Reports its own failures (there are three kinds).
run_soak() (
	local status=0
	if ! bg_build_wait plain; then
		say "the build without sanitizers for valgrind failed"
		return 1
	fi
	export ONCEGATE_VG_FCGI=$DEV_DIR/build-test-plain/oncegate-fcgi \
		ONCEGATE_VG_DISPATCH=$DEV_DIR/build-test-plain/oncegate-dispatch
	bash "$ROOT/tests/soak/soak.sh" --seconds 60 || {
		say "soak: valgrind found errors or leaks, or an effect was doubled or lost"
		status=1
	}
	bash "$ROOT/tests/soak/soak.sh" --seconds 60 --native || {
		say "soak: RSS grew after warm-up, or an effect was doubled or lost"
		status=1
	}
	return "$status"
)

# The integration suites skip without the stack; here nothing may skip.
run_no_skips() {
	local skipped
	skipped=$(find "$BUILD" -name '*.trs' -newer "$RUN_MARKER" \
		-exec grep -l ':test-result: SKIP' {} + || true)
	[[ -z $skipped ]] && return 0
	say "skipped under ./dev test (the stack was up):"
	printf '  %s\n' "$skipped" >&2
	return 1
}

# The responders of both stacks ran under ASan/UBSan the whole time: leaks
# are reported at exit, so stop them now and read their stderr (lane B's
# stack served the soak and the browser after make check).
run_sanitizers() {
	local status=0
	lane_b_stop || status=1
	fcgi_stop
	! sanitizer_findings "$STATE/fcgi.stderr" || status=1
	return "$status"
}

# The lanes running beside the main one (name → PID), and lanes_stop, which
# ./dev test's exit ends them with when the run stops before they ended:
# TERM to each lane and every process below it, by PID.
declare -A LANE_PID=()
lanes_stop() { jobs_stop LANE_PID; }

# run_stages: every stage of the table, then the duration table and the
# verdict; exits with the status described at the top.
#
# The stages run in table order on the main lane, except those of a lane
# beside it (lanes below): a lane is a background job, started when the main
# lane has passed the stage it waits for, that runs its stages one after
# another; all lanes are waited for before the closing checks (no_skips,
# sanitizers). A lane's output goes to a file and is printed whole when it
# is waited for, so no two stages' lines mix. Its stages must not need
# what a main-lane stage changes meanwhile: they bring stacks of their own
# (failover's Patroni cluster, upgrade's database), use no stack at all, or
# start after the last stage that stops the test stack's PostgreSQL
# (multihost). On two cores the main lane's chaos scenarios mostly wait on
# clocks and sockets, which leaves room for a build or a fuzzer beside them.
run_stages() {
	# One row per stage: function | heading said before it (none when empty)
	# | message said when it fails (none when empty: the stage reports
	# itself; make check's failure keeps make's exit status).
	local -a table=(
		"run_make_check|make check in $BUILD|"
		"run_openapi_lint|OpenAPI document (tests/openapi/check.sh lint)|the OpenAPI document fails the linter"
		"run_openapi_answers|API answers against the OpenAPI document (tests/openapi/check.sh validate)|an API answer is not what the OpenAPI document says"
		"run_owners|table owners (tests/owners.sh)|a table is written outside its owner module"
		"run_structure|code structure (tests/structure.sh)|a cycle, a function over 120 lines, a backward goto, a provider kind named outside its file, rows in a use case or a state name outside its owner"
		"run_statements|SQL statements against the schema (tests/statements.sh)|a statement does not prepare against the migrated schema"
		"run_fuzz|fuzzing (./dev fuzz --short)|fuzzing found something (see .dev/fuzz/crashes)"
		"run_jcs|RFC 8785 payload hash from JavaScript (tests/jcs/run.sh)|the payload hash oncegate stores differs from the one a JCS library computes"
		"run_mcp|MCP gateway: SDK client and conformance suite (tests/mcp/run.sh)|the MCP gateway failed its SDK client or conformance checks"
		"run_n8n_node|n8n node: unit tests and lint (tests/n8n/node_unit.sh)|the n8n node's unit tests or n8n's lint of it failed"
		"run_browser_tooling|browser tooling (tests/browser/check_ensure.sh)|a suite runs the browser scripts without ensuring their tooling"
		"run_browser|browser test (tests/browser/run.sh)|browser test failed"
		"run_browser_context|browser: the approver's context (tests/browser/context.sh)|the card or the inbox does not show the context, or showed it as markup"
		"run_local_access|local access (tests/identity/local_access.sh)|local access: another local user can reach the database or read a secret"
		"run_prod_nginx|production nginx with SSO (tests/identity/prod_nginx.sh)|production nginx: a token left the gate, or sign-in did not lead back to the page"
		"run_kill9|chaos, short form (tests/chaos/kill9.sh --effects 200 --kills 10)|chaos: an effect was sent twice or lost"
		"run_pg_restart|chaos, short form (tests/chaos/pg_restart.sh)|chaos: a claim was lost, doubled, or answered other than 200/201/503"
		"run_pg_terminate||chaos: a terminated connection lost, doubled or failed a claim"
		"run_pg_restart_pooled||chaos: through PgBouncer, a claim was lost, doubled, or answered other than 200/201/503"
		"run_skew|chaos (tests/chaos/skew.sh)|chaos: a lease that ended was not handled as over"
		"run_log_full|chaos, short form (tests/chaos/log_full.sh)|chaos: a full decision-log disk stopped requests or was not reported once"
		"run_multihost|chaos, short form (tests/chaos/multihost.sh --short)|chaos: with hosts cut off the network, a claim, approval or effect was doubled or lost, or answered 500"
		"run_failover|chaos, short form (tests/chaos/failover.sh --short)|chaos: a PostgreSQL failover did not happen, lost an acknowledged write, sent an effect twice, or got an answer other than 2xx/3xx/503"
		"run_install|make install, config example, man pages, systemd units (tests/install/install.sh)|the installed tree, the example config, a man page or a systemd unit is not right"
		"run_daemons|socket activation, sd_notify, SIGHUP parity (tests/install/daemons.sh)|socket activation, readiness or the SIGHUP reload of a daemon is not right"
		"run_foreground|without systemd, a broken reload kept (tests/install/foreground.sh)|a daemon started by hand did not bind, switch user or send, or a broken reload stopped sends or went unreported"
		"run_promtool|prometheus rules (promtool check rules; promtool test rules; tests/runbook.sh)|the Prometheus rules do not load, fail their unit tests, or name an oncegatectl command it refuses"
		"run_backoff_restart|chaos, short form (tests/chaos/backoff_restart.sh --restarts 1)|chaos: a restart during a backoff lost the budget or the due time, or sent twice"
		"run_replay_contract|chaos, short form (tests/chaos/replay_contract.sh --runs 6)|chaos: a replay after a contract change carried the old draft, sent, or changed the original"
		"run_upgrade|upgrade from the previous release under traffic (tests/upgrade/run.sh)|upgrade: a claim or effect was lost or doubled, the 503 window was not seen, or a daemon served on the old schema"
		"run_soak|soak, short form (tests/soak/soak.sh --seconds 60, under valgrind; then --native)|"
		"run_no_skips||"
		"run_sanitizers||"
	)
	# Lanes beside the main one: NAME|STAGE IT WAITS FOR (none: at the
	# start)|its stages, in order. failover brings its own Patroni cluster
	# and mostly waits (Patroni's loop, the standby's promotion), beside
	# make check, whose suites mostly wait too; build: the CPU-bound stages
	# that use no stack (a fuzzer, builds, npm, linters), from the start at
	# the lowest CPU priority (lane_setup), so they take what make check's
	# suites and the main lane's chaos scenarios, waiting on clocks and
	# sockets, leave idle, and delay neither; stack_b: lane B's stack, idle
	# after make check, for the soak's valgrind and native runs and then
	# the browser's two stages, beside the main lane's chaos scenarios;
	# upgrade: a database of its own on the test stack's PostgreSQL, after
	# multihost (the last stage that stops it), its previous release built
	# during make check.
	local -a lanes=(
		"failover||failover"
		"build||openapi_lint owners fuzz n8n_node browser_tooling promtool install"
		"stack_b|make_check|soak browser browser_context"
		"upgrade|multihost|upgrade"
	)
	# lane_setup NAME: what a lane's subshell does before its stages.
	lane_setup() {
		case $1 in
		build) renice -n 19 -p "$BASHPID" >/dev/null ;;
		# shellcheck source=/dev/null
		stack_b) . "$ONCEGATE_LANE_B_ENV" ;;
		esac
	}
	local row fn want lane stages joined=no
	local -A lane_of=()
	# Stages named on the command line (./dev test upgrade kill9): those
	# only, in the table's order; a name not in the table is an error.
	for want in "$@"; do
		[[ " ${table[*]} " == *" run_$want|"* ]] || die "no stage $want (the stage durations list their names)"
	done
	for lane in "${lanes[@]}"; do
		IFS="|" read -r lane _ stages <<<"$lane"
		for want in $stages; do lane_of[$want]=$lane; done
	done
	RUN_MARKER=$STATE/.check-started
	STAGE_RESULTS=$STATE/stage-results
	touch "$RUN_MARKER"
	: >"$STAGE_RESULTS"
	# lanes_start AFTER: the lanes that wait for the stage AFTER (a stage
	# name, or empty for the start), each with its stages of this run.
	lanes_start() {
		local l a st w sel
		for l in "${lanes[@]}"; do
			IFS='|' read -r l a st <<<"$l"
			[[ $a == "$1" ]] || continue
			sel=()
			for w in $st; do
				[[ -n ${row_of[run_$w]:-} ]] || continue
				[[ ${#selected[@]} -eq 0 || " ${selected[*]} " == *" $w "* ]] && sel+=("$w")
			done
			[[ ${#sel[@]} -gt 0 ]] || continue
			say "lane $l started beside the main lane: ${sel[*]} (its output follows when it ends)"
			(
				lane_setup "$l"
				for w in "${sel[@]}"; do stage_run "$w" "$l"; done
			) >"$STATE/lane-$l.log" 2>&1 </dev/null 9>&- &
			LANE_PID[$l]=$!
		done
	}
	local -a selected=("$@")
	local -A row_of=()
	for row in "${table[@]}"; do row_of[${row%%|*}]=$row; done
	# stage_run NAME LANE: one stage, its heading and failure message, and a
	# line NAME STATUS SECONDS LANE in STAGE_RESULTS. In a lane the stage
	# runs in a subshell of its own, so a stage that exits (die) ends only
	# itself, not the rest of its lane.
	stage_run() {
		local f h m status=0 t0=$SECONDS
		IFS='|' read -r f h m <<<"${row_of[run_$1]}"
		[[ -z $h ]] || say "$h"
		if [[ $2 == main ]]; then "$f" || status=$?; else ("$f") || status=$?; fi
		[[ $status -eq 0 || -z $m ]] || say "$m"
		printf '%s %d %d %s\n' "$1" "$status" $((SECONDS - t0)) "$2" >>"$STAGE_RESULTS"
	}
	lanes_join() {
		local l status
		for l in "${!LANE_PID[@]}"; do
			status=0
			wait "${LANE_PID[$l]}" || status=$?
			say "lane $l ended$([[ $status -eq 0 ]] || echo " (status $status)"); its output:"
			cat "$STATE/lane-$l.log" >&2
			unset "LANE_PID[$l]"
		done
	}
	local t0=$SECONDS
	lanes_start ''
	for row in "${table[@]}"; do
		fn=${row%%|*}
		fn=${fn#run_}
		if [[ $fn == no_skips && $joined == no ]]; then
			lanes_join
			joined=yes
		fi
		if [[ -z ${lane_of[$fn]:-} ]] && [[ $# -eq 0 || " $* " == *" $fn "* ]]; then
			stage_run "$fn" main
		fi
		lanes_start "$fn"
	done
	[[ $joined == yes ]] || lanes_join
	stage_report $((SECONDS - t0))
}

# stage_report WALL: the table of STAGE_RESULTS (each stage's duration, its
# lane, ok or FAILED), the sum of the stages, the wall time of the stages
# and of the whole ./dev test (with the build and the stacks), and the
# verdict; exits 1 when a stage failed (make check's own status when only
# it did), 0 otherwise.
stage_report() {
	local name status secs lane rc=0 total=0
	say "stage durations (lane: main, or the lane it ran in beside it):"
	while read -r name status secs lane; do
		printf '  %-20s %5ds  %-8s %s\n' "$name" "$secs" "$lane" \
			"$([[ $status -eq 0 ]] && echo ok || echo FAILED)" >&2
		total=$((total + secs))
		if [[ $status -ne 0 ]]; then
			if [[ $name == make_check && $rc -eq 0 ]]; then rc=$status; else rc=1; fi
		fi
	done <"$STAGE_RESULTS"
	printf '  %-20s %5ds\n' "total (sum)" "$total" "stages (wall)" "$1" "whole run (wall)" "$SECONDS" >&2
	if [[ $rc -ne 0 ]]; then
		say "FAILED; state kept in $STATE (logs: fcgi.stderr, decisions.log, nginx/error.log, pg.log, lane-*.log)"
	else
		say "all tests passed"
	fi
	exit "$rc"
}

# shellcheck shell=bash
# dev.d/test.sh — the commands that test: ./dev test (with lane B's stack), check, test-n8n, chaos, soak, fuzz.
# Sourced by ./dev, which sets ROOT, DEV_DIR, STATE_ROOT, PGBIN, PYTHON and
# the stack variables first; defines functions and runs nothing.

# Lane B of the integration suites (Makefile.am) runs beside lane A, which
# uses the test stack: on a second throwaway stack (stack test-b: its own
# PostgreSQL cluster, responder, nginx and decision log; the same build),
# whose environment file ONCEGATE_LANE_B_ENV names. Started after the test
# stack (the build is done); a step that fails ends the run (set -e holds in
# the subshell, which keeps the test stack's variables apart).
lane_b_start() {
	say "second test stack, for lane B of the integration suites"
	(
		stack_create test-b
		stack_wipe
		stack_run
		write_env "$DEV_DIR/test-b-env"
	)
	export ONCEGATE_LANE_B_ENV=$DEV_DIR/test-b-env
}

# Stops lane B's stack; status 1 when its responder's sanitizer report
# (read after it stopped) is not empty.
lane_b_stop() {
	(
		stack_init test-b
		[[ -d $STATE ]] || exit 0
		stack_stop
		! sanitizer_findings "$STATE/fcgi.stderr"
	)
}

# What ./dev test started, stopped by PID at exit: the background builds
# and the lanes beside the main one (tests/run.sh), lane B's stack, the
# test stack.
test_stop() {
	if declare -F bg_builds_stop >/dev/null; then bg_builds_stop; fi
	if declare -F lanes_stop >/dev/null; then lanes_stop; fi
	lane_b_stop || true
	stack_stop
}

# ./dev test: the throwaway test stack (stack test, sanitizers on), then
# every stage of tests/run.sh (in order, some in lanes beside the others);
# the stack stops at exit.
cmd_test() {
	stack_create test
	stack_lock
	# A fresh cluster each run: leftovers of a killed run are stopped first.
	stack_wipe
	trap 'test_stop' EXIT
	trap 'exit 130' INT TERM

	stack_start --enable-werror --enable-sanitizers CFLAGS="-O1 -g"
	lane_b_start
	write_env "$DEV_DIR/test-env"
	env_export

	# shellcheck source=tests/run.sh
	source "$ROOT/tests/run.sh"
	run_stages "$@"
}

# ./dev check [SUITE...]: the quick loop while working on one module: the
# same throwaway stack as ./dev test (stack test, sanitizers on), then
# `make check` restricted to the suites named (all when none is), and the
# responder's sanitizer report. Unit suites alone need no stack: then only
# the build (the same directory and flags) and the suites. The full
# ./dev test is what CI runs.
cmd_check() {
	local rc=0 suite dir tests=() unit_only=yes
	for suite in "$@"; do
		suite=${suite##*/}
		[[ $suite =~ ^check_[a-z0-9_]+$ ]] || die "usage: ./dev check [check_NAME...]"
		# A suite is in tests/unit or tests/integration.
		for dir in tests/unit tests/integration tests; do
			[[ -f $ROOT/$dir/$suite.c ]] && break
		done
		[[ -f $ROOT/$dir/$suite.c ]] || die "no suite $suite in tests/unit or tests/integration"
		tests+=("$dir/$suite")
		[[ $dir == tests/unit ]] || unit_only=no
	done
	stack_create test
	stack_lock
	if [[ ${#tests[@]} -gt 0 && $unit_only == yes ]]; then
		install_packages
		autoreconf_if_needed
		build --enable-werror --enable-sanitizers CFLAGS="-O1 -g"
		make -C "$BUILD" -j2 $(sed -n 's/^\(og_after_[a-z0-9_]*\) =.*/\1=/p' "$ROOT/Makefile.am") \
			check VERBOSE=1 TESTS="${tests[*]}" || rc=$?
		exit "$rc"
	fi
	stack_wipe
	trap 'lane_b_stop || true; stack_stop' EXIT
	trap 'exit 130' INT TERM
	stack_start --enable-werror --enable-sanitizers CFLAGS="-O1 -g"
	lane_b_start
	write_env "$DEV_DIR/test-env"
	env_export
	# -j3: both lanes of integration suites and a unit suite at once
	if [[ ${#tests[@]} -gt 0 ]]; then
		# The suites named, and only they: each lane orders its suites by
		# making each log depend on the one before it (the og_after_*
		# targets in Makefile.am), which would run every suite ahead of a
		# named one; emptied here, those rules name no target. One at a
		# time (-j1), as a lane runs them: suites of one lane share its
		# stack and its kill switch.
		local unchain=()
		mapfile -t unchain < <(sed -n 's/^\(og_after_[a-z0-9_]*\) =.*/\1=/p' "$ROOT/Makefile.am")
		make -C "$BUILD" -j2 check TESTS= >/dev/null || rc=$?
		make -C "$BUILD" -j1 "${unchain[@]}" check VERBOSE=1 TESTS="${tests[*]}" || rc=$?
	else
		make -C "$BUILD" -j3 check VERBOSE=1 || rc=$?
	fi
	lane_b_stop || rc=1
	fcgi_stop
	if sanitizer_findings "$STATE/fcgi.stderr"; then rc=1; fi
	exit "$rc"
}

# ./dev test-n8n: the workflows of examples/n8n in a real n8n, the oldest
# supported (installed into .dev/n8n-app) and the newest (.dev/n8n-newest,
# with its Node.js 24), both kept across runs, on a port of their own
# (ONCEGATE_N8N_PORT, else a free one; .dev/n8n links to the stack's state,
# which each run wipes), against a throwaway stack of its own (stack n8n,
# build directory .dev/build-n8n, sanitizers on), so it can run beside
# ./dev test.
# The stack's dispatcher sends (AI_ACTIONS_ENABLED=true, sends allowed) to
# the demo providers; tests/n8n/run.sh starts n8n and the model stand-in.
cmd_test_n8n() {
	local rc=0 flavour
	stack_create n8n
	stack_lock
	stack_wipe
	trap 'stack_stop' EXIT
	trap 'exit 130' INT TERM

	# n8n on a port of its own, not its default 5678 (another n8n may hold
	# it): the stack's callback_origins names it, tests/n8n/run.sh uses it.
	ONCEGATE_N8N_PORT=${ONCEGATE_N8N_PORT:-$(pick_port n8n_port random /nonexistent)}
	export ONCEGATE_N8N_PORT

	stack_start --enable-werror --enable-sanitizers CFLAGS="-O1 -g"
	demo_providers_start
	dispatch_start
	env_export
	export ONCEGATE_CTL=$BUILD/oncegatectl ONCEGATE_STATE=$STATE ONCEGATE_PYTHON=$PYTHON \
		ONCEGATE_DEMO_HTTP=http://127.0.0.1:$DEMO_HTTP_PORT \
		ONCEGATE_DEMO_SMTP_LOG=$STATE/demo-smtp.jsonl ONCEGATE_N8N_DIR=$DEV_DIR/n8n-app
	# The oldest n8n supported (Node.js 20 from Debian) and the newest
	# (Node.js 24 from the npm registry), one after the other, against this
	# stack; ONCEGATE_N8N_FLAVOURS=newest runs one.
	for flavour in ${ONCEGATE_N8N_FLAVOURS:-oldest newest}; do
		say "n8n end-to-end test, $flavour n8n (tests/n8n/run.sh)"
		ONCEGATE_N8N_FLAVOUR=$flavour ONCEGATE_N8N_NEWEST_DIR=$DEV_DIR/n8n-newest \
			ONCEGATE_ARTIFACTS=$DEV_DIR/artifacts bash "$ROOT/tests/n8n/run.sh" 9>&- || { rc=$?; break; }
	done

	fcgi_stop
	if sanitizer_findings "$STATE/fcgi.stderr"; then rc=1; fi
	if [[ $rc -ne 0 ]]; then
		say "FAILED; state kept in $STATE (n8n: n8n-oldest.log, n8n-newest.log; fcgi.stderr, decisions.log, dispatch.stderr)"
	else
		say "n8n test passed"
	fi
	exit "$rc"
}

# ./dev chaos: the fault scenarios at full size against a throwaway stack of
# their own (stack chaos, build directory .dev/build-chaos, sanitizers on):
# the dispatcher killed with SIGKILL 50 times over 1,000 effects
# (tests/chaos/kill9.sh), PostgreSQL stopped for 5 s under 8 clients
# claiming, and their connections terminated (tests/chaos/pg_restart.sh),
# and stopped behind PgBouncer in transaction mode (pg_restart.sh --pooled),
# the decision log on a full disk (tests/chaos/log_full.sh), clock skew as
# leases that ended (tests/chaos/skew.sh), two responder and two dispatcher
# hosts in network namespaces with their links cut and restored
# (tests/chaos/multihost.sh), the dispatcher restarted five times while a
# retry waits out its backoff (tests/chaos/backoff_restart.sh), 60 dead
# letters replayed after the contract changed (tests/chaos/replay_contract.sh),
# four PostgreSQL failovers under Patroni with a stack of their own
# (tests/chaos/failover.sh).
# the previous release upgraded to this tree under traffic (tests/upgrade/run.sh),
# and both daemons started by hand with a broken contract on reload kept
# and reported (tests/install/foreground.sh).
# ./dev test runs a short form.
cmd_chaos() {
	local rc=0
	stack_create chaos
	stack_lock
	stack_wipe
	trap 'stack_stop' EXIT
	trap 'exit 130' INT TERM
	stack_start --enable-werror --enable-sanitizers CFLAGS="-O1 -g"
	env_export
	export ONCEGATE_CTL=$BUILD/oncegatectl ONCEGATE_DISPATCH=$BUILD/oncegate-dispatch \
		ONCEGATE_PROVIDERS=$ROOT/tests/providers ONCEGATE_PYTHON=$PYTHON
	bash "$ROOT/tests/chaos/kill9.sh" --effects 1000 --kills 50 || rc=1
	export ONCEGATE_TEST_PG_STOP ONCEGATE_TEST_PG_START
	ONCEGATE_TEST_PG_STOP=$(pg_stop_cmd) ONCEGATE_TEST_PG_START=$(pg_start_cmd)
	bash "$ROOT/tests/chaos/pg_restart.sh" --clients 8 --down 5 || rc=1
	bash "$ROOT/tests/chaos/pg_restart.sh" --clients 8 --down 5 --terminate || rc=1
	ONCEGATE_FCGI=$BUILD/oncegate-fcgi bash "$ROOT/tests/chaos/pg_restart.sh" --clients 8 --down 5 --pooled || rc=1
	bash "$ROOT/tests/chaos/log_full.sh" --claims 100 || rc=1
	bash "$ROOT/tests/chaos/skew.sh" || rc=1
	ONCEGATE_FCGI=$BUILD/oncegate-fcgi bash "$ROOT/tests/chaos/multihost.sh" || rc=1
	ONCEGATE_FCGI=$BUILD/oncegate-fcgi bash "$ROOT/tests/chaos/failover.sh" || rc=1
	bash "$ROOT/tests/chaos/backoff_restart.sh" --restarts 5 || rc=1
	bash "$ROOT/tests/chaos/replay_contract.sh" --runs 60 || rc=1
	bash "$ROOT/tests/upgrade/run.sh" || rc=1
	bash "$ROOT/tests/install/foreground.sh" || rc=1
	fcgi_stop
	if sanitizer_findings "$STATE/fcgi.stderr"; then rc=1; fi
	if [[ $rc -eq 0 ]]; then say "chaos: every scenario passed"; else say "chaos: FAILED (above)"; fi
	exit "$rc"
}

# ./dev soak [SECONDS [SOAK OPTIONS]]: oncegate-fcgi and oncegate-dispatch
# under valgrind memcheck for SECONDS (default 1800) of mixed load
# (tests/soak/soak.sh; its --tenants and --mails pass through),
# then the same load without valgrind for a third of that time to check
# that RSS stays flat, against a stack of its own (stack soak, build
# directory .dev/build-soak, no sanitizers: valgrind runs those binaries).
# ./dev test runs 60 s of each.
cmd_soak() {
	local rc=0 secs=${1:-1800}
	[[ $secs =~ ^[1-9][0-9]*$ ]] || die "usage: ./dev soak [SECONDS [--tenants 1|2] [--mails long|short]]"
	shift || true
	stack_create soak
	stack_lock
	stack_wipe
	trap 'stack_stop' EXIT
	trap 'exit 130' INT TERM
	stack_start --enable-werror CFLAGS="-O1 -g"
	env_export
	export ONCEGATE_CTL=$BUILD/oncegatectl ONCEGATE_PROVIDERS=$ROOT/tests/providers \
		ONCEGATE_PYTHON=$PYTHON ONCEGATE_VG_FCGI=$BUILD/oncegate-fcgi \
		ONCEGATE_VG_DISPATCH=$BUILD/oncegate-dispatch
	bash "$ROOT/tests/soak/soak.sh" --seconds "$secs" "$@" || rc=1
	bash "$ROOT/tests/soak/soak.sh" --seconds $(((secs + 2) / 3)) --native "$@" || rc=1
	exit "$rc"
}

# ./dev fuzz [SECONDS | --short]: builds the libFuzzer targets of tests/fuzz
# into .dev/fuzz and runs each for SECONDS (default 60; --short: 4), as many
# at once as there are CPUs, on a copy of the seed corpus in
# .dev/fuzz/corpus (the checked-in one stays clean; what a run learns is
# kept for the next). Each target first replays its files in
# tests/fuzz/regressions/NAME. One line per target; non-zero when anything
# crashed, leaked or timed out, with the input kept in .dev/fuzz/crashes/NAME.
cmd_fuzz() {
	local secs=60 out=$DEV_DIR/fuzz name line rc=0
	# install_packages reads PACKAGES: here only what the fuzz build needs.
	local PACKAGES=(clang libclang-rt-14-dev pkg-config libpq-dev libxml2-dev
		libssl-dev libjansson-dev libcurl4-openssl-dev)
	case ${1:-} in
	'') ;;
	--short) secs=4 ;;
	*) [[ $1 =~ ^[1-9][0-9]*$ ]] || die "usage: ./dev fuzz [SECONDS | --short]"; secs=$1 ;;
	esac
	[[ $# -le 1 ]] || die "usage: ./dev fuzz [SECONDS | --short]"
	install_packages
	mkdir -p "$out/logs"
	say "building the fuzz targets in $out"
	bash "$ROOT/tests/fuzz/build.sh" "$out" >"$out/logs/build.log" 2>&1 ||
		{ cat "$out/logs/build.log" >&2; die "the fuzz build failed"; }
	touch "$out/.run-started"
	say "fuzzing each target for ${secs}s"
	for name in $(cat "$out/targets"); do
		name=${name#fuzz_}
		mkdir -p "$out/corpus/$name" "$out/crashes/$name"
		cp -n "$ROOT/tests/fuzz/corpus/$name"/* "$out/corpus/$name/" 2>/dev/null || true
		while [[ $(jobs -pr | wc -l) -ge $(nproc) ]]; do wait -n || true; done
		# One target: regressions, then fuzzing; a one-line NAME.result.
		(
			log=$out/logs/$name.log status=0 regress=()
			export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
			if [[ -d $ROOT/tests/fuzz/regressions/$name ]]; then
				mapfile -t regress < <(find "$ROOT/tests/fuzz/regressions/$name" -type f | sort)
			fi
			if [[ ${#regress[@]} -gt 0 ]]; then
				"$out/fuzz_$name" -timeout=5 -rss_limit_mb=2048 "${regress[@]}" \
					>"$log" 2>&1 || status=$?
				if [[ $status -ne 0 ]]; then
					printf '%-18s FAILED: a regression input still crashes: %s (%s)\n' \
						"$name" "$(grep -m1 -E 'ERROR: |property failed|runtime error' \
						"$log" | cut -c1-100)" "$log" >"$out/logs/$name.result"
					exit 0
				fi
			fi
			"$out/fuzz_$name" -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 \
				-print_final_stats=1 -artifact_prefix="$out/crashes/$name/" \
				"$out/corpus/$name" >>"$log" 2>&1 || status=$?
			execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
			[[ -n $execs ]] || execs=$(grep -oE '^#[0-9]+' "$log" | tail -n1 | tr -d '#')
			rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
			[[ -n $rate ]] || rate=$((${execs:-0} / secs))
			crashes=$(find "$out/crashes/$name" -type f -newer "$out/.run-started" \
				\( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) |
				wc -l)
			if [[ $status -ne 0 && $crashes -eq 0 ]]; then
				line="FAILED: exit $status without a crash file ($log)"
			else
				line=$(printf '%3ss  execs %10s  %8s/s  crashes %d' "$secs" "${execs:-0}" \
					"$rate" "$crashes")
				[[ $crashes -eq 0 ]] || line+="  ($log)"
			fi
			printf '%-18s %s\n' "$name" "$line" >"$out/logs/$name.result"
		) &
	done
	wait
	for name in $(cat "$out/targets"); do
		line=$(cat "$out/logs/${name#fuzz_}.result")
		echo "$line"
		[[ $line == *" crashes 0" ]] || rc=1
	done
	if [[ $rc -ne 0 ]]; then
		say "fuzzing FAILED; inputs kept:"
		find "$out/crashes" -type f -newer "$out/.run-started" -printf '  %p\n' >&2
	fi
	return "$rc"
}

#!/usr/bin/env bash
# drain.sh — the dispatcher benchmark of issue 4: how fast oncegate-dispatch
# drains a full outbox to a fast HTTP provider, whether that rate holds over
# the whole run, and what the same database work costs under pgbench, in one
# run on one machine.
#
#   ./dev up && tests/bench/drain.sh [--duration S] [--effects N]
#
# Works in a scratch database (oncegate_drain_RUN) on the cluster of the
# stack `./dev up` leaves running (.dev/env), migrated with the product's
# own migrations, so the stack's own dispatcher never sees these effects; it
# is dropped at the end. Each phase starts from the same outbox: EFFECTS
# approved runs with one pending crm.tag effect each, vacuumed.
#   1. pgbench -M prepared, CONNS clients, DURATION seconds: per transaction
#      the statements the dispatcher runs for one effect (tests/bench/
#      drain.sql: claim with FOR UPDATE SKIP LOCKED, lock the run, settle by
#      compare-and-set with the attempt row, complete the run), no provider;
#   2. one oncegate-dispatch (dispatch_workers = CONNS), DURATION seconds,
#      to a private nginx on loopback that answers every POST 201 with an id
#      (the sink) and logs each request's Idempotency-Key;
#   3. four oncegate-dispatch processes, the same.
# Every second the script samples the effects completed so far and each
# dispatcher's resident memory. The table gives the mean rate, the rates of
# the first and the last 30 s (a queue whose head fills with dead index
# entries slows down as it drains: the last 30 s must stay within 20% of
# the first), the ratio to pgbench (target: one dispatcher >= 0.5), the RSS
# after warm-up (10 s) and at the end, and the exactly-once check: every
# Idempotency-Key the sink received, received once, and as many as the
# effects completed.
#
# Options:
#   --duration S     seconds of each phase (default 120)
#   --effects N      effects in the outbox at the start of each phase (default 200000)
#   --connections N  pgbench clients = dispatcher workers per process (default 4)
#   --threads N      pgbench threads (default 2)
#   --env FILE       stack environment (default .dev/env of this checkout)
#   --strict         exit 2 when a target is missed
#   --no-keys        the sink's target does not honour Idempotency-Key
#                    (idempotency_key = 0): each send is then marked started
#                    in the database right before its request
#   --base PROGRAM   also drain with PROGRAM, another build of oncegate-dispatch
#                    (the commit before a change, built in a directory of its
#                    own), in the same run: each dispatcher phase runs with it
#                    first, then with this checkout's, on the same outbox and
#                    database; the table adds its rows and the ratio
#
# Exit status: 0 measured, 1 a phase had errors (a duplicate, a lost
# effect, a failed pgbench transaction) or the set-up failed, 2 --strict
# and a target missed. The phases are in tests/bench/drain_lib.sh
# (tests/bench/run.sh runs them too).
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source-path=SCRIPTDIR source=drain_lib.sh
. "$HERE/drain_lib.sh"

DURATION=120 CONNS=4 THREADS=2 EFFECTS=200000 WINDOW=30 BASE=''

bench_option() {
	case $1 in
	--effects) EFFECTS=${2:?--effects needs a number}; SHIFT=2 ;;
	--base) BASE=${2:?--base needs a program}; SHIFT=2 ;;
	--no-keys) DRAIN_KEYS=0; SHIFT=1 ;;
	*) return 1 ;;
	esac
}

parse_options "$@"
check_options EFFECTS
((DURATION >= 40)) || die "--duration must be at least 40 s (the first and the last 30 s are compared)"
load_stack
start_run
describe_machine
drain_init

# --- 1. pgbench -------------------------------------------------------------------------

drain_pgbench

# --- 2, 3. the dispatchers ----------------------------------------------------------------

[[ -z $BASE ]] || { [[ -x $BASE ]] || die "--base $BASE: not a program"; }
NAMES=(drain.pg)
for n in 1 4; do
	if [[ -n $BASE ]]; then
		drain_dispatch "$n" "$BASE" b
		NAMES+=("drain.${n}b")
	fi
	drain_dispatch "$n"
	NAMES+=("drain.$n")
done

# --- the table ------------------------------------------------------------------------------

{
	echo "drain benchmark, run $RUN: $EFFECTS effects per phase, ${DURATION}s each, $CONNS workers/clients, sink idempotency_key = ${DRAIN_KEYS:-1}"
	printf '%-26s %9s %9s %9s %10s %14s %12s\n' "" "mean/s" "first30" "last30" "last/first" "RSS warm->end" "vs pgbench"
	for name in "${NAMES[@]}"; do
		case $name in
		drain.pg) label="pgbench claim+complete" ;;
		drain.1) label="oncegate, 1 dispatcher" ;;
		drain.4) label="oncegate, 4 dispatchers" ;;
		drain.1b) label="--base, 1 dispatcher" ;;
		drain.4b) label="--base, 4 dispatchers" ;;
		esac
		lf=$(ratio "${LAST[$name]}" "${FIRST[$name]}")
		rss=- vs=-
		if [[ $name != drain.pg ]]; then
			rss="${RSS_WARM[$name]}->${RSS_END[$name]} kB"
			vs=$(ratio "${MEAN[$name]}" "${MEAN[drain.pg]}")
		fi
		printf '%-26s %9s %9s %9s %10s %14s %12s\n' "$label" "${MEAN[$name]}" "${FIRST[$name]}" \
			"${LAST[$name]}" "$lf" "$rss" "$vs"
	done
	echo
	echo "targets:"
	r1=$(ratio "${MEAN[drain.1]}" "${MEAN[drain.pg]}")
	echo "  1 dispatcher / pgbench = $r1 (>= $TARGET_DRAIN): $(verdict "$r1" ">=" "$TARGET_DRAIN")"
	if [[ -n $BASE ]]; then
		echo "  this checkout / --base: 1 dispatcher $(ratio "${MEAN[drain.1]}" "${MEAN[drain.1b]}"), 4 dispatchers $(ratio "${MEAN[drain.4]}" "${MEAN[drain.4b]}")"
	fi
	for name in drain.1 drain.4; do
		lf=$(ratio "${LAST[$name]}" "${FIRST[$name]}")
		echo "  $name: last 30 s / first 30 s = $lf (>= $TARGET_DRAIN_HOLD): $(verdict "$lf" ">=" "$TARGET_DRAIN_HOLD")"
		echo "  $name: sent ${SENT[$name]}, completed ${DONE_DB[$name]}, duplicates ${DUPS[$name]}: $( ((DUPS[$name] == 0 && SENT[$name] == DONE_DB[$name])) && echo ok || echo MISS)"
		grow=$((RSS_END[$name] - RSS_WARM[$name]))
		echo "  $name: RSS growth after warm-up ${grow} kB (flat: < 10% of ${RSS_WARM[$name]} kB): $(verdict "$grow" "<" "$((RSS_WARM[$name] / 10 + 1))")"
	done
	echo
	echo "commands:"
	echo "  pgbench: ${CMD[drain.pg]}"
	echo "  1:       ${CMD[drain.1]}"
	echo "  4:       ${CMD[drain.4]}"
	[[ -z $BASE ]] || echo "  --base:  $BASE"
	echo "  sink:    nginx on loopback, return 201 (tests/bench/drain_lib.sh)"
	table_footer
} >"$TMP/table"
finish

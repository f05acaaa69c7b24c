# shellcheck shell=bash
# common.sh — what the benchmarks in tests/bench share: their common options,
# the stack `./dev up` leaves running, the private temporary directory and
# the exit trap, private nginx instances, the CPU accounting around a timed
# run, peak memory, wrk's and pgbench's results, and the end of the table.
# Sourced by the scripts (claims.sh, approvals.sh, drain.sh, run.sh) and by
# the phase libraries (claims_lib.sh, approvals_lib.sh, drain_lib.sh) after
# `set -euo pipefail`; it defines functions and the arrays of results and
# runs nothing.
#
# The script sets DURATION, CONNS and THREADS (its defaults) before
# parse_options, and defines:
#   bench_option ARG...  its own options: sets SHIFT to the words it took,
#                        fails on an option it does not know;
#   bench_cleanup        (optional) what the exit trap undoes besides TMP
#                        and what the phase libraries registered with
#                        at_exit;
#   pgbench_hint OUTFILE (optional) printed after the message of a failed
#                        pgbench run.

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
# shellcheck disable=SC2034  # the phase libraries name it in their messages
PROG=${0##*/}
# say, die (naming PROG), q, free_port, running, pid_file, nginx_start and
# nginx_stop.
# shellcheck source=tests/lib/stack.sh
source "$ROOT/tests/lib/stack.sh"
# nginx_copy, upstream_nginx, pooled_start and pooled_stop.
# shellcheck source=tests/lib/pooled.sh
source "$ROOT/tests/lib/pooled.sh"

STRICT=no
ENV_FILE=$ROOT/.dev/env

# usage: the script's header comment.
usage() {
	sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"
}

# --- options ---------------------------------------------------------------------

# parse_options ARG...: --duration, --connections, --threads, --env,
# --strict and --help; any other option goes to the script's bench_option.
# ARGS keeps the words for the table.
# shellcheck disable=SC2034  # ARGS: the script's
parse_options() {
	ARGS=("$@")
	while [[ $# -gt 0 ]]; do
		case $1 in
		--duration) DURATION=${2:?--duration needs seconds}; shift 2 ;;
		--connections) CONNS=${2:?--connections needs a number}; shift 2 ;;
		--threads) THREADS=${2:?--threads needs a number}; shift 2 ;;
		--env) ENV_FILE=${2:?--env needs a file}; shift 2 ;;
		--strict) STRICT=yes; shift ;;
		-h | --help) usage; exit 0 ;;
		*)
			SHIFT=0
			bench_option "$@" || { usage >&2; exit 1; }
			shift "$SHIFT"
			;;
		esac
	done
}

# check_options NAME...: DURATION, CONNS, THREADS and the variables NAME...
# are positive integers, the runs at least 4 s long, and every thread has a
# connection.
check_options() {
	local v
	for v in DURATION CONNS THREADS "$@"; do
		[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer (got '${!v}')"
	done
	((DURATION >= 4)) || die "--duration must be at least 4 seconds"
	((CONNS >= THREADS)) || die "--connections must be at least --threads"
}

# --- the stack -------------------------------------------------------------------

# load_stack: the environment ENV_FILE (exported), the tools (PGBENCH), the
# stack's health, STATE (the directory of its config and PID files) and its
# processes: FCGI_PID, PG_PID, NGINX_PID (the nginx whose CPU is counted:
# a script that sends its runs through a private nginx sets it to that
# one's master) and STACK_NGINX_PID.
load_stack() {
	local v tool
	[[ -r $ENV_FILE ]] || die "$ENV_FILE not found: start the stack with ./dev up"
	# shellcheck source=/dev/null
	. "$ENV_FILE"
	for v in ONCEGATE_URL ONCEGATE_API_KEY PGHOST PGPORT PGDATABASE PGUSER ONCEGATE_CONF; do
		[[ -n ${!v:-} ]] || die "$v is not set by $ENV_FILE"
		export "${v?}"
	done

	PGBENCH=$(command -v pgbench || true)
	[[ -n $PGBENCH ]] || PGBENCH=/usr/lib/postgresql/15/bin/pgbench
	for tool in wrk curl psql awk "$PGBENCH"; do
		command -v "$tool" >/dev/null || die "$tool is not installed"
	done

	curl -fsS -o /dev/null --max-time 5 "$ONCEGATE_URL/healthz" ||
		die "$ONCEGATE_URL/healthz is not healthy: is ./dev up running?"

	STATE=$(dirname "$ONCEGATE_CONF")
	FCGI_PID=$(pid_file "$STATE/fcgi.pid" oncegate-fcgi)
	[[ -n $FCGI_PID ]] || FCGI_PID=$(pgrep -o -f "oncegate-fcgi -c $ONCEGATE_CONF" || true)
	[[ -n $FCGI_PID ]] || die "no oncegate-fcgi process for $ONCEGATE_CONF"
	PG_PID=$(pid_file "$STATE/pg/postmaster.pid" postgres)
	NGINX_PID=$(pid_file "$STATE/nginx/nginx.pid" nginx)
	STACK_NGINX_PID=$NGINX_PID
	NPROC=$(nproc)
}

# start_run: RUN, unique per invocation; TMP, a temporary directory removed
# at exit after the at_exit functions and the script's bench_cleanup; TMP/auth, the API key as a curl
# header. The API key stays out of every command line: curl reads it from
# that file, claims.lua from the environment.
start_run() {
	RUN=$(date -u +%Y%m%dT%H%M%SZ)-$$
	TMP=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-bench.XXXXXX")
	BG_PID=''
	trap cleanup EXIT
	trap 'exit 130' INT TERM
	(umask 077 && printf 'Authorization: Bearer %s\n' "$ONCEGATE_API_KEY" >"$TMP/auth")
}

# at_exit FUNCTION: the exit trap calls FUNCTION, the functions in the
# reverse order of their registration (the last set-up is undone first).
# Each must be safe to call when its set-up never happened or was already
# undone.
AT_EXIT=()
at_exit() { AT_EXIT+=("$1"); }

# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
	local i
	if [[ -n ${BG_PID:-} ]]; then kill "$BG_PID" 2>/dev/null || true; wait "$BG_PID" 2>/dev/null || true; fi
	for ((i = ${#AT_EXIT[@]} - 1; i >= 0; i--)); do "${AT_EXIT[i]}" || true; done
	if declare -F bench_cleanup >/dev/null; then bench_cleanup || true; fi
	[[ -n ${TMP:-} ]] && rm -rf "$TMP"
}

# --- peak memory -------------------------------------------------------------------------

# PEAK_KB[GROUP]: the largest VmHWM (peak resident set, kB) seen in a
# process of GROUP; PEAK_N[GROUP], how many processes of GROUP were looked
# at, at most at once.
declare -A PEAK_KB PEAK_N

# hwm_kb PID: the process's VmHWM in kB, or nothing when it is gone.
hwm_kb() {
	local k v _
	while read -r k v _; do
		[[ $k == VmHWM: ]] && { echo "$v"; return 0; }
	done 2>/dev/null <"/proc/$1/status"
	return 0
}

# children_of PID: the PIDs of the process's children (from /proc, without
# forking a process per PID).
children_of() {
	local f line rest
	local -a a
	for f in /proc/[0-9]*/stat; do
		read -r line 2>/dev/null <"$f" || continue
		rest=${line##*) }
		read -r -a a <<<"$rest"
		[[ ${a[1]} == "$1" ]] && echo "${line%% *}"
	done
	return 0
}

# pg_backends: the client backends of the stack's PostgreSQL (children of
# the postmaster whose title names a user and a database, not the
# checkpointer, the WAL writer, autovacuum …).
pg_backends() {
	local pid title
	[[ -n ${PG_PID:-} ]] || return 0
	for pid in $(children_of "$PG_PID"); do
		title=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || continue
		[[ $title =~ ^postgres:\ [^\ ]+\ [^\ ]+\ (\[local\]|[0-9]) ]] && echo "$pid"
	done
	return 0
}

# peak_note GROUP PID...: folds the VmHWM of PIDs into PEAK_KB[GROUP]. Call
# it before the processes are stopped: the high-water mark goes with them.
peak_note() {
	local group=$1 pid kb n=0
	shift
	for pid; do
		kb=$(hwm_kb "$pid")
		[[ -n $kb ]] || continue
		n=$((n + 1))
		((kb > ${PEAK_KB[$group]:-0})) && PEAK_KB[$group]=$kb
	done
	((n > ${PEAK_N[$group]:-0})) && PEAK_N[$group]=$n
	return 0
}

# peak_note_stack: the peaks of the stack's long-lived processes: the
# responder, nginx's workers, PostgreSQL's client backends.
peak_note_stack() {
	peak_note oncegate-fcgi "$FCGI_PID"
	# shellcheck disable=SC2046  # one word per PID
	[[ -n ${STACK_NGINX_PID:-} ]] && peak_note nginx-worker $(children_of "$STACK_NGINX_PID")
	# shellcheck disable=SC2046  # one word per PID
	peak_note pg-backend $(pg_backends)
	return 0
}

# mb KB: megabytes with one decimal.
mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

# --- set-up through the API ------------------------------------------------------------

# api_post PATH BODY: POSTs the JSON BODY to the API; prints the answer's
# body, a newline and its status.
api_post() {
	curl -sS --max-time 10 -w '\n%{http_code}' -H @"$TMP/auth" \
		-H 'Content-Type: application/json' -X POST "$ONCEGATE_URL$1" -d "$2"
}

# api_claim KEY PAYLOAD: claims KEY with the JSON PAYLOAD (workflow
# bench@1); prints "LEASE_OWNER VERSION".
api_claim() {
	local resp
	resp=$(api_post /v1/runs "{\"key\":\"$1\",\"payload\":$2,\"workflow_version\":\"bench@1\",\"trigger\":\"bench\"}") || return 1
	[[ ${resp##*$'\n'} == 201 && $resp =~ \"lease_owner\":\"([0-9a-f-]{36})\" ]] ||
		{ printf 'claim %s: %s\n' "$1" "$resp" >&2; return 1; }
	local owner=${BASH_REMATCH[1]}
	[[ $resp =~ \"version\":([0-9]+) ]] || { printf 'claim %s: no version\n' "$1" >&2; return 1; }
	printf '%s %s\n' "$owner" "${BASH_REMATCH[1]}"
}

# api_claim_then KEY PAYLOAD ACTION FIELDS: claims KEY with the JSON PAYLOAD,
# then POSTs {"lease_owner":…,"version":…,FIELDS} to /v1/runs/KEY/ACTION
# under that lease; prints that answer as api_post does.
api_claim_then() {
	local claim
	claim=$(api_claim "$1" "$2") || return 1
	api_post "/v1/runs/$1/$3" "{\"lease_owner\":\"${claim% *}\",\"version\":${claim#* },$4}"
}

# parallel_setup COUNT FUNCTION: FUNCTION 1 .. FUNCTION COUNT, in 8 bash
# processes at a time (50 numbers each); fails at the first failure.
parallel_setup() {
	export -f "${2?}" api_post api_claim api_claim_then
	export RUN TMP
	export SETUP_FN=$2
	# 255 makes xargs stop at the first failure.
	# shellcheck disable=SC2016  # expanded by the inner bash
	seq 1 "$1" | xargs -P 8 -n 50 bash -c 'for i; do "$SETUP_FN" "$i" || exit 255; done' _
}

# --- CPU accounting ----------------------------------------------------------------

# cpu_snapshot FILE TOOL_PID: one line "GROUP PID TICKS" per process of the
# stack (postgres: the postmaster and its children; nginx: the master and
# its workers; oncegate-fcgi; the load tool), and "machine total|idle TICKS".
cpu_snapshot() {
	local out=$1 tool=$2 f line rest pid group
	local -a a
	{
		read -r -a a </proc/stat
		printf 'machine total %d\n' $((a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7] + a[8]))
		printf 'machine idle %d\n' $((a[4] + a[5]))
		for f in /proc/[0-9]*/stat; do
			read -r line 2>/dev/null <"$f" || continue
			pid=${line%% *}
			rest=${line##*) }
			read -r -a a <<<"$rest"
			# a[1] is the parent, a[11] utime, a[12] stime.
			group=''
			if [[ $pid == "$FCGI_PID" ]]; then group=oncegate-fcgi
			elif [[ $pid == "$tool" ]]; then group=client
			elif [[ -n $PG_PID && ($pid == "$PG_PID" || ${a[1]} == "$PG_PID") ]]; then group=postgres
			elif [[ -n $NGINX_PID && ($pid == "$NGINX_PID" || ${a[1]} == "$NGINX_PID") ]]; then group=nginx
			elif [[ -n ${PGB_PID:-} && $pid == "$PGB_PID" ]]; then group=pgbouncer
			fi
			[[ -n $group ]] && printf '%s %s %d\n' "$group" "$pid" $((a[11] + a[12]))
		done
		# (the last [[ ]] may be false: not the function's status, set -e)
		true
	} >"$out"
}

# cpu_report BEFORE AFTER CLIENT_NAME: CPU of each group between the two
# snapshots, in % of one core (the machine has NPROC x 100 %), then what
# the rest of the machine used and what stayed idle.
cpu_report() {
	awk -v nproc="$NPROC" -v client="$3" '
		FNR == NR { before[$1 " " $2] = $3; next }
		{ d = $3 - before[$1 " " $2]; if ($1 == "machine") m[$2] = d; else g[$1] += d }
		END {
			wall = m["total"] / nproc
			if (wall <= 0) { print "n/a"; exit }
			n = split("postgres nginx oncegate-fcgi client pgbouncer", order, " ")
			for (i = 1; i <= n; i++) {
				if (order[i] == "pgbouncer" && !(order[i] in g)) continue
				name = order[i] == "client" ? client : order[i]
				printf "%s %.0f%%  ", name, 100 * g[order[i]] / wall
				ours += g[order[i]]
			}
			# Everything else: the kernel threads, and other work on the
			# machine, which makes the figures less trustworthy.
			other = m["total"] - m["idle"] - ours
			printf "other %.0f%%  idle %.0f%%", 100 * (other > 0 ? other : 0) / wall, 100 * m["idle"] / wall
		}' "$1" "$2"
}

# machine_busy SECONDS: % of the whole machine in use over SECONDS.
machine_busy() {
	local -a a b
	read -r -a a </proc/stat
	sleep "$1"
	read -r -a b </proc/stat
	awk -v t=$(((b[1] + b[2] + b[3] + b[4] + b[5] + b[6] + b[7] + b[8]) - (a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7] + a[8]))) \
		-v i=$(((b[4] + b[5]) - (a[4] + a[5]))) 'BEGIN { printf "%.0f", (t > 0 ? 100 * (t - i) / t : 0) }'
}

# measure NAME CLIENT_NAME OUTFILE COMMAND...: runs COMMAND (DURATION
# seconds long) in the background with its output in OUTFILE, takes CPU
# snapshots 2 s after the start and 2 s before the end, and leaves the
# report in CPU_NAME.
measure() {
	local name=$1 client=$2 out=$3 margin=2 rc=0
	shift 3
	((DURATION >= 8)) || margin=1
	"$@" >"$out" 2>&1 &
	BG_PID=$!
	sleep "$margin"
	cpu_snapshot "$TMP/cpu.a" "$BG_PID"
	sleep $((DURATION - 2 * margin))
	cpu_snapshot "$TMP/cpu.b" "$BG_PID"
	wait "$BG_PID" || rc=$?
	BG_PID=''
	CPU[$name]=$(cpu_report "$TMP/cpu.a" "$TMP/cpu.b" "$client")
	sed 's/^/    /' "$out" >&2
	return "$rc"
}

# --- the machine ------------------------------------------------------------------

# describe_machine: MODEL, PGVERSION, PGDURABLE, THREADS_CONF (the
# responder's) and BUSY_BEFORE, the load on the machine before the runs.
describe_machine() {
	MODEL=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
	[[ -n $MODEL ]] || MODEL=$(uname -m)
	PGVERSION=$(q 'SHOW server_version')
	PGDURABLE=$(q "SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'shared_buffers', 'max_connections')")
	THREADS_CONF=$(sed -nE 's/^[[:space:]]*threads[[:space:]]*=[[:space:]]*([0-9]+).*/\1/p' "$ONCEGATE_CONF" | head -n1)
	say "run $RUN: $NPROC CPUs ($MODEL), kernel $(uname -r), PostgreSQL $PGVERSION"
	# Other work on the machine skews every figure: say so in the table.
	BUSY_BEFORE=$(machine_busy 2)
	say "machine busy before the first run: $BUSY_BEFORE %"
}

# --- results -------------------------------------------------------------------------

ERRORS=0
ERRLOG=()
declare -A RATE P50 P99 REQUESTS CMD CPU

# fail MESSAGE: a run had errors; MESSAGE goes to stderr and into the table.
fail() {
	say "$1"
	ERRLOG+=("$1")
	ERRORS=$((ERRORS + 1))
}

# ratio A B: A / B with two decimals (0 when B is 0).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

# ms MICROSECONDS: milliseconds with two decimals.
ms() { awk -v us="$1" 'BEGIN { printf "%.2f", us / 1000 }'; }

# show_cmd WORD...: a command line for the table, with paths relative to the
# checkout and the private directory written as $TMP.
show_cmd() {
	local w s='' re='^[][A-Za-z0-9_./:=@,+$-]*$'
	for w; do
		w=${w//$ROOT\//}
		w=${w//$TMP/\$TMP}
		[[ $w =~ $re ]] || w="'$w'"
		s+=${s:+ }$w
	done
	printf '%s' "$s"
}

# wrk_result NAME OUTFILE RC: reads the bench-result line that the wrk
# scripts print into RATE, P50, P99 and REQUESTS of NAME.
# shellcheck disable=SC2034  # the results: the script's table
wrk_result() {
	local name=$1 out=$2 rc=$3 line requests duration p50 p99 bad errors
	line=$(grep '^bench-result ' "$out" || true)
	if [[ $rc -ne 0 || -z $line ]]; then
		fail "oncegate, $name: wrk failed (status $rc)"
		RATE[$name]=0 P50[$name]=0 P99[$name]=0
		return 0
	fi
	read -r requests duration p50 p99 bad errors < <(
		sed -E 's/^bench-result requests=([0-9]+) duration_us=([0-9]+) p50_us=([0-9]+) p99_us=([0-9]+) bad=([0-9]+) errors=([0-9]+)$/\1 \2 \3 \4 \5 \6/' <<<"$line")
	if ((bad + errors > 0)); then
		local hint=''
		grep -q '429=' "$out" && hint=' (429: nginx limit_req)'
		fail "oncegate, $name: $bad unexpected answers$hint, $errors socket errors (connect/read/write/timeout): not a result"
	fi
	RATE[$name]=$(awk -v r="$requests" -v b="$bad" -v d="$duration" 'BEGIN { printf "%.1f", (d > 0 ? (r - b) / (d / 1e6) : 0) }')
	P50[$name]=$(ms "$p50")
	P99[$name]=$(ms "$p99")
	REQUESTS[$name]=$requests
}

# wrk_run NAME URL SCRIPT ARG...: one timed wrk run (THREADS threads, CONNS
# connections, DURATION seconds) of tests/bench/SCRIPT against URL with the
# script's ARGs; CMD_ENV goes before the command line shown.
wrk_run() {
	local name=$1 url=$2 script=$3 rc=0
	shift 3
	local -a cmd=(wrk "-t$THREADS" "-c$CONNS" "-d${DURATION}s" --latency -s "$HERE/$script" "$url" -- "$@")
	CMD[$name]=${CMD_ENV:-}$(show_cmd "${cmd[@]}")
	say "oncegate, $name: ${CMD[$name]}"
	measure "$name" wrk "$TMP/wrk.$name" "${cmd[@]}" || rc=$?
	wrk_result "$name" "$TMP/wrk.$name" "$rc"
}

# pgbench_run NAME LABEL SCRIPT ARG...: one timed pgbench run -M prepared
# (CONNS clients, THREADS threads, DURATION seconds) of tests/bench/SCRIPT (or SCRIPT, a path)
# with ARGs, its output in TMP/pgbench.LABEL, into RATE, P50 and P99 of
# NAME; per-transaction latencies are logged for the percentiles.
# shellcheck disable=SC2034  # the results: the script's table
pgbench_run() {
	local name=$1 label=$2 script=$3 out=$TMP/pgbench.$2 log=$TMP/pglog.$2 rc=0 tps failed hint=''
	shift 3
	[[ $script == /* ]] || script=$HERE/$script
	local -a cmd=("$PGBENCH" -n -M prepared "-c$CONNS" "-j$THREADS" "-T$DURATION"
		-f "$script" "$@" -l "--log-prefix=$log")
	CMD[$name]=$(show_cmd "${cmd[@]}")
	CMD[$name]=${CMD[$name]/ -l --log-prefix=*/ -l}
	say "pgbench, $label: ${CMD[$name]}"
	measure "$name" pgbench "$out" "${cmd[@]}" || rc=$?
	tps=$(sed -nE 's/^tps = ([0-9.]+) .*/\1/p' "$out")
	failed=$(sed -nE 's/^number of failed transactions: ([0-9]+).*/\1/p' "$out")
	if [[ $rc -ne 0 || -z $tps || ${failed:-0} -ne 0 ]]; then
		if declare -F pgbench_hint >/dev/null; then hint=$(pgbench_hint "$out"); fi
		fail "pgbench, $label: failed (status $rc, ${failed:-?} failed transactions)$hint"
		tps=${tps:-0}
	fi
	RATE[$name]=$tps
	# Third field of pgbench's per-transaction log: latency in microseconds.
	read -r "P50[$name]" "P99[$name]" < <(
		cat "$log".* 2>/dev/null | awk '$3 ~ /^[0-9]+$/ { print $3 }' | sort -n |
			awk '{ v[NR] = $1 } END {
				if (NR == 0) { print "n/a n/a"; exit }
				i50 = int(NR * 0.50); if (i50 < 1) i50 = 1
				i99 = int(NR * 0.99); if (i99 < 1) i99 = 1
				printf "%.2f %.2f\n", v[i50] / 1000, v[i99] / 1000 }')
	rm -f "$log".*
}

# cost_us NAME: the server side's CPU per request of run NAME, in µs:
# postgres, nginx, the responder (and pgbouncer) from CPU[NAME], over
# RATE[NAME]. Other work on the machine slows every side down but takes
# little of this figure, so a ratio of two costs is steadier than a ratio
# of two rates on a busy machine.
cost_us() {
	awk -v cpu="${CPU[$1]:-}" -v rate="${RATE[$1]:-0}" 'BEGIN {
		n = split(cpu, w, /[ %]+/)
		for (i = 1; i < n; i++)
			if (w[i] == "postgres" || w[i] == "nginx" || w[i] == "oncegate-fcgi" || w[i] == "pgbouncer")
				sum += w[i + 1]
		if (rate > 0 && sum > 0) printf "%.0f", sum / 100 * 1e6 / rate; else print "n/a"
	}'
}

# --- the table ----------------------------------------------------------------------------

# verdict VALUE OP TARGET: "ok" or "MISS".
verdict() {
	if awk -v v="$1" -v t="$3" -v op="$2" 'BEGIN { exit !(op == ">=" ? v >= t : v < t) }'; then
		echo ok
	else
		echo MISS
	fi
}

# table_footer: the load on the machine, the errors, the machine and the
# stack, for the end of the table.
table_footer() {
	echo "  machine busy before the first run: $BUSY_BEFORE% of all CPUs"
	if ((BUSY_BEFORE > 10)) || printf '%s\n' "${CPU[@]}" | grep -qE 'other ([3-9][0-9]|[0-9]{3,})%'; then
		echo "  WARNING: other work used this machine during the benchmark; the figures understate both sides."
	fi
	if ((ERRORS > 0)); then
		echo
		echo "ERRORS: these figures are not a result:"
		printf '  %s\n' "${ERRLOG[@]}"
	fi
	echo
	echo "machine:  $NPROC CPUs, $MODEL, Linux $(uname -r)"
	echo "stack:    PostgreSQL $PGVERSION ($PGDURABLE), oncegate-fcgi threads=${THREADS_CONF:-?}, $(wrk -v 2>&1 | head -n1 | cut -d' ' -f1-2)"
}

# finish: prints the table TMP/table and exits: 1 when a run had errors, 2
# with --strict when a target was missed, else 0.
finish() {
	local missed
	cat "$TMP/table"
	missed=$(grep -c MISS "$TMP/table" || true)
	if ((ERRORS > 0)); then
		say "$ERRORS run(s) had errors: these figures are not a result"
		exit 1
	fi
	if [[ $STRICT == yes && $missed -gt 0 ]]; then
		exit 2
	fi
	exit 0
}

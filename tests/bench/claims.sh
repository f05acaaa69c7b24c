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
#   4. the responder's peak RSS (VmHWM).
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

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)

DURATION=20 CONNS=32 THREADS=2 EXISTING=2000 STRICT=no
ENV_FILE=$ROOT/.dev/env
ARGS=("$@")

# Targets (issue 2).
TARGET_NEW=0.60 TARGET_EXISTING=2.00 TARGET_P99_MS=15 TARGET_RSS_MB=30

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'claims.sh: %s\n' "$*" >&2; exit 1; }

usage() {
	sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
}

while [[ $# -gt 0 ]]; do
	case $1 in
	--duration) DURATION=${2:?--duration needs seconds}; shift 2 ;;
	--connections) CONNS=${2:?--connections needs a number}; shift 2 ;;
	--threads) THREADS=${2:?--threads needs a number}; shift 2 ;;
	--existing) EXISTING=${2:?--existing needs a number}; shift 2 ;;
	--env) ENV_FILE=${2:?--env needs a file}; shift 2 ;;
	--strict) STRICT=yes; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; exit 1 ;;
	esac
done
for v in DURATION CONNS THREADS EXISTING; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer (got '${!v}')"
done
((DURATION >= 4)) || die "--duration must be at least 4 seconds"
((CONNS >= THREADS)) || die "--connections must be at least --threads"

# --- the stack -------------------------------------------------------------------

[[ -r $ENV_FILE ]] || die "$ENV_FILE not found: start the stack with ./dev up"
# shellcheck source=/dev/null
. "$ENV_FILE"
for v in ONCEGATE_URL ONCEGATE_API_KEY PGHOST PGPORT PGDATABASE PGUSER ONCEGATE_CONF; do
	[[ -n ${!v:-} ]] || die "$v is not set by $ENV_FILE"
	export "${v?}"
done

PGBENCH=$(command -v pgbench || true)
[[ -n $PGBENCH ]] || PGBENCH=/usr/lib/postgresql/15/bin/pgbench
for tool in wrk curl psql "$PGBENCH"; do
	command -v "$tool" >/dev/null || die "$tool is not installed"
done

curl -fsS -o /dev/null --max-time 5 "$ONCEGATE_URL/healthz" ||
	die "$ONCEGATE_URL/healthz is not healthy: is ./dev up running?"

# The state directory holds the config and the PID files.
STATE=$(dirname "$ONCEGATE_CONF")

# pid_file FILE NAME: the PID in FILE when that process runs program NAME.
pid_file() {
	local pid exe
	[[ -s $1 ]] || return 0
	pid=$(head -n1 "$1")
	[[ $pid =~ ^[0-9]+$ ]] || return 0
	exe=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 0
	[[ $exe == *"$2"* ]] && echo "$pid"
	return 0
}

FCGI_PID=$(pid_file "$STATE/fcgi.pid" oncegate-fcgi)
[[ -n $FCGI_PID ]] || FCGI_PID=$(pgrep -o -f "oncegate-fcgi -c $ONCEGATE_CONF" || true)
[[ -n $FCGI_PID ]] || die "no oncegate-fcgi process for $ONCEGATE_CONF"
PG_PID=$(pid_file "$STATE/pg/postmaster.pid" postgres)
NGINX_PID=$(pid_file "$STATE/nginx/nginx.pid" nginx)

RUN=$(date -u +%Y%m%dT%H%M%SZ)-$$
TMP=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-bench.XXXXXX")
BG_PID=''
BENCH_TABLE=no
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
	if [[ -n $BG_PID ]]; then kill "$BG_PID" 2>/dev/null || true; wait "$BG_PID" 2>/dev/null || true; fi
	if [[ $BENCH_TABLE == yes ]]; then
		psql -X -q -v ON_ERROR_STOP=1 -c 'DROP TABLE IF EXISTS bench_claims' >/dev/null 2>&1 ||
			printf 'claims.sh: could not drop table bench_claims\n' >&2
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The API key stays out of every command line: curl reads it from a file,
# wrk's script from the environment.
(umask 077 && printf 'Authorization: Bearer %s\n' "$ONCEGATE_API_KEY" >"$TMP/auth")

# --- CPU accounting ----------------------------------------------------------------

NPROC=$(nproc)

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
			fi
			[[ -n $group ]] && printf '%s %s %d\n' "$group" "$pid" $((a[11] + a[12]))
		done
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
			n = split("postgres nginx oncegate-fcgi client", order, " ")
			for (i = 1; i <= n; i++) {
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

# measure NAME CLIENT_NAME OUTFILE COMMAND...: runs COMMAND in the
# background with its output in OUTFILE, takes CPU snapshots 2 s after the
# start and 2 s before the end, and leaves the report in CPU_NAME.
declare -A CPU
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

# --- results -------------------------------------------------------------------------

ERRORS=0
ERRLOG=()
# fail MESSAGE: a run had errors; MESSAGE goes to stderr and into the table.
fail() {
	say "$1"
	ERRLOG+=("$1")
	ERRORS=$((ERRORS + 1))
}
declare -A RATE P50 P99 CMD

# ms MICROSECONDS: milliseconds with two decimals.
ms() { awk -v us="$1" 'BEGIN { printf "%.2f", us / 1000 }'; }

# wrk_run NAME MODE ARGS...: one wrk run of tests/bench/claims.lua.
wrk_run() {
	local name=$1 out=$TMP/wrk.$1 line rc=0
	shift
	local -a cmd=(wrk "-t$THREADS" "-c$CONNS" "-d${DURATION}s" --latency
		-s "$HERE/claims.lua" "$ONCEGATE_URL" -- "$@")
	CMD[$name]="ONCEGATE_API_KEY=… ${cmd[*]/#$ROOT\//}"
	say "oncegate, $name: ${CMD[$name]}"
	measure "$name" wrk "$out" "${cmd[@]}" || rc=$?
	line=$(grep '^bench-result ' "$out" || true)
	if [[ $rc -ne 0 || -z $line ]]; then
		fail "oncegate, $name: wrk failed (status $rc)"
		RATE[$name]=0 P50[$name]=0 P99[$name]=0
		return 0
	fi
	local requests duration p50 p99 bad errors
	read -r requests duration p50 p99 bad errors < <(
		sed -E 's/^bench-result requests=([0-9]+) duration_us=([0-9]+) p50_us=([0-9]+) p99_us=([0-9]+) bad=([0-9]+) errors=([0-9]+)$/\1 \2 \3 \4 \5 \6/' <<<"$line")
	if ((bad + errors > 0)); then
		fail "oncegate, $name: $bad unexpected answers, $errors socket errors (connect/read/write/timeout): not a result"
	fi
	RATE[$name]=$(awk -v r="$requests" -v b="$bad" -v d="$duration" 'BEGIN { printf "%.1f", (r - b) / (d / 1e6) }')
	P50[$name]=$(ms "$p50")
	P99[$name]=$(ms "$p99")
}

# pgbench_run NAME SCRIPT ARGS...: one pgbench run; per-transaction
# latencies are logged for the percentiles.
pgbench_run() {
	local name=$1 script=$2 out=$TMP/pgbench.$1 rc=0 tps failed
	shift 2
	local -a cmd=("$PGBENCH" -n -M prepared "-c$CONNS" "-j$THREADS" "-T$DURATION"
		-f "$HERE/$script" "$@" -l "--log-prefix=$TMP/pglog.$name")
	CMD[pg.$name]="${cmd[*]/#$ROOT\//}"
	CMD[pg.$name]=${CMD[pg.$name]/ -l --log-prefix=*/ -l}
	say "pgbench, $name: ${CMD[pg.$name]}"
	measure "pg.$name" pgbench "$out" "${cmd[@]}" || rc=$?
	tps=$(sed -nE 's/^tps = ([0-9.]+) .*/\1/p' "$out")
	failed=$(sed -nE 's/^number of failed transactions: ([0-9]+).*/\1/p' "$out")
	if [[ $rc -ne 0 || -z $tps || ${failed:-0} -ne 0 ]]; then
		fail "pgbench, $name: failed (status $rc, ${failed:-?} failed transactions)"
		tps=${tps:-0}
	fi
	RATE[pg.$name]=$tps
	# Third field of pgbench's per-transaction log: latency in microseconds.
	read -r "P50[pg.$name]" "P99[pg.$name]" < <(
		cat "$TMP/pglog.$name".* 2>/dev/null | awk '$3 ~ /^[0-9]+$/ { print $3 }' | sort -n |
			awk '{ v[NR] = $1 } END {
				if (NR == 0) { print "n/a n/a"; exit }
				i50 = int(NR * 0.50); if (i50 < 1) i50 = 1
				i99 = int(NR * 0.99); if (i99 < 1) i99 = 1
				printf "%.2f %.2f\n", v[i50] / 1000, v[i99] / 1000 }')
	rm -f "$TMP/pglog.$name".*
}

# --- 0. the machine ------------------------------------------------------------------

MODEL=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
[[ -n $MODEL ]] || MODEL=$(uname -m)
PGVERSION=$(psql -X -At -c 'SHOW server_version')
PGDURABLE=$(psql -X -At -c "SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'shared_buffers', 'max_connections')")
THREADS_CONF=$(sed -nE 's/^[[:space:]]*threads[[:space:]]*=[[:space:]]*([0-9]+).*/\1/p' "$ONCEGATE_CONF" | head -n1)
say "run $RUN: $NPROC CPUs ($MODEL), kernel $(uname -r), PostgreSQL $PGVERSION"
# Other work on the machine skews every figure: say so in the table.
BUSY_BEFORE=$(machine_busy 2)
say "machine busy before the first run: $BUSY_BEFORE %"

# --- 1. oncegate, new keys -----------------------------------------------------------

wrk_run new new "$RUN"

# --- 2. oncegate, existing keys in state completed -----------------------------------

# setup_key I: claim bench:RUN:done:I and report it completed. Runs in the
# bash processes xargs starts.
# shellcheck disable=SC2317
setup_key() {
	local i=$1 key resp code owner version
	key=bench:$RUN:done:$i
	resp=$(curl -sS --max-time 10 -w '\n%{http_code}' -H @"$TMP/auth" \
		-H 'Content-Type: application/json' -X POST "$ONCEGATE_URL/v1/runs" \
		-d "{\"key\":\"$key\",\"payload\":{\"lead\":$i,\"source\":\"bench\"},\"workflow_version\":\"bench@1\",\"trigger\":\"bench\"}") || return 1
	code=${resp##*$'\n'}
	[[ $code == 201 && $resp =~ \"lease_owner\":\"([0-9a-f-]{36})\" ]] ||
		{ printf 'claim %s: %s\n' "$key" "$resp" >&2; return 1; }
	owner=${BASH_REMATCH[1]}
	[[ $resp =~ \"version\":([0-9]+) ]] || { printf 'claim %s: no version\n' "$key" >&2; return 1; }
	version=${BASH_REMATCH[1]}
	resp=$(curl -sS --max-time 10 -w '\n%{http_code}' -H @"$TMP/auth" \
		-H 'Content-Type: application/json' -X POST "$ONCEGATE_URL/v1/runs/$key/transition" \
		-d "{\"lease_owner\":\"$owner\",\"version\":$version,\"to\":\"completed\",\"result\":{\"ok\":true}}") || return 1
	code=${resp##*$'\n'}
	[[ $code == 200 ]] || { printf 'transition %s: %s\n' "$key" "$resp" >&2; return 1; }
}
export -f setup_key
export RUN TMP

say "creating $EXISTING completed runs bench:$RUN:done:1..$EXISTING through the API"
start=$SECONDS
# 255 makes xargs stop at the first failure.
# shellcheck disable=SC2016  # expanded by the inner bash
seq 1 "$EXISTING" | xargs -P 8 -n 50 bash -c 'for i; do setup_key "$i" || exit 255; done' _ ||
	die "creating the completed runs failed"
got=$(psql -X -At -v ON_ERROR_STOP=1 -c "SELECT count(*) FROM workflow_runs
	WHERE idempotency_key LIKE 'bench:$RUN:done:%' AND state = 'completed'")
[[ $got == "$EXISTING" ]] || die "expected $EXISTING completed runs, found $got"
say "created in $((SECONDS - start)) s"

wrk_run existing existing "$RUN" "$EXISTING"

# --- 3. pgbench, the bare statement ---------------------------------------------------

# The seed's table (shared/seeds), apart from the product's tables.
HASH=sha256:$(printf '{"lead":1,"source":"bench"}' | sha256sum | cut -c1-64)
say "creating table bench_claims with $EXISTING completed rows"
BENCH_TABLE=yes
psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<-EOF
	SET client_min_messages = warning;
	DROP TABLE IF EXISTS bench_claims;
	CREATE TABLE bench_claims (
	  idempotency_key text PRIMARY KEY,
	  state text NOT NULL CHECK (state IN (
	    'processing', 'awaiting_human', 'approved',
	    'completed', 'failed_retryable', 'failed_terminal'
	  )),
	  payload_hash text NOT NULL,
	  lease_owner uuid,
	  lease_expires_at timestamptz,
	  version bigint NOT NULL DEFAULT 0,
	  result jsonb,
	  updated_at timestamptz NOT NULL DEFAULT now()
	);
	INSERT INTO bench_claims (idempotency_key, state, payload_hash, version, result)
	SELECT 'bench:done:' || i, 'completed', '$HASH', 2, '{"ok": true}'
	FROM generate_series(1, $EXISTING) AS i;
	ANALYZE bench_claims;
EOF

pgbench_run new claim_new.sql -D "run=$RUN" -D n=0 -D "hash=$HASH"
pgbench_run existing claim_existing.sql -D "count=$EXISTING" -D "hash=$HASH"

psql -X -q -v ON_ERROR_STOP=1 -c 'DROP TABLE bench_claims' >/dev/null
BENCH_TABLE=no

# --- 4. the responder's memory ----------------------------------------------------------

HWM_KB=$(sed -nE 's/^VmHWM:[[:space:]]+([0-9]+) kB/\1/p' "/proc/$FCGI_PID/status" 2>/dev/null || true)
RSS_KB=$(sed -nE 's/^VmRSS:[[:space:]]+([0-9]+) kB/\1/p' "/proc/$FCGI_PID/status" 2>/dev/null || true)
[[ -n $HWM_KB ]] || { fail "oncegate-fcgi (pid $FCGI_PID) is gone"; HWM_KB=0 RSS_KB=0; }

# --- the table ----------------------------------------------------------------------------

# verdict VALUE OP TARGET: "ok" or "MISS".
verdict() {
	if awk -v v="$1" -v t="$3" -v op="$2" 'BEGIN { exit !(op == ">=" ? v >= t : v < t) }'; then
		echo ok
	else
		echo MISS
	fi
}

{
	printf '%-20s %17s %7s %7s %12s %7s %7s %6s %8s\n' case 'oncegate claims/s' 'p50 ms' 'p99 ms' \
		'pgbench tps' 'p50 ms' 'p99 ms' ratio target
	for name in new existing; do
		if [[ $name == new ]]; then label='new keys' target=$TARGET_NEW
		else label='existing (terminal)' target=$TARGET_EXISTING; fi
		ratio=$(awk -v a="${RATE[$name]}" -v b="${RATE[pg.$name]}" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
		v=$(verdict "$ratio" '>=' "$target")
		p=$(verdict "${P99[$name]}" '<' "$TARGET_P99_MS")
		printf '%-20s %17s %7s %7s %12.1f %7s %7s %6s %8s  %s, p99 %s\n' "$label" "${RATE[$name]}" \
			"${P50[$name]}" "${P99[$name]}" "${RATE[pg.$name]}" "${P50[pg.$name]}" \
			"${P99[pg.$name]}" "$ratio" ">= $target" "$v" "$p"
	done
	hwm=$(awk -v k="$HWM_KB" 'BEGIN { printf "%.1f", k / 1024 }')
	printf '%-20s %s MB (now %s MB; target < %s MB)  %s\n' 'responder peak RSS' "$hwm" \
		"$(awk -v k="$RSS_KB" 'BEGIN { printf "%.1f", k / 1024 }')" "$TARGET_RSS_MB" \
		"$(verdict "$hwm" '<' "$TARGET_RSS_MB")"
	echo
	echo "p99 target < $TARGET_P99_MS ms (oncegate). CPU in the middle of each run, % of one core (machine: $((NPROC * 100))%):"
	printf '  oncegate new       %s\n' "${CPU[new]}"
	printf '  oncegate existing  %s\n' "${CPU[existing]}"
	printf '  pgbench new        %s\n' "${CPU[pg.new]}"
	printf '  pgbench existing   %s\n' "${CPU[pg.existing]}"
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
	echo "run:      $RUN"
	echo "command:  tests/bench/claims.sh ${ARGS[*]}"
	printf '          %s\n' "${CMD[new]}" "${CMD[existing]}" "${CMD[pg.new]}" "${CMD[pg.existing]}"
} >"$TMP/table"
cat "$TMP/table"
MISSED=$(grep -c MISS "$TMP/table" || true)

if ((ERRORS > 0)); then
	say "$ERRORS run(s) had errors: these figures are not a result"
	exit 1
fi
if [[ $STRICT == yes && $MISSED -gt 0 ]]; then
	exit 2
fi
exit 0

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

# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

DURATION=20 CONNS=32 THREADS=2 EXISTING=2000

# Targets (issue 2).
TARGET_NEW=0.60 TARGET_EXISTING=2.00 TARGET_P99_MS=15 TARGET_RSS_MB=30

bench_option() {
	case $1 in
	--existing) EXISTING=${2:?--existing needs a number}; SHIFT=2 ;;
	*) return 1 ;;
	esac
}
parse_options "$@"
check_options EXISTING

load_stack

BENCH_TABLE=no
# shellcheck disable=SC2317  # called by the EXIT trap
bench_cleanup() {
	if [[ $BENCH_TABLE == yes ]]; then
		psql -X -q -v ON_ERROR_STOP=1 -c 'DROP TABLE IF EXISTS bench_claims' >/dev/null 2>&1 ||
			printf 'claims.sh: could not drop table bench_claims\n' >&2
	fi
}
start_run

# --- 0. the machine ------------------------------------------------------------------

describe_machine

# --- 1. oncegate, new keys -----------------------------------------------------------

# claims.lua reads the API key from the environment.
CMD_ENV='ONCEGATE_API_KEY=… '
wrk_run new "$ONCEGATE_URL" claims.lua new "$RUN"

# --- 2. oncegate, existing keys in state completed -----------------------------------

# setup_key I: claim bench:RUN:done:I and report it completed. Runs in the
# bash processes parallel_setup starts.
# shellcheck disable=SC2317
setup_key() {
	local i=$1 key resp
	key=bench:$RUN:done:$i
	resp=$(api_claim_then "$key" "{\"lead\":$i,\"source\":\"bench\"}" transition \
		'"to":"completed","result":{"ok":true}') || return 1
	[[ ${resp##*$'\n'} == 200 ]] || { printf 'transition %s: %s\n' "$key" "$resp" >&2; return 1; }
}

say "creating $EXISTING completed runs bench:$RUN:done:1..$EXISTING through the API"
start=$SECONDS
parallel_setup "$EXISTING" setup_key || die "creating the completed runs failed"
got=$(q "SELECT count(*) FROM workflow_runs
	WHERE idempotency_key LIKE 'bench:$RUN:done:%' AND state = 'completed'")
[[ $got == "$EXISTING" ]] || die "expected $EXISTING completed runs, found $got"
say "created in $((SECONDS - start)) s"

wrk_run existing "$ONCEGATE_URL" claims.lua existing "$RUN" "$EXISTING"

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

pgbench_run pg.new new claim_new.sql -D "run=$RUN" -D n=0 -D "hash=$HASH"
pgbench_run pg.existing existing claim_existing.sql -D "count=$EXISTING" -D "hash=$HASH"

psql -X -q -v ON_ERROR_STOP=1 -c 'DROP TABLE bench_claims' >/dev/null
BENCH_TABLE=no

# --- 4. the responder's memory ----------------------------------------------------------

HWM_KB=$(sed -nE 's/^VmHWM:[[:space:]]+([0-9]+) kB/\1/p' "/proc/$FCGI_PID/status" 2>/dev/null || true)
RSS_KB=$(sed -nE 's/^VmRSS:[[:space:]]+([0-9]+) kB/\1/p' "/proc/$FCGI_PID/status" 2>/dev/null || true)
[[ -n $HWM_KB ]] || { fail "oncegate-fcgi (pid $FCGI_PID) is gone"; HWM_KB=0 RSS_KB=0; }

# --- the table ----------------------------------------------------------------------------

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
	table_footer
	echo "run:      $RUN"
	echo "command:  tests/bench/claims.sh ${ARGS[*]}"
	printf '          %s\n' "${CMD[new]}" "${CMD[existing]}" "${CMD[pg.new]}" "${CMD[pg.existing]}"
} >"$TMP/table"
finish

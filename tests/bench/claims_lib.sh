# shellcheck shell=bash
# The results and targets are read by the scripts' tables, and the arrays
# they go into are common.sh's:
# shellcheck disable=SC2034,SC2154
# claims_lib.sh — the phases of the claim benchmark (issue 2), shared by
# tests/bench/claims.sh and tests/bench/run.sh. Sourced after common.sh; it
# defines functions and the targets and runs nothing.
#
# Each phase uses DURATION, CONNS and THREADS as they are when it is called,
# RUN and TMP (start_run), and EXISTING (the number of completed keys). The
# results go into common.sh's arrays under the names
#   new, existing         wrk through nginx: POST /v1/runs;
#   pg.new, pg.existing   pgbench -M prepared: the bare claim statement.

# Targets (issue 2): oncegate's rate as a share of the bare statement's,
# oncegate's p99, the responder's peak RSS.
TARGET_NEW=0.60 TARGET_EXISTING=2.00 TARGET_CLAIM_P99_MS=15 TARGET_FCGI_RSS_MB=30

CLAIMS_TABLE=no
# shellcheck disable=SC2317  # called by the EXIT trap
claims_cleanup() {
	if [[ $CLAIMS_TABLE == yes ]]; then
		psql -X -q -v ON_ERROR_STOP=1 -c 'DROP TABLE IF EXISTS bench_claims' >/dev/null 2>&1 ||
			printf '%s: could not drop table bench_claims\n' "$PROG" >&2
		CLAIMS_TABLE=no
	fi
}
at_exit claims_cleanup

# claims_run_new: wrk, POST /v1/runs with keys never used (bench:RUN:T:N),
# every answer 201 "claimed".
claims_run_new() {
	# claims.lua reads the API key from the environment.
	CMD_ENV='ONCEGATE_API_KEY=… ' wrk_run new "$ONCEGATE_URL" claims.lua new "$RUN"
}

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

# claims_setup_existing: EXISTING runs bench:RUN:done:1..EXISTING in state
# completed, through the API.
claims_setup_existing() {
	local start got
	say "creating $EXISTING completed runs bench:$RUN:done:1..$EXISTING through the API"
	start=$SECONDS
	parallel_setup "$EXISTING" setup_key || die "creating the completed runs failed"
	got=$(q "SELECT count(*) FROM workflow_runs
		WHERE idempotency_key LIKE 'bench:$RUN:done:%' AND state = 'completed'")
	[[ $got == "$EXISTING" ]] || die "expected $EXISTING completed runs, found $got"
	say "created in $((SECONDS - start)) s"
}

# claims_run_existing: wrk, POST /v1/runs cycling through the completed
# keys of claims_setup_existing, every answer 200 "duplicate".
claims_run_existing() {
	CMD_ENV='ONCEGATE_API_KEY=… ' wrk_run existing "$ONCEGATE_URL" claims.lua existing "$RUN" "$EXISTING"
}

# claims_pgbench: the seed's table bench_claims (shared/seeds) beside the
# product's, with EXISTING completed rows; pgbench runs the bare claim for
# new keys (pg.new) and for the existing keys (pg.existing); the table is
# dropped.
claims_pgbench() {
	local hash
	hash=sha256:$(printf '{"lead":1,"source":"bench"}' | sha256sum | cut -c1-64)
	say "creating table bench_claims with $EXISTING completed rows"
	CLAIMS_TABLE=yes
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
		SELECT 'bench:done:' || i, 'completed', '$hash', 2, '{"ok": true}'
		FROM generate_series(1, $EXISTING) AS i;
		ANALYZE bench_claims;
	EOF
	pgbench_run pg.new new claim_new.sql -D "run=$RUN" -D n=0 -D "hash=$hash"
	pgbench_run pg.existing existing claim_existing.sql -D "count=$EXISTING" -D "hash=$hash"
	psql -X -q -v ON_ERROR_STOP=1 -c 'DROP TABLE bench_claims' >/dev/null
	CLAIMS_TABLE=no
}

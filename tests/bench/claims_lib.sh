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
# Against the ceiling of the architecture (the same nginx → a minimal
# libfcgi responder → libpq): the share of its rate, and oncegate's p99.
TARGET_CEIL_NEW=0.80 TARGET_CEIL_NEW_P99_MS=10 TARGET_CEIL_EXISTING=0.80 TARGET_CEIL_EXISTING_P99_MS=5

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

# claims_table: the seed's table bench_claims (shared/seeds) beside the
# product's, with EXISTING completed rows for pgbench (bench:done:I) and as
# many for the primary-key ceiling (bench:RUNc:done:I, the keys claims.lua
# asks for with run RUNc).
claims_table() {
	local hash
	hash=sha256:$(printf '{"lead":1,"source":"bench"}' | sha256sum | cut -c1-64)
	CLAIMS_HASH=$hash
	say "creating table bench_claims with 2 x $EXISTING completed rows"
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
		SELECT k || i, 'completed', '$hash', 2, '{"ok": true}'
		FROM generate_series(1, $EXISTING) AS i,
		     (VALUES ('bench:done:'), ('bench:${RUN}c:done:')) AS p (k);
		ANALYZE bench_claims;
	EOF
}

# claims_table_drop: drops bench_claims.
claims_table_drop() {
	psql -X -q -v ON_ERROR_STOP=1 -c 'DROP TABLE bench_claims' >/dev/null
	CLAIMS_TABLE=no
}

# claims_pgbench: pgbench runs the bare claim on bench_claims (claims_table)
# for new keys (pg.new) and for the existing keys (pg.existing).
claims_pgbench() {
	claim_script claim_new 'n :n + 1' "'bench:' || :run::text || ':' || :client_id::text || ':' || :n::text"
	claim_script claim_existing 'k random(1, :count)' "'bench:' || 'done:' || :k::text"
	pgbench_run pg.new new "$TMP/claim_new.sql" -D "run=$RUN" -D n=0 -D "hash=$CLAIMS_HASH"
	pgbench_run pg.existing existing "$TMP/claim_existing.sql" -D "count=$EXISTING" \
		-D "hash=$CLAIMS_HASH"
}

# claim_script NAME SET KEY: the pgbench script $TMP/NAME.sql of claim.sql,
# the line \set SET first and KEY (an SQL expression) for its key.
claim_script() {
	{
		printf '\\set %s\n' "$2"
		grep -v '^--' "$HERE/claim.sql" | sed "s#@KEY@#$3#"
	} >"$TMP/$1.sql"
}

# --- the ceiling: nginx → a minimal libfcgi responder → libpq --------------------------

CEIL_DIR='' CEIL_NGX_PID='' CEIL_PID=''
# shellcheck disable=SC2317  # called by the EXIT trap
ceiling_cleanup() {
	ceiling_stop_responder
	if [[ -n $CEIL_NGX_PID ]]; then
		nginx_stop "$CEIL_NGX_PID" "$CEIL_DIR"
		CEIL_NGX_PID=''
	fi
	[[ -n $CEIL_DIR ]] && rm -rf "$CEIL_DIR"
	CEIL_DIR=''
}
at_exit ceiling_cleanup

# ceiling_stop_responder: stops the ceiling responder ceiling_start started.
ceiling_stop_responder() {
	[[ -n $CEIL_PID ]] || return 0
	peak_note ceiling "$CEIL_PID"
	# SIGKILL: libfcgi takes SIGTERM as "finish after the next request".
	kill -KILL "$CEIL_PID" 2>/dev/null || true
	wait "$CEIL_PID" 2>/dev/null || true
	CEIL_PID=''
	rm -f "$CEIL_DIR/fcgi.sock"
}

# ceiling_start NAME: builds tests/bench/ceiling_NAME.c (once) and starts it
# on CEIL_DIR/fcgi.sock, with the stack's PG* environment.
ceiling_start() {
	local bin=$CEIL_DIR/ceiling_$1 i
	if [[ ! -x $bin ]]; then
		# shellcheck disable=SC2046  # pkg-config's words
		gcc -std=gnu11 -O2 -Wall -Wextra -Werror -pthread $(pkg-config --cflags libpq) \
			"$HERE/ceiling_$1.c" -lfcgi $(pkg-config --libs libpq) -o "$bin" ||
			die "building tests/bench/ceiling_$1.c failed (libfcgi-dev, libpq-dev)"
	fi
	"$bin" "$CEIL_DIR/fcgi.sock" 2>"$CEIL_DIR/ceiling_$1.log" &
	CEIL_PID=$!
	for ((i = 0; i < 50; i++)); do
		[[ -S $CEIL_DIR/fcgi.sock ]] && return 0
		sleep 0.1
	done
	die "ceiling_$1 did not start: $(cat "$CEIL_DIR/ceiling_$1.log")"
}

# claims_ceiling: a private nginx from the stack's config (upstream_nginx:
# its upstream the ceiling's socket), then wrk with claims.lua exactly
# as for oncegate: new keys against ceiling_claim (ceil.new), the completed
# keys bench:RUNc:done:I of claims_table against ceiling_select
# (ceil.existing). The CPU accounting counts the ceiling responder and the
# private nginx in the places of oncegate-fcgi and the stack's nginx.
claims_ceiling() {
	local port saved_fcgi=$FCGI_PID
	CEIL_DIR=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-bench-ceiling.XXXXXX")
	chmod 755 "$CEIL_DIR"
	upstream_nginx "$CEIL_DIR" "$CEIL_DIR/fcgi.sock"
	port=$UP_PORT CEIL_NGX_PID=$UP_NGX_PID NGINX_PID=$UP_NGX_PID
	ceiling_start claim
	FCGI_PID=$CEIL_PID
	CMD_ENV='ONCEGATE_API_KEY=… ' wrk_run ceil.new "http://127.0.0.1:$port" claims.lua new "${RUN}c"
	ceiling_stop_responder
	ceiling_start select
	FCGI_PID=$CEIL_PID
	CMD_ENV='ONCEGATE_API_KEY=… ' wrk_run ceil.existing "http://127.0.0.1:$port" claims.lua existing "${RUN}c" "$EXISTING"
	ceiling_cleanup
	FCGI_PID=$saved_fcgi NGINX_PID=$STACK_NGINX_PID
}

# --- through PgBouncer --------------------------------------------------------------

# shellcheck disable=SC2317  # called by the EXIT trap
pgbouncer_cleanup() {
	[[ -n $POOL_FCGI_PID ]] && peak_note oncegate-fcgi-pgbouncer "$POOL_FCGI_PID"
	pooled_stop
	PGB_PID=''
}
at_exit pgbouncer_cleanup

# claims_pgbouncer: oncegate through PgBouncer (pooled_start: PgBouncer in
# transaction mode, a second oncegate-fcgi from the stack's build and config
# with pooled_database, a private nginx in front of it), then wrk with
# claims.lua as for the stack: new keys (pgb.new), the completed keys of
# claims_setup_existing (pgb.existing). PgBouncer's CPU is counted as
# pgbouncer. Skipped (the table says so) when pgbouncer is not installed.
claims_pgbouncer() {
	local saved_fcgi=$FCGI_PID
	if ! command -v pgbouncer >/dev/null && [[ ! -x /usr/sbin/pgbouncer ]]; then
		say "pgbouncer is not installed (Debian package pgbouncer): no row through PgBouncer"
		PGB_NOTE='not run: pgbouncer is not installed'
		return 0
	fi
	pooled_start "$(tr '\0' '\n' <"/proc/$FCGI_PID/cmdline" | head -n1)"
	PGB_PID=$POOL_PGB_PID PGB_NOTE=$POOL_NOTE
	NGINX_PID=$POOL_NGX_PID FCGI_PID=$POOL_FCGI_PID
	CMD_ENV='ONCEGATE_API_KEY=… ' wrk_run pgb.new "$POOL_URL" claims.lua new "${RUN}p"
	CMD_ENV='ONCEGATE_API_KEY=… ' wrk_run pgb.existing "$POOL_URL" claims.lua existing "$RUN" "$EXISTING"
	FCGI_PID=$saved_fcgi NGINX_PID=$STACK_NGINX_PID
	pgbouncer_cleanup
}

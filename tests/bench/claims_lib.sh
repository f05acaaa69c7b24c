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
	pgbench_run pg.new new claim_new.sql -D "run=$RUN" -D n=0 -D "hash=$CLAIMS_HASH"
	pgbench_run pg.existing existing claim_existing.sql -D "count=$EXISTING" -D "hash=$CLAIMS_HASH"
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

# upstream_nginx DIR SOCKET: a private nginx in DIR from the stack's config,
# its upstream SOCKET and nothing else changed; its port in UP_PORT, its
# master's PID in UP_NGX_PID.
upstream_nginx() {
	local dir=$1 sock=$2 port
	port=$(free_port 18180) || die "no free loopback port for a private nginx"
	UP_PORT=$port
	mkdir -p "$dir/tmp"
	chmod 755 "$dir/tmp"
	nginx_copy "$dir" "$port" \
		-e "s#^([[:space:]]*server[[:space:]]+unix:)[^;]+;#\\1$sock;#" >"$dir/nginx.conf"
	chmod 644 "$dir/nginx.conf"
	grep -qF "unix:$sock;" "$dir/nginx.conf" ||
		die "the private nginx config names no upstream socket: the stack's nginx config changed shape"
	UP_NGX_PID=$(nginx_start "$dir") || die "the private nginx in $dir did not start"
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

PGB_DIR='' PGB_PID='' PGB_FCGI_PID='' PGB_NGX_PID=''
# shellcheck disable=SC2317  # called by the EXIT trap
pgbouncer_cleanup() {
	if [[ -n $PGB_FCGI_PID ]]; then
		peak_note oncegate-fcgi-pgbouncer "$PGB_FCGI_PID"
		kill -TERM "$PGB_FCGI_PID" 2>/dev/null || true
		wait "$PGB_FCGI_PID" 2>/dev/null || true
		PGB_FCGI_PID=''
	fi
	if [[ -n $PGB_NGX_PID ]]; then
		nginx_stop "$PGB_NGX_PID" "$PGB_DIR"
		PGB_NGX_PID=''
	fi
	if [[ -n $PGB_PID ]]; then
		kill -TERM "$PGB_PID" 2>/dev/null || true
		PGB_PID=''
	fi
	[[ -n $PGB_DIR ]] && rm -rf "$PGB_DIR"
	PGB_DIR=''
}
at_exit pgbouncer_cleanup

# claims_pgbouncer: PgBouncer (transaction pooling, 20 server connections,
# SCRAM against a userlist of the stack's secret, 0600) in front of the
# stack's PostgreSQL; a second oncegate-fcgi from the stack's build and
# config with pooled_database pointing at it (unnamed statements) and its
# own socket and log; a private nginx from the stack's config in front of
# it; then wrk with claims.lua as for the stack: new keys (pgb.new), the
# completed keys of claims_setup_existing (pgb.existing). Skipped (the row
# says so) when pgbouncer is not installed.
claims_pgbouncer() {
	local bin pw pgb_port i saved_fcgi=$FCGI_PID fcgi
	bin=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
	if [[ ! -x $bin ]]; then
		say "pgbouncer is not installed (Debian package pgbouncer): no row through PgBouncer"
		PGB_NOTE='not run: pgbouncer is not installed'
		return 0
	fi
	fcgi=$(tr '\0' '\n' <"/proc/$FCGI_PID/cmdline" | head -n1)
	pw=$(cut -d: -f5- "$PGPASSFILE")
	pgb_port=$(free_port 16432) || die "no free loopback port for pgbouncer"
	PGB_DIR=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-bench-pgbouncer.XXXXXX")
	# nginx's workers reach the responder's socket in here; the secrets are 0600.
	chmod 711 "$PGB_DIR"
	(
		umask 077
		printf '"%s" "%s"\n' "$PGUSER" "$pw" >"$PGB_DIR/userlist.txt"
		printf '127.0.0.1:%s:*:%s:%s\n' "$pgb_port" "$PGUSER" "$pw" >"$PGB_DIR/pgpass"
	)
	cat >"$PGB_DIR/pgbouncer.ini" <<-EOF
		[databases]
		$PGDATABASE = host=127.0.0.1 port=$PGPORT dbname=$PGDATABASE connect_query='SET statement_timeout = 10000; SET idle_in_transaction_session_timeout = 30000; SET client_min_messages = warning'
		[pgbouncer]
		listen_addr = 127.0.0.1
		listen_port = $pgb_port
		unix_socket_dir =
		auth_type = scram-sha-256
		auth_file = $PGB_DIR/userlist.txt
		pool_mode = transaction
		default_pool_size = 20
		max_client_conn = 200
		logfile = $PGB_DIR/pgbouncer.log
		pidfile = $PGB_DIR/pgbouncer.pid
		log_connections = 0
		log_disconnections = 0
	EOF
	chown postgres: "$PGB_DIR/userlist.txt" "$PGB_DIR/pgbouncer.ini"
	chown postgres: "$PGB_DIR"
	runuser -u postgres -- "$bin" -d "$PGB_DIR/pgbouncer.ini" || die "pgbouncer did not start ($PGB_DIR/pgbouncer.log)"
	for ((i = 0; i < 50; i++)); do
		[[ -s $PGB_DIR/pgbouncer.pid ]] && break
		sleep 0.1
	done
	PGB_PID=$(head -n1 "$PGB_DIR/pgbouncer.pid")
	# The stack's config, these three first (before any [section]).
	{
		printf 'listen = %s\nlog_file = %s\n' "$PGB_DIR/fcgi.sock" "$PGB_DIR/decisions.log"
		printf 'pooled_database = "host=127.0.0.1 port=%s dbname=%s user=%s passfile=%s"\n' \
			"$pgb_port" "$PGDATABASE" "$PGUSER" "$PGB_DIR/pgpass"
		sed -E -e '/^[[:space:]]*(listen|log_file|pooled_database)[[:space:]]*=/d' "$ONCEGATE_CONF"
	} >"$PGB_DIR/oncegate.conf"
	chmod 600 "$PGB_DIR/oncegate.conf"
	"$fcgi" -c "$PGB_DIR/oncegate.conf" </dev/null >"$PGB_DIR/fcgi.stderr" 2>&1 &
	PGB_FCGI_PID=$!
	for ((i = 0; i < 100; i++)); do
		[[ -S $PGB_DIR/fcgi.sock ]] && break
		sleep 0.1
	done
	[[ -S $PGB_DIR/fcgi.sock ]] || die "oncegate-fcgi through pgbouncer did not start: $(tail -n5 "$PGB_DIR/fcgi.stderr")"
	upstream_nginx "$PGB_DIR" "$PGB_DIR/fcgi.sock"
	PGB_NGX_PID=$UP_NGX_PID NGINX_PID=$UP_NGX_PID FCGI_PID=$PGB_FCGI_PID
	PGB_NOTE="PgBouncer $("$bin" --version 2>&1 | head -n1 | awk '{ print $2 }'), pool_mode transaction, default_pool_size 20; a second oncegate-fcgi (threads as the stack's) with pooled_database; its own private nginx"
	CMD_ENV='ONCEGATE_API_KEY=… ' wrk_run pgb.new "http://127.0.0.1:$UP_PORT" claims.lua new "${RUN}p"
	CMD_ENV='ONCEGATE_API_KEY=… ' wrk_run pgb.existing "http://127.0.0.1:$UP_PORT" claims.lua existing "$RUN" "$EXISTING"
	FCGI_PID=$saved_fcgi NGINX_PID=$STACK_NGINX_PID
	pgbouncer_cleanup
}

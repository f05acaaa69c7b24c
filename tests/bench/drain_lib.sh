# shellcheck shell=bash
# The results and targets are read by the scripts' tables, and the arrays
# they go into are common.sh's:
# shellcheck disable=SC2034,SC2154,SC2004
# drain_lib.sh — the phases of the dispatcher benchmark (issue 4), shared by
# tests/bench/drain.sh and tests/bench/run.sh. Sourced after common.sh; it
# defines functions and the targets and runs nothing. The script calls
# drain_init after load_stack and start_run, then drain_pgbench and
# drain_dispatch in any order; each phase starts from a full outbox.
#
# drain_init starts the sink (a private nginx on loopback that answers
# every POST 201 with an id and logs each request's Idempotency-Key) and
# creates a scratch database (oncegate_drain_RUN) on the stack's cluster,
# migrated with the product's own migrations, so that the stack's own
# dispatcher never sees these effects; it is dropped at exit. Each phase
# uses DURATION, CONNS (pgbench clients = dispatcher workers per process)
# and THREADS as they are when it is called, EFFECTS (the outbox at the
# start of each phase) and WINDOW (seconds: the first and the last WINDOW
# seconds are compared; 30 unless set). Results, under the names drain.pg,
# drain.1, drain.4 (drain.N: N dispatchers):
#   MEAN, FIRST, LAST        effects/s: over the phase, its first and its
#                            last WINDOW seconds before the queue ran dry;
#   RSS_WARM, RSS_END        the dispatchers' resident memory together (kB)
#                            after 10 s and at the end;
#   SENT, DUPS, DONE_DB      what the sink received, how many of those keys
#                            more than once, the effects completed;
#   CMD                      the command line;
# and the dispatchers' VmHWM in PEAK_KB[oncegate-dispatch].

# Targets (issue 4): one dispatcher at least half pgbench's rate; the last
# WINDOW seconds within 20% of the first; nothing sent twice; RSS flat after
# warm-up (grown by less than 10%).
TARGET_DRAIN=0.50 TARGET_DRAIN_HOLD=0.80

DRAIN_SINK_DIR='' DRAIN_SINK_PID='' DRAIN_DB='' DISPATCH_PIDS=()
declare -A FIRST LAST MEAN RSS_WARM RSS_END SENT DUPS DONE_DB

# The scratch database belongs to the stack's role; creating it takes the
# cluster's superuser (the stack trusts local connections).
admin_psql() {
	runuser -u postgres -- env -C / psql -X -q -At -v ON_ERROR_STOP=1 \
		-h "$PGHOST" -p "$PGPORT" -U postgres -d postgres "$@"
}
dq() { psql -X -At -v ON_ERROR_STOP=1 -d "$DRAIN_DB" -c "$1"; }

# shellcheck disable=SC2317  # called by the EXIT trap
drain_cleanup() {
	local pid
	for pid in "${DISPATCH_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${DISPATCH_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	DISPATCH_PIDS=()
	nginx_stop "$DRAIN_SINK_PID" "$DRAIN_SINK_DIR"
	[[ -n $DRAIN_SINK_DIR ]] && rm -rf "$DRAIN_SINK_DIR"
	DRAIN_SINK_PID='' DRAIN_SINK_DIR=''
	if [[ -n $DRAIN_DB ]]; then
		admin_psql -c "DROP DATABASE IF EXISTS $DRAIN_DB" 2>/dev/null ||
			printf '%s: could not drop database %s\n' "$PROG" "$DRAIN_DB" >&2
		DRAIN_DB=''
	fi
}
at_exit drain_cleanup

# drain_init: the programs (DISPATCH, CTL), the sink, the scratch database
# and its configuration (TMP/drain.conf).
drain_init() {
	local port
	DISPATCH=$ROOT/.dev/build/oncegate-dispatch
	CTL=$ROOT/.dev/build/oncegatectl
	[[ -x $DISPATCH && -x $CTL ]] || die "$DISPATCH not built: run ./dev up"
	WINDOW=${WINDOW:-30}

	# The sink: nginx answering every POST 201 with an id.
	port=$(free_port 18480) || die "no free loopback port for the sink"
	DRAIN_SINK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-drain-sink.XXXXXX")
	chmod 755 "$DRAIN_SINK_DIR"
	cat >"$DRAIN_SINK_DIR/nginx.conf" <<-EOF
		worker_processes 1;
		pid $DRAIN_SINK_DIR/nginx.pid;
		error_log $DRAIN_SINK_DIR/error.log warn;
		events { worker_connections 1024; }
		http {
		    access_log off;
		    client_body_temp_path $DRAIN_SINK_DIR;
		    proxy_temp_path $DRAIN_SINK_DIR;
		    fastcgi_temp_path $DRAIN_SINK_DIR;
		    uwsgi_temp_path $DRAIN_SINK_DIR;
		    scgi_temp_path $DRAIN_SINK_DIR;
		    log_format keys '\$http_idempotency_key';
		    server {
		        listen 127.0.0.1:$port;
		        client_body_buffer_size 64k;
		        location / {
		            access_log $DRAIN_SINK_DIR/keys.log keys buffer=256k flush=1s;
		            default_type application/json;
		            add_header X-Provider-Id \$request_id;
		            return 201 '{"id":"\$request_id","ok":true}';
		        }
		    }
		}
	EOF
	chmod 644 "$DRAIN_SINK_DIR/nginx.conf"
	DRAIN_SINK_PID=$(nginx_start "$DRAIN_SINK_DIR") || die "the sink did not start"
	say "sink: nginx on 127.0.0.1:$port (pid $DRAIN_SINK_PID)"

	# The scratch database.
	DRAIN_DB=oncegate_drain_${RUN//[^a-zA-Z0-9]/_}
	DRAIN_DB=${DRAIN_DB,,}
	say "scratch database $DRAIN_DB"
	admin_psql -c "CREATE DATABASE $DRAIN_DB OWNER $PGUSER" || die "creating database $DRAIN_DB failed"
	DRAIN_CONF=$TMP/drain.conf
	cat >"$DRAIN_CONF" <<-EOF
		# tests/bench/drain_lib.sh: the benchmark's dispatchers and the scratch database.
		database = "host=$PGHOST port=$PGPORT dbname=$DRAIN_DB user=$PGUSER"
		sql_dir = $ROOT/sql
		# each payload is checked against its run's contract before the send
		contracts_dir = $ROOT/contracts
		log_file = $TMP/decisions.log
		log_level = info
		dispatch_workers = $CONNS
		dispatch_poll_ms = 200

		[target bench_sink]
		kind = http
		url = http://127.0.0.1:$port/effects
		idempotency_key = ${DRAIN_KEYS:-1}
		provider_id_header = X-Provider-Id
	EOF
	"$CTL" -c "$DRAIN_CONF" migrate >/dev/null 2>&1 || die "migrating $DRAIN_DB failed"
	"$CTL" -c "$DRAIN_CONF" sends resume --reason "benchmark scratch database" 2>/dev/null
}

# drain_fill: EFFECTS approved runs with one due crm.tag effect each, oldest
# first, and a vacuumed, analysed table: every phase starts from the same
# state.
drain_fill() {
	say "filling the outbox with $EFFECTS effects"
	# CASCADE: and whatever else refers to them (resume jobs, replays …).
	psql -X -q -v ON_ERROR_STOP=1 -d "$DRAIN_DB" <<-EOF || die "filling the outbox of $DRAIN_DB failed"
		SET client_min_messages = warning;
		TRUNCATE dead_letters, effect_attempts, effect_outbox, run_events, approvals, workflow_runs RESTART IDENTITY CASCADE;
		INSERT INTO workflow_runs (client_id, idempotency_key, payload_hash, state, claim_started_at)
		SELECT 1, 'drain:' || g, 'sha256:' || md5(g::text), 'approved', now()
		  FROM generate_series(1, $EFFECTS) g;
		INSERT INTO effect_outbox (client_id, idempotency_key, effect_type, target, payload,
		    payload_hash, provider_key, not_before, next_attempt_at)
		SELECT 1, 'drain:' || g, 'crm.tag', 'bench_sink',
		       jsonb_build_object('lead', g, 'tag', 'vip'),
		       'sha256:' || encode(sha256(convert_to('{"lead":' || g || ',"tag":"vip"}', 'UTF8')), 'hex'),
		       'drain:' || g || '/crm.tag', now() - interval '1 hour',
		       now() - interval '1 hour' + g * interval '1 ms'
		  FROM generate_series(1, $EFFECTS) g;
	EOF
	psql -X -q -v ON_ERROR_STOP=1 -d "$DRAIN_DB" -c "VACUUM (ANALYZE) workflow_runs, effect_outbox, effect_attempts, run_events" ||
		die "vacuuming $DRAIN_DB failed"
}

# completed: how many effects have been sent and settled so far (the
# attempt rows' identity: an index look-up, not a count over the table).
completed() { dq "SELECT coalesce(max(id), 0) FROM effect_attempts"; }

rss_kb() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$1/status" 2>/dev/null || echo 0; }

# rates NAME SAMPLES: the mean rate, the first and the last WINDOW seconds,
# from the samples file ("second completed" lines).
rates() {
	read -r "MEAN[$1]" "FIRST[$1]" "LAST[$1]" < <(awk -v w="$WINDOW" '
		{ t[NR] = $1; c[NR] = $2 }
		END {
			n = NR; if (n < 2) { print "0 0 0"; exit }
			mean = (c[n] - c[1]) / (t[n] - t[1])
			# the first w s, and the last w s before the queue ran dry
			for (i = 1; i <= n && t[i] - t[1] < w; i++) f = i
			end = n; while (end > 1 && c[end] == c[end - 1]) end--
			for (i = end; i >= 1 && t[end] - t[i] < w; i--) l = i
			if (f + 1 > n) f = n - 1
			first = (c[f + 1] - c[1]) / (t[f + 1] - t[1])
			p = l - 1 > 0 ? l - 1 : 1
			last = t[end] > t[p] ? (c[end] - c[p]) / (t[end] - t[p]) : 0
			printf "%.0f %.0f %.0f\n", mean, first, last }' "$2")
}

# drain_pgbench: pgbench -M prepared, CONNS clients, DURATION seconds: per
# transaction the statements the dispatcher runs for one effect
# (tests/bench/drain.sql), no provider. Result drain.pg.
drain_pgbench() {
	local name=drain.pg failed
	drain_fill
	CMD[$name]="$(show_cmd "$PGBENCH" -n -M prepared "-c$CONNS" "-j$THREADS" "-T$DURATION" -P 1 -f "$HERE/drain.sql") \$DB"
	say "pgbench, claim + complete: ${CMD[$name]}"
	"$PGBENCH" -n -M prepared "-c$CONNS" "-j$THREADS" "-T$DURATION" -P 1 -f "$HERE/drain.sql" \
		"$DRAIN_DB" >"$TMP/pgbench.drain" 2>"$TMP/pgbench.drain.progress" || {
		grep -v '^progress:' "$TMP/pgbench.drain.progress" | tail -n 5 >&2
		fail "pgbench, drain: failed: $(grep -v '^progress:' "$TMP/pgbench.drain.progress" | tail -n 1)"
	}
	failed=$(sed -nE 's/^number of failed transactions: ([0-9]+).*/\1/p' "$TMP/pgbench.drain")
	[[ ${failed:-0} == 0 ]] || fail "pgbench, drain: $failed failed transactions"
	# progress: 1.0 s, 1234.5 tps, … → cumulative samples
	awk '/^progress:/ { t = $2 + 0; c += $4; printf "%d %d\n", t, c }' "$TMP/pgbench.drain.progress" |
		awk 'BEGIN { print "0 0" } { print }' >"$TMP/samples.$name"
	rates "$name" "$TMP/samples.$name"
	DONE_DB[$name]=$(dq "SELECT count(*) FROM effect_outbox WHERE state = 'completed'")
	say "pgbench: mean ${MEAN[$name]}/s, first ${WINDOW} s ${FIRST[$name]}/s, last ${WINDOW} s ${LAST[$name]}/s"
}

# drain_dispatch PROCESSES [PROGRAM SUFFIX]: PROCESSES oncegate-dispatch
# (DISPATCH, or PROGRAM: another build, e.g. the commit before a change;
# dispatch_workers = CONNS each) drain a full outbox for DURATION seconds
# (or until it is empty) to the sink; every second the script samples the
# effects completed and the dispatchers' memory. Then the exactly-once
# check: every key the sink received, received once, and as many as the
# effects completed. Result drain.PROCESSES[SUFFIX].
drain_dispatch() {
	local n=$1 prog=${2:-$DISPATCH} name=drain.$1${3:-} t0 now c0 c pid rss warm=0 peak=0 i sent dups odd
	drain_fill
	: >"$DRAIN_SINK_DIR/keys.log"
	kill -USR1 "$DRAIN_SINK_PID" # reopen the (emptied) log
	DISPATCH_PIDS=()
	c0=$(completed)
	CMD[$name]="AI_ACTIONS_ENABLED=true $(show_cmd "$prog" -c "$DRAIN_CONF") x $n"
	say "oncegate, $n dispatcher(s) x $CONNS workers, ${DURATION}s: ${CMD[$name]}"
	for ((i = 0; i < n; i++)); do
		AI_ACTIONS_ENABLED=true "$prog" -c "$DRAIN_CONF" 2>>"$TMP/dispatch.stderr" &
		DISPATCH_PIDS+=($!)
	done
	t0=$EPOCHREALTIME
	: >"$TMP/samples.$name"
	while :; do
		sleep 1
		now=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
		c=$(($(completed) - c0))
		echo "$now $c" >>"$TMP/samples.$name"
		rss=0
		for pid in "${DISPATCH_PIDS[@]}"; do rss=$((rss + $(rss_kb "$pid"))); done
		if awk -v t="$now" 'BEGIN { exit !(t >= 10) }' && ((warm == 0)); then warm=$rss; fi
		((rss > peak)) && peak=$rss
		awk -v t="$now" -v d="$DURATION" 'BEGIN { exit !(t >= d) }' && break
		((c >= EFFECTS)) && break
	done
	RSS_END[$name]=$rss
	RSS_WARM[$name]=$warm
	# The high-water marks go with the processes: note them first.
	peak_note oncegate-dispatch "${DISPATCH_PIDS[@]}"
	peak_note_stack
	for pid in "${DISPATCH_PIDS[@]}"; do
		running "$pid" || fail "$name: dispatcher $pid exited during the run"
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${DISPATCH_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	DISPATCH_PIDS=()
	sleep 1.5 # the sink's log buffer (flush=1s)
	kill -USR1 "$DRAIN_SINK_PID"
	sleep 0.5
	rates "$name" "$TMP/samples.$name"
	if [[ -s $TMP/dispatch.stderr ]]; then
		say "the dispatchers wrote to stderr:"
		tail -n 5 "$TMP/dispatch.stderr" >&2
	fi
	# Exactly once: every key the sink saw, seen once; as many as completed.
	sent=$(wc -l <"$DRAIN_SINK_DIR/keys.log")
	dups=$(sort "$DRAIN_SINK_DIR/keys.log" | uniq -d | wc -l)
	SENT[$name]=$sent
	DUPS[$name]=$dups
	DONE_DB[$name]=$(dq "SELECT count(*) FROM effect_outbox WHERE state = 'completed'")
	odd=$(dq "SELECT count(*) FROM effect_outbox WHERE state NOT IN ('pending', 'completed')")
	((dups == 0)) || fail "$name: $dups effects reached the sink more than once"
	((sent == DONE_DB[$name])) || fail "$name: the sink received $sent requests for ${DONE_DB[$name]} completed effects"
	((odd == 0)) || fail "$name: $odd effects ended neither pending nor completed"
	((sent > 0)) || fail "$name: nothing reached the sink"
	say "$name: mean ${MEAN[$name]}/s, first ${WINDOW} s ${FIRST[$name]}/s, last ${WINDOW} s ${LAST[$name]}/s, RSS ${warm} -> ${rss} kB (peak $peak), sent $sent, duplicates $dups"
}

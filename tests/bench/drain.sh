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
#
# Exit status: 0 measured, 1 a phase had errors (a duplicate, a lost
# effect, a failed pgbench transaction) or the set-up failed, 2 --strict
# and a target missed.
set -euo pipefail

# shellcheck source=tests/bench/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

DURATION=120 CONNS=4 THREADS=2 EFFECTS=200000

bench_option() {
	case $1 in
	--effects) EFFECTS=${2:?--effects needs a number}; SHIFT=2 ;;
	*) return 1 ;;
	esac
}

parse_options "$@"
check_options EFFECTS
((DURATION >= 40)) || die "--duration must be at least 40 s (the first and the last 30 s are compared)"
load_stack
start_run

DISPATCH=$ROOT/.dev/build/oncegate-dispatch
CTL=$ROOT/.dev/build/oncegatectl
[[ -x $DISPATCH && -x $CTL ]] || die "$DISPATCH not built: run ./dev up"
NGINX_BIN=$(command -v nginx || echo /usr/sbin/nginx)
DB=oncegate_drain_$(tr -c 'a-zA-Z0-9\n' '_' <<<"$RUN" | tr 'A-Z' 'a-z')
SINK_DIR='' SINK_PID='' DISPATCH_PIDS=()

# The scratch database belongs to the stack's role; creating it takes the
# cluster's superuser (the stack trusts local connections).
admin_psql() {
	runuser -u postgres -- env -C / psql -X -q -At -v ON_ERROR_STOP=1 \
		-h "$PGHOST" -p "$PGPORT" -U postgres -d postgres "$@"
}
dq() { psql -X -At -v ON_ERROR_STOP=1 -d "$DB" -c "$1"; }

bench_cleanup() {
	local pid
	for pid in "${DISPATCH_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${DISPATCH_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	if [[ -n $SINK_PID ]]; then kill -QUIT "$SINK_PID" 2>/dev/null || true; fi
	[[ -n $SINK_DIR ]] && rm -rf "$SINK_DIR"
	admin_psql -c "DROP DATABASE IF EXISTS $DB" 2>/dev/null || true
}

free_port() {
	local p
	for ((p = 18480; p < 18880; p++)); do
		if ! (: <"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

describe_machine

# --- the sink: nginx answering every POST 201 with an id --------------------------

SINK_PORT=$(free_port) || die "no free loopback port for the sink"
SINK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-drain-sink.XXXXXX")
chmod 755 "$SINK_DIR"
cat >"$SINK_DIR/nginx.conf" <<EOF
worker_processes 1;
pid $SINK_DIR/nginx.pid;
error_log $SINK_DIR/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $SINK_DIR;
    proxy_temp_path $SINK_DIR;
    fastcgi_temp_path $SINK_DIR;
    uwsgi_temp_path $SINK_DIR;
    scgi_temp_path $SINK_DIR;
    log_format keys '\$http_idempotency_key';
    server {
        listen 127.0.0.1:$SINK_PORT;
        client_body_buffer_size 64k;
        location / {
            access_log $SINK_DIR/keys.log keys buffer=256k flush=1s;
            default_type application/json;
            add_header X-Provider-Id \$request_id;
            return 201 '{"id":"\$request_id","ok":true}';
        }
    }
}
EOF
"$NGINX_BIN" -q -t -p "$SINK_DIR" -c "$SINK_DIR/nginx.conf" -e "$SINK_DIR/error.log" ||
	die "the sink's nginx config does not pass nginx -t"
"$NGINX_BIN" -p "$SINK_DIR" -c "$SINK_DIR/nginx.conf" -e "$SINK_DIR/error.log" ||
	die "the sink did not start"
for ((i = 0; i < 50; i++)); do [[ -s $SINK_DIR/nginx.pid ]] && break; sleep 0.1; done
SINK_PID=$(pid_file "$SINK_DIR/nginx.pid" nginx)
[[ -n $SINK_PID ]] || die "the sink did not start"
say "sink: nginx on 127.0.0.1:$SINK_PORT (pid $SINK_PID)"

# --- the scratch database --------------------------------------------------------------

say "scratch database $DB"
admin_psql -c "CREATE DATABASE $DB OWNER $PGUSER"
CONF=$TMP/drain.conf
cat >"$CONF" <<EOF
# tests/bench/drain.sh: the benchmark's dispatchers and the scratch database.
database = "host=$PGHOST port=$PGPORT dbname=$DB user=$PGUSER"
sql_dir = $ROOT/sql
log_file = $TMP/decisions.log
log_level = info
dispatch_workers = $CONNS
dispatch_poll_ms = 200

[target bench_sink]
kind = http
url = http://127.0.0.1:$SINK_PORT/effects
idempotency_key = 1
provider_id_header = X-Provider-Id
EOF
"$CTL" -c "$CONF" migrate >/dev/null 2>&1 || die "migrating $DB failed"
"$CTL" -c "$CONF" kill-switch on --operator drain.sh --reason "benchmark scratch database" 2>/dev/null

# fill: EFFECTS approved runs with one due effect each, oldest first, and a
# vacuumed, analysed table: every phase starts from the same state.
fill() {
	say "filling the outbox with $EFFECTS effects"
	psql -X -q -v ON_ERROR_STOP=1 -d "$DB" <<EOF
TRUNCATE dead_letters, effect_attempts, effect_outbox, run_events, approvals, workflow_runs RESTART IDENTITY;
INSERT INTO workflow_runs (client_id, idempotency_key, payload_hash, state, claim_started_at)
SELECT 1, 'drain:' || g, 'sha256:' || md5(g::text), 'approved', now()
  FROM generate_series(1, $EFFECTS) g;
INSERT INTO effect_outbox (client_id, idempotency_key, effect_type, target, payload,
    payload_hash, provider_key, not_before, next_attempt_at)
SELECT 1, 'drain:' || g, 'crm.tag', 'bench_sink',
       jsonb_build_object('lead', g, 'tag', 'vip'), 'sha256:' || md5(g::text),
       'drain:' || g || '/crm.tag', now() - interval '1 hour',
       now() - interval '1 hour' + g * interval '1 ms'
  FROM generate_series(1, $EFFECTS) g;
EOF
	psql -X -q -d "$DB" -c "VACUUM (ANALYZE) workflow_runs, effect_outbox, effect_attempts, run_events"
}

# completed: how many effects have been sent and settled so far (the
# attempt rows' identity: an index look-up, not a count over the table).
completed() { dq "SELECT coalesce(max(id), 0) FROM effect_attempts"; }

rss_kb() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$1/status" 2>/dev/null || echo 0; }

declare -A FIRST LAST MEAN RSS_WARM RSS_END SENT DUPS DONE_DB

# rates NAME SAMPLES: the mean rate, the first and the last 30 s, from the
# samples file ("second completed" lines).
rates() {
	read -r MEAN[$1] FIRST[$1] LAST[$1] < <(awk '
		{ t[NR] = $1; c[NR] = $2 }
		END {
			n = NR; if (n < 2) { print "0 0 0"; exit }
			mean = (c[n] - c[1]) / (t[n] - t[1])
			# the first 30 s, and the last 30 s before the queue ran dry
			for (i = 1; i <= n && t[i] - t[1] < 30; i++) f = i
			end = n; while (end > 1 && c[end] == c[end - 1]) end--
			for (i = end; i >= 1 && t[end] - t[i] < 30; i--) l = i
			first = (c[f + 1] - c[1]) / (t[f + 1] - t[1])
			last = (c[end] - c[l - 1 > 0 ? l - 1 : 1]) / (t[end] - t[l - 1 > 0 ? l - 1 : 1])
			printf "%.0f %.0f %.0f\n", mean, first, last }' "$2")
}

# --- 1. pgbench -------------------------------------------------------------------------

fill
say "pgbench, claim + complete: $CONNS clients, ${DURATION}s"
"$PGBENCH" -n -M prepared "-c$CONNS" "-j$THREADS" "-T$DURATION" -P 1 -f "$HERE/drain.sql" \
	"$DB" >"$TMP/pgbench.out" 2>"$TMP/pgbench.progress" || {
	grep -v '^progress:' "$TMP/pgbench.progress" | tail -n 5 >&2
	fail "pgbench failed: $(grep -v '^progress:' "$TMP/pgbench.progress" | tail -n 1)"
}
CMD[pgbench]=$(show_cmd "$PGBENCH" -n -M prepared "-c$CONNS" "-j$THREADS" "-T$DURATION" -P 1 -f "$HERE/drain.sql")
failed=$(sed -nE 's/^number of failed transactions: ([0-9]+).*/\1/p' "$TMP/pgbench.out")
[[ ${failed:-0} == 0 ]] || fail "pgbench: $failed failed transactions"
# progress: 1.0 s, 1234.5 tps, … → cumulative samples
awk '/^progress:/ { t = $2 + 0; c += $4; printf "%d %d\n", t, c }' "$TMP/pgbench.progress" |
	awk 'BEGIN { print "0 0" } { print }' >"$TMP/samples.pgbench"
rates pgbench "$TMP/samples.pgbench"
DONE_DB[pgbench]=$(dq "SELECT count(*) FROM effect_outbox WHERE state = 'completed'")
say "pgbench: mean ${MEAN[pgbench]}/s, first 30 s ${FIRST[pgbench]}/s, last 30 s ${LAST[pgbench]}/s"

# --- 2, 3. the dispatchers ----------------------------------------------------------------

# dispatch_phase NAME PROCESSES
dispatch_phase() {
	local name=$1 n=$2 t0 now c0 c pid rss warm=0 peak=0 i sent dups
	fill
	: >"$SINK_DIR/keys.log"
	kill -USR1 "$SINK_PID" # reopen the (emptied) log
	DISPATCH_PIDS=()
	c0=$(completed)
	say "oncegate, $n dispatcher(s) x $CONNS workers: ${DURATION}s"
	for ((i = 0; i < n; i++)); do
		AI_ACTIONS_ENABLED=true "$DISPATCH" -c "$CONF" 2>>"$TMP/dispatch.stderr" &
		DISPATCH_PIDS+=($!)
	done
	CMD[$name]="AI_ACTIONS_ENABLED=true $(show_cmd "$DISPATCH" -c "$CONF") x $n"
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
	for pid in "${DISPATCH_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${DISPATCH_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	DISPATCH_PIDS=()
	sleep 1.5 # the sink's log buffer (flush=1s)
	kill -USR1 "$SINK_PID"
	sleep 0.5
	rates "$name" "$TMP/samples.$name"
	if [[ -s $TMP/dispatch.stderr ]]; then
		say "the dispatchers wrote to stderr:"
		tail -n 5 "$TMP/dispatch.stderr" >&2
	fi
	# Exactly once: every key the sink saw, seen once; as many as completed.
	sent=$(wc -l <"$SINK_DIR/keys.log")
	dups=$(sort "$SINK_DIR/keys.log" | uniq -d | wc -l)
	SENT[$name]=$sent
	DUPS[$name]=$dups
	DONE_DB[$name]=$(dq "SELECT count(*) FROM effect_outbox WHERE state = 'completed'")
	local odd
	odd=$(dq "SELECT count(*) FROM effect_outbox WHERE state NOT IN ('pending', 'completed')")
	((dups == 0)) || fail "$name: $dups effects reached the sink more than once"
	((sent == DONE_DB[$name])) || fail "$name: the sink received $sent requests for ${DONE_DB[$name]} completed effects"
	((odd == 0)) || fail "$name: $odd effects ended neither pending nor completed"
	say "$name: mean ${MEAN[$name]}/s, first 30 s ${FIRST[$name]}/s, last 30 s ${LAST[$name]}/s, RSS ${warm} -> ${rss} kB (peak $peak), sent $sent, duplicates $dups"
}

dispatch_phase one 1
dispatch_phase four 4

# --- the table ------------------------------------------------------------------------------

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
{
	echo "drain benchmark, run $RUN: $EFFECTS effects per phase, ${DURATION}s each, $CONNS workers/clients"
	printf '%-26s %9s %9s %9s %10s %14s %12s\n' "" "mean/s" "first30" "last30" "last/first" "RSS warm->end" "vs pgbench"
	for name in pgbench one four; do
		label=$name
		[[ $name == one ]] && label="oncegate, 1 dispatcher"
		[[ $name == four ]] && label="oncegate, 4 dispatchers"
		[[ $name == pgbench ]] && label="pgbench claim+complete"
		lf=$(ratio "${LAST[$name]}" "${FIRST[$name]}")
		rss=-
		[[ $name != pgbench ]] && rss="${RSS_WARM[$name]}->${RSS_END[$name]} kB"
		vs=-
		[[ $name != pgbench ]] && vs=$(ratio "${MEAN[$name]}" "${MEAN[pgbench]}")
		printf '%-26s %9s %9s %9s %10s %14s %12s\n' "$label" "${MEAN[$name]}" "${FIRST[$name]}" \
			"${LAST[$name]}" "$lf" "$rss" "$vs"
	done
	echo
	echo "targets:"
	r1=$(ratio "${MEAN[one]}" "${MEAN[pgbench]}")
	echo "  1 dispatcher / pgbench = $r1 (>= 0.5): $(verdict "$r1" ">=" 0.5)"
	for name in one four; do
		lf=$(ratio "${LAST[$name]}" "${FIRST[$name]}")
		echo "  $name: last 30 s / first 30 s = $lf (>= 0.8): $(verdict "$lf" ">=" 0.8)"
		echo "  $name: sent ${SENT[$name]}, completed ${DONE_DB[$name]}, duplicates ${DUPS[$name]}: $( ((DUPS[$name] == 0 && SENT[$name] == DONE_DB[$name])) && echo ok || echo MISS)"
		grow=$(( RSS_END[$name] - RSS_WARM[$name] ))
		echo "  $name: RSS growth after warm-up ${grow} kB (flat: < 10% of ${RSS_WARM[$name]} kB): $(verdict "$grow" "<" "$(( RSS_WARM[$name] / 10 + 1 ))")"
	done
	echo
	echo "commands:"
	echo "  pgbench: ${CMD[pgbench]} \$DB"
	echo "  1:       ${CMD[one]}"
	echo "  4:       ${CMD[four]}"
	echo "  sink:    nginx on 127.0.0.1:$SINK_PORT, return 201 (tests/bench/drain.sh)"
	table_footer
} >"$TMP/table"
finish

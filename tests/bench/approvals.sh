#!/usr/bin/env bash
# approvals.sh — the approval-gate benchmark of issue 3: the approval page and
# the approve POST through nginx, and the consume transaction against the
# same three statements run by pgbench, in one run on one machine.
#
#   ./dev up && tests/bench/approvals.sh [--duration S] [--tokens N]
#
# Runs against the stack `./dev up` leaves running (.dev/env):
#   1. set-up: TOKENS fresh approval links through the API: for each, a new
#      key (POST /v1/runs) and a valid output for contract support_reply
#      (POST /v1/runs/{key}/output, effect email.send to demo_smtp), which
#      waits for group:support; the raw tokens go to a mode-600 file in a
#      private temporary directory, never to the terminal or a command line;
#   2. wrk: GET /approve/{token} round-robin over the pool for DURATION
#      seconds as a member of group support (X-Dev-User / X-Dev-Groups, the
#      local stand-in for SSO); every answer must be 200 with the card.
#      psql then checks that the GETs changed nothing;
#   3. the CSRF value of every card (one GET each, not timed), then wrk:
#      POST /approve/{token} decision=approve for every token exactly once
#      (one wrk thread per connection; each thread stops after its share);
#      every answer must be 303. psql then checks that TOKENS runs are
#      approved, their challenges decided, with one effect_outbox row each;
#   4. pgbench -M prepared for DURATION seconds: the same three statements in
#      one transaction (tests/bench/consume.sql: consume the challenge, move
#      the run with its timeline row, enqueue the effect with pg_notify) on
#      scratch copies of the tables (bench_runs, bench_run_events,
#      bench_approvals, bench_outbox: LIKE … INCLUDING ALL plus the same
#      foreign keys) pre-filled with PG_ROWS pending challenges; each client
#      consumes its own rows, and a transaction that finds nothing fails.
#      psql checks the rows it changed; the tables are dropped at the end.
# The same concurrency (--connections) for wrk and pgbench. Prints one table
# on stdout (progress and the tools' own output go to stderr): requests/s,
# p50/p99, the consume ratio oncegate/pgbench against the targets, the CPU
# each side used during each run, the machine and the exact commands.
#
# The local nginx limits approval POSTs per client address (limit_req zone
# oncegate_approve); from the one address of the benchmark, the POST run
# would mostly be answered 429. When the stack's nginx allows less than
# 10000 POSTs/s there, the script stops before the set-up unless
# --private-nginx is given: it then starts a second nginx from the stack's
# rendered config, differing only in its port, the files it writes and its
# limit_req rates and bursts (raised), in front of the same responder, sends
# both page runs through it, and stops it at the end.
#
# Options:
#   --duration S      seconds of the page run and of the pgbench run (default 20)
#   --connections N   wrk connections = pgbench clients (default 16)
#   --threads N       wrk threads of the page run = pgbench threads (default 2)
#   --tokens N        approval links in the pool (default 2000)
#   --pg-rows N       pending challenges pre-filled for pgbench (default 200000)
#   --private-nginx   run the page runs through a private nginx (see above)
#   --env FILE        stack environment (default .dev/env of this checkout)
#   --strict          exit 2 when a target is missed
#
# Exit status: 0 measured, 1 a run had errors (an unexpected answer, a socket
# error, a failed or aborted pgbench transaction, rows not as expected) or
# the set-up failed, 2 --strict and a target missed. Keys are
# bench:RUN:appr:N, RUN unique per invocation; the product's tables keep the
# runs, challenges and outbox rows (pending email.send effects to demo_smtp)
# the benchmark created.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

DURATION=20 CONNS=16 THREADS=2 TOKENS=2000 PG_ROWS=200000 PRIVATE_NGINX=no

# Targets (issue 3): page p99 under 10 ms; the consume within 1.5x the cost
# of the bare statements, i.e. at least 1/1.5 of pgbench's rate.
TARGET_PAGE_P99_MS=10 TARGET_CONSUME=0.67 TARGET_COST=1.5

# The approver: not the requester (separation of duties), in group support
# (the contract's approvers: group:support).
SUBJECT=bench-approver@example.com GROUPS_HDR=support
REQUESTER=bench-requester@example.com
# Below this many POSTs/s per address, the stack's nginx is not measurable.
MIN_POST_RATE=10000

bench_option() {
	case $1 in
	--tokens) TOKENS=${2:?--tokens needs a number}; SHIFT=2 ;;
	--pg-rows) PG_ROWS=${2:?--pg-rows needs a number}; SHIFT=2 ;;
	--private-nginx) PRIVATE_NGINX=yes; SHIFT=1 ;;
	*) return 1 ;;
	esac
}
parse_options "$@"
check_options TOKENS PG_ROWS
((TOKENS >= CONNS)) || die "--tokens must be at least --connections (every POST connection needs tokens)"
((PG_ROWS >= CONNS * 100)) || die "--pg-rows must be at least 100 per connection"

# --- the stack -------------------------------------------------------------------

load_stack
# nginx's config, in the stack's state directory.
NGINX_CONF=$STATE/nginx/nginx.conf

# The stack's limit on approval POSTs (requests/s per client address), or
# nothing when its nginx sets none.
post_limit() {
	[[ -r $NGINX_CONF ]] || return 0
	sed -nE 's/.*limit_req_zone[^;]*zone=oncegate_approve:[^ ;]*[[:space:]]+rate=([0-9]+)r\/([sm]).*/\1 \2/p' \
		"$NGINX_CONF" | head -n1 | awk '{ printf "%d", ($2 == "m" ? $1 / 60 : $1) }'
}
POST_LIMIT=$(post_limit)
if [[ $PRIVATE_NGINX == no && -n $POST_LIMIT ]] && ((POST_LIMIT < MIN_POST_RATE)); then
	die "the stack's nginx allows $POST_LIMIT approval POSTs/s per address (limit_req zone
  oncegate_approve in $NGINX_CONF): the POST run would be answered 429.
  Raise that limit in nginx/oncegate-local.conf.in (as the API's, which the
  benchmark must not measure), or run with --private-nginx."
fi

# Everything written below TMP (tokens, CSRF values) is private.
umask 077
NGX_DIR='' NGX_PID=''
BENCH_TABLES=no
# shellcheck disable=SC2317  # called by the EXIT trap
bench_cleanup() {
	local i
	if [[ $BENCH_TABLES == yes ]]; then
		psql -X -q -v ON_ERROR_STOP=1 -c 'DROP TABLE IF EXISTS bench_outbox, bench_approvals, bench_run_events, bench_runs' \
			>/dev/null 2>&1 || printf 'approvals.sh: could not drop the bench_* tables\n' >&2
	fi
	# The private nginx: only the master we started, recognised by its
	# command line naming our directory.
	if [[ -n $NGX_PID ]] && tr '\0' ' ' <"/proc/$NGX_PID/cmdline" 2>/dev/null | grep -qF "$NGX_DIR"; then
		kill -QUIT "$NGX_PID" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			[[ -e /proc/$NGX_PID ]] || break
			sleep 0.1
		done
		[[ -e /proc/$NGX_PID ]] && kill -KILL "$NGX_PID" 2>/dev/null
	fi
	[[ -n $NGX_DIR ]] && rm -rf "$NGX_DIR"
}
start_run

# --- the private nginx ------------------------------------------------------------

# free_port: a loopback port nothing listens on.
free_port() {
	local p
	for ((p = 18080; p < 18480; p++)); do
		if ! (: <"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

BASE_URL=$ONCEGATE_URL
NGINX_NOTE="the stack's nginx ($ONCEGATE_URL)"
if [[ $PRIVATE_NGINX == yes ]]; then
	[[ -r $NGINX_CONF ]] || die "$NGINX_CONF not found: --private-nginx copies the stack's nginx config"
	NGINX_BIN=$(command -v nginx || echo /usr/sbin/nginx)
	[[ -x $NGINX_BIN ]] || die "nginx is not installed"
	port=$(free_port) || die "no free loopback port for the private nginx"
	# World-readable: nginx's workers (www-data) use its temporary paths.
	NGX_DIR=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-bench-nginx.XXXXXX")
	chmod 755 "$NGX_DIR"
	sed -E \
		-e '/^[[:space:]]*#/d' \
		-e "s#^([[:space:]]*pid)[[:space:]]+[^;]+;#\\1 $NGX_DIR/nginx.pid;#" \
		-e "s#^([[:space:]]*error_log)[[:space:]]+[^ ;]+#\\1 $NGX_DIR/error.log#" \
		-e "s#^([[:space:]]*access_log)[[:space:]]+[^ ;]+#\\1 $NGX_DIR/access.log#" \
		-e "s#^([[:space:]]*)(client_body|proxy|fastcgi|uwsgi|scgi)_temp_path[[:space:]]+[^;]+;#\\1\\2_temp_path $NGX_DIR/tmp/\\2;#" \
		-e "s#^([[:space:]]*listen[[:space:]]+)127\\.0\\.0\\.1:[0-9]+#\\1127.0.0.1:$port#" \
		-e "s#(limit_req_zone[^;]*rate=)[0-9]+r/[sm]#\\1100000r/s#" \
		-e "s#(limit_req[[:space:]]+zone=[^;]*burst=)[0-9]+#\\1100000#" \
		"$NGINX_CONF" >"$NGX_DIR/nginx.conf"
	chmod 644 "$NGX_DIR/nginx.conf"
	# Nothing of the copy may write into the stack's nginx directory.
	if grep -qF "$STATE/nginx" "$NGX_DIR/nginx.conf"; then
		die "the private nginx config still names $STATE/nginx: $NGINX_CONF changed shape"
	fi
	mkdir -p "$NGX_DIR/tmp"
	chmod 755 "$NGX_DIR/tmp"
	"$NGINX_BIN" -q -t -p "$NGX_DIR" -c "$NGX_DIR/nginx.conf" -e "$NGX_DIR/error.log" ||
		die "the private nginx config does not pass nginx -t"
	"$NGINX_BIN" -p "$NGX_DIR" -c "$NGX_DIR/nginx.conf" -e "$NGX_DIR/error.log" ||
		die "the private nginx did not start"
	for ((i = 0; i < 50; i++)); do
		[[ -s $NGX_DIR/nginx.pid ]] && break
		sleep 0.1
	done
	NGX_PID=$(pid_file "$NGX_DIR/nginx.pid" nginx)
	[[ -n $NGX_PID ]] || die "the private nginx wrote no PID"
	BASE_URL=http://127.0.0.1:$port
	curl -fsS -o /dev/null --max-time 5 "$BASE_URL/healthz" || die "the private nginx at $BASE_URL is not healthy"
	NGINX_PID=$NGX_PID
	NGINX_NOTE="a private nginx ($BASE_URL, pid $NGX_PID): the stack's config with limit_req raised (the stack's allows ${POST_LIMIT:-?} approval POSTs/s per address)"
	say "private nginx at $BASE_URL (pid $NGX_PID)"
fi

# running PID: the process exists and is not a zombie (a child of ours
# that exited stays one until it is waited for).
running() {
	local stat
	read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
	stat=${stat##*) }
	[[ ${stat%% *} != Z ]]
}

# --- results -------------------------------------------------------------------------

# CHECK: what psql found after each run.
declare -A CHECK

# pgbench_hint OUTFILE: why the consume run failed, when pgbench says.
pgbench_hint() {
	if grep -q 'expected one row, got 0' "$1"; then printf ': a client ran out of rows, raise --pg-rows'; fi
}

# --- 0. the machine ------------------------------------------------------------------

describe_machine

# --- 1. the pool of approval links ---------------------------------------------------

KEYS="bench:$RUN:appr:%"

# setup_token I: claim bench:RUN:appr:I and hand in a valid output that
# waits for a person; append the raw token to TMP/tokens.PID. Runs in the
# bash processes parallel_setup starts. Never prints a token.
# shellcheck disable=SC2317
setup_token() {
	local i=$1 key resp
	key=bench:$RUN:appr:$i
	resp=$(api_claim_then "$key" "{\"ticket\":$i,\"source\":\"bench\"}" output \
		"\"contract\":\"support_reply\",\"output\":{\"subject\":\"Re: ticket $i\",\"body\":\"Hello, your order $i has shipped and should arrive within three days.\",\"confidence\":0.5},\"effect\":{\"type\":\"email.send\",\"target\":\"demo_smtp\",\"payload\":{\"to\":\"x@example.com\"}},\"source_url\":\"https://crm.example/t/$i\",\"requested_by\":\"$REQUESTER\"") || return 1
	if [[ ${resp##*$'\n'} != 202 || ! $resp =~ \"url\":\"[^\"]*/approve/([A-Za-z0-9_-]{43})\" ]]; then
		printf 'output %s: %s\n' "$key" "$(sed -E 's#/approve/[A-Za-z0-9_-]+#/approve/[token]#g' <<<"$resp")" >&2
		return 1
	fi
	printf '%s\n' "${BASH_REMATCH[1]}" >>"$TMP/tokens.$BASHPID"
}
export REQUESTER

say "creating $TOKENS approval links (runs bench:$RUN:appr:1..$TOKENS) through the API"
start=$SECONDS
parallel_setup "$TOKENS" setup_token || die "creating the approval links failed"
cat "$TMP"/tokens.* >"$TMP/tokens"
rm -f "$TMP"/tokens.*
got=$(wc -l <"$TMP/tokens")
uniq=$(sort -u "$TMP/tokens" | wc -l)
[[ $got == "$TOKENS" && $uniq == "$TOKENS" ]] || die "expected $TOKENS distinct tokens, got $got ($uniq distinct)"
waiting=$(q "SELECT count(*) FROM workflow_runs WHERE idempotency_key LIKE '$KEYS' AND state = 'awaiting_human'")
[[ $waiting == "$TOKENS" ]] || die "expected $TOKENS runs awaiting_human, found $waiting"
SETUP_S=$((SECONDS - start))
say "created in $SETUP_S s"

# --- 2. the approval page ----------------------------------------------------------------

wrk_run page "$BASE_URL" approvals.lua page "$SUBJECT" "$GROUPS_HDR" "$TMP/tokens"

# A GET changes nothing: every run still waits, every challenge is pending,
# no effect was enqueued.
read -r w p o < <(q "SELECT (SELECT count(*) FROM workflow_runs WHERE idempotency_key LIKE '$KEYS' AND state = 'awaiting_human'),
	(SELECT count(*) FROM approvals WHERE idempotency_key LIKE '$KEYS' AND state = 'pending'),
	(SELECT count(*) FROM effect_outbox WHERE idempotency_key LIKE '$KEYS')" | tr '|' ' ')
if [[ $w == "$TOKENS" && $p == "$TOKENS" && $o == 0 ]]; then
	CHECK[page]="after ${REQUESTS[page]:-0} GETs: $w runs still awaiting_human, $p challenges pending, no outbox row"
else
	fail "the page run changed rows: $w/$TOKENS runs awaiting_human, $p/$TOKENS challenges pending, $o outbox rows"
	CHECK[page]="GETs changed rows (see ERRORS)"
fi

# --- 3. the approve POST --------------------------------------------------------------------

# The CSRF value of every card: one GET per token, not timed. curl reads the
# URLs from a file (the tokens stay off its command line) and fetches 8 at a
# time.
say "fetching the CSRF value of $TOKENS cards"
mkdir "$TMP/pages"
awk -v base="$BASE_URL" -v dir="$TMP/pages" \
	'{ printf "url = \"%s/approve/%s\"\noutput = \"%s/%d\"\n", base, $0, dir, NR }' \
	"$TMP/tokens" >"$TMP/cards.curl"
curl -sS --no-progress-meter --parallel --parallel-max 8 --max-time 30 -K "$TMP/cards.curl" \
	-H "X-Dev-User: $SUBJECT" -H "X-Dev-Groups: $GROUPS_HDR" -w '%{http_code}\n' >"$TMP/cards.status" ||
	die "fetching the cards failed"
ok=$(grep -c '^200$' "$TMP/cards.status" || true)
[[ $ok == "$TOKENS" ]] || die "fetching the cards: $ok of $TOKENS answered 200"
# The value of the card's <input name="csrf" …>, page by page in order.
pages=()
for ((i = 1; i <= TOKENS; i++)); do pages+=("$TMP/pages/$i"); done
awk 'FNR == 1 && NR > 1 { if (!found) print "MISSING"; found = 0 }
	!found && match($0, /<input[^>]*name="csrf"[^>]*>/) {
		tag = substr($0, RSTART, RLENGTH)
		if (match(tag, /value="[A-Za-z0-9_-]+"/)) { print substr(tag, RSTART + 7, RLENGTH - 8); found = 1 }
	}
	END { if (!found) print "MISSING" }' "${pages[@]}" >"$TMP/csrf"
rm -rf "$TMP/pages"
if [[ $(wc -l <"$TMP/csrf") != "$TOKENS" ]] || grep -q MISSING "$TMP/csrf"; then
	die "not every card carried a CSRF value"
fi
paste -d ' ' "$TMP/tokens" "$TMP/csrf" >"$TMP/forms"

# One wrk thread per connection, each POSTing its share of the forms once;
# wrk is interrupted when every thread has reported its share done.
DONE_FILE=$TMP/decide.done
: >"$DONE_FILE"
cmd=(wrk "-t$CONNS" "-c$CONNS" -d1h -s "$HERE/approvals.lua" "$BASE_URL"
	-- decide "$SUBJECT" "$GROUPS_HDR" "$TMP/forms" "$DONE_FILE" "$CONNS")
CMD[decide]=$(show_cmd "${cmd[@]}")
say "oncegate, approve POST: ${CMD[decide]}"
# Generous: 20 consumes/s would still finish.
LIMIT_S=$((TOKENS / 20 + 30))
rc=0
"${cmd[@]}" >"$TMP/wrk.decide" 2>&1 &
BG_PID=$!
# A FIFO opened read-write never delivers anything: read -t on it is a
# sleep without a process.
mkfifo "$TMP/nap"
exec {NAP_FD}<>"$TMP/nap"
start_us=${EPOCHREALTIME/./}
sleep 0.3
cpu_snapshot "$TMP/cpu.a" "$BG_PID"
# CPU from 0.3 s in until the first thread runs out of tokens: the steady
# state with every connection busy. The polling forks nothing (builtins
# only), so it barely shows in the CPU figures.
snap_b=no timed_out=no
while :; do
	mapfile -t done_lines <"$DONE_FILE"
	lines=${#done_lines[@]}
	if [[ $snap_b == no ]] && ((lines >= 1)); then
		cpu_snapshot "$TMP/cpu.b" "$BG_PID"
		snap_b=yes
	fi
	((lines >= CONNS)) && break
	running "$BG_PID" || break
	if ((${EPOCHREALTIME/./} - start_us > LIMIT_S * 1000000)); then
		timed_out=yes
		break
	fi
	read -r -t 0.05 -u "$NAP_FD" _ || true
done
exec {NAP_FD}>&-
[[ $snap_b == yes ]] || cpu_snapshot "$TMP/cpu.b" "$BG_PID"
# SIGINT ends wrk's sleep: it joins its (stopped) threads and calls done().
# A signal that lands on a thread still on its way out does not wake the
# main thread: send it again until wrk is gone.
for ((i = 0; i < 50; i++)); do
	running "$BG_PID" || break
	kill -INT "$BG_PID" 2>/dev/null || true
	sleep 0.2
done
wait "$BG_PID" || rc=$?
BG_PID=''
CPU[decide]=$(cpu_report "$TMP/cpu.a" "$TMP/cpu.b" wrk)
# wrk's own Requests/sec and latency include the wait for the interrupt:
# the lines of approvals.lua are the result.
sed 's/^/    /' "$TMP/wrk.decide" >&2
[[ $timed_out == no ]] || fail "oncegate, approve POST: not done after $LIMIT_S s ($(wc -l <"$DONE_FILE") of $CONNS threads)"
wrk_result decide "$TMP/wrk.decide" "$rc"
if [[ ${REQUESTS[decide]:-0} != "$TOKENS" ]]; then
	fail "oncegate, approve POST: ${REQUESTS[decide]:-0} answers for $TOKENS tokens"
fi

# Every token consumed once: the runs approved by the subject, the
# challenges decided, one outbox row per run naming its challenge.
read -r r a o od < <(q "SELECT (SELECT count(*) FROM workflow_runs WHERE idempotency_key LIKE '$KEYS'
		AND state = 'approved' AND decision = 'approve' AND decided_by = '$SUBJECT'),
	(SELECT count(*) FROM approvals WHERE idempotency_key LIKE '$KEYS' AND state = 'decided'
		AND decision = 'approve' AND approver_subject = '$SUBJECT'),
	(SELECT count(*) FROM effect_outbox WHERE idempotency_key LIKE '$KEYS'
		AND effect_type = 'email.send' AND target = 'demo_smtp' AND approval_id IS NOT NULL),
	(SELECT count(DISTINCT idempotency_key) FROM effect_outbox WHERE idempotency_key LIKE '$KEYS')" | tr '|' ' ')
if [[ $r == "$TOKENS" && $a == "$TOKENS" && $o == "$TOKENS" && $od == "$TOKENS" ]]; then
	CHECK[decide]="$r runs approved, $a challenges decided, $o effect_outbox rows (one per run)"
else
	fail "after the POST run: $r/$TOKENS runs approved, $a/$TOKENS challenges decided, $o/$TOKENS outbox rows ($od runs)"
	CHECK[decide]="rows not as expected (see ERRORS)"
fi

# --- 4. pgbench, the bare consume transaction -----------------------------------------------

PER=$((PG_ROWS / CONNS))
ROWS=$((PER * CONNS))
PAYLOAD='{"to":"x@example.com"}'
PHASH=sha256:$(printf '%s' "$PAYLOAD" | sha256sum | cut -c1-64)
say "creating the scratch tables with $ROWS pending challenges ($PER per client)"
BENCH_TABLES=yes
start=$SECONDS
psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<-EOF
	SET client_min_messages = warning;
	DROP TABLE IF EXISTS bench_outbox, bench_approvals, bench_run_events, bench_runs;
	CREATE TABLE bench_runs (LIKE workflow_runs INCLUDING ALL);
	CREATE TABLE bench_run_events (LIKE run_events INCLUDING ALL);
	CREATE TABLE bench_approvals (LIKE approvals INCLUDING ALL);
	CREATE TABLE bench_outbox (LIKE effect_outbox INCLUDING ALL);
	-- Rows shaped like the ones the set-up created through the API.
	INSERT INTO bench_runs (client_id, idempotency_key, payload_hash, payload, state,
	    claim_started_at, version, attempt, workflow_version, trigger, contract,
	    contract_hash, output, output_hash, effect, source_url, requested_by)
	SELECT 1, i::text, 'sha256:' || encode(sha256(i::text::bytea), 'hex'),
	    jsonb_build_object('ticket', i, 'source', 'bench'), 'awaiting_human', now(), 2, 1,
	    'bench@1', 'bench', 'support_reply', 'sha256:' || repeat('0', 64),
	    jsonb_build_object('subject', 'Re: ticket ' || i, 'confidence', 0.5,
	        'body', 'Hello, your order ' || i || ' has shipped and should arrive within three days.'),
	    'sha256:' || encode(sha256(('o' || i)::bytea), 'hex'),
	    '{"type": "email.send", "target": "demo_smtp", "payload": {"to": "x@example.com"}}',
	    'https://crm.example/t/' || i, '$REQUESTER'
	FROM generate_series(1, $ROWS) AS i;
	INSERT INTO bench_approvals (client_id, idempotency_key, token_hash, approver,
	    allowed_decisions, requested_by, separation_of_duties, expires_at)
	SELECT 1, i::text, decode(lpad(to_hex(i::bigint), 64, '0'), 'hex'), 'group:support',
	    '{approve,reject}', '$REQUESTER', true, now() + interval '1 day'
	FROM generate_series(1, $ROWS) AS i;
	-- The product's foreign keys (LIKE does not copy them).
	ALTER TABLE bench_approvals ADD FOREIGN KEY (client_id, idempotency_key)
	    REFERENCES bench_runs (client_id, idempotency_key);
	ALTER TABLE bench_outbox ADD FOREIGN KEY (client_id, idempotency_key)
	    REFERENCES bench_runs (client_id, idempotency_key),
	  ADD FOREIGN KEY (approval_id) REFERENCES bench_approvals (id);
EOF
# Hint bits and statistics, as on tables that have been in use.
psql -X -q -v ON_ERROR_STOP=1 -c 'VACUUM (ANALYZE) bench_runs, bench_approvals, bench_run_events, bench_outbox' >/dev/null
say "created in $((SECONDS - start)) s"

pgbench_run pg consume consume.sql -D "per=$PER" -D n=0 -D cid=1 -D decision=approve -D "subject=$SUBJECT" \
	-D reason=bench -D etype=email.send -D etarget=demo_smtp -D "payload=$PAYLOAD" -D "phash=$PHASH" -D delay=0
processed=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$TMP/pgbench.consume")

# Every transaction did the whole job: as many challenges decided, runs
# approved, timeline rows and outbox rows as transactions.
read -r a r e o < <(q "SELECT (SELECT count(*) FROM bench_approvals WHERE state = 'decided'),
	(SELECT count(*) FROM bench_runs WHERE state = 'approved'),
	(SELECT count(*) FROM bench_run_events),
	(SELECT count(*) FROM bench_outbox WHERE approval_id IS NOT NULL)" | tr '|' ' ')
if [[ -n $processed && $a == "$processed" && $r == "$processed" && $e == "$processed" && $o == "$processed" ]]; then
	CHECK[pg]="$processed transactions: $a challenges decided, $r runs approved, $e timeline rows, $o outbox rows"
else
	fail "pgbench, consume: ${processed:-?} transactions but $a challenges decided, $r runs approved, $e timeline rows, $o outbox rows"
	CHECK[pg]="rows not as expected (see ERRORS)"
fi
psql -X -q -v ON_ERROR_STOP=1 -c 'DROP TABLE bench_outbox, bench_approvals, bench_run_events, bench_runs' >/dev/null
BENCH_TABLES=no

# --- the table ----------------------------------------------------------------------------

{
	RATIO=$(awk -v a="${RATE[decide]}" -v b="${RATE[pg]}" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
	COST=$(awk -v a="${RATE[decide]}" -v b="${RATE[pg]}" 'BEGIN { if (a > 0) printf "%.2f", b / a; else print "inf" }')
	printf '%-24s %10s %7s %7s %12s %6s  %-28s %s\n' case 'per second' 'p50 ms' 'p99 ms' \
		'pgbench tps' ratio target verdict
	printf '%-24s %10s %7s %7s %12s %6s  %-28s %s\n' 'approval page (GET)' "${RATE[page]}" \
		"${P50[page]}" "${P99[page]}" '-' '-' "p99 < $TARGET_PAGE_P99_MS ms" \
		"$(verdict "${P99[page]}" '<' "$TARGET_PAGE_P99_MS")"
	printf '%-24s %10s %7s %7s %12.1f %6s  %-28s %s\n' 'approve (POST, consume)' "${RATE[decide]}" \
		"${P50[decide]}" "${P99[decide]}" "${RATE[pg]}" "$RATIO" \
		">= $TARGET_CONSUME (cost <= ${TARGET_COST}x)" "$(verdict "$RATIO" '>=' "$TARGET_CONSUME")"
	printf '%-24s %10.1f %7s %7s %12s %6s  %s\n' 'pgbench consume (bare)' "${RATE[pg]}" \
		"${P50[pg]}" "${P99[pg]}" '-' '-' 'the baseline'
	echo
	echo "consume cost: oncegate's POST costs ${COST}x the three bare statements (target <= ${TARGET_COST}x)."
	echo "approve POST: $TOKENS tokens, each POSTed once; rate = answers / (first request .. last answer)."
	echo "checks: page:   ${CHECK[page]:-not run}"
	echo "        POST:   ${CHECK[decide]:-not run}"
	echo "        pgbench: ${CHECK[pg]:-not run}"
	echo
	echo "CPU during each run, % of one core (machine: $((NPROC * 100))%):"
	printf '  page GET        %s\n' "${CPU[page]:-n/a}"
	printf '  approve POST    %s\n' "${CPU[decide]:-n/a}"
	printf '  pgbench consume %s\n' "${CPU[pg]:-n/a}"
	echo "  (page and pgbench: the middle of the run; POST: from 0.3 s in until the first wrk thread ran out of tokens)"
	table_footer
	echo "nginx:    $NGINX_NOTE"
	echo "run:      $RUN ($TOKENS links created through the API in $SETUP_S s; pgbench: $ROWS pre-filled rows)"
	echo "command:  tests/bench/approvals.sh ${ARGS[*]}"
	printf '          %s\n' "${CMD[page]}" "${CMD[decide]}" "${CMD[pg]}"
} >"$TMP/table"
finish

# shellcheck shell=bash
# The results and targets are read by the scripts' tables, and the arrays
# they go into are common.sh's:
# shellcheck disable=SC2034,SC2154
# approvals_lib.sh — the phases of the approval-gate benchmark (issue 3),
# shared by tests/bench/approvals.sh and tests/bench/run.sh. Sourced after
# common.sh; it defines functions and the targets and runs nothing. The
# script calls approvals_init after load_stack and start_run, then the
# phases: approvals_setup_tokens first, the others in any order except
# approvals_run_decide, which uses the tokens up (and enqueues TOKENS
# email.send effects that the stack's dispatcher then sends to demo_smtp:
# it comes last, so that nothing else is measured beside those sends).
#
# Each phase uses DURATION, CONNS and THREADS as they are when it is called,
# RUN and TMP (start_run), TOKENS (the pool of approval links) and PG_ROWS
# (the pending challenges pre-filled for pgbench). The results go into
# common.sh's arrays under the names
#   page        wrk: GET /approve/{token};
#   static      wrk: GET of a static copy of one card (same bytes) from the
#               same nginx: what nginx alone costs for that answer;
#   pg.consume  pgbench -M prepared: the consume transaction's three
#               statements on scratch tables;
#   decide      wrk: POST /approve/{token}, every token once;
# and what psql found after each into CHECK[NAME].

# Targets (issue 3): page p99 under 10 ms; the consume within 1.5x the cost
# of the bare statements, i.e. at least 1/1.5 of pgbench's rate.
TARGET_PAGE_P99_MS=10 TARGET_CONSUME=0.67 TARGET_COST=1.5

# The approver: not the requester (separation of duties), in group support
# (the contract's approvers: group:support).
SUBJECT=bench-approver@example.com GROUPS_HDR=support
REQUESTER=bench-requester@example.com
export REQUESTER
# Below this many POSTs/s per address, the stack's nginx is not measurable.
MIN_POST_RATE=10000
# The static copy of a card, as the private nginx serves it.
STATIC_PATH=/approve-static/card.html

APPROVE_NGX_DIR='' APPROVE_NGX_PID=''
APPROVE_TABLES=no
declare -A CHECK

# approvals_init: after load_stack and start_run: NGINX_CONF, the stack's
# rendered nginx config; BASE_URL, the URL the page and POST runs use (the
# stack's nginx until approvals_start_nginx); NGINX_NOTE, what the table
# says of it; KEYS, the runs' keys as a LIKE pattern. Everything written
# below TMP from here on (tokens, CSRF values) is private.
approvals_init() {
	NGINX_CONF=$STATE/nginx/nginx.conf
	BASE_URL=$ONCEGATE_URL
	NGINX_NOTE="the stack's nginx ($ONCEGATE_URL)"
	KEYS="bench:$RUN:appr:%"
	umask 077
	# ./dev up's approval pages want its key (X-Dev-Key), read from its
	# 0600 file by curl, never on a command line.
	DEV_KEY_H=()
	if [[ -s $STATE/dev-key.header ]]; then DEV_KEY_H=(-H "@$STATE/dev-key.header"); fi
}

# shellcheck disable=SC2317  # called by the EXIT trap
approvals_cleanup() {
	if [[ $APPROVE_TABLES == yes ]]; then
		psql -X -q -v ON_ERROR_STOP=1 -c 'DROP TABLE IF EXISTS bench_outbox, bench_approvals, bench_run_events, bench_runs' \
			>/dev/null 2>&1 || printf '%s: could not drop the bench_* tables\n' "$PROG" >&2
		APPROVE_TABLES=no
	fi
	approvals_stop_nginx
}
at_exit approvals_cleanup

# pgbench_hint OUTFILE: why the consume run failed, when pgbench says.
pgbench_hint() {
	if grep -q 'expected one row, got 0' "$1"; then printf ': a client ran out of rows, raise --pg-rows'; fi
}

# --- the private nginx ------------------------------------------------------------

# post_limit: the stack's limit on approval POSTs (requests/s per client
# address), or nothing when its nginx sets none.
post_limit() {
	[[ -r $NGINX_CONF ]] || return 0
	sed -nE 's/.*limit_req_zone[^;]*zone=oncegate_approve:[^ ;]*[[:space:]]+rate=([0-9]+)r\/([sm]).*/\1 \2/p' \
		"$NGINX_CONF" | head -n1 | awk '{ printf "%d", ($2 == "m" ? $1 / 60 : $1) }'
}

# approvals_start_nginx: a second nginx from the stack's rendered config,
# differing only in its port, the files it writes, its limit_req rates and
# bursts (raised), and one more location: STATIC_PATH, a static file
# (approvals_static_file writes it) with the page's headers. In front of the
# same responder; BASE_URL and NGINX_PID (the CPU accounting) become its.
approvals_start_nginx() {
	local port limit
	[[ -r $NGINX_CONF ]] || die "$NGINX_CONF not found: the private nginx copies the stack's nginx config"
	limit=$(post_limit)
	port=$(free_port 18080) || die "no free loopback port for the private nginx"
	# World-readable: nginx's workers (www-data) use its temporary paths and
	# read the static card.
	APPROVE_NGX_DIR=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-bench-nginx.XXXXXX")
	chmod 755 "$APPROVE_NGX_DIR"
	grep -qE '^[[:space:]]*location = /approve-assets/' "$NGINX_CONF" ||
		die "$NGINX_CONF has no location = /approve-assets/…: the static card has no place (the config changed shape)"
	nginx_copy "$APPROVE_NGX_DIR" "$port" \
		-e "s#(limit_req_zone[^;]*rate=)[0-9]+r/[sm]#\\1100000r/s#" \
		-e "s#(limit_req[[:space:]]+zone=[^;]*burst=)[0-9]+#\\1100000#" | awk -v file="$APPROVE_NGX_DIR/card.html" -v path="$STATIC_PATH" '
			# The static card, beside the approval assets, with the
			# headers the responder sends with a page.
			!done && /^[[:space:]]*location = \/approve-assets\// {
				print "        location = " path " {"
				print "            alias " file ";"
				print "            default_type text/html;"
				print "            add_header Cache-Control no-store;"
				print "            add_header Referrer-Policy no-referrer;"
				print "            add_header X-Content-Type-Options nosniff;"
				print "            add_header X-Frame-Options DENY;"
				print "            add_header Content-Security-Policy \"default-src '\''none'\''; style-src '\''self'\''; img-src '\''self'\''; form-action '\''self'\''; frame-ancestors '\''none'\''; base-uri '\''none'\''\";"
				print "        }"
				done = 1
			}
			{ print }' >"$APPROVE_NGX_DIR/nginx.conf"
	chmod 644 "$APPROVE_NGX_DIR/nginx.conf"
	# Nothing of the copy may write into the stack's nginx directory (it may
	# read from it: the stylesheet's alias).
	if grep -vE '^[[:space:]]*alias[[:space:]]' "$APPROVE_NGX_DIR/nginx.conf" | grep -qF "$STATE/nginx"; then
		die "the private nginx config still names $STATE/nginx: $NGINX_CONF changed shape"
	fi
	mkdir -p "$APPROVE_NGX_DIR/tmp"
	chmod 755 "$APPROVE_NGX_DIR/tmp"
	APPROVE_NGX_PID=$(nginx_start "$APPROVE_NGX_DIR") || die "the private nginx did not start"
	BASE_URL=http://127.0.0.1:$port
	curl -fsS -o /dev/null --max-time 5 "$BASE_URL/healthz" || die "the private nginx at $BASE_URL is not healthy"
	NGINX_PID=$APPROVE_NGX_PID
	NGINX_NOTE="a private nginx ($BASE_URL, pid $APPROVE_NGX_PID): the stack's config with limit_req raised (the stack's allows ${limit:-?} approval POSTs/s per address) and a static card at $STATIC_PATH"
	say "private nginx at $BASE_URL (pid $APPROVE_NGX_PID)"
}

# approvals_stop_nginx: notes the peak RSS of the private nginx's workers,
# stops it, and gives the CPU accounting back to the stack's nginx.
approvals_stop_nginx() {
	[[ -n $APPROVE_NGX_PID ]] || return 0
	# shellcheck disable=SC2046  # one word per PID
	peak_note nginx-worker $(children_of "$APPROVE_NGX_PID")
	nginx_stop "$APPROVE_NGX_PID" "$APPROVE_NGX_DIR"
	[[ -n $APPROVE_NGX_DIR ]] && rm -rf "$APPROVE_NGX_DIR"
	APPROVE_NGX_PID='' APPROVE_NGX_DIR=''
	NGINX_PID=$STACK_NGINX_PID
}

# --- 1. the pool of approval links ---------------------------------------------------

# setup_token I: claim bench:RUN:appr:I and hand in a valid output that
# waits for a person; append the raw token to TMP/tokens.PID. Runs in the
# bash processes parallel_setup starts. Never prints a token.
# shellcheck disable=SC2317
setup_token() {
	local i=$1 key resp
	key=bench:$RUN:appr:$i
	resp=$(api_claim_then "$key" "{\"ticket\":$i,\"source\":\"bench\"}" output \
		"\"contract\":\"support_reply\",\"output\":{\"subject\":\"Re: ticket $i\",\"body\":\"Hello, your order $i has shipped and should arrive within three days.\",\"confidence\":0.5},\"effect\":{\"type\":\"email.send\",\"target\":\"demo_smtp\",\"payload\":{\"to\":\"x@example.com\"}},\"source_url\":\"https://crm.example/t/$i\",\"requested_by\":\"$REQUESTER\"") || return 1
	# A contract with gate.notify (the demo stack's) mails the link to the
	# approvers instead of answering it: approvals_tokens_from_mail reads it.
	[[ ${resp##*$'\n'} == 202 && $resp == *'"notified":true'* && $resp != *'"url"'* ]] && return 0
	if [[ ${resp##*$'\n'} != 202 || ! $resp =~ \"url\":\"[^\"]*/approve/([A-Za-z0-9_-]{43})\" ]]; then
		printf 'output %s: %s\n' "$key" "$(sed -E 's#/approve/[A-Za-z0-9_-]+#/approve/[token]#g' <<<"$resp")" >&2
		return 1
	fi
	printf '%s\n' "${BASH_REMATCH[1]}" >>"$TMP/tokens.$BASHPID"
}

# approvals_tokens_from_mail: the links of runs bench:RUN:appr:* from the
# notification mails the stack's dispatcher sent to the demo SMTP server
# (ONCEGATE_DEMO_SMTP_LOG), into TMP/tokens, once all TOKENS have arrived
# (at most 180 s).
approvals_tokens_from_mail() {
	local i got=0
	[[ -n ${ONCEGATE_DEMO_SMTP_LOG:-} ]] || die "the links went by mail and ONCEGATE_DEMO_SMTP_LOG is not set"
	say "the links go by mail (gate.notify): reading them from the demo mailbox"
	for ((i = 0; i < 180; i++)); do
		/usr/bin/python3 "$ROOT/tests/providers/mailbox.py" "$ONCEGATE_DEMO_SMTP_LOG" --json \
			--grep "bench:$RUN:appr:" 2>/dev/null |
			/usr/bin/python3 -c 'import json, re, sys
seen = set()
for line in sys.stdin:
    m = re.search(r"/approve/([A-Za-z0-9_-]{43})", json.loads(line)["body"])
    if m and m.group(1) not in seen:
        seen.add(m.group(1))
        print(m.group(1))' >"$TMP/tokens"
		got=$(wc -l <"$TMP/tokens")
		((got >= TOKENS)) && return 0
		sleep 1
	done
	die "only $got of $TOKENS approval mails arrived in 180 s"
}

# approvals_setup_tokens: TOKENS fresh approval links through the API (runs
# bench:RUN:appr:1..TOKENS awaiting group:support); the raw tokens in
# TMP/tokens (TMP is private), never on a terminal or a command line.
approvals_setup_tokens() {
	local start got uniq waiting
	say "creating $TOKENS approval links (runs bench:$RUN:appr:1..$TOKENS) through the API"
	start=$SECONDS
	parallel_setup "$TOKENS" setup_token || die "creating the approval links failed"
	cat "$TMP"/tokens.* >"$TMP/tokens" 2>/dev/null || true
	rm -f "$TMP"/tokens.*
	[[ -s $TMP/tokens ]] || approvals_tokens_from_mail
	got=$(wc -l <"$TMP/tokens")
	uniq=$(sort -u "$TMP/tokens" | wc -l)
	[[ $got == "$TOKENS" && $uniq == "$TOKENS" ]] || die "expected $TOKENS distinct tokens, got $got ($uniq distinct)"
	waiting=$(q "SELECT count(*) FROM workflow_runs WHERE idempotency_key LIKE '$KEYS' AND state = 'awaiting_human'")
	[[ $waiting == "$TOKENS" ]] || die "expected $TOKENS runs awaiting_human, found $waiting"
	SETUP_S=$((SECONDS - start))
	say "created in $SETUP_S s"
}

# --- 2. the approval page, and nginx alone -----------------------------------------------

# approvals_run_page: wrk, GET /approve/{token} round-robin over the pool
# as a member of group support; then psql checks that the GETs changed
# nothing.
approvals_run_page() {
	local w p o
	wrk_run page "$BASE_URL" approvals.lua page "$SUBJECT" "$GROUPS_HDR" "$TMP/tokens"
	# A GET changes nothing: every run still waits, every challenge is
	# pending, no effect was enqueued (the approvers' notification mails,
	# approval.notify, were enqueued with the links).
	read -r w p o < <(q "SELECT (SELECT count(*) FROM workflow_runs WHERE idempotency_key LIKE '$KEYS' AND state = 'awaiting_human'),
		(SELECT count(*) FROM approvals WHERE idempotency_key LIKE '$KEYS' AND state = 'pending'),
		(SELECT count(*) FROM effect_outbox WHERE idempotency_key LIKE '$KEYS'
			AND effect_type <> 'approval.notify')" | tr '|' ' ')
	if [[ $w == "$TOKENS" && $p == "$TOKENS" && $o == 0 ]]; then
		CHECK[page]="after ${REQUESTS[page]:-0} GETs: $w runs still awaiting_human, $p challenges pending, no outbox row"
	else
		fail "the page run changed rows: $w/$TOKENS runs awaiting_human, $p/$TOKENS challenges pending, $o outbox rows"
		CHECK[page]="GETs changed rows (see ERRORS)"
	fi
}

# approvals_static_file: the static card the private nginx serves: one card
# from the pool, fetched once, its CSRF value replaced by as many X (the
# same bytes otherwise, and nothing secret in a world-readable file).
approvals_static_file() {
	local file=$APPROVE_NGX_DIR/card.html status card x
	status=$(head -n1 "$TMP/tokens" | awk -v base="$BASE_URL" '{ printf "url = \"%s/approve/%s\"\n", base, $0 }' |
		curl -sS --max-time 10 -K - -H "X-Dev-User: $SUBJECT" -H "X-Dev-Groups: $GROUPS_HDR" "${DEV_KEY_H[@]}" \
			-o "$TMP/card.html" -w '%{http_code}') || die "fetching a card for the static copy failed"
	[[ $status == 200 ]] || die "fetching a card for the static copy: status $status"
	IFS= read -r -d '' card <"$TMP/card.html" || true
	[[ $card =~ (name=\"csrf\"[^>]*value=\")([A-Za-z0-9_-]+) ]] || die "the card has no CSRF value"
	x=${BASH_REMATCH[2]//?/X}
	printf '%s' "${card/"${BASH_REMATCH[0]}"/"${BASH_REMATCH[1]}$x"}" >"$file"
	chmod 644 "$file"
	STATIC_BYTES=$(wc -c <"$file")
	[[ $STATIC_BYTES == "$(wc -c <"$TMP/card.html")" ]] || die "the static copy of the card is not the card's size"
	rm -f "$TMP/card.html"
}

# approvals_run_static: wrk, GET STATIC_PATH from the private nginx, the
# same headers, connections and threads as the page run; every answer
# must be 200 with the (copied) card.
approvals_run_static() {
	[[ -n $APPROVE_NGX_PID ]] || die "the static baseline needs the private nginx"
	approvals_static_file
	wrk_run static "$BASE_URL" approvals.lua static "$SUBJECT" "$GROUPS_HDR" "$STATIC_PATH"
}

# --- 3. pgbench, the bare consume transaction -----------------------------------------------

# approvals_pgbench_consume: scratch copies of the tables (LIKE … INCLUDING
# ALL plus the product's foreign keys) with PG_ROWS pending challenges;
# pgbench runs consume.sql, each client consuming its own rows; psql
# checks every transaction did the whole job; the tables are dropped.
approvals_pgbench_consume() {
	local per rows payload phash start processed a r e o
	per=$((PG_ROWS / CONNS))
	rows=$((per * CONNS))
	payload='{"to":"x@example.com"}'
	phash=sha256:$(printf '%s' "$payload" | sha256sum | cut -c1-64)
	say "creating the scratch tables with $rows pending challenges ($per per client)"
	APPROVE_TABLES=yes
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
		FROM generate_series(1, $rows) AS i;
		INSERT INTO bench_approvals (client_id, idempotency_key, token_hash, approver,
		    allowed_decisions, requested_by, separation_of_duties, expires_at)
		SELECT 1, i::text, decode(lpad(to_hex(i::bigint), 64, '0'), 'hex'), 'group:support',
		    '{approve,reject}', '$REQUESTER', true, now() + interval '1 day'
		FROM generate_series(1, $rows) AS i;
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
	PG_FILLED=$rows

	pgbench_run pg.consume consume consume.sql -D "per=$per" -D n=0 -D cid=1 -D decision=approve \
		-D "subject=$SUBJECT" -D reason=bench -D etype=email.send -D etarget=demo_smtp \
		-D "payload=$payload" -D "phash=$phash" -D delay=0
	processed=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$TMP/pgbench.consume")

	# Every transaction did the whole job: as many challenges decided, runs
	# approved, timeline rows and outbox rows as transactions.
	read -r a r e o < <(q "SELECT (SELECT count(*) FROM bench_approvals WHERE state = 'decided'),
		(SELECT count(*) FROM bench_runs WHERE state = 'approved'),
		(SELECT count(*) FROM bench_run_events),
		(SELECT count(*) FROM bench_outbox WHERE approval_id IS NOT NULL)" | tr '|' ' ')
	if [[ -n $processed && $a == "$processed" && $r == "$processed" && $e == "$processed" && $o == "$processed" ]]; then
		CHECK[pg.consume]="$processed transactions: $a challenges decided, $r runs approved, $e timeline rows, $o outbox rows"
	else
		fail "pgbench, consume: ${processed:-?} transactions but $a challenges decided, $r runs approved, $e timeline rows, $o outbox rows"
		CHECK[pg.consume]="rows not as expected (see ERRORS)"
	fi
	psql -X -q -v ON_ERROR_STOP=1 -c 'DROP TABLE bench_outbox, bench_approvals, bench_run_events, bench_runs' >/dev/null
	APPROVE_TABLES=no
}

# --- 4. the approve POST --------------------------------------------------------------------

# approvals_fetch_csrf: the CSRF value of every card, one GET per token, not
# timed, into TMP/forms ("TOKEN CSRF" lines). curl reads the URLs from a
# file (the tokens stay off its command line) and fetches 8 at a time.
approvals_fetch_csrf() {
	local ok i
	local -a pages=()
	say "fetching the CSRF value of $TOKENS cards"
	mkdir "$TMP/pages"
	awk -v base="$BASE_URL" -v dir="$TMP/pages" \
		'{ printf "url = \"%s/approve/%s\"\noutput = \"%s/%d\"\n", base, $0, dir, NR }' \
		"$TMP/tokens" >"$TMP/cards.curl"
	curl -sS --no-progress-meter --parallel --parallel-max 8 --max-time 30 -K "$TMP/cards.curl" \
		-H "X-Dev-User: $SUBJECT" -H "X-Dev-Groups: $GROUPS_HDR" "${DEV_KEY_H[@]}" -w '%{http_code}\n' >"$TMP/cards.status" ||
		die "fetching the cards failed"
	ok=$(grep -c '^200$' "$TMP/cards.status" || true)
	[[ $ok == "$TOKENS" ]] || die "fetching the cards: $ok of $TOKENS answered 200"
	# The value of the card's <input name="csrf" …>, page by page in order.
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
}

# shellcheck disable=SC2317  # also called by the EXIT trap
approvals_resume_dispatcher() {
	[[ -n ${DISPATCH_PID:-} ]] && kill -CONT "$DISPATCH_PID" 2>/dev/null
	return 0
}

# approvals_run_decide: wrk, POST /approve/{token} decision=approve for
# every token exactly once: one wrk thread per connection, each POSTing its
# share of the forms once; wrk is interrupted when every thread has
# reported its share done. Then psql checks every token was consumed once.
approvals_run_decide() {
	local done_file=$TMP/decide.done limit_s rc=0 start_us snap_b=no timed_out=no lines i nap_fd
	local r a o od
	local -a cmd done_lines
	approvals_fetch_csrf
	: >"$done_file"
	cmd=(wrk "-t$CONNS" "-c$CONNS" -d1h -s "$HERE/approvals.lua" "$BASE_URL"
		-- decide "$SUBJECT" "$GROUPS_HDR" "$TMP/forms" "$done_file" "$CONNS")
	CMD[decide]=$(show_cmd "${cmd[@]}")
	say "oncegate, approve POST: ${CMD[decide]}"
	# Generous: 20 consumes/s would still finish.
	limit_s=$((TOKENS / 20 + 30))
	# The stack's dispatcher would send the TOKENS mails this run enqueues
	# while it runs, on the same cores as the responder and PostgreSQL (in
	# production it runs on its own hosts): paused (SIGSTOP) for the run,
	# resumed after it, and at exit whatever happens.
	DISPATCH_PID=$(pid_file "$STATE/dispatch.pid" oncegate-dispatch)
	if [[ -n $DISPATCH_PID ]]; then
		at_exit approvals_resume_dispatcher
		kill -STOP "$DISPATCH_PID"
	fi
	"${cmd[@]}" >"$TMP/wrk.decide" 2>&1 &
	BG_PID=$!
	# A FIFO opened read-write never delivers anything: read -t on it is a
	# sleep without a process.
	[[ -p $TMP/nap ]] || mkfifo "$TMP/nap"
	exec {nap_fd}<>"$TMP/nap"
	start_us=${EPOCHREALTIME/./}
	sleep 0.3
	cpu_snapshot "$TMP/cpu.a" "$BG_PID"
	# CPU from 0.3 s in until the first thread runs out of tokens: the steady
	# state with every connection busy. The polling forks nothing (builtins
	# only), so it barely shows in the CPU figures.
	while :; do
		mapfile -t done_lines <"$done_file"
		lines=${#done_lines[@]}
		if [[ $snap_b == no ]] && ((lines >= 1)); then
			cpu_snapshot "$TMP/cpu.b" "$BG_PID"
			snap_b=yes
		fi
		((lines >= CONNS)) && break
		running "$BG_PID" || break
		if ((${EPOCHREALTIME/./} - start_us > limit_s * 1000000)); then
			timed_out=yes
			break
		fi
		read -r -t 0.05 -u "$nap_fd" _ || true
	done
	exec {nap_fd}>&-
	[[ $snap_b == yes ]] || cpu_snapshot "$TMP/cpu.b" "$BG_PID"
	# SIGINT ends wrk's sleep: it joins its (stopped) threads and calls
	# done(). A signal that lands on a thread still on its way out does not
	# wake the main thread: send it again until wrk is gone.
	for ((i = 0; i < 50; i++)); do
		running "$BG_PID" || break
		kill -INT "$BG_PID" 2>/dev/null || true
		sleep 0.2
	done
	wait "$BG_PID" || rc=$?
	BG_PID=''
	approvals_resume_dispatcher
	CPU[decide]=$(cpu_report "$TMP/cpu.a" "$TMP/cpu.b" wrk)
	# wrk's own Requests/sec and latency include the wait for the
	# interrupt: the lines of approvals.lua are the result.
	sed 's/^/    /' "$TMP/wrk.decide" >&2
	[[ $timed_out == no ]] || fail "oncegate, approve POST: not done after $limit_s s ($(wc -l <"$done_file") of $CONNS threads)"
	wrk_result decide "$TMP/wrk.decide" "$rc"
	if [[ ${REQUESTS[decide]:-0} != "$TOKENS" ]]; then
		fail "oncegate, approve POST: ${REQUESTS[decide]:-0} answers for $TOKENS tokens"
	fi

	# Every token consumed once: the runs approved by the subject, the
	# challenges decided, one outbox row per run naming its challenge. The
	# stack's dispatcher may have sent the effect and completed the run
	# already: approved or completed.
	read -r r a o od < <(q "SELECT (SELECT count(*) FROM workflow_runs WHERE idempotency_key LIKE '$KEYS'
			AND state IN ('approved', 'completed') AND decision = 'approve' AND decided_by = '$SUBJECT'),
		(SELECT count(*) FROM approvals WHERE idempotency_key LIKE '$KEYS' AND state = 'decided'
			AND decision = 'approve' AND approver_subject = '$SUBJECT'),
		(SELECT count(*) FROM effect_outbox WHERE idempotency_key LIKE '$KEYS'
			AND effect_type = 'email.send' AND target = 'demo_smtp' AND approval_id IS NOT NULL),
		(SELECT count(DISTINCT idempotency_key) FROM effect_outbox WHERE idempotency_key LIKE '$KEYS'
			AND effect_type <> 'approval.notify')" | tr '|' ' ')
	if [[ $r == "$TOKENS" && $a == "$TOKENS" && $o == "$TOKENS" && $od == "$TOKENS" ]]; then
		CHECK[decide]="$r runs approved (or completed since), $a challenges decided, $o effect_outbox rows (one per run)"
	else
		fail "after the POST run: $r/$TOKENS runs approved, $a/$TOKENS challenges decided, $o/$TOKENS outbox rows ($od runs)"
		CHECK[decide]="rows not as expected (see ERRORS)"
	fi
}

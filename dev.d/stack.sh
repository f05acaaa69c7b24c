# shellcheck shell=bash
# dev.d/stack.sh — a stack's responder config and schema, responder, nginx, demo providers and dispatcher, API key, env file, and the stack as a whole (steps e-j).
# Sourced by ./dev, which sets ROOT, DEV_DIR, STATE_ROOT, PGBIN, PYTHON and
# the stack variables first; defines functions and runs nothing.

# --- e, f. responder config and schema -----------------------------------------------

# write_if_changed FILE: stdin replaces FILE when different; status 0 when
# it changed. New files are 0600: some hold secrets.
write_if_changed() {
	local new
	new=$(cat)
	if [[ -f $1 && $(cat "$1") == "$new" ]]; then return 1; fi
	(umask 077 && printf '%s\n' "$new" >"$1")
}

# The demo stacks (./dev up, the n8n test) load the shipped contracts with
# one addition: the contracts the n8n examples use (support_reply, crm_tag)
# tell their approvers by mail, at the demo approvers' mailbox on the demo
# SMTP server (./dev mail --to DEMO_APPROVERS reads it), instead of leaving
# the links to the workflow.
DEMO_APPROVERS=approvers@demo.example
demo_contracts() {
	local dir=$1
	rm -rf "$dir" && mkdir -p "$dir"
	cp "$ROOT"/contracts/*.json "$dir/"
	"$PYTHON" - "$DEMO_APPROVERS" "$dir/support_reply.json" "$dir/crm_tag.json" <<-'PY'
		import json, sys
		mailbox = sys.argv[1]
		for path in sys.argv[2:]:
		    c = json.load(open(path, encoding="utf-8"))
		    c["gate"]["notify"] = {a: {"target": "demo_smtp", "to": [mailbox]}
		                           for a in c["gate"]["approvers"]}
		    with open(path, "w", encoding="utf-8") as f:
		        json.dump(c, f, ensure_ascii=False, indent=2)
		        f.write("\n")
	PY
}

# The origins n8n may be reached at for callbacks: the n8n test's own port,
# else ONCEGATE_CALLBACK_ORIGINS (space-separated; e.g. a second n8n on
# 5679: ONCEGATE_CALLBACK_ORIGINS="http://127.0.0.1:5678 http://127.0.0.1:5679"
# ./dev up), else n8n's default at 127.0.0.1 and localhost.
callback_origins() {
	if [[ $STACK == n8n && -n ${ONCEGATE_N8N_PORT:-} ]]; then
		echo "http://127.0.0.1:$ONCEGATE_N8N_PORT"
	elif [[ $STACK == up ]]; then
		echo "${ONCEGATE_CALLBACK_ORIGINS:-http://127.0.0.1:5678 http://localhost:5678}"
	else
		echo "http://127.0.0.1:5678"
	fi
}

write_config() {
	local lease_default=300 lease_max=3600 lease_cap=86400
	# The test suite relies on a short cap to watch leases run out.
	if [[ $STACK == test || $STACK == test-b ]]; then
		lease_default=30 lease_max=60 lease_cap=10
	fi
	# The CSRF secret is made once per stack and kept (0600) so that forms
	# stay valid across restarts.
	if [[ ! -s $STATE/csrf_secret ]]; then
		(umask 077 && head -c 36 /dev/urandom | base64 | tr '+/' '-_' >"$STATE/csrf_secret")
	fi
	# The proxy secret nginx proves itself with (fastcgi_param
	# OG_PROXY_SECRET): the responder reads it from proxy_secret, nginx's
	# master from proxy_secret.nginx; both 0600 root, made once per stack.
	proxy_secret_make "$STATE"
	# The test, soak and chaos stacks also load the test-only contracts of
	# tests/data/contracts-test (act-with-window, sample_rate 1.0, mail to a
	# list of recipients) beside the shipped ones, as copies, which a
	# scenario may change (and reload) without touching the checkout.
	local contracts=$ROOT/contracts
	if [[ $STACK == test || $STACK == test-b || $STACK == soak || $STACK == chaos ]]; then
		contracts=$STATE/contracts
		rm -rf "$contracts" && mkdir -p "$contracts"
		cp "$ROOT"/contracts/*.json "$ROOT"/tests/data/contracts-test/*.json "$contracts/"
	elif [[ $STACK == up || $STACK == n8n ]]; then
		contracts=$STATE/contracts
		demo_contracts "$contracts"
	fi
	CONF_CHANGED=no
	if write_if_changed "$CONF"; then CONF_CHANGED=yes; fi <<-EOF
		# Written by ./dev $STACK; edits are overwritten on the next run.
		listen = $STATE/fcgi.sock
		listen_mode = 0660
		listen_group = www-data
		threads = 8
		# no user: each program connects as its PGUSER (the schema owner
		# for migrate, a login role of its own otherwise)
		database = "host=$STATE/run port=$PG_PORT dbname=oncegate"
		lease_default_seconds = $lease_default
		lease_max_seconds = $lease_max
		lease_cap_seconds = $lease_cap
		# a key answers duplicate for a year after its run finished
		duplicate_window_days = 365
		log_file = $STATE/decisions.log
		log_level = info
		sql_dir = $ROOT/sql
		max_body_bytes = 262144
		retry_after_seconds = 5
		contracts_dir = $contracts
		templates_dir = $ROOT/templates
		public_url = http://127.0.0.1:$HTTP_PORT
		csrf_secret = $(cat "$STATE/csrf_secret")
		proxy_secret_file = $STATE/proxy_secret
		# n8n's resume URLs (the decision callbacks go there too):
		# ONCEGATE_CALLBACK_ORIGINS, else n8n's default port on this machine
		callback_origins = $(callback_origins)

		# oncegate-dispatch
		dispatch_workers = 4
		dispatch_poll_ms = 500
		reconcile_interval_seconds = 10

		# Targets the example contracts name, answered by the demo provider
		# (tests/providers) that ./dev up starts beside the stack.
		[target demo_http]
		kind = http
		url = http://127.0.0.1:$DEMO_HTTP_PORT/effects
		lookup_url = http://127.0.0.1:$DEMO_HTTP_PORT/effects/lookup
		idempotency_key = 1
		provider_id_header = X-Provider-Id
		rejection_pointer = !/ok

		[target demo_smtp]
		kind = smtp
		url = smtp://127.0.0.1:$DEMO_SMTP_PORT
		mail_from = oncegate@demo.example
		timeout_ms = 10000
	EOF
	# It holds csrf_secret: only root, as whom the responder, the
	# dispatcher and oncegatectl run here, reads it.
	chmod 0600 "$CONF"
}

# ./dev up's key for its approval pages (nginx/oncegate-local.conf.in):
# other local users reach loopback too, and X-Dev-User would let them be
# anyone. STATE/dev_key (the key), STATE/dev-key.header (curl -H @FILE,
# which keeps it off command lines) and STATE/dev_key.nginx (nginx's map),
# all 0600 root. The other stacks have none: their suites are root's.
dev_key_files() {
	if [[ $STACK != up ]]; then
		rm -f "$STATE/dev_key" "$STATE/dev-key.header" "$STATE/dev_key.nginx"
		return 0
	fi
	if [[ ! -s $STATE/dev_key ]]; then
		(umask 077 && od -An -tx1 -N 24 /dev/urandom | tr -d ' \n' >"$STATE/dev_key")
	fi
	(umask 077 && printf 'X-Dev-Key: %s\n' "$(cat "$STATE/dev_key")" >"$STATE/dev-key.header")
	printf '"%s" 1;\n"" 0;\n"~^" 0;\n' "$(cat "$STATE/dev_key")" |
		write_if_changed "$STATE/dev_key.nginx" || true
	chmod 0600 "$STATE/dev_key" "$STATE/dev-key.header" "$STATE/dev_key.nginx"
}

# oncegatectl as the stack's operator; migrate as the schema owner.
ctl() { PGUSER=oncegate-operator "$BUILD/oncegatectl" -c "$CONF" "$@"; }

migrate() {
	say "oncegatectl migrate"
	PGUSER=oncegate "$BUILD/oncegatectl" -c "$CONF" migrate
}

# --- g. responder ------------------------------------------------------------------------

fcgi_start() {
	local pid i
	pid=$(pid_of "$STATE/fcgi.pid")
	# Reuse a running responder unless it runs an older binary or config.
	if [[ -n $pid ]]; then
		if [[ $CONF_CHANGED == no && ! $BUILD/oncegate-fcgi -nt $STATE/fcgi.pid ]]; then
			return 0
		fi
		say "new build or config: restarting oncegate-fcgi"
		fcgi_stop
	fi
	rm -f "$STATE/fcgi.sock"
	say "starting oncegate-fcgi"
	# setsid: out of the terminal's process group, so ^C reaches only this
	# script, whose trap then stops the responder in order.
	PGUSER=oncegate-fcgi ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		setsid "$BUILD/oncegate-fcgi" -c "$CONF" \
		</dev/null >>"$STATE/fcgi.stderr" 2>&1 9>&- &
	pid=$!
	echo "$pid" >"$STATE/fcgi.pid"
	# Wait for its socket, but not for a process that already died.
	for ((i = 0; i < 300; i++)); do
		[[ -S $STATE/fcgi.sock ]] && return 0
		running "$pid" || break
		sleep 0.1
	done
	tail -n 30 "$STATE/fcgi.stderr" >&2
	die "oncegate-fcgi did not start (log: $STATE/fcgi.stderr)"
}

fcgi_stop() {
	# SIGTERM lets in-flight requests finish (shutdown_grace_seconds, 30).
	stop_pid oncegate-fcgi "$STATE/fcgi.pid" TERM 40
}

# --- h. nginx --------------------------------------------------------------------------------

nginx_cmd() {
	nginx -p "$STATE/nginx" -c "$STATE/nginx/nginx.conf" -e "$STATE/nginx/error.log" "$@"
}

stack_nginx_start() {
	local pid changed=no before
	before=$(cat "$STATE/nginx/nginx.conf" 2>/dev/null || true)
	dev_key_files
	# nginx workers (www-data) may not read the checkout: nginx_site serves
	# a copy of the style sheet.
	nginx_site "$STATE" "$STATE/fcgi.sock" "$HTTP_PORT" "$STATE/proxy_secret.nginx" ||
		die "cannot render nginx/oncegate-local.conf.in"
	[[ $(cat "$STATE/nginx/nginx.conf") == "$before" ]] || changed=yes
	nginx_cmd -t -q || die "nginx rejects $STATE/nginx/nginx.conf"
	pid=$(pid_of "$STATE/nginx/nginx.pid")
	if [[ -n $pid && $changed == yes ]]; then
		say "nginx config changed: reloading"
		kill -HUP "$pid"
	elif [[ -z $pid ]]; then
		say "starting nginx on 127.0.0.1:$HTTP_PORT"
		rm -f "$STATE/nginx/nginx.pid"
		nginx_cmd 9>&- # daemon on: it writes nginx.pid itself
	fi
	wait_for 30 "http://127.0.0.1:$HTTP_PORT/healthz" healthy ||
		die "the stack is not healthy: see $STATE/nginx/error.log and $STATE/fcgi.stderr"
}

healthy() {
	curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$HTTP_PORT/healthz" 2>/dev/null
}

stack_nginx_stop() {
	stop_pid nginx "$STATE/nginx/nginx.pid" TERM 20
}

# --- h2. demo provider and dispatcher (./dev up only) ----------------------------------

# demo_start NAME PIDFILE COMMAND...: a provider of tests/providers, started
# once; it prints "ready PORT" when it listens.
demo_start() {
	local name=$1 pidfile=$2 pid i
	shift 2
	[[ -n $(pid_of "$pidfile") ]] && return 0
	say "starting $name"
	setsid "$@" --pid "$pidfile" </dev/null >>"$STATE/$name.out" 2>&1 9>&- &
	pid=$!
	for ((i = 0; i < 100; i++)); do
		grep -q '^ready' "$STATE/$name.out" 2>/dev/null && [[ -s $pidfile ]] && return 0
		running "$pid" || break
		sleep 0.1
	done
	tail -n 20 "$STATE/$name.out" >&2
	die "$name did not start (log: $STATE/$name.out)"
}

demo_providers_start() {
	: >"$STATE/demo-http.out"
	: >"$STATE/demo-smtp.out"
	# The demo mailbox holds approval links: root's alone (the sink
	# appends to a file that exists and keeps its mode).
	(umask 077 && : >>"$STATE/demo-smtp.jsonl")
	chmod 0600 "$STATE/demo-smtp.jsonl" "$STATE/demo-smtp.out" "$STATE/demo-http.out"
	demo_start demo-http "$STATE/demo-http.pid" \
		"$PYTHON" "$ROOT/tests/providers/http_provider.py" --port "$DEMO_HTTP_PORT"
	demo_start demo-smtp "$STATE/demo-smtp.pid" \
		"$PYTHON" "$ROOT/tests/providers/smtp_sink.py" --port "$DEMO_SMTP_PORT" \
		--record "$STATE/demo-smtp.jsonl"
}

demo_providers_stop() {
	stop_pid demo-smtp "$STATE/demo-smtp.pid" TERM 10
	stop_pid demo-http "$STATE/demo-http.pid" TERM 10
}

# The local stack sends: AI_ACTIONS_ENABLED=true here, and sends
# resumed in the database (the kill switch released). Everywhere else both default to off.
dispatch_start() {
	local pid
	pid=$(pid_of "$STATE/dispatch.pid")
	if [[ -n $pid ]]; then
		if [[ ! $BUILD/oncegate-dispatch -nt $STATE/dispatch.pid ]]; then
			# SIGHUP reloads the targets and reopens the log.
			[[ $CONF_CHANGED == yes ]] && kill -HUP "$pid"
			return 0
		fi
		say "new build: restarting oncegate-dispatch"
		dispatch_stop
	fi
	ctl sends resume --reason "./dev up: the local stack sends to the demo provider" 2>/dev/null
	say "starting oncegate-dispatch"
	PGUSER=oncegate-dispatch AI_ACTIONS_ENABLED=true setsid "$BUILD/oncegate-dispatch" -c "$CONF" \
		</dev/null >>"$STATE/dispatch.stderr" 2>&1 9>&- &
	echo "$!" >"$STATE/dispatch.pid"
	sleep 0.3
	running "$(cat "$STATE/dispatch.pid")" || {
		tail -n 20 "$STATE/dispatch.stderr" >&2
		die "oncegate-dispatch did not start (log: $STATE/dispatch.stderr)"
	}
}

dispatch_stop() {
	# SIGTERM: in-flight sends finish or go back (dispatch_shutdown_seconds).
	stop_pid oncegate-dispatch "$STATE/dispatch.pid" TERM 30
}

# --- i. API key --------------------------------------------------------------------------------

# A client named dev, created once; its key is shown only at creation, so it
# is kept in the state directory for the next run.
api_key() {
	local list key
	list=$(ctl client list)
	if awk '$1 == "dev" { found = 1 } END { exit !found }' <<<"$list"; then
		[[ -s $STATE/api_key ]] ||
			die "client 'dev' exists but $STATE/api_key is lost; revoke it or remove $STATE"
		return 0
	fi
	say "oncegatectl client add dev"
	key=$(ctl client add dev --reason "./dev: the local stack's own client")
	[[ $key =~ ^[^[:space:]]+$ ]] || die "client add printed no single key"
	(umask 077 && printf '%s\n' "$key" >"$STATE/api_key")
}

# --- j. env file ---------------------------------------------------------------------------------

# env_vars: NAME=VALUE lines of the stack's environment.
env_vars() {
	printf '%s\n' \
		"ONCEGATE_URL=http://127.0.0.1:$HTTP_PORT" \
		"ONCEGATE_API_KEY=$(head -n1 "$STATE/api_key")" \
		"PGHOST=$STATE/run" \
		"PGPORT=$PG_PORT" \
		"PGDATABASE=oncegate" \
		"PGUSER=oncegate" \
		"PGPASSFILE=$STATE/pgpass" \
		"ONCEGATE_PGUSER_FCGI=oncegate-fcgi" \
		"ONCEGATE_PGUSER_DISPATCH=oncegate-dispatch" \
		"ONCEGATE_PGUSER_OPERATOR=oncegate-operator" \
		"ONCEGATE_PGUSER_AUDITOR=oncegate-auditor" \
		"ONCEGATE_CONF=$CONF" \
		"ONCEGATE_LOG=$STATE/decisions.log"
	if [[ $STACK == up ]]; then
		printf '%s\n' \
			"ONCEGATE_DEV_KEY=$(cat "$STATE/dev_key")" \
			"ONCEGATE_DEMO_HTTP=http://127.0.0.1:$DEMO_HTTP_PORT" \
			"ONCEGATE_DEMO_SMTP_LOG=$STATE/demo-smtp.jsonl"
	fi
	if [[ $STACK == test || $STACK == test-b ]]; then
		printf '%s\n' \
			"ONCEGATE_CTL=$BUILD/oncegatectl" \
			"ONCEGATE_DISPATCH=$BUILD/oncegate-dispatch" \
			"ONCEGATE_PROVIDERS=$ROOT/tests/providers" \
			"ONCEGATE_PYTHON=$PYTHON" \
			"ONCEGATE_TEST_PG_STOP=$(pg_stop_cmd)" \
			"ONCEGATE_TEST_PG_START=$(pg_start_cmd)"
	fi
}

# env_export: the stack's environment (env_vars) exported into this shell.
env_export() {
	local line
	while IFS= read -r line; do export "${line?}"; done < <(env_vars)
}

write_env() {
	local file=$1 line
	# It holds the API key.
	(umask 077 && : >"$file")
	chmod 0600 "$file"
	{
		printf '# Written by ./dev %s: source it with  . %s\n' "$STACK" "${file#"$ROOT"/}"
		while IFS= read -r line; do
			printf "export %s='%s'\n" "${line%%=*}" "${line#*=}"
		done < <(env_vars | sed "s/'/'\\\\''/g")
	} >"$file"
}

# --- the stacks ------------------------------------------------------------------------------------

# Steps a-j, shared by up and test.
stack_start() {
	install_packages
	autoreconf_if_needed
	build "$@"
	stack_run
}

# Steps d-i on a build that is there: the cluster, config and schema,
# responder, nginx, API key.
stack_run() {
	choose_ports
	pg_setup
	write_config
	migrate
	fcgi_start
	stack_nginx_start
	api_key
}

# stack_wipe: a fresh start for a throwaway stack (test, test-b, n8n, chaos,
# soak): leftovers of a killed run stopped, the state directory emptied but
# for its lock, the ports chosen again.
stack_wipe() {
	stack_stop
	find "$STATE" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
	rm -f "$STATE/ports"
}

# Everything stops in reverse order of dependency, each by its recorded PID.
stack_stop() {
	dispatch_stop
	demo_providers_stop
	stack_nginx_stop
	fcgi_stop
	pg_stop
}

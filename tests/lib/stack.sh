# shellcheck shell=bash
# tests/lib/stack.sh — the shell helpers ./dev and the test scripts under
# tests/ share: messages, psql, free loopback ports, waiting, stopping a
# child process, a private nginx. Sourced after `set -euo pipefail`; it
# defines functions and runs nothing.
#
# A script may set, before its first message:
#   SAY_PREFIX  what say prints before each line ('==>' unless set);
#   DIE_PREFIX  what die prints before its message, followed by ': ' (the
#               script's file name unless set).

# say MESSAGE...: a progress line on stderr.
say() { printf '%s %s\n' "${SAY_PREFIX:-==>}" "$*" >&2; }

# die MESSAGE...: the message on stderr, exit 1.
die() { printf '%s: %s\n' "${DIE_PREFIX:-${0##*/}}" "$*" >&2; exit 1; }

# need_env HINT VAR...: exit 2 naming the first VAR that is unset or empty;
# HINT says what sets them (e.g. "./dev test or ./dev chaos").
need_env() {
	local hint=$1 v
	shift
	for v in "$@"; do
		[[ -n ${!v:-} ]] || { echo "${0##*/}: $v is not set (run under $hint)" >&2; exit 2; }
	done
}

# need_stack NAME VAR...: a script that drives the stack ./dev test starts:
# exit 77 (skipped), saying so as NAME, when ONCEGATE_URL is not set; die
# when it is but a VAR is not.
need_stack() {
	local name=$1 v
	shift
	if [[ -z ${ONCEGATE_URL:-} ]]; then
		echo "$name: ONCEGATE_URL is not set; run ./dev test to start the stack. Skipping."
		exit 77
	fi
	for v in "$@"; do
		[[ -n ${!v:-} ]] || die "ONCEGATE_URL is set but $v is not"
	done
}

# stack_script NAME VAR [NEEDED...]: the head of a script that drives the
# stack ./dev test starts: its messages say "NAME:" (a failure "NAME: FAIL"),
# HERE is its directory and ROOT the checkout's; it exits 77 (skipped),
# saying so, when VAR is not set (no stack), and 2 when a NEEDED variable
# is not.
# shellcheck disable=SC2034 # set for the sourcing script
stack_script() {
	local name=$1 var=$2
	shift 2
	SAY_PREFIX="$name:" DIE_PREFIX="$name: FAIL"
	HERE=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd -P)
	ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
	if [[ -z ${!var:-} ]]; then
		echo "$name: $var is not set; run under ./dev test. Skipping."
		exit 77
	fi
	need_env "./dev test" "$@"
}

# as_root_install PACKAGE...: Debian packages installed (apt-get, as root;
# the package lists refreshed once when the first try fails).
as_root_install() {
	[[ $(id -u) -eq 0 ]] || die "$* missing: install it (apt-get install $*) or run as root"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >&2 ||
		{ apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >&2; }
}

# node_tools DIR: Node.js and npm present, and DIR/node_modules as
# DIR/package-lock.json pins it (npm ci only when node_modules does not
# match the lockfile; npm reuses its cache, so a warm machine needs no
# network).
node_tools() {
	local dir=$1
	if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
		say "installing Node.js and npm"
		as_root_install nodejs npm
	fi
	if ! cmp -s "$dir/package-lock.json" "$dir/node_modules/.oncegate-lock" 2>/dev/null; then
		say "npm ci in $dir"
		(cd "$dir" && npm ci --no-audit --no-fund --prefer-offline >&2) || die "npm ci in $dir failed"
		cp "$dir/package-lock.json" "$dir/node_modules/.oncegate-lock"
	fi
}

# q SQL: one statement through psql (PG* from the environment), unaligned,
# tuples only; stops at the first error.
q() { psql -X -At -v ON_ERROR_STOP=1 -c "$1"; }

# qt SQL: the same, its columns separated by tabs.
qt() { psql -X -At -F $'\t' -v ON_ERROR_STOP=1 -c "$1"; }

# --- processes -----------------------------------------------------------------

# running PID: the process exists and is not a zombie (a child of ours that
# exited stays one until it is waited for).
running() {
	local stat
	[[ $1 =~ ^[0-9]+$ ]] || return 1
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat%% *} != Z ]]
}

# pid_file FILE STRING: the PID recorded in FILE when that process's command
# line contains STRING (so a recycled PID never passes), or nothing.
pid_file() {
	local pid exe
	[[ -s $1 ]] || return 0
	pid=$(head -n1 "$1")
	[[ $pid =~ ^[0-9]+$ ]] || return 0
	exe=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 0
	[[ $exe == *"$2"* ]] && echo "$pid"
	return 0
}

# stop_child PID SECONDS [NAME [SIGNAL]]: sends SIGNAL (TERM) to PID, waits
# up to SECONDS for it to exit, then SIGKILL (said when NAME is given and it
# still ran); reaps it when it is our child. Nothing when PID is empty.
stop_child() {
	local pid=$1 secs=$2 name=${3:-} sig=${4:-TERM} i
	[[ -n $pid ]] || return 0
	kill "-$sig" "$pid" 2>/dev/null || true
	for ((i = 0; i < secs * 10; i++)); do
		running "$pid" || break
		sleep 0.1
	done
	if running "$pid"; then
		[[ -z $name ]] || say "$name (pid $pid) did not stop: SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}

# kill_tree PID [SIGNAL]: SIGNAL (TERM) to PID and every process below it,
# children first found, by PID (read from /proc before any is signalled).
kill_tree() {
	local pid=$1 sig=${2:-TERM} child
	[[ $pid =~ ^[0-9]+$ ]] || return 0
	kill -STOP "$pid" 2>/dev/null || return 0
	for child in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do
		kill_tree "$child" "$sig"
	done
	kill "-$sig" "$pid" 2>/dev/null || true
	kill -CONT "$pid" 2>/dev/null || true
}

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.1 s until it
# succeeds; says so and fails after SECONDS.
wait_for() {
	local secs=$1 what=$2 i
	shift 2
	for ((i = 0; i < secs * 10; i++)); do
		if "$@"; then return 0; fi
		sleep 0.1
	done
	say "timed out after ${secs}s waiting for $what"
	return 1
}

# sanitizer_findings FILE: true, with the reports on stderr, when FILE (a
# program's stderr) holds an AddressSanitizer, UBSan or LeakSanitizer report.
sanitizer_findings() {
	local re='ERROR: AddressSanitizer|runtime error:|LeakSanitizer'
	grep -qE "$re" "$1" 2>/dev/null || return 1
	say "sanitizer findings in $1:"
	grep -E -A 30 "$re" "$1" | head -n 120 >&2
}

# --- ports -----------------------------------------------------------------------

# port_free PORT: nothing listens on 127.0.0.1:PORT (a connect that succeeds
# means somebody does).
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port FIRST [LAST]: the first loopback port from FIRST up to LAST
# (FIRST + 400 unless given) that nothing listens on; fails when none is.
free_port() {
	local p last=${2:-$(($1 + 400))}
	for ((p = $1; p < last; p++)); do
		if port_free "$p"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# --- a private nginx ---------------------------------------------------------------

# nginx_start DIR: starts an nginx of our own from DIR/nginx.conf (its pid
# file DIR/nginx.pid, its error log DIR/error.log) and prints its master's
# PID; fails when the config does not pass nginx -t or nginx did not start.
nginx_start() {
	local dir=$1 bin i pid
	bin=$(command -v nginx || echo /usr/sbin/nginx)
	[[ -x $bin ]] || { printf 'nginx is not installed\n' >&2; return 1; }
	"$bin" -q -t -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" || return 1
	"$bin" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" || return 1
	for ((i = 0; i < 50; i++)); do
		[[ -s $dir/nginx.pid ]] && break
		sleep 0.1
	done
	pid=$(pid_file "$dir/nginx.pid" nginx)
	[[ -n $pid ]] || { printf 'nginx in %s wrote no PID\n' "$dir" >&2; return 1; }
	echo "$pid"
}

# nginx_stop PID DIR: stops the nginx nginx_start started in DIR: only that
# master, recognised by its command line naming DIR; gracefully, then after
# 5 s for good.
nginx_stop() {
	local pid=$1 dir=$2 i
	[[ -n $pid && -n $dir ]] || return 0
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$dir" || return 0
	kill -QUIT "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		[[ -e /proc/$pid ]] || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
}

# --- what the scenario scripts share ------------------------------------------------

# conf_value NAME: the (first) value of setting NAME in $ONCEGATE_CONF.
conf_value() { sed -nE "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*//p" "$ONCEGATE_CONF" | head -n1; }

# ready_port FILE: the port a loopback provider of tests/providers announces
# as "ready PORT" on its stdout (FILE), once it has (within 10 s); nothing
# when it never does.
ready_port() {
	local i
	for ((i = 0; i < 100; i++)); do grep -q '^ready' "$1" 2>/dev/null && break; sleep 0.1; done
	sed -n 's/^ready \([0-9]*\).*/\1/p' "$1"
}

# provider_start PIDVAR PORTVAR OUT SCRIPT [ARGS...]: the loopback provider
# SCRIPT of tests/providers (http_provider.py, smtp_sink.py, ...) started on
# a free port with ARGS, its output in OUT; PIDVAR gets its PID (a child of
# this shell, for scratch_end or stop_child) and PORTVAR the port it
# announced. Dies, showing OUT, when it announces none within 10 s.
provider_start() {
	local pidvar=$1 portvar=$2 out=$3 script=$4 port
	shift 4
	"${ONCEGATE_PYTHON:-/usr/bin/python3}" \
		"${ONCEGATE_PROVIDERS:-$(dirname "${BASH_SOURCE[0]}")/../providers}/$script" --port 0 "$@" \
		>"$out" 2>&1 </dev/null 9>&- &
	printf -v "$pidvar" '%s' "$!"
	port=$(ready_port "$out")
	[[ -n $port ]] || { cat "$out" >&2; die "${script%.py} did not start"; }
	printf -v "$portvar" '%s' "$port"
}

# outbox_quiet REASON [KEEP_KEY]: nothing sent but what the scenario makes:
# every pending or unknown effect in the database cancelled (but those of
# the idempotency key KEEP_KEY), then the kill switch on (sends allowed),
# with REASON.
outbox_quiet() {
	psql -X -q -v ON_ERROR_STOP=1 -v keep="${2:-}" >/dev/null <<-'EOF'
		UPDATE effect_outbox SET state = 'cancelled'
		 WHERE state IN ('pending', 'unknown') AND idempotency_key <> :'keep';
	EOF
	"$ONCEGATE_CTL" sends resume --reason "$1" >/dev/null 2>&1 || die "oncegatectl could not allow sends"
}

# conf_lines KEY=VALUE...: the "key = value" lines of a config file, in
# order; a KEY given again replaces its earlier value (so a caller's own
# value wins over a shared list like PATIENT_RETRIES).
conf_lines() {
	local kv k
	local -a order=()
	local -A val=()
	for kv; do
		k=${kv%%=*}
		[[ -v "val[$k]" ]] || order+=("$k")
		val[$k]=${kv#*=}
	done
	for k in "${order[@]}"; do printf '%s = %s\n' "$k" "${val[$k]}"; done
}

# target_conf NAME KIND URL [KEY=VALUE...]: a [target NAME] section of a
# dispatcher's config, after a blank line.
target_conf() {
	printf '\n[target %s]\n' "$1"
	conf_lines "kind=$2" "url=$3" "${@:4}"
}

# The retry settings of a scenario's targets that ride out a cut or a
# failover: 10 attempts over at most 600 s, 200 ms to 2 s apart.
# shellcheck disable=SC2034 # for the sourcing scripts
PATIENT_RETRIES=(timeout_ms=5000 connect_timeout_ms=1000 max_attempts=10 base_ms=200 cap_ms=2000 max_elapsed_s=600)

# nginx_site STATE SOCKET PORT SECRET_CONF [SED-EXPRESSION...]: the local
# site (nginx/oncegate-local.conf.in) rendered into STATE/nginx/nginx.conf
# for a private nginx whose files live in STATE/nginx (made, with tmp/ and
# the page's style sheet in assets/, all readable by nginx's workers): on
# 127.0.0.1:PORT, in front of the responder's unix SOCKET, sending the
# proxy secret include SECRET_CONF. The caller's sed expressions apply
# first. Fails, saying so, when a placeholder is left.
nginx_site() {
	local state=$1 sock=$2 port=$3 secret=$4 site e
	local -a edits=()
	shift 4
	for e; do edits+=(-e "$e"); done
	site=$(dirname "${BASH_SOURCE[0]}")/../../nginx/oncegate-local.conf.in
	mkdir -p "$state/nginx/tmp" "$state/nginx/assets"
	chmod 0755 "$state/nginx" "$state/nginx/tmp" "$state/nginx/assets"
	install -m 0644 "$(dirname "$site")/../templates/approval.css" "$state/nginx/assets/approval.css"
	sed "${edits[@]}" -e "s|@PORT@|$port|g" -e "s|@FCGI_SOCKET@|$sock|g" \
		-e "s|@STATE@|$state|g" -e "s|@ASSETS@|$state/nginx/assets|g" \
		-e "s|@PROXY_SECRET_CONF@|$secret|g" "$site" >"$state/nginx/nginx.conf" || return 1
	if grep -v '^[[:space:]]*#' "$state/nginx/nginx.conf" | grep -q '@[A-Z_]*@'; then
		printf 'an @PLACEHOLDER@ is left in %s\n' "$state/nginx/nginx.conf" >&2
		return 1
	fi
}

# check WHAT yes|no: one line of a scenario's verdict; "no" sets fail=1 (the
# script starts with fail=0 and exits with $fail).
# shellcheck disable=SC2034 # fail is the sourcing script's
check() {
	if [[ $2 == yes ]]; then printf '  ok   %s\n' "$1"; else printf '  FAIL %s\n' "$1"; fail=1; fi
}

# yn COMMAND...: "yes" when COMMAND succeeds, else "no" (for check).
yn() { if "$@"; then echo yes; else echo no; fi; }

# approved_effects PREFIX N TARGET FIELD: N runs PREFIX1 … PREFIXN of API
# client 1, approved, each with one crm.tag effect to TARGET whose payload is
# {FIELD: n} (FIELD plain ASCII) with the payload hash an enqueue gives it,
# put straight into the ledger and the outbox (as if each had been approved
# a moment ago), then a NOTIFY that wakes the dispatchers.
approved_effects() {
	psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<-EOF
		INSERT INTO workflow_runs (client_id, idempotency_key, payload_hash, state, claim_started_at)
		SELECT 1, '$1' || g, 'sha256:' || md5(g::text), 'approved', now()
		  FROM generate_series(1, $2) g;
		INSERT INTO effect_outbox (client_id, idempotency_key, effect_type, target, payload,
		    payload_hash, provider_key)
		SELECT 1, '$1' || g, 'crm.tag', '$3', jsonb_build_object('$4', g),
		       'sha256:' || encode(sha256(convert_to('{"$4":' || g || '}', 'UTF8')), 'hex'),
		       '$1' || g || '/crm.tag'
		  FROM generate_series(1, $2) g;
		NOTIFY oncegate_outbox;
	EOF
}

# private_tmp NAME: TMP, a new directory for a script's files that other
# users (nginx's workers, a daemon's user) may traverse (0711); at exit the
# script's cleanup runs (it ends with tmp_done), INT and TERM exit 130.
private_tmp() {
	TMP=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-$1.XXXXXX")
	chmod 0711 "$TMP"
	trap cleanup EXIT
	trap 'exit 130' INT TERM
}

# tmp_done: TMP removed, or kept and said so when KEEP=yes.
tmp_done() { if [[ ${KEEP:-no} == yes ]]; then say "kept $TMP"; else rm -rf "$TMP"; fi; }

# tenant_dumps RUN DIR [RUNS_LIKE]: what a load of RUN left in the database,
# one tab-separated row a thing, each named TENANT|KEY (its API client's
# name): DIR/runs.tsv (key, state, attempt; of the keys LIKE RUNS_LIKE,
# RUN:% unless given), DIR/approvals.tsv (key, state, decision) and
# DIR/effects.tsv (key, provider key, state, dead letters, effect type).
tenant_dumps() {
	local run=$1 dir=$2 runs_like=${3:-$1:%}
	qt "SELECT c.name || '|' || r.idempotency_key, r.state, r.attempt FROM workflow_runs r
		JOIN api_clients c ON c.id = r.client_id WHERE r.idempotency_key LIKE '$runs_like'" >"$dir/runs.tsv"
	qt "SELECT c.name || '|' || a.idempotency_key, a.state, coalesce(a.decision, '') FROM approvals a
		JOIN api_clients c ON c.id = a.client_id WHERE a.idempotency_key LIKE '$run:%'" >"$dir/approvals.tsv"
	qt "SELECT c.name || '|' || e.idempotency_key, e.provider_key, e.state,
		(SELECT count(*) FROM dead_letters d WHERE d.effect_id = e.id), e.effect_type
		FROM effect_outbox e JOIN api_clients c ON c.id = e.client_id
		WHERE e.idempotency_key LIKE '$run%'" >"$dir/effects.tsv"
}

# scratch_begin NAME SIGNAL: TMP, a new private directory for the script's
# files, and PROVIDER_PID, SINK_PID and DISPATCH_PID, empty, for the script
# to fill. At exit the dispatcher is sent SIGNAL and the providers TERM,
# they are waited for, the script's on_cleanup runs (when it defines one)
# and TMP is removed; INT and TERM exit 130.
scratch_begin() {
	TMP=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-$1.XXXXXX")
	PROVIDER_PID='' SINK_PID='' DISPATCH_PID='' SCRATCH_SIGNAL=$2
	trap scratch_end EXIT
	trap 'exit 130' INT TERM
}

# scratch_end: what scratch_begin has run at exit.
scratch_end() {
	[[ -z $DISPATCH_PID ]] || kill "-$SCRATCH_SIGNAL" "$DISPATCH_PID" 2>/dev/null || true
	[[ -z $PROVIDER_PID ]] || kill -TERM "$PROVIDER_PID" 2>/dev/null || true
	[[ -z $SINK_PID ]] || kill -TERM "$SINK_PID" 2>/dev/null || true
	wait 2>/dev/null || true
	if declare -F on_cleanup >/dev/null; then on_cleanup; fi
	rm -rf "$TMP"
}

# proxy_secret_make DIR [OWNER]: the proxy secret of a stack: DIR/proxy_secret
# (the responder's proxy_secret_file, 0600, OWNER's when given: the user the
# responder runs as), made once (a scenario's fresh DIR gets a new one, a
# ./dev stack keeps its across runs), and DIR/proxy_secret.nginx (the
# include nginx's master reads at start and sends it with, 0600 root;
# nginx/oncegate-local.conf.in's @PROXY_SECRET_CONF@).
proxy_secret_make() {
	local dir=$1 owner=${2:-}
	(umask 077 &&
		{ [[ -s $dir/proxy_secret ]] || head -c 36 /dev/urandom | base64 | tr '+/' '-_' >"$dir/proxy_secret"; } &&
		printf 'fastcgi_param OG_PROXY_SECRET "%s";\n' "$(cat "$dir/proxy_secret")" \
			>"$dir/proxy_secret.nginx")
	chmod 0600 "$dir/proxy_secret" "$dir/proxy_secret.nginx"
	[[ -z $owner ]] || chown "$owner" "$dir/proxy_secret"
}

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

# proxy_secret_make DIR [OWNER]: a fresh proxy secret for a stack of a
# scenario's own: DIR/proxy_secret (the responder's proxy_secret_file, 0600,
# OWNER's when given: the user the responder runs as) and
# DIR/proxy_secret.nginx (the include nginx's master reads at start and
# sends it with, 0600 root; nginx/oncegate-local.conf.in's
# @PROXY_SECRET_CONF@).
proxy_secret_make() {
	local dir=$1 owner=${2:-}
	(umask 077 && head -c 36 /dev/urandom | base64 | tr '+/' '-_' >"$dir/proxy_secret" &&
		printf 'fastcgi_param OG_PROXY_SECRET "%s";\n' "$(cat "$dir/proxy_secret")" \
			>"$dir/proxy_secret.nginx")
	[[ -z $owner ]] || chown "$owner" "$dir/proxy_secret"
}

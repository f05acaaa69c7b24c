#!/usr/bin/env bash
# local_access.sh — the local stack is not open to every local user: its
# dispatcher sends for real, and its config holds the CSRF secret.
#
#   * an unprivileged local user (nobody) cannot connect to the stack's
#     PostgreSQL as postgres nor as oncegate, on the unix socket or over
#     TCP without the password;
#   * root over TCP with the stack's PGPASSFILE can (the password works, so
#     the refusals above are not a dead server);
#   * the config (csrf_secret), the env files and the API key, CSRF secret,
#     proxy secret and password files are mode 0600 and nobody cannot read
#     them;
#   * reaching the responder's socket is not enough to act as nginx: a
#     www-data process that speaks FastCGI to it with made-up identity
#     parameters and without nginx's OG_PROXY_SECRET is answered 403 and
#     changes no row (tests/identity/fcgi_door.py, which also shows the
#     same requests with the secret are trusted), and the secret is in no
#     log;
#   * ./dev up's approval pages: another local user (made here, removed at
#     exit), who reaches loopback too, cannot claim an identity with
#     X-Dev-User without the stack's key (0600 root): 403 for the inbox,
#     the page and the decision, no row changed; root with the key decides.
#     Against ./dev up's own nginx when the stack is that one, else a
#     private copy of the stack's nginx with a key file as ./dev up writes
#     it; and ./dev up's demo mailbox is 0600 root, unreadable for that
#     user, when the stack has one.
#
# Runs against the stack `./dev test` (or `./dev check`) starts: PGHOST (the
# socket directory), PGPORT, PGDATABASE, PGUSER, PGPASSFILE, ONCEGATE_CONF.
# Needs root (runuser). Exit 0 pass, 1 fail, 77 no stack.
set -uo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"
DIE_PREFIX='local-access: FAIL'

if [[ -z ${ONCEGATE_URL:-} ]]; then
	echo "local-access: ONCEGATE_URL is not set; run under ./dev test. Skipping."
	exit 77
fi
for v in PGHOST PGPORT PGDATABASE PGUSER PGPASSFILE ONCEGATE_CONF; do
	[[ -n ${!v:-} ]] || die "$v is not set"
done
[[ $EUID == 0 ]] || die "needs root (runuser)"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
STATE=$(dirname "$ONCEGATE_CONF")
rc=0
ok() { printf 'ok   %s\n' "$*"; }
bad() { printf 'FAIL %s\n' "$*"; rc=1; }

# as_nobody CMD...: CMD as user nobody, with none of our PG* settings.
as_nobody() {
	runuser -u nobody -- env -i -C / PATH=/usr/bin:/bin HOME=/nonexistent "$@"
}

# --- PostgreSQL ---------------------------------------------------------------
for role in postgres oncegate; do
	for db in postgres "$PGDATABASE"; do
		if out=$(as_nobody psql -X -At -h "$PGHOST" -p "$PGPORT" -U "$role" -d "$db" \
			-w -c 'SELECT 1' 2>&1); then
			bad "nobody connected on the socket as $role to $db"
		elif [[ $out == *"authentication failed"* || $out == *"no pg_hba.conf entry"* ]]; then
			ok "nobody on the socket as $role to $db: refused ($(head -n1 <<<"$out" | sed 's/.*FATAL: *//'))"
		else
			bad "nobody on the socket as $role to $db: not refused by authentication: $out"
		fi
		if out=$(as_nobody psql -X -At -h 127.0.0.1 -p "$PGPORT" -U "$role" -d "$db" \
			-w -c 'SELECT 1' 2>&1); then
			bad "nobody connected over TCP without a password as $role to $db"
		elif [[ $out == *"password"* || $out == *"authentication failed"* ]]; then
			ok "nobody over TCP without a password as $role to $db: refused"
		else
			bad "nobody over TCP as $role to $db: not refused by authentication: $out"
		fi
	done
done
# Also with the role's name guessed as the OS user's, and the trust a
# default initdb would have written.
if as_nobody psql -X -At -h "$PGHOST" -p "$PGPORT" -U nobody -d postgres -w -c 'SELECT 1' >/dev/null 2>&1; then
	bad "nobody connected as role nobody"
else
	ok "nobody as role nobody: refused"
fi
hba=$(psql -X -At -w -U postgres -d postgres -c 'SHOW hba_file' 2>/dev/null)
if [[ -n $hba ]] && grep -Eq '^[^#]*[[:space:]]trust([[:space:]]|$)' "$hba"; then
	bad "$hba trusts someone"
else
	ok "pg_hba.conf trusts nobody"
fi
if v=$(psql -X -At -w -h 127.0.0.1 -p "$PGPORT" -U "$PGUSER" -d "$PGDATABASE" \
	-c 'SELECT current_user' 2>&1) && [[ $v == "$PGUSER" ]]; then
	ok "root over TCP with PGPASSFILE: connected as $v (scram-sha-256)"
else
	bad "root over TCP with PGPASSFILE did not connect: $v"
fi

# --- the FastCGI door ---------------------------------------------------------------
SOCKET=$(sed -n 's/^listen *= *//p' "$ONCEGATE_CONF" | head -n1)
SECRET_FILE=$(sed -n 's/^proxy_secret_file *= *//p' "$ONCEGATE_CONF" | head -n1)
if [[ ! -S $SOCKET || ! -s $SECRET_FILE ]]; then
	bad "the stack has no socket ($SOCKET) or no proxy_secret_file ($SECRET_FILE)"
else
	PGUSER=oncegate "${ONCEGATE_PYTHON:-/usr/bin/python3}" "$HERE/fcgi_door.py" "$SOCKET" \
		"$SECRET_FILE" || rc=1
	secret=$(cat "$SECRET_FILE")
	for f in "${ONCEGATE_LOG:-$STATE/decisions.log}" "$STATE/fcgi.stderr" \
		"$STATE/nginx/access.log" "$STATE/nginx/error.log"; do
		if [[ -e $f ]] && grep -qF -- "$secret" "$f"; then
			bad "the proxy secret is in $f"
		fi
	done
	ok "the proxy secret is in no log of the stack"
	unset secret
fi

# --- ./dev up's approval pages and demo mailbox ---------------------------------
OTHER=og-local-$$
useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$OTHER" ||
	die "cannot create the local user $OTHER"
PRIV='' PRIV_PID=''
cleanup() {
	if [[ -n $PRIV_PID ]]; then nginx_stop "$PRIV_PID" "$PRIV"; fi
	[[ -n $PRIV ]] && rm -rf "$PRIV"
	userdel "$OTHER" 2>/dev/null || true
}
trap cleanup EXIT
if [[ -s $STATE/dev_key.nginx ]]; then
	GATE_URL=$ONCEGATE_URL KEY_FILE=$STATE/dev_key
	ok "./dev up's stack: its own nginx at $GATE_URL"
else
	# shellcheck source=tests/lib/pooled.sh
	source "$ROOT/tests/lib/pooled.sh"
	PRIV=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-localaccess.XXXXXX")
	chmod 0711 "$PRIV"
	mkdir -p "$PRIV/tmp" && chmod 0755 "$PRIV/tmp"
	KEY_FILE=$PRIV/dev_key
	(umask 077 && od -An -tx1 -N 24 /dev/urandom | tr -d ' \n' >"$KEY_FILE")
	(umask 077 && printf '"%s" 1;\n"" 0;\n"~^" 0;\n' "$(cat "$KEY_FILE")" >"$PRIV/dev_key.nginx")
	port=$(free_port 18380) || die "no free loopback port for a private nginx"
	nginx_copy "$PRIV" "$port" \
		-e "s#^([[:space:]]*include[[:space:]]+)[^;]*/dev_key\*\.nginx;#\1$PRIV/dev_key.nginx;#" \
		>"$PRIV/nginx.conf"
	grep -qF "include $PRIV/dev_key.nginx;" "$PRIV/nginx.conf" ||
		die "the stack's nginx config includes no dev_key*.nginx: nginx/oncegate-local.conf.in changed shape"
	PRIV_PID=$(nginx_start "$PRIV") || die "the private nginx did not start"
	GATE_URL=http://127.0.0.1:$port
	ok "a private copy of the stack's nginx with a key as ./dev up writes it, at $GATE_URL"
fi
PGUSER=oncegate "${ONCEGATE_PYTHON:-/usr/bin/python3}" "$HERE/fcgi_door.py" --gate "$GATE_URL" \
	"$OTHER" "$KEY_FILE" || rc=1
if [[ -e $STATE/demo-smtp.jsonl ]]; then
	mode=$(stat -c '%a %U' "$STATE/demo-smtp.jsonl")
	if [[ $mode != "600 root" ]]; then
		bad "the demo mailbox $STATE/demo-smtp.jsonl is '$mode', not '600 root'"
	elif runuser -u "$OTHER" -- env -i -C / PATH=/usr/bin:/bin "${ONCEGATE_PYTHON:-/usr/bin/python3}" \
		"$ROOT/tests/providers/mailbox.py" "$STATE/demo-smtp.jsonl" >/dev/null 2>&1 ||
		runuser -u "$OTHER" -- cat "$STATE/demo-smtp.jsonl" >/dev/null 2>&1; then
		bad "$OTHER can read the demo mailbox"
	else
		ok "the demo mailbox: 0600 root, $OTHER cannot read it (./dev mail, cat)"
	fi
else
	ok "no demo mailbox on this stack (./dev up's is checked when run against it)"
fi

# --- files holding secrets --------------------------------------------------------
files=("$ONCEGATE_CONF" "$STATE/csrf_secret" "$STATE/api_key" "$PGPASSFILE" "$STATE/proxy_secret"
	"$STATE/proxy_secret.nginx")
for f in "$STATE/dev_key" "$STATE/dev-key.header" "$STATE/dev_key.nginx"; do
	[[ -e $f ]] && files+=("$f")
done
for f in "$ROOT/.dev/env" "$ROOT/.dev/test-env"; do
	[[ -e $f ]] && files+=("$f")
done
for f in "${files[@]}"; do
	mode=$(stat -c '%a %U' "$f" 2>/dev/null)
	if [[ $mode != "600 root" ]]; then
		bad "$f is '$mode', not '600 root'"
	elif as_nobody cat "$f" >/dev/null 2>&1; then
		bad "nobody can read $f"
	else
		ok "$f: 0600 root, unreadable for nobody"
	fi
done
if grep -q '^csrf_secret = ' "$ONCEGATE_CONF"; then
	ok "the 0600 config is the one holding csrf_secret"
else
	bad "$ONCEGATE_CONF holds no csrf_secret: the wrong file was checked"
fi
exit "$rc"

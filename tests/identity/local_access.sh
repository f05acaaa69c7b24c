#!/usr/bin/env bash
# local_access.sh — the local stack is not open to every local user: its
# dispatcher sends for real, and its config holds the CSRF secret.
#
#   * an unprivileged local user (nobody) cannot connect to the stack's
#     PostgreSQL as postgres nor as oncegate, on the unix socket or over
#     TCP without the password;
#   * root over TCP with the stack's PGPASSFILE can (the password works, so
#     the refusals above are not a dead server);
#   * the config (csrf_secret), the env files and the API key, CSRF secret
#     and password files are mode 0600 and nobody cannot read them.
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

# --- files holding secrets --------------------------------------------------------
files=("$ONCEGATE_CONF" "$STATE/csrf_secret" "$STATE/api_key" "$PGPASSFILE")
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

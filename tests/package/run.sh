#!/usr/bin/env bash
# tests/package/run.sh — the Debian package from the tree to a working
# server on this machine, configured by docs/deploy.md alone:
#
#   1. builds the package from the checkout's files (dpkg-buildpackage -us
#      -uc -b, release flags) and runs lintian on it (errors fail);
#   2. runs docs/deploy.md's command blocks in order (tests/package/guide.py
#      extracts them), beside Debian's nginx and PostgreSQL: it installs the
#      package with `apt-get install ./oncegate_*.deb`, creates the roles
#      (the owner, a login role per program, root as an operator, the
#      peer map), the database and schema, fills in the configuration and secrets,
#      installs the nginx site and makes the first API client, then runs
#      the guide's smoke test; after the installation: nothing runs or is
#      enabled, the configuration is root:oncegate 0640, and the installed
#      units pass systemd-analyze verify;
#   3. where the guide says `systemctl`, starts what systemd would: nginx
#      from /etc/nginx/nginx.conf, and the units' ExecStart lines as their
#      User= (tests/package/unitrun.py: the socket unit's socket on fd 3,
#      READY=1 awaited);
#   4. claim → approval → send (tests/package/smoke.py) against the
#      installed programs: a person signs in through the SSO proxy stand-in
#      (tests/identity/sso_standin.py, speaking oauth2-proxy's headers) and
#      approves, and the dispatcher delivers the mail to a loopback SMTP
#      server (tests/providers/smtp_sink.py); a CRM change approved by
#      another person reaches the loopback HTTP provider with the
#      credentials of dispatch.env;
#   5. stops every process it started by PID, purges the package and puts
#      the machine back as it found it.
#
# What a test machine needs that a server does not (the guide's values
# replaced before its blocks run; each replacement must apply):
#   https://oncegate.example.com → https://localhost:HTTPS_PORT
#   oncegate.example.com         → localhost
#   smtp://localhost:25          → the loopback SMTP sink
#   https://crm.example.com      → the loopback HTTP provider
#   /etc/postgresql/15/main      → the test's own cluster's configuration
# and, after the steps that write them, these edits to installed files:
#   /etc/oncegate.conf `database`  + port=PG_PORT (a PostgreSQL cluster of
#                                  this test's own, never ./dev's nor 15/main)
#   the nginx site's listen lines  → 127.0.0.1:HTTP_PORT / :HTTPS_PORT
#   the SSO proxy's 127.0.0.1:4180 → the stand-in's port
#
# Needs root on Debian 12. Binds to 127.0.0.1 only. Exit 0 pass, 1 fail.
# KEEP=yes keeps the work directory (the build, the logs).
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
SAY_PREFIX='package:' DIE_PREFIX='package: FAIL'
PYTHON=/usr/bin/python3
PGVER=15
CLUSTER=ogpkgtest
START=$(date +%s)

[[ $EUID == 0 ]] || die "needs root (it installs a package)"
{ grep -q '^VERSION_ID="12"' /etc/os-release && grep -q '^ID=debian' /etc/os-release; } ||
	die "needs Debian 12"
if dpkg-query -W -f='${db:Status-Status}' oncegate 2>/dev/null | grep -qx installed; then
	die "the oncegate package is installed already: this test installs and purges it"
fi
if [[ -s /run/nginx.pid ]] && running "$(cat /run/nginx.pid)"; then
	die "Debian's nginx runs (/run/nginx.pid): this test starts it itself"
fi
pg_lsclusters -h | awk '{print $2}' | grep -qx "$CLUSTER" &&
	die "a PostgreSQL cluster $PGVER/$CLUSTER exists (a previous run?): pg_dropcluster --stop $PGVER $CLUSTER"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-package.XXXXXX")
chmod 0711 "$TMP"
PIDS=() NGINX_PID='' PG_STARTED=no INSTALLED=no
HAD_USER=no HAD_DEFAULT_SITE=no
getent passwd oncegate-fcgi >/dev/null && HAD_USER=yes
[[ -L /etc/nginx/sites-enabled/default ]] && HAD_DEFAULT_SITE=yes

cleanup() {
	local rc=$? pid
	set +e
	for pid in "${PIDS[@]}"; do stop_child "$pid" 45 "a test process"; done
	if [[ -n $NGINX_PID ]]; then
		tr '\0' ' ' <"/proc/$NGINX_PID/cmdline" 2>/dev/null | grep -q nginx &&
			kill -QUIT "$NGINX_PID" 2>/dev/null
		for ((i = 0; i < 50; i++)); do [[ -e /proc/$NGINX_PID ]] || break; sleep 0.1; done
		kill -KILL "$NGINX_PID" 2>/dev/null
	fi
	if [[ $INSTALLED == yes ]]; then
		DEBIAN_FRONTEND=noninteractive apt-get purge -y -q oncegate >"$TMP/purge.log" 2>&1 ||
			{ cat "$TMP/purge.log" >&2; say "apt-get purge oncegate failed"; rc=1; }
		for f in /etc/oncegate.conf /etc/oncegate /usr/bin/oncegatectl /lib/systemd/system/oncegate-fcgi.service; do
			[[ ! -e $f ]] || { say "purge left $f behind"; rc=1; }
		done
	fi
	[[ $PG_STARTED == yes ]] && pg_dropcluster --stop "$PGVER" "$CLUSTER" >/dev/null 2>&1
	rm -f /etc/nginx/sites-enabled/oncegate /etc/nginx/sites-available/oncegate \
		/etc/nginx/oncegate-proxy-secret.conf
	[[ $HAD_DEFAULT_SITE == yes && ! -e /etc/nginx/sites-enabled/default ]] &&
		ln -s /etc/nginx/sites-available/default /etc/nginx/sites-enabled/default
	rm -rf /etc/ssl/oncegate /run/oncegate /root/oncegate-n8n.key
	rm -f /var/log/nginx/oncegate.access.log
	if [[ $HAD_USER == no ]]; then
		for u in oncegate-fcgi oncegate-dispatch; do
			getent passwd "$u" >/dev/null && deluser --system --quiet "$u" >/dev/null 2>&1
		done
		getent group oncegate >/dev/null && delgroup --system --quiet oncegate >/dev/null 2>&1
	fi
	if [[ ${KEEP:-no} == yes || $rc != 0 ]]; then say "kept $TMP"; else rm -rf "$TMP"; fi
	say "$( ((rc == 0)) && echo passed || echo FAILED) in $(($(date +%s) - START)) s"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { say "[$(($(date +%s) - START))s] $*"; }

# --- 1. build and lintian --------------------------------------------------------
step "build dependencies"
NEED=(debhelper lintian dpkg-dev fakeroot)
mapfile -t BD < <(sed -n '/^Build-Depends:/,/^[A-Z]/p' "$ROOT/debian/control" | sed '$d' |
	sed 's/^Build-Depends://' | tr ',' '\n' | sed 's/([^)]*)//; s/[[:space:]]//g' | grep -v '^$')
for p in "${BD[@]}"; do [[ $p == debhelper-compat ]] || NEED+=("$p"); done
MISSING=()
for p in "${NEED[@]}"; do
	[[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || MISSING+=("$p")
done
if ((${#MISSING[@]})); then
	say "installing ${MISSING[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${MISSING[@]}" \
		>"$TMP/apt-build.log" 2>&1 || { tail -20 "$TMP/apt-build.log" >&2; die "apt-get install ${MISSING[*]}"; }
fi

step "dpkg-buildpackage -us -uc -b (from the checkout's files)"
SRC=$TMP/src/oncegate
mkdir -p "$SRC"
(cd "$ROOT" && git ls-files -z -co --exclude-standard | xargs -0 cp --parents -a -t "$SRC" 2>/dev/null) ||
	die "could not copy the tree"
(cd "$SRC" && DEB_BUILD_OPTIONS="nocheck parallel=2" nice dpkg-buildpackage -us -uc -b \
	>"$TMP/build.log" 2>&1) || { tail -40 "$TMP/build.log" >&2; die "dpkg-buildpackage failed"; }
DEB=$(ls "$TMP"/src/oncegate_*.deb)
say "built ${DEB##*/} ($(du -k "$DEB" | cut -f1) KiB)"
{ grep -q -- '-D_FORTIFY_SOURCE=2' "$TMP/build.log" &&
	grep -q -- '-fstack-protector-strong' "$TMP/build.log" && grep -q -- '-Wl,-z,now' "$TMP/build.log"; } || die "the build did not use Debian's hardening flags"
! grep -q -- '-fsanitize' "$TMP/build.log" || die "the package was built with sanitizers"

step "lintian"
lintian --allow-root -I --pedantic "$TMP"/src/oncegate_*.changes >"$TMP/lintian.txt" 2>&1 || true
sed 's/^/  /' "$TMP/lintian.txt" >&2
grep -q '^E: ' "$TMP/lintian.txt" && die "lintian reports errors"

say "package contents:"
dpkg-deb -c "$DEB" | awk '$6 !~ /\/$/ {print "  " $1, $2, $6}' >&2

# --- loopback helpers: PostgreSQL cluster, providers, SSO stand-in ------------------
step "a PostgreSQL cluster of this test's own, loopback providers, SSO stand-in"
PG_PORT=$(free_port $((21000 + RANDOM % 8000)) 31000) || die "no free port"
pg_createcluster "$PGVER" "$CLUSTER" -p "$PG_PORT" >"$TMP/pg.log" 2>&1 ||
	{ cat "$TMP/pg.log" >&2; die "pg_createcluster"; }
PG_STARTED=yes
pg_ctlcluster "$PGVER" "$CLUSTER" start >>"$TMP/pg.log" 2>&1 || { cat "$TMP/pg.log" >&2; die "pg_ctlcluster start"; }
grep -q "^listen_addresses" "/etc/postgresql/$PGVER/$CLUSTER/postgresql.conf" &&
	die "the test cluster listens beyond localhost"

# start_ready VAR NAME COMMAND...: starts COMMAND, records its PID for
# cleanup and sets VAR to the port it prints ("ready PORT"). Not called in
# $(…): the PID must reach this shell's PIDS, or cleanup could not stop it.
start_ready() {
	local var=$1 name=$2 i port
	shift 2
	"$@" >"$TMP/$name.out" 2>&1 &
	PIDS+=($!)
	for ((i = 0; i < 100; i++)); do grep -q '^ready' "$TMP/$name.out" 2>/dev/null && break; sleep 0.1; done
	port=$(sed -n 's/^ready \([0-9]*\)$/\1/p' "$TMP/$name.out")
	[[ -n $port ]] || { cat "$TMP/$name.out" >&2; die "$name did not start"; }
	printf -v "$var" '%s' "$port"
}
start_ready SMTP_PORT smtp "$PYTHON" "$ROOT/tests/providers/smtp_sink.py" --port 0 --record "$TMP/mail.jsonl"
start_ready CRM_PORT crm "$PYTHON" "$ROOT/tests/providers/http_provider.py" --port 0
HTTP_PORT=$(free_port $((21000 + RANDOM % 8000)) 31000) || die "no free port"
HTTPS_PORT=$(free_port $((HTTP_PORT + 1)) 31500) || die "no free port"
start_ready SSO_PORT sso "$PYTHON" "$ROOT/tests/identity/sso_standin.py" --port 0 \
	--redirect-url "https://localhost:$HTTPS_PORT/oauth2/callback"
say "PostgreSQL $PGVER/$CLUSTER :$PG_PORT, SMTP :$SMTP_PORT, CRM :$CRM_PORT, SSO :$SSO_PORT, nginx :$HTTP_PORT/:$HTTPS_PORT"

# --- 3. the guide ------------------------------------------------------------------
"$PYTHON" "$HERE/guide.py" "$ROOT/docs/deploy.md" "$TMP/guide" \
	--subst "https://oncegate.example.com=https://localhost:$HTTPS_PORT" \
	--subst "oncegate.example.com=localhost" \
	--subst "smtp://localhost:25=smtp://127.0.0.1:$SMTP_PORT" \
	--subst "https://crm.example.com=http://127.0.0.1:$CRM_PORT" \
	--subst "/etc/postgresql/15/main=/etc/postgresql/$PGVER/$CLUSTER" || die "docs/deploy.md"
sed 's/^/  /' "$TMP/guide/plan" >&2

# edit FILE PATTERN REPLACEMENT: a deployment edit that must apply.
edit() {
	grep -qE "$2" "$1" || die "$1 has no line matching $2: the guide and this test disagree"
	sed -i -E "s|$2|$3|" "$1"
}

# The installed units, checked by systemd itself.
verify_units() {
	step "systemd-analyze verify (the installed units)"
	systemd-analyze verify /lib/systemd/system/oncegate-fcgi.socket \
		/lib/systemd/system/oncegate-fcgi.service /lib/systemd/system/oncegate-dispatch.service \
		>"$TMP/verify.txt" 2>&1 || { cat "$TMP/verify.txt" >&2; die "systemd-analyze verify"; }
	if [[ -s $TMP/verify.txt ]]; then sed 's/^/  /' "$TMP/verify.txt" >&2; fi
	systemd-analyze security --offline=true /lib/systemd/system/oncegate-fcgi.service \
		/lib/systemd/system/oncegate-dispatch.service 2>&1 | grep -E 'Overall exposure|→' | sed 's/^/  /' >&2 || true
}

# The units, run as systemd would (section "Start the services").
start_units() {
	local pid
	pid=$("$PYTHON" "$HERE/unitrun.py" /lib/systemd/system/oncegate-fcgi.service \
		--socket /lib/systemd/system/oncegate-fcgi.socket --output "$TMP/fcgi.journal" \
		2>"$TMP/fcgi.err") || { cat "$TMP/fcgi.err" "$TMP/fcgi.journal" >&2; die "oncegate-fcgi.service did not become ready"; }
	PIDS+=("$pid")
	[[ $(ps -o user= -p "$pid") == oncegate-fcgi ]] || die "oncegate-fcgi runs as $(ps -o user= -p "$pid")"
	say "oncegate-fcgi ready (pid $pid, user oncegate-fcgi, socket $(stat -c '%U:%G %a' /run/oncegate/fcgi.sock))"
	pid=$("$PYTHON" "$HERE/unitrun.py" /lib/systemd/system/oncegate-dispatch.service \
		--output "$TMP/dispatch.journal" 2>"$TMP/dispatch.err") ||
		{ cat "$TMP/dispatch.err" "$TMP/dispatch.journal" >&2; die "oncegate-dispatch.service did not become ready"; }
	PIDS+=("$pid")
	[[ $(ps -o user= -p "$pid") == oncegate-dispatch ]] || die "oncegate-dispatch runs as $(ps -o user= -p "$pid")"
	say "oncegate-dispatch ready (pid $pid, user oncegate-dispatch)"
}

# nginx as Debian's unit starts it, from /etc/nginx/nginx.conf.
start_nginx() {
	local site=/etc/nginx/sites-available/oncegate i
	edit "$site" '^( *)listen 80;$' "\\1listen 127.0.0.1:$HTTP_PORT;"
	edit "$site" '^( *)listen 443 ssl http2;$' "\\1listen 127.0.0.1:$HTTPS_PORT ssl http2;"
	sed -i -E '/^ *listen \[::\]:(80|443)( ssl http2)?;$/d' "$site"
	edit "$site" 'http://127\.0\.0\.1:4180;' "http://127.0.0.1:$SSO_PORT;"
	if grep -rlE '^\s*listen\s' /etc/nginx/sites-enabled/ /etc/nginx/conf.d/ 2>/dev/null |
		xargs -r grep -hE '^\s*listen\s' | grep -vE "listen 127\.0\.0\.1:($HTTP_PORT|$HTTPS_PORT)[ ;]"; then
		die "an enabled nginx site listens beyond this test's loopback ports"
	fi
	nginx -q -t || die "nginx -t"
	/usr/sbin/nginx || die "nginx did not start"
	for ((i = 0; i < 50; i++)); do [[ -s /run/nginx.pid ]] && break; sleep 0.1; done
	NGINX_PID=$(cat /run/nginx.pid)
	running "$NGINX_PID" || die "nginx wrote no live PID"
	say "nginx (pid $NGINX_PID) on 127.0.0.1:$HTTP_PORT and :$HTTPS_PORT"
}

export PGPORT=$PG_PORT DEBIAN_FRONTEND=noninteractive
mkdir -p "$TMP/deploy" && cp "$DEB" "$TMP/deploy/"
while read -r n kind _ _ rest; do
	case $kind in
	skip) say "guide step $n: skipped ($rest)"; continue ;;
	instead)
		case $rest in
		*nginx*) step "guide step $n: instead of systemctl reload nginx: nginx from /etc/nginx"; start_nginx ;;
		*ExecStart*) step "guide step $n: instead of systemctl enable --now: the units' ExecStart"; start_units ;;
		*) die "guide step $n: no equivalent known for: $rest" ;;
		esac
		continue ;;
	esac
	step "guide step $n: $rest"
	# A step that installs the package may fail after it did: purge it then too.
	grep -q 'apt-get install -y ./oncegate_' "$TMP/guide/$n.sh" && INSTALLED=yes
	(cd "$TMP/deploy" && bash -euo pipefail "$TMP/guide/$n.sh") >"$TMP/guide/$n.out" 2>&1 ||
		{ sed 's/^/  | /' "$TMP/guide/$n.out" >&2; die "guide step $n failed: $(head -n1 "$TMP/guide/$n.sh")"; }
	# (no pipe into head: under pipefail, sed's SIGPIPE on a long output
	# would end the test)
	sed -n '1,20s/^/  | /p' "$TMP/guide/$n.out" >&2
	if grep -q 'apt-get install -y ./oncegate_' "$TMP/guide/$n.sh"; then
		# Nothing runs or is enabled after the installation.
		pgrep -u oncegate-fcgi,oncegate-dispatch >/dev/null &&
			die "a process of user oncegate-fcgi or oncegate-dispatch runs right after installation"
		[[ -z $(find /etc/systemd/system -name 'oncegate*' 2>/dev/null) ]] ||
			die "the installation enabled a unit: $(find /etc/systemd/system -name 'oncegate*')"
		[[ $(stat -c '%U:%G %a' /etc/oncegate.conf) == 'root:oncegate 640' ]] ||
			die "/etc/oncegate.conf is $(stat -c '%U:%G %a' /etc/oncegate.conf), not root:oncegate 640"
		verify_units
		edit /etc/oncegate.conf '^database = "host=/var/run/postgresql ' \
			"database = \"host=/var/run/postgresql port=$PG_PORT "
	fi
done <"$TMP/guide/plan"
[[ $INSTALLED == yes ]] || die "the guide never installed the package"
[[ -n $NGINX_PID ]] || die "the guide never got to starting nginx"
[[ $(stat -c '%a' /etc/oncegate/dispatch.env) == 600 ]] || die "dispatch.env is not 0600"

# --- 5. claim → approval → send ------------------------------------------------------
step "claim → approval → send against the installed programs"
SECOND_KEY=$(oncegatectl client add n8n-staging --reason "second tenant") ||
	die "a second API client"
PYTHONDONTWRITEBYTECODE=1 "$PYTHON" "$HERE/smoke.py" --https "https://localhost:$HTTPS_PORT" --ca /etc/ssl/oncegate/fullchain.pem \
	--sso "http://127.0.0.1:$SSO_PORT" --key-file /root/oncegate-n8n.key --second-key "$SECOND_KEY" \
	--mail-record "$TMP/mail.jsonl" --crm "http://127.0.0.1:$CRM_PORT" \
	--env-file /etc/oncegate/dispatch.env --log /var/log/oncegate/fcgi/decisions.log \
	--log /var/log/oncegate/dispatch/decisions.log || die "the smoke test"
step "done"

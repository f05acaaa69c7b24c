#!/usr/bin/env bash
# foreground.sh — both daemons without systemd, started as root with the
# documented commands only (`oncegate-fcgi -c FILE`, `oncegate-dispatch -c
# FILE`; no systemd-socket-activate, no NOTIFY_SOCKET), against the test
# stack's database:
#   * the responder binds `listen` itself, in a directory that does not
#     exist yet, as `user`:listen_group with listen_mode, then runs as
#     `user` (here nobody; the kernel's view of its uid, gid and groups is
#     checked); so does the dispatcher; both write the decision log as
#     that user, and their messages go to stderr;
#   * a request through nginx reaches it; an effect of a contract whose
#     gate acts on its own is sent by the dispatcher to a loopback provider;
#   * logrotate's move and SIGHUP: both reopen the decision log (the new
#     file is the user's);
#   * a broken contract on SIGHUP: both keep what they had loaded and say
#     so in one line naming the file and line; GET /readyz answers 503
#     not_ready (config_reload_failed) while /healthz stays 200, /metrics
#     has oncegate_config_reload_failed 1; a new run under that contract is
#     still accepted and its effect still goes out once; the contract
#     fixed and SIGHUP again: /readyz 200, the gauge 0, the success time
#     moved on.
# It prints the seconds from the broken reload to /readyz 503 and from the
# fix to 200, and how long the send under the broken reload took.
# Env (./dev test): ONCEGATE_CONF, ONCEGATE_API_KEY, ONCEGATE_CTL,
# ONCEGATE_DISPATCH, ONCEGATE_PROVIDERS, ONCEGATE_PYTHON and the PG* of the
# schema's owner (the daemons reach PostgreSQL over TCP with its password:
# a user other than root has no peer mapping on the test stack). Needs
# root. Allows sends (oncegatectl sends resume) and cancels what is pending in the test
# database, as the fault scenarios do. Exit 0 pass, 1 fail, 77 no stack.
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"
stack_script foreground ONCEGATE_CONF ONCEGATE_API_KEY ONCEGATE_CTL ONCEGATE_DISPATCH ONCEGATE_PROVIDERS \
	ONCEGATE_PYTHON PGHOST PGPORT PGPASSFILE
[[ $EUID == 0 ]] || die "needs root (the daemons start as root and switch to nobody)"
id nobody >/dev/null 2>&1 || die "no user nobody"
PYTHON=$ONCEGATE_PYTHON
FCGI=$(dirname "$ONCEGATE_CTL")/oncegate-fcgi
DISPATCH=$ONCEGATE_DISPATCH
RUSER=nobody RGROUP=$(id -gn nobody)

private_tmp foreground
FCGI_PID='' DISPATCH_PID='' NGINX_PID='' PROVIDER_PID=''
cleanup() {
	set +e
	nginx_stop "$NGINX_PID" "$TMP/nginx"
	stop_child "$FCGI_PID" 40 oncegate-fcgi
	stop_child "$DISPATCH_PID" 30 oncegate-dispatch
	stop_child "$PROVIDER_PID" 5
	"$ONCEGATE_CTL" sends stop --reason "foreground test over" >/dev/null 2>&1
	tmp_done
}

# --- the provider the dispatcher sends to ------------------------------------------------
provider_start PROVIDER_PID PPORT "$TMP/provider.out" http_provider.py

# --- the configuration: the stack's, as a server without systemd has it ---------------------
# The socket in a directory nobody made yet; the log in a directory of the
# user's; the contracts a copy (crm_tag acting on its own for lead tags,
# no sample); demo_http pointed at our provider; the database over TCP.
SOCK=$TMP/run/oncegate/fcgi.sock
LOGDIR=$TMP/log
LOG=$LOGDIR/decisions.log
CONTRACTS=$TMP/contracts
install -d -m 0750 -o "$RUSER" -g "$RGROUP" "$LOGDIR"
install -d -m 0755 "$CONTRACTS"
src_contracts=$(conf_value contracts_dir)
cp "$src_contracts"/crm_tag.json "$CONTRACTS/"
"$PYTHON" - "$CONTRACTS/crm_tag.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1], encoding="utf-8"))
c["gate"]["sample_rate"] = 0
json.dump(c, open(sys.argv[1], "w", encoding="utf-8"), ensure_ascii=False, indent=2)
PY
chmod 0644 "$CONTRACTS"/*.json
CONF=$TMP/oncegate.conf
# The proxy secret the responder rereads on SIGHUP as the user: its own.
proxy_secret_make "$TMP" "$RUSER"
awk -v sock="$SOCK" -v logf="$LOG" -v contracts="$CONTRACTS" -v pport="$PPORT" \
	-v db="host=127.0.0.1 port=$PGPORT dbname=${PGDATABASE:-oncegate}" -v user="$RUSER" \
	-v secret="$TMP/proxy_secret" '
	/^\[target / { section = $0 }
	/^listen = / { print "listen = " sock; next }
	/^listen_owner = / { next }
	/^user = / { next }
	/^listen_group = / { print "listen_group = www-data"; print "user = " user; next }
	/^log_file = / { print "log_file = " logf; next }
	/^proxy_secret_file = / { print "proxy_secret_file = " secret; next }
	/^contracts_dir = / { print "contracts_dir = " contracts; next }
	/^database = / { print "database = \"" db "\""; next }
	/^dispatch_poll_ms = / { next }
	section == "[target demo_http]" && /^url = / { print "url = http://127.0.0.1:" pport "/effects"; next }
	section == "[target demo_http]" && /^lookup_url = / { print "lookup_url = http://127.0.0.1:" pport "/effects/lookup"; next }
	{ print }
	END { }' "$ONCEGATE_CONF" >"$CONF.main"
# dispatch_poll_ms before the first [target] section
awk '!done && /^\[target / { print "dispatch_poll_ms = 100\n"; done = 1 } { print }' "$CONF.main" >"$CONF"
rm -f "$CONF.main"
# The daemons reread it as the user on SIGHUP; it holds secrets: 0640.
chgrp "$RGROUP" "$CONF" && chmod 0640 "$CONF"
for want in "listen = $SOCK" "user = $RUSER" "log_file = $LOG" "contracts_dir = $CONTRACTS" \
	"url = http://127.0.0.1:$PPORT/effects"; do
	grep -qxF "$want" "$CONF" || die "could not write \"$want\" into $CONF"
done
"$ONCEGATE_CTL" -c "$CONF" config check >/dev/null 2>"$TMP/check.err" ||
	die "config check refused the configuration: $(cat "$TMP/check.err")"
# The owner's password, readable by the user the daemons become.
install -m 0600 -o "$RUSER" "$PGPASSFILE" "$TMP/pgpass"

# Nothing else of the shared test database may be sent by our dispatcher.
outbox_quiet "foreground test"

# --- the documented commands -------------------------------------------------------------
# (PGUSER, PGPASSFILE: how this test reaches the database; a server uses
# the roles' peer mapping, docs/deploy.md.)
dstart() { # start the dispatcher
	env -u NOTIFY_SOCKET -u LISTEN_FDS -u LISTEN_PID PGUSER="${PGUSER:-oncegate}" \
		PGPASSFILE="$TMP/pgpass" AI_ACTIONS_ENABLED=true \
		"$DISPATCH" -c "$CONF" </dev/null 2>"$TMP/dispatch.stderr" &
	DISPATCH_PID=$!
}
env -u NOTIFY_SOCKET -u LISTEN_FDS -u LISTEN_PID PGUSER="${PGUSER:-oncegate}" \
	PGPASSFILE="$TMP/pgpass" "$FCGI" -c "$CONF" </dev/null 2>"$TMP/fcgi.stderr" &
FCGI_PID=$!
dstart
wait_for 15 "the responder's socket" test -S "$SOCK" ||
	die "oncegate-fcgi made no socket: $(cat "$TMP/fcgi.stderr")"
wait_for 15 "responder.started" grep -q '"responder.started"' "$LOG" ||
	die "the responder did not start: $(cat "$TMP/fcgi.stderr")"
wait_for 15 "dispatch.started" grep -q '"dispatch.started"' "$LOG" ||
	die "the dispatcher did not start: $(cat "$TMP/dispatch.stderr")"

# Who they are now, as the kernel says: uid, gid, groups all nobody's.
nuid=$(id -u "$RUSER") ngid=$(id -g "$RUSER")
for p in "$FCGI_PID:oncegate-fcgi" "$DISPATCH_PID:oncegate-dispatch"; do
	pid=${p%%:*} name=${p#*:}
	uids=$(awk '/^Uid:/ { print $2, $3, $4, $5 }' "/proc/$pid/status")
	gids=$(awk '/^Gid:/ { print $2, $3, $4, $5 }' "/proc/$pid/status")
	groups=$(awk '/^Groups:/ { $1 = ""; print }' "/proc/$pid/status" | xargs)
	[[ $uids == "$nuid $nuid $nuid $nuid" ]] || die "$name runs with uids $uids, not $nuid"
	[[ $gids == "$ngid $ngid $ngid $ngid" ]] || die "$name runs with gids $gids, not $ngid"
	[[ $groups == "$ngid" || -z $groups ]] || die "$name keeps the groups $groups"
done
sock_stat=$(stat -c '%U:%G %a' "$SOCK")
[[ $sock_stat == "$RUSER:www-data 660" ]] || die "the socket is $sock_stat, not $RUSER:www-data 660"
[[ $(stat -c %U "$LOG") == "$RUSER" ]] || die "the decision log is $(stat -c %U "$LOG")'s, not $RUSER's"
grep -q '"responder.started".*listening on '"$SOCK" "$LOG" ||
	die "the responder does not say it listens on $SOCK: $(grep responder.started "$LOG")"
say "ok: both run as $RUSER ($nuid:$ngid); the socket is $sock_stat"

# --- a request through nginx ----------------------------------------------------------------
PORT=$(free_port $((21000 + RANDOM % 8000)) 31000) || die "no free port"
nginx_site "$TMP" "$SOCK" "$PORT" "$TMP/proxy_secret.nginx" || die "cannot render nginx/oncegate-local.conf.in"
NGINX_PID=$(nginx_start "$TMP/nginx") || die "nginx did not start: $(cat "$TMP/nginx/error.log" 2>/dev/null)"
URL=http://127.0.0.1:$PORT
get() { curl -sS -o "$TMP/get" -w '%{http_code}' "$URL$1" || true; }
[[ $(get /healthz) == 200 ]] || die "GET /healthz through nginx: $(cat "$TMP/get" "$TMP/fcgi.stderr")"
[[ $(get /readyz) == 200 ]] && grep -q '"status": *"ready"' "$TMP/get" ||
	die "GET /readyz after the start: $(cat "$TMP/get")"

# --- an effect sent through the dispatcher --------------------------------------------------
H="Authorization: Bearer $ONCEGATE_API_KEY" J='Content-Type: application/json'
RUN=fg$(date +%s%N)
# tag KEY CONTACT: claim and hand in an output under crm_tag (lead: acts
# on its own); prints the output's HTTP code, body in $TMP/out
tag() {
	local owner version code
	code=$(curl -sS -o "$TMP/claim" -w '%{http_code}' -X POST "$URL/v1/runs" -H "$H" -H "$J" \
		-d "{\"key\":\"$1\",\"payload\":{\"contact\":\"$2\",\"note\":\"Клиент · 顧客 · عميل · לקוח 🤝\"}}")
	[[ $code == 201 ]] || die "claim $1: $code $(cat "$TMP/claim")"
	owner=$(sed -E 's/.*"lease_owner": *"([^"]+)".*/\1/' "$TMP/claim")
	version=$(sed -E 's/.*"version": *([0-9]+).*/\1/' "$TMP/claim")
	curl -sS -o "$TMP/out" -w '%{http_code}' -X POST "$URL/v1/runs/$1/output" -H "$H" -H "$J" -d "{
	  \"lease_owner\":\"$owner\",\"version\":$version,\"contract\":\"crm_tag\",
	  \"output\":{\"tag\":\"lead\",\"confidence\":0.93,\"reason\":\"Просит счёт · 請求書を依頼 · يطلب فاتورة\"},
	  \"effect\":{\"type\":\"crm.tag\",\"target\":\"demo_http\",\"payload\":{\"contact_id\":\"$2\"}},
	  \"requested_by\":\"ops-bot@example.com\"}"
}
sent() { # CONTACT: the effect POSTs our provider received for that contact
	curl -fsS "http://127.0.0.1:$PPORT/_requests" | "$PYTHON" -c '
import json, sys
print(sum(1 for r in json.load(sys.stdin)
          if r.get("kind") == "effect" and sys.argv[1] in json.dumps(r.get("body"))))' "$1"
}
k1=$RUN:1
c1=$RUN-c1 c2=$RUN-c2
code=$(tag "$k1" "$c1")
[[ $code == 200 || $code == 201 || $code == 202 ]] || die "output of $k1: $code $(cat "$TMP/out")"
wait_for 20 "the effect of $k1 at the provider" eval '[[ $(sent "$c1") -ge 1 ]]' ||
	die "the dispatcher did not send the effect of $k1: $(tail -n5 "$LOG")"
say "ok: a claim and an output through nginx; the effect went out through the dispatcher"

# hup: SIGHUP both; waits until each has logged one more of its reload events
hup() {
	local nf nd
	nf=$(grep -c '"event":"responder.reload' "$LOG" 2>/dev/null || true)
	nd=$(grep -c '"event":"dispatch.reload' "$LOG" 2>/dev/null || true)
	kill -HUP "$FCGI_PID" "$DISPATCH_PID"
	wait_for 10 "both reloads" eval \
		"[[ \$(grep -c '\"event\":\"responder.reload' '$LOG' 2>/dev/null || true) -gt ${nf:-0} && \$(grep -c '\"event\":\"dispatch.reload' '$LOG' 2>/dev/null || true) -gt ${nd:-0} ]]" ||
		die "a daemon logged no reload event after SIGHUP: $(tail -n5 "$LOG" 2>/dev/null)"
}

# --- logrotate: moved away, SIGHUP, reopened as the user --------------------------------------
mv "$LOG" "$LOG.1"
hup
[[ -s $LOG ]] || die "no new decision log after SIGHUP"
[[ $(stat -c %U "$LOG") == "$RUSER" ]] || die "the reopened log is $(stat -c %U "$LOG")'s"
grep -q '"event":"responder.reloaded"' "$LOG" && grep -q '"event":"dispatch.reloaded"' "$LOG" ||
	die "the reloads are not in the reopened log: $(cat "$LOG")"

# --- a broken contract on SIGHUP ---------------------------------------------------------------
metric() { curl -sS "$URL/metrics" | sed -n "s/^$1 //p"; }
ok_at=$(metric oncegate_config_last_reload_success_timestamp_seconds)
[[ $(metric oncegate_config_reload_failed) == 0 && $(metric oncegate_ready) == 1 ]] ||
	die "before the broken reload the metrics say reload_failed=$(metric oncegate_config_reload_failed) ready=$(metric oncegate_ready)"
cp "$CONTRACTS/crm_tag.json" "$TMP/crm_tag.good"
# line 3 (the description) is no longer JSON
sed -i '3s/: .*/: oops,/' "$CONTRACTS/crm_tag.json"
cmp -s "$TMP/crm_tag.good" "$CONTRACTS/crm_tag.json" && die "could not break crm_tag.json"
t0=$(date +%s.%N)
hup
for ev in responder.reload_failed dispatch.reload_failed; do
	grep "\"event\":\"$ev\"" "$LOG" | tail -n1 | grep -q "crm_tag.json: not valid JSON at line 3" ||
		die "$ev does not name crm_tag.json and line 3: $(grep "$ev" "$LOG" | tail -n1)"
done
[[ $(get /readyz) == 503 ]] || die "after the broken reload GET /readyz answers $(cat "$TMP/get")"
t_503=$(date +%s.%N)
grep -q '"error": *"not_ready"' "$TMP/get" && grep -q '"reason": *"config_reload_failed"' "$TMP/get" ||
	die "the 503 does not name config_reload_failed: $(cat "$TMP/get")"
[[ $(get /healthz) == 200 ]] || die "after the broken reload /healthz answers $(cat "$TMP/get")"
[[ $(metric oncegate_config_reload_failed) == 1 && $(metric oncegate_ready) == 0 ]] ||
	die "the metrics do not show the failed reload: $(curl -sS "$URL/metrics" | grep -E '^oncegate_(ready|config)')"
"$ONCEGATE_CTL" -c "$CONF" config check >/dev/null 2>"$TMP/check.err" &&
	die "config check accepted the broken contract"
grep -q "crm_tag.json: not valid JSON at line 3" "$TMP/check.err" ||
	die "config check does not name the file and line: $(cat "$TMP/check.err")"
# Sends go on under the contract as loaded: a new run is accepted and its
# effect goes out, once.
k2=$RUN:2
code=$(tag "$k2" "$c2")
[[ $code == 200 || $code == 201 || $code == 202 ]] ||
	die "after the broken reload an output under crm_tag is refused: $code $(cat "$TMP/out")"
s0=$(date +%s.%N)
wait_for 20 "the effect of $k2 at the provider" eval '[[ $(sent "$c2") -ge 1 ]]' ||
	die "after the broken reload the dispatcher holds the effect of $k2: $(grep -E 'held|contract' "$LOG" | tail -n3)"
s1=$(date +%s.%N)
sleep 1
[[ $(sent "$c2") == 1 ]] || die "the effect of $k2 reached the provider $(sent "$c2") times"
say "ok: a broken contract on SIGHUP: both kept the loaded one (the lines name crm_tag.json line 3), /readyz 503, /healthz 200, oncegate_config_reload_failed 1, and a new effect went out once"

# --- fixed: ready again ---------------------------------------------------------------------------
cp "$TMP/crm_tag.good" "$CONTRACTS/crm_tag.json"
sleep 1 # the success time is in whole seconds
t1=$(date +%s.%N)
hup
[[ $(get /readyz) == 200 ]] || die "after the fix GET /readyz answers $(cat "$TMP/get")"
t_200=$(date +%s.%N)
[[ $(metric oncegate_config_reload_failed) == 0 && $(metric oncegate_ready) == 1 ]] ||
	die "after the fix the metrics still show the failed reload"
[[ $(metric oncegate_config_last_reload_success_timestamp_seconds) -gt $ok_at ]] ||
	die "the last reload success time did not move on"

# --- stop ---------------------------------------------------------------------------------------------
stop_child "$FCGI_PID" 40 oncegate-fcgi
stop_child "$DISPATCH_PID" 30 oncegate-dispatch
FCGI_PID='' DISPATCH_PID=''
grep -q '"event":"responder.stopped"' "$LOG" && grep -q '"event":"dispatch.stopped"' "$LOG" ||
	die "a daemon did not stop cleanly: $(tail -n3 "$LOG")"
for f in "$TMP/fcgi.stderr" "$TMP/dispatch.stderr"; do
	if sanitizer_findings "$f"; then die "sanitizer findings in $f"; fi
done
awk -v a="$t0" -v b="$t_503" -v c="$t1" -v d="$t_200" -v e="$s0" -v f="$s1" 'BEGIN {
	printf "foreground: broken reload -> /readyz 503 in %.2f s; fixed -> 200 in %.2f s; a send under the broken reload took %.2f s\n", b - a, d - c, f - e }'
say "ok: foreground mode (bind, switch to $RUSER, stderr, reopen on SIGHUP), a send through the dispatcher, a broken reload kept and reported"

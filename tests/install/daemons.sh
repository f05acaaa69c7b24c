#!/usr/bin/env bash
# daemons.sh — the two daemons as their systemd units run them, against the
# test stack:
#   * socket activation: systemd-socket-activate creates the socket and
#     passes it on fd 3 ($LISTEN_FDS); oncegate-fcgi, its `listen` empty,
#     serves through it behind nginx (the local site), and leaves the
#     socket in place when it stops;
#   * sd_notify: READY=1 once serving, WATCHDOG=1 at half WATCHDOG_USEC,
#     RELOADING=1 then READY=1 around a SIGHUP reload (both daemons);
#   * SIGHUP reloads the same things in both: the configuration file
#     (a new public_url appears in the approval link the responder returns;
#     a removed target is refused as unknown_target; both log *.reloaded),
#     a broken file or contract keeps the old configuration (both log
#     *.reload_failed naming the file and line; /readyz answers 503
#     not_ready and oncegate_config_reload_failed is 1 until a reload
#     succeeds, while /healthz stays 200),
#     and both reopen the decision log (logrotate moved it away: the lines
#     after the SIGHUP are in a new file, none lost).
# Env (./dev test): ONCEGATE_CONF, ONCEGATE_API_KEY, ONCEGATE_CTL,
# ONCEGATE_DISPATCH, ONCEGATE_PYTHON. Binds 127.0.0.1 only; stops what it
# started by PID. Needs root (nginx's workers run as www-data).
# Exit 0 pass, 1 fail, 77 no stack.
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"
stack_script daemons ONCEGATE_CONF ONCEGATE_API_KEY ONCEGATE_CTL ONCEGATE_DISPATCH
[[ $EUID == 0 ]] || die "needs root (nginx workers run as www-data)"
command -v systemd-socket-activate >/dev/null || die "systemd-socket-activate is not installed"
PYTHON=${ONCEGATE_PYTHON:-/usr/bin/python3}
FCGI=$(dirname "$ONCEGATE_CTL")/oncegate-fcgi
DISPATCH=$ONCEGATE_DISPATCH

private_tmp daemons
NOTIFY_PID='' ACT_PID='' DISPATCH_PID='' NGINX_PID=''
cleanup() {
	set +e
	nginx_stop "$NGINX_PID" "$TMP/nginx"
	stop_child "$ACT_PID" 40 oncegate-fcgi
	stop_child "$DISPATCH_PID" 30 oncegate-dispatch
	stop_child "$NOTIFY_PID" 5
	tmp_done
}

# The stack's configuration with our own log, and `listen` empty: the
# socket comes from the service manager.
CONF=$TMP/oncegate.conf
LOG=$TMP/decisions.log
sed -e 's|^listen = .*|listen =|' -e "s|^log_file = .*|log_file = $LOG|" "$ONCEGATE_CONF" >"$CONF"
chmod 0600 "$CONF"
grep -q '^listen =$' "$CONF" && grep -q "^log_file = $LOG\$" "$CONF" ||
	die "could not rewrite listen and log_file of $ONCEGATE_CONF"
# The contracts without gate.notify: the second reload removes a target,
# and a reload that leaves a notify entry without its target is refused
# (rightly), which is not what that step tests.
CONTRACTS=$TMP/contracts
mkdir -p "$CONTRACTS"
src_contracts=$(sed -n 's/^contracts_dir = //p' "$CONF")
for f in "$src_contracts"/*.json; do
	grep -q '"notify"' "$f" || cp "$f" "$CONTRACTS/"
done
sed -i "s|^contracts_dir = .*|contracts_dir = $CONTRACTS|" "$CONF"
grep -q "^contracts_dir = $CONTRACTS\$" "$CONF" ||
	die "could not point contracts_dir of $CONF at $CONTRACTS"

# notification sockets, one per daemon
for d in fcgi dispatch; do
	"$PYTHON" "$HERE/notify_listen.py" "$TMP/notify-$d.sock" "$TMP/notify-$d.log" &
	[[ $d == fcgi ]] && NOTIFY_PID=$! || NOTIFY_PID="$NOTIFY_PID $!"
done
# stop_child takes one PID: keep both
NOTIFY_PIDS=$NOTIFY_PID NOTIFY_PID=''
cleanup_notify() { local p; for p in $NOTIFY_PIDS; do stop_child "$p" 5; done; }
trap 'cleanup_notify; cleanup' EXIT
wait_for 5 "the notification sockets" test -S "$TMP/notify-dispatch.sock" -a -S "$TMP/notify-fcgi.sock"

# --- socket activation behind nginx ------------------------------------------------------
SOCK=$TMP/fcgi.sock
# It passes the program only the variables -E names; it execs the program
# at the first connection.
# Each daemon connects as its own PostgreSQL role (PGUSER), as the units
# set it.
PGUSER=${ONCEGATE_PGUSER_FCGI:?} NOTIFY_SOCKET=$TMP/notify-fcgi.sock WATCHDOG_USEC=1000000 \
	systemd-socket-activate -l "$SOCK" -E NOTIFY_SOCKET -E WATCHDOG_USEC -E ASAN_OPTIONS \
	-E UBSAN_OPTIONS -E LSAN_OPTIONS -E PGUSER "$FCGI" -c "$CONF" 2>"$TMP/fcgi.stderr" &
ACT_PID=$!
wait_for 10 "the activated socket" test -S "$SOCK" || die "systemd-socket-activate made no socket"
chgrp www-data "$SOCK" && chmod 0660 "$SOCK"

PORT=$(free_port $((21000 + RANDOM % 8000)) 31000) || die "no free port"
nginx_site "$TMP" "$SOCK" "$PORT" "$(dirname "$ONCEGATE_CONF")/proxy_secret.nginx" ||
	die "cannot render nginx/oncegate-local.conf.in"
NGINX_PID=$(nginx_start "$TMP/nginx") || die "nginx did not start: $(cat "$TMP/nginx/error.log" 2>/dev/null)"
URL=http://127.0.0.1:$PORT
code=$(curl -sS -o "$TMP/healthz" -w '%{http_code}' "$URL/healthz") || true
[[ $code == 200 ]] || die "GET /healthz through nginx and the activated socket: $code $(cat "$TMP/healthz" "$TMP/fcgi.stderr" 2>/dev/null)"
grep -q '"responder.started".*the socket systemd passed (fd 3)' "$LOG" ||
	die "the responder did not say it serves the socket systemd passed: $(grep responder.started "$LOG")"
wait_for 5 "READY=1 from oncegate-fcgi" grep -q '^READY=1' "$TMP/notify-fcgi.log" ||
	die "oncegate-fcgi sent no READY=1: $(cat "$TMP/notify-fcgi.log")"
wait_for 5 "WATCHDOG=1 from oncegate-fcgi" grep -q '^WATCHDOG=1' "$TMP/notify-fcgi.log" ||
	die "oncegate-fcgi sent no WATCHDOG=1 within 5 s of WATCHDOG_USEC=1000000"
FCGI_PID=$ACT_PID # systemd-socket-activate execs it

# --- the dispatcher beside it ----------------------------------------------------------------
# AI_ACTIONS_ENABLED unset: it sends nothing, whatever it finds.
env -u AI_ACTIONS_ENABLED PGUSER="${ONCEGATE_PGUSER_DISPATCH:?}" \
	NOTIFY_SOCKET=$TMP/notify-dispatch.sock WATCHDOG_USEC=1000000 \
	"$DISPATCH" -c "$CONF" 2>"$TMP/dispatch.stderr" &
DISPATCH_PID=$!
wait_for 10 "READY=1 from oncegate-dispatch" grep -q '^READY=1' "$TMP/notify-dispatch.log" ||
	die "oncegate-dispatch sent no READY=1: $(cat "$TMP/dispatch.stderr")"
wait_for 5 "WATCHDOG=1 from oncegate-dispatch" grep -q '^WATCHDOG=1' "$TMP/notify-dispatch.log" ||
	die "oncegate-dispatch sent no WATCHDOG=1 within 5 s of WATCHDOG_USEC=1000000"

# --- a claim and a draft through the activated responder -------------------------------------
H="Authorization: Bearer $ONCEGATE_API_KEY" J='Content-Type: application/json'
RUN=$(date +%s%N)
# claim KEY; draft KEY TARGET: prints the answer's HTTP code, body in $TMP/out
claim() {
	curl -sS -o "$TMP/claim" -w '%{http_code}' -X POST "$URL/v1/runs" -H "$H" -H "$J" \
		-d "{\"key\":\"$1\",\"payload\":{\"ticket\":\"$1\",\"subject\":\"Заказ № 42 — 注文の確認 — طلب رقم ٤٢ 📦\"}}"
}
draft() {
	local owner version
	owner=$(sed -E 's/.*"lease_owner":"([^"]+)".*/\1/' "$TMP/claim")
	version=$(sed -E 's/.*"version":([0-9]+).*/\1/' "$TMP/claim")
	curl -sS -o "$TMP/out" -w '%{http_code}' -X POST "$URL/v1/runs/$1/output" -H "$H" -H "$J" -d "{
	  \"lease_owner\":\"$owner\",\"version\":$version,\"contract\":\"support_reply\",
	  \"output\":{\"subject\":\"Re: Заказ № 42 — 注文\",\"body\":\"Ваш заказ отправлен в пятницу. ご注文は金曜日に発送されます。 سيتم شحن طلبك يوم الجمعة. ההזמנה תישלח ביום שישי 🚚\",\"confidence\":0.8},
	  \"effect\":{\"type\":\"email.send\",\"target\":\"$2\",\"payload\":{\"to\":\"customer@example.com\"}},
	  \"requested_by\":\"bob@example.com\"}"
}
hup_both() { # waits for both daemons' READY=1 after their RELOADING=1
	local n_f n_d
	n_f=$(grep -c '^RELOADING=1' "$TMP/notify-fcgi.log" || true)
	n_d=$(grep -c '^RELOADING=1' "$TMP/notify-dispatch.log" || true)
	kill -HUP "$FCGI_PID" "$DISPATCH_PID"
	wait_for 10 "RELOADING=1 from both" eval \
		"[[ \$(grep -c '^RELOADING=1' $TMP/notify-fcgi.log) -gt $n_f && \$(grep -c '^RELOADING=1' $TMP/notify-dispatch.log) -gt $n_d ]]" ||
		die "a daemon sent no RELOADING=1 on SIGHUP"
	wait_for 10 "READY=1 after the reload" eval \
		"tail -n1 $TMP/notify-fcgi.log | grep -q '^READY=1' && tail -n1 $TMP/notify-dispatch.log | grep -q '^READY=1' || \
		 { grep -v '^WATCHDOG' $TMP/notify-fcgi.log | tail -n1 | grep -q '^READY=1' && grep -v '^WATCHDOG' $TMP/notify-dispatch.log | tail -n1 | grep -q '^READY=1'; }" ||
		die "a daemon sent no READY=1 after its reload"
}
PUB=$(sed -n 's/^public_url = //p' "$CONF")
k1=itest:daemons:$RUN:1
[[ $(claim "$k1") == 201 ]] || die "claim through the activated socket: $(cat "$TMP/claim")"
code=$(draft "$k1" demo_smtp)
[[ $code == 202 || $code == 200 || $code == 201 ]] || die "draft before the reload: $code $(cat "$TMP/out")"
grep -q "\"url\":\"$PUB/approve/" "$TMP/out" || die "the approval link does not start with $PUB: $(cat "$TMP/out")"

# --- SIGHUP 1: public_url changes, the decision log was moved away ------------------------------
mv "$LOG" "$LOG.1"
sed -i 's|^public_url = .*|public_url = https://gate-reloaded.example.com|' "$CONF"
hup_both
[[ -s $LOG ]] || die "no new decision log after SIGHUP (the daemons did not reopen it)"
grep -q '"event":"responder.reloaded"' "$LOG" || die "the responder did not log responder.reloaded in the new log"
grep -q '"event":"dispatch.reloaded"' "$LOG" || die "the dispatcher did not log dispatch.reloaded in the new log"
grep -q '"event":"responder.reloaded"' "$LOG.1" && die "responder.reloaded went to the moved-away log"
k2=itest:daemons:$RUN:2
[[ $(claim "$k2") == 201 ]] || die "claim after the reload: $(cat "$TMP/claim")"
code=$(draft "$k2" demo_smtp)
grep -q '"url":"https://gate-reloaded.example.com/approve/' "$TMP/out" ||
	die "after SIGHUP the approval link does not use the new public_url: $code $(cat "$TMP/out")"

# --- SIGHUP 2: a target removed --------------------------------------------------------------------
awk '/^\[target demo_smtp\]/ { skip = 1; next } /^\[/ { skip = 0 } !skip' "$CONF" >"$CONF.new" && mv "$CONF.new" "$CONF"
grep -q '^\[target demo_smtp\]' "$CONF" && die "could not remove [target demo_smtp]"
hup_both
k3=itest:daemons:$RUN:3
[[ $(claim "$k3") == 201 ]] || die "claim after the second reload: $(cat "$TMP/claim")"
code=$(draft "$k3" demo_smtp)
[[ $code == 422 ]] && grep -q 'unknown_target' "$TMP/out" ||
	die "after SIGHUP a removed target is still accepted by the responder: $code $(cat "$TMP/out")"
[[ $(grep -c '"event":"dispatch.reloaded"' "$LOG") -ge 2 ]] || die "the dispatcher did not reload twice"

# --- SIGHUP 3: a broken file keeps the configuration --------------------------------------------------
echo 'no_such_setting = 1' >>"$CONF"
hup_both
grep -q '"event":"responder.reload_failed".*no_such_setting' "$LOG" ||
	die "the responder did not refuse the broken configuration: $(grep responder "$LOG" | tail -n3)"
grep -q '"event":"dispatch.reload_failed".*no_such_setting' "$LOG" ||
	die "the dispatcher did not refuse the broken configuration"
code=$(curl -sS -o /dev/null -w '%{http_code}' "$URL/healthz") || true
[[ $code == 200 ]] || die "after a refused reload /healthz answers $code"
# ... and says so: the line names the file and line, /readyz is 503
# naming the reason, the gauge is 1.
bad=$(grep -n '^no_such_setting' "$CONF" | cut -d: -f1)
for ev in responder.reload_failed dispatch.reload_failed; do
	grep "\"event\":\"$ev\"" "$LOG" | tail -n1 | grep -qF "$CONF:$bad: unknown setting" ||
		die "$ev does not name $CONF:$bad: $(grep "$ev" "$LOG" | tail -n1)"
done
readyz() { curl -sS -o "$TMP/readyz" -w '%{http_code}' "$URL/readyz" || true; }
gauge() { curl -sS "$URL/metrics" | sed -n "s/^oncegate_config_reload_failed //p"; }
code=$(readyz)
[[ $code == 503 ]] && grep -q '"reason": *"config_reload_failed"' "$TMP/readyz" ||
	die "after a refused reload /readyz answers $code $(cat "$TMP/readyz")"
[[ $(gauge) == 1 ]] || die "after a refused reload oncegate_config_reload_failed is $(gauge)"

# --- SIGHUP 4: the configuration fixed, a contract broken: still refused ------------------------
sed -i '/^no_such_setting/d' "$CONF"
first=$(ls "$CONTRACTS"/*.json | head -n1)
cp "$first" "$TMP/contract.good"
printf '{\n  "name": "broken",\n  "schema": {,\n' >"$first"
hup_both
for ev in responder.reload_failed dispatch.reload_failed; do
	grep "\"event\":\"$ev\"" "$LOG" | tail -n1 | grep -qF "$first: not valid JSON at line 3" ||
		die "$ev does not name $first line 3: $(grep "$ev" "$LOG" | tail -n1)"
done
[[ $(readyz) == 503 && $(gauge) == 1 ]] || die "a broken contract: /readyz $(cat "$TMP/readyz"), gauge $(gauge)"
k4=itest:daemons:$RUN:4
[[ $(claim "$k4") == 201 ]] || die "claim after a refused reload: $(cat "$TMP/claim")"

# --- SIGHUP 5: fixed, ready again ---------------------------------------------------------------------
cp "$TMP/contract.good" "$first"
n=$(grep -c '"event":"dispatch.reloaded"' "$LOG")
hup_both
[[ $(grep -c '"event":"dispatch.reloaded"' "$LOG") -gt $n ]] || die "the dispatcher did not reload the fixed contract"
[[ $(readyz) == 200 && $(gauge) == 0 ]] || die "after the fix: /readyz $(cat "$TMP/readyz"), gauge $(gauge)"

# --- stop: the activated socket stays ------------------------------------------------------------------
stop_child "$ACT_PID" 40 oncegate-fcgi
ACT_PID=''
[[ -S $SOCK ]] || die "oncegate-fcgi removed the socket systemd passed it"
grep -q '"event":"responder.stopped"' "$LOG" || die "the responder did not stop cleanly"
say "ok: socket activation behind nginx, READY/WATCHDOG/RELOADING, SIGHUP parity, log reopen, a refused reload reported"

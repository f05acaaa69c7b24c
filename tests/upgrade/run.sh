#!/usr/bin/env bash
# tests/upgrade/run.sh — the previous release upgraded to this tree while
# workflows keep claiming and the dispatcher keeps sending.
#
# The previous release is built from its commit (git archive, in a build
# directory of its own, kept under .dev/ for the next run). A database of
# its own on the stack's PostgreSQL gets the previous release's schema, and
# then, with 4 clients claiming keys (new and duplicate) and submitting
# outputs whose effect the contract approves at once:
#   1. the previous release's responder and dispatcher serve and send;
#   2. this tree's responder starts beside it, nginx is reloaded to pass
#      requests to it and the old one stops (in-flight requests finish);
#      this tree's dispatcher replaces the old one. The schema is behind
#      this build: the responder answers 503 with Retry-After, the
#      dispatcher sends nothing, each says so in one log line;
#   3. `oncegatectl migrate` as the schema's owner: both serve again by
#      themselves, without a restart;
#   4. the clients stop, the outbox drains.
# It prints the figures and fails unless: 0 acknowledged claims or effects
# lost, 0 effects received twice, the 503 window seen and every 503 with
# Retry-After, no answer other than 2xx or 503, nothing sent during the
# window, one schema line per daemon for the previous release's schema (and
# at most one for each version it finds while migrate runs).
#
#   tests/upgrade/run.sh [--from COMMIT] [--build]
#
# --build: only build the previous release (./dev test does it in the
# background while make check runs) and exit.
#
# COMMIT: the previous release's tree (default: ONCEGATE_UPGRADE_FROM, else
# the tree of debian/changelog's 0.1.0 release, commit dcafea8). When this
# tree has no migration that one lacks, the upgrade tested is the one that
# brought the newest migration, from the commit before it. Runs
# against the stack of ./dev test or ./dev chaos (the PG* variables,
# ONCEGATE_CONF, ONCEGATE_CTL, ONCEGATE_DISPATCH, ONCEGATE_PROVIDERS,
# ONCEGATE_PYTHON); this tree's build is the directory of ONCEGATE_CTL.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
# shellcheck source=tests/lib/stack.sh
source "$ROOT/tests/lib/stack.sh"
SAY_PREFIX='   upgrade:'

FROM=${ONCEGATE_UPGRADE_FROM:-dcafea8} GIVEN=${ONCEGATE_UPGRADE_FROM:+yes} BUILD_ONLY=no
while [[ $# -gt 0 ]]; do
	case $1 in
	--from) FROM=$2 GIVEN=yes; shift 2 ;;
	--build) BUILD_ONLY=yes; shift ;;
	*) echo "usage: tests/upgrade/run.sh [--from COMMIT] [--build]" >&2; exit 2 ;;
	esac
done

# --- the previous release, built once per commit -------------------------------------
highest() { ls "$1" | grep -E '^[0-9]{3,}_.*\.sql$' | LC_ALL=C sort | tail -n1; }
new_high=$(highest "$ROOT/sql")
SHA=$(git -C "$ROOT" rev-parse --short=12 "$FROM^{commit}") ||
	die "no commit $FROM in $ROOT (a shallow clone? git fetch --unshallow)"
if [[ -z $GIVEN && $(git -C "$ROOT" ls-tree --name-only "$SHA" sql/ | sed 's|^sql/||' | grep -E '^[0-9]{3,}_.*\.sql$' |
	LC_ALL=C sort | tail -n1) == "$new_high" ]]; then
	# This tree adds no migration to that release: the upgrade to test is
	# the one that brought the newest migration (from the tree before it).
	added=$(git -C "$ROOT" log -1 --diff-filter=A --format=%H -- "sql/$new_high")
	[[ -n $added ]] || die "sql/$new_high is not committed: commit it, or pass --from"
	SHA=$(git -C "$ROOT" rev-parse --short=12 "$added^")
	say "$FROM already ends at ${new_high%.sql}: upgrading from $SHA, the tree before it came"
fi
old_high=$(git -C "$ROOT" ls-tree --name-only "$SHA" sql/ | sed 's|^sql/||' |
	grep -E '^[0-9]{3,}_.*\.sql$' | LC_ALL=C sort | tail -n1)
[[ $old_high != "$new_high" ]] || die "$SHA ends at ${new_high%.sql} too: no migration to upgrade through"
OLD=$ROOT/.dev/upgrade-from-$SHA
if [[ ! -x $OLD/build/oncegatectl || ! -x $OLD/build/oncegate-fcgi || ! -x $OLD/build/oncegate-dispatch ]]; then
	say "building the previous release ($SHA) in $OLD"
	rm -rf "$OLD" && mkdir -p "$OLD/src" "$OLD/build"
	git -C "$ROOT" archive "$SHA" | tar -x -C "$OLD/src"
	(cd "$OLD/src" && autoreconf -fi) >"$OLD/build.log" 2>&1 &&
		(cd "$OLD/build" && ../src/configure CFLAGS="-O0") >>"$OLD/build.log" 2>&1 &&
		nice make -C "$OLD/build" -j2 oncegatectl oncegate-fcgi oncegate-dispatch >>"$OLD/build.log" 2>&1 ||
		{ tail -n 30 "$OLD/build.log" >&2; rm -rf "$OLD/build"; die "the previous release did not build"; }
fi
[[ $BUILD_ONLY == no ]] || exit 0

need_env "./dev test or ./dev chaos" ONCEGATE_CONF ONCEGATE_CTL ONCEGATE_DISPATCH \
	ONCEGATE_PROVIDERS ONCEGATE_PYTHON PGHOST PGPORT
NEW=$(dirname "$ONCEGATE_CTL")

TMP=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-upgrade.XXXXXX")
chmod 0755 "$TMP"
DB=oncegate_upgrade_$$
OLD_FCGI='' NEW_FCGI='' OLD_DISPATCH='' NEW_DISPATCH='' PROVIDER_PID='' NGINX_PID=''
fail=0
cleanup() {
	local p
	touch "$TMP/stop"
	for p in "$OLD_FCGI" "$NEW_FCGI" "$OLD_DISPATCH" "$NEW_DISPATCH" "$PROVIDER_PID"; do
		stop_child "$p" 20
	done
	nginx_stop "$NGINX_PID" "$TMP/nginx"
	PGUSER=postgres dropdb --if-exists --force "$DB" 2>/dev/null || true
	if [[ $fail -eq 0 ]]; then rm -rf "$TMP"; else say "kept $TMP (logs)"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM


# --- a database, a provider, a configuration, nginx ------------------------------------
PGUSER=postgres createdb -O oncegate "$DB"
provider_start PROVIDER_PID PPORT "$TMP/provider.out" http_provider.py --pid "$TMP/provider.pid"
# The contract the traffic uses, from the stack's contracts, and only it:
# the stack's others may use what the previous release cannot load yet
# (a decision it does not know, say), which would stop it at start-up.
mkdir -p "$TMP/contracts"
cp "$(conf_value contracts_dir)/crm_tag_unsampled.json" "$TMP/contracts/"
conf() { # SQL_DIR LOG SOCKET
	local k
	conf_lines listen="$3" listen_mode=0660 listen_group=www-data threads=8 \
		database="\"host=$PGHOST port=$PGPORT dbname=$DB\"" lease_default_seconds=300 log_file="$2" \
		log_level=info sql_dir="$1" retry_after_seconds=2 dispatch_workers=2 dispatch_poll_ms=200 \
		dispatch_shutdown_seconds=5 contracts_dir="$TMP/contracts"
	# the stack's templates, public URL and CSRF secret
	for k in templates_dir public_url csrf_secret; do conf_lines "$k=$(conf_value "$k")"; done
	target_conf demo_http http "http://127.0.0.1:$PPORT/effects" \
		lookup_url="http://127.0.0.1:$PPORT/effects/lookup" idempotency_key=1 \
		provider_id_header=X-Provider-Id rejection_pointer='!/ok'
	# named by the stack's contracts; nothing in this test sends there
	target_conf demo_smtp smtp smtp://127.0.0.1:9 mail_from=oncegate@upgrade.example
	target_conf callback http http://127.0.0.1:9/
}
(umask 077 && conf "$OLD/src/sql" "$TMP/old.log" "$TMP/old.sock" >"$TMP/old.conf" &&
	conf "$ROOT/sql" "$TMP/new.log" "$TMP/new.sock" >"$TMP/new.conf")
# nginx proves itself to this tree's responder with the proxy secret (the
# previous release has no such setting and ignores the parameter).
proxy_secret_make "$TMP"
sed -i "/^csrf_secret = /a proxy_secret_file = $TMP/proxy_secret" "$TMP/new.conf"
PGUSER=oncegate "$OLD/build/oncegatectl" -c "$TMP/old.conf" migrate >/dev/null 2>"$TMP/migrate-old.err" ||
	die "the previous release's migrate failed: $(cat "$TMP/migrate-old.err")"
octl() { PGUSER=oncegate-operator "$OLD/build/oncegatectl" -c "$TMP/old.conf" "$@"; }
octl kill-switch on --reason "upgrade test: sends to a loopback provider" >/dev/null 2>&1
KEY=$(octl client add upgrade --reason "upgrade test traffic" 2>/dev/null)
[[ -n $KEY ]] || die "no API key"

HPORT=$(free_port 25000 32000)
# upstream SOCKET: nginx's configuration, passing requests to SOCKET.
upstream() { nginx_site "$TMP" "$1" "$HPORT" "$TMP/proxy_secret.nginx" || die "cannot render nginx's site"; }
upstream "$TMP/old.sock"
NGINX_PID=$(nginx_start "$TMP/nginx") || die "nginx did not start"

# start_fcgi BUILD CONF / start_dispatch BUILD CONF: a daemon, its PID.
start_fcgi() {
	PGUSER=oncegate-fcgi setsid "$1/oncegate-fcgi" -c "$2" </dev/null >>"$TMP/fcgi.stderr" 2>&1 &
	echo $!
}
start_dispatch() {
	PGUSER=oncegate-dispatch AI_ACTIONS_ENABLED=true setsid "$1/oncegate-dispatch" -c "$2" \
		</dev/null >>"$TMP/dispatch.stderr" 2>&1 &
	echo $!
}
provider_posts() {
	curl -fsS "http://127.0.0.1:$PPORT/_requests" |
		"$ONCEGATE_PYTHON" -c 'import json,sys; print(sum(1 for r in json.load(sys.stdin) if r["kind"] == "effect"))'
}
answers() { curl -s --max-time 5 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $KEY" \
	"http://127.0.0.1:$HPORT/v1/runs/none-such"; }

# alive NAME PID: the daemon is still running a moment after its start.
alive() {
	sleep 0.5
	running "$2" || { tail -n 5 "$TMP/fcgi.stderr" "$TMP/dispatch.stderr" >&2; die "$1 did not start"; }
}

# --- 1. the previous release serves --------------------------------------------------------
T0=$SECONDS
OLD_FCGI=$(start_fcgi "$OLD/build" "$TMP/old.conf")
alive "the previous release's responder" "$OLD_FCGI"
OLD_DISPATCH=$(start_dispatch "$OLD/build" "$TMP/old.conf")
alive "the previous release's dispatcher" "$OLD_DISPATCH"
wait_for 20 "the previous release's responder" bash -c "[[ \$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' http://127.0.0.1:$HPORT/healthz) == 200 ]]" ||
	die "the previous release does not answer"
say "previous release ($SHA, schema ${old_high%.sql}) serving; traffic starts"
"$ONCEGATE_PYTHON" "$HERE/traffic.py" --url "http://127.0.0.1:$HPORT" --key "$KEY" \
	--prefix "upg$$" --workers 4 --stop "$TMP/stop" --out "$TMP/traffic.json" &
TRAFFIC=$!
sleep 8
before=$(provider_posts)

# --- 2. this tree's daemons on the old schema ------------------------------------------------
say "this tree's responder and dispatcher replace the previous release's"
NEW_FCGI=$(start_fcgi "$NEW" "$TMP/new.conf")
alive "this tree's responder" "$NEW_FCGI"
wait_for 20 "this tree's responder to log the schema" grep -q '"schema.mismatch"' "$TMP/new.log" ||
	fail=1
# nginx to the new socket (a graceful reload: requests in flight finish
# on the old responder), then the old one stops.
upstream "$TMP/new.sock"
kill -HUP "$NGINX_PID"
sleep 1
stop_child "$OLD_FCGI" 30 "old responder"
OLD_FCGI=''
stop_child "$OLD_DISPATCH" 30 "old dispatcher"
OLD_DISPATCH=''
sent_old=$(provider_posts)
NEW_DISPATCH=$(start_dispatch "$NEW" "$TMP/new.conf")
alive "this tree's dispatcher" "$NEW_DISPATCH"
W0=$SECONDS
sleep 6
window_status=$(answers)
sent_window=$(($(provider_posts) - sent_old))

# --- 3. migrate as the owner ---------------------------------------------------------------------
say "oncegatectl migrate (this tree) as the schema's owner"
M0=$(date +%s.%N)
PGUSER=oncegate "$ONCEGATE_CTL" -c "$TMP/new.conf" migrate >"$TMP/migrate.out" 2>&1 ||
	{ cat "$TMP/migrate.out" >&2; die "migrate failed"; }
applied=$(grep -c '^applied' "$TMP/migrate.out" || true)
wait_for 15 "the responder to serve again" bash -c "[[ \$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer $KEY' http://127.0.0.1:$HPORT/v1/runs/none-such) == 404 ]]" ||
	fail=1
back_ms=$("$ONCEGATE_PYTHON" -c "import time; print(int((time.time() - $M0) * 1000))")
W1=$SECONDS
sleep 8

# --- 4. stop, drain, compare -------------------------------------------------------------------
touch "$TMP/stop"
wait "$TRAFFIC" || true
PGDATABASE=$DB
export PGDATABASE
drained() { [[ $(q "SELECT count(*) FROM effect_outbox WHERE state IN ('pending', 'sending')") == 0 ]]; }
wait_for 60 "the outbox to drain" drained || fail=1
# this tree's daemons stop (a sanitized build reports leaks at exit)
stop_child "$NEW_FCGI" 40 "this tree's responder"
stop_child "$NEW_DISPATCH" 40 "this tree's dispatcher"
NEW_FCGI='' NEW_DISPATCH=''
curl -fsS "http://127.0.0.1:$PPORT/_requests" >"$TMP/requests.json"
q "SELECT idempotency_key FROM workflow_runs" >"$TMP/runs.txt"
q "SELECT idempotency_key || ' ' || state FROM effect_outbox" >"$TMP/outbox.txt"
"$ONCEGATE_PYTHON" - "$TMP" <<'PY' >"$TMP/figures"
import collections, json, sys
tmp = sys.argv[1]
t = json.load(open(tmp + "/traffic.json", encoding="utf-8"))
reqs = json.load(open(tmp + "/requests.json", encoding="utf-8"))
runs = set(open(tmp + "/runs.txt", encoding="utf-8").read().split("\n"))
got = collections.Counter()
for r in reqs:
    if r["kind"] == "effect":
        try:
            got[json.loads(r["body"])["contact_id"]] += 1
        except (ValueError, KeyError, TypeError):
            got["?"] += 1
acked = {e["contact_id"] for e in t["effects"]}
st = t["status"]
ok = sum(n for s, n in st.items() if s.startswith("2"))
other = sum(n for s, n in st.items() if not s.startswith("2") and s != "503")
print("claims_acked", len(t["claims"]))
print("claims_lost", sum(1 for k in t["claims"] if k not in runs))
print("effects_acked", len(acked))
print("effects_lost", sum(1 for c in acked if got[c] == 0))
print("effects_doubled", sum(1 for c, n in got.items() if n > 1))
print("answers_2xx", ok)
print("answers_503", st.get("503", 0))
print("answers_other", other)
print("no_retry_after", t["no_retry_after"])
w = (t["last_503"] - t["first_503"]) if t["first_503"] else 0
print("window_503_seconds", "%.1f" % w)
print("client_errors", t["error_count"])
print("stale_connections", t["stale_connections"])
for e in t["errors"][:5]:
    print("error", e.replace(" ", "_")[:200], file=sys.stderr)
PY
fig() { awk -v k="$1" '$1 == k { print $2 }' "$TMP/figures"; }
unsent=$(q "SELECT count(*) FROM effect_outbox WHERE state NOT IN ('completed')")
# One line per daemon for the previous release's schema; a daemon that
# looks while migrate runs sees the migrations in between (each its own
# transaction), one line for each version it finds, never more.
mismatch() { # PROGRAM [FOUND]: its schema.mismatch lines (found: that version only)
	grep -c "\"event\":\"schema.mismatch\",\"program\":\"$1\",\"state_from\":\"${2:-}" \
		"$TMP/new.log" || true
}
fcgi_lines=$(mismatch oncegate-fcgi "${old_high%.sql}\"")
dispatch_lines=$(mismatch oncegate-dispatch "${old_high%.sql}\"")
between=$(($(mismatch oncegate-fcgi) - fcgi_lines + $(mismatch oncegate-dispatch) - dispatch_lines))
printf '  previous release %s (schema %s) -> this tree (schema %s), %d migration(s) applied\n' \
	"$SHA" "${old_high%.sql}" "${new_high%.sql}" "$applied"
printf '  claims acknowledged                 %6d   lost %d (must be 0)\n' "$(fig claims_acked)" "$(fig claims_lost)"
printf '  effects acknowledged                %6d   lost %d, received twice %d (must be 0, 0)\n' \
	"$(fig effects_acked)" "$(fig effects_lost)" "$(fig effects_doubled)"
printf '  effects not completed after drain   %6d   (must be 0)\n' "$unsent"
printf '  answers 2xx %d, 503 %d (without Retry-After %d), other %d (must be >0, 0, 0)\n' \
	"$(fig answers_2xx)" "$(fig answers_503)" "$(fig no_retry_after)" "$(fig answers_other)"
printf '  kept-alive connections nginx closed on its reload, sent again: %d\n' "$(fig stale_connections)"
printf '  503 window seen by clients          %6ss; a probe in it answered %s\n' "$(fig window_503_seconds)" "$window_status"
printf '  sent by this tree before migrate    %6d   (must be 0); old release sent %d before the swap\n' \
	"$sent_window" "$before"
printf '  from migrate to serving again       %6d ms\n' "$back_ms"
printf '  schema lines: responder %d, dispatcher %d (each must be 1); during migrate %d (at most %d)\n' \
	"$fcgi_lines" "$dispatch_lines" "$between" $((2 * (applied - 1)))
printf '  stage took %ds (window %ds of it)\n' $((SECONDS - T0)) $((W1 - W0))
check "no acknowledged claim lost" "$(yn test "$(fig claims_lost)" -eq 0)"
check "no acknowledged effect lost" "$(yn test "$(fig effects_lost)" -eq 0 -a "$unsent" -eq 0)"
check "no effect received twice" "$(yn test "$(fig effects_doubled)" -eq 0)"
check "the 503 window was seen, every 503 with Retry-After" \
	"$(yn test "$(fig answers_503)" -gt 0 -a "$(fig no_retry_after)" -eq 0 -a "$window_status" = 503)"
check "no answer other than 2xx or 503" "$(yn test "$(fig answers_other)" -eq 0 -a "$(fig client_errors)" -eq 0)"
check "nothing sent on the old schema by this tree" "$(yn test "$sent_window" -eq 0)"
check "traffic before and after the upgrade" "$(yn test "$before" -gt 0 -a "$(fig effects_acked)" -gt "$before")"
check "one schema line per daemon" \
	"$(yn test "$fcgi_lines" -eq 1 -a "$dispatch_lines" -eq 1 -a "$between" -le $((2 * (applied - 1))))"
check "no sanitizer report from this tree's daemons" \
	"$(if sanitizer_findings "$TMP/fcgi.stderr" || sanitizer_findings "$TMP/dispatch.stderr"; then echo no; else echo yes; fi)"
exit "$fail"

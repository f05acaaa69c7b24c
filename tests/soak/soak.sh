#!/usr/bin/env bash
# soak.sh — oncegate-fcgi and oncegate-dispatch under valgrind memcheck for
# a long run of mixed load (tests/soak/load.py: claims, duplicates,
# conflicting payloads, status reads, approvals through the page and its
# POST, auto-approved effects), every effect drained to loopback providers.
# Afterwards:
#   * valgrind: 0 errors and 0 bytes definitely, indirectly or possibly
#     lost in either program (still-reachable blocks of the libraries'
#     one-time initialisation are not leaks and are reported only);
#   * exactly once: every effect of the run `completed`, each received by
#     its provider exactly once (the HTTP provider's record of requests, the
#     SMTP sink's record of messages); the load saw no unexpected answer;
#   * what was approved is what arrived, to the right tenant: two API
#     clients (tenants) use the same business keys (tests/data/corpus: long,
#     multilingual), each drafting its own long mail (every script, up to
#     200 + 5,000 code points, to 1, 10 or 100 recipients) or tag; per
#     (tenant, key, effect) exactly one delivery whose recipients, subject
#     and body (MIME-decoded) or payload are byte for byte the approved
#     ones, whose provider id is the one on that tenant's effect; each HTTP
#     delivery's Idempotency-Key is the stored provider key of exactly one
#     effect, of that tenant; no provider key or Message-ID shared by two
#     effects (tests/soak/load.py check).
# With --native the same run goes without valgrind, and checks instead:
#   * RSS flat after warm-up: each program's resident size at the end of the
#     run is within RSS_SLACK KiB of what it was at the end of the warm-up
#     (the first quarter of the run, at least 60 s or half of a short run).
#     Under valgrind the RSS is printed but not checked: memcheck's own
#     memory (its quarantine of freed blocks, up to 20 MB) grows for a long
#     time whatever the program does.
#
#   tests/soak/soak.sh [--seconds N] [--threads T] [--workers W] [--native]
#       [--tenants 1|2] [--mails long|short]
#       (default 1800 s, the responder's configured threads, 4 workers,
#       2 tenants, long mails; one tenant and short mails exercise the rest
#       on a build that cannot yet send the long ones)
#
# Runs beside the test stack that `./dev test` (or `./dev soak`) starts: it
# uses that stack's PostgreSQL, configuration (contracts, templates, CSRF
# secret; the stack must load the test contracts of tests/data/contracts-test:
# lists of recipients go through support_list) and API key, but starts its own responder and dispatcher, both
# under valgrind (so built without sanitizers: ONCEGATE_VG_FCGI and
# ONCEGATE_VG_DISPATCH name them), its own nginx in front of that
# responder, and its own HTTP provider and SMTP sink, in a private
# directory under the stack's state directory (nginx's workers must reach
# the socket). Everything it starts is stopped by PID on exit. Prints one
# table; exit status 0 when every check above holds.
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"

SECONDS_RUN=1800 THREADS='' WORKERS=4 NATIVE=no TENANTS=2 MAILS=long
# KiB a program's RSS may grow between the end of the warm-up and the end.
RSS_SLACK=${RSS_SLACK:-4096}
while [[ $# -gt 0 ]]; do
	case $1 in
	--seconds) SECONDS_RUN=${2:?}; shift 2 ;;
	--threads) THREADS=${2:?}; shift 2 ;;
	--workers) WORKERS=${2:?}; shift 2 ;;
	--native) NATIVE=yes; shift ;;
	--tenants) TENANTS=${2:?}; shift 2 ;;
	--mails) MAILS=${2:?}; shift 2 ;;
	*) echo "usage: $0 [--seconds N] [--threads T] [--workers W] [--native] [--tenants 1|2] [--mails long|short]" >&2; exit 2 ;;
	esac
done
need_env "./dev test or ./dev soak" ONCEGATE_VG_FCGI ONCEGATE_VG_DISPATCH ONCEGATE_CONF ONCEGATE_CTL ONCEGATE_API_KEY \
	ONCEGATE_PROVIDERS ONCEGATE_PYTHON PGHOST PGPORT PGDATABASE
[[ $TENANTS == 1 || $TENANTS == 2 ]] || { echo "soak.sh: --tenants is 1 or 2" >&2; exit 2; }
[[ $MAILS == long || $MAILS == short ]] || { echo "soak.sh: --mails is long or short" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "soak.sh: valgrind is not installed" >&2; exit 2; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)

STATE_DIR=$(dirname "$ONCEGATE_CONF")
DIR=$(mktemp -d "$STATE_DIR/soak.XXXXXX")
chmod 0755 "$DIR"
PIDS_HTTP='' PIDS_SMTP='' FCGI_PID='' DISPATCH_PID='' NGINX_PID='' SAMPLER_PID='' LOAD_PID=''
cleanup() {
	stop_child "$LOAD_PID" 5
	stop_child "$SAMPLER_PID" 2
	stop_child "$DISPATCH_PID" 120
	[[ -n $NGINX_PID ]] && stop_child "$NGINX_PID" 10
	stop_child "$FCGI_PID" 120
	stop_child "$PIDS_SMTP" 10
	stop_child "$PIDS_HTTP" 10
	[[ ${KEEP_SOAK_DIR:-} == 1 ]] || rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
RUN=soak$(date +%s)-$$

# --- the providers -------------------------------------------------------------------
# start_provider NAME ARGS...: prints its port once it says "ready PORT".
start_provider() {
	local name=$1 i port
	shift
	"$ONCEGATE_PYTHON" "$@" --port 0 >"$DIR/$name.out" 2>&1 &
	echo $! >"$DIR/$name.pid"
	for ((i = 0; i < 100; i++)); do grep -q '^ready' "$DIR/$name.out" 2>/dev/null && break; sleep 0.1; done
	port=$(sed -n 's/^ready \([0-9]*\).*/\1/p' "$DIR/$name.out")
	[[ -n $port ]] || { cat "$DIR/$name.out" >&2; echo "soak.sh: $name did not start" >&2; exit 1; }
	echo "$port"
}
HTTP_PORT=$(start_provider http "$ONCEGATE_PROVIDERS/http_provider.py")
PIDS_HTTP=$(cat "$DIR/http.pid")
SMTP_PORT=$(start_provider smtp "$ONCEGATE_PROVIDERS/smtp_sink.py" --record "$DIR/smtp.jsonl")
PIDS_SMTP=$(cat "$DIR/smtp.pid")

# --- the configuration: the stack's, with this run's socket, log, providers ----------
NGINX_PORT=$(free_port $((20000 + RANDOM % 12000)) 32000) || { echo "soak.sh: no free loopback port for nginx" >&2; exit 1; }
[[ -n $THREADS ]] || THREADS=$(sed -n 's/^threads *= *//p' "$ONCEGATE_CONF" | head -n1)
{
	printf '# tests/soak/soak.sh (%s), from %s\n' "$RUN" "$ONCEGATE_CONF"
	printf 'listen = %s\nlisten_mode = 0660\nlisten_group = www-data\n' "$DIR/fcgi.sock"
	printf 'threads = %s\nlog_file = %s\n' "$THREADS" "$DIR/decisions.log"
	printf 'dispatch_workers = 4\ndispatch_poll_ms = 200\n'
	# The approval links and the POST's Origin check name this run's nginx.
	printf 'public_url = http://127.0.0.1:%s\n' "$NGINX_PORT"
	sed -E -e '/^(listen|listen_mode|listen_group|threads|log_file|dispatch_workers|dispatch_poll_ms|public_url) *=/d' \
		-e "s#^(url|lookup_url) = http://127\.0\.0\.1:[0-9]+/effects#\1 = http://127.0.0.1:$HTTP_PORT/effects#" \
		-e "s#^url = smtp://127\.0\.0\.1:[0-9]+#url = smtp://127.0.0.1:$SMTP_PORT#" \
		"$ONCEGATE_CONF"
} >"$DIR/oncegate.conf"
chmod 0640 "$DIR/oncegate.conf"
(umask 077 && printf '%s\n' "$ONCEGATE_API_KEY" >"$DIR/api_key")
# The second tenant: an API client of its own, with the same business keys.
LOAD_TENANTS=()
if [[ $TENANTS == 2 ]]; then
	CLIENT_B=soak-b-$RUN
	key_b=$("$ONCEGATE_CTL" -c "$DIR/oncegate.conf" client add "$CLIENT_B" \
		--reason "soak: a second tenant with the same business keys") ||
		{ echo "soak.sh: oncegatectl client add $CLIENT_B failed" >&2; exit 1; }
	(umask 077 && printf '%s\n' "$key_b" >"$DIR/api_key_b")
	unset key_b
	LOAD_TENANTS=(--key-file-b "$DIR/api_key_b" --client-b "$CLIENT_B")
fi

# --- the programs under valgrind -----------------------------------------------------
VALGRIND=(valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite,indirect,possible
	--errors-for-leak-kinds=definite,indirect,possible --num-callers=30 --error-limit=no)
# vg LOG PROGRAM ARGS...: replaces the calling (background) shell.
vg() { local log=$1; shift; exec "${VALGRIND[@]}" --log-file="$log" "$@"; }
if [[ $NATIVE == yes ]]; then
	# The same run without valgrind: RSS as in production (memcheck's own
	# bookkeeping, its quarantine of freed blocks above all, is not there).
	vg() { local log=$1; shift; echo "native run: no valgrind" >"$log"; exec "$@"; }
fi

if [[ $NATIVE == yes ]]; then how='without valgrind (RSS)'; else how='under valgrind memcheck'; fi
say "soak $RUN: oncegate-fcgi ($THREADS threads) and oncegate-dispatch $how, ${SECONDS_RUN}s of load"
vg "$DIR/vg-fcgi.log" "$ONCEGATE_VG_FCGI" -c "$DIR/oncegate.conf" \
	</dev/null >"$DIR/fcgi.stderr" 2>&1 &
FCGI_PID=$!
for ((i = 0; i < 600; i++)); do
	[[ -S $DIR/fcgi.sock ]] && break
	running "$FCGI_PID" || break
	sleep 0.1
done
[[ -S $DIR/fcgi.sock ]] || { cat "$DIR/fcgi.stderr" "$DIR/vg-fcgi.log" >&2; echo "soak.sh: the responder did not start" >&2; exit 1; }

nginx_site "$DIR" "$DIR/fcgi.sock" "$NGINX_PORT" "$(dirname "$ONCEGATE_CONF")/proxy_secret.nginx" &&
	NGINX_PID=$(nginx_start "$DIR/nginx") || { echo "soak.sh: nginx did not start" >&2; exit 1; }
for ((i = 0; i < 300; i++)); do
	curl -fsS -o /dev/null --max-time 5 "http://127.0.0.1:$NGINX_PORT/healthz" 2>/dev/null && break
	sleep 0.2
done

"$ONCEGATE_CTL" -c "$DIR/oncegate.conf" sends resume \
	--reason "soak: the dispatcher sends to loopback providers" >/dev/null 2>&1
# Effects of earlier work in this database go nowhere near this run's providers.
q "UPDATE effect_outbox SET state = 'cancelled' WHERE state IN ('pending', 'unknown')" >/dev/null
(
	export AI_ACTIONS_ENABLED=true
	vg "$DIR/vg-dispatch.log" "$ONCEGATE_VG_DISPATCH" -c "$DIR/oncegate.conf"
) </dev/null >"$DIR/dispatch.stderr" 2>&1 &
DISPATCH_PID=$!

# --- RSS samples every 5 s: seconds-since-start fcgi-KiB dispatch-KiB ----------------
rss() { awk '/^VmRSS:/ { print $2; found = 1 } END { if (!found) print 0 }' "/proc/$1/status" 2>/dev/null || echo 0; }
T0=$SECONDS
(
	while :; do
		printf '%d %s %s\n' $((SECONDS - T0)) "$(rss "$FCGI_PID")" "$(rss "$DISPATCH_PID")"
		sleep 5
	done
) >"$DIR/rss" &
SAMPLER_PID=$!

# --- the load ------------------------------------------------------------------------
load_rc=0
"$ONCEGATE_PYTHON" "$HERE/load.py" --url "http://127.0.0.1:$NGINX_PORT" --key-file "$DIR/api_key" \
	--client dev "${LOAD_TENANTS[@]}" --mails "$MAILS" \
	--prefix "$RUN" --seconds "$SECONDS_RUN" --workers "$WORKERS" --out "$DIR/load.json" &
LOAD_PID=$!
wait "$LOAD_PID" || load_rc=$?
LOAD_PID=''
ELAPSED=$((SECONDS - T0))

# Every effect of the run drains (or the wait gives up and the counts say so).
say "load over after ${ELAPSED}s; waiting for the outbox to drain"
for ((i = 0; i < 900; i++)); do
	left=$(q "SELECT count(*) FROM effect_outbox WHERE idempotency_key LIKE '$RUN:%' AND state NOT IN ('completed', 'failed', 'unknown', 'cancelled')")
	[[ $left == 0 ]] && break
	sleep 0.2
done
printf '%d %s %s\n' $((SECONDS - T0)) "$(rss "$FCGI_PID")" "$(rss "$DISPATCH_PID")" >>"$DIR/rss"
stop_child "$SAMPLER_PID" 2
SAMPLER_PID=''

# --- stop: valgrind writes its summaries at exit -------------------------------------
stop_child "$DISPATCH_PID" 120
DISPATCH_PID=''
stop_child "$NGINX_PID" 10
NGINX_PID=''
stop_child "$FCGI_PID" 120
FCGI_PID=''

# --- what happened -------------------------------------------------------------------
curl -fsS "http://127.0.0.1:$HTTP_PORT/_requests" >"$DIR/requests.json"
# Every provider record against what was approved, per tenant.
psql -X -At -F $'\t' -v ON_ERROR_STOP=1 -c "
	SELECT c.name, e.idempotency_key, e.effect_type, e.provider_key, e.state,
	       coalesce(e.provider_id, '')
	  FROM effect_outbox e JOIN api_clients c ON c.id = e.client_id
	 WHERE e.idempotency_key LIKE '$RUN:%'" >"$DIR/effects.tsv"
"$ONCEGATE_PYTHON" "$HERE/load.py" check --load "$DIR/load.json" --smtp "$DIR/smtp.jsonl" \
	--requests "$DIR/requests.json" --effects "$DIR/effects.tsv" --out "$DIR/deliveries.json" || true
"$ONCEGATE_PYTHON" - "$DIR" "$RUN" "$RSS_SLACK" "$NATIVE" >"$DIR/summary" <<'EOF'
import json, re, sys
d, run, slack, native = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "yes"
prefix = run + ":"
# provider keys: "og1/c<client>/<run key, readable>/..." (the readable
# form keeps [A-Za-z0-9._-] and shows every other run of bytes as one "_")
ours = re.compile(r"og1/c[0-9]+/" + re.escape(re.sub(r"[^A-Za-z0-9._-]+", "_", prefix)))
load = json.load(open(d + "/load.json"))

def vg(name):
    text = open("%s/vg-%s.log" % (d, name), errors="replace").read()
    if text.startswith("native run"):
        return None, None
    m = re.findall(r"ERROR SUMMARY: ([0-9,]+) errors", text)
    errors = int(m[-1].replace(",", "")) if m else -1
    lost = {}
    for kind in ("definitely", "indirectly", "possibly", "still reachable"):
        m = re.findall(kind + r"(?: lost)?: ([0-9,]+) bytes in ([0-9,]+) blocks", text)
        lost[kind] = int(m[-1][0].replace(",", "")) if m else 0
    if "All heap blocks were freed" in text:
        lost = {k: 0 for k in lost}
    return errors, lost

http = {}
# The soak's own provider: every effect request it saw is this run's (the
# provider key need not start with the run key).
for r in json.load(open(d + "/requests.json")):
    k = r.get("idempotency_key") or ""
    if r.get("kind") == "effect":
        http[k] = http.get(k, 0) + 1
smtp = {}
for line in open(d + "/smtp.jsonl"):
    m = json.loads(line)
    mid = m.get("message_id") or ""
    smtp[mid] = smtp.get(mid, 0) + 1

samples = [tuple(map(int, l.split())) for l in open(d + "/rss") if len(l.split()) == 3]
end_t = samples[-1][0] if samples else 0
warm = max(min(60, end_t // 2), end_t // 4)
after = [s for s in samples if s[0] >= warm]
def growth(col):
    if len(after) < 2:
        return None
    return after[-1][col] - after[0][col]

out = {
    "load": load, "vg_fcgi": vg("fcgi"), "vg_dispatch": vg("dispatch"),
    "http_received": sum(http.values()), "http_keys": len(http),
    "http_twice": sum(1 for n in http.values() if n > 1),
    "smtp_received": sum(smtp.values()), "smtp_ids": len(smtp),
    "smtp_twice": sum(1 for n in smtp.values() if n > 1),
    "rss_warm_at": warm,
    "rss_fcgi": [after[0][1], after[-1][1]] if after else None,
    "rss_dispatch": [after[0][2], after[-1][2]] if after else None,
    "rss_fcgi_growth": growth(1), "rss_dispatch_growth": growth(2),
    "rss_fcgi_peak": max((s[1] for s in samples), default=0),
    "rss_dispatch_peak": max((s[2] for s in samples), default=0),
    "slack": slack, "native": native,
    "deliveries": json.load(open(d + "/deliveries.json")),
}
print(json.dumps(out))
EOF
read -r total completed unknown other < <(psql -X -At -F ' ' -c "
	SELECT count(*), count(*) FILTER (WHERE state = 'completed'),
	       count(*) FILTER (WHERE state = 'unknown'),
	       count(*) FILTER (WHERE state NOT IN ('completed', 'unknown'))
	  FROM effect_outbox WHERE idempotency_key LIKE '$RUN:%'")
rc=0
"$ONCEGATE_PYTHON" - "$DIR/summary" "$total" "$completed" "$unknown" "$other" "$ELAPSED" "$RUN" <<'EOF' || rc=$?
import json, sys
s = json.load(open(sys.argv[1]))
total, completed, unknown, other, elapsed, run = (int(x) if x.isdigit() else x for x in sys.argv[2:])
c, req = s["load"]["counts"], s["load"]["requests"]
fails = []
def line(label, value, must=None):
    ok = "" if must is None else ("   (must be %s)" % must)
    print("  %-44s %s%s" % (label, value, ok))

print("\nsoak (%s), %d s of load, %s" % (run, elapsed, "native (RSS)" if s["native"]
                                          else "under valgrind memcheck"))
line("requests answered", sum(req.values()))
for k in sorted(req):
    line("  " + k, req[k])
line("tenants (API clients) / mails", "%s / %s" % (" + ".join(s["load"].get("tenants", [])),
                                                  s["load"].get("mails", "?")))
line("runs claimed", c["runs"])
line("duplicate claims answered with the run", c["duplicates"])
line("conflicting payloads refused (422)", c["conflicts"])
line("approved through the page", c["approved_by_person"])
line("approved by the contract's rules", c["auto_approved"])
line("approval POSTs told to wait (429), resent", c["rate_limited"])
line("unexpected answers", c["errors"], 0)
if c["errors"]:
    fails.append("unexpected answers")
    for e in s["load"]["errors"]:
        print("      " + e)
expected = c["email.send"] + c["crm.tag"]
line("effects enqueued (from the answers)", expected)
line("effects in the outbox for this run", total, expected)
line("  completed", completed, total)
line("  unknown / other", "%d / %d" % (unknown, other), "0 / 0")
if total != expected or completed != total:
    fails.append("effects not all completed")
line("HTTP effects received / distinct keys", "%d / %d" % (s["http_received"], s["http_keys"]))
line("mails received / distinct Message-IDs", "%d / %d" % (s["smtp_received"], s["smtp_ids"]))
line("effects received more than once", s["http_twice"] + s["smtp_twice"], 0)
if s["http_twice"] + s["smtp_twice"]:
    fails.append("duplicates")
if s["http_received"] + s["smtp_received"] != completed:
    fails.append("received != completed")
    line("received != completed", "%d != %d" % (s["http_received"] + s["smtp_received"], completed))
dv = s["deliveries"]
line("deliveries approved (tenant, key, effect)", dv["deliveries_approved"])
line("  keys used by both tenants", dv["keys_shared_by_two_tenants"])
line("  mails / HTTP effects committed", "%d / %d" % (dv["mails_received"], dv["http_committed"]))
line("  doubled", dv["doubled"], 0)
line("  lost", dv["lost"], 0)
others = {k: n for k, n in dv["findings"].items() if k not in ("doubled", "lost")}
line("  other findings (wrong tenant, bytes differ)", sum(others.values()), 0)
for k in sorted(others):
    line("    " + k, others[k])
if dv["findings"]:
    fails.append("deliveries differ from approvals")
    for e in dv["examples"][:10]:
        print("      " + e)
for name in ("fcgi", "dispatch"):
    errors, lost = s["vg_" + name]
    prog = "oncegate-" + name
    if errors is None:
        line("valgrind %s" % prog, "not used (--native)")
        errors, lost = 0, {"definitely": 0, "indirectly": 0, "possibly": 0, "still reachable": 0}
    else:
        line("valgrind %s: errors" % prog, errors, 0)
        line("valgrind %s: definitely/indirectly/possibly lost" % prog,
             "%d / %d / %d bytes" % (lost["definitely"], lost["indirectly"], lost["possibly"]), "0")
        line("valgrind %s: still reachable (not a leak)" % prog, "%d bytes" % lost["still reachable"])
    if errors != 0 or lost["definitely"] or lost["indirectly"] or lost["possibly"]:
        fails.append("valgrind " + prog)
    rng, growth, peak = s["rss_" + name], s["rss_%s_growth" % name], s["rss_%s_peak" % name]
    if rng is None:
        line("RSS %s" % prog, "too few samples")
        continue
    if s["native"]:
        line("RSS %s after %d s warm-up -> end" % (prog, s["rss_warm_at"]),
             "%d -> %d KiB (%+d; peak %d)" % (rng[0], rng[1], growth, peak), "<= +%d" % s["slack"])
        if growth > s["slack"]:
            fails.append("RSS " + prog)
    else:
        # memcheck's own memory (its quarantine of freed blocks, up to
        # 20 MB, and its records of allocation stacks) fills for a long
        # time: the flat-RSS check is the --native run's.
        line("RSS %s under valgrind, %d s -> end" % (prog, s["rss_warm_at"]),
             "%d -> %d KiB (%+d; peak %d)   (memcheck's own: not checked)"
             % (rng[0], rng[1], growth, peak))
print("  result: %s" % ("ok" if not fails else "FAILED: " + ", ".join(fails)))
sys.exit(1 if fails else 0)
EOF
[[ $load_rc == 0 ]] || rc=1
if [[ $rc != 0 ]]; then
	say "soak failed: valgrind's reports follow (also kept with KEEP_SOAK_DIR=1 in $DIR)"
	grep -A40 -E '^==[0-9]+== (Invalid|Conditional|Syscall|Mismatched|[0-9,]+ bytes in)' \
		"$DIR/vg-fcgi.log" "$DIR/vg-dispatch.log" | head -200 >&2 || true
	tail -n 20 "$DIR/fcgi.stderr" "$DIR/dispatch.stderr" >&2 || true
fi
"$ONCEGATE_CTL" -c "$DIR/oncegate.conf" sends stop --reason "soak over" >/dev/null 2>&1 || true
exit "$rc"

#!/usr/bin/env bash
# multihost.sh — past one machine: two responder hosts and two dispatcher
# hosts against one PostgreSQL, nginx balancing over both responders, while
# hosts lose their network link mid-run and get it back. Afterwards:
#   * every key has exactly one run row; no (key, attempt) was claimed
#     twice; concurrent and late duplicates got the prior state; a
#     conflicting replay got 422;
#   * every approval was consumed at most once, every approved run has
#     exactly one effect in the outbox, and no other run has one;
#   * no effect reached its provider twice (the HTTP provider's record of
#     requests, each matched to its effect by its Idempotency-Key, which
#     must be the stored provider key of exactly one effect; the SMTP sink's
#     record of mails, told apart by the first recipient, which names tenant
#     and key); each is `completed` (received exactly once) or `unknown`
#     with a dead letter (received at most once): none lost;
#   * two tenants (API clients) drive the same business keys (long,
#     multilingual, from tests/data/corpus), each its own effect: every
#     HTTP delivery carried its own effect's approved payload (a contact
#     that names tenant and key, the tag from the output), no two effects
#     share a provider key, and every mail arrived with the approved
#     recipients, subject and body (MIME-decoded, byte for byte; long mails
#     in every script at the contracts' maxima, to one address under
#     support_reply or to a list under the test contract support_list,
#     which the stack must load from tests/data/contracts-test);
#   * every HTTP answer was in the expected set (201/200/202/303, 422 for a
#     conflicting replay, 409 for a lease lost, 410 for an approval retried after
#     its answer was lost, 502/503/504 and client timeouts while a link was
#     down) — never a 500.
#
#   tests/chaos/multihost.sh [--short] [--runs N] [--rate R] [--cut SECONDS]
#                            [--dispatcher-cut SECONDS] [--tenants 1|2]
#                            [--mails long|short]
#       default (./dev chaos): 1200 runs at 8/s, cuts of 8 s, d1's of 40 s
#       --short (./dev test):   200 runs at 8/s, cuts of 7 s (d1's too)
#   (options after --short override it; N counts business keys, each
#   driven by every tenant: default 2 tenants, long mails)
#
# Topology (made here, removed on exit; refuses to start if any of it
# exists): four network namespaces ogmh-r1, ogmh-r2 (responder hosts) and
# ogmh-d1, ogmh-d2 (dispatcher hosts), each with its own lo and one veth
# (ogmh-X in the root namespace, ogmh-Xn inside) on a bridge ogmh0,
# 10.77.0.0/24: the bridge (the root namespace: PostgreSQL, nginx, the
# provider) is 10.77.0.1, r1/r2 .11/.12, d1/d2 .21/.22. Only the subnet's
# own route exists in the namespaces, so every packet of a namespaced host
# — its FastCGI connections from nginx, its PostgreSQL connections, a
# dispatcher's sends to the provider — goes through its one link.
#
# PostgreSQL: the stack's cluster, reached over TCP at 10.77.0.1. Its start
# command (ONCEGATE_TEST_PG_START) pins listen_addresses=127.0.0.1 on the
# command line, which no configuration file overrides, so the cluster is
# restarted once with the same command and listen_addresses
# 127.0.0.1,10.77.0.1, after appending to its pg_hba.conf one line that
# lets the test's database user in from 10.77.0.0/24 only (that subnet
# exists only on this bridge) with its password (scram-sha-256, from
# PGPASSFILE, which the namespaced programs inherit). On exit the file is
# put back and the cluster restarted with the original command.
#
# Responders: oncegate-fcgi (ONCEGATE_FCGI, else $ONCEGATE_BUILD/
# oncegate-fcgi) in each responder namespace, `listen = 10.77.0.1X:9000`,
# `listen_allow = 10.77.0.1` (nginx's address on the bridge), database at
# 10.77.0.1; everything else (contracts, templates, csrf_secret,
# public_url, leases) copied from $ONCEGATE_CONF. nginx: a private instance
# on a free 127.0.0.1 port, its config rendered from
# nginx/oncegate-local.conf.in with the unix socket replaced by an upstream
# of both responders (round robin, max_fails=1 fail_timeout=3s), and
# fastcgi_connect_timeout 1s / fastcgi_next_upstream error timeout, so a new
# connection to a cut responder fails over; a request already sent is never
# retried by nginx (POST is not idempotent): it completes when the link
# returns, or the client retries with the same key.
# Dispatchers: oncegate-dispatch in each dispatcher namespace
# (AI_ACTIONS_ENABLED=true, sends allowed, dispatch_lease_seconds 5, the
# stack's contracts_dir: each payload is checked again before the send),
# target demo_http = tests/providers/http_provider.py on 10.77.0.1, on its
# /plain/ path: it ignores idempotency keys, so a resend would be a visible
# duplicate; target demo_smtp = tests/providers/smtp_sink.py on 10.77.0.1.
#
# Load (tests/chaos/multihost_load.py, from the root namespace through the
# private nginx, for the whole run): RUNS business keys started RATE per
# second, each driven by both tenants (the stack's client dev and one made
# here): a claim sent twice at once, the model output that needs a person
# (a long mail for group support, under support_reply or support_list, or
# a crm_tag with a long reason for group sales), the approval page and its CSRF-protected
# approve POST, then a late duplicate claim (and a conflicting one for every
# tenth key). 502/503/504 and timeouts are retried with the same key,
# lease, token and CSRF value (bounded). The approved effects are drained by
# both dispatchers.
#
# The cuts (the root-namespace end of the host's veth set down, like a
# pulled cable, then up): the responder host r1 at 20% of the load for
# --cut seconds, with claims waiting inside PostgreSQL on r1 at that moment
# (row locks held by the test); the dispatcher host d1 at 45% for
# --dispatcher-cut seconds, just after 40 approved effects were put in the
# outbox, so it holds some claimed or mid-send; the other two hosts, r2 and
# d2, together at 70% for --cut seconds. A cut shorter than a dispatcher's
# sending lease (at least 10 s beyond two target timeouts: 16 s here) ends
# with the dispatcher still owning its claims, and it carries on; a longer
# one (the full form's 40 s) lets the leases run out: the other
# dispatcher's sweep makes those effects `unknown` with a dead letter, and
# the cut one, back, finds them no longer its own and never sends them.
#
# Runs against the test stack that `./dev test` (or `./dev chaos`) starts:
# ONCEGATE_CONF, ONCEGATE_API_KEY, ONCEGATE_CTL, ONCEGATE_DISPATCH,
# ONCEGATE_PROVIDERS, ONCEGATE_PYTHON, ONCEGATE_TEST_PG_START/STOP, the PG*
# variables and ONCEGATE_FCGI or ONCEGATE_BUILD. Needs root (ip netns).
# Everything it starts is stopped by PID on exit. Prints one table; exit
# status 0 when nothing was doubled or lost and every answer was expected.
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"

RUNS=1200 RATE=8 CUT=8 DCUT=40 WORKERS=24 TENANTS=2 MAILS=long
while [[ $# -gt 0 ]]; do
	case $1 in
	--short) RUNS=200 RATE=8 CUT=7 DCUT=''; shift ;;
	--runs) RUNS=${2:?}; shift 2 ;;
	--rate) RATE=${2:?}; shift 2 ;;
	--cut) CUT=${2:?}; shift 2 ;;
	--dispatcher-cut) DCUT=${2:?}; shift 2 ;;
	--tenants) TENANTS=${2:?}; shift 2 ;;
	--mails) MAILS=${2:?}; shift 2 ;;
	*) echo "usage: $0 [--short] [--runs N] [--rate R] [--cut SECONDS] [--dispatcher-cut SECONDS] [--tenants 1|2] [--mails long|short]" >&2; exit 2 ;;
	esac
done
DCUT=${DCUT:-$CUT}
[[ $TENANTS == 1 || $TENANTS == 2 ]] || { echo "multihost.sh: --tenants is 1 or 2" >&2; exit 2; }
[[ $MAILS == long || $MAILS == short ]] || { echo "multihost.sh: --mails is long or short" >&2; exit 2; }
for v in RUNS RATE CUT DCUT; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "multihost.sh: --${v,,} must be a positive integer" >&2; exit 2; }
done
need_env "./dev test or ./dev chaos" ONCEGATE_CONF ONCEGATE_API_KEY ONCEGATE_CTL ONCEGATE_DISPATCH ONCEGATE_PROVIDERS ONCEGATE_PYTHON \
	ONCEGATE_TEST_PG_START ONCEGATE_TEST_PG_STOP PGHOST PGPORT PGDATABASE PGUSER PGPASSFILE
FCGI=${ONCEGATE_FCGI:-${ONCEGATE_BUILD:+$ONCEGATE_BUILD/oncegate-fcgi}}
[[ -x ${FCGI:-} ]] || { echo "multihost.sh: set ONCEGATE_FCGI (or ONCEGATE_BUILD) to oncegate-fcgi" >&2; exit 2; }
[[ $EUID == 0 ]] || { echo "multihost.sh: needs root (network namespaces)" >&2; exit 2; }
command -v ip >/dev/null && command -v nginx >/dev/null ||
	{ echo "multihost.sh: needs ip (iproute2) and nginx" >&2; exit 2; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)

# --- names -----------------------------------------------------------------------------
NET=10.77.0 BRIDGE=ogmh0 BR_IP=10.77.0.1 FCGI_PORT=9000
HOSTS=(r1 r2 d1 d2)
declare -A IP=([r1]=$NET.11 [r2]=$NET.12 [d1]=$NET.21 [d2]=$NET.22)
ns() { echo "ogmh-$1"; }

for h in "${HOSTS[@]}"; do
	[[ -e /run/netns/$(ns "$h") ]] && die "network namespace $(ns "$h") exists (another run, or a leftover: ip netns del $(ns "$h"))"
	ip link show "ogmh-$h" >/dev/null 2>&1 && die "link ogmh-$h exists"
done
ip link show "$BRIDGE" >/dev/null 2>&1 && die "link $BRIDGE exists"
[[ -z $(ip -4 -o addr show to "$NET.0/24") ]] || die "an address in $NET.0/24 is in use here"
[[ -z $(ip -4 route show match "$BR_IP" | grep -v '^default') ]] || die "a route covers $NET.0/24 here"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-multihost.XXXXXX")
# nginx's workers (www-data) traverse TMP into TMP/nginx; the rest is private.
chmod 0711 "$TMP"
PRIV=$TMP/private
mkdir -m 0700 "$PRIV"
RUN=mh$(date +%s)-$$
declare -A PID=()
NGINX_PID='' LOAD_PID='' PG_CHANGED=no HBA='' NET_MADE=no KEEP=${ONCEGATE_MH_KEEP:-no}

stop_pid() { # NAME SIGNAL SECONDS
	stop_child "${PID[$1]:-}" "$3" '' "$2"
	PID[$1]=''
}

pg_restart() { # START-COMMAND
	bash -c "$ONCEGATE_TEST_PG_STOP" >/dev/null 2>&1 || true
	bash -c "$1" >/dev/null
}

cleanup() {
	local h
	set +e
	[[ -n $LOAD_PID ]] && kill -TERM "$LOAD_PID" 2>/dev/null
	# Only the nginx master we started (its command line names our directory).
	nginx_stop "$NGINX_PID" "$TMP/nginx"
	for h in d1 d2 r1 r2 provider smtp; do stop_pid "$h" TERM 5; done
	wait 2>/dev/null
	if [[ $PG_CHANGED == yes ]]; then
		cat "$PRIV/pg_hba.conf.orig" >"$HBA"
		pg_restart "$ONCEGATE_TEST_PG_START" || echo "multihost.sh: PostgreSQL did not start again" >&2
	fi
	if [[ $NET_MADE == yes ]]; then
		for h in "${HOSTS[@]}"; do ip netns del "$(ns "$h")" 2>/dev/null; done
		ip link del "$BRIDGE" 2>/dev/null
	fi
	"$ONCEGATE_CTL" sends stop --reason "chaos run over" >/dev/null 2>&1
	if [[ $KEEP == yes ]]; then echo "multihost.sh: kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the network ---------------------------------------------------------------------------
say "network: bridge $BRIDGE $BR_IP/24, namespaces $(for h in "${HOSTS[@]}"; do printf '%s=%s ' "$(ns "$h")" "${IP[$h]}"; done)"
NET_MADE=yes
ip link add "$BRIDGE" type bridge forward_delay 0 stp_state 0
ip addr add "$BR_IP/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
for h in "${HOSTS[@]}"; do
	n=$(ns "$h")
	ip netns add "$n"
	ip link add "ogmh-$h" type veth peer name "ogmh-${h}n" netns "$n"
	ip link set "ogmh-$h" master "$BRIDGE" up
	ip -n "$n" addr add "${IP[$h]}/24" dev "ogmh-${h}n"
	ip -n "$n" link set lo up
	ip -n "$n" link set "ogmh-${h}n" up
done

# --- PostgreSQL on the bridge ------------------------------------------------------------------
HBA=$(psql -X -At -U postgres -c 'SHOW hba_file') || die "cannot ask PostgreSQL for its hba_file (as postgres)"
[[ -f $HBA ]] || die "no pg_hba.conf at $HBA"
START_BRIDGE=${ONCEGATE_TEST_PG_START/listen_addresses=127.0.0.1/listen_addresses=127.0.0.1,$BR_IP}
[[ $START_BRIDGE != "$ONCEGATE_TEST_PG_START" ]] ||
	die "ONCEGATE_TEST_PG_START does not set listen_addresses=127.0.0.1: cannot add the bridge address"
cp "$HBA" "$PRIV/pg_hba.conf.orig"
say "PostgreSQL: restarted listening on 127.0.0.1,$BR_IP; pg_hba lets $PGUSER in from $NET.0/24 with its password"
PG_CHANGED=yes
printf '# tests/chaos/multihost.sh %s (removed on exit)\nhost %s %s %s.0/24 scram-sha-256\n' \
	"$RUN" "$PGDATABASE" "$PGUSER" "$NET" >>"$HBA"
pg_restart "$START_BRIDGE" || die "PostgreSQL did not start with listen_addresses=127.0.0.1,$BR_IP"
DB="host=$BR_IP port=$PGPORT dbname=$PGDATABASE user=$PGUSER"
ip netns exec "$(ns d1)" psql -X -At "$DB" -c 'SELECT 1' >/dev/null ||
	die "a namespaced host cannot reach PostgreSQL at $BR_IP:$PGPORT"

# --- the provider -------------------------------------------------------------------------------
provider_start 'PID[provider]' PROVIDER_PORT "$TMP/provider.out" http_provider.py --host "$BR_IP"
provider_start 'PID[smtp]' SMTP_PORT "$TMP/smtp.out" smtp_sink.py --host "$BR_IP" --record "$TMP/smtp.jsonl"
: >>"$TMP/smtp.jsonl"

# --- the responders -------------------------------------------------------------------------------
# The stack's settings before its first [target] section, without those
# named here; then ours; then the targets (the responder checks that an
# effect's target exists).
for h in r1 r2; do
	awk -v listen="${IP[$h]}:$FCGI_PORT" -v allow="$BR_IP" -v db="$DB" -v logf="$TMP/$h.decisions.log" '
		!done && /^\[/ {
			printf "# tests/chaos/multihost.sh: host %s\nlisten = %s\nlisten_allow = %s\n", host, listen, allow
			printf "database = \"%s\"\nlog_file = %s\n\n", db, logf
			done = 1
		}
		!done && /^[[:space:]]*(listen|listen_mode|listen_owner|listen_group|listen_allow|database|log_file)[[:space:]]*=/ { next }
		{ print }' host="$h" "$ONCEGATE_CONF" >"$PRIV/$h.conf"
	grep -q "^listen = " "$PRIV/$h.conf" || die "$ONCEGATE_CONF has no [target] section to place the overrides before"
	out=$("$FCGI" -n -c "$PRIV/$h.conf" 2>&1) || die "oncegate-fcgi rejects $PRIV/$h.conf: $out"
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ip netns exec "$(ns "$h")" "$FCGI" -c "$PRIV/$h.conf" </dev/null >"$TMP/$h.stderr" 2>&1 &
	PID[$h]=$!
done
for h in r1 r2; do
	for ((i = 0; i < 100; i++)); do
		[[ -n $(ip netns exec "$(ns "$h")" ss -Hltn "sport = :$FCGI_PORT") ]] && break
		kill -0 "${PID[$h]}" 2>/dev/null || break
		sleep 0.1
	done
	[[ -n $(ip netns exec "$(ns "$h")" ss -Hltn "sport = :$FCGI_PORT") ]] ||
		{ tail -n 20 "$TMP/$h.stderr" >&2; die "oncegate-fcgi on $h did not listen on ${IP[$h]}:$FCGI_PORT"; }
done
# listen_allow: a peer other than nginx's address is closed on accept (EOF
# at once); nginx's address is kept waiting for a FastCGI request.
refused=$(ip netns exec "$(ns d1)" bash -c "exec 3<>/dev/tcp/${IP[r1]}/$FCGI_PORT && { read -r -t 3 -u 3 _; echo \$?; }" 2>/dev/null || echo connect-failed)
kept=$(bash -c "exec 3<>/dev/tcp/${IP[r1]}/$FCGI_PORT && { read -r -t 1 -u 3 _; echo \$?; }" 2>/dev/null || echo connect-failed)
[[ $refused == 1 && $kept -gt 128 ]] ||
	die "listen_allow: a connection from ${IP[d1]} read '$refused' (want EOF, 1), from $BR_IP '$kept' (want a timeout, >128)"

# --- nginx ----------------------------------------------------------------------------------------------
HTTP_PORT=$(free_port $((18500 + RANDOM % 1000)) 19600) || die "no free loopback port for nginx"
UPSTREAM="server ${IP[r1]}:$FCGI_PORT max_fails=1 fail_timeout=3s; server ${IP[r2]}:$FCGI_PORT max_fails=1 fail_timeout=3s;"
nginx_site "$TMP" - "$HTTP_PORT" "$(dirname "$ONCEGATE_CONF")/proxy_secret.nginx" \
	"s|server unix:@FCGI_SOCKET@;|$UPSTREAM|" \
	's|^\( *\)fastcgi_keep_conn off;|&\n\1# multihost.sh: a cut responder is skipped for new connections\n\1fastcgi_connect_timeout 1s;\n\1fastcgi_next_upstream error timeout;\n\1fastcgi_next_upstream_tries 2;|' \
	"s|^\( *\)access_log .*;|&\n\1log_format multihost '\$upstream_addr \$upstream_status \$status \$request_time';\n\1access_log $TMP/nginx/upstream.log multihost;|" ||
	die "cannot render nginx/oncegate-local.conf.in"
grep -q "server ${IP[r1]}" "$TMP/nginx/nginx.conf" && grep -q fastcgi_next_upstream "$TMP/nginx/nginx.conf" &&
	grep -q upstream.log "$TMP/nginx/nginx.conf" || die "nginx/oncegate-local.conf.in changed shape: cannot render it"
NGINX_PID=$(nginx_start "$TMP/nginx") || die "nginx rejects its config or did not start"
BASE=http://127.0.0.1:$HTTP_PORT
for ((i = 0; i < 4; i++)); do # round robin: both responders answer
	curl -fsS -o /dev/null --max-time 5 "$BASE/healthz" || die "nginx at $BASE is not healthy"
done

# --- the dispatchers ---------------------------------------------------------------------------------------
# The dispatchers re-check each payload against its run's contract before
# sending: they load the stack's contracts.
CONTRACTS_DIR=$(conf_value contracts_dir)
[[ -n $CONTRACTS_DIR ]] || die "$ONCEGATE_CONF names no contracts_dir"
for h in d1 d2; do
	{
		echo "# tests/chaos/multihost.sh: host $h"
		conf_lines database="\"$DB\"" log_file="$TMP/$h.decisions.log" contracts_dir="$CONTRACTS_DIR" \
			dispatch_workers=2 dispatch_batch=4 dispatch_lease_seconds=5 dispatch_poll_ms=200 \
			dispatch_shutdown_seconds=3
		# sends take a while, so a cut finds some in flight
		target_conf demo_http http "http://$BR_IP:$PROVIDER_PORT/plain/effects" idempotency_key=0 \
			"${PATIENT_RETRIES[@]}" timeout_ms=2000 rate_per_second=20
		target_conf demo_smtp smtp "smtp://$BR_IP:$SMTP_PORT" mail_from=oncegate@multihost.example \
			"${PATIENT_RETRIES[@]}"
	} >"$PRIV/$h.conf"
	out=$("$ONCEGATE_DISPATCH" -c "$PRIV/$h.conf" -n 2>&1) || die "oncegate-dispatch rejects $PRIV/$h.conf: $out"
done
# Nothing else may be sent by these dispatchers: earlier work is cancelled.
outbox_quiet "chaos: hosts cut off the network"
for h in d1 d2; do
	AI_ACTIONS_ENABLED=true ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
		ip netns exec "$(ns "$h")" "$ONCEGATE_DISPATCH" -c "$PRIV/$h.conf" </dev/null >"$TMP/$h.stderr" 2>&1 &
	PID[$h]=$!
done
sleep 0.5
for h in d1 d2; do
	kill -0 "${PID[$h]}" 2>/dev/null || { tail -n 20 "$TMP/$h.stderr" >&2; die "oncegate-dispatch on $h did not start"; }
done

# --- the load and the cuts -----------------------------------------------------------------------------------
PUBLIC_URL=$(sed -nE 's/^[[:space:]]*public_url[[:space:]]*=[[:space:]]*"?([^"]*)"?[[:space:]]*$/\1/p' "$ONCEGATE_CONF" | head -n1)
(umask 077 && printf '%s\n' "$ONCEGATE_API_KEY" >"$PRIV/api_key")
# The second tenant: an API client of its own, driving the same keys.
LOAD_TENANTS=()
if [[ $TENANTS == 2 ]]; then
	CLIENT_B=mh-b-$RUN
	key_b=$("$ONCEGATE_CTL" client add "$CLIENT_B" --reason "multihost.sh: a second tenant with the same business keys") ||
		die "oncegatectl client add $CLIENT_B failed"
	(umask 077 && printf '%s\n' "$key_b" >"$PRIV/api_key_b")
	unset key_b
	LOAD_TENANTS=(--client-b "$CLIENT_B")
fi
LOAD_S=$(((RUNS + RATE - 1) / RATE))
say "load: $RUNS workflows at $RATE/s (~${LOAD_S}s) through nginx $BASE over r1, r2; cuts of ${CUT}s (d1: ${DCUT}s)"
start=$SECONDS
"$ONCEGATE_PYTHON" "$HERE/multihost_load.py" load --base "$BASE" --run "$RUN" --runs "$RUNS" \
	--rate "$RATE" --workers "$WORKERS" --public-url "$PUBLIC_URL" --out "$PRIV" \
	--client dev "${LOAD_TENANTS[@]}" --mails "$MAILS" 2>"$TMP/load.stderr" &
LOAD_PID=$!
t0=$EPOCHREALTIME

# cut AT-PERCENT HOST...: the root end of each host's veth down for CUT
# seconds, then up; records how long they really were down. Before it, a
# hook puts work in flight on the hosts about to be cut (below).
CUTS=()
cut_link() {
	local at=$1 secs=$2 h down up
	shift 2
	sleep "$(awk -v t0="$t0" -v now="$EPOCHREALTIME" -v d="$LOAD_S" -v p="$at" \
		'BEGIN { s = t0 + d * p / 100 - now; printf "%.2f", (s > 0 ? s : 0) }')"
	case $* in
	r1) hold_probes ;;
	d1) burst ;;
	esac
	down=$EPOCHREALTIME
	for h in "$@"; do ip link set "ogmh-$h" down; done
	say "cut: $* off the network at $(awk -v a="$down" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')s"
	sleep "$secs"
	for h in "$@"; do ip link set "ogmh-$h" up; done
	up=$EPOCHREALTIME
	CUTS+=("$(printf '%s at %.1fs for %.1fs' "$*" "$(awk -v a="$down" -v b="$t0" 'BEGIN { print a - b }')" \
		"$(awk -v a="$up" -v b="$down" 'BEGIN { print a - b }')")")
	say "cut over: $* back"
}

# Requests in the middle of their database work when r1 is cut: PROBES
# keys whose lease ran out are claimed again through nginx (round robin:
# some land on r1) while the test holds their rows locked, so each claim
# waits inside PostgreSQL; r1 is cut, then the locks go and the claims
# commit: r2's answers leave at once, r1's sit behind the cut link.
PROBES=4 PROBE_PIDS=() LOCK_PID=''
hold_probes() {
	local p
	psql -X -q -v ON_ERROR_STOP=1 -c 'BEGIN' \
		-c "SELECT 1 FROM workflow_runs WHERE idempotency_key LIKE '${RUN}p:%' FOR UPDATE" \
		-c 'SELECT pg_sleep(1.5)' -c 'COMMIT' >/dev/null 2>"$TMP/lock.err" &
	LOCK_PID=$!
	sleep 0.3
	for ((p = 1; p <= PROBES; p++)); do
		probe "${RUN}p:$p" "$TMP/probe.$p" &
		PROBE_PIDS+=($!)
	done
	sleep 0.5
}
probe() { # KEY OUTFILE: one claim, no retry; "STATUS SECONDS ATTEMPT"
	local out
	out=$(curl -sS -w '\n%{http_code} %{time_total}' --max-time 120 -H @"$PRIV/auth" \
		-H 'Content-Type: application/json' -X POST "$BASE/v1/runs" \
		-d "{\"key\":\"$1\",\"payload\":{\"probe\":true},\"lease_seconds\":1}" 2>/dev/null) || out=$'\n000 0'
	printf '%s %s\n' "${out##*$'\n'}" "$(sed -nE 's/.*"attempt":([0-9]+).*/\1/p' <<<"${out%$'\n'*}")" >"$2"
}
(umask 077 && printf 'Authorization: Bearer %s\n' "$ONCEGATE_API_KEY" >"$PRIV/auth")
for ((p = 1; p <= PROBES; p++)); do
	probe "${RUN}p:$p" "$TMP/probe.$p"
	[[ $(cut -d' ' -f1 "$TMP/probe.$p") == 201 ]] || die "probe claim ${RUN}p:$p: $(cat "$TMP/probe.$p")"
done

# Sends in flight when d1 is cut: BURST approved effects put straight into
# the outbox (as kill9.sh does) just before; the dispatchers' rate limit
# keeps some of them claimed or mid-send on d1 at the cut.
BURST=40
burst() {
	approved_effects "${RUN}b:" "$BURST" demo_http burst
	sleep 0.4
}

cut_link 20 "$CUT" r1
cut_link 45 "$DCUT" d1
cut_link 70 "$CUT" r2 d2
wait "$LOAD_PID" || die "the load client failed: $(tail -n 5 "$TMP/load.stderr")"
LOAD_PID=''
for p in "${PROBE_PIDS[@]}" "$LOCK_PID"; do wait "$p" || true; done
say "$(tail -n1 "$TMP/load.stderr"); settling: the outbox drains, the leases of cut dispatchers run out"
for ((i = 0; i < 600; i++)); do
	left=$(q "SELECT count(*) FROM effect_outbox WHERE idempotency_key LIKE '$RUN%' AND state IN ('pending', 'sending')")
	[[ $left == 0 ]] && break
	sleep 0.2
done
ELAPSED=$((SECONDS - start))
for h in d1 d2 r1 r2; do stop_pid "$h" TERM 40; done

# --- what happened ---------------------------------------------------------------------------------------------
curl -fsS "http://$BR_IP:$PROVIDER_PORT/_requests" >"$TMP/requests.json"
tenant_dumps "$RUN" "$TMP"
rc=0
"$ONCEGATE_PYTHON" "$HERE/multihost_load.py" check --run "$RUN" --runs "$RUNS" --out "$PRIV" \
	--requests "$TMP/requests.json" --smtp "$TMP/smtp.jsonl" --runs-tsv "$TMP/runs.tsv" --approvals-tsv "$TMP/approvals.tsv" \
	--effects-tsv "$TMP/effects.tsv" >"$TMP/check.out" 2>"$TMP/check.err" || rc=1
declare -A R=()
while IFS='=' read -r k v; do R[$k]=$v; done <"$TMP/check.out"

# Per host: requests nginx passed to each responder (the last upstream tried
# answered), failovers (a connect that failed before another answered), and
# the decision-log lines each wrote; effects each dispatcher sent and settled.
declare -A SERVED=() LINES=() SENT=() DONE=()
for h in r1 r2; do
	SERVED[$h]=$(awk -v a="${IP[$h]}:$FCGI_PORT" '{ n = split($0, s, ", "); sub(/ .*/, "", s[n]) } s[n] == a { c++ } END { print c + 0 }' \
		"$TMP/nginx/upstream.log")
	LINES[$h]=$(wc -l <"$TMP/$h.decisions.log" 2>/dev/null || echo 0)
done
FAILOVERS=$(grep -c ', ' "$TMP/nginx/upstream.log" || true)
for h in d1 d2; do
	SENT[$h]=$(grep -c '"event":"effect.sent"' "$TMP/$h.decisions.log" 2>/dev/null || true)
	DONE[$h]=$(grep -c '"event":"effect.completed"' "$TMP/$h.decisions.log" 2>/dev/null || true)
done
# The probes: each claimed again exactly once (201, attempt 2), answered
# when its responder's link let the answer through.
probe_bad=0 probe_times=''
for ((p = 1; p <= PROBES; p++)); do
	read -r st secs att <"$TMP/probe.$p" || true
	probe_times+="${probe_times:+, }${st:-?} after $(printf '%.1f' "${secs:-0}")s"
	[[ ${st:-} == 201 && ${att:-} == 2 ]] || probe_bad=$((probe_bad + 1))
done
probe_rows=$(q "SELECT count(*) FROM workflow_runs WHERE idempotency_key LIKE '${RUN}p:%' AND attempt = 2 AND state = 'processing'")
[[ $probe_rows == "$PROBES" ]] || probe_bad=$((probe_bad + PROBES - probe_rows))
((probe_bad == 0)) || rc=1
sanitizer=$(cat "$TMP"/{r1,r2,d1,d2}.stderr | grep -cE 'ERROR: AddressSanitizer|runtime error:|LeakSanitizer' || true)

printf '\ntwo responder and two dispatcher hosts, links cut and restored (%s)\n' "$RUN"
printf '  %d workflows at %d/s, %d s in all; cuts: %s\n' "$RUNS" "$RATE" "$ELAPSED" "$(IFS=';'; echo "${CUTS[*]}" | sed 's/;/; /g')"
printf '  claims held in PostgreSQL at r1 cut    %d   (%s; wrong: %d, must be 0)\n' "$PROBES" "$probe_times" "$probe_bad"
printf '  effects put in the outbox before d1 cut %d  (checked with the rest below)\n' "$BURST"
printf '  requests through nginx                 %s   (%s)\n' "${R[requests]:-?}" "${R[statuses]:-}"
printf '  answers outside the expected set       %s   (must be 0%s)\n' "${R[unexpected]:-?}" \
	"${R[unexpected_detail]:+: ${R[unexpected_detail]}}"
printf '  retried answers (502/503/504/timeout)  %s   (slowest answer %s ms)\n' "${R[retried_answers]:-?}" "${R[slowest_ms]:-?}"
printf '  keys claimed (201)                     %s   (of which reclaims after a lost answer: %s)\n' \
	"${R[claims_201]:-?}" "${R[reclaims]:-?}"
printf '  (key, attempt) claimed twice           %s   (must be 0)\n' "${R[claims_doubled]:-?}"
printf '  duplicates answered with the run       %s   (late ones still processing: %s, must be 0)\n' \
	"${R[duplicates_answered]:-?}" "${R[late_duplicates_processing]:-?}"
printf '  conflicting replays answered 422       %s\n' "${R[conflicts_422]:-?}"
printf '  run rows for %s keys                  %s   (keys without one: %s, with more: %s)\n' "${R[keys]:-?}" \
	"${R[run_rows]:-?}" "${R[keys_without_row]:-?}" "${R[keys_with_rows_gt1]:-?}"
printf '  workflows                              %s\n' "${R[flow_ends]:-?}"
printf '  approvals decided                      %s   (consumed twice: %s, must be 0)\n' \
	"${R[approvals_decided]:-?}" "${R[approvals_consumed_twice]:-?}"
printf '  runs awaiting a person, link lost      %s   (the output answer was lost after it committed)\n' \
	"${R[stranded_awaiting_human]:-?}"
printf '  effects enqueued by approvals          %s   (runs without exactly one per decision: %s; with the burst: %s)\n' \
	"${R[effects]:-?}" "${R[effects_not_once]:-?}" "${R[effects_all]:-?}"
printf '  tenants (API clients), mails           %s, %s\n' "${R[tenants]:-?}" "$MAILS"
printf '  received: HTTP requests, mails         %s, %s\n' "${R[provider_requests]:-?}" "${R[mails_received]:-?}"
printf '  mails not as approved                  %s   (recipients, subject or body differ; must be 0)\n' \
	"${R[mails_not_as_approved]:-?}"
printf '  HTTP requests not as approved          %s   (body not its effect'"'"'s approved payload; must be 0)\n' \
	"${R[http_not_as_approved]:-?}"
printf '  provider keys shared by two effects    %s   (must be 0; sent with another effect'"'"'s key: %s)\n' \
	"${R[provider_keys_shared]:-?}" "${R[sent_with_other_provider_key]:-?}"
printf '  effects received more than once        %s   (must be 0)\n' "${R[effects_received_twice]:-?}"
printf '  completed                              %s   (received other than once: %s)\n' \
	"${R[completed]:-?}" "${R[completed_not_once]:-?}"
printf '  unknown, with a dead letter            %s   (without one: %s; of which reached the provider: %s)\n' \
	"${R[unknown]:-?}" "${R[unknown_without_letter]:-?}" "${R[unknown_received]:-?}"
printf '  lost (neither completed nor unknown)   %s   (must be 0)\n' "${R[lost]:-?}"
printf '  per responder: served by nginx         r1 %s, r2 %s (failovers to the other: %s); decision lines r1 %s, r2 %s\n' \
	"${SERVED[r1]}" "${SERVED[r2]}" "$FAILOVERS" "${LINES[r1]}" "${LINES[r2]}"
printf '  per dispatcher: sends (completed)      d1 %s (%s), d2 %s (%s)\n' \
	"${SENT[d1]}" "${DONE[d1]}" "${SENT[d2]}" "${DONE[d2]}"
printf '  sanitizer findings                     %s\n' "$sanitizer"
[[ -s $TMP/check.err ]] && sed 's/^/  /' "$TMP/check.err"
[[ $sanitizer == 0 ]] || { grep -hE -A 20 'ERROR: AddressSanitizer|runtime error:|LeakSanitizer' "$TMP"/{r1,r2,d1,d2}.stderr | head -n 60 >&2; rc=1; }
((SENT[d1] > 0 && SENT[d2] > 0 && SERVED[r1] > 0 && SERVED[r2] > 0)) || { echo "  a host did no work" >&2; rc=1; }
# The fault happened: three cuts, and the load felt the responders' (a
# connect that failed over, or an answer that had to be retried).
felt=$((FAILOVERS + ${R[retried_answers]:-0}))
printf '  cuts made, felt by the load            %d, %d   (must be 3, > 0)\n' "${#CUTS[@]}" "$felt"
((${#CUTS[@]} == 3 && felt > 0)) || { echo "  the cuts did not reach the load" >&2; rc=1; }
exit "$rc"

#!/usr/bin/env bash
# failover.sh — PostgreSQL failover as sites run it: Patroni with etcd,
# two PostgreSQL 15 nodes with synchronous replication, and oncegate
# reaching the primary by libpq's multi-host conninfo with
# target_session_attrs=read-write. Under a mixed load (new claims, duplicate
# claims, model outputs, approval POSTs, dispatch) the primary's postmaster
# is killed with SIGKILL; Patroni promotes the synchronous standby; the old
# primary rejoins as a replica (pg_rewind when it has diverged); then the
# new primary is killed and it fails back. Afterwards:
#   * every claim answered 201 and every decision answered 303 is on the
#     primary at the end (acknowledged writes missing: 0);
#   * no effect reached its provider twice and none is lost (the checks of
#     tests/chaos/multihost_load.py);
#   * every answer was 2xx, 3xx or 503 (the load's deliberately conflicting
#     replays, answered 422, aside);
#   * each failover really happened: the postmaster that was killed is
#     gone and the primary's name changed;
#   * the dispatcher completed effects after each failover without a
#     restart, and the outbox drained.
# It prints, per failover, the seconds without a writable primary (a new
# read-write connection by the same conninfo failed) and the seconds until
# oncegate answered a claim 2xx again, each counted from the kill.
#
#   tests/chaos/failover.sh [--short] [--runs N] [--rate R] [--failovers N]
#       default (./dev chaos): 900 workflows at 5/s, 4 failovers
#       --short (./dev test):  240 workflows at 4/s, 2 failovers
# (the failovers spread over the load; each waits until the cluster is in
# sync again: the old primary streams as the new one's synchronous standby)
#
# Everything is its own, made here and stopped by PID on exit: etcd on two
# free loopback ports; two Patroni nodes (pg1, pg2; their PostgreSQL data
# directories owned by postgres under a private temporary directory, each
# listening on 127.0.0.1 only, the REST API too); the oncegate database,
# its schema owner and the programs' login roles as ./dev makes them, each
# with a password (scram-sha-256 over TCP, from a pgpass file); the schema
# migrated by oncegatectl through the same conninfo; oncegate-fcgi behind a
# private nginx; oncegate-dispatch (sending: AI_ACTIONS_ENABLED=true, the
# sends allowed) to the HTTP provider stand-in on its /plain/ path (it
# ignores idempotency keys, so a resend would be a visible duplicate) and
# the SMTP sink (tests/providers). Patroni and etcd come from Debian
# (patroni, etcd-server): installed when missing.
#
# Binaries: ONCEGATE_FCGI, ONCEGATE_DISPATCH, ONCEGATE_CTL, else those of
# ONCEGATE_BUILD, else of the checkout's .dev/build (./dev up). Runs by hand
# as root from a checkout where ./dev up has built (ONCEGATE_PYTHON defaults
# to Debian's python3, which has Patroni's psycopg2); ./dev test runs
# --short, ./dev chaos the default. ONCEGATE_FAILOVER_KEEP=yes keeps the
# temporary directory (logs of every process) for a look afterwards.
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"

RUNS=900 RATE=5 FAILOVERS=4
while [[ $# -gt 0 ]]; do
	case $1 in
	--short) RUNS=240 RATE=4 FAILOVERS=2; shift ;;
	--runs) RUNS=${2:?}; shift 2 ;;
	--rate) RATE=${2:?}; shift 2 ;;
	--failovers) FAILOVERS=${2:?}; shift 2 ;;
	*) echo "usage: $0 [--short] [--runs N] [--rate R] [--failovers N]" >&2; exit 2 ;;
	esac
done
for v in RUNS RATE FAILOVERS; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "failover.sh: --${v,,} must be a positive integer" >&2; exit 2; }
done
[[ $EUID == 0 ]] || { echo "failover.sh: needs root (PostgreSQL and Patroni run as postgres)" >&2; exit 2; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
BUILD_DIR=${ONCEGATE_BUILD:-$ROOT/.dev/build}
FCGI=${ONCEGATE_FCGI:-$BUILD_DIR/oncegate-fcgi}
DISPATCH=${ONCEGATE_DISPATCH:-$BUILD_DIR/oncegate-dispatch}
CTL=${ONCEGATE_CTL:-$BUILD_DIR/oncegatectl}
PYTHON=${ONCEGATE_PYTHON:-/usr/bin/python3}
PGBIN=/usr/lib/postgresql/15/bin
for b in "$FCGI" "$DISPATCH" "$CTL"; do
	[[ -x $b ]] || { echo "failover.sh: no $b (./dev up builds it; or set ONCEGATE_BUILD)" >&2; exit 2; }
done
[[ -x $PGBIN/postgres ]] && command -v nginx >/dev/null ||
	{ echo "failover.sh: needs PostgreSQL 15 and nginx (./dev up installs them)" >&2; exit 2; }
command -v patroni >/dev/null && command -v etcd >/dev/null || as_root_install patroni etcd-server
"$PYTHON" -c 'import psycopg2' 2>/dev/null || as_root_install python3-psycopg2

# --- names, ports, the private directory ------------------------------------------------
RUN=fo$(date +%s)-$$
SCOPE=oncegate-failover-$$
TMP=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-failover.XXXXXX")
# postgres (Patroni, PostgreSQL) and www-data (nginx) traverse TMP; what
# holds passwords is private.
chmod 0711 "$TMP"
PRIV=$TMP/private
NODES=$TMP/nodes
mkdir -m 0700 "$PRIV"
install -d -o postgres -g postgres -m 0700 "$NODES" "$TMP/etcd"
install -d -o postgres -g postgres -m 0755 "$TMP/run"

NEXT_PORT=$((20000 + RANDOM % 20000))
# take_port VAR: a free loopback port, none handed out before, into VAR.
take_port() {
	local p
	p=$(free_port "$NEXT_PORT") || die "no free loopback port from $NEXT_PORT"
	NEXT_PORT=$((p + 1))
	printf -v "$1" '%s' "$p"
}
take_port ETCD_PORT
take_port ETCD_PEER_PORT
declare -A PG_PORT=() API_PORT=() PATRONI_PID=()
NAMES=(pg1 pg2)
for n in "${NAMES[@]}"; do
	take_port "PG_PORT[$n]"
	take_port "API_PORT[$n]"
done
take_port HTTP_PORT

ETCD_PID='' FCGI_PID='' DISPATCH_PID='' NGINX_PID='' PROVIDER_PID='' SINK_PID='' WATCH_PID='' LOAD_PID=''
KEEP=${ONCEGATE_FAILOVER_KEEP:-no}

# postmaster_of NODE: the PID of NODE's postmaster while it runs (its
# postmaster.pid, checked against the process's command line), or nothing.
postmaster_of() { pid_file "$NODES/$1/postmaster.pid" "$NODES/$1"; }
postmaster_gone() { ! running "$1"; }

cleanup() {
	local n pm l
	set +e
	[[ -n $LOAD_PID ]] && stop_child "$LOAD_PID" 5
	[[ -n $WATCH_PID ]] && stop_child "$WATCH_PID" 5
	stop_child "$DISPATCH_PID" 10 oncegate-dispatch
	nginx_stop "$NGINX_PID" "$TMP/nginx"
	stop_child "$FCGI_PID" 40 oncegate-fcgi
	stop_child "$PROVIDER_PID" 5
	stop_child "$SINK_PID" 5
	# Patroni stops its PostgreSQL on SIGTERM (the standby's first, so the
	# leader's going is no failover); a postmaster left behind (Patroni
	# killed first) is stopped by its own PID.
	l=''
	if declare -F leader >/dev/null; then l=$(leader); fi
	for n in $(other "${l:-pg2}") "${l:-pg2}"; do stop_child "${PATRONI_PID[$n]:-}" 40 "patroni $n"; done
	for n in "${NAMES[@]}"; do
		pm=$(postmaster_of "$n")
		[[ -z $pm ]] || stop_child "$pm" 20 "postgres $n" INT
	done
	stop_child "$ETCD_PID" 10 etcd
	if [[ $KEEP == yes ]]; then echo "failover.sh: kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# "${AS_PG[@]}" COMMAND...: COMMAND as the postgres user, from /; each
# step execs the next, so $! of a background one is the program's own PID.
AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups env -C / HOME="$NODES")

# secret: a random password (letters and digits).
secret() { head -c 24 /dev/urandom | base64 | tr -d '+/='; }

# --- etcd -----------------------------------------------------------------------------------
say "etcd on 127.0.0.1:$ETCD_PORT (peer $ETCD_PEER_PORT)"
"${AS_PG[@]}" etcd --name "$SCOPE" --data-dir "$TMP/etcd/data" \
	--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
	--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-cluster "$SCOPE=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-token "$RUN" \
	--initial-cluster-state new </dev/null >"$TMP/etcd.log" 2>&1 9>&- &
ETCD_PID=$!
etcd_healthy() { curl -fsS --max-time 1 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; }
wait_for 30 etcd etcd_healthy || { tail -n 20 "$TMP/etcd.log" >&2; die "etcd did not start"; }

# --- the Patroni cluster ------------------------------------------------------------------------
SU_PW=$(secret) REPL_PW=$(secret) REWIND_PW=$(secret)
# The passwords psql and the programs use (more are added below).
export PGPASSFILE=$PRIV/pgpass
(umask 077 && printf '127.0.0.1:*:*:postgres:%s\n' "$SU_PW" >"$PGPASSFILE")
# Patroni's timing (docs/ha.md explains the choice): a crashed primary is
# seen within loop_wait and, with primary_start_timeout 0, not restarted in
# place while a synchronous standby can take over.
TTL=10 LOOP_WAIT=1 RETRY_TIMEOUT=4
for n in "${NAMES[@]}"; do
	cat >"$NODES/$n.yml" <<-EOF
		# tests/chaos/failover.sh: node $n
		scope: $SCOPE
		namespace: /oncegate-failover/
		name: $n
		restapi:
		  listen: 127.0.0.1:${API_PORT[$n]}
		  connect_address: 127.0.0.1:${API_PORT[$n]}
		etcd3:
		  hosts: 127.0.0.1:$ETCD_PORT
		bootstrap:
		  dcs:
		    ttl: $TTL
		    loop_wait: $LOOP_WAIT
		    retry_timeout: $RETRY_TIMEOUT
		    maximum_lag_on_failover: 1048576
		    primary_start_timeout: 0
		    synchronous_mode: true
		    check_timeline: true
		    postgresql:
		      use_pg_rewind: true
		      use_slots: true
		      parameters:
		        wal_level: replica
		        wal_log_hints: 'on'
		        hot_standby: 'on'
		        max_wal_senders: 5
		        max_replication_slots: 5
		        wal_keep_size: 256MB
		        max_connections: 100
		  initdb:
		    - encoding: UTF8
		    - locale: C
		    - data-checksums
		    - no-sync
		postgresql:
		  listen: 127.0.0.1:${PG_PORT[$n]}
		  connect_address: 127.0.0.1:${PG_PORT[$n]}
		  data_dir: $NODES/$n
		  bin_dir: $PGBIN
		  pgpass: $NODES/$n.pgpass
		  authentication:
		    superuser:
		      username: postgres
		      password: '$SU_PW'
		    replication:
		      username: replicator
		      password: '$REPL_PW'
		    rewind:
		      username: rewinder
		      password: '$REWIND_PW'
		  parameters:
		    unix_socket_directories: '$TMP/run'
		    password_encryption: scram-sha-256
		  pg_hba:
		    - local all postgres peer
		    - host replication replicator 127.0.0.1/32 scram-sha-256
		    - host all all 127.0.0.1/32 scram-sha-256
	EOF
	chown postgres:postgres "$NODES/$n.yml"
	chmod 0600 "$NODES/$n.yml"
done

# patroni_start NODE: NODE's Patroni, as postgres, its log in TMP/NODE.log.
patroni_start() {
	"${AS_PG[@]}" patroni "$NODES/$1.yml" </dev/null >>"$TMP/$1.log" 2>&1 9>&- &
	PATRONI_PID[$1]=$!
}

# rest NODE PATH: the HTTP status of Patroni's REST API of NODE for PATH
# (000 when it does not answer within 5 s): /primary is 200 on the node
# that holds the leader lock, /sync on the running synchronous standby.
rest() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:${API_PORT[$1]}/$2" 2>/dev/null || true; }
# other NODE: the other node's name.
other() { if [[ $1 == pg1 ]]; then echo pg2; else echo pg1; fi; }
# leader: the node that holds the leader lock, or nothing.
leader() {
	local n
	for n in "${NAMES[@]}"; do
		[[ $(rest "$n" primary) == 200 ]] && { echo "$n"; return 0; }
	done
	return 0
}
leader_is() { [[ $(rest "$1" primary) == 200 ]]; }
# synced: a leader runs and the other node is its synchronous standby
# (Patroni names it so only once PostgreSQL reports it streaming as such).
synced() {
	local l
	l=$(leader)
	[[ -n $l && $(rest "$(other "$l")" sync) == 200 ]]
}

say "Patroni: pg1 (PostgreSQL 127.0.0.1:${PG_PORT[pg1]}, REST ${API_PORT[pg1]}) and pg2 (${PG_PORT[pg2]}, ${API_PORT[pg2]}): one bootstraps, the other clones it"
patroni_start pg1
patroni_start pg2
wait_for 180 "a leader and its synchronous standby" synced ||
	{ tail -n 30 "$TMP/pg1.log" "$TMP/pg2.log" >&2; die "Patroni did not bring up a leader with a synchronous standby"; }

# --- the oncegate database -------------------------------------------------------------------------
# The conninfo every program uses: both nodes, the writable one chosen.
HOSTS=127.0.0.1,127.0.0.1
PORTS=${PG_PORT[pg1]},${PG_PORT[pg2]}
DB="host=$HOSTS port=$PORTS dbname=oncegate target_session_attrs=read-write"
# The schema owner and each program's login role (a member of the group
# role the schema grants to), as ./dev makes them; a password each.
declare -A LOGINS=([oncegate-fcgi]=oncegate_fcgi [oncegate-dispatch]=oncegate_dispatch
	[oncegate-operator]=oncegate_operator [oncegate-auditor]=oncegate_auditor)
{
	echo "CREATE ROLE oncegate LOGIN PASSWORD :'pw_oncegate';"
	for login in "${!LOGINS[@]}"; do
		echo "CREATE ROLE ${LOGINS[$login]} NOLOGIN;"
		echo "CREATE ROLE \"$login\" LOGIN IN ROLE ${LOGINS[$login]} PASSWORD :'pw_${LOGINS[$login]}';"
	done
	echo "CREATE DATABASE oncegate OWNER oncegate;"
} >"$PRIV/roles.sql"
psql_args=()
for role in oncegate "${!LOGINS[@]}"; do
	pw=$(secret)
	printf '127.0.0.1:*:*:%s:%s\n' "$role" "$pw" >>"$PGPASSFILE"
	var=pw_${LOGINS[$role]:-oncegate}
	psql_args+=(-v "$var=$pw")
done
unset pw
PGHOST=$HOSTS PGPORT=$PORTS PGDATABASE=postgres PGUSER=postgres PGTARGETSESSIONATTRS=read-write \
	psql -X -q -v ON_ERROR_STOP=1 "${psql_args[@]}" -f "$PRIV/roles.sql" >/dev/null ||
	die "cannot create the oncegate roles and database on the primary"
# From here on psql (q, the dumps) reaches the primary as the schema owner.
export PGHOST=$HOSTS PGPORT=$PORTS PGDATABASE=oncegate PGUSER=oncegate PGTARGETSESSIONATTRS=read-write
unset PGSERVICE PGOPTIONS

# --- the providers ---------------------------------------------------------------------------------
provider_start PROVIDER_PID PROVIDER_PORT "$TMP/provider.out" http_provider.py
provider_start SINK_PID SMTP_PORT "$TMP/smtp.out" smtp_sink.py --record "$TMP/smtp.jsonl"
: >>"$TMP/smtp.jsonl"

# --- oncegate ----------------------------------------------------------------------------------------
# The shipped contracts and the test-only ones (the load mails lists under
# support_list), copied.
# The shipped and test contracts, but those whose approvers are told in
# Slack: this scenario's configuration has no slack target.
mkdir -p "$TMP/contracts"
for f in "$ROOT"/contracts/*.json "$ROOT"/tests/data/contracts-test/*.json; do
	grep -q '"demo_slack"' "$f" || cp "$f" "$TMP/contracts/"
done
CONF=$PRIV/oncegate.conf
# nginx proves itself to the responder with a proxy secret of this run's own
proxy_secret_make "$PRIV"
(umask 077 && {
	cat <<-EOF
		# tests/chaos/failover.sh
		listen = $TMP/fcgi.sock
		listen_mode = 0660
		listen_group = www-data
		threads = 8
		database = "$DB"
		lease_default_seconds = 30
		lease_max_seconds = 60
		lease_cap_seconds = 3600
		log_file = $TMP/decisions.log
		log_level = info
		sql_dir = $ROOT/sql
		retry_after_seconds = 1
		contracts_dir = $TMP/contracts
		templates_dir = $ROOT/templates
		public_url = http://127.0.0.1:$HTTP_PORT
		csrf_secret = $(head -c 36 /dev/urandom | base64 | tr '+/' '-_')
		proxy_secret_file = $PRIV/proxy_secret
	EOF
	conf_lines dispatch_workers=4 dispatch_batch=8 dispatch_lease_seconds=10 dispatch_poll_ms=200 \
		dispatch_shutdown_seconds=3
	# a burst takes a few seconds: a kill finds sends in flight
	target_conf demo_http http "http://127.0.0.1:$PROVIDER_PORT/plain/effects" idempotency_key=0 \
		"${PATIENT_RETRIES[@]}" timeout_ms=3000 rate_per_second=10
	target_conf demo_smtp smtp "smtp://127.0.0.1:$SMTP_PORT" mail_from=oncegate@failover.example \
		"${PATIENT_RETRIES[@]}"
} >"$CONF")
say "oncegatectl migrate through $DB"
PGUSER=oncegate "$CTL" -c "$CONF" migrate >"$TMP/migrate.out" 2>&1 ||
	{ cat "$TMP/migrate.out" >&2; die "oncegatectl migrate failed"; }
ctl() { PGUSER=oncegate-operator "$CTL" -c "$CONF" "$@"; }
API_KEY=$(ctl client add dev --reason "failover.sh: the load's client") || die "oncegatectl client add failed"
(umask 077 && printf '%s\n' "$API_KEY" >"$PRIV/api_key" && printf 'Bearer %s\n' "$API_KEY" >"$PRIV/auth")
unset API_KEY
ctl sends resume --reason "failover.sh: the dispatcher sends to the provider stand-in" >/dev/null

PGUSER=oncegate-fcgi ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	"$FCGI" -c "$CONF" </dev/null >"$TMP/fcgi.stderr" 2>&1 9>&- &
FCGI_PID=$!
wait_for 30 "oncegate-fcgi's socket" test -S "$TMP/fcgi.sock" ||
	{ tail -n 20 "$TMP/fcgi.stderr" >&2; die "oncegate-fcgi did not start"; }

nginx_site "$TMP" "$TMP/fcgi.sock" "$HTTP_PORT" "$PRIV/proxy_secret.nginx" ||
	die "cannot render nginx/oncegate-local.conf.in"
NGINX_PID=$(nginx_start "$TMP/nginx") || die "nginx rejects its config or did not start"
BASE=http://127.0.0.1:$HTTP_PORT
curl -fsS -o /dev/null --max-time 5 "$BASE/healthz" || die "oncegate at $BASE is not healthy"

PGUSER=oncegate-dispatch AI_ACTIONS_ENABLED=true ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
	"$DISPATCH" -c "$CONF" </dev/null >"$TMP/dispatch.stderr" 2>&1 9>&- &
DISPATCH_PID=$!
sleep 0.5
running "$DISPATCH_PID" || { tail -n 20 "$TMP/dispatch.stderr" >&2; die "oncegate-dispatch did not start"; }

# --- the load, the watch and the failovers --------------------------------------------------------
LOAD_S=$(((RUNS + RATE - 1) / RATE))
say "load: $RUNS workflows at $RATE/s (~${LOAD_S}s) through $BASE; $FAILOVERS failovers"
"$PYTHON" "$HERE/multihost_load.py" load --base "$BASE" --run "$RUN" --runs "$RUNS" --rate "$RATE" \
	--workers 16 --public-url "$BASE" --out "$PRIV" --client dev --mails short --lease-seconds 30 2>"$TMP/load.stderr" &
LOAD_PID=$!
# The watch: a new read-write connection by the programs' conninfo, and a
# new claim through nginx, every 0.2 s each.
"$PYTHON" "$HERE/failover_watch.py" watch --dsn "$DB user=oncegate" --base "$BASE" \
	--auth-file "$PRIV/auth" --run "$RUN" --out "$TMP/watch.jsonl" 2>"$TMP/watch.stderr" &
WATCH_PID=$!
t0=$EPOCHREALTIME

# failover I: once the cluster is in sync (the first one no earlier than
# 8 s into the load, the others 3 s after), puts BURST approved effects
# straight into the outbox (the dispatcher's rate limit keeps sends in
# flight), kills the leader's postmaster and waits for the other node to
# take the leader lock. Appends "KILL-TIME OLD NEW PROMOTED-TIME LOAD" to
# TMP/failovers (LOAD: whether the workflows were still running).
BURST=80
: >"$TMP/failovers"
failover() {
	local i=$1 old pm new t_kill t_new load=no t_wait
	if ((i == 1)); then
		sleep "$(awk -v t0="$t0" -v now="$EPOCHREALTIME" 'BEGIN { s = t0 + 8 - now; printf "%.2f", (s > 0 ? s : 0) }')"
	fi
	t_wait=$EPOCHREALTIME
	wait_for 180 "the cluster in sync before failover $i" synced || return 1
	say "failover $i: the cluster in sync (waited $(awk -v a="$EPOCHREALTIME" -v b="$t_wait" 'BEGIN { printf "%.1f", a - b }')s)"
	((i == 1)) || sleep 3
	approved_effects "${RUN}b:$i:" "$BURST" demo_http burst
	sleep 0.5
	old=$(leader)
	pm=$(postmaster_of "$old")
	[[ -n $old && -n $pm ]] || { say "no leader or no postmaster to kill"; return 1; }
	running "$LOAD_PID" && load=yes
	t_kill=$EPOCHREALTIME
	kill -KILL "$pm"
	say "failover $i: kill -9 of $old's postmaster (pid $pm) at $(awk -v a="$t_kill" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')s"
	wait_for 5 "$old's postmaster to die" postmaster_gone "$pm" || return 1
	wait_for 90 "another leader" leader_is "$(other "$old")" || return 1
	t_new=$EPOCHREALTIME
	new=$(other "$old")
	say "failover $i: $new leads, $(awk -v a="$t_new" -v b="$t_kill" 'BEGIN { printf "%.1f", a - b }')s after the kill"
	printf '%s %s %s %s %s\n' "$t_kill" "$old" "$new" "$t_new" "$load" >>"$TMP/failovers"
}
failed_failovers=0
for ((f = 1; f <= FAILOVERS; f++)); do
	failover "$f" || failed_failovers=$((failed_failovers + 1))
done
# The last old primary rejoins too.
wait_for 120 "the old primary to rejoin" synced || failed_failovers=$((failed_failovers + 1))
wait "$LOAD_PID" || die "the load client failed: $(tail -n 5 "$TMP/load.stderr")"
LOAD_PID=''
say "$(tail -n1 "$TMP/load.stderr"); the outbox drains"
for ((i = 0; i < 600; i++)); do
	left=$(q "SELECT count(*) FROM effect_outbox WHERE idempotency_key LIKE '$RUN%' AND state IN ('pending', 'sending')" 2>/dev/null || echo x)
	[[ $left == 0 ]] && break
	sleep 0.2
done
stop_child "$WATCH_PID" 5
WATCH_PID=''
stop_child "$DISPATCH_PID" 10 oncegate-dispatch
DISPATCH_PID=''

# --- what happened ---------------------------------------------------------------------------------
final=$(leader)
curl -fsS "http://127.0.0.1:$PROVIDER_PORT/_requests" >"$TMP/requests.json"
tenant_dumps "$RUN" "$TMP" "$RUN%"
mv "$TMP/runs.tsv" "$TMP/runs-all.tsv"
grep -F "|$RUN:" "$TMP/runs-all.tsv" >"$TMP/runs.tsv" || true
qt "SELECT extract(epoch FROM completed_at) FROM effect_outbox
	WHERE idempotency_key LIKE '$RUN%' AND state = 'completed'" >"$TMP/completed.txt"
rc=0
# The load's own checks: nothing doubled or lost, every delivery as approved.
"$PYTHON" "$HERE/multihost_load.py" check --run "$RUN" --runs "$RUNS" --out "$PRIV" \
	--requests "$TMP/requests.json" --smtp "$TMP/smtp.jsonl" --runs-tsv "$TMP/runs.tsv" \
	--approvals-tsv "$TMP/approvals.tsv" --effects-tsv "$TMP/effects.tsv" >"$TMP/load-check.out" 2>"$TMP/load-check.err" || rc=1
"$PYTHON" "$HERE/failover_watch.py" check --watch "$TMP/watch.jsonl" --failovers "$TMP/failovers" \
	--answers "$PRIV/answers.jsonl" --runs-tsv "$TMP/runs-all.tsv" --approvals-tsv "$TMP/approvals.tsv" \
	--completed "$TMP/completed.txt" >"$TMP/check.out" 2>"$TMP/check.err" || rc=1
declare -A R=()
while IFS='=' read -r k v; do R[$k]=$v; done < <(cat "$TMP/load-check.out" "$TMP/check.out")
rewinds=$(cat "$TMP"/pg?.log | grep -c 'pg_rewind exit code=0' || true)
sanitizer=$(cat "$TMP/fcgi.stderr" "$TMP/dispatch.stderr" | grep -cE 'ERROR: AddressSanitizer|runtime error:|LeakSanitizer' || true)
left=$(q "SELECT count(*) FROM effect_outbox WHERE idempotency_key LIKE '$RUN%' AND state IN ('pending', 'sending')")

printf '\nPostgreSQL failover under load: Patroni %s + etcd %s, 2 nodes, synchronous_mode (%s)\n' \
	"$(patroni --version | awk '{ print $2 }')" "$(etcd --version | awk 'NR == 1 { print $3 }')" "$RUN"
printf '  Patroni ttl %s s, loop_wait %s s, retry_timeout %s s, primary_start_timeout 0; conninfo %s\n' \
	"$TTL" "$LOOP_WAIT" "$RETRY_TIMEOUT" "$DB"
printf '  %d workflows at %d/s, %d failovers asked, %d done as asked\n' "$RUNS" "$RATE" "$FAILOVERS" \
	"$((FAILOVERS - failed_failovers))"
printf '  %-9s %-11s %-9s %-11s %-12s %-11s %-10s %s\n' failover "kill -9 of" promoted "no writable" "oncegate 2xx" dispatcher "completed" "workflows"
printf '  %-9s %-11s %-9s %-11s %-12s %-11s %-10s %s\n' "" "primary" "(s)" "primary (s)" "again (s)" "resumed (s)" "till next" "running"
while read -r line; do
	[[ $line == failover=* ]] || continue
	read -r i old new prom unw api disp ndone load <<<"${line#failover=}"
	printf '  %-9s %-11s %-9s %-11s %-12s %-11s %-10s %s\n' "$i" "$old -> $new" "$prom" "$unw" "$api" "$disp" "$ndone" "$load"
done <"$TMP/check.out"
printf '  worst: seconds without a writable primary %s, until oncegate answered 2xx %s (aim <= 30)\n' \
	"${R[worst_unwritable]:-?}" "${R[worst_api_2xx]:-?}"
printf '  old primaries rewound by pg_rewind          %s   (the others rejoined without needing it)\n' "$rewinds"
printf '  primary at the end                          %s\n' "${final:-none}"
printf '  requests                                    %s   (%s)\n' "${R[requests]:-?}" "${R[statuses]:-}"
printf '  answers other than 2xx/3xx/503              %s   (must be 0%s)\n' "${R[answers_other]:-?}" \
	"${R[answers_other_detail]:+: ${R[answers_other_detail]}}"
printf '  retries answered 409/410: done before     %s   (%s; the first try committed as the primary died, its 503 came after)\n' \
	"${R[retries_found_done]:-?}" "${R[retries_found_done_detail]:-none}"
printf '  acknowledged claims missing on the primary  %s   (of %s; must be 0)\n' "${R[acked_claims_missing]:-?}" "${R[acked_claims]:-?}"
printf '  acknowledged decisions missing              %s   (of %s; must be 0)\n' "${R[acked_decisions_missing]:-?}" "${R[acked_decisions]:-?}"
printf '  probe claims (one each 0.2 s), answered 503 %s, %s\n' "${R[probe_claims]:-?}" "${R[probe_503]:-?}"
printf '  workflows                                   %s\n' "${R[flow_ends]:-?}"
printf '  effects enqueued by approvals               %s   (runs without exactly one per decision: %s; with %d put in before each kill: %s)\n' \
	"${R[effects]:-?}" "${R[effects_not_once]:-?}" "$BURST" "${R[effects_all]:-?}"
printf '  received: HTTP requests, mails              %s, %s\n' "${R[provider_requests]:-?}" "${R[mails_received]:-?}"
printf '  effects received more than once             %s   (must be 0)\n' "${R[effects_received_twice]:-?}"
printf '  completed                                   %s   (received other than once: %s)\n' \
	"${R[completed]:-?}" "${R[completed_not_once]:-?}"
printf '  unknown, with a dead letter                 %s   (of which reached the provider: %s)\n' \
	"${R[unknown]:-?}" "${R[unknown_received]:-?}"
printf '  lost (neither completed nor unknown)        %s   (must be 0); still pending at the end: %s\n' "${R[lost]:-?}" "$left"
printf '  sanitizer findings                          %s\n' "$sanitizer"
cat "$TMP/load-check.err" "$TMP/check.err" | sed 's/^/  /'
((failed_failovers == 0)) || { echo "  FAIL: $failed_failovers failovers did not happen as asked (a kill, a new leader, a rejoin)"; rc=1; }
[[ ${R[failovers]:-0} == "$FAILOVERS" ]] || { echo "  FAIL: ${R[failovers]:-0} failovers recorded, $FAILOVERS asked"; rc=1; }
[[ $left == 0 ]] || { echo "  FAIL: the outbox did not drain"; rc=1; }
[[ $sanitizer == 0 ]] || { grep -hE -A 20 'ERROR: AddressSanitizer|runtime error:|LeakSanitizer' "$TMP/fcgi.stderr" "$TMP/dispatch.stderr" | head -n 60 >&2; rc=1; }
if [[ $rc != 0 && $KEEP != yes ]]; then
	for f in fcgi.stderr dispatch.stderr pg1.log pg2.log; do
		printf '  --- %s (last lines)\n' "$f"
		tail -n 15 "$TMP/$f" | sed 's/^/  /'
	done
fi
exit "$rc"

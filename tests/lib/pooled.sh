# shellcheck shell=bash
# tests/lib/pooled.sh — a private copy of a running stack's front: nginx
# with its upstream changed, and oncegate behind PgBouncer in transaction
# pooling mode. Used by the benchmark (tests/bench/claims_lib.sh) and the
# chaos run through the pooler (tests/chaos/pg_restart.sh --pooled).
# Sourced after tests/lib/stack.sh; defines functions and runs nothing.
#
# Needs the stack's ONCEGATE_CONF (its nginx config is
# $(dirname ONCEGATE_CONF)/nginx/nginx.conf) and PGHOST, PGPORT,
# PGDATABASE, PGUSER, PGPASSFILE.

# nginx_copy DIR PORT [SED-ARG...]: the stack's rendered nginx config on
# stdout, made a private instance in DIR: its own pid file, logs and
# temporary paths below DIR, listening on 127.0.0.1:PORT, comments dropped;
# then the extra sed -E arguments.
nginx_copy() {
	local dir=$1 port=$2
	shift 2
	sed -E \
		-e '/^[[:space:]]*#/d' \
		-e "s#^([[:space:]]*pid)[[:space:]]+[^;]+;#\\1 $dir/nginx.pid;#" \
		-e "s#^([[:space:]]*error_log)[[:space:]]+[^ ;]+#\\1 $dir/error.log#" \
		-e "s#^([[:space:]]*access_log)[[:space:]]+[^ ;]+#\\1 $dir/access.log#" \
		-e "s#^([[:space:]]*)(client_body|proxy|fastcgi|uwsgi|scgi)_temp_path[[:space:]]+[^;]+;#\\1\\2_temp_path $dir/tmp/\\2;#" \
		-e "s#^([[:space:]]*listen[[:space:]]+)127\\.0\\.0\\.1:[0-9]+#\\1127.0.0.1:$port#" \
		"$@" "$(dirname "$ONCEGATE_CONF")/nginx/nginx.conf"
}

# upstream_nginx DIR SOCKET: a private nginx in DIR from the stack's config,
# its upstream SOCKET and nothing else changed; its port in UP_PORT, its
# master's PID in UP_NGX_PID.
upstream_nginx() {
	local dir=$1 sock=$2
	UP_PORT=$(free_port 18180) || die "no free loopback port for a private nginx"
	mkdir -p "$dir/tmp"
	chmod 755 "$dir/tmp"
	nginx_copy "$dir" "$UP_PORT" \
		-e "s#^([[:space:]]*server[[:space:]]+unix:)[^;]+;#\\1$sock;#" >"$dir/nginx.conf"
	chmod 644 "$dir/nginx.conf"
	grep -qF "unix:$sock;" "$dir/nginx.conf" ||
		die "the private nginx config names no upstream socket: the stack's nginx config changed shape"
	UP_NGX_PID=$(nginx_start "$dir") || die "the private nginx in $dir did not start"
}

# pooled_start FCGI_BINARY: in a new directory POOL_DIR, PgBouncer
# (transaction pooling, 20 server connections, SCRAM against a userlist of
# the stack's secret, 0600; connect_query makes the session settings the
# responder makes itself when it connects directly), a second oncegate-fcgi
# from FCGI_BINARY and the stack's config with pooled_database pointing at
# PgBouncer (its own socket and decision log), and a private nginx in front
# of it. Sets POOL_URL, POOL_PGB_PID, POOL_FCGI_PID, POOL_NGX_PID and
# POOL_NOTE (what it is). pgbouncer runs as postgres (it refuses root).
POOL_DIR='' POOL_PGB_PID='' POOL_FCGI_PID='' POOL_NGX_PID=''
pooled_start() {
	local fcgi=$1 bin pw port i
	bin=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
	[[ -x $bin ]] || die "pgbouncer is not installed (Debian package pgbouncer)"
	pw=$(cut -d: -f5- "$PGPASSFILE")
	port=$(free_port 16432) || die "no free loopback port for pgbouncer"
	POOL_DIR=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-pooled.XXXXXX")
	# nginx's workers reach the responder's socket in here; the secrets are 0600.
	chmod 711 "$POOL_DIR"
	(
		umask 077
		printf '"%s" "%s"\n' "$PGUSER" "$pw" >"$POOL_DIR/userlist.txt"
		printf '127.0.0.1:%s:*:%s:%s\n' "$port" "$PGUSER" "$pw" >"$POOL_DIR/pgpass"
	)
	cat >"$POOL_DIR/pgbouncer.ini" <<-EOF
		[databases]
		$PGDATABASE = host=127.0.0.1 port=$PGPORT dbname=$PGDATABASE connect_query='SET statement_timeout = 10000; SET idle_in_transaction_session_timeout = 30000; SET client_min_messages = warning'
		[pgbouncer]
		listen_addr = 127.0.0.1
		listen_port = $port
		unix_socket_dir =
		auth_type = scram-sha-256
		auth_file = $POOL_DIR/userlist.txt
		pool_mode = transaction
		default_pool_size = 20
		max_client_conn = 200
		logfile = $POOL_DIR/pgbouncer.log
		pidfile = $POOL_DIR/pgbouncer.pid
		log_connections = 0
		log_disconnections = 0
		; PostgreSQL away: a query waits for a server connection at most
		; 3 s (then an error, which the responder answers 503), and a failed
		; connect is tried again after 1 s (default 15 s).
		query_wait_timeout = 3
		server_connect_timeout = 3
		server_login_retry = 1
	EOF
	chown postgres: "$POOL_DIR" "$POOL_DIR/userlist.txt" "$POOL_DIR/pgbouncer.ini"
	runuser -u postgres -- "$bin" -d "$POOL_DIR/pgbouncer.ini" ||
		die "pgbouncer did not start ($POOL_DIR/pgbouncer.log)"
	for ((i = 0; i < 50; i++)); do
		[[ -s $POOL_DIR/pgbouncer.pid ]] && break
		sleep 0.1
	done
	POOL_PGB_PID=$(head -n1 "$POOL_DIR/pgbouncer.pid")
	# The stack's config, these three first (before any [section]).
	{
		printf 'listen = %s\nlog_file = %s\n' "$POOL_DIR/fcgi.sock" "$POOL_DIR/decisions.log"
		printf 'pooled_database = "host=127.0.0.1 port=%s dbname=%s user=%s passfile=%s"\n' \
			"$port" "$PGDATABASE" "$PGUSER" "$POOL_DIR/pgpass"
		sed -E -e '/^[[:space:]]*(listen|log_file|pooled_database)[[:space:]]*=/d' "$ONCEGATE_CONF"
	} >"$POOL_DIR/oncegate.conf"
	chmod 600 "$POOL_DIR/oncegate.conf"
	"$fcgi" -c "$POOL_DIR/oncegate.conf" </dev/null >"$POOL_DIR/fcgi.stderr" 2>&1 &
	POOL_FCGI_PID=$!
	for ((i = 0; i < 100; i++)); do
		[[ -S $POOL_DIR/fcgi.sock ]] && break
		sleep 0.1
	done
	[[ -S $POOL_DIR/fcgi.sock ]] ||
		die "oncegate-fcgi through pgbouncer did not start: $(tail -n5 "$POOL_DIR/fcgi.stderr")"
	upstream_nginx "$POOL_DIR" "$POOL_DIR/fcgi.sock"
	POOL_NGX_PID=$UP_NGX_PID
	# shellcheck disable=SC2034  # the caller's
	POOL_URL=http://127.0.0.1:$UP_PORT
	# shellcheck disable=SC2034
	POOL_NOTE="PgBouncer $("$bin" --version 2>&1 | head -n1 | awk '{ print $2 }'), pool_mode transaction, default_pool_size 20; a second oncegate-fcgi with pooled_database (unnamed statements), its own private nginx"
}

# pooled_fcgi_stop: stops the second oncegate-fcgi (SIGTERM: it finishes
# what it serves); false, with the reports on stderr, when it left
# sanitizer findings (a sanitizer build) on its stderr.
pooled_fcgi_stop() {
	[[ -n $POOL_FCGI_PID ]] || return 0
	kill -TERM "$POOL_FCGI_PID" 2>/dev/null || true
	wait "$POOL_FCGI_PID" 2>/dev/null || true
	POOL_FCGI_PID=''
	! sanitizer_findings "$POOL_DIR/fcgi.stderr"
}

# pooled_stop: stops what pooled_start started and removes POOL_DIR.
pooled_stop() {
	pooled_fcgi_stop || true
	if [[ -n $POOL_NGX_PID ]]; then
		nginx_stop "$POOL_NGX_PID" "$POOL_DIR"
		POOL_NGX_PID=''
	fi
	if [[ -n $POOL_PGB_PID ]]; then
		kill -TERM "$POOL_PGB_PID" 2>/dev/null || true
		POOL_PGB_PID=''
	fi
	[[ -n $POOL_DIR ]] && rm -rf "$POOL_DIR"
	POOL_DIR=''
}

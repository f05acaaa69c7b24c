# shellcheck shell=bash
# dev.d/pg.sh — the stack's PostgreSQL cluster: setup, who may connect, roles, stop (step d).
# Sourced by ./dev, which sets ROOT, DEV_DIR, STATE_ROOT, PGBIN, PYTHON and
# the stack variables first; defines functions and runs nothing.

# --- d. PostgreSQL -------------------------------------------------------------------

# PostgreSQL refuses to run as root; cd / because the caller's directory may
# be unreadable for postgres.
as_postgres() { runuser -u postgres -- env -C / "$@"; }

pg_options() {
	local opts="-c listen_addresses=127.0.0.1 -p $PG_PORT -k $STATE/run"
	# The benchmark runs against the up stack: keep durability there.
	if [[ $STACK == test || $STACK == test-b ]]; then
		opts+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	fi
	echo "$opts"
}

# The exact command lines, also handed to the tests that stop/start the cluster.
pg_start_cmd() {
	printf 'runuser -u postgres -- env -C / %q -D %q -w -l %q -o %q start' \
		"$PGBIN/pg_ctl" "$STATE/pg" "$STATE/pg.log" "$(pg_options)"
}
pg_stop_cmd() {
	printf 'runuser -u postgres -- env -C / %q -D %q -m fast -w stop' \
		"$PGBIN/pg_ctl" "$STATE/pg"
}

pg_setup() {
	install -d -o postgres -g postgres -m 0755 "$STATE/run"
	if [[ ! -f $STATE/pg/PG_VERSION ]]; then
		say "initdb $STATE/pg"
		rm -rf "$STATE/pg"
		install -d -o postgres -g postgres -m 0700 "$STATE/pg"
		as_postgres "$PGBIN/initdb" -D "$STATE/pg" --auth-local=peer \
			--auth-host=scram-sha-256 -U postgres -E UTF8 --locale=C --no-sync >/dev/null
	fi
	pg_auth_files
	touch "$STATE/pg.log"
	chown postgres:postgres "$STATE/pg.log"
	# pg_ctl writes postmaster.pid; that first line is the PID we stop.
	if [[ -z $(pid_of "$STATE/pg/postmaster.pid") ]]; then
		say "starting PostgreSQL on 127.0.0.1:$PG_PORT"
		bash -c "$(pg_start_cmd)" >/dev/null 9>&- ||
			{ tail -n 20 "$STATE/pg.log" >&2; die "PostgreSQL did not start"; }
	else
		# A cluster of an older ./dev may still trust everyone: reload.
		as_postgres "$PGBIN/pg_ctl" -D "$STATE/pg" reload >/dev/null
	fi
	head -n1 "$STATE/pg/postmaster.pid" >"$STATE/pg.pid"
	pg_create_db
	pg_password
}

# Who may connect (the stack's dispatcher sends for real, so not every
# local user): on the unix socket, peer authentication with one map — the
# OS user postgres is role postgres, root (./dev, the programs, the tests)
# may be postgres, the schema owner oncegate or one of the programs' login
# roles (PG_LOGINS), nobody else is anyone; over TCP a password
# (scram-sha-256), which only oncegate has, kept in STATE/pgpass (0600) for
# the few that connect that way (tests/chaos/multihost.sh, from network
# namespaces).
pg_auth_files() {
	local hba=$STATE/pg/pg_hba.conf ident=$STATE/pg/pg_ident.conf
	cat >"$hba" <<-'EOF'
		# Written by ./dev: edits are overwritten on the next run.
		# TYPE  DATABASE  USER  ADDRESS        METHOD
		local   all       all                  peer map=oncegate
		host    all       all   127.0.0.1/32   scram-sha-256
		host    all       all   ::1/128        scram-sha-256
	EOF
	cat >"$ident" <<-'EOF'
		# Written by ./dev: the OS users that may connect on the socket, as which role.
		# MAPNAME  SYSTEM-USERNAME  PG-USERNAME
		oncegate   postgres         postgres
		oncegate   root             postgres
		oncegate   root             oncegate
	EOF
	local login
	for login in "${!PG_LOGINS[@]}"; do
		printf 'oncegate   root             %s\n' "$login" >>"$ident"
	done
	chown postgres:postgres "$hba" "$ident"
	chmod 0600 "$hba" "$ident"
}

# The oncegate role's password for TCP, made once per stack; it reaches the
# server on psql's stdin, never on a command line.
pg_password() {
	local pw
	if [[ ! -s $STATE/pgpass ]]; then
		pw=$(head -c 24 /dev/urandom | base64 | tr -d '+/=')
		(umask 077 && printf '*:%s:*:oncegate:%s\n' "$PG_PORT" "$pw" >"$STATE/pgpass")
	fi
	chmod 0600 "$STATE/pgpass"
	# The port in the file follows the stack's port.
	sed -i "s/^\*:[0-9]*:/*:$PG_PORT:/" "$STATE/pgpass"
	pw=$(cut -d: -f5- "$STATE/pgpass")
	printf '\\set pw %s\nALTER ROLE oncegate PASSWORD :'"'"'pw'"'"';\n' "$pw" | psql_admin
}

psql_admin() {
	as_postgres "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 \
		-h "$STATE/run" -p "$PG_PORT" -U postgres -d postgres "$@"
}

# Each program connects as a login role of its own, a member of the group
# role the schema grants to (sql/015_roles.sql): login role → group role.
declare -A PG_LOGINS=(
	[oncegate-fcgi]=oncegate_fcgi
	[oncegate-dispatch]=oncegate_dispatch
	[oncegate-operator]=oncegate_operator
	[oncegate-auditor]=oncegate_auditor
)

pg_create_db() {
	local login group
	if [[ -z $(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = 'oncegate'") ]]; then
		psql_admin -c 'CREATE ROLE oncegate LOGIN'
	fi
	# The group roles are the cluster's, made here as the superuser (the
	# owner may not create roles); the migration grants to them.
	for login in "${!PG_LOGINS[@]}"; do
		group=${PG_LOGINS[$login]}
		if [[ -z $(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = '$group'") ]]; then
			psql_admin -c "CREATE ROLE $group NOLOGIN"
		fi
		if [[ -z $(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = '$login'") ]]; then
			psql_admin -c "CREATE ROLE \"$login\" LOGIN IN ROLE $group"
		fi
	done
	if [[ -z $(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = 'oncegate'") ]]; then
		psql_admin -c 'CREATE DATABASE oncegate OWNER oncegate'
	fi
}

pg_stop() {
	# After a test restarted the cluster, postmaster.pid has the current PID.
	if [[ -s $STATE/pg/postmaster.pid ]]; then
		head -n1 "$STATE/pg/postmaster.pid" >"$STATE/pg.pid"
	fi
	# SIGINT: PostgreSQL's fast shutdown.
	stop_pid PostgreSQL "$STATE/pg.pid" INT 60
}

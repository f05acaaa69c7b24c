#!/usr/bin/env bash
# owners.sh — each table has exactly one file with its SQL.
#
# 1. Every table the migrations (sql/*.sql) create is listed below with its
#    owner, and exactly one file under src/ holds an INSERT INTO, UPDATE or
#    DELETE FROM that names it: the owner. A new table without an owner
#    fails here.
# 2. No file under src/ other than the owners (their .c and .h; an owner
#    that is a module of several files behind one private header, X_int.h
#    beside X.c, also that header and every file that includes it),
#    migrate.c and db.c holds SQL text: the use cases (decide, dispatch, repair,
#    replay, audit, the web handlers, the programs) compose the owners'
#    functions instead. A statement row (struct db_stmt NAME = { ... })
#    counts as SQL text wherever its text is written.
# 3. No statement row is exported (extern): a use case calls its owner's
#    typed function and never sees a statement or the order of its $n.
#
#   bash tests/owners.sh [SOURCE ROOT]     (default: this checkout)
# Exit 0 pass, 1 fail.
set -uo pipefail

ROOT=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)}

# table  owner (path under the source root)
OWNERS=(
	"api_clients           src/lib/clients.c"
	"client_decide_grants  src/lib/clients.c"
	"workflow_runs         src/lib/ledger.c"
	"run_events            src/lib/ledger.c"
	"approvals             src/lib/gate.c"
	"approval_replaced_links src/lib/gate.c"
	"approval_votes        src/lib/gate.c"
	"effect_outbox         src/lib/outbox.c"
	"effect_attempts       src/lib/outbox.c"
	"dead_letters          src/lib/deadletter.c"
	"dispatch_control      src/lib/control.c"
	"operator_actions      src/lib/oplog.c"
	"run_replays           src/lib/jobs.c"
	"replay_jobs           src/lib/jobs.c"
	"replay_job_items      src/lib/jobs.c"
	"resume_job_items      src/lib/jobs.c"
	"metric_counters       src/lib/metrics.c"
	"metric_route_latency  src/lib/metrics.c"
	"metric_attempts       src/lib/metrics.c"
)
# Files besides the owners that may hold SQL text: the migrations runner and
# the connection layer.
NOT_OWNERS_WITH_SQL=(src/lib/migrate.c src/lib/db.c)

fail=0
declare -A owner_of=()
for line in "${OWNERS[@]}"; do
	read -r table owner <<<"$line"
	owner_of[$table]=$owner
done

# Every table the migrations create has an owner here.
mapfile -t tables < <(cd "$ROOT" && cat sql/*.sql |
	grep -oiE 'CREATE TABLE( IF NOT EXISTS)? +[a-z_][a-z0-9_]*' | awk '{print tolower($NF)}' | sort -u)
if [[ ${#tables[@]} -eq 0 ]]; then
	echo "owners: FAIL: no CREATE TABLE found in sql/*.sql"
	fail=1
fi
for table in "${tables[@]}"; do
	if [[ -z ${owner_of[$table]:-} ]]; then
		echo "owners: FAIL: $table (created in sql/) has no owner in tests/owners.sh"
		fail=1
	fi
done

# Each table is written in its owner only.
for line in "${OWNERS[@]}"; do
	read -r table owner <<<"$line"
	mapfile -t files < <(cd "$ROOT" && grep -rlE \
		"(INSERT INTO|UPDATE|DELETE FROM) +$table([^A-Za-z0-9_]|$)" src | sort)
	if [[ ${#files[@]} -eq 1 && ${files[0]} == "$owner" ]]; then
		echo "owners: $table is written only in $owner"
	else
		echo "owners: FAIL: $table must be written only in $owner; written in:" \
			"${files[*]:-(no file)}"
		fail=1
	fi
done

# No SQL text outside the owners.
allowed=" ${NOT_OWNERS_WITH_SQL[*]} "
for line in "${OWNERS[@]}"; do
	read -r _ owner <<<"$line"
	allowed+=" $owner ${owner%.c}.h "
	private=${owner%.c}_int.h
	if [[ -f $ROOT/$private ]]; then
		allowed+=" $private "
		while read -r member; do
			allowed+=" $member ${member%.c}.h "
		done < <(cd "$ROOT" && grep -lE "^#include \"${private##*/}\"" "${owner%/*}"/*.c)
	fi
done
mapfile -t hits < <(cd "$ROOT" && grep -rnE \
	'SELECT .* FROM|INSERT INTO|UPDATE [a-z_]+( [a-z]+)? +SET|DELETE FROM|" *(FROM|WHERE|RETURNING) |struct db_stmt [a-z_0-9]+ *= *\{' \
	--include='*.c' --include='*.h' src)
sqlfail=0
for hit in "${hits[@]}"; do
	file=${hit%%:*}
	if [[ $allowed != *" $file "* ]]; then
		echo "owners: FAIL: SQL text outside the table owners: $hit"
		sqlfail=1
	fi
done
if [[ $sqlfail -eq 0 ]]; then
	echo "owners: no SQL text outside the owners, migrate.c and db.c"
else
	fail=1
fi
# No exported statement rows.
mapfile -t exported < <(cd "$ROOT" && grep -rnE 'extern +const +struct +db_stmt' \
	--include='*.c' --include='*.h' src)
if [[ ${#exported[@]} -eq 0 ]]; then
	echo "owners: no statement row is exported"
else
	for hit in "${exported[@]}"; do
		echo "owners: FAIL: an exported statement row: $hit"
	done
	fail=1
fi
exit "$fail"

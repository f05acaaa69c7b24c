#!/usr/bin/env bash
# owners.sh — each table has exactly one file with its SQL: for every table
# listed below, exactly one file under src/ holds an INSERT INTO, UPDATE or
# DELETE FROM that names it, and it is the owner listed here.
#
# Only the tables already given their owner module are checked; the others
# (workflow_runs, run_events, approvals, effect_outbox, api_clients, the bulk
# job tables, ...) are still written from several files and join the list
# as they are converted.
#
#   bash tests/owners.sh [SOURCE ROOT]     (default: this checkout)
# Exit 0 pass, 1 fail.
set -uo pipefail

ROOT=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)}

# table  owner (path under the source root)
OWNERS=(
	"dispatch_control  src/lib/control.c"
	"dead_letters      src/lib/deadletter.c"
	"effect_attempts   src/lib/outbox.c"
	"operator_actions  src/lib/oplog.c"
)

fail=0
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
exit "$fail"

#!/usr/bin/env bash
# statements.sh — every SQL statement the programs can send prepares against
# the migrated schema.
#
# A statement is prepared on a connection only when it is first used, so one
# whose text no longer fits the schema (a column renamed, a parameter that
# PostgreSQL deduces two types for once a column became a domain) fails only
# on the first request that needs it, which a suite may never send. This
# takes every statement row (struct db_stmt NAME = { "name", "text", n, ... })
# of every source file as the preprocessor expands it (the statements are
# composed from macros), and PREPAREs each on the database of the
# environment (PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSFILE: the test
# stack's, as the schema's owner) in one transaction that is rolled back.
# It fails naming each statement PostgreSQL refuses, and when a file holds
# a statement row it could not read.
#
#   bash tests/statements.sh [SOURCE ROOT]     (default: this checkout)
# Exit 0 pass, 1 fail.
set -uo pipefail

ROOT=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# shellcheck disable=SC2046 # one word per flag
CFLAGS=(-I"$ROOT/src/lib" $(pkg-config --cflags libpq jansson libxml-2.0 libcurl openssl))

fail=0
: >"$TMP/all.sql"
for src in "$ROOT"/src/*/*.c; do
	grep -q 'struct db_stmt [A-Za-z_0-9]* *= *{' "$src" || continue
	if ! gcc -E -P "${CFLAGS[@]}" "$src" -o "$TMP/x.i" 2>"$TMP/cpp.err"; then
		echo "statements: cannot preprocess ${src#"$ROOT"/}:" >&2
		cat "$TMP/cpp.err" >&2
		fail=1
		continue
	fi
	python3 - "$TMP/x.i" "${src#"$ROOT"/}" "$(grep -c 'struct db_stmt [A-Za-z_0-9]* *= *{' "$src")" \
		>>"$TMP/all.sql" <<'EOF' || fail=1
import re, sys

text = open(sys.argv[1]).read()
rows = re.finditer(r'struct db_stmt\s+(\w+)\s*=\s*\{\s*"([^"]+)"\s*,((?:\s*"(?:[^"\\]|\\.)*")+)\s*,\s*(\d+)\s*,', text)
n = 0
for row in rows:
    name, literals = row.group(2), row.group(3)
    sql = ''.join(re.findall(r'"((?:[^"\\]|\\.)*)"', literals))
    sql = sql.encode('latin-1', 'backslashreplace').decode('unicode_escape')
    print('SAVEPOINT s;')
    print('\\echo statement %s (%s)' % (name, sys.argv[2]))
    print('PREPARE og_check AS %s;' % sql)
    print('DEALLOCATE ALL;')
    print('ROLLBACK TO SAVEPOINT s;')
    n += 1
if n != int(sys.argv[3]):
    sys.stderr.write('statements: %s has %s statement rows, %d read\n' % (sys.argv[2], sys.argv[3], n))
    sys.exit(1)
EOF
done

count=$(grep -c '^PREPARE' "$TMP/all.sql")
{
	echo 'BEGIN;'
	cat "$TMP/all.sql"
	echo 'ROLLBACK;'
} >"$TMP/run.sql"
# ON_ERROR_ROLLBACK keeps the transaction usable after a refused statement,
# so every statement is tried; each refusal is printed after its name.
psql -X -q -v ON_ERROR_STOP=0 -v ON_ERROR_ROLLBACK=on -f "$TMP/run.sql" >"$TMP/out" 2>&1
if grep -q 'ERROR' "$TMP/out"; then
	awk '/^statement /{name=$0; next} /ERROR|^DETAIL/{if (name != "") print name; name=""; print}' \
		"$TMP/out" >&2
	fail=1
fi
if [[ $fail -ne 0 ]]; then
	echo "statements: a statement does not prepare against the schema (above)" >&2
	exit 1
fi
echo "statements: all $count statements prepare against the migrated schema"

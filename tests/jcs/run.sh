#!/usr/bin/env bash
# tests/jcs/run.sh — the payload hash an n8n Code node computes with a
# stock RFC 8785 library (canonicalize, from npm, pinned by
# package-lock.json) equals the hash oncegate stores, against the stack
# that ./dev test started (it exports ONCEGATE_URL, ONCEGATE_API_KEY and
# PG*). See claims.mjs for what is claimed and checked.
#
# Exit 0 pass, 1 fail, 77 skipped (no stack: ONCEGATE_URL is unset).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
fail() { printf 'jcs: FAIL: %s\n' "$*" >&2; exit 1; }

if [[ -z ${ONCEGATE_URL:-} ]]; then
	echo "jcs: ONCEGATE_URL is not set; run ./dev test to start the stack. Skipping."
	exit 77
fi
for v in ONCEGATE_API_KEY PGHOST PGPORT PGDATABASE PGUSER; do
	[[ -n ${!v:-} ]] || fail "ONCEGATE_URL is set but $v is not"
done
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	[[ $(id -u) -eq 0 ]] || fail "Node.js and npm are missing: apt-get install nodejs npm"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm >&2
fi
# npm ci only when node_modules does not match the lockfile
if ! cmp -s "$HERE/package-lock.json" "$HERE/node_modules/.oncegate-lock" 2>/dev/null; then
	(cd "$HERE" && npm ci --no-audit --no-fund --prefer-offline >&2) || fail "npm ci in $HERE"
	cp "$HERE/package-lock.json" "$HERE/node_modules/.oncegate-lock"
fi
cd "$HERE"
exec node claims.mjs "$HERE/../data/corpus/outputs.json"

#!/usr/bin/env bash
# tests/openapi/check.sh lint | validate RECORD — the OpenAPI document of
# the workflow API (src/lib/openapi.json, compiled into oncegate-fcgi and
# served at GET /v1/openapi.json) against real tools:
#
#   lint             Redocly CLI's recommended rules, strict (redocly.yaml):
#                    any warning fails.
#   validate RECORD  every API answer the integration suites received (one
#                    JSON line each, appended by tests/testlib.c when
#                    ONCEGATE_API_RECORD names the file) against the
#                    document's response schemas, with ajv (validate.mjs):
#                    an answer the document does not describe fails.
#
# The tools come from npm at the versions package-lock.json pins (npm ci,
# only when node_modules does not match the lockfile), like the browser
# suites' tooling. Exit 0 when the check passes, 1 otherwise.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
DOC=$ROOT/src/lib/openapi.json

say() { printf 'openapi: %s\n' "$*" >&2; }
fail() { printf 'openapi: FAIL: %s\n' "$*" >&2; exit 1; }

ensure_tools() {
	if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
		[[ $(id -u) -eq 0 ]] || fail "node and npm are missing: apt-get install nodejs npm"
		say "installing Node.js and npm"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm >&2 ||
			{ apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm >&2; }
	fi
	if ! cmp -s "$HERE/package-lock.json" "$HERE/node_modules/.oncegate-lock" 2>/dev/null; then
		say "npm ci in $HERE"
		(cd "$HERE" && npm ci --no-audit --no-fund --prefer-offline >&2)
		cp "$HERE/package-lock.json" "$HERE/node_modules/.oncegate-lock"
	fi
}

case ${1:-} in
lint)
	ensure_tools
	# Redocly prints a banner about Node.js 20 on stderr; its verdict is the
	# exit status and the report.
	(cd "$HERE" && ./node_modules/.bin/redocly lint "$DOC" --config redocly.yaml --format=stylish)
	;;
validate)
	[[ -n ${2:-} ]] || fail "usage: check.sh validate RECORD"
	[[ -s $2 ]] || fail "$2 is empty or missing: the suites recorded no answer (is ONCEGATE_API_RECORD set for make check?)"
	ensure_tools
	node "$HERE/validate.mjs" "$DOC" "$2"
	;;
*)
	printf 'usage: %s lint | validate RECORD\n' "$0" >&2
	exit 2
	;;
esac

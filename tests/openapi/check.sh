#!/usr/bin/env bash
# tests/openapi/check.sh lint | validate RECORD — the OpenAPI document of
# the workflow API (src/lib/openapi.json, compiled into oncegate-fcgi and
# served at GET /v1/openapi.json) against real tools:
#
#   lint             Redocly CLI's recommended rules, strict (redocly.yaml):
#                    any warning fails.
#   validate RECORD  every API answer the integration suites received (one
#                    JSON line each, appended by tests/harness/testlib.c when
#                    ONCEGATE_API_RECORD names the file) against the
#                    document's response schemas, with ajv (validate.mjs):
#                    an answer the document does not describe fails.
#
# The tools come from npm at the versions package-lock.json pins (npm ci,
# only when node_modules does not match the lockfile), like the browser
# suites' tooling. Exit 0 when the check passes, 1 otherwise.
set -euo pipefail

# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
DOC=$ROOT/src/lib/openapi.json
SAY_PREFIX='openapi:' DIE_PREFIX='openapi: FAIL'

case ${1:-} in
lint)
	node_tools "$HERE"
	# Redocly prints a banner about Node.js 20 on stderr; its verdict is the
	# exit status and the report.
	(cd "$HERE" && ./node_modules/.bin/redocly lint "$DOC" --config redocly.yaml --format=stylish)
	;;
validate)
	[[ -n ${2:-} ]] || die "usage: check.sh validate RECORD"
	[[ -s $2 ]] || die "$2 is empty or missing: the suites recorded no answer (is ONCEGATE_API_RECORD set for make check?)"
	node_tools "$HERE"
	node "$HERE/validate.mjs" "$DOC" "$2"
	;;
*)
	printf 'usage: %s lint | validate RECORD\n' "$0" >&2
	exit 2
	;;
esac

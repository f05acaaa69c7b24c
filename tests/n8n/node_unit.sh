#!/usr/bin/env bash
# tests/n8n/node_unit.sh — the n8n node's own tests (integrations/n8n,
# `npm test`: every operation against canned oncegate answers, on the built
# package) and n8n's lint of it (`n8n-node lint`). Its dependencies come from
# its lockfile (npm ci), again only when the lockfile changed.
#
# Exit 0 pass, 1 fail.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
PKG=$(cd "$HERE/../../integrations/n8n" && pwd -P)
fail() { printf 'n8n node: FAIL: %s\n' "$*" >&2; exit 1; }

command -v npm >/dev/null || fail "npm is not installed"
cd "$PKG"
if ! cmp -s package-lock.json node_modules/.oncegate-lock.json 2>/dev/null; then
	npm ci --no-audit --no-fund --prefer-offline --loglevel=error >&2 || fail "npm ci failed"
	cp package-lock.json node_modules/.oncegate-lock.json
fi
npm test || fail "the node's unit tests failed"
npx --no-install n8n-node lint </dev/null >"${TMPDIR:-/tmp}/n8n-node-lint.$$" 2>&1 ||
	{ cat "${TMPDIR:-/tmp}/n8n-node-lint.$$" >&2; rm -f "${TMPDIR:-/tmp}/n8n-node-lint.$$"; fail "n8n-node lint found problems"; }
rm -f "${TMPDIR:-/tmp}/n8n-node-lint.$$"
echo "n8n node: unit tests and n8n-node lint passed"

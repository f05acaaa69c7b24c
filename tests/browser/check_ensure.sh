#!/usr/bin/env bash
# tests/browser/check_ensure.sh — every suite that drives the browser
# installs the browser tooling itself, so each runs on its own from a fresh
# clone (the n8n suite once failed with ERR_MODULE_NOT_FOUND when ./dev test
# had not installed playwright-core before it):
#
#   1. ensure.sh, run on a copy of this directory without node_modules,
#      leaves a directory from which approve.mjs and decide.mjs load;
#   2. every script under tests/ that runs one of the browser scripts calls
#      ensure.sh before its first use of them.
#
# Exit 0 pass, 1 fail.
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
DIE_PREFIX='browser tooling check: FAIL'

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cp "$HERE/package.json" "$HERE/package-lock.json" "$HERE/approve.mjs" "$HERE/decide.mjs" "$WORK/"
bash "$HERE/ensure.sh" "$WORK" || die "ensure.sh failed on a fresh copy"
for f in approve.mjs decide.mjs; do
	# Loading the module runs nothing without arguments but the imports.
	(cd "$WORK" && node --input-type=module -e "
		const src = (await import('fs')).readFileSync('$f', 'utf8');
		for (const m of src.matchAll(/^import .* from '([^.][^']*)';\$/gm)) await import(m[1]);") ||
		die "$f's imports do not resolve after ensure.sh"
done

n=0
while IFS= read -r script; do
	first_use=$(grep -n 'tests/browser/\(approve\|decide\)\.mjs\|HERE/\(approve\|decide\)\.mjs' "$script" |
		head -n1 | cut -d: -f1 || true)
	[[ -n $first_use ]] || continue
	ensure=$(grep -n 'ensure\.sh' "$script" | grep -v '^[0-9]*:#' | head -n1 | cut -d: -f1 || true)
	[[ -n $ensure && $ensure -lt $first_use ]] ||
		die "${script#"$ROOT"/} runs a browser script (line $first_use) without calling tests/browser/ensure.sh first"
	n=$((n + 1))
done < <(grep -rl --include="*.sh" "\.mjs" "$ROOT/tests" | grep -v "/check_ensure.sh$")
((n >= 2)) || die "found $n suites that run the browser scripts; expected the browser and n8n suites"
printf 'browser tooling check: ok (%d suites ensure it; a fresh copy loads)\n' "$n"

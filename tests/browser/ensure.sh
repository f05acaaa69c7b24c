#!/usr/bin/env bash
# tests/browser/ensure.sh [DIR] — the browser tooling every suite that drives
# a real browser needs, made present: Debian's chromium (apt-get, as root),
# Node.js 20 or later with npm, and playwright-core (and, where the
# lockfile pins it, axe-core) in DIR/node_modules (DIR is this directory by
# default: approve.mjs and decide.mjs, through browser.mjs and axe.mjs,
# import from it).
# playwright never downloads a browser of its own; npm reuses its cache, so a
# warm machine needs no network. Used by tests/browser/run.sh and
# tests/n8n/run.sh, so either suite runs on its own from a fresh clone.
#
# Exit 0 when everything is in place, 1 with a message when it cannot be.
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
DIR=${1:-$HERE}
CHROMIUM=${ONCEGATE_CHROMIUM:-/usr/bin/chromium}

SAY_PREFIX='browser tooling:' DIE_PREFIX='browser tooling: FAIL'

if [[ ! -x $CHROMIUM ]]; then
	say "installing Debian's chromium"
	as_root_install chromium
fi
[[ -x $CHROMIUM ]] || die "no browser at $CHROMIUM"
node_tools "$DIR"
node_major=$(node -p 'process.versions.node.split(".")[0]')
((node_major >= 20)) || die "playwright-core needs Node.js 20 or later, this is $(node --version)"

# What the scripts import must resolve from DIR, or they fail later with
# ERR_MODULE_NOT_FOUND in the middle of a suite.
(cd "$DIR" && node --input-type=module -e "await import('playwright-core')") ||
	die "playwright-core does not load from $DIR/node_modules"
# axe-core (approve.mjs's accessibility check, through axe.mjs), when DIR's
# lockfile pins it
if grep -q '"node_modules/axe-core"' "$DIR/package-lock.json"; then
	(cd "$DIR" && node -e "require.resolve('axe-core/axe.min.js')") ||
		die "axe-core is not in $DIR/node_modules"
fi

#!/usr/bin/env bash
# tests/jcs/run.sh — the payload hash an n8n Code node computes with a
# stock RFC 8785 library (canonicalize, from npm, pinned by
# package-lock.json) equals the hash oncegate stores, against the stack
# that ./dev test started (it exports ONCEGATE_URL, ONCEGATE_API_KEY and
# PG*). See claims.mjs for what is claimed and checked.
#
# Exit 0 pass, 1 fail, 77 skipped (no stack: ONCEGATE_URL is unset).
set -euo pipefail
# shellcheck source=tests/lib/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/stack.sh"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
SAY_PREFIX='jcs:' DIE_PREFIX='jcs: FAIL'

need_stack jcs ONCEGATE_API_KEY PGHOST PGPORT PGDATABASE PGUSER
node_tools "$HERE"
cd "$HERE"
exec node claims.mjs "$HERE/../data/corpus/outputs.json"

#!/usr/bin/env bash
# runbook.sh — every oncegatectl command an alert's text tells the operator
# to run (contrib/prometheus/oncegate.rules.yml) is one oncegatectl takes.
#
# Each `oncegatectl ...` in backquotes is run with its placeholders filled
# (EFFECT, KEY, NEWKEY, ID, TEXT, a {{ $labels.x }}) against a database that
# is not there (PGHOST=/nonexistent): nothing can change, and a command
# oncegatectl parses gets as far as the connection (exit 3) or refuses its
# argument (exit 1); a usage error (exit 2) fails the check, as does a
# rules file that names no command at all.
#
#   bash tests/runbook.sh [ONCEGATECTL] [RULES]
# Exit 0 pass, 1 fail.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
CTL=${1:-${ONCEGATE_CTL:-$ROOT/.dev/build/oncegatectl}}
RULES=${2:-$ROOT/contrib/prometheus/oncegate.rules.yml}
[[ -x $CTL ]] || { echo "runbook.sh: no oncegatectl at $CTL" >&2; exit 1; }

mapfile -t cmds < <(python3 - "$RULES" <<'PY'
import re, sys
text = re.sub(r"\s+", " ", open(sys.argv[1], encoding="utf-8").read())
for c in sorted(set(re.findall(r"`(oncegatectl [^`]+)`", text))):
    print(c)
PY
)
[[ ${#cmds[@]} -gt 0 ]] || { echo "runbook.sh: no oncegatectl command in $RULES" >&2; exit 1; }

TMP=$(mktemp)
trap 'rm -f "$TMP"' EXIT
fail=0
for c in "${cmds[@]}"; do
	# placeholders → values of the right shape
	line=${c#oncegatectl }
	line=$(sed -E -e 's/\{\{ *\$labels\.[a-z_]+ *\}\}/demo_http/g' \
		-e 's/\bEFFECT\b/00000000-0000-4000-8000-000000000000/g' \
		-e 's/\bNEWKEY\b/runbook-new/g' -e 's/\bKEY\b/runbook-key/g' \
		-e 's/\bID\b/provider-1/g' -e 's/\bTEXT\b/runbook-check/g' <<<"$line")
	read -r -a words <<<"$line"
	# the built-in defaults (-c /dev/null) and a socket that is not there
	PGHOST=/nonexistent PGPORT=1 PGSERVICE= "$CTL" -c /dev/null "${words[@]}" \
		>/dev/null 2>"$TMP" </dev/null
	rc=$?
	if [[ $rc == 2 || $rc == 0 ]]; then
		printf 'FAIL  %s (exit %d: %s)\n' "$c" "$rc" \
			"$([[ $rc == 2 ]] && echo 'a usage error' || echo 'it reached no database, yet succeeded')"
		sed 's/^/      /' "$TMP" | head -5
		fail=1
	else
		printf 'ok    %s (exit %d)\n' "$c" "$rc"
	fi
done
exit "$fail"

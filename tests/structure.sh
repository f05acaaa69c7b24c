#!/usr/bin/env bash
# structure.sh — the shape of src/, measured and enforced (a second or so).
#
# 1. Include cycles: 0. A module is X.c with X.h, or several files behind
#    one private header (P_int.h and every .c that includes it are module
#    P); module A depends on B when a file of A includes a header of B. No
#    chain of dependencies comes back to where it started.
# 2. Call cycles: 0. File A calls file B when A names a function B defines
#    without `static`; no chain of calls between modules comes back. The
#    files of one module (behind its private header) may call each other;
#    their cycles are counted, not enforced.
# 3. Function lengths (from the line naming it to its closing brace): none
#    over 120 lines. Printed: how many are over 80, and the longest.
# 4. No backward goto (a goto to a label above it): loops are written as
#    loops.
# 5. No provider kind named outside the provider's own file: the kinds are
#    the `.kind = "NAME"` of src/lib/provider_*.c, and no other file
#    compares a kind with one of them (provider.h: provider_of). The
#    configuration's default kind is a value, not a test.
# 6. The leaves include no header of src/: the result type (rc.h) below the
#    database layer, a target as the providers read it, a notice's text.
# 7. No row read (PQgetvalue, PQgetisnull, PQntuples, db_get) outside the
#    owners of tests/owners.sh (and the files of their modules), db.c and
#    migrate.c: an owner hands a use case typed structs, never rows.
# 8. No state literal outside its owner: the words of the state_names
#    tables of ledger.c (runs), gate.c (approvals) and outbox.c (effects)
#    stand, as string literals, in those owners only; a use case names a
#    state by its enum and the owner's *_state_name(). Headers count too;
#    another vocabulary that shares a word (a dead letter's resolution, a
#    job's end, a page's template) gives it one home, a named constant of
#    its owner's header (#define NAME "word" on a line of its own), which
#    its users name; the homes are counted and printed.
#
# LONG_OK lists, by file:function and for now, functions over 120 lines:
# those other work reshapes this round, and those not yet split along their
# steps. Each must still be over 80 lines (a name left behind once it is
# split fails the check, so the list only shrinks). CYCLE_OK likewise lists
# a cycle (its modules, as printed) that other work removes this round;
# ROWS_OK the use cases that still read rows, STATE_OK those that still
# write a state's name (each must still do so: the lists only shrink).
#
#   bash tests/structure.sh [SOURCE ROOT]     (default: this checkout)
# Exit 0 pass, 1 fail.
set -uo pipefail

ROOT=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)}

LONG_OK=()
LEAVES=(src/lib/rc.h src/lib/config_target.h src/lib/notice.h src/lib/payload.h src/lib/deadline.h)
CYCLE_OK=()
ROWS_OK=()
STATE_OK=()

exec python3 - "$ROOT" "${LEAVES[*]}" "${ROWS_OK[*]}" "${STATE_OK[*]}" "${#CYCLE_OK[@]}" \
	"${CYCLE_OK[@]}" "${LONG_OK[@]}" <<'PY'
import collections, os, re, sys

root, leaves = sys.argv[1], sys.argv[2].split()
rows_ok, state_ok, ncycle = set(sys.argv[3].split()), set(sys.argv[4].split()), int(sys.argv[5])
cycle_ok, long_ok = set(sys.argv[6:6 + ncycle]), set(sys.argv[6 + ncycle:])
LIMIT, WARN = 120, 80
files = sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(root, 'src'))
               for f in fs if f.endswith(('.c', '.h')))
rel = lambda f: os.path.relpath(f, root)
text = {f: open(f, encoding='utf-8', errors='replace').read() for f in files}
fail = []

# Functions in house style: the name at column 0 followed by "(", the body
# from "{" at column 0 to "}" at column 0.
funcs = []  # (file, name, first line, length, exported, body lines)
for f in files:
    if not f.endswith('.c'):
        continue
    lines = text[f].split('\n')
    i = 0
    while i < len(lines):
        m = re.match(r'([A-Za-z_]\w*)\(', lines[i])
        if m:
            j = i
            while j < len(lines) and lines[j] != '{' and not lines[j].endswith(';'):
                j += 1
            if j < len(lines) and lines[j] == '{':
                k = j
                while k < len(lines) and lines[k] != '}':
                    k += 1
                exported = i == 0 or not lines[i - 1].startswith('static')
                funcs.append((rel(f), m.group(1), i + 1, k - i + 1, exported, lines[j:k + 1]))
                i = k
        i += 1

# 3. lengths
over = sorted((fn for fn in funcs if fn[3] > WARN), key=lambda fn: -fn[3])
print('functions: %d, over %d lines: %d, over %d: %d' %
      (len(funcs), WARN, len(over), LIMIT, sum(1 for fn in over if fn[3] > LIMIT)))
for fn in over[:5]:
    print('  %4d %s:%s (line %d)' % (fn[3], fn[0], fn[1], fn[2]))
seen = set()
for fn in over:
    name = '%s:%s' % (fn[0], fn[1])
    seen.add(name)
    if fn[3] > LIMIT and name not in long_ok:
        fail.append('%s is %d lines (at most %d)' % (name, fn[3], LIMIT))
for name in sorted(long_ok - seen):
    fail.append('%s is listed in LONG_OK but is no longer over %d lines: remove it' % (name, WARN))
if long_ok:
    print('  allowed over %d for now: %s' % (LIMIT, ', '.join(sorted(long_ok))))

# 4. backward goto
back = 0
for fn in funcs:
    labels = {m.group(1): n for n, l in enumerate(fn[5])
              for m in [re.match(r'([A-Za-z_]\w*):', l)] if m and m.group(1) != 'default'}
    for n, l in enumerate(fn[5]):
        m = re.search(r'\bgoto\s+(\w+)\s*;', l)
        if m and labels.get(m.group(1), n) < n:
            back += 1
            fail.append('%s:%s: backward goto %s (line %d)' % (fn[0], fn[1], m.group(1),
                                                                fn[2] + n - 1))
print('backward gotos: %d' % back)

def cycles(graph):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out

# 1. include cycles between modules
def module(f):
    d, stem = os.path.dirname(rel(f)), os.path.basename(f)[:-2]
    if stem.endswith('_int'):
        return os.path.join(d, stem[:-4])
    c = f[:-2] + '.c'
    if c in text:
        for p in re.findall(r'^#include "(\w+)_int\.h"', text[c], re.M):
            return os.path.join(d, p)
    return os.path.join(d, stem)
by_name = collections.defaultdict(list)
for f in files:
    by_name[os.path.basename(f)].append(f)
inc = collections.defaultdict(set)
for f in files:
    for h in re.findall(r'^#include "([^"]+)"', text[f], re.M):
        for g in by_name.get(os.path.basename(h), ()):
            if module(f) != module(g):
                inc[module(f)].add(module(g))
ic = cycles(inc)
print('include cycles: %d' % len(ic))
for c in ic:
    if ' <-> '.join(c) not in cycle_ok:
        fail.append('include cycle: ' + ' <-> '.join(c))

# 2. call cycles between modules (and, printed, between the files of one)
defs = {}
for fn in funcs:
    if fn[4]:
        defs.setdefault(fn[1], fn[0])
calls, mcalls = collections.defaultdict(set), collections.defaultdict(set)
for f in files:
    if f.endswith('.c'):
        code = re.sub(r'/\*.*?\*/|"(?:\\.|[^"\\])*"', '', text[f], flags=re.S)
        for name in set(re.findall(r'\b([A-Za-z_]\w*)\s*\(', code)):
            if defs.get(name, rel(f)) != rel(f):
                calls[rel(f)].add(defs[name])
                g = os.path.join(root, defs[name])
                if module(f) != module(g):
                    mcalls[module(f)].add(module(g))
mc, fc = cycles(mcalls), cycles(calls)
print('call cycles between modules: %d (between files, inside one module: %d)' %
      (len(mc), len(fc) - len(mc)))
for c in mc:
    if ' <-> '.join(c) not in cycle_ok:
        fail.append('call cycle: ' + ' <-> '.join(c))
if cycle_ok:
    print('  allowed for now: ' + '; '.join(sorted(cycle_ok)))

# 5. provider kinds by name
kinds = set()
for f in files:
    if os.path.basename(f).startswith('provider'):
        kinds.update(re.findall(r'\.kind = "(\w+)"', text[f]))
named = 0
for f in files:
    if os.path.basename(f).startswith('provider'):
        continue
    for n, l in enumerate(text[f].split('\n')):
        for k in kinds:
            if re.search(r'cmp\(.*kind\b[^;]*"%s"|"%s"[^;]*\bkind\b' % (k, k), l):
                named += 1
                fail.append('%s:%d: provider kind "%s" named outside its file' % (rel(f), n + 1, k))
print('provider kinds named outside their files: %d' % named)

# 6. leaves
for leaf in leaves:
    own = re.findall(r'^#include "([^"]+)"', text.get(os.path.join(root, leaf), ''), re.M)
    if os.path.join(root, leaf) not in text or own:
        fail.append('%s is not a leaf (missing, or includes %s)' % (leaf, ', '.join(own)))
print('leaf headers: %s' % ' '.join(os.path.basename(l) for l in leaves))

# 7. rows only in the owners
owner_files = set(re.findall(r'^\s*"\w+\s+(src/\S+\.c)"', open(os.path.join(root, 'tests/owners.sh')).read(), re.M))
owner_mods = {module(os.path.join(root, f)) for f in owner_files}
owner_mods |= {module(os.path.join(root, 'src/lib', f)) for f in ('db.c', 'migrate.c')}
def use_case(f):
    return f.endswith('.c') and module(f) not in owner_mods
readers = {}
for f in files:
    if use_case(f):
        code = re.sub(r'/\*.*?\*/', '', text[f], flags=re.S)
        n = len(re.findall(r'\b(?:db_get(?:_ll)?|PQgetvalue|PQgetisnull|PQntuples)\s*\(', code))
        if n:
            readers[rel(f)] = n
print('use cases reading rows: %d (%d places)' % (len(readers), sum(readers.values())))
for f in sorted(readers):
    if f not in rows_ok:
        fail.append('%s reads rows (%d PQgetvalue/PQntuples/db_get): an owner hands it a typed struct' % (f, readers[f]))
for f in sorted(rows_ok - set(readers)):
    fail.append('%s is listed in ROWS_OK but reads no rows: remove it' % f)

# 8. state names only in their owners
words = set()
for o in ('ledger.c', 'gate.c', 'outbox.c'):
    m = re.search(r'state_names\[[^]]*\]\s*=\s*\{([^}]*)\}', text[os.path.join(root, 'src/lib', o)])
    words.update(re.findall(r'"(\w+)"', m.group(1)) if m else [])
state_mods = {module(os.path.join(root, 'src/lib', o)) for o in ('ledger.c', 'gate.c', 'outbox.c')}
writers, homes = {}, []
home = re.compile(r'^[ \t]*#[ \t]*define[ \t]+([A-Z][A-Z0-9_]*)[ \t]+"(\w+)"[ \t]*$', re.M)
for f in files:
    if module(f) not in state_mods:
        code = re.sub(r'/\*.*?\*/', '', text[f], flags=re.S)
        if f.endswith('.h'):
            homes += ['%s %s' % (m.group(1), m.group(2)) for m in home.finditer(code) if m.group(2) in words]
            code = home.sub('', code)
        n = sum(1 for w in re.findall(r'"(\w+)"', code) if w in words)
        if n:
            writers[rel(f)] = n
print('state names written outside their owners: %d (in %d files)' % (sum(writers.values()), len(writers)))
print('  words shared with another vocabulary, each named once in its header: %d (%s)'
      % (len(homes), ', '.join(sorted(homes))))
for f in sorted(writers):
    if f not in state_ok:
        fail.append('%s writes %d state names: use the owner\'s enum and *_state_name()' % (f, writers[f]))
for f in sorted(state_ok - set(writers)):
    fail.append('%s is listed in STATE_OK but writes no state name: remove it' % f)
if rows_ok or state_ok:
    print('  allowed for now: rows %d files, state names %d files' % (len(rows_ok), len(state_ok)))

for m in fail:
    print('structure.sh: ' + m, file=sys.stderr)
sys.exit(1 if fail else 0)
PY

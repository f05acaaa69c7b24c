#!/usr/bin/python3
"""guide.py — the command blocks of docs/deploy.md, in order, for the
package test to run, so the guide cannot drift from what is tested.

    guide.py DEPLOY_MD OUTDIR [--subst FROM=TO]...

Every fenced block marked ```sh is a step: OUTDIR/NN.sh holds its text
with the substitutions applied (each FROM replaced by TO, in the order
given), and OUTDIR/plan one line per step: "NN run FIRST-LINE". A block
preceded by the comment
    <!-- package-test: skip (REASON) -->
is listed as "NN skip REASON" and not written; one preceded by
    <!-- package-test: instead (REASON) -->
as "NN instead REASON": the test does its own equivalent there (starting
nginx or the units without systemd as PID 1). Blocks of any other
language (text, nginx, ...) are not steps. Exits 1 when a substitution
applies to no step, so a changed guide is never tested in another shape.
"""
import argparse
import os
import re
import sys

MARK = re.compile(r"^<!--\s*package-test:\s*(skip|instead)\s*\((.*)\)\s*-->\s*$")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("doc")
    ap.add_argument("outdir")
    ap.add_argument("--subst", action="append", default=[])
    args = ap.parse_args()
    substs = []
    for s in args.subst:
        a, sep, b = s.partition("=")
        if not sep or not a:
            sys.exit("guide.py: --subst wants FROM=TO, not %r" % s)
        substs.append([a, b, 0])

    with open(args.doc, encoding="utf-8") as f:
        lines = f.read().split("\n")
    steps, mark, i = [], None, 0
    while i < len(lines):
        line = lines[i]
        m = MARK.match(line)
        if m:
            mark = (m.group(1), m.group(2))
            i += 1
            continue
        if line.startswith("```"):
            lang = line[3:].strip()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if j == len(lines):
                sys.exit("guide.py: %s:%d: a code block is not closed" % (args.doc, i + 1))
            if lang == "sh":
                steps.append((i + 1, mark, "\n".join(lines[i + 1:j]) + "\n"))
            elif mark:
                sys.exit("guide.py: %s:%d: a package-test mark before a %r block"
                         % (args.doc, i + 1, lang))
            mark = None
            i = j + 1
            continue
        if line.strip():
            # A mark belongs to the block right after it (blank lines allowed).
            mark = None
        i += 1

    os.makedirs(args.outdir, exist_ok=True)
    plan = []
    for n, (lineno, mark, text) in enumerate(steps, 1):
        first = text.split("\n", 1)[0]
        if mark and mark[0] == "skip":
            plan.append("%02d skip line %d: %s" % (n, lineno, mark[1]))
            continue
        for s in substs:
            s[2] += text.count(s[0])
            text = text.replace(s[0], s[1])
        if mark:
            plan.append("%02d instead line %d: %s" % (n, lineno, mark[1]))
        else:
            plan.append("%02d run line %d: %s" % (n, lineno, first))
        with open(os.path.join(args.outdir, "%02d.sh" % n), "w", encoding="utf-8") as f:
            f.write(text)
    with open(os.path.join(args.outdir, "plan"), "w", encoding="utf-8") as f:
        f.write("\n".join(plan) + "\n")
    unused = [s[0] for s in substs if s[2] == 0]
    if unused:
        sys.exit("guide.py: these no longer occur in %s's command blocks: %s"
                 % (args.doc, ", ".join(unused)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

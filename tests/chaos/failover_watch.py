#!/usr/bin/python3
"""The watch and the figures of tests/chaos/failover.sh.

    failover_watch.py watch --dsn DSN --base URL --auth-file FILE --run RUN
        --out FILE
    failover_watch.py check --watch FILE --failovers FILE --answers FILE
        --runs-tsv FILE --approvals-tsv FILE --completed FILE

watch: until SIGTERM, two probes, each every 0.2 s, one JSON line per try
in FILE (times are the wall clock, as the shell's $EPOCHREALTIME):
  db   a new connection by DSN (the programs' multi-host conninfo with
       target_session_attrs=read-write) and one query: "ok" with the port
       of the primary it reached, or the error;
  api  a claim of a new key (RUN + "w:" + N) through nginx (POST /v1/runs,
       the Authorization header's value in the auth file): its status,
       when it was sent and when the answer came.

check: joins the watch, the failovers (one line each: KILL-TIME OLD-NAME
NEW-NAME PROMOTED-TIME LOAD-RUNNING), the load's answers (tests/chaos/multihost_load.py),
and dumps of the primary at the end: runs (TENANT|KEY, state, attempt),
approvals (TENANT|KEY, state, decision) and the completion times of the
effects (epoch seconds, one a line). Prints NAME=VALUE lines for the shell
script, and per failover "failover=I OLD NEW PROMOTED UNWRITABLE API2XX
DISPATCH COMPLETED LOAD" (seconds from the kill, "-" when never; the
effects completed until the next kill), and exits 0
only when no acknowledged claim or decision is missing and every answer
was 2xx, 3xx or 503 (the load's deliberately conflicting replays, 422,
aside).
"""

import argparse
import collections
import http.client
import json
import signal
import sys
import threading
import time
import urllib.parse

import psycopg2

from multihost_load import report  # the verdict lines, as multihost.sh prints them

TICK = 0.2


def watch(args):
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    lock = threading.Lock()
    out = open(args.out, "w", encoding="utf-8")

    def record(rec):
        with lock:
            out.write(json.dumps(rec) + "\n")
            out.flush()

    def db():
        while not stop.is_set():
            t = time.time()
            rec = {"kind": "db", "t": t}
            try:
                conn = psycopg2.connect(args.dsn + " connect_timeout=2 application_name=failover-watch")
                try:
                    with conn.cursor() as cur:
                        cur.execute("SELECT inet_server_port(), pg_is_in_recovery()")
                        port, recovery = cur.fetchone()
                    rec.update(ok=not recovery, port=port)
                finally:
                    conn.close()
            except psycopg2.Error as exc:
                rec.update(ok=False, error=str(exc).strip().splitlines()[0][:160])
            rec["done"] = time.time()
            record(rec)
            stop.wait(max(0.0, t + TICK - time.time()))

    def api():
        u = urllib.parse.urlsplit(args.base)
        with open(args.auth_file, encoding="utf-8") as f:
            auth = f.read().strip()
        n = 0
        while not stop.is_set():
            n += 1
            key = "%sw:%d" % (args.run, n)
            t = time.time()
            status = 0
            attempt = None
            conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=30)
            try:
                conn.request("POST", "/v1/runs", body=json.dumps({"key": key, "payload": {"probe": n}}),
                             headers={"Authorization": auth, "Content-Type": "application/json",
                                      "Connection": "close"})
                resp = conn.getresponse()
                status = resp.status
                body = resp.read()
                if status == 201:
                    attempt = json.loads(body).get("attempt")
            except (OSError, http.client.HTTPException, ValueError):
                pass
            finally:
                conn.close()
            record({"kind": "api", "t": t, "done": time.time(), "key": key, "status": status,
                    "attempt": attempt})
            stop.wait(max(0.0, t + TICK - time.time()))

    threads = [threading.Thread(target=f) for f in (db, api)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    out.close()
    return 0


def fmt(x):
    return "-" if x is None else "%.1f" % x


def check(args):
    events = [json.loads(line) for line in open(args.watch, encoding="utf-8")]
    failovers = [line.split() for line in open(args.failovers, encoding="utf-8") if line.strip()]
    answers = [json.loads(line) for line in open(args.answers, encoding="utf-8")]
    runs = collections.defaultdict(list)
    for line in open(args.runs_tsv, encoding="utf-8"):
        key, state, attempt = line.rstrip("\n").split("\t")
        runs[key].append((state, int(attempt)))
    decided = collections.Counter()
    for line in open(args.approvals_tsv, encoding="utf-8"):
        key, state, _ = line.rstrip("\n").split("\t")
        if state == "decided":
            decided[key] += 1
    completed = sorted(float(x) for x in open(args.completed, encoding="utf-8") if x.strip())

    out = collections.OrderedDict()
    bad = []

    # Per failover: from the kill to the first read-write connection, to the
    # first 2xx of a claim sent after the kill, to the first effect completed
    # after it; and the effects completed before the next kill.
    kills = [float(f[0]) for f in failovers]
    worst = ([], [])
    for i, (t_kill, old, new, t_new, load) in enumerate(failovers, 1):
        t_kill, t_new = float(t_kill), float(t_new)
        t_next = kills[i] if i < len(kills) else float("inf")
        db_ok = [e["done"] for e in events if e["kind"] == "db" and e["ok"] and e["t"] >= t_kill]
        api_ok = [e["done"] for e in events
                  if e["kind"] == "api" and 200 <= e["status"] < 300 and e["t"] >= t_kill]
        done = [t for t in completed if t >= t_kill]
        unwritable = min(db_ok) - t_kill if db_ok else None
        api_back = min(api_ok) - t_kill if api_ok else None
        dispatch_back = done[0] - t_kill if done else None
        between = sum(1 for t in done if t < t_next)
        for w, x in zip(worst, (unwritable, api_back)):
            if x is not None:
                w.append(x)
        print("failover=%d %s %s %s %s %s %s %d %s" % (i, old, new, fmt(t_new - t_kill), fmt(unwritable),
                                                       fmt(api_back), fmt(dispatch_back), between, load))
        if old == new:
            bad.append("failover %d: the primary's name did not change" % i)
        if unwritable is None or api_back is None:
            bad.append("failover %d: no writable primary or no 2xx afterwards" % i)
        if between == 0:
            bad.append("failover %d: the dispatcher completed nothing afterwards" % i)
    out["failovers"] = len(failovers)
    out["worst_unwritable"] = fmt(max(worst[0], default=None))
    out["worst_api_2xx"] = fmt(max(worst[1], default=None))

    # Acknowledged writes: a claim answered 201 (the load's and the watch's)
    # must be on the primary with at least that attempt; an approval POST
    # answered 303 must have decided its approval.
    acked = [(a["key"], a.get("attempt") or 1) for a in answers
             if a["step"] in ("claim", "claim_dup") and a["status"] == 201]
    acked += [("dev|" + e["key"], e.get("attempt") or 1) for e in events
              if e["kind"] == "api" and e["status"] == 201]
    missing = [k for k, att in acked if not any(a >= att for _, a in runs.get(k, []))]
    out["acked_claims"] = len(acked)
    out["acked_claims_missing"] = len(missing)
    if missing:
        bad.append("acknowledged claims missing on the primary: " + " ".join(missing[:5]))
    decisions = {a["key"] for a in answers if a["step"] == "decide" and a["status"] == 303}
    lost = sorted(k for k in decisions if decided[k] != 1)
    out["acked_decisions"] = len(decisions)
    out["acked_decisions_missing"] = len(lost)
    if lost:
        bad.append("acknowledged decisions missing on the primary: " + " ".join(lost[:5]))

    # Answers: 2xx, 3xx or 503 only (a timeout or a reset connection, status
    # 0, counts against it); the load's conflicting replays are meant to get
    # 422. A 409 or 410 to the retry of a request answered 503 (or not at
    # all) is counted apart: the first try committed as its connection went
    # (the primary died between the commit and its acknowledgement), and
    # the retry finds it done ("already decided").
    statuses = collections.Counter()
    other = collections.Counter()
    in_doubt = collections.Counter()
    last = {}
    for a in answers + [dict(e, step="probe") for e in events if e["kind"] == "api"]:
        s = a["status"]
        statuses[s] += 1
        before = last.get((a["step"], a["key"]))
        last[(a["step"], a["key"])] = s
        if 200 <= s < 400 or s == 503 or (a["step"] == "conflict" and s == 422):
            continue
        if s in (409, 410) and before in (0, 502, 503, 504):
            in_doubt["%s:%s" % (a["step"], s)] += 1
            continue
        other["%s:%s" % (a["step"], s or "no answer")] += 1
    out["requests"] = sum(statuses.values())
    out["statuses"] = " ".join("%s x%d" % (s or "none", n) for s, n in sorted(statuses.items()))
    out["answers_other"] = sum(other.values())
    out["answers_other_detail"] = " ".join("%s x%d" % kv for kv in sorted(other.items()))
    out["retries_found_done"] = sum(in_doubt.values())
    out["retries_found_done_detail"] = " ".join("%s x%d" % kv for kv in sorted(in_doubt.items()))
    if other:
        bad.append("answers other than 2xx, 3xx, 503: " + out["answers_other_detail"])
    probes = [e for e in events if e["kind"] == "api"]
    out["probe_claims"] = len(probes)
    out["probe_503"] = sum(1 for e in probes if e["status"] == 503)

    return report(out, bad)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("watch")
    w.add_argument("--dsn", required=True)
    w.add_argument("--base", required=True)
    w.add_argument("--auth-file", required=True)
    w.add_argument("--run", required=True)
    w.add_argument("--out", required=True)
    c = sub.add_parser("check")
    for name in ("watch", "failovers", "answers", "runs-tsv", "approvals-tsv", "completed"):
        c.add_argument("--" + name, required=True)
    args = p.parse_args()
    return watch(args) if args.cmd == "watch" else check(args)


if __name__ == "__main__":
    sys.exit(main())

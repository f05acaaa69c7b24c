#!/usr/bin/env python3
"""rss.py — the responder's memory after adversarial requests.

    ./dev up && tests/bench/rss.py [--rounds N] [--clients N]

Against the stack `./dev up` leaves running (.dev/env): CLIENTS parallel
clients, ROUNDS times each, send what costs the responder the most memory
per request: a claim whose payload is about 250 KB of multilingual text (a
new key each time: canonical JSON, hash, jsonb), and an output of 16,000
fields on a claimed run (parsed whole, then refused by the contract's
schema with 422). After every round it prints the responder's VmRSS and
VmHWM (/proc/PID/status) and, at the end, the RSS after 5 s idle. Every
answer must be the expected one (201, 422); anything else is an error
(exit 1). Runs bench-rss:RUN:... stay in the stack's tables.
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import sys
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def env():
    e = {}
    with open(os.path.join(ROOT, ".dev", "env")) as f:
        for line in f:
            line = line.strip()
            if line.startswith("export "):
                line = line[7:]
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                e[k] = v.strip("'\"")
    return e


def status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) // 1024
    return out


TEXT = ("Клиент просит вернуть деньги за заказ; 客户要求退款，订单已发货。"
        "العميل يطلب استرداد المبلغ 🙂 & <b>not html</b> ")


def post(url, key, path, body):
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request("POST", path, body.encode(), {"Authorization": "Bearer " + key,
                                            "Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def one(url, key, run, n):
    big = TEXT * (250 * 1024 // len(TEXT.encode()))
    k = f"bench-rss:{run}:{n}"
    st, data = post(url, key, "/v1/runs", json.dumps(
        {"key": k, "payload": {"note": big, "n": n}, "workflow_version": "rss@1",
         "trigger": "bench"}, ensure_ascii=False))
    if st != 201:
        return f"claim {k}: {st} {data[:200]!r}"
    c = json.loads(data)
    wide = ",".join(f'"f{i}":{i % 7}' for i in range(1, 16001))
    body = ('{"lease_owner":"%s","version":%d,"contract":"support_reply","output":{%s},'
            '"effect":{"type":"email.send","target":"demo_smtp","payload":{"to":"x@example.com"}},'
            '"requested_by":"bench-rss@example.com"}' % (c["lease_owner"], c["version"], wide))
    st, data = post(url, key, "/v1/runs/" + urllib.parse.quote(k, safe="") + "/output", body)
    if st != 422:
        return f"output {k}: {st} {data[:200]!r}"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--clients", type=int, default=8)
    a = ap.parse_args()
    e = env()
    state = os.path.dirname(e["ONCEGATE_CONF"])
    pid = int(open(os.path.join(state, "fcgi.pid")).read().split()[0])
    run = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"
    print(f"responder pid {pid}: start {status(pid)}")
    errors = 0
    n = 0
    with concurrent.futures.ThreadPoolExecutor(a.clients) as ex:
        for r in range(1, a.rounds + 1):
            futs = [ex.submit(one, e["ONCEGATE_URL"], e["ONCEGATE_API_KEY"], run, n + i)
                    for i in range(a.clients * 2)]
            n += a.clients * 2
            for f in futs:
                err = f.result()
                if err:
                    errors += 1
                    print("error:", err, file=sys.stderr)
            print(f"round {r:2d} ({n} claims of 250 KB + {n} outputs of 16,000 fields): {status(pid)}")
    time.sleep(5)
    print(f"after 5 s idle: {status(pid)}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

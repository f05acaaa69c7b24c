#!/usr/bin/python3
"""Workflow traffic for the upgrade stage (tests/upgrade/run.sh).

    traffic.py --url URL --key API_KEY --prefix P --workers N --stop FILE --out FILE

Each worker, until FILE named by --stop exists: claims a new key, submits an
output whose crm.tag effect the contract approves by itself (so the
dispatcher sends it), and now and then claims an earlier key again (a
duplicate, answered 200). A 503 is answered by waiting (Retry-After, at
most a second here) and sending the same request again, as a workflow tool
does; nothing was changed by it. Every answer's status is counted, and each
503 is checked for Retry-After.

--out gets one JSON document: the status counts, 503s without Retry-After,
the first and last time (monotonic seconds) a 503 and a 2xx were seen, and
every acknowledged claim and effect (key, contact_id), for the stage to
compare with the database and with what the provider received.
"""

import argparse
import http.client
import json
import os
import random
import threading
import time
import urllib.parse

# Realistic data: Cyrillic, CJK, RTL and emoji in the payload and the reason.
REASONS = ["Клиент спросил о демо — 客户询问了演示 🚀", "طلب عرضًا توضيحيًا · בקשה להדגמה ✉️",
           "Заявка с сайта: «хочу тариф Бизнес» 📈"]


class Shared:
    def __init__(self):
        self.lock = threading.Lock()
        self.status = {}
        self.no_retry_after = 0
        self.first_503 = self.last_503 = None
        self.first_2xx_after_503 = None
        self.claims = []
        self.effects = []
        self.errors = []
        self.stale = 0

    def seen(self, st, resp):
        now = time.monotonic()
        with self.lock:
            self.status[str(st)] = self.status.get(str(st), 0) + 1
            if st == 503:
                if resp is None or not resp.getheader("Retry-After"):
                    self.no_retry_after += 1
                self.first_503 = self.first_503 or now
                self.last_503 = now
            elif 200 <= st < 300 and self.first_503 is not None and self.first_2xx_after_503 is None:
                self.first_2xx_after_503 = now


class Worker(threading.Thread):
    def __init__(self, wid, args, shared):
        super().__init__(daemon=True)
        self.wid, self.args, self.sh = wid, args, shared
        u = urllib.parse.urlsplit(args.url)
        self.host, self.port = u.hostname, u.port or 80
        self.conn = None
        self.n = 0
        self.mine = []

    def dropped(self, reused):
        """Closes the connection; True when it was a kept-alive one (counted
        as stale): the request is sent again on a new connection."""
        self.conn.close()
        self.conn = None
        if reused:
            with self.sh.lock:
                self.sh.stale += 1
        return reused

    def failed(self, method, path, e):
        """A request that got no answer: counted as status 0, with its error."""
        self.sh.seen(0, None)
        with self.sh.lock:
            self.sh.errors.append("%s %s: %s" % (method, path, e))
        return 0, None

    def call(self, method, path, body):
        """One request; 503 waited out and sent again. (status, json)."""
        h = {"Authorization": "Bearer " + self.args.key, "Content-Type": "application/json"}
        data = json.dumps(body, ensure_ascii=False).encode()
        while True:
            reused = self.conn is not None
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            try:
                self.conn.request(method, path, body=data, headers=h)
            except (BrokenPipeError, ConnectionResetError):
                # A kept-alive connection nginx closed meanwhile (its old
                # workers do on a reload): the request never left; send it
                # on a new connection, as HTTP clients do.
                if self.dropped(reused):
                    continue
                self.sh.seen(0, None)
                return 0, None
            try:
                r = self.conn.getresponse()
                text = r.read().decode("utf-8", "replace")
            except (ConnectionResetError, http.client.RemoteDisconnected) as e:
                # The same race seen from the other side: nginx's old worker
                # closed the idle connection as the request arrived, and
                # answered nothing (a reset or a close before any status
                # line). On a kept-alive connection HTTP clients send the
                # request again (RFC 9112, 9.3.1); it is safe here because
                # every request carries its idempotency key or lease.
                if self.dropped(reused):
                    continue
                return self.failed(method, path, e)
            except (OSError, http.client.HTTPException) as e:
                self.dropped(False)
                return self.failed(method, path, e)
            self.sh.seen(r.status, r)
            if r.status != 503:
                try:
                    return r.status, json.loads(text)
                except ValueError:
                    return r.status, None
            try:
                wait = min(float(r.getheader("Retry-After") or 1), 1.0)
            except ValueError:
                wait = 1.0
            time.sleep(wait * (0.5 + random.random() / 2))

    def run(self):
        while not os.path.exists(self.args.stop):
            self.n += 1
            key = "%s:%d:%d:заявка·申请" % (self.args.prefix, self.wid, self.n)
            payload = {"contact": self.n, "note": REASONS[self.n % 3]}
            st, j = self.call("POST", "/v1/runs", {
                "key": key, "payload": payload, "workflow_version": "upgrade@1",
                "trigger": "upgrade"})
            if st not in (200, 201) or not j:
                self.error("claim %s: %s %s" % (key, st, j))
                continue
            with self.sh.lock:
                self.sh.claims.append(key)
            if st == 200:
                continue  # our own 503'd claim had been written after all: never here
            contact = "up-%d-%d" % (self.wid, self.n)
            st, o = self.call("POST", "/v1/runs/%s/output" % urllib.parse.quote(key, safe=""), {
                "lease_owner": j.get("lease_owner"), "version": j.get("version"),
                "contract": "crm_tag_unsampled",
                "output": {"tag": "lead", "confidence": 0.97, "reason": REASONS[self.n % 3]},
                "model": {"provider": "upgrade", "name": "stand-in", "revision": "1"},
                "effect": {"type": "crm.tag", "target": "demo_http",
                           "payload": {"contact_id": contact}},
                "source_url": "https://crm.example/c/%d" % self.n,
                "requested_by": "upgrade-workflow@example.com"})
            if st != 202 or not o or o.get("outcome") != "approved":
                self.error("output %s: %s %s" % (key, st, o))
                continue
            with self.sh.lock:
                self.sh.effects.append({"key": key, "contact_id": contact})
            self.mine.append((key, payload))
            if self.n % 4 == 0:
                # a duplicate claim of an earlier key: 200, nothing new
                old, old_payload = random.choice(self.mine)
                st, d = self.call("POST", "/v1/runs", {
                    "key": old, "payload": old_payload, "workflow_version": "upgrade@1",
                    "trigger": "upgrade"})
                if st != 200 or not d or d.get("outcome") != "duplicate":
                    self.error("duplicate claim %s: %s %s" % (old, st, d))

    def error(self, what):
        with self.sh.lock:
            self.sh.errors.append(what[:400])
        time.sleep(0.2)


def main():
    p = argparse.ArgumentParser()
    for a in ("--url", "--key", "--prefix", "--stop", "--out"):
        p.add_argument(a, required=True)
    p.add_argument("--workers", type=int, default=4)
    args = p.parse_args()
    sh = Shared()
    ws = [Worker(i, args, sh) for i in range(args.workers)]
    for w in ws:
        w.start()
    for w in ws:
        w.join()
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"status": sh.status, "no_retry_after": sh.no_retry_after,
                   "first_503": sh.first_503, "last_503": sh.last_503,
                   "first_2xx_after_503": sh.first_2xx_after_503,
                   "stale_connections": sh.stale, "claims": sh.claims, "effects": sh.effects, "errors": sh.errors[:20],
                   "error_count": len(sh.errors)}, f, ensure_ascii=False)


if __name__ == "__main__":
    main()

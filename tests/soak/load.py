#!/usr/bin/python3
"""Mixed load for the soak (tests/soak/soak.sh): what a busy n8n instance
sends oncegate, for a given time, from several workers at once.

    load.py --url URL --key-file FILE --prefix P --seconds N [--workers W]
            --out STATS.json

The API key is read from a file so it never appears on a command line.
Each worker repeats one of four journeys, in turn:

  support   claim a new key, the same claim again (a duplicate: 200 with the
            run's state), a valid support_reply output (202, one approval
            link), the approval page as a member of group support (200, the
            card and its CSRF value), the approve POST (303), and the page
            again (the link is used: never 200 with a form)
  crm       claim a new key and a crm_tag output adding lead: approved by the
            contract's rules and enqueued at once (or, for the sampled share,
            an approval link that is then approved like the above)
  conflict  an earlier key claimed with a different payload (409
            payload_mismatch: nothing changes)
  status    an earlier key read back (GET /v1/runs/KEY, 200)

Every answer outside the journey's expected statuses is an error; the first
few are kept with their bodies (approval links masked). At the end STATS.json
holds the counts: requests by journey and status, runs created, approvals
decided, effects enqueued by type, errors. Exit status 0 when there were no
errors.
"""

import argparse
import http.client
import json
import re
import sys
import threading
import time
import urllib.parse

APPROVER = {"X-Dev-User": "soak-approver@example.com", "X-Dev-Groups": "support,sales"}
REQUESTER = "soak-requester@example.com"
CSRF_RE = re.compile(r'<input[^>]*name="csrf"[^>]*value="([^"]+)"|'
                     r'<input[^>]*value="([^"]+)"[^>]*name="csrf"')
TOKEN_RE = re.compile(r"/approve/([A-Za-z0-9_-]{43})")


def mask(text):
    return TOKEN_RE.sub("/approve/[token]", text)


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = {}
        self.counts = {"runs": 0, "duplicates": 0, "conflicts": 0, "approved_by_person": 0,
                       "auto_approved": 0, "rate_limited": 0, "email.send": 0, "crm.tag": 0,
                       "errors": 0}
        self.errors = []
        self.keys = []

    def request(self, journey, status):
        with self.lock:
            k = "%s %s" % (journey, status)
            self.requests[k] = self.requests.get(k, 0) + 1

    def add(self, name, n=1):
        with self.lock:
            self.counts[name] += n

    def error(self, what):
        with self.lock:
            self.counts["errors"] += 1
            if len(self.errors) < 20:
                self.errors.append(mask(what)[:600])

    def remember(self, key, payload):
        with self.lock:
            self.keys.append((key, payload))

    def pick(self, n):
        with self.lock:
            return self.keys[n % len(self.keys)] if self.keys else None


class Client:
    """One keep-alive connection to nginx, reopened after any failure."""

    def __init__(self, url, api_key):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port or 80
        self.api_key = api_key
        self.conn = None

    def call(self, method, path, body=None, headers=None, api=True):
        h = dict(headers or {})
        if api:
            h["Authorization"] = "Bearer " + self.api_key
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            h["Content-Type"] = "application/json"
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
            try:
                self.conn.request(method, path, body=body, headers=h)
                r = self.conn.getresponse()
                data = r.read().decode("utf-8", "replace")
                if r.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, data, r
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                # A request that may have reached the server is not resent
                # blindly: the caller sees status 0 and counts an error.
                if attempt == 2 or method != "GET":
                    return 0, "", None
        return 0, "", None


def jload(text):
    try:
        return json.loads(text)
    except ValueError:
        return None


class Worker(threading.Thread):
    def __init__(self, wid, args, api_key, stats, deadline):
        super().__init__(daemon=True)
        self.wid, self.args, self.stats, self.deadline = wid, args, stats, deadline
        self.client = Client(args.url, api_key)
        self.n = 0

    def expect(self, journey, what, status, body, allowed):
        self.stats.request(journey, status)
        if status not in allowed:
            self.stats.error("%s: %s answered %s: %s" % (journey, what, status, body[:300]))
            return False
        return True

    def claim(self, journey, key, payload):
        path = "/v1/runs"
        st, body, _ = self.client.call("POST", path, {
            "key": key, "payload": payload, "workflow_version": "soak@1",
            "trigger": "soak"})
        if not self.expect(journey, "claim " + key, st, body, (201,)):
            return None
        j = jload(body) or {}
        self.stats.add("runs")
        self.stats.remember(key, payload)
        return j

    def approve(self, journey, url):
        m = TOKEN_RE.search(url)
        if not m:
            self.stats.error("%s: no approval link in %s" % (journey, url))
            return False
        path = "/approve/" + m.group(1)
        st, body, _ = self.client.call("GET", path, headers=APPROVER, api=False)
        if not self.expect(journey, "approval page", st, body, (200,)):
            return False
        c = CSRF_RE.search(body)
        if not c:
            self.stats.error("%s: the approval page has no CSRF field" % journey)
            return False
        form = urllib.parse.urlencode({"decision": "approve", "csrf": c.group(1) or c.group(2),
                                       "reason": "soak"})
        h = dict(APPROVER)
        h["Content-Type"] = "application/x-www-form-urlencoded"
        h["Origin"] = self.args.url
        # nginx limits approval POSTs per address (people are slower than
        # this load): a 429 is waited out and the same POST sent again.
        for _ in range(30):
            st, body, r = self.client.call("POST", path, form, headers=h, api=False)
            if st != 429:
                break
            self.stats.request(journey, st)
            self.stats.add("rate_limited")
            time.sleep(float(r.getheader("Retry-After") or 1) if r else 1)
        if not self.expect(journey, "approve POST", st, body, (303,)):
            return False
        self.stats.add("approved_by_person")
        # The used link shows what happened, never a form that would act.
        st, body, _ = self.client.call("GET", path, headers=APPROVER, api=False)
        if self.expect(journey, "used approval page", st, body, (200, 404, 410)) and \
                'name="csrf"' in body:
            self.stats.error("%s: a used approval link still shows a form" % journey)
        return True

    def support(self):
        key = "%s:s:%d:%d" % (self.args.prefix, self.wid, self.n)
        payload = {"ticket": self.n, "worker": self.wid, "text": "Where is my order? ✓"}
        j = self.claim("support", key, payload)
        if j is None:
            return
        st, body, _ = self.client.call("POST", "/v1/runs", {
            "key": key, "payload": payload, "workflow_version": "soak@1", "trigger": "soak"})
        if self.expect("support", "duplicate claim", st, body, (200,)):
            self.stats.add("duplicates")
        st, body, _ = self.client.call("POST", "/v1/runs/%s/output" % urllib.parse.quote(key, safe=""), {
            "lease_owner": j.get("lease_owner"), "version": j.get("version"),
            "contract": "support_reply",
            "output": {"subject": "Re: ticket %d" % self.n,
                       "body": "Hello, your order %d has shipped and arrives within three days." % self.n,
                       "confidence": 0.5},
            "model": {"provider": "soak", "name": "soak-model", "revision": "1"},
            "effect": {"type": "email.send", "target": "demo_smtp",
                       "payload": {"to": "customer-%d-%d@example.com" % (self.wid, self.n)}},
            "source_url": "https://crm.example/t/%d" % self.n, "requested_by": REQUESTER})
        if not self.expect("support", "output", st, body, (202,)):
            return
        out = jload(body) or {}
        urls = [a.get("url", "") for a in out.get("approvals", [])]
        if out.get("outcome") != "awaiting_human" or not urls:
            self.stats.error("support: output did not wait for a person: %s" % body[:300])
            return
        if self.approve("support", urls[0]):
            self.stats.add("email.send")

    def crm(self):
        key = "%s:c:%d:%d" % (self.args.prefix, self.wid, self.n)
        payload = {"contact": self.n, "worker": self.wid}
        j = self.claim("crm", key, payload)
        if j is None:
            return
        st, body, _ = self.client.call("POST", "/v1/runs/%s/output" % urllib.parse.quote(key, safe=""), {
            "lease_owner": j.get("lease_owner"), "version": j.get("version"),
            "contract": "crm_tag",
            "output": {"tag": "lead", "confidence": 0.95, "reason": "asked for a demo"},
            "model": {"provider": "soak", "name": "soak-model", "revision": "1"},
            "effect": {"type": "crm.tag", "target": "demo_http",
                       "payload": {"contact_id": "%d-%d" % (self.wid, self.n)}},
            "source_url": "https://crm.example/c/%d" % self.n, "requested_by": REQUESTER})
        if not self.expect("crm", "output", st, body, (202,)):
            return
        out = jload(body) or {}
        if out.get("outcome") == "approved":
            self.stats.add("auto_approved")
        elif out.get("outcome") == "awaiting_human" and out.get("approvals"):
            if not self.approve("crm", out["approvals"][0].get("url", "")):
                return
        else:
            self.stats.error("crm: unexpected output answer: %s" % body[:300])
            return
        self.stats.add("crm.tag")

    def conflict(self):
        old = self.stats.pick(self.n * 7919 + self.wid)
        if old is None:
            return
        key, payload = old
        st, body, _ = self.client.call("POST", "/v1/runs", {
            "key": key, "payload": {"other": payload}, "workflow_version": "soak@1",
            "trigger": "soak"})
        if self.expect("conflict", "claim with another payload", st, body, (409,)):
            self.stats.add("conflicts")

    def status(self):
        old = self.stats.pick(self.n * 104729 + self.wid)
        if old is None:
            return
        st, body, _ = self.client.call("GET", "/v1/runs/" + urllib.parse.quote(old[0], safe=""))
        self.expect("status", "status", st, body, (200,))

    def run(self):
        journeys = (self.support, self.crm, self.support, self.conflict, self.crm, self.status)
        while time.monotonic() < self.deadline:
            try:
                journeys[self.n % len(journeys)]()
            except Exception as exc:  # a bug in this script must not pass as load
                self.stats.error("worker %d: %r" % (self.wid, exc))
            self.n += 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--key-file", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    api_key = open(args.key_file).read().strip()
    stats = Stats()
    deadline = time.monotonic() + args.seconds
    workers = [Worker(i, args, api_key, stats, deadline) for i in range(args.workers)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    with open(args.out, "w") as f:
        json.dump({"requests": stats.requests, "counts": stats.counts,
                   "errors": stats.errors, "prefix": args.prefix}, f, indent=1, sort_keys=True)
    return 1 if stats.counts["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())

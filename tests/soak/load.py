#!/usr/bin/python3
"""Mixed load for the soak (tests/soak/soak.sh): what a busy n8n instance
sends oncegate, for a given time, from several workers at once.

    load.py --url URL --key-file FILE [--key-file-b FILE] --prefix P
            --seconds N [--workers W] [--mails long|short] --out STATS.json
    load.py check --load STATS.json --smtp MAIL.jsonl --requests REQ.json
            --effects EFFECTS.tsv --out RESULT.json

The API keys are read from files so they never appear on a command line.
With --key-file-b there are two tenants (API clients) and every support and
crm journey runs for both with the same business key, built from the keys
two tenants share in tests/data/corpus (Cyrillic, Han, Arabic, Hebrew,
emoji, 200 characters long), each with its own mail or tag. --mails long
(the default) drafts the corpus mails at the contract's maxima (200 + 5,000
code points, every script), in turn to 100 recipients, to 10 (both with the
test contract support_list of tests/data/contracts-test, which the stack
must load: the shipped support_reply takes one address) and to one (the
shipped support_reply); --mails short drafts notes of 40 + 60 code points in
every script to three recipients, or to one.
Each worker repeats one of four journeys, in turn:

  support   claim a new key, the same claim again (a duplicate: 200 with the
            run's state), a valid output (202, one approval link), the
            approval page as a member of group support (200, the card and
            its CSRF value), the approve POST (303), and the page again (the
            link is used: never 200 with a form)
  crm       claim a new key and a crm_tag output adding lead, the payload
            naming only the contact (the tag comes from the output): approved
            by the contract's rules and enqueued at once (or, for the sampled
            share, an approval link that is then approved like the above)
  conflict  an earlier key claimed with a different payload (422
            payload_mismatch: nothing changes)
  status    an earlier key read back (GET /v1/runs/KEY, 200)

Every answer outside the journey's expected statuses is an error; the first
few are kept with their bodies (approval links masked). At the end STATS.json
holds the counts: requests by journey and status, runs created, approvals
decided, effects enqueued by type, errors, and every delivery that was
approved or auto-approved: (tenant, key, effect) with the recipients,
subject and body, or the tag payload, that must arrive. Exit status 0 when
there were no errors.

check: every provider record against what was approved. EFFECTS.tsv holds
the outbox rows of the run (tenant, key, effect type, provider key, state,
provider id). Per (tenant, key, effect): exactly one mail at the SMTP sink
(told apart by its first recipient, which names tenant and key) whose
recipients, subject and body, MIME-decoded, are byte for byte the approved
ones, and whose queue id is the provider id on that tenant's effect; exactly
one committed request at the HTTP provider sent with the provider key stored
for that tenant's effect (each HTTP delivery is matched to its effect by its
Idempotency-Key: the key of exactly one effect, of that tenant), whose JSON
body is the approved payload with the tag from the output, and whose id is
the provider id on that tenant's effect. No two effects share a provider key or
a Message-ID; nothing arrived that was not approved. Writes RESULT.json;
exit status 0 when all of it holds.
"""

import argparse
import collections
import http.client
import json
import os
import re
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                                "corpus"))
import corpus  # noqa: E402  (tests/data/corpus/corpus.py)

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
        self.deliveries = []

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

    def remember(self, tenant, key, payload):
        with self.lock:
            self.keys.append((tenant, key, payload))

    def deliver(self, d):
        with self.lock:
            self.deliveries.append(d)

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
        # tenant name -> its connection; tenant a is the stack's client
        self.clients = collections.OrderedDict(
            (name, Client(args.url, key)) for name, key in api_key)
        self.client = next(iter(self.clients.values()))
        self.n = 0
        self.keys = corpus.shared_keys()
        self.mails = corpus.long_mails() if args.mails == "long" else corpus.brief_mails()

    def business_key(self, kind):
        """RUN:kind:worker:n: + a key of the corpus, at most 200 characters:
        the same for every tenant."""
        return corpus.fit_key("%s:%s:%d:%d:" % (self.args.prefix, kind, self.wid, self.n),
                              self.keys[(self.n * 7 + self.wid) % len(self.keys)])

    def recipients(self, tenant, kind):
        """The contract and the recipients: a first address that names
        tenant, worker and journey (how the check tells mails apart), then
        corpus addresses: 100 in all, 10, or that one alone, in turn, for
        long mails; three or one for short mails. One recipient goes with
        the shipped support_reply ("to": one address), a list with the test
        contract support_list."""
        first = "customer+%s-%s-%d-%d@soak.example.com" % (kind, tenant, self.wid, self.n)
        if self.args.mails == "short":
            more = 2 if self.n % 2 == 0 else 0
        else:
            more = (99, 9, 0)[self.n % 3]
        if more == 0:
            return "support_reply", [first]
        return "support_list", [first] + corpus.recipients(more)

    def expect(self, journey, what, status, body, allowed):
        self.stats.request(journey, status)
        if status not in allowed:
            self.stats.error("%s: %s answered %s: %s" % (journey, what, status, body[:300]))
            return False
        return True

    def claim(self, journey, key, payload, tenant):
        path = "/v1/runs"
        st, body, _ = self.client.call("POST", path, {
            "key": key, "payload": payload, "workflow_version": "soak@1",
            "trigger": "soak"})
        if not self.expect(journey, "claim " + key, st, body, (201,)):
            return None
        j = jload(body) or {}
        self.stats.add("runs")
        self.stats.remember(tenant, key, payload)
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
        key = self.business_key("s")
        for i, tenant in enumerate(self.clients):
            self.client = self.clients[tenant]
            self.support_one(tenant, key, self.mails[(self.n + i) % len(self.mails)])

    def support_one(self, tenant, key, mail):
        payload = {"ticket": self.n, "worker": self.wid, "tenant": tenant,
                   "text": mail["subject"]}
        j = self.claim("support", key, payload, tenant)
        if j is None:
            return
        st, body, _ = self.client.call("POST", "/v1/runs", {
            "key": key, "payload": payload, "workflow_version": "soak@1", "trigger": "soak"})
        if self.expect("support", "duplicate claim", st, body, (200,)):
            self.stats.add("duplicates")
        contract, to = self.recipients(tenant, "s")
        output = {"subject": mail["subject"], "body": mail["body"], "tone": "formal",
                  "confidence": 0.5}
        st, body, _ = self.client.call("POST", "/v1/runs/%s/output" % urllib.parse.quote(key, safe=""), {
            "lease_owner": j.get("lease_owner"), "version": j.get("version"),
            "contract": contract, "output": output,
            "model": {"provider": "soak", "name": "soak-model", "revision": "1"},
            "effect": {"type": "email.send", "target": "demo_smtp",
                       "payload": {"to": to if contract == "support_list" else to[0]}},
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
            self.stats.deliver({"tenant": tenant, "key": key, "effect": "email.send",
                                "to": to, "subject": mail["subject"], "body": mail["body"],
                                "mail": mail["id"]})

    def crm(self):
        key = self.business_key("c")
        reasons = corpus.crm_reasons()
        for i, tenant in enumerate(self.clients):
            self.client = self.clients[tenant]
            self.crm_one(tenant, key, reasons[(self.n + i) % len(reasons)]["reason"])

    def crm_one(self, tenant, key, reason):
        payload = {"contact": self.n, "worker": self.wid, "tenant": tenant}
        j = self.claim("crm", key, payload, tenant)
        if j is None:
            return
        # The contact names tenant, worker and journey; the crm_tag contract
        # closes the payload to the contact (the tag comes from the output).
        effect = {"contact_id": "%s-%d-%d" % (tenant, self.wid, self.n)}
        st, body, _ = self.client.call("POST", "/v1/runs/%s/output" % urllib.parse.quote(key, safe=""), {
            "lease_owner": j.get("lease_owner"), "version": j.get("version"),
            "contract": "crm_tag",
            "output": {"tag": "lead", "confidence": 0.95,
                       "reason": reason if self.args.mails == "long" else "asked for a demo"},
            "model": {"provider": "soak", "name": "soak-model", "revision": "1"},
            "effect": {"type": "crm.tag", "target": "demo_http", "payload": effect},
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
        # what must arrive: the payload with the tag from the output
        self.stats.deliver({"tenant": tenant, "key": key, "effect": "crm.tag",
                            "payload": dict(effect, tag="lead")})

    def conflict(self):
        old = self.stats.pick(self.n * 7919 + self.wid)
        if old is None:
            return
        tenant, key, payload = old
        self.client = self.clients[tenant]
        st, body, _ = self.client.call("POST", "/v1/runs", {
            "key": key, "payload": {"other": payload}, "workflow_version": "soak@1",
            "trigger": "soak"})
        if self.expect("conflict", "claim with another payload", st, body, (422,)):
            self.stats.add("conflicts")

    def status(self):
        old = self.stats.pick(self.n * 104729 + self.wid)
        if old is None:
            return
        self.client = self.clients[old[0]]
        st, body, _ = self.client.call("GET", "/v1/runs/" + urllib.parse.quote(old[1], safe=""))
        self.expect("status", "status", st, body, (200,))

    def run(self):
        journeys = (self.support, self.crm, self.support, self.conflict, self.crm, self.status)
        while time.monotonic() < self.deadline:
            try:
                journeys[self.n % len(journeys)]()
            except Exception as exc:  # a bug in this script must not pass as load
                self.stats.error("worker %d: %r" % (self.wid, exc))
            self.n += 1


def check(args):
    """Every provider record against what was approved (see the module's
    text). Returns the exit status."""
    load = json.load(open(args.load, encoding="utf-8"))
    deliveries = load.get("deliveries", [])
    effects = corpus.read_tsv(args.effects, 6)   # client, key, type, provider_key, state, provider_id
    requests = json.load(open(args.requests, encoding="utf-8"))
    mails = [json.loads(line) for line in open(args.smtp, encoding="utf-8") if line.strip()]
    out = collections.OrderedDict()
    bad = collections.Counter()
    examples = []

    def fail(kind, what, n=1):
        bad[kind] += n
        if len(examples) < 20:
            examples.append("%s: %s" % (kind, what[:400]))

    def only_one(got, what, unit):
        """The one delivery of what among got; None when it was lost. A
        second is a finding (doubled)."""
        if not got:
            fail("lost", what)
            return None
        if len(got) > 1:
            fail("doubled", "%s (%d %s)" % (what, len(got), unit))
        return got[0]

    eff = {}
    by_pkey = collections.defaultdict(list)   # provider key -> the effects stored with it
    for client, key, etype, pkey, state, pid in effects:
        eff[(client, key, etype)] = {"provider_key": pkey, "state": state, "provider_id": pid}
        by_pkey[pkey].append((client, key, etype))
    out["deliveries_approved"] = len(deliveries)
    out["tenants"] = sorted({d["tenant"] for d in deliveries})
    by_key = collections.defaultdict(set)
    for d in deliveries:
        by_key[(d["key"], d["effect"])].add(d["tenant"])
    out["keys_shared_by_two_tenants"] = sum(1 for t in by_key.values() if len(t) > 1)

    # The SMTP sink: told apart by the first recipient.
    by_first = collections.defaultdict(list)
    for m in mails:
        rc = m.get("rcpt_tos") or [""]
        by_first[rc[0].lower()].append(m)
    # The HTTP provider: committed effect requests, each matched to its
    # effect by its Idempotency-Key, which must be the stored provider key
    # of exactly one effect of the run.
    by_effect = collections.defaultdict(list)
    http_requests = http_committed = 0
    for r, b, pkey in corpus.effect_requests(requests):
        http_requests += 1
        if not r.get("committed"):
            continue
        http_committed += 1
        owners = by_pkey.get(pkey, [])
        if len(owners) != 1:
            fail("HTTP delivery under a key of %d effects" % len(owners),
                 "%r: %s" % (pkey, json.dumps(b, ensure_ascii=False)[:200]))
            continue
        by_effect[owners[0]].append((r, b if isinstance(b, dict) else {}))
    out["mails_received"] = len(mails)
    out["http_effect_requests"] = http_requests
    out["http_committed"] = http_committed

    seen_mail, seen_http = set(), set()
    for d in deliveries:
        what = "%s %s %r" % (d["tenant"], d["effect"], d["key"])
        e = eff.get((d["tenant"], d["key"], d["effect"]))
        if e is None:
            fail("approved but no outbox row", what)
            continue
        if d["effect"] == "email.send":
            first = d["to"][0].lower()
            seen_mail.add(first)
            m = only_one(by_first.get(first, []), what, "mails")
            if m is None:
                continue
            if not corpus.same_recipients(m, d["to"]):
                fail("wrong recipients", "%s: %d of %d" % (what, len(m.get("rcpt_tos", [])),
                                                        len(d["to"])))
            try:
                mid, subject, body = corpus.mime_text(m.get("data", ""))
            except Exception as exc:  # a message Python cannot read is a finding
                fail("unreadable mail", "%s: %r" % (what, exc))
                continue
            if subject != d["subject"]:
                fail("subject differs", "%s: %r != %r" % (what, subject[:80], d["subject"][:80]))
            if body != d["body"]:
                fail("body differs", "%s: %d != %d characters" % (
                    what, len(body or ""), len(d["body"])))
            if e["provider_id"] != m.get("queue_id"):
                fail("provider id of another delivery", "%s: %s != %s" % (
                    what, e["provider_id"], m.get("queue_id")))
        else:
            ident = (d["tenant"], d["key"], d["effect"])
            seen_http.add(ident)
            got = only_one(by_effect.get(ident, []), what, "committed")
            if got is None:
                continue
            r, body = got
            if body != d["payload"]:
                fail("payload differs", "%s: %s != %s" % (
                    what, json.dumps(body, ensure_ascii=False)[:200],
                    json.dumps(d["payload"], ensure_ascii=False)[:200]))
            if corpus.header_text(r.get("idempotency_key")) != e["provider_key"]:
                fail("sent with another tenant's provider key", "%s: %r != %r" % (
                    what, corpus.header_text(r.get("idempotency_key")), e["provider_key"]))
            if e["provider_id"] != r.get("id"):
                fail("provider id of another delivery", "%s: %s != %s" % (
                    what, e["provider_id"], r.get("id")))
        if e["state"] != "completed":
            fail("effect not completed", "%s: %s" % (what, e["state"]))
    for first in by_first:
        if first not in seen_mail:
            fail("received but not approved", "mail to %s" % first)
    for ident in by_effect:
        if ident not in seen_http:
            fail("received but not approved", "%s %s %r" % ident)

    # Provider keys and Message-IDs name one effect each.
    pkeys = collections.Counter(e["provider_key"] for e in eff.values())
    shared = sum(1 for n in pkeys.values() if n > 1)
    if shared:
        fail("provider key shared by two effects", "%d keys" % shared, shared)
    mids = collections.Counter(corpus.mime_text(m.get("data", ""))[0] for m in mails)
    mid_shared = sum(1 for n in mids.values() if n > 1)
    if mid_shared:
        fail("Message-ID shared by two mails", "%d Message-IDs" % mid_shared, mid_shared)

    out["doubled"] = bad["doubled"]
    out["lost"] = bad["lost"]
    out["findings"] = dict(bad)
    out["examples"] = examples
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    return 1 if bad else 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "check":
        p = argparse.ArgumentParser(description="check: provider records against approvals")
        p.add_argument("cmd")
        p.add_argument("--load", required=True)
        p.add_argument("--smtp", required=True)
        p.add_argument("--requests", required=True)
        p.add_argument("--effects", required=True)
        p.add_argument("--out", required=True)
        return check(p.parse_args())
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--key-file", required=True)
    p.add_argument("--client", default="dev", help="the API client of --key-file")
    p.add_argument("--key-file-b", help="a second tenant's API key")
    p.add_argument("--client-b", help="the API client of --key-file-b")
    p.add_argument("--mails", choices=("long", "short"), default="long")
    p.add_argument("--prefix", required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    keys = [(args.client, open(args.key_file).read().strip())]
    if args.key_file_b:
        if not args.client_b:
            p.error("--key-file-b needs --client-b")
        keys.append((args.client_b, open(args.key_file_b).read().strip()))
    stats = Stats()
    deadline = time.monotonic() + args.seconds
    workers = [Worker(i, args, keys, stats, deadline) for i in range(args.workers)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"requests": stats.requests, "counts": stats.counts,
                   "errors": stats.errors, "prefix": args.prefix,
                   "tenants": [k[0] for k in keys], "mails": args.mails,
                   "deliveries": stats.deliveries}, f, indent=1, sort_keys=True,
                  ensure_ascii=False)
    return 1 if stats.counts["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())

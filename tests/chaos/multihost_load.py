#!/usr/bin/python3
"""The workflows and approvers of tests/chaos/multihost.sh, and its checks.

    multihost_load.py load --base URL --run RUN --runs N --rate R
        --workers W --public-url URL --out DIR [--client NAME]
        [--client-b NAME] [--mails long|short] [--lease-seconds S]
    multihost_load.py check --run RUN --runs N --out DIR --requests FILE
        --smtp FILE --runs-tsv FILE --approvals-tsv FILE --effects-tsv FILE

load: N business keys, started R per second by W threads. DIR/api_key is
the first tenant's API key (client --client), DIR/api_key_b, with
--client-b, a second tenant's: each key is then driven by both tenants, one
after the other, each with its own model output and effect. Keys are
RUN:N: followed by one of the keys two tenants share in tests/data/corpus
(Cyrillic, Han, Arabic, Hebrew, emoji, up to 200 characters). Each
(tenant, key) goes the way a workflow and a person drive oncegate through
nginx:
  1. claim the key (POST /v1/runs) twice at the same moment: one answer must
     be 201, the other a duplicate;
  2. hand in the model's output (POST /v1/runs/{key}/output) -> 202 and the
     approval link: for odd N a mail from the corpus (--mails long: at the
     contract's 200 + 5,000 code points, every script; short: notes of
     40 + 60 code points) for target demo_smtp, to a list (10 recipients,
     or 3 for short mails) under the test contract support_list of
     tests/data/contracts-test, which the stack must load, or, for every
     other odd N, to one address under the shipped support_reply; for even
     N a crm_tag (churn_risk, so it needs a person) whose 500-character
     multilingual reason is shown to the approver, its payload naming only
     the contact (the tag comes from the output);
  3. the approver opens the page (GET /approve/{token}) and approves with
     its CSRF value (POST, decision=approve) -> 303;
  4. the key is claimed again afterwards (a late duplicate: 200 with the
     run's state) and, for every tenth key, with another payload (422).
Every request goes on a new connection with a timeout; 502, 503, 504, a
timeout or a refused/reset connection is retried with the same key, lease,
token and CSRF value, a bounded number of times, as a workflow would. A
claim found `processing` under someone else's live lease (an earlier claim
of ours whose answer was lost) is retried until the lease runs out and the
key is reclaimed; an output refused with 409 lease_lost goes back to the
claim. Approval tokens stay in memory: the answers file masks them.
Writes DIR/answers.jsonl (one line per HTTP answer) and DIR/flows.jsonl
(one line per (tenant, key): how its workflow ended, what it approved).
Runs, approvals and effects are named TENANT|KEY throughout.

check: joins those files with the providers' records (the HTTP provider's
GET /_requests, the SMTP sink's record) and tab-separated dumps of the run,
approval and outbox rows (first column TENANT|KEY), prints the result
table's figures as NAME=VALUE lines for the shell script, and exits 0 only
when nothing was doubled, lost or answered outside the expected set. A
mail is told apart by its first recipient (which names tenant and key);
an HTTP delivery by its Idempotency-Key, which must be the stored provider
key of exactly one effect, and its body must be that effect's approved
payload (the contact, which names tenant and key, and the tag from the
output; the burst's {"burst": N}); mails must arrive with the approved
recipients, subject and body, byte for byte after MIME decoding; no two
effects may share a provider key.
"""

import argparse
import collections
import http.client
import json
import os
import random
import re
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                                "corpus"))
import corpus  # noqa: E402  (tests/data/corpus/corpus.py)

RETRYABLE = {0, 502, 503, 504}
MAX_TRIES = 80              # per request, with 0.25-0.5 s between tries
REQUEST_TIMEOUT = 30.0      # s; nginx's fastcgi_read_timeout is 60 s
LEASE_SECONDS = 8           # a claim's lease (--lease-seconds): a lost 201 costs this long
APPROVER = "mh-approver@example.com"
REQUESTER = "mh-requester@example.com"
CSRF_RE = re.compile(r'<input[^>]*name="csrf"[^>]*>')
VALUE_RE = re.compile(r'value="([A-Za-z0-9_-]+)"')
TOKEN_RE = re.compile(r"/approve/([A-Za-z0-9_-]+)$")

# Answers allowed per step (anything else is counted as unexpected).
EXPECTED = {
    "claim": {201, 200},
    "claim_dup": {201, 200},
    "output": {202, 409},
    "page": {200},
    "decide": {303, 409, 410},
    "replay": {200},
    "conflict": {422},
}


class Load:
    def __init__(self, args):
        self.args = args
        u = urllib.parse.urlsplit(args.base)
        self.host, self.port = u.hostname, u.port or 80
        self.lock = threading.Lock()
        self.answers = open(args.out + "/answers.jsonl", "w", encoding="utf-8")
        self.flows = open(args.out + "/flows.jsonl", "w", encoding="utf-8")
        self.next = 0
        self.t0 = time.monotonic()
        self.tenants = []   # (client name, Authorization value)
        with open(args.out + "/api_key") as f:
            self.tenants.append((args.client, "Bearer " + f.read().strip()))
        if args.client_b:
            with open(args.out + "/api_key_b") as f:
                self.tenants.append((args.client_b, "Bearer " + f.read().strip()))
        self.keys = corpus.shared_keys()
        self.mails = corpus.long_mails() if args.mails == "long" else corpus.brief_mails()
        self.reasons = corpus.crm_reasons()
        self.local = threading.local()

    # --- one HTTP exchange, recorded ---------------------------------------

    def request(self, step, key, method, path, body=None, headers=None):
        h = {"Connection": "close"}
        if headers:
            h.update(headers)
        started = time.monotonic()
        status, text, location = 0, "", None
        err = None
        conn = http.client.HTTPConnection(self.host, self.port,
                                          timeout=REQUEST_TIMEOUT)
        try:
            conn.request(method, path, body=body, headers=h)
            resp = conn.getresponse()
            status = resp.status
            location = resp.getheader("Location")
            text = resp.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:
            err = type(exc).__name__
        finally:
            conn.close()
        ms = int((time.monotonic() - started) * 1000)
        rec = {"t": round(started - self.t0, 3), "step": step, "key": key,
               "status": status, "ms": ms}
        if err:
            rec["error"] = err
        doc = None
        if text.startswith("{"):
            try:
                doc = json.loads(text)
            except ValueError:
                doc = None
        if isinstance(doc, dict):
            for name in ("outcome", "state", "attempt", "error"):
                if name in doc and name not in rec:
                    rec[name] = doc[name]
        with self.lock:
            self.answers.write(json.dumps(rec, ensure_ascii=False) + "\n")
        return status, doc, text, location

    def api(self, step, key, method, path, doc):
        # answers are recorded under TENANT|KEY
        return self.request(step, self.local.tenant + "|" + key, method, path, json.dumps(doc),
                            {"Authorization": self.local.auth,
                             "Content-Type": "application/json"})

    def api_as(self, who, *args):
        """api() on another thread, for the tenant who = (name, auth)."""
        self.local.tenant, self.local.auth = who
        return self.api(*args)

    @staticmethod
    def pause():
        time.sleep(random.uniform(0.25, 0.5))

    # --- the workflow of one key ---------------------------------------------

    def claim(self, key, payload, first):
        """(owner, version) once claimed, or (None, state) when the key is
        settled (not claimable), or (None, None) after too many tries."""
        body = {"key": key, "payload": payload, "workflow_version": "mh@1",
                "trigger": "chaos:multihost", "lease_seconds": self.args.lease_seconds}
        for _ in range(MAX_TRIES):
            answers = []
            if first:
                # The same claim twice at the same moment (n8n retrying
                # while the first is still in flight).
                dup = []
                who = (self.local.tenant, self.local.auth)
                t = threading.Thread(target=lambda: dup.append(
                    self.api_as(who, "claim_dup", key, "POST", "/v1/runs", body)))
                t.start()
                answers.append(self.api("claim", key, "POST", "/v1/runs", body))
                t.join()
                answers += dup
                first = False
            else:
                answers.append(self.api("claim", key, "POST", "/v1/runs", body))
            won = [a for a in answers if a[0] == 201 and a[1]]
            if won:
                return won[0][1]["lease_owner"], won[0][1]["version"]
            dups = [a for a in answers if a[0] == 200 and a[1]]
            if dups:
                state = dups[0][1].get("state")
                if state != "processing":
                    return None, state
                # Someone's live lease (a claim of ours whose answer was
                # lost): wait for it to run out, then reclaim.
                time.sleep(1.0)
                continue
            if any(a[0] not in RETRYABLE for a in answers):
                return None, None
            self.pause()
        return None, None

    def effect_of(self, key, i):
        """The model output and effect of (this thread's tenant, key): a
        long mail for odd i, a tag with a long reason for even i."""
        tenant = self.local.tenant
        t = [n for n, _ in self.tenants].index(tenant)
        if i % 2:
            mail = self.mails[(i + t) % len(self.mails)]
            # The first recipient names tenant and key: how the check finds
            # the mail at the sink.
            # A list goes with the test contract support_list; the shipped
            # support_reply takes exactly one address.
            to = ["customer+mh-%s-%d@multihost.example.com" % (tenant, i)]
            if i % 4 == 1:
                contract = "support_list"
                to += corpus.recipients(9 if self.args.mails == "long" else 2)
            else:
                contract = "support_reply"
            return (contract,
                    {"subject": mail["subject"], "body": mail["body"], "tone": "formal",
                     "confidence": 0.55},
                    {"type": "email.send", "target": "demo_smtp",
                     "payload": {"to": to if contract == "support_list" else to[0]}},
                    {"mail": mail["id"], "brief": self.args.mails == "short", "to": to})
        reason = self.reasons[(i + t) % len(self.reasons)]["reason"]
        # crm_tag closes the payload to the contact; the tag comes from the
        # output. The contact names tenant and key.
        contact = "c-%d-%s" % (i, tenant)
        return ("crm_tag",
                {"tag": "churn_risk", "confidence": 0.4,
                 "reason": reason if self.args.mails == "long" else "no login for 90 days"},
                {"type": "crm.tag", "target": "demo_http", "payload": {"contact_id": contact}},
                {"sent": {"contact_id": contact, "tag": "churn_risk"}})

    def output(self, key, owner, version, i):
        """The approval token, "lease_lost", or None."""
        contract, out, effect, _ = self.effect_of(key, i)
        body = {
            "lease_owner": owner, "version": version, "contract": contract,
            "output": out,
            "model": {"provider": "openai-compatible", "name": "chaos-model",
                      "revision": "1"},
            "effect": effect,
            "source_url": "https://crm.example/contacts/%d" % i,
            "requested_by": REQUESTER,
        }
        path = "/v1/runs/%s/output" % urllib.parse.quote(key, safe="")
        for _ in range(MAX_TRIES):
            status, doc, _, _ = self.api("output", key, "POST", path, body)
            if status == 202 and doc and doc.get("approvals"):
                m = TOKEN_RE.search(doc["approvals"][0]["url"])
                return m.group(1) if m else None
            if status == 409:
                return "lease_lost"
            if status not in RETRYABLE:
                return None
            self.pause()
        return None

    def approve(self, key, token):
        """approved | already_decided | None."""
        # as oauth2-proxy sends groups: joined with commas
        who = {"X-Dev-User": APPROVER, "X-Dev-Groups": "support,sales"}
        path = "/approve/" + token
        csrf = None
        for _ in range(MAX_TRIES):
            status, _, text, _ = self.request("page", self.local.tenant + "|" + key, "GET",
                                              path, headers=who)
            if status == 200:
                tag = CSRF_RE.search(text)
                m = VALUE_RE.search(tag.group(0)) if tag else None
                csrf = m.group(1) if m else None
                break
            if status not in RETRYABLE:
                return None
            self.pause()
        if csrf is None:
            return None
        form = urllib.parse.urlencode({"decision": "approve", "csrf": csrf,
                                       "reason": "chaos: multihost"})
        hdr = dict(who)
        hdr.update({"Content-Type": "application/x-www-form-urlencoded",
                    "Origin": self.args.public_url,
                    "Sec-Fetch-Site": "same-origin"})
        tried = False
        for _ in range(MAX_TRIES):
            status, _, _, _ = self.request("decide", self.local.tenant + "|" + key, "POST",
                                           path, form, hdr)
            if status == 303:
                return "approved"
            if status in (409, 410):
                # Only after a try of ours whose answer was lost.
                return "already_decided" if tried else None
            if status not in RETRYABLE:
                return None
            tried = True
            self.pause()
        return None

    def flow(self, i):
        """Key i, driven by every tenant in turn (the same business key)."""
        key = corpus.fit_key("%s:%d:" % (self.args.run, i), self.keys[i % len(self.keys)])
        for tenant, auth in self.tenants:
            self.local.tenant, self.local.auth = tenant, auth
            self.flow_one(key, i)

    def flow_one(self, key, i):
        payload = {"contact": "c-%d" % i, "n": i, "tenant": self.local.tenant}
        end = "gave_up"
        first = True
        for _ in range(10):
            owner, version = self.claim(key, payload, first)
            first = False
            if owner is None:
                # settled without us: the output of an earlier claim of
                # ours committed but its answer was lost (awaiting_human,
                # its link gone), or the key was already decided
                end = "settled_" + version if version else "gave_up"
                break
            token = self.output(key, owner, version, i)
            if token == "lease_lost":
                continue
            if token is None:
                end = "output_failed"
                break
            end = self.approve(key, token) or "approve_failed"
            break
        # Late duplicates: the prior result, and a conflicting payload.
        body = {"key": key, "payload": payload}
        for _ in range(MAX_TRIES):
            status, _, _, _ = self.api("replay", key, "POST", "/v1/runs", body)
            if status not in RETRYABLE:
                break
            self.pause()
        if i % 10 == 0:
            body = {"key": key, "payload": {"contact": "c-%d" % i, "n": -i}}
            for _ in range(MAX_TRIES):
                status, _, _, _ = self.api("conflict", key, "POST", "/v1/runs",
                                           body)
                if status not in RETRYABLE:
                    break
                self.pause()
        rec = {"key": self.local.tenant + "|" + key, "end": end}
        rec.update(self.effect_of(key, i)[3])
        with self.lock:
            self.flows.write(json.dumps(rec, ensure_ascii=False) + "\n")
            self.flows.flush()

    def worker(self):
        while True:
            with self.lock:
                i = self.next
                self.next += 1
            if i >= self.args.runs:
                return
            due = self.t0 + i / self.args.rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.flow(i + 1)

    def main(self):
        threads = [threading.Thread(target=self.worker)
                   for _ in range(self.args.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.answers.close()
        self.flows.close()
        print("load done in %.1f s" % (time.monotonic() - self.t0),
              file=sys.stderr)
        return 0


# --- the checks ----------------------------------------------------------------


def check(args):
    # Runs are TENANT|KEY; the workflows' keys are RUN:N:...; the outbox and
    # the provider also hold the effects the shell script put in straight
    # (RUNb:N, the first tenant's).
    prefix = args.run + ":"

    def ours(k):
        return k.split("|", 1)[-1].startswith(prefix)

    answers = [json.loads(line) for line in open(args.out + "/answers.jsonl", encoding="utf-8")]
    flows, flow_of = {}, {}
    for line in open(args.out + "/flows.jsonl", encoding="utf-8"):
        d = json.loads(line)
        flows[d["key"]] = d["end"]
        flow_of[d["key"]] = d
    requests = json.load(open(args.requests, encoding="utf-8"))
    mails = [json.loads(line) for line in open(args.smtp, encoding="utf-8") if line.strip()]
    runs = corpus.read_tsv(args.runs_tsv, 3)            # tenant|key, state, attempt
    approvals = corpus.read_tsv(args.approvals_tsv, 3)  # tenant|key, state, decision
    # tenant|key, provider_key, state, letters, effect type
    effects = corpus.read_tsv(args.effects_tsv, 5)
    tenants = sorted({k.split("|", 1)[0] for k in flows})

    out = collections.OrderedDict()
    bad = []

    by_status = collections.Counter()
    unexpected = collections.Counter()
    retried = 0
    slowest = 0
    for a in answers:
        s = a["status"]
        by_status[s] += 1
        slowest = max(slowest, a["ms"])
        if s in RETRYABLE:
            retried += 1
        elif s not in EXPECTED[a["step"]]:
            unexpected["%s:%d" % (a["step"], s)] += 1
    out["requests"] = len(answers)
    out["statuses"] = " ".join("%s x%d" % ("timeout/conn" if s == 0 else s, n)
                               for s, n in sorted(by_status.items()))
    out["retried_answers"] = retried
    out["unexpected"] = sum(unexpected.values())
    out["unexpected_detail"] = " ".join("%s x%d" % kv
                                        for kv in sorted(unexpected.items()))
    out["answers_500"] = by_status.get(500, 0)
    out["slowest_ms"] = slowest
    if unexpected:
        bad.append("answers outside the expected set: " + out["unexpected_detail"])

    # Claims: at most one 201 per (key, attempt); duplicates carry the state.
    wins = collections.Counter()
    dup_answers = 0
    dup_bad = 0
    for a in answers:
        if a["step"] in ("claim", "claim_dup") and a["status"] == 201:
            wins[(a["key"], a.get("attempt"))] += 1
        if a["step"] in ("claim", "claim_dup", "replay") and a["status"] == 200:
            dup_answers += 1
            if a.get("outcome") != "duplicate" or not a.get("state"):
                dup_bad += 1
    doubled_claims = sum(1 for n in wins.values() if n > 1)
    out["claims_201"] = sum(wins.values())
    out["reclaims"] = sum(1 for (k, att) in wins if att and att > 1)
    out["duplicates_answered"] = dup_answers
    out["duplicates_bad"] = dup_bad
    out["claims_doubled"] = doubled_claims
    if doubled_claims:
        bad.append("%d (key, attempt) claimed by two 201s" % doubled_claims)
    if dup_bad:
        bad.append("%d duplicate answers without outcome/state" % dup_bad)

    # Rows: one per key the workflows used.
    keys = set(flows)
    row_count = collections.Counter(r[0] for r in runs)
    state = {r[0]: r[1] for r in runs}
    missing = [k for k in keys if row_count[k] == 0]
    multi = [k for k, n in row_count.items() if n > 1]
    out["keys"] = len(keys)
    out["run_rows"] = len(runs)
    out["keys_without_row"] = len(missing)
    out["keys_with_rows_gt1"] = len(multi)
    out["tenants"] = " ".join(tenants)
    if missing or multi or len(keys) != args.runs * len(tenants):
        bad.append("rows: %d (tenant, key) of %d, %d without a row, %d with more than one"
                   % (len(keys), args.runs * len(tenants), len(missing), len(multi)))

    # The late duplicate answers the run's state as it was then: never
    # "processing" once the workflow got past its claim.
    late_processing = sum(1 for a in answers if a["step"] == "replay"
                          and a["status"] == 200 and a.get("state") == "processing")
    out["late_duplicates_processing"] = late_processing
    conflicts = sum(1 for a in answers if a["step"] == "conflict" and a["status"] == 422
                    and a.get("error") == "payload_mismatch")
    out["conflicts_422"] = conflicts
    if late_processing:
        bad.append("%d late duplicates answered processing" % late_processing)

    # Approvals: at most one decided per run, and every 303 is one.
    decided = collections.Counter(a[0] for a in approvals if a[1] == "decided")
    out["approvals"] = len(approvals)
    out["approvals_decided"] = sum(decided.values())
    over = sum(1 for n in decided.values() if n > 1)
    ends = collections.Counter(flows.values())
    out["flow_ends"] = " ".join("%s x%d" % kv for kv in sorted(ends.items()))
    approved_keys = {k for k, e in flows.items() if e in ("approved", "already_decided")}
    not_decided = [k for k in approved_keys if decided[k] != 1]
    out["approved_by_workflows"] = len(approved_keys)
    out["approvals_consumed_twice"] = over
    if over or not_decided:
        bad.append("approvals: %d consumed twice, %d approved without one decision"
                   % (over, len(not_decided)))
    failed_flows = sum(n for e, n in ends.items()
                       if e in ("gave_up", "output_failed", "approve_failed"))
    out["flows_failed"] = failed_flows
    if failed_flows:
        bad.append("%d workflows gave up or got an unexpected answer" % failed_flows)
    # A run whose output answer was lost after it committed: waiting for a
    # person whose link never reached the workflow. Nothing was acted on.
    out["stranded_awaiting_human"] = sum(1 for k in keys if state.get(k) == "awaiting_human")

    # Effects: exactly one per decided run, none for the others.
    eff_count = collections.Counter(e[0] for e in effects if ours(e[0]))
    decided_keys = set(decided)
    eff_bad = [k for k in decided_keys if eff_count[k] != 1]
    eff_bad += [k for k in eff_count if k not in decided_keys]
    out["effects"] = sum(eff_count.values())
    out["effects_all"] = len(effects)
    out["effects_not_once"] = len(eff_bad)
    if eff_bad:
        bad.append("%d runs without exactly one effect for one decision" % len(eff_bad))

    # What the providers received: an HTTP delivery matched to its effect by
    # its Idempotency-Key, which must be the stored provider key of exactly
    # one effect, its body that effect's payload as approved (the burst's
    # {"burst": N} for RUNb:N); a mail by its first
    # recipient (customer+mh-TENANT-N@).
    by_pkey = collections.defaultdict(list)
    for e in effects:
        by_pkey[e[1]].append(e[0])
    wrong_payload = 0
    by_flow_to = {}
    for k, f in flow_of.items():
        if f.get("to"):
            by_flow_to[f["to"][0].lower()] = k
    got = collections.Counter()
    sent_with = collections.defaultdict(set)   # tenant|key -> provider keys used
    wrong_bytes = 0
    http_requests = 0
    for r, b, pk in corpus.effect_requests(requests):
        http_requests += 1
        if not isinstance(b, dict):
            b = {}
        owners = by_pkey.get(pk, [])
        if len(owners) == 1:
            k = owners[0]
        else:
            # not one effect's key: counted against what the body names
            k = "?|HTTP request under %r (%d effects)" % (pk, len(owners))
        got[k] += 1
        sent_with[k].add(pk)
        if "burst" in b:
            want = {"burst": int(k.rsplit(":", 1)[-1])} \
                if k.split("|", 1)[-1].startswith(args.run + "b:") else None
        else:
            want = (flow_of.get(k) or {}).get("sent")
        if b != want:
            wrong_payload += 1
    for m in mails:
        rc = m.get("rcpt_tos") or [""]
        k = by_flow_to.get(rc[0].lower(), "?|mail to %s" % rc[0])
        got[k] += 1
        f = flow_of.get(k)
        if f is not None:
            _, subject, body = corpus.mime_text(m.get("data", ""))
            want = corpus.mail(f["mail"])
            if f.get("brief"):
                want = corpus.brief(want)
            if subject != want["subject"] or body != want["body"] or \
                    not corpus.same_recipients(m, f["to"]):
                wrong_bytes += 1
    out["provider_requests"] = http_requests
    out["mails_received"] = len(mails)
    dups = sum(1 for n in got.values() if n > 1)
    completed = unknown = other = completed_bad = unknown_bad = no_letter = unknown_sent = 0
    other_key = 0
    pkeys = collections.Counter(e[1] for e in effects)
    for key, pkey, st, letters, etype in effects:
        n = got.get(key, 0)
        if etype == "crm.tag" and sent_with.get(key, set()) - {pkey}:
            other_key += 1
        if st == "completed":
            completed += 1
            completed_bad += n != 1
        elif st == "unknown":
            unknown += 1
            unknown_bad += n > 1
            unknown_sent += n == 1
            no_letter += letters == "0"
        else:
            other += 1
    stray = sum(1 for k in got if k not in {e[0] for e in effects})
    shared_pkeys = sum(1 for n in pkeys.values() if n > 1)
    out["effects_received_twice"] = dups
    out["completed"] = completed
    out["completed_not_once"] = completed_bad
    out["unknown"] = unknown
    out["unknown_received"] = unknown_sent
    out["unknown_without_letter"] = no_letter
    out["lost"] = other
    out["received_without_effect"] = stray
    out["mails_not_as_approved"] = wrong_bytes
    out["sent_with_other_provider_key"] = other_key
    out["http_not_as_approved"] = wrong_payload
    out["provider_keys_shared"] = shared_pkeys
    if dups or completed_bad or unknown_bad or no_letter or other or stray:
        bad.append("effects: %d received twice, %d completed not once, %d unknown "
                   "received twice, %d unknown without dead letter, %d neither "
                   "completed nor unknown, %d received without an outbox row"
                   % (dups, completed_bad, unknown_bad, no_letter, other, stray))
    if wrong_bytes or other_key or shared_pkeys or wrong_payload:
        bad.append("deliveries: %d mails not as approved (recipients, subject, body), %d "
                   "HTTP requests not as approved (payload), %d requests sent with a "
                   "provider key not their effect's, %d provider keys shared by two effects"
                   % (wrong_bytes, wrong_payload, other_key, shared_pkeys))

    return report(out, bad)


def report(out, bad):
    """A check's verdict: each figure of out as a name=value line on stdout,
    each failure of bad as a FAIL: line on stderr; 1 when there is one."""
    for k, v in out.items():
        print("%s=%s" % (k, v))
    for b in bad:
        print("FAIL: " + b, file=sys.stderr)
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    lp = sub.add_parser("load")
    lp.add_argument("--base", required=True)
    lp.add_argument("--run", required=True)
    lp.add_argument("--runs", type=int, required=True)
    lp.add_argument("--rate", type=float, required=True)
    lp.add_argument("--workers", type=int, default=16)
    lp.add_argument("--public-url", required=True)
    lp.add_argument("--out", required=True)
    lp.add_argument("--client", default="dev", help="the API client of DIR/api_key")
    lp.add_argument("--client-b", help="a second tenant: the API client of DIR/api_key_b")
    lp.add_argument("--mails", choices=("long", "short"), default="long")
    lp.add_argument("--lease-seconds", type=int, default=LEASE_SECONDS,
                    help="each claim's lease: longer than an outage the workflows ride out")
    cp = sub.add_parser("check")
    cp.add_argument("--run", required=True)
    cp.add_argument("--runs", type=int, required=True)
    cp.add_argument("--out", required=True)
    cp.add_argument("--requests", required=True)
    cp.add_argument("--smtp", required=True, help="the SMTP sink's record")
    cp.add_argument("--runs-tsv", required=True)
    cp.add_argument("--approvals-tsv", required=True)
    cp.add_argument("--effects-tsv", required=True)
    args = p.parse_args()
    if args.cmd == "load":
        return Load(args).main()
    return check(args)


if __name__ == "__main__":
    sys.exit(main())

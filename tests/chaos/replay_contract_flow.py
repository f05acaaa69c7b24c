#!/usr/bin/python3
"""The workflow side of tests/chaos/replay_contract.sh: what n8n would do
through the API, for two API clients (tenants) that share business keys.

    replay_contract_flow.py plan  --runs N --run RUN --out DIR
    replay_contract_flow.py draft --stage old|new --out DIR
    replay_contract_flow.py sent  --out DIR --provider URL --sink FILE [--keys FILE]

plan   writes DIR/items.json (one item per run: tenant, key, new key,
       contract, claim payload), DIR/singles.tsv (CLIENT TAB KEY TAB NEWKEY:
       the keys a map file cannot carry, replayed one by one) and
       DIR/map-CLIENT (ORIGINAL NEWKEY lines, for the bulk form).
draft  claims each key, hands in the model's output and approves it on the
       approval page (as a person of the approver group; the requester is
       another person). old: the originals, their effects addressed so
       that the provider refuses them. new: the replays, reclaimed
       (failed_retryable) with the same payload, drafted again under the
       changed contract; a crm_tag run that the gate lets through on its own
       is not approved by anyone, a sampled one goes to sales.
       Prints one line of counts; exit 1 when a step answered otherwise.
sent   prints what the provider and the sink received for this run:
       "requests N committed N mails N" (every effect of this run); with
       --keys FILE (provider keys, one a line) also "off N none M": the keys
       without exactly one committed effect, and those without any.

Environment: ONCEGATE_URL, ONCEGATE_API_KEY (the first tenant, client
"dev"); DIR/api_key_b holds the second tenant's key.
"""

import argparse
import http.client
import json
import os
import re
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                                "corpus"))
import corpus  # noqa: E402  (tests/data/corpus/corpus.py)

APPROVER = "rc-approver@example.com"
REQUESTER = "rc-requester@example.com"
# as oauth2-proxy sends groups: joined with commas
GROUPS = "support, sales"
CSRF_RE = re.compile(r'<input[^>]*name="csrf"[^>]*>')
VALUE_RE = re.compile(r'value="([A-Za-z0-9_-]+)"')
TOKEN_RE = re.compile(r"/approve/([A-Za-z0-9_-]+)$")
RETRYABLE = {0, 502, 503, 504}


def request(base, method, path, body=None, headers=None):
    u = urllib.parse.urlsplit(base)
    h = {"Connection": "close"}
    h.update(headers or {})
    for _ in range(40):
        conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=30)
        try:
            conn.request(method, path, body=body, headers=h)
            resp = conn.getresponse()
            text = resp.read().decode("utf-8", "replace")
            status = resp.status
        except (OSError, http.client.HTTPException):
            status, text = 0, ""
        finally:
            conn.close()
        if status not in RETRYABLE:
            break
        time.sleep(0.25)
    doc = None
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            pass
    return status, doc, text


def plan(args):
    keys = corpus.shared_keys()
    payloads = corpus.load("outputs.json")["payloads"]
    clients = ["dev", args.client_b]
    items = []
    for i in range(args.runs):
        j, t = i // 2, i % 2          # run pair j: the same business key, both tenants
        shared = keys[j % len(keys)]
        p = payloads[j % len(payloads)]
        items.append({
            "i": i, "j": j, "tenant": t, "client": clients[t],
            "key": corpus.fit_key("%s:o%d:" % (args.run, j), shared),
            "new_key": corpus.fit_key("%s:n%d:" % (args.run, j), shared),
            "contract": "support_reply" if j % 2 == 0 else "crm_tag",
            "payload": p["payload"] if isinstance(p, dict) and "payload" in p else p,
        })
    with open(os.path.join(args.out, "items.json"), "w", encoding="utf-8") as f:
        json.dump(items, f, ensure_ascii=False)
    # A map line is two whitespace-separated keys: a key with a space in it
    # is replayed on its own; so is every fourth pair, by choice.
    with open(os.path.join(args.out, "singles.tsv"), "w", encoding="utf-8") as singles:
        maps = {c: open(os.path.join(args.out, "map-" + c), "w", encoding="utf-8")
                for c in clients}
        for it in items:
            if re.search(r"\s", it["key"]) or it["j"] % 4 == 0:
                singles.write("%s\t%s\t%s\n" % (it["client"], it["key"], it["new_key"]))
            else:
                maps[it["client"]].write("%s %s\n" % (it["key"], it["new_key"]))
        for f in maps.values():
            f.close()
    return 0


def recipient(args, it, refused):
    local = "fail550" if refused else "customer"
    return "%s+%s-t%d-j%d@example.com" % (local, args.run_tag, it["tenant"], it["j"])


def output_of(args, it, mails, reasons):
    """(output, effect) for the original (old) or the new draft (new)."""
    old = args.stage == "old"
    if it["contract"] == "support_reply":
        m = mails[(it["j"] + it["tenant"] + (0 if old else 1)) % len(mails)]
        out = {"subject": m["subject"], "body": m["body"], "confidence": 0.55,
               "tone": "formal" if old else "friendly"}
        payload = {"to": recipient(args, it, old), "ticket": "T-%d" % it["j"]}
        return out, {"type": "email.send", "target": "demo_smtp", "payload": payload}
    r = reasons[(it["j"] + it["tenant"]) % len(reasons)]["reason"]
    # old: a tag that always goes to sales; new: "lead", which the gate lets
    # through on its own unless the 10 % sample sends it to sales.
    out = {"tag": "churn_risk" if old else "lead", "confidence": 0.4, "reason": r}
    payload = {"contact_id": "c-%s-t%d-j%d" % (args.run_tag, it["tenant"], it["j"])}
    return out, {"type": "crm.tag", "target": "demo_http", "payload": payload}


def approve(args, token):
    who = {"X-Dev-User": APPROVER, "X-Dev-Groups": GROUPS}
    path = "/approve/" + token
    status, _, text = request(args.base, "GET", path, headers=who)
    tag = CSRF_RE.search(text) if status == 200 else None
    m = VALUE_RE.search(tag.group(0)) if tag else None
    if m is None:
        return "page %d" % status
    form = urllib.parse.urlencode({"decision": "approve", "csrf": m.group(1),
                                   "reason": "chaos: replay after a contract change"})
    hdr = dict(who)
    hdr.update({"Content-Type": "application/x-www-form-urlencoded",
                "Origin": args.base, "Sec-Fetch-Site": "same-origin"})
    status, _, _ = request(args.base, "POST", path, form, hdr)
    return None if status == 303 else "decide %d" % status


def draft(args):
    with open(os.path.join(args.out, "items.json"), encoding="utf-8") as f:
        items = json.load(f)
    with open(os.path.join(args.out, "api_key_b"), encoding="utf-8") as f:
        auth = ["Bearer " + os.environ["ONCEGATE_API_KEY"], "Bearer " + f.read().strip()]
    mails = corpus.long_mails()
    reasons = corpus.crm_reasons()
    counts = {"claimed": 0, "reclaimed": 0, "drafted": 0, "approved": 0, "auto": 0,
              "sampled": 0}
    bad = []
    for it in items:
        key = it["key"] if args.stage == "old" else it["new_key"]
        h = {"Authorization": auth[it["tenant"]], "Content-Type": "application/json"}
        body = {"key": key, "payload": it["payload"], "workflow_version": "rc@1",
                "trigger": "chaos:replay_contract"}
        status, doc, text = request(args.base, "POST", "/v1/runs", json.dumps(body), h)
        if status != 201 or not doc:
            bad.append("%s|%s: claim %d %s" % (it["client"], key, status, text[:200]))
            continue
        if args.stage == "new":
            if doc.get("attempt", 1) < 2:
                bad.append("%s|%s: the replay was not a reclaim (attempt %s)"
                           % (it["client"], key, doc.get("attempt")))
            counts["reclaimed"] += 1
        counts["claimed"] += 1
        out, effect = output_of(args, it, mails, reasons)
        body = {"lease_owner": doc["lease_owner"], "version": doc["version"],
                "contract": it["contract"], "output": out, "effect": effect,
                "model": {"provider": "openai-compatible", "name": "qwen2.5-7b-instruct",
                          "revision": "2026-11" if args.stage == "new" else "2026-09"},
                "source_url": "https://helpdesk.example/tickets/%d" % it["j"],
                "requested_by": REQUESTER}
        path = "/v1/runs/%s/output" % urllib.parse.quote(key, safe="")
        status, doc, text = request(args.base, "POST", path, json.dumps(body), h)
        if status != 202 or not doc:
            bad.append("%s|%s: output %d %s" % (it["client"], key, status, text[:300]))
            continue
        counts["drafted"] += 1
        approvals = doc.get("approvals") or []
        if not approvals:
            if it["contract"] != "crm_tag" or args.stage != "new":
                bad.append("%s|%s: no approval asked for (%s)" % (it["client"], key, text[:200]))
                continue
            counts["auto"] += 1
            continue
        if it["contract"] == "crm_tag" and args.stage == "new":
            counts["sampled"] += 1
        m = TOKEN_RE.search(approvals[0].get("url", ""))
        err = approve(args, m.group(1)) if m else "no approval link"
        if err:
            bad.append("%s|%s: approval: %s" % (it["client"], key, err))
            continue
        counts["approved"] += 1
    print(" ".join("%s %d" % kv for kv in counts.items()))
    for b in bad[:10]:
        print("  " + b, file=sys.stderr)
    return 1 if bad else 0


def sent(args):
    with urllib.request.urlopen(args.provider + "/_requests", timeout=10) as r:
        requests = json.load(r)
    with urllib.request.urlopen(args.provider + "/_committed", timeout=10) as r:
        committed = json.load(r)
    mark = "%s-t" % args.run_tag
    reqs = [q for q in requests if q.get("kind") == "effect" and mark in q.get("body", "")]
    comm = [c for c in committed if mark in json.dumps(c.get("body", ""))]
    mails = 0
    if os.path.exists(args.sink):
        with open(args.sink, encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                if any(mark in a for a in rec.get("rcpt_tos", [])):
                    mails += 1
    line = "requests %d committed %d mails %d" % (len(reqs), len(comm), mails)
    if args.keys:
        with open(args.keys, encoding="utf-8") as f:
            keys = [k for k in f.read().split("\n") if k]
        per = {}
        for c in committed:
            per[c.get("idempotency_key")] = per.get(c.get("idempotency_key"), 0) + 1
        line += " off %d none %d" % (sum(1 for k in keys if per.get(k, 0) != 1),
                                     sum(1 for k in keys if per.get(k, 0) == 0))
    print(line)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["plan", "draft", "sent"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--run", default="")
    ap.add_argument("--client-b", default="")
    ap.add_argument("--stage", choices=["old", "new"], default="old")
    ap.add_argument("--provider", default="")
    ap.add_argument("--sink", default="")
    ap.add_argument("--keys", default="")
    args = ap.parse_args()
    args.base = os.environ.get("ONCEGATE_URL", "")
    # the run's mark in recipients and contact ids (no ':' in a local part)
    with open(os.path.join(args.out, "run"), encoding="utf-8") as f:
        args.run_tag = f.read().strip()
    return {"plan": plan, "draft": draft, "sent": sent}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())

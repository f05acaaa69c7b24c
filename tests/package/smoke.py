#!/usr/bin/python3
"""smoke.py — claim → approval → send against an installation made by
docs/deploy.md (started by tests/package/run.sh): everything through the
installed nginx site over HTTPS, the approver signed in through the SSO
proxy stand-in (tests/identity/sso_standin.py), the mail delivered by the
installed dispatcher to the loopback SMTP sink.

  smoke.py --https URL --ca CERT --sso URL --key-file FILE --second-key KEY
           --mail-record FILE --crm URL --env-file DISPATCH_ENV --log DECISIONS_LOG
           [--log DECISIONS_LOG ...]

Checks, each printed as one "ok" line (the first failure exits 1):
  * two API clients claim the same business key: each gets its own run;
  * the first submits a support_reply draft (Cyrillic, Japanese, Arabic,
    Hebrew, emoji) with a mail effect: 202, one approval link at
    public_url;
  * nothing is sent while the approval waits;
  * a person in the SSO groups "customer support,support" signs in, sees
    the draft and approves; the run is approved, as that person;
  * the dispatcher sends the mail once: the SMTP sink received exactly one
    message for that run, with the drafted subject and body;
  * a crm_tag output the contract does not let through on its own
    (churn_risk) waits for a person in group "sales"; approved, the
    dispatcher calls the CRM (the loopback HTTP provider) once, with the
    Idempotency-Key and the bearer token that only the root-only
    dispatch.env holds (credentials_env);
  * the decision logs (the responder's and the dispatcher's) record the
    claim, the approval and the send.
"""
import argparse
import email
import email.policy
import http.client
import json
import os
import ssl
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "identity"))
from prod_flow import Browser, check, fail, form_csrf, sign_in_flow, sso_login  # noqa: E402

SUBJECT = "Re: ваш заказ 42 / ご注文について / طلبك"
BODY = ("Здравствуйте, Анна!\n\nВаш заказ №42 отправлен сегодня; трек-номер придёт отдельным "
        "письмом.\n\nご注文の商品は金曜日に届きます。ご不便をおかけして申し訳ありません。\n\n"
        "شكرا لصبركم. נשמח לעזור בכל שאלה. 🙏📦\n")


def api(base, ctx, key, method, path, body=None):
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=20)
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers={
        "Authorization": "Bearer " + key, "Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, json.loads(data) if data else None


def crm_flow(args, base, ctx, key):
    """crm_tag: churn_risk needs a person in "sales"; then one CRM call with
    the credentials of dispatch.env."""
    token = None
    with open(args.env_file, encoding="utf-8") as f:
        for line in f:
            if line.startswith("CRM_TOKEN="):
                token = line.split("=", 1)[1].strip()
    check(token, "dispatch.env holds CRM_TOKEN")
    run = "контакт-7/churn-%d" % time.time()
    qrun = urllib.parse.quote(run, safe="")
    st, c = api(base, ctx, key, "POST", "/v1/runs", {"key": run, "payload": {"contact": 7}})
    check(st == 201, "crm_tag: claimed", "%d %s" % (st, c))
    st, o = api(base, ctx, key, "POST", "/v1/runs/%s/output" % qrun, {
        "lease_owner": c["lease_owner"], "version": c["version"], "contract": "crm_tag",
        "output": {"tag": "churn_risk", "confidence": 0.91,
                   "reason": "Три жалобы за неделю; 「解約」と書いている; ביטול מנוי 😟"},
        "effect": {"type": "crm.tag", "target": "demo_http", "payload": {"contact_id": "c-7"}},
        "requested_by": "crm-sync@workflows.example"})
    check(st == 202 and len(o.get("approvals", [])) == 1,
          "crm_tag churn_risk: not let through on its own, one approval", "%d %s" % (st, o))
    token_url = o["approvals"][0]["url"].rsplit("/approve/", 1)[1]
    lena = Browser(ctx)
    sso_login(args.sso, "lena@example.com", ["sales", "Отдел продаж"])
    page = sign_in_flow(lena, base, token_url, "lena")
    csrf = form_csrf(page)
    check(csrf is not None and "churn_risk" in page, "lena (group sales) may decide")
    st, _, _, _, _ = lena.request("POST", base + "/approve/" + token_url, {
        "Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "same-origin",
        "Origin": base}, urllib.parse.urlencode({"decision": "approve", "csrf": csrf}))
    check(st == 303, "lena: approve → 303", "%d" % st)

    u = urllib.parse.urlsplit(args.crm)
    effects = []
    for _ in range(150):
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        conn.request("GET", "/_requests")
        reqs = json.loads(conn.getresponse().read())
        conn.close()
        effects = [r for r in reqs if r.get("kind") == "effect"]
        if effects and effects[-1].get("status") is not None:
            break
        time.sleep(0.2)
    check(len(effects) == 1, "the CRM received one call", "%d" % len(effects))
    e = effects[0]
    raw = e["headers"]
    hdrs = {k.lower(): v for k, v in (raw.items() if isinstance(raw, dict) else raw)}
    check(hdrs.get("authorization") == "Bearer " + token and e.get("idempotency_key") and
          e.get("status") in (200, 201),
          "with the bearer token from dispatch.env and an Idempotency-Key",
          "%s %s" % (e.get("status"), sorted(hdrs)))
    body = e["body"] if isinstance(e["body"], dict) else json.loads(e["body"])
    check(body.get("contact_id") == "c-7" and body.get("tag") == "churn_risk",
          "the call carries the approved tag", json.dumps(body, ensure_ascii=False)[:200])


def main():
    ap = argparse.ArgumentParser()
    for opt in ("--https", "--ca", "--sso", "--key-file", "--second-key", "--mail-record",
                "--crm", "--env-file"):
        ap.add_argument(opt, required=True)
    # once per daemon: each writes the decision log of its own directory
    ap.add_argument("--log", required=True, action="append")
    args = ap.parse_args()
    base = args.https.rstrip("/")
    ctx = ssl.create_default_context(cafile=args.ca)
    with open(args.key_file, encoding="ascii") as f:
        key1 = f.read().strip()
    key2 = args.second_key.strip()
    run = "ticket-42/réponse-%d" % time.time()
    qrun = urllib.parse.quote(run, safe="")

    # Two tenants, one business key.
    st1, c1 = api(base, ctx, key1, "POST", "/v1/runs", {"key": run, "payload": {"ticket": 42}})
    st2, c2 = api(base, ctx, key2, "POST", "/v1/runs", {"key": run, "payload": {"ticket": 42}})
    check(st1 == 201 and st2 == 201 and c1["lease_owner"] != c2["lease_owner"],
          "two API clients claim the same key: each its own run (201, 201)", "%d %s / %d %s"
          % (st1, c1, st2, c2))

    st, o = api(base, ctx, key1, "POST", "/v1/runs/%s/output" % qrun, {
        "lease_owner": c1["lease_owner"], "version": c1["version"], "contract": "support_reply",
        "output": {"subject": SUBJECT, "body": BODY, "tone": "friendly", "confidence": 0.82},
        "effect": {"type": "email.send", "target": "demo_smtp",
                   "payload": {"to": "anna.petrova@example.com", "ticket": 42}},
        "source_url": "https://crm.example/ticket/42", "requested_by": "support-inbox@workflows.example"})
    check(st == 202 and len(o.get("approvals", [])) == 1 and
          o["approvals"][0]["url"].startswith(base + "/approve/"),
          "the draft is gated: 202, one approval link at public_url", "%d %s" % (st, o))
    token = o["approvals"][0]["url"].rsplit("/approve/", 1)[1]
    time.sleep(2)
    check(not os.path.exists(args.mail_record) or os.path.getsize(args.mail_record) == 0,
          "nothing is sent while the approval waits (2 s with the dispatcher running)")

    sam = Browser(ctx)
    sso_login(args.sso, "sam@example.com", ["customer support", "support"])
    page = sign_in_flow(sam, base, token, "sam")
    check("sam@example.com" in page and "Анна" in page and "ご注文" in page,
          "the approval page shows the draft to the signed-in person")
    csrf = form_csrf(page)
    check(csrf is not None, "the page offers the decision form")
    form = urllib.parse.urlencode({"decision": "approve", "csrf": csrf,
                                   "reason": "Проверено / 確認済み"})
    st, loc, _, _, _ = sam.request("POST", base + "/approve/" + token, {
        "Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "same-origin",
        "Origin": base}, form)
    check(st == 303, "approve → 303", "%d" % st)

    # The dispatcher sends; the run follows.
    deadline = time.time() + 30
    mails = []
    while time.time() < deadline:
        if os.path.exists(args.mail_record):
            with open(args.mail_record, encoding="utf-8") as f:
                mails = [json.loads(line) for line in f if line.strip()]
        if mails:
            break
        time.sleep(0.2)
    check(len(mails) == 1, "the SMTP sink received one mail", "%d" % len(mails))
    m = mails[0]
    msg = email.message_from_string(m["data"], policy=email.policy.default)
    text = msg.get_body(preferencelist=("plain",))
    body = text.get_content() if text is not None else ""
    check(m["rcpt_tos"] == ["anna.petrova@example.com"] and str(msg["Subject"]) == SUBJECT and
          "Анна" in body and "ご注文" in body and "🙏" in body,
          "it is the approved draft, to the customer", "%s %r" % (m["rcpt_tos"], msg["Subject"]))

    for _ in range(50):
        st, r = api(base, ctx, key1, "GET", "/v1/runs/%s" % qrun)
        effects = (r or {}).get("effects") or []
        if effects and all(e.get("status") == "completed" and e.get("provider_id") for e in effects):
            break
        time.sleep(0.2)
    check(st == 200 and r.get("state") == "completed" and effects and
          all(e.get("status") == "completed" and e.get("provider_id") == m["queue_id"] for e in effects),
          "the run is completed, its effect completed with the SMTP queue id",
          json.dumps(effects, ensure_ascii=False)[:600])
    st, r2 = api(base, ctx, key2, "GET", "/v1/runs/%s" % qrun)
    check(st == 200 and r2.get("state") == "processing",
          "the other tenant's run with the same key is untouched", json.dumps(r2)[:200])

    crm_flow(args, base, ctx, key1)

    events = []
    for path in args.log:
        with open(path, encoding="utf-8") as f:
            events += [json.loads(line) for line in f if line.strip()]
    names = set(e.get("event") for e in events)
    want = {"run.claimed", "effect.enqueued", "approval.consumed", "effect.sent", "run.completed"}
    check(want <= names, "the decision log records the claim, the approval and the send (%d lines)"
          % len(events), "missing %s; has %s" % (sorted(want - names), sorted(n for n in names if n)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

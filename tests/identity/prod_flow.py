#!/usr/bin/env python3
"""prod_flow.py — what a person's browser does against the production nginx
config (started by tests/identity/prod_nginx.sh in front of the stack's
responder and tests/identity/sso_standin.py), and what the SSO side saw.

  prod_flow.py --https URL --ca CERT --sso URL --access-log FILE
               --error-log FILE
with ONCEGATE_URL / ONCEGATE_API_KEY of the stack for the API.

Checks, each printed as one "ok" line (the first failure exits 1):
  * a visitor without a session who opens /approve/TOKEN is sent to the SSO
    with rd=/approve/resume, the way back in an HttpOnly, Secure,
    SameSite=Lax cookie scoped to /approve/resume, and after signing in
    lands on that approval page, as the person the SSO names;
  * the groups oauth2-proxy sends ("customer support,support") reach the
    page: that person may decide, and the decision is recorded as theirs;
    a person only in "customer support" sees the card without a form;
  * X-Dev-User / X-Dev-Groups sent by a client change nothing;
  * no approval token is in anything the SSO service or the identity
    provider received (paths, queries, rd, state, headers, bodies), nor in
    nginx's access log.
"""
import argparse
import http.client
import json
import os
import re
import ssl
import sys
import time
import urllib.parse

FAILED = False


def ok(msg):
    print("ok   %s" % msg, flush=True)


def fail(msg):
    print("FAIL %s" % msg, flush=True)
    sys.exit(1)


def check(cond, msg, detail=""):
    if not cond:
        fail(msg + (": " + detail if detail else ""))
    ok(msg)


class Browser:
    """Cookies by name and path, redirects one hop at a time."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.cookies = {}  # (host, name, path) -> (value, attrs)
        self.log = []

    def cookie_header(self, host, path):
        out = []
        for (h, name, cpath), (value, _) in self.cookies.items():
            if h == host and (path == cpath or path.startswith(cpath.rstrip("/") + "/")):
                out.append("%s=%s" % (name, value))
        return "; ".join(out)

    def store(self, host, set_cookie):
        parts = [p.strip() for p in set_cookie.split(";")]
        name, _, value = parts[0].partition("=")
        attrs = {}
        for p in parts[1:]:
            k, _, v = p.partition("=")
            attrs[k.lower()] = v
        path = attrs.get("path", "/")
        if attrs.get("max-age") == "0":
            self.cookies.pop((host, name, path), None)
        else:
            self.cookies[(host, name, path)] = (value, attrs)

    def request(self, method, url, headers=None, body=None):
        u = urllib.parse.urlsplit(url)
        if u.scheme == "https":
            conn = http.client.HTTPSConnection(u.hostname, u.port, context=self.ctx, timeout=20)
        else:
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=20)
        path = u.path + ("?" + u.query if u.query else "")
        h = dict(headers or {})
        ck = self.cookie_header(u.netloc, u.path)
        if ck:
            h["Cookie"] = ck
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read()
        set_cookies = r.msg.get_all("Set-Cookie") or []
        for sc in set_cookies:
            self.store(u.netloc, sc)
        loc = r.getheader("Location")
        conn.close()
        self.log.append((method, url, r.status))
        return r.status, loc and urllib.parse.urljoin(url, loc), set_cookies, data.decode("utf-8", "replace"), r

    def follow(self, url, headers=None, hops=10):
        """GET url and its redirects; returns (final url, status, body, hops)."""
        seen = []
        for _ in range(hops):
            st, loc, sc, body, _ = self.request("GET", url, headers)
            seen.append((url, st, sc))
            if st in (301, 302, 303, 307, 308) and loc:
                url = loc
                continue
            return url, st, body, seen
        fail("more than %d redirects from %s" % (hops, seen[0][0]))


def api(method, path, body=None):
    base = os.environ["ONCEGATE_URL"]
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=20)
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers={
        "Authorization": "Bearer " + os.environ["ONCEGATE_API_KEY"],
        "Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, json.loads(data) if data else None


def gated(key):
    """A support_reply run waiting for group support; its one token."""
    st, c = api("POST", "/v1/runs", {"key": key, "payload": {"ticket": key}})
    if st != 201:
        fail("claim %s: HTTP %d %s" % (key, st, c))
    st, o = api("POST", "/v1/runs/%s/output" % urllib.parse.quote(key, safe=""), {
        "lease_owner": c["lease_owner"], "version": c["version"], "contract": "support_reply",
        "output": {"subject": "Re: ваш заказ 42 / ご注文", "tone": "friendly", "confidence": 0.8,
                   "body": "Здравствуйте! Ваш заказ отправлен сегодня.\n\nご注文の商品は金曜日に届きます。\n"
                           "شكرا لصبركم. תודה על הסבלנות 🙏"},
        "effect": {"type": "email.send", "target": "demo_smtp",
                   "payload": {"to": "customer@example.com", "ticket": 42}},
        "source_url": "https://crm.example/ticket/42", "requested_by": "support-inbox@workflows.example"})
    if st != 202:
        fail("output %s: HTTP %d %s" % (key, st, o))
    url = o["approvals"][0]["url"]
    return url.rsplit("/approve/", 1)[1]


def sso_login(sso, email, groups):
    u = urllib.parse.urlsplit(sso)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    conn.request("POST", "/_control/login", body=json.dumps({"email": email, "groups": groups}))
    r = conn.getresponse()
    r.read()
    conn.close()
    if r.status != 204:
        fail("the SSO stand-in refused the login set-up: %d" % r.status)


def sso_records(sso):
    u = urllib.parse.urlsplit(sso)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    conn.request("GET", "/_control/requests")
    r = conn.getresponse()
    data = json.loads(r.read())
    conn.close()
    return data


def form_csrf(body):
    m = re.search(r'name="csrf"[^>]*value="([^"]+)"', body) or \
        re.search(r'value="([^"]+)"[^>]*name="csrf"', body)
    return m and m.group(1)


def sign_in_flow(b, base, token, who, want=200):
    """Without a session: the page → SSO → back on the page (answered want:
    403 for a person the link is not for)."""
    page = base + "/approve/" + token
    st, loc, sc, body, _ = b.request("GET", page)
    check(st == 302 and loc is not None, "%s: no session: 302 to the SSO" % who, "%d %s" % (st, loc))
    lu = urllib.parse.urlsplit(loc)
    q = urllib.parse.parse_qs(lu.query)
    check(lu.path == "/oauth2/start" and q.get("rd") == ["/approve/resume"] and token not in loc,
          "%s: the SSO start gets rd=/approve/resume, not the token" % who, loc.replace(token, "[token]"))
    ret = [c for c in sc if c.startswith("oncegate_return=")]
    check(len(ret) == 1, "%s: the way back is one cookie" % who, repr([c.split(";")[0][:20] for c in sc]))
    attrs = [a.strip().lower() for a in ret[0].split(";")[1:]]
    check("httponly" in attrs and "secure" in attrs and "samesite=lax" in attrs and
          "path=/approve/resume" in attrs and any(a.startswith("max-age=") and 0 < int(a[8:]) <= 3600
                                                   for a in attrs),
          "%s: the cookie is HttpOnly, Secure, SameSite=Lax, Path=/approve/resume, short-lived" % who,
          "; ".join(attrs))
    final, st, body, hops = b.follow(loc)
    path = urllib.parse.urlsplit(final).path
    check(st == want and path == "/approve/" + token,
          "%s: signed in, back on the approval page (%d hops)" % (who, len(hops)),
          "%d at %s" % (st, path.replace(token, "[token]")))
    check(not any(n == "oncegate_return" for (_, n, _) in b.cookies),
          "%s: the way-back cookie was cleared on the way" % who)
    return body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--https", required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--sso", required=True)
    ap.add_argument("--access-log", required=True)
    ap.add_argument("--error-log", required=True)
    args = ap.parse_args()
    base = args.https.rstrip("/")
    ctx = ssl.create_default_context(cafile=args.ca)
    run = "prodsso%d-%d" % (time.time(), os.getpid())

    tok_a = gated(run + "-a")
    tok_b = gated(run + "-b")
    tokens = [tok_a, tok_b]

    # 1. sam, in "customer support" and "support" (oauth2-proxy: commas).
    sam = Browser(ctx)
    sso_login(args.sso, "sam@example.com", ["customer support", "support"])
    body = sign_in_flow(sam, base, tok_a, "sam")
    check("sam@example.com" in body and "customer support,support" in body,
          "sam: the page names the SSO's subject and groups")
    csrf = form_csrf(body)
    check(csrf is not None and 'value="approve"' in body, "sam (group support): the page offers the decision")
    # X-Dev-* from a client change nothing.
    st, _, _, body2, _ = sam.request("GET", base + "/approve/" + tok_a, {
        "X-Dev-User": "mallory@example.com", "X-Dev-Groups": "admins"})
    check(st == 200 and "sam@example.com" in body2 and "mallory" not in body2,
          "X-Dev-User/X-Dev-Groups from a client are ignored with a session")
    form = urllib.parse.urlencode({"decision": "approve", "csrf": csrf, "reason": "Проверено / 確認済み"})
    st, loc, _, body3, _ = sam.request("POST", base + "/approve/" + tok_a, {
        "Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "same-origin",
        "Origin": base}, form)
    check(st == 303 and loc and urllib.parse.urlsplit(loc).path == "/approve/" + tok_a,
          "sam: approve → 303 back to the page", "%d" % st)
    st, run_a = api("GET", "/v1/runs/%s" % urllib.parse.quote(run + "-a", safe=""))
    check(st == 200 and run_a.get("state") == "approved",
          "the run is approved", json.dumps(run_a)[:300])

    # 2. dana, only in "customer support": the link is not hers, no form.
    dana = Browser(ctx)
    sso_login(args.sso, "dana@example.com", ["customer support", "Служба поддержки"])
    body = sign_in_flow(dana, base, tok_b, "dana", want=403)
    check("dana@example.com" in body and "<form" not in body and 'name="csrf"' not in body and
          "not among the approvers" in body,
          "dana (group \"customer support\" only): not hers, without a form")
    st, _, _, body2, _ = dana.request("GET", base + "/approve/" + tok_b, {
        "X-Dev-User": "sam@example.com", "X-Dev-Groups": "support"})
    check(st == 403 and "dana@example.com" in body2 and "<form" not in body2,
          "dana sending X-Dev-User: sam / X-Dev-Groups: support is still dana, without a form")

    # 3. X-Dev-* without a session: still sent to sign in.
    anon = Browser(ctx)
    st, loc, _, _, _ = anon.request("GET", base + "/approve/" + tok_b, {
        "X-Dev-User": "sam@example.com", "X-Dev-Groups": "support"})
    check(st == 302 and "/oauth2/start" in (loc or ""),
          "X-Dev-User/X-Dev-Groups without a session: sent to sign in, no page")
    st, loc, _, _, _ = Browser(ctx).request("GET", base + "/approve/resume")
    check(st == 404, "/approve/resume without its cookie: 404, no redirect",
          "%d %s" % (st, "[a location]" if loc else ""))

    # 4. What the SSO side received.
    recs = sso_records(args.sso)
    auth = [r for r in recs if r["path"] == "/oauth2/auth"]
    check(len(auth) >= 6, "the SSO stand-in answered the auth subrequests (%d)" % len(auth))
    leaks = [r["method"] + " " + r["path"] for r in recs
             if any(t in json.dumps(r, ensure_ascii=False) for t in tokens)]
    check(not leaks, "no approval token in any of the %d requests the SSO and the identity "
          "provider received" % len(recs), ", ".join(leaks))
    fwd = set(v for r in auth for k, v in r["headers"] if k.lower() == "x-forwarded-uri")
    check(fwd == {"/approve/"}, "X-Forwarded-Uri of every auth subrequest is \"/approve/\"", repr(fwd))
    hdrs = set(k.lower() for r in auth for k, _ in r["headers"])
    check(not (hdrs & {"x-dev-user", "x-dev-groups", "referer", "origin", "content-type"}),
          "the auth subrequest carries only the headers the config names", ", ".join(sorted(hdrs)))
    starts = [r for r in recs if r["path"] == "/oauth2/start"]
    check(len(starts) >= 2 and all(r["query"].get("rd") == ["/approve/resume"] for r in starts),
          "every SSO start had rd=/approve/resume")
    states = [r["query"].get("state", [""])[0] for r in recs if r["path"] == "/idp/authorize"]
    check(len(states) >= 2 and all(s.endswith(":/approve/resume") for s in states),
          "the identity provider saw state …:/approve/resume")

    # 5. nginx's access log.
    with open(args.access_log, encoding="utf-8", errors="replace") as f:
        alog = f.read()
    check(alog.count("/approve/") >= 6 and not any(t in alog for t in tokens),
          "the access log holds the approval requests, no token")
    with open(args.error_log, encoding="utf-8", errors="replace") as f:
        elog = f.read()
    check(not any(t in elog for t in tokens), "the error log holds no token either")
    return 0


if __name__ == "__main__":
    sys.exit(main())

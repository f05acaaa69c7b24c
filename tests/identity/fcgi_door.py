#!/usr/bin/env python3
"""fcgi_door.py — reaching the responder's socket is not enough to act as
nginx. A www-data process (on Debian the group of the socket, and the user
PHP-FPM and other sites run as) connects to the socket directly and speaks
FastCGI itself, with the identity parameters nginx would pass (REMOTE_USER,
AUTH_GROUPS) made up:

  * the control: with the secret nginx sends (OG_PROXY_SECRET, read by
    root from the stack's proxy_secret_file and handed to the client) the
    same client reads the approval page and the inbox of a person who
    does not exist, so the client speaks FastCGI correctly and the forged
    identity would be trusted;
  * without the parameter, with a wrong one, with one of another length,
    and sent the way a client's header would arrive (HTTP_OG_PROXY_SECRET):
    the inbox, the page and the decision POST are each answered 403, with
    no card and no form in the answer;
  * the run's rows (workflow_runs, run_events, approvals, approval_votes,
    effect_outbox) are byte for byte what they were;
  * the end: the same POST with the secret decides (303, the challenge
    consumed), so the refusals were the secret's doing.

  fcgi_door.py SOCKET SECRET_FILE   (as root; ONCEGATE_URL, ONCEGATE_API_KEY,
                                     PG* of the stack as the schema owner)

With --gate URL USER KEY_FILE, ./dev up's approval pages behind the local
nginx at URL instead: USER (another local user) sends X-Dev-User without
the stack's key, or with a guessed or empty one, and gets 403 for the
inbox, the page and the decision POST, the rows unchanged; root, with the
key of KEY_FILE, reads the page and decides.
Each check prints one line; exit 0 pass, 1 fail.
"""
import http.client
import json
import os
import pwd
import socket
import struct
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prod_flow import form_csrf, gated  # noqa: E402 — the same run, made the same way

FAILED = False


def ok(msg):
    print("ok   %s" % msg, flush=True)


def check(cond, msg, detail=""):
    global FAILED
    if cond:
        ok(msg)
    else:
        FAILED = True
        print("FAIL %s%s" % (msg, ": " + detail if detail else ""), flush=True)


# --- a FastCGI client (the protocol, version 1) --------------------------------

def record(rtype, content, req_id=1):
    pad = (8 - len(content) % 8) % 8
    return struct.pack("!BBHHBx", 1, rtype, req_id, len(content), pad) + content + b"\0" * pad


def nv(name, value):
    def ln(n):
        return struct.pack("!B", n) if n < 128 else struct.pack("!I", n | 0x80000000)
    name, value = name.encode(), value.encode()
    return ln(len(name)) + ln(len(value)) + name + value


def fcgi(sock_path, params, body=b""):
    """One request; (status, headers dict, body text)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(sock_path)
    out = record(1, struct.pack("!HB5x", 1, 0))  # BEGIN_REQUEST, responder, no keep
    p = b"".join(nv(k, v) for k, v in params.items())
    for i in range(0, len(p), 65535):
        out += record(4, p[i:i + 65535])
    out += record(4, b"")
    if body:
        out += record(5, body)
    out += record(5, b"")
    s.sendall(out)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    stdout, i = b"", 0
    while i + 8 <= len(data):
        _, rtype, _, clen, pad = struct.unpack("!BBHHBx", data[i:i + 8])
        if rtype == 6:
            stdout += data[i + 8:i + 8 + clen]
        i += 8 + clen + pad
    head, _, text = stdout.partition(b"\r\n\r\n")
    headers = {}
    for line in head.decode("latin-1").split("\r\n"):
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    status = int(headers.get("status", "0").split()[0] or 0)
    return status, headers, text.decode("utf-8", "replace")


def as_user(user, fn, *args):
    """fn(*args) in a child process running as user (its uid and group, no
    other groups); its JSON-able result."""
    pw = pwd.getpwnam(user)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            if os.getuid() != pw.pw_uid or os.getgid() != pw.pw_gid:
                raise SystemExit("not " + user)
            res = fn(*args)
            os.write(w, json.dumps({"uid": os.getuid(), "res": res}).encode())
        except BaseException as e:  # noqa: BLE001 — reported to the parent
            os.write(w, json.dumps({"error": repr(e)}).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    got = json.loads(data)
    if "error" in got:
        print("FAIL the client as %s: %s" % (user, got["error"]), flush=True)
        sys.exit(1)
    if got["uid"] != pw.pw_uid:
        print("FAIL the client did not run as %s" % user, flush=True)
        sys.exit(1)
    return got["res"]


def as_www_data(sock_path, params, body=b""):
    """fcgi() as www-data, the socket's group."""
    return tuple(as_user("www-data", fcgi, sock_path, params, body))


def http_req(url, method, headers, body=None):
    """One HTTP request; (status, body text)."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=20)
    conn.request(method, u.path, body=body, headers=headers)
    r = conn.getresponse()
    text = r.read().decode("utf-8", "replace")
    conn.close()
    return r.status, text


# --- the stack ----------------------------------------------------------------------

def rows(key):
    """Every row of the run, as the schema owner sees it."""
    sql = """
SELECT concat_ws(E'\\n',
  (SELECT string_agg(t::text, E'\\n' ORDER BY t::text) FROM workflow_runs t WHERE idempotency_key = :'k'),
  (SELECT string_agg(t::text, E'\\n' ORDER BY t::text) FROM run_events t WHERE idempotency_key = :'k'),
  (SELECT string_agg(t::text, E'\\n' ORDER BY t::text) FROM approvals t WHERE idempotency_key = :'k'),
  (SELECT string_agg(v::text, E'\\n' ORDER BY v::text) FROM approval_votes v
     JOIN approvals a ON a.id = v.approval_id WHERE a.idempotency_key = :'k'),
  'outbox ' || (SELECT count(*) FROM effect_outbox WHERE idempotency_key = :'k'))
"""
    out = subprocess.run(["psql", "-X", "-At", "-w", "-v", "ON_ERROR_STOP=1", "-v", "k=" + key],
                         input=sql, capture_output=True, text=True, check=True)
    return out.stdout


def gate_main(url, user, key_file):
    """./dev up's approval pages: another local user, who reaches loopback
    too, cannot claim an identity with X-Dev-User; the key's holder can."""
    dev_key = open(key_file).read().strip()
    key = "dev-key:%d:заказ-42" % time.time_ns()
    token = gated(key)
    before = rows(key)
    who = {"X-Dev-User": "nobody.exists@example.com", "X-Dev-Groups": "support"}
    form = urllib.parse.urlencode({"decision": "approve", "csrf": "x" * 43}).encode()
    post_h = dict(who, **{"Content-Type": "application/x-www-form-urlencoded",
                          "Sec-Fetch-Site": "same-origin", "Origin": url})
    tries = [
        ("the inbox", "GET", "/approve/", {}, None),
        ("the page", "GET", "/approve/" + token, {}, None),
        ("the decision POST", "POST", "/approve/" + token, post_h, form),
        ("the page with a guessed X-Dev-Key", "GET", "/approve/" + token,
         {"X-Dev-Key": "x" * len(dev_key)}, None),
        ("the page with an empty X-Dev-Key", "GET", "/approve/" + token, {"X-Dev-Key": ""}, None),
    ]
    for what, method, path, extra, body in tries:
        st, text = as_user(user, http_req, url + path, method, dict(who, **extra), body)
        check(st == 403 and "dev_key" in text and "card/" not in text and 'name="csrf"' not in text,
              "%s as %s: 403 dev_key, shows nothing" % (what, user), "%d %s" % (st, text[:200]))
    after = rows(key)
    check(after == before, "the run's rows are unchanged after %s's %d tries" % (user, len(tries)),
          "before:\n%s\nafter:\n%s" % (before, after))
    # The control: root, who reads the key, opens the page and decides.
    mine = dict(who, **{"X-Dev-Key": dev_key})
    st, page = http_req(url + "/approve/" + token, "GET", mine)
    csrf = form_csrf(page)
    check(st == 200 and csrf is not None, "root with the stack's key: the page, with its form",
          "%d" % st)
    form = urllib.parse.urlencode({"decision": "approve", "csrf": csrf or ""}).encode()
    st, text = http_req(url + "/approve/" + token, "POST", dict(post_h, **{"X-Dev-Key": dev_key}),
                        form)
    check(st == 303 and "decided" in rows(key), "root with the key decides (303)",
          "%d %s" % (st, text[:200]))


def door_main(sock_path, secret_file):
    secret = open(secret_file).read().strip()
    key = "fcgi-door:%d:заказ-42" % time.time_ns()
    token = gated(key)
    before = rows(key)
    if "awaiting_human" not in before or "outbox 0" not in before:
        raise SystemExit("the run is not waiting for a person: %s" % before)

    who = {"REMOTE_USER": "nobody.exists@example.com", "AUTH_GROUPS": "support"}
    base = {"SERVER_NAME": "localhost", "SERVER_PROTOCOL": "HTTP/1.1",
            "GATEWAY_INTERFACE": "CGI/1.1", "REMOTE_ADDR": "127.0.0.1", "SCRIPT_NAME": "",
            "REQUEST_ID": "fcgi-door"}

    def get(uri, extra):
        return as_www_data(sock_path, dict(base, REQUEST_METHOD="GET", REQUEST_URI=uri,
                                           QUERY_STRING="", **who, **extra))

    # The control: with nginx's secret the forged identity is trusted.
    st, h, page = get("/approve/" + token, {"OG_PROXY_SECRET": secret})
    csrf = form_csrf(page)
    check(st == 200 and csrf is not None,
          "control: www-data with the secret reads the page as a made-up person, with a form",
          "%d" % st)
    if csrf is None:
        sys.exit(1)
    st, h, inbox = get("/approve/", {"OG_PROXY_SECRET": secret})
    check(st == 200 and "/approve/card/" in inbox,
          "control: and lists the made-up person's inbox cards", "%d" % st)

    form = urllib.parse.urlencode({"decision": "approve", "csrf": csrf}).encode()

    def post(extra):
        return as_www_data(sock_path, dict(
            base, REQUEST_METHOD="POST", REQUEST_URI="/approve/" + token, QUERY_STRING="",
            CONTENT_TYPE="application/x-www-form-urlencoded", CONTENT_LENGTH=str(len(form)),
            HTTP_SEC_FETCH_SITE="same-origin", HTTP_ORIGIN=os.environ["ONCEGATE_URL"],
            **who, **extra), form)

    wrong = "x" * len(secret)
    forged = [
        ("no OG_PROXY_SECRET", {}),
        ("an empty OG_PROXY_SECRET", {"OG_PROXY_SECRET": ""}),
        ("a wrong OG_PROXY_SECRET of the right length", {"OG_PROXY_SECRET": wrong}),
        ("the secret with one character more", {"OG_PROXY_SECRET": secret + "A"}),
        ("the secret's first half", {"OG_PROXY_SECRET": secret[:len(secret) // 2]}),
        ("the secret as a client header (HTTP_OG_PROXY_SECRET)", {"HTTP_OG_PROXY_SECRET": secret}),
    ]
    for what, extra in forged:
        for name, (st, h, text) in (("the inbox", get("/approve/", extra)),
                                    ("the page", get("/approve/" + token, extra)),
                                    ("the decision POST", post(extra))):
            check(st == 403 and "card/" not in text and 'name="csrf"' not in text
                  and "not_from_proxy" in text,
                  "www-data, %s: %s is 403 not_from_proxy, shows nothing" % (what, name),
                  "%d %s" % (st, text[:200]))
    after = rows(key)
    check(after == before, "the run's rows are unchanged after %d forged requests" % (3 * len(forged)),
          "before:\n%s\nafter:\n%s" % (before, after))

    # The end: the same POST with the secret decides, so the refusals were
    # the secret's doing.
    st, h, text = post({"OG_PROXY_SECRET": secret})
    check(st == 303, "the same POST with nginx's secret decides (303)", "%d %s" % (st, text[:200]))
    after = rows(key)
    check("decided" in after and "nobody.exists@example.com" in after,
          "and the challenge is decided by the (made-up) person it named")


def main():
    if sys.argv[1] == "--gate":
        gate_main(*sys.argv[2:5])
    else:
        door_main(*sys.argv[1:3])
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""sso_standin.py — a stand-in for oauth2-proxy and its identity provider, on
loopback, for tests/identity/prod_nginx.sh.

It implements the part of oauth2-proxy's contract the production nginx
config (nginx/oncegate.conf) relies on:

  GET /oauth2/auth      (nginx auth_request) 202 with X-Auth-Request-Email,
                        X-Auth-Request-User and X-Auth-Request-Groups (the
                        groups joined with commas, as oauth2-proxy does)
                        when the request carries a session cookie
                        (_oauth2_proxy) it issued; 401 otherwise.
  GET /oauth2/start?rd= starts a login: 302 to the identity provider with
                        state = NONCE:RD (oauth2-proxy carries rd through
                        the provider in the OAuth state, which is why rd
                        must never hold a secret). rd must be a local path.
  GET /oauth2/callback?code=&state=
                        ends it: sets the session cookie, 302 to rd.
  GET /idp/authorize?client_id=&redirect_uri=&state=
                        (on a second port of its own: another origin)
                        the identity provider: "signs in" whoever the test
                        named last (POST /_control/login) and sends the
                        browser back to redirect_uri with a code and the
                        state.

Every request it receives (method, path, query, headers, body) is recorded;
GET /_control/requests returns them as JSON, so the test can check that an
approval token never reached the SSO side in any form. /_control/ requests
are not recorded.

  sso_standin.py --redirect-url https://HOST:PORT/oauth2/callback --port 0
                 [--host 127.0.0.1]
(--redirect-url: oauth2-proxy's setting of the same name)
prints "ready PORT" once it listens; stops on SIGTERM.
"""
import argparse
import json
import secrets
import signal
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
RECORDS = []
SESSIONS = {}      # session id -> {"email", "groups"}
PENDING = {}       # nonce -> rd
CODES = {}         # code -> {"email", "groups"}
NEXT_LOGIN = {"email": None, "groups": []}
COOKIE = "_oauth2_proxy"


def cookies_of(header):
    out = {}
    for part in (header or "").split(";"):
        if "=" in part:
            k, v = part.split("=", 1)
            out.setdefault(k.strip(), v.strip())
    return out


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def reply(self, status, headers=(), body=b""):
        self.send_response(status)
        for k, v in headers:
            # UTF-8 as it comes from the provider (group names in any
            # script), as oauth2-proxy sends it; http.server would insist
            # on Latin-1.
            self._headers_buffer.append(("%s: %s\r\n" % (k, v)).encode("utf-8"))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self):
        url = urllib.parse.urlsplit(self.path)
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n > 0 else b""
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        if url.path.startswith("/_control/"):
            return self.control(url.path, body)
        with LOCK:
            RECORDS.append({
                "method": self.command,
                "target": self.path,
                "path": url.path,
                "query": query,
                "headers": [[k, v] for k, v in self.headers.items()],
                "body": body.decode("utf-8", "replace"),
            })
        if url.path == "/oauth2/auth":
            sid = cookies_of(self.headers.get("Cookie")).get(COOKIE)
            with LOCK:
                who = SESSIONS.get(sid)
            if who is None:
                return self.reply(401)
            return self.reply(202, [
                ("X-Auth-Request-User", who["email"].split("@")[0]),
                ("X-Auth-Request-Email", who["email"]),
                ("X-Auth-Request-Groups", ",".join(who["groups"])),
            ])
        if url.path == "/oauth2/start":
            rd = (query.get("rd") or ["/"])[0]
            if not rd.startswith("/") or rd.startswith("//"):
                rd = "/"
            nonce = secrets.token_urlsafe(16)
            with LOCK:
                PENDING[nonce] = rd
            idp = "http://%s:%d/idp/authorize?%s" % (
                self.server.idp_address[0], self.server.idp_address[1],
                urllib.parse.urlencode({
                    "client_id": "oncegate",
                    "redirect_uri": self.server.redirect_url,
                    "state": "%s:%s" % (nonce, rd),
                }))
            return self.reply(302, [("Location", idp)])
        if url.path == "/idp/authorize":
            with LOCK:
                who = dict(NEXT_LOGIN)
            if who["email"] is None:
                return self.reply(403, body=b"nobody to sign in\n")
            code = secrets.token_urlsafe(16)
            with LOCK:
                CODES[code] = who
            back = (query.get("redirect_uri") or [""])[0]
            state = (query.get("state") or [""])[0]
            return self.reply(302, [("Location", back + "?" + urllib.parse.urlencode(
                {"code": code, "state": state}))])
        if url.path == "/oauth2/callback":
            code = (query.get("code") or [""])[0]
            nonce, _, rd = (query.get("state") or [""])[0].partition(":")
            with LOCK:
                who = CODES.pop(code, None)
                rd_ok = PENDING.pop(nonce, None)
            if who is None or rd_ok is None or rd_ok != rd:
                return self.reply(403, body=b"bad callback\n")
            sid = secrets.token_urlsafe(24)
            with LOCK:
                SESSIONS[sid] = who
            return self.reply(302, [
                ("Set-Cookie", "%s=%s; Path=/; HttpOnly; Secure; SameSite=Lax" % (COOKIE, sid)),
                ("Location", rd),
            ])
        return self.reply(404)

    def control(self, path, body):
        if path == "/_control/requests":
            with LOCK:
                data = json.dumps(RECORDS).encode()
            return self.reply(200, [("Content-Type", "application/json")], data)
        if path == "/_control/login" and self.command == "POST":
            who = json.loads(body or b"{}")
            with LOCK:
                NEXT_LOGIN["email"] = who.get("email")
                NEXT_LOGIN["groups"] = list(who.get("groups", []))
            return self.reply(204)
        return self.reply(404)

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = handle_any


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--redirect-url", required=True)
    args = ap.parse_args()
    srv = ThreadingHTTPServer((args.host, args.port), Handler)
    # The identity provider is another origin, as it is in real life.
    idp = ThreadingHTTPServer((args.host, 0), Handler)
    for s in (srv, idp):
        s.daemon_threads = True
        s.redirect_url = args.redirect_url
        s.idp_address = idp.server_address
    threading.Thread(target=idp.serve_forever, daemon=True).start()

    def stop(*_):
        threading.Thread(target=lambda: (idp.shutdown(), srv.shutdown())).start()
    signal.signal(signal.SIGTERM, stop)
    print("ready %d" % srv.server_address[1], flush=True)
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())

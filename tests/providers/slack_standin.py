#!/usr/bin/python3
"""A loopback stand-in for Slack: the Web API's chat.postMessage that
oncegate's dispatcher posts approval notices to, the response_url its
replies go to, and the people who press the buttons.

    /usr/bin/python3 tests/providers/slack_standin.py --port P
        --token-file FILE --signing-secret-file FILE --interactions URL
        [--record FILE] [--host 127.0.0.1] [--pid FILE]

It speaks the shapes of Slack's published examples (tests/data/slack, with
their sources; the suites check it against them) and keeps what it
receives, so a test asserts what Slack would have been sent. Once
listening it prints `ready <port>` (port 0 picks a free one).

POST /api/chat.postMessage
    Slack's Web API method. Authorization: Bearer with the bot token of
    --token-file, else 200 {"ok": false, "error": "not_authed"} (none) or
    "invalid_auth" (another). A JSON body (Content-Type application/json)
    with "channel" and "text" or "blocks", else the errors Slack names
    (invalid_json, channel_not_found, no_text, invalid_blocks: Block Kit's
    limits on sections, buttons and actions are checked). Otherwise the
    documented answer: {"ok": true, "channel", "ts", "message"}.
POST /actions/<n>
    An interaction's response_url (each press gets its own): the reply as
    JSON, kept; 200 "ok". Like Slack's, a URL takes 5 replies, then 404
    "used_url".
POST /_press  {"action": "approve"|"reject"|"open", "user": "U…",
               "team": "T…", "ts": message ts (default: the last
               message), "age": seconds the signature's timestamp lies in
               the past (default 0), "forge": true (a signature made with
               another secret), "replay": true (the last press sent again,
               byte for byte), "value": the button's value instead}
    A person pressing a button of a message the stand-in received: a
    block_actions payload as Slack's example has it, form-encoded as
    payload=…, signed with --signing-secret-file (v0:timestamp:body,
    HMAC-SHA256) and POSTed to --interactions. Answers {"status", "body"}
    of oncegate's answer, the press's "response_url" and the "payload" sent.
GET /_messages, GET /_replies    what was received, in order
POST /_reset                     forgets it all
SIGTERM or SIGINT stops it with exit status 0.
"""
import hashlib
import hmac
import http.client
import json
import signal
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import provlib

MAX_BODY = 1 << 20
REPLIES_PER_URL = 5


def read_secret(path):
    with open(path, encoding="ascii") as f:
        return f.readline().strip()


def check_blocks(blocks):
    """Block Kit's published limits the notices must keep; "" when they do."""
    if not isinstance(blocks, list) or len(blocks) > 50:
        return "invalid_blocks"
    for b in blocks:
        if not isinstance(b, dict) or not isinstance(b.get("type"), str):
            return "invalid_blocks"
        if b["type"] == "section":
            t = b.get("text")
            if not isinstance(t, dict) or t.get("type") not in ("mrkdwn", "plain_text") \
                    or not isinstance(t.get("text"), str) or not 1 <= len(t["text"]) <= 3000:
                return "invalid_blocks"
        elif b["type"] == "actions":
            els = b.get("elements")
            if not isinstance(els, list) or not 1 <= len(els) <= 25:
                return "invalid_blocks"
            if len(b.get("block_id", "")) > 255:
                return "invalid_blocks"
            for e in els:
                if e.get("type") != "button" or not isinstance(e.get("text"), dict) \
                        or e["text"].get("type") != "plain_text" \
                        or not 1 <= len(e["text"].get("text", "")) <= 75 \
                        or not 1 <= len(e.get("action_id", "")) <= 255 \
                        or len(e.get("value", "")) > 2000 or len(e.get("url", "")) > 3000 \
                        or e.get("style", "primary") not in ("primary", "danger"):
                    return "invalid_blocks"
    return ""


class Slack:
    """What the stand-in received, under one lock."""

    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        with self.lock:
            self.messages = []
            self.replies = []
            self.uses = {}
            self.presses = 0
            self.last_press = None

    def record(self, kind, entry):
        if self.args.record:
            with open(self.args.record, "a", encoding="utf-8") as f:
                f.write(json.dumps(dict(entry, kind=kind), ensure_ascii=False) + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "slack-standin"

    def log_message(self, fmt, *args):  # quiet
        pass

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if 0 < n <= MAX_BODY else b""

    def answer(self, status, doc, ctype="application/json; charset=utf-8"):
        data = doc if isinstance(doc, bytes) else json.dumps(doc, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        s = self.server.slack
        with s.lock:
            if self.path == "/_messages":
                return self.answer(200, s.messages)
            if self.path == "/_replies":
                return self.answer(200, s.replies)
        self.answer(404, {"ok": False, "error": "unknown_method"})

    def do_POST(self):
        raw = self.body()
        if self.path == "/api/chat.postMessage":
            return self.post_message(raw)
        if self.path.startswith("/actions/"):
            return self.response_url(raw)
        if self.path == "/_press":
            return self.press(json.loads(raw or b"{}"))
        if self.path == "/_reset":
            self.server.slack.reset()
            return self.answer(200, {"ok": True})
        self.answer(404, {"ok": False, "error": "unknown_method"})

    # -- the Web API --------------------------------------------------------

    def post_message(self, raw):
        s = self.server.slack
        auth = self.headers.get("Authorization") or ""
        if not auth:
            return self.answer(200, {"ok": False, "error": "not_authed"})
        if not hmac.compare_digest(auth.encode(),
                                   ("Bearer " + read_secret(s.args.token_file)).encode()):
            return self.answer(200, {"ok": False, "error": "invalid_auth"})
        if not (self.headers.get("Content-Type") or "").startswith("application/json"):
            return self.answer(200, {"ok": False, "error": "invalid_form_data"})
        try:
            msg = json.loads(raw)
        except ValueError:
            return self.answer(200, {"ok": False, "error": "invalid_json"})
        if not isinstance(msg, dict) or not isinstance(msg.get("channel"), str) \
                or not msg["channel"]:
            return self.answer(200, {"ok": False, "error": "channel_not_found"})
        if not msg.get("text") and not msg.get("blocks"):
            return self.answer(200, {"ok": False, "error": "no_text"})
        bad = check_blocks(msg["blocks"]) if "blocks" in msg else ""
        if bad:
            return self.answer(200, {"ok": False, "error": bad})
        with s.lock:
            ts = "%d.%06d" % (int(time.time()), len(s.messages) + 1)
            entry = {"ts": ts, "channel": msg["channel"], "message": msg,
                     "idempotency_key": self.headers.get("Idempotency-Key")}
            s.messages.append(entry)
            s.record("message", entry)
        self.answer(200, {"ok": True, "channel": msg["channel"], "ts": ts,
                          "message": {"type": "message", "subtype": "bot_message",
                                      "bot_id": "B0STANDIN", "text": msg.get("text", ""),
                                      "blocks": msg.get("blocks", []), "ts": ts}})

    def response_url(self, raw):
        s = self.server.slack
        try:
            reply = json.loads(raw)
        except ValueError:
            return self.answer(400, b"invalid_payload", "text/plain")
        with s.lock:
            n = s.uses.get(self.path, 0)
            if n >= REPLIES_PER_URL:
                return self.answer(404, b"used_url", "text/plain")
            s.uses[self.path] = n + 1
            entry = {"url": self.path, "reply": reply}
            s.replies.append(entry)
            s.record("reply", entry)
        self.answer(200, b"ok", "text/plain")

    # -- a person pressing a button ----------------------------------------

    def press(self, req):
        s = self.server.slack
        with s.lock:
            if req.get("replay"):
                if s.last_press is None:
                    return self.answer(409, {"error": "nothing pressed yet"})
                headers, body, url = s.last_press
                return self.answer(200, dict(self.send_press(headers, body), response_url=url))
            msgs = [m for m in s.messages if m["ts"] == req["ts"]] if req.get("ts") \
                else s.messages[-1:]
            if not msgs:
                return self.answer(404, {"error": "no such message"})
            s.presses += 1
            url = "http://%s:%d/actions/%d" % (self.server.server_address[0],
                                               self.server.server_address[1], s.presses)
        m = msgs[0]
        action_id = "oncegate_" + req.get("action", "approve")
        button = block_id = None
        for b in m["message"].get("blocks", []):
            for e in b.get("elements", []) if b.get("type") == "actions" else []:
                if e.get("action_id") == action_id:
                    button, block_id = e, b.get("block_id")
        if button is None:
            return self.answer(404, {"error": "the message has no button " + action_id})
        team = req.get("team", "T0STANDIN")
        payload = {
            "type": "block_actions",
            "team": {"id": team, "domain": "standin"},
            "user": {"id": req.get("user", "U0NOBODY"), "username": "someone", "team_id": team},
            "api_app_id": "A0STANDIN",
            "token": "verification-token-unused",
            "container": {"type": "message", "message_ts": m["ts"], "channel_id": m["channel"],
                          "is_ephemeral": False},
            "trigger_id": "1.2.%d" % s.presses,
            "channel": {"id": m["channel"], "name": "approvals"},
            "message": {"type": "message", "ts": m["ts"], "text": m["message"].get("text", ""),
                        "blocks": m["message"].get("blocks", [])},
            "response_url": url,
            "actions": [{"action_id": action_id, "block_id": block_id, "type": "button",
                         "text": button["text"], "value": req.get("value", button.get("value")),
                         "action_ts": "%.6f" % time.time()}],
        }
        if "url" in button:
            payload["actions"][0]["url"] = button["url"]
            payload["actions"][0].pop("value", None)
        body = urllib.parse.urlencode({"payload": json.dumps(payload, ensure_ascii=False)})
        ts = str(int(time.time()) - int(req.get("age", 0)))
        secret = read_secret(s.args.signing_secret_file)
        if req.get("forge"):
            secret = secret[::-1] + "x"
        sig = "v0=" + hmac.new(secret.encode(), ("v0:%s:%s" % (ts, body)).encode(),
                               hashlib.sha256).hexdigest()
        headers = {"Content-Type": "application/x-www-form-urlencoded",
                   "X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sig,
                   "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)"}
        with s.lock:
            s.last_press = (headers, body.encode(), url)
        self.answer(200, dict(self.send_press(headers, body.encode()), response_url=url,
                              payload=payload))

    def send_press(self, headers, body):
        u = urllib.parse.urlsplit(self.server.slack.args.interactions)
        c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=10)
        try:
            c.request("POST", u.path, body=body, headers=headers)
            r = c.getresponse()
            text = r.read().decode("utf-8", "replace")
            return {"status": r.status, "body": text}
        finally:
            c.close()


def main():
    parser = provlib.parser("Loopback stand-in for Slack (chat.postMessage, response_url, "
                            "button presses).")
    parser.add_argument("--token-file", required=True, help="the bot token it accepts")
    parser.add_argument("--signing-secret-file", required=True,
                        help="the signing secret presses are signed with")
    parser.add_argument("--interactions", required=True,
                        help="oncegate's interactivity URL, where presses go")
    parser.add_argument("--record", metavar="FILE", help="append what is received, as JSON lines")
    args = parser.parse_args()
    if args.host not in ("127.0.0.1", "localhost") and not args.host.startswith("127."):
        parser.error("--host must be a loopback address")
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        server = ThreadingHTTPServer((args.host, args.port), Handler)
    except OSError as exc:
        sys.stderr.write("slack_standin: cannot listen on %s:%d: %s\n"
                         % (args.host, args.port, exc.strerror or exc))
        return 1
    server.daemon_threads = True
    server.slack = Slack(args)
    return provlib.serve_until_signal(server, args.pid)


if __name__ == "__main__":
    sys.exit(main())

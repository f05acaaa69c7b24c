#!/usr/bin/python3
"""A loopback stand-in for an OpenAI-compatible chat completions endpoint.

The n8n end-to-end test (tests/n8n/run.sh) points the example workflows'
model step at it, so the test can count model calls and make the model
break the contract on purpose.  Standard library only.

    /usr/bin/python3 tests/n8n/model_server.py --port P [--pid FILE]

Once listening on 127.0.0.1 it prints `ready <port>` (port 0 picks a free
one).  SIGTERM or SIGINT stops it with exit status 0.

POST /v1/chat/completions  (OpenAI's request and answer shape)
    The answer's choices[0].message.content is a JSON document, as a model
    asked for a structured answer writes it.  What it holds depends on the
    messages (all of their text, searched for markers):
      the system message names `crm_tag`    {"tag", "confidence", "reason"}
      otherwise (support_reply)             {"subject", "body", "tone",
                                             "confidence"}
      `[break]` anywhere                    an answer that breaks either
                                            contract (tone "sarcastic",
                                            confidence 7, an extra field),
                                            on every call, repairs included
      `[break-once]` anywhere               the broken answer of `[break]` until
                                            the conversation holds oncegate's
                                            errors ("oncegate rejected"), then
                                            a valid one: a repair that works
      `[fail]` anywhere                     503 {"error": ...} (a provider
                                            outage)
      `asked for changes` (support_reply)   a redraft: the reply revised
                                            (subject "… (revised)"), as
                                            after a reviewer's feedback
      `[low]` anywhere (crm_tag)            confidence 0.4 (needs a person)
    A request needs `Authorization: Bearer <anything>` (401 otherwise), as
    the real endpoints do, so the test shows the credential is sent.
GET /_requests   every chat request: seq, time, authorization_present,
                 messages, answered (status)
POST /_reset     forget them
GET /_health     200 {"ok": true}
"""

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
REQUESTS = []
BODY_LIMIT = 1024 * 1024


def completion(content, model):
    return {
        "id": "chatcmpl-test-%d" % len(REQUESTS),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": "stop",
        }],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def answer_for(messages):
    """(status, content-or-error) for the conversation."""
    text = "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
    system = "\n".join(str(m.get("content", "")) for m in messages
                       if isinstance(m, dict) and m.get("role") == "system")
    if "[fail]" in text:
        return 503, "the model is overloaded"
    crm = "crm_tag" in system
    repaired = "oncegate rejected" in text
    if "[break]" in text or ("[break-once]" in text and not repaired):
        if crm:
            out = {"tag": "vip", "confidence": 7, "mood": "great"}
        else:
            out = {"subject": "", "body": "Sure.", "tone": "sarcastic",
                   "confidence": 7, "mood": "great"}
    elif crm:
        out = {"tag": "lead", "confidence": 0.4 if "[low]" in text else 0.95,
               "reason": "The message asks for a price quote."}
    elif "asked for changes" in text:
        out = {"subject": "Re: your request (revised)",
               "body": "Hello,\nas you asked: your parcel ships on Friday, order number "
                       "included. Спасибо! 🙏\nSupport",
               "tone": "friendly", "confidence": 0.9}
    elif "[break-once]" in text:
        out = {"subject": "Re: Где моя посылка? 荷物はどこ? 📦",
               "body": "Ольга, простите за задержку — посылка уже в пути.\n"
                       "配送状況を確認しました。金曜日に発送します。🚚\nSupport",
               "tone": "friendly", "confidence": 0.77}
    else:
        out = {"subject": "Re: your request",
               "body": "Hello,\nthank you for writing. Your parcel ships on Friday.\nSupport",
               "tone": "friendly", "confidence": 0.82}
    return 200, json.dumps(out)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "model-stub/1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def send_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > BODY_LIMIT:
            return None
        return self.rfile.read(n) if n > 0 else b""

    def do_GET(self):
        if self.path == "/_requests":
            with LOCK:
                self.send_json(200, list(REQUESTS))
        elif self.path == "/_health":
            self.send_json(200, {"ok": True})
        else:
            self.send_json(404, {"error": "not found"})

    def do_POST(self):
        body = self.read_body()
        if body is None:
            self.send_json(413, {"error": "body too large"})
            return
        if self.path == "/_reset":
            with LOCK:
                REQUESTS.clear()
            self.send_json(200, {"ok": True})
            return
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self.send_json(404, {"error": "not found"})
            return
        try:
            req = json.loads(body or b"{}")
            messages = req.get("messages") or []
            if not isinstance(messages, list):
                raise ValueError("messages is not a list")
        except (ValueError, AttributeError) as e:
            self.send_json(400, {"error": {"message": "bad request: %s" % e}})
            return
        auth = self.headers.get("Authorization") or ""
        status, content = (401, "missing bearer token") if not auth.startswith("Bearer ") \
            else answer_for(messages)
        with LOCK:
            REQUESTS.append({"seq": len(REQUESTS) + 1, "time": time.time(),
                             "authorization_present": bool(auth),
                             "model": req.get("model"), "messages": messages,
                             "answered": status})
        if status != 200:
            self.send_json(status, {"error": {"message": content, "type": "server_error"}})
        else:
            self.send_json(200, completion(content, str(req.get("model") or "stub")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--pid")
    args = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    srv.daemon_threads = True
    if args.pid:
        with open(args.pid, "w") as f:
            f.write("%d\n" % os.getpid())

    def stop(*_):
        threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("ready %d" % srv.server_address[1], flush=True)
    srv.serve_forever()
    srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

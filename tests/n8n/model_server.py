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

    With `tools` (function tools, OpenAI's documented shape; an agent's
    request) it acts as a model that uses them:
      the last message is not `role: tool`  one tool call (message.content
                                            null, message.tool_calls,
                                            finish_reason "tool_calls"): the
                                            offered tool the conversation
                                            names, by its name or, when
                                            the client prefixed it (n8n
                                            2.41: `<node>_<tool>`), by
                                            the tool's own name (the
                                            first offered otherwise), its
                                            arguments filled from its
                                            `parameters` schema: a member
                                            named in a `name: value` line of
                                            the conversation takes that value;
                                            an `output` object is the draft
                                            above (crm_tag's when it has a
                                            `tag`); a required member with no
                                            value takes the schema's first
                                            enum value, or the user's text
      the last message is `role: tool`      a final answer (finish_reason
                                            "stop") saying what the tool
                                            answered: "the tool answered
                                            <status> (key <key>)" from the
                                            result's JSON text (n8n's AI
                                            Agent may rename the call in
                                            the history it sends back, to
                                            the node that ran it); its
                                            tool_call_id must name
                                            a call of an earlier assistant
                                            message (400 otherwise, as OpenAI
                                            answers)
    A malformed `tools` or tool message is 400 with OpenAI's error shape.
GET /_requests   every chat request: seq, time, authorization_present,
                 messages, tools (the names offered), parameters (each
                 offered tool's schema as the request gave it), called
                 (the tool the answer called, if any), arguments (its
                 arguments), answered (status)
POST /_reset     forget them
GET /_health     200 {"ok": true}
"""

import argparse
import json
import os
import re
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


# The reply an agent drafts for support (the support_reply contract).
AGENT_REPLY = {
    "subject": "Re: Где моя посылка? 荷物はどこ? 📦",
    "body": "Ольга, простите за задержку — посылка уже в пути.\n"
            "配送状況を確認しました。金曜日に発送します。🚚\n"
            "نعتذر عن التأخير، سيصل طردك يوم الجمعة.\nSupport",
    "tone": "friendly",
    "confidence": 0.81,
}


def completion_message(message, finish_reason, model):
    """A chat.completion whose one choice is MESSAGE."""
    out = completion(None, model)
    out["choices"][0]["message"] = message
    out["choices"][0]["finish_reason"] = finish_reason
    return out


def answer_for(messages, crm=None, agent=False):
    """(status, content-or-error) for the conversation; CRM forces the
    contract (None: crm_tag when the system message names it); AGENT: the
    support reply an agent drafts (AGENT_REPLY) instead of the workflow's."""
    text = "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
    system = "\n".join(str(m.get("content", "")) for m in messages
                       if isinstance(m, dict) and m.get("role") == "system")
    if "[fail]" in text:
        return 503, "the model is overloaded"
    if crm is None:
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
    elif agent:
        out = AGENT_REPLY
    else:
        out = {"subject": "Re: your request",
               "body": "Hello,\nthank you for writing. Your parcel ships on Friday.\nSupport",
               "tone": "friendly", "confidence": 0.82}
    return 200, json.dumps(out)


def text_of(content):
    """A message's text: a string, or the text parts of a list."""
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


class BadRequest(ValueError):
    pass


def check_tools(tools):
    """The names of TOOLS, which must be function tools as OpenAI documents
    them ({"type": "function", "function": {"name", "parameters"}})."""
    if not isinstance(tools, list) or not tools:
        raise BadRequest("tools must be a non-empty array")
    names = []
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or t.get("type") != "function" or \
                not isinstance(fn.get("name"), str) or not fn["name"]:
            raise BadRequest("each tool must be {type: function, function: {name, ...}}")
        if not isinstance(fn.get("parameters", {}), dict):
            raise BadRequest("tools[].function.parameters must be an object")
        names.append(fn["name"])
    return names


def facts_of(messages):
    """`name: value` lines of the system and user messages (first wins)."""
    facts = {}
    for m in messages:
        if m.get("role") not in ("system", "user", "developer"):
            continue
        for line in text_of(m.get("content")).splitlines():
            mt = re.match(r"^\s*([A-Za-z_][A-Za-z0-9_]*):\s*(\S.*?)\s*$", line)
            if mt:
                facts.setdefault(mt.group(1), mt.group(2))
    return facts


def fill(schema, facts, messages, user_text):
    """Arguments for an object SCHEMA, as a model that read the conversation
    writes them."""
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    out = {}
    for name, sub in props.items():
        sub = sub if isinstance(sub, dict) else {}
        types = sub.get("type") if isinstance(sub.get("type"), list) else [sub.get("type")]
        if name == "output" and "object" in types:
            crm = "tag" in (sub.get("properties") or {})
            status, content = answer_for(messages, crm, agent=True)
            out[name] = json.loads(content) if status == 200 else {}
        elif name in facts:
            v = facts[name]
            if ("integer" in types or "number" in types) and re.fullmatch(r"-?\d+", v) \
                    and "string" not in types:
                v = int(v)
            out[name] = v
        elif name in required:
            if "object" in types:
                out[name] = fill(sub, facts, messages, user_text)
            elif sub.get("enum"):
                out[name] = sub["enum"][0]
            elif "number" in types or "integer" in types:
                out[name] = 0
            else:
                out[name] = user_text
    return out


def tool_named(names, text):
    """The offered tool the conversation TEXT names, as a model reads it:
    the one whose name is the longest word of the text, or ends with `_`
    and that word (n8n 2.41's AI Agent offers an MCP server's tool `x` as
    `<node name>_x`, e.g. oncegate__MCP__x for the node "oncegate (MCP)",
    while the request names `x`); the first offered when none is named."""
    words = set(re.findall(r"[A-Za-z0-9_]+", text))
    best, score = names[0], 0
    for n in names:
        for w in words:
            if len(w) > score and (n == w or n.endswith("_" + w)):
                best, score = n, len(w)
    return best


def tool_answer(req, messages, seq):
    """(status, body) for a request offering tools."""
    names = check_tools(req.get("tools"))
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest("each message must be an object with a role")
    last = messages[-1] if messages else {}
    model = str(req.get("model") or "stub")
    if last.get("role") == "tool":
        called = {}
        for m in messages:
            if m.get("role") == "assistant":
                for c in m.get("tool_calls") or []:
                    called[c.get("id")] = (c.get("function") or {}).get("name")
        if not isinstance(last.get("tool_call_id"), str) or last["tool_call_id"] not in called:
            raise BadRequest("messages with role 'tool' must be a response to a "
                             "preceding message with 'tool_calls'")
        text = text_of(last.get("content")).replace('\\"', '"')
        st = re.search(r'"status"\s*:\s*"([a-z_]+)"', text)
        key = re.search(r'"key"\s*:\s*"([^"]+)"', text)
        say = "the tool answered %s (key %s)" % (st.group(1) if st else "no status",
                                                  key.group(1) if key else "none")
        return 200, completion_message({"role": "assistant", "content": say,
                                        "refusal": None}, "stop", model)
    text = "\n".join(text_of(m.get("content")) for m in messages)
    if "[fail]" in text:
        return 503, "the model is overloaded"
    name = tool_named(names, text)
    fn = next(t["function"] for t in req["tools"] if t["function"]["name"] == name)
    user = [text_of(m.get("content")) for m in messages if m.get("role") == "user"]
    args = fill(fn.get("parameters") or {}, facts_of(messages), messages,
                user[-1] if user else "")
    call = {"id": "call_%06d" % seq, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}
    return 200, completion_message({"role": "assistant", "content": None,
                                    "tool_calls": [call], "refusal": None},
                                   "tool_calls", model)


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
        with LOCK:
            seq = len(REQUESTS) + 1
        body = called = arguments = None
        try:
            if not auth.startswith("Bearer "):
                status, content = 401, "missing bearer token"
            elif "tools" in req:
                status, content = tool_answer(req, messages, seq)
                if status == 200:
                    body, content = content, None
                    calls = body["choices"][0]["message"].get("tool_calls") or [{}]
                    called = (calls[0].get("function") or {}).get("name")
                    arguments = json.loads((calls[0].get("function") or {}).get("arguments") or "null")
            else:
                status, content = answer_for(messages)
        except BadRequest as e:
            status, content = 400, str(e)
        with LOCK:
            REQUESTS.append({"seq": seq, "time": time.time(),
                             "authorization_present": bool(auth),
                             "model": req.get("model"), "messages": messages,
                             "tools": [t["function"]["name"] for t in req["tools"]]
                             if status != 400 and "tools" in req else None,
                             "parameters": {t["function"]["name"]: t["function"].get("parameters")
                                            for t in req["tools"]}
                             if status != 400 and "tools" in req else None,
                             "called": called, "arguments": arguments, "answered": status})
        if status == 400:
            self.send_json(400, {"error": {"message": content, "type": "invalid_request_error",
                                           "param": None, "code": None}})
        elif status != 200:
            self.send_json(status, {"error": {"message": content, "type": "server_error"}})
        elif body is not None:
            self.send_json(200, body)
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

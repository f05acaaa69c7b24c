#!/usr/bin/python3
"""Checks the model stand-in (model_server.py) against OpenAI's published
Chat Completions examples for tools, vendored in
tests/data/openai-chat-tools (see its SOURCE.md):

    model_check.py BASE_URL        (e.g. http://127.0.0.1:PORT/v1)

1. OpenAI's "Functions" request, sent as published, is answered in the
   published response's shape: a chat.completion whose one choice has
   finish_reason "tool_calls" and a message with the members the
   ChatCompletionResponseMessage schema requires, content null, and one
   call of the offered function (ChatCompletionMessageToolCall: id, type
   "function", function.name, function.arguments a JSON string holding the
   parameters the tool requires, each of its declared type and enum);
2. the conversation continued as OpenAI documents it (the assistant
   message with its tool_calls, then a `role: tool` message answering its
   id) ends with finish_reason "stop" and text saying what the tool gave;
3. a tool message answering no call, and tools that are not function
   tools, are refused 400 with OpenAI's error shape.

Prints one `ok - ...` line a check; exits 1 at the first that fails.
"""

import json
import os
import sys
import urllib.error
import urllib.request

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "openai-chat-tools")


def load(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return json.load(f)


def post(base, body):
    req = urllib.request.Request(base + "/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json",
                                  "Authorization": "Bearer sk-test-not-a-secret"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def check(cond, what):
    if not cond:
        print("FAIL - %s" % what, file=sys.stderr)
        sys.exit(1)
    print("ok - %s" % what)


def of_type(value, prop):
    want = {"string": str, "number": (int, float), "integer": int, "boolean": bool,
            "object": dict, "array": list}[prop.get("type", "string")]
    return isinstance(value, want) and (not prop.get("enum") or value in prop["enum"])


def main():
    base = sys.argv[1].rstrip("/")
    request, published = load("functions-request.json"), load("functions-response.json")
    schemas = load("schemas.json")
    fn = request["tools"][0]["function"]

    status, ans = post(base, request)
    check(status == 200, "OpenAI's Functions request: 200")
    check(set(published) - {"usage"} <= set(ans) and ans["object"] == published["object"],
          "the answer has the published response's members (%s)" % ", ".join(sorted(published)))
    choice, pchoice = ans["choices"][0], published["choices"][0]
    check(len(ans["choices"]) == 1 and choice["finish_reason"] == pchoice["finish_reason"] == "tool_calls",
          "one choice, finish_reason tool_calls, as published")
    msg = choice["message"]
    required = schemas["ChatCompletionResponseMessage"]["required"]
    check(all(k in msg for k in required) and msg["role"] == "assistant" and msg["content"] is None,
          "the message has %s, content null, as published" % ", ".join(required))
    calls = msg.get("tool_calls")
    check(isinstance(calls, list) and len(calls) == len(pchoice["message"]["tool_calls"]) == 1,
          "one tool call, as published")
    call, pcall = calls[0], pchoice["message"]["tool_calls"][0]
    check(all(k in call for k in schemas["ChatCompletionMessageToolCall"]["required"])
          and call["type"] == pcall["type"] == "function" and isinstance(call["id"], str)
          and call["function"]["name"] == pcall["function"]["name"] == fn["name"],
          "the call: id, type function, function.name %s, as published" % fn["name"])
    check(isinstance(call["function"]["arguments"], str) and isinstance(pcall["function"]["arguments"], str),
          "function.arguments is a JSON string, as published")
    args = json.loads(call["function"]["arguments"])
    params = fn["parameters"]
    check(isinstance(args, dict) and all(k in args for k in params["required"])
          and all(of_type(v, params["properties"][k]) for k, v in args.items()),
          "the arguments %s hold the required %s, each of its declared type"
          % (call["function"]["arguments"], params["required"]))

    # The conversation continued as documented: the assistant message
    # (ChatCompletionRequestAssistantMessage) and the tool's answer
    # (ChatCompletionRequestToolMessage).
    tool_msg = {"role": "tool", "tool_call_id": call["id"],
                "content": json.dumps({"status": "completed", "key": "boston-today"})}
    check(all(k in tool_msg for k in schemas["ChatCompletionRequestToolMessage"]["required"]),
          "the tool message carries %s" % ", ".join(schemas["ChatCompletionRequestToolMessage"]["required"]))
    follow = dict(request, messages=request["messages"] + [
        {"role": "assistant", "content": None, "tool_calls": calls}, tool_msg])
    status, ans = post(base, follow)
    check(status == 200 and ans["choices"][0]["finish_reason"] == "stop",
          "after the role: tool message: 200, finish_reason stop")
    text = ans["choices"][0]["message"]["content"]
    check(all(k in ans["choices"][0]["message"] for k in required) and
          text == "the tool answered completed (key boston-today)",
          "the final answer says what the tool gave: %s" % text)

    stray = dict(follow, messages=request["messages"] + [dict(tool_msg, tool_call_id="call_nobody")])
    status, ans = post(base, stray)
    check(status == 400 and ans["error"]["type"] == "invalid_request_error",
          "a tool message answering no call: 400 invalid_request_error")
    status, ans = post(base, dict(request, tools=[{"type": "web_search"}]))
    check(status == 400 and isinstance(ans["error"]["message"], str),
          "a tool that is not a function tool: 400")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Reads n8n's own record of its executions (its SQLite database), so the
n8n end-to-end test can say which branch an execution ended on.

    n8n_exec.py DB list
        one JSON object per line for every execution: id, workflow_id,
        status, finished, last_node, key (the oncegate run the execution
        handled: the first `oncegate.key` an oncegate node put out),
        failed_execution (error workflow only), approval_url (an approval
        link anywhere in the execution's data, if any), nodes (the nodes
        that ran) and branches: for each oncegate node, the outputs it put
        items on, one entry per run of the node (e.g. "Submit the draft":
        ["loop back", "rejected"]); error (the message the execution failed
        with, if any); from what those
        nodes put out: claim_error ("<code> <status>" on a claim's error
        output), effect_id (approved), decision_reason (rejected), feedback
        (changes requested: the approver's, as the node put it out) and report
        (a Fail: "reported: <state>", "already settled: <state>" or "not
        reported").

n8n keeps each execution's data in execution_data.data in the `flatted`
format (a JSON array; every object and string is stored once and referred
to by its index as a string), decoded here.  The database is opened
read-only, while n8n runs.
"""

import json
import re
import sqlite3
import sys

ONCEGATE_NODE = "n8n-nodes-oncegate.oncegate"
# The outputs of each operation of the oncegate node, in order.
OUTPUTS = {
    "claim": ["claimed", "duplicate", "error"],
    "submitAndWait": ["loop back", "approved", "rejected", "expired", "invalid",
                      "changes requested"],
    "complete": ["completed"],
    "fail": ["reported"],
    "renewLease": ["renewed"],
    "getRun": ["run"],
    "decide": ["decided", "refused"],
}
APPROVAL_LINK = re.compile(r"https?://[^\s\"'<>]*/approve/[A-Za-z0-9_-]{20,}")


def unflatten(text):
    arr = json.loads(text)
    memo = {}

    def revive(i):
        if i in memo:
            return memo[i]
        v = arr[i]
        if isinstance(v, list):
            out = []
            memo[i] = out
            out.extend(ref(x) for x in v)
            return out
        if isinstance(v, dict):
            out = {}
            memo[i] = out
            for k, x in v.items():
                out[k] = ref(x)
            return out
        memo[i] = v
        return v

    def ref(x):
        # Inside containers a string is an index into the array.
        if isinstance(x, str):
            return revive(int(x))
        return x

    return revive(0)


def outputs(run):
    try:
        return (run.get("data") or {}).get("main") or []
    except AttributeError:
        return []


def describe(row):
    ex_id, wf_id, status, finished, data, workflow = row
    info = {"id": str(ex_id), "workflow_id": wf_id, "status": status,
            "finished": bool(finished), "last_node": None, "key": None,
            "failed_execution": None, "approval_url": None, "nodes": [],
            "branches": {}, "claim_error": None, "effect_id": None,
            "decision_reason": None, "feedback": None, "report": None, "error": None}
    link = APPROVAL_LINK.search(data or "")
    if link:
        info["approval_url"] = link.group(0)
    try:
        d = unflatten(data)
        wf = json.loads(workflow) if workflow else {}
    except (ValueError, IndexError, TypeError):
        return info
    result = d.get("resultData") or {}
    run_data = result.get("runData") or {}
    info["last_node"] = result.get("lastNodeExecuted")
    err = result.get("error")
    if isinstance(err, dict):
        info["error"] = err.get("message")
    info["nodes"] = sorted(run_data.keys())
    ops = {n.get("name"): (n.get("parameters") or {}).get("operation", "claim")
           for n in wf.get("nodes") or [] if n.get("type") == ONCEGATE_NODE}
    for name, op in ops.items():
        names = OUTPUTS.get(op, [])
        for run in run_data.get(name) or []:
            for i, items in enumerate(outputs(run)):
                if not items:
                    continue
                info["branches"].setdefault(name, []).append(names[i] if i < len(names) else str(i))
                js = items[0].get("json") or {}
                og = js.get("oncegate") or {}
                if not isinstance(og, dict):
                    continue
                if info["key"] is None and og.get("key"):
                    info["key"] = og["key"]
                out = names[i] if i < len(names) else ""
                if op == "claim" and out == "error":
                    err = js.get("error") or {}
                    info["claim_error"] = "%s %s" % (err.get("code"), err.get("status"))
                elif op == "submitAndWait" and out == "approved":
                    info["effect_id"] = og.get("effect_id")
                elif op == "submitAndWait" and out == "rejected":
                    info["decision_reason"] = og.get("reason")
                elif op == "submitAndWait" and out == "changes requested":
                    info["feedback"] = og.get("feedback")
                elif op == "fail":
                    if og.get("already_settled"):
                        info["report"] = "already settled: %s" % og.get("state")
                    elif og.get("reported"):
                        info["report"] = "reported: %s" % og.get("state")
                    else:
                        info["report"] = "not reported"
    trigger = run_data.get("Error Trigger") or []
    if trigger:
        try:
            failed = trigger[0]["data"]["main"][0][0]["json"]["execution"]
            info["failed_execution"] = str(failed.get("id", ""))
        except (KeyError, IndexError, TypeError):
            pass
    return info


def main():
    if len(sys.argv) != 3 or sys.argv[2] != "list":
        print(__doc__, file=sys.stderr)
        return 2
    db = sqlite3.connect("file:%s?mode=ro" % sys.argv[1], uri=True, timeout=10)
    rows = db.execute(
        "SELECT e.id, e.workflowId, e.status, e.finished, d.data, d.workflowData"
        "  FROM execution_entity e JOIN execution_data d ON d.executionId = e.id"
        " ORDER BY e.id").fetchall()
    for row in rows:
        print(json.dumps(describe(row)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

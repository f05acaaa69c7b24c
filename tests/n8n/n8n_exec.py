#!/usr/bin/python3
"""Reads n8n's own record of its executions (its SQLite database), so the
n8n end-to-end test can say which branch an execution ended on.

    n8n_exec.py DB list
        one JSON object per line for every execution: id, workflow_id,
        status, finished, last_node, key (the oncegate key the workflow
        built, or the one the error workflow reported), failed_execution
        (error workflow only), approval_url (the first approval link
        oncegate answered, if any), nodes (the nodes that ran)

n8n keeps each execution's data in execution_data.data in the `flatted`
format (a JSON array; every object and string is stored once and referred
to by its index as a string), decoded here.  The database is opened
read-only, while n8n runs.
"""

import json
import sqlite3
import sys


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


def first_json(run_data, node, output=0):
    try:
        return run_data[node][0]["data"]["main"][output][0]["json"]
    except (KeyError, IndexError, TypeError):
        return None


def describe(row):
    ex_id, wf_id, status, finished, data = row
    info = {"id": str(ex_id), "workflow_id": wf_id, "status": status,
            "finished": bool(finished), "last_node": None, "key": None,
            "failed_execution": None, "approval_url": None, "nodes": []}
    try:
        d = unflatten(data)
    except (ValueError, IndexError, TypeError):
        return info
    result = d.get("resultData") or {}
    run_data = result.get("runData") or {}
    info["last_node"] = result.get("lastNodeExecuted")
    info["nodes"] = sorted(run_data.keys())
    built = first_json(run_data, "Build the key")
    if built:
        info["key"] = built.get("key")
    failure = first_json(run_data, "Read the failure")
    if failure:
        info["key"] = failure.get("key")
        info["failed_execution"] = failure.get("failed_execution")
    for node in ("oncegate output", "oncegate output (repair)"):
        answer = first_json(run_data, node)
        body = (answer or {}).get("body") or {}
        if isinstance(body, dict) and body.get("approvals"):
            info["approval_url"] = body["approvals"][0].get("url")
    return info


def main():
    if len(sys.argv) != 3 or sys.argv[2] != "list":
        print(__doc__, file=sys.stderr)
        return 2
    db = sqlite3.connect("file:%s?mode=ro" % sys.argv[1], uri=True, timeout=10)
    rows = db.execute(
        "SELECT e.id, e.workflowId, e.status, e.finished, d.data"
        "  FROM execution_entity e JOIN execution_data d ON d.executionId = e.id"
        " ORDER BY e.id").fetchall()
    for row in rows:
        print(json.dumps(describe(row)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

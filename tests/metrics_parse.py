#!/usr/bin/python3
"""Parses a Prometheus text exposition with the Prometheus client library.

    /usr/bin/python3 tests/metrics_parse.py FILE

Prints one JSON object: {"types": {family: type}, "samples": {key: value}}
where key is the sample name followed by its labels sorted by name, as
name{a="x",b="y"}. A parse error, a family twice or a sample twice prints
{"error": "..."} and exits 1. The integration suites use it so that what
/metrics answers is read by a real Prometheus parser, never by a regex.
"""

import json
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families

    with open(sys.argv[1], encoding="utf-8") as f:
        text = f.read()
    out = {"types": {}, "samples": {}}
    for fam in text_string_to_metric_families(text):
        if fam.name in out["types"]:
            raise ValueError("family twice: " + fam.name)
        out["types"][fam.name] = fam.type
        for s in fam.samples:
            key = s.name
            if s.labels:
                key += "{" + ",".join('%s="%s"' % (k, s.labels[k])
                                      for k in sorted(s.labels)) + "}"
            if key in out["samples"]:
                raise ValueError("sample twice: " + key)
            out["samples"][key] = s.value
    json.dump(out, sys.stdout)
except Exception as e:  # noqa: BLE001 - report anything as a parse failure
    json.dump({"error": "%s: %s" % (type(e).__name__, e)}, sys.stdout)
    sys.exit(1)

#!/usr/bin/python3
"""Reads the demo mailbox: what the loopback SMTP server (smtp_sink.py)
received, decoded as a mail client shows it.

    /usr/bin/python3 tests/providers/mailbox.py RECORD [--to ADDRESS]
        [--subject TEXT] [--grep TEXT] [--last N] [--link] [--json]

RECORD is the sink's --record file (`./dev up`: .dev/up/demo-smtp.jsonl;
`./dev mail` passes it). Each mail is printed with its Date, From, To,
Subject and plain-text body, oldest first.

--to ADDRESS     only mails with ADDRESS among their recipients
--subject TEXT   only mails whose Subject starts with TEXT
--grep TEXT      only mails whose body contains TEXT (a run's key)
--last N         only the N newest matching mails
--link           print only the approval link (…/approve/<token>) of the
                 newest matching mail, for scripts; exit status 1 if none
--json           one JSON object per mail: rcpt, from, to, subject, date,
                 message_id, body
"""

import argparse
import email
import email.policy
import email.utils
import json
import re
import sys

LINK = re.compile(r"https?://\S+/approve/[A-Za-z0-9_-]{43}")


def mails(record):
    try:
        lines = open(record, encoding="utf-8").read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        if not line.strip():
            continue
        r = json.loads(line)
        m = email.message_from_string(r["data"], policy=email.policy.default)
        body = m.get_body(preferencelist=("plain",))
        out.append({
            "rcpt": r.get("rcpt_tos") or [],
            "from": str(m.get("From", "")),
            "to": [a for _, a in email.utils.getaddresses([str(m.get("To", ""))])],
            "subject": str(m.get("Subject", "")),
            "date": str(m.get("Date", "")),
            "message_id": r.get("message_id"),
            "body": (body.get_content() if body is not None else "").replace("\r\n", "\n"),
        })
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("record")
    ap.add_argument("--to")
    ap.add_argument("--subject")
    ap.add_argument("--grep")
    ap.add_argument("--last", type=int)
    ap.add_argument("--link", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    got = mails(a.record)
    if a.to:
        want = a.to.lower()
        got = [m for m in got if want in (x.lower() for x in m["rcpt"])]
    if a.subject:
        got = [m for m in got if m["subject"].startswith(a.subject)]
    if a.grep:
        got = [m for m in got if a.grep in m["body"]]
    if a.last:
        got = got[-a.last:]
    if a.link:
        for m in reversed(got):
            found = LINK.search(m["body"])
            if found:
                print(found.group(0))
                return 0
        return 1
    for m in got:
        if a.json:
            print(json.dumps(m, ensure_ascii=False))
            continue
        print("Date:    " + m["date"])
        print("From:    " + m["from"])
        print("To:      " + ", ".join(m["to"]))
        print("Subject: " + m["subject"])
        print()
        print(m["body"].rstrip("\n"))
        print("\n" + "-" * 72)
    if not got and not a.json:
        print("(no mail)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The corpus of tests/data/corpus for Python test scripts (the soak, the
multi-host chaos): support mails in several scripts at the contracts'
maxima, recipient lists, group headers, the business keys two tenants
share, model outputs. README.md says what each file holds.

    sys.path.insert(0, "<root>/tests/data/corpus")
    import corpus
    m = corpus.mail("ru_max")            # {"id", "subject", "body", ...}
    corpus.fit_key("soak123:", k)        # prefix + k, at most 200 code points
"""

import email
import email.policy
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
KEY_MAX = 200
_cache = {}


def load(name):
    """One corpus file ("mails.json"), parsed (cached; do not modify)."""
    if name not in _cache:
        with open(os.path.join(HERE, name), encoding="utf-8") as f:
            _cache[name] = json.load(f)
    return _cache[name]


def mails():
    return load("mails.json")["mails"]


def mail(mid):
    for m in mails():
        if m["id"] == mid:
            return m
    raise KeyError("corpus mails.json has no mail %r" % mid)


def long_mails():
    """The mails at the support_reply contract's maxima (200/5000)."""
    return [m for m in mails() if m["id"].endswith("_max")]


def short_mails():
    return [m for m in mails() if m["id"].endswith("_short")]


def brief(m):
    """A note in the script of mail m: its subject cut to 40 code points,
    its body to 60 (what fits a build that cannot send long mail yet)."""
    return dict(m, subject=m["subject"][:40], body=m["body"][:60])


def brief_mails():
    return [brief(m) for m in short_mails()]


def recipients(n=None):
    """The first n addresses of the 100-address list (all by default)."""
    addrs = load("recipients.json")["max"]
    return list(addrs if n is None else addrs[:n])


def groups():
    return load("groups.json")["cases"]


def tenants():
    return [t["name"] for t in load("tenants.json")["tenants"]]


def shared_keys():
    return list(load("tenants.json")["shared_keys"])


def long_keys():
    return list(load("tenants.json")["long_keys"])


def fit_key(prefix, key, max_chars=KEY_MAX):
    """prefix + key, cut to at most max_chars code points in all."""
    assert len(prefix) < max_chars
    return prefix + key[:max_chars - len(prefix)]


def crm_reasons():
    """crm_tag outputs whose reason is at the contract's 500 code points."""
    return [c["output"] for c in load("outputs.json")["crm_tag"]]


# ---- reading what the providers and the database recorded, to compare
# with the corpus ----------------------------------------------------------


def mime_text(raw):
    """(Message-ID, Subject, body text) of a whole message as the SMTP sink
    recorded it, MIME-decoded (RFC 2047 words, base64 or quoted-printable,
    charset); CRLF line ends read as LF, as the corpus writes them."""
    msg = email.message_from_string(raw, policy=email.policy.default)
    part = msg.get_body(preferencelist=("plain",)) if msg.is_multipart() else msg
    body = part.get_content() if part is not None else None
    if body is not None:
        body = body.replace("\r\n", "\n")
    return str(msg.get("Message-ID", "")).strip(), str(msg.get("Subject", "")), body


def header_text(v):
    """A header value as text: http.server reads header bytes as Latin-1;
    the outbox holds UTF-8."""
    try:
        return v.encode("latin-1").decode("utf-8")
    except (AttributeError, UnicodeError):
        return v


def effect_requests(requests):
    """The effect requests among what the HTTP provider recorded (its
    /_requests), each as (request, its body parsed as JSON or None, its
    Idempotency-Key as text)."""
    for r in requests:
        if r.get("kind") != "effect":
            continue
        try:
            b = json.loads(r.get("body") or "")
        except ValueError:
            b = None
        yield r, b, header_text(r.get("idempotency_key") or "")


def same_recipients(mail, to):
    """Did the SMTP sink's mail go to exactly these addresses, in order
    (case aside)?"""
    return [a.lower() for a in mail.get("rcpt_tos", [])] == [a.lower() for a in to]


def read_tsv(path, ncols):
    """Rows of a tab-separated dump (psql -At -F TAB) with exactly ncols
    columns."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == ncols:
                rows.append(parts)
    return rows

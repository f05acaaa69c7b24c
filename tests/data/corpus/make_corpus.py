#!/usr/bin/python3
"""Builds the corpus JSON files of this directory from the hand-written
texts in src/ (a support reply, the customer's message it answers, and the
company's mail footer, per language), so that the mails come out at exactly
the lengths the contracts allow.

    python3 tests/data/corpus/make_corpus.py      (rewrites *.json here)

Lengths are code points, as the contracts count them. Everything is
deterministic: running it twice writes the same bytes.
"""

import hashlib
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
SUBJECT_MAX = 200      # contracts/support_reply.json: subject maxLength
BODY_MAX = 5000        # contracts/support_reply.json: body maxLength
REASON_MAX = 500       # contracts/crm_tag.json: reason maxLength
KEY_MAX = 200          # a run key: 1-200 printable characters
RECIPIENTS_MAX = 100   # an email.send effect: up to 100 recipients

LANGS = {
    # id: (language, script, right-to-left, "X wrote:" line, subject base)
    "ru": ("Russian", "Cyrillic", False, "{date}, Анна Морозова <anna.morozova@example.ru> написала:",
           "Re: Re: Заказ № 4821-77 — посылка не пришла, статус не меняется с 17 ноября"),
    "zh": ("Chinese (Simplified)", "Han", False, "{date}，王伟 <wang.wei@example.cn> 写道：",
           "回复：订单CN-2026-0088431物流停在杭州转运中心、蓝牙耳机X3 Pro运输损坏及发票抬头更正"),
    "ja": ("Japanese", "Han+Hiragana+Katakana", False, "{date} 佐藤 健太 <sato.kenta@example.jp> さんは書きました：",
           "Re: 【至急】ご注文（JP-240915-3321）の商品破損とギフト包装について"),
    "ar": ("Arabic", "Arabic", True, "في {date}، كتب أحمد المنصوري <ahmed.mansouri@example.ae>:",
           "رد: الطلب رقم ٧٧٤٥٢-AE — خصم المبلغ مرتين من البطاقة الائتمانية وموعد وصول الشحنة"),
    "he": ("Hebrew", "Hebrew", True, "ב-{date}, נועה לוי <noa.levi@example.co.il> כתבה:",
           "תשובה: חיוב כפול על מנוי שנתי למרות בקשת ביטול (הזמנה IL-55120-Q)"),
    "emoji": ("English with emoji", "Latin+emoji (ZWJ sequences, flags, skin tones, keycaps)", False,
              "On {date}, Jordan Rivera <jordan.rivera@example.com> wrote:",
              "Re: family plan 👨‍👩‍👧‍👦 invites not received 🤔 + charged twice 💸💸 🏳️‍🌈🇺🇦"),
}
DATES = {
    "ru": ["24 нояб. 2026 г., в 09:14", "23 нояб. 2026 г., в 21:47", "21 нояб. 2026 г., в 18:02",
           "19 нояб. 2026 г., в 08:30", "17 нояб. 2026 г., в 12:11", "15 нояб. 2026 г., в 10:05",
           "14 нояб. 2026 г., в 16:40", "12 нояб. 2026 г., в 11:23", "10 нояб. 2026 г., в 09:01"],
    "zh": ["2026年11月24日 09:14", "2026年11月23日 21:47", "2026年11月22日 18:02",
           "2026年11月21日 08:30", "2026年11月20日 12:11", "2026年11月19日 10:05",
           "2026年11月18日 16:40", "2026年11月17日 11:23", "2026年11月16日 09:01",
           "2026年11月15日 14:12", "2026年11月14日 19:55", "2026年11月13日 07:48",
           "2026年11月12日 13:30", "2026年11月11日 20:20", "2026年11月10日 08:08"],
    "ja": ["2026年11月26日(木) 9:14", "2026年11月25日(水) 21:47", "2026年11月24日(火) 18:02",
           "2026年11月23日(月) 8:30", "2026年11月22日(日) 12:11", "2026年11月21日(土) 10:05",
           "2026年11月20日(金) 16:40", "2026年11月19日(木) 11:23", "2026年11月18日(水) 9:01",
           "2026年11月17日(火) 14:12", "2026年11月16日(月) 19:55", "2026年11月15日(日) 7:48"],
    "ar": ["الثلاثاء ٢٤ نوفمبر ٢٠٢٦ الساعة ٩:١٤ ص", "الاثنين ٢٣ نوفمبر ٢٠٢٦ الساعة ٩:٤٧ م",
           "الأحد ٢٢ نوفمبر ٢٠٢٦ الساعة ٦:٠٢ م", "السبت ٢١ نوفمبر ٢٠٢٦ الساعة ٨:٣٠ ص",
           "الجمعة ٢٠ نوفمبر ٢٠٢٦ الساعة ١٢:١١ م", "الخميس ١٩ نوفمبر ٢٠٢٦ الساعة ١٠:٠٥ ص",
           "الأربعاء ١٨ نوفمبر ٢٠٢٦ الساعة ٤:٤٠ م", "الثلاثاء ١٧ نوفمبر ٢٠٢٦ الساعة ١١:٢٣ ص",
           "الاثنين ١٦ نوفمبر ٢٠٢٦ الساعة ٩:٠١ ص", "الأحد ١٥ نوفمبر ٢٠٢٦ الساعة ٢:١٢ م"],
    "he": ["יום ג', 24 בנוב׳ 2026 ב-09:14", "יום ב', 23 בנוב׳ 2026 ב-21:47",
           "יום א', 22 בנוב׳ 2026 ב-18:02", "שבת, 21 בנוב׳ 2026 ב-08:30",
           "יום ו', 20 בנוב׳ 2026 ב-12:11", "יום ה', 19 בנוב׳ 2026 ב-10:05",
           "יום ד', 18 בנוב׳ 2026 ב-16:40", "יום ג', 17 בנוב׳ 2026 ב-11:23",
           "יום ב', 16 בנוב׳ 2026 ב-09:01", "יום א', 15 בנוב׳ 2026 ב-14:12",
           "שבת, 14 בנוב׳ 2026 ב-19:55", "יום ו', 13 בנוב׳ 2026 ב-07:48"],
    "emoji": ["Tue, Nov 24, 2026 at 9:14 AM", "Mon, Nov 23, 2026 at 9:47 PM",
              "Sun, Nov 22, 2026 at 6:02 PM", "Sat, Nov 21, 2026 at 8:30 AM",
              "Fri, Nov 20, 2026 at 12:11 PM", "Thu, Nov 19, 2026 at 10:05 AM",
              "Wed, Nov 18, 2026 at 4:40 PM", "Tue, Nov 17, 2026 at 11:23 AM",
              "Mon, Nov 16, 2026 at 9:01 AM", "Sun, Nov 15, 2026 at 2:12 PM",
              "Sat, Nov 14, 2026 at 7:55 PM", "Fri, Nov 13, 2026 at 7:48 AM",
              "Thu, Nov 12, 2026 at 1:30 PM", "Wed, Nov 11, 2026 at 8:20 PM",
              "Tue, Nov 10, 2026 at 8:08 AM", "Mon, Nov 9, 2026 at 5:17 PM",
              "Sun, Nov 8, 2026 at 3:03 PM", "Sat, Nov 7, 2026 at 11:45 AM"],
}


def src(name):
    with open(os.path.join(HERE, "src", name), encoding="utf-8") as f:
        return f.read().strip("\n")


def fill(text, filler, n):
    """text, then filler cut so that the whole is exactly n code points
    (the filler repeats when one copy is not enough); never ends in a
    space."""
    need = n - len(text)
    assert need >= 0, (len(text), n)
    pad = (filler * (need // max(len(filler), 1) + 2))[:need]
    if pad.endswith(" "):
        pad = pad[:-1] + "."
    out = text + pad
    assert len(out) == n
    return out


def joins(a, b):
    """Whether a and b belong to one user-perceived character (a ZWJ
    sequence, an emoji with a modifier or variation selector, a flag)."""
    return (b in "\u200d\ufe0f" or "\U0001f3fb" <= b <= "\U0001f3ff" or
            "\U000e0020" <= b <= "\U000e007f" or a == "\u200d")


def subject_at_max(base, tail):
    """base + ' — ' + tail, cut where no character is split and closed
    with a ticket number: exactly SUBJECT_MAX code points."""
    s = base + " — " + " ".join(tail.split())
    n = SUBJECT_MAX - 9
    while n > 0 and (joins(s[n - 1], s[n]) or s[n - 1] == " " or
                     ("\U0001f1e6" <= s[n - 1] <= "\U0001f1ff" and
                      len(re.match("[\U0001f1e6-\U0001f1ff]*", s[n - 1::-1]).group()) % 2)):
        n -= 1
    ticket = ("48213770019365" * 3)[:SUBJECT_MAX - n - 2]
    out = s[:n] + " #" + ticket
    assert len(out) == SUBJECT_MAX
    return out


def quoted(lang, date, text):
    lines = [LANGS[lang][3].format(date=date)]
    lines += ["> " + l if l else ">" for l in text.split("\n")]
    return "\n".join(lines)


def body_at_max(lang, reply, quote, footer):
    """The reply, then the customer's earlier messages quoted one under the
    other (the way a long support thread grows), then the footer cut to the
    exact length."""
    body = reply
    history = [quote, reply.replace("\n\n", "\n")]
    for i, date in enumerate(DATES[lang]):
        block = "\n\n" + quoted(lang, date, history[i % 2])
        if len(body) + len(block) + 2 + 40 > BODY_MAX:
            break
        body += block
    return fill(body + "\n\n", footer + " ", BODY_MAX)


def mail(mid, lang, subject, body, note):
    language, script, rtl = LANGS[lang][:3] if lang in LANGS else (
        "mixed", "Cyrillic+Han+Arabic+Hebrew+Latin+emoji", None)
    return {"id": mid, "language": language, "script": script, "rtl": rtl,
            "subject": subject, "body": body,
            "subject_code_points": len(subject), "body_code_points": len(body),
            "body_utf8_bytes": len(body.encode()), "note": note}


def mails():
    out = []
    for lang, (_, _, _, _, base) in LANGS.items():
        reply, quote, footer = src("reply_%s.txt" % lang), src("quote_%s.txt" % lang), \
            src("footer_%s.txt" % lang)
        paras = reply.split("\n\n")
        short = "\n\n".join(paras[:2] + paras[-1:])
        out.append(mail(lang + "_short", lang, base, short,
                        "a short reply: greeting, first paragraph, signature"))
        out.append(mail(lang + "_reply", lang, base, reply, "the whole reply, multi-paragraph"))
        out.append(mail(lang + "_max", lang, subject_at_max(base, quote),
                        body_at_max(lang, reply, quote, footer),
                        "subject and body at the contract's maxima (200 and 5000 code "
                        "points): the reply with the quoted thread and the footer"))
    # One mail in every script at once, as a multinational team writes.
    parts = []
    for lang in LANGS:
        parts.append(src("reply_%s.txt" % lang).split("\n\n")[1])
    mixed_subject = subject_at_max("Re: Ticket #48213 — Заказ/订单/注文/طلب/הזמנה 🙏🏽",
                                   " ".join(src("quote_%s.txt" % l) for l in LANGS))
    body = "Hello / Здравствуйте / 您好 / こんにちは / مرحبًا / שלום 👋\n\n" + "\n\n".join(parts)
    body += "\n\n" + "\n\n".join(quoted(l, DATES[l][0], src("quote_%s.txt" % l)) for l in LANGS)
    out.append(mail("mixed_max", "mixed", mixed_subject,
                    fill(body + "\n\n", " ".join(src("footer_%s.txt" % l) for l in LANGS) + " ",
                         BODY_MAX),
                    "every script in one mail, Latin and RTL paragraphs next to each other, "
                    "at the maxima"))
    return out


FIRST = ["anna", "ivan", "wei", "yuki", "ahmed", "noa", "jordan", "priya", "olga", "li", "kenji",
         "fatima", "yonatan", "maria", "sam", "riley", "chen", "aiko", "omar", "dana"]
LAST = ["morozova", "petrov", "wang", "tanaka", "mansouri", "levi", "rivera", "sharma",
        "kuznetsova", "na", "sato", "alhammadi", "cohen", "kovaleva", "o'connor"]
DOMAINS = ["example.com", "example.net", "example.org", "mail.example.com", "eu.example.net",
           "support.example.org", "customers.example.com"]


def recipients():
    """Addresses as CRMs export them: first.last, +tags, digits, hyphens,
    an apostrophe, subdomains; ASCII, each one plain local@domain."""
    addrs = []
    i = 0
    while len(addrs) < RECIPIENTS_MAX:
        f, l, d = FIRST[i % len(FIRST)], LAST[(i * 7) % len(LAST)], DOMAINS[(i * 3) % len(DOMAINS)]
        form = i % 5
        if form == 0:
            a = "%s.%s@%s" % (f, l, d)
        elif form == 1:
            a = "%s.%s+support%d@%s" % (f, l, i, d)
        elif form == 2:
            a = "%s-%s%d@%s" % (f, l, 1960 + i, d)
        elif form == 3:
            a = "%s_%s@%s" % (f[0], l, d)
        else:
            a = "%s.%s.%d@%s" % (l, f, i, d)
        if a not in addrs:
            addrs.append(a)
        i += 1
    return {"max": addrs, "ten": addrs[:10], "one": addrs[:1],
            "max_count": RECIPIENTS_MAX}


def groups():
    """Identity headers as SSO proxies send them. `matches` says, for the
    approver entry group:support, whether the person may decide: the
    header is a comma-separated list, each item trimmed and compared
    whole."""
    return [
        {"source": "oauth2-proxy X-Auth-Request-Groups (joined with commas)",
         "header": "customer support,support", "items": ["customer support", "support"],
         "matches_group_support": True},
        {"source": "oauth2-proxy, a group name with a space",
         "header": "customer support", "items": ["customer support"],
         "matches_group_support": False},
        {"source": "oauth2-proxy, several groups, one of them 'support team'",
         "header": "sales,support team,billing", "items": ["sales", "support team", "billing"],
         "matches_group_support": False},
        {"source": "a proxy that puts spaces after the commas",
         "header": "sales, support , billing", "items": ["sales", "support", "billing"],
         "matches_group_support": True},
        {"source": "Keycloak group paths (full path on)",
         "header": "/support/tier 2,/support", "items": ["/support/tier 2", "/support"],
         "matches_group_support": False},
        {"source": "Keycloak group path with spaces",
         "header": "/customer support/tier 2", "items": ["/customer support/tier 2"],
         "matches_group_support": False},
        {"source": "Azure AD / Entra ID group object ids",
         "header": "6f1c2a9e-3b1d-4c55-9a7e-2f0d8b61c4a3,0b7e9d12-58f4-4e0a-b3c1-9d2e6a7f1b08",
         "items": ["6f1c2a9e-3b1d-4c55-9a7e-2f0d8b61c4a3", "0b7e9d12-58f4-4e0a-b3c1-9d2e6a7f1b08"],
         "matches_group_support": False},
        {"source": "Google Workspace groups are addresses",
         "header": "support@example.com,sales@example.com",
         "items": ["support@example.com", "sales@example.com"],
         "matches_group_support": False},
        {"source": "one group, exactly support", "header": "support", "items": ["support"],
         "matches_group_support": True},
        {"source": "support as a word inside other names only",
         "header": "support-eu,tier2 support,supporters",
         "items": ["support-eu", "tier2 support", "supporters"],
         "matches_group_support": False},
    ]


def keys():
    """Business keys two tenants both use: what workflows build from
    ticket ids, order numbers, subjects. The long ones are exactly 200 code
    points; tests put their run prefix in front and cut the end."""
    short = [
        "ticket:48213",
        "zendesk:ticket/48213:reply",
        "order №4821-77 · возврат",
        "订单CN-2026-0088431/退款",
        "注文JP-240915-3321:返品",
        "طلب ٧٧٤٥٢-AE",
        "הזמנה IL-55120-Q",
        "family-plan 👨‍👩‍👧‍👦 🇺🇦",
        "crm contact 1042, reply #2",
        "mail:<CAF=q8x+1@mail.example.com>",
        "100% refund? yes & no",
    ]
    def long(prefix, text):
        s = prefix + " ".join(text.split())
        assert len(s) >= KEY_MAX, (prefix, len(s))
        s = s[:KEY_MAX]
        if s.endswith(" "):
            s = s[:-1] + "."
        return s
    longs = [
        long("support/ru/4821-77:", src("quote_ru.txt")),
        long("support/zh/CN-2026-0088431:", src("quote_zh.txt") + src("footer_zh.txt")),
        long("support/ja/JP-240915-3321:", src("quote_ja.txt") + src("footer_ja.txt")),
        long("support/ar/77452-AE:", src("quote_ar.txt")),
        long("support/he/IL-55120-Q:", src("quote_he.txt")),
        long("support/emoji:", (src("quote_emoji.txt") + " ") * 3),
        long("mixed:", " ".join(src("quote_%s.txt" % l)[:40] for l in LANGS)),
    ]
    for k in longs:
        assert len(k) == KEY_MAX
    return short, longs


def jcs(v):
    """RFC 8785 canonical JSON of v (no floats here but exact ones)."""
    if isinstance(v, dict):
        items = sorted(v.items(), key=lambda kv: kv[0].encode("utf-16-be"))
        return "{" + ",".join(jcs(k) + ":" + jcs(x) for k, x in items) + "}"
    if isinstance(v, list):
        return "[" + ",".join(jcs(x) for x in v) + "]"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, int):
        return str(v)
    raise ValueError(v)


def payloads(ms, rc):
    """Claim payloads as a mail-to-ticket workflow sends them, with the
    canonical text and payload_hash any JCS library computes."""
    out = []
    by = {m["id"]: m for m in ms}
    for lang in LANGS:
        m = by[lang + "_reply"]
        p = {"ticket": {"id": 48213 + len(out), "channel": "email", "language": lang,
                        "subject": m["subject"], "body": m["body"],
                        "from": rc["max"][len(out)], "cc": rc["ten"],
                        "tags": ["billing", "vip", "escalated"]},
             "customer": {"name": LANGS[lang][3].split("<")[0].split(" ")[-2] if lang != "emoji"
                          else "Jordan Rivera", "tier": "gold", "orders": 17},
             "received_at": "2026-11-24T09:14:00.000Z", "attachments": [],
             "sla": {"first_reply_minutes": 240, "breached": False}}
        out.append(p)
    # Member names in several scripts, whose code-point and UTF-16 orders
    # agree (all in the BMP below U+D800, or all astral).
    out.append({"заказ": 1, "订单": 2, "طلب": 3, "הזמנה": 4, "order": 5, "Order": 6,
                "é": 7, "注文": 8, "ñ": 9, "z": None, "": "empty name"})
    res = []
    for p in out:
        c = jcs(p)
        res.append({"payload": p, "canonical": c,
                    "payload_hash": "sha256:" + hashlib.sha256(c.encode()).hexdigest()})
    return res


def jcs_order():
    """Members whose code-point order differs from their UTF-16 order: an
    astral character (a surrogate pair in UTF-16, 0xD83D...) against
    characters above U+E000 (U+FF61, U+FB01, U+E000)."""
    p = {"😀 smile": 1, "｡ halfwidth": 2, "ﬁ ligature": 3, "\ue000 private": 4, "a": 5}
    c = jcs(p)
    return {"payload": p, "canonical": c,
            "payload_hash": "sha256:" + hashlib.sha256(c.encode()).hexdigest()}


def outputs(ms):
    sr = []
    for m in ms:
        sr.append({"mail": m["id"],
                   "output": {"tone": "formal" if m["id"] not in ("emoji_max", "emoji_short",
                                                                  "emoji_reply") else "friendly",
                              "confidence": 0.62}})
    reasons = []
    for lang in LANGS:
        q = src("quote_%s.txt" % lang)
        r = fill("Customer wrote: " + q[:REASON_MAX - 40] + " — ", src("footer_%s.txt" % lang),
                 REASON_MAX)
        reasons.append({"language": lang, "output": {"tag": "churn_risk", "confidence": 0.41,
                                                     "reason": r}})
    return sr, reasons


def write(name, doc):
    path = os.path.join(HERE, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    ms = mails()
    rc = recipients()
    short, longs = keys()
    sr, crm = outputs(ms)
    write("mails.json", {"about": "support mails in several scripts; *_max at the "
                         "support_reply contract's maxima", "mails": ms})
    write("recipients.json", {"about": "recipient lists for email.send effects", **rc})
    write("groups.json", {"about": "identity-provider group headers and whether "
                          "group:support may decide", "cases": groups()})
    write("tenants.json", {
        "about": "two API clients (tenants) that use the same business keys",
        "tenants": [{"name": "acme-support", "api_client": "tenant a: Acme's n8n"},
                    {"name": "globex-helpdesk", "api_client": "tenant b: Globex's n8n"}],
        "shared_keys": short + longs, "long_keys": longs, "key_max_code_points": KEY_MAX})
    write("outputs.json", {
        "about": "model outputs at the contracts' limits and claim payloads with their "
                 "canonical (RFC 8785) text and payload_hash",
        "support_reply": sr, "crm_tag": crm, "payloads": payloads(ms, rc),
        "jcs_order": jcs_order()})


if __name__ == "__main__":
    main()

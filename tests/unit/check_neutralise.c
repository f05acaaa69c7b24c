/*
 * check_neutralise.c — quoted text made inert for notices (neutralise.h).
 *
 * A table of inputs as models and callers write them (phishing links in
 * several spellings, Slack mentions and links, Markdown links and images,
 * bidi overrides, zero-width characters, tags, controls, bad UTF-8) next
 * to ordinary text in Cyrillic, CJK, Arabic, Hebrew and Persian, emoji
 * sequences, prices, versions and IPv4 addresses, each with the exact
 * bytes a mail and a chat notice get; then properties over a hostile
 * corpus cut at every length.
 */
#define _GNU_SOURCE
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "neutralise.h"
#include "suitelib.h"
#include "testlib.h"
#include "utf8.h"

struct ncase {
	const char *name, *in;
	/* chat NULL: as mail, with its escapes' "<" and ">" as "&lt;", "&gt;" */
	const char *mail, *chat;
};

static const struct ncase cases[] = {
	{ "cyrillic as is", "Ваш заказ №4821 отправлен", "Ваш заказ №4821 отправлен", NULL },
	{ "cjk as is, ideographic stop kept", "承認してください。次の手順",
	  "承認してください。次の手順", NULL },
	{ "hebrew as is", "שלום עולם, ההזמנה נשלחה", "שלום עולם, ההזמנה נשלחה", NULL },
	{ "arabic as is", "مرحبا، تم شحن طلبك", "مرحبا، تم شحن طلبك", NULL },
	{ "persian zwnj kept", "می\u200cخواهم", "می\u200cخواهم", NULL },
	{ "emoji zwj sequence kept", "family 👨\u200d👩\u200d👧 ok",
	  "family 👨\u200d👩\u200d👧 ok", NULL },
	{ "zwj between latin shown", "pay\u200dpal", "pay<U+200D>pal", NULL },
	{ "zwsp shown", "Pay\u200bPal", "Pay<U+200B>Pal", NULL },
	{ "bom shown", "\ufeffRe: order", "<U+FEFF>Re: order", NULL },
	{ "rlo shown", "invoice\u202efdp.exe", "invoice<U+202E>fdp[.]exe",
	  "invoice&lt;U+202E&gt;fdp[.]exe" },
	{ "isolates shown", "a\u2066b\u2067c\u2068d\u2069e",
	  "a<U+2066>b<U+2067>c<U+2068>d<U+2069>e", NULL },
	{ "marks shown", "\u200e\u200f\u061c", "<U+200E><U+200F><U+061C>", NULL },
	{ "word joiner and soft hyphen shown", "ap\u2060pro\u00adve", "ap<U+2060>pro<U+00AD>ve",
	  NULL },
	{ "tag characters shown", "ok\U000e0041\U000e007f", "ok<U+E0041><U+E007F>", NULL },
	{ "https link defanged", "Click https://evil.example/approve/abc now",
	  "Click hxxps[:]//evil[.]example/approve/abc now", NULL },
	{ "upper-case scheme", "HTTP://Evil.Example/x", "hxxp[:]//Evil[.]Example/x", NULL },
	{ "other scheme", "ftp://files.example/a", "ftp[:]//files[.]example/a", NULL },
	{ "bare domain", "see www.evil.com today", "see www[.]evil[.]com today", NULL },
	{ "mail address", "write bob@evil.example", "write bob@evil[.]example", NULL },
	{ "idn domain", "пример.рф/вход", "пример[.]рф/вход", NULL },
	{ "fullwidth dot", "evil．com", "evil[.]com", NULL },
	{ "prices and versions kept", "total 12.50 EUR, v1.5 (1.2.3)",
	  "total 12.50 EUR, v1.5 (1.2.3)", NULL },
	{ "ipv4 defanged", "go to 203.0.113.5/approve", "go to 203[.]0[.]113[.]5/approve", NULL },
	{ "sentence ends kept", "Done. Thanks.", "Done. Thanks.", NULL },
	{ "controls one space", "  line1\r\n\r\nBcc: x@y\tend\x7f", "line1 Bcc: x@y end ", NULL },
	{ "line separators", "a\u2028b\u2029c\xc2\x85" "d", "a b c d", NULL },
	{ "bad utf-8", "a\xff" "b\xc3", "a\xef\xbf\xbd" "b\xef\xbf\xbd", NULL },
	{ "slack channel mention", "<!channel> approve now", "<!channel> approve now",
	  "&lt;!channel&gt; approve now" },
	{ "slack user mention", "ping <@U024BE7LH>", "ping <@U024BE7LH>", "ping &lt;@U024BE7LH&gt;" },
	{ "slack link", "<https://evil.example/a|Approve here>",
	  "<hxxps[:]//evil[.]example/a|Approve here>",
	  "&lt;hxxps[:]//evil[.]example/a|Approve here&gt;" },
	{ "markdown link", "[Approve](https://evil.example/a)",
	  "[Approve](hxxps[:]//evil[.]example/a)",
	  "\\[Approve\\]\\(hxxps[:]//evil[.]example/a)" },
	{ "markdown image", "![x](y)", "![x](y)", "!\\[x\\]\\(y)" },
	{ "backslashes", "a\\[b](c)", "a\\[b](c)", "a\\\\\\[b\\]\\(c)" },
	{ "ampersand", "Tom & Jerry <3", "Tom & Jerry <3", "Tom &amp; Jerry &lt;3" },
	{ "parenthesis alone kept", "(see below)", "(see below)", NULL },
	{ "markdown autolink", "<https://evil.example>", "<hxxps[:]//evil[.]example>",
	  "&lt;hxxps[:]//evil[.]example&gt;" },
};

static char *
run(const char *in, size_t max, enum neutralise_to to)
{
	struct buf b;

	buf_init(&b, 1 << 20);
	ck_assert_int_eq(neutralise_line(&b, in, max, to), 0);
	ck_assert_int_eq(buf_puts(&b, ""), 0);
	return buf_steal(&b);
}

START_TEST(test_table)
{
	const struct ncase *c = &cases[_i];
	char *mail = run(c->in, 1000, NEUTRALISE_MAIL), *chat = run(c->in, 1000, NEUTRALISE_CHAT);
	char want[1024];
	const char *p;
	size_t n = 0;

	ck_assert_msg(strcmp(mail, c->mail) == 0, "%s (mail): got \"%s\", want \"%s\"", c->name,
	              mail, c->mail);
	for (p = c->mail; c->chat == NULL && *p != '\0' && n + 5 < sizeof(want); p++)
		n += (size_t)snprintf(want + n, sizeof(want) - n, "%s",
		                      *p == '<' ? "&lt;" : *p == '>' ? "&gt;" : (char[2]){ *p, 0 });
	want[n] = '\0';
	ck_assert_msg(strcmp(chat, c->chat ? c->chat : want) == 0,
	              "%s (chat): got \"%s\", want \"%s\"", c->name, chat,
	              c->chat ? c->chat : want);
	free(mail);
	free(chat);
}
END_TEST

START_TEST(test_cut)
{
	char *s;

	s = run("abcdefg", 5, NEUTRALISE_MAIL);
	ck_assert_str_eq(s, "abcde\u2026");
	free(s);
	s = run("abcde", 5, NEUTRALISE_MAIL);
	ck_assert_str_eq(s, "abcde");
	free(s);
	/* an escape counts as one character */
	s = run("\u202e\u202e\u202eabc", 4, NEUTRALISE_MAIL);
	ck_assert_str_eq(s, "<U+202E><U+202E><U+202E>a\u2026");
	free(s);
	s = run("Заказ №4821 отправлен", 5, NEUTRALISE_MAIL);
	ck_assert_str_eq(s, "Заказ\u2026");
	free(s);
	s = run(NULL, 5, NEUTRALISE_CHAT);
	ck_assert_str_eq(s, "");
	free(s);
}
END_TEST

START_TEST(test_cap)
{
	struct buf b;

	buf_init(&b, 16);
	ck_assert_int_eq(neutralise_line(&b, "https://evil.example/approve/abc", 100,
	                                 NEUTRALISE_CHAT), -1);
	ck_assert(b.overflow);
	buf_free(&b);
}
END_TEST

/* What no neutralised text may hold, whatever went in. */
static void
assert_inert(const char *in, const char *out, enum neutralise_to to)
{
	const unsigned char *p = (const unsigned char *)out;
	size_t n = strlen(out), i = 0, len;
	long cp, prev = -1;

	ck_assert_msg(utf8_valid(out, n), "not UTF-8: %s", out);
	ck_assert_msg(strstr(out, "://") == NULL, "a scheme: %s <- %s", out, in);
	ck_assert_msg(strcasestr(out, "http:") == NULL && strcasestr(out, "https:") == NULL,
	              "a scheme: %s", out);
	while (i < n) {
		len = utf8_decode(p + i, n - i, &cp);
		ck_assert_msg(cp >= 0x20 && cp != 0x7f && !(cp >= 0x80 && cp < 0xa0),
		              "a control in %s", out);
		ck_assert_msg(!(cp >= 0x202a && cp <= 0x202e) && !(cp >= 0x2066 && cp <= 0x2069) &&
		              cp != 0x200b && cp != 0xfeff && cp != 0x2060 && cp != 0x200e &&
		              cp != 0x200f,
		              "a bidi or invisible character U+%04lX in %s", cp, out);
		if (cp == 0x200c || cp == 0x200d)
			ck_assert_msg(prev >= 0x300, "a joiner after U+%04lX in %s", prev, out);
		/* a dot between two letters is a host name */
		if (cp == '.' && i > 0 && i + 1 < n)
			ck_assert_msg(!((p[i - 1] >= 'a' && p[i - 1] <= 'z') &&
			                (p[i + 1] >= 'a' && p[i + 1] <= 'z')),
			              "a bare dot in %s", out);
		if (to == NEUTRALISE_CHAT) {
			ck_assert_msg(cp != '<' && cp != '>', "a Slack bracket in %s", out);
			if (cp == '(' && i > 0 && p[i - 1] == ']')
				ck_assert_msg(false, "a Markdown link in %s", out);
		}
		prev = cp;
		i += len;
	}
}

static const char *const hostile[] = {
	"Срочно: подтвердите https://oncegate.example.com.evil.example/approve/"
	"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA \u202eexe.pdf",
	"<!channel> <!here> <@U024BE7LH> <https://evil.example|Approve> [Approve](http://evil)"
	" ![i](javascript:alert(1))",
	"請按此批准：https://evil.example/批准 \u200b\u200c\u200d\ufeff 谢谢",
	"الموافقة هنا: https://evil.example/a \u2067שלום\u2069 \u061c",
	"👨\u200d👩\u200d👧\u200d👦 🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"
	" www.evil.com 203.0.113.5 bob@evil.example",
	"\\\\[x\\](y) \\<!channel\\> &lt;!channel&gt; hxxps://already\r\nBcc: a@b\x01\x7f\xc2\x85",
	"h\u200dttps://evil.example ht\u00adtps:/\u200b/evil．com evil｡com",
};

START_TEST(test_hostile_every_cut)
{
	size_t h, max, len;

	for (h = 0; h < sizeof(hostile) / sizeof(hostile[0]); h++) {
		len = tl_utf8_chars(hostile[h]);
		for (max = 0; max <= len + 1; max++) {
			char *m = run(hostile[h], max, NEUTRALISE_MAIL);
			char *c = run(hostile[h], max, NEUTRALISE_CHAT);

			assert_inert(hostile[h], m, NEUTRALISE_MAIL);
			assert_inert(hostile[h], c, NEUTRALISE_CHAT);
			free(m);
			free(c);
		}
	}
}
END_TEST

TL_SUITE(neutralise_suite, "neutralise",
         {"neutralise_line", 60,
          .loops = TL_LOOPS({test_table, (int)(sizeof(cases) / sizeof(cases[0]))}),
          .tests = TL_LIST(test_cut, test_cap, test_hostile_every_cut)})

TL_SUITE_MAIN(neutralise_suite, false)

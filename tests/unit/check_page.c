/*
 * check_page.c — the approval pages: the real templates filled with hostile
 * text, rendered, and read back by libxml2's XML parser (no recovery) and
 * by its HTML parser, since browsers read the page as text/html.
 *
 * What a user cares about: the page is well-formed, nothing a run or a
 * model wrote becomes markup (no <script>, no <b>, no event handler), the
 * text shows exactly as written (invalid UTF-8 and controls as U+FFFD), no
 * template machinery leaks, and a broken template stops start-up with a
 * message naming the file.
 */
#define _GNU_SOURCE /* strcasestr */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libxml/HTMLparser.h>
#include <libxml/parser.h>
#include <libxml/tree.h>

#include "buf.h"
#include "page.h"
#include "testlib.h"

#define TEST_PATH_MAX 4096
#define RENDER_CAP (1024 * 1024)
#define THREADS    8
#define ROUNDS     1000
#define FFFD       "\xef\xbf\xbd"

static char tdir[TEST_PATH_MAX / 4]; /* leaves room for file names */
static struct page_set *set;

/* ---- helpers ----------------------------------------------------------- */

static bool
file_exists(const char *dir, const char *name)
{
	char path[TEST_PATH_MAX];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return stat(path, &st) == 0;
}

/* $srcdir/templates under make check (also distcheck's VPATH build), else
 * relative to where the suite is run from. */
static void
find_template_dir(void)
{
	const char *srcdir = getenv("srcdir");

	if (srcdir != NULL) {
		snprintf(tdir, sizeof(tdir), "%s/templates", srcdir);
		if (file_exists(tdir, "approval.xhtml"))
			return;
	}
	snprintf(tdir, sizeof(tdir), "templates");
	if (file_exists(tdir, "approval.xhtml"))
		return;
	snprintf(tdir, sizeof(tdir), "../templates");
}

static void
setup(void)
{
	char err[512];

	find_template_dir();
	set = page_set_load(tdir, err, sizeof(err));
	ck_assert_msg(set != NULL, "loading %s: %s", tdir, err);
}

static void
teardown(void)
{
	page_set_free(set);
	set = NULL;
}

static char *
slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	struct buf b;
	char chunk[4096];
	size_t n;

	ck_assert_msg(f != NULL, "open %s: %s", path, strerror(errno));
	buf_init(&b, 4 * 1024 * 1024);
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		ck_assert_int_eq(buf_append(&b, chunk, n), 0);
	fclose(f);
	return buf_steal(&b);
}

static char *
render(struct page *p)
{
	struct buf b;

	buf_init(&b, RENDER_CAP);
	ck_assert_msg(page_render(p, &b) == 0, "render failed: %s",
	              page_error(p) ? page_error(p) : "(cap)");
	return buf_steal(&b);
}

static xmlDocPtr
reparse_xml(const char *out)
{
	xmlDocPtr d = xmlReadMemory(out, (int)strlen(out), "rendered.xhtml", NULL,
	                            XML_PARSE_NONET);

	ck_assert_msg(d != NULL, "rendered page is not well-formed XML:\n%s", out);
	return d;
}

static xmlDocPtr
reparse_html(const char *out)
{
	htmlDocPtr d = htmlReadMemory(out, (int)strlen(out), "rendered.html",
	                              "UTF-8", HTML_PARSE_NONET |
	                              HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING);

	ck_assert_ptr_nonnull(d);
	return d;
}

typedef void (*visit_fn)(xmlNodePtr n, void *arg);

static void
visit(xmlNodePtr n, visit_fn fn, void *arg)
{
	for (; n != NULL; n = n->next) {
		fn(n, arg);
		if (n->type == XML_ELEMENT_NODE)
			visit(n->children, fn, arg);
	}
}

struct count_arg {
	const char *s;
	size_t n;
};

static void
count_element(xmlNodePtr n, void *arg)
{
	struct count_arg *c = arg;

	if (n->type == XML_ELEMENT_NODE &&
	    strcasecmp((const char *)n->name, c->s) == 0)
		c->n++;
}

static size_t
elements(xmlDocPtr d, const char *name)
{
	struct count_arg c = { name, 0 };

	visit(d->children, count_element, &c);
	return c.n;
}

static void
count_text(xmlNodePtr n, void *arg)
{
	struct count_arg *c = arg;

	if ((n->type == XML_TEXT_NODE || n->type == XML_CDATA_SECTION_NODE) &&
	    n->content != NULL && strcmp((const char *)n->content, c->s) == 0)
		c->n++;
}

/* Text nodes whose whole content is s. */
static size_t
texts_equal(xmlDocPtr d, const char *s)
{
	struct count_arg c = { s, 0 };

	visit(d->children, count_text, &c);
	return c.n;
}

/* Attributes named s (or starting with s when it ends in '*'). */
static void
count_attr(xmlNodePtr n, void *arg)
{
	struct count_arg *c = arg;
	size_t len = strlen(c->s);
	xmlAttrPtr a;

	if (n->type != XML_ELEMENT_NODE)
		return;
	for (a = n->properties; a != NULL; a = a->next) {
		const char *name = (const char *)a->name;

		if (c->s[len - 1] == '*' ? strncasecmp(name, c->s, len - 1) == 0
		                         : strcasecmp(name, c->s) == 0)
			c->n++;
	}
}

static size_t
attrs_named(xmlDocPtr d, const char *name)
{
	struct count_arg c = { name, 0 };

	visit(d->children, count_attr, &c);
	return c.n;
}

/* Values of attribute attr on elements named el, in document order. */
struct collect_arg {
	const char *el, *attr;
	char *v[64];
	size_t n;
};

static void
collect(xmlNodePtr n, void *arg)
{
	struct collect_arg *c = arg;

	if (n->type != XML_ELEMENT_NODE || c->n == 64 ||
	    strcmp((const char *)n->name, c->el) != 0)
		return;
	if (c->attr == NULL)
		c->v[c->n++] = (char *)xmlNodeGetContent(n);
	else if (xmlHasProp(n, (const xmlChar *)c->attr))
		c->v[c->n++] = (char *)xmlGetProp(n, (const xmlChar *)c->attr);
}

static void
collect_free(struct collect_arg *c)
{
	size_t i;

	for (i = 0; i < c->n; i++)
		xmlFree(c->v[i]);
}

/* The first element named el with attribute attr="value". */
struct find_arg {
	const char *el, *attr, *value;
	xmlNodePtr found;
};

static void
find_el(xmlNodePtr n, void *arg)
{
	struct find_arg *f = arg;
	xmlChar *v;

	if (f->found != NULL || n->type != XML_ELEMENT_NODE ||
	    strcmp((const char *)n->name, f->el) != 0)
		return;
	if (f->attr == NULL) {
		f->found = n;
		return;
	}
	v = xmlGetProp(n, (const xmlChar *)f->attr);
	if (v != NULL && strcmp((const char *)v, f->value) == 0)
		f->found = n;
	xmlFree(v);
}

static xmlNodePtr
find(xmlDocPtr d, const char *el, const char *attr, const char *value)
{
	struct find_arg f = { el, attr, value, NULL };

	visit(d->children, find_el, &f);
	return f.found;
}

struct slot_arg {
	const char *slot;
	size_t n;
};

static void
count_slot(xmlNodePtr n, void *arg)
{
	struct slot_arg *c = arg;
	size_t len = strlen(c->slot);
	xmlChar *attr;
	const char *v, *t;

	if (n->type != XML_ELEMENT_NODE ||
	    (attr = xmlGetProp(n, (const xmlChar *)"data-slot")) == NULL)
		return;
	for (v = (const char *)attr; *v != '\0';) {
		while (*v == ' ')
			v++;
		t = v;
		while (*v != '\0' && *v != ' ')
			v++;
		if ((size_t)(v - t) == len && memcmp(t, c->slot, len) == 0)
			c->n++;
	}
	xmlFree(attr);
}

/* How many elements of a template carry slot: the expected number of
 * filled places, read from the template file itself. */
static size_t
template_slot_count(const char *name, const char *slot)
{
	struct slot_arg c = { slot, 0 };
	char path[TEST_PATH_MAX];
	xmlDocPtr d;

	snprintf(path, sizeof(path), "%s/%s.xhtml", tdir, name);
	d = xmlReadFile(path, NULL, XML_PARSE_NONET);
	ck_assert_ptr_nonnull(d);
	visit(d->children, count_slot, &c);
	xmlFreeDoc(d);
	return c.n;
}

/* ---- hostile text ------------------------------------------------------ */

struct hostile {
	const char *in;
	const char *want; /* NULL: the same as in */
};

static const struct hostile hostile[] = {
	{ "<script>alert(1)</script>", NULL },
	{ "\"quotes' & <b>bold</b>", NULL },
	{ "]]>", NULL },
	{ "&amp; &lt;script&gt; &#60;script&#62; &#x3C;", NULL },
	{ "</textarea></pre></title><!-- x --><![CDATA[y]]>", NULL },
	{ "<?xml version='1.0'?><!DOCTYPE x [<!ENTITY e SYSTEM 'file:///etc/passwd'>]>&e;",
	  NULL },
	{ "<img src=x onerror=alert(1)><a href=\"javascript:alert(1)\">x</a>", NULL },
	{ "invalid \xff\xfe bytes", "invalid " FFFD FFFD " bytes" },
	{ "truncated \xe2\x82 and \xf0\x9f\x98", "truncated " FFFD " and " FFFD },
	{ "overlong \xc0\xaf \xe0\x80\xaf \xc1\xbf",
	  "overlong " FFFD FFFD " " FFFD FFFD FFFD " " FFFD FFFD },
	{ "surrogate \xed\xa0\x80 too big \xf4\x90\x80\x80 \xf8\x88\x80\x80\x80",
	  "surrogate " FFFD FFFD FFFD " too big " FFFD FFFD FFFD FFFD " "
	  FFFD FFFD FFFD FFFD FFFD },
	{ "lone continuation \x80\xbf end", "lone continuation " FFFD FFFD " end" },
	{ "controls \x01\x02\x08\x0b\x0c\x1b[31m\x1f\x7f \xc2\x80\xc2\x85\xc2\x9f",
	  "controls " FFFD FFFD FFFD FFFD FFFD FFFD "[31m" FFFD FFFD " "
	  FFFD FFFD FFFD },
	{ "not characters \xef\xbf\xbe \xef\xbf\xbf",
	  "not characters " FFFD " " FFFD },
	{ "bidi \xe2\x80\xae" "gnp.exe \xe2\x81\xa6x\xe2\x81\xa9",
	  "bidi " FFFD "gnp.exe " FFFD "x" FFFD },
	{ "lines\r\nand\rcr\tand tab\nend", "lines\nand\ncr\tand tab\nend" },
	{ "fine: caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe2\x80\x8f", NULL },
	{ "", NULL },
};

#define NHOSTILE (sizeof(hostile) / sizeof(hostile[0]))

static const char *const approval_text_slots[] = {
	"title", "key", "source_link", "contract", "model", "output",
	"approver", "approver_groups", "expires_at", "effect_type",
	"effect_target", "effect_payload", "requested_by", NULL,
};
static const char *const decided_text_slots[] = {
	"title", "key", "decision", "decided_by", "decided_at", "reason",
	"effect_type", "effect_target", NULL,
};
static const char *const notice_text_slots[] = {
	"title", "heading", "message", "detail", NULL,
};

#define ITEMS 2

/* Fills every slot of the approval card with h; -1 at the first failure
 * (page_error says which). No Check asserts: the threads call it too. */
static int
fill_approval(struct page *p, const char *h)
{
	struct page_scope *s;
	char url[4096];
	size_t i;

	for (i = 0; approval_text_slots[i] != NULL; i++)
		if (page_text(p, approval_text_slots[i], h) != 0)
			return -1;
	snprintf(url, sizeof(url), "https://crm.example.com/r?q=%s", h);
	if (page_attr(p, "source_link", "href", url) != 0 ||
	    page_attr(p, "form", "action", "/approve/tok") != 0 ||
	    page_attr(p, "csrf", "value", h) != 0)
		return -1;
	for (i = 0; i < ITEMS; i++) {
		if ((s = page_repeat(p, "output_fields")) == NULL ||
		    page_scope_text(s, "field_name", h) != 0 ||
		    page_scope_text(s, "field_value", h) != 0 ||
		    (s = page_repeat(p, "error_item")) == NULL ||
		    page_scope_text(s, "error_path", h) != 0 ||
		    page_scope_text(s, "error_message", h) != 0 ||
		    (s = page_repeat(p, "decision_button")) == NULL ||
		    page_scope_attr(s, "decision_value", "value", h) != 0 ||
		    page_scope_text(s, "decision_label", h) != 0)
			return -1;
	}
	page_repeat_done(p, "output_fields");
	page_repeat_done(p, "error_item");
	page_repeat_done(p, "decision_button");
	return page_error(p) == NULL ? 0 : -1;
}

static size_t
approval_expected(void)
{
	size_t i, n = 0;

	for (i = 0; approval_text_slots[i] != NULL; i++)
		n += template_slot_count("approval", approval_text_slots[i]);
	n += ITEMS * (template_slot_count("approval", "field_name") +
	              template_slot_count("approval", "field_value") +
	              template_slot_count("approval", "error_path") +
	              template_slot_count("approval", "error_message") +
	              template_slot_count("approval", "decision_label"));
	return n;
}

/* What every rendered page must be, whatever it was filled with. */
static void
assert_clean(const char *out, xmlDocPtr x, xmlDocPtr h)
{
	ck_assert_msg(strncmp(out, "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/"
	                      "1999/xhtml\" lang=\"en\">", 62) == 0,
	              "page starts with: %.80s", out);
	ck_assert_ptr_null(strcasestr(out, "<script"));
	ck_assert_ptr_null(strcasestr(out, "<b>"));
	ck_assert_ptr_null(strcasestr(out, "<img"));
	ck_assert_ptr_null(strstr(out, "]]>"));
	ck_assert_ptr_null(strstr(out, "<!--"));
	ck_assert_ptr_null(strstr(out, "data-slot"));
	ck_assert_ptr_null(strstr(out, "data-repeat"));
	ck_assert_ptr_null(strcasestr(out, "<style"));
	ck_assert_ptr_null(strcasestr(out, "style="));
	ck_assert_ptr_null(strstr(out, "<textarea/>"));
	ck_assert_ptr_nonnull(strstr(out, "<meta charset=\"utf-8\" />"));
	ck_assert_ptr_nonnull(strstr(out, "<link rel=\"stylesheet\" "
	                                  "href=\"/approve-assets/approval.css\" />"));
	/* one charset declaration only */
	ck_assert_ptr_null(strcasestr(out, "http-equiv"));
	for (int i = 0; i < 2; i++) {
		xmlDocPtr d = i == 0 ? x : h;

		ck_assert_uint_eq(elements(d, "script"), 0);
		ck_assert_uint_eq(elements(d, "b"), 0);
		ck_assert_uint_eq(elements(d, "img"), 0);
		ck_assert_uint_eq(elements(d, "style"), 0);
		ck_assert_uint_eq(attrs_named(d, "data-*"), 0);
		ck_assert_uint_eq(attrs_named(d, "on*"), 0);
		ck_assert_uint_eq(attrs_named(d, "style"), 0);
	}
}

START_TEST(test_hostile_approval)
{
	const struct hostile *c = &hostile[_i];
	const char *want = c->want ? c->want : c->in;
	struct page *p = page_new(set, "approval");
	struct collect_arg v = { "button", "value", { 0 }, 0 };
	char url[4096];
	xmlDocPtr x, h;
	xmlNodePtr n;
	xmlChar *val;
	char *out;
	size_t expected = approval_expected();

	ck_assert_ptr_nonnull(p);
	ck_assert_msg(fill_approval(p, c->in) == 0, "fill: %s", page_error(p));
	out = render(p);
	x = reparse_xml(out);
	h = reparse_html(out);
	assert_clean(out, x, h);

	/* every filled place shows exactly the (cleaned) text, to both parsers */
	if (want[0] != '\0') {
		ck_assert_msg(texts_equal(x, want) == expected,
		              "XML: %zu places show the text, want %zu\n%s",
		              texts_equal(x, want), expected, out);
		ck_assert_msg(texts_equal(h, want) == expected,
		              "HTML: %zu places show the text, want %zu",
		              texts_equal(h, want), expected);
	}

	/* attribute values come back exactly, tabs and newlines included */
	n = find(x, "input", "name", "csrf");
	ck_assert_ptr_nonnull(n);
	val = xmlGetProp(n, (const xmlChar *)"value");
	ck_assert_str_eq((const char *)val, want);
	xmlFree(val);
	snprintf(url, sizeof(url), "https://crm.example.com/r?q=%s", want);
	n = find(x, "a", "target", "_blank");
	ck_assert_ptr_nonnull(n);
	val = xmlGetProp(n, (const xmlChar *)"href");
	ck_assert_str_eq((const char *)val, url);
	xmlFree(val);
	visit(x->children, collect, &v);
	ck_assert_uint_eq(v.n, ITEMS);
	ck_assert_str_eq(v.v[0], want);
	ck_assert_str_eq(v.v[1], want);
	collect_free(&v);

	/* the form survived the HTML parser whole: no textarea (the reason,
	 * the feedback) swallowed the buttons */
	ck_assert_uint_eq(elements(h, "button"), ITEMS);
	ck_assert_uint_eq(elements(h, "textarea"), 2);
	n = find(h, "textarea", "name", "reason");
	ck_assert_ptr_nonnull(n);
	ck_assert_ptr_null(n->children);
	n = find(h, "textarea", "name", "feedback");
	ck_assert_ptr_nonnull(n);
	ck_assert_ptr_null(n->children);

	xmlFreeDoc(x);
	xmlFreeDoc(h);
	free(out);
	page_free(p);
}
END_TEST

static void
hostile_simple(const char *name, const char *const *slots)
{
	const struct hostile *c;
	struct page *p;
	xmlDocPtr x, h;
	char *out;
	size_t i, k, expected;

	for (k = 0; k < NHOSTILE; k++) {
		c = &hostile[k];
		ck_assert_ptr_nonnull(p = page_new(set, name));
		expected = 0;
		for (i = 0; slots[i] != NULL; i++) {
			ck_assert_int_eq(page_text(p, slots[i], c->in), 0);
			expected += template_slot_count(name, slots[i]);
		}
		out = render(p);
		x = reparse_xml(out);
		h = reparse_html(out);
		assert_clean(out, x, h);
		if (c->in[0] != '\0') {
			ck_assert_uint_eq(texts_equal(x, c->want ? c->want : c->in),
			                  expected);
			ck_assert_uint_eq(texts_equal(h, c->want ? c->want : c->in),
			                  expected);
		}
		xmlFreeDoc(x);
		xmlFreeDoc(h);
		free(out);
		page_free(p);
	}
}

START_TEST(test_hostile_decided)
{
	hostile_simple("decided", decided_text_slots);
}
END_TEST

START_TEST(test_hostile_notice)
{
	hostile_simple("notice", notice_text_slots);
}
END_TEST

/* ---- URLs and attribute names ----------------------------------------- */

static const char *const bad_urls[] = {
	"javascript:alert(1)", "JavaScript:alert(1)", "JAVASCRIPT:alert(1)",
	" javascript:alert(1)", "\x01javascript:alert(1)", "java\tscript:alert(1)",
	"java\nscript:alert(1)", "java\r\nscript:alert(1)", "\t\njavascript:x",
	"data:text/html,<script>alert(1)</script>", "data:,x", "vbscript:msgbox",
	"file:///etc/passwd", "blob:https://x/1", "x:y", "verylongscheme:x",
	"javascript:", "jav\xe2\x80\xae" "ascript:x", "ht\ttps://x/", "\thttps://x/",
};

START_TEST(test_url_refused)
{
	const char *u = bad_urls[_i];
	struct page *p = page_new(set, "approval");
	xmlDocPtr x;
	xmlNodePtr a;
	char *out;

	ck_assert_ptr_nonnull(p);
	ck_assert_msg(page_attr(p, "source_link", "href", u) == -1,
	              "href=\"%s\" accepted", u);
	ck_assert_int_eq(page_attr(p, "form", "action", u), -1);
	/* not sticky: the caller can still show the URL as text */
	ck_assert_ptr_null(page_error(p));
	ck_assert_int_eq(page_text(p, "source_link", u), 0);
	out = render(p);
	x = reparse_xml(out);
	a = find(x, "a", "target", "_blank");
	ck_assert_ptr_nonnull(a);
	ck_assert(!xmlHasProp(a, (const xmlChar *)"href"));
	ck_assert(!xmlHasProp(find(x, "form", NULL, NULL),
	                      (const xmlChar *)"action"));
	ck_assert_ptr_null(strcasestr(out, "href=\"javascript"));
	xmlFreeDoc(x);
	free(out);
	page_free(p);
}
END_TEST

static const char *const good_urls[] = {
	"https://crm.example.com/tickets/42?a=1&b=2#c", "http://localhost:8080/x",
	"HTTPS://EXAMPLE.COM/", "mailto:ops@example.com", "/approve/abc",
	"relative/path:with-colon", "?q=javascript:x", "#top", "",
	"javascript&#58;alert(1)", "//example.com/x", "  https://example.com/",
	"/a?b=javascript:x", "/a#javascript:x", "https://e.com/?q=\t\n<\"'&>",
};

START_TEST(test_url_allowed)
{
	const char *u = good_urls[_i];
	struct page *p = page_new(set, "approval");
	xmlDocPtr x;
	xmlChar *v;
	char *out;

	ck_assert_ptr_nonnull(p);
	ck_assert_msg(page_attr(p, "source_link", "href", u) == 0,
	              "href=\"%s\" refused", u);
	out = render(p);
	x = reparse_xml(out);
	v = xmlGetProp(find(x, "a", "target", "_blank"), (const xmlChar *)"href");
	ck_assert_str_eq((const char *)v, u);
	xmlFree(v);
	xmlFreeDoc(x);
	free(out);
	page_free(p);
}
END_TEST

static const char *const bad_attrs[] = {
	"onclick", "onmouseover", "onerror", "ONCLICK", "onClick", "style",
	"srcdoc", "srcset", "data-slot", "data-repeat", "xmlns", "xmlns:x",
	"xlink:href", "a b", "a=b", "", "1x", "-x", "x\"", "title\n",
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
};

START_TEST(test_attr_refused)
{
	struct page *p = page_new(set, "approval");
	struct buf b;

	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(page_attr(p, "key", bad_attrs[_i], "alert(1)"), -1);
	/* sticky: a caller that ignores the result still sends nothing */
	ck_assert_ptr_nonnull(page_error(p));
	buf_init(&b, RENDER_CAP);
	ck_assert_int_eq(page_render(p, &b), -1);
	ck_assert_uint_eq(b.len, 0);
	buf_free(&b);
	page_free(p);
}
END_TEST

START_TEST(test_attr_null_name)
{
	struct page *p = page_new(set, "approval");

	ck_assert_int_eq(page_attr(p, "key", NULL, "x"), -1);
	ck_assert_ptr_nonnull(page_error(p));
	page_free(p);
}
END_TEST

/* ---- structure --------------------------------------------------------- */

START_TEST(test_repeat_order)
{
	struct page *p = page_new(set, "approval");
	struct collect_arg th = { "th", NULL, { 0 }, 0 };
	struct collect_arg btn = { "button", "value", { 0 }, 0 };
	struct collect_arg lbl = { "button", NULL, { 0 }, 0 };
	struct collect_arg li = { "code", NULL, { 0 }, 0 };
	struct page_scope *s;
	static const char *const decisions[][2] = {
		{ "approve", "Approve" }, { "reject", "Reject" }, { "escalate", "Escalate" },
	};
	char name[16];
	xmlDocPtr x;
	char *out;
	size_t i, k;

	ck_assert_ptr_nonnull(p);
	for (i = 0; i < 10; i++) {
		snprintf(name, sizeof(name), "f%zu", i);
		s = page_repeat(p, "output_fields");
		ck_assert_int_eq(page_scope_text(s, "field_name", name), 0);
		ck_assert_int_eq(page_scope_text(s, "field_value", "v"), 0);
	}
	for (i = 0; i < 3; i++) {
		s = page_repeat(p, "decision_button");
		/* the scope root carries decision_value itself */
		ck_assert_int_eq(page_scope_attr(s, "decision_value", "value",
		                                 decisions[i][0]), 0);
		ck_assert_int_eq(page_scope_text(s, "decision_label",
		                                 decisions[i][1]), 0);
	}
	for (i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "/e%zu", i);
		s = page_repeat(p, "error_item");
		ck_assert_int_eq(page_scope_text(s, "error_path", name), 0);
		ck_assert_int_eq(page_scope_text(s, "error_message", "bad"), 0);
	}
	/* no page_repeat_done: unfilled prototypes are never shown anyway */
	out = render(p);
	x = reparse_xml(out);

	visit(x->children, collect, &th);
	ck_assert_uint_eq(th.n, 12); /* Field, Value, f0..f9 */
	for (i = 0; i < 10; i++) {
		snprintf(name, sizeof(name), "f%zu", i);
		ck_assert_str_eq(th.v[i + 2], name);
	}
	visit(x->children, collect, &btn);
	visit(x->children, collect, &lbl);
	ck_assert_uint_eq(btn.n, 3);
	for (i = 0; i < 3; i++) {
		ck_assert_str_eq(btn.v[i], decisions[i][0]);
		ck_assert_str_eq(lbl.v[i], decisions[i][1]);
	}
	visit(x->children, collect, &li);
	for (i = 0, k = 0; i < li.n; i++) {
		if (strncmp(li.v[i], "/e", 2) != 0)
			continue;
		snprintf(name, sizeof(name), "/e%zu", k++);
		ck_assert_str_eq(li.v[i], name);
	}
	ck_assert_uint_eq(k, 3);
	ck_assert_uint_eq(elements(x, "li"), 3 + 4); /* 3 errors, 4 re-run items */
	ck_assert_uint_eq(texts_equal(x, "field"), 0);    /* prototype text */
	ck_assert_uint_eq(texts_equal(x, "Decide"), 0);
	ck_assert_uint_eq(texts_equal(x, "problem"), 0);
	collect_free(&th);
	collect_free(&btn);
	collect_free(&lbl);
	collect_free(&li);
	xmlFreeDoc(x);
	free(out);
	page_free(p);
}
END_TEST

/* Fills of a prototype made before page_repeat carry into the copies (a
 * copy is of the prototype as it is then); a removed item takes its
 * scope's later fills with it; a part replaced by text hides the slots
 * that were inside it, and filling those is no failure. */
START_TEST(test_repeat_copies_state)
{
	struct page *p = page_new(set, "approval");
	struct collect_arg th = { "th", NULL, { 0 }, 0 };
	struct page_scope *s, *gone;
	xmlDocPtr x;
	char *out;

	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(page_text(p, "field_name", "pre"), 0);
	ck_assert_int_eq(page_attr(p, "output_fields", "title", "t<1>"), 0);
	s = page_repeat(p, "output_fields");
	ck_assert_int_eq(page_scope_attr(s, "output_fields", "title", "own"), 0);
	gone = page_repeat(p, "output_fields");
	ck_assert_ptr_nonnull(gone);
	s = page_repeat(p, "output_fields");
	ck_assert_int_eq(page_scope_text(s, "field_name", "last"), 0);
	page_remove(p, "output_fields"); /* every row, copies included */
	ck_assert_int_eq(page_scope_text(gone, "field_name", "hidden"), 0);
	ck_assert_int_eq(page_text(p, "form", "<form replaced>"), 0);
	ck_assert_int_eq(page_attr(p, "csrf", "value", "secret-token"), 0);
	ck_assert_ptr_null(page_error(p));
	out = render(p);
	x = reparse_xml(out);
	ck_assert_uint_eq(elements(x, "tr"), 1); /* the header row */
	ck_assert_ptr_null(strstr(out, "hidden"));
	ck_assert_ptr_null(strstr(out, "secret-token"));
	ck_assert_ptr_nonnull(strstr(out, "&lt;form replaced&gt;</form>"));
	xmlFreeDoc(x);
	free(out);
	page_free(p);

	/* the same without the removal: three rows as filled */
	p = page_new(set, "approval");
	ck_assert_int_eq(page_text(p, "field_name", "pre"), 0);
	ck_assert_int_eq(page_attr(p, "output_fields", "title", "t<1>"), 0);
	s = page_repeat(p, "output_fields");
	ck_assert_int_eq(page_scope_attr(s, "output_fields", "title", "own"), 0);
	(void)page_repeat(p, "output_fields");
	s = page_repeat(p, "output_fields");
	ck_assert_int_eq(page_scope_text(s, "field_name", "last"), 0);
	page_repeat_done(p, "output_fields");
	out = render(p);
	x = reparse_xml(out);
	visit(x->children, collect, &th);
	ck_assert_uint_eq(th.n, 5); /* Field, Value, pre, pre, last */
	ck_assert_str_eq(th.v[2], "pre");
	ck_assert_str_eq(th.v[3], "pre");
	ck_assert_str_eq(th.v[4], "last");
	ck_assert_ptr_nonnull(strstr(out, "<tr title=\"own\">"));
	ck_assert_ptr_nonnull(strstr(out, "<tr title=\"t&lt;1&gt;\">"));
	collect_free(&th);
	xmlFreeDoc(x);
	free(out);
	page_free(p);
}
END_TEST

START_TEST(test_repeat_none_and_done)
{
	struct page *p = page_new(set, "approval");
	xmlDocPtr x;
	char *out;

	ck_assert_ptr_nonnull(p);
	page_repeat_done(p, "output_fields"); /* zero items */
	page_repeat_done(p, "decision_button");
	ck_assert_ptr_null(page_error(p));
	out = render(p);
	x = reparse_xml(out);
	ck_assert_uint_eq(elements(x, "button"), 0);
	ck_assert_uint_eq(elements(x, "tbody"), 1);
	ck_assert_uint_eq(elements(x, "tr"), 1); /* the header row */
	xmlFreeDoc(x);
	free(out);
	/* repeating after done is a caller bug */
	ck_assert_ptr_null(page_repeat(p, "output_fields"));
	ck_assert_ptr_nonnull(page_error(p));
	page_free(p);
}
END_TEST

START_TEST(test_remove)
{
	struct page *p = page_new(set, "approval");
	struct page *n = page_new(set, "notice");
	xmlDocPtr x;
	char *out;

	ck_assert_ptr_nonnull(p);
	ck_assert_ptr_nonnull(n);
	/* scopes made before a removal stay usable (they point into the
	 * removed part, which is not shown) */
	struct page_scope *s = page_repeat(p, "error_item");
	page_remove(p, "errors");
	page_remove(p, "form");
	page_remove(p, "edit"); /* the correction, set apart from the form */
	page_remove(p, "form"); /* twice is fine */
	ck_assert_int_eq(page_scope_text(s, "error_path", "/x"), 0);
	/* filling inside a removed part does nothing and is no failure */
	ck_assert_int_eq(page_attr(p, "csrf", "value", "tok"), 0);
	ck_assert_ptr_nonnull(page_repeat(p, "decision_button"));
	ck_assert_ptr_null(page_error(p));
	out = render(p);
	x = reparse_xml(out);
	ck_assert_uint_eq(elements(x, "form"), 0);
	ck_assert_uint_eq(elements(x, "textarea"), 0);
	ck_assert_uint_eq(elements(x, "button"), 0);
	ck_assert_uint_eq(elements(x, "input"), 0);
	ck_assert_ptr_null(find(x, "section", "class", "errors"));
	ck_assert_ptr_null(strstr(out, "failed validation"));
	ck_assert_ptr_null(strstr(out, "tok"));
	ck_assert_ptr_nonnull(find(x, "section", "class", "rerun"));
	xmlFreeDoc(x);
	free(out);

	page_remove(n, "detail");
	ck_assert_int_eq(page_text(n, "message", "The link has expired."), 0);
	out = render(n);
	x = reparse_xml(out);
	ck_assert_ptr_null(find(x, "p", "class", "detail"));
	ck_assert_ptr_nonnull(find(x, "p", "class", "message"));
	xmlFreeDoc(x);
	free(out);
	page_free(p);
	page_free(n);
}
END_TEST

START_TEST(test_caller_bugs_are_sticky)
{
	struct page *p;
	struct buf b;

	buf_init(&b, RENDER_CAP);

	p = page_new(set, "approval");
	ck_assert_int_eq(page_text(p, "aprover", "alice"), -1); /* typo */
	ck_assert_ptr_nonnull(strstr(page_error(p), "aprover"));
	ck_assert_int_eq(page_text(p, "approver", "alice"), 0);
	ck_assert_int_eq(page_render(p, &b), -1);
	ck_assert_uint_eq(b.len, 0);
	page_free(p);

	p = page_new(set, "approval");
	ck_assert_int_eq(page_text(p, "csrf", "x"), -1); /* void element */
	ck_assert_int_eq(page_render(p, &b), -1);
	page_free(p);

	p = page_new(set, "approval");
	ck_assert_int_eq(page_text(p, "key", NULL), -1);
	ck_assert_int_eq(page_render(p, &b), -1);
	page_free(p);

	p = page_new(set, "approval");
	ck_assert_int_eq(page_attr(p, "key", "title", NULL), -1);
	ck_assert_int_eq(page_render(p, &b), -1);
	page_free(p);

	p = page_new(set, "approval");
	ck_assert_ptr_null(page_repeat(p, "no_such_list"));
	ck_assert_int_eq(page_render(p, &b), -1);
	page_free(p);

	p = page_new(set, "notice");
	page_remove(p, "detial");
	ck_assert_int_eq(page_render(p, &b), -1);
	page_free(p);

	p = page_new(set, "notice");
	ck_assert_int_eq(page_text(p, NULL, "x"), -1);
	ck_assert_int_eq(page_render(p, &b), -1);
	page_free(p);

	ck_assert_uint_eq(b.len, 0);
	buf_free(&b);
}
END_TEST

START_TEST(test_render)
{
	struct page *p = page_new(set, "approval");
	struct collect_arg pre = { "pre", NULL, { 0 }, 0 };
	struct buf b, small;
	char *a, *c;
	xmlDocPtr h;

	ck_assert_ptr_nonnull(p);
	/* HTML parsers drop one newline right after <pre> (HTML "Syntax":
	 * "a single newline may be placed immediately after the start tag of
	 * pre and textarea"), so a text starting with one gets it doubled.
	 * libxml2's HTML parser predates that rule, so the markup is checked. */
	ck_assert_int_eq(page_text(p, "output", "\n{\n  \"draft\": \"hi\"\n}"), 0);
	ck_assert_int_eq(page_text(p, "effect_payload", "{}"), 0);
	a = render(p);
	c = render(p); /* rendering does not change the page */
	ck_assert_str_eq(a, c);
	ck_assert_ptr_nonnull(strstr(a, "<pre class=\"data\" tabindex=\"0\">\n\n{\n  \"draft\""));
	ck_assert_ptr_nonnull(strstr(a, "<pre class=\"data\" tabindex=\"0\">{}</pre>"));
	h = reparse_html(a);
	visit(h->children, collect, &pre);
	/* context_message, mail_body, http_body, slack_body, effect_payload,
	 * output */
	ck_assert_uint_eq(pre.n, 6);
	ck_assert_str_eq(pre.v[4], "{}");
	collect_free(&pre);
	ck_assert_ptr_nonnull(strstr(a, "<textarea id=\"reason\" name=\"reason\""));
	ck_assert_ptr_nonnull(strstr(a, "></textarea>"));
	xmlFreeDoc(h);

	/* appends; on failure leaves the buffer as it was */
	buf_init(&b, RENDER_CAP);
	ck_assert_int_eq(buf_puts(&b, "head:"), 0);
	ck_assert_int_eq(page_render(p, &b), 0);
	ck_assert_str_eq(b.data + 5, a);
	buf_free(&b);
	buf_init(&small, 100);
	ck_assert_int_eq(buf_puts(&small, "head:"), 0);
	ck_assert_int_eq(page_render(p, &small), -1);
	ck_assert_str_eq(small.data, "head:");
	buf_free(&small);

	free(a);
	free(c);
	page_free(p);
}
END_TEST

START_TEST(test_page_new)
{
	/* names of no page: unknown, empty, the file's name, a path, none */
	static const char *const none[] = { "nope", "", "approval.xhtml", "../approval", NULL };
	struct page *p;
	size_t i;

	for (i = 0; i < sizeof(none) / sizeof(none[0]); i++)
		ck_assert_msg(page_new(set, none[i]) == NULL, "page \"%s\" was made",
		              none[i] != NULL ? none[i] : "(null)");
	ck_assert_ptr_null(page_new(NULL, "approval"));
	ck_assert_ptr_nonnull(p = page_new(set, "decided"));
	page_free(p);
	page_free(NULL);
	page_set_free(NULL);
}
END_TEST

/* ---- real drafts (tests/data/corpus) ------------------------------------ */

/* Every support mail of the corpus (Cyrillic, Han, Japanese, Arabic and
 * Hebrew right to left, emoji ZWJ sequences and flags, all of them mixed;
 * up to the contract's 200 + 5,000 code points), with a 200-character key
 * in each script: shown complete and exactly as written in every place
 * the template gives it, to the XML and the HTML parser alike, nothing
 * replaced by U+FFFD, nothing turned into markup. */
START_TEST(test_corpus_drafts)
{
	json_t *tenants = tl_corpus_load("tenants.json");
	const json_t *keys = json_object_get(tenants, "long_keys");
	const char *const *ids = tl_corpus_mail_ids();
	size_t n_output = template_slot_count("approval", "output");
	size_t n_value = template_slot_count("approval", "field_value");
	size_t n_title = template_slot_count("approval", "title");
	size_t n_key = template_slot_count("approval", "key");
	size_t i;

	ck_assert_msg(ids[0] != NULL && json_array_size(keys) > 0, "the corpus is empty");
	for (i = 0; ids[i] != NULL; i++) {
		const char *subject = tl_corpus_mail_str(ids[i], "subject");
		const char *body = tl_corpus_mail_str(ids[i], "body");
		const char *key = json_string_value(json_array_get(keys, i % json_array_size(keys)));
		struct page *p = page_new(set, "approval");
		struct page_scope *s;
		xmlDocPtr x, h;
		char *out;

		ck_assert_ptr_nonnull(p);
		ck_assert_ptr_nonnull(key);
		ck_assert_msg(page_text(p, "title", subject) == 0 && page_text(p, "key", key) == 0 &&
		              page_text(p, "output", body) == 0, "%s: fill: %s", ids[i], page_error(p));
		ck_assert_ptr_nonnull(s = page_repeat(p, "output_fields"));
		ck_assert_int_eq(page_scope_text(s, "field_name", "body"), 0);
		ck_assert_int_eq(page_scope_text(s, "field_value", body), 0);
		page_repeat_done(p, "output_fields");
		page_repeat_done(p, "error_item");
		page_repeat_done(p, "decision_button");
		ck_assert_msg(page_error(p) == NULL, "%s: %s", ids[i], page_error(p));
		out = render(p);
		x = reparse_xml(out);
		h = reparse_html(out);
		assert_clean(out, x, h);
		ck_assert_msg(strstr(out, FFFD) == NULL, "%s: the page replaced characters: ...%.300s",
		              ids[i], strstr(out, FFFD));
		ck_assert_msg(texts_equal(x, body) == n_output + n_value &&
		              texts_equal(h, body) == n_output + n_value,
		              "%s: the body (%zu bytes) shows whole in %zu (XML) / %zu (HTML) places, "
		              "want %zu", ids[i], strlen(body), texts_equal(x, body), texts_equal(h, body),
		              n_output + n_value);
		ck_assert_msg(texts_equal(x, subject) == n_title && texts_equal(h, subject) == n_title,
		              "%s: the subject shows whole in %zu places, want %zu", ids[i],
		              texts_equal(x, subject), n_title);
		ck_assert_msg(texts_equal(x, key) == n_key && texts_equal(h, key) == n_key,
		              "%s: the 200-character key shows whole in %zu places, want %zu", ids[i],
		              texts_equal(x, key), n_key);
		xmlFreeDoc(x);
		xmlFreeDoc(h);
		free(out);
		page_free(p);
	}
	json_decref(tenants);
}
END_TEST

/* ---- broken template directories --------------------------------------- */

struct broken {
	const char *file;    /* the template to break */
	const char *from;    /* every occurrence replaced … */
	const char *to;      /* … by this; from == NULL: special, see below */
	const char *expect;  /* in the error, besides the file name */
};

static const struct broken broken[] = {
	{ "decided", "</main>", "</mian>", "mismatch" },
	{ "approval", "<!DOCTYPE html>",
	  "<!DOCTYPE html [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;\">]>",
	  "DOCTYPE may not declare" },
	{ "approval", "<!DOCTYPE html>",
	  "<!DOCTYPE html [<!ENTITY xxe SYSTEM \"file:///etc/passwd\">]>",
	  "DOCTYPE may not declare" },
	{ "notice", "<main>", "<main>&nbsp;", "nbsp" },
	{ "notice", "<main>", "<main><script>alert(1)</script>", "<script> is not allowed" },
	{ "notice", "<main>", "<main><style>p{}</style>", "<style> is not allowed" },
	{ "notice", "<main>", "<main><iframe src=\"https://x/\"></iframe>",
	  "<iframe> is not allowed" },
	{ "notice", "<main>", "<main onclick=\"alert(1)\">", "onclick is not allowed" },
	{ "notice", "<main>", "<main style=\"color: red\">", "style is not allowed" },
	{ "notice", "lang=\"en\"", "xml:lang=\"en\"", "lang is not allowed" },
	{ "notice", "<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">",
	  "<html lang=\"en\">", "root must be" },
	{ "notice", "<main>",
	  "<main><svg:svg xmlns:svg=\"http://www.w3.org/2000/svg\"/>",
	  "not an unprefixed XHTML element" },
	{ "notice", "<main>", "<main><br>x</br>", "<br> must be empty" },
	{ "notice", "<p class=\"detail\"",
	  "<p><a href=\" JavaScript:alert(1)\">x</a></p><p class=\"detail\"",
	  "refused URL scheme" },
	{ "approval", "data-slot=\"approver\"", "data-slot=\"approvr\"",
	  "no element has data-slot \"approver\"" },
	{ "approval", "decision_button decision_value", "decision_button",
	  "no element has data-slot \"decision_value\"" },
	{ "decided", "<html", "<?xml version=\"1.0\"?><p/><html", "" },
	{ "notice", NULL, "missing", "No such file" },
	{ "decided", NULL, "directory", "not a regular file" },
	{ "approval", NULL, "huge", "larger than" },
	{ "approval", NULL, "empty", "" },
};

static char *
replace_all(const char *s, const char *from, const char *to)
{
	struct buf b;
	const char *hit;
	size_t flen = strlen(from);

	buf_init(&b, 4 * 1024 * 1024);
	while ((hit = strstr(s, from)) != NULL) {
		ck_assert_int_eq(buf_append(&b, s, (size_t)(hit - s)), 0);
		ck_assert_int_eq(buf_puts(&b, to), 0);
		s = hit + flen;
	}
	ck_assert_int_eq(buf_puts(&b, s), 0);
	return buf_steal(&b);
}

static void
write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "wb");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(text, 1, strlen(text), f), strlen(text));
	ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_broken_dir)
{
	static const char *const names[] = { "approval", "decided", "notice" };
	const struct broken *c = &broken[_i];
	char dir[] = "/tmp/check_page.XXXXXX", src[TEST_PATH_MAX], dst[TEST_PATH_MAX];
	char err[512], want[TEST_PATH_MAX + 16];
	struct page_set *bad;
	char *text, *changed;
	size_t i;

	find_template_dir();
	ck_assert_ptr_nonnull(mkdtemp(dir));
	for (i = 0; i < 3; i++) {
		snprintf(src, sizeof(src), "%s/%s.xhtml", tdir, names[i]);
		snprintf(dst, sizeof(dst), "%s/%s.xhtml", dir, names[i]);
		text = slurp(src);
		if (strcmp(names[i], c->file) != 0) {
			write_file(dst, text);
		} else if (c->from != NULL) {
			changed = replace_all(text, c->from, c->to);
			ck_assert_str_ne(changed, text);
			write_file(dst, changed);
			free(changed);
		} else if (strcmp(c->to, "directory") == 0) {
			ck_assert_int_eq(mkdir(dst, 0700), 0);
		} else if (strcmp(c->to, "huge") == 0) {
			changed = malloc(300 * 1024 + 1);
			memset(changed, ' ', 300 * 1024);
			changed[300 * 1024] = '\0';
			write_file(dst, changed);
			free(changed);
		} else if (strcmp(c->to, "empty") == 0) {
			write_file(dst, "");
		} /* "missing": not written */
		free(text);
	}

	err[0] = '\0';
	bad = page_set_load(dir, err, sizeof(err));
	ck_assert_ptr_null(bad);
	snprintf(want, sizeof(want), "%s/%s.xhtml", dir, c->file);
	ck_assert_msg(strstr(err, want) != NULL, "error \"%s\" does not name %s",
	              err, want);
	ck_assert_msg(strstr(err, c->expect) != NULL,
	              "error \"%s\" does not say \"%s\"", err, c->expect);

	for (i = 0; i < 3; i++) {
		snprintf(dst, sizeof(dst), "%s/%s.xhtml", dir, names[i]);
		if (unlink(dst) != 0)
			rmdir(dst);
	}
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

START_TEST(test_missing_dir)
{
	char err[512];

	ck_assert_ptr_null(page_set_load("/nonexistent/templates", err,
	                                 sizeof(err)));
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/templates/approval.xhtml"));
}
END_TEST

/* ---- threads ----------------------------------------------------------- */

#define HOSTILE_MIX "<script>alert(1)</script> \xff & caf\xc3\xa9 ]]>"

struct worker {
	pthread_t id;
	const char *want;
	int bad;
};

static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	struct page *p;
	struct buf b;
	int i;

	buf_init(&b, RENDER_CAP);
	for (i = 0; i < ROUNDS; i++) {
		p = page_new(set, "approval");
		if (p == NULL) {
			w->bad++;
			continue;
		}
		buf_reset(&b);
		if (fill_approval(p, HOSTILE_MIX) != 0 ||
		    page_render(p, &b) != 0 || strcmp(b.data, w->want) != 0)
			w->bad++;
		page_free(p);
	}
	buf_free(&b);
	return NULL;
}

START_TEST(test_threads)
{
	struct worker w[THREADS];
	struct page *p = page_new(set, "approval");
	char *want;
	int i;

	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(fill_approval(p, HOSTILE_MIX), 0);
	want = render(p);
	page_free(p);
	for (i = 0; i < THREADS; i++) {
		w[i].want = want;
		w[i].bad = 0;
		ck_assert_int_eq(pthread_create(&w[i].id, NULL, worker_main, &w[i]), 0);
	}
	for (i = 0; i < THREADS; i++) {
		ck_assert_int_eq(pthread_join(w[i].id, NULL), 0);
		ck_assert_msg(w[i].bad == 0, "thread %d: %d renders differed", i,
		              w[i].bad);
	}
	free(want);
}
END_TEST

/* JSON for a person: sorted, shortest numbers, indented four levels and
 * compact below, so its size follows the value's, not its depth. */
START_TEST(test_json_text)
{
	json_t *v = json_pack("{s:f, s:[i, {s:{s:{s:{s:s}}}}], s:s}", "z", 0.8, "a", 1, "b",
	                      "c", "d", "e", "глубоко 🐚", "m", "<b>&</b>");
	json_t *deep = json_array(), *cur = deep, *next;
	char *t;
	size_t compact, i;
	int level;

	ck_assert_ptr_nonnull(v);
	t = page_json_text(v);
	ck_assert_ptr_nonnull(t);
	ck_assert_str_eq(t, "{\n"
	                    "  \"a\": [\n"
	                    "    1,\n"
	                    "    {\n"
	                    "      \"b\": {\n"
	                    "        \"c\": {\"d\":{\"e\":\"глубоко 🐚\"}}\n"
	                    "      }\n"
	                    "    }\n"
	                    "  ],\n"
	                    "  \"m\": \"<b>&</b>\",\n"
	                    "  \"z\": 0.8\n"
	                    "}");
	free(t);
	json_decref(v);
	t = page_json_text(NULL);
	ck_assert_str_eq(t, "");
	free(t);

	/* 60 levels, then 20,000 items: no more than a few bytes per item */
	for (level = 0; level < 60; level++) {
		next = json_array();
		json_array_append_new(cur, next);
		cur = next;
	}
	for (i = 0; i < 20000; i++)
		json_array_append_new(cur, json_integer((json_int_t)(i % 10)));
	t = json_dumps(deep, JSON_COMPACT);
	compact = strlen(t);
	free(t);
	t = page_json_text(deep);
	ck_assert_ptr_nonnull(t);
	ck_assert_msg(strlen(t) < compact + 200, "%zu bytes for %zu of compact JSON", strlen(t),
	              compact);
	free(t);
	json_decref(deep);
}
END_TEST

TL_SUITE(page_suite, "page",
         {"hostile", 300, .setup = setup, .teardown = teardown,
          .loops = TL_LOOPS({test_hostile_approval, NHOSTILE},
                            {test_url_refused, sizeof(bad_urls) / sizeof(bad_urls[0])},
                            {test_url_allowed, sizeof(good_urls) / sizeof(good_urls[0])},
                            {test_attr_refused, sizeof(bad_attrs) / sizeof(bad_attrs[0])}),
          .tests = TL_LIST(test_hostile_decided, test_hostile_notice, test_attr_null_name)},
         {"structure", 0, .setup = setup, .teardown = teardown,
          .tests = TL_LIST(test_repeat_order, test_repeat_copies_state, test_repeat_none_and_done,
                           test_remove, test_caller_bugs_are_sticky, test_render, test_page_new,
                           test_json_text, test_corpus_drafts)},
         {"load", 0, .loops = TL_LOOPS({test_broken_dir, sizeof(broken) / sizeof(broken[0])}),
          .tests = TL_LIST(test_missing_dir)},
         /* generous: valgrind runs this ~50x slower */
         {"threads", 900, .setup = setup, .teardown = teardown, .tests = TL_LIST(test_threads)})

int
main(void)
{
	int failed = tl_suite_run(page_suite(), false);

	xmlCleanupParser();
	return failed != 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}

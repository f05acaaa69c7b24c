/*
 * page_render.c — micro-benchmark of filling and rendering the approval
 * card the way api.c page_card() does. Standalone, not built by make:
 *
 *   gcc -std=gnu11 -O2 -Isrc/lib src/lib/page.c src/lib/page_tmpl.c \
 *       src/lib/page_text.c src/lib/page_json.c src/lib/utf8.c src/lib/canon.c \
 *       src/lib/buf.c src/lib/digest.c tests/bench/page_render.c \
 *       $(pkg-config --cflags --libs libxml-2.0 jansson openssl) -lm \
 *       -o /tmp/page_bench && /tmp/page_bench templates [rounds]
 *
 * With "wide N" it fills one card with N output fields (the field table of
 * an output with N members) and prints how long filling and rendering took:
 * the time must grow linearly with N.
 *
 * With "dump" instead of a round count it writes a set of edge-case pages
 * (hostile text, fills before and after repeats, removals, nested slots)
 * to stdout, so two builds of page.c can be diffed byte for byte.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libxml/parser.h>

#include "buf.h"
#include "page.h"

static const char output_json[] =
	"{\n  \"customer\": \"Ada Lovelace\",\n  \"draft\": \"Hello Ada, your "
	"refund of 42.00 EUR has been approved & will arrive in 3-5 days. "
	"<b>Thanks</b>\",\n  \"amount\": 42\n}";

static void
fill_card(struct page *p, int errors)
{
	struct page_scope *sc;
	static const char *const fields[][2] = {
		{ "customer", "Ada Lovelace" },
		{ "draft", "Hello Ada, your refund of 42.00 EUR has been approved & "
		           "will arrive in 3-5 days. <b>Thanks</b>" },
		{ "amount", "42" },
	};
	static const char *const decisions[] = { "approve", "reject" };
	size_t i;

	(void)page_text(p, "title", "Approval needed");
	(void)page_text(p, "key", "crm-ticket-4711-refund");
	(void)page_attr(p, "source_link", "href",
	                "https://crm.example.com/tickets/4711?tab=refund&x=1");
	(void)page_text(p, "source_link",
	                "https://crm.example.com/tickets/4711?tab=refund&x=1");
	(void)page_text(p, "contract", "refund-reply/v3");
	(void)page_text(p, "model", "openai gpt-4o 2024-08-06");
	(void)page_text(p, "output", output_json);
	for (i = 0; i < 3; i++) {
		sc = page_repeat(p, "output_fields");
		(void)page_scope_text(sc, "field_name", fields[i][0]);
		(void)page_scope_text(sc, "field_value", fields[i][1]);
	}
	page_repeat_done(p, "output_fields");
	if (errors) {
		for (i = 0; i < 2; i++) {
			sc = page_repeat(p, "error_item");
			(void)page_scope_text(sc, "error_path", "/draft");
			(void)page_scope_text(sc, "error_message", "too \"long\" <x>");
		}
		page_repeat_done(p, "error_item");
	} else {
		page_remove(p, "errors");
	}
	(void)page_text(p, "approver", "alice@example.com");
	(void)page_text(p, "approver_groups", "finance,support");
	(void)page_text(p, "expires_at", "2025-01-01T12:00:00Z");
	(void)page_text(p, "effect_type", "http.post");
	(void)page_text(p, "effect_target", "https://api.example.com/refunds");
	(void)page_text(p, "effect_payload",
	                "{\n  \"amount\": 42,\n  \"currency\": \"EUR\"\n}");
	(void)page_text(p, "requested_by", "(not given)");
	(void)page_attr(p, "csrf", "value",
	                "v1.1700000000.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789");
	for (i = 0; i < 2; i++) {
		sc = page_repeat(p, "decision_button");
		(void)page_scope_attr(sc, "decision_value", "value", decisions[i]);
		(void)page_scope_text(sc, "decision_label",
		                      i == 0 ? "Approve" : "Reject");
	}
	page_repeat_done(p, "decision_button");
}

static void
emit(const char *label, struct page *p)
{
	struct buf b;
	int rc;

	buf_init(&b, 1024 * 1024);
	rc = page_render(p, &b);
	printf("==== %s rc=%d error=%s\n%s\n", label, rc,
	       page_error(p) ? page_error(p) : "(none)", b.data ? b.data : "");
	buf_free(&b);
	page_free(p);
}

#define H "<script>x</script> \xff\r\n & \"q\" \t\xe2\x80\xae ]]> caf\xc3\xa9"

static void
dump(const struct page_set *set)
{
	struct page *p;
	struct page_scope *s, *s2;

	p = page_new(set, "approval");
	fill_card(p, 0);
	emit("card", p);

	p = page_new(set, "approval");
	fill_card(p, 1);
	emit("card with errors", p);

	p = page_new(set, "approval");
	emit("unfilled", p);

	/* filling prototypes before repeating: copies carry the fill */
	p = page_new(set, "approval");
	(void)page_text(p, "field_name", "pre");
	(void)page_attr(p, "output_fields", "title", H);
	(void)page_attr(p, "decision_value", "value", "proto");
	s = page_repeat(p, "output_fields");
	(void)page_scope_text(s, "field_value", H);
	(void)page_scope_attr(s, "output_fields", "title", "second");
	(void)page_scope_attr(s, "output_fields", "class", "x");
	s = page_repeat(p, "output_fields");
	(void)page_text(p, "field_value", "all");
	(void)page_repeat(p, "decision_button");
	(void)page_repeat(p, "decision_button");
	(void)page_text(p, "decision_label", "every");
	emit("protos filled first", p);

	/* nested slots: text over a part with slots, then fills inside it */
	p = page_new(set, "approval");
	(void)page_text(p, "form", H);
	printf("csrf in replaced form: %d\n", page_attr(p, "csrf", "value", "t"));
	s = page_repeat(p, "decision_button");
	printf("scope in replaced form: %d\n",
	       page_scope_text(s, "decision_label", "x"));
	printf("approver (one live): %d\n", page_text(p, "approver", "bob"));
	emit("text over form", p);

	/* removal after repeats, scopes into removed parts */
	p = page_new(set, "approval");
	s = page_repeat(p, "error_item");
	s2 = page_repeat(p, "output_fields");
	page_remove(p, "output_fields");
	printf("scope after its item removed: %d\n",
	       page_scope_text(s2, "field_name", "gone"));
	s2 = page_repeat(p, "output_fields");
	printf("repeat after prototype removed: %d\n",
	       s2 != NULL ? page_scope_text(s2, "field_name", "x") : -9);
	page_remove(p, "errors");
	printf("scope in removed errors: %d\n",
	       page_scope_text(s, "error_path", "/x"));
	page_repeat_done(p, "error_item");
	page_remove(p, "rerun");
	emit("removals", p);

	/* scope fill of a slot not in the item: sticky */
	p = page_new(set, "approval");
	s = page_repeat(p, "output_fields");
	printf("scope slot elsewhere: %d\n", page_scope_text(s, "key", "k"));
	emit("scope slot elsewhere", p);

	/* attrs: replace, add, url refusal (not sticky), then text */
	p = page_new(set, "approval");
	printf("bad url: %d\n", page_attr(p, "source_link", "href", "java\tscript:x"));
	printf("rel: %d\n", page_attr(p, "source_link", "rel", H));
	printf("href: %d\n", page_attr(p, "source_link", "href", "/a?b=" H));
	printf("id twice: %d %d\n", page_attr(p, "key", "id", "a"),
	       page_attr(p, "key", "id", "b"));
	(void)page_text(p, "output", "\nleading newline");
	(void)page_text(p, "effect_payload", "");
	emit("attrs", p);

	p = page_new(set, "decided");
	(void)page_text(p, "reason", H);
	page_remove(p, "rerun");
	emit("decided", p);

	p = page_new(set, "notice");
	(void)page_text(p, "heading", H);
	page_remove(p, "detail");
	page_remove(p, "detail");
	(void)page_text(p, "detail", "ignored");
	emit("notice", p);

	p = page_new(set, "notice");
	page_remove(p, "detial");
	emit("notice typo", p);

	p = page_new(set, "approval");
	page_repeat_done(p, "output_fields");
	printf("repeat after done: %p\n", (void *)page_repeat(p, "output_fields"));
	emit("repeat after done", p);

	p = page_new(set, "approval");
	printf("void text: %d\n", page_text(p, "csrf", "x"));
	emit("void", p);
}

/* One card with n output fields, filled and rendered, timed. */
static int
wide(const struct page_set *set, long n)
{
	struct page *p = page_new(set, "approval");
	struct page_scope *sc;
	struct timespec t0, t1;
	struct buf b;
	char name[32], value[32];
	long i;
	int rc;

	if (p == NULL || n < 0)
		return 1;
	buf_init(&b, 64 * 1024 * 1024);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	(void)page_text(p, "title", "Approval needed");
	(void)page_text(p, "key", "crm-ticket-4711-refund");
	(void)page_text(p, "output", output_json);
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "f%ld", i);
		snprintf(value, sizeof(value), "%ld", i % 7);
		if ((sc = page_repeat(p, "output_fields")) == NULL)
			return 1;
		(void)page_scope_text(sc, "field_name", name);
		(void)page_scope_text(sc, "field_value", value);
	}
	page_repeat_done(p, "output_fields");
	/* what page_card fills after the field table */
	page_remove(p, "errors");
	(void)page_text(p, "approver", "agent.petrova@example.com");
	(void)page_text(p, "approver_groups", "staff,support,emea");
	(void)page_text(p, "expires_at", "2026-12-02T14:29:58.071Z");
	(void)page_text(p, "effect_type", "crm.tag");
	(void)page_text(p, "effect_target", "demo_http");
	(void)page_text(p, "effect_payload", "{}");
	(void)page_text(p, "requested_by", "(not given)");
	rc = page_render(p, &b);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("%ld fields: %.3f s, %zu bytes%s\n", n,
	       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9, b.len,
	       rc != 0 ? " (render failed)" : "");
	buf_free(&b);
	page_free(p);
	return rc != 0;
}

int
main(int argc, char **argv)
{
	struct page_set *set;
	struct timespec t0, t1;
	struct buf b;
	char err[512];
	long rounds = 20000, i;
	size_t total = 0;
	double ns;

	if (argc < 2) {
		fprintf(stderr, "usage: %s TEMPLATE_DIR [ROUNDS|dump|wide N]\n", argv[0]);
		return 2;
	}
	if ((set = page_set_load(argv[1], err, sizeof(err))) == NULL) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	if (argc > 2 && strcmp(argv[2], "dump") == 0) {
		dump(set);
		page_set_free(set);
		return 0;
	}
	if (argc > 3 && strcmp(argv[2], "wide") == 0)
		return wide(set, atol(argv[3]));
	if (argc > 2)
		rounds = atol(argv[2]);
	buf_init(&b, 1024 * 1024);
	for (i = 0; i < rounds / 10; i++) { /* warm up */
		struct page *p = page_new(set, "approval");

		fill_card(p, 0);
		buf_reset(&b);
		if (page_render(p, &b) != 0)
			return 1;
		page_free(p);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < rounds; i++) {
		struct page *p = page_new(set, "approval");

		fill_card(p, 0);
		buf_reset(&b);
		if (page_render(p, &b) != 0)
			return 1;
		total += b.len;
		page_free(p);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
	printf("%ld pages, %.1f us/page, %zu bytes/page\n", rounds,
	       ns / (double)rounds / 1000.0, total / (size_t)rounds);
	buf_free(&b);
	page_set_free(set);
	xmlCleanupParser();
	return 0;
}

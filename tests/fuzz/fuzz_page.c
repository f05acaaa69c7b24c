/*
 * fuzz_page.c — template filling (src/lib/page.c) over the real templates:
 * a small program read from the input drives page_text, page_attr,
 * page_remove, page_repeat, page_scope_text, page_scope_attr and
 * page_repeat_done with input-derived slots, attribute names and values,
 * then page_render.
 *
 * Input: NUL-separated fields. The first byte of the first field picks the
 * template; then each step is an op field (op, slot, attribute as bytes)
 * and a value field. Slot and attribute names are mostly the real ones; a
 * high index takes the value field as the name instead.
 *
 * Properties of every page that renders: well-formed XML (libxml2, no
 * recovery), no <script>, no on* or template attributes, and no URL
 * attribute a browser would run as javascript:, vbscript: or data:.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "buf.h"
#include "page.h"
#include "fuzzlib.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define STEPS_MAX  64
#define RENDER_CAP (1024 * 1024)

static struct page_set *set;

static const char *const templates[] = { "approval", "decided", "notice" };

static const char *const slots[] = {
	"title", "approver", "approver_groups", "expires_at", "effect_type",
	"effect_target", "effect_payload", "errors", "error_item", "error_path",
	"error_message", "output_fields", "field_name", "field_value", "output",
	"key", "source_link", "contract", "model", "requested_by", "form", "csrf",
	"decision_button", "decision_value", "decision_label", "rerun", "decision",
	"decided_by", "decided_at", "reason", "heading", "message", "detail",
};

static const char *const attrs[] = {
	"href", "value", "title", "class", "id", "src", "action", "formaction",
	"name", "lang", "onclick", "style", "data-slot", "data-repeat", "xmlns",
	"srcdoc", "srcset", "Href", "cite", "poster",
};

#define NSLOTS (sizeof(slots) / sizeof(slots[0]))
#define NATTRS (sizeof(attrs) / sizeof(attrs[0]))

static void
quiet(void *ctx, const char *msg, ...)
{
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char dir[4096], err[1024];

	snprintf(dir, sizeof(dir), "%s/templates", fuzzlib_srcdir());
	set = page_set_load(dir, err, sizeof(err));
	if (set == NULL) {
		fprintf(stderr, "fuzz: cannot load %s: %s\n", dir, err);
		abort();
	}
	xmlSetGenericErrorFunc(NULL, quiet);
	return 0;
}

/* What a browser would run: the value with leading blanks and controls
 * dropped and tabs and newlines removed anywhere, before its first ':'. */
static bool
url_dangerous(const char *v)
{
	char s[16];
	size_t n = 0;

	while (*v != '\0' && (unsigned char)*v <= 0x20)
		v++;
	for (; *v != '\0' && n < sizeof(s) - 1; v++) {
		if (*v == '\t' || *v == '\n' || *v == '\r')
			continue;
		s[n++] = (char)tolower((unsigned char)*v);
	}
	s[n] = '\0';
	return strncmp(s, "javascript:", 11) == 0 || strncmp(s, "vbscript:", 9) == 0 ||
	       strncmp(s, "data:", 5) == 0;
}

static bool
url_attr(const char *name)
{
	static const char *const names[] = { "href", "src", "action", "formaction",
		                             "cite", "poster", "background", NULL };
	size_t i;

	for (i = 0; names[i] != NULL; i++)
		if (strcasecmp(name, names[i]) == 0)
			return true;
	return false;
}

static void
check_tree(xmlNodePtr n)
{
	for (; n != NULL; n = n->next) {
		xmlAttrPtr a;

		if (n->type != XML_ELEMENT_NODE)
			continue;
		FUZZ_ASSERT(strcasecmp((const char *)n->name, "script") != 0);
		for (a = n->properties; a != NULL; a = a->next) {
			const char *name = (const char *)a->name;
			xmlChar *v;

			FUZZ_ASSERT(strncasecmp(name, "on", 2) != 0);
			FUZZ_ASSERT(strcmp(name, "data-slot") != 0 && strcmp(name, "data-repeat") != 0);
			if (!url_attr(name))
				continue;
			v = xmlNodeListGetString(n->doc, a->children, 1);
			FUZZ_ASSERT(v == NULL || !url_dangerous((const char *)v));
			xmlFree(v);
		}
		check_tree(n->children);
	}
}

static void
check_render(const struct page *p)
{
	struct buf out;
	xmlDocPtr doc;

	buf_init(&out, RENDER_CAP);
	if (page_render(p, &out) == 0) {
		FUZZ_ASSERT(out.data != NULL);
		FUZZ_ASSERT(strncmp(out.data, "<!DOCTYPE html>", 15) == 0);
		doc = xmlReadMemory(out.data, (int)out.len, "rendered.xhtml", NULL,
		                    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
		FUZZ_ASSERT(doc != NULL);
		check_tree(xmlDocGetRootElement(doc));
		xmlFreeDoc(doc);
	} else {
		FUZZ_ASSERT(out.len == 0);
	}
	buf_free(&out);
}

static const char *
pick(const char *const *list, size_t n, uint8_t i, const char *own)
{
	return i < n ? list[i] : i % 2 == 0 ? own : list[i % n];
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzzlib_in in = { data, size };
	struct page *p = page_new(set, templates[fuzzlib_byte(&in) % 3]);
	struct page_scope *scope = NULL;
	int step;

	FUZZ_ASSERT(p != NULL);
	for (step = 0; step < STEPS_MAX && !fuzzlib_done(&in); step++) {
		char *op = fuzzlib_field(&in), *value = fuzzlib_field(&in);
		size_t oplen = strlen(op);
		uint8_t code = oplen > 0 ? (uint8_t)op[0] : 0;
		uint8_t si = oplen > 1 ? (uint8_t)op[1] : 0, ai = oplen > 2 ? (uint8_t)op[2] : 0;
		const char *slot = pick(slots, NSLOTS, si, value);
		const char *attr = pick(attrs, NATTRS, ai, value);

		switch (code % 8) {
		case 0:
			(void)page_text(p, slot, value);
			break;
		case 1:
			(void)page_attr(p, slot, attr, value);
			break;
		case 2:
			page_remove(p, slot);
			break;
		case 3:
			scope = page_repeat(p, slot);
			break;
		case 4:
			if (scope != NULL)
				(void)page_scope_text(scope, slot, value);
			break;
		case 5:
			if (scope != NULL)
				(void)page_scope_attr(scope, slot, attr, value);
			break;
		case 6:
			page_repeat_done(p, slot);
			break;
		case 7:
			check_render(p);
			break;
		}
		free(op);
		free(value);
	}
	check_render(p);
	(void)page_error(p);
	page_free(p);
	return 0;
}

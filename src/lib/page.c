/*
 * page.c — templates/ filled as a DOM through libxml2 and rendered as
 * XHTML that HTML parsers read the same way.
 *
 * Callers only ever set text nodes and attribute values, so data can never
 * become markup. Nodes are never freed while a page is being filled:
 * whatever is replaced or removed is moved under a detached "graveyard"
 * element freed with the page, so a scope whose item was removed later
 * still points at live memory.
 *
 * Rendering is a small serializer of our own rather than xmlsave: plain
 * XML output writes an empty <textarea/>, which an HTML parser reads as an
 * open tag that swallows the rest of the page, and xmlsave's XHTML mode
 * adds a second charset <meta> and xml:lang. Ours writes void elements as
 * <br />, everything else with an end tag, escapes every text and attribute
 * value, and needs no namespace handling because load-time checks allow
 * nothing but unprefixed XHTML elements and attributes without namespace.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "buf.h"
#include "limits.h"
#include "page.h"

/* Template file cap. Belongs in limits.h (the lead adds it there; this
 * fallback then goes away). */
#ifndef OG_TEMPLATE_MAX
#define OG_TEMPLATE_MAX (256 * 1024)
#endif

#define PAGE_XHTML_NS   "http://www.w3.org/1999/xhtml"
#define PAGE_SLOT       "data-slot"
#define PAGE_REPEAT     "data-repeat"
#define PAGE_ERROR_MAX  256
#define PAGE_ATTR_NAME_MAX 64

/* What the handlers fill, per template: a template that lost one of these
 * fails at start-up instead of showing a card without, say, the approver. */
static const char *const page_approval_slots[] = {
	"title", "key", "source_link", "contract", "model", "output",
	"output_fields", "field_name", "field_value", "errors", "error_item",
	"error_path", "error_message", "approver", "approver_groups",
	"expires_at", "effect_type", "effect_target", "effect_payload",
	"requested_by", "rerun", "form", "csrf", "decision_button",
	"decision_value", "decision_label", NULL,
};
static const char *const page_decided_slots[] = {
	"title", "key", "decision", "decided_by", "decided_at", "reason",
	"effect_type", "effect_target", "rerun", NULL,
};
static const char *const page_notice_slots[] = {
	"title", "heading", "message", "detail", NULL,
};

struct page_template {
	const char *name;
	const char *const *slots;
};

static const struct page_template page_templates[] = {
	{ "approval", page_approval_slots },
	{ "decided", page_decided_slots },
	{ "notice", page_notice_slots },
};

#define PAGE_NTEMPLATES (sizeof(page_templates) / sizeof(page_templates[0]))

struct page_set {
	xmlDocPtr docs[PAGE_NTEMPLATES];
};

struct repeat {
	char *slot;
	xmlNodePtr proto;
	xmlNodePtr last;       /* the prototype until the first copy */
	bool done;             /* prototype removed: no more copies */
	struct repeat *next;
};

struct page_scope {
	struct page *page;
	xmlNodePtr root;
	struct page_scope *next;
};

struct page {
	xmlDocPtr doc;
	xmlNodePtr graveyard;  /* detached; owns replaced and removed nodes */
	struct repeat *repeats;
	struct page_scope *scopes;
	bool failed;
	char error[PAGE_ERROR_MAX];
};

struct nodes {
	xmlNodePtr *v;
	size_t n, alloc;
};

/* HTML void elements: written as <x />, never given content. */
static const char *const void_elements[] = {
	"area", "base", "br", "col", "embed", "hr", "img", "input", "link",
	"meta", "source", "track", "wbr", NULL,
};

/* Never in a template: script would run, the rest would load or embed
 * something, and the CSP refuses inline style anyway. */
static const char *const banned_elements[] = {
	"script", "style", "iframe", "frame", "frameset", "object", "embed",
	"applet", "base", NULL,
};

/* Attributes whose value a browser loads or navigates to. */
static const char *const url_attrs[] = {
	"action", "background", "cite", "codebase", "data", "formaction",
	"href", "icon", "longdesc", "manifest", "ping", "poster", "src", NULL,
};

static bool
in_list(const char *const *list, const char *s)
{
	for (; *list != NULL; list++)
		if (strcmp(*list, s) == 0)
			return true;
	return false;
}

static const char *
cname(const xmlChar *s)
{
	return (const char *)s;
}

static void __attribute__((format(printf, 2, 3)))
fail(struct page *p, const char *fmt, ...)
{
	va_list ap;

	if (p->failed)
		return; /* the first failure is the one worth logging */
	p->failed = true;
	va_start(ap, fmt);
	vsnprintf(p->error, sizeof(p->error), fmt, ap);
	va_end(ap);
}

/* ---- the tree ---------------------------------------------------------- */

/* Next node of a pre-order walk of top's subtree, or NULL. */
static xmlNodePtr
walk_next(xmlNodePtr n, xmlNodePtr top, bool descend)
{
	if (descend && n->type == XML_ELEMENT_NODE && n->children != NULL)
		return n->children;
	while (n != NULL && n != top) {
		if (n->next != NULL)
			return n->next;
		n = n->parent;
	}
	return NULL;
}

static xmlAttrPtr
find_prop(xmlNodePtr n, const char *name)
{
	xmlAttrPtr a;

	for (a = n->properties; a != NULL; a = a->next)
		if (a->ns == NULL && strcmp(cname(a->name), name) == 0)
			return a;
	return NULL;
}

/* The value of an attribute that is one text node (all ours are: entity
 * references are refused at load and setters write one text node). */
static const char *
prop_text(xmlAttrPtr a)
{
	if (a->children == NULL)
		return "";
	if (a->children->type != XML_TEXT_NODE || a->children->next != NULL ||
	    a->children->content == NULL)
		return NULL;
	return cname(a->children->content);
}

static bool
is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool
slot_match(xmlNodePtr n, const char *slot, size_t len)
{
	xmlAttrPtr a;
	const char *v, *start;

	if (n->type != XML_ELEMENT_NODE || len == 0 ||
	    (a = find_prop(n, PAGE_SLOT)) == NULL || (v = prop_text(a)) == NULL)
		return false;
	while (*v != '\0') {
		while (is_space(*v))
			v++;
		start = v;
		while (*v != '\0' && !is_space(*v))
			v++;
		if ((size_t)(v - start) == len && memcmp(start, slot, len) == 0)
			return true;
	}
	return false;
}

static int
nodes_add(struct nodes *ns, xmlNodePtr n)
{
	xmlNodePtr *v;
	size_t alloc;

	if (ns->n == ns->alloc) {
		alloc = ns->alloc ? ns->alloc * 2 : 8;
		v = realloc(ns->v, alloc * sizeof(*v));
		if (v == NULL)
			return -1;
		ns->v = v;
		ns->alloc = alloc;
	}
	ns->v[ns->n++] = n;
	return 0;
}

/* Every element of top's subtree (top included) with slot, in document
 * order. */
static int
find_all(xmlNodePtr top, const char *slot, struct nodes *out)
{
	size_t len = strlen(slot);
	xmlNodePtr n;

	for (n = top; n != NULL; n = walk_next(n, top, true))
		if (slot_match(n, slot, len) && nodes_add(out, n) != 0)
			return -1;
	return 0;
}

static xmlNodePtr
find_first(xmlNodePtr top, const char *slot)
{
	size_t len = strlen(slot);
	xmlNodePtr n;

	for (n = top; n != NULL; n = walk_next(n, top, true))
		if (slot_match(n, slot, len))
			return n;
	return NULL;
}

static xmlNodePtr
page_root(const struct page *p)
{
	return xmlDocGetRootElement(p->doc);
}

static void
bury(struct page *p, xmlNodePtr n)
{
	xmlUnlinkNode(n);
	/* may merge a text node into a buried neighbour and free it; text
	 * nodes are never held anywhere, so that is fine */
	xmlAddChild(p->graveyard, n);
}

static bool
is_void(xmlNodePtr n)
{
	return in_list(void_elements, cname(n->name));
}

/* ---- cleaning values --------------------------------------------------- */

/* Decodes the UTF-8 sequence at s (NUL-terminated). *cp gets the code
 * point, or -1 when s starts an invalid sequence; returns the bytes used:
 * the whole sequence, or its longest valid prefix (at least 1), so one
 * truncated sequence becomes one U+FFFD as browsers do it. */
static size_t
utf8_next(const unsigned char *s, long *cp)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xBF;
	size_t need, i;
	long v;

	*cp = -1;
	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xC2 && c <= 0xDF) {
		need = 2;
		v = c & 0x1F;
	} else if (c >= 0xE0 && c <= 0xEF) {
		need = 3;
		v = c & 0x0F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 4;
		v = c & 0x07;
	} else {
		return 1; /* continuation byte, overlong lead C0/C1, or > U+10FFFF */
	}
	/* the second byte's range rules out overlongs and surrogates */
	if (c == 0xE0)
		lo = 0xA0;
	else if (c == 0xED)
		hi = 0x9F;
	else if (c == 0xF0)
		lo = 0x90;
	else if (c == 0xF4)
		hi = 0x8F;
	for (i = 1; i < need; i++) {
		/* a NUL terminator is no continuation byte, so this stops there */
		if (s[i] < lo || s[i] > hi)
			return i;
		v = v << 6 | (s[i] & 0x3F);
		lo = 0x80;
		hi = 0xBF;
	}
	*cp = v;
	return need;
}

/* XML 1.0 cannot carry C0 controls (but tab and newline) nor U+FFFE/FFFF;
 * DEL and C1 controls have no business on a page; bidi embeddings,
 * overrides and isolates would let a model output reorder what the
 * approver reads (a key or a URL shown backwards). */
static bool
char_allowed(long cp)
{
	if (cp == '\t' || cp == '\n')
		return true;
	if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F))
		return false;
	if ((cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069))
		return false;
	return cp != 0xFFFE && cp != 0xFFFF;
}

/* A cleaned copy of s (malloc'd), or NULL when memory runs out. */
static char *
clean_text(const char *s)
{
	const unsigned char *in = (const unsigned char *)s;
	size_t len = strlen(s), n, o = 0;
	char *out;
	long cp;

	/* one byte becomes at most the three of U+FFFD */
	if (len > (SIZE_MAX - 1) / 3 || (out = malloc(len * 3 + 1)) == NULL)
		return NULL;
	while (*in != '\0') {
		if (*in == '\r') {
			/* as an XML parser would: \r\n and lone \r are \n */
			out[o++] = '\n';
			in += in[1] == '\n' ? 2 : 1;
			continue;
		}
		n = utf8_next(in, &cp);
		if (cp >= 0 && char_allowed(cp)) {
			memcpy(out + o, in, n);
			o += n;
		} else {
			memcpy(out + o, "\xEF\xBF\xBD", 3);
			o += 3;
		}
		in += n;
	}
	out[o] = '\0';
	return out;
}

static bool
attr_name_plain(const char *a)
{
	size_t i;

	if (a == NULL || a[0] < 'a' || a[0] > 'z')
		return false;
	for (i = 1; a[i] != '\0'; i++)
		if (i >= PAGE_ATTR_NAME_MAX ||
		    !((a[i] >= 'a' && a[i] <= 'z') || (a[i] >= '0' && a[i] <= '9') ||
		      a[i] == '-'))
			return false;
	return true;
}

/* Names a caller may never set: event handlers run script, style is
 * refused by the CSP anyway, srcdoc is a whole document, srcset a URL list
 * we do not parse, and the slot markers belong to the template. */
static bool
attr_name_allowed(const char *a)
{
	return attr_name_plain(a) && strncmp(a, "on", 2) != 0 &&
	       strncmp(a, "xmlns", 5) != 0 && strcmp(a, "style") != 0 &&
	       strcmp(a, "srcdoc") != 0 && strcmp(a, "srcset") != 0 &&
	       strcmp(a, PAGE_SLOT) != 0 && strcmp(a, PAGE_REPEAT) != 0;
}

/* Relative URLs and http, https and mailto only. A colon before any of
 * / ? # means a scheme, and whatever stands before it must be exactly one
 * of those: browsers drop tabs and newlines inside a scheme
 * ("java\tscript:") and leading spaces and controls, so anything that is
 * not an exact match is refused rather than second-guessed. */
static bool
url_allowed(const char *v)
{
	static const char *const schemes[] = { "http", "https", "mailto", NULL };
	const unsigned char *s = (const unsigned char *)v;
	char scheme[8];
	size_t n = 0;

	while (*s == ' ')
		s++;
	for (; *s != '\0'; s++) {
		if (*s == '/' || *s == '?' || *s == '#')
			return true;
		if (*s == ':') {
			if (n >= sizeof(scheme))
				return false; /* longer than any allowed scheme */
			scheme[n] = '\0';
			return in_list(schemes, scheme);
		}
		if (n < sizeof(scheme))
			scheme[n] = (char)((*s >= 'A' && *s <= 'Z') ? *s + 32 : *s);
		n++;
	}
	return true;
}

/* ---- filling ----------------------------------------------------------- */

/* Elements with slot in top's subtree. None there but some among the
 * removed parts is fine (filling what was removed does nothing); none at
 * all is a caller's typo and fails the page. */
static int
find_slot(struct page *p, xmlNodePtr top, const char *slot, struct nodes *out)
{
	if (slot == NULL) {
		fail(p, "slot name is NULL");
		return -1;
	}
	if (find_all(top, slot, out) != 0) {
		fail(p, "out of memory");
		return -1;
	}
	if (out->n == 0 && find_first(p->graveyard, slot) == NULL) {
		fail(p, "no element has data-slot \"%s\"", slot);
		return -1;
	}
	return 0;
}

static int
fill_text(struct page *p, xmlNodePtr top, const char *slot, const char *text)
{
	struct nodes found = { 0 };
	char *clean = NULL;
	xmlNodePtr t;
	size_t i;
	int rc = -1;

	if (text == NULL) {
		fail(p, "text for slot \"%s\" is NULL", slot ? slot : "(null)");
		goto out;
	}
	if (find_slot(p, top, slot, &found) != 0)
		goto out;
	for (i = 0; i < found.n; i++) {
		if (is_void(found.v[i])) {
			fail(p, "slot \"%s\" is on <%s>, which has no content", slot,
			     cname(found.v[i]->name));
			goto out;
		}
	}
	if ((clean = clean_text(text)) == NULL) {
		fail(p, "out of memory");
		goto out;
	}
	for (i = 0; i < found.n; i++) {
		while (found.v[i]->children != NULL)
			bury(p, found.v[i]->children);
		if ((t = xmlNewDocText(p->doc, (const xmlChar *)clean)) == NULL) {
			fail(p, "out of memory");
			goto out;
		}
		xmlAddChild(found.v[i], t);
	}
	rc = 0;
out:
	free(found.v);
	free(clean);
	return rc;
}

static int
fill_attr(struct page *p, xmlNodePtr top, const char *slot, const char *attr,
          const char *value)
{
	struct nodes found = { 0 };
	char *clean = NULL;
	size_t i;
	int rc = -1;

	if (!attr_name_allowed(attr)) {
		fail(p, "attribute \"%s\" refused for slot \"%s\"",
		     attr ? attr : "(null)", slot ? slot : "(null)");
		goto out;
	}
	if (value == NULL) {
		fail(p, "value of %s for slot \"%s\" is NULL", attr,
		     slot ? slot : "(null)");
		goto out;
	}
	if ((clean = clean_text(value)) == NULL) {
		fail(p, "out of memory");
		goto out;
	}
	/* data, not a bug: the caller may show it as text instead */
	if (in_list(url_attrs, attr) && !url_allowed(clean))
		goto out;
	if (find_slot(p, top, slot, &found) != 0)
		goto out;
	for (i = 0; i < found.n; i++) {
		if (xmlSetProp(found.v[i], (const xmlChar *)attr,
		               (const xmlChar *)clean) == NULL) {
			fail(p, "out of memory");
			goto out;
		}
	}
	rc = 0;
out:
	free(found.v);
	free(clean);
	return rc;
}

int
page_text(struct page *p, const char *slot, const char *text)
{
	return fill_text(p, page_root(p), slot, text);
}

int
page_attr(struct page *p, const char *slot, const char *attr,
          const char *value)
{
	return fill_attr(p, page_root(p), slot, attr, value);
}

int
page_scope_text(struct page_scope *s, const char *slot, const char *text)
{
	return fill_text(s->page, s->root, slot, text);
}

int
page_scope_attr(struct page_scope *s, const char *slot, const char *attr,
                const char *value)
{
	return fill_attr(s->page, s->root, slot, attr, value);
}

void
page_remove(struct page *p, const char *slot)
{
	struct nodes found = { 0 };
	size_t i;

	if (find_slot(p, page_root(p), slot, &found) != 0)
		goto out;
	/* document order: an ancestor goes first; a descendant of it is then
	 * moved out of the buried ancestor, which is just as harmless */
	for (i = 0; i < found.n; i++)
		bury(p, found.v[i]);
out:
	free(found.v);
}

static struct repeat *
repeat_find(struct page *p, const char *slot)
{
	struct repeat *r;

	for (r = p->repeats; r != NULL; r = r->next)
		if (strcmp(r->slot, slot) == 0)
			return r;
	return NULL;
}

/* The repeat record of slot, made on first use. The prototype is looked
 * for among removed parts too, so repeating inside a removed section
 * works and shows nothing. */
static struct repeat *
repeat_get(struct page *p, const char *slot)
{
	struct repeat *r;
	xmlNodePtr proto;

	if ((r = repeat_find(p, slot)) != NULL)
		return r;
	proto = find_first(page_root(p), slot);
	if (proto == NULL)
		proto = find_first(p->graveyard, slot);
	if (proto == NULL) {
		fail(p, "no element has data-slot \"%s\"", slot);
		return NULL;
	}
	if ((r = calloc(1, sizeof(*r))) == NULL ||
	    (r->slot = strdup(slot)) == NULL) {
		free(r);
		fail(p, "out of memory");
		return NULL;
	}
	r->proto = r->last = proto;
	r->next = p->repeats;
	p->repeats = r;
	return r;
}

struct page_scope *
page_repeat(struct page *p, const char *slot)
{
	struct page_scope *s = NULL;
	struct repeat *r;
	xmlNodePtr copy = NULL;
	xmlAttrPtr mark;

	if (slot == NULL) {
		fail(p, "slot name is NULL");
		goto out;
	}
	if ((r = repeat_get(p, slot)) == NULL)
		goto out;
	if (r->done) {
		fail(p, "page_repeat(\"%s\") after page_repeat_done", slot);
		goto out;
	}
	if ((s = calloc(1, sizeof(*s))) == NULL ||
	    (copy = xmlDocCopyNode(r->proto, p->doc, 1)) == NULL) {
		fail(p, "out of memory");
		goto out;
	}
	/* the copy is an item, not a prototype: it renders */
	if ((mark = find_prop(copy, PAGE_REPEAT)) != NULL)
		xmlRemoveProp(mark);
	if (xmlAddNextSibling(r->last, copy) == NULL) {
		fail(p, "out of memory");
		goto out;
	}
	r->last = copy;
	copy = NULL;
	s->page = p;
	s->root = r->last;
	s->next = p->scopes;
	p->scopes = s;
	return s;
out:
	xmlFreeNode(copy);
	free(s);
	return NULL;
}

void
page_repeat_done(struct page *p, const char *slot)
{
	struct repeat *r;

	if (slot == NULL) {
		fail(p, "slot name is NULL");
		return;
	}
	if ((r = repeat_get(p, slot)) == NULL)
		return;
	if (!r->done)
		bury(p, r->proto);
	r->done = true;
}

/* ---- rendering --------------------------------------------------------- */

static int
put(struct buf *out, const char *s)
{
	return buf_puts(out, s);
}

/* Escapes s for text content (attr false) or a double-quoted attribute
 * value. Tab and newline in attributes become references so an XML parser
 * does not normalise them to spaces. */
static int
put_escaped(struct buf *out, const char *s, bool attr)
{
	const char *run = s, *rep;

	for (; *s != '\0'; s++) {
		switch (*s) {
		case '&': rep = "&amp;"; break;
		case '<': rep = "&lt;"; break;
		case '>': rep = "&gt;"; break;
		case '"': rep = attr ? "&quot;" : NULL; break;
		case '\t': rep = attr ? "&#9;" : NULL; break;
		case '\n': rep = attr ? "&#10;" : NULL; break;
		case '\r': rep = "&#13;"; break;
		default: rep = NULL; break;
		}
		if (rep == NULL)
			continue;
		if (buf_append(out, run, (size_t)(s - run)) != 0 ||
		    put(out, rep) != 0)
			return -1;
		run = s + 1;
	}
	return buf_append(out, run, (size_t)(s - run));
}

static int
put_start_tag(struct buf *out, xmlNodePtr n, bool root)
{
	xmlAttrPtr a;
	xmlNodePtr t;

	if (put(out, "<") != 0 || put(out, cname(n->name)) != 0)
		return -1;
	if (root && put(out, " xmlns=\"" PAGE_XHTML_NS "\"") != 0)
		return -1;
	for (a = n->properties; a != NULL; a = a->next) {
		if (a->ns != NULL || strcmp(cname(a->name), PAGE_SLOT) == 0 ||
		    strcmp(cname(a->name), PAGE_REPEAT) == 0)
			continue;
		if (put(out, " ") != 0 || put(out, cname(a->name)) != 0 ||
		    put(out, "=\"") != 0)
			return -1;
		for (t = a->children; t != NULL; t = t->next)
			if (t->type == XML_TEXT_NODE && t->content != NULL &&
			    put_escaped(out, cname(t->content), true) != 0)
				return -1;
		if (put(out, "\"") != 0)
			return -1;
	}
	if (is_void(n))
		return put(out, " />");
	if (put(out, ">") != 0)
		return -1;
	/* an HTML parser drops one newline right after these start tags */
	if ((strcmp(cname(n->name), "pre") == 0 ||
	     strcmp(cname(n->name), "textarea") == 0) &&
	    n->children != NULL && n->children->type == XML_TEXT_NODE &&
	    n->children->content != NULL && n->children->content[0] == '\n')
		return put(out, "\n");
	return 0;
}

static int
put_end_tag(struct buf *out, xmlNodePtr n)
{
	if (put(out, "</") != 0 || put(out, cname(n->name)) != 0 ||
	    put(out, ">") != 0)
		return -1;
	return 0;
}

int
page_render(const struct page *p, struct buf *out)
{
	size_t mark = out->len;
	xmlNodePtr root, n;
	bool open;
	int rc = -1;

	if (p == NULL || p->failed || (root = page_root(p)) == NULL)
		goto out;
	if (put(out, "<!DOCTYPE html>\n") != 0)
		goto out;
	n = root;
	for (;;) {
		open = false;
		if (n->type == XML_ELEMENT_NODE && find_prop(n, PAGE_REPEAT) == NULL) {
			if (put_start_tag(out, n, n == root) != 0)
				goto out;
			if (!is_void(n)) {
				if (n->children != NULL)
					open = true;
				else if (put_end_tag(out, n) != 0)
					goto out;
			}
		} else if (n->type == XML_TEXT_NODE && n->content != NULL) {
			if (put_escaped(out, cname(n->content), false) != 0)
				goto out;
		}
		/* comments, PIs and unfilled prototypes are left out */
		if (open) {
			n = n->children;
			continue;
		}
		while (n != root && n->next == NULL) {
			n = n->parent;
			if (put_end_tag(out, n) != 0)
				goto out;
		}
		if (n == root)
			break;
		n = n->next;
	}
	if (put(out, "\n") != 0)
		goto out;
	rc = 0;
out:
	if (rc != 0 && out->data != NULL) {
		out->len = mark;
		out->data[mark] = '\0';
	}
	return rc;
}

const char *
page_error(const struct page *p)
{
	return p != NULL && p->failed ? p->error : NULL;
}

/* ---- pages ------------------------------------------------------------- */

struct page *
page_new(const struct page_set *set, const char *name)
{
	struct page *p = NULL;
	size_t i;

	if (set == NULL || name == NULL)
		return NULL;
	for (i = 0; i < PAGE_NTEMPLATES; i++)
		if (strcmp(page_templates[i].name, name) == 0)
			break;
	if (i == PAGE_NTEMPLATES || (p = calloc(1, sizeof(*p))) == NULL)
		return NULL;
	/* a private copy: the set's documents are only ever read, so threads
	 * share them without a lock */
	if ((p->doc = xmlCopyDoc(set->docs[i], 1)) == NULL ||
	    (p->graveyard = xmlNewDocNode(p->doc, NULL,
	                                  (const xmlChar *)"graveyard",
	                                  NULL)) == NULL) {
		page_free(p);
		return NULL;
	}
	return p;
}

void
page_free(struct page *p)
{
	struct page_scope *s;
	struct repeat *r;

	if (p == NULL)
		return;
	while ((s = p->scopes) != NULL) {
		p->scopes = s->next;
		free(s);
	}
	while ((r = p->repeats) != NULL) {
		p->repeats = r->next;
		free(r->slot);
		free(r);
	}
	xmlFreeNode(p->graveyard);
	xmlFreeDoc(p->doc);
	free(p);
}

/* ---- loading ----------------------------------------------------------- */

/* The whole file, read by us so the cap holds and libxml2's transparent
 * gzip decoding and URL handling never apply to a template path. */
static char *
read_file(const char *path, size_t *len, char *err, size_t errlen)
{
	struct stat st;
	char *data = NULL;
	size_t got = 0;
	ssize_t n;
	int fd, rc = -1;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)) < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		goto out;
	}
	if (st.st_size > OG_TEMPLATE_MAX) {
		snprintf(err, errlen, "%s: larger than %d bytes", path,
		         OG_TEMPLATE_MAX);
		goto out;
	}
	if ((data = malloc(OG_TEMPLATE_MAX + 1)) == NULL) {
		snprintf(err, errlen, "%s: out of memory", path);
		goto out;
	}
	/* read to the cap, not to st_size: the file may grow meanwhile */
	while (got <= OG_TEMPLATE_MAX &&
	       (n = read(fd, data + got, OG_TEMPLATE_MAX + 1 - got)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			snprintf(err, errlen, "%s: %s", path, strerror(errno));
			goto out;
		}
		got += (size_t)n;
	}
	if (got > OG_TEMPLATE_MAX) {
		snprintf(err, errlen, "%s: larger than %d bytes", path,
		         OG_TEMPLATE_MAX);
		goto out;
	}
	*len = got;
	rc = 0;
out:
	close(fd);
	if (rc != 0) {
		free(data);
		data = NULL;
	}
	return data;
}

static bool
xhtml_ns(xmlNsPtr ns)
{
	return ns != NULL && ns->prefix == NULL &&
	       strcmp(cname(ns->href), PAGE_XHTML_NS) == 0;
}

/* What makes a template safe to fill and render: XHTML elements only, no
 * script or embedding, no event handlers or inline style, no namespaced
 * attributes, no entity references, void elements empty, every URL
 * attribute passing the same test as a filled one. */
static int
template_check_node(xmlNodePtr n, xmlNodePtr root, const char *path,
                    char *err, size_t errlen)
{
	long line = xmlGetLineNo(n);
	xmlAttrPtr a;
	const char *v;

	switch (n->type) {
	case XML_ELEMENT_NODE:
		break;
	case XML_TEXT_NODE:
	case XML_COMMENT_NODE:
	case XML_PI_NODE:
		return 0;
	default:
		snprintf(err, errlen, "%s:%ld: entity reference or other "
		         "unsupported node", path, line);
		return -1;
	}
	if (!xhtml_ns(n->ns)) {
		snprintf(err, errlen, "%s:%ld: <%s> is not an unprefixed XHTML "
		         "element", path, line, cname(n->name));
		return -1;
	}
	if (n->nsDef != NULL && (n != root || n->nsDef->next != NULL ||
	                         !xhtml_ns(n->nsDef))) {
		snprintf(err, errlen, "%s:%ld: only the XHTML namespace may be "
		         "declared, on <html>", path, line);
		return -1;
	}
	if (in_list(banned_elements, cname(n->name))) {
		snprintf(err, errlen, "%s:%ld: <%s> is not allowed in a template",
		         path, line, cname(n->name));
		return -1;
	}
	if (is_void(n) && n->children != NULL) {
		snprintf(err, errlen, "%s:%ld: <%s> must be empty", path, line,
		         cname(n->name));
		return -1;
	}
	for (a = n->properties; a != NULL; a = a->next) {
		const char *name = cname(a->name);

		if (a->ns != NULL || strncasecmp(name, "on", 2) == 0 ||
		    strcasecmp(name, "style") == 0) {
			snprintf(err, errlen, "%s:%ld: attribute %s is not allowed "
			         "in a template", path, line, name);
			return -1;
		}
		if ((v = prop_text(a)) == NULL) {
			snprintf(err, errlen, "%s:%ld: attribute %s holds an entity "
			         "reference", path, line, name);
			return -1;
		}
		if (in_list(url_attrs, name) && !url_allowed(v)) {
			snprintf(err, errlen, "%s:%ld: %s=\"%s\" has a refused URL "
			         "scheme", path, line, name, v);
			return -1;
		}
	}
	return 0;
}

static int
template_check(xmlDocPtr doc, const struct page_template *t, const char *path,
               char *err, size_t errlen)
{
	xmlNodePtr root = xmlDocGetRootElement(doc), n;
	xmlDtdPtr dtd;
	size_t i;

	/* <!DOCTYPE html> is fine (and dropped: render writes its own); any
	 * declaration inside it is not, entities least of all */
	if ((dtd = doc->intSubset) != NULL) {
		if (dtd->children != NULL) {
			snprintf(err, errlen, "%s: the DOCTYPE may not declare "
			         "anything", path);
			return -1;
		}
		xmlUnlinkNode((xmlNodePtr)dtd);
		xmlFreeDtd(dtd);
	}
	if (root == NULL || strcmp(cname(root->name), "html") != 0 ||
	    !xhtml_ns(root->ns)) {
		snprintf(err, errlen, "%s: the root must be <html xmlns=\""
		         PAGE_XHTML_NS "\">", path);
		return -1;
	}
	for (n = doc->children; n != NULL; n = n->next) {
		if (n != root && n->type != XML_COMMENT_NODE &&
		    n->type != XML_PI_NODE) {
			snprintf(err, errlen, "%s: unexpected node outside <html>",
			         path);
			return -1;
		}
	}
	for (n = root; n != NULL; n = walk_next(n, root, true))
		if (template_check_node(n, root, path, err, errlen) != 0)
			return -1;
	for (i = 0; t->slots[i] != NULL; i++) {
		if (find_first(root, t->slots[i]) == NULL) {
			snprintf(err, errlen, "%s: no element has data-slot \"%s\"",
			         path, t->slots[i]);
			return -1;
		}
	}
	return 0;
}

static xmlDocPtr
template_load(const char *path, const struct page_template *t, char *err,
              size_t errlen)
{
	xmlParserCtxtPtr ctxt = NULL;
	xmlDocPtr doc = NULL;
	xmlErrorPtr e;
	char *data = NULL;
	size_t len = 0, mlen;
	int rc = -1;

	if ((data = read_file(path, &len, err, errlen)) == NULL)
		goto out;
	if ((ctxt = xmlNewParserCtxt()) == NULL) {
		snprintf(err, errlen, "%s: out of memory", path);
		goto out;
	}
	/* No NOENT (no entity expansion), no DTDLOAD/DTDATTR/XINCLUDE, no
	 * network; no recovery, so anything not well-formed is refused. NODICT
	 * keeps names in the nodes, so copies share nothing with the set. */
	doc = xmlCtxtReadMemory(ctxt, data, (int)len, path, NULL,
	                        XML_PARSE_NONET | XML_PARSE_NODICT |
	                        XML_PARSE_NOCDATA | XML_PARSE_NOERROR |
	                        XML_PARSE_NOWARNING);
	if (doc == NULL) {
		e = xmlCtxtGetLastError(ctxt);
		snprintf(err, errlen, "%s:%d: %s", path, e != NULL ? e->line : 0,
		         e != NULL && e->message != NULL ? e->message :
		         "not well-formed XML");
		mlen = strlen(err);
		if (mlen > 0 && err[mlen - 1] == '\n')
			err[mlen - 1] = '\0';
		goto out;
	}
	if (template_check(doc, t, path, err, errlen) != 0)
		goto out;
	rc = 0;
out:
	if (rc != 0) {
		xmlFreeDoc(doc);
		doc = NULL;
	}
	xmlFreeParserCtxt(ctxt);
	free(data);
	return doc;
}

struct page_set *
page_set_load(const char *dir, char *err, size_t errlen)
{
	struct page_set *set = NULL;
	char *path = NULL;
	size_t i, len;
	int rc = -1;

	if (errlen > 0)
		err[0] = '\0';
	xmlInitParser();
	if ((set = calloc(1, sizeof(*set))) == NULL) {
		snprintf(err, errlen, "%s: out of memory", dir);
		goto out;
	}
	for (i = 0; i < PAGE_NTEMPLATES; i++) {
		len = strlen(dir) + strlen(page_templates[i].name) + sizeof("/.xhtml");
		if ((path = malloc(len)) == NULL) {
			snprintf(err, errlen, "%s: out of memory", dir);
			goto out;
		}
		snprintf(path, len, "%s/%s.xhtml", dir, page_templates[i].name);
		set->docs[i] = template_load(path, &page_templates[i], err, errlen);
		free(path);
		path = NULL;
		if (set->docs[i] == NULL)
			goto out;
	}
	rc = 0;
out:
	if (rc != 0) {
		page_set_free(set);
		set = NULL;
	}
	return set;
}

void
page_set_free(struct page_set *set)
{
	size_t i;

	if (set == NULL)
		return;
	for (i = 0; i < PAGE_NTEMPLATES; i++)
		xmlFreeDoc(set->docs[i]);
	free(set);
}

/*
 * page.c — templates/ filled and rendered as XHTML that HTML parsers read
 * the same way.
 *
 * Templates are parsed and checked with libxml2 once, at load, and then
 * compiled into a small read-only tree of our own (struct tmpl): one node
 * per element or text in document order, each element's start tag with its
 * template attributes already escaped, each text already escaped, and an
 * index from slot name to the elements carrying it. A page is a private
 * copy of that tree's links (one memcpy of an array of small nodes that
 * point at the shared, never-written strings), so page_new allocates once
 * and a fill looks its slot up in the index instead of walking the page.
 *
 * Callers only ever set text nodes and attribute values, and every value
 * is cleaned and escaped when it is set, so data can never become markup.
 * Nodes are never freed while a page is being filled: what is replaced or
 * removed is only unlinked (the "graveyard": every node whose parent chain
 * no longer reaches the root), so a scope whose item was removed later
 * still points at live memory; everything a page allocates comes from its
 * own arena and is freed with the page.
 *
 * Rendering is a small serializer of our own rather than xmlsave: plain
 * XML output writes an empty <textarea/>, which an HTML parser reads as an
 * open tag that swallows the rest of the page, and xmlsave's XHTML mode
 * adds a second charset <meta> and xml:lang. Ours writes void elements as
 * <br />, everything else with an end tag, escapes every text and attribute
 * value, and needs no namespace handling because load-time checks allow
 * nothing but unprefixed XHTML elements and attributes without namespace.
 * Comments and processing instructions are dropped at load.
 *
 * Threads: a page_set is never written after page_set_load, so threads
 * share it without a lock. A page points into its set's strings, so it must
 * be freed before the set (api.c renders and frees pages within a request,
 * under the read lock that keeps the set from being swapped out).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <libxml/parser.h>
#include <libxml/tree.h>

#include "buf.h"
#include "caps.h"
#include "page.h"
#include "utf8.h"

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

#define NONE           (-1)  /* no node */
#define ARENA_CHUNK    8192  /* arena chunks beyond the first */
#define ARENA_SLACK    8192  /* arena space allocated with a page */
#define FOUND_INLINE   16

/* ---- arenas ------------------------------------------------------------ */

/* Bump allocation, freed all at once: a page's strings, attribute lists
 * and grown arrays, and a template's compiled form. */
struct chunk {
	struct chunk *next;
	max_align_t data[];
};

struct arena {
	char *cur, *end;       /* free space of the current chunk */
	struct chunk *chunks;  /* malloc'd chunks */
};

#define ARENA_ALIGN(n) (((n) + 15) & ~(size_t)15)

static void *
arena_alloc(struct arena *a, size_t n)
{
	struct chunk *c;
	size_t size;
	char *p;

	if (n > SIZE_MAX / 2)
		return NULL;
	n = ARENA_ALIGN(n);
	if (n > (size_t)(a->end - a->cur)) {
		size = n > ARENA_CHUNK ? n : ARENA_CHUNK;
		if ((c = malloc(sizeof(*c) + size)) == NULL)
			return NULL;
		c->next = a->chunks;
		a->chunks = c;
		a->cur = (char *)c->data;
		a->end = a->cur + size;
	}
	p = a->cur;
	a->cur += n;
	return p;
}

/* Shrinks the latest allocation p from old to new bytes. */
static void
arena_trim(struct arena *a, void *p, size_t old, size_t new)
{
	if ((char *)p + ARENA_ALIGN(old) == a->cur)
		a->cur = (char *)p + ARENA_ALIGN(new);
}

static void
arena_free(struct arena *a)
{
	struct chunk *c;

	while ((c = a->chunks) != NULL) {
		a->chunks = c->next;
		free(c);
	}
	a->cur = a->end = NULL;
}

/* A copy of array v of n elements of size sz with room for want (> n). */
static void *
arena_grow(struct arena *a, const void *v, size_t n, size_t want, size_t sz)
{
	void *nv;

	if (want > SIZE_MAX / 4 / sz || (nv = arena_alloc(a, want * sz)) == NULL)
		return NULL;
	if (n > 0)
		memcpy(nv, v, n * sz);
	return nv;
}

static char *
arena_strndup(struct arena *a, const char *s, size_t n)
{
	char *d = arena_alloc(a, n + 1);

	if (d != NULL) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

/* ---- the compiled tree ------------------------------------------------- */

enum {
	N_ELEMENT = 1 << 0,
	N_TEXT    = 1 << 1,
	N_VOID    = 1 << 2,  /* an HTML void element: <x />, no content */
	N_PRE     = 1 << 3,  /* pre or textarea: parsers drop a first \n */
	N_PROTO   = 1 << 4,  /* has data-repeat: never rendered itself */
	N_NL      = 1 << 5,  /* a text starting with \n */
};

struct attr {
	const char *name, *val;  /* val escaped for a "-quoted value */
	size_t namelen, vallen;
};

struct attrs {
	size_t n;
	struct attr v[];
};

/* What a page never changes about an element of its template. */
struct tnode {
	const char *open;         /* "<name attrs" (xmlns on the root), escaped */
	const char *close;        /* "</name>" */
	const char *name;
	size_t openlen, closelen, namelen;
	const struct attrs *attrs; /* as in the template, without data-* marks */
	const uint16_t *slots;    /* slot ids, each once */
	size_t nslots;
};

/* A node of a page (and of a template's initial image of one). Links are
 * indices into the page's node array, which may move when it grows. */
struct pnode {
	int32_t parent, first, last, prev, next;
	int32_t t;                 /* struct tnode index; NONE for text */
	uint32_t flags;
	size_t textlen;
	const char *text;          /* text: the escaped content */
	const struct attrs *attrs; /* element: NULL while as in the template */
};

struct tmpl {
	struct tnode *tn;          /* one per element; NULL slots for texts */
	struct pnode *image;       /* a fresh page's nodes; [0] is <html> */
	size_t n;
	const char **slot_names;
	size_t nslots;
	const int32_t *slot_nodes; /* of slot i: [slot_first[i], slot_first[i+1]) */
	const size_t *slot_first;
	struct arena arena;
};

struct page_set {
	struct tmpl t[PAGE_NTEMPLATES];
};

struct repeat {
	int sid;
	int32_t proto;
	int32_t last;          /* the prototype until the first copy */
	bool done;             /* prototype removed: no more copies */
	struct repeat *next;
};

struct page_scope {
	struct page *page;
	int32_t root;
};

/* An element made by page_repeat that carries a slot. */
struct extra {
	int sid;
	int32_t node;
};

struct page {
	const struct tmpl *t;
	struct pnode *nodes;
	size_t n, alloc;
	struct extra *extras;
	size_t nextras, aextras;
	int32_t *found;        /* scratch for find_slot */
	size_t afound;
	struct repeat *repeats;
	bool root_gone;        /* <html> itself was removed: nothing to show */
	bool failed;
	char error[PAGE_ERROR_MAX];
	struct arena arena;
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

/* ---- cleaning values --------------------------------------------------- */

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

/* Writes the cleaned s to out, which has room for 3 * strlen(s) + 1 bytes
 * (one byte becomes at most the three of U+FFFD); returns its length. */
static size_t
clean_into(char *out, const char *s)
{
	const unsigned char *in = (const unsigned char *)s, *end = in + strlen(s);
	size_t n, o = 0;
	long cp;

	while (in < end) {
		if (*in == '\r') {
			/* as an XML parser would: \r\n and lone \r are \n */
			out[o++] = '\n';
			in += in[1] == '\n' ? 2 : 1;
			continue;
		}
		if (*in >= 0x20 && *in < 0x7F) { /* printable ASCII: as it is */
			out[o++] = (char)*in++;
			continue;
		}
		n = utf8_decode(in, (size_t)(end - in), &cp);
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
	return o;
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

static bool
is_void(xmlNodePtr n)
{
	return in_list(void_elements, cname(n->name));
}

/* ---- escaping ---------------------------------------------------------- */

/* What s becomes in text content (attr false) or a double-quoted
 * attribute value, or NULL when it stays as it is. Tab and newline in
 * attributes become references so an XML parser does not normalise them
 * to spaces. */
static const char *
escape_of(char c, bool attr)
{
	switch (c) {
	case '&': return "&amp;";
	case '<': return "&lt;";
	case '>': return "&gt;";
	case '"': return attr ? "&quot;" : NULL;
	case '\t': return attr ? "&#9;" : NULL;
	case '\n': return attr ? "&#10;" : NULL;
	case '\r': return "&#13;";
	default: return NULL;
	}
}

static size_t
escaped_len(const char *s, size_t len, bool attr)
{
	const char *rep;
	size_t i, n = len;

	for (i = 0; i < len; i++) {
		/* nothing at or above '?' (and no byte of UTF-8) is escaped */
		if ((unsigned char)s[i] >= '?')
			continue;
		if ((rep = escape_of(s[i], attr)) != NULL)
			n += strlen(rep) - 1;
	}
	return n;
}

/* out has room for escaped_len(s, len, attr) + 1 bytes. */
static void
escape_into(char *out, const char *s, size_t len, bool attr)
{
	const char *rep;
	size_t i, o = 0, r;

	for (i = 0; i < len; i++) {
		if ((unsigned char)s[i] >= '?' ||
		    (rep = escape_of(s[i], attr)) == NULL) {
			out[o++] = s[i];
			continue;
		}
		r = strlen(rep);
		memcpy(out + o, rep, r);
		o += r;
	}
	out[o] = '\0';
}

/* s escaped, in arena a (s itself when nothing needs escaping and s is
 * already there: pass in_arena). NULL when memory runs out. */
static const char *
escape_to(struct arena *a, const char *s, size_t len, bool attr,
          bool in_arena, size_t *outlen)
{
	size_t n = escaped_len(s, len, attr);
	char *e;

	*outlen = n;
	if (n == len && in_arena)
		return s;
	if ((e = arena_alloc(a, n + 1)) == NULL)
		return NULL;
	escape_into(e, s, len, attr);
	return e;
}

/* ---- the page tree ----------------------------------------------------- */

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

static int
slot_id(const struct tmpl *t, const char *slot)
{
	size_t i;

	for (i = 0; i < t->nslots; i++)
		if (t->slot_names[i][0] == slot[0] &&
		    strcmp(t->slot_names[i], slot) == 0)
			return (int)i;
	return -1;
}

static bool
node_has_slot(const struct page *p, int32_t n, int sid)
{
	const struct tnode *tn;
	size_t i;

	if (!(p->nodes[n].flags & N_ELEMENT))
		return false;
	tn = &p->t->tn[p->nodes[n].t];
	for (i = 0; i < tn->nslots; i++)
		if (tn->slots[i] == sid)
			return true;
	return false;
}

/* Whether n is top or inside it. */
static bool
in_subtree(const struct page *p, int32_t n, int32_t top)
{
	for (; n != NONE; n = p->nodes[n].parent)
		if (n == top)
			return true;
	return false;
}

/* Shown, unless a prototype: neither removed nor inside something
 * removed or replaced. */
static bool
is_live(const struct page *p, int32_t n)
{
	return !p->root_gone && in_subtree(p, n, 0);
}

/* The top of the page for page-level fills: NONE once <html> is gone. */
static int32_t
page_top(const struct page *p)
{
	return p->root_gone ? NONE : 0;
}

/* A new, unlinked node; NONE when memory runs out. p->nodes may move. */
static int32_t
node_new(struct page *p)
{
	struct pnode *v;
	size_t alloc;

	if (p->n == p->alloc) {
		alloc = p->alloc * 2;
		if (alloc > INT32_MAX ||
		    (v = arena_grow(&p->arena, p->nodes, p->n, alloc,
		                    sizeof(*v))) == NULL)
			return NONE;
		p->nodes = v;
		p->alloc = alloc;
	}
	memset(&p->nodes[p->n], 0, sizeof(p->nodes[0]));
	p->nodes[p->n].parent = p->nodes[p->n].first = p->nodes[p->n].last =
		p->nodes[p->n].prev = p->nodes[p->n].next = p->nodes[p->n].t = NONE;
	return (int32_t)p->n++;
}

/* Unlinks n from its parent and siblings: it and what it holds are in the
 * graveyard from now on (the same nodes, still valid). */
static void
unlink_node(struct page *p, int32_t n)
{
	struct pnode *x = &p->nodes[n];

	if (n == 0)
		p->root_gone = true;
	if (x->prev != NONE)
		p->nodes[x->prev].next = x->next;
	else if (x->parent != NONE)
		p->nodes[x->parent].first = x->next;
	if (x->next != NONE)
		p->nodes[x->next].prev = x->prev;
	else if (x->parent != NONE)
		p->nodes[x->parent].last = x->prev;
	x->parent = x->prev = x->next = NONE;
}

/* Links unlinked n in right after `after` (as its parent's child, if it
 * has one). */
static void
link_after(struct page *p, int32_t after, int32_t n)
{
	struct pnode *a = &p->nodes[after], *x = &p->nodes[n];

	x->parent = a->parent;
	x->prev = after;
	x->next = a->next;
	if (a->next != NONE)
		p->nodes[a->next].prev = n;
	else if (a->parent != NONE)
		p->nodes[a->parent].last = n;
	a->next = n;
}

static int
found_add(struct page *p, size_t *nfound, int32_t n)
{
	int32_t *v;
	size_t alloc;

	if (*nfound == p->afound) {
		alloc = p->afound * 2;
		if ((v = arena_grow(&p->arena, p->found, *nfound, alloc,
		                    sizeof(*v))) == NULL)
			return -1;
		p->found = v;
		p->afound = alloc;
	}
	p->found[(*nfound)++] = n;
	return 0;
}

/* Every element with slot sid in top's subtree (top included), in
 * document order, to p->found. */
static int
scope_find(struct page *p, int32_t top, int sid, size_t *nfound)
{
	int32_t n = top;

	for (;;) {
		if (node_has_slot(p, n, sid) && found_add(p, nfound, n) != 0)
			return -1;
		if (p->nodes[n].first != NONE) {
			n = p->nodes[n].first;
			continue;
		}
		while (n != top && p->nodes[n].next == NONE)
			n = p->nodes[n].parent;
		if (n == top)
			return 0;
		n = p->nodes[n].next;
	}
}

/* Every element with slot in top's subtree (top included) goes to
 * p->found. None there but some among the removed parts is fine (filling
 * what was removed does nothing); none at all is a caller's typo and
 * fails the page. */
static int
find_slot(struct page *p, int32_t top, const char *slot, size_t *nfound)
{
	const struct tmpl *t = p->t;
	bool removed = false;
	int32_t n;
	size_t i;
	int sid;

	*nfound = 0;
	if (slot == NULL) {
		fail(p, "slot name is NULL");
		return -1;
	}
	if ((sid = slot_id(t, slot)) < 0) {
		fail(p, "no element has data-slot \"%s\"", slot);
		return -1;
	}
	/* A scope (one repeated item) is small and the copies of it are many:
	 * walk the item, not every copy made so far, or filling n items costs
	 * n^2. */
	if (top != NONE && top != 0) {
		if (scope_find(p, top, sid, nfound) != 0) {
			fail(p, "out of memory");
			return -1;
		}
		if (*nfound > 0)
			return 0;
	}
	for (i = t->slot_first[sid]; i < t->slot_first[sid + 1] + p->nextras;
	     i++) {
		if (i < t->slot_first[sid + 1]) {
			n = t->slot_nodes[i];
		} else {
			if (p->extras[i - t->slot_first[sid + 1]].sid != sid)
				continue;
			n = p->extras[i - t->slot_first[sid + 1]].node;
		}
		if (top != NONE && in_subtree(p, n, top)) {
			if (found_add(p, nfound, n) != 0) {
				fail(p, "out of memory");
				return -1;
			}
		} else if (!is_live(p, n)) {
			removed = true;
		}
	}
	if (*nfound == 0 && !removed) {
		fail(p, "no element has data-slot \"%s\"", slot);
		return -1;
	}
	return 0;
}

/* value cleaned and escaped into the page's arena. *refused (when
 * url_check) if the cleaned value is a refused URL. */
static const char *
page_value(struct page *p, const char *value, bool attr, bool url_check,
           size_t *outlen, bool *first_nl, bool *refused)
{
	size_t len = strlen(value), clen;
	char *clean;
	const char *e;

	*refused = false;
	if (len > (SIZE_MAX - 1) / 3 - 16 ||
	    (clean = arena_alloc(&p->arena, len * 3 + 1)) == NULL)
		return NULL;
	clen = clean_into(clean, value);
	arena_trim(&p->arena, clean, len * 3 + 1, clen + 1);
	if (url_check && !url_allowed(clean)) {
		arena_trim(&p->arena, clean, clen + 1, 0);
		*refused = true;
		return NULL;
	}
	*first_nl = clean[0] == '\n';
	e = escape_to(&p->arena, clean, clen, attr, true, outlen);
	return e;
}

static int
fill_text(struct page *p, int32_t top, const char *slot, const char *text)
{
	const char *esc;
	size_t i, nfound, elen;
	int32_t t, c, f;
	bool nl, refused;

	if (text == NULL) {
		fail(p, "text for slot \"%s\" is NULL", slot ? slot : "(null)");
		return -1;
	}
	if (find_slot(p, top, slot, &nfound) != 0)
		return -1;
	for (i = 0; i < nfound; i++) {
		if (p->nodes[p->found[i]].flags & N_VOID) {
			fail(p, "slot \"%s\" is on <%s>, which has no content", slot,
			     p->t->tn[p->nodes[p->found[i]].t].name);
			return -1;
		}
	}
	if ((esc = page_value(p, text, false, false, &elen, &nl,
	                      &refused)) == NULL) {
		fail(p, "out of memory");
		return -1;
	}
	for (i = 0; i < nfound; i++) {
		f = p->found[i];
		/* the old children go to the graveyard, still linked to each
		 * other */
		for (c = p->nodes[f].first; c != NONE; c = p->nodes[c].next)
			p->nodes[c].parent = NONE;
		p->nodes[f].first = p->nodes[f].last = NONE;
		if ((t = node_new(p)) == NONE) {
			fail(p, "out of memory");
			return -1;
		}
		p->nodes[t].flags = N_TEXT | (nl ? N_NL : 0);
		p->nodes[t].text = esc;
		p->nodes[t].textlen = elen;
		p->nodes[t].parent = f;
		p->nodes[f].first = p->nodes[f].last = t;
	}
	return 0;
}

/* attrs with name set to val (replaced where it is, else added last, as
 * xmlSetProp does); NULL when memory runs out. */
static const struct attrs *
attrs_set(struct page *p, const struct attrs *old, const char *name,
          size_t namelen, const char *val, size_t vallen)
{
	struct attrs *a;
	size_t i, n = old->n;

	for (i = 0; i < old->n; i++)
		if (old->v[i].namelen == namelen &&
		    memcmp(old->v[i].name, name, namelen) == 0)
			break;
	if (i == old->n)
		n++;
	if ((a = arena_alloc(&p->arena, sizeof(*a) + n * sizeof(a->v[0]))) == NULL)
		return NULL;
	a->n = n;
	memcpy(a->v, old->v, old->n * sizeof(a->v[0]));
	a->v[i].name = name;
	a->v[i].namelen = namelen;
	a->v[i].val = val;
	a->v[i].vallen = vallen;
	return a;
}

static int
fill_attr(struct page *p, int32_t top, const char *slot, const char *attr,
          const char *value)
{
	const struct attrs *cur, *set;
	const char *esc, *name;
	size_t i, nfound, elen, namelen;
	bool nl, refused;
	struct pnode *x;

	if (!attr_name_allowed(attr)) {
		fail(p, "attribute \"%s\" refused for slot \"%s\"",
		     attr ? attr : "(null)", slot ? slot : "(null)");
		return -1;
	}
	if (value == NULL) {
		fail(p, "value of %s for slot \"%s\" is NULL", attr,
		     slot ? slot : "(null)");
		return -1;
	}
	esc = page_value(p, value, true, in_list(url_attrs, attr), &elen, &nl,
	                 &refused);
	/* a refused URL is data, not a bug: the caller may show it as text */
	if (refused)
		return -1;
	namelen = strlen(attr);
	if (esc == NULL ||
	    (name = arena_strndup(&p->arena, attr, namelen)) == NULL) {
		fail(p, "out of memory");
		return -1;
	}
	if (find_slot(p, top, slot, &nfound) != 0)
		return -1;
	for (i = 0; i < nfound; i++) {
		x = &p->nodes[p->found[i]];
		cur = x->attrs != NULL ? x->attrs : p->t->tn[x->t].attrs;
		if ((set = attrs_set(p, cur, name, namelen, esc, elen)) == NULL) {
			fail(p, "out of memory");
			return -1;
		}
		x->attrs = set;
	}
	return 0;
}

int
page_text(struct page *p, const char *slot, const char *text)
{
	return fill_text(p, page_top(p), slot, text);
}

int
page_attr(struct page *p, const char *slot, const char *attr,
          const char *value)
{
	return fill_attr(p, page_top(p), slot, attr, value);
}

int
page_scope_text(struct page_scope *s, const char *slot, const char *text)
{
	if (s == NULL)
		return -1;
	return fill_text(s->page, s->root, slot, text);
}

int
page_scope_attr(struct page_scope *s, const char *slot, const char *attr,
                const char *value)
{
	if (s == NULL)
		return -1;
	return fill_attr(s->page, s->root, slot, attr, value);
}

void
page_remove(struct page *p, const char *slot)
{
	size_t i, nfound;

	if (find_slot(p, page_top(p), slot, &nfound) != 0)
		return;
	/* an ancestor and a descendant both found: the descendant is then
	 * unlinked inside the removed ancestor, which is just as harmless */
	for (i = 0; i < nfound; i++)
		unlink_node(p, p->found[i]);
}

/* The first element with sid in document order among what is shown, or
 * NONE. */
static int32_t
first_live(const struct page *p, int sid)
{
	int32_t n = 0;

	if (p->root_gone)
		return NONE;
	for (;;) {
		if (node_has_slot(p, n, sid))
			return n;
		if (p->nodes[n].first != NONE) {
			n = p->nodes[n].first;
			continue;
		}
		while (n != 0 && p->nodes[n].next == NONE)
			n = p->nodes[n].parent;
		if (n == 0)
			return NONE;
		n = p->nodes[n].next;
	}
}

static struct repeat *
repeat_find(struct page *p, int sid)
{
	struct repeat *r;

	for (r = p->repeats; r != NULL; r = r->next)
		if (r->sid == sid)
			return r;
	return NULL;
}

/* The repeat record of slot, made on first use. The prototype is the
 * first element with slot that is shown, else one among removed parts,
 * so repeating inside a removed section works and shows nothing. */
static struct repeat *
repeat_get(struct page *p, const char *slot)
{
	const struct tmpl *t = p->t;
	struct repeat *r;
	int32_t proto = NONE, dead = NONE, n;
	size_t i, live = 0;
	int sid;

	if ((sid = slot_id(t, slot)) >= 0 && (r = repeat_find(p, sid)) != NULL)
		return r;
	if (sid >= 0) {
		for (i = t->slot_first[sid]; i < t->slot_first[sid + 1] + p->nextras;
		     i++) {
			if (i < t->slot_first[sid + 1]) {
				n = t->slot_nodes[i];
			} else {
				if (p->extras[i - t->slot_first[sid + 1]].sid != sid)
					continue;
				n = p->extras[i - t->slot_first[sid + 1]].node;
			}
			if (is_live(p, n)) {
				live++;
				proto = n;
			} else if (dead == NONE) {
				dead = n;
			}
		}
		/* several shown (a prototype inside copies of another): the
		 * first in document order, as a walk of the page finds it */
		if (live > 1)
			proto = first_live(p, sid);
		if (proto == NONE)
			proto = dead;
	}
	if (proto == NONE) {
		fail(p, "no element has data-slot \"%s\"", slot);
		return NULL;
	}
	if ((r = arena_alloc(&p->arena, sizeof(*r))) == NULL) {
		fail(p, "out of memory");
		return NULL;
	}
	r->sid = sid;
	r->proto = r->last = proto;
	r->done = false;
	r->next = p->repeats;
	p->repeats = r;
	return r;
}

static int
extra_add(struct page *p, int32_t n)
{
	const struct tnode *tn = &p->t->tn[p->nodes[n].t];
	struct extra *v;
	size_t i, alloc;

	for (i = 0; i < tn->nslots; i++) {
		if (p->nextras == p->aextras) {
			alloc = p->aextras ? p->aextras * 2 : 16;
			if ((v = arena_grow(&p->arena, p->extras, p->nextras, alloc,
			                    sizeof(*v))) == NULL)
				return -1;
			p->extras = v;
			p->aextras = alloc;
		}
		p->extras[p->nextras].sid = tn->slots[i];
		p->extras[p->nextras].node = n;
		p->nextras++;
	}
	return 0;
}

/* A deep copy of src as it is now, unlinked; NONE when memory runs out. */
static int32_t
copy_subtree(struct page *p, int32_t src)
{
	int32_t s = src, d, root = NONE, parent = NONE;

	for (;;) {
		if ((d = node_new(p)) == NONE)
			return NONE;
		p->nodes[d].t = p->nodes[s].t;
		p->nodes[d].flags = p->nodes[s].flags;
		p->nodes[d].text = p->nodes[s].text;
		p->nodes[d].textlen = p->nodes[s].textlen;
		p->nodes[d].attrs = p->nodes[s].attrs; /* never written: shared */
		if ((p->nodes[d].flags & N_ELEMENT) && extra_add(p, d) != 0)
			return NONE;
		if (root == NONE) {
			root = d;
		} else {
			p->nodes[d].parent = parent;
			p->nodes[d].prev = p->nodes[parent].last;
			if (p->nodes[parent].last != NONE)
				p->nodes[p->nodes[parent].last].next = d;
			else
				p->nodes[parent].first = d;
			p->nodes[parent].last = d;
		}
		if (p->nodes[s].first != NONE) {
			s = p->nodes[s].first;
			parent = d;
			continue;
		}
		while (s != src && p->nodes[s].next == NONE) {
			s = p->nodes[s].parent;
			d = parent;
			parent = p->nodes[d].parent;
		}
		if (s == src)
			return root;
		s = p->nodes[s].next;
	}
}

struct page_scope *
page_repeat(struct page *p, const char *slot)
{
	struct page_scope *s;
	struct repeat *r;
	int32_t copy;

	if (slot == NULL) {
		fail(p, "slot name is NULL");
		return NULL;
	}
	if ((r = repeat_get(p, slot)) == NULL)
		return NULL;
	if (r->done) {
		fail(p, "page_repeat(\"%s\") after page_repeat_done", slot);
		return NULL;
	}
	if ((s = arena_alloc(&p->arena, sizeof(*s))) == NULL ||
	    (copy = copy_subtree(p, r->proto)) == NONE) {
		fail(p, "out of memory");
		return NULL;
	}
	/* the copy is an item, not a prototype: it renders */
	p->nodes[copy].flags &= ~(uint32_t)N_PROTO;
	link_after(p, r->last, copy);
	r->last = copy;
	s->page = p;
	s->root = copy;
	return s;
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
		unlink_node(p, r->proto);
	r->done = true;
}

/* ---- rendering --------------------------------------------------------- */

static int
put(struct buf *out, const char *s, size_t len)
{
	return buf_append(out, s, len);
}

#define PUT_LIT(out, lit) put(out, lit, sizeof(lit) - 1)

static int
put_start_tag(const struct page *p, struct buf *out, int32_t n)
{
	const struct pnode *x = &p->nodes[n];
	const struct tnode *tn = &p->t->tn[x->t];
	const struct pnode *c;
	size_t i;

	if (x->attrs == NULL) {
		if (put(out, tn->open, tn->openlen) != 0)
			return -1;
	} else {
		if (PUT_LIT(out, "<") != 0 || put(out, tn->name, tn->namelen) != 0)
			return -1;
		if (n == 0 && PUT_LIT(out, " xmlns=\"" PAGE_XHTML_NS "\"") != 0)
			return -1;
		for (i = 0; i < x->attrs->n; i++) {
			const struct attr *a = &x->attrs->v[i];

			if (PUT_LIT(out, " ") != 0 ||
			    put(out, a->name, a->namelen) != 0 ||
			    PUT_LIT(out, "=\"") != 0 ||
			    put(out, a->val, a->vallen) != 0 || PUT_LIT(out, "\"") != 0)
				return -1;
		}
	}
	if (x->flags & N_VOID)
		return PUT_LIT(out, " />");
	if (PUT_LIT(out, ">") != 0)
		return -1;
	/* an HTML parser drops one newline right after these start tags */
	if ((x->flags & N_PRE) && x->first != NONE) {
		c = &p->nodes[x->first];
		if ((c->flags & N_TEXT) && (c->flags & N_NL))
			return PUT_LIT(out, "\n");
	}
	return 0;
}

static int
put_end_tag(const struct page *p, struct buf *out, int32_t n)
{
	const struct tnode *tn = &p->t->tn[p->nodes[n].t];

	return put(out, tn->close, tn->closelen);
}

int
page_render(const struct page *p, struct buf *out)
{
	size_t mark = out->len;
	const struct pnode *x;
	int32_t n;
	bool open;
	int rc = -1;

	if (p == NULL || p->failed || p->root_gone)
		goto out;
	if (PUT_LIT(out, "<!DOCTYPE html>\n") != 0)
		goto out;
	n = 0;
	for (;;) {
		x = &p->nodes[n];
		open = false;
		if ((x->flags & N_ELEMENT) && !(x->flags & N_PROTO)) {
			if (put_start_tag(p, out, n) != 0)
				goto out;
			if (!(x->flags & N_VOID)) {
				if (x->first != NONE)
					open = true;
				else if (put_end_tag(p, out, n) != 0)
					goto out;
			}
		} else if (x->flags & N_TEXT) {
			if (put(out, x->text, x->textlen) != 0)
				goto out;
		}
		/* unfilled prototypes are left out */
		if (open) {
			n = x->first;
			continue;
		}
		while (n != 0 && p->nodes[n].next == NONE) {
			n = p->nodes[n].parent;
			if (put_end_tag(p, out, n) != 0)
				goto out;
		}
		if (n == 0)
			break;
		n = p->nodes[n].next;
	}
	if (PUT_LIT(out, "\n") != 0)
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
	const struct tmpl *t;
	struct page *p;
	size_t i, alloc, head, size;

	if (set == NULL || name == NULL)
		return NULL;
	for (i = 0; i < PAGE_NTEMPLATES; i++)
		if (strcmp(page_templates[i].name, name) == 0)
			break;
	if (i == PAGE_NTEMPLATES)
		return NULL;
	t = &set->t[i];
	/* one allocation: the page, then its first arena chunk holding the
	 * nodes (with room for repeats and fills) and the fills' values */
	alloc = t->n + t->n / 2 + 16;
	head = ARENA_ALIGN(sizeof(*p));
	size = head + ARENA_ALIGN(alloc * sizeof(struct pnode)) +
	       ARENA_ALIGN(FOUND_INLINE * sizeof(int32_t)) + ARENA_SLACK;
	if ((p = malloc(size)) == NULL)
		return NULL;
	memset(p, 0, sizeof(*p));
	p->t = t;
	p->arena.cur = (char *)p + head;
	p->arena.end = (char *)p + size;
	p->nodes = arena_alloc(&p->arena, alloc * sizeof(struct pnode));
	p->found = arena_alloc(&p->arena, FOUND_INLINE * sizeof(int32_t));
	p->alloc = alloc;
	p->afound = FOUND_INLINE;
	/* the set's image is only ever read, so threads share it */
	memcpy(p->nodes, t->image, t->n * sizeof(struct pnode));
	p->n = t->n;
	return p;
}

void
page_free(struct page *p)
{
	if (p == NULL)
		return;
	arena_free(&p->arena);
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

/* ---- compiling a checked template -------------------------------------- */

struct compiler {
	struct tmpl *t;
	size_t n;
	char **names;          /* slot names (in t's arena) */
	size_t nnames, anames;
	const char *path;
	char *err;
	size_t errlen;
};

static int
compile_slot(struct compiler *c, const char *name, size_t len, uint16_t *ids,
             size_t *nids)
{
	char **v;
	size_t i;

	for (i = 0; i < c->nnames; i++)
		if (strlen(c->names[i]) == len && memcmp(c->names[i], name, len) == 0)
			break;
	if (i == c->nnames) {
		if (c->nnames >= UINT16_MAX)
			return -1;
		if (c->nnames == c->anames) {
			c->anames = c->anames ? c->anames * 2 : 32;
			if ((v = realloc(c->names, c->anames * sizeof(*v))) == NULL)
				return -1;
			c->names = v;
		}
		if ((c->names[i] = arena_strndup(&c->t->arena, name, len)) == NULL)
			return -1;
		c->nnames++;
	}
	for (size_t k = 0; k < *nids; k++)
		if (ids[k] == i)
			return 0;
	ids[(*nids)++] = (uint16_t)i;
	return 0;
}

/* The ids of the names in a data-slot value, each once. */
static int
compile_slots(struct compiler *c, struct tnode *tn, const char *v)
{
	const char *start, *s;
	uint16_t *ids;
	size_t n = 0, nids = 0;

	for (s = v; *s != '\0'; s++)
		n += !is_space(*s) && (s == v || is_space(s[-1]));
	if (n == 0)
		return 0;
	if ((ids = arena_alloc(&c->t->arena, n * sizeof(*ids))) == NULL)
		return -1;
	while (*v != '\0') {
		while (is_space(*v))
			v++;
		start = v;
		while (*v != '\0' && !is_space(*v))
			v++;
		if (v > start &&
		    compile_slot(c, start, (size_t)(v - start), ids, &nids) != 0)
			return -1;
	}
	tn->slots = ids;
	tn->nslots = nids;
	return 0;
}

static int
compile_element(struct compiler *c, xmlNodePtr x, int32_t idx)
{
	struct tnode *tn = &c->t->tn[idx];
	struct pnode *pn = &c->t->image[idx];
	struct arena *ar = &c->t->arena;
	struct attrs *as;
	struct attr *a;
	struct buf b;
	xmlAttrPtr p;
	const char *v;
	size_t n = 0;
	int rc = -1;

	pn->t = idx;
	pn->flags = N_ELEMENT;
	if (is_void(x))
		pn->flags |= N_VOID;
	if (strcmp(cname(x->name), "pre") == 0 ||
	    strcmp(cname(x->name), "textarea") == 0)
		pn->flags |= N_PRE;
	tn->namelen = strlen(cname(x->name));
	if ((tn->name = arena_strndup(ar, cname(x->name), tn->namelen)) == NULL)
		return -1;
	for (p = x->properties; p != NULL; p = p->next)
		n++;
	if ((as = arena_alloc(ar, sizeof(*as) + n * sizeof(as->v[0]))) == NULL)
		return -1;
	as->n = 0;
	buf_init(&b, OG_TEMPLATE_MAX * 8);
	if (buf_append(&b, "<", 1) != 0 ||
	    buf_append(&b, tn->name, tn->namelen) != 0 ||
	    (idx == 0 && buf_puts(&b, " xmlns=\"" PAGE_XHTML_NS "\"") != 0))
		goto out;
	/* load checks refused namespaced attributes and entity references */
	for (p = x->properties; p != NULL; p = p->next) {
		const char *name = cname(p->name);

		if ((v = prop_text(p)) == NULL)
			goto out;
		if (strcmp(name, PAGE_SLOT) == 0) {
			if (compile_slots(c, tn, v) != 0)
				goto out;
			continue;
		}
		if (strcmp(name, PAGE_REPEAT) == 0) {
			pn->flags |= N_PROTO;
			continue;
		}
		a = &as->v[as->n++];
		a->namelen = strlen(name);
		if ((a->name = arena_strndup(ar, name, a->namelen)) == NULL ||
		    (a->val = escape_to(ar, v, strlen(v), true, false,
		                        &a->vallen)) == NULL ||
		    buf_append(&b, " ", 1) != 0 ||
		    buf_append(&b, a->name, a->namelen) != 0 ||
		    buf_append(&b, "=\"", 2) != 0 ||
		    buf_append(&b, a->val, a->vallen) != 0 ||
		    buf_append(&b, "\"", 1) != 0)
			goto out;
	}
	tn->attrs = as;
	tn->openlen = b.len;
	if ((tn->open = arena_strndup(ar, b.data, b.len)) == NULL)
		goto out;
	buf_reset(&b);
	if (buf_append(&b, "</", 2) != 0 ||
	    buf_append(&b, tn->name, tn->namelen) != 0 ||
	    buf_append(&b, ">", 1) != 0)
		goto out;
	tn->closelen = b.len;
	if ((tn->close = arena_strndup(ar, b.data, b.len)) == NULL)
		goto out;
	rc = 0;
out:
	buf_free(&b);
	return rc;
}

/* Adds x (an element or a text) and what it holds under parent. */
static int
compile_node(struct compiler *c, xmlNodePtr x, int32_t parent)
{
	struct pnode *img = c->t->image;
	int32_t idx = (int32_t)c->n++;
	const char *s;
	xmlNodePtr ch;

	img[idx].parent = parent;
	img[idx].first = img[idx].last = img[idx].prev = img[idx].next = NONE;
	img[idx].t = NONE;
	if (parent != NONE) {
		img[idx].prev = img[parent].last;
		if (img[parent].last != NONE)
			img[img[parent].last].next = idx;
		else
			img[parent].first = idx;
		img[parent].last = idx;
	}
	if (x->type == XML_TEXT_NODE) {
		s = x->content != NULL ? cname(x->content) : "";
		img[idx].flags = N_TEXT | (s[0] == '\n' ? N_NL : 0);
		img[idx].text = escape_to(&c->t->arena, s, strlen(s), false, false,
		                          &img[idx].textlen);
		return img[idx].text != NULL ? 0 : -1;
	}
	if (compile_element(c, x, idx) != 0)
		return -1;
	for (ch = x->children; ch != NULL; ch = ch->next)
		if ((ch->type == XML_ELEMENT_NODE || ch->type == XML_TEXT_NODE) &&
		    compile_node(c, ch, idx) != 0)
			return -1;
	return 0;
}

/* t from a checked document: every element and text in document order
 * (comments and PIs dropped), and the slot index. */
static int
template_compile(xmlDocPtr doc, struct tmpl *t, const char *path, char *err,
                 size_t errlen)
{
	struct compiler c = { t, 0, NULL, 0, 0, path, err, errlen };
	xmlNodePtr root = xmlDocGetRootElement(doc), n;
	size_t count = 0, i, k, *first;
	int32_t *nodes;
	int rc = -1;

	for (n = root; n != NULL; n = walk_next(n, root, true))
		count += n->type == XML_ELEMENT_NODE || n->type == XML_TEXT_NODE;
	if (count > INT32_MAX / 4 ||
	    (t->tn = arena_alloc(&t->arena, count * sizeof(*t->tn))) == NULL ||
	    (t->image = arena_alloc(&t->arena, count * sizeof(*t->image))) == NULL)
		goto out;
	memset(t->tn, 0, count * sizeof(*t->tn));
	memset(t->image, 0, count * sizeof(*t->image));
	if (compile_node(&c, root, NONE) != 0)
		goto out;
	t->n = c.n;
	t->nslots = c.nnames;
	if ((t->slot_names = arena_alloc(&t->arena, (c.nnames + 1) *
	                                 sizeof(*t->slot_names))) == NULL ||
	    (first = arena_alloc(&t->arena, (c.nnames + 2) *
	                         sizeof(*first))) == NULL)
		goto out;
	memset(first, 0, (c.nnames + 2) * sizeof(*first));
	for (i = 0; i < c.nnames; i++)
		t->slot_names[i] = c.names[i];
	/* counting sort of (slot, node) pairs: each slot's nodes in document
	 * order */
	for (i = 0; i < t->n; i++)
		if (t->image[i].flags & N_ELEMENT)
			for (k = 0; k < t->tn[i].nslots; k++)
				first[t->tn[i].slots[k] + 2]++;
	for (i = 2; i < c.nnames + 2; i++)
		first[i] += first[i - 1];
	if ((nodes = arena_alloc(&t->arena, (first[c.nnames + 1] + 1) *
	                         sizeof(*nodes))) == NULL)
		goto out;
	for (i = 0; i < t->n; i++)
		if (t->image[i].flags & N_ELEMENT)
			for (k = 0; k < t->tn[i].nslots; k++)
				nodes[first[t->tn[i].slots[k] + 1]++] = (int32_t)i;
	t->slot_nodes = nodes;
	t->slot_first = first;
	rc = 0;
out:
	if (rc != 0)
		snprintf(err, errlen, "%s: out of memory", path);
	free(c.names);
	return rc;
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
	xmlDocPtr doc;
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
		doc = template_load(path, &page_templates[i], err, errlen);
		if (doc == NULL ||
		    template_compile(doc, &set->t[i], path, err, errlen) != 0) {
			xmlFreeDoc(doc);
			free(path);
			goto out;
		}
		xmlFreeDoc(doc);
		free(path);
		path = NULL;
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
		arena_free(&set->t[i].arena);
	free(set);
}

/* ---- JSON shown on a page ------------------------------------------------ */

static int
pj_compact(struct buf *b, const json_t *v)
{
	/* 15 significant digits: 0.8 shows as 0.8, not 0.80000000000000004 */
	char *t = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY |
	                            JSON_REAL_PRECISION(15));
	int rc = t != NULL ? buf_puts(b, t) : -1;

	free(t);
	return rc;
}

static int
pj_indent(struct buf *b, int depth)
{
	static const char spaces[] = "        "; /* 2 * PAGE_JSON_INDENT_DEPTH */
	size_t n = (size_t)depth * 2;

	return buf_append(b, spaces, n < sizeof(spaces) - 1 ? n : sizeof(spaces) - 1);
}

static int
pj_strcmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Indented for the first PAGE_JSON_INDENT_DEPTH levels, compact below:
 * the text grows at most a few bytes per value, never with the depth. */
static int
pj_value(struct buf *b, const json_t *v, int depth)
{
	const char **keys = NULL, *k;
	size_t i, n;
	json_t *m;
	int rc = -1;

	n = json_is_object(v) ? json_object_size(v) : json_is_array(v) ? json_array_size(v) : 0;
	if (n == 0 || depth >= PAGE_JSON_INDENT_DEPTH)
		return pj_compact(b, v);
	if (buf_puts(b, json_is_object(v) ? "{\n" : "[\n") != 0)
		return -1;
	if (json_is_object(v)) {
		if ((keys = malloc(n * sizeof(*keys))) == NULL)
			return -1;
		i = 0;
		json_object_foreach((json_t *)(uintptr_t)v, k, m)
			keys[i++] = k;
		qsort(keys, n, sizeof(*keys), pj_strcmp);
	}
	for (i = 0; i < n; i++) {
		if (pj_indent(b, depth + 1) != 0)
			goto out;
		if (keys != NULL) {
			json_t *name = json_string(keys[i]);

			rc = name != NULL ? pj_compact(b, name) : -1;
			json_decref(name);
			if (rc != 0 || buf_puts(b, ": ") != 0)
				goto out;
			rc = -1;
			m = json_object_get(v, keys[i]);
		} else {
			m = json_array_get(v, i);
		}
		if (pj_value(b, m, depth + 1) != 0 || buf_puts(b, i + 1 < n ? ",\n" : "\n") != 0)
			goto out;
	}
	if (pj_indent(b, depth) == 0 && buf_puts(b, json_is_object(v) ? "}" : "]") == 0)
		rc = 0;
out:
	free(keys);
	return rc;
}

char *
page_json_text(const json_t *v)
{
	struct buf b;

	if (v == NULL)
		return strdup("");
	buf_init(&b, SIZE_MAX / 2);
	if (pj_value(&b, v, 0) != 0 || buf_puts(&b, "") != 0) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

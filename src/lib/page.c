/*
 * page.c — templates/ filled and rendered as XHTML that HTML parsers read
 * the same way.
 *
 * Templates are parsed and checked with libxml2 once, at load
 * (page_tmpl.c), and then compiled into a small read-only tree of our own (struct tmpl): one node
 * per element or text in document order, each element's start tag with its
 * template attributes already escaped, each text already escaped, and an
 * index from slot name to the elements carrying it. A page is a private
 * copy of that tree's links (one memcpy of an array of small nodes that
 * point at the shared, never-written strings), so page_new allocates once
 * and a fill looks its slot up in the index instead of walking the page.
 *
 * Callers only ever set text nodes and attribute values, and every value
 * is cleaned and escaped (page_text.c) when it is set, so data can never
 * become markup.
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
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "caps.h"
#include "page.h"
#include "page_int.h"

#define PAGE_ERROR_MAX  256
#define ARENA_CHUNK    8192  /* arena chunks beyond the first */
#define ARENA_SLACK    8192  /* arena space allocated with a page */
#define FOUND_INLINE   16

/* ---- arenas ------------------------------------------------------------ */

void *
page_arena_alloc(struct arena *a, size_t n)
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

void
page_arena_free(struct arena *a)
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

	if (want > SIZE_MAX / 4 / sz || (nv = page_arena_alloc(a, want * sz)) == NULL)
		return NULL;
	if (n > 0)
		memcpy(nv, v, n * sz);
	return nv;
}

char *
page_arena_strndup(struct arena *a, const char *s, size_t n)
{
	char *d = page_arena_alloc(a, n + 1);

	if (d != NULL) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}


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

/* The node after n in a pre-order walk of top's subtree, or NONE. */
static int32_t
walk_next(const struct page *p, int32_t n, int32_t top)
{
	if (p->nodes[n].first != NONE)
		return p->nodes[n].first;
	while (n != top && p->nodes[n].next == NONE)
		n = p->nodes[n].parent;
	return n == top ? NONE : p->nodes[n].next;
}

/* Every element with slot sid in top's subtree (top included), in
 * document order, to p->found. */
static int
scope_find(struct page *p, int32_t top, int sid, size_t *nfound)
{
	int32_t n;

	for (n = top; n != NONE; n = walk_next(p, n, top))
		if (node_has_slot(p, n, sid) && found_add(p, nfound, n) != 0)
			return -1;
	return 0;
}

/* The elements carrying slot sid: the template's, then the copies
 * page_repeat made. *i starts at 0; NONE when there are no more. */
static int32_t
slot_next(const struct page *p, int sid, size_t *i)
{
	const struct tmpl *t = p->t;
	size_t nt = t->slot_first[sid + 1] - t->slot_first[sid], k;

	while (*i < nt + p->nextras) {
		k = (*i)++;
		if (k < nt)
			return t->slot_nodes[t->slot_first[sid] + k];
		if (p->extras[k - nt].sid == sid)
			return p->extras[k - nt].node;
	}
	return NONE;
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
	for (i = 0; (n = slot_next(p, sid, &i)) != NONE;) {
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
	    (clean = page_arena_alloc(&p->arena, len * 3 + 1)) == NULL)
		return NULL;
	clen = page_clean_into(clean, value);
	arena_trim(&p->arena, clean, len * 3 + 1, clen + 1);
	if (url_check && !page_url_allowed(clean)) {
		arena_trim(&p->arena, clean, clen + 1, 0);
		*refused = true;
		return NULL;
	}
	*first_nl = clean[0] == '\n';
	e = page_escape_to(&p->arena, clean, clen, attr, true, outlen);
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
	if ((a = page_arena_alloc(&p->arena, sizeof(*a) + n * sizeof(a->v[0]))) == NULL)
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

	if (!page_attr_name_allowed(attr)) {
		fail(p, "attribute \"%s\" refused for slot \"%s\"",
		     attr ? attr : "(null)", slot ? slot : "(null)");
		return -1;
	}
	if (value == NULL) {
		fail(p, "value of %s for slot \"%s\" is NULL", attr,
		     slot ? slot : "(null)");
		return -1;
	}
	esc = page_value(p, value, true, page_url_attr(attr), &elen, &nl,
	                 &refused);
	/* a refused URL is data, not a bug: the caller may show it as text */
	if (refused)
		return -1;
	namelen = strlen(attr);
	if (esc == NULL ||
	    (name = page_arena_strndup(&p->arena, attr, namelen)) == NULL) {
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
	int32_t n;

	if (p->root_gone)
		return NONE;
	for (n = 0; n != NONE; n = walk_next(p, n, 0))
		if (node_has_slot(p, n, sid))
			return n;
	return NONE;
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
		for (i = 0; (n = slot_next(p, sid, &i)) != NONE;) {
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
	if ((r = page_arena_alloc(&p->arena, sizeof(*r))) == NULL) {
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
	if ((s = page_arena_alloc(&p->arena, sizeof(*s))) == NULL ||
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
	size_t alloc, head, size;
	int ti;

	if (set == NULL || name == NULL)
		return NULL;
	if ((ti = page_tmpl_index(name)) < 0)
		return NULL;
	t = &set->t[ti];
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
	p->nodes = page_arena_alloc(&p->arena, alloc * sizeof(struct pnode));
	p->found = page_arena_alloc(&p->arena, FOUND_INLINE * sizeof(int32_t));
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
	page_arena_free(&p->arena);
	free(p);
}


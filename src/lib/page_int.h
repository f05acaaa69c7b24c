/*
 * page_int.h — what the template loader (page_tmpl.c) and the pages
 * (page.c) share: the compiled form of a template, the arena it lives in,
 * and the escaping both apply. Only the page files include it.
 */
#ifndef OG_PAGE_INT_H
#define OG_PAGE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PAGE_XHTML_NS   "http://www.w3.org/1999/xhtml"
#define PAGE_SLOT       "data-slot"
#define PAGE_REPEAT     "data-repeat"
#define PAGE_NTEMPLATES 4     /* approval, decided, notice, inbox (page_tmpl.c) */

#define NONE           (-1)  /* no node */

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

/* Bump allocation from a (page.c). NULL when memory runs out. */
void *page_arena_alloc(struct arena *a, size_t n);
char *page_arena_strndup(struct arena *a, const char *s, size_t n);
void page_arena_free(struct arena *a);

/* s escaped for text content (attr false) or a double-quoted attribute
 * value, in arena a (s itself when nothing needs escaping and s is already
 * there: pass in_arena). NULL when memory runs out. */
const char *page_escape_to(struct arena *a, const char *s, size_t len, bool attr,
                           bool in_arena, size_t *outlen);

/* Writes s cleaned to out, which has room for 3 * strlen(s) + 1 bytes (one
 * byte becomes at most the three of U+FFFD); returns its length. */
size_t page_clean_into(char *out, const char *s);
/* May a caller set attribute a? Plain names only; no event handlers,
 * style, xmlns, srcdoc, srcset or the slot markers. */
bool page_attr_name_allowed(const char *a);

/* Is s one of the NULL-terminated list? */
bool page_in_list(const char *const *list, const char *s);
/* Does a browser load or navigate to the value of attribute name? */
bool page_url_attr(const char *name);
/* May such a value stand in a page: no scheme, or http, https, mailto? */
bool page_url_allowed(const char *v);

/* The index in a page_set of the template called name; -1 when none. */
int page_tmpl_index(const char *name);

#endif

/*
 * page_tmpl.c — loading templates/: each XHTML file is parsed by libxml2,
 * checked (nothing but unprefixed XHTML, no script, style or embedding
 * elements, no event handler attributes, URLs only of allowed schemes,
 * every slot the handlers fill present) and compiled into the read-only
 * tree of page_int.h that pages copy.
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

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "buf.h"
#include "caps.h"
#include "page.h"
#include "page_int.h"


/* What the handlers fill, per template: a template that lost one of these
 * fails at start-up instead of showing a card without, say, the approver. */
static const char *const page_approval_slots[] = {
	"title", "key", "source_link", "contract", "model", "output",
	"output_fields", "field_name", "field_value", "errors", "error_item",
	"error_path", "error_message", "approver", "approver_groups",
	"expires_at", "effect_type", "effect_target", "effect_payload",
	"requested_by", "rerun", "form", "csrf", "decision_button",
	"decision_value", "decision_label", "cannot_decide", "cannot_decide_reason",
	"mail", "mail_from", "mail_count", "mail_rcpt", "mail_subject", "mail_body",
	"http", "http_method", "http_url", "http_body", "votes", "quorum_status", "vote",
	"vote_subject", "vote_decision", "vote_at", "vote_note", "draft", "settle_hint",
	"edit", "edit_errors", "edit_error", "edit_error_path", "edit_error_message",
	"edit_field", "edit_label", "edit_input", "context", "context_subject",
	"context_customer", "context_message", NULL,
};
static const char *const page_decided_slots[] = {
	"title", "key", "decision", "decided_by", "decided_at", "reason",
	"effect_type", "effect_target", "effect_state", "effect_status", "rerun", "lede",
	"votes", "quorum_status", "vote", "vote_subject", "vote_decision", "vote_at",
	"vote_note", NULL,
};
static const char *const page_notice_slots[] = {
	"title", "heading", "message", "detail", NULL,
};
static const char *const page_inbox_slots[] = {
	"title", "approver", "approver_groups", "count", "empty", "list", "entry",
	"entry_link", "entry_title", "entry_effect", "entry_key", "entry_client",
	"entry_approver", "entry_age", "entry_expires", "entry_left", "entry_about", NULL,
};

struct page_template {
	const char *name;
	const char *const *slots;
};

static const struct page_template page_templates[] = {
	{ PAGE_APPROVAL, page_approval_slots },
	{ PAGE_DECIDED, page_decided_slots },
	{ PAGE_NOTICE, page_notice_slots },
	{ PAGE_INBOX, page_inbox_slots },
};

_Static_assert(PAGE_NTEMPLATES == sizeof(page_templates) / sizeof(page_templates[0]),
               "PAGE_NTEMPLATES counts page_templates");

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

/* The next space-separated token at *v, *len bytes long, or NULL at the
 * end; *v moves past it. */
static const char *
next_token(const char **v, size_t *len)
{
	const char *start;

	while (is_space(**v))
		(*v)++;
	if (**v == '\0')
		return NULL;
	start = *v;
	while (**v != '\0' && !is_space(**v))
		(*v)++;
	*len = (size_t)(*v - start);
	return start;
}

static bool
slot_match(xmlNodePtr n, const char *slot, size_t len)
{
	xmlAttrPtr a;
	const char *v, *tok;
	size_t toklen;

	if (n->type != XML_ELEMENT_NODE || len == 0 ||
	    (a = find_prop(n, PAGE_SLOT)) == NULL || (v = prop_text(a)) == NULL)
		return false;
	while ((tok = next_token(&v, &toklen)) != NULL)
		if (toklen == len && memcmp(tok, slot, len) == 0)
			return true;
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


static bool
is_void(xmlNodePtr n)
{
	return page_in_list(void_elements, cname(n->name));
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
	if (page_in_list(banned_elements, cname(n->name))) {
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
		if (page_url_attr(name) && !page_url_allowed(v)) {
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
		if ((c->names[i] = page_arena_strndup(&c->t->arena, name, len)) == NULL)
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
	const char *tok, *s;
	uint16_t *ids;
	size_t n = 0, nids = 0, toklen;

	for (s = v; *s != '\0'; s++)
		n += !is_space(*s) && (s == v || is_space(s[-1]));
	if (n == 0)
		return 0;
	if ((ids = page_arena_alloc(&c->t->arena, n * sizeof(*ids))) == NULL)
		return -1;
	while ((tok = next_token(&v, &toklen)) != NULL)
		if (compile_slot(c, tok, toklen, ids, &nids) != 0)
			return -1;
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
	if ((tn->name = page_arena_strndup(ar, cname(x->name), tn->namelen)) == NULL)
		return -1;
	for (p = x->properties; p != NULL; p = p->next)
		n++;
	if ((as = page_arena_alloc(ar, sizeof(*as) + n * sizeof(as->v[0]))) == NULL)
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
		if ((a->name = page_arena_strndup(ar, name, a->namelen)) == NULL ||
		    (a->val = page_escape_to(ar, v, strlen(v), true, false,
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
	if ((tn->open = page_arena_strndup(ar, b.data, b.len)) == NULL)
		goto out;
	buf_reset(&b);
	if (buf_append(&b, "</", 2) != 0 ||
	    buf_append(&b, tn->name, tn->namelen) != 0 ||
	    buf_append(&b, ">", 1) != 0)
		goto out;
	tn->closelen = b.len;
	if ((tn->close = page_arena_strndup(ar, b.data, b.len)) == NULL)
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
		img[idx].text = page_escape_to(&c->t->arena, s, strlen(s), false, false,
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
	    (t->tn = page_arena_alloc(&t->arena, count * sizeof(*t->tn))) == NULL ||
	    (t->image = page_arena_alloc(&t->arena, count * sizeof(*t->image))) == NULL)
		goto out;
	memset(t->tn, 0, count * sizeof(*t->tn));
	memset(t->image, 0, count * sizeof(*t->image));
	if (compile_node(&c, root, NONE) != 0)
		goto out;
	t->n = c.n;
	t->nslots = c.nnames;
	if ((t->slot_names = page_arena_alloc(&t->arena, (c.nnames + 1) *
	                                 sizeof(*t->slot_names))) == NULL ||
	    (first = page_arena_alloc(&t->arena, (c.nnames + 2) *
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
	if ((nodes = page_arena_alloc(&t->arena, (first[c.nnames + 1] + 1) *
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
	return set;
out:
	page_set_free(set);
	return NULL;
}

void
page_set_free(struct page_set *set)
{
	size_t i;

	if (set == NULL)
		return;
	for (i = 0; i < PAGE_NTEMPLATES; i++)
		page_arena_free(&set->t[i].arena);
	free(set);
}


int
page_tmpl_index(const char *name)
{
	size_t i;

	for (i = 0; i < PAGE_NTEMPLATES; i++)
		if (strcmp(page_templates[i].name, name) == 0)
			return (int)i;
	return -1;
}

/*
 * pagelib.h — approval pages as a browser reads them (check_inbox,
 * check_notify, check_gate, check_security): a page fetched with the
 * identity headers an SSO proxy sends (dispatchlib's dl_page_request),
 * parsed by libxml2's HTML parser and queried by XPath; a decision posted
 * with the card's CSRF value.
 */
#ifndef OG_PAGELIB_H
#define OG_PAGELIB_H

#include <stddef.h>

#include <jansson.h>
#include <libxml/HTMLparser.h>
#include <libxml/xpath.h>

#include "testlib.h"

/* A page as a browser's HTML parser reads it. */
struct pl_doc {
	struct tl_resp r;
	htmlDocPtr html;
	xmlXPathContextPtr xp;
};
/* GETs path as user in groups (NULL: that header not sent) and parses it;
 * fails the test unless the answer is an HTML page. */
void pl_doc_get(const char *path, const char *user, const char *groups, struct pl_doc *d);
void pl_doc_free(struct pl_doc *d);
/* The text of every node the XPath expression selects, as a JSON array. */
json_t *pl_doc_texts(const struct pl_doc *d, const char *expr);
/* The one text the expression selects (malloc'd); fails unless exactly one. */
char *pl_doc_text1(const struct pl_doc *d, const char *expr);
size_t pl_doc_count(const struct pl_doc *d, const char *expr);
/* The text of the page's body (malloc'd). */
char *pl_doc_all_text(const struct pl_doc *d);
/* The value of the page's hidden csrf input (malloc'd), or NULL. */
char *pl_doc_csrf(const struct pl_doc *d);
/* POSTs decision with the CSRF value of the card at path (GET first) as
 * user in groups; the POST's status and, in location, its Location. */
long pl_decide_at(const char *path, const char *user, const char *groups, const char *decision,
                  char *location, size_t loclen);

/* An answer to a page request (with its headers) and, when it is HTML, the
 * document as a browser's parser reads it and its text content (entities
 * decoded); what the suites that send their own headers keep. */
struct pl_web {
	struct tl_resp r;
	char *hdrs;
	htmlDocPtr doc;
	char *text;
};
/* Parses w->r when it is an HTML page (doc and text stay NULL otherwise). */
void pl_web_parse(struct pl_web *w);
void pl_web_free(struct pl_web *w);

/* The stack's From address of demo_smtp (what the card shows; malloc'd). */
char *pl_stack_mail_from(void);

#endif

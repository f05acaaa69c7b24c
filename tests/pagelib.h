/*
 * pagelib.h — approval pages as a browser reads them, a suite's own
 * dispatcher and the SMTP sink's record (see pagelib.c). Suites using it
 * set up dispatchlib's g_suite, g_tmp and g_http_port first.
 */
#ifndef OG_PAGELIB_H
#define OG_PAGELIB_H

#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>
#include <libxml/HTMLparser.h>
#include <libxml/xpath.h>

#include "testlib.h"

/* Claims key as bearer (claim payload {"run": run}) and hands in output and
 * effect (both stolen) for contract, with a model, a source URL and
 * requested_by as a workflow sends them; the /output answer in *r. */
void pl_claim_and_output(const char *run, const char *bearer, const char *key,
                         const char *contract, json_t *output, json_t *effect,
                         const char *requested_by, struct tl_resp *r);

/* GET (form NULL) or POST of path as user in groups (NULL: header not
 * sent), from our own origin (or origin); the answer's headers in *hdrs
 * when not NULL. A 429 of nginx's POST limit is waited out. */
void pl_page_request(const char *path, const char *user, const char *groups, const char *form,
                     const char *origin, struct tl_resp *r, char **hdrs);

/* A page as a browser's HTML parser reads it. */
struct pl_doc {
	struct tl_resp r;
	htmlDocPtr html;
	xmlXPathContextPtr xp;
};
void pl_doc_get(const char *path, const char *user, const char *groups, struct pl_doc *d);
void pl_doc_free(struct pl_doc *d);
/* The text of every node the XPath expression selects, as a JSON array. */
json_t *pl_doc_texts(const struct pl_doc *d, const char *expr);
/* The one text the expression selects (malloc'd); fails unless exactly one. */
char *pl_doc_text1(const struct pl_doc *d, const char *expr);
size_t pl_doc_count(const struct pl_doc *d, const char *expr);
char *pl_doc_all_text(const struct pl_doc *d);
/* The value of the page's hidden csrf input (malloc'd), or NULL. */
char *pl_doc_csrf(const struct pl_doc *d);
/* POSTs decision with the CSRF value of the card at path (GET first) as
 * user in groups; the POST's status and, in location, its Location. */
long pl_decide_at(const char *path, const char *user, const char *groups, const char *decision,
                  char *location, size_t loclen);

/* The stack's From address of demo_smtp (what the card shows). */
char *pl_stack_mail_from(void);
/* A dispatcher of the suite (config, log and stderr in g_tmp) whose
 * demo_http is the suite's HTTP provider and demo_smtp the SMTP sink on
 * smtp_port, with the stack's public_url; running once its dispatch.started
 * line is logged. */
pid_t pl_dispatcher_start(const char *mail_from, int smtp_port);
/* What the SMTP sink (its record file) received, MIME-decoded by Python's
 * email package: one object per mail {rcpt (RCPT TO), from, to (the To:
 * addresses), subject, body (line ends as the text's own)}. */
json_t *pl_mails_received(const char *record);

#endif

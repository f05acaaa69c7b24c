/*
 * pagelib.c — approval pages as a browser reads them (see pagelib.h).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <check.h>
#include <jansson.h>
#include <libxml/HTMLparser.h>
#include <libxml/tree.h>
#include <libxml/xpath.h>

#include "dispatchlib.h"
#include "pagelib.h"
#include "testlib.h"

void
pl_doc_get(const char *path, const char *user, const char *groups, struct pl_doc *d)
{
	memset(d, 0, sizeof(*d));
	dl_page_request(path, user, groups, NULL, NULL, &d->r, NULL);
	ck_assert_msg(strncasecmp(d->r.content_type, "text/html", 9) == 0,
	              "%s: not a page (%s, HTTP %ld): %.500s", d->r.what, d->r.content_type,
	              d->r.status, d->r.body);
	d->html = htmlReadMemory(d->r.body, (int)d->r.body_len, NULL, "UTF-8",
	                         HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING | HTML_PARSE_NONET);
	ck_assert_ptr_nonnull(d->html);
	d->xp = xmlXPathNewContext(d->html);
	ck_assert_ptr_nonnull(d->xp);
}

void
pl_web_parse(struct pl_web *w)
{
	xmlNodePtr root;
	xmlChar *t;

	if (w->r.body_len == 0 || strncasecmp(w->r.content_type, "text/html", 9) != 0)
		return;
	w->doc = htmlReadMemory(w->r.body, (int)w->r.body_len, NULL, "UTF-8",
	                        HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING | HTML_PARSE_NONET);
	if (w->doc == NULL || (root = xmlDocGetRootElement(w->doc)) == NULL)
		return;
	t = xmlNodeGetContent(root);
	w->text = strdup(t != NULL ? (const char *)t : "");
	xmlFree(t);
}

void
pl_web_free(struct pl_web *w)
{
	tl_resp_free(&w->r);
	free(w->hdrs);
	if (w->doc != NULL)
		xmlFreeDoc(w->doc);
	free(w->text);
	memset(w, 0, sizeof(*w));
}

void
pl_doc_free(struct pl_doc *d)
{
	if (d->xp != NULL)
		xmlXPathFreeContext(d->xp);
	if (d->html != NULL)
		xmlFreeDoc(d->html);
	tl_resp_free(&d->r);
	memset(d, 0, sizeof(*d));
}

/* The text of every node the XPath expression selects, as a JSON array. */
json_t *
pl_doc_texts(const struct pl_doc *d, const char *expr)
{
	xmlXPathObjectPtr o = xmlXPathEvalExpression((const xmlChar *)expr, d->xp);
	json_t *out = json_array();
	int i;

	ck_assert_msg(o != NULL, "XPath %s", expr);
	for (i = 0; o->nodesetval != NULL && i < o->nodesetval->nodeNr; i++) {
		xmlChar *t = xmlNodeGetContent(o->nodesetval->nodeTab[i]);

		json_array_append_new(out, json_string(t != NULL ? (const char *)t : ""));
		xmlFree(t);
	}
	xmlXPathFreeObject(o);
	return out;
}

/* The one text the expression selects (malloc'd); fails unless exactly one. */
char *
pl_doc_text1(const struct pl_doc *d, const char *expr)
{
	json_t *all = pl_doc_texts(d, expr);
	char *s;

	ck_assert_msg(json_array_size(all) == 1, "%s: %zu nodes match %s (want 1)", d->r.what,
	              json_array_size(all), expr);
	s = strdup(json_string_value(json_array_get(all, 0)));
	json_decref(all);
	return s;
}

size_t
pl_doc_count(const struct pl_doc *d, const char *expr)
{
	json_t *all = pl_doc_texts(d, expr);
	size_t n = json_array_size(all);

	json_decref(all);
	return n;
}

char *
pl_doc_all_text(const struct pl_doc *d)
{
	return pl_doc_text1(d, "/html/body");
}

/* The value of the page's hidden csrf input (malloc'd), or NULL. */
char *
pl_doc_csrf(const struct pl_doc *d)
{
	json_t *v = pl_doc_texts(d, "//input[@name='csrf']/@value");
	char *s = json_array_size(v) == 1 ? strdup(json_string_value(json_array_get(v, 0))) : NULL;

	json_decref(v);
	return s;
}

/* POSTs decision with the CSRF value of the card at path (GET first) as
 * user in groups; the POST's status and, in location, its Location. */
long
pl_decide_at(const char *path, const char *user, const char *groups, const char *decision,
          char *location, size_t loclen)
{
	struct pl_doc d;
	struct tl_resp r;
	char *csrf, *form, *hdrs = NULL, *loc;
	long st;

	pl_doc_get(path, user, groups, &d);
	ASSERT_STATUS(&d.r, 200);
	csrf = pl_doc_csrf(&d);
	ck_assert_msg(csrf != NULL, "%s: the card has no form for %s in \"%s\"", d.r.what, user,
	              groups);
	pl_doc_free(&d);
	form = tl_form("decision", decision, "csrf", csrf, "reason",
	               "Проверено: отправляем 👍", (char *)NULL);
	dl_page_request(path, user, groups, form, NULL, &r, &hdrs);
	st = r.status;
	loc = hdrs != NULL ? tl_header_get(hdrs, "Location") : NULL;
	if (location != NULL)
		snprintf(location, loclen, "%s", loc ? loc : "");
	free(loc);
	free(hdrs);
	tl_resp_free(&r);
	free(form);
	free(csrf);
	return st;
}

/* The stack's From address of demo_smtp (what the card shows). */
char *
pl_stack_mail_from(void)
{
	char *conf = tl_file_slurp(tl_env("ONCEGATE_CONF"), NULL), *p, *e, *v = NULL;

	ck_assert_msg(conf != NULL, "cannot read %s", tl_env("ONCEGATE_CONF"));
	p = strstr(conf, "[target demo_smtp]");
	p = p != NULL ? strstr(p, "mail_from = ") : NULL;
	if (p != NULL) {
		p += strlen("mail_from = ");
		e = p + strcspn(p, "\r\n");
		v = strndup(p, (size_t)(e - p));
	}
	free(conf);
	ck_assert_msg(v != NULL, "no mail_from of demo_smtp in the stack's config");
	return v;
}

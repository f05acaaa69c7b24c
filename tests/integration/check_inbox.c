/*
 * check_inbox.c — integration suite: the approver's inbox and the card as
 * it will be sent, with production-shaped data, against the stack of
 * ./dev test (which loads the test contracts of tests/data/contracts-test).
 *
 *   as sent     a mail to 10 recipients with a 5,000-character body in
 *               every script (Cyrillic, CJK, Arabic, Hebrew, emoji), handed
 *               in by two tenants under one business key: the card shows
 *               From, every recipient, the Subject and the body, and the
 *               loopback SMTP server receives exactly those bytes (MIME-
 *               decoded); the page after the decision says the mail is
 *               held by the kill switch, then that it was sent;
 *   inbox       GET /approve/ as oauth2-proxy's identity headers arrive
 *               (groups joined with commas, names with spaces and in
 *               Cyrillic) lists exactly the runs the person may decide
 *               (their groups as whole names; not a run they requested;
 *               not a decided, expired or other group's run), one entry a
 *               run, newest first, with age and expiry, linking to cards
 *               by challenge id and never holding a token;
 *   empty       a person with nothing to decide sees an empty inbox (200);
 *   may not     a person who may not decide sees the card without a form
 *               and is told why; by challenge id such a person finds
 *               nothing (404);
 *   by id       the card opened from the inbox decides with the same
 *               guarantees as the emailed link: same origin, CSRF bound to
 *               the challenge and the person, one transaction that consumes
 *               the challenge once (the run's other challenge voided, one
 *               outbox row), and the emailed link then shows the decision.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <check.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <libxml/HTMLparser.h>
#include <libxml/tree.h>
#include <libxml/xpath.h>

#include "dispatchlib.h"
#include "pagelib.h"
#include "testlib.h"

#define CONTRACT      "inbox_mail"   /* group:customer support, group:служба поддержки */
#define PERSON        "olga.petrova@example.com"
/* as oauth2-proxy sends X-Auth-Request-Groups: joined with commas */
#define PERSON_GROUPS "sales team,customer support,служба поддержки"
#define REQUESTER     "support-inbox@workflows.example"
#define SETTLE_S      60

#define JSTR(o, n) (tl_jstr((o), (n)) ? tl_jstr((o), (n)) : "(none)")

/* ---- the API --------------------------------------------------------------- */

/* The corpus mail mail_id to the recipients `to` (stolen), for CONTRACT. */
static void
mail_run(const char *bearer, const char *key, const char *mail_id, json_t *to,
         const char *requested_by, struct tl_resp *r)
{
	dl_corpus_mail_output(bearer, key, CONTRACT, mail_id, to, requested_by, r);
}

/* Ten recipients: first, then nine of the corpus's ten. */
static json_t *
ten_recipients(const char *first)
{
	json_t *rc = tl_corpus_load("recipients.json"), *to = json_array();
	size_t i;

	json_array_append_new(to, json_string(first));
	for (i = 0; i < 9; i++)
		json_array_append(to, json_array_get(json_object_get(rc, "ten"), i));
	json_decref(rc);
	return to;
}

/* ---- as sent ------------------------------------------------------------------ */

/* What the card shows of a mail. */
struct shown {
	char *from, *subject, *body, *count;
	json_t *to;
};

static void
card_mail(const char *path, const char *user, const char *groups, struct shown *s)
{
	struct pl_doc d;

	pl_doc_get(path, user, groups, &d);
	ASSERT_STATUS(&d.r, 200);
	s->from = pl_doc_text1(&d, "//div[@class='mail']//dt[.='From']/following-sibling::dd[1]");
	s->count = pl_doc_text1(&d, "//div[@class='mail']//dt[starts-with(.,'To')]/span");
	s->to = pl_doc_texts(&d, "//div[@class='mail']//ul[@class='rcpt']/li");
	s->subject = pl_doc_text1(&d, "//div[@class='mail']//dd[@class='subject']");
	s->body = pl_doc_text1(&d, "//div[@class='mail']//pre[contains(@class,'body')]");
	/* the decision comes before what is sent, and it is the only form */
	ck_assert_msg(pl_doc_count(&d, "//form[@method='post']") == 1, "%s: one form", d.r.what);
	ck_assert_msg(pl_doc_count(&d, "//form//button[@name='decision' and @value='approve']") == 1,
	              "%s: an Approve button", d.r.what);
	ck_assert_msg(pl_doc_count(&d, "//form/following::div[@class='mail']") == 1,
	              "%s: the buttons come before the mail on the page", d.r.what);
	pl_doc_free(&d);
}

static void
shown_free(struct shown *s)
{
	free(s->from);
	free(s->subject);
	free(s->body);
	free(s->count);
	json_decref(s->to);
}

/* The outcome the decided page reports (malloc'd). */
static char *
decided_state(const char *path)
{
	struct pl_doc d;
	char *st;

	pl_doc_get(path, PERSON, PERSON_GROUPS, &d);
	ASSERT_STATUS(&d.r, 410);
	st = pl_doc_text1(&d, "//dt[.='Sent?']/following-sibling::dd[1]/strong");
	pl_doc_free(&d);
	return st;
}

START_TEST(test_mail_as_sent)
{
	json_t *tenants = tl_corpus_load("tenants.json");
	struct {
		const char *bearer, *client, *mail;
		char first[128], id[64], path[128];
		char *token;
		struct shown s;
	} t[2] = {
		{ .bearer = dl_key_dev, .client = "dev", .mail = "mixed_max" },
		{ .bearer = dl_key_b, .client = dl_client_b, .mail = "ar_max" },
	};
	PGconn *c = tl_pg_connect();
	char prefix[96], *key, *mail_from = pl_stack_mail_from(), loc[256], *st;
	json_t *mails;
	size_t i, j;
	struct dl_disp disp;
	double deadline;

	ck_assert_msg(dl_key_b != NULL, "no second client: `oncegatectl client add` failed");
	snprintf(prefix, sizeof(prefix), "%s-sent:", tl_run);
	key = tl_corpus_key(prefix, json_string_value(json_array_get(
	                                json_object_get(tenants, "long_keys"), 0)), 200);
	for (i = 0; i < 2; i++) {
		struct tl_resp r;

		snprintf(t[i].first, sizeof(t[i].first), "customer+%s@inbox.example.com",
		         i == 0 ? "dev" : "b");
		mail_run(t[i].bearer, key, t[i].mail, ten_recipients(t[i].first), REQUESTER, &r);
		t[i].token = dl_token_of(&r, 0, t[i].id, sizeof(t[i].id));
		tl_resp_free(&r);
		snprintf(t[i].path, sizeof(t[i].path), "/approve/%s", t[i].token);
		card_mail(t[i].path, PERSON, PERSON_GROUPS, &t[i].s);
		/* what the card shows is what was handed in */
		ck_assert_str_eq(t[i].s.from, mail_from);
		ck_assert_str_eq(t[i].s.count, "10");
		ck_assert_uint_eq(json_array_size(t[i].s.to), 10);
		ck_assert_str_eq(json_string_value(json_array_get(t[i].s.to, 0)), t[i].first);
		ck_assert_msg(strcmp(t[i].s.subject, tl_corpus_mail_str(t[i].mail, "subject")) == 0,
		              "%s: the card's subject is not the drafted one: %s", t[i].client,
		              t[i].s.subject);
		ck_assert_msg(strcmp(t[i].s.body, tl_corpus_mail_str(t[i].mail, "body")) == 0,
		              "%s: the card's body (%zu bytes) is not the drafted one (%zu bytes)",
		              t[i].client, strlen(t[i].s.body),
		              strlen(tl_corpus_mail_str(t[i].mail, "body")));
	}
	/* decided with sending switched off: the dev tenant's from the inbox's
	 * card (by id), the other's from its emailed link */
	(void)tl_ctl(NULL, "sends", "stop", "--reason", "check_inbox holds sends",
	             (char *)NULL);
	snprintf(t[0].path, sizeof(t[0].path), "/approve/card/%s", t[0].id);
	ck_assert_int_eq(pl_decide_at(t[0].path, PERSON, PERSON_GROUPS, "approve", loc, sizeof(loc)),
	                 303);
	ck_assert_str_eq(loc, t[0].path);
	ck_assert_int_eq(pl_decide_at(t[1].path, PERSON, PERSON_GROUPS, "approve", NULL, 0), 303);
	for (i = 0; i < 2; i++) {
		st = decided_state(t[i].path);
		ck_assert_msg(strcmp(st, "held by the kill switch") == 0,
		              "%s: with sending off the decided page says \"%s\"", t[i].client, st);
		free(st);
	}

	(void)tl_ctl(NULL, "sends", "resume", "--reason", "check_inbox sends to loopback",
	             (char *)NULL);
	dl_disp_start_demo(&disp, mail_from);
	{
		const char *p[1] = { key };

		deadline = tl_now() + SETTLE_S;
		while (tl_pg_count(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
		                      " AND state = 'completed'", 1, p) < 2 &&
		       tl_now() < deadline)
			tl_sleep_ms(200);
	}
	(void)dl_disp_stop(&disp, 20);

	mails = dl_mails_received();
	for (i = 0; i < 2; i++) {
		json_t *m, *got = NULL;
		size_t n = 0;

		json_array_foreach(mails, j, m)
			if (strcmp(json_string_value(json_array_get(json_object_get(m, "rcpt"), 0)) ?: "",
			           t[i].first) == 0) {
				got = m;
				n++;
			}
		ck_assert_msg(n == 1, "%s's mail arrived %zu times", t[i].client, n);
		/* exactly what the card showed, byte for byte */
		ck_assert_msg(json_equal(json_object_get(got, "rcpt"), t[i].s.to),
		              "%s: RCPT TO is not the card's To list", t[i].client);
		ck_assert_msg(json_equal(json_object_get(got, "to"), t[i].s.to),
		              "%s: the To: header is not the card's To list", t[i].client);
		ck_assert_msg(json_array_size(json_object_get(got, "from")) == 1 &&
		              strcmp(json_string_value(json_array_get(json_object_get(got, "from"), 0)),
		                     t[i].s.from) == 0,
		              "%s: From: is not the card's %s", t[i].client, t[i].s.from);
		ck_assert_msg(strcmp(JSTR(got, "subject"), t[i].s.subject) == 0,
		              "%s: the received subject is not the card's:\n%s\n%s", t[i].client,
		              JSTR(got, "subject"), t[i].s.subject);
		ck_assert_msg(strcmp(JSTR(got, "body"), t[i].s.body) == 0,
		              "%s: the received body (%zu bytes) is not the card's (%zu bytes)",
		              t[i].client, strlen(JSTR(got, "body")), strlen(t[i].s.body));
		st = decided_state(t[i].path);
		ck_assert_msg(strcmp(st, "sent") == 0, "%s: after the send the decided page says \"%s\"",
		              t[i].client, st);
		free(st);
	}
	json_decref(mails);
	for (i = 0; i < 2; i++) {
		shown_free(&t[i].s);
		free(t[i].token);
	}
	json_decref(tenants);
	free(mail_from);
	free(key);
	PQfinish(c);
}
END_TEST

/* ---- the inbox ------------------------------------------------------------------ */

/* The text (or, with attr, that attribute) of the one node expr selects
 * below node, as a new string; "" when it selects none or several. */
static json_t *
below(struct pl_doc *d, xmlNodePtr node, const char *expr, const char *attr)
{
	xmlXPathObjectPtr a;
	xmlChar *v = NULL;
	json_t *s;

	d->xp->node = node;
	a = xmlXPathEvalExpression((const xmlChar *)expr, d->xp);
	if (a != NULL && a->nodesetval != NULL && a->nodesetval->nodeNr == 1)
		v = attr != NULL ? xmlGetProp(a->nodesetval->nodeTab[0], (const xmlChar *)attr)
		                 : xmlNodeGetContent(a->nodesetval->nodeTab[0]);
	xmlXPathFreeObject(a);
	d->xp->node = NULL;
	s = json_string(v != NULL ? (const char *)v : "");
	xmlFree(v);
	return s;
}

/* The inbox of user in groups: 200, and its entries as
 * [{href, title, key, client, text}] in page order; the page's source in
 * *body when body is not NULL. */
static json_t *
inbox_of(const char *user, const char *groups, char **body)
{
	struct pl_doc d;
	xmlXPathObjectPtr o;
	json_t *out = json_array();
	int i;

	pl_doc_get("/approve/", user, groups, &d);
	ASSERT_STATUS(&d.r, 200);
	o = xmlXPathEvalExpression((const xmlChar *)"//ol[@class='inbox']/li", d.xp);
	ck_assert_ptr_nonnull(o);
	for (i = 0; o->nodesetval != NULL && i < o->nodesetval->nodeNr; i++) {
		xmlNodePtr li = o->nodesetval->nodeTab[i];

		json_array_append_new(
		    out, json_pack("{s:o, s:o, s:o, s:o}", "href", below(&d, li, ".//a", "href"),
		                   "key", below(&d, li, ".//span[@class='meta'][1]/code[2]", NULL),
		                   "client", below(&d, li, ".//span[@class='meta'][1]/code[3]", NULL),
		                   "text", below(&d, li, ".", NULL)));
	}
	xmlXPathFreeObject(o);
	if (body != NULL)
		*body = strdup(d.r.body);
	pl_doc_free(&d);
	return out;
}

/* The entries of an inbox that belong to this suite's run key prefix. */
static json_t *
mine(const json_t *entries, const char *prefix)
{
	json_t *out = json_array(), *e;
	size_t i;

	json_array_foreach(entries, i, e)
		if (strncmp(JSTR(e, "key"), prefix, strlen(prefix)) == 0)
			json_array_append(out, e);
	return out;
}

START_TEST(test_inbox_lists_what_one_may_decide)
{
	PGconn *c = tl_pg_connect();
	char prefix[96], k_shared[160], k_own[160], k_sales[160], k_done[160], k_old[160];
	char id_a[64], id_a2[64], id_b[64], id_b2[64], id_old[64], *tok[8], *body = NULL;
	char href_a[128], href_b[128];
	struct tl_resp r;
	json_t *e, *m;
	size_t i, j, nt = 0;
	const char *people[][2] = {
		{ PERSON, PERSON_GROUPS },
		{ "ivan@example.com", "customer support" },
		{ "aigerim@example.com", "служба поддержки, sales team" },
	};

	snprintf(prefix, sizeof(prefix), "%s-inbox", tl_run);
	snprintf(k_shared, sizeof(k_shared), "%s:support/ru/4821-77", prefix);
	snprintf(k_own, sizeof(k_own), "%s:own", prefix);
	snprintf(k_sales, sizeof(k_sales), "%s:sales", prefix);
	snprintf(k_done, sizeof(k_done), "%s:done", prefix);
	snprintf(k_old, sizeof(k_old), "%s:expired", prefix);

	/* expired, then decided, then the others, oldest first */
	mail_run(dl_key_dev, k_old, "ru_short", ten_recipients("old@inbox.example.com"), REQUESTER,
	         &r);
	tok[nt++] = dl_token_of(&r, 0, id_old, sizeof(id_old));
	tl_resp_free(&r);
	{
		const char *p[1] = { k_old };

		ck_assert_int_eq(tl_pg_exec(c, "UPDATE approvals SET expires_at = now() - interval"
		                               " '1 second' WHERE idempotency_key = $1", 1, p), 2);
	}
	mail_run(dl_key_dev, k_done, "zh_short", ten_recipients("done@inbox.example.com"), REQUESTER,
	         &r);
	tok[nt++] = dl_token_of(&r, 0, NULL, 0);
	tl_resp_free(&r);
	{
		char path[128];

		snprintf(path, sizeof(path), "/approve/%s", tok[nt - 1]);
		ck_assert_int_eq(pl_decide_at(path, "ivan@example.com", "customer support", "reject", NULL,
		                           0), 303);
	}
	/* requested by the person: separation of duties keeps it out */
	mail_run(dl_key_dev, k_own, "ja_short", ten_recipients("own@inbox.example.com"), PERSON, &r);
	tok[nt++] = dl_token_of(&r, 0, NULL, 0);
	tl_resp_free(&r);
	/* another group's run (sales) */
	dl_claim_and_output(dl_key_dev, k_sales, "crm_tag_sampled",
			    json_pack("{s:s, s:f, s:s}", "tag", "lead", "confidence", 0.97, "reason",
				      tl_corpus_mail_str("he_short", "body")),
			    json_pack("{s:s, s:s, s:{s:s}}", "type", "crm.tag", "target", "demo_http",
				      "payload", "contact_id", "c-4821"),
			    REQUESTER, &r);
	ck_assert_msg(r.status == 202 && strcmp(JSTR(r.json, "outcome"), "awaiting_human") == 0,
	              "crm_tag_sampled: %.500s", r.body);
	tok[nt++] = dl_token_of(&r, 0, NULL, 0);
	tl_resp_free(&r);
	/* its card shows the request as the HTTP provider sends it */
	{
		char path[128], *conf = tl_file_slurp(tl_env("ONCEGATE_CONF"), NULL), *u, *req, *rb;
		struct pl_doc d;

		snprintf(path, sizeof(path), "/approve/%s", tok[nt - 1]);
		pl_doc_get(path, "sofia@example.com", "sales", &d);
		ASSERT_STATUS(&d.r, 200);
		ck_assert_uint_eq(pl_doc_count(&d, "//div[@class='mail']"), 0);
		req = pl_doc_text1(&d, "//div[@class='http']//dt[.='Request']/following-sibling::dd[1]");
		rb = pl_doc_text1(&d, "//div[@class='http']//pre");
		u = conf != NULL ? strstr(conf, "[target demo_http]") : NULL;
		u = u != NULL ? strstr(u, "url = ") : NULL;
		ck_assert_ptr_nonnull(u);
		u += 6;
		u[strcspn(u, "\r\n")] = '\0';
		ck_assert_msg(strncmp(req, "POST ", 5) == 0 && strcmp(req + 5, u) == 0,
		              "the card's request is \"%s\", want \"POST %s\"", req, u);
		ck_assert_msg(strstr(rb, "\"contact_id\": \"c-4821\"") && strstr(rb, "\"tag\": \"lead\""),
		              "the card's request body: %s", rb);
		free(req);
		free(rb);
		free(conf);
		pl_doc_free(&d);
	}
	/* two tenants, one business key: two entries, told apart by client */
	mail_run(dl_key_dev, k_shared, "ru_reply", ten_recipients("a@inbox.example.com"), REQUESTER,
	         &r);
	tok[nt++] = dl_token_of(&r, 0, id_a, sizeof(id_a));
	tok[nt++] = dl_token_of(&r, 1, id_a2, sizeof(id_a2));
	tl_resp_free(&r);
	tl_sleep_ms(20);
	mail_run(dl_key_b, k_shared, "he_reply", ten_recipients("b@inbox.example.com"), REQUESTER,
	         &r);
	tok[nt++] = dl_token_of(&r, 0, id_b, sizeof(id_b));
	tok[nt++] = dl_token_of(&r, 1, id_b2, sizeof(id_b2));
	tl_resp_free(&r);

	for (i = 0; i < sizeof(people) / sizeof(people[0]); i++) {
		json_t *all = inbox_of(people[i][0], people[i][1], &body), *got = mine(all, prefix);
		const json_t *first = json_array_get(got, 0), *second = json_array_get(got, 1);
		size_t k;

		/* exactly the shared key's two runs, newest (the other tenant's)
		 * first, and for anyone but its requester the run PERSON asked for */
		size_t want = i == 0 ? 2 : 3;

		ck_assert_msg(json_array_size(got) == want,
		              "%s in \"%s\" sees %zu of this test's runs, want %zu: %s", people[i][0],
		              people[i][1], json_array_size(got), want, json_dumps(got, JSON_COMPACT));
		ck_assert_str_eq(JSTR(first, "key"), k_shared);
		ck_assert_str_eq(JSTR(second, "key"), k_shared);
		ck_assert_str_eq(JSTR(first, "client"), dl_client_b);
		ck_assert_str_eq(JSTR(second, "client"), "dev");
		if (want == 3)
			ck_assert_str_eq(JSTR(json_array_get(got, 2), "key"), k_own);
		/* each links to one of its run's challenges by id */
		snprintf(href_b, sizeof(href_b), "/approve/card/%s", id_b);
		snprintf(href_a, sizeof(href_a), "/approve/card/%s", id_b2);
		ck_assert_msg(strcmp(JSTR(first, "href"), href_b) == 0 ||
		              strcmp(JSTR(first, "href"), href_a) == 0,
		              "the other tenant's entry links to %s", JSTR(first, "href"));
		snprintf(href_b, sizeof(href_b), "/approve/card/%s", id_a);
		snprintf(href_a, sizeof(href_a), "/approve/card/%s", id_a2);
		ck_assert_msg(strcmp(JSTR(second, "href"), href_b) == 0 ||
		              strcmp(JSTR(second, "href"), href_a) == 0,
		              "dev's entry links to %s", JSTR(second, "href"));
		/* the title is the mail's subject; age and expiry are shown */
		ck_assert_msg(strstr(JSTR(first, "text"), tl_corpus_mail_str("he_reply", "subject")),
		              "the entry does not show the mail's subject: %s", JSTR(first, "text"));
		ck_assert_msg(strstr(JSTR(first, "text"), "Waiting under a minute") &&
		              strstr(JSTR(first, "text"), "(in 23 h 59 min)"),
		              "the entry does not show its age and expiry: %s", JSTR(first, "text"));
		/* every entry of the whole inbox links to a card by id, and the
		 * page holds no token of any of these runs */
		json_array_foreach(all, k, e)
			ck_assert_msg(strncmp(JSTR(e, "href"), "/approve/card/", 14) == 0 &&
			              strlen(JSTR(e, "href")) == 14 + 36,
			              "an inbox entry links to %s", JSTR(e, "href"));
		for (k = 0; k < nt; k++)
			ck_assert_msg(strstr(body, tok[k]) == NULL, "the inbox holds a raw token");
		free(body);
		body = NULL;
		json_decref(got);
		json_decref(all);
	}
	/* groups are whole names: none of these sees the inbox_mail runs */
	{
		const char *other[] = { "support", "customer support team, Customer Support",
			                "служба, поддержки", "sales" };

		for (i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
			json_t *all = inbox_of("petr@example.com", other[i], NULL), *got = mine(all, prefix);

			json_array_foreach(got, j, m)
				ck_assert_msg(strcmp(JSTR(m, "key"), k_sales) == 0 &&
				              strcmp(other[i], "sales") == 0,
				              "groups \"%s\" see %s", other[i], JSTR(m, "key"));
			json_decref(got);
			json_decref(all);
		}
	}
	for (i = 0; i < 8; i++)
		free(tok[i]);
	PQfinish(c);
}
END_TEST

START_TEST(test_empty_inbox)
{
	const char *groups[] = { "marketing,служба маркетинга", NULL };
	char user[128], *body = NULL;
	size_t i;

	snprintf(user, sizeof(user), "nobody.%s@example.com", tl_run);
	for (i = 0; i < 2; i++) {
		struct pl_doc d;
		char *text;
		json_t *all = inbox_of(user, groups[i], &body);

		ck_assert_uint_eq(json_array_size(all), 0);
		json_decref(all);
		free(body);
		pl_doc_get("/approve/", user, groups[i], &d);
		ASSERT_STATUS(&d.r, 200);
		text = pl_doc_all_text(&d);
		ck_assert_msg(strstr(text, "Nothing is waiting for your decision") != NULL &&
		              strstr(text, user) != NULL,
		              "the empty inbox does not say so: %.500s", text);
		ck_assert_uint_eq(pl_doc_count(&d, "//ol"), 0);
		ck_assert_uint_eq(pl_doc_count(&d, "//form"), 0);
		free(text);
		pl_doc_free(&d);
	}
	/* not signed in: told to sign in */
	{
		struct tl_resp r;

		dl_page_request("/approve/", NULL, NULL, NULL, NULL, &r, NULL);
		ASSERT_STATUS(&r, 401);
		ck_assert_msg(strstr(r.body, "Sign in") != NULL, "%.300s", r.body);
		tl_resp_free(&r);
	}
}
END_TEST

/* What a model drafted is text in the inbox, never markup. */
START_TEST(test_inbox_shows_text_not_markup)
{
	char key[160], subject[256], *body = NULL;
	struct tl_resp r;
	struct pl_doc d;
	json_t *all, *got;

	snprintf(key, sizeof(key), "%s-markup:<b>заказ</b>", tl_run);
	snprintf(subject, sizeof(subject),
	         "<script>alert(1)</script><img src=x onerror=alert(2)> Заказ 訂單 طلب 🙏🏽");
	dl_mail_output(dl_key_dev, key, CONTRACT, subject, tl_corpus_mail_str("he_short", "body"),
	               json_pack("[s]", "markup@inbox.example.com"), REQUESTER, &r);
	ck_assert_msg(r.status == 202, "%.500s", r.body);
	tl_resp_free(&r);
	all = inbox_of(PERSON, PERSON_GROUPS, &body);
	got = mine(all, key);
	ck_assert_uint_eq(json_array_size(got), 1);
	ck_assert_msg(strstr(JSTR(json_array_get(got, 0), "text"), subject) != NULL,
	              "the entry does not show the subject as text: %s",
	              JSTR(json_array_get(got, 0), "text"));
	ck_assert_str_eq(JSTR(json_array_get(got, 0), "key"), key);
	json_decref(got);
	json_decref(all);
	free(body);
	pl_doc_get("/approve/", PERSON, PERSON_GROUPS, &d);
	ck_assert_uint_eq(pl_doc_count(&d, "//script | //img | //b | //@onerror"), 0);
	pl_doc_free(&d);
}
END_TEST

/* ---- may not decide ------------------------------------------------------------- */

START_TEST(test_may_not_decide)
{
	char key[160], id[64], path[128], *token, *text;
	struct tl_resp r;
	struct pl_doc d;

	snprintf(key, sizeof(key), "%s-maynot:заказ/4821", tl_run);
	mail_run(dl_key_dev, key, "emoji_reply", ten_recipients("maynot@inbox.example.com"), PERSON,
	         &r);
	token = dl_token_of(&r, 0, id, sizeof(id));
	tl_resp_free(&r);
	snprintf(path, sizeof(path), "/approve/%s", token);

	/* not among the approvers: that the link is not theirs, no form, and
	 * nothing of the request */
	pl_doc_get(path, "mallory@example.com", "support,customer support team", &d);
	ASSERT_STATUS(&d.r, 403);
	ck_assert_uint_eq(pl_doc_count(&d, "//form"), 0);
	ck_assert_uint_eq(pl_doc_count(&d, "//input[@name='csrf']"), 0);
	ck_assert_uint_eq(pl_doc_count(&d, "//button"), 0);
	text = pl_doc_all_text(&d);
	ck_assert_msg(strstr(text, "Not your approval") &&
	              strstr(text, "You are not among the approvers this link was issued to."),
	              "the page does not say why: %.800s", text);
	ck_assert_msg(strstr(text, tl_corpus_mail_str("emoji_reply", "subject")) == NULL,
	              "the page shows the mail to a person who may not decide it");
	free(text);
	pl_doc_free(&d);

	/* the requester, under separation of duties: the same, and why */
	pl_doc_get(path, PERSON, PERSON_GROUPS, &d);
	ASSERT_STATUS(&d.r, 403);
	ck_assert_uint_eq(pl_doc_count(&d, "//form"), 0);
	text = pl_doc_all_text(&d);
	ck_assert_msg(strstr(text, "You requested this action, so someone else must approve it."),
	              "the requester's page does not say why: %.800s", text);
	free(text);
	pl_doc_free(&d);

	/* by id, a person outside the approvers finds nothing */
	snprintf(path, sizeof(path), "/approve/card/%s", id);
	pl_doc_get(path, "mallory@example.com", "support", &d);
	ASSERT_STATUS(&d.r, 404);
	ck_assert_uint_eq(pl_doc_count(&d, "//form"), 0);
	ck_assert_msg(strstr(d.r.body, tl_corpus_mail_str("emoji_reply", "subject")) == NULL,
	              "the card by id shows the mail to a person outside its approvers");
	pl_doc_free(&d);
	free(token);
}
END_TEST

/* ---- the card by id: the same POST guarantees -------------------------------------- */

START_TEST(test_card_by_id_decides_once)
{
	PGconn *c = tl_pg_connect();
	char key[160], id[64], id2[64], other_id[64], path[128], tpath[128], *token, *token2;
	char *before, *csrf_other, *form;
	const char *p1[1] = { key }, *pid[1] = { id };
	struct tl_resp r;
	struct pl_doc d;

	snprintf(key, sizeof(key), "%s-byid:ticket 48213", tl_run);
	mail_run(dl_key_dev, key, "ru_reply", ten_recipients("byid@inbox.example.com"), REQUESTER,
	         &r);
	token = dl_token_of(&r, 0, id, sizeof(id));
	token2 = dl_token_of(&r, 1, id2, sizeof(id2));
	tl_resp_free(&r);
	{
		char k2[160];

		snprintf(k2, sizeof(k2), "%s-byid-other", tl_run);
		mail_run(dl_key_dev, k2, "ru_short", ten_recipients("other@inbox.example.com"),
		         REQUESTER, &r);
		free(dl_token_of(&r, 0, other_id, sizeof(other_id)));
		tl_resp_free(&r);
	}
	snprintf(path, sizeof(path), "/approve/card/%s", id);
	snprintf(tpath, sizeof(tpath), "/approve/%s", token);
	before = tl_run_snapshot(c, key);

	/* from another origin: refused, nothing changed */
	pl_doc_get(path, PERSON, PERSON_GROUPS, &d);
	ASSERT_STATUS(&d.r, 200);
	{
		char *csrf = pl_doc_csrf(&d);

		ck_assert_ptr_nonnull(csrf);
		form = tl_form("decision", "approve", "csrf", csrf, (char *)NULL);
		dl_page_request(path, PERSON, PERSON_GROUPS, form, "http://evil.example", &r, NULL);
		ASSERT_STATUS(&r, 403);
		tl_resp_free(&r);
		free(form);
		free(csrf);
	}
	pl_doc_free(&d);
	/* a CSRF value of another challenge: refused */
	csrf_other = tl_csrf_for(other_id, PERSON);
	form = tl_form("decision", "approve", "csrf", csrf_other, (char *)NULL);
	dl_page_request(path, PERSON, PERSON_GROUPS, form, NULL, &r, NULL);
	ASSERT_STATUS(&r, 403);
	tl_resp_free(&r);
	free(form);
	free(csrf_other);
	tl_expect_run_unchanged(c, key, before, "refused POSTs on the card by id");
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1"
	                             " AND state = 'pending'", 1, p1), 2);

	/* the decision: one transaction, the challenge consumed once */
	ck_assert_int_eq(pl_decide_at(path, "ivan@example.com", "customer support", "approve", NULL, 0),
	                 303);
	{
		char *row = tl_pg_value(c, "SELECT state || ' ' || approver_subject || ' ' || decision"
		                           " FROM approvals WHERE id = $1::uuid", 1, pid);

		ck_assert_str_eq(row, "decided ivan@example.com approve");
		free(row);
	}
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1"
	                             " AND state = 'voided'", 1, p1), 1);
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM effect_outbox WHERE"
	                             " idempotency_key = $1", 1, p1), 1);
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM workflow_runs WHERE"
	                             " idempotency_key = $1 AND state = 'approved' AND"
	                             " decided_by = 'ivan@example.com'", 1, p1), 1);
	/* again, by id: the decided page, nothing more */
	csrf_other = tl_csrf_for(id, PERSON);
	form = tl_form("decision", "reject", "csrf", csrf_other, (char *)NULL);
	dl_page_request(path, PERSON, PERSON_GROUPS, form, NULL, &r, NULL);
	ck_assert_msg(r.status == 410 || r.status == 409, "a second POST: HTTP %ld", r.status);
	tl_resp_free(&r);
	free(form);
	free(csrf_other);
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM effect_outbox WHERE"
	                             " idempotency_key = $1", 1, p1), 1);
	/* the emailed link, and the inbox: decided, gone */
	pl_doc_get(tpath, PERSON, PERSON_GROUPS, &d);
	ASSERT_STATUS(&d.r, 410);
	ck_assert_msg(strstr(d.r.body, "ivan@example.com") != NULL, "the link's page: %.500s",
	              d.r.body);
	pl_doc_free(&d);
	{
		json_t *all = inbox_of(PERSON, PERSON_GROUPS, NULL), *e;
		size_t i;

		json_array_foreach(all, i, e)
			ck_assert_msg(strcmp(JSTR(e, "key"), key) != 0, "the decided run is still listed");
		json_decref(all);
	}
	/* an id that is no challenge */
	pl_doc_get("/approve/card/00000000-0000-4000-8000-000000000000", PERSON, PERSON_GROUPS, &d);
	ASSERT_STATUS(&d.r, 404);
	pl_doc_free(&d);
	free(before);
	free(token);
	free(token2);
	PQfinish(c);
}
END_TEST

TL_SUITE(inbox_suite, "inbox",
         {"pages", 60,
          .tests = TL_LIST(test_inbox_lists_what_one_may_decide, test_empty_inbox,
                           test_inbox_shows_text_not_markup, test_may_not_decide,
                           test_card_by_id_decides_once)},
         {"as sent", SETTLE_S + 60, dl_tcase, .tests = TL_LIST(test_mail_as_sent)})

DL_TENANTS_MAIN("check_inbox", "ib", .suite = inbox_suite, .smtp = true)

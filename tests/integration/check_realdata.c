/*
 * check_realdata.c — integration suite: the promises that short,
 * single-tenant test data never tested, with the data of tests/data/corpus.
 *
 *   groups     identity headers as SSO proxies send them (oauth2-proxy's
 *              comma-joined X-Auth-Request-Groups, names with spaces,
 *              Keycloak group paths, Azure GUIDs): a person may decide for
 *              group:support exactly when one comma-separated item, trimmed,
 *              is the whole name "support";
 *   delivery   two tenants (API clients) use one business key of 200
 *              characters; each hands in its own long mail (every script,
 *              200 + 5,000 code points, 100 recipients, the test contract
 *              mail_list: sent after a one-second window) and its own tag
 *              (crm_tag: approved by the rules, or by sales when sampled);
 *              the real dispatcher sends them to loopback providers that
 *              honour idempotency keys: each tenant's mail and tag arrive
 *              exactly once, as handed in byte for byte (MIME-decoded), under
 *              the provider key stored for that tenant's effect and a
 *              Message-ID of its own, and each effect stores the provider id
 *              of its own delivery.
 *
 * It runs against the stack of ./dev test like check_dispatch (which loads
 * the test contracts of tests/data/contracts-test beside the shipped ones).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "canon.h"
#include "dispatchlib.h"
#include "testlib.h"

#define APPROVER       "erin@example.com"
#define REQUESTER      "alice@example.com"
#define MAIL_FROM      "support@realdata.example.com"
#define SETTLE_S       60   /* how long the dispatcher may take for the effects */


#define JSTR(o, n) (tl_jstr((o), (n)) ? tl_jstr((o), (n)) : "(none)")

/* ---- the API ------------------------------------------------------------- */

/* GET or POST /approve/TOKEN as user in groups (the header as the SSO
 * proxy sends it) from our own origin. */
static void
approval_request(const char *token, const char *user, const char *groups, const char *form,
                 struct tl_resp *r)
{
	char path[128];

	snprintf(path, sizeof(path), "/approve/%s", token);
	dl_page_request(path, user, groups, form, NULL, r, NULL);
}

/* The value of the page's hidden csrf input (malloc'd), or NULL. */
static char *
csrf_value(const char *page)
{
	const char *p = strstr(page, "name=\"csrf\""), *v, *e;

	if (p == NULL)
		return NULL;
	/* the input element around it */
	while (p > page && *p != '<')
		p--;
	v = strstr(p, "value=\"");
	if (v == NULL)
		return NULL;
	v += 7;
	e = strchr(v, '"');
	return e != NULL ? strndup(v, (size_t)(e - v)) : NULL;
}

/* Opens the page as user in groups and POSTs decision=approve with its
 * CSRF value; the POST's HTTP status. With approval_id, a page that shows
 * user no form is allowed: the POST then carries the value a person who
 * once had the form holds (tl_csrf_for), and *had_form says which. */
static long
approve_as(const char *token, const char *approval_id, const char *user, const char *groups,
           bool *had_form)
{
	struct tl_resp r;
	char *csrf, *form;
	long st;

	approval_request(token, user, groups, NULL, &r);
	/* a person who may not decide is told the link is not theirs (403),
	 * and sees nothing of the request */
	ck_assert_msg(r.status == 200 || (r.status == 403 && approval_id != NULL &&
	                                  strstr(r.body, "Not your approval") != NULL &&
	                                  strstr(r.body, "anna.morozova") == NULL),
	              "GET /approve/ as %s in \"%s\": HTTP %ld %.500s", user, groups, r.status,
	              r.body);
	csrf = r.status == 200 ? csrf_value(r.body) : NULL;
	tl_resp_free(&r);
	if (had_form != NULL)
		*had_form = csrf != NULL;
	if (csrf == NULL && approval_id != NULL)
		csrf = tl_csrf_for(approval_id, user);
	ck_assert_msg(csrf != NULL, "the approval page has no CSRF value for %s in \"%s\"", user,
	              groups);
	form = tl_form("decision", "approve", "csrf", csrf, "reason", "realdata", (char *)NULL);
	approval_request(token, user, groups, form, &r);
	st = r.status;
	tl_resp_free(&r);
	free(form);
	free(csrf);
	return st;
}

static json_t *
reply(const char *mail_id)
{
	return json_pack("{s:s, s:s, s:s, s:f}", "subject", tl_corpus_mail_str(mail_id, "subject"),
	                 "body", tl_corpus_mail_str(mail_id, "body"), "tone", "formal",
	                 "confidence", 0.62);
}

/* ===== groups ==================================================================== */

/* Each group header of the corpus, as the SSO proxy sends it: a person
 * with it may approve a group:support challenge exactly when the corpus
 * says so (303), else the POST is refused (403) and the run does not
 * change. */
START_TEST(test_group_headers)
{
	json_t *doc = tl_corpus_load("groups.json"), *cases = json_object_get(doc, "cases");
	const json_t *gc = json_array_get(cases, (size_t)_i);
	const char *header = tl_jstr(gc, "header");
	bool may = json_is_true(json_object_get(gc, "matches_group_support"));
	PGconn *c = tl_pg_connect();
	char key[128], id[64], *token, *before;
	struct tl_resp r;
	bool form = false;
	long st;

	ck_assert_ptr_nonnull(header);
	snprintf(key, sizeof(key), "%s-groups-%d", tl_run, _i);
	dl_claim_and_output(dl_key_dev, key, "support_reply", reply("ru_reply"),
			    json_pack("{s:s, s:s, s:{s:s}}", "type", "email.send", "target", "demo_smtp",
				      "payload", "to", "anna.morozova@example.com"),
			       REQUESTER, &r);
	token = dl_token_of(&r, 0, id, sizeof(id));
	tl_resp_free(&r);
	before = tl_run_snapshot(c, key);
	st = approve_as(token, id, APPROVER, header, &form);
	if (may) {
		ck_assert_msg(form, "groups \"%s\" (%s) include support: the page shows no form",
		              header, JSTR(gc, "source"));
		ck_assert_msg(st == 303, "groups \"%s\" (%s) include support: HTTP %ld, expected 303",
		              header, JSTR(gc, "source"), st);
	} else {
		ck_assert_msg(!form, "groups \"%s\" (%s) do not include the group support, yet the "
		              "page shows the decision form", header, JSTR(gc, "source"));
		ck_assert_msg(st == 403, "groups \"%s\" (%s) do not include the group support: "
		              "HTTP %ld, expected 403", header, JSTR(gc, "source"), st);
		tl_expect_run_unchanged(c, key, before, "a POST by someone outside group support");
	}
	free(before);
	free(token);
	json_decref(doc);
	PQfinish(c);
}
END_TEST

/* ===== delivery ==================================================================== */

struct delivery {
	const char *bearer, *client, *mail;
	char first[128];   /* the first recipient: names the tenant */
	char contact[128]; /* the tag's contact: names the tenant */
};

START_TEST(test_two_tenants_one_key)
{
	json_t *tenants = tl_corpus_load("tenants.json"), *rc = tl_corpus_load("recipients.json");
	struct delivery d[2] = {
		{ .bearer = dl_key_dev, .client = "dev", .mail = "mixed_max" },
		{ .bearer = dl_key_b, .client = dl_client_b, .mail = "he_max" },
	};
	PGconn *c = tl_pg_connect();
	char prefix[96];
	char *key, *tag_key;
	json_t *mails, *committed;
	struct dl_disp disp;
	double deadline;
	size_t i, j;

	ck_assert_msg(dl_key_b != NULL, "no second client: `oncegatectl client add` failed");
	(void)tl_ctl(NULL, "sends", "resume", "--reason", "check_realdata sends to loopback",
	             (char *)NULL);
	snprintf(prefix, sizeof(prefix), "%s:", tl_run);
	key = tl_corpus_key(prefix, json_string_value(json_array_get(
	                                json_object_get(tenants, "long_keys"), 6)), 200);
	snprintf(prefix, sizeof(prefix), "%s-tag:", tl_run);
	tag_key = tl_corpus_key(prefix, json_string_value(json_array_get(
	                                    json_object_get(tenants, "long_keys"), 1)), 200);
	ck_assert_uint_eq(tl_utf8_chars(key), 200);

	for (i = 0; i < 2; i++) {
		json_t *to = json_array();
		struct tl_resp r;
		char *token;

		snprintf(d[i].first, sizeof(d[i].first), "customer+%s@realdata.example.com",
		         i == 0 ? "dev" : "b");
		snprintf(d[i].contact, sizeof(d[i].contact), "contact-of-%s", d[i].client);
		json_array_append_new(to, json_string(d[i].first));
		for (j = 0; j < 99; j++)
			json_array_append(to, json_array_get(json_object_get(rc, "max"), j));
		/* the mail to a list: the test contract mail_list (the shipped
		 * support_reply takes exactly one address); subject and body come
		 * from the output, and it goes after its one-second window */
		dl_claim_and_output(d[i].bearer, key, "mail_list",
				    json_pack("{s:s, s:s}", "subject",
					      tl_corpus_mail_str(d[i].mail, "subject"), "body",
					      tl_corpus_mail_str(d[i].mail, "body")),
				    json_pack("{s:s, s:s, s:{s:o}}", "type", "email.send", "target",
					      "demo_smtp", "payload", "to", to),
				       REQUESTER, &r);
		ck_assert_msg(r.status == 202 && strcmp(JSTR(r.json, "outcome"), "approved") == 0,
		              "%s's mail_list output: HTTP %ld %.1000s", d[i].client, r.status,
		              r.body);
		tl_resp_free(&r);
		/* the tag: approved by the rules, or by sales when sampled; the
		 * payload names only the contact, the tag comes from the output */
		dl_claim_and_output(d[i].bearer, tag_key, "crm_tag",
				    json_pack("{s:s, s:f, s:s}", "tag", "lead", "confidence", 0.97, "reason",
					      tl_corpus_mail_str("zh_short", "body")),
				    json_pack("{s:s, s:s, s:{s:s}}", "type", "crm.tag", "target",
					      "demo_http", "payload", "contact_id", d[i].contact),
				       REQUESTER, &r);
		ck_assert_msg(r.status == 202, "crm_tag output: HTTP %ld %.500s", r.status, r.body);
		if (strcmp(JSTR(r.json, "outcome"), "awaiting_human") == 0) {
			token = dl_token_of(&r, 0, NULL, 0);
			ck_assert_int_eq(approve_as(token, NULL, APPROVER, "sales", NULL), 303);
			free(token);
		}
		tl_resp_free(&r);
	}

	dl_disp_start_demo(&disp, MAIL_FROM);
	{
		const char *p[2] = { key, tag_key };

		deadline = tl_now() + SETTLE_S;
		while (tl_pg_count(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key IN "
		                      "($1, $2) AND state IN ('pending', 'sending')", 2, p) > 0 &&
		       tl_now() < deadline)
			tl_sleep_ms(200);
	}
	(void)dl_disp_stop(&disp, 20);

	mails = dl_mails_received();
	committed = prov_call("GET", "/_committed");
	for (i = 0; i < 2; i++) {
		const char *p[3] = { d[i].client, key, tag_key };
		char *mail_state = tl_pg_value(c, "SELECT e.state || ' ' || coalesce(e.provider_id, '')"
		                                  " FROM effect_outbox e JOIN api_clients a ON"
		                                  " a.id = e.client_id WHERE a.name = $1 AND"
		                                  " e.idempotency_key = $2", 2, p);
		const char *pt[2] = { d[i].client, tag_key };
		char *tag_state = tl_pg_value(c, "SELECT e.state || ' ' || coalesce(e.provider_id, '')"
		                                 " FROM effect_outbox e JOIN api_clients a ON"
		                                 " a.id = e.client_id WHERE a.name = $1 AND"
		                                 " e.idempotency_key = $2", 2, pt);
		json_t *m, *got = NULL, *cm, *got_tag = NULL;
		size_t n = 0, nt = 0;
		char want[160];

		/* the mail: once, to this tenant's recipients, as approved */
		json_array_foreach(mails, j, m) {
			if (strcmp(json_string_value(json_array_get(json_object_get(m, "rcpt"), 0)) ?: "",
			           d[i].first) == 0) {
				got = m;
				n++;
			}
		}
		ck_assert_msg(n == 1, "%s's mail arrived %zu times (effect: %s)", d[i].client, n,
		              mail_state ? mail_state : "(no row)");
		ck_assert_uint_eq(json_array_size(json_object_get(got, "rcpt")), 100);
		ck_assert_msg(strcmp(JSTR(got, "subject"), tl_corpus_mail_str(d[i].mail, "subject")) == 0,
		              "%s's mail: the subject is not the approved one: %s", d[i].client,
		              JSTR(got, "subject"));
		ck_assert_msg(strcmp(JSTR(got, "body"), tl_corpus_mail_str(d[i].mail, "body")) == 0,
		              "%s's mail: the body is not the approved one (%zu bytes, want %zu)",
		              d[i].client, strlen(JSTR(got, "body")),
		              strlen(tl_corpus_mail_str(d[i].mail, "body")));
		snprintf(want, sizeof(want), "completed %s", JSTR(got, "queue_id"));
		ck_assert_msg(mail_state != NULL && strcmp(mail_state, want) == 0,
		              "%s's mail effect is \"%s\", want \"%s\" (its own delivery)", d[i].client,
		              mail_state ? mail_state : "(no row)", want);
		/* the tag: committed once, under this tenant's effect */
		json_array_foreach(committed, j, cm) {
			json_t *b = json_loads(JSTR(cm, "body"), 0, NULL);

			if (b != NULL && strcmp(JSTR(b, "contact_id"), d[i].contact) == 0) {
				ck_assert_msg(strcmp(JSTR(b, "tag"), "lead") == 0,
				              "%s's tag arrived as %s", d[i].client, JSTR(cm, "body"));
				got_tag = cm;
				nt++;
			}
			json_decref(b);
		}
		ck_assert_msg(nt == 1, "%s's tag was committed %zu times at the provider (effect: %s)",
		              d[i].client, nt, tag_state ? tag_state : "(no row)");
		snprintf(want, sizeof(want), "completed %s", JSTR(got_tag, "id"));
		ck_assert_msg(tag_state != NULL && strcmp(tag_state, want) == 0,
		              "%s's tag effect is \"%s\", want \"%s\" (its own delivery)", d[i].client,
		              tag_state ? tag_state : "(no row)", want);
		/* ... under the provider key stored for this tenant's effect */
		{
			char *pkey = tl_pg_value(c, "SELECT e.provider_key FROM effect_outbox e JOIN"
			                            " api_clients a ON a.id = e.client_id WHERE"
			                            " a.name = $1 AND e.idempotency_key = $2", 2, pt);

			ck_assert_msg(pkey != NULL && strcmp(pkey, JSTR(got_tag, "idempotency_key")) == 0,
			              "%s's tag arrived under the key %s, its effect stores %s",
			              d[i].client, JSTR(got_tag, "idempotency_key"), pkey ? pkey : "(none)");
			free(pkey);
		}
		free(mail_state);
		free(tag_state);
	}
	/* neither a Message-ID nor a provider key is shared by the tenants */
	ck_assert_msg(strcmp(JSTR(json_array_get(mails, 0), "message_id"),
	                     JSTR(json_array_get(mails, 1), "message_id")) != 0,
	              "two tenants' mails share the Message-ID %s",
	              JSTR(json_array_get(mails, 0), "message_id"));
	{
		const char *p[2] = { key, tag_key };

		ck_assert_int_eq(tl_pg_count(c, "SELECT count(DISTINCT provider_key) FROM effect_outbox"
		                             " WHERE idempotency_key IN ($1, $2)", 2, p), 4);
	}
	json_decref(mails);
	json_decref(committed);
	json_decref(tenants);
	json_decref(rc);
	free(key);
	free(tag_key);
	PQfinish(c);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------- */

static Suite *
realdata_suite(void)
{
	Suite *s = suite_create("realdata");
	json_t *groups = NULL;
	json_error_t e;
	char path[PATH_MAX];
	TCase *tc;

	snprintf(path, sizeof(path), "%s/tests/data/corpus/groups.json",
	         tl_env("srcdir") ? tl_env("srcdir") : ".");
	groups = json_load_file(path, 0, &e);

	tc = tl_tcase(s, "groups", 60);
	/* an unreadable corpus still runs one case, which then fails saying why */
	tcase_add_loop_test(tc, test_group_headers, 0,
	                    groups != NULL ? (int)json_array_size(json_object_get(groups, "cases"))
	                                   : 1);

	tc = dl_tcase(s, "delivery", SETTLE_S + 60);
	tcase_add_test(tc, test_two_tenants_one_key);
	json_decref(groups);
	return s;
}

DL_TENANTS_MAIN("check_realdata", "rd", .suite = realdata_suite, .smtp = true)

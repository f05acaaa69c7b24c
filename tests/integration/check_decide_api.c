/*
 * check_decide_api.c — integration suite: the decision API,
 * POST /v1/approvals/{id}/decisions, against the stack of ./dev test with
 * the test contract quorum_mail (tests/data/contracts-test: 2 of 3
 * approver entries — "group:customer support", "group:финансовый
 * контроль" and anna.kowalska@example.com — subject and body editable,
 * separation of duties). The client is this run's second tenant, which
 * holds the same keys as the stack's own client.
 *
 *   scope     without a grant: 403 and nothing recorded; the stack's own
 *             client cannot reach the tenant's approval (404); a grant for
 *             another approver entry does not open this one; after
 *             `oncegatectl client grant`, the decision goes through;
 *             `client ungrant` closes it again;
 *   rules     the page's rules hold: the requester may not approve
 *             (separation of duties), a person outside the approvers is
 *             refused, a decision the challenge does not allow is refused,
 *             each person votes once, a correction that breaks the
 *             contract is a 422 with its errors, malformed bodies are 400 —
 *             each changing nothing;
 *   quorum    a group member corrects the Arabic body and approves (1 of 2),
 *             then a second person's approval with a Cyrillic reason settles
 *             the run: one effect with the corrected text, the votes say "via client", explain
 *             says who decided through which client, the decision log has
 *             approval.voted and approval.consumed;
 *   race      30 decisions at once, half through the API and half through
 *             the page, by 30 different people: exactly two votes, one
 *             effect; a closed approval then answers 409 approval_closed.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "dispatchlib.h"
#include "testlib.h"

#define CONTRACT  "quorum_mail"
#define ANNA      "anna.kowalska@example.com"
#define REQUESTER "olga.petrova@example.com"
#define RACERS    30

#define JSTR(o, n) (tl_jstr((o), (n)) ? tl_jstr((o), (n)) : "(none)")

/* A run of the tenant (bearer) for key, requested by REQUESTER: its three
 * challenges. */
static void
mail_run(const char *bearer, const char *key, struct dl_links *l)
{
	dl_mail_run(bearer, key, CONTRACT, tl_corpus_mail_str("ru_short", "subject"),
	            tl_corpus_mail_str("ru_short", "body"), "klient.ivanova@pochta.example",
	            REQUESTER, l);
}

static long long
votes_of(PGconn *c, const char *key)
{
	const char *p[1] = { key };

	return tl_pg_count(c, "SELECT count(*) FROM approval_votes WHERE idempotency_key = $1", 1,
	                   p);
}

static void
grant(const char *verb, const char *approver)
{
	char *out = NULL;
	int rc = tl_ctl(&out, "client", verb, dl_client_b, "--decide", CONTRACT, "--approver",
	                approver, "--reason", "чат-бот поддержки решает за людей · 支持", (char *)NULL);

	ck_assert_msg(rc == 0, "client %s: exit %d: %s", verb, rc, out ? out : "");
	free(out);
}

START_TEST(test_scope)
{
	PGconn *c = tl_pg_connect();
	struct dl_links l;
	struct tl_resp r;
	char key[160];

	snprintf(key, sizeof(key), "%s:scope/заявка-12 📮", tl_run);
	mail_run(dl_key_b, key, &l);
	/* no grant yet */
	tl_decide_refused(dl_key_b, l.id[2],
	                  json_pack("{s:s, s:s}", "subject", ANNA, "decision", "approve"), 403,
	                  "forbidden");
	/* the stack's own client holds the same key but not this approval */
	tl_decide_refused(dl_key_dev, l.id[2],
	                  json_pack("{s:s, s:s}", "subject", ANNA, "decision", "approve"), 404,
	                  "approval_not_found");
	/* a grant for another entry does not open this one */
	grant("grant", "group:customer support");
	tl_decide_refused(dl_key_b, l.id[2],
	                  json_pack("{s:s, s:s}", "subject", ANNA, "decision", "approve"), 403,
	                  "forbidden");
	ck_assert_int_eq(votes_of(c, key), 0);
	grant("grant", ANNA);
	tl_decide_api(dl_key_b, l.id[2],
	              json_pack("{s:s, s:s, s:s}", "subject", ANNA, "decision", "approve", "reason",
	                        "Проверила, всё верно ✅"), &r);
	ck_assert_msg(r.status == 200, "HTTP %ld %.600s", r.status, r.body);
	ck_assert_str_eq(JSTR(r.json, "decided_by"), ANNA);
	ck_assert_str_eq(JSTR(r.json, "via_client"), dl_client_b);
	ck_assert_str_eq(JSTR(r.json, "state"), "awaiting_human");
	ck_assert(json_is_false(json_object_get(r.json, "final")));
	tl_resp_free(&r);
	ck_assert_int_eq(votes_of(c, key), 1);
	grant("ungrant", ANNA);
	grant("ungrant", "group:customer support");
	tl_decide_refused(dl_key_b, l.id[0],
	                  json_pack("{s:s, s:[s], s:s}", "subject", "agent07@example.com", "groups",
	                            "customer support", "decision", "approve"), 403, "forbidden");
	ck_assert_int_eq(votes_of(c, key), 1);
	PQfinish(c);
}
END_TEST

START_TEST(test_rules)
{
	PGconn *c = tl_pg_connect();
	struct dl_links l;
	struct tl_resp r;
	char key[160], *big;
	char *before;

	snprintf(key, sizeof(key), "%s:rules/申请-34", tl_run);
	mail_run(dl_key_b, key, &l);
	grant("grant", "*");
	before = tl_run_snapshot(c, key);
	/* the requester is in the support group, and may not approve */
	tl_decide_refused(dl_key_b, l.id[0],
	                  json_pack("{s:s, s:[s], s:s}", "subject", REQUESTER, "groups",
	                            "customer support", "decision", "approve"), 403,
	                  "separation_of_duties");
	/* not among the approvers of this challenge */
	tl_decide_refused(dl_key_b, l.id[2],
	                  json_pack("{s:s, s:s}", "subject", "mallory@example.com", "decision",
	                            "approve"), 403, "not_an_approver");
	tl_decide_refused(dl_key_b, l.id[2],
	                  json_pack("{s:s, s:s}", "subject", ANNA, "decision", "maybe"), 422,
	                  "decision_not_allowed");
	/* malformed: unknown member, groups not a list, a subject over 320 bytes */
	tl_decide_refused(dl_key_b, l.id[2],
	                  json_pack("{s:s, s:s, s:b}", "subject", ANNA, "decision", "approve",
	                            "force", 1), 400, "invalid_field");
	tl_decide_refused(dl_key_b, l.id[2],
	                  json_pack("{s:s, s:s, s:s}", "subject", ANNA, "decision", "approve",
	                            "groups", "customer support"), 400, "invalid_field");
	big = malloc(400);
	memset(big, 'a', 399);
	big[399] = '\0';
	tl_decide_refused(dl_key_b, l.id[2],
	                  json_pack("{s:s, s:s}", "subject", big, "decision", "approve"), 400,
	                  "invalid_field");
	free(big);
	ck_assert_int_eq(tl_post_text("/v1/approvals/not-a-uuid/decisions", dl_key_b,
	                              "{\"subject\":\"a@b.example\",\"decision\":\"approve\"}", &r),
	                 0);
	tl_expect_problem(&r, 404, "approval_not_found");
	tl_resp_free(&r);
	/* a correction the contract refuses: 422 with its errors, nothing consumed */
	tl_decide_api(dl_key_b, l.id[2],
	              json_pack("{s:s, s:s, s:{s:s}}", "subject", ANNA, "decision", "approve", "edits",
	                        "subject", "Тема\r\nBcc: attacker@evil.example"), &r);
	tl_expect_problem(&r, 422, "invalid_edit");
	ck_assert(json_array_size(json_object_get(r.json, "errors")) > 0);
	tl_resp_free(&r);
	ck_assert_int_eq(votes_of(c, key), 0);
	tl_expect_run_unchanged(c, key, before, "refused decisions");
	free(before);
	/* one person, one vote: her own entry, then her group's */
	tl_decide_api(dl_key_b, l.id[2],
	              json_pack("{s:s, s:s}", "subject", ANNA, "decision", "approve"), &r);
	ck_assert_msg(r.status == 200, "HTTP %ld %.600s", r.status, r.body);
	tl_resp_free(&r);
	tl_decide_refused(dl_key_b, l.id[0],
	                  json_pack("{s:s, s:[s], s:s}", "subject", "Anna.Kowalska@example.com",
	                            "groups", "customer support", "decision", "approve"), 409,
	                  "already_voted");
	ck_assert_int_eq(votes_of(c, key), 1);
	grant("ungrant", "*");
	PQfinish(c);
}
END_TEST

START_TEST(test_quorum_edit_explain)
{
	PGconn *c = tl_pg_connect();
	const char *p[1];
	struct dl_links l;
	struct tl_resp r;
	char key[160], *out = NULL, *effect;
	long off = tl_log_offset();
	json_t *lines;
	const char *body = tl_corpus_mail_str("ar_reply", "body");

	snprintf(key, sizeof(key), "%s:quorum/طلب-56", tl_run);
	mail_run(dl_key_b, key, &l);
	grant("grant", "*");
	/* the first approver corrects the body (only the first may) */
	tl_decide_api(dl_key_b, l.id[0],
	              json_pack("{s:s, s:[s], s:s, s:{s:s}}", "subject", "li.wei@example.com", "groups",
	                        "customer support", "decision", "approve", "edits", "body", body),
	              &r);
	ck_assert_msg(r.status == 200, "HTTP %ld %.600s", r.status, r.body);
	ck_assert(json_is_false(json_object_get(r.json, "final")));
	ck_assert_int_eq(json_integer_value(json_object_get(r.json, "approvals")), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(r.json, "needed")), 2);
	ck_assert(tl_jstr(r.json, "edited_output_hash") != NULL);
	tl_resp_free(&r);
	tl_decide_api(dl_key_b, l.id[1],
	              json_pack("{s:s, s:[s, s], s:s, s:s}", "subject", "dmitri.volkov@example.com",
	                        "groups", "финансовый контроль", "customer success", "decision",
	                        "approve", "reason", "Сумма возврата сходится с заказом"), &r);
	ck_assert_msg(r.status == 200, "HTTP %ld %.600s", r.status, r.body);
	ck_assert(json_is_true(json_object_get(r.json, "final")));
	ck_assert_str_eq(JSTR(r.json, "state"), "approved");
	effect = strdup(JSTR(r.json, "effect_id"));
	tl_resp_free(&r);
	p[0] = key;
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                                " AND effect_type = 'email.send'", 1, p), 1);
	{
		const char *q[2] = { key, body };

		/* the corrected text is what goes out */
		ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM effect_outbox WHERE"
		                                " idempotency_key = $1 AND payload->>'body' = $2",
		                             2, q), 1);
	}
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM approval_votes v JOIN api_clients k"
	                                " ON k.id = v.via_client_id WHERE v.idempotency_key = $1"
	                                " AND k.id = v.client_id", 1, p), 2);
	/* explain names the person and the client */
	ck_assert_int_eq(tl_ctl(&out, "explain", key, "--client", dl_client_b, (char *)NULL), 0);
	ck_assert_msg(out != NULL && strstr(out, "dmitri.volkov@example.com approve via client") != NULL &&
	                  strstr(out, dl_client_b) != NULL,
	              "explain: %s", out ? out : "");
	free(out);
	lines = tl_log_collect(off, tl_log_is_key, key, 5);
	ck_assert_uint_eq(tl_log_count_event(lines, "approval.voted"), 1);
	ck_assert_uint_eq(tl_log_count_event(lines, "approval.consumed"), 1);
	json_decref(lines);
	free(effect);
	grant("ungrant", "*");
	PQfinish(c);
}
END_TEST

struct racer {
	int i;
	const struct dl_links *l;
	long status;
};

static void
race_thread(void *arg)
{
	struct racer *v = arg;
	struct tl_resp r;
	char user[64];

	snprintf(user, sizeof(user), "agent%02d@example.com", v->i);
	if (v->i % 2 == 0) {
		tl_decide_api(dl_key_b, v->l->id[0],
		              json_pack("{s:s, s:[s], s:s}", "subject", user, "groups", "customer support",
		                        "decision", "approve"), &r);
	} else {
		char *csrf = tl_csrf_for(v->l->id[0], user);
		char *form = tl_form("decision", "approve", "csrf", csrf, (char *)NULL);

		dl_page_request(v->l->path[0], user, "sales team,customer support", form, NULL, &r,
		                NULL);
		free(form);
		free(csrf);
	}
	v->status = r.status;
	tl_resp_free(&r);
}

START_TEST(test_race)
{
	PGconn *c = tl_pg_connect();
	struct racer v[RACERS];
	struct dl_links l;
	struct tl_resp r;
	char key[160];
	const char *p[1] = { key };
	int i, ok = 0;

	snprintf(key, sizeof(key), "%s:race/заявка-90 🚀", tl_run);
	mail_run(dl_key_b, key, &l);
	grant("grant", "group:customer support");
	for (i = 0; i < RACERS; i++)
		v[i] = (struct racer){ .i = i, .l = &l };
	tl_race(race_thread, v, sizeof(v[0]), RACERS);
	for (i = 0; i < RACERS; i++) {
		if (v[i].status == 200 || v[i].status == 303)
			ok++;
		else
			ck_assert_msg(v[i].status == 409 || v[i].status == 410, "racer %d: HTTP %ld", i,
			              v[i].status);
	}
	ck_assert_int_eq(ok, 2);
	ck_assert_int_eq(votes_of(c, key), 2);
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                                " AND effect_type = 'email.send'", 1, p), 1);
	/* settled: the approval takes no more decisions */
	tl_decide_api(dl_key_b, l.id[0],
	              json_pack("{s:s, s:[s], s:s}", "subject", "late.agent@example.com", "groups",
	                        "customer support", "decision", "reject"), &r);
	ck_assert_msg(r.status == 409, "HTTP %ld %.600s", r.status, r.body);
	tl_resp_free(&r);
	grant("ungrant", "group:customer support");
	PQfinish(c);
}
END_TEST

TL_SUITE(decide_suite, "decide_api",
         {"decisions", 120,
          .tests = TL_LIST(test_scope, test_rules, test_quorum_edit_explain, test_race)})

DL_TENANTS_MAIN("check_decide_api", "da", .suite = decide_suite)

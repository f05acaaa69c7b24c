/*
 * check_changes.c — integration suite: "request changes", against the
 * stack of ./dev test with the test contracts changes_mail and
 * changes_notify (tests/data/contracts-test: 2 of 2 approver entries —
 * "group:customer support" and anna.kowalska@example.com — separation of
 * duties, decisions approve, reject and changes_requested, one repair
 * attempt; changes_notify also mails Anna her link). The runs are this
 * suite's second tenant's, whose keys the stack's own client holds too.
 *
 *   round trip  draft 1 gets one approval on the page, then Anna asks for
 *               changes through the decision API with feedback in four
 *               scripts and emoji: the run goes back to processing under its
 *               lease owner (round 2), the workflow's callback carries the
 *               feedback, the other tenant's run of the same key is
 *               untouched; the old links answer 410 "This round is
 *               closed" and change nothing; draft 2 gets new challenges,
 *               the quorum starts again (one approval is 1 of 2), two
 *               approvals settle it; the dispatcher sends exactly one mail,
 *               with draft 2's text; GET of the run, explain and the
 *               decision log show each round;
 *   notices     under changes_notify each round's challenges have notices
 *               of their own; the page offers "Request changes" with its
 *               feedback field, and a request made there needs feedback;
 *   budget      a second request for changes spends the one repair
 *               attempt: the run ends failed_terminal (redrafts_spent),
 *               the callback of round 2 says so, nothing is queued, and a
 *               third draft is refused;
 *   refused     a contract without changes_requested refuses it (422 on
 *               the API, 400 on the page); feedback missing, blank, over
 *               2000 characters, with control characters or a NUL (the JSON
 *               reader's 400), not a string, or given with an approval, or
 *               the requester's own: 4xx, each changing nothing.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "dispatchlib.h"
#include "pagelib.h"
#include "testlib.h"

#define CONTRACT  "changes_mail"
#define NOTIFIED  "changes_notify"
#define ANNA      "anna.kowalska@example.com"
#define LI        "li.wei@example.com"
#define LI_GROUPS "sales team,customer support"
#define REQUESTER "olga.petrova@example.com"
#define CUSTOMER  "klient.ivanova@pochta.example"
#define CALLBACK  "http://127.0.0.1:5678/webhook-waiting/"
#define SETTLE_S  30
/* Cyrillic, Arabic, CJK, emoji, and a line break */
#define FEEDBACK                                                                         \
	"Уберите, пожалуйста, вторую фразу — клиент уже получил возврат.\n"               \
	"يرجى ذكر رقم الطلب. 请写上订单号。 🙏📦"

#define JSTR(o, n) (tl_jstr((o), (n)) ? tl_jstr((o), (n)) : "(none)")

/* A run of one round: the lease it was claimed under, and its round's
 * challenges (0: the group's, 1: Anna's). */
struct draft {
	char owner[64];
	long long version;
	char path[2][128];
	char id[2][64];
};

static void
claim(const char *bearer, const char *key, const char *contract, struct draft *d)
{
	json_t *body = json_pack("{s:s, s:{s:s, s:s}, s:i}", "key", key, "payload", "run", tl_run,
	                         "contract", contract, "lease_seconds", 60);
	struct tl_claimed cl;

	tl_claim_body(bearer, body, &cl);
	json_decref(body);
	snprintf(d->owner, sizeof(d->owner), "%s", cl.owner);
	d->version = cl.version;
}

/* POSTs the draft (subject, body) under d's lease; the answer in r, and on
 * a 202 the round's links and the run's version in d. */
static long
submit(const char *bearer, const char *key, const char *contract, const char *subject,
       const char *body, struct draft *d, struct tl_resp *r)
{
	char *path = tl_run_path(key, "/output"), cb[128], sum[65];
	json_t *req;
	size_t i;

	tl_sha256_hex(key, sum);
	snprintf(cb, sizeof(cb), "%s%.16s", CALLBACK, sum);
	req = json_pack("{s:s, s:I, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:{s:[s]}}, s:o, s:s, s:s}",
	                "lease_owner", d->owner, "version", (json_int_t)d->version, "contract",
	                contract, "output", "subject", subject, "body", body, "effect", "type",
	                "email.send", "target", "demo_smtp", "payload", "to", CUSTOMER, "model",
	                tl_model_json(), "requested_by", REQUESTER, "callback_url", cb);
	tl_post_json(path, bearer, req, r);
	json_decref(req);
	free(path);
	if (r->status != 202)
		return r->status;
	for (i = 0; i < 2 && strcmp(contract, CONTRACT) == 0; i++) {
		char *token = dl_token_of(r, i, d->id[i], sizeof(d->id[i]));

		snprintf(d->path[i], sizeof(d->path[i]), "/approve/%s", token);
		free(token);
	}
	for (i = 0; i < 2 && strcmp(contract, CONTRACT) != 0; i++) {
		const json_t *a = json_array_get(json_object_get(r->json, "approvals"), i);

		snprintf(d->id[i], sizeof(d->id[i]), "%s", JSTR(a, "approval_id"));
		snprintf(d->path[i], sizeof(d->path[i]), "/approve/card/%s", JSTR(a, "approval_id"));
	}
	d->version = json_integer_value(json_object_get(r->json, "version"));
	return r->status;
}

/* The second tenant's decide grant for every approver entry of contract:
 * "grant" (after an ungrant that may find none: a test that failed midway
 * leaves its grant) or "ungrant". */
static void
grant(const char *verb, const char *contract)
{
	char *out = NULL;
	int rc;

	if (strcmp(verb, "grant") == 0)
		(void)tl_ctl(NULL, "client", "ungrant", dl_client_b, "--decide", contract, "--approver",
		             "*", "--reason", "check_changes: start from no grant", (char *)NULL);
	rc = tl_ctl(&out, "client", verb, dl_client_b, "--decide", contract, "--approver", "*",
	            "--reason", "check_changes: a team's own tool decides for its people",
	            (char *)NULL);
	ck_assert_msg(rc == 0, "client %s: exit %d: %s", verb, rc, out ? out : "");
	free(out);
}

/* The run of client b as GET /v1/runs/{key} shows it (a new reference). */
static json_t *
run_of(const char *key)
{
	char *path = tl_run_path(key, NULL);
	struct tl_resp r;
	json_t *run;

	tl_get(path, dl_key_b, &r);
	free(path);
	ck_assert_msg(r.status == 200, "GET run: HTTP %ld %.600s", r.status, r.body);
	run = json_incref(r.json);
	tl_resp_free(&r);
	return run;
}

/* The page's POST of a decision with its feedback, as user in groups. */
static long
page_decide(const char *path, const char *user, const char *groups, const char *decision,
            const char *feedback, struct tl_resp *r)
{
	struct pl_doc d;
	char *csrf, *form;

	pl_doc_get(path, user, groups, &d);
	csrf = pl_doc_csrf(&d);
	pl_doc_free(&d);
	ck_assert_msg(csrf != NULL, "%s: the card offers %s no form", path, user);
	form = feedback != NULL ? tl_form("decision", decision, "csrf", csrf, "feedback", feedback,
	                                  (char *)NULL)
	                        : tl_form("decision", decision, "csrf", csrf, (char *)NULL);
	dl_page_request(path, user, groups, form, NULL, r, NULL);
	free(form);
	free(csrf);
	return r->status;
}

static long long
count1(PGconn *c, const char *sql, const char *key)
{
	const char *p[2] = { key, dl_client_b };

	return tl_pg_count(c, sql, 2, p);
}

#define OF_B " AND client_id = (SELECT id FROM api_clients WHERE name = $2)"

/* ---- round trip --------------------------------------------------------------- */

START_TEST(test_round_trip)
{
	PGconn *c = tl_pg_connect();
	char key[160], *before_dev, *out = NULL, *mail_from = pl_stack_mail_from();
	const char *p[2];
	struct draft d1 = { 0 }, d2, other = { 0 };
	struct tl_resp r;
	struct pl_doc doc;
	struct dl_disp disp;
	json_t *run, *cb, *mails, *m, *lines, *line;
	long off = tl_log_offset();
	size_t i, n;
	double deadline;

	ck_assert_msg(dl_key_b != NULL, "no second client: `oncegatectl client add` failed");
	snprintf(key, sizeof(key), "%s:round/заявка-77 📮", tl_run);
	p[0] = key;
	p[1] = dl_client_b;
	/* the stack's own client holds the same key, waiting for its people */
	claim(dl_key_dev, key, CONTRACT, &other);
	ck_assert_int_eq(submit(dl_key_dev, key, CONTRACT, "Тема другого клиента",
	                        "Другой клиент, тот же ключ.", &other, &r), 202);
	tl_resp_free(&r);
	before_dev = tl_pg_value(c, "SELECT row_to_json(r)::text FROM workflow_runs r"
	                            " WHERE idempotency_key = $1 AND client_id <>"
	                            " (SELECT id FROM api_clients WHERE name = $2)", 2, p);

	claim(dl_key_b, key, CONTRACT, &d1);
	ck_assert_int_eq(submit(dl_key_b, key, CONTRACT, "Ваш возврат по заказу 48213",
	                        "Здравствуйте! Возврат оформлен. Деньги придут за 3–5 дней.", &d1,
	                        &r), 202);
	tl_resp_free(&r);
	grant("grant", CONTRACT);
	/* one approval of round 1, on the page */
	ck_assert_int_eq(pl_decide_at(d1.path[0], LI, LI_GROUPS, "approve", NULL, 0), 303);
	/* Anna asks for changes through the API */
	tl_decide_api(dl_key_b, d1.id[1],
	              json_pack("{s:s, s:s, s:s}", "subject", ANNA, "decision", "changes_requested",
	                        "feedback", FEEDBACK), &r);
	ck_assert_msg(r.status == 200, "HTTP %ld %.600s", r.status, r.body);
	ck_assert(json_is_true(json_object_get(r.json, "final")));
	ck_assert_str_eq(JSTR(r.json, "state"), "processing");
	ck_assert_int_eq(json_integer_value(json_object_get(r.json, "round")), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(r.json, "next_round")), 2);
	ck_assert(tl_jstr(r.json, "effect_id") == NULL);
	tl_resp_free(&r);

	/* the run is back with its workflow, under the same lease owner */
	run = run_of(key);
	ck_assert_str_eq(JSTR(run, "state"), "processing");
	ck_assert_str_eq(JSTR(run, "lease_owner"), d1.owner);
	ck_assert_int_eq(json_integer_value(json_object_get(run, "round")), 2);
	ck_assert(tl_jstr(run, "decision") == NULL);
	d2 = d1;
	d2.version = json_integer_value(json_object_get(run, "version"));
	json_decref(run);
	/* the callback of round 1 carries the decision and the feedback */
	cb = qjson(c, "SELECT payload FROM effect_outbox WHERE idempotency_key = $1" OF_B
	              " AND effect_type = 'decision.callback' AND slot = 0", key, dl_client_b,
	           (char *)NULL);
	ck_assert_msg(cb != NULL, "no callback for round 1");
	ck_assert_str_eq(JSTR(cb, "decision"), "changes_requested");
	ck_assert_str_eq(JSTR(cb, "feedback"), FEEDBACK);
	ck_assert_str_eq(JSTR(cb, "decided_by"), ANNA);
	json_decref(cb);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                           OF_B " AND effect_type = 'email.send'", key), 0);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1" OF_B
	                           " AND round = 1 AND state = 'pending'", key), 0);
	/* the other tenant's run of the same key is untouched */
	{
		char *now = tl_pg_value(c, "SELECT row_to_json(r)::text FROM workflow_runs r"
		                           " WHERE idempotency_key = $1 AND client_id <>"
		                           " (SELECT id FROM api_clients WHERE name = $2)", 2, p);

		ck_assert_str_eq(now, before_dev);
		free(now);
	}

	/* the old links: this round is closed, and nothing changes */
	pl_doc_get(d1.path[0], "sam.lee@example.com", LI_GROUPS, &doc);
	ck_assert_msg(doc.r.status == 410, "old link: HTTP %ld", doc.r.status);
	out = pl_doc_all_text(&doc);
	ck_assert_msg(strstr(out, "This round is closed") != NULL, "old link says: %s", out);
	free(out);
	pl_doc_free(&doc);
	{
		char *snap = tl_run_snapshot(c, key);
		char *csrf = tl_csrf_for(d1.id[0], "sam.lee@example.com");
		char *form = tl_form("decision", "approve", "csrf", csrf, (char *)NULL);

		dl_page_request(d1.path[0], "sam.lee@example.com", LI_GROUPS, form, NULL, &r, NULL);
		ck_assert_msg(r.status == 410, "old link's POST: HTTP %ld", r.status);
		tl_resp_free(&r);
		tl_decide_api(dl_key_b, d1.id[0],
		              json_pack("{s:s, s:[s], s:s}", "subject", "sam.lee@example.com", "groups",
		                        "customer support", "decision", "approve"), &r);
		tl_expect_problem(&r, 409, "approval_closed");
		ck_assert_str_eq(JSTR(r.json, "reason"), "round_closed");
		tl_resp_free(&r);
		tl_expect_run_unchanged(c, key, snap, "decisions on a closed round");
		free(form);
		free(csrf);
		free(snap);
	}

	/* draft 2: new challenges, the quorum starts again */
	ck_assert_int_eq(submit(dl_key_b, key, CONTRACT, "Ваш возврат по заказу 48213",
	                        "Здравствуйте! Возврат по заказу 48213 оформлен.", &d2, &r), 202);
	tl_resp_free(&r);
	ck_assert_str_ne(d2.id[0], d1.id[0]);
	ck_assert_str_ne(d2.id[1], d1.id[1]);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1" OF_B
	                           " AND round = 2 AND state = 'pending'", key), 2);
	ck_assert_int_eq(pl_decide_at(d2.path[0], LI, LI_GROUPS, "approve", NULL, 0), 303);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	                           OF_B " AND state = 'awaiting_human'", key), 1);
	tl_decide_api(dl_key_b, d2.id[1],
	              json_pack("{s:s, s:s, s:s}", "subject", ANNA, "decision", "approve", "reason",
	                        "Теперь верно ✅"), &r);
	ck_assert_msg(r.status == 200, "HTTP %ld %.600s", r.status, r.body);
	ck_assert_int_eq(json_integer_value(json_object_get(r.json, "approvals")), 2);
	ck_assert_str_eq(JSTR(r.json, "state"), "approved");
	tl_resp_free(&r);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM approval_votes WHERE idempotency_key = $1"
	                           OF_B " AND round = 1", key), 2);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM approval_votes WHERE idempotency_key = $1"
	                           OF_B " AND round = 2 AND decision = 'approve'", key), 2);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                           OF_B " AND effect_type = 'decision.callback'", key), 2);

	/* what the provider received: one mail, draft 2 */
	(void)tl_ctl(NULL, "sends", "resume", "--reason", "check_changes sends to loopback",
	             (char *)NULL);
	dl_disp_start_demo(&disp, mail_from);
	deadline = tl_now() + SETTLE_S;
	while (count1(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1" OF_B
	                 " AND effect_type = 'email.send' AND state = 'completed'", key) < 1 &&
	       tl_now() < deadline)
		tl_sleep_ms(200);
	(void)dl_disp_stop(&disp, 20);
	mails = dl_mails_received();
	n = 0;
	json_array_foreach(mails, i, m) {
		const char *body = json_string_value(json_object_get(m, "body"));

		if (body != NULL && strstr(body, "Возврат по заказу 48213 оформлен") != NULL)
			n++;
		ck_assert_msg(body == NULL || strstr(body, "Деньги придут") == NULL,
		              "draft 1 was sent: %s", body);
	}
	ck_assert_msg(n == 1, "draft 2 arrived %zu times", n);
	json_decref(mails);

	/* the history shows each round */
	run = run_of(key);
	{
		const json_t *votes = json_object_get(run, "votes"), *v = json_array_get(votes, 1);

		ck_assert_uint_eq(json_array_size(votes), 4);
		ck_assert_str_eq(JSTR(v, "decision"), "changes_requested");
		ck_assert_str_eq(JSTR(v, "reason"), FEEDBACK);
		ck_assert_int_eq(json_integer_value(json_object_get(v, "round")), 1);
		ck_assert_str_eq(JSTR(json_array_get(votes, 3), "subject"), ANNA);
		ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(votes, 3), "round")),
		                 2);
	}
	json_decref(run);
	ck_assert_int_eq(tl_ctl(&out, "explain", key, "--client", dl_client_b, (char *)NULL), 0);
	ck_assert_msg(out != NULL && strstr(out, "run.changes_requested") != NULL &&
	                  strstr(out, "Уберите, пожалуйста") != NULL,
	              "explain: %s", out ? out : "");
	free(out);
	lines = tl_log_collect(off, tl_log_is_key, key, 5);
	line = NULL;
	json_array_foreach(lines, i, m)
		if (streq(tl_jstr(m, "event"), "approval.consumed") &&
		    streq(tl_jstr(m, "decision"), "changes_requested"))
			line = m;
	ck_assert_msg(line != NULL, "no approval.consumed line for the request for changes");
	ck_assert_str_eq(JSTR(line, "state_to"), "processing");
	ck_assert_msg(tl_jstr(line, "reason") != NULL &&
	                  strstr(tl_jstr(line, "reason"), "Уберите") != NULL,
	              "the log line's reason: %s", JSTR(line, "reason"));
	json_decref(lines);
	grant("ungrant", CONTRACT);
	free(before_dev);
	free(mail_from);
	PQfinish(c);
}
END_TEST

/* ---- notices and the page ----------------------------------------------------------- */

START_TEST(test_notices_and_page)
{
	PGconn *c = tl_pg_connect();
	char key[160];
	struct draft d = { 0 };
	struct tl_resp r;
	struct pl_doc doc;
	char *snap;
	json_t *run;

	snprintf(key, sizeof(key), "%s:notices/申请-34", tl_run);
	claim(dl_key_b, key, NOTIFIED, &d);
	ck_assert_int_eq(submit(dl_key_b, key, NOTIFIED, "Ваш заказ", "Черновик один.", &d, &r),
	                 202);
	tl_resp_free(&r);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                           OF_B " AND effect_type = 'approval.notify'", key), 2);
	/* the card offers the third button and its feedback field */
	pl_doc_get(d.path[0], LI, LI_GROUPS, &doc);
	ck_assert_uint_eq(pl_doc_count(&doc, "//button[@value='changes_requested']"), 1);
	ck_assert_uint_eq(pl_doc_count(&doc, "//textarea[@name='feedback']"), 1);
	pl_doc_free(&doc);
	/* a request for changes on the page needs its feedback */
	snap = tl_run_snapshot(c, key);
	ck_assert_int_eq(page_decide(d.path[0], LI, LI_GROUPS, "changes_requested", NULL, &r), 422);
	tl_resp_free(&r);
	ck_assert_int_eq(page_decide(d.path[0], LI, LI_GROUPS, "changes_requested", " \n\t ", &r),
	                 422);
	tl_resp_free(&r);
	tl_expect_run_unchanged(c, key, snap, "a request for changes without feedback");
	free(snap);
	ck_assert_int_eq(page_decide(d.path[0], LI, LI_GROUPS, "changes_requested",
	                             "Добавьте номер заказа, пожалуйста. 注文番号を 🙏", &r),
	                 303);
	tl_resp_free(&r);
	/* the decided card says it in words, never the stored word */
	pl_doc_get(d.path[0], LI, LI_GROUPS, &doc);
	{
		char *t = pl_doc_text1(&doc, "//section[@class='outcome']//dt[.='Decision']"
		                             "/following-sibling::dd[1]");
		char *all = pl_doc_all_text(&doc);

		ck_assert_msg(t != NULL && strcmp(t, "changes requested") == 0,
		              "the decided card's decision reads \"%s\"", t != NULL ? t : "(none)");
		ck_assert_msg(all != NULL && strstr(all, "changes_requested") == NULL,
		              "the decided card shows the stored word changes_requested");
		free(t);
		free(all);
	}
	pl_doc_free(&doc);
	run = run_of(key);
	ck_assert_str_eq(JSTR(run, "state"), "processing");
	d.version = json_integer_value(json_object_get(run, "version"));
	json_decref(run);
	ck_assert_int_eq(submit(dl_key_b, key, NOTIFIED, "Ваш заказ 48213", "Черновик два.", &d, &r),
	                 202);
	tl_resp_free(&r);
	/* the new round's challenge has a notice of its own */
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM effect_outbox o JOIN approvals a"
	                           " ON a.id = o.approval_id WHERE o.idempotency_key = $1"
	                           " AND o.client_id = (SELECT id FROM api_clients WHERE name = $2)"
	                           " AND o.effect_type = 'approval.notify' AND a.round = 2", key),
	                 2);
	PQfinish(c);
}
END_TEST

/* ---- the repair budget ---------------------------------------------------------------- */

START_TEST(test_budget_spent)
{
	PGconn *c = tl_pg_connect();
	char key[160];
	struct draft d = { 0 };
	struct tl_resp r;
	json_t *run, *cb;

	snprintf(key, sizeof(key), "%s:budget/طلب-56", tl_run);
	claim(dl_key_b, key, CONTRACT, &d);
	ck_assert_int_eq(submit(dl_key_b, key, CONTRACT, "Тема", "Черновик один.", &d, &r), 202);
	tl_resp_free(&r);
	grant("grant", CONTRACT);
	tl_decide_api(dl_key_b, d.id[1],
	              json_pack("{s:s, s:s, s:s}", "subject", ANNA, "decision", "changes_requested",
	                        "feedback", "Короче, пожалуйста."), &r);
	ck_assert_msg(r.status == 200, "HTTP %ld %.600s", r.status, r.body);
	tl_resp_free(&r);
	run = run_of(key);
	d.version = json_integer_value(json_object_get(run, "version"));
	json_decref(run);
	ck_assert_int_eq(submit(dl_key_b, key, CONTRACT, "Тема", "Черновик два.", &d, &r), 202);
	tl_resp_free(&r);
	/* round 2 asks again: the one repair attempt is spent */
	tl_decide_api(dl_key_b, d.id[1],
	              json_pack("{s:s, s:s, s:s}", "subject", ANNA, "decision", "changes_requested",
	                        "feedback", "Ещё короче."), &r);
	ck_assert_msg(r.status == 200, "HTTP %ld %.600s", r.status, r.body);
	ck_assert_str_eq(JSTR(r.json, "state"), "failed_terminal");
	ck_assert(json_object_get(r.json, "next_round") == NULL);
	tl_resp_free(&r);
	run = run_of(key);
	ck_assert_str_eq(JSTR(run, "state"), "failed_terminal");
	ck_assert_str_eq(JSTR(run, "error_class"), "redrafts_spent");
	ck_assert_int_eq(json_integer_value(json_object_get(run, "round")), 2);
	json_decref(run);
	cb = qjson(c, "SELECT payload FROM effect_outbox WHERE idempotency_key = $1" OF_B
	              " AND effect_type = 'decision.callback' AND slot = 1", key, dl_client_b,
	           (char *)NULL);
	ck_assert_msg(cb != NULL, "no callback for round 2");
	ck_assert_str_eq(JSTR(cb, "decision"), "changes_requested");
	ck_assert_str_eq(JSTR(cb, "feedback"), "Ещё короче.");
	json_decref(cb);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                           OF_B " AND effect_type = 'email.send'", key), 0);
	/* no third draft */
	ck_assert_int_eq(submit(dl_key_b, key, CONTRACT, "Тема", "Черновик три.", &d, &r), 409);
	tl_resp_free(&r);
	grant("ungrant", CONTRACT);
	PQfinish(c);
}
END_TEST

/* ---- refused ---------------------------------------------------------------------------- */

START_TEST(test_refused)
{
	PGconn *c = tl_pg_connect();
	char key[160], key2[160], *snap, *big;
	struct draft d = { 0 }, q = { 0 };
	struct tl_resp r;
	size_t i;
	static const char *const bad[] = { "", "   \n  ", "строка\x01с управляющим символом",
		                           "\x1b[31mred\x1b[0m" };

	snprintf(key, sizeof(key), "%s:refused/заявка-12", tl_run);
	claim(dl_key_b, key, CONTRACT, &d);
	ck_assert_int_eq(submit(dl_key_b, key, CONTRACT, "Тема", "Черновик.", &d, &r), 202);
	tl_resp_free(&r);
	grant("grant", CONTRACT);
	grant("grant", "quorum_mail");
	snap = tl_run_snapshot(c, key);
	tl_decide_refused(dl_key_b, d.id[1],
	                  json_pack("{s:s, s:s}", "subject", ANNA, "decision", "changes_requested"),
	                  422, "feedback_required");
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tl_decide_api(dl_key_b, d.id[1],
		              json_pack("{s:s, s:s, s:s}", "subject", ANNA, "decision",
		                        "changes_requested", "feedback", bad[i]), &r);
		ck_assert_msg(r.status == 422, "feedback %zu: HTTP %ld %.300s", i, r.status, r.body);
		tl_resp_free(&r);
	}
	/* a NUL inside: the JSON reader refuses it already */
	{
		char path[160], body[512];

		snprintf(path, sizeof(path), "/v1/approvals/%s/decisions", d.id[1]);
		snprintf(body, sizeof(body), "{\"subject\":\"%s\",\"decision\":\"changes_requested\","
		         "\"feedback\":\"до\\u0000после\"}", ANNA);
		tl_post_text(path, dl_key_b, body, &r);
		tl_expect_problem(&r, 400, "invalid_json");
		tl_resp_free(&r);
	}
	/* over 2000 characters (2001 two-byte letters) */
	big = malloc(2 * 2001 + 1);
	for (i = 0; i < 2001; i++)
		memcpy(big + 2 * i, "ж", 2);
	big[2 * 2001] = '\0';
	tl_decide_refused(dl_key_b, d.id[1],
	                  json_pack("{s:s, s:s, s:s}", "subject", ANNA, "decision",
	                            "changes_requested", "feedback", big), 422, "invalid_feedback");
	ck_assert_int_eq(page_decide(d.path[0], LI, LI_GROUPS, "changes_requested", big, &r), 422);
	tl_resp_free(&r);
	free(big);
	tl_decide_refused(dl_key_b, d.id[1],
	                  json_pack("{s:s, s:s, s:i}", "subject", ANNA, "decision",
	                            "changes_requested", "feedback", 7), 400, "invalid_field");
	/* feedback goes with a request for changes only */
	tl_decide_refused(dl_key_b, d.id[1],
	                  json_pack("{s:s, s:s, s:s}", "subject", ANNA, "decision", "approve",
	                            "feedback", "Всё хорошо"), 422, "feedback_unwanted");
	/* the requester may not send it back either (separation of duties) */
	tl_decide_refused(dl_key_b, d.id[0],
	                  json_pack("{s:s, s:[s], s:s, s:s}", "subject", REQUESTER, "groups",
	                            "customer support", "decision", "changes_requested", "feedback",
	                            "Моя же заявка"), 403, "separation_of_duties");
	tl_expect_run_unchanged(c, key, snap, "refused requests for changes");
	free(snap);

	/* a contract that does not allow it */
	snprintf(key2, sizeof(key2), "%s:not-allowed/заявка-13", tl_run);
	dl_claim_and_output(dl_key_b, key2, "quorum_mail",
	                    json_pack("{s:s, s:s}", "subject", "Тема", "body", "Текст"),
	                    json_pack("{s:s, s:s, s:{s:[s]}}", "type", "email.send", "target",
	                              "demo_smtp", "payload", "to", CUSTOMER),
	                    REQUESTER, &r);
	{
		char *token = dl_token_of(&r, 2, q.id[0], sizeof(q.id[0]));

		snprintf(q.path[0], sizeof(q.path[0]), "/approve/%s", token);
		free(token);
	}
	tl_resp_free(&r);
	snap = tl_run_snapshot(c, key2);
	tl_decide_refused(dl_key_b, q.id[0],
	                  json_pack("{s:s, s:s, s:s}", "subject", ANNA, "decision",
	                            "changes_requested", "feedback", "Нельзя"), 422,
	                  "decision_not_allowed");
	{
		char *csrf = tl_csrf_for(q.id[0], ANNA);
		char *form = tl_form("decision", "changes_requested", "csrf", csrf, "feedback", "Нельзя",
		                     (char *)NULL);
		struct pl_doc doc;

		dl_page_request(q.path[0], ANNA, NULL, form, NULL, &r, NULL);
		ck_assert_msg(r.status == 400, "page: HTTP %ld", r.status);
		tl_resp_free(&r);
		free(form);
		free(csrf);
		/* nor does its card offer it */
		pl_doc_get(q.path[0], ANNA, NULL, &doc);
		ck_assert_uint_eq(pl_doc_count(&doc, "//button[@value='changes_requested']"), 0);
		ck_assert_uint_eq(pl_doc_count(&doc, "//textarea[@name='feedback']"), 0);
		pl_doc_free(&doc);
	}
	tl_expect_run_unchanged(c, key2, snap, "changes_requested under a contract without it");
	free(snap);
	grant("ungrant", CONTRACT);
	grant("ungrant", "quorum_mail");
	PQfinish(c);
}
END_TEST

TL_SUITE(changes_suite, "changes",
         {"rounds", SETTLE_S + 90, dl_tcase,
          .tests = TL_LIST(test_round_trip, test_notices_and_page, test_budget_spent,
                           test_refused)})

DL_TENANTS_MAIN("check_changes", "ch", .suite = changes_suite, .smtp = true)

/*
 * check_quorum.c — integration suite: several people approve one run
 * (gate.min_approvals), and an approver corrects the draft before
 * approving (gate.editable), against the stack of ./dev test with the test
 * contract quorum_mail (tests/data/contracts-test): 2 of 3 approver
 * entries — "group:customer support", "group:финансовый контроль" and
 * anna.kowalska@example.com — with subject and body editable. Identities
 * arrive as oauth2-proxy's headers do (groups joined with commas, names
 * with spaces and in Cyrillic).
 *
 *   load       a quorum larger than the people the approvers name, or an
 *              editable member that is not text, fails the contracts' load
 *              and says where;
 *   race       20 people post approve at once (one of them twice, through
 *              her own link and her group's): exactly two votes are
 *              recorded, by two different people, the second settles the
 *              run, and exactly one effect row exists;
 *   reject     an approval below the quorum is recorded (the page says 1 of
 *              2, the run still waits, nothing is queued); the same person
 *              cannot vote again by another link, group or the inbox; a
 *              reject by someone else ends the run, nothing is queued;
 *   edit       two tenants hold the same key; on the first an approver's
 *              invalid corrections (a body over the schema's maxLength, a
 *              subject with a line break the mail cannot carry) come back
 *              as the card with the errors and consume nothing (the same
 *              CSRF value still works), then a long multilingual body is
 *              corrected and approved; a second person approves the
 *              corrected text; the loopback SMTP server receives the
 *              corrected text exactly once and the other tenant's run its
 *              own text; the decision log names the corrected fields and
 *              never their text; GET /v1/runs and explain say who edited
 *              what.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "contract.h"
#include "dispatchlib.h"
#include "testlib.h"

#define CONTRACT   "quorum_mail"
#define ANNA       "anna.kowalska@example.com"
#define SUPPORT    "sales team,customer support"           /* as oauth2-proxy joins them */
#define FINANCE    "финансовый контроль, customer success"
#define REQUESTER  "support-inbox@workflows.example"
#define VOTERS     20
#define SETTLE_S   60

#define JSTR(o, n) (tl_jstr((o), (n)) ? tl_jstr((o), (n)) : "(none)")

/* ---- the pages ----------------------------------------------------------------- */

/* POSTs decision on challenge id at path as user, with a CSRF value issued
 * to them, and the corrections edit_subject / edit_body when not NULL;
 * the answer in *r. */
static void
decide(const char *path, const char *id, const char *user, const char *groups,
       const char *decision, const char *edit_subject, const char *edit_body, struct tl_resp *r)
{
	char *csrf = tl_csrf_for(id, user), *form, *more = NULL;

	form = tl_form("decision", decision, "csrf", csrf, "reason", "Проверено 👍", (char *)NULL);
	if (edit_subject != NULL || edit_body != NULL) {
		char *e = edit_body != NULL
		              ? tl_form("edit.subject", edit_subject, "edit.body", edit_body, (char *)NULL)
		              : tl_form("edit.subject", edit_subject, (char *)NULL);

		ck_assert(asprintf(&more, "%s&%s", form, e) > 0);
		free(e);
		free(form);
		form = more;
	}
	dl_page_request(path, user, groups, form, NULL, r, NULL);
	free(form);
	free(csrf);
}

static long
decide_status(const char *path, const char *id, const char *user, const char *groups,
              const char *decision)
{
	struct tl_resp r;
	long st;

	decide(path, id, user, groups, decision, NULL, NULL, &r);
	st = r.status;
	tl_resp_free(&r);
	return st;
}

static long long
count1(PGconn *c, const char *sql, const char *key)
{
	const char *p[1] = { key };

	return tl_pg_count(c, sql, 1, p);
}

/* ---- load ------------------------------------------------------------------------ */

static void
load_one(const char *gate, char *err, size_t errlen, bool *ok)
{
	char dir[PATH_MAX], file[PATH_MAX + 32], text[2048];
	struct contract_set *set;

	snprintf(dir, sizeof(dir), "%s/contracts-XXXXXX", g_tmp);
	ck_assert(mkdtemp(dir) != NULL);
	snprintf(file, sizeof(file), "%s/q.json", dir);
	snprintf(text, sizeof(text),
	         "{\"name\":\"q\",\"schema\":{\"type\":\"object\",\"properties\":{\"body\":"
	         "{\"type\":\"string\"},\"score\":{\"type\":\"number\"}},"
	         "\"additionalProperties\":false},\"gate\":%s,\"effects\":{\"allowed_types\":"
	         "[\"email.send\"],\"allowed_targets\":[\"demo_smtp\"]}}",
	         gate);
	write_file(file, text);
	err[0] = '\0';
	set = contract_load_dir(dir, err, errlen);
	*ok = set != NULL;
	contract_set_free(set);
	unlink(file);
	rmdir(dir);
}

START_TEST(test_load_refuses_what_cannot_be_met)
{
	char err[512];
	bool ok;

	load_one("{\"approvers\":[\"a@example.com\",\"b@example.com\"],\"min_approvals\":3}", err,
	         sizeof(err), &ok);
	ck_assert_msg(!ok && strstr(err, "/gate/min_approvals") != NULL &&
	                  strstr(err, "names only 2 people") != NULL,
	              "3 of 2 named people loaded, or said: %s", err);
	load_one("{\"approvers\":[\"a@example.com\",\"group:финансовый контроль\"],"
	         "\"min_approvals\":3}", err, sizeof(err), &ok);
	ck_assert_msg(ok, "a group may hold the third approver: %s", err);
	load_one("{\"approvers\":[\"a@example.com\"],\"editable\":[\"score\"]}", err, sizeof(err),
	         &ok);
	ck_assert_msg(!ok && strstr(err, "/gate/editable/0") != NULL &&
	                  strstr(err, "string") != NULL,
	              "a number was made editable as text, or said: %s", err);
	load_one("{\"approvers\":[\"a@example.com\"],\"editable\":[\"subject\"]}", err, sizeof(err),
	         &ok);
	ck_assert_msg(!ok && strstr(err, "does not allow") != NULL,
	              "a member the schema forbids was made editable, or said: %s", err);
	load_one("{\"approvers\":[\"a@example.com\",\"b@example.com\"],\"min_approvals\":2,"
	         "\"editable\":[\"body\"]}", err, sizeof(err), &ok);
	ck_assert_msg(ok, "2 of 2 with an editable body: %s", err);
}
END_TEST

/* ---- race ---------------------------------------------------------------------- */

struct voter {
	char user[96];
	const char *groups;
	const char *path, *id;
	char *form;
	long status;
};

static void
vote_thread(void *arg)
{
	struct voter *v = arg;
	struct tl_resp r;

	dl_page_request(v->path, v->user, v->groups, v->form, NULL, &r, NULL);
	v->status = r.status;
	tl_resp_free(&r);
}

START_TEST(test_race_one_effect)
{
	PGconn *c = tl_pg_connect();
	struct voter v[VOTERS];
	struct dl_links l;
	char key[160];
	int i, ok = 0, refused = 0;
	double t0, t1;

	snprintf(key, sizeof(key), "%s:race/заявка-77", tl_run);
	dl_mail_run(dl_key_dev, key, CONTRACT, tl_corpus_mail_str("ru_short", "subject"),
	            tl_corpus_mail_str("ru_short", "body"), "client@inbox.example.com", REQUESTER, &l);
	for (i = 0; i < VOTERS; i++) {
		char *csrf;
		int link;

		memset(&v[i], 0, sizeof(v[i]));
		if (i < 2) {
			/* one person, twice: her own link and her group's */
			snprintf(v[i].user, sizeof(v[i].user), ANNA);
			v[i].groups = "customer support";
			link = i == 0 ? 2 : 0;
		} else if (i < 11) {
			snprintf(v[i].user, sizeof(v[i].user), "agent%02d@example.com", i);
			v[i].groups = SUPPORT;
			link = 0;
		} else {
			snprintf(v[i].user, sizeof(v[i].user), "controller%02d@example.com", i);
			v[i].groups = FINANCE;
			link = 1;
		}
		v[i].path = l.path[link];
		v[i].id = l.id[link];
		csrf = tl_csrf_for(v[i].id, v[i].user);
		v[i].form = tl_form("decision", "approve", "csrf", csrf, (char *)NULL);
		free(csrf);
	}
	t0 = tl_now();
	tl_race(vote_thread, v, sizeof(v[0]), VOTERS);
	t1 = tl_now();
	for (i = 0; i < VOTERS; i++) {
		if (v[i].status == 303)
			ok++;
		else if (v[i].status == 409 || v[i].status == 410)
			refused++;
		else
			ck_abort_msg("%s: HTTP %ld", v[i].user, v[i].status);
		free(v[i].form);
	}
	fprintf(stderr, "check_quorum: %d concurrent approvals of 2-of-3 in %.0f ms: %d recorded,"
	        " %d refused\n", VOTERS, (t1 - t0) * 1000, ok, refused);
	ck_assert_int_eq(ok, 2);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1",
	                        key), 1);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM approval_votes WHERE idempotency_key = $1",
	                        key), 2);
	ck_assert_int_eq(count1(c, "SELECT count(DISTINCT lower(subject)) FROM approval_votes"
	                           " WHERE idempotency_key = $1 AND decision = 'approve'", key), 2);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM approval_votes WHERE idempotency_key = $1"
	                           " AND final", key), 1);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM workflow_runs r WHERE idempotency_key = $1"
	                           " AND state = 'approved' AND decided_by = (SELECT subject FROM"
	                           " approval_votes v WHERE v.idempotency_key = r.idempotency_key"
	                           " AND v.final)", key), 1);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1"
	                           " AND state = 'pending'", key), 0);
	PQfinish(c);
}
END_TEST

/* ---- reject ------------------------------------------------------------------- */

START_TEST(test_recorded_once_then_rejected)
{
	PGconn *c = tl_pg_connect();
	struct dl_links l;
	struct tl_resp r;
	char key[160], card[128], *before;

	snprintf(key, sizeof(key), "%s:reject/счёт-4821", tl_run);
	dl_mail_run(dl_key_dev, key, CONTRACT, tl_corpus_mail_str("he_short", "subject"),
	            tl_corpus_mail_str("he_short", "body"), "client@inbox.example.com", REQUESTER, &l);

	/* Anna's approval through her own link: recorded, 1 of 2 */
	ck_assert_int_eq(decide_status(l.path[2], l.id[2], ANNA, "customer support", "approve"),
	                 303);
	dl_page_request(l.path[2], ANNA, "customer support", NULL, NULL, &r, NULL);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(strstr(r.body, "Your approval is recorded: 1 of 2") != NULL &&
	                  strstr(r.body, "waiting for more approvals") != NULL,
	              "the page after a vote below the quorum: %.3000s", r.body);
	tl_resp_free(&r);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	                           " AND state = 'awaiting_human' AND decision IS NULL", key), 1);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1",
	                        key), 0);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1"
	                           " AND state = 'pending'", key), 2);
	/* her inbox no longer lists it; a colleague's in her group does */
	dl_page_request("/approve/", ANNA, "customer support", NULL, NULL, &r, NULL);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(strstr(r.body, "reject/счёт-4821") == NULL,
	              "the inbox of one who voted lists the run");
	tl_resp_free(&r);
	dl_page_request("/approve/", "agent07@example.com", SUPPORT, NULL, NULL, &r, NULL);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(strstr(r.body, "reject/счёт-4821") != NULL,
	              "the inbox of a group member who did not vote misses the run");
	tl_resp_free(&r);

	/* the same person by her group's link and from the inbox: the card
	 * without a form, her vote shown; a forced POST changes nothing */
	dl_page_request(l.path[0], ANNA, "customer support", NULL, NULL, &r, NULL);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(strstr(r.body, "name=\"csrf\"") == NULL &&
	                  strstr(r.body, "You already approved this request") != NULL &&
	                  strstr(r.body, "1 of 2 different people have approved") != NULL,
	              "the group's card for one who voted: %.4000s", r.body);
	tl_resp_free(&r);
	snprintf(card, sizeof(card), "/approve/card/%s", l.id[0]);
	dl_page_request(card, ANNA, "customer support", NULL, NULL, &r, NULL);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(strstr(r.body, "name=\"csrf\"") == NULL, "the inbox card offers a form");
	tl_resp_free(&r);
	before = tl_run_snapshot(c, key);
	ck_assert_int_eq(decide_status(l.path[0], l.id[0], ANNA, "customer support", "approve"),
	                 409);
	ck_assert_int_eq(decide_status(card, l.id[0], "ANNA.Kowalska@example.com",
	                               "customer support", "approve"),
	                 409);
	tl_expect_run_unchanged(c, key, before, "a second vote of one person");
	free(before);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM approval_votes WHERE idempotency_key = $1",
	                        key), 1);

	/* someone else's card shows the vote so far, with a form */
	dl_page_request(l.path[1], "controller01@example.com", FINANCE, NULL, NULL, &r, NULL);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(strstr(r.body, "name=\"csrf\"") != NULL && strstr(r.body, ANNA) != NULL &&
	                  strstr(r.body, "1 of 2 different people have approved") != NULL,
	              "the card with one vote: %.4000s", r.body);
	tl_resp_free(&r);

	/* a reject by another person ends the run; nothing is queued */
	ck_assert_int_eq(decide_status(l.path[1], l.id[1], "controller01@example.com", FINANCE,
	                               "reject"),
	                 303);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	                           " AND state = 'rejected' AND error_class = 'rejected'"
	                           " AND decided_by = 'controller01@example.com'", key), 1);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1",
	                        key), 0);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1"
	                           " AND state = 'voided'", key), 1);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM approval_votes WHERE idempotency_key = $1"
	                           " AND final AND decision = 'reject'", key), 1);
	ck_assert_int_eq(decide_status(l.path[0], l.id[0], "agent02@example.com", SUPPORT,
	                               "approve"),
	                 410);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1",
	                        key), 0);
	PQfinish(c);
}
END_TEST

/* ---- edit ------------------------------------------------------------------------- */

/* The mails of the sink to rcpt. */
static json_t *
mails_to(const json_t *mails, const char *rcpt)
{
	json_t *out = json_array(), *m;
	size_t i;

	json_array_foreach(mails, i, m)
		if (strcmp(json_string_value(json_array_get(json_object_get(m, "rcpt"), 0)) ?: "",
		           rcpt) == 0)
			json_array_append(out, m);
	return out;
}

static bool
is_decision(const json_t *line, const void *key)
{
	return tl_log_is_key(line, key) && (strcmp(JSTR(line, "event"), "approval.consumed") == 0 ||
	                                    strcmp(JSTR(line, "event"), "approval.voted") == 0);
}

START_TEST(test_edit_then_sent_once)
{
	PGconn *c = tl_pg_connect();
	struct dl_links a, b;
	struct tl_resp r;
	struct dl_disp disp;
	char key[200], *before, *body, *long_body, *run_path, *out = NULL;
	const char *subject = tl_corpus_mail_str("ar_short", "subject");
	const char *draft_body = tl_corpus_mail_str("ru_short", "body");
	const char *draft_subject = tl_corpus_mail_str("ru_short", "subject");
	json_t *mails, *got, *lines, *line;
	double deadline;
	long offset;
	size_t i;

	ck_assert_msg(dl_key_b != NULL, "no second client");
	snprintf(key, sizeof(key), "%s:edit/%s", tl_run, "ответ/工单-48213");
	dl_mail_run(dl_key_dev, key, CONTRACT, draft_subject, draft_body, "dev@inbox.example.com",
	            REQUESTER, &a);
	/* the corrected body: four scripts and emoji, in lines, with CRLF as a
	 * browser sends a textarea */
	ck_assert(asprintf(&body, "%s\r\n\r\n%s\r\n\r\n%s\r\n\r\n%s",
	                   tl_corpus_mail_str("ru_reply", "body"),
	                   tl_corpus_mail_str("zh_reply", "body"),
	                   tl_corpus_mail_str("ar_reply", "body"),
	                   tl_corpus_mail_str("emoji_reply", "body")) > 0);
	ck_assert(asprintf(&long_body, "%sx", tl_corpus_mail_str("mixed_max", "body")) > 0);

	/* Anna's card offers the fields, filled with the draft */
	dl_page_request(a.path[2], ANNA, NULL, NULL, NULL, &r, NULL);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(strstr(r.body, "name=\"edit.body\"") != NULL &&
	                  strstr(r.body, "name=\"edit.subject\"") != NULL,
	              "no correction form: %.3000s", r.body);
	tl_resp_free(&r);

	/* invalid corrections: the card again with the errors, nothing used */
	before = tl_run_snapshot(c, key);
	decide(a.path[2], a.id[2], ANNA, NULL, "approve", subject, long_body, &r);
	ck_assert_msg(r.status == 422 && strstr(r.body, "/body") != NULL &&
	                  strstr(r.body, "Your correction was not accepted") != NULL &&
	                  strstr(r.body, "name=\"csrf\"") != NULL,
	              "a body over maxLength: HTTP %ld %.3000s", r.status, r.body);
	tl_resp_free(&r);
	decide(a.path[2], a.id[2], ANNA, NULL, "approve", "Re: ваш заказ\r\nBcc: x@evil.example",
	       NULL, &r);
	ck_assert_msg(r.status == 422 && strstr(r.body, "/effect/payload/subject") != NULL,
	              "a subject with a line break: HTTP %ld %.3000s", r.status, r.body);
	tl_resp_free(&r);
	tl_expect_run_unchanged(c, key, before, "refused corrections");
	free(before);
	ck_assert_int_eq(count1(c, "SELECT count(*) FROM approval_votes WHERE idempotency_key = $1",
	                        key), 0);
	/* the other tenant's run under the same key */
	dl_mail_run(dl_key_b, key, CONTRACT, draft_subject, draft_body, "b@inbox.example.com",
	            REQUESTER, &b);

	/* the correction, with the same CSRF value: 1 of 2 */
	offset = tl_log_offset();
	decide(a.path[2], a.id[2], ANNA, NULL, "approve", subject, body, &r);
	ck_assert_msg(r.status == 303, "the correction: HTTP %ld %.2000s", r.status, r.body);
	tl_resp_free(&r);
	/* the second approver reads the corrected text and cannot correct it */
	dl_page_request(a.path[0], "agent03@example.com", SUPPORT, NULL, NULL, &r, NULL);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(strstr(r.body, "name=\"edit.body\"") == NULL &&
	                  strstr(r.body, "after correcting the draft") != NULL &&
	                  strstr(r.body, tl_corpus_mail_str("zh_reply", "body")) != NULL,
	              "the second approver's card: %.3000s", r.body);
	tl_resp_free(&r);
	ck_assert_int_eq(decide_status(a.path[0], a.id[0], "agent03@example.com", SUPPORT,
	                               "approve"),
	                 303);
	/* the other tenant's run under the same key: untouched, then approved
	 * as drafted */
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM approval_votes v JOIN api_clients k"
	                             " ON k.id = v.client_id WHERE v.idempotency_key = $1"
	                             " AND k.name = $2", 2, (const char *[]){ key, dl_client_b }),
	                 0);
	ck_assert_int_eq(decide_status(b.path[1], b.id[1], "controller05@example.com", FINANCE,
	                               "approve"),
	                 303);
	ck_assert_int_eq(decide_status(b.path[2], b.id[2], ANNA, NULL, "approve"), 303);

	/* the log: who corrected which fields, never their text */
	lines = tl_log_collect(offset, is_decision, key, 2);
	ck_assert_uint_ge(json_array_size(lines), 2);
	line = tl_log_find_event(lines, "approval.voted");
	ck_assert_msg(line != NULL && strcmp(JSTR(line, "actor"), ANNA) == 0 &&
	                  json_array_size(json_object_get(line, "edited")) == 2 &&
	                  strcmp(json_string_value(json_array_get(json_object_get(line, "edited"), 0)),
	                         "subject") == 0,
	              "the vote's log line names the corrected fields");
	json_decref(lines);
	{
		size_t len = 0;
		char *log = tl_log_slurp(&len);
		char needle[64];

		snprintf(needle, sizeof(needle), "%.30s", tl_corpus_mail_str("zh_reply", "body"));
		ck_assert_msg(log != NULL && strstr(log, needle) == NULL &&
		                  strstr(log, subject) == NULL,
		              "the decision log holds corrected text");
		free(log);
	}

	/* the status API and explain say who edited what */
	run_path = tl_run_path(key, "");
	tl_get(run_path, dl_key_dev, &r);
	ASSERT_STATUS(&r, 200);
	{
		const json_t *e = json_object_get(r.json, "edit");

		ck_assert_msg(e != NULL && strcmp(JSTR(e, "by"), ANNA) == 0 &&
		                  json_array_size(json_object_get(e, "fields")) == 2 &&
		                  strcmp(JSTR(e, "output_hash"), JSTR(r.json, "output_hash")) != 0 &&
		                  strcmp(JSTR(json_object_get(e, "output"), "subject"), subject) == 0 &&
		                  strcmp(JSTR(json_object_get(r.json, "output"), "subject"),
		                         draft_subject) == 0,
		              "GET /v1/runs: %.2000s", r.body);
		ck_assert_int_eq(json_integer_value(json_object_get(r.json, "min_approvals")), 2);
		ck_assert_uint_eq(json_array_size(json_object_get(r.json, "votes")), 2);
	}
	tl_resp_free(&r);
	tl_get(run_path, dl_key_b, &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(json_object_get(r.json, "edit") == NULL, "the other tenant's run was edited");
	tl_resp_free(&r);
	free(run_path);
	ck_assert_int_eq(tl_ctl(&out, "explain", key, "--client", "dev", (char *)NULL), 0);
	ck_assert_msg(strstr(out, "yes: " ANNA " corrected subject, body") != NULL &&
	              strstr(out, "2 approval(s) needed") != NULL, "explain: %s", out);
	free(out);

	/* sent: the corrected text to one tenant's customer, once; the draft
	 * to the other's */
	(void)tl_ctl(NULL, "sends", "resume", "--reason", "check_quorum sends to loopback",
	             (char *)NULL);
	dl_disp_start_demo(&disp, "support@oncegate.example");
	deadline = tl_now() + SETTLE_S;
	while (count1(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                 " AND state = 'completed'", key) < 2 && tl_now() < deadline)
		tl_sleep_ms(200);
	dl_disp_stop(&disp, 20);
	mails = dl_mails_received();
	got = mails_to(mails, "dev@inbox.example.com");
	ck_assert_msg(json_array_size(got) == 1, "the corrected mail arrived %zu times",
	              json_array_size(got));
	{
		char *lf = strdup(body);
		char *p, *q;

		for (p = q = lf; *p != '\0'; p++)
			if (*p != '\r')
				*q++ = *p;
		*q = '\0';
		ck_assert_msg(strcmp(JSTR(json_array_get(got, 0), "body"), lf) == 0,
		              "the received body (%zu bytes) is not the corrected one (%zu bytes)",
		              strlen(JSTR(json_array_get(got, 0), "body")), strlen(lf));
		ck_assert_str_eq(JSTR(json_array_get(got, 0), "subject"), subject);
		free(lf);
	}
	json_decref(got);
	got = mails_to(mails, "b@inbox.example.com");
	ck_assert_uint_eq(json_array_size(got), 1);
	ck_assert_msg(strcmp(JSTR(json_array_get(got, 0), "body"), draft_body) == 0,
	              "the other tenant's mail is not its own draft");
	json_decref(got);
	json_array_foreach(mails, i, line)
		ck_assert_msg(strstr(JSTR(line, "body"), tl_corpus_mail_str("ru_reply", "body")) == NULL ||
		                  strcmp(json_string_value(json_array_get(json_object_get(line, "rcpt"),
		                                                          0)) ?: "",
		                         "dev@inbox.example.com") == 0,
		              "the corrected text went elsewhere");
	json_decref(mails);
	free(body);
	free(long_body);
	PQfinish(c);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------- */

TL_SUITE(quorum_suite, "quorum",
         {"load", 0, .tests = TL_LIST(test_load_refuses_what_cannot_be_met)},
         {"votes", 90, .tests = TL_LIST(test_race_one_effect, test_recorded_once_then_rejected)},
         {"edit", SETTLE_S + 90, dl_tcase, .tests = TL_LIST(test_edit_then_sent_once)})

DL_TENANTS_MAIN("check_quorum", "qu", .suite = quorum_suite, .smtp = true)

/*
 * check_context.c — integration suite: the context a workflow hands in
 * with a model's output for the approver (the customer's message, the
 * ticket's subject, the customer), with production-shaped data, against
 * the stack of ./dev test (the test contracts inbox_mail and notify_reply
 * of tests/data/contracts-test).
 *
 *   apart       two tenants hand in one business key with the same output
 *               and effect but different contexts (Cyrillic, Arabic, CJK,
 *               emoji, hostile markup and links): each run's row holds its
 *               own context; the output hash, the proposed effect and the
 *               challenges' effect are the same for both and hold none of
 *               it; GET /v1/runs/{key} returns it; no log line carries it;
 *   shown       the card shows the ticket's subject (as its title too), the
 *               customer and their message as plain text beside the
 *               draft: the hostile text is there, character for character,
 *               and no link or element came of it; the inbox entry is
 *               titled by the ticket's subject and names the customer and
 *               the draft's subject; a run without context has no context
 *               section and keeps the draft's subject as its title;
 *   refused     null, a string, an array, an unknown member, a member of
 *               the wrong type or null, a subject over 300 characters (in
 *               Cyrillic: characters, not bytes), a subject with a line
 *               break and a message over 20,000 characters: each a 400
 *               invalid_field naming the field, and the run unchanged;
 *               exactly 300 and 20,000 characters pass;
 *   told        a notify_reply run: the approvers' mail's Subject and body
 *               and the chat notice's summary name the ticket's subject
 *               and the customer, neutralised; never the message;
 *   purged      a rejected run past retention loses its context with its
 *               other free text (oncegatectl purge); a recent one keeps it;
 *   replayed    a rejected run replayed by an operator: the new run carries
 *               the original's context and its card shows it.
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

#define PERSON        "olga.petrova@example.com"
#define PERSON_GROUPS "sales team,customer support,служба поддержки"
#define REQUESTER     "support-inbox@workflows.example"
#define CUSTOMER_MAIL "customer.48213@mail.example.com"
#define SETTLE_S      30

#define JSTR(o, n) (tl_jstr((o), (n)) ? tl_jstr((o), (n)) : "(none)")

/* What one tenant's customer wrote: several scripts, and text that would
 * be a link or markup if anything rendered it as such. */
static const char *const subjects[2] = {
	"Заказ №4821 не пришёл — где моя посылка? 📦",
	"طلب رقم ٤٨٢١: لم يصل الطرد 订单未送达 🙏",
};
static const char *const customers[2] = {
	"Мария Иванова <maria.ivanova@example.com>",
	"محمد العلي <m.alali@example.com>",
};
static const char *const messages[2] = {
	"Здравствуйте!\nМой заказ №4821 не пришёл.\n"
	"<a href=\"javascript:alert(1)\">Нажмите здесь</a> и "
	"[подтвердите](https://evil.example/confirm) <script>alert('x')</script>\n"
	"С уважением, Мария",
	"مرحبًا،\nلم يصل طلبي رقم ٤٨٢١ بعد.\n您好，我的订单还没有到。\n"
	"<img src=x onerror=alert(1)> javascript:alert(document.cookie) "
	"[click](javascript:alert(2)) https://evil.example/login\n😀 شكرًا",
};

static json_t *
context_of(int i)
{
	return json_pack("{s:s, s:s, s:s}", "subject", subjects[i], "customer", customers[i],
	                 "message", messages[i]);
}

/* Claims key as bearer, then hands in a drafted mail for contract with
 * context (stolen; NULL: the member absent, json_null(): null). */
static void
output_with(const char *bearer, const char *key, const char *contract, json_t *context,
            struct tl_resp *r)
{
	json_t *body = json_pack("{s:s, s:{s:s}, s:i}", "key", key, "payload", "run", tl_run,
	                         "lease_seconds", 60);
	struct tl_claimed cl;
	char *path;

	tl_claim_body(bearer, body, &cl);
	json_decref(body);
	body = json_pack("{s:s, s:I, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:{s:[s]}}, s:s, s:o}",
	                 "lease_owner", cl.owner, "version", (json_int_t)cl.version, "contract",
	                 contract, "output", "subject", "Re: ваш заказ 4821 / your order 4821",
	                 "body", "Здравствуйте! Your parcel left the warehouse today.",
	                 "effect", "type", "email.send", "target", "demo_smtp", "payload", "to",
	                 CUSTOMER_MAIL, "requested_by", REQUESTER, "model", tl_model_json());
	if (context != NULL)
		json_object_set_new(body, "context", context);
	path = tl_run_path(key, "/output");
	tl_post_json(path, bearer, body, r);
	json_decref(body);
	free(path);
}

/* The approval id of the first challenge in an /output answer. */
static void
approval_of(const struct tl_resp *r, char *id, size_t idsz)
{
	free(dl_token_of(r, 0, id, idsz));
}

/* ---- apart and shown ---------------------------------------------------------- */

START_TEST(test_apart_and_shown)
{
	const char *bearers[2] = { dl_key_dev, dl_key_b }, *clients[2] = { "dev", dl_client_b };
	char key[160], ids[2][64], cid[32], path[512];
	char *hash[2], *effect[2], *chal[2];
	PGconn *c = tl_pg_connect();
	long offset = tl_log_offset();
	json_t *lines;
	int i;

	ck_assert_msg(dl_key_b != NULL, "no second client: `oncegatectl client add` failed");
	snprintf(key, sizeof(key), "%s-apart:ticket-4821", tl_run);
	for (i = 0; i < 2; i++) {
		struct tl_resp r;
		char *stored, *run_path;
		json_t *want = context_of(i), *got;

		output_with(bearers[i], key, "inbox_mail", context_of(i), &r);
		ck_assert_msg(r.status == 202, "%s output: HTTP %ld %.1000s", clients[i], r.status,
		              r.body);
		approval_of(&r, ids[i], sizeof(ids[i]));
		tl_resp_free(&r);
		ck_assert(dl_client_id(clients[i], cid, sizeof(cid)));
		stored = qstr(c, "SELECT context::text FROM workflow_runs"
		              " WHERE client_id = $1::bigint AND idempotency_key = $2", cid, key,
		              (char *)NULL);
		got = json_loads(stored ?: "", 0, NULL);
		ck_assert_msg(json_equal(got, want), "%s: the stored context is %s", clients[i],
		              stored ?: "NULL");
		json_decref(got);
		free(stored);
		hash[i] = qstr(c, "SELECT output_hash FROM workflow_runs"
		               " WHERE client_id = $1::bigint AND idempotency_key = $2", cid, key,
		               (char *)NULL);
		effect[i] = qstr(c, "SELECT effect::text FROM workflow_runs"
		                 " WHERE client_id = $1::bigint AND idempotency_key = $2", cid, key,
		                 (char *)NULL);
		chal[i] = qstr(c, "SELECT string_agg(effect::text, ',') FROM approvals"
		               " WHERE client_id = $1::bigint AND idempotency_key = $2", cid, key,
		               (char *)NULL);
		/* nothing of the context in the effect or in what a challenge sends */
		ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs r"
		                      " WHERE client_id = $1::bigint AND idempotency_key = $2"
		                      "   AND (strpos(effect::text, 'Мария') > 0"
		                      "        OR strpos(effect::text, 'محمد') > 0"
		                      "        OR strpos(output::text, 'javascript') > 0"
		                      "        OR EXISTS (SELECT 1 FROM approvals a"
		                      "             WHERE a.client_id = r.client_id"
		                      "               AND a.idempotency_key = r.idempotency_key"
		                      "               AND (strpos(a.effect::text, '4821 не') > 0"
		                      "                    OR strpos(a.effect::text, 'javascript') > 0)))",
		                      cid, key, (char *)NULL),
		                 0);
		/* the run's status returns it, as stored */
		run_path = tl_run_path(key, NULL);
		tl_get(run_path, bearers[i], &r);
		ck_assert_msg(r.status == 200 && json_equal(json_object_get(r.json, "context"), want),
		              "%s: GET %s: HTTP %ld %.600s", clients[i], run_path, r.status, r.body);
		tl_resp_free(&r);
		free(run_path);
		json_decref(want);
	}
	/* same output, same effect: the same hashes and effects, whatever the context */
	ck_assert_msg(hash[0] && hash[1] && strcmp(hash[0], hash[1]) == 0,
	              "output hashes differ with the context: %s %s", hash[0], hash[1]);
	ck_assert_msg(effect[0] && effect[1] && strcmp(effect[0], effect[1]) == 0,
	              "effects differ with the context:\n%s\n%s", effect[0], effect[1]);
	ck_assert_msg(chal[0] && chal[1] && strcmp(chal[0], chal[1]) == 0,
	              "the challenges' effects differ with the context");
	/* no log line carries any of it */
	lines = tl_log_collect(offset, NULL, NULL, 0);
	{
		char *text = json_dumps(lines, 0);

		ck_assert_msg(json_array_size(lines) > 0 && text != NULL &&
		              strstr(text, "Нажмите") == NULL && strstr(text, "لم يصل") == NULL &&
		              strstr(text, "Мария Иванова") == NULL && strstr(text, "订单") == NULL,
		              "the decision log holds context text (or no line at all)");
		free(text);
	}
	json_decref(lines);

	/* The cards: each tenant's own context, as plain text. */
	for (i = 0; i < 2; i++) {
		struct pl_doc d;
		char *t, *title;

		snprintf(path, sizeof(path), "/approve/card/%s", ids[i]);
		pl_doc_get(path, PERSON, PERSON_GROUPS, &d);
		ASSERT_STATUS(&d.r, 200);
		t = pl_doc_text1(&d, "//section[@class='context']//dd[@class='subject']");
		ck_assert_msg(strcmp(t, subjects[i]) == 0, "card %d subject: %s", i, t);
		free(t);
		t = pl_doc_text1(&d, "//section[@class='context']//dt[.='Customer']"
		                     "/following-sibling::dd[1]");
		ck_assert_msg(strcmp(t, customers[i]) == 0, "card %d customer: %s", i, t);
		free(t);
		t = pl_doc_text1(&d, "//section[@class='context']//pre");
		ck_assert_msg(strcmp(t, messages[i]) == 0, "card %d message: %s", i, t);
		free(t);
		title = pl_doc_text1(&d, "//h1");
		ck_assert_msg(strstr(title, subjects[i]) != NULL, "card %d title: %s", i, title);
		free(title);
		/* inert: no element came of the text, and it stands beside the draft */
		ck_assert_int_eq(pl_doc_count(&d, "//section[@class='context']//a | "
		                                  "//section[@class='context']//script | "
		                                  "//section[@class='context']//img | //script"),
		                 0);
		ck_assert_int_eq(pl_doc_count(&d, "//section[@class='context']"
		                                  "/following-sibling::section[@class='effect']"),
		                 1);
		pl_doc_free(&d);
	}

	/* The inbox: titled by the ticket, naming customer and draft. */
	{
		struct pl_doc d;
		char expr[512], *t;

		pl_doc_get("/approve/", PERSON, PERSON_GROUPS, &d);
		ASSERT_STATUS(&d.r, 200);
		/* one entry a run, whichever of its challenges: found by key and client */
		for (i = 0; i < 2; i++) {
			char entry[384];

			snprintf(entry, sizeof(entry), "//ol/li[.//code[.='%s'] and .//code[.='%s']]", key,
			         clients[i]);
			snprintf(expr, sizeof(expr), "%s/span[contains(@class,'meta')][1]", entry);
			snprintf(path, sizeof(path), "%s/a", entry);
			t = pl_doc_text1(&d, path);
			ck_assert_msg(strcmp(t, subjects[i]) == 0, "inbox entry %d title: %s", i, t);
			free(t);
			t = pl_doc_text1(&d, expr);
			ck_assert_msg(strstr(t, customers[i]) != NULL &&
			              strstr(t, "Re: ваш заказ 4821") != NULL,
			              "inbox entry %d about: %s", i, t);
			free(t);
		}
		pl_doc_free(&d);
	}
	for (i = 0; i < 2; i++) {
		free(hash[i]);
		free(effect[i]);
		free(chal[i]);
	}
	PQfinish(c);
}
END_TEST

/* Without a context the card has no such section, and the inbox keeps
 * the draft's subject as the title. */
START_TEST(test_without_context)
{
	char key[160], id[64], path[128], entry[384];
	struct tl_resp r;
	struct pl_doc d;
	char *t;

	snprintf(key, sizeof(key), "%s-none:ticket-4822", tl_run);
	output_with(dl_key_dev, key, "inbox_mail", json_object(), &r);
	ck_assert_msg(r.status == 202, "output: HTTP %ld %.600s", r.status, r.body);
	approval_of(&r, id, sizeof(id));
	tl_resp_free(&r);
	snprintf(path, sizeof(path), "/approve/card/%s", id);
	pl_doc_get(path, PERSON, PERSON_GROUPS, &d);
	ASSERT_STATUS(&d.r, 200);
	ck_assert_int_eq(pl_doc_count(&d, "//section[@class='context']"), 0);
	t = pl_doc_text1(&d, "//h1");
	ck_assert_str_eq(t, "Approval needed");
	free(t);
	pl_doc_free(&d);
	pl_doc_get("/approve/", PERSON, PERSON_GROUPS, &d);
	snprintf(entry, sizeof(entry), "//ol/li[.//code[.='%s'] and .//code[.='dev']]/a", key);
	t = pl_doc_text1(&d, entry);
	ck_assert_str_eq(t, "Re: ваш заказ 4821 / your order 4821");
	free(t);
	pl_doc_free(&d);
}
END_TEST

/* ---- refused ------------------------------------------------------------------- */

/* n copies of the UTF-8 character ch. */
static char *
repeat(const char *ch, size_t n)
{
	size_t len = strlen(ch), i;
	char *s = malloc(len * n + 1);

	for (i = 0; s != NULL && i < n; i++)
		memcpy(s + i * len, ch, len);
	if (s != NULL)
		s[len * n] = '\0';
	return s;
}

START_TEST(test_refused)
{
	char *long_subject = repeat("Я", 301), *ok_subject = repeat("Я", 300);
	char *long_message = repeat("語", 20001), *ok_message = repeat("語", 20000);
	struct {
		json_t *context;
		const char *field;
	} cases[] = {
		{ json_null(), "context" },
		{ json_string("Заказ 4821"), "context" },
		{ json_pack("[s]", "Заказ 4821"), "context" },
		{ json_pack("{s:s, s:s}", "subject", "Заказ", "priority", "high"), "context" },
		{ json_pack("{s:i}", "subject", 4821), "context.subject" },
		{ json_pack("{s:n}", "customer"), "context.customer" },
		{ json_pack("{s:{s:s}}", "message", "text", "привет"), "context.message" },
		{ json_pack("{s:s}", "subject", long_subject), "context.subject" },
		{ json_pack("{s:s}", "subject", "Заказ\n4821"), "context.subject" },
		{ json_pack("{s:s}", "customer", "Мария\tИванова"), "context.customer" },
		{ json_pack("{s:s}", "message", "привет\x01"), "context.message" },
		{ json_pack("{s:s}", "message", long_message), "context.message" },
	};
	PGconn *c = tl_pg_connect();
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char key[160], *before, *path;
		struct tl_claimed cl;
		struct tl_resp r;
		json_t *body;

		snprintf(key, sizeof(key), "%s-refused-%zu:ticket-4823", tl_run, i);
		tl_claim_run(key, &cl);
		before = tl_run_snapshot(c, key);
		body = json_pack("{s:s, s:I, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:{s:[s]}}, s:s, s:o}",
		                 "lease_owner", cl.owner, "version", (json_int_t)cl.version,
		                 "contract", "inbox_mail", "output", "subject", "Re: 4823", "body",
		                 "Здравствуйте!", "effect", "type", "email.send", "target", "demo_smtp",
		                 "payload", "to", CUSTOMER_MAIL, "requested_by", REQUESTER,
		                 "context", cases[i].context);
		path = tl_run_path(key, "/output");
		tl_post_json(path, dl_key_dev, body, &r);
		ck_assert_msg(r.status == 400 && strcmp(JSTR(r.json, "error"), "invalid_field") == 0 &&
		              strcmp(JSTR(r.json, "field"), cases[i].field) == 0,
		              "case %zu: expected 400 invalid_field naming %s: HTTP %ld %.400s", i,
		              cases[i].field, r.status, r.body);
		tl_resp_free(&r);
		tl_expect_run_unchanged(c, key, before, "a refused context");
		json_decref(body);
		free(before);
		free(path);
	}
	/* at the limits: accepted, stored whole */
	{
		char key[160], cid[32];
		struct tl_resp r;

		snprintf(key, sizeof(key), "%s-limits:ticket-4824", tl_run);
		output_with(dl_key_dev, key, "inbox_mail",
		            json_pack("{s:s, s:s}", "subject", ok_subject, "message", ok_message), &r);
		ck_assert_msg(r.status == 202, "at the limits: HTTP %ld %.400s", r.status, r.body);
		tl_resp_free(&r);
		ck_assert(dl_client_id("dev", cid, sizeof(cid)));
		ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs"
		                      " WHERE client_id = $1::bigint AND idempotency_key = $2"
		                      "   AND char_length(context->>'subject') = 300"
		                      "   AND char_length(context->>'message') = 20000",
		                      cid, key, (char *)NULL),
		                 1);
	}
	free(long_subject);
	free(ok_subject);
	free(long_message);
	free(ok_message);
	PQfinish(c);
}
END_TEST

/* ---- told ---------------------------------------------------------------------- */

START_TEST(test_told)
{
	char key[160];
	struct tl_resp r;
	struct dl_disp disp;
	double deadline;
	json_t *mails = NULL, *m, *chats = NULL;
	char *mail_from = pl_stack_mail_from();
	size_t i;

	snprintf(key, sizeof(key), "%s-told:ticket-4821", tl_run);
	output_with(dl_key_dev, key, "notify_reply", context_of(0), &r);
	ck_assert_msg(r.status == 202, "notify_reply output: HTTP %ld %.600s", r.status, r.body);
	tl_resp_free(&r);
	(void)tl_ctl(NULL, "sends", "resume", "--reason", "check_context tells approvers on loopback",
	             (char *)NULL);
	dl_disp_start_demo(&disp, mail_from);
	deadline = tl_now() + SETTLE_S;
	for (;;) {
		json_t *all = dl_mails_received();

		json_t *rq;
		size_t nchat = 0;

		json_decref(mails);
		json_decref(chats);
		mails = json_array();
		json_array_foreach(all, i, m)
			if (strstr(JSTR(m, "body"), key) != NULL)
				json_array_append(mails, m);
		json_decref(all);
		chats = prov_call("GET", "/_requests");
		json_array_foreach(chats, i, rq)
			nchat += strstr(JSTR(rq, "body"), key) != NULL;
		if ((json_array_size(mails) >= 2 && nchat >= 1) || tl_now() > deadline)
			break;
		tl_sleep_ms(200);
	}
	(void)dl_disp_stop(&disp, 20);
	(void)tl_ctl(NULL, "sends", "stop", "--reason", "check_context done", (char *)NULL);
	ck_assert_msg(json_array_size(mails) >= 2, "%zu notice mails for %s", json_array_size(mails),
	              key);
	json_array_foreach(mails, i, m) {
		const char *subj = JSTR(m, "subject"), *body = JSTR(m, "body");

		/* the ticket's own subject and its customer, before what is asked;
		 * the customer's address neutralised (no dot between letters) */
		ck_assert_msg(strncmp(subj, "Approval needed: \xe2\x80\x9c", 20) == 0 &&
		              strstr(subj, subjects[0]) != NULL &&
		              strstr(subj, "from Мария Иванова <maria[.]ivanova@example[.]com>") != NULL &&
		              strstr(subj, "email.send to demo_smtp") != NULL,
		              "the notice's Subject: %s", subj);
		ck_assert_msg(strstr(body, "Answers:    ") != NULL && strstr(body, subjects[0]) != NULL &&
		              strstr(body, "Customer:   Мария Иванова") != NULL,
		              "the notice's body lacks the ticket:\n%s", body);
		ck_assert_msg(strstr(body, "Нажмите") == NULL && strstr(body, "javascript") == NULL,
		              "the notice carries the customer's message:\n%s", body);
	}
	{
		size_t n = 0;
		json_t *rq;

		json_array_foreach(chats, i, rq) {
			json_t *b = json_loads(JSTR(rq, "body"), 0, NULL);
			const json_t *s = json_object_get(b, "summary");

			if (b != NULL && strstr(JSTR(b, "text"), key) != NULL) {
				ck_assert_msg(strcmp(JSTR(s, "context_subject"), subjects[0]) == 0 &&
				              strstr(JSTR(s, "context_customer"), "maria[.]ivanova") != NULL,
				              "the chat summary: %s", JSTR(rq, "body"));
				ck_assert_msg(strstr(JSTR(rq, "body"), "Нажмите") == NULL,
				              "the chat notice carries the message");
				n++;
			}
			json_decref(b);
		}
		ck_assert_msg(n >= 1, "no chat notice for %s", key);
	}
	json_decref(mails);
	json_decref(chats);
	free(mail_from);
}
END_TEST

/* ---- purged -------------------------------------------------------------------- */

/* A run of "dev" with tenant i's context, rejected on its card by PERSON. */
static void
rejected_run(const char *key, int i)
{
	char id[64], path[128];
	struct tl_resp r;

	output_with(dl_key_dev, key, "inbox_mail", context_of(i), &r);
	ck_assert_msg(r.status == 202, "output: HTTP %ld %.600s", r.status, r.body);
	approval_of(&r, id, sizeof(id));
	tl_resp_free(&r);
	snprintf(path, sizeof(path), "/approve/card/%s", id);
	ck_assert_int_eq(pl_decide_at(path, PERSON, PERSON_GROUPS, "reject", NULL, 0), 303);
}

START_TEST(test_purged)
{
	char old_key[160], new_key[160], cid[32];
	PGconn *c = tl_pg_connect();
	struct tl_resp r;
	char *out = NULL;

	snprintf(old_key, sizeof(old_key), "%s-purged:ticket-4700", tl_run);
	snprintf(new_key, sizeof(new_key), "%s-kept:ticket-4701", tl_run);
	rejected_run(old_key, 1);
	output_with(dl_key_dev, new_key, "inbox_mail", context_of(0), &r);
	tl_resp_free(&r);
	ck_assert(dl_client_id("dev", cid, sizeof(cid)));
	{
		char *st = dl_run_state(c, cid, old_key);

		ck_assert_str_eq(st ?: "(none)", "rejected");
		free(st);
	}
	qexec(c, "UPDATE workflow_runs SET updated_at = now() - interval '40 days'"
	      " WHERE client_id = $1::bigint AND idempotency_key = $2", cid, old_key, (char *)NULL);
	ck_assert_msg(tl_ctl(&out, "purge", "--older-than", "30d", "--reason",
	                     "check_context: retention 30 days", (char *)NULL) == 0,
	              "purge: %s", out ?: "");
	free(out);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE client_id = $1::bigint"
	                      " AND idempotency_key = $2 AND context IS NULL AND output_hash IS NOT NULL",
	                      cid, old_key, (char *)NULL),
	                 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE client_id = $1::bigint"
	                      " AND idempotency_key = $2 AND context->>'subject' = $3",
	                      cid, new_key, subjects[0], (char *)NULL),
	                 1);
	PQfinish(c);
}
END_TEST

/* ---- replayed ------------------------------------------------------------------ */

/* A rejected run replayed by an operator: the new run carries the
 * original's context, and its card shows it. */
START_TEST(test_replayed)
{
	char key[160], nkey[192], path[128], cid[32];
	PGconn *c = tl_pg_connect();
	struct pl_doc d;
	char *out = NULL, *err = NULL, *t;
	long st;

	snprintf(key, sizeof(key), "%s-replayed:ticket-4900", tl_run);
	snprintf(nkey, sizeof(nkey), "%s-again", key);
	rejected_run(key, 1);
	st = tl_ctl_err(&out, &err, "replay", key, "--new-key", nkey, "--client", "dev", "--reason",
	                "Ольга отклонила по ошибке", (char *)NULL);
	ck_assert_msg(st == 0, "replay exited %ld: %s%s", st, out, err);
	free(out);
	free(err);
	ck_assert(dl_client_id("dev", cid, sizeof(cid)));
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs n JOIN workflow_runs o"
	                      "    ON o.client_id = n.client_id AND o.idempotency_key = $2"
	                      " WHERE n.client_id = $1::bigint AND n.idempotency_key = $3"
	                      "   AND n.context = o.context AND n.context->>'customer' = $4",
	                      cid, key, nkey, customers[1], (char *)NULL),
	                 1);
	t = qstr(c, "SELECT a.id::text FROM approvals a WHERE a.client_id = $1::bigint"
	         "   AND a.idempotency_key = $2 ORDER BY a.created_at LIMIT 1", cid, nkey, (char *)NULL);
	ck_assert_ptr_nonnull(t);
	snprintf(path, sizeof(path), "/approve/card/%s", t);
	free(t);
	pl_doc_get(path, PERSON, PERSON_GROUPS, &d);
	ASSERT_STATUS(&d.r, 200);
	t = pl_doc_text1(&d, "//section[@class='context']//pre");
	ck_assert_msg(strcmp(t, messages[1]) == 0, "the replay's card shows: %s", t);
	free(t);
	pl_doc_free(&d);
	PQfinish(c);
}
END_TEST

TL_SUITE(context_suite, "context",
         {"context", 4 * SETTLE_S + 60, dl_tcase,
          .tests = TL_LIST(test_apart_and_shown, test_without_context, test_refused, test_told,
                           test_purged, test_replayed)})

DL_TENANTS_MAIN("check_context", "cx", .suite = context_suite, .smtp = true)

/*
 * check_notify.c — integration suite: approvers told by the product, with
 * production-shaped data, against the stack of ./dev test (the test
 * contracts notify_reply and notify_fast of tests/data/contracts-test).
 *
 *   told        two tenants hand in one business key with a 200-character
 *               subject in five scripts, for three approver entries; the
 *               /output answer holds no link;
 *               the SMTP sink receives one mail per run for the group
 *               "служба поддержки" (both its addresses, what is asked,
 *               who asked, the expiry, the link) and the loopback HTTP
 *               provider one Slack/Teams-style JSON body per run for the
 *               group "support leads" (text, summary, link); the mail's link,
 *               followed through nginx with oauth2-proxy's identity
 *               headers, opens the card; approving sends the reply once and
 *               the chat's link then says another approver decided; the
 *               other tenant's links still work, and an operator's resend
 *               tells its group again with a new link (the old one then
 *               says it is no longer valid);
 *   at rest     no link's token is in the database (pg_dump), nor in any
 *               file of the stack's state directory or of the suite's
 *               dispatcher (logs, stderr): only in what the recipients got;
 *   replayed    two tenants' runs under one key, rejected from their mails,
 *               replayed by an operator (one with text, one with --json,
 *               no --force: notices are no business effect): no link in
 *               the CLI's answer ("notified"); each new run's approvers
 *               get a mail and a chat notice naming the NEW key, whose
 *               link opens its card; approving sends the reply once; no
 *               token at rest;
 *   reminder,   on notify_fast's clock (3 s, 6 s) the group is told again
 *   escalation  with a new link — the first one then says it is no longer
 *               valid — and the managers' group is added with a challenge
 *               and a mail of its own; both logged and counted in /metrics;
 *               a manager approves from that mail and the reply goes once;
 *   quorum      a run two people must approve (notify_quorum): each entry
 *               is told; a reminder goes only to an entry nobody voted on;
 *               the managers an escalation adds carry the quorum (one
 *               manager's approval alone settles nothing); the reply goes
 *               once when the second approval comes;
 *   held        with the kill switch off no notice goes out (the effect is
 *               held); switched on, it does.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "dispatchlib.h"
#include "pagelib.h"
#include "testlib.h"

#define SUPPORT        "group:служба поддержки"
#define SUPPORT_RCPT   "podderzhka@support.example.test"
#define SUPPORT_RCPT2  "dezhurny@support.example.test"
#define MANAGERS_RCPT  "rukovoditeli@support.example.test"
#define PERSON         "olga.petrova@example.com"
/* as oauth2-proxy sends X-Auth-Request-Groups: joined with commas */
#define PERSON_GROUPS  "sales team,служба поддержки"
#define LEAD           "dmitry.volkov@example.com"
#define LEAD_GROUPS    "support leads,engineering"
#define MANAGER        "anna.sokolova@example.com"
#define MANAGER_GROUPS "руководители поддержки, all staff"
#define REQUESTER      "Мария Иванова <maria.ivanova@example.com>"
/* as the notices show it (neutralise.h: no dot between letters) */
#define REQUESTER_SHOWN "Мария Иванова <maria[.]ivanova@example[.]com>"
#define CUSTOMER       "customer.48213@mail.example.com"
#define SETTLE_S       30

#define JSTR(o, n) (tl_jstr((o), (n)) ? tl_jstr((o), (n)) : "(none)")

/* A drafted reply with the corpus mail's subject and body, as a workflow
 * hands it in for contract. */
static void
reply_run(const char *bearer, const char *key, const char *contract, const char *mail_id,
          struct tl_resp *r)
{
	dl_corpus_mail_output(bearer, key, contract, mail_id, json_pack("[s]", CUSTOMER), REQUESTER,
	                      r);
}

/* The token of the first approval link in text (malloc'd), or NULL. */
static char *
link_token(const char *text)
{
	char prefix[512];
	const char *p;
	size_t n = 0;

	snprintf(prefix, sizeof(prefix), "%s/approve/", tl_env("ONCEGATE_URL"));
	if (text == NULL || (p = strstr(text, prefix)) == NULL)
		return NULL;
	/* the real link stands first and alone on its line: no "://" before
	 * it (nor after: whatever the model wrote is shown without one) */
	ck_assert_msg(strstr(text, "://") == strstr(p, "://") && (p == text || p[-1] == '\n'),
	              "the notice's first link is not oncegate's:\n%s", text);
	p += strlen(prefix);
	while ((p[n] >= 'A' && p[n] <= 'Z') || (p[n] >= 'a' && p[n] <= 'z') ||
	       (p[n] >= '0' && p[n] <= '9') || p[n] == '-' || p[n] == '_')
		n++;
	ck_assert_msg((p[n] == '\n' || p[n] == '\0') && strstr(p + n, "://") == NULL,
	              "the link is not alone on its line, or another follows:\n%s", text);
	return n == 43 ? strndup(p, n) : NULL;
}

static char *
token_path(const char *token)
{
	char *p = NULL;

	ck_assert_int_gt(asprintf(&p, "/approve/%s", token), 0);
	return p;
}

/* Mails received whose body names the run key and whose subject starts
 * with lead, to first_rcpt (NULL: any). */
static json_t *
mails_for(const char *key, const char *lead, const char *first_rcpt)
{
	json_t *all = dl_mails_received(), *out = json_array(), *m;
	size_t i;

	json_array_foreach(all, i, m) {
		const char *rc = json_string_value(json_array_get(json_object_get(m, "rcpt"), 0));

		if (strstr(JSTR(m, "body"), key) == NULL ||
		    strncmp(JSTR(m, "subject"), lead, strlen(lead)) != 0)
			continue;
		if (first_rcpt != NULL && (rc == NULL || strcmp(rc, first_rcpt) != 0))
			continue;
		json_array_append(out, m);
	}
	json_decref(all);
	return out;
}

static json_t *
wait_mails(const char *key, const char *lead, const char *first_rcpt, size_t want, double secs)
{
	double deadline = tl_now() + secs;
	json_t *got;

	for (;;) {
		got = mails_for(key, lead, first_rcpt);
		if (json_array_size(got) >= want || tl_now() > deadline)
			return got;
		json_decref(got);
		tl_sleep_ms(200);
	}
}

/* The chat notices the HTTP provider received for the run key (bodies
 * parsed). */
static json_t *
chats_for(const char *key)
{
	json_t *all = prov_call("GET", "/_requests"), *out = json_array(), *r;
	size_t i;

	json_array_foreach(all, i, r) {
		json_t *b = json_loads(JSTR(r, "body"), 0, NULL);

		if (b != NULL && strstr(JSTR(b, "text"), key) != NULL &&
		    strstr(JSTR(r, "idempotency_key"), "/approval.notify/") != NULL)
			json_array_append(out, b);
		json_decref(b);
	}
	json_decref(all);
	return out;
}

/* The chat notices of the run key whose text starts with lead ("": all). */
static json_t *
chats_led(const char *key, const char *lead)
{
	json_t *all = chats_for(key), *out = json_array(), *c;
	size_t i;

	json_array_foreach(all, i, c)
		if (strncmp(JSTR(c, "text"), lead, strlen(lead)) == 0)
			json_array_append(out, c);
	json_decref(all);
	return out;
}

static json_t *
wait_chats_led(const char *key, const char *lead, size_t want, double secs)
{
	double deadline = tl_now() + secs;
	json_t *got;

	for (;;) {
		got = chats_led(key, lead);
		if (json_array_size(got) >= want || tl_now() > deadline)
			return got;
		json_decref(got);
		tl_sleep_ms(200);
	}
}

/* The reply the approval sends, as the customer's mailbox gets it. */
static size_t
replies_to_customer(const char *subject)
{
	json_t *all = dl_mails_received(), *m;
	size_t i, n = 0;

	json_array_foreach(all, i, m)
		if (strcmp(json_string_value(json_array_get(json_object_get(m, "rcpt"), 0)) ?: "",
		           CUSTOMER) == 0 &&
		    strcmp(JSTR(m, "subject"), subject) == 0)
			n++;
	json_decref(all);
	return n;
}

static size_t
wait_replies(const char *subject, size_t want, double secs)
{
	double deadline = tl_now() + secs;
	size_t n;

	while ((n = replies_to_customer(subject)) < want && tl_now() < deadline)
		tl_sleep_ms(200);
	return n;
}

/* The page at a link: status and its whole text (malloc'd). */
static char *
page_text(const char *token, const char *user, const char *groups, long *status)
{
	struct pl_doc d;
	char *path = token_path(token), *text;

	pl_doc_get(path, user, groups, &d);
	*status = d.r.status;
	text = pl_doc_all_text(&d);
	pl_doc_free(&d);
	free(path);
	return text;
}

/* No token of tokens (a JSON array of strings) is at rest: not in a dump
 * of the database, not in any file of the stack's state directory (logs,
 * config, PostgreSQL's files) nor of the suite's files (the dispatcher's
 * log and stderr), except what the recipients received (the sink's record
 * and the providers' output). */
static void
assert_nowhere(const json_t *tokens)
{
	char *state = tl_state_dir(), *cmd = NULL, *out;
	const json_t *t;
	size_t i;

	ck_assert_int_gt(asprintf(&cmd, "pg_dump --no-owner -f '%s/dump.sql' 2>&1", g_tmp), 0);
	out = tl_shell_output(cmd);
	free(cmd);
	free(out);
	cmd = NULL;
	ck_assert_int_gt(asprintf(&cmd, "test -s '%s/dump.sql' && grep -c 'approval_replaced_links'"
	                                " '%s/dump.sql'", g_tmp, g_tmp), 0);
	out = tl_shell_output(cmd);
	ck_assert_msg(out != NULL && atoi(out) > 0, "pg_dump wrote no dump with the new table");
	free(out);
	free(cmd);
	json_array_foreach(tokens, i, t) {
		cmd = NULL;
		ck_assert_int_gt(asprintf(&cmd, "grep -rlaF -- '%s' '%s' '%s' 2>/dev/null"
		                                " | grep -v -e '/mail.jsonl$' -e '/http_provider.out$'"
		                                " -e '/smtp_sink.out$' -e '/decode.py$' || true",
		                          json_string_value(t), state, g_tmp),
		                 0);
		out = tl_shell_output(cmd);
		ck_assert_msg(out == NULL || out[0] == '\0', "a link's token is at rest in:\n%s", out);
		free(out);
		free(cmd);
	}
	free(state);
}

/* A dispatcher of the test sending to the loopback providers (as the
 * stack's demo_smtp From address), with the kill switch turned to sw
 * ("on": sends; "off": holds). */
static void
sender_start(struct dl_disp *d, const char *sw)
{
	char *from = pl_stack_mail_from();

	(void)tl_ctl(NULL, "sends", strcmp(sw, "on") == 0 ? "resume" : "stop", "--reason",
	             strcmp(sw, "on") == 0 ? "check_notify sends to loopback"
	                                   : "check_notify holds notices",
	             (char *)NULL);
	dl_disp_start_demo(d, from);
	free(from);
}

/* ---- told ------------------------------------------------------------------- */

/* `oncegatectl explain KEY --client CLIENT --json`: "Did we send?" must be
 * want_sent and "Approvers told?" want_told, counted from the run's own
 * effects and its notices apart: a delivered notice is never the run's
 * send. The human table says the same. */
static void
expect_explain(const char *key, const char *client, const char *want_sent, const char *want_told,
               const char *when)
{
	char *out = NULL;
	json_t *doc, *e;
	size_t i;

	ck_assert_int_eq(tl_ctl(&out, "--json", "explain", key, "--client", client, (char *)NULL),
	                 0);
	doc = json_loads(out, 0, NULL);
	ck_assert_msg(doc != NULL, "explain --json: %s", out);
	ck_assert_msg(strcmp(JSTR(json_object_get(doc, "sent"), "answer"), want_sent) == 0,
	              "%s: \"Did we send?\" answers %s (want %s): %s", when,
	              JSTR(json_object_get(doc, "sent"), "answer"), want_sent, out);
	ck_assert_msg(strcmp(JSTR(json_object_get(doc, "told"), "answer"), want_told) == 0,
	              "%s: \"Approvers told?\" answers %s (want %s): %s", when,
	              JSTR(json_object_get(doc, "told"), "answer"), want_told, out);
	json_array_foreach(json_object_get(doc, "effects"), i, e)
		ck_assert_msg(strcmp(JSTR(e, "type"), "approval.notify") != 0,
		              "%s: a notice is listed as the run's effect: %s", when, out);
	if (strcmp(want_told, "yes") == 0)
		ck_assert_msg(json_array_size(json_object_get(doc, "notices")) > 0,
		              "%s: the notices are not listed apart: %s", when, out);
	json_decref(doc);
	free(out);
	ck_assert_int_eq(tl_ctl(&out, "explain", key, "--client", client, (char *)NULL), 0);
	ck_assert_msg(out != NULL && strstr(out, "Approvers told?") != NULL &&
	              strstr(out, strcmp(want_sent, "yes") == 0 ? "Did we send?               yes"
	                                                        : "Did we send?               n") !=
	                  NULL,
	              "%s: explain's table: %s", when, out);
	free(out);
}

START_TEST(test_each_entry_told_link_works)
{
	const char *bearer[2] = { dl_key_dev, dl_key_b };
	char *key = tl_corpus_key(tl_run, "order №4821-77 · возврат", 200);
	const char *subject = tl_corpus_mail_str("mixed_max", "subject");
	json_t *tokens = json_array(), *mails, *chats, *a;
	char *mtok[2], *ctok[2], *text, expect[512], *path, loc[512];
	const char *body;
	struct tl_resp r;
	double t0 = 0;
	long st;
	struct dl_disp disp;
	size_t i, k;
	int t;

	ck_assert_msg(dl_key_b != NULL, "no second client: `oncegatectl client add` failed");
	sender_start(&disp, "on");
	for (t = 0; t < 2; t++) {
		t0 = tl_now();
		reply_run(bearer[t], key, "notify_reply", "mixed_max", &r);
		ck_assert_int_eq(json_array_size(json_object_get(r.json, "approvals")), 3);
		json_array_foreach(json_object_get(r.json, "approvals"), i, a) {
			ck_assert_msg(json_object_get(a, "url") == NULL,
			              "the answer holds a link although the approvers are told: %s",
			              r.body);
			ck_assert_msg(json_is_true(json_object_get(a, "notified")), "%s", r.body);
		}
		tl_resp_free(&r);
	}
	/* each run: one mail to the support group, one chat notice to the
	 * leads (both runs share the business key: the links tell them apart) */
	mails = wait_mails(key, "Approval needed: ", SUPPORT_RCPT, 2, SETTLE_S);
	chats = wait_chats_led(key, "", 2, SETTLE_S);
	fprintf(stderr, "check_notify: measured: the notices of two runs (mails and chat) all in "
	        "%.2f s after the second /output answer\n", tl_now() - t0);
	ck_assert_msg(json_array_size(mails) == 2, "%zu notice mails for two runs (want 2)",
	              json_array_size(mails));
	ck_assert_msg(json_array_size(chats) == 2, "%zu chat notices for two runs (want 2)",
	              json_array_size(chats));
	/* told, not sent: the notices went out, the reply waits for a person */
	expect_explain(key, "dev", "not_yet", "yes", "awaiting, notices delivered");
	expect_explain(key, dl_client_b, "not_yet", "yes", "the other tenant's run, awaiting");
	for (i = 0; i < 2; i++) {
		json_t *m = json_array_get(mails, i), *c = json_array_get(chats, i);
		const json_t *rcpt = json_object_get(m, "rcpt");

		ck_assert_msg(json_array_size(rcpt) == 2 &&
		              strcmp(json_string_value(json_array_get(rcpt, 1)), SUPPORT_RCPT2) == 0,
		              "the notice goes to both addresses of the entry");
		/* what is asked, in the Subject: the type, target and subject */
		snprintf(expect, sizeof(expect), "Approval needed: email.send to demo_smtp: \u201c%.40s",
		         subject);
		ck_assert_msg(strncmp(JSTR(m, "subject"), expect, strlen(expect)) == 0,
		              "subject: %s", JSTR(m, "subject"));
		ck_assert_msg(tl_utf8_chars(JSTR(m, "subject")) < 200,
		              "a 200-character subject is quoted shortened: %s", JSTR(m, "subject"));
		body = JSTR(m, "body");
		ck_assert_msg(strstr(body, subject) != NULL, "the body quotes the whole subject");
		ck_assert_msg(strstr(body, "Asked by:   " REQUESTER_SHOWN) != NULL, "who asked: %s",
		              body);
		ck_assert_msg(strstr(body, "Expires:    20") != NULL, "the expiry: %s", body);
		ck_assert_msg(strstr(body, "For:        " SUPPORT) != NULL, "for whom: %s", body);
		mtok[i] = link_token(body);
		ck_assert_msg(mtok[i] != NULL, "no link in the mail:\n%s", body);
		/* the chat body: Slack/Teams read "text" */
		ck_assert_msg(strncmp(JSTR(c, "text"), "Approval needed.", 16) == 0, "chat text: %s",
		              JSTR(c, "text"));
		ck_assert_str_eq(JSTR(json_object_get(c, "summary"), "type"), "email.send");
		ck_assert_str_eq(JSTR(json_object_get(c, "summary"), "subject"), subject);
		ctok[i] = link_token(JSTR(c, "link"));
		ck_assert_msg(ctok[i] != NULL && strstr(JSTR(c, "text"), ctok[i]) != NULL,
		              "chat link: %s", JSTR(c, "link"));
		json_array_append_new(tokens, json_string(mtok[i]));
		json_array_append_new(tokens, json_string(ctok[i]));
	}
	for (i = 0; i < 4; i++)
		for (k = 0; k < i; k++)
			ck_assert_msg(strcmp(json_string_value(json_array_get(tokens, i)),
			                     json_string_value(json_array_get(tokens, k))) != 0,
			              "two notices carry one link");

	/* the mail's link opens the card for a member of the group */
	text = page_text(mtok[0], PERSON, PERSON_GROUPS, &st);
	ck_assert_msg(st == 200, "the mail's link: HTTP %ld: %.500s", st, text);
	ck_assert_msg(strstr(text, "demo_smtp") != NULL, "the card: %.500s", text);
	free(text);
	/* approving sends the reply once */
	path = token_path(mtok[0]);
	ck_assert_int_eq(pl_decide_at(path, PERSON, PERSON_GROUPS, "approve", loc, sizeof(loc)), 303);
	ck_assert_msg(wait_replies(subject, 1, SETTLE_S) == 1, "the approved reply did not go out");
	tl_sleep_ms(1500);
	ck_assert_msg(replies_to_customer(subject) == 1, "the reply went out %zu times",
	              replies_to_customer(subject));
	free(path);
	{
		/* the approved run answers yes once its reply is delivered; the
		 * other tenant's run under the same key still not yet */
		PGconn *c = tl_pg_connect();
		const char *q[1] = { key };
		char *cl = tl_pg_value(c, "SELECT c.name FROM workflow_runs r JOIN api_clients c"
		                          " ON c.id = r.client_id WHERE r.idempotency_key = $1"
		                          " AND r.state = 'completed'", 1, q);
		int w;

		ck_assert_msg(cl != NULL, "no completed run under the shared key");
		for (w = 0; w < 50 && cl != NULL; w++) {
			char *done = tl_pg_value(c, "SELECT count(*) FROM effect_outbox e"
			                            " WHERE e.idempotency_key = $1"
			                            " AND e.effect_type = 'email.send'"
			                            " AND e.state = 'completed'", 1, q);
			bool ok = done != NULL && strcmp(done, "1") == 0;

			free(done);
			if (ok)
				break;
			tl_sleep_ms(100);
		}
		expect_explain(key, cl, "yes", "yes", "approved and delivered");
		expect_explain(key, strcmp(cl, "dev") == 0 ? dl_client_b : "dev", "not_yet", "yes",
		               "the other tenant's run, still awaiting");
		free(cl);
		PQfinish(c);
	}
	/* the same run's chat link: another approver decided; which of the
	 * chat notices is the same run's is told by its page */
	{
		int voided = 0, open = 0;

		for (i = 0; i < 2; i++) {
			text = page_text(ctok[i], LEAD, LEAD_GROUPS, &st);
			if (st == 410 && strstr(text, "Another approver already decided") != NULL)
				voided++;
			else if (st == 200)
				open++;
			free(text);
		}
		ck_assert_msg(voided == 1 && open == 1,
		              "chat links after one run's decision: %d voided, %d open", voided, open);
	}
	/* the other tenant's run: its mail link still works; an operator's
	 * resend tells the group again with a new link, and the old one then
	 * says it is no longer valid */
	text = page_text(mtok[1], PERSON, PERSON_GROUPS, &st);
	ck_assert_msg(st == 200, "the other run's link: HTTP %ld: %.300s", st, text);
	free(text);
	{
		PGconn *c = tl_pg_connect();
		const char *q[2] = { key, SUPPORT };
		char *id = tl_pg_value(c, "SELECT id FROM approvals WHERE idempotency_key = $1"
		                          " AND approver = $2 AND state = 'pending'", 2, q);
		json_t *again;
		char *fresh;

		ck_assert_msg(id != NULL, "the other run's challenge for the support group");
		ck_assert_int_eq(tl_ctl(NULL, "approval", "resend", id, "--reason",
		                        "Ольга не получила письмо", (char *)NULL),
		                 0);
		again = wait_mails(key, "Approval needed: ", SUPPORT_RCPT, 3, SETTLE_S);
		ck_assert_msg(json_array_size(again) == 3, "no resent notice");
		body = JSTR(json_array_get(again, 2), "body");
		ck_assert_msg(strstr(body, "sent again with a new link") != NULL, "resend: %s", body);
		fresh = link_token(body);
		ck_assert_msg(fresh != NULL && strcmp(fresh, mtok[1]) != 0, "the resend's link is new");
		text = page_text(mtok[1], PERSON, PERSON_GROUPS, &st);
		ck_assert_msg(st == 410 && strstr(text, "no longer valid") != NULL,
		              "the link the resend replaced: HTTP %ld: %.500s", st, text);
		free(text);
		text = page_text(fresh, PERSON, PERSON_GROUPS, &st);
		ck_assert_msg(st == 200, "the resent link: HTTP %ld", st);
		free(text);
		json_array_append_new(tokens, json_string(fresh));
		free(fresh);
		json_decref(again);
		free(id);
		PQfinish(c);
	}

	(void)dl_disp_stop(&disp, 20);
	assert_nowhere(tokens);
	for (i = 0; i < 2; i++) {
		free(mtok[i]);
		free(ctok[i]);
	}
	json_decref(mails);
	json_decref(chats);
	json_decref(tokens);
	free(key);
}
END_TEST

/* ---- hostile text ---------------------------------------------------------------- */

/* What a model (and a caller's requested_by) may plant: phishing links in
 * three spellings, Slack mentions and a Slack link, a Markdown link, a
 * bidi override, a zero-width space, among Cyrillic, CJK, Hebrew, Arabic
 * and an emoji sequence (one line, as a mail subject must be). */
#define HOSTILE_SUBJECT                                                                   \
	"Срочно <!channel> <@U024BE7LH> [Одобрить](https://gate.example.com.evil.example/" \
	"approve/x) <https://evil.example|批准> \u202egpj.exe\u202c \u200bwww.evil.example "  \
	"שלום مرحبا 👨\u200d👩\u200d👧"
#define HOSTILE_MAIL                                                                       \
	"Срочно <!channel> <@U024BE7LH> [Одобрить](hxxps[:]//gate[.]example[.]com[.]evil[.]" \
	"example/approve/x) <hxxps[:]//evil[.]example|批准> <U+202E>gpj[.]exe<U+202C> "       \
	"<U+200B>www[.]evil[.]example שלום مرحبا 👨\u200d👩\u200d👧"
#define HOSTILE_CHAT                                                                       \
	"Срочно &lt;!channel&gt; &lt;@U024BE7LH&gt; \\[Одобрить\\]\\(hxxps[:]//gate[.]example" \
	"[.]com[.]evil[.]example/approve/x) &lt;hxxps[:]//evil[.]example|批准&gt; "            \
	"&lt;U+202E&gt;gpj[.]exe&lt;U+202C&gt; &lt;U+200B&gt;www[.]evil[.]example שלום مرحبا " \
	"👨\u200d👩\u200d👧"
#define HOSTILE_REQUESTER "[Approve](https://evil.example/a) \u202e <maria.ivanova@example.com>"
#define HOSTILE_REQUESTER_MAIL                                                             \
	"[Approve](hxxps[:]//evil[.]example/a) <U+202E> <maria[.]ivanova@example[.]com>"
#define HOSTILE_REQUESTER_CHAT                                                             \
	"\\[Approve\\]\\(hxxps[:]//evil[.]example/a) &lt;U+202E&gt; "                          \
	"&lt;maria[.]ivanova@example[.]com&gt;"

/* No bidi override or zero-width space as such in s. */
static void
assert_no_hidden(const char *what, const char *s)
{
	ck_assert_msg(strstr(s, "\u202e") == NULL && strstr(s, "\u202c") == NULL &&
	              strstr(s, "\u200b") == NULL, "%s carries a bidi or invisible character: %s",
	              what, s);
}

START_TEST(test_hostile_text_inert)
{
	char *key = tl_corpus_key(tl_run, "hostile · враждебный · 敵対", 120);
	json_t *mails, *all, *req, *b = NULL;
	const char *body, *subj, *text;
	char *tok, *raw = NULL, expect[2048];
	struct dl_disp disp;
	struct tl_resp r;
	double deadline;
	size_t i;

	sender_start(&disp, "on");
	dl_claim_and_output(dl_key_dev, key, "notify_reply",
	                    json_pack("{s:s, s:s}", "subject", HOSTILE_SUBJECT, "body",
	                              "Здравствуйте! Ваш заказ отправлен. 谢谢。"),
	                    json_pack("{s:s, s:s, s:{s:[s]}}", "type", "email.send", "target",
	                              "demo_smtp", "payload", "to", CUSTOMER),
	                    HOSTILE_REQUESTER, &r);
	ck_assert_msg(r.status == 202, "output: HTTP %ld %.1000s", r.status, r.body);
	tl_resp_free(&r);

	/* the mail, as the SMTP sink received it */
	mails = wait_mails(key, "Approval needed: ", SUPPORT_RCPT, 1, SETTLE_S);
	ck_assert_msg(json_array_size(mails) == 1, "%zu notice mails (want 1)",
	              json_array_size(mails));
	subj = JSTR(json_array_get(mails, 0), "subject");
	body = JSTR(json_array_get(mails, 0), "body");
	/* the first 120 characters of the draft's subject, neutralised */
	snprintf(expect, sizeof(expect), "Approval needed: email.send to demo_smtp: \u201c%s",
	         "Срочно <!channel> <@U024BE7LH> [Одобрить](hxxps[:]//gate[.]example[.]com[.]evil"
	         "[.]example/approve/x) <hxxps[:]//evil[.]example|批准> <U+202E>gp\u2026\u201d");
	ck_assert_msg(strcmp(subj, expect) == 0, "subject:\n%s\nwant:\n%s", subj, expect);
	ck_assert_msg(strstr(subj, "://") == NULL, "a link in the subject: %s", subj);
	assert_no_hidden("the mail's subject", subj);
	assert_no_hidden("the mail's body", body);
	tok = link_token(body); /* the real link first, alone on its line */
	ck_assert_msg(tok != NULL, "no link in the mail:\n%s", body);
	free(tok);
	ck_assert_msg(strstr(body, "\nWhat:       email.send to demo_smtp: \u201c" HOSTILE_MAIL
	                           "\u201d\n") != NULL,
	              "the quoted subject, neutralised for mail:\n%s", body);
	ck_assert_msg(strstr(body, "\nAsked by:   " HOSTILE_REQUESTER_MAIL " (API client ") != NULL,
	              "the requester, neutralised for mail:\n%s", body);
	ck_assert_msg(strstr(body, "evil.example") == NULL && strstr(body, "https://evil") == NULL,
	              "a clickable host in the mail:\n%s", body);
	json_decref(mails);

	/* the chat notice, as the HTTP stand-in received its bytes */
	deadline = tl_now() + SETTLE_S;
	while (raw == NULL && tl_now() < deadline) {
		all = prov_call("GET", "/_requests");
		json_array_foreach(all, i, req) {
			const char *rb = JSTR(req, "body");

			if (strstr(JSTR(req, "idempotency_key"), "/approval.notify/") != NULL &&
			    strstr(rb, key) != NULL) {
				raw = strdup(rb);
				break;
			}
		}
		json_decref(all);
		if (raw == NULL)
			tl_sleep_ms(200);
	}
	ck_assert_msg(raw != NULL, "no chat notice");
	b = json_loads(raw, 0, NULL);
	ck_assert_msg(b != NULL, "the chat body is no JSON: %s", raw);
	text = JSTR(b, "text");
	ck_assert_msg(strncmp(text, "Approval needed.\n\n", 18) == 0, "chat text: %s", text);
	tok = link_token(text);
	ck_assert_msg(tok != NULL && strstr(JSTR(b, "link"), tok) != NULL, "chat link: %s", text);
	free(tok);
	/* Slack reads <…> as links and mentions: none is left */
	ck_assert_msg(strchr(text, '<') == NULL && strchr(text, '>') == NULL,
	              "a Slack bracket in the chat text:\n%s", text);
	assert_no_hidden("the chat text", text);
	assert_no_hidden("the chat body", raw);
	ck_assert_msg(strstr(text, "\nWhat:       email.send to demo_smtp: \u201c" HOSTILE_CHAT
	                           "\u201d\n") != NULL,
	              "the quoted subject, neutralised for chat:\n%s", text);
	ck_assert_msg(strstr(text, "\nAsked by:   " HOSTILE_REQUESTER_CHAT " (API client ") != NULL,
	              "the requester, neutralised for chat:\n%s", text);
	ck_assert_str_eq(JSTR(json_object_get(b, "summary"), "subject"), HOSTILE_CHAT);
	ck_assert_msg(strstr(raw, "<!channel>") == NULL && strstr(raw, "](http") == NULL &&
	              strstr(raw, "evil.example") == NULL,
	              "the chat body carries a mention or a link: %s", raw);
	json_decref(b);
	free(raw);
	(void)dl_disp_stop(&disp, 20);
	free(key);
}
END_TEST

/* ---- replayed -------------------------------------------------------------- */

/* A run the approvers rejected, replayed by an operator for one of two
 * tenants sharing the key: the new run's approvers are told exactly as an
 * output's (their notice's link opens the NEW run's card), and neither
 * the CLI's answer nor its text shows a link. */
START_TEST(test_replay_told)
{
	char *key = tl_corpus_key(tl_run, "повтор · إعادة · 再送 🔁", 160);
	char nkey[2048], *out = NULL, *err = NULL, *tok, *text, loc[512], *path;
	const char *subject = tl_corpus_mail_str("mixed_max", "subject");
	json_t *mails, *doc, *a, *tokens = json_array();
	struct dl_disp disp;
	struct tl_resp r;
	size_t i, sent;
	long st;

	ck_assert_msg(dl_key_b != NULL, "no second client: `oncegatectl client add` failed");
	sender_start(&disp, "on");
	reply_run(dl_key_dev, key, "notify_reply", "mixed_max", &r);
	tl_resp_free(&r);
	reply_run(dl_key_b, key, "notify_reply", "mixed_max", &r);
	tl_resp_free(&r);
	mails = wait_mails(key, "Approval needed: ", SUPPORT_RCPT, 2, SETTLE_S);
	ck_assert_msg(json_array_size(mails) == 2, "%zu notice mails (want 2)",
	              json_array_size(mails));
	/* both originals rejected from their mails */
	for (i = 0; i < 2; i++) {
		tok = link_token(JSTR(json_array_get(mails, i), "body"));
		ck_assert_msg(tok != NULL, "no link in the original's mail");
		path = token_path(tok);
		ck_assert_int_eq(pl_decide_at(path, PERSON, PERSON_GROUPS, "reject", loc,
		                              sizeof(loc)), 303);
		json_array_append_new(tokens, json_string(tok));
		free(path);
		free(tok);
	}
	json_decref(mails);
	/* rejected: told, never sent */
	expect_explain(key, "dev", "no", "yes", "rejected after its notice");
	expect_explain(key, dl_client_b, "no", "yes", "the other tenant's rejected run");

	snprintf(nkey, sizeof(nkey), "%s-replay", key);
	/* the original's notices are no business effect: no --force needed */
	st = tl_ctl_err(&out, &err, "replay", key, "--new-key", nkey, "--client", dl_client_b,
	                "--reason", "Ольга отклонила по ошибке", (char *)NULL);
	ck_assert_msg(st == 0, "replay exited %ld: %s%s", st, out, err);
	ck_assert_msg(strstr(out, "/approve/") == NULL && strstr(out, "notified") != NULL,
	              "the replay's text shows a link or says nobody is told:\n%s", out);
	ck_assert_msg(strstr(err, "notified") != NULL, "stderr: %s", err);
	free(out);
	free(err);
	/* the new run's notice: one mail to the support group, one chat */
	mails = wait_mails(nkey, "Approval needed: ", SUPPORT_RCPT, 1, SETTLE_S);
	ck_assert_msg(json_array_size(mails) == 1, "%zu notice mails for the replay (want 1)",
	              json_array_size(mails));
	{
		json_t *chats = wait_chats_led(nkey, "Approval needed.", 1, SETTLE_S);

		ck_assert_msg(json_array_size(chats) == 1, "%zu chat notices for the replay",
		              json_array_size(chats));
		json_decref(chats);
	}
	ck_assert_msg(strstr(JSTR(json_array_get(mails, 0), "body"), "Run:        ") != NULL &&
	              strstr(JSTR(json_array_get(mails, 0), "body"), nkey) != NULL,
	              "the notice names the new run");
	tok = link_token(JSTR(json_array_get(mails, 0), "body"));
	ck_assert_msg(tok != NULL, "no link in the replay's mail");
	json_array_append_new(tokens, json_string(tok));
	text = page_text(tok, PERSON, PERSON_GROUPS, &st);
	ck_assert_msg(st == 200 && strstr(text, "demo_smtp") != NULL,
	              "the replay's link: HTTP %ld: %.500s", st, text);
	free(text);
	path = token_path(tok);
	sent = replies_to_customer(subject);
	ck_assert_int_eq(pl_decide_at(path, PERSON, PERSON_GROUPS, "approve", loc, sizeof(loc)),
	                 303);
	ck_assert_msg(wait_replies(subject, sent + 1, SETTLE_S) == sent + 1,
	              "the approved replay did not send its reply once");
	free(path);
	free(tok);
	/* the original, replayed: still never sent itself */
	expect_explain(key, dl_client_b, "no", "yes", "the rejected original after its replay");
	json_decref(mails);

	/* the other tenant's run (the stack's client "dev"), in JSON: the
	 * approvals say "notified" and hold no url */
	snprintf(nkey, sizeof(nkey), "%s-replay-json", key);
	ck_assert_int_eq(tl_ctl(&out, "--json", "replay", key, "--new-key", nkey, "--client",
	                        "dev", "--reason", "ещё раз", (char *)NULL),
	                 0);
	doc = json_loads(out, 0, NULL);
	ck_assert_msg(doc != NULL && json_array_size(json_object_get(doc, "approvals")) == 3,
	              "replay JSON: %s", out);
	json_array_foreach(json_object_get(doc, "approvals"), i, a)
		ck_assert_msg(json_object_get(a, "url") == NULL &&
		              json_is_true(json_object_get(a, "notified")), "replay JSON: %s", out);
	json_decref(doc);
	free(out);
	mails = wait_mails(nkey, "Approval needed: ", SUPPORT_RCPT, 1, SETTLE_S);
	ck_assert_msg(json_array_size(mails) == 1, "no notice for the second replay");
	json_decref(mails);

	(void)dl_disp_stop(&disp, 20);
	assert_nowhere(tokens);
	json_decref(tokens);
	free(key);
}
END_TEST

/* ---- reminder and escalation ------------------------------------------------- */

static long long
metric_value(const char *series)
{
	struct tl_resp r;
	const char *p;
	long long v = -1;

	tl_get("/metrics", NULL, &r);
	if (r.status == 200 && (p = strstr(r.body, series)) != NULL)
		v = atoll(p + strlen(series) + 1);
	tl_resp_free(&r);
	return v;
}

START_TEST(test_reminder_escalation)
{
	char *key = tl_corpus_key(tl_run, "support/ru/4821-77:Добрый день!", 120);
	const char *subject = tl_corpus_mail_str("ru_max", "subject");
	json_t *tokens = json_array(), *m;
	char *t1, *t2, *t3, *text, *path, *log;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();
	const char *p[1] = { key };
	long long reminded0 = metric_value("oncegate_approval_followups_total{action=\"reminded\"}");
	long long escalated0 =
	    metric_value("oncegate_approval_followups_total{action=\"escalated\"}");
	double deadline, t0;
	long st;
	struct dl_disp disp;

	sender_start(&disp, "on");
	t0 = tl_now();
	reply_run(dl_key_dev, key, "notify_fast", "ru_max", &r);
	tl_resp_free(&r);

	m = wait_mails(key, "Approval needed: ", SUPPORT_RCPT, 1, SETTLE_S);
	ck_assert_int_eq(json_array_size(m), 1);
	t1 = link_token(JSTR(json_array_get(m, 0), "body"));
	json_decref(m);
	ck_assert_ptr_nonnull(t1);
	/* the reminder: the same approvers, a new link */
	m = wait_mails(key, "Reminder: approval needed: ", SUPPORT_RCPT, 1, SETTLE_S);
	ck_assert_msg(json_array_size(m) == 1, "no reminder");
	t2 = link_token(JSTR(json_array_get(m, 0), "body"));
	ck_assert_msg(strstr(JSTR(json_array_get(m, 0), "body"), "no longer works") != NULL,
	              "the reminder says the earlier link no longer works");
	json_decref(m);
	ck_assert_msg(t2 != NULL && strcmp(t1, t2) != 0, "the reminder carries a new link");
	fprintf(stderr, "check_notify: measured: the reminder (remind_after_seconds 3) arrived "
	        "%.2f s after the output\n", tl_now() - t0);
	text = page_text(t1, PERSON, PERSON_GROUPS, &st);
	ck_assert_msg(st == 410 && strstr(text, "no longer valid") != NULL,
	              "the replaced link: HTTP %ld: %.500s", st, text);
	free(text);
	text = page_text(t2, PERSON, PERSON_GROUPS, &st);
	ck_assert_msg(st == 200, "the reminder's link: HTTP %ld: %.500s", st, text);
	free(text);
	/* nobody decided: the managers are added, with their own challenge */
	m = wait_mails(key, "Escalated to you: approval needed: ", MANAGERS_RCPT, 1, SETTLE_S);
	ck_assert_msg(json_array_size(m) == 1, "no escalation mail");
	t3 = link_token(JSTR(json_array_get(m, 0), "body"));
	json_decref(m);
	fprintf(stderr, "check_notify: measured: the escalation (escalate_after_seconds 6) arrived "
	        "%.2f s after the output\n", tl_now() - t0);
	ck_assert_ptr_nonnull(t3);
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1"
	                                " AND escalated AND approver = 'group:руководители поддержки'"
	                                " AND state = 'pending'",
	                             1, p),
	                 1);
	/* logged and counted */
	log = tl_file_slurp(disp.log, NULL);
	ck_assert_msg(log != NULL && strstr(log, "\"approval.reminded\"") != NULL &&
	              strstr(log, "\"approval.escalated\"") != NULL,
	              "the dispatcher's log has no approval.reminded / approval.escalated line");
	free(log);
	deadline = tl_now() + 10;
	while ((metric_value("oncegate_approval_followups_total{action=\"reminded\"}") <=
	            reminded0 ||
	        metric_value("oncegate_approval_followups_total{action=\"escalated\"}") <=
	            escalated0) &&
	       tl_now() < deadline)
		tl_sleep_ms(500);
	ck_assert_msg(metric_value("oncegate_approval_followups_total{action=\"reminded\"}") >
	                      reminded0 &&
	                  metric_value("oncegate_approval_followups_total{action=\"escalated\"}") >
	                      escalated0,
	              "the reminder and the escalation are not counted in /metrics");
	/* a manager decides from the escalation mail: the reply goes once */
	path = token_path(t3);
	ck_assert_int_eq(pl_decide_at(path, MANAGER, MANAGER_GROUPS, "approve", NULL, 0), 303);
	free(path);
	ck_assert_msg(wait_replies(subject, 1, SETTLE_S) == 1, "the approved reply did not go out");
	tl_sleep_ms(1500);
	ck_assert_int_eq(replies_to_customer(subject), 1);
	text = page_text(t2, PERSON, PERSON_GROUPS, &st);
	ck_assert_msg(st == 410, "the support group's link after the managers decided: HTTP %ld", st);
	free(text);
	(void)dl_disp_stop(&disp, 20);
	json_array_append_new(tokens, json_string(t1));
	json_array_append_new(tokens, json_string(t2));
	json_array_append_new(tokens, json_string(t3));
	assert_nowhere(tokens);
	json_decref(tokens);
	free(t1);
	free(t2);
	free(t3);
	free(key);
	PQfinish(c);
}
END_TEST

/* ---- a quorum ------------------------------------------------------------------- */

/* The token of the one mail to first_rcpt for key whose subject starts
 * with lead (malloc'd); fails unless exactly one arrives within secs. */
static char *
one_mail_token(const char *key, const char *lead, const char *first_rcpt, double secs)
{
	json_t *m = wait_mails(key, lead, first_rcpt, 1, secs);
	char *t;

	ck_assert_msg(json_array_size(m) == 1, "%s: %zu mails \"%s…\" to %s (want 1)", key,
	              json_array_size(m), lead, first_rcpt);
	t = link_token(JSTR(json_array_get(m, 0), "body"));
	json_decref(m);
	ck_assert_msg(t != NULL, "%s: no link in the mail \"%s…\"", key, lead);
	return t;
}

/*
 * notify_quorum: two people must approve; the support group is told by
 * mail, the support leads by chat; an entry is reminded after 5 s, the
 * managers are added after 10 s. Two runs on that clock:
 *   A  a support member approves at once: each entry was told; the
 *      reminder goes to the leads only (the support entry has voted); the
 *      managers' challenge carries the quorum of 2, and a manager's
 *      approval completes it: the reply goes once.
 *   B  nobody votes: both entries are reminded; a manager's approval
 *      alone does not settle the run (1 of 2); a lead's then does, and the
 *      reply goes once.
 */
START_TEST(test_quorum_told_reminded_escalated)
{
	char *ka = tl_corpus_key(tl_run, "quorum A · заказ 4821-77", 120);
	char *kb = tl_corpus_key(tl_run, "quorum B · 订单 4821-78", 120);
	const char *subj_a = tl_corpus_mail_str("ar_max", "subject");
	const char *subj_b = tl_corpus_mail_str("zh_max", "subject");
	const char *pa[1] = { ka }, *pb[1] = { kb };
	char *ta, *tm, *path, *text;
	json_t *m, *c, *a;
	struct dl_disp disp;
	struct tl_resp r;
	PGconn *pg = tl_pg_connect();
	double t0;
	size_t i;
	long st;

	sender_start(&disp, "on");
	t0 = tl_now();
	reply_run(dl_key_dev, ka, "notify_quorum", "ar_max", &r);
	ck_assert_int_eq(json_array_size(json_object_get(r.json, "approvals")), 2);
	json_array_foreach(json_object_get(r.json, "approvals"), i, a)
		ck_assert_msg(json_is_true(json_object_get(a, "notified")) &&
		                  json_object_get(a, "url") == NULL,
		              "each entry of a quorum run is told, and no link is answered: %s",
		              r.body);
	tl_resp_free(&r);
	reply_run(dl_key_dev, kb, "notify_quorum", "zh_max", &r);
	tl_resp_free(&r);

	/* A: each entry told (support by mail, leads by chat) */
	ta = one_mail_token(ka, "Approval needed: ", SUPPORT_RCPT, SETTLE_S);
	c = wait_chats_led(ka, "Approval needed.", 1, SETTLE_S);
	ck_assert_msg(json_array_size(c) == 1, "the leads' chat notice of run A");
	json_decref(c);
	/* a support member approves: 1 of 2, the run waits */
	path = token_path(ta);
	ck_assert_int_eq(pl_decide_at(path, PERSON, PERSON_GROUPS, "approve", NULL, 0), 303);
	free(path);
	ck_assert_msg(tl_now() - t0 < 4.5,
	              "the first vote took %.1f s: the 5 s reminder could come before it",
	              tl_now() - t0);
	ck_assert_int_eq(tl_pg_count(pg, "SELECT count(*) FROM approval_votes"
	                                 " WHERE idempotency_key = $1 AND NOT final",
	                             1, pa),
	                 1);

	/* the reminders: A's leads (not voted) and both of B's entries; never
	 * A's support entry, whose member voted */
	c = wait_chats_led(ka, "Reminder: approval needed.", 1, SETTLE_S);
	ck_assert_msg(json_array_size(c) == 1, "no reminder to the leads of run A, who have not voted");
	json_decref(c);
	tm = one_mail_token(kb, "Reminder: approval needed: ", SUPPORT_RCPT, SETTLE_S);
	free(tm);
	c = wait_chats_led(kb, "Reminder: approval needed.", 1, SETTLE_S);
	ck_assert_msg(json_array_size(c) == 1, "no reminder to the leads of run B");
	json_decref(c);
	tl_sleep_ms(1500);
	m = mails_for(ka, "Reminder: approval needed: ", NULL);
	ck_assert_msg(json_array_size(m) == 0,
	              "the support entry of run A was reminded although its member voted");
	json_decref(m);

	/* the escalation: the managers' challenges carry the quorum (B's
	 * output came after A's, so its escalation may come a tick later) */
	tm = one_mail_token(ka, "Escalated to you: approval needed: ", MANAGERS_RCPT, SETTLE_S);
	for (t0 = tl_now();; tl_sleep_ms(200)) {
		long long n = tl_pg_count(pg, "SELECT count(*) FROM approvals WHERE escalated"
		                              " AND idempotency_key = ANY (ARRAY[$1, $2])"
		                              " AND min_approvals = 2",
		                          2, (const char *[]){ ka, kb });

		if (n == 2 || tl_now() - t0 > SETTLE_S) {
			ck_assert_int_eq(n, 2);
			break;
		}
	}
	/* A: a manager's approval is the second: the reply goes once */
	path = token_path(tm);
	ck_assert_int_eq(pl_decide_at(path, MANAGER, MANAGER_GROUPS, "approve", NULL, 0), 303);
	free(path);
	free(tm);
	ck_assert_msg(wait_replies(subj_a, 1, SETTLE_S) == 1, "run A's reply did not go out");

	/* B: a manager's approval alone is 1 of 2: nothing goes */
	tm = one_mail_token(kb, "Escalated to you: approval needed: ", MANAGERS_RCPT, SETTLE_S);
	path = token_path(tm);
	ck_assert_int_eq(pl_decide_at(path, MANAGER, MANAGER_GROUPS, "approve", NULL, 0), 303);
	free(path);
	free(tm);
	tl_sleep_ms(1500);
	ck_assert_msg(replies_to_customer(subj_b) == 0,
	              "one escalated manager's approval settled a run that needs two");
	ck_assert_int_eq(tl_pg_count(pg, "SELECT count(*) FROM approval_votes"
	                                 " WHERE idempotency_key = $1 AND final",
	                             1, pb),
	                 0);
	/* a lead, from the reminder's link, is the second */
	c = chats_led(kb, "Reminder: approval needed.");
	tm = link_token(JSTR(json_array_get(c, 0), "link"));
	json_decref(c);
	ck_assert_ptr_nonnull(tm);
	path = token_path(tm);
	ck_assert_int_eq(pl_decide_at(path, LEAD, LEAD_GROUPS, "approve", NULL, 0), 303);
	free(path);
	ck_assert_msg(wait_replies(subj_b, 1, SETTLE_S) == 1, "run B's reply did not go out");
	tl_sleep_ms(1500);
	ck_assert_int_eq(replies_to_customer(subj_a), 1);
	ck_assert_int_eq(replies_to_customer(subj_b), 1);
	text = page_text(tm, LEAD, LEAD_GROUPS, &st);
	ck_assert_msg(st == 410, "the lead's link after the run was settled: HTTP %ld", st);
	free(text);
	free(tm);
	(void)dl_disp_stop(&disp, 20);
	free(ta);
	free(ka);
	free(kb);
	PQfinish(pg);
}
END_TEST

/* ---- the kill switch ----------------------------------------------------------- */

START_TEST(test_kill_switch_holds_notices)
{
	char *key = tl_corpus_key(tl_run, "ticket:48213", 120);
	PGconn *c = tl_pg_connect();
	const char *p[1] = { key };
	struct tl_resp r;
	json_t *m;
	struct dl_disp disp;

	sender_start(&disp, "off");
	reply_run(dl_key_dev, key, "notify_reply", "he_max", &r);
	tl_resp_free(&r);
	tl_sleep_ms(3000);
	m = mails_for(key, "Approval needed: ", NULL);
	ck_assert_msg(json_array_size(m) == 0, "a notice went out with the kill switch off");
	json_decref(m);
	m = chats_for(key);
	ck_assert_msg(json_array_size(m) == 0, "a chat notice went out with the kill switch off");
	json_decref(m);
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                                " AND effect_type = 'approval.notify' AND state = 'pending'"
	                                " AND held_at IS NOT NULL",
	                             1, p),
	                 3);
	(void)tl_ctl(NULL, "sends", "resume", "--reason", "check_notify sends to loopback",
	             (char *)NULL);
	m = wait_mails(key, "Approval needed: ", SUPPORT_RCPT, 1, SETTLE_S);
	ck_assert_msg(json_array_size(m) == 1, "switched on, the notice did not go out");
	json_decref(m);
	m = wait_chats_led(key, "", 1, SETTLE_S);
	ck_assert_int_eq(json_array_size(m), 1);
	json_decref(m);
	(void)dl_disp_stop(&disp, 20);
	free(key);
	PQfinish(c);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------- */

TL_SUITE(notify_suite, "notify",
         {"told", 4 * SETTLE_S + 60, dl_tcase,
          .tests = TL_LIST(test_each_entry_told_link_works, test_hostile_text_inert,
                           test_replay_told, test_reminder_escalation,
                           test_quorum_told_reminded_escalated, test_kill_switch_holds_notices)})

DL_TENANTS_MAIN("check_notify", "nt", .suite = notify_suite, .smtp = true)

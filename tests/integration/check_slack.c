/*
 * check_slack.c — integration suite: approvals decided in Slack, through
 * the running stack (nginx, the responder, PostgreSQL, a dispatcher) and
 * the Slack stand-in (tests/providers/slack_standin.py, on the port the
 * stack's demo_slack target names), with the test contracts slack_reply
 * (one approval) and slack_quorum (two) of tests/data/contracts-test.
 * Their approver entries are "group:служба поддержки" and
 * anna.kowalska@example.com; the stack's Slack user map names the people.
 *
 *   approve   the stand-in receives the notice as chat.postMessage with the
 *             bot token: the Cyrillic/CJK/Arabic subject, Approve and
 *             Reject carrying the challenge's id, Open the page's link;
 *             no token of the link is in the database; a signed press of
 *             Approve by a mapped member of the group approves: one
 *             email.send effect, one mail at the SMTP sink; the message is
 *             replaced through response_url with "Approved by SUBJECT via
 *             Slack"; the vote records via_chat slack and explain says
 *             "via slack"; the requester's own press is refused (separation
 *             of duties) and told only to them;
 *   refused   on a slack_quorum run with one vote: the same press sent
 *             again (a replay), a press signed with another secret, one
 *             whose timestamp is 6 minutes old, and one by a Slack user the
 *             map does not name each change nothing (the run, its
 *             challenges and votes as they were: a snapshot); the first
 *             three are 401, the unmapped user is told "not linked";
 *   quorum    the second person's press settles it: one effect, one mail,
 *             replies "1 of 2" then "Approved by anna…";
 *   race      30 different people at once, 15 pressing Approve in Slack and
 *             15 through the decision API (the tenant holds a decide
 *             grant), on one slack_reply run: exactly one vote, one effect,
 *             one mail.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "dispatchlib.h"
#include "testlib.h"

#define REQUESTER "maria.ivanova@example.com"
#define OLGA      "olga.petrova@example.com"
#define ANNA      "anna.kowalska@example.com"
#define RACERS    30
#define SETTLE_S  20

#define JSTR(o, n) (tl_jstr((o), (n)) ? tl_jstr((o), (n)) : "(none)")

static pid_t g_slack_pid = -1;
static int g_slack_port;

/* ---- the stand-in ------------------------------------------------------- */

/* method path at the stand-in with body (stolen; NULL: none): its JSON. */
static json_t *
slack_call(const char *method, const char *path, json_t *body)
{
	char url[256], *text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
	struct tl_resp r;
	json_t *out;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", g_slack_port, path);
	tl_http_url(method, url, NULL, NULL, text != NULL ? "application/json" : NULL, text,
	            text != NULL ? strlen(text) : 0, &r);
	free(text);
	json_decref(body);
	ck_assert_msg(r.status == 200 && r.json != NULL, "stand-in %s %s: HTTP %ld %.400s", method,
	              path, r.status, r.body);
	out = json_incref(r.json);
	tl_resp_free(&r);
	return out;
}

/* A press through the stand-in (its /_press, stolen); oncegate's answer's
 * status, its JSON in *answer (NULL: not wanted). */
static long
press(json_t *req, json_t **answer)
{
	json_t *r = slack_call("POST", "/_press", req);
	long status = (long)json_integer_value(json_object_get(r, "status"));

	if (answer != NULL)
		*answer = json_loads(JSTR(r, "body"), 0, NULL);
	json_decref(r);
	return status;
}

/* The run's rows once the dispatcher has recorded its sends: the same in
 * two reads half a second apart (within SETTLE_S). */
static char *
settled_snapshot(PGconn *c, const char *key)
{
	double end = tl_now() + SETTLE_S;
	char *prev = tl_run_snapshot(c, key), *now;

	for (;;) {
		usleep(500 * 1000);
		now = tl_run_snapshot(c, key);
		if (strcmp(now, prev) == 0 || tl_now() >= end)
			break;
		free(prev);
		prev = now;
	}
	free(prev);
	return now;
}

/* The notice the stand-in received for challenge id (waits for it). */
static json_t *
notice_of(const char *id)
{
	double end = tl_now() + SETTLE_S;

	do {
		json_t *all = slack_call("GET", "/_messages", NULL), *m;
		size_t i;

		json_array_foreach(all, i, m) {
			const json_t *blocks = json_object_get(json_object_get(m, "message"), "blocks");
			const json_t *els = json_object_get(json_array_get(blocks, 1), "elements");

			if (streq(tl_jstr(json_array_get(els, 0), "value"), id)) {
				json_t *found = json_incref(m);

				json_decref(all);
				return found;
			}
		}
		json_decref(all);
		usleep(100 * 1000);
	} while (tl_now() < end);
	ck_abort_msg("the stand-in received no notice for %s", id);
	return NULL;
}

/* Replies received on response_url url (waits for want of them). */
static json_t *
replies_to(const char *url, size_t want)
{
	const char *path = strstr(url, "/actions/");
	double end = tl_now() + SETTLE_S;
	json_t *mine = NULL;

	do {
		json_t *all = slack_call("GET", "/_replies", NULL), *r;
		size_t i;

		json_decref(mine);
		mine = json_array();
		json_array_foreach(all, i, r)
			if (streq(tl_jstr(r, "url"), path))
				json_array_append(mine, json_object_get(r, "reply"));
		json_decref(all);
		if (json_array_size(mine) >= want)
			return mine;
		usleep(100 * 1000);
	} while (tl_now() < end);
	return mine;
}

/* ---- the stack ---------------------------------------------------------- */

/* A dispatcher with demo_smtp at the suite's SMTP sink and demo_slack at
 * the stand-in. */
static void
disp_start(struct dl_disp *d)
{
	dl_disp_start_linked(
	    d,
	    "\n[target demo_smtp]\nkind = smtp\nurl = smtp://127.0.0.1:%d\n"
	    "mail_from = oncegate@slack.example\ntimeout_ms = 5000\n"
	    "\n[target demo_slack]\nkind = slack\nurl = http://127.0.0.1:%d/api\n"
	    "channel = C0APPROVALS\ntoken_file = %s\nresponse_url_base = "
	    "http://127.0.0.1:%d/actions/\ntimeout_ms = 5000\nmax_attempts = 3\nbase_ms = 200\n"
	    "cap_ms = 1000\n",
	    g_smtp_port, g_slack_port, tl_env("ONCEGATE_SLACK_TOKEN_FILE"), g_slack_port);
}

/* A run of contract for key as bearer, requested by REQUESTER, its subject
 * marked with this run's name and tag; its challenges' ids (in the
 * contract's approver order) into ids. */
static void
slack_run(const char *bearer, const char *key, const char *contract, const char *tag,
          char ids[2][64])
{
	struct tl_resp r;
	char subject[200];
	size_t i;

	snprintf(subject, sizeof(subject), "Ваш заказ №4821 — 承認済み — تم الشحن 📦 %s %s", tl_run,
	         tag);
	dl_mail_output(bearer, key, contract, subject, tl_corpus_mail_str("ru_short", "body"),
	               json_pack("[s]", "klient.ivanova@pochta.example"), REQUESTER, &r);
	ck_assert_msg(r.status == 202 && json_array_size(json_object_get(r.json, "approvals")) == 2,
	              "output: HTTP %ld %.1000s", r.status, r.body);
	for (i = 0; i < 2; i++)
		snprintf(ids[i], 64, "%s",
		         JSTR(json_array_get(json_object_get(r.json, "approvals"), i), "approval_id"));
	tl_resp_free(&r);
}

static long long
count_key(PGconn *c, const char *sql, const char *key)
{
	const char *p[1] = { key };

	return tl_pg_count(c, sql, 1, p);
}

#define VOTES   "SELECT count(*) FROM approval_votes WHERE idempotency_key = $1"
#define EFFECTS "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1" \
	        " AND effect_type = 'email.send'"

/* Mails the SMTP sink got whose subject holds this run's name and tag;
 * waits up to wait_s for the first. */
static size_t
mails_for(const char *tag, double wait_s)
{
	double end = tl_now() + wait_s;
	char marker[128];
	size_t n;

	snprintf(marker, sizeof(marker), "%s %s", tl_run, tag);
	do {
		json_t *all = dl_mails_received(), *m;
		size_t i;

		n = 0;
		json_array_foreach(all, i, m)
			n += strstr(JSTR(m, "subject"), marker) != NULL;
		json_decref(all);
		if (n > 0 && wait_s > 0)
			break;
		usleep(200 * 1000);
	} while (tl_now() < end);
	return n;
}

static void expect_shape(const json_t *want, const json_t *got, const char *where);
static json_t *example(const char *name);

/* ---- tests -------------------------------------------------------------- */

START_TEST(test_approve)
{
	PGconn *c = tl_pg_connect();
	struct dl_disp d;
	char key[160], ids[2][64], *out = NULL, *dump;
	const char *p[1] = { key };
	json_t *n, *els, *ans, *replies, *pressed;
	const char *text, *open;
	long st;

	snprintf(key, sizeof(key), "%s:approve/заявка-7 ✉", tl_run);
	slack_run(dl_key_dev, key, "slack_reply", "approve", ids);
	disp_start(&d);
	n = notice_of(ids[0]);
	ck_assert_str_eq(JSTR(n, "channel"), "C0APPROVALS");
	text = JSTR(json_object_get(json_array_get(json_object_get(json_object_get(n, "message"),
	                                                           "blocks"), 0), "text"), "text");
	ck_assert_msg(strstr(text, "Ваш заказ №4821") && strstr(text, "承認済み") &&
	                  strstr(text, "تم الشحن") && strstr(text, "📦"),
	              "notice text: %s", text);
	els = json_object_get(json_array_get(json_object_get(json_object_get(n, "message"), "blocks"),
	                                     1), "elements");
	ck_assert_str_eq(JSTR(json_array_get(els, 0), "action_id"), "oncegate_approve");
	ck_assert_str_eq(JSTR(json_array_get(els, 1), "action_id"), "oncegate_reject");
	ck_assert_str_eq(JSTR(json_array_get(els, 1), "value"), ids[0]);
	open = JSTR(json_array_get(els, 2), "url");
	ck_assert_msg(strncmp(open, tl_env("ONCEGATE_URL"), strlen(tl_env("ONCEGATE_URL"))) == 0 &&
	                  strstr(open, "/approve/") != NULL,
	              "Open: %s", open);
	/* the link's token is nowhere in the database */
	dump = qstr(c, "SELECT count(*)::text FROM effect_attempts a JOIN effect_outbox e"
	               " ON e.id = a.effect_id WHERE e.idempotency_key = $1"
	               " AND strpos(a.evidence::text, $2) > 0", key, strstr(open, "/approve/") + 9,
	            (char *)NULL);
	ck_assert_str_eq(dump, "0");
	free(dump);

	/* the requester presses Approve: separation of duties, told to them */
	st = press(json_pack("{s:s, s:s, s:s}", "ts", JSTR(n, "ts"), "user", "U0MARIA", "action",
	                     "approve"), &ans);
	ck_assert_msg(st == 200 && streq(JSTR(ans, "response_type"), "ephemeral") &&
	                  strstr(JSTR(ans, "text"), "Separation of duties") != NULL,
	              "requester's press: %ld %s", st, JSTR(ans, "text"));
	json_decref(ans);
	ck_assert_int_eq(count_key(c, VOTES, key), 0);

	/* a member of the group approves */
	pressed = slack_call("POST", "/_press",
	                     json_pack("{s:s, s:s, s:s}", "ts", JSTR(n, "ts"), "user", "U0OLGA",
	                               "action", "approve"));
	{
		json_t *ba = example("block_actions.json");

		expect_shape(ba, json_object_get(pressed, "payload"), "the press's payload");
		json_decref(ba);
	}
	ans = json_loads(JSTR(pressed, "body"), 0, NULL);
	ck_assert_msg(json_integer_value(json_object_get(pressed, "status")) == 200 &&
	                  json_is_true(json_object_get(ans, "ok")),
	              "press: %s", JSTR(pressed, "body"));
	json_decref(ans);
	ck_assert_int_eq(count_key(c, VOTES, key), 1);
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM approval_votes WHERE"
	                                " idempotency_key = $1 AND via_chat = 'slack'"
	                                " AND subject = '" OLGA "'", 1, p), 1);
	ck_assert_int_eq(count_key(c, EFFECTS, key), 1);
	ck_assert_uint_eq(mails_for("approve", SETTLE_S), 1);
	/* the message says who decided: replaced through response_url */
	replies = replies_to(JSTR(pressed, "response_url"), 1);
	ck_assert_msg(json_array_size(replies) == 1 &&
	                  json_is_true(json_object_get(json_array_get(replies, 0),
	                                               "replace_original")) &&
	                  strstr(JSTR(json_array_get(replies, 0), "text"),
	                         "Approved by " OLGA " via Slack") != NULL,
	              "no reply naming the decider");
	json_decref(replies);
	json_decref(pressed);
	ck_assert_int_eq(tl_ctl(&out, "explain", key, (char *)NULL), 0);
	ck_assert_msg(out != NULL && strstr(out, OLGA " approve via slack") != NULL, "explain: %s",
	              out ? out : "");
	free(out);
	/* settled: a later press changes nothing */
	st = press(json_pack("{s:s, s:s, s:s}", "ts", JSTR(n, "ts"), "user", "U0R00", "action",
	                     "reject"), &ans);
	ck_assert_msg(st == 200 && json_is_false(json_object_get(ans, "ok")), "late press: %ld",
	              st);
	json_decref(ans);
	ck_assert_int_eq(count_key(c, VOTES, key), 1);
	ck_assert_uint_eq(mails_for("approve", 1), 1);
	json_decref(n);
	dl_disp_stop(&d, 10);
	PQfinish(c);
}
END_TEST

START_TEST(test_refused_and_quorum)
{
	PGconn *c = tl_pg_connect();
	struct dl_disp d;
	char key[160], ids[2][64], *before, *after;
	json_t *n, *ans, *replies, *first;
	const char *p[1] = { key };
	long st;

	snprintf(key, sizeof(key), "%s:quorum/申请-5 🗳", tl_run);
	slack_run(dl_key_dev, key, "slack_quorum", "quorum", ids);
	disp_start(&d);
	n = notice_of(ids[0]);
	/* the first person: 1 of 2 */
	first = slack_call("POST", "/_press",
	                   json_pack("{s:s, s:s, s:s}", "ts", JSTR(n, "ts"), "user", "U0OLGA",
	                             "action", "approve"));
	ck_assert_int_eq(json_integer_value(json_object_get(first, "status")), 200);
	ck_assert_int_eq(count_key(c, VOTES, key), 1);
	/* the second notice sent and its send recorded, so that only a press
	 * could change the run's rows from here */
	json_decref(notice_of(ids[1]));
	before = settled_snapshot(c, key);

	/* no signature at all, straight to the stack */
	{
		struct tl_resp r;
		static const char body[] = "payload=%7B%22type%22%3A%22block_actions%22%7D";

		tl_http("POST", "/v1/chat/slack/interactions", NULL,
		        "application/x-www-form-urlencoded", body, strlen(body), &r);
		ck_assert_msg(r.status == 401 && strstr(JSTR(r.json, "type"), "invalid_signature"),
		              "unsigned: HTTP %ld %.300s", r.status, r.body);
		tl_resp_free(&r);
	}
	/* the same request again */
	st = press(json_pack("{s:b}", "replay", 1), &ans);
	ck_assert_msg(st == 401 && strstr(JSTR(ans, "type"), "invalid_signature"), "replay: %ld", st);
	json_decref(ans);
	/* signed with another secret */
	st = press(json_pack("{s:s, s:s, s:s, s:b}", "ts", JSTR(n, "ts"), "user", "U0ANNA",
	                     "action", "approve", "forge", 1), &ans);
	ck_assert_msg(st == 401, "forged: %ld", st);
	json_decref(ans);
	/* signed 6 minutes ago */
	st = press(json_pack("{s:s, s:s, s:s, s:i}", "ts", JSTR(n, "ts"), "user", "U0ANNA",
	                     "action", "approve", "age", 360), &ans);
	ck_assert_msg(st == 401 && strstr(JSTR(ans, "detail"), "5 minutes"), "stale: %ld", st);
	json_decref(ans);
	/* a Slack user the map does not name */
	st = press(json_pack("{s:s, s:s, s:s}", "ts", JSTR(n, "ts"), "user", "U0MALLORY", "action",
	                     "approve"), &ans);
	ck_assert_msg(st == 200 && strstr(JSTR(ans, "text"), "not linked"), "unmapped: %ld %s", st,
	              JSTR(ans, "text"));
	json_decref(ans);
	after = tl_run_snapshot(c, key);
	ck_assert_str_eq(after, before);
	free(after);
	free(before);
	ck_assert_int_eq(count_key(c, VOTES, key), 1);
	ck_assert_int_eq(count_key(c, EFFECTS, key), 0);

	/* the second person settles it, from the notice of her own entry */
	json_decref(n);
	n = notice_of(ids[1]);
	st = press(json_pack("{s:s, s:s, s:s, s:s}", "ts", JSTR(n, "ts"), "user", "U0ANNA",
	                     "action", "approve", "team", "T0STANDIN"), &ans);
	ck_assert_msg(st == 200 && json_is_true(json_object_get(ans, "ok")), "second: %ld %s", st,
	              JSTR(ans, "text"));
	json_decref(ans);
	ck_assert_int_eq(count_key(c, VOTES, key), 2);
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM approval_votes WHERE"
	                                " idempotency_key = $1 AND via_chat = 'slack'", 1, p), 2);
	ck_assert_int_eq(count_key(c, EFFECTS, key), 1);
	replies = replies_to(JSTR(first, "response_url"), 1);
	ck_assert_msg(json_array_size(replies) == 1 &&
	                  strstr(JSTR(json_array_get(replies, 0), "text"), "1 of 2 approvals"),
	              "first reply");
	json_decref(replies);
	ck_assert_uint_eq(mails_for("quorum", SETTLE_S), 1);
	json_decref(first);
	json_decref(n);
	dl_disp_stop(&d, 10);
	PQfinish(c);
}
END_TEST

struct racer {
	int i;
	const char *id, *ts;
	long status;
	bool ok;
};

static void
race_thread(void *arg)
{
	struct racer *v = arg;
	char who[64];

	if (v->i % 2 == 0) {
		json_t *ans = NULL;

		snprintf(who, sizeof(who), "U0R%02d", v->i);
		v->status = press(json_pack("{s:s, s:s, s:s}", "ts", v->ts, "user", who, "action",
		                            "approve"), &ans);
		v->ok = v->status == 200 && json_is_true(json_object_get(ans, "ok"));
		json_decref(ans);
	} else {
		struct tl_resp r;
		char path[160];
		json_t *body;

		snprintf(who, sizeof(who), "agent%02d@example.com", v->i);
		snprintf(path, sizeof(path), "/v1/approvals/%s/decisions", v->id);
		body = json_pack("{s:s, s:[s], s:s}", "subject", who, "groups", "служба поддержки",
		                 "decision", "approve");
		tl_post_json(path, dl_key_b, body, &r);
		json_decref(body);
		v->status = r.status;
		v->ok = r.status == 200;
		tl_resp_free(&r);
	}
}

START_TEST(test_race)
{
	PGconn *c = tl_pg_connect();
	struct racer v[RACERS];
	struct dl_disp d;
	char key[160], ids[2][64], *out = NULL;
	json_t *n;
	int i, ok = 0;

	ck_assert_msg(dl_key_b != NULL, "the second tenant could not be made");
	ck_assert_int_eq(tl_ctl(&out, "client", "grant", dl_client_b, "--decide", "slack_reply",
	                        "--approver", "group:служба поддержки", "--reason",
	                        "чат поддержки · 支持", (char *)NULL), 0);
	free(out);
	snprintf(key, sizeof(key), "%s:race/заказ-30 🏁", tl_run);
	slack_run(dl_key_b, key, "slack_reply", "race", ids);
	disp_start(&d);
	n = notice_of(ids[0]);
	for (i = 0; i < RACERS; i++)
		v[i] = (struct racer){ .i = i, .id = ids[0], .ts = JSTR(n, "ts") };
	tl_race(race_thread, v, sizeof(v[0]), RACERS);
	for (i = 0; i < RACERS; i++) {
		ok += v[i].ok;
		ck_assert_msg(v[i].status == 200 || v[i].status == 409 || v[i].status == 410,
		              "racer %d: HTTP %ld", i, v[i].status);
	}
	ck_assert_int_eq(ok, 1);
	ck_assert_int_eq(count_key(c, VOTES, key), 1);
	ck_assert_int_eq(count_key(c, EFFECTS, key), 1);
	ck_assert_uint_eq(mails_for("race", SETTLE_S), 1);
	sleep(1);
	ck_assert_uint_eq(mails_for("race", 0), 1);
	ck_assert_int_eq(tl_ctl(&out, "client", "ungrant", dl_client_b, "--decide", "slack_reply",
	                        "--approver", "group:служба поддержки", "--reason", "done",
	                        (char *)NULL), 0);
	free(out);
	json_decref(n);
	dl_disp_stop(&d, 10);
	PQfinish(c);
}
END_TEST

/* Every member of the documented example want is in got, and every member
 * of its team, user and channel objects (a container and a message differ
 * by what was pressed: the example's is an attachment's). */
static void
expect_shape(const json_t *want, const json_t *got, const char *where)
{
	const char *name;
	json_t *v;

	json_object_foreach((json_t *)(uintptr_t)want, name, v) {
		const json_t *g = json_object_get(got, name);

		ck_assert_msg(g != NULL, "%s: no member %s", where, name);
		if (json_is_object(v) && (strcmp(name, "team") == 0 || strcmp(name, "user") == 0 ||
		                          strcmp(name, "channel") == 0))
			expect_shape(v, g, name);
	}
}

static json_t *
example(const char *name)
{
	char path[PATH_MAX];
	json_t *j;

	snprintf(path, sizeof(path), "%s/%s", SLACK_DATA_DIR, name);
	ck_assert_msg((j = json_load_file(path, 0, NULL)) != NULL, "cannot read %s", path);
	return j;
}

/* The stand-in against Slack's published examples: the documented
 * chat.postMessage request is taken with the bot token and answered with
 * the documented answer's members; without it, or with another token, the
 * documented error shape. (test_approve holds a press to the documented
 * block_actions payload.) */
START_TEST(test_standin_shapes)
{
	json_t *req = example("chat_postMessage_request.json");
	json_t *ok = example("chat_postMessage_response.json");
	json_t *err = example("chat_postMessage_error.json");
	json_t *msgs, *last;
	char url[256], token[600], *text = json_dumps(req, JSON_COMPACT);
	struct tl_resp r;
	FILE *f = fopen(tl_env("ONCEGATE_SLACK_TOKEN_FILE"), "r");

	ck_assert(f != NULL && fgets(token, sizeof(token), f) != NULL);
	fclose(f);
	token[strcspn(token, "\n")] = '\0';
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/chat.postMessage", g_slack_port);
	tl_http_url("POST", url, NULL, token, "application/json", text, strlen(text), &r);
	ck_assert_msg(r.status == 200 && json_is_true(json_object_get(r.json, "ok")), "%s", r.body);
	expect_shape(ok, r.json, "chat.postMessage answer");
	ck_assert_str_eq(JSTR(r.json, "channel"), "C123ABC456");
	tl_resp_free(&r);
	tl_http_url("POST", url, NULL, NULL, "application/json", text, strlen(text), &r);
	expect_shape(err, r.json, "chat.postMessage error");
	ck_assert_str_eq(JSTR(r.json, "error"), "not_authed");
	tl_resp_free(&r);
	tl_http_url("POST", url, NULL, "xoxb-not-the-token", "application/json", text, strlen(text),
	            &r);
	ck_assert_str_eq(JSTR(r.json, "error"), "invalid_auth");
	tl_resp_free(&r);
	msgs = slack_call("GET", "/_messages", NULL);
	last = json_array_get(msgs, json_array_size(msgs) - 1);
	ck_assert_str_eq(JSTR(json_object_get(last, "message"), "text"),
	                 "I hope the tour went well, Mr. Wonka.");
	json_decref(msgs);
	json_decref(slack_call("POST", "/_reset", NULL));
	free(text);
	json_decref(req);
	json_decref(ok);
	json_decref(err);
}
END_TEST

/* ---- the suite ---------------------------------------------------------- */

static bool
prepare(void)
{
	char port[16], interactions[512];
	char *extra[] = { (char *)(uintptr_t)"--port", port, (char *)(uintptr_t)"--token-file",
		          (char *)(uintptr_t)tl_env("ONCEGATE_SLACK_TOKEN_FILE"),
		          (char *)(uintptr_t)"--signing-secret-file",
		          (char *)(uintptr_t)tl_env("ONCEGATE_SLACK_SECRET_FILE"),
		          (char *)(uintptr_t)"--interactions", interactions, NULL };
	FILE *f;
	int i;

	if (!dl_tenants_prepare())
		return false;
	snprintf(port, sizeof(port), "%s", tl_env("ONCEGATE_SLACK_PORT"));
	snprintf(interactions, sizeof(interactions), "%s/v1/chat/slack/interactions",
	         tl_env("ONCEGATE_URL"));
	/* the people, as the site maps its Slack users */
	if ((f = fopen(tl_env("ONCEGATE_SLACK_USERS"), "w")) == NULL)
		return false;
	fprintf(f, "# Slack user        approver subject            groups\n"
	           "U0OLGA              " OLGA "    служба поддержки, sales team\n"
	           "T0STANDIN/U0ANNA    " ANNA "\n"
	           "U0MARIA             " REQUESTER "   служба поддержки\n");
	for (i = 0; i < RACERS; i += 2)
		fprintf(f, "U0R%02d agent%02d@example.com служба поддержки\n", i, i);
	fclose(f);
	g_slack_port = provider_start("slack_standin.py", "slack", extra, &g_slack_pid);
	(void)tl_ctl(NULL, "sends", "resume", "--reason", "check_slack sends to loopback",
	             (char *)NULL);
	return g_slack_port > 0;
}

static void
finish(void)
{
	provider_stop(g_slack_pid, "slack");
	dl_tenants_finish();
}

TL_SUITE(slack_suite, "slack",
         {"slack", 120, dl_tcase,
          .tests = TL_LIST(test_standin_shapes, test_approve, test_refused_and_quorum, test_race)})

DL_SUITE_MAIN(.name = "check_slack", .prefix = "sl",
              .needed = "ONCEGATE_API_KEY ONCEGATE_SLACK_PORT ONCEGATE_SLACK_TOKEN_FILE "
                        "ONCEGATE_SLACK_SECRET_FILE ONCEGATE_SLACK_USERS",
              .suite = slack_suite, .prepare = prepare, .finish = finish, .smtp = true)

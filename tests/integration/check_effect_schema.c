/*
 * check_effect_schema.c — what the gate checks is what is sent, and what is
 * approved can be sent: effect schemas (effects.types.<type>), one source
 * per payload field, mail that SMTP can carry, the dispatcher's check right
 * before the send, long multilingual mail to 100 recipients, and a stalled
 * SMTP server that may cost no more than the target's timeout.
 *
 * Runs against the stack `./dev test` starts (skipped, exit 77, without
 * it). The test stack loads the shipped contracts and those of
 * tests/data/contracts-test (mail_list: a mail to up to 100 recipients
 * after a one-second window). Each test that sends starts its own
 * dispatcher ($ONCEGATE_DISPATCH) whose demo_http and demo_smtp are this
 * suite's loopback providers (tests/providers), and asserts what they
 * received. The stalled server is a small misbehaving SMTP server in this
 * file, driven through the provider itself, so the time it costs is measured
 * without a dispatcher's own waits around it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <openssl/evp.h>

#include "classify.h"
#include "config.h"
#include "contract.h"
#include "dispatchlib.h"
#include "provider.h"
#include "testlib.h"

#define MAIL_FROM        "oncegate@effects.example"
#define TEST_TIMEOUT_S   120
#define RCPTS            100
#define BODY_CHARS       5000
#define STALL_TIMEOUT_MS 1500   /* the stalled target's timeout_ms */
#define STALL_SLACK_MS   300    /* scheduling and process start, not a second wait */

static char g_client[24];
static const char *g_key_dev;

#define JSTR(o, n) (tl_jstr((o), (n)) ? tl_jstr((o), (n)) : "(none)")

/* ---- the stack ----------------------------------------------------------- */

static void
claim(const char *key, struct tl_claimed *cl)
{
	tl_claim_payload(g_key_dev, key,
	                 json_pack("{s:s, s:s}", "suite", "check_effect_schema", "run", tl_run),
	                 cl);
}

/* Claims key and hands in output and effect (both stolen) under contract;
 * the answer in *r. */
static void
submit(const char *key, const char *contract, json_t *output, json_t *effect,
       struct tl_resp *r)
{
	struct tl_claimed cl;
	char *path = tl_run_path(key, "/output");
	json_t *body;

	claim(key, &cl);
	body = json_pack("{s:s, s:I, s:s, s:o, s:{s:s, s:s, s:s}, s:o, s:s, s:s}", "lease_owner",
	                 cl.owner, "version", (json_int_t)cl.version, "contract", contract,
	                 "output", output, "model", "provider", "openai-compatible", "name",
	                 "qwen2.5-7b-instruct", "revision", "2024-09-19", "effect", effect,
	                 "source_url", "https://crm.example/contact/7", "requested_by",
	                 "check-effect-schema@workflows.example");
	ck_assert_ptr_nonnull(body);
	tl_post_json(path, g_key_dev, body, r);
	json_decref(body);
	free(path);
}

static json_t *
effect_of(const char *type, const char *target, json_t *payload)
{
	return json_pack("{s:s, s:s, s:o}", "type", type, "target", target, "payload", payload);
}

static long long
count_for(PGconn *c, const char *table, const char *key)
{
	char sql[256];

	snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s WHERE client_id = $1::bigint"
	         " AND idempotency_key = $2", table);
	return qnum(c, sql, g_client, key, (char *)NULL);
}

/* The answer is a 422 "invalid" whose errors name path with rule; nothing
 * was enqueued and nobody was asked. */
static void
expect_refused(PGconn *c, const char *key, const struct tl_resp *r, const char *path,
               const char *rule)
{
	json_t *errors = json_object_get(r->json, "errors"), *e;
	size_t i;
	bool found = false;

	ck_assert_msg(r->status == 422 && json_is_array(errors),
	              "%s: expected 422 with errors, got HTTP %ld %s", key, r->status, r->body);
	ck_assert_msg(tl_jstr(r->json, "outcome") != NULL &&
	              (strcmp(tl_jstr(r->json, "outcome"), "invalid") == 0 ||
	               strcmp(tl_jstr(r->json, "outcome"), "failed_terminal") == 0),
	              "%s: outcome: %s", key, r->body);
	json_array_foreach(errors, i, e)
		if (streq(tl_jstr(e, "path"), path) && streq(tl_jstr(e, "rule"), rule) &&
		    tl_jstr(e, "message") != NULL && tl_jstr(e, "message")[0] != '\0')
			found = true;
	ck_assert_msg(found, "%s: no error %s (%s) in %s", key, path, rule, r->body);
	ck_assert_int_eq(count_for(c, "effect_outbox", key), 0);
	ck_assert_int_eq(count_for(c, "approvals", key), 0);
	{
		char *st = qstr(c, "SELECT state FROM workflow_runs WHERE client_id = $1::bigint"
		                " AND idempotency_key = $2", g_client, key, (char *)NULL);

		ck_assert_msg(st != NULL && strcmp(st, "approved") != 0 &&
		              strcmp(st, "awaiting_human") != 0, "%s is %s after a refused output",
		              key, st ? st : "(none)");
		free(st);
	}
}

/* ---- dispatchers ------------------------------------------------------------ */

static void
disp_start(struct dl_disp *d)
{
	struct dl_conf c;

	dl_conf_open(&c, d);
	fprintf(c.f, "\n[target demo_http]\nkind = http\nurl = http://127.0.0.1:%d/idem/effects\n"
	        "idempotency_key = 1\nprovider_id_header = X-Provider-Id\ntimeout_ms = 5000\n"
	        "max_attempts = 2\nbase_ms = 200\ncap_ms = 1000\n\n", g_http_port);
	fprintf(c.f, "[target demo_smtp]\nkind = smtp\nurl = smtp://127.0.0.1:%d\nmail_from = %s\n"
	        "timeout_ms = 10000\nmax_attempts = 2\nbase_ms = 200\ncap_ms = 1000\n",
	        g_smtp_port, MAIL_FROM);
	dl_conf_start(&c, d, ENV_TRUE);
}

static void
disp_stop(struct dl_disp *d)
{
	dl_disp_stop(d, 20);
}


/* ===== 1. the contract syntax ================================================= */

static const char contract_head[] =
	"{\"name\":\"t\",\"schema\":{\"type\":\"object\",\"properties\":{"
	"\"subject\":{\"type\":\"string\"},\"body\":{\"type\":\"string\"}},"
	"\"additionalProperties\":false},"
	"\"gate\":{\"approvers\":[\"group:support\"]},"
	"\"effects\":{\"allowed_types\":[\"email.send\"],\"allowed_targets\":[\"demo_smtp\"]";

static struct contract_set *
load_one(const char *effects_tail, char *err, size_t errlen)
{
	char dir[PATH_MAX], path[PATH_MAX + 16], *text = NULL;
	struct contract_set *set;

	snprintf(dir, sizeof(dir), "%s/contracts-XXXXXX", g_tmp);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/t.json", dir);
	ck_assert_int_gt(asprintf(&text, "%s%s}}", contract_head, effects_tail), 0);
	write_file(path, text);
	free(text);
	err[0] = '\0';
	set = contract_load_dir(dir, err, errlen);
	unlink(path);
	rmdir(dir);
	return set;
}

START_TEST(test_contract_syntax)
{
	/* the contract's tail, what the refusal says (NULL: it loads) */
	static const struct tl_given cases[] = {
		{ ",\"types\":{\"email.send\":{\"schema\":{\"type\":\"object\",\"properties\":{"
		  "\"to\":{\"type\":\"string\"},\"subject\":{\"type\":\"string\"},"
		  "\"body\":{\"type\":\"string\"}},\"required\":[\"to\"],"
		  "\"additionalProperties\":false},\"from_output\":[\"subject\",\"body\"]}}",
		  NULL },
		{ ",\"types\":{\"crm.tag\":{\"schema\":{}}}", "/effects/types/crm.tag" },
		{ ",\"types\":{\"email.send\":{}}", "/effects/types/email.send/schema" },
		{ ",\"types\":{\"email.send\":{\"schema\":{},\"extra\":1}}", "extra" },
		{ ",\"types\":{\"email.send\":{\"schema\":{\"minimum\":\"x\"}}}", "minimum" },
		{ ",\"types\":{\"email.send\":{\"schema\":{},\"from_output\":[\"nope\"]}}",
		  "/effects/types/email.send/from_output/0" },
		{ ",\"types\":{\"email.send\":{\"schema\":{\"type\":\"object\","
		  "\"additionalProperties\":false},\"from_output\":[\"subject\"]}}",
		  "from_output/0" },
		{ ",\"types\":{\"email.send\":{\"schema\":{},\"from_output\":[\"body\",\"body\"]}}",
		  "duplicate" },
		{ ",\"types\":[]", "/effects/types" },
	};
	char err[1024];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct contract_set *set = load_one(cases[i].given, err, sizeof(err));

		if (cases[i].want == NULL) {
			const struct contract *c;
			json_t *p, *errors;

			ck_assert_msg(set != NULL, "case %zu refused: %s", i, err);
			c = contract_find(set, "t");
			ck_assert(contract_effect_declared(c, "email.send"));
			ck_assert_uint_eq(contract_from_output_count(c, "email.send"), 2);
			ck_assert_str_eq(contract_from_output(c, "email.send", 1), "body");
			p = json_pack("{s:s, s:s, s:i}", "subject", "s", "body", "b", "cc", 1);
			errors = contract_validate_effect(c, "email.send", p);
			ck_assert_uint_eq(json_array_size(errors), 2);
			ck_assert_str_eq(JSTR(json_array_get(errors, 0), "path"), "/effect/payload/to");
			ck_assert_str_eq(JSTR(json_array_get(errors, 1), "path"), "/effect/payload/cc");
			json_decref(errors);
			json_decref(p);
			contract_set_free(set);
			continue;
		}
		ck_assert_msg(set == NULL, "case %zu loaded: %s", i, cases[i].given);
		ck_assert_msg(strstr(err, cases[i].want) != NULL, "case %zu: \"%s\" lacks %s", i,
		              err, cases[i].want);
	}
}
END_TEST

/* ===== 2. the crm_tag attack =================================================== */

START_TEST(test_crm_tag_attack)
{
	PGconn *c = tl_pg_connect();
	struct tl_resp r;
	char key[200];
	json_t *stored;
	long long before = qnum(c, "SELECT count(*) FROM effect_outbox WHERE effect_type = 'crm.tag'",
	                        (char *)NULL);

	/* The output the gate judges says lead; the payload would tag spam and
	 * delete the contact. */
	tl_mkkey(key, sizeof(key), "attack");
	submit(key, "crm_tag", json_pack("{s:s, s:f}", "tag", "lead", "confidence", 0.99),
	       effect_of("crm.tag", "demo_http",
	                 json_pack("{s:s, s:b}", "tag", "spam", "delete_contact", 1)),
	       &r);
	expect_refused(c, key, &r, "/effect/payload/tag", "from_output");
	expect_refused(c, key, &r, "/effect/payload/delete_contact", "additionalProperties");
	expect_refused(c, key, &r, "/effect/payload/contact_id", "required");
	tl_resp_free(&r);

	/* The tag comes from the output alone: the payload may not carry it,
	 * not even with the same value. */
	tl_mkkey(key, sizeof(key), "attack-same");
	submit(key, "crm_tag", json_pack("{s:s, s:f}", "tag", "lead", "confidence", 0.99),
	       effect_of("crm.tag", "demo_http",
	                 json_pack("{s:s, s:s}", "contact_id", "c-7", "tag", "lead")),
	       &r);
	expect_refused(c, key, &r, "/effect/payload/tag", "from_output");
	tl_resp_free(&r);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE effect_type = 'crm.tag'",
	                      (char *)NULL), before);

	/* Done right: the payload names the contact, the tag is the output's,
	 * and what is stored (for the rules, the page and the outbox) is the
	 * payload that goes out. */
	tl_mkkey(key, sizeof(key), "honest");
	submit(key, "crm_tag", json_pack("{s:s, s:f}", "tag", "lead", "confidence", 0.2),
	       effect_of("crm.tag", "demo_http", json_pack("{s:s}", "contact_id", "c-7")), &r);
	ck_assert_msg(r.status == 202, "honest crm_tag output: HTTP %ld %s", r.status, r.body);
	stored = qjson(c, "SELECT effect::text FROM workflow_runs WHERE client_id = $1::bigint"
	               " AND idempotency_key = $2", g_client, key, (char *)NULL);
	{
		json_t *want = json_pack("{s:s, s:s}", "contact_id", "c-7", "tag", "lead");

		ck_assert_msg(json_equal(json_object_get(stored, "payload"), want),
		              "stored effect payload is not the one that goes out");
		json_decref(want);
	}
	json_decref(stored);
	/* The rules judge that payload: lead is added without a person, low
	 * confidence or not (unless the sample picked this run). */
	if (streq(tl_jstr(r.json, "outcome"), "approved")) {
		json_t *row = qjson(c, "SELECT payload::text FROM effect_outbox WHERE"
		                    " client_id = $1::bigint AND idempotency_key = $2", g_client, key,
		                    (char *)NULL);
		json_t *want = json_pack("{s:s, s:s}", "contact_id", "c-7", "tag", "lead");

		ck_assert_msg(json_equal(row, want), "outbox payload is not the one judged");
		json_decref(want);
		json_decref(row);
	} else {
		ck_assert_msg(streq(tl_jstr(r.json, "outcome"), "awaiting_human"), "%s", r.body);
	}
	tl_resp_free(&r);
	PQfinish(c);
}
END_TEST

/* ===== 3. payloads that do not meet the effect schema ============================= */

static json_t *
reply_output(const char *subject)
{
	return json_pack("{s:s, s:s, s:s, s:f}", "subject", subject, "body",
	                 "Здравствуйте! Ваш заказ отправлен в пятницу.\n— Поддержка", "tone",
	                 "friendly", "confidence", 0.8);
}

/* An output whose effect payload (JSON text) is refused at path by rule;
 * the draft's subject is subject (NULL: an everyday one). */
struct refusal {
	const char *name;
	const char *subject;
	const char *payload;
	const char *path;
	const char *rule;
};

/* Hands in each of the n outputs, under a key named after it: each is
 * refused as its row says, and nothing is stored. */
static void
expect_refusals(PGconn *c, const struct refusal *cases, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		struct tl_resp r;
		char key[200];

		tl_mkkey(key, sizeof(key), cases[i].name);
		submit(key, "support_reply",
		       reply_output(cases[i].subject != NULL ? cases[i].subject
		                                             : "Re: ваш заказ №42"),
		       effect_of("email.send", "demo_smtp", json_loads(cases[i].payload, 0, NULL)),
		       &r);
		expect_refused(c, key, &r, cases[i].path, cases[i].rule);
		tl_resp_free(&r);
	}
}

START_TEST(test_payload_schema)
{
	static const struct refusal cases[] = {
		/* support_reply answers one customer: a list is refused */
		{ "to-list", NULL, "{\"to\":[\"a@example.com\",\"b@example.com\"]}",
		  "/effect/payload/to", "type" },
		{ "ticket-type", NULL, "{\"to\":\"a@example.com\",\"ticket\":4.5}",
		  "/effect/payload/ticket", "type" },
		{ "subject-override", NULL,
		  "{\"to\":\"a@example.com\",\"subject\":\"Mine instead\"}",
		  "/effect/payload/subject", "from_output" },
		{ "body-override", NULL, "{\"to\":\"a@example.com\",\"body\":\"Not the draft\"}",
		  "/effect/payload/body", "from_output" },
		{ "extra", NULL, "{\"to\":\"a@example.com\",\"bcc\":\"all@example.com\"}",
		  "/effect/payload/bcc", "additionalProperties" },
		{ "no-to", NULL, "{\"ticket\":\"T-7\"}", "/effect/payload/to", "required" },
		{ "not-object", NULL, "[\"a@example.com\"]", "/effect/payload", "type" },
	};
	PGconn *c = tl_pg_connect();

	expect_refusals(c, cases, sizeof(cases) / sizeof(cases[0]));
	PQfinish(c);
}
END_TEST

/* ===== 4. headers a payload could inject ========================================= */

START_TEST(test_crlf_injection)
{
	static const struct refusal cases[] = {
		{ "subject-crlf", "Re: order 42\r\nBcc: everyone@example.com",
		  "{\"to\":\"a@example.com\"}", "/effect/payload/subject", "header" },
		{ "subject-lf", "Re: order 42\nX-Spam: no", "{\"to\":\"a@example.com\"}",
		  "/effect/payload/subject", "header" },
		{ "to-crlf", "Re: order 42",
		  "{\"to\":\"a@example.com\\r\\nBcc: everyone@example.com\"}", "/effect/payload/to",
		  "address" },
		{ "to-display-name", "Re: order 42", "{\"to\":\"Eve <e@example.com>\"}",
		  "/effect/payload/to", "address" },
		{ "to-two", "Re: order 42", "{\"to\":\"a@example.com, b@example.com\"}",
		  "/effect/payload/to", "address" },
		{ "to-no-domain", "Re: order 42", "{\"to\":\"customer\"}", "/effect/payload/to",
		  "address" },
		{ "in-reply-to-crlf", "Re: order 42",
		  "{\"to\":\"a@example.com\",\"in_reply_to\":\"<m@example.com>\\r\\nX-Evil: 1\"}",
		  "/effect/payload/in_reply_to", "header" },
		{ "in-reply-to-shape", "Re: order 42",
		  "{\"to\":\"a@example.com\",\"in_reply_to\":\"m@example.com\"}",
		  "/effect/payload/in_reply_to", "header" },
	};
	PGconn *c = tl_pg_connect();
	struct tl_resp r;
	char key[200];

	expect_refusals(c, cases, sizeof(cases) / sizeof(cases[0]));
	/* Non-ASCII is not a header problem: a person decides as usual. */
	tl_mkkey(key, sizeof(key), "subject-unicode");
	submit(key, "support_reply", reply_output("Re: 注文 №42 — تم الشحن 📦"),
	       effect_of("email.send", "demo_smtp",
	                 json_pack("{s:s, s:s}", "to", "kunde+42@example.com", "in_reply_to",
	                           "<m-42@example.com>")),
	       &r);
	ck_assert_msg(r.status == 202 && streq(tl_jstr(r.json, "outcome"), "awaiting_human"),
	              "a Unicode subject: HTTP %ld %s", r.status, r.body);
	tl_resp_free(&r);
	PQfinish(c);
}
END_TEST

/* ===== 5. the dispatcher checks again before it sends ============================== */

/* A run as the responder leaves it after an approval under contract, with
 * the effect it proposed; and that effect in the outbox with payload (as
 * if written or altered in the database afterwards). Its id in id. */
static void
make_approved(PGconn *c, const char *key, const char *contract, const char *output,
              const char *type, const char *target, const char *payload, char id[40])
{
	char hash[72];
	char *effect = NULL, *v;

	ck_assert_int_gt(asprintf(&effect, "{\"type\":\"%s\",\"target\":\"%s\",\"payload\":%s}",
	                          type, target, payload), 0);
	tl_payload_hash("{\"suite\":\"check_effect_schema\"}", hash);
	qexec(c, "INSERT INTO workflow_runs (client_id, idempotency_key, payload_hash, payload,"
	      "    state, claim_started_at, workflow_version, trigger, correlation_id, output,"
	      "    contract, contract_hash, effect, decision, decided_at)"
	      " VALUES ($1::bigint, $2::text, $3, '{\"suite\":\"check_effect_schema\"}', 'approved',"
	      "    now(), 'effect-schema@1', 'check_effect_schema', $2, $4::jsonb, $5,"
	      "    'sha256:0', $6::jsonb, 'auto', now())",
	      g_client, key, hash, output, contract, effect, (char *)NULL);
	free(effect);
	tl_effect_hash(payload, hash);
	v = qstr(c, "INSERT INTO effect_outbox (client_id, idempotency_key, effect_type, target,"
	         "    payload, payload_hash, provider_key)"
	         " VALUES ($1::bigint, $2, $3, $4, $5::jsonb, $6, $2 || '/' || $3) RETURNING id",
	         g_client, key, type, target, payload, hash, (char *)NULL);
	ck_assert_ptr_nonnull(v);
	snprintf(id, 40, "%s", v);
	free(v);
}

/* The effect completed, and the HTTP provider received exactly the JSON
 * want, once. */
static void
expect_delivered(PGconn *c, const char *id, const char *want_text, double secs)
{
	char *st = dl_wait_effect(c, id, "completed", secs), *pk;
	json_t *reqs, *got, *want = json_loads(want_text, 0, NULL);

	ck_assert_msg(streq(st, "completed"), "effect %s is %s, expected completed", id, st);
	free(st);
	pk = qstr(c, "SELECT provider_key FROM effect_outbox WHERE id = $1::uuid", id, (char *)NULL);
	reqs = prov_requests(pk, "effect");
	ck_assert_int_eq(json_array_size(reqs), 1);
	got = json_loads(JSTR(json_array_get(reqs, 0), "body"), 0, NULL);
	ck_assert_msg(want != NULL && json_equal(got, want), "the provider received %.300s",
	              JSTR(json_array_get(reqs, 0), "body"));
	json_decref(got);
	json_decref(want);
	json_decref(reqs);
	free(pk);
}

/* The effect failed for good without a send: a dead letter that says why. */
static void
expect_refused_at_send(PGconn *c, const char *id, const char *path)
{
	char *st = dl_wait_effect(c, id, "failed", 20), *pk;
	json_t *dl, *att;
	char *ev;

	ck_assert_msg(streq(st, "failed"), "effect %s is %s, expected failed", id, st);
	free(st);
	dl = qjson(c, "SELECT row_to_json(d)::text FROM dead_letters d WHERE effect_id = $1::uuid",
	           id, (char *)NULL);
	ck_assert_msg(dl != NULL, "no dead letter for %s", id);
	ck_assert_str_eq(JSTR(dl, "error_class"), "permanent");
	ck_assert_str_eq(JSTR(dl, "reason"), "payload_invalid");
	json_decref(dl);
	att = qjson(c, "SELECT evidence::text FROM effect_attempts WHERE effect_id = $1::uuid"
	            " ORDER BY id DESC LIMIT 1", id, (char *)NULL);
	ev = att != NULL ? json_dumps(att, JSON_COMPACT) : NULL;
	ck_assert_msg(ev != NULL && strstr(ev, path) != NULL, "the attempt's evidence does not name"
	              " %s: %s", path, ev ? ev : "(none)");
	ck_assert_msg(strstr(ev, "out of memory") == NULL, "evidence says out of memory: %s", ev);
	ck_assert_msg(json_is_false(json_object_get(att, "request_sent")), "evidence: %s", ev);
	free(ev);
	json_decref(att);
	/* and the provider never heard of it */
	pk = qstr(c, "SELECT provider_key FROM effect_outbox WHERE id = $1::uuid", id, (char *)NULL);
	ck_assert_int_eq(prov_count(pk, NULL), 0);
	free(pk);
}

START_TEST(test_dispatcher_recheck)
{
	static const char tag_output[] = "{\"tag\":\"lead\",\"confidence\":0.9}";
	PGconn *c = tl_pg_connect();
	char k1[200], k2[200], k3[200], k4[200], i1[40], i2[40], i3[40], i4[40], marker[96];
	char *mail, *recs;
	struct dl_disp d;

	tl_mkkey(k1, sizeof(k1), "recheck-extra");
	tl_mkkey(k2, sizeof(k2), "recheck-differs");
	tl_mkkey(k3, sizeof(k3), "recheck-good");
	tl_mkkey(k4, sizeof(k4), "recheck-mail");
	make_approved(c, k1, "crm_tag", tag_output, "crm.tag", "demo_http",
	              "{\"contact_id\":\"c-1\",\"tag\":\"lead\",\"delete_contact\":true}", i1);
	make_approved(c, k2, "crm_tag", tag_output, "crm.tag", "demo_http",
	              "{\"contact_id\":\"c-2\",\"tag\":\"spam\"}", i2);
	make_approved(c, k3, "crm_tag", tag_output, "crm.tag", "demo_http",
	              "{\"contact_id\":\"c-3\",\"tag\":\"lead\"}", i3);
	snprintf(marker, sizeof(marker), "marker-%s", tl_run);
	ck_assert_int_gt(asprintf(&mail, "{\"to\":\"a@example.com\\r\\nBcc: all@example.com\","
	                          "\"subject\":\"%s\",\"body\":\"Hello\"}", marker), 0);
	{
		char *out = NULL;

		ck_assert_int_gt(asprintf(&out, "{\"subject\":\"%s\",\"body\":\"Hello\","
		                          "\"confidence\":0.5}", marker), 0);
		make_approved(c, k4, "support_reply", out, "email.send", "demo_smtp", mail, i4);
		free(out);
	}
	free(mail);
	dl_sends(true);
	disp_start(&d);
	qexec(c, "NOTIFY oncegate_outbox", (char *)NULL);

	expect_delivered(c, i3, "{\"contact_id\":\"c-3\",\"tag\":\"lead\"}", 20);

	expect_refused_at_send(c, i1, "/effect/payload/delete_contact");
	expect_refused_at_send(c, i2, "/effect/payload/tag");
	expect_refused_at_send(c, i4, "/effect/payload/to");
	recs = tl_file_slurp(g_smtp_record, NULL);
	ck_assert_msg(recs == NULL || strstr(recs, marker) == NULL,
	              "the SMTP sink received the refused mail");
	free(recs);
	disp_stop(&d);
	PQfinish(c);
}
END_TEST

/* ===== 6. long multilingual mail to 100 recipients ================================= */

static size_t
utf8_chars(const char *s)
{
	size_t n = 0;

	for (; *s != '\0'; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			n++;
	return n;
}

/* Paragraphs in several scripts, up to exactly chars code points. */
static char *
long_body(size_t chars)
{
	static const char *const paras[] = {
		"Здравствуйте, Анна! Спасибо за ваше письмо. Мы проверили заказ №4711: посылка "
		"покинула склад в Екатеринбурге и прибудет в пятницу.",
		"您好！感谢您的耐心等待。您的订单已经发货，预计周五送达。如有任何问题，请随时回复此邮件。",
		"مرحباً، شكراً لتواصلك معنا. تم شحن طلبك وسيصل يوم الجمعة إن شاء الله.",
		"שלום! ההזמנה שלך נשלחה והיא צפויה להגיע ביום שישי.",
		"Kind regards from the support team 📦🚚✨ — and a line that starts with a dot:\n.\n"
		"..two dots, too.",
	};
	size_t cap = chars * 4 + 1, len = 0, n = 0, i = 0;
	char *out = malloc(cap);

	ck_assert_ptr_nonnull(out);
	while (n < chars) {
		const char *p = paras[i++ % (sizeof(paras) / sizeof(paras[0]))];
		const char *sep = "\n\n";

		for (; n < chars && *sep != '\0'; sep++, n++)
			out[len++] = *sep;
		while (n < chars && *p != '\0') {
			size_t k = 1;

			while (((unsigned char)p[k] & 0xc0) == 0x80)
				k++;
			memcpy(out + len, p, k);
			len += k;
			p += k;
			n++;
		}
	}
	out[len] = '\0';
	return out;
}

/* Base64 (whitespace ignored) → bytes, malloc'd, NUL-terminated. */
static char *
b64(const char *s, size_t n)
{
	char *clean = malloc(n + 1), *out = malloc(n + 4);
	size_t k = 0, i;
	int got;

	ck_assert(clean != NULL && out != NULL);
	for (i = 0; i < n; i++)
		if (s[i] != '\r' && s[i] != '\n' && s[i] != ' ')
			clean[k++] = s[i];
	clean[k] = '\0';
	got = EVP_DecodeBlock((unsigned char *)out, (unsigned char *)clean, (int)k);
	ck_assert_msg(got >= 0, "not base64: %.200s", clean);
	while (k > 0 && clean[k - 1] == '=') {
		got--;
		k--;
	}
	out[got] = '\0';
	free(clean);
	return out;
}

/* One header, unfolded (CRLF + space removed), or NULL. */
static char *
header(const char *head, const char *name)
{
	size_t nl = strlen(name);
	const char *p = head;
	char *out;
	size_t o = 0;

	for (;;) {
		if (strncasecmp(p, name, nl) == 0 && p[nl] == ':')
			break;
		p = strstr(p, "\r\n");
		if (p == NULL)
			return NULL;
		p += 2;
	}
	p += nl + 1;
	out = malloc(strlen(p) + 1);
	ck_assert_ptr_nonnull(out);
	while (*p != '\0') {
		if (p[0] == '\r' && p[1] == '\n') {
			if (p[2] != ' ' && p[2] != '\t')
				break;
			p += 2;
			continue;
		}
		out[o++] = *p++;
	}
	out[o] = '\0';
	return out;
}

/* RFC 2047 "B" words (and the whitespace between them) → text. */
static char *
decode_words(const char *v)
{
	size_t cap = strlen(v) + 1, o = 0;
	char *out = malloc(cap);
	const char *p = v;

	ck_assert_ptr_nonnull(out);
	while (*p == ' ')
		p++;
	while (*p != '\0') {
		const char *end;
		char *bytes;

		ck_assert_msg(strncmp(p, "=?UTF-8?B?", 10) == 0, "not an encoded word: %s", p);
		end = strstr(p + 10, "?=");
		ck_assert_ptr_nonnull(end);
		ck_assert_msg(end + 2 - p <= 75, "an encoded word longer than 75: %.80s", p);
		bytes = b64(p + 10, (size_t)(end - p - 10));
		memcpy(out + o, bytes, strlen(bytes));
		o += strlen(bytes);
		free(bytes);
		p = end + 2;
		while (*p == ' ')
			p++;
	}
	out[o] = '\0';
	return out;
}

START_TEST(test_long_multilingual_mail)
{
	static const char subject[] =
	    "Re: заказ №4711 — 您的订单已发货 — تم شحن طلبك — ההזמנה נשלחה 📦✅";
	PGconn *c = tl_pg_connect();
	char key[200], first[128], *body = long_body(BODY_CHARS), *st, *text, *id;
	json_t *to = json_array(), *rec = NULL, *rcpts;
	struct tl_resp r;
	struct dl_disp d;
	const char *data, *sep, *p;
	char *head, *h, *decoded;
	size_t i, len;

	ck_assert_uint_eq(utf8_chars(body), BODY_CHARS);
	for (i = 0; i < RCPTS; i++) {
		char a[128];

		snprintf(a, sizeof(a), "%s.r%03zu@list.example", tl_run, i);
		json_array_append_new(to, json_string(a));
	}
	snprintf(first, sizeof(first), "%s.r000@list.example", tl_run);
	dl_sends(true);
	disp_start(&d);
	tl_mkkey(key, sizeof(key), "long-mail");
	submit(key, "mail_list", json_pack("{s:s, s:s}", "subject", subject, "body", body),
	       effect_of("email.send", "demo_smtp", json_pack("{s:o}", "to", to)), &r);
	ck_assert_msg(r.status == 202 && streq(tl_jstr(r.json, "outcome"), "approved"),
	              "mail_list output: HTTP %ld %.2000s", r.status, r.body);
	id = strdup(JSTR(r.json, "effect_id"));
	tl_resp_free(&r);
	st = dl_wait_effect(c, id, "completed", 30);
	ck_assert_msg(streq(st, "completed"), "the long mail is %s", st);
	free(st);

	/* What the SMTP server received. */
	text = tl_file_slurp(g_smtp_record, &len);
	ck_assert_ptr_nonnull(text);
	for (p = text; p < text + len;) {
		const char *nl = memchr(p, '\n', len - (size_t)(p - text));
		json_t *j = json_loadb(p, nl ? (size_t)(nl - p) : len - (size_t)(p - text), 0, NULL);

		rcpts = json_object_get(j, "rcpt_tos");
		if (streq(json_string_value(json_array_get(rcpts, 0)), first)) {
			ck_assert_msg(rec == NULL, "the sink received the long mail twice");
			rec = json_incref(j);
		}
		json_decref(j);
		if (nl == NULL)
			break;
		p = nl + 1;
	}
	free(text);
	ck_assert_msg(rec != NULL, "the sink never received the long mail");
	rcpts = json_object_get(rec, "rcpt_tos");
	ck_assert_uint_eq(json_array_size(rcpts), RCPTS);
	for (i = 0; i < RCPTS; i++) {
		char a[128];

		snprintf(a, sizeof(a), "%s.r%03zu@list.example", tl_run, i);
		ck_assert_str_eq(json_string_value(json_array_get(rcpts, i)), a);
	}
	data = JSTR(rec, "data");
	/* CRLF line ends, lines within the limits */
	for (p = data; *p != '\0';) {
		const char *eol = strstr(p, "\r\n");

		ck_assert_msg(eol != NULL, "a line without CRLF: %.100s", p);
		ck_assert_msg(memchr(p, '\n', (size_t)(eol - p)) == NULL &&
		              memchr(p, '\r', (size_t)(eol - p)) == NULL, "a bare CR or LF");
		ck_assert_msg(eol - p <= 78, "a line of %zu characters: %.100s", (size_t)(eol - p), p);
		p = eol + 2;
	}
	sep = strstr(data, "\r\n\r\n");
	ck_assert_ptr_nonnull(sep);
	head = strndup(data, (size_t)(sep - data) + 2);
	h = header(head, "Content-Type");
	ck_assert_msg(h != NULL && strstr(h, "text/plain") && strstr(h, "charset=utf-8"), "%s", h);
	free(h);
	h = header(head, "Content-Transfer-Encoding");
	ck_assert_msg(h != NULL && strcmp(h, " base64") == 0, "%s", h);
	free(h);
	h = header(head, "MIME-Version");
	ck_assert_msg(h != NULL && strcmp(h, " 1.0") == 0, "%s", h);
	free(h);
	h = header(head, "Subject");
	ck_assert_ptr_nonnull(h);
	decoded = decode_words(h);
	ck_assert_msg(strcmp(decoded, subject) == 0, "subject decodes to \"%s\"", decoded);
	free(decoded);
	free(h);
	h = header(head, "To");
	ck_assert_ptr_nonnull(h);
	for (i = 0; i < RCPTS; i++) {
		char a[140];

		snprintf(a, sizeof(a), "<%s.r%03zu@list.example>", tl_run, i);
		ck_assert_msg(strstr(h, a) != NULL, "To: lacks %s", a);
	}
	free(h);
	free(head);
	decoded = b64(sep + 4, strlen(sep + 4));
	ck_assert_msg(strcmp(decoded, body) == 0, "the body does not decode to the approved text");
	free(decoded);
	/* the run is done, once */
	st = qstr(c, "SELECT state FROM workflow_runs WHERE client_id = $1::bigint AND"
	          " idempotency_key = $2", g_client, key, (char *)NULL);
	ck_assert_msg(streq(st, "completed"), "run %s is %s", key, st);
	free(st);
	json_decref(rec);
	free(id);
	free(body);
	disp_stop(&d);
	PQfinish(c);
}
END_TEST

/* ===== 7. the message itself, at the limits ========================================= */

START_TEST(test_message_limits)
{
	struct config_target t;
	struct provider_effect e = { "00000000-0000-4000-8000-000000000002", "email.send",
		                    "limits/email.send", NULL };
	json_t *payload, *to = json_array(), *rcpt = NULL;
	char why[160], *msg, *subject, *body, *head, *h, *decoded, *text;
	const char *p, *sep;
	size_t i, n;

	memset(&t, 0, sizeof(t));
	t.mail_from = (char *)(uintptr_t)MAIL_FROM;
	/* 1,000 recipients, a subject of 1,500 characters of mixed scripts, a
	 * body of 300,000 */
	for (i = 0; i < 1000; i++) {
		char a[64];

		snprintf(a, sizeof(a), "member.%04zu@list.example", i);
		json_array_append_new(to, json_string(a));
	}
	subject = malloc(1500 * 4 + 1);
	ck_assert_ptr_nonnull(subject);
	for (n = 0, i = 0; i < 1500; i++) {
		static const char *const bits[] = { "a", "Ж", "语", "ع", "🙂", " ", "=", "?" };
		const char *b = bits[(i * 7) % 8];

		memcpy(subject + n, b, strlen(b));
		n += strlen(b);
	}
	subject[n] = '\0';
	body = long_body(300 * 1024);
	payload = json_pack("{s:o, s:s, s:s, s:s}", "to", to, "subject", subject, "body", body,
	                    "in_reply_to", "<original-42@mail.example>");
	text = json_dumps(payload, JSON_COMPACT);
	e.payload = text;
	msg = provider_smtp_message(&t, &e, &rcpt, why, sizeof(why));
	ck_assert_msg(msg != NULL, "no message: %s", why);
	ck_assert_uint_eq(json_array_size(rcpt), 1000);
	for (p = msg; *p != '\0';) {
		const char *eol = strstr(p, "\r\n");

		ck_assert_msg(eol != NULL && eol - p <= 78 && memchr(p, '\n', (size_t)(eol - p)) == NULL,
		              "a line over 78 characters or without CRLF: %.120s", p);
		p = eol + 2;
	}
	sep = strstr(msg, "\r\n\r\n");
	ck_assert_ptr_nonnull(sep);
	head = strndup(msg, (size_t)(sep - msg) + 2);
	h = header(head, "Subject");
	decoded = decode_words(h);
	ck_assert_msg(strcmp(decoded, subject) == 0, "the subject does not decode back");
	free(decoded);
	free(h);
	h = header(head, "To");
	ck_assert_msg(strstr(h, "<member.0000@list.example>,") != NULL &&
	              strstr(h, "<member.0999@list.example>") != NULL, "To: %.200s", h);
	free(h);
	h = header(head, "In-Reply-To");
	ck_assert_str_eq(h, " <original-42@mail.example>");
	free(h);
	free(head);
	decoded = b64(sep + 4, strlen(sep + 4));
	ck_assert_msg(strcmp(decoded, body) == 0, "the body does not decode back");
	free(decoded);
	free(msg);
	json_decref(rcpt);
	free(text);

	/* one recipient too many: refused, and said so */
	json_array_append_new(json_object_get(payload, "to"), json_string("one.more@list.example"));
	text = json_dumps(payload, JSON_COMPACT);
	e.payload = text;
	rcpt = NULL;
	msg = provider_smtp_message(&t, &e, &rcpt, why, sizeof(why));
	ck_assert_msg(msg == NULL && rcpt == NULL && strstr(why, "/effect/payload/to") != NULL &&
	              strstr(why, "out of memory") == NULL, "1,001 recipients: %s", why);
	free(text);
	json_decref(payload);
	free(body);
	free(subject);
}
END_TEST

/* ===== 8. an HTTP body up to the responder's maximum ============================ */

START_TEST(test_http_large_body)
{
	PGconn *c = tl_pg_connect();
	char key[200], id[40], *payload, *st;
	size_t n = 200 * 1024, i;
	struct dl_disp d;

	/* 200 KiB of Cyrillic, CJK and emoji in one string */
	payload = malloc(n + 64);
	ck_assert_ptr_nonnull(payload);
	strcpy(payload, "{\"note\":\"");
	for (i = strlen(payload); i + 16 < n;) {
		static const char *const bits[] = { "Привет ", "你好 ", "📦 " };
		const char *b = bits[(i / 7) % 3];

		memcpy(payload + i, b, strlen(b));
		i += strlen(b);
	}
	strcpy(payload + i, "\"}");
	tl_mkkey(key, sizeof(key), "http-large");
	make_approved(c, key, "no_such_contract_here", "{}", "webhook.post", "demo_http",
	              payload, id);
	/* a run whose contract is not loaded is held, not sent unchecked */
	dl_sends(true);
	disp_start(&d);
	qexec(c, "NOTIFY oncegate_outbox", (char *)NULL);
	tl_sleep_ms(1500);
	st = qstr(c, "SELECT state FROM effect_outbox WHERE id = $1::uuid", id, (char *)NULL);
	ck_assert_msg(streq(st, "pending"), "an effect under a contract not loaded is %s", st);
	free(st);
	/* the same effect of a run the dispatcher needs no contract for goes out */
	qexec(c, "UPDATE workflow_runs SET contract = NULL, effect = NULL"
	      " WHERE client_id = $1::bigint AND idempotency_key = $2", g_client, key, (char *)NULL);
	qexec(c, "UPDATE effect_outbox SET next_attempt_at = now() WHERE id = $1::uuid", id,
	      (char *)NULL);
	qexec(c, "NOTIFY oncegate_outbox", (char *)NULL);
	expect_delivered(c, id, payload, 60);
	free(payload);
	disp_stop(&d);
	PQfinish(c);
}
END_TEST

/* ===== 9. a stalled SMTP server costs at most the target's timeout ================ */

enum stall_mode {
	STALL_SILENT,      /* accepts, never says a word */
	STALL_TRICKLE,     /* a greeting that never ends, one line at a time */
	STALL_AFTER_DATA,  /* takes the whole message, then never answers */
	STALL_DRIP,        /* takes the whole message, then answers a byte at a time */
};

struct stall_server {
	int fd, port;
	enum stall_mode mode;
	volatile bool stop;
	pthread_t th;
};

static bool
send_all(int fd, const char *s)
{
	size_t n = strlen(s);

	while (n > 0) {
		ssize_t w = send(fd, s, n, MSG_NOSIGNAL);

		if (w <= 0)
			return false;
		s += w;
		n -= (size_t)w;
	}
	return true;
}

/* Reads one line (at most cap - 1 bytes); false at EOF, error or stop. */
static bool
read_line(struct stall_server *s, int fd, char *line, size_t cap)
{
	size_t n = 0;

	while (!s->stop && n + 1 < cap) {
		char ch;
		ssize_t r = recv(fd, &ch, 1, 0);

		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			continue;
		if (r <= 0)
			return false;
		line[n++] = ch;
		if (ch == '\n')
			break;
	}
	line[n] = '\0';
	return !s->stop;
}

static void
stall_session(struct stall_server *s, int fd)
{
	char line[1024];
	struct timeval tv = { 0, 100000 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	switch (s->mode) {
	case STALL_SILENT:
		while (!s->stop && recv(fd, line, sizeof(line), 0) != 0)
			;
		break;
	case STALL_TRICKLE:
		while (!s->stop && send_all(fd, "220-still greeting you\r\n"))
			tl_sleep_ms(200);
		break;
	case STALL_AFTER_DATA:
	case STALL_DRIP:
		if (!send_all(fd, "220 stall.example ESMTP\r\n"))
			break;
		while (read_line(s, fd, line, sizeof(line))) {
			if (strncasecmp(line, "DATA", 4) == 0) {
				const char *drip = "250 2.0.0 Ok: queued as SLOWLY0000000000000000000000";

				send_all(fd, "354 go ahead\r\n");
				while (read_line(s, fd, line, sizeof(line)) && strcmp(line, ".\r\n") != 0)
					;
				/* the message is in: never a whole answer */
				for (; s->mode == STALL_DRIP && !s->stop && *drip != '\0'; drip++) {
					char one[2] = { *drip, '\0' };

					if (!send_all(fd, one))
						break;
					tl_sleep_ms(100);
				}
				while (!s->stop && recv(fd, line, sizeof(line), 0) != 0)
					;
				break;
			}
			if (!send_all(fd, "250 ok\r\n"))
				break;
		}
		break;
	}
	close(fd);
}

static void *
stall_run(void *arg)
{
	struct stall_server *s = arg;

	while (!s->stop) {
		int fd = accept(s->fd, NULL, NULL);

		if (fd < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				tl_sleep_ms(20);
			continue;
		}
		stall_session(s, fd);
	}
	return NULL;
}

static void
stall_start(struct stall_server *s, enum stall_mode mode)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	int one = 1;

	memset(s, 0, sizeof(*s));
	s->mode = mode;
	s->fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(s->fd, 0);
	setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(s->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(s->fd, 8), 0);
	ck_assert_int_eq(getsockname(s->fd, (struct sockaddr *)&sa, &sl), 0);
	s->port = ntohs(sa.sin_port);
	fcntl(s->fd, F_SETFL, fcntl(s->fd, F_GETFL) | O_NONBLOCK);
	ck_assert_int_eq(pthread_create(&s->th, NULL, stall_run, s), 0);
}

static void
stall_stop(struct stall_server *s)
{
	s->stop = true;
	pthread_join(s->th, NULL);
	close(s->fd);
}

START_TEST(test_stalled_smtp)
{
	static const struct {
		enum stall_mode mode;
		const char *name;
		bool sent;          /* the message went out before the stall */
	} cases[] = {
		{ STALL_SILENT, "silent after accept", false },
		{ STALL_TRICKLE, "a greeting that trickles forever", false },
		{ STALL_AFTER_DATA, "silent after the message", true },
		{ STALL_DRIP, "an answer a byte at a time", true },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct stall_server srv;
		struct config_target t;
		struct provider_conn *a = provider_conn_new();
		struct provider_effect e = { "00000000-0000-4000-8000-000000000001", "email.send",
			                    "stall/email.send",
			                    "{\"to\":\"kunde@example.com\",\"subject\":\"Заказ 42\","
			                    "\"body\":\"Привет 📦\"}" };
		struct provider_attempt at;
		char url[64];
		double t0, took_ms;

		ck_assert_ptr_nonnull(a);
		stall_start(&srv, cases[i].mode);
		snprintf(url, sizeof(url), "smtp://127.0.0.1:%d", srv.port);
		memset(&t, 0, sizeof(t));
		t.name = (char *)(uintptr_t)"stalled";
		t.kind = (char *)(uintptr_t)"smtp";
		t.url = url;
		t.lookup_url = t.credentials_env = t.provider_id_header = t.provider_id_pointer =
		    t.rejection_pointer = (char *)(uintptr_t)"";
		t.mail_from = (char *)(uintptr_t)MAIL_FROM;
		t.timeout_ms = STALL_TIMEOUT_MS;
		/* the connect phase may not stretch the total either */
		t.connect_timeout_ms = 4 * STALL_TIMEOUT_MS;
		t.response_cap_bytes = 65536;
		t0 = tl_now();
		provider_smtp.send(a, &t, &e, &at);
		took_ms = (tl_now() - t0) * 1000;
		stall_stop(&srv);
		ck_assert_msg(took_ms <= STALL_TIMEOUT_MS + STALL_SLACK_MS,
		              "%s: the attempt took %.0f ms against a timeout of %d ms", cases[i].name,
		              took_ms, STALL_TIMEOUT_MS);
		ck_assert_msg(took_ms >= STALL_TIMEOUT_MS - 100, "%s: gave up after %.0f ms",
		              cases[i].name, took_ms);
		ck_assert_msg(!at.invalid && at.r.transport_error == ATTEMPT_ERR_TIMEOUT,
		              "%s: transport error %d (%s)", cases[i].name, (int)at.r.transport_error,
		              at.invalid_reason);
		ck_assert_msg(at.r.request_sent == cases[i].sent, "%s: request_sent %d", cases[i].name,
		              (int)at.r.request_sent);
		provider_attempt_clear(&at);
		provider_conn_free(a);
	}
}
END_TEST

/* ---- the suite ------------------------------------------------------------------ */

TL_SUITE(effect_suite, "effect_schema",
         {"effects", TEST_TIMEOUT_S, dl_tcase,
          .tests = TL_LIST(test_contract_syntax, test_crm_tag_attack, test_payload_schema,
                           test_crlf_injection, test_dispatcher_recheck,
                           test_long_multilingual_mail, test_message_limits,
                           test_http_large_body, test_stalled_smtp)})

static bool
suite_client(void)
{
	g_key_dev = tl_env("ONCEGATE_API_KEY");
	return dl_client_id("dev", g_client, sizeof(g_client));
}

DL_SUITE_MAIN(.name = "check_effect_schema", .prefix = "es", .needed = "ONCEGATE_API_KEY",
              .suite = effect_suite, .prepare = suite_client, .http_stall_s = 30, .smtp = true)

/*
 * check_numbers.c — the payload hash under RFC 8785 through the real stack
 * (nginx, responder, PostgreSQL), runs hashed before it compared under
 * their own rule, numbers beyond double range refused, and numbers written
 * back in their shortest round-trip form.
 *
 * Needs the stack of `./dev test`; without ONCEGATE_URL the suite is
 * skipped (exit 77).
 */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dispatchlib.h"
#include "testlib.h"

static char g_client[24]; /* id of client "dev" */
static const char *g_key;

static void
claim_text(const char *key, const char *payload, struct tl_resp *r)
{
	char *text = NULL;

	ck_assert_int_ge(asprintf(&text, "{\"key\":\"%s\",\"payload\":%s}", key, payload), 0);
	tl_post_text("/v1/runs", g_key, text, r);
	free(text);
}

/* Claims key with claim_payload, then POSTs to the run's `suffix` as its
 * lease owner: {"lease_owner","version", <members>}. draw: a sample draw
 * to keep on the run first, or NULL. Returns the answer's status. */
static long
claim_then_post(const char *key, const char *claim_payload, const char *draw,
                const char *suffix, const char *members)
{
	json_t *body = json_pack("{s:s, s:o}", "key", key, "payload",
	                         json_loads(claim_payload, 0, NULL));
	char *path, *text = NULL;
	struct tl_claimed c;
	struct tl_resp r;
	long status;

	ck_assert_msg(body != NULL, "claim payload %s", claim_payload);
	tl_claim_body(g_key, body, &c);
	json_decref(body);
	ck_assert_int_ge(asprintf(&text, "{\"lease_owner\":\"%s\",\"version\":%lld,%s}",
	                          c.owner, c.version, members), 0);
	if (draw != NULL)
		tl_keep_sample_draw(key, draw);
	path = tl_run_path(key, suffix);
	tl_post_text(path, g_key, text, &r);
	status = r.status;
	ck_assert_msg(status == 200 || status == 202, "%ld %s", status, r.body);
	tl_resp_free(&r);
	free(path);
	free(text);
	return status;
}

/* A run claimed before RFC 8785: its hash is over the payload as written
 * ("og1"), state as given. */
static void
old_run(PGconn *c, const char *key, const char *payload, const char *state)
{
	char hash[72];

	tl_payload_hash(payload, hash);
	qexec(c, "INSERT INTO workflow_runs (client_id, idempotency_key, payload_hash, payload,"
	      "    state, claim_started_at, payload_canon)"
	      " VALUES ($1::bigint, $2, $3, $4::jsonb, $5, now(), 'og1')",
	      g_client, key, hash, payload, state, (char *)NULL);
}

static char *
row_value(PGconn *c, const char *col, const char *key)
{
	char sql[256];

	snprintf(sql, sizeof(sql),
	         "SELECT %s FROM workflow_runs WHERE client_id = $1::bigint AND idempotency_key = $2",
	         col);
	return qstr(c, sql, g_client, key, (char *)NULL);
}

START_TEST(new_run_hashed_by_rfc8785)
{
	char key[200], want[72], *v;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();

	tl_mkkey(key, sizeof(key), "new");
	tl_payload_hash("{\"discount\":0.8,\"note\":\"\xd0\x97\xd0\xb0\xd0\xba\xd0\xb0\xd0\xb7 "
	                "\xe6\xb3\xa8\xe6\x96\x87\",\"total\":19.9,\"\xf0\x9f\x98\x80\":1,"
	                "\"\xef\xbd\xa1\":2}", want);
	claim_text(key, "{\"total\":19.90,\"discount\":8E-1,\"\xef\xbd\xa1\":2,\"\\ud83d\\ude00\":1,"
	           "\"note\":\"\\u0417\xd0\xb0\xd0\xba\xd0\xb0\xd0\xb7 \xe6\xb3\xa8\xe6\x96\x87\"}", &r);
	ck_assert_msg(r.status == 201, "%s", r.body);
	ck_assert_str_eq(tl_jstr(r.json, "payload_hash"), want);
	tl_resp_free(&r);
	v = row_value(c, "payload_hash || ' ' || payload_canon", key);
	ck_assert_ptr_nonnull(v);
	ck_assert_str_eq(v + strlen(want), " jcs");
	ck_assert_int_eq(strncmp(v, want, strlen(want)), 0);
	free(v);
	/* the same payload as JavaScript writes it: a duplicate */
	claim_text(key, "{\"\xf0\x9f\x98\x80\":1,\"\xef\xbd\xa1\":2,\"discount\":0.8,\"note\":"
	           "\"\xd0\x97\xd0\xb0\xd0\xba\xd0\xb0\xd0\xb7 \xe6\xb3\xa8\xe6\x96\x87\",\"total\":19.9}",
	           &r);
	ck_assert_msg(r.status == 200 && strcmp(tl_jstr(r.json, "outcome"), "duplicate") == 0,
	              "%ld %s", r.status, r.body);
	tl_resp_free(&r);
	PQfinish(c);
}
END_TEST

START_TEST(old_run_compared_as_written)
{
	char key[200], retry[200], old_hash[72], other[72], *v;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();

	tl_mkkey(key, sizeof(key), "old-terminal");
	old_run(c, key, "{\"total\":19.90}", "failed_terminal");
	tl_payload_hash("{\"total\":19.90}", old_hash);
	tl_payload_hash("{\"total\":19.9}", other);

	/* the same text as then: a duplicate, as it always was */
	claim_text(key, "{ \"total\" : 19.90 }", &r);
	ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
	ck_assert_str_eq(tl_jstr(r.json, "outcome"), "duplicate");
	tl_resp_free(&r);
	/* under the old rule 19.9 is another payload; the answer names the
	 * hash comparable with the stored one */
	claim_text(key, "{\"total\":19.9}", &r);
	ck_assert_msg(r.status == 409 || r.status == 422, "%ld %s", r.status, r.body);
	ck_assert_str_eq(tl_jstr(r.json, "error"), "payload_mismatch");
	ck_assert_str_eq(tl_jstr(r.json, "payload_hash"), other);
	ck_assert_str_eq(tl_jstr(r.json, "stored_payload_hash"), old_hash);
	tl_resp_free(&r);

	/* a reclaim keeps the run's hash and its rule */
	tl_mkkey(retry, sizeof(retry), "old-retryable");
	old_run(c, retry, "{\"total\":19.90}", "failed_retryable");
	claim_text(retry, "{\"total\":19.90}", &r);
	ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
	ck_assert_str_eq(tl_jstr(r.json, "payload_hash"), old_hash);
	tl_resp_free(&r);
	v = row_value(c, "payload_hash || ' ' || payload_canon || ' ' || attempt", retry);
	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(strncmp(v, old_hash, strlen(old_hash)), 0);
	ck_assert_str_eq(v + strlen(old_hash), " og1 2");
	free(v);
	PQfinish(c);
}
END_TEST

/* The workflow's claim of a replayed key, with the numbers as JavaScript
 * writes them: a reclaim of the new run, hash `want`. */
static void
reclaim_as_javascript(const char *key, const char *want)
{
	struct tl_resp r;

	claim_text(key, "{\"total\":19.9,\"note\":\"\xd0\x97\xd0\xb0\xd0\xba\xd0\xb0\xd0\xb7 "
	           "\xe6\xb3\xa8\xe6\x96\x87\"}", &r);
	ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
	ck_assert_str_eq(tl_jstr(r.json, "payload_hash"), want);
	tl_resp_free(&r);
}

/* A replay of a run hashed as written makes a run hashed under RFC 8785,
 * from the original's payload or from --payload FILE written with other
 * numbers: the workflow's claim of the new key (numbers as JavaScript
 * writes them) reclaims it. */
START_TEST(replay_of_old_run)
{
	static const char *const payload = "{\"note\":\"\u0417\u0430\u043a\u0430\u0437 "
	                                   "\u6ce8\u6587\",\"total\":19.90}";
	char key[200], nkey[200], fkey[200], want[72], file[] = "/tmp/check_numbers-XXXXXX", *out = NULL;
	char *v;
	PGconn *c = tl_pg_connect();
	FILE *f;
	int fd;

	tl_payload_hash("{\"note\":\"\xd0\x97\xd0\xb0\xd0\xba\xd0\xb0\xd0\xb7 "
	                "\xe6\xb3\xa8\xe6\x96\x87\",\"total\":19.9}", want);
	tl_mkkey(key, sizeof(key), "replay-original");
	tl_mkkey(nkey, sizeof(nkey), "replay-new");
	tl_mkkey(fkey, sizeof(fkey), "replay-file");
	old_run(c, key, payload, "failed_terminal");

	ck_assert_msg(tl_ctl(&out, "replay", key, "--new-key", nkey, "--reason",
	                     "\xd1\x81\xd1\x83\xd0\xbc\xd0\xbc\xd0\xb0 corrected upstream",
	                     (char *)NULL) == 0, "%s", out);
	free(out);
	v = row_value(c, "payload_hash || ' ' || payload_canon || ' ' || state", nkey);
	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(strncmp(v, want, strlen(want)), 0);
	ck_assert_str_eq(v + strlen(want), " jcs failed_retryable");
	free(v);
	reclaim_as_javascript(nkey, want);

	fd = mkstemp(file);
	ck_assert_int_ge(fd, 0);
	f = fdopen(fd, "w");
	ck_assert_ptr_nonnull(f);
	fputs("{\n  \"total\": 1990e-2,\n  \"note\": \"\xd0\x97\xd0\xb0\xd0\xba\xd0\xb0\xd0\xb7 "
	      "\xe6\xb3\xa8\xe6\x96\x87\"\n}\n", f);
	fclose(f);
	ck_assert_msg(tl_ctl(&out, "replay", key, "--new-key", fkey, "--payload", file, "--reason",
	                     "corrected total", (char *)NULL) == 0,
	              "%s", out);
	ck_assert_msg(strstr(out, want) != NULL, "replay does not print the hash %s: %s", want, out);
	free(out);
	unlink(file);
	reclaim_as_javascript(fkey, want);
	PQfinish(c);
}
END_TEST

START_TEST(beyond_double_range_is_400)
{
	static const char *const bad[] = { "{\"amount\":1e400}", "{\"amount\":-1e400}",
		                           "[1e-400]", "{\"a\":{\"b\":[2e308]}}" };
	char key[200], *v;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char what[32];

		snprintf(what, sizeof(what), "range-%zu", i);
		tl_mkkey(key, sizeof(key), what);
		claim_text(key, bad[i], &r);
		ck_assert_msg(r.status == 400, "%s: %ld %s", bad[i], r.status, r.body);
		ck_assert_msg(strstr(r.body, "IEEE 754 double") != NULL, "%s: %s", bad[i], r.body);
		tl_resp_free(&r);
		v = row_value(c, "state", key);
		ck_assert_ptr_null(v);
	}
	PQfinish(c);
}
END_TEST

/*
 * An integer beyond 64 bits is a JSON number like any other: the claim is
 * taken, its hash is that of the RFC 8785 form (as JavaScript prints the
 * number: 1e20 is 100000000000000000000, 2^64 is 18446744073709552000, -0
 * is 0, 1.0 is 1), and the same payload as JavaScript writes it is a
 * duplicate. A member that must be an integer is refused as a field
 * (400 invalid_field), not as broken JSON.
 */
START_TEST(beyond_64_bits_is_a_number)
{
	char key[200], want[72], *body = NULL;
	struct tl_resp r;

	tl_mkkey(key, sizeof(key), "64bit-сумма");
	tl_payload_hash("{\"m\":18446744073709552000,\"n\":100000000000000000000,\"o\":1,"
	                "\"z\":0,\"сумма\":-9223372036854776000}", want);
	claim_text(key, "{\"n\":100000000000000000000,\"m\":18446744073709551616,\"z\":-0,"
	           "\"o\":1.0,\"сумма\":-9223372036854775809}", &r);
	ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
	ck_assert_str_eq(tl_jstr(r.json, "payload_hash"), want);
	tl_resp_free(&r);
	claim_text(key, "{\"сумма\":-9223372036854776000,\"m\":18446744073709552000,"
	           "\"n\":1e20,\"o\":1,\"z\":0}", &r);
	ck_assert_msg(r.status == 200 && strcmp(tl_jstr(r.json, "outcome") ?: "", "duplicate") == 0,
	              "the same numbers as JavaScript writes them: %ld %s", r.status, r.body);
	tl_resp_free(&r);

	/* where an integer is required, a number beyond 64 bits is a wrong field */
	tl_mkkey(key, sizeof(key), "64bit-lease");
	ck_assert_int_ge(asprintf(&body, "{\"key\":\"%s\",\"payload\":{},\"lease_seconds\":"
	                          "100000000000000000000}", key), 0);
	tl_post_text("/v1/runs", g_key, body, &r);
	free(body);
	ck_assert_msg(r.status == 400 && strcmp(tl_jstr(r.json, "error") ?: "", "invalid_field") == 0 &&
	                  strcmp(tl_jstr(r.json, "field") ?: "", "lease_seconds") == 0,
	              "lease_seconds beyond 64 bits: %ld %s", r.status, r.body);
	tl_resp_free(&r);
}
END_TEST

START_TEST(numbers_written_back_shortest)
{
	char key[200];
	struct tl_resp r;

	tl_mkkey(key, sizeof(key), "written-back");
	claim_then_post(key, "{\"ticket\":4242}", NULL, "/transition",
	                "\"to\":\"completed\",\"result\":"
	                "{\"score\":0.8,\"sum\":0.30000000000000004,\"small\":1e-7,\"tiny\":5e-324,"
	                "\"whole\":3.0,\"id\":9007199254740993,"
	                "\"third\":0.333333333333333314829616256247}");

	/* a duplicate claim of a completed run returns its result */
	claim_text(key, "{\"ticket\":4242}", &r);
	ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
	ck_assert_msg(strstr(r.body, "\"score\":0.8,") != NULL ||
	                  strstr(r.body, "\"score\":0.8}") != NULL, "%s", r.body);
	ck_assert_msg(strstr(r.body, "0.80000000000000004") == NULL, "%s", r.body);
	ck_assert_msg(strstr(r.body, "\"sum\":0.30000000000000004") != NULL, "%s", r.body);
	ck_assert_msg(strstr(r.body, "\"small\":1e-7") != NULL, "%s", r.body);
	ck_assert_msg(strstr(r.body, "\"tiny\":5e-324") != NULL, "%s", r.body);
	ck_assert_msg(strstr(r.body, "\"whole\":3.0") != NULL, "%s", r.body);
	ck_assert_msg(strstr(r.body, "\"id\":9007199254740993") != NULL, "%s", r.body);
	ck_assert_msg(strstr(r.body, "\"third\":0.3333333333333333") != NULL, "%s", r.body);
	tl_resp_free(&r);
}
END_TEST

/* A model output's confidence of 0.8 shows as 0.8 in GET /v1/runs/{key}. */
START_TEST(output_written_back_shortest)
{
	char key[200], *path;
	struct tl_resp r;

	tl_mkkey(key, sizeof(key), "output");
	claim_then_post(key, "{\"ticket\":4243}", NULL, "/output",
	    "\"contract\":\"support_reply\","
	    "\"output\":{\"subject\":\"Re: \u0412\u0430\u0448 \u0437\u0430\u043a\u0430\u0437 4243\","
	    "\"body\":\"\u0417\u0434\u0440\u0430\u0432\u0441\u0442\u0432\u0443\u0439\u0442\u0435, "
	    "\u60a8\u7684\u8ba2\u5355\u5df2\u53d1\u8d27\","
	    "\"tone\":\"friendly\",\"confidence\":0.8},"
	    "\"model\":{\"provider\":\"openai-compatible\",\"name\":\"qwen2.5-7b-instruct\","
	    "\"revision\":\"2024-09-19\"},"
	    "\"effect\":{\"type\":\"email.send\",\"target\":\"demo_smtp\",\"payload\":"
	    "{\"to\":\"customer@example.com\",\"ticket\":4243}},"
	    "\"source_url\":\"https://crm.example/ticket/4243\","
	    "\"requested_by\":\"alice@example.com\"");

	path = tl_run_path(key, "");
	tl_get(path, g_key, &r);
	ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
	ck_assert_msg(strstr(r.body, "\"confidence\":0.8") != NULL, "%s", r.body);
	ck_assert_msg(strstr(r.body, "0.80000000000000004") == NULL, "%s", r.body);
	tl_resp_free(&r);
	free(path);
}
END_TEST

/* oncegatectl explain --json: the gate's sample draw and rate (crm_tag
 * samples 0.1 of its runs) as they were set, 0.99 and 0.1, not
 * 0.98999999999999999 and 0.10000000000000001; the same in its text form. */
START_TEST(explain_writes_numbers_shortest)
{
	char key[200], *out = NULL;

	tl_mkkey(key, sizeof(key), "explain");
	claim_then_post(key, "{\"contact_id\":\"c-4244\"}", "0.99", "/output",
	    "\"contract\":\"crm_tag\","
	    "\"output\":{\"tag\":\"lead\",\"confidence\":0.95,"
	    "\"reason\":\"\u0437\u0430\u043f\u0440\u043e\u0441\u0438\u043b \u0441\u0447\u0451\u0442\"},"
	    "\"model\":{\"provider\":\"openai-compatible\",\"name\":\"qwen2.5-7b-instruct\","
	    "\"revision\":\"2024-09-19\"},"
	    "\"effect\":{\"type\":\"crm.tag\",\"target\":\"demo_http\",\"payload\":"
	    "{\"contact_id\":\"c-4244\"}},"
	    "\"source_url\":\"https://crm.example/contact/4244\","
	    "\"requested_by\":\"check-numbers@workflows.example\"");

	ck_assert_int_eq(tl_ctl(&out, "--json", "explain", key, (char *)NULL), 0);
	ck_assert_msg(strstr(out, "\"sample_draw\":0.99") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "\"sample_rate\":0.1") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "0.98999999999999999") == NULL &&
	                  strstr(out, "0.10000000000000001") == NULL, "%s", out);
	free(out);
}
END_TEST

TL_SUITE(numbers_suite, "numbers",
         {"payload hash and numbers", 60,
          .tests = TL_LIST(new_run_hashed_by_rfc8785, beyond_64_bits_is_a_number,
                           old_run_compared_as_written, replay_of_old_run,
                           beyond_double_range_is_400, numbers_written_back_shortest,
                           output_written_back_shortest, explain_writes_numbers_shortest)})

int
main(void)
{
	int rc;

	if ((rc = tl_suite_begin("check_numbers", "nu", "ONCEGATE_API_KEY")) != 0)
		return rc;
	g_key = tl_env("ONCEGATE_API_KEY");
	/* (no ck_assert outside a test: Check cannot report it there) */
	if (!dl_client_id("dev", g_client, sizeof(g_client))) {
		tl_suite_end(1);
		return 99;
	}
	return tl_suite_end(tl_suite_run(numbers_suite(), false));
}

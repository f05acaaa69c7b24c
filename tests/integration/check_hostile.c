/*
 * check_hostile.c — integration suite: input that is valid enough to get
 * far and hostile enough to break something, sent the way a client sends
 * it, through nginx, to the real stack. Every refusal is a clear 4xx that
 * names the problem in the caller's words and changes nothing (rows of
 * workflow_runs, approvals, effect_outbox and run_events counted before and
 * after); everything accepted works to the end.
 *
 * Needs the stack of `./dev check` (ONCEGATE_URL, ONCEGATE_API_KEY, PG*,
 * ONCEGATE_CONF, ONCEGATE_LOG, ONCEGATE_CTL); skipped (77) without it.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "testlib.h"

#define PROPERTY_KEYS   160   /* random keys of the property test */
#define WIDE_FIELDS     16000
#define DEEP_LEVELS     58    /* + body, output, the array: 61 of the 64 allowed */
#define DEEP_ITEMS      20000 /* about 40 KB in all */
#define PAGE_TIME_MAX_S 2.0   /* generous: sanitizers are on */

static const char *g_key;     /* client "dev" */
static PGconn *g_pg;

static PGconn *
pg(void)
{
	if (g_pg == NULL)
		g_pg = tl_pg_connect();
	return g_pg;
}

/* Rows of the four tables a request could change, as one text. */
static char *
totals(void)
{
	return tl_pg_value(pg(),
	                   "SELECT (SELECT count(*) FROM workflow_runs) || ' runs, ' ||"
	                   " (SELECT count(*) FROM approvals) || ' approvals, ' ||"
	                   " (SELECT count(*) FROM effect_outbox) || ' effects, ' ||"
	                   " (SELECT count(*) FROM run_events) || ' events, ' ||"
	                   " (SELECT count(*) FROM operator_actions) || ' actions, ' ||"
	                   " (SELECT count(*) FROM api_clients) || ' clients'",
	                   0, NULL);
}

static void
expect_totals(const char *before, const char *what)
{
	char *after = totals();

	ck_assert_msg(strcmp(before, after) == 0, "%s changed rows: before %s, after %s", what,
	              before, after);
	free(after);
}

/* A 400 problem answer whose message says `says` (case-insensitive) and
 * names none of jansson's internals. */
static void
expect_400(const struct tl_resp *r, const char *says)
{
	const char *m = tl_jstr(r->json, "message");

	if (m == NULL)
		m = tl_jstr(r->json, "detail");
	ASSERT_STATUS(r, 400);
	ck_assert_msg(m != NULL && tl_contains_ci(m, says), "%s: message does not say \"%s\": %s",
	              r->what, says, r->body);
	ck_assert_msg(strstr(r->body, "JSON_") == NULL && strstr(r->body, "jansson") == NULL,
	              "%s: the message names parser internals: %s", r->what, r->body);
}

static void
claim_ok(const char *key, struct tl_claimed *c)
{
	tl_claim_payload(g_key, key,
	                 json_pack("{s:s, s:s}", "ticket", "Заявка №42 — 注文 — طلب — 🚚", "run",
	                           tl_run),
	                 c);
}

/* The body of an /output (hostile_any, a crm.tag effect), as JSON text with
 * output_text and model_name spliced in as written. */
static char *
output_body(const struct tl_claimed *c, const char *output_text, const char *effect_payload,
            const char *model_name)
{
	char *s = NULL;

	if (asprintf(&s,
	             "{\"lease_owner\":\"%s\",\"version\":%lld,\"contract\":\"hostile_any\","
	             "\"output\":%s,\"effect\":{\"type\":\"crm.tag\",\"target\":\"demo_http\","
	             "\"payload\":%s},\"model\":{\"provider\":\"openai-compatible\","
	             "\"name\":\"%s\",\"revision\":\"2024-09-19\"},"
	             "\"source_url\":\"https://crm.example/ticket/42\","
	             "\"requested_by\":\"hostile-input@workflows.example\"}",
	             c->owner, c->version, output_text,
	             effect_payload ? effect_payload : "{\"contact\":\"c-42\",\"tag\":\"lead\"}",
	             model_name ? model_name : "qwen2.5-7b-instruct") < 0)
		ck_abort_msg("out of memory");
	return s;
}

static void
post_text(const char *key, const char *suffix, const char *text, struct tl_resp *r)
{
	char *path = tl_run_path(key, suffix);

	tl_post_text(path, g_key, text, r);
	free(path);
}

/* ---- numbers beyond IEEE 754 double range ------------------------------- */

static const char *const huge_numbers[] = {
	"1e-20000", "1e400", "-1e999", "2e308", "-4e-400", "0.1e-999", "1E+99999", "0e-99999",
};

START_TEST(test_numbers_out_of_range_claim)
{
	char key[160], text[512], *before;
	struct tl_resp r;
	size_t i;

	for (i = 0; i < sizeof(huge_numbers) / sizeof(huge_numbers[0]); i++) {
		snprintf(key, sizeof(key), "%s-num-claim-%zu", tl_run, i);
		snprintf(text, sizeof(text),
		         "{\"key\":\"%s\",\"payload\":{\"amount\":[19.9,%s],\"note\":\"Счёт 🧾\"}}",
		         key, huge_numbers[i]);
		before = totals();
		tl_post_text("/v1/runs", g_key, text, &r);
		expect_400(&r, "outside the range of an IEEE 754 double");
		ck_assert_msg(tl_contains_ci(tl_jstr(r.json, "message"), "line 1 column"),
		              "the message says where the number is: %s", r.body);
		tl_resp_free(&r);
		expect_totals(before, text);
		free(before);
	}
	/* denormals and zeros are in range, and so claimable */
	snprintf(key, sizeof(key), "%s-num-claim-ok", tl_run);
	snprintf(text, sizeof(text),
	         "{\"key\":\"%s\",\"payload\":{\"tiny\":4.9e-324,\"zero\":-0.0e-1000,\"max\":1.7e308}}",
	         key);
	tl_post_text("/v1/runs", g_key, text, &r);
	ASSERT_STATUS(&r, 201);
	tl_resp_free(&r);
}
END_TEST

START_TEST(test_numbers_out_of_range_everywhere)
{
	char key[160], *text, *before, res[256], *snap;
	struct tl_claimed c;
	struct tl_resp r;
	size_t i;

	tl_mkkey(key, sizeof(key), "num-other");
	claim_ok(key, &c);
	for (i = 0; i < sizeof(huge_numbers) / sizeof(huge_numbers[0]); i++) {
		char out[128];

		before = totals();
		snap = tl_run_snapshot(pg(), key);
		/* in a model output */
		snprintf(out, sizeof(out), "{\"score\":%s}", huge_numbers[i]);
		text = output_body(&c, out, NULL, NULL);
		post_text(key, "/output", text, &r);
		expect_400(&r, "outside the range of an IEEE 754 double");
		tl_resp_free(&r);
		free(text);
		/* in an effect payload */
		snprintf(out, sizeof(out), "{\"contact\":\"c-42\",\"weight\":%s}", huge_numbers[i]);
		text = output_body(&c, "{\"tag\":\"lead\"}", out, NULL);
		post_text(key, "/output", text, &r);
		expect_400(&r, "outside the range of an IEEE 754 double");
		tl_resp_free(&r);
		free(text);
		/* in a transition result */
		snprintf(res, sizeof(res),
		         "{\"lease_owner\":\"%s\",\"version\":%lld,\"to\":\"completed\","
		         "\"result\":{\"total\":%s}}",
		         c.owner, c.version, huge_numbers[i]);
		post_text(key, "/transition", res, &r);
		expect_400(&r, "outside the range of an IEEE 754 double");
		tl_resp_free(&r);
		/* in a lease renewal's own fields */
		snprintf(res, sizeof(res), "{\"lease_owner\":\"%s\",\"version\":%lld,"
		         "\"lease_seconds\":%s}", c.owner, c.version, huge_numbers[i]);
		post_text(key, "/lease", res, &r);
		expect_400(&r, "outside the range of an IEEE 754 double");
		tl_resp_free(&r);
		tl_expect_run_unchanged(pg(), key, snap, huge_numbers[i]);
		expect_totals(before, huge_numbers[i]);
		free(snap);
		free(before);
	}
}
END_TEST

/* ---- what jansson says, in the caller's words --------------------------- */

START_TEST(test_truncated_emoji_and_other_json_problems)
{
	/* the payload, what the answer says */
	static const struct tl_given cases[] = {
		/* "Заказ доставлен 🚚" cut by .slice() between the surrogates */
		{ "{\"text\":\"Заказ доставлен \\ud83d\"}", "lone surrogate \\uD83D at line 1 column" },
		{ "{\"text\":\"\\ude9a отправлено\"}", "lone surrogate \\uDE9A" },
		{ "{\"text\":\"\\ud83d\\u0041\"}", "lone surrogate" },
		{ "{\"text\":\"a\\u0000b\"}", "\\u0000 (the NUL character) is not allowed" },
		{ "{\"text\":\"tab\there\"}", "raw control character" },
	};
	char key[160], text[512], *before;
	struct tl_resp r;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(key, sizeof(key), "%s-json-%zu", tl_run, i);
		snprintf(text, sizeof(text), "{\"key\":\"%s\",\"payload\":%s}", key,
		         cases[i].given);
		before = totals();
		tl_post_text("/v1/runs", g_key, text, &r);
		expect_400(&r, cases[i].want);
		tl_resp_free(&r);
		expect_totals(before, text);
		free(before);
	}
	/* the same truncated emoji in a model name of an /output */
	{
		struct tl_claimed c;
		char *body, *snap;

		tl_mkkey(key, sizeof(key), "json-model");
		claim_ok(key, &c);
		before = totals();
		snap = tl_run_snapshot(pg(), key);
		body = output_body(&c, "{\"tag\":\"lead\"}", NULL, "qwen 🚀 \\ud83d");
		post_text(key, "/output", body, &r);
		expect_400(&r, "lone surrogate \\uD83D");
		tl_resp_free(&r);
		free(body);
		tl_expect_run_unchanged(pg(), key, snap, "an output with half an emoji");
		expect_totals(before, "an output with half an emoji");
		free(snap);
		free(before);
	}
}
END_TEST

/* ---- keys the URL path must carry --------------------------------------- */

/* POST of a JSON body to /v1/runs/{key}{suffix}, the key encoded as
 * encodeURIComponent does (tl_run_path). */
static void
post_json(const char *key, const char *suffix, json_t *body, struct tl_resp *r)
{
	char *path = tl_run_path(key, suffix);

	tl_post_json(path, g_key, body, r);
	json_decref(body);
	free(path);
}

/* Claims key as g_key, leased for lease_s seconds: true with the lease's
 * owner and the run's version; the answer in *r either way. */
static bool
claim_lease(const char *key, int lease_s, char owner[64], long long *version,
            struct tl_resp *r)
{
	json_t *body = json_pack("{s:s, s:{s:s}, s:i}", "key", key, "payload", "k", key,
	                         "lease_seconds", lease_s);

	tl_post_json("/v1/runs", g_key, body, r);
	json_decref(body);
	if (r->status != 201 || !tl_jint(r->json, "version", version) ||
	    tl_jstr(r->json, "lease_owner") == NULL)
		return false;
	snprintf(owner, 64, "%s", tl_jstr(r->json, "lease_owner"));
	return true;
}

/* Claim, read, renew, transition (failed_retryable), reclaim, complete:
 * every step must answer as for any key. Returns false (with why) at the
 * first step that does not. */
static bool
lifecycle(const char *key, long *claim_status, char *why, size_t whylen)
{
	struct tl_resp r;
	char owner[64], *path;
	long long version;
	bool ok = false, claimed = claim_lease(key, 5, owner, &version, &r);

	if (claim_status != NULL)
		*claim_status = r.status;
	if (!claimed) {
		snprintf(why, whylen, "claim: HTTP %ld %.300s", r.status, r.body);
		goto out;
	}
	tl_resp_free(&r);

	path = tl_run_path(key, NULL);
	tl_get(path, g_key, &r);
	free(path);
	if (r.status != 200 || tl_jstr(r.json, "key") == NULL ||
	    strcmp(tl_jstr(r.json, "key"), key) != 0) {
		snprintf(why, whylen, "read: HTTP %ld %.300s", r.status, r.body);
		goto out;
	}
	tl_resp_free(&r);

	post_json(key, "/lease", json_pack("{s:s, s:I, s:i}", "lease_owner", owner, "version",
	                                   (json_int_t)version, "lease_seconds", 5), &r);
	if (r.status != 200 || !tl_jint(r.json, "version", &version)) {
		snprintf(why, whylen, "renew: HTTP %ld %.300s", r.status, r.body);
		goto out;
	}
	tl_resp_free(&r);

	post_json(key, "/transition", json_pack("{s:s, s:I, s:s, s:s}", "lease_owner", owner,
	                                        "version", (json_int_t)version, "to",
	                                        "failed_retryable", "error_class", "timeout"),
	          &r);
	if (r.status != 200) {
		snprintf(why, whylen, "transition: HTTP %ld %.300s", r.status, r.body);
		goto out;
	}
	tl_resp_free(&r);

	if (!claim_lease(key, 30, owner, &version, &r)) {
		snprintf(why, whylen, "reclaim: HTTP %ld %.300s", r.status, r.body);
		goto out;
	}
	tl_resp_free(&r);

	post_json(key, "/transition", json_pack("{s:s, s:I, s:s, s:{s:s}}", "lease_owner", owner,
	                                        "version", (json_int_t)version, "to",
	                                        "completed", "result", "done", key),
	          &r);
	if (r.status != 200) {
		snprintf(why, whylen, "complete: HTTP %ld %.300s", r.status, r.body);
		goto out;
	}
	ok = tl_pg_count(pg(),
	                 "SELECT count(*) FROM workflow_runs w JOIN api_clients c ON c.id ="
	                 " w.client_id WHERE c.name = 'dev' AND w.idempotency_key = $1"
	                 " AND w.state = 'completed' AND w.attempt = 2",
	                 1, (const char *const[]){ key }) == 1;
	if (!ok)
		snprintf(why, whylen, "the run is not completed at attempt 2 in the database");
out:
	tl_resp_free(&r);
	return ok;
}

START_TEST(test_keys_the_path_cannot_carry)
{
	static const char *const refused[] = {
		"../../x", "a/../b", "./x", "..", ".", "x/.", "x/..", "a/./b", "../", "/..",
		"tenant/../../../../etc/passwd", "🚚/📦/../🧾",
	};
	static const char *const carried[] = {
		"%2e%2e", "%2E%2E%2F%2E%2E%2Fx", "a?b#c", "100%", "back\\slash\\..\\x", " lead",
		"trail ", "a//b", "/x/", "...", ".x", "x.", "a b+c&d=e;f", "~user/$HOME/*",
		"acme:lead-sync:контакт/42:1.2.0", "顧客/注文#7", "عميل/طلب?1", "🚚/📦/..🧾",
		"'\"<>`{}|^[]",
	};
	char key[400], why[512], *before;
	size_t i;

	for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		struct tl_resp r;
		json_t *body;

		snprintf(key, sizeof(key), "%s", refused[i]);
		before = totals();
		body = json_pack("{s:s, s:{s:s}}", "key", key, "payload", "k", "v");
		tl_post_json("/v1/runs", g_key, body, &r);
		json_decref(body);
		expect_400(&r, "\"..\" as a part between slashes");
		ck_assert_msg(strcmp(tl_jstr(r.json, "error") ?: "", "invalid_key") == 0, "%s",
		              r.body);
		tl_resp_free(&r);
		expect_totals(before, key);
		free(before);
	}
	for (i = 0; i < sizeof(carried) / sizeof(carried[0]); i++) {
		snprintf(key, sizeof(key), "%s-%s", tl_run, carried[i]);
		ck_assert_msg(lifecycle(key, NULL, why, sizeof(why)), "key \"%s\" was accepted but %s",
		              key, why);
	}
}
END_TEST

/* One random character (UTF-8) from a mix of printable ASCII (heavy on
 * the characters URLs care about), Cyrillic, CJK, Arabic and emoji. */
static size_t
random_char(char *out, unsigned *seed)
{
	static const char url_chars[] = "./%?#&=+;: \\~'\"<>`{}|^[]@!$()*,";
	unsigned r = (unsigned)rand_r(seed) % 100, cp;

	if (r < 30) {
		out[0] = url_chars[(unsigned)rand_r(seed) % (sizeof(url_chars) - 1)];
		return 1;
	}
	if (r < 60) {
		out[0] = (char)(0x20 + (unsigned)rand_r(seed) % 95);
		return 1;
	}
	if (r < 72)
		cp = 0x410 + (unsigned)rand_r(seed) % 64;     /* Cyrillic */
	else if (r < 84)
		cp = 0x4E00 + (unsigned)rand_r(seed) % 2000;  /* CJK */
	else if (r < 92)
		cp = 0x627 + (unsigned)rand_r(seed) % 20;     /* Arabic */
	else
		cp = 0x1F600 + (unsigned)rand_r(seed) % 80;   /* emoji */
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | cp >> 12);
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | cp >> 18);
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

START_TEST(test_every_claimable_key_completes)
{
	static const char *const dots[] = { "/../..", "/..", "/.", "../../", "./", "../" };
	unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
	char key[1024], why[512];
	int i, accepted = 0, refused = 0;
	long status;

	fprintf(stderr, "check_hostile: property test seed %u\n", seed);
	for (i = 0; i < PROPERTY_KEYS; i++) {
		size_t n, chars, o, len;
		const char *d;

		/* a unique prefix keeps runs apart; one key in four has none, so
		 * that leading dots and slashes are tried too */
		o = (i % 4 == 0) ? 0 : (size_t)snprintf(key, sizeof(key), "%s%d~", tl_run, i);
		chars = 1 + (unsigned)rand_r(&seed) % (200 - 40);
		for (n = 0; n < chars; n++)
			o += random_char(key + o, &seed);
		key[o] = '\0';
		if (i % 4 == 0 && (unsigned)rand_r(&seed) % 2 == 0) {
			/* dot segments on purpose, at either end */
			d = dots[(unsigned)rand_r(&seed) % (sizeof(dots) / sizeof(dots[0]))];
			len = strlen(d);
			if (d[0] == '/') {
				memcpy(key + o, d, len + 1);
			} else {
				memmove(key + len, key, o + 1);
				memcpy(key, d, len);
			}
		}
		if (lifecycle(key, &status, why, sizeof(why))) {
			accepted++;
			continue;
		}
		if (status == 200)
			continue; /* a key without prefix repeated an earlier one */
		ck_assert_msg(status == 400, "key \"%s\" was accepted but %s", key, why);
		ck_assert_msg(strstr(why, "invalid_key") != NULL,
		              "key \"%s\" refused, but not as invalid_key: %s", key, why);
		refused++;
	}
	fprintf(stderr, "check_hostile: %d random keys accepted and carried to the end, %d "
	        "refused at claim\n", accepted, refused);
	ck_assert_msg(accepted > PROPERTY_KEYS / 2, "too few keys accepted (%d): the rule refuses "
	              "keys a path carries", accepted);
}
END_TEST

/* ---- the approval page of any accepted output ---------------------------- */

struct gated {
	char key[200];
	char token[64];
};

/* claim + an hostile_any output (text as written) → awaiting_human. */
static void
gate_output(const char *test, const char *output_text, const char *model_name, struct gated *g)
{
	struct tl_claimed c;
	struct tl_resp r;
	const char *url;
	char *body;
	json_t *a;

	tl_mkkey(g->key, sizeof(g->key), test);
	claim_ok(g->key, &c);
	body = output_body(&c, output_text, NULL, model_name);
	post_text(g->key, "/output", body, &r);
	free(body);
	ck_assert_msg(r.status == 202, "%s: expected 202 awaiting_human: HTTP %ld %.1000s", r.what,
	              r.status, r.body);
	a = json_array_get(json_object_get(r.json, "approvals"), 0);
	url = tl_jstr(a, "url");
	ck_assert_msg(url != NULL && strstr(url, "/approve/") != NULL, "no approval url: %.500s",
	              r.body);
	snprintf(g->token, sizeof(g->token), "%s", strstr(url, "/approve/") + 9);
	tl_resp_free(&r);
}

/* GET (form NULL) or POST the approval page as a support agent behind SSO. */
static double
page_request(const struct gated *g, const char *form, struct tl_resp *r)
{
	char path[128], origin[512];
	const char *h[6] = { "X-Dev-User: agent.petrova@example.com",
		             "X-Dev-Groups: staff,support,emea", NULL, NULL, NULL, NULL };
	double t0 = tl_now();

	snprintf(path, sizeof(path), "/approve/%s", g->token);
	if (form != NULL) {
		snprintf(origin, sizeof(origin), "Origin: %s", tl_env("ONCEGATE_URL"));
		h[2] = origin;
		h[3] = "Sec-Fetch-Site: same-origin";
	}
	tl_http_hdrs(form != NULL ? "POST" : "GET", path, h,
	             form != NULL ? "application/x-www-form-urlencoded" : NULL, form,
	             form != NULL ? strlen(form) : 0, r, NULL);
	return tl_now() - t0;
}

START_TEST(test_page_of_deep_output)
{
	struct gated g;
	struct tl_resp r;
	char marker[128], *out, *p;
	size_t cap = 64 * 1024, len = 0;
	int i;

	snprintf(marker, sizeof(marker), "deepest-%s-Глубина-最深-🐚", tl_run);
	out = malloc(cap);
	ck_assert_ptr_nonnull(out);
	for (i = 0; i < DEEP_LEVELS; i++)
		len += (size_t)snprintf(out + len, cap - len, "{\"level %d\":", i);
	len += (size_t)snprintf(out + len, cap - len, "[\"%s\"", marker);
	for (i = 0; i < DEEP_ITEMS; i++)
		len += (size_t)snprintf(out + len, cap - len, ",%d", i % 10);
	len += (size_t)snprintf(out + len, cap - len, "]");
	for (i = 0; i < DEEP_LEVELS; i++)
		out[len++] = '}';
	out[len] = '\0';
	ck_assert_msg(len > 36000 && len < cap, "the deep output is %zu bytes", len);
	gate_output("page-deep", out, NULL, &g);
	free(out);
	page_request(&g, NULL, &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(strstr(r.body, marker) != NULL, "the deepest value is not on the page");
	p = strstr(r.body, "level 57");
	ck_assert_msg(p != NULL, "the deepest level's name is not on the page");
	ck_assert_msg(strstr(r.body, "name=\"decision\"") != NULL || strstr(r.body, "Approve") != NULL,
	              "the page has no decision buttons");
	tl_resp_free(&r);
}
END_TEST

START_TEST(test_page_of_wide_output)
{
	struct gated g;
	struct tl_resp r;
	size_t cap = 400 * 1024, len = 0;
	char *out, last[64];
	double took;
	int i;

	out = malloc(cap);
	ck_assert_ptr_nonnull(out);
	out[len++] = '{';
	for (i = 1; i <= WIDE_FIELDS; i++)
		len += (size_t)snprintf(out + len, cap - len, "%s\"f%d\":%d", i > 1 ? "," : "", i,
		                        i % 7);
	out[len++] = '}';
	out[len] = '\0';
	gate_output("page-wide", out, NULL, &g);
	free(out);
	took = page_request(&g, NULL, &r);
	fprintf(stderr, "check_hostile: the approval page of %d fields took %.3f s\n", WIDE_FIELDS,
	        took);
	ASSERT_STATUS(&r, 200);
	snprintf(last, sizeof(last), "f%d", WIDE_FIELDS);
	ck_assert_msg(strstr(r.body, last) != NULL, "the last field is not on the page");
	ck_assert_msg(took < PAGE_TIME_MAX_S, "the page of %d fields took %.2f s (limit %.1f s)",
	              WIDE_FIELDS, took, PAGE_TIME_MAX_S);
	tl_resp_free(&r);
}
END_TEST

/* An output near the body cap made of what HTML must escape (& < >): the
 * page is several times the body, and still renders. */
START_TEST(test_page_of_escaped_output)
{
	struct gated g;
	struct tl_resp r;
	size_t n = 200 * 1024, i, len;
	char *out;

	out = malloc(n + 64);
	ck_assert_ptr_nonnull(out);
	len = (size_t)snprintf(out, 64, "{\"html\":\"");
	for (i = 0; i < n; i++)
		out[len++] = "&<>"[i % 3];
	memcpy(out + len, "\"}", 3);
	gate_output("page-escaped", out, NULL, &g);
	free(out);
	page_request(&g, NULL, &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(strstr(r.body, "&amp;&lt;&gt;&amp;&lt;&gt;") != NULL,
	              "the escaped output is not on the page");
	ck_assert_msg(strstr(r.body, "name=\"csrf\"") != NULL, "the page has no form");
	tl_resp_free(&r);
}
END_TEST

/* ---- the approval reason ------------------------------------------------ */

START_TEST(test_reason_not_utf8)
{
	struct gated g;
	struct tl_resp r;
	char *csrf, *form, *before, *snap, *v, *e;

	gate_output("reason-utf8", "{\"tag\":\"lead\",\"why\":\"Клиент просит скидку\"}", NULL, &g);
	page_request(&g, NULL, &r);
	ASSERT_STATUS(&r, 200);
	v = strstr(r.body, "name=\"csrf\"");
	ck_assert_msg(v != NULL && (v = strstr(v, "value=\"")) != NULL, "no csrf on the page");
	v += 7;
	e = strchr(v, '"');
	ck_assert_ptr_nonnull(e);
	csrf = strndup(v, (size_t)(e - v));
	tl_resp_free(&r);
	before = totals();
	snap = tl_run_snapshot(pg(), g.key);
	/* "Отказ" in Windows-1251, as a mis-set browser or script sends it */
	if (asprintf(&form, "decision=reject&csrf=%s&reason=%%CE%%F2%%EA%%E0%%E7+%%FF%%FE", csrf) < 0)
		ck_abort_msg("out of memory");
	page_request(&g, form, &r);
	ASSERT_STATUS(&r, 400);
	ck_assert_msg(strstr(r.body, "not valid UTF-8") != NULL,
	              "the page does not say the reason is not UTF-8: %.2000s", r.body);
	ck_assert_msg(strstr(r.body, "already decided") == NULL, "%.2000s", r.body);
	tl_resp_free(&r);
	tl_expect_run_unchanged(pg(), g.key, snap, "a reason that is not UTF-8");
	expect_totals(before, "a reason that is not UTF-8");
	/* the link still works: the same decision with a good reason */
	free(form);
	if (asprintf(&form, "decision=reject&csrf=%s&reason=%%D0%%9E%%D1%%82%%D0%%BA%%D0%%B0%%D0%%B7",
	             csrf) < 0)
		ck_abort_msg("out of memory");
	page_request(&g, form, &r);
	ck_assert_msg(r.status == 303 || r.status == 200, "the good reason: HTTP %ld %.1000s",
	              r.status, r.body);
	tl_resp_free(&r);
	ck_assert_int_eq(tl_pg_count(pg(),
	                             "SELECT count(*) FROM approvals WHERE idempotency_key = $1"
	                             " AND decision = 'reject' AND reason = 'Отказ'",
	                             1, (const char *const[]){ g.key }),
	                 1);
	free(form);
	free(csrf);
	free(snap);
	free(before);
}
END_TEST

/* ---- oncegatectl -------------------------------------------------------- */

/* oncegatectl with stdout and stderr together; exit status in *rc. */
static char *
ctl_all(int *rc, const char *args)
{
	char *cmd, *out;

	if (asprintf(&cmd, "'%s' -c '%s' %s 2>&1; echo \"exit=$?\"", tl_env("ONCEGATE_CTL"),
	             tl_env("ONCEGATE_CONF"), args) < 0)
		ck_abort_msg("out of memory");
	out = tl_shell_output(cmd);
	free(cmd);
	ck_assert_ptr_nonnull(out);
	*rc = strstr(out, "exit=") != NULL ? atoi(strrchr(out, '=') + 1) : -1;
	return out;
}

START_TEST(test_explain_escapes_control_characters)
{
	struct gated g;
	char *out = NULL;
	json_t *doc;
	int rc;

	/* ESC [2J clears the screen, BEL rings, U+202E reverses what follows */
	gate_output("explain-ctl", "{\"tag\":\"lead\"}",
	            "qwen\\u001b[2J\\u0007\\u202egnp.exe\\u009b31m", &g);
	rc = tl_ctl(&out, "explain", g.key, (char *)NULL);
	ck_assert_msg(rc == 0 && out != NULL, "explain: exit %d", rc);
	ck_assert_msg(strchr(out, 0x1b) == NULL && strchr(out, 0x07) == NULL &&
	              strstr(out, "\xe2\x80\xae") == NULL && strstr(out, "\xc2\x9b") == NULL,
	              "explain printed control characters raw: %s", out);
	ck_assert_msg(strstr(out, "qwen\\x1b[2J\\x07\\u202egnp.exe\\u009b31m") != NULL,
	              "explain does not show the model name escaped: %s", out);
	free(out);
	out = NULL;
	rc = tl_ctl(&out, "--json", "explain", g.key, (char *)NULL);
	ck_assert_msg(rc == 0 && out != NULL, "explain --json: exit %d", rc);
	doc = json_loads(out, 0, NULL);
	ck_assert_msg(doc != NULL, "explain --json is not JSON: %s", out);
	ck_assert_msg(tl_contains_ci(out, "\\u001b[2J") && strchr(out, 0x1b) == NULL,
	              "explain --json must escape ESC the JSON way: %s", out);
	json_decref(doc);
	free(out);
}
END_TEST

START_TEST(test_client_changes_need_a_reason)
{
	char name[96], *out, *before, *after;
	int rc;
	long off;
	json_t *lines;
	const char *p[1];

	snprintf(name, sizeof(name), "%s-tenant", tl_run);
	p[0] = name;
	before = totals();
	out = ctl_all(&rc, name[0] ? "client add hostile-no-reason" : "");
	ck_assert_msg(rc == 2 && strstr(out, "--reason") != NULL,
	              "client add without --reason: exit %d: %s", rc, out);
	free(out);
	out = ctl_all(&rc, "client revoke dev");
	ck_assert_msg(rc == 2 && strstr(out, "--reason") != NULL,
	              "client revoke without --reason: exit %d: %s", rc, out);
	free(out);
	out = ctl_all(&rc, "sends stop");
	ck_assert_msg(rc == 2 && strstr(out, "--reason") != NULL,
	              "sends stop without --reason: exit %d: %s", rc, out);
	free(out);
	expect_totals(before, "client and kill-switch changes without a reason");
	ck_assert_int_eq(tl_pg_count(pg(), "SELECT count(*) FROM api_clients WHERE revoked_at IS"
	                             " NULL AND name = 'dev'", 0, NULL), 1);
	free(before);

	/* with a reason: the change, its operator_actions row, a log line */
	off = tl_log_offset();
	rc = tl_ctl(&out, "client", "add", name, "--reason",
	            "новый арендатор: CRM-Sync für Mandant 7", (char *)NULL);
	ck_assert_msg(rc == 0 && out != NULL && strncmp(out, "og_", 3) == 0, "client add: %d", rc);
	free(out);
	/* recorded under oncegatectl's session role */
	ck_assert_int_eq(tl_pg_count(pg(),
	                             "SELECT count(*) FROM operator_actions o JOIN api_clients c"
	                             " ON c.id = o.client_id WHERE c.name = $1"
	                             " AND o.action = 'client.add' AND o.operator = $2"
	                             " AND o.reason = 'новый арендатор: CRM-Sync für Mandant 7'",
	                             2, (const char *const[]){ name, tl_ctl_role() }), 1);
	rc = tl_ctl(&out, "client", "revoke", name, "--reason",
	            "tenant left", (char *)NULL);
	ck_assert_int_eq(rc, 0);
	free(out);
	ck_assert_int_eq(tl_pg_count(pg(),
	                             "SELECT count(*) FROM operator_actions o JOIN api_clients c"
	                             " ON c.id = o.client_id WHERE c.name = $1"
	                             " AND o.action = 'client.revoke' AND o.reason = 'tenant left'"
	                             " AND c.revoked_at IS NOT NULL",
	                             1, p), 1);
	lines = tl_log_collect(off, NULL, NULL, 2);
	ck_assert_msg(tl_log_count_event(lines, "client.added") == 1 &&
	              tl_log_count_event(lines, "client.revoked") == 1,
	              "expected client.added and client.revoked log lines");
	{
		json_t *l = tl_log_find_event(lines, "client.revoked");

		ck_assert_msg(strcmp(tl_jstr(l, "client") ?: "", name) == 0 &&
		              strcmp(tl_jstr(l, "reason") ?: "", "tenant left") == 0 &&
		              strcmp(tl_jstr(l, "actor") ?: "", tl_ctl_role()) == 0,
		              "client.revoked line lacks client, reason or actor");
	}
	json_decref(lines);

	/* the kill switch, set to what it is (nothing starts sending) */
	after = tl_pg_value(pg(), "SELECT actions_enabled::text FROM dispatch_control", 0, NULL);
	ck_assert_ptr_nonnull(after);
	rc = tl_ctl(&out, "sends", after[0] == 't' ? "resume" : "stop", "--reason",
	            "check_hostile: recorded like every change", (char *)NULL);
	ck_assert_int_eq(rc, 0);
	free(out);
	ck_assert_int_eq(tl_pg_count(pg(),
	                             "SELECT count(*) FROM operator_actions WHERE action LIKE"
	                             " 'sends.%' AND operator = $1 AND reason ="
	                             " 'check_hostile: recorded like every change'",
	                             1, (const char *const[]){ tl_ctl_role() }), 1);
	free(after);
}
END_TEST

/* A replay's new key is a claimed key too: the same rule. */
START_TEST(test_replay_new_key_the_path_cannot_carry)
{
	char key[160], args[512], *out, *before;
	struct tl_claimed c;
	int rc;

	tl_mkkey(key, sizeof(key), "replay-dots");
	claim_ok(key, &c);
	before = totals();
	snprintf(args, sizeof(args), "replay '%s' --new-key '%s/../../x' --reason 'fix the tag'",
	         key, tl_run);
	out = ctl_all(&rc, args);
	ck_assert_msg(rc == 2 && strstr(out, "\"..\" as a part between slashes") != NULL,
	              "replay to a dot-segment key: exit %d: %s", rc, out);
	free(out);
	expect_totals(before, "a replay to a key the path cannot carry");
	free(before);
}
END_TEST

TL_SUITE(hostile_suite, "hostile",
         {"input", 600,
          .tests = TL_LIST(test_numbers_out_of_range_claim, test_numbers_out_of_range_everywhere,
                           test_truncated_emoji_and_other_json_problems,
                           test_keys_the_path_cannot_carry, test_every_claimable_key_completes,
                           test_page_of_deep_output, test_page_of_wide_output,
                           test_page_of_escaped_output, test_reason_not_utf8,
                           test_explain_escapes_control_characters,
                           test_client_changes_need_a_reason,
                           test_replay_new_key_the_path_cannot_carry)})

static bool
prepare(void)
{
	g_key = tl_env("ONCEGATE_API_KEY");
	return true;
}

static void
finish(void)
{
	if (g_pg != NULL)
		PQfinish(g_pg);
}

/* one process (nofork): the tests share one database connection */
TL_STACK_MAIN(.name = "check_hostile", .prefix = "hx",
              .needed = "ONCEGATE_API_KEY ONCEGATE_CTL ONCEGATE_CONF ONCEGATE_LOG",
              .suite = hostile_suite, .prepare = prepare, .finish = finish, .nofork = true)

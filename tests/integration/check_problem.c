/*
 * check_problem.c — the API by the standards its users already know:
 * RFC 9457 problem documents for every error, the Idempotency-Key request
 * header of the IETF draft, Location on 201, WWW-Authenticate on 401,
 * Retry-After on 429, and the OpenAPI document at GET /v1/openapi.json.
 *
 * The first test case needs nothing running (the header's syntax, through
 * the library's parser); the others drive the real stack through nginx
 * and skip (exit 77) without it. They assert what a client sees: status,
 * headers, the members of the body, and the rows that did (not) change.
 * Data looks like production: two API clients (tenants) sharing business
 * keys, keys in Cyrillic and with emoji.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "http.h"
#include "testlib.h"

#define TYPE_BASE "https://oncegate.dev/problems/"

static bool g_stack;
static char g_client_a[96], g_client_b[96];
static char *g_key_a, *g_key_b;

/* ---- the header's syntax (no stack) -------------------------------------- */

static const struct idem_case {
	const char *name;
	const char *value;
	const char *key; /* NULL: refused */
	const char *says; /* what the refusal says */
} idem_cases[] = {
	{ "the draft's own example", "\"8e03978e-40d5-43e8-bc93-6894a57f9324\"",
	  "8e03978e-40d5-43e8-bc93-6894a57f9324", NULL },
	{ "quoted, spaces around", "  \"acme:lead-sync:lead-42:v1\"\t", "acme:lead-sync:lead-42:v1",
	  NULL },
	{ "quoted with escapes", "\"say \\\"hi\\\" \\\\ bye\"", "say \"hi\" \\ bye", NULL },
	{ "Display String, Cyrillic and emoji",
	  "%\"%d0%b7%d0%b0%d0%ba%d0%b0%d0%b7 %e2%84%96 42 %f0%9f%93%a6 %25 %22\"",
	  "заказ № 42 📦 % \"", NULL },
	{ "bare, as most clients send it", "acme:lead-sync:lead-42:v1", "acme:lead-sync:lead-42:v1",
	  NULL },
	{ "bare UTF-8 (curl -H)", "заказ-42", "заказ-42", NULL },
	{ "unterminated", "\"abc", NULL, "closing quote" },
	{ "bad escape", "\"a\\x\"", NULL, "backslash" },
	{ "non-ASCII inside quotes", "\"ключ\"", NULL, "Display String" },
	{ "parameters", "\"abc\";v=1", NULL, "no parameters" },
	{ "two joined by a comma", "\"a\", \"b\"", NULL, "more than one" },
	{ "junk after the string", "\"abc\" x", NULL, "nothing may follow" },
	{ "uppercase hex in a Display String", "%\"%D0%B7\"", NULL, "lowercase" },
	{ "short escape in a Display String", "%\"%d\"", NULL, "lowercase" },
	{ "bare with a comma", "a,b", NULL, "comma" },
	{ "bare with a quote", "a\"b", NULL, "quoted" },
	{ "empty", "   ", NULL, "empty" },
	{ "control character", "a\x01" "b", NULL, "control" },
};

START_TEST(test_idem_syntax)
{
	const struct idem_case *t = &idem_cases[_i];
	char out[801];
	const char *problem = NULL;
	long n = http_idempotency_key(t->value, out, sizeof(out), &problem);

	if (t->key != NULL) {
		ck_assert_msg(n >= 0, "%s: refused: %s", t->name, problem ? problem : "?");
		ck_assert_msg((size_t)n == strlen(t->key) && strcmp(out, t->key) == 0,
		              "%s: key \"%s\", expected \"%s\"", t->name, out, t->key);
	} else {
		ck_assert_msg(n < 0, "%s: accepted as \"%s\"", t->name, out);
		ck_assert_msg(problem != NULL && tl_contains_ci(problem, t->says),
		              "%s: the refusal \"%s\" does not say \"%s\"", t->name,
		              problem ? problem : "(none)", t->says);
	}
}
END_TEST

/* ---- helpers --------------------------------------------------------------- */

static void
need_stack(void)
{
	if (!g_stack)
		ck_abort_msg("internal: an integration test ran without the stack");
}

/* A POST /v1/runs with extra request headers (NULL-terminated; may hold
 * Idempotency-Key) and the answer's header block in *hdrs. */
static void
claim_h(const char *bearer, const json_t *body, const char *const *extra, struct tl_resp *r,
        char **hdrs)
{
	const char *h[8];
	char auth[256];
	char *text = json_dumps(body, JSON_COMPACT);
	size_t n = 0;

	if (bearer != NULL) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", bearer);
		h[n++] = auth;
	}
	for (; extra != NULL && *extra != NULL && n < 7; extra++)
		h[n++] = *extra;
	h[n] = NULL;
	ck_assert_ptr_nonnull(text);
	tl_http_hdrs("POST", "/v1/runs", h, "application/json", text, strlen(text), r, hdrs);
	free(text);
}

/* The answer is a problem document of this status and code: the media
 * type, type, title, status, detail, the stable error code and message
 * (the alias of detail). */
static void
expect_problem(const struct tl_resp *r, long status, const char *code)
{
	char type[128];
	long long st = 0;

	ASSERT_STATUS(r, status);
	ck_assert_msg(strncmp(r->content_type, "application/problem+json", 24) == 0,
	              "%s: Content-Type \"%s\"", r->what, r->content_type);
	ck_assert_msg(json_is_object(r->json), "%s: not a JSON object: %.500s", r->what, r->body);
	snprintf(type, sizeof(type), TYPE_BASE "%s", code);
	ck_assert_msg(tl_jstr(r->json, "type") && strcmp(tl_jstr(r->json, "type"), type) == 0,
	              "%s: type is not %s: %.1000s", r->what, type, r->body);
	ck_assert_msg(tl_jint(r->json, "status", &st) && st == status, "%s: status member: %.500s",
	              r->what, r->body);
	ck_assert_msg(tl_jstr(r->json, "title") && tl_jstr(r->json, "title")[0] != '\0',
	              "%s: no title: %.500s", r->what, r->body);
	ck_assert_msg(tl_jstr(r->json, "detail") && tl_jstr(r->json, "detail")[0] != '\0',
	              "%s: no detail: %.500s", r->what, r->body);
	ck_assert_msg(tl_jstr(r->json, "error") && strcmp(tl_jstr(r->json, "error"), code) == 0,
	              "%s: error is not %s: %.500s", r->what, code, r->body);
	ck_assert_msg(tl_jstr(r->json, "message") &&
	              strcmp(tl_jstr(r->json, "message"), tl_jstr(r->json, "detail")) == 0,
	              "%s: message is not detail: %.500s", r->what, r->body);
}

static char *
run_url(const char *key)
{
	return tl_run_path(key, NULL);
}

/* A 201 for key, whose Location is the run's URL (ASCII only); frees the
 * answer and its header block. */
static void
expect_created(struct tl_resp *r, char *hdrs, const char *key)
{
	char *url = run_url(key), *loc = tl_header_get(hdrs, "Location");
	const unsigned char *p;

	ASSERT_STATUS(r, 201);
	ck_assert_msg(strncmp(r->content_type, "application/json", 16) == 0, "201: Content-Type %s",
	              r->content_type);
	ck_assert_str_eq(tl_jstr(r->json, "key") ?: "", key);
	ck_assert_msg(loc != NULL && strcmp(loc, url) == 0, "Location %s, expected %s",
	              loc ? loc : "(absent)", url);
	for (p = (const unsigned char *)loc; *p != '\0'; p++)
		ck_assert_msg(*p > 0x20 && *p < 0x7f, "Location holds a raw byte 0x%02x", *p);
	free(loc);
	free(url);
	free(hdrs);
	tl_resp_free(r);
}

/* Tenant a claims key (in the body, with the extra headers h) again: a
 * duplicate of the run it has. */
static void
expect_duplicate(const char *key, json_t *payload, const char *const *h)
{
	json_t *body = json_pack("{s:s, s:O}", "key", key, "payload", payload);
	struct tl_resp r;

	claim_h(g_key_a, body, h, &r, NULL);
	ASSERT_STATUS(&r, 200);
	ck_assert_str_eq(tl_jstr(r.json, "outcome") ?: "", "duplicate");
	ck_assert_str_eq(tl_jstr(r.json, "key") ?: "", key);
	tl_resp_free(&r);
	json_decref(body);
}

static long long
rows_with_prefix(PGconn *c, const char *prefix)
{
	return qnum(c, "SELECT count(*) FROM workflow_runs WHERE starts_with(idempotency_key, $1)",
	            prefix, (char *)NULL);
}

/* %"..." of a UTF-8 key (RFC 9651 Display String, lowercase hex). */
static char *
display_string(const char *key)
{
	static const char hex[] = "0123456789abcdef";
	char *out = malloc(strlen(key) * 3 + 4), *p = out;

	ck_assert_ptr_nonnull(out);
	*p++ = '%';
	*p++ = '"';
	for (; *key != '\0'; key++) {
		unsigned char c = (unsigned char)*key;

		if (c < 0x20 || c > 0x7e || c == '%' || c == '"') {
			*p++ = '%';
			*p++ = hex[c >> 4];
			*p++ = hex[c & 15];
		} else {
			*p++ = (char)c;
		}
	}
	*p++ = '"';
	*p = '\0';
	return out;
}

/* ---- 401 ---------------------------------------------------------------- */

START_TEST(test_unauthorized)
{
	json_t *body = json_pack("{s:s, s:{s:s}}", "key", "acme:lead-sync:lead-42:v1", "payload",
	                         "lead", "42");
	struct tl_resp r;
	char *hdrs, *wa, client[128], *key;

	need_stack();
	/* no credentials at all: the challenge, without an error code */
	claim_h(NULL, body, NULL, &r, &hdrs);
	expect_problem(&r, 401, "unauthorized");
	wa = tl_header_get(hdrs, "WWW-Authenticate");
	ck_assert_msg(wa != NULL && strcmp(wa, "Bearer realm=\"oncegate\"") == 0,
	              "401 without credentials: WWW-Authenticate %s", wa ? wa : "(absent)");
	ck_assert_msg(json_object_get(r.json, "instance") == NULL, "401 names a run: %s", r.body);
	free(wa);
	free(hdrs);
	tl_resp_free(&r);

	/* a revoked key: invalid_token, as RFC 6750 says */
	tl_mkkey(client, sizeof(client), "revoked");
	key = tl_client_add(client);
	ck_assert_ptr_nonnull(key);
	ck_assert_int_eq(tl_client_revoke(client), 0);
	claim_h(key, body, NULL, &r, &hdrs);
	expect_problem(&r, 401, "unauthorized");
	wa = tl_header_get(hdrs, "WWW-Authenticate");
	ck_assert_msg(wa != NULL && strstr(wa, "Bearer realm=\"oncegate\"") == wa &&
	              strstr(wa, "error=\"invalid_token\"") != NULL,
	              "401 for a revoked key: WWW-Authenticate %s", wa ? wa : "(absent)");
	ck_assert_msg(strstr(r.body, key) == NULL, "the answer echoes the key: %s", r.body);
	free(wa);
	free(hdrs);
	free(key);
	tl_resp_free(&r);
	json_decref(body);
}
END_TEST

/* ---- 201 + Location, keys beyond ASCII ----------------------------------- */

START_TEST(test_created_location)
{
	static const char *const shared[] = { "order №4821-77 · возврат",
		                              "family-plan 👨‍👩‍👧‍👦 🇺🇦" };
	char prefix[96];
	size_t i;

	need_stack();
	tl_mkkey(prefix, sizeof(prefix), "loc ");
	for (i = 0; i < 2; i++) {
		char *key = tl_corpus_key(prefix, shared[i], 200), *url = run_url(key), *hdrs, *loc;
		json_t *body = json_pack("{s:s, s:{s:s}}", "key", key, "payload", "ticket", shared[i]);
		struct tl_resp r;

		claim_h(g_key_a, body, NULL, &r, &hdrs);
		expect_created(&r, hdrs, key);
		/* the Location is the run */
		tl_get(url, g_key_a, &r);
		ASSERT_STATUS(&r, 200);
		ck_assert_msg(tl_jstr(r.json, "key") && strcmp(tl_jstr(r.json, "key"), key) == 0,
		              "GET Location: key %s, expected %s", tl_jstr(r.json, "key"), key);
		tl_resp_free(&r);
		/* a duplicate is not created: no Location */
		claim_h(g_key_a, body, NULL, &r, &hdrs);
		ASSERT_STATUS(&r, 200);
		loc = tl_header_get(hdrs, "Location");
		ck_assert_msg(loc == NULL, "a duplicate carries Location %s", loc);
		tl_resp_free(&r);
		free(hdrs);
		json_decref(body);
		free(key);
		free(url);
	}
}
END_TEST

/* ---- 422 payload_mismatch, two tenants sharing a key ---------------------- */

START_TEST(test_mismatch_two_tenants)
{
	char prefix[96], *key, *url, *before_a, *before_b, *after;
	const char *hash1, *hash2;
	json_t *p1, *p2, *body;
	struct tl_resp ra, rb, r;
	PGconn *c = tl_pg_connect();
	char *h1 = NULL, *h2 = NULL;

	need_stack();
	tl_mkkey(prefix, sizeof(prefix), "mm ");
	key = tl_corpus_key(prefix, "order №4821-77 · возврат", 200);
	url = run_url(key);
	p1 = json_pack("{s:s, s:s, s:s}", "order", "№4821-77", "amount", "19.90", "note",
	               "Возврат: коробка пришла вскрытой 📦");
	p2 = json_pack("{s:s, s:s, s:s}", "order", "№4821-77", "amount", "21.40", "note",
	               "Возврат: коробка пришла вскрытой 📦");

	body = json_pack("{s:s, s:O}", "key", key, "payload", p1);
	claim_h(g_key_a, body, NULL, &ra, NULL);
	json_decref(body);
	ASSERT_STATUS(&ra, 201);
	/* the other tenant's same key is its own run: claimed, not a mismatch */
	body = json_pack("{s:s, s:O}", "key", key, "payload", p2);
	claim_h(g_key_b, body, NULL, &rb, NULL);
	json_decref(body);
	ASSERT_STATUS(&rb, 201);
	hash1 = tl_jstr(ra.json, "payload_hash");
	hash2 = tl_jstr(rb.json, "payload_hash");
	ck_assert_msg(hash1 && hash2 && strcmp(hash1, hash2) != 0, "hashes %s %s", hash1, hash2);
	h1 = strdup(hash1);
	h2 = strdup(hash2);
	tl_resp_free(&ra);
	tl_resp_free(&rb);
	before_a = tl_run_row(c, g_client_a, key);
	before_b = tl_run_row(c, g_client_b, key);

	/* tenant a sends b's payload under its key: 422, nothing changes */
	body = json_pack("{s:s, s:O}", "key", key, "payload", p2);
	claim_h(g_key_a, body, NULL, &r, NULL);
	json_decref(body);
	expect_problem(&r, 422, "payload_mismatch");
	ck_assert_str_eq(tl_jstr(r.json, "key") ?: "", key);
	ck_assert_str_eq(tl_jstr(r.json, "payload_hash") ?: "", h2);
	ck_assert_str_eq(tl_jstr(r.json, "stored_payload_hash") ?: "", h1);
	ck_assert_msg(tl_jstr(r.json, "instance") && strcmp(tl_jstr(r.json, "instance"), url) == 0,
	              "instance %s, expected %s", tl_jstr(r.json, "instance"), url);
	ck_assert_msg(tl_jstr(r.json, "request_id") && strlen(tl_jstr(r.json, "request_id")) == 32,
	              "no nginx request_id: %s", r.body);
	tl_resp_free(&r);
	after = tl_run_row(c, g_client_a, key);
	ck_assert_str_eq(after, before_a);
	free(after);
	after = tl_run_row(c, g_client_b, key);
	ck_assert_str_eq(after, before_b);
	free(after);

	/* and b, retrying its own payload, sees its own run as a duplicate */
	body = json_pack("{s:s, s:O}", "key", key, "payload", p2);
	claim_h(g_key_b, body, NULL, &r, NULL);
	json_decref(body);
	ASSERT_STATUS(&r, 200);
	ck_assert_str_eq(tl_jstr(r.json, "outcome") ?: "", "duplicate");
	tl_resp_free(&r);

	free(before_a);
	free(before_b);
	free(h1);
	free(h2);
	json_decref(p1);
	json_decref(p2);
	free(key);
	free(url);
	PQfinish(c);
}
END_TEST

/* ---- the Idempotency-Key header ------------------------------------------- */

START_TEST(test_idempotency_key_header)
{
	char prefix[96], quoted[300], hdr[3000], bare[200], *ru, *ds, *hdrs;
	const char *h[3] = { hdr, NULL, NULL };
	json_t *payload = json_pack("{s:s, s:i}", "ticket", "Добрый день! Заказ № 4821-77", "n", 1);
	json_t *only_payload = json_pack("{s:O}", "payload", payload);
	json_t *body;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();
	long long rows;

	need_stack();
	/* the draft's form: a quoted string, the key in no body member */
	tl_mkkey(prefix, sizeof(prefix), "idem");
	snprintf(quoted, sizeof(quoted), "%s:acme:lead-sync:lead-42:v1", prefix);
	snprintf(hdr, sizeof(hdr), "Idempotency-Key: \"%s\"", quoted);
	claim_h(g_key_a, only_payload, h, &r, &hdrs);
	expect_created(&r, hdrs, quoted);
	/* the same key in the body and the header: the same run */
	expect_duplicate(quoted, payload, h);

	/* beyond ASCII: a Display String, and the body's key names the same run */
	ru = tl_corpus_key(prefix, " заказ №4821-77 · возврат 📦", 200);
	ds = display_string(ru);
	snprintf(hdr, sizeof(hdr), "Idempotency-Key: %s", ds);
	claim_h(g_key_a, only_payload, h, &r, &hdrs);
	expect_created(&r, hdrs, ru);
	expect_duplicate(ru, payload, NULL);
	/* the other tenant's same header is its own run */
	claim_h(g_key_b, only_payload, h, &r, NULL);
	ASSERT_STATUS(&r, 201);
	tl_resp_free(&r);

	/* bare, as most clients send it; then quoted: the same run */
	snprintf(bare, sizeof(bare), "%s:bare:order-4821-77", prefix);
	snprintf(hdr, sizeof(hdr), "Idempotency-Key: %s", bare);
	claim_h(g_key_a, only_payload, h, &r, NULL);
	ASSERT_STATUS(&r, 201);
	tl_resp_free(&r);
	snprintf(hdr, sizeof(hdr), "Idempotency-Key: \"%s\"", bare);
	claim_h(g_key_a, only_payload, h, &r, NULL);
	ASSERT_STATUS(&r, 200);
	tl_resp_free(&r);

	/* refusals: 400, field Idempotency-Key, nothing claimed */
	rows = rows_with_prefix(c, prefix);
	{
		/* the header's value, the problem's code */
		static const struct tl_given bad[] = {
			{ "\"unterminated", "invalid_idempotency_key" },
			{ "\"ключ\"", "invalid_idempotency_key" },
			{ "%\"%D0%B7\"", "invalid_idempotency_key" },
			{ "\"a\";v=1", "invalid_idempotency_key" },
			{ "x,y", "invalid_idempotency_key" },
		};
		size_t i;

		for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			snprintf(hdr, sizeof(hdr), "Idempotency-Key: %s", bad[i].given);
			claim_h(g_key_a, only_payload, h, &r, NULL);
			expect_problem(&r, 400, bad[i].want);
			ck_assert_str_eq(tl_jstr(r.json, "field") ?: "", "Idempotency-Key");
			tl_resp_free(&r);
		}
	}
	/* two fields */
	snprintf(hdr, sizeof(hdr), "Idempotency-Key: \"%s:one\"", prefix);
	{
		char second[300];

		snprintf(second, sizeof(second), "Idempotency-Key: \"%s:two\"", prefix);
		h[1] = second;
		claim_h(g_key_a, only_payload, h, &r, NULL);
		h[1] = NULL;
	}
	expect_problem(&r, 400, "invalid_idempotency_key");
	ck_assert_msg(tl_contains_ci(tl_jstr(r.json, "detail"), "more than one"), "%s", r.body);
	tl_resp_free(&r);
	/* header and body disagree */
	snprintf(hdr, sizeof(hdr), "Idempotency-Key: \"%s:header\"", prefix);
	body = json_pack("{s:s, s:O}", "key", ru, "payload", payload);
	claim_h(g_key_a, body, h, &r, NULL);
	json_decref(body);
	expect_problem(&r, 400, "key_mismatch");
	ck_assert_str_eq(tl_jstr(r.json, "field") ?: "", "Idempotency-Key");
	tl_resp_free(&r);
	/* neither */
	claim_h(g_key_a, only_payload, NULL, &r, NULL);
	expect_problem(&r, 400, "invalid_key");
	ck_assert_msg(tl_contains_ci(tl_jstr(r.json, "detail"), "Idempotency-Key"), "%s", r.body);
	tl_resp_free(&r);
	ck_assert_int_eq(rows_with_prefix(c, prefix), rows);

	free(ru);
	free(ds);
	json_decref(only_payload);
	json_decref(payload);
	PQfinish(c);
}
END_TEST

/* ---- 409 with instance; 404, 405 ------------------------------------------ */

START_TEST(test_run_problems)
{
	char prefix[96], *key, *url, *path, body[256];
	json_t *claim;
	struct tl_resp r;
	char *hdrs, *allow;

	need_stack();
	tl_mkkey(prefix, sizeof(prefix), "lost ");
	key = tl_corpus_key(prefix, "订单CN-2026-0088431/退款", 200);
	url = run_url(key);
	claim = json_pack("{s:s, s:{s:s}}", "key", key, "payload", "refund", "CN-2026-0088431");
	claim_h(g_key_a, claim, NULL, &r, NULL);
	ASSERT_STATUS(&r, 201);
	snprintf(body, sizeof(body),
	         "{\"lease_owner\":\"%s\",\"version\":99,\"to\":\"completed\"}",
	         tl_jstr(r.json, "lease_owner"));
	tl_resp_free(&r);
	path = tl_run_path(key, "/transition");
	tl_post_text(path, g_key_a, body, &r);
	expect_problem(&r, 409, "lease_lost");
	ck_assert_msg(tl_jstr(r.json, "instance") && strcmp(tl_jstr(r.json, "instance"), url) == 0,
	              "instance %s, expected %s", tl_jstr(r.json, "instance"), url);
	tl_resp_free(&r);
	free(path);
	/* the other tenant's view of the same key: a run that does not exist */
	tl_get(url, g_key_b, &r);
	expect_problem(&r, 404, "run_not_found");
	tl_resp_free(&r);

	/* 405 names the methods, 404 for a route nobody has */
	tl_http_hdrs("PUT", "/v1/runs", NULL, NULL, NULL, 0, &r, &hdrs);
	expect_problem(&r, 405, "method_not_allowed");
	allow = tl_header_get(hdrs, "Allow");
	ck_assert_msg(allow && strcmp(allow, "GET, HEAD, POST") == 0, "Allow %s",
	              allow ? allow : "(absent)");
	free(allow);
	free(hdrs);
	tl_resp_free(&r);
	tl_get("/v1/nothing-here", g_key_a, &r);
	expect_problem(&r, 404, "not_found");
	tl_resp_free(&r);
	/* nginx's own errors are problem documents too */
	tl_get("/nothing-here", NULL, &r);
	expect_problem(&r, 404, "not_found");
	tl_resp_free(&r);

	json_decref(claim);
	free(key);
	free(url);
}
END_TEST

/* ---- HEAD ------------------------------------------------------------------ */

/* HEAD where GET is defined answers as GET does (status, Content-Type),
 * without a body. */
static void
expect_head_like_get(const char *path, const char *bearer, long status)
{
	struct tl_resp g, h;

	tl_http("GET", path, bearer, NULL, NULL, 0, &g);
	tl_http("HEAD", path, bearer, NULL, NULL, 0, &h);
	ck_assert_msg(g.status == status && h.status == status, "%s: GET %ld, HEAD %ld (want %ld)",
	              path, g.status, h.status, status);
	ck_assert_msg(g.body_len > 0 && h.body_len == 0, "HEAD %s: a body of %zu bytes (GET: %zu)",
	              path, h.body_len, g.body_len);
	ck_assert_str_eq(h.content_type, g.content_type);
	tl_resp_free(&g);
	tl_resp_free(&h);
}

START_TEST(test_head)
{
	char prefix[96], *key, *url, *hdrs = NULL, *allow;
	json_t *claim;
	struct tl_resp r;

	need_stack();
	tl_mkkey(prefix, sizeof(prefix), "head ");
	key = tl_corpus_key(prefix, "заказ/订单 📦", 200);
	url = run_url(key);
	claim = json_pack("{s:s, s:{s:s}}", "key", key, "payload", "order", "CN-2026-0088431");
	claim_h(g_key_a, claim, NULL, &r, NULL);
	ASSERT_STATUS(&r, 201);
	tl_resp_free(&r);
	expect_head_like_get(url, g_key_a, 200);
	/* the other tenant, same key: 404 for both methods */
	expect_head_like_get(url, g_key_b, 404);
	expect_head_like_get("/healthz", NULL, 200);
	expect_head_like_get("/v1/openapi.json", NULL, 200);
	/* a POST-only path: 405, Allow POST; a GET path: Allow names HEAD */
	tl_http_hdrs("HEAD", "/v1/runs/head-probe/lease", NULL, NULL, NULL, 0, &r, &hdrs);
	ck_assert_int_eq(r.status, 405);
	allow = tl_header_get(hdrs, "Allow");
	ck_assert_msg(allow && strcmp(allow, "POST") == 0, "Allow %s", allow ? allow : "(absent)");
	free(allow);
	free(hdrs);
	tl_resp_free(&r);
	tl_http_hdrs("DELETE", "/healthz", NULL, NULL, NULL, 0, &r, &hdrs);
	expect_problem(&r, 405, "method_not_allowed");
	allow = tl_header_get(hdrs, "Allow");
	ck_assert_msg(allow && strcmp(allow, "GET, HEAD") == 0, "Allow %s",
	              allow ? allow : "(absent)");
	free(allow);
	free(hdrs);
	tl_resp_free(&r);
	json_decref(claim);
	free(key);
	free(url);
}
END_TEST

/* ---- limits in characters, null as the document says --------------------- */

/* n copies of the UTF-8 character ch (malloc'd). */
static char *
chars_of(const char *ch, size_t n)
{
	size_t w = strlen(ch), i;
	char *s = malloc(w * n + 1);

	ck_assert_ptr_nonnull(s);
	for (i = 0; i < n; i++)
		memcpy(s + i * w, ch, w);
	s[w * n] = '\0';
	return s;
}

/*
 * Every documented maxLength is the code's limit, in characters: at the
 * limit in ASCII, Cyrillic (2 bytes), CJK (3) and emoji (4) a claim's
 * text members are taken and stored whole; one character more is 400
 * invalid_field naming the member, and nothing is claimed. Both tenants
 * claim the same keys.
 */
START_TEST(test_limits_in_characters)
{
	static const char *const fields[] = { "workflow_version", "trigger", "correlation_id",
		                              "event_id" };
	static const char *const scripts[] = { "a", "ж", "键", "🔑" };
	PGconn *c = tl_pg_connect();
	char prefix[96], key[160];
	size_t f, i, t;

	need_stack();
	tl_mkkey(prefix, sizeof(prefix), "limit-");
	for (f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {
		for (i = 0; i < sizeof(scripts) / sizeof(scripts[0]); i++) {
			char *at = chars_of(scripts[i], 200), *over = chars_of(scripts[i], 201);
			const char *tenants[2] = { g_key_a, g_key_b };

			snprintf(key, sizeof(key), "%s%s-%zu-заказ", prefix, fields[f], i);
			for (t = 0; t < 2; t++) {
				json_t *body = json_pack("{s:s, s:{s:s}, s:s}", "key", key, "payload",
				                         "order", "CN-0088431", fields[f], over);
				struct tl_resp r;
				char *sql = NULL;

				claim_h(tenants[t], body, NULL, &r, NULL);
				expect_problem(&r, 400, "invalid_field");
				ck_assert_str_eq(tl_jstr(r.json, "field") ?: "", fields[f]);
				ck_assert_msg(strstr(tl_jstr(r.json, "detail") ?: "", "200 characters"),
				              "the refusal states the limit: %s", r.body);
				tl_resp_free(&r);
				json_object_set_new(body, fields[f], json_string(at));
				claim_h(tenants[t], body, NULL, &r, NULL);
				ck_assert_msg(r.status == 201, "%s of 200 × %s: HTTP %ld %.300s", fields[f],
				              scripts[i], r.status, r.body);
				tl_resp_free(&r);
				json_decref(body);
				ck_assert_int_ge(asprintf(&sql, "SELECT %s FROM workflow_runs WHERE "
				                          "idempotency_key = $1 AND client_id = (SELECT id "
				                          "FROM api_clients WHERE name = $2)", fields[f]), 0);
				{
					const char *p[2] = { key, t == 0 ? g_client_a : g_client_b };
					char *v = tl_pg_value(c, sql, 2, p);

					ck_assert_msg(v != NULL && strcmp(v, at) == 0,
					              "%s stored is not the 200 characters sent", fields[f]);
					free(v);
				}
				free(sql);
			}
			free(at);
			free(over);
		}
	}
	PQfinish(c);
}
END_TEST

/*
 * null where the document admits it is absent; where it does not, a 4xx
 * that changes nothing.
 */
START_TEST(test_null_members)
{
	PGconn *c = tl_pg_connect();
	char key[160], *path;
	json_t *body;
	struct tl_resp r;
	const char *p[1];
	long long version;

	need_stack();
	tl_mkkey(key, sizeof(key), "null-Ø-空");
	p[0] = key;
	/* lease_seconds is an integer, never null */
	body = json_pack("{s:s, s:{s:s}, s:n}", "key", key, "payload", "m", "нуль", "lease_seconds");
	claim_h(g_key_a, body, NULL, &r, NULL);
	expect_problem(&r, 400, "invalid_field");
	ck_assert_str_eq(tl_jstr(r.json, "field") ?: "", "lease_seconds");
	tl_resp_free(&r);
	json_decref(body);
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM workflow_runs WHERE "
	                             "idempotency_key = $1", 1, p), 0);
	/* the text members admit null: as if absent */
	body = json_pack("{s:s, s:{s:s}, s:n, s:n, s:n, s:n, s:n}", "key", key, "payload", "m",
	                 "нуль", "workflow_version", "trigger", "correlation_id", "event_id",
	                 "callback_url");
	claim_h(g_key_a, body, NULL, &r, NULL);
	ASSERT_STATUS(&r, 201);
	json_decref(body);
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM workflow_runs WHERE "
	                             "idempotency_key = $1 AND workflow_version IS NULL AND "
	                             "trigger IS NULL AND correlation_id IS NULL AND event_id IS NULL",
	                             1, p), 1);
	ck_assert_msg(tl_jint(r.json, "version", &version), "claim: %s", r.body);
	body = json_pack("{s:s, s:I, s:s, s:n, s:n, s:n}", "lease_owner",
	                 tl_jstr(r.json, "lease_owner"), "version", (json_int_t)version, "to",
	                 "completed", "result", "error_class", "reason");
	tl_resp_free(&r);
	/* the cancel's reason is required: null is refused */
	path = tl_run_path(key, "/cancel");
	tl_post_text(path, g_key_a, "{\"reason\":null}", &r);
	expect_problem(&r, 400, "invalid_field");
	tl_resp_free(&r);
	free(path);
	path = tl_run_path(key, "/transition");
	tl_post_json(path, g_key_a, body, &r);
	ck_assert_msg(r.status == 200, "a transition with null reason and error_class: HTTP %ld %s",
	              r.status, r.body);
	tl_resp_free(&r);
	free(path);
	json_decref(body);
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM workflow_runs WHERE "
	                             "idempotency_key = $1 AND state = 'completed' AND "
	                             "reason IS NULL AND error_class IS NULL", 1, p), 1);
	PQfinish(c);
}
END_TEST

/* ---- 429 from nginx ------------------------------------------------------ */

START_TEST(test_rate_limited)
{
	char token[44], path[128], *hdrs = NULL, *ra;
	const char *h[] = { "X-Dev-User: alice@example.com", "Sec-Fetch-Site: same-origin", NULL };
	struct tl_resp r;
	int i, limited = 0;

	need_stack();
	/* Approval decisions are limited per address (20/s, burst 100): a
	 * bounded burst of posts to a link nobody has meets the limit. */
	tl_random_token(token);
	snprintf(path, sizeof(path), "/approve/%s", token);
	for (i = 0; i < 300 && limited == 0; i++) {
		free(hdrs);
		hdrs = NULL;
		tl_http_hdrs("POST", path, h, "application/x-www-form-urlencoded", "decision=approve",
		             16, &r, &hdrs);
		if (r.status == 429) {
			limited = 1;
			expect_problem(&r, 429, "rate_limited");
			ra = tl_header_get(hdrs, "Retry-After");
			ck_assert_msg(ra != NULL && atoi(ra) > 0, "429 without Retry-After: %s",
			              ra ? ra : "(absent)");
			free(ra);
		}
		tl_resp_free(&r);
	}
	free(hdrs);
	ck_assert_msg(limited, "300 posts in a burst were never limited");
	/* let the bucket drain for whoever posts next */
	tl_sleep_ms(6000);
}
END_TEST

/* ---- the OpenAPI document ------------------------------------------------ */

START_TEST(test_openapi_served)
{
	const char *srcdir = tl_env("srcdir") ?: ".";
	char file[4096];
	char *src;
	size_t len;
	struct tl_resp r;
	json_t *schemes;

	need_stack();
	tl_get("/v1/openapi.json", NULL, &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(strncmp(r.content_type, "application/json", 16) == 0, "Content-Type %s",
	              r.content_type);
	snprintf(file, sizeof(file), "%s/src/lib/openapi.json", srcdir);
	src = tl_file_slurp(file, &len);
	ck_assert_msg(src != NULL, "cannot read %s", file);
	ck_assert_msg(len == r.body_len && memcmp(src, r.body, len) == 0,
	              "the served document is not %s, byte for byte", file);
	ck_assert_str_eq(tl_jstr(r.json, "openapi") ?: "", "3.1.0");
	ck_assert_ptr_nonnull(json_object_get(json_object_get(r.json, "paths"), "/v1/runs"));
	schemes = json_object_get(json_object_get(r.json, "components"), "securitySchemes");
	ck_assert_str_eq(tl_jstr(json_object_get(schemes, "bearer"), "scheme") ?: "", "bearer");
	free(src);
	tl_resp_free(&r);
}
END_TEST

static Suite *
problem_suite(void)
{
	Suite *s = suite_create("problem");
	TCase *unit = tl_tcase(s, "syntax", 0);
	TCase *tc;

	tcase_add_loop_test(unit, test_idem_syntax, 0,
	                    (int)(sizeof(idem_cases) / sizeof(idem_cases[0])));
	if (g_stack) {
		tc = tl_tcase(s, "stack", 120);
		TL_TESTS(tc, test_unauthorized, test_created_location, test_mismatch_two_tenants,
		         test_idempotency_key_header, test_run_problems, test_openapi_served,
		         test_head, test_limits_in_characters, test_null_members, test_rate_limited);
	}
	return s;
}

int
main(void)
{
	int rc = tl_suite_begin("check_problem", "pb", "ONCEGATE_CTL ONCEGATE_CONF");

	/* the header's syntax cases run without the stack too */
	if (rc != 0 && rc != 77)
		return rc;
	g_stack = rc == 0;
	if (g_stack) {
		tl_mkkey(g_client_a, sizeof(g_client_a), "acme-support");
		tl_mkkey(g_client_b, sizeof(g_client_b), "globex-helpdesk");
		g_key_a = tl_client_add(g_client_a);
		g_key_b = tl_client_add(g_client_b);
		if (g_key_a == NULL || g_key_b == NULL) {
			fprintf(stderr, "check_problem: cannot add the two API clients\n");
			tl_suite_end(1);
			return 99;
		}
	}
	rc = tl_suite_end(tl_suite_run(problem_suite(), false));
	free(g_key_a);
	free(g_key_b);
	/* without the stack only the syntax cases ran: a skip for the stack */
	return rc != 0 || g_stack ? rc : 77;
}

/*
 * check_api.c — integration suite: the real stack, from outside.
 *
 * nginx in front of the real oncegate-fcgi, against a throwaway PostgreSQL
 * cluster, all started by `./dev test`, which exports where everything is
 * (ONCEGATE_URL, ONCEGATE_API_KEY, PG*, ONCEGATE_CONF, ONCEGATE_LOG,
 * ONCEGATE_CTL, ONCEGATE_TEST_PG_STOP/START). Without ONCEGATE_URL the
 * suite is skipped (exit 77), so `make distcheck` needs no stack.
 *
 * Every test asserts what a user would check — the answer's JSON, the rows
 * in the database, the lines in the decision log — never a status alone.
 * Keys carry a per-run prefix, so tests never depend on each other and the
 * suite can run again against the same database.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <math.h>
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

#include "canon.h"
#include "testlib.h"

/* What the test stack's config sets (see the brief of `./dev test`). */
#define STACK_LEASE_CAP_S   10
#define STACK_LEASE_MAX_S   60
#define STACK_BODY_MAX      262144
#define RACERS              50
#define OUTAGE_WAIT_S       15
#define AFTER_OUTAGE        24  /* claims at once after recovery: > threads */

static char g_marker[96];       /* inside every payload; must never be logged */
static const char *g_key_dev;   /* client "dev" */
static char g_client_b[96];     /* a second client */
static char *g_key_b;
static char g_client_r[96];     /* a client the revocation test revokes */
static char *g_key_r;
static char g_fake_key[96];     /* looks like a key, belongs to nobody */

/* ---- small helpers ----------------------------------------------------- */

static bool
is_uuid(const char *s)
{
	size_t i;

	if (s == NULL || strlen(s) != 36)
		return false;
	for (i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return false;
		} else if (!isxdigit((unsigned char)s[i])) {
			return false;
		}
	}
	return true;
}

/* The standard payload: {"b":1,"a":[true,null],"m":MARKER} */
static json_t *
std_payload(void)
{
	return json_pack("{s:i, s:[b,n], s:s}", "b", 1, "a", 1, "m", g_marker);
}

/* ... and its canonical text, written by hand. */
static void
std_hash(char out[72])
{
	char canon[256];

	snprintf(canon, sizeof(canon), "{\"a\":[true,null],\"b\":1,\"m\":\"%s\"}", g_marker);
	tl_payload_hash(canon, out);
}

/* POST /v1/runs {key, payload (stolen), lease_seconds (0: omitted)} */
static void
claim(const char *bearer, const char *key, json_t *payload, int lease_seconds,
      struct tl_resp *r)
{
	json_t *body = json_pack("{s:s, s:o}", "key", key, "payload",
	                         payload ? payload : std_payload());

	ck_assert_ptr_nonnull(body);
	if (lease_seconds > 0)
		json_object_set_new(body, "lease_seconds", json_integer(lease_seconds));
	tl_post_json("/v1/runs", bearer, body, r);
	json_decref(body);
}

static void
renew(const char *bearer, const char *key, const char *owner,
      long long version, int lease_seconds, struct tl_resp *r)
{
	char *path = tl_run_path(key, "/lease");
	json_t *body = json_pack("{s:s, s:I, s:i}", "lease_owner", owner,
	                         "version", (json_int_t)version,
	                         "lease_seconds", lease_seconds);

	tl_post_json(path, bearer, body, r);
	json_decref(body);
	free(path);
}

/* result is stolen; error_class and reason may be NULL. */
static void
transition(const char *bearer, const char *key, const char *owner,
           long long version, const char *to, json_t *result,
           const char *error_class, const char *reason, struct tl_resp *r)
{
	char *path = tl_run_path(key, "/transition");
	json_t *body = json_pack("{s:s, s:I, s:s}", "lease_owner", owner,
	                         "version", (json_int_t)version, "to", to);

	if (result != NULL)
		json_object_set_new(body, "result", result);
	if (error_class != NULL)
		json_object_set_new(body, "error_class", json_string(error_class));
	if (reason != NULL)
		json_object_set_new(body, "reason", json_string(reason));
	tl_post_json(path, bearer, body, r);
	json_decref(body);
	free(path);
}

static void
get_run(const char *bearer, const char *key, struct tl_resp *r)
{
	char *path = tl_run_path(key, NULL);

	tl_get(path, bearer, r);
	free(path);
}

/* An RFC 9457 problem document (application/problem+json) with the given
 * status and error code: type names the code, status repeats the status,
 * and detail (with its alias message) says what went wrong. */
static void
expect_error(const struct tl_resp *r, long status, const char *code)
{
	const char *msg;
	char type[160];
	long long st;

	ASSERT_STATUS(r, status);
	ck_assert_msg(json_is_object(r->json), "%s: body is not a JSON object: %.500s",
	              r->what, r->body);
	ck_assert_msg(strncmp(r->content_type, "application/problem+json", 24) == 0,
	              "%s: Content-Type %s, not application/problem+json", r->what, r->content_type);
	snprintf(type, sizeof(type), "https://oncegate.dev/problems/%s", code);
	ck_assert_msg(tl_jstr(r->json, "type") != NULL && strcmp(tl_jstr(r->json, "type"), type) == 0 &&
	              tl_jint(r->json, "status", &st) && st == status &&
	              tl_jstr(r->json, "title") != NULL && tl_jstr(r->json, "detail") != NULL,
	              "%s: not a problem document of type %s: %.1000s", r->what, type, r->body);
	ck_assert_msg(tl_jstr(r->json, "error") != NULL &&
	              strcmp(tl_jstr(r->json, "error"), code) == 0,
	              "%s: error %s, expected %s; body: %.1000s", r->what,
	              tl_jstr(r->json, "error") ? tl_jstr(r->json, "error") : "(none)",
	              code, r->body);
	msg = tl_jstr(r->json, "message");
	ck_assert_msg(msg != NULL && *msg != '\0' && strcmp(msg, tl_jstr(r->json, "detail")) == 0,
	              "%s: no message equal to detail in %.500s", r->what, r->body);
}

struct claimed {
	char owner[64];
	long long version;
	long long attempt;
	char expires[64];
	double expires_epoch;
};

/* A 201 claim answer, fully checked. hash may be NULL (format only). */
static void
expect_claimed(const struct tl_resp *r, const char *key, long long attempt,
               const char *hash, struct claimed *c)
{
	const char *owner, *exp, *ph;

	ASSERT_STATUS(r, 201);
	ck_assert_msg(json_is_object(r->json), "claim answer is not JSON: %s", r->body);
	ck_assert_str_eq(tl_jstr(r->json, "outcome") ? tl_jstr(r->json, "outcome") : "", "claimed");
	ck_assert_str_eq(tl_jstr(r->json, "key") ? tl_jstr(r->json, "key") : "", key);
	ck_assert_str_eq(tl_jstr(r->json, "state") ? tl_jstr(r->json, "state") : "", "processing");
	owner = tl_jstr(r->json, "lease_owner");
	ck_assert_msg(is_uuid(owner), "lease_owner is not a UUID: %s", r->body);
	ck_assert_msg(tl_jint(r->json, "version", &c->version) && c->version >= 1,
	              "version missing: %s", r->body);
	ck_assert_msg(tl_jint(r->json, "attempt", &c->attempt), "attempt missing: %s", r->body);
	ck_assert_msg(c->attempt == attempt, "attempt %lld, expected %lld: %s",
	              c->attempt, attempt, r->body);
	exp = tl_jstr(r->json, "lease_expires_at");
	ck_assert_msg(tl_ts_parse(exp, &c->expires_epoch),
	              "lease_expires_at is not RFC 3339 UTC with ms: %s", r->body);
	ck_assert_msg(c->expires_epoch > tl_now() - 2.0,
	              "lease_expires_at already past: %s", r->body);
	ph = tl_jstr(r->json, "payload_hash");
	ck_assert_msg(ph != NULL && strncmp(ph, "sha256:", 7) == 0 && strlen(ph) == 71,
	              "payload_hash malformed: %s", r->body);
	if (hash != NULL)
		ck_assert_str_eq(ph, hash);
	snprintf(c->owner, sizeof(c->owner), "%s", owner);
	snprintf(c->expires, sizeof(c->expires), "%s", exp);
}

/* A 200 duplicate answer; returns its version. */
static long long
expect_duplicate(const struct tl_resp *r, const char *key, const char *state)
{
	long long v = -1;

	ASSERT_STATUS(r, 200);
	ck_assert_msg(json_is_object(r->json), "duplicate answer is not JSON: %s", r->body);
	ck_assert_msg(tl_jstr(r->json, "outcome") && strcmp(tl_jstr(r->json, "outcome"), "duplicate") == 0,
	              "%s: outcome is not duplicate: %s", r->what, r->body);
	ck_assert_msg(tl_jstr(r->json, "key") && strcmp(tl_jstr(r->json, "key"), key) == 0,
	              "%s: key differs: %s", r->what, r->body);
	ck_assert_msg(tl_jstr(r->json, "state") && strcmp(tl_jstr(r->json, "state"), state) == 0,
	              "%s: state is not %s: %s", r->what, state, r->body);
	ck_assert_msg(tl_jint(r->json, "version", &v), "%s: no version: %s", r->what, r->body);
	ck_assert_msg(json_object_get(r->json, "lease_owner") == NULL,
	              "a duplicate must not hand out the lease owner: %s", r->body);
	return v;
}

static json_t *
log_for_key(long off, const char *key, size_t want)
{
	return tl_log_collect(off, tl_log_is_key, key, want);
}

static void
expect_log_line(const json_t *line, const char *event, const char *level,
                const char *client, int status)
{
	char *dump = json_dumps(line, JSON_COMPACT);
	long long st = 0;

	ck_assert_msg(line != NULL, "no %s line in the log", event);
	ck_assert_msg(tl_jstr(line, "event") && strcmp(tl_jstr(line, "event"), event) == 0,
	              "log line is not %s: %s", event, dump);
	ck_assert_msg(tl_jstr(line, "program") && strcmp(tl_jstr(line, "program"), "oncegate-fcgi") == 0,
	              "log line has no program oncegate-fcgi: %s", dump);
	if (level != NULL)
		ck_assert_msg(tl_jstr(line, "level") && strcmp(tl_jstr(line, "level"), level) == 0,
		              "log line level is not %s: %s", level, dump);
	if (client != NULL)
		ck_assert_msg(tl_jstr(line, "client") && strcmp(tl_jstr(line, "client"), client) == 0,
		              "log line client is not %s: %s", client, dump);
	if (status != 0)
		ck_assert_msg(tl_jint(line, "status", &st) && st == status,
		              "log line status is not %d: %s", status, dump);
	free(dump);
}

static char *
dump_lines(const json_t *lines)
{
	char *s = json_dumps(lines, JSON_COMPACT | JSON_ENCODE_ANY);

	return s ? s : strdup("?");
}

/* Counting rows of the whole ledger shows that a refused request wrote nothing. */
static long long
ledger_rows(PGconn *c)
{
	return tl_pg_count(c, "SELECT (SELECT count(*) FROM workflow_runs) + "
	                      "(SELECT count(*) FROM run_events)", 0, NULL);
}

/* ---- 0. health ---------------------------------------------------------- */

START_TEST(test_healthz_ok)
{
	struct tl_resp r;

	tl_get("/healthz", NULL, &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(tl_jstr(r.json, "status") && strcmp(tl_jstr(r.json, "status"), "ok") == 0,
	              "/healthz body: %s", r.body);
	tl_resp_free(&r);
}
END_TEST

/* Readiness on a stack nothing holds back: 200 ready. */
START_TEST(test_readyz_ok)
{
	struct tl_resp r;

	tl_get("/readyz", NULL, &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(tl_jstr(r.json, "status") && strcmp(tl_jstr(r.json, "status"), "ready") == 0,
	              "/readyz body: %s", r.body);
	tl_resp_free(&r);
}
END_TEST

/* ---- 1. fifty concurrent deliveries of one new key ---------------------- */

struct racer {
	const char *body;
	struct tl_resp r;
};

static void
racer_main(void *arg)
{
	struct racer *rc = arg;

	tl_post_text("/v1/runs", g_key_dev, rc->body, &rc->r);
}

START_TEST(test_concurrent_claims)
{
	static struct racer racers[RACERS];
	char key[160], hash[72], owner[64] = "", *body = NULL;
	long long version = -1;
	int i, n201 = 0, n200 = 0, nother = 0;
	PGconn *c = tl_pg_connect();
	json_t *lines;
	long off = tl_log_offset();
	const char *p[2];

	tl_mkkey(key, sizeof(key), "race");
	std_hash(hash);
	{
		json_t *b = json_pack("{s:s, s:o}", "key", key, "payload", std_payload());

		body = json_dumps(b, JSON_COMPACT);
		json_decref(b);
	}
	for (i = 0; i < RACERS; i++)
		racers[i].body = body;
	tl_race(racer_main, racers, sizeof(racers[0]), RACERS);

	for (i = 0; i < RACERS; i++) {
		struct tl_resp *r = &racers[i].r;

		if (r->status == 201) {
			struct claimed cl;

			expect_claimed(r, key, 1, hash, &cl);
			snprintf(owner, sizeof(owner), "%s", cl.owner);
			version = cl.version;
			n201++;
		} else if (r->status == 200) {
			n200++;
		} else {
			nother++;
			fprintf(stderr, "race: request %d → %ld %s %s\n", i, r->status,
			        r->error, r->body);
		}
	}
	ck_assert_msg(n201 == 1 && n200 == RACERS - 1 && nother == 0,
	              "%d concurrent claims: %d × 201, %d × 200, %d other (expected 1, %d, 0)",
	              RACERS, n201, n200, nother, RACERS - 1);
	for (i = 0; i < RACERS; i++) {
		struct tl_resp *r = &racers[i].r;

		if (r->status == 200) {
			long long v = expect_duplicate(r, key, "processing");

			ck_assert_msg(v == version, "duplicate version %lld != claimed %lld", v, version);
			ck_assert_msg(tl_ts_parse(tl_jstr(r->json, "lease_expires_at"), &(double){ 0 }),
			              "a duplicate of a live lease shows lease_expires_at: %s", r->body);
		}
		tl_resp_free(r);
	}
	free(body);

	/* One row, one live lease, held by the one winner. */
	p[0] = key;
	p[1] = owner;
	ck_assert_int_eq(tl_runs_of_key(c, key), 1);
	ck_assert_int_eq(tl_pg_count(c,
	    "SELECT count(*) FROM workflow_runs r JOIN api_clients c ON c.id = r.client_id "
	    "WHERE c.name = 'dev' AND r.idempotency_key = $1 AND r.state = 'processing' "
	    "AND r.lease_owner = $2::uuid AND r.lease_expires_at > now() AND r.attempt = 1", 2, p), 1);

	/* Exactly one decision line per delivery. */
	lines = log_for_key(off, key, RACERS);
	{
		char *d = dump_lines(lines);

		ck_assert_msg(json_array_size(lines) == RACERS &&
		              tl_log_count_event(lines, "run.claimed") == 1 &&
		              tl_log_count_event(lines, "run.duplicate") == RACERS - 1,
		              "log for %s: %zu lines, %zu run.claimed, %zu run.duplicate "
		              "(expected %d, 1, %d): %.3000s", key, json_array_size(lines),
		              tl_log_count_event(lines, "run.claimed"),
		              tl_log_count_event(lines, "run.duplicate"), RACERS, RACERS - 1, d);
		free(d);
	}
	expect_log_line(tl_log_find_event(lines, "run.claimed"), "run.claimed", NULL, "dev", 201);
	expect_log_line(tl_log_find_event(lines, "run.duplicate"), "run.duplicate", NULL, "dev", 200);
	ck_assert_str_eq(tl_jstr(tl_log_find_event(lines, "run.claimed"), "payload_hash")
	                 ? tl_jstr(tl_log_find_event(lines, "run.claimed"), "payload_hash") : "", hash);
	json_decref(lines);
	PQfinish(c);
}
END_TEST

/* ---- 2. an expired lease is reclaimed; the old owner is fenced off ------ */

START_TEST(test_expired_lease_reclaimed)
{
	char key[160], *before, *after;
	struct claimed a, b;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();
	long off = tl_log_offset();
	json_t *lines, *l;
	long long v;
	size_t i;

	tl_mkkey(key, sizeof(key), "expired");
	claim(g_key_dev, key, NULL, 1, &r);
	expect_claimed(&r, key, 1, NULL, &a);
	tl_resp_free(&r);

	tl_sleep_ms(1300);

	/* 5 s, well inside the cap, so that the new owner can renew below. */
	claim(g_key_dev, key, NULL, 5, &r);
	expect_claimed(&r, key, 2, NULL, &b);
	tl_resp_free(&r);
	ck_assert_msg(strcmp(a.owner, b.owner) != 0, "reclaim kept the lease owner %s", a.owner);
	ck_assert_msg(b.version > a.version, "version %lld after reclaim, was %lld",
	              b.version, a.version);

	before = tl_run_row(c, "dev", key);
	ck_assert_ptr_nonnull(before);

	/* The old owner, with its own version or the new one: fenced off. */
	renew(g_key_dev, key, a.owner, a.version, 5, &r);
	expect_error(&r, 409, "lease_lost");
	tl_resp_free(&r);
	renew(g_key_dev, key, a.owner, b.version, 5, &r);
	expect_error(&r, 409, "lease_lost");
	tl_resp_free(&r);
	transition(g_key_dev, key, a.owner, a.version, "completed",
	           json_pack("{s:b}", "done", 1), NULL, NULL, &r);
	expect_error(&r, 409, "lease_lost");
	tl_resp_free(&r);
	transition(g_key_dev, key, a.owner, b.version, "completed",
	           json_pack("{s:b}", "done", 1), NULL, NULL, &r);
	expect_error(&r, 409, "lease_lost");
	tl_resp_free(&r);

	after = tl_run_row(c, "dev", key);
	ck_assert_str_eq(after, before);

	lines = log_for_key(off, key, 6);
	{
		char *d = dump_lines(lines);

		ck_assert_msg(json_array_size(lines) == 6 &&
		              tl_log_count_event(lines, "run.claimed") == 1 &&
		              tl_log_count_event(lines, "run.reclaimed") == 1 &&
		              tl_log_count_event(lines, "lease.lost") == 4,
		              "expected run.claimed, run.reclaimed + 4 lease.lost lines: %.3000s", d);
		free(d);
	}
	for (i = 0; i < json_array_size(lines); i++) {
		l = json_array_get(lines, i);
		if (strcmp(tl_jstr(l, "event"), "lease.lost") == 0)
			expect_log_line(l, "lease.lost", NULL, "dev", 409);
	}
	/* The reclaim is its own event: attempt 2, the client, and the owner
	 * whose lease ran out (that worker may still be running). */
	l = tl_log_find_event(lines, "run.reclaimed");
	expect_log_line(l, "run.reclaimed", NULL, "dev", 201);
	ck_assert_msg(tl_jint(l, "attempt", &v) && v == 2,
	              "the reclaim's log line does not say attempt 2");
	/* by a fingerprint of its owner (sha256 of the UUID text, 16 hex):
	 * a lease owner is a capability and is never logged */
	{
		char fp[72];

		canon_hash(a.owner, strlen(a.owner), fp);
		fp[7 + 16] = '\0';
		ck_assert_str_eq(tl_jstr(l, "previous_owner") ? tl_jstr(l, "previous_owner") : "", fp);
	}
	json_decref(lines);

	/* The new owner still holds a working lease. */
	renew(g_key_dev, key, b.owner, b.version, 5, &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(tl_jint(r.json, "version", &v) && v == b.version + 1,
	              "renewal by the new owner: %s", r.body);
	tl_resp_free(&r);
	free(before);
	free(after);
	PQfinish(c);
}
END_TEST

/* ---- 3. what a finished run answers to a new claim ---------------------- */

START_TEST(test_failed_retryable_reclaimed)
{
	char key[160], hash[72];
	struct claimed a, b;
	struct tl_resp r;
	long long v;
	PGconn *c = tl_pg_connect();
	long off = tl_log_offset();
	json_t *lines, *l;
	const char *p[1];

	tl_mkkey(key, sizeof(key), "retryable");
	std_hash(hash);
	claim(g_key_dev, key, NULL, 30, &r);
	expect_claimed(&r, key, 1, hash, &a);
	tl_resp_free(&r);

	transition(g_key_dev, key, a.owner, a.version, "failed_retryable", NULL,
	           "upstream_timeout", "CRM answered 504", &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_str_eq(tl_jstr(r.json, "state") ? tl_jstr(r.json, "state") : "", "failed_retryable");
	ck_assert_msg(tl_jint(r.json, "version", &v) && v == a.version + 1,
	              "transition must bump the version: %s", r.body);
	tl_resp_free(&r);
	p[0] = key;
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1 "
	                 "AND state = 'failed_retryable' AND error_class = 'upstream_timeout' "
	                 "AND reason = 'CRM answered 504'", 1, p), 1);

	claim(g_key_dev, key, NULL, 30, &r);
	expect_claimed(&r, key, 2, hash, &b);
	tl_resp_free(&r);
	ck_assert_msg(strcmp(a.owner, b.owner) != 0, "reclaim kept the lease owner");
	ck_assert_msg(b.version > v, "reclaim version %lld not above %lld", b.version, v);
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1 "
	                 "AND state = 'processing' AND attempt = 2", 1, p), 1);

	lines = log_for_key(off, key, 3);
	ck_assert_int_eq(json_array_size(lines), 3);
	l = tl_log_find_event(lines, "run.transitioned");
	expect_log_line(l, "run.transitioned", NULL, "dev", 200);
	ck_assert_str_eq(tl_jstr(l, "state_from") ? tl_jstr(l, "state_from") : "", "processing");
	ck_assert_str_eq(tl_jstr(l, "state_to") ? tl_jstr(l, "state_to") : "", "failed_retryable");
	ck_assert_int_eq(tl_log_count_event(lines, "run.claimed"), 2);
	json_decref(lines);
	PQfinish(c);
}
END_TEST

START_TEST(test_completed_is_duplicate)
{
	char key[160], *before, *after;
	struct claimed a;
	struct tl_resp r;
	long long v, dv;
	json_t *want = json_pack("{s:i, s:b, s:s}", "ticket", 42, "ok", 1, "note", "sent");
	PGconn *c = tl_pg_connect();
	long off;
	json_t *lines;

	tl_mkkey(key, sizeof(key), "completed");
	claim(g_key_dev, key, NULL, 30, &r);
	expect_claimed(&r, key, 1, NULL, &a);
	tl_resp_free(&r);
	transition(g_key_dev, key, a.owner, a.version, "completed", json_deep_copy(want),
	           NULL, NULL, &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_str_eq(tl_jstr(r.json, "state") ? tl_jstr(r.json, "state") : "", "completed");
	ck_assert_msg(tl_jint(r.json, "version", &v) && v == a.version + 1, "version: %s", r.body);
	tl_resp_free(&r);

	before = tl_run_row(c, "dev", key);
	off = tl_log_offset();
	claim(g_key_dev, key, NULL, 30, &r);
	dv = expect_duplicate(&r, key, "completed");
	ck_assert_int_eq(dv, v);
	ck_assert_msg(json_equal(json_object_get(r.json, "result"), want),
	              "a completed run's duplicate must carry its result: %s", r.body);
	tl_resp_free(&r);
	after = tl_run_row(c, "dev", key);
	ck_assert_str_eq(after, before);

	lines = log_for_key(off, key, 1);
	ck_assert_int_eq(json_array_size(lines), 1);
	expect_log_line(json_array_get(lines, 0), "run.duplicate", NULL, "dev", 200);
	json_decref(lines);
	json_decref(want);
	free(before);
	free(after);
	PQfinish(c);
}
END_TEST

START_TEST(test_failed_terminal_is_duplicate)
{
	char key[160], *before, *after;
	struct claimed a;
	struct tl_resp r;
	long long v;
	PGconn *c = tl_pg_connect();

	tl_mkkey(key, sizeof(key), "terminal");
	claim(g_key_dev, key, NULL, 30, &r);
	expect_claimed(&r, key, 1, NULL, &a);
	tl_resp_free(&r);
	transition(g_key_dev, key, a.owner, a.version, "failed_terminal", NULL,
	           "validation", "customer id unknown", &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_str_eq(tl_jstr(r.json, "state") ? tl_jstr(r.json, "state") : "", "failed_terminal");
	ck_assert_msg(tl_jint(r.json, "version", &v), "version: %s", r.body);
	tl_resp_free(&r);

	before = tl_run_row(c, "dev", key);
	claim(g_key_dev, key, NULL, 30, &r);
	ck_assert_int_eq(expect_duplicate(&r, key, "failed_terminal"), v);
	tl_resp_free(&r);
	after = tl_run_row(c, "dev", key);
	ck_assert_str_eq(after, before);
	ck_assert_msg(strstr(after, "\"failed_terminal\"") != NULL, "row: %s", after);
	free(before);
	free(after);
	PQfinish(c);
}
END_TEST

/* ---- 4. payload hash: mismatch, reordering, numbers (RFC 8785) --------- */

START_TEST(test_payload_mismatch)
{
	char key[160], hash1[72], hash2[72], canon2[256], *before, *after;
	struct claimed a;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();
	long off;
	json_t *lines, *l;

	tl_mkkey(key, sizeof(key), "mismatch");
	std_hash(hash1);
	claim(g_key_dev, key, NULL, 30, &r);
	expect_claimed(&r, key, 1, hash1, &a);
	tl_resp_free(&r);
	before = tl_run_row(c, "dev", key);

	/* Same key, b is 2 now. */
	snprintf(canon2, sizeof(canon2), "{\"a\":[true,null],\"b\":2,\"m\":\"%s\"}", g_marker);
	tl_payload_hash(canon2, hash2);
	off = tl_log_offset();
	claim(g_key_dev, key, json_pack("{s:i, s:[b,n], s:s}", "b", 2, "a", 1, "m", g_marker), 30, &r);
	expect_error(&r, 422, "payload_mismatch");
	ck_assert_str_eq(tl_jstr(r.json, "key") ? tl_jstr(r.json, "key") : "", key);
	ck_assert_str_eq(tl_jstr(r.json, "payload_hash") ? tl_jstr(r.json, "payload_hash") : "", hash2);
	ck_assert_str_eq(tl_jstr(r.json, "stored_payload_hash") ? tl_jstr(r.json, "stored_payload_hash") : "", hash1);
	tl_resp_free(&r);
	after = tl_run_row(c, "dev", key);
	ck_assert_str_eq(after, before);

	lines = log_for_key(off, key, 1);
	ck_assert_int_eq(json_array_size(lines), 1);
	l = json_array_get(lines, 0);
	expect_log_line(l, "run.payload_mismatch", "alert", "dev", 422);
	json_decref(lines);
	free(before);
	free(after);
	PQfinish(c);
}
END_TEST

START_TEST(test_payload_reordered_is_duplicate)
{
	char key[160], hash[72], *text = NULL, *before, *after, *stored;
	struct claimed a;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();
	long off;
	json_t *lines;
	const char *p[1];

	tl_mkkey(key, sizeof(key), "reordered");
	std_hash(hash);
	claim(g_key_dev, key, NULL, 30, &r);
	expect_claimed(&r, key, 1, hash, &a);
	tl_resp_free(&r);
	before = tl_run_row(c, "dev", key);

	/* Same payload, members in another order, other whitespace, an escaped "m". */
	ck_assert_int_ge(asprintf(&text,
	    " {\n\t\"payload\" : { \"m\" : \"%s\" ,\"a\":[ true ,\r\n null ] , \"\\u0062\" : 1 } ,"
	    " \"lease_seconds\" : 30, \"key\" : \"%s\" }\n", g_marker, key), 0);
	off = tl_log_offset();
	tl_post_text("/v1/runs", g_key_dev, text, &r);
	expect_duplicate(&r, key, "processing");
	tl_resp_free(&r);
	after = tl_run_row(c, "dev", key);
	ck_assert_str_eq(after, before);

	p[0] = key;
	stored = tl_pg_value(c, "SELECT payload_hash FROM workflow_runs WHERE idempotency_key = $1", 1, p);
	ck_assert_str_eq(stored ? stored : "", hash);
	lines = log_for_key(off, key, 1);
	ck_assert_int_eq(json_array_size(lines), 1);
	expect_log_line(json_array_get(lines, 0), "run.duplicate", NULL, "dev", 200);
	ck_assert_str_eq(tl_jstr(json_array_get(lines, 0), "payload_hash")
	                 ? tl_jstr(json_array_get(lines, 0), "payload_hash") : "", hash);
	json_decref(lines);
	free(text);
	free(stored);
	free(before);
	free(after);
	PQfinish(c);
}
END_TEST

START_TEST(test_payload_numbers_as_given)
{
	char key[160], hash[72], canon[256], *text = NULL;
	struct claimed a;
	struct tl_resp r;

	/* RFC 8785: 1.50 is 1.5, 1E3 is 1000, -0.0 is 0; "\u00e9" becomes the
	 * UTF-8 é. */
	tl_mkkey(key, sizeof(key), "numbers");
	snprintf(canon, sizeof(canon),
	         "{\"m\":\"%s\",\"x\":10,\"y\":\"\xc3\xa9\",\"z\":[1.5,1000,0]}", g_marker);
	tl_payload_hash(canon, hash);
	ck_assert_int_ge(asprintf(&text,
	    "{\"key\":\"%s\",\"payload\":{\"z\":[1.50,1E3,-0.0],\"y\":\"\\u00e9\",\"x\":10,\"m\":\"%s\"}}",
	    key, g_marker), 0);
	tl_post_text("/v1/runs", g_key_dev, text, &r);
	expect_claimed(&r, key, 1, hash, &a);
	tl_resp_free(&r);
	free(text);
}
END_TEST

/* ---- 5. two clients, one key -------------------------------------------- */

START_TEST(test_clients_are_isolated)
{
	char key[160], nokey[160], *row_dev, *row_b, *after;
	struct claimed d, b;
	struct tl_resp r, ghost;
	PGconn *c = tl_pg_connect();
	const char *p[1];
	long off;
	json_t *lines, *fv;
	const char *field;

	ck_assert_msg(g_key_b != NULL, "no second client: `oncegatectl client add` failed in main()");
	tl_mkkey(key, sizeof(key), "shared");
	tl_mkkey(nokey, sizeof(nokey), "never-claimed");

	claim(g_key_dev, key, NULL, 30, &r);
	expect_claimed(&r, key, 1, NULL, &d);
	tl_resp_free(&r);
	row_dev = tl_run_row(c, "dev", key);

	/* To client b, dev's run does not exist — answered exactly like a key
	 * that nobody has. */
	get_run(g_key_b, nokey, &ghost);
	expect_error(&ghost, 404, "run_not_found");
	off = tl_log_offset();
	get_run(g_key_b, key, &r);
	expect_error(&r, 404, "run_not_found");
	ck_assert_msg(json_object_size(r.json) == json_object_size(ghost.json),
	              "another client's run answers differently from a missing one: %s vs %s",
	              r.body, ghost.body);
	json_object_foreach(ghost.json, field, fv) {
		ck_assert_msg(json_object_get(r.json, field) != NULL,
		              "another client's run answers differently from a missing one: %s vs %s",
		              r.body, ghost.body);
	}
	ck_assert_msg(strstr(r.body, d.owner) == NULL, "dev's lease owner leaked to b: %s", r.body);
	tl_resp_free(&r);
	tl_resp_free(&ghost);
	lines = log_for_key(off, key, 1);
	ck_assert_int_eq(json_array_size(lines), 1);
	expect_log_line(json_array_get(lines, 0), "run.not_found", NULL, g_client_b, 404);
	json_decref(lines);

	renew(g_key_b, key, d.owner, d.version, 5, &r);
	expect_error(&r, 404, "run_not_found");
	tl_resp_free(&r);
	transition(g_key_b, key, d.owner, d.version, "completed", NULL, NULL, NULL, &r);
	expect_error(&r, 404, "run_not_found");
	tl_resp_free(&r);
	after = tl_run_row(c, "dev", key);
	ck_assert_str_eq(after, row_dev);
	free(after);

	/* b claims the same key: a run of its own. */
	claim(g_key_b, key, NULL, 30, &r);
	expect_claimed(&r, key, 1, NULL, &b);
	tl_resp_free(&r);
	ck_assert_msg(strcmp(d.owner, b.owner) != 0, "two clients got one lease owner");
	p[0] = key;
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(DISTINCT client_id) FROM workflow_runs "
	                 "WHERE idempotency_key = $1 AND state = 'processing'", 1, p), 2);
	after = tl_run_row(c, "dev", key);
	ck_assert_str_eq(after, row_dev);
	free(after);

	/* Each sees its own run. */
	get_run(g_key_dev, key, &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_str_eq(tl_jstr(r.json, "lease_owner") ? tl_jstr(r.json, "lease_owner") : "", d.owner);
	tl_resp_free(&r);
	get_run(g_key_b, key, &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_str_eq(tl_jstr(r.json, "lease_owner") ? tl_jstr(r.json, "lease_owner") : "", b.owner);
	tl_resp_free(&r);

	/* dev completing with b's owner hits dev's own run: lease lost, and b's
	 * run is untouched. */
	row_b = tl_run_row(c, g_client_b, key);
	transition(g_key_dev, key, b.owner, b.version, "completed", NULL, NULL, NULL, &r);
	expect_error(&r, 409, "lease_lost");
	tl_resp_free(&r);
	after = tl_run_row(c, g_client_b, key);
	ck_assert_str_eq(after, row_b);
	free(after);
	after = tl_run_row(c, "dev", key);
	ck_assert_str_eq(after, row_dev);
	free(after);

	/* b completes its run; dev's stays processing. */
	transition(g_key_b, key, b.owner, b.version, "completed", json_pack("{s:s}", "by", "b"),
	           NULL, NULL, &r);
	ASSERT_STATUS(&r, 200);
	tl_resp_free(&r);
	after = tl_run_row(c, "dev", key);
	ck_assert_str_eq(after, row_dev);
	free(after);
	free(row_dev);
	free(row_b);
	PQfinish(c);
}
END_TEST

/* ---- 5b. real keys, two tenants (tests/data/corpus) ----------------------- */

/* GET of key as bearer: 200, the whole key, this lease owner and hash. */
static void
expect_own_run(const char *bearer, const char *key, const char *owner, const char *hash)
{
	struct tl_resp r;

	get_run(bearer, key, &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_str_eq(tl_jstr(r.json, "key") ? tl_jstr(r.json, "key") : "", key);
	ck_assert_str_eq(tl_jstr(r.json, "lease_owner") ? tl_jstr(r.json, "lease_owner") : "", owner);
	ck_assert_str_eq(tl_jstr(r.json, "payload_hash") ? tl_jstr(r.json, "payload_hash") : "", hash);
	tl_resp_free(&r);
}

/* The business keys two tenants share in the corpus — ids with '/', '#',
 * '%', '?', '&', a Message-ID, Cyrillic, Han, Arabic, Hebrew, emoji, and
 * seven of exactly 200 characters in each script — each claimed by dev and
 * by client b with different mail-sized payloads, read, renewed and
 * completed through nginx. Each tenant sees its own run only: its lease
 * owner, its payload hash (the RFC 8785 one any client computes), its
 * result; one completing leaves the other's run as it was. */
/*
 * The duplicate window (duplicate_window_days, 365 on the test stacks):
 * two tenants finish runs under the same Cyrillic/CJK/emoji key; dev's run
 * is made older than the window (its updated_at moved back), b's is
 * recent. dev's claim of the key, with its own payload or another, is 410
 * key_expired and changes nothing; b's is still 200 duplicate with its
 * result; dev's run still reads (GET).
 */
START_TEST(test_duplicate_window)
{
	char key[200], *before, *after;
	struct claimed a, b;
	struct tl_resp r;
	long long days;
	PGconn *c = tl_pg_connect();
	const char *p[2];
	long off;
	json_t *lines;

	snprintf(key, sizeof(key), "%s-окно/重复窗口/⏳🔑", tl_run);
	claim(g_key_dev, key, NULL, 30, &r);
	expect_claimed(&r, key, 1, NULL, &a);
	tl_resp_free(&r);
	claim(g_key_b, key, NULL, 30, &r);
	expect_claimed(&r, key, 1, NULL, &b);
	tl_resp_free(&r);
	transition(g_key_dev, key, a.owner, a.version, "completed",
	           json_pack("{s:s}", "note", "отправлено 已发送"), NULL, NULL, &r);
	ASSERT_STATUS(&r, 200);
	tl_resp_free(&r);
	transition(g_key_b, key, b.owner, b.version, "completed",
	           json_pack("{s:s}", "note", "b: تم الإرسال"), NULL, NULL, &r);
	ASSERT_STATUS(&r, 200);
	tl_resp_free(&r);

	p[0] = "dev";
	p[1] = key;
	ck_assert_int_eq(tl_pg_exec(c, "UPDATE workflow_runs SET updated_at = now() - interval "
	                            "'366 days' WHERE idempotency_key = $2 AND client_id = "
	                            "(SELECT id FROM api_clients WHERE name = $1)", 2, p), 1);
	before = tl_run_row(c, "dev", key);
	off = tl_log_offset();
	claim(g_key_dev, key, NULL, 0, &r);
	ck_assert_msg(r.status == 410 && tl_jstr(r.json, "type") != NULL &&
	              strstr(tl_jstr(r.json, "type"), "key_expired") != NULL,
	              "a key past the window: HTTP %ld %.600s", r.status, r.body);
	ck_assert_msg(tl_jint(r.json, "duplicate_window_days", &days) && days == 365,
	              "the answer names the window (365 on the test stack): %.600s", r.body);
	ck_assert_msg(json_object_get(r.json, "result") == NULL, "410 carries a result: %s", r.body);
	tl_resp_free(&r);
	/* another payload: the same answer, never a mismatch alert */
	claim(g_key_dev, key, json_pack("{s:s}", "other", "иное"), 0, &r);
	ck_assert_msg(r.status == 410, "another payload past the window: HTTP %ld %.600s",
	              r.status, r.body);
	tl_resp_free(&r);
	after = tl_run_row(c, "dev", key);
	ck_assert_str_eq(after, before);
	free(after);
	free(before);
	lines = log_for_key(off, key, 2);
	ck_assert_int_eq(tl_log_count_event(lines, "run.key_expired"), 2);
	json_decref(lines);

	/* b's run under the same key is within the window */
	claim(g_key_b, key, NULL, 0, &r);
	expect_duplicate(&r, key, "completed");
	ck_assert_msg(strstr(r.body, "تم الإرسال") != NULL, "b's result: %s", r.body);
	tl_resp_free(&r);
	/* the spent key's run still reads */
	get_run(g_key_dev, key, &r);
	ASSERT_STATUS(&r, 200);
	tl_resp_free(&r);
	PQfinish(c);
}
END_TEST

START_TEST(test_corpus_keys_two_tenants)
{
	json_t *tenants = tl_corpus_load("tenants.json");
	json_t *outputs = tl_corpus_load("outputs.json");
	json_t *keys = json_object_get(tenants, "shared_keys");
	json_t *payloads = json_object_get(outputs, "payloads");
	PGconn *c = tl_pg_connect();
	char prefix[96];
	size_t i, np = json_array_size(payloads);

	ck_assert_msg(g_key_b != NULL, "no second client: `oncegatectl client add` failed in main()");
	ck_assert_msg(json_array_size(keys) >= 10 && np >= 2, "the corpus is too small");
	snprintf(prefix, sizeof(prefix), "%s-corpus:", tl_run);
	for (i = 0; i < json_array_size(keys); i++) {
		char *key = tl_corpus_key(prefix, json_string_value(json_array_get(keys, i)), 200);
		const json_t *pa = json_array_get(payloads, i % np), *pb = json_array_get(payloads, (i + 1) % np);
		const char *ha = tl_jstr(pa, "payload_hash"), *hb = tl_jstr(pb, "payload_hash");
		char *row_b, *after;
		struct claimed d, b;
		struct tl_resp r;
		const char *p[1] = { key };

		claim(g_key_dev, key, json_deep_copy(json_object_get(pa, "payload")), 8, &r);
		expect_claimed(&r, key, 1, ha, &d);
		tl_resp_free(&r);
		claim(g_key_b, key, json_deep_copy(json_object_get(pb, "payload")), 8, &r);
		expect_claimed(&r, key, 1, hb, &b);
		tl_resp_free(&r);
		ck_assert_int_eq(tl_pg_count(c, "SELECT count(DISTINCT client_id) FROM workflow_runs "
		                             "WHERE idempotency_key = $1", 1, p), 2);

		/* each reads its own run, whole key and all */
		expect_own_run(g_key_dev, key, d.owner, ha);
		expect_own_run(g_key_b, key, b.owner, hb);

		/* renew and complete dev's; b's run stays as it was */
		renew(g_key_dev, key, d.owner, d.version, 5, &r);
		ASSERT_STATUS(&r, 200);
		ck_assert_msg(tl_jint(r.json, "version", &d.version), "renew: %s", r.body);
		tl_resp_free(&r);
		row_b = tl_run_row(c, g_client_b, key);
		transition(g_key_dev, key, d.owner, d.version, "completed",
		           json_pack("{s:s, s:I}", "sent", key, "n", (json_int_t)i), NULL, NULL, &r);
		ASSERT_STATUS(&r, 200);
		tl_resp_free(&r);
		after = tl_run_row(c, g_client_b, key);
		ck_assert_msg(after != NULL && strcmp(after, row_b) == 0,
		              "dev completing %s changed b's run", key);
		free(after);
		free(row_b);

		/* a duplicate answers each tenant with its own run */
		claim(g_key_dev, key, json_deep_copy(json_object_get(pa, "payload")), 0, &r);
		expect_duplicate(&r, key, "completed");
		ck_assert_msg(json_is_object(json_object_get(r.json, "result")) &&
		              tl_jstr(json_object_get(r.json, "result"), "sent") != NULL &&
		              strcmp(tl_jstr(json_object_get(r.json, "result"), "sent"), key) == 0,
		              "dev's duplicate does not carry dev's result: %.1000s", r.body);
		tl_resp_free(&r);
		claim(g_key_b, key, json_deep_copy(json_object_get(pb, "payload")), 0, &r);
		expect_duplicate(&r, key, "processing");
		ck_assert_msg(json_object_get(r.json, "result") == NULL,
		              "b's duplicate carries a result of dev's run: %.1000s", r.body);
		tl_resp_free(&r);
		/* b's payload is not dev's: a mismatch for b, against b's hash */
		claim(g_key_b, key, json_deep_copy(json_object_get(pa, "payload")), 0, &r);
		ck_assert_msg(r.status == 422 &&
		              tl_jstr(r.json, "stored_payload_hash") != NULL &&
		              strcmp(tl_jstr(r.json, "stored_payload_hash"), hb) == 0,
		              "b claiming with dev's payload: HTTP %ld %.1000s", r.status, r.body);
		tl_resp_free(&r);

		transition(g_key_b, key, b.owner, b.version, "completed", NULL, NULL, NULL, &r);
		ASSERT_STATUS(&r, 200);
		tl_resp_free(&r);
		ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM workflow_runs WHERE "
		                             "idempotency_key = $1 AND state = 'completed'", 1, p), 2);
		free(key);
	}
	json_decref(tenants);
	json_decref(outputs);
	PQfinish(c);
}
END_TEST

/* ---- 6. the lease cap --------------------------------------------------- */

START_TEST(test_lease_cap)
{
	char key[160], *before, *after;
	struct claimed a;
	struct tl_resp r;
	long long v1, v2, v3;
	double e, d, started;
	PGconn *c = tl_pg_connect();
	const char *p[1];
	long off = tl_log_offset();
	json_t *lines, *l;

	tl_mkkey(key, sizeof(key), "cap");
	p[0] = key;
	claim(g_key_dev, key, NULL, 4, &r);
	expect_claimed(&r, key, 1, NULL, &a);
	tl_resp_free(&r);
	started = tl_pg_double(c, "SELECT extract(epoch FROM claim_started_at) FROM workflow_runs "
	                       "WHERE idempotency_key = $1", 1, p);
	ck_assert_msg(!isnan(started), "claim_started_at is NULL");
	ck_assert_msg(fabs(a.expires_epoch - (started + 4)) < 1.0,
	              "claim with lease_seconds 4 expires at %s, %.3f s after the claim started",
	              a.expires, a.expires_epoch - started);

	/* Renew by 4: about start + 4, below the cap. */
	renew(g_key_dev, key, a.owner, a.version, 4, &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(tl_jint(r.json, "version", &v1) && v1 == a.version + 1,
	              "renewal must bump the version: %s", r.body);
	ck_assert_msg(tl_ts_parse(tl_jstr(r.json, "lease_expires_at"), &e), "lease_expires_at: %s", r.body);
	ck_assert_msg(e - started > 3.5 && e - started < 6.0,
	              "renew 4 s: expiry %.3f s after claim start", e - started);
	tl_resp_free(&r);

	/* Renew by 30: clamped to start + cap. */
	renew(g_key_dev, key, a.owner, v1, 30, &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(tl_jint(r.json, "version", &v2) && v2 == v1 + 1, "version: %s", r.body);
	ck_assert_msg(tl_ts_parse(tl_jstr(r.json, "lease_expires_at"), &e), "lease_expires_at: %s", r.body);
	ck_assert_msg(fabs(e - (started + STACK_LEASE_CAP_S)) < 0.002,
	              "renew 30 s: expiry %.3f s after claim start, expected the cap %d s",
	              e - started, STACK_LEASE_CAP_S);
	tl_resp_free(&r);
	d = tl_pg_double(c, "SELECT extract(epoch FROM lease_expires_at - claim_started_at) "
	                 "FROM workflow_runs WHERE idempotency_key = $1", 1, p);
	ck_assert_msg(fabs(d - STACK_LEASE_CAP_S) < 0.0005,
	              "in the database lease_expires_at = claim_started_at + %.6f s, expected + %d s",
	              d, STACK_LEASE_CAP_S);

	/* At the cap: a further renewal is refused and changes nothing. */
	before = tl_run_row(c, "dev", key);
	renew(g_key_dev, key, a.owner, v2, 30, &r);
	expect_error(&r, 409, "lease_cap_reached");
	tl_resp_free(&r);
	after = tl_run_row(c, "dev", key);
	ck_assert_str_eq(after, before);

	/* The owner can still finish inside the cap. */
	transition(g_key_dev, key, a.owner, v2, "completed", NULL, NULL, NULL, &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(tl_jint(r.json, "version", &v3) && v3 == v2 + 1, "version: %s", r.body);
	tl_resp_free(&r);

	lines = log_for_key(off, key, 5);
	{
		char *dd = dump_lines(lines);

		ck_assert_msg(json_array_size(lines) == 5 &&
		              tl_log_count_event(lines, "lease.renewed") == 2 &&
		              tl_log_count_event(lines, "lease.cap_reached") == 1,
		              "expected claimed, 2 × lease.renewed, lease.cap_reached, transitioned: %.3000s", dd);
		free(dd);
	}
	l = tl_log_find_event(lines, "lease.cap_reached");
	expect_log_line(l, "lease.cap_reached", NULL, "dev", 409);
	json_decref(lines);
	free(before);
	free(after);
	PQfinish(c);
}
END_TEST

START_TEST(test_default_lease_clamped)
{
	char key[160];
	struct claimed a;
	struct tl_resp r;
	double d;
	PGconn *c = tl_pg_connect();
	const char *p[1];

	/* lease_default_seconds (30) is past the cap (10): the claim's own lease
	 * is clamped. */
	tl_mkkey(key, sizeof(key), "default-lease");
	p[0] = key;
	claim(g_key_dev, key, NULL, 0, &r);
	expect_claimed(&r, key, 1, NULL, &a);
	tl_resp_free(&r);
	d = tl_pg_double(c, "SELECT extract(epoch FROM lease_expires_at - claim_started_at) "
	                 "FROM workflow_runs WHERE idempotency_key = $1", 1, p);
	ck_assert_msg(fabs(d - STACK_LEASE_CAP_S) < 0.0005,
	              "default lease: expires claim_started_at + %.6f s, expected + %d s",
	              d, STACK_LEASE_CAP_S);
	PQfinish(c);
}
END_TEST

START_TEST(test_boundaries_accepted)
{
	char key[160], longkey[512];
	struct claimed a;
	struct tl_resp r;
	size_t n;
	int i;

	/* lease_seconds = lease_max_seconds is allowed. */
	tl_mkkey(key, sizeof(key), "lease-max");
	claim(g_key_dev, key, NULL, STACK_LEASE_MAX_S, &r);
	expect_claimed(&r, key, 1, NULL, &a);
	tl_resp_free(&r);

	/* A key of exactly 200 characters. */
	tl_mkkey(longkey, sizeof(longkey), "k200-");
	n = strlen(longkey);
	while (n < 200)
		longkey[n++] = 'x';
	longkey[n] = '\0';
	claim(g_key_dev, longkey, NULL, 30, &r);
	expect_claimed(&r, longkey, 1, NULL, &a);
	tl_resp_free(&r);

	/* 200 characters, not bytes: é is two bytes in UTF-8. */
	tl_mkkey(longkey, sizeof(longkey), "u200-");
	n = strlen(longkey);
	for (i = (int)n; i < 200; i++) {
		longkey[n++] = '\xc3';
		longkey[n++] = '\xa9';
	}
	longkey[n] = '\0';
	claim(g_key_dev, longkey, NULL, 30, &r);
	expect_claimed(&r, longkey, 1, NULL, &a);
	tl_resp_free(&r);
}
END_TEST

/* ---- 7. bad input ------------------------------------------------------- */

enum auth { AUTH_DEV, AUTH_NONE, AUTH_EMPTY, AUTH_UNKNOWN };
enum bodykind { BODY_TEXT, BODY_300K, BODY_1500K };

struct bad_case {
	const char *name;
	const char *method;
	const char *path;
	enum auth auth;
	const char *ctype;
	enum bodykind kind;
	/* @KEY@ → a fresh key, @K201@ → a fresh key of 201 characters,
	 * @L513@ → 513 characters, @M@ → the payload marker */
	const char *body;
	long status;
	const char *errors;  /* accepted codes, '|'-separated */
	const char *field;   /* for invalid_field */
	const char *event;   /* the one log line expected; NULL: nginx answers */
};

#define JSON_CT "application/json"
static const struct bad_case bad_cases[] = {
	{ "no authorization", "POST", "/v1/runs", AUTH_NONE, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\",\"payload\":{\"m\":\"@M@\"}}", 401, "unauthorized", NULL, "auth.failed" },
	{ "empty bearer", "POST", "/v1/runs", AUTH_EMPTY, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\",\"payload\":{\"m\":\"@M@\"}}", 401, "unauthorized", NULL, "auth.failed" },
	{ "unknown key", "POST", "/v1/runs", AUTH_UNKNOWN, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\",\"payload\":{\"m\":\"@M@\"}}", 401, "unauthorized", NULL, "auth.failed" },
	{ "malformed JSON", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\",\"payload\":{\"m\":\"@M@\"", 400, "invalid_json", NULL, "request.invalid" },
	{ "text/plain body", "POST", "/v1/runs", AUTH_DEV, "text/plain", BODY_TEXT,
	  "{\"key\":\"@KEY@\",\"payload\":{\"m\":\"@M@\"}}", 415, "unsupported_media_type", NULL, "request.invalid" },
	{ "no content type", "POST", "/v1/runs", AUTH_DEV, NULL, BODY_TEXT,
	  "{\"key\":\"@KEY@\",\"payload\":{\"m\":\"@M@\"}}", 415, "unsupported_media_type", NULL, "request.invalid" },
	{ "body of 300 KiB", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_300K,
	  NULL, 413, "body_too_large", NULL, "request.invalid" },
	{ "body of 1.5 MiB (nginx)", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_1500K,
	  NULL, 413, "body_too_large", NULL, NULL },
	{ "key missing", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"payload\":{\"m\":\"@M@\"}}", 400, "invalid_key", NULL, "request.invalid" },
	{ "key empty", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":\"\",\"payload\":{\"m\":\"@M@\"}}", 400, "invalid_key", NULL, "request.invalid" },
	{ "key of 201 characters", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@K201@\",\"payload\":{\"m\":\"@M@\"}}", 400, "invalid_key", NULL, "request.invalid" },
	{ "key with U+0001", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\\u0001\",\"payload\":{\"m\":\"@M@\"}}", 400, "invalid_key", NULL, "request.invalid" },
	{ "key with a tab", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\\t\",\"payload\":{\"m\":\"@M@\"}}", 400, "invalid_key", NULL, "request.invalid" },
	{ "key not a string", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":12,\"payload\":{\"m\":\"@M@\"}}", 400, "invalid_key|invalid_field", NULL, "request.invalid" },
	{ "key not UTF-8", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\xff\",\"payload\":{\"m\":\"@M@\"}}", 400, "invalid_json|invalid_key", NULL, "request.invalid" },
	{ "key given twice", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\",\"payload\":{\"m\":\"@M@\"},\"key\":\"@KEY@-2\"}", 400,
	  "invalid_json|invalid_key|invalid_field", NULL, "request.invalid" },
	{ "body not an object", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "[\"@KEY@\",{\"m\":\"@M@\"}]", 400, "invalid_json|invalid_field|invalid_key", NULL, "request.invalid" },
	{ "payload missing", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\"}", 400, "invalid_field", "payload", "request.invalid" },
	{ "lease_seconds a string", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\",\"payload\":{\"m\":\"@M@\"},\"lease_seconds\":\"30\"}", 400,
	  "invalid_field", "lease_seconds", "request.invalid" },
	{ "lease_seconds 0", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\",\"payload\":{\"m\":\"@M@\"},\"lease_seconds\":0}", 400,
	  "invalid_field", "lease_seconds", "request.invalid" },
	{ "lease_seconds 100000", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\",\"payload\":{\"m\":\"@M@\"},\"lease_seconds\":100000}", 400,
	  "invalid_field", "lease_seconds", "request.invalid" },
	{ "lease_seconds past the maximum", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\",\"payload\":{\"m\":\"@M@\"},\"lease_seconds\":61}", 400,
	  "invalid_field", "lease_seconds", "request.invalid" },
	{ "lease_seconds not whole", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\",\"payload\":{\"m\":\"@M@\"},\"lease_seconds\":1.5}", 400,
	  "invalid_field", "lease_seconds", "request.invalid" },
	{ "workflow_version a number", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\",\"payload\":{\"m\":\"@M@\"},\"workflow_version\":12}", 400,
	  "invalid_field", "workflow_version", "request.invalid" },
	{ "trigger of 513 characters", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\",\"payload\":{\"m\":\"@M@\"},\"trigger\":\"@L513@\"}", 400,
	  "invalid_field", "trigger", "request.invalid" },
	{ "correlation_id an object", "POST", "/v1/runs", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\",\"payload\":{\"m\":\"@M@\"},\"correlation_id\":{}}", 400,
	  "invalid_field", "correlation_id", "request.invalid" },
	{ "unknown route", "GET", "/v1/nope", AUTH_DEV, NULL, BODY_TEXT,
	  NULL, 404, "not_found", NULL, "request.invalid" },
	{ "unknown route, POST", "POST", "/v1/nope", AUTH_DEV, JSON_CT, BODY_TEXT,
	  "{\"key\":\"@KEY@\",\"payload\":{\"m\":\"@M@\"}}", 404, "not_found", NULL, "request.invalid" },
	{ "DELETE /v1/runs", "DELETE", "/v1/runs", AUTH_DEV, NULL, BODY_TEXT,
	  NULL, 405, "method_not_allowed", NULL, "request.invalid" },
	{ "PUT /v1/runs", "PUT", "/v1/runs", AUTH_DEV, NULL, BODY_TEXT,
	  NULL, 405, "method_not_allowed", NULL, "request.invalid" },
	{ "GET /v1/runs/{key}/lease", "GET", "/v1/runs/lease-probe/lease", AUTH_DEV, NULL, BODY_TEXT,
	  NULL, 405, "method_not_allowed", NULL, "request.invalid" },
};
#define N_BAD_CASES ((int)(sizeof(bad_cases) / sizeof(bad_cases[0])))

/* Replaces every @NAME@ placeholder of tmpl. */
static char *
fill(const char *tmpl, const char *key)
{
	char k201[256], l513[600], *out = NULL;
	size_t cap = strlen(tmpl) + 2048, n = 0;
	const char *s;

	snprintf(k201, sizeof(k201), "%s", key);
	for (n = strlen(k201); n < 201; n++)
		k201[n] = 'x';
	k201[201] = '\0';
	memset(l513, 't', 513);
	l513[513] = '\0';
	out = malloc(cap);
	ck_assert_ptr_nonnull(out);
	n = 0;
	for (s = tmpl; *s != '\0';) {
		const char *rep = NULL;
		size_t skip = 0, rl;

		if (strncmp(s, "@KEY@", 5) == 0) {
			rep = key;
			skip = 5;
		} else if (strncmp(s, "@K201@", 6) == 0) {
			rep = k201;
			skip = 6;
		} else if (strncmp(s, "@L513@", 6) == 0) {
			rep = l513;
			skip = 6;
		} else if (strncmp(s, "@M@", 3) == 0) {
			rep = g_marker;
			skip = 3;
		}
		if (rep == NULL) {
			out[n++] = *s++;
			continue;
		}
		rl = strlen(rep);
		ck_assert(n + rl + 1 < cap);
		memcpy(out + n, rep, rl);
		n += rl;
		s += skip;
	}
	out[n] = '\0';
	return out;
}

/* A valid claim body padded with a payload string to `size` bytes. */
static char *
big_body(const char *key, size_t size)
{
	char head[512];
	size_t hl, i;
	char *b;

	hl = (size_t)snprintf(head, sizeof(head), "{\"key\":\"%s\",\"payload\":{\"m\":\"%s\",\"pad\":\"",
	                      key, g_marker);
	b = malloc(size + 1);
	ck_assert_ptr_nonnull(b);
	memcpy(b, head, hl);
	for (i = hl; i < size - 3; i++)
		b[i] = 'p';
	memcpy(b + size - 3, "\"}}", 3);
	b[size] = '\0';
	return b;
}

static bool
code_in(const char *code, const char *list)
{
	size_t n = strlen(code);
	const char *p = list;

	while (p != NULL && *p != '\0') {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);

		if (len == n && strncmp(p, code, n) == 0)
			return true;
		p = bar ? bar + 1 : NULL;
	}
	return false;
}

START_TEST(test_bad_input)
{
	const struct bad_case *bc = &bad_cases[_i];
	char key[160], *body = NULL, *d;
	const char *bearer = NULL, *err, *msg;
	size_t body_len = 0;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();
	long long rows_before, rows_after;
	long off;
	json_t *lines, *l;
	const char *p[1];
	char like[200];
	long long st;

	snprintf(key, sizeof(key), "%s-bad%02d", tl_run, _i);
	switch (bc->auth) {
	case AUTH_DEV: bearer = g_key_dev; break;
	case AUTH_NONE: bearer = NULL; break;
	case AUTH_EMPTY: bearer = ""; break;
	case AUTH_UNKNOWN: bearer = g_fake_key; break;
	}
	if (bc->kind == BODY_300K)
		body = big_body(key, 300 * 1024);
	else if (bc->kind == BODY_1500K)
		body = big_body(key, 1536 * 1024);
	else if (bc->body != NULL)
		body = fill(bc->body, key);
	if (body != NULL)
		body_len = strlen(body);

	rows_before = ledger_rows(c);
	off = tl_log_offset();
	tl_http(bc->method, bc->path, bearer, bc->ctype, body, body_len, &r);

	ck_assert_msg(r.status == bc->status, "%s (%s): HTTP %ld, expected %ld%s%s; body: %.1000s",
	              bc->name, r.what, r.status, bc->status, r.error[0] ? "; curl: " : "",
	              r.error, r.body);
	ck_assert_msg(json_is_object(r.json), "%s: the answer is not a JSON object: %.1000s",
	              bc->name, r.body);
	ck_assert_msg(strncmp(r.content_type, "application/problem+json", 24) == 0,
	              "%s: Content-Type %s", bc->name, r.content_type);
	err = tl_jstr(r.json, "error");
	ck_assert_msg(err != NULL && code_in(err, bc->errors), "%s: error %s, expected %s; body: %s",
	              bc->name, err ? err : "(none)", bc->errors, r.body);
	msg = tl_jstr(r.json, "message");
	ck_assert_msg(msg != NULL && *msg != '\0', "%s: no message: %s", bc->name, r.body);
	if (bc->field != NULL)
		ck_assert_msg(tl_jstr(r.json, "field") && strcmp(tl_jstr(r.json, "field"), bc->field) == 0,
		              "%s: field should be %s: %s", bc->name, bc->field, r.body);
	if (bc->status == 405)
		ck_assert_msg(strstr(r.allow, "POST") != NULL, "%s: Allow: \"%s\"", bc->name, r.allow);
	ck_assert_msg(strstr(r.body, g_marker) == NULL, "%s: the answer echoes the payload: %.500s",
	              bc->name, r.body);

	/* Nothing written. */
	rows_after = ledger_rows(c);
	ck_assert_msg(rows_after == rows_before, "%s: ledger rows %lld → %lld", bc->name,
	              rows_before, rows_after);
	snprintf(like, sizeof(like), "%s-bad%02d%%", tl_run, _i);
	p[0] = like;
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key LIKE $1", 1, p), 0);

	/* Exactly one decision line (nginx's own 413 may have none). */
	lines = tl_log_collect(off, tl_log_is_request, NULL, bc->event ? 1 : 0);
	d = dump_lines(lines);
	if (bc->event != NULL) {
		ck_assert_msg(json_array_size(lines) == 1, "%s: %zu log lines, expected one %s: %.2000s",
		              bc->name, json_array_size(lines), bc->event, d);
		l = json_array_get(lines, 0);
		expect_log_line(l, bc->event, NULL, NULL, (int)bc->status);
		/* A body the responder read and refused came from a known client. */
		if (bc->auth == AUTH_DEV && bc->status == 400)
			ck_assert_msg(tl_jstr(l, "client") && strcmp(tl_jstr(l, "client"), "dev") == 0,
			              "%s: the log line does not name the client: %s", bc->name, d);
	} else {
		ck_assert_msg(json_array_size(lines) <= 1, "%s: %zu log lines: %.2000s", bc->name,
		              json_array_size(lines), d);
		if (json_array_size(lines) == 1) {
			l = json_array_get(lines, 0);
			ck_assert_msg(tl_jint(l, "status", &st) && st == bc->status,
			              "%s: log line: %s", bc->name, d);
		}
	}
	free(d);
	json_decref(lines);
	tl_resp_free(&r);
	free(body);
	PQfinish(c);
}
END_TEST

START_TEST(test_revoked_key)
{
	char key[160], key2[160], *out = NULL;
	struct claimed a;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();
	long long before;
	long off;
	json_t *lines;
	int rc;

	ck_assert_msg(g_key_r != NULL, "no client to revoke: `oncegatectl client add` failed in main()");
	tl_mkkey(key, sizeof(key), "revoked-a");
	tl_mkkey(key2, sizeof(key2), "revoked-b");

	/* The key works ... */
	claim(g_key_r, key, NULL, 30, &r);
	expect_claimed(&r, key, 1, NULL, &a);
	tl_resp_free(&r);

	/* ... until it is revoked, from the next request on. */
	ck_assert_int_eq(tl_client_revoke(g_client_r), 0);
	rc = tl_ctl(&out, "client", "list", (char *)NULL);
	ck_assert_msg(rc == 0 && out != NULL && strstr(out, g_client_r) != NULL,
	              "client list (exit %d) does not show %s: %s", rc, g_client_r, out ? out : "");
	free(out);

	before = ledger_rows(c);
	off = tl_log_offset();
	claim(g_key_r, key2, NULL, 30, &r);
	expect_error(&r, 401, "unauthorized");
	tl_resp_free(&r);
	ck_assert_int_eq(ledger_rows(c), before);
	ck_assert_int_eq(tl_runs_of_key(c, key2), 0);
	lines = tl_log_collect(off, tl_log_is_request, NULL, 1);
	ck_assert_int_eq(json_array_size(lines), 1);
	expect_log_line(json_array_get(lines, 0), "auth.failed", NULL, NULL, 401);
	json_decref(lines);

	/* Its old run is out of reach too. */
	get_run(g_key_r, key, &r);
	expect_error(&r, 401, "unauthorized");
	tl_resp_free(&r);
	renew(g_key_r, key, a.owner, a.version, 5, &r);
	expect_error(&r, 401, "unauthorized");
	tl_resp_free(&r);
	PQfinish(c);
}
END_TEST

/* The responder starts a claim with the insert or with the read, by what
 * the thread's last claim was (new or not). The answers must not depend on
 * that guess: mixed histories over many threads, with two tenants sharing
 * every key, get the same answers and rows either way. */
START_TEST(test_claim_answers_whatever_the_first_statement)
{
	PGconn *c = tl_pg_connect();
	struct tl_resp r;
	struct claimed a, b;
	char key[160];
	int i;

	ck_assert_msg(g_key_b != NULL, "no second client: `oncegatectl client add` failed in main()");
	for (i = 0; i < 24; i++) {
		json_t *other = json_pack("{s:s, s:i}", "текст", "другой 订单 ✉️", "n", i);

		snprintf(key, sizeof(key), "заказ:北京:🚚:mixed-%d-%d", getpid(), i);
		claim(g_key_dev, key, NULL, 30, &r);
		expect_claimed(&r, key, 1, NULL, &a);
		tl_resp_free(&r);
		if (i % 3 != 0) { /* a history of duplicates on some threads */
			claim(g_key_dev, key, NULL, 30, &r);
			expect_duplicate(&r, key, "processing");
			tl_resp_free(&r);
		}
		claim(g_key_dev, key, other, 30, &r);
		expect_error(&r, 422, "payload_mismatch");
		tl_resp_free(&r);
		claim(g_key_b, key, NULL, 30, &r);
		expect_claimed(&r, key, 1, NULL, &b);
		tl_resp_free(&r);
		ck_assert_str_ne(a.owner, b.owner);
		claim(g_key_b, key, NULL, 30, &r);
		expect_duplicate(&r, key, "processing");
		tl_resp_free(&r);
		ck_assert_int_eq(tl_runs_of_key(c, key), 2);
	}
	PQfinish(c);
}
END_TEST

/* A claim is authenticated by its own statement; a body refused before it
 * gets there is answered only after the key was checked, so a caller
 * without a valid key learns nothing about its body (401, not 400), and
 * its log line carries no key of the caller's choosing. */
START_TEST(test_claim_refused_body_unauthenticated)
{
	static const char unknown_key[] = "og_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_AbCDe";
	static const struct {
		const char *body;
		const char *code; /* with a valid key */
	} cases[] = {
		{ "{\"key\":\"заказ:北京:🚚:1\",\"payload\":{\"שלום\":1},\"bogus\":1}",
		  "invalid_field" },
		{ "{\"key\":\"заказ:北京:🚚:2\"}", "invalid_field" },
		{ "{\"key\":\"\",\"payload\":{\"a\":1}}", "invalid_key" },
		{ "{\"key\":\"заказ:北京:🚚:3\",\"payload\":{\"a\":1},\"lease_seconds\":-5}",
		  "invalid_field" },
	};
	PGconn *c = tl_pg_connect();
	struct tl_resp r;
	long long before;
	json_t *lines;
	size_t i;
	long off;

	ck_assert_uint_eq(strlen(unknown_key), 46);
	before = ledger_rows(c);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		off = tl_log_offset();
		tl_post_text("/v1/runs", unknown_key, cases[i].body, &r);
		expect_error(&r, 401, "unauthorized");
		tl_resp_free(&r);
		lines = tl_log_collect(off, tl_log_is_request, NULL, 1);
		ck_assert_int_eq(json_array_size(lines), 1);
		expect_log_line(json_array_get(lines, 0), "auth.failed", NULL, NULL, 401);
		ck_assert_msg(json_object_get(json_array_get(lines, 0), "key") == NULL &&
		                  json_object_get(json_array_get(lines, 0), "client") == NULL,
		              "the 401 line names a key or client: case %zu", i);
		json_decref(lines);

		tl_post_text("/v1/runs", g_key_dev, cases[i].body, &r);
		expect_error(&r, 400, cases[i].code);
		tl_resp_free(&r);
	}
	/* a well-formed claim with the unknown key writes nothing either */
	tl_post_text("/v1/runs", unknown_key,
	             "{\"key\":\"заказ:北京:🚚:4\",\"payload\":{\"a\":1}}", &r);
	expect_error(&r, 401, "unauthorized");
	tl_resp_free(&r);
	ck_assert_int_eq(ledger_rows(c), before);
	PQfinish(c);
}
END_TEST

START_TEST(test_transition_to_not_allowed)
{
	static const char *const targets[] = { "approved", "awaiting_human", "processing", "done" };
	char key[160], *before, *after, *d;
	struct claimed a;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();
	long off;
	json_t *lines;
	size_t i;

	tl_mkkey(key, sizeof(key), "to-approved");
	claim(g_key_dev, key, NULL, 30, &r);
	expect_claimed(&r, key, 1, NULL, &a);
	tl_resp_free(&r);
	before = tl_run_row(c, "dev", key);

	for (i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
		off = tl_log_offset();
		transition(g_key_dev, key, a.owner, a.version, targets[i], NULL, NULL, NULL, &r);
		expect_error(&r, 400, "invalid_field");
		ck_assert_msg(tl_jstr(r.json, "field") && strcmp(tl_jstr(r.json, "field"), "to") == 0,
		              "to=%s: field should be \"to\": %s", targets[i], r.body);
		tl_resp_free(&r);
		lines = tl_log_collect(off, tl_log_is_request, NULL, 1);
		d = dump_lines(lines);
		ck_assert_msg(json_array_size(lines) == 1, "to=%s: log lines: %s", targets[i], d);
		expect_log_line(json_array_get(lines, 0), "request.invalid", NULL, "dev", 400);
		free(d);
		json_decref(lines);
	}
	after = tl_run_row(c, "dev", key);
	ck_assert_str_eq(after, before);
	free(before);
	free(after);
	PQfinish(c);
}
END_TEST

START_TEST(test_unknown_run)
{
	char key[160];
	struct tl_resp r;
	long off = tl_log_offset();
	json_t *lines;

	tl_mkkey(key, sizeof(key), "nobody-has-this");
	get_run(g_key_dev, key, &r);
	expect_error(&r, 404, "run_not_found");
	tl_resp_free(&r);
	lines = log_for_key(off, key, 1);
	ck_assert_int_eq(json_array_size(lines), 1);
	expect_log_line(json_array_get(lines, 0), "run.not_found", NULL, "dev", 404);
	json_decref(lines);
	renew(g_key_dev, key, "00000000-0000-4000-8000-000000000000", 1, 5, &r);
	expect_error(&r, 404, "run_not_found");
	tl_resp_free(&r);
	transition(g_key_dev, key, "00000000-0000-4000-8000-000000000000", 1, "completed",
	           NULL, NULL, NULL, &r);
	expect_error(&r, 404, "run_not_found");
	tl_resp_free(&r);
}
END_TEST

/* ---- 8. GET status ------------------------------------------------------ */

static size_t
timeline_find(const json_t *tl, const char *event, size_t from)
{
	size_t i;

	for (i = from; i < json_array_size(tl); i++) {
		const char *ev = tl_jstr(json_array_get(tl, i), "event");

		if (ev != NULL && strcmp(ev, event) == 0)
			return i;
	}
	return (size_t)-1;
}

START_TEST(test_status)
{
	char key[160], hash[72], corr[96], *path, *s;
	struct claimed a;
	struct tl_resp r;
	json_t *body, *tl, *e, *want;
	long long v, v2;
	size_t ic, it, i;
	double t0, t1, prev = 0;
	static const char *const ts_fields[] = { "created_at", "updated_at" };

	/* A key with '/', ':' and a space travels percent-encoded. */
	snprintf(key, sizeof(key), "%s-status/acme:lead 42", tl_run);
	snprintf(corr, sizeof(corr), "corr-%s", tl_run);
	std_hash(hash);
	body = json_pack("{s:s, s:o, s:s, s:s, s:s, s:i}", "key", key, "payload", std_payload(),
	                 "workflow_version", "lead-sync@12", "trigger", "webhook:typeform",
	                 "correlation_id", corr, "lease_seconds", 30);
	tl_post_json("/v1/runs", g_key_dev, body, &r);
	json_decref(body);
	expect_claimed(&r, key, 1, hash, &a);
	tl_resp_free(&r);

	path = tl_run_path(key, NULL);
	ck_assert_msg(strstr(path, "%2F") && strstr(path, "%3A") && strstr(path, "%20"), "%s", path);
	free(path);

	get_run(g_key_dev, key, &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(json_is_object(r.json), "%s", r.body);
	ck_assert_str_eq(tl_jstr(r.json, "key") ? tl_jstr(r.json, "key") : "", key);
	ck_assert_str_eq(tl_jstr(r.json, "state") ? tl_jstr(r.json, "state") : "", "processing");
	ck_assert_msg(tl_jint(r.json, "version", &v) && v == a.version, "version: %s", r.body);
	ck_assert_msg(tl_jint(r.json, "attempt", &v) && v == 1, "attempt: %s", r.body);
	ck_assert_str_eq(tl_jstr(r.json, "payload_hash") ? tl_jstr(r.json, "payload_hash") : "", hash);
	ck_assert_str_eq(tl_jstr(r.json, "workflow_version") ? tl_jstr(r.json, "workflow_version") : "", "lead-sync@12");
	ck_assert_str_eq(tl_jstr(r.json, "trigger") ? tl_jstr(r.json, "trigger") : "", "webhook:typeform");
	ck_assert_str_eq(tl_jstr(r.json, "correlation_id") ? tl_jstr(r.json, "correlation_id") : "", corr);
	ck_assert_str_eq(tl_jstr(r.json, "lease_owner") ? tl_jstr(r.json, "lease_owner") : "", a.owner);
	ck_assert_str_eq(tl_jstr(r.json, "lease_expires_at") ? tl_jstr(r.json, "lease_expires_at") : "", a.expires);
	for (i = 0; i < 2; i++)
		ck_assert_msg(tl_ts_parse(tl_jstr(r.json, ts_fields[i]), &t0), "%s: %s", ts_fields[i], r.body);
	ck_assert_msg(json_is_array(json_object_get(r.json, "approvals")) &&
	              json_array_size(json_object_get(r.json, "approvals")) == 0, "approvals: %s", r.body);
	ck_assert_msg(json_is_array(json_object_get(r.json, "effects")) &&
	              json_array_size(json_object_get(r.json, "effects")) == 0, "effects: %s", r.body);
	tl = json_object_get(r.json, "timeline");
	ck_assert_msg(json_is_array(tl), "timeline: %s", r.body);
	ic = timeline_find(tl, "run.claimed", 0);
	ck_assert_msg(ic != (size_t)-1, "no run.claimed in the timeline: %s", r.body);
	e = json_array_get(tl, ic);
	ck_assert_str_eq(tl_jstr(e, "state_to") ? tl_jstr(e, "state_to") : "", "processing");
	ck_assert_msg(json_object_get(e, "attempt") == NULL || (tl_jint(e, "attempt", &v) && v == 1),
	              "claimed entry: %s", r.body);
	ck_assert_msg(strstr(r.body, g_marker) == NULL, "GET shows the raw payload? %s", r.body);
	tl_resp_free(&r);

	/* Complete it. */
	want = json_pack("{s:s, s:i}", "crm_id", "L-42", "score", 7);
	transition(g_key_dev, key, a.owner, a.version, "completed", json_deep_copy(want),
	           NULL, "synced", &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(tl_jint(r.json, "version", &v2) && v2 == a.version + 1, "%s", r.body);
	tl_resp_free(&r);

	get_run(g_key_dev, key, &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_str_eq(tl_jstr(r.json, "state") ? tl_jstr(r.json, "state") : "", "completed");
	ck_assert_msg(tl_jint(r.json, "version", &v) && v == v2, "version: %s", r.body);
	ck_assert_msg(json_equal(json_object_get(r.json, "result"), want), "result: %s", r.body);
	ck_assert_str_eq(tl_jstr(r.json, "reason") ? tl_jstr(r.json, "reason") : "", "synced");
	ck_assert_msg(tl_ts_parse(tl_jstr(r.json, "created_at"), &t0) &&
	              tl_ts_parse(tl_jstr(r.json, "updated_at"), &t1) && t1 >= t0,
	              "created_at/updated_at: %s", r.body);
	tl = json_object_get(r.json, "timeline");
	ck_assert_msg(json_is_array(tl), "timeline: %s", r.body);
	ic = timeline_find(tl, "run.claimed", 0);
	it = timeline_find(tl, "run.transitioned", 0);
	ck_assert_msg(ic != (size_t)-1 && it != (size_t)-1 && ic < it,
	              "timeline must hold run.claimed, then run.transitioned: %s", r.body);
	e = json_array_get(tl, it);
	ck_assert_str_eq(tl_jstr(e, "state_from") ? tl_jstr(e, "state_from") : "", "processing");
	ck_assert_str_eq(tl_jstr(e, "state_to") ? tl_jstr(e, "state_to") : "", "completed");
	ck_assert_msg(json_object_get(e, "version") == NULL || (tl_jint(e, "version", &v) && v == v2),
	              "transitioned entry version: %s", r.body);
	for (i = 0; i < json_array_size(tl); i++) {
		double t;

		s = json_dumps(json_array_get(tl, i), JSON_COMPACT);
		ck_assert_msg(tl_ts_parse(tl_jstr(json_array_get(tl, i), "ts"), &t) && t >= prev,
		              "timeline entry %zu has a bad or out-of-order ts: %s", i, s);
		prev = t;
		free(s);
	}
	tl_resp_free(&r);
	json_decref(want);
}
END_TEST

/* ---- 10. the decision log itself ---------------------------------------- */

static const char *const allowed_fields[] = {
	"ts", "level", "event", "program", "client", "key", "correlation_id",
	"workflow_version", "contract", "trigger", "payload_hash", "state_from",
	"state_to", "version", "actor", "decision", "approval_id", "previous_owner", "effect_id",
	"target", "provider_id", "error_class", "attempt", "model", "validation",
	"output", "reason", "detail", "hint", "request_id", "method", "path", "status", NULL,
};
static const char *const levels[] = {
	"debug", "info", "notice", "warning", "error", "alert", NULL,
};

static bool
in_list(const char *s, const char *const *list)
{
	for (; *list != NULL; list++) {
		if (strcmp(s, *list) == 0)
			return true;
	}
	return false;
}

static void
assert_absent(const char *text, const char *secret, const char *what)
{
	const char *at;

	if (secret == NULL || strlen(secret) < 8)
		return;
	at = strstr(text, secret);
	if (at != NULL) {
		/* Show where, not the secret itself. */
		const char *ls = at, *le = strchr(at, '\n');
		size_t lineno = 1;
		const char *q;

		while (ls > text && ls[-1] != '\n')
			ls--;
		for (q = text; q < ls; q++)
			lineno += *q == '\n';
		ck_abort_msg("%s appears in the decision log, line %zu: %.*s[…]%.*s", what, lineno,
		             (int)(at - ls), ls,
		             (int)((le ? le : at + strlen(at)) - (at + strlen(secret))),
		             at + strlen(secret));
	}
}

START_TEST(test_log_hygiene)
{
	char key[160], owner1[64], owner2[64], *text, *line, *save = NULL;
	struct claimed a, b;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();
	PGresult *res;
	size_t len, n = 0;
	long off = tl_log_offset();
	json_t *lines;
	char like[200];
	const char *p[1];
	int i;

	ck_assert_msg(g_key_b != NULL, "no second client");
	/* Work that touches every kind of secret: claim, renew, reclaim,
	 * transition, a wrong key. */
	tl_mkkey(key, sizeof(key), "hygiene");
	claim(g_key_b, key, NULL, 1, &r);
	expect_claimed(&r, key, 1, NULL, &a);
	tl_resp_free(&r);
	snprintf(owner1, sizeof(owner1), "%s", a.owner);
	renew(g_key_b, key, a.owner, a.version, 1, &r);
	ASSERT_STATUS(&r, 200);
	tl_resp_free(&r);
	tl_sleep_ms(1200);
	claim(g_key_b, key, NULL, 30, &r);
	expect_claimed(&r, key, 2, NULL, &b);
	tl_resp_free(&r);
	snprintf(owner2, sizeof(owner2), "%s", b.owner);
	renew(g_key_b, key, owner1, a.version + 1, 5, &r);
	expect_error(&r, 409, "lease_lost");
	tl_resp_free(&r);
	transition(g_key_b, key, b.owner, b.version, "completed", json_pack("{s:s}", "m", g_marker),
	           NULL, NULL, &r);
	ASSERT_STATUS(&r, 200);
	tl_resp_free(&r);
	claim(g_fake_key, key, NULL, 30, &r);
	expect_error(&r, 401, "unauthorized");
	tl_resp_free(&r);
	lines = log_for_key(off, key, 5);
	ck_assert_msg(json_array_size(lines) >= 5, "the work above left %zu log lines for %s",
	              json_array_size(lines), key);
	json_decref(lines);

	text = tl_log_slurp(&len);
	ck_assert_msg(text != NULL && len > 0, "cannot read %s", tl_env("ONCEGATE_LOG"));

	/* Every line: one JSON object with ts, level, event, program; the
	 * responder's lines carry only the fields the decision log defines. */
	for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		json_error_t jerr;
		json_t *o = json_loads(line, 0, &jerr);
		const char *k, *prog, *lvl, *ev, *pth;
		json_t *v;
		double t;

		n++;
		ck_assert_msg(json_is_object(o), "log line %zu is not a JSON object (%s): %.500s",
		              n, jerr.text, line);
		ck_assert_msg(tl_ts_parse(tl_jstr(o, "ts"), &t), "log line %zu: ts: %.500s", n, line);
		lvl = tl_jstr(o, "level");
		ck_assert_msg(lvl != NULL && in_list(lvl, levels), "log line %zu: level: %.500s", n, line);
		ev = tl_jstr(o, "event");
		ck_assert_msg(ev != NULL && strchr(ev, '.') != NULL, "log line %zu: event: %.500s", n, line);
		prog = tl_jstr(o, "program");
		ck_assert_msg(prog != NULL && *prog != '\0', "log line %zu: program: %.500s", n, line);
		if (strcmp(prog, "oncegate-fcgi") == 0) {
			json_object_foreach(o, k, v) {
				ck_assert_msg(in_list(k, allowed_fields),
				              "log line %zu carries field \"%s\", not a decision-log field: %.500s", n, k, line);
			}
		}
		/* Every key this suite makes starts "ck1…" (the epoch). */
		pth = tl_jstr(o, "path");
		ck_assert_msg(pth == NULL || (strstr(pth, "ck1") == NULL && strchr(pth, '%') == NULL),
		              "log line %zu: path must be the route pattern, not the raw path: %.500s",
		              n, line);
		json_decref(o);
	}
	free(text);

	text = tl_log_slurp(&len);
	assert_absent(text, g_key_dev, "the dev API key");
	assert_absent(text, g_key_b, "the second client's API key");
	assert_absent(text, g_key_r, "the revoked client's API key");
	assert_absent(text, g_fake_key, "a presented (unknown) API key");
	assert_absent(text, "SECRET-PAYLOAD-MARKER", "a payload (marker string)");
	assert_absent(text, owner1, "a lease owner");
	assert_absent(text, owner2, "a lease owner");
	assert_absent(text, "Bearer ", "an Authorization header");

	/* Every lease owner the ledger holds for this run's keys, and every
	 * client's key hash. */
	snprintf(like, sizeof(like), "%s%%", tl_run);
	p[0] = like;
	res = PQexecParams(c, "SELECT lease_owner::text FROM workflow_runs "
	                   "WHERE idempotency_key LIKE $1 AND lease_owner IS NOT NULL "
	                   "UNION ALL SELECT encode(key_hash, 'hex') FROM api_clients",
	                   1, NULL, p, NULL, NULL, 0);
	ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK, "%s", PQresultErrorMessage(res));
	for (i = 0; i < PQntuples(res); i++)
		assert_absent(text, PQgetvalue(res, i, 0), "a lease owner or an API key hash");
	PQclear(res);
	free(text);
	PQfinish(c);
}
END_TEST

/* ---- 9. the database goes away and comes back --------------------------- */

static void
pg_ensure_started(void)
{
	const char *start = tl_env("ONCEGATE_TEST_PG_START");

	if (start != NULL && PQping("") != PQPING_OK)
		(void)tl_shell(start);
}

/* The pids of this stack's responders, sorted, one a line: the processes
 * named oncegate-fcgi whose command line names $ONCEGATE_CONF (all of them
 * when none does), so that another stack on the host does not count. */
static char *
responder_pids(void)
{
	const char *conf = tl_env("ONCEGATE_CONF");
	char *all = tl_shell_output("pgrep -f '[o]ncegate-fcgi' | sort -n");
	char *mine, *line, *save = NULL;
	size_t len;

	if (all == NULL)
		return NULL;
	len = strlen(all);
	mine = calloc(1, len + 1);
	ck_assert_ptr_nonnull(mine);
	for (line = strtok_r(all, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		if (conf != NULL && tl_cmdline_has((pid_t)atoi(line), conf)) {
			strcat(mine, line);
			strcat(mine, "\n");
		}
	}
	free(all);
	if (*mine == '\0') {
		free(mine);
		return tl_shell_output("pgrep -f '[o]ncegate-fcgi' | sort -n");
	}
	return mine;
}

static void
expect_unavailable(const struct tl_resp *r)
{
	char *end = NULL;
	long ra;

	expect_error(r, 503, "database_unavailable");
	ra = strtol(r->retry_after, &end, 10);
	ck_assert_msg(r->retry_after[0] != '\0' && end != NULL && *end == '\0' && ra > 0,
	              "%s: 503 without a usable Retry-After (\"%s\")", r->what, r->retry_after);
}

START_TEST(test_database_outage)
{
	const char *stop = tl_env("ONCEGATE_TEST_PG_STOP");
	const char *start = tl_env("ONCEGATE_TEST_PG_START");
	static struct racer racers[AFTER_OUTAGE];
	char key[160], key2[160], *pids_before, *pids_after, *d, *bodies[AFTER_OUTAGE];
	struct claimed a;
	struct tl_resp r;
	double deadline;
	long off;
	json_t *lines;
	int i, rc;
	PGconn *c;

	ck_assert_msg(stop != NULL && start != NULL,
	              "ONCEGATE_TEST_PG_STOP / ONCEGATE_TEST_PG_START are not set");
	tl_mkkey(key, sizeof(key), "outage");
	pids_before = responder_pids();
	ck_assert_msg(pids_before != NULL && *pids_before != '\0', "no oncegate-fcgi process found");

	rc = tl_shell(stop);
	ck_assert_msg(rc == 0, "ONCEGATE_TEST_PG_STOP (%s) exited %d", stop, rc);

	tl_get("/healthz", NULL, &r);
	ASSERT_STATUS(&r, 503);
	ck_assert_msg(tl_jstr(r.json, "error") && strcmp(tl_jstr(r.json, "error"), "database_unavailable") == 0,
	              "/healthz body: %s", r.body);
	ck_assert_msg(r.retry_after[0] != '\0', "/healthz 503 without Retry-After");
	tl_resp_free(&r);
	/* readiness says why */
	tl_get("/readyz", NULL, &r);
	ASSERT_STATUS(&r, 503);
	ck_assert_msg(tl_jstr(r.json, "error") && strcmp(tl_jstr(r.json, "error"), "not_ready") == 0 &&
	              strstr(r.body, "\"database_unavailable\"") != NULL,
	              "/readyz body during the outage: %s", r.body);
	ck_assert_msg(r.retry_after[0] != '\0', "/readyz 503 without Retry-After");
	tl_resp_free(&r);

	off = tl_log_offset();
	claim(g_key_dev, key, NULL, 30, &r);
	expect_unavailable(&r);
	tl_resp_free(&r);
	lines = tl_log_collect(off, tl_log_is_request, NULL, 1);
	d = dump_lines(lines);
	ck_assert_msg(json_array_size(lines) == 1, "claim during the outage: log lines %s", d);
	expect_log_line(json_array_get(lines, 0), "db.unavailable", NULL, NULL, 503);
	free(d);
	json_decref(lines);

	get_run(g_key_dev, key, &r);
	expect_unavailable(&r);
	tl_resp_free(&r);

	rc = tl_shell(start);
	ck_assert_msg(rc == 0, "ONCEGATE_TEST_PG_START (%s) exited %d", start, rc);

	deadline = tl_now() + OUTAGE_WAIT_S;
	for (;;) {
		tl_get("/healthz", NULL, &r);
		if (r.status == 200 || tl_now() > deadline)
			break;
		tl_resp_free(&r);
		tl_sleep_ms(250);
	}
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(tl_jstr(r.json, "status") && strcmp(tl_jstr(r.json, "status"), "ok") == 0,
	              "/healthz body: %s", r.body);
	tl_resp_free(&r);

	/* The claim refused during the outage left nothing half-done: this is
	 * attempt 1 of a fresh run. A worker whose reconnect failed within the
	 * last second may still answer 503 (it tries once a second), so retry
	 * a few times as a client honouring Retry-After would. */
	deadline = tl_now() + 5;
	for (;;) {
		claim(g_key_dev, key, NULL, 30, &r);
		if (r.status != 503 || tl_now() > deadline)
			break;
		expect_unavailable(&r);
		tl_resp_free(&r);
		tl_sleep_ms(200);
	}
	expect_claimed(&r, key, 1, NULL, &a);
	tl_resp_free(&r);
	c = tl_pg_connect();
	ck_assert_int_eq(tl_runs_of_key(c, key), 1);
	PQfinish(c);

	/* Past that second every worker answers again, each on a fresh
	 * connection of its own: enough claims at once to busy all of them. */
	tl_sleep_ms(1100);
	for (i = 0; i < AFTER_OUTAGE; i++) {
		json_t *b;

		snprintf(key2, sizeof(key2), "%s-after-outage-%02d", tl_run, i);
		b = json_pack("{s:s, s:o}", "key", key2, "payload", std_payload());
		bodies[i] = json_dumps(b, JSON_COMPACT);
		json_decref(b);
		racers[i].body = bodies[i];
	}
	tl_race(racer_main, racers, sizeof(racers[0]), AFTER_OUTAGE);
	for (i = 0; i < AFTER_OUTAGE; i++) {
		ck_assert_msg(racers[i].r.status == 201, "claim %d after recovery: HTTP %ld %s",
		              i, racers[i].r.status, racers[i].r.body);
		tl_resp_free(&racers[i].r);
		free(bodies[i]);
	}

	pids_after = responder_pids();
	ck_assert_msg(pids_after != NULL && strcmp(pids_after, pids_before) == 0,
	              "the responder was restarted: pids before \"%s\", after \"%s\"",
	              pids_before, pids_after ? pids_after : "");
	free(pids_before);
	free(pids_after);
}
END_TEST

/* ---- the suite ---------------------------------------------------------- */

TL_SUITE(api_suite, "api",
         {"ledger", 60,
          .tests = TL_LIST(test_healthz_ok, test_readyz_ok, test_concurrent_claims,
                           test_expired_lease_reclaimed, test_failed_retryable_reclaimed,
                           test_completed_is_duplicate, test_failed_terminal_is_duplicate,
                           test_payload_mismatch, test_payload_reordered_is_duplicate,
                           test_payload_numbers_as_given, test_clients_are_isolated,
                           test_corpus_keys_two_tenants, test_duplicate_window, test_lease_cap,
                           test_default_lease_clamped, test_boundaries_accepted, test_status,
                           test_unknown_run)},
         {"bad_input", 60, .loops = TL_LOOPS({test_bad_input, N_BAD_CASES}),
          .tests = TL_LIST(test_revoked_key, test_claim_refused_body_unauthenticated,
                           test_claim_answers_whatever_the_first_statement,
                           test_transition_to_not_allowed)},
         {"log", 60, .tests = TL_LIST(test_log_hygiene)},
         /* Last and alone: it stops the database. The unchecked teardown
          * runs in the runner's process, so the cluster comes back even when
          * the test fails or times out. */
         {"outage", 60, .unchecked_teardown = pg_ensure_started,
          .tests = TL_LIST(test_database_outage)})

static bool
prepare(void)
{
	snprintf(g_marker, sizeof(g_marker), "SECRET-PAYLOAD-MARKER-%s", tl_run);
	snprintf(g_fake_key, sizeof(g_fake_key), "og_fake_%s_0123456789abcdefABCDEF", tl_run);
	g_key_dev = tl_env("ONCEGATE_API_KEY");
	snprintf(g_client_b, sizeof(g_client_b), "%s-b", tl_run);
	snprintf(g_client_r, sizeof(g_client_r), "%s-r", tl_run);
	g_key_b = tl_client_add(g_client_b);
	g_key_r = tl_client_add(g_client_r);
	return true;
}

static void
finish(void)
{
	pg_ensure_started();
	free(g_key_b);
	free(g_key_r);
}

TL_STACK_MAIN(.name = "check_api", .prefix = "ck",
              .needed = "ONCEGATE_API_KEY ONCEGATE_CONF ONCEGATE_LOG ONCEGATE_CTL",
              .suite = api_suite, .prepare = prepare, .finish = finish)

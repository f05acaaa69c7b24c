/*
 * check_dispatch.c — integration suite of the outbox dispatcher:
 * oncegate-dispatch against real providers on loopback, on the cluster that
 * `./dev test` starts. Without ONCEGATE_URL or ONCEGATE_DISPATCH the suite is
 * skipped (exit 77).
 *
 * The stack runs no dispatcher of its own: every test starts the
 * dispatchers it needs ($ONCEGATE_DISPATCH, built with ASan/UBSan), each
 * with its own config, decision log and stderr file in the suite's
 * temporary directory, and stops them by PID. The providers
 * (tests/providers: http_provider.py, smtp_sink.py) are started once by
 * main() and stopped after the run. A test that fails half-way leaves its
 * dispatchers behind; the next test's setup (and main() at the end) kills
 * every process the suite registered, so nothing outlives the suite.
 *
 * Work is created as the responder would create it: a workflow_runs row in
 * state `approved` and effect_outbox rows, then NOTIFY oncegate_outbox; the
 * expired-approval test goes through the API. Keys carry a per-run prefix
 * ("dt<epoch>-<pid>"), so the suite can run again on the same database.
 * Each test asserts what the provider really received (its own record of
 * requests and committed effects), the rows, and the decision log.
 *
 * The kill switch's database flag is global: each test sets it itself
 * (through oncegatectl), and the setup cancels every effect an earlier
 * test (or suite) left pending, so no dispatcher ever sees foreign work.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "dispatchlib.h"
#include "testlib.h"

/* What the suite's dispatchers and providers are told. */
#define STALL_S            60      /* http_provider --stall-seconds: longer than any wait here */
#define MAIL_FROM          "oncegate@dispatch.example"
#define MAIL_DOMAIN        "dispatch.example"
#define TEST_TIMEOUT_S     300
#define BULK_EFFECTS       2000
#define BULK_DISPATCHERS   4
/* The ambiguous-outcome test's dispatcher lease (the shortest a dispatcher
 * accepts), and how long it watches the effects it must never send again:
 * more than two leases (one taken at the send has run out and could have
 * been claimed again), every retry of the targets' schedule (0.2 + 0.4 +
 * 0.8 + 1.6 s) and a reconcile pass each second. */
#define AMBIGUOUS_LEASE_S  5
#define AMBIGUOUS_WATCH_S  12
/* test stack (./dev): the responder accepts callbacks on n8n's origin */
#define CALLBACK_ORIGIN    "http://127.0.0.1:5678"

static const char *g_key_dev;     /* API key of client "dev" */
static char g_client[24];         /* its id: the runs the suite creates are its own */

/* ---- small helpers ------------------------------------------------------- */

#define JSTR(o, n) (tl_jstr((o), (n)) ? tl_jstr((o), (n)) : "(none)")


static long long
jint(const json_t *o, const char *name)
{
	long long v = -1;

	return tl_jint(o, name, &v) ? v : -1;
}


/* ---- PostgreSQL ------------------------------------------------------------ */






/* A run as the responder leaves it once its effects may go out. */
static void
make_run(PGconn *c, const char *key, const char *output)
{
	dl_make_run(c, g_client, key, "dispatch-suite@1", NULL, output);
}

/* One effect of run `key`, due `delay_s` from now; its id in id[40]. */
static void
add_effect_at(PGconn *c, const char *key, const char *type, const char *target,
              const char *payload, double delay_s, char id[40])
{
	dl_add_effect(c, g_client, key, type, target, payload, delay_s, id);
}

static void
add_effect(PGconn *c, const char *key, const char *type, const char *target,
           const char *payload, char id[40])
{
	dl_add_effect(c, g_client, key, type, target, payload, 0, id);
}

static void
notify(PGconn *c)
{
	qexec(c, "NOTIFY oncegate_outbox", (char *)NULL);
}

static char *
wait_run(PGconn *c, const char *key, const char *want, double secs)
{
	double deadline = tl_now() + secs;
	char *st;

	for (;;) {
		st = dl_run_state(c, g_client, key);
		if (streq(st, want) || tl_now() > deadline)
			return st;
		free(st);
		tl_sleep_ms(100);
	}
}

/* Whether the provider's requests include one with this idempotency key. */
static bool
sent_to_provider(const json_t *reqs, const char *provider_key)
{
	const json_t *r;
	size_t i;

	json_array_foreach(reqs, i, r)
		if (streq(tl_jstr(r, "idempotency_key"), provider_key))
			return true;
	return false;
}

static long long
blocked_sends(PGconn *c)
{
	return qnum(c, "SELECT blocked_sends FROM dispatch_control", (char *)NULL);
}

/* A request header, case-insensitively. */
static const char *
req_header(const json_t *req, const char *name)
{
	json_t *h = json_object_get(req, "headers"), *v;
	const char *k;

	json_object_foreach(h, k, v)
		if (strcasecmp(k, name) == 0)
			return json_string_value(v);
	return NULL;
}

static double
req_time(const json_t *req)
{
	return json_number_value(json_object_get(req, "time"));
}

/* The provider key of effect type `type` of run `key`, and its "key/" prefix. */
static void
pkey(char *buf, size_t n, const char *key, const char *type)
{
	snprintf(buf, n, "%s/%s", key, type);
}

/* ---- a dispatcher's decision log --------------------------------------------- */

/* A decision log's line: one JSON object (anything else is a bug worth
 * seeing); kept when it is about run `key` (any when key is NULL). */
static bool
log_line_of(const json_t *line, const void *key)
{
	if (!json_is_object(line))
		ck_abort_msg("not a JSON line: %s", json_string_value(line));
	return key == NULL || streq(tl_jstr(line, "key"), key);
}

/* The lines of the decision log at path about run `key` (all when key is
 * NULL); it holds no blank line. */
static json_t *
log_lines(const char *path, const char *key)
{
	size_t len;
	char *text = tl_file_slurp(path, &len);
	json_t *out = tl_json_lines(text, len, log_line_of, key);

	ck_assert_msg(text == NULL || (memmem(text, len, "\n\n", 2) == NULL && text[0] != '\n'),
	              "%s: a blank line", path);
	free(text);
	return out;
}

/* Lines with event == ev (and effect_id == effect when given). */
static json_t *
log_select(const json_t *lines, const char *ev, const char *effect)
{
	json_t *out = json_array(), *l;
	size_t i;

	json_array_foreach(lines, i, l)
		if (streq(tl_jstr(l, "event"), ev) &&
		    (effect == NULL || streq(tl_jstr(l, "effect_id"), effect)))
			json_array_append(out, l);
	return out;
}

static size_t
log_count(const char *path, const char *key, const char *ev, const char *effect)
{
	json_t *lines = log_lines(path, key), *sel = log_select(lines, ev, effect);
	size_t n = json_array_size(sel);

	json_decref(sel);
	json_decref(lines);
	return n;
}

/* Polls until `want` lines of event ev (about key / effect) are there. */
static size_t
wait_log(const char *path, const char *key, const char *ev, const char *effect, size_t want,
         double secs)
{
	double deadline = tl_now() + secs;
	size_t n;

	for (;;) {
		n = log_count(path, key, ev, effect);
		if (n >= want || tl_now() > deadline)
			return n;
		tl_sleep_ms(50);
	}
}

/* The one line of event ev about effect (a new reference); fails unless
 * there is exactly one. */
static json_t *
log_one(const char *path, const char *key, const char *ev, const char *effect)
{
	json_t *lines = log_lines(path, key), *sel = log_select(lines, ev, effect), *l;
	char *all;

	if (json_array_size(sel) != 1) {
		all = tl_json_text(lines);
		ck_abort_msg("%s: %zu lines of %s for effect %s of %s, expected 1; the key's lines: %s",
		             path, json_array_size(sel), ev, effect ? effect : "(any)", key, all);
	}
	l = json_incref(json_array_get(sel, 0));
	json_decref(sel);
	json_decref(lines);
	return l;
}

/* ---- dispatchers ------------------------------------------------------------- */

struct dconf {
	int workers;
	int batch;
	int lease_s;
	int poll_ms;
	int shutdown_s;
	int reconcile_s;
};

static const struct dconf DCONF = { 2, 4, 30, 200, 5, 1 };

struct disp {
	struct dl_disp dl;
	int shutdown_s;
};

/* The config: the dispatcher's settings, then every target of the suite
 * (the test decides which ones its effects name). */
static char *
dconf_text(const struct dconf *d, const char *log)
{
	int P = g_http_port;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	ck_assert_ptr_nonnull(f);
	fprintf(f,
	        "# check_dispatch: one of the suite's dispatchers\n"
	        "log_file = %s\nlog_level = info\n"
	        "dispatch_workers = %d\ndispatch_batch = %d\ndispatch_lease_seconds = %d\n"
	        "dispatch_poll_ms = %d\ndispatch_shutdown_seconds = %d\n"
	        "reconcile_interval_seconds = %d\nretention_days = 7\n\n",
	        log, d->workers, d->batch, d->lease_s, d->poll_ms, d->shutdown_s, d->reconcile_s);
	dl_conf_contracts(f);
	fputc('\n', f);
	/* honours Idempotency-Key; the id in a header */
	fprintf(f, "[target t_http]\nkind = http\nurl = http://127.0.0.1:%d/idem/effects\n"
	        "idempotency_key = 1\nprovider_id_header = X-Provider-Id\ntimeout_ms = 5000\n"
	        "max_attempts = 5\nbase_ms = 200\ncap_ms = 2000\njitter_percent = 0\n\n", P);
	fprintf(f, "[target t_smtp]\nkind = smtp\nurl = smtp://127.0.0.1:%d\nmail_from = %s\n"
	        "timeout_ms = 5000\nmax_attempts = 2\nbase_ms = 200\ncap_ms = 1000\n\n",
	        g_smtp_port, MAIL_FROM);
	/* no idempotency keys, no lookup: an ambiguous outcome waits for a person */
	fprintf(f, "[target t_plain]\nkind = http\nurl = http://127.0.0.1:%d/plain/effects\n"
	        "idempotency_key = 0\ntimeout_ms = 1500\nmax_attempts = 5\nbase_ms = 200\n"
	        "cap_ms = 2000\njitter_percent = 0\n\n", P);
	/* no idempotency keys, but a lookup URL to reconcile through */
	fprintf(f, "[target t_lookup]\nkind = http\nurl = http://127.0.0.1:%d/plain/effects\n"
	        "lookup_url = http://127.0.0.1:%d/plain/effects/lookup\nidempotency_key = 0\n"
	        "timeout_ms = 1500\nmax_attempts = 5\nbase_ms = 200\ncap_ms = 2000\n"
	        "jitter_percent = 0\n\n", P, P);
	/* honours keys, short timeout: a timeout after the send is retried */
	fprintf(f, "[target t_idem]\nkind = http\nurl = http://127.0.0.1:%d/idem/effects\n"
	        "idempotency_key = 1\ntimeout_ms = 1500\nmax_attempts = 5\nbase_ms = 200\n"
	        "cap_ms = 2000\njitter_percent = 0\n\n", P);
	fprintf(f, "[target t_retry]\nkind = http\nurl = http://127.0.0.1:%d/idem/effects\n"
	        "idempotency_key = 1\ntimeout_ms = 5000\nmax_attempts = 3\nbase_ms = 100\n"
	        "cap_ms = 5000\nmax_elapsed_s = 60\njitter_percent = 0\n\n", P);
	fprintf(f, "[target t_reject]\nkind = http\nurl = http://127.0.0.1:%d/idem/effects\n"
	        "idempotency_key = 1\nrejection_pointer = !/ok\ntimeout_ms = 5000\n"
	        "max_attempts = 3\nbase_ms = 100\ncap_ms = 1000\n\n", P);
	fprintf(f, "[target t_rate]\nkind = http\nurl = http://127.0.0.1:%d/plain/effects\n"
	        "idempotency_key = 0\nrate_per_second = 1\ntimeout_ms = 5000\n\n", P);
	fprintf(f, "[target t_bulk]\nkind = http\nurl = http://127.0.0.1:%d/plain/effects\n"
	        "idempotency_key = 0\ntimeout_ms = 30000\nconnect_timeout_ms = 10000\n\n", P);
	/* a send that outlasts dispatch_shutdown_seconds */
	fprintf(f, "[target t_slow]\nkind = http\nurl = http://127.0.0.1:%d/plain/effects\n"
	        "idempotency_key = 0\ntimeout_ms = 10000\n\n", P);
	/* the n8n instance that decision callbacks go to */
	fprintf(f, "[target callback]\nkind = http\nurl = http://127.0.0.1:%d/\n"
	        "timeout_ms = 5000\nmax_attempts = 3\nbase_ms = 200\ncap_ms = 1000\n", P);
	ck_assert_int_eq(fclose(f), 0);
	return text;
}


/* Writes the config, checks it with -n, starts the dispatcher and waits
 * for its dispatch.started line. */
static void
disp_start(struct disp *d, const struct dconf *dc, enum env_switch env)
{
	char *text;

	memset(d, 0, sizeof(*d));
	d->shutdown_s = dc->shutdown_s;
	text = dconf_text(dc, dl_disp_files(&d->dl));
	dl_disp_start(&d->dl, text, env);
	free(text);
}

/* SIGTERM: the exit within the shutdown deadline and a margin, status 0,
 * no sanitizer finding; returns how long it took, in seconds. */
static double
disp_stop(struct disp *d)
{
	return dl_disp_stop(&d->dl, d->shutdown_s + 15);
}

static void
disp_kill9(struct disp *d)
{
	int st = 0;

	ck_assert_int_eq(kill(d->dl.pid, SIGKILL), 0);
	ck_assert_msg(wait_exit(d->dl.pid, 10, &st), "the dispatcher did not die of SIGKILL");
	d->dl.pid = -1;
	dl_disp_check_sanitizers(&d->dl);
}

/* ---- the API (the expired-approval test) ---------------------------------- */

/* ---- the fixture ------------------------------------------------------------ */


/* ===== 1. happy path, HTTP ===================================================== */

START_TEST(test_http_happy)
{
	PGconn *c = tl_pg_connect();
	struct disp d;
	struct dconf dc = DCONF;
	char key[200], key2[200], pk[256], pk2a[256], pk2b[256], prefix[256];
	char id[40], id2a[40], id2b[40], marker[128], payload[512];
	json_t *reqs, *req, *com, *row, *att, *sent_body, *want_body, *l;
	char *st, *logtext;

	tl_mkkey(key, sizeof(key), "http-happy");
	tl_mkkey(key2, sizeof(key2), "http-two");
	snprintf(marker, sizeof(marker), "PAYLOAD-MARKER-%s", tl_run);
	snprintf(payload, sizeof(payload),
	         "{\"contact\":\"c-1\",\"tag\":\"lead\",\"note\":\"%s\",\"n\":1}", marker);
	make_run(c, key, NULL);
	add_effect(c, key, "crm.tag", "t_http", payload, id);
	/* A run with two effects completes only when both have. */
	make_run(c, key2, NULL);
	add_effect(c, key2, "crm.tag", "t_http", "{\"contact\":\"c-2\"}", id2a);
	add_effect(c, key2, "crm.note", "t_http", "{\"contact\":\"c-2\",\"fault\":[\"503\",\"ok\"]}",
	           id2b);
	dl_sends(true);
	disp_start(&d, &dc, ENV_TRUE);
	notify(c);

	DL_EXPECT_EFFECT(c, id, "completed", 15);
	pkey(pk, sizeof(pk), key, "crm.tag");

	/* What the provider received: one POST, the key, the payload. */
	snprintf(prefix, sizeof(prefix), "%s/", key);
	reqs = prov_requests(prefix, NULL);
	ck_assert_msg(json_array_size(reqs) == 1, "the provider got %zu requests, expected 1",
	              json_array_size(reqs));
	req = json_array_get(reqs, 0);
	ck_assert_str_eq(JSTR(req, "method"), "POST");
	ck_assert_str_eq(JSTR(req, "path"), "/idem/effects");
	ck_assert_msg(streq(req_header(req, "Idempotency-Key"), pk), "Idempotency-Key %s, expected %s",
	              req_header(req, "Idempotency-Key") ? req_header(req, "Idempotency-Key") : "(none)",
	              pk);
	ck_assert_msg(streq(req_header(req, "X-Oncegate-Effect"), id), "X-Oncegate-Effect");
	ck_assert_msg(req_header(req, "Content-Type") != NULL &&
	              strncmp(req_header(req, "Content-Type"), "application/json", 16) == 0,
	              "Content-Type: %s", req_header(req, "Content-Type"));
	sent_body = json_loads(JSTR(req, "body"), 0, NULL);
	want_body = json_loads(payload, 0, NULL);
	ck_assert_msg(sent_body != NULL && json_equal(sent_body, want_body),
	              "the provider got body %s, expected %s", JSTR(req, "body"), payload);
	json_decref(sent_body);
	json_decref(want_body);
	com = prov_committed(prefix);
	ck_assert_int_eq(json_array_size(com), 1);

	/* The effect: completed with the provider's id, one successful attempt. */
	row = dl_effect_row(c, id);
	ck_assert_str_eq(JSTR(row, "provider_id"), JSTR(json_array_get(com, 0), "id"));
	ck_assert_int_eq(jint(row, "attempt"), 1);
	ck_assert_str_eq(JSTR(row, "error_class"), "success");
	ck_assert_str_eq(JSTR(row, "reason"), "http_2xx");
	ck_assert_msg(json_is_string(json_object_get(row, "completed_at")), "completed_at is not set");
	ck_assert_msg(json_is_null(json_object_get(row, "lease_owner")), "the lease is still held");
	att = dl_attempts_of(c, id);
	ck_assert_int_eq(json_array_size(att), 1);
	l = json_array_get(att, 0);
	ck_assert_str_eq(JSTR(l, "kind"), "send");
	ck_assert_str_eq(JSTR(l, "classification"), "success");
	ck_assert_int_eq(jint(l, "status"), 201);
	ck_assert_int_eq(jint(l, "attempt"), 1);
	ck_assert_str_eq(JSTR(l, "provider_id"), JSTR(row, "provider_id"));
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM dead_letters WHERE effect_id = $1::uuid", id,
	                      (char *)NULL), 0);
	json_decref(att);

	/* The run: completed by the dispatcher. */
	st = wait_run(c, key, "completed", 5);
	ck_assert_msg(streq(st, "completed"), "run %s is %s, expected completed", key, st);
	free(st);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM run_events WHERE client_id = $1::bigint"
	                      " AND idempotency_key = $2 AND event = 'run.completed'"
	                      " AND state_from = 'approved' AND state_to = 'completed'"
	                      " AND actor = 'dispatcher'", g_client, key, (char *)NULL), 1);

	/* The decision log. */
	ck_assert_int_eq(wait_log(d.dl.log, key, "run.completed", NULL, 1, 5), 1);
	l = log_one(d.dl.log, key, "effect.claimed", id);
	ck_assert_int_eq(jint(l, "attempt"), 1);
	ck_assert_str_eq(JSTR(l, "target"), "t_http");
	json_decref(l);
	l = log_one(d.dl.log, key, "effect.sent", id);
	ck_assert_str_eq(JSTR(l, "provider_id"), JSTR(row, "provider_id"));
	json_decref(l);
	l = log_one(d.dl.log, key, "effect.completed", id);
	ck_assert_int_eq(jint(l, "attempt"), 1);
	ck_assert_str_eq(JSTR(l, "target"), "t_http");
	ck_assert_str_eq(JSTR(l, "provider_id"), JSTR(row, "provider_id"));
	ck_assert_msg(jint(l, "duration_ms") >= 1, "effect.completed has no duration_ms");
	json_decref(l);
	l = log_one(d.dl.log, key, "run.completed", NULL);
	ck_assert_str_eq(JSTR(l, "effect_id"), id);
	json_decref(l);
	json_decref(row);
	json_decref(com);
	json_decref(reqs);

	/* The run of two: one effect completes, the other waits for its retry
	 * after a 503 (Retry-After: 1) — the run is still approved then. */
	pkey(pk2a, sizeof(pk2a), key2, "crm.tag");
	pkey(pk2b, sizeof(pk2b), key2, "crm.note");
	DL_EXPECT_EFFECT(c, id2a, "completed", 15);
	ck_assert_msg(wait_prov(pk2b, "effect", 1, 10) >= 1, "the second effect was never sent");
	/* one statement, one snapshot: the run's state while that effect is
	 * not completed (no row once it is) */
	st = qstr(c, "SELECT r.state FROM workflow_runs r JOIN effect_outbox e"
	          "    ON e.client_id = r.client_id AND e.idempotency_key = r.idempotency_key"
	          " WHERE e.id = $1::uuid AND e.state <> 'completed'", id2b, (char *)NULL);
	ck_assert_msg(st == NULL || streq(st, "approved"),
	              "run %s is %s while one of its effects is not completed", key2, st);
	free(st);
	DL_EXPECT_EFFECT(c, id2b, "completed", 15);
	st = wait_run(c, key2, "completed", 5);
	ck_assert_msg(streq(st, "completed"), "run %s is %s, expected completed", key2, st);
	free(st);
	ck_assert_int_eq(prov_count(pk2a, "effect"), 1);
	ck_assert_int_eq(prov_count(pk2b, "effect"), 2);
	ck_assert_int_eq(wait_log(d.dl.log, key2, "run.completed", NULL, 1, 5), 1);
	ck_assert_int_eq(log_count(d.dl.log, key2, "run.completed", NULL), 1);

	disp_stop(&d);
	/* Raw payloads are never logged. */
	logtext = tl_file_slurp(d.dl.log, NULL);
	ck_assert_msg(logtext != NULL && strstr(logtext, marker) == NULL,
	              "the decision log holds the effect's payload");
	free(logtext);
	PQfinish(c);
}
END_TEST

/* ===== 2. happy path, SMTP ====================================================== */

static const char b64_alphabet[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Base64 text (whitespace ignored) → bytes, NUL-terminated (malloc'd). */
static char *
b64_decode(const char *s)
{
	size_t n = strlen(s), o = 0;
	char *out = malloc(n + 1);
	unsigned acc = 0;
	int bits = 0;

	ck_assert_ptr_nonnull(out);
	for (; *s != '\0'; s++) {
		const char *p;

		if (*s == '=')
			break;
		if (isspace((unsigned char)*s))
			continue;
		p = strchr(b64_alphabet, *s);
		ck_assert_msg(p != NULL && *s != '\0', "not base64: %c", *s);
		acc = acc << 6 | (unsigned)(p - b64_alphabet);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (char)(acc >> bits & 0xff);
		}
	}
	out[o] = '\0';
	return out;
}

/* The sink's records (one JSON object per line) with this Message-ID. */
static json_t *
mail_records(const char *message_id)
{
	json_t *out = json_array();
	size_t len;
	char *text = tl_file_slurp(g_smtp_record, &len);
	char *p, *nl;

	if (text == NULL)
		return out;
	for (p = text; (nl = memchr(p, '\n', len - (size_t)(p - text))) != NULL; p = nl + 1) {
		json_t *rec = json_loadb(p, (size_t)(nl - p), 0, NULL);

		if (rec != NULL && streq(tl_jstr(rec, "message_id"), message_id))
			json_array_append(out, rec);
		json_decref(rec);
	}
	free(text);
	return out;
}

/* One delivered message: envelope, headers, subject, decoded body. */
static void
expect_mail(PGconn *c, const char *effect, const char *key, const char *to, const char *subject,
            const char *text)
{
	char pk[256], mid[128], hdr[256];
	json_t *recs, *rec, *row;
	const char *data, *body;
	char *decoded;

	pkey(pk, sizeof(pk), key, "email.send");
	dl_message_id(pk, MAIL_DOMAIN, mid);
	recs = mail_records(mid);
	ck_assert_msg(json_array_size(recs) == 1, "the sink holds %zu messages with Message-ID %s,"
	              " expected 1", json_array_size(recs), mid);
	rec = json_array_get(recs, 0);
	ck_assert_str_eq(JSTR(rec, "mail_from"), MAIL_FROM);
	ck_assert_msg(json_array_size(json_object_get(rec, "rcpt_tos")) == 1 &&
	              streq(json_string_value(json_array_get(json_object_get(rec, "rcpt_tos"), 0)), to),
	              "recipients of %s: not just %s", mid, to);
	ck_assert_msg(streq(tl_jstr(rec, "subject"), subject), "subject %s, expected %s",
	              JSTR(rec, "subject"), subject);
	data = JSTR(rec, "data");
	snprintf(hdr, sizeof(hdr), "Message-ID: %s\r\n", mid);
	ck_assert_msg(strstr(data, hdr) != NULL, "no %s header in: %.1000s", mid, data);
	snprintf(hdr, sizeof(hdr), "From: <%s>\r\n", MAIL_FROM);
	ck_assert_msg(strstr(data, hdr) != NULL, "From: header: %.1000s", data);
	snprintf(hdr, sizeof(hdr), "To: <%s>\r\n", to);
	ck_assert_msg(strstr(data, hdr) != NULL, "To: header: %.1000s", data);
	ck_assert_msg(strstr(data, "Content-Transfer-Encoding: base64\r\n") != NULL,
	              "not base64: %.1000s", data);
	body = strstr(data, "\r\n\r\n");
	ck_assert_msg(body != NULL, "no body in: %.1000s", data);
	decoded = b64_decode(body + 4);
	ck_assert_msg(strcmp(decoded, text) == 0, "body decodes to \"%s\", expected \"%s\"", decoded,
	              text);
	free(decoded);
	row = dl_effect_row(c, effect);
	ck_assert_str_eq(JSTR(row, "state"), "completed");
	ck_assert_str_eq(JSTR(row, "provider_id"), JSTR(rec, "queue_id"));
	ck_assert_int_eq(jint(row, "attempt"), 1);
	ck_assert_str_eq(JSTR(row, "reason"), "smtp_2xx");
	json_decref(row);
	json_decref(recs);
}

START_TEST(test_smtp_happy)
{
	static const char text_a[] = "Hello,\nyour order 42 ships on Friday.\n.\n"
	                             "A line with a lone dot above, and \xc3\xbcml\xc3\xa4uts.";
	static const char subject_b[] = "Re: ticket 7 \xe2\x80\x94 \xc3\xbc" "bersicht";
	static const char text_b[] = "The approved draft, taken from the run's output.";
	PGconn *c = tl_pg_connect();
	struct disp d;
	struct dconf dc = DCONF;
	char ka[200], kb[200], kc[200], ida[40], idb[40], idc[40], pkc[256], midc[128];
	json_t *pa, *ob, *dl, *recs;
	char *payload_a, *output_b, *st;

	tl_mkkey(ka, sizeof(ka), "smtp-payload");
	tl_mkkey(kb, sizeof(kb), "smtp-output");
	tl_mkkey(kc, sizeof(kc), "smtp-550");
	/* subject and body in the payload */
	pa = json_pack("{s:s, s:s, s:s}", "to", "customer+a@example.com", "subject",
	               "Your order 42 ships on Friday", "body", text_a);
	payload_a = json_dumps(pa, JSON_COMPACT);
	make_run(c, ka, NULL);
	add_effect(c, ka, "email.send", "t_smtp", payload_a, ida);
	/* only the recipient in the payload: subject and body from the approved output */
	ob = json_pack("{s:s, s:s, s:s, s:f}", "subject", subject_b, "body", text_b, "tone",
	               "friendly", "confidence", 0.9);
	output_b = json_dumps(ob, JSON_COMPACT);
	make_run(c, kb, output_b);
	add_effect(c, kb, "email.send", "t_smtp", "{\"to\":\"other@example.com\"}", idb);
	/* a recipient the server refuses for good */
	make_run(c, kc, NULL);
	add_effect(c, kc, "email.send", "t_smtp",
	           "{\"to\":\"fail550@example.com\",\"subject\":\"s\",\"body\":\"b\"}", idc);
	dl_sends(true);
	disp_start(&d, &dc, ENV_TRUE);
	notify(c);

	DL_EXPECT_EFFECT(c, ida, "completed", 15);
	DL_EXPECT_EFFECT(c, idb, "completed", 15);
	expect_mail(c, ida, ka, "customer+a@example.com", "Your order 42 ships on Friday", text_a);
	expect_mail(c, idb, kb, "other@example.com", subject_b, text_b);
	st = wait_run(c, kb, "completed", 5);
	ck_assert_msg(streq(st, "completed"), "run %s is %s", kb, st);
	free(st);

	/* 550: permanent, dead-lettered, nothing delivered. */
	DL_EXPECT_EFFECT(c, idc, "failed", 15);
	dl = dl_dead_letter_of(c, idc);
	ck_assert_msg(dl != NULL, "no dead letter for the refused message");
	ck_assert_str_eq(JSTR(dl, "error_class"), "permanent");
	ck_assert_str_eq(JSTR(dl, "reason"), "smtp_5xx");
	json_decref(dl);
	pkey(pkc, sizeof(pkc), kc, "email.send");
	dl_message_id(pkc, MAIL_DOMAIN, midc);
	recs = mail_records(midc);
	ck_assert_int_eq(json_array_size(recs), 0);
	json_decref(recs);
	ck_assert_int_eq(wait_log(d.dl.log, kc, "effect.dead_lettered", idc, 1, 5), 1);
	ck_assert_int_eq(wait_log(d.dl.log, ka, "effect.completed", ida, 1, 5), 1);

	disp_stop(&d);
	json_decref(pa);
	json_decref(ob);
	free(payload_a);
	free(output_b);
	PQfinish(c);
}
END_TEST

/* ===== 3. ambiguous outcomes on a target without idempotency keys ============= */

START_TEST(test_ambiguous_without_keys)
{
	static const struct {
		const char *name, *target, *fault, *reason;
	} cases[] = {
		{ "plain-stall", "t_plain", "\"stall\"", "timeout_after_send_not_idempotent" },
		{ "plain-reset", "t_plain", "\"reset\"", "connection_lost_after_send_not_idempotent" },
		{ "look-stall", "t_lookup", "\"stall\"", "timeout_after_send_not_idempotent" },
		{ "look-reset", "t_lookup", "\"reset\"", "connection_lost_after_send_not_idempotent" },
		/* nothing committed: not found twice → resent with the same key */
		{ "look-drop", "t_lookup", "[\"drop\",\"ok\"]", "connection_lost_after_send_not_idempotent" },
	};
	enum { N = sizeof(cases) / sizeof(cases[0]) };
	PGconn *c = tl_pg_connect();
	struct disp d;
	struct dconf dc = DCONF;
	char key[N][200], pk[N][256], id[N][40], payload[256];
	double started;
	json_t *row, *dl, *att, *com, *l, *posts;
	size_t i;
	int k;

	dc.workers = 4;
	dc.batch = 1;
	dc.reconcile_s = 1;
	dc.lease_s = AMBIGUOUS_LEASE_S;
	for (k = 0; k < N; k++) {
		tl_mkkey(key[k], sizeof(key[k]), cases[k].name);
		pkey(pk[k], sizeof(pk[k]), key[k], "crm.tag");
		snprintf(payload, sizeof(payload), "{\"contact\":\"c-%d\",\"fault\":%s}", k,
		         cases[k].fault);
		make_run(c, key[k], NULL);
		add_effect(c, key[k], "crm.tag", cases[k].target, payload, id[k]);
	}
	dl_sends(true);
	disp_start(&d, &dc, ENV_TRUE);
	started = tl_now();
	notify(c);

	/* Without a lookup URL: unknown, dead-lettered, never resent. */
	for (k = 0; k < 2; k++) {
		DL_EXPECT_EFFECT(c, id[k], "unknown", 15);
		row = dl_effect_row(c, id[k]);
		ck_assert_str_eq(JSTR(row, "error_class"), "ambiguous");
		ck_assert_str_eq(JSTR(row, "reason"), cases[k].reason);
		ck_assert_int_eq(jint(row, "attempt"), 1);
		json_decref(row);
		dl = dl_dead_letter_of(c, id[k]);
		ck_assert_msg(dl != NULL, "%s: no dead letter", cases[k].name);
		ck_assert_str_eq(JSTR(dl, "error_class"), "unknown");
		ck_assert_str_eq(JSTR(dl, "component"), "dispatcher");
		ck_assert_int_eq(json_array_size(json_object_get(json_object_get(dl, "evidence"),
		                                                 "attempts")), 1);
		json_decref(dl);
		ck_assert_int_eq(wait_log(d.dl.log, key[k], "effect.unknown", id[k], 1, 5), 1);
		ck_assert_int_eq(wait_log(d.dl.log, key[k], "effect.dead_lettered", id[k], 1, 5), 1);
	}

	/* With a lookup URL: the provider has it → completed with its id,
	 * without a second POST. */
	for (k = 2; k < 4; k++) {
		DL_EXPECT_EFFECT(c, id[k], "completed", 15);
		row = dl_effect_row(c, id[k]);
		com = prov_committed(pk[k]);
		ck_assert_int_eq(json_array_size(com), 1);
		ck_assert_str_eq(JSTR(row, "provider_id"), JSTR(json_array_get(com, 0), "id"));
		ck_assert_str_eq(JSTR(row, "reason"), "reconciled_found");
		json_decref(com);
		ck_assert_int_eq(prov_count(pk[k], "effect"), 1);
		ck_assert_msg(prov_count(pk[k], "lookup") >= 1, "%s: never looked up", cases[k].name);
		att = dl_attempts_of(c, id[k]);
		ck_assert_msg(json_array_size(att) == 2 &&
		              streq(tl_jstr(json_array_get(att, 0), "classification"), "ambiguous") &&
		              streq(tl_jstr(json_array_get(att, 0), "reason"), cases[k].reason) &&
		              streq(tl_jstr(json_array_get(att, 1), "kind"), "lookup") &&
		              streq(tl_jstr(json_array_get(att, 1), "classification"), "found"),
		              "%s: attempts %s", cases[k].name, tl_json_text(att));
		json_decref(att);
		ck_assert_int_eq(qnum(c, "SELECT count(*) FROM dead_letters WHERE effect_id = $1::uuid",
		                      id[k], (char *)NULL), 0);
		ck_assert_int_eq(wait_log(d.dl.log, key[k], "effect.reconciled", id[k], 1, 5), 1);
		l = log_one(d.dl.log, key[k], "effect.reconciled", id[k]);
		ck_assert_str_eq(JSTR(l, "provider_id"), JSTR(row, "provider_id"));
		ck_assert_str_eq(JSTR(l, "state_to"), "completed");
		json_decref(l);
		ck_assert_int_eq(wait_log(d.dl.log, key[k], "run.completed", NULL, 1, 5), 1);
		json_decref(row);
	}

	/* Dropped before anything was committed: not found twice, then resent
	 * with the same key and committed once. */
	k = 4;
	DL_EXPECT_EFFECT(c, id[k], "completed", 20);
	posts = prov_requests(pk[k], "effect");
	ck_assert_int_eq(json_array_size(posts), 2);
	for (i = 0; i < 2; i++)
		ck_assert_str_eq(req_header(json_array_get(posts, i), "Idempotency-Key"), pk[k]);
	json_decref(posts);
	com = prov_committed(pk[k]);
	ck_assert_int_eq(json_array_size(com), 1);
	row = dl_effect_row(c, id[k]);
	ck_assert_str_eq(JSTR(row, "provider_id"), JSTR(json_array_get(com, 0), "id"));
	ck_assert_int_eq(jint(row, "attempt"), 2);
	json_decref(row);
	json_decref(com);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_attempts WHERE effect_id = $1::uuid"
	                      " AND kind = 'lookup' AND classification = 'not_found'", id[k],
	                      (char *)NULL), 2);
	l = log_one(d.dl.log, key[k], "effect.reconciled", id[k]);
	ck_assert_str_eq(JSTR(l, "state_to"), "pending");
	ck_assert_str_eq(JSTR(l, "reason"), "reconciled_not_found");
	json_decref(l);

	/* Keep the dispatcher running AMBIGUOUS_WATCH_S: the ambiguous effects
	 * are never sent again — not by a retry, a reconcile pass or a lease
	 * running out. */
	while (tl_now() - started < AMBIGUOUS_WATCH_S)
		tl_sleep_ms(250);
	for (k = 0; k < 2; k++) {
		char *st = dl_effect_state(c, id[k]);

		ck_assert_msg(streq(st, "unknown"), "%s: %s after %d s", cases[k].name, st,
		              AMBIGUOUS_WATCH_S);
		free(st);
		ck_assert_msg(prov_count(pk[k], NULL) == 1, "%s: the provider got %zu requests in %d s,"
		              " expected exactly 1", cases[k].name, prov_count(pk[k], NULL),
		              AMBIGUOUS_WATCH_S);
		com = prov_committed(pk[k]);
		ck_assert_int_eq(json_array_size(com), 1);
		json_decref(com);
		ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_attempts WHERE effect_id = $1::uuid",
		                      id[k], (char *)NULL), 1);
	}
	for (k = 2; k < 4; k++)
		ck_assert_int_eq(prov_count(pk[k], "effect"), 1);
	ck_assert_int_eq(prov_count(pk[4], "effect"), 2);

	disp_stop(&d);
	/* Last, so that it hides nothing else: the log names the rule that
	 * fired (the log's `reason`), as effect_outbox.reason does. */
	for (k = 0; k < N; k++) {
		l = log_one(d.dl.log, key[k], "effect.unknown", id[k]);
		ck_assert_msg(streq(tl_jstr(l, "reason"), cases[k].reason),
		              "%s: effect.unknown has reason \"%s\", expected \"%s\"",
		              cases[k].name, JSTR(l, "reason"), cases[k].reason);
		ck_assert_str_eq(JSTR(l, "error_class"), "ambiguous");
		json_decref(l);
	}
	PQfinish(c);
}
END_TEST

/* ===== 4. the same faults on a target that honours keys ======================= */

START_TEST(test_idempotent_retry)
{
	static const struct {
		const char *name, *fault, *reason;
	} cases[] = {
		{ "idem-stall", "[\"stall\",\"ok\"]", "timeout_after_send_idempotent" },
		{ "idem-reset", "[\"reset\",\"ok\"]", "connection_lost_after_send_idempotent" },
	};
	enum { N = sizeof(cases) / sizeof(cases[0]) };
	PGconn *c = tl_pg_connect();
	struct disp d;
	struct dconf dc = DCONF;
	char key[N][200], pk[N][256], id[N][40], payload[256];
	json_t *posts, *com, *row, *att, *l;
	size_t i;
	int k;

	for (k = 0; k < N; k++) {
		tl_mkkey(key[k], sizeof(key[k]), cases[k].name);
		pkey(pk[k], sizeof(pk[k]), key[k], "crm.tag");
		snprintf(payload, sizeof(payload), "{\"contact\":\"c-%d\",\"fault\":%s}", k,
		         cases[k].fault);
		make_run(c, key[k], NULL);
		add_effect(c, key[k], "crm.tag", "t_idem", payload, id[k]);
	}
	dl_sends(true);
	disp_start(&d, &dc, ENV_TRUE);
	notify(c);

	for (k = 0; k < N; k++) {
		DL_EXPECT_EFFECT(c, id[k], "completed", 20);
		/* Retried with the same key; the provider committed once. */
		posts = prov_requests(pk[k], "effect");
		ck_assert_msg(json_array_size(posts) == 2, "%s: %zu POSTs, expected 2", cases[k].name,
		              json_array_size(posts));
		for (i = 0; i < json_array_size(posts); i++)
			ck_assert_str_eq(req_header(json_array_get(posts, i), "Idempotency-Key"), pk[k]);
		com = prov_committed(pk[k]);
		ck_assert_msg(json_array_size(com) == 1, "%s: %zu committed effects, expected 1",
		              cases[k].name, json_array_size(com));
		row = dl_effect_row(c, id[k]);
		ck_assert_str_eq(JSTR(row, "provider_id"), JSTR(json_array_get(com, 0), "id"));
		ck_assert_int_eq(jint(row, "attempt"), 2);
		att = dl_attempts_of(c, id[k]);
		ck_assert_msg(json_array_size(att) == 2 &&
		              streq(tl_jstr(json_array_get(att, 0), "classification"), "transient") &&
		              streq(tl_jstr(json_array_get(att, 0), "reason"), cases[k].reason) &&
		              streq(tl_jstr(json_array_get(att, 1), "classification"), "success"),
		              "%s: attempts %s", cases[k].name, tl_json_text(att));
		ck_assert_int_eq(qnum(c, "SELECT count(*) FROM dead_letters WHERE effect_id = $1::uuid",
		                      id[k], (char *)NULL), 0);
		ck_assert_int_eq(wait_log(d.dl.log, key[k], "effect.completed", id[k], 1, 5), 1);
		l = log_one(d.dl.log, key[k], "effect.retry_scheduled", id[k]);
		ck_assert_int_eq(jint(l, "attempt"), 1);
		ck_assert_str_eq(JSTR(l, "error_class"), "transient");
		json_decref(l);
		l = log_one(d.dl.log, key[k], "effect.completed", id[k]);
		ck_assert_int_eq(jint(l, "attempt"), 2);
		json_decref(l);
		json_decref(att);
		json_decref(row);
		json_decref(com);
		json_decref(posts);
	}
	disp_stop(&d);
	/* Last, so that it hides nothing else: the log names the rule that
	 * fired (the log's `reason`), as effect_outbox.reason does. */
	for (k = 0; k < N; k++) {
		l = log_one(d.dl.log, key[k], "effect.retry_scheduled", id[k]);
		ck_assert_msg(streq(tl_jstr(l, "reason"), cases[k].reason),
		              "%s: effect.retry_scheduled has reason \"%s\", expected \"%s\"",
		              cases[k].name, JSTR(l, "reason"), cases[k].reason);
		json_decref(l);
	}
	PQfinish(c);
}
END_TEST

/* ===== 5. retry policy: Retry-After, budget, permanent failures ================ */

START_TEST(test_retry_policy)
{
	PGconn *c = tl_pg_connect();
	struct disp d;
	struct dconf dc = DCONF;
	char k429[200], k503[200], k400[200], krej[200];
	char p429[256], p503[256], p400[256], prej[256];
	char i429[40], i503[40], i400[40], irej[40];
	json_t *reqs, *dl, *ev, *hist, *a, *row;
	double gap;
	size_t i;

	dc.workers = 4;
	tl_mkkey(k429, sizeof(k429), "retry-429");
	tl_mkkey(k503, sizeof(k503), "retry-503");
	tl_mkkey(k400, sizeof(k400), "retry-400");
	tl_mkkey(krej, sizeof(krej), "retry-reject");
	pkey(p429, sizeof(p429), k429, "crm.tag");
	pkey(p503, sizeof(p503), k503, "crm.tag");
	pkey(p400, sizeof(p400), k400, "crm.tag");
	pkey(prej, sizeof(prej), krej, "crm.tag");
	make_run(c, k429, NULL);
	add_effect(c, k429, "crm.tag", "t_retry", "{\"fault\":[\"429:2\",\"ok\"]}", i429);
	make_run(c, k503, NULL);
	add_effect(c, k503, "crm.tag", "t_retry", "{\"fault\":\"503\"}", i503);
	make_run(c, k400, NULL);
	add_effect(c, k400, "crm.tag", "t_retry", "{\"fault\":\"400\"}", i400);
	make_run(c, krej, NULL);
	add_effect(c, krej, "crm.tag", "t_reject", "{\"fault\":\"reject\"}", irej);
	dl_sends(true);
	disp_start(&d, &dc, ENV_TRUE);
	notify(c);

	/* 429 with Retry-After: 2, then ok: the retry waits at least 2 s. */
	DL_EXPECT_EFFECT(c, i429, "completed", 20);
	reqs = prov_requests(p429, "effect");
	ck_assert_int_eq(json_array_size(reqs), 2);
	gap = req_time(json_array_get(reqs, 1)) - req_time(json_array_get(reqs, 0));
	ck_assert_msg(gap >= 2.0, "the retry after 429 (Retry-After: 2) came %.3f s after the first"
	              " attempt", gap);
	ck_assert_int_eq(jint(json_array_get(reqs, 0), "status"), 429);
	json_decref(reqs);
	row = dl_effect_row(c, i429);
	ck_assert_int_eq(jint(row, "attempt"), 2);
	json_decref(row);

	/* Always 503 with max_attempts 3: failed, dead letter with the history. */
	DL_EXPECT_EFFECT(c, i503, "failed", 20);
	reqs = prov_requests(p503, "effect");
	ck_assert_int_eq(json_array_size(reqs), 3);
	for (i = 1; i < 3; i++) {
		gap = req_time(json_array_get(reqs, i)) - req_time(json_array_get(reqs, i - 1));
		ck_assert_msg(gap >= 1.0, "retry %zu after a 503 with Retry-After: 1 came after %.3f s",
		              i, gap);
	}
	json_decref(reqs);
	dl = dl_dead_letter_of(c, i503);
	ck_assert_msg(dl != NULL, "no dead letter for the exhausted effect");
	ck_assert_str_eq(JSTR(dl, "error_class"), "exhausted");
	ck_assert_str_eq(JSTR(dl, "reason"), "http_503");
	ev = json_object_get(dl, "evidence");
	hist = json_object_get(ev, "attempts");
	ck_assert_msg(json_array_size(hist) == 3, "evidence.attempts: %s", tl_json_text(hist));
	json_array_foreach(hist, i, a) {
		ck_assert_int_eq(jint(a, "attempt"), (long long)i + 1);
		ck_assert_int_eq(jint(a, "status"), 503);
		ck_assert_str_eq(JSTR(a, "classification"), "transient");
	}
	ck_assert_int_eq(jint(ev, "max_attempts"), 3);
	ck_assert_str_eq(JSTR(ev, "provider_key"), p503);
	ck_assert_str_eq(JSTR(ev, "idempotency_key"), k503);
	ck_assert_str_eq(JSTR(ev, "target"), "t_retry");
	json_decref(dl);
	ck_assert_int_eq(wait_log(d.dl.log, k503, "effect.dead_lettered", i503, 1, 5), 1);
	ck_assert_int_eq(log_count(d.dl.log, k503, "effect.retry_scheduled", i503), 2);
	ck_assert_int_eq(log_count(d.dl.log, k503, "effect.failed", i503), 1);

	/* 400: permanent at once, one request. */
	DL_EXPECT_EFFECT(c, i400, "failed", 10);
	dl = dl_dead_letter_of(c, i400);
	ck_assert_msg(dl != NULL, "no dead letter after a 400");
	ck_assert_str_eq(JSTR(dl, "error_class"), "permanent");
	ck_assert_str_eq(JSTR(dl, "reason"), "http_4xx_rejected");
	json_decref(dl);

	/* A 200 whose body says {"ok": false}: a business rejection. */
	DL_EXPECT_EFFECT(c, irej, "failed", 10);
	dl = dl_dead_letter_of(c, irej);
	ck_assert_msg(dl != NULL, "no dead letter after a business rejection");
	ck_assert_str_eq(JSTR(dl, "error_class"), "permanent");
	ck_assert_str_eq(JSTR(dl, "reason"), "business_rejection");
	json_decref(dl);
	ck_assert_int_eq(wait_log(d.dl.log, krej, "effect.dead_lettered", irej, 1, 5), 1);

	/* Never retried, however long one waits. */
	tl_sleep_ms(2000);
	ck_assert_int_eq(prov_count(p400, NULL), 1);
	ck_assert_int_eq(prov_count(prej, NULL), 1);
	ck_assert_int_eq(prov_count(p503, NULL), 3);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_attempts WHERE effect_id = $1::uuid",
	                      i400, (char *)NULL), 1);

	disp_stop(&d);
	PQfinish(c);
}
END_TEST

/*
 * What the database keeps of a provider's answer is redacted as the
 * decision log writes it: a CRM that answers 401 echoing the bearer, an
 * API key, its account's mail address and an internal URL, and a mail
 * server that answers 550 echoing the recipient (Postfix's wording). The
 * attempts and the dead letters hold the masked text, with the words an
 * operator needs (the error code, the SMTP code and reason) intact; the
 * answers' secrets and hosts are in no row of any table.
 */
START_TEST(test_provider_text_redacted)
{
	static const char *const leaked[] = {
		"sk_live_51HqLyjWDarjtT1zd", "eyJhbGciOiJIUzI1NiJ9", "crm-intern.example.com",
		"ops.billing@", "olga.petrova",
	};
	PGconn *c = tl_pg_connect();
	struct disp d;
	struct dconf dc = DCONF;
	char kh[200], km[200], ih[40], im[40];
	char *excerpt, *reply, *dl_text;
	size_t i;

	tl_mkkey(kh, sizeof(kh), "ответ-провайдера/提供者");
	tl_mkkey(km, sizeof(km), "письмо/邮件 📮");
	make_run(c, kh, NULL);
	add_effect(c, kh, "crm.tag", "t_retry",
	           "{\"fault\":\"401echo\",\"note\":\"Отказ 拒绝 🚫\"}", ih);
	make_run(c, km, NULL);
	add_effect(c, km, "email.send", "t_smtp",
	           "{\"to\":\"fail550+olga.petrova@corp.example.test\",\"subject\":"
	           "\"Счёт 账单\",\"body\":\"Здравствуйте 你好\"}", im);
	dl_sends(true);
	disp_start(&d, &dc, ENV_TRUE);
	notify(c);
	DL_EXPECT_EFFECT(c, ih, "failed", 15);
	DL_EXPECT_EFFECT(c, im, "failed", 15);
	ck_assert_int_eq(wait_log(d.dl.log, km, "effect.dead_lettered", im, 1, 5), 1);
	disp_stop(&d);

	excerpt = qstr(c, "SELECT evidence->>'body_excerpt' FROM effect_attempts "
	               "WHERE effect_id = $1::uuid", ih, (char *)NULL);
	ck_assert_msg(excerpt != NULL && strstr(excerpt, "invalid_api_key") != NULL &&
	              strstr(excerpt, "Bearer [redacted]") != NULL &&
	              strstr(excerpt, "[address]") != NULL && strstr(excerpt, "[host]") != NULL,
	              "the attempt's body excerpt: %s", excerpt ? excerpt : "(none)");
	reply = qstr(c, "SELECT evidence->>'reply' FROM effect_attempts WHERE effect_id = $1::uuid",
	             im, (char *)NULL);
	ck_assert_msg(reply != NULL && strstr(reply, "550 5.1.1 <[address]>: Recipient address "
	                                      "rejected") != NULL,
	              "the attempt's SMTP reply: %s", reply ? reply : "(none)");
	dl_text = qstr(c, "SELECT string_agg(d::text, ' ') FROM dead_letters d JOIN effect_outbox o "
	               "ON o.id = d.effect_id WHERE o.id IN ($1::uuid, $2::uuid)",
	               ih, im, (char *)NULL);
	ck_assert_msg(dl_text != NULL && strstr(dl_text, "Bearer [redacted]") != NULL &&
	              strstr(dl_text, "<[address]>") != NULL,
	              "the dead letters do not keep the redacted answers: %s",
	              dl_text ? dl_text : "(none)");
	for (i = 0; i < sizeof(leaked) / sizeof(leaked[0]); i++) {
		const char *p[2] = { im, leaked[i] };

		ck_assert_msg(strstr(excerpt, leaked[i]) == NULL && strstr(reply, leaked[i]) == NULL,
		              "\"%s\" kept in an attempt's evidence", leaked[i]);
		if (i + 1 < sizeof(leaked) / sizeof(leaked[0]))
			ck_assert_msg(tl_pg_rows_holding(c, leaked[i]) == 0, "\"%s\" is in the database",
			              leaked[i]);
		else /* the recipient: in the payload (and its copies), never in an answer */
			ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM effect_attempts WHERE "
			                             "effect_id = $1::uuid AND strpos(evidence::text, $2) > 0",
			                             2, p), 0);
	}
	free(excerpt);
	free(reply);
	free(dl_text);
	PQfinish(c);
}
END_TEST

/* ===== 6. the kill switch ======================================================= */

/* A dispatcher that must not send: a few poll intervals, nothing at the
 * provider, the effect still pending and untouched, dispatch.blocked. */
static void
expect_held(PGconn *c, const char *id, const char *pk, enum env_switch env, bool flag,
            const char *why)
{
	struct disp d;
	struct dconf dc = DCONF;
	json_t *row, *lines, *sel, *l;

	dl_sends(flag);
	disp_start(&d, &dc, env);
	notify(c);
	ck_assert_int_ge(wait_log(d.dl.log, NULL, "dispatch.blocked", NULL, 1, 5), 1);
	tl_sleep_ms(5 * dc.poll_ms);
	ck_assert_msg(prov_count(pk, NULL) == 0, "%s: the provider got a request", why);
	row = dl_effect_row(c, id);
	ck_assert_msg(streq(tl_jstr(row, "state"), "pending") && jint(row, "attempt") == 0,
	              "%s: the effect is not pending and untouched: %s", why, tl_json_text(row));
	json_decref(row);
	lines = log_lines(d.dl.log, NULL);
	sel = log_select(lines, "dispatch.blocked", NULL);
	l = json_array_get(sel, 0);
	ck_assert_msg(jint(l, "count") >= 1 && tl_jstr(l, "reason") != NULL,
	              "%s: dispatch.blocked without count and reason: %s", why, tl_json_text(l));
	json_decref(sel);
	sel = log_select(lines, "effect.claimed", NULL);
	ck_assert_msg(json_array_size(sel) == 0, "%s: the dispatcher claimed effects", why);
	json_decref(sel);
	json_decref(lines);
	disp_stop(&d);
}

START_TEST(test_kill_switch)
{
	PGconn *c = tl_pg_connect();
	struct disp d;
	struct dconf dc = DCONF;
	char key[200], pk[256], id[40], rkey[200], rprefix[256], ids[5][40], type[32];
	double t_on, t_off;
	long long before;
	json_t *reqs;
	char *t0;
	size_t blocked = 0, nblocked, nsent;
	int i, sent;

	tl_mkkey(key, sizeof(key), "switch");
	pkey(pk, sizeof(pk), key, "crm.tag");
	make_run(c, key, NULL);
	add_effect(c, key, "crm.tag", "t_http", "{\"contact\":\"c-9\"}", id);

	/* (a) no AI_ACTIONS_ENABLED, (b) AI_ACTIONS_ENABLED=false: database
	 * flag on, still nothing goes out. */
	expect_held(c, id, pk, ENV_UNSET, true, "AI_ACTIONS_ENABLED unset");
	expect_held(c, id, pk, ENV_FALSE, true, "AI_ACTIONS_ENABLED=false");

	/* (c) the environment says yes, the database flag says no ... */
	dl_sends(false);
	disp_start(&d, &dc, ENV_TRUE);
	notify(c);
	ck_assert_int_ge(wait_log(d.dl.log, NULL, "dispatch.blocked", NULL, 1, 5), 1);
	tl_sleep_ms(5 * dc.poll_ms);
	ck_assert_msg(prov_count(pk, NULL) == 0, "flag off: the provider got a request");
	{
		char *st = dl_effect_state(c, id);

		ck_assert_msg(streq(st, "pending"), "flag off: the effect is %s", st);
		free(st);
	}
	/* ... until an operator turns it on: sent within a couple of seconds. */
	dl_sends(true);
	t_on = tl_now();
	ck_assert_msg(wait_prov(pk, "effect", 1, 5) == 1, "flag on: nothing sent within 5 s");
	ck_assert_msg(tl_now() - t_on < 3.0, "flag on: sent only after %.1f s", tl_now() - t_on);
	DL_EXPECT_EFFECT(c, id, "completed", 5);
	disp_stop(&d);

	/* Claimed just before the switch flips: not sent. One worker claims
	 * all five; the rate limit (1/s) holds the later ones after their
	 * claim; the switch goes off right after the first send. */
	tl_mkkey(rkey, sizeof(rkey), "switch-rate");
	snprintf(rprefix, sizeof(rprefix), "%s/", rkey);
	make_run(c, rkey, NULL);
	for (i = 0; i < 5; i++) {
		snprintf(type, sizeof(type), "crm.note%d", i);
		add_effect(c, rkey, type, "t_rate", "{\"contact\":\"c-10\"}", ids[i]);
	}
	before = blocked_sends(c);
	t0 = qstr(c, "SELECT now()::text", (char *)NULL);
	dc.workers = 1;
	dc.batch = 8;
	disp_start(&d, &dc, ENV_TRUE);
	notify(c);
	ck_assert_msg(wait_prov(rprefix, "effect", 1, 10) >= 1, "the first effect was never sent");
	dl_sends(false);
	/* The switch is off from here. A send already past its check while
	 * oncegatectl was starting (its rate slot is 1 s, and a loaded machine
	 * can take that long to start a process) arrives just after; none
	 * may start later, in the four more rate slots waited out. */
	t_off = tl_now();
	tl_sleep_ms(5000);
	reqs = prov_requests(rprefix, "effect");
	nsent = json_array_size(reqs);
	for (i = 0; i < (int)nsent; i++) {
		double at = json_number_value(json_object_get(json_array_get(reqs, (size_t)i), "time"));

		ck_assert_msg(at < t_off + 0.5, "an effect went out %.1f s after the switch was turned"
		              " off (%zu sent of 5)", at - t_off, nsent);
	}
	ck_assert_msg(nsent >= 1 && nsent < 5, "%zu of 5 effects went out", nsent);
	sent = 0;
	for (i = 0; i < 5; i++) {
		json_t *row = dl_effect_row(c, ids[i]);

		if (sent_to_provider(reqs, tl_jstr(row, "provider_key"))) {
			sent++;
			ck_assert_str_eq(JSTR(row, "state"), "completed");
		} else {
			ck_assert_msg(streq(tl_jstr(row, "state"), "pending") && jint(row, "attempt") == 0 &&
			              json_is_null(json_object_get(row, "lease_owner")),
			              "a blocked effect is not pending with its attempt given back: %s",
			              tl_json_text(row));
			ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_attempts"
			                      " WHERE effect_id = $1::uuid", ids[i], (char *)NULL), 0);
			nblocked = log_count(d.dl.log, rkey, "dispatch.blocked", ids[i]);
			ck_assert_msg(nblocked <= 1, "%zu dispatch.blocked lines for one effect", nblocked);
			blocked += nblocked;
		}
		json_decref(row);
	}
	ck_assert_int_eq(sent, (int)nsent);
	json_decref(reqs);
	/* How many a worker holds when the switch flips depends on its batch
	 * (today: all four); at least the next one was claimed, then refused
	 * right before its send, counted and logged, each exactly once. */
	ck_assert_msg(blocked >= 1, "no claimed effect was refused by the switch");
	/* Counted once each, whoever counted it: the worker that refused it
	 * or the dispatcher's periodic look at due effects while the switch is
	 * off (which also meets pending effects other tests left). Every count
	 * marks its effect (held_at), so the counter grew by exactly the
	 * effects marked since, and each of this run's refused ones is marked. */
	{
		char was[24];
		json_t *n;

		snprintf(was, sizeof(was), "%lld", before);
		n = qjson(c, "SELECT json_build_object('grew', (SELECT blocked_sends FROM"
		          " dispatch_control) - $1::bigint, 'marked', (SELECT count(*) FROM"
		          " effect_outbox WHERE held_at >= $2::timestamptz), 'ours', (SELECT"
		          " count(*) FROM effect_outbox WHERE idempotency_key = $3"
		          " AND state = 'pending' AND held_at IS NOT NULL))",
		          was, t0, rkey, (char *)NULL);

		ck_assert_msg(jint(n, "grew") == jint(n, "marked"), "blocked_sends grew by %lld, %lld"
		              " effects marked held since", jint(n, "grew"), jint(n, "marked"));
		ck_assert_msg(jint(n, "ours") == 5 - (long long)nsent,
		              "%lld of the %zu refused effects marked held", jint(n, "ours"),
		              5 - nsent);
		json_decref(n);
	}
	free(t0);
	{
		json_t *lines = log_lines(d.dl.log, rkey), *sel = log_select(lines, "dispatch.blocked", NULL);
		json_t *bl;
		size_t j;

		json_array_foreach(sel, j, bl)
			ck_assert_msg(streq(tl_jstr(bl, "state_from"), "sending") &&
			              streq(tl_jstr(bl, "state_to"), "pending"),
			              "dispatch.blocked of a claimed effect: %s", tl_json_text(bl));
		json_decref(sel);
		json_decref(lines);
	}
	disp_stop(&d);
	ck_assert_int_eq(prov_count(rprefix, NULL), nsent);
	PQfinish(c);
}
END_TEST

/* ===== 6b. a claimed batch waits its turn =========================================== */

/* One worker claims eight effects of a rate-limited target (1/s) with a
 * 5 s lease: the later ones wait longer than the lease for their slot.
 * Nothing was sent for them, so none may become unknown: every one is
 * sent once and completed. */
START_TEST(test_batch_wait_keeps_lease)
{
	PGconn *c = tl_pg_connect();
	struct disp d;
	struct dconf dc = DCONF;
	char key[200], prefix[256], ids[8][40], type[32];
	long long done;
	double deadline;
	json_t *row;
	int i;

	dc.workers = 1;
	dc.batch = 8;
	dc.lease_s = 5;
	tl_mkkey(key, sizeof(key), "batch-wait");
	snprintf(prefix, sizeof(prefix), "%s/", key);
	make_run(c, key, NULL);
	for (i = 0; i < 8; i++) {
		snprintf(type, sizeof(type), "crm.note%d", i);
		add_effect(c, key, type, "t_rate", "{\"contact\":\"c-30\"}", ids[i]);
	}
	dl_sends(true);
	disp_start(&d, &dc, ENV_TRUE);
	notify(c);
	deadline = tl_now() + 20;
	do {
		tl_sleep_ms(250);
		done = qnum(c, "SELECT count(*) FROM effect_outbox WHERE client_id = $1::bigint"
		            " AND idempotency_key = $2 AND state NOT IN ('pending', 'sending')",
		            g_client, key, (char *)NULL);
	} while (done < 8 && tl_now() < deadline);
	disp_stop(&d);
	for (i = 0; i < 8; i++) {
		row = dl_effect_row(c, ids[i]);
		ck_assert_msg(streq(tl_jstr(row, "state"), "completed"),
		              "an effect that waited in its claimed batch for its rate slot ended %s"
		              " (provider got %zu of 8 requests): %s", JSTR(row, "state"),
		              prov_count(prefix, NULL), tl_json_text(row));
		json_decref(row);
	}
	ck_assert_int_eq(prov_count(prefix, "effect"), 8);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM dead_letters WHERE client_id = $1::bigint"
	                      " AND idempotency_key = $2", g_client, key, (char *)NULL), 0);
	PQfinish(c);
}
END_TEST

/* ===== 7. kill -9 during a stalled send ========================================== */

START_TEST(test_kill9_mid_send)
{
	PGconn *c = tl_pg_connect();
	struct disp d1, d2;
	struct dconf dc = DCONF;
	char key[200], pk[256], id[40];
	json_t *row, *dl, *att, *l;
	char *st, *lease_end;

	dc.workers = 1;
	dc.lease_s = 5;
	tl_mkkey(key, sizeof(key), "kill9");
	pkey(pk, sizeof(pk), key, "crm.tag");
	make_run(c, key, NULL);
	add_effect(c, key, "crm.tag", "t_plain", "{\"fault\":\"stall\"}", id);
	dl_sends(true);
	disp_start(&d1, &dc, ENV_TRUE);
	notify(c);
	ck_assert_msg(wait_prov(pk, "effect", 1, 10) == 1, "the effect was never sent");
	disp_kill9(&d1);
	st = dl_effect_state(c, id);
	ck_assert_msg(streq(st, "sending"), "after kill -9 mid-send the effect is %s", st);
	free(st);
	/* its send had started: marked and committed before the request */
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE id = $1::uuid"
	                      " AND send_started", id, (char *)NULL), 1);
	lease_end = qstr(c, "SELECT extract(epoch FROM lease_expires_at)::text FROM effect_outbox"
	                 " WHERE id = $1::uuid", id, (char *)NULL);
	ck_assert_ptr_nonnull(lease_end);

	/* A new dispatcher: the lease runs out (right before the send it was
	 * stretched to cover the send's timeout and a margin: ~25 s here), the
	 * effect becomes unknown, never pending. */
	disp_start(&d2, &dc, ENV_TRUE);
	DL_EXPECT_EFFECT(c, id, "unknown", 45);
	row = dl_effect_row(c, id);
	ck_assert_str_eq(JSTR(row, "reason"), "lease_expired_while_sending");
	ck_assert_str_eq(JSTR(row, "error_class"), "ambiguous");
	ck_assert_int_eq(jint(row, "attempt"), 1);
	json_decref(row);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE id = $1::uuid"
	                      " AND updated_at >= to_timestamp($2::float8)", id, lease_end,
	                      (char *)NULL), 1);
	dl = dl_dead_letter_of(c, id);
	ck_assert_msg(dl != NULL, "no dead letter for the lost send");
	ck_assert_str_eq(JSTR(dl, "error_class"), "unknown");
	ck_assert_str_eq(JSTR(dl, "reason"), "lease_expired_while_sending");
	json_decref(dl);
	att = dl_attempts_of(c, id);
	ck_assert_msg(json_array_size(att) == 1 &&
	              streq(tl_jstr(json_array_get(att, 0), "reason"), "lease_expired_while_sending"),
	              "attempts: %s", tl_json_text(att));
	json_decref(att);
	ck_assert_int_eq(wait_log(d2.dl.log, key, "effect.dead_lettered", id, 1, 5), 1);
	l = log_one(d2.dl.log, key, "effect.unknown", id);
	ck_assert_str_eq(JSTR(l, "reason"), "lease_expired_while_sending");
	json_decref(l);
	/* never resent */
	tl_sleep_ms(3000);
	ck_assert_int_eq(prov_count(pk, NULL), 1);
	st = dl_effect_state(c, id);
	ck_assert_msg(streq(st, "unknown"), "the effect moved on to %s", st);
	free(st);
	disp_stop(&d2);
	free(lease_end);
	PQfinish(c);
}
END_TEST

/* ===== 7b. leases that ran out before and after the send started ================== */

/* What a dispatcher killed with a batch in hand leaves: claims whose sends
 * had not started (send_started false) and one whose send had (true), all
 * under leases that ran out. The sweep puts the first back to pending, the
 * attempt given back, and they go out once each; only the started one
 * becomes unknown, unsent again. (tests/chaos/kill9.sh kills real
 * dispatchers mid-drain.) */
START_TEST(test_kill9_before_send)
{
	PGconn *c = tl_pg_connect();
	struct disp d;
	struct dconf dc = DCONF;
	const char *notes[3] = { "Звонок клиенту · 電話 · 📞", "اتصل بالعميل", "ההזמנה אושרה" };
	char ids[4][40], pks[4][256], keys[4][200], payload[256], hash[72];
	json_t *row;
	int i;

	for (i = 0; i < 4; i++) {
		char tag[32], *v;

		snprintf(tag, sizeof(tag), "lease-out-%d", i);
		tl_mkkey(keys[i], sizeof(keys[i]), tag);
		pkey(pks[i], sizeof(pks[i]), keys[i], "crm.note");
		make_run(c, keys[i], NULL);
		snprintf(payload, sizeof(payload), "{\"contact\":\"c-%d\",\"note\":\"%s\"}", i,
		         notes[i % 3]);
		tl_effect_hash(payload, hash);
		v = qstr(c, "INSERT INTO effect_outbox (client_id, idempotency_key, effect_type, target,"
		         "    payload, payload_hash, provider_key, state, attempt, lease_owner,"
		         "    lease_expires_at, first_attempt_at, send_started)"
		         " VALUES ($1::bigint, $2, 'crm.note', 't_plain', $3::jsonb, $4, $2 || '/crm.note',"
		         "    'sending', 1, gen_random_uuid(), now() - interval '1 second',"
		         "    now() - interval '20 seconds', $5::bool) RETURNING id",
		         g_client, keys[i], payload, hash, i < 3 ? "false" : "true", (char *)NULL);
		ck_assert_ptr_nonnull(v);
		snprintf(ids[i], sizeof(ids[i]), "%s", v);
		free(v);
	}
	dl_sends(true);
	disp_start(&d, &dc, ENV_TRUE);
	for (i = 0; i < 3; i++) {
		DL_EXPECT_EFFECT(c, ids[i], "completed", 20);
		row = dl_effect_row(c, ids[i]);
		/* the attempt of the dead claim was given back */
		ck_assert_int_eq(jint(row, "attempt"), 1);
		json_decref(row);
		ck_assert_int_eq(prov_count(pks[i], NULL), 1);
		ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_attempts WHERE effect_id = $1::uuid"
		                      " AND reason = 'lease_expired_while_sending'", ids[i], (char *)NULL), 0);
		ck_assert_int_eq(qnum(c, "SELECT count(*) FROM dead_letters WHERE effect_id = $1::uuid",
		                      ids[i], (char *)NULL), 0);
		ck_assert_int_eq(wait_log(d.dl.log, keys[i], "effect.requeued", ids[i], 1, 5), 1);
	}
	DL_EXPECT_EFFECT(c, ids[3], "unknown", 20);
	row = dl_effect_row(c, ids[3]);
	ck_assert_str_eq(JSTR(row, "reason"), "lease_expired_while_sending");
	json_decref(row);
	tl_sleep_ms(1000);
	ck_assert_int_eq(prov_count(pks[3], NULL), 0);
	disp_stop(&d);
	PQfinish(c);
}
END_TEST

/* ===== 7c. a payload changed in the database after it was decided ================== */

/* Right before the send the stored payload's hash is computed again and
 * compared with the one decided: a payload altered in the database (here
 * by the schema owner, who may write anything) is never sent; the effect
 * fails with a dead letter whose evidence holds both hashes. A payload
 * whose numbers jsonb spells differently (1e-7 stored as 0.0000001) is
 * the same payload and goes out. */
START_TEST(test_payload_changed)
{
	PGconn *c = tl_pg_connect();
	struct disp d;
	struct dconf dc = DCONF;
	char key[200], pk[256], id[40], key2[200], pk2[256], id2[40], decided[72];
	const char *payload = "{\"contact\":\"olga.ivanova@example.com\","
	                      "\"note\":\"Счёт оплачен · 請求書 · الفاتورة 🧾\"}";
	json_t *row, *dl, *att, *ev;
	char *stored;

	tl_mkkey(key, sizeof(key), "payload-changed");
	pkey(pk, sizeof(pk), key, "crm.note");
	make_run(c, key, NULL);
	add_effect_at(c, key, "crm.note", "t_plain", payload, 3600, id);
	tl_effect_hash(payload, decided);
	/* someone with write access redirects it while it waits */
	qexec(c, "UPDATE effect_outbox SET payload = jsonb_set(payload, '{contact}',"
	      " '\"mallory@example.net\"'), not_before = now(), next_attempt_at = now()"
	      " WHERE id = $1::uuid", id, (char *)NULL);
	tl_mkkey(key2, sizeof(key2), "payload-numbers");
	pkey(pk2, sizeof(pk2), key2, "crm.note");
	make_run(c, key2, NULL);
	add_effect(c, key2, "crm.note", "t_plain",
	           "{\"ratio\":1e-7,\"total\":19.90,\"count\":100.0,\"note\":\"Итого\"}", id2);
	stored = qstr(c, "SELECT payload::text FROM effect_outbox WHERE id = $1::uuid", id2,
	              (char *)NULL);
	ck_assert_msg(stored != NULL && strstr(stored, "0.0000001") != NULL,
	              "jsonb keeps 1e-7 as %s", stored ? stored : "(none)");
	free(stored);

	dl_sends(true);
	disp_start(&d, &dc, ENV_TRUE);
	notify(c);
	DL_EXPECT_EFFECT(c, id, "failed", 10);
	DL_EXPECT_EFFECT(c, id2, "completed", 10);
	row = dl_effect_row(c, id);
	ck_assert_str_eq(JSTR(row, "reason"), "payload_changed");
	ck_assert_str_eq(JSTR(row, "error_class"), "permanent");
	json_decref(row);
	att = dl_attempts_of(c, id);
	ck_assert_int_eq(json_array_size(att), 1);
	ev = json_object_get(json_array_get(att, 0), "evidence");
	ck_assert_str_eq(JSTR(ev, "payload_hash_decided"), decided);
	ck_assert_msg(JSTR(ev, "payload_hash_at_send") != NULL &&
	              !streq(JSTR(ev, "payload_hash_at_send"), decided),
	              "evidence: %s", tl_json_text(ev));
	ck_assert(json_is_false(json_object_get(ev, "request_sent")));
	json_decref(att);
	dl = dl_dead_letter_of(c, id);
	ck_assert_msg(dl != NULL && streq(tl_jstr(dl, "error_class"), "permanent") &&
	              streq(tl_jstr(dl, "reason"), "payload_changed"),
	              "dead letter of the changed payload: %s", tl_json_text(dl));
	json_decref(dl);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM dead_letters WHERE effect_id = $1::uuid"
	                      " AND evidence->'attempts'->0->'evidence'->>'payload_hash_decided' = $2",
	                      id, decided, (char *)NULL), 1);
	/* nothing reached the provider, nothing claims it did */
	ck_assert_int_eq(prov_count(pk, NULL), 0);
	ck_assert_int_eq(log_count(d.dl.log, key, "effect.sent", id), 0);
	ck_assert_int_eq(prov_count(pk2, NULL), 1);
	disp_stop(&d);
	PQfinish(c);
}
END_TEST

/* ===== 8. four dispatchers, 2,000 effects ========================================= */

START_TEST(test_many_dispatchers)
{
	PGconn *c = tl_pg_connect();
	struct disp d[BULK_DISPATCHERS];
	struct dconf dc = DCONF;
	char prefix[200], n[16], hash[72];
	json_t *com, *reqs, *r, *seen;
	PGresult *res;
	size_t i;
	int k;
	long long done = 0;
	double deadline, t0;
	char *dist;

	dc.workers = 4;
	dc.batch = 8;
	snprintf(prefix, sizeof(prefix), "%s-bulk-", tl_run);
	snprintf(n, sizeof(n), "%d", BULK_EFFECTS);
	tl_payload_hash("{\"suite\":\"check_dispatch\"}", hash);
	qexec(c, "INSERT INTO workflow_runs (client_id, idempotency_key, payload_hash, payload,"
	      "    state, claim_started_at, workflow_version, decision, decided_at)"
	      " SELECT $1::bigint, $2 || lpad(i::text, 4, '0'), $3, '{\"suite\":\"check_dispatch\"}',"
	      "    'approved', now(), 'dispatch-suite@1', 'auto', now()"
	      "   FROM generate_series(1, $4::int) i", g_client, prefix, hash, n, (char *)NULL);
	qexec(c, "INSERT INTO effect_outbox (client_id, idempotency_key, effect_type, target,"
	      "    payload, payload_hash, provider_key)"
	      " SELECT $1::bigint, $2 || lpad(i::text, 4, '0'), 'crm.tag', 't_bulk',"
	      "    jsonb_build_object('n', i),"
	      /* the hash of its canonical text, {"n":i}, as an enqueue stores it */
	      "    'sha256:' || encode(sha256(convert_to('{\"n\":' || i || '}', 'UTF8')), 'hex'),"
	      "    $2 || lpad(i::text, 4, '0') || '/crm.tag'"
	      "   FROM generate_series(1, $3::int) i", g_client, prefix, n, (char *)NULL);
	dl_sends(true);
	t0 = tl_now();
	for (k = 0; k < BULK_DISPATCHERS; k++)
		disp_start(&d[k], &dc, ENV_TRUE);
	notify(c);
	deadline = tl_now() + 150;
	while (tl_now() < deadline) {
		done = qnum(c, "SELECT count(*) FROM effect_outbox WHERE client_id = $1::bigint"
		            " AND idempotency_key LIKE $2 || '%' AND state NOT IN ('pending', 'sending')",
		            g_client, prefix, (char *)NULL);
		if (done == BULK_EFFECTS)
			break;
		tl_sleep_ms(250);
	}
	ck_assert_msg(done == BULK_EFFECTS, "only %lld of %d effects settled", done, BULK_EFFECTS);
	fprintf(stderr, "check_dispatch: %d effects through %d dispatchers in %.1f s\n",
	        BULK_EFFECTS, BULK_DISPATCHERS, tl_now() - t0);
	for (k = 0; k < BULK_DISPATCHERS; k++)
		disp_stop(&d[k]);

	/* Every one completed, none lost, none sent twice. */
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE client_id = $1::bigint"
	                      " AND idempotency_key LIKE $2 || '%' AND state = 'completed'"
	                      " AND attempt = 1", g_client, prefix, (char *)NULL), BULK_EFFECTS);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE client_id = $1::bigint"
	                      " AND idempotency_key LIKE $2 || '%' AND state = 'completed'", g_client,
	                      prefix, (char *)NULL), BULK_EFFECTS);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_attempts a JOIN effect_outbox e"
	                      "  ON e.id = a.effect_id WHERE e.client_id = $1::bigint"
	                      " AND e.idempotency_key LIKE $2 || '%'", g_client, prefix, (char *)NULL),
	                 BULK_EFFECTS);
	com = prov_committed(prefix);
	ck_assert_msg(json_array_size(com) == BULK_EFFECTS, "the provider committed %zu effects,"
	              " expected %d", json_array_size(com), BULK_EFFECTS);
	seen = json_object();
	json_array_foreach(com, i, r) {
		const char *k2 = tl_jstr(r, "idempotency_key");

		ck_assert_msg(json_object_get(seen, k2) == NULL, "%s committed twice", k2);
		json_object_set_new(seen, k2, json_string(JSTR(r, "id")));
	}
	reqs = prov_requests(prefix, NULL);
	ck_assert_msg(json_array_size(reqs) == BULK_EFFECTS, "the provider got %zu requests,"
	              " expected %d", json_array_size(reqs), BULK_EFFECTS);
	/* each effect's provider id is the one the provider gave its key */
	res = PQexecParams(c, "SELECT provider_key, provider_id FROM effect_outbox"
	                   " WHERE client_id = $1::bigint AND idempotency_key LIKE $2 || '%'", 2,
	                   NULL, (const char *const[]){ g_client, prefix }, NULL, NULL, 0);
	ck_assert_int_eq(PQresultStatus(res), PGRES_TUPLES_OK);
	ck_assert_int_eq(PQntuples(res), BULK_EFFECTS);
	for (k = 0; k < PQntuples(res); k++) {
		const char *want = json_string_value(json_object_get(seen, PQgetvalue(res, k, 0)));

		ck_assert_msg(streq(want, PQgetvalue(res, k, 1)), "%s: provider_id %s, the provider"
		              " says %s", PQgetvalue(res, k, 0), PQgetvalue(res, k, 1),
		              want ? want : "(nothing)");
	}
	PQclear(res);
	/* all four took part */
	dist = qstr(c, "SELECT string_agg(dispatcher || ': ' || n, ', ') FROM"
	            " (SELECT a.dispatcher, count(*) AS n FROM effect_attempts a"
	            "   JOIN effect_outbox e ON e.id = a.effect_id WHERE e.client_id = $1::bigint"
	            "    AND e.idempotency_key LIKE $2 || '%' GROUP BY 1) x", g_client, prefix,
	            (char *)NULL);
	fprintf(stderr, "check_dispatch: sends per dispatcher: %s\n", dist ? dist : "");
	ck_assert_int_eq(qnum(c, "SELECT count(DISTINCT a.dispatcher) FROM effect_attempts a"
	                      "   JOIN effect_outbox e ON e.id = a.effect_id"
	                      "  WHERE e.client_id = $1::bigint AND e.idempotency_key LIKE $2 || '%'",
	                      g_client, prefix, (char *)NULL), BULK_DISPATCHERS);
	free(dist);
	json_decref(reqs);
	json_decref(seen);
	json_decref(com);
	PQfinish(c);
}
END_TEST

/* ===== 9. an expired approval ======================================================== */

START_TEST(test_approval_expired)
{
	PGconn *c = tl_pg_connect();
	struct disp d;
	struct dconf dc = DCONF;
	char key[200], pk[256], n8n_url[512], cb_url[512], cb_path[256];
	char key2[200], pk2[256], id2[40], payload[1024];
	json_t *reqs, *req, *sent, *run, *l, *row, *dl;
	struct tl_resp r;
	char *cb_id;

	tl_mkkey(key, sizeof(key), "expired");
	snprintf(cb_path, sizeof(cb_path), "/webhook-waiting/%s/expired", tl_run);
	snprintf(n8n_url, sizeof(n8n_url), "%s%s", CALLBACK_ORIGIN, cb_path);
	snprintf(cb_url, sizeof(cb_url), "http://127.0.0.1:%d%s", g_http_port, cb_path);

	/* claim → output (support_reply, a person decides) → awaiting_human;
	 * the shipped contracts separate duties: an output names its requester */
	dl_reply_run(key, "Re: your order", "It ships on Friday.", n8n_url,
	             "check-dispatch@workflows.example", &r);
	tl_resp_free(&r);

	/* n8n does not listen in the test stack: the callback goes to the
	 * provider instead; and time passes. */
	ck_assert_int_eq(qexec(c, "UPDATE workflow_runs SET callback_url = $3"
	                       " WHERE client_id = $1::bigint AND idempotency_key = $2",
	                       g_client, key, cb_url, (char *)NULL), 1);
	ck_assert_int_ge(qexec(c, "UPDATE approvals SET callback_url = $3,"
	                       "    expires_at = now() - interval '1 second'"
	                       " WHERE client_id = $1::bigint AND idempotency_key = $2"
	                       "   AND state = 'pending'", g_client, key, cb_url, (char *)NULL), 1);
	dl_sends(true);
	disp_start(&d, &dc, ENV_TRUE);

	{
		char *st = wait_run(c, key, "failed_terminal", 10);

		ck_assert_msg(streq(st, "failed_terminal"), "run %s is %s after its approval expired",
		              key, st);
		free(st);
	}
	run = qjson(c, "SELECT row_to_json(r)::text FROM workflow_runs r"
	            " WHERE client_id = $1::bigint AND idempotency_key = $2", g_client, key,
	            (char *)NULL);
	ck_assert_str_eq(JSTR(run, "error_class"), "approval_expired");
	ck_assert_str_eq(JSTR(run, "decision"), "expired");
	json_decref(run);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE client_id = $1::bigint"
	                      " AND idempotency_key = $2 AND state <> 'expired'", g_client, key,
	                      (char *)NULL), 0);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM run_events WHERE client_id = $1::bigint"
	                      " AND idempotency_key = $2 AND event = 'run.approval_expired'",
	                      g_client, key, (char *)NULL), 1);
	/* nothing the approval would have enqueued */
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE client_id = $1::bigint"
	                      " AND idempotency_key = $2 AND effect_type = 'email.send'", g_client,
	                      key, (char *)NULL), 0);

	/* The workflow is told: one decision.callback POST to its resume URL. */
	cb_id = qstr(c, "SELECT id FROM effect_outbox WHERE client_id = $1::bigint"
	             " AND idempotency_key = $2 AND effect_type = 'decision.callback'"
	             " AND target = 'callback'", g_client, key, (char *)NULL);
	ck_assert_msg(cb_id != NULL, "no decision.callback effect was enqueued");
	/* its provider key, stored when it was enqueued: this client's own */
	{
		char *stored = qstr(c, "SELECT provider_key FROM effect_outbox WHERE id = $1::uuid",
		                    cb_id, (char *)NULL);
		char *want = tl_provider_key(g_client, key, "decision.callback", "callback", 0);

		ck_assert_msg(streq(stored, want), "the callback's provider key is %s, expected %s",
		              stored ? stored : "(none)", want);
		snprintf(pk, sizeof(pk), "%s", stored);
		free(stored);
		free(want);
	}
	DL_EXPECT_EFFECT(c, cb_id, "completed", 10);
	reqs = prov_requests(pk, NULL);
	ck_assert_int_eq(json_array_size(reqs), 1);
	req = json_array_get(reqs, 0);
	ck_assert_str_eq(JSTR(req, "method"), "POST");
	ck_assert_str_eq(JSTR(req, "path"), cb_path);
	sent = json_loads(JSTR(req, "body"), 0, NULL);
	ck_assert_msg(json_is_object(sent) && json_object_size(sent) == 2 &&
	              streq(tl_jstr(sent, "decision"), "expired") && streq(tl_jstr(sent, "key"), key),
	              "callback body %s, expected {\"decision\":\"expired\",\"key\":\"%s\"}",
	              JSTR(req, "body"), key);
	json_decref(sent);
	json_decref(reqs);

	l = log_one(d.dl.log, key, "approval.expired", NULL);
	ck_assert_str_eq(JSTR(l, "decision"), "expired");
	ck_assert_str_eq(JSTR(l, "state_to"), "failed_terminal");
	json_decref(l);
	ck_assert_int_eq(wait_log(d.dl.log, key, "effect.completed", cb_id, 1, 5), 1);
	/* the tick does it once */
	tl_sleep_ms(1000);
	ck_assert_int_eq(log_count(d.dl.log, key, "approval.expired", NULL), 1);
	ck_assert_int_eq(prov_count(pk, NULL), 1);

	/* A callback URL outside the callback target's URL is never called,
	 * whatever the payload says: it fails, dead-lettered, unsent. (The
	 * provider listens on localhost too: a request would be recorded.) */
	tl_mkkey(key2, sizeof(key2), "callback-outside");
	pkey(pk2, sizeof(pk2), key2, "decision.callback");
	snprintf(payload, sizeof(payload), "{\"url\":\"http://localhost:%d%s\",\"key\":\"%s\","
	         "\"decision\":\"approved\"}", g_http_port, cb_path, key2);
	make_run(c, key2, NULL);
	add_effect(c, key2, "decision.callback", "callback", payload, id2);
	notify(c);
	DL_EXPECT_EFFECT(c, id2, "failed", 10);
	row = dl_effect_row(c, id2);
	ck_assert_str_eq(JSTR(row, "reason"), "payload_invalid");
	json_decref(row);
	dl = dl_dead_letter_of(c, id2);
	ck_assert_msg(dl != NULL && streq(tl_jstr(dl, "error_class"), "permanent"),
	              "dead letter of the refused callback: %s", tl_json_text(dl));
	json_decref(dl);
	ck_assert_int_eq(log_count(d.dl.log, key2, "effect.sent", id2), 0);
	ck_assert_int_eq(prov_count(pk2, NULL), 0);
	disp_stop(&d);
	free(cb_id);
	PQfinish(c);
}
END_TEST

/* ===== 10. act with window ============================================================= */

START_TEST(test_window)
{
	PGconn *c = tl_pg_connect();
	struct disp d;
	struct dconf dc = DCONF;
	char ka[200], kb[200], pa[256], pb[256], ida[40], idb[40];
	json_t *reqs, *body;
	struct tl_resp r;
	double nb, sent_at;
	char *path, *nbs, *st;

	tl_mkkey(ka, sizeof(ka), "window-send");
	tl_mkkey(kb, sizeof(kb), "window-cancel");
	pkey(pa, sizeof(pa), ka, "crm.tag");
	pkey(pb, sizeof(pb), kb, "crm.tag");
	dl_sends(true);
	disp_start(&d, &dc, ENV_TRUE);
	make_run(c, ka, NULL);
	add_effect_at(c, ka, "crm.tag", "t_http", "{\"contact\":\"c-20\"}", 3.0, ida);
	make_run(c, kb, NULL);
	add_effect_at(c, kb, "crm.tag", "t_http", "{\"contact\":\"c-21\"}", 3.0, idb);
	notify(c);

	/* The workflow cancels the second inside its window. */
	path = tl_run_path(kb, "/cancel");
	body = json_pack("{s:s}", "reason", "the customer withdrew the request");
	tl_post_json(path, g_key_dev, body, &r);
	json_decref(body);
	free(path);
	ASSERT_STATUS(&r, 200);
	tl_resp_free(&r);

	tl_sleep_ms(1500);
	ck_assert_msg(prov_count(pa, NULL) == 0, "sent before its window ended");
	DL_EXPECT_EFFECT(c, ida, "completed", 10);
	nbs = qstr(c, "SELECT extract(epoch FROM not_before)::text FROM effect_outbox"
	           " WHERE id = $1::uuid", ida, (char *)NULL);
	nb = strtod(nbs, NULL);
	free(nbs);
	reqs = prov_requests(pa, NULL);
	ck_assert_int_eq(json_array_size(reqs), 1);
	sent_at = req_time(json_array_get(reqs, 0));
	ck_assert_msg(sent_at >= nb, "sent %.3f s before not_before", nb - sent_at);
	ck_assert_msg(sent_at < nb + 3.0, "sent %.3f s after not_before", sent_at - nb);
	json_decref(reqs);

	/* The cancelled one: never sent. */
	tl_sleep_ms(1000);
	ck_assert_int_eq(prov_count(pb, NULL), 0);
	st = dl_effect_state(c, idb);
	ck_assert_msg(streq(st, "cancelled"), "the cancelled effect is %s", st);
	free(st);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_attempts WHERE effect_id = $1::uuid",
	                      idb, (char *)NULL), 0);
	ck_assert_int_eq(log_count(d.dl.log, kb, "effect.claimed", NULL), 0);
	disp_stop(&d);
	PQfinish(c);
}
END_TEST

/* ===== 11. SIGTERM with a send in flight ================================================ */

/* One worker claims all four effects (one batch); the first send stalls;
 * SIGTERM. The dispatcher must exit within its shutdown deadline and a
 * margin, and give back every effect it claimed but did not send. */
static void
sigterm_case(PGconn *c, const char *name, const char *target, int shutdown_s,
             const char *const sent_states[])
{
	struct disp d;
	struct dconf dc = DCONF;
	char key[200], prefix[256], ids[4][40], type[32];
	json_t *reqs;
	double took;
	char *sent_pk;
	int i, sent = 0;

	dc.workers = 1;
	dc.batch = 8;
	dc.shutdown_s = shutdown_s;
	tl_mkkey(key, sizeof(key), name);
	snprintf(prefix, sizeof(prefix), "%s/", key);
	make_run(c, key, NULL);
	for (i = 0; i < 4; i++) {
		snprintf(type, sizeof(type), "crm.note%d", i);
		add_effect(c, key, type, target, "{\"fault\":\"stall\"}", ids[i]);
	}
	disp_start(&d, &dc, ENV_TRUE);
	notify(c);
	ck_assert_msg(wait_prov(prefix, "effect", 1, 10) == 1, "%s: nothing was sent", name);
	tl_sleep_ms(200);
	took = disp_stop(&d);
	ck_assert_msg(took <= shutdown_s + 2.0, "%s: exit %.1f s after SIGTERM"
	              " (dispatch_shutdown_seconds = %d)", name, took, shutdown_s);
	reqs = prov_requests(prefix, NULL);
	ck_assert_int_eq(json_array_size(reqs), 1);
	sent_pk = strdup(JSTR(json_array_get(reqs, 0), "idempotency_key"));
	json_decref(reqs);
	for (i = 0; i < 4; i++) {
		json_t *row = dl_effect_row(c, ids[i]);
		const char *st = tl_jstr(row, "state");

		if (streq(tl_jstr(row, "provider_key"), sent_pk)) {
			sent++;
			ck_assert_msg(streq(st, sent_states[0]) || streq(st, sent_states[1]),
			              "%s: the effect in flight is %s after SIGTERM: %s", name, st,
			              tl_json_text(row));
			ck_assert_int_eq(jint(row, "attempt"), 1);
		} else {
			ck_assert_msg(streq(st, "pending") && jint(row, "attempt") == 0 &&
			              json_is_null(json_object_get(row, "lease_owner")) &&
			              json_is_null(json_object_get(row, "first_attempt_at")),
			              "%s: an effect claimed but never sent is not pending with its"
			              " attempt given back after SIGTERM: %s", name, tl_json_text(row));
		}
		json_decref(row);
	}
	ck_assert_int_eq(sent, 1);
	ck_assert_int_eq(log_count(d.dl.log, NULL, "dispatch.stopped", NULL), 1);
	free(sent_pk);
}

START_TEST(test_sigterm)
{
	static const char *const timed_out[] = { "unknown", "unknown" };
	static const char *const in_flight[] = { "sending", "unknown" };
	PGconn *c = tl_pg_connect();

	dl_sends(true);
	/* The stalled send times out (1.5 s) inside the deadline (5 s): it
	 * settles as unknown, the rest of the batch goes back. */
	sigterm_case(c, "sigterm-timeout", "t_plain", 5, timed_out);
	/* The stalled send (timeout 10 s) outlasts the deadline (2 s): the
	 * process exits with it in flight; it stays leased (and becomes
	 * unknown when the lease runs out), the rest must still go back. */
	sigterm_case(c, "sigterm-deadline", "t_slow", 2, in_flight);
	PQfinish(c);
}
END_TEST

/* ---- the suite ---------------------------------------------------------------- */

TL_SUITE(dispatch_suite, "dispatch",
         {"dispatch", TEST_TIMEOUT_S, dl_tcase,
          .tests = TL_LIST(test_http_happy, test_smtp_happy, test_idempotent_retry,
                           test_retry_policy, test_provider_text_redacted, test_kill_switch,
                           test_batch_wait_keeps_lease, test_window, test_approval_expired,
                           test_sigterm, test_ambiguous_without_keys, test_kill9_mid_send,
                           test_kill9_before_send, test_payload_changed,
                           test_many_dispatchers)})

/* Outside a test: plain libpq, no Check assertions. */
static bool
suite_db_prepare(void)
{
	PGconn *c;
	PGresult *res;
	bool ok = false;

	g_key_dev = tl_env("ONCEGATE_API_KEY");
	if (!dl_client_id("dev", g_client, sizeof(g_client)))
		return false;
	c = PQconnectdb("");
	/* Earlier suites leave effects for targets no dispatcher here knows. */
	res = PQexec(c, "UPDATE effect_outbox SET state = 'cancelled', updated_at = now()"
	             " WHERE state IN ('pending', 'unknown')");
	ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	if (!ok)
		fprintf(stderr, "check_dispatch: %s\n", PQerrorMessage(c));
	PQclear(res);
	PQfinish(c);
	return ok;
}

DL_SUITE_MAIN(.name = "check_dispatch", .prefix = "dt", .needed = "ONCEGATE_API_KEY",
              .suite = dispatch_suite, .prepare = suite_db_prepare, .http_stall_s = STALL_S,
              .smtp = true)

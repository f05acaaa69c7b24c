/*
 * check_observe.c — integration suite of what operators see and what
 * retention removes (issue 13, "Seeds that are only partly built"): the
 * decision log's model, loggable output fields and client names in every
 * program; /metrics' attempts and retries by target and class, lease
 * reclaims, effects held by the kill switch, build info and latency per
 * route (read with the Prometheus client library); the retention purge of
 * attempt excerpts and dead-letter snapshots; the approval card's errors of
 * an earlier draft; the recovery envelope's event_id and next_attempt_at in
 * the API and the CLI alike; and a dead-letter replay after the contract
 * changed, which asks for a new draft.
 *
 * Against the stack that `./dev test` starts (responder behind nginx, the
 * cluster, oncegatectl), with oncegate-dispatch and the loopback HTTP
 * provider started here; skipped (77) without it. Keys carry a per-run
 * prefix ("ob<epoch>-<pid>"); other suites share the database, so figures
 * are compared before and after.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "dispatchlib.h"
#include "testlib.h"

#define TEST_TIMEOUT_S  120
#define SETTLE_MS       2600   /* a responder's flush (1 s) and cache (1 s), with room */
#define APPROVER        "amira.haddad@example.com"
/* oauth2-proxy joins groups with commas */
#define APPROVER_GROUPS "customer support,support,ops"
#define REQUESTER       "n8n-agent@example.com"

static const char *g_key_dev;
static const char *g_base;
static char g_client[24];        /* id of client "dev" */

/* Long multilingual text, as real tickets carry. */
static const char body_text[] =
	"Здравствуйте, Ольга! Ваш заказ №42 прибудет в пятницу. "
	"ご注文の商品は金曜日に到着します。 "
	"طلبك رقم ٤٢ سيصل يوم الجمعة. "
	"ההזמנה שלך תגיע ביום שישי. 📦🚚 "
	"Thank you for your patience; the courier will call before delivery.";

static char *
dump(const json_t *v)
{
	char *s = v != NULL ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS) : NULL;

	return s != NULL ? s : strdup("(null)");
}

/* ---- the API ------------------------------------------------------------------ */

static void
claim(const char *key, const char *event_id, const char *correlation_id, struct tl_claimed *c)
{
	json_t *body = json_pack("{s:s, s:{s:s, s:i, s:s}, s:s, s:s, s:i}", "key", key, "payload",
	                         "ticket", "T-42", "lines", 3, "note", body_text, "trigger",
	                         "webhook:helpdesk", "workflow_version", "support-reply@7",
	                         "lease_seconds", 60);

	if (event_id != NULL)
		json_object_set_new(body, "event_id", json_string(event_id));
	if (correlation_id != NULL)
		json_object_set_new(body, "correlation_id", json_string(correlation_id));
	tl_claim_body(g_key_dev, body, c);
	json_decref(body);
}

/* A support_reply output; confidence 1.5 breaks the contract (maximum 1). */
static json_t *
reply_output(double confidence)
{
	return json_pack("{s:s, s:s, s:s, s:f}", "subject", "Re: заказ №42 · 注文 42 · طلب ٤٢",
	                 "body", body_text, "tone", "friendly", "confidence", confidence);
}

static void
post_output(const char *key, const char *contract, const struct tl_claimed *c, long long version,
            json_t *output, struct tl_resp *r)
{
	char *path = tl_run_path(key, "/output");
	json_t *body = json_pack(
		"{s:s, s:I, s:s, s:o, s:{s:s, s:s, s:s}, s:{s:s, s:s, s:{s:s, s:i, s:s}},"
		" s:s, s:s}",
		"lease_owner", c->owner, "version", (json_int_t)version, "contract", contract,
		"output", output, "model", "provider", "openai-compatible", "name",
		"qwen2.5-7b-instruct", "revision", "2024-09-19", "effect", "type", "email.send",
		"target", "demo_smtp", "payload", "to", "olga.ivanova@example.com", "ticket", 42,
		"in_reply_to", "<msg-42@example.com>", "source_url",
		"https://crm.example/ticket/42?view=full", "requested_by", REQUESTER);

	ck_assert_ptr_nonnull(body);
	tl_post_json(path, g_key_dev, body, r);
	json_decref(body);
	free(path);
}

/* The one approval link's token of an awaiting_human answer. */
static void
token_of(const struct tl_resp *r, char *token, size_t n)
{
	const char *url = tl_jstr(json_array_get(json_object_get(r->json, "approvals"), 0), "url");
	const char *t = url != NULL ? strstr(url, "/approve/") : NULL;

	ck_assert_msg(r->status == 202 && t != NULL, "%s: expected 202 awaiting_human: %s", r->what,
	              r->body);
	snprintf(token, n, "%s", t + strlen("/approve/"));
}

/* GET or POST /approve/{token} as a browser behind the SSO stand-in. */
static void
page(const char *token, const char *form, struct tl_resp *r, char **hdrs)
{
	char path[256], origin[300];
	const char *h[] = { "X-Dev-User: " APPROVER, "X-Dev-Groups: " APPROVER_GROUPS, origin,
		            "Sec-Fetch-Site: same-origin", NULL };
	int i;

	snprintf(path, sizeof(path), "/approve/%s", token);
	snprintf(origin, sizeof(origin), "Origin: %s", g_base);
	for (i = 0; i < 8; i++) {
		if (form != NULL)
			tl_http_hdrs("POST", path, h, "application/x-www-form-urlencoded", form,
			             strlen(form), r, hdrs);
		else
			tl_http_hdrs("GET", path, h, NULL, NULL, 0, r, hdrs);
		if (r->status != 429)
			break;
		tl_resp_free(r);
		free(*hdrs);
		*hdrs = NULL;
		tl_sleep_ms(1000);
	}
}

/* The value of the page's hidden csrf input (malloc'd). */
static char *
csrf_of(const char *html)
{
	const char *at = strstr(html, "name=\"csrf\""), *open, *close, *v;

	ck_assert_msg(at != NULL, "the page has no csrf input: %.2000s", html);
	for (open = at; open > html && *open != '<'; open--)
		;
	close = strchr(at, '>');
	v = strstr(open, "value=\"");
	ck_assert_msg(close != NULL && v != NULL && v < close, "csrf input without a value");
	v += strlen("value=\"");
	return strndup(v, (size_t)(strchr(v, '"') - v));
}

/* ---- the decision log ------------------------------------------------------------ */

/* The lines of the log since off about key with event name. */
static json_t *
lines_of(long off, const char *key, const char *event, size_t want)
{
	json_t *all = tl_log_collect(off, tl_log_is_key, key, want), *sel = json_array(), *l;
	size_t i;

	json_array_foreach(all, i, l)
		if (tl_jstr(l, "event") != NULL && strcmp(tl_jstr(l, "event"), event) == 0)
			json_array_append(sel, l);
	json_decref(all);
	return sel;
}

/* The model as every decision line about an output must carry it. */
static void
expect_model(const json_t *l)
{
	json_t *want = json_pack("{s:s, s:s, s:s}", "provider", "openai-compatible", "name",
	                         "qwen2.5-7b-instruct", "revision", "2024-09-19");
	char *a = dump(json_object_get(l, "model")), *b = dump(want);

	ck_assert_msg(json_equal(json_object_get(l, "model"), want),
	              "%s: model is %s, expected %s", tl_jstr(l, "event"), a, b);
	free(a);
	free(b);
	json_decref(want);
}

/* The contract's loggable fields, and nothing else of the output. */
static void
expect_loggable(const json_t *l, double confidence)
{
	json_t *want = json_pack("{s:f, s:s}", "/confidence", confidence, "/tone", "friendly");
	char *line = dump(l), *b = dump(want);

	ck_assert_msg(json_equal(json_object_get(l, "output"), want),
	              "%s: output is not the loggable fields %s: %s", tl_jstr(l, "event"), b, line);
	ck_assert_msg(strstr(line, "Ольга") == NULL && strstr(line, "金曜日") == NULL &&
	              strstr(line, "subject") == NULL,
	              "%s: a field the contract does not mark loggable was logged: %s",
	              tl_jstr(l, "event"), line);
	free(line);
	free(b);
	json_decref(want);
}

static void
expect_str(const json_t *l, const char *name, const char *want)
{
	char *line = dump(l);

	ck_assert_msg(tl_jstr(l, name) != NULL && strcmp(tl_jstr(l, name), want) == 0,
	              "%s: %s is not \"%s\": %s", tl_jstr(l, "event"), name, want, line);
	free(line);
}

/* ---- /metrics ---------------------------------------------------------------------- */

static json_t *
scrape(void)
{
	char path[] = "/tmp/check_observe-XXXXXX", *cmd = NULL, *out, parser[PATH_MAX];
	struct tl_resp r;
	json_t *doc;
	FILE *f;
	int fd;

	tl_get("/metrics", NULL, &r);
	ASSERT_STATUS(&r, 200);
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	f = fdopen(fd, "w");
	ck_assert_ptr_nonnull(f);
	fputs(r.body, f);
	fclose(f);
	snprintf(parser, sizeof(parser), "%s/../metrics_parse.py", tl_env("ONCEGATE_PROVIDERS"));
	ck_assert_int_ge(asprintf(&cmd, "'%s' '%s' '%s' 2>&1", tl_env("ONCEGATE_PYTHON"), parser,
	                          path), 0);
	out = tl_shell_output(cmd);
	free(cmd);
	unlink(path);
	ck_assert_msg(out != NULL, "could not run %s", parser);
	doc = json_loads(out, 0, NULL);
	ck_assert_msg(json_is_object(doc) && json_object_get(doc, "error") == NULL,
	              "the Prometheus parser refused /metrics: %.1000s\n---\n%.3000s", out, r.body);
	free(out);
	tl_resp_free(&r);
	return doc;
}

/* A sample's value; absent counts as 0 when zero_ok (a series that has
 * nothing yet), else fails the test. */
static double
sample(const json_t *doc, const char *key, bool zero_ok)
{
	json_t *v = json_object_get(json_object_get(doc, "samples"), key);

	if (v == NULL && zero_ok)
		return 0;
	ck_assert_msg(json_is_number(v), "/metrics has no sample %s", key);
	return json_number_value(v);
}

/* ---- the dispatcher ------------------------------------------------------------------- */

static void
disp_start(struct dl_disp *d)
{
	char text[3 * PATH_MAX];

	snprintf(text, sizeof(text),
	         "log_file = %s\nlog_level = info\ndispatch_workers = 2\ndispatch_batch = 4\n"
	         "dispatch_lease_seconds = 30\ndispatch_poll_ms = 200\n"
	         "dispatch_shutdown_seconds = 5\nreconcile_interval_seconds = 1\n"
	         "retention_days = 7\n\n"
	         "[target ob_http]\nkind = http\nurl = http://127.0.0.1:%d/idem/effects\n"
	         "idempotency_key = 1\nprovider_id_header = X-Provider-Id\ntimeout_ms = 5000\n"
	         "max_attempts = 3\nbase_ms = 200\ncap_ms = 1000\njitter_percent = 0\n",
	         dl_disp_files(d), g_http_port);
	dl_disp_start(d, text, ENV_TRUE);
}

static void
kill_switch(bool on)
{
	char *out = NULL;
	int rc = tl_ctl(&out, "sends", on ? "resume" : "stop", "--reason",
	                on ? "check_observe sends" : "check_observe holds", (char *)NULL);

	ck_assert_msg(rc == 0, "kill-switch: exit %d: %s", rc, out ? out : "");
	free(out);
}

/* A run as the responder leaves it once its effects may go out. */
static void
make_run(PGconn *c, const char *key)
{
	qexec(c, "INSERT INTO workflow_runs (client_id, idempotency_key, payload_hash, payload,"
	      "    state, claim_started_at, workflow_version, correlation_id, contract,"
	      "    decision, decided_at)"
	      " VALUES ($1::bigint, $2::text, 'sha256:0b5e', '{\"ticket\": 42}', 'approved', now(),"
	      "    'crm-sync@3', 'corr-' || $2, 'crm_tag', 'auto', now())",
	      g_client, key, (char *)NULL);
}

static char *
add_effect(PGconn *c, const char *key, const char *type, const char *payload)
{
	char hash[72], *id;

	tl_effect_hash(payload, hash);
	id = qstr(c, "INSERT INTO effect_outbox (client_id, idempotency_key, effect_type,"
	          "    target, payload, payload_hash, provider_key)"
	          " VALUES ($1::bigint, $2, $3, 'ob_http', $4::jsonb, $5, $2 || '/' || $3)"
	          " RETURNING id",
	          g_client, key, type, payload, hash, (char *)NULL);

	ck_assert_ptr_nonnull(id);
	return id;
}

static bool
wait_sql(PGconn *c, const char *sql, const char *arg, long long want, double secs)
{
	double deadline = tl_now() + secs;

	for (;;) {
		if (qnum(c, sql, arg, (char *)NULL) == want)
			return true;
		if (tl_now() > deadline)
			return false;
		tl_sleep_ms(100);
	}
}

/* ===== the decision log, the card, the envelope ===================================== */

START_TEST(test_output_log_card_envelope)
{
	PGconn *c = tl_pg_connect();
	char key[200], key2[200], event_id[128], token[128], *csrf, *form, *hdrs = NULL;
	char *path, *out = NULL;
	struct tl_claimed cl, cl2;
	struct tl_resp r;
	json_t *lines, *l, *eff, *dl;
	long long v1;
	long off = tl_log_offset();

	tl_mkkey(key, sizeof(key), "reply");
	snprintf(event_id, sizeof(event_id), "helpdesk-delivery-%s", tl_run);
	claim(key, event_id, "corr-reply", &cl);

	/* A draft that breaks the contract, then its repair. */
	post_output(key, "support_reply", &cl, cl.version, reply_output(1.5), &r);
	ASSERT_STATUS(&r, 422);
	ck_assert_msg(tl_jint(r.json, "version", &v1), "422 without version: %s", r.body);
	tl_resp_free(&r);
	post_output(key, "support_reply", &cl, v1, reply_output(0.82), &r);
	token_of(&r, token, sizeof(token));
	tl_resp_free(&r);

	/* The log: the model's provider, name and revision; the contract's
	 * loggable fields and nothing else of the output; the client's name. */
	lines = lines_of(off, key, "output.valid", 1);
	ck_assert_msg(json_array_size(lines) == 1, "no output.valid line for %s", key);
	l = json_array_get(lines, 0);
	expect_model(l);
	expect_loggable(l, 0.82);
	expect_str(l, "client", "dev");
	json_decref(lines);
	lines = lines_of(off, key, "gate.awaiting_human", 1);
	ck_assert_msg(json_array_size(lines) == 1, "no gate.awaiting_human line for %s", key);
	expect_model(json_array_get(lines, 0));
	expect_loggable(json_array_get(lines, 0), 0.82);
	json_decref(lines);

	/* The card shows what the model got wrong before its repair. */
	page(token, NULL, &r, &hdrs);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(strstr(r.body, "earlier draft failed validation") != NULL &&
	              strstr(r.body, "/confidence") != NULL,
	              "the card does not show the errors of the rejected draft: %.6000s", r.body);
	csrf = csrf_of(r.body);
	tl_resp_free(&r);
	free(hdrs);
	hdrs = NULL;

	/* The approval: its line carries the loggable fields too. */
	off = tl_log_offset();
	form = tl_form("decision", "approve", "csrf", csrf, "reason",
	               "проверено · 確認済み · تمت المراجعة", (char *)NULL);
	page(token, form, &r, &hdrs);
	ck_assert_msg(r.status == 303, "the decision: HTTP %ld: %.2000s", r.status, r.body);
	tl_resp_free(&r);
	free(hdrs);
	free(form);
	free(csrf);
	lines = lines_of(off, key, "approval.consumed", 1);
	ck_assert_msg(json_array_size(lines) == 1, "no approval.consumed line for %s", key);
	l = json_array_get(lines, 0);
	expect_loggable(l, 0.82);
	expect_str(l, "contract", "support_reply");
	expect_str(l, "decision", "approve");
	json_decref(lines);

	/* The envelope: the upstream event id; next_attempt_at while pending. */
	path = tl_run_path(key, NULL);
	tl_get(path, g_key_dev, &r);
	free(path);
	ASSERT_STATUS(&r, 200);
	eff = json_array_get(json_object_get(r.json, "effects"), 0);
	ck_assert_msg(eff != NULL && tl_jstr(eff, "event_id") != NULL &&
	              strcmp(tl_jstr(eff, "event_id"), event_id) == 0,
	              "the envelope's event_id is not the claim's event_id %s: %s", event_id, r.body);
	ck_assert_msg(tl_jstr(eff, "next_attempt_at") != NULL, "a pending effect without "
	              "next_attempt_at: %s", r.body);
	tl_resp_free(&r);

	/* Without an event id, the correlation id stands for it; the API and
	 * the CLI give next_attempt_at the same value in the same format. */
	tl_mkkey(key2, sizeof(key2), "window");
	claim(key2, NULL, "corr-window-Ω", &cl2);
	post_output(key2, "support_window", &cl2, cl2.version, reply_output(0.6), &r);
	ck_assert_msg(r.status == 202 && tl_jstr(r.json, "effect_id") != NULL,
	              "support_window: %s", r.body);
	{
		char id[64];
		char *api_next, *cli_next, *api_event;

		snprintf(id, sizeof(id), "%s", tl_jstr(r.json, "effect_id"));
		tl_resp_free(&r);
		/* what the dispatcher leaves when a send's outcome was ambiguous */
		qexec(c, "UPDATE effect_outbox SET state = 'unknown', attempt = 1,"
		      "    error_class = 'ambiguous', reason = 'timeout_after_send_not_idempotent',"
		      "    next_attempt_at = now() + interval '37 minutes 12.345 seconds'"
		      " WHERE id = $1::uuid", id, (char *)NULL);
		qexec(c, "INSERT INTO dead_letters (effect_id, client_id, idempotency_key, component,"
		      "    error_class, reason, evidence, next_action, retention_until)"
		      " VALUES ($1::uuid, $2::bigint, $3, 'dispatcher', 'unknown',"
		      "    'timeout_after_send_not_idempotent', '{}', 'reconcile', now() + interval '7 days')",
		      id, g_client, key2, (char *)NULL);
		path = tl_run_path(key2, NULL);
		tl_get(path, g_key_dev, &r);
		free(path);
		ASSERT_STATUS(&r, 200);
		eff = json_array_get(json_object_get(r.json, "effects"), 0);
		api_next = strdup(tl_jstr(eff, "next_attempt_at") ?: "(null)");
		api_event = strdup(tl_jstr(eff, "event_id") ?: "(null)");
		tl_resp_free(&r);
		ck_assert_msg(tl_ctl(&out, "--json", "deadletter", "show", id, (char *)NULL) == 0,
		              "deadletter show: %s", out ? out : "");
		dl = json_loads(out, 0, NULL);
		ck_assert_msg(dl != NULL, "deadletter show --json is not JSON: %s", out);
		cli_next = strdup(tl_jstr(json_object_get(dl, "envelope"), "next_attempt_at") ?: "(null)");
		ck_assert_str_eq(api_event, "corr-window-Ω");
		ck_assert_str_eq(tl_jstr(json_object_get(dl, "envelope"), "event_id") ?: "(null)",
		                 "corr-window-Ω");
		ck_assert_msg(strcmp(api_next, cli_next) == 0 && strcmp(api_next, "(null)") != 0,
		              "next_attempt_at: API %s, CLI %s", api_next, cli_next);
		free(api_next);
		free(cli_next);
		free(api_event);
		json_decref(dl);
		free(out);
		out = NULL;

		/* settled: neither shows a next attempt */
		qexec(c, "UPDATE effect_outbox SET state = 'completed', completed_at = now()"
		      " WHERE id = $1::uuid", id, (char *)NULL);
		path = tl_run_path(key2, NULL);
		tl_get(path, g_key_dev, &r);
		free(path);
		eff = json_array_get(json_object_get(r.json, "effects"), 0);
		ck_assert_msg(json_is_null(json_object_get(eff, "next_attempt_at")),
		              "a completed effect still shows next_attempt_at: %s", r.body);
		tl_resp_free(&r);
		ck_assert_int_eq(tl_ctl(&out, "--json", "deadletter", "show", id, (char *)NULL), 0);
		dl = json_loads(out, 0, NULL);
		ck_assert_msg(json_is_null(json_object_get(json_object_get(dl, "envelope"),
		                                           "next_attempt_at")),
		              "the CLI shows next_attempt_at for a completed effect: %s", out);
		json_decref(dl);
		free(out);
	}
	PQfinish(c);
}
END_TEST

/* ===== /metrics and the dispatcher ======================================================= */

START_TEST(test_metrics_dispatch)
{
	PGconn *c = tl_pg_connect();
	char key[200], rkey[200], pattern[256], *ids[3], *id_lease, *out = NULL;
	json_t *before, *after, *mid, *lines, *l;
	struct tl_claimed cl;
	struct tl_resp r;
	struct dl_disp d;
	long long blocked0;
	size_t i;
	long off;

	/* Work other suites left pending is not ours to count or send. */
	qexec(c, "UPDATE effect_outbox SET state = 'cancelled' WHERE state IN ('pending', 'unknown')",
	      (char *)NULL);
	before = scrape();
	blocked0 = qnum(c, "SELECT blocked_sends FROM dispatch_control", (char *)NULL);

	/* Requests of three routes, and a run whose lease ran out taken over;
	 * a failed_retryable run taken over is no lease reclaim. */
	tl_mkkey(rkey, sizeof(rkey), "reclaim");
	claim(rkey, NULL, NULL, &cl);
	qexec(c, "UPDATE workflow_runs SET lease_expires_at = now() - interval '1 second'"
	      " WHERE idempotency_key = $1", rkey, (char *)NULL);
	claim(rkey, NULL, NULL, &cl);
	{
		char *p = tl_run_path(rkey, "/transition");
		json_t *b = json_pack("{s:s, s:I, s:s, s:s}", "lease_owner", cl.owner, "version",
		                      (json_int_t)cl.version, "to", "failed_retryable", "error_class",
		                      "timeout");

		tl_post_json(p, g_key_dev, b, &r);
		ASSERT_STATUS(&r, 200);
		tl_resp_free(&r);
		json_decref(b);
		free(p);
	}
	claim(rkey, NULL, NULL, &cl);
	for (i = 0; i < 3; i++) {
		char *p = tl_run_path(rkey, NULL);

		tl_get(p, g_key_dev, &r);
		ASSERT_STATUS(&r, 200);
		tl_resp_free(&r);
		free(p);
	}
	tl_get("/healthz", NULL, &r);
	tl_resp_free(&r);

	/* Three effects due while the switch is off, one sending under a lease
	 * that ran out (its dispatcher died mid-send). */
	tl_mkkey(key, sizeof(key), "held");
	make_run(c, key);
	ids[0] = add_effect(c, key, "crm.tag", "{\"contact\": \"c-42\", \"tag\": \"lead\","
	                    " \"fault\": [\"503\", \"ok\"]}");
	ids[1] = add_effect(c, key, "crm.note", "{\"contact\": \"c-42\", \"note\": \"Звонок · 電話\"}");
	ids[2] = add_effect(c, key, "crm.task", "{\"contact\": \"c-42\", \"task\": \"اتصل\"}");
	id_lease = qstr(c, "INSERT INTO effect_outbox (client_id, idempotency_key, effect_type,"
	                "    target, payload, payload_hash, provider_key, state, attempt, lease_owner,"
	                "    lease_expires_at, first_attempt_at)"
	                " VALUES ($1::bigint, $2, 'crm.call', 'ob_http', '{}', 'sha256:0c',"
	                "    $2 || '/crm.call', 'sending', 1, gen_random_uuid(),"
	                "    now() - interval '1 second', now() - interval '9 seconds') RETURNING id",
	                g_client, key, (char *)NULL);
	kill_switch(false);
	disp_start(&d);
	ck_assert_msg(wait_sql(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                       " AND state = 'pending' AND held_at IS NOT NULL", key, 3, 10),
	              "the three due effects were not marked held");
	tl_sleep_ms(1500); /* several ticks: each held effect still counts once */
	ck_assert_int_eq(qnum(c, "SELECT blocked_sends FROM dispatch_control", (char *)NULL) -
	                     blocked0, 3);
	tl_sleep_ms(SETTLE_MS);
	mid = scrape();
	ck_assert_msg(sample(mid, "oncegate_dispatch_blocked_sends_total", false) -
	                      sample(before, "oncegate_dispatch_blocked_sends_total", false) == 3,
	              "blocked_sends_total grew by %.0f while 3 effects waited",
	              sample(mid, "oncegate_dispatch_blocked_sends_total", false) -
	                  sample(before, "oncegate_dispatch_blocked_sends_total", false));
	ck_assert_int_eq((int)sample(mid, "oncegate_dispatch_held_effects", false), 3);
	ck_assert_int_eq((int)sample(mid, "oncegate_kill_switch_engaged", false), 1);

	/* On: everything goes out; the 503 is retried once. */
	off = tl_log_offset();
	kill_switch(true);
	ck_assert_msg(wait_sql(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                       " AND state = 'completed'", key, 3, 20),
	              "the held effects were not sent once the switch was on");
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                      " AND held_at IS NOT NULL", key, (char *)NULL), 0);
	ck_assert_msg(wait_sql(c, "SELECT count(*) FROM effect_outbox WHERE id = $1::uuid"
	                       " AND state = 'unknown'", id_lease, 1, 10),
	              "the effect whose sending lease ran out is not unknown");
	dl_disp_stop(&d, 20);

	/* The dispatcher names the client, not its id. */
	{
		char *text = tl_file_slurp(d.log, NULL);
		char *line, *save = NULL;
		size_t completed = 0;

		ck_assert_ptr_nonnull(text);
		for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
			l = json_loads(line, 0, NULL);
			if (l != NULL && tl_jstr(l, "key") != NULL && strcmp(tl_jstr(l, "key"), key) == 0 &&
			    tl_jstr(l, "event") != NULL && strcmp(tl_jstr(l, "event"), "effect.completed") == 0) {
				expect_str(l, "client", "dev");
				completed++;
			}
			json_decref(l);
		}
		ck_assert_uint_eq(completed, 3);
		free(text);
	}

	tl_sleep_ms(SETTLE_MS);
	after = scrape();
#define DELTA(k) (sample(after, (k), true) - sample(before, (k), true))
	ck_assert_msg(DELTA("oncegate_effect_attempts_total{class=\"success\",target=\"ob_http\"}") == 3 &&
	              DELTA("oncegate_effect_attempts_total{class=\"transient\",target=\"ob_http\"}") == 1 &&
	              DELTA("oncegate_effect_attempts_total{class=\"ambiguous\",target=\"ob_http\"}") == 1 &&
	              DELTA("oncegate_effect_attempts_total{class=\"permanent\",target=\"ob_http\"}") == 0,
	              "attempts by class: success +%.0f, transient +%.0f, ambiguous +%.0f",
	              DELTA("oncegate_effect_attempts_total{class=\"success\",target=\"ob_http\"}"),
	              DELTA("oncegate_effect_attempts_total{class=\"transient\",target=\"ob_http\"}"),
	              DELTA("oncegate_effect_attempts_total{class=\"ambiguous\",target=\"ob_http\"}"));
	ck_assert_msg(DELTA("oncegate_effect_retries_total{class=\"success\",target=\"ob_http\"}") == 1 &&
	              DELTA("oncegate_effect_retries_total{class=\"transient\",target=\"ob_http\"}") == 0,
	              "retries: success +%.0f, transient +%.0f",
	              DELTA("oncegate_effect_retries_total{class=\"success\",target=\"ob_http\"}"),
	              DELTA("oncegate_effect_retries_total{class=\"transient\",target=\"ob_http\"}"));
	ck_assert_msg(DELTA("oncegate_lease_reclaims_total{lease=\"run\"}") == 1,
	              "run lease reclaims +%.0f, expected 1 (the failed_retryable one is none)",
	              DELTA("oncegate_lease_reclaims_total{lease=\"run\"}"));
	ck_assert_msg(DELTA("oncegate_lease_reclaims_total{lease=\"effect\"}") == 1,
	              "effect lease reclaims +%.0f", DELTA("oncegate_lease_reclaims_total{lease=\"effect\"}"));
	ck_assert_int_eq((int)sample(after, "oncegate_dispatch_held_effects", false), 0);

	/* Latency per route of the route table, every route listed. */
	snprintf(pattern, sizeof(pattern),
	         "oncegate_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/runs\"}");
	ck_assert_msg(DELTA(pattern) == 3, "POST /v1/runs timed %.0f times, expected 3", DELTA(pattern));
	ck_assert_msg(DELTA("oncegate_http_request_duration_seconds_count{method=\"GET\","
	                    "route=\"/v1/runs/{key}\"}") == 3, "GET /v1/runs/{key} not timed 3 times");
	ck_assert_msg(DELTA("oncegate_http_request_duration_seconds_count{method=\"POST\","
	                    "route=\"/v1/runs/{key}/transition\"}") == 1, "transition not timed");
	ck_assert_msg(sample(after, "oncegate_http_request_duration_seconds_bucket{le=\"+Inf\","
	                     "method=\"POST\",route=\"/v1/runs\"}", false) ==
	                  sample(after, pattern, false),
	              "+Inf bucket differs from the count");
	ck_assert_msg(sample(after, "oncegate_http_request_duration_seconds_sum{method=\"POST\","
	                     "route=\"/v1/runs\"}", false) > 0, "no time summed");
	sample(after, "oncegate_http_request_duration_seconds_count{method=\"POST\","
	       "route=\"/approve/{token}\"}", false);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(after, "types"),
	                                                   "oncegate_http_request_duration_seconds")),
	                 "histogram");
	{
		char bk[256];

		snprintf(bk, sizeof(bk), "oncegate_build_info{version=\"%s\"}", PACKAGE_VERSION);
		ck_assert_msg(sample(after, bk, false) == 1, "no %s 1", bk);
	}
#undef DELTA

	/* The CLI names the client too. */
	off = tl_log_offset();
	ck_assert_msg(tl_ctl(&out, "reconcile", id_lease, "--not-delivered", "--reason",
	                     "checked with the provider: never arrived", (char *)NULL) == 0,
	              "reconcile: %s", out ? out : "");
	free(out);
	lines = lines_of(off, key, "effect.reconciled", 1);
	ck_assert_msg(json_array_size(lines) == 1, "no effect.reconciled line");
	expect_str(json_array_get(lines, 0), "client", "dev");
	json_decref(lines);

	for (i = 0; i < 3; i++)
		free(ids[i]);
	free(id_lease);
	json_decref(before);
	json_decref(mid);
	json_decref(after);
	PQfinish(c);
}
END_TEST

/* ===== retention ============================================================================ */

START_TEST(test_purge)
{
	PGconn *c = tl_pg_connect();
	char key[200], keep[200], *e_old, *e_dl, *e_dl_new, *out = NULL, *v;
	json_t *doc;

	/* A completed run 40 days old, with an old attempt and a recent one. */
	tl_mkkey(key, sizeof(key), "aged");
	make_run(c, key);
	qexec(c, "UPDATE workflow_runs SET state = 'completed', updated_at = now() - interval '40 days'"
	      " WHERE idempotency_key = $1", key, (char *)NULL);
	e_old = add_effect(c, key, "crm.tag", "{\"contact\": \"Ольга Иванова\"}");
	qexec(c, "UPDATE effect_outbox SET state = 'completed', attempt = 2 WHERE id = $1::uuid", e_old,
	      (char *)NULL);
	qexec(c, "INSERT INTO effect_attempts (effect_id, kind, attempt, started_at, duration_ms,"
	      "    dispatcher, classification, reason, status, evidence)"
	      " VALUES ($1::uuid, 'send', 1, now() - interval '40 days', 80, 'h:1', 'transient',"
	      "    'http_503', 503, '{\"status\": 503, \"request_sent\": true,"
	      "      \"headers\": {\"x-request-id\": \"r-1\"},"
	      "      \"body_excerpt\": \"customer Ольга Иванова, +7 912 000 00 00\"}'),"
	      "  ($1::uuid, 'send', 2, now() - interval '1 day', 90, 'h:1', 'success', 'http_2xx', 201,"
	      "    '{\"status\": 201, \"request_sent\": true, \"body_excerpt\": \"ok 金曜日\"}')",
	      e_old, (char *)NULL);

	/* Dead letters: one past its retention deadline, one not yet. */
	tl_mkkey(keep, sizeof(keep), "letters");
	make_run(c, keep);
	e_dl = add_effect(c, keep, "crm.tag", "{\"contact\": \"c-1\"}");
	e_dl_new = add_effect(c, keep, "crm.note", "{\"contact\": \"c-2\"}");
	qexec(c, "UPDATE effect_outbox SET state = 'failed' WHERE idempotency_key = $1", keep,
	      (char *)NULL);
	qexec(c, "INSERT INTO dead_letters (effect_id, client_id, idempotency_key, component,"
	      "    error_class, reason, evidence, next_action, retention_until, created_at)"
	      " SELECT id, $2::bigint, $3, 'dispatcher', 'permanent', 'http_422',"
	      "    jsonb_build_object('payload_hash', 'sha256:0e', 'event_id', 'evt-1',"
	      "      'payload', jsonb_build_object('contact', 'Ольга'),"
	      "      'attempts', jsonb_build_array(jsonb_build_object('attempt', 1,"
	      "        'classification', 'permanent', 'evidence', jsonb_build_object('status', 422,"
	      "          'request_sent', true, 'body_excerpt', 'invalid phone +7 912 000 00 00')))),"
	      "    'fix it', CASE WHEN id = $1::uuid THEN now() - interval '1 day'"
	      "                   ELSE now() + interval '6 days' END,"
	      "    now() - interval '8 days'"
	      "   FROM effect_outbox WHERE idempotency_key = $3",
	      e_dl, g_client, keep, (char *)NULL);

	ck_assert_msg(tl_ctl(&out, "--json", "purge", "--older-than", "30d", "--reason",
	                     "retention: 30 days", (char *)NULL) == 0,
	              "purge: %s", out ? out : "");
	doc = json_loads(out, 0, NULL);
	ck_assert_msg(doc != NULL && json_integer_value(json_object_get(doc, "attempts")) >= 1 &&
	              json_integer_value(json_object_get(doc, "dead_letters")) >= 1,
	              "purge did not report attempts and dead letters: %s", out);
	json_decref(doc);
	free(out);

	/* The old attempt lost the provider's answer, kept what resume and
	 * explain need; the recent one is untouched. */
	v = qstr(c, "SELECT evidence::text FROM effect_attempts WHERE effect_id = $1::uuid"
	         " AND attempt = 1", e_old, (char *)NULL);
	doc = json_loads(v, 0, NULL);
	ck_assert_msg(json_object_get(doc, "body_excerpt") == NULL &&
	              json_object_get(doc, "headers") == NULL &&
	              json_integer_value(json_object_get(doc, "status")) == 503 &&
	              json_is_true(json_object_get(doc, "request_sent")) &&
	              json_is_true(json_object_get(doc, "purged")),
	              "the old attempt's evidence after the purge: %s", v);
	json_decref(doc);
	free(v);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_attempts WHERE effect_id = $1::uuid"
	                      " AND attempt = 2 AND evidence->>'body_excerpt' = 'ok 金曜日'", e_old,
	                      (char *)NULL), 1);

	/* The letter past retention keeps ids, hash, class and its row; its
	 * snapshot lost the payload and the excerpts. */
	v = qstr(c, "SELECT row_to_json(d)::text FROM dead_letters d WHERE effect_id = $1::uuid", e_dl,
	         (char *)NULL);
	doc = json_loads(v, 0, NULL);
	{
		json_t *ev = json_object_get(doc, "evidence");
		json_t *aev = json_object_get(json_array_get(json_object_get(ev, "attempts"), 0),
		                              "evidence");

		ck_assert_msg(!json_is_null(json_object_get(doc, "purged_at")) &&
		              json_object_get(ev, "payload") == NULL &&
		              tl_jstr(ev, "payload_hash") != NULL && tl_jstr(ev, "event_id") != NULL &&
		              json_object_get(aev, "body_excerpt") == NULL &&
		              json_integer_value(json_object_get(aev, "status")) == 422 &&
		              strcmp(tl_jstr(doc, "error_class") ?: "", "permanent") == 0,
		              "the dead letter past retention after the purge: %s", v);
	}
	json_decref(doc);
	free(v);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM dead_letters WHERE effect_id = $1::uuid"
	                      " AND purged_at IS NULL AND evidence ? 'payload'"
	                      " AND evidence->'attempts'->0->'evidence' ? 'body_excerpt'", e_dl_new,
	                      (char *)NULL), 1);
	free(e_old);
	free(e_dl);
	free(e_dl_new);
	PQfinish(c);
}
END_TEST

/* ===== a dead-letter replay after the contract changed ===================================== */

/* An original as a permanently failed send leaves it: approved, its one
 * effect failed (request_sent false: known not delivered) with a dead
 * letter; its output drafted under contract_hash. */
static void
make_failed_original(PGconn *c, const char *key, const char *hash)
{
	char *e;

	qexec(c, "INSERT INTO workflow_runs (client_id, idempotency_key, payload_hash, payload,"
	      "    state, claim_started_at, workflow_version, correlation_id, contract, contract_hash,"
	      "    output, output_hash, model, effect, decision, decided_at, decided_by)"
	      " VALUES ($1::bigint, $2::text, 'sha256:0f', '{\"ticket\": 42}', 'approved', now(),"
	      "    'support-reply@7', 'corr-' || $2, 'support_reply', $3,"
	      "    jsonb_build_object('subject', 'Re: заказ №42', 'body', $4::text, 'tone', 'friendly',"
	      "      'confidence', 0.82), 'sha256:0a',"
	      "    '{\"provider\": \"openai-compatible\", \"name\": \"qwen2.5-7b-instruct\"}',"
	      "    '{\"type\": \"email.send\", \"target\": \"demo_smtp\","
	      "      \"payload\": {\"to\": \"olga.ivanova@example.com\", \"ticket\": 42}}',"
	      "    'approve', now(), '" APPROVER "')",
	      g_client, key, hash, body_text, (char *)NULL);
	e = qstr(c, "INSERT INTO effect_outbox (client_id, idempotency_key, effect_type, target,"
	         "    payload, payload_hash, provider_key, state, attempt, error_class, reason)"
	         " VALUES ($1::bigint, $2, 'email.send', 'demo_smtp', '{\"to\": \"olga.ivanova@example.com\"}',"
	         "    'sha256:0b', $2 || '/email.send', 'failed', 1, 'permanent', 'smtp_550')"
	         " RETURNING id", g_client, key, (char *)NULL);
	qexec(c, "INSERT INTO effect_attempts (effect_id, kind, attempt, started_at, duration_ms,"
	      "    dispatcher, classification, reason, status, evidence)"
	      " VALUES ($1::uuid, 'send', 1, now(), 40, 'h:1', 'permanent', 'smtp_550', 550,"
	      "    '{\"status\": 550, \"request_sent\": false}')", e, (char *)NULL);
	qexec(c, "INSERT INTO dead_letters (effect_id, client_id, idempotency_key, component,"
	      "    error_class, reason, evidence, next_action, retention_until)"
	      " VALUES ($1::uuid, $2::bigint, $3, 'dispatcher', 'permanent', 'smtp_550', '{}',"
	      "    'fix, then replay', now() + interval '7 days')", e, g_client, key, (char *)NULL);
	free(e);
}

START_TEST(test_replay_contract_changed)
{
	PGconn *c = tl_pg_connect();
	char key[200], orig[200], same[200], nkey[200], nsame[200], *hash, *out = NULL;
	struct tl_claimed cl;
	struct tl_resp r;
	json_t *lines;
	long off;

	/* The contract as loaded now, by its hash on a run drafted under it. */
	tl_mkkey(key, sizeof(key), "probe");
	claim(key, NULL, NULL, &cl);
	post_output(key, "support_reply", &cl, cl.version, reply_output(0.7), &r);
	ASSERT_STATUS(&r, 202);
	tl_resp_free(&r);
	hash = qstr(c, "SELECT contract_hash FROM workflow_runs WHERE idempotency_key = $1", key,
	            (char *)NULL);
	ck_assert_ptr_nonnull(hash);

	/* Drafted under an earlier version of the contract: a new draft. */
	tl_mkkey(orig, sizeof(orig), "old-contract");
	tl_mkkey(nkey, sizeof(nkey), "old-contract-fix");
	make_failed_original(c, orig, "sha256:5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed");
	off = tl_log_offset();
	ck_assert_msg(tl_ctl(&out, "replay", orig, "--new-key", nkey, "--reason",
	                     "contract v8 tightened the tone rules", "--client", "dev", (char *)NULL) == 0,
	              "replay: %s", out ? out : "");
	free(out);
	out = NULL;
	ck_assert_msg(qnum(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	                   " AND state = 'failed_retryable' AND output IS NULL", nkey, (char *)NULL) == 1,
	              "the replay after a contract change did not ask for a new draft: %s",
	              tl_run_row(c, "dev", nkey));
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1", nkey,
	                      (char *)NULL), 0);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1", nkey,
	                      (char *)NULL), 0);
	lines = lines_of(off, nkey, "replay.done", 1);
	ck_assert_msg(json_array_size(lines) == 1, "no replay.done line for %s", nkey);
	expect_str(json_array_get(lines, 0), "client", "dev");
	expect_str(json_array_get(lines, 0), "state_to", "failed_retryable");
	json_decref(lines);

	/* The same output under the contract as it is now goes to a person. */
	tl_mkkey(same, sizeof(same), "same-contract");
	tl_mkkey(nsame, sizeof(nsame), "same-contract-fix");
	make_failed_original(c, same, hash);
	ck_assert_msg(tl_ctl(&out, "replay", same, "--new-key", nsame, "--reason",
	                     "the mail server refused; address corrected upstream", "--client", "dev",
	                     (char *)NULL) == 0,
	              "replay: %s", out ? out : "");
	free(out);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	                      " AND state = 'awaiting_human'", nsame, (char *)NULL), 1);
	free(hash);
	PQfinish(c);
}
END_TEST

TL_SUITE(observe_suite, "observe",
         {"observe", TEST_TIMEOUT_S,
          .tests = TL_LIST(test_output_log_card_envelope, test_metrics_dispatch, test_purge,
                           test_replay_contract_changed)})

/* The ids the tests compare with. No Check here. */
static bool
suite_prepare(void)
{
	g_key_dev = tl_env("ONCEGATE_API_KEY");
	g_base = tl_env("ONCEGATE_URL");
	return dl_client_id("dev", g_client, sizeof(g_client));
}

DL_SUITE_MAIN(.name = "check_observe", .prefix = "ob", .needed = "ONCEGATE_API_KEY ONCEGATE_LOG",
              .suite = observe_suite, .prepare = suite_prepare)

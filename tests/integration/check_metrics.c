/*
 * check_metrics.c — integration suite of GET /metrics:
 * through nginx, against the real responder and cluster that `./dev test`
 * starts. Without ONCEGATE_URL the suite is skipped (exit 77).
 *
 * The answer is parsed by a real Prometheus text-format parser (Debian's
 * python3-prometheus-client, run with $ONCEGATE_PYTHON), never by a regex
 * of ours. A scripted scenario goes through the API and the approval pages
 * (claims, duplicates, a payload mismatch, invalid outputs, human and
 * automatic approvals), plus what only the dispatcher does, written as the
 * dispatcher writes it (an exhausted retry budget, sends refused by the kill
 * switch). The figures must then move by exactly what the scenario did AND
 * equal what the database says, counted here with SQL of our own.
 *
 * Other suites share the database, so the scenario compares figures before
 * and after, and keys carry a per-run prefix ("mx<epoch>-<pid>"). The stack
 * runs no dispatcher: nothing moves an effect while the suite looks.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "db.h"
#include "deadletter.h"
#include "dispatchlib.h"
#include "testlib.h"

/* What the responder and the shipped contracts promise (caps.h, contracts/). */
#define CACHE_MS           1000      /* OG_METRICS_CACHE_MS */
#define FLUSH_MS           1000      /* OG_METRICS_FLUSH_MS */
#define SAMPLED_CONTRACT   "crm_tag_sampled"  /* tests/data/contracts-test: sample_rate 1 */
#define APPROVER           "sam@example.com"
#define CONTENT_TYPE       "text/plain; version=0.0.4"
#define SETTLE_WAIT_MS     6000      /* flush + cache, with room to spare */

static const char *g_key;     /* ONCEGATE_API_KEY */
static const char *g_base;    /* ONCEGATE_URL */
static char g_parser[256];    /* the parser script, written by main() */

static const double bounds[] = {
	1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 43200, 86400,
};
#define NBOUNDS (sizeof(bounds) / sizeof(bounds[0]))

/* The states of a run, as the ledger names them (ledger.h). */
static const char *const run_states[] = { "processing", "awaiting_human", "approved",
	                                  "completed", "failed_retryable", "failed_terminal",
	                                  "rejected" };
#define NRUN_STATES (sizeof(run_states) / sizeof(run_states[0]))

/* ---- scraping and parsing ----------------------------------------------- */

/* Reads the exposition text with prometheus_client and prints, as JSON,
 * each family's type and help and each sample under "name{k="v",…}"
 * (labels sorted). A parse error, a duplicate sample or a family without
 * HELP/TYPE is printed as {"error"}. */
static const char parser_py[] =
    "import json, sys\n"
    "try:\n"
    "    from prometheus_client.parser import text_string_to_metric_families\n"
    "    text = open(sys.argv[1], encoding='utf-8').read()\n"
    "    out = {'types': {}, 'help': {}, 'samples': {}}\n"
    "    for fam in text_string_to_metric_families(text):\n"
    "        if fam.name in out['types']:\n"
    "            raise ValueError('family twice: ' + fam.name)\n"
    "        out['types'][fam.name] = fam.type\n"
    "        out['help'][fam.name] = fam.documentation\n"
    "        for s in fam.samples:\n"
    "            key = s.name\n"
    "            if s.labels:\n"
    "                key += '{' + ','.join('%s=\"%s\"' % (k, s.labels[k])\n"
    "                                      for k in sorted(s.labels)) + '}'\n"
    "            if key in out['samples']:\n"
    "                raise ValueError('sample twice: ' + key)\n"
    "            out['samples'][key] = s.value\n"
    "    json.dump(out, sys.stdout)\n"
    "except Exception as e:\n"
    "    json.dump({'error': '%s: %s' % (type(e).__name__, e)}, sys.stdout)\n"
    "    sys.exit(1)\n";

struct scrape {
	json_t *doc;      /* {"types", "help", "samples"} */
	json_t *samples;  /* borrowed from doc */
	char *text;       /* the raw answer */
	double at;        /* when it was answered */
};

static void
scrape_free(struct scrape *s)
{
	json_decref(s->doc);
	free(s->text);
	memset(s, 0, sizeof(*s));
}

static json_t *
parse_text(const char *text)
{
	char path[] = "/tmp/check_metrics-XXXXXX", *cmd = NULL, *out;
	const char *py = tl_env("ONCEGATE_PYTHON");
	json_t *doc;
	FILE *f;
	int fd;

	ck_assert_msg(py != NULL, "ONCEGATE_PYTHON is not set (the stack's env file sets it)");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	f = fdopen(fd, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	ck_assert_int_ge(asprintf(&cmd, "'%s' '%s' '%s' 2>&1", py, g_parser, path), 0);
	out = tl_shell_output(cmd);
	free(cmd);
	unlink(path);
	ck_assert_msg(out != NULL, "could not run the Prometheus parser");
	doc = json_loads(out, 0, NULL);
	ck_assert_msg(json_is_object(doc), "the parser said: %.2000s", out);
	ck_assert_msg(json_object_get(doc, "error") == NULL,
	              "the Prometheus parser refused the answer: %s\n--- answer:\n%.3000s",
	              json_string_value(json_object_get(doc, "error")), text);
	free(out);
	return doc;
}

static void
scrape(struct scrape *s)
{
	struct tl_resp r;

	memset(s, 0, sizeof(*s));
	tl_get("/metrics", NULL, &r);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(strncmp(r.content_type, CONTENT_TYPE, strlen(CONTENT_TYPE)) == 0,
	              "GET /metrics: Content-Type is \"%s\", not %s", r.content_type,
	              CONTENT_TYPE);
	s->at = tl_now();
	s->text = strdup(r.body);
	s->doc = parse_text(r.body);
	s->samples = json_object_get(s->doc, "samples");
	ck_assert_msg(json_is_object(s->samples), "no samples");
	tl_resp_free(&r);
}

/* A sample's value; fails the test when the answer lacks it. */
static double
val(const struct scrape *s, const char *key)
{
	json_t *v = json_object_get(s->samples, key);

	ck_assert_msg(json_is_number(v), "/metrics has no sample %s:\n%.3000s", key, s->text);
	return json_number_value(v);
}

/* name{label="value"} */
static double
lval(const struct scrape *s, const char *name, const char *label, const char *value)
{
	char key[256];

	snprintf(key, sizeof(key), "%s{%s=\"%s\"}", name, label, value);
	return val(s, key);
}

static char *
bucket_key(double le)
{
	static char key[96];

	if (isinf(le))
		snprintf(key, sizeof(key), "oncegate_approval_wait_seconds_bucket{le=\"+Inf\"}");
	else
		snprintf(key, sizeof(key), "oncegate_approval_wait_seconds_bucket{le=\"%g\"}", le);
	return key;
}

/* The same figures as the responder, counted here with our own SQL. */
static double
db_num(PGconn *c, const char *sql, const char *arg)
{
	const char *p[1] = { arg };
	double d = tl_pg_double(c, sql, arg != NULL ? 1 : 0, arg != NULL ? p : NULL);

	return isnan(d) ? 0 : d;
}

/* ---- the API ------------------------------------------------------------ */

/* The keys this test claimed, each once (claim records them). */
static char g_claimed[16][200];
static size_t g_nclaimed;

/* POST /v1/runs; the outcome must be `want` ("claimed", "duplicate",
 * "payload_mismatch"). variant changes the payload. */
static void
claim(const char *key, int variant, const char *want, struct tl_claimed *out)
{
	json_t *body = json_pack("{s:s, s:{s:s, s:i}}", "key", key, "payload", "run", tl_run,
	                         "variant", variant);
	const char *got;
	struct tl_resp r;

	tl_post_json("/v1/runs", g_key, body, &r);
	json_decref(body);
	got = strcmp(want, "payload_mismatch") == 0 ? tl_jstr(r.json, "error")
	                                            : tl_jstr(r.json, "outcome");
	ck_assert_msg(got != NULL && strcmp(got, want) == 0, "claim of %s: expected %s, got HTTP %ld %s",
	              key, want, r.status, r.body);
	if (strcmp(want, "claimed") == 0 && r.status == 201) {
		ck_assert_uint_lt(g_nclaimed, sizeof(g_claimed) / sizeof(g_claimed[0]));
		snprintf(g_claimed[g_nclaimed++], sizeof(g_claimed[0]), "%s", key);
	}
	if (out != NULL) {
		ck_assert_msg(tl_jstr(r.json, "lease_owner") && tl_jint(r.json, "version", &out->version),
		              "claim answer: %s", r.body);
		snprintf(out->owner, sizeof(out->owner), "%s", tl_jstr(r.json, "lease_owner"));
	}
	tl_resp_free(&r);
}

/* POST /v1/runs/{key}/output; output and effect are stolen. */
static void
post_output(const char *key, const struct tl_claimed *c, long long version, const char *contract,
            json_t *output, json_t *effect, struct tl_resp *r)
{
	char *path = tl_run_path(key, "/output");
	json_t *body = json_pack("{s:s, s:I, s:s, s:o, s:o, s:{s:s, s:s}}", "lease_owner", c->owner,
	                         "version", (json_int_t)version, "contract", contract, "output",
	                         output, "effect", effect, "model", "provider",
	                         "openai-compatible", "name", "check-metrics");

	ck_assert_ptr_nonnull(body);
	/* the shipped contracts separate duties: an output names its requester */
	json_object_set_new(body, "requested_by", json_string("check-metrics@workflows.example"));
	tl_post_json(path, g_key, body, r);
	json_decref(body);
	free(path);
}

static json_t *
reply_output(void)
{
	return json_pack("{s:s, s:s, s:s, s:f}", "subject", "Re: your order", "body",
	                 "It ships on Friday.", "tone", "friendly", "confidence", 0.8);
}

static json_t *
email_effect(void)
{
	return json_pack("{s:s, s:s, s:{s:s}}", "type", "email.send", "target", "demo_smtp",
	                 "payload", "to", "customer@example.com");
}

static json_t *
tag_output(const char *tag, double confidence)
{
	return json_pack("{s:s, s:f}", "tag", tag, "confidence", confidence);
}

/* The approval link's token from a 202 awaiting_human answer. */
static void
token_of(const struct tl_resp *r, char *token, size_t n)
{
	json_t *a = json_array_get(json_object_get(r->json, "approvals"), 0);
	const char *url = tl_jstr(a, "url"), *slash;

	ck_assert_msg(r->status == 202 && tl_jstr(r->json, "outcome") &&
	              strcmp(tl_jstr(r->json, "outcome"), "awaiting_human") == 0 && url != NULL,
	              "%s: expected 202 awaiting_human with a link, got HTTP %ld",
	              r->what, r->status);
	slash = strrchr(url, '/');
	ck_assert_ptr_nonnull(slash);
	snprintf(token, n, "%s", slash + 1);
}

/* A person decides on the approval page, as a browser would: GET the card
 * for its CSRF token, then POST the form. */
static void
decide(const char *token, const char *groups, const char *decision)
{
	char path[256], *form, *p, *q, csrf[256];
	struct tl_resp r;

	snprintf(path, sizeof(path), "/approve/%s", token);
	dl_page_request(path, APPROVER, groups, NULL, NULL, &r, NULL);
	ASSERT_STATUS(&r, 200);
	/* <input type="hidden" name="csrf" value="…"/> */
	p = strstr(r.body, "name=\"csrf\"");
	ck_assert_msg(p != NULL, "the approval card has no csrf field: %.2000s", r.body);
	while (p > r.body && *p != '<')
		p--;
	p = strstr(p, "value=\"");
	ck_assert_ptr_nonnull(p);
	p += 7;
	q = strchr(p, '"');
	ck_assert_msg(q != NULL && (size_t)(q - p) < sizeof(csrf), "csrf value");
	memcpy(csrf, p, (size_t)(q - p));
	csrf[q - p] = '\0';
	tl_resp_free(&r);

	form = tl_form("decision", decision, "csrf", csrf, (char *)NULL);
	ck_assert_ptr_nonnull(form);
	dl_page_request(path, APPROVER, groups, form, NULL, &r, NULL);
	ASSERT_STATUS(&r, 303);
	tl_resp_free(&r);
	free(form);
}

/* ---- fixtures ----------------------------------------------------------- */

/* ===== the answer's shape ================================================= */

START_TEST(test_families)
{
	/* the family as the parser names it, its type */
	static const struct tl_given families[] = {
		{ "oncegate_claims", "counter" },
		{ "oncegate_duplicate_deliveries", "counter" },
		{ "oncegate_outputs", "counter" },
		{ "oncegate_auth_failures", "counter" },
		{ "oncegate_runs_failed_validation", "counter" },
		{ "oncegate_database_up", "gauge" },
		{ "oncegate_metrics_age_seconds", "gauge" },
		{ "oncegate_validation_failures", "counter" },
		{ "oncegate_approval_wait_seconds", "histogram" },
		{ "oncegate_gate_decisions", "counter" },
		{ "oncegate_retry_budget_exhaustions", "counter" },
		{ "oncegate_effects", "gauge" },
		{ "oncegate_runs", "gauge" },
		{ "oncegate_dead_letters_open", "gauge" },
		{ "oncegate_dead_letter_oldest_age_seconds", "gauge" },
		{ "oncegate_kill_switch_engaged", "gauge" },
		{ "oncegate_dispatch_blocked_sends", "counter" },
		{ "oncegate_build_info", "gauge" },
		{ "oncegate_effect_attempts", "counter" },
		{ "oncegate_effect_retries", "counter" },
		{ "oncegate_lease_reclaims", "counter" },
		{ "oncegate_approval_followups", "counter" },
		{ "oncegate_dispatch_held_effects", "gauge" },
		{ "oncegate_approvals_expiring_soon", "gauge" },
		{ "oncegate_http_request_duration_seconds", "histogram" },
		{ "oncegate_ready", "gauge" },
		{ "oncegate_config_reload_failed", "gauge" },
		{ "oncegate_config_last_reload_success_timestamp_seconds", "gauge" },
	};
	static const char *const states[] = { "pending", "sending", "completed", "unknown",
		                              "failed", "cancelled" };
	struct scrape s;
	json_t *types, *help;
	double prev = 0;
	size_t i;

	scrape(&s);
	ck_assert_msg(val(&s, "oncegate_database_up") == 1 && val(&s, "oncegate_metrics_age_seconds") >= 0,
	              "the database is up: %.400s", s.text);
	types = json_object_get(s.doc, "types");
	help = json_object_get(s.doc, "help");
	for (i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
		const char *t = json_string_value(json_object_get(types, families[i].given));
		const char *h = json_string_value(json_object_get(help, families[i].given));

		ck_assert_msg(t != NULL && strcmp(t, families[i].want) == 0,
		              "family %s: type %s, expected %s:\n%.3000s", families[i].given,
		              t ? t : "(absent)", families[i].want, s.text);
		ck_assert_msg(h != NULL && strlen(h) >= 20, "family %s has no useful HELP",
		              families[i].given);
	}
	ck_assert_msg(json_object_size(types) == sizeof(families) / sizeof(families[0]),
	              "unexpected families:\n%.3000s", s.text);
	/* every series is there even when zero, so graphs never lose one */
	val(&s, "oncegate_claims_total{outcome=\"claimed\"}");
	val(&s, "oncegate_claims_total{outcome=\"duplicate\"}");
	val(&s, "oncegate_claims_total{outcome=\"payload_mismatch\"}");
	for (i = 0; i < sizeof(states) / sizeof(states[0]); i++)
		lval(&s, "oncegate_effects", "state", states[i]);
	for (i = 0; i < NRUN_STATES; i++)
		lval(&s, "oncegate_runs", "state", run_states[i]);
	/* the histogram: the documented buckets, cumulative, +Inf == _count */
	for (i = 0; i < NBOUNDS; i++) {
		double v = val(&s, bucket_key(bounds[i]));

		ck_assert_msg(v >= prev, "bucket le=%g (%g) below the one before (%g)", bounds[i], v,
		              prev);
		prev = v;
	}
	ck_assert_msg(val(&s, bucket_key(INFINITY)) >= prev, "+Inf below the last bucket");
	ck_assert_msg(val(&s, bucket_key(INFINITY)) == val(&s, "oncegate_approval_wait_seconds_count"),
	              "+Inf bucket != _count");
	{
		double ks = val(&s, "oncegate_kill_switch_engaged");

		ck_assert_msg(ks == 0 || ks == 1, "the kill switch is 0 or 1, not %g", ks);
	}
	/* the answering responder's readiness: ready, its last load after 2026 */
	ck_assert_msg(val(&s, "oncegate_ready") == 1, "oncegate_ready is not 1:\n%.3000s", s.text);
	ck_assert_msg(val(&s, "oncegate_config_reload_failed") == 0,
	              "oncegate_config_reload_failed is not 0");
	ck_assert_msg(val(&s, "oncegate_config_last_reload_success_timestamp_seconds") > 1.7e9,
	              "no time of the last successful load");
	scrape_free(&s);
}
END_TEST

/* The route is GET only (the responder's route table, behind nginx). */
START_TEST(test_method_not_allowed)
{
	struct tl_resp r;

	tl_http("POST", "/metrics", NULL, "application/json", "{}", 2, &r);
	ASSERT_STATUS(&r, 405);
	ck_assert_msg(strstr(r.allow, "GET") != NULL, "Allow: %s", r.allow);
	tl_resp_free(&r);
}
END_TEST

/* ===== the scripted scenario ============================================== */

struct figures {
	double claimed, duplicate, mismatch, dup_deliveries, invalid, outputs, failed_val, auth;
	double auto_, approve, reject, expired;
	double wait_count, wait_sum, wait_le5, exhausted, blocked, pending, failed, open_exhausted;
};

static void
figures_of(const struct scrape *s, struct figures *f)
{
	f->claimed = val(s, "oncegate_claims_total{outcome=\"claimed\"}");
	f->duplicate = val(s, "oncegate_claims_total{outcome=\"duplicate\"}");
	f->mismatch = val(s, "oncegate_claims_total{outcome=\"payload_mismatch\"}");
	f->dup_deliveries = val(s, "oncegate_duplicate_deliveries_total");
	f->invalid = val(s, "oncegate_validation_failures_total");
	f->outputs = val(s, "oncegate_outputs_total");
	f->failed_val = val(s, "oncegate_runs_failed_validation_total");
	f->auth = val(s, "oncegate_auth_failures_total");
	f->auto_ = val(s, "oncegate_gate_decisions_total{decision=\"auto\"}");
	f->approve = val(s, "oncegate_gate_decisions_total{decision=\"approve\"}");
	f->reject = val(s, "oncegate_gate_decisions_total{decision=\"reject\"}");
	f->expired = val(s, "oncegate_gate_decisions_total{decision=\"expired\"}");
	f->wait_count = val(s, "oncegate_approval_wait_seconds_count");
	f->wait_sum = val(s, "oncegate_approval_wait_seconds_sum");
	f->wait_le5 = val(s, bucket_key(5));
	f->exhausted = val(s, "oncegate_retry_budget_exhaustions_total");
	f->blocked = val(s, "oncegate_dispatch_blocked_sends_total");
	f->pending = val(s, "oncegate_effects{state=\"pending\"}");
	f->failed = val(s, "oncegate_effects{state=\"failed\"}");
	f->open_exhausted = val(s, "oncegate_dead_letters_open{error_class=\"exhausted\"}");
}

/* The runs the scenario claimed (g_claimed), told three ways: explain
 * says each one's state; report --since `since` (the scenario claimed
 * every run created since) counts them by state; /metrics' oncegate_runs
 * moved from sb to sa by exactly those counts. */
static void
expect_runs_agree(const struct scrape *sb, const struct scrape *sa, const char *since)
{
	json_t *told = json_object(), *rep, *by;
	char *out = NULL;
	size_t i;

	for (i = 0; i < g_nclaimed; i++) {
		json_t *doc, *n;
		const char *state;

		ck_assert_int_eq(tl_ctl(&out, "--json", "explain", g_claimed[i], (char *)NULL), 0);
		doc = json_loads(out, 0, NULL);
		free(out);
		state = tl_jstr(json_object_get(doc, "processed"), "state");
		ck_assert_msg(state != NULL, "explain %s --json: no processed.state", g_claimed[i]);
		n = json_object_get(told, state);
		json_object_set_new(told, state, json_integer(n ? json_integer_value(n) + 1 : 1));
		json_decref(doc);
	}
	ck_assert_int_eq(tl_ctl(&out, "--json", "report", "--since", since, (char *)NULL), 0);
	rep = json_loads(out, 0, NULL);
	free(out);
	by = json_object_get(rep, "runs_by_state");
	ck_assert_msg(json_equal(by, told), "report --since %s: runs_by_state %s; explain says %s",
	              since, json_dumps(by, JSON_COMPACT), json_dumps(told, JSON_COMPACT));
	ck_assert_int_eq(json_integer_value(json_object_get(rep, "runs_claimed")), g_nclaimed);
	for (i = 0; i < NRUN_STATES; i++) {
		json_t *n = json_object_get(told, run_states[i]);
		double moved = lval(sa, "oncegate_runs", "state", run_states[i]) -
		               lval(sb, "oncegate_runs", "state", run_states[i]);

		ck_assert_msg(moved == (n ? (double)json_integer_value(n) : 0),
		              "oncegate_runs{state=\"%s\"} moved by %g; explain says %s",
		              run_states[i], moved, json_dumps(told, JSON_COMPACT));
	}
	json_decref(rep);
	json_decref(told);
}

#define EXPECT_DELTA(field, n)                                                         \
	ck_assert_msg(fabs((after.field - before.field) - (n)) < 1e-9,                 \
	              "%s moved by %g, the scenario did %g\n--- before:\n%.1400s\n--- after:\n%.1400s", \
	              #field, after.field - before.field, (double)(n), sb.text, sa.text)

/* Every figure of an answer equals what the database says. */
static void
expect_matches_db(PGconn *pg, const struct scrape *s)
{
	static const char *const outcomes[][2] = {
		{ "claimed", "claims_claimed" },
		{ "duplicate", "claims_duplicate" },
		{ "payload_mismatch", "claims_payload_mismatch" },
	};
	static const char *const decisions[] = { "auto", "approve", "reject", "expired" };
	static const char *const states[] = { "pending", "sending", "completed", "unknown",
		                              "failed", "cancelled" };
	static const char *const classes[] = { "permanent", "exhausted", "unknown" };
	static const char waits[] =
	    "(SELECT extract(epoch FROM consumed_at - created_at)::float8 AS w"
	    "   FROM approvals WHERE state = 'decided') AS x";
	char sql[512], le[32];
	double db, m;
	size_t i;

#define SAME(metric, dbv)                                                                \
	ck_assert_msg(fabs((metric) - (dbv)) < 1e-6, "%s: /metrics says %g, the database %g", \
	              #metric, (metric), (dbv))

	for (i = 0; i < 3; i++) {
		m = lval(s, "oncegate_claims_total", "outcome", outcomes[i][0]);
		db = db_num(pg, "SELECT value FROM metric_counters WHERE name = $1", outcomes[i][1]);
		ck_assert_msg(m == db, "claims %s: /metrics %g, metric_counters %g", outcomes[i][0],
		              m, db);
	}
	SAME(val(s, "oncegate_duplicate_deliveries_total"),
	     db_num(pg, "SELECT value FROM metric_counters WHERE name = 'claims_duplicate'", NULL));
	SAME(val(s, "oncegate_validation_failures_total"),
	     db_num(pg, "SELECT coalesce(sum(invalid_outputs), 0) FROM workflow_runs", NULL));
	for (i = 0; i < 4; i++) {
		m = lval(s, "oncegate_gate_decisions_total", "decision", decisions[i]);
		db = db_num(pg, "SELECT count(*) FROM workflow_runs WHERE decision = $1", decisions[i]);
		ck_assert_msg(m == db, "decisions %s: /metrics %g, workflow_runs %g", decisions[i], m,
		              db);
	}
	for (i = 0; i < NBOUNDS; i++) {
		snprintf(le, sizeof(le), "%g", bounds[i]);
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s WHERE w <= $1::float8", waits);
		m = val(s, bucket_key(bounds[i]));
		db = db_num(pg, sql, le);
		ck_assert_msg(m == db, "wait bucket le=%s: /metrics %g, approvals %g", le, m, db);
	}
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s", waits);
	SAME(val(s, "oncegate_approval_wait_seconds_count"), db_num(pg, sql, NULL));
	SAME(val(s, bucket_key(INFINITY)), db_num(pg, sql, NULL));
	snprintf(sql, sizeof(sql), "SELECT coalesce(sum(w), 0) FROM %s", waits);
	ck_assert_msg(fabs(val(s, "oncegate_approval_wait_seconds_sum") - db_num(pg, sql, NULL)) < 1e-3,
	              "wait sum: /metrics %g, approvals %g",
	              val(s, "oncegate_approval_wait_seconds_sum"), db_num(pg, sql, NULL));
	SAME(val(s, "oncegate_retry_budget_exhaustions_total"),
	     db_num(pg, "SELECT coalesce(sum(exhaustions), 0) FROM dead_letters", NULL));
	for (i = 0; i < 6; i++) {
		m = lval(s, "oncegate_effects", "state", states[i]);
		db = db_num(pg, "SELECT count(*) FROM effect_outbox WHERE state = $1", states[i]);
		ck_assert_msg(m == db, "effects %s: /metrics %g, effect_outbox %g", states[i], m, db);
	}
	for (i = 0; i < NRUN_STATES; i++) {
		m = lval(s, "oncegate_runs", "state", run_states[i]);
		db = db_num(pg, "SELECT count(*) FROM workflow_runs WHERE state = $1", run_states[i]);
		ck_assert_msg(m == db, "runs %s: /metrics %g, workflow_runs %g", run_states[i], m, db);
	}
	/* an age: the answer may be up to a cache interval old */
	m = val(s, "oncegate_dead_letter_oldest_age_seconds");
	db = db_num(pg, "SELECT coalesce(extract(epoch FROM now() - min(d.created_at)), 0)"
	                " FROM dead_letters d JOIN effect_outbox e ON e.id = d.effect_id"
	                " WHERE e.state IN ('failed', 'unknown')"
	                " AND coalesce(d.resolution, '') IN ('', 'not_delivered', 'resumed')", NULL);
	ck_assert_msg(fabs(m - db) <= 3.0, "oldest open dead letter: /metrics %g s, database %g s",
	              m, db);
	/* open dead letters: the gauge, the CLI's list and report say the same
	 * (one definition of open, whatever the letters' resolutions) */
	{
		char *out = NULL;
		json_t *list, *rep, *l;
		double listed[3] = { 0, 0, 0 }, total = 0, gauge = 0;
		size_t k;

		ck_assert_int_eq(tl_ctl(&out, "--json", "deadletter", "list", "--state", "open",
		                        "--limit", "10000", (char *)NULL), 0);
		list = json_loads(out, 0, NULL);
		free(out);
		ck_assert_msg(json_is_array(list), "deadletter list --json is no array");
		json_array_foreach(list, k, l)
			for (i = 0; i < 3; i++)
				if (strcmp(tl_jstr(l, "error_class") ?: "", classes[i]) == 0)
					listed[i]++;
		for (i = 0; i < 3; i++) {
			m = lval(s, "oncegate_dead_letters_open", "error_class", classes[i]);
			ck_assert_msg(m == listed[i], "open dead letters %s: /metrics %g, "
			              "deadletter list --state open %g", classes[i], m, listed[i]);
			gauge += m;
			total += listed[i];
		}
		json_decref(list);
		ck_assert_int_eq(tl_ctl(&out, "--json", "report", "--since", "7d", (char *)NULL), 0);
		rep = json_loads(out, 0, NULL);
		free(out);
		ck_assert_msg(json_is_object(rep), "report --json is no object");
		ck_assert_msg(json_number_value(json_object_get(rep, "dead_letters_open")) == gauge,
		              "report: %g open dead letters, /metrics %g (list %g)",
		              json_number_value(json_object_get(rep, "dead_letters_open")), gauge,
		              total);
		json_decref(rep);
	}
	SAME(val(s, "oncegate_kill_switch_engaged"),
	     db_num(pg, "SELECT (NOT actions_enabled)::int FROM dispatch_control", NULL));
	SAME(val(s, "oncegate_dispatch_blocked_sends_total"),
	     db_num(pg, "SELECT blocked_sends FROM dispatch_control", NULL));
#undef SAME
}

/* A scrape that reflects everything done before it: past the cache
 * interval, and (polled) once the claim counts have arrived. */
static void
scrape_settled(struct scrape *s, double claimed_at_least)
{
	double deadline = tl_now() + SETTLE_WAIT_MS / 1000.0;

	tl_sleep_ms(CACHE_MS + 100);
	for (;;) {
		scrape(s);
		if (val(s, "oncegate_claims_total{outcome=\"claimed\"}") >= claimed_at_least ||
		    tl_now() > deadline)
			return;
		scrape_free(s);
		tl_sleep_ms(250);
	}
}

START_TEST(test_scenario)
{
	PGconn *pg = tl_pg_connect();
	struct scrape sb, sa;
	struct figures before, after;
	struct tl_claimed c;
	struct tl_resp r;
	char k[6][200], key[200], token[128], id[64];
	const char *p[2];
	double t0, t1, waited;
	long long v;
	int i, n;
	/* runs created from the second `since` on are this scenario's: the
	 * report counts whole seconds, so the first claim waits for the next */
	time_t since = time(NULL) + 1;
	char since_text[32];

	strftime(since_text, sizeof(since_text), "%Y-%m-%dT%H:%M:%SZ", gmtime(&since));
	scrape_settled(&sb, 0);
	figures_of(&sb, &before);
	while (time(NULL) < since + 1)
		tl_sleep_ms(50);
	t0 = tl_now();

	/* 3 new keys, claimed; 2 duplicate deliveries of the first while its
	 * lease is live; 1 delivery of it with a changed payload */
	for (i = 0; i < 3; i++) {
		char name[16];

		snprintf(name, sizeof(name), "c%d", i);
		tl_mkkey(k[i], sizeof(k[i]), name);
		claim(k[i], 0, "claimed", NULL);
	}
	claim(k[0], 0, "duplicate", NULL);
	claim(k[0], 0, "duplicate", NULL);
	claim(k[0], 1, "payload_mismatch", NULL);
	/* 2 claims with keys that are not valid: 401, counted as failed
	 * authentications (and as no claim) */
	{
		json_t *body = json_pack("{s:s, s:{s:s}}", "key", k[0], "payload", "note",
		                         "Неверный ключ — 無効なキー 🔑");

		tl_post_json("/v1/runs", "og_not-a-key-of-anyone", body, &r);
		ASSERT_STATUS(&r, 401);
		tl_resp_free(&r);
		tl_post_json("/v1/runs", NULL, body, &r);
		ASSERT_STATUS(&r, 401);
		tl_resp_free(&r);
		json_decref(body);
	}

	/* 2 invalid outputs: the repair budget of crm_tag is 1, so the second
	 * ends the run, and the next delivery of it is a duplicate */
	tl_mkkey(k[3], sizeof(k[3]), "invalid");
	claim(k[3], 0, "claimed", &c);
	post_output(k[3], &c, c.version, "crm_tag", tag_output("bogus", 0.5), tl_tag_effect_json(), &r);
	ASSERT_STATUS(&r, 422);
	ck_assert_msg(tl_jint(r.json, "version", &v), "%s", r.body);
	tl_resp_free(&r);
	post_output(k[3], &c, v, "crm_tag", tag_output("bogus", 0.5), tl_tag_effect_json(), &r);
	ASSERT_STATUS(&r, 422);
	ck_assert_msg(strcmp(tl_jstr(r.json, "outcome"), "failed_terminal") == 0, "%s", r.body);
	tl_resp_free(&r);
	claim(k[3], 0, "duplicate", NULL);

	/* 2 runs the gate lets through on its own (crm_tag, confident lead,
	 * runs that drew outside the 10 % sample) */
	for (i = 0, n = 0; n < 2 && i < 200; i++) {
		char name[16];

		snprintf(name, sizeof(name), "auto%d", i);
		tl_mkkey(key, sizeof(key), name);
		claim(key, 0, "claimed", &c);
		tl_keep_sample_draw(key, "0.99");
		post_output(key, &c, c.version, "crm_tag", tag_output("lead", 0.95), tl_tag_effect_json(), &r);
		ck_assert_msg(r.status == 202 && strcmp(tl_jstr(r.json, "outcome"), "approved") == 0,
		              "an eligible crm_tag output outside the sample must be approved by the "
		              "gate: HTTP %ld %s", r.status, r.body);
		tl_resp_free(&r);
		if (n == 0)
			snprintf(k[4], sizeof(k[4]), "%s", key);
		n++;
	}
	ck_assert_int_eq(n, 2);

	/* 3 human decisions on the approval page: a support reply approved,
	 * another rejected, and an eligible crm_tag that its sample (rate 1)
	 * sent to a person anyway, approved */
	t1 = tl_now();
	{
		static const struct {
			const char *key, *contract, *group, *decision;
			bool reply; /* a support reply by mail, else a lead tag */
		} humans[] = {
			{ "human-approve", "support_reply", "support", "approve", true },
			{ "human-reject", "support_reply", "support", "reject", true },
			{ "sampled", SAMPLED_CONTRACT, "sales", "approve", false },
		};

		for (i = 0; i < 3; i++) {
			tl_mkkey(key, sizeof(key), humans[i].key);
			claim(key, 0, "claimed", &c);
			post_output(key, &c, c.version, humans[i].contract,
			            humans[i].reply ? reply_output() : tag_output("lead", 0.95),
			            humans[i].reply ? email_effect() : tl_tag_effect_json(), &r);
			token_of(&r, token, sizeof(token));
			tl_resp_free(&r);
			decide(token, humans[i].group, humans[i].decision);
		}
	}
	waited = tl_now() - t1;

	/* The dispatcher's part, written as it writes it (dispatch.c): the
	 * first auto run's effect spent its retry budget — failed, with its
	 * attempts and a dead letter of class exhausted — and two sends were
	 * refused by the kill switch. */
	p[0] = k[4];
	{
		char *e = tl_pg_value(pg, "SELECT id FROM effect_outbox WHERE idempotency_key = $1"
		                          " AND state = 'pending'", 1, p);

		ck_assert_msg(e != NULL, "the auto-approved run has no pending effect");
		snprintf(id, sizeof(id), "%s", e);
		free(e);
	}
	p[0] = id;
	ck_assert_int_eq(tl_pg_exec(pg,
	    "UPDATE effect_outbox SET state = 'failed', attempt = 3, first_attempt_at = now(),"
	    "       error_class = 'transient', reason = 'http_503', updated_at = now()"
	    " WHERE id = $1::uuid AND state = 'pending'", 1, p), 1);
	ck_assert_int_eq(tl_pg_exec(pg,
	    "INSERT INTO effect_attempts (effect_id, kind, attempt, started_at, duration_ms,"
	    "    dispatcher, classification, reason, status)"
	    " SELECT $1::uuid, 'send', a, now(), 5, 'check_metrics', 'transient', 'http_503', 503"
	    "   FROM generate_series(1, 3) AS a", 1, p), 3);
	/* its letter, written by the dispatcher's own call; then an operator
	 * resumed it and its budget was spent again: one letter, counted as
	 * two exhaustions */
	{
		const struct deadletter_open dl = { .effect_id = id, .error_class = "exhausted",
			                            .reason = "max_attempts: 3 of 3, Ошибка 503 — 服务不可用",
			                            .next_action = "resume or reject",
			                            .max_attempts = 3, .retention_days = 30 };
		struct db *db = db_new("", 10000);
		bool written = false;

		ck_assert_ptr_nonnull(db);
		ck_assert_int_eq(deadletter_open(db, &dl, &written), DB_OK);
		ck_assert_msg(written, "the first exhaustion writes the letter");
		ck_assert_int_eq(tl_pg_exec(pg, "UPDATE dead_letters SET resolution = 'resumed'"
		                                " WHERE effect_id = $1::uuid", 1, p), 1);
		ck_assert_int_eq(deadletter_open(db, &dl, &written), DB_OK);
		ck_assert_msg(!written, "a second exhaustion writes no second letter");
		db_free(db);
		ck_assert_int_eq(tl_pg_count(pg, "SELECT count(*) FROM dead_letters WHERE effect_id ="
		                                 " $1::uuid AND exhaustions = 2", 1, p), 1);
	}
	ck_assert_int_eq(tl_pg_exec(pg,
	    "UPDATE dispatch_control SET blocked_sends = blocked_sends + 2", 0, NULL), 1);

	/* 3 + 1 + 2 + 3 claims were claimed */
	scrape_settled(&sa, before.claimed + 9);
	figures_of(&sa, &after);

	EXPECT_DELTA(claimed, 9);
	EXPECT_DELTA(duplicate, 3);
	EXPECT_DELTA(mismatch, 1);
	EXPECT_DELTA(dup_deliveries, 3);
	EXPECT_DELTA(invalid, 2);
	EXPECT_DELTA(outputs, 7);
	EXPECT_DELTA(failed_val, 1);
	EXPECT_DELTA(auth, 2);
	EXPECT_DELTA(auto_, 2);
	EXPECT_DELTA(approve, 2);
	EXPECT_DELTA(reject, 1);
	EXPECT_DELTA(expired, 0);
	EXPECT_DELTA(wait_count, 3);
	/* each person decided within the few seconds the scenario took */
	EXPECT_DELTA(wait_le5, waited < 5 ? 3 : after.wait_le5 - before.wait_le5);
	ck_assert_msg(after.wait_sum - before.wait_sum > 0 &&
	              after.wait_sum - before.wait_sum <= 3 * waited + 0.01,
	              "the approval wait sum moved by %g s; three decisions took at most %g s each",
	              after.wait_sum - before.wait_sum, waited);
	EXPECT_DELTA(exhausted, 2);
	EXPECT_DELTA(open_exhausted, 1);
	EXPECT_DELTA(blocked, 2);
	/* auto 2 + approved 2 enqueued effects; one of them then failed */
	EXPECT_DELTA(pending, 3);
	EXPECT_DELTA(failed, 1);
	ck_assert_msg(tl_now() - t0 < 60, "the scenario took too long to mean anything");

	expect_matches_db(pg, &sa);
	expect_runs_agree(&sb, &sa, since_text);
	scrape_free(&sb);
	scrape_free(&sa);
	PQfinish(pg);
}
END_TEST

/* The kill switch, both ways, through oncegatectl: sends stop engages it
 * (the gauge reads 1), sends resume releases it (0). */
START_TEST(test_kill_switch)
{
	PGconn *pg = tl_pg_connect();
	char *was = tl_pg_value(pg, "SELECT actions_enabled::int::text FROM dispatch_control", 0,
	                        NULL);
	const char *order[2];
	struct scrape s;
	int i;

	ck_assert_ptr_nonnull(was);
	order[0] = strcmp(was, "1") == 0 ? "stop" : "resume";
	order[1] = strcmp(was, "1") == 0 ? "resume" : "stop";
	for (i = 0; i < 2; i++) {
		int rc = tl_ctl(NULL, "sends", order[i], "--reason",
		                "check_metrics: der Schalter folgt — 開關 — 🛑", (char *)NULL);

		ck_assert_msg(rc == 0, "oncegatectl sends %s: exit %d", order[i], rc);
		scrape_settled(&s, 0);
		ck_assert_msg(val(&s, "oncegate_kill_switch_engaged") ==
		                  (strcmp(order[i], "stop") == 0 ? 1 : 0),
		              "after sends %s the gauge is %g", order[i],
		              val(&s, "oncegate_kill_switch_engaged"));
		scrape_free(&s);
	}
	free(was);
	PQfinish(pg);
}
END_TEST

/* ===== the cost: a cache per process, a background flush ================== */

/* Within the cache interval a scrape is answered from memory, even when the
 * database changed meanwhile; past it, the change shows. */
START_TEST(test_cached)
{
	PGconn *pg = tl_pg_connect();
	struct scrape a, b, c;
	double t;

	scrape_settled(&a, 0);
	t = a.at;
	ck_assert_int_eq(tl_pg_exec(pg,
	    "UPDATE dispatch_control SET blocked_sends = blocked_sends + 1", 0, NULL), 1);
	scrape(&b);
	if (b.at - t < (CACHE_MS - 300) / 1000.0)
		ck_assert_msg(strcmp(a.text, b.text) == 0,
		              "a scrape %.0f ms after another was not answered from the cache",
		              (b.at - t) * 1000);
	scrape_settled(&c, 0);
	ck_assert_msg(val(&c, "oncegate_dispatch_blocked_sends_total") ==
	                  val(&a, "oncegate_dispatch_blocked_sends_total") + 1,
	              "past the cache interval the change must show: %g then %g",
	              val(&a, "oncegate_dispatch_blocked_sends_total"),
	              val(&c, "oncegate_dispatch_blocked_sends_total"));
	scrape_free(&a);
	scrape_free(&b);
	scrape_free(&c);
	PQfinish(pg);
}
END_TEST

/* Claim counts reach the database from the responder's flush thread, with
 * nobody scraping: the figure every responder reads lags by about a
 * second, not until the next scrape of the one that counted. */
START_TEST(test_background_flush)
{
	PGconn *pg = tl_pg_connect();
	char key[200];
	double before, after = 0, t;

	tl_mkkey(key, sizeof(key), "flush");
	claim(key, 0, "claimed", NULL);
	tl_sleep_ms(FLUSH_MS + 500);
	before = db_num(pg, "SELECT value FROM metric_counters WHERE name = 'claims_duplicate'",
	                NULL);
	claim(key, 0, "duplicate", NULL);
	claim(key, 0, "duplicate", NULL);
	t = tl_now();
	while (tl_now() - t < 5) {
		after = db_num(pg, "SELECT value FROM metric_counters WHERE name = 'claims_duplicate'",
		               NULL);
		if (after >= before + 2)
			break;
		tl_sleep_ms(100);
	}
	ck_assert_msg(after == before + 2, "metric_counters moved by %g, expected 2", after - before);
	ck_assert_msg(tl_now() - t <= (FLUSH_MS + 1000) / 1000.0,
	              "the counts took %.1f s to reach the database (flush every %d ms)",
	              tl_now() - t, FLUSH_MS);
	PQfinish(pg);
}
END_TEST

/* ===== localhost only ===================================================== */

/* A /metrics location block of an nginx config, from "location = /metrics"
 * to its closing brace (malloc'd), or NULL. */
static char *
metrics_block(const char *conf)
{
	const char *p = strstr(conf, "location = /metrics"), *q;

	if (p == NULL || (q = strchr(p, '}')) == NULL)
		return NULL;
	return strndup(p, (size_t)(q - p + 1));
}

static void
expect_restricted(const char *path)
{
	char *conf = tl_file_slurp(path, NULL), *block;

	ck_assert_msg(conf != NULL, "cannot read %s", path);
	block = metrics_block(conf);
	ck_assert_msg(block != NULL, "%s has no location = /metrics", path);
	ck_assert_msg(strstr(block, "allow 127.0.0.1;") != NULL && strstr(block, "deny all;") != NULL &&
	              strstr(block, "allow 127.0.0.1;") < strstr(block, "deny all;"),
	              "%s: /metrics must be allow 127.0.0.1; … deny all;:\n%s", path, block);
	ck_assert_msg(strstr(block, "allow all") == NULL, "%s: %s", path, block);
	free(block);
	free(conf);
}

START_TEST(test_nginx_configs)
{
	const char *srcdir = getenv("srcdir");
	char path[1200], *dir;

	/* the shipped production and local configs ($srcdir under make check,
	 * else three levels up from this file's source: tests/integration/) */
	if (srcdir == NULL || srcdir[0] == '\0') {
		static char here[512];
		char *slash = here;
		int up;

		snprintf(here, sizeof(here), "%s", __FILE__);
		for (up = 0; up < 3 && slash != NULL; up++)
			if ((slash = strrchr(here, '/')) != NULL)
				*slash = '\0';
		if (slash == NULL)
			snprintf(here, sizeof(here), ".");
		srcdir = here;
	}
	snprintf(path, sizeof(path), "%s/nginx/oncegate.conf", srcdir);
	expect_restricted(path);
	snprintf(path, sizeof(path), "%s/nginx/oncegate-local.conf.in", srcdir);
	expect_restricted(path);
	/* and the config the running stack was rendered from */
	dir = tl_access_log_path();
	ck_assert_ptr_nonnull(dir);
	*strrchr(dir, '/') = '\0';
	snprintf(path, sizeof(path), "%s/nginx.conf", dir);
	expect_restricted(path);
	free(dir);
}
END_TEST

/* GET path from the local address `from`; the answer in r. */
static void
get_from(const char *from, const char *path, struct tl_resp *r)
{
	char url[512];

	snprintf(url, sizeof(url), "%s%s", g_base, path);
	if (tl_http_url("GET", url, from, NULL, NULL, NULL, 0, r) != 0)
		fprintf(stderr, "check_metrics: GET %s from %s: %s\n", path, from, r->error);
}

/* nginx sees a client other than 127.0.0.1 (a connection from 127.0.0.2,
 * which the loopback interface carries): 403 for /metrics, while the same
 * client reaches /healthz, so the refusal is the location's rule. */
START_TEST(test_refused_from_elsewhere)
{
	struct tl_resp r;

	get_from("127.0.0.2", "/healthz", &r);
	ck_assert_msg(r.status == 200, "GET /healthz from 127.0.0.2: HTTP %ld", r.status);
	tl_resp_free(&r);
	get_from("127.0.0.2", "/metrics", &r);
	ck_assert_msg(r.status == 403, "GET /metrics from 127.0.0.2: HTTP %ld, expected 403: %s",
	              r.status, r.body);
	ck_assert_msg(r.body_len > 0 && strstr(r.body, "oncegate_") == NULL,
	              "a refused scrape still carried metrics: %s", r.body);
	tl_resp_free(&r);
	get_from("127.0.0.1", "/metrics", &r);
	ck_assert_msg(r.status == 200, "GET /metrics from 127.0.0.1: HTTP %ld", r.status);
	tl_resp_free(&r);
}
END_TEST

TL_SUITE(metrics_suite, "metrics",
         {"shape", 60, .setup = tl_setup_healthy,
          .tests = TL_LIST(test_families, test_method_not_allowed)},
         {"scenario", 120, .setup = tl_setup_healthy,
          .tests = TL_LIST(test_scenario, test_kill_switch)},
         {"cost", 60, .setup = tl_setup_healthy,
          .tests = TL_LIST(test_cached, test_background_flush)},
         {"localhost", 60, .setup = tl_setup_healthy,
          .tests = TL_LIST(test_nginx_configs, test_refused_from_elsewhere)})

int
main(void)
{
	FILE *f;
	int failed, rc, fd;

	if ((rc = tl_suite_begin("check_metrics", "mx", "ONCEGATE_API_KEY ONCEGATE_CONF ONCEGATE_PYTHON ONCEGATE_CTL")) != 0)
		return rc;
	g_base = tl_env("ONCEGATE_URL");
	g_key = tl_env("ONCEGATE_API_KEY");
	snprintf(g_parser, sizeof(g_parser), "/tmp/check_metrics-parser-XXXXXX");
	fd = mkstemp(g_parser);
	if (fd < 0 || (f = fdopen(fd, "w")) == NULL) {
		fprintf(stderr, "check_metrics: cannot write the parser script\n");
		tl_suite_end(1);
		return 99;
	}
	fputs(parser_py, f);
	fclose(f);

	failed = tl_suite_run(metrics_suite(), false);
	unlink(g_parser);
	return tl_suite_end(failed);
}

/*
 * check_replay.c — integration suite of controlled replay, bulk replay
 * jobs, explain, report and purge (issue 5), through the
 * real responder, nginx, oncegatectl and oncegate-dispatch against the
 * cluster that `./dev test` starts. Without ONCEGATE_URL (or
 * ONCEGATE_DISPATCH for the outbox test) the suite is skipped (exit 77).
 *
 * Originals are made the way workflows make them (claim, output, the
 * approval page) or, where only a finished run is needed, claim and
 * transition. Keys carry a per-run prefix ("rp<epoch>-<pid>"), so the suite
 * can run again on the same database. Every test asserts rows, pages, the
 * provider's own record or the decision log, not only exit codes.
 *
 * Approval tokens are secrets: messages never print them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
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

#define APPROVER        "sam@example.com"    /* in groups support and sales */
#define OPERATOR        tl_ctl_role() /* the role oncegatectl connects as: the operator recorded */
#define BULK_N          50
#define BULK_RATE       "5/s"
#define TEST_TIMEOUT_S  240

static const char *g_key_dev;
static const char *g_base;

/* ---- small helpers ------------------------------------------------------- */

/* ---- the API ---------------------------------------------------------------- */

static void
claim_as(const char *api_key, const char *key, const char *payload_json, struct tl_claimed *c)
{
	json_t *payload = json_loads(payload_json, 0, NULL);
	json_t *body = json_pack("{s:s, s:o, s:s, s:i}", "key", key, "payload", payload,
	                         "workflow_version", "replay-suite@1", "lease_seconds", 60);

	tl_claim_body(api_key, body, c);
	json_decref(body);
}

static void
claim(const char *key, const char *payload_json, struct tl_claimed *c)
{
	claim_as(g_key_dev, key, payload_json, c);
}

#define TICKET_PAYLOAD "{\"ticket\":42,\"m\":\"replay\"}"

/* claim + transition failed_terminal: a finished run with a payload and no
 * output. */
static void
make_terminal_as(const char *api_key, const char *key)
{
	struct tl_claimed c;
	struct tl_resp r;
	char *path = tl_run_path(key, "/transition");
	json_t *body;

	claim_as(api_key, key, TICKET_PAYLOAD, &c);
	body = json_pack("{s:s, s:I, s:s, s:s, s:s}", "lease_owner", c.owner, "version",
	                 (json_int_t)c.version, "to", "failed_terminal", "error_class",
	                 "business", "reason", "the CRM record was wrong");
	tl_post_json(path, api_key, body, &r);
	json_decref(body);
	free(path);
	ASSERT_STATUS(&r, 200);
	tl_resp_free(&r);
}

static void
make_terminal(const char *key)
{
	make_terminal_as(g_key_dev, key);
}

/* claim + a valid output; crm: crm_tag (confident, drawn outside the sample: auto),
 * else support_reply (a person decides). Returns the answer. */
static void
make_output(const char *key, bool crm, struct tl_resp *r)
{
	struct tl_claimed c;
	char *path = tl_run_path(key, "/output");
	json_t *body;

	claim(key, TICKET_PAYLOAD, &c);
	if (crm)
		tl_keep_sample_draw(key, "0.99"); /* outside crm_tag's sample: the rules decide */
	if (crm)
		body = json_pack("{s:s, s:I, s:s, s:{s:s, s:f, s:s}, s:o,"
		                 " s:{s:s, s:s, s:{s:s}}, s:s}",
		                 "lease_owner", c.owner, "version", (json_int_t)c.version,
		                 "contract", "crm_tag", "output", "tag", "lead", "confidence", 0.95,
		                 "reason", "asked for a quote twice", "model", tl_model_json(), "effect",
		                 "type", "crm.tag", "target", "demo_http", "payload", "contact_id",
		                 key, "source_url", "https://crm.example/contact/42");
	else
		body = json_pack("{s:s, s:I, s:s, s:{s:s, s:s, s:s, s:f}, s:o,"
		                 " s:{s:s, s:s, s:{s:s, s:i}}, s:s}",
		                 "lease_owner", c.owner, "version", (json_int_t)c.version,
		                 "contract", "support_reply", "output", "subject",
		                 "Re: order 42", "body", "It ships on Friday.", "tone", "friendly",
		                 "confidence", 0.82, "model", tl_model_json(), "effect", "type",
		                 "email.send", "target", "demo_smtp", "payload", "to",
		                 "customer@example.com", "ticket", 42, "source_url",
		                 "https://crm.example/ticket/42");
	ck_assert_ptr_nonnull(body);
	/* the shipped contracts separate duties: an output names its requester */
	json_object_set_new(body, "requested_by", json_string("check-replay@workflows.example"));
	tl_post_json(path, g_key_dev, body, r);
	json_decref(body);
	free(path);
}

/* The raw token of the one approval link in an awaiting_human answer. */
static void
token_of_url(const char *url, char *token, size_t n)
{
	char prefix[512];

	snprintf(prefix, sizeof(prefix), "%s/approve/", g_base);
	ck_assert_msg(url != NULL && strncmp(url, prefix, strlen(prefix)) == 0,
	              "an approval link must start with %s", prefix);
	snprintf(token, n, "%s", url + strlen(prefix));
	ck_assert_msg(strlen(token) == 43, "the token is not 43 characters");
}

/* ---- the approval page ------------------------------------------------------ */

static void
page(const char *token, const char *form, struct tl_resp *r, char **hdrs)
{
	char path[128];

	snprintf(path, sizeof(path), "/approve/%s", token);
	dl_page_request(path, APPROVER, "support,sales", form, NULL, r, hdrs);
}

/* GET the card (it must show the key and the re-run protocol), then POST
 * the decision the way its form does; expects the 303. */
static void
decide(const char *token, const char *key, const char *decision)
{
	struct tl_resp r;
	char *hdrs = NULL, *csrf, *p, *q, *form;

	page(token, NULL, &r, &hdrs);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(strstr(r.body, key) != NULL, "the card does not show the key %s", key);
	ck_assert_msg(strstr(r.body, "new event") != NULL && strstr(r.body, "replay") != NULL,
	              "the card does not explain the re-run protocol: %.3000s", r.body);
	p = strstr(r.body, "name=\"csrf\"");
	ck_assert_msg(p != NULL, "no csrf input on the card");
	p = strstr(p, "value=\"");
	ck_assert_ptr_nonnull(p);
	p += 7;
	q = strchr(p, '"');
	ck_assert_ptr_nonnull(q);
	csrf = strndup(p, (size_t)(q - p));
	tl_resp_free(&r);
	free(hdrs);
	hdrs = NULL;
	form = tl_form("decision", decision, "csrf", csrf, "reason", "checked by check_replay",
	               (char *)NULL);
	page(token, form, &r, &hdrs);
	ck_assert_msg(r.status == 303, "POST %s: HTTP %ld, expected 303: %.1000s", decision,
	              r.status, r.body);
	tl_resp_free(&r);
	free(hdrs);
	free(form);
	free(csrf);
}

/* make_output(support_reply) and its one link's token. */
static void
make_awaiting(const char *key, char *token, size_t n)
{
	struct tl_resp r;
	json_t *a;

	make_output(key, false, &r);
	ASSERT_STATUS(&r, 202);
	a = json_array_get(json_object_get(r.json, "approvals"), 0);
	token_of_url(tl_jstr(a, "url"), token, n);
	tl_resp_free(&r);
}

/* ---- oncegatectl ------------------------------------------------------------- */

static json_t *
ctl_json(int want_rc, char **out_text, ...) __attribute__((sentinel));

/* Runs oncegatectl --json ARGS, expects exit want_rc, parses stdout's last
 * line as JSON (NULL when there is none). */
static json_t *
ctl_json(int want_rc, char **out_text, ...)
{
	static const struct tl_ctl_how how = { .json = true };
	char *out = NULL, *args = NULL, *line, *nl, *best = NULL;
	const char *a;
	size_t len = 0;
	FILE *f = open_memstream(&args, &len);
	va_list ap;
	json_t *v = NULL;
	int rc;

	ck_assert_ptr_nonnull(f);
	va_start(ap, out_text);
	rc = tl_vctl(&how, &out, ap);
	va_end(ap);
	/* the arguments, for the message */
	va_start(ap, out_text);
	while ((a = va_arg(ap, const char *)) != NULL)
		fprintf(f, " %s", a);
	va_end(ap);
	fclose(f);
	ck_assert_msg(out != NULL, "cannot run oncegatectl --json%s", args);
	ck_assert_msg(rc == want_rc, "oncegatectl --json%s: exit %d, expected %d; stdout: %.2000s",
	              args, rc, want_rc, out);
	for (line = out; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
		*nl = '\0';
		if (line[0] == '{')
			best = line;
	}
	if (best != NULL)
		v = json_loads(best, 0, NULL);
	free(args);
	if (out_text != NULL)
		*out_text = out;
	else
		free(out);
	return v;
}

static const char *
answer(const json_t *doc, const char *q)
{
	const char *s = tl_jstr(json_object_get(doc, q), "answer");

	return s != NULL ? s : "(none)";
}

/* ---- the dispatcher ------------------------------------------------------------ */

/* A dispatcher whose demo_http is the loopback provider on port; it sends
 * (the caller allows sends). */
static void
dispatcher_start(struct dl_disp *d, int port)
{
	struct dl_conf c;

	dl_conf_open(&c, d);
	fprintf(c.f, "\n[target demo_http]\nkind = http\nurl = http://127.0.0.1:%d/idem/effects\n"
	        "idempotency_key = 1\nprovider_id_header = X-Provider-Id\ntimeout_ms = 5000\n"
	        "max_attempts = 3\nbase_ms = 200\ncap_ms = 1000\n", port);
	dl_conf_start(&c, d, ENV_TRUE);
}

static bool
provider_has(int port, const char *idem_key)
{
	char url[1024], *enc = tl_urlencode(idem_key);
	struct tl_resp r;
	long status;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/idem/effects/lookup?key=%s", port, enc);
	free(enc);
	tl_http_url("GET", url, NULL, NULL, NULL, NULL, 0, &r);
	status = r.status;
	tl_resp_free(&r);
	return status == 200;
}

static char *
wait_state(PGconn *c, const char *sql, const char *key, const char *want, double secs)
{
	double deadline = tl_now() + secs;
	char *st;

	for (;;) {
		st = qstr(c, sql, key, (char *)NULL);
		if ((st != NULL && strcmp(st, want) == 0) || tl_now() > deadline)
			return st;
		free(st);
		tl_sleep_ms(100);
	}
}

/* ---- tests ---------------------------------------------------------------------- */

/* An auto-approved original goes out; its replay is a new run linked both
 * ways, a fresh approval decided on the normal page, a fresh outbox row the
 * dispatcher sends under the NEW key — and the original, its approvals,
 * effects, attempts and timeline stay byte for byte as they were. */
START_TEST(test_replay_through_approval_and_outbox)
{
	PGconn *c = tl_pg_connect();
	char key[200], nkey[200], token[64], pk[256], *before, *st, *out;
	char *none[] = { NULL };
	struct dl_disp disp;
	struct tl_resp r;
	json_t *doc, *a;
	pid_t prov = -1;
	int port;

	if (tl_env("ONCEGATE_DISPATCH") == NULL || tl_env("ONCEGATE_PROVIDERS") == NULL)
		return;
	tl_mkkey(key, sizeof(key), "orig");
	tl_mkkey(nkey, sizeof(nkey), "orig-fixed");
	/* only this test's work may be sent by its dispatcher */
	tl_pg_exec(c, "UPDATE effect_outbox SET state = 'cancelled' WHERE state = 'pending'"
	           " AND idempotency_key NOT LIKE $1 || '%'", 1, (const char *[]){ tl_run });
	port = provider_start("http_provider.py", "http_provider", none, &prov);
	proc_register(prov);
	ck_assert_msg(port > 0, "the HTTP provider did not start (see %s)", g_tmp);
	ck_assert_int_eq(tl_ctl(NULL, "sends", "resume", "--reason", "check_replay sends",
	                        (char *)NULL), 0);
	dispatcher_start(&disp, port);

	make_output(key, true, &r);
	ASSERT_STATUS(&r, 202);
	ck_assert_str_eq(tl_jstr(r.json, "outcome"), "approved");
	tl_resp_free(&r);
	st = wait_state(c, "SELECT state FROM workflow_runs WHERE idempotency_key = $1", key,
	                "completed", 20);
	ck_assert_msg(st != NULL && strcmp(st, "completed") == 0, "original is %s", st);
	free(st);
	before = tl_run_snapshot(c, key);

	/* its crm.tag was sent: a replay could tag a second time, so only
	 * with --force */
	ck_assert_int_eq(tl_ctl(&out, "replay", key, "--new-key", nkey, "--reason",
	                        "the tag went to the wrong contact", (char *)NULL), 1);
	free(out);
	doc = ctl_json(0, &out, "replay", key, "--new-key", nkey, "--reason",
	               "the tag went to the wrong contact", "--force",
	               (char *)NULL);
	ck_assert_msg(doc != NULL, "no JSON from replay: %s", out);
	ck_assert_str_eq(tl_jstr(doc, "state"), "awaiting_human");
	a = json_array_get(json_object_get(doc, "approvals"), 0);
	ck_assert_msg(json_array_size(json_object_get(doc, "approvals")) == 1 &&
	              strcmp(tl_jstr(a, "approver"), "group:sales") == 0,
	              "one fresh challenge for crm_tag's approvers: %s", out);
	token_of_url(tl_jstr(a, "url"), token, sizeof(token));
	free(out);
	/* only the hash is stored, and the link was new */
	{
		char hex[65];

		tl_sha256_hex(token, hex);
		ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE token_hash ="
		                         " decode($1, 'hex')", hex, (char *)NULL), 1);
		ck_assert_msg(tl_pg_rows_holding(c, token) == 0,
		              "the raw approval token is stored somewhere in the database");
	}
	/* linked both ways; same client; original payload hash */
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM run_replays r JOIN workflow_runs n"
	                         " ON n.client_id = r.client_id AND n.idempotency_key = r.replay_key"
	                         " JOIN workflow_runs o ON o.client_id = r.client_id"
	                         "  AND o.idempotency_key = r.original_key"
	                         " WHERE r.replay_key = $1 AND n.payload_hash = o.payload_hash"
	                         "  AND n.state = 'awaiting_human' AND n.output = o.output"
	                         "  AND n.requested_by = $2", nkey, OPERATOR, (char *)NULL), 1);
	json_decref(doc);
	doc = ctl_json(0, NULL, "explain", key, (char *)NULL);
	a = json_array_get(json_object_get(doc, "replays"), 0);
	ck_assert_msg(a != NULL && strcmp(tl_jstr(a, "direction"), "replayed_as") == 0 &&
	              strcmp(tl_jstr(a, "key"), nkey) == 0, "explain ORIGINAL: no replayed_as");
	json_decref(doc);
	doc = ctl_json(0, NULL, "explain", nkey, (char *)NULL);
	a = json_array_get(json_object_get(doc, "replays"), 0);
	ck_assert_msg(a != NULL && strcmp(tl_jstr(a, "direction"), "replay_of") == 0 &&
	              strcmp(tl_jstr(a, "key"), key) == 0, "explain NEW: no replay_of");
	ck_assert_str_eq(answer(doc, "sent"), "not_yet"); /* it waits for a person */
	ck_assert_str_eq(answer(doc, "approved"), "pending");
	json_decref(doc);
	/* nothing in the outbox before a person decides */
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1",
	                         nkey, (char *)NULL), 0);

	decide(token, nkey, "approve");
	{
		/* the replay run's effect has a provider key of its own */
		char *cid = qstr(c, "SELECT client_id::text FROM workflow_runs"
		                    " WHERE idempotency_key = $1", nkey, (char *)NULL);
		char *want;

		ck_assert_ptr_nonnull(cid);
		want = tl_provider_key(cid, nkey, "crm.tag", "demo_http", 0);
		snprintf(pk, sizeof(pk), "%s", want);
		free(want);
		free(cid);
	}
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox e JOIN approvals a"
	                         " ON a.id = e.approval_id WHERE e.provider_key = $1", pk, (char *)NULL), 1);
	st = wait_state(c, "SELECT state FROM workflow_runs WHERE idempotency_key = $1", nkey,
	                "completed", 20);
	ck_assert_msg(st != NULL && strcmp(st, "completed") == 0, "the replay run is %s", st);
	free(st);
	ck_assert_msg(provider_has(port, pk), "the provider never received %s", pk);

	doc = ctl_json(0, NULL, "explain", nkey, (char *)NULL);
	ck_assert_str_eq(answer(doc, "processed"), "yes");
	ck_assert_str_eq(answer(doc, "sent"), "yes");
	ck_assert_str_eq(answer(doc, "approved"), "human");
	ck_assert_msg(strstr(tl_jstr(json_object_get(doc, "approved"), "text"), APPROVER) != NULL,
	              "who approved: %s", tl_jstr(json_object_get(doc, "approved"), "text"));
	ck_assert_str_eq(answer(doc, "model"), "known");
	ck_assert_msg(strstr(tl_jstr(json_object_get(doc, "model"), "text"), "qwen2.5-7b-instruct"),
	              "model version");
	json_decref(doc);
	doc = ctl_json(0, NULL, "explain", key, (char *)NULL);
	ck_assert_str_eq(answer(doc, "approved"), "auto");
	ck_assert_str_eq(answer(doc, "sent"), "yes");
	json_decref(doc);

	tl_expect_run_unchanged(c, key, before, "replay, approval and dispatch of the new run");
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM operator_actions WHERE action = 'replay'"
	                         " AND idempotency_key = $1 AND operator = $2", nkey, OPERATOR,
	                         (char *)NULL), 1);
	dl_disp_stop(&disp, 20);
	provider_stop(prov, "http_provider");
	ck_assert_int_eq(tl_ctl(NULL, "sends", "stop", "--reason", "check_replay done",
	                        (char *)NULL), 0);
	free(before);
	PQfinish(c);
}
END_TEST

static long long
global_count(PGconn *c)
{
	return tl_pg_count(c, "SELECT (SELECT count(*) FROM workflow_runs) +"
	                   " (SELECT count(*) FROM run_replays) + (SELECT count(*) FROM approvals) +"
	                   " (SELECT count(*) FROM operator_actions) +"
	                   " (SELECT count(*) FROM replay_jobs)", 0, NULL);
}

static bool
is_refused(const json_t *l, const void *unused)
{
	const char *e = tl_jstr(l, "event");

	(void)unused;
	return e != NULL && strstr(e, ".refused") != NULL;
}

/* Refusals: clear message, non-zero exit, nothing changed, logged. */
START_TEST(test_refusals)
{
	PGconn *c = tl_pg_connect();
	char key[200], other[200], live[200], tok[64], fresh[200], *b1, *b2, *b3, *out = NULL;
	long long g0;
	long off;
	json_t *lines;

	tl_mkkey(key, sizeof(key), "ref-orig");
	tl_mkkey(other, sizeof(other), "ref-other");
	tl_mkkey(live, sizeof(live), "ref-live");
	tl_mkkey(fresh, sizeof(fresh), "ref-fresh");
	make_terminal(key);
	make_terminal(other);
	make_awaiting(live, tok, sizeof(tok));
	b1 = tl_run_snapshot(c, key);
	b2 = tl_run_snapshot(c, other);
	b3 = tl_run_snapshot(c, live);
	g0 = global_count(c);
	off = tl_log_offset();

	/* onto an existing key */
	ck_assert_int_eq(tl_ctl(&out, "replay", key, "--new-key", other, "--reason", "fix",
	                        (char *)NULL), 1);
	free(out);
	/* without a new key */
	ck_assert_int_eq(tl_ctl(&out, "replay", key, "--reason", "fix", (char *)NULL), 2);
	free(out);
	/* onto itself */
	ck_assert_int_eq(tl_ctl(&out, "replay", key, "--new-key", key, "--reason", "fix",
	                        (char *)NULL), 1);
	free(out);
	/* without a reason */
	ck_assert_int_eq(tl_ctl(&out, "replay", key, "--new-key", fresh, (char *)NULL), 2);
	free(out);
	/* of a run still waiting for a person */
	ck_assert_int_eq(tl_ctl(&out, "replay", live, "--new-key", fresh, "--reason", "fix",
	                        (char *)NULL), 1);
	free(out);
	/* of a key nobody claimed */
	ck_assert_int_eq(tl_ctl(&out, "replay", fresh, "--new-key", "rp-never-used-x", "--reason",
	                        "fix", (char *)NULL), 1);
	free(out);
	/* a corrected payload that is not JSON */
	{
		char path[PATH_MAX];

		snprintf(path, sizeof(path), "%s/bad.json", g_tmp);
		write_file(path, "{\"ticket\": 42,");
		ck_assert_int_eq(tl_ctl(&out, "replay", key, "--new-key", fresh, "--payload", path,
		                        "--reason", "fix", (char *)NULL), 2);
		free(out);
	}
	/* stop of no job, purge without a reason */
	ck_assert_int_eq(tl_ctl(&out, "stop", "999999999", "--reason", "x", (char *)NULL), 1);
	free(out);
	ck_assert_int_eq(tl_ctl(&out, "purge", "--older-than", "1s", (char *)NULL), 2);
	free(out);

	tl_expect_run_unchanged(c, key, b1, "a refused replay");
	tl_expect_run_unchanged(c, other, b2, "a refused replay onto this key");
	tl_expect_run_unchanged(c, live, b3, "a refused replay of a live run");
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1",
	                         fresh, (char *)NULL), 0);
	ck_assert_int_eq(global_count(c), g0);
	lines = tl_log_collect(off, is_refused, NULL, 9);
	ck_assert_msg(json_array_size(lines) == 9, "9 refusals, 9 *.refused log lines, got %zu",
	              json_array_size(lines));
	json_decref(lines);
	free(b1);
	free(b2);
	free(b3);
	PQfinish(c);
}
END_TEST

/* A corrected payload: its hash is recorded, the stale draft is not
 * carried, and the workflow's claim of the new key (same payload) takes it
 * over; the old payload under the new key is a mismatch. */
START_TEST(test_replay_corrected_payload)
{
	PGconn *c = tl_pg_connect();
	char key[200], nkey[200], path[PATH_MAX], hash[72], *before, *v;
	struct tl_resp r;
	json_t *doc, *body;

	tl_mkkey(key, sizeof(key), "corr-orig");
	tl_mkkey(nkey, sizeof(nkey), "corr-new");
	make_terminal(key);
	before = tl_run_snapshot(c, key);
	snprintf(path, sizeof(path), "%s/corrected.json", g_tmp);
	write_file(path, "{ \"m\": \"replay\", \"ticket\": 43 }\n");
	tl_payload_hash("{\"m\":\"replay\",\"ticket\":43}", hash);
	doc = ctl_json(0, NULL, "replay", key, "--new-key", nkey, "--payload", path, "--reason",
	               "ticket number was wrong", (char *)NULL);
	ck_assert_str_eq(tl_jstr(doc, "state"), "failed_retryable");
	ck_assert_str_eq(tl_jstr(doc, "payload_hash"), hash);
	json_decref(doc);
	v = qstr(c, "SELECT payload_hash || ' ' || state || ' ' || (output IS NULL)"
	            " FROM workflow_runs WHERE idempotency_key = $1", nkey, (char *)NULL);
	ck_assert_msg(v != NULL && strncmp(v, hash, strlen(hash)) == 0 &&
	              strstr(v, " failed_retryable true") != NULL, "new run: %s", v);
	free(v);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM run_replays WHERE replay_key = $1"
	                         " AND payload_source = 'corrected'", nkey, (char *)NULL), 1);
	/* the workflow claims the new key with the old payload: mismatch */
	body = json_pack("{s:s, s:{s:i, s:s}}", "key", nkey, "payload", "ticket", 42, "m", "replay");
	tl_post_json("/v1/runs", g_key_dev, body, &r);
	json_decref(body);
	ASSERT_STATUS(&r, 422);
	tl_resp_free(&r);
	/* ... and with the corrected one: a reclaim, attempt 2 */
	body = json_pack("{s:s, s:{s:i, s:s}}", "key", nkey, "payload", "ticket", 43, "m", "replay");
	tl_post_json("/v1/runs", g_key_dev, body, &r);
	json_decref(body);
	ASSERT_STATUS(&r, 201);
	{
		long long attempt = 0;

		ck_assert(tl_jint(r.json, "attempt", &attempt));
		ck_assert_int_eq(attempt, 2);
	}
	tl_resp_free(&r);
	tl_expect_run_unchanged(c, key, before, "a corrected replay");
	free(before);
	PQfinish(c);
}
END_TEST

/* The four answers after approve, reject and auto. */
START_TEST(test_explain_scenarios)
{
	char k1[200], k2[200], k3[200], tok[64], *out = NULL;
	struct tl_resp r;
	json_t *doc;

	tl_mkkey(k1, sizeof(k1), "ex-approve");
	tl_mkkey(k2, sizeof(k2), "ex-reject");
	tl_mkkey(k3, sizeof(k3), "ex-auto");
	make_awaiting(k1, tok, sizeof(tok));
	doc = ctl_json(0, NULL, "explain", k1, (char *)NULL);
	ck_assert_str_eq(answer(doc, "approved"), "pending");
	json_decref(doc);
	decide(tok, k1, "approve");
	make_awaiting(k2, tok, sizeof(tok));
	decide(tok, k2, "reject");
	make_output(k3, true, &r);
	ASSERT_STATUS(&r, 202);
	tl_resp_free(&r);

	doc = ctl_json(0, NULL, "explain", k1, (char *)NULL);
	ck_assert_str_eq(answer(doc, "processed"), "yes");
	ck_assert_str_eq(answer(doc, "approved"), "human");
	ck_assert_str_eq(answer(doc, "sent"), "not_yet"); /* queued: no dispatcher runs here */
	ck_assert_str_eq(answer(doc, "model"), "known");
	json_decref(doc);
	doc = ctl_json(0, NULL, "explain", k2, (char *)NULL);
	ck_assert_str_eq(answer(doc, "approved"), "rejected");
	ck_assert_str_eq(answer(doc, "sent"), "no");
	ck_assert_msg(strstr(tl_jstr(json_object_get(doc, "approved"), "text"), APPROVER) != NULL,
	              "who rejected");
	json_decref(doc);
	doc = ctl_json(0, NULL, "explain", k3, (char *)NULL);
	ck_assert_str_eq(answer(doc, "approved"), "auto");
	ck_assert_str_eq(answer(doc, "sent"), "not_yet");
	json_decref(doc);
	/* a key nobody claimed: "no", exit 1 */
	doc = ctl_json(1, NULL, "explain", "rp-no-such-key-ever", (char *)NULL);
	ck_assert_str_eq(answer(doc, "processed"), "no");
	json_decref(doc);
	/* the human table names the four questions */
	ck_assert_int_eq(tl_ctl(&out, "explain", k1, (char *)NULL), 0);
	ck_assert_msg(out != NULL && strstr(out, "Did we process this key?") &&
	              strstr(out, "Did we send?") && strstr(out, "Who approved?") &&
	              strstr(out, "Which model drafted it?") && strstr(out, "Timeline"),
	              "explain table: %s", out);
	free(out);
	/* report: a table and parseable JSON counting these decisions */
	doc = ctl_json(0, NULL, "report", "--since", "1h", (char *)NULL);
	ck_assert_msg(json_integer_value(json_object_get(json_object_get(doc, "decisions"),
	                                                 "reject")) >= 1 &&
	              json_integer_value(json_object_get(json_object_get(doc, "decisions"),
	                                                 "auto")) >= 1 &&
	              json_object_get(doc, "approval_wait_p95_s") != NULL,
	              "report");
	json_decref(doc);
}
END_TEST

/* Writes BULK originals (finished runs) and the map file; returns the path. */
static void
make_map(PGconn *c, const char *tag, int n, char *path, size_t plen, char keys[][2][200])
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int i;

	(void)c;
	fprintf(f, "# %s: issued upstream by check_replay\n\n", tag);
	for (i = 0; i < n; i++) {
		snprintf(keys[i][0], 200, "%s-%s-%02d", tl_run, tag, i);
		snprintf(keys[i][1], 200, "%s-%s-%02d-v2", tl_run, tag, i);
		make_terminal(keys[i][0]);
		fprintf(f, "%s %s\n", keys[i][0], keys[i][1]);
	}
	fclose(f);
	snprintf(path, plen, "%s/%s.map", g_tmp, tag);
	write_file(path, text);
	free(text);
}

START_TEST(test_bulk_dry_run)
{
	PGconn *c = tl_pg_connect();
	char path[PATH_MAX], keys[6][2][200];
	long long g0;
	json_t *doc, *items, *it;
	size_t i;

	make_map(c, "dry", 6, path, sizeof(path), keys);
	g0 = global_count(c);
	doc = ctl_json(0, NULL, "replay", "--map", path, "--dry-run", (char *)NULL);
	items = json_object_get(doc, "items");
	ck_assert_uint_eq(json_array_size(items), 6);
	json_array_foreach(items, i, it) {
		ck_assert_str_eq(tl_jstr(it, "key"), keys[i][0]);
		ck_assert_str_eq(tl_jstr(it, "new_key"), keys[i][1]);
		ck_assert_str_eq(tl_jstr(it, "outcome"), "would_replay");
	}
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(doc, "totals"),
	                                                    "would_replay")), 6);
	json_decref(doc);
	ck_assert_int_eq(global_count(c), g0);
	for (i = 0; i < 6; i++)
		ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE"
		                         " idempotency_key = $1", keys[i][1], (char *)NULL), 0);
	PQfinish(c);
}
END_TEST

/* Two clients share a business key: a job with --client replays that
 * client's run and leaves the other's alone. */
START_TEST(test_bulk_shared_key)
{
	PGconn *c = tl_pg_connect();
	char key[200], nkey[220], name[96], path[PATH_MAX], *line, *key_b;
	json_t *doc;

	tl_mkkey(key, sizeof(key), "bulk-shared-заказ-№7");
	snprintf(nkey, sizeof(nkey), "%s-v2", key);
	snprintf(name, sizeof(name), "%s-globex", tl_run);
	key_b = tl_client_add(name);
	ck_assert_ptr_nonnull(key_b);
	make_terminal_as(g_key_dev, key);
	make_terminal_as(key_b, key);
	ck_assert(asprintf(&line, "%s %s\n", key, nkey) > 0);
	snprintf(path, sizeof(path), "%s/shared.map", g_tmp);
	write_file(path, line);
	doc = ctl_json(0, NULL, "replay", "--map", path, "--client", "dev", "--rate", "100/s",
	               "--reason", "bulk correction of one tenant", (char *)NULL);
	json_decref(doc);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM run_replays p JOIN api_clients a"
	                         " ON a.id = p.client_id WHERE a.name = 'dev'"
	                         " AND p.original_key = $1", key, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs r JOIN api_clients a"
	                         " ON a.id = r.client_id WHERE a.name = 'dev'"
	                         " AND r.idempotency_key = $1", nkey, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1",
	                         nkey, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM run_replays WHERE original_key = $1",
	                         key, (char *)NULL), 1);
	free(line);
	free(key_b);
	PQfinish(c);
}
END_TEST

/* --rate 5/s over 50 items takes at least 9 s; every item once. */
START_TEST(test_bulk_rate)
{
	PGconn *c = tl_pg_connect();
	char path[PATH_MAX], (*keys)[2][200] = calloc(BULK_N, sizeof(*keys));
	char like[128];
	double t0, took;
	json_t *doc;

	make_map(c, "rate", BULK_N, path, sizeof(path), keys);
	t0 = tl_now();
	doc = ctl_json(0, NULL, "replay", "--map", path, "--rate", BULK_RATE, "--reason",
	               "bulk correction", (char *)NULL);
	took = tl_now() - t0;
	json_decref(doc);
	ck_assert_msg(took >= 9.0, "%d items at %s took %.2f s", BULK_N, BULK_RATE, took);
	snprintf(like, sizeof(like), "%s-rate-%%-v2", tl_run);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM run_replays WHERE replay_key LIKE $1",
	                         like, (char *)NULL), BULK_N);
	free(keys);
	PQfinish(c);
}
END_TEST

/* stop half-way: what was done is consistent (each done item has its run
 * and link, no pending item has either); resume completes the rest and
 * never does an item twice. */
START_TEST(test_bulk_stop_resume)
{
	PGconn *c = tl_pg_connect();
	char path[PATH_MAX], (*keys)[2][200] = calloc(BULK_N, sizeof(*keys));
	char out[PATH_MAX], err[PATH_MAX], job[32], *argv[16], *done_before, *v;
	long long done, jobid = -1;
	double deadline;
	pid_t pid;
	int st = 0, i;
	json_t *doc;

	make_map(c, "stop", BULK_N, path, sizeof(path), keys);
	snprintf(out, sizeof(out), "%s/stop.out", g_tmp);
	snprintf(err, sizeof(err), "%s/stop.err", g_tmp);
	argv[0] = (char *)(uintptr_t)tl_env("ONCEGATE_CTL");
	argv[1] = (char *)(uintptr_t)"-c";
	argv[2] = (char *)(uintptr_t)tl_env("ONCEGATE_CONF");
	argv[3] = (char *)(uintptr_t)"replay";
	argv[4] = (char *)(uintptr_t)"--map";
	argv[5] = path;
	argv[6] = (char *)(uintptr_t)"--rate";
	argv[7] = (char *)(uintptr_t)BULK_RATE;
	argv[8] = (char *)(uintptr_t)"--reason";
	argv[9] = (char *)(uintptr_t)"bulk correction, stopped half-way";
	argv[10] = NULL;
	pid = spawn(argv, out, err, ENV_UNSET);
	deadline = tl_now() + 60;
	for (;;) {
		v = qstr(c, "SELECT max(id)::text FROM replay_jobs WHERE source = $1", path, (char *)NULL);
		if (v != NULL) {
			jobid = atoll(v);
			free(v);
			snprintf(job, sizeof(job), "%lld", jobid);
			if (qnum(c, "SELECT count(*) FROM replay_job_items WHERE job_id = $1::bigint"
			            " AND state = 'done'", job, (char *)NULL) >= BULK_N / 2)
				break;
		}
		ck_assert_msg(tl_now() < deadline, "the job never got half-way");
		tl_sleep_ms(50);
	}
	ck_assert_int_eq(tl_ctl(NULL, "stop", job, "--reason", "stop half-way", (char *)NULL), 0);
	ck_assert_msg(wait_exit(pid, 20, &st), "the job did not stop");
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 4, "a stopped job exits 4, got %d", st);
	v = qstr(c, "SELECT state FROM replay_jobs WHERE id = $1::bigint", job, (char *)NULL);
	ck_assert_str_eq(v, "stopped");
	free(v);
	done = qnum(c, "SELECT count(*) FROM replay_job_items WHERE job_id = $1::bigint"
	               " AND state = 'done'", job, (char *)NULL);
	ck_assert_msg(done >= BULK_N / 2 && done < BULK_N, "stopped with %lld of %d done", done,
	              BULK_N);
	/* consistent: done ⇔ new run exists ⇔ link exists */
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM replay_job_items i"
	                         " WHERE i.job_id = $1::bigint AND (i.state = 'done') <>"
	                         " (EXISTS (SELECT 1 FROM workflow_runs w"
	                         "   WHERE w.idempotency_key = i.replay_key) AND EXISTS"
	                         "  (SELECT 1 FROM run_replays r WHERE r.replay_key = i.replay_key"
	                         "   AND r.job_id = i.job_id))", job, (char *)NULL), 0);
	done_before = qstr(c, "SELECT string_agg(seq || '@' || done_at, ',' ORDER BY seq)"
	                      " FROM replay_job_items WHERE job_id = $1::bigint AND state = 'done'",
	                      job, (char *)NULL);

	doc = ctl_json(0, NULL, "replay", "--resume", job, "--rate", "100/s", "--reason",
	               "finish the correction", (char *)NULL);
	json_decref(doc);
	v = qstr(c, "SELECT state FROM replay_jobs WHERE id = $1::bigint", job, (char *)NULL);
	ck_assert_str_eq(v, "completed");
	free(v);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM replay_job_items WHERE job_id = $1::bigint"
	                         " AND state = 'done'", job, (char *)NULL), BULK_N);
	/* the items done before the stop were not done again */
	v = qstr(c, "SELECT string_agg(seq || '@' || done_at, ',' ORDER BY seq)"
	            " FROM replay_job_items WHERE job_id = $1::bigint AND seq IN"
	            " (SELECT seq FROM replay_job_items WHERE job_id = $1::bigint)"
	            " AND done_at <= (SELECT min(ts) FROM operator_actions WHERE"
	            "   action = 'replay.job_resumed' AND (details->>'job_id')::bigint = $1::bigint)",
	            job, (char *)NULL);
	ck_assert_msg(v != NULL && strcmp(v, done_before) == 0, "done before: %s\nnow: %s",
	              done_before, v);
	free(v);
	for (i = 0; i < BULK_N; i++) {
		ck_assert_int_eq(qnum(c, "SELECT count(*) FROM run_replays WHERE replay_key = $1",
		                         keys[i][1], (char *)NULL), 1);
		ck_assert_int_eq(qnum(c, "SELECT count(*) FROM operator_actions WHERE"
		                         " action = 'replay' AND idempotency_key = $1", keys[i][1], (char *)NULL), 1);
	}
	/* a completed job cannot be resumed */
	ck_assert_int_eq(tl_ctl(NULL, "replay", "--resume", job, "--reason", "again", (char *)NULL),
	                 1);
	free(done_before);
	free(keys);
	PQfinish(c);
}
END_TEST

/* Retention: payloads and outputs go, hashes and decisions stay, explain
 * still answers; a dry run counts and changes nothing. */
START_TEST(test_purge)
{
	PGconn *c = tl_pg_connect();
	char key[200], tok[64], *before, *v;
	json_t *doc;
	long long n, purges;

	tl_mkkey(key, sizeof(key), "purge");
	make_awaiting(key, tok, sizeof(tok));
	decide(tok, key, "reject");
	tl_sleep_ms(20);
	before = tl_run_snapshot(c, key);
	purges = qnum(c, "SELECT count(*) FROM operator_actions WHERE action = 'purge'"
	                 " AND reason = 'retention test' AND operator = $1", OPERATOR, (char *)NULL);
	/* the approver's reason is there before the purge */
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approval_votes WHERE idempotency_key = $1"
	                         " AND reason = 'checked by check_replay'", key, (char *)NULL), 1);
	doc = ctl_json(0, NULL, "purge", "--older-than", "1s", "--dry-run", (char *)NULL);
	n = json_integer_value(json_object_get(doc, "runs"));
	ck_assert_msg(n >= 1, "the dry run counts the finished run");
	json_decref(doc);
	tl_expect_run_unchanged(c, key, before, "purge --dry-run");

	doc = ctl_json(0, NULL, "purge", "--older-than", "1s", "--reason", "retention test",
	               (char *)NULL);
	ck_assert_int_ge(json_integer_value(json_object_get(doc, "runs")), 1);
	json_decref(doc);
	v = qstr(c, "SELECT concat_ws(' ', payload IS NULL, output IS NULL,"
	            " NOT coalesce(effect ? 'payload', false), payload_hash IS NOT NULL,"
	            " output_hash IS NOT NULL, decision, state)"
	            " FROM workflow_runs WHERE idempotency_key = $1", key, (char *)NULL);
	ck_assert_str_eq(v, "t t t t t reject rejected");
	free(v);
	/* the free text went too (the approver's reason, the source, the
	 * requester); who decided, when, the class and the hashes stay */
	v = qstr(c, "SELECT concat_ws(' ', result IS NULL, reason IS NULL, validation IS NULL,"
	            " source_url IS NULL, requested_by IS NULL, decided_by IS NOT NULL,"
	            " decided_at IS NOT NULL, error_class)"
	            " FROM workflow_runs WHERE idempotency_key = $1", key, (char *)NULL);
	ck_assert_str_eq(v, "t t t t t t t rejected");
	free(v);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1"
	                         " AND (effect IS NOT NULL OR state <> 'decided' OR reason IS NOT NULL"
	                         "      OR approver_subject IS NULL)", key, (char *)NULL), 0);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approval_votes WHERE idempotency_key = $1"
	                         " AND (reason IS NOT NULL OR decision <> 'reject')", key,
	                         (char *)NULL), 0);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM operator_actions WHERE action = 'purge'"
	                         " AND reason = 'retention test' AND operator = $1",
	                         OPERATOR, (char *)NULL), purges + 1);
	doc = ctl_json(0, NULL, "explain", key, (char *)NULL);
	ck_assert_str_eq(answer(doc, "processed"), "yes");
	ck_assert_str_eq(answer(doc, "sent"), "no");
	ck_assert_str_eq(answer(doc, "approved"), "rejected");
	ck_assert_str_eq(answer(doc, "model"), "known");
	ck_assert(json_is_false(json_object_get(json_object_get(doc, "processed"), "payload_kept")));
	json_decref(doc);
	/* a purged original can only be replayed with a corrected payload */
	ck_assert_int_eq(tl_ctl(NULL, "replay", key, "--new-key", "rp-purged-replay-x", "--reason",
	                        "fix", (char *)NULL), 1);
	free(before);
	PQfinish(c);
}
END_TEST

TL_SUITE(replay_suite, "replay",
         {"replay", TEST_TIMEOUT_S,
          .tests = TL_LIST(test_replay_through_approval_and_outbox, test_refusals,
                           test_replay_corrected_payload, test_explain_scenarios,
                           test_bulk_dry_run, test_bulk_shared_key, test_bulk_rate,
                           test_bulk_stop_resume, test_purge)})

static bool
prepare(void)
{
	char tmpl[] = "/tmp/check_replay.XXXXXX";

	g_base = tl_env("ONCEGATE_URL");
	g_key_dev = tl_env("ONCEGATE_API_KEY");
	if (mkdtemp(tmpl) == NULL)
		return false;
	g_suite = "check_replay";
	snprintf(g_tmp, sizeof(g_tmp), "%s", tmpl);
	snprintf(g_procs, sizeof(g_procs), "%s/procs", g_tmp);
	chmod(g_tmp, 0755);
	return true;
}

/* finish: proc_sweep, what a failed test left running */
TL_STACK_MAIN(.name = "check_replay", .prefix = "rp", .needed = "ONCEGATE_API_KEY ONCEGATE_CTL",
              .suite = replay_suite, .prepare = prepare, .finish = proc_sweep)

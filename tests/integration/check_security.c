/*
 * check_security.c — integration suite of hostile input at every door:
 * SQL metacharacters and odd Unicode in every field a client sends, path
 * traversal wherever a name could pick a file, oversized headers and
 * bodies, slow-loris clients at nginx, and approval tokens that must never
 * reach a log, a table, a referrer or a cache. It drives the product from
 * outside only — HTTP through the real nginx in front of the real responder,
 * rows through libpq, the decision log, nginx's own logs, oncegatectl and
 * oncegate-fcgi -n — and asserts what a user would check. Without
 * ONCEGATE_URL the suite is skipped (exit 77).
 *
 * The rule for hostile input: each value either round-trips byte
 * for byte (read back through the API and in the rows) or gets a clear 4xx
 * whose JSON says what was wrong, and a refused request changes nothing.
 *
 * Keys carry a per-run prefix ("sc<epoch>-<pid>"), so the suite can run
 * again on the same database. Approval tokens are secrets: messages show
 * "/approve/[token]", never the token itself.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <libxml/HTMLparser.h>
#include <libxml/parser.h>
#include <libxml/tree.h>

#include "pagelib.h"
#include "testlib.h"

/* What the test stack sets (./dev's config and nginx/oncegate-local.conf.in). */
#define MAX_BODY          262144   /* max_body_bytes */
#define NGINX_BODY_MAX    (1024 * 1024) /* client_max_body_size */
#define HEADER_TIMEOUT_S  10       /* client_header_timeout */
#define BODY_TIMEOUT_S    10       /* client_body_timeout */
#define LORIS             50       /* slow clients held open at once */
#define PROMPT_S          2.0      /* a normal request meanwhile answers within this */
#define TOKEN_LEN         43
#define APPROVER          "sam@example.com"   /* in group support */
#define GROUPS            "support"
#define RAW_TIMEOUT_MS    8000

static const char *g_key_dev;    /* API key of client "dev" */
static const char *g_base;       /* ONCEGATE_URL */

/* Values with every kind of trouble a string can bring to SQL, LIKE,
 * escaping and Unicode handling; each is valid UTF-8 and printable, so
 * each must come back byte for byte. */
static const char *const hostile[] = {
	"'; DROP TABLE workflow_runs; --",
	"\" OR \"1\"=\"1\" --",
	"\\' \\\\ \\x00 E'\\n' $1 $$quoted$$",
	"100% _of_ %% keys\\%\\_",
	"\xe2\x80\xae" "evil-txt.exe",              /* U+202E RIGHT-TO-LEFT OVERRIDE */
	"\xf0\x9f\x92\xa3 \xf0\x9f\x98\x80 \xf0\x9d\x84\x9e", /* emoji, 4-byte UTF-8 */
	"\xe2\x80\x8b\xef\xbb\xbf zero-width and BOM",
	"<script>alert(1)</script>&amp;",
	"caf\xc3\xa9 \xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d \xe4\xb8\xad\xe6\x96\x87",
};
#define NHOSTILE (sizeof(hostile) / sizeof(hostile[0]))

/* ---- small helpers ----------------------------------------------------- */

/* A printable rendering of a hostile value for messages. */
static const char *
shown(const char *s, char *buf, size_t n)
{
	size_t o = 0;

	for (; *s != '\0' && o + 5 < n; s++) {
		unsigned char c = (unsigned char)*s;

		if (c >= 0x20 && c < 0x7f)
			buf[o++] = (char)c;
		else
			o += (size_t)snprintf(buf + o, n - o, "\\x%02x", c);
	}
	buf[o] = '\0';
	return buf;
}

/* A clear refusal: a 4xx in the given range whose JSON has an "error" code
 * and a message, and whose error or message names `about` (one of "a|b"). */
static void
expect_refusal(const struct tl_resp *r, long lo, long hi, const char *about, const char *what)
{
	const char *err = tl_jstr(r->json, "error"), *msg = tl_jstr(r->json, "message");
	char buf[256], *tok, *save = NULL;
	bool named = false;

	ck_assert_msg(r->status >= lo && r->status <= hi,
	              "%s (%s): HTTP %ld, expected %ld..%ld; body: %.1500s", what, r->what,
	              r->status, lo, hi, r->body);
	ck_assert_msg(err != NULL && *err != '\0',
	              "%s: a %ld must say what was wrong in JSON {\"error\":…}; body: %.1500s", what,
	              r->status, r->body);
	snprintf(buf, sizeof(buf), "%s", about);
	for (tok = strtok_r(buf, "|", &save); tok != NULL; tok = strtok_r(NULL, "|", &save))
		named = named || tl_contains_ci(err, tok) || tl_contains_ci(msg, tok) ||
		        tl_contains_ci(r->body, tok);
	ck_assert_msg(named, "%s: the %ld answer does not name the problem (%s): %.1500s", what,
	              r->status, about, r->body);
}

/* tmpl with every "@@" replaced by with (malloc'd). */
static char *
subst(const char *tmpl, const char *with)
{
	size_t n = strlen(tmpl) + 1, wl = strlen(with);
	const char *at;
	char *out, *o;

	for (at = tmpl; (at = strstr(at, "@@")) != NULL; at += 2)
		n += wl;
	out = malloc(n);
	ck_assert_ptr_nonnull(out);
	for (o = out; *tmpl != '\0';) {
		if (tmpl[0] == '@' && tmpl[1] == '@') {
			memcpy(o, with, wl);
			o += wl;
			tmpl += 2;
		} else {
			*o++ = *tmpl++;
		}
	}
	*o = '\0';
	return out;
}

static PGconn *
pg(void)
{
	return tl_pg_connect();
}

/* Row counts of the tables any request could write, and proof that the
 * tables are still there: equal strings mean nothing was added or lost. */
static char *
totals(PGconn *c)
{
	char *s = tl_pg_value(c,
	    "SELECT concat_ws(' ',"
	    " 'runs=' || (SELECT count(*) FROM workflow_runs),"
	    " 'approvals=' || (SELECT count(*) FROM approvals),"
	    " 'outbox=' || (SELECT count(*) FROM effect_outbox),"
	    " 'clients=' || (SELECT count(*) FROM api_clients),"
	    " 'operator_actions=' || (SELECT count(*) FROM operator_actions),"
	    " 'tables=' || (SELECT count(*) FROM pg_tables WHERE schemaname = 'public'))",
	    0, NULL);

	ck_assert_ptr_nonnull(s);
	return s;
}

static void
expect_totals(PGconn *c, const char *before, const char *what)
{
	char *after = totals(c);

	ck_assert_msg(strcmp(before, after) == 0, "%s changed the database:\n before %s\n after  %s",
	              what, before, after);
	free(after);
}

static void
expect_healthy(const char *after)
{
	struct tl_resp r;
	double t0 = tl_now();

	tl_get("/healthz", NULL, &r);
	ck_assert_msg(r.status == 200 && tl_now() - t0 < PROMPT_S,
	              "after %s, GET /healthz answered HTTP %ld in %.2f s (%s): the responder "
	              "must stay up and prompt", after, r.status, tl_now() - t0, r.error);
	tl_resp_free(&r);
}

/* ---- the API: claim and output ------------------------------------------ */

static json_t *
reply_output(const char *subject, const char *body)
{
	return json_pack("{s:s, s:s, s:s, s:f}", "subject", subject, "body", body, "tone",
	                 "friendly", "confidence", 0.82);
}

static json_t *
email_effect(void)
{
	return json_pack("{s:s, s:s, s:{s:s, s:i}}", "type", "email.send", "target", "demo_smtp",
	                 "payload", "to", "customer@example.com", "ticket", 42);
}

/* The body of an output submission (support_reply unless told). */
static json_t *
output_body(const struct tl_claimed *c, const char *contract, json_t *output, json_t *effect)
{
	json_t *b = json_pack("{s:s, s:I, s:s, s:o, s:o, s:o, s:s}", "lease_owner", c->owner,
	                      "version", (json_int_t)c->version, "contract",
	                      contract ? contract : "support_reply", "output",
	                      output ? output : reply_output("Re: order 42", "Dear customer."),
	                      "effect", effect ? effect : email_effect(), "model", tl_model_json(),
	                      "source_url", "https://crm.example/ticket/42");

	ck_assert_ptr_nonnull(b);
	/* the shipped contracts separate duties: an output names its requester */
	json_object_set_new(b, "requested_by", json_string("support-inbox@workflows.example"));
	return b;
}

/* A run waiting for a person, with its one approval. */
struct gated {
	char key[256];
	char token[64];
	char approval_id[64];
};

static void
make_gated(const char *test, json_t *output, struct gated *g)
{
	struct tl_claimed c;
	struct tl_resp r;
	json_t *body, *a;
	char *path, prefix[512];
	const char *url;

	memset(g, 0, sizeof(*g));
	tl_mkkey(g->key, sizeof(g->key), test);
	tl_claim_run(g->key, &c);
	path = tl_run_path(g->key, "/output");
	body = output_body(&c, NULL, output, NULL);
	tl_post_json(path, g_key_dev, body, &r);
	json_decref(body);
	free(path);
	ck_assert_msg(r.status == 202 && tl_jstr(r.json, "outcome") != NULL &&
	              strcmp(tl_jstr(r.json, "outcome"), "awaiting_human") == 0,
	              "%s: expected 202 awaiting_human, got HTTP %ld: %.2000s", r.what, r.status,
	              r.body);
	a = json_array_get(json_object_get(r.json, "approvals"), 0);
	url = tl_jstr(a, "url");
	snprintf(prefix, sizeof(prefix), "%s/approve/", g_base);
	ck_assert_msg(url != NULL && strncmp(url, prefix, strlen(prefix)) == 0 &&
	              strlen(url + strlen(prefix)) == TOKEN_LEN,
	              "the approval url is not %s + a %d-character token", prefix, TOKEN_LEN);
	snprintf(g->token, sizeof(g->token), "%s", url + strlen(prefix));
	snprintf(g->approval_id, sizeof(g->approval_id), "%s", tl_jstr(a, "approval_id"));
	ck_assert_msg(tl_contains_ci(r.content_type, "application/json"),
	              "output answer: Content-Type %s", r.content_type);
	tl_resp_free(&r);
}

/* ---- the pages ------------------------------------------------------------ */

/* One request to `path` under /approve/ as a signed-in browser would send
 * it (same-origin for a POST); extra: one more header line or NULL. */
static void
web(const char *method, const char *path, const char *user, const char *form,
    const char *extra, struct pl_web *w)
{
	const char *h[6];
	char hu[256], ho[512], hg[64];
	int n = 0;

	memset(w, 0, sizeof(*w));
	if (user != NULL) {
		snprintf(hu, sizeof(hu), "X-Dev-User: %s", user);
		snprintf(hg, sizeof(hg), "X-Dev-Groups: %s", GROUPS);
		h[n++] = hu;
		h[n++] = hg;
	}
	if (form != NULL && (extra == NULL || strncasecmp(extra, "Origin:", 7) != 0)) {
		snprintf(ho, sizeof(ho), "Origin: %s", g_base);
		h[n++] = ho;
		h[n++] = "Sec-Fetch-Site: same-origin";
	}
	if (extra != NULL)
		h[n++] = extra;
	h[n] = NULL;
	tl_http_hdrs(method, path, h, form != NULL ? "application/x-www-form-urlencoded" : NULL,
	             form, form != NULL ? strlen(form) : 0, &w->r, &w->hdrs);
	pl_web_parse(w);
}

static char *
approve_path(const char *token)
{
	char *p = NULL;

	ck_assert_int_ge(asprintf(&p, "/approve/%s", token), 0);
	return p;
}

/* A URL a browser would fetch by itself from this page without leaving
 * it: only our own origin, by path. */
static bool
same_origin_ref(const char *v)
{
	if (v == NULL)
		return true;
	if (v[0] == '/' && v[1] != '/' && v[1] != '\\')
		return true;
	return strncmp(v, g_base, strlen(g_base)) == 0 && (v[strlen(g_base)] == '/');
}

/* Elements that load something, or send the Referer on their own. */
static void
walk_resources(xmlNodePtr n, const char *what)
{
	static const char *const banned[] = {
		"script", "iframe", "frame", "object", "embed", "base", "applet", "audio", "video",
		"source", "track", "portal", NULL,
	};
	size_t i;

	for (; n != NULL; n = n->next) {
		if (n->type == XML_ELEMENT_NODE) {
			const char *name = (const char *)n->name;
			xmlChar *src = xmlGetProp(n, (const xmlChar *)"src");
			xmlChar *href = xmlGetProp(n, (const xmlChar *)"href");
			xmlChar *action = xmlGetProp(n, (const xmlChar *)"action");
			xmlChar *srcset = xmlGetProp(n, (const xmlChar *)"srcset");
			xmlChar *equiv = xmlGetProp(n, (const xmlChar *)"http-equiv");

			for (i = 0; banned[i] != NULL; i++)
				ck_assert_msg(strcasecmp(name, banned[i]) != 0,
				              "%s: the page has a <%s> element", what, name);
			ck_assert_msg(src == NULL || same_origin_ref((const char *)src),
			              "%s: <%s src=\"%s\"> loads from another origin", what, name, src);
			ck_assert_msg(srcset == NULL, "%s: <%s srcset> on the page", what, name);
			if (strcasecmp(name, "link") == 0)
				ck_assert_msg(href == NULL || same_origin_ref((const char *)href),
				              "%s: <link href=\"%s\"> loads from another origin", what, href);
			if (strcasecmp(name, "form") == 0)
				ck_assert_msg(action == NULL || same_origin_ref((const char *)action),
				              "%s: <form action=\"%s\"> posts to another origin", what,
				              action);
			ck_assert_msg(equiv == NULL || strcasecmp((const char *)equiv, "refresh") != 0,
			              "%s: the page redirects itself (meta refresh)", what);
			xmlFree(src);
			xmlFree(href);
			xmlFree(action);
			xmlFree(srcset);
			xmlFree(equiv);
		}
		walk_resources(n->children, what);
	}
}

static void
expect_no_external_resources(const struct pl_web *w, const char *what)
{
	ck_assert_msg(w->doc != NULL, "%s: not an HTML page: %.2000s", what, w->r.body);
	walk_resources(xmlDocGetRootElement(w->doc), what);
	ck_assert_msg(strstr(w->r.body, "url(") == NULL && !tl_contains_ci(w->r.body, "@import"),
	              "%s: inline CSS loads something", what);
}

/* The hidden csrf input's value (malloc'd). */
static char *
csrf_of(const struct pl_web *w)
{
	char *out = NULL;
	/* The DOM is what a browser reads; find input name="csrf". */
	xmlNodePtr n = w->doc != NULL ? xmlDocGetRootElement(w->doc) : NULL;
	xmlNodePtr stack[256];
	int sp = 0;

	while (n != NULL || sp > 0) {
		if (n == NULL) {
			n = stack[--sp];
			continue;
		}
		if (n->type == XML_ELEMENT_NODE && strcasecmp((const char *)n->name, "input") == 0) {
			xmlChar *name = xmlGetProp(n, (const xmlChar *)"name");

			if (name != NULL && strcmp((const char *)name, "csrf") == 0) {
				xmlChar *val = xmlGetProp(n, (const xmlChar *)"value");

				out = val != NULL ? strdup((const char *)val) : NULL;
				xmlFree(val);
			}
			xmlFree(name);
		}
		if (n->next != NULL && sp < 256)
			stack[sp++] = n->next;
		n = n->children;
	}
	ck_assert_msg(out != NULL && strlen(out) >= 16, "%s: the page has no csrf input: %.2000s",
	              w->r.what, w->r.body);
	return out;
}

/* ---- per-test setup ------------------------------------------------------ */

/* oncegatectl with stderr too (its refusals are told there): exit status,
 * output in *out. Arguments end with NULL. */
static int
ctl_all(char **out, ...)
{
	const char *arg;
	char *cmd = NULL, *next = NULL;
	va_list ap;
	int rc;

	ck_assert_int_ge(asprintf(&cmd, "'%s' -c '%s'", tl_env("ONCEGATE_CTL"),
	                          tl_env("ONCEGATE_CONF")), 0);
	va_start(ap, out);
	while ((arg = va_arg(ap, const char *)) != NULL) {
		ck_assert_msg(strchr(arg, '\'') == NULL, "ctl_all: no quotes in arguments, please");
		ck_assert_int_ge(asprintf(&next, "%s '%s'", cmd, arg), 0);
		free(cmd);
		cmd = next;
	}
	va_end(ap);
	ck_assert_int_ge(asprintf(&next, "%s 2>&1", cmd), 0);
	free(cmd);
	*out = tl_shell_output(next);
	ck_assert_ptr_nonnull(*out);
	/* the exit status: run it once more, quietly (these commands change
	 * nothing, so running twice is harmless) */
	ck_assert_int_ge(asprintf(&cmd, "%s >/dev/null", next), 0);
	rc = tl_shell(cmd);
	free(cmd);
	free(next);
	return rc;
}

/* ===== 1. SQL metacharacters and Unicode ================================== */

/* Every hostile value as key, payload member name and value, and in each
 * free-text field of a claim: stored and answered byte for byte; a second
 * claim finds the same run (the key is compared, never pattern-matched). */
START_TEST(test_hostile_claim_roundtrip)
{
	PGconn *c = pg();
	size_t i;

	for (i = 0; i < NHOSTILE; i++) {
		const char *s = hostile[i];
		char key[256], sh[256], *path, *row;
		json_t *payload, *body;
		struct tl_resp r;
		const char *p[2];

		snprintf(key, sizeof(key), "%s-rt%zu-%s", tl_run, i, s);
		payload = json_pack("{s:s, s:s, s:{s:[s]}}", s, s, "v", s, "nested", s, s);
		body = json_pack("{s:s, s:O, s:s, s:s, s:s}", "key", key, "payload", payload,
		                 "workflow_version", s, "trigger", s, "correlation_id", s);
		ck_assert_ptr_nonnull(body);
		tl_post_json("/v1/runs", g_key_dev, body, &r);
		ck_assert_msg(r.status == 201, "claim with %s: HTTP %ld: %.1500s",
		              shown(s, sh, sizeof(sh)), r.status, r.body);
		ck_assert_msg(tl_jstr(r.json, "key") && strcmp(tl_jstr(r.json, "key"), key) == 0,
		              "claim answer does not echo the key %s byte for byte: %s",
		              shown(key, sh, sizeof(sh)), r.body);
		tl_resp_free(&r);

		/* The row: every field exactly as sent, the payload as JSON. */
		{
			char *pj = json_dumps(payload, JSON_COMPACT);

			p[0] = key;
			p[1] = pj;
			row = tl_pg_value(c,
			    "SELECT concat_ws(E'\\x01', idempotency_key, workflow_version, trigger,"
			    " correlation_id, (payload = $2::jsonb)::text) FROM workflow_runs r"
			    " JOIN api_clients k ON k.id = r.client_id"
			    " WHERE k.name = 'dev' AND r.idempotency_key = $1", 2, p);
			free(pj);
		}
		{
			char *want = NULL;

			ck_assert_int_ge(asprintf(&want, "%s\x01%s\x01%s\x01%s\x01true", key, s, s, s), 0);
			ck_assert_msg(row != NULL && strcmp(row, want) == 0,
			              "stored row of %s is not byte-exact: %s", shown(s, sh, sizeof(sh)),
			              row ? row : "(no row)");
			free(want);
		}
		free(row);

		/* Read back through the API. */
		path = tl_run_path(key, NULL);
		tl_get(path, g_key_dev, &r);
		ASSERT_STATUS(&r, 200);
		ck_assert_msg(tl_jstr(r.json, "key") && strcmp(tl_jstr(r.json, "key"), key) == 0 &&
		              tl_jstr(r.json, "workflow_version") &&
		              strcmp(tl_jstr(r.json, "workflow_version"), s) == 0 &&
		              tl_jstr(r.json, "trigger") && strcmp(tl_jstr(r.json, "trigger"), s) == 0 &&
		              tl_jstr(r.json, "correlation_id") &&
		              strcmp(tl_jstr(r.json, "correlation_id"), s) == 0,
		              "GET %s does not answer the fields byte for byte: %.2000s",
		              shown(key, sh, sizeof(sh)), r.body);
		tl_resp_free(&r);
		free(path);

		/* The same claim again is a duplicate of this very run. */
		tl_post_json("/v1/runs", g_key_dev, body, &r);
		ck_assert_msg(r.status == 200 && tl_jstr(r.json, "outcome") &&
		              strcmp(tl_jstr(r.json, "outcome"), "duplicate") == 0,
		              "second claim of %s: HTTP %ld: %.1500s", shown(key, sh, sizeof(sh)),
		              r.status, r.body);
		tl_resp_free(&r);
		ck_assert_int_eq(tl_runs_of_key(c, key), 1);
		json_decref(payload);
		json_decref(body);
	}
	ck_assert_msg(tl_pg_count(c, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
	                          " AND tablename = 'workflow_runs'", 0, NULL) == 1,
	              "workflow_runs is gone");
	PQfinish(c);
}
END_TEST

/* A transition's result, reason and error class with every hostile value:
 * kept byte for byte, and a later claim answers the result as stored. */
START_TEST(test_hostile_transition_roundtrip)
{
	PGconn *c = pg();
	size_t i;

	for (i = 0; i < NHOSTILE; i += 2) {
		const char *s = hostile[i];
		char key[256], test[64], sh[256], *path;
		struct tl_claimed cl;
		struct tl_resp r;
		json_t *result = json_pack("{s:s, s:[s]}", s, s, "list", s), *b, *again;
		const char *p[3];

		snprintf(test, sizeof(test), "tr%zu", i);
		tl_mkkey(key, sizeof(key), test);
		tl_claim_run(key, &cl);
		path = tl_run_path(key, "/transition");
		b = json_pack("{s:s, s:I, s:s, s:O, s:s}", "lease_owner", cl.owner, "version",
		              (json_int_t)cl.version, "to", "completed", "result", result, "reason", s);
		tl_post_json(path, g_key_dev, b, &r);
		ck_assert_msg(r.status == 200, "transition with %s: HTTP %ld: %.1000s",
		              shown(s, sh, sizeof(sh)), r.status, r.body);
		tl_resp_free(&r);
		json_decref(b);
		free(path);
		{
			char *rj = json_dumps(result, JSON_COMPACT);

			p[0] = key;
			p[1] = rj;
			p[2] = s;
			ck_assert_msg(tl_pg_count(c, "SELECT count(*) FROM workflow_runs WHERE"
			                          " idempotency_key = $1 AND result = $2::jsonb AND"
			                          " reason = $3 AND state = 'completed'", 3, p) == 1,
			              "the completed run does not hold result and reason %s byte for byte",
			              shown(s, sh, sizeof(sh)));
			free(rj);
		}
		/* the duplicate claim answers the stored result */
		b = json_pack("{s:s, s:{s:i, s:s}}", "key", key, "payload", "ticket", 42, "m", tl_run);
		tl_post_json("/v1/runs", g_key_dev, b, &r);
		json_decref(b);
		again = json_object_get(r.json, "result");
		ck_assert_msg(r.status == 200 && json_equal(again, result),
		              "the duplicate claim does not answer the result as stored: %.1000s",
		              r.body);
		tl_resp_free(&r);
		json_decref(result);
	}
	PQfinish(c);
}
END_TEST

/* LIKE wildcards in a key are literal: a key with % or _ names one run and
 * never matches another. */
START_TEST(test_wildcards_are_literal)
{
	PGconn *c = pg();
	char key[128], probe[128], *before;
	static const char *const probes[] = { "a_c", "a%", "%", "_bc", "ab_", "a\\bc", "A*", NULL };
	struct tl_claimed cl;
	size_t i;

	tl_mkkey(key, sizeof(key), "like-abc");
	tl_claim_run(key, &cl);
	before = totals(c);
	for (i = 0; probes[i] != NULL; i++) {
		char *path;
		struct tl_resp r;

		snprintf(probe, sizeof(probe), "%s-like-%s", tl_run, probes[i]);
		path = tl_run_path(probe, NULL);
		tl_get(path, g_key_dev, &r);
		ck_assert_msg(r.status == 404,
		              "GET of key \"%s\" matched another run (HTTP %ld): %.1000s", probe,
		              r.status, r.body);
		expect_refusal(&r, 404, 404, "not_found|no such", "unknown key with wildcards");
		tl_resp_free(&r);
		free(path);
		/* the transition of a wildcard key must not reach the real run */
		{
			json_t *b = json_pack("{s:s, s:I, s:s}", "lease_owner", cl.owner, "version",
			                      (json_int_t)cl.version, "to", "completed");
			char *snap = tl_run_snapshot(c, key);

			path = tl_run_path(probe, "/transition");
			tl_post_json(path, g_key_dev, b, &r);
			ck_assert_msg(r.status >= 400 && r.status < 500,
			              "transition of \"%s\" answered HTTP %ld: %.1000s", probe, r.status,
			              r.body);
			tl_expect_run_unchanged(c, key, snap, "a transition on a wildcard key");
			free(snap);
			json_decref(b);
			tl_resp_free(&r);
			free(path);
		}
	}
	expect_totals(c, before, "requests for wildcard keys");
	free(before);
	PQfinish(c);
}
END_TEST

/* Bytes that are not printable UTF-8 (NUL, lone surrogates, overlong and
 * invalid sequences, controls), in the body and in the path: a clear 4xx
 * naming the problem, nothing stored. */
START_TEST(test_hostile_bytes_refused)
{
	static const struct {
		const char *what;
		const char *json; /* %s: the run prefix */
		const char *about;
	} bodies[] = {
		{ "NUL in key (\\u0000)", "{\"key\":\"@@-nul\\u0000x\",\"payload\":{}}", "json|key|nul" },
		{ "lone high surrogate in key", "{\"key\":\"@@-sur\\ud800\",\"payload\":{}}",
		  "json|key|unicode" },
		{ "lone low surrogate in key", "{\"key\":\"@@-sur\\udc00x\",\"payload\":{}}",
		  "json|key|unicode" },
		{ "invalid UTF-8 byte in key", "{\"key\":\"@@-inv\xff\",\"payload\":{}}",
		  "json|utf-8|key" },
		{ "overlong UTF-8 '/' in key", "{\"key\":\"@@-ovl\xc0\xaf\",\"payload\":{}}",
		  "json|utf-8|key" },
		{ "UTF-8-encoded surrogate in key", "{\"key\":\"@@-ces\xed\xa0\x80\",\"payload\":{}}",
		  "json|utf-8|key" },
		{ "control character in key", "{\"key\":\"@@-bel\\u0007\",\"payload\":{}}", "key" },
		{ "newline in key", "{\"key\":\"@@-nl\\nx\",\"payload\":{}}", "key" },
		{ "DEL in key", "{\"key\":\"@@-del\\u007f\",\"payload\":{}}", "key" },
		{ "C1 control in key", "{\"key\":\"@@-c1\\u0085\",\"payload\":{}}", "key" },
		{ "NUL in a payload value", "{\"key\":\"@@-pnul\",\"payload\":{\"a\":\"x\\u0000y\"}}",
		  "json|nul|payload" },
		{ "NUL in a payload member name",
		  "{\"key\":\"@@-pnulm\",\"payload\":{\"a\\u0000b\":1}}", "json|nul|payload" },
		{ "lone surrogate in a payload value",
		  "{\"key\":\"@@-psur\",\"payload\":{\"a\":\"\\udfff\"}}", "json|unicode|payload" },
		{ "invalid UTF-8 in a payload member name",
		  "{\"key\":\"@@-pinv\",\"payload\":{\"\xfe\xfe\":1}}", "json|utf-8|payload" },
		{ "overlong UTF-8 in a payload value",
		  "{\"key\":\"@@-povl\",\"payload\":{\"a\":\"\xe0\x80\xaf\"}}", "json|utf-8|payload" },
		{ "NUL in workflow_version",
		  "{\"key\":\"@@-wnul\",\"payload\":{},\"workflow_version\":\"a\\u0000\"}",
		  "json|nul|workflow_version" },
		{ "NUL in correlation_id",
		  "{\"key\":\"@@-cnul\",\"payload\":{},\"correlation_id\":\"\\u0000\"}",
		  "json|nul|correlation_id" },
		{ "invalid UTF-8 in trigger",
		  "{\"key\":\"@@-tinv\",\"payload\":{},\"trigger\":\"\x80\"}", "json|utf-8|trigger" },
		{ "a key over 200 characters", "{\"key\":\"@@-@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\",\"payload\":{}}", "key" },
		{ "an empty key", "{\"key\":\"\",\"payload\":{}}", "key" },
	};
	static const char *const paths[] = {
		"%00", "x%00y", "%FF", "%C0%AF", "%ED%A0%80", "%07", "%0A", "%7F", "%C2%85", "%E0%80%AF",
		"%F4%90%80%80", NULL,
	};
	PGconn *c = pg();
	char *before = totals(c);
	size_t i;

	for (i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		char *text = NULL;
		struct tl_resp r;

		text = subst(bodies[i].json, tl_run);
		tl_http("POST", "/v1/runs", g_key_dev, "application/json", text, strlen(text), &r);
		expect_refusal(&r, 400, 422, bodies[i].about, bodies[i].what);
		tl_resp_free(&r);
		free(text);
	}
	for (i = 0; paths[i] != NULL; i++) {
		char *path = NULL;
		struct tl_resp r;

		ck_assert_int_ge(asprintf(&path, "/v1/runs/%s-p%s", tl_run, paths[i]), 0);
		tl_get(path, g_key_dev, &r);
		expect_refusal(&r, 400, 400, "key|request", path);
		tl_resp_free(&r);
		free(path);
		ck_assert_int_ge(asprintf(&path, "/v1/runs/%s-p%s/transition", tl_run, paths[i]), 0);
		tl_post_text(path, g_key_dev, "{\"lease_owner\":\"00000000-0000-0000-0000-000000000000\","
		             "\"version\":1,\"to\":\"completed\"}", &r);
		expect_refusal(&r, 400, 400, "key|request", path);
		tl_resp_free(&r);
		free(path);
	}
	expect_totals(c, before, "requests with bytes that are not printable UTF-8");
	free(before);
	PQfinish(c);
}
END_TEST

/* Query parameters and request headers the product does not read change
 * nothing: a hostile query string is ignored, and a client's X-Request-Id
 * never replaces nginx's own request id in the decision log. */
START_TEST(test_query_and_headers_ignored)
{
	PGconn *c = pg();
	char key[128], *path, *before, *snap;
	struct tl_claimed cl;
	struct tl_resp r;
	const char *h[3];
	char *hdrs = NULL, auth[256];
	long off;
	json_t *lines;
	size_t i, ids = 0;

	tl_mkkey(key, sizeof(key), "query");
	tl_claim_run(key, &cl);
	snap = tl_run_snapshot(c, key);
	before = totals(c);
	path = NULL;
	{
		char *enc = tl_urlencode(key);

		ck_assert_int_ge(asprintf(&path, "/v1/runs/%s?key=%%27%%3B%%20DROP%%20TABLE%%20"
		                          "workflow_runs%%3B--&state=completed&x=%%00&y=%%FF%%C0%%AF"
		                          "&%%E2%%80%%AE=1", enc), 0);
		free(enc);
	}
	off = tl_log_offset();
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", g_key_dev);
	h[0] = "X-Request-Id: '; DROP TABLE workflow_runs; --";
	h[1] = auth;
	h[2] = NULL;
	tl_http_hdrs("GET", path, h, NULL, NULL, 0, &r, &hdrs);
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(tl_jstr(r.json, "key") && strcmp(tl_jstr(r.json, "key"), key) == 0 &&
	              strcmp(tl_jstr(r.json, "state"), "processing") == 0,
	              "a query string changed what GET answers: %.1000s", r.body);
	tl_resp_free(&r);
	free(hdrs);
	tl_expect_run_unchanged(c, key, snap, "a hostile query string");
	expect_totals(c, before, "a hostile query string");

	lines = tl_log_collect(off, NULL, NULL, 1);
	for (i = 0; i < json_array_size(lines); i++) {
		const char *rid = tl_jstr(json_array_get(lines, i), "request_id");
		char *d = json_dumps(json_array_get(lines, i), JSON_COMPACT | JSON_ENCODE_ANY);

		ck_assert_msg(d == NULL || strstr(d, "DROP TABLE") == NULL,
		              "the client's X-Request-Id reached the decision log: %s", d);
		if (rid != NULL) {
			ids++;
			ck_assert_msg(strlen(rid) == 32 && strspn(rid, "0123456789abcdef") == 32,
			              "request_id is not nginx's 32 hex digits: %s", rid);
		}
		free(d);
	}
	ck_assert_msg(ids > 0 || json_array_size(lines) == 0,
	              "no decision-log line of this request carries a request_id");
	json_decref(lines);
	free(path);
	free(snap);
	free(before);
	PQfinish(c);
}
END_TEST

/* Model output fields, requested_by and the approval form's reason with
 * hostile values: stored byte for byte and shown as text. Form fields that
 * are not UTF-8 or carry NUL are refused and change nothing. */
START_TEST(test_hostile_output_and_form)
{
	PGconn *c = pg();
	const char *subject = hostile[0];
	char body_text[1024], *path, *csrf, *form, *snap, sh[512];
	struct gated g;
	struct pl_web w;
	size_t i;

	snprintf(body_text, sizeof(body_text), "%s | %s | %s | %s", hostile[2], hostile[3],
	         hostile[4], hostile[5]);
	make_gated("output", reply_output(subject, body_text), &g);
	{
		json_t *want = reply_output(subject, body_text);
		char *wj = json_dumps(want, JSON_COMPACT);
		const char *p[2] = { g.key, wj };

		ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM workflow_runs WHERE"
		                             " idempotency_key = $1 AND output = $2::jsonb", 2, p), 1);
		free(wj);
		json_decref(want);
	}

	/* The card shows the values as text, exactly. */
	path = approve_path(g.token);
	web("GET", path, APPROVER, NULL, NULL, &w);
	ck_assert_msg(w.r.status == 200 && w.doc != NULL, "%s: HTTP %ld", w.r.what, w.r.status);
	{
		xmlChar *t = xmlNodeGetContent(xmlDocGetRootElement(w.doc));

		/* every character as sent, but a bidi override: that would let the
		 * output reorder what the approver reads, so it shows as U+FFFD */
		char *shown_body = strdup(body_text), *at;

		ck_assert_ptr_nonnull(shown_body);
		while ((at = strstr(shown_body, "\xe2\x80\xae")) != NULL)
			memcpy(at, "\xef\xbf\xbd", 3);
		ck_assert_msg(t != NULL && strstr((const char *)t, subject) != NULL &&
		              strstr((const char *)t, shown_body) != NULL,
		              "the card does not show the output as sent");
		ck_assert_msg(strstr(w.r.body, "\xe2\x80\xae") == NULL,
		              "the card carries a right-to-left override from the model output");
		free(shown_body);
		xmlFree(t);
	}
	csrf = csrf_of(&w);
	pl_web_free(&w);

	/* Refused form fields: nothing changes. */
	{
		static const char *const bad[] = {
			"decision=reject&csrf=@@&reason=a%00b",
			"decision=reject&csrf=@@&reason=%FF%FE",
			"decision=reject&csrf=@@&reason=%C0%AF",
			"decision=reject&csrf=@@&reason=%ED%A0%80",
			"decision=reject%00&csrf=@@&reason=x",
			"decision=%27%3B%20DROP%20TABLE%20approvals%3B--&csrf=@@&reason=x",
			"decision=reject&csrf=@@%00&reason=x",
			"decision=reject&csrf=%27%20OR%201%3D1--&reason=x",
		};

		snap = tl_run_snapshot(c, g.key);
		for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			form = subst(bad[i], csrf);
			web("POST", path, APPROVER, form, NULL, &w);
			ck_assert_msg(w.r.status >= 400 && w.r.status < 500 && w.r.status != 429,
			              "form %s: HTTP %ld, expected a 4xx refusal: %.1500s",
			              shown(form, sh, sizeof(sh)), w.r.status, w.r.body);
			tl_expect_approval_headers(w.hdrs, w.r.status, "a refused decision form");
			tl_expect_run_unchanged(c, g.key, snap, "a refused decision form");
			pl_web_free(&w);
			free(form);
		}
		free(snap);
	}

	/* A hostile reason is kept byte for byte. */
	{
		char reason[512];
		const char *p[2];

		snprintf(reason, sizeof(reason), "%s %s %s", hostile[0], hostile[4], hostile[5]);
		form = tl_form("decision", "reject", "csrf", csrf, "reason", reason, (char *)NULL);
		web("POST", path, APPROVER, form, NULL, &w);
		ck_assert_msg(w.r.status == 303, "reject with a hostile reason: HTTP %ld: %.1500s",
		              w.r.status, w.r.body);
		pl_web_free(&w);
		free(form);
		p[0] = g.key;
		p[1] = reason;
		ck_assert_msg(tl_pg_count(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1"
		                          " AND reason = $2", 2, p) == 1 ||
		              tl_pg_count(c, "SELECT count(*) FROM workflow_runs WHERE"
		                          " idempotency_key = $1 AND reason = $2", 2, p) == 1,
		              "the reason was not stored byte for byte");
		ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM workflow_runs WHERE"
		                             " idempotency_key = $1 AND state = 'rejected'", 1, p),
		                 1);
	}
	free(csrf);
	free(path);
	PQfinish(c);
}
END_TEST

/* oncegatectl arguments that end in SQL: names, keys and --reason with
 * metacharacters are refused by rule or stored byte for byte, recorded
 * under the session's role (no name typed on the line stands for the
 * operator); bytes that are not UTF-8 are refused and change nothing. */
START_TEST(test_ctl_hostile_arguments)
{
	PGconn *c = pg();
	char key[256], key2[256], reason[512], *before, *out = NULL, *snap;
	struct gated g;
	const char *p[3];
	int rc;

	before = totals(c);
	rc = tl_ctl(&out, "client", "add", "'; DROP TABLE api_clients; --", "--reason",
	            "check_security: a hostile name", (char *)NULL);
	ck_assert_msg(rc == 2, "client add with SQL in the name: exit %d, expected 2 (usage)", rc);
	free(out);
	rc = tl_ctl(&out, "client", "add", "\xe2\x80\xae" "dev", "--reason",
	            "check_security: a hostile name", (char *)NULL);
	ck_assert_msg(rc == 2, "client add with an RTL override in the name: exit %d", rc);
	free(out);
	rc = tl_ctl(&out, "client", "revoke", "dev' OR '1'='1", "--reason",
	            "check_security: a hostile name", (char *)NULL);
	ck_assert_msg(rc != 0, "client revoke with SQL in the name succeeded");
	free(out);
	rc = tl_ctl(&out, "explain", "'; DROP TABLE workflow_runs; --", (char *)NULL);
	ck_assert_msg(rc == 1, "explain of an unknown hostile key: exit %d, expected 1", rc);
	free(out);
	rc = tl_ctl(&out, "explain", "%", (char *)NULL);
	ck_assert_msg(rc == 1, "explain \"%%\" found something (exit %d): a wildcard matched", rc);
	free(out);
	rc = tl_ctl(&out, "approval", "revoke", "' OR 1=1 --", "--reason", "x", (char *)NULL);
	ck_assert_msg(rc != 0, "approval revoke of a hostile id succeeded");
	free(out);
	expect_totals(c, before, "refused oncegatectl commands");
	free(before);

	/* A hostile key and reason: kept exactly. (A run waiting for
	 * a person: one under a live lease is the workflow's to settle.) */
	{
		char test[128];

		snprintf(test, sizeof(test), "ctl-%s", hostile[0]);
		make_gated(test, NULL, &g);
		snprintf(key, sizeof(key), "%s", g.key);
	}
	snprintf(reason, sizeof(reason), "%s %s %s", hostile[2], hostile[4], hostile[5]);
	rc = tl_ctl(&out, "reject", key, "--client", "dev", "--reason", reason, (char *)NULL);
	ck_assert_msg(rc == 0, "reject of a hostile key with a hostile reason: exit %d: %s", rc,
	              out ? out : "");
	free(out);
	p[0] = key;
	p[1] = reason;
	/* the operator recorded is the session's role */
	p[2] = tl_ctl_role();
	ck_assert_msg(tl_pg_count(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	                          " AND state = 'failed_terminal' AND reason = $2", 2, p) == 1,
	              "the rejected run does not hold the reason byte for byte");
	ck_assert_msg(tl_pg_count(c, "SELECT count(*) FROM operator_actions WHERE"
	                          " idempotency_key = $1 AND reason = $2 AND operator = $3"
	                          " AND action = 'reject'", 3, p) == 1,
	              "operator_actions does not hold the reason byte for byte under the"
	              " session's role %s", p[2]);

	/* Bytes that are not UTF-8: refused, nothing changes. */
	make_gated("ctl-inv", NULL, &g);
	snprintf(key2, sizeof(key2), "%s", g.key);
	snap = tl_run_snapshot(c, key2);
	before = totals(c);
	rc = tl_ctl(&out, "reject", key2, "--client", "dev", "--reason", "bad \xff\xfe bytes",
	            (char *)NULL);
	ck_assert_msg(rc != 0, "reject with a reason that is not UTF-8 succeeded");
	free(out);
	/* no name typed on the line stands for the operator: the option is gone */
	rc = tl_ctl(&out, "reject", key2, "--client", "dev", "--reason", "x", "--operator",
	            "op\xc0\xaf", (char *)NULL);
	ck_assert_msg(rc == 2, "reject with --operator: exit %d, expected 2 (no such option)", rc);
	free(out);
	rc = ctl_all(&out, "explain", "key\xed\xa0\x80", (char *)NULL);
	ck_assert_msg(rc == 1 && (tl_contains_ci(out, "UTF8") || tl_contains_ci(out, "UTF-8") ||
	                          tl_contains_ci(out, "encoding")),
	              "explain of a key that is not UTF-8: exit %d, and the message must say "
	              "why: %s", rc, out);
	free(out);
	tl_expect_run_unchanged(c, key2, snap, "oncegatectl arguments that are not UTF-8");
	expect_totals(c, before, "oncegatectl arguments that are not UTF-8");
	free(snap);
	free(before);
	PQfinish(c);
}
END_TEST

/* ===== 2. Path traversal ================================================== */

/* A contract is named in the request; no name reaches the file system,
 * and a name that is not a loaded contract is refused and changes nothing. */
START_TEST(test_contract_name_traversal)
{
	static const char *const names[] = {
		"../../../../etc/passwd",
		"..%2f..%2f..%2fetc%2fpasswd",
		"%2e%2e/%2e%2e/etc/passwd",
		"/etc/passwd",
		"support_reply/../crm_tag",
		"./support_reply",
		"..\\..\\support_reply",
		"support_reply.json",
		"contracts/support_reply",
		"support_reply/",
		"SUPPORT_REPLY",
		" support_reply",
		"support_reply ",
		"'; DROP TABLE workflow_runs; --",
		"\xe2\x80\xae" "ylper_troppus",
		"",
	};
	PGconn *c = pg();
	char key[128], *path, *snap, *before, sh[256];
	struct tl_claimed cl;
	size_t i;

	tl_mkkey(key, sizeof(key), "contract");
	tl_claim_run(key, &cl);
	path = tl_run_path(key, "/output");
	snap = tl_run_snapshot(c, key);
	before = totals(c);
	for (i = 0; i < sizeof(names) / sizeof(names[0]) + 3; i++) {
		struct tl_resp r;
		char what[512], *long_name = NULL;
		const char *name;
		json_t *b;

		if (i < sizeof(names) / sizeof(names[0])) {
			name = names[i];
		} else if (i == sizeof(names) / sizeof(names[0])) {
			long_name = malloc(5001);
			memset(long_name, 'a', 5000);
			long_name[5000] = '\0';
			name = long_name;
		} else if (i == sizeof(names) / sizeof(names[0]) + 1) {
			long_name = malloc(3 * 1000 + 20);
			long_name[0] = '\0';
			for (int k = 0; k < 1000; k++)
				strcat(long_name, "../");
			strcat(long_name, "etc/passwd");
			name = long_name;
		} else {
			name = NULL; /* NUL inside the name, written by hand below */
		}
		snprintf(what, sizeof(what), "contract \"%s\"",
		         name ? shown(name, sh, sizeof(sh)) : "support_reply\\u0000../x");
		if (name != NULL) {
			b = output_body(&cl, name, NULL, NULL);
			tl_post_json(path, g_key_dev, b, &r);
			json_decref(b);
		} else {
			char *text = NULL;

			b = output_body(&cl, "@@CONTRACT@@", NULL, NULL);
			text = json_dumps(b, JSON_COMPACT);
			json_decref(b);
			{
				char *at = strstr(text, "@@CONTRACT@@"), *t2 = NULL;

				ck_assert_int_ge(asprintf(&t2, "%.*ssupport_reply\\u0000../x%s",
				                          (int)(at - text), text, at + 12), 0);
				free(text);
				text = t2;
			}
			tl_post_text(path, g_key_dev, text, &r);
			free(text);
		}
		expect_refusal(&r, 400, 422, "contract|json|nul", what);
		ck_assert_msg(strstr(r.body, "root:") == NULL && strstr(r.body, "/bin/") == NULL &&
		              !tl_contains_ci(r.body, "\"schema\""),
		              "%s: the answer shows file contents: %.1000s", what, r.body);
		tl_resp_free(&r);
		free(long_name);
		tl_expect_run_unchanged(c, key, snap, what);
	}

	/* Effect type and target are names too (allow-listed, no SSRF). */
	{
		static const char *const targets[] = {
			"../demo_smtp", "demo_smtp/..", "http://127.0.0.1:1/", "/etc/passwd",
			"demo_smtp\\..", "'; DROP TABLE effect_outbox; --",
		};

		for (i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
			struct tl_resp r;
			char what[256];
			json_t *eff = json_pack("{s:s, s:s, s:{s:s}}", "type", "email.send", "target",
			                        targets[i], "payload", "to", "customer@example.com");
			json_t *b = output_body(&cl, NULL, NULL, eff);

			snprintf(what, sizeof(what), "effect target \"%s\"", targets[i]);
			tl_post_json(path, g_key_dev, b, &r);
			json_decref(b);
			expect_refusal(&r, 400, 422, "target|effect", what);
			tl_resp_free(&r);
			tl_expect_run_unchanged(c, key, snap, what);
		}
	}
	expect_totals(c, before, "outputs naming hostile contracts and targets");
	free(snap);
	free(before);
	free(path);
	PQfinish(c);
}
END_TEST

/* Anything in a URL path: a dot segment, an encoded one, a backslash, a
 * NUL, an absolute path or an overlong name never reads a file outside the
 * configured directories and never changes anything. Sent raw, as a
 * hostile client would (no client-side normalisation). */
START_TEST(test_url_path_traversal)
{
	static const char *const paths[] = {
		"/approve/../../../../etc/passwd",
		"/approve/..%2f..%2f..%2f..%2fetc%2fpasswd",
		"/approve/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
		"/approve/%2e%2e%2f%2e%2e%2foncegate.conf",
		"/approve/%252e%252e%252f%252e%252e%252fetc%252fpasswd",
		"/approve//etc/passwd",
		"/approve/..\\..\\..\\etc\\passwd",
		"/approve/%5c..%5c..%5cetc%5cpasswd",
		"/approve/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA%00.css",
		"/approve/%c0%ae%c0%ae/%c0%ae%c0%ae/etc/passwd",
		"/approve/..;/..;/etc/passwd",
		"/approve-assets/../../../../etc/passwd",
		"/approve-assets/..%2f..%2f..%2foncegate.conf",
		"/approve-assets/%2e%2e/%2e%2e/csrf_secret",
		"/approve-assets/approval.css/../../csrf_secret",
		"/approve-assets/approval.css/..%2f..%2fcsrf_secret",
		"/approve-assets/approval.css%00.txt",
		"/approve-assets/approval.css%2f..%2f..%2fapproval.xhtml",
		"/approve-assets/..%5c..%5capproval.xhtml",
		"/approve-assets//etc/passwd",
		"/approve-assets/approval.xhtml",
		"/approve-assets/../templates/approval.xhtml",
		"/approve-assets/..%2ftemplates%2fapproval.xhtml",
		"/../../../../etc/passwd",
		"/%2e%2e/%2e%2e/etc/passwd",
		"/v1/../../etc/passwd",
		"/v1/runs/..%2f..%2f..%2fetc%2fpasswd",
		"/v1/runs/%2e%2e/%2e%2e/etc/passwd",
		"/healthz/../oncegate.conf",
		"/metrics/..%2f..%2fcsrf_secret",
		"/etc/passwd",
		"//etc/passwd",
		"/csrf_secret",
		"/oncegate.conf",
		"/decisions.log",
		"/nginx/access.log",
	};
	/* What would show that a file outside the pages leaked. */
	static const char *const leaks[] = {
		"root:", "daemon:", "csrf_secret", "database =", "[target", "listen_mode",
		"data-slot", "<?xml", "run.claimed", "GET /", "PRIVATE KEY",
	};
	PGconn *c = pg();
	char *before = totals(c), *csrf_secret, *state = tl_state_dir(), *secret_path = NULL;
	size_t i, j;

	ck_assert_ptr_nonnull(state);
	ck_assert_int_ge(asprintf(&secret_path, "%s/csrf_secret", state), 0);
	csrf_secret = tl_file_slurp(secret_path, NULL);
	if (csrf_secret != NULL)
		csrf_secret[strcspn(csrf_secret, "\r\n")] = '\0';
	for (i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		char *req = NULL, *ans = NULL;
		long st;

		ck_assert_int_ge(asprintf(&req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		                          "X-Dev-User: " APPROVER "\r\nX-Dev-Groups: " GROUPS "\r\n"
		                          "Authorization: Bearer %s\r\nConnection: close\r\n\r\n",
		                          paths[i], g_key_dev), 0);
		st = tl_raw_request(req, strlen(req), RAW_TIMEOUT_MS, &ans);
		ck_assert_msg(st >= 400 && st < 500,
		              "GET %s: HTTP %ld, expected a 4xx; answer: %.1500s", paths[i], st, ans);
		for (j = 0; j < sizeof(leaks) / sizeof(leaks[0]); j++)
			ck_assert_msg(strstr(ans, leaks[j]) == NULL,
			              "GET %s: the answer holds \"%s\" (a file outside the pages?): %.1500s",
			              paths[i], leaks[j], ans);
		ck_assert_msg(csrf_secret == NULL || *csrf_secret == '\0' ||
		              strstr(ans, csrf_secret) == NULL,
		              "GET %s: the answer holds the CSRF secret", paths[i]);
		if (strncmp(paths[i], "/approve", 8) == 0 && st != 400) {
			/* nginx's own 400 for a malformed request line comes before any
			 * location; everything else under /approve/ is an approval
			 * answer and carries the approval pages' security headers. */
			char *hdr_end = strstr(ans, "\r\n\r\n");

			if (hdr_end != NULL && strncmp(paths[i], "/approve/", 9) == 0) {
				*hdr_end = '\0';
				tl_expect_approval_headers(ans, st, paths[i]);
			}
		}
		free(req);
		free(ans);
	}
	/* The stylesheet itself is served (so the location above was reachable). */
	{
		char *ans = NULL;
		const char *req = "GET /approve-assets/approval.css HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		                  "Connection: close\r\n\r\n";
		long st = tl_raw_request(req, strlen(req), RAW_TIMEOUT_MS, &ans);

		ck_assert_msg(st == 200 && tl_contains_ci(ans, "Content-Type: text/css"),
		              "GET /approve-assets/approval.css: HTTP %ld: %.500s", st, ans);
		free(ans);
	}
	expect_totals(c, before, "path traversal requests");
	expect_healthy("path traversal requests");
	free(csrf_secret);
	free(secret_path);
	free(state);
	free(before);
	PQfinish(c);
}
END_TEST

/* The loaders meet names only through the configuration: a contract file
 * whose name could be a path, a contract whose name field differs from its
 * file, and a template that would pull in another file are all refused at
 * start-up (oncegate-fcgi -n, the same loader as SIGHUP), loudly, without
 * showing the other file. */
START_TEST(test_loaders_refuse_bad_names)
{
	const char *ctl = tl_env("ONCEGATE_CTL"), *conf = tl_env("ONCEGATE_CONF");
	char dir[] = "/tmp/og-sec-XXXXXX", *fcgi = NULL, *cmd = NULL, *out, *text;
	const char *slash;
	char *secret_file = NULL;
	struct {
		const char *what;
		const char *contract_file;  /* extra file in the contracts dir, or NULL */
		const char *contract_body;  /* its content (%s: nothing) */
		const char *template_body;  /* replaces approval.xhtml, or NULL */
		bool ok;
	} cases[] = {
		{ "the shipped contracts and templates", NULL, NULL, NULL, true },
		{ "a dot file (skipped, like editor debris)", "..\\..\\evil.json", "{}", NULL, true },
		{ "a contract file named with backslashes", "a\\..\\..\\evil.json", "{}", NULL, false },
		{ "a contract file named with dots", "a..evil.json", "{}", NULL, false },
		{ "a contract file named in capitals", "Support_Reply.json", "{}", NULL, false },
		{ "a contract file named with a space", "a b.json", "{}", NULL, false },
		{ "a contract file named with SQL", "x';drop table approvals;--.json", "{}", NULL,
		  false },
		{ "a contract whose name field is a path", "evil.json", "@NAME@", NULL, false },
		{ "a template with an external entity", NULL, NULL,
		  "<?xml version=\"1.0\"?>\n<!DOCTYPE html [<!ENTITY x SYSTEM \"file://@SECRET@\">]>\n"
		  "<html xmlns=\"http://www.w3.org/1999/xhtml\"><body><p>&x;</p></body></html>\n",
		  false },
		{ "a template with XInclude", NULL, NULL,
		  "<html xmlns=\"http://www.w3.org/1999/xhtml\" "
		  "xmlns:xi=\"http://www.w3.org/2001/XInclude\"><body>"
		  "<xi:include href=\"@SECRET@\" parse=\"text\"/></body></html>\n",
		  false },
	};
	long baseline = -1;
	size_t i;

	ck_assert_ptr_nonnull(ctl);
	slash = strrchr(ctl, '/');
	ck_assert_ptr_nonnull(slash);
	ck_assert_int_ge(asprintf(&fcgi, "%.*s/oncegate-fcgi", (int)(slash - ctl), ctl), 0);
	ck_assert_msg(access(fcgi, X_OK) == 0, "no responder binary at %s", fcgi);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_ge(asprintf(&secret_file, "%s/secret.txt", dir), 0);
	{
		FILE *f = fopen(secret_file, "w");

		ck_assert_ptr_nonnull(f);
		fputs("TOP-SECRET-OUTSIDE-THE-TEMPLATES\n", f);
		fclose(f);
	}
	text = tl_file_slurp(conf, NULL);
	ck_assert_msg(text != NULL, "cannot read %s", conf);

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *cdir = NULL, *tdir = NULL, *cfile = NULL, *line, *next;
		FILE *f;
		int rc;

		ck_assert_int_ge(asprintf(&cdir, "%s/c%zu", dir, i), 0);
		ck_assert_int_ge(asprintf(&tdir, "%s/t%zu", dir, i), 0);
		ck_assert_int_ge(asprintf(&cfile, "%s/oncegate-%zu.conf", dir, i), 0);
		ck_assert_int_ge(asprintf(&cmd, "mkdir -p '%s' '%s'", cdir, tdir), 0);
		ck_assert_int_eq(tl_shell(cmd), 0);
		free(cmd);
		/* The templates the stack uses: templates_dir of its config. */
		{
			char *tsrc = strstr(text, "\ntemplates_dir = "), *csrc = strstr(text,
			                                                                  "\ncontracts_dir = ");
			char tpath[1024], cpath[1024];

			ck_assert_msg(tsrc != NULL && csrc != NULL, "the stack's config names no "
			              "templates_dir / contracts_dir");
			snprintf(tpath, sizeof(tpath), "%.*s", (int)strcspn(tsrc + 17, "\n"), tsrc + 17);
			snprintf(cpath, sizeof(cpath), "%.*s", (int)strcspn(csrc + 17, "\n"), csrc + 17);
			ck_assert_int_ge(asprintf(&cmd, "rm -f '%s'/*.json && cp '%s'/*.json '%s/' && "
			                          "cp '%s'/*.xhtml '%s/'", cdir, cpath, cdir, tpath, tdir), 0);
			ck_assert_msg(tl_shell(cmd) == 0, "%s failed", cmd);
			free(cmd);
		}
		if (cases[i].contract_file != NULL) {
			char *p = NULL;

			ck_assert_int_ge(asprintf(&p, "%s/%s", cdir, cases[i].contract_file), 0);
			f = fopen(p, "w");
			ck_assert_ptr_nonnull(f);
			if (strcmp(cases[i].contract_body, "@NAME@") == 0) {
				/* support_reply's own text under another file name, whose
				 * name field walks out of the directory */
				char *src = NULL, *sr;

				ck_assert_int_ge(asprintf(&src, "%s/support_reply.json", cdir), 0);
				sr = tl_file_slurp(src, NULL);
				ck_assert_ptr_nonnull(sr);
				{
					char *at = strstr(sr, "\"support_reply\"");

					ck_assert_msg(at != NULL, "support_reply.json does not name itself");
					fprintf(f, "%.*s\"../evil\"%s", (int)(at - sr), sr, at + 15);
				}
				free(sr);
				free(src);
			} else {
				fputs(cases[i].contract_body, f);
			}
			fclose(f);
			free(p);
		}
		if (cases[i].template_body != NULL) {
			char *p = NULL, *body = strdup(cases[i].template_body), *at;

			while ((at = strstr(body, "@SECRET@")) != NULL) {
				char *nb = NULL;

				ck_assert_int_ge(asprintf(&nb, "%.*s%s%s", (int)(at - body), body,
				                          secret_file, at + 8), 0);
				free(body);
				body = nb;
			}
			ck_assert_int_ge(asprintf(&p, "%s/approval.xhtml", tdir), 0);
			f = fopen(p, "w");
			ck_assert_ptr_nonnull(f);
			fputs(body, f);
			fclose(f);
			free(p);
			free(body);
		}
		/* The stack's config with the two directories replaced. */
		f = fopen(cfile, "w");
		ck_assert_ptr_nonnull(f);
		for (line = text; *line != '\0'; line = next) {
			size_t n = strcspn(line, "\n");

			next = line + n + (line[n] == '\n');
			if (strncmp(line, "contracts_dir", 13) == 0)
				fprintf(f, "contracts_dir = %s\n", cdir);
			else if (strncmp(line, "templates_dir", 13) == 0)
				fprintf(f, "templates_dir = %s\n", tdir);
			else
				fprintf(f, "%.*s\n", (int)n, line);
		}
		fclose(f);
		chmod(cfile, 0600);
		ck_assert_int_ge(asprintf(&cmd, "'%s' -n -c '%s' 2>&1", fcgi, cfile), 0);
		out = tl_shell_output(cmd);
		ck_assert_ptr_nonnull(out);
		free(cmd);
		ck_assert_int_ge(asprintf(&cmd, "'%s' -n -c '%s' >/dev/null 2>&1", fcgi, cfile), 0);
		rc = tl_shell(cmd);
		free(cmd);
		cmd = NULL;
		if (cases[i].ok) {
			char *loaded = strstr(out, "contracts loaded from");

			ck_assert_msg(rc == 0, "%s: oncegate-fcgi -n refused it (exit %d): %s",
			              cases[i].what, rc, out);
			/* "# N contracts loaded from DIR": the same N every time */
			ck_assert_msg(loaded != NULL, "%s: -n does not say what it loaded", cases[i].what);
			while (loaded > out && loaded[-1] != '#')
				loaded--;
			if (baseline < 0)
				baseline = strtol(loaded, NULL, 10);
			ck_assert_msg(strtol(loaded, NULL, 10) == baseline && baseline > 0,
			              "%s: %ld contracts loaded, expected %ld", cases[i].what,
			              strtol(loaded, NULL, 10), baseline);
		}
		else
			ck_assert_msg(rc != 0 && strlen(out) > 0,
			              "%s: oncegate-fcgi -n accepted it (exit %d): %.1500s", cases[i].what,
			              rc, out);
		ck_assert_msg(strstr(out, "TOP-SECRET") == NULL,
		              "%s: the loader read and showed a file outside its directory: %s",
		              cases[i].what, out);
		free(out);
		free(cdir);
		free(tdir);
		free(cfile);
	}
	ck_assert_int_ge(asprintf(&cmd, "rm -rf '%s'", dir), 0);
	tl_shell(cmd);
	free(cmd);
	free(text);
	free(fcgi);
	free(secret_file);
}
END_TEST

/* ===== 3. Oversized headers and bodies ==================================== */

static char *
repeat(char ch, size_t n)
{
	char *s = malloc(n + 1);

	ck_assert_ptr_nonnull(s);
	memset(s, ch, n);
	s[n] = '\0';
	return s;
}

/* A raw request; the status must be one of `want` ("400|431|494"). */
static long
raw_expect(const char *req, size_t len, const char *want, const char *what)
{
	char *ans = NULL, code[8];
	long st = tl_raw_request(req, len, RAW_TIMEOUT_MS, &ans);
	char alts[64], *tok, *save = NULL;
	bool ok = false;

	snprintf(code, sizeof(code), "%ld", st);
	snprintf(alts, sizeof(alts), "%s", want);
	for (tok = strtok_r(alts, "|", &save); tok != NULL; tok = strtok_r(NULL, "|", &save))
		ok = ok || strcmp(tok, code) == 0;
	ck_assert_msg(ok, "%s: HTTP %ld, expected %s; answer: %.800s", what, st, want, ans);
	free(ans);
	return st;
}

START_TEST(test_oversized_headers)
{
	PGconn *c = pg();
	char *before = totals(c), *big, *req = NULL;
	size_t i;

	/* one header line bigger than nginx's buffers */
	big = repeat('a', 20000);
	ck_assert_int_ge(asprintf(&req, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n"
	                          "Connection: close\r\n\r\n", big), 0);
	raw_expect(req, strlen(req), "400|431|494", "a 20 KB header line");
	free(req);
	expect_healthy("a 20 KB header line");

	/* a request line (URI) bigger than them */
	ck_assert_int_ge(asprintf(&req, "GET /v1/runs/%s HTTP/1.1\r\nHost: x\r\n"
	                          "Connection: close\r\n\r\n", big), 0);
	raw_expect(req, strlen(req), "400|414", "a 20 KB request line");
	free(req);
	free(big);

	/* a huge cookie on an approval POST */
	big = repeat('c', 40000);
	ck_assert_int_ge(asprintf(&req, "POST /v1/runs HTTP/1.1\r\nHost: x\r\nCookie: s=%s\r\n"
	                          "Content-Type: application/json\r\nContent-Length: 2\r\n"
	                          "Connection: close\r\n\r\n{}", big), 0);
	raw_expect(req, strlen(req), "400|431|494", "a 40 KB cookie");
	free(req);
	free(big);

	/* many headers: 400 lines of 200 bytes, 80 KB in all */
	{
		size_t cap = 400 * 220 + 512, n = 0;

		req = malloc(cap);
		ck_assert_ptr_nonnull(req);
		n += (size_t)snprintf(req + n, cap - n, "GET /healthz HTTP/1.1\r\nHost: x\r\n");
		for (i = 0; i < 400; i++)
			n += (size_t)snprintf(req + n, cap - n, "X-H%zu: %0190d\r\n", i, 0);
		n += (size_t)snprintf(req + n, cap - n, "Connection: close\r\n\r\n");
		raw_expect(req, n, "400|431|494", "400 headers, 80 KB");
		free(req);
	}
	expect_healthy("400 headers");

	/* many small headers that fit: answered normally, the responder stays up */
	{
		size_t cap = 1500 * 16 + 512, n = 0;

		req = malloc(cap);
		ck_assert_ptr_nonnull(req);
		n += (size_t)snprintf(req + n, cap - n, "GET /healthz HTTP/1.1\r\nHost: x\r\n");
		for (i = 0; i < 1500; i++)
			n += (size_t)snprintf(req + n, cap - n, "X-%zu: 1\r\n", i);
		n += (size_t)snprintf(req + n, cap - n, "Connection: close\r\n\r\n");
		raw_expect(req, n, "200|400|431|494", "1500 small headers");
		free(req);
	}
	expect_healthy("1500 small headers");
	expect_totals(c, before, "oversized headers");
	free(before);
	PQfinish(c);
}
END_TEST

/* A claim body of exactly n bytes (valid JSON, padded in the payload). */
static char *
claim_of_size(const char *key, size_t n)
{
	char *head = NULL, *s;
	size_t hl;

	ck_assert_int_ge(asprintf(&head, "{\"key\":\"%s\",\"payload\":{\"pad\":\"", key), 0);
	hl = strlen(head);
	ck_assert(n > hl + 3);
	s = malloc(n + 1);
	ck_assert_ptr_nonnull(s);
	memcpy(s, head, hl);
	memset(s + hl, 'p', n - hl - 3);
	memcpy(s + n - 3, "\"}}", 3);
	s[n] = '\0';
	free(head);
	return s;
}

static char *
chunked_request(const char *path, const char *body, size_t len)
{
	size_t cap = len + len / 4096 * 16 + 1024, n = 0, off;
	char *req = malloc(cap);

	ck_assert_ptr_nonnull(req);
	n += (size_t)snprintf(req, cap, "POST %s HTTP/1.1\r\nHost: x\r\n"
	                      "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
	                      "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
	                      path, g_key_dev);
	for (off = 0; off < len; off += 4096) {
		size_t k = len - off < 4096 ? len - off : 4096;

		n += (size_t)snprintf(req + n, cap - n, "%zx\r\n", k);
		memcpy(req + n, body + off, k);
		n += k;
		memcpy(req + n, "\r\n", 2);
		n += 2;
	}
	n += (size_t)snprintf(req + n, cap - n, "0\r\n\r\n");
	req[n] = '\0';
	return req;
}

START_TEST(test_oversized_bodies)
{
	PGconn *c = pg();
	char key[128], *body, *req = NULL, *before;
	struct tl_resp r;

	/* exactly at the cap: accepted (the cap is not off by one) */
	tl_mkkey(key, sizeof(key), "body-at-cap");
	body = claim_of_size(key, MAX_BODY);
	tl_http("POST", "/v1/runs", g_key_dev, "application/json", body, MAX_BODY, &r);
	ASSERT_STATUS(&r, 201);
	tl_resp_free(&r);
	free(body);
	ck_assert_int_eq(tl_runs_of_key(c, key), 1);

	before = totals(c);
	/* one byte over */
	tl_mkkey(key, sizeof(key), "body-over-cap");
	body = claim_of_size(key, MAX_BODY + 1);
	tl_http("POST", "/v1/runs", g_key_dev, "application/json", body, MAX_BODY + 1, &r);
	expect_refusal(&r, 413, 413, "body_too_large|large", "a body one byte over max_body_bytes");
	tl_resp_free(&r);
	ck_assert_int_eq(tl_runs_of_key(c, key), 0);

	/* chunked, over the cap (nginx knows no length up front) */
	req = chunked_request("/v1/runs", body, MAX_BODY + 1);
	{
		char *ans = NULL, *js;
		long st = tl_raw_request(req, strlen(req), RAW_TIMEOUT_MS, &ans);
		json_t *j;

		ck_assert_msg(st == 413, "a chunked body over max_body_bytes: HTTP %ld: %.800s", st,
		              ans);
		js = strstr(ans, "\r\n\r\n");
		j = js != NULL ? json_loads(js + 4, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
		ck_assert_msg(tl_jstr(j, "error") != NULL, "the chunked 413 is not JSON: %.800s", ans);
		json_decref(j);
		free(ans);
	}
	free(req);
	free(body);
	ck_assert_int_eq(tl_runs_of_key(c, key), 0);
	expect_healthy("a chunked body over the cap");

	/* far over nginx's own cap: plain and chunked */
	tl_mkkey(key, sizeof(key), "body-huge");
	body = claim_of_size(key, NGINX_BODY_MAX + 512 * 1024);
	tl_http("POST", "/v1/runs", g_key_dev, "application/json", body, strlen(body), &r);
	expect_refusal(&r, 413, 413, "body_too_large|large", "a 1.5 MB body");
	tl_resp_free(&r);
	req = chunked_request("/v1/runs", body, strlen(body));
	raw_expect(req, strlen(req), "413", "a 1.5 MB chunked body");
	free(req);
	free(body);
	ck_assert_int_eq(tl_runs_of_key(c, key), 0);
	expect_healthy("a 1.5 MB body");

	/* a huge Content-Length with little data: refused at once */
	{
		/* the header lines, the statuses allowed (| between) */
		static const struct tl_given lens[] = {
			{ "Content-Length: 5000000000000\r\n", "413" },
			{ "Content-Length: 99999999999999999999999999\r\n", "400|413" },
			{ "Content-Length: -5\r\n", "400" },
			{ "Content-Length: 12\r\nContent-Length: 13\r\n", "400" },
			{ "Content-Length: 12\r\nTransfer-Encoding: chunked\r\n", "400" },
			{ "Transfer-Encoding: gzip, chunked\r\n", "400|501" },
		};
		size_t i;

		for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			ck_assert_int_ge(asprintf(&req, "POST /v1/runs HTTP/1.1\r\nHost: x\r\n"
			                          "Authorization: Bearer %s\r\n"
			                          "Content-Type: application/json\r\n%s"
			                          "Connection: close\r\n\r\n{\"key\":\"x\"}",
			                          g_key_dev, lens[i].given), 0);
			/* the answer comes at once (nginx may linger before closing) */
			{
				char *ans = NULL, code[8], alts[32], *tok, *save = NULL;
				long st = tl_raw_request(req, strlen(req), (int)(PROMPT_S * 1000), &ans);
				bool ok = false;

				snprintf(code, sizeof(code), "%ld", st);
				snprintf(alts, sizeof(alts), "%s", lens[i].want);
				for (tok = strtok_r(alts, "|", &save); tok != NULL;
				     tok = strtok_r(NULL, "|", &save))
					ok = ok || strcmp(tok, code) == 0;
				ck_assert_msg(ok, "%s: HTTP %ld within %.0f s, expected %s: %.500s",
				              lens[i].given, st, PROMPT_S, lens[i].want, ans);
				free(ans);
			}
			free(req);
		}
	}
	/* and on the approval POST, too */
	{
		char tok[44];

		tl_random_token(tok);
		body = repeat('r', NGINX_BODY_MAX + 1024);
		ck_assert_int_ge(asprintf(&req, "POST /approve/%s HTTP/1.1\r\nHost: x\r\n"
		                          "Content-Type: application/x-www-form-urlencoded\r\n"
		                          "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
		                          tok, strlen(body), body), 0);
		raw_expect(req, strlen(req), "413", "a 1 MB approval form");
		free(req);
		free(body);
	}
	expect_totals(c, before, "oversized bodies");
	expect_healthy("oversized bodies");
	free(before);
	PQfinish(c);
}
END_TEST

/* ===== 4. Slow-loris clients ============================================== */

/* LORIS connections send a header byte a second; nginx closes each once
 * client_header_timeout has passed since its first byte, however steadily
 * it trickles. A connection that sent a Content-Length and then stalls is
 * closed after client_body_timeout. Meanwhile normal requests are answered
 * promptly. */
START_TEST(test_slow_loris)
{
	enum { SLOW_BODIES = 3 };
	int fds[LORIS + SLOW_BODIES];
	double opened[LORIS + SLOW_BODIES], closed[LORIS + SLOW_BODIES];
	double t_start = tl_now(), deadline, worst = 0;
	int n = LORIS + SLOW_BODIES, open_n, i, normal = 0;
	const char *head = "GET /healthz HTTP/1.1\r\nHost: x\r\n";

	for (i = 0; i < n; i++) {
		fds[i] = tl_raw_connect();
		ck_assert_msg(fds[i] >= 0, "connection %d to nginx failed", i);
		opened[i] = tl_now();
		closed[i] = 0;
		if (i < LORIS) {
			ck_assert_int_eq(send(fds[i], head, strlen(head), MSG_NOSIGNAL),
			                 (ssize_t)strlen(head));
		} else {
			char req[512];

			snprintf(req, sizeof(req), "POST /v1/runs HTTP/1.1\r\nHost: x\r\n"
			         "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
			         "Content-Length: 1000\r\n\r\n{\"key\":", g_key_dev);
			ck_assert_int_eq(send(fds[i], req, strlen(req), MSG_NOSIGNAL),
			                 (ssize_t)strlen(req));
		}
	}
	deadline = t_start + (HEADER_TIMEOUT_S > BODY_TIMEOUT_S ? HEADER_TIMEOUT_S : BODY_TIMEOUT_S) +
	           8;
	for (;;) {
		struct tl_resp r;
		double t0;

		open_n = 0;
		for (i = 0; i < n; i++) {
			struct pollfd p = { fds[i], POLLIN, 0 };
			char buf[512];

			if (closed[i] != 0)
				continue;
			if (poll(&p, 1, 0) > 0) {
				ssize_t k = recv(fds[i], buf, sizeof(buf), MSG_DONTWAIT);

				if (k <= 0) {
					closed[i] = tl_now();
					continue;
				}
				/* an answer (408): wait for the close that follows */
				continue;
			}
			/* one more header byte, a harmless header name */
			if (i < LORIS && send(fds[i], "X", 1, MSG_NOSIGNAL) != 1) {
				closed[i] = tl_now();
				continue;
			}
			open_n++;
		}
		/* a normal request meanwhile */
		t0 = tl_now();
		tl_get("/healthz", NULL, &r);
		ck_assert_msg(r.status == 200, "GET /healthz during the slow-loris: HTTP %ld (%s)",
		              r.status, r.error);
		if (tl_now() - t0 > worst)
			worst = tl_now() - t0;
		normal++;
		tl_resp_free(&r);
		if (open_n == 0 || tl_now() > deadline)
			break;
		tl_sleep_ms(1000 - (long)((tl_now() - t0) * 1000) > 0
		                ? 1000 - (long)((tl_now() - t0) * 1000) : 0);
	}
	for (i = 0; i < n; i++) {
		double held = closed[i] != 0 ? closed[i] - opened[i] : tl_now() - opened[i];
		int limit = i < LORIS ? HEADER_TIMEOUT_S : BODY_TIMEOUT_S;

		ck_assert_msg(closed[i] != 0,
		              "%s connection %d still open after %.1f s: nginx must close it after "
		              "%d s", i < LORIS ? "slow-header" : "stalled-body", i, held, limit);
		ck_assert_msg(held >= limit - 2 && held <= limit + 4,
		              "%s connection %d was closed after %.1f s, expected about %d s",
		              i < LORIS ? "slow-header" : "stalled-body", i, held, limit);
		close(fds[i]);
	}
	ck_assert_msg(worst < PROMPT_S,
	              "a normal request took %.2f s while %d slow clients were connected", worst,
	              LORIS);
	ck_assert_int_ge(normal, HEADER_TIMEOUT_S - 2);
	expect_healthy("the slow-loris");
}
END_TEST

/* ===== 5 and 6. Tokens never leak; every approval answer's headers ======== */

/* Reads one answer from fd until the server closes it (or timeout_ms). */
static char *
read_answer(int fd, int timeout_ms)
{
	double deadline = tl_now() + timeout_ms / 1000.0;
	size_t len = 0, cap = 65536;
	char *buf = malloc(cap + 1);

	ck_assert_ptr_nonnull(buf);
	for (;;) {
		struct pollfd p = { fd, POLLIN, 0 };
		int left = (int)((deadline - tl_now()) * 1000);
		ssize_t k;

		if (left <= 0 || poll(&p, 1, left) <= 0)
			break;
		if (len == cap)
			break;
		k = recv(fd, buf + len, cap - len, 0);
		if (k <= 0)
			break;
		len += (size_t)k;
	}
	buf[len] = '\0';
	return buf;
}

static void
assert_absent(const char *text, const char *secret, const char *secret_name, const char *where)
{
	ck_assert_msg(text == NULL || strstr(text, secret) == NULL,
	              "%s appears in %s", secret_name, where);
}

/* Every spelling of a token that could end up somewhere. */
static void
assert_token_absent(const char *text, const char *token, bool hash_too, const char *where)
{
	char hex[65], enc_upper[3 * TOKEN_LEN + 1], enc_lower[3 * TOKEN_LEN + 1], std[64];
	size_t i;

	tl_sha256_hex(token, hex);
	for (i = 0; token[i] != '\0'; i++) {
		snprintf(enc_upper + 3 * i, 4, "%%%02X", (unsigned char)token[i]);
		snprintf(enc_lower + 3 * i, 4, "%%%02x", (unsigned char)token[i]);
		std[i] = token[i] == '-' ? '+' : token[i] == '_' ? '/' : token[i];
	}
	std[i] = '\0';
	assert_absent(text, token, "a raw approval token", where);
	assert_absent(text, enc_upper, "a percent-encoded approval token", where);
	assert_absent(text, enc_lower, "a percent-encoded approval token", where);
	assert_absent(text, std, "an approval token (standard base64)", where);
	if (hash_too) /* never logged; the gate stores it */
		assert_absent(text, hex, "an approval token's hash", where);
	/* half of it is as good as a hint */
	{
		char half[TOKEN_LEN];

		snprintf(half, sizeof(half), "%.*s", TOKEN_LEN / 2, token);
		assert_absent(text, half, "half of an approval token", where);
	}
}

static char *
state_file(const char *name)
{
	char *dir = tl_state_dir(), *p = NULL;

	ck_assert_ptr_nonnull(dir);
	ck_assert_int_ge(asprintf(&p, "%s/%s", dir, name), 0);
	free(dir);
	return p;
}

START_TEST(test_token_never_leaks)
{
	PGconn *c = pg();
	struct gated g;
	struct pl_web w;
	char *path, *csrf, *form, *text, *loc, *p;
	long st;
	int i;

	make_gated("secret", NULL, &g);
	path = approve_path(g.token);

	/* The card: headers, nothing loaded from elsewhere, nothing cached. */
	web("GET", path, APPROVER, NULL, NULL, &w);
	ck_assert_msg(w.r.status == 200, "%s: HTTP %ld: %.1000s", w.r.what, w.r.status, w.r.body);
	tl_expect_approval_headers(w.hdrs, 200, "the approval card");
	expect_no_external_resources(&w, "the approval card");
	csrf = csrf_of(&w);
	pl_web_free(&w);

	/* Following the source link from the card sends no Referer: the page
	 * says so (Referrer-Policy), and nothing on it is fetched elsewhere. */
	form = tl_form("decision", "approve", "csrf", csrf, "reason", "looks right", (char *)NULL);
	web("POST", path, APPROVER, form, NULL, &w);
	ck_assert_msg(w.r.status == 303, "%s: HTTP %ld: %.1000s", w.r.what, w.r.status, w.r.body);
	tl_expect_approval_headers(w.hdrs, 303, "the decision's 303");
	loc = tl_header_get(w.hdrs, "Location");
	ck_assert_msg(loc != NULL && (loc[0] == '/' || strncmp(loc, g_base, strlen(g_base)) == 0),
	              "the 303 leaves the origin");
	free(loc);
	pl_web_free(&w);
	free(form);

	/* The used link: a clear page, 410, no form, the same headers. */
	web("GET", path, APPROVER, NULL, NULL, &w);
	ck_assert_msg(w.r.status == 410, "used link: HTTP %ld", w.r.status);
	tl_expect_approval_headers(w.hdrs, 410, "the used-link page");
	expect_no_external_resources(&w, "the used-link page");
	ck_assert_msg(strstr(w.r.body, "<form") == NULL, "the used-link page has a form");
	pl_web_free(&w);

	/* Many decisions on the used link at once, as a script would send them:
	 * nginx limits them (429) with the headers too, the rest are 410, and
	 * nginx's error log does not quote the token. */
	form = tl_form("decision", "approve", "csrf", csrf, (char *)NULL);
	{
		enum { HAMMER = 160 };
		int fds[HAMMER], n429 = 0, n410 = 0;
		char *req = NULL;

		ck_assert_int_ge(asprintf(&req, "POST %s HTTP/1.1\r\nHost: x\r\n"
		                          "X-Dev-User: " APPROVER "\r\nX-Dev-Groups: " GROUPS "\r\n"
		                          "Origin: %s\r\nSec-Fetch-Site: same-origin\r\n"
		                          "Content-Type: application/x-www-form-urlencoded\r\n"
		                          "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
		                          path, g_base, strlen(form), form), 0);
		for (i = 0; i < HAMMER; i++) {
			fds[i] = tl_raw_connect();
			ck_assert_msg(fds[i] >= 0, "connection %d failed", i);
			ck_assert_int_eq(send(fds[i], req, strlen(req), MSG_NOSIGNAL),
			                 (ssize_t)strlen(req));
		}
		for (i = 0; i < HAMMER; i++) {
			char *ans = read_answer(fds[i], RAW_TIMEOUT_MS), *end;

			close(fds[i]);
			st = strncmp(ans, "HTTP/1.", 7) == 0 ? strtol(ans + 9, NULL, 10) : 0;
			ck_assert_msg(st == 410 || st == 429, "POST on a used link: HTTP %ld: %.300s", st,
			              ans);
			end = strstr(ans, "\r\n\r\n");
			if (end != NULL)
				*end = '\0';
			if (st == 429) {
				n429++;
				tl_expect_approval_headers(ans, 429, "nginx's 429 on an approval POST");
				ck_assert_msg(tl_contains_ci(ans, "\nRetry-After:"), "the 429 has no Retry-After");
			} else {
				n410++;
				tl_expect_approval_headers(ans, 410, "a decision on a used link");
			}
			free(ans);
		}
		free(req);
		ck_assert_msg(n429 > 0 && n410 > 0,
		              "%d decisions at once: %d limited (429), %d answered (410)", HAMMER,
		              n429, n410);
	}
	free(form);

	/* Now read everything the token could have reached. */
	tl_sleep_ms(TL_LOG_SETTLE_MS + 300);
	{
		size_t len;

		text = tl_log_slurp(&len);
		ck_assert_msg(text != NULL && len > 0, "cannot read the decision log");
		ck_assert_msg(strstr(text, g.approval_id) != NULL,
		              "the decision log has no line about approval %s (wrong file?)",
		              g.approval_id);
		assert_token_absent(text, g.token, true, "the decision log");
		assert_absent(text, csrf, "a CSRF value", "the decision log");
		free(text);
	}
	p = tl_access_log_path();
	text = tl_file_slurp(p, NULL);
	ck_assert_msg(text != NULL, "cannot read nginx's access log %s", p);
	ck_assert_msg(strstr(text, "/approve/[token]") != NULL && strstr(text, " 429 ") != NULL,
	              "the access log %s shows no (masked) approval requests or 429s", p);
	assert_token_absent(text, g.token, true, "nginx's access log");
	assert_absent(text, csrf, "a CSRF value", "nginx's access log");
	free(text);
	free(p);
	p = tl_error_log_path();
	text = tl_file_slurp(p, NULL);
	assert_token_absent(text, g.token, true, "nginx's error log");
	free(text);
	free(p);
	p = state_file("fcgi.stderr");
	text = tl_file_slurp(p, NULL);
	assert_token_absent(text, g.token, true, "the responder's stderr");
	assert_absent(text, csrf, "a CSRF value", "the responder's stderr");
	free(text);
	free(p);
	/* Every row of every table, as text (what a dump would hold): searched
	 * by the server, which is far quicker than fetching them all. */
	ck_assert_msg(tl_pg_rows_holding(c, g.approval_id) > 0, "no row holds approval %s (wrong "
	              "database?)", g.approval_id);
	{
		char enc[3 * TOKEN_LEN + 1], std[64], half[TOKEN_LEN];
		const char *needles[6];
		size_t k;

		for (k = 0; g.token[k] != '\0'; k++) {
			snprintf(enc + 3 * k, 4, "%%%02X", (unsigned char)g.token[k]);
			std[k] = g.token[k] == '-' ? '+' : g.token[k] == '_' ? '/' : g.token[k];
		}
		std[k] = '\0';
		snprintf(half, sizeof(half), "%.*s", TOKEN_LEN / 2, g.token);
		needles[0] = g.token;
		needles[1] = enc;
		needles[2] = std;
		needles[3] = half;
		needles[4] = csrf;
		needles[5] = NULL;
		for (k = 0; needles[k] != NULL; k++)
			ck_assert_msg(tl_pg_rows_holding(c, needles[k]) == 0,
			              "a database row holds %s", k == 4 ? "a CSRF value"
			                                                : "(a spelling of) the approval token");
	}
	/* ... and the token hash the gate stores is binary, not any text form */
	{
		char hex[65];
		const char *pp[2];

		tl_sha256_hex(g.token, hex);
		pp[0] = g.approval_id;
		pp[1] = hex;
		ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM approvals WHERE id = $1::uuid"
		                             " AND token_hash = decode($2, 'hex')", 2, pp), 1);
	}
	/* the status API shows the approval, never its token or hash */
	{
		char *sp = tl_run_path(g.key, NULL);
		struct tl_resp r;

		tl_get(sp, g_key_dev, &r);
		ASSERT_STATUS(&r, 200);
		assert_token_absent(r.body, g.token, true, "GET /v1/runs/{key}");
		tl_resp_free(&r);
		free(sp);
	}
	free(csrf);
	free(path);
	PQfinish(c);
}
END_TEST

/* Every answer under /approve/ — the responder's pages and refusals and
 * nginx's own — carries the approval pages' security headers; the API's answers are never
 * cached (the output answer holds the approval link). */
START_TEST(test_headers_on_every_answer)
{
	struct gated g;
	struct pl_web w;
	char *path, *csrf, *form, tok[44], *p2 = NULL, *big;
	struct tl_resp r;
	char *hdrs = NULL;

	make_gated("headers", NULL, &g);
	path = approve_path(g.token);
	tl_random_token(tok);

	web("GET", path, APPROVER, NULL, NULL, &w);
	ck_assert_int_eq(w.r.status, 200);
	tl_expect_approval_headers(w.hdrs, 200, "the card");
	csrf = csrf_of(&w);
	pl_web_free(&w);

	web("HEAD", path, APPROVER, NULL, NULL, &w);
	ck_assert_msg(w.r.status == 200 || w.r.status == 405, "HEAD of the card: HTTP %ld",
	              w.r.status);
	tl_expect_approval_headers(w.hdrs, w.r.status, "HEAD of the card");
	pl_web_free(&w);

	web("GET", path, NULL, NULL, NULL, &w);
	ck_assert_msg(w.r.status == 401 || w.r.status == 403, "no subject: HTTP %ld", w.r.status);
	tl_expect_approval_headers(w.hdrs, w.r.status, "the sign-in-required page");
	pl_web_free(&w);

	form = tl_form("decision", "approve", "csrf", "forged-csrf-value-0123456789", (char *)NULL);
	web("POST", path, APPROVER, form, NULL, &w);
	ck_assert_msg(w.r.status == 403, "a forged CSRF value: HTTP %ld: %.500s", w.r.status,
	              w.r.body);
	tl_expect_approval_headers(w.hdrs, 403, "the CSRF refusal");
	pl_web_free(&w);
	free(form);

	form = tl_form("decision", "approve", "csrf", csrf, (char *)NULL);
	web("POST", path, APPROVER, form, "Origin: http://evil.example", &w);
	ck_assert_msg(w.r.status == 403, "cross-origin decision: HTTP %ld", w.r.status);
	tl_expect_approval_headers(w.hdrs, 403, "the cross-origin refusal");
	pl_web_free(&w);

	web("PUT", path, APPROVER, form, NULL, &w);
	ck_assert_msg(w.r.status == 405, "PUT on an approval: HTTP %ld", w.r.status);
	tl_expect_approval_headers(w.hdrs, 405, "the 405 of an approval URL");
	pl_web_free(&w);
	web("DELETE", path, APPROVER, NULL, NULL, &w);
	ck_assert_msg(w.r.status == 405, "DELETE on an approval: HTTP %ld", w.r.status);
	tl_expect_approval_headers(w.hdrs, 405, "the 405 of an approval URL");
	pl_web_free(&w);

	p2 = approve_path(tok);
	web("GET", p2, APPROVER, NULL, NULL, &w);
	ck_assert_msg(w.r.status == 404, "unknown token: HTTP %ld", w.r.status);
	tl_expect_approval_headers(w.hdrs, 404, "the unknown-link page");
	pl_web_free(&w);
	free(p2);

	big = repeat('A', 600);
	p2 = approve_path(big);
	web("GET", p2, APPROVER, NULL, NULL, &w);
	ck_assert_msg(w.r.status >= 400 && w.r.status < 500, "a 600-character token: HTTP %ld",
	              w.r.status);
	tl_expect_approval_headers(w.hdrs, w.r.status, "the answer to an overlong token");
	pl_web_free(&w);
	free(p2);
	free(big);

	web("GET", "/approve/not.a.token", APPROVER, NULL, NULL, &w);
	ck_assert_msg(w.r.status == 404, "/approve/not.a.token: HTTP %ld", w.r.status);
	tl_expect_approval_headers(w.hdrs, 404, "nginx's 404 for a path that is no token");
	pl_web_free(&w);

	/* the inbox of the signed-in person */
	web("GET", "/approve/", APPROVER, NULL, NULL, &w);
	ck_assert_msg(w.r.status == 200, "/approve/: HTTP %ld", w.r.status);
	tl_expect_approval_headers(w.hdrs, w.r.status, "GET /approve/ (the inbox)");
	pl_web_free(&w);

	big = repeat('f', NGINX_BODY_MAX + 10);
	tl_http_hdrs("POST", path, NULL, "application/x-www-form-urlencoded", big, strlen(big), &r,
	             &hdrs);
	ck_assert_msg(r.status == 413, "a 1 MB approval form: HTTP %ld", r.status);
	tl_expect_approval_headers(hdrs, 413, "nginx's 413 for an approval POST");
	tl_resp_free(&r);
	free(hdrs);
	free(big);

	/* the decision itself, and the decided page */
	web("POST", path, APPROVER, form, NULL, &w);
	ck_assert_msg(w.r.status == 303, "decision: HTTP %ld: %.500s", w.r.status, w.r.body);
	tl_expect_approval_headers(w.hdrs, 303, "the decision's 303");
	pl_web_free(&w);
	web("GET", path, APPROVER, NULL, NULL, &w);
	ck_assert_msg(w.r.status == 410, "decided: HTTP %ld", w.r.status);
	tl_expect_approval_headers(w.hdrs, 410, "the decided page");
	pl_web_free(&w);
	free(form);
	free(csrf);
	free(path);

	/* The API: JSON (errors as problem documents), never cached — including
	 * nginx's own errors. */
	{
		static const struct {
			const char *method;
			const char *path;
			bool auth;
			long status;
		} api[] = {
			{ "GET", "/v1/runs/no-such-key", true, 404 },
			{ "GET", "/v1/runs/no-such-key", false, 401 },
			{ "PUT", "/v1/runs", true, 405 },
			{ "GET", "/v1/nothing-here", true, 404 },
			{ "GET", "/nothing-here", false, 404 },
			{ "GET", "/healthz", false, 200 },
		};
		size_t i;

		for (i = 0; i < sizeof(api) / sizeof(api[0]); i++) {
			char auth[256], *cc;
			const char *h[2] = { NULL, NULL };

			snprintf(auth, sizeof(auth), "Authorization: Bearer %s", g_key_dev);
			if (api[i].auth)
				h[0] = auth;
			tl_http_hdrs(api[i].method, api[i].path, h, NULL, NULL, 0, &r, &hdrs);
			ck_assert_msg(r.status == api[i].status, "%s %s: HTTP %ld, expected %ld",
			              api[i].method, api[i].path, r.status, api[i].status);
			ck_assert_msg(tl_contains_ci(r.content_type, api[i].status >= 400
			                                                 ? "application/problem+json"
			                                                 : "application/json"),
			              "%s %s: Content-Type %s", api[i].method, api[i].path, r.content_type);
			cc = tl_header_get(hdrs, "Cache-Control");
			if (strcmp(api[i].path, "/nothing-here") != 0)
				ck_assert_msg(tl_contains_ci(cc, "no-store"), "%s %s: Cache-Control %s",
				              api[i].method, api[i].path, cc ? cc : "(absent)");
			free(cc);
			tl_resp_free(&r);
			free(hdrs);
		}
		/* the answer that carries an approval link */
		{
			struct tl_claimed cl;
			char key[128], *op;
			json_t *b;

			tl_mkkey(key, sizeof(key), "headers-api");
			tl_claim_run(key, &cl);
			op = tl_run_path(key, "/output");
			b = output_body(&cl, NULL, NULL, NULL);
			{
				char *text = json_dumps(b, JSON_COMPACT), authh[256];
				const char *h[2] = { authh, NULL };

				snprintf(authh, sizeof(authh), "Authorization: Bearer %s", g_key_dev);
				tl_http_hdrs("POST", op, h, "application/json", text, strlen(text), &r,
				             &hdrs);
				free(text);
			}
			ck_assert_msg(r.status == 202, "output: HTTP %ld: %.500s", r.status, r.body);
			{
				char *v = tl_header_get(hdrs, "Cache-Control");

				ck_assert_msg(tl_contains_ci(v, "no-store"),
				              "the answer holding an approval link may be cached: "
				              "Cache-Control %s", v ? v : "(absent)");
				free(v);
			}
			tl_resp_free(&r);
			free(hdrs);
			json_decref(b);
			free(op);
		}
	}
}
END_TEST

/* ---- the suite ---------------------------------------------------------- */

TL_SUITE(security_suite, "security",
         {"injection", 60, .setup = tl_setup_healthy,
          .tests = TL_LIST(test_hostile_claim_roundtrip, test_hostile_transition_roundtrip,
                           test_wildcards_are_literal, test_hostile_bytes_refused,
                           test_query_and_headers_ignored, test_hostile_output_and_form,
                           test_ctl_hostile_arguments)},
         {"traversal", 60, .setup = tl_setup_healthy,
          .tests = TL_LIST(test_contract_name_traversal, test_url_path_traversal,
                           test_loaders_refuse_bad_names)},
         {"limits", 60, .setup = tl_setup_healthy,
          .tests = TL_LIST(test_oversized_headers, test_oversized_bodies, test_slow_loris)},
         /* test_token_never_leaks last: it reads every log and table whole,
          * and it exhausts nginx's approval POST limit for this address. */
         {"secrets", 60, .setup = tl_setup_healthy,
          .tests = TL_LIST(test_headers_on_every_answer, test_token_never_leaks)})

static bool
prepare(void)
{
	xmlInitParser();
	g_base = tl_env("ONCEGATE_URL");
	g_key_dev = tl_env("ONCEGATE_API_KEY");
	return true;
}

TL_STACK_MAIN(.name = "check_security", .prefix = "sc",
              .needed = "ONCEGATE_API_KEY ONCEGATE_CONF ONCEGATE_LOG ONCEGATE_CTL",
              .suite = security_suite, .prepare = prepare, .finish = xmlCleanupParser)

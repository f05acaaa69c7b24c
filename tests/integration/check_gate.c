/*
 * check_gate.c — integration suite of the approval gate (issue 3): model
 * outputs against contracts, approval links, the confirmation page and the
 * consume transaction into the outbox, through nginx against the real
 * responder and a real cluster, all started by `./dev test`. Without
 * ONCEGATE_URL the suite is skipped (exit 77).
 *
 * Every test asserts what a user would check — the page a person sees, the
 * rows in the database, the lines in the decision log — never a status
 * alone. Keys carry a per-run prefix ("gt<epoch>-<pid>"), so tests never
 * depend on each other and the suite can run again on the same database.
 *
 * The local nginx config stands in for SSO: the request headers
 * X-Dev-User / X-Dev-Groups become REMOTE_USER / AUTH_GROUPS.
 *
 * Approval tokens are secrets: messages show "/approve/[token]", never the
 * token itself.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
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
#include <libxml/HTMLparser.h>
#include <libxml/parser.h>
#include <libxml/tree.h>

#include "dispatchlib.h"
#include "pagelib.h"
#include "testlib.h"

/* What the test stack and the shipped contracts set. */
#define TOKEN_LEN          43        /* base64url of 32 bytes */
#define EXPIRES_S          86400     /* support_reply, crm_tag: gate.expires_seconds */
#define CALLBACK_ORIGIN    "http://127.0.0.1:5678"
#define RACERS             50

/* Test-only contracts (tests/data/contracts-test/): loaded only when the
 * test stack's contracts_dir holds them. */
#define WINDOW_CONTRACT    "support_window"
#define PAIR_CONTRACT      "support_pair"
#define WINDOW_S           600
#define SAMPLED_CONTRACT   "crm_tag_sampled"

/* Who is who. */
#define APPROVER           "sam@example.com"     /* in group support */
#define REQUESTER          "alice@example.com"   /* requested_by */
#define ROUTE_APPROVE      "/approve/{token}"

static char g_marker[96];       /* inside every model output; never logged */
static const char *g_key_dev;   /* API key of client "dev" */
static const char *g_base;      /* ONCEGATE_URL */

/* ---- small helpers ----------------------------------------------------- */

#define JSTR(o, n) (tl_jstr((o), (n)) ? tl_jstr((o), (n)) : "(none)")

static bool
is_token_shape(const char *s)
{
	size_t i;

	if (s == NULL || strlen(s) != TOKEN_LEN)
		return false;
	for (i = 0; i < TOKEN_LEN; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_')
			return false;
	return true;
}

/* ---- the API: claim and output ------------------------------------------ */

/* The standard support_reply output: valid. */
static json_t *
reply_output(void)
{
	return json_pack("{s:s, s:s, s:s, s:f}", "subject", "Re: order 42 arrives on Friday",
	                 "body", g_marker, "tone", "friendly", "confidence", 0.82);
}

static json_t *
email_effect(void)
{
	return json_pack("{s:s, s:s, s:{s:s, s:i, s:s}}", "type", "email.send", "target",
	                 "demo_smtp", "payload", "to", "customer@example.com", "ticket", 42,
	                 "in_reply_to", "<msg-42@example.com>");
}

/* ... and the payload that goes out, in canonical JSON: the contract adds
 * the drafted subject and body (g_marker: ASCII, nothing to escape). */
static char *
email_payload_canon(void)
{
	char *s = NULL;

	ck_assert_int_gt(asprintf(&s, "{\"body\":\"%s\",\"in_reply_to\":\"<msg-42@example.com>\","
	                          "\"subject\":\"Re: order 42 arrives on Friday\",\"ticket\":42,"
	                          "\"to\":\"customer@example.com\"}", g_marker), 0);
	return s;
}

static json_t *
tag_output(const char *tag, double confidence)
{
	return json_pack("{s:s, s:f, s:s}", "tag", tag, "confidence", confidence, "reason",
	                 "asked for a quote twice this week");
}

/* ... and the payload that goes out: the tag comes from the output. */
#define TAG_PAYLOAD_CANON "{\"contact_id\":\"c-42\",\"tag\":\"lead\"}"

/* What one output submission carries; NULL members take the defaults
 * (support_reply, reply_output, email_effect, std_model, a source URL).
 * json members are stolen. */
struct submission {
	const char *contract;
	json_t *output;
	json_t *effect;
	json_t *model;
	const char *source_url;
	const char *requested_by;
	const char *callback_url;
	bool no_source;
	bool no_requester;
};

static void
post_output(const char *key, const char *owner, long long version, struct submission *s,
            struct tl_resp *r)
{
	char *path = tl_run_path(key, "/output");
	json_t *body = json_pack("{s:s, s:I, s:s, s:o, s:o, s:o}", "lease_owner", owner,
	                         "version", (json_int_t)version, "contract",
	                         s->contract ? s->contract : "support_reply", "output",
	                         s->output ? s->output : reply_output(), "effect",
	                         s->effect ? s->effect : email_effect(), "model",
	                         s->model ? s->model : tl_model_json());

	ck_assert_ptr_nonnull(body);
	if (!s->no_source)
		json_object_set_new(body, "source_url",
		                    json_string(s->source_url ? s->source_url
		                                              : "https://crm.example/ticket/42?view=full&tab=mail"));
	/* The shipped contracts separate duties, so an output names who asked
	 * (here the workflow, as the n8n examples do) unless a test says not. */
	if (!s->no_requester)
		json_object_set_new(body, "requested_by",
		                    json_string(s->requested_by ? s->requested_by
		                                                : "support-inbox@workflows.example"));
	if (s->callback_url != NULL)
		json_object_set_new(body, "callback_url", json_string(s->callback_url));
	s->output = s->effect = s->model = NULL;
	tl_post_json(path, g_key_dev, body, r);
	json_decref(body);
	free(path);
}

/* POST /v1/runs/{key}/cancel {"reason"} as the dev client. */
static void
cancel_run(const char *key, const char *reason, struct tl_resp *r)
{
	char *path = tl_run_path(key, "/cancel");
	json_t *body = json_pack("{s:s}", "reason", reason);

	tl_post_json(path, g_key_dev, body, r);
	json_decref(body);
	free(path);
}

/* A run waiting for a person, with its one approval (one approver). */
struct gated {
	char key[200];
	char owner[64];
	char token[64];
	char url[600];
	char approval_id[64];
	char approver[128];
	char expires_at[64];
	long long version;
};

static void
expect_awaiting(const struct tl_resp *r, const char *approver, struct gated *g)
{
	json_t *list, *a;
	const char *url, *exp, *id;
	char prefix[512];
	double t;
	const char *outcome = tl_jstr(r->json, "outcome");

	ck_assert_msg(r->status == 202 && outcome != NULL && strcmp(outcome, "awaiting_human") == 0,
	              "%s: expected 202 awaiting_human, got HTTP %ld: %.2000s", r->what, r->status,
	              r->body);
	list = json_object_get(r->json, "approvals");
	ck_assert_msg(json_is_array(list) && json_array_size(list) == 1,
	              "one approver, so one approval: %s", r->body);
	a = json_array_get(list, 0);
	id = tl_jstr(a, "approval_id");
	url = tl_jstr(a, "url");
	exp = tl_jstr(a, "expires_at");
	ck_assert_msg(id != NULL && strlen(id) == 36, "approval_id: %s", r->body);
	ck_assert_msg(tl_jstr(a, "approver") && strcmp(tl_jstr(a, "approver"), approver) == 0,
	              "approver is not %s: %s", approver, r->body);
	ck_assert_msg(tl_ts_parse(exp, &t) && fabs(t - (tl_now() + EXPIRES_S)) < 120,
	              "expires_at is not about now + %d s: %s", EXPIRES_S, exp ? exp : "(none)");
	ck_assert_msg(tl_jint(r->json, "version", &g->version), "no version: %s", r->body);
	snprintf(prefix, sizeof(prefix), "%s/approve/", g_base);
	ck_assert_msg(url != NULL && strncmp(url, prefix, strlen(prefix)) == 0 &&
	              is_token_shape(url + strlen(prefix)),
	              "url is not %s + a %d-character base64url token", prefix, TOKEN_LEN);
	snprintf(g->token, sizeof(g->token), "%s", url + strlen(prefix));
	snprintf(g->url, sizeof(g->url), "%s", url);
	snprintf(g->approval_id, sizeof(g->approval_id), "%s", id);
	snprintf(g->approver, sizeof(g->approver), "%s", approver);
	snprintf(g->expires_at, sizeof(g->expires_at), "%s", exp);
}

/* claim + a valid support_reply output (or s) → awaiting_human. */
static void
make_gated(const char *test, struct submission *s, struct gated *g)
{
	struct submission def = { 0 };
	struct tl_claimed c;
	struct tl_resp r;

	memset(g, 0, sizeof(*g));
	tl_mkkey(g->key, sizeof(g->key), test);
	tl_claim_run(g->key, &c);
	snprintf(g->owner, sizeof(g->owner), "%s", c.owner);
	post_output(g->key, c.owner, c.version, s ? s : &def, &r);
	expect_awaiting(&r, s && s->contract && strncmp(s->contract, "crm_tag", 7) == 0
	                        ? "group:sales" : "group:support", g);
	ck_assert_msg(g->version > c.version, "the output must bump the version: %s", r.body);
	tl_resp_free(&r);
}

/* ---- the database -------------------------------------------------------- */

static long long
outbox_rows(PGconn *c, const char *key)
{
	return qnum(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1", key, (char *)NULL);
}

/* ---- the pages ------------------------------------------------------------ */

enum origin {
	O_BROWSER,      /* Origin: ours and Sec-Fetch-Site: same-origin */
	O_ORIGIN_ONLY,  /* Origin: ours */
	O_FETCH_ONLY,   /* Sec-Fetch-Site: same-origin */
	O_NONE,         /* neither */
	O_EVIL,         /* Origin: http://evil.example */
	O_CROSS_SITE,   /* Origin: ours, but Sec-Fetch-Site: cross-site */
	O_SAME_SITE,    /* Sec-Fetch-Site: same-site */
	O_NULL,         /* Origin: null */
	O_OTHER_PORT,   /* Origin: our host on another port */
};

/* One request to /approve/{token} as a browser behind the local SSO
 * stand-in would send it. user/groups NULL: header not sent. form NULL:
 * GET. A 429 of nginx's POST rate limit never reached the responder, so it
 * is waited out and the request sent again. */
static void
web_request(const char *token, const char *user, const char *groups, enum origin om,
            const char *form, struct pl_web *w)
{
	const char *h[8];
	struct dl_sso sso;
	char ho[256], path[256];
	int n = dl_sso_headers(&sso, user, groups, h);

	memset(w, 0, sizeof(*w));
	snprintf(path, sizeof(path), "/approve/%s", token);
	ho[0] = '\0';
	if (form != NULL) {
		switch (om) {
		case O_BROWSER:
			snprintf(ho, sizeof(ho), "Origin: %s", g_base);
			h[n++] = ho;
			h[n++] = "Sec-Fetch-Site: same-origin";
			break;
		case O_ORIGIN_ONLY:
			snprintf(ho, sizeof(ho), "Origin: %s", g_base);
			h[n++] = ho;
			break;
		case O_FETCH_ONLY:
			h[n++] = "Sec-Fetch-Site: same-origin";
			break;
		case O_NONE:
			break;
		case O_EVIL:
			h[n++] = "Origin: http://evil.example";
			break;
		case O_CROSS_SITE:
			snprintf(ho, sizeof(ho), "Origin: %s", g_base);
			h[n++] = ho;
			h[n++] = "Sec-Fetch-Site: cross-site";
			break;
		case O_SAME_SITE:
			h[n++] = "Sec-Fetch-Site: same-site";
			break;
		case O_NULL:
			h[n++] = "Origin: null";
			break;
		case O_OTHER_PORT:
			h[n++] = "Origin: http://127.0.0.1:1";
			break;
		}
	}
	h[n] = NULL;
	dl_page_send(path, h, form, &w->r, &w->hdrs);
	pl_web_parse(w);
}

static void
web_get(const char *token, const char *user, const char *groups, struct pl_web *w)
{
	web_request(token, user, groups, O_BROWSER, NULL, w);
}

static void
web_post(const char *token, const char *user, const char *groups, enum origin om,
         const char *form, struct pl_web *w)
{
	web_request(token, user, groups, om, form, w);
}

/* ---- looking into a page -------------------------------------------------- */

static bool
elem_is(xmlNodePtr n, const char *name)
{
	return n->type == XML_ELEMENT_NODE && n->name != NULL &&
	       strcasecmp((const char *)n->name, name) == 0;
}

/* The attribute's value (malloc'd) or NULL. */
static char *
attr_of(xmlNodePtr n, const char *name)
{
	xmlChar *v = xmlGetProp(n, (const xmlChar *)name);
	char *s = v != NULL ? strdup((const char *)v) : NULL;

	xmlFree(v);
	return s;
}

static bool
attr_is(xmlNodePtr n, const char *name, const char *value)
{
	char *v = attr_of(n, name);
	bool eq = v != NULL && strcmp(v, value) == 0;

	free(v);
	return eq;
}

typedef bool (*node_pred)(xmlNodePtr n, const void *arg);

static void
walk(xmlNodePtr n, node_pred pred, const void *arg, xmlNodePtr *first, size_t *count)
{
	for (; n != NULL; n = n->next) {
		if (n->type == XML_ELEMENT_NODE && pred(n, arg)) {
			if (*first == NULL)
				*first = n;
			(*count)++;
		}
		walk(n->children, pred, arg, first, count);
	}
}

static size_t
count_nodes(const struct pl_web *w, node_pred pred, const void *arg, xmlNodePtr *first)
{
	xmlNodePtr f = NULL;
	size_t n = 0;

	if (w->doc != NULL)
		walk(xmlDocGetRootElement(w->doc), pred, arg, &f, &n);
	if (first != NULL)
		*first = f;
	return n;
}

static bool
pred_elem(xmlNodePtr n, const void *name)
{
	return elem_is(n, name);
}

static size_t
count_elems(const struct pl_web *w, const char *name)
{
	return count_nodes(w, pred_elem, name, NULL);
}

/* form controls named `name` (input, button, textarea, select) */
static bool
pred_control(xmlNodePtr n, const void *name)
{
	return (elem_is(n, "input") || elem_is(n, "button") || elem_is(n, "textarea") ||
	        elem_is(n, "select")) && attr_is(n, "name", name);
}

struct control_value {
	const char *name;
	const char *value;
};

/* a submit control name=value (a decision button) */
static bool
pred_control_value(xmlNodePtr n, const void *arg)
{
	const struct control_value *cv = arg;

	return (elem_is(n, "button") || elem_is(n, "input")) && attr_is(n, "name", cv->name) &&
	       attr_is(n, "value", cv->value);
}

static bool
pred_on_attr(xmlNodePtr n, const void *unused)
{
	xmlAttrPtr a;

	(void)unused;
	for (a = n->properties; a != NULL; a = a->next)
		if (a->name != NULL && strncasecmp((const char *)a->name, "on", 2) == 0)
			return true;
	return false;
}

static bool
pred_href(xmlNodePtr n, const void *href)
{
	return elem_is(n, "a") && attr_is(n, "href", href);
}

/* The hidden csrf input's value (malloc'd); fails the test when absent. */
static char *
csrf_of(const struct pl_web *w)
{
	xmlNodePtr n;
	char *v, *type;

	ck_assert_msg(count_nodes(w, pred_control, "csrf", &n) == 1,
	              "%s: the page has no (or more than one) control named csrf: %.3000s",
	              w->r.what, w->r.body);
	type = attr_of(n, "type");
	ck_assert_msg(elem_is(n, "input") && type != NULL && strcasecmp(type, "hidden") == 0,
	              "%s: csrf is not a hidden input", w->r.what);
	free(type);
	v = attr_of(n, "value");
	ck_assert_msg(v != NULL && strlen(v) >= 16, "%s: csrf input has no value", w->r.what);
	return v;
}

/* The headers every approval page must carry. */
static void
expect_page_headers(const struct pl_web *w)
{
	ck_assert_msg(strncasecmp(w->r.content_type, "text/html", 9) == 0,
	              "%s: Content-Type is \"%s\", not text/html", w->r.what, w->r.content_type);
	tl_expect_approval_headers(w->hdrs, w->r.status, w->r.what);
}

/* A page of the responder: status, the headers, an HTML document, no
 * script of any kind, and (when given) a text it must show. */
static void
expect_page(const struct pl_web *w, long status, const char *text)
{
	ASSERT_STATUS(&w->r, status);
	expect_page_headers(w);
	ck_assert_msg(w->doc != NULL && w->text != NULL, "%s: the body is not an HTML page: %.2000s",
	              w->r.what, w->r.body);
	ck_assert_msg(count_elems(w, "script") == 0 && count_nodes(w, pred_on_attr, NULL, NULL) == 0,
	              "%s: the page carries script: %.3000s", w->r.what, w->r.body);
	if (text != NULL)
		ck_assert_msg(tl_contains_ci(w->text, text), "%s: the page does not say \"%s\": %.3000s",
		              w->r.what, text, w->text);
}

/* A page that decides nothing: no form, no CSRF value, no decision buttons. */
static void
expect_no_form(const struct pl_web *w)
{
	ck_assert_msg(count_elems(w, "form") == 0 && count_nodes(w, pred_control, "csrf", NULL) == 0 &&
	              count_nodes(w, pred_control, "decision", NULL) == 0,
	              "%s (HTTP %ld): this page must offer no decision, but has a form: %.3000s",
	              w->r.what, w->r.status, w->r.body);
}

/* Well-formed XML (the templates are XHTML filled as a DOM). */
static void
expect_well_formed(const struct pl_web *w)
{
	xmlDocPtr d = xmlReadMemory(w->r.body, (int)w->r.body_len, NULL, "UTF-8",
	                            XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);

	ck_assert_msg(d != NULL, "%s: the page is not well-formed XML: %.3000s", w->r.what,
	              w->r.body);
	xmlFreeDoc(d);
}

/* GET the card as user/groups; returns the CSRF value (malloc'd). */
static char *
card_csrf(const char *token, const char *user, const char *groups)
{
	struct pl_web w;
	char *csrf;

	web_get(token, user, groups, &w);
	expect_page(&w, 200, NULL);
	csrf = csrf_of(&w);
	pl_web_free(&w);
	return csrf;
}

static char *
decide_form(const char *decision, const char *csrf, const char *reason)
{
	char *f = reason != NULL
	              ? tl_form("decision", decision, "csrf", csrf, "reason", reason, (char *)NULL)
	              : tl_form("decision", decision, "csrf", csrf, (char *)NULL);

	ck_assert_ptr_nonnull(f);
	return f;
}

/* POST a decision the way the page's form does; expects the 303. */
static void
decide_ok(const char *token, const char *user, const char *groups, const char *decision,
          const char *csrf, const char *reason)
{
	char *form = decide_form(decision, csrf, reason), *loc;
	char want[128];
	struct pl_web w;

	web_post(token, user, groups, O_BROWSER, form, &w);
	ck_assert_msg(w.r.status == 303, "%s (%s as %s): HTTP %ld, expected 303; body: %.2000s",
	              w.r.what, decision, user, w.r.status, w.r.body);
	loc = tl_header_get(w.hdrs, "Location");
	snprintf(want, sizeof(want), "/approve/%s", token);
	ck_assert_msg(loc != NULL && strlen(loc) >= strlen(want) &&
	              strcmp(loc + strlen(loc) - strlen(want), want) == 0 &&
	              (loc[0] == '/' || strncmp(loc, g_base, strlen(g_base)) == 0),
	              "the 303 must point back at the approval page (post-redirect-get)");
	free(loc);
	pl_web_free(&w);
	free(form);
}

/* ---- the decision log ----------------------------------------------------- */

static bool
is_approve_line(const json_t *l, const void *unused)
{
	const char *p = tl_jstr(l, "path");

	(void)unused;
	return !json_is_object(l) || (p != NULL && strcmp(p, ROUTE_APPROVE) == 0);
}

static bool
is_approval_id(const json_t *l, const void *id)
{
	const char *a = tl_jstr(l, "approval_id");

	return a != NULL && strcmp(a, id) == 0;
}

static bool
in_alts(const char *s, const char *alts)
{
	char buf[256], *tok, *save = NULL;

	if (s == NULL)
		return false;
	snprintf(buf, sizeof(buf), "%s", alts);
	for (tok = strtok_r(buf, "|", &save); tok != NULL; tok = strtok_r(NULL, "|", &save))
		if (strcmp(tok, s) == 0)
			return true;
	return false;
}

/* The one line a refused (or answered) approval request wrote after off:
 * event one of events ("a|b"), reason one of reasons (NULL: any, but
 * present), level info or above, the status answered, and the approval
 * when known. */
static void
expect_page_log(long off, const char *events, const char *reasons, const char *approval_id,
                long status, const char *what)
{
	json_t *lines = tl_log_collect(off, is_approve_line, NULL, 1), *l;
	char *d = tl_json_text(lines);
	long long st = 0;

	ck_assert_msg(json_array_size(lines) == 1,
	              "%s: expected exactly one decision-log line (%s), got %zu: %.3000s", what,
	              events, json_array_size(lines), d);
	l = json_array_get(lines, 0);
	ck_assert_msg(in_alts(tl_jstr(l, "event"), events),
	              "%s: log event is %s, expected %s: %s", what, JSTR(l, "event"), events, d);
	ck_assert_msg(tl_jstr(l, "reason") != NULL && (reasons == NULL || in_alts(tl_jstr(l, "reason"), reasons)),
	              "%s: log reason is %s, expected %s: %s", what, JSTR(l, "reason"),
	              reasons ? reasons : "(any)", d);
	ck_assert_msg(!in_alts(tl_jstr(l, "level"), "debug"), "%s: logged at debug: %s", what, d);
	ck_assert_msg(tl_jstr(l, "program") && strcmp(tl_jstr(l, "program"), "oncegate-fcgi") == 0,
	              "%s: program: %s", what, d);
	ck_assert_msg(tl_jint(l, "status", &st) && st == status, "%s: log status is not %ld: %s",
	              what, status, d);
	if (approval_id != NULL)
		ck_assert_msg(is_approval_id(l, approval_id), "%s: log line lacks approval_id %s: %s",
		              what, approval_id, d);
	free(d);
	json_decref(lines);
}

/* A refused request to an approval page, for expect_refused. */
struct refused {
	const char *user;      /* NULL: APPROVER, in group support */
	const char *groups;    /* with user: X-Dev-Groups (NULL: none sent) */
	enum origin om;        /* of a POST */
	const char *form;      /* what is POSTed; NULL: a GET */
	const char *statuses;  /* the status answered is one of these ("410|409") */
	bool page;             /* what answers is a page (holding text unless NULL) */
	bool no_form;          /* ... that offers no form */
	const char *text;
	const char *events, *reasons, *approval_id; /* its log line: see expect_page_log */
	const char *what;
};

/* Sends the request x describes to the approval page of token and checks
 * the refusal; returns the status answered. */
static long
expect_refused(const char *token, const struct refused *x)
{
	struct pl_web w;
	char st[24];
	long off = tl_log_offset(), status;

	web_request(token, x->user ? x->user : APPROVER, x->user ? x->groups : "support",
	            x->form ? x->om : O_BROWSER, x->form, &w);
	status = w.r.status;
	snprintf(st, sizeof(st), "%ld", status);
	ck_assert_msg(in_alts(st, x->statuses), "%s: HTTP %ld, expected %s: %.1000s", x->what,
	              status, x->statuses, w.r.body);
	if (x->page)
		expect_page(&w, status, x->text);
	if (x->no_form)
		expect_no_form(&w);
	pl_web_free(&w);
	expect_page_log(off, x->events, x->reasons, x->approval_id, status, x->what);
	return status;
}

static json_t *
key_lines(long off, const char *key, size_t want)
{
	return tl_log_collect(off, tl_log_is_key, key, want);
}

static void
expect_field(const json_t *l, const char *name, const char *want)
{
	char *d = tl_json_text(l);

	ck_assert_msg(l != NULL, "no such log line");
	ck_assert_msg(tl_jstr(l, name) != NULL && strcmp(tl_jstr(l, name), want) == 0,
	              "log line field %s is %s, expected %s: %s", name, JSTR(l, name), want, d);
	free(d);
}

/* ---- per-test setup ------------------------------------------------------ */

/* ===== 1. approve-before-act, the whole path =============================== */

START_TEST(test_approve_before_act)
{
	struct submission s = { .requested_by = REQUESTER };
	struct gated g;
	struct pl_web w;
	PGconn *c = tl_pg_connect();
	char *before, *csrf, *v, *effect_id, *canon, hash[72], thash[65];
	json_t *lines, *l;
	long off = tl_log_offset();
	long long ver;
	int i;
	struct tl_resp r;

	make_gated("aba", &s, &g);

	/* The answer's token is stored as its SHA-256 only. */
	tl_sha256_hex(g.token, thash);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE id = $1::uuid "
	                        "AND token_hash = decode($2, 'hex')", g.approval_id, thash, (char *)NULL), 1);

	/* The run waits, with what was submitted; one pending approval; no effect. */
	ck_assert_int_eq(qnum(c,
	    "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	    " AND state = 'awaiting_human' AND contract = 'support_reply'"
	    " AND contract_hash IS NOT NULL AND output_hash IS NOT NULL"
	    " AND output->>'subject' = 'Re: order 42 arrives on Friday'"
	    " AND model->>'name' = 'qwen2.5-7b-instruct'"
	    " AND effect->>'type' = 'email.send' AND effect->>'target' = 'demo_smtp'"
	    " AND source_url = 'https://crm.example/ticket/42?view=full&tab=mail'"
	    " AND requested_by = 'alice@example.com' AND decision IS NULL", g.key, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c,
	    "SELECT count(*) FROM approvals WHERE idempotency_key = $1 AND id = $2::uuid"
	    " AND approver = 'group:support' AND state = 'pending'"
	    " AND allowed_decisions = ARRAY['approve','reject','changes_requested']"
	    " AND requested_by = 'alice@example.com' AND separation_of_duties"
	    " AND consumed_at IS NULL AND decision IS NULL AND approver_subject IS NULL"
	    " AND expires_at BETWEEN now() + interval '86000 s' AND now() + interval '86500 s'",
	    g.key, g.approval_id, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1", g.key, (char *)NULL), 1);
	ck_assert_int_eq(outbox_rows(c, g.key), 0);

	lines = key_lines(off, g.key, 2);
	l = tl_log_find_event(lines, "gate.awaiting_human");
	{
		char *d = tl_json_text(lines);

		ck_assert_msg(l != NULL, "no gate.awaiting_human line: %s", d);
		free(d);
	}
	expect_field(l, "contract", "support_reply");
	expect_field(l, "state_to", "awaiting_human");
	/* the model as the output named it: provider, name and revision */
	expect_field(json_object_get(l, "model"), "name", "qwen2.5-7b-instruct");
	expect_field(json_object_get(l, "model"), "revision", "2024-09-19");
	json_decref(lines);

	/* The card, as the approver sees it. */
	before = tl_run_snapshot(c, g.key);
	off = tl_log_offset();
	web_get(g.token, APPROVER, "support", &w);
	expect_page(&w, 200, NULL);
	expect_well_formed(&w);
	{
		static const char *const shown[] = {
			"Re: order 42 arrives on Friday", /* the output */
			"friendly", "0.82",
			"support_reply",                  /* the contract */
			"qwen2.5-7b-instruct", "2024-09-19", "openai-compatible",
			APPROVER,                         /* who will be logged */
			"email.send", "demo_smtp",        /* the effect */
			"customer@example.com", "msg-42@example.com",
			REQUESTER,
			"https://crm.example/ticket/42?view=full&tab=mail",
			"subject", "body", "tone", "confidence", /* the output's fields */
		};
		size_t k;

		ck_assert_msg(tl_contains_ci(w.text, g.key), "the card does not show the key %s: %.3000s",
		              g.key, w.text);
		ck_assert_msg(tl_contains_ci(w.text, g_marker), "the card does not show the draft body");
		for (k = 0; k < sizeof(shown) / sizeof(shown[0]); k++)
			ck_assert_msg(tl_contains_ci(w.text, shown[k]),
			              "the card does not show \"%s\": %.4000s", shown[k], w.text);
		ck_assert_msg(tl_contains_ci(w.text, g.expires_at),
		              "the card does not show the expiry %s: %.4000s", g.expires_at, w.text);
		ck_assert_msg(tl_contains_ci(w.text, "replay"),
		              "the card does not explain the re-run protocol (replay): %.4000s",
		              w.text);
	}
	ck_assert_msg(count_nodes(&w, pred_href, "https://crm.example/ticket/42?view=full&tab=mail", NULL) >= 1,
	              "the card has no link to the source record: %.3000s", w.r.body);
	{
		xmlNodePtr f;
		char *method;

		ck_assert_msg(count_nodes(&w, pred_elem, "form", &f) == 1, "the card has %zu forms",
		              count_elems(&w, "form"));
		method = attr_of(f, "method");
		ck_assert_msg(method != NULL && strcasecmp(method, "post") == 0,
		              "the form's method is %s, not post", method ? method : "(none)");
		free(method);
	}
	ck_assert_msg(count_nodes(&w, pred_control, "reason", NULL) == 1, "no reason field");
	/* support_reply allows a request for changes: its button and feedback */
	ck_assert_msg(count_nodes(&w, pred_control, "feedback", NULL) == 1, "no feedback field");
	{
		size_t nd = count_nodes(&w, pred_control, "decision", NULL);
		const struct control_value ap = { "decision", "approve" }, rj = { "decision", "reject" },
		                           ch = { "decision", "changes_requested" };
		bool approve = count_nodes(&w, pred_control_value, &ap, NULL) == 1;
		bool reject = count_nodes(&w, pred_control_value, &rj, NULL) == 1;
		bool changes = count_nodes(&w, pred_control_value, &ch, NULL) == 1;

		ck_assert_msg(nd == 3 && approve && reject && changes,
		              "the card must offer exactly the buttons approve, reject and "
		              "changes_requested: %.3000s",
		              w.r.body);
	}
	csrf = csrf_of(&w);
	pl_web_free(&w);

	/* 19 more views change nothing. */
	for (i = 1; i < 20; i++) {
		web_get(g.token, APPROVER, "support", &w);
		expect_page(&w, 200, g.key);
		pl_web_free(&w);
	}
	tl_expect_run_unchanged(c, g.key, before, "20 GETs of the approval page");
	ck_assert_int_eq(outbox_rows(c, g.key), 0);
	lines = tl_log_collect(off, is_approval_id, g.approval_id, 20);
	{
		char *d = tl_json_text(lines);

		ck_assert_msg(json_array_size(lines) == 20 &&
		              tl_log_count_event(lines, "approval.viewed") == 20,
		              "20 views: expected 20 approval.viewed lines: %.3000s", d);
		free(d);
	}
	expect_field(json_array_get(lines, 0), "actor", APPROVER);
	json_decref(lines);
	free(before);

	/* Approve. */
	off = tl_log_offset();
	decide_ok(g.token, APPROVER, "support", "approve", csrf, "Checked the order: ships Friday.");

	ck_assert_int_eq(qnum(c,
	    "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1 AND state = 'approved'"
	    " AND decision = 'approve' AND decided_by = $2 AND decided_at IS NOT NULL",
	    g.key, APPROVER, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c,
	    "SELECT count(*) FROM approvals WHERE id = $1::uuid AND state = 'decided'"
	    " AND consumed_at IS NOT NULL AND decision = 'approve' AND approver_subject = $2"
	    " AND reason = 'Checked the order: ships Friday.'", g.approval_id, APPROVER, (char *)NULL), 1);
	ck_assert_int_eq(outbox_rows(c, g.key), 1);
	canon = email_payload_canon();
	tl_payload_hash(canon, hash);
	{
		const char *p[4] = { g.key, g.approval_id, hash, canon };
		char pk[260];

		char *cid = qstr(c, "SELECT id::text FROM api_clients WHERE name = $1", "dev", (char *)NULL);
		char *want = tl_provider_key(cid, g.key, "email.send", "demo_smtp", 0);

		/* the provider key: this client's own, stored when enqueued */
		snprintf(pk, sizeof(pk), "%s", want);
		free(want);
		free(cid);
		ck_assert_int_eq(tl_pg_count(c,
		    "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
		    " AND effect_type = 'email.send' AND target = 'demo_smtp' AND state = 'pending'"
		    " AND approval_id = $2::uuid AND payload_hash = $3 AND payload = $4::jsonb"
		    " AND attempt = 0 AND not_before <= now() + interval '1 s'", 4, p), 1);
		ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
		                        " AND provider_key = $2", g.key, pk, (char *)NULL), 1);
	}
	free(canon);
	effect_id = qstr(c, "SELECT id::text FROM effect_outbox WHERE idempotency_key = $1", g.key, (char *)NULL);

	lines = tl_log_collect(off, is_approve_line, NULL, 1);
	l = tl_log_find_event(lines, "approval.consumed");
	{
		char *d = tl_json_text(lines);
		long long st;

		ck_assert_msg(l != NULL && tl_log_count_event(lines, "approval.consumed") == 1,
		              "expected one approval.consumed line: %s", d);
		ck_assert_msg(tl_jint(l, "status", &st) && st == 303, "approval.consumed status: %s", d);
		free(d);
	}
	expect_field(l, "decision", "approve");
	expect_field(l, "actor", APPROVER);
	expect_field(l, "approval_id", g.approval_id);
	expect_field(l, "effect_id", effect_id);
	expect_field(l, "key", g.key);
	expect_field(l, "state_from", "awaiting_human");
	expect_field(l, "state_to", "approved");
	json_decref(lines);

	/* The page now says who decided what, and offers nothing. */
	before = tl_run_snapshot(c, g.key);
	web_get(g.token, APPROVER, "support", &w);
	expect_page(&w, 410, APPROVER);
	ck_assert_msg(tl_contains_ci(w.text, "approve"), "the decided page does not say approve: %.3000s",
	              w.text);
	ck_assert_msg(tl_contains_ci(w.text, "Checked the order: ships Friday."),
	              "the decided page does not show the reason: %.3000s", w.text);
	v = qstr(c, "SELECT og_ts(consumed_at) FROM approvals WHERE id = $1::uuid", g.approval_id, (char *)NULL);
	ck_assert_msg(v != NULL && tl_contains_ci(w.text, v), "the decided page does not say when (%s): %.3000s",
	              v ? v : "?", w.text);
	free(v);
	expect_no_form(&w);
	pl_web_free(&w);
	/* Anyone else looking at it changes nothing either. */
	web_get(g.token, "bob@example.com", "support", &w);
	expect_page(&w, 410, APPROVER);
	expect_no_form(&w);
	pl_web_free(&w);
	tl_expect_run_unchanged(c, g.key, before, "GETs of the decided page");
	free(before);

	/* A late claim of the key is a duplicate of the approved run. */
	{
		json_t *body = json_pack("{s:s, s:{s:i, s:s}}", "key", g.key, "payload", "ticket", 42,
		                         "m", tl_run);

		tl_post_json("/v1/runs", g_key_dev, body, &r);
		json_decref(body);
	}
	ASSERT_STATUS(&r, 200);
	ck_assert_msg(tl_jstr(r.json, "state") && strcmp(tl_jstr(r.json, "state"), "approved") == 0,
	              "late claim: %s", r.body);
	ck_assert_msg(tl_jint(r.json, "version", &ver) && ver == g.version + 1,
	              "the decision bumps the version once: %s", r.body);
	tl_resp_free(&r);

	free(effect_id);
	free(csrf);
	PQfinish(c);
}
END_TEST

/* ===== 2. fifty concurrent decisions of one token ========================== */

/* text with every run of white space made one space, for a message */
static void
squeeze(char *dst, size_t n, const char *text)
{
	size_t o = 0;
	bool space = true;

	for (; *text != '\0' && o + 1 < n; text++) {
		if (isspace((unsigned char)*text)) {
			if (!space)
				dst[o++] = ' ';
			space = true;
		} else {
			dst[o++] = *text;
			space = false;
		}
	}
	dst[o] = '\0';
}

struct racer {
	const char *token;
	const char *form;
	struct pl_web w;
};

static void
racer_main(void *arg)
{
	struct racer *rc = arg;
	const char *h[5];
	char ho[256], path[128];

	snprintf(ho, sizeof(ho), "Origin: %s", g_base);
	snprintf(path, sizeof(path), "/approve/%s", rc->token);
	h[0] = "X-Dev-User: " APPROVER;
	h[1] = "X-Dev-Groups: support";
	h[2] = ho;
	h[3] = "Sec-Fetch-Site: same-origin";
	h[4] = NULL;
	tl_http_hdrs("POST", path, h, "application/x-www-form-urlencoded", rc->form,
	             strlen(rc->form), &rc->w.r, &rc->w.hdrs);
}

START_TEST(test_concurrent_decisions)
{
	static struct racer racers[RACERS];
	struct gated g;
	PGconn *c = tl_pg_connect();
	char *csrf, *form;
	int i, n303 = 0, n409 = 0, n410 = 0, n410other = 0, nother = 0;
	char other_text[512] = "";
	long off;
	json_t *lines;

	make_gated("race", NULL, &g);
	csrf = card_csrf(g.token, APPROVER, "support");
	form = decide_form("approve", csrf, "race");
	/* Let nginx's per-address POST limit (burst 100) refill first. */
	tl_sleep_ms(2500);
	off = tl_log_offset();
	for (i = 0; i < RACERS; i++) {
		memset(&racers[i], 0, sizeof(racers[i]));
		racers[i].token = g.token;
		racers[i].form = form;
	}
	tl_race(racer_main, racers, sizeof(racers[0]), RACERS);

	for (i = 0; i < RACERS; i++) {
		struct pl_web *w = &racers[i].w;

		pl_web_parse(w);
		if (w->r.status == 303) {
			n303++;
		} else if (w->r.status == 409) {
			/* lost the race inside the transaction */
			expect_page(w, 409, "already decided");
			expect_no_form(w);
			n409++;
		} else if (w->r.status == 410 && tl_contains_ci(w->text, APPROVER)) {
			/* arrived after the winner committed: the decided page */
			expect_page(w, 410, "decided");
			expect_no_form(w);
			n410++;
		} else if (w->r.status == 410) {
			/* some other notice: what it says is reported below */
			expect_page(w, 410, NULL);
			expect_no_form(w);
			n410other++;
			if (other_text[0] == '\0' && w->text != NULL)
				squeeze(other_text, sizeof(other_text), w->text);
		} else {
			nother++;
			fprintf(stderr, "race: POST %d → HTTP %ld %s %.300s\n", i, w->r.status,
			        w->r.error, w->r.body);
		}
		pl_web_free(w);
	}
	fprintf(stderr, "race: %d × 303, %d × 409 (already decided), %d × 410 (decided page), "
	        "%d × 410 (another notice), %d other\n", n303, n409, n410, n410other, nother);
	ck_assert_msg(n303 == 1 && nother == 0,
	              "%d concurrent approvals of one token: %d × 303, %d × 409, %d × 410, %d other "
	              "(expected exactly one 303 and the rest told it was already decided)",
	              RACERS, n303, n409, n410 + n410other, nother);
	/* A POST that read the approval while it was pending and the run after
	 * the winner's commit must still hear "already decided", not a notice
	 * that the run is "no longer waiting" (two reads, two snapshots). */
	ck_assert_msg(n410other == 0,
	              "%d of %d losing POSTs got a 410 notice other than the decided page, e.g.: "
	              "%.400s", n410other, RACERS - 1, other_text);

	ck_assert_int_eq(outbox_rows(c, g.key), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1"
	                        " AND state = 'decided' AND approver_subject = 'sam@example.com'", g.key, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	                        " AND state = 'approved' AND decided_by = 'sam@example.com'", g.key, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM run_events WHERE idempotency_key = $1"
	                        " AND event = 'run.decided'", g.key, (char *)NULL), 1);
	lines = tl_log_collect(off, is_approve_line, NULL, 1);
	{
		char *d = tl_json_text(lines);

		ck_assert_msg(tl_log_count_event(lines, "approval.consumed") == 1,
		              "expected one approval.consumed line among: %.3000s", d);
		free(d);
	}
	json_decref(lines);
	free(form);
	free(csrf);
	PQfinish(c);
}
END_TEST

/* ===== 3. refusals, each leaving every row as it was ====================== */

/* A gated run whose approval page a person of group support holds the
 * approve form of, for the tests of refusals: its connection, the form, and
 * (held_snapshot) the run as it was before the refused requests. */
struct held {
	struct gated g;
	PGconn *c;
	char *csrf, *form, *before;
};

static void
held_begin(const char *test, struct held *h)
{
	h->c = tl_pg_connect();
	make_gated(test, NULL, &h->g);
	h->csrf = card_csrf(h->g.token, APPROVER, "support");
	h->form = decide_form("approve", h->csrf, NULL);
	h->before = NULL;
}

static void
held_snapshot(struct held *h)
{
	h->before = tl_run_snapshot(h->c, h->g.key);
}

/* The run unchanged by what since held_snapshot, with outbox effect rows
 * (-1: not counted); frees h. */
static void
held_end(struct held *h, const char *what, long long outbox)
{
	tl_expect_run_unchanged(h->c, h->g.key, h->before, what);
	if (outbox >= 0)
		ck_assert_int_eq(outbox_rows(h->c, h->g.key), outbox);
	free(h->before);
	free(h->form);
	free(h->csrf);
	PQfinish(h->c);
}

START_TEST(test_refuse_no_subject)
{
	struct gated g;
	struct pl_web w;
	PGconn *c = tl_pg_connect();
	char *before, *csrf, *form;
	long off;

	make_gated("nosubject", NULL, &g);
	csrf = card_csrf(g.token, APPROVER, "support");
	form = decide_form("approve", csrf, NULL);
	before = tl_run_snapshot(c, g.key);

	off = tl_log_offset();
	web_get(g.token, NULL, NULL, &w);
	expect_page(&w, 401, NULL);
	expect_no_form(&w);
	ck_assert_msg(!tl_contains_ci(w.text, g.key), "the 401 page shows the run to nobody");
	pl_web_free(&w);
	expect_page_log(off, "auth.failed", NULL, NULL, 401, "GET without subject");

	off = tl_log_offset();
	web_get(g.token, NULL, "support", &w);
	expect_page(&w, 401, NULL);
	pl_web_free(&w);
	expect_page_log(off, "auth.failed", NULL, NULL, 401, "GET with groups but no subject");

	off = tl_log_offset();
	web_get(g.token, "", "support", &w);
	expect_page(&w, 401, NULL);
	pl_web_free(&w);
	expect_page_log(off, "auth.failed", NULL, NULL, 401, "GET with an empty subject");

	off = tl_log_offset();
	web_post(g.token, NULL, "support", O_BROWSER, form, &w);
	expect_page(&w, 401, NULL);
	pl_web_free(&w);
	expect_page_log(off, "auth.failed", NULL, NULL, 401, "POST without subject");

	tl_expect_run_unchanged(c, g.key, before, "requests without an SSO subject");
	/* The same form with the subject goes through: the refusal was the subject's. */
	decide_ok(g.token, APPROVER, "support", "approve", csrf, NULL);
	free(before);
	free(form);
	free(csrf);
	PQfinish(c);
}
END_TEST

START_TEST(test_refuse_unknown_token)
{
	struct gated g;
	struct pl_web w;
	PGconn *c = tl_pg_connect();
	char tok[64], *before, *csrf, *form, *global_before, *global_after;
	struct tl_resp r;
	long off;
	const char *global =
	    "SELECT (SELECT count(*) FROM approvals WHERE state <> 'pending')::text || '/' ||"
	    " (SELECT count(*) FROM effect_outbox)::text";

	make_gated("unknown", NULL, &g);
	csrf = card_csrf(g.token, APPROVER, "support");
	form = decide_form("approve", csrf, NULL);
	before = tl_run_snapshot(c, g.key);
	global_before = tl_pg_value(c, global, 0, NULL);
	tl_random_token(tok);

	off = tl_log_offset();
	web_get(tok, APPROVER, "support", &w);
	expect_page(&w, 404, NULL);
	expect_no_form(&w);
	pl_web_free(&w);
	expect_page_log(off, "approval.unknown", NULL, NULL, 404, "GET of an unknown token");

	off = tl_log_offset();
	web_post(tok, APPROVER, "support", O_BROWSER, form, &w);
	expect_page(&w, 404, NULL);
	expect_no_form(&w);
	pl_web_free(&w);
	expect_page_log(off, "approval.unknown|approval.refused", NULL, NULL, 404,
	                "POST to an unknown token");

	/* A real token with one character changed. */
	snprintf(tok, sizeof(tok), "%s", g.token);
	tok[5] = tok[5] == 'A' ? 'B' : 'A';
	web_get(tok, APPROVER, "support", &w);
	expect_page(&w, 404, NULL);
	pl_web_free(&w);
	/* Too short to be a token: the responder's 404 page. */
	web_get("abc", APPROVER, "support", &w);
	expect_page(&w, 404, NULL);
	pl_web_free(&w);
	/* Not a token's alphabet: nginx refuses before the responder. */
	tl_http_hdrs("GET", "/approve/abc.def", NULL, NULL, NULL, 0, &r, NULL);
	ASSERT_STATUS(&r, 404);
	tl_resp_free(&r);
	{
		char path[128];

		snprintf(path, sizeof(path), "/approve/%s/extra", g.token);
		tl_http_hdrs("GET", path, NULL, NULL, NULL, 0, &r, NULL);
		ASSERT_STATUS(&r, 404);
		tl_resp_free(&r);
	}

	tl_expect_run_unchanged(c, g.key, before, "requests with unknown tokens");
	global_after = tl_pg_value(c, global, 0, NULL);
	ck_assert_msg(strcmp(global_before, global_after) == 0,
	              "unknown tokens changed approvals/outbox: %s → %s", global_before, global_after);
	free(global_before);
	free(global_after);
	free(before);
	free(form);
	free(csrf);
	PQfinish(c);
}
END_TEST

START_TEST(test_refuse_expired)
{
	struct held h;
	const char *p[1];

	held_begin("expired", &h);
	/* Time passes: the approval's expiry is now behind us. */
	p[0] = h.g.approval_id;
	ck_assert_int_eq(tl_pg_exec(h.c, "UPDATE approvals SET expires_at = now() - interval '1 second'"
	                            " WHERE id = $1::uuid", 1, p), 1);
	held_snapshot(&h);

	expect_refused(h.g.token, &(struct refused){
		.statuses = "410", .page = true, .no_form = true, .text = "expired",
		.events = "approval.expired|approval.refused", .reasons = "expired",
		.approval_id = h.g.approval_id, .what = "GET of an expired token" });
	expect_refused(h.g.token, &(struct refused){
		.form = h.form, .statuses = "410|409|403", .page = true, .no_form = true,
		.text = "expired", .events = "approval.expired|approval.refused",
		.reasons = "expired", .approval_id = h.g.approval_id,
		.what = "POST to an expired token" });
	held_end(&h, "GET and POST of an expired token", 0);
}
END_TEST

START_TEST(test_refuse_used)
{
	struct held h;
	char *form;

	held_begin("used", &h);
	decide_ok(h.g.token, APPROVER, "support", "approve", h.csrf, NULL);
	held_snapshot(&h);

	/* The same form again, then a change of mind: both refused. */
	expect_refused(h.g.token, &(struct refused){
		.form = h.form, .statuses = "409|410", .page = true, .no_form = true,
		.text = "decided", .events = "approval.refused|approval.gone",
		.approval_id = h.g.approval_id,
		.what = "POST to a used token (issue 3: approval.refused, why: used)" });
	form = decide_form("reject", h.csrf, "changed my mind");
	expect_refused(h.g.token, &(struct refused){
		.form = form, .statuses = "409|410", .no_form = true,
		.events = "approval.refused|approval.gone", .approval_id = h.g.approval_id,
		.what = "reject POST to a used token" });
	free(form);
	held_end(&h, "POSTs to a used token", 1);
}
END_TEST

START_TEST(test_refuse_missing_csrf)
{
	struct gated g;
	PGconn *c = tl_pg_connect();
	char *before, *csrf, *form;

	make_gated("nocsrf", NULL, &g);
	csrf = card_csrf(g.token, APPROVER, "support");
	before = tl_run_snapshot(c, g.key);

	form = tl_form("decision", "approve", "reason", "no csrf", (char *)NULL);
	expect_refused(g.token, &(struct refused){
		.form = form, .statuses = "400", .page = true, .no_form = true,
		.events = "approval.refused", .reasons = "missing_field|csrf",
		.approval_id = g.approval_id, .what = "POST without csrf" });
	free(form);

	form = tl_form("decision", "approve", "csrf", "", (char *)NULL);
	expect_refused(g.token, &(struct refused){
		.form = form, .statuses = "400|403", .page = true, .events = "approval.refused",
		.reasons = "missing_field|csrf", .approval_id = g.approval_id,
		.what = "POST with an empty csrf" });
	free(form);

	/* No decision at all. */
	form = tl_form("csrf", csrf, (char *)NULL);
	expect_refused(g.token, &(struct refused){
		.form = form, .statuses = "400", .page = true, .events = "approval.refused",
		.reasons = "missing_field|wrong_decision", .approval_id = g.approval_id,
		.what = "POST without decision" });
	free(form);

	/* Not a form at all. */
	{
		const char *h[5];
		char ho[256], path[128];
		struct tl_resp r;

		snprintf(ho, sizeof(ho), "Origin: %s", g_base);
		snprintf(path, sizeof(path), "/approve/%s", g.token);
		h[0] = "X-Dev-User: " APPROVER;
		h[1] = "X-Dev-Groups: support";
		h[2] = ho;
		h[3] = "Sec-Fetch-Site: same-origin";
		h[4] = NULL;
		tl_http_hdrs("POST", path, h, "application/json", "{\"decision\":\"approve\"}", 23,
		             &r, NULL);
		ck_assert_msg(r.status >= 400 && r.status < 500, "a JSON POST: HTTP %ld", r.status);
		tl_resp_free(&r);
	}

	tl_expect_run_unchanged(c, g.key, before, "POSTs without a CSRF value");
	decide_ok(g.token, APPROVER, "support", "approve", csrf, NULL);
	free(before);
	free(csrf);
	PQfinish(c);
}
END_TEST

START_TEST(test_refuse_csrf_of_other_approval)
{
	struct gated a, b;
	PGconn *c = tl_pg_connect();
	char *before_a, *before_b, *csrf_a, *csrf_b, *form;

	make_gated("csrf-a", NULL, &a);
	make_gated("csrf-b", NULL, &b);
	csrf_a = card_csrf(a.token, APPROVER, "support");
	csrf_b = card_csrf(b.token, APPROVER, "support");
	ck_assert_msg(strcmp(csrf_a, csrf_b) != 0, "two approvals got the same CSRF value");
	before_a = tl_run_snapshot(c, a.key);
	before_b = tl_run_snapshot(c, b.key);

	form = decide_form("approve", csrf_b, NULL);
	expect_refused(a.token, &(struct refused){
		.form = form, .statuses = "403", .page = true, .no_form = true,
		.events = "approval.refused", .reasons = "csrf", .approval_id = a.approval_id,
		.what = "POST with the CSRF of another approval" });
	free(form);

	/* A tampered value. */
	csrf_a[strlen(csrf_a) / 2] = csrf_a[strlen(csrf_a) / 2] == 'x' ? 'y' : 'x';
	form = decide_form("approve", csrf_a, NULL);
	expect_refused(a.token, &(struct refused){
		.form = form, .statuses = "403", .page = true, .events = "approval.refused",
		.reasons = "csrf", .approval_id = a.approval_id,
		.what = "POST with a tampered CSRF" });
	free(form);

	tl_expect_run_unchanged(c, a.key, before_a, "POSTs with a foreign CSRF");
	tl_expect_run_unchanged(c, b.key, before_b, "a POST to another approval with this one's CSRF");
	free(before_a);
	free(before_b);
	free(csrf_a);
	free(csrf_b);
	PQfinish(c);
}
END_TEST

START_TEST(test_refuse_csrf_of_other_subject)
{
	struct gated g;
	PGconn *c = tl_pg_connect();
	char *before, *csrf_bob, *csrf_carol, *form;

	make_gated("csrf-subject", NULL, &g);
	csrf_bob = card_csrf(g.token, "bob@example.com", "support");
	csrf_carol = card_csrf(g.token, "carol@example.com", "support");
	ck_assert_msg(strcmp(csrf_bob, csrf_carol) != 0, "two subjects got the same CSRF value");
	before = tl_run_snapshot(c, g.key);

	form = decide_form("approve", csrf_bob, NULL);
	expect_refused(g.token, &(struct refused){
		.user = "carol@example.com", .groups = "support", .form = form, .statuses = "403",
		.page = true, .no_form = true, .events = "approval.refused", .reasons = "csrf",
		.approval_id = g.approval_id, .what = "carol POSTs bob's CSRF" });
	tl_expect_run_unchanged(c, g.key, before, "a POST with another subject's CSRF");
	free(form);

	/* carol with her own value: fine. */
	decide_ok(g.token, "carol@example.com", "support", "approve", csrf_carol, NULL);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1"
	                        " AND approver_subject = 'carol@example.com'", g.key, (char *)NULL), 1);
	free(before);
	free(csrf_bob);
	free(csrf_carol);
	PQfinish(c);
}
END_TEST

START_TEST(test_refuse_cross_origin)
{
	static const struct {
		enum origin om;
		const char *what;
	} cases[] = {
		{ O_EVIL, "Origin: http://evil.example" },
		{ O_CROSS_SITE, "Sec-Fetch-Site: cross-site (with our Origin)" },
		{ O_SAME_SITE, "Sec-Fetch-Site: same-site" },
		{ O_NULL, "Origin: null" },
		{ O_OTHER_PORT, "Origin: our host, another port" },
		{ O_NONE, "neither Origin nor Sec-Fetch-Site" },
	};
	struct gated g;
	struct pl_web w;
	PGconn *c = tl_pg_connect();
	char *before, *csrf, *form;
	size_t i;

	make_gated("crossorigin", NULL, &g);
	csrf = card_csrf(g.token, APPROVER, "support");
	form = decide_form("approve", csrf, NULL);
	before = tl_run_snapshot(c, g.key);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char what[128];

		snprintf(what, sizeof(what), "cross-origin POST (%s)", cases[i].what);
		expect_refused(g.token, &(struct refused){
			.om = cases[i].om, .form = form, .statuses = "403", .page = true,
			.no_form = true, .events = "approval.refused", .reasons = "cross_origin",
			.what = what });
	}
	tl_expect_run_unchanged(c, g.key, before, "cross-origin POSTs");

	/* Either signal alone, when it says same-origin, is enough. */
	{
		struct gated g2;
		char *csrf2;

		decide_ok(g.token, APPROVER, "support", "approve", csrf, NULL); /* both headers */
		make_gated("crossorigin-2", NULL, &g2);
		csrf2 = card_csrf(g2.token, APPROVER, "support");
		free(form);
		form = decide_form("approve", csrf2, NULL);
		web_post(g2.token, APPROVER, "support", O_ORIGIN_ONLY, form, &w);
		ck_assert_msg(w.r.status == 303, "POST with only a same Origin header: HTTP %ld: %.1000s",
		              w.r.status, w.r.body);
		pl_web_free(&w);
		free(csrf2);
		make_gated("crossorigin-3", NULL, &g2);
		csrf2 = card_csrf(g2.token, APPROVER, "support");
		free(form);
		form = decide_form("approve", csrf2, NULL);
		web_post(g2.token, APPROVER, "support", O_FETCH_ONLY, form, &w);
		ck_assert_msg(w.r.status == 303,
		              "POST with only Sec-Fetch-Site: same-origin: HTTP %ld: %.1000s",
		              w.r.status, w.r.body);
		pl_web_free(&w);
		free(csrf2);
	}
	free(before);
	free(form);
	free(csrf);
	PQfinish(c);
}
END_TEST

START_TEST(test_refuse_decision_not_allowed)
{
	static const char *const bad[] = { "delete", "Approve", "approve ", "auto" };
	struct gated g;
	PGconn *c = tl_pg_connect();
	char *before, *csrf, *form;
	const char *p[1];
	size_t i;

	make_gated("decision", NULL, &g);
	csrf = card_csrf(g.token, APPROVER, "support");
	before = tl_run_snapshot(c, g.key);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char what[96];

		snprintf(what, sizeof(what), "decision \"%s\"", bad[i]);
		form = decide_form(bad[i], csrf, NULL);
		expect_refused(g.token, &(struct refused){
			.form = form, .statuses = "400", .page = true, .no_form = true,
			.events = "approval.refused", .reasons = "wrong_decision",
			.approval_id = g.approval_id, .what = what });
		free(form);
	}
	tl_expect_run_unchanged(c, g.key, before, "decisions that do not exist");
	free(before);

	/* The approval row itself allows only approve now: reject is refused. */
	p[0] = g.approval_id;
	ck_assert_int_eq(tl_pg_exec(c, "UPDATE approvals SET allowed_decisions = ARRAY['approve']"
	                            " WHERE id = $1::uuid", 1, p), 1);
	before = tl_run_snapshot(c, g.key);
	form = decide_form("reject", csrf, "not allowed here");
	expect_refused(g.token, &(struct refused){
		.form = form, .statuses = "400", .page = true, .events = "approval.refused",
		.reasons = "wrong_decision", .approval_id = g.approval_id,
		.what = "reject where the approval allows only approve" });
	tl_expect_run_unchanged(c, g.key, before, "a decision the approval does not allow");
	free(form);
	decide_ok(g.token, APPROVER, "support", "approve", csrf, NULL);
	free(before);
	free(csrf);
	PQfinish(c);
}
END_TEST

START_TEST(test_refuse_not_an_approver)
{
	static const char *const groups[] = { "sales", "supporters", "support-leads,sales",
		                              "group:support", "Support" };
	struct gated g;
	struct pl_web w;
	PGconn *c = tl_pg_connect();
	char *before, *csrf, *form;
	size_t i;

	make_gated("approver", NULL, &g);
	/* Outside group support dave is told the link is not his, and sees
	 * nothing of the request; the form token he would hold had he seen a
	 * form is refused all the same. */
	web_get(g.token, "dave@example.com", "sales", &w);
	expect_page(&w, 403, "You are not among the approvers");
	expect_no_form(&w);
	ck_assert_msg(strstr(w.text, "Not your approval") != NULL &&
	              strstr(w.text, "signed in as dave@example.com") != NULL,
	              "the page does not say whose it is not: %.2000s", w.text);
	ck_assert_msg(strstr(w.r.body, "customer@example.com") == NULL &&
	              strstr(w.r.body, "demo_smtp") == NULL && strstr(w.r.body, "Re: ") == NULL,
	              "the page shows the request to someone who may not decide it: %.3000s",
	              w.r.body);
	pl_web_free(&w);
	csrf = tl_csrf_for(g.approval_id, "dave@example.com");
	form = decide_form("approve", csrf, NULL);
	before = tl_run_snapshot(c, g.key);
	for (i = 0; i <= sizeof(groups) / sizeof(groups[0]); i++) {
		const char *gr = i < sizeof(groups) / sizeof(groups[0]) ? groups[i] : NULL;
		char what[128];

		snprintf(what, sizeof(what), "dave in groups \"%s\"", gr ? gr : "(none)");
		expect_refused(g.token, &(struct refused){
			.user = "dave@example.com", .groups = gr, .form = form, .statuses = "403",
			.page = true, .no_form = true, .events = "approval.refused",
			.reasons = "forbidden", .approval_id = g.approval_id, .what = what });
	}
	tl_expect_run_unchanged(c, g.key, before, "POSTs by people outside group support");
	/* Once dave is in support (among other groups), he may decide. */
	decide_ok(g.token, "dave@example.com", "sales, support", "approve", csrf, NULL);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	                        " AND decided_by = 'dave@example.com'", g.key, (char *)NULL), 1);
	free(before);
	free(form);
	free(csrf);
	PQfinish(c);
}
END_TEST

START_TEST(test_refuse_separation_of_duties)
{
	struct submission s = { .requested_by = REQUESTER };
	/* the requester as a sign-in may spell her: her address in any case,
	 * or with her name */
	static const char *const selves[] = { REQUESTER, "ALICE@Example.COM",
		                              "Алиса Иванова <Alice@example.com>" };
	struct gated g;
	struct pl_web w;
	PGconn *c = tl_pg_connect();
	char *before, *csrf, *form;
	size_t i;

	make_gated("sod", &s, &g);
	before = tl_run_snapshot(c, g.key);
	for (i = 0; i < sizeof(selves) / sizeof(selves[0]); i++) {
		char what[128];

		snprintf(what, sizeof(what), "%s approves her own request", selves[i]);
		web_get(g.token, selves[i], "support", &w);
		expect_page(&w, 403, "You requested this action");
		expect_no_form(&w);
		ck_assert_msg(strstr(w.text, "Separation of duties") != NULL &&
		              strstr(w.r.body, "customer@example.com") == NULL,
		              "the requester's page: %.2000s", w.text);
		pl_web_free(&w);
		csrf = tl_csrf_for(g.approval_id, selves[i]);
		form = decide_form("approve", csrf, NULL);
		expect_refused(g.token, &(struct refused){
			.user = selves[i], .groups = "support", .form = form, .statuses = "403",
			.page = true, .no_form = true, .events = "approval.refused",
			.reasons = "forbidden", .approval_id = g.approval_id, .what = what });
		free(form);
		free(csrf);
	}
	tl_expect_run_unchanged(c, g.key, before, "the requester approving her own request");
	csrf = card_csrf(g.token, "bob@example.com", "support");
	decide_ok(g.token, "bob@example.com", "support", "approve", csrf, NULL);
	free(csrf);
	free(before);
	PQfinish(c);
}
END_TEST

START_TEST(test_refuse_not_awaiting)
{
	struct held h;
	const char *p[1];

	held_begin("notawaiting", &h);
	/* An operator settled the run by other means meanwhile. */
	p[0] = h.g.key;
	ck_assert_int_eq(tl_pg_exec(h.c, "UPDATE workflow_runs SET state = 'failed_terminal',"
	                            " error_class = 'operator', reason = 'settled by check_gate',"
	                            " version = version + 1 WHERE idempotency_key = $1", 1, p), 1);
	held_snapshot(&h);

	expect_refused(h.g.token, &(struct refused){
		.statuses = "410|409", .page = true, .no_form = true,
		.events = "approval.gone|approval.refused", .reasons = "not_awaiting",
		.approval_id = h.g.approval_id,
		.what = "GET while the run is no longer awaiting_human" });
	expect_refused(h.g.token, &(struct refused){
		.form = h.form, .statuses = "410|409", .page = true, .no_form = true,
		.events = "approval.gone|approval.refused", .reasons = "not_awaiting",
		.approval_id = h.g.approval_id,
		.what = "POST while the run is no longer awaiting_human" });
	held_end(&h, "a decision on a run no longer awaiting_human", 0);
}
END_TEST

START_TEST(test_refuse_revoked)
{
	struct held h;
	const char *p[1];

	held_begin("revoked", &h);
	p[0] = h.g.approval_id;
	ck_assert_int_eq(tl_pg_exec(h.c, "UPDATE approvals SET state = 'revoked' WHERE id = $1::uuid",
	                            1, p), 1);
	held_snapshot(&h);

	expect_refused(h.g.token, &(struct refused){
		.statuses = "410", .page = true, .no_form = true,
		.events = "approval.gone|approval.refused", .approval_id = h.g.approval_id,
		.what = "GET of a revoked token" });
	expect_refused(h.g.token, &(struct refused){
		.form = h.form, .statuses = "410|409", .no_form = true,
		.events = "approval.gone|approval.refused", .approval_id = h.g.approval_id,
		.what = "POST to a revoked token" });
	held_end(&h, "a revoked token", -1);
}
END_TEST

/* ===== 4. reject ============================================================ */

START_TEST(test_reject)
{
	struct gated g;
	struct pl_web w;
	PGconn *c = tl_pg_connect();
	char *csrf;
	json_t *lines, *l;
	long off;
	const char *reason = "Wrong tone for a complaint; rewrite it formally.";

	make_gated("reject", NULL, &g);
	csrf = card_csrf(g.token, APPROVER, "support");
	off = tl_log_offset();
	decide_ok(g.token, APPROVER, "support", "reject", csrf, reason);

	{
		const char *p[3] = { g.key, APPROVER, reason };

		ck_assert_int_eq(tl_pg_count(c,
		    "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
		    " AND state = 'rejected' AND error_class = 'rejected' AND reason = $3"
		    " AND decision = 'reject' AND decided_by = $2 AND decided_at IS NOT NULL", 3, p), 1);
		ck_assert_int_eq(tl_pg_count(c,
		    "SELECT count(*) FROM approvals WHERE idempotency_key = $1 AND state = 'decided'"
		    " AND decision = 'reject' AND approver_subject = $2 AND reason = $3", 3, p), 1);
	}
	ck_assert_int_eq(outbox_rows(c, g.key), 0);

	lines = tl_log_collect(off, is_approve_line, NULL, 1);
	l = tl_log_find_event(lines, "approval.consumed");
	ck_assert_msg(l != NULL, "no approval.consumed line");
	expect_field(l, "decision", "reject");
	expect_field(l, "actor", APPROVER);
	expect_field(l, "approval_id", g.approval_id);
	expect_field(l, "state_to", "rejected");
	/* the run's client, although an approver is no API client: two
	 * clients may share a key */
	expect_field(l, "client", "dev");
	ck_assert_msg(json_object_get(l, "effect_id") == NULL, "a rejection enqueues no effect");
	json_decref(lines);

	/* the event delivered again: a duplicate that reads rejected (a
	 * person's no, not a failure) and names who said it */
	{
		json_t *body = json_pack("{s:s, s:{s:i, s:s}, s:i}", "key", g.key, "payload",
		                         "ticket", 42, "m", tl_run, "lease_seconds", 60);
		struct tl_resp r;
		json_t *d;

		tl_post_json("/v1/runs", tl_env("ONCEGATE_API_KEY"), body, &r);
		json_decref(body);
		ASSERT_STATUS(&r, 200);
		expect_field(r.json, "outcome", "duplicate");
		expect_field(r.json, "state", "rejected");
		d = json_object_get(r.json, "decision");
		ck_assert_msg(json_is_object(d), "duplicate without its decision: %s", r.body);
		expect_field(d, "decision", "reject");
		expect_field(d, "decided_by", APPROVER);
		ck_assert_msg(json_is_string(json_object_get(d, "decided_at")), "%s", r.body);
		tl_resp_free(&r);
	}

	web_get(g.token, APPROVER, "support", &w);
	expect_page(&w, 410, APPROVER);
	ck_assert_msg(tl_contains_ci(w.text, "reject"), "decided page: %.2000s", w.text);
	ck_assert_msg(tl_contains_ci(w.text, reason), "decided page lacks the reason: %.2000s", w.text);
	expect_no_form(&w);
	pl_web_free(&w);
	free(csrf);
	PQfinish(c);
}
END_TEST

/* ===== 5. the decision callback ============================================= */

START_TEST(test_decision_callback)
{
	struct submission s = { .callback_url = CALLBACK_ORIGIN "/webhook-waiting/123/ok" };
	struct submission s2 = { .callback_url = CALLBACK_ORIGIN "/webhook-waiting/124/ok" };
	struct submission bad = { .callback_url = "https://evil.example/webhook-waiting/1" };
	struct gated a, b;
	struct tl_claimed cl;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();
	char *csrf, *before, key[200];

	make_gated("callback-approve", &s, &a);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	                        " AND callback_url = 'http://127.0.0.1:5678/webhook-waiting/123/ok'",
	                        a.key, (char *)NULL), 1);
	csrf = card_csrf(a.token, APPROVER, "support");
	decide_ok(a.token, APPROVER, "support", "approve", csrf, NULL);
	free(csrf);
	ck_assert_int_eq(outbox_rows(c, a.key), 2);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                        " AND effect_type = 'email.send' AND approval_id = $2::uuid", a.key,
	                        a.approval_id, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                        " AND effect_type = 'decision.callback' AND target = 'callback'"
	                        " AND state = 'pending' AND approval_id = $2::uuid"
	                        " AND payload->>'decision' = 'approved'"
	                        " AND payload->>'url' = 'http://127.0.0.1:5678/webhook-waiting/123/ok'",
	                        a.key, a.approval_id, (char *)NULL), 1);

	make_gated("callback-reject", &s2, &b);
	csrf = card_csrf(b.token, APPROVER, "support");
	decide_ok(b.token, APPROVER, "support", "reject", csrf, "no");
	free(csrf);
	ck_assert_int_eq(outbox_rows(c, b.key), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                        " AND effect_type = 'decision.callback'"
	                        " AND payload->>'decision' = 'rejected'", b.key, (char *)NULL), 1);

	/* A callback elsewhere than the configured n8n origin: refused. */
	tl_mkkey(key, sizeof(key), "callback-evil");
	tl_claim_run(key, &cl);
	before = tl_run_snapshot(c, key);
	post_output(key, cl.owner, cl.version, &bad, &r);
	ASSERT_STATUS(&r, 422);
	ck_assert_msg(tl_jstr(r.json, "error") && strcmp(tl_jstr(r.json, "error"), "callback_not_allowed") == 0,
	              "error: %s", r.body);
	tl_resp_free(&r);
	tl_expect_run_unchanged(c, key, before, "an output with a foreign callback_url");
	free(before);

	/* The claim checks the resume URL the output will carry: a foreign
	 * origin is refused before anything is claimed, naming the origin and
	 * the setting; a listed one claims. */
	{
		const char *origins[] = { "http://127.0.0.1:5679", "http://localhost:5678" };

		for (size_t i = 0; i < 2; i++) {
			char url[200], want[200];
			json_t *body;

			tl_mkkey(key, sizeof(key), "callback-claim-Ж-荷物");
			snprintf(url, sizeof(url), "%s/webhook-waiting/77?signature=s3cr3t", origins[i]);
			body = json_pack("{s:s, s:{s:s}, s:s}", "key", key, "payload", "subject",
			                 "Где моя посылка? 荷物はどこ? 📦", "callback_url", url);
			tl_post_json("/v1/runs", tl_env("ONCEGATE_API_KEY"), body, &r);
			json_decref(body);
			ASSERT_STATUS(&r, 422);
			snprintf(want, sizeof(want), "origin %s is not one of oncegate's callback_origins",
			         origins[i]);
			ck_assert_msg(tl_jstr(r.json, "error") != NULL &&
			              strcmp(tl_jstr(r.json, "error"), "callback_not_allowed") == 0 &&
			              tl_jstr(r.json, "detail") != NULL &&
			              strstr(tl_jstr(r.json, "detail"), want) != NULL &&
			              strstr(r.body, "s3cr3t") == NULL, "claim: %s", r.body);
			tl_resp_free(&r);
			ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1",
			                      key, (char *)NULL), 0);
		}
		tl_mkkey(key, sizeof(key), "callback-claim-ok");
		{
			json_t *body = json_pack("{s:s, s:{s:i}, s:s}", "key", key, "payload", "ticket", 7,
			                         "callback_url", "http://127.0.0.1:5678/webhook-waiting/78");

			tl_post_json("/v1/runs", tl_env("ONCEGATE_API_KEY"), body, &r);
			json_decref(body);
		}
		ASSERT_STATUS(&r, 201);
		tl_resp_free(&r);
	}
	PQfinish(c);
}
END_TEST

/* ===== 6. the repair budget ================================================== */

START_TEST(test_repair_budget)
{
	struct submission s1 = { 0 }, s2 = { 0 }, s3 = { 0 };
	struct tl_claimed cl;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();
	char key[200], *before;
	long long v1, v2, left = -1;
	json_t *errs, *lines, *l;
	long off = tl_log_offset();
	size_t i;
	bool e_min = false, e_enum = false, e_add = false, e_req = false;

	tl_mkkey(key, sizeof(key), "repair");
	tl_claim_run(key, &cl);

	/* Invalid 1: empty subject, unknown tone, a stray field, no confidence. */
	s1.output = json_pack("{s:s, s:s, s:s, s:b}", "subject", "", "body", g_marker, "tone", "rude",
	                      "auto_send", 1);
	post_output(key, cl.owner, cl.version, &s1, &r);
	ASSERT_STATUS(&r, 422);
	ck_assert_msg(tl_jstr(r.json, "outcome") && strcmp(tl_jstr(r.json, "outcome"), "invalid") == 0,
	              "outcome: %s", r.body);
	ck_assert_msg(tl_jint(r.json, "repairs_left", &left) && left == 0,
	              "repair_attempts is 1: one invalid output leaves 0 repairs: %s", r.body);
	ck_assert_msg(tl_jstr(r.json, "state") && strcmp(tl_jstr(r.json, "state"), "processing") == 0,
	              "state: %s", r.body);
	ck_assert_msg(tl_jint(r.json, "version", &v1) && v1 == cl.version + 1, "version: %s", r.body);
	errs = json_object_get(r.json, "errors");
	ck_assert_msg(json_is_array(errs) && json_array_size(errs) >= 4, "errors: %s", r.body);
	for (i = 0; i < json_array_size(errs); i++) {
		json_t *e = json_array_get(errs, i);
		const char *path = tl_jstr(e, "path"), *rule = tl_jstr(e, "rule");

		ck_assert_msg(path != NULL && rule != NULL && tl_jstr(e, "message") != NULL,
		              "an error without path, rule and message: %s", r.body);
		e_min = e_min || (strcmp(path, "/subject") == 0 && strcmp(rule, "minLength") == 0);
		e_enum = e_enum || (strcmp(path, "/tone") == 0 && strcmp(rule, "enum") == 0);
		e_add = e_add || (strcmp(path, "/auto_send") == 0 && strcmp(rule, "additionalProperties") == 0);
		e_req = e_req || (strcmp(path, "/confidence") == 0 && strcmp(rule, "required") == 0);
	}
	ck_assert_msg(e_min && e_enum && e_add && e_req,
	              "expected /subject minLength, /tone enum, /auto_send additionalProperties, "
	              "/confidence required: %s", r.body);
	tl_resp_free(&r);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	                        " AND state = 'processing' AND invalid_outputs = 1"
	                        " AND jsonb_array_length(validation) >= 4", key, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1", key, (char *)NULL), 0);

	/* Invalid 2: the budget is spent. */
	s2.output = json_pack("{s:s, s:s, s:i}", "subject", "ok", "body", g_marker, "confidence", 7);
	post_output(key, cl.owner, v1, &s2, &r);
	ASSERT_STATUS(&r, 422);
	ck_assert_msg(tl_jstr(r.json, "outcome") && strcmp(tl_jstr(r.json, "outcome"), "failed_terminal") == 0,
	              "outcome after the budget: %s", r.body);
	ck_assert_msg(tl_jstr(r.json, "state") && strcmp(tl_jstr(r.json, "state"), "failed_terminal") == 0,
	              "state: %s", r.body);
	ck_assert_msg(tl_jint(r.json, "repairs_left", &left) && left == 0, "repairs_left: %s", r.body);
	ck_assert_msg(tl_jint(r.json, "version", &v2) && v2 == v1 + 1, "version: %s", r.body);
	errs = json_object_get(r.json, "errors");
	ck_assert_msg(json_array_size(errs) == 1 &&
	              strcmp(JSTR(json_array_get(errs, 0), "path"), "/confidence") == 0 &&
	              strcmp(JSTR(json_array_get(errs, 0), "rule"), "maximum") == 0,
	              "errors: %s", r.body);
	tl_resp_free(&r);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	                        " AND state = 'failed_terminal' AND error_class = 'validation'"
	                        " AND invalid_outputs = 2 AND lease_expires_at IS NULL", key, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1", key, (char *)NULL), 0);
	ck_assert_int_eq(outbox_rows(c, key), 0);

	lines = key_lines(off, key, 3);
	{
		char *d = tl_json_text(lines);

		ck_assert_msg(tl_log_count_event(lines, "output.invalid") == 2,
		              "expected two output.invalid lines (the second terminal): %s", d);
		free(d);
	}
	l = tl_log_find_event(lines, "output.invalid");
	expect_field(l, "contract", "support_reply");
	expect_field(l, "validation", "invalid");
	l = json_array_get(lines, json_array_size(lines) - 1);
	expect_field(l, "event", "output.invalid");
	expect_field(l, "error_class", "validation");
	expect_field(l, "state_to", "failed_terminal");
	json_decref(lines);

	/* Nothing more is accepted for the run, not even a valid output. */
	before = tl_run_snapshot(c, key);
	post_output(key, cl.owner, v2, &s3, &r);
	ASSERT_STATUS(&r, 409);
	tl_resp_free(&r);
	tl_expect_run_unchanged(c, key, before, "an output after failed_terminal");
	free(before);

	/* A repair inside the budget is accepted. */
	{
		struct submission bad1 = { 0 }, good = { 0 };
		char key2[200];
		struct gated g;

		tl_mkkey(key2, sizeof(key2), "repaired");
		tl_claim_run(key2, &cl);
		bad1.output = json_pack("{s:s, s:s, s:f}", "subject", "x", "body", "y", "confidence", 1.5);
		post_output(key2, cl.owner, cl.version, &bad1, &r);
		ASSERT_STATUS(&r, 422);
		ck_assert_msg(tl_jint(r.json, "version", &v1), "version: %s", r.body);
		tl_resp_free(&r);
		/* the stale version is refused, the returned one accepted */
		post_output(key2, cl.owner, cl.version, &good, &r);
		ASSERT_STATUS(&r, 409);
		tl_resp_free(&r);
		good.output = NULL;
		post_output(key2, cl.owner, v1, &good, &r);
		memset(&g, 0, sizeof(g));
		expect_awaiting(&r, "group:support", &g);
		tl_resp_free(&r);
		ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
		                        " AND state = 'awaiting_human' AND invalid_outputs = 1"
		                        " AND validation IS NOT NULL", key2, (char *)NULL), 1);
	}
	PQfinish(c);
}
END_TEST

/* ===== 7. the auto path (approve_by_exception) =============================== */

/* A key for test `test`, claimed, whose sample draw is kept under (or
 * over) the rate. */
static void
pick_key(char *buf, size_t n, const char *test, bool sampled, struct tl_claimed *cl)
{
	snprintf(buf, n, "%s-%s", tl_run, test);
	tl_claim_run(buf, cl);
	tl_keep_sample_draw(buf, sampled ? "0.01" : "0.99");
}

START_TEST(test_auto_path)
{
	struct submission s = { .contract = "crm_tag" };
	struct tl_claimed cl;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();
	char key[200], hash[72], pk[260];
	const char *effect_id;
	json_t *lines, *l;
	long off;
	long long v;

	pick_key(key, sizeof(key), "auto", false, &cl);
	off = tl_log_offset();
	s.output = tag_output("lead", 0.95);
	s.effect = tl_tag_effect_json();
	post_output(key, cl.owner, cl.version, &s, &r);
	ck_assert_msg(r.status == 202 && tl_jstr(r.json, "outcome") &&
	              strcmp(tl_jstr(r.json, "outcome"), "approved") == 0,
	              "an eligible crm_tag output whose run drew outside the sample (rate 0.1) "
	              "must be approved automatically: HTTP %ld %s", r.status, r.body);
	effect_id = tl_jstr(r.json, "effect_id");
	ck_assert_msg(effect_id != NULL && strlen(effect_id) == 36, "effect_id: %s", r.body);
	ck_assert_msg(json_object_get(r.json, "approvals") == NULL, "no approvals: %s", r.body);
	ck_assert_msg(json_object_get(r.json, "not_before") == NULL,
	              "no window in approve_by_exception: %s", r.body);
	ck_assert_msg(tl_jint(r.json, "version", &v) && v == cl.version + 1, "version: %s", r.body);

	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	                        " AND state = 'approved' AND decision = 'auto' AND decided_at IS NOT NULL"
	                        " AND contract = 'crm_tag' AND output->>'tag' = 'lead'", key, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1", key, (char *)NULL), 0);
	ck_assert_int_eq(outbox_rows(c, key), 1);
	tl_payload_hash(TAG_PAYLOAD_CANON, hash);
	{
		char *cid = qstr(c, "SELECT id::text FROM api_clients WHERE name = $1", "dev", (char *)NULL);
		char *want = tl_provider_key(cid, key, "crm.tag", "demo_http", 0);

		snprintf(pk, sizeof(pk), "%s", want);
		free(want);
		free(cid);
	}
	{
		const char *p[4] = { key, effect_id, hash, pk };

		ck_assert_int_eq(tl_pg_count(c,
		    "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1 AND id = $2::uuid"
		    " AND effect_type = 'crm.tag' AND target = 'demo_http' AND state = 'pending'"
		    " AND approval_id IS NULL AND payload_hash = $3 AND provider_key = $4"
		    " AND not_before <= now() + interval '1 s'", 4, p), 1);
	}
	lines = key_lines(off, key, 1);
	l = tl_log_find_event(lines, "gate.auto_approved");
	{
		char *d = tl_json_text(lines);

		ck_assert_msg(l != NULL, "no gate.auto_approved line: %s", d);
		free(d);
	}
	expect_field(l, "decision", "auto");
	expect_field(l, "effect_id", effect_id);
	expect_field(l, "state_to", "approved");
	expect_field(l, "contract", "crm_tag");
	json_decref(lines);
	tl_resp_free(&r);

	/* Not eligible: a person decides (group sales). */
	{
		static const struct {
			const char *tag;
			double conf;
		} cases[] = { { "churn_risk", 0.99 }, { "spam", 0.5 }, { "spam", 1.0 } };
		size_t i;

		for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			struct submission t = { .contract = "crm_tag" };
			struct gated g;
			char name[64];

			snprintf(name, sizeof(name), "manual-%zu", i);
			t.output = tag_output(cases[i].tag, cases[i].conf);
			t.effect = tl_tag_effect_json();
			make_gated(name, &t, &g);
			ck_assert_int_eq(outbox_rows(c, g.key), 0);
			if (i == 0) {
				/* and sales can approve it: one crm.tag row */
				char *csrf = card_csrf(g.token, "sol@example.com", "sales");

				decide_ok(g.token, "sol@example.com", "sales", "approve", csrf, NULL);
				free(csrf);
				ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE"
				                        " idempotency_key = $1 AND effect_type = 'crm.tag'"
				                        " AND approval_id IS NOT NULL", g.key, (char *)NULL), 1);
			}
		}
	}

	/* Eligible, but drawn by the sample: a person decides anyway. */
	{
		struct submission t = { .contract = "crm_tag" };
		struct gated g;

		pick_key(key, sizeof(key), "sampled", true, &cl);
		t.output = tag_output("customer", 0.99);
		t.effect = tl_tag_effect_json();
		post_output(key, cl.owner, cl.version, &t, &r);
		memset(&g, 0, sizeof(g));
		expect_awaiting(&r, "group:sales", &g);
		tl_resp_free(&r);
		ck_assert_int_eq(outbox_rows(c, key), 0);
	}

	/* The model's own confidence never grants autonomy: approve_before_act. */
	{
		struct submission t = { 0 };
		struct gated g;

		t.output = json_pack("{s:s, s:s, s:f}", "subject", "All good", "body", "Sent.",
		                     "confidence", 1.0);
		make_gated("selfgrant", &t, &g);
		ck_assert_int_eq(outbox_rows(c, g.key), 0);
	}
	PQfinish(c);
}
END_TEST

/* ===== 8. outputs refused before anything is stored ========================== */

START_TEST(test_output_refusals)
{
	static const struct {
		const char *name;
		const char *contract;
		const char *effect;    /* JSON text */
		const char *source;
		long status;
		const char *error;
	} cases[] = {
		{ "unknown contract", "no_such_contract", NULL, NULL, 422, "unknown_contract" },
		{ "effect type not allowed", "support_reply",
		  "{\"type\":\"crm.tag\",\"target\":\"demo_smtp\",\"payload\":{}}", NULL, 422,
		  "effect_not_allowed" },
		{ "effect target not allowed", "support_reply",
		  "{\"type\":\"email.send\",\"target\":\"demo_http\",\"payload\":{}}", NULL, 422,
		  "effect_not_allowed" },
		{ "caller-chosen URL as target", "support_reply",
		  "{\"type\":\"email.send\",\"target\":\"https://evil.example/\",\"payload\":{}}", NULL,
		  422, "effect_not_allowed" },
		{ "effect with a url member", "support_reply",
		  "{\"type\":\"email.send\",\"target\":\"demo_smtp\",\"payload\":{},\"url\":\"http://x\"}",
		  NULL, 400, "invalid_field" },
		{ "javascript: source_url", "support_reply", NULL, "javascript:alert(1)", 400,
		  "invalid_field" },
	};
	PGconn *c = tl_pg_connect();
	struct tl_claimed cl;
	char key[200], *before;
	size_t i;

	tl_mkkey(key, sizeof(key), "badoutput");
	tl_claim_run(key, &cl);
	before = tl_run_snapshot(c, key);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct submission s = { .contract = cases[i].contract, .source_url = cases[i].source };
		struct tl_resp r;

		if (cases[i].effect != NULL)
			s.effect = json_loads(cases[i].effect, 0, NULL);
		post_output(key, cl.owner, cl.version, &s, &r);
		ck_assert_msg(r.status == cases[i].status && tl_jstr(r.json, "error") &&
		              strcmp(tl_jstr(r.json, "error"), cases[i].error) == 0,
		              "%s: HTTP %ld %s, expected %ld %s", cases[i].name, r.status, r.body,
		              cases[i].status, cases[i].error);
		tl_resp_free(&r);
		tl_expect_run_unchanged(c, key, before, cases[i].name);
	}
	free(before);
	PQfinish(c);
}
END_TEST

/* ===== 9. test-only contracts: act_with_window, sample_rate 1.0 ============== */

static void
require_contract(const struct tl_resp *r, const char *name)
{
	ck_assert_msg(!(r->status == 422 && tl_jstr(r->json, "error") &&
	                strcmp(tl_jstr(r->json, "error"), "unknown_contract") == 0),
	              "contract %s is not loaded: the test stack must also load "
	              "tests/data/contracts-test/%s.json (see the suite's header)", name, name);
}

START_TEST(test_act_with_window)
{
	struct submission s = { .contract = WINDOW_CONTRACT };
	struct tl_claimed cl;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();
	char key[200];
	const char *nb, *eid;
	double t;

	tl_mkkey(key, sizeof(key), "window");
	tl_claim_run(key, &cl);
	post_output(key, cl.owner, cl.version, &s, &r);
	require_contract(&r, WINDOW_CONTRACT);
	ck_assert_msg(r.status == 202 && strcmp(JSTR(r.json, "outcome"), "approved") == 0,
	              "act_with_window: HTTP %ld %s", r.status, r.body);
	nb = tl_jstr(r.json, "not_before");
	eid = tl_jstr(r.json, "effect_id");
	ck_assert_msg(tl_ts_parse(nb, &t) && fabs(t - (tl_now() + WINDOW_S)) < 60,
	              "not_before must be about now + %d s: %s", WINDOW_S, r.body);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                        " AND id = $2::uuid AND state = 'pending' AND approval_id IS NULL"
	                        " AND not_before BETWEEN now() + interval '540 s' AND now() + interval '660 s'",
	                        key, eid ? eid : "00000000-0000-0000-0000-000000000000", (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	                        " AND state = 'approved'", key, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1", key, (char *)NULL), 0);
	tl_resp_free(&r);

	/* Inside the window the owning client can still cancel: the effect is
	 * cancelled, the run ends failed_terminal; a second cancel finds the
	 * window closed. */
	cancel_run(key, "customer withdrew", &r);
	ck_assert_msg(r.status == 200, "cancel inside the window: HTTP %ld %s", r.status, r.body);
	ck_assert_str_eq(JSTR(r.json, "state"), "failed_terminal");
	ck_assert_int_eq((int)json_array_size(json_object_get(r.json, "cancelled_effects")), 1);
	tl_resp_free(&r);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                        " AND state = 'cancelled'", key, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	                        " AND state = 'failed_terminal' AND error_class = 'cancelled'"
	                        " AND reason = 'customer withdrew'", key, (char *)NULL), 1);
	cancel_run(key, "again", &r);
	ck_assert_msg(r.status == 409 && strcmp(JSTR(r.json, "error"), "window_closed") == 0,
	              "second cancel: HTTP %ld %s", r.status, r.body);
	tl_resp_free(&r);

	/* Past the window: refused, nothing changes. */
	tl_mkkey(key, sizeof(key), "window-late");
	tl_claim_run(key, &cl);
	post_output(key, cl.owner, cl.version, &s, &r);
	tl_resp_free(&r);
	{
		PGresult *u = PQexecParams(c, "UPDATE effect_outbox SET not_before = now() - interval"
		                              " '1 second' WHERE idempotency_key = $1",
		                           1, NULL, (const char *const[]){ key }, NULL, NULL, 0);
		ck_assert_int_eq(PQresultStatus(u), PGRES_COMMAND_OK);
		PQclear(u);
	}
	cancel_run(key, "too late", &r);
	ck_assert_msg(r.status == 409, "cancel after the window: HTTP %ld %s", r.status, r.body);
	tl_resp_free(&r);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                        " AND state = 'pending'", key, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	                        " AND state = 'approved'", key, (char *)NULL), 1);
	PQfinish(c);
}
END_TEST

/* Two approvers: each gets a challenge of their own; the first decision
 * settles the run and voids the other challenge. */
START_TEST(test_first_decision_voids_others)
{
	struct submission s = { .contract = PAIR_CONTRACT };
	struct tl_claimed cl;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();
	char key[200], tok_group[64], tok_lead[64], prefix[512];
	char *csrf, *form;
	json_t *list;
	size_t i;
	struct pl_web w;

	tl_mkkey(key, sizeof(key), "pair");
	tl_claim_run(key, &cl);
	post_output(key, cl.owner, cl.version, &s, &r);
	require_contract(&r, PAIR_CONTRACT);
	ck_assert_msg(r.status == 202, "pair output: HTTP %ld %s", r.status, r.body);
	list = json_object_get(r.json, "approvals");
	ck_assert_int_eq((int)json_array_size(list), 2);
	snprintf(prefix, sizeof(prefix), "%s/approve/", g_base);
	tok_group[0] = tok_lead[0] = '\0';
	for (i = 0; i < json_array_size(list); i++) {
		json_t *a = json_array_get(list, i);
		const char *who = tl_jstr(a, "approver"), *url = tl_jstr(a, "url");

		ck_assert_ptr_nonnull(url);
		snprintf(strcmp(who, "lead@example.com") == 0 ? tok_lead : tok_group, 64, "%s",
		         url + strlen(prefix));
	}
	ck_assert_msg(tok_group[0] && tok_lead[0] && strcmp(tok_group, tok_lead) != 0,
	              "one distinct token per approver: %s", r.body);
	tl_resp_free(&r);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1"
	                        " AND state = 'pending'", key, (char *)NULL), 2);

	/* the lead decides first */
	csrf = card_csrf(tok_lead, "lead@example.com", "");
	decide_ok(tok_lead, "lead@example.com", "", "approve", csrf, "fine");
	free(csrf);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1"
	                        " AND state = 'decided' AND approver = 'lead@example.com'", key, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE idempotency_key = $1"
	                        " AND state = 'voided' AND approver = 'group:support'", key, (char *)NULL), 1);
	ck_assert_int_eq(outbox_rows(c, key), 1);

	/* the other challenge is gone: its page says so and offers no form,
	 * and a POST with a form fetched earlier changes nothing */
	web_get(tok_group, "sam@example.com", "support", &w);
	expect_page(&w, 410, "Another approver already decided");
	expect_no_form(&w);
	pl_web_free(&w);
	form = decide_form("reject", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", NULL);
	web_post(tok_group, "sam@example.com", "support", O_BROWSER, form, &w);
	ck_assert_msg(w.r.status == 410, "POST on a voided challenge: HTTP %ld", w.r.status);
	pl_web_free(&w);
	free(form);
	ck_assert_int_eq(outbox_rows(c, key), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	                        " AND state = 'approved' AND decided_by = 'lead@example.com'", key, (char *)NULL), 1);
	PQfinish(c);
}
END_TEST

START_TEST(test_sample_rate_one)
{
	PGconn *c = tl_pg_connect();
	int i;

	for (i = 0; i < 5; i++) {
		struct submission s = { .contract = SAMPLED_CONTRACT };
		struct tl_claimed cl;
		struct tl_resp r;
		struct gated g;
		char key[200];

		snprintf(key, sizeof(key), "%s-sampleall-%d", tl_run, i);
		tl_claim_run(key, &cl);
		s.output = tag_output("lead", 0.99);
		s.effect = tl_tag_effect_json();
		post_output(key, cl.owner, cl.version, &s, &r);
		require_contract(&r, SAMPLED_CONTRACT);
		memset(&g, 0, sizeof(g));
		expect_awaiting(&r, "group:sales", &g);
		tl_resp_free(&r);
		ck_assert_int_eq(outbox_rows(c, key), 0);
	}
	PQfinish(c);
}
END_TEST

/* ===== 10. hostile HTML in the model output ================================= */

START_TEST(test_hostile_output)
{
	static const char *const subject = "<script>alert(1)</script>";
	static const char *const body =
	    "\"quotes' & ]]> <img src=x onerror=alert(2)> </textarea><b>bold</b> <!-- c --> &amp;";
	static const char *const source =
	    "https://crm.example/ticket?id=42&x=\"><script>alert(3)</script>";
	/* a person by mail address, with a hostile display name */
	static const char *const requester = "<i>mallory</i>\"'& <mallory@example.com>";
	struct submission s = { .source_url = source, .requested_by = requester };
	struct gated g;
	struct pl_web w;
	PGconn *c = tl_pg_connect();
	char *csrf;
	size_t i;

	s.output = json_pack("{s:s, s:s, s:f}", "subject", subject, "body", body, "confidence", 0.5);
	s.model = json_pack("{s:s, s:s, s:s}", "provider", "<b>evil</b>", "name", "<b>model</b>",
	                    "revision", "\"><svg onload=alert(6)>");
	s.effect = json_pack("{s:s, s:s, s:{s:s, s:s}}", "type", "email.send", "target", "demo_smtp",
	                     "payload", "to", "x@example.com", "ticket",
	                     "<script>alert(4)</script>");
	make_gated("hostile-<i>&\"'", &s, &g);

	web_get(g.token, APPROVER, "support", &w);
	expect_page(&w, 200, NULL);
	expect_well_formed(&w);
	/* Nothing of it became markup. */
	ck_assert_msg(!tl_contains_ci(w.r.body, "<script") && !tl_contains_ci(w.r.body, "<img") &&
	              !tl_contains_ci(w.r.body, "<svg") && !tl_contains_ci(w.r.body, "<b>bold") &&
	              !tl_contains_ci(w.r.body, "<b>model") && !tl_contains_ci(w.r.body, "<i>mallory") &&
	              !tl_contains_ci(w.r.body, "<b>evil") && strstr(w.r.body, "]]>") == NULL &&
	              !tl_contains_ci(w.r.body, "</textarea><b>"),
	              "hostile text became markup: %.6000s", w.r.body);
	ck_assert_msg(count_elems(&w, "img") == 0 && count_elems(&w, "svg") == 0 &&
	              count_elems(&w, "script") == 0 && count_nodes(&w, pred_on_attr, NULL, NULL) == 0,
	              "the page has elements or handlers from the model output: %.6000s", w.r.body);
	ck_assert_msg(count_nodes(&w, pred_control, "reason", NULL) == 1 && count_elems(&w, "form") == 1,
	              "the hostile text broke the form: %.6000s", w.r.body);
	ck_assert_msg(strstr(w.r.body, "&lt;script&gt;alert(1)&lt;/script&gt;") != NULL,
	              "the subject is not shown as escaped text: %.6000s", w.r.body);
	/* ... and shows as the very text that was written. */
	{
		const char *const texts[] = { subject, body, requester, "<b>model</b>",
			                      "<script>alert(4)</script>", "\"><svg onload=alert(6)>",
			                      g.key };

		for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
			ck_assert_msg(strstr(w.text, texts[i]) != NULL,
			              "the page does not show the text \"%s\" as written: %.6000s",
			              texts[i], w.text);
	}
	ck_assert_msg(count_nodes(&w, pred_href, source, NULL) == 1,
	              "the source link is not the URL as given (as an attribute value): %.6000s",
	              w.r.body);
	csrf = csrf_of(&w);
	pl_web_free(&w);

	/* The reason shows as text on the decided page too. */
	decide_ok(g.token, APPROVER, "support", "approve", csrf, "<script>alert(5)</script> & ok");
	web_get(g.token, APPROVER, "support", &w);
	expect_page(&w, 410, NULL);
	expect_well_formed(&w);
	ck_assert_msg(!tl_contains_ci(w.r.body, "<script") &&
	              strstr(w.text, "<script>alert(5)</script> & ok") != NULL &&
	              strstr(w.text, g.key) != NULL,
	              "decided page: %.4000s", w.r.body);
	pl_web_free(&w);
	free(csrf);
	PQfinish(c);
}
END_TEST

/* ===== 10b. real drafts (tests/data/corpus) =================================== */

/* Long support mails as a model drafts them — Cyrillic, Han, Japanese,
 * Arabic and Hebrew (right to left), emoji ZWJ sequences and flags, and all
 * of them in one mail, each at the contract's 200 + 5,000 code points, to
 * 100 recipients — through nginx: the approver's page shows subject and
 * body complete and exactly as written (the quoted "Name <address>" lines
 * as text, not markup, no character replaced), with the decision form
 * whole; approving it enqueues the mail. */
START_TEST(test_corpus_drafts)
{
	static const char *const ids[] = { "ru_max", "zh_max", "ja_max", "ar_max", "he_max",
		                           "emoji_max", "mixed_max" };
	json_t *rc = tl_corpus_load("recipients.json");
	PGconn *c = tl_pg_connect();
	size_t i;

	ck_assert_uint_eq(json_array_size(json_object_get(rc, "max")), 100);
	for (i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		const char *subject = tl_corpus_mail_str(ids[i], "subject");
		const char *body = tl_corpus_mail_str(ids[i], "body");
		struct submission s = { .contract = "support_list", .requested_by = REQUESTER };
		struct gated g;
		struct pl_web w;
		char test[64], *csrf, *sent;

		ck_assert_uint_eq(tl_utf8_chars(subject), 200);
		ck_assert_uint_eq(tl_utf8_chars(body), 5000);
		s.output = json_pack("{s:s, s:s, s:s, s:f}", "subject", subject, "body", body, "tone",
		                     "formal", "confidence", 0.62);
		s.effect = json_pack("{s:s, s:s, s:{s:O}}", "type", "email.send", "target", "demo_smtp",
		                     "payload", "to", json_object_get(rc, "max"));
		snprintf(test, sizeof(test), "corpus-%s", ids[i]);
		make_gated(test, &s, &g);

		web_get(g.token, APPROVER, "support", &w);
		expect_page(&w, 200, NULL);
		expect_well_formed(&w);
		ck_assert_msg(w.text != NULL && strstr(w.text, body) != NULL,
		              "%s: the page does not show the %zu-byte body whole, as written: %.3000s",
		              ids[i], strlen(body), w.text ? w.text : w.r.body);
		ck_assert_msg(strstr(w.text, subject) != NULL,
		              "%s: the page does not show the subject as written", ids[i]);
		ck_assert_msg(strstr(w.r.body, "\xef\xbf\xbd") == NULL,
		              "%s: the page replaced characters: %.300s", ids[i],
		              strstr(w.r.body, "\xef\xbf\xbd"));
		ck_assert_msg(!tl_contains_ci(w.r.body, "<anna.") && !tl_contains_ci(w.r.body, "<wang.") &&
		              !tl_contains_ci(w.r.body, "<jordan.") && !tl_contains_ci(w.r.body, "<ahmed."),
		              "%s: a quoted address became markup", ids[i]);
		ck_assert_msg(count_elems(&w, "form") == 1 && count_nodes(&w, pred_control, "reason", NULL) == 1,
		              "%s: the long draft broke the form", ids[i]);
		csrf = csrf_of(&w);
		pl_web_free(&w);

		decide_ok(g.token, APPROVER, "support", "approve", csrf, "долгое письмо / 长邮件 ✓");
		free(csrf);
		ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1 "
		                        "AND effect_type = 'email.send'", g.key, (char *)NULL), 1);
		/* what the dispatcher will send is the approved draft, byte for byte */
		sent = qstr(c, "SELECT output->>'body' FROM workflow_runs WHERE idempotency_key = $1",
		              g.key, (char *)NULL);
		ck_assert_msg(sent != NULL && strcmp(sent, body) == 0, "%s: the stored draft differs",
		              ids[i]);
		free(sent);
	}
	json_decref(rc);
	PQfinish(c);
}
END_TEST

/* The limits count code points, not bytes: one character past them (a
 * 15,000-byte CJK body of 5,001 characters, an emoji body whose flags and
 * ZWJ sequences are several code points each) is refused naming /subject
 * and /body maxLength; the same drafts at exactly the limits are taken. */
START_TEST(test_corpus_one_over)
{
	static const char *const ids[] = { "zh_max", "emoji_max" };
	size_t i, j;

	for (i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		const char *subject = tl_corpus_mail_str(ids[i], "subject");
		const char *body = tl_corpus_mail_str(ids[i], "body");
		struct submission bad = { .requested_by = REQUESTER }, good = { .requested_by = REQUESTER };
		char key[200], *s2, *b2;
		struct tl_claimed cl;
		struct tl_resp r;
		struct gated g;
		long long v1 = 0;
		bool e_subject = false, e_body = false;
		json_t *errs;

		ck_assert_int_gt(asprintf(&s2, "%s\xe2\x9c\x93", subject), 0); /* + U+2713 */
		ck_assert_int_gt(asprintf(&b2, "%s\xe2\x9c\x93", body), 0);
		tl_mkkey(key, sizeof(key), ids[i]);
		strcat(key, "-over");
		tl_claim_run(key, &cl);
		bad.output = json_pack("{s:s, s:s, s:f}", "subject", s2, "body", b2, "confidence", 0.5);
		post_output(key, cl.owner, cl.version, &bad, &r);
		ASSERT_STATUS(&r, 422);
		errs = json_object_get(r.json, "errors");
		for (j = 0; j < json_array_size(errs); j++) {
			const char *path = tl_jstr(json_array_get(errs, j), "path");
			const char *rule = tl_jstr(json_array_get(errs, j), "rule");

			e_subject = e_subject || (path && rule && strcmp(path, "/subject") == 0 &&
			                          strcmp(rule, "maxLength") == 0);
			e_body = e_body || (path && rule && strcmp(path, "/body") == 0 &&
			                    strcmp(rule, "maxLength") == 0);
		}
		ck_assert_msg(e_subject && e_body, "%s + 1 character: want /subject and /body "
		              "maxLength: %.1000s", ids[i], r.body);
		ck_assert_msg(tl_jint(r.json, "version", &v1), "version: %s", r.body);
		tl_resp_free(&r);
		good.output = json_pack("{s:s, s:s, s:f}", "subject", subject, "body", body, "confidence",
		                        0.5);
		post_output(key, cl.owner, v1, &good, &r);
		memset(&g, 0, sizeof(g));
		expect_awaiting(&r, "group:support", &g);
		tl_resp_free(&r);
		free(s2);
		free(b2);
	}
}
END_TEST

/* ===== 11. the raw token is stored and logged nowhere ====================== */

static void
assert_secret_absent(const char *text, const char *secret, const char *secret_name,
                     const char *where)
{
	const char *at;

	if (text == NULL || secret == NULL || *secret == '\0')
		return;
	at = strstr(text, secret);
	if (at != NULL) {
		const char *ls = at, *le = strchr(at, '\n');

		while (ls > text && ls[-1] != '\n')
			ls--;
		ck_abort_msg("%s appears in %s: %.*s[%s]%.*s", secret_name, where,
		             (int)(at - ls) > 300 ? 300 : (int)(at - ls), ls, secret_name,
		             (int)((le ? le : at + strlen(at)) - (at + strlen(secret))) > 300
		                 ? 300
		                 : (int)((le ? le : at + strlen(at)) - (at + strlen(secret))),
		             at + strlen(secret));
	}
}

START_TEST(test_token_never_stored_or_logged)
{
	struct gated a, b, e;
	struct pl_web w;
	struct tl_resp r;
	PGconn *c = tl_pg_connect();
	char unknown[44], hash_a[65], hash_b[65], hash_e[65], path[256];
	char *csrf_a, *csrf_b, *csrf_e, *form, *text, *acc_path, *err_path;
	const char *tokens[4];
	const char *p[1];
	size_t i;

	make_gated("hygiene-a", NULL, &a);
	make_gated("hygiene-b", NULL, &b);
	make_gated("hygiene-e", NULL, &e);
	tl_random_token(unknown);
	tokens[0] = a.token;
	tokens[1] = b.token;
	tokens[2] = e.token;
	tokens[3] = unknown;
	tl_sha256_hex(a.token, hash_a);
	tl_sha256_hex(b.token, hash_b);
	tl_sha256_hex(e.token, hash_e);

	/* a: viewed, approved, viewed, posted again. */
	csrf_a = card_csrf(a.token, APPROVER, "support");
	decide_ok(a.token, APPROVER, "support", "approve", csrf_a, "fine");
	web_get(a.token, APPROVER, "support", &w);
	pl_web_free(&w);
	form = decide_form("approve", csrf_a, NULL);
	web_post(a.token, APPROVER, "support", O_BROWSER, form, &w);
	pl_web_free(&w);
	free(form);
	/* b: viewed, refused for CSRF, cross-origin, no subject; left pending. */
	csrf_b = card_csrf(b.token, "bob@example.com", "support");
	form = decide_form("approve", csrf_a, NULL);
	web_post(b.token, APPROVER, "support", O_BROWSER, form, &w);
	pl_web_free(&w);
	web_post(b.token, APPROVER, "support", O_EVIL, form, &w);
	pl_web_free(&w);
	web_get(b.token, NULL, NULL, &w);
	pl_web_free(&w);
	free(form);
	/* e: expired, then viewed and posted. */
	csrf_e = card_csrf(e.token, APPROVER, "support");
	p[0] = e.approval_id;
	tl_pg_exec(c, "UPDATE approvals SET expires_at = now() - interval '1 second'"
	           " WHERE id = $1::uuid", 1, p);
	web_get(e.token, APPROVER, "support", &w);
	pl_web_free(&w);
	form = decide_form("approve", csrf_e, NULL);
	web_post(e.token, APPROVER, "support", O_BROWSER, form, &w);
	pl_web_free(&w);
	/* unknown */
	web_get(unknown, APPROVER, "support", &w);
	pl_web_free(&w);
	web_post(unknown, APPROVER, "support", O_BROWSER, form, &w);
	pl_web_free(&w);
	free(form);

	/* Other spellings of a's link that still carry the token. */
	{
		const char *const pre[] = {
			"/approve/", "/approve/", "/%61pprove/", "/APPROVE/", "/healthz?next=/approve/",
			"/approve//",
		};
		const char *const post[] = { "?utm_source=mail", "/", "", "", "", "" };

		for (i = 0; i < sizeof(pre) / sizeof(pre[0]); i++) {
			snprintf(path, sizeof(path), "%s%s%s", pre[i], a.token, post[i]);
			tl_http_hdrs("GET", path, (const char *const[]){ "X-Dev-User: " APPROVER, NULL },
			             NULL, NULL, 0, &r, NULL);
			tl_resp_free(&r);
		}
		/* the first character percent-encoded */
		snprintf(path, sizeof(path), "/approve/%%%02X%.60s", (unsigned char)a.token[0],
		         a.token + 1);
		tl_http_hdrs("GET", path, (const char *const[]){ "X-Dev-User: " APPROVER, NULL },
		             NULL, NULL, 0, &r, NULL);
		tl_resp_free(&r);
	}

	/* The answers of the API hold no token, hash or CSRF value either. */
	{
		char *rp = tl_run_path(a.key, NULL);

		tl_get(rp, g_key_dev, &r);
		free(rp);
		ASSERT_STATUS(&r, 200);
		ck_assert_msg(strstr(r.body, a.approval_id) != NULL,
		              "GET /v1/runs/{key} lists no approvals: %.2000s", r.body);
		for (i = 0; i < 4; i++)
			assert_secret_absent(r.body, tokens[i], "a raw approval token", "GET /v1/runs/{key}");
		assert_secret_absent(r.body, hash_a, "the token hash", "GET /v1/runs/{key}");
		assert_secret_absent(r.body, csrf_a, "a CSRF value", "GET /v1/runs/{key}");
		tl_resp_free(&r);
	}

	/* The database stores the hash, and never the token. */
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE id = $1::uuid AND"
	                        " token_hash = decode($2, 'hex')", a.approval_id, hash_a, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE id = $1::uuid AND"
	                        " token_hash = decode($2, 'hex')", b.approval_id, hash_b, (char *)NULL), 1);
	for (i = 0; i < 4; i++)
		ck_assert_msg(tl_pg_rows_holding(c, tokens[i]) == 0,
		              "a raw approval token appears in a database table");

	/* The decision log: no token, no token hash, no CSRF value, no output. */
	tl_sleep_ms(TL_LOG_SETTLE_MS);
	{
		size_t len;

		text = tl_log_slurp(&len);
	}
	ck_assert_msg(text != NULL, "cannot read the decision log");
	for (i = 0; i < 4; i++)
		assert_secret_absent(text, tokens[i], "a raw approval token", "the decision log");
	assert_secret_absent(text, hash_a, "a token hash", "the decision log");
	assert_secret_absent(text, hash_b, "a token hash", "the decision log");
	assert_secret_absent(text, hash_e, "a token hash", "the decision log");
	assert_secret_absent(text, csrf_a, "a CSRF value", "the decision log");
	assert_secret_absent(text, csrf_b, "a CSRF value", "the decision log");
	assert_secret_absent(text, csrf_e, "a CSRF value", "the decision log");
	assert_secret_absent(text, g_marker, "a model output (marker)", "the decision log");
	free(text);

	/* nginx's access log. */
	acc_path = tl_access_log_path();
	text = tl_file_slurp(acc_path, NULL);
	ck_assert_msg(text != NULL, "cannot read the access log %s", acc_path ? acc_path : "(?)");
	ck_assert_msg(strstr(text, "/approve/") != NULL || tl_contains_ci(text, "[token]"),
	              "the access log %s shows no approval requests at all", acc_path);
	for (i = 0; i < 4; i++)
		assert_secret_absent(text, tokens[i], "a raw approval token", "nginx's access log");
	assert_secret_absent(text, a.token + 1, "a raw approval token (percent-encoded spelling)",
	                     "nginx's access log");
	free(text);
	free(acc_path);

	/* The error log cannot be masked (only the access log is promised to be masked);
	 * say so when it holds a token, without failing. */
	err_path = tl_error_log_path();
	text = tl_file_slurp(err_path, NULL);
	for (i = 0; text != NULL && i < 4; i++)
		if (strstr(text, tokens[i]) != NULL)
			fprintf(stderr, "note: nginx's error log %s holds a raw approval token\n", err_path);
	free(text);
	free(err_path);

	free(csrf_a);
	free(csrf_b);
	free(csrf_e);
	PQfinish(c);
}
END_TEST

/* ---- the suite ---------------------------------------------------------- */

TL_SUITE(gate_suite, "gate",
         /* First, while nginx's POST limit for this address is untouched. */
         {"race", 90, .setup = tl_setup_healthy, .tests = TL_LIST(test_concurrent_decisions)},
         {"approve", 90, .setup = tl_setup_healthy,
          .tests = TL_LIST(test_approve_before_act, test_reject, test_decision_callback)},
         {"refusals", 90, .setup = tl_setup_healthy,
          .tests = TL_LIST(test_refuse_no_subject, test_refuse_unknown_token, test_refuse_expired,
                           test_refuse_used, test_refuse_missing_csrf,
                           test_refuse_csrf_of_other_approval,
                           test_refuse_csrf_of_other_subject, test_refuse_cross_origin,
                           test_refuse_decision_not_allowed, test_refuse_not_an_approver,
                           test_refuse_separation_of_duties, test_refuse_not_awaiting,
                           test_refuse_revoked)},
         {"outputs", 90, .setup = tl_setup_healthy,
          .tests = TL_LIST(test_repair_budget, test_auto_path, test_output_refusals,
                           test_act_with_window, test_sample_rate_one,
                           test_first_decision_voids_others)},
         {"escaping", 90, .setup = tl_setup_healthy,
          .tests = TL_LIST(test_hostile_output, test_corpus_drafts, test_corpus_one_over)},
         /* Last: it reads everything the others wrote too. */
         {"secrets", 90, .setup = tl_setup_healthy,
          .tests = TL_LIST(test_token_never_stored_or_logged)})

static bool
prepare(void)
{
	xmlInitParser();
	g_base = tl_env("ONCEGATE_URL");
	g_key_dev = tl_env("ONCEGATE_API_KEY");
	snprintf(g_marker, sizeof(g_marker), "Dear customer, OUTPUT-MARKER-%s.", tl_run);
	return true;
}

TL_STACK_MAIN(.name = "check_gate", .prefix = "gt",
              .needed = "ONCEGATE_API_KEY ONCEGATE_CONF ONCEGATE_LOG", .suite = gate_suite,
              .prepare = prepare, .finish = xmlCleanupParser)

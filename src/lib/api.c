/*
 * api.c — the route table and the request pipeline of the workflow API.
 *
 * Every request goes through the same steps: match the route table, set
 * the headers of the route's kind of answer, check authentication as the
 * route declares it, check the body's media type, size and JSON shape,
 * then call the route's handler (api_runs.c, api_output.c, api_approve.c,
 * api_ops.c). Every answer that is a decision writes exactly one line to
 * the decision log.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api_card.h"
#include "api_int.h"
#include "canon.h"
#include "clients.h"
#include "digest.h"
#include "ledger.h"
#include "metrics.h"
#include "caps.h"
#include "log.h"
#include "schema_version.h"
#include "utf8.h"

static const struct route routes[] = {
	{ "POST", SHAPE_EXACT, "/v1/runs", NULL, "/v1/runs", AUTH_BEARER, BODY_JSON, ANSWER_JSON,
	  false, true, api_runs_claim },
	{ "GET", SHAPE_EXACT, "/v1/runs", NULL, "/v1/runs", AUTH_BEARER, BODY_NONE, ANSWER_JSON,
	  false, false, api_runs_list },
	{ "GET", SHAPE_EXACT, "/v1/approvals", NULL, "/v1/approvals", AUTH_BEARER, BODY_NONE,
	  ANSWER_JSON, false, false, api_approvals_list },
	{ "GET", SHAPE_EXACT, "/v1/contracts", NULL, "/v1/contracts", AUTH_BEARER, BODY_NONE,
	  ANSWER_JSON, false, false, api_contracts_list },
	{ "GET", SHAPE_KEY, "/v1/runs/", "", "/v1/runs/{key}", AUTH_BEARER, BODY_NONE,
	  ANSWER_JSON, false, false, api_runs_status },
	{ "POST", SHAPE_KEY, "/v1/runs/", "/lease", "/v1/runs/{key}/lease", AUTH_BEARER,
	  BODY_JSON, ANSWER_JSON, false, false, api_runs_lease },
	{ "POST", SHAPE_KEY, "/v1/runs/", "/transition", "/v1/runs/{key}/transition",
	  AUTH_BEARER, BODY_JSON, ANSWER_JSON, false, false, api_runs_transition },
	{ "POST", SHAPE_KEY, "/v1/runs/", "/output", "/v1/runs/{key}/output", AUTH_BEARER,
	  BODY_JSON, ANSWER_JSON, false, false, api_output_submit },
	{ "POST", SHAPE_KEY, "/v1/runs/", "/cancel", "/v1/runs/{key}/cancel", AUTH_BEARER,
	  BODY_JSON, ANSWER_JSON, false, false, api_runs_cancel },
	{ "POST", SHAPE_KEY, "/v1/approvals/", "/decisions", "/v1/approvals/{id}/decisions",
	  AUTH_BEARER, BODY_JSON, ANSWER_JSON, false, false, api_approvals_decide },
	/* Slack's interactivity URL: signed by Slack (api_chat_slack.c checks
	 * the signature over the raw body, then reads the form itself). */
	{ "POST", SHAPE_EXACT, "/v1/chat/slack/interactions", NULL,
	  "/v1/chat/slack/interactions", AUTH_NONE, BODY_NONE, ANSWER_JSON, false, false,
	  api_chat_slack_interactions },
	/* MCP (Streamable HTTP): one JSON-RPC message a POST; no SSE stream,
	 * so GET and DELETE answer 405 (api_mcp.c parses the body itself, to
	 * answer in JSON-RPC). */
	{ "POST", SHAPE_EXACT, "/v1/mcp", NULL, "/v1/mcp", AUTH_BEARER, BODY_NONE, ANSWER_JSON,
	  false, false, api_mcp_handle },
	{ "GET", SHAPE_EXACT, "/v1/openapi.json", NULL, "/v1/openapi.json", AUTH_NONE, BODY_NONE,
	  ANSWER_TEXT, false, false, api_ops_openapi },
	{ "GET", SHAPE_EXACT, "/healthz", NULL, "/healthz", AUTH_NONE, BODY_NONE, ANSWER_JSON,
	  false, false, api_ops_healthz },
	{ "GET", SHAPE_EXACT, "/readyz", NULL, "/readyz", AUTH_NONE, BODY_NONE, ANSWER_JSON,
	  false, false, api_ops_readyz },
	{ "GET", SHAPE_KEY, "/approve/", "", "/approve/{token}", AUTH_SSO, BODY_NONE,
	  ANSWER_PAGE, true, false, api_approve_handle },
	{ "POST", SHAPE_KEY, "/approve/", "", "/approve/{token}", AUTH_SSO, BODY_FORM,
	  ANSWER_PAGE, true, false, api_approve_handle },
	/* The inbox, and its entries' cards by challenge id (no token). */
	{ "GET", SHAPE_EXACT, "/approve/", NULL, "/approve/", AUTH_SSO, BODY_NONE, ANSWER_PAGE,
	  false, false, api_approve_inbox },
	{ "GET", SHAPE_KEY, "/approve/card/", "", "/approve/card/{id}", AUTH_SSO, BODY_NONE,
	  ANSWER_PAGE, false, false, api_approve_card },
	{ "POST", SHAPE_KEY, "/approve/card/", "", "/approve/card/{id}", AUTH_SSO, BODY_FORM,
	  ANSWER_PAGE, false, false, api_approve_card },
	/* No authentication here: both nginx configs answer /metrics only to
	 * loopback (allow 127.0.0.1; deny all), and only nginx reaches the
	 * responder's socket. */
	{ "GET", SHAPE_EXACT, "/metrics", NULL, "/metrics", AUTH_NONE, BODY_NONE, ANSWER_TEXT,
	  false, false, api_ops_metrics },
};

#define NROUTES (sizeof(routes) / sizeof(routes[0]))

/* The route table's labels, given to the metrics once: the histogram of
 * route i is routes[i]'s. */
static void
routes_to_metrics(void)
{
	static struct metrics_route labels[NROUTES];
	size_t i;

	for (i = 0; i < NROUTES; i++) {
		labels[i].method = routes[i].method;
		labels[i].pattern = routes[i].pattern;
	}
	metrics_routes(labels, NROUTES);
}

void
api_json_headers(struct api_call *c)
{
	(void)http_header(c->resp, "Cache-Control", "no-store");
}

/* ---- route matching ---------------------------------------------------- */

static bool
route_path_match(const struct route *r, const char *path, size_t plen, const char **key,
                 size_t *keylen)
{
	size_t pre = strlen(r->prefix), suf;
	const char *k, *slash;

	if (r->shape == SHAPE_EXACT)
		return plen == pre && memcmp(path, r->prefix, pre) == 0;
	if (plen <= pre || memcmp(path, r->prefix, pre) != 0)
		return false;
	/* The key is one raw segment: a '/' inside a key arrives as %2F. */
	k = path + pre;
	slash = memchr(k, '/', plen - pre);
	*key = k;
	*keylen = slash != NULL ? (size_t)(slash - k) : plen - pre;
	suf = plen - pre - *keylen;
	return *keylen > 0 && suf == strlen(r->suffix) && memcmp(k + *keylen, r->suffix, suf) == 0;
}

int
api_key_valid(const char *key, size_t len)
{
	const unsigned char *p = (const unsigned char *)key, *end = p + len;
	size_t chars = 0;

	if (len == 0)
		return 0;
	while (p < end) {
		unsigned c = *p, cp;
		int n;

		if (c < 0x80) {
			cp = c;
			n = 1;
		} else if ((c & 0xe0) == 0xc0) {
			cp = c & 0x1f;
			n = 2;
		} else if ((c & 0xf0) == 0xe0) {
			cp = c & 0x0f;
			n = 3;
		} else if ((c & 0xf8) == 0xf0) {
			cp = c & 0x07;
			n = 4;
		} else {
			return 0;
		}
		if (end - p < n)
			return 0;
		for (int i = 1; i < n; i++) {
			if ((p[i] & 0xc0) != 0x80)
				return 0;
			cp = cp << 6 | (p[i] & 0x3f);
		}
		/* overlong forms, surrogates, out of range */
		if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
		    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
		/* C0, DEL and C1 controls are not printable */
		if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f))
			return 0;
		p += n;
		if (++chars > OG_KEY_MAX_CHARS)
			return 0;
	}
	return 1;
}

const char *
api_key_claim_problem(const char *key, size_t len)
{
	const char *seg = key, *end = key + len, *slash;
	size_t n;

	if (!api_key_valid(key, len))
		return "key must be a string of 1 to 200 printable characters";
	/* Percent-encoded or not, "." and ".." between slashes are removed by
	 * every URL normaliser on the way (browsers, fetch, proxies, nginx), so
	 * /v1/runs/{key} would name another resource or none. */
	for (;;) {
		slash = memchr(seg, '/', (size_t)(end - seg));
		n = (size_t)((slash != NULL ? slash : end) - seg);
		if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
			return "key must not have \".\" or \"..\" as a part between slashes (or at "
			       "either end next to a slash, or as the whole key): the URL path "
			       "/v1/runs/{key} cannot carry it, so the run could never be read "
			       "or completed";
		if (slash == NULL)
			return NULL;
		seg = slash + 1;
	}
}

/* Whether route r takes method: HEAD is GET without the body wherever GET
 * is defined (RFC 9110 9.3.2; nginx sends no body to a HEAD). */
static bool
route_takes(const struct route *r, const char *method)
{
	return strcmp(method, r->method) == 0 ||
	       (strcmp(method, "HEAD") == 0 && strcmp(r->method, "GET") == 0);
}

/* The route for method and uri, with the percent-decoded path segment in
 * key; NULL with *status 404, 405 (and *allow) or 400. */
static const struct route *
route_match(const char *method, const char *uri, char *key, size_t keylen, int *status,
            const char **allow)
{
	size_t plen = http_path_len(uri), i;
	bool get = false, post = false;

	*status = 404;
	*allow = NULL;
	key[0] = '\0';
	for (i = 0; i < NROUTES; i++) {
		const char *k = NULL;
		size_t klen = 0;
		long n;

		if (!route_path_match(&routes[i], uri, plen, &k, &klen))
			continue;
		if (!route_takes(&routes[i], method)) {
			/* Allow names every method the path takes (only GET, with
			 * its HEAD, and POST exist); a later match on the method
			 * itself still wins */
			get = get || strcmp(routes[i].method, "GET") == 0;
			post = post || strcmp(routes[i].method, "POST") == 0;
			*allow = get && post ? "GET, HEAD, POST" : get ? "GET, HEAD" : "POST";
			*status = 405;
			continue;
		}
		if (k != NULL) {
			/* at most 4 bytes a character, each at most "%XX" */
			char raw[OG_KEY_MAX_CHARS * 4 * 3 + 1];

			if (klen >= sizeof(raw) || (n = http_pct_decode(k, klen, raw)) < 0 ||
			    (size_t)n >= keylen || !api_key_valid(raw, (size_t)n)) {
				*status = 400;
				return NULL;
			}
			memcpy(key, raw, (size_t)n + 1);
		}
		*status = 200;
		return &routes[i];
	}
	return NULL;
}

const char *
api_route(const char *method, const char *uri, char *key, size_t keylen, int *status,
          const char **allow)
{
	const struct route *r = route_match(method, uri, key, keylen, status, allow);

	return r != NULL ? r->pattern : NULL;
}

/* ---- answering ------------------------------------------------------- */

void
api_log(struct api_call *c, enum log_level level, const char *event, struct log_fields *f)
{
	if (!log_enabled(level))
		return;
	/* the API client, or the client of the run an approval page is about */
	f->client = c->authed || c->client.id > 0 ? c->client.name : NULL;
	if (f->key == NULL && c->key[0] != '\0')
		f->key = c->key;
	f->request_id = c->req->request_id;
	f->method = c->req->method;
	f->path = c->pattern;
	f->status = c->resp->status;
	log_event(level, event, f);
}

void
api_run_path(const struct api_call *c, char out[API_RUN_PATH_MAX])
{
	memcpy(out, "/v1/runs/", 9);
	http_pct_encode(c->key, strnlen(c->key, sizeof(c->key)), out + 9);
}

/* ---- problems -------------------------------------------------------- */

/* Every error the API answers, by its stable code: the status it always
 * has, the title of its problem type (RFC 9457: the same for every
 * occurrence; the detail says what this one was) and the result of the
 * data or use-case layers (og_rc) it answers, if any. This table is the one
 * mapping of a result to a status: api_fail and api_refuse look it up. */
static const struct problem_type {
	const char *code;
	int status;
	const char *title;
	enum og_rc rc; /* OG_OK: a code no result of the layers below turns into */
} problem_types[] = {
	{ "invalid_json", 400, "The body is not acceptable JSON", OG_OK },
	{ "invalid_key", 400, "The key is not one that can be used", OG_OK },
	{ "invalid_field", 400, "A field of the body is missing or wrong", OG_OK },
	{ "invalid_idempotency_key", 400, "The Idempotency-Key header is malformed", OG_OK },
	{ "key_mismatch", 400, "Idempotency-Key and the body's key differ", OG_OK },
	{ "unauthorized", 401, "An API key is required", OG_DENIED },
	{ "invalid_signature", 401, "The request is not signed by the chat, or came before",
	  OG_OK },
	{ "forbidden", 403, "The client may not do this", OG_OK },
	{ "not_an_approver", 403, "The person is not among the challenge's approvers", OG_OK },
	{ "separation_of_duties", 403, "The requester may not approve their own request", OG_OK },
	{ "approval_not_found", 404, "No such approval", OG_OK },
	{ "not_found", 404, "No such route", OG_OK },
	{ "run_not_found", 404, "No such run", OG_NOT_FOUND },
	{ "method_not_allowed", 405, "This path does not take this method", OG_OK },
	{ "lease_lost", 409, "This execution no longer owns the run", OG_LEASE_LOST },
	{ "lease_cap_reached", 409, "The claim reached its total lease lifetime", OG_CAP_REACHED },
	{ "window_closed", 409, "Nothing is left to cancel", OG_WINDOW_CLOSED },
	{ "already_voted", 409, "The person has already decided on this run", OG_OK },
	{ "draft_changed", 409, "The draft is not the one read", OG_OK },
	{ "not_editable", 409, "The draft cannot be corrected now", OG_OK },
	{ "used", 409, "Another decision settled the run first", OG_OK },
	{ "approval_closed", 409, "The approval no longer takes a decision", OG_OK },
	{ "key_expired", 410, "The key's duplicate window has passed", OG_OK },
	{ "body_too_large", 413, "The body is too large", OG_OK },
	{ "unsupported_media_type", 415, "The body must be JSON", OG_OK },
	{ "payload_mismatch", 422, "The key was claimed with another payload", OG_MISMATCH },
	{ "unknown_contract", 422, "No such contract", OG_OK },
	{ "effect_not_allowed", 422, "The contract does not allow this effect", OG_OK },
	{ "unknown_target", 422, "No such target", OG_OK },
	{ "callback_not_allowed", 422, "The callback URL's origin is not allowed", OG_OK },
	{ "requested_by_required", 422, "The contract requires requested_by", OG_OK },
	{ "decision_not_allowed", 422, "The approval does not allow this decision", OG_OK },
	{ "invalid_edit", 422, "A correction does not pass the contract", OG_OK },
	{ "feedback_required", 422, "A request for changes needs its feedback", OG_OK },
	{ "invalid_feedback", 422, "The feedback is not acceptable text", OG_OK },
	{ "feedback_unwanted", 422, "Feedback goes with a request for changes only", OG_OK },
	{ "requested_by_not_a_person", 422, "requested_by must name a person by mail address",
	  OG_OK },
	{ "internal_error", 500, "Internal error", OG_ERROR },
	{ "database_unavailable", 503, "The database is unavailable", OG_UNAVAILABLE },
};

#define PROBLEM_TYPES (sizeof(problem_types) / sizeof(problem_types[0]))
#define PROBLEM_INTERNAL (&problem_types[PROBLEM_TYPES - 2])

/* The problem type of a stable code; internal_error for a code missing
 * from the table (our bug). */
static const struct problem_type *
problem_named(const char *code)
{
	size_t i;

	for (i = 0; i < PROBLEM_TYPES; i++)
		if (strcmp(problem_types[i].code, code) == 0)
			return &problem_types[i];
	return PROBLEM_INTERNAL;
}

/* The problem type a result answers; internal_error for a result that is
 * no answer to a caller (a bug or a broken invariant). */
static const struct problem_type *
problem_of(enum og_rc rc)
{
	size_t i;

	for (i = 0; rc != OG_OK && i < PROBLEM_TYPES; i++)
		if (problem_types[i].rc == rc)
			return &problem_types[i];
	return PROBLEM_INTERNAL;
}

/* The one place an error becomes an answer: the problem document of type t
 * with detail and the extension members of ext (reference taken), and the
 * headers its status calls for. */
static void
api_problem(struct api_call *c, const struct problem_type *t, const char *detail, json_t *ext)
{
	char retry[16];

	if (ext == NULL)
		ext = json_object();
	/* The run a refusal of its state concerns (404, 409, 422), as its URL
	 * path; a malformed request concerns no run. */
	if (c->key[0] != '\0' && c->route != NULL && !c->route->token &&
	    (t->status == 404 || t->status == 409 || t->status == 422)) {
		char path[API_RUN_PATH_MAX];

		api_run_path(c, path);
		json_object_set_new(ext, "instance", json_string(path));
	}
	if (c->req->request_id != NULL && c->req->request_id[0] != '\0')
		json_object_set_new(ext, "request_id", json_string(c->req->request_id));
	http_problem(c->resp, t->status, t->code, t->title, detail, ext);
	switch (t->status) {
	case 401:
		/* RFC 6750: no error code when no credentials came at all */
		(void)http_header(c->resp, "WWW-Authenticate",
		                  http_bearer(c->req->authorization) == NULL
		                      ? "Bearer realm=\"oncegate\""
		                      : "Bearer realm=\"oncegate\", error=\"invalid_token\", "
		                        "error_description=\"the API key is unknown or revoked\"");
		break;
	case 503:
		snprintf(retry, sizeof(retry), "%d", c->ctx->cfg->retry_after_seconds);
		(void)http_header(c->resp, "Retry-After", retry);
		break;
	default:
		break;
	}
}

static bool call_authenticate(struct api_call *c);

/* Before any answer but the claim's own: a deferred authentication is done
 * first, so that a caller without a valid key learns nothing about its
 * request. False when it failed and was answered (401, 503). */
static bool
answer_authenticated(struct api_call *c)
{
	char first;

	if (!c->auth_deferred)
		return true;
	/* the 401 line must not carry a key of the caller's choosing */
	first = c->key[0];
	c->key[0] = '\0';
	if (!call_authenticate(c))
		return false;
	c->key[0] = first;
	return true;
}

/* A 4xx for bad input: the problem document, and one request.invalid line
 * (auth.failed for 401). */
void
api_reject(struct api_call *c, const char *code, const char *message, const char *field)
{
	struct log_fields f = { 0 };
	json_t *ext;

	if (!answer_authenticated(c))
		return;
	ext = json_object();
	if (field != NULL)
		json_object_set_new(ext, "field", json_string(field));
	api_problem(c, problem_named(code), message, ext);
	f.reason = code;
	f.detail = message;
	f.validation = field;
	if (c->resp->status == 401)
		metrics_count(METRICS_AUTH_FAILED);
	api_log(c, LOG_LEVEL_NOTICE, c->resp->status == 401 ? "auth.failed" : "request.invalid",
	        &f);
}

/* The problem document of stable code with the members of ext (reference
 * taken); no log line: the caller writes its own. */
void
api_answer_problem(struct api_call *c, const char *code, const char *message, json_t *ext)
{
	if (!answer_authenticated(c)) {
		json_decref(ext);
		return;
	}
	api_problem(c, problem_named(code), message, ext);
}

/* A refusal about the run itself (404, 409, 422): the problem document of
 * the result with the members ext names; the caller writes the log line. */
void
api_refuse(struct api_call *c, enum og_rc rc, const char *message, json_t *ext)
{
	if (!answer_authenticated(c)) {
		json_decref(ext);
		return;
	}
	api_problem(c, problem_of(rc), message, ext);
}

static void
api_unavailable(struct api_call *c, const char *detail)
{
	struct log_fields f = { 0 };

	api_problem(c, problem_of(OG_UNAVAILABLE),
	            "the database is unavailable; nothing was changed, retry later", NULL);
	f.detail = detail;
	f.hint = "check that PostgreSQL is up and reachable";
	api_log(c, LOG_LEVEL_ERROR, "db.unavailable", &f);
}

/* 503 with Retry-After while the schema is not the one this build expects:
 * the problem document (or, on the approval pages, the notice page) says
 * why. One line at debug level: the state change was logged once. */
static void
api_schema_wait(struct api_call *c)
{
	struct log_fields f = { 0 };
	char why[512], retry[16];

	(void)schema_version_why(why, sizeof(why));
	f.reason = "schema_mismatch";
	if (c->route->answer == ANSWER_PAGE) {
		snprintf(retry, sizeof(retry), "%d", c->ctx->cfg->retry_after_seconds);
		(void)http_header(c->resp, "Retry-After", retry);
		api_card_notice(c, 503, "schema.wait", "Try again shortly",
		                "oncegate is being upgraded; nothing was recorded.", &f);
		return;
	}
	api_problem(c, problem_of(OG_UNAVAILABLE), why, NULL);
	api_log(c, LOG_LEVEL_DEBUG, "schema.wait", &f);
}

void
api_internal(struct api_call *c, const char *detail)
{
	struct log_fields f = { 0 };

	if (!answer_authenticated(c))
		return;
	api_problem(c, PROBLEM_INTERNAL, "internal error; nothing was changed", NULL);
	f.detail = detail;
	api_log(c, LOG_LEVEL_ERROR, "request.failed", &f);
}

/* The one place a failure of the layers below becomes an answer: the
 * database's own words go to the log, never to the caller. */
void
api_fail(struct api_call *c, enum og_rc rc)
{
	struct log_fields f = { 0 };

	if (rc != OG_UNAVAILABLE && !answer_authenticated(c))
		return;
	switch (rc) {
	case OG_UNAVAILABLE:
		api_unavailable(c, db_error(c->ctx->db));
		break;
	case OG_NOT_FOUND:
		api_refuse(c, OG_NOT_FOUND, "no run with this key", NULL);
		api_log(c, LOG_LEVEL_INFO, "run.not_found", &f);
		break;
	default:
		api_internal(c, db_error(c->ctx->db));
		break;
	}
}

/* 409 lease_lost: the caller no longer owns the run and must stop. One
 * lease.lost line with whatever f already says about the run. */
void
api_lease_lost(struct api_call *c, struct log_fields *f)
{
	api_refuse(c, OG_LEASE_LOST, "this execution no longer owns the run; stop", NULL);
	f->reason = "lease_lost";
	api_log(c, LOG_LEVEL_WARNING, "lease.lost", f);
}

/* ---- field readers: each rejects with a clear message ------------------- */

bool
api_printable(const char *s)
{
	for (; *s != '\0'; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

/* Optional string field of at most max characters (code points); null is
 * taken as absent, as the OpenAPI document says of every such member. */
bool
api_opt_string(struct api_call *c, const char *name, size_t max, const char **out)
{
	json_t *v = json_object_get(c->body, name);
	char msg[128];

	*out = NULL;
	if (v == NULL || json_is_null(v))
		return true;
	if (!json_is_string(v)) {
		snprintf(msg, sizeof(msg), "%s must be a string", name);
		api_reject(c, "invalid_field", msg, name);
		return false;
	}
	if (strlen(json_string_value(v)) != json_string_length(v) ||
	    utf8_chars(json_string_value(v)) > max || !api_printable(json_string_value(v))) {
		snprintf(msg, sizeof(msg), "%s must be printable text of at most %zu characters",
		         name, max);
		api_reject(c, "invalid_field", msg, name);
		return false;
	}
	*out = json_string_value(v);
	return true;
}

bool
api_opt_int(struct api_call *c, const char *name, long long lo, long long hi,
            long long def, long long *out)
{
	json_t *v = json_object_get(c->body, name);
	char msg[128];

	*out = def;
	if (v == NULL)
		return true;
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
		snprintf(msg, sizeof(msg), "%s must be an integer from %lld to %lld", name, lo, hi);
		api_reject(c, "invalid_field", msg, name);
		return false;
	}
	*out = json_integer_value(v);
	return true;
}

bool
api_req_int(struct api_call *c, const char *name, long long lo, long long hi,
            long long *out)
{
	char msg[128];

	if (json_object_get(c->body, name) == NULL) {
		snprintf(msg, sizeof(msg), "%s is required", name);
		api_reject(c, "invalid_field", msg, name);
		return false;
	}
	return api_opt_int(c, name, lo, hi, 0, out);
}

bool
api_req_owner(struct api_call *c, const char **owner)
{
	json_t *v = json_object_get(c->body, "lease_owner");

	if (!json_is_string(v) || !ledger_uuid_valid(json_string_value(v))) {
		api_reject(c, "invalid_field",
		           "lease_owner must be the UUID returned by the claim", "lease_owner");
		return false;
	}
	*owner = json_string_value(v);
	return true;
}

/* Refuses members the route does not know: a typo must not pass silently. */
bool
api_only_fields(struct api_call *c, const char *const *allowed)
{
	const char *name;
	json_t *v;
	char msg[160];

	json_object_foreach(c->body, name, v) {
		size_t i;

		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(name, allowed[i]) == 0)
				break;
		if (allowed[i] == NULL) {
			snprintf(msg, sizeof(msg), "unknown field \"%.64s\"", name);
			api_reject(c, "invalid_field", msg, NULL);
			return false;
		}
	}
	(void)v;
	return true;
}

/* ---- the pipeline ---------------------------------------------------- */

/* Reads the claim's Idempotency-Key header, if any, into c->idem. */
static void
call_idempotency_key(struct api_call *c)
{
	c->idem_len = -1;
	if (c->req->idempotency_key == NULL)
		return;
	if (c->req->idempotency_key_fields > 1) {
		c->idem_problem = "more than one Idempotency-Key was sent";
		return;
	}
	c->idem_len = http_idempotency_key(c->req->idempotency_key, c->idem, sizeof(c->idem),
	                                   &c->idem_problem);
}

/* Authenticates the request: one round trip (none for a key of the wrong
 * shape). */
static bool
call_authenticate(struct api_call *c)
{
	const char *key = http_bearer(c->req->authorization);
	enum og_rc rc;

	c->auth_deferred = false;
	if (key == NULL) {
		api_reject(c, "unauthorized", "an API key is required in the Authorization header",
		           NULL);
		return false;
	}
	rc = clients_authenticate(c->ctx->db, key, &c->client);
	if (rc == OG_UNAVAILABLE) {
		api_fail(c, OG_UNAVAILABLE);
		return false;
	}
	if (rc != OG_OK) {
		api_reject(c, "unauthorized", "the API key is unknown or revoked", NULL);
		return false;
	}
	c->authed = true;
	return true;
}

/* A claim is authenticated by its own statement, which saves a round trip:
 * here the key is only checked for shape and hashed. */
static bool
call_defer_authentication(struct api_call *c)
{
	const char *key = http_bearer(c->req->authorization);

	if (key == NULL || !clients_key_hash(key, c->auth_hash))
		return call_authenticate(c); /* answers 401 without a round trip */
	c->auth_deferred = true;
	return true;
}

/* The claim's statement authenticated the key (denied: it did not, and
 * nothing was written). */
void
api_claim_authenticated(struct api_call *c, bool denied)
{
	c->auth_deferred = false;
	if (denied) {
		c->key[0] = '\0'; /* an unauthenticated caller's key is not logged */
		api_reject(c, "unauthorized", "the API key is unknown or revoked", NULL);
	} else {
		c->authed = true;
	}
}

/* The body's answer when it is refused (given after authentication: an
 * unauthenticated caller learns nothing about its body). */
struct body_error {
	const char *code;
	char message[JSON_ERROR_TEXT_LENGTH + 256];
};

/* The cap every route that takes a body holds it to; the transport
 * discards what passes it and says so. */
static bool
body_too_large(const struct api_call *c)
{
	return c->req->body_too_large || c->req->body_len > (size_t)c->ctx->cfg->max_body_bytes;
}

/* Parses a JSON body into c->body; false with the answer in e when it is
 * not acceptable. */
static bool
call_parse_body(struct api_call *c, struct body_error *e)
{
	struct canon_where where;
	char problem[JSON_ERROR_TEXT_LENGTH + 160];
	json_error_t jerr;
	enum canon_rc crc;

	e->code = "invalid_json";
	if (!http_is_json(c->req->content_type)) {
		e->code = "unsupported_media_type";
		snprintf(e->message, sizeof(e->message),
		         "the body must be sent as Content-Type: application/json");
		return false;
	}
	if (body_too_large(c)) {
		e->code = "body_too_large";
		snprintf(e->message, sizeof(e->message), "the body is larger than %d bytes",
		         c->ctx->cfg->max_body_bytes);
		return false;
	}
	if (c->req->body == NULL || c->req->body_len == 0) {
		snprintf(e->message, sizeof(e->message), "the body is empty");
		return false;
	}
	/* The strict parser first: every field of every route is then held to
	 * the same rules (numbers a double can hold, no lone surrogates), and
	 * its problems come in the writer's words with where they are. */
	crc = canon_validate(c->req->body, c->req->body_len, &where);
	if (crc != CANON_OK) {
		canon_describe(crc, &where, problem, sizeof(problem));
		snprintf(e->message, sizeof(e->message), "the body is not valid JSON: %s", problem);
		return false;
	}
	c->body = canon_json_loadb(c->req->body, c->req->body_len, JSON_REJECT_DUPLICATES, &jerr);
	if (c->body == NULL) {
		snprintf(e->message, sizeof(e->message),
		         "the body is not valid JSON: %s at line %d column %d",
		         canon_jansson_problem(jerr.text) ?: jerr.text, jerr.line, jerr.column);
		return false;
	}
	if (!json_is_object(c->body)) {
		json_decref(c->body);
		c->body = NULL;
		snprintf(e->message, sizeof(e->message), "the body must be a JSON object");
		return false;
	}
	return true;
}

void
api_handle(struct api_ctx *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api_call c;
	struct body_error berr;
	const char *allow;
	bool body_ok = true;
	int status;
	struct timespec t0, t1;
	static pthread_once_t routes_given = PTHREAD_ONCE_INIT;

	(void)pthread_once(&routes_given, routes_to_metrics);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	memset(&c, 0, sizeof(c));
	c.ctx = ctx;
	c.req = req;
	c.resp = resp;
	db_rollback(ctx->db);

	c.route = route_match(req->method, req->uri, c.key, sizeof(c.key), &status, &allow);
	if (c.route == NULL) {
		if (strncmp(req->uri, "/approve/", 9) == 0) {
			api_approve_security_headers(&c);
		} else {
			api_json_headers(&c);
		}
		if (status == 405) {
			(void)http_header(resp, "Allow", allow);
			api_reject(&c, "method_not_allowed",
			           "this path does not accept this method", NULL);
		} else if (status == 400) {
			c.key[0] = '\0';
			api_reject(&c, "invalid_key",
			           "the key in the path must be 1 to 200 printable characters, "
			           "percent-encoded",
			           NULL);
		} else {
			api_reject(&c, "not_found", "no such route", NULL);
		}
		return;
	}
	c.pattern = c.route->pattern;
	if (c.route->token) {
		/* the segment is a secret: keep it out of c.key, which is logged */
		snprintf(c.token, sizeof(c.token), "%s", c.key);
		c.key[0] = '\0';
	}
	switch (c.route->answer) {
	case ANSWER_JSON:
		api_json_headers(&c);
		break;
	case ANSWER_PAGE:
		api_approve_headers(&c);
		break;
	case ANSWER_TEXT:
		break;
	}
	/* A schema this build was not made for: nothing but liveness,
	 * readiness and the metrics (which say why, and keep the last figures
	 * read so that the alerts do not resolve) is answered, and nothing is
	 * read or written. */
	if (c.route->handler != api_ops_healthz && c.route->handler != api_ops_readyz &&
	    c.route->handler != api_ops_metrics && !schema_version_serving(ctx->db)) {
		api_schema_wait(&c);
		goto out;
	}
	if (c.route->claim_auth)
		call_idempotency_key(&c);
	switch (c.route->body) {
	case BODY_NONE:
		break;
	case BODY_JSON:
		body_ok = call_parse_body(&c, &berr);
		break;
	case BODY_FORM:
		/* answered by the page, once it knows the link is real */
		c.body_refused = !http_is_form(req->content_type) || body_too_large(&c);
		break;
	}
	switch (c.route->auth) {
	case AUTH_NONE:
		break;
	case AUTH_BEARER:
		if (!(c.route->claim_auth ? call_defer_authentication(&c) : call_authenticate(&c)))
			goto out;
		break;
	case AUTH_SSO:
		if (!api_approve_signed_in(&c))
			goto out;
		break;
	}
	if (!body_ok) {
		api_reject(&c, berr.code, berr.message, NULL);
		goto out;
	}
	c.route->handler(&c);
out:
	clock_gettime(CLOCK_MONOTONIC, &t1);
	metrics_observe_request((size_t)(c.route - routes),
	                        (double)(t1.tv_sec - t0.tv_sec) +
	                            (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	json_decref(c.body);
	digest_wipe(c.token, sizeof(c.token));
}

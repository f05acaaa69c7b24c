/*
 * api.c — routes and handlers of the workflow API.
 *
 * Every request goes through the same steps: match the route table, check
 * authentication, check the body's media type, size and JSON shape, then
 * call the handler. Every answer that is a decision writes exactly one line
 * to the decision log.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "api.h"
#include "canon.h"
#include "clients.h"
#include "contract.h"
#include "csrf.h"
#include "digest.h"
#include "effect.h"
#include "gate.h"
#include "ledger.h"
#include "metrics.h"
#include "outbox.h"
#include "replay.h"
#include "page.h"
#include "token.h"
#include "caps.h"
#include "log.h"

enum route_id {
	ROUTE_CLAIM,
	ROUTE_STATUS,
	ROUTE_LEASE,
	ROUTE_TRANSITION,
	ROUTE_HEALTHZ,
	ROUTE_OUTPUT,
	ROUTE_CANCEL,
	ROUTE_APPROVE_PAGE,
	ROUTE_APPROVE_DECIDE,
	ROUTE_METRICS,
};

enum route_auth {
	AUTH_NONE,
	AUTH_BEARER,   /* an API client's key */
	AUTH_SSO,      /* a person signed in through nginx (REMOTE_USER) */
};

enum route_body {
	BODY_NONE,
	BODY_JSON,     /* a JSON object */
	BODY_FORM,     /* an HTML form post */
};

/* What a route's path looks like. */
enum route_shape {
	SHAPE_EXACT,      /* the path is exactly prefix */
	SHAPE_KEY,        /* prefix + {key} + suffix ("" for none) */
};

struct route {
	enum route_id id;
	const char *method;
	enum route_shape shape;
	const char *prefix;
	const char *suffix;
	const char *pattern;  /* for logs and errors; never the raw path */
	enum route_auth auth;
	enum route_body body;
	bool token;           /* the path segment is an approval token, not a key */
};

static const struct route routes[] = {
	{ ROUTE_CLAIM, "POST", SHAPE_EXACT, "/v1/runs", NULL, "/v1/runs", AUTH_BEARER,
	  BODY_JSON, false },
	{ ROUTE_STATUS, "GET", SHAPE_KEY, "/v1/runs/", "", "/v1/runs/{key}", AUTH_BEARER,
	  BODY_NONE, false },
	{ ROUTE_LEASE, "POST", SHAPE_KEY, "/v1/runs/", "/lease", "/v1/runs/{key}/lease",
	  AUTH_BEARER, BODY_JSON, false },
	{ ROUTE_TRANSITION, "POST", SHAPE_KEY, "/v1/runs/", "/transition",
	  "/v1/runs/{key}/transition", AUTH_BEARER, BODY_JSON, false },
	{ ROUTE_OUTPUT, "POST", SHAPE_KEY, "/v1/runs/", "/output", "/v1/runs/{key}/output",
	  AUTH_BEARER, BODY_JSON, false },
	{ ROUTE_CANCEL, "POST", SHAPE_KEY, "/v1/runs/", "/cancel", "/v1/runs/{key}/cancel",
	  AUTH_BEARER, BODY_JSON, false },
	{ ROUTE_HEALTHZ, "GET", SHAPE_EXACT, "/healthz", NULL, "/healthz", AUTH_NONE, BODY_NONE,
	  false },
	{ ROUTE_APPROVE_PAGE, "GET", SHAPE_KEY, "/approve/", "", "/approve/{token}", AUTH_SSO,
	  BODY_NONE, true },
	{ ROUTE_APPROVE_DECIDE, "POST", SHAPE_KEY, "/approve/", "", "/approve/{token}",
	  AUTH_SSO, BODY_FORM, true },
	/* No authentication here: both nginx configs answer /metrics only to
	 * loopback (allow 127.0.0.1; deny all), and only nginx reaches the
	 * responder's socket. */
	{ ROUTE_METRICS, "GET", SHAPE_EXACT, "/metrics", NULL, "/metrics", AUTH_NONE, BODY_NONE,
	  false },
};

#define NROUTES (sizeof(routes) / sizeof(routes[0]))

size_t
api_route_count(void)
{
	return NROUTES;
}

void
api_route_label(size_t i, const char **method, const char **pattern)
{
	*method = i < NROUTES ? routes[i].method : NULL;
	*pattern = i < NROUTES ? routes[i].pattern : NULL;
}

static const struct db_stmt st_ping = { "api_ping", "SELECT 1", 0, true };

/* The state of one request while it is handled. */
struct call {
	struct api_ctx *ctx;
	const struct http_request *req;
	struct http_response *resp;
	const struct route *route;
	const char *pattern;
	struct client client;
	bool authed;
	char key[OG_KEY_MAX_CHARS * 4 + 1];
	json_t *body;
	/* The claim's look-up, when it travelled with the authentication. */
	struct ledger_lookup lookup;
	struct db_call prefetch;
	bool prefetched;
	char token[OG_KEY_MAX_CHARS * 4 + 1]; /* approval routes: the raw token */
};

static void handle_output(struct call *c);
static void handle_cancel(struct call *c);
static void approve_handle(struct call *c);

static void
json_headers(struct call *c)
{
	(void)http_header(c->resp, "Content-Type", "application/json");
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
			       "/v1/runs/{key} cannot carry it, so the run could never be read or "
			       "completed";
		if (slash == NULL)
			return NULL;
		seg = slash + 1;
	}
}

/* The route for method and uri, with the percent-decoded path segment in
 * key; NULL with *status 404, 405 (and *allow) or 400. */
static const struct route *
route_match(const char *method, const char *uri, char *key, size_t keylen, int *status,
            const char **allow)
{
	size_t plen = http_path_len(uri), i;

	*status = 404;
	*allow = NULL;
	key[0] = '\0';
	for (i = 0; i < NROUTES; i++) {
		const char *k = NULL;
		size_t klen = 0;
		long n;

		if (!route_path_match(&routes[i], uri, plen, &k, &klen))
			continue;
		if (strcmp(method, routes[i].method) != 0) {
			/* Allow names every method the path takes (only GET and POST
			 * exist); a later match on the method itself still wins */
			*allow = *status == 405 && *allow != NULL && strcmp(*allow, routes[i].method) != 0
			             ? "GET, POST"
			             : routes[i].method;
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

static void
call_log(struct call *c, enum log_level level, const char *event, struct log_fields *f)
{
	if (!log_enabled(level))
		return;
	f->client = c->authed ? c->client.name : NULL;
	if (f->key == NULL && c->key[0] != '\0')
		f->key = c->key;
	f->request_id = c->req->request_id;
	f->method = c->req->method;
	f->path = c->pattern;
	f->status = c->resp->status;
	log_event(level, event, f);
}

/* A 4xx for bad input: the error body, and one request.invalid line. */
static void
call_reject(struct call *c, int status, const char *code, const char *message,
            const char *field)
{
	struct log_fields f = { 0 };
	json_t *err = json_pack("{s:s, s:s}", "error", code, "message", message);

	if (field != NULL)
		json_object_set_new(err, "field", json_string(field));
	http_json(c->resp, status, err);
	f.reason = code;
	f.detail = message;
	f.validation = field;
	call_log(c, LOG_LEVEL_NOTICE, status == 401 ? "auth.failed" : "request.invalid", &f);
}

static void
call_unavailable(struct call *c, const char *detail)
{
	struct log_fields f = { 0 };
	char retry[16];

	snprintf(retry, sizeof(retry), "%d", c->ctx->cfg->retry_after_seconds);
	http_error(c->resp, 503, "database_unavailable",
	           "the database is unavailable; nothing was changed, retry later");
	(void)http_header(c->resp, "Retry-After", retry);
	f.detail = detail;
	f.hint = "check that PostgreSQL is up and reachable";
	call_log(c, LOG_LEVEL_ERROR, "db.unavailable", &f);
}

static void
call_internal(struct call *c, const char *detail)
{
	struct log_fields f = { 0 };

	http_error(c->resp, 500, "internal_error", "internal error; nothing was changed");
	f.detail = detail;
	call_log(c, LOG_LEVEL_ERROR, "request.failed", &f);
}

/* Maps a ledger failure that is not a business answer. */
static void
call_ledger_failure(struct call *c, enum ledger_rc rc)
{
	struct log_fields f = { 0 };

	switch (rc) {
	case LEDGER_UNAVAILABLE:
		call_unavailable(c, db_error(c->ctx->db));
		break;
	case LEDGER_NOT_FOUND:
		http_error(c->resp, 404, "run_not_found", "no run with this key");
		call_log(c, LOG_LEVEL_INFO, "run.not_found", &f);
		break;
	default:
		call_internal(c, db_error(c->ctx->db));
		break;
	}
}

/* 409 lease_lost: the caller no longer owns the run and must stop. One
 * lease.lost line with whatever f already says about the run. */
static void
call_lease_lost(struct call *c, struct log_fields *f)
{
	http_json(c->resp, 409,
	          json_pack("{s:s, s:s}", "error", "lease_lost", "message",
	                    "this execution no longer owns the run; stop"));
	f->reason = "lease_lost";
	call_log(c, LOG_LEVEL_WARNING, "lease.lost", f);
}

/* ---- field readers: each rejects with a clear message ------------------- */

static bool
printable_text(const char *s)
{
	for (; *s != '\0'; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

/* Optional string field of at most max bytes. */
static bool
opt_string(struct call *c, const char *name, size_t max, const char **out)
{
	json_t *v = json_object_get(c->body, name);
	char msg[128];

	*out = NULL;
	if (v == NULL || json_is_null(v))
		return true;
	if (!json_is_string(v)) {
		snprintf(msg, sizeof(msg), "%s must be a string", name);
		call_reject(c, 400, "invalid_field", msg, name);
		return false;
	}
	if (json_string_length(v) > max || !printable_text(json_string_value(v)) ||
	    strlen(json_string_value(v)) != json_string_length(v)) {
		snprintf(msg, sizeof(msg), "%s must be printable text of at most %zu bytes",
		         name, max);
		call_reject(c, 400, "invalid_field", msg, name);
		return false;
	}
	*out = json_string_value(v);
	return true;
}

static bool
opt_int(struct call *c, const char *name, long long lo, long long hi, long long def,
        long long *out)
{
	json_t *v = json_object_get(c->body, name);
	char msg[128];

	*out = def;
	if (v == NULL)
		return true;
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
		snprintf(msg, sizeof(msg), "%s must be an integer from %lld to %lld", name, lo, hi);
		call_reject(c, 400, "invalid_field", msg, name);
		return false;
	}
	*out = json_integer_value(v);
	return true;
}

static bool
req_int(struct call *c, const char *name, long long lo, long long hi, long long *out)
{
	char msg[128];

	if (json_object_get(c->body, name) == NULL) {
		snprintf(msg, sizeof(msg), "%s is required", name);
		call_reject(c, 400, "invalid_field", msg, name);
		return false;
	}
	return opt_int(c, name, lo, hi, 0, out);
}

static bool
req_owner(struct call *c, const char **owner)
{
	json_t *v = json_object_get(c->body, "lease_owner");

	if (!json_is_string(v) || !ledger_uuid_valid(json_string_value(v))) {
		call_reject(c, 400, "invalid_field",
		            "lease_owner must be the UUID returned by the claim", "lease_owner");
		return false;
	}
	*owner = json_string_value(v);
	return true;
}

/* Refuses members the route does not know: a typo must not pass silently. */
static bool
only_fields(struct call *c, const char *const *allowed)
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
			call_reject(c, 400, "invalid_field", msg, NULL);
			return false;
		}
	}
	(void)v;
	return true;
}

/* ---- handlers -------------------------------------------------------- */

static void
json_set_opt(json_t *o, const char *name, const char *v)
{
	if (v != NULL && v[0] != '\0')
		json_object_set_new(o, name, json_string(v));
}

static void
handle_claim(struct call *c)
{
	static const char *const fields[] = { "key", "payload", "workflow_version", "trigger",
		                              "correlation_id", "event_id", "lease_seconds",
		                              NULL };
	const struct config *cfg = c->ctx->cfg;
	struct ledger_claim lc = { 0 };
	struct ledger_run run = { 0 };
	struct log_fields f = { 0 };
	char hash[CANON_HASH_LEN];
	char *payload = NULL;
	size_t payload_len;
	long long lease;
	enum canon_rc crc;
	enum ledger_rc rc;
	const char *problem;
	json_t *key, *out;

	if (!only_fields(c, fields))
		goto out;
	key = json_object_get(c->body, "key");
	if (!json_is_string(key) || strlen(json_string_value(key)) != json_string_length(key)) {
		call_reject(c, 400, "invalid_key",
		            "key must be a string of 1 to 200 printable characters", "key");
		goto out;
	}
	if ((problem = api_key_claim_problem(json_string_value(key), json_string_length(key))) !=
	    NULL) {
		call_reject(c, 400, "invalid_key", problem, "key");
		goto out;
	}
	snprintf(c->key, sizeof(c->key), "%s", json_string_value(key));
	if (json_object_get(c->body, "payload") == NULL) {
		call_reject(c, 400, "invalid_field", "payload is required", "payload");
		goto out;
	}
	if (!opt_string(c, "workflow_version", OG_FIELD_MAX, &lc.workflow_version) ||
	    !opt_string(c, "trigger", OG_FIELD_MAX, &lc.trigger) ||
	    !opt_string(c, "correlation_id", OG_FIELD_MAX, &lc.correlation_id) ||
	    !opt_string(c, "event_id", OG_FIELD_MAX, &lc.event_id) ||
	    !opt_int(c, "lease_seconds", 1, cfg->lease_max_seconds, cfg->lease_default_seconds,
	             &lease))
		goto out;

	/* The hash is over the payload exactly as sent (numbers as given),
	 * which jansson cannot reproduce, hence our own canonicaliser. */
	crc = canon_member(c->req->body, c->req->body_len, "payload", &payload, &payload_len);
	if (crc != CANON_OK) {
		call_reject(c, 400, "invalid_json", canon_strerror(crc), "payload");
		goto out;
	}
	canon_hash(payload, payload_len, hash);

	lc.client_id = c->client.id;
	lc.key = c->key;
	lc.payload = payload;
	lc.payload_hash = hash;
	lc.lease_seconds = (int)lease;
	lc.cap_seconds = cfg->lease_cap_seconds;
	rc = ledger_claim(c->ctx->db, &lc, c->prefetched ? &c->prefetch : NULL, &run);

	f.correlation_id = lc.correlation_id;
	f.workflow_version = lc.workflow_version;
	f.trigger = lc.trigger;
	f.payload_hash = hash;
	switch (rc) {
	case LEDGER_CLAIMED:
		out = json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:i, s:s}", "outcome", "claimed",
		                "key", c->key, "state", "processing", "lease_owner",
		                run.lease_owner, "version", (json_int_t)run.version,
		                "lease_expires_at", run.lease_expires_at, "attempt", run.attempt,
		                "payload_hash", hash);
		http_json(c->resp, 201, out);
		metrics_count(METRICS_CLAIM_CLAIMED);
		if (run.lease_reclaimed)
			metrics_count(METRICS_RUN_LEASE_RECLAIMED);
		f.state_to = "processing";
		f.version = run.version;
		f.attempt = run.attempt;
		call_log(c, LOG_LEVEL_INFO, "run.claimed", &f);
		break;
	case LEDGER_DUPLICATE:
		out = json_pack("{s:s, s:s, s:s, s:I}", "outcome", "duplicate", "key", c->key,
		                "state", ledger_state_name(run.state), "version",
		                (json_int_t)run.version);
		if (run.result != NULL)
			json_object_set(out, "result", run.result);
		if (run.lease_live)
			json_set_opt(out, "lease_expires_at", run.lease_expires_at);
		http_json(c->resp, 200, out);
		metrics_count(METRICS_CLAIM_DUPLICATE);
		f.state_from = ledger_state_name(run.state);
		f.version = run.version;
		f.attempt = run.attempt;
		call_log(c, LOG_LEVEL_INFO, "run.duplicate", &f);
		break;
	case LEDGER_MISMATCH:
		out = json_pack("{s:s, s:s, s:s, s:s, s:s}", "error", "payload_mismatch",
		                "message",
		                "this key was claimed with a different payload; nothing was "
		                "changed",
		                "key", c->key, "payload_hash", hash, "stored_payload_hash",
		                run.payload_hash);
		http_json(c->resp, 409, out);
		metrics_count(METRICS_CLAIM_MISMATCH);
		f.state_from = ledger_state_name(run.state);
		f.version = run.version;
		f.reason = "payload_mismatch";
		f.hint = "the same business key arrived with changed input: investigate "
		         "upstream; a correction is a new key (oncegatectl replay)";
		call_log(c, LOG_LEVEL_ALERT, "run.payload_mismatch", &f);
		break;
	default:
		call_ledger_failure(c, rc);
		break;
	}
out:
	ledger_run_clear(&run);
	free(payload);
}

static void
handle_status(struct call *c)
{
	struct log_fields f = { 0 };
	json_t *run = NULL;
	enum ledger_rc rc;

	json_t *approvals = NULL, *effects = NULL, *replay_of = NULL, *replayed_by = NULL;

	rc = ledger_status(c->ctx->db, c->client.id, c->key, true, &run);
	if (rc != LEDGER_OK) {
		call_ledger_failure(c, rc);
		return;
	}
	if (gate_list(c->ctx->db, c->client.id, c->key, &approvals) != GATE_OK ||
	    outbox_list(c->ctx->db, c->ctx->cfg, c->client.id, c->key,
	                json_string_value(json_object_get(run, "correlation_id")),
	                json_string_value(json_object_get(run, "workflow_version")),
	                &effects) != OUTBOX_OK) {
		json_decref(approvals);
		json_decref(run);
		call_unavailable(c, db_error(c->ctx->db));
		return;
	}
	if (replay_links(c->ctx->db, c->client.id, c->key, &replay_of, &replayed_by) !=
	    REPLAY_OK) {
		json_decref(approvals);
		json_decref(effects);
		json_decref(run);
		call_unavailable(c, db_error(c->ctx->db));
		return;
	}
	json_object_set_new(run, "approvals", approvals);
	json_object_set_new(run, "effects", effects);
	json_object_set_new(run, "replay_of", replay_of);
	json_object_set_new(run, "replayed_by", replayed_by);
	http_json(c->resp, 200, run);
	call_log(c, LOG_LEVEL_DEBUG, "run.read", &f);
}

static void
handle_lease(struct call *c)
{
	static const char *const fields[] = { "lease_owner", "version", "lease_seconds", NULL };
	const struct config *cfg = c->ctx->cfg;
	struct ledger_run run = { 0 };
	struct log_fields f = { 0 };
	const char *owner;
	long long version, lease;
	enum ledger_rc rc;

	if (!only_fields(c, fields) || !req_owner(c, &owner) ||
	    !req_int(c, "version", 1, (long long)1 << 53, &version) ||
	    !opt_int(c, "lease_seconds", 1, cfg->lease_max_seconds, cfg->lease_default_seconds,
	             &lease))
		goto out;
	rc = ledger_renew(c->ctx->db, c->client.id, c->key, owner, version, (int)lease,
	                  cfg->lease_cap_seconds, &run);
	f.version = run.version;
	f.attempt = run.attempt;
	switch (rc) {
	case LEDGER_OK:
		http_json(c->resp, 200,
		          json_pack("{s:I, s:s}", "version", (json_int_t)run.version,
		                    "lease_expires_at", run.lease_expires_at));
		call_log(c, LOG_LEVEL_INFO, "lease.renewed", &f);
		break;
	case LEDGER_CAP_REACHED:
		http_json(c->resp, 409,
		          json_pack("{s:s, s:s, s:s}", "error", "lease_cap_reached", "message",
		                    "this claim reached its total lease lifetime; finish or let "
		                    "it expire",
		                    "lease_expires_at", run.lease_expires_at));
		f.reason = "lease_cap_reached";
		call_log(c, LOG_LEVEL_WARNING, "lease.cap_reached", &f);
		break;
	case LEDGER_LEASE_LOST:
		f.state_from = ledger_state_name(run.state);
		call_lease_lost(c, &f);
		break;
	default:
		call_ledger_failure(c, rc);
		break;
	}
out:
	ledger_run_clear(&run);
}

static bool
error_class_valid(const char *s)
{
	for (; *s != '\0'; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' ||
		      *s == '.' || *s == '-'))
			return false;
	return true;
}

static void
handle_transition(struct call *c)
{
	static const char *const fields[] = { "lease_owner", "version", "to", "result",
		                              "error_class", "reason", NULL };
	struct ledger_run run = { 0 };
	struct log_fields f = { 0 };
	const char *owner, *to_name, *error_class, *reason;
	char *result = NULL;
	long long version;
	json_t *to, *res;
	enum ledger_rc rc;
	int state;

	if (!only_fields(c, fields) || !req_owner(c, &owner) ||
	    !req_int(c, "version", 1, (long long)1 << 53, &version))
		goto out;
	to = json_object_get(c->body, "to");
	to_name = json_is_string(to) ? json_string_value(to) : NULL;
	state = ledger_state_parse(to_name);
	if (state != RUN_COMPLETED && state != RUN_FAILED_RETRYABLE &&
	    state != RUN_FAILED_TERMINAL) {
		call_reject(c, 400, "invalid_field",
		            "to must be completed, failed_retryable or failed_terminal", "to");
		goto out;
	}
	if (!opt_string(c, "error_class", OG_ERROR_CLASS_MAX, &error_class) ||
	    !opt_string(c, "reason", OG_FIELD_MAX, &reason))
		goto out;
	if (error_class != NULL && !error_class_valid(error_class)) {
		call_reject(c, 400, "invalid_field",
		            "error_class may hold only a-z, 0-9, '_', '.' and '-'", "error_class");
		goto out;
	}
	res = json_object_get(c->body, "result");
	if (res != NULL && !json_is_null(res)) {
		result = json_dumps(res, JSON_COMPACT | JSON_ENCODE_ANY);
		if (result == NULL || strlen(result) > OG_RESULT_MAX) {
			call_reject(c, 400, "invalid_field", "result must be at most 64 KiB of JSON",
			            "result");
			goto out;
		}
	}
	rc = ledger_transition(c->ctx->db, c->client.id, c->key, owner, version,
	                       (enum run_state)state, result, error_class, reason, &run);
	f.error_class = error_class;
	f.reason = reason;
	switch (rc) {
	case LEDGER_OK:
		http_json(c->resp, 200,
		          json_pack("{s:s, s:I}", "state", ledger_state_name(run.state), "version",
		                    (json_int_t)run.version));
		f.state_from = ledger_state_name(run.state_from);
		f.state_to = ledger_state_name(run.state);
		f.version = run.version;
		f.attempt = run.attempt;
		call_log(c, LOG_LEVEL_INFO, "run.transitioned", &f);
		break;
	case LEDGER_LEASE_LOST:
	case LEDGER_CAP_REACHED:
		f.state_from = ledger_state_name(run.state);
		f.state_to = ledger_state_name((enum run_state)state);
		f.version = run.version;
		call_lease_lost(c, &f);
		break;
	default:
		call_ledger_failure(c, rc);
		break;
	}
out:
	free(result);
	ledger_run_clear(&run);
}

static void
handle_healthz(struct call *c)
{
	PGresult *res;
	enum db_rc rc;

	rc = db_exec(c->ctx->db, &st_ping, NULL, &res);
	if (rc != DB_OK) {
		call_unavailable(c, db_error(c->ctx->db));
		return;
	}
	PQclear(res);
	http_json(c->resp, 200, json_pack("{s:s}", "status", "ok"));
}

/* GET /metrics: text, not JSON, so it sets its own headers. */
static void
handle_metrics(struct call *c)
{
	struct log_fields f = { 0 };
	enum metrics_rc rc;

	rc = metrics_text(c->ctx->db, &c->resp->body);
	if (rc != METRICS_OK) {
		json_headers(c);
		if (rc == METRICS_UNAVAILABLE)
			call_unavailable(c, db_error(c->ctx->db));
		else
			call_internal(c, "the metrics could not be computed");
		return;
	}
	c->resp->status = 200;
	(void)http_header(c->resp, "Content-Type", METRICS_CONTENT_TYPE);
	(void)http_header(c->resp, "Cache-Control", "no-store");
	call_log(c, LOG_LEVEL_DEBUG, "metrics.read", &f);
}

/* ---- model output ---------------------------------------------------- */

/* Canonical hash of a JSON value as jansson holds it. */
static int
json_hash(const json_t *v, char hash[CANON_HASH_LEN], char **text)
{
	char *dumped = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	char *canon = NULL;
	size_t n;

	*text = NULL;
	if (dumped == NULL || canon_json(dumped, strlen(dumped), &canon, &n) != CANON_OK) {
		free(dumped);
		return -1;
	}
	canon_hash(canon, n, hash);
	free(dumped);
	*text = canon;
	return 0;
}

static bool
http_url(const char *s)
{
	return s != NULL && (strncmp(s, "https://", 8) == 0 || strncmp(s, "http://", 7) == 0) &&
	       strlen(s) <= 2048 && printable_text(s);
}

/* A 422 that names the problem with the output submission. */
static void
call_unprocessable(struct call *c, const char *code, const char *message, const char *field)
{
	call_reject(c, 422, code, message, field);
}

/* The output fields contract k marks loggable, as one compact JSON object
 * keyed by JSON Pointer (malloc'd), or NULL when it marks none that the
 * output has. Nothing else of an output is ever logged. */
static char *
loggable_fields(const struct contract *k, const json_t *output)
{
	size_t i, n = k != NULL && output != NULL ? contract_loggable_count(k) : 0;
	json_t *o;
	char *text = NULL;

	if (n == 0 || (o = json_object()) == NULL)
		return NULL;
	for (i = 0; i < n; i++) {
		const char *ptr = contract_loggable(k, i);
		json_t *v = ptr != NULL ? contract_pointer_get(output, ptr) : NULL;

		if (v != NULL)
			json_object_set(o, ptr, v);
	}
	if (json_object_size(o) > 0)
		text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(15));
	json_decref(o);
	return text;
}

static void
handle_output(struct call *c)
{
	static const char *const fields[] = { "lease_owner", "version", "contract", "output",
		                              "model", "effect", "source_url", "requested_by",
		                              "callback_url", NULL };
	const struct config *cfg = c->ctx->cfg;
	const struct contract *contract;
	struct ledger_output lo = { 0 };
	struct ledger_run run = { 0 };
	struct log_fields f = { 0 };
	char out_hash[CANON_HASH_LEN], eff_hash[CANON_HASH_LEN];
	char *out_text = NULL, *eff_text = NULL, *model_text = NULL, *errors_text = NULL;
	char *effect_payload_text = NULL, *logged = NULL;
	const char *name, *etype, *etarget;
	json_t *output, *effect, *model, *errors = NULL, *answer = NULL, *approvals = NULL;
	json_t *decisions = NULL, *effect_doc = NULL, *sent = NULL;
	const struct config_target *target;
	char sample_detail[128] = "";
	bool human, in_tx = false;
	enum ledger_rc lrc;
	long long version;
	size_t out_len;
	size_t i;

	if (!only_fields(c, fields) || !req_owner(c, &lo.owner) ||
	    !req_int(c, "version", 1, (long long)1 << 53, &version))
		goto out;
	name = json_string_value(json_object_get(c->body, "contract"));
	contract = name != NULL && c->ctx->contracts != NULL
	               ? contract_find(c->ctx->contracts, name)
	               : NULL;
	if (contract == NULL) {
		call_unprocessable(c, "unknown_contract", "contract must name a loaded contract",
		                   "contract");
		goto out;
	}
	f.contract = contract_name(contract);
	output = json_object_get(c->body, "output");
	if (output == NULL) {
		call_reject(c, 400, "invalid_field", "output is required", "output");
		goto out;
	}
	model = json_object_get(c->body, "model");
	if (model != NULL && !json_is_object(model)) {
		call_reject(c, 400, "invalid_field", "model must be an object", "model");
		goto out;
	}
	effect = json_object_get(c->body, "effect");
	etype = json_string_value(json_object_get(effect, "type"));
	etarget = json_string_value(json_object_get(effect, "target"));
	if (!json_is_object(effect) || etype == NULL || etarget == NULL ||
	    json_object_get(effect, "payload") == NULL || json_object_size(effect) != 3) {
		call_reject(c, 400, "invalid_field",
		            "effect must be {\"type\", \"target\", \"payload\"}", "effect");
		goto out;
	}
	if (!contract_effect_allowed(contract, etype, etarget)) {
		call_unprocessable(c, "effect_not_allowed",
		                   "the contract does not allow this effect type and target",
		                   "effect");
		goto out;
	}
	target = config_target(cfg, etarget);
	if (target == NULL) {
		call_unprocessable(c, "unknown_target", "effect.target names no configured target",
		                   "effect");
		goto out;
	}
	if (!opt_string(c, "source_url", 2048, &lo.source_url) ||
	    !opt_string(c, "requested_by", OG_FIELD_MAX, &lo.requested_by) ||
	    !opt_string(c, "callback_url", 2048, &lo.callback_url))
		goto out;
	/* Separation of duties compares the approver with the requester: with
	 * no requester named, the requester could approve unseen. */
	if (contract_separation_of_duties(contract) &&
	    (lo.requested_by == NULL || lo.requested_by[strspn(lo.requested_by, " \t")] == '\0')) {
		call_unprocessable(c, "requested_by_required",
		                   "the contract requires separation of duties: requested_by must "
		                   "name who asked for this action, so that they cannot approve it",
		                   "requested_by");
		goto out;
	}
	if (lo.source_url != NULL && !http_url(lo.source_url)) {
		call_reject(c, 400, "invalid_field", "source_url must be an http(s) URL",
		            "source_url");
		goto out;
	}
	if (lo.callback_url != NULL && !config_callback_allowed(cfg, lo.callback_url)) {
		call_unprocessable(c, "callback_not_allowed",
		                   "callback_url's origin is not a configured callback origin",
		                   "callback_url");
		goto out;
	}

	lo.client_id = c->client.id;
	lo.key = c->key;
	lo.version = version;
	lo.contract = contract_name(contract);
	lo.contract_hash = contract_hash(contract);
	if (canon_member(c->req->body, c->req->body_len, "output", &out_text, &out_len) !=
	    CANON_OK) {
		call_reject(c, 400, "invalid_json", "output is not canonical JSON", "output");
		goto out;
	}
	canon_hash(out_text, out_len, out_hash);
	lo.output = out_text;
	lo.output_hash = out_hash;

	errors = contract_validate(contract, output);
	if (errors == NULL) {
		call_internal(c, "validator failed");
		goto out;
	}
	/* The payload as it will be sent: the caller's, with the members the
	 * contract takes from the output; checked like the output, so nobody
	 * approves (and no rule judges) anything but what goes out. */
	if (json_array_size(errors) == 0) {
		sent = effect_build(contract, etype, strcmp(target->kind, "smtp") == 0,
		                    json_object_get(effect, "payload"), output, EFFECT_AT_OUTPUT,
		                    errors);
		if (sent == NULL && json_array_size(errors) == 0) {
			call_internal(c, "effect could not be built");
			goto out;
		}
	}
	if (json_array_size(errors) > 0) {
		int budget = contract_repair_attempts(contract), left;

		errors_text = json_dumps(errors, JSON_COMPACT);
		lo.validation = errors_text;
		lrc = ledger_output_invalid(c->ctx->db, &lo, budget, &run);
		if (lrc != LEDGER_OK) {
			if (lrc == LEDGER_LEASE_LOST)
				call_lease_lost(c, &f);
			else
				call_ledger_failure(c, lrc);
			goto out;
		}
		left = budget - run.attempt;
		answer = json_pack("{s:s, s:O, s:i, s:s, s:I}", "outcome",
		                   run.state == RUN_FAILED_TERMINAL ? "failed_terminal" : "invalid",
		                   "errors", errors, "repairs_left", left < 0 ? 0 : left, "state",
		                   ledger_state_name(run.state), "version", (json_int_t)run.version);
		http_json(c->resp, 422, answer);
		answer = NULL;
		f.state_from = "processing";
		f.state_to = ledger_state_name(run.state);
		f.version = run.version;
		f.validation = "invalid";
		f.error_class = run.state == RUN_FAILED_TERMINAL ? "validation" : NULL;
		f.reason = run.state == RUN_FAILED_TERMINAL ? "repair budget spent" : NULL;
		call_log(c, LOG_LEVEL_NOTICE, "output.invalid", &f);
		goto out;
	}

	effect_doc = json_pack("{s:s, s:s, s:O}", "type", etype, "target", etarget, "payload",
	                       sent);
	/* Valid. The gate decides by the contract's rules alone: fields of the
	 * model's own output never grant autonomy unless a rule names them; a
	 * rule over /effect sees the payload that will be sent. */
	switch (contract_gate_mode(contract)) {
	case GATE_ACT_WITH_WINDOW:
		human = false;
		break;
	case GATE_APPROVE_BY_EXCEPTION: {
		/* The sample is drawn from the CSPRNG once per run and kept on
		 * it, never derived from the key: a caller cannot choose runs
		 * that dodge it, nor roll again by resubmitting. */
		double fresh, draw = -1;

		if (contract_sample_draw(&fresh) != 0) {
			call_internal(c, "the CSPRNG failed");
			goto out;
		}
		lrc = ledger_sample_draw(c->ctx->db, c->client.id, c->key, fresh,
		                         contract_sample_rate(contract), &draw);
		if (lrc == LEDGER_UNAVAILABLE) {
			call_unavailable(c, db_error(c->ctx->db));
			goto out;
		}
		/* not processing: the accept below says why; -1 is "sampled" */
		human = effect_doc == NULL ||
		        !contract_auto_eligible(contract, output, effect_doc) ||
		        contract_sampled(contract, draw);
		if (lrc == LEDGER_OK)
			snprintf(sample_detail, sizeof(sample_detail),
			         "sample draw %.6f %s rate %g: %s", draw,
			         draw < contract_sample_rate(contract) ? "<" : ">=",
			         contract_sample_rate(contract),
			         contract_sampled(contract, draw) ? "sampled, a person decides"
			                                          : "not sampled");
		break;
	}
	default:
		human = true;
		break;
	}
	model_text = model != NULL ? json_dumps(model, JSON_COMPACT) : NULL;
	eff_text = effect_doc != NULL ? json_dumps(effect_doc, JSON_COMPACT) : NULL;
	if (eff_text == NULL || json_hash(sent, eff_hash, &effect_payload_text) != 0) {
		call_internal(c, "effect could not be serialised");
		goto out;
	}
	lo.model = model_text;
	lo.effect = eff_text;

	if (db_begin(c->ctx->db) != DB_OK) {
		call_unavailable(c, db_error(c->ctx->db));
		goto out;
	}
	in_tx = true;
	lrc = ledger_output_accept(c->ctx->db, &lo, human ? RUN_AWAITING_HUMAN : RUN_APPROVED,
	                           &run);
	if (lrc != LEDGER_OK) {
		db_rollback(c->ctx->db);
		in_tx = false;
		if (lrc == LEDGER_LEASE_LOST)
			call_lease_lost(c, &f);
		else
			call_ledger_failure(c, lrc);
		goto out;
	}
	if (human) {
		approvals = json_array();
		decisions = contract_allowed_decisions(contract);
		for (i = 0; i < contract_approver_count(contract); i++) {
			char token[TOKEN_TEXT_LEN + 1], id[GATE_ID_LEN], expires[GATE_TS_LEN];
			unsigned char hash[32];
			struct buf url;
			enum gate_rc grc;

			if (token_new(token, hash) != 0) {
				db_rollback(c->ctx->db);
				in_tx = false;
				call_internal(c, "the CSPRNG failed");
				goto out;
			}
			grc = gate_create(c->ctx->db, c->client.id, c->key,
			                  contract_approver(contract, i), decisions, lo.requested_by,
			                  contract_separation_of_duties(contract),
			                  contract_expires_seconds(contract), hash, eff_text,
			                  lo.callback_url, id, expires);
			if (grc != GATE_OK) {
				digest_wipe(token, sizeof(token));
				db_rollback(c->ctx->db);
				in_tx = false;
				if (grc == GATE_UNAVAILABLE)
					call_unavailable(c, db_error(c->ctx->db));
				else
					call_internal(c, db_error(c->ctx->db));
				goto out;
			}
			/* The raw token leaves here once, in this answer, and is
			 * never stored or logged. */
			buf_init(&url, 4096);
			if (buf_printf(&url, "%s/approve/%s", cfg->public_url, token) != 0) {
				buf_free(&url);
				digest_wipe(token, sizeof(token));
				db_rollback(c->ctx->db);
				in_tx = false;
				call_internal(c, "approval URL too long");
				goto out;
			}
			json_array_append_new(approvals,
			                      json_pack("{s:s, s:s, s:s, s:s}", "approval_id", id,
			                                "approver", contract_approver(contract, i),
			                                "expires_at", expires, "url", url.data));
			digest_wipe(url.data, url.len);
			buf_free(&url);
			digest_wipe(token, sizeof(token));
		}
		answer = json_pack("{s:s, s:o, s:I}", "outcome", "awaiting_human", "approvals",
		                   approvals, "version", (json_int_t)run.version);
		approvals = NULL;
	} else {
		struct outbox_effect e = { 0 };
		char id[OUTBOX_ID_LEN], not_before[OUTBOX_TS_LEN];
		enum outbox_rc orc;

		e.client_id = c->client.id;
		e.key = c->key;
		e.type = etype;
		e.target = etarget;
		e.payload = effect_payload_text;
		e.payload_hash = eff_hash;
		e.delay_seconds = contract_window_seconds(contract);
		orc = outbox_enqueue(c->ctx->db, &e, id, not_before);
		if (orc != OUTBOX_OK) {
			db_rollback(c->ctx->db);
			in_tx = false;
			if (orc == OUTBOX_UNAVAILABLE)
				call_unavailable(c, db_error(c->ctx->db));
			else
				call_internal(c, db_error(c->ctx->db));
			goto out;
		}
		answer = json_pack("{s:s, s:s, s:I}", "outcome", "approved", "effect_id", id,
		                   "version", (json_int_t)run.version);
		if (e.delay_seconds > 0)
			json_object_set_new(answer, "not_before", json_string(not_before));
		f.effect_id = NULL; /* logged below from the answer */
	}
	if (db_commit(c->ctx->db) != DB_OK) {
		in_tx = false;
		call_unavailable(c, db_error(c->ctx->db));
		goto out;
	}
	in_tx = false;
	f.state_from = "processing";
	f.state_to = ledger_state_name(run.state);
	f.version = run.version;
	f.validation = "valid";
	f.target = etarget;
	f.effect_id = json_string_value(json_object_get(answer, "effect_id"));
	f.decision = human ? NULL : "auto";
	f.actor = human ? NULL : "gate:auto";
	f.model = json_string_value(json_object_get(model, "name"));
	f.detail = sample_detail[0] != '\0' ? sample_detail : NULL;
	f.model_provider = json_string_value(json_object_get(model, "provider"));
	f.model_revision = json_string_value(json_object_get(model, "revision"));
	f.output_fields = logged = loggable_fields(contract, output);
	http_json(c->resp, 202, json_incref(answer));
	/* three decisions, three lines: the output passed its contract, the
	 * gate chose a person or the rules, and (rules) the effect is queued */
	{
		struct log_fields v = { .contract = f.contract, .model = f.model,
			                .model_provider = f.model_provider,
			                .model_revision = f.model_revision,
			                .output_fields = f.output_fields,
			                .validation = "valid", .payload_hash = out_hash };

		call_log(c, LOG_LEVEL_INFO, "output.valid", &v);
	}
	call_log(c, LOG_LEVEL_INFO, human ? "gate.awaiting_human" : "gate.auto_approved", &f);
	if (!human) {
		struct log_fields e = { .effect_id = f.effect_id, .target = etarget,
			                .decision = "auto", .actor = "gate:auto" };

		call_log(c, LOG_LEVEL_INFO, "effect.enqueued", &e);
	}
out:
	if (in_tx)
		db_rollback(c->ctx->db);
	json_decref(answer);
	json_decref(approvals);
	json_decref(decisions);
	json_decref(errors);
	json_decref(effect_doc);
	json_decref(sent);
	free(out_text);
	free(eff_text);
	free(model_text);
	free(errors_text);
	free(effect_payload_text);
	free(logged);
	ledger_run_clear(&run);
}

/* ---- cancel within the window ---------------------------------------- */

static void
handle_cancel(struct call *c)
{
	static const char *const fields[] = { "reason", NULL };
	struct ledger_run run = { 0 };
	struct log_fields f = { 0 };
	const char *reason;
	json_t *ids = NULL;
	enum outbox_rc orc;
	enum ledger_rc lrc;

	if (!only_fields(c, fields) || !opt_string(c, "reason", OG_FIELD_MAX, &reason))
		goto out;
	if (reason == NULL || reason[0] == '\0') {
		call_reject(c, 400, "invalid_field", "reason is required", "reason");
		goto out;
	}
	f.reason = reason;
	if (db_begin(c->ctx->db) != DB_OK) {
		call_unavailable(c, db_error(c->ctx->db));
		goto out;
	}
	orc = outbox_cancel_window(c->ctx->db, c->client.id, c->key, &ids);
	if (orc != OUTBOX_OK) {
		db_rollback(c->ctx->db);
		call_unavailable(c, db_error(c->ctx->db));
		goto out;
	}
	lrc = json_array_size(ids) > 0
	          ? ledger_cancel(c->ctx->db, c->client.id, c->key, reason, &run)
	          : LEDGER_LEASE_LOST;
	if (lrc != LEDGER_OK) {
		db_rollback(c->ctx->db);
		if (lrc == LEDGER_UNAVAILABLE) {
			call_unavailable(c, db_error(c->ctx->db));
			goto out;
		}
		{
			json_t *probe = NULL;
			enum ledger_rc src = ledger_status(c->ctx->db, c->client.id, c->key, false,
			                                   &probe);

			json_decref(probe);
			if (src == LEDGER_NOT_FOUND) {
				call_ledger_failure(c, LEDGER_NOT_FOUND);
				goto out;
			}
		}
		http_json(c->resp, 409,
		          json_pack("{s:s, s:s}", "error", "window_closed", "message",
		                    "nothing is waiting inside its cancellation window: the "
		                    "effect went out, is going out, or was never delayed"));
		f.reason = "window_closed";
		call_log(c, LOG_LEVEL_WARNING, "run.cancel_refused", &f);
		goto out;
	}
	if (db_commit(c->ctx->db) != DB_OK) {
		call_unavailable(c, db_error(c->ctx->db));
		goto out;
	}
	http_json(c->resp, 200,
	          json_pack("{s:s, s:I, s:O}", "state", "failed_terminal", "version",
	                    (json_int_t)run.version, "cancelled_effects", ids));
	f.state_from = "approved";
	f.state_to = "failed_terminal";
	f.version = run.version;
	f.error_class = "cancelled";
	f.effect_id = json_string_value(json_array_get(ids, 0));
	call_log(c, LOG_LEVEL_INFO, "run.cancelled", &f);
out:
	json_decref(ids);
	ledger_run_clear(&run);
}

/* ---- approval pages -------------------------------------------------- */

/* What every answer under /approve/ carries, pages and the JSON
 * refusals of the route table alike: the URL holds a capability. */
static void
page_security_headers(struct call *c)
{
	(void)http_header(c->resp, "Cache-Control", "no-store");
	(void)http_header(c->resp, "Referrer-Policy", "no-referrer");
	(void)http_header(c->resp, "X-Content-Type-Options", "nosniff");
	(void)http_header(c->resp, "X-Frame-Options", "DENY");
	(void)http_header(c->resp, "Content-Security-Policy",
	                  "default-src 'none'; style-src 'self'; img-src 'self'; "
	                  "form-action 'self'; frame-ancestors 'none'; base-uri 'none'");
}

static void
page_headers(struct call *c)
{
	(void)http_header(c->resp, "Content-Type", "text/html; charset=utf-8");
	page_security_headers(c);
}

/* Renders a filled page as the answer; consumes p. */
static void
page_answer(struct call *c, int status, struct page *p)
{
	size_t cap = c->resp->body.cap;
	int rc;

	buf_reset(&c->resp->body);
	c->resp->status = status;
	/* Any output the contract accepted is shown, whole and field by field,
	 * escaped: the page may be several times the largest body. */
	c->resp->body.cap = OG_RESPONSE_MAX + OG_PAGE_BODY_FACTOR * (size_t)c->ctx->cfg->max_body_bytes;
	rc = p != NULL ? page_render(p, &c->resp->body) : -1;
	c->resp->body.cap = cap;
	if (rc != 0) {
		buf_reset(&c->resp->body);
		c->resp->status = 500;
		if (buf_puts(&c->resp->body, "<!DOCTYPE html><title>Error</title>"
		                             "<p>The page could not be built.</p>") != 0)
			buf_reset(&c->resp->body);
	}
	page_free(p);
}

/* The notice page: unknown, expired, used, refused. One log line. */
static void
page_notice(struct call *c, int status, const char *event, const char *heading,
            const char *message, struct log_fields *f)
{
	struct page *p = c->ctx->pages != NULL ? page_new(c->ctx->pages, "notice") : NULL;

	if (p != NULL) {
		(void)page_text(p, "title", heading);
		(void)page_text(p, "heading", heading);
		(void)page_text(p, "message", message);
		page_remove(p, "detail");
	}
	page_answer(c, status, p);
	if (f->reason == NULL)
		f->reason = message;
	call_log(c, status >= 500 ? LOG_LEVEL_ERROR : LOG_LEVEL_NOTICE, event, f);
}

static char *
pretty(const json_t *v)
{
	return page_json_text(v);
}

/* The page of an approval that was decided: who decided what, when. */
static void
page_decided(struct call *c, int status, const struct gate_approval *a, const json_t *run)
{
	struct page *p = page_new(c->ctx->pages, "decided");
	const json_t *effect = json_object_get(run, "proposed_effect");
	struct log_fields f = { 0 };

	if (p != NULL) {
		(void)page_text(p, "title", "Decided");
		(void)page_text(p, "key", a->key);
		(void)page_text(p, "decision", a->decision != NULL ? a->decision : "");
		(void)page_text(p, "decided_by", a->approver_subject != NULL ? a->approver_subject : "");
		(void)page_text(p, "decided_at", a->consumed_at);
		(void)page_text(p, "reason", a->reason != NULL ? a->reason : "");
		(void)page_text(p, "effect_type", json_string_value(json_object_get(effect, "type")) ?: "");
		(void)page_text(p, "effect_target",
		                json_string_value(json_object_get(effect, "target")) ?: "");
	}
	page_answer(c, status, p);
	f.approval_id = a->id;
	f.decision = a->decision;
	call_log(c, LOG_LEVEL_DEBUG, "approval.viewed", &f);
}

/* May the signed-in person take this decision on this challenge? NULL when
 * yes, else why not, in words for the page. The page offers only the
 * decisions this allows and the POST refuses the rest, so both say the
 * same. Under separation of duties the requester decides nothing, and a
 * challenge whose requester is unknown (made before outputs had to name
 * one) can be rejected but never approved. */
static const char *
approve_refusal(const struct call *c, const struct gate_approval *a, const char *decision)
{
	const char *subject = c->req->remote_user;

	if (!contract_approver_matches(a->approver, subject, c->req->auth_groups,
	                               c->ctx->cfg->auth_groups_separator[0]))
		return "You are not among the approvers this link was issued to.";
	if (a->separation_of_duties && a->requested_by != NULL &&
	    strcasecmp(a->requested_by, subject) == 0)
		return "You requested this action, so someone else must approve it.";
	if (a->separation_of_duties && a->requested_by == NULL &&
	    strcmp(decision, "approve") == 0)
		return "Nobody is recorded as having requested this action, so no one can "
		       "show they are not its requester: it can only be rejected.";
	return NULL;
}

/* The confirmation card. GET never changes anything. */
static void
page_card(struct call *c, const struct gate_approval *a, const json_t *run)
{
	const struct config *cfg = c->ctx->cfg;
	const json_t *output = json_object_get(run, "output");
	const json_t *effect = json_object_get(run, "proposed_effect");
	const json_t *model = json_object_get(run, "model");
	const json_t *errs = json_object_get(run, "validation_errors");
	const char *source = json_string_value(json_object_get(run, "source_url"));
	const char *requested = json_string_value(json_object_get(run, "requested_by"));
	const char *subject = c->req->remote_user, *name, *dec, *why, *refusal = NULL;
	char csrf[CSRF_TEXT_LEN + 1], model_text[512];
	size_t buttons = 0;
	char *out_text = pretty(output), *eff_text = pretty(json_object_get(effect, "payload"));
	struct page *p = page_new(c->ctx->pages, "approval");
	struct log_fields f = { 0 };
	size_t i;
	json_t *v;

	if (p == NULL || out_text == NULL || eff_text == NULL) {
		page_free(p);
		p = NULL;
		goto out;
	}
	(void)page_text(p, "title", "Approval needed");
	(void)page_text(p, "key", a->key);
	if (source != NULL) {
		(void)page_attr(p, "source_link", "href", source);
		(void)page_text(p, "source_link", source);
	} else {
		(void)page_text(p, "source_link", "(none given)");
	}
	(void)page_text(p, "contract", json_string_value(json_object_get(run, "contract")) ?: "");
	snprintf(model_text, sizeof(model_text), "%s %s %s",
	         json_string_value(json_object_get(model, "provider")) ?: "",
	         json_string_value(json_object_get(model, "name")) ?: "",
	         json_string_value(json_object_get(model, "revision")) ?: "");
	(void)page_text(p, "model", model_text);
	(void)page_text(p, "output", out_text);
	if (json_is_object(output)) {
		json_object_foreach((json_t *)(uintptr_t)output, name, v) {
			struct page_scope *sc = page_repeat(p, "output_fields");
			char *text = json_is_string(v)
			                 ? strdup(json_string_value(v))
			                 : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY |
			                                     JSON_REAL_PRECISION(15));

			if (sc != NULL && text != NULL) {
				(void)page_scope_text(sc, "field_name", name);
				(void)page_scope_text(sc, "field_value", text);
			}
			free(text);
		}
	}
	page_repeat_done(p, "output_fields");
	if (json_array_size(errs) > 0) {
		json_array_foreach(errs, i, v) {
			struct page_scope *sc = page_repeat(p, "error_item");

			if (sc == NULL)
				break;
			(void)page_scope_text(sc, "error_path",
			                      json_string_value(json_object_get(v, "path")) ?: "");
			(void)page_scope_text(sc, "error_message",
			                      json_string_value(json_object_get(v, "message")) ?: "");
		}
		page_repeat_done(p, "error_item");
	} else {
		page_remove(p, "errors");
	}
	(void)page_text(p, "approver", subject);
	(void)page_text(p, "approver_groups", c->req->auth_groups != NULL ? c->req->auth_groups : "");
	(void)page_text(p, "expires_at", a->expires_at);
	(void)page_text(p, "effect_type", json_string_value(json_object_get(effect, "type")) ?: "");
	(void)page_text(p, "effect_target", json_string_value(json_object_get(effect, "target")) ?: "");
	(void)page_text(p, "effect_payload", eff_text);
	(void)page_text(p, "requested_by", requested != NULL ? requested : "(not given)");
	/* Only the decisions this person may take are buttons; none, no form
	 * (and no CSRF token issued to them). */
	json_array_foreach(a->allowed_decisions, i, v) {
		struct page_scope *sc;

		dec = json_string_value(v);
		if (dec == NULL)
			continue;
		if ((why = approve_refusal(c, a, dec)) != NULL) {
			refusal = refusal != NULL ? refusal : why;
			continue;
		}
		if ((sc = page_repeat(p, "decision_button")) == NULL)
			continue;
		(void)page_scope_attr(sc, "decision_value", "value", dec);
		(void)page_scope_text(sc, "decision_label",
		                      strcmp(dec, "approve") == 0 ? "Approve" : "Reject");
		buttons++;
	}
	page_repeat_done(p, "decision_button");
	if (buttons == 0) {
		page_remove(p, "form");
		(void)page_text(p, "cannot_decide_reason",
		                refusal != NULL ? refusal : "This request allows no decision.");
		f.reason = "may_not_decide";
	} else {
		page_remove(p, "cannot_decide");
		/* no action attribute: the form posts to the page's own URL */
		csrf_issue((const unsigned char *)cfg->csrf_secret, strlen(cfg->csrf_secret),
		           a->id, subject, csrf);
		(void)page_attr(p, "csrf", "value", csrf);
		digest_wipe(csrf, sizeof(csrf));
	}
out:
	page_answer(c, 200, p);
	free(out_text);
	free(eff_text);
	f.approval_id = a->id;
	f.actor = subject;
	call_log(c, LOG_LEVEL_INFO, "approval.viewed", &f);
}

/* Origin / Sec-Fetch-Site: the form must come from our own pages. */
static bool
same_origin(const struct call *c)
{
	const char *origin = c->req->origin, *site = c->req->sec_fetch_site;
	const char *pub = c->ctx->cfg->public_url;

	if (site != NULL && site[0] != '\0')
		return strcmp(site, "same-origin") == 0;
	if (origin != NULL && origin[0] != '\0' && pub[0] != '\0') {
		size_t n = strcspn(pub + (strncmp(pub, "https://", 8) == 0 ? 8 : 7), "/") +
		           (strncmp(pub, "https://", 8) == 0 ? 8 : 7);

		return strlen(origin) == n && strncasecmp(origin, pub, n) == 0;
	}
	return false;
}

/* The decision: one transaction, then 303 to the page. */
static void
approve_decide(struct call *c, const unsigned char hash[32], struct gate_approval *a,
               const json_t *run)
{
	const struct config *cfg = c->ctx->cfg;
	const char *subject = c->req->remote_user;
	const json_t *effect = json_object_get(run, "proposed_effect");
	const char *callback = json_string_value(json_object_get(run, "callback_url"));
	const char *why;
	char decision[16], csrf[128], reason[OG_FIELD_MAX + 1];
	char effect_id[OUTBOX_ID_LEN] = "", callback_id[OUTBOX_ID_LEN] = "";
	char not_before[OUTBOX_TS_LEN];
	struct ledger_run lr = { 0 };
	struct log_fields f = { 0 };
	char *payload = NULL, *cb_payload = NULL, *logged = NULL;
	char phash[CANON_HASH_LEN], chash[CANON_HASH_LEN];
	struct outbox_effect eff = { 0 }, cbe = { 0 };
	struct gate_consume_call gc;
	struct ledger_decide_call dc;
	struct outbox_enqueue_call ec = { 0 }, cc = { 0 };
	struct db_call calls[4];
	int ncalls = 0, eff_call = -1, cb_call = -1, k;
	enum ledger_rc lrc;
	enum gate_rc grc;
	long n;

	memset(calls, 0, sizeof(calls));
	f.approval_id = a->id;
	f.actor = subject;
	if (!http_is_form(c->req->content_type) || c->req->body_too_large) {
		page_notice(c, 415, "approval.refused", "Not a form",
		            "The decision must be sent by the form on the approval page.", &f);
		goto out;
	}
	if (http_form_get(c->req->body, c->req->body_len, "decision", decision,
	                  sizeof(decision)) <= 0 ||
	    http_form_get(c->req->body, c->req->body_len, "csrf", csrf, sizeof(csrf)) <= 0) {
		f.reason = "missing_field";
		page_notice(c, 400, "approval.refused", "Incomplete form",
		            "The form lacks its decision or its protection token; reload the page.",
		            &f);
		goto out;
	}
	n = http_form_get(c->req->body, c->req->body_len, "reason", reason, sizeof(reason));
	if (n > 0 && !canon_utf8_valid(reason, (size_t)n)) {
		f.reason = "bad_reason";
		page_notice(c, 400, "approval.refused", "Reason not accepted",
		            "The reason is not valid UTF-8 text; nothing was decided. Type it "
		            "again on the approval page.", &f);
		goto out;
	}
	if (n == -2 || (n > 0 && !printable_text(reason))) {
		f.reason = "bad_reason";
		page_notice(c, 400, "approval.refused", "Reason not accepted",
		            "The reason must be plain text of at most 512 bytes.", &f);
		goto out;
	}
	if (n < 0)
		reason[0] = '\0';
	f.decision = decision;
	if (!csrf_verify((const unsigned char *)cfg->csrf_secret, strlen(cfg->csrf_secret), a->id,
	                 subject, csrf)) {
		f.reason = "csrf";
		page_notice(c, 403, "approval.refused", "Form expired",
		            "This form was not issued to you for this approval. Reload the "
		            "approval page and decide again.",
		            &f);
		goto out;
	}
	if (!json_array_size(a->allowed_decisions) ||
	    (strcmp(decision, "approve") != 0 && strcmp(decision, "reject") != 0)) {
		f.reason = "wrong_decision";
		page_notice(c, 400, "approval.refused", "Decision not allowed",
		            "This approval does not allow that decision.", &f);
		goto out;
	}
	{
		size_t i;
		json_t *v;
		bool allowed = false;

		json_array_foreach(a->allowed_decisions, i, v)
			if (json_is_string(v) && strcmp(json_string_value(v), decision) == 0)
				allowed = true;
		if (!allowed) {
			f.reason = "wrong_decision";
			page_notice(c, 400, "approval.refused", "Decision not allowed",
			            "This approval does not allow that decision.", &f);
			goto out;
		}
	}
	if ((why = approve_refusal(c, a, decision)) != NULL) {
		bool approver = contract_approver_matches(a->approver, subject, c->req->auth_groups,
		                                          cfg->auth_groups_separator[0]);

		f.reason = "forbidden";
		f.detail = !approver ? "not among the approvers of this challenge"
		                     : a->requested_by != NULL
		                           ? "separation of duties: the requester cannot approve"
		                           : "separation of duties: the requester is unknown";
		page_notice(c, 403, "approval.refused",
		            approver ? "Separation of duties" : "Not your approval", why, &f);
		goto out;
	}

	/* The effects the decision enqueues, built before the transaction. */
	if (strcmp(decision, "approve") == 0) {
		if (json_hash(json_object_get(effect, "payload"), phash, &payload) != 0)
			goto internal;
		eff.client_id = a->client_id;
		eff.key = a->key;
		eff.type = json_string_value(json_object_get(effect, "type"));
		eff.target = json_string_value(json_object_get(effect, "target"));
		eff.payload = payload;
		eff.payload_hash = phash;
		eff.approval_id = a->id;
		if (eff.type == NULL || eff.target == NULL)
			goto internal;
	}
	if (callback != NULL) {
		/* The workflow's Wait node learns the outcome. */
		json_t *cb = json_pack("{s:s, s:s, s:s, s:s, s:s}", "url", callback, "key", a->key,
		                       "decision", strcmp(decision, "approve") == 0 ? "approved"
		                                                                    : "rejected",
		                       "decided_by", subject, "approval_id", a->id);

		if (cb == NULL || json_hash(cb, chash, &cb_payload) != 0) {
			json_decref(cb);
			goto internal;
		}
		json_decref(cb);
		cbe.client_id = a->client_id;
		cbe.key = a->key;
		cbe.type = "decision.callback";
		cbe.target = "callback";
		cbe.payload = cb_payload;
		cbe.payload_hash = chash;
		cbe.approval_id = a->id;
	}

	/* ONE transaction, its statements sent in one round trip:
	 * consume the challenge (voiding the others), move the run, enqueue.
	 * Each result is read in order and anything short of all of them rolls
	 * the whole thing back. */
	gate_consume_call(&gc, hash, decision, subject, reason[0] ? reason : NULL, &calls[ncalls++]);
	ledger_decide_call(&dc, a->client_id, a->key, decision, subject,
	                   reason[0] ? reason
	                             : strcmp(decision, "approve") == 0 ? NULL
	                                                                : "rejected by the approver",
	                   &calls[ncalls++]);
	if (eff.type != NULL) {
		if (outbox_enqueue_call(&ec, &eff, &calls[ncalls]) != 0)
			goto internal;
		eff_call = ncalls++;
	}
	if (cbe.type != NULL) {
		if (outbox_enqueue_call(&cc, &cbe, &calls[ncalls]) != 0)
			goto internal;
		cb_call = ncalls++;
	}
	db_pipeline_tx(c->ctx->db, calls, ncalls); /* each call carries its own rc */
	grc = gate_consume_result(&calls[0]);
	if (grc != GATE_OK) {
		db_rollback(c->ctx->db);
		if (grc == GATE_UNAVAILABLE)
			goto unavailable;
		f.reason = "used";
		page_notice(c, 409, "approval.refused", "Already decided",
		            "This approval was already decided, has expired, or was revoked. "
		            "Nothing was changed.",
		            &f);
		goto out;
	}
	lrc = ledger_decide_result(&calls[1], &lr);
	if (lrc != LEDGER_OK) {
		db_rollback(c->ctx->db);
		if (lrc == LEDGER_UNAVAILABLE)
			goto unavailable;
		f.reason = "not_awaiting";
		page_notice(c, 409, "approval.refused", "Already decided",
		            "The run is no longer waiting for a decision. Nothing was changed.", &f);
		goto out;
	}
	if ((eff_call >= 0 &&
	     outbox_enqueue_result(&calls[eff_call], effect_id, not_before) != OUTBOX_OK) ||
	    (cb_call >= 0 &&
	     outbox_enqueue_result(&calls[cb_call], callback_id, not_before) != OUTBOX_OK))
		goto internal;
	if (db_commit(c->ctx->db) != DB_OK) {
		/* the partial unique index: another approver decided first */
		f.reason = "used";
		page_notice(c, 409, "approval.refused", "Already decided",
		            "Another approver decided first. Nothing was changed.", &f);
		goto out;
	}
	c->resp->status = 303;
	{
		char location[sizeof(c->token) + 16];

		snprintf(location, sizeof(location), "/approve/%s", c->token);
		(void)http_header(c->resp, "Location", location);
		digest_wipe(location, sizeof(location));
	}
	f.key = a->key;
	f.state_from = "awaiting_human";
	f.state_to = ledger_state_name(lr.state);
	f.version = lr.version;
	f.effect_id = effect_id[0] ? effect_id : NULL;
	f.target = json_string_value(json_object_get(effect, "target"));
	f.reason = reason[0] ? reason : NULL;
	f.contract = json_string_value(json_object_get(lr.decided, "contract"));
	f.output_fields = logged =
		f.contract != NULL && c->ctx->contracts != NULL
			? loggable_fields(contract_find(c->ctx->contracts, f.contract),
			                  json_object_get(lr.decided, "output"))
			: NULL;
	call_log(c, LOG_LEVEL_INFO, "approval.consumed", &f);
	if (effect_id[0] != '\0') {
		struct log_fields e = { .key = a->key, .effect_id = effect_id, .target = f.target,
			                .approval_id = a->id, .actor = subject, .decision = decision };

		call_log(c, LOG_LEVEL_INFO, "effect.enqueued", &e);
	}
	if (callback_id[0] != '\0') {
		struct log_fields e = { .key = a->key, .effect_id = callback_id,
			                .target = "callback", .approval_id = a->id,
			                .decision = decision };

		call_log(c, LOG_LEVEL_INFO, "effect.enqueued", &e);
	}
	goto out;
internal:
	db_rollback(c->ctx->db);
	f.reason = "internal";
	page_notice(c, 500, "approval.failed", "Something went wrong",
	            "The decision was not recorded. Try again; if it persists, tell the "
	            "operators.",
	            &f);
	goto out;
unavailable:
	db_rollback(c->ctx->db);
	(void)http_header(c->resp, "Retry-After", "5");
	f.reason = "database_unavailable";
	page_notice(c, 503, "db.unavailable", "Try again shortly",
	            "The database is unavailable; nothing was recorded.", &f);
out:
	for (k = 0; k < ncalls; k++)
		PQclear(calls[k].res);
	outbox_enqueue_call_free(&ec);
	outbox_enqueue_call_free(&cc);
	free(payload);
	free(cb_payload);
	free(logged);
	ledger_run_clear(&lr);
	digest_wipe(csrf, sizeof(csrf));
}

static void
approve_handle(struct call *c)
{
	struct gate_approval a = { 0 };
	struct log_fields f = { 0 };
	unsigned char hash[32];
	json_t *run = NULL;
	enum gate_rc grc;
	enum ledger_rc lrc;
	const char *state;
	bool post;

	page_headers(c);
	if (c->ctx->pages == NULL) {
		page_notice(c, 503, "approval.unavailable", "Approvals unavailable",
		            "This server has no approval templates configured.", &f);
		return;
	}
	if (c->req->remote_user == NULL || c->req->remote_user[0] == '\0') {
		f.reason = "no_subject";
		page_notice(c, 401, "auth.failed", "Sign-in required",
		            "Sign in to see and decide approvals.", &f);
		return;
	}
	f.actor = c->req->remote_user;
	if (!token_shape_valid(c->token)) {
		f.reason = "unknown_token";
		page_notice(c, 404, "approval.unknown", "Unknown link",
		            "This approval link is not valid. Check that it was copied whole.", &f);
		return;
	}
	if (c->route->id == ROUTE_APPROVE_DECIDE && !same_origin(c)) {
		f.reason = "cross_origin";
		page_notice(c, 403, "approval.refused", "Refused",
		            "Decisions are accepted only from the approval page itself.", &f);
		return;
	}
	token_hash(c->token, hash);
	grc = gate_find(c->ctx->db, hash, &a);
	if (grc == GATE_UNAVAILABLE) {
		(void)http_header(c->resp, "Retry-After", "5");
		page_notice(c, 503, "db.unavailable", "Try again shortly",
		            "The database is unavailable.", &f);
		return;
	}
	if (grc != GATE_OK) {
		f.reason = "unknown_token";
		page_notice(c, 404, "approval.unknown", "Unknown link",
		            "This approval link is not valid. Check that it was copied whole.", &f);
		return;
	}
	snprintf(c->key, sizeof(c->key), "%s", a.key);
	f.approval_id = a.id;
	if (c->route->id == ROUTE_APPROVE_DECIDE && a.effect != NULL) {
		/* The decision needs only what the challenge carries (the effect
		 * and the callback, copied when it was created); whether the run
		 * still awaits a decision is checked inside the transaction. */
		run = json_pack("{s:O, s:s}", "proposed_effect", a.effect, "state", "awaiting_human");
		if (run != NULL && a.callback_url != NULL)
			json_object_set_new(run, "callback_url", json_string(a.callback_url));
		lrc = run != NULL ? LEDGER_OK : LEDGER_ERROR;
	} else {
		lrc = ledger_status(c->ctx->db, a.client_id, a.key, false, &run);
	}
	if (lrc != LEDGER_OK) {
		page_notice(c, lrc == LEDGER_UNAVAILABLE ? 503 : 500, "approval.failed",
		            "Try again shortly", "The run could not be read.", &f);
		goto out;
	}
	if (a.state == APPROVAL_DECIDED) {
		decided:
		page_decided(c, 410, &a, run);
		if (c->route->id == ROUTE_APPROVE_DECIDE) {
			/* a decision on a used link is a refusal, and says so */
			f.reason = "used";
			f.decision = a.decision;
			call_log(c, LOG_LEVEL_NOTICE, "approval.refused", &f);
		}
		goto out;
	}
	post = c->route->id == ROUTE_APPROVE_DECIDE;
	if (a.state == APPROVAL_VOIDED || a.state == APPROVAL_REVOKED) {
		f.reason = gate_state_name(a.state);
		page_notice(c, 410, post ? "approval.refused" : "approval.gone", "No longer valid",
		            a.state == APPROVAL_VOIDED
		                ? "Another approver already decided this run."
		                : "This approval link was revoked by an operator.",
		            &f);
		goto out;
	}
	if (a.expired || a.state == APPROVAL_EXPIRED) {
		f.reason = "expired";
		page_notice(c, 410, post ? "approval.refused" : "approval.expired", "Expired",
		            "This approval link has expired. Nothing was sent.", &f);
		goto out;
	}
	state = json_string_value(json_object_get(run, "state"));
	if (state != NULL && strcmp(state, "awaiting_human") != 0) {
		/* The approval and the run are read one after the other: a decision
		 * committed in between shows as a pending approval of a decided
		 * run. Read the approval again before calling it anything else. */
		gate_approval_clear(&a);
		if (gate_find(c->ctx->db, hash, &a) == GATE_OK && a.state == APPROVAL_DECIDED)
			goto decided;
	}
	if (state == NULL || strcmp(state, "awaiting_human") != 0) {
		f.reason = "not_awaiting";
		page_notice(c, 410, post ? "approval.refused" : "approval.gone", "No longer waiting",
		            "The run is no longer waiting for a decision.", &f);
		goto out;
	}
	if (c->route->id == ROUTE_APPROVE_PAGE)
		page_card(c, &a, run);
	else
		approve_decide(c, hash, &a, run);
out:
	json_decref(run);
	gate_approval_clear(&a);
}

/* ---- the pipeline ---------------------------------------------------- */

/* The key of a claim body, when it is one we could look up. */
static const char *
claim_key(const struct call *c)
{
	json_t *key = json_object_get(c->body, "key");

	if (!json_is_string(key) || strlen(json_string_value(key)) != json_string_length(key) ||
	    !api_key_valid(json_string_value(key), json_string_length(key)))
		return NULL;
	return json_string_value(key);
}

/* The client id this thread last saw for a key hash. Ids never change for
 * a key, so a stale entry can only be a revoked key, which the
 * authentication that travels with the look-up catches. */
static long long
auth_cache_get(const struct api_ctx *ctx, const char *hash)
{
	int i;

	for (i = 0; i < API_AUTH_CACHE; i++)
		if (ctx->auth_cache[i].id != 0 && strcmp(ctx->auth_cache[i].hash, hash) == 0)
			return ctx->auth_cache[i].id;
	return 0;
}

static void
auth_cache_put(struct api_ctx *ctx, const char *hash, long long id)
{
	int i = ctx->auth_cache_next++ % API_AUTH_CACHE;

	snprintf(ctx->auth_cache[i].hash, sizeof(ctx->auth_cache[i].hash), "%s", hash);
	ctx->auth_cache[i].id = id;
}

/* Authenticates the request. A claim whose client this thread has seen
 * before sends its look-up in the same round trip: a duplicate then costs
 * one round trip in all. The look-up is a read, so when the key turns out
 * to be revoked nothing has happened. */
static bool
call_authenticate(struct call *c)
{
	const char *key = http_bearer(c->req->authorization), *run_key;
	struct clients_auth a;
	struct db_call calls[2];
	enum clients_rc rc;
	long long cached;
	int n = 1;

	memset(calls, 0, sizeof(calls));
	if (key == NULL) {
		call_reject(c, 401, "unauthorized", "an API key is required in the Authorization header",
		            NULL);
		return false;
	}
	if (!clients_auth_call(&a, key, &calls[0])) {
		call_reject(c, 401, "unauthorized", "the API key is unknown or revoked", NULL);
		return false;
	}
	if (c->route->id == ROUTE_CLAIM && c->body != NULL && (run_key = claim_key(c)) != NULL &&
	    (cached = auth_cache_get(c->ctx, a.hash)) != 0) {
		ledger_lookup_call(&c->lookup, cached, run_key, c->ctx->cfg->lease_cap_seconds,
		                   &calls[1]);
		n = 2;
	}
	if (n == 2)
		db_batch(c->ctx->db, calls, n); /* each call carries its own rc */
	else
		calls[0].rc = db_exec(c->ctx->db, calls[0].stmt, calls[0].params, &calls[0].res);
	rc = clients_auth_result(&calls[0], &c->client);
	PQclear(calls[0].res);
	if (n == 2) {
		if (rc == CLIENTS_OK && c->client.id == cached && calls[1].rc == DB_OK) {
			c->prefetch = calls[1];
			c->prefetched = true;
		} else {
			PQclear(calls[1].res);
		}
	}
	if (rc == CLIENTS_UNAVAILABLE) {
		call_unavailable(c, db_error(c->ctx->db));
		return false;
	}
	if (rc != CLIENTS_OK) {
		call_reject(c, 401, "unauthorized", "the API key is unknown or revoked", NULL);
		return false;
	}
	if (rc == CLIENTS_OK && cached == 0)
		auth_cache_put(c->ctx, a.hash, c->client.id);
	c->authed = true;
	return true;
}

/* Parses the body. Returns NULL when it is acceptable, else the answer to
 * give (after authentication: an unauthenticated caller learns nothing
 * about its body). */
struct body_error {
	int status;
	const char *code;
	char message[JSON_ERROR_TEXT_LENGTH + 256];
};

static bool
call_parse_body(struct call *c, struct body_error *e)
{
	struct canon_where where;
	char problem[JSON_ERROR_TEXT_LENGTH + 160];
	json_error_t jerr;
	enum canon_rc crc;

	e->status = 400;
	e->code = "invalid_json";
	if (!http_is_json(c->req->content_type)) {
		e->status = 415;
		e->code = "unsupported_media_type";
		snprintf(e->message, sizeof(e->message),
		         "the body must be sent as Content-Type: application/json");
		return false;
	}
	if (c->req->body_too_large) {
		e->status = 413;
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
	c->body = json_loadb(c->req->body, c->req->body_len, JSON_REJECT_DUPLICATES, &jerr);
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
	struct call c;
	struct body_error berr;
	const char *allow;
	bool body_ok = true;
	int status;
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	memset(&c, 0, sizeof(c));
	c.ctx = ctx;
	c.req = req;
	c.resp = resp;
	db_rollback(ctx->db);

	c.route = route_match(req->method, req->uri, c.key, sizeof(c.key), &status, &allow);
	if (c.route == NULL) {
		if (strncmp(req->uri, "/approve/", 9) == 0) {
			(void)http_header(resp, "Content-Type", "application/json");
			page_security_headers(&c);
		} else {
			json_headers(&c);
		}
		if (status == 405) {
			(void)http_header(resp, "Allow", allow);
			call_reject(&c, 405, "method_not_allowed",
			            "this path does not accept this method", NULL);
		} else if (status == 400) {
			c.key[0] = '\0';
			call_reject(&c, 400, "invalid_key",
			            "the key in the path must be 1 to 200 printable characters, "
			            "percent-encoded",
			            NULL);
		} else {
			call_reject(&c, 404, "not_found", "no such route", NULL);
		}
		return;
	}
	c.pattern = c.route->pattern;
	if (c.route->token) {
		/* the segment is a secret: keep it out of c.key, which is logged */
		snprintf(c.token, sizeof(c.token), "%s", c.key);
		c.key[0] = '\0';
		approve_handle(&c);
		goto out;
	}
	if (c.route->id == ROUTE_METRICS) {
		handle_metrics(&c);
		goto out;
	}
	json_headers(&c);
	if (c.route->body == BODY_JSON)
		body_ok = call_parse_body(&c, &berr);
	if (c.route->auth == AUTH_BEARER && !call_authenticate(&c))
		goto out;
	if (!body_ok) {
		call_reject(&c, berr.status, berr.code, berr.message, NULL);
		goto out;
	}

	switch (c.route->id) {
	case ROUTE_CLAIM:
		handle_claim(&c);
		break;
	case ROUTE_STATUS:
		handle_status(&c);
		break;
	case ROUTE_LEASE:
		handle_lease(&c);
		break;
	case ROUTE_TRANSITION:
		handle_transition(&c);
		break;
	case ROUTE_OUTPUT:
		handle_output(&c);
		break;
	case ROUTE_CANCEL:
		handle_cancel(&c);
		break;
	case ROUTE_HEALTHZ:
		handle_healthz(&c);
		break;
	case ROUTE_APPROVE_PAGE:
	case ROUTE_APPROVE_DECIDE:
	case ROUTE_METRICS:
		break; /* handled above */
	}
out:
	clock_gettime(CLOCK_MONOTONIC, &t1);
	metrics_observe_request((size_t)(c.route - routes),
	                        (double)(t1.tv_sec - t0.tv_sec) +
	                            (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	if (c.prefetched)
		PQclear(c.prefetch.res);
	json_decref(c.body);
	digest_wipe(c.token, sizeof(c.token));
}

/*
 * api.c — routes and handlers of the workflow API (SPEC 3.1–3.4, 11).
 *
 * Every request goes through the same steps: match the route table, check
 * authentication, check the body's media type, size and JSON shape, then
 * call the handler. Every answer that is a decision writes exactly one line
 * to the decision log.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "canon.h"
#include "clients.h"
#include "ledger.h"
#include "limits.h"
#include "log.h"

enum route_id {
	ROUTE_CLAIM,
	ROUTE_STATUS,
	ROUTE_LEASE,
	ROUTE_TRANSITION,
	ROUTE_HEALTHZ,
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
	const char *pattern;  /* for logs and errors */
	bool auth;            /* bearer API key required */
	bool body;            /* a JSON object body is required */
};

static const struct route routes[] = {
	{ ROUTE_CLAIM, "POST", SHAPE_EXACT, "/v1/runs", NULL, "/v1/runs", true, true },
	{ ROUTE_STATUS, "GET", SHAPE_KEY, "/v1/runs/", "", "/v1/runs/{key}", true, false },
	{ ROUTE_LEASE, "POST", SHAPE_KEY, "/v1/runs/", "/lease", "/v1/runs/{key}/lease",
	  true, true },
	{ ROUTE_TRANSITION, "POST", SHAPE_KEY, "/v1/runs/", "/transition",
	  "/v1/runs/{key}/transition", true, true },
	{ ROUTE_HEALTHZ, "GET", SHAPE_EXACT, "/healthz", NULL, "/healthz", false, false },
};

#define NROUTES (sizeof(routes) / sizeof(routes[0]))

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
};

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
api_route(const char *method, const char *uri, char *key, size_t keylen, int *status,
          const char **allow)
{
	size_t plen = http_path_len(uri), i;
	const char *pattern = NULL;

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
			*status = 405;
			*allow = routes[i].method;
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
		pattern = routes[i].pattern;
		*status = 200;
		break;
	}
	return pattern;
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
		                              "correlation_id", "lease_seconds", NULL };
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
	json_t *key, *out;

	if (!only_fields(c, fields))
		goto out;
	key = json_object_get(c->body, "key");
	if (!json_is_string(key) ||
	    !api_key_valid(json_string_value(key), json_string_length(key)) ||
	    strlen(json_string_value(key)) != json_string_length(key)) {
		call_reject(c, 400, "invalid_key",
		            "key must be a string of 1 to 200 printable characters", "key");
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

	rc = ledger_status(c->ctx->db, c->client.id, c->key, &run);
	if (rc != LEDGER_OK) {
		call_ledger_failure(c, rc);
		return;
	}
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
		http_json(c->resp, 409,
		          json_pack("{s:s, s:s}", "error", "lease_lost", "message",
		                    "this execution no longer owns the run; stop"));
		f.state_from = ledger_state_name(run.state);
		f.reason = "lease_lost";
		call_log(c, LOG_LEVEL_WARNING, "lease.lost", &f);
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
		http_json(c->resp, 409,
		          json_pack("{s:s, s:s}", "error", "lease_lost", "message",
		                    "this execution no longer owns the run; stop"));
		f.state_from = ledger_state_name(run.state);
		f.state_to = ledger_state_name((enum run_state)state);
		f.version = run.version;
		f.reason = "lease_lost";
		call_log(c, LOG_LEVEL_WARNING, "lease.lost", &f);
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
	char message[JSON_ERROR_TEXT_LENGTH + 96];
};

static bool
call_parse_body(struct call *c, struct body_error *e)
{
	json_error_t jerr;

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
	c->body = json_loadb(c->req->body, c->req->body_len, JSON_REJECT_DUPLICATES, &jerr);
	if (c->body == NULL) {
		snprintf(e->message, sizeof(e->message),
		         "the body is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
		         jerr.column);
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
	bool body_ok;
	int status;
	size_t i;

	memset(&c, 0, sizeof(c));
	c.ctx = ctx;
	c.req = req;
	c.resp = resp;
	db_rollback(ctx->db);
	(void)http_header(resp, "Content-Type", "application/json");
	(void)http_header(resp, "Cache-Control", "no-store");

	c.pattern = api_route(req->method, req->uri, c.key, sizeof(c.key), &status, &allow);
	if (c.pattern == NULL) {
		if (status == 405) {
			(void)http_header(resp, "Allow", allow);
			call_reject(&c, 405, "method_not_allowed",
			            "this path does not accept this method", NULL);
		} else if (status == 400) {
			call_reject(&c, 400, "invalid_key",
			            "the key in the path must be 1 to 200 printable characters, "
			            "percent-encoded",
			            NULL);
		} else {
			call_reject(&c, 404, "not_found", "no such route", NULL);
		}
		return;
	}
	for (i = 0; i < NROUTES; i++)
		if (routes[i].pattern == c.pattern)
			c.route = &routes[i];

	body_ok = !c.route->body || call_parse_body(&c, &berr);
	if (c.route->auth && !call_authenticate(&c))
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
	case ROUTE_HEALTHZ:
		handle_healthz(&c);
		break;
	}
out:
	if (c.prefetched)
		PQclear(c.prefetch.res);
	json_decref(c.body);
}

/*
 * http.h — the plain request/response model every handler sees.
 *
 * src/responder/fcgi.c fills a struct http_request from FastCGI params and
 * sends a struct http_response back; nothing else knows about FastCGI, so
 * every handler and parser is testable with plain structs.
 */
#ifndef OG_HTTP_H
#define OG_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "buf.h"

struct http_request {
	const char *method;          /* REQUEST_METHOD */
	const char *uri;             /* REQUEST_URI, raw (still percent-encoded) */
	const char *content_type;    /* CONTENT_TYPE */
	const char *authorization;   /* HTTP_AUTHORIZATION */
	const char *remote_user;     /* REMOTE_USER, set by nginx from SSO */
	const char *auth_groups;     /* AUTH_GROUPS, set by nginx from SSO */
	const char *origin;          /* HTTP_ORIGIN */
	const char *sec_fetch_site;  /* HTTP_SEC_FETCH_SITE */
	const char *remote_addr;     /* REMOTE_ADDR */
	const char *request_id;      /* REQUEST_ID (nginx $request_id) */
	const char *idempotency_key; /* HTTP_IDEMPOTENCY_KEY, the first one */
	int idempotency_key_fields;  /* how many Idempotency-Key fields came */
	const char *mcp_protocol_version; /* HTTP_MCP_PROTOCOL_VERSION */
	const char *slack_timestamp; /* HTTP_X_SLACK_REQUEST_TIMESTAMP */
	const char *slack_signature; /* HTTP_X_SLACK_SIGNATURE */
	long long content_length;    /* -1 when absent */
	const char *body;            /* NUL-terminated; NULL when none */
	size_t body_len;
	bool body_too_large;         /* the body passed the cap and was discarded */
};

struct http_response {
	int status;
	const char *content_type;  /* a static string, or NULL for none */
	struct buf headers;  /* "Name: value\r\n" lines */
	struct buf body;
};

void http_response_init(struct http_response *r);
void http_response_free(struct http_response *r);
void http_response_reset(struct http_response *r);
/* Adds a header; refuses (-1) a name or value holding a line break. */
int http_header(struct http_response *r, const char *name, const char *value);
/* Sets status and a compact JSON body (application/json); takes the
 * reference to obj. */
void http_json(struct http_response *r, int status, json_t *obj);
/* Where the identifiers of the problem types live: "type" is this
 * followed by the stable error code. */
#define HTTP_PROBLEM_TYPE_BASE "https://oncegate.dev/problems/"
/* An RFC 9457 problem document (application/problem+json): type (from
 * code), title, status, detail, plus the stable "error" code, "message"
 * (the same text as detail, kept for clients written against the first
 * release) and the members of ext (may be NULL; its reference is taken). */
void http_problem(struct http_response *r, int status, const char *code, const char *title,
                  const char *detail, json_t *ext);
const char *http_reason(int status);

/* Splits uri into path and query at '?'. Returns the path length. */
size_t http_path_len(const char *uri);
/* Percent-decodes src[0..len) into dst (at least len+1 bytes). Rejects bad
 * escapes and a decoded NUL. Returns the decoded length or -1. */
long http_pct_decode(const char *src, size_t len, char *dst);
/* Case-insensitive media-type check that ignores parameters:
 * "application/json; charset=utf-8" is application/json. */
bool http_is_json(const char *content_type);
/* The value of field name in an application/x-www-form-urlencoded body,
 * decoded ('+' is a space) into out (outlen bytes, NUL-terminated).
 * Returns its length, -1 when absent, -2 when malformed, too long, repeated,
 * or holding a NUL byte. */
long http_form_get(const char *body, size_t len, const char *name, char *out, size_t outlen);
/* Is content_type application/x-www-form-urlencoded (parameters ignored)? */
bool http_is_form(const char *content_type);

/* Percent-encodes s[0..len) into out (at least 3 * len + 1 bytes): every
 * octet but the RFC 3986 unreserved characters, so the result is one path
 * segment whatever s holds. Returns out. */
char *http_pct_encode(const char *s, size_t len, char *out);

/* The key an Idempotency-Key field value carries, into out (outlen bytes,
 * NUL-terminated): a Structured Field String ("...", the form the IETF
 * draft names), a Display String (%"..." with UTF-8 percent-encoded, for
 * keys beyond ASCII), or the bare value as most clients send it. Returns
 * its length, or -1 with *problem saying what is wrong, for the caller. */
long http_idempotency_key(const char *value, char *out, size_t outlen, const char **problem);

/* The token of "Bearer <token>", or NULL. */
const char *http_bearer(const char *authorization);

#endif

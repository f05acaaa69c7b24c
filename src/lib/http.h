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
	long long content_length;    /* -1 when absent */
	const char *body;            /* NUL-terminated; NULL when none */
	size_t body_len;
	bool body_too_large;         /* the body passed the cap and was discarded */
};

struct http_response {
	int status;
	struct buf headers;  /* "Name: value\r\n" lines */
	struct buf body;
};

void http_response_init(struct http_response *r);
void http_response_free(struct http_response *r);
void http_response_reset(struct http_response *r);
/* Adds a header; refuses (-1) a name or value holding a line break. */
int http_header(struct http_response *r, const char *name, const char *value);
/* Sets status and a compact JSON body; takes the reference to obj. */
void http_json(struct http_response *r, int status, json_t *obj);
/* {"error": code, "message": message} */
void http_error(struct http_response *r, int status, const char *code, const char *message);
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

/* The token of "Bearer <token>", or NULL. */
const char *http_bearer(const char *authorization);

#endif

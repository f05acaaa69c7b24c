/*
 * http.c — the plain request/response model and small, strict parsers for
 * the parts of a request that come from outside.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "canon.h"
#include "http.h"
#include "caps.h"
#include "utf8.h"

void
http_response_init(struct http_response *r)
{
	r->status = 200;
	buf_init(&r->headers, 8192);
	buf_init(&r->body, OG_RESPONSE_MAX);
}

void
http_response_free(struct http_response *r)
{
	if (r == NULL)
		return;
	buf_free(&r->headers);
	buf_free(&r->body);
}

void
http_response_reset(struct http_response *r)
{
	r->status = 200;
	buf_reset(&r->headers);
	buf_reset(&r->body);
}

int
http_header(struct http_response *r, const char *name, const char *value)
{
	/* A header value never comes from input unchecked, but refuse line
	 * breaks anyway: response splitting is not possible by construction. */
	if (strpbrk(name, "\r\n:") != NULL || strpbrk(value, "\r\n") != NULL)
		return -1;
	return buf_printf(&r->headers, "%s: %s\r\n", name, value);
}

void
http_json(struct http_response *r, int status, json_t *obj)
{
	char *text;

	buf_reset(&r->body);
	r->status = status;
	text = obj != NULL ? canon_dumps(obj, JSON_COMPACT) : NULL;
	json_decref(obj);
	if (text == NULL || buf_puts(&r->body, text) != 0 || buf_puts(&r->body, "\n") != 0) {
		/* Only out of memory or a response over OG_RESPONSE_MAX gets here. */
		buf_reset(&r->body);
		r->status = 500;
		if (buf_puts(&r->body, "{\"error\":\"internal_error\","
		                       "\"message\":\"response could not be built\"}\n") != 0)
			buf_reset(&r->body);
	}
	free(text);
}

void
http_error(struct http_response *r, int status, const char *code, const char *message)
{
	http_json(r, status, json_pack("{s:s, s:s}", "error", code, "message", message));
}

const char *
http_reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 201: return "Created";
	case 202: return "Accepted";
	case 204: return "No Content";
	case 303: return "See Other";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 409: return "Conflict";
	case 410: return "Gone";
	case 413: return "Content Too Large";
	case 415: return "Unsupported Media Type";
	case 422: return "Unprocessable Content";
	case 429: return "Too Many Requests";
	case 500: return "Internal Server Error";
	case 503: return "Service Unavailable";
	default:  return "Unknown";
	}
}

size_t
http_path_len(const char *uri)
{
	return strcspn(uri, "?#");
}

long
http_pct_decode(const char *src, size_t len, char *dst)
{
	size_t i, o = 0;

	for (i = 0; i < len; i++) {
		if (src[i] == '%') {
			int hi, lo;

			if (len - i < 3)
				return -1;
			hi = utf8_hex_digit(src[i + 1]);
			lo = utf8_hex_digit(src[i + 2]);
			if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
				return -1;
			dst[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else if (src[i] == '\0') {
			return -1;
		} else {
			dst[o++] = src[i];
		}
	}
	dst[o] = '\0';
	return (long)o;
}

static bool
media_type_is(const char *content_type, const char *type)
{
	size_t n = strlen(type);
	const char *p;

	if (content_type == NULL || strncasecmp(content_type, type, n) != 0)
		return false;
	p = content_type + n;
	while (*p == ' ' || *p == '\t')
		p++;
	return *p == '\0' || *p == ';';
}

bool
http_is_json(const char *content_type)
{
	return media_type_is(content_type, "application/json");
}

bool
http_is_form(const char *content_type)
{
	return media_type_is(content_type, "application/x-www-form-urlencoded");
}

/* Decodes one form component: '+' is a space, %XX an octet. */
static long
form_decode(const char *src, size_t len, char *out, size_t outlen)
{
	size_t i, o = 0;

	for (i = 0; i < len; i++) {
		char c = src[i];

		if (o + 1 >= outlen)
			return -2;
		if (c == '+') {
			c = ' ';
		} else if (c == '%') {
			int hi, lo;

			if (len - i < 3 || (hi = utf8_hex_digit(src[i + 1])) < 0 ||
			    (lo = utf8_hex_digit(src[i + 2])) < 0 || (hi == 0 && lo == 0))
				return -2;
			c = (char)(hi << 4 | lo);
			i += 2;
		} else if (c == '\0') {
			return -2;
		}
		out[o++] = c;
	}
	out[o] = '\0';
	return (long)o;
}

long
http_form_get(const char *body, size_t len, const char *name, char *out, size_t outlen)
{
	size_t nlen = strlen(name), i = 0;
	long found = -1;
	char decoded[128];

	while (i <= len && body != NULL) {
		size_t end = i, eq;
		long n;

		while (end < len && body[end] != '&')
			end++;
		eq = i;
		while (eq < end && body[eq] != '=')
			eq++;
		n = form_decode(body + i, eq - i, decoded, sizeof(decoded));
		if (n == (long)nlen && memcmp(decoded, name, nlen) == 0) {
			if (found != -1)
				return -2; /* a field given twice is ambiguous */
			found = eq < end ? form_decode(body + eq + 1, end - eq - 1, out, outlen)
			                 : form_decode("", 0, out, outlen);
			if (found < 0)
				return -2;
		}
		i = end + 1;
	}
	return found;
}

const char *
http_bearer(const char *authorization)
{
	const char *p;

	if (authorization == NULL || strncasecmp(authorization, "Bearer ", 7) != 0)
		return NULL;
	p = authorization + 7;
	while (*p == ' ')
		p++;
	return *p != '\0' ? p : NULL;
}

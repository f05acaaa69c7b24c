/*
 * http.c — the plain request/response model and small, strict parsers for
 * the parts of a request that come from outside.
 */
#include <stdio.h>
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
	r->content_type = NULL;
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
	r->content_type = NULL;
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

/* The body of a problem that could not be built: out of memory, or an
 * answer over OG_RESPONSE_MAX. */
static void
http_fallback(struct http_response *r)
{
	buf_reset(&r->body);
	r->status = 500;
	r->content_type = "application/problem+json";
	if (buf_puts(&r->body, "{\"type\":\"" HTTP_PROBLEM_TYPE_BASE "internal_error\","
	                       "\"title\":\"Internal error\",\"status\":500,"
	                       "\"detail\":\"the response could not be built\","
	                       "\"error\":\"internal_error\","
	                       "\"message\":\"the response could not be built\"}\n") != 0)
		buf_reset(&r->body);
}

static void
http_body(struct http_response *r, int status, const char *content_type, json_t *obj)
{
	char *text;

	buf_reset(&r->body);
	r->status = status;
	r->content_type = content_type;
	text = obj != NULL ? canon_dumps(obj, JSON_COMPACT) : NULL;
	json_decref(obj);
	if (text == NULL || buf_puts(&r->body, text) != 0 || buf_puts(&r->body, "\n") != 0)
		http_fallback(r);
	free(text);
}

void
http_json(struct http_response *r, int status, json_t *obj)
{
	http_body(r, status, "application/json", obj);
}

void
http_problem(struct http_response *r, int status, const char *code, const char *title,
             const char *detail, json_t *ext)
{
	char type[128];
	json_t *p;

	snprintf(type, sizeof(type), "%s%s", HTTP_PROBLEM_TYPE_BASE, code);
	p = json_pack("{s:s, s:s, s:i, s:s, s:s, s:s}", "type", type, "title", title, "status",
	              status, "detail", detail, "error", code, "message", detail);
	if (p != NULL && ext != NULL)
		json_object_update_missing(p, ext);
	json_decref(ext);
	http_body(r, status, "application/problem+json", p);
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

char *
http_pct_encode(const char *s, size_t len, char *out)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t i, o = 0;

	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '.' || c == '_' || c == '~') {
			out[o++] = (char)c;
		} else {
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	out[o] = '\0';
	return out;
}

/* A quoted string of a structured field, p past its opening quote; *end
 * past the closing one. RFC 8941 sf-string: printable ASCII, with \" and
 * \\ the only escapes. RFC 9651 Display String (display): printable ASCII,
 * other octets (and '%' and '"') as %xx with lowercase hex. */
static long
field_string(const char *p, bool display, char *out, size_t outlen, const char **end,
             const char **problem)
{
	size_t o = 0;

	for (;; p++) {
		unsigned char c = (unsigned char)*p;

		if (c == '\0') {
			*problem = "the quoted Idempotency-Key has no closing quote";
			return -1;
		}
		if (c == '"')
			break;
		if (!display && c == '\\') {
			p++;
			if (*p != '"' && *p != '\\') {
				*problem = "in a quoted Idempotency-Key a backslash may only escape \" "
				           "or \\";
				return -1;
			}
			c = (unsigned char)*p;
		} else if (display && c == '%') {
			int hi = p[1] >= 'A' && p[1] <= 'F' ? -1 : utf8_hex_digit(p[1]);
			int lo = hi < 0 || (p[2] >= 'A' && p[2] <= 'F') ? -1 : utf8_hex_digit(p[2]);

			if (lo < 0 || (hi == 0 && lo == 0)) {
				*problem = "in an Idempotency-Key Display String '%' must be followed by "
				           "two lowercase hex digits, not 00";
				return -1;
			}
			c = (unsigned char)(hi << 4 | lo);
			p += 2;
		} else if (c < 0x20 || c > 0x7e) {
			*problem = display ? "an Idempotency-Key Display String holds printable ASCII "
			                     "only, other bytes percent-encoded"
			                   : "a quoted Idempotency-Key holds printable ASCII only; send "
			                     "a key with other characters as a Display String, %\"...\" "
			                     "with its UTF-8 bytes percent-encoded (lowercase hex)";
			return -1;
		}
		if (o + 1 >= outlen) {
			*problem = "the Idempotency-Key is longer than a key may be";
			return -1;
		}
		out[o++] = (char)c;
	}
	out[o] = '\0';
	*end = p + 1;
	return (long)o;
}

long
http_idempotency_key(const char *value, char *out, size_t outlen, const char **problem)
{
	const char *p = value, *end;
	size_t n;
	long len;

	*problem = NULL;
	while (*p == ' ' || *p == '\t')
		p++;
	n = strlen(p);
	while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
		n--;
	if (n == 0) {
		*problem = "the Idempotency-Key header is empty";
		return -1;
	}
	if (p[0] == '"' || (p[0] == '%' && p[1] == '"')) {
		len = p[0] == '"' ? field_string(p + 1, false, out, outlen, &end, problem)
		                  : field_string(p + 2, true, out, outlen, &end, problem);
		if (len < 0)
			return -1;
		if (end != p + n) {
			*problem = *end == ';'   ? "Idempotency-Key takes no parameters"
			           : *end == ',' ? "more than one Idempotency-Key was sent"
			                         : "nothing may follow the closing quote of an "
			                           "Idempotency-Key";
			return -1;
		}
		return len;
	}
	/* The bare value, as most clients send it: taken as it is. */
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];

		if (c == '"' || c == ',') {
			*problem = "an unquoted Idempotency-Key must not hold '\"' or ',' (repeated "
			           "fields are joined with commas): send it quoted, \"...\"";
			return -1;
		}
		if (c < 0x20 || c == 0x7f) {
			*problem = "the Idempotency-Key holds a control character";
			return -1;
		}
	}
	if (n + 1 > outlen) {
		*problem = "the Idempotency-Key is longer than a key may be";
		return -1;
	}
	memcpy(out, p, n);
	out[n] = '\0';
	return (long)n;
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

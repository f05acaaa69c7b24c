/*
 * schema_format.c — email, uri and date-time (schema_format.h).
 *
 * Each checker reads the grammar of its RFC directly over the bytes, which
 * are never copied and may hold NUL; address literals go through
 * inet_pton, whose IPv4 form refuses leading zeros as RFC 3986 does.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "schema_format.h"

#define EMAIL_LOCAL_MAX  64
#define EMAIL_DOMAIN_MAX 255
#define DNS_LABEL_MAX    63

static const struct {
	const char *name;
	enum schema_format format;
	const char *expected;
} formats[] = {
	{ "email", SCHEMA_FORMAT_EMAIL,
	  "must be an e-mail address (format email), such as name@example.com" },
	{ "uri", SCHEMA_FORMAT_URI,
	  "must be an absolute URI (format uri), such as https://example.com/path" },
	{ "date-time", SCHEMA_FORMAT_DATE_TIME,
	  "must be an RFC 3339 date-time (format date-time), such as 2026-12-01T17:04:49Z" },
};

#define NFORMATS (sizeof(formats) / sizeof(formats[0]))

static bool
is_alpha(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool
is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool
is_hex(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Is s[0..n) an address inet_pton reads as family af? */
static bool
ip_ok(int af, const char *s, size_t n)
{
	char buf[INET6_ADDRSTRLEN + 1];
	unsigned char out[sizeof(struct in6_addr)];

	if (n == 0 || n >= sizeof(buf) || memchr(s, '\0', n) != NULL)
		return false;
	memcpy(buf, s, n);
	buf[n] = '\0';
	return inet_pton(af, buf, out) == 1;
}

/* ---- email (RFC 5321 Mailbox) ------------------------------------------- */

static bool
is_atext(char c)
{
	return is_alpha(c) || is_digit(c) || (c != '\0' && strchr("!#$%&'*+-/=?^_`{|}~", c) != NULL);
}

/* Dot-string: atoms of atext joined by single dots. */
static bool
dot_string(const char *s, size_t n)
{
	size_t i;

	if (n == 0 || s[0] == '.' || s[n - 1] == '.')
		return false;
	for (i = 0; i < n; i++)
		if (s[i] == '.' ? s[i + 1] == '.' : !is_atext(s[i]))
			return false;
	return true;
}

/* Quoted-string: printable ASCII between quotes, '"' and '\' escaped. */
static bool
quoted_string(const char *s, size_t n)
{
	size_t i;

	if (n < 2 || s[0] != '"' || s[n - 1] != '"')
		return false;
	for (i = 1; i < n - 1; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '\\') {
			i++;
			if (i == n - 1 || (unsigned char)s[i] < 32 || (unsigned char)s[i] > 126)
				return false;
		} else if (c < 32 || c > 126 || c == '"') {
			return false;
		}
	}
	return true;
}

/* Domain: labels of letters, digits and inner hyphens. */
static bool
domain_ok(const char *s, size_t n)
{
	size_t i, start = 0;

	if (n == 0 || n > EMAIL_DOMAIN_MAX)
		return false;
	for (i = 0; i <= n; i++) {
		if (i < n && s[i] != '.') {
			if (!is_alpha(s[i]) && !is_digit(s[i]) && s[i] != '-')
				return false;
			continue;
		}
		if (i == start || i - start > DNS_LABEL_MAX || s[start] == '-' || s[i - 1] == '-')
			return false;
		start = i + 1;
	}
	return true;
}

static bool
email_ok(const char *s, size_t n)
{
	const char *at = NULL;
	size_t i, local;

	/* The last '@' ends the local part: a quoted local part may hold '@'. */
	for (i = n; i > 0; i--)
		if (s[i - 1] == '@') {
			at = s + i - 1;
			break;
		}
	if (at == NULL)
		return false;
	local = (size_t)(at - s);
	if (local == 0 || local > EMAIL_LOCAL_MAX ||
	    !(dot_string(s, local) || quoted_string(s, local)))
		return false;
	s = at + 1;
	n -= local + 1;
	if (n >= 2 && s[0] == '[' && s[n - 1] == ']') {
		if (n > 7 && strncmp(s + 1, "IPv6:", 5) == 0)
			return ip_ok(AF_INET6, s + 6, n - 7);
		/* General-address-literal (a registered tag) is not one of these. */
		return ip_ok(AF_INET, s + 1, n - 2);
	}
	return domain_ok(s, n);
}

/* ---- uri (RFC 3986 URI) ------------------------------------------------- */

static bool
is_unreserved(char c)
{
	return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

static bool
is_sub_delim(char c)
{
	return c != '\0' && strchr("!$&'()*+,;=", c) != NULL;
}

/* Every byte of s[0..n) is unreserved, a sub-delim, one of `extra` or part
 * of a %XX escape. */
static bool
uri_chars(const char *s, size_t n, const char *extra)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (s[i] == '%') {
			if (i + 2 >= n || !is_hex(s[i + 1]) || !is_hex(s[i + 2]))
				return false;
			i += 2;
		} else if (!is_unreserved(s[i]) && !is_sub_delim(s[i]) &&
		           (s[i] == '\0' || strchr(extra, s[i]) == NULL)) {
			return false;
		}
	}
	return true;
}

/* IPvFuture: "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" ) */
static bool
ipvfuture_ok(const char *s, size_t n)
{
	size_t i = 1;

	if (n < 4 || (s[0] != 'v' && s[0] != 'V'))
		return false;
	while (i < n && is_hex(s[i]))
		i++;
	if (i == 1 || i >= n - 1 || s[i] != '.')
		return false;
	for (i++; i < n; i++)
		if (!is_unreserved(s[i]) && !is_sub_delim(s[i]) && s[i] != ':')
			return false;
	return true;
}

/* authority = [ userinfo "@" ] host [ ":" port ] */
static bool
authority_ok(const char *s, size_t n)
{
	const char *at = memchr(s, '@', n), *end = s + n, *colon;

	if (at != NULL) {
		if (!uri_chars(s, (size_t)(at - s), ":"))
			return false;
		s = at + 1;
	}
	if (s < end && *s == '[') {
		const char *close = memchr(s, ']', (size_t)(end - s));

		if (close == NULL)
			return false;
		if (!ip_ok(AF_INET6, s + 1, (size_t)(close - s - 1)) &&
		    !ipvfuture_ok(s + 1, (size_t)(close - s - 1)))
			return false;
		colon = close + 1;
		if (colon < end && *colon != ':')
			return false;
	} else {
		colon = memchr(s, ':', (size_t)(end - s));
		if (colon == NULL)
			colon = end;
		if (!uri_chars(s, (size_t)(colon - s), ""))   /* reg-name or IPv4 */
			return false;
	}
	for (s = colon + (colon < end); s < end; s++)
		if (!is_digit(*s))
			return false;
	return true;
}

static bool
uri_ok(const char *s, size_t n)
{
	const char *end = s + n, *p = s, *q;

	if (n == 0 || !is_alpha(*p))
		return false;
	while (p < end && (is_alpha(*p) || is_digit(*p) || *p == '+' || *p == '-' || *p == '.'))
		p++;
	if (p == end || *p != ':')
		return false;
	p++;
	if (end - p >= 2 && p[0] == '/' && p[1] == '/') {
		p += 2;
		for (q = p; q < end && *q != '/' && *q != '?' && *q != '#'; q++)
			;
		if (!authority_ok(p, (size_t)(q - p)))
			return false;
		p = q;
	}
	/* The path: pchar and "/". (A path without an authority cannot start
	 * with "//", which the branch above has taken.) */
	for (q = p; q < end && *q != '?' && *q != '#'; q++)
		;
	if (!uri_chars(p, (size_t)(q - p), ":@/"))
		return false;
	p = q;
	if (p < end && *p == '?') {
		for (q = ++p; q < end && *q != '#'; q++)
			;
		if (!uri_chars(p, (size_t)(q - p), ":@/?"))
			return false;
		p = q;
	}
	if (p < end && *p == '#')
		return uri_chars(p + 1, (size_t)(end - p - 1), ":@/?");
	return true;
}

/* ---- date-time (RFC 3339) ----------------------------------------------- */

/* n digits at s as a number; -1 when one is not a digit. */
static int
digits(const char *s, size_t n)
{
	int v = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		if (!is_digit(s[i]))
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

static int
days_in_month(int year, int month)
{
	static const int days[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;

	return month == 2 && leap ? 29 : days[month - 1];
}

static bool
date_time_ok(const char *s, size_t n)
{
	int year, month, day, hour, minute, second, oh = 0, om = 0, sign = 0, utc;
	size_t i = 19;

	/* 1985-04-12T23:20:50 */
	if (n < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') ||
	    s[13] != ':' || s[16] != ':')
		return false;
	year = digits(s, 4);
	month = digits(s + 5, 2);
	day = digits(s + 8, 2);
	hour = digits(s + 11, 2);
	minute = digits(s + 14, 2);
	second = digits(s + 17, 2);
	if (year < 0 || month < 1 || month > 12 || day < 1 ||
	    day > days_in_month(year, month) || hour < 0 || hour > 23 || minute < 0 ||
	    minute > 59 || second < 0 || second > 60)
		return false;
	if (s[i] == '.') {
		for (i++; i < n && is_digit(s[i]); i++)
			;
		if (i == 20)
			return false;
	}
	if (i + 1 == n && (s[i] == 'Z' || s[i] == 'z')) {
		sign = 0;
	} else if (i + 6 == n && (s[i] == '+' || s[i] == '-') && s[i + 3] == ':') {
		sign = s[i] == '+' ? 1 : -1;
		oh = digits(s + i + 1, 2);
		om = digits(s + i + 4, 2);
		if (oh < 0 || oh > 23 || om < 0 || om > 59)
			return false;
	} else {
		return false;
	}
	/* A leap second is the last second of a UTC day. */
	utc = ((hour * 60 + minute - sign * (oh * 60 + om)) % 1440 + 1440) % 1440;
	return second < 60 || utc == 23 * 60 + 59;
}

/* ---- the table -------------------------------------------------------------- */

enum schema_format
schema_format_named(const char *name, size_t n)
{
	size_t i;

	for (i = 0; i < NFORMATS; i++)
		if (strlen(formats[i].name) == n && memcmp(formats[i].name, name, n) == 0)
			return formats[i].format;
	return SCHEMA_FORMAT_NONE;
}

bool
schema_format_check(enum schema_format f, const char *s, size_t n)
{
	switch (f) {
	case SCHEMA_FORMAT_NONE: return true;
	case SCHEMA_FORMAT_EMAIL: return email_ok(s, n);
	case SCHEMA_FORMAT_URI: return uri_ok(s, n);
	case SCHEMA_FORMAT_DATE_TIME: return date_time_ok(s, n);
	}
	return false;
}

const char *
schema_format_expected(enum schema_format f)
{
	size_t i;

	for (i = 0; i < NFORMATS; i++)
		if (formats[i].format == f)
			return formats[i].expected;
	return "must match its format";
}

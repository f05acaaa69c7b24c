/*
 * classify.c — the outcome classifier. See classify.h.
 *
 * The policy is three tables, read top to bottom, first match wins:
 *
 *   status_rules     a final answer arrived: its status decides;
 *   body_rules       refines an HTTP 2xx by the rejection pointer;
 *   transport_rules  no final answer: what broke, and whether the request
 *                    had been sent, decide.
 *
 * Rules map to a reason; the reason alone fixes the class (reasons[]), so
 * every reason has exactly one route.
 *
 * What counts as a final answer: HTTP 200..599 (libcurl hides 1xx; a
 * transport error after the status line only means the body was cut); SMTP
 * 4xx/5xx always, SMTP 2xx only when nothing failed — libcurl reports the
 * last reply it saw, and a 250 to RCPT followed by a reset says nothing
 * about the message.
 *
 * "Sent": HTTP counts the request as sent once any byte went out, or once
 * any status or response came back (the peer read it). Bytes in the
 * kernel's buffer may never have arrived, but we cannot tell, so the
 * conservative answer is "sent". SMTP counts only message content after
 * DATA (classify.h).
 */
#include "classify.h"
#include "jptr.h"

#include <stdint.h>
#include <string.h>

#include <jansson.h>

/* ---- reasons: name and the one class each belongs to -------------------- */

static const struct {
	const char *name;
	enum outcome_class cls;
} reasons[REASON__COUNT] = {
#define R(e, n, c) [e] = { n, c }
	R(REASON_HTTP_2XX,                 "http_2xx",                 OUTCOME_SUCCESS),
	R(REASON_HTTP_2XX_TRUNCATED,       "http_2xx_truncated",       OUTCOME_SUCCESS),
	R(REASON_HTTP_2XX_UNREADABLE,      "http_2xx_unreadable",      OUTCOME_AMBIGUOUS),
	R(REASON_BUSINESS_REJECTION,       "business_rejection",       OUTCOME_PERMANENT),
	R(REASON_HTTP_303_SEE_OTHER,       "http_303_see_other",       OUTCOME_AMBIGUOUS),
	R(REASON_HTTP_REDIRECT,            "http_redirect",            OUTCOME_PERMANENT),
	R(REASON_HTTP_UNAUTHORIZED,        "http_unauthorized",        OUTCOME_PERMANENT),
	R(REASON_HTTP_FORBIDDEN,           "http_forbidden",           OUTCOME_PERMANENT),
	R(REASON_HTTP_408_IDEMPOTENT,      "http_408_idempotent",      OUTCOME_TRANSIENT),
	R(REASON_HTTP_408_NOT_IDEMPOTENT,  "http_408_not_idempotent",  OUTCOME_AMBIGUOUS),
	R(REASON_HTTP_409_IDEMPOTENT,      "http_409_idempotent",      OUTCOME_TRANSIENT),
	R(REASON_HTTP_409_NOT_IDEMPOTENT,  "http_409_not_idempotent",  OUTCOME_PERMANENT),
	R(REASON_HTTP_429,                 "http_429",                 OUTCOME_TRANSIENT),
	R(REASON_HTTP_4XX_REJECTED,        "http_4xx_rejected",        OUTCOME_PERMANENT),
	R(REASON_HTTP_503,                 "http_503",                 OUTCOME_TRANSIENT),
	R(REASON_HTTP_5XX_IDEMPOTENT,      "http_5xx_idempotent",      OUTCOME_TRANSIENT),
	R(REASON_HTTP_5XX_NOT_IDEMPOTENT,  "http_5xx_not_idempotent",  OUTCOME_AMBIGUOUS),
	R(REASON_SMTP_2XX,                 "smtp_2xx",                 OUTCOME_SUCCESS),
	R(REASON_SMTP_4XX,                 "smtp_4xx",                 OUTCOME_TRANSIENT),
	R(REASON_SMTP_5XX,                 "smtp_5xx",                 OUTCOME_PERMANENT),
	R(REASON_CONNECT_FAILED,           "connect_failed",           OUTCOME_TRANSIENT),
	R(REASON_DNS_FAILED,               "dns_failed",               OUTCOME_TRANSIENT),
	R(REASON_TLS_FAILED_BEFORE_SEND,   "tls_failed_before_send",   OUTCOME_TRANSIENT),
	R(REASON_TIMEOUT_BEFORE_SEND,      "timeout_before_send",      OUTCOME_TRANSIENT),
	R(REASON_FAILED_BEFORE_SEND,       "failed_before_send",       OUTCOME_TRANSIENT),
	R(REASON_TIMEOUT_AFTER_SEND_IDEMPOTENT,
	  "timeout_after_send_idempotent",                             OUTCOME_TRANSIENT),
	R(REASON_TIMEOUT_AFTER_SEND_NOT_IDEMPOTENT,
	  "timeout_after_send_not_idempotent",                         OUTCOME_AMBIGUOUS),
	R(REASON_CONNECTION_LOST_AFTER_SEND_IDEMPOTENT,
	  "connection_lost_after_send_idempotent",                     OUTCOME_TRANSIENT),
	R(REASON_CONNECTION_LOST_AFTER_SEND_NOT_IDEMPOTENT,
	  "connection_lost_after_send_not_idempotent",                 OUTCOME_AMBIGUOUS),
	R(REASON_NO_VERDICT_AFTER_SEND_IDEMPOTENT,
	  "no_verdict_after_send_idempotent",                          OUTCOME_TRANSIENT),
	R(REASON_NO_VERDICT_AFTER_SEND_NOT_IDEMPOTENT,
	  "no_verdict_after_send_not_idempotent",                      OUTCOME_AMBIGUOUS),
	R(REASON_INVALID_INPUT,            "invalid_input",            OUTCOME_AMBIGUOUS),
#undef R
};

/* ---- the rule tables ---------------------------------------------------- */

enum tri { ANY = 0, YES, NO };

#define KIND_ANY (-1)
#define ERR_ANY  (-1)

/* A final answer arrived. `idem` is the target's Idempotency-Key support;
 * SMTP has none (Message-ID dedup is the receiver's choice, not a promise). */
static const struct status_rule {
	int kind;
	int lo, hi;
	enum tri idem;
	enum outcome_reason reason;
} status_rules[] = {
	{ ATTEMPT_HTTP, 200, 299, ANY, REASON_HTTP_2XX },         /* then body_rules */
	/* After a POST, 303 usually means "done, look there": it may have acted. */
	{ ATTEMPT_HTTP, 303, 303, ANY, REASON_HTTP_303_SEE_OTHER },
	/* Redirects are not followed (re-POSTing elsewhere is not ours to
	 * decide): the target URL is wrong, an operator must fix it. */
	{ ATTEMPT_HTTP, 300, 399, ANY, REASON_HTTP_REDIRECT },
	{ ATTEMPT_HTTP, 401, 401, ANY, REASON_HTTP_UNAUTHORIZED },
	{ ATTEMPT_HTTP, 407, 407, ANY, REASON_HTTP_UNAUTHORIZED },
	{ ATTEMPT_HTTP, 403, 403, ANY, REASON_HTTP_FORBIDDEN },
	{ ATTEMPT_HTTP, 408, 408, YES, REASON_HTTP_408_IDEMPOTENT },
	{ ATTEMPT_HTTP, 408, 408, NO,  REASON_HTTP_408_NOT_IDEMPOTENT },
	/* With idempotency keys, 409 is "a request with this key is still being
	 * processed" (Stripe; draft-ietf-httpapi-idempotency-key-header): the
	 * retry gets the stored result. Otherwise it is a state conflict. */
	{ ATTEMPT_HTTP, 409, 409, YES, REASON_HTTP_409_IDEMPOTENT },
	{ ATTEMPT_HTTP, 409, 409, NO,  REASON_HTTP_409_NOT_IDEMPOTENT },
	{ ATTEMPT_HTTP, 429, 429, ANY, REASON_HTTP_429 },
	{ ATTEMPT_HTTP, 400, 499, ANY, REASON_HTTP_4XX_REJECTED },
	/* 503 means the provider did not process the request. */
	{ ATTEMPT_HTTP, 503, 503, ANY, REASON_HTTP_503 },
	{ ATTEMPT_HTTP, 500, 599, YES, REASON_HTTP_5XX_IDEMPOTENT },
	{ ATTEMPT_HTTP, 500, 599, NO,  REASON_HTTP_5XX_NOT_IDEMPOTENT },
	{ ATTEMPT_SMTP, 200, 299, ANY, REASON_SMTP_2XX },
	{ ATTEMPT_SMTP, 400, 499, ANY, REASON_SMTP_4XX },
	/* 552 included: we send one recipient per message, so RFC 5321's
	 * "treat 552 on RCPT as 452" (too many recipients) cannot apply. */
	{ ATTEMPT_SMTP, 500, 599, ANY, REASON_SMTP_5XX },
};

/* An HTTP 2xx, by what its body says. */
enum body_state {
	BODY_UNCHECKED,     /* no rejection pointer configured */
	BODY_UNCHECKED_CUT, /* … and the body was cut short (cap, reset, timeout) */
	BODY_CLEAN,         /* pointer checked: no rejection (or an empty body) */
	BODY_REJECTED,      /* pointer checked: rejection */
	BODY_UNREADABLE,    /* pointer configured, body not JSON, cut short, or pointer malformed */
};

static const enum outcome_reason body_rules[] = {
	[BODY_UNCHECKED]     = REASON_HTTP_2XX,
	/* The status is the provider's verdict and it acted; the body only
	 * carries evidence (the provider id may be missing). */
	[BODY_UNCHECKED_CUT] = REASON_HTTP_2XX_TRUNCATED,
	[BODY_CLEAN]         = REASON_HTTP_2XX,
	[BODY_REJECTED]      = REASON_BUSINESS_REJECTION,
	/* This target reports rejections inside 2xx bodies and we cannot read
	 * this one (a proxy's HTML page, a truncated body): whether it acted is
	 * unknown. Ambiguous sends it to reconciliation, never to a resend. */
	[BODY_UNREADABLE]    = REASON_HTTP_2XX_UNREADABLE,
};

/* No final answer. `sent` as described at the top; `err` NONE here means
 * the exchange ended without error and without a final status. Only HTTP
 * targets that honour the idempotency key may be retried after sending. */
static const struct transport_rule {
	int kind;
	int err;
	enum tri sent;
	enum tri idem;
	enum outcome_reason reason;
} transport_rules[] = {
	{ KIND_ANY,     ATTEMPT_ERR_CONNECT, NO,  ANY, REASON_CONNECT_FAILED },
	{ KIND_ANY,     ATTEMPT_ERR_DNS,     NO,  ANY, REASON_DNS_FAILED },
	{ KIND_ANY,     ATTEMPT_ERR_TLS,     NO,  ANY, REASON_TLS_FAILED_BEFORE_SEND },
	{ KIND_ANY,     ATTEMPT_ERR_TIMEOUT, NO,  ANY, REASON_TIMEOUT_BEFORE_SEND },
	{ KIND_ANY,     ERR_ANY,             NO,  ANY, REASON_FAILED_BEFORE_SEND },
	{ ATTEMPT_HTTP, ATTEMPT_ERR_TIMEOUT, YES, YES, REASON_TIMEOUT_AFTER_SEND_IDEMPOTENT },
	{ KIND_ANY,     ATTEMPT_ERR_TIMEOUT, YES, ANY, REASON_TIMEOUT_AFTER_SEND_NOT_IDEMPOTENT },
	{ ATTEMPT_HTTP, ATTEMPT_ERR_NONE,    YES, YES, REASON_NO_VERDICT_AFTER_SEND_IDEMPOTENT },
	{ KIND_ANY,     ATTEMPT_ERR_NONE,    YES, ANY, REASON_NO_VERDICT_AFTER_SEND_NOT_IDEMPOTENT },
	{ ATTEMPT_HTTP, ERR_ANY,             YES, YES, REASON_CONNECTION_LOST_AFTER_SEND_IDEMPOTENT },
	{ KIND_ANY,     ERR_ANY,             YES, ANY, REASON_CONNECTION_LOST_AFTER_SEND_NOT_IDEMPOTENT },
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static bool
tri_match(enum tri t, bool v)
{
	return t == ANY || (t == YES) == v;
}

bool
classify_pointer_valid(const char *pointer)
{
	if (pointer != NULL && *pointer == '!')
		pointer++;
	return jptr_valid(pointer, CLASSIFY_POINTER_MAX);
}

/* Falsy: null, false, 0, "", [] and {}. Empty containers are falsy so that
 * "/errors" against {"errors": []} reads as no rejection. */
static bool
json_truthy(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_NULL:
	case JSON_FALSE:
		return false;
	case JSON_TRUE:
		return true;
	case JSON_INTEGER:
		return json_integer_value(v) != 0;
	case JSON_REAL:
		return json_real_value(v) != 0.0;
	case JSON_STRING:
		return json_string_length(v) != 0;
	case JSON_ARRAY:
		return json_array_size(v) != 0;
	case JSON_OBJECT:
		return json_object_size(v) != 0;
	}
	return true;
}

static bool
all_space(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
			return false;
	return true;
}

static enum body_state
body_check(const struct attempt_result *a)
{
	const char *p = a->rejection_pointer;
	bool negate;
	json_error_t jerr;
	json_t *doc, *v;
	enum body_state st;

	if (p == NULL)
		return a->transport_error == ATTEMPT_ERR_NONE ? BODY_UNCHECKED : BODY_UNCHECKED_CUT;
	if (a->transport_error != ATTEMPT_ERR_NONE || !classify_pointer_valid(p))
		return BODY_UNREADABLE;
	/* Nothing to reject with: 204, or an empty 200. */
	if (a->body == NULL || all_space(a->body, a->body_len))
		return BODY_CLEAN;
	negate = (*p == '!');
	if (negate)
		p++;
	/* Duplicate members would make the verdict depend on the parser. */
	doc = json_loadb(a->body, a->body_len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
	if (doc == NULL)
		return BODY_UNREADABLE;
	v = jptr_get(doc, p, CLASSIFY_POINTER_MAX);
	if (v == NULL)
		st = BODY_CLEAN;
	else
		st = json_truthy(v) != negate ? BODY_REJECTED : BODY_CLEAN;
	json_decref(doc);
	return st;
}

/* ---- Retry-After (RFC 9110 10.2.3) --------------------------------------- */

/* Longer than any valid value with its whitespace: garbage, not parsed. */
#define RETRY_AFTER_LEN_MAX 64

static const char *const month_names[12] = {
	"Jan", "Feb", "Mar", "Apr", "May", "Jun",
	"Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
};
static const char *const day_names[7] = {
	"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun",
};
static const char *const day_names_long[7] = {
	"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday",
};

/* Exactly n digits. */
static bool
digits(const char *s, int n, int *out)
{
	int v = 0, i;

	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return true;
}

static int
month_of(const char *s)
{
	int i;

	for (i = 0; i < 12; i++)
		if (strncmp(s, month_names[i], 3) == 0)
			return i + 1;
	return 0;
}

static bool
is_day_name(const char *s, size_t n, const char *const names[7])
{
	int i;

	for (i = 0; i < 7; i++)
		if (strlen(names[i]) == n && strncmp(s, names[i], n) == 0)
			return true;
	return false;
}

/* "HH:MM:SS" */
static bool
hms(const char *s, int *h, int *m, int *sec)
{
	return digits(s, 2, h) && s[2] == ':' && digits(s + 3, 2, m) && s[5] == ':' &&
	       digits(s + 6, 2, sec) && *h <= 23 && *m <= 59 && *sec <= 60;
}

static bool
leap(int y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static long long
days_from_civil(int y, int m, int d)
{
	long long yy = y - (m <= 2);
	long long era = (yy >= 0 ? yy : yy - 399) / 400;
	long long yoe = yy - era * 400;
	long long doy = (153LL * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;

	return era * 146097 + doe - 719468;
}

static bool
to_epoch(int y, int mon, int d, int h, int mi, int s, long long *out)
{
	static const int mdays[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };

	if (y < 1900 || mon < 1 || mon > 12 || d < 1 ||
	    d > mdays[mon - 1] + (mon == 2 && leap(y)))
		return false;
	*out = days_from_civil(y, mon, d) * 86400 + h * 3600 + mi * 60 + s;
	return true;
}

/* IMF-fixdate, rfc850-date or asctime-date, exactly (no OWS inside). */
static bool
http_date(const char *s, size_t n, time_t now, long long *out)
{
	const char *c;
	int y, mon, d, h, mi, sec;

	/* "Sun, 06 Nov 1994 08:49:37 GMT" */
	if (n == 29 && is_day_name(s, 3, day_names) && strncmp(s + 3, ", ", 2) == 0 &&
	    digits(s + 5, 2, &d) && s[7] == ' ' && (mon = month_of(s + 8)) != 0 &&
	    s[11] == ' ' && digits(s + 12, 4, &y) && s[16] == ' ' &&
	    hms(s + 17, &h, &mi, &sec) && strncmp(s + 25, " GMT", 4) == 0)
		return to_epoch(y, mon, d, h, mi, sec, out);

	/* "Sun Nov  6 08:49:37 1994" */
	if (n == 24 && is_day_name(s, 3, day_names) && s[3] == ' ' &&
	    (mon = month_of(s + 4)) != 0 && s[7] == ' ' &&
	    (digits(s + 8, 2, &d) || (s[8] == ' ' && digits(s + 9, 1, &d))) &&
	    s[10] == ' ' && hms(s + 11, &h, &mi, &sec) && s[19] == ' ' &&
	    digits(s + 20, 4, &y))
		return to_epoch(y, mon, d, h, mi, sec, out);

	/* "Sunday, 06-Nov-94 08:49:37 GMT" */
	c = memchr(s, ',', n);
	if (c != NULL && is_day_name(s, (size_t)(c - s), day_names_long) &&
	    n - (size_t)(c - s) == 24 && c[1] == ' ' && digits(c + 2, 2, &d) &&
	    c[4] == '-' && (mon = month_of(c + 5)) != 0 && c[8] == '-' &&
	    digits(c + 9, 2, &y) && c[11] == ' ' && hms(c + 12, &h, &mi, &sec) &&
	    strncmp(c + 20, " GMT", 4) == 0) {
		/* RFC 9110: a two-digit year more than 50 years ahead is in the
		 * past century. */
		struct tm tm;
		int now_year = 2000;

		if (gmtime_r(&now, &tm) != NULL)
			now_year = tm.tm_year + 1900;
		y += now_year - now_year % 100;
		if (y > now_year + 50)
			y -= 100;
		return to_epoch(y, mon, d, h, mi, sec, out);
	}
	return false;
}

static long
retry_after_ms(const char *v, time_t now)
{
	const long max = CLASSIFY_RETRY_AFTER_MAX_S;
	size_t n;
	long long when;

	if (v == NULL)
		return -1;
	while (*v == ' ' || *v == '\t')
		v++;
	n = strnlen(v, RETRY_AFTER_LEN_MAX + 1);
	if (n > RETRY_AFTER_LEN_MAX)
		return -1;
	while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
		n--;
	if (n == 0)
		return -1;

	if (v[0] >= '0' && v[0] <= '9') {
		/* delta-seconds = 1*DIGIT; no sign, no fraction. */
		long secs = 0;
		size_t i;

		for (i = 0; i < n; i++) {
			if (v[i] < '0' || v[i] > '9')
				return -1;
			if (secs <= max)
				secs = secs * 10 + (v[i] - '0');
		}
		return secs <= max ? secs * 1000 : -1;
	}

	if (!http_date(v, n, now, &when))
		return -1;
	if ((long long)now >= when)
		return 0;   /* already past: may retry now */
	if ((long long)now < when - max)
		return -1;
	return (long)(when - (long long)now) * 1000;
}

/* ---- the classifier ----------------------------------------------------- */

static bool
final_answer(const struct attempt_result *a)
{
	if (a->status < 200 || a->status > 599)
		return false;
	if (a->kind == ATTEMPT_SMTP && a->status < 400)
		return a->status < 300 && a->transport_error == ATTEMPT_ERR_NONE;
	return true;
}

static enum outcome_reason
by_status(const struct attempt_result *a)
{
	size_t i;

	for (i = 0; i < NELEM(status_rules); i++) {
		const struct status_rule *r = &status_rules[i];

		if ((int)a->kind == r->kind && a->status >= r->lo && a->status <= r->hi &&
		    tri_match(r->idem, a->target_idempotent))
			return r->reason;
	}
	return REASON_INVALID_INPUT;   /* unreachable: final_answer() covers the rows */
}

static enum outcome_reason
by_transport(const struct attempt_result *a)
{
	bool sent = a->request_sent;
	size_t i;

	if (a->kind == ATTEMPT_HTTP)
		sent = sent || a->status != 0 || a->transport_error == ATTEMPT_ERR_TOO_LARGE;
	for (i = 0; i < NELEM(transport_rules); i++) {
		const struct transport_rule *r = &transport_rules[i];

		if ((r->kind == KIND_ANY || r->kind == (int)a->kind) &&
		    (r->err == ERR_ANY || r->err == (int)a->transport_error) &&
		    tri_match(r->sent, sent) && tri_match(r->idem, a->target_idempotent))
			return r->reason;
	}
	return REASON_INVALID_INPUT;   /* unreachable: the last row matches all */
}

struct outcome
classify_attempt(const struct attempt_result *a, time_t now)
{
	struct outcome o = { OUTCOME_AMBIGUOUS, REASON_INVALID_INPUT, -1 };

	if (a == NULL || (a->kind != ATTEMPT_HTTP && a->kind != ATTEMPT_SMTP) ||
	    (unsigned)a->transport_error > ATTEMPT_ERR_OTHER)
		return o;
	if (!final_answer(a))
		o.reason = by_transport(a);
	else if (a->kind == ATTEMPT_HTTP && a->status <= 299)
		o.reason = body_rules[body_check(a)];
	else
		o.reason = by_status(a);
	o.cls = classify_reason_class(o.reason);
	o.retry_after_ms = retry_after_ms(a->retry_after, now);
	return o;
}

/* ---- names -------------------------------------------------------------- */

const char *
classify_class_name(enum outcome_class c)
{
	switch (c) {
	case OUTCOME_SUCCESS:
		return "success";
	case OUTCOME_TRANSIENT:
		return "transient";
	case OUTCOME_PERMANENT:
		return "permanent";
	case OUTCOME_AMBIGUOUS:
		return "ambiguous";
	}
	return "invalid";
}

const char *
classify_reason_name(enum outcome_reason r)
{
	if ((unsigned)r >= REASON__COUNT || reasons[r].name == NULL)
		return "invalid";
	return reasons[r].name;
}

enum outcome_class
classify_reason_class(enum outcome_reason r)
{
	if ((unsigned)r >= REASON__COUNT || reasons[r].name == NULL)
		return OUTCOME_AMBIGUOUS;
	return reasons[r].cls;
}

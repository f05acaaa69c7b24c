/*
 * check_classify.c — the outcome classifier.
 *
 * One table: what the provider observed → the class and the reason name
 * (the name is what logs and dead letters show, so it is asserted as
 * text), plus the parsed Retry-After. Every reason must be produced by at
 * least one row, so a new rule cannot land without its fixture.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "classify.h"
#include "suitelib.h"

/* Sun, 06 Nov 1994 08:49:37 GMT (the RFC 9110 example date). */
#define NOW       ((time_t)784111777)
/* Thu, 29 Feb 1996 00:00:00 GMT */
#define NOW_LEAP  ((time_t)825552000)
/* Thu, 01 Jan 2026 00:00:00 GMT */
#define NOW_2026  ((time_t)1767225600)

struct classify_case {
	const char *name;
	struct attempt_result a;
	enum outcome_class cls;
	const char *reason;
	long retry_after_ms;
	time_t now;                 /* 0: NOW */
};

#define S OUTCOME_SUCCESS
#define T OUTCOME_TRANSIENT
#define P OUTCOME_PERMANENT
#define A OUTCOME_AMBIGUOUS

/* Attempt fields, combined with designated initializers. */
#define HTTP(st)        .kind = ATTEMPT_HTTP, .status = (st), .request_sent = true
#define SMTP(st)        .kind = ATTEMPT_SMTP, .status = (st), .request_sent = true
#define ERR(e)          .transport_error = ATTEMPT_ERR_##e
#define HTTP_UNSENT(st) .kind = ATTEMPT_HTTP, .status = (st), .request_sent = false
#define SMTP_UNSENT(st) .kind = ATTEMPT_SMTP, .status = (st), .request_sent = false
#define IDEM            .target_idempotent = true
#define BODY(s)         .body = (s), .body_len = sizeof(s) - 1
#define PTR(p)          .rejection_pointer = (p)
#define RA(v)           .retry_after = (v)

#define ROW(n, c, r, ...)          { n, { __VA_ARGS__ }, c, r, -1, 0 }
#define ROW_RA(n, c, r, ms, ...)   { n, { __VA_ARGS__ }, c, r, ms, 0 }
#define ROW_AT(n, now, c, r, ms, ...) { n, { __VA_ARGS__ }, c, r, ms, now }

static const struct classify_case cases[] = {
	/* ---- transport failure before anything was sent ---- */
	ROW("connect refused", T, "connect_failed", HTTP_UNSENT(0), ERR(CONNECT)),
	ROW("connect refused, idempotent", T, "connect_failed", HTTP_UNSENT(0), ERR(CONNECT), IDEM),
	ROW("dns failure", T, "dns_failed", HTTP_UNSENT(0), ERR(DNS)),
	ROW("tls handshake failure", T, "tls_failed_before_send", HTTP_UNSENT(0), ERR(TLS)),
	ROW("connect timeout", T, "timeout_before_send", HTTP_UNSENT(0), ERR(TIMEOUT)),
	ROW("connect timeout, idempotent", T, "timeout_before_send", HTTP_UNSENT(0), ERR(TIMEOUT), IDEM),
	ROW("reset before send", T, "failed_before_send", HTTP_UNSENT(0), ERR(RESET)),
	ROW("send error before first byte", T, "failed_before_send", HTTP_UNSENT(0), ERR(SEND)),
	ROW("other error before send", T, "failed_before_send", HTTP_UNSENT(0), ERR(OTHER)),
	ROW("nothing at all happened", T, "failed_before_send", HTTP_UNSENT(0)),

	/* ---- transport failure after the request went out, no answer ---- */
	ROW("timeout after send", A, "timeout_after_send_not_idempotent", HTTP(0), ERR(TIMEOUT)),
	ROW("timeout after send, idempotent", T, "timeout_after_send_idempotent",
	    HTTP(0), ERR(TIMEOUT), IDEM),
	ROW("reset after send", A, "connection_lost_after_send_not_idempotent", HTTP(0), ERR(RESET)),
	ROW("reset after send, idempotent", T, "connection_lost_after_send_idempotent",
	    HTTP(0), ERR(RESET), IDEM),
	ROW("send error mid-request", A, "connection_lost_after_send_not_idempotent",
	    HTTP(0), ERR(SEND)),
	ROW("tls error after send", A, "connection_lost_after_send_not_idempotent",
	    HTTP(0), ERR(TLS)),
	ROW("other error after send", A, "connection_lost_after_send_not_idempotent",
	    HTTP(0), ERR(OTHER)),
	/* Inconsistent reports err on the side of "it may have arrived". */
	ROW("dns error yet sent", A, "connection_lost_after_send_not_idempotent", HTTP(0), ERR(DNS)),
	ROW("too large, no status", A, "connection_lost_after_send_not_idempotent",
	    HTTP_UNSENT(0), ERR(TOO_LARGE)),
	ROW("100 Continue then timeout", A, "timeout_after_send_not_idempotent",
	    HTTP_UNSENT(100), ERR(TIMEOUT)),
	ROW("100 Continue then timeout, idempotent", T, "timeout_after_send_idempotent",
	    HTTP_UNSENT(100), ERR(TIMEOUT), IDEM),
	ROW("no error, no status", A, "no_verdict_after_send_not_idempotent", HTTP(0)),
	ROW("status 600", A, "no_verdict_after_send_not_idempotent", HTTP(600)),
	ROW("status 600, idempotent", T, "no_verdict_after_send_idempotent", HTTP(600), IDEM),

	/* ---- 2xx without a rejection pointer ---- */
	ROW("200", S, "http_2xx", HTTP(200), BODY("{\"id\":\"p_1\"}")),
	ROW("201", S, "http_2xx", HTTP(201), BODY("{\"id\":\"p_1\"}")),
	ROW("202", S, "http_2xx", HTTP(202)),
	ROW("204", S, "http_2xx", HTTP(204)),
	ROW("200 with an error-looking body, no pointer", S, "http_2xx",
	    HTTP(200), BODY("{\"error\":\"declined\"}")),
	ROW("200 invalid JSON, no pointer", S, "http_2xx", HTTP(200), BODY("<html>ok</html>")),
	ROW("200 too large, no pointer", S, "http_2xx_truncated",
	    HTTP(200), ERR(TOO_LARGE), BODY("{\"id\":\"p_1\",\"blob\":\"aaaa")),
	ROW("200 reset while reading the body", S, "http_2xx_truncated", HTTP(200), ERR(RESET)),
	ROW("200 timeout while reading the body", S, "http_2xx_truncated", HTTP(200), ERR(TIMEOUT)),

	/* ---- 2xx with a rejection pointer ---- */
	ROW("200 error object", P, "business_rejection",
	    HTTP(200), PTR("/error"), BODY("{\"error\":{\"code\":\"card_declined\"}}")),
	ROW("200 error string", P, "business_rejection",
	    HTTP(200), PTR("/error"), BODY("{\"error\":\"declined\"}")),
	ROW("200 error true", P, "business_rejection", HTTP(200), PTR("/error"), BODY("{\"error\":true}")),
	ROW("200 error 1", P, "business_rejection", HTTP(200), PTR("/error"), BODY("{\"error\":1}")),
	ROW("200 error 0.5", P, "business_rejection", HTTP(200), PTR("/error"), BODY("{\"error\":0.5}")),
	ROW("200 error null", S, "http_2xx", HTTP(200), PTR("/error"), BODY("{\"error\":null}")),
	ROW("200 error false", S, "http_2xx", HTTP(200), PTR("/error"), BODY("{\"error\":false}")),
	ROW("200 error 0", S, "http_2xx", HTTP(200), PTR("/error"), BODY("{\"error\":0}")),
	ROW("200 error 0.0", S, "http_2xx", HTTP(200), PTR("/error"), BODY("{\"error\":-0.0}")),
	ROW("200 error empty string", S, "http_2xx", HTTP(200), PTR("/error"), BODY("{\"error\":\"\"}")),
	ROW("200 errors empty array", S, "http_2xx", HTTP(200), PTR("/errors"), BODY("{\"errors\":[]}")),
	ROW("200 error empty object", S, "http_2xx", HTTP(200), PTR("/error"), BODY("{\"error\":{}}")),
	ROW("200 errors non-empty array", P, "business_rejection",
	    HTTP(200), PTR("/errors"), BODY("{\"errors\":[{\"field\":\"email\"}]}")),
	ROW("200 error absent", S, "http_2xx", HTTP(200), PTR("/error"), BODY("{\"id\":\"p_1\"}")),
	ROW("201 nested pointer", P, "business_rejection",
	    HTTP(201), PTR("/result/status/rejected"),
	    BODY("{\"result\":{\"status\":{\"rejected\":true}}}")),
	ROW("200 array index pointer", P, "business_rejection",
	    HTTP(200), PTR("/errors/0"), BODY("{\"errors\":[\"x\"]}")),
	ROW("200 array index past the end", S, "http_2xx",
	    HTTP(200), PTR("/errors/1"), BODY("{\"errors\":[\"x\"]}")),
	ROW("200 escaped pointer", P, "business_rejection",
	    HTTP(200), PTR("/a~1b~0c"), BODY("{\"a/b~c\":\"yes\"}")),
	ROW("200 top-level array, pointer names nothing", S, "http_2xx",
	    HTTP(200), PTR("/error"), BODY("[1,2]")),
	ROW("200 ok false (negated pointer)", P, "business_rejection",
	    HTTP(200), PTR("!/ok"), BODY("{\"ok\":false,\"error\":\"channel_not_found\"}")),
	ROW("200 ok true (negated pointer)", S, "http_2xx",
	    HTTP(200), PTR("!/ok"), BODY("{\"ok\":true,\"ts\":\"1.2\"}")),
	ROW("200 ok absent (negated pointer)", S, "http_2xx", HTTP(200), PTR("!/ok"), BODY("{}")),
	ROW("200 root pointer, body false", S, "http_2xx", HTTP(200), PTR(""), BODY("false")),
	ROW("200 root pointer, body object", P, "business_rejection", HTTP(200), PTR(""), BODY("{\"a\":1}")),
	/* body_len, not the NUL, bounds the body. */
	{ "200 body_len honoured", { HTTP(200), PTR("/error"), .body = "{\"error\":1}garbage",
	  .body_len = 11 }, P, "business_rejection", -1, 0 },
	ROW("204 with pointer, no body", S, "http_2xx", HTTP(204), PTR("/error")),
	ROW("200 with pointer, whitespace body", S, "http_2xx", HTTP(200), PTR("/error"), BODY(" \r\n")),
	ROW("200 with pointer, invalid JSON", A, "http_2xx_unreadable",
	    HTTP(200), PTR("/error"), BODY("<html>Service temporarily unavailable</html>")),
	ROW("200 with pointer, JSON cut short", A, "http_2xx_unreadable",
	    HTTP(200), PTR("/error"), BODY("{\"error\":")),
	ROW("200 with pointer, duplicate members", A, "http_2xx_unreadable",
	    HTTP(200), PTR("/error"), BODY("{\"error\":null,\"error\":\"declined\"}")),
	ROW("200 with pointer, too large", A, "http_2xx_unreadable",
	    HTTP(200), PTR("/error"), ERR(TOO_LARGE), BODY("{\"id\":\"p_1\"")),
	ROW("200 with pointer, reset in body", A, "http_2xx_unreadable",
	    HTTP(200), PTR("/error"), ERR(RESET), BODY("{\"id\":\"p_1\"}")),
	ROW("200 with pointer, idempotent, too large", A, "http_2xx_unreadable",
	    HTTP(200), PTR("/error"), ERR(TOO_LARGE), IDEM),
	ROW("200 malformed pointer", A, "http_2xx_unreadable",
	    HTTP(200), PTR("error"), BODY("{\"error\":true}")),
	ROW("200 malformed pointer escape", A, "http_2xx_unreadable",
	    HTTP(200), PTR("/e~2"), BODY("{\"error\":true}")),

	/* ---- 3xx: never followed ---- */
	ROW("301", P, "http_redirect", HTTP(301)),
	ROW("302", P, "http_redirect", HTTP(302)),
	ROW("307", P, "http_redirect", HTTP(307), IDEM),
	ROW("308", P, "http_redirect", HTTP(308)),
	ROW("303 after POST", A, "http_303_see_other", HTTP(303)),
	ROW("303 after POST, idempotent", A, "http_303_see_other", HTTP(303), IDEM),

	/* ---- 4xx ---- */
	ROW("400", P, "http_4xx_rejected", HTTP(400), BODY("{\"error\":\"invalid email\"}")),
	ROW("400 idempotent", P, "http_4xx_rejected", HTTP(400), IDEM),
	ROW("400 reset while reading the body", P, "http_4xx_rejected", HTTP(400), ERR(RESET)),
	ROW("401", P, "http_unauthorized", HTTP(401)),
	ROW("401 idempotent", P, "http_unauthorized", HTTP(401), IDEM),
	ROW("407", P, "http_unauthorized", HTTP(407)),
	ROW("403", P, "http_forbidden", HTTP(403)),
	ROW("404", P, "http_4xx_rejected", HTTP(404)),
	ROW("408", A, "http_408_not_idempotent", HTTP(408)),
	ROW("408 idempotent", T, "http_408_idempotent", HTTP(408), IDEM),
	ROW("409", P, "http_409_not_idempotent", HTTP(409)),
	ROW("409 idempotent (key in use)", T, "http_409_idempotent", HTTP(409), IDEM),
	ROW("410", P, "http_4xx_rejected", HTTP(410)),
	ROW("413", P, "http_4xx_rejected", HTTP(413)),
	ROW("422", P, "http_4xx_rejected", HTTP(422)),
	ROW("422 idempotent (key reused, other payload)", P, "http_4xx_rejected", HTTP(422), IDEM),
	ROW("499", P, "http_4xx_rejected", HTTP(499)),

	/* ---- 429 and Retry-After ---- */
	ROW("429 no Retry-After", T, "http_429", HTTP(429)),
	ROW_RA("429 Retry-After 120", T, "http_429", 120000, HTTP(429), RA("120")),
	ROW_RA("429 Retry-After 2", T, "http_429", 2000, HTTP(429), RA("2")),
	ROW_RA("429 Retry-After 0", T, "http_429", 0, HTTP(429), RA("0")),
	ROW_RA("429 Retry-After leading zeros", T, "http_429", 5000, HTTP(429), RA("0005")),
	ROW_RA("429 Retry-After with OWS", T, "http_429", 7000, HTTP(429), RA(" \t7 ")),
	ROW_RA("429 Retry-After 24h", T, "http_429", 86400000, HTTP(429), RA("86400")),
	ROW_RA("429 Retry-After 24h + 1s", T, "http_429", -1, HTTP(429), RA("86401")),
	ROW_RA("429 Retry-After huge", T, "http_429", -1,
	       HTTP(429), RA("99999999999999999999999999999")),
	ROW_RA("429 Retry-After negative", T, "http_429", -1, HTTP(429), RA("-5")),
	ROW_RA("429 Retry-After plus sign", T, "http_429", -1, HTTP(429), RA("+5")),
	ROW_RA("429 Retry-After fraction", T, "http_429", -1, HTTP(429), RA("1.5")),
	ROW_RA("429 Retry-After two numbers", T, "http_429", -1, HTTP(429), RA("5 6")),
	ROW_RA("429 Retry-After empty", T, "http_429", -1, HTTP(429), RA("")),
	ROW_RA("429 Retry-After blank", T, "http_429", -1, HTTP(429), RA("   ")),
	ROW_RA("429 Retry-After garbage", T, "http_429", -1, HTTP(429), RA("soon")),
	ROW_RA("429 Retry-After very long", T, "http_429", -1, HTTP(429),
	       RA("5                                                                    ")),
	ROW_RA("429 Retry-After IMF-fixdate", T, "http_429", 60000,
	       HTTP(429), RA("Sun, 06 Nov 1994 08:50:37 GMT")),
	ROW_RA("429 Retry-After rfc850-date", T, "http_429", 60000,
	       HTTP(429), RA("Sunday, 06-Nov-94 08:50:37 GMT")),
	ROW_RA("429 Retry-After asctime-date", T, "http_429", 60000,
	       HTTP(429), RA("Sun Nov  6 08:50:37 1994")),
	ROW_RA("429 Retry-After date now", T, "http_429", 0,
	       HTTP(429), RA("Sun, 06 Nov 1994 08:49:37 GMT")),
	ROW_RA("429 Retry-After date in the past", T, "http_429", 0,
	       HTTP(429), RA("Sun, 06 Nov 1994 08:49:00 GMT")),
	ROW_RA("429 Retry-After date far in the past", T, "http_429", 0,
	       HTTP(429), RA("Thu, 01 Jan 1970 00:00:00 GMT")),
	ROW_RA("429 Retry-After date exactly 24h", T, "http_429", 86400000,
	       HTTP(429), RA("Mon, 07 Nov 1994 08:49:37 GMT")),
	ROW_RA("429 Retry-After date 24h + 1s", T, "http_429", -1,
	       HTTP(429), RA("Mon, 07 Nov 1994 08:49:38 GMT")),
	ROW_RA("429 Retry-After date next year", T, "http_429", -1,
	       HTTP(429), RA("Mon, 06 Nov 1995 08:49:37 GMT")),
	ROW_RA("429 Retry-After date lower-case", T, "http_429", -1,
	       HTTP(429), RA("sun, 06 Nov 1994 08:50:37 GMT")),
	ROW_RA("429 Retry-After date not GMT", T, "http_429", -1,
	       HTTP(429), RA("Sun, 06 Nov 1994 08:50:37 UTC")),
	ROW_RA("429 Retry-After date bad hour", T, "http_429", -1,
	       HTTP(429), RA("Sun, 06 Nov 1994 24:00:00 GMT")),
	ROW_RA("429 Retry-After date bad day", T, "http_429", -1,
	       HTTP(429), RA("Sun, 31 Nov 1994 08:50:37 GMT")),
	ROW_RA("429 Retry-After date bad month", T, "http_429", -1,
	       HTTP(429), RA("Sun, 06 Foo 1994 08:50:37 GMT")),
	ROW_RA("429 Retry-After date trailing junk", T, "http_429", -1,
	       HTTP(429), RA("Sun, 06 Nov 1994 08:50:37 GMTx")),
	ROW_AT("429 Retry-After on 29 Feb of a leap year", NOW_LEAP, T, "http_429", 60000,
	       HTTP(429), RA("Thu, 29 Feb 1996 00:01:00 GMT")),
	ROW_AT("429 Retry-After 29 Feb of a common year", NOW_LEAP, T, "http_429", -1,
	       HTTP(429), RA("Wed, 29 Feb 1995 00:00:00 GMT")),
	ROW_AT("429 Retry-After 28 Feb of a common year", NOW_LEAP, T, "http_429", 0,
	       HTTP(429), RA("Tue, 28 Feb 1995 00:00:00 GMT")),
	/* RFC 9110: a two-digit year more than 50 years ahead is in the past. */
	ROW_AT("429 rfc850 year 76 is 2076", NOW_2026, T, "http_429", -1,
	       HTTP(429), RA("Wednesday, 01-Jan-76 00:00:00 GMT")),
	ROW_AT("429 rfc850 year 77 is 1977", NOW_2026, T, "http_429", 0,
	       HTTP(429), RA("Saturday, 01-Jan-77 00:00:00 GMT")),
	ROW_AT("429 rfc850 year 26 is 2026", NOW_2026, T, "http_429", 30000,
	       HTTP(429), RA("Thursday, 01-Jan-26 00:00:30 GMT")),

	/* ---- 5xx ---- */
	ROW("500", A, "http_5xx_not_idempotent", HTTP(500)),
	ROW("500 idempotent", T, "http_5xx_idempotent", HTTP(500), IDEM),
	ROW("502", A, "http_5xx_not_idempotent", HTTP(502)),
	ROW("502 idempotent", T, "http_5xx_idempotent", HTTP(502), IDEM),
	ROW("503", T, "http_503", HTTP(503)),
	ROW("503 idempotent", T, "http_503", HTTP(503), IDEM),
	ROW_RA("503 Retry-After", T, "http_503", 30000, HTTP(503), RA("30")),
	ROW("504", A, "http_5xx_not_idempotent", HTTP(504)),
	ROW("504 idempotent", T, "http_5xx_idempotent", HTTP(504), IDEM),
	ROW("599", A, "http_5xx_not_idempotent", HTTP(599)),
	ROW("500 huge error page", A, "http_5xx_not_idempotent", HTTP(500), ERR(TOO_LARGE)),
	ROW("500 with a rejection pointer", A, "http_5xx_not_idempotent",
	    HTTP(500), PTR("/error"), BODY("{\"error\":\"x\"}")),

	/* ---- SMTP ---- */
	ROW("smtp 250", S, "smtp_2xx", SMTP(250)),
	ROW("smtp 250, pointer ignored", S, "smtp_2xx", SMTP(250), PTR("/error"), BODY("{\"error\":1}")),
	ROW("smtp 421", T, "smtp_4xx", SMTP(421)),
	ROW("smtp 421 closing the channel", T, "smtp_4xx", SMTP(421), ERR(RESET)),
	ROW("smtp 450", T, "smtp_4xx", SMTP(450)),
	ROW("smtp 451", T, "smtp_4xx", SMTP(451)),
	ROW("smtp 452", T, "smtp_4xx", SMTP(452)),
	ROW("smtp 550", P, "smtp_5xx", SMTP(550)),
	ROW("smtp 550 to RCPT (send error)", P, "smtp_5xx", SMTP_UNSENT(550), ERR(SEND)),
	ROW("smtp 552", P, "smtp_5xx", SMTP(552)),
	ROW("smtp 554", P, "smtp_5xx", SMTP(554)),
	ROW("smtp connect refused", T, "connect_failed", SMTP_UNSENT(0), ERR(CONNECT)),
	ROW("smtp dns failure", T, "dns_failed", SMTP_UNSENT(0), ERR(DNS)),
	ROW("smtp STARTTLS failure", T, "tls_failed_before_send", SMTP_UNSENT(220), ERR(TLS)),
	ROW("smtp timeout before DATA", T, "timeout_before_send", SMTP_UNSENT(220), ERR(TIMEOUT)),
	/* A 250 to RCPT says nothing about the message. */
	ROW("smtp 250 then reset before DATA", T, "failed_before_send", SMTP_UNSENT(250), ERR(RESET)),
	ROW("smtp reset after DATA", A, "connection_lost_after_send_not_idempotent",
	    SMTP(354), ERR(RESET)),
	ROW("smtp reset after DATA, target flagged idempotent", A,
	    "connection_lost_after_send_not_idempotent", SMTP(354), ERR(RESET), IDEM),
	ROW("smtp 250 then reset after DATA", A, "connection_lost_after_send_not_idempotent",
	    SMTP(250), ERR(RESET)),
	ROW("smtp timeout after DATA", A, "timeout_after_send_not_idempotent",
	    SMTP(354), ERR(TIMEOUT), IDEM),
	ROW("smtp no final reply", A, "no_verdict_after_send_not_idempotent", SMTP(354)),
	ROW("smtp 0 no error sent", A, "no_verdict_after_send_not_idempotent", SMTP(0), IDEM),

	/* ---- nonsense from the caller ---- */
	ROW("unknown kind", A, "invalid_input", .kind = (enum attempt_kind)7, .status = 200),
	ROW("unknown transport error", A, "invalid_input",
	    HTTP(0), .transport_error = (enum attempt_error)99),
};

#define NCASES (sizeof(cases) / sizeof(cases[0]))

START_TEST(test_table)
{
	const struct classify_case *c = &cases[_i];
	struct outcome o = classify_attempt(&c->a, c->now != 0 ? c->now : NOW);

	ck_assert_msg(o.cls == c->cls && strcmp(classify_reason_name(o.reason), c->reason) == 0,
	              "%s: got %s/%s, want %s/%s", c->name, classify_class_name(o.cls),
	              classify_reason_name(o.reason), classify_class_name(c->cls), c->reason);
	ck_assert_msg(o.retry_after_ms == c->retry_after_ms, "%s: retry_after_ms %ld, want %ld",
	              c->name, o.retry_after_ms, c->retry_after_ms);
	/* One route per reason. */
	ck_assert_int_eq(o.cls, classify_reason_class(o.reason));
}
END_TEST

/* Every rule has at least one fixture. */
START_TEST(test_every_reason_covered)
{
	bool seen[REASON__COUNT] = { false };
	size_t i;
	int r;

	for (i = 0; i < NCASES; i++) {
		struct outcome o = classify_attempt(&cases[i].a, cases[i].now != 0 ? cases[i].now : NOW);

		seen[o.reason] = true;
	}
	for (r = 0; r < REASON__COUNT; r++)
		ck_assert_msg(seen[r], "no fixture produces %s",
		              classify_reason_name((enum outcome_reason)r));
}
END_TEST

START_TEST(test_names)
{
	int r, q;

	for (r = 0; r < REASON__COUNT; r++) {
		const char *n = classify_reason_name((enum outcome_reason)r);
		size_t k;

		ck_assert_msg(strcmp(n, "invalid") != 0, "reason %d has no name", r);
		for (k = 0; n[k] != '\0'; k++)
			ck_assert_msg((n[k] >= 'a' && n[k] <= 'z') || (n[k] >= '0' && n[k] <= '9') ||
			              n[k] == '_', "%s is not snake_case", n);
		for (q = 0; q < r; q++)
			ck_assert_str_ne(n, classify_reason_name((enum outcome_reason)q));
	}
	ck_assert_str_eq(classify_reason_name(REASON__COUNT), "invalid");
	ck_assert_str_eq(classify_reason_name((enum outcome_reason)-1), "invalid");
	ck_assert_int_eq(classify_reason_class(REASON__COUNT), OUTCOME_AMBIGUOUS);

	ck_assert_str_eq(classify_class_name(OUTCOME_SUCCESS), "success");
	ck_assert_str_eq(classify_class_name(OUTCOME_TRANSIENT), "transient");
	ck_assert_str_eq(classify_class_name(OUTCOME_PERMANENT), "permanent");
	ck_assert_str_eq(classify_class_name(OUTCOME_AMBIGUOUS), "ambiguous");
	ck_assert_str_eq(classify_class_name((enum outcome_class)9), "invalid");
}
END_TEST

START_TEST(test_null)
{
	struct outcome o = classify_attempt(NULL, NOW);

	ck_assert_int_eq(o.cls, OUTCOME_AMBIGUOUS);
	ck_assert_str_eq(classify_reason_name(o.reason), "invalid_input");
	ck_assert_int_eq(o.retry_after_ms, -1);
}
END_TEST

START_TEST(test_pointer_valid)
{
	char longp[CLASSIFY_POINTER_MAX + 2];

	ck_assert(classify_pointer_valid(""));
	ck_assert(classify_pointer_valid("/"));
	ck_assert(classify_pointer_valid("/error"));
	ck_assert(classify_pointer_valid("/errors/0/code"));
	ck_assert(classify_pointer_valid("/a~0b~1c"));
	ck_assert(classify_pointer_valid("!/ok"));
	ck_assert(!classify_pointer_valid(NULL));
	ck_assert(!classify_pointer_valid("error"));
	ck_assert(!classify_pointer_valid("!error"));
	ck_assert(!classify_pointer_valid("/a~2"));
	ck_assert(!classify_pointer_valid("/a~"));
	ck_assert(!classify_pointer_valid("!!/ok"));

	memset(longp, 'a', sizeof(longp));
	longp[0] = '/';
	longp[CLASSIFY_POINTER_MAX] = '\0';
	ck_assert(classify_pointer_valid(longp));
	longp[CLASSIFY_POINTER_MAX] = 'a';
	longp[CLASSIFY_POINTER_MAX + 1] = '\0';
	ck_assert(!classify_pointer_valid(longp));
}
END_TEST

/* The classifier only reads its input: the same result twice, and a body
 * without a terminating NUL is read within body_len only. */
START_TEST(test_pure)
{
	char body[11];
	struct attempt_result a = {
		.kind = ATTEMPT_HTTP, .status = 200, .request_sent = true,
		.rejection_pointer = "/error", .body = body, .body_len = sizeof(body),
		.retry_after = "3",
	};
	struct outcome o1, o2;

	memcpy(body, "{\"error\":1}", sizeof(body));   /* no NUL */
	o1 = classify_attempt(&a, NOW);
	o2 = classify_attempt(&a, NOW);
	ck_assert_int_eq(o1.cls, OUTCOME_PERMANENT);
	ck_assert_int_eq(o1.cls, o2.cls);
	ck_assert_int_eq(o1.reason, o2.reason);
	ck_assert_int_eq(o1.retry_after_ms, 3000);
	ck_assert_int_eq(o2.retry_after_ms, 3000);
}
END_TEST

TL_SUITE(classify_suite, "classify",
         {"classify_attempt", 0, .loops = TL_LOOPS({test_table, (int)NCASES}),
          .tests = TL_LIST(test_every_reason_covered, test_names, test_null, test_pointer_valid,
                           test_pure)})

TL_SUITE_MAIN(classify_suite, false)

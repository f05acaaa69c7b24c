/*
 * classify.h — what one delivery attempt's outcome means.
 *
 * One pure function: everything the provider observed goes in, exactly one
 * class and one reason come out. No I/O, no clock (the caller passes
 * `now`), no global state; the same input always gives the same answer, so
 * the whole policy is tested by a fixture table (tests/unit/check_classify.c).
 *
 * The classes and what the dispatcher does with them:
 *   success    → the effect is `completed`;
 *   transient  → nothing was committed, or a retry with the same idempotency
 *                key is safe → back to `pending`, backoff (backoff.h);
 *   permanent  → retrying cannot help (validation, auth, business
 *                rejection) → `failed` + dead letter;
 *   ambiguous  → the provider may have acted and a resend could duplicate
 *                it → `unknown`, reconciliation, NEVER resent automatically.
 *
 * Every reason belongs to exactly one class (classify_reason_class), so the
 * reason alone names the rule that fired and the route taken.
 */
#ifndef OG_CLASSIFY_H
#define OG_CLASSIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

/* Longest rejection pointer accepted (characters, after any "!"). */
#define CLASSIFY_POINTER_MAX      256
/* A Retry-After beyond this is not sane and is ignored. */
#define CLASSIFY_RETRY_AFTER_MAX_S 86400

enum outcome_class {
	OUTCOME_SUCCESS = 0,
	OUTCOME_TRANSIENT,
	OUTCOME_PERMANENT,
	OUTCOME_AMBIGUOUS,
};

enum outcome_reason {
	/* HTTP answers */
	REASON_HTTP_2XX = 0,
	REASON_HTTP_2XX_TRUNCATED,           /* 2xx, body cut short, no rejection pointer */
	REASON_HTTP_2XX_UNREADABLE,          /* 2xx, rejection pointer set, body not readable JSON */
	REASON_BUSINESS_REJECTION,           /* 2xx whose body carries the rejection */
	REASON_HTTP_303_SEE_OTHER,
	REASON_HTTP_REDIRECT,                /* other 3xx: redirects are never followed */
	REASON_HTTP_UNAUTHORIZED,            /* 401, 407 */
	REASON_HTTP_FORBIDDEN,               /* 403 */
	REASON_HTTP_408_IDEMPOTENT,
	REASON_HTTP_408_NOT_IDEMPOTENT,
	REASON_HTTP_409_IDEMPOTENT,
	REASON_HTTP_409_NOT_IDEMPOTENT,
	REASON_HTTP_429,
	REASON_HTTP_4XX_REJECTED,            /* 400, 404, 410, 413, 422, … */
	REASON_HTTP_503,
	REASON_HTTP_5XX_IDEMPOTENT,
	REASON_HTTP_5XX_NOT_IDEMPOTENT,
	/* SMTP replies */
	REASON_SMTP_2XX,
	REASON_SMTP_4XX,
	REASON_SMTP_5XX,
	/* transport, nothing sent */
	REASON_CONNECT_FAILED,
	REASON_DNS_FAILED,
	REASON_TLS_FAILED_BEFORE_SEND,
	REASON_TIMEOUT_BEFORE_SEND,
	REASON_FAILED_BEFORE_SEND,           /* any other failure before a byte was sent */
	/* transport, after (part of) the request was sent, no verdict */
	REASON_TIMEOUT_AFTER_SEND_IDEMPOTENT,
	REASON_TIMEOUT_AFTER_SEND_NOT_IDEMPOTENT,
	REASON_CONNECTION_LOST_AFTER_SEND_IDEMPOTENT,     /* reset, recv/send error, … */
	REASON_CONNECTION_LOST_AFTER_SEND_NOT_IDEMPOTENT,
	REASON_NO_VERDICT_AFTER_SEND_IDEMPOTENT,          /* no error, yet no final answer */
	REASON_NO_VERDICT_AFTER_SEND_NOT_IDEMPOTENT,
	/* the caller passed nonsense (NULL, unknown kind) */
	REASON_INVALID_INPUT,
	REASON__COUNT
};

enum attempt_kind {
	ATTEMPT_HTTP = 0,
	ATTEMPT_SMTP,
};

/* What libcurl reported, reduced to what matters for the decision. The
 * provider maps CURLcode onto these; the mapping lives with the providers
 * (provider.c). */
enum attempt_error {
	ATTEMPT_ERR_NONE = 0,
	ATTEMPT_ERR_CONNECT,    /* CURLE_COULDNT_CONNECT (refused, unreachable) */
	ATTEMPT_ERR_DNS,        /* CURLE_COULDNT_RESOLVE_HOST / _PROXY */
	ATTEMPT_ERR_TLS,        /* CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, … */
	ATTEMPT_ERR_TIMEOUT,    /* CURLE_OPERATION_TIMEDOUT */
	ATTEMPT_ERR_RESET,      /* CURLE_RECV_ERROR, CURLE_GOT_NOTHING, CURLE_PARTIAL_FILE, HTTP/2 stream reset */
	ATTEMPT_ERR_SEND,       /* CURLE_SEND_ERROR */
	ATTEMPT_ERR_TOO_LARGE,  /* the response cap was hit (CURLE_FILESIZE_EXCEEDED, write callback) */
	ATTEMPT_ERR_OTHER,      /* anything else */
};

/* Everything the provider observed, nothing else. Borrowed pointers. */
struct attempt_result {
	enum attempt_kind kind;
	enum attempt_error transport_error;
	/* HTTP: did any byte of the request reach the socket (CURLINFO_REQUEST_SIZE
	 * > 0)? SMTP: did any byte of the message content after DATA go out
	 * (CURLINFO_SIZE_UPLOAD_T > 0)? Before that an SMTP server cannot have
	 * queued anything. When in doubt the provider says true. */
	bool request_sent;
	/* HTTP status or SMTP reply code as libcurl last saw it; 0 = none. For
	 * SMTP it must be the reply that ended the exchange (or the failure). */
	int status;
	const char *retry_after;      /* raw Retry-After header value, or NULL */
	const char *body;             /* response body (excerpt), may be NULL */
	size_t body_len;
	/* Target config, HTTP only: a JSON Pointer (RFC 6901) into a 2xx JSON
	 * body. "/error": the answer is a business rejection when the value is
	 * present and truthy. "!/ok": when the value is present and falsy.
	 * Falsy: null, false, 0, "", [] and {}. NULL = no check. */
	const char *rejection_pointer;
	bool target_idempotent;       /* target honours Idempotency-Key (HTTP only) */
};

struct outcome {
	enum outcome_class cls;
	enum outcome_reason reason;
	/* Retry-After in milliseconds: delta-seconds or an HTTP-date (all three
	 * RFC 9110 forms) relative to `now`; a past date is 0. -1 when absent,
	 * malformed, or beyond CLASSIFY_RETRY_AFTER_MAX_S. */
	long retry_after_ms;
};

/* The one classifier. `now` is the current time, used only to turn an
 * HTTP-date Retry-After into a delay. A NULL `a` gives ambiguous /
 * REASON_INVALID_INPUT: nonsense must never lead to a resend. */
struct outcome classify_attempt(const struct attempt_result *a, time_t now)
	__attribute__((warn_unused_result));

/* "success", "transient", "permanent", "ambiguous"; "invalid" otherwise. */
const char *classify_class_name(enum outcome_class c);
/* Stable snake_case name for logs and dead letters; "invalid" for an
 * out-of-range value. Never changes once released. */
const char *classify_reason_name(enum outcome_reason r);
/* The class every outcome with this reason has (ambiguous for an
 * out-of-range value). */
enum outcome_class classify_reason_class(enum outcome_reason r);
/* Is this usable as a target's rejection pointer? For config validation:
 * a malformed pointer at run time makes every 2xx ambiguous. */
bool classify_pointer_valid(const char *pointer);

#endif

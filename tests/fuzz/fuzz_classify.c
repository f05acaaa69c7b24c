/*
 * fuzz_classify.c — the outcome classifier and the retry schedule
 * (src/lib/classify.c, backoff.c): everything a provider can observe, as
 * fuzzed input.
 *
 * Input: five bytes (kind, transport error, flags, status high, status
 * low), then NUL-separated fields: Retry-After, the rejection pointer, the
 * response body.
 *
 * Properties: exactly one class, the one its reason belongs to; nothing
 * is a success without a 2xx; nothing sent
 * to a target without idempotency keys that ended in a timeout or a lost
 * connection before any status came back is ever transient (that would be a resend that may
 * duplicate); a Retry-After is never negative or beyond the cap; the
 * schedule never returns a negative delay, retries only transient
 * outcomes, and never schedules past the elapsed budget.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backoff.h"
#include "classify.h"
#include "fuzzlib.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzzlib_in in = { data, size };
	uint8_t kind = fuzzlib_byte(&in), err = fuzzlib_byte(&in), flags = fuzzlib_byte(&in);
	uint8_t hi = fuzzlib_byte(&in), lo = fuzzlib_byte(&in);
	char *retry_after = fuzzlib_field(&in), *pointer = fuzzlib_field(&in);
	char *body = fuzzlib_field(&in);
	struct attempt_result a;
	struct outcome o;
	struct retry_policy p;
	long delay = 0;
	enum retry_decision d;
	int attempt;

	memset(&a, 0, sizeof(a));
	a.kind = (kind & 1) ? ATTEMPT_SMTP : ATTEMPT_HTTP;
	a.transport_error = (enum attempt_error)(err % (ATTEMPT_ERR_OTHER + 1));
	a.request_sent = (flags & 1) != 0;
	a.target_idempotent = (flags & 2) != 0;
	a.status = (flags & 4) ? (int)((hi << 8) | lo) % 1000 : 0;
	a.retry_after = (flags & 8) ? retry_after : NULL;
	a.rejection_pointer = (flags & 16) ? pointer : NULL;
	a.body = (flags & 32) ? body : NULL;
	a.body_len = a.body != NULL ? strlen(body) : 0;

	o = classify_attempt(&a, (time_t)1796000000);
	FUZZ_ASSERT(o.cls == classify_reason_class(o.reason));
	FUZZ_ASSERT(o.reason < REASON__COUNT);
	FUZZ_ASSERT(strcmp(classify_reason_name(o.reason), "invalid") != 0);
	/* A 2xx is the provider's word even when the rest of the answer was
	 * cut short (http_2xx_truncated); without one, nothing succeeded. */
	if (o.cls == OUTCOME_SUCCESS)
		FUZZ_ASSERT(a.status >= 200 && a.status < 300);
	if (a.kind == ATTEMPT_HTTP && a.request_sent && !a.target_idempotent &&
	    a.status == 0 &&
	    (a.transport_error == ATTEMPT_ERR_TIMEOUT || a.transport_error == ATTEMPT_ERR_RESET))
		FUZZ_ASSERT(o.cls != OUTCOME_TRANSIENT && o.cls != OUTCOME_SUCCESS);
	FUZZ_ASSERT(o.retry_after_ms >= -1 &&
	            o.retry_after_ms <= (long)CLASSIFY_RETRY_AFTER_MAX_S * 1000);
	FUZZ_ASSERT(classify_attempt(NULL, 0).cls == OUTCOME_AMBIGUOUS);

	/* The schedule, with a policy and an attempt from the same bytes. */
	p.max_attempts = 1 + (lo % 10);
	p.base_ms = 1 + (long)hi * 37;
	p.cap_ms = p.base_ms + (long)lo * 1000;
	p.max_elapsed_ms = (long)(flags + 1) * 997;
	p.jitter = (kind % 101) / 100.0;
	attempt = 1 + (err % 12);
	d = backoff_next(&p, &o, attempt, (long)(hi % 50) * 100, (kind % 7) / 7.0, &delay);
	if (o.cls != OUTCOME_TRANSIENT)
		FUZZ_ASSERT(d == RETRY_NEVER);
	if (d == RETRY_AT) {
		FUZZ_ASSERT(delay >= 0);
		FUZZ_ASSERT(attempt < p.max_attempts);
		FUZZ_ASSERT((long)(hi % 50) * 100 + delay <= p.max_elapsed_ms);
		FUZZ_ASSERT(delay <= p.cap_ms + (long)(p.jitter * (double)p.cap_ms) + 1 ||
		            (o.retry_after_ms >= 0 && delay <= p.cap_ms));
	} else {
		FUZZ_ASSERT(delay == -1);
	}

	free(retry_after);
	free(pointer);
	free(body);
	return 0;
}

/*
 * backoff.h — the retry schedule: one pure function.
 *
 * The dispatcher is the one layer that owns the retry budget (seed 004:
 * retries stacked in several layers multiply). After a failed attempt it
 * asks backoff_next() whether and when to try again; the randomness is an
 * argument, so the schedule is deterministic under test.
 */
#ifndef OG_BACKOFF_H
#define OG_BACKOFF_H

#include "classify.h"

/* Per target, from config. Every field is a bound, none means "unlimited";
 * the config layer enforces ranges, here a negative value counts as 0,
 * max_attempts below 1 as 1 and jitter is clamped to [0, 1]. */
struct retry_policy {
	int max_attempts;      /* including the first */
	long base_ms;
	long cap_ms;
	long max_elapsed_ms;   /* no attempt starts later than this after the first */
	double jitter;         /* fraction 0..1 of the delay added at random */
};

enum retry_decision {
	RETRY_AT = 0,               /* try again after *delay_ms */
	RETRY_EXHAUSTED_ATTEMPTS,   /* that was attempt max_attempts */
	RETRY_EXHAUSTED_TIME,       /* the next attempt would start after max_elapsed_ms */
	RETRY_NEVER,                /* not transient: success, permanent or ambiguous */
};

/*
 * attempt: the number of the attempt that just failed (1-based).
 * elapsed_ms: since the first attempt started.
 * rnd: uniform in [0, 1), from the caller (clamped into that range).
 *
 *   d     = min(cap, base × 2^(attempt−1))
 *   delay = d + floor(jitter × rnd × d)             (so d ≤ delay < d × (1 + jitter))
 *   delay = max(delay, min(o->retry_after_ms, cap)) when retry_after_ms ≥ 0
 *   elapsed + delay > max_elapsed_ms → RETRY_EXHAUSTED_TIME
 *
 * Checked in this order: class, attempts, time. Integer arithmetic with
 * saturation throughout: no overflow for any attempt or base.
 * *delay_ms (may be NULL) is set on RETRY_AT, and to -1 otherwise.
 */
enum retry_decision backoff_next(const struct retry_policy *p, const struct outcome *o,
                                 int attempt, long elapsed_ms, double rnd, long *delay_ms)
	__attribute__((warn_unused_result));

/* "retry_at", "exhausted_attempts", "exhausted_time", "never"; "invalid". */
const char *backoff_decision_name(enum retry_decision d);

#endif

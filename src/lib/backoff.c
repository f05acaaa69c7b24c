/*
 * backoff.c — the retry schedule. See backoff.h.
 */
#include "backoff.h"

#include <float.h>
#include <limits.h>

#define LONG_BITS ((int)sizeof(long) * CHAR_BIT)

/* The largest double below 1: rnd never reaches 1. */
#define RND_MAX (1.0 - DBL_EPSILON / 2)

static long
nonneg(long v)
{
	return v < 0 ? 0 : v;
}

/* min(cap, base × 2^n) without overflow: base × 2^n > cap exactly when
 * base > cap >> n (for n below the width of long). */
static long
doubled(long base, long cap, int n)
{
	if (n >= LONG_BITS - 1 || base > (cap >> n))
		return cap;
	return base << n;
}

/* d + floor(frac × d), saturating at LONG_MAX. frac is in [0, 1). */
static long
add_jitter(long d, double frac)
{
	double extra = (double)d * frac;
	/* Rounded to a double; any double below it is below the true room. */
	double room = (double)(LONG_MAX - d);

	if (extra >= room)
		return LONG_MAX;
	return d + (long)extra;
}

enum retry_decision
backoff_next(const struct retry_policy *p, const struct outcome *o, int attempt,
             long elapsed_ms, double rnd, long *delay_ms)
{
	long base, cap, budget, elapsed, delay;
	double jitter;
	int max_attempts;

	if (delay_ms != NULL)
		*delay_ms = -1;
	if (p == NULL || o == NULL || o->cls != OUTCOME_TRANSIENT)
		return RETRY_NEVER;

	max_attempts = p->max_attempts < 1 ? 1 : p->max_attempts;
	if (attempt < 1)
		attempt = 1;
	if (attempt >= max_attempts)
		return RETRY_EXHAUSTED_ATTEMPTS;

	base = nonneg(p->base_ms);
	cap = nonneg(p->cap_ms);
	budget = nonneg(p->max_elapsed_ms);
	elapsed = nonneg(elapsed_ms);
	if (elapsed > budget)
		return RETRY_EXHAUSTED_TIME;

	/* NaN and out-of-range inputs fall to the nearest bound. */
	jitter = p->jitter > 0 ? (p->jitter < 1 ? p->jitter : 1) : 0;
	rnd = rnd > 0 ? (rnd < RND_MAX ? rnd : RND_MAX) : 0;

	delay = add_jitter(doubled(base, cap, attempt - 1), jitter * rnd);
	/* A sane Retry-After (classify already dropped insane ones) is
	 * honoured up to the cap: the server's wish does not stretch policy. */
	if (o->retry_after_ms >= 0) {
		long ra = o->retry_after_ms < cap ? o->retry_after_ms : cap;

		if (ra > delay)
			delay = ra;
	}
	if (delay > budget - elapsed)
		return RETRY_EXHAUSTED_TIME;
	if (delay_ms != NULL)
		*delay_ms = delay;
	return RETRY_AT;
}

const char *
backoff_decision_name(enum retry_decision d)
{
	switch (d) {
	case RETRY_AT:
		return "retry_at";
	case RETRY_EXHAUSTED_ATTEMPTS:
		return "exhausted_attempts";
	case RETRY_EXHAUSTED_TIME:
		return "exhausted_time";
	case RETRY_NEVER:
		return "never";
	}
	return "invalid";
}

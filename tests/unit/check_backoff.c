/*
 * check_backoff.c — the retry schedule.
 *
 * A table of single decisions (policy, outcome, attempt, elapsed, rnd →
 * decision, delay), then whole schedules walked attempt by attempt, then
 * sweeps that check the bounds of the formula for every attempt number,
 * including the ones where 2^(attempt−1) no longer fits a long.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backoff.h"
#include "suitelib.h"

#include <limits.h>

/* The largest double below 1. */
#define RND_TOP (1.0 - DBL_EPSILON / 2)

struct backoff_case {
	const char *name;
	struct retry_policy p;
	enum outcome_class cls;
	long retry_after_ms;
	int attempt;
	long elapsed_ms;
	double rnd;
	enum retry_decision want;
	long want_delay;          /* -1 unless RETRY_AT */
};

/* max_attempts 10, base 100 ms, cap 10 s, budget 60 s */
#define POL(j)            { 10, 100, 10000, 60000, (j) }
#define T OUTCOME_TRANSIENT

static const struct backoff_case cases[] = {
	/* the formula, no jitter: base × 2^(attempt−1) up to the cap */
	{ "attempt 1", POL(0), T, -1, 1, 0, 0.5, RETRY_AT, 100 },
	{ "attempt 2", POL(0), T, -1, 2, 0, 0.5, RETRY_AT, 200 },
	{ "attempt 3", POL(0), T, -1, 3, 0, 0.5, RETRY_AT, 400 },
	{ "attempt 4", POL(0), T, -1, 4, 0, 0.5, RETRY_AT, 800 },
	{ "attempt 5", POL(0), T, -1, 5, 0, 0.5, RETRY_AT, 1600 },
	{ "attempt 6", POL(0), T, -1, 6, 0, 0.5, RETRY_AT, 3200 },
	{ "attempt 7", POL(0), T, -1, 7, 0, 0.5, RETRY_AT, 6400 },
	{ "attempt 8 capped", POL(0), T, -1, 8, 0, 0.5, RETRY_AT, 10000 },
	{ "attempt 9 capped", POL(0), T, -1, 9, 0, 0.5, RETRY_AT, 10000 },
	{ "exactly the cap", { 10, 100, 6400, 60000, 0 }, T, -1, 7, 0, 0, RETRY_AT, 6400 },
	{ "base above cap", { 10, 5000, 1000, 60000, 0 }, T, -1, 1, 0, 0, RETRY_AT, 1000 },
	{ "base 0", { 10, 0, 1000, 60000, 1 }, T, -1, 9, 0, 0.9, RETRY_AT, 0 },
	{ "cap 0", { 10, 100, 0, 60000, 1 }, T, -1, 3, 0, 0.9, RETRY_AT, 0 },

	/* jitter: d + floor(jitter × rnd × d), rnd in [0, 1) */
	{ "jitter rnd 0", POL(1), T, -1, 4, 0, 0, RETRY_AT, 800 },
	{ "jitter 1 rnd 0.999", { 10, 1000, 10000, 60000, 1 }, T, -1, 1, 0, 0.999, RETRY_AT, 1999 },
	{ "jitter 0.5 rnd 0.999", { 10, 1000, 10000, 60000, 0.5 }, T, -1, 1, 0, 0.999, RETRY_AT, 1499 },
	{ "jitter 0.5 rnd 0.5", { 10, 1000, 10000, 60000, 0.5 }, T, -1, 1, 0, 0.5, RETRY_AT, 1250 },
	{ "jitter 0.1 rnd 0.999", { 10, 1000, 10000, 60000, 0.1 }, T, -1, 1, 0, 0.999, RETRY_AT, 1099 },
	{ "jitter on the capped delay", { 10, 1000, 10000, 60000, 0.25 }, T, -1, 9, 0, 0.999,
	  RETRY_AT, 12497 },
	{ "jitter 1 rnd just below 1", { 10, 1000, 10000, 60000, 1 }, T, -1, 1, 0, RND_TOP,
	  RETRY_AT, 1999 },
	{ "rnd 1 is clamped below 1", { 10, 1000, 10000, 60000, 1 }, T, -1, 1, 0, 1.0, RETRY_AT, 1999 },
	{ "rnd 7 is clamped below 1", { 10, 1000, 10000, 60000, 1 }, T, -1, 1, 0, 7.0, RETRY_AT, 1999 },
	{ "rnd negative counts as 0", { 10, 1000, 10000, 60000, 1 }, T, -1, 1, 0, -0.5, RETRY_AT, 1000 },
	{ "rnd NaN counts as 0", { 10, 1000, 10000, 60000, 1 }, T, -1, 1, 0, NAN, RETRY_AT, 1000 },
	{ "jitter NaN counts as 0", { 10, 1000, 10000, 60000, NAN }, T, -1, 1, 0, 0.9, RETRY_AT, 1000 },
	{ "jitter 3 counts as 1", { 10, 1000, 10000, 60000, 3 }, T, -1, 1, 0, 0.5, RETRY_AT, 1500 },
	{ "jitter negative counts as 0", { 10, 1000, 10000, 60000, -1 }, T, -1, 1, 0, 0.5,
	  RETRY_AT, 1000 },
	{ "jitter on a 1 ms delay rounds down", { 10, 1, 10, 60000, 1 }, T, -1, 1, 0, 0.999, RETRY_AT, 1 },

	/* Retry-After: max(delay, min(retry_after, cap)) */
	{ "Retry-After below backoff", POL(0), T, 50, 3, 0, 0, RETRY_AT, 400 },
	{ "Retry-After above backoff", POL(0), T, 5000, 1, 0, 0, RETRY_AT, 5000 },
	{ "Retry-After 2 s (issue 4)", POL(0), T, 2000, 1, 0, 0, RETRY_AT, 2000 },
	{ "Retry-After 0", POL(0), T, 0, 2, 0, 0, RETRY_AT, 200 },
	{ "Retry-After at the cap", POL(0), T, 10000, 1, 0, 0, RETRY_AT, 10000 },
	{ "Retry-After above the cap", POL(0), T, 60000, 1, 0, 0, RETRY_AT, 10000 },
	{ "Retry-After below jittered backoff", { 10, 1000, 10000, 60000, 1 }, T, 1500, 1, 0, 0.999,
	  RETRY_AT, 1999 },
	{ "Retry-After above jittered backoff", { 10, 1000, 10000, 60000, 1 }, T, 3000, 1, 0, 0.999,
	  RETRY_AT, 3000 },
	{ "Retry-After past the budget", POL(0), T, 8000, 2, 55000, 0, RETRY_EXHAUSTED_TIME, -1 },
	{ "Retry-After just inside the budget", POL(0), T, 5000, 2, 55000, 0, RETRY_AT, 5000 },

	/* the elapsed budget */
	{ "next attempt exactly at the budget", POL(0), T, -1, 3, 59600, 0, RETRY_AT, 400 },
	{ "next attempt 1 ms past the budget", POL(0), T, -1, 3, 59601, 0, RETRY_EXHAUSTED_TIME, -1 },
	{ "jitter pushes past the budget", POL(1), T, -1, 3, 59600, 0.5, RETRY_EXHAUSTED_TIME, -1 },
	{ "already past the budget", POL(0), T, -1, 2, 60001, 0, RETRY_EXHAUSTED_TIME, -1 },
	{ "budget 0", { 10, 100, 10000, 0, 0 }, T, -1, 1, 0, 0, RETRY_EXHAUSTED_TIME, -1 },
	{ "budget 0, zero delay", { 10, 0, 10000, 0, 0 }, T, -1, 1, 0, 0, RETRY_AT, 0 },
	{ "negative elapsed counts as 0", POL(0), T, -1, 1, -5000, 0, RETRY_AT, 100 },
	{ "negative budget counts as 0", { 10, 100, 10000, -1, 0 }, T, -1, 1, 0, 0,
	  RETRY_EXHAUSTED_TIME, -1 },

	/* max_attempts counts the first attempt */
	{ "attempt 9 of 10", POL(0), T, -1, 9, 0, 0, RETRY_AT, 10000 },
	{ "attempt 10 of 10", POL(0), T, -1, 10, 0, 0, RETRY_EXHAUSTED_ATTEMPTS, -1 },
	{ "attempt 11 of 10", POL(0), T, -1, 11, 0, 0, RETRY_EXHAUSTED_ATTEMPTS, -1 },
	{ "attempts before time", POL(0), T, -1, 10, 99999, 0, RETRY_EXHAUSTED_ATTEMPTS, -1 },
	{ "max_attempts 1", { 1, 100, 10000, 60000, 0 }, T, -1, 1, 0, 0, RETRY_EXHAUSTED_ATTEMPTS, -1 },
	{ "max_attempts 0 counts as 1", { 0, 100, 10000, 60000, 0 }, T, -1, 1, 0, 0,
	  RETRY_EXHAUSTED_ATTEMPTS, -1 },
	{ "max_attempts negative counts as 1", { -3, 100, 10000, 60000, 0 }, T, -1, 1, 0, 0,
	  RETRY_EXHAUSTED_ATTEMPTS, -1 },
	{ "attempt 0 counts as 1", POL(0), T, -1, 0, 0, 0, RETRY_AT, 100 },
	{ "attempt negative counts as 1", POL(0), T, -1, INT_MIN, 0, 0, RETRY_AT, 100 },

	/* only transient outcomes are retried */
	{ "permanent", POL(0), OUTCOME_PERMANENT, -1, 1, 0, 0, RETRY_NEVER, -1 },
	{ "permanent with Retry-After", POL(0), OUTCOME_PERMANENT, 1000, 1, 0, 0, RETRY_NEVER, -1 },
	{ "ambiguous", POL(0), OUTCOME_AMBIGUOUS, -1, 1, 0, 0, RETRY_NEVER, -1 },
	{ "success", POL(0), OUTCOME_SUCCESS, -1, 1, 0, 0, RETRY_NEVER, -1 },
	{ "never beats exhausted", POL(0), OUTCOME_AMBIGUOUS, -1, 99, 99999, 0, RETRY_NEVER, -1 },

	/* overflow: 2^(attempt−1) beyond a long, huge bases and caps */
	{ "attempt 63, base 1", { INT_MAX, 1, LONG_MAX, LONG_MAX, 0 }, T, -1, 63, 0, 0,
	  RETRY_AT, 1L << 62 },
	{ "attempt 64, base 1", { INT_MAX, 1, LONG_MAX, LONG_MAX, 0 }, T, -1, 64, 0, 0,
	  RETRY_AT, LONG_MAX },
	{ "attempt 65, base 1", { INT_MAX, 1, LONG_MAX, LONG_MAX, 0 }, T, -1, 65, 0, 0,
	  RETRY_AT, LONG_MAX },
	{ "attempt 64, base 100, cap 1 h", { INT_MAX, 100, 3600000, LONG_MAX, 0 }, T, -1, 64, 0, 0,
	  RETRY_AT, 3600000 },
	{ "attempt INT_MAX-1", { INT_MAX, 100, 3600000, LONG_MAX, 0 }, T, -1, INT_MAX - 1, 0, 0,
	  RETRY_AT, 3600000 },
	{ "attempt INT_MAX", { INT_MAX, 100, 3600000, LONG_MAX, 0 }, T, -1, INT_MAX, 0, 0,
	  RETRY_EXHAUSTED_ATTEMPTS, -1 },
	{ "base LONG_MAX", { 10, LONG_MAX, LONG_MAX, LONG_MAX, 0 }, T, -1, 1, 0, 0, RETRY_AT, LONG_MAX },
	{ "base LONG_MAX, attempt 2", { 10, LONG_MAX, LONG_MAX, LONG_MAX, 0 }, T, -1, 2, 0, 0,
	  RETRY_AT, LONG_MAX },
	{ "base just over half, attempt 2", { 10, LONG_MAX / 2 + 1, LONG_MAX, LONG_MAX, 0 }, T, -1, 2,
	  0, 0, RETRY_AT, LONG_MAX },
	{ "base half, attempt 2", { 10, LONG_MAX / 2, LONG_MAX, LONG_MAX, 0 }, T, -1, 2, 0, 0,
	  RETRY_AT, LONG_MAX - 1 },
	{ "jitter saturates", { 10, LONG_MAX / 2, LONG_MAX, LONG_MAX, 1 }, T, -1, 2, 0, 0.999,
	  RETRY_AT, LONG_MAX },
	{ "jitter saturates at the cap", { INT_MAX, 1, LONG_MAX, LONG_MAX, 1 }, T, -1, 200, 0, RND_TOP,
	  RETRY_AT, LONG_MAX },
	{ "huge delay against the budget", { 10, LONG_MAX, LONG_MAX, LONG_MAX, 0 }, T, -1, 1, 1, 0,
	  RETRY_EXHAUSTED_TIME, -1 },
	{ "elapsed LONG_MAX, zero delay", { 10, 0, 0, LONG_MAX, 0 }, T, -1, 1, LONG_MAX, 0,
	  RETRY_AT, 0 },
	{ "huge Retry-After, huge cap", { 10, 1, LONG_MAX, LONG_MAX, 0 }, T, LONG_MAX, 1, 0, 0,
	  RETRY_AT, LONG_MAX },
};

#define NCASES (sizeof(cases) / sizeof(cases[0]))

START_TEST(test_table)
{
	const struct backoff_case *c = &cases[_i];
	struct outcome o = { c->cls, REASON_HTTP_429, c->retry_after_ms };
	long delay = 12345;
	enum retry_decision d = backoff_next(&c->p, &o, c->attempt, c->elapsed_ms, c->rnd, &delay);

	ck_assert_msg(d == c->want && delay == c->want_delay, "%s: got %s %ld, want %s %ld",
	              c->name, backoff_decision_name(d), delay, backoff_decision_name(c->want),
	              c->want_delay);
}
END_TEST

/* A whole schedule: each step waits the delay it was given. */
struct schedule {
	const char *name;
	struct retry_policy p;
	long retry_after_ms;
	long want[8];                 /* delays, then -1 */
	enum retry_decision last;     /* why it stopped */
};

static const struct schedule schedules[] = {
	{ "attempts run out", { 5, 1000, 8000, 60000, 0 }, -1,
	  { 1000, 2000, 4000, 8000, -1 }, RETRY_EXHAUSTED_ATTEMPTS },
	{ "time runs out", { 10, 1000, 8000, 10000, 0 }, -1,
	  { 1000, 2000, 4000, -1 }, RETRY_EXHAUSTED_TIME },
	{ "cap reached, then attempts", { 6, 1000, 3000, 60000, 0 }, -1,
	  { 1000, 2000, 3000, 3000, 3000, -1 }, RETRY_EXHAUSTED_ATTEMPTS },
	/* A provider that keeps answering 429 Retry-After: 2 for longer than
	 * the budget (seed 004's "rate limit outlasts the retry budget"). */
	{ "429 Retry-After 2 until the budget ends", { 10, 100, 5000, 7000, 0 }, 2000,
	  { 2000, 2000, 2000, -1 }, RETRY_EXHAUSTED_TIME },
	{ "one attempt only", { 1, 1000, 8000, 60000, 0 }, -1,
	  { -1 }, RETRY_EXHAUSTED_ATTEMPTS },
};

START_TEST(test_schedule)
{
	const struct schedule *s = &schedules[_i];
	struct outcome o = { OUTCOME_TRANSIENT, REASON_HTTP_503, s->retry_after_ms };
	long elapsed = 0, delay;
	int attempt, k = 0;
	enum retry_decision d;

	for (attempt = 1;; attempt++) {
		d = backoff_next(&s->p, &o, attempt, elapsed, 0, &delay);
		if (d != RETRY_AT)
			break;
		ck_assert_msg(k < 7 && s->want[k] == delay, "%s: attempt %d waits %ld, want %ld",
		              s->name, attempt, delay, s->want[k]);
		elapsed += delay;
		k++;
	}
	ck_assert_msg(s->want[k] == -1, "%s: stopped after %d retries", s->name, k);
	ck_assert_msg(d == s->last, "%s: stopped with %s", s->name, backoff_decision_name(d));
	ck_assert_int_eq(delay, -1);
	ck_assert_int_le(elapsed, s->p.max_elapsed_ms);
}
END_TEST

/* For every attempt number and a spread of rnd and jitter values:
 * d ≤ delay ≤ d + jitter × d, strictly below when there is room for it,
 * and d is min(cap, base × 2^(attempt−1)) computed the slow way. */
START_TEST(test_bounds_sweep)
{
	static const double rnds[] = { 0, 1e-9, 0.25, 0.5, 0.999, RND_TOP };
	static const double jitters[] = { 0, 0.1, 0.5, 1 };
	static const long bases[] = { 1, 3, 100, 250, 1000 };
	static const long caps[] = { 0, 1, 1000, 3600000, 86400000L * 365, LONG_MAX };
	size_t bi, ci, ji, ri;
	int attempt;

	for (bi = 0; bi < sizeof(bases) / sizeof(bases[0]); bi++)
	for (ci = 0; ci < sizeof(caps) / sizeof(caps[0]); ci++)
	for (ji = 0; ji < sizeof(jitters) / sizeof(jitters[0]); ji++)
	for (ri = 0; ri < sizeof(rnds) / sizeof(rnds[0]); ri++)
	for (attempt = 1; attempt <= 70; attempt++) {
		struct retry_policy p = { 100, bases[bi], caps[ci], LONG_MAX, jitters[ji] };
		struct outcome o = { OUTCOME_TRANSIENT, REASON_HTTP_503, -1 };
		long delay, d = bases[bi];
		int k;
		long double hi;

		for (k = 1; k < attempt && d < caps[ci]; k++)
			d = d > caps[ci] / 2 ? caps[ci] : d * 2;
		if (d > caps[ci])
			d = caps[ci];

		ck_assert_int_eq(backoff_next(&p, &o, attempt, 0, rnds[ri], &delay), RETRY_AT);
		hi = (long double)d * (1.0L + jitters[ji]);
		ck_assert_msg(delay >= d && (long double)delay <= hi,
		              "base %ld cap %ld jitter %g rnd %g attempt %d: %ld not in [%ld, %Lg]",
		              bases[bi], caps[ci], jitters[ji], rnds[ri], attempt, delay, d, hi);
		if (jitters[ji] > 0 && d > 0 && d < (1L << 40))
			ck_assert_msg((long double)delay < hi, "attempt %d: %ld reaches %Lg", attempt,
			              delay, hi);
		if (rnds[ri] == 0 || jitters[ji] == 0)
			ck_assert_int_eq(delay, d);
	}
}
END_TEST

/* The delay never shrinks from one attempt to the next (same rnd). */
START_TEST(test_monotonic)
{
	struct retry_policy p = { INT_MAX, 7, 1000000, LONG_MAX, 0.5 };
	struct outcome o = { OUTCOME_TRANSIENT, REASON_HTTP_503, -1 };
	long prev = 0, delay;
	int attempt;

	for (attempt = 1; attempt < 200; attempt++) {
		ck_assert_int_eq(backoff_next(&p, &o, attempt, 0, 0.7, &delay), RETRY_AT);
		ck_assert_int_ge(delay, prev);
		ck_assert_int_le(delay, 1500000);
		prev = delay;
	}
	ck_assert_int_eq(prev, 1350000);
}
END_TEST

START_TEST(test_null_and_names)
{
	struct retry_policy p = POL(0);
	struct outcome o = { OUTCOME_TRANSIENT, REASON_HTTP_503, -1 };
	long delay = 7;

	ck_assert_int_eq(backoff_next(NULL, &o, 1, 0, 0, &delay), RETRY_NEVER);
	ck_assert_int_eq(delay, -1);
	ck_assert_int_eq(backoff_next(&p, NULL, 1, 0, 0, &delay), RETRY_NEVER);
	ck_assert_int_eq(backoff_next(&p, &o, 1, 0, 0, NULL), RETRY_AT);

	ck_assert_str_eq(backoff_decision_name(RETRY_AT), "retry_at");
	ck_assert_str_eq(backoff_decision_name(RETRY_EXHAUSTED_ATTEMPTS), "exhausted_attempts");
	ck_assert_str_eq(backoff_decision_name(RETRY_EXHAUSTED_TIME), "exhausted_time");
	ck_assert_str_eq(backoff_decision_name(RETRY_NEVER), "never");
	ck_assert_str_eq(backoff_decision_name((enum retry_decision)42), "invalid");
}
END_TEST

/* classify → backoff: what the dispatcher will do with real outcomes. */
START_TEST(test_with_classify)
{
	struct retry_policy p = { 5, 500, 30000, 120000, 0 };
	struct attempt_result a = { .kind = ATTEMPT_HTTP, .status = 429, .request_sent = true,
	                            .retry_after = "2" };
	struct outcome o = classify_attempt(&a, 0);
	long delay;

	ck_assert_int_eq(backoff_next(&p, &o, 1, 0, 0, &delay), RETRY_AT);
	ck_assert_int_ge(delay, 2000);

	a.status = 400;
	o = classify_attempt(&a, 0);
	ck_assert_int_eq(backoff_next(&p, &o, 1, 0, 0, &delay), RETRY_NEVER);

	a.status = 0;
	a.retry_after = NULL;
	a.transport_error = ATTEMPT_ERR_TIMEOUT;
	o = classify_attempt(&a, 0);
	ck_assert_int_eq(backoff_next(&p, &o, 1, 0, 0, &delay), RETRY_NEVER);
	a.target_idempotent = true;
	o = classify_attempt(&a, 0);
	ck_assert_int_eq(backoff_next(&p, &o, 1, 0, 0, &delay), RETRY_AT);
	ck_assert_int_eq(delay, 500);
}
END_TEST

/* test_bounds_sweep takes over a second under ASan; Check's default 4 s
 * is too close on a loaded machine */
TL_SUITE(backoff_suite, "backoff",
         {"backoff_next", 60,
          .loops = TL_LOOPS({test_table, (int)NCASES},
                            {test_schedule, (int)(sizeof(schedules) / sizeof(schedules[0]))}),
          .tests = TL_LIST(test_bounds_sweep, test_monotonic, test_null_and_names,
                           test_with_classify)})

TL_SUITE_MAIN(backoff_suite, false)

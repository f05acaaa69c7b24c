/*
 * deadline.h — a point in time some milliseconds after another, for the
 * timed waits (pthread_cond_timedwait, a watchdog) of the daemons. A leaf:
 * it includes nothing of the application.
 */
#ifndef OG_DEADLINE_H
#define OG_DEADLINE_H

#include <time.h>

/* Moves *t ms milliseconds later (ms >= 0), tv_nsec kept below a second. */
void deadline_add_ms(struct timespec *t, long ms);

/* Now on clock clk (CLOCK_REALTIME, CLOCK_MONOTONIC), plus ms. */
struct timespec deadline_in_ms(clockid_t clk, long ms);

#endif

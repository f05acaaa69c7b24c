/*
 * deadline.c — see deadline.h.
 */
#include "deadline.h"

void
deadline_add_ms(struct timespec *t, long ms)
{
	t->tv_sec += ms / 1000;
	t->tv_nsec += (ms % 1000) * 1000000L;
	if (t->tv_nsec >= 1000000000L) {
		t->tv_sec++;
		t->tv_nsec -= 1000000000L;
	}
}

struct timespec
deadline_in_ms(clockid_t clk, long ms)
{
	struct timespec t;

	clock_gettime(clk, &t);
	deadline_add_ms(&t, ms);
	return t;
}

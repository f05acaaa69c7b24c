/*
 * pool.c — the worker threads of oncegate-dispatch; see pool.h.
 */
#define _GNU_SOURCE /* pthread_timedjoin_np */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pool.h"
#include "worker.h"

int
pool_start(struct pool *p, struct dispatch_shared *s, int n)
{
	sigset_t blocked, old;
	int i, rc = 0;

	p->n = 0;
	p->workers = calloc((size_t)n, sizeof(*p->workers));
	if (p->workers == NULL)
		return -1;
	/* Workers never see a signal: main() takes them all. */
	sigemptyset(&blocked);
	sigaddset(&blocked, SIGTERM);
	sigaddset(&blocked, SIGINT);
	sigaddset(&blocked, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &blocked, &old);
	for (i = 0; i < n; i++) {
		if (pthread_create(&p->workers[i], NULL, worker_main, s) != 0) {
			fprintf(stderr, "oncegate-dispatch: cannot start worker %d\n", i);
			atomic_store(&s->stopping, true);
			rc = -1;
			break;
		}
		p->n++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

bool
pool_stop(struct pool *p, struct dispatch_shared *s, int grace_s)
{
	struct timespec until;
	bool all = true;
	int i;

	/* stop claiming; workers finish their send (bounded by the target
	 * timeout) and give back the rest of their batch */
	atomic_store(&s->stopping, true);
	dispatch_wake(s);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += grace_s;
	for (i = 0; i < p->n; i++)
		if (pthread_timedjoin_np(p->workers[i], NULL, &until) != 0)
			all = false;
	return all;
}

void
pool_free(struct pool *p)
{
	free(p->workers);
	p->workers = NULL;
	p->n = 0;
}

/*
 * pool.h — the worker threads of oncegate-dispatch: started with every
 * signal blocked (the main thread takes them all), stopped within the
 * shutdown grace. Each worker runs worker_main() (worker.h).
 */
#ifndef OG_POOL_H
#define OG_POOL_H

#include <pthread.h>
#include <stdbool.h>

#include "dispatch.h"

struct pool {
	pthread_t *workers;
	int n;                     /* started */
};

/* Starts n workers on s. -1 when not all could start: the ones that did
 * are told to stop (pool_stop still joins them). */
int pool_start(struct pool *p, struct dispatch_shared *s, int n)
	__attribute__((warn_unused_result));

/* Stops claiming and waits up to grace_s seconds for the workers to finish
 * their send and give back the rest of their batch. False when a worker
 * was still busy at the deadline. */
bool pool_stop(struct pool *p, struct dispatch_shared *s, int grace_s);

void pool_free(struct pool *p);

#endif

/*
 * listen.h — the dispatcher's LISTEN connection: NOTIFY oncegate_outbox
 * (an effect was enqueued) wakes the workers. Plain libpq, no prepared
 * statements; while the database is away it is tried again every second,
 * and what was enqueued meanwhile is looked for once it is back.
 */
#ifndef OG_LISTEN_H
#define OG_LISTEN_H

#include <libpq-fe.h>

#include "dispatch.h"

struct listen {
	PGconn *conn;              /* NULL while the database is away */
	long long last_try_ms;     /* CLOCK_MONOTONIC */
};

/* Waits up to poll_ms for a notification (now_ms: the monotonic clock in
 * milliseconds) and wakes the workers when one came. */
void listen_wait(struct listen *l, struct dispatch_shared *s, const char *conninfo,
                 int poll_ms, long long now_ms);

void listen_close(struct listen *l);

#endif

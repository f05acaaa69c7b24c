/*
 * janitor.h — the dispatcher's periodic housekeeping, run by the main
 * thread every poll interval on a database connection of its own: the
 * kill switch read again (and the effects it holds back counted), expired
 * sending leases made unknown, expired approvals failed with their
 * callback, the attempt counts flushed to the metrics, and the workers
 * woken for what became due by time (retries, windows) without a NOTIFY.
 * The rules themselves are the library's (dispatch.h, metrics.h).
 */
#ifndef OG_JANITOR_H
#define OG_JANITOR_H

#include "db.h"
#include "dispatch.h"

struct janitor {
	struct db *db;
	struct provider_conn *pc;  /* the chats' replies; NULL: out of memory */
	long long last_tick_ms;    /* CLOCK_MONOTONIC */
};

/* NULL db when out of memory (the connection itself is made lazily). */
void janitor_init(struct janitor *j, const char *conninfo, int statement_timeout_ms);

/* Runs the housekeeping when poll_ms have passed since the last run. */
void janitor_tick(struct janitor *j, struct dispatch_shared *s, int poll_ms, long long now_ms);

/* The send attempts counted since the last flush go to the database; when
 * it does not answer they wait in memory for the next. */
void janitor_flush_metrics(struct janitor *j);

void janitor_free(struct janitor *j);

#endif

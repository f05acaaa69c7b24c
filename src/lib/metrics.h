/*
 * metrics.h — what the code counts for GET /metrics, and the flush of it.
 *
 * Claim outcomes, request latency and send attempts are not stored anywhere
 * (a duplicate is answered by a read, on purpose), so each process counts
 * them in memory — one relaxed atomic add on the claim path — and
 * metrics_flush() adds the deltas to the metric tables (sql/007_metrics.sql
 * and after). The responder flushes from a thread of its own once a second
 * (metrics_flusher_start) and before every refresh of its answer; a
 * dispatcher at its housekeeping tick. The answer itself: metrics_text.h;
 * the report's figures: metrics_report.h.
 */
#ifndef OG_METRICS_H
#define OG_METRICS_H

#include <stdbool.h>
#include <stddef.h>

#include "db.h"
#include "rc.h"

/* What a process counts in memory. Names in metric_counters: metrics.c. */
enum metrics_counter {
	METRICS_CLAIM_CLAIMED = 0,     /* 201: a new key or a reclaim */
	METRICS_CLAIM_DUPLICATE,       /* 200: the key exists and is not claimable */
	METRICS_CLAIM_MISMATCH,        /* 422: same key, different payload */
	METRICS_RUN_LEASE_RECLAIMED,   /* 201 over a run whose lease had run out */
	METRICS_APPROVAL_REMINDED,     /* a challenge's approvers told again (janitor) */
	METRICS_APPROVAL_ESCALATED,    /* an approver entry added by an escalation */
	METRICS_OUTPUT_SUBMITTED,      /* a model output handed in and checked against its contract */
	METRICS_AUTH_FAILED,           /* 401: a request whose API key was missing or not valid */
	METRICS_NCOUNTERS,
};

/* Counts one event of this process. Lock-free; safe from any thread. */
void metrics_count(enum metrics_counter c);

/* Routes of the responder's table with a latency histogram; requests of
 * a route past this are not timed. */
#define METRICS_ROUTES_MAX 32

/* A route as its histogram is labelled: method and path pattern. */
struct metrics_route {
	const char *method;
	const char *pattern;      /* e.g. "/v1/runs/{key}": no quote or backslash */
};

/* The routes that metrics_observe_request's numbers index, which /metrics
 * lists (each zero until it answers): set once by the responder's request
 * pipeline before its first request; routes must stay valid. */
void metrics_routes(const struct metrics_route *routes, size_t n);

/* Times one request of route i (of metrics_routes) in this process: a few
 * relaxed atomic adds. Flushed with the counters. */
void metrics_observe_request(size_t route, double seconds);

/* Counts one send attempt of this process (a dispatcher) as the attempt
 * history records it: target, outcome class, whether it came after the
 * effect's first, whether it is a sending lease that ran out. A few
 * distinct targets and classes per process; past METRICS_ATTEMPT_KEYS
 * pairs, new ones are not counted (and said so once). */
#define METRICS_ATTEMPT_KEYS 256
void metrics_count_attempt(const char *target, const char *cls, bool retry,
                           bool lease_expired);

/* Adds this process's uncounted events to metric_counters in one
 * statement. On failure the events stay counted in memory for the next
 * flush (so a flush whose reply was lost may count them twice). */
enum og_rc metrics_flush(struct db *db) __attribute__((warn_unused_result));

/* The responder's flush thread: its own database connection, a flush every
 * OG_METRICS_FLUSH_MS, and a last one when stopped (a SIGTERM loses no
 * count; a SIGKILL loses at most one interval's). */
int metrics_flusher_start(const char *conninfo, int statement_timeout_ms, char *err,
                          size_t errlen) __attribute__((warn_unused_result));
void metrics_flusher_stop(void);

#endif

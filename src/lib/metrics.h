/*
 * metrics.h — GET /metrics: the Prometheus text exposition format
 * 0.0.4, computed from the database so that every responder answers with
 * the same figures however many responders and dispatchers run.
 *
 * Two halves:
 *  - Claim outcomes are not stored anywhere (a duplicate is answered by a
 *    read, on purpose), so each process counts them in memory with
 *    metrics_count() — one relaxed atomic add, nothing else on the claim
 *    path — and metrics_flush() adds the deltas to the metric_counters table
 *    (sql/007_metrics.sql). The responder flushes from a thread of its own
 *    once a second (metrics_flusher_start) and before every refresh.
 *  - Everything else is read from the rows the product keeps (runs,
 *    approvals, effects, dead letters, the kill switch), in ONE statement, so
 *    all figures of an answer come from one snapshot.
 *
 * The answer is cached per process for OG_METRICS_CACHE_MS and shared by the
 * worker threads: a scrape storm costs one query per interval per process.
 */
#ifndef OG_METRICS_H
#define OG_METRICS_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "buf.h"
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

/* Routes of the responder's table (api_route_count) with a latency
 * histogram; requests of a route past this are not timed. */
#define METRICS_ROUTES_MAX 32

/* Times one request of route i (api_route_label) in this process: a few
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

/* The exposition text into out (replacing what it held): from the cache
 * while it is fresh, otherwise flushed and computed on db. While another
 * thread computes it, an older copy is answered instead of waiting. */
enum og_rc metrics_text(struct db *db, struct buf *out)
	__attribute__((warn_unused_result));

/* What GET /metrics answers: metrics_text plus oncegate_database_up (1)
 * and the figures' age; while the database is out of reach, the last
 * figures this process read (or only oncegate_build_info when it has
 * none), with oncegate_database_up 0 and their age. OG_ERROR only when
 * the answer does not fit. */
enum og_rc metrics_answer(struct db *db, struct buf *out) __attribute__((warn_unused_result));

/* The media type of metrics_text's answer. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* The responder's flush thread: its own database connection, a flush every
 * OG_METRICS_FLUSH_MS, and a last one when stopped (a SIGTERM loses no
 * count; a SIGKILL loses at most one interval's). */
int metrics_flusher_start(const char *conninfo, int statement_timeout_ms, char *err,
                          size_t errlen) __attribute__((warn_unused_result));
void metrics_flusher_stop(void);

/* The weekly report's figures (the same as GET /metrics) over the last
 * since_seconds; *out is a new object. */
enum og_rc metrics_report(struct db *db, long long since_seconds, json_t **out)
	__attribute__((warn_unused_result));

#endif

/*
 * metrics_text.h — GET /metrics: the Prometheus text exposition format
 * 0.0.4, computed from the database so that every responder answers with
 * the same figures however many responders and dispatchers run
 * (metrics_text.c).
 *
 * What only a process knows (claim outcomes, request latency, send
 * attempts) it counts in memory and flushes into the metric tables
 * (metrics.h); everything else is read from the rows the product keeps
 * (runs, approvals, effects, dead letters, the kill switch). All of it in
 * ONE statement, so all figures of an answer come from one snapshot.
 *
 * The answer is cached per process for OG_METRICS_CACHE_MS and shared by the
 * worker threads: a scrape storm costs one query per interval per process.
 */
#ifndef OG_METRICS_TEXT_H
#define OG_METRICS_TEXT_H

#include "buf.h"
#include "db.h"
#include "rc.h"

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

#endif

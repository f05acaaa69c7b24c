/*
 * metrics_report.h — the figures of `oncegatectl report` (metrics_report.c):
 * the same counts GET /metrics shows, over a period.
 */
#ifndef OG_METRICS_REPORT_H
#define OG_METRICS_REPORT_H

#include <jansson.h>

#include "db.h"
#include "rc.h"

/* The weekly report's figures over the last since_seconds; *out is a new
 * object. */
enum og_rc metrics_report(struct db *db, long long since_seconds, json_t **out)
	__attribute__((warn_unused_result));

#endif

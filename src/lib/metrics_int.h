/*
 * metrics_int.h — what the files of the metrics module share. One module
 * (the owner of metric_counters, metric_route_latency and metric_attempts)
 * over four files, one a door:
 *
 *   metrics.c          the counts the code bumps (metrics.h), kept in memory
 *                      and added to the metric tables by metrics_flush: the
 *                      only writer of those tables
 *   metrics_flusher.c  the responder's flush thread
 *   metrics_text.c     GET /metrics (metrics_text.h): one snapshot of the
 *                      figures, the exposition text, the per-process cache
 *   metrics_report.c   oncegatectl report's figures (metrics_report.h)
 *
 * Private to those files.
 */
#ifndef OG_METRICS_INT_H
#define OG_METRICS_INT_H

#include <stddef.h>

#include "deadletter.h"
#include "metrics.h"

/* metric_counters.name of each enum metrics_counter, in enum order. */
extern const char *const metrics_counter_names[METRICS_NCOUNTERS];

/* Upper bounds (le) of the request-latency histograms, in seconds. */
#define METRICS_NLAT 11
extern const double metrics_lat_bounds[METRICS_NLAT];

/* The routes metrics_routes was given (how many; 0 before it was). */
size_t metrics_route_labels(const struct metrics_route **routes);

/* The open dead letters, as d: the one definition the CLI's list, `report`
 * and the gauges share (DEADLETTER_OPEN: the effect still failed or
 * unknown, and no resolution that settled it). */
#define METRICS_OPEN_LETTERS                                                            \
	"dead_letters d JOIN effect_outbox e ON e.id = d.effect_id"                          \
	" WHERE " DEADLETTER_OPEN("d", "e")

#endif

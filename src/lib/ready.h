/*
 * ready.h — readiness: the named reasons this process is running but not
 * fully ready, and the outcome of its configuration loads.
 *
 * Liveness (GET /healthz) says the process answers and the database does;
 * readiness (GET /readyz) also says nothing is degraded. Any part of a
 * daemon may set a reason under a name of its own (a short snake_case word,
 * a string that lives as long as the process) with a detail for people, and
 * clear it when the cause is gone; GET /readyz answers 503 not_ready naming
 * every reason set, and /metrics carries oncegate_ready. A detail is shown
 * to whoever may GET /readyz: a fact, never a path or a secret (the log
 * line says the rest).
 *
 * Thread-safe; a process holds at most READY_REASONS_MAX reasons at once.
 */
#ifndef OG_READY_H
#define OG_READY_H

#include <stdbool.h>

#include <jansson.h>

#include "buf.h"

#define READY_REASONS_MAX 8

/* The reason a failed configuration reload sets (ready_loaded). */
#define READY_CONFIG_RELOAD "config_reload_failed"
/* The reason the schema guard sets while the database's schema is not the
 * one this build expects (schema_version.c). */
#define READY_SCHEMA_MISMATCH "schema_mismatch"

/* Sets (or replaces the detail of) the reason name. */
void ready_set(const char *name, const char *detail);
/* Clears the reason name; nothing when it is not set. */
void ready_clear(const char *name);
/* No reason is set. */
bool ready_ok(void);
/* The reasons set, oldest first: a new array of {"reason", "detail", "since"}. */
json_t *ready_reasons(void);

/* A load of the configuration and contracts ended: ok clears
 * READY_CONFIG_RELOAD and records the time for
 * oncegate_config_last_reload_success_timestamp_seconds; a failure sets it
 * (the previous configuration stays in use). */
void ready_loaded(bool ok);

/* Appends this process's readiness to the exposition text b:
 * oncegate_ready, oncegate_config_reload_failed and
 * oncegate_config_last_reload_success_timestamp_seconds. -1 when b is full. */
int ready_metrics(struct buf *b) __attribute__((warn_unused_result));

#endif

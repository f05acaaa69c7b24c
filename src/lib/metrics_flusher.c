/*
 * metrics_flusher.c — the responder's flush thread (metrics.h): the
 * counts of this process reach metric_counters about once a second even
 * when nobody scrapes, and once more when the responder stops.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "caps.h"
#include "deadline.h"
#include "log.h"
#include "metrics_int.h"

static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_t thread;
	struct db *db;
	bool running;
	bool stop;
} flusher = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void *
flusher_main(void *arg)
{
	bool failing = false, last;
	struct timespec until;

	(void)arg;
	pthread_mutex_lock(&flusher.lock);
	for (;;) {
		until = deadline_in_ms(CLOCK_MONOTONIC, OG_METRICS_FLUSH_MS);
		while (!flusher.stop &&
		       pthread_cond_timedwait(&flusher.wake, &flusher.lock, &until) == 0)
			;
		last = flusher.stop;
		pthread_mutex_unlock(&flusher.lock);
		if (metrics_flush(flusher.db) != OG_OK) {
			/* once per outage, not once a second */
			if (!failing)
				log_event(LOG_LEVEL_WARNING, "metrics.flush_failed",
				          &(struct log_fields){
				              .detail = db_error(flusher.db),
				              .hint = "claim counts stay in memory until a flush "
				                      "succeeds; /metrics lags meanwhile" });
			failing = true;
		} else {
			failing = false;
		}
		pthread_mutex_lock(&flusher.lock);
		if (last)
			break;
	}
	pthread_mutex_unlock(&flusher.lock);
	return NULL;
}

int
metrics_flusher_start(const char *conninfo, int statement_timeout_ms, char *err,
                      size_t errlen)
{
	pthread_condattr_t attr;
	int rc;

	if (flusher.running) {
		snprintf(err, errlen, "the metrics flush thread is already running");
		return -1;
	}
	/* The connection is made on the first flush with something to add:
	 * a responder that answers no claims never opens it. */
	flusher.db = db_new(conninfo, statement_timeout_ms);
	if (flusher.db == NULL || pthread_condattr_init(&attr) != 0) {
		db_free(flusher.db);
		flusher.db = NULL;
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&flusher.wake, &attr);
	pthread_condattr_destroy(&attr);
	flusher.stop = false;
	rc = pthread_create(&flusher.thread, NULL, flusher_main, NULL);
	if (rc != 0) {
		pthread_cond_destroy(&flusher.wake);
		db_free(flusher.db);
		flusher.db = NULL;
		snprintf(err, errlen, "cannot start the metrics flush thread: %s", strerror(rc));
		return -1;
	}
	flusher.running = true;
	return 0;
}

void
metrics_flusher_stop(void)
{
	if (!flusher.running)
		return;
	pthread_mutex_lock(&flusher.lock);
	flusher.stop = true;
	pthread_cond_signal(&flusher.wake);
	pthread_mutex_unlock(&flusher.lock);
	pthread_join(flusher.thread, NULL);
	pthread_cond_destroy(&flusher.wake);
	db_free(flusher.db);
	flusher.db = NULL;
	flusher.running = false;
}

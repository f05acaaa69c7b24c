/*
 * ready.c — the named reasons a process is not ready, and its last
 * successful configuration load (ready.h).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ready.h"

static struct {
	pthread_mutex_t lock;
	struct {
		const char *name;
		char detail[256];
		time_t since;
	} reasons[READY_REASONS_MAX];
	int n;
	time_t loaded_at;    /* the last successful load; 0: none yet */
} ready = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int
find(const char *name)
{
	int i;

	for (i = 0; i < ready.n; i++)
		if (strcmp(ready.reasons[i].name, name) == 0)
			return i;
	return -1;
}

void
ready_set(const char *name, const char *detail)
{
	int i;

	pthread_mutex_lock(&ready.lock);
	i = find(name);
	if (i < 0 && ready.n < READY_REASONS_MAX) {
		i = ready.n++;
		ready.reasons[i].name = name;
		ready.reasons[i].since = time(NULL);
	}
	if (i >= 0)
		snprintf(ready.reasons[i].detail, sizeof(ready.reasons[i].detail), "%s",
		         detail != NULL ? detail : "");
	pthread_mutex_unlock(&ready.lock);
}

void
ready_clear(const char *name)
{
	int i;

	pthread_mutex_lock(&ready.lock);
	i = find(name);
	if (i >= 0) {
		memmove(&ready.reasons[i], &ready.reasons[i + 1],
		        (size_t)(ready.n - i - 1) * sizeof(ready.reasons[0]));
		ready.n--;
	}
	pthread_mutex_unlock(&ready.lock);
}

bool
ready_ok(void)
{
	bool ok;

	pthread_mutex_lock(&ready.lock);
	ok = ready.n == 0;
	pthread_mutex_unlock(&ready.lock);
	return ok;
}

json_t *
ready_reasons(void)
{
	json_t *a = json_array();
	int i;

	pthread_mutex_lock(&ready.lock);
	for (i = 0; a != NULL && i < ready.n; i++) {
		char since[32];
		struct tm tm;

		gmtime_r(&ready.reasons[i].since, &tm);
		strftime(since, sizeof(since), "%Y-%m-%dT%H:%M:%SZ", &tm);
		json_array_append_new(a, json_pack("{s:s, s:s, s:s}", "reason",
		                                   ready.reasons[i].name, "detail",
		                                   ready.reasons[i].detail, "since", since));
	}
	pthread_mutex_unlock(&ready.lock);
	return a;
}

void
ready_loaded(bool ok)
{
	if (!ok) {
		ready_set(READY_CONFIG_RELOAD, "the last reload of the configuration or the "
		          "contracts failed; the previous ones stay in use");
		return;
	}
	ready_clear(READY_CONFIG_RELOAD);
	pthread_mutex_lock(&ready.lock);
	ready.loaded_at = time(NULL);
	pthread_mutex_unlock(&ready.lock);
}

int
ready_metrics(struct buf *b)
{
	bool ok, failed;
	time_t at;

	pthread_mutex_lock(&ready.lock);
	ok = ready.n == 0;
	failed = find(READY_CONFIG_RELOAD) >= 0;
	at = ready.loaded_at;
	pthread_mutex_unlock(&ready.lock);
	return buf_puts(b, "# HELP oncegate_ready 1 while the responder that answers this scrape "
	                   "is ready (GET /readyz answers 200), 0 while a reason holds it back.\n"
	                   "# TYPE oncegate_ready gauge\n") != 0 ||
	       buf_printf(b, "oncegate_ready %d\n", ok ? 1 : 0) != 0 ||
	       buf_puts(b, "# HELP oncegate_config_reload_failed 1 while the last reload (SIGHUP) "
	                   "of the configuration or the contracts of the responder that answers "
	                   "this scrape failed and the previous ones stay in use.\n"
	                   "# TYPE oncegate_config_reload_failed gauge\n") != 0 ||
	       buf_printf(b, "oncegate_config_reload_failed %d\n", failed ? 1 : 0) != 0 ||
	       buf_puts(b, "# HELP oncegate_config_last_reload_success_timestamp_seconds When the "
	                   "responder that answers this scrape last loaded its configuration and "
	                   "contracts (at start or on SIGHUP), in seconds since the epoch.\n"
	                   "# TYPE oncegate_config_last_reload_success_timestamp_seconds gauge\n") != 0 ||
	       buf_printf(b, "oncegate_config_last_reload_success_timestamp_seconds %lld\n",
	                  (long long)at) != 0
	           ? -1
	           : 0;
}

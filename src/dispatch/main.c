/*
 * oncegate-dispatch — the outbox dispatcher, the only part of oncegate that
 * acts on the outside world. main() reads options and config,
 * starts the workers (dispatch.h), and then listens: for NOTIFY
 * oncegate_outbox (an effect was enqueued), for the poll interval (the
 * housekeeping tick, and effects that became due without a notification),
 * and for signals.
 *
 * Any number of dispatchers may run, on any host: they share nothing but
 * the database, where every claim skips rows another one holds.
 */
#define _GNU_SOURCE /* pthread_timedjoin_np */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <libpq-fe.h>

#include "classify.h"
#include "config.h"
#include "db.h"
#include "dispatch.h"
#include "log.h"
#include "metrics.h"

static volatile sig_atomic_t got_term, got_hup;

static void
on_signal(int sig)
{
	if (sig == SIGHUP)
		got_hup = 1;
	else
		got_term = 1;
}

static void
usage(FILE *out)
{
	fprintf(out,
	        "usage: oncegate-dispatch [-c FILE] [-n] [-h]\n"
	        "  -c FILE  configuration file (default: $ONCEGATE_CONF or the installed one)\n"
	        "  -n       check the configuration, print it (secrets masked) and exit\n"
	        "  -h       this help\n"
	        "Sends only while the environment has AI_ACTIONS_ENABLED=true AND the\n"
	        "database flag is on (oncegatectl kill-switch on).\n"
	        "Signals: SIGTERM/SIGINT stop claiming, finish or release in-flight work\n"
	        "within dispatch_shutdown_seconds and exit; SIGHUP reopens the decision log\n"
	        "and reloads the configuration (targets, limits) and the contracts every\n"
	        "payload is checked against again before it is sent.\n");
}

static int
load_config(const char *path, struct config *cfg, char *err, size_t errlen)
{
	config_defaults(cfg);
	if (config_load(path, cfg, err, errlen) != 0 || config_validate(cfg, err, errlen) != 0) {
		config_free(cfg);
		return -1;
	}
	return 0;
}

/* The send attempts counted since the last tick go to the database (the
 * metrics); when it does not answer they wait in memory for the next. */
static void
flush_metrics(struct db *db)
{
	if (metrics_flush(db) != METRICS_OK)
		log_event(LOG_LEVEL_DEBUG, "metrics.flush_failed",
		          &(struct log_fields){ .detail = db_error(db),
		                                .hint = "attempt counts stay in memory until a "
		                                        "flush succeeds" });
}

/* The LISTEN connection: plain libpq, no prepared statements. NULL while
 * the database is away. */
static PGconn *
listen_connect(const char *conninfo)
{
	PGconn *c = PQconnectdb(conninfo);
	PGresult *r;

	if (PQstatus(c) != CONNECTION_OK) {
		PQfinish(c);
		return NULL;
	}
	r = PQexec(c, dispatch_listen_sql());
	if (PQresultStatus(r) != PGRES_COMMAND_OK) {
		PQclear(r);
		PQfinish(c);
		return NULL;
	}
	PQclear(r);
	return c;
}

static long long
now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void
reload(struct dispatch_shared *s, const char *path)
{
	struct config cfg;
	struct dispatch_config *dc;
	char err[512];

	if (log_reopen() != 0)
		fprintf(stderr, "oncegate-dispatch: cannot reopen the decision log\n");
	if (load_config(path, &cfg, err, sizeof(err)) != 0) {
		struct log_fields f = { .reason = err, .hint = "the previous configuration stays" };

		log_event(LOG_LEVEL_ERROR, "dispatch.reload_failed", &f);
		return;
	}
	log_set_level(log_level_parse(cfg.log_level));
	dc = dispatch_config_new(&cfg);
	if (dc == NULL) {
		config_free(&cfg);
		return;
	}
	dispatch_config_swap(s, dc);
	log_event(LOG_LEVEL_NOTICE, "dispatch.reloaded", NULL);
}

int
main(int argc, char **argv)
{
	const char *path = NULL;
	bool check = false;
	struct config cfg;
	struct dispatch_config *dc;
	struct dispatch_shared s;
	struct db *tick_db;
	PGconn *listen_conn = NULL;
	pthread_t *workers;
	char err[512];
	int opt, i, nworkers, poll_ms, rc = 0;
	long long last_tick = 0, last_listen_try = 0;
	struct sigaction sa;
	sigset_t blocked, old;

	while ((opt = getopt(argc, argv, "c:nh")) != -1) {
		switch (opt) {
		case 'c':
			path = optarg;
			break;
		case 'n':
			check = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	path = config_path(path);
	if (load_config(path, &cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "oncegate-dispatch: %s\n", err);
		return 1;
	}
	if (check) {
		config_dump(&cfg, stdout);
		config_free(&cfg);
		return 0;
	}
	if (log_open(cfg.log_file, log_level_parse(cfg.log_level), "oncegate-dispatch") != 0) {
		fprintf(stderr, "oncegate-dispatch: cannot open the decision log %s\n", cfg.log_file);
		config_free(&cfg);
		return 1;
	}
	/* The classifier's rule names go into `reason` and must stay readable
	 * although some are as long as a key. */
	{
		static const char *names[REASON__COUNT];
		int r;

		for (r = 0; r < REASON__COUNT; r++)
			names[r] = classify_reason_name((enum outcome_reason)r);
		log_keep_names(names, REASON__COUNT);
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "oncegate-dispatch: libcurl did not initialise\n");
		config_free(&cfg);
		return 1;
	}
	nworkers = cfg.dispatch_workers;
	dc = dispatch_config_new(&cfg);
	if (dc == NULL || dispatch_shared_init(&s, dc) != 0) {
		fprintf(stderr, "oncegate-dispatch: out of memory\n");
		return 1;
	}

	/* Workers never see a signal: main() takes them all. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&blocked);
	sigaddset(&blocked, SIGTERM);
	sigaddset(&blocked, SIGINT);
	sigaddset(&blocked, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &blocked, &old);
	workers = calloc((size_t)nworkers, sizeof(*workers));
	if (workers == NULL)
		return 1;
	for (i = 0; i < nworkers; i++)
		if (pthread_create(&workers[i], NULL, dispatch_worker, &s) != 0) {
			fprintf(stderr, "oncegate-dispatch: cannot start worker %d\n", i);
			nworkers = i;
			atomic_store(&s.stopping, true);
			rc = 1;
			break;
		}
	pthread_sigmask(SIG_SETMASK, &old, NULL);

	{
		struct log_fields f = { .count = nworkers, .actor = s.owner,
			                .detail = s.env_enabled ? "AI_ACTIONS_ENABLED=true"
			                                        : "AI_ACTIONS_ENABLED is not true: "
			                                          "nothing will be sent" };

		log_event(LOG_LEVEL_NOTICE, "dispatch.started", &f);
	}
	dc = dispatch_config_get(&s);
	tick_db = db_new(dc->cfg.database, dc->cfg.statement_timeout_ms);
	dispatch_config_put(&s, dc);

	while (!got_term && rc == 0) {
		struct pollfd pfd = { -1, POLLIN, 0 };
		long long t;

		if (got_hup) {
			got_hup = 0;
			reload(&s, path);
		}
		dc = dispatch_config_get(&s);
		poll_ms = dc->cfg.dispatch_poll_ms;
		t = now_ms();
		if (listen_conn == NULL && t - last_listen_try >= 1000) {
			last_listen_try = t;
			listen_conn = listen_connect(dc->cfg.database);
			if (listen_conn != NULL)
				dispatch_wake(&s); /* what was enqueued while away */
		}
		dispatch_config_put(&s, dc);
		if (listen_conn != NULL)
			pfd.fd = PQsocket(listen_conn);
		if (poll(&pfd, pfd.fd >= 0 ? 1 : 0, poll_ms) > 0 && listen_conn != NULL) {
			PGnotify *n;
			bool woke = false;

			if (!PQconsumeInput(listen_conn)) {
				PQfinish(listen_conn);
				listen_conn = NULL;
			} else {
				while ((n = PQnotifies(listen_conn)) != NULL) {
					PQfreemem(n);
					woke = true;
				}
				if (woke)
					dispatch_wake(&s);
			}
		}
		if (listen_conn != NULL && PQstatus(listen_conn) != CONNECTION_OK) {
			PQfinish(listen_conn);
			listen_conn = NULL;
		}
		t = now_ms();
		if (t - last_tick >= poll_ms) {
			last_tick = t;
			/* effects due by time (retries, windows) need no NOTIFY */
			(void)dispatch_tick(&s, tick_db);
			flush_metrics(tick_db);
			dispatch_wake(&s);
		}
	}

	/* SIGTERM: stop claiming; workers finish their send (bounded by the
	 * target timeout) and give back the rest of their batch. */
	atomic_store(&s.stopping, true);
	dispatch_wake(&s);
	{
		struct timespec until;
		int grace;
		bool all = true;

		dc = dispatch_config_get(&s);
		grace = dc->cfg.dispatch_shutdown_seconds;
		dispatch_config_put(&s, dc);
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += grace;
		for (i = 0; i < nworkers; i++)
			if (pthread_timedjoin_np(workers[i], NULL, &until) != 0)
				all = false;
		if (!all) {
			/* A send still running past the deadline: its lease runs
			 * out and the sweep makes it unknown, never resent blindly.
			 * What the workers claimed and never started goes back. */
			struct log_fields f = { .reason = "shutdown deadline passed with a send in flight",
				                .hint = "the effect in flight becomes unknown when its "
				                        "lease expires" };
			int back = dispatch_release_unsent(&s, tick_db);

			f.count = back > 0 ? back : 0;
			flush_metrics(tick_db);
			log_event(LOG_LEVEL_WARNING, "dispatch.stopped", &f);
			log_close();
			_exit(0);
		}
	}
	flush_metrics(tick_db);
	log_event(LOG_LEVEL_NOTICE, "dispatch.stopped", NULL);
	if (listen_conn != NULL)
		PQfinish(listen_conn);
	db_free(tick_db);
	free(workers);
	dispatch_shared_destroy(&s);
	curl_global_cleanup();
	log_close();
	return rc;
}

/*
 * oncegate-dispatch — the outbox dispatcher, the only part of oncegate that
 * acts on the outside world. main() reads options and config, starts the
 * worker pool (pool.h), and then waits: for NOTIFY oncegate_outbox (an
 * effect was enqueued; listen.h), for the poll interval (the janitor's
 * housekeeping, and effects that became due without a notification;
 * janitor.h), and for signals.
 *
 * Any number of dispatchers may run, on any host: they share nothing but
 * the database, where every claim skips rows another one holds.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "classify.h"
#include "config.h"
#include "contract.h"
#include "dispatch.h"
#include "janitor.h"
#include "listen.h"
#include "log.h"
#include "pool.h"
#include "ready.h"
#include "schema_version.h"
#include "service.h"

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
	        "usage: oncegate-dispatch [-c FILE] [-n] [-h] [-V]\n"
	        "  -c FILE  configuration file (default: $ONCEGATE_CONF or the installed one)\n"
	        "  -n       check the configuration, print it (secrets masked) and exit\n"
	        "  -h       this help\n"
	        "  -V       print the version and exit (also --version)\n"
	        "Sends only while the environment has AI_ACTIONS_ENABLED=true AND the\n"
	        "database allows sends (oncegatectl sends resume; sends stop engages\n"
	        "the kill switch).\n"
	        "Signals: SIGTERM/SIGINT stop claiming, finish or release in-flight work\n"
	        "within dispatch_shutdown_seconds and exit; SIGHUP reopens the decision log\n"
	        "and reloads the configuration (targets, limits) and the contracts every\n"
	        "payload is checked against again before it is sent; the database\n"
	        "and dispatch_workers take a restart.\n"
	        "Under systemd: READY=1, RELOADING=1 on SIGHUP, WATCHDOG=1.\n"
	        "Without it (by hand, a container, a supervisor): runs in the foreground\n"
	        "and, started as root, as `user`; messages go to stderr.\n");
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

static long long
now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* A reload that did not take: the log line names the file and line. */
static void
reload_refused(const char *err)
{
	struct log_fields f = { .reason = err,
		                .hint = "the previous configuration and contracts stay in use; "
		                        "sends go on under them" };

	log_event(LOG_LEVEL_ERROR, "dispatch.reload_failed", &f);
	ready_loaded(false);
	service_ready("running; the last reload failed, the previous configuration stays in use");
}

static void
reload(struct dispatch_shared *s, const char *path)
{
	struct config cfg;
	struct dispatch_config *dc;
	struct contract_set *contracts;
	char err[512];

	service_reloading();
	if (log_reopen() != 0)
		fprintf(stderr, "oncegate-dispatch: cannot reopen the decision log\n");
	/* A configuration or a contract that does not load keeps what was
	 * loaded, contracts included: effects keep going out under the
	 * contracts they were checked against. */
	if (load_config(path, &cfg, err, sizeof(err)) != 0) {
		reload_refused(err);
		return;
	}
	contracts = contract_load_dir(cfg.contracts_dir, err, sizeof(err));
	if (contracts == NULL) {
		config_free(&cfg);
		reload_refused(err);
		return;
	}
	contract_set_free(contracts);
	log_set_level(log_level_parse(cfg.log_level));
	dc = dispatch_config_new(&cfg);
	if (dc == NULL) {
		config_free(&cfg);
		reload_refused("out of memory");
		return;
	}
	if (dc->contracts == NULL) {
		/* changed again between the two loads */
		snprintf(err, sizeof(err), "%s", dc->contracts_err);
		dispatch_config_put(s, dc);
		reload_refused(err);
		return;
	}
	dispatch_config_swap(s, dc);
	ready_loaded(true);
	log_event(LOG_LEVEL_NOTICE, "dispatch.reloaded", NULL);
	service_ready("running; reloaded");
}

/* Start-up after the configuration loaded: the user to run as, the
 * decision log, libcurl. 0, or the exit status (cfg freed). */
static int
start_up(struct config *cfg, const char *path)
{
	char err[512];
	int r;
	/* The classifier's rule names go into `reason` and must stay readable
	 * although some are as long as a key. */
	static const char *names[REASON__COUNT];

	/* Started as root (by hand, a supervisor): run as `user` from here. */
	if (config_drop_privileges(cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "oncegate-dispatch: %s\n", err);
		config_free(cfg);
		return 1;
	}
	if (geteuid() == 0)
		fprintf(stderr, "oncegate-dispatch: running as root: set `user` in %s\n", path);
	if (cfg->dispatch_log_file[0] != '\0') {
		free(cfg->log_file);
		cfg->log_file = strdup(cfg->dispatch_log_file); /* its own, under its own user */
	}
	if (cfg->log_file == NULL ||
	    log_open(cfg->log_file, log_level_parse(cfg->log_level), "oncegate-dispatch") != 0) {
		fprintf(stderr, "oncegate-dispatch: cannot open the decision log %s\n",
		        cfg->log_file != NULL ? cfg->log_file : "(out of memory)");
		config_free(cfg);
		return 1;
	}
	for (r = 0; r < REASON__COUNT; r++)
		names[r] = classify_reason_name((enum outcome_reason)r);
	log_keep_names(names, REASON__COUNT);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "oncegate-dispatch: libcurl did not initialise\n");
		config_free(cfg);
		return 1;
	}
	return 0;
}

static void
catch_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* Listen for NOTIFY, the poll interval and signals, until told to stop. */
static void
serve(struct dispatch_shared *s, struct janitor *jan, struct listen *lis, const char *path)
{
	struct dispatch_config *dc;
	long wd_ms = service_watchdog_ms();
	long long last_alive = now_ms();

	while (!got_term) {
		int poll_ms;

		if (got_hup) {
			got_hup = 0;
			reload(s, path);
		}
		dc = dispatch_config_get(s);
		poll_ms = dc->cfg.dispatch_poll_ms;
		/* wake in time to tell the watchdog the loop is alive */
		listen_wait(lis, s, dc->cfg.database,
		            wd_ms > 0 && wd_ms < poll_ms ? (int)wd_ms : poll_ms, now_ms());
		dispatch_config_put(s, dc);
		if (schema_version_serving(jan->db))
			janitor_tick(jan, s, poll_ms, now_ms());
		if (wd_ms > 0 && now_ms() - last_alive >= wd_ms) {
			service_alive();
			last_alive = now_ms();
		}
	}
}

/* SIGTERM: stop claiming; workers finish their send (bounded by the
 * target timeout) and give back the rest of their batch. Returns only
 * when they did. */
static void
shut_down(struct dispatch_shared *s, struct janitor *jan, struct pool *pool)
{
	struct dispatch_config *dc = dispatch_config_get(s);
	int grace = dc->cfg.dispatch_shutdown_seconds;

	dispatch_config_put(s, dc);
	if (!pool_stop(pool, s, grace)) {
		/* A send still running past the deadline: its lease runs out and
		 * the sweep makes it unknown, never resent blindly. What the
		 * workers claimed and never started goes back. */
		struct log_fields f = { .reason = "shutdown deadline passed with a send in flight",
			                .hint = "the effect in flight becomes unknown when its "
			                        "lease expires" };
		int back = dispatch_release_unsent(s, jan->db);

		f.count = back > 0 ? back : 0;
		janitor_flush_metrics(jan);
		log_event(LOG_LEVEL_WARNING, "dispatch.stopped", &f);
		log_close();
		_exit(0);
	}
	janitor_flush_metrics(jan);
	log_event(LOG_LEVEL_NOTICE, "dispatch.stopped", NULL);
}

int
main(int argc, char **argv)
{
	const char *path = NULL;
	bool check = false;
	struct config cfg;
	struct dispatch_config *dc;
	struct dispatch_shared s;
	struct janitor jan;
	struct listen lis = { NULL, 0 };
	struct pool pool;
	char err[512];
	int opt, rc = 0;

	if ((opt = config_options(argc, argv, usage, &path, &check)) >= 0)
		return opt;
	if (load_config(path, &cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "oncegate-dispatch: %s\n", err);
		return 1;
	}
	if (check) {
		config_dump(&cfg, stdout);
		config_free(&cfg);
		return 0;
	}
	if ((opt = start_up(&cfg, path)) != 0)
		return opt;
	dc = dispatch_config_new(&cfg);
	if (dc == NULL || dispatch_shared_init(&s, dc) != 0) {
		fprintf(stderr, "oncegate-dispatch: out of memory\n");
		return 1;
	}
	catch_signals();
	if (pool_start(&pool, &s, dc->cfg.dispatch_workers) != 0) {
		if (pool.workers == NULL)
			return 1;
		rc = 1;
	}
	{
		struct log_fields f = { .count = pool.n, .actor = s.owner,
			                .detail = s.env_enabled ? "AI_ACTIONS_ENABLED=true"
			                                        : "AI_ACTIONS_ENABLED is not true: "
			                                          "nothing will be sent" };

		log_event(LOG_LEVEL_NOTICE, "dispatch.started", &f);
	}
	dc = dispatch_config_get(&s);
	janitor_init(&jan, dc->cfg.database, dc->cfg.statement_timeout_ms);
	dispatch_config_put(&s, dc);
	/* The schema version, read now and after every reconnect: with
	 * another than this build's, nothing is sent or written. */
	schema_version_guard();
	if (!schema_version_serving(jan.db))
		schema_version_why(err, sizeof(err));
	service_ready(!schema_version_ok() ? err
	              : s.env_enabled      ? "dispatching"
	                                   : "running; AI_ACTIONS_ENABLED is not true");
	if (rc == 0)
		serve(&s, &jan, &lis, path);
	service_stopping();
	shut_down(&s, &jan, &pool);
	listen_close(&lis);
	janitor_free(&jan);
	pool_free(&pool);
	dispatch_shared_destroy(&s);
	curl_global_cleanup();
	log_close();
	return rc;
}

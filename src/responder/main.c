/*
 * oncegate-fcgi — the FastCGI responder: the workflow API, the approval
 * pages, /metrics, /healthz. main() only reads options and config, sets up
 * signals and the log, and runs the worker pool until SIGTERM.
 */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "service.h"
#include "contract.h"
#include "fcgi.h"
#include "log.h"
#include "metrics.h"
#include "page.h"
#include "ready.h"
#include "schema_version.h"

/* What SIGHUP replaces: the configuration requests read, the contracts,
 * the page templates. */
struct reloadable {
	struct config *cfg;
	struct contract_set *contracts;
	struct page_set *pages;
};

static void
reloadable_free(struct reloadable *r)
{
	if (r->cfg != NULL) {
		config_free(r->cfg);
		free(r->cfg);
	}
	contract_set_free(r->contracts);
	page_set_free(r->pages);
	memset(r, 0, sizeof(*r));
}

/* Loads the configuration at path, then the contracts and the page
 * templates it names; all or nothing. */
static int
load_shared(const char *path, struct reloadable *r, char *err, size_t errlen)
{
	memset(r, 0, sizeof(*r));
	r->cfg = malloc(sizeof(*r->cfg));
	if (r->cfg == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	config_defaults(r->cfg);
	if (config_load(path, r->cfg, err, errlen) != 0 ||
	    config_read_secrets(r->cfg, err, errlen) != 0 ||
	    (r->contracts = contract_load_dir(r->cfg->contracts_dir, err, errlen)) == NULL ||
	    contract_notify_check(r->contracts, r->cfg, err, errlen) != 0 ||
	    (r->pages = page_set_load(r->cfg->templates_dir, err, errlen)) == NULL) {
		reloadable_free(r);
		return -1;
	}
	return 0;
}

/* The settings read once at start (the socket, the pool, the body buffer,
 * the database connections): a reload keeps them and names the ones that
 * changed in the file, which take a restart. */
static void
keep_startup_settings(const struct config *start, struct config *now, char *changed,
                      size_t len)
{
	changed[0] = '\0';
#define CHANGED_S(n) if (strcmp(start->n, now->n) != 0) \
		snprintf(changed + strlen(changed), len - strlen(changed), " %s", #n)
#define KEEP_I(n) if (start->n != now->n) { \
		snprintf(changed + strlen(changed), len - strlen(changed), " %s", #n); \
		now->n = start->n; }
	CHANGED_S(listen);
	CHANGED_S(listen_owner);
	CHANGED_S(listen_group);
	CHANGED_S(listen_allow);
	CHANGED_S(database);
	CHANGED_S(pooled_database);
	CHANGED_S(log_file);
	KEEP_I(listen_mode);
	KEEP_I(listen_backlog);
	KEEP_I(threads);
	KEEP_I(max_body_bytes);
	KEEP_I(statement_timeout_ms);
	KEEP_I(shutdown_grace_seconds);
#undef CHANGED_S
#undef KEEP_I
}

/* SIGHUP: reopen the decision log, then load the configuration, the
 * contracts and the templates again and swap them in under the lock. A
 * broken one keeps the old set: the reload is refused loudly, never
 * half-applied. */
static void
reload(const char *path, const struct config *start, struct fcgi_shared *shared,
       struct reloadable *cur)
{
	struct reloadable next;
	char err[1024], changed[256];

	service_reloading();
	if (log_reopen() != 0)
		fprintf(stderr, "oncegate-fcgi: cannot reopen %s\n", start->log_file);
	log_event(LOG_LEVEL_INFO, "responder.log_reopened", NULL);
	if (load_shared(path, &next, err, sizeof(err)) != 0) {
		log_event(LOG_LEVEL_ERROR, "responder.reload_failed",
		          &(struct log_fields){ .detail = err,
		                                .hint = "the previous configuration and "
		                                        "contracts stay in use; GET /readyz "
		                                        "answers 503 until a reload succeeds" });
		ready_loaded(false);
		service_ready("running; the last reload failed");
		return;
	}
	keep_startup_settings(start, next.cfg, changed, sizeof(changed));
	log_set_level(log_level_parse(next.cfg->log_level));
	pthread_rwlock_wrlock(&shared->lock);
	shared->cfg = next.cfg;
	shared->contracts = next.contracts;
	shared->pages = next.pages;
	pthread_rwlock_unlock(&shared->lock);
	reloadable_free(cur);
	*cur = next;
	if (changed[0] != '\0')
		log_event(LOG_LEVEL_WARNING, "responder.restart_needed",
		          &(struct log_fields){ .detail = changed + 1,
		                                .hint = "these settings are read at start "
		                                        "only: restart to apply them" });
	log_event(LOG_LEVEL_INFO, "responder.reloaded",
	          &(struct log_fields){ .count = (long long)contract_count(cur->contracts) });
	ready_loaded(true);
	service_ready("running; reloaded");
}

/* The main thread's life while the pool serves: the supervisor's watchdog
 * kept alive, SIGHUP reloads; returns on SIGTERM or SIGINT. */
static void
wait_for_signals(const char *path, const struct config *start, struct fcgi_shared *shared,
                 struct reloadable *cur, const sigset_t *set)
{
	long wd_ms = service_watchdog_ms();
	struct timespec wd = { .tv_sec = wd_ms > 0 ? wd_ms / 1000 : 3600,
		               .tv_nsec = wd_ms > 0 ? (wd_ms % 1000) * 1000000L : 0 };
	int sig;

	for (;;) {
		sig = sigtimedwait(set, NULL, &wd);
		if (sig < 0) {
			/* the timeout: the main loop is alive */
			if (errno == EAGAIN && wd_ms > 0)
				service_alive();
			continue;
		}
		if (sig != SIGHUP)
			return;
		reload(path, start, shared, cur);
	}
}

static void
usage(FILE *out)
{
	fprintf(out,
	        "usage: oncegate-fcgi [-c FILE] [-n] [-h] [-V]\n"
	        "  -c FILE  configuration file (default: $ONCEGATE_CONF or the installed one)\n"
	        "  -n       check the configuration, print it (secrets masked) and exit\n"
	        "  -h       this help\n"
	        "  -V       print the version and exit (also --version)\n"
	        "Signals: SIGTERM/SIGINT finish in-flight requests and exit; SIGHUP\n"
	        "reopens the decision log and reloads the configuration (public_url,\n"
	        "csrf_secret, targets, leases, log_level, ...), the contracts and the\n"
	        "templates; the socket, threads, max_body_bytes and database take a restart.\n"
	        "Under systemd: socket activation (sd_listen_fds), READY=1, WATCHDOG=1.\n"
	        "Without it (by hand, a container, a supervisor): runs in the foreground,\n"
	        "binds `listen` itself (mode listen_mode, group listen_group) and, started\n"
	        "as root, then runs as `user`; messages go to stderr.\n");
}

int
main(int argc, char **argv)
{
	struct config cfg;
	struct fcgi_pool *pool;
	struct fcgi_shared shared = { .lock = PTHREAD_RWLOCK_INITIALIZER };
	struct reloadable cur = { 0 };
	const char *path = NULL;
	char err[1024];
	sigset_t set;
	bool check = false, inherited = false;
	int opt, fd, rc = EXIT_FAILURE;

	if ((opt = config_options(argc, argv, usage, &path, &check)) >= 0)
		return opt;
	/* A fixed threshold: blocks of 128 KiB and more are mapped on their
	 * own and unmapped when freed. glibc would otherwise raise it to the
	 * largest block freed so far (up to 32 MiB), and the big buffers of
	 * large requests would then stay in the arenas. */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	config_defaults(&cfg);
	if (config_load(path, &cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "oncegate-fcgi: %s\n", err);
		goto out;
	}
	if (load_shared(path, &cur, err, sizeof(err)) != 0) {
		fprintf(stderr, "oncegate-fcgi: %s\n", err);
		goto out;
	}
	shared.cfg = cur.cfg;
	shared.contracts = cur.contracts;
	shared.pages = cur.pages;
	ready_loaded(true);
	if (check) {
		config_dump(&cfg, stdout);
		fprintf(stdout, "\n# %zu contracts loaded from %s\n",
		        contract_count(shared.contracts), cfg.contracts_dir);
		fprintf(stderr, "oncegate-fcgi: configuration %s is valid\n", path);
		rc = EXIT_SUCCESS;
		goto out;
	}
	/* The main thread takes the signals; workers inherit this mask. */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	/* Started by hand or by a supervisor as root: bind the socket, then
	 * become `user` before anything else is opened or read. */
	fd = fcgi_open_socket(&cfg, &inherited, err, sizeof(err));
	if (fd < 0 || config_drop_privileges(&cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "oncegate-fcgi: %s\n", err);
		goto out;
	}
	if (geteuid() == 0)
		fprintf(stderr, "oncegate-fcgi: running as root: set `user` in %s\n", path);
	if (log_open(cfg.log_file, (enum log_level)log_level_parse(cfg.log_level),
	             "oncegate-fcgi") != 0) {
		fprintf(stderr, "oncegate-fcgi: cannot open the decision log %s\n", cfg.log_file);
		goto out;
	}
	/* Claim outcomes counted in memory reach the database from here
	 * (metrics.h), so every responder's /metrics reads the same totals. */
	if (metrics_flusher_start(cfg.database, cfg.statement_timeout_ms, err, sizeof(err)) != 0) {
		fprintf(stderr, "oncegate-fcgi: %s\n", err);
		goto out_log;
	}
	/* Each connection reads the schema version when it is made (the
	 * workers connect now): another than this build's, and only /healthz
	 * is answered. */
	schema_version_guard();
	pool = fcgi_pool_start(fd, &cfg, &shared, err, sizeof(err));
	if (pool == NULL) {
		fprintf(stderr, "oncegate-fcgi: %s\n", err);
		metrics_flusher_stop();
		goto out_log;
	}
	snprintf(err, sizeof(err), "listening on %s with %d threads",
	         fd == 3 && inherited ? "the socket systemd passed (fd 3)"
	         : inherited          ? "inherited fd 0"
	                              : cfg.listen,
	         cfg.threads);
	log_event(LOG_LEVEL_INFO, "responder.started", &(struct log_fields){ .detail = err });
	service_ready(err);
	wait_for_signals(path, &cfg, &shared, &cur, &set);
	service_stopping();
	log_event(LOG_LEVEL_INFO, "responder.stopping",
	          &(struct log_fields){ .detail = "finishing in-flight requests" });
	if (fcgi_pool_stop(pool, cfg.shutdown_grace_seconds) != 0)
		log_event(LOG_LEVEL_WARNING, "responder.stop_timeout",
		          &(struct log_fields){ .detail = "requests still running at the deadline" });
	metrics_flusher_stop(); /* the last counts of this process */
	if (!inherited && cfg.listen[0] != '\0' && !config_listen_is_tcp(cfg.listen))
		(void)unlink(cfg.listen);
	log_event(LOG_LEVEL_INFO, "responder.stopped", NULL);
	rc = EXIT_SUCCESS;
out_log:
	log_close();
out:
	reloadable_free(&cur);
	config_free(&cfg);
	return rc;
}

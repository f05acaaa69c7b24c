/*
 * oncegate-fcgi — the FastCGI responder: the workflow API, the approval
 * pages, /metrics, /healthz. main() only reads options and config, sets up
 * signals and the log, and runs the worker pool until SIGTERM.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "contract.h"
#include "fcgi.h"
#include "log.h"
#include "metrics.h"
#include "page.h"

/* Loads the contracts and the page templates the configuration names. */
static int
load_shared(const struct config *cfg, struct contract_set **contracts,
            struct page_set **pages, char *err, size_t errlen)
{
	*contracts = contract_load_dir(cfg->contracts_dir, err, errlen);
	if (*contracts == NULL)
		return -1;
	*pages = page_set_load(cfg->templates_dir, err, errlen);
	if (*pages == NULL) {
		contract_set_free(*contracts);
		*contracts = NULL;
		return -1;
	}
	return 0;
}

#define SWAP(a, b)                  \
	do {                        \
		__typeof__(a) t_ = (a); \
		(a) = (b);              \
		(b) = t_;               \
	} while (0)

static void
usage(FILE *out)
{
	fprintf(out,
	        "usage: oncegate-fcgi [-c FILE] [-n] [-h]\n"
	        "  -c FILE  configuration file (default: $ONCEGATE_CONF or the installed one)\n"
	        "  -n       check the configuration, print it (secrets masked) and exit\n"
	        "  -h       this help\n"
	        "Signals: SIGTERM/SIGINT finish in-flight requests and exit; SIGHUP "
	        "reopens the decision log.\n");
}

int
main(int argc, char **argv)
{
	struct config cfg;
	struct fcgi_pool *pool;
	struct fcgi_shared shared = { .lock = PTHREAD_RWLOCK_INITIALIZER };
	const char *path = NULL;
	char err[1024];
	sigset_t set;
	bool check = false;
	int opt, fd, sig, rc = EXIT_FAILURE;

	if ((opt = config_options(argc, argv, usage, &path, &check)) >= 0)
		return opt;
	config_defaults(&cfg);
	if (config_load(path, &cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "oncegate-fcgi: %s\n", err);
		goto out;
	}
	if (load_shared(&cfg, &shared.contracts, &shared.pages, err, sizeof(err)) != 0) {
		fprintf(stderr, "oncegate-fcgi: %s\n", err);
		goto out;
	}
	if (check) {
		config_dump(&cfg, stdout);
		fprintf(stdout, "\n# %zu contracts loaded from %s\n",
		        contract_count(shared.contracts), cfg.contracts_dir);
		fprintf(stderr, "oncegate-fcgi: configuration %s is valid\n", path);
		rc = EXIT_SUCCESS;
		goto out;
	}
	if (log_open(cfg.log_file, (enum log_level)log_level_parse(cfg.log_level),
	             "oncegate-fcgi") != 0) {
		fprintf(stderr, "oncegate-fcgi: cannot open the decision log %s\n", cfg.log_file);
		goto out;
	}

	/* The main thread takes the signals; workers inherit this mask. */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	fd = fcgi_open_socket(&cfg, err, sizeof(err));
	if (fd < 0) {
		fprintf(stderr, "oncegate-fcgi: %s\n", err);
		log_event(LOG_LEVEL_ERROR, "responder.start_failed",
		          &(struct log_fields){ .detail = err });
		goto out_log;
	}
	/* Claim outcomes counted in memory reach the database from here
	 * (metrics.h), so every responder's /metrics reads the same totals. */
	if (metrics_flusher_start(cfg.database, cfg.statement_timeout_ms, err, sizeof(err)) != 0) {
		fprintf(stderr, "oncegate-fcgi: %s\n", err);
		goto out_log;
	}
	pool = fcgi_pool_start(fd, &cfg, &shared, err, sizeof(err));
	if (pool == NULL) {
		fprintf(stderr, "oncegate-fcgi: %s\n", err);
		metrics_flusher_stop();
		goto out_log;
	}
	snprintf(err, sizeof(err), "listening on %s with %d threads",
	         cfg.listen[0] != '\0' ? cfg.listen : "inherited fd 0", cfg.threads);
	log_event(LOG_LEVEL_INFO, "responder.started", &(struct log_fields){ .detail = err });

	for (;;) {
		if (sigwait(&set, &sig) != 0)
			continue;
		if (sig == SIGHUP) {
			struct contract_set *contracts;
			struct page_set *pages;

			if (log_reopen() != 0)
				fprintf(stderr, "oncegate-fcgi: cannot reopen %s\n", cfg.log_file);
			log_event(LOG_LEVEL_INFO, "responder.log_reopened", NULL);
			/* A broken contract keeps the old set: the reload is refused
			 * loudly, never half-applied. */
			if (load_shared(&cfg, &contracts, &pages, err, sizeof(err)) != 0) {
				log_event(LOG_LEVEL_ERROR, "responder.reload_failed",
				          &(struct log_fields){ .detail = err,
				                                .hint = "the previous contracts stay in use" });
				continue;
			}
			pthread_rwlock_wrlock(&shared.lock);
			SWAP(contracts, shared.contracts);
			SWAP(pages, shared.pages);
			pthread_rwlock_unlock(&shared.lock);
			contract_set_free(contracts);
			page_set_free(pages);
			log_event(LOG_LEVEL_INFO, "responder.reloaded", NULL);
			continue;
		}
		break;
	}
	log_event(LOG_LEVEL_INFO, "responder.stopping",
	          &(struct log_fields){ .detail = "finishing in-flight requests" });
	if (fcgi_pool_stop(pool, cfg.shutdown_grace_seconds) != 0)
		log_event(LOG_LEVEL_WARNING, "responder.stop_timeout",
		          &(struct log_fields){ .detail = "requests still running at the deadline" });
	metrics_flusher_stop(); /* the last counts of this process */
	if (cfg.listen[0] != '\0' && !config_listen_is_tcp(cfg.listen))
		(void)unlink(cfg.listen);
	log_event(LOG_LEVEL_INFO, "responder.stopped", NULL);
	rc = EXIT_SUCCESS;
out_log:
	log_close();
out:
	contract_set_free(shared.contracts);
	page_set_free(shared.pages);
	config_free(&cfg);
	return rc;
}

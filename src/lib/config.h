/*
 * config.h — the configuration, loaded from one declarative table.
 *
 * File format: `name = value` lines; `#` starts a comment; values may be
 * double-quoted. Unknown names, values of the wrong type and values out of
 * range are errors naming the file and line. `oncegate-fcgi -n` and
 * `oncegatectl config check` run the same loader and exit.
 */
#ifndef OG_CONFIG_H
#define OG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct config {
	/* responder */
	char *listen;          /* unix socket path; empty: inherit fd 0 from the spawner */
	int listen_mode;       /* octal file mode of the socket */
	char *listen_owner;    /* user name or empty */
	char *listen_group;    /* group name or empty */
	int listen_backlog;
	int threads;
	int max_body_bytes;
	int retry_after_seconds;
	int shutdown_grace_seconds;
	/* database */
	char *database;        /* libpq conninfo; empty: PG* environment */
	int statement_timeout_ms;
	/* ledger */
	int lease_default_seconds;
	int lease_max_seconds;
	int lease_cap_seconds;
	/* files */
	char *log_file;        /* decision log; "-" or empty: stderr */
	char *log_level;
	char *sql_dir;         /* migrations */
};

/* Fills every member with its default. */
void config_defaults(struct config *c);
/* Loads path over the defaults. On error returns -1 and writes a message
 * naming the file and line into err. */
int config_load(const char *path, struct config *c, char *err, size_t errlen)
	__attribute__((warn_unused_result));
/* Cross-field checks (lease default <= max <= cap, …). */
int config_validate(const struct config *c, char *err, size_t errlen)
	__attribute__((warn_unused_result));
void config_free(struct config *c);
/* Prints `name = value` for every setting, secrets masked. */
void config_dump(const struct config *c, FILE *out);
/* The config file to use: explicit path, else $ONCEGATE_CONF, else the
 * installed default. */
const char *config_path(const char *explicit_path);

#endif

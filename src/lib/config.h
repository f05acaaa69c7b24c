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

#include "config_target.h"

#define CONFIG_TARGETS_MAX 64

struct config {
	/* responder */
	char *listen;          /* unix socket path, or IPv4:PORT; empty: inherit fd 0 from the spawner */
	int listen_mode;       /* octal file mode of the socket */
	char *listen_owner;    /* user name or empty */
	char *listen_group;    /* group name or empty */
	char *user;            /* started as root: the user to run as once the socket is bound */
	int listen_backlog;
	char *listen_allow;    /* TCP listen: the comma-separated IPv4 addresses of the web servers */
	int threads;
	int max_body_bytes;
	int retry_after_seconds;
	int shutdown_grace_seconds;
	/* database */
	char *database;        /* libpq conninfo; empty: PG* environment */
	char *pooled_database; /* through a transaction pooler; empty: none */
	int statement_timeout_ms;
	/* ledger */
	int lease_default_seconds;
	int lease_max_seconds;
	int lease_cap_seconds;
	/* days a finished run's key answers duplicate; 0: for as long as the
	 * run exists */
	int duplicate_window_days;
	/* files */
	char *log_file;        /* decision log; "-" or empty: stderr */
	char *dispatch_log_file; /* the dispatcher's, in a directory of its own; empty: log_file */
	char *log_level;
	char *sql_dir;         /* migrations */
	/* approval gate */
	char *contracts_dir;
	char *templates_dir;
	char *public_url;      /* base of approval links, e.g. https://gate.example.com */
	char *csrf_secret;     /* at least 32 characters */
	/* The responder's secrets in files of their own (0600 or 0640), so
	 * that a configuration the dispatcher also reads holds none:
	 * config_read_secrets() puts their contents into csrf_secret and
	 * proxy_secret. */
	char *csrf_secret_file;
	char *proxy_secret_file;
	char *proxy_secret;    /* what nginx sends as OG_PROXY_SECRET; not a setting */
	char *auth_groups_separator; /* one character between the groups in AUTH_GROUPS */
	char *callback_origins; /* space-separated origins a callback_url may use */
	/* dispatcher (oncegate-dispatch) */
	int dispatch_workers;  /* effects in flight at once, one thread each */
	int dispatch_batch;    /* effects a worker claims per round trip */
	int dispatch_lease_seconds;
	int dispatch_poll_ms;  /* wake-up without a NOTIFY */
	int dispatch_shutdown_seconds;
	int reconcile_interval_seconds;
	int retention_days;    /* dead letters keep their evidence this long */
	/* `[target NAME]` sections */
	struct config_target targets[CONFIG_TARGETS_MAX];
	int ntargets;
};

/* The target named name, or NULL. */
const struct config_target *config_target(const struct config *c, const char *name);
/* Is url's origin (scheme://host[:port]) one of callback_origins? */
bool config_callback_allowed(const struct config *c, const char *url);
/* When url's origin is not one of callback_origins: true, with what to
 * answer (the origin seen and the setting that admits it) in msg. */
bool config_callback_refusal(const struct config *c, const char *url, char *msg, size_t len);

/* Does listen name a TCP address (IPV4:PORT) rather than a socket path? */
bool config_listen_is_tcp(const char *listen);

/* Fills every member with its default. */
void config_defaults(struct config *c);
/* Loads path over the defaults. On error returns -1 and writes a message
 * naming the file and line into err. */
int config_load(const char *path, struct config *c, char *err, size_t errlen)
	__attribute__((warn_unused_result));
/* Cross-field checks (lease default <= max <= cap, …). */
int config_validate(const struct config *c, char *err, size_t errlen)
	__attribute__((warn_unused_result));
/* What `oncegatectl config check` adds to config_load's checks: a
 * configuration that loads but cannot work is refused (no public_url, no
 * csrf_secret, an unreadable contracts, templates or sql directory, a
 * log_file in a missing directory, a database or pooled_database libpq
 * cannot parse, a user, listen_owner or listen_group this host does not
 * know, an smtp target with credentials over smtp://, where TLS is not
 * required for them), with "path:LINE: " when the setting is in the
 * file. */
int config_check_ready(const struct config *c, const char *path, char *err, size_t errlen)
	__attribute__((warn_unused_result));
/* What `oncegatectl config check` warns about without refusing (a
 * public_url over plain http://): one "path:LINE: warning: ..." line each
 * on out. Returns the number of warnings. */
int config_check_warnings(const struct config *c, const char *path, FILE *out);
/* Started as root with user set: sets the groups, the group and the user
 * of user, for good; nothing otherwise. -1 with a message on failure. */
int config_drop_privileges(const struct config *c, char *err, size_t errlen)
	__attribute__((warn_unused_result));
/* The responder's part of loading: reads csrf_secret_file into
 * csrf_secret and proxy_secret_file into proxy_secret (when set). A file
 * must be a regular file that neither its group may write nor others
 * read (0600, 0640), holding one line of 32-512 characters of
 * [A-Za-z0-9+/=_.-]. The dispatcher never calls it: it cannot read them. */
int config_read_secrets(struct config *c, char *err, size_t errlen)
	__attribute__((warn_unused_result));
/* The line of path that sets name (in `[target TARGET]` when target is not
 * NULL; the section's header when name is not set in it); 0 when none. */
int config_line(const char *path, const char *target, const char *name);
void config_free(struct config *c);
/* Prints `name = value` for every setting, secrets masked. */
void config_dump(const struct config *c, FILE *out);
/* The config file to use: explicit path, else $ONCEGATE_CONF, else the
 * installed default. */
const char *config_path(const char *explicit_path);
/* The options oncegate-fcgi and oncegate-dispatch share: -c FILE, -n
 * (check the configuration and exit), -h and -V (--version). Returns -1 to
 * go on, with *path the file to load (config_path's choice) and *check
 * set; else the status for main to exit with, once usage() printed the
 * help or the version was printed: 0 after -h or -V, 2 after an unknown
 * option. */
int config_options(int argc, char **argv, void (*usage)(FILE *out), const char **path,
                   bool *check);

#endif

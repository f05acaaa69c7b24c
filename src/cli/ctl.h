/*
 * ctl.h — what every oncegatectl command shares: the loaded configuration,
 * the database connection (made on first use), --json, the operator and
 * the decision log. Each group of commands lives in its own file
 * (src/cli/ctl_*.c) and is listed in the command table of oncegatectl.c.
 *
 * Exit codes: 0 done, 1 refused or failed (the message says why), 2 usage
 * error, 3 database unavailable, 4 a bulk job stopped before its end.
 */
#ifndef OG_CTL_H
#define OG_CTL_H

#include <stdbool.h>

#include <jansson.h>

#include "config.h"
#include "db.h"
#include "log.h"

enum { EXIT_REFUSED = 1, EXIT_USAGE = 2, EXIT_UNAVAILABLE = 3, EXIT_STOPPED = 4 };

struct ctl {
	struct config cfg;
	const char *conf_path;
	struct db *db;
	int json;
	bool log_opened;
};

/* Connects on first use; -1 (message printed) when the database is away. */
int ctl_db(struct ctl *ctl) __attribute__((warn_unused_result));
/* The operator: `given` (--operator), else the login name. */
const char *operator_name(const char *given);
/* One decision-log line from oncegatectl (program "oncegatectl"); every
 * mutating command logs its action with actor (the operator) and reason. */
void ctl_log(struct ctl *ctl, enum log_level level, const char *event,
             const struct log_fields *f);
/* s for a terminal: control characters (C0, DEL, C1), the bidirectional
 * controls and bytes that are not UTF-8 written as \\x1b / \\u202e, so
 * run-provided text (a model name, a reason) cannot move the cursor, clear
 * the screen or reorder the line. malloc'd; NULL when memory runs out. */
char *ctl_terminal_text(const char *s);
/* Every string inside v (member values, array items) made terminal-safe
 * in place, for text output; --json output stays the JSON as stored. */
void ctl_terminal_safe(json_t *v);

/* Closes the log and the connection, frees the config. */
void ctl_close(struct ctl *ctl);

#endif

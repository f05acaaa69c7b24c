/*
 * ctl.h — what every oncegatectl command shares: the loaded configuration,
 * the database connection (made on first use), --json, the operator (the
 * database session's role), the usage and the decision log. Each group of
 * commands lives in its own file, named for what it does, and is listed in
 * the command table of oncegatectl.c:
 *   ctl_admin.c       migrate, client, config, sends (kill-switch)
 *   ctl_deadletter.c  deadletter list / show
 *   ctl_repair.c      reconcile, resume (one effect), reject, approval, cancel
 *   ctl_resume.c      bulk resume: a selection checked, then run as a job
 *   ctl_replay.c      replay (one key, or a job from a map file)
 *   ctl_audit.c       explain, report, purge
 *   ctl_export.c      export (the decisions, as JSON lines or CSV)
 *   ctl_job.c         the one runner of bulk jobs (resume and replay) and stop
 *
 * Exit codes: 0 done, 1 refused or failed (the message says why), 2 usage
 * error, 3 database unavailable, 4 a bulk job stopped before its end.
 */
#ifndef OG_CTL_H
#define OG_CTL_H

#include <getopt.h>
#include <stdbool.h>

#include <jansson.h>

#include "config.h"
#include "db.h"
#include "log.h"
#include "rc.h"

enum { EXIT_REFUSED = 1, EXIT_USAGE = 2, EXIT_UNAVAILABLE = 3, EXIT_STOPPED = 4 };

struct ctl {
	struct config cfg;
	const char *conf_path;
	struct db *db;
	int json;
	bool log_opened;
	const char *command;    /* the command running ("replay") */
	const char *usage;      /* its full usage, as --help prints it */
};

/* A command: its words after the command's name (argv[0]); the exit code. */
typedef int ctl_command_fn(struct ctl *ctl, int argc, char **argv);

/* What --help and a wrong call print after a command's usage. */
extern const char ctl_json_text[];
extern const char ctl_exit_text[];

/* The one exit code of a library result: OG_OK done, OG_UNAVAILABLE
 * EXIT_UNAVAILABLE, anything else a refusal (EXIT_REFUSED). */
int ctl_exit(enum og_rc rc);

/* Connects on first use; -1 (message printed) when the database is away. */
int ctl_db(struct ctl *ctl) __attribute__((warn_unused_result));
/* The operator: the database session's role once connected (ctl_db),
 * NULL before. The rows of operator actions, jobs, dead letters and the
 * kill switch take it in SQL (session_user); this is the same role for
 * what is written from here: the decision log's actor, the run timeline's
 * "operator:ROLE", a callback's subject. No name typed on the command line
 * stands for it. */
const char *ctl_operator(const struct ctl *ctl);
/* The command's full usage and the exit codes on stderr; EXIT_USAGE. */
int ctl_usage(const struct ctl *ctl);
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

/* A refusal: "oncegatectl: <what> refused: <message>" on stderr and a
 * `<what>.refused` warning in the decision log (actor, key, reason, the
 * message as detail); returns code. */
int ctl_refuse(struct ctl *ctl, const char *what, int code, const char *op, const char *key,
               const char *reason, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* v as one compact JSON line on stdout ("null" when it cannot be written):
 * the one document of a --json command. */
void ctl_print_json(json_t *v);
/* The same, and v released; EXIT_SUCCESS. */
int ctl_print_new(json_t *v);
/* Has the command printed its document? (When a --json command ends
 * without one, main prints {"error", "exit"}.) */
bool ctl_printed(void);
/* The string member name of o, or "-" when it has none. */
const char *ctl_jstr(const json_t *o, const char *name);
/* The one time grammar of every option that takes a time (TIME): a
 * duration back from now, N followed by s, m, h, d or w (90s, 15m, 2h, 7d,
 * 2w), or an RFC 3339 timestamp (2026-05-01T08:00:00Z, with a fraction or
 * an offset such as +02:00; a date alone is its midnight UTC). *ago: the
 * seconds from then to now, > 0. -1 with the message printed ("oncegatectl:
 * COMMAND: OPT ..."): the caller exits EXIT_USAGE. */
int ctl_time(const struct ctl *ctl, const char *opt, const char *s, long long *ago)
	__attribute__((warn_unused_result));
/* A positive count (--limit N), at most max; -1 when it is not one. */
int ctl_count(const char *s, int max);
/* An age in seconds as "3d4h", "5h12m", "42m", "17s". */
void ctl_age(long long s, char *buf, size_t n);

/* What a command's option does with its value. */
enum ctl_opt_kind {
	CTL_OPT_TEXT,   /* const char **: the text as given */
	CTL_OPT_FLAG,   /* bool *: true once given (no value) */
	CTL_OPT_TIME,   /* long long *: ctl_time's seconds back from now; a time
	                 * more than max days back is refused when max > 0 */
	CTL_OPT_COUNT,  /* int *: ctl_count, at most max */
	CTL_OPT_JOB,    /* long long *: a job number, > 0 */
};

/* One long option of a command: --name, its kind and where it goes; a
 * table ends with a NULL name. words (TEXT only): the values allowed,
 * separated by spaces; NULL for any. */
struct ctl_opt {
	const char *name;
	enum ctl_opt_kind kind;
	void *to;
	long long max;
	const char *words;
};

/* The words of a dead letter's error_class and of its state, as --class
 * and --state take them (the dead-letter owner stores and filters them). */
#define CTL_DEAD_LETTER_CLASSES "permanent exhausted unknown"
#define CTL_DEAD_LETTER_STATES "open resolved"

/* Is w one of the words (separated by spaces)? */
bool ctl_one_of(const char *words, const char *w);

/* Parses a command's options (argv[0] is the command's word; the
 * positional arguments are left at argv[optind..]). Each option is taken
 * in the order given, the last of a repeated one wins. A fault ends the
 * parse: an unknown option (getopt's message), a count or a word that is
 * not one prints the command's usage, a bad TIME or JOB its own message;
 * the result is EXIT_USAGE. quiet: getopt says nothing, the parse goes on
 * to the end after a fault, nothing is printed and the result is
 * EXIT_USAGE (the caller explains). 0 when every option was taken. */
int ctl_options(struct ctl *ctl, int argc, char **argv, const struct ctl_opt *opts, bool quiet)
	__attribute__((warn_unused_result));

/* ctl_options, then exactly `words` words left (the usage otherwise), then
 * the database (ctl_db): 0, or the exit code. */
int ctl_begin(struct ctl *ctl, int argc, char **argv, const struct ctl_opt *opts, int words)
	__attribute__((warn_unused_result));
/* "oncegatectl: WHAT: <the database's error>" on stderr; ctl_exit(rc). */
int ctl_failed(const struct ctl *ctl, const char *what, enum og_rc rc);

/* One column of a plain-text list: its title, the member shown ("-" when
 * absent) and its width (0 for the last). */
struct ctl_col {
	const char *title;
	const char *member;
	int width;
};

/* list printed: one JSON document with --json, else a row of titles and a
 * row per item; list released. */
void ctl_print_list(const struct ctl *ctl, json_t *list, const struct ctl_col *cols);

/* Closes the log and the connection, frees the config. */
void ctl_close(struct ctl *ctl);

#endif

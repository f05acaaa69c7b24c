/*
 * oncegatectl — the operator's command line. One command table; each
 * command parses its own arguments and calls into the library; the
 * commands live in files named for what they do (ctl.h lists them).
 *
 * Global options (-c, --json, --help, --version) may stand anywhere on the
 * line: they are taken out before the command sees its words.
 *
 * Exit codes: 0 done, 1 refused or failed (the message says why),
 * 2 usage error, 3 database unavailable, 4 a bulk job stopped before its
 * end.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "ctl.h"
#include "ctl_admin.h"
#include "ctl_audit.h"
#include "ctl_export.h"
#include "ctl_deadletter.h"
#include "ctl_job.h"
#include "ctl_repair.h"
#include "ctl_replay.h"
#include "ctl_resume.h"
#include "service.h"

struct command {
	const char *name;
	const char *help;       /* one line, for the list of commands */
	const char *usage;      /* the full usage, for --help and a wrong call */
	ctl_command_fn *run;
};

/* The options of any command that take a value: a global option among the
 * command's words is taken out, and never the value of one of these. */
static const char *const value_options[] = {
	"reason", "client", "new-key", "payload", "map", "rate", "resume", "since", "class",
	"target", "state", "limit", "older-than", "expect", "provider-id", "select", "job",
	"decide", "approver", "to",
};

#define TIME_TEXT                                                                          \
	"  TIME is a duration back from now (90s, 15m, 2h, 7d, 2w) or an RFC 3339 timestamp\n"  \
	"  (2026-05-01T08:00:00Z, 2026-05-01T10:00:00+02:00; a date alone is its midnight "     \
	"UTC).\n"

static const struct command commands[] = {
	{ "migrate", "apply the schema migrations that are missing",
	  "usage: oncegatectl migrate [--status]\n"
	  "  Applies the migrations of sql_dir that the database lacks, in order; --status\n"
	  "  only lists each one as applied or pending. --json: an array of\n"
	  "  {\"version\", \"state\"} (state applied, pending, or applied_now).\n",
	  ctl_admin_migrate },
	{ "client", "manage API clients (a new key is printed once)",
	  "usage: oncegatectl client add NAME --reason TEXT\n"
	  "       oncegatectl client revoke NAME --reason TEXT\n"
	  "       oncegatectl client list\n"
	  "       oncegatectl client grant|ungrant NAME --decide CONTRACT --approver ENTRY "
	  "--reason TEXT\n"
	  "       oncegatectl client grants\n"
	  "  add: a new API client; its key is printed once on stdout (--json: {\"client\",\n"
	  "  \"api_key\"}) and only its SHA-256 is stored. revoke: the key is refused from the\n"
	  "  next request. list: every client (--json: an array of {\"name\", \"created_at\",\n"
	  "  \"revoked_at\"}). NAME is 1-64 of A-Z a-z 0-9 . _ -, starting with a letter or "
	  "digit.\n"
	  "  grant: the decide scope: the client may record, through POST\n"
	  "  /v1/approvals/{id}/decisions, a decision for a person it vouches for, on\n"
	  "  challenges of CONTRACT issued to approver ENTRY (as the contract writes it:\n"
	  "  \"alice@example.com\", \"group:support\"; \"*\" for every entry). ungrant withdraws\n"
	  "  it. grants: every grant (--json: an array of {\"client\", \"scope\", \"contract\",\n"
	  "  \"approver\", \"created_at\"}).\n",
	  ctl_admin_client },
	{ "config", "check the configuration and print it, secrets masked",
	  "usage: oncegatectl config check\n"
	  "  Loads the configuration (-c FILE), the contracts and the templates, refuses one\n"
	  "  that cannot work (naming the line), and prints the settings, secrets masked.\n"
	  "  --json: {\"config\", \"valid\", \"settings\", \"targets\", \"contracts\"}.\n",
	  ctl_admin_config },
	{ "sends", "the kill switch: stop every send, resume, or show the state",
	  "usage: oncegatectl sends stop|resume --reason TEXT\n"
	  "       oncegatectl sends status\n"
	  "  stop: no dispatcher starts a send until resume (the kill switch, engaged).\n"
	  "  resume: dispatchers send again, those whose environment has\n"
	  "  AI_ACTIONS_ENABLED=true. status: the state, who set it and why, what waits.\n"
	  "  --json: {\"sends\": \"stopped\"|\"allowed\", \"was\", \"changed_by\"} /\n"
	  "  {\"sends\", \"changed_at\", \"changed_by\", \"reason\", \"blocked_sends\",\n"
	  "  \"due_effects\", \"environment_needs\"}.\n",
	  ctl_admin_sends },
	{ "kill-switch", "the same as sends: engage (stop sends), release, status",
	  "usage: oncegatectl kill-switch engage|release --reason TEXT\n"
	  "       oncegatectl kill-switch status\n"
	  "  engage = sends stop (nothing goes out); release = sends resume.\n"
	  "  The old `kill-switch on|off` is refused: `on` used to allow sends.\n",
	  ctl_admin_kill_switch },
	{ "replay", "a correction as a new run linked to the original",
	  "usage: oncegatectl replay KEY --new-key NEWKEY --reason TEXT [--payload FILE]\n"
	  "                          [--client NAME] [--dry-run] [--force]\n"
	  "       oncegatectl replay --map FILE --reason TEXT [--rate N/s] [--client NAME] "
	  "[--dry-run]\n"
	  "       oncegatectl replay --resume JOB --reason TEXT [--rate N/s]\n"
	  "  Refused while an effect of the original is pending. When a business effect of it\n"
	  "  was sent, is being sent or unknown, or was resumed, only one KEY with --force\n"
	  "  (and --reason): one event, at most one business effect. A replayed run is never\n"
	  "  resumed; its open dead letters are answered by the new run.\n"
	  "  --map FILE: \"OLDKEY NEWKEY\" a line (# comments), checked whole, then run as a job\n"
	  "  at --rate (default 5/s); `oncegatectl stop JOB` or Ctrl-C stops it (exit 4) and\n"
	  "  --resume JOB continues it. --json: one document when the command ends.\n",
	  ctl_replay },
	{ "stop", "stop a bulk replay or resume job before its next item",
	  "usage: oncegatectl stop JOB --reason TEXT\n"
	  "  The job stops before its next item; what is done stays done. It is continued\n"
	  "  with `replay --resume JOB` or `resume --job JOB`.\n",
	  ctl_job_stop },
	{ "explain", "processed? sent? who approved? which model? with the timeline",
	  "usage: oncegatectl explain KEY [--client NAME]\n"
	  "  Answers for one run: did we process this key, did we send, who approved, was it\n"
	  "  edited, which model drafted it, with its effects and timeline. --client names the\n"
	  "  client when several use the key. A key never claimed exits 1; with --json it\n"
	  "  still prints {\"key\", \"processed\": {\"answer\": \"no\"}}.\n",
	  ctl_audit_explain },
	{ "report", "the figures of a period (default: the last 7 days)",
	  "usage: oncegatectl report [--since TIME]\n"
	  "  Runs, approvals, effects, dead letters, replays and operator actions since TIME\n"
	  "  (default 7d), and the responders' lifetime counters.\n" TIME_TEXT,
	  ctl_audit_report },
	{ "export", "the decisions since a time, as JSON lines or CSV, for an audit",
	  "usage: oncegatectl export --format jsonl|csv [--since TIME]\n"
	  "  Every decision taken since TIME (default: all), oldest first: who decided, when,\n"
	  "  via the approval page, an API client (by name) or the contract's rules, the\n"
	  "  decision and its reason, and the hashes of the draft, the output, the correction,\n"
	  "  the contract and the effect. csv is RFC 4180 (a header line, CRLF); text is\n"
	  "  written as stored, in UTF-8. The count goes to stderr.\n" TIME_TEXT,
	  ctl_export },
	{ "purge", "remove payloads and outputs past retention; hashes and decisions stay",
	  "usage: oncegatectl purge [--older-than TIME] --reason TEXT [--dry-run]\n"
	  "  Removes the payloads, outputs, effect payloads and attempt excerpts of runs that\n"
	  "  finished before TIME (default: retention_days of the configuration), in whole\n"
	  "  days, and dead letters past their retention. Hashes, states and decisions stay.\n"
	  "  --dry-run counts and changes nothing (no --reason needed).\n" TIME_TEXT,
	  ctl_audit_purge },
	{ "deadletter", "what automatic recovery gave up on, with its evidence",
	  "usage: oncegatectl deadletter list [--since TIME] [--class permanent|exhausted|unknown]\n"
	  "                                 [--target NAME] [--state open|resolved] [--limit N]\n"
	  "       oncegatectl deadletter show ID\n"
	  "       oncegatectl deadletter assign ID --to PERSON --reason TEXT\n"
	  "  list: the letters, newest first (at most --limit, default 200). show: one letter\n"
	  "  (by its own id or its effect's) with its attempts and their evidence. A letter is\n"
	  "  open while its effect is still failed or unknown and waits for an operator.\n"
	  "  assign: a person owns the letter from now on (by default its client does).\n"
	  TIME_TEXT,
	  ctl_deadletter },
	{ "reconcile", "record what the provider really did with an unknown or failed effect",
	  "usage: oncegatectl reconcile EFFECT --delivered --provider-id ID --reason TEXT "
	  "[--expect STATE]\n"
	  "       oncegatectl reconcile EFFECT --not-delivered --reason TEXT [--expect STATE]\n"
	  "  Records what you found out at the provider about an unknown or failed effect.\n"
	  "  --delivered: the effect becomes completed with the provider's id (its run too,\n"
	  "  when it was the last one). --not-delivered: the effect becomes failed and known\n"
	  "  not delivered, so `resume` may send it again with the same key.\n"
	  "  --expect STATE: refuse unless the effect is still in the state you saw.\n",
	  ctl_repair_one },
	{ "resume", "send failed effects known not delivered again, same key (bulk: a job)",
	  "usage: oncegatectl resume EFFECT --reason TEXT [--expect STATE]\n"
	  "       oncegatectl resume --select FILE --reason TEXT [--rate N/s] [--dry-run]\n"
	  "       oncegatectl resume --dead-letters [--class C] [--target NAME] [--since TIME]\n"
	  "                          --reason TEXT [--rate N/s] [--dry-run]\n"
	  "       oncegatectl resume --job JOB --reason TEXT [--rate N/s]\n"
	  "  Sends a failed effect again, with the same provider key, only when it is known\n"
	  "  not delivered: reconciled --not-delivered, or no send since the last such finding\n"
	  "  may have reached the provider. The retry budget starts afresh.\n"
	  "  Bulk: FILE has one effect or dead-letter id a line (# comments; - is stdin);\n"
	  "  --dead-letters selects the open letters the filters match. --dry-run lists every\n"
	  "  item with its verdict and changes nothing; a real run refuses the whole selection\n"
	  "  if any item would be refused, then stores it as a job and goes at --rate (default\n"
	  "  5/s). `oncegatectl stop JOB` or Ctrl-C stops it (exit 4); --job JOB continues it.\n"
	  TIME_TEXT,
	  ctl_resume },
	{ "reject", "terminal: cancel the effect (or the run's unsent ones), fail the run",
	  "usage: oncegatectl reject EFFECT --reason TEXT [--expect STATE]\n"
	  "       oncegatectl reject KEY --reason TEXT [--client NAME]\n"
	  "  Terminal. EFFECT (pending or failed): cancelled, never sent after; its run\n"
	  "  failed_terminal. KEY: the run failed_terminal, its unsent effects cancelled, its\n"
	  "  pending approval links revoked, and a workflow waiting on the decision told\n"
	  "  `rejected`. --client names the client when several use the key. Refused while an\n"
	  "  effect is being sent or unknown (reconcile it first).\n",
	  ctl_repair_one },
	{ "approval", "list approval challenges; revoke or resend one approver's link",
	  "usage: oncegatectl approval list [--pending] [--limit N]\n"
	  "       oncegatectl approval revoke ID --reason TEXT\n"
	  "       oncegatectl approval resend ID --reason TEXT\n"
	  "  list: the challenges, newest first, with their state; --pending: only those\n"
	  "  waiting, longest waiting first (at most --limit, default 200).\n"
	  "  revoke: one approver's pending link stops working (its page answers 410); the\n"
	  "  run's other links stay. Revoking the last one ends the run as an expired approval\n"
	  "  does: failed_terminal, error_class approval_revoked, and a waiting workflow is\n"
	  "  told `expired`. resend: a pending challenge whose approvers are told (gate.notify)\n"
	  "  is told again; the new notice carries a new link and the previous one stops.\n",
	  ctl_repair_approval },
	{ "cancel", "cancel an act_with_window effect before its not_before; the run fails",
	  "usage: oncegatectl cancel EFFECT --reason TEXT\n"
	  "  Cancels an act_with_window effect that still waits for its not_before: it is never\n"
	  "  sent, and its run becomes failed_terminal (error_class cancelled), as when the\n"
	  "  owning client cancels with POST /v1/runs/{key}/cancel. After the window, or once\n"
	  "  the effect is being sent or was sent, it is refused (exit 1).\n",
	  ctl_repair_one },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static const char global_text[] =
	"global options, before or after the command:\n"
	"  -c FILE, --config FILE  the configuration (default: $ONCEGATE_CONF, then the\n"
	"                          installed oncegate.conf)\n"
	"  --json                  one JSON document on stdout, an array for a list\n"
	"  -h, --help              the usage (of the command, when one is named)\n"
	"  -V, --version           the version\n"
	"Every change needs --reason; the operator recorded is the database role the\n"
	"command connects as.\n";

static void
usage(FILE *out)
{
	size_t i;

	fprintf(out, "usage: oncegatectl [-c FILE] [--json] COMMAND [ARGS]\n"
	        "       oncegatectl COMMAND --help\n"
	        "       oncegatectl --version | --help\n\ncommands:\n");
	for (i = 0; i < NCOMMANDS; i++)
		fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].help);
	fprintf(out, "\n%s\n%s", global_text, ctl_exit_text);
}

/* The global options of the command line and the words left, in order. */
struct line {
	const char *conf;
	bool json, help, version;
	const char *bad;         /* an unknown option before the command */
	int argc;
	char **argv;             /* the command and its own words */
};

/* Does arg (--name or --name=value) name one of the value options? A
 * unique prefix counts as getopt takes it. */
static bool
takes_value(const char *arg)
{
	size_t n = strcspn(arg + 2, "="), i, hits = 0;

	if (arg[2 + n] == '=')
		return false;
	for (i = 0; i < sizeof(value_options) / sizeof(value_options[0]); i++) {
		if (strncmp(arg + 2, value_options[i], n) == 0) {
			if (value_options[i][n] == '\0')
				return true;
			hits++;
		}
	}
	return hits == 1;
}

/* Takes the global options out of argv wherever they are; -1 when memory
 * runs out. Words after "--" are the command's. */
static int
scan(int argc, char **argv, struct line *l)
{
	int i;
	bool rest = false;

	memset(l, 0, sizeof(*l));
	l->argv = calloc((size_t)argc + 1, sizeof(char *));
	if (l->argv == NULL)
		return -1;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (rest || a[0] != '-' || a[1] == '\0') {
			l->argv[l->argc++] = argv[i];
			continue;
		}
		if (strcmp(a, "--") == 0) {
			rest = true;
			l->argv[l->argc++] = argv[i];
		} else if (strcmp(a, "--json") == 0) {
			l->json = true;
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			l->help = true;
		} else if (strcmp(a, "--version") == 0 || strcmp(a, "-V") == 0) {
			l->version = true;
		} else if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) {
			if (i + 1 >= argc) {
				l->bad = a;
				return 0;
			}
			l->conf = argv[++i];
		} else if (strncmp(a, "--config=", 9) == 0) {
			l->conf = a + 9;
		} else if (strncmp(a, "-c", 2) == 0) {
			l->conf = a + 2;
		} else if (l->argc == 0) {
			l->bad = a;       /* no command yet: only global options */
			return 0;
		} else {
			l->argv[l->argc++] = argv[i];
			/* the value of a command option stays with it, whatever it says */
			if (a[1] == '-' && takes_value(a) && i + 1 < argc)
				l->argv[l->argc++] = argv[++i];
		}
	}
	return 0;
}

int
main(int argc, char **argv)
{
	struct ctl ctl;
	struct line l;
	char err[1024];
	size_t i = NCOMMANDS;
	int rc = EXIT_USAGE;

	memset(&ctl, 0, sizeof(ctl));
	if (scan(argc, argv, &l) != 0) {
		fprintf(stderr, "oncegatectl: out of memory\n");
		return EXIT_REFUSED;
	}
	if (l.bad != NULL) {
		fprintf(stderr, "oncegatectl: unknown or incomplete option \"%s\"\n", l.bad);
		usage(stderr);
		goto out;
	}
	if (l.version) {
		service_version("oncegatectl");
		rc = EXIT_SUCCESS;
		goto out;
	}
	if (l.argc > 0)
		for (i = 0; i < NCOMMANDS; i++)
			if (strcmp(l.argv[0], commands[i].name) == 0)
				break;
	if (l.argc > 0 && i == NCOMMANDS) {
		fprintf(stderr, "oncegatectl: unknown command \"%s\"\n", l.argv[0]);
		usage(stderr);
		goto out;
	}
	if (l.help) {
		if (i < NCOMMANDS)
			printf("%s%s%s", commands[i].usage, ctl_json_text, ctl_exit_text);
		else
			usage(stdout);
		rc = EXIT_SUCCESS;
		goto out;
	}
	if (l.argc == 0) {
		usage(stderr);
		goto out;
	}
	ctl.json = l.json;
	ctl.command = commands[i].name;
	ctl.usage = commands[i].usage;
	ctl.conf_path = config_path(l.conf);
	config_defaults(&ctl.cfg);
	if (config_load(ctl.conf_path, &ctl.cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "oncegatectl: %s\n", err);
		rc = EXIT_REFUSED;
		goto out;
	}
	rc = commands[i].run(&ctl, l.argc, l.argv);
out:
	/* --json: one document whatever happened; the message is on stderr */
	if (l.json && !l.help && !l.version && rc != EXIT_SUCCESS && !ctl_printed())
		ctl_print_new(json_pack("{s:s, s:i}", "error",
		                        rc == EXIT_USAGE         ? "usage"
		                        : rc == EXIT_UNAVAILABLE ? "database_unavailable"
		                        : rc == EXIT_STOPPED     ? "stopped"
		                                                 : "refused",
		                        "exit", rc));
	ctl_close(&ctl);
	free(l.argv);
	return rc;
}

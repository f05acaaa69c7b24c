/*
 * oncegatectl — the operator's command line. One command table; each
 * command parses its own arguments and calls into the library; the
 * commands live in files named for what they do (ctl.h lists them).
 *
 * Exit codes: 0 done, 1 refused or failed (the message says why),
 * 2 usage error, 3 database unavailable.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "ctl.h"
#include "ctl_admin.h"
#include "ctl_audit.h"
#include "ctl_deadletter.h"
#include "ctl_job.h"
#include "ctl_repair.h"
#include "ctl_replay.h"
#include "service.h"

struct command {
	const char *name;
	const char *args;
	const char *help;
	int (*run)(struct ctl *ctl, int argc, char **argv);
};

static const struct command commands[] = {
	{ "migrate", "[--status]", "apply the schema migrations that are missing",
	  ctl_admin_migrate },
	{ "client", "add|revoke NAME --reason TEXT [--operator NAME] | list",
	  "manage API clients (a new key is printed once)", ctl_admin_client },
	{ "config", "check", "load and print the configuration, secrets masked",
	  ctl_admin_config },
	{ "kill-switch", "on|off --reason TEXT | status",
	  "the database half of the kill switch (sends need it ON)", ctl_admin_kill_switch },
	{ "replay",
	  "KEY --new-key NEWKEY --reason TEXT [--payload FILE] [--force] | --map FILE | --resume JOB",
	  "a correction as a new run linked to the original", ctl_replay },
	{ "stop", "JOB --reason TEXT", "stop a bulk replay or resume job before its next item",
	  ctl_job_stop },
	{ "explain", "KEY [--client NAME]",
	  "processed? sent? who approved? which model? with the timeline", ctl_audit_explain },
	{ "report", "[--since 7d]", "the weekly figures", ctl_audit_report },
	{ "purge", "--older-than DAYS --reason TEXT [--dry-run]",
	  "remove payloads and outputs past retention; hashes and decisions stay",
	  ctl_audit_purge },
	{ "deadletter", "list [--since D] [--class C] [--target T] [--state S] | show ID",
	  "what automatic recovery gave up on, with its evidence", ctl_deadletter },
	{ "reconcile", "EFFECT --delivered --provider-id ID | --not-delivered --reason TEXT",
	  "record what the provider really did with an unknown or failed effect",
	  ctl_repair_reconcile },
	{ "resume", "EFFECT | --select FILE | --dead-letters | --job JOB --reason TEXT",
	  "send failed effects known not delivered again, same key (bulk: a job)",
	  ctl_repair_resume },
	{ "reject", "EFFECT|KEY --reason TEXT [--client NAME]",
	  "terminal: cancel the effect (or the run's unsent ones), fail the run",
	  ctl_repair_reject },
	{ "approval", "revoke ID --reason TEXT | list [--pending]",
	  "revoke one approver's link; list the challenges waiting", ctl_repair_approval },
	{ "cancel", "EFFECT --reason TEXT",
	  "cancel an act_with_window effect before its not_before; the run fails",
	  ctl_repair_cancel },
};

static void
usage(FILE *out)
{
	size_t i;

	fprintf(out, "usage: oncegatectl [-c FILE] [--json] COMMAND [ARGS]\n"
	        "       oncegatectl --version | --help\n\ncommands:\n");
	for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(out, "  %-11s %-32s %s\n", commands[i].name, commands[i].args,
		        commands[i].help);
	fprintf(out, "\nexit codes: 0 done, 1 refused or failed, 2 usage, 3 database "
	        "unavailable\n");
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct ctl ctl;
	char err[1024];
	size_t i;
	int opt, rc = EXIT_USAGE;

	memset(&ctl, 0, sizeof(ctl));
	/* Options stop at the command: its own arguments are its business. */
	while ((opt = getopt_long(argc, argv, "+c:hV", opts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			ctl.conf_path = optarg;
			break;
		case 'j':
			ctl.json = 1;
			break;
		case 'h':
			usage(stdout);
			return EXIT_SUCCESS;
		case 'V':
			service_version("oncegatectl");
			return EXIT_SUCCESS;
		default:
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	ctl.conf_path = config_path(ctl.conf_path);
	config_defaults(&ctl.cfg);
	if (config_load(ctl.conf_path, &ctl.cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "oncegatectl: %s\n", err);
		rc = EXIT_REFUSED;
		goto out;
	}
	for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(argv[optind], commands[i].name) == 0)
			break;
	if (i == sizeof(commands) / sizeof(commands[0])) {
		fprintf(stderr, "oncegatectl: unknown command \"%s\"\n", argv[optind]);
		usage(stderr);
		goto out;
	}
	if (argc - optind > 1 && (strcmp(argv[optind + 1], "--help") == 0 ||
	                          strcmp(argv[optind + 1], "-h") == 0)) {
		printf("usage: oncegatectl %s %s\n  %s\n", commands[i].name, commands[i].args,
		       commands[i].help);
		rc = EXIT_SUCCESS;
		goto out;
	}
	rc = commands[i].run(&ctl, argc - optind, argv + optind);
out:
	ctl_close(&ctl);
	return rc;
}

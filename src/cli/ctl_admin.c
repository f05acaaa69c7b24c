/*
 * ctl_admin.c — setting oncegate up and switching it: `migrate`, `client`
 * (API keys), `config check` and `kill-switch`. A change needs --reason and
 * commits with its operator_actions row; the decision log names the actor.
 *
 * The kill-switch row is read and written through its owner (control.c).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clients.h"
#include "config.h"
#include "contract.h"
#include "control.h"
#include "ctl_admin.h"
#include "db.h"
#include "digest.h"
#include "log.h"
#include "migrate.h"
#include "oplog.h"
#include "page.h"

/* The message and exit code of a clients result; a bad name is a usage
 * error. */
static int
client_exit(enum og_rc rc, const char *what, const char *name, struct ctl *ctl)
{
	switch (rc) {
	case OG_OK:
		return EXIT_SUCCESS;
	case OG_EXISTS:
		fprintf(stderr, "oncegatectl: %s: a client named \"%s\" exists already\n", what,
		        name);
		return EXIT_REFUSED;
	case OG_NOT_FOUND:
		fprintf(stderr, "oncegatectl: %s: no client named \"%s\"\n", what, name);
		return EXIT_REFUSED;
	case OG_BAD_NAME:
		fprintf(stderr, "oncegatectl: %s: a client name is 1-64 of A-Z a-z 0-9 . _ -, "
		        "starting with a letter or digit\n", what);
		return EXIT_USAGE;
	case OG_UNAVAILABLE:
		fprintf(stderr, "oncegatectl: %s: database unavailable: %s\n", what,
		        db_error(ctl->db));
		return EXIT_UNAVAILABLE;
	default:
		fprintf(stderr, "oncegatectl: %s: %s\n", what, db_error(ctl->db));
		return ctl_exit(rc);
	}
}

int
ctl_admin_migrate(struct ctl *ctl, int argc, char **argv)
{
	char err[1024];
	int n, status = argc > 1 && strcmp(argv[1], "--status") == 0;

	if (argc > 1 + status) {
		fprintf(stderr, "usage: oncegatectl migrate [--status]\n");
		return EXIT_USAGE;
	}
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	n = status ? migrate_status(ctl->db, ctl->cfg.sql_dir, stdout, err, sizeof(err))
	           : migrate_apply(ctl->db, ctl->cfg.sql_dir, stdout, err, sizeof(err));
	if (n < 0) {
		fprintf(stderr, "oncegatectl: migrate: %s\n", err);
		return EXIT_REFUSED;
	}
	if (!status)
		fprintf(stderr, "oncegatectl: %d migration%s applied; schema is current\n", n,
		        n == 1 ? "" : "s");
	else
		fprintf(stderr, "oncegatectl: %d pending\n", n);
	return EXIT_SUCCESS;
}

/* The operator_actions row of a change made in the open transaction, with
 * its client (id; 0 for none); 0 when written. */
static int
record(struct ctl *ctl, const char *op, const char *action, const char *reason,
       long long client_id, json_t *details)
{
	char cid[24];
	char *text = details != NULL ? json_dumps(details, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	struct oplog_action a = { .action = action, .reason = reason,
		                  .client_id = client_id > 0 ? cid : NULL, .details = text };
	enum db_rc rc;

	snprintf(cid, sizeof(cid), "%lld", client_id);
	rc = oplog_record(ctl->db, &a, NULL);
	free(text);
	json_decref(details);
	return rc == DB_OK ? 0 : -1;
}

/* --reason TEXT (required) and --operator NAME of a command that changes
 * something; argv[optind..] are the words left. -1 on a usage error. */
static int
change_opts(int argc, char **argv, const char **reason, const char **op)
{
	static const struct option opts[] = {
		{ "reason", required_argument, NULL, 'r' },
		{ "operator", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	int opt;

	*reason = *op = NULL;
	optind = 0; /* glibc: 0 re-initialises getopt for the command's own arguments */
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (opt == 'r')
			*reason = optarg;
		else if (opt == 'o')
			*op = optarg;
		else
			return -1;
	}
	return 0;
}

/* --reason is required for every change, within operator_actions' limits;
 * true (message printed) when it is missing or too long. */
static bool
bad_reason(const char *what, const char *reason, const char *op)
{
	if (reason == NULL || *reason == '\0') {
		fprintf(stderr, "oncegatectl: %s needs --reason TEXT: say why, it is kept with the "
		        "change\n", what);
		return true;
	}
	if (strlen(reason) > OPLOG_REASON_MAX || (op != NULL && strlen(op) > OPLOG_OPERATOR_MAX)) {
		fprintf(stderr, "oncegatectl: %s: --reason is at most %d characters, --operator "
		        "at most %d\n", what, OPLOG_REASON_MAX, OPLOG_OPERATOR_MAX);
		return true;
	}
	return false;
}

int
ctl_admin_client(struct ctl *ctl, int argc, char **argv)
{
	char key[CLIENTS_KEY_LEN];
	const char *reason, *op, *verb, *name;
	struct log_fields f = { 0 };
	long long id = 0;
	enum og_rc rc;
	bool add;
	int ex;

	if (argc == 2 && strcmp(argv[1], "list") == 0) {
		if (ctl_db(ctl) != 0)
			return EXIT_UNAVAILABLE;
		return client_exit(clients_list(ctl->db, stdout, ctl->json), "client list", "", ctl);
	}
	if (change_opts(argc, argv, &reason, &op) != 0 || optind != argc - 2 ||
	    (strcmp(argv[optind], "add") != 0 && strcmp(argv[optind], "revoke") != 0))
		goto usage;
	verb = argv[optind];
	name = argv[optind + 1];
	add = strcmp(verb, "add") == 0;
	/* Who may call the API is a change like any other: it says why. */
	if (bad_reason(add ? "client add" : "client revoke", reason, op))
		return EXIT_USAGE;
	if (!clients_name_valid(name))
		return client_exit(OG_BAD_NAME, add ? "client add" : "client revoke", name, ctl);
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	op = ctl_operator(op);
	if (db_begin(ctl->db) != DB_OK)
		return client_exit(OG_UNAVAILABLE, add ? "client add" : "client revoke", name, ctl);
	rc = add ? clients_add(ctl->db, name, key, &id) : clients_revoke(ctl->db, name, &id);
	if (rc == OG_OK &&
	    (record(ctl, op, add ? "client.add" : "client.revoke", reason, id,
	            json_pack("{s:s}", "client", name)) != 0 ||
	     db_commit(ctl->db) != DB_OK))
		rc = OG_ERROR;
	if (rc != OG_OK) {
		db_rollback(ctl->db);
		if (add)
			digest_wipe(key, sizeof(key));
	}
	ex = client_exit(rc, add ? "client add" : "client revoke", name, ctl);
	if (ex != EXIT_SUCCESS)
		return ex;
	f.client = name;
	f.actor = op;
	f.reason = reason;
	ctl_log(ctl, LOG_LEVEL_NOTICE, add ? "client.added" : "client.revoked", &f);
	if (!add) {
		fprintf(stderr, "oncegatectl: client \"%s\" revoked; its key is refused "
		        "from the next request\n", name);
		return EXIT_SUCCESS;
	}
	/* The key alone on stdout, for scripts; the warning on stderr. */
	printf("%s\n", key);
	fflush(stdout);
	fprintf(stderr, "oncegatectl: client \"%s\" added. This key is shown once and "
	        "only its SHA-256 is stored.\n", name);
	digest_wipe(key, sizeof(key));
	return EXIT_SUCCESS;
usage:
	fprintf(stderr, "usage: oncegatectl client add|revoke NAME --reason TEXT "
	        "[--operator NAME] | list\n");
	return EXIT_USAGE;
}

int
ctl_admin_config(struct ctl *ctl, int argc, char **argv)
{
	if (argc != 2 || strcmp(argv[1], "check") != 0) {
		fprintf(stderr, "usage: oncegatectl config check\n");
		return EXIT_USAGE;
	}
	struct contract_set *contracts;
	struct page_set *pages;
	char err[1024];

	/* Loading checked the syntax, the ranges and the targets; a config
	 * that loads may still be unable to work. */
	if (config_check_ready(&ctl->cfg, ctl->conf_path, err, sizeof(err)) != 0) {
		fprintf(stderr, "oncegatectl: %s\n", err);
		return EXIT_REFUSED;
	}
	contracts = contract_load_dir(ctl->cfg.contracts_dir, err, sizeof(err));
	if (contracts == NULL) {
		fprintf(stderr, "oncegatectl: %s:%d: contracts_dir: %s\n", ctl->conf_path,
		        config_line(ctl->conf_path, NULL, "contracts_dir"), err);
		return EXIT_REFUSED;
	}
	if (contract_notify_check(contracts, &ctl->cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "oncegatectl: %s: %s\n", ctl->cfg.contracts_dir, err);
		contract_set_free(contracts);
		return EXIT_REFUSED;
	}
	pages = page_set_load(ctl->cfg.templates_dir, err, sizeof(err));
	if (pages == NULL) {
		fprintf(stderr, "oncegatectl: %s:%d: templates_dir: %s\n", ctl->conf_path,
		        config_line(ctl->conf_path, NULL, "templates_dir"), err);
		contract_set_free(contracts);
		return EXIT_REFUSED;
	}
	config_dump(&ctl->cfg, stdout);
	printf("\n# %zu contracts loaded from %s\n", contract_count(contracts),
	       ctl->cfg.contracts_dir);
	contract_set_free(contracts);
	page_set_free(pages);
	fprintf(stderr, "oncegatectl: configuration %s is valid\n", ctl->conf_path);
	return EXIT_SUCCESS;
}

int
ctl_admin_kill_switch(struct ctl *ctl, int argc, char **argv)
{
	const char *reason = NULL, *op = NULL, *what;
	PGresult *res = NULL;

	if (change_opts(argc, argv, &reason, &op) != 0 || optind != argc - 1)
		goto usage;
	what = argv[optind];
	if (strcmp(what, "status") == 0) {
		if (ctl_db(ctl) != 0)
			return EXIT_UNAVAILABLE;
		if (control_status(ctl->db, &res) != DB_OK || PQntuples(res) != 1) {
			fprintf(stderr, "oncegatectl: kill-switch status: %s\n", db_error(ctl->db));
			PQclear(res);
			return EXIT_REFUSED;
		}
		if (ctl->json) {
			printf("{\"database_flag\":%s,\"changed_at\":\"%s\",\"blocked_sends\":%s,"
			       "\"due_effects\":%s,\"environment_needs\":\"AI_ACTIONS_ENABLED=true\"}\n",
			       db_get(res, 0, "actions_enabled")[0] == 't' ? "true" : "false",
			       db_get(res, 0, "changed_at"), db_get(res, 0, "blocked_sends"),
			       db_get(res, 0, "due"));
		} else {
			const char *by = db_get(res, 0, "changed_by"), *why = db_get(res, 0, "reason");

			printf("database flag   %s (since %s, by %s: %s)\n",
			       db_get(res, 0, "actions_enabled")[0] == 't' ? "ON" : "OFF",
			       db_get(res, 0, "changed_at"), by != NULL ? by : "-",
			       why != NULL ? why : "-");
			printf("effects due     %s\n", db_get(res, 0, "due"));
			printf("blocked sends   %s (refused by the switch right before sending)\n",
			       db_get(res, 0, "blocked_sends"));
			printf("A dispatcher sends only while this flag is ON and its own environment "
			       "has AI_ACTIONS_ENABLED=true.\n");
		}
		PQclear(res);
		return EXIT_SUCCESS;
	}
	if (strcmp(what, "on") != 0 && strcmp(what, "off") != 0)
		goto usage;
	if (bad_reason(strcmp(what, "on") == 0 ? "kill-switch on" : "kill-switch off", reason, op))
		return EXIT_USAGE;
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	{
		const char *p[3] = { strcmp(what, "on") == 0 ? "true" : "false", ctl_operator(op),
			             reason };
		struct log_fields f = { .actor = p[1], .reason = reason,
			                .state_to = strcmp(what, "on") == 0 ? "on" : "off" };

		bool was;

		/* the change and its operator_actions row commit together */
		if (db_begin(ctl->db) != DB_OK ||
		    control_set(ctl->db, p[0][0] == 't', reason, &was) != DB_OK) {
			fprintf(stderr, "oncegatectl: kill-switch %s: %s\n", what, db_error(ctl->db));
			db_rollback(ctl->db);
			return EXIT_REFUSED;
		}
		if (record(ctl, p[1], strcmp(what, "on") == 0 ? "kill_switch.on" : "kill_switch.off",
		           reason, 0, json_pack("{s:b, s:b}", "was", was, "now", p[0][0] == 't')) != 0 ||
		    db_commit(ctl->db) != DB_OK) {
			fprintf(stderr, "oncegatectl: kill-switch %s: %s\n", what, db_error(ctl->db));
			db_rollback(ctl->db);
			return EXIT_REFUSED;
		}
		ctl_log(ctl, LOG_LEVEL_NOTICE, "kill_switch.changed", &f);
		fprintf(stderr, "oncegatectl: kill switch database flag %s (by %s); dispatchers "
		        "also need AI_ACTIONS_ENABLED=true\n", strcmp(what, "on") == 0 ? "ON" : "OFF",
		        p[1]);
	}
	return EXIT_SUCCESS;
usage:
	fprintf(stderr, "usage: oncegatectl kill-switch on|off --reason TEXT [--operator NAME] "
	        "| status\n");
	return EXIT_USAGE;
}

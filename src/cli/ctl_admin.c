/*
 * ctl_admin.c — setting oncegate up and switching it: `migrate`, `client`
 * (API keys), `config check` and `sends` (the kill switch). A change needs --reason and
 * commits with its operator_actions row; the decision log names the actor.
 *
 * The kill-switch row is read and written through its owner (control.c).
 */
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
		return ctl_failed(ctl, what, rc);
	}
}

/* The lines "applied  VERSION" / "pending  VERSION" migrate writes, as an
 * array of {version, state}; applied_now for those this run applied. */
static json_t *
migrations_json(const char *text, bool applying)
{
	json_t *list = json_array();
	const char *p = text;

	while (list != NULL && p != NULL && *p != '\0') {
		const char *nl = strchr(p, '\n'), *v;
		size_t n = nl != NULL ? (size_t)(nl - p) : strlen(p);
		bool applied = strncmp(p, MIGRATE_APPLIED, 7) == 0;

		for (v = p + 7; v < p + n && *v == ' '; v++)
			;
		if (n > 7 && (applied || strncmp(p, MIGRATE_PENDING, 7) == 0))
			json_array_append_new(list, json_pack("{s:s%, s:s}", "version", v,
			                                      (size_t)(p + n - v), "state",
			                                      !applied   ? MIGRATE_PENDING
			                                      : applying ? "applied_now"
			                                                 : MIGRATE_APPLIED));
		p = nl != NULL ? nl + 1 : NULL;
	}
	return list;
}

int
ctl_admin_migrate(struct ctl *ctl, int argc, char **argv)
{
	char err[1024], *text = NULL;
	size_t len = 0;
	FILE *out = stdout;
	bool status = false;
	const struct ctl_opt opts[] = {
		{ "status", CTL_OPT_FLAG, &status, 0, NULL },
		{ NULL, 0, NULL, 0, NULL },
	};
	int n;

	if ((n = ctl_begin(ctl, argc, argv, opts, 0)) != 0)
		return n;
	if (ctl->json && (out = open_memstream(&text, &len)) == NULL) {
		fprintf(stderr, "oncegatectl: migrate: out of memory\n");
		return EXIT_REFUSED;
	}
	n = status ? migrate_status(ctl->db, ctl->cfg.sql_dir, out, err, sizeof(err))
	           : migrate_apply(ctl->db, ctl->cfg.sql_dir, out, err, sizeof(err));
	if (ctl->json) {
		fclose(out);
		if (n >= 0) {
			json_t *list = migrations_json(text, !status);

			ctl_print_json(list);
			json_decref(list);
		}
		free(text);
	}
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
 * its client (id; 0 for none); 0 when written. by gets the operator the row
 * names: the session's role. */
static int
record(struct ctl *ctl, const char *action, const char *reason, long long client_id,
       json_t *details, char by[OPLOG_ROLE_LEN])
{
	char cid[24];
	char *text = details != NULL ? json_dumps(details, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	struct oplog_action a = { .action = action, .reason = reason,
		                  .client_id = client_id > 0 ? cid : NULL, .details = text };
	enum db_rc rc;

	snprintf(cid, sizeof(cid), "%lld", client_id);
	rc = oplog_record_by(ctl->db, &a, NULL, by, OPLOG_ROLE_LEN);
	free(text);
	json_decref(details);
	return rc == DB_OK ? 0 : -1;
}

/* --reason TEXT (required for a change); argv[optind..] are the words
 * left. 0, or EXIT_USAGE with the usage printed. */
static int
change_opts(struct ctl *ctl, int argc, char **argv, const char **reason)
{
	const struct ctl_opt opts[] = {
		{ "reason", CTL_OPT_TEXT, reason, 0, NULL },
		{ NULL, 0, NULL, 0, NULL },
	};

	*reason = NULL;
	return ctl_options(ctl, argc, argv, opts, false);
}

/* --reason is required for every change, within operator_actions' limits;
 * true (message printed) when it is missing or too long. */
static bool
bad_reason(const char *what, const char *reason)
{
	if (reason == NULL || *reason == '\0') {
		fprintf(stderr, "oncegatectl: %s needs --reason TEXT: say why, it is kept with the "
		        "change\n", what);
		return true;
	}
	if (strlen(reason) > OPLOG_REASON_MAX) {
		fprintf(stderr, "oncegatectl: %s: --reason is at most %d characters\n", what,
		        OPLOG_REASON_MAX);
		return true;
	}
	return false;
}

/* `client list` and `client grants`: a list from the owner, as a table. */
struct client_view {
	const char *what;
	enum og_rc (*fetch)(struct db *db, json_t **list);
	struct ctl_col cols[6];
};

static const struct client_view client_list_view = {
	"client list", clients_list,
	{ { "NAME", "name", 32 }, { "CREATED", "created_at", 25 },
	  { "REVOKED", "revoked_at", 0 }, { NULL, NULL, 0 } },
};

/* `client grants`: every decide grant. */
static const struct client_view client_grants_view = {
	"client grants", clients_grants,
	{ { "CLIENT", "client", 24 }, { "SCOPE", "scope", 7 }, { "CONTRACT", "contract", 24 },
	  { "APPROVER", "approver", 32 }, { "GRANTED", "created_at", 0 }, { NULL, NULL, 0 } },
};

static int
client_view(struct ctl *ctl, const struct client_view *v)
{
	json_t *list = NULL;
	enum og_rc rc;

	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	if ((rc = v->fetch(ctl->db, &list)) != OG_OK)
		return client_exit(rc, v->what, "", ctl);
	ctl_print_list(ctl, list, v->cols);
	return EXIT_SUCCESS;
}

/* Whether the command's verb (its first word that is neither an option
 * nor an option's value) is grant or ungrant. */
static bool
grant_verb(int argc, char **argv)
{
	int i;

	for (i = 1; i < argc; i++) {
		if (strncmp(argv[i], "--", 2) == 0) {
			if (strchr(argv[i], '=') == NULL)
				i++;
			continue;
		}
		return strcmp(argv[i], "grant") == 0 || strcmp(argv[i], "ungrant") == 0;
	}
	return false;
}

/* `client grant|ungrant NAME --decide CONTRACT --approver ENTRY --reason
 * TEXT`: the decide scope of a client for one contract and approver entry
 * ("*": every entry of the contract). The contract need not be loaded
 * here: grants are kept by name, as contracts are. */
static int
client_grant(struct ctl *ctl, int argc, char **argv)
{
	const char *reason = NULL, *contract = NULL, *approver = NULL, *name, *what;
	const struct ctl_opt opts[] = {
		{ "reason", CTL_OPT_TEXT, &reason, 0, NULL },
		{ "decide", CTL_OPT_TEXT, &contract, 0, NULL },
		{ "approver", CTL_OPT_TEXT, &approver, 0, NULL },
		{ NULL, 0, NULL, 0, NULL },
	};
	char op[OPLOG_ROLE_LEN] = "";
	struct log_fields f = { 0 };
	long long id = 0;
	enum og_rc rc;
	bool grant;

	if (ctl_options(ctl, argc, argv, opts, false) != 0)
		return EXIT_USAGE;
	if (optind != argc - 2 || contract == NULL || approver == NULL)
		return ctl_usage(ctl);
	grant = strcmp(argv[optind], "grant") == 0;
	what = grant ? "client grant" : "client ungrant";
	name = argv[optind + 1];
	if (bad_reason(what, reason))
		return EXIT_USAGE;
	if (!clients_name_valid(name))
		return client_exit(OG_BAD_NAME, what, name, ctl);
	if (!clients_name_valid(contract) /* a contract's name has a client name's shape */ || approver[0] == '\0' || strlen(approver) > 320) {
		fprintf(stderr, "oncegatectl: %s: --decide names a contract (1-64 of A-Z a-z 0-9 . _ "
		        "-), --approver an approver entry as the contract writes it (\"alice@example."
		        "com\", \"group:support\") or \"*\" for all of them, at most 320 bytes\n", what);
		return EXIT_USAGE;
	}
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	if (db_begin(ctl->db) != DB_OK)
		return client_exit(OG_UNAVAILABLE, what, name, ctl);
	rc = clients_grant_decide(ctl->db, name, contract, approver, grant, &id);
	if (rc == OG_OK &&
	    (record(ctl, grant ? "client.grant" : "client.ungrant", reason, id,
	            json_pack("{s:s, s:s, s:s, s:s}", "client", name, "scope", "decide",
	                      "contract", contract, "approver", approver), op) != 0 ||
	     db_commit(ctl->db) != DB_OK))
		rc = OG_ERROR;
	if (rc != OG_OK)
		db_rollback(ctl->db);
	if (rc == OG_NOT_FOUND) {
		fprintf(stderr, grant ? "oncegatectl: client grant: no active client named \"%s\", "
		                        "or it holds this grant already\n"
		                      : "oncegatectl: client ungrant: client \"%s\" holds no such "
		                        "grant\n", name);
		return EXIT_REFUSED;
	}
	if (rc != OG_OK)
		return client_exit(rc, what, name, ctl);
	f.client = name;
	f.actor = op;
	f.reason = reason;
	f.contract = contract;
	f.detail = approver;
	ctl_log(ctl, LOG_LEVEL_NOTICE, grant ? "client.granted" : "client.ungranted", &f);
	if (ctl->json)
		ctl_print_new(json_pack("{s:s, s:s, s:s, s:s, s:b}", "client", name, "scope",
		                        "decide", "contract", contract, "approver", approver,
		                        "granted", grant));
	fprintf(stderr, "oncegatectl: client \"%s\" %s record decisions for %s on contract "
	        "\"%s\"\n", name, grant ? "may now" : "may no longer", approver, contract);
	return EXIT_SUCCESS;
}

int
ctl_admin_client(struct ctl *ctl, int argc, char **argv)
{
	char key[CLIENTS_KEY_LEN], op[OPLOG_ROLE_LEN] = "";
	const char *reason, *verb, *name;
	struct log_fields f = { 0 };
	long long id = 0;
	enum og_rc rc;
	bool add;
	int ex;

	if (grant_verb(argc, argv))
		return client_grant(ctl, argc, argv);
	if (change_opts(ctl, argc, argv, &reason) != 0)
		return EXIT_USAGE;
	if (optind == argc - 1 && strcmp(argv[optind], "list") == 0 && reason == NULL)
		return client_view(ctl, &client_list_view);
	if (optind == argc - 1 && strcmp(argv[optind], "grants") == 0 && reason == NULL)
		return client_view(ctl, &client_grants_view);
	if (optind != argc - 2 ||
	    (strcmp(argv[optind], "add") != 0 && strcmp(argv[optind], "revoke") != 0))
		return ctl_usage(ctl);
	verb = argv[optind];
	name = argv[optind + 1];
	add = strcmp(verb, "add") == 0;
	/* Who may call the API is a change like any other: it says why. */
	if (bad_reason(add ? "client add" : "client revoke", reason))
		return EXIT_USAGE;
	if (!clients_name_valid(name))
		return client_exit(OG_BAD_NAME, add ? "client add" : "client revoke", name, ctl);
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	if (db_begin(ctl->db) != DB_OK)
		return client_exit(OG_UNAVAILABLE, add ? "client add" : "client revoke", name, ctl);
	rc = add ? clients_add(ctl->db, name, key, &id) : clients_revoke(ctl->db, name, &id);
	if (rc == OG_OK &&
	    (record(ctl, add ? "client.add" : "client.revoke", reason, id,
	            json_pack("{s:s}", "client", name), op) != 0 ||
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
		if (ctl->json)
			ctl_print_new(json_pack("{s:s, s:b}", "client", name, CLIENTS_REVOKED, 1));
		fprintf(stderr, "oncegatectl: client \"%s\" revoked; its key is refused "
		        "from the next request\n", name);
		return EXIT_SUCCESS;
	}
	/* The key alone on stdout, for scripts; the warning on stderr. */
	if (ctl->json)
		ctl_print_new(json_pack("{s:s, s:s}", "client", name, "api_key", key));
	else
		printf("%s\n", key);
	fflush(stdout);
	fprintf(stderr, "oncegatectl: client \"%s\" added. This key is shown once and "
	        "only its SHA-256 is stored.\n", name);
	digest_wipe(key, sizeof(key));
	return EXIT_SUCCESS;
}

/* The settings config_dump writes ("name = value" lines, "[target T]"
 * sections) as one document. */
static void
config_json(struct ctl *ctl, size_t contracts)
{
	json_t *doc, *settings = json_object(), *targets = json_object(), *into = settings;
	char *text = NULL, *line, *save = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (f != NULL) {
		config_dump(&ctl->cfg, f);
		fclose(f);
	}
	for (line = text != NULL ? strtok_r(text, "\n", &save) : NULL; line != NULL;
	     line = strtok_r(NULL, "\n", &save)) {
		char *eq = strstr(line, " = ");

		if (strncmp(line, "[target ", 8) == 0 && line[strlen(line) - 1] == ']') {
			line[strlen(line) - 1] = '\0';
			into = json_object();
			json_object_set_new(targets, line + 8, into);
		} else if (line[0] != '#' && eq != NULL) {
			*eq = '\0';
			json_object_set_new(into, line, json_string(eq + 3));
		}
	}
	free(text);
	doc = json_pack("{s:s, s:b, s:o, s:o, s:I}", "config", ctl->conf_path, "valid", 1,
	                "settings", settings, "targets", targets, "contracts",
	                (json_int_t)contracts);
	ctl_print_json(doc);
	json_decref(doc);
}

int
ctl_admin_config(struct ctl *ctl, int argc, char **argv)
{
	if (argc != 2 || strcmp(argv[1], "check") != 0)
		return ctl_usage(ctl);
	struct contract_set *contracts;
	struct page_set *pages;
	char err[1024];

	/* Loading checked the syntax, the ranges and the targets; a config
	 * that loads may still be unable to work. */
	if (config_check_ready(&ctl->cfg, ctl->conf_path, err, sizeof(err)) != 0) {
		fprintf(stderr, "oncegatectl: %s\n", err);
		return EXIT_REFUSED;
	}
	(void)config_check_warnings(&ctl->cfg, ctl->conf_path, stderr);
	contracts = contract_load_dir(ctl->cfg.contracts_dir, err, sizeof(err));
	if (contracts == NULL) {
		fprintf(stderr, "oncegatectl: %s:%d: contracts_dir: %s\n", ctl->conf_path,
		        config_line(ctl->conf_path, NULL, "contracts_dir"), err);
		return EXIT_REFUSED;
	}
	if (contract_targets_check(contracts, &ctl->cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "oncegatectl: %s/%s\n", ctl->cfg.contracts_dir, err);
		contract_set_free(contracts);
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
	if (ctl->json)
		config_json(ctl, contract_count(contracts));
	else {
		config_dump(&ctl->cfg, stdout);
		printf("\n# %zu contracts loaded from %s\n", contract_count(contracts),
		       ctl->cfg.contracts_dir);
	}
	contract_set_free(contracts);
	page_set_free(pages);
	fprintf(stderr, "oncegatectl: configuration %s is valid\n", ctl->conf_path);
	return EXIT_SUCCESS;
}

/* `sends status`: who last stopped or resumed sends, and what waits. */
static int
sends_status(struct ctl *ctl)
{
	struct control_status st;

	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	if (control_status(ctl->db, &st) != DB_OK) {
		fprintf(stderr, "oncegatectl: sends status: %s\n", db_error(ctl->db));
		control_status_clear(&st);
		return EXIT_REFUSED;
	}
	if (ctl->json) {
		ctl_print_new(json_pack("{s:s, s:s, s:s?, s:s?, s:I, s:I, s:s}", "sends",
		                        st.actions_enabled ? "allowed" : "stopped", "changed_at",
		                        st.changed_at, "changed_by", st.changed_by, "reason",
		                        st.reason, "blocked_sends", (json_int_t)st.blocked_sends,
		                        "due_effects", (json_int_t)st.due, "environment_needs",
		                        "AI_ACTIONS_ENABLED=true"));
	} else {
		char *safe = ctl_terminal_text(st.reason != NULL ? st.reason : "-");

		printf("sends           %s (since %s, by %s: %s)\n",
		       st.actions_enabled ? "ALLOWED" : "STOPPED (kill switch engaged)",
		       st.changed_at, st.changed_by != NULL ? st.changed_by : "-",
		       safe != NULL ? safe : "-");
		free(safe);
		printf("effects due     %lld\n", st.due);
		printf("blocked sends   %lld (refused by the switch right before sending)\n",
		       st.blocked_sends);
		printf("A dispatcher sends only while sends are ALLOWED here and its own environment "
		       "has AI_ACTIONS_ENABLED=true.\n");
	}
	control_status_clear(&st);
	return EXIT_SUCCESS;
}

/* Stops (allow false) or resumes sends: the row and its operator_actions
 * row commit together. The stored flag keeps its meaning (actions_enabled:
 * true while sends are allowed); the actions are named for what the
 * operator did. */
static int
sends_set(struct ctl *ctl, bool allow, const char *reason)
{
	const char *what = allow ? "sends resume" : "sends stop";
	char op[OPLOG_ROLE_LEN] = "";
	bool was;

	if (bad_reason(what, reason))
		return EXIT_USAGE;
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	if (db_begin(ctl->db) != DB_OK || control_set(ctl->db, allow, reason, &was) != DB_OK ||
	    record(ctl, allow ? "sends.resumed" : "sends.stopped", reason, 0,
	           json_pack("{s:s, s:s}", "was", was ? "allowed" : "stopped", "now",
	                     allow ? "allowed" : "stopped"),
	           op) != 0 ||
	    db_commit(ctl->db) != DB_OK) {
		fprintf(stderr, "oncegatectl: %s: %s\n", what, db_error(ctl->db));
		db_rollback(ctl->db);
		return EXIT_REFUSED;
	}
	{
		struct log_fields f = { .actor = op, .reason = reason,
			                .state_to = allow ? "allowed" : "stopped" };

		ctl_log(ctl, LOG_LEVEL_NOTICE, allow ? "sends.resumed" : "sends.stopped", &f);
	}
	if (ctl->json) {
		json_t *doc = json_pack("{s:s, s:s, s:s}", "sends", allow ? "allowed" : "stopped",
		                        "was", was ? "allowed" : "stopped", "changed_by", op);

		ctl_print_json(doc);
		json_decref(doc);
	}
	if (allow)
		fprintf(stderr, "oncegatectl: sends ALLOWED (by %s); dispatchers also need "
		        "AI_ACTIONS_ENABLED=true\n", op);
	else
		fprintf(stderr, "oncegatectl: sends STOPPED (by %s): no dispatcher starts a send "
		        "until `oncegatectl sends resume`\n", op);
	return EXIT_SUCCESS;
}

/* WORD --reason TEXT | status, where stop and resume are the command's
 * words for stopping and allowing sends. */
static int
sends_command(struct ctl *ctl, int argc, char **argv, const char *stop, const char *resume)
{
	const char *reason = NULL, *what;

	if (change_opts(ctl, argc, argv, &reason) != 0)
		return EXIT_USAGE;
	if (optind != argc - 1)
		return ctl_usage(ctl);
	what = argv[optind];
	if (strcmp(what, "status") == 0)
		return reason != NULL ? ctl_usage(ctl) : sends_status(ctl);
	if (strcmp(what, stop) == 0)
		return sends_set(ctl, false, reason);
	if (strcmp(what, resume) == 0)
		return sends_set(ctl, true, reason);
	return ctl_usage(ctl);
}

int
ctl_admin_sends(struct ctl *ctl, int argc, char **argv)
{
	return sends_command(ctl, argc, argv, "stop", "resume");
}

int
ctl_admin_kill_switch(struct ctl *ctl, int argc, char **argv)
{
	int i;

	/* `on` once allowed sends; an old script's `off` in an incident must not
	 * start them now, so neither spelling is taken in either meaning. */
	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--reason") == 0) {
			i++;
			continue;
		}
		if (strcmp(argv[i], "on") == 0 || strcmp(argv[i], "off") == 0)
			break;
	}
	if (i < argc) {
		const char *what = argv[i];

		fprintf(stderr,
		        "oncegatectl: `kill-switch %s` is no longer accepted (`on` used to ALLOW "
		        "sends).\n"
		        "  To stop every send:  oncegatectl sends stop --reason TEXT   (or kill-switch "
		        "engage)\n"
		        "  To allow sends:      oncegatectl sends resume --reason TEXT (or kill-switch "
		        "release)\n"
		        "  To see the state:    oncegatectl sends status\n",
		        what);
		return EXIT_USAGE;
	}
	return sends_command(ctl, argc, argv, "engage", "release");
}

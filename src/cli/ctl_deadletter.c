/*
 * ctl_deadletter.c — `deadletter list`, `show` and `assign`: what
 * automatic recovery gave up on, with its evidence (docs/operate.md), and
 * who looks after it. The SQL is in src/lib/deadletter.c; an assignment
 * commits with its operator_actions row.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "canon.h"
#include "ctl_deadletter.h"
#include "deadletter.h"
#include "log.h"
#include "oplog.h"
#include "repair.h"

static char *
jtext(const json_t *v)
{
	if (v == NULL || json_is_null(v))
		return strdup("-");
	if (json_is_string(v))
		return strdup(json_string_value(v));
	return canon_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* --- deadletter ------------------------------------------------------------------ */

static int
cmd_list(struct ctl *ctl, int argc, char **argv)
{
	struct deadletter_filter f = { 0 };
	const struct ctl_opt opts[] = {
		{ "since", CTL_OPT_TIME, &f.since_seconds, 0, NULL },
		{ "class", CTL_OPT_TEXT, &f.error_class, 0, CTL_DEAD_LETTER_CLASSES },
		{ "target", CTL_OPT_TEXT, &f.target, 0, NULL },
		{ "state", CTL_OPT_TEXT, &f.state, 0, CTL_DEAD_LETTER_STATES },
		{ "limit", CTL_OPT_COUNT, &f.limit, 100000, NULL },
		{ NULL, 0, NULL, 0, NULL },
	};
	json_t *list = NULL, *o;
	enum og_rc rc;
	size_t i;
	int ex;

	if ((ex = ctl_begin(ctl, argc, argv, opts, 0)) != 0)
		return ex;
	if ((rc = deadletter_list(ctl->db, &f, &list)) != OG_OK)
		return ctl_failed(ctl, "deadletter list", rc);
	if (ctl->json)
		return ctl_print_new(list);
	printf("%-36s  %-7s %-9s %-14s %-9s %-8s %s\n", "DEAD LETTER", "AGE", "CLASS", "TARGET",
	       "EFFECT", "STATE", "KEY");
	json_array_foreach(list, i, o) {
		char age[32];

		ctl_age(json_integer_value(json_object_get(o, "age_seconds")), age, sizeof(age));
		printf("%-36s  %-7s %-9s %-14s %-9s %-8s %s\n", ctl_jstr(o, "dead_letter_id"), age,
		       ctl_jstr(o, "error_class"), ctl_jstr(o, "target"), ctl_jstr(o, "effect_state"),
		       ctl_jstr(o, "state"), ctl_jstr(o, "key"));
	}
	printf("%zu dead letter%s\n", json_array_size(list), json_array_size(list) == 1 ? "" : "s");
	json_decref(list);
	return EXIT_SUCCESS;
}

/* One attempt, one line; the evidence of the last send below the table. */
static void
show_attempts(const json_t *doc)
{
	const json_t *atts = json_object_get(doc, "attempts"), *a, *last = NULL;
	size_t i;

	printf("\nattempts (%zu)\n", json_array_size(atts));
	printf("  %-3s %-6s %-24s %7s %-10s %-6s %-12s %-5s %s\n", "#", "KIND", "STARTED", "MS",
	       "CLASS", "STATUS", "SENT", "BY", "REASON");
	json_array_foreach(atts, i, a) {
		const json_t *ev = json_object_get(a, "evidence");
		char *sent = jtext(json_object_get(ev, "request_sent"));
		char *status = jtext(json_object_get(a, "status"));

		printf("  %-3lld %-6s %-24s %7lld %-10s %-6s %-12s %-5s %s\n",
		       (long long)json_integer_value(json_object_get(a, "attempt")),
		       ctl_jstr(a, "kind"), ctl_jstr(a, "started_at"),
		       (long long)json_integer_value(json_object_get(a, "duration_ms")),
		       ctl_jstr(a, "classification"), status, sent,
		       strncmp(ctl_jstr(a, "dispatcher"), "operator", 8) == 0 ? "op" : "disp",
		       ctl_jstr(a, "reason"));
		free(sent);
		free(status);
		if (strcmp(ctl_jstr(a, "kind"), "send") == 0)
			last = a;
	}
	if (last != NULL) {
		const json_t *ev = json_object_get(last, "evidence");
		char *headers = jtext(json_object_get(ev, "headers"));
		char *excerpt = jtext(json_object_get(ev, "body_excerpt"));
		char *terr = jtext(json_object_get(ev, "transport_error"));
		char *status = jtext(json_object_get(last, "status"));

		printf("\nlast target evidence (attempt %lld)\n",
		       (long long)json_integer_value(json_object_get(last, "attempt")));
		printf("  status           %s\n", status);
		printf("  transport error  %s\n", terr);
		printf("  headers          %s\n", headers);
		printf("  body excerpt     %s%s\n", excerpt,
		       json_is_true(json_object_get(ev, "body_truncated")) ? " […truncated]" : "");
		free(headers);
		free(excerpt);
		free(terr);
		free(status);
	}
}

/* The resolutions a dead letter went through, one a line. */
static void
show_resolutions(const json_t *h)
{
	size_t k;

	for (k = 0; k < json_array_size(h); k++) {
		const json_t *e = json_array_get(h, k);

		printf("  %s %-14s by %s\n", ctl_jstr(e, "at"), ctl_jstr(e, "resolution"),
		       ctl_jstr(e, "by"));
	}
}

/* The dead letter itself, one field a line. */
static void
show_letter(const json_t *doc)
{
	const json_t *eff = json_object_get(doc, "effect"), *run = json_object_get(doc, "run");
	char age[32];
	char *corr = jtext(json_object_get(doc, "correlation_id"));
	char *wf = jtext(json_object_get(doc, "workflow_version"));
	char *contract = jtext(json_object_get(doc, "contract"));
	char *chash = jtext(json_object_get(doc, "contract_hash"));
	char *ledger = jtext(json_object_get(doc, "ledger_state"));
	char *evid = jtext(json_object_get(doc, "event_id"));
	char *pid = jtext(json_object_get(eff, "provider_id"));

	ctl_age(json_integer_value(json_object_get(doc, "age_seconds")), age, sizeof(age));
	printf("dead letter      %s (%s, written %s, %s ago)\n",
	       ctl_jstr(doc, "dead_letter_id"), ctl_jstr(doc, "state"),
	       ctl_jstr(doc, "created_at"), age);
	printf("effect           %s  %s -> %s  now %s%s\n", ctl_jstr(doc, "effect_id"),
	       ctl_jstr(eff, "type"), ctl_jstr(eff, "target"), ctl_jstr(eff, "state"),
	       json_is_true(json_object_get(eff, "known_undelivered"))
	               ? " (known not delivered)" : "");
	printf("event id         %s\n", evid);
	printf("correlation id   %s\n", corr);
	printf("workflow         %s\n", wf);
	printf("contract         %s (%s)\n", contract, chash);
	printf("payload          %s, ref %s (%s)\n", ctl_jstr(doc, "payload_hash"),
	       ctl_jstr(doc, "payload_ref"),
	       json_is_true(json_object_get(doc, "payload_kept")) ? "kept"
	                                                          : "purged by retention");
	printf("idempotency key  %s (client %s); provider key %s\n",
	       ctl_jstr(doc, "key"), ctl_jstr(doc, "client"),
	       ctl_jstr(doc, "provider_key"));
	printf("ledger state     %s when written; now %s (version %lld)\n", ledger,
	       ctl_jstr(run, "state"),
	       (long long)json_integer_value(json_object_get(run, "version")));
	printf("failed           component %s, class %s, reason %s\n",
	       ctl_jstr(doc, "component"), ctl_jstr(doc, "error_class"),
	       ctl_jstr(doc, "reason"));
	printf("provider id      %s\n", pid);
	printf("owner            %s\n", ctl_jstr(doc, "owner"));
	printf("approved by      %s\n", json_is_string(json_object_get(doc, "approved_by"))
	                                     ? ctl_jstr(doc, "approved_by") : "-");
	printf("next action      %s\n", ctl_jstr(doc, "next_action"));
	printf("retention until  %s\n", ctl_jstr(doc, "retention_until"));
	printf("replay count     %lld%s%s\n",
	       (long long)json_integer_value(json_object_get(doc, "replay_count")),
	       json_is_string(json_object_get(doc, "replayed_as")) ? ", replayed as " : "",
	       json_is_string(json_object_get(doc, "replayed_as"))
	               ? ctl_jstr(doc, "replayed_as") : "");
	printf("resolution       %s", ctl_jstr(doc, "resolution"));
	if (json_is_string(json_object_get(doc, "resolved_by")))
		printf(" (by %s at %s)", ctl_jstr(doc, "resolved_by"),
		       ctl_jstr(doc, "resolved_at"));
	printf("\n");
	show_resolutions(json_object_get(doc, "resolutions"));
	free(corr);
	free(wf);
	free(contract);
	free(chash);
	free(ledger);
	free(evid);
	free(pid);
}

static int
cmd_show(struct ctl *ctl, const char *id)
{
	json_t *doc = NULL, *acts, *a;
	enum og_rc rc;
	size_t i;

	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	rc = repair_is_uuid(id) ? deadletter_show(ctl->db, &ctl->cfg, id, &doc) : OG_NOT_FOUND;
	if (rc == OG_NOT_FOUND) {
		fprintf(stderr, "oncegatectl: deadletter show: no dead letter has the id %s (as "
		        "its own id or its effect's)\n", id);
		return EXIT_REFUSED;
	}
	if (rc != OG_OK)
		return ctl_failed(ctl, "deadletter show", rc);
	if (ctl->json)
		return ctl_print_new(doc);
	show_letter(doc);
	show_attempts(doc);
	acts = json_object_get(doc, "operator_actions");
	printf("\noperator actions (%zu)\n", json_array_size(acts));
	json_array_foreach(acts, i, a)
		printf("  %s  %-10s %-16s %s\n", ctl_jstr(a, "ts"), ctl_jstr(a, "operator"),
		       ctl_jstr(a, "action"), ctl_jstr(a, "reason"));
	json_decref(doc);
	return EXIT_SUCCESS;
}

/* The owner changed and its operator_actions row written, in the open
 * transaction, which it commits when both are done; by gets the operator
 * the row names. */
static enum og_rc
assign_recorded(struct ctl *ctl, const char *id, const char *to, const char *reason,
                struct deadletter_assigned *out, char by[OPLOG_ROLE_LEN])
{
	struct oplog_action a = { .action = "deadletter.assigned", .reason = reason };
	char cid[24], *details;
	enum og_rc rc;
	json_t *d;

	if ((rc = deadletter_assign(ctl->db, id, to, out)) != OG_OK)
		return rc;
	d = json_pack("{s:s, s:s?}", "owner", to, "was", out->was[0] ? out->was : NULL);
	details = d != NULL ? json_dumps(d, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	json_decref(d);
	snprintf(cid, sizeof(cid), "%lld", out->client_id);
	a.client_id = cid;
	a.key = out->key;
	a.effect_id = out->effect_id;
	a.details = details;
	if (oplog_record_by(ctl->db, &a, NULL, by, OPLOG_ROLE_LEN) != DB_OK ||
	    db_commit(ctl->db) != DB_OK)
		rc = OG_ERROR;
	free(details);
	return rc;
}

/* `deadletter assign ID --to PERSON --reason TEXT`: a person owns the
 * letter from now on (by default its client does). */
static int
cmd_assign(struct ctl *ctl, int argc, char **argv)
{
	const char *to = NULL, *reason = NULL, *id;
	const struct ctl_opt opts[] = {
		{ "to", CTL_OPT_TEXT, &to, 0, NULL },
		{ "reason", CTL_OPT_TEXT, &reason, 0, NULL },
		{ NULL, 0, NULL, 0, NULL },
	};
	struct deadletter_assigned out;
	char by[OPLOG_ROLE_LEN] = "";
	enum og_rc rc;
	size_t i;

	if (ctl_options(ctl, argc, argv, opts, false) != 0)
		return EXIT_USAGE;
	if (optind != argc - 1 || to == NULL)
		return ctl_usage(ctl);
	id = argv[optind];
	for (i = 0; to[i] != '\0'; i++)
		if ((unsigned char)to[i] < 0x20 || to[i] == 0x7f)
			break;
	if (to[i] != '\0' || i == 0 || i > 200) {
		fprintf(stderr, "oncegatectl: deadletter assign: --to is a person (1-200 characters, "
		        "no control characters), e.g. an e-mail address\n");
		return EXIT_USAGE;
	}
	if (reason == NULL || *reason == '\0' || strlen(reason) > OPLOG_REASON_MAX) {
		fprintf(stderr, "oncegatectl: deadletter assign needs --reason TEXT (at most %d "
		        "characters): say why, it is kept with the change\n", OPLOG_REASON_MAX);
		return EXIT_USAGE;
	}
	if (!repair_is_uuid(id)) {
		fprintf(stderr, "oncegatectl: deadletter assign: no dead letter has the id %s\n", id);
		return EXIT_REFUSED;
	}
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	if (db_begin(ctl->db) != DB_OK) {
		fprintf(stderr, "oncegatectl: deadletter assign: %s\n", db_error(ctl->db));
		return EXIT_UNAVAILABLE;
	}
	rc = assign_recorded(ctl, id, to, reason, &out, by);
	if (rc != OG_OK) {
		db_rollback(ctl->db);
		if (rc != OG_NOT_FOUND)
			return ctl_failed(ctl, "deadletter assign", rc);
		fprintf(stderr, "oncegatectl: deadletter assign: no dead letter has the id %s "
		        "(as its own id or its effect's)\n", id);
		return EXIT_REFUSED;
	}
	{
		struct log_fields f = { .actor = by, .reason = reason, .key = out.key,
			                .effect_id = out.effect_id, .detail = to };

		ctl_log(ctl, LOG_LEVEL_NOTICE, "deadletter.assigned", &f);
	}
	if (ctl->json)
		ctl_print_new(json_pack("{s:s, s:s, s:s, s:s?, s:s}", "dead_letter_id", out.id,
		                        "effect_id", out.effect_id, "owner", to, "was",
		                        out.was[0] ? out.was : NULL, "assigned_by", by));
	fprintf(stderr, "oncegatectl: dead letter %s now owned by %s (by %s)\n", out.id, to, by);
	return EXIT_SUCCESS;
}

int
ctl_deadletter(struct ctl *ctl, int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "list") == 0)
		return cmd_list(ctl, argc - 1, argv + 1);
	if (argc == 3 && strcmp(argv[1], "show") == 0 && argv[2][0] != '-')
		return cmd_show(ctl, argv[2]);
	if (argc >= 2 && strcmp(argv[1], "assign") == 0)
		return cmd_assign(ctl, argc - 1, argv + 1);
	return ctl_usage(ctl);
}

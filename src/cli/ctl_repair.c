/*
 * ctl_repair.c — the night shift's commands: see what automatic recovery
 * gave up on, prove what happened, and repair it without sending anything
 * twice (README "Operations").
 *
 * Every command that changes something needs --reason; the operator is
 * --operator or the login name. A change is logged (actor, reason, ids)
 * and recorded in operator_actions in the same transaction (repair.c). A
 * refusal changes nothing, says why on stderr, exits non-zero and is
 * logged too (`operator.refused`, error_class naming the kind of refusal),
 * so the decision log shows what was tried as well as what was done.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* getline */
#endif
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ctl_repair.h"
#include "repair.h"
#include "replay.h"

/* operator_actions' CHECKs, told before the database refuses them. */
#define REASON_MAX 1000
#define OPERATOR_MAX 200

/* bulk resume */
#define BULK_ITEMS_MAX  10000    /* ids of one selection */
#define BULK_LINE_MAX   256
#define BULK_RATE_DEFAULT 5.0    /* items per second when --rate is not given */
#define BULK_RATE_MAX   1000.0

/* What a command knows when it logs: its name and the operator's words. */
struct act {
	const char *cmd;
	const char *op;
	const char *reason;
};

static const char *
refusal_code(enum repair_rc rc)
{
	switch (rc) {
	case REPAIR_NOT_FOUND:
		return "not_found";
	case REPAIR_WRONG_STATE:
		return "wrong_state";
	case REPAIR_NOT_UNDELIVERED:
		return "not_known_undelivered";
	case REPAIR_CHANGED:
		return "changed_meanwhile";
	case REPAIR_AMBIGUOUS:
		return "ambiguous_key";
	case REPAIR_BAD_INPUT:
		return "usage";
	case REPAIR_REPLAYED:
		return "replayed";
	case REPAIR_WINDOW_CLOSED:
		return "window_closed";
	case REPAIR_UNAVAILABLE:
		return "database_unavailable";
	default:
		return "error";
	}
}

/* Logs and prints a refusal; returns the exit code. out may be NULL. */
static int
refuse(struct ctl *ctl, const struct act *a, const char *code, const char *why,
       const struct repair_out *out, int exit_code)
{
	char detail[REPAIR_WHY_MAX + 64];
	struct log_fields f = { 0 };

	snprintf(detail, sizeof(detail), "%s: %s", a->cmd, why);
	f.actor = a->op;
	f.reason = a->reason;
	f.error_class = code;
	f.detail = detail;
	if (out != NULL) {
		f.client = out->client_name[0] ? out->client_name : NULL;
		f.key = out->key[0] ? out->key : NULL;
		f.effect_id = out->effect_id[0] ? out->effect_id : NULL;
		f.approval_id = out->approval_id[0] ? out->approval_id : NULL;
		f.target = out->target[0] ? out->target : NULL;
		f.state_from = out->from[0] ? out->from : NULL;
	}
	ctl_log(ctl, LOG_LEVEL_NOTICE, "operator.refused", &f);
	fprintf(stderr, "oncegatectl: %s refused: %s. Nothing was changed.\n", a->cmd, why);
	return exit_code;
}

/* The exit code (and the message and log line) of a refused repair. */
static int
refused(struct ctl *ctl, const struct act *a, enum repair_rc rc, struct repair_out *out)
{
	if (rc == REPAIR_UNAVAILABLE) {
		snprintf(out->why, sizeof(out->why), "database unavailable: %s", db_error(ctl->db));
		return refuse(ctl, a, refusal_code(rc), out->why, out, EXIT_UNAVAILABLE);
	}
	if (rc == REPAIR_ERROR || out->why[0] == '\0')
		snprintf(out->why, sizeof(out->why), "%s", db_error(ctl->db));
	return refuse(ctl, a, refusal_code(rc), out->why, out, EXIT_REFUSED);
}

/* --reason is required for every change, within operator_actions' limits. */
static int
check_reason(struct ctl *ctl, struct act *a)
{
	if (a->op == NULL || strlen(a->op) > OPERATOR_MAX)
		return refuse(ctl, a, "usage", "the operator name is 1-200 characters", NULL,
		              EXIT_USAGE);
	if (a->reason == NULL || *a->reason == '\0')
		return refuse(ctl, a, "usage", "--reason TEXT is required: say why, it is kept with "
		              "the change", NULL, EXIT_USAGE);
	if (strlen(a->reason) > REASON_MAX)
		return refuse(ctl, a, "usage", "--reason is at most 1000 characters", NULL,
		              EXIT_USAGE);
	return 0;
}

static void
print_json(json_t *v)
{
	char *s = v != NULL ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;

	printf("%s\n", s != NULL ? s : "null");
	free(s);
}

/* "3d4h", "5h12m", "42m", "17s". */
static void
fmt_age(long long s, char *buf, size_t n)
{
	if (s < 0)
		s = 0;
	if (s >= 86400)
		snprintf(buf, n, "%lldd%lldh", s / 86400, (s % 86400) / 3600);
	else if (s >= 3600)
		snprintf(buf, n, "%lldh%lldm", s / 3600, (s % 3600) / 60);
	else if (s >= 60)
		snprintf(buf, n, "%lldm", s / 60);
	else
		snprintf(buf, n, "%llds", s);
}

/* "90s", "15m", "6h", "7d", "2w" → seconds; -1 when not a duration. */
static long long
parse_duration(const char *s)
{
	char *end;
	long long v;

	if (!isdigit((unsigned char)s[0]))
		return -1;
	v = strtoll(s, &end, 10);
	if (v <= 0 || v > 100000000LL || end[0] == '\0' || end[1] != '\0')
		return -1;
	switch (end[0]) {
	case 's':
		return v;
	case 'm':
		return v * 60;
	case 'h':
		return v * 3600;
	case 'd':
		return v * 86400;
	case 'w':
		return v * 604800;
	default:
		return -1;
	}
}

static const char *
jstr(const json_t *o, const char *name)
{
	const char *v = json_string_value(json_object_get(o, name));

	return v != NULL ? v : "-";
}

/* A JSON value as text for the human view ("-" for null). */
static char *
jtext(const json_t *v)
{
	if (v == NULL || json_is_null(v))
		return strdup("-");
	if (json_is_string(v))
		return strdup(json_string_value(v));
	return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* --- deadletter ------------------------------------------------------------------ */

static int
deadletter_usage(FILE *f, int rc)
{
	fprintf(f, "usage: oncegatectl [--json] deadletter list [--since DURATION|TIMESTAMP] "
	        "[--class permanent|exhausted|unknown] [--target NAME] [--state open|resolved] "
	        "[--limit N]\n"
	        "       oncegatectl [--json] deadletter show ID   (a dead letter's or its "
	        "effect's id)\n"
	        "  DURATION: 90s, 15m, 6h, 7d, 2w. A letter is open while its effect is still "
	        "failed or unknown and waits for an operator.\n");
	return rc;
}

static int
deadletter_list(struct ctl *ctl, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "since", required_argument, NULL, 's' },
		{ "class", required_argument, NULL, 'c' },
		{ "target", required_argument, NULL, 't' },
		{ "state", required_argument, NULL, 'S' },
		{ "limit", required_argument, NULL, 'l' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct repair_dl_filter f = { 0 };
	json_t *list = NULL, *o;
	enum repair_rc rc;
	size_t i;
	int opt;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 's':
			f.since_seconds = parse_duration(optarg);
			if (f.since_seconds < 0) {
				f.since_seconds = 0;
				if (!isdigit((unsigned char)optarg[0]))
					return deadletter_usage(stderr, EXIT_USAGE);
				f.since_ts = optarg;
			}
			break;
		case 'c':
			if (strcmp(optarg, "permanent") != 0 && strcmp(optarg, "exhausted") != 0 &&
			    strcmp(optarg, "unknown") != 0)
				return deadletter_usage(stderr, EXIT_USAGE);
			f.error_class = optarg;
			break;
		case 't':
			f.target = optarg;
			break;
		case 'S':
			if (strcmp(optarg, "open") != 0 && strcmp(optarg, "resolved") != 0)
				return deadletter_usage(stderr, EXIT_USAGE);
			f.state = optarg;
			break;
		case 'l':
			f.limit = atoi(optarg);
			if (f.limit <= 0)
				return deadletter_usage(stderr, EXIT_USAGE);
			break;
		case 'j':
			ctl->json = 1;
			break;
		case 'h':
			return deadletter_usage(stdout, EXIT_SUCCESS);
		default:
			return deadletter_usage(stderr, EXIT_USAGE);
		}
	}
	if (optind != argc)
		return deadletter_usage(stderr, EXIT_USAGE);
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	rc = repair_dl_list(ctl->db, &f, &list);
	if (rc == REPAIR_BAD_INPUT) {
		fprintf(stderr, "oncegatectl: deadletter list: --since %s is neither a duration "
		        "(15m, 6h, 7d) nor a timestamp (2024-05-01T08:00:00Z)\n", f.since_ts);
		return EXIT_USAGE;
	}
	if (rc != REPAIR_OK) {
		fprintf(stderr, "oncegatectl: deadletter list: %s\n", db_error(ctl->db));
		return rc == REPAIR_UNAVAILABLE ? EXIT_UNAVAILABLE : EXIT_REFUSED;
	}
	if (ctl->json) {
		print_json(list);
		json_decref(list);
		return EXIT_SUCCESS;
	}
	printf("%-36s  %-7s %-9s %-14s %-9s %-8s %s\n", "DEAD LETTER", "AGE", "CLASS", "TARGET",
	       "EFFECT", "STATE", "KEY");
	json_array_foreach(list, i, o) {
		char age[32];

		fmt_age(json_integer_value(json_object_get(o, "age_seconds")), age, sizeof(age));
		printf("%-36s  %-7s %-9s %-14s %-9s %-8s %s\n", jstr(o, "dead_letter_id"), age,
		       jstr(o, "error_class"), jstr(o, "target"), jstr(o, "effect_state"),
		       jstr(o, "state"), jstr(o, "idempotency_key"));
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
		       (long long)json_integer_value(json_object_get(a, "attempt")), jstr(a, "kind"),
		       jstr(a, "started_at"),
		       (long long)json_integer_value(json_object_get(a, "duration_ms")),
		       jstr(a, "classification"), status, sent,
		       strncmp(jstr(a, "dispatcher"), "operator", 8) == 0 ? "op" : "disp",
		       jstr(a, "reason"));
		free(sent);
		free(status);
		if (strcmp(jstr(a, "kind"), "send") == 0)
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

static int
deadletter_show(struct ctl *ctl, const char *id)
{
	json_t *doc = NULL, *eff, *run, *acts, *a;
	enum repair_rc rc;
	char age[32];
	size_t i;

	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	rc = repair_dl_show(ctl->db, &ctl->cfg, id, &doc);
	if (rc == REPAIR_NOT_FOUND) {
		fprintf(stderr, "oncegatectl: deadletter show: no dead letter has the id %s (as "
		        "its own id or its effect's)\n", id);
		return EXIT_REFUSED;
	}
	if (rc != REPAIR_OK) {
		fprintf(stderr, "oncegatectl: deadletter show: %s\n", db_error(ctl->db));
		return rc == REPAIR_UNAVAILABLE ? EXIT_UNAVAILABLE : EXIT_REFUSED;
	}
	if (ctl->json) {
		print_json(doc);
		json_decref(doc);
		return EXIT_SUCCESS;
	}
	eff = json_object_get(doc, "effect");
	run = json_object_get(doc, "run");
	fmt_age(json_integer_value(json_object_get(doc, "age_seconds")), age, sizeof(age));
	{
		char *corr = jtext(json_object_get(doc, "correlation_id"));
		char *wf = jtext(json_object_get(doc, "workflow_version"));
		char *contract = jtext(json_object_get(doc, "contract"));
		char *chash = jtext(json_object_get(doc, "contract_hash"));
		char *ledger = jtext(json_object_get(doc, "ledger_state"));
		char *evid = jtext(json_object_get(doc, "event_id"));
		char *pid = jtext(json_object_get(eff, "provider_id"));

		printf("dead letter      %s (%s, written %s, %s ago)\n", jstr(doc, "dead_letter_id"),
		       jstr(doc, "state"), jstr(doc, "created_at"), age);
		printf("effect           %s  %s -> %s  now %s%s\n", jstr(doc, "effect_id"),
		       jstr(eff, "type"), jstr(eff, "target"), jstr(eff, "state"),
		       json_is_true(json_object_get(eff, "known_undelivered"))
		               ? " (known not delivered)" : "");
		printf("event id         %s\n", evid);
		printf("correlation id   %s\n", corr);
		printf("workflow         %s\n", wf);
		printf("contract         %s (%s)\n", contract, chash);
		printf("payload          %s, ref %s (%s)\n", jstr(doc, "payload_hash"),
		       jstr(doc, "payload_ref"),
		       json_is_true(json_object_get(doc, "payload_kept")) ? "kept"
		                                                          : "purged by retention");
		printf("idempotency key  %s (client %s); provider key %s\n",
		       jstr(doc, "idempotency_key"), jstr(doc, "client"), jstr(doc, "provider_key"));
		printf("ledger state     %s when written; now %s (version %lld)\n", ledger,
		       jstr(run, "state"), (long long)json_integer_value(json_object_get(run, "version")));
		printf("failed           component %s, class %s, reason %s\n", jstr(doc, "component"),
		       jstr(doc, "error_class"), jstr(doc, "reason"));
		printf("provider id      %s\n", pid);
		printf("owner            %s\n", jstr(doc, "owner"));
		printf("next action      %s\n", jstr(doc, "next_action"));
		printf("retention until  %s\n", jstr(doc, "retention_until"));
		printf("replay count     %lld%s%s\n",
		       (long long)json_integer_value(json_object_get(doc, "replay_count")),
		       json_is_string(json_object_get(doc, "replayed_as")) ? ", replayed as " : "",
		       json_is_string(json_object_get(doc, "replayed_as")) ? jstr(doc, "replayed_as")
		                                                           : "");
		printf("resolution       %s", jstr(doc, "resolution"));
		if (json_is_string(json_object_get(doc, "resolved_by")))
			printf(" (by %s at %s)", jstr(doc, "resolved_by"), jstr(doc, "resolved_at"));
		printf("\n");
		free(corr);
		free(wf);
		free(contract);
		free(chash);
		free(ledger);
		free(evid);
		free(pid);
	}
	show_attempts(doc);
	acts = json_object_get(doc, "operator_actions");
	printf("\noperator actions (%zu)\n", json_array_size(acts));
	json_array_foreach(acts, i, a)
		printf("  %s  %-10s %-16s %s\n", jstr(a, "ts"), jstr(a, "operator"), jstr(a, "action"),
		       jstr(a, "reason"));
	json_decref(doc);
	return EXIT_SUCCESS;
}

int
ctl_deadletter(struct ctl *ctl, int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "list") == 0)
		return deadletter_list(ctl, argc - 1, argv + 1);
	if (argc >= 3 && strcmp(argv[1], "show") == 0) {
		int i;
		const char *id = NULL;

		for (i = 2; i < argc; i++) {
			if (strcmp(argv[i], "--json") == 0)
				ctl->json = 1;
			else if (id == NULL && argv[i][0] != '-')
				id = argv[i];
			else
				return deadletter_usage(stderr, EXIT_USAGE);
		}
		if (id == NULL)
			return deadletter_usage(stderr, EXIT_USAGE);
		return deadletter_show(ctl, id);
	}
	return deadletter_usage(argc >= 2 && strcmp(argv[1], "--help") == 0 ? stdout : stderr,
	                        argc >= 2 && strcmp(argv[1], "--help") == 0 ? EXIT_SUCCESS
	                                                                    : EXIT_USAGE);
}

/* --- the effect commands ------------------------------------------------------- */

struct effect_args {
	const char *target;        /* EFFECT (or KEY for reject) */
	const char *expect;
	const char *provider_id;
	const char *client;
	int delivered;             /* -1 not given, 0, 1 */
	bool help;
};

/* Parses [--reason T] [--operator N] [--expect S] [--json] and the extra
 * options of reconcile / reject; one positional argument. 0 or EXIT_USAGE. */
static int
effect_args(struct ctl *ctl, int argc, char **argv, struct act *a, struct effect_args *e)
{
	static const struct option opts[] = {
		{ "reason", required_argument, NULL, 'r' },
		{ "operator", required_argument, NULL, 'o' },
		{ "expect", required_argument, NULL, 'e' },
		{ "delivered", no_argument, NULL, 'D' },
		{ "not-delivered", no_argument, NULL, 'N' },
		{ "provider-id", required_argument, NULL, 'p' },
		{ "client", required_argument, NULL, 'c' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *op = NULL;
	int opt, bad = 0;

	memset(e, 0, sizeof(*e));
	e->delivered = -1;
	optind = 0;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'r':
			a->reason = optarg;
			break;
		case 'o':
			op = optarg;
			break;
		case 'e':
			e->expect = optarg;
			break;
		case 'D':
		case 'N':
			if (e->delivered != -1 && e->delivered != (opt == 'D'))
				bad = 1;
			e->delivered = opt == 'D';
			break;
		case 'p':
			e->provider_id = optarg;
			break;
		case 'c':
			e->client = optarg;
			break;
		case 'j':
			ctl->json = 1;
			break;
		case 'h':
			e->help = true;
			break;
		default:
			bad = 1;
		}
	}
	opterr = 1;
	a->op = operator_name(op);
	if (optind == argc - 1)
		e->target = argv[optind];
	else
		bad = 1;
	return bad ? EXIT_USAGE : 0;
}

/* Prints what a change did; the JSON form for scripts. */
static void
report(struct ctl *ctl, const char *outcome, const struct act *a, const struct repair_out *o)
{
	if (ctl->json) {
		json_t *v = json_pack("{s:s, s:s, s:s, s:I}", "outcome", outcome, "operator", a->op,
		                      "reason", a->reason, "action_id", (json_int_t)o->action_id);

		if (o->effect_id[0])
			json_object_set_new(v, "effect_id", json_string(o->effect_id));
		if (o->approval_id[0])
			json_object_set_new(v, "approval_id", json_string(o->approval_id));
		if (o->key[0])
			json_object_set_new(v, "idempotency_key", json_string(o->key));
		if (o->client_name[0])
			json_object_set_new(v, "client", json_string(o->client_name));
		if (o->provider_key[0])
			json_object_set_new(v, "provider_key", json_string(o->provider_key));
		if (o->from[0])
			json_object_set_new(v, "state_from", json_string(o->from));
		if (o->to[0])
			json_object_set_new(v, "state_to", json_string(o->to));
		if (o->run_from[0])
			json_object_set_new(v, "run_state_from", json_string(o->run_from));
		if (o->run_to[0])
			json_object_set_new(v, "run_state_to", json_string(o->run_to));
		if (o->dead_letter_id[0])
			json_object_set_new(v, "dead_letter_id", json_string(o->dead_letter_id));
		if (o->callback_id[0])
			json_object_set_new(v, "callback_effect_id", json_string(o->callback_id));
		if (strcmp(outcome, "rejected") == 0 && o->effect_id[0] == '\0')
			json_object_set_new(v, "effects_cancelled", json_integer(o->count));
		if (strcmp(outcome, "revoked") == 0)
			json_object_set_new(v, "still_pending", json_integer(o->count));
		print_json(v);
		json_decref(v);
	}
}

/* The decision-log line of a change. */
static void
log_change(struct ctl *ctl, const char *event, const struct act *a, const struct repair_out *o,
           const char *provider_id, const char *detail)
{
	struct log_fields f = { 0 };

	f.actor = a->op;
	f.reason = a->reason;
	f.client = o->client_name[0] ? o->client_name : NULL;
	f.key = o->key[0] ? o->key : NULL;
	f.effect_id = o->effect_id[0] ? o->effect_id : NULL;
	f.approval_id = o->approval_id[0] ? o->approval_id : NULL;
	f.target = o->target[0] ? o->target : NULL;
	f.state_from = o->from[0] ? o->from : NULL;
	f.state_to = o->to[0] ? o->to : NULL;
	f.provider_id = provider_id;
	f.detail = detail;
	ctl_log(ctl, LOG_LEVEL_NOTICE, event, &f);
}

static void
log_run(struct ctl *ctl, const char *event, const struct act *a, const struct repair_out *o)
{
	struct log_fields f = { 0 };

	if (o->run_to[0] == '\0')
		return;
	f.actor = a->op;
	f.reason = a->reason;
	f.client = o->client_name[0] ? o->client_name : NULL;
	f.key = o->key;
	f.effect_id = o->effect_id[0] ? o->effect_id : NULL;
	f.state_from = o->run_from;
	f.state_to = o->run_to;
	f.version = o->run_version;
	f.count = o->count;
	ctl_log(ctl, LOG_LEVEL_NOTICE, event, &f);
}

/* The common middle of the one-target commands, after effect_args
 * returned parsed: --help prints usage; a parse error or an option the
 * command does not take (misuse) is refused with usage and what it wants;
 * then --reason is checked and the database reached, and who is filled.
 * Returns -1 to go on, else the exit status. */
static int
effect_cmd_ready(struct ctl *ctl, struct act *a, const struct effect_args *e, int parsed,
                 bool misuse, const char *usage, const char *what, struct repair_who *who)
{
	int ex;

	if (e->help) {
		fputs(usage, stdout);
		return EXIT_SUCCESS;
	}
	if (parsed != 0 || misuse) {
		fputs(usage, stderr);
		return refuse(ctl, a, "usage", what, NULL, EXIT_USAGE);
	}
	if ((ex = check_reason(ctl, a)) != 0)
		return ex;
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	who->operator_name = a->op;
	who->reason = a->reason;
	return -1;
}

/* effect_args and effect_cmd_ready for a command that takes one target
 * and no option but --reason, --operator and --json. */
static int
plain_cmd_ready(struct ctl *ctl, int argc, char **argv, struct act *a, struct effect_args *e,
                const char *usage, const char *what, struct repair_who *who)
{
	int parsed = effect_args(ctl, argc, argv, a, e);

	return effect_cmd_ready(ctl, a, e, parsed,
	                        e->delivered != -1 || e->provider_id != NULL ||
	                            e->client != NULL || e->expect != NULL,
	                        usage, what, who);
}

static const char reconcile_usage[] =
	"usage: oncegatectl reconcile EFFECT (--delivered --provider-id ID | --not-delivered) "
	"--reason TEXT [--expect STATE] [--operator NAME] [--json]\n"
	"  Records what you found out at the provider about an unknown or failed effect.\n"
	"  --delivered: the effect becomes completed with the provider's id (its run too, "
	"when it was the last one).\n"
	"  --not-delivered: the effect becomes failed and known not delivered, so `resume` "
	"may send it again with the same key.\n"
	"  --expect STATE: refuse unless the effect is still in the state you saw.\n";

int
ctl_reconcile(struct ctl *ctl, int argc, char **argv)
{
	struct act a = { "reconcile", NULL, NULL };
	struct effect_args e;
	struct repair_out out;
	struct repair_who who;
	enum repair_rc rc;
	int ex;

	memset(&out, 0, sizeof(out));
	ex = effect_args(ctl, argc, argv, &a, &e);
	ex = effect_cmd_ready(ctl, &a, &e, ex,
	                      e.delivered == -1 || e.client != NULL ||
	                          (e.delivered == 1) != (e.provider_id != NULL) ||
	                          (e.provider_id != NULL && *e.provider_id == '\0'),
	                      reconcile_usage, "say --delivered --provider-id ID or "
	                      "--not-delivered, and name one EFFECT", &who);
	if (ex >= 0)
		return ex;
	rc = repair_reconcile(ctl->db, e.target, e.delivered == 1, e.provider_id, e.expect, &who,
	                      &out);
	if (rc != REPAIR_OK)
		return refused(ctl, &a, rc, &out);
	log_change(ctl, "effect.reconciled", &a, &out, e.delivered == 1 ? e.provider_id : NULL,
	           e.delivered == 1 ? "operator: delivered" : "operator: not delivered");
	log_run(ctl, "run.completed", &a, &out);
	report(ctl, "reconciled", &a, &out);
	fprintf(stderr, "oncegatectl: effect %s %s -> %s (%s)%s%s\n", out.effect_id, out.from,
	        out.to, e.delivered == 1 ? "delivered" : "known not delivered",
	        out.run_to[0] ? "; run completed" : "",
	        e.delivered == 1 ? "" : "; `oncegatectl resume` sends it again with the same key");
	return EXIT_SUCCESS;
}

static const char resume_usage[] =
	"usage: oncegatectl resume EFFECT --reason TEXT [--expect STATE] [--operator NAME] "
	"[--json]\n"
	"       oncegatectl resume --select FILE --reason TEXT [--rate N/s] [--dry-run]\n"
	"       oncegatectl resume --dead-letters [--class C] [--target T] [--since D] "
	"--reason TEXT [--rate N/s] [--dry-run]\n"
	"       oncegatectl resume --job JOB --reason TEXT [--rate N/s]\n"
	"  Sends a failed effect again, with the same provider key, only when it is known "
	"not delivered:\n"
	"  reconciled --not-delivered, or no send since the last such finding may have reached "
	"the provider\n"
	"  (every one recorded request_sent false). The retry budget starts afresh.\n"
	"  Bulk: FILE has one effect or dead-letter id a line (# comments); --dead-letters "
	"selects the open\n"
	"  letters the filters match. --dry-run lists every item with its verdict and changes "
	"nothing; a real\n"
	"  run refuses the whole selection if any item would be refused, then stores it as a "
	"job and goes at\n"
	"  --rate (default 5/s). `oncegatectl stop JOB` or Ctrl-C stops it (exit 4); --job "
	"JOB continues it.\n";

/* --- bulk resume ------------------------------------------------------------------ */

static volatile sig_atomic_t g_interrupted;

static void
on_signal(int sig)
{
	g_interrupted = sig;
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct bulk_opts {
	const char *select, *cls, *target, *since, *rate_text;
	bool dead_letters, dry_run;
	long long job;
	double rate;
};

struct selection {
	struct repair_bulk_item *items;
	int n;
	char source[300];
};

static int
parse_rate(const char *s, double *rate)
{
	char *end;
	double r;

	errno = 0;
	r = strtod(s, &end);
	if (errno != 0 || end == s || !(r > 0) || r > BULK_RATE_MAX ||
	    (*end != '\0' && strcmp(end, "/s") != 0))
		return -1;
	*rate = r;
	return 0;
}

static int
sel_add(struct selection *sel, const char *id, char *err, size_t errlen)
{
	struct repair_bulk_item *p;

	if (sel->n >= BULK_ITEMS_MAX) {
		snprintf(err, errlen, "a selection holds at most %d ids", BULK_ITEMS_MAX);
		return -1;
	}
	if ((sel->n & (sel->n - 1)) == 0) {  /* 0, 1, 2, 4, …: double */
		p = realloc(sel->items, sizeof(*p) * (size_t)(sel->n == 0 ? 16 : sel->n * 2));
		if (p == NULL) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		sel->items = p;
	}
	memset(&sel->items[sel->n], 0, sizeof(sel->items[0]));
	sel->items[sel->n].seq = sel->n + 1;
	snprintf(sel->items[sel->n].given, sizeof(sel->items[0].given), "%s", id);
	sel->n++;
	return 0;
}

/* FILE: one id a line; blank lines and # comments skipped. */
static int
sel_read(const char *path, struct selection *sel, char *err, size_t errlen)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int lineno = 0, rc = 0, i;

	if (f == NULL) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
		return -1;
	}
	while (rc == 0 && (len = getline(&line, &cap, f)) != -1) {
		char *p = line, *e;

		lineno++;
		if (len > BULK_LINE_MAX) {
			snprintf(err, errlen, "%s line %d is longer than %d bytes", path, lineno,
			         BULK_LINE_MAX);
			rc = -1;
			break;
		}
		while (*p == ' ' || *p == '\t')
			p++;
		e = p + strlen(p);
		while (e > p && isspace((unsigned char)e[-1]))
			*--e = '\0';
		if (*p == '\0' || *p == '#')
			continue;
		if (!repair_is_uuid(p)) {
			snprintf(err, errlen, "%s line %d: \"%.60s\" is not an effect or dead-letter id "
			         "(a UUID)", path, lineno, p);
			rc = -1;
			break;
		}
		for (i = 0; i < sel->n; i++) {
			if (strcasecmp(sel->items[i].given, p) == 0) {
				snprintf(err, errlen, "%s line %d names %s again", path, lineno, p);
				rc = -1;
				break;
			}
		}
		if (rc == 0)
			rc = sel_add(sel, p, err, errlen);
	}
	free(line);
	if (f != stdin)
		fclose(f);
	return rc;
}

/* --dead-letters: the open letters the filters match, oldest first. */
static int
sel_letters(struct ctl *ctl, const struct bulk_opts *o, struct selection *sel, char *err,
            size_t errlen)
{
	struct repair_dl_filter f = { 0 };
	json_t *list = NULL, *v;
	enum repair_rc rc;
	size_t i;

	f.error_class = o->cls;
	f.target = o->target;
	f.state = "open";
	f.limit = BULK_ITEMS_MAX + 1;
	if (o->since != NULL && (f.since_seconds = parse_duration(o->since)) < 0) {
		f.since_seconds = 0;
		f.since_ts = o->since;
	}
	rc = repair_dl_list(ctl->db, &f, &list);
	if (rc == REPAIR_BAD_INPUT) {
		snprintf(err, errlen, "--since %s is neither a duration (15m, 6h, 7d) nor a "
		         "timestamp", o->since);
		return EXIT_USAGE;
	}
	if (rc != REPAIR_OK) {
		snprintf(err, errlen, "%s", db_error(ctl->db));
		return rc == REPAIR_UNAVAILABLE ? EXIT_UNAVAILABLE : EXIT_REFUSED;
	}
	if (json_array_size(list) > BULK_ITEMS_MAX) {
		json_decref(list);
		snprintf(err, errlen, "more than %d letters match: narrow the selection",
		         BULK_ITEMS_MAX);
		return EXIT_REFUSED;
	}
	json_array_foreach(list, i, v) {
		if (sel_add(sel, jstr(v, "dead_letter_id"), err, errlen) != 0) {
			json_decref(list);
			return EXIT_REFUSED;
		}
	}
	json_decref(list);
	snprintf(sel->source, sizeof(sel->source), "dead letters: open%s%s%s%s%s%s",
	         o->cls ? ", class " : "", o->cls ? o->cls : "", o->target ? ", target " : "",
	         o->target ? o->target : "", o->since ? ", since " : "",
	         o->since ? o->since : "");
	return 0;
}

static void
sel_print(struct ctl *ctl, const struct selection *sel, int ok, int refused)
{
	int i;

	if (ctl->json) {
		json_t *list = json_array(), *doc;

		for (i = 0; i < sel->n; i++) {
			const struct repair_bulk_item *it = &sel->items[i];

			json_array_append_new(list, json_pack(
				"{s:i, s:s, s:s?, s:s?, s:s?, s:s?, s:s?, s:s?, s:s, s:s}", "seq", it->seq,
				"id", it->given, "effect_id", it->effect_id[0] ? it->effect_id : NULL,
				"client", it->client_name[0] ? it->client_name : NULL,
				"key", it->key[0] ? it->key : NULL,
				"target", it->target[0] ? it->target : NULL,
				"type", it->type[0] ? it->type : NULL,
				"state", it->state[0] ? it->state : NULL,
				"verdict", it->ok ? "resume" : "refused", "detail", it->why));
		}
		doc = json_pack("{s:b, s:s, s:o, s:{s:i, s:i, s:i}}", "dry_run", 1, "source",
		                sel->source, "items", list, "totals", "items", sel->n,
		                "would_resume", ok, "refused", refused);
		print_json(doc);
		json_decref(doc);
		return;
	}
	printf("%-5s %-36s  %-36s  %-9s %-14s %-30s %s\n", "SEQ", "ID", "EFFECT", "STATE",
	       "TARGET", "KEY", "VERDICT");
	for (i = 0; i < sel->n; i++) {
		const struct repair_bulk_item *it = &sel->items[i];

		printf("%-5d %-36s  %-36s  %-9s %-14s %-30s %s%s\n", it->seq, it->given,
		       it->effect_id[0] ? it->effect_id : "-", it->state[0] ? it->state : "-",
		       it->target[0] ? it->target : "-", it->key[0] ? it->key : "-",
		       it->ok ? "" : "REFUSED: ", it->why);
	}
	printf("total %d: %d would be resumed, %d refused\n", sel->n, ok, refused);
}

static void
bulk_progress(bool tty, long long job, int done, int refused, int pending)
{
	if (!tty)
		return;
	printf("\r\033[Kjob %lld: %d resumed, %d refused, %d to go", job, done, refused, pending);
	fflush(stdout);
}

static int
exit_of_replay(enum replay_rc rc)
{
	return rc == REPLAY_OK ? EXIT_SUCCESS
	       : rc == REPLAY_UNAVAILABLE ? EXIT_UNAVAILABLE
	                                  : EXIT_REFUSED;
}

/* Runs the job's pending items at o->rate per second until done, stopped
 * (oncegatectl stop) or interrupted (SIGINT, SIGTERM). The job is taken. */
static int
bulk_run(struct ctl *ctl, struct act *a, const struct bulk_opts *o, long long job)
{
	bool tty = isatty(STDOUT_FILENO) && !ctl->json;
	struct repair_who who = { a->op, a->reason };
	struct sigaction sa;
	double t0 = now_s();
	int done = 0, refused_n = 0, pending = 0, n = 0, ex = EXIT_SUCCESS;
	enum replay_rc jrc;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: a sleep ends at once */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (replay_job_counts(ctl->db, job, &done, &refused_n, &pending) != REPLAY_OK)
		return EXIT_UNAVAILABLE;
	done = refused_n = 0;    /* what this run does */
	bulk_progress(tty, job, done, refused_n, pending);
	for (;;) {
		struct repair_out out;
		char effect[REPAIR_ID_LEN], detail[64];
		double due = t0 + (double)n / o->rate;
		bool stop = false;
		int seq;
		enum repair_rc rc;

		/* the rate limit: item n starts no earlier than t0 + n / rate */
		while (!g_interrupted && now_s() < due) {
			double left = due - now_s();
			struct timespec ts = { 0, (long)((left < 0.1 ? left : 0.1) * 1e9) };

			nanosleep(&ts, NULL);
		}
		if (g_interrupted) {
			if (tty)
				printf("\n");
			fprintf(stderr, "oncegatectl: job %lld interrupted (%s); what is done stays "
			        "done; continue with: oncegatectl resume --job %lld --reason TEXT\n",
			        job, g_interrupted == SIGINT ? "SIGINT" : "SIGTERM", job);
			jrc = replay_job_finish(ctl->db, job, false, a->op,
			                        g_interrupted == SIGINT ? "interrupted (SIGINT)"
			                                                : "interrupted (SIGTERM)");
			ex = jrc == REPLAY_OK ? EXIT_STOPPED : exit_of_replay(jrc);
			break;
		}
		if ((rc = repair_bulk_next(ctl->db, job, &seq, effect, &stop)) != REPAIR_OK) {
			ex = rc == REPAIR_UNAVAILABLE ? EXIT_UNAVAILABLE : EXIT_REFUSED;
			break;
		}
		if (stop) {
			if (tty)
				printf("\n");
			fprintf(stderr, "oncegatectl: job %lld stopped as asked (oncegatectl stop); "
			        "continue with: oncegatectl resume --job %lld --reason TEXT\n", job, job);
			jrc = replay_job_finish(ctl->db, job, false, a->op,
			                        "stopped as asked by oncegatectl stop");
			ex = jrc == REPLAY_OK ? EXIT_STOPPED : exit_of_replay(jrc);
			break;
		}
		if (seq == 0) {
			jrc = replay_job_finish(ctl->db, job, true, a->op, NULL);
			ex = jrc != REPLAY_OK ? exit_of_replay(jrc)
			     : refused_n > 0  ? EXIT_REFUSED
			                      : EXIT_SUCCESS;
			break;
		}
		memset(&out, 0, sizeof(out));
		rc = repair_bulk_resume(ctl->db, job, seq, effect, &who, &out);
		snprintf(detail, sizeof(detail), "job %lld item %d", job, seq);
		if (rc == REPAIR_OK) {
			done++;
			log_change(ctl, "effect.resumed", a, &out, NULL, detail);
			if (ctl->json) {
				json_t *v = json_pack("{s:I, s:i, s:s, s:s, s:s, s:s}", "job", (json_int_t)job,
				                      "seq", seq, "effect_id", out.effect_id, "key", out.key,
				                      "outcome", "resumed", "provider_key",
				                      out.provider_key);

				print_json(v);
				json_decref(v);
			}
		} else if (rc == REPAIR_UNAVAILABLE) {
			if (tty)
				printf("\n");
			fprintf(stderr, "oncegatectl: job %lld: the database went away; what is done "
			        "stays done; continue with: oncegatectl resume --job %lld\n", job, job);
			ex = EXIT_UNAVAILABLE;
			break;
		} else {
			char why[REPAIR_WHY_MAX + 80];

			refused_n++;
			if (rc == REPAIR_ERROR || out.why[0] == '\0')
				snprintf(out.why, sizeof(out.why), "%s", db_error(ctl->db));
			snprintf(why, sizeof(why), "%s: %s", detail, out.why);
			(void)refuse(ctl, a, refusal_code(rc), why, &out, EXIT_REFUSED);
			if (repair_bulk_refuse(ctl->db, job, seq, out.why) != REPAIR_OK) {
				ex = EXIT_UNAVAILABLE;
				break;
			}
		}
		pending--;
		n++;
		bulk_progress(tty, job, done, refused_n, pending);
		fflush(stdout);
	}
	if (tty && ex == EXIT_SUCCESS)
		printf("\n");
	{
		int d = 0, r = 0, p = 0;
		struct log_fields f = { .actor = a->op, .reason = a->reason };
		char detail[160];

		if (replay_job_counts(ctl->db, job, &d, &r, &p) == REPLAY_OK) {
			snprintf(detail, sizeof(detail), "job %lld: %d resumed, %d refused, %d pending",
			         job, d, r, p);
			f.detail = detail;
			f.count = d;
			fprintf(stderr, "oncegatectl: %s\n", detail);
		}
		ctl_log(ctl, LOG_LEVEL_NOTICE,
		        ex == EXIT_STOPPED ? "resume.job_stopped"
		        : p == 0 && ex != EXIT_UNAVAILABLE ? "resume.job_completed"
		                                             : "resume.job_interrupted",
		        &f);
	}
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	return ex;
}

static int
resume_bulk(struct ctl *ctl, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "select", required_argument, NULL, 'f' },
		{ "dead-letters", no_argument, NULL, 'L' },
		{ "class", required_argument, NULL, 'c' },
		{ "target", required_argument, NULL, 't' },
		{ "since", required_argument, NULL, 's' },
		{ "job", required_argument, NULL, 'J' },
		{ "rate", required_argument, NULL, 'R' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "reason", required_argument, NULL, 'r' },
		{ "operator", required_argument, NULL, 'o' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct act a = { "resume", NULL, NULL };
	struct bulk_opts o;
	struct selection sel;
	struct repair_who who;
	const char *op = NULL;
	char err[1024];
	int opt, bad = 0, ex, i, ok = 0, refused_n = 0;
	long long job = 0, cid;
	double rate;
	enum repair_rc rc;
	enum replay_rc jrc;

	memset(&o, 0, sizeof(o));
	memset(&sel, 0, sizeof(sel));
	o.rate = BULK_RATE_DEFAULT;
	optind = 0;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'f': o.select = optarg; break;
		case 'L': o.dead_letters = true; break;
		case 'c': o.cls = optarg; break;
		case 't': o.target = optarg; break;
		case 's': o.since = optarg; break;
		case 'R': o.rate_text = optarg; break;
		case 'n': o.dry_run = true; break;
		case 'r': a.reason = optarg; break;
		case 'o': op = optarg; break;
		case 'j': ctl->json = 1; break;
		case 'h':
			opterr = 1;
			fputs(resume_usage, stdout);
			return EXIT_SUCCESS;
		case 'J': {
			char *end;

			o.job = strtoll(optarg, &end, 10);
			if (*end != '\0' || o.job <= 0)
				bad = 1;
			break;
		}
		default:
			bad = 1;
		}
	}
	opterr = 1;
	a.op = operator_name(op);
	if (bad || optind != argc) {
		fputs(resume_usage, stderr);
		return refuse(ctl, &a, "usage", "bulk resume takes --select FILE, --dead-letters or "
		              "--job JOB, and no EFFECT", NULL, EXIT_USAGE);
	}
	if ((o.select != NULL) + o.dead_letters + (o.job > 0) != 1)
		return refuse(ctl, &a, "usage", "name one selection: --select FILE, --dead-letters "
		              "[filters] or --job JOB", NULL, EXIT_USAGE);
	if (!o.dead_letters && (o.cls != NULL || o.target != NULL || o.since != NULL))
		return refuse(ctl, &a, "usage", "--class, --target and --since filter "
		              "--dead-letters", NULL, EXIT_USAGE);
	if (o.cls != NULL && strcmp(o.cls, "permanent") != 0 && strcmp(o.cls, "exhausted") != 0 &&
	    strcmp(o.cls, "unknown") != 0)
		return refuse(ctl, &a, "usage", "--class is permanent, exhausted or unknown", NULL,
		              EXIT_USAGE);
	if (o.job > 0 && o.dry_run)
		return refuse(ctl, &a, "usage", "--dry-run is for a new selection; a job's list is "
		              "fixed (see it with --json)", NULL, EXIT_USAGE);
	if (o.rate_text != NULL && parse_rate(o.rate_text, &o.rate) != 0) {
		snprintf(err, sizeof(err), "--rate is N or N/s with 0 < N <= %g", BULK_RATE_MAX);
		return refuse(ctl, &a, "usage", err, NULL, EXIT_USAGE);
	}
	if (!o.dry_run && (ex = check_reason(ctl, &a)) != 0)
		return ex;
	if (o.dry_run && a.reason != NULL && strlen(a.reason) > REASON_MAX)
		return refuse(ctl, &a, "usage", "--reason is at most 1000 characters", NULL,
		              EXIT_USAGE);
	if (o.select != NULL) {
		snprintf(sel.source, sizeof(sel.source), "select: %s", o.select);
		if (sel_read(o.select, &sel, err, sizeof(err)) != 0) {
			free(sel.items);
			return refuse(ctl, &a, "usage", err, NULL, EXIT_USAGE);
		}
	}
	if (ctl_db(ctl) != 0) {
		free(sel.items);
		return EXIT_UNAVAILABLE;
	}
	who.operator_name = a.op;
	who.reason = a.reason;
	if (o.job > 0) {
		jrc = replay_job_take(ctl->db, o.job, "resume", true, a.op, a.reason, &cid, &rate,
		                      err, sizeof(err));
		if (jrc != REPLAY_OK)
			return refuse(ctl, &a, jrc == REPLAY_NOT_FOUND ? "not_found" : "wrong_state",
			              jrc == REPLAY_UNAVAILABLE ? db_error(ctl->db) : err, NULL,
			              exit_of_replay(jrc));
		if (o.rate_text == NULL)
			o.rate = rate;
		{
			struct log_fields f = { .actor = a.op, .reason = a.reason };
			char detail[128];

			snprintf(detail, sizeof(detail), "job %lld continued at %g/s", o.job, o.rate);
			f.detail = detail;
			ctl_log(ctl, LOG_LEVEL_NOTICE, "resume.job_resumed", &f);
			fprintf(stderr, "oncegatectl: %s\n", detail);
		}
		return bulk_run(ctl, &a, &o, o.job);
	}
	if (o.dead_letters && (ex = sel_letters(ctl, &o, &sel, err, sizeof(err))) != 0) {
		free(sel.items);
		return refuse(ctl, &a, ex == EXIT_USAGE ? "usage" : "error", err, NULL, ex);
	}
	if (sel.n == 0) {
		free(sel.items);
		return refuse(ctl, &a, "not_found", "the selection is empty", NULL, EXIT_REFUSED);
	}
	rc = repair_bulk_check(ctl->db, sel.items, sel.n);
	if (rc != REPAIR_OK) {
		free(sel.items);
		return refuse(ctl, &a, refusal_code(rc), db_error(ctl->db), NULL,
		              rc == REPAIR_UNAVAILABLE ? EXIT_UNAVAILABLE : EXIT_REFUSED);
	}
	/* an effect named twice (by its id and its letter's): a usage error */
	for (i = 0; i < sel.n; i++) {
		int k;

		for (k = 0; k < i && sel.items[i].effect_id[0]; k++) {
			if (strcmp(sel.items[i].effect_id, sel.items[k].effect_id) == 0) {
				snprintf(err, sizeof(err), "items %d (%s) and %d (%s) name the same effect "
				         "%s", sel.items[k].seq, sel.items[k].given, sel.items[i].seq,
				         sel.items[i].given, sel.items[i].effect_id);
				free(sel.items);
				return refuse(ctl, &a, "usage", err, NULL, EXIT_USAGE);
			}
		}
		if (sel.items[i].ok)
			ok++;
		else
			refused_n++;
	}
	if (o.dry_run) {
		struct log_fields f = { .actor = a.op, .reason = a.reason, .count = sel.n };
		char detail[400];

		sel_print(ctl, &sel, ok, refused_n);
		snprintf(detail, sizeof(detail), "dry run of %s: %d items, %d would be resumed, %d "
		         "refused; nothing changed", sel.source, sel.n, ok, refused_n);
		f.detail = detail;
		ctl_log(ctl, LOG_LEVEL_INFO, "resume.dry_run", &f);
		free(sel.items);
		return refused_n > 0 ? EXIT_REFUSED : EXIT_SUCCESS;
	}
	if (refused_n > 0) {
		/* all or nothing at the start: a job runs only a list that checked */
		sel_print(ctl, &sel, ok, refused_n);
		free(sel.items);
		snprintf(err, sizeof(err), "%d of the selection's %d items would be refused (listed "
		         "above); fix the selection (--dry-run shows it) and run it again",
		         refused_n, ok + refused_n);
		return refuse(ctl, &a, "not_known_undelivered", err, NULL, EXIT_REFUSED);
	}
	rc = repair_bulk_create(ctl->db, sel.source, o.rate, &who, sel.items, sel.n, &job);
	free(sel.items);
	if (rc != REPAIR_OK)
		return refuse(ctl, &a, refusal_code(rc), db_error(ctl->db), NULL,
		              rc == REPAIR_UNAVAILABLE ? EXIT_UNAVAILABLE : EXIT_REFUSED);
	{
		struct log_fields f = { .actor = a.op, .reason = a.reason, .count = ok };
		char detail[400];

		snprintf(detail, sizeof(detail), "job %lld from %s: %d items at %g/s", job,
		         sel.source, ok, o.rate);
		f.detail = detail;
		ctl_log(ctl, LOG_LEVEL_NOTICE, "resume.job_created", &f);
	}
	fprintf(stderr, "oncegatectl: job %lld: %d items at %g/s; stop it with `oncegatectl stop "
	        "%lld --reason TEXT` (or Ctrl-C), continue with `oncegatectl resume --job %lld "
	        "--reason TEXT`\n", job, ok, o.rate, job, job);
	if (ctl->json)
		printf("{\"job\":%lld,\"items\":%d}\n", job, ok);
	fflush(stdout);
	jrc = replay_job_take(ctl->db, job, "resume", false, a.op, a.reason, &cid, &rate, err,
	                      sizeof(err));
	if (jrc != REPLAY_OK)
		return refuse(ctl, &a, "wrong_state", err, NULL, exit_of_replay(jrc));
	return bulk_run(ctl, &a, &o, job);
}

/* Is this a bulk resume (--select, --dead-letters or --job)? */
static bool
is_bulk(int argc, char **argv)
{
	int i;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			break;
		if (strncmp(argv[i], "--select", 8) == 0 || strcmp(argv[i], "--dead-letters") == 0 ||
		    strncmp(argv[i], "--job", 5) == 0)
			return true;
	}
	return false;
}

int
ctl_resume(struct ctl *ctl, int argc, char **argv)
{
	struct act a = { "resume", NULL, NULL };
	struct effect_args e;
	struct repair_out out;
	struct repair_who who;
	enum repair_rc rc;
	int ex;

	memset(&out, 0, sizeof(out));
	if (is_bulk(argc, argv))
		return resume_bulk(ctl, argc, argv);
	ex = effect_args(ctl, argc, argv, &a, &e);
	ex = effect_cmd_ready(ctl, &a, &e, ex,
	                      e.delivered != -1 || e.provider_id != NULL || e.client != NULL,
	                      resume_usage, "name one EFFECT", &who);
	if (ex >= 0)
		return ex;
	rc = repair_resume(ctl->db, e.target, e.expect, &who, &out);
	if (rc != REPAIR_OK)
		return refused(ctl, &a, rc, &out);
	log_change(ctl, "effect.resumed", &a, &out, NULL, out.provider_key);
	report(ctl, "resumed", &a, &out);
	fprintf(stderr, "oncegatectl: effect %s resumed: pending again with the same provider key "
	        "%s\n", out.effect_id, out.provider_key);
	return EXIT_SUCCESS;
}

static const char reject_usage[] =
	"usage: oncegatectl reject EFFECT|KEY --reason TEXT [--client NAME] [--expect STATE] "
	"[--operator NAME] [--json]\n"
	"  Terminal. EFFECT (pending or failed): cancelled, never sent after; its run "
	"failed_terminal.\n"
	"  KEY: the run failed_terminal, its unsent effects cancelled, its pending approval "
	"links revoked,\n"
	"  and a workflow waiting on the decision told `rejected`. --client names the client "
	"when several use the key.\n"
	"  Refused while an effect is being sent or unknown (reconcile it first).\n";

int
ctl_reject(struct ctl *ctl, int argc, char **argv)
{
	struct act a = { "reject", NULL, NULL };
	struct effect_args e;
	struct repair_out out;
	struct repair_who who;
	enum repair_rc rc;
	bool effect;
	int ex;

	memset(&out, 0, sizeof(out));
	ex = effect_args(ctl, argc, argv, &a, &e);
	ex = effect_cmd_ready(ctl, &a, &e, ex, e.delivered != -1 || e.provider_id != NULL,
	                      reject_usage, "name one EFFECT or KEY", &who);
	if (ex >= 0)
		return ex;
	/* A UUID names an effect (or its dead letter); a key that happens to
	 * look like one is reached with --client. */
	effect = repair_is_uuid(e.target) && e.client == NULL;
	rc = effect ? repair_reject_effect(ctl->db, e.target, e.expect, &who, &out)
	            : repair_reject_key(ctl->db, e.client, e.target, &who, &out);
	if (rc != REPAIR_OK)
		return refused(ctl, &a, rc, &out);
	if (effect) {
		log_change(ctl, "effect.rejected", &a, &out, NULL, "operator: rejected");
		log_run(ctl, strcmp(out.run_to, "completed") == 0 ? "run.completed" : "run.rejected",
		        &a, &out);
		fprintf(stderr, "oncegatectl: effect %s %s -> cancelled%s%s\n", out.effect_id,
		        out.from, out.run_to[0] ? "; run " : "", out.run_to);
	} else {
		log_run(ctl, "run.rejected", &a, &out);
		if (out.callback_id[0]) {
			struct log_fields f = { .client = out.client_name, .key = out.key,
				                .effect_id = out.callback_id, .target = "callback",
				                .decision = "rejected", .actor = a.op };

			ctl_log(ctl, LOG_LEVEL_INFO, "effect.enqueued", &f);
		}
		fprintf(stderr, "oncegatectl: run %s (client %s) %s -> failed_terminal; %d effect%s "
		        "cancelled%s\n", out.key, out.client_name, out.run_from, out.count,
		        out.count == 1 ? "" : "s",
		        out.callback_id[0] ? "; the workflow is told through its callback" : "");
	}
	report(ctl, "rejected", &a, &out);
	return EXIT_SUCCESS;
}

/* --- approval -------------------------------------------------------------------- */

static const char approval_usage[] =
	"usage: oncegatectl approval revoke ID --reason TEXT [--operator NAME] [--json]\n"
	"       oncegatectl [--json] approval list [--pending] [--limit N]\n"
	"  revoke: one approver's pending link stops working (its page answers 410); the "
	"run's other\n"
	"  links stay. Revoking the last one ends the run as an expired approval does:\n"
	"  failed_terminal, error_class approval_revoked, and a waiting workflow is told "
	"`expired`.\n"
	"  list: the pending challenges, longest waiting first.\n";

static int
approval_list(struct ctl *ctl, int argc, char **argv)
{
	json_t *list = NULL, *o;
	enum repair_rc rc;
	int i, limit = 0;
	size_t k;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--pending") == 0)
			continue;
		if (strcmp(argv[i], "--json") == 0)
			ctl->json = 1;
		else if (strcmp(argv[i], "--limit") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
			limit = atoi(argv[++i]);
		else {
			fputs(approval_usage, stderr);
			return EXIT_USAGE;
		}
	}
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	if ((rc = repair_approvals_pending(ctl->db, limit, &list)) != REPAIR_OK) {
		fprintf(stderr, "oncegatectl: approval list: %s\n", db_error(ctl->db));
		return rc == REPAIR_UNAVAILABLE ? EXIT_UNAVAILABLE : EXIT_REFUSED;
	}
	if (ctl->json) {
		print_json(list);
		json_decref(list);
		return EXIT_SUCCESS;
	}
	printf("%-36s  %-8s %-10s %-12s %-20s %s\n", "APPROVAL", "WAITING", "EXPIRES IN", "CLIENT",
	       "APPROVER", "KEY");
	json_array_foreach(list, k, o) {
		char wait[32], left[32];
		long long in = json_integer_value(json_object_get(o, "expires_in_seconds"));

		fmt_age(json_integer_value(json_object_get(o, "waiting_seconds")), wait, sizeof(wait));
		if (in <= 0)
			snprintf(left, sizeof(left), "expired");
		else
			fmt_age(in, left, sizeof(left));
		printf("%-36s  %-8s %-10s %-12s %-20s %s\n", jstr(o, "approval_id"), wait, left,
		       jstr(o, "client"), jstr(o, "approver"), jstr(o, "idempotency_key"));
	}
	printf("%zu pending\n", json_array_size(list));
	json_decref(list);
	return EXIT_SUCCESS;
}

static int
approval_revoke(struct ctl *ctl, int argc, char **argv)
{
	struct act a = { "approval revoke", NULL, NULL };
	struct effect_args e;
	struct repair_out out;
	struct repair_who who;
	enum repair_rc rc;
	int ex;

	memset(&out, 0, sizeof(out));
	ex = plain_cmd_ready(ctl, argc, argv, &a, &e, approval_usage, "name one approval ID", &who);
	if (ex >= 0)
		return ex;
	rc = repair_approval_revoke(ctl->db, e.target, &who, &out);
	if (rc != REPAIR_OK)
		return refused(ctl, &a, rc, &out);
	log_change(ctl, "approval.revoked", &a, &out, NULL, NULL);
	if (out.run_to[0]) {
		struct log_fields f = { .client = out.client, .key = out.key, .actor = a.op,
			                .reason = a.reason, .state_from = out.run_from,
			                .state_to = out.run_to, .version = out.run_version,
			                .decision = "expired", .error_class = "approval_revoked" };

		ctl_log(ctl, LOG_LEVEL_NOTICE, "run.approval_revoked", &f);
	}
	if (out.callback_id[0]) {
		struct log_fields f = { .client = out.client, .key = out.key,
			                .effect_id = out.callback_id, .target = "callback",
			                .decision = "expired", .actor = a.op };

		ctl_log(ctl, LOG_LEVEL_INFO, "effect.enqueued", &f);
	}
	report(ctl, "revoked", &a, &out);
	if (out.count > 0)
		fprintf(stderr, "oncegatectl: approval %s revoked; %d other link%s of the run still "
		        "pending\n", out.approval_id, out.count, out.count == 1 ? "" : "s");
	else if (out.run_to[0])
		fprintf(stderr, "oncegatectl: approval %s revoked; it was the last link of run %s: "
		        "the run is failed_terminal (approval_revoked)%s\n", out.approval_id,
		        out.key, out.callback_id[0] ? "; the workflow is told `expired`" : "");
	else
		fprintf(stderr, "oncegatectl: approval %s revoked; no link of run %s is pending any "
		        "more\n", out.approval_id, out.key);
	return EXIT_SUCCESS;
}

int
ctl_approval(struct ctl *ctl, int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "list") == 0)
		return approval_list(ctl, argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "revoke") == 0)
		return approval_revoke(ctl, argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "--help") == 0) {
		fputs(approval_usage, stdout);
		return EXIT_SUCCESS;
	}
	fputs(approval_usage, stderr);
	return EXIT_USAGE;
}

/* --- cancel ---------------------------------------------------------------------- */

static const char cancel_usage[] =
	"usage: oncegatectl cancel EFFECT --reason TEXT [--operator NAME] [--json]\n"
	"  Cancels an act_with_window effect that still waits for its not_before: it is never "
	"sent,\n"
	"  and its run becomes failed_terminal (error_class cancelled), as when the owning "
	"client\n"
	"  cancels with POST /v1/runs/{key}/cancel. After the window, or once the effect is "
	"being sent\n"
	"  or was sent, it is refused (exit 1) and nothing changes.\n";

int
ctl_cancel(struct ctl *ctl, int argc, char **argv)
{
	struct act a = { "cancel", NULL, NULL };
	struct effect_args e;
	struct repair_out out;
	struct repair_who who;
	enum repair_rc rc;
	int ex;

	memset(&out, 0, sizeof(out));
	ex = plain_cmd_ready(ctl, argc, argv, &a, &e, cancel_usage, "name one EFFECT", &who);
	if (ex >= 0)
		return ex;
	rc = repair_cancel_window(ctl->db, e.target, &who, &out);
	if (rc != REPAIR_OK)
		return refused(ctl, &a, rc, &out);
	log_change(ctl, "effect.cancelled", &a, &out, NULL, "operator: cancelled in its window");
	log_run(ctl, "run.cancelled", &a, &out);
	report(ctl, "cancelled", &a, &out);
	fprintf(stderr, "oncegatectl: effect %s cancelled before its window ended (%s); run %s "
	        "failed_terminal (cancelled)\n", out.effect_id, out.not_before, out.key);
	return EXIT_SUCCESS;
}

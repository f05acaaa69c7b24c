/*
 * ctl_repair.c — the night shift's commands that repair one thing: prove
 * what happened to an effect (reconcile), send it again (resume), end it
 * (reject, cancel) or revoke an approval link, without sending anything
 * twice (docs/operate.md). Bulk resume is in ctl_resume.c, dead
 * letters are listed by ctl_deadletter.c.
 *
 * Every command that changes something needs --reason; the operator is the
 * database session's role. A change is logged (actor, reason, ids)
 * and recorded in operator_actions in the same transaction (repair.c). A
 * refusal changes nothing, says why on stderr, exits non-zero and is
 * logged too (`operator.refused`, error_class naming the kind of refusal),
 * so the decision log shows what was tried as well as what was done.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ctl_repair.h"
#include "gate.h"
#include "ledger.h"
#include "outbox.h"
#include "repair.h"


const char *
ctl_repair_code(enum og_rc rc)
{
	switch (rc) {
	case OG_NOT_FOUND:
		return "not_found";
	case OG_WRONG_STATE:
		return "wrong_state";
	case OG_NOT_UNDELIVERED:
		return "not_known_undelivered";
	case OG_CHANGED:
		return "changed_meanwhile";
	case OG_AMBIGUOUS:
		return "ambiguous_key";
	case OG_BAD_INPUT:
		return "usage";
	case OG_REPLAYED:
		return "replayed";
	case OG_WINDOW_CLOSED:
		return "window_closed";
	case OG_UNAVAILABLE:
		return "database_unavailable";
	default:
		return "error";
	}
}

/* What a log line says of the thing a change was about: each field of o
 * that is not empty. */
static void
about(struct log_fields *f, const struct repair_out *o)
{
	f->client = o->client_name[0] ? o->client_name : NULL;
	f->key = o->key[0] ? o->key : NULL;
	f->effect_id = o->effect_id[0] ? o->effect_id : NULL;
	f->approval_id = o->approval_id[0] ? o->approval_id : NULL;
	f->target = o->target[0] ? o->target : NULL;
	f->state_from = o->from[0] ? o->from : NULL;
}

int
ctl_repair_refuse(struct ctl *ctl, const struct ctl_repair_act *a, const char *code,
                  const char *why, const struct repair_out *out, int exit_code)
{
	char detail[REPAIR_WHY_MAX + 64];
	struct log_fields f = { 0 };

	snprintf(detail, sizeof(detail), "%s: %s", a->cmd, why);
	f.actor = a->op;
	f.reason = a->reason;
	f.error_class = code;
	f.detail = detail;
	if (out != NULL)
		about(&f, out);
	ctl_log(ctl, LOG_LEVEL_NOTICE, "operator.refused", &f);
	fprintf(stderr, "oncegatectl: %s refused: %s. Nothing was changed.\n", a->cmd, why);
	return exit_code;
}

/* The exit code (and the message and log line) of a refused repair. */
static int
refused(struct ctl *ctl, const struct ctl_repair_act *a, enum og_rc rc,
        struct repair_out *out)
{
	if (rc == OG_UNAVAILABLE)
		snprintf(out->why, sizeof(out->why), "database unavailable: %s", db_error(ctl->db));
	else if (rc == OG_ERROR || out->why[0] == '\0')
		snprintf(out->why, sizeof(out->why), "%s", db_error(ctl->db));
	return ctl_repair_refuse(ctl, a, ctl_repair_code(rc), out->why, out,
	                         ctl_exit(rc));
}

int
ctl_repair_check_reason(struct ctl *ctl, struct ctl_repair_act *a)
{
	if (a->reason == NULL || *a->reason == '\0')
		return ctl_repair_refuse(ctl, a, "usage", "--reason TEXT is required: say why, it is "
		                         "kept with the change", NULL, EXIT_USAGE);
	if (strlen(a->reason) > CTL_REPAIR_REASON_MAX)
		return ctl_repair_refuse(ctl, a, "usage", "--reason is at most 1000 characters", NULL,
		                         EXIT_USAGE);
	return 0;
}

/* --- the effect commands ------------------------------------------------------- */

struct effect_args {
	const char *target;        /* EFFECT (or KEY for reject) */
	const char *expect;
	const char *provider_id;
	const char *client;
	int delivered;             /* -1 not given, 0, 1 */
};

/* Parses [--reason T] [--expect S] and the extra options of reconcile /
 * reject; one positional argument. 0 or EXIT_USAGE (nothing printed):
 * also for both --delivered and --not-delivered. */
static int
effect_args(struct ctl *ctl, int argc, char **argv, struct ctl_repair_act *a,
            struct effect_args *e)
{
	bool yes = false, no = false;
	const struct ctl_opt opts[] = {
		{ "reason", CTL_OPT_TEXT, &a->reason, 0, NULL },
		{ "expect", CTL_OPT_TEXT, &e->expect, 0, NULL },
		{ "delivered", CTL_OPT_FLAG, &yes, 0, NULL },
		{ "not-delivered", CTL_OPT_FLAG, &no, 0, NULL },
		{ "provider-id", CTL_OPT_TEXT, &e->provider_id, 0, NULL },
		{ "client", CTL_OPT_TEXT, &e->client, 0, NULL },
		{ NULL, 0, NULL, 0, NULL },
	};
	int bad;

	memset(e, 0, sizeof(*e));
	bad = ctl_options(ctl, argc, argv, opts, true) != 0 || (yes && no);
	e->delivered = yes ? 1 : no ? 0 : -1;
	if (optind == argc - 1)
		e->target = argv[optind];
	else
		bad = 1;
	return bad ? EXIT_USAGE : 0;
}

/* What a change's JSON report shows of repair_out: each field not empty. */
static const struct {
	const char *name;
	size_t at;
} shown[] = {
	{ "effect_id", offsetof(struct repair_out, effect_id) },
	{ "approval_id", offsetof(struct repair_out, approval_id) },
	{ "key", offsetof(struct repair_out, key) },
	{ "client", offsetof(struct repair_out, client_name) },
	{ "provider_key", offsetof(struct repair_out, provider_key) },
	{ "state_from", offsetof(struct repair_out, from) },
	{ "state_to", offsetof(struct repair_out, to) },
	{ "run_state_from", offsetof(struct repair_out, run_from) },
	{ "run_state_to", offsetof(struct repair_out, run_to) },
	{ "dead_letter_id", offsetof(struct repair_out, dead_letter_id) },
	{ "callback_effect_id", offsetof(struct repair_out, callback_id) },
};

/* Prints what a change did; the JSON form for scripts. */
static void
report(struct ctl *ctl, const char *outcome, const struct ctl_repair_act *a,
       const struct repair_out *o)
{
	size_t i;

	if (ctl->json) {
		json_t *v = json_pack("{s:s, s:s?, s:s, s:I}", "outcome", outcome, "operator", a->op,
		                      "reason", a->reason, "action_id", (json_int_t)o->action_id);

		for (i = 0; i < sizeof(shown) / sizeof(shown[0]); i++)
			if (((const char *)o + shown[i].at)[0] != '\0')
				json_object_set_new(v, shown[i].name,
				                    json_string((const char *)o + shown[i].at));
		if (strcmp(outcome, gate_outcome_name(GATE_OUTCOME_REJECTED)) == 0 &&
		    o->effect_id[0] == '\0')
			json_object_set_new(v, "effects_cancelled", json_integer(o->count));
		if (strcmp(outcome, gate_state_name(APPROVAL_REVOKED)) == 0)
			json_object_set_new(v, "still_pending", json_integer(o->count));
		ctl_print_json(v);
		json_decref(v);
	}
}

void
ctl_repair_log_change(struct ctl *ctl, const char *event, const struct ctl_repair_act *a,
                      const struct repair_out *o, const char *provider_id, const char *detail)
{
	struct log_fields f = { 0 };

	f.actor = a->op;
	f.reason = a->reason;
	about(&f, o);
	f.state_to = o->to[0] ? o->to : NULL;
	f.provider_id = provider_id;
	f.detail = detail;
	ctl_log(ctl, LOG_LEVEL_NOTICE, event, &f);
}

static void
log_run(struct ctl *ctl, const char *event, const struct ctl_repair_act *a,
        const struct repair_out *o)
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

/* A command that changes one thing named on its command line. */
struct one_cmd {
	const char *name;          /* in messages and the log */
	const char *what;          /* what a usage refusal says it wants */
	/* an option given that the command does not take */
	bool (*misuse)(const struct effect_args *e);
	/* the change, in the library: of the named thing alone (by_id), or
	 * with the command's options (change) */
	enum og_rc (*by_id)(struct db *db, const char *id, const struct repair_who *who,
	                    struct repair_out *out);
	enum og_rc (*change)(struct ctl *ctl, const struct effect_args *e,
	                     const struct repair_who *who, struct repair_out *out);
	/* what is logged and printed once it is done */
	void (*done)(struct ctl *ctl, const struct ctl_repair_act *a, const struct effect_args *e,
	             const struct repair_out *out);
};

/* Parses the command line; a parse error or an option
 * the command does not take is refused with usage and what it wants; then
 * --reason is checked, the database reached and the change made. */
static int
one_cmd_run(struct ctl *ctl, int argc, char **argv, const struct one_cmd *c)
{
	struct ctl_repair_act a = { c->name, NULL, NULL };
	struct effect_args e;
	struct repair_out out;
	struct repair_who who;
	enum og_rc rc;
	int ex;

	memset(&out, 0, sizeof(out));
	ex = effect_args(ctl, argc, argv, &a, &e);
	if (ex != 0 || c->misuse(&e)) {
		(void)ctl_usage(ctl);
		return ctl_repair_refuse(ctl, &a, "usage", c->what, NULL, EXIT_USAGE);
	}
	if ((ex = ctl_repair_check_reason(ctl, &a)) != 0)
		return ex;
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	a.op = ctl_operator(ctl);
	who.operator_name = a.op;
	who.reason = a.reason;
	rc = c->by_id != NULL ? c->by_id(ctl->db, e.target, &who, &out)
	                      : c->change(ctl, &e, &who, &out);
	if (rc != OG_OK)
		return refused(ctl, &a, rc, &out);
	c->done(ctl, &a, &e, &out);
	return EXIT_SUCCESS;
}

/* No option but --reason. */
static bool
plain_misuse(const struct effect_args *e)
{
	return e->delivered != -1 || e->provider_id != NULL || e->client != NULL ||
	       e->expect != NULL;
}

/* --- reconcile ------------------------------------------------------------------- */


static bool
reconcile_misuse(const struct effect_args *e)
{
	return e->delivered == -1 || e->client != NULL ||
	       (e->delivered == 1) != (e->provider_id != NULL) ||
	       (e->provider_id != NULL && *e->provider_id == '\0');
}

static enum og_rc
reconcile_change(struct ctl *ctl, const struct effect_args *e, const struct repair_who *who,
                 struct repair_out *out)
{
	return repair_reconcile(ctl->db, e->target, e->delivered == 1, e->provider_id, e->expect,
	                        who, out);
}

static void
reconcile_done(struct ctl *ctl, const struct ctl_repair_act *a, const struct effect_args *e,
               const struct repair_out *out)
{
	ctl_repair_log_change(ctl, "effect.reconciled", a, out,
	                      e->delivered == 1 ? e->provider_id : NULL,
	                      e->delivered == 1 ? "operator: delivered" : "operator: not delivered");
	log_run(ctl, "run.completed", a, out);
	report(ctl, "reconciled", a, out);
	fprintf(stderr, "oncegatectl: effect %s %s -> %s (%s)%s%s\n", out->effect_id, out->from,
	        out->to, e->delivered == 1 ? "delivered" : "known not delivered",
	        out->run_to[0] ? "; run completed" : "",
	        e->delivered == 1 ? "" : "; `oncegatectl resume` sends it again with the same key");
}

/* --- resume (one effect) ----------------------------------------------------------- */

static bool
resume_misuse(const struct effect_args *e)
{
	return e->delivered != -1 || e->provider_id != NULL || e->client != NULL;
}

static enum og_rc
resume_change(struct ctl *ctl, const struct effect_args *e, const struct repair_who *who,
              struct repair_out *out)
{
	return repair_resume(ctl->db, e->target, e->expect, who, out);
}

static void
resume_done(struct ctl *ctl, const struct ctl_repair_act *a, const struct effect_args *e,
            const struct repair_out *out)
{
	ctl_repair_log_change(ctl, "effect.resumed", a, out, NULL, out->provider_key);
	report(ctl, "resumed", a, out);
	fprintf(stderr, "oncegatectl: effect %s resumed: pending again with the same provider key "
	        "%s\n", out->effect_id, out->provider_key);
}

/* --- reject ---------------------------------------------------------------------- */


static bool
reject_misuse(const struct effect_args *e)
{
	return e->delivered != -1 || e->provider_id != NULL;
}

/* A UUID names an effect (or its dead letter); a key that happens to look
 * like one is reached with --client. */
static bool
reject_names_effect(const struct effect_args *e)
{
	return repair_is_uuid(e->target) && e->client == NULL;
}

static enum og_rc
reject_change(struct ctl *ctl, const struct effect_args *e, const struct repair_who *who,
              struct repair_out *out)
{
	if (reject_names_effect(e))
		return repair_reject_effect(ctl->db, e->target, e->expect, who, out);
	return repair_reject_key(ctl->db, e->client, e->target, who, out);
}

static void
reject_done(struct ctl *ctl, const struct ctl_repair_act *a, const struct effect_args *e,
            const struct repair_out *out)
{
	if (reject_names_effect(e)) {
		ctl_repair_log_change(ctl, "effect.rejected", a, out, NULL, "operator: rejected");
		log_run(ctl,
		        strcmp(out->run_to, ledger_state_name(RUN_COMPLETED)) == 0 ? "run.completed"
		                                                                     : "run.rejected",
		        a, out);
		fprintf(stderr, "oncegatectl: effect %s %s -> %s%s%s\n", out->effect_id, out->from,
		        outbox_state_name(EFFECT_CANCELLED), out->run_to[0] ? "; run " : "",
		        out->run_to);
	} else {
		log_run(ctl, "run.rejected", a, out);
		if (out->callback_id[0]) {
			struct log_fields f = { .client = out->client_name, .key = out->key,
				                .effect_id = out->callback_id, .target = "callback",
				                .actor = a->op };

			f.decision = gate_outcome_name(GATE_OUTCOME_REJECTED);

			ctl_log(ctl, LOG_LEVEL_INFO, "effect.enqueued", &f);
		}
		fprintf(stderr, "oncegatectl: run %s (client %s) %s -> %s; %d effect%s "
		        "cancelled%s\n", out->key, out->client_name, out->run_from,
		        ledger_state_name(RUN_FAILED_TERMINAL), out->count, out->count == 1 ? "" : "s",
		        out->callback_id[0] ? "; the workflow is told through its callback" : "");
	}
	report(ctl, gate_outcome_name(GATE_OUTCOME_REJECTED), a, out);
}

/* --- approval -------------------------------------------------------------------- */


static int
approval_list(struct ctl *ctl, int argc, char **argv)
{
	json_t *list = NULL, *o;
	enum og_rc rc;
	bool pending = false;
	int limit = 200;
	const struct ctl_opt opts[] = {
		{ gate_state_name(APPROVAL_PENDING), CTL_OPT_FLAG, &pending, 0, NULL },
		{ "limit", CTL_OPT_COUNT, &limit, 100000, NULL },
		{ NULL, 0, NULL, 0, NULL },
	};
	size_t k;
	int ex;

	if ((ex = ctl_begin(ctl, argc, argv, opts, 0)) != 0)
		return ex;
	if ((rc = gate_challenges(ctl->db, pending, limit, &list)) != OG_OK)
		return ctl_failed(ctl, "approval list", rc);
	if (ctl->json)
		return ctl_print_new(list);
	printf("%-36s  %-8s %-8s %-10s %-12s %-20s %s\n", "APPROVAL", "STATE", "AGE",
	       "EXPIRES IN", "CLIENT", "APPROVER", "KEY");
	json_array_foreach(list, k, o) {
		char wait[32], left[32];
		long long in = json_integer_value(json_object_get(o, "expires_in_seconds"));

		ctl_age(json_integer_value(json_object_get(o, "waiting_seconds")), wait, sizeof(wait));
		if (strcmp(ctl_jstr(o, "state"), gate_state_name(APPROVAL_PENDING)) != 0)
			snprintf(left, sizeof(left), "-");
		else if (in <= 0)
			snprintf(left, sizeof(left), "%s", gate_state_name(APPROVAL_EXPIRED));
		else
			ctl_age(in, left, sizeof(left));
		printf("%-36s  %-8s %-8s %-10s %-12s %-20s %s\n", ctl_jstr(o, "approval_id"),
		       ctl_jstr(o, "state"), wait, left, ctl_jstr(o, "client"),
		       ctl_jstr(o, "approver"), ctl_jstr(o, "key"));
	}
	printf("%zu %s\n", json_array_size(list),
	       pending ? gate_state_name(APPROVAL_PENDING) : "challenges");
	json_decref(list);
	return EXIT_SUCCESS;
}

static void
revoke_done(struct ctl *ctl, const struct ctl_repair_act *a, const struct effect_args *e,
            const struct repair_out *out)
{
	ctl_repair_log_change(ctl, "approval.revoked", a, out, NULL, NULL);
	if (out->run_to[0]) {
		struct log_fields f = { .client = out->client, .key = out->key, .actor = a->op,
			                .reason = a->reason, .state_from = out->run_from,
			                .state_to = out->run_to, .version = out->run_version,
			                .decision = gate_outcome_name(GATE_OUTCOME_EXPIRED),
			                .error_class = "approval_revoked" };

		ctl_log(ctl, LOG_LEVEL_NOTICE, "run.approval_revoked", &f);
	}
	if (out->callback_id[0]) {
		struct log_fields f = { .client = out->client, .key = out->key,
			                .effect_id = out->callback_id, .target = "callback",
			                .decision = gate_outcome_name(GATE_OUTCOME_EXPIRED),
			                .actor = a->op };

		ctl_log(ctl, LOG_LEVEL_INFO, "effect.enqueued", &f);
	}
	report(ctl, gate_state_name(APPROVAL_REVOKED), a, out);
	if (out->count > 0)
		fprintf(stderr, "oncegatectl: approval %s revoked; %d other link%s of the run still "
		        "pending\n", out->approval_id, out->count, out->count == 1 ? "" : "s");
	else if (out->run_to[0])
		fprintf(stderr, "oncegatectl: approval %s revoked; it was the last link of run %s: "
		        "the run is %s (approval_revoked)%s\n", out->approval_id, out->key,
		        ledger_state_name(RUN_FAILED_TERMINAL),
		        out->callback_id[0] ? "; the workflow is told `expired`" : "");
	else
		fprintf(stderr, "oncegatectl: approval %s revoked; no link of run %s is pending any "
		        "more\n", out->approval_id, out->key);
}

static void
resend_done(struct ctl *ctl, const struct ctl_repair_act *a, const struct effect_args *e,
            const struct repair_out *out)
{
	struct log_fields f = { .client = out->client_name, .key = out->key,
		                .approval_id = out->approval_id, .effect_id = out->effect_id,
		                .target = out->target, .actor = a->op, .reason = a->reason };

	(void)e;
	ctl_log(ctl, LOG_LEVEL_NOTICE, "approval.resent", &f);
	report(ctl, "resent", a, out);
	fprintf(stderr, "oncegatectl: approval %s: a new notice is queued (effect %s); its link "
	        "replaces the previous one when it is sent\n", out->approval_id, out->effect_id);
}


/* --- cancel ---------------------------------------------------------------------- */


static void
cancel_done(struct ctl *ctl, const struct ctl_repair_act *a, const struct effect_args *e,
            const struct repair_out *out)
{
	ctl_repair_log_change(ctl, "effect.cancelled", a, out, NULL,
	                      "operator: cancelled in its window");
	log_run(ctl, "run.cancelled", a, out);
	report(ctl, outbox_state_name(EFFECT_CANCELLED), a, out);
	fprintf(stderr, "oncegatectl: effect %s cancelled before its window ended (%s); run %s "
	        "%s (cancelled)\n", out->effect_id, out->not_before, out->key,
	        ledger_state_name(RUN_FAILED_TERMINAL));
}

/* --- the table ----------------------------------------------------------------- */

static const struct one_cmd one_cmds[] = {
	{ "reconcile", "say --delivered --provider-id ID or --not-delivered, and name one EFFECT",
	  reconcile_misuse, NULL, reconcile_change, reconcile_done },
	{ "resume", "name one EFFECT", resume_misuse, NULL, resume_change, resume_done },
	{ "reject", "name one EFFECT or KEY", reject_misuse, NULL, reject_change, reject_done },
	{ "cancel", "name one EFFECT", plain_misuse, repair_cancel_window, NULL, cancel_done },
	{ "approval revoke", "name one approval ID", plain_misuse, repair_approval_revoke, NULL,
	  revoke_done },
	{ "approval resend", "name one approval ID", plain_misuse, repair_approval_resend, NULL,
	  resend_done },
};

/* The command named group word ("approval " "revoke"), or NULL. */
static const struct one_cmd *
one_named(const char *group, const char *word)
{
	size_t i, n = strlen(group);

	for (i = 0; i < sizeof(one_cmds) / sizeof(one_cmds[0]); i++)
		if (strncmp(one_cmds[i].name, group, n) == 0 && strcmp(one_cmds[i].name + n, word) == 0)
			return &one_cmds[i];
	return NULL;
}

int
ctl_repair_one(struct ctl *ctl, int argc, char **argv)
{
	const struct one_cmd *c = one_named("", ctl->command);

	return c != NULL ? one_cmd_run(ctl, argc, argv, c) : ctl_usage(ctl);
}

int
ctl_repair_approval(struct ctl *ctl, int argc, char **argv)
{
	const struct one_cmd *c;

	if (argc >= 2 && strcmp(argv[1], "list") == 0)
		return approval_list(ctl, argc - 1, argv + 1);
	if (argc >= 2 && (c = one_named("approval ", argv[1])) != NULL)
		return one_cmd_run(ctl, argc - 1, argv + 1, c);
	return ctl_usage(ctl);
}

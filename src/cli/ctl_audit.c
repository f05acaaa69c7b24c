/*
 * ctl_audit.c — `explain` (processed? sent? who approved? which model?),
 * `report` (the weekly figures) and `purge` (payloads and outputs past
 * retention; hashes and decisions stay). The SQL is in src/lib/audit.c.
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "audit.h"
#include "ctl_audit.h"
#include "gate.h"
#include "metrics_report.h"

/* ---- explain --------------------------------------------------------------- */

static const char *
jtext(const json_t *o, const char *a, const char *b)
{
	const char *s = json_string_value(json_object_get(json_object_get(o, a), b));

	return s != NULL ? s : "-";
}

/* One table of effects (explain's own effects, or its notices): id, type,
 * target, state, sends, provider id and key. Nothing when empty. */
static void
print_effects(const char *title, const json_t *list)
{
	size_t i;
	json_t *v;

	if (json_array_size(list) == 0)
		return;
	printf("\n%s\n  %-36s %-18s %-12s %-10s %-5s %s\n", title, "ID", "TYPE", "TARGET",
	       "STATE", "SENDS", "PROVIDER ID");
	json_array_foreach(list, i, v) {
		printf("  %-36s %-18s %-12s %-10s %-5lld %s\n",
		       json_string_value(json_object_get(v, "effect_id")) ?: "",
		       json_string_value(json_object_get(v, "type")) ?: "",
		       json_string_value(json_object_get(v, "target")) ?: "",
		       json_string_value(json_object_get(v, "state")) ?: "",
		       (long long)json_integer_value(json_object_get(v, "sends")),
		       json_string_value(json_object_get(v, "provider_id")) ?: "-");
		printf("  %-36s provider key %s\n", "",
		       json_string_value(json_object_get(v, "provider_key")) ?: "-");
	}
}

/* The explanation as text: each question, its answer. */
static void
explain_print(const char *key, json_t *doc)
{
	const struct {
		const char *question, *member;
	} asked[] = {
		{ "Did we process this key?", "processed" },
		{ "Did we send?", "sent" },
		{ "Approvers told?", "told" },
		{ "Who approved?", gate_outcome_name(GATE_OUTCOME_APPROVED) },
		{ "Edited before approving?", "edited" },
		{ "Which model drafted it?", "model" },
	};
	json_t *v;
	size_t i;

	ctl_terminal_safe(doc);
	printf("%s (client %s)\n\n", key, json_string_value(json_object_get(doc, "client")) ?: "?");
	for (i = 0; i < sizeof(asked) / sizeof(asked[0]); i++)
		printf("%-27s%s\n", asked[i].question, jtext(doc, asked[i].member, "text"));
	printf("Payload                    %s (%s)\n",
	       json_is_true(json_object_get(json_object_get(doc, "processed"), "payload_kept"))
	           ? "kept"
	           : "purged by retention",
	       jtext(doc, "processed", "payload_hash"));
	printf("Model output               %s (%s)\n",
	       json_is_true(json_object_get(json_object_get(doc, "model"), "output_kept"))
	           ? "kept"
	           : "none or purged",
	       jtext(doc, "model", "output_hash"));
	json_array_foreach(json_object_get(doc, "replays"), i, v)
		printf("%-27s%s (%s by %s: %s)\n",
		       strcmp(json_string_value(json_object_get(v, "direction")) ?: "", "replay_of") == 0
		           ? "Replay of"
		           : "Replayed as",
		       json_string_value(json_object_get(v, "key")) ?: "?",
		       json_string_value(json_object_get(v, "at")) ?: "?",
		       json_string_value(json_object_get(v, "operator")) ?: "?",
		       json_string_value(json_object_get(v, "reason")) ?: "");
	print_effects("Effects", json_object_get(doc, "effects"));
	print_effects("Notices to approvers and the workflow (not the run's effect)",
	              json_object_get(doc, "notices"));
	printf("\nTimeline\n");
	json_array_foreach(json_object_get(doc, "timeline"), i, v)
		printf("  %-24s %-9s %-26s %-22s %s\n",
		       json_string_value(json_object_get(v, "ts")) ?: "",
		       json_string_value(json_object_get(v, "source")) ?: "",
		       json_string_value(json_object_get(v, "event")) ?: "",
		       json_string_value(json_object_get(v, "actor")) ?: "-",
		       json_string_value(json_object_get(v, "detail")) ?: "");
}

int
ctl_audit_explain(struct ctl *ctl, int argc, char **argv)
{
	const char *client = NULL, *key;
	const struct ctl_opt opts[] = {
		{ "client", CTL_OPT_TEXT, &client, 0, NULL },
		{ NULL, 0, NULL, 0, NULL },
	};
	char msg[512];
	json_t *doc = NULL;
	enum og_rc rc;
	int ex;

	if ((ex = ctl_begin(ctl, argc, argv, opts, 1)) != 0)
		return ex;
	key = argv[optind];
	rc = audit_explain(ctl->db, client, key, &doc, msg, sizeof(msg));
	if (rc == OG_NOT_FOUND) {
		/* "did we process this key?" has an answer here too: no */
		if (ctl->json) {
			json_t *no = json_pack("{s:s, s:{s:s, s:s}}", "key", key, "processed", "answer",
			                       "no", "text", msg);
			ctl_print_new(no);
		}
		fprintf(stderr, "oncegatectl: explain: %s\n", msg);
		return EXIT_REFUSED;
	}
	if (rc != OG_OK) {
		fprintf(stderr, "oncegatectl: explain: %s\n", msg);
		return ctl_exit(rc);
	}
	{
		struct log_fields f = { .key = key, .actor = ctl_operator(ctl) };

		ctl_log(ctl, LOG_LEVEL_INFO, "audit.explain", &f);
	}
	if (ctl->json) {
		ctl_print_new(doc);
		return EXIT_SUCCESS;
	}
	explain_print(key, doc);
	json_decref(doc);
	return EXIT_SUCCESS;
}

/* ---- report ---------------------------------------------------------------- */

static void
report_line(const char *label, const json_t *v)
{
	char *s;

	if (json_is_object(v)) {
		const char *k;
		json_t *x;
		bool any = false;

		printf("%-34s", label);
		json_object_foreach((json_t *)(uintptr_t)v, k, x) {
			printf("%s%s %lld", any ? ", " : "", k, (long long)json_integer_value(x));
			any = true;
		}
		printf("%s\n", any ? "" : "none");
		return;
	}
	s = json_is_null(v) ? NULL : canon_dumps(v, JSON_ENCODE_ANY);
	printf("%-34s%s\n", label, s != NULL ? s : "-");
	free(s);
}

int
ctl_audit_report(struct ctl *ctl, int argc, char **argv)
{
	static const struct {
		const char *name, *label;
	} rows[] = {
		{ "runs_claimed", "runs claimed (new keys)" },
		{ "runs_by_state", "runs claimed, by state now" },
		{ "reclaims", "reclaims (attempt > 1)" },
		{ "invalid_outputs", "invalid model outputs" },
		{ "failed_validation", "runs failed on validation" },
		{ "runs_rejected", "runs rejected by a person (not failures)" },
		{ "approvals_by_decision", "approvals by decision" },
		{ "approvals_expired", "approvals expired" },
		{ "approvals_pending", "approvals pending now" },
		{ "approval_wait_p50_s", "approval wait p50 (s)" },
		{ "approval_wait_p95_s", "approval wait p95 (s)" },
		{ "decisions", "runs decided (auto vs human)" },
		{ "effects_by_state", "effects by state" },
		{ "dead_letters_by_class", "dead letters by class" },
		{ "retry_exhaustions", "retry budgets exhausted" },
		{ "dead_letters_open", "dead letters open now" },
		{ "oldest_open_dead_letter_s", "oldest open dead letter (s)" },
		{ "replays", "replays" },
		{ "operator_actions", "operator actions" },
		{ "sends_stopped", "sends stopped (kill switch engaged)" },
		{ "blocked_sends", "sends blocked by the switch" },
	}, lifetime[] = {
		{ "duplicates_lifetime", "duplicate deliveries" },
		{ "claims_by_outcome_lifetime", "claims by outcome" },
	};
	const char *since = "7d";
	const struct ctl_opt opts[] = {
		{ "since", CTL_OPT_TEXT, &since, 0, NULL },
		{ NULL, 0, NULL, 0, NULL },
	};
	long long secs;
	json_t *doc;
	size_t i;

	if (ctl_options(ctl, argc, argv, opts, false) != 0)
		return EXIT_USAGE;
	if (optind != argc)
		return ctl_usage(ctl);
	if (ctl_time(ctl, "--since", since, &secs) != 0)
		return EXIT_USAGE;
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	if (metrics_report(ctl->db, secs, &doc) != OG_OK) {
		fprintf(stderr, "oncegatectl: report: %s\n", db_error(ctl->db));
		return EXIT_UNAVAILABLE;
	}
	if (ctl->json) {
		ctl_print_json(doc);
	} else {
		printf("oncegate report, %s to %s\n\n",
		       json_string_value(json_object_get(doc, "since")) ?: "?",
		       json_string_value(json_object_get(doc, "until")) ?: "?");
		for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
			report_line(rows[i].label, json_object_get(doc, rows[i].name));
		/* not per period: the responders' counters only ever add up */
		printf("\nlifetime totals (not for the period above; counted by the responders, "
		       "as GET /metrics shows them; last added %s)\n",
		       json_string_value(json_object_get(doc, "counters_updated_at")) ?: "never");
		for (i = 0; i < sizeof(lifetime) / sizeof(lifetime[0]); i++)
			report_line(lifetime[i].label, json_object_get(doc, lifetime[i].name));
	}
	json_decref(doc);
	return EXIT_SUCCESS;
}

/* ---- purge ----------------------------------------------------------------- */

int
ctl_audit_purge(struct ctl *ctl, int argc, char **argv)
{
	const char *reason = NULL, *op;
	struct audit_purge p;
	bool dry = false;
	long long ago = -1;
	const struct ctl_opt opts[] = {
		{ "older-than", CTL_OPT_TIME, &ago, 36500, NULL },
		{ "reason", CTL_OPT_TEXT, &reason, 0, NULL },
		{ "dry-run", CTL_OPT_FLAG, &dry, 0, NULL },
		{ NULL, 0, NULL, 0, NULL },
	};
	long days;
	enum og_rc rc;

	if (ctl_options(ctl, argc, argv, opts, false) != 0)
		return EXIT_USAGE;
	if (optind != argc)
		return ctl_usage(ctl);
	/* runs are purged by the day: a time within it counts whole */
	days = ago >= 0 ? (long)(ago / 86400) : ctl->cfg.retention_days;
	if (!dry && (reason == NULL || reason[0] == '\0'))
		return ctl_refuse(ctl, "purge", EXIT_USAGE, NULL, NULL, NULL,
		                  "--reason TEXT is required: it is recorded with the operator");
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	op = ctl_operator(ctl);
	rc = audit_purge(ctl->db, (int)days, dry, op, reason, &p);
	if (rc != OG_OK)
		return ctl_refuse(ctl, "purge", ctl_exit(rc), op, NULL, reason,
		                  "%s", db_error(ctl->db));
	{
		struct log_fields f = { .actor = op, .reason = reason, .count = p.runs };
		char detail[256];

		snprintf(detail, sizeof(detail), "%s runs finished more than %ld days ago: %lld runs, "
		         "%lld effect payloads, %lld approval copies, %lld attempt excerpts, "
		         "%lld dead letters past retention", dry ? "would purge" : "purged",
		         days, p.runs, p.effects, p.approvals, p.attempts, p.dead_letters);
		f.detail = detail;
		ctl_log(ctl, dry ? LOG_LEVEL_INFO : LOG_LEVEL_NOTICE,
		        dry ? "purge.dry_run" : "purge.done", &f);
	}
	if (ctl->json)
		ctl_print_new(json_pack("{s:b, s:i, s:I, s:I, s:I, s:I, s:I}", "dry_run", dry,
		                        "older_than_days", (int)days, "runs", (json_int_t)p.runs,
		                        "effects", (json_int_t)p.effects, "approvals",
		                        (json_int_t)p.approvals, "attempts", (json_int_t)p.attempts,
		                        "dead_letters", (json_int_t)p.dead_letters));
	else
		printf("%s (finished more than %ld days ago)\n  runs (payload, output, effect "
		       "payload)  %lld\n  effect payloads                       %lld\n  approval "
		       "copies of the effect          %lld\n  attempt evidence excerpts             "
		       "%lld\n  dead letters past retention           %lld\nHashes, states and "
		       "decisions are kept: `oncegatectl explain KEY` still answers.\n",
		       dry ? "Would purge (dry run, nothing changed)" : "Purged", days, p.runs,
		       p.effects, p.approvals, p.attempts, p.dead_letters);
	return EXIT_SUCCESS;
}

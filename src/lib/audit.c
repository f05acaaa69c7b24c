/*
 * audit.c — explain, report and the retention purge; see audit.h.
 *
 * Every answer is read from the rows the other modules wrote as they
 * decided (runs, run_events, approvals, effects, attempts, dead letters,
 * operator_actions, run_replays); nothing here keeps a state of its own.
 * The purge is the one write: it removes content, never a hash, a state or
 * a decision (the attempts', the dead letters' and its own operator_actions
 * row through their owners, outbox.c, deadletter.c and oplog.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* asprintf */
#endif
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit.h"
#include "deadletter.h"
#include "gate.h"
#include "jobs.h"
#include "ledger.h"
#include "metrics.h"
#include "notify.h"
#include "oplog.h"
#include "outbox.h"

static void
str(json_t *o, const char *name, const char *v)
{
	json_object_set_new(o, name, v != NULL ? json_string(v) : json_null());
}

static json_t *
sentence(const char *answer, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static json_t *
sentence(const char *answer, const char *fmt, ...)
{
	char text[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	return json_pack("{s:s, s:s}", "answer", answer, "text", text);
}

/* The messages oncegate sends about a run rather than for it: the
 * approvers' notices and the workflow's decision callback. They tell; they
 * are not the run's effect, so "Did we send?" never counts them. */
static bool
effect_is_notice(const json_t *e)
{
	const char *t = json_string_value(json_object_get(e, "type"));

	return t != NULL && (strcmp(t, NOTIFY_EFFECT_TYPE) == 0 ||
	                     strcmp(t, "decision.callback") == 0);
}

/* "Did we send?" when none of the run's own effects was enqueued: what the
 * run is waiting for, or why nothing will go out. */
static json_t *
answer_nothing_enqueued(const struct ledger_explain *run)
{
	const char *decision = run->decision;

	if (ledger_decision_parse(decision) == RUN_DECISION_REJECT)
		return sentence("no", "no: the run was rejected, nothing was enqueued");
	if (ledger_decision_parse(decision) == RUN_DECISION_EXPIRED)
		return sentence("no", "no: nobody decided before the approval ended, nothing was "
		                "enqueued");
	switch (run->state) {
	case RUN_AWAITING_HUMAN:
		return sentence("not_yet", "not yet: the run waits for a person's decision; nothing "
		                "is enqueued until it is approved");
	case RUN_PROCESSING:
		return sentence("not_yet", "not yet: the workflow holds the run (processing); "
		                "nothing is enqueued");
	default:
		return sentence("no", "no: nothing was enqueued (run %s)",
		                ledger_state_name(run->state));
	}
}

/* "Did we send?" from the run's own effects (notices apart): one effect is
 * enough for the answer, completed beats unknown beats queued beats failed
 * beats cancelled. */
static json_t *
answer_sent(const struct ledger_explain *run, const json_t *effects)
{
	static const enum effect_state order[] = { EFFECT_CANCELLED, EFFECT_FAILED,
		                                   EFFECT_PENDING, EFFECT_SENDING,
		                                   EFFECT_UNKNOWN, EFFECT_COMPLETED };
	size_t i;
	json_t *e, *best = NULL;
	int rank = -1;

	json_array_foreach(effects, i, e) {
		int s = outbox_state_parse(json_string_value(json_object_get(e, "state")));
		int k;

		if (effect_is_notice(e))
			continue;
		for (k = 0; k < 6; k++)
			if (s == (int)order[k] && k > rank) {
				rank = k;
				best = e;
			}
	}
	if (best == NULL)
		return answer_nothing_enqueued(run);
#define ES(n) (json_string_value(json_object_get(best, n)) ?: "-")
	switch (rank) {
	case 5:
		return sentence("yes", "yes: %s to %s completed at %s, provider id %s, after %lld "
		                "send attempt(s)", ES("type"), ES("target"), ES("completed_at"),
		                ES("provider_id"),
		                (long long)json_integer_value(json_object_get(best, "sends")));
	case 4:
		return sentence(outbox_state_name(EFFECT_UNKNOWN),
		                "unknown: %s to %s may or may not have happened; it waits for "
		                "reconciliation and is never resent automatically", ES("type"),
		                ES("target"));
	case 3:
	case 2:
		return sentence("not_yet", "not yet: %s to %s is queued (%s)", ES("type"),
		                ES("target"), ES("state"));
	case 1:
		return sentence("no", "no: %s to %s failed (%s) and was dead-lettered", ES("type"),
		                ES("target"), ES("dead_letter"));
	default:
		return sentence("no", "no: %s to %s was cancelled before it went out", ES("type"),
		                ES("target"));
	}
#undef ES
}

/* "Were the approvers told?": the notices apart from the run's effects
 * (how many were delivered, how many are still on their way). */
static json_t *
answer_told(const json_t *effects)
{
	size_t i, n = 0, done = 0, queued = 0;
	json_t *e;

	json_array_foreach(effects, i, e) {
		const char *name = json_string_value(json_object_get(e, "state"));
		int s = outbox_state_parse(name);

		if (!effect_is_notice(e) || name == NULL)
			continue;
		n++;
		if (s == EFFECT_COMPLETED)
			done++;
		else if (s == EFFECT_PENDING || s == EFFECT_SENDING)
			queued++;
	}
	if (n == 0)
		return sentence("none", "no notice or callback was sent about this run");
	return sentence(done > 0 ? "yes" : "no", "%zu notice(s) and callback(s) about the run: "
	                "%zu delivered, %zu queued, %zu not delivered; they are not the run's "
	                "effect", n, done, queued, n - done - queued);
}

/* Who corrected the draft before approving: the member names, never
 * their text. */
static json_t *
answer_edited(const struct ledger_explain *run)
{
	json_t *a;

	if (run->edited_by == NULL)
		return sentence("no", "no: it went as the model wrote it");
	a = sentence("yes", "yes: %s corrected %s at %s before approving", run->edited_by,
	             run->edited_fields ?: "?", run->edited_at ?: "?");
	str(a, "by", run->edited_by);
	str(a, "at", run->edited_at);
	str(a, "fields", run->edited_fields);
	str(a, "output_hash", run->edited_output_hash);
	return a;
}

/* The quorum, when the run needed more than one person or several voted:
 * who decided what, in order, appended to the answer. */
static json_t *
answer_votes(json_t *a, json_t *votes, int needed)
{
	const char *text = json_string_value(json_object_get(a, "text"));
	size_t i;
	json_t *v;
	char *t = NULL, *list = strdup("");
	bool via = false;

	/* a decision an API client recorded for a person says so */
	json_array_foreach(votes, i, v)
		via = via || json_object_get(v, "via") != NULL ||
		      json_object_get(v, "via_chat") != NULL;
	if (json_array_size(votes) > 0 && (needed > 1 || json_array_size(votes) > 1 || via) &&
	    text != NULL && list != NULL) {
		json_array_foreach(votes, i, v) {
			const char *through = json_string_value(json_object_get(v, "via"));
			const char *chat = json_string_value(json_object_get(v, "via_chat"));
			char *more = NULL;

			if (asprintf(&more, "%s%s%s %s%s%s at %s", list, i > 0 ? ", " : "",
			             json_string_value(json_object_get(v, "subject")) ?: "?",
			             json_string_value(json_object_get(v, "decision")) ?: "?",
			             through != NULL ? " via client " : chat != NULL ? " via " : "",
			             through ?: chat ?: "",
			             json_string_value(json_object_get(v, "at")) ?: "?") < 0)
				break;
			free(list);
			list = more;
		}
		if (asprintf(&t, "%s; %d approval(s) needed, votes: %s", text, needed, list) >= 0) {
			json_object_set_new(a, "text", json_string(t));
			free(t);
		}
	}
	free(list);
	json_object_set_new(a, "min_approvals", json_integer(needed));
	json_object_set_new(a, "votes", votes);
	return a;
}

static json_t *
answer_approved(const struct ledger_explain *run, const json_t *approvals)
{
	const char *d = run->decision, *by = run->decided_by, *at = run->decided_at;

	if (d == NULL) {
		if (run->state == RUN_AWAITING_HUMAN)
			return sentence(gate_state_name(APPROVAL_PENDING),
			                "nobody yet: %zu challenge(s) wait for a decision",
			                json_array_size(approvals));
		return sentence("none", "nobody: no decision was taken (run %s)",
		                ledger_state_name(run->state));
	}
	switch (ledger_decision_parse(d)) {
	case RUN_DECISION_APPROVE:
		return sentence("human", "%s approved it at %s", by ? by : "?", at ? at : "?");
	case RUN_DECISION_AUTO:
		return sentence("auto", "nobody: the contract's rules approved it automatically "
		                "(gate:auto) at %s", at ? at : "?");
	case RUN_DECISION_REJECT:
		return sentence(gate_outcome_name(GATE_OUTCOME_REJECTED),
		                "nobody: %s rejected it at %s", by ? by : "?", at ? at : "?");
	case RUN_DECISION_EXPIRED:
		if (ledger_error_parse(run->error_class) == RUN_ERROR_APPROVAL_REVOKED)
			return sentence(d, "nobody: every approval link was revoked before "
			                "anyone decided");
		break;
	}
	return sentence(d, "nobody: the approval %s", d);
}

/* The gate's sample draw (approve_by_exception), when the run has one:
 * the draw, the rate it met, and the verdict, added to the answer. */
static json_t *
answer_sample(const struct ledger_explain *run, json_t *a)
{
	const char *d = run->sample_draw, *r = run->sample_rate;
	const char *text = json_string_value(json_object_get(a, "text"));
	double draw, rate;
	char *t = NULL;
	bool sampled;

	if (d == NULL || r == NULL || text == NULL)
		return a;
	draw = strtod(d, NULL);
	rate = strtod(r, NULL);
	sampled = rate >= 1 || (rate > 0 && draw < rate);
	json_object_set_new(a, "sample_draw", json_real(draw));
	json_object_set_new(a, "sample_rate", json_real(rate));
	json_object_set_new(a, "sampled", json_boolean(sampled));
	if (asprintf(&t, "%s; the gate's sample drew %.6f against rate %g: %s", text, draw, rate,
	             sampled ? "sampled, a person decides" : "not sampled") >= 0) {
		json_object_set_new(a, "text", json_string(t));
		free(t);
	}
	return a;
}

static json_t *
answer_model(const struct ledger_explain *run)
{
	const char *m = run->model;
	json_t *model = m != NULL ? json_loads(m, 0, NULL) : NULL, *a;

	if (model == NULL)
		a = sentence("none", "no model output was accepted for this run");
	else
		a = sentence("known", "%s %s revision %s, under contract %s (%s), workflow %s",
		             json_string_value(json_object_get(model, "provider")) ?: "?",
		             json_string_value(json_object_get(model, "name")) ?: "?",
		             json_string_value(json_object_get(model, "revision")) ?: "?",
		             run->contract ?: "?", run->contract_hash ?: "?",
		             run->workflow_version ?: "?");
	json_object_set_new(a, "model", model != NULL ? model : json_null());
	str(a, "contract", run->contract);
	str(a, "contract_hash", run->contract_hash);
	str(a, "output_hash", run->output_hash);
	str(a, "workflow_version", run->workflow_version);
	json_object_set_new(a, "output_kept", json_boolean(run->output_kept));
	return a;
}

/* A member of an answer's row: the string at off in the owner's struct. */
struct member {
	const char *name;
	size_t off;
};

/* n structs of size bytes at v as an array of objects of the members m. */
static json_t *
array_of(const void *v, int n, size_t size, const struct member *m, size_t nm)
{
	json_t *a = json_array();
	int i;
	size_t k;

	for (i = 0; i < n; i++) {
		const char *row = (const char *)v + (size_t)i * size;
		json_t *o = json_object();

		for (k = 0; k < nm; k++)
			str(o, m[k].name, *(char *const *)(const void *)(row + m[k].off));
		json_array_append_new(a, o);
	}
	return a;
}

#define LINK(name, f) { name, offsetof(struct jobs_replay_link, f) }
static const struct member link_members[] = {
	LINK("direction", dir), LINK("key", other), LINK("at", at), LINK("operator", operator),
	LINK("reason", reason), LINK("payload_source", payload_source),
	LINK("start_state", start_state), LINK("job_id", job_id),
};
#undef LINK

#define EFFECT(name, f) { name, offsetof(struct outbox_audit_effect, f) }
static const struct member effect_members[] = {
	EFFECT("effect_id", id), EFFECT("type", effect_type), EFFECT("target", target),
	EFFECT("state", state), EFFECT("provider_id", provider_id),
	EFFECT("provider_key", provider_key), EFFECT("completed_at", completed_at),
	EFFECT("approval_id", approval_id), EFFECT("payload_hash", payload_hash),
	EFFECT("dead_letter", dead_letter),
};
#undef EFFECT

/* The run's effects and notices, with their sends and whether the payload
 * is kept. */
static json_t *
effects_array(const struct outbox_audit_effects *effects)
{
	json_t *a = array_of(effects->v, effects->n, sizeof(*effects->v), effect_members,
	                     sizeof(effect_members) / sizeof(effect_members[0]));
	int i;

	for (i = 0; i < effects->n; i++) {
		json_t *e = json_array_get(a, (size_t)i);

		json_object_set_new(e, "sends", json_integer(effects->v[i].sends));
		json_object_set_new(e, "payload_kept", json_boolean(effects->v[i].payload_kept));
	}
	return a;
}

#define EVENT(f) { #f, offsetof(struct ledger_event, f) }
static const struct member event_members[] = {
	EVENT(ts), EVENT(source), EVENT(event), EVENT(detail), EVENT(actor),
};
#undef EVENT

/* "processed": was the run claimed, and where is it now? */
static json_t *
answer_processed(const struct ledger_explain *run)
{
	const char *state = ledger_state_name(run->state);
	json_t *processed;

	processed = sentence("yes", "yes: claimed %lld time(s) since %s; now %s%s%s",
	                     run->claims, run->created_at, state, run->error_class ? " / " : "",
	                     run->error_class ?: "");
	str(processed, "state", state);
	str(processed, "created_at", run->created_at);
	str(processed, "updated_at", run->updated_at);
	str(processed, "payload_hash", run->payload_hash);
	str(processed, "correlation_id", run->correlation_id);
	str(processed, "trigger", run->trigger);
	str(processed, "reason", run->reason);
	json_object_set_new(processed, "attempt", json_integer(run->attempt));
	json_object_set_new(processed, "payload_kept", json_boolean(run->payload_kept));
	return processed;
}

/* What explain reads after the run: its effects and notices, challenges,
 * votes, replay links and timeline. */
struct explain_parts {
	json_t *effects, *approvals, *votes, *links, *timeline;
	int needed;
};

static void
explain_parts_clear(struct explain_parts *p)
{
	json_decref(p->effects);
	json_decref(p->approvals);
	json_decref(p->votes);
	json_decref(p->links);
	json_decref(p->timeline);
	memset(p, 0, sizeof(*p));
}

static enum og_rc
explain_read(struct db *db, long long client_id, const char *key, struct explain_parts *p)
{
	struct outbox_audit_effects effects = { 0 };
	struct jobs_replay_links links = { 0 };
	struct ledger_events events = { 0 };
	enum og_rc rc;

	p->needed = 1;
	if ((rc = outbox_audit(db, client_id, key, &effects)) != OG_OK)
		return rc;
	p->effects = effects_array(&effects);
	outbox_audit_effects_clear(&effects);
	if ((rc = gate_list(db, client_id, key, &p->approvals)) != OG_OK)
		return OG_ERROR;
	if ((rc = gate_votes(db, client_id, key, &p->votes, &p->needed)) != OG_OK)
		return rc;
	if ((rc = jobs_links(db, client_id, key, &links)) != OG_OK)
		return rc;
	p->links = array_of(links.v, links.n, sizeof(*links.v), link_members,
	                    sizeof(link_members) / sizeof(link_members[0]));
	jobs_replay_links_clear(&links);
	if ((rc = ledger_history(db, client_id, key, &events)) != OG_OK)
		return rc;
	p->timeline = array_of(events.v, events.n, sizeof(*events.v), event_members,
	                       sizeof(event_members) / sizeof(event_members[0]));
	ledger_events_clear(&events);
	return OG_OK;
}

/* The answers, from the run and the parts (taken). */
static json_t *
explain_doc(const char *key, const struct ledger_explain *run, struct explain_parts *p)
{
	json_t *doc = json_object(), *own = json_array(), *notices = json_array(), *e;
	size_t k;

	json_object_set_new(doc, "key", json_string(key));
	str(doc, "client", run->client);
	json_object_set_new(doc, "processed", answer_processed(run));
	json_object_set_new(doc, "sent", answer_sent(run, p->effects));
	json_object_set_new(doc, "told", answer_told(p->effects));
	json_object_set_new(doc, gate_outcome_name(GATE_OUTCOME_APPROVED),
	                    answer_votes(answer_sample(run, answer_approved(run, p->approvals)),
	                                 p->votes, p->needed));
	p->votes = NULL;
	json_object_set_new(doc, "edited", answer_edited(run));
	json_object_set_new(doc, "model", answer_model(run));
	json_array_foreach(p->effects, k, e)
		json_array_append(effect_is_notice(e) ? notices : own, e);
	json_object_set_new(doc, "effects", own);
	json_object_set_new(doc, "notices", notices);
	json_object_set_new(doc, "approvals", p->approvals);
	json_object_set_new(doc, "replays", p->links);
	json_object_set_new(doc, "timeline", p->timeline);
	p->approvals = p->links = p->timeline = NULL;
	return doc;
}

enum og_rc
audit_explain(struct db *db, const char *client, const char *key, json_t **out, char *msg,
              size_t msglen)
{
	struct ledger_explain run;
	struct explain_parts parts = { 0 };
	enum og_rc rc;
	int found;

	*out = NULL;
	if ((rc = ledger_audit(db, key, client, &run, &found)) != OG_OK) {
		/* the caller prints msg: never leave it unset */
		snprintf(msg, msglen, "%s", db_error(db));
		return rc;
	}
	if (found != 1) {
		snprintf(msg, msglen, found == 0
		                          ? "no: no run has the key \"%s\"%s (never claimed, or "
		                            "another client's)"
		                          : "the key \"%s\" exists for several API clients%s; name "
		                            "one with --client",
		         key, client ? " for that client" : "");
		return found == 0 ? OG_NOT_FOUND : OG_AMBIGUOUS;
	}
	if ((rc = explain_read(db, run.client_id, key, &parts)) == OG_OK) {
		*out = explain_doc(key, &run, &parts);
	} else {
		rc = rc == OG_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
		snprintf(msg, msglen, "%s", db_error(db));
	}
	explain_parts_clear(&parts);
	ledger_explain_clear(&run);
	return rc;
}

enum og_rc
audit_purge(struct db *db, int days, bool dry_run, const char *operator_name,
            const char *reason, struct audit_purge *out)
{
	struct ledger_purge lp = { 0 };
	enum db_rc rc;
	json_t *details = NULL;
	char *text = NULL;

	memset(out, 0, sizeof(*out));
	/* the content, the attempts' and the dead letters' excerpts and the
	 * operator_actions row go together or not at all */
	if (!dry_run && (rc = db_begin(db)) != DB_OK)
		return og_rc_of(rc);
	if ((rc = ledger_purge(db, days, dry_run, operator_name, &lp)) != DB_OK)
		goto fail;
	out->runs = lp.runs;
	out->effects = lp.effects;
	out->approvals = lp.approvals;
	/* the purged runs' effects lose their payload, their challenges the
	 * effect they showed */
	if (!dry_run &&
	    ((rc = outbox_purge_payloads(db, lp.clients, lp.keys, &out->effects)) != DB_OK ||
	     (rc = gate_purge_effects(db, lp.clients, lp.keys, &out->approvals)) != DB_OK))
		goto fail;
	if ((rc = outbox_purge_attempts(db, days, dry_run, &out->attempts)) != DB_OK ||
	    (rc = deadletter_purge(db, dry_run, &out->dead_letters)) != DB_OK)
		goto fail;
	ledger_purge_clear(&lp);
	if (dry_run)
		return OG_OK;
	details = json_pack("{s:i, s:I, s:I, s:I, s:I, s:I}", "older_than_days", days,
	                    "runs", (json_int_t)out->runs, "effects", (json_int_t)out->effects,
	                    "approvals", (json_int_t)out->approvals,
	                    "attempts", (json_int_t)out->attempts,
	                    "dead_letters", (json_int_t)out->dead_letters);
	text = details != NULL ? json_dumps(details, JSON_COMPACT) : NULL;
	json_decref(details);
	if (text == NULL) {
		db_rollback(db);
		return OG_ERROR;
	}
	{
		struct oplog_action act = { .action = "purge",
			                    .reason = reason, .details = text };

		rc = oplog_record(db, &act, NULL);
	}
	free(text);
	if (rc != DB_OK) {
		db_rollback(db);
		return og_rc_of(rc);
	}
	if ((rc = db_commit(db)) != DB_OK) {
		db_rollback(db);
		return og_rc_of(rc);
	}
	return OG_OK;
fail:
	ledger_purge_clear(&lp);
	if (!dry_run)
		db_rollback(db);
	memset(out, 0, sizeof(*out));
	return og_rc_of(rc);
}

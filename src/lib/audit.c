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
put(json_t *o, const char *name, const PGresult *res, int row, const char *col)
{
	const char *v = db_get(res, row, col);

	json_object_set_new(o, name, v != NULL ? json_string(v) : json_null());
}

static bool
truth(const PGresult *res, int row, const char *col)
{
	const char *v = db_get(res, row, col);

	return v != NULL && v[0] == 't';
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
answer_nothing_enqueued(const PGresult *run)
{
	const char *state = db_get(run, 0, "state"), *decision = db_get(run, 0, "decision");

	if (decision != NULL && strcmp(decision, "reject") == 0)
		return sentence("no", "no: the run was rejected, nothing was enqueued");
	if (decision != NULL && strcmp(decision, "expired") == 0)
		return sentence("no", "no: nobody decided before the approval ended, nothing was "
		                "enqueued");
	switch (ledger_state_parse(state)) {
	case RUN_AWAITING_HUMAN:
		return sentence("not_yet", "not yet: the run waits for a person's decision; nothing "
		                "is enqueued until it is approved");
	case RUN_PROCESSING:
		return sentence("not_yet", "not yet: the workflow holds the run (processing); "
		                "nothing is enqueued");
	default:
		return sentence("no", "no: nothing was enqueued (run %s)", state);
	}
}

/* "Did we send?" from the run's own effects (notices apart): one effect is
 * enough for the answer, completed beats unknown beats queued beats failed
 * beats cancelled. */
static json_t *
answer_sent(const PGresult *run, const json_t *effects)
{
	static const char *const order[] = { "cancelled", "failed", "pending", "sending",
		                             "unknown", "completed" };
	size_t i;
	json_t *e, *best = NULL;
	int rank = -1;

	json_array_foreach(effects, i, e) {
		const char *s = json_string_value(json_object_get(e, "state"));
		int k;

		if (effect_is_notice(e))
			continue;
		for (k = 0; k < 6; k++)
			if (s != NULL && strcmp(s, order[k]) == 0 && k > rank) {
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
		return sentence("unknown", "unknown: %s to %s may or may not have happened; it waits "
		                "for reconciliation and is never resent automatically", ES("type"),
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
		const char *s = json_string_value(json_object_get(e, "state"));

		if (!effect_is_notice(e) || s == NULL)
			continue;
		n++;
		if (strcmp(s, "completed") == 0)
			done++;
		else if (strcmp(s, "pending") == 0 || strcmp(s, "sending") == 0)
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
answer_edited(const PGresult *run)
{
	json_t *a;

	if (db_get(run, 0, "edited_by") == NULL)
		return sentence("no", "no: it went as the model wrote it");
	a = sentence("yes", "yes: %s corrected %s at %s before approving", db_get(run, 0, "edited_by"),
	             db_get(run, 0, "edited_fields") ?: "?", db_get(run, 0, "edited_at") ?: "?");
	put(a, "by", run, 0, "edited_by");
	put(a, "at", run, 0, "edited_at");
	put(a, "fields", run, 0, "edited_fields");
	put(a, "output_hash", run, 0, "edited_output_hash");
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
answer_approved(const PGresult *run, const json_t *approvals)
{
	const char *d = db_get(run, 0, "decision"), *by = db_get(run, 0, "decided_by");
	const char *at = db_get(run, 0, "decided_at"), *state = db_get(run, 0, "state");

	if (d == NULL) {
		if (ledger_state_parse(state) == RUN_AWAITING_HUMAN)
			return sentence("pending", "nobody yet: %zu challenge(s) wait for a decision",
			                json_array_size(approvals));
		return sentence("none", "nobody: no decision was taken (run %s)", state);
	}
	if (strcmp(d, "approve") == 0)
		return sentence("human", "%s approved it at %s", by ? by : "?", at ? at : "?");
	if (strcmp(d, "auto") == 0)
		return sentence("auto", "nobody: the contract's rules approved it automatically "
		                "(gate:auto) at %s", at ? at : "?");
	if (strcmp(d, "reject") == 0)
		return sentence("rejected", "nobody: %s rejected it at %s", by ? by : "?",
		                at ? at : "?");
	if (strcmp(d, "expired") == 0 && db_get(run, 0, "error_class") != NULL &&
	    strcmp(db_get(run, 0, "error_class"), "approval_revoked") == 0)
		return sentence(d, "nobody: every approval link was revoked before anyone decided");
	return sentence(d, "nobody: the approval %s", d);
}

/* The gate's sample draw (approve_by_exception), when the run has one:
 * the draw, the rate it met, and the verdict, added to the answer. */
static json_t *
answer_sample(const PGresult *run, json_t *a)
{
	const char *d = db_get(run, 0, "sample_draw"), *r = db_get(run, 0, "sample_rate");
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
answer_model(const PGresult *run)
{
	const char *m = db_get(run, 0, "model");
	json_t *model = m != NULL ? json_loads(m, 0, NULL) : NULL, *a;

	if (model == NULL)
		a = sentence("none", "no model output was accepted for this run");
	else
		a = sentence("known", "%s %s revision %s, under contract %s (%s), workflow %s",
		             json_string_value(json_object_get(model, "provider")) ?: "?",
		             json_string_value(json_object_get(model, "name")) ?: "?",
		             json_string_value(json_object_get(model, "revision")) ?: "?",
		             db_get(run, 0, "contract") ?: "?", db_get(run, 0, "contract_hash") ?: "?",
		             db_get(run, 0, "workflow_version") ?: "?");
	json_object_set_new(a, "model", model != NULL ? model : json_null());
	put(a, "contract", run, 0, "contract");
	put(a, "contract_hash", run, 0, "contract_hash");
	put(a, "output_hash", run, 0, "output_hash");
	put(a, "workflow_version", run, 0, "workflow_version");
	json_object_set_new(a, "output_kept", json_boolean(truth(run, 0, "output_kept")));
	return a;
}

/* Rows of res as an array of objects, one row each by fill. */
static json_t *
rows_array(const PGresult *res, void (*fill)(json_t *o, const PGresult *res, int i))
{
	json_t *a = json_array();
	int i;

	for (i = 0; i < PQntuples(res); i++) {
		json_t *o = json_object();

		fill(o, res, i);
		json_array_append_new(a, o);
	}
	return a;
}

static void
effect_row(json_t *e, const PGresult *res, int i)
{
	put(e, "effect_id", res, i, "id");
	put(e, "type", res, i, "effect_type");
	put(e, "target", res, i, "target");
	put(e, "state", res, i, "state");
	put(e, "provider_id", res, i, "provider_id");
	put(e, "provider_key", res, i, "provider_key");
	put(e, "completed_at", res, i, "completed_at");
	put(e, "approval_id", res, i, "approval_id");
	put(e, "payload_hash", res, i, "payload_hash");
	put(e, "dead_letter", res, i, "dead_letter");
	json_object_set_new(e, "sends", json_integer(db_get_ll(res, i, "sends")));
	json_object_set_new(e, "payload_kept", json_boolean(truth(res, i, "payload_kept")));
}

static void
link_row(json_t *l, const PGresult *res, int i)
{
	put(l, "direction", res, i, "dir");
	put(l, "key", res, i, "other");
	put(l, "at", res, i, "at");
	put(l, "operator", res, i, "operator");
	put(l, "reason", res, i, "reason");
	put(l, "payload_source", res, i, "payload_source");
	put(l, "start_state", res, i, "start_state");
	put(l, "job_id", res, i, "job_id");
}

static void
event_row(json_t *t, const PGresult *res, int i)
{
	put(t, "ts", res, i, "ts");
	put(t, "source", res, i, "source");
	put(t, "event", res, i, "event");
	put(t, "detail", res, i, "detail");
	put(t, "actor", res, i, "actor");
}

/* "processed": was the run claimed, and where is it now? */
static json_t *
answer_processed(const PGresult *run)
{
	json_t *processed;

	processed = sentence("yes", "yes: claimed %s time(s) since %s; now %s%s%s",
	                     db_get(run, 0, "claims"), db_get(run, 0, "created_at"),
	                     db_get(run, 0, "state"), db_get(run, 0, "error_class") ? " / " : "",
	                     db_get(run, 0, "error_class") ?: "");
	put(processed, "state", run, 0, "state");
	put(processed, "created_at", run, 0, "created_at");
	put(processed, "updated_at", run, 0, "updated_at");
	put(processed, "payload_hash", run, 0, "payload_hash");
	put(processed, "correlation_id", run, 0, "correlation_id");
	put(processed, "trigger", run, 0, "trigger");
	put(processed, "reason", run, 0, "reason");
	json_object_set_new(processed, "attempt", json_integer(db_get_ll(run, 0, "attempt")));
	json_object_set_new(processed, "payload_kept", json_boolean(truth(run, 0, "payload_kept")));
	return processed;
}

enum og_rc
audit_explain(struct db *db, const char *client, const char *key, json_t **out, char *msg,
              size_t msglen)
{
	PGresult *run = NULL, *res = NULL;
	long long client_id;
	json_t *doc = NULL, *effects = NULL, *approvals = NULL, *links = NULL, *timeline = NULL;
	json_t *processed, *votes = NULL;
	int needed = 1;
	enum og_rc arc = OG_ERROR, rc;

	*out = NULL;
	if ((rc = ledger_audit(db, key, client, &run)) != OG_OK) {
		/* the caller prints msg: never leave it unset */
		snprintf(msg, msglen, "%s", db_error(db));
		return rc;
	}
	if (PQntuples(run) != 1) {
		arc = PQntuples(run) == 0 ? OG_NOT_FOUND : OG_AMBIGUOUS;
		snprintf(msg, msglen, arc == OG_NOT_FOUND
		                          ? "no: no run has the key \"%s\"%s (never claimed, or "
		                            "another client's)"
		                          : "the key \"%s\" exists for several API clients%s; name "
		                            "one with --client",
		         key, client ? " for that client" : "");
		PQclear(run);
		return arc;
	}
	client_id = db_get_ll(run, 0, "client_id");

	if ((rc = outbox_audit(db, client_id, key, &res)) != OG_OK)
		goto fail;
	effects = rows_array(res, effect_row);
	PQclear(res);
	res = NULL;
	if (gate_list(db, client_id, key, &approvals) != OG_OK ||
	    (rc = gate_votes(db, client_id, key, &votes, &needed)) != OG_OK)
		goto fail;
	if ((rc = jobs_links(db, client_id, key, &res)) != OG_OK)
		goto fail;
	links = rows_array(res, link_row);
	PQclear(res);
	res = NULL;
	if ((rc = ledger_history(db, client_id, key, &res)) != OG_OK)
		goto fail;
	timeline = rows_array(res, event_row);
	PQclear(res);
	res = NULL;

	processed = answer_processed(run);

	doc = json_object();
	json_object_set_new(doc, "key", json_string(key));
	put(doc, "client", run, 0, "client");
	json_object_set_new(doc, "processed", processed);
	json_object_set_new(doc, "sent", answer_sent(run, effects));
	json_object_set_new(doc, "told", answer_told(effects));
	json_object_set_new(doc, "approved",
	                    answer_votes(answer_sample(run, answer_approved(run, approvals)), votes,
	                                 needed));
	votes = NULL;
	json_object_set_new(doc, "edited", answer_edited(run));
	json_object_set_new(doc, "model", answer_model(run));
	{
		json_t *own = json_array(), *notices = json_array(), *e;
		size_t k;

		json_array_foreach(effects, k, e)
			json_array_append(effect_is_notice(e) ? notices : own, e);
		json_object_set_new(doc, "effects", own);
		json_object_set_new(doc, "notices", notices);
		json_decref(effects);
	}
	json_object_set_new(doc, "approvals", approvals);
	json_object_set_new(doc, "replays", links);
	json_object_set_new(doc, "timeline", timeline);
	effects = approvals = links = timeline = NULL;
	*out = doc;
	arc = OG_OK;
	goto out;
fail:
	arc = rc == OG_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
	snprintf(msg, msglen, "%s", db_error(db));
out:
	json_decref(effects);
	json_decref(approvals);
	json_decref(votes);
	json_decref(links);
	json_decref(timeline);
	PQclear(res);
	PQclear(run);
	return arc;
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

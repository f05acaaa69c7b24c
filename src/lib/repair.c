/*
 * repair.c — dead letters and the operator's repairs; see repair.h.
 *
 * Lock order is the responder's and the dispatcher's: the run's row first,
 * then its effects. The dispatcher claims with SKIP LOCKED, so an effect
 * this module holds is simply not claimed; an effect the dispatcher holds
 * (sending) is never touched here.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deadletter.h"
#include "gate.h"
#include "jobs.h"
#include "ledger.h"
#include "notify.h"
#include "oplog.h"
#include "outbox.h"
#include "repair.h"
#include "repair_int.h"

/* --- statements ------------------------------------------------------------ */

/* --- bulk resume (sql/008): the job's items, resume_job_items ---------------- */

/* --- helpers --------------------------------------------------------------- */

bool
repair_is_uuid(const char *s)
{
	size_t i;

	if (s == NULL || strlen(s) != 36)
		return false;
	for (i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return false;
		} else if (!isxdigit((unsigned char)s[i])) {
			return false;
		}
	}
	return true;
}

void
repair_copy(char *dst, size_t n, const char *src)
{
	snprintf(dst, n, "%s", src != NULL ? src : "");
}

/* Fills out from what outbox_find found. */
static void
effect_read(struct repair_out *out, const struct outbox_found *f)
{
	repair_copy(out->effect_id, sizeof(out->effect_id), f->id);
	snprintf(out->client, sizeof(out->client), "%lld", f->client_id);
	repair_copy(out->client_name, sizeof(out->client_name), f->client_name);
	repair_copy(out->key, sizeof(out->key), f->key);
	repair_copy(out->from, sizeof(out->from), f->state);
	repair_copy(out->target, sizeof(out->target), f->target);
	repair_copy(out->type, sizeof(out->type), f->type);
	repair_copy(out->provider_key, sizeof(out->provider_key), f->provider_key);
	repair_copy(out->dead_letter_id, sizeof(out->dead_letter_id), f->dead_letter_id);
	repair_copy(out->not_before, sizeof(out->not_before), f->not_before);
}

/* One operator_actions row, inside the caller's transaction. */
enum og_rc
repair_record_action(struct db *db, const struct repair_who *who, const char *action,
                     struct repair_out *out, json_t *details)
{
	char *text = json_dumps(details, JSON_COMPACT | JSON_SORT_KEYS);
	struct oplog_action a = {
		action, who->reason,
		out->client[0] ? out->client : NULL, out->key[0] ? out->key : NULL,
		out->effect_id[0] ? out->effect_id : NULL,
		out->approval_id[0] ? out->approval_id : NULL, text,
	};
	enum db_rc drc;

	if (text == NULL)
		return OG_ERROR;
	drc = oplog_record(db, &a, &out->action_id);
	free(text);
	return og_rc_of(drc);
}

/* Resolves dead letters of the effects in ids (a PostgreSQL uuid[] text),
 * by the session's role. */
static enum og_rc
resolve_letters(struct db *db, const char *ids, const char *resolution)
{
	return og_rc_of(deadletter_resolve(db, ids, resolution));
}

/* Looks the effect up (by effect or dead-letter id) into a cleared out,
 * its state into *from, and locks its run (out->run_from). OG_NOT_FOUND
 * with why set. */
static enum og_rc
effect_begin(struct db *db, const char *effect, const char *expect, struct repair_out *out,
             int *from)
{
	struct ledger_locked run = { 0 };
	struct outbox_found found;
	enum og_rc rc;

	memset(out, 0, sizeof(*out));
	if (!repair_is_uuid(effect)) {
		snprintf(out->why, sizeof(out->why), "\"%s\" is not an effect or dead-letter id "
		         "(a UUID)", effect);
		return OG_NOT_FOUND;
	}
	if (db_begin(db) != DB_OK)
		return OG_UNAVAILABLE;
	if ((rc = outbox_find(db, effect, &found)) != OG_OK) {
		if (rc == OG_NOT_FOUND)
			snprintf(out->why, sizeof(out->why), "no effect or dead letter has the id %s",
			         effect);
		goto fail;
	}
	effect_read(out, &found);
	outbox_found_clear(&found);
	if (expect != NULL && strcmp(expect, out->from) != 0) {
		snprintf(out->why, sizeof(out->why), "the effect is %s now, not %s as expected: "
		         "look again (oncegatectl deadletter show %s)", out->from, expect,
		         out->effect_id);
		rc = OG_CHANGED;
		goto fail;
	}
	if ((rc = ledger_lock(db, atoll(out->client), out->key, &run)) != OG_OK) {
		if (rc == OG_NOT_FOUND)
			rc = OG_ERROR; /* a foreign key guarantees the run */
		goto fail;
	}
	repair_copy(out->run_from, sizeof(out->run_from), ledger_state_name(run.state));
	ledger_locked_clear(&run);
	*from = outbox_state_parse(out->from);
	return OG_OK;
fail:
	db_rollback(db);
	return rc;
}

enum og_rc
repair_finish(struct db *db, enum og_rc rc)
{
	if (rc == OG_OK) {
		enum db_rc c = db_commit(db);

		if (c == DB_OK)
			return OG_OK;
		rc = c == DB_UNAVAILABLE ? OG_UNAVAILABLE
		     : c == DB_CONFLICT  ? OG_CHANGED
		                         : OG_ERROR;
	}
	db_rollback(db);
	return rc;
}

/* out->run_to and out->run_version when the ledger moved the run to `to`
 * (version > 0). */
static enum og_rc
run_moved(struct repair_out *out, enum db_rc rc, long long version, enum run_state to)
{
	if (rc == DB_OK && version > 0) {
		repair_copy(out->run_to, sizeof(out->run_to), ledger_state_name(to));
		out->run_version = version;
	}
	return og_rc_of(rc);
}

/* Completes the run when this was its last open effect; out->run_to set
 * when it moved. */
static enum og_rc
complete_run(struct db *db, const struct repair_who *who, struct repair_out *out)
{
	char actor[256];
	long long v = 0;
	enum db_rc rc;

	snprintf(actor, sizeof(actor), "operator:%s", who->operator_name);
	rc = ledger_complete(db, out->client, out->key, actor, &v);
	return run_moved(out, rc, v, RUN_COMPLETED);
}

/* --- reads ------------------------------------------------------------------ */

/* --- changes ----------------------------------------------------------------- */

enum og_rc
repair_reconcile(struct db *db, const char *effect, bool delivered, const char *provider_id,
                 const char *expect, const struct repair_who *who, struct repair_out *out)
{
	int from;
	enum og_rc rc;
	char ids[REPAIR_ID_LEN + 2];
	const char *to = NULL;
	json_t *details = NULL;

	if ((rc = effect_begin(db, effect, expect, out, &from)) != OG_OK)
		return rc;
	if (from != EFFECT_UNKNOWN && from != EFFECT_FAILED) {
		snprintf(out->why, sizeof(out->why), "the effect is %s: only an unknown or failed "
		         "effect is reconciled%s", out->from,
		         from == EFFECT_SENDING ? " (a dispatcher is sending it now)"
		         : from == EFFECT_PENDING ? " (it is waiting to be sent)" : "");
		rc = OG_WRONG_STATE;
		goto out;
	}
	if ((rc = outbox_reconcile(db, out->effect_id, out->from, delivered, provider_id, &to)) !=
	    OG_OK) {
		if (rc == OG_CHANGED)
			snprintf(out->why, sizeof(out->why), "the effect changed while this ran: "
			         "look again (oncegatectl deadletter show %s)", out->effect_id);
		goto out;
	}
	repair_copy(out->to, sizeof(out->to), to);
	if (delivered && (rc = complete_run(db, who, out)) != OG_OK)
		goto out;
	snprintf(ids, sizeof(ids), "{%s}", out->effect_id);
	rc = resolve_letters(db, ids, delivered ? DEADLETTER_DELIVERED : DEADLETTER_NOT_DELIVERED);
	if (rc != OG_OK)
		goto out;
	details = json_pack("{s:s, s:s, s:s, s:s*, s:s*}", "finding",
	                    delivered ? "delivered" : "not_delivered", "state_from", out->from,
	                    "state_to", out->to, "provider_id", delivered ? provider_id : NULL,
	                    "run_to", out->run_to[0] ? out->run_to : NULL);
	rc = repair_record_action(db, who, "reconcile", out, details);
out:
	json_decref(details);
	return repair_finish(db, rc);
}

/* One resume; job > 0: the job's item seq is marked done in the same
 * transaction, or nothing happens. */
enum og_rc
repair_resume_one(struct db *db, const char *effect, const char *expect,
                  const struct repair_who *who, long long job, int seq, struct repair_out *out)
{
	int from;
	enum og_rc rc;
	char ids[REPAIR_ID_LEN + 2], replayed_as[REPAIR_KEY_MAX];
	json_t *details = NULL;
	bool callback;

	if ((rc = effect_begin(db, effect, expect, out, &from)) != OG_OK)
		return rc;
	if ((rc = jobs_replayed_as(db, atoll(out->client), out->key, replayed_as,
	                           sizeof(replayed_as))) != OG_OK)
		goto out;
	callback = strcmp(out->type, "decision.callback") == 0;
	if (from != EFFECT_FAILED) {
		snprintf(out->why, sizeof(out->why), "not known undelivered: the effect is %s%s",
		         out->from,
		         from == EFFECT_UNKNOWN
		                 ? "; find out whether the provider acted and run oncegatectl "
		                   "reconcile first"
		                 : from == EFFECT_COMPLETED ? " (it was delivered)"
		                 : from == EFFECT_CANCELLED ? " (it was rejected)"
		                                                        : " (nothing to resume)");
		rc = from == EFFECT_UNKNOWN ? OG_NOT_UNDELIVERED : OG_WRONG_STATE;
		goto out;
	}
	/* One event, at most one business effect: the replay carries it now. */
	if (replayed_as[0] != '\0') {
		snprintf(out->why, sizeof(out->why), "the run was replayed as \"%.120s\": the "
		         "event is that run's now, and an effect of the original is never sent again "
		         "(reject it to close it)", replayed_as);
		rc = OG_REPLAYED;
		goto out;
	}
	/* A business effect is resumed only while its run is approved; the
	 * workflow's decision callback is delivered whatever the decision. */
	if (!callback && strcmp(out->run_from, ledger_state_name(RUN_APPROVED)) != 0) {
		snprintf(out->why, sizeof(out->why), "the run is %s, not approved: its effects are "
		         "not sent any more", out->run_from);
		rc = OG_WRONG_STATE;
		goto out;
	}
	if ((rc = outbox_resume(db, out->effect_id, out->from)) == OG_CHANGED) {
		bool yes = false;
		long long sends = 0;

		rc = outbox_undelivered(db, out->effect_id, &yes, &sends);
		if (rc == OG_OK && !yes) {
			snprintf(out->why, sizeof(out->why), "not known undelivered: a send "
			         "attempt may have reached the provider (of %lld sends, one "
			         "did not record request_sent false); find out and run oncegatectl "
			         "reconcile first", sends);
			rc = OG_NOT_UNDELIVERED;
		} else if (rc == OG_OK || rc == OG_NOT_FOUND) {
			snprintf(out->why, sizeof(out->why), "the effect changed while this "
			         "ran: look again");
			rc = OG_CHANGED;
		}
		goto out;
	}
	if (rc != OG_OK)
		goto out;
	repair_copy(out->to, sizeof(out->to), outbox_state_name(EFFECT_PENDING));
	snprintf(ids, sizeof(ids), "{%s}", out->effect_id);
	if ((rc = resolve_letters(db, ids, DEADLETTER_RESUMED)) != OG_OK)
		goto out;
	details = json_pack("{s:s, s:s, s:s}", "state_from", out->from, "state_to",
	                    outbox_state_name(EFFECT_PENDING), "provider_key", out->provider_key);
	if (details != NULL && job > 0) {
		json_object_set_new(details, "job_id", json_integer(job));
		json_object_set_new(details, "job_item", json_integer(seq));
	}
	rc = repair_record_action(db, who, "resume", out, details);
	if (rc == OG_OK && job > 0 &&
	    (rc = jobs_resume_done(db, job, seq, out->effect_id)) == OG_CHANGED)
		snprintf(out->why, sizeof(out->why), "job %lld item %d is no longer pending "
		         "(done or refused already)", job, seq);
out:
	json_decref(details);
	return repair_finish(db, rc);
}

enum og_rc
repair_resume(struct db *db, const char *effect, const char *expect,
              const struct repair_who *who, struct repair_out *out)
{
	return repair_resume_one(db, effect, expect, who, 0, 0, out);
}

/* The run → failed_terminal from any of the states in `from` (1u << state). */
static enum og_rc
fail_run(struct db *db, const struct repair_who *who, unsigned from, struct repair_out *out)
{
	char actor[256];
	long long v = 0;
	enum db_rc rc;

	snprintf(actor, sizeof(actor), "operator:%s", who->operator_name);
	rc = ledger_reject(db, out->client, out->key, who->reason, actor, from, &v);
	return run_moved(out, rc, v, RUN_FAILED_TERMINAL);
}

enum og_rc
repair_reject_effect(struct db *db, const char *effect, const char *expect,
                     const struct repair_who *who, struct repair_out *out)
{
	int from;
	enum og_rc rc;
	char ids[REPAIR_ID_LEN + 2];
	json_t *details = NULL;
	bool callback;

	if ((rc = effect_begin(db, effect, expect, out, &from)) != OG_OK)
		return rc;
	callback = strcmp(out->type, "decision.callback") == 0;
	if (from != EFFECT_PENDING && from != EFFECT_FAILED) {
		snprintf(out->why, sizeof(out->why), "the effect is %s: %s", out->from,
		         from == EFFECT_UNKNOWN
		                 ? "the provider may have acted; reconcile it first (--delivered or "
		                   "--not-delivered), then reject"
		         : from == EFFECT_SENDING
		                 ? "a dispatcher is sending it now; look again in a minute"
		         : from == EFFECT_COMPLETED
		                 ? "it was delivered and cannot be taken back"
		                 : "it was cancelled already");
		rc = OG_WRONG_STATE;
		goto out;
	}
	if ((rc = outbox_reject(db, out->effect_id, out->from)) != OG_OK) {
		if (rc == OG_CHANGED)
			snprintf(out->why, sizeof(out->why), "the effect changed while this ran "
			         "(a dispatcher may have claimed it): look again");
		goto out;
	}
	repair_copy(out->to, sizeof(out->to), outbox_state_name(EFFECT_CANCELLED));
	/* Rejecting the workflow's notification does not reject the business
	 * decision: that run completes when nothing else is left. */
	rc = callback ? complete_run(db, who, out) : fail_run(db, who, 1u << RUN_APPROVED, out);
	if (rc != OG_OK)
		goto out;
	snprintf(ids, sizeof(ids), "{%s}", out->effect_id);
	if ((rc = resolve_letters(db, ids, DEADLETTER_REJECTED)) != OG_OK)
		goto out;
	details = json_pack("{s:s, s:s, s:s, s:s*}", "state_from", out->from, "state_to",
	                    outbox_state_name(EFFECT_CANCELLED), "run_from", out->run_from, "run_to",
	                    out->run_to[0] ? out->run_to : NULL);
	rc = repair_record_action(db, who, "reject", out, details);
out:
	json_decref(details);
	return repair_finish(db, rc);
}

/* The workflow waiting on a decision hears it (`rejected`, or `expired`
 * when nobody is left to decide), in the caller's transaction: the
 * callback of the run's round. */
static enum og_rc
enqueue_callback(struct db *db, const struct repair_who *who, const char *url,
                 const char *decision, int round, struct repair_out *out)
{
	char subject[256], hash[OUTBOX_HASH_LEN], nb[OUTBOX_TS_LEN], *payload = NULL;
	struct outbox_effect e;
	enum og_rc orc;

	snprintf(subject, sizeof(subject), "operator:%s", who->operator_name);
	if (outbox_callback_effect(&e, atoll(out->client), out->key, url, decision, subject, NULL,
	                           hash, &payload) != 0)
		return OG_ERROR;
	e.slot = round > 0 ? round - 1 : 0;
	orc = outbox_enqueue(db, &e, out->callback_id, nb);
	free(payload);
	return orc == OG_OK            ? OG_OK
	       : orc == OG_UNAVAILABLE ? OG_UNAVAILABLE
	                                   : OG_ERROR;
}

/* The one run with the key (of client_name, or of any client) into out. */
static enum og_rc
run_by_key(struct db *db, const char *client_name, const char *key, struct repair_out *out)
{
	struct ledger_key_clients res;
	enum og_rc rc;

	if ((rc = ledger_runs_by_key(db, key, client_name, &res)) != OG_OK)
		return rc;
	if (res.n == 0) {
		snprintf(out->why, sizeof(out->why), "no run has the key \"%s\"%s%s", key,
		         client_name != NULL ? " for client " : "",
		         client_name != NULL ? client_name : "");
		rc = OG_NOT_FOUND;
	} else if (res.n > 1) {
		snprintf(out->why, sizeof(out->why), "the key \"%s\" is used by several clients "
		         "(%s, %s, …): name one with --client NAME", key,
		         res.v[0].client_name ?: "?", res.v[1].client_name ?: "?");
		rc = OG_AMBIGUOUS;
	} else {
		snprintf(out->client, sizeof(out->client), "%lld", res.v[0].client_id);
		repair_copy(out->client_name, sizeof(out->client_name), res.v[0].client_name);
	}
	ledger_key_clients_clear(&res);
	return rc;
}

/* The ids (uuids: nothing to quote) as an SQL array literal; NULL when out
 * of memory. */
static char *
ids_literal(const json_t *ids)
{
	size_t n = 3, k;
	json_t *v;
	char *s;

	json_array_foreach(ids, k, v)
		n += strlen(json_string_value(v)) + 1;
	if ((s = malloc(n)) == NULL)
		return NULL;
	strcpy(s, "{");
	json_array_foreach(ids, k, v) {
		if (k > 0)
			strcat(s, ",");
		strcat(s, json_string_value(v));
	}
	strcat(s, "}");
	return s;
}

enum og_rc
repair_reject_key(struct db *db, const char *client_name, const char *key,
                  const struct repair_who *who, struct repair_out *out)
{
	struct ledger_locked run = { 0 };
	enum og_rc rc;
	json_t *cancelled = NULL, *revoked = NULL, *details = NULL;
	char *ids = NULL, *url = NULL;
	long long client_id;
	int sending = 0, unknown = 0;

	memset(out, 0, sizeof(*out));
	repair_copy(out->key, sizeof(out->key), key);
	if (db_begin(db) != DB_OK)
		return OG_UNAVAILABLE;
	if ((rc = run_by_key(db, client_name, key, out)) != OG_OK)
		goto out;
	client_id = atoll(out->client);
	if ((rc = ledger_lock(db, client_id, out->key, &run)) != OG_OK) {
		if (rc == OG_NOT_FOUND)
			rc = OG_ERROR;
		goto out;
	}
	repair_copy(out->run_from, sizeof(out->run_from), ledger_state_name(run.state));
	if (run.state == RUN_COMPLETED || run.state == RUN_FAILED_TERMINAL ||
	    run.state == RUN_REJECTED) {
		snprintf(out->why, sizeof(out->why), "the run is %s already: nothing to reject",
		         out->run_from);
		rc = OG_WRONG_STATE;
		goto out;
	}
	if (run.state == RUN_PROCESSING && !run.lease_over) {
		snprintf(out->why, sizeof(out->why), "the run is processing under a live lease: "
		         "the workflow is working on it; wait for its lease to run out");
		rc = OG_WRONG_STATE;
		goto out;
	}
	if (run.callback_url != NULL && run.state == RUN_AWAITING_HUMAN)
		url = strdup(run.callback_url);
	if ((rc = outbox_lock_run_effects(db, client_id, out->key, &sending, &unknown)) != OG_OK)
		goto out;
	if (sending > 0 || unknown > 0) {
		snprintf(out->why, sizeof(out->why), "%d effect%s of the run %s: %s",
		         sending + unknown, sending + unknown == 1 ? "" : "s",
		         sending > 0 ? "are being sent now" : "are unknown",
		         sending > 0 ? "look again in a minute"
		                     : "the provider may have acted; reconcile them first");
		rc = OG_WRONG_STATE;
		goto out;
	}
	if ((rc = outbox_reject_run(db, client_id, out->key, &cancelled)) != OG_OK)
		goto out;
	out->count = (int)json_array_size(cancelled);
	if ((rc = gate_revoke_run(db, client_id, out->key, &revoked)) != OG_OK)
		goto out;
	if ((rc = fail_run(db, who,
	                   1u << RUN_AWAITING_HUMAN | 1u << RUN_APPROVED |
	                       1u << RUN_FAILED_RETRYABLE | 1u << RUN_PROCESSING,
	                   out))
	    != OG_OK)
		goto out;
	if (out->run_to[0] == '\0') {
		snprintf(out->why, sizeof(out->why), "the run changed while this ran: look again");
		rc = OG_CHANGED;
		goto out;
	}
	if ((ids = ids_literal(cancelled)) == NULL) {
		rc = OG_ERROR;
		goto out;
	}
	if ((rc = resolve_letters(db, ids, DEADLETTER_REJECTED)) != OG_OK)
		goto out;
	if (url != NULL && (rc = enqueue_callback(db, who, url,
	                                          gate_outcome_name(GATE_OUTCOME_REJECTED),
	                                          run.round, out)) != OG_OK)
		goto out;
	details = json_pack("{s:s, s:s, s:O, s:O, s:s*}", "run_from", out->run_from, "run_to",
	                    ledger_state_name(RUN_FAILED_TERMINAL), "cancelled_effects", cancelled,
	                    "revoked_approvals", revoked,
	                    "callback_effect", out->callback_id[0] ? out->callback_id : NULL);
	rc = repair_record_action(db, who, "reject", out, details);
out:
	json_decref(details);
	json_decref(cancelled);
	json_decref(revoked);
	free(ids);
	free(url);
	ledger_locked_clear(&run);
	return repair_finish(db, rc);
}

/* The last open challenge of a run was revoked: nobody can decide it any
 * more, so it ends as an expired approval does (failed_terminal, decision
 * expired, error_class approval_revoked) and a waiting workflow hears
 * `expired`. A run with a decided challenge, or no longer awaiting a
 * person, is left alone. In the revoke's transaction. */
static enum og_rc
end_revoked(struct db *db, const struct repair_who *who, struct repair_out *out)
{
	struct ledger_run run = { 0 };
	char actor[256], *url = NULL;
	enum og_rc lrc;
	enum og_rc rc = OG_OK;

	snprintf(actor, sizeof(actor), "operator:%s", who->operator_name);
	lrc = ledger_end_undecided(db, atoll(out->client), out->key, "approval_revoked",
	                           "every approval link was revoked before anyone decided", actor,
	                           &run, &url);
	if (lrc == OG_OK) {
		repair_copy(out->run_from, sizeof(out->run_from), ledger_state_name(RUN_AWAITING_HUMAN));
		repair_copy(out->run_to, sizeof(out->run_to), ledger_state_name(RUN_FAILED_TERMINAL));
		out->run_version = run.version;
		if (url != NULL)
			rc = enqueue_callback(db, who, url, gate_outcome_name(GATE_OUTCOME_EXPIRED),
			                     run.round, out);
	} else if (lrc != OG_LEASE_LOST) {
		rc = lrc == OG_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
	}
	free(url);
	ledger_run_clear(&run);
	return rc;
}

/* The start of a repair of approval approval_id: *out cleared, the id
 * checked (OG_NOT_FOUND, and why, when it is no UUID), the transaction
 * begun (OG_UNAVAILABLE when it could not be). */
static enum og_rc
approval_begin(struct db *db, const char *approval_id, struct repair_out *out)
{
	memset(out, 0, sizeof(*out));
	if (!repair_is_uuid(approval_id)) {
		snprintf(out->why, sizeof(out->why), "\"%s\" is not an approval id (a UUID)",
		         approval_id);
		return OG_NOT_FOUND;
	}
	return db_begin(db) == DB_OK ? OG_OK : OG_UNAVAILABLE;
}

enum og_rc
repair_approval_revoke(struct db *db, const char *approval_id, const struct repair_who *who,
                       struct repair_out *out)
{
	struct gate_ref a = { 0 };
	enum og_rc rc;
	json_t *details = NULL;

	if ((rc = approval_begin(db, approval_id, out)) != OG_OK)
		return rc;
	if ((rc = gate_find_by_id(db, approval_id, &a)) != OG_OK) {
		if (rc == OG_NOT_FOUND)
			snprintf(out->why, sizeof(out->why), "no approval has the id %s", approval_id);
		goto out;
	}
	repair_copy(out->approval_id, sizeof(out->approval_id), a.id);
	snprintf(out->client, sizeof(out->client), "%lld", a.client_id);
	repair_copy(out->client_name, sizeof(out->client_name), a.client_name);
	repair_copy(out->key, sizeof(out->key), a.key);
	repair_copy(out->from, sizeof(out->from), gate_state_name(a.state));
	if (a.state != APPROVAL_PENDING || a.expired) {
		snprintf(out->why, sizeof(out->why), "the approval is %s: only a pending challenge "
		         "is revoked",
		         a.state == APPROVAL_PENDING ? gate_state_name(APPROVAL_EXPIRED) : out->from);
		rc = OG_WRONG_STATE;
		goto out;
	}
	if ((rc = gate_revoke(db, approval_id, &out->count)) != OG_OK) {
		if (rc == OG_CHANGED)
			snprintf(out->why, sizeof(out->why), "the approval was decided, voided or "
			         "expired while this ran: look again");
		goto out;
	}
	repair_copy(out->to, sizeof(out->to), gate_state_name(APPROVAL_REVOKED));
	if (out->count == 0 && (rc = end_revoked(db, who, out)) != OG_OK)
		goto out;
	details = json_pack("{s:s, s:s, s:i, s:s*, s:s*}", "state_from",
	                    gate_state_name(APPROVAL_PENDING), "state_to",
	                    gate_state_name(APPROVAL_REVOKED), "still_pending", out->count, "run_to",
	                    out->run_to[0] ? out->run_to : NULL, "callback_effect",
	                    out->callback_id[0] ? out->callback_id : NULL);
	rc = repair_record_action(db, who, "approval_revoke", out, details);
out:
	json_decref(details);
	gate_ref_clear(&a);
	return repair_finish(db, rc);
}

enum og_rc
repair_approval_resend(struct db *db, const char *approval_id, const struct repair_who *who,
                       struct repair_out *out)
{
	struct gate_notice n = { 0 };
	json_t *details = NULL;
	enum og_rc rc;

	if ((rc = approval_begin(db, approval_id, out)) != OG_OK)
		return rc;
	if ((rc = gate_notice(db, approval_id, &n)) != OG_OK) {
		if (rc == OG_NOT_PENDING) {
			snprintf(out->why, sizeof(out->why), "approval %s is not a pending challenge "
			         "whose approvers are told (gate.notify): nothing to resend", approval_id);
			rc = OG_WRONG_STATE;
		}
		goto out;
	}
	repair_copy(out->approval_id, sizeof(out->approval_id), n.id);
	snprintf(out->client, sizeof(out->client), "%lld", n.client_id);
	repair_copy(out->client_name, sizeof(out->client_name), n.client);
	repair_copy(out->key, sizeof(out->key), n.key);
	repair_copy(out->type, sizeof(out->type), NOTIFY_EFFECT_TYPE);
	repair_copy(out->target, sizeof(out->target),
	            json_string_value(json_object_get(n.notify, "target")));
	repair_copy(out->from, sizeof(out->from), outbox_state_name(EFFECT_PENDING));
	repair_copy(out->to, sizeof(out->to), outbox_state_name(EFFECT_PENDING));
	if ((rc = notify_enqueue(db, &n, NOTIFY_RESEND, out->effect_id)) != OG_OK)
		goto out;
	details = json_pack("{s:s, s:s}", "notice_effect", out->effect_id, "target", out->target);
	rc = repair_record_action(db, who, "approval_resend", out, details);
out:
	gate_notice_clear(&n);
	json_decref(details);
	return repair_finish(db, rc);
}

/* --- cancel inside the window ------------------------------------------------- */

enum og_rc
repair_cancel_window(struct db *db, const char *effect, const struct repair_who *who,
                     struct repair_out *out)
{
	int from;
	struct ledger_run run = { 0 };
	json_t *ids = NULL, *details = NULL, *v;
	enum og_rc rc;
	enum og_rc lrc;
	char actor[256];
	bool named = false;
	size_t i;

	if ((rc = effect_begin(db, effect, NULL, out, &from)) != OG_OK)
		return rc;
	if (from != EFFECT_PENDING) {
		snprintf(out->why, sizeof(out->why), "the effect is %s: only an effect still waiting "
		         "inside its cancellation window is cancelled%s", out->from,
		         from == EFFECT_SENDING || from == EFFECT_COMPLETED || from == EFFECT_UNKNOWN
		             ? " (it went out, or is going out)"
		             : "");
		rc = OG_WRONG_STATE;
		goto out;
	}
	/* the owning client's cancel, the same statements */
	if (outbox_cancel_window(db, atoll(out->client), out->key, &ids) != OG_OK) {
		rc = OG_UNAVAILABLE;
		goto out;
	}
	json_array_foreach(ids, i, v)
		named = named || strcmp(json_string_value(v), out->effect_id) == 0;
	if (!named) {
		snprintf(out->why, sizeof(out->why), "the effect's cancellation window is over "
		         "(not_before %s): it is due to be sent, or was never delayed; "
		         "`oncegatectl reject EFFECT` stops an effect that waits outside a window",
		         out->not_before[0] ? out->not_before : "?");
		rc = OG_WINDOW_CLOSED;
		goto out;
	}
	snprintf(actor, sizeof(actor), "operator:%s", who->operator_name);
	lrc = ledger_cancel_by(db, atoll(out->client), out->key, who->reason, actor, &run);
	if (lrc != OG_OK) {
		snprintf(out->why, sizeof(out->why), "the run is %s, not approved: look again",
		         out->run_from);
		rc = lrc == OG_UNAVAILABLE ? OG_UNAVAILABLE
		     : lrc == OG_LEASE_LOST ? OG_CHANGED
		                                : OG_ERROR;
		goto out;
	}
	repair_copy(out->to, sizeof(out->to), outbox_state_name(EFFECT_CANCELLED));
	repair_copy(out->run_to, sizeof(out->run_to), ledger_state_name(RUN_FAILED_TERMINAL));
	out->run_version = run.version;
	out->count = (int)json_array_size(ids);
	details = json_pack("{s:s, s:s, s:s, s:s, s:s, s:O}", "state_from",
	                    outbox_state_name(EFFECT_PENDING), "state_to",
	                    outbox_state_name(EFFECT_CANCELLED), "not_before", out->not_before,
	                    "run_from", out->run_from, "run_to", ledger_state_name(RUN_FAILED_TERMINAL),
	                    "cancelled_effects", ids);
	rc = repair_record_action(db, who, "cancel", out, details);
out:
	json_decref(details);
	json_decref(ids);
	ledger_run_clear(&run);
	return repair_finish(db, rc);
}

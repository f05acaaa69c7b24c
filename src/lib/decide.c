/*
 * decide.c — the output acceptance and the approval decision, each one
 * transaction composed of the table owners' functions (ledger, gate,
 * outbox). Whatever fails rolls the whole transaction back.
 */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "canon.h"
#include "contract.h"
#include "decide.h"
#include "digest.h"
#include "notify.h"
#include "token.h"

/* Canonical hash and text (malloc'd) of a JSON value as jansson holds it:
 * what the outbox stores and hashes for an effect's payload. */
static int
json_hash(const json_t *v, char hash[CANON_HASH_LEN], char **text)
{
	char *dumped = canon_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	char *canon = NULL;
	size_t n;

	*text = NULL;
	if (dumped == NULL || canon_json(CANON_AS_WRITTEN, dumped, strlen(dumped), &canon, &n) != CANON_OK) {
		free(dumped);
		return -1;
	}
	canon_hash(canon, n, hash);
	free(dumped);
	*text = canon;
	return 0;
}

/* ---- a valid output ---------------------------------------------------- */

/* The challenge of the contract's approver i, appended to d->approvals:
 * with its link when the contract tells nobody (the caller's answer is the
 * only place it ever appears), else with its notice queued (the dispatcher
 * mints the link the notice carries). */
static enum og_rc
output_challenge(struct db *db, struct decide_output *d, const json_t *decisions, size_t i)
{
	const struct ledger_output *lo = d->output;
	const struct contract *k = d->contract;
	const struct contract_gate *g = contract_gate(k);
	const struct contract_notify *n = contract_notify(k);
	char token[TOKEN_TEXT_LEN + 1], id[GATE_ID_LEN], expires[GATE_TS_LEN];
	unsigned char hash[32];
	enum og_rc rc = OG_OK;
	struct buf url;
	enum og_rc grc;

	if (token_new(token, hash) != 0) {
		d->detail = "the CSPRNG failed";
		return OG_ERROR;
	}
	grc = gate_create(db, lo->client_id, lo->key, g->approvers[i], decisions,
	                  lo->requested_by, g->separation_of_duties,
	                  g->expires_seconds, hash, lo->effect, lo->callback_url,
	                  g->min_approvals, id, expires);
	if (grc != OG_OK) {
		rc = grc == OG_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
		goto out;
	}
	if (n->entries != NULL || n->nescalate > 0) {
		const struct notify_challenge c = {
			.id = id, .client_id = lo->client_id, .key = lo->key,
			.approver = g->approvers[i], .requested_by = lo->requested_by,
			.expires_at = expires, .effect = lo->effect, .context = lo->context,
		};

		grc = notify_challenge(db, k, &c);
		if (grc != OG_OK) {
			rc = grc == OG_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
			goto out;
		}
	}
	if (n->entries != NULL) {
		/* This token is handed to nobody: the notice's own is minted
		 * right before it is sent. */
		json_array_append_new(d->approvals,
		                      json_pack("{s:s, s:s, s:s, s:b}", "approval_id", id, "approver",
		                                g->approvers[i], "expires_at", expires,
		                                "notified", 1));
		goto out;
	}
	/* The raw token leaves here once, in the link for the caller's answer,
	 * and is never stored or logged. */
	buf_init(&url, 4096);
	if (buf_printf(&url, "%s/approve/%s", d->public_url, token) != 0) {
		d->detail = "approval URL too long";
		rc = OG_ERROR;
	} else {
		json_array_append_new(d->approvals,
		                      json_pack("{s:s, s:s, s:s, s:s}", "approval_id", id, "approver",
		                                g->approvers[i], "expires_at", expires, "url",
		                                url.data));
		digest_wipe(url.data, url.len);
	}
	buf_free(&url);
out:
	digest_wipe(token, sizeof(token));
	return rc;
}

/* The effect into the outbox, after the contract's cancellation window. */
static enum og_rc
output_enqueue(struct db *db, struct decide_output *d, const char *payload, const char *hash)
{
	struct outbox_effect e = { 0 };
	enum og_rc orc;

	e.client_id = d->output->client_id;
	e.key = d->output->key;
	e.type = d->effect_type;
	e.target = d->effect_target;
	e.payload = payload;
	e.payload_hash = hash;
	e.delay_seconds = d->delay_seconds = contract_gate(d->contract)->window_seconds;
	orc = outbox_enqueue(db, &e, d->effect_id, d->not_before);
	return orc == OG_OK            ? OG_OK
	       : orc == OG_UNAVAILABLE ? OG_UNAVAILABLE
	                                   : OG_ERROR;
}

void
decide_output_clear(struct decide_output *d)
{
	json_decref(d->approvals);
	d->approvals = NULL;
}

enum og_rc
decide_output(struct db *db, struct decide_output *d, struct ledger_run *run)
{
	char hash[CANON_HASH_LEN];
	char *payload = NULL;
	json_t *decisions = NULL;
	enum og_rc rc;
	enum og_rc lrc;
	size_t i;

	d->approvals = NULL;
	d->effect_id[0] = d->not_before[0] = '\0';
	d->delay_seconds = 0;
	d->detail = NULL;
	if (json_hash(d->payload, hash, &payload) != 0) {
		d->detail = "effect could not be serialised";
		return OG_ERROR;
	}
	if (db_begin(db) != DB_OK) {
		rc = OG_UNAVAILABLE;
		goto out;
	}
	lrc = ledger_output_accept(db, d->output, d->human ? RUN_AWAITING_HUMAN : RUN_APPROVED,
	                           run);
	if (lrc != OG_OK) {
		rc = lrc == OG_LEASE_LOST    ? OG_LEASE_LOST
		     : lrc == OG_UNAVAILABLE ? OG_UNAVAILABLE
		     : lrc == OG_NOT_FOUND   ? OG_NOT_FOUND
		                                 : OG_ERROR;
		goto rollback;
	}
	if (d->human) {
		d->approvals = json_array();
		decisions = contract_allowed_decisions(d->contract);
		rc = OG_OK;
		for (i = 0; i < contract_gate(d->contract)->napprovers && rc == OG_OK; i++)
			rc = output_challenge(db, d, decisions, i);
	} else {
		rc = output_enqueue(db, d, payload, hash);
	}
	if (rc != OG_OK)
		goto rollback;
	if (db_commit(db) != DB_OK)
		rc = OG_UNAVAILABLE;
	goto out;
rollback:
	db_rollback(db);
out:
	json_decref(decisions);
	free(payload);
	return rc;
}

/* ---- a person's decision ----------------------------------------------- */

/* The effects a final decision enqueues: built before the transaction. */
struct final_effects {
	struct outbox_effect eff, cbe;
	char phash[CANON_HASH_LEN], chash[CANON_HASH_LEN];
	char *payload, *cb_payload;
};

/* What the workflow's callback says of a decision. */
static const char *
callback_word(const char *decision)
{
	return gate_outcome_name(gate_outcome_of(gate_decision_parse(decision)));
}

static int
final_effects_build(const struct decide_approval *d, bool approve, struct final_effects *fe)
{
	const struct gate_approval *a = d->approval;
	bool redraft = gate_decision_parse(d->decision) == GATE_CHANGES_REQUESTED;

	if (approve) {
		if (json_hash(json_object_get(d->effect, "payload"), fe->phash, &fe->payload) != 0)
			return -1;
		fe->eff.client_id = a->client_id;
		fe->eff.key = a->key;
		fe->eff.type = json_string_value(json_object_get(d->effect, "type"));
		fe->eff.target = json_string_value(json_object_get(d->effect, "target"));
		fe->eff.payload = fe->payload;
		fe->eff.payload_hash = fe->phash;
		fe->eff.approval_id = a->id;
		if (fe->eff.type == NULL || fe->eff.target == NULL)
			return -1;
	}
	if (d->callback_url != NULL) {
		/* The workflow's Wait node learns the outcome, and with a request
		 * for changes the feedback for its next draft; one callback per
		 * round. */
		if (outbox_callback_feedback(&fe->cbe, a->client_id, a->key, d->callback_url,
		                             callback_word(d->decision), d->subject, a->id,
		                             redraft ? d->reason : NULL, fe->chash,
		                             &fe->cb_payload) != 0)
			return -1;
		fe->cbe.slot = a->round > 0 ? a->round - 1 : 0;
	}
	return 0;
}

/* The final vote's part of the transaction: the run moves (decided, or
 * back to its workflow for a new draft), the effect and the callback are
 * queued. */
static enum og_rc
decide_final(struct db *db, struct decide_approval *d, bool approve,
             const struct final_effects *fe, struct ledger_run *run)
{
	const struct gate_approval *a = d->approval;
	char not_before[OUTBOX_TS_LEN];
	enum og_rc rc;

	if (gate_decision_parse(d->decision) == GATE_CHANGES_REQUESTED)
		rc = ledger_redraft(db, a->client_id, a->key, d->subject, d->reason,
		                    d->repair_budget, d->lease_seconds, run);
	else
		rc = ledger_decide(db, a->client_id, a->key, d->decision, d->subject,
		                   d->reason != NULL ? d->reason
		                   : approve         ? NULL
		                                     : "rejected by the approver",
		                   run);
	if (rc != OG_OK)
		return rc == OG_UNAVAILABLE ? OG_UNAVAILABLE : OG_NOT_AWAITING;
	if (fe->eff.type != NULL &&
	    (rc = outbox_enqueue(db, &fe->eff, d->effect_id, not_before)) != OG_OK)
		return rc == OG_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
	if (fe->cbe.type != NULL &&
	    (rc = outbox_enqueue(db, &fe->cbe, d->callback_id, not_before)) != OG_OK)
		return rc == OG_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
	return OG_OK;
}

enum og_rc
decide_approval(struct db *db, struct decide_approval *d, struct ledger_run *run)
{
	const struct gate_approval *a = d->approval;
	bool approve = gate_decision_parse(d->decision) == GATE_APPROVE, edited;
	char draft[CANON_HASH_LEN];
	struct final_effects fe;
	struct ledger_lock_draft_call lc;
	struct gate_vote_call vc;
	struct ledger_edit_call ec;
	struct gate_vote vote;
	struct db_call calls[3];
	char *edit_text = NULL, *fields_text = NULL;
	int ncalls = 0, k;
	enum og_rc rc = OG_ERROR, grc;

	memset(calls, 0, sizeof(calls));
	memset(&fe, 0, sizeof(fe));
	d->effect_id[0] = d->callback_id[0] = '\0';
	d->approvals = 0;
	d->needed = a->min_approvals > 0 ? a->min_approvals : 1;
	d->final = false;
	d->edit_hash[0] = '\0';
	if (d->edit != NULL &&
	    (!approve || json_hash(d->edit, d->edit_hash, &edit_text) != 0 ||
	     (fields_text = json_dumps(d->edit_fields, JSON_COMPACT)) == NULL))
		goto out;
	if (final_effects_build(d, approve, &fe) != 0)
		goto out;

	/* ONE transaction. Its first round trip: the run's row lock (which
	 * serialises the votes of this run, so the count below is every vote
	 * there is), the vote, and the correction when this vote makes one.
	 * Anything short of all of them rolls the whole thing back. */
	ledger_lock_draft_call(&lc, a->client_id, a->key, &calls[ncalls++]);
	gate_vote_call(&vc, d->token_hash, d->decision, d->subject, d->reason,
	               d->edit != NULL ? d->edit_hash : d->draft_hash, d->edit != NULL,
	               d->via_client, d->via_chat, &calls[ncalls++]);
	if (d->edit != NULL)
		ledger_edit_call(&ec, a->client_id, a->key, edit_text, d->edit_hash, d->subject,
		                 fields_text, &calls[ncalls++]);
	db_pipeline_tx(db, calls, ncalls); /* each call carries its own rc */
	grc = ledger_lock_draft_result(&calls[0], draft, &edited);
	if (grc != OG_OK) {
		rc = grc;
		goto rollback;
	}
	/* what the person read is what they decide on: a draft corrected since
	 * their page was built is read again first */
	if (d->draft_hash != NULL && strcmp(draft, d->draft_hash) != 0) {
		rc = OG_CHANGED;
		goto rollback;
	}
	grc = gate_vote_result(&calls[1], &vote);
	if (grc != OG_OK) {
		rc = grc == OG_NOT_PENDING ? OG_USED : grc;
		goto rollback;
	}
	d->approvals = vote.approvals;
	d->needed = vote.needed;
	d->final = vote.final;
	/* A correction comes with the first approval only: every approval of
	 * the quorum is then for the same text. */
	if (d->edit != NULL && (vote.approvals != 1 || edited ||
	                               ledger_edit_result(&calls[2]) != OG_OK)) {
		rc = OG_CHANGED;
		goto rollback;
	}
	if (vote.final) {
		if ((rc = decide_final(db, d, approve, &fe, run)) != OG_OK)
			goto rollback;
	} else {
		/* recorded; the run still awaits the rest of its quorum */
		run->state_from = run->state = RUN_AWAITING_HUMAN;
	}
	/* a unique index: another final vote of the run committed first; a
	 * connection lost at COMMIT leaves the outcome unknown: unavailable,
	 * and the approver's retry finds out which */
	switch (db_commit(db)) {
	case DB_OK:
		rc = OG_OK;
		break;
	case DB_UNAVAILABLE:
		rc = OG_UNAVAILABLE;
		break;
	default:
		rc = OG_CONFLICT;
		break;
	}
	goto out;
rollback:
	db_rollback(db);
out:
	free(fe.payload);
	free(fe.cb_payload);
	free(edit_text);
	free(fields_text);
	for (k = 0; k < ncalls; k++)
		PQclear(calls[k].res);
	return rc;
}

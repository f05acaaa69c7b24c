/*
 * api_decision.c — the rules of a person's decision on a challenge, for
 * both doors that take one (api_decision.h): the approval page's form and
 * the decision API.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api_int.h"
#include "api_decision.h"
#include "canon.h"
#include "contract.h"
#include "edit.h"
#include "log.h"
#include "utf8.h"

const struct decision_refusal DECISION_NOT_ALLOWED = {
	422, "decision_not_allowed", "Decision not allowed",
	"This approval does not allow that decision.",
};
const struct decision_refusal DECISION_NOT_YOURS = {
	403, "not_an_approver", "Not your approval",
	"You are not among the approvers this link was issued to.",
};
const struct decision_refusal DECISION_SEPARATION = {
	403, "separation_of_duties", "Separation of duties",
	"You requested this action, so someone else must approve it.",
};
const struct decision_refusal DECISION_ALREADY_VOTED = {
	409, "already_voted", "Already voted",
	"You have already decided on this request (through this or another link, your group "
	"or your inbox). Each person counts once. Nothing was changed.",
};
const struct decision_refusal DECISION_DRAFT_CHANGED = {
	409, "draft_changed", "The draft changed",
	"Someone corrected or approved the draft after your page was built. Nothing was "
	"recorded: open the page again, read it, and decide.",
};
const struct decision_refusal DECISION_NOT_EDITABLE = {
	409, "not_editable", "The draft cannot be corrected now",
	"Someone has approved this draft already, so every further approval is for the same "
	"text. Nothing was recorded: approve it as it is, or reject it.",
};
const struct decision_refusal DECISION_INVALID_EDIT = {
	422, "invalid_edit", "Correction not accepted",
	"A correction does not pass the contract; nothing was decided.",
};
const struct decision_refusal DECISION_USED = {
	409, "used", "Already decided",
	"This approval was already decided, has expired, or was revoked. Nothing was changed.",
};
const struct decision_refusal DECISION_VOIDED = {
	410, NULL, "No longer valid", "Another approver already decided this run.",
};
const struct decision_refusal DECISION_REVOKED = {
	410, NULL, "No longer valid", "This approval link was revoked by an operator.",
};
const struct decision_refusal DECISION_EXPIRED = {
	410, NULL, "Expired", "This approval link has expired. Nothing was sent.",
};
const struct decision_refusal DECISION_NOT_AWAITING = {
	410, "not_awaiting", "No longer waiting", "The run is no longer waiting for a decision.",
};
/* the run moved on between the checks and the transaction */
static const struct decision_refusal DECISION_NOT_AWAITING_NOW = {
	409, "not_awaiting", "Already decided",
	"The run is no longer waiting for a decision. Nothing was changed.",
};
const struct decision_refusal DECISION_CONFLICT = {
	409, "used", "Already decided", "Another approver decided first. Nothing was changed.",
};
const struct decision_refusal DECISION_UNAVAILABLE = {
	503, "database_unavailable", "Try again shortly",
	"The database is unavailable; nothing was recorded.",
};
const struct decision_refusal DECISION_INTERNAL = {
	500, "internal", "Something went wrong",
	"The decision was not recorded. Try again; if it persists, tell the operators.",
};
const struct decision_refusal DECISION_FEEDBACK_REQUIRED = {
	422, "feedback_required", "Say what should change",
	"A request for changes needs your feedback: what the next draft should change. "
	"Nothing was decided.",
};
const struct decision_refusal DECISION_FEEDBACK_INVALID = {
	422, "invalid_feedback", "Feedback not accepted",
	"The feedback must be text (valid UTF-8, no control characters but line breaks and "
	"tabs) of at most 2000 characters. Nothing was decided.",
};
const struct decision_refusal DECISION_FEEDBACK_UNWANTED = {
	422, "feedback_unwanted", "Feedback goes with a request for changes",
	"Feedback is sent back to the workflow only with a request for changes; give a "
	"reason with an approval or a reject. Nothing was decided.",
};
const struct decision_refusal DECISION_ROUND_CLOSED = {
	410, "round_closed", "This round is closed",
	"An approver asked for changes, so this draft went back to the workflow for a new "
	"one, which comes with links of its own. This link decides nothing any more; nothing "
	"was changed.",
};

bool
decision_round_closed(const struct gate_approval *a, const json_t *run)
{
	json_t *round = json_object_get(run, "round");

	return json_is_integer(round) && a->round < json_integer_value(round);
}

const char *
decision_refusal_code(const struct decision_refusal *r)
{
	if (r->code != NULL)
		return r->code;
	if (r == &DECISION_VOIDED)
		return gate_state_name(APPROVAL_VOIDED);
	return gate_state_name(r == &DECISION_REVOKED ? APPROVAL_REVOKED : APPROVAL_EXPIRED);
}

const struct decision_refusal *
decision_open(const struct gate_approval *a, const json_t *run)
{
	const char *state = json_string_value(json_object_get(run, "state"));

	if (decision_round_closed(a, run))
		return &DECISION_ROUND_CLOSED;
	if (a->state == APPROVAL_DECIDED)
		return &DECISION_USED;
	if (a->state == APPROVAL_VOIDED)
		return &DECISION_VOIDED;
	if (a->state == APPROVAL_REVOKED)
		return &DECISION_REVOKED;
	if (a->expired || a->state == APPROVAL_EXPIRED)
		return &DECISION_EXPIRED;
	if (state == NULL || ledger_state_parse(state) != RUN_AWAITING_HUMAN)
		return &DECISION_NOT_AWAITING;
	return NULL;
}

/* Whether the challenge allows decision at all. */
static bool
allowed(const struct gate_approval *a, const char *decision)
{
	size_t i;
	json_t *v;

	if (gate_decision_parse(decision) == GATE_DECISION_NONE)
		return false;
	json_array_foreach(a->allowed_decisions, i, v)
		if (json_is_string(v) && strcmp(json_string_value(v), decision) == 0)
			return true;
	return false;
}

/* Who may decide: the approvers, and not the requester under separation of
 * duties. NULL when the person may. */
static const struct decision_refusal *
eligible(struct api_call *c, const struct gate_approval *a, const char *decision,
         struct log_fields *f)
{
	const struct config *cfg = c->ctx->cfg;
	const char *why = api_card_refusal(c, a, gate_decision_parse(decision));

	if (why == NULL)
		return NULL;
	if (!contract_approver_matches(a->approver, c->req->remote_user, c->req->auth_groups,
	                               cfg->auth_groups_separator[0])) {
		f->detail = "not among the approvers of this challenge";
		return &DECISION_NOT_YOURS;
	}
	f->detail = a->requested_by != NULL ? "separation of duties: the requester cannot approve"
	                                    : "separation of duties: the requester is unknown";
	return &DECISION_SEPARATION;
}

/* The corrections applied to the draft: NULL (out->effect set, and d's
 * edit when something changed), or the refusal. */
static const struct decision_refusal *
corrections(struct api_call *c, const struct gate_approval *a, const json_t *run,
            const struct api_card_draft *dr, const struct decision_in *in, struct log_fields *f,
            struct decision_out *out)
{
	json_t *errors = json_array(), *changed = NULL, *edited, *corrected = NULL;

	if (errors == NULL)
		return &DECISION_INTERNAL;
	edited = edit_apply(dr->k, dr->output, in->values, &changed, errors);
	if (edited != NULL && json_array_size(changed) > 0) {
		if (!api_card_editable(c, a, dr)) {
			json_decref(errors);
			json_decref(edited);
			json_decref(changed);
			return &DECISION_NOT_EDITABLE;
		}
		corrected = api_card_draft_effect(c, dr->k, json_object_get(run, "proposed_effect"),
		                                  edited, errors);
	}
	if (json_array_size(errors) > 0) {
		f->detail = json_string_value(json_object_get(json_array_get(errors, 0), "path"));
		out->edit_errors = errors;
		json_decref(edited);
		json_decref(changed);
		json_decref(corrected);
		return &DECISION_INVALID_EDIT;
	}
	json_decref(errors);
	if (edited == NULL || (json_array_size(changed) > 0 && corrected == NULL)) {
		json_decref(edited);
		json_decref(changed);
		return &DECISION_INTERNAL;
	}
	if (corrected == NULL) {
		json_decref(edited);
		json_decref(changed);
		return NULL;
	}
	out->owned = json_pack("{s:o, s:o, s:o}", "edit", edited, "fields", changed, "effect",
	                       corrected);
	if (out->owned == NULL)
		return &DECISION_INTERNAL;
	out->d.edit = json_object_get(out->owned, "edit");
	out->d.edit_fields = json_object_get(out->owned, "fields");
	out->effect = json_object_get(out->owned, "effect");
	out->fields_text = json_dumps(changed, JSON_COMPACT);
	f->edited_fields = out->fields_text;
	return NULL;
}

/* The feedback of a request for changes: text of at most
 * DECISION_FEEDBACK_MAX characters, valid UTF-8, no control characters but
 * line breaks and tabs, and not blank. NULL when it is, else the refusal. */
static const struct decision_refusal *
feedback_check(const struct decision_in *in)
{
	bool blank = true;
	size_t i;

	if (in->feedback == NULL || in->feedback_len == 0)
		return &DECISION_FEEDBACK_REQUIRED;
	if (in->feedback_len > 4 * DECISION_FEEDBACK_MAX ||
	    !canon_utf8_valid(in->feedback, in->feedback_len))
		return &DECISION_FEEDBACK_INVALID;
	for (i = 0; i < in->feedback_len; i++) {
		unsigned char ch = (unsigned char)in->feedback[i];

		if ((ch < 0x20 && ch != '\n' && ch != '\r' && ch != '\t') || ch == 0x7f)
			return &DECISION_FEEDBACK_INVALID;
		if (ch != ' ' && ch != '\n' && ch != '\r' && ch != '\t')
			blank = false;
	}
	if (blank)
		return &DECISION_FEEDBACK_REQUIRED;
	/* no NUL above, so the text ends at feedback_len */
	return utf8_chars(in->feedback) > DECISION_FEEDBACK_MAX ? &DECISION_FEEDBACK_INVALID : NULL;
}

/* The result of decide_approval as a refusal (NULL: taken). */
static const struct decision_refusal *
taken(enum og_rc rc)
{
	switch (rc) {
	case OG_OK:
		return NULL;
	case OG_DUPLICATE:
		return &DECISION_ALREADY_VOTED;
	case OG_CHANGED:
		return &DECISION_DRAFT_CHANGED;
	case OG_USED:
		return &DECISION_USED;
	case OG_NOT_AWAITING:
		return &DECISION_NOT_AWAITING_NOW;
	case OG_CONFLICT:
		return &DECISION_CONFLICT;
	case OG_UNAVAILABLE:
		return &DECISION_UNAVAILABLE;
	default:
		return &DECISION_INTERNAL;
	}
}

/* The log lines of a decision taken: approval.voted below the quorum, else
 * approval.consumed and an effect.enqueued per queued effect. */
void
decision_logged(struct api_call *c, const struct gate_approval *a, const struct decision_in *in,
                struct decision_out *out, struct log_fields *f)
{
	const struct decide_approval *d = &out->d;
	const char *reason = d->reason;
	char progress[96], *fields = NULL;

	f->key = a->key;
	f->reason = reason;
	f->payload_hash = d->edit_hash[0] ? d->edit_hash : NULL;
	if (!d->final) {
		snprintf(progress, sizeof(progress), "%d of %d approvals", d->approvals, d->needed);
		f->state_from = f->state_to = ledger_state_name(RUN_AWAITING_HUMAN);
		f->count = d->approvals;
		f->detail = progress;
		api_log(c, LOG_LEVEL_INFO, "approval.voted", f);
		return;
	}
	f->count = d->needed > 1 ? d->approvals : 0;
	f->state_from = ledger_state_name(RUN_AWAITING_HUMAN);
	f->state_to = ledger_state_name(out->run.state);
	f->version = out->run.version;
	f->effect_id = d->effect_id[0] ? d->effect_id : NULL;
	f->target = json_string_value(json_object_get(out->effect, "target"));
	f->contract = json_string_value(json_object_get(out->run.decided, "contract"));
	f->output_fields = fields =
		f->contract != NULL && c->ctx->contracts != NULL
			? api_output_loggable(contract_find(c->ctx->contracts, f->contract),
			                      json_object_get(out->run.decided, "output"))
			: NULL;
	api_log(c, LOG_LEVEL_INFO, "approval.consumed", f);
	f->output_fields = NULL;
	free(fields);
	if (d->effect_id[0] != '\0') {
		struct log_fields e = { .key = a->key, .effect_id = d->effect_id, .target = f->target,
			                .approval_id = a->id, .actor = d->subject,
			                .decision = d->decision };

		api_log(c, LOG_LEVEL_INFO, "effect.enqueued", &e);
	}
	if (d->callback_id[0] != '\0') {
		struct log_fields e = { .key = a->key, .effect_id = d->callback_id,
			                .target = "callback", .approval_id = a->id,
			                .decision = d->decision };

		api_log(c, LOG_LEVEL_INFO, "effect.enqueued", &e);
	}
}

const struct decision_refusal *
decision_take(struct api_call *c, const unsigned char hash[32], const struct gate_approval *a,
              const json_t *run, const struct api_card_draft *dr, const struct decision_in *in,
              struct log_fields *f, struct decision_out *out)
{
	const struct decision_refusal *r;
	bool redraft;

	memset(out, 0, sizeof(*out));
	out->effect = dr->effect;
	f->approval_id = a->id;
	f->actor = c->req->remote_user;
	f->decision = in->decision;
	if (!json_array_size(a->allowed_decisions) || !allowed(a, in->decision))
		return &DECISION_NOT_ALLOWED;
	redraft = gate_decision_parse(in->decision) == GATE_CHANGES_REQUESTED;
	if (redraft && (r = feedback_check(in)) != NULL)
		return r;
	if (!redraft && in->feedback != NULL && in->feedback_len > 0)
		return &DECISION_FEEDBACK_UNWANTED;
	if ((r = eligible(c, a, in->decision, f)) != NULL)
		return r;
	if (dr->mine != NULL)
		return &DECISION_ALREADY_VOTED;
	/* the draft read is the one decided on */
	if (in->draft != NULL && in->draft[0] != '\0' &&
	    (dr->hash == NULL || strcmp(in->draft, dr->hash) != 0))
		return &DECISION_DRAFT_CHANGED;
	if (gate_decision_parse(in->decision) == GATE_APPROVE && json_object_size(in->values) > 0 &&
	    (r = corrections(c, a, run, dr, in, f, out)) != NULL)
		return r;
	out->d.approval = a;
	out->d.token_hash = hash;
	out->d.decision = in->decision;
	out->d.subject = c->req->remote_user;
	out->d.via_client = in->via_client;
	out->d.via_chat = in->via_chat;
	out->d.reason = in->reason != NULL && in->reason[0] ? in->reason : NULL;
	if (redraft) {
		/* the feedback is the vote's reason, kept as free text is */
		if ((out->feedback = strndup(in->feedback, in->feedback_len)) == NULL)
			return &DECISION_INTERNAL;
		out->d.reason = out->feedback;
		out->d.repair_budget = dr->k != NULL ? contract_repair_attempts(dr->k) : 0;
		out->d.lease_seconds = c->ctx->cfg->lease_default_seconds;
	}
	out->d.effect = out->effect;
	out->d.callback_url = json_string_value(json_object_get(run, "callback_url"));
	out->d.draft_hash = dr->hash;
	return taken(decide_approval(c->ctx->db, &out->d, &out->run));
}

void
decision_out_clear(struct decision_out *out)
{
	json_decref(out->edit_errors);
	json_decref(out->owned);
	free(out->fields_text);
	free(out->feedback);
	ledger_run_clear(&out->run);
	memset(out, 0, sizeof(*out));
}

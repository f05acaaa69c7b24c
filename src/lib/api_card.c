/*
 * api_card.c — what the approval pages show: the card a person reads
 * before deciding (the output, field by field, and the effect as it will
 * be sent, with the form to correct the draft when that is allowed), the
 * page of a decided approval (the votes so far and what became of the
 * effect) and the notice page. Also the draft they are built from and who
 * may take which decision. The handlers that answer /approve/ and take the
 * decisions are in api_approve.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api_int.h"
#include "api_card.h"
#include "api_decision.h"
#include "buf.h"
#include "canon.h"
#include "contract.h"
#include "csrf.h"
#include "digest.h"
#include "edit.h"
#include "gate.h"
#include "ledger.h"
#include "page.h"
#include "caps.h"
#include "control.h"
#include "log.h"
#include "outbox.h"
#include "provider.h"
#include "unknown.h"

/* Renders a filled page as the answer; consumes p. */
void
api_card_answer(struct api_call *c, int status, struct page *p)
{
	size_t cap = c->resp->body.cap;
	int rc;

	buf_reset(&c->resp->body);
	c->resp->status = status;
	/* Any output the contract accepted is shown, whole and field by field,
	 * escaped: the page may be several times the largest body. */
	c->resp->body.cap = OG_RESPONSE_MAX + OG_PAGE_BODY_FACTOR * (size_t)c->ctx->cfg->max_body_bytes;
	rc = p != NULL ? page_render(p, &c->resp->body) : -1;
	c->resp->body.cap = cap;
	if (rc != 0) {
		buf_reset(&c->resp->body);
		c->resp->status = 500;
		if (buf_puts(&c->resp->body, "<!DOCTYPE html><title>Error</title>"
		                             "<p>The page could not be built.</p>") != 0)
			buf_reset(&c->resp->body);
	}
	page_free(p);
}

/* The notice page: unknown, expired, used, refused. One log line. */
void
api_card_notice(struct api_call *c, int status, const char *event, const char *heading,
                const char *message, struct log_fields *f)
{
	struct page *p = c->ctx->pages != NULL ? page_new(c->ctx->pages, PAGE_NOTICE) : NULL;

	if (p != NULL) {
		(void)page_text(p, "title", heading);
		(void)page_text(p, "heading", heading);
		(void)page_text(p, "message", message);
		page_remove(p, "detail");
	}
	api_card_answer(c, status, p);
	if (f->reason == NULL)
		f->reason = message;
	api_log(c, status >= 500 ? LOG_LEVEL_ERROR : LOG_LEVEL_NOTICE, event, f);
}

void
api_card_not_yours(struct api_call *c, const struct gate_approval *a, const char *why,
                   struct log_fields *f)
{
	struct page *p = c->ctx->pages != NULL ? page_new(c->ctx->pages, PAGE_NOTICE) : NULL;
	const char *heading = contract_approver_matches(a->approver, c->req->remote_user,
	                                                c->req->auth_groups,
	                                                c->ctx->cfg->auth_groups_separator[0])
	                          ? "Separation of duties"
	                          : "Not your approval";
	char signed_in[OG_FIELD_MAX + 64];

	snprintf(signed_in, sizeof(signed_in), "You are signed in as %s. Nothing was changed.",
	         c->req->remote_user);
	if (p != NULL) {
		(void)page_text(p, "title", heading);
		(void)page_text(p, "heading", heading);
		(void)page_text(p, "message", why);
		(void)page_text(p, "detail", signed_in);
	}
	api_card_answer(c, 403, p);
	f->approval_id = a->id;
	f->reason = "forbidden";
	f->detail = why;
	api_log(c, LOG_LEVEL_NOTICE, "approval.not_yours", f);
}

static char *
pretty(const json_t *v)
{
	return page_json_text(v);
}

/* An effect's state in words for the card (NULL: the state's own name),
 * and what it means (pending says more: effect_outcome). */
static const struct {
	const char *state, *status;
} effect_words[EFFECT_STATE_COUNT] = {
	[EFFECT_SENDING] = { "being sent", "The dispatcher is sending it right now." },
	[EFFECT_COMPLETED] = { "sent", "It was sent, once; the provider confirmed it." },
	[EFFECT_UNKNOWN] = { "outcome unknown",
		             "A send timed out; whether it arrived is being checked with the "
		             "provider. It is never simply sent again." },
	[EFFECT_FAILED] = { NULL, "It could not be sent and was set aside for the operators "
		                  "(dead letter). Nothing went out." },
	[EFFECT_CANCELLED] = { NULL, "It was cancelled before it went out. Nothing was sent." },
};

/* What became of the approved effect, in words: read from the outbox row
 * this approval queued, and the kill switch. */
static void
effect_outcome(struct api_call *c, const struct gate_approval *a, const char **state,
               const char **status)
{
	json_t *list = NULL, *e, *found = NULL;
	const char *st;
	size_t i;
	int es;

	*state = OG_UNKNOWN;
	*status = "Whether it has gone out could not be read just now; reload the page.";
	if (gate_decision_parse(a->decision) == GATE_REJECT) {
		*state = "not sent";
		*status = "The request was rejected, so nothing was sent.";
		return;
	}
	if (gate_decision_parse(a->decision) == GATE_CHANGES_REQUESTED) {
		*state = "not sent: changes requested";
		*status = "This draft went back to the workflow with the feedback, for a new "
		          "draft (which comes with links of its own while the contract's repair "
		          "attempts last). This round is closed; nothing of it was sent.";
		return;
	}
	if (outbox_list(c->ctx->db, c->ctx->cfg, a->client_id, a->key, NULL, NULL, &list) !=
	    OG_OK)
		return;
	json_array_foreach(list, i, e) {
		st = json_string_value(json_object_get(e, "approval_id"));
		if (st != NULL && strcmp(st, a->id) == 0)
			found = e;
	}
	if (found == NULL) {
		/* decided by another challenge of the run: its effect, not a callback */
		json_array_foreach(list, i, e) {
			st = json_string_value(json_object_get(e, "type"));
			if (found == NULL && st != NULL && strcmp(st, "decision.callback") != 0)
				found = e;
		}
	}
	st = json_string_value(json_object_get(found, "status"));
	es = st != NULL ? outbox_state_parse(st) : -1;
	if (st == NULL) {
		*state = "not queued";
		*status = "No action was queued for this decision.";
	} else if (es == EFFECT_PENDING) {
		struct control_flag sw;

		if (control_switch(c->ctx->db, true, &sw) == DB_OK && sw.found &&
		    !sw.actions_enabled) {
			*state = "held by the kill switch";
			*status = "It is queued, but sending is switched off (the kill switch); it "
			          "goes out once an operator switches sending on again.";
		} else if (json_integer_value(json_object_get(found, "attempt")) > 0) {
			*state = "queued, retrying";
			*status = "An attempt to send it failed; the dispatcher tries again on its "
			          "own. Nobody needs to resend it.";
		} else {
			*state = "queued";
			*status = "It is queued; the dispatcher sends it once, shortly (after its "
			          "cancellation window, when it has one).";
		}
	} else if (es > 0 && es < EFFECT_STATE_COUNT) {
		*state = effect_words[es].state ?: outbox_state_name((enum effect_state)es);
		*status = effect_words[es].status;
	}
	/* the strings above are static; found points into list */
	json_decref(list);
}

/* ---- the draft decided on, and the votes so far ---------------------------- */

/* (struct api_card_draft, what a person decides on, is in api_card.h) */

void
api_card_draft_clear(struct api_card_draft *dr)
{
	json_decref(dr->effect);
	json_decref(dr->votes);
	memset(dr, 0, sizeof(*dr));
}

/* The effect approving queues when output is the draft: the proposed
 * effect's payload with the members the contract takes from the output
 * taken from this one, checked as at /output; NULL with errors appended
 * when it does not pass. */
json_t *
api_card_draft_effect(struct api_call *c, const struct contract *k, const json_t *proposed,
                      const json_t *output, json_t *errors)
{
	const char *type = json_string_value(json_object_get(proposed, "type"));
	const char *target = json_string_value(json_object_get(proposed, "target"));
	const struct config_target *t = target != NULL ? config_target(c->ctx->cfg, target) : NULL;
	json_t *payload;

	if (type == NULL || target == NULL)
		return NULL;
	payload = edit_check(k, type, provider_takes_mail(t),
	                     json_object_get(proposed, "payload"), output, errors);
	return payload != NULL ? json_pack("{s:s, s:s, s:o}", "type", type, "target", target,
	                                   "payload", payload)
	                       : NULL;
}

/* The draft of run for challenge a, from the run and its votes as read
 * (votes: taken over). */
static enum og_rc
draft_load(struct api_call *c, const struct gate_approval *a, const json_t *run, json_t *votes,
           int needed, struct api_card_draft *dr)
{
	const json_t *edit = json_object_get(run, "edit");
	const json_t *proposed = json_object_get(run, "proposed_effect");
	const char *name = json_string_value(json_object_get(run, "contract"));
	const char *subject = c->req->remote_user;
	json_t *v, *errors;
	size_t i;

	memset(dr, 0, sizeof(*dr));
	dr->k = name != NULL && c->ctx->contracts != NULL ? contract_find(c->ctx->contracts, name)
	                                                 : NULL;
	dr->output = json_object_get(edit != NULL ? edit : run, "output");
	dr->hash = json_string_value(json_object_get(edit != NULL ? edit : run, "output_hash"));
	dr->edited_by = json_string_value(json_object_get(edit, "by"));
	dr->votes = votes;
	dr->needed = needed;
	if (a->min_approvals > dr->needed)
		dr->needed = a->min_approvals;
	json_array_foreach(dr->votes, i, v) {
		const char *who = json_string_value(json_object_get(v, "subject"));

		/* the quorum and one vote per person count within the round */
		if (json_integer_value(json_object_get(v, "round")) != a->round)
			continue;
		if (gate_decision_parse(json_string_value(json_object_get(v, "decision"))) == GATE_APPROVE)
			dr->approvals++;
		/* one person, one vote: subjects compared ignoring ASCII case */
		if (who != NULL && subject != NULL && strcasecmp(who, subject) == 0)
			dr->mine = v;
	}
	if (proposed == NULL)
		proposed = a->effect;
	if (edit == NULL || dr->k == NULL) {
		/* a correction under a contract no longer loaded keeps the effect
		 * as proposed: the dispatcher holds it rather than send it */
		dr->effect = json_deep_copy(proposed);
		return dr->effect != NULL || proposed == NULL ? OG_OK : OG_ERROR;
	}
	errors = json_array();
	dr->effect = errors != NULL ? api_card_draft_effect(c, dr->k, proposed, dr->output, errors)
	                            : NULL;
	json_decref(errors);
	return dr->effect != NULL ? OG_OK : OG_ERROR;
}

enum og_rc
api_card_load(struct api_call *c, const struct gate_approval *a, json_t **run,
              struct api_card_draft *dr)
{
	struct og_key_call kr, kv;
	struct db_call calls[2];
	json_t *votes = NULL;
	enum og_rc rc;
	int needed = 1;

	*run = NULL;
	memset(dr, 0, sizeof(*dr));
	ledger_status_call(&kr, a->client_id, a->key, &calls[0]);
	gate_votes_call(&kv, a->client_id, a->key, &calls[1]);
	(void)db_batch(c->ctx->db, calls, 2);
	rc = ledger_status_read(&calls[0], run);
	if (rc == OG_OK)
		rc = gate_votes_read(&calls[1], &votes, &needed);
	PQclear(calls[0].res);
	PQclear(calls[1].res);
	if (rc != OG_OK) {
		json_decref(votes);
		return rc;
	}
	return draft_load(c, a, *run, votes, needed, dr);
}

/* "approved", "rejected", "asked for changes" */
static const char *
decided_word(const char *decision)
{
	enum gate_decision d = gate_decision_parse(decision);

	if (d == GATE_CHANGES_REQUESTED)
		return "asked for changes";
	return gate_outcome_name(d == GATE_REJECT ? GATE_OUTCOME_REJECTED : GATE_OUTCOME_APPROVED);
}

/* What a vote's line adds: a correction, its round once there are
 * several, a request's feedback. */
static void
vote_note(struct page_scope *sc, const json_t *v, bool rounds)
{
	const char *reason = json_string_value(json_object_get(v, "reason"));
	bool changes = gate_decision_parse(json_string_value(json_object_get(v, "decision"))) ==
	               GATE_CHANGES_REQUESTED;
	char note[DECISION_FEEDBACK_MAX + 128];
	size_t n = 0;

	note[0] = '\0';
	if (json_is_true(json_object_get(v, "edited")))
		n += (size_t)snprintf(note + n, sizeof(note) - n, " (after correcting the draft)");
	if (rounds && n < sizeof(note))
		n += (size_t)snprintf(note + n, sizeof(note) - n, " in round %lld",
		                      (long long)json_integer_value(json_object_get(v, "round")));
	if (changes && reason != NULL && n < sizeof(note))
		(void)snprintf(note + n, sizeof(note) - n, ": \u201c%s\u201d", reason);
	(void)page_scope_text(sc, "vote_note", note);
}

/* The votes section of a page: who decided what, when; removed when the
 * run needs one approval and nobody has voted. */
static void
fill_votes(struct page *p, const struct api_card_draft *dr)
{
	char status[160];
	bool rounds = false;
	size_t i;
	json_t *v;

	if (json_array_size(dr->votes) == 0 && dr->needed <= 1) {
		page_remove(p, "votes");
		return;
	}
	snprintf(status, sizeof(status), "%d of %d %s approved so far.", dr->approvals,
	         dr->needed, dr->needed == 1 ? "person has" : "different people have");
	if (dr->needed > 1)
		(void)page_text(p, "quorum_status", status);
	else
		page_remove(p, "quorum_status");
	json_array_foreach(dr->votes, i, v)
		if (json_integer_value(json_object_get(v, "round")) > 1)
			rounds = true;
	json_array_foreach(dr->votes, i, v) {
		struct page_scope *sc = page_repeat(p, "vote");

		if (sc == NULL)
			break;
		(void)page_scope_text(sc, "vote_subject",
		                      json_string_value(json_object_get(v, "subject")) ?: "");
		(void)page_scope_text(
			sc, "vote_decision",
			decided_word(json_string_value(json_object_get(v, "decision"))));
		(void)page_scope_text(sc, "vote_at", json_string_value(json_object_get(v, "at")) ?: "");
		vote_note(sc, v, rounds);
	}
	page_repeat_done(p, "vote");
}

/* The page of an approval that was decided: who decided what, when, and
 * whether the action has gone out. A vote below the run's quorum is
 * recorded and says so: how many approved, how many more are needed. */
void
api_card_decided(struct api_call *c, int status, const struct gate_approval *a, const json_t *run,
                 const struct api_card_draft *dr)
{
	struct page *p = page_new(c->ctx->pages, PAGE_DECIDED);
	const json_t *effect = dr->effect;
	const char *state = json_string_value(json_object_get(run, "state"));
	bool waiting = state != NULL && ledger_state_parse(state) == RUN_AWAITING_HUMAN &&
	               !decision_round_closed(a, run);
	struct log_fields f = { 0 };
	const char *est, *estatus;
	char lede[256], more[160];

	if (effect == NULL)
		effect = json_object_get(run, "proposed_effect");
	if (effect == NULL)
		effect = a->effect;
	if (waiting) {
		snprintf(more, sizeof(more), "Not yet: it is sent once %d different people have "
		         "approved (%d so far). A reject by anyone ends the request.",
		         dr->needed, dr->approvals);
		est = "waiting for more approvals";
		estatus = more;
	} else {
		effect_outcome(c, a, &est, &estatus);
	}
	if (p != NULL) {
		if (waiting) {
			snprintf(lede, sizeof(lede), "Your %s is recorded: %d of %d. Nothing more to "
			         "do on this page; the others are asked for theirs.",
			         gate_decision_parse(a->decision) == GATE_REJECT
			             ? gate_decision_label(GATE_REJECT)
			             : "approval",
			         dr->approvals, dr->needed);
			(void)page_text(p, "lede", lede);
		}
		(void)page_text(p, "title", waiting ? "Your approval is recorded" : "Decided");
		(void)page_text(p, "key", a->key);
		(void)page_text(p, "decision", gate_decision_label(gate_decision_parse(a->decision)));
		(void)page_text(p, "decided_by", a->approver_subject != NULL ? a->approver_subject : "");
		(void)page_text(p, "decided_at", a->consumed_at);
		(void)page_text(p, "reason", a->reason != NULL ? a->reason : "");
		(void)page_text(p, "effect_type", json_string_value(json_object_get(effect, "type")) ?: "");
		(void)page_text(p, "effect_target",
		                json_string_value(json_object_get(effect, "target")) ?: "");
		(void)page_text(p, "effect_state", est);
		(void)page_text(p, "effect_status", estatus);
		fill_votes(p, dr);
	}
	api_card_answer(c, status, p);
	f.approval_id = a->id;
	f.decision = a->decision;
	api_log(c, LOG_LEVEL_DEBUG, "approval.viewed", &f);
}

/* May the signed-in person take this decision on this challenge? NULL when
 * yes, else why not, in words for the page. The page offers only the
 * decisions this allows and the POST refuses the rest, so both say the
 * same. Under separation of duties the requester decides nothing, and a
 * challenge whose requester is unknown (made before outputs had to name
 * one) can be rejected but never approved. */
const char *
api_card_refusal(const struct api_call *c, const struct gate_approval *a,
                 enum gate_decision decision)
{
	const char *subject = c->req->remote_user;

	if (!contract_approver_matches(a->approver, subject, c->req->auth_groups,
	                               c->ctx->cfg->auth_groups_separator[0]))
		return "You are not among the approvers this link was issued to.";
	if (a->separation_of_duties && contract_is_requester(a->requested_by, subject))
		return "You requested this action, so someone else must approve it.";
	if (a->separation_of_duties && a->requested_by == NULL && decision == GATE_APPROVE)
		return "Nobody is recorded as having requested this action, so no one can "
		       "show they are not its requester: it can only be rejected.";
	return NULL;
}

/* The effect as it will be sent, by the functions the dispatcher's
 * providers send it with (for mail the message's From, To, Subject and
 * body; for HTTP the request's method, URL and body), in the target kind's
 * part of the card. The other kinds' parts are removed, and so is the
 * kind's own when the effect cannot be sent; the payload as handed in
 * stays below either way. */
static void
card_effect(struct api_call *c, struct page *p, const json_t *effect)
{
	const char *type = json_string_value(json_object_get(effect, "type"));
	const char *target = json_string_value(json_object_get(effect, "target"));
	const struct config_target *t = target != NULL ? config_target(c->ctx->cfg, target) : NULL;
	const struct provider *pv = provider_of(t), *other;
	char *payload = json_dumps(json_object_get(effect, "payload"),
	                           JSON_COMPACT | JSON_ENCODE_ANY);
	bool shown = pv != NULL && payload != NULL && pv->card(p, t, type, payload);
	size_t i;

	for (i = 0; (other = provider_at(i)) != NULL; i++)
		if (other != pv || !shown)
			page_remove(p, other->card_part);
	free(payload);
}

/* Each {path, message} of errors as an item of the list, in the slots
 * named by slot[0] and slot[1]; no errors, the section is removed. */
static void
fill_errors(struct page *p, const json_t *errors, const char *section, const char *item,
            const char *const slot[2])
{
	size_t i;
	json_t *v;

	if (json_array_size(errors) == 0) {
		page_remove(p, section);
		return;
	}
	json_array_foreach(errors, i, v) {
		struct page_scope *sc = page_repeat(p, item);

		if (sc == NULL)
			break;
		(void)page_scope_text(sc, slot[0], json_string_value(json_object_get(v, "path")) ?: "");
		(void)page_scope_text(sc, slot[1],
		                      json_string_value(json_object_get(v, "message")) ?: "");
	}
	page_repeat_done(p, item);
}

/* The fields of the draft the person may correct, as a form: what they
 * sent back (values, after a refused correction) or the draft's text. */
static bool
card_edit(struct page *p, const struct api_card_draft *dr, const json_t *values,
          const json_t *errors)
{
	size_t i, shown = 0;

	for (i = 0; dr->k != NULL && i < contract_gate(dr->k)->neditable; i++) {
		const char *name = contract_gate(dr->k)->editable[i];
		const json_t *now = json_object_get(values, name);
		char field[OG_CONTRACT_NAME_MAX + 8], id[OG_CONTRACT_NAME_MAX + 8];
		struct page_scope *sc;

		if (now == NULL)
			now = json_object_get(dr->output, name);
		if (now != NULL && !json_is_string(now))
			continue;
		if ((sc = page_repeat(p, "edit_field")) == NULL)
			break;
		snprintf(field, sizeof(field), "edit.%s", name);
		snprintf(id, sizeof(id), "edit-%s", name);
		(void)page_scope_text(sc, "edit_label", name);
		(void)page_scope_attr(sc, "edit_label", "for", id);
		(void)page_scope_attr(sc, "edit_input", "name", field);
		(void)page_scope_attr(sc, "edit_input", "id", id);
		/* a line (a subject) gets a short box, text a tall one */
		(void)page_scope_attr(sc, "edit_input", "rows",
		                      json_string_length(now) < 120 &&
		                              strchr(json_string_value(now) ?: "", '\n') == NULL
		                          ? "2"
		                          : "12");
		(void)page_scope_text(sc, "edit_input", json_string_value(now) ?: "");
		shown++;
	}
	page_repeat_done(p, "edit_field");
	fill_errors(p, errors, "edit_errors", "edit_error",
	            (const char *const[]){ "edit_error_path", "edit_error_message" });
	return shown > 0;
}

/* What the run answers, as the workflow handed it in (the run's context),
 * beside the draft: plain text in the page's DOM, so whatever the customer
 * or the model wrote is shown and never becomes a link or markup. The
 * section goes when there is none; the title names the subject. */
static void
card_context(struct page *p, const json_t *run)
{
	const json_t *ctx = json_object_get(run, "context");
	const char *subject = json_string_value(json_object_get(ctx, "subject"));
	const char *customer = json_string_value(json_object_get(ctx, "customer"));
	const char *message = json_string_value(json_object_get(ctx, "message"));
	struct buf t;

	if (json_object_size(ctx) == 0) {
		page_remove(p, "context");
		(void)page_text(p, "title", "Approval needed");
		return;
	}
	buf_init(&t, 4096);
	if (subject != NULL && subject[0] != '\0' &&
	    buf_puts(&t, "Approval needed: ") == 0 && buf_puts(&t, subject) == 0)
		(void)page_text(p, "title", t.data);
	else
		(void)page_text(p, "title", "Approval needed");
	buf_free(&t);
	(void)page_text(p, "context_subject",
	                subject != NULL && subject[0] != '\0' ? subject : "(not given)");
	(void)page_text(p, "context_customer",
	                customer != NULL && customer[0] != '\0' ? customer : "(not given)");
	(void)page_text(p, "context_message",
	                message != NULL && message[0] != '\0' ? message : "(not given)");
}

/* May the person correct the draft now? The contract names fields, they
 * may approve, and nobody approved or corrected it yet: every approval of
 * a quorum is then for the same text. */
bool
api_card_editable(const struct api_call *c, const struct gate_approval *a,
                  const struct api_card_draft *dr)
{
	size_t i;
	json_t *v;
	bool approve = false;

	json_array_foreach(a->allowed_decisions, i, v)
		if (gate_decision_parse(json_string_value(v)) == GATE_APPROVE)
			approve = true;
	return approve && dr->k != NULL && contract_gate(dr->k)->neditable > 0 &&
	       dr->approvals == 0 && dr->edited_by == NULL && dr->mine == NULL &&
	       api_card_refusal(c, a, GATE_APPROVE) == NULL;
}

/* The card's account of the run: its context, key, source, contract and
 * model. */
static void
card_run(struct page *p, const struct gate_approval *a, const json_t *run)
{
	const json_t *model = json_object_get(run, "model");
	const char *source = json_string_value(json_object_get(run, "source_url"));
	char model_text[512];

	card_context(p, run);
	(void)page_text(p, "key", a->key);
	if (source != NULL) {
		(void)page_attr(p, "source_link", "href", source);
		(void)page_text(p, "source_link", source);
	} else {
		(void)page_text(p, "source_link", "(none given)");
	}
	(void)page_text(p, "contract", json_string_value(json_object_get(run, "contract")) ?: "");
	snprintf(model_text, sizeof(model_text), "%s %s %s",
	         json_string_value(json_object_get(model, "provider")) ?: "",
	         json_string_value(json_object_get(model, "name")) ?: "",
	         json_string_value(json_object_get(model, "revision")) ?: "");
	(void)page_text(p, "model", model_text);
}

/* The output decided on, field by field, and the run's validation errors. */
static void
card_output(struct page *p, const json_t *output, const char *out_text, const json_t *run)
{
	const char *name;
	json_t *v;

	(void)page_text(p, "output", out_text);
	if (json_is_object(output)) {
		json_object_foreach((json_t *)(uintptr_t)output, name, v) {
			struct page_scope *sc = page_repeat(p, "output_fields");
			char *text = json_is_string(v)
			                 ? strdup(json_string_value(v))
			                 : canon_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);

			if (sc != NULL && text != NULL) {
				(void)page_scope_text(sc, "field_name", name);
				(void)page_scope_text(sc, "field_value", text);
			}
			free(text);
		}
	}
	page_repeat_done(p, "output_fields");
	fill_errors(p, json_object_get(run, "validation_errors"), "errors", "error_item",
	            (const char *const[]){ "error_path", "error_message" });
}

/* The votes so far and how the run settles; the person's own vote, when
 * they have one, in voted (what the card says instead of buttons). */
static const char *
card_votes(struct page *p, const struct api_card_draft *dr, char *voted, size_t len)
{
	char hint[320];

	fill_votes(p, dr);
	if (dr->needed > 1) {
		snprintf(hint, sizeof(hint), "Read what will be sent, below, before you press a "
		         "button. It is sent once %d different people have approved; a reject by "
		         "anyone ends the request. Your decision cannot be undone.", dr->needed);
		(void)page_text(p, "settle_hint", hint);
	}
	if (dr->mine == NULL)
		return NULL;
	/* one person, one vote, whichever link, group or inbox entry */
	snprintf(voted, len, "You already %s this request (%s). Each person "
	         "counts once; %d of %d different people have approved so far.",
	         decided_word(json_string_value(json_object_get(dr->mine, "decision"))),
	         json_string_value(json_object_get(dr->mine, "at")) ?: "",
	         dr->approvals, dr->needed);
	return voted;
}

/* Only the decisions this person may take are buttons (the feedback field
 * with a request for changes only); how many. *refusal, when still NULL,
 * gets why a decision is not theirs. */
static size_t
card_buttons(struct api_call *c, struct page *p, const struct gate_approval *a,
             const struct api_card_draft *dr, const char **refusal)
{
	static const char *const labels[] = {
		[GATE_APPROVE] = "Approve",
		[GATE_REJECT] = "Reject",
		[GATE_CHANGES_REQUESTED] = "Request changes",
	};
	enum gate_decision d;
	const char *why;
	size_t i, buttons = 0;
	bool changes = false;
	json_t *v;

	json_array_foreach(a->allowed_decisions, i, v) {
		struct page_scope *sc;

		if (json_string_value(v) == NULL || dr->mine != NULL)
			continue;
		d = gate_decision_parse(json_string_value(v));
		if ((why = api_card_refusal(c, a, d)) != NULL) {
			*refusal = *refusal != NULL ? *refusal : why;
			continue;
		}
		if ((sc = page_repeat(p, "decision_button")) == NULL)
			continue;
		(void)page_scope_attr(sc, "decision_value", "value", json_string_value(v));
		(void)page_scope_text(sc, "decision_label",
		                      d != GATE_DECISION_NONE ? labels[d] : "Request changes");
		changes = changes || d == GATE_CHANGES_REQUESTED;
		buttons++;
	}
	page_repeat_done(p, "decision_button");
	if (!changes)
		page_remove(p, "feedback");
	return buttons;
}

/* The confirmation card. GET never changes anything. After a correction
 * that did not pass (status 422), the card again with what the person
 * wrote (values) and why it was refused (edit_errors). */
void
api_card_page(struct api_call *c, const struct gate_approval *a, const json_t *run,
              const struct api_card_draft *dr, const json_t *values,
              const json_t *edit_errors, int status)
{
	const struct config *cfg = c->ctx->cfg;
	const json_t *effect = dr->effect;
	const char *requested = json_string_value(json_object_get(run, "requested_by"));
	const char *subject = c->req->remote_user, *refusal;
	char csrf[CSRF_TEXT_LEN + 1], voted[320];
	char *out_text = pretty(dr->output), *eff_text = pretty(json_object_get(effect, "payload"));
	struct page *p = page_new(c->ctx->pages, PAGE_APPROVAL);
	struct log_fields f = { 0 };

	if (p == NULL || out_text == NULL || eff_text == NULL) {
		page_free(p);
		p = NULL;
		goto out;
	}
	card_run(p, a, run);
	card_output(p, dr->output, out_text, run);
	(void)page_text(p, "approver", subject);
	(void)page_text(p, "approver_groups", c->req->auth_groups != NULL ? c->req->auth_groups : "");
	(void)page_text(p, "expires_at", a->expires_at);
	(void)page_text(p, "effect_type", json_string_value(json_object_get(effect, "type")) ?: "");
	(void)page_text(p, "effect_target", json_string_value(json_object_get(effect, "target")) ?: "");
	(void)page_text(p, "effect_payload", eff_text);
	card_effect(c, p, effect);
	(void)page_text(p, "requested_by", requested != NULL ? requested : "(not given)");
	refusal = card_votes(p, dr, voted, sizeof(voted));
	if (!api_card_editable(c, a, dr) || !card_edit(p, dr, values, edit_errors))
		page_remove(p, "edit");
	/* no buttons: no form (and no CSRF token issued to them) */
	if (card_buttons(c, p, a, dr, &refusal) == 0) {
		/* the correction's fields belong to the form, though set apart */
		page_remove(p, "form");
		page_remove(p, "edit");
		(void)page_text(p, "cannot_decide_reason",
		                refusal != NULL ? refusal : "This request allows no decision.");
		f.reason = "may_not_decide";
	} else {
		page_remove(p, "cannot_decide");
		/* no action attribute: the form posts to the page's own URL */
		csrf_issue((const unsigned char *)cfg->csrf_secret, strlen(cfg->csrf_secret),
		           a->id, subject, csrf);
		(void)page_attr(p, "csrf", "value", csrf);
		(void)page_attr(p, "draft", "value", dr->hash != NULL ? dr->hash : "");
		digest_wipe(csrf, sizeof(csrf));
	}
out:
	api_card_answer(c, status, p);
	free(out_text);
	free(eff_text);
	f.approval_id = a->id;
	f.actor = subject;
	api_log(c, LOG_LEVEL_INFO, "approval.viewed", &f);
}

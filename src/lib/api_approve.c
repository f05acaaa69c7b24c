/*
 * api_approve.c — the approval pages: the card a person reads before
 * deciding (GET /approve/{token}) and the decision it posts back (checked
 * here, taken by decide_approval in one transaction, then 303 to the
 * page). Every answer is a page; the token in the URL is a capability,
 * never logged or stored.
 *
 * The inbox (GET /approve/) lists what the signed-in person may decide;
 * each entry opens the same card by the challenge's id
 * (/approve/card/{id}), shown only to a person among that challenge's
 * approvers, whose POST passes the same checks and consumes the challenge
 * by the same statement as the emailed link's.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api_int.h"
#include "canon.h"
#include "contract.h"
#include "csrf.h"
#include "decide.h"
#include "digest.h"
#include "edit.h"
#include "gate.h"
#include "ledger.h"
#include "page.h"
#include "token.h"
#include "caps.h"
#include "control.h"
#include "log.h"
#include "outbox.h"
#include "provider.h"

void
api_approve_security_headers(struct api_call *c)
{
	(void)http_header(c->resp, "Cache-Control", "no-store");
	(void)http_header(c->resp, "Referrer-Policy", "no-referrer");
	(void)http_header(c->resp, "X-Content-Type-Options", "nosniff");
	(void)http_header(c->resp, "X-Frame-Options", "DENY");
	(void)http_header(c->resp, "Content-Security-Policy",
	                  "default-src 'none'; style-src 'self'; img-src 'self'; "
	                  "form-action 'self'; frame-ancestors 'none'; base-uri 'none'");
}

void
api_approve_headers(struct api_call *c)
{
	c->resp->content_type = "text/html; charset=utf-8";
	api_approve_security_headers(c);
}

/* Renders a filled page as the answer; consumes p. */
static void
page_answer(struct api_call *c, int status, struct page *p)
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
static void
page_notice(struct api_call *c, int status, const char *event, const char *heading,
            const char *message, struct log_fields *f)
{
	struct page *p = c->ctx->pages != NULL ? page_new(c->ctx->pages, "notice") : NULL;

	if (p != NULL) {
		(void)page_text(p, "title", heading);
		(void)page_text(p, "heading", heading);
		(void)page_text(p, "message", message);
		page_remove(p, "detail");
	}
	page_answer(c, status, p);
	if (f->reason == NULL)
		f->reason = message;
	api_log(c, status >= 500 ? LOG_LEVEL_ERROR : LOG_LEVEL_NOTICE, event, f);
}

static char *
pretty(const json_t *v)
{
	return page_json_text(v);
}

/* What became of the approved effect, in words: read from the outbox row
 * this approval queued, and the kill switch. */
static void
effect_outcome(struct api_call *c, const struct gate_approval *a, const char **state,
               const char **status)
{
	json_t *list = NULL, *e, *found = NULL;
	const char *st;
	size_t i;

	*state = "unknown";
	*status = "Whether it has gone out could not be read just now; reload the page.";
	if (a->decision != NULL && strcmp(a->decision, "reject") == 0) {
		*state = "not sent";
		*status = "The request was rejected, so nothing was sent.";
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
	if (st == NULL) {
		*state = "not queued";
		*status = "No action was queued for this decision.";
	} else if (strcmp(st, "pending") == 0) {
		PGresult *res = NULL;
		const char *on = NULL;

		if (control_switch(c->ctx->db, true, &res) == DB_OK && PQntuples(res) == 1)
			on = db_get(res, 0, "actions_enabled");
		if (on != NULL && on[0] == 'f') {
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
		PQclear(res);
	} else if (strcmp(st, "sending") == 0) {
		*state = "being sent";
		*status = "The dispatcher is sending it right now.";
	} else if (strcmp(st, "completed") == 0) {
		*state = "sent";
		*status = "It was sent, once; the provider confirmed it.";
	} else if (strcmp(st, "unknown") == 0) {
		*state = "outcome unknown";
		*status = "A send timed out; whether it arrived is being checked with the provider. "
		          "It is never simply sent again.";
	} else if (strcmp(st, "failed") == 0) {
		*state = "failed";
		*status = "It could not be sent and was set aside for the operators (dead letter). "
		          "Nothing went out.";
	} else if (strcmp(st, "cancelled") == 0) {
		*state = "cancelled";
		*status = "It was cancelled before it went out. Nothing was sent.";
	}
	/* the strings above are static; found points into list */
	json_decref(list);
}

/* ---- the draft decided on, and the votes so far ---------------------------- */

/* What a person decides on: the draft (an approver's correction of the
 * output when one was made, else the output), the effect approving
 * queues, built from it, and the votes so far. */
struct draft {
	const struct contract *k;    /* the run's contract as loaded now; NULL when not */
	const json_t *output;        /* the draft (borrowed from the run) */
	const char *hash;            /* its hash */
	const char *edited_by;       /* who corrected it, or NULL */
	json_t *effect;              /* {type, target, payload} approving queues; owned */
	json_t *votes;               /* the run's votes, oldest first; owned */
	int needed, approvals;
	const json_t *mine;          /* the signed-in person's vote, or NULL */
};

static void
draft_clear(struct draft *dr)
{
	json_decref(dr->effect);
	json_decref(dr->votes);
	memset(dr, 0, sizeof(*dr));
}

/* The effect approving queues when output is the draft: the proposed
 * effect's payload with the members the contract takes from the output
 * taken from this one, checked as at /output; NULL with errors appended
 * when it does not pass. */
static json_t *
draft_effect(struct api_call *c, const struct contract *k, const json_t *proposed,
             const json_t *output, json_t *errors)
{
	const char *type = json_string_value(json_object_get(proposed, "type"));
	const char *target = json_string_value(json_object_get(proposed, "target"));
	const struct config_target *t = target != NULL ? config_target(c->ctx->cfg, target) : NULL;
	json_t *payload;

	if (type == NULL || target == NULL)
		return NULL;
	payload = edit_check(k, type, t != NULL && strcmp(t->kind, "smtp") == 0,
	                     json_object_get(proposed, "payload"), output, errors);
	return payload != NULL ? json_pack("{s:s, s:s, s:o}", "type", type, "target", target,
	                                   "payload", payload)
	                       : NULL;
}

static enum og_rc
draft_load(struct api_call *c, const struct gate_approval *a, const json_t *run,
           struct draft *dr)
{
	const json_t *edit = json_object_get(run, "edit");
	const json_t *proposed = json_object_get(run, "proposed_effect");
	const char *name = json_string_value(json_object_get(run, "contract"));
	const char *subject = c->req->remote_user;
	enum og_rc rc;
	json_t *v, *errors;
	size_t i;

	memset(dr, 0, sizeof(*dr));
	dr->k = name != NULL && c->ctx->contracts != NULL ? contract_find(c->ctx->contracts, name)
	                                                 : NULL;
	dr->output = json_object_get(edit != NULL ? edit : run, "output");
	dr->hash = json_string_value(json_object_get(edit != NULL ? edit : run, "output_hash"));
	dr->edited_by = json_string_value(json_object_get(edit, "by"));
	if ((rc = gate_votes(c->ctx->db, a->client_id, a->key, &dr->votes, &dr->needed)) != OG_OK)
		return rc;
	if (a->min_approvals > dr->needed)
		dr->needed = a->min_approvals;
	json_array_foreach(dr->votes, i, v) {
		const char *who = json_string_value(json_object_get(v, "subject"));

		if (strcmp(json_string_value(json_object_get(v, "decision")) ?: "", "approve") == 0)
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
	dr->effect = errors != NULL ? draft_effect(c, dr->k, proposed, dr->output, errors) : NULL;
	json_decref(errors);
	return dr->effect != NULL ? OG_OK : OG_ERROR;
}

/* "approved", "rejected" */
static const char *
decided_word(const char *decision)
{
	return decision != NULL && strcmp(decision, "reject") == 0 ? "rejected" : "approved";
}

/* The votes section of a page: who decided what, when; removed when the
 * run needs one approval and nobody has voted. */
static void
fill_votes(struct page *p, const struct draft *dr)
{
	char status[160];
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
		(void)page_scope_text(sc, "vote_note", json_is_true(json_object_get(v, "edited"))
		                                           ? " (after correcting the draft)"
		                                           : "");
	}
	page_repeat_done(p, "vote");
}

/* The page of an approval that was decided: who decided what, when, and
 * whether the action has gone out. A vote below the run's quorum is
 * recorded and says so: how many approved, how many more are needed. */
static void
page_decided(struct api_call *c, int status, const struct gate_approval *a, const json_t *run,
             const struct draft *dr)
{
	struct page *p = page_new(c->ctx->pages, "decided");
	const json_t *effect = dr->effect;
	const char *state = json_string_value(json_object_get(run, "state"));
	bool waiting = state != NULL && ledger_state_parse(state) == RUN_AWAITING_HUMAN;
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
			         strcmp(a->decision ?: "", "reject") == 0 ? "reject" : "approval",
			         dr->approvals, dr->needed);
			(void)page_text(p, "lede", lede);
		}
		(void)page_text(p, "title", waiting ? "Your approval is recorded" : "Decided");
		(void)page_text(p, "key", a->key);
		(void)page_text(p, "decision", a->decision != NULL ? a->decision : "");
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
	page_answer(c, status, p);
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
static const char *
approve_refusal(const struct api_call *c, const struct gate_approval *a, const char *decision)
{
	const char *subject = c->req->remote_user;

	if (!contract_approver_matches(a->approver, subject, c->req->auth_groups,
	                               c->ctx->cfg->auth_groups_separator[0]))
		return "You are not among the approvers this link was issued to.";
	if (a->separation_of_duties && a->requested_by != NULL &&
	    strcasecmp(a->requested_by, subject) == 0)
		return "You requested this action, so someone else must approve it.";
	if (a->separation_of_duties && a->requested_by == NULL &&
	    strcmp(decision, "approve") == 0)
		return "Nobody is recorded as having requested this action, so no one can "
		       "show they are not its requester: it can only be rejected.";
	return NULL;
}

/* The effect as it will be sent, by the functions the dispatcher's
 * providers send it with: for mail the message's From, To, Subject and
 * body; for HTTP the request's method, URL and body. A part that does not
 * apply is removed; the payload as handed in stays below either way. */
static void
card_effect(struct api_call *c, struct page *p, const json_t *effect)
{
	const char *type = json_string_value(json_object_get(effect, "type"));
	const char *target = json_string_value(json_object_get(effect, "target"));
	const struct config_target *t = target != NULL ? config_target(c->ctx->cfg, target) : NULL;
	char *payload = json_dumps(json_object_get(effect, "payload"),
	                           JSON_COMPACT | JSON_ENCODE_ANY);
	char why[160], count[24], *url = NULL, *body = NULL, *shown = NULL;
	struct provider_mail m;
	bool mail = false, http = false;
	size_t i;
	json_t *v;

	if (t != NULL && payload != NULL && strcmp(t->kind, "smtp") == 0 &&
	    provider_smtp_mail(t, payload, &m, why, sizeof(why))) {
		mail = true;
		(void)page_text(p, "mail_from", m.from);
		snprintf(count, sizeof(count), "%zu", json_array_size(m.to));
		(void)page_text(p, "mail_count", count);
		json_array_foreach(m.to, i, v) {
			struct page_scope *sc = page_repeat(p, "mail_rcpt");

			if (sc == NULL)
				break;
			(void)page_scope_text(sc, "mail_rcpt", json_string_value(v) ?: "");
		}
		page_repeat_done(p, "mail_rcpt");
		(void)page_text(p, "mail_subject", m.subject);
		(void)page_text(p, "mail_body", m.body);
		provider_mail_clear(&m);
	} else if (t != NULL && payload != NULL && type != NULL && strcmp(t->kind, "http") == 0 &&
	           provider_http_request(t, type, payload, &url, &body, why, sizeof(why))) {
		json_t *b = json_loads(body, JSON_DECODE_ANY, NULL);

		http = true;
		shown = b != NULL ? page_json_text(b) : NULL;
		json_decref(b);
		(void)page_text(p, "http_method", "POST");
		(void)page_text(p, "http_url", url);
		(void)page_text(p, "http_body", shown != NULL ? shown : body);
	}
	if (!mail)
		page_remove(p, "mail");
	if (!http)
		page_remove(p, "http");
	free(shown);
	free(url);
	free(body);
	free(payload);
}

/* The fields of the draft the person may correct, as a form: what they
 * sent back (values, after a refused correction) or the draft's text. */
static bool
card_edit(struct page *p, const struct draft *dr, const json_t *values, const json_t *errors)
{
	size_t i, shown = 0;
	json_t *v;

	for (i = 0; dr->k != NULL && i < contract_editable_count(dr->k); i++) {
		const char *name = contract_editable(dr->k, i);
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
	if (json_array_size(errors) > 0) {
		json_array_foreach(errors, i, v) {
			struct page_scope *sc = page_repeat(p, "edit_error");

			if (sc == NULL)
				break;
			(void)page_scope_text(sc, "edit_error_path",
			                      json_string_value(json_object_get(v, "path")) ?: "");
			(void)page_scope_text(sc, "edit_error_message",
			                      json_string_value(json_object_get(v, "message")) ?: "");
		}
		page_repeat_done(p, "edit_error");
	} else {
		page_remove(p, "edit_errors");
	}
	return shown > 0;
}

/* May the person correct the draft now? The contract names fields, they
 * may approve, and nobody approved or corrected it yet: every approval of
 * a quorum is then for the same text. */
static bool
draft_editable(const struct api_call *c, const struct gate_approval *a, const struct draft *dr)
{
	size_t i;
	json_t *v;
	bool approve = false;

	json_array_foreach(a->allowed_decisions, i, v)
		if (json_is_string(v) && strcmp(json_string_value(v), "approve") == 0)
			approve = true;
	return approve && dr->k != NULL && contract_editable_count(dr->k) > 0 &&
	       dr->approvals == 0 && dr->edited_by == NULL && dr->mine == NULL &&
	       approve_refusal(c, a, "approve") == NULL;
}

/* The confirmation card. GET never changes anything. After a correction
 * that did not pass (status 422), the card again with what the person
 * wrote (values) and why it was refused (edit_errors). */
static void
page_card(struct api_call *c, const struct gate_approval *a, const json_t *run,
          const struct draft *dr, const json_t *values, const json_t *edit_errors, int status)
{
	const struct config *cfg = c->ctx->cfg;
	const json_t *output = dr->output;
	const json_t *effect = dr->effect;
	const json_t *model = json_object_get(run, "model");
	const json_t *errs = json_object_get(run, "validation_errors");
	const char *source = json_string_value(json_object_get(run, "source_url"));
	const char *requested = json_string_value(json_object_get(run, "requested_by"));
	const char *subject = c->req->remote_user, *name, *dec, *why, *refusal = NULL;
	char csrf[CSRF_TEXT_LEN + 1], model_text[512], voted[320], hint[320];
	size_t buttons = 0;
	char *out_text = pretty(output), *eff_text = pretty(json_object_get(effect, "payload"));
	struct page *p = page_new(c->ctx->pages, "approval");
	struct log_fields f = { 0 };
	size_t i;
	json_t *v;

	if (p == NULL || out_text == NULL || eff_text == NULL) {
		page_free(p);
		p = NULL;
		goto out;
	}
	(void)page_text(p, "title", "Approval needed");
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
	if (json_array_size(errs) > 0) {
		json_array_foreach(errs, i, v) {
			struct page_scope *sc = page_repeat(p, "error_item");

			if (sc == NULL)
				break;
			(void)page_scope_text(sc, "error_path",
			                      json_string_value(json_object_get(v, "path")) ?: "");
			(void)page_scope_text(sc, "error_message",
			                      json_string_value(json_object_get(v, "message")) ?: "");
		}
		page_repeat_done(p, "error_item");
	} else {
		page_remove(p, "errors");
	}
	(void)page_text(p, "approver", subject);
	(void)page_text(p, "approver_groups", c->req->auth_groups != NULL ? c->req->auth_groups : "");
	(void)page_text(p, "expires_at", a->expires_at);
	(void)page_text(p, "effect_type", json_string_value(json_object_get(effect, "type")) ?: "");
	(void)page_text(p, "effect_target", json_string_value(json_object_get(effect, "target")) ?: "");
	(void)page_text(p, "effect_payload", eff_text);
	card_effect(c, p, effect);
	(void)page_text(p, "requested_by", requested != NULL ? requested : "(not given)");
	fill_votes(p, dr);
	if (dr->mine != NULL) {
		/* one person, one vote, whichever link, group or inbox entry */
		snprintf(voted, sizeof(voted), "You already %s this request (%s). Each person "
		         "counts once; %d of %d different people have approved so far.",
		         decided_word(json_string_value(json_object_get(dr->mine, "decision"))),
		         json_string_value(json_object_get(dr->mine, "at")) ?: "",
		         dr->approvals, dr->needed);
		refusal = voted;
	}
	if (dr->needed > 1) {
		snprintf(hint, sizeof(hint), "Read what will be sent, below, before you press a "
		         "button. It is sent once %d different people have approved; a reject by "
		         "anyone ends the request. Your decision cannot be undone.", dr->needed);
		(void)page_text(p, "settle_hint", hint);
	}
	if (!draft_editable(c, a, dr) || !card_edit(p, dr, values, edit_errors))
		page_remove(p, "edit");
	/* Only the decisions this person may take are buttons; none, no form
	 * (and no CSRF token issued to them). */
	json_array_foreach(a->allowed_decisions, i, v) {
		struct page_scope *sc;

		dec = json_string_value(v);
		if (dec == NULL || dr->mine != NULL)
			continue;
		if ((why = approve_refusal(c, a, dec)) != NULL) {
			refusal = refusal != NULL ? refusal : why;
			continue;
		}
		if ((sc = page_repeat(p, "decision_button")) == NULL)
			continue;
		(void)page_scope_attr(sc, "decision_value", "value", dec);
		(void)page_scope_text(sc, "decision_label",
		                      strcmp(dec, "approve") == 0 ? "Approve" : "Reject");
		buttons++;
	}
	page_repeat_done(p, "decision_button");
	if (buttons == 0) {
		page_remove(p, "form");
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
	page_answer(c, status, p);
	free(out_text);
	free(eff_text);
	f.approval_id = a->id;
	f.actor = subject;
	api_log(c, LOG_LEVEL_INFO, "approval.viewed", &f);
}

/* Origin / Sec-Fetch-Site: the form must come from our own pages. */
static bool
same_origin(const struct api_call *c)
{
	const char *origin = c->req->origin, *site = c->req->sec_fetch_site;
	const char *pub = c->ctx->cfg->public_url;

	if (site != NULL && site[0] != '\0')
		return strcmp(site, "same-origin") == 0;
	if (origin != NULL && origin[0] != '\0' && pub[0] != '\0') {
		size_t n = strcspn(pub + (strncmp(pub, "https://", 8) == 0 ? 8 : 7), "/") +
		           (strncmp(pub, "https://", 8) == 0 ? 8 : 7);

		return strlen(origin) == n && strncasecmp(origin, pub, n) == 0;
	}
	return false;
}

/* A decision refused: the page says why, and one approval.refused line. */
static void
refuse(struct api_call *c, struct log_fields *f, int status, const char *reason,
       const char *heading, const char *message)
{
	if (reason != NULL)
		f->reason = reason;
	page_notice(c, status, "approval.refused", heading, message, f);
}

/* The corrections posted with an approval: "edit.NAME" fields of the
 * contract's editable members, as {NAME: text}. False (the answer given)
 * when one is malformed. */
static bool
posted_edits(struct api_call *c, struct log_fields *f, const struct draft *dr, json_t *values)
{
	size_t i, cap = c->req->body_len + 1;
	char *buf = malloc(cap);
	bool ok = true;

	for (i = 0; buf != NULL && ok && dr->k != NULL && i < contract_editable_count(dr->k); i++) {
		const char *name = contract_editable(dr->k, i);
		char field[OG_CONTRACT_NAME_MAX + 8];
		long n;

		snprintf(field, sizeof(field), "edit.%s", name);
		n = http_form_get(c->req->body, c->req->body_len, field, buf, cap);
		if (n == -1)
			continue;
		if (n < 0 || !canon_utf8_valid(buf, (size_t)n)) {
			refuse(c, f, 400, "bad_edit", "Correction not accepted",
			       "A corrected field is not text (valid UTF-8 without NUL bytes, sent "
			       "once); nothing was decided. Correct it again on the approval page.");
			ok = false;
			break;
		}
		(void)json_object_set_new(values, name, json_stringn(buf, (size_t)n));
	}
	if (buf == NULL) {
		f->reason = "internal";
		page_notice(c, 500, "approval.failed", "Something went wrong",
		            "The decision was not recorded. Try again.", f);
		ok = false;
	}
	free(buf);
	return ok;
}

/* The decision: the form checked here, the transaction in decide_approval,
 * then 303 to the page. */
static void
approve_decide(struct api_call *c, const unsigned char hash[32], struct gate_approval *a,
               const json_t *run, const struct draft *dr, char *location)
{
	const struct config *cfg = c->ctx->cfg;
	const char *subject = c->req->remote_user;
	const json_t *effect = dr->effect;
	const char *callback = json_string_value(json_object_get(run, "callback_url"));
	const char *why;
	char decision[16], csrf[128], reason[OG_FIELD_MAX + 1], draft[CANON_HASH_LEN + 8];
	struct decide_approval d = { 0 };
	struct ledger_run lr = { 0 };
	struct log_fields f = { 0 };
	char *logged = NULL, *fields_text = NULL, progress[96];
	json_t *values = json_object(), *errors = json_array(), *edited = NULL;
	json_t *changed = NULL, *corrected = NULL;
	long n;

	f.approval_id = a->id;
	f.actor = subject;
	if (c->body_refused) {
		refuse(c, &f, 415, NULL, "Not a form",
		       "The decision must be sent by the form on the approval page.");
		goto out;
	}
	if (http_form_get(c->req->body, c->req->body_len, "decision", decision,
	                  sizeof(decision)) <= 0 ||
	    http_form_get(c->req->body, c->req->body_len, "csrf", csrf, sizeof(csrf)) <= 0) {
		refuse(c, &f, 400, "missing_field", "Incomplete form",
		       "The form lacks its decision or its protection token; reload the page.");
		goto out;
	}
	n = http_form_get(c->req->body, c->req->body_len, "reason", reason, sizeof(reason));
	if (n > 0 && !canon_utf8_valid(reason, (size_t)n)) {
		refuse(c, &f, 400, "bad_reason", "Reason not accepted",
		       "The reason is not valid UTF-8 text; nothing was decided. Type it "
		       "again on the approval page.");
		goto out;
	}
	if (n == -2 || (n > 0 && !api_printable(reason))) {
		refuse(c, &f, 400, "bad_reason", "Reason not accepted",
		       "The reason must be plain text of at most 512 bytes.");
		goto out;
	}
	if (n < 0)
		reason[0] = '\0';
	f.decision = decision;
	if (!csrf_verify((const unsigned char *)cfg->csrf_secret, strlen(cfg->csrf_secret), a->id,
	                 subject, csrf)) {
		refuse(c, &f, 403, "csrf", "Form expired",
		       "This form was not issued to you for this approval. Reload the "
		       "approval page and decide again.");
		goto out;
	}
	if (!json_array_size(a->allowed_decisions) ||
	    (strcmp(decision, "approve") != 0 && strcmp(decision, "reject") != 0)) {
		refuse(c, &f, 400, "wrong_decision", "Decision not allowed",
		       "This approval does not allow that decision.");
		goto out;
	}
	{
		size_t i;
		json_t *v;
		bool allowed = false;

		json_array_foreach(a->allowed_decisions, i, v)
			if (json_is_string(v) && strcmp(json_string_value(v), decision) == 0)
				allowed = true;
		if (!allowed) {
			refuse(c, &f, 400, "wrong_decision", "Decision not allowed",
			       "This approval does not allow that decision.");
			goto out;
		}
	}
	if ((why = approve_refusal(c, a, decision)) != NULL) {
		bool approver = contract_approver_matches(a->approver, subject, c->req->auth_groups,
		                                          cfg->auth_groups_separator[0]);

		f.reason = "forbidden";
		f.detail = !approver ? "not among the approvers of this challenge"
		                     : a->requested_by != NULL
		                           ? "separation of duties: the requester cannot approve"
		                           : "separation of duties: the requester is unknown";
		refuse(c, &f, 403, NULL,
		       approver ? "Separation of duties" : "Not your approval", why);
		goto out;
	}
	if (dr->mine != NULL) {
		refuse(c, &f, 409, "already_voted", "Already voted",
		       "You have already decided on this request (through this or another link, "
		       "your group or your inbox). Each person counts once. Nothing was changed.");
		goto out;
	}
	/* the draft the page showed is the one decided on */
	n = http_form_get(c->req->body, c->req->body_len, "draft", draft, sizeof(draft));
	if (n > 0 && (dr->hash == NULL || strcmp(draft, dr->hash) != 0)) {
		refuse(c, &f, 409, "draft_changed", "The draft changed",
		       "Someone corrected the draft after your page was built. Nothing was "
		       "recorded: open the page again, read it, and decide.");
		goto out;
	}
	if (values == NULL || errors == NULL || !posted_edits(c, &f, dr, values))
		goto out;
	if (strcmp(decision, "approve") == 0 && json_object_size(values) > 0) {
		edited = edit_apply(dr->k, dr->output, values, &changed, errors);
		if (edited != NULL && json_array_size(changed) > 0) {
			if (!draft_editable(c, a, dr)) {
				refuse(c, &f, 409, "not_editable", "The draft cannot be corrected now",
				       "Someone has approved this draft already, so every further "
				       "approval is for the same text. Nothing was recorded: approve it "
				       "as it is, or reject it.");
				goto out;
			}
			corrected = draft_effect(c, dr->k, json_object_get(run, "proposed_effect"),
			                         edited, errors);
		}
		if (json_array_size(errors) > 0) {
			/* nothing consumed: the card again, with what they wrote */
			f.reason = "invalid_edit";
			f.detail = json_string_value(json_object_get(json_array_get(errors, 0), "path"));
			page_card(c, a, run, dr, values, errors, 422);
			api_log(c, LOG_LEVEL_NOTICE, "approval.refused", &f);
			goto out;
		}
		if (edited == NULL || (json_array_size(changed) > 0 && corrected == NULL)) {
			f.reason = "internal";
			page_notice(c, 500, "approval.failed", "Something went wrong",
			            "The decision was not recorded. Try again.", &f);
			goto out;
		}
		if (corrected != NULL) {
			d.edit = edited;
			d.edit_fields = changed;
			effect = corrected;
			f.edited_fields = fields_text = json_dumps(changed, JSON_COMPACT);
		}
	}

	d.approval = a;
	d.token_hash = hash;
	d.decision = decision;
	d.subject = subject;
	d.reason = reason[0] ? reason : NULL;
	d.effect = effect;
	d.callback_url = callback;
	d.draft_hash = dr->hash;
	switch (decide_approval(c->ctx->db, &d, &lr)) {
	case OG_OK:
		break;
	case OG_DUPLICATE:
		refuse(c, &f, 409, "already_voted", "Already voted",
		       "You have already decided on this request (through this or another link, "
		       "your group or your inbox). Each person counts once. Nothing was changed.");
		goto out;
	case OG_CHANGED:
		refuse(c, &f, 409, "draft_changed", "The draft changed",
		       "Someone corrected or approved the draft after your page was built. "
		       "Nothing was recorded: open the page again, read it, and decide.");
		goto out;
	case OG_USED:
		refuse(c, &f, 409, "used", "Already decided",
		       "This approval was already decided, has expired, or was revoked. "
		       "Nothing was changed.");
		goto out;
	case OG_NOT_AWAITING:
		refuse(c, &f, 409, "not_awaiting", "Already decided",
		       "The run is no longer waiting for a decision. Nothing was changed.");
		goto out;
	case OG_CONFLICT:
		refuse(c, &f, 409, "used", "Already decided",
		       "Another approver decided first. Nothing was changed.");
		goto out;
	case OG_UNAVAILABLE:
		(void)http_header(c->resp, "Retry-After", "5");
		f.reason = "database_unavailable";
		page_notice(c, 503, "db.unavailable", "Try again shortly",
		            "The database is unavailable; nothing was recorded.", &f);
		goto out;
	default:
		f.reason = "internal";
		page_notice(c, 500, "approval.failed", "Something went wrong",
		            "The decision was not recorded. Try again; if it persists, tell the "
		            "operators.",
		            &f);
		goto out;
	}
	c->resp->status = 303;
	(void)http_header(c->resp, "Location", location);
	f.key = a->key;
	if (!d.final) {
		/* recorded; the run awaits the rest of its quorum */
		snprintf(progress, sizeof(progress), "%d of %d approvals", d.approvals, d.needed);
		f.state_from = f.state_to = ledger_state_name(RUN_AWAITING_HUMAN);
		f.count = d.approvals;
		f.detail = progress;
		f.reason = reason[0] ? reason : NULL;
		f.payload_hash = d.edit_hash[0] ? d.edit_hash : NULL;
		api_log(c, LOG_LEVEL_INFO, "approval.voted", &f);
		goto out;
	}
	f.payload_hash = d.edit_hash[0] ? d.edit_hash : NULL;
	f.count = d.needed > 1 ? d.approvals : 0;
	f.state_from = ledger_state_name(RUN_AWAITING_HUMAN);
	f.state_to = ledger_state_name(lr.state);
	f.version = lr.version;
	f.effect_id = d.effect_id[0] ? d.effect_id : NULL;
	f.target = json_string_value(json_object_get(effect, "target"));
	f.reason = reason[0] ? reason : NULL;
	f.contract = json_string_value(json_object_get(lr.decided, "contract"));
	f.output_fields = logged =
		f.contract != NULL && c->ctx->contracts != NULL
			? api_output_loggable(contract_find(c->ctx->contracts, f.contract),
			                      json_object_get(lr.decided, "output"))
			: NULL;
	api_log(c, LOG_LEVEL_INFO, "approval.consumed", &f);
	if (d.effect_id[0] != '\0') {
		struct log_fields e = { .key = a->key, .effect_id = d.effect_id, .target = f.target,
			                .approval_id = a->id, .actor = subject, .decision = decision };

		api_log(c, LOG_LEVEL_INFO, "effect.enqueued", &e);
	}
	if (d.callback_id[0] != '\0') {
		struct log_fields e = { .key = a->key, .effect_id = d.callback_id,
			                .target = "callback", .approval_id = a->id,
			                .decision = decision };

		api_log(c, LOG_LEVEL_INFO, "effect.enqueued", &e);
	}
out:
	free(logged);
	free(fields_text);
	json_decref(values);
	json_decref(errors);
	json_decref(edited);
	json_decref(changed);
	json_decref(corrected);
	ledger_run_clear(&lr);
	digest_wipe(csrf, sizeof(csrf));
}

bool
api_approve_signed_in(struct api_call *c)
{
	struct log_fields f = { 0 };

	if (c->ctx->pages == NULL) {
		page_notice(c, 503, "approval.unavailable", "Approvals unavailable",
		            "This server has no approval templates configured.", &f);
		return false;
	}
	if (c->req->remote_user == NULL || c->req->remote_user[0] == '\0') {
		f.reason = "no_subject";
		page_notice(c, 401, "auth.failed", "Sign-in required",
		            "Sign in to see and decide approvals.", &f);
		return false;
	}
	return true;
}

/* A challenge found (by its token or its id): its page, or the decision
 * posted on it; after a decision, 303 to location. */
static void
approve_serve(struct api_call *c, const unsigned char hash[32], struct gate_approval *a,
              char *location, struct log_fields *fp)
{
	struct log_fields f = *fp;
	struct draft dr = { 0 };
	json_t *run = NULL;
	enum og_rc lrc;
	const char *state;
	bool post;

	snprintf(c->key, sizeof(c->key), "%s", a->key);
	f.approval_id = a->id;
	/* The run (whether it still awaits a decision is checked again inside
	 * the decision's transaction), the draft decided on and the votes. */
	lrc = ledger_status(c->ctx->db, a->client_id, a->key, false, &run);
	if (lrc == OG_OK)
		lrc = draft_load(c, a, run, &dr);
	if (lrc != OG_OK) {
		page_notice(c, lrc == OG_UNAVAILABLE ? 503 : 500, "approval.failed",
		            "Try again shortly", "The run could not be read.", &f);
		goto out;
	}
	if (a->state == APPROVAL_DECIDED) {
		decided:
		state = json_string_value(json_object_get(run, "state"));
		/* a vote below the quorum: recorded, the run still waiting */
		page_decided(c,
		             state != NULL && ledger_state_parse(state) == RUN_AWAITING_HUMAN ? 200
		                                                                              : 410,
		             a, run, &dr);
		if (c->route->body == BODY_FORM) {
			/* a decision on a used link is a refusal, and says so */
			f.reason = "used";
			f.decision = a->decision;
			api_log(c, LOG_LEVEL_NOTICE, "approval.refused", &f);
		}
		goto out;
	}
	post = c->route->body == BODY_FORM;
	if (a->state == APPROVAL_VOIDED || a->state == APPROVAL_REVOKED) {
		f.reason = gate_state_name(a->state);
		page_notice(c, 410, post ? "approval.refused" : "approval.gone", "No longer valid",
		            a->state == APPROVAL_VOIDED
		                ? "Another approver already decided this run."
		                : "This approval link was revoked by an operator.",
		            &f);
		goto out;
	}
	if (a->expired || a->state == APPROVAL_EXPIRED) {
		f.reason = "expired";
		page_notice(c, 410, post ? "approval.refused" : "approval.expired", "Expired",
		            "This approval link has expired. Nothing was sent.", &f);
		goto out;
	}
	state = json_string_value(json_object_get(run, "state"));
	if (state != NULL && ledger_state_parse(state) != RUN_AWAITING_HUMAN) {
		/* The approval and the run are read one after the other: a decision
		 * committed in between shows as a pending approval of a decided
		 * run. Read the approval again before calling it anything else. */
		gate_approval_clear(a);
		if (gate_find(c->ctx->db, hash, a) == OG_OK && a->state == APPROVAL_DECIDED)
			goto decided;
	}
	if (state == NULL || ledger_state_parse(state) != RUN_AWAITING_HUMAN) {
		f.reason = "not_awaiting";
		page_notice(c, 410, post ? "approval.refused" : "approval.gone", "No longer waiting",
		            "The run is no longer waiting for a decision.", &f);
		goto out;
	}
	if (c->route->body != BODY_FORM)
		page_card(c, a, run, &dr, NULL, NULL, 200);
	else
		approve_decide(c, hash, a, run, &dr, location);
out:
	draft_clear(&dr);
	json_decref(run);
}

void
api_approve_handle(struct api_call *c)
{
	struct gate_approval a = { 0 };
	struct log_fields f = { 0 };
	unsigned char hash[32];
	char location[sizeof(c->token) + 16];
	enum og_rc grc;

	f.actor = c->req->remote_user;
	if (!token_shape_valid(c->token)) {
		f.reason = "unknown_token";
		page_notice(c, 404, "approval.unknown", "Unknown link",
		            "This approval link is not valid. Check that it was copied whole.", &f);
		return;
	}
	if (c->route->body == BODY_FORM && !same_origin(c)) {
		f.reason = "cross_origin";
		page_notice(c, 403, "approval.refused", "Refused",
		            "Decisions are accepted only from the approval page itself.", &f);
		return;
	}
	token_hash(c->token, hash);
	grc = gate_find(c->ctx->db, hash, &a);
	if (grc == OG_UNAVAILABLE) {
		(void)http_header(c->resp, "Retry-After", "5");
		page_notice(c, 503, "db.unavailable", "Try again shortly",
		            "The database is unavailable.", &f);
		return;
	}
	if (grc != OG_OK && gate_replaced(c->ctx->db, hash) == OG_OK) {
		/* the link of a notice that a newer one (a reminder, a resend)
		 * replaced */
		f.reason = "replaced";
		page_notice(c, 410, c->route->body == BODY_FORM ? "approval.refused" : "approval.gone",
		            "No longer valid",
		            "This approval link is no longer valid: a newer message replaced it. "
		            "Use the link in the most recent message, or find the request in your "
		            "inbox at /approve/. Nothing was decided.",
		            &f);
		return;
	}
	if (grc != OG_OK) {
		f.reason = "unknown_token";
		page_notice(c, 404, "approval.unknown", "Unknown link",
		            "This approval link is not valid. Check that it was copied whole.", &f);
		return;
	}
	snprintf(location, sizeof(location), "/approve/%s", c->token);
	approve_serve(c, hash, &a, location, &f);
	digest_wipe(location, sizeof(location));
	gate_approval_clear(&a);
}

/* ---- the inbox and the card by id --------------------------------------- */

/* Most entries an inbox shows (the newest). */
#define INBOX_MAX 200

/* GET and POST /approve/card/{id}: the card of an inbox entry. Only a
 * person among the challenge's approvers (their subject, or one of their
 * groups) reaches it; to anyone else it does not exist, as an unknown
 * link. The rest is the emailed link's page and decision, the consume by
 * the challenge's token hash included. */
void
api_approve_card(struct api_call *c)
{
	struct gate_approval a = { 0 };
	struct log_fields f = { 0 };
	unsigned char hash[32];
	char id[sizeof(c->key)], location[GATE_ID_LEN + 16];
	enum og_rc grc = OG_NOT_FOUND;

	f.actor = c->req->remote_user;
	snprintf(id, sizeof(id), "%s", c->key);
	c->key[0] = '\0';
	if (c->route->body == BODY_FORM && !same_origin(c)) {
		f.reason = "cross_origin";
		page_notice(c, 403, "approval.refused", "Refused",
		            "Decisions are accepted only from the approval page itself.", &f);
		return;
	}
	if (ledger_uuid_valid(id))
		grc = gate_find_id(c->ctx->db, id, hash, &a);
	if (grc == OG_UNAVAILABLE) {
		(void)http_header(c->resp, "Retry-After", "5");
		page_notice(c, 503, "db.unavailable", "Try again shortly",
		            "The database is unavailable.", &f);
		return;
	}
	if (grc == OG_OK &&
	    !contract_approver_matches(a.approver, c->req->remote_user, c->req->auth_groups,
	                               c->ctx->cfg->auth_groups_separator[0])) {
		f.approval_id = a.id;
		f.detail = "not among the approvers of this challenge";
		grc = OG_NOT_FOUND;
	}
	if (grc != OG_OK) {
		f.reason = "unknown_approval";
		page_notice(c, 404, "approval.unknown", "Not in your inbox",
		            "There is no such request among those you may decide. Open your "
		            "inbox to see what is waiting for you.", &f);
		gate_approval_clear(&a);
		digest_wipe(hash, sizeof(hash));
		return;
	}
	snprintf(location, sizeof(location), "/approve/card/%s", a.id);
	approve_serve(c, hash, &a, location, &f);
	digest_wipe(hash, sizeof(hash));
	gate_approval_clear(&a);
}

/* "3 min", "5 h 2 min", "2 d 4 h": a span for people. */
static void
span_text(long long s, char *out, size_t n)
{
	if (s < 0)
		s = 0;
	if (s < 60)
		snprintf(out, n, "under a minute");
	else if (s < 3600)
		snprintf(out, n, "%lld min", s / 60);
	else if (s < 86400)
		snprintf(out, n, "%lld h %lld min", s / 3600, s % 3600 / 60);
	else
		snprintf(out, n, "%lld d %lld h", s / 86400, s % 86400 / 3600);
}

/* GET /approve/: what the signed-in person may decide, newest first. Each
 * entry links to its card by the challenge's id; no token is ever shown or
 * linked (only their hashes are stored). Nothing to decide is an empty
 * inbox, not an error. */
void
api_approve_inbox(struct api_call *c)
{
	const char *subject = c->req->remote_user;
	char sep = c->ctx->cfg->auth_groups_separator[0];
	json_t *list = NULL, *e;
	struct log_fields f = { 0 };
	struct page *p = NULL;
	enum og_rc grc;
	size_t i, shown = 0;
	char text[64];

	f.actor = subject;
	grc = gate_inbox(c->ctx->db, subject, c->req->auth_groups, sep, INBOX_MAX, &list);
	if (grc != OG_OK) {
		if (grc == OG_UNAVAILABLE)
			(void)http_header(c->resp, "Retry-After", "5");
		f.reason = grc == OG_UNAVAILABLE ? "database_unavailable" : "internal";
		page_notice(c, grc == OG_UNAVAILABLE ? 503 : 500, "approval.failed",
		            "Try again shortly", "Your inbox could not be read.", &f);
		goto out;
	}
	if ((p = page_new(c->ctx->pages, "inbox")) == NULL)
		goto answer;
	(void)page_text(p, "title", "Your approvals");
	(void)page_text(p, "approver", subject);
	(void)page_text(p, "approver_groups", c->req->auth_groups != NULL ? c->req->auth_groups : "");
	json_array_foreach(list, i, e) {
		const char *id = json_string_value(json_object_get(e, "approval_id"));
		const char *approver = json_string_value(json_object_get(e, "approver"));
		const char *req = json_string_value(json_object_get(e, "requested_by"));
		const char *etype = json_string_value(json_object_get(e, "effect_type"));
		const char *etarget = json_string_value(json_object_get(e, "effect_target"));
		const char *esubj = json_string_value(json_object_get(e, "effect_subject"));
		char href[GATE_ID_LEN + 16], effect[256], title[320];
		struct page_scope *sc;

		/* the card's own rule: the same comparison, and a requester never
		 * decides their own request under separation of duties */
		if (id == NULL || !contract_approver_matches(approver, subject, c->req->auth_groups, sep))
			continue;
		if (json_is_true(json_object_get(e, "separation_of_duties")) && req != NULL &&
		    strcasecmp(req, subject) == 0)
			continue;
		if ((sc = page_repeat(p, "entry")) == NULL)
			break;
		snprintf(href, sizeof(href), "/approve/card/%s", id);
		snprintf(effect, sizeof(effect), "%s to %s", etype ?: "(no action)", etarget ?: "-");
		if (esubj != NULL)
			snprintf(title, sizeof(title), "%s", esubj);
		else
			snprintf(title, sizeof(title), "%s", effect);
		(void)page_scope_attr(sc, "entry_link", "href", href);
		(void)page_scope_text(sc, "entry_title", title);
		(void)page_scope_text(sc, "entry_effect", effect);
		(void)page_scope_text(sc, "entry_key", json_string_value(json_object_get(e, "key")) ?: "");
		(void)page_scope_text(sc, "entry_client",
		                      json_string_value(json_object_get(e, "client")) ?: "");
		(void)page_scope_text(sc, "entry_approver", approver);
		span_text(json_integer_value(json_object_get(e, "age_seconds")), text, sizeof(text));
		(void)page_scope_text(sc, "entry_age", text);
		(void)page_scope_text(sc, "entry_expires",
		                      json_string_value(json_object_get(e, "expires_at")) ?: "");
		span_text(json_integer_value(json_object_get(e, "seconds_left")), text, sizeof(text));
		(void)page_scope_text(sc, "entry_left", text);
		shown++;
	}
	page_repeat_done(p, "entry");
	snprintf(text, sizeof(text), "%zu", shown);
	(void)page_text(p, "count", text);
	page_remove(p, shown > 0 ? "empty" : "list");
answer:
	page_answer(c, 200, p);
	p = NULL;
	f.reason = shown > 0 ? NULL : "empty";
	{
		char n[24];

		snprintf(n, sizeof(n), "%zu", shown);
		f.detail = n;
		api_log(c, LOG_LEVEL_INFO, "approval.inbox", &f);
	}
out:
	json_decref(list);
}

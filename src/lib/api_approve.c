/*
 * api_approve.c — the handlers of the approval pages: the card a person
 * reads before deciding (GET /approve/{token}) and the decision it posts
 * back (checked here, taken by decide_approval in one transaction, then
 * 303 to the page). Every answer is a page; the token in the URL is a
 * capability, never logged or stored. What the pages show (the card, the
 * decided page, the notice page, the draft they are built from) is in
 * api_card.c.
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
#include "api_card.h"
#include "buf.h"
#include "canon.h"
#include "contract.h"
#include "csrf.h"
#include "api_decision.h"
#include "decide.h"
#include "digest.h"
#include "edit.h"
#include "gate.h"
#include "ledger.h"
#include "page.h"
#include "token.h"
#include "caps.h"
#include "log.h"
#include "notice.h"

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
	api_card_notice(c, status, "approval.refused", heading, message, f);
}

/* The corrections posted with an approval: "edit.NAME" fields of the
 * contract's editable members, as {NAME: text}. False (the answer given)
 * when one is malformed. */
static bool
posted_edits(struct api_call *c, struct log_fields *f, const struct api_card_draft *dr,
             json_t *values)
{
	size_t i, cap = c->req->body_len + 1;
	char *buf = malloc(cap);
	bool ok = true;

	for (i = 0; buf != NULL && ok && dr->k != NULL && i < contract_gate(dr->k)->neditable; i++) {
		const char *name = contract_gate(dr->k)->editable[i];
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
		api_card_notice(c, 500, "approval.failed", "Something went wrong",
		                "The decision was not recorded. Try again.", f);
		ok = false;
	}
	free(buf);
	return ok;
}

/* The decision's form read: decision, csrf, reason (checked), draft. False
 * when it is refused (the page answered). */
static bool
form_read(struct api_call *c, const struct gate_approval *a, struct log_fields *f,
          char decision[24], char reason[OG_FIELD_MAX + 1], char draft[CANON_HASH_LEN + 8])
{
	const struct config *cfg = c->ctx->cfg;
	char csrf[128];
	bool ok;
	long n;

	if (c->body_refused) {
		refuse(c, f, 415, NULL, "Not a form",
		       "The decision must be sent by the form on the approval page.");
		return false;
	}
	if (http_form_get(c->req->body, c->req->body_len, "decision", decision, 24) <= 0 ||
	    http_form_get(c->req->body, c->req->body_len, "csrf", csrf, sizeof(csrf)) <= 0) {
		refuse(c, f, 400, "missing_field", "Incomplete form",
		       "The form lacks its decision or its protection token; reload the page.");
		return false;
	}
	n = http_form_get(c->req->body, c->req->body_len, "reason", reason, OG_FIELD_MAX + 1);
	if (n > 0 && !canon_utf8_valid(reason, (size_t)n)) {
		refuse(c, f, 400, "bad_reason", "Reason not accepted",
		       "The reason is not valid UTF-8 text; nothing was decided. Type it "
		       "again on the approval page.");
		return false;
	}
	if (n == -2 || (n > 0 && !api_printable(reason))) {
		refuse(c, f, 400, "bad_reason", "Reason not accepted",
		       "The reason must be plain text of at most 512 bytes.");
		return false;
	}
	if (n < 0)
		reason[0] = '\0';
	f->decision = decision;
	ok = csrf_verify((const unsigned char *)cfg->csrf_secret, strlen(cfg->csrf_secret), a->id,
	                 c->req->remote_user, csrf);
	digest_wipe(csrf, sizeof(csrf));
	if (!ok) {
		refuse(c, f, 403, "csrf", "Form expired",
		       "This form was not issued to you for this approval. Reload the "
		       "approval page and decide again.");
		return false;
	}
	if (http_form_get(c->req->body, c->req->body_len, "draft", draft, CANON_HASH_LEN + 8) <= 0)
		draft[0] = '\0';
	return true;
}

/* The decision: the form checked here, the rules and the transaction in
 * decision_take, then 303 to the page. */
static void
approve_decide(struct api_call *c, const unsigned char hash[32], struct gate_approval *a,
               const json_t *run, const struct api_card_draft *dr, char *location)
{
	const struct decision_refusal *r;
	char decision[24], reason[OG_FIELD_MAX + 1], draft[CANON_HASH_LEN + 8];
	char feedback[4 * DECISION_FEEDBACK_MAX + 2];
	struct decision_out out = { 0 };
	struct decision_in in = { 0 };
	struct log_fields f = { 0 };
	json_t *values = json_object();
	long n;

	f.approval_id = a->id;
	f.actor = c->req->remote_user;
	if (!form_read(c, a, &f, decision, reason, draft))
		goto out;
	/* corrections go with an approval only */
	if (values == NULL ||
	    (gate_decision_parse(decision) == GATE_APPROVE && !posted_edits(c, &f, dr, values)))
		goto out;
	in.decision = decision;
	in.reason = reason;
	in.draft = draft;
	in.values = values;
	/* the feedback of a request for changes, checked by decision_take; one
	 * longer than the buffer is refused there as too long */
	n = http_form_get(c->req->body, c->req->body_len, "feedback", feedback, sizeof(feedback));
	if (n > 0 || n == -2) {
		in.feedback = feedback;
		in.feedback_len = n > 0 ? (size_t)n : sizeof(feedback);
	}
	r = decision_take(c, hash, a, run, dr, &in, &f, &out);
	if (r == &DECISION_INVALID_EDIT) {
		/* nothing consumed: the card again, with what they wrote */
		f.reason = decision_refusal_code(r);
		api_card_page(c, a, run, dr, values, out.edit_errors, 422);
		api_log(c, LOG_LEVEL_NOTICE, "approval.refused", &f);
	} else if (r == &DECISION_UNAVAILABLE) {
		(void)http_header(c->resp, "Retry-After", "5");
		f.reason = "database_unavailable";
		api_card_notice(c, 503, "db.unavailable", r->heading, r->message, &f);
	} else if (r == &DECISION_INTERNAL) {
		f.reason = "internal";
		api_card_notice(c, 500, "approval.failed", r->heading, r->message, &f);
	} else if (r == &DECISION_NOT_YOURS || r == &DECISION_SEPARATION) {
		f.reason = "forbidden";
		refuse(c, &f, 403, NULL, r->heading, api_card_refusal(c, a, gate_decision_parse(decision)));
	} else if (r != NULL) {
		if (r == &DECISION_NOT_ALLOWED)
			refuse(c, &f, 400, "wrong_decision", r->heading, r->message);
		else
			refuse(c, &f, r->status, decision_refusal_code(r), r->heading, r->message);
	} else {
		c->resp->status = 303;
		(void)http_header(c->resp, "Location", location);
		decision_logged(c, a, &in, &out, &f);
	}
out:
	decision_out_clear(&out);
	json_decref(values);
}

bool
api_approve_signed_in(struct api_call *c)
{
	struct log_fields f = { 0 };

	if (c->ctx->pages == NULL) {
		api_card_notice(c, 503, "approval.unavailable", "Approvals unavailable",
		                "This server has no approval templates configured.", &f);
		return false;
	}
	if (c->req->remote_user == NULL || c->req->remote_user[0] == '\0') {
		f.reason = "no_subject";
		api_card_notice(c, 401, "auth.failed", "Sign-in required",
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
	struct api_card_draft dr = { 0 };
	json_t *run = NULL;
	enum og_rc lrc;
	const char *state, *why;
	bool post;

	snprintf(c->key, sizeof(c->key), "%s", a->key);
	/* An approver is no API client, but every line about the run names
	 * its client: two clients may use the same key. */
	if (!c->authed &&
	    clients_name(c->ctx->db, a->client_id, c->client.name, sizeof(c->client.name)) == OG_OK)
		c->client.id = a->client_id;
	f.approval_id = a->id;
	/* Someone who may decide nothing here is told so, and sees nothing of
	 * the request (whatever its state); a decision they post is refused
	 * below with its reason. */
	if (c->route->body != BODY_FORM && (why = api_card_refusal(c, a, GATE_REJECT)) != NULL &&
	    api_card_refusal(c, a, GATE_APPROVE) != NULL) {
		api_card_not_yours(c, a, why, &f);
		return;
	}
	/* The run (whether it still awaits a decision is checked again inside
	 * the decision's transaction), the draft decided on and the votes. */
	lrc = api_card_load(c, a, &run, &dr);
	if (lrc != OG_OK) {
		api_card_notice(c, lrc == OG_UNAVAILABLE ? 503 : 500, "approval.failed",
		                "Try again shortly", "The run could not be read.", &f);
		goto out;
	}
	if (decision_round_closed(a, run) &&
	    !(a->state == APPROVAL_DECIDED && a->decision != NULL &&
	      gate_decision_parse(a->decision) == GATE_CHANGES_REQUESTED)) {
		/* a request for changes closed this challenge's round (whose
		 * request itself shows as decided) */
		const struct decision_refusal *r = &DECISION_ROUND_CLOSED;

		f.reason = decision_refusal_code(r);
		api_card_notice(c, r->status,
		                c->route->body == BODY_FORM ? "approval.refused" : "approval.gone",
		                r->heading, r->message, &f);
		goto out;
	}
	if (a->state == APPROVAL_DECIDED) {
		decided:
		state = json_string_value(json_object_get(run, "state"));
		/* a vote below the quorum: recorded, the run still waiting in
		 * this challenge's round */
		api_card_decided(c,
		                 state != NULL && ledger_state_parse(state) == RUN_AWAITING_HUMAN &&
		                         !decision_round_closed(a, run)
		                     ? 200
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
		api_card_notice(c, 410, post ? "approval.refused" : "approval.gone",
		                "No longer valid",
		                a->state == APPROVAL_VOIDED
		                    ? "Another approver already decided this run."
		                    : "This approval link was revoked by an operator.",
		                &f);
		goto out;
	}
	if (a->expired || a->state == APPROVAL_EXPIRED) {
		f.reason = gate_state_name(APPROVAL_EXPIRED);
		api_card_notice(c, 410, post ? "approval.refused" : "approval.expired", "Expired",
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
		api_card_notice(c, 410, post ? "approval.refused" : "approval.gone",
		                "No longer waiting",
		                "The run is no longer waiting for a decision.", &f);
		goto out;
	}
	if (c->route->body != BODY_FORM)
		api_card_page(c, a, run, &dr, NULL, NULL, 200);
	else
		approve_decide(c, hash, a, run, &dr, location);
out:
	api_card_draft_clear(&dr);
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
		api_card_notice(c, 404, "approval.unknown", "Unknown link",
		                "This approval link is not valid. Check that it was copied whole.",
		                &f);
		return;
	}
	if (c->route->body == BODY_FORM && !same_origin(c)) {
		f.reason = "cross_origin";
		api_card_notice(c, 403, "approval.refused", "Refused",
		                "Decisions are accepted only from the approval page itself.", &f);
		return;
	}
	token_hash(c->token, hash);
	grc = gate_find(c->ctx->db, hash, &a);
	if (grc == OG_UNAVAILABLE) {
		(void)http_header(c->resp, "Retry-After", "5");
		api_card_notice(c, 503, "db.unavailable", "Try again shortly",
		                "The database is unavailable.", &f);
		return;
	}
	if (grc != OG_OK && gate_replaced(c->ctx->db, hash) == OG_OK) {
		/* the link of a notice that a newer one (a reminder, a resend)
		 * replaced */
		f.reason = "replaced";
		api_card_notice(c, 410,
		                c->route->body == BODY_FORM ? "approval.refused" : "approval.gone",
		                "No longer valid",
		                "This approval link is no longer valid: a newer message replaced "
		                "it. Use the link in the most recent message, or find the request "
		                "in your inbox at /approve/. Nothing was decided.",
		                &f);
		return;
	}
	if (grc != OG_OK) {
		f.reason = "unknown_token";
		api_card_notice(c, 404, "approval.unknown", "Unknown link",
		                "This approval link is not valid. Check that it was copied whole.",
		                &f);
		return;
	}
	snprintf(location, sizeof(location), "/approve/%s", c->token);
	approve_serve(c, hash, &a, location, &f);
	digest_wipe(location, sizeof(location));
	gate_approval_clear(&a);
}

/* ---- the inbox and the card by id --------------------------------------- */

/* An inbox entry's second line: "from CUSTOMER · reply “DRAFT SUBJECT”",
 * either part when known (the draft's subject only when the title is the
 * ticket's), else nothing. */
static void
inbox_about(struct page_scope *sc, const char *customer, const char *draft)
{
	struct buf t;

	buf_init(&t, 16384);
	if (customer != NULL && customer[0] != '\0' &&
	    (buf_puts(&t, "from ") != 0 || buf_puts(&t, customer) != 0))
		buf_reset(&t);
	if (draft != NULL && draft[0] != '\0' &&
	    (buf_puts(&t, t.len > 0 ? " \xc2\xb7 reply \xe2\x80\x9c" : "reply \xe2\x80\x9c") != 0 ||
	     buf_puts(&t, draft) != 0 || buf_puts(&t, "\xe2\x80\x9d") != 0))
		buf_reset(&t);
	(void)page_scope_text(sc, "entry_about", t.data != NULL ? t.data : "");
	buf_free(&t);
}

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
		api_card_notice(c, 403, "approval.refused", "Refused",
		                "Decisions are accepted only from the approval page itself.", &f);
		return;
	}
	if (ledger_uuid_valid(id))
		grc = gate_find_id(c->ctx->db, id, hash, &a);
	if (grc == OG_UNAVAILABLE) {
		(void)http_header(c->resp, "Retry-After", "5");
		api_card_notice(c, 503, "db.unavailable", "Try again shortly",
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
		api_card_notice(c, 404, "approval.unknown", "Not in your inbox",
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
		api_card_notice(c, grc == OG_UNAVAILABLE ? 503 : 500, "approval.failed",
		                "Try again shortly", "Your inbox could not be read.", &f);
		goto out;
	}
	if ((p = page_new(c->ctx->pages, PAGE_INBOX)) == NULL)
		goto answer;
	(void)page_text(p, "title", "Your approvals");
	(void)page_text(p, "approver", subject);
	(void)page_text(p, "approver_groups", c->req->auth_groups != NULL ? c->req->auth_groups : "");
	json_array_foreach(list, i, e) {
		const char *id, *approver, *req, *etype, *etarget, *esubj, *csubj, *cust;
		char href[GATE_ID_LEN + 16], effect[256];
		struct page_scope *sc;

		notice_strings(e, "approval_id", &id, "approver", &approver, "requested_by", &req,
		               "effect_type", &etype, "effect_target", &etarget, "effect_subject",
		               &esubj, "context_subject", &csubj, "context_customer", &cust, NULL);
		/* the card's own rule: the same comparison, and a requester never
		 * decides their own request under separation of duties */
		if (id == NULL || !contract_approver_matches(approver, subject, c->req->auth_groups, sep))
			continue;
		if (json_is_true(json_object_get(e, "separation_of_duties")) &&
		    contract_is_requester(req, subject))
			continue;
		if ((sc = page_repeat(p, "entry")) == NULL)
			break;
		snprintf(href, sizeof(href), "/approve/card/%s", id);
		snprintf(effect, sizeof(effect), "%s to %s", etype ?: "(no action)", etarget ?: "-");
		/* what it answers first: three replies to three tickets differ there */
		(void)page_scope_attr(sc, "entry_link", "href", href);
		(void)page_scope_text(sc, "entry_title",
		                      csubj != NULL && csubj[0] != '\0' ? csubj
		                      : esubj != NULL                      ? esubj
		                                                           : effect);
		inbox_about(sc, cust, csubj != NULL && csubj[0] != '\0' ? esubj : NULL);
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
	api_card_answer(c, 200, p);
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

/*
 * api_decision.h — a person's decision on a challenge, the same through
 * both doors that take one: the approval page's form (api_approve.c, the
 * person signed in through nginx) and the decision API
 * (api_decide.c, an API client with the decide scope vouching for the
 * person). The rules are here once: the decision the challenge allows,
 * who may decide (approvers, separation of duties), one vote per person,
 * the draft read, the corrections the contract allows; then
 * decide_approval's one transaction. Each door reads its request, calls
 * decision_take and answers in its own form (a page, a problem document).
 *
 * The person deciding is the request's identity (c->req->remote_user and
 * auth_groups): set by nginx for the page, by the decision API from what
 * the client vouches for.
 */
#ifndef OG_API_DECISION_H
#define OG_API_DECISION_H

#include <jansson.h>

#include "api_card.h"
#include "decide.h"
#include "gate.h"
#include "ledger.h"

struct api_call;
struct log_fields;

/* The most characters of a request for changes' feedback. */
#define DECISION_FEEDBACK_MAX 2000

/* What was asked. */
struct decision_in {
	const char *decision;    /* "approve", "reject" or "changes_requested" (anything
	                            else is refused) */
	const char *reason;      /* NULL or "" for none; checked by the door */
	const char *draft;       /* the hash of the draft read; NULL: not given */
	const json_t *values;    /* corrections {NAME: text} of editable members; may be
	                            empty or NULL */
	long long via_client;    /* the API client vouching for the person; 0: the page */
	const char *feedback;    /* changes_requested: what the next draft should change
	                            (required, checked here); NULL for the others */
	size_t feedback_len;     /* its length in bytes (it may hold no NUL) */
	const char *via_chat;    /* the chat whose button the person pressed; NULL: none */
};

/* Why a decision was not taken: a stable code (the API's problem type and
 * the log line's reason), its status, and the page's words. A link its
 * approval's state closed (voided, revoked, expired) has no code of its
 * own (NULL): its code is that state's name. */
struct decision_refusal {
	int status;
	const char *code;
	const char *heading;
	const char *message;
};

/* The refusal's code: decision_refusal.code, or the closing state's name. */
const char *decision_refusal_code(const struct decision_refusal *r);

extern const struct decision_refusal DECISION_NOT_ALLOWED, DECISION_NOT_YOURS,
	DECISION_SEPARATION, DECISION_ALREADY_VOTED, DECISION_DRAFT_CHANGED,
	DECISION_NOT_EDITABLE, DECISION_INVALID_EDIT, DECISION_USED, DECISION_VOIDED,
	DECISION_REVOKED, DECISION_EXPIRED, DECISION_NOT_AWAITING, DECISION_CONFLICT,
	DECISION_UNAVAILABLE, DECISION_INTERNAL, DECISION_FEEDBACK_REQUIRED,
	DECISION_FEEDBACK_INVALID, DECISION_FEEDBACK_UNWANTED, DECISION_ROUND_CLOSED;

/* What a decision did, for the door's answer. */
struct decision_out {
	struct decide_approval d;   /* effect_id, callback_id, approvals, needed, final */
	struct ledger_run run;      /* the run as moved (final) */
	const json_t *effect;       /* the effect decided on (borrowed from dr or edits) */
	json_t *edit_errors;        /* DECISION_INVALID_EDIT: the corrections' errors */
	json_t *owned;              /* what the above borrow from; freed by clear */
	char *fields_text;          /* the corrected members, logged by name */
	char *feedback;             /* changes_requested: the feedback as taken */
};

/* Whether challenge a (and its run, as read) still takes a decision: NULL
 * when it does, else the refusal (a round closed by a request for changes,
 * used, voided, revoked, expired, the run no longer waiting). */
const struct decision_refusal *decision_open(const struct gate_approval *a, const json_t *run);

/* Is challenge a of a round before its run's (as read)? A request for
 * changes closed it: its link decides nothing any more. */
bool decision_round_closed(const struct gate_approval *a, const json_t *run);

/* Checks the decision against the challenge and the draft and takes it in
 * one transaction. A request for changes needs its feedback (and the
 * others take none). NULL: taken (out filled; the door answers, then writes
 * the log lines with decision_logged); else the refusal, with f->detail
 * set for the door's log line, and nothing changed. Free out with
 * decision_out_clear. */
const struct decision_refusal *decision_take(struct api_call *c, const unsigned char hash[32],
                                             const struct gate_approval *a, const json_t *run,
                                             const struct api_card_draft *dr,
                                             const struct decision_in *in,
                                             struct log_fields *f, struct decision_out *out);
/* The log lines of a decision taken, with the door's answer's status: one
 * approval.voted below the quorum, else approval.consumed and an
 * effect.enqueued per queued effect. */
void decision_logged(struct api_call *c, const struct gate_approval *a,
                     const struct decision_in *in, struct decision_out *out,
                     struct log_fields *f);
void decision_out_clear(struct decision_out *out);

#endif

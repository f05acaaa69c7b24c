/*
 * decide.h — the two decisions that move a run out of processing and
 * awaiting_human, each one transaction over the table owners (ledger,
 * gate, outbox), with no SQL of its own:
 *
 *   decide_output    a valid output is recorded and the gate's choice
 *                    carried out: approval challenges for the people the
 *                    contract names, or the effect queued in the outbox
 *   decide_approval  a person's decision on a challenge, a vote: recorded
 *                    (with the person's correction of the draft, when they
 *                    made one); the vote that makes the round's quorum of
 *                    distinct approvers, or any reject, settles the run: it
 *                    moves, and the effect and the workflow's callback are
 *                    queued; a request for changes ends the round instead:
 *                    the run goes back to its workflow (the callback carries
 *                    the feedback) for a new draft, while repairs are left
 *
 * Nothing here answers a request or writes a log line: the caller does,
 * from the result.
 */
#ifndef OG_DECIDE_H
#define OG_DECIDE_H

#include <stdbool.h>

#include <jansson.h>

#include "db.h"
#include "gate.h"
#include "ledger.h"
#include "outbox.h"
#include "rc.h"

struct contract;

struct decide_output {
	/* in */
	const struct ledger_output *output;  /* a valid output, with its effect */
	const struct contract *contract;
	bool human;                          /* the gate's choice: a person decides */
	const char *effect_type;
	const char *effect_target;
	const json_t *payload;               /* the effect's payload as it will be sent */
	const char *public_url;              /* where the approval links point */
	/* out */
	json_t *approvals;  /* human: [{approval_id, approver, expires_at, url}]; owned.
	                       Each url holds its raw token, which exists nowhere else.
	                       When the contract notifies its approvers, no url but
	                       "notified": true (the notice carries the link). */
	char effect_id[OUTBOX_ID_LEN];       /* not human: the queued effect */
	char not_before[OUTBOX_TS_LEN];
	int delay_seconds;                   /* not human: the cancellation window */
	const char *detail;                  /* OG_ERROR: what failed, or NULL for
	                                        the database (db_error) */
};

/* Records the output and moves the run to awaiting_human (d->human) or
 * approved, creating the challenges or queueing the effect, all in one
 * transaction; run receives the moved run. Free d->approvals with
 * decide_output_clear. */
enum og_rc decide_output(struct db *db, struct decide_output *d, struct ledger_run *run)
	__attribute__((warn_unused_result));
void decide_output_clear(struct decide_output *d);

struct decide_approval {
	/* in */
	const struct gate_approval *approval;
	const unsigned char *token_hash;     /* 32 bytes */
	const char *decision;                /* "approve", "reject" or "changes_requested" */
	const char *subject;                 /* who decides */
	long long via_client;                /* the API client that vouched for subject
	                                        (the decision API); 0: the page */
	const char *via_chat;                /* the chat whose button the person pressed
	                                        ("slack"); NULL: none */
	const char *reason;                  /* NULL when none given; changes_requested:
	                                        the feedback (required) */
	const json_t *effect;                /* the effect an approval queues {type, target,
	                                        payload}: built from the draft decided on */
	const char *callback_url;            /* NULL when the workflow waits on none */
	const char *draft_hash;              /* the hash of the draft the person read (the
	                                        edited output's, else the output's); NULL:
	                                        not checked */
	const json_t *edit;                  /* approve only: the person's correction of the
	                                        draft (the whole output), or NULL */
	const json_t *edit_fields;           /* the corrected members: an array of names */
	int repair_budget;                   /* changes_requested: the contract's
	                                        repair_attempts */
	int lease_seconds;                   /* changes_requested: the new draft's lease */
	/* out */
	char edit_hash[CANON_HASH_LEN];      /* the correction's hash; "" when none */
	char effect_id[OUTBOX_ID_LEN];       /* "" when no effect was queued */
	char callback_id[OUTBOX_ID_LEN];     /* "" when no callback was queued */
	int approvals;                       /* distinct approvals so far, this one counted */
	int needed;                          /* the quorum (min_approvals) */
	bool final;                          /* this vote settled the run */
};

/* Takes the decision in one transaction: the run's row lock, the vote and
 * the correction in one round trip; for the final vote the run's move and
 * the queued effects after them. run receives the moved run (with what was
 * decided); a vote below the quorum leaves it awaiting_human.
 * OG_USED: the challenge was decided, voided, revoked or expired meanwhile;
 * OG_DUPLICATE: this person has already voted on the run;
 * OG_NOT_AWAITING: the run no longer awaits a decision;
 * OG_CHANGED: the draft is not the one read (corrected meanwhile), or a
 *   correction came after someone approved;
 * OG_CONFLICT: another final vote committed first. */
enum og_rc decide_approval(struct db *db, struct decide_approval *d, struct ledger_run *run)
	__attribute__((warn_unused_result));

#endif

/*
 * decide.h — the two decisions that move a run out of processing and
 * awaiting_human, each one transaction over the table owners (ledger,
 * gate, outbox), with no SQL of its own:
 *
 *   decide_output    a valid output is recorded and the gate's choice
 *                    carried out: approval challenges for the people the
 *                    contract names, or the effect queued in the outbox
 *   decide_approval  a person's decision on a challenge: the challenge is
 *                    consumed (voiding the others), the run moves, and the
 *                    effect and the workflow's callback are queued
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
	const char *decision;                /* "approve" or "reject" */
	const char *subject;                 /* who decides */
	const char *reason;                  /* NULL when none given */
	const json_t *effect;                /* the proposed effect {type, target, payload} */
	const char *callback_url;            /* NULL when the workflow waits on none */
	/* out */
	char effect_id[OUTBOX_ID_LEN];       /* "" when no effect was queued */
	char callback_id[OUTBOX_ID_LEN];     /* "" when no callback was queued */
};

/* Takes the decision in one transaction sent in one round trip; run
 * receives the moved run (with what was decided). */
enum og_rc decide_approval(struct db *db, struct decide_approval *d, struct ledger_run *run)
	__attribute__((warn_unused_result));

#endif

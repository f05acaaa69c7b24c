/*
 * gate.h — approval challenges: the one owner of `approvals`.
 *
 * A challenge is created per named approver with a fresh token whose
 * SHA-256 alone is stored; it is consumed at most once, by one UPDATE that
 * checks it is pending, unexpired and that the decision is allowed.
 */
#ifndef OG_GATE_H
#define OG_GATE_H

#include <stdbool.h>
#include <jansson.h>

#include "db.h"
#include "rc.h"

/* Mirrors the CHECK constraint on approvals.state one for one. */
enum approval_state {
	APPROVAL_PENDING = 0,
	APPROVAL_DECIDED,
	APPROVAL_VOIDED,    /* another challenge of the run settled it */
	APPROVAL_REVOKED,
	APPROVAL_EXPIRED,
};

/* A person's decision, as stored in approvals.decision and
 * approval_votes.decision and named by contracts' allowed_decisions. */
enum gate_decision {
	GATE_DECISION_NONE = 0,      /* none, or a word that is no decision */
	GATE_APPROVE,
	GATE_REJECT,
	GATE_CHANGES_REQUESTED,      /* the draft goes back for a new one */
};
/* The stored word ("approve", "reject", "changes_requested"); NULL: none. */
const char *gate_decision_name(enum gate_decision d);
/* The decision a word names (NULL or another word: GATE_DECISION_NONE). */
enum gate_decision gate_decision_parse(const char *word);
/* The decision in words for a person ("approve", "reject", "changes
 * requested"); "" for none. */
const char *gate_decision_label(enum gate_decision d);

/* How an approval ended, as the workflow's callback, the decision log,
 * the approval pages and `explain` say it. */
enum gate_outcome {
	GATE_OUTCOME_APPROVED = 0,
	GATE_OUTCOME_REJECTED,
	GATE_OUTCOME_CHANGES_REQUESTED,
	GATE_OUTCOME_EXPIRED,        /* nobody decided in time, or every link was revoked */
	GATE_OUTCOME_COUNT
};
/* "approved", "rejected", "changes_requested", "expired". */
const char *gate_outcome_name(enum gate_outcome o);
/* The outcome a person's decision makes (none or reject: rejected). */
enum gate_outcome gate_outcome_of(enum gate_decision d);

#define GATE_ID_LEN 37
#define GATE_TS_LEN 32

/* An approval as the pages need it (never the token or its hash). */
struct gate_approval {
	char id[GATE_ID_LEN];
	long long client_id;
	char *key;
	char *approver;
	char *requested_by;
	json_t *allowed_decisions;   /* array of strings */
	bool separation_of_duties;
	enum approval_state state;
	bool expired;                /* expires_at is past (whatever the state) */
	char expires_at[GATE_TS_LEN];
	char consumed_at[GATE_TS_LEN];
	char *decision;
	char *approver_subject;
	char *reason;
	json_t *effect;              /* {"type","target","payload"}; NULL on old rows */
	char *callback_url;
	int min_approvals;           /* distinct people who must approve the run */
	int round;                   /* the run's round it was made for (1: the first draft) */
};

void gate_approval_clear(struct gate_approval *a);

/* Inserts one pending challenge; id and expires_at are filled. */
enum og_rc gate_create(struct db *db, long long client_id, const char *key,
                       const char *approver, const json_t *allowed_decisions,
                       const char *requested_by, bool separation_of_duties,
                       int expires_seconds, const unsigned char token_hash[32],
                       const char *effect, const char *callback_url, int min_approvals,
                       char id[GATE_ID_LEN], char expires_at[GATE_TS_LEN])
	__attribute__((warn_unused_result));
enum og_rc gate_find(struct db *db, const unsigned char token_hash[32],
                     struct gate_approval *out) __attribute__((warn_unused_result));
/* The consume as a db_call, to run in the decision's pipelined
 * transaction (db_pipeline_tx); the struct holds the parameters. */
struct gate_consume_call {
	char hash[65];
	const char *params[4];
};
void gate_consume_call(struct gate_consume_call *g, const unsigned char token_hash[32],
                       const char *decision, const char *subject, const char *reason,
                       struct db_call *call);
enum og_rc gate_consume_result(const struct db_call *call);

/* Consumes the challenge and voids the run's other pending challenges
 * (inside the caller's transaction). */
enum og_rc gate_consume(struct db *db, const unsigned char token_hash[32],
                        const char *decision, const char *subject, const char *reason)
	__attribute__((warn_unused_result));
/* A person's vote on a challenge as a db_call, to run in the decision's
 * transaction after the run's row lock: recorded in approval_votes, the
 * challenge consumed or left open as the quorum says (gate.c, st_vote).
 * draft_hash is the hash of the output decided on; edited, whether this
 * vote corrected it. */
struct gate_vote_call {
	char hash[65];
	char via[24];
	const char *params[8];
};
/* via_client: the API client that vouched for the person (0: the person
 * decided on the page themselves); via_chat: the chat whose button the
 * person pressed ("slack"; NULL: none). */
void gate_vote_call(struct gate_vote_call *g, const unsigned char token_hash[32],
                    const char *decision, const char *subject, const char *reason,
                    const char *draft_hash, bool edited, long long via_client,
                    const char *via_chat, struct db_call *call);
/* What the vote did. */
struct gate_vote {
	int approvals;   /* distinct people who approved the run, this vote counted */
	int needed;      /* min_approvals of the challenge */
	bool final;      /* a reject, a request for changes, or the approval that made
	                    `needed`: it settles the round */
};
/* OG_OK: recorded; OG_NOT_PENDING: the challenge could not take it
 * (decided, voided, revoked, expired, or the decision not allowed);
 * OG_DUPLICATE: this person has already voted in this round of the run. */
enum og_rc gate_vote_result(const struct db_call *call, struct gate_vote *v);
/* The run's votes, oldest first: a new array of {approval_id, subject,
 * decision, at, reason?, output_hash?, edited, final, round} in *out, and the
 * run's min_approvals in *needed (1 when it has no challenge). */
enum og_rc gate_votes(struct db *db, long long client_id, const char *key, json_t **out,
                      int *needed) __attribute__((warn_unused_result));
/* The same as one call of a batch (db_batch): gate_votes_call sets call
 * (k keeps its parameters), gate_votes_read reads its result. */
void gate_votes_call(struct og_key_call *k, long long client_id, const char *key,
                     struct db_call *call);
enum og_rc gate_votes_read(const struct db_call *call, json_t **out, int *needed)
	__attribute__((warn_unused_result));
/* The run's approvals for the status API; *out is a new array. */
enum og_rc gate_list(struct db *db, long long client_id, const char *key, json_t **out)
	__attribute__((warn_unused_result));
const char *gate_state_name(enum approval_state s);

/* A run by its business key, as the janitor walks them. */
struct gate_run {
	long long client_id;
	char *key;
	char *client_name;   /* NULL: not read (gate_due_escalations), or no such client */
};
DB_LIST(gate_runs, gate_run);
void gate_runs_clear(struct gate_runs *r);

/* Runs whose every pending challenge has expired, at most limit, with
 * their client's name (gate_runs_clear). */
enum og_rc gate_expired_runs(struct db *db, int limit, struct gate_runs *out)
	__attribute__((warn_unused_result));
/* The run's pending challenges past their expiry marked expired, inside
 * the caller's transaction; *count: how many. */
enum og_rc gate_expire(struct db *db, long long client_id, const char *key, long long *count)
	__attribute__((warn_unused_result));
/* Every pending challenge of the run revoked (an operator's reject);
 * *ids is a new array of their ids. */
enum og_rc gate_revoke_run(struct db *db, long long client_id, const char *key, json_t **ids)
	__attribute__((warn_unused_result));
/* A challenge as an operator's repair names it. */
struct gate_ref {
	char id[GATE_ID_LEN];
	long long client_id;
	char *client_name;           /* NULL: the client is gone */
	char *key;
	char *approver;
	enum approval_state state;
	bool expired;                /* expires_at is past (whatever the state) */
};
void gate_ref_clear(struct gate_ref *r);
/* A challenge by its id (gate_ref_clear). OG_NOT_FOUND: none. */
enum og_rc gate_find_by_id(struct db *db, const char *id, struct gate_ref *out)
	__attribute__((warn_unused_result));
/* A pending, unexpired challenge revoked by an operator; *left_pending:
 * the run's challenges still pending. OG_CHANGED: it was decided, voided
 * or expired meanwhile. */
enum og_rc gate_revoke(struct db *db, const char *id, int *left_pending)
	__attribute__((warn_unused_result));
/* The challenges, at most limit: pending_only, those still pending, oldest
 * first; otherwise all of them, newest first. *out is a new array of
 * objects (approval_id, client, key, approver, state, created_at,
 * waiting_seconds, expires_at, expires_in_seconds, run_state, contract). */
enum og_rc gate_challenges(struct db *db, bool pending_only, int limit, json_t **out)
	__attribute__((warn_unused_result));
/* The challenges of the runs ledger_purge purged (its clients and keys
 * arrays) lose the effect they showed; *count: how many. */
enum db_rc gate_purge_effects(struct db *db, const char *clients, const char *keys,
                              long long *count) __attribute__((warn_unused_result));

/* The inbox: the pending, unexpired challenges named to subject (an
 * address compared without case) or to "group:G" for an item G of groups
 * (the identity header: items split at sep, trimmed of spaces and tabs,
 * compared whole; NULL: none), at most one per run (its newest), newest
 * first, at most limit. *out is a new array of {approval_id, client_id,
 * client, key, approver, requested_by, separation_of_duties, created_at,
 * expires_at, age_seconds, seconds_left, effect_type, effect_target,
 * effect_subject, context_subject, context_customer} (the last two from
 * the run's context, when it has them); never a token or its hash. The caller holds each entry
 * to the card's own rule of who may decide. */
enum og_rc gate_inbox(struct db *db, const char *subject, const char *groups, char sep,
                        int limit, json_t **out) __attribute__((warn_unused_result));
/* The challenge with this id (a valid UUID text), as gate_find; its token
 * hash in token_hash, so that a decision taken from the inbox consumes it
 * by the very statement a token's decision uses. The hash never leaves
 * the process. */
enum og_rc gate_find_id(struct db *db, const char *id, unsigned char token_hash[32],
                          struct gate_approval *out) __attribute__((warn_unused_result));
/* --- notifications ---------------------------------------------------------
 * A challenge may carry whom to tell (its approver entry's notify, a
 * {"target", "to"?} object), when to remind them and when to add the
 * escalation approvers. The link a notification carries is minted by the
 * dispatcher right before the send: gate_mint replaces the challenge's
 * token hash, and the link it replaces stops working (its page says so:
 * gate_replaced). */

/* A challenge as its notification needs it; the texts point into strings
 * and, with the JSON values, are owned (gate_notice_clear). A copy made to
 * tell another approver borrows them and is never cleared. */
struct gate_notice {
	const char *id, *client, *key, *approver, *requested_by, *expires_at, *contract;
	char *strings;           /* the texts above, one after the other */
	long long client_id;
	json_t *notify;          /* {"target", "to"?}; NULL: nobody is told */
	json_t *effect;          /* {"type","target","payload"} the approval enqueues */
	json_t *escalate_to;     /* escalation rows: [{"approver", "notify"}] */
	json_t *context;         /* the run's context for the approver, or NULL */
	bool nobody_decided;     /* escalation rows */
};
void gate_notice_clear(struct gate_notice *n);
/* Several of them, in the order their statement gave. */
DB_LIST(gate_notices, gate_notice);
void gate_notices_clear(struct gate_notices *l);

/* Sets the challenge's notify entry (NULL: nobody), its reminder and its
 * escalation (seconds after its creation; 0: none) with the entries an
 * escalation adds. */
enum og_rc gate_set_notify(struct db *db, const char *id, const json_t *notify,
                           int remind_seconds, int escalate_seconds, const json_t *escalate_to)
	__attribute__((warn_unused_result));
/* A freshly minted link's hash replaces the challenge's; OG_NOT_PENDING
 * when it can no longer be decided (nothing changed). */
enum og_rc gate_mint(struct db *db, const char *id, const unsigned char token_hash[32])
	__attribute__((warn_unused_result));
/* OG_OK when this hash is of a link that a newer notification replaced. */
enum og_rc gate_replaced(struct db *db, const unsigned char token_hash[32])
	__attribute__((warn_unused_result));
/* Reminders that are due, taken (each challenge is reminded once), without
 * the challenges someone has voted on (their reminder is taken and
 * dropped); inside the caller's transaction. */
enum og_rc gate_due_reminders(struct db *db, int limit, struct gate_notices *out)
	__attribute__((warn_unused_result));
/* Runs with an escalation due (client_id and key only). */
enum og_rc gate_due_escalations(struct db *db, int limit, struct gate_runs *out)
	__attribute__((warn_unused_result));
/* Takes the run's escalation (once): its pending challenges, with
 * escalate_to and nobody_decided (no decision and no settling vote: a run
 * short of its quorum counts as undecided); inside the caller's
 * transaction. */
enum og_rc gate_escalate_take(struct db *db, long long client_id, const char *key,
                              struct gate_notices *out) __attribute__((warn_unused_result));
/* A challenge for approver added by an escalation, as template_id's (same
 * run, decisions, expiry, quorum) with its own token hash and notify entry. */
enum og_rc gate_create_escalated(struct db *db, const char *template_id, const char *approver,
                                 const json_t *notify, const unsigned char token_hash[32],
                                 char id[GATE_ID_LEN], char expires_at[GATE_TS_LEN])
	__attribute__((warn_unused_result));
/* One pending challenge that has a notify entry (gate_notice_clear);
 * OG_NOT_PENDING otherwise. */
enum og_rc gate_notice(struct db *db, const char *id, struct gate_notice *out)
	__attribute__((warn_unused_result));

/* A page of the client's challenges (q; state "pending" is open to a
 * decision: pending and unexpired): a new array of {approval_id, key,
 * approver, state, created_at, expires_at, at_us, requested_by?,
 * contract?, effect_type?, effect_target?, decision?, approver_subject?},
 * oldest first by (created_at, id). */
struct og_list_query;
enum og_rc gate_list_page(struct db *db, const struct og_list_query *q, json_t **out)
	__attribute__((warn_unused_result));

/* A page of the decisions taken at or after since (RFC 3339), oldest
 * first by (at, seq), after the cursor (after_us, after_seq; after_seq
 * NULL: from the start): a new array of {at, at_us, seq, key, decision,
 * via ("page", "client" or "contract"), final, edited, client?, contract?,
 * approval_id?, subject?, reason?, via_client?, draft_hash?, output_hash?,
 * edited_output_hash?, contract_hash?, effect_hash?}. */
enum og_rc gate_export_page(struct db *db, const char *since, long long after_us,
                            const char *after_seq, int limit, json_t **out)
	__attribute__((warn_unused_result));

#endif

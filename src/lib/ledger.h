/*
 * ledger.h — the run ledger: the one owner of workflow_runs and
 * run_events. Every change is compare-and-set; the claim is one atomic
 * statement.
 */
#ifndef OG_LEDGER_H
#define OG_LEDGER_H

#include <stdbool.h>
#include <jansson.h>

#include "canon.h"
#include "clients.h"
#include "db.h"
#include "listq.h"
#include "rc.h"

/* Mirrors the CHECK constraint on workflow_runs.state one for one. */
enum run_state {
	RUN_PROCESSING = 0,
	RUN_AWAITING_HUMAN,
	RUN_APPROVED,
	RUN_COMPLETED,
	RUN_FAILED_RETRYABLE,
	RUN_FAILED_TERMINAL,
	RUN_REJECTED,                    /* a person said no: a decision, not a failure */
	RUN_STATE_COUNT
};

#define LEDGER_UUID_LEN 37
#define LEDGER_TS_LEN   32

/* What a decision needs to know about a run. */
struct ledger_run {
	enum run_state state;
	enum run_state state_from;       /* transitions */
	long long version;
	int attempt;
	int round;                       /* the round of drafts (1: the first); set by the
	                                    moves that report it, else 0 */
	bool lease_live;                 /* processing with an unexpired lease */
	bool lease_reclaimed;            /* claimed: taken over from an expired lease */
	char reclaimed_from[LEDGER_UUID_LEN]; /* that lease's owner */
	char payload_hash[CANON_HASH_LEN];
	enum canon_rule payload_canon;   /* the rule payload_hash was computed with */
	char lease_owner[LEDGER_UUID_LEN];
	char lease_expires_at[LEDGER_TS_LEN];
	json_t *result;                  /* owned; NULL when none */
	/* lookups: who decided and how ({decision, decided_by, decided_at}),
	 * NULL while nobody has; owned */
	json_t *decision;
	json_t *decided;                 /* decide: {contract, output}; owned */
	/* lookups: seconds since a finished run last changed, -1 while it is
	 * not finished */
	long long finished_seconds;
};

struct ledger_claim {
	/* Who claims: the hex SHA-256 of a bearer key not yet authenticated,
	 * which the claim's statement authenticates, filling *client; or NULL
	 * and client_id, already authenticated. */
	const char *client_key_hash;
	struct client *client;
	/* A new key is expected: a claim of one then takes one round trip, at
	 * a small cost to a duplicate (the statement's insert is prepared for,
	 * not run). Only a guess about cost: either way the answer is the
	 * same. */
	bool expect_new;
	long long client_id;
	const char *key;
	const char *payload;             /* canonical JSON text, as written */
	const char *payload_hash;        /* RFC 8785 (new runs) */
	const char *payload_hash_as_written; /* for runs hashed before RFC 8785 */
	const char *workflow_version;    /* NULL when absent */
	const char *trigger;
	const char *correlation_id;
	const char *event_id;            /* the source's id of the event, or NULL */
	int lease_seconds;
	int cap_seconds;
};

const char *ledger_state_name(enum run_state s);
/* -1 when the name is not a state */
int ledger_state_parse(const char *name);

/* Mirrors the CHECK constraint on workflow_runs.decision: what ended a
 * run's wait at the gate (a person's approve or reject, the contract's
 * rules, or the approval's end). */
enum run_decision {
	RUN_DECISION_AUTO = 0, RUN_DECISION_APPROVE, RUN_DECISION_REJECT, RUN_DECISION_EXPIRED,
	RUN_DECISION_COUNT
};
const char *ledger_decision_name(enum run_decision d);
/* -1 when the word is not a run's decision */
int ledger_decision_parse(const char *word);

/* Why a run ended without its effect: workflow_runs.error_class as the
 * ledger's statements write it (its outputs failed the contract; a person
 * or an operator rejected it; it was cancelled in its effect's window; its
 * approval expired or every link was revoked). */
enum run_error {
	RUN_ERROR_VALIDATION = 0,
	RUN_ERROR_REJECTED, RUN_ERROR_OPERATOR_REJECTED,
	RUN_ERROR_CANCELLED,
	RUN_ERROR_APPROVAL_EXPIRED, RUN_ERROR_APPROVAL_REVOKED,
	RUN_ERROR_COUNT
};
const char *ledger_error_name(enum run_error e);
/* -1 when the word is not one of them */
int ledger_error_parse(const char *word);

/* A run as an AI agent is told it (the status of the MCP tools' result):
 * the run's state, its effect's and why it ended, in one word. */
enum run_outcome {
	RUN_OUTCOME_UNKNOWN = 0,         /* no run */
	RUN_OUTCOME_IN_PROGRESS,
	RUN_OUTCOME_AWAITING_APPROVAL,
	RUN_OUTCOME_QUEUED,
	RUN_OUTCOME_COMPLETED,
	RUN_OUTCOME_FAILED,
	RUN_OUTCOME_REJECTED,
	RUN_OUTCOME_CANCELLED,
	RUN_OUTCOME_EXPIRED,
	RUN_OUTCOME_INVALID,
	RUN_OUTCOME_COUNT
};
const char *ledger_outcome_name(enum run_outcome o);
/* Lease owners are UUIDs in canonical text form. */
bool ledger_uuid_valid(const char *s);

void ledger_run_clear(struct ledger_run *run);

/* True when a looked-up run finished at least window_days ago (a window
 * above 0): its key no longer answers duplicate. */
bool ledger_past_window(const struct ledger_run *run, int window_days);

/* The claim's payload hash under the rule run's hash was computed with:
 * the one to compare with run->payload_hash, and to answer a mismatch
 * with. */
const char *ledger_claim_hash(const struct ledger_claim *c, const struct ledger_run *run);

/* OG_CLAIMED, OG_DUPLICATE or OG_MISMATCH; OG_DENIED when the key of
 * client_key_hash is unknown or revoked (then nothing was written). */
enum og_rc ledger_claim(struct db *db, const struct ledger_claim *c, struct ledger_run *run)
	__attribute__((warn_unused_result));
enum og_rc ledger_renew(struct db *db, long long client_id, const char *key,
                        const char *owner, long long version, int lease_seconds,
                        int cap_seconds, struct ledger_run *run)
	__attribute__((warn_unused_result));
/* to is completed, failed_retryable or failed_terminal; result is JSON text
 * or NULL. */
enum og_rc ledger_transition(struct db *db, long long client_id, const char *key,
                             const char *owner, long long version,
                             enum run_state to, const char *result,
                             const char *error_class, const char *reason,
                             struct ledger_run *run)
	__attribute__((warn_unused_result));
/* A valid or invalid model output handed in by the lease owner. */
struct ledger_output {
	long long client_id;
	const char *key;
	const char *owner;
	long long version;
	const char *contract;
	const char *contract_hash;
	const char *output;          /* JSON text */
	const char *output_hash;
	const char *model;           /* JSON text or NULL */
	const char *effect;          /* JSON text */
	const char *source_url;
	const char *requested_by;
	const char *callback_url;
	const char *context;         /* JSON text of the approver's context, or NULL;
	                              * kept apart from the effect and every hash */
	const char *validation;      /* JSON text of the errors (invalid outputs) */
};

/* Records an invalid output: one more spent repair, and failed_terminal
 * (error_class "validation") once the repairs spent (invalid outputs and
 * redrafts after a request for changes) are more than repair_budget.
 * run->state tells which; run->attempt is set to the repairs spent so
 * far. Compare-and-set like a transition. */
enum og_rc ledger_output_invalid(struct db *db, const struct ledger_output *o,
                                 int repair_budget, struct ledger_run *run)
	__attribute__((warn_unused_result));
/* Records a valid output and moves the run to `to` (awaiting_human, or
 * approved for the automatic path, decision "auto"). Compare-and-set; call
 * inside the transaction that also creates the challenges or the effect. */
enum og_rc ledger_output_accept(struct db *db, const struct ledger_output *o,
                                enum run_state to, struct ledger_run *run)
	__attribute__((warn_unused_result));
/* ledger_decide as a db_call, for the decision's pipelined transaction. */
struct ledger_decide_call {
	char client[24];
	const char *params[5];
};
void ledger_decide_call(struct ledger_decide_call *d, long long client_id, const char *key,
                        const char *decision, const char *subject, const char *reason,
                        struct db_call *call);
enum og_rc ledger_decide_result(const struct db_call *call, struct ledger_run *run);

/* The run's row lock for a person's decision (see decide_approval), as a
 * db_call: the run must await a decision (else OG_NOT_AWAITING); the hash
 * of the draft decided on (the edited output's when an approver corrected
 * it, else the output's) in draft_hash, and whether it was edited. */
struct ledger_lock_draft_call {
	char client[24];
	const char *params[2];
};
void ledger_lock_draft_call(struct ledger_lock_draft_call *d, long long client_id,
                            const char *key, struct db_call *call);
enum og_rc ledger_lock_draft_result(const struct db_call *call,
                                    char draft_hash[CANON_HASH_LEN], bool *edited);

/* An approver's correction of the output (JSON text, canonical) and its
 * hash, by subject, naming the corrected members (fields: a JSON array
 * text of names), kept beside the output the model handed in; a
 * run.edited entry in the timeline names the members, never their text.
 * Once per run: OG_CHANGED when the draft was already edited or the run
 * no longer awaits a decision. Inside the decision's transaction. */
struct ledger_edit_call {
	char client[24];
	const char *params[6];
};
void ledger_edit_call(struct ledger_edit_call *d, long long client_id, const char *key,
                      const char *output, const char *output_hash, const char *subject,
                      const char *fields, struct db_call *call);
enum og_rc ledger_edit_result(const struct db_call *call);

/* A person's decision: awaiting_human → approved (approve) or
 * rejected (reject, error_class "rejected"); OG_LEASE_LOST when
 * the run is no longer awaiting_human. Inside the consume transaction. */
enum og_rc ledger_decide(struct db *db, long long client_id, const char *key,
                         const char *decision, const char *subject, const char *reason,
                         struct ledger_run *run) __attribute__((warn_unused_result));

/* A person's request for changes, the round's final vote: awaiting_human
 * → processing for a new draft in the next round (run->round), under the
 * run's lease owner with a fresh lease of lease_seconds (run->lease_owner,
 * run->lease_expires_at), when the repairs spent so far (invalid outputs
 * and redrafts) leave one of repair_budget; else → failed_terminal
 * (error_class redrafts_spent). A run.changes_requested entry in the
 * timeline names subject, with the feedback as its reason.
 * OG_LEASE_LOST when the run is no longer awaiting_human. Inside the
 * decision's transaction. */
enum og_rc ledger_redraft(struct db *db, long long client_id, const char *key,
                          const char *subject, const char *feedback, int repair_budget,
                          int lease_seconds, struct ledger_run *run)
	__attribute__((warn_unused_result));

/* The owning client cancelled an act-with-window run before its effect
 * went out: approved → failed_terminal (error_class "cancelled"). Inside
 * the transaction that cancels the effects. */
enum og_rc ledger_cancel(struct db *db, long long client_id, const char *key,
                         const char *reason, struct ledger_run *run)
	__attribute__((warn_unused_result));
/* The same, cancelled by someone other than the client: actor is who
 * (e.g. "operator:NAME"), in the run's timeline. */
enum og_rc ledger_cancel_by(struct db *db, long long client_id, const char *key,
                            const char *reason, const char *actor, struct ledger_run *run)
	__attribute__((warn_unused_result));

/* The gate's sample draw of a run still processing: the draw kept on the
 * run if it has one, else fresh (kept from now on), in *draw; rate, the
 * contract's sample_rate it is compared with, is recorded beside it.
 * OG_LEASE_LOST when the run is not processing. Its own statement,
 * outside the output's transaction: a rolled-back output keeps the draw. */
enum og_rc ledger_sample_draw(struct db *db, long long client_id, const char *key,
                              double fresh, double rate, double *draw)
	__attribute__((warn_unused_result));

/* awaiting_human → failed_terminal (decision "expired", error_class as
 * given, event "run.<error_class>") when no challenge of the run is
 * pending or decided any more, e.g. the last one was revoked.
 * *callback_url (malloc'd, or NULL) is the workflow to tell.
 * OG_LEASE_LOST when the run was not ended (still decidable, or no
 * longer awaiting a person). Inside the caller's transaction. */
enum og_rc ledger_end_undecided(struct db *db, long long client_id, const char *key,
                                const char *error_class, const char *reason,
                                const char *actor, struct ledger_run *run,
                                char **callback_url) __attribute__((warn_unused_result));

/* The run as the status API shows it, with its timeline when asked (the
 * approval pages do without it); *out is a new reference. */
enum og_rc ledger_status(struct db *db, long long client_id, const char *key,
                         bool timeline, json_t **out) __attribute__((warn_unused_result));
/* The same without the timeline, as one call of a batch (db_batch):
 * ledger_status_call sets call (k keeps its parameters),
 * ledger_status_read reads its result. */
void ledger_status_call(struct og_key_call *k, long long client_id, const char *key,
                        struct db_call *call);
enum og_rc ledger_status_read(const struct db_call *call, json_t **out)
	__attribute__((warn_unused_result));

/* The retention purge of the runs finished longer ago than days that still
 * hold content: their payload, output and effect payload go, a run.purged
 * entry each (actor) records it. dry_run counts instead: runs, and the
 * effects and challenges that hold content too. Otherwise clients and keys
 * (malloc'd array text, NULL when no run) name the purged runs for
 * outbox_purge_payloads and gate_purge_effects in the same
 * transaction. */
struct ledger_purge {
	long long runs, effects, approvals;
	char *clients, *keys;
};
enum db_rc ledger_purge(struct db *db, int days, bool dry_run, const char *actor,
                        struct ledger_purge *p) __attribute__((warn_unused_result));
void ledger_purge_clear(struct ledger_purge *p);

/* approved → completed when every effect of the run (client: its id as
 * text) is completed or was cancelled; actor is who, in the timeline.
 * *version: the run's new version, 0 when it did not move. Inside the
 * caller's transaction, after ledger_lock. */
enum db_rc ledger_complete(struct db *db, const char *client, const char *key,
                           const char *actor, long long *version)
	__attribute__((warn_unused_result));
/* An operator's rejection: → failed_terminal (error_class
 * operator_rejected) from any of the states in `from` (a set of
 * 1u << state); *version as for ledger_complete. */
enum db_rc ledger_reject(struct db *db, const char *client, const char *key,
                         const char *reason, const char *actor, unsigned from,
                         long long *version) __attribute__((warn_unused_result));

/* The run locked, and approved → completed when every effect is completed
 * or cancelled, as db_calls for a pipelined transaction (the dispatcher's
 * settle: lock, settle the effect, complete). actor is who, in the
 * timeline. */
struct ledger_key_call {
	char client[24];
	const char *params[3];
};
void ledger_lock_call(struct ledger_key_call *k, long long client_id, const char *key,
                      struct db_call *call);
void ledger_complete_call(struct ledger_key_call *k, long long client_id, const char *key,
                          const char *actor, struct db_call *call);
/* After ledger_complete_call ran: did the run complete? */
bool ledger_completed(const struct db_call *call);

/* The run, locked: every operator path (resume, replay, reject, cancel)
 * decides under this lock, and a completing settle of the dispatcher takes
 * it first (lock order everywhere: the run, then its effects). Inside the
 * caller's transaction; OG_NOT_FOUND: no such run. */
struct ledger_locked {
	enum run_state state;
	long long version;
	bool lease_over;             /* its lease (if any) has run out */
	int round;                   /* the run's round of drafts */
	char *callback_url;          /* owned; NULL when none */
};
enum og_rc ledger_lock(struct db *db, long long client_id, const char *key,
                       struct ledger_locked *out) __attribute__((warn_unused_result));
void ledger_locked_clear(struct ledger_locked *l);

/* The clients that have a run with key (client_name: only that client's;
 * NULL: any), at most three, in client id order. */
struct ledger_key_client {
	long long client_id;
	char *client_name;           /* owned; NULL when the client is gone */
};
DB_LIST(ledger_key_clients, ledger_key_client);
enum og_rc ledger_runs_by_key(struct db *db, const char *key, const char *client_name,
                              struct ledger_key_clients *out) __attribute__((warn_unused_result));
void ledger_key_clients_clear(struct ledger_key_clients *c);

/* awaiting_human → failed_terminal (decision expired) when no challenge
 * of the run is pending or decided any more, inside the caller's
 * transaction (after gate_expire). OG_LEASE_LOST: the run did not move. */
struct ledger_expired {
	long long version;
	int round;                   /* the run's round of drafts */
	/* owned; NULL when none */
	char *callback_url, *correlation_id, *workflow_version;
};
enum og_rc ledger_expire(struct db *db, long long client_id, const char *key,
                         struct ledger_expired *out) __attribute__((warn_unused_result));
void ledger_expired_clear(struct ledger_expired *e);

/* The run with key for explain (client_name: that client's; NULL: any):
 * *found is how many clients have it (0, 1, or 2: the key is several
 * clients'), and *out the run when exactly one has. Times are og_ts text;
 * strings owned, NULL when none. */
struct ledger_explain {
	long long client_id, attempt;
	long long claims;            /* how many times the run was claimed */
	enum run_state state;
	bool payload_kept, output_kept;
	char *client, *created_at, *updated_at, *payload_hash, *output_hash;
	char *model;                 /* JSON text */
	char *contract, *contract_hash, *workflow_version, *trigger, *correlation_id;
	char *decision, *decided_by, *decided_at, *error_class, *reason;
	char *sample_draw, *sample_rate;
	char *edited_by, *edited_at, *edited_fields, *edited_output_hash;
};
enum og_rc ledger_audit(struct db *db, const char *key, const char *client_name,
                        struct ledger_explain *out, int *found)
	__attribute__((warn_unused_result));
void ledger_explain_clear(struct ledger_explain *r);
/* Everything that happened to the run, from every table that records it,
 * in time order (at most 2,000). */
struct ledger_event {
	char *ts, *source, *event, *detail, *actor;  /* owned; NULL when none */
};
DB_LIST(ledger_events, ledger_event);
enum og_rc ledger_history(struct db *db, long long client_id, const char *key,
                          struct ledger_events *out) __attribute__((warn_unused_result));
void ledger_events_clear(struct ledger_events *e);

/* --- replay: the original read under its lock, the new run written -------- */

/* The run with key (client_id: that client's; 0: any) to be replayed, and
 * what its effects say: *found is how many clients have it (0, 1, or 2:
 * the key is several clients'), *out the run when exactly one has. lock:
 * the original's row is locked first, to the commit (the lock resume,
 * reject and cancel take), so the rest is read after any change that held
 * it. */
struct ledger_original {
	long long client_id;
	enum run_state state;
	/* an effect still pending, or a decision callback in flight */
	long long live_effects;
	/* owned, NULL when none; payload, output, model, effect, context: JSON
	 * text */
	char *payload, *payload_hash, *contract, *contract_hash, *output, *output_hash;
	char *model, *effect, *source_url, *context, *workflow_version, *correlation_id;
	/* the business effects that were sent, are being sent, are unknown, or
	 * were resumed by an operator, as "type id state" comma-separated */
	char *sent;
};
enum og_rc ledger_original(struct db *db, const char *key, long long client_id, bool lock,
                           struct ledger_original *out, int *found)
	__attribute__((warn_unused_result));
void ledger_original_clear(struct ledger_original *o);
/* Does the client have a run with key? */
enum og_rc ledger_exists(struct db *db, long long client_id, const char *key, bool *exists)
	__attribute__((warn_unused_result));

/* The new run of a replay, and its first timeline entry (run.replayed). */
struct ledger_replay {
	long long client_id;
	const char *key;
	const char *payload_hash, *payload;
	const char *state;             /* the state it starts in */
	const char *workflow_version, *correlation_id;
	const char *contract, *contract_hash, *output, *output_hash, *model, *effect;
	const char *source_url;
	const char *context;           /* the original's context (JSON text), or NULL */
	const char *requested_by;      /* the operator */
	const char *error_class;       /* failed_retryable: "replay"; else NULL */
	const char *reason;            /* failed_retryable: the note; else NULL */
	const char *event_reason;      /* the timeline's reason */
};
/* OG_EXISTS: the key exists already (a key is never overwritten, even one
 * a claim created a moment ago). */
enum og_rc ledger_replay(struct db *db, const struct ledger_replay *r)
	__attribute__((warn_unused_result));

/* A page of the client's runs (q): a new array of {key, state, contract?,
 * decision?, decided_by?, created_at, updated_at, at_us}, oldest first by
 * (created_at, key). */
enum og_rc ledger_list(struct db *db, const struct og_list_query *q, json_t **out)
	__attribute__((warn_unused_result));

#endif

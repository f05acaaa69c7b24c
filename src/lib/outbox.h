/*
 * outbox.h — the effect outbox: the one owner of effect_outbox.
 *
 * An effect is enqueued in the same transaction as the decision that allows
 * it; the dispatcher (oncegate-dispatch) is the only reader that sends.
 */
#ifndef OG_OUTBOX_H
#define OG_OUTBOX_H

#include <stdbool.h>
#include <jansson.h>

#include "config.h"
#include "db.h"
#include "rc.h"

/* Mirrors the CHECK constraint on effect_outbox.state one for one. */
enum effect_state {
	EFFECT_PENDING = 0,
	EFFECT_SENDING,
	EFFECT_COMPLETED,
	EFFECT_UNKNOWN,
	EFFECT_FAILED,
	EFFECT_CANCELLED,
	EFFECT_STATE_COUNT
};

/* The state's name as effect_outbox.state holds it ("" for none). */
const char *outbox_state_name(enum effect_state s);
/* The state a name stands for; -1 for none. */
int outbox_state_parse(const char *name);

#define OUTBOX_ID_LEN 37
#define OUTBOX_TS_LEN 32
#define OUTBOX_HASH_LEN 72 /* CANON_HASH_LEN */

struct outbox_effect {
	long long client_id;
	const char *key;
	const char *type;
	const char *target;
	const char *payload;          /* JSON text */
	const char *payload_hash;
	int delay_seconds;            /* not_before = now() + delay (act-with-window) */
	const char *approval_id;      /* NULL for auto-approved effects */
	int slot;                     /* tells apart effects of one kind in one run (a notice
	                                 per challenge, a callback per round) */
};

/* outbox_enqueue as a db_call, for a pipelined transaction; release the
 * struct with outbox_enqueue_call_free after the call has run. */
struct outbox_enqueue_call {
	char client[24];
	char delay[16];
	char slot[16];
	char *provider_key;
	const char *params[10];
};
int outbox_enqueue_call(struct outbox_enqueue_call *o, const struct outbox_effect *e,
                        struct db_call *call) __attribute__((warn_unused_result));
enum og_rc outbox_enqueue_result(const struct db_call *call, char id[OUTBOX_ID_LEN],
                                 char not_before[OUTBOX_TS_LEN]);
void outbox_enqueue_call_free(struct outbox_enqueue_call *o);

/* The payload hash every effect is enqueued with: v as canon_dumps writes
 * it, canonicalised as written (CANON_AS_WRITTEN), hashed; that canonical
 * text in *text (new, the caller frees it; text may be NULL). -1 when out of
 * memory. The dispatcher computes it again from the stored payload right
 * before the send: jsonb may respell a number (1e-7 as 0.0000001), and
 * reading it back into a double writes it as before. */
int outbox_payload_hash(const json_t *v, char hash[OUTBOX_HASH_LEN], char **text)
	__attribute__((warn_unused_result));

/* The workflow's decision callback (type decision.callback, target
 * callback): the effect that tells url the decision on the run key, with
 * its JSON payload {url, key, decision[, decided_by][, approval_id]}
 * (decided_by, approval_id: NULL leaves them out) in *payload, new text
 * the caller frees after the enqueue, and its hash in hash. -1 when out of
 * memory. A run has one callback per round of drafts: the caller sets
 * e->slot to the round less one. */
int outbox_callback_effect(struct outbox_effect *e, long long client_id, const char *key,
                           const char *url, const char *decision, const char *decided_by,
                           const char *approval_id, char hash[OUTBOX_HASH_LEN],
                           char **payload) __attribute__((warn_unused_result));
/* The same with the approver's feedback in the payload (a request for
 * changes: {…, "feedback": TEXT}); feedback NULL leaves it out. */
int outbox_callback_feedback(struct outbox_effect *e, long long client_id, const char *key,
                             const char *url, const char *decision, const char *decided_by,
                             const char *approval_id, const char *feedback,
                             char hash[OUTBOX_HASH_LEN], char **payload)
	__attribute__((warn_unused_result));

/* Enqueues one effect and wakes the dispatchers (NOTIFY oncegate_outbox,
 * delivered at commit). Fills id and not_before. */
enum og_rc outbox_enqueue(struct db *db, const struct outbox_effect *e,
                          char id[OUTBOX_ID_LEN], char not_before[OUTBOX_TS_LEN])
	__attribute__((warn_unused_result));
/* The run's effects for the status API, each with the recovery envelope of
 * dead-letter record (max_attempts from cfg's targets; cfg may be NULL); *out is a
 * new array. */
enum og_rc outbox_list(struct db *db, const struct config *cfg, long long client_id,
                       const char *key,
                       const char *correlation_id, const char *workflow_version,
                       json_t **out) __attribute__((warn_unused_result));
/* Cancels the run's effects still inside their window (pending, not_before
 * in the future); inside the caller's transaction. *ids is a new array of
 * the cancelled effect ids (empty: nothing could be cancelled). */
enum og_rc outbox_cancel_window(struct db *db, long long client_id, const char *key,
                                json_t **ids) __attribute__((warn_unused_result));
/* The provider idempotency key of an effect, computed once when its row is
 * inserted and stored there; every attempt, the SMTP Message-ID and the
 * reconciliation look-ups use the stored value, never a recomputed one.
 *
 *   og1/c<client id>/<run key, readable>/<type, readable>/<slot>/<sha256 hex>
 *
 * The hash covers the whole tuple (client id, run key, type, target, slot),
 * each field length-prefixed, so two effects share a key only if they share
 * all five: two API clients that use the same run key never meet at a
 * provider. The readable parts are for people searching a provider's
 * dashboard: the bytes of the run key and the type in [A-Za-z0-9._-], each
 * run of other bytes (spaces, slashes, non-ASCII) shown as one '_', cut at
 * OUTBOX_PKEY_READABLE_MAX bytes. The result is ASCII without spaces or
 * controls — safe as an HTTP header value, in a Message-ID, and in a URL once
 * percent-encoded — and at most OUTBOX_PKEY_MAX bytes for any run key.
 * Keys stored by earlier versions ("<run key>/<type>") stay as they were.
 * NULL when out of memory. */
#define OUTBOX_PKEY_MAX          255
#define OUTBOX_PKEY_READABLE_MAX 48
char *outbox_provider_key(long long client_id, const char *key, const char *type,
                          const char *target, int slot);

/* --- attempts: every effect_attempts row is written here ------------------- */

/* What a purge takes out of an attempt's evidence (and a dead letter's copy
 * of it): what the provider answered (body excerpt, headers, SMTP reply)
 * and why a payload could not be sent (it may quote it). Status,
 * request_sent (resume relies on it), the transport error and the message
 * id stay. An SQL text[] literal. */
#define OUTBOX_PURGE_EVIDENCE_KEYS                                                  \
	"ARRAY['body_excerpt', 'body_truncated', 'headers', 'reply', 'invalid']"

/* One attempt (send or look-up) of an effect, settled by compare-and-set
 * and recorded, in one statement. */
struct outbox_settle {
	const char *id;
	enum effect_state expect;    /* the state the effect must be in */
	const char *owner;           /* its lease owner, or NULL (reconciliation) */
	enum effect_state to;        /* the new state */
	const char *provider_id;     /* NULL keeps the stored one */
	const char *error_class;
	const char *reason;
	long long delay_ms;          /* pending / unknown: next attempt after this */
	const char *kind;            /* send | lookup */
	long long duration_ms;
	const char *dispatcher;      /* its name */
	const char *attempt_class;   /* success … / found / not_found / error */
	int status;                  /* the provider's status, 0: none */
	const char *evidence;        /* JSON text; NULL: {} */
	int expect_reconcile;        /* the look-ups it must have had; -1: any */
};

/* outbox_settle as a db_call, so the dispatcher can pipeline it in its
 * settle transaction (after ledger_lock_call when the run may complete). */
struct outbox_settle_call {
	char delay[32], dur[32], status[16], recon[16];
	const char *params[15];
};
void outbox_settle_call(struct outbox_settle_call *o, const struct outbox_settle *in,
                        struct db_call *call);
/* OG_OK settled; OG_LEASE_LOST: the effect was not in the expected state
 * (or lease, or look-up count) any more. */
enum og_rc outbox_settle_result(const struct db_call *call);


/* Retention: attempts older than days of effects that are over (completed,
 * failed, cancelled) lose the provider's answers from their evidence
 * (marked purged); *count: how many (dry_run: would). */
enum db_rc outbox_purge_attempts(struct db *db, int days, bool dry_run, long long *count)
	__attribute__((warn_unused_result));

/* Marks due pending effects held back by the kill switch that are not
 * marked yet (effect_id: that one, or NULL: any, up to limit); *marked is
 * how many. Inside the transaction that counts them (control_add_blocked). */
enum db_rc outbox_hold(struct db *db, const char *effect_id, int limit, long long *marked)
	__attribute__((warn_unused_result));

/*
 * Known not delivered: the effect is `failed`, and no send attempt since
 * the last "not delivered" finding may have reached the provider — every
 * one of them recorded request_sent = false (refused connection, DNS
 * failure, a payload that could not be sent, a target this dispatcher does
 * not know). A finding is an operator's `reconcile --not-delivered`
 * (operator_actions) or the dispatcher's look-up that answered "not found"
 * twice (the look-up attempt with reason reconciled_not_found). A send
 * whose request_sent is true or "unknown" (a lease that ran out mid-send)
 * after the last finding makes the effect not known undelivered, whatever
 * its class: a timeout, a reset, a 5xx, and even a 4xx from something in
 * front of the provider are answered by reconciling, not by resending.
 * One SQL expression, used by the read that explains and by the UPDATE
 * that resumes, so the two cannot disagree.
 */
#define OUTBOX_KNOWN_UNDELIVERED(e)                                                        \
	"(" e ".state = 'failed' AND NOT EXISTS ("                                         \
	"   SELECT 1 FROM effect_attempts s WHERE s.effect_id = " e ".id AND s.kind = 'send'" \
	"      AND s.evidence->'request_sent' IS DISTINCT FROM 'false'::jsonb"              \
	"      AND s.started_at > coalesce(greatest("                                       \
	"          (SELECT max(o.ts) FROM operator_actions o WHERE o.effect_id = " e ".id"  \
	"              AND o.action = 'reconcile' AND o.details->>'finding' = 'not_delivered')," \
	"          (SELECT max(l.started_at) FROM effect_attempts l WHERE l.effect_id = " e ".id" \
	"              AND l.kind = 'lookup' AND l.reason = 'reconciled_not_found')),"       \
	"          '-infinity'::timestamptz)))"

/* --- the dispatcher's claims and leases ------------------------------------ */

/* A claimed effect, as the dispatcher sends or looks it up. */
struct outbox_job {
	char id[OUTBOX_ID_LEN];
	long long client_id;
	char client[72];             /* the API client's name (its id if it has none) */
	char *key, *type, *target, *payload, *payload_hash, *provider_key, *run_output;
	char *run_contract;          /* the contract of the effect the run proposed, or NULL */
	int attempt;
	long long elapsed_ms;        /* since its first attempt */
	/* reconciliation */
	int reconcile_attempts;
	long long not_found, errors; /* look-ups since the last send that found nothing / failed */
};

/* The effects of one claim, taken one at a time with outbox_batch_job. */
struct outbox_batch {
	struct outbox_job *jobs;
	enum effect_state *states;   /* outbox_expire_leases: each one's new state */
	int n;
};
/* Moves the batch's job i into *j (outbox_job_clear it); the batch keeps
 * its id, for outbox_renew_batch. */
void outbox_batch_job(struct outbox_batch *b, int i, struct outbox_job *j);
void outbox_job_clear(struct outbox_job *j);
void outbox_batch_clear(struct outbox_batch *b);

/* Sending leases that ran out (up to limit), in one statement: an effect
 * whose send had started (outbox_send_started) or may have (a claim that did
 * not mark) turns unknown, its send recorded as an ambiguous attempt by
 * dispatcher; one whose send had not started goes back to pending, due now,
 * the attempt given back. Each one's id, attempt, target, key and client
 * name in b->jobs, its new state in b->states. */
enum db_rc outbox_expire_leases(struct db *db, int limit, const char *dispatcher,
                                struct outbox_batch *b) __attribute__((warn_unused_result));

/* Due pending effects, oldest first, at most batch, leased to owner for
 * lease_s seconds (attempt counted). Payload, the run's output and the
 * contract of the effect the run proposed come with each. */
enum og_rc outbox_claim(struct db *db, const char *owner, int batch, int lease_s,
                        struct outbox_batch *b) __attribute__((warn_unused_result));
/* Due unknown effects of the targets named (that have a lookup URL), at
 * most limit, each put off interval_s seconds (its look-up counted), with
 * the counts of look-ups since its last send. */
enum og_rc outbox_claim_reconcile(struct db *db, const char *const *targets, int ntargets,
                                  int interval_s, int limit, struct outbox_batch *b)
	__attribute__((warn_unused_result));
/* The effects [from, n) of a claimed batch keep their lease lease_s more
 * seconds (those still owner's and sending). */
enum og_rc outbox_renew_batch(struct db *db, const struct outbox_batch *b, int from,
                              const char *owner, int lease_s)
	__attribute__((warn_unused_result));
/* Not sent after all (kill switch, shutdown): pending again after delay_s,
 * the attempt given back. OG_LEASE_LOST when it was not owner's sending
 * effect any more. */
enum og_rc outbox_release(struct db *db, const char *id, const char *owner, int delay_s)
	__attribute__((warn_unused_result));
/* Shutdown past its deadline: every effect owner holds except the busy ones
 * (being sent) goes back to pending; *released is how many. */
enum og_rc outbox_release_unsent(struct db *db, const char *owner, const char *const *busy,
                                 int nbusy, int *released) __attribute__((warn_unused_result));

/* Right before a send: the database half of the kill switch, and whether
 * the lease is still owner's and how long it has left. */
struct outbox_presend {
	bool enabled;                /* dispatch_control.actions_enabled */
	bool owned;                  /* sending, leased to owner */
	double lease_left;           /* seconds; < 0 when unknown */
};
/* OG_NOT_FOUND: no such effect. */
enum og_rc outbox_presend(struct db *db, const char *id, const char *owner,
                          struct outbox_presend *p) __attribute__((warn_unused_result));
/* The send of owner's sending effect starts: marked and committed (the
 * caller is outside a transaction) right before the provider is called.
 * OG_LEASE_LOST when it is not owner's, or its lease ran out: do not send. */
enum og_rc outbox_send_started(struct db *db, const char *id, const char *owner)
	__attribute__((warn_unused_result));
/* outbox_send_started as a db_call (p: id, owner; kept by the caller until
 * the call ran), so the dispatcher can commit it in the transaction that
 * settles the send before it; its result as outbox_send_started's. */
void outbox_send_started_call(const char *const p[2], struct db_call *call);
enum og_rc outbox_send_started_result(const struct db_call *call);
/* The lease of owner's sending effect, lease_s seconds from now;
 * OG_LEASE_LOST when it is not owner's any more. */
enum og_rc outbox_renew(struct db *db, const char *id, const char *owner, int lease_s)
	__attribute__((warn_unused_result));

/* --- the operator's repairs: inside the caller's transaction, after the
 * run's lock (ledger_lock); seen is the state the effect was found in ---- */

/* An effect as an operator's repair finds it, with its run's key. */
struct outbox_found {
	char id[OUTBOX_ID_LEN];
	long long client_id;
	/* owned; NULL when none */
	char *client_name, *key, *state, *type, *target, *provider_key;
	char *dead_letter_id;        /* its dead letter */
	char *not_before;            /* the end of its cancellation window */
};
/* An effect by its id or its dead letter's id. OG_NOT_FOUND: none. */
enum og_rc outbox_find(struct db *db, const char *id, struct outbox_found *f)
	__attribute__((warn_unused_result));
void outbox_found_clear(struct outbox_found *f);
/* The operator's finding on an unknown or failed effect: completed with
 * provider_id when delivered, failed otherwise; *to is the new state.
 * OG_CHANGED: it is not in state seen any more. */
enum og_rc outbox_reconcile(struct db *db, const char *id, const char *seen, bool delivered,
                            const char *provider_id, const char **to)
	__attribute__((warn_unused_result));
/* A known-undelivered failed effect back to pending with a fresh retry
 * budget and the same provider key (the dispatchers woken at commit).
 * OG_CHANGED: no longer in state seen, or no longer known undelivered. */
enum og_rc outbox_resume(struct db *db, const char *id, const char *seen)
	__attribute__((warn_unused_result));
/* Is the effect known undelivered, and how many send attempts has it?
 * OG_NOT_FOUND: no such effect. */
enum og_rc outbox_undelivered(struct db *db, const char *id, bool *yes, long long *sends)
	__attribute__((warn_unused_result));
/* A pending or failed effect cancelled by an operator. OG_CHANGED: not in
 * state seen any more (a dispatcher may have claimed it). */
enum og_rc outbox_reject(struct db *db, const char *id, const char *seen)
	__attribute__((warn_unused_result));
/* The run's effects locked (after the run): how many are being sent and
 * how many are unknown. */
enum og_rc outbox_lock_run_effects(struct db *db, long long client_id, const char *key,
                                   int *sending, int *unknown)
	__attribute__((warn_unused_result));
/* Every pending or failed effect of the run cancelled by an operator;
 * *ids is a new array of their ids. */
enum og_rc outbox_reject_run(struct db *db, long long client_id, const char *key, json_t **ids)
	__attribute__((warn_unused_result));

/* The run's effects for explain, oldest first; strings owned, NULL when
 * none. */
struct outbox_audit_effect {
	char *id, *effect_type, *target, *state, *provider_id, *provider_key;
	char *completed_at, *approval_id, *payload_hash;
	char *dead_letter;           /* its dead letter's error class */
	long long sends;             /* its send attempts */
	bool payload_kept;
};
DB_LIST(outbox_audit_effects, outbox_audit_effect);
enum og_rc outbox_audit(struct db *db, long long client_id, const char *key,
                        struct outbox_audit_effects *out) __attribute__((warn_unused_result));
void outbox_audit_effects_clear(struct outbox_audit_effects *e);
/* The effects of the runs ledger_purge purged (its clients and keys
 * arrays) lose their payload; *count: how many. */
enum db_rc outbox_purge_payloads(struct db *db, const char *clients, const char *keys,
                                 long long *count) __attribute__((warn_unused_result));

/* Notifications (approval.notify, notify.h): the run's next free slot for
 * an effect type (1 for the first); and a claimed effect that is moot (its
 * challenge can no longer be decided) cancelled with reason, nothing sent.
 * OG_LEASE_LOST: not ours any more. */
enum og_rc outbox_next_slot(struct db *db, long long client_id, const char *key,
                            const char *type, int *slot) __attribute__((warn_unused_result));
enum og_rc outbox_cancel_claimed(struct db *db, const char *id, const char *lease_owner,
                                 const char *reason) __attribute__((warn_unused_result));

#endif

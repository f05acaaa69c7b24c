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
};

#define OUTBOX_ID_LEN 37
#define OUTBOX_TS_LEN 32

struct outbox_effect {
	long long client_id;
	const char *key;
	const char *type;
	const char *target;
	const char *payload;          /* JSON text */
	const char *payload_hash;
	int delay_seconds;            /* not_before = now() + delay (act-with-window) */
	const char *approval_id;      /* NULL for auto-approved effects */
	int slot;                     /* tells apart effects of one kind in one run; 0 today */
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

/* Settles one attempt (send or look-up) of an effect by compare-and-set and
 * records the attempt, in one statement; no row: the effect was not in the
 * expected state (or lease) any more. A statement so the dispatcher can
 * pipeline it in its settle transaction. Parameters:
 *  $1 effect  $2 expected state  $3 lease owner or NULL  $4 new state
 *  $5 provider id  $6 class  $7 reason  $8 delay ms (pending/unknown)
 *  $9 kind  $10 duration ms  $11 dispatcher  $12 attempt classification
 *  $13 status  $14 evidence  $15 expected reconcile_attempts or NULL
 * Returns the attempt number. */
extern const struct db_stmt outbox_st_settle;

/* Sending leases that ran out (up to limit): the effect turns unknown, and
 * the send is recorded as an ambiguous attempt by dispatcher, in one
 * statement. Rows: id, attempt, target, idempotency_key, client_name. */
enum db_rc outbox_expire_leases(struct db *db, int limit, const char *dispatcher,
                                PGresult **res) __attribute__((warn_unused_result));

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

/* Statement rows for the use cases' transactions and pipelines (their
 * parameters are the $n of the SQL text in outbox.c). */
extern const struct db_stmt outbox_st_claim;
extern const struct db_stmt outbox_st_release;
extern const struct db_stmt outbox_st_renew_batch;
extern const struct db_stmt outbox_st_release_unsent;
extern const struct db_stmt outbox_st_claim_reconcile;
extern const struct db_stmt outbox_st_presend;
extern const struct db_stmt outbox_st_renew;
extern const struct db_stmt outbox_st_find;
extern const struct db_stmt outbox_st_reconcile;
extern const struct db_stmt outbox_st_resume;
extern const struct db_stmt outbox_st_undelivered;
extern const struct db_stmt outbox_st_reject;
extern const struct db_stmt outbox_st_lock_run_effects;
extern const struct db_stmt outbox_st_reject_run;
extern const struct db_stmt outbox_st_audit;
extern const struct db_stmt outbox_st_purge_payloads;

/* Notifications (approval.notify, notify.h): the run's next free slot for
 * an effect type (1 for the first); and a claimed effect that is moot (its
 * challenge can no longer be decided) cancelled with reason, nothing sent.
 * OG_LEASE_LOST: not ours any more. */
enum og_rc outbox_next_slot(struct db *db, long long client_id, const char *key,
                            const char *type, int *slot) __attribute__((warn_unused_result));
enum og_rc outbox_cancel_claimed(struct db *db, const char *id, const char *lease_owner,
                                 const char *reason) __attribute__((warn_unused_result));

#endif

/*
 * outbox.h — the effect outbox (SPEC 6): the one owner of effect_outbox.
 *
 * An effect is enqueued in the same transaction as the decision that allows
 * it; the dispatcher (oncegate-dispatch) is the only reader that sends.
 */
#ifndef OG_OUTBOX_H
#define OG_OUTBOX_H

#include <jansson.h>

#include "config.h"
#include "db.h"

/* Mirrors the CHECK constraint on effect_outbox.state one for one. */
enum effect_state {
	EFFECT_PENDING = 0,
	EFFECT_SENDING,
	EFFECT_COMPLETED,
	EFFECT_UNKNOWN,
	EFFECT_FAILED,
	EFFECT_CANCELLED,
};

enum outbox_rc {
	OUTBOX_OK = 0,
	OUTBOX_EXISTS,       /* this (run, type, target) is already enqueued */
	OUTBOX_UNAVAILABLE,
	OUTBOX_ERROR,
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
};

/* outbox_enqueue as a db_call, for a pipelined transaction; release the
 * struct with outbox_enqueue_call_free after the call has run. */
struct outbox_enqueue_call {
	char client[24];
	char delay[16];
	char *provider_key;
	const char *params[9];
};
int outbox_enqueue_call(struct outbox_enqueue_call *o, const struct outbox_effect *e,
                        struct db_call *call) __attribute__((warn_unused_result));
enum outbox_rc outbox_enqueue_result(const struct db_call *call, char id[OUTBOX_ID_LEN],
                                     char not_before[OUTBOX_TS_LEN]);
void outbox_enqueue_call_free(struct outbox_enqueue_call *o);

/* Enqueues one effect and wakes the dispatchers (NOTIFY oncegate_outbox,
 * delivered at commit). Fills id and not_before. */
enum outbox_rc outbox_enqueue(struct db *db, const struct outbox_effect *e,
                              char id[OUTBOX_ID_LEN], char not_before[OUTBOX_TS_LEN])
	__attribute__((warn_unused_result));
/* The run's effects for the status API, each with the recovery envelope of
 * SPEC 7.2 (max_attempts from cfg's targets; cfg may be NULL); *out is a
 * new array. */
enum outbox_rc outbox_list(struct db *db, const struct config *cfg, long long client_id,
                           const char *key,
                           const char *correlation_id, const char *workflow_version,
                           json_t **out) __attribute__((warn_unused_result));
/* Cancels the run's effects still inside their window (pending, not_before
 * in the future); inside the caller's transaction. *ids is a new array of
 * the cancelled effect ids (empty: nothing could be cancelled). */
enum outbox_rc outbox_cancel_window(struct db *db, long long client_id, const char *key,
                                    json_t **ids) __attribute__((warn_unused_result));
/* The provider idempotency key of an effect: "<run key>/<type>" (SPEC 6). */
char *outbox_provider_key(const char *key, const char *type);

#endif

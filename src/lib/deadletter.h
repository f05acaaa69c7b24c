/*
 * deadletter.h — dead letters: the one owner of dead_letters.
 *
 * One letter per effect the dispatcher gave up on, with a snapshot of the
 * run, the effect and its attempt history; operators resolve, resume and
 * replay from it. Every function runs in the caller's transaction.
 */
#ifndef OG_DEADLETTER_H
#define OG_DEADLETTER_H

#include <stdbool.h>

#include <jansson.h>

#include "config.h"
#include "db.h"
#include "caps.h"
#include "rc.h"

/*
 * A dead letter is open while its effect still waits for an operator: the
 * effect is failed or unknown and nobody closed the letter (a finding of
 * "not delivered" or a resume that failed again leaves it open: one letter
 * per effect, so a resumed effect that fails again reopens its letter).
 * An SQL expression over a letter d and its effect e.
 */
#define DEADLETTER_OPEN(d, e)                                                              \
	"(" e ".state IN ('failed', 'unknown') AND coalesce(" d ".resolution, '')"           \
	" IN ('', 'not_delivered', 'resumed'))"

/*
 * The letter of an effect, written once (a second one for the same effect
 * is not written; one of class exhausted adds one to the letter's
 * exhaustions, so each spent retry budget counts). Run after the effect's last attempt is recorded in the
 * same transaction, so the snapshot holds it.
 */
struct deadletter_open {
	const char *effect_id;
	const char *error_class;
	const char *reason;
	const char *next_action;     /* what an operator should do */
	int max_attempts;            /* the target's */
	int retention_days;
};
/* deadletter_open as a db_call, so the dispatcher can pipeline it with the
 * settle of the effect. */
struct deadletter_open_call {
	char maxa[16], days[16];
	const char *params[6];
};
void deadletter_open_call(struct deadletter_open_call *d, const struct deadletter_open *in,
                          struct db_call *call);
/* *written: a new letter (false: the effect had one). */
enum db_rc deadletter_open(struct db *db, const struct deadletter_open *in, bool *written)
	__attribute__((warn_unused_result));

/* Closes the letters of the effects in ids (a PostgreSQL uuid[] text) with
 * resolution, resolved by the session's role (session_user). */
enum db_rc deadletter_resolve(struct db *db, const char *ids, const char *resolution);

/* The resolutions an operator's repair gives (dead_letters.resolution): the
 * provider confirmed the send or denied it (reconcile), the effect went
 * back to the queue (resume), or it was given up for good (reject). A
 * replay's is 'replayed', in this owner's SQL. */
#define DEADLETTER_DELIVERED     "delivered"
#define DEADLETTER_NOT_DELIVERED "not_delivered"
#define DEADLETTER_RESUMED       "resumed"
#define DEADLETTER_REJECTED      "rejected"

/* What deadletter_assign changed. */
struct deadletter_assigned {
	char id[40];
	char effect_id[40];
	long long client_id;
	char key[OG_KEY_MAX_CHARS * 4 + 1];
	char was[256];               /* the owner before; "" = the client's default */
};

/* Makes owner (a person) the owner of the letter id (its id or its
 * effect's). OG_NOT_FOUND: no such letter. In the caller's transaction,
 * which records the operator action. */
enum og_rc deadletter_assign(struct db *db, const char *id, const char *owner,
                             struct deadletter_assigned *out) __attribute__((warn_unused_result));

/* The run client_id/key was replayed as new_key: every letter of its
 * effects counts it and names the new run; an open one is answered by it
 * (resolution 'replayed', by the session's role). *count: the letters changed. */
enum db_rc deadletter_replayed(struct db *db, long long client_id, const char *key,
                               const char *new_key, int *count);

/* Letters past their retention deadline whose content is still there lose
 * any payload and the answers in their attempt history (ids, hashes,
 * states, class and resolution stay); *count: how many (dry_run: would). */
enum db_rc deadletter_purge(struct db *db, bool dry_run, long long *count);

/* The classes of a dead letter (dead_letters.error_class): a payload or
 * target the provider refused, retries used up, or a send whose outcome is
 * not known. */
#define DEADLETTER_PERMANENT "permanent"
#define DEADLETTER_EXHAUSTED "exhausted"
#define DEADLETTER_UNKNOWN   "unknown"

/* Dead-letter list filters; NULL/0 members do not filter. */
struct deadletter_filter {
	const char *since_ts;        /* a timestamp PostgreSQL reads */
	long long since_seconds;     /* or this long ago (> 0) */
	const char *error_class;     /* permanent | exhausted | unknown */
	const char *target;
	const char *state;           /* open | resolved */
	int limit;                   /* 0: 200 */
};

/* Dead letters, oldest first, each with its age and whether it is open:
 * *out is a new array. OG_BAD_INPUT: since_ts is not a timestamp
 * PostgreSQL reads. */
enum og_rc deadletter_list(struct db *db, const struct deadletter_filter *f, json_t **out)
	__attribute__((warn_unused_result));
/* One dead letter, by its id or its effect's id, with everything the
 * dead-letter record asks for, the attempts made since, the operators'
 * actions and the recovery envelope; *out is a new object. cfg (may be
 * NULL) gives the target's current max_attempts. OG_NOT_FOUND: none. */
enum og_rc deadletter_show(struct db *db, const struct config *cfg, const char *id,
                           json_t **out) __attribute__((warn_unused_result));

#endif

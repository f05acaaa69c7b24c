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

#include "db.h"

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
 * Writes the letter of an effect once (a second one for the same effect is
 * not written: no row). Run after the effect's last attempt is recorded in
 * the same transaction, so the snapshot holds it. Parameters: $1 effect id,
 * $2 error class, $3 reason, $4 next action, $5 the target's max attempts,
 * $6 retention days. Returns the letter's id. A statement (not a function)
 * so the dispatcher can pipeline it with the settle of the effect.
 */
extern const struct db_stmt deadletter_st_open;

/* Closes the letters of the effects in ids (a PostgreSQL uuid[] text) with
 * resolution, by operator. */
enum db_rc deadletter_resolve(struct db *db, const char *ids, const char *resolution,
                              const char *operator_name);

/* The run client_id/key was replayed as new_key: every letter of its
 * effects counts it and names the new run; an open one is answered by it
 * (resolution 'replayed', by operator). *count: the letters changed. */
enum db_rc deadletter_replayed(struct db *db, long long client_id, const char *key,
                               const char *new_key, const char *operator_name, int *count);

/* Letters past their retention deadline whose content is still there lose
 * any payload and the answers in their attempt history (ids, hashes,
 * states, class and resolution stay); *count: how many (dry_run: would). */
enum db_rc deadletter_purge(struct db *db, bool dry_run, long long *count);

/* Statement rows for the use cases' transactions and pipelines (their
 * parameters are the $n of the SQL text in deadletter.c). */
extern const struct db_stmt deadletter_st_list;
extern const struct db_stmt deadletter_st_show;
extern const struct db_stmt deadletter_st_target;

#endif

/*
 * oplog.h — what operators did: the one owner of operator_actions.
 *
 * Every change an operator makes (a client added, the kill switch turned,
 * a repair, a replay, a purge) writes one row here in the transaction of the
 * change itself, so the change and its record commit together.
 */
#ifndef OG_OPLOG_H
#define OG_OPLOG_H

#include <stddef.h>

#include "db.h"

/* operator_actions' CHECKs (characters), for callers to tell first. */
#define OPLOG_REASON_MAX   1000
#define OPLOG_ROLE_LEN     64   /* a PostgreSQL role name (NAMEDATALEN), NUL */

/* One operator action: what, why and what it touched. Who did it is the
 * database session's role (session_user), never a name the caller gives.
 * The NULL members are left empty; details is JSON text (NULL: {}). */
struct oplog_action {
	const char *action;       /* e.g. "client.add", "sends.stopped", "replay" */
	const char *reason;
	const char *client_id;    /* decimal text */
	const char *key;
	const char *effect_id;
	const char *approval_id;
	const char *details;
};

/* Writes the row in the caller's open transaction; *id (may be NULL) gets
 * its id. */
enum db_rc oplog_record(struct db *db, const struct oplog_action *a, long long *id)
	__attribute__((warn_unused_result));
/* The same; by (bylen bytes) gets the operator the row names, as written:
 * what the caller shows as who did it. */
enum db_rc oplog_record_by(struct db *db, const struct oplog_action *a, long long *id,
                           char *by, size_t bylen) __attribute__((warn_unused_result));

#endif

/*
 * oplog.c — write operator_actions rows; see oplog.h. (explain and report
 * read them in audit.c.)
 */
#include <stdio.h>

#include "oplog.h"

static const struct db_stmt st_record = {
	"oplog_record",
	"INSERT INTO operator_actions (operator, action, reason, client_id, idempotency_key,"
	"    effect_id, approval_id, details)"
	" VALUES (session_user, $1, $2, $3::bigint, $4, $5::uuid, $6::uuid,"
	"         coalesce($7::jsonb, '{}'))"
	" RETURNING id, operator",
	7, false,
};

enum db_rc
oplog_record(struct db *db, const struct oplog_action *a, long long *id)
{
	return oplog_record_by(db, a, id, NULL, 0);
}

enum db_rc
oplog_record_by(struct db *db, const struct oplog_action *a, long long *id, char *by,
                size_t bylen)
{
	const char *params[7] = { a->action, a->reason, a->client_id, a->key, a->effect_id,
		                  a->approval_id, a->details };
	PGresult *res = NULL;
	enum db_rc rc;

	if ((rc = db_exec(db, &st_record, params, &res)) != DB_OK)
		return rc;
	if (PQntuples(res) != 1) {
		PQclear(res);
		return DB_ERROR;
	}
	if (id != NULL)
		*id = db_get_ll(res, 0, "id");
	if (by != NULL && bylen > 0)
		snprintf(by, bylen, "%s", db_get(res, 0, "operator"));
	PQclear(res);
	return DB_OK;
}

/*
 * control.c — read and change the kill-switch row (dispatch_control).
 */
#include <stdio.h>

#include "control.h"

static const struct db_stmt st_status = {
	"control_status",
	"SELECT actions_enabled, og_ts(changed_at) AS changed_at, changed_by, reason,"
	"       blocked_sends,"
	"       (SELECT count(*) FROM effect_outbox WHERE state = 'pending'"
	"           AND next_attempt_at <= now()) AS due"
	"  FROM dispatch_control",
	0, true,
};

static const struct db_stmt st_switch = {
	"control_switch",
	"SELECT actions_enabled,"
	"       CASE WHEN NOT (actions_enabled AND $1::bool) THEN"
	"         (SELECT count(*) FROM effect_outbox WHERE state = 'pending'"
	"             AND next_attempt_at <= now()) END AS due"
	"  FROM dispatch_control",
	1, true,
};

static const struct db_stmt st_set = {
	"control_set",
	"UPDATE dispatch_control SET actions_enabled = $1::bool, changed_at = now(),"
	"       changed_by = session_user, reason = $2"
	" RETURNING (SELECT actions_enabled FROM dispatch_control) AS was",
	2, false,
};

/* Adds the effects a hold just marked (outbox_hold, same transaction). */
static const struct db_stmt st_blocked = {
	"control_blocked",
	"UPDATE dispatch_control SET blocked_sends = blocked_sends + $1::bigint",
	1, false,
};

enum db_rc
control_status(struct db *db, PGresult **res)
{
	return db_exec(db, &st_status, NULL, res);
}

enum db_rc
control_switch(struct db *db, bool env_enabled, PGresult **res)
{
	const char *p[1] = { env_enabled ? "true" : "false" };

	return db_exec(db, &st_switch, p, res);
}

enum db_rc
control_set(struct db *db, bool on, const char *reason, bool *was)
{
	const char *p[2] = { on ? "true" : "false", reason };
	PGresult *res = NULL;
	enum db_rc rc;
	const char *w;

	if ((rc = db_exec(db, &st_set, p, &res)) != DB_OK)
		return rc;
	if (PQntuples(res) != 1) {
		PQclear(res);
		return DB_ERROR;
	}
	w = db_get(res, 0, "was");
	*was = w != NULL && w[0] == 't';
	PQclear(res);
	return DB_OK;
}

enum db_rc
control_add_blocked(struct db *db, long long n)
{
	char v[24];
	const char *p[1] = { v };
	PGresult *res = NULL;
	enum db_rc rc;

	snprintf(v, sizeof(v), "%lld", n);
	if ((rc = db_exec(db, &st_blocked, p, &res)) == DB_OK)
		PQclear(res);
	return rc;
}

/*
 * control.c — read and change the kill-switch row (dispatch_control).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The statement's one row into *res; *res NULL (and DB_OK) when it
 * returns none. */
static enum db_rc
one_row(struct db *db, const struct db_stmt *st, const char *const *p, PGresult **res)
{
	enum db_rc rc = db_exec(db, st, p, res);

	if (rc == DB_OK && PQntuples(*res) != 1) {
		PQclear(*res);
		*res = NULL;
	}
	return rc;
}

/* Sends allowed (actions_enabled) in the row. */
static bool
enabled(const PGresult *res)
{
	return db_get_bool(res, 0, "actions_enabled");
}

/* The status row's columns but changed_at (a fixed buffer). */
#define ST(kind, f) DB_##kind(struct control_status, f)
static const struct db_col status_cols[] = {
	ST(BOOL, actions_enabled), ST(TEXT, changed_by), ST(TEXT, reason),
	ST(INT, blocked_sends), ST(INT, due),
};
#undef ST

enum db_rc
control_status(struct db *db, struct control_status *out)
{
	PGresult *res = NULL;
	enum db_rc rc;
	const char *at;

	memset(out, 0, sizeof(*out));
	if ((rc = one_row(db, &st_status, NULL, &res)) != DB_OK)
		return rc;
	if (res == NULL ||
	    db_row_get(res, 0, status_cols, DB_NCOLS(status_cols), out) != OG_OK) {
		PQclear(res);
		return DB_ERROR;
	}
	at = db_get(res, 0, "changed_at");
	snprintf(out->changed_at, sizeof(out->changed_at), "%s", at != NULL ? at : "");
	PQclear(res);
	return DB_OK;
}

void
control_status_clear(struct control_status *s)
{
	db_row_clear(status_cols, DB_NCOLS(status_cols), s, sizeof(*s));
}

enum db_rc
control_switch(struct db *db, bool env_enabled, struct control_flag *out)
{
	const char *p[1] = { env_enabled ? "true" : "false" };
	PGresult *res = NULL;
	enum db_rc rc = one_row(db, &st_switch, p, &res);

	memset(out, 0, sizeof(*out));
	if (rc == DB_OK && res != NULL) {
		out->found = true;
		out->actions_enabled = enabled(res);
		out->due = db_get_ll(res, 0, "due");
		PQclear(res);
	}
	return rc;
}

enum db_rc
control_set(struct db *db, bool on, const char *reason, bool *was)
{
	const char *p[2] = { on ? "true" : "false", reason };
	PGresult *res = NULL;
	enum db_rc rc;

	if ((rc = db_exec(db, &st_set, p, &res)) != DB_OK)
		return rc;
	if (PQntuples(res) != 1) {
		PQclear(res);
		return DB_ERROR;
	}
	*was = db_get_bool(res, 0, "was");
	PQclear(res);
	return DB_OK;
}

enum db_rc
control_add_blocked(struct db *db, long long n)
{
	char v[24];
	const char *p[1] = { v };

	snprintf(v, sizeof(v), "%lld", n);
	return db_exec_void(db, &st_blocked, p);
}

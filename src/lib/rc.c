/*
 * rc.c — the one result type's translation and names; see rc.h.
 */
#include <stdio.h>

#include "rc.h"

enum og_rc
og_rc_of(enum db_rc rc)
{
	return rc == DB_OK ? OG_OK : rc == DB_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
}

enum og_rc
og_exec_one(struct db *db, const struct db_stmt *stmt, const char *const *params,
            enum og_rc none, PGresult **res)
{
	PGresult *r = NULL;
	enum db_rc rc;
	enum og_rc orc;

	if (res != NULL)
		*res = NULL;
	if ((rc = db_exec(db, stmt, params, &r)) != DB_OK)
		return og_rc_of(rc);
	orc = PQntuples(r) == 1 ? OG_OK : none;
	if (orc == OG_OK && res != NULL)
		*res = r;
	else
		PQclear(r);
	return orc;
}

void
og_key_call(struct og_key_call *k, const struct db_stmt *stmt, long long client_id,
            const char *key, struct db_call *call)
{
	snprintf(k->client, sizeof(k->client), "%lld", client_id);
	k->params[0] = k->client;
	k->params[1] = key;
	call->stmt = stmt;
	call->params = k->params;
	call->rc = DB_ERROR;
	call->res = NULL;
}

enum og_rc
og_exec_key(struct db *db, const struct db_stmt *stmt, long long client_id, const char *key,
            PGresult **rows)
{
	struct og_key_call k;
	struct db_call call;

	og_key_call(&k, stmt, client_id, key, &call);
	*rows = NULL;
	return og_rc_of(db_exec(db, stmt, call.params, rows));
}

enum og_rc
og_exec_key_ids(struct db *db, const struct db_stmt *stmt, long long client_id, const char *key,
                json_t **ids)
{
	PGresult *res = NULL;
	enum og_rc rc;
	int i;

	*ids = NULL;
	if ((rc = og_exec_key(db, stmt, client_id, key, &res)) != OG_OK)
		return rc;
	*ids = json_array();
	for (i = 0; *ids != NULL && i < PQntuples(res); i++)
		json_array_append_new(*ids, json_string(db_get(res, i, "id")));
	PQclear(res);
	return *ids != NULL ? OG_OK : OG_ERROR;
}

const char *
og_rc_name(enum og_rc rc)
{
	static const char *const names[] = {
		[OG_OK] = "ok",
		[OG_CLAIMED] = "claimed",
		[OG_DUPLICATE] = "duplicate",
		[OG_MISMATCH] = "mismatch",
		[OG_NOT_FOUND] = "not_found",
		[OG_EXISTS] = "exists",
		[OG_AMBIGUOUS] = "ambiguous",
		[OG_LEASE_LOST] = "lease_lost",
		[OG_CAP_REACHED] = "cap_reached",
		[OG_NOT_PENDING] = "not_pending",
		[OG_USED] = "used",
		[OG_NOT_AWAITING] = "not_awaiting",
		[OG_CONFLICT] = "conflict",
		[OG_DENIED] = "denied",
		[OG_BAD_NAME] = "bad_name",
		[OG_BAD_INPUT] = "bad_input",
		[OG_WRONG_STATE] = "wrong_state",
		[OG_NOT_UNDELIVERED] = "not_undelivered",
		[OG_CHANGED] = "changed",
		[OG_REPLAYED] = "replayed",
		[OG_WINDOW_CLOSED] = "window_closed",
		[OG_NOT_FINISHED] = "not_finished",
		[OG_NO_PAYLOAD] = "no_payload",
		[OG_NO_APPROVERS] = "no_approvers",
		[OG_DONE_ALREADY] = "done_already",
		[OG_NEEDS_FORCE] = "needs_force",
		[OG_UNAVAILABLE] = "unavailable",
		[OG_ERROR] = "error",
	};

	return (unsigned)rc < sizeof(names) / sizeof(names[0]) && names[rc] != NULL ? names[rc]
	                                                                            : "error";
}

/*
 * outbox.c — enqueue effects and show them; sending is the dispatcher's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox.h"

static const struct db_stmt st_enqueue = {
	"outbox_enqueue",
	"WITH ins AS ("
	"  INSERT INTO effect_outbox (client_id, idempotency_key, effect_type, target,"
	"      payload, payload_hash, provider_key, not_before, next_attempt_at,"
	"      approval_id)"
	"  VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7,"
	"      now() + make_interval(secs => $8::int),"
	"      now() + make_interval(secs => $8::int), $9::uuid)"
	"  RETURNING id, not_before"
	")"
	"SELECT id, og_ts(not_before) AS not_before,"
	"       pg_notify('oncegate_outbox', id::text) FROM ins",
	9, false,
};

static const struct db_stmt st_list = {
	"outbox_list",
	"SELECT id, effect_type, target, state, provider_key, payload_hash, attempt,"
	"       provider_id, og_ts(not_before) AS not_before,"
	"       og_ts(next_attempt_at) AS next_attempt_at,"
	"       og_ts(created_at) AS created_at, og_ts(updated_at) AS updated_at,"
	"       approval_id"
	"  FROM effect_outbox WHERE client_id = $1 AND idempotency_key = $2"
	" ORDER BY created_at, id",
	2, true,
};

/* act_with_window (SPEC 4): cancellable until not_before, never after. */
static const struct db_stmt st_cancel = {
	"outbox_cancel",
	"UPDATE effect_outbox SET state = 'cancelled', updated_at = now()"
	" WHERE client_id = $1 AND idempotency_key = $2 AND state = 'pending'"
	"   AND not_before > now()"
	" RETURNING id",
	2, false,
};

enum outbox_rc
outbox_cancel_window(struct db *db, long long client_id, const char *key, json_t **ids)
{
	char client[24];
	const char *params[2] = { client, key };
	PGresult *res;
	enum db_rc rc;
	int i;

	*ids = NULL;
	snprintf(client, sizeof(client), "%lld", client_id);
	if ((rc = db_exec(db, &st_cancel, params, &res)) != DB_OK)
		return rc == DB_UNAVAILABLE ? OUTBOX_UNAVAILABLE : OUTBOX_ERROR;
	*ids = json_array();
	for (i = 0; i < PQntuples(res); i++)
		json_array_append_new(*ids, json_string(PQgetvalue(res, i, 0)));
	PQclear(res);
	return OUTBOX_OK;
}

char *
outbox_provider_key(const char *key, const char *type)
{
	size_t n = strlen(key) + strlen(type) + 2;
	char *s = malloc(n);

	if (s != NULL)
		snprintf(s, n, "%s/%s", key, type);
	return s;
}

enum outbox_rc
outbox_enqueue(struct db *db, const struct outbox_effect *e, char id[OUTBOX_ID_LEN],
               char not_before[OUTBOX_TS_LEN])
{
	char client[24], delay[16];
	char *pkey = outbox_provider_key(e->key, e->type);
	const char *params[9] = { client, e->key, e->type, e->target, e->payload,
		                  e->payload_hash, pkey, delay, e->approval_id };
	PGresult *res = NULL;
	enum outbox_rc orc = OUTBOX_OK;
	enum db_rc rc;

	if (pkey == NULL)
		return OUTBOX_ERROR;
	snprintf(client, sizeof(client), "%lld", e->client_id);
	snprintf(delay, sizeof(delay), "%d", e->delay_seconds);
	rc = db_exec(db, &st_enqueue, params, &res);
	if (rc != DB_OK) {
		orc = rc == DB_UNAVAILABLE ? OUTBOX_UNAVAILABLE
		      : rc == DB_CONFLICT  ? OUTBOX_EXISTS
		                           : OUTBOX_ERROR;
		goto out;
	}
	snprintf(id, OUTBOX_ID_LEN, "%s", db_get(res, 0, "id"));
	snprintf(not_before, OUTBOX_TS_LEN, "%s", db_get(res, 0, "not_before"));
out:
	PQclear(res);
	free(pkey);
	return orc;
}

static void
set_opt(json_t *o, const char *name, const PGresult *res, int row, const char *col)
{
	const char *v = db_get(res, row, col);

	json_object_set_new(o, name, v != NULL ? json_string(v) : json_null());
}

enum outbox_rc
outbox_list(struct db *db, long long client_id, const char *key, const char *correlation_id,
            const char *workflow_version, json_t **out)
{
	char client[24];
	const char *params[2] = { client, key };
	PGresult *res;
	enum db_rc rc;
	json_t *list;
	int i;

	*out = NULL;
	snprintf(client, sizeof(client), "%lld", client_id);
	if ((rc = db_exec(db, &st_list, params, &res)) != DB_OK)
		return rc == DB_UNAVAILABLE ? OUTBOX_UNAVAILABLE : OUTBOX_ERROR;
	list = json_array();
	for (i = 0; i < PQntuples(res); i++) {
		json_t *e = json_object();

		set_opt(e, "effect_id", res, i, "id");
		set_opt(e, "type", res, i, "effect_type");
		set_opt(e, "target", res, i, "target");
		set_opt(e, "provider_id", res, i, "provider_id");
		set_opt(e, "not_before", res, i, "not_before");
		set_opt(e, "approval_id", res, i, "approval_id");
		set_opt(e, "created_at", res, i, "created_at");
		set_opt(e, "updated_at", res, i, "updated_at");
		/* the recovery envelope (SPEC 7.2, seed 004) */
		set_opt(e, "event_id", res, i, "id");
		json_object_set_new(e, "correlation_id",
		                    correlation_id ? json_string(correlation_id) : json_null());
		json_object_set_new(e, "operation", json_string(db_get(res, i, "effect_type")));
		set_opt(e, "idempotency_key", res, i, "provider_key");
		set_opt(e, "payload_hash", res, i, "payload_hash");
		json_object_set_new(e, "attempt", json_integer(db_get_ll(res, i, "attempt")));
		json_object_set_new(e, "max_attempts", json_null()); /* the target's, set by the dispatcher */
		json_object_set_new(e, "classification", json_null());
		set_opt(e, "next_attempt_at", res, i, "next_attempt_at");
		json_object_set_new(e, "workflow_version",
		                    workflow_version ? json_string(workflow_version) : json_null());
		set_opt(e, "status", res, i, "state");
		json_array_append_new(list, e);
	}
	PQclear(res);
	*out = list;
	return OUTBOX_OK;
}

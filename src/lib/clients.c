/*
 * clients.c — API clients: keys made from the CSPRNG, stored as SHA-256,
 * looked up on every request so a revocation takes effect at once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "clients.h"
#include "digest.h"

static const struct db_stmt st_auth = {
	"clients_auth",
	CLIENTS_SQL_ACTIVE("$1"),
	1, true,
};

static const struct db_stmt st_add = {
	"clients_add",
	"INSERT INTO api_clients (name, key_hash) VALUES ($1, decode($2, 'hex'))"
	" ON CONFLICT (name) DO NOTHING RETURNING id",
	2, false,
};

static const struct db_stmt st_revoke = {
	"clients_revoke",
	"UPDATE api_clients SET revoked_at = COALESCE(revoked_at, now())"
	" WHERE name = $1 RETURNING id",
	1, false,
};

static const struct db_stmt st_list = {
	"clients_list",
	"SELECT name, og_ts(created_at) AS created_at, og_ts(revoked_at) AS revoked_at"
	"  FROM api_clients ORDER BY name",
	0, true,
};

int
clients_name_valid(const char *name)
{
	size_t i, n = strlen(name);

	if (n == 0 || n > OG_CLIENT_NAME_MAX)
		return 0;
	for (i = 0; i < n; i++) {
		char c = name[i];
		int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		            (c >= '0' && c <= '9');

		if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
			return 0;
	}
	return 1;
}

bool
clients_key_hash(const char *key, char hash[DIGEST_HEX_LEN])
{
	size_t n = strlen(key);

	if (n != CLIENTS_KEY_LEN - 1 || strncmp(key, "og_", 3) != 0)
		return false;
	digest_sha256_hex(key, n, hash);
	return true;
}

bool
clients_auth_call(struct clients_auth *a, const char *key, struct db_call *call)
{
	if (!clients_key_hash(key, a->hash))
		return false;
	a->params[0] = a->hash;
	call->stmt = &st_auth;
	call->params = a->params;
	return true;
}

enum og_rc
clients_auth_result(const struct db_call *call, struct client *out)
{
	if (call->rc != DB_OK)
		return og_rc_of(call->rc);
	if (PQntuples(call->res) != 1)
		return OG_DENIED;
	out->id = db_get_ll(call->res, 0, "id");
	snprintf(out->name, sizeof(out->name), "%s", db_get(call->res, 0, "name"));
	return OG_OK;
}

enum og_rc
clients_authenticate(struct db *db, const char *key, struct client *out)
{
	struct clients_auth a;
	struct db_call call = { 0 };
	enum og_rc rc;

	if (!clients_auth_call(&a, key, &call))
		return OG_DENIED;
	call.rc = db_exec(db, call.stmt, call.params, &call.res);
	rc = clients_auth_result(&call, out);
	PQclear(call.res);
	return rc;
}

enum og_rc
clients_add(struct db *db, const char *name, char key[CLIENTS_KEY_LEN], long long *id)
{
	unsigned char raw[OG_API_KEY_BYTES];
	char hex[DIGEST_HEX_LEN];
	const char *params[2] = { name, hex };
	PGresult *res;
	enum og_rc crc = OG_OK;
	enum db_rc rc;

	if (!clients_name_valid(name))
		return OG_BAD_NAME;
	if (digest_random(raw, sizeof(raw)) != 0)
		return OG_ERROR;
	memcpy(key, "og_", 3);
	digest_base64url(raw, sizeof(raw), key + 3);
	digest_wipe(raw, sizeof(raw));
	digest_sha256_hex(key, strlen(key), hex);
	if ((rc = db_exec(db, &st_add, params, &res)) != DB_OK) {
		crc = og_rc_of(rc);
		goto out;
	}
	if (PQntuples(res) != 1)
		crc = OG_EXISTS;
	else if (id != NULL)
		*id = db_get_ll(res, 0, "id");
	PQclear(res);
out:
	if (crc != OG_OK)
		digest_wipe(key, CLIENTS_KEY_LEN);
	return crc;
}

enum og_rc
clients_revoke(struct db *db, const char *name, long long *id)
{
	const char *params[1] = { name };
	PGresult *res;
	enum db_rc rc;
	int n;

	if ((rc = db_exec(db, &st_revoke, params, &res)) != DB_OK)
		return og_rc_of(rc);
	n = PQntuples(res);
	if (n == 1 && id != NULL)
		*id = db_get_ll(res, 0, "id");
	PQclear(res);
	return n == 1 ? OG_OK : OG_NOT_FOUND;
}

/* The rows of st (no parameters) as a JSON array, one object a row made by
 * row: a new reference in *out. */
static enum og_rc
rows_json(struct db *db, const struct db_stmt *st, json_t *(*row)(const PGresult *, int),
          json_t **out)
{
	PGresult *res;
	enum db_rc rc;
	json_t *list;
	int i;

	*out = NULL;
	if ((rc = db_exec(db, st, NULL, &res)) != DB_OK)
		return og_rc_of(rc);
	list = json_array();
	for (i = 0; list != NULL && i < PQntuples(res); i++)
		json_array_append_new(list, row(res, i));
	PQclear(res);
	*out = list;
	return list != NULL ? OG_OK : OG_ERROR;
}

static json_t *
client_row(const PGresult *res, int i)
{
	const char *revoked = db_get(res, i, "revoked_at");

	return json_pack("{s:s, s:s, s:o}", "name", db_get(res, i, "name"), "created_at",
	                 db_get(res, i, "created_at"), "revoked_at",
	                 revoked ? json_string(revoked) : json_null());
}

enum og_rc
clients_list(struct db *db, json_t **out)
{
	return rows_json(db, &st_list, client_row, out);
}

static const struct db_stmt st_name = {
	"clients_name", "SELECT name FROM api_clients WHERE id = $1::bigint", 1, true,
};

static const struct db_stmt st_id = {
	"clients_id", "SELECT id FROM api_clients WHERE name = $1", 1, true,
};

enum og_rc
clients_name(struct db *db, long long id, char *name, size_t len)
{
	PGresult *res = NULL;
	enum og_rc rc = og_exec_key(db, &st_name, id, NULL, &res);

	if (rc == OG_OK && PQntuples(res) != 1)
		rc = OG_NOT_FOUND;
	if (rc == OG_OK && len > 0)
		snprintf(name, len, "%s", db_get(res, 0, "name"));
	PQclear(res);
	return rc;
}

enum og_rc
clients_id(struct db *db, const char *name, long long *id)
{
	const char *p[1] = { name };
	PGresult *res = NULL;
	enum og_rc rc = og_exec_one(db, &st_id, p, OG_NOT_FOUND, &res);

	*id = rc == OG_OK ? db_get_ll(res, 0, "id") : 0;
	PQclear(res);
	return rc;
}

/* ---- decision grants (client_decide_grants) ------------------------------ */

static const struct db_stmt st_grant = {
	"clients_grant_decide",
	"INSERT INTO client_decide_grants (client_id, contract, approver)"
	" SELECT id, $2, $3 FROM api_clients WHERE name = $1 AND revoked_at IS NULL"
	" ON CONFLICT DO NOTHING RETURNING client_id",
	3, false,
};

static const struct db_stmt st_ungrant = {
	"clients_ungrant_decide",
	"DELETE FROM client_decide_grants g USING api_clients c"
	" WHERE c.name = $1 AND g.client_id = c.id AND g.contract = $2 AND g.approver = $3"
	" RETURNING g.client_id",
	3, false,
};

/* The approver entry itself, or "*" for every entry of the contract. */
static const struct db_stmt st_may_decide = {
	"clients_may_decide",
	"SELECT 1 FROM client_decide_grants"
	" WHERE client_id = $1::bigint AND contract = $2 AND approver IN ($3, '*')",
	3, true,
};

static const struct db_stmt st_grants = {
	"clients_grants",
	"SELECT c.name, g.contract, g.approver, og_ts(g.created_at) AS created_at"
	"  FROM client_decide_grants g JOIN api_clients c ON c.id = g.client_id"
	" ORDER BY c.name, g.contract, g.approver",
	0, true,
};

enum og_rc
clients_grant_decide(struct db *db, const char *name, const char *contract,
                     const char *approver, bool grant, long long *id)
{
	const char *params[3] = { name, contract, approver };
	PGresult *res;
	enum db_rc rc;
	int n;

	if ((rc = db_exec(db, grant ? &st_grant : &st_ungrant, params, &res)) != DB_OK)
		return og_rc_of(rc);
	n = PQntuples(res);
	if (n == 1 && id != NULL)
		*id = db_get_ll(res, 0, "client_id");
	PQclear(res);
	return n == 1 ? OG_OK : OG_NOT_FOUND;
}

enum og_rc
clients_may_decide(struct db *db, long long client_id, const char *contract,
                   const char *approver)
{
	char idtext[24];
	const char *params[3] = { idtext, contract, approver };
	long long n = 0;
	enum db_rc rc;

	snprintf(idtext, sizeof(idtext), "%lld", client_id);
	if ((rc = db_exec_count(db, &st_may_decide, params, &n)) != DB_OK)
		return og_rc_of(rc);
	return n > 0 ? OG_OK : OG_DENIED;
}

static json_t *
grant_row(const PGresult *res, int i)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:s}", "client", db_get(res, i, "name"), "scope",
	                 "decide", "contract", db_get(res, i, "contract"), "approver",
	                 db_get(res, i, "approver"), "created_at", db_get(res, i, "created_at"));
}

enum og_rc
clients_grants(struct db *db, json_t **out)
{
	return rows_json(db, &st_grants, grant_row, out);
}

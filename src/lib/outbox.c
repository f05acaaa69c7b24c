/*
 * outbox.c — enqueue effects and show them, settle them and record their
 * attempts; the dispatcher's claims, releases and lease renewals, the
 * operator's reconcile, resume and reject, the kill switch's hold and the
 * purge, as statements the use cases run in their transactions; sending is
 * the dispatcher's. The one file with SQL text for effect_outbox and
 * effect_attempts.
 *
 * effect_attempts is written here too: an attempt is recorded by the same
 * statement that settles its effect (compare-and-set on effect_outbox), so
 * neither can commit without the other.
 *
 * Its length (just over 1,000 lines, about half of it SQL) is that of the
 * one owner of the two tables every effect goes through; splitting it
 * would give a table two files with its SQL.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* asprintf */
#endif
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "canon.h"
#include "digest.h"
#include "outbox.h"

static const char *const state_names[EFFECT_STATE_COUNT] = {
	"pending", "sending", "completed", "unknown", "failed", "cancelled",
};

OG_NAME_FN(outbox_state_name, enum effect_state, state_names, "");
OG_PARSE_FN(outbox_state_parse, int, state_names, -1);

static const struct db_stmt st_enqueue = {
	"outbox_enqueue",
	"WITH ins AS ("
	"  INSERT INTO effect_outbox (client_id, idempotency_key, effect_type, target,"
	"      payload, payload_hash, provider_key, not_before, next_attempt_at,"
	"      approval_id, slot)"
	"  VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7,"
	"      now() + make_interval(secs => $8::int),"
	"      now() + make_interval(secs => $8::int), $9::uuid, $10::int)"
	"  RETURNING id, not_before"
	")"
	"SELECT id, og_ts(not_before) AS not_before,"
	"       pg_notify('oncegate_outbox', id::text) FROM ins",
	10, false,
};

static const struct db_stmt st_list = {
	"outbox_list",
	"SELECT id, effect_type, target, state, provider_key, payload_hash, attempt,"
	"       provider_id, error_class, reason, og_ts(completed_at) AS completed_at,"
	"       og_ts(not_before) AS not_before,"
	/* the same value and format as oncegatectl's envelope: only while
	 * the dispatcher will act on it */
	"       CASE WHEN state IN ('pending', 'unknown') THEN og_ts(next_attempt_at) END"
	"           AS next_attempt_at,"
	"       og_ts(created_at) AS created_at, og_ts(updated_at) AS updated_at,"
	"       approval_id, slot,"
	/* the upstream event's id, else its correlation id (the run's) */
	"       (SELECT coalesce(r.event_id, r.correlation_id) FROM workflow_runs r"
	"         WHERE r.client_id = e.client_id AND r.idempotency_key = e.idempotency_key)"
	"           AS event_id"
	"  FROM effect_outbox e WHERE client_id = $1 AND idempotency_key = $2"
	" ORDER BY created_at, id",
	2, true,
};

/* act_with_window: cancellable until not_before, never after. */
static const struct db_stmt st_cancel = {
	"outbox_cancel",
	"UPDATE effect_outbox SET state = 'cancelled', updated_at = now()"
	" WHERE client_id = $1 AND idempotency_key = $2 AND state = 'pending'"
	"   AND not_before > now()"
	" RETURNING id",
	2, false,
};

enum og_rc
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
		return rc == DB_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
	*ids = json_array();
	for (i = 0; i < PQntuples(res); i++)
		json_array_append_new(*ids, json_string(PQgetvalue(res, i, 0)));
	PQclear(res);
	return OG_OK;
}

/* Writes the readable form of s (at most max bytes) to out: bytes in
 * [A-Za-z0-9._-] as they are, each run of other bytes as one '_'; its length. */
static size_t
pkey_readable(char *out, const char *s, size_t max)
{
	size_t n = 0;
	bool gap = false;

	for (; *s != '\0' && n < max; s++) {
		unsigned char ch = (unsigned char)*s;

		if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
		    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-') {
			out[n++] = (char)ch;
			gap = false;
		} else if (!gap) {
			out[n++] = '_';
			gap = true;
		}
	}
	if (n == 0)
		out[n++] = '_';
	return n;
}

char *
outbox_provider_key(long long client_id, const char *key, const char *type,
                    const char *target, int slot)
{
	char client[24], slots[16], hex[DIGEST_HEX_LEN];
	char rk[OUTBOX_PKEY_READABLE_MAX], rt[OUTBOX_PKEY_READABLE_MAX];
	char *tuple = NULL, *out;
	size_t nk, nt;
	int n;

	snprintf(client, sizeof(client), "%lld", client_id);
	snprintf(slots, sizeof(slots), "%d", slot);
	/* length-prefixed fields: no two tuples share an encoding */
	n = asprintf(&tuple, "oncegate provider key 1\n%zu:%s,%zu:%s,%zu:%s,%zu:%s,%zu:%s,",
	             strlen(client), client, strlen(key), key, strlen(type), type,
	             strlen(target), target, strlen(slots), slots);
	if (n < 0)
		return NULL;
	digest_sha256_hex(tuple, (size_t)n, hex);
	free(tuple);
	nk = pkey_readable(rk, key, sizeof(rk));
	nt = pkey_readable(rt, type, sizeof(rt));
	/* 5 + 20 + 1 + 48 + 1 + 48 + 1 + 11 + 1 + 64 = 200 bytes at most */
	if (asprintf(&out, "og1/c%s/%.*s/%.*s/%s/%s", client, (int)nk, rk, (int)nt, rt, slots,
	             hex) < 0)
		return NULL;
	return out;
}

int
outbox_enqueue_call(struct outbox_enqueue_call *o, const struct outbox_effect *e,
                    struct db_call *call)
{
	memset(o, 0, sizeof(*o));
	o->provider_key =
		outbox_provider_key(e->client_id, e->key, e->type, e->target, e->slot);
	if (o->provider_key == NULL)
		return -1;
	snprintf(o->client, sizeof(o->client), "%lld", e->client_id);
	snprintf(o->delay, sizeof(o->delay), "%d", e->delay_seconds);
	snprintf(o->slot, sizeof(o->slot), "%d", e->slot);
	{
		const char *const p[10] = { o->client, e->key, e->type, e->target, e->payload,
			                    e->payload_hash, o->provider_key, o->delay,
			                    e->approval_id, o->slot };

		memcpy(o->params, p, sizeof(p));
	}
	call->stmt = &st_enqueue;
	call->params = o->params;
	return 0;
}

enum og_rc
outbox_enqueue_result(const struct db_call *call, char id[OUTBOX_ID_LEN],
                      char not_before[OUTBOX_TS_LEN])
{
	if (call->rc != DB_OK)
		return call->rc == DB_UNAVAILABLE ? OG_UNAVAILABLE
		       : call->rc == DB_CONFLICT  ? OG_EXISTS
		                                  : OG_ERROR;
	if (PQntuples(call->res) != 1)
		return OG_ERROR;
	snprintf(id, OUTBOX_ID_LEN, "%s", db_get(call->res, 0, "id"));
	snprintf(not_before, OUTBOX_TS_LEN, "%s", db_get(call->res, 0, "not_before"));
	return OG_OK;
}

void
outbox_enqueue_call_free(struct outbox_enqueue_call *o)
{
	free(o->provider_key);
	o->provider_key = NULL;
}

enum og_rc
outbox_enqueue(struct db *db, const struct outbox_effect *e, char id[OUTBOX_ID_LEN],
               char not_before[OUTBOX_TS_LEN])
{
	struct outbox_enqueue_call o;
	struct db_call call = { 0 };
	enum og_rc orc;

	if (outbox_enqueue_call(&o, e, &call) != 0)
		return OG_ERROR;
	call.rc = db_exec(db, call.stmt, call.params, &call.res);
	orc = outbox_enqueue_result(&call, id, not_before);
	PQclear(call.res);
	outbox_enqueue_call_free(&o);
	return orc;
}

static void
set_opt(json_t *o, const char *name, const PGresult *res, int row, const char *col)
{
	const char *v = db_get(res, row, col);

	json_object_set_new(o, name, v != NULL ? json_string(v) : json_null());
}

/* What outbox_list adds to each effect's row: its run's recovery envelope
 * and the target's retry budget. */
struct list_ctx {
	const struct config *cfg;
	const char *correlation_id, *workflow_version;
};

static json_t *
effect_json(const PGresult *res, int i, void *arg)
{
	const struct list_ctx *l = arg;
	json_t *e = json_object();

	set_opt(e, "effect_id", res, i, "id");
	set_opt(e, "type", res, i, "effect_type");
	set_opt(e, "target", res, i, "target");
	set_opt(e, "provider_id", res, i, "provider_id");
	/* the key the provider sees, stored when the effect was enqueued */
	set_opt(e, "provider_key", res, i, "provider_key");
	json_object_set_new(e, "slot", json_integer(db_get_ll(res, i, "slot")));
	set_opt(e, "not_before", res, i, "not_before");
	set_opt(e, "approval_id", res, i, "approval_id");
	set_opt(e, "created_at", res, i, "created_at");
	set_opt(e, "updated_at", res, i, "updated_at");
	/* the recovery envelope every effect's status carries */
	set_opt(e, "event_id", res, i, "event_id");
	json_object_set_new(e, "correlation_id",
	                    l->correlation_id ? json_string(l->correlation_id) : json_null());
	json_object_set_new(e, "operation", json_string(db_get(res, i, "effect_type")));
	set_opt(e, "idempotency_key", res, i, "provider_key");
	set_opt(e, "payload_hash", res, i, "payload_hash");
	json_object_set_new(e, "attempt", json_integer(db_get_ll(res, i, "attempt")));
	{
		const struct config_target *t =
			l->cfg != NULL ? config_target(l->cfg, db_get(res, i, "target")) : NULL;

		json_object_set_new(e, "max_attempts",
		                    t != NULL ? json_integer(t->max_attempts) : json_null());
	}
	/* the last attempt's class and the rule that decided it */
	set_opt(e, "classification", res, i, "error_class");
	set_opt(e, "reason", res, i, "reason");
	set_opt(e, "completed_at", res, i, "completed_at");
	set_opt(e, "next_attempt_at", res, i, "next_attempt_at");
	json_object_set_new(e, "workflow_version",
	                    l->workflow_version ? json_string(l->workflow_version) : json_null());
	set_opt(e, "status", res, i, "state");
	return e;
}

enum og_rc
outbox_list(struct db *db, const struct config *cfg, long long client_id, const char *key,
            const char *correlation_id, const char *workflow_version, json_t **out)
{
	struct list_ctx l = { cfg, correlation_id, workflow_version };
	struct og_key_call k;
	struct db_call call;

	og_key_call(&k, &st_list, client_id, key, &call);
	return og_rc_of(db_json_rows(db, call.stmt, call.params, effect_json, &l, out));
}

/* --- attempts ---------------------------------------------------------------- */

/* Settles one attempt (send or look-up) by compare-and-set and records it.
 *  $1 effect  $2 expected state  $3 lease owner or NULL  $4 new state
 *  $5 provider id  $6 class  $7 reason  $8 delay ms (pending/unknown)
 *  $9 kind  $10 duration ms  $11 dispatcher  $12 attempt classification
 *  $13 status  $14 evidence  $15 expected reconcile_attempts or NULL */
static const struct db_stmt st_settle = {
	"outbox_settle",
	"WITH moved AS ("
	"  UPDATE effect_outbox"
	"     SET state = $4, provider_id = coalesce($5, provider_id),"
	"         error_class = $6, reason = $7,"
	"         next_attempt_at = CASE WHEN $4 IN ('pending', 'unknown')"
	"             THEN now() + make_interval(secs => $8::float8 / 1000)"
	"             ELSE next_attempt_at END,"
	"         lease_owner = NULL, lease_expires_at = NULL, send_started = NULL,"
	"         completed_at = CASE WHEN $4 = 'completed' THEN now() END,"
	"         updated_at = now()"
	"   WHERE id = $1::uuid AND state = $2"
	"     AND ($3::uuid IS NULL OR lease_owner = $3::uuid)"
	"     AND ($15::int IS NULL OR reconcile_attempts = $15::int)"
	"  RETURNING id, attempt, client_id, idempotency_key"
	"), att AS ("
	"  INSERT INTO effect_attempts (effect_id, kind, attempt, started_at, duration_ms,"
	"      dispatcher, classification, reason, status, provider_id, evidence)"
	"  SELECT id, $9, attempt, now() - make_interval(secs => $10::float8 / 1000),"
	"         $10::int, $11, $12, $7, $13::int, $5, $14::jsonb FROM moved"
	")"
	"SELECT attempt FROM moved",
	15, false,
};

/* A sending lease that ran out: the dispatcher died or stalled. When its
 * send had started (send_started true, committed right before the provider
 * call; or not known: NULL) the provider may have acted: unknown, never
 * pending, and an ambiguous attempt recorded. When it had not (false: the
 * claim's mark was never replaced) nothing can have gone out: pending
 * again, due now, the attempt given back, the dispatchers woken. (The
 * dispatcher does not mark sends to a target that honours the idempotency
 * key: those are sent again with their key, which is safe.) */
#define LEASE_UNSTARTED(e) "NOT coalesce(" e ".send_started, true)"
static const struct db_stmt st_expire_leases = {
	"outbox_expire_leases",
	"WITH moved AS ("
	"  UPDATE effect_outbox e"
	"     SET state = CASE WHEN " LEASE_UNSTARTED("e") " THEN 'pending' ELSE 'unknown' END,"
	"         error_class = CASE WHEN " LEASE_UNSTARTED("e") " THEN e.error_class"
	"             ELSE 'ambiguous' END,"
	"         reason = CASE WHEN " LEASE_UNSTARTED("e") " THEN 'lease_expired_requeued'"
	"             ELSE 'lease_expired_while_sending' END,"
	"         attempt = CASE WHEN " LEASE_UNSTARTED("e") " THEN e.attempt - 1 ELSE e.attempt END,"
	"         first_attempt_at = CASE WHEN " LEASE_UNSTARTED("e") " AND e.attempt = 1 THEN NULL"
	"             ELSE e.first_attempt_at END,"
	"         lease_owner = NULL, lease_expires_at = NULL, send_started = NULL,"
	"         next_attempt_at = now(), updated_at = now()"
	"   WHERE e.id = ANY(ARRAY("
	"     SELECT id FROM effect_outbox"
	"      WHERE state = 'sending' AND lease_expires_at < now()"
	"      LIMIT $1::int FOR UPDATE SKIP LOCKED))"
	"     AND e.state = 'sending' AND e.lease_expires_at < now()"
	"  RETURNING e.id, e.state, e.attempt, e.target, e.idempotency_key, e.client_id"
	"), att AS ("
	"  INSERT INTO effect_attempts (effect_id, kind, attempt, started_at, duration_ms,"
	"      dispatcher, classification, reason, evidence)"
	"  SELECT id, 'send', attempt, now(), 0, $2, 'ambiguous',"
	"         'lease_expired_while_sending', '{\"request_sent\": \"unknown\"}'::jsonb"
	"    FROM moved WHERE state = 'unknown'"
	")"
	"SELECT id, state, attempt, target, idempotency_key,"
	"       (SELECT c.name FROM api_clients c WHERE c.id = moved.client_id) AS client_name,"
	"       CASE WHEN state = 'pending' THEN pg_notify('oncegate_outbox', id::text) END"
	"  FROM moved",
	2, false,
};

/* Attempts older than $1 days of effects that are over (completed, failed,
 * cancelled) and still hold an excerpt. */
#define PURGEABLE_ATTEMPTS                                                               \
	"SELECT a.id FROM effect_attempts a JOIN effect_outbox o ON o.id = a.effect_id"  \
	" WHERE o.state IN ('completed', 'failed', 'cancelled')"                         \
	"   AND a.started_at < now() - make_interval(days => $1::int)"                   \
	"   AND a.evidence ?| " OUTBOX_PURGE_EVIDENCE_KEYS

static const struct db_stmt st_purge_attempts_count = {
	"outbox_purge_attempts_count",
	"SELECT count(*) AS n FROM (" PURGEABLE_ATTEMPTS ") AS x",
	1, true,
};

static const struct db_stmt st_purge_attempts = {
	"outbox_purge_attempts",
	"WITH att AS (UPDATE effect_attempts t"
	"          SET evidence = (t.evidence - " OUTBOX_PURGE_EVIDENCE_KEYS ")"
	"                         || '{\"purged\": true}'::jsonb"
	"         WHERE t.id IN (" PURGEABLE_ATTEMPTS ") RETURNING t.id)"
	"SELECT count(*) AS n FROM att",
	1, false,
};

/* Due effects, oldest first, leased to this process. The partial index on
 * next_attempt_at (state = 'pending') is the only access path; effects of
 * a window are due at not_before (enqueue sets both). */
static const struct db_stmt st_claim = {
	"outbox_claim",
	/* = ANY(ARRAY(…)): the chosen ids become one value, so the UPDATE finds
	 * them through the primary key whatever the generic plan guesses for
	 * LIMIT $2 (a join here was planned as a hash over the whole table). */
	"UPDATE effect_outbox e"
	"   SET state = 'sending', lease_owner = $1::uuid,"
	"       lease_expires_at = now() + make_interval(secs => $3::int),"
	"       attempt = e.attempt + 1, first_attempt_at = coalesce(e.first_attempt_at, now()),"
	"       held_at = NULL, send_started = false, updated_at = now()"
	" WHERE e.id = ANY(ARRAY("
	"   SELECT id FROM effect_outbox"
	"    WHERE state = 'pending' AND next_attempt_at <= now() AND not_before <= now()"
	"    ORDER BY next_attempt_at"
	"    LIMIT $2::int"
	"    FOR UPDATE SKIP LOCKED))"
	" RETURNING e.id, e.client_id, e.idempotency_key, e.effect_type, e.target,"
	"       (SELECT c.name FROM api_clients c WHERE c.id = e.client_id) AS client_name,"
	"       e.payload::text AS payload, e.payload_hash, e.provider_key, e.attempt,"
	"       (extract(epoch FROM now() - e.first_attempt_at) * 1000)::bigint AS elapsed_ms,"
	/* what the payload is checked against again right before the send:
	 * the run's output as approved (an approver's correction, when one was
	 * made) and, for the effect the run proposed, its contract */
	"       (SELECT coalesce(r.edited_output, r.output)::text FROM workflow_runs r"
	"         WHERE r.client_id = e.client_id AND r.idempotency_key = e.idempotency_key)"
	"         AS run_output,"
	"       (SELECT r.contract FROM workflow_runs r"
	"         WHERE r.client_id = e.client_id AND r.idempotency_key = e.idempotency_key"
	"           AND r.effect->>'type' = e.effect_type AND r.effect->>'target' = e.target)"
	"         AS run_contract",
	3, false,
};

/* Not sent after all (kill switch, shutdown): pending again, the attempt
 * given back. */
static const struct db_stmt st_release = {
	"outbox_release",
	"UPDATE effect_outbox"
	"   SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL, send_started = NULL,"
	"       attempt = attempt - 1,"
	"       first_attempt_at = CASE WHEN attempt = 1 THEN NULL ELSE first_attempt_at END,"
	"       next_attempt_at = now() + make_interval(secs => $3::int), updated_at = now()"
	" WHERE id = $1::uuid AND state = 'sending' AND lease_owner = $2::uuid"
	" RETURNING attempt",
	3, false,
};

/* The rest of a claimed batch keeps its lease while the worker sends the
 * effects before it: one statement for all of them, only when short. */
static const struct db_stmt st_renew_batch = {
	"outbox_renew_batch",
	"UPDATE effect_outbox SET lease_expires_at = now() + make_interval(secs => $3::int)"
	" WHERE id = ANY($1::uuid[]) AND state = 'sending' AND lease_owner = $2::uuid",
	3, false,
};

/* Shutdown past its deadline: what this process holds and is not sending. */
static const struct db_stmt st_release_unsent = {
	"outbox_release_unsent",
	"UPDATE effect_outbox"
	"   SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL, send_started = NULL,"
	"       attempt = attempt - 1,"
	"       first_attempt_at = CASE WHEN attempt = 1 THEN NULL ELSE first_attempt_at END,"
	"       next_attempt_at = now(), updated_at = now()"
	" WHERE lease_owner = $1::uuid AND state = 'sending' AND NOT (id = ANY($2::uuid[]))"
	" RETURNING id",
	2, false,
};

/* unknown effects of targets that can be asked, leased for one interval by
 * pushing next_attempt_at forward. */
static const struct db_stmt st_claim_reconcile = {
	"outbox_claim_reconcile",
	"UPDATE effect_outbox e"
	"   SET next_attempt_at = now() + make_interval(secs => $2::int),"
	"       reconcile_attempts = e.reconcile_attempts + 1, updated_at = now()"
	" WHERE e.id = ANY(ARRAY("
	"   SELECT id FROM effect_outbox"
	"    WHERE state = 'unknown' AND next_attempt_at <= now() AND target = ANY($1::text[])"
	"    ORDER BY next_attempt_at LIMIT $3::int"
	"    FOR UPDATE SKIP LOCKED))"
	" RETURNING e.id, e.client_id, e.idempotency_key, e.effect_type, e.target,"
	"       (SELECT c.name FROM api_clients c WHERE c.id = e.client_id) AS client_name,"
	"       e.provider_key, e.attempt, e.reconcile_attempts,"
	"       (extract(epoch FROM now() - e.first_attempt_at) * 1000)::bigint AS elapsed_ms,"
	/* only the answers since the last send count: a resumed effect that
	 * is unknown again must be found missing twice again */
	"       (SELECT count(*) FROM effect_attempts a WHERE a.effect_id = e.id"
	"           AND a.kind = 'lookup' AND a.classification = 'not_found'"
	"           AND a.id > coalesce((SELECT max(b.id) FROM effect_attempts b"
	"                 WHERE b.effect_id = e.id AND b.kind = 'send'), 0)) AS not_found,"
	"       (SELECT count(*) FROM effect_attempts a WHERE a.effect_id = e.id"
	"           AND a.kind = 'lookup' AND a.classification = 'error') AS errors",
	3, false,
};

/* Right before a send: the database half of the kill switch, and whether
 * the lease is still ours and how long it has left. */
static const struct db_stmt st_presend = {
	"outbox_presend",
	"SELECT (SELECT actions_enabled FROM dispatch_control) AS enabled,"
	"       (state = 'sending' AND lease_owner = $2::uuid) AS owned,"
	"       extract(epoch FROM lease_expires_at - now())::float8 AS lease_left"
	"  FROM effect_outbox WHERE id = $1::uuid",
	2, true,
};

static const struct db_stmt st_renew = {
	"outbox_renew",
	"UPDATE effect_outbox SET lease_expires_at = now() + make_interval(secs => $3::int)"
	" WHERE id = $1::uuid AND state = 'sending' AND lease_owner = $2::uuid"
	" RETURNING 1",
	3, false,
};

/* The send starts: committed before the provider is called, so that a
 * lease that runs out after this makes the effect unknown, not pending. */
static const struct db_stmt st_send_started = {
	"outbox_send_started",
	"UPDATE effect_outbox SET send_started = true"
	" WHERE id = $1::uuid AND state = 'sending' AND lease_owner = $2::uuid"
	"   AND lease_expires_at > now()"
	" RETURNING 1",
	2, false,
};

/* An effect by its id or its dead letter's id, with its run's key. */
static const struct db_stmt st_find = {
	"outbox_find",
	"SELECT e.id, e.client_id, c.name AS client_name, e.idempotency_key, e.state,"
	"       e.effect_type, e.target, e.provider_key, d.id AS dead_letter_id,"
	"       og_ts(e.not_before) AS not_before"
	"  FROM effect_outbox e"
	"  LEFT JOIN dead_letters d ON d.effect_id = e.id"
	"  LEFT JOIN api_clients c ON c.id = e.client_id"
	" WHERE e.id = $1::uuid"
	"    OR e.id = (SELECT effect_id FROM dead_letters WHERE id = $1::uuid)",
	1, false,
};

/* $1 effect  $2 state seen  $3 delivered  $4 provider id */
static const struct db_stmt st_reconcile = {
	"outbox_reconcile",
	"UPDATE effect_outbox"
	"   SET state = CASE WHEN $3::bool THEN 'completed' ELSE 'failed' END,"
	"       provider_id = CASE WHEN $3::bool THEN $4 ELSE provider_id END,"
	"       completed_at = CASE WHEN $3::bool THEN now() END,"
	"       error_class = CASE WHEN $3::bool THEN 'success' ELSE error_class END,"
	"       reason = CASE WHEN $3::bool THEN 'operator_found_delivered'"
	"                ELSE 'operator_found_not_delivered' END,"
	"       updated_at = now()"
	" WHERE id = $1::uuid AND state = $2 AND state IN ('unknown', 'failed')"
	" RETURNING state",
	4, false,
};

/* A fresh retry budget (attempt, first_attempt_at) and the same provider
 * key; due now. The condition is checked again by this statement. */
static const struct db_stmt st_resume = {
	"outbox_resume",
	"UPDATE effect_outbox e"
	"   SET state = 'pending', attempt = 0, first_attempt_at = NULL,"
	"       reconcile_attempts = 0, next_attempt_at = now(),"
	"       not_before = least(not_before, now()), reason = 'operator_resumed',"
	"       updated_at = now()"
	" WHERE e.id = $1::uuid AND e.state = $2 AND " OUTBOX_KNOWN_UNDELIVERED("e")
	" RETURNING e.provider_key, pg_notify('oncegate_outbox', e.id::text)",
	2, false,
};

static const struct db_stmt st_undelivered = {
	"outbox_undelivered",
	"SELECT " OUTBOX_KNOWN_UNDELIVERED("e") " AS yes,"
	"       (SELECT count(*) FROM effect_attempts s WHERE s.effect_id = e.id"
	"           AND s.kind = 'send') AS sends"
	"  FROM effect_outbox e WHERE e.id = $1::uuid",
	1, false,
};

static const struct db_stmt st_reject = {
	"outbox_reject",
	"UPDATE effect_outbox SET state = 'cancelled', reason = 'operator_rejected',"
	"       updated_at = now()"
	" WHERE id = $1::uuid AND state = $2 AND state IN ('pending', 'failed')"
	" RETURNING id",
	2, false,
};

/* The run's effects, locked (after the run), to see what is in flight. */
static const struct db_stmt st_lock_run_effects = {
	"outbox_lock_run_effects",
	"SELECT id, state FROM effect_outbox"
	" WHERE client_id = $1::bigint AND idempotency_key = $2 ORDER BY created_at, id"
	"   FOR UPDATE",
	2, false,
};

static const struct db_stmt st_reject_run = {
	"outbox_reject_run",
	"UPDATE effect_outbox SET state = 'cancelled', reason = 'operator_rejected',"
	"       updated_at = now()"
	" WHERE client_id = $1::bigint AND idempotency_key = $2"
	"   AND state IN ('pending', 'failed')"
	" RETURNING id",
	2, false,
};

static const struct db_stmt st_audit = {
	"outbox_audit",
	"SELECT e.id, e.effect_type, e.target, e.state, e.attempt, e.provider_id, e.provider_key,"
	"       og_ts(e.completed_at) AS completed_at, e.approval_id, e.payload_hash,"
	"       e.payload IS NOT NULL AS payload_kept, e.error_class,"
	"       (SELECT count(*) FROM effect_attempts a WHERE a.effect_id = e.id"
	"           AND a.kind = 'send') AS sends,"
	"       (SELECT d.error_class FROM dead_letters d WHERE d.effect_id = e.id) AS dead_letter"
	"  FROM effect_outbox e WHERE e.client_id = $1 AND e.idempotency_key = $2"
	" ORDER BY e.created_at, e.id",
	2, true,
};

static enum db_rc batch_read(struct db *db, const struct db_stmt *st, const char *const *p,
                             bool with_state, struct outbox_batch *b);

enum db_rc
outbox_expire_leases(struct db *db, int limit, const char *dispatcher, struct outbox_batch *b)
{
	char lim[16];
	const char *p[2] = { lim, dispatcher };

	snprintf(lim, sizeof(lim), "%d", limit);
	return batch_read(db, &st_expire_leases, p, true, b);
}

enum db_rc
outbox_purge_attempts(struct db *db, int days, bool dry_run, long long *count)
{
	char d[16];
	const char *p[1] = { d };
	PGresult *res = NULL;
	enum db_rc rc;

	*count = 0;
	snprintf(d, sizeof(d), "%d", days);
	rc = db_exec(db, dry_run ? &st_purge_attempts_count : &st_purge_attempts, p, &res);
	if (rc != DB_OK)
		return rc;
	*count = db_get_ll(res, 0, "n");
	PQclear(res);
	return DB_OK;
}

/* The effects of the purged runs (ledger_purge) lose their payload. */
static const struct db_stmt st_purge_payloads = {
	"outbox_purge_payloads",
	"UPDATE effect_outbox o SET payload = NULL"
	"  FROM unnest($1::bigint[], $2::text[]) AS k(client_id, idempotency_key)"
	" WHERE o.client_id = k.client_id AND o.idempotency_key = k.idempotency_key"
	"   AND o.payload IS NOT NULL RETURNING o.id",
	2, false,
};

/* Due pending effects held back by the kill switch and not yet marked:
 * marked once each, whoever else looks at once (the claim clears it). */
static const struct db_stmt st_hold = {
	"outbox_hold",
	"UPDATE effect_outbox SET held_at = now()"
	" WHERE id = ANY(ARRAY("
	"   SELECT id FROM effect_outbox"
	"    WHERE state = 'pending' AND next_attempt_at <= now() AND not_before <= now()"
	"      AND held_at IS NULL AND ($1::uuid IS NULL OR id = $1::uuid)"
	"    LIMIT $2::int FOR UPDATE SKIP LOCKED))"
	"   AND held_at IS NULL"
	" RETURNING 1",
	2, false,
};

enum db_rc
outbox_hold(struct db *db, const char *effect_id, int limit, long long *marked)
{
	char lim[16];
	const char *p[2] = { effect_id, lim };

	snprintf(lim, sizeof(lim), "%d", limit);
	return db_exec_count(db, &st_hold, p, marked);
}

/* --- the dispatcher's claims and leases ------------------------------------ */

void
outbox_settle_call(struct outbox_settle_call *o, const struct outbox_settle *in,
                   struct db_call *call)
{
	snprintf(o->delay, sizeof(o->delay), "%lld", in->delay_ms > 0 ? in->delay_ms : 0);
	snprintf(o->dur, sizeof(o->dur), "%lld", in->duration_ms);
	snprintf(o->status, sizeof(o->status), "%d", in->status);
	snprintf(o->recon, sizeof(o->recon), "%d", in->expect_reconcile);
	{
		const char *const p[15] = {
			in->id, outbox_state_name(in->expect), in->owner, outbox_state_name(in->to),
			in->provider_id, in->error_class, in->reason, o->delay, in->kind, o->dur,
			in->dispatcher, in->attempt_class, in->status ? o->status : NULL,
			in->evidence != NULL ? in->evidence : "{}",
			in->expect_reconcile >= 0 ? o->recon : NULL,
		};

		memcpy(o->params, p, sizeof(p));
	}
	call->stmt = &st_settle;
	call->params = o->params;
}

/* A compare-and-set run as a db_call: one row, or not (any more) ours. */
static enum og_rc
one_row_result(const struct db_call *call)
{
	if (call->rc != DB_OK)
		return og_rc_of(call->rc);
	return PQntuples(call->res) == 1 ? OG_OK : OG_LEASE_LOST;
}

enum og_rc
outbox_settle_result(const struct db_call *call)
{
	return one_row_result(call);
}

/* A PostgreSQL array literal of words that need no quoting (target names
 * are [a-z0-9_], effect ids are uuids); empty words are left out. NULL when
 * memory ran out. */
#define WORDS_MAX ((size_t)1 << 24)

static char *
words_literal(const char *const *words, int n)
{
	struct buf b;
	bool failed;
	int i;

	buf_init(&b, WORDS_MAX);
	failed = buf_puts(&b, "{") != 0;
	for (i = 0; i < n && !failed; i++)
		if (words[i] != NULL && words[i][0] != '\0' &&
		    buf_printf(&b, "%s%s", b.len > 1 ? "," : "", words[i]) != 0)
			failed = true;
	if (failed || buf_puts(&b, "}") != 0) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

/* The owned text members of a claimed job and of a found effect, each by
 * the column it is read from (db_row_get copies them, db_row_clear frees
 * them). */
#define JOB_TEXT(m, col) { col, offsetof(struct outbox_job, m), DB_COL_TEXT }
static const struct db_col job_texts[] = {
	JOB_TEXT(key, "idempotency_key"), JOB_TEXT(type, "effect_type"),
	JOB_TEXT(target, "target"), JOB_TEXT(provider_key, "provider_key"),
	JOB_TEXT(payload, "payload"), JOB_TEXT(payload_hash, "payload_hash"),
	JOB_TEXT(run_output, "run_output"), JOB_TEXT(run_contract, "run_contract"),
};
#define FOUND_TEXT(m, col) { col, offsetof(struct outbox_found, m), DB_COL_TEXT }
static const struct db_col found_texts[] = {
	FOUND_TEXT(client_name, "client_name"), FOUND_TEXT(key, "idempotency_key"),
	FOUND_TEXT(state, "state"), FOUND_TEXT(type, "effect_type"),
	FOUND_TEXT(target, "target"), FOUND_TEXT(provider_key, "provider_key"),
	FOUND_TEXT(dead_letter_id, "dead_letter_id"), FOUND_TEXT(not_before, "not_before"),
};

/* Row i of a claim (or of expired leases) as a job; a column the
 * statement does not return stays empty. OG_ERROR: out of memory (the
 * job's texts freed). */
static enum og_rc
job_from_row(const PGresult *res, int i, struct outbox_job *j)
{
	memset(j, 0, sizeof(*j));
	snprintf(j->id, sizeof(j->id), "%s", db_get(res, i, "id"));
	j->client_id = db_get_ll(res, i, "client_id");
	if (db_get(res, i, "client_name") != NULL)
		snprintf(j->client, sizeof(j->client), "%s", db_get(res, i, "client_name"));
	else
		snprintf(j->client, sizeof(j->client), "%lld", j->client_id);
	j->attempt = (int)db_get_ll(res, i, "attempt");
	j->elapsed_ms = db_get_ll(res, i, "elapsed_ms");
	if (PQfnumber(res, "reconcile_attempts") >= 0) {
		j->reconcile_attempts = (int)db_get_ll(res, i, "reconcile_attempts");
		j->not_found = db_get_ll(res, i, "not_found");
		j->errors = db_get_ll(res, i, "errors");
	}
	return db_row_get(res, i, job_texts, DB_NCOLS(job_texts), j);
}

void
outbox_batch_job(struct outbox_batch *b, int i, struct outbox_job *j)
{
	struct outbox_job *src = &b->jobs[i];

	*j = *src;
	memset(src, 0, sizeof(*src));
	memcpy(src->id, j->id, sizeof(src->id));
}

void
outbox_job_clear(struct outbox_job *j)
{
	db_row_clear(job_texts, DB_NCOLS(job_texts), j, sizeof(*j));
}

void
outbox_batch_clear(struct outbox_batch *b)
{
	int i;

	for (i = 0; b->jobs != NULL && i < b->n; i++)
		outbox_job_clear(&b->jobs[i]);
	free(b->jobs);
	free(b->states);
	memset(b, 0, sizeof(*b));
}

/* Runs st and reads its rows into b; with_state: each row's state too. */
static enum db_rc
batch_read(struct db *db, const struct db_stmt *st, const char *const *p, bool with_state,
           struct outbox_batch *b)
{
	PGresult *res = NULL;
	enum db_rc rc;
	int i, n;

	memset(b, 0, sizeof(*b));
	if ((rc = db_exec(db, st, p, &res)) != DB_OK)
		return rc;
	n = PQntuples(res);
	if (n > 0) {
		b->jobs = calloc((size_t)n, sizeof(*b->jobs));
		b->states = with_state ? calloc((size_t)n, sizeof(*b->states)) : NULL;
		if (b->jobs == NULL || (with_state && b->states == NULL)) {
			free(b->jobs);
			free(b->states);
			b->jobs = NULL;
			b->states = NULL;
			PQclear(res);
			return DB_ERROR;
		}
	}
	for (i = 0; i < n; i++) {
		if (job_from_row(res, i, &b->jobs[i]) != OG_OK) {
			b->n = i;
			outbox_batch_clear(b);
			PQclear(res);
			return DB_ERROR;
		}
		if (!with_state)
			continue;
		b->states[i] = (enum effect_state)outbox_state_parse(db_get(res, i, "state"));
		if (db_get(res, i, "client_name") == NULL)
			b->jobs[i].client[0] = '\0';
	}
	b->n = n;
	PQclear(res);
	return DB_OK;
}

static enum og_rc
batch_exec(struct db *db, const struct db_stmt *st, const char *const *p, struct outbox_batch *b)
{
	return og_rc_of(batch_read(db, st, p, false, b));
}

enum og_rc
outbox_claim(struct db *db, const char *owner, int batch, int lease_s, struct outbox_batch *b)
{
	char n[16], lease[16];
	const char *p[3] = { owner, n, lease };

	snprintf(n, sizeof(n), "%d", batch);
	snprintf(lease, sizeof(lease), "%d", lease_s);
	return batch_exec(db, &st_claim, p, b);
}

enum og_rc
outbox_claim_reconcile(struct db *db, const char *const *targets, int ntargets, int interval_s,
                       int limit, struct outbox_batch *b)
{
	char *list = words_literal(targets, ntargets);
	char interval[16], lim[16];
	const char *p[3] = { list, interval, lim };
	enum og_rc rc;

	memset(b, 0, sizeof(*b));
	if (list == NULL)
		return OG_ERROR;
	if (strcmp(list, "{}") == 0) {
		free(list);
		return OG_OK;
	}
	snprintf(interval, sizeof(interval), "%d", interval_s);
	snprintf(lim, sizeof(lim), "%d", limit);
	rc = batch_exec(db, &st_claim_reconcile, p, b);
	free(list);
	return rc;
}

enum og_rc
outbox_renew_batch(struct db *db, const struct outbox_batch *b, int from, const char *owner,
                   int lease_s)
{
	const char **ids;
	char *list, lease[16];
	const char *p[3];
	enum db_rc rc;
	int i;

	if (from >= b->n)
		return OG_OK;
	if ((ids = calloc((size_t)(b->n - from), sizeof(*ids))) == NULL)
		return OG_ERROR;
	for (i = from; i < b->n; i++)
		ids[i - from] = b->jobs[i].id;
	list = words_literal(ids, b->n - from);
	free(ids);
	if (list == NULL)
		return OG_ERROR;
	snprintf(lease, sizeof(lease), "%d", lease_s);
	p[0] = list;
	p[1] = owner;
	p[2] = lease;
	rc = db_exec_void(db, &st_renew_batch, p);
	free(list);
	return og_rc_of(rc);
}

enum og_rc
outbox_release(struct db *db, const char *id, const char *owner, int delay_s)
{
	char d[16];
	const char *p[3] = { id, owner, d };

	snprintf(d, sizeof(d), "%d", delay_s);
	return og_exec_one(db, &st_release, p, OG_LEASE_LOST, NULL);
}

enum og_rc
outbox_release_unsent(struct db *db, const char *owner, const char *const *busy, int nbusy,
                      int *released)
{
	char *list = words_literal(busy, nbusy);
	const char *p[2] = { owner, list };
	PGresult *res = NULL;
	enum db_rc rc;

	*released = 0;
	if (list == NULL)
		return OG_ERROR;
	rc = db_exec(db, &st_release_unsent, p, &res);
	free(list);
	if (rc != DB_OK)
		return og_rc_of(rc);
	*released = PQntuples(res);
	PQclear(res);
	return OG_OK;
}

enum og_rc
outbox_presend(struct db *db, const char *id, const char *owner, struct outbox_presend *ps)
{
	const char *p[2] = { id, owner };
	PGresult *res = NULL;
	const char *v;
	enum og_rc rc;

	memset(ps, 0, sizeof(*ps));
	ps->lease_left = -1;
	if ((rc = og_exec_one(db, &st_presend, p, OG_NOT_FOUND, &res)) != OG_OK)
		return rc;
	ps->enabled = db_get_bool(res, 0, "enabled");
	ps->owned = db_get_bool(res, 0, "owned");
	if ((v = db_get(res, 0, "lease_left")) != NULL)
		ps->lease_left = atof(v);
	PQclear(res);
	return OG_OK;
}

enum og_rc
outbox_renew(struct db *db, const char *id, const char *owner, int lease_s)
{
	char secs[16];
	const char *p[3] = { id, owner, secs };

	snprintf(secs, sizeof(secs), "%d", lease_s);
	return og_exec_one(db, &st_renew, p, OG_LEASE_LOST, NULL);
}

enum og_rc
outbox_send_started(struct db *db, const char *id, const char *owner)
{
	const char *p[2] = { id, owner };

	return og_exec_one(db, &st_send_started, p, OG_LEASE_LOST, NULL);
}

void
outbox_send_started_call(const char *const p[2], struct db_call *call)
{
	call->stmt = &st_send_started;
	call->params = p;
}

enum og_rc
outbox_send_started_result(const struct db_call *call)
{
	return one_row_result(call);
}

/* --- the operator's repairs ------------------------------------------------- */

enum og_rc
outbox_find(struct db *db, const char *id, struct outbox_found *f)
{
	const char *p[1] = { id };
	PGresult *res = NULL;
	enum og_rc rc;

	memset(f, 0, sizeof(*f));
	if ((rc = og_exec_one(db, &st_find, p, OG_NOT_FOUND, &res)) != OG_OK)
		return rc;
	snprintf(f->id, sizeof(f->id), "%s", db_get(res, 0, "id"));
	f->client_id = db_get_ll(res, 0, "client_id");
	rc = db_row_get(res, 0, found_texts, DB_NCOLS(found_texts), f);
	PQclear(res);
	if (rc != OG_OK || f->key == NULL || f->state == NULL) {
		outbox_found_clear(f);
		return OG_ERROR;
	}
	return OG_OK;
}

void
outbox_found_clear(struct outbox_found *f)
{
	db_row_clear(found_texts, DB_NCOLS(found_texts), f, sizeof(*f));
}

enum og_rc
outbox_reconcile(struct db *db, const char *id, const char *seen, bool delivered,
                 const char *provider_id, const char **to)
{
	const char *p[4] = { id, seen, delivered ? "true" : "false", provider_id };
	enum og_rc rc = og_exec_one(db, &st_reconcile, p, OG_CHANGED, NULL);

	*to = delivered ? "completed" : "failed";
	return rc;
}

enum og_rc
outbox_resume(struct db *db, const char *id, const char *seen)
{
	const char *p[2] = { id, seen };

	return og_exec_one(db, &st_resume, p, OG_CHANGED, NULL);
}

enum og_rc
outbox_undelivered(struct db *db, const char *id, bool *yes, long long *sends)
{
	const char *p[1] = { id };
	PGresult *res = NULL;
	enum og_rc rc;

	*yes = false;
	*sends = 0;
	if ((rc = og_exec_one(db, &st_undelivered, p, OG_NOT_FOUND, &res)) != OG_OK)
		return rc;
	*yes = db_get_bool(res, 0, "yes");
	*sends = db_get_ll(res, 0, "sends");
	PQclear(res);
	return OG_OK;
}

enum og_rc
outbox_reject(struct db *db, const char *id, const char *seen)
{
	const char *p[2] = { id, seen };

	return og_exec_one(db, &st_reject, p, OG_CHANGED, NULL);
}

enum og_rc
outbox_lock_run_effects(struct db *db, long long client_id, const char *key, int *sending,
                        int *unknown)
{
	PGresult *res = NULL;
	enum og_rc rc;
	int i;

	*sending = *unknown = 0;
	if ((rc = og_exec_key(db, &st_lock_run_effects, client_id, key, &res)) != OG_OK)
		return rc;
	for (i = 0; i < PQntuples(res); i++) {
		*sending += strcmp(db_get(res, i, "state"), "sending") == 0;
		*unknown += strcmp(db_get(res, i, "state"), "unknown") == 0;
	}
	PQclear(res);
	return OG_OK;
}

enum og_rc
outbox_reject_run(struct db *db, long long client_id, const char *key, json_t **ids)
{
	return og_exec_key_ids(db, &st_reject_run, client_id, key, ids);
}

#define AU(type, f) DB_##type(struct outbox_audit_effect, f)
static const struct db_col audit_cols[] = {
	AU(TEXT, id), AU(TEXT, effect_type), AU(TEXT, target), AU(TEXT, state),
	AU(TEXT, provider_id), AU(TEXT, provider_key), AU(TEXT, completed_at),
	AU(TEXT, approval_id), AU(TEXT, payload_hash), AU(TEXT, dead_letter), AU(INT, sends),
	AU(BOOL, payload_kept),
};
#undef AU

OG_KEY_LIST(outbox_audit, outbox_audit_effects, &st_audit, audit_cols);
DB_LIST_CLEAR(outbox_audit_effects_clear, outbox_audit_effects, audit_cols);

enum db_rc
outbox_purge_payloads(struct db *db, const char *clients, const char *keys, long long *count)
{
	const char *p[2] = { clients, keys };

	return db_exec_count(db, &st_purge_payloads, p, count);
}

int
outbox_payload_hash(const json_t *v, char hash[OUTBOX_HASH_LEN], char **text)
{
	char *dumped = canon_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	char *canon = NULL;
	size_t len = 0;

	_Static_assert(OUTBOX_HASH_LEN == CANON_HASH_LEN, "one hash length");
	if (text != NULL)
		*text = NULL;
	if (dumped == NULL ||
	    canon_json(CANON_AS_WRITTEN, dumped, strlen(dumped), &canon, &len) != CANON_OK) {
		free(dumped);
		free(canon);
		return -1;
	}
	free(dumped);
	canon_hash(canon, len, hash);
	if (text != NULL)
		*text = canon;
	else
		free(canon);
	return 0;
}

int
outbox_callback_effect(struct outbox_effect *e, long long client_id, const char *key,
                       const char *url, const char *decision, const char *decided_by,
                       const char *approval_id, char hash[OUTBOX_HASH_LEN], char **payload)
{
	return outbox_callback_feedback(e, client_id, key, url, decision, decided_by, approval_id,
	                                NULL, hash, payload);
}

int
outbox_callback_feedback(struct outbox_effect *e, long long client_id, const char *key,
                         const char *url, const char *decision, const char *decided_by,
                         const char *approval_id, const char *feedback,
                         char hash[OUTBOX_HASH_LEN], char **payload)
{
	json_t *cb = json_pack("{s:s, s:s, s:s, s:s*, s:s*, s:s*}", "url", url, "key", key,
	                       "decision", decision, "decided_by", decided_by, "approval_id",
	                       approval_id, "feedback", feedback);
	int rc = cb != NULL ? outbox_payload_hash(cb, hash, payload) : -1;

	json_decref(cb);
	if (rc != 0) {
		*payload = NULL;
		return -1;
	}
	memset(e, 0, sizeof(*e));
	e->client_id = client_id;
	e->key = key;
	e->type = "decision.callback";
	e->target = "callback";
	e->payload = *payload;
	e->payload_hash = hash;
	e->approval_id = approval_id;
	return 0;
}

/* ---- notifications: the run's next slot, a claimed notice that is moot -- */

static const struct db_stmt st_next_slot = {
	"outbox_next_slot",
	"SELECT coalesce(max(slot), 0) + 1 AS slot FROM effect_outbox"
	" WHERE client_id = $1::bigint AND idempotency_key = $2 AND effect_type = $3",
	3, true,
};

static const struct db_stmt st_cancel_claimed = {
	"outbox_cancel_claimed",
	"UPDATE effect_outbox"
	"   SET state = 'cancelled', reason = $3, lease_owner = NULL, lease_expires_at = NULL,"
	"       send_started = NULL, updated_at = now()"
	" WHERE id = $1::uuid AND state = 'sending' AND lease_owner = $2::uuid"
	" RETURNING id",
	3, false,
};

enum og_rc
outbox_next_slot(struct db *db, long long client_id, const char *key, const char *type,
                 int *slot)
{
	char client[24];
	const char *p[3] = { client, key, type };
	PGresult *res = NULL;
	enum db_rc rc;

	*slot = 0;
	snprintf(client, sizeof(client), "%lld", client_id);
	if ((rc = db_exec(db, &st_next_slot, p, &res)) != DB_OK)
		return rc == DB_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
	*slot = (int)db_get_ll(res, 0, "slot");
	PQclear(res);
	return *slot > 0 ? OG_OK : OG_ERROR;
}

enum og_rc
outbox_cancel_claimed(struct db *db, const char *id, const char *lease_owner, const char *reason)
{
	const char *p[3] = { id, lease_owner, reason };
	PGresult *res = NULL;
	enum og_rc orc = OG_OK;
	enum db_rc rc;

	if ((rc = db_exec(db, &st_cancel_claimed, p, &res)) != DB_OK)
		orc = rc == DB_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
	else if (PQntuples(res) != 1)
		orc = OG_LEASE_LOST;
	PQclear(res);
	return orc;
}

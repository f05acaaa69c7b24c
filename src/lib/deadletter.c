/*
 * deadletter.c — write, list, show, close and purge dead letters; see
 * deadletter.h. The one file with SQL text for dead_letters.
 */
#include <stdio.h>
#include <string.h>

#include "deadletter.h"
#include "outbox.h"

/* The snapshot: the run and the effect as they are now, and every attempt. */
static const struct db_stmt st_open = {
	"deadletter_open",
	"INSERT INTO dead_letters AS d (effect_id, client_id, idempotency_key, component,"
	"    error_class, reason, evidence, next_action, retention_until, owner, exhaustions)"
	"SELECT e.id, e.client_id, e.idempotency_key, 'dispatcher', $2, $3,"
	"  jsonb_build_object("
	"    'event_id', coalesce(r.event_id, r.correlation_id),"
	"    'correlation_id', r.correlation_id,"
	"    'operation', e.effect_type, 'target', e.target,"
	"    'workflow_version', r.workflow_version, 'contract', r.contract,"
	"    'contract_hash', r.contract_hash, 'payload_hash', e.payload_hash,"
	"    'payload_ref', 'effect_outbox/' || e.id || '/payload',"
	"    'idempotency_key', e.idempotency_key, 'provider_key', e.provider_key,"
	"    'ledger_state', r.state, 'effect_state', e.state, 'attempt', e.attempt,"
	"    'max_attempts', $5::int, 'classification', e.error_class, 'reason', e.reason,"
	"    'first_attempt_at', og_ts(e.first_attempt_at),"
	"    'attempts', (SELECT coalesce(jsonb_agg(jsonb_build_object("
	"         'attempt', a.attempt, 'kind', a.kind, 'started_at', og_ts(a.started_at),"
	"         'duration_ms', a.duration_ms, 'dispatcher', a.dispatcher,"
	"         'classification', a.classification, 'reason', a.reason,"
	"         'status', a.status, 'provider_id', a.provider_id, 'evidence', a.evidence)"
	"         ORDER BY a.id), '[]'::jsonb)"
	"       FROM effect_attempts a WHERE a.effect_id = e.id)),"
	"  $4, now() + make_interval(days => $6::int),"
	/* who answers for it until an operator takes it: the workflow's client */
	"  (SELECT 'client:' || c.name FROM api_clients c WHERE c.id = e.client_id),"
	"  ($2 = 'exhausted')::int"
	"  FROM effect_outbox e"
	"  JOIN workflow_runs r ON r.client_id = e.client_id"
	"   AND r.idempotency_key = e.idempotency_key"
	" WHERE e.id = $1::uuid"
	/* one letter per effect; a budget spent again (after a resume) counts
	 * again */
	" ON CONFLICT (effect_id) DO UPDATE SET exhaustions = d.exhaustions + 1"
	"   WHERE EXCLUDED.error_class = 'exhausted'"
	" RETURNING id, xmax = 0 AS written",
	6, false,
};

void
deadletter_open_call(struct deadletter_open_call *d, const struct deadletter_open *in,
                     struct db_call *call)
{
	const char *const p[6] = { in->effect_id, in->error_class, in->reason, in->next_action,
		                   d->maxa, d->days };

	snprintf(d->maxa, sizeof(d->maxa), "%d", in->max_attempts);
	snprintf(d->days, sizeof(d->days), "%d", in->retention_days);
	memcpy(d->params, p, sizeof(p));
	call->stmt = &st_open;
	call->params = d->params;
}

enum db_rc
deadletter_open(struct db *db, const struct deadletter_open *in, bool *written)
{
	struct deadletter_open_call d;
	struct db_call call = { 0 };
	PGresult *res = NULL;
	enum db_rc rc;

	deadletter_open_call(&d, in, &call);
	rc = db_exec(db, call.stmt, call.params, &res);
	*written = rc == DB_OK && PQntuples(res) == 1 && db_get_bool(res, 0, "written");
	PQclear(res);
	return rc;
}

/* One entry of a letter's resolution history. */
#define DEADLETTER_HISTORY(what)                                                         \
	"jsonb_build_array(jsonb_build_object('resolution', " what ", 'at', og_ts(now()),"      \
	" 'by', session_user))"

/* $1 effect ids (uuid[]) $2 resolution; resolved by the session's role.
 * Every resolution is added to the letter's history; a letter a replay
 * answered stays `replayed` (what was done about it), whatever is learnt
 * about the original effect later. */
static const struct db_stmt st_resolve = {
	"deadletter_resolve",
	"UPDATE dead_letters"
	"   SET resolution = CASE WHEN resolution = 'replayed' THEN resolution ELSE $2 END,"
	"       resolved_at = CASE WHEN resolution = 'replayed' THEN resolved_at ELSE now() END,"
	"       resolved_by = CASE WHEN resolution = 'replayed' THEN resolved_by"
	"                          ELSE session_user END,"
	"       resolutions = resolutions || " DEADLETTER_HISTORY("$2::text")
	" WHERE effect_id = ANY($1::uuid[])"
	" RETURNING id",
	2, false,
};

/* $1 a letter's id or its effect's id, $2 the person who owns it now;
 * the owner it had (NULL: its client's by default). */
static const struct db_stmt st_assign = {
	"deadletter_assign",
	"UPDATE dead_letters d SET owner = $2"
	"  FROM (SELECT id, owner FROM dead_letters"
	"         WHERE id = $1::uuid OR effect_id = $1::uuid FOR UPDATE) was"
	" WHERE d.id = was.id"
	" RETURNING d.id, d.effect_id, d.client_id, d.idempotency_key, was.owner AS was",
	2, false,
};

static const struct db_stmt st_replayed = {
	"deadletter_replayed",
	"UPDATE dead_letters d SET replay_count = d.replay_count + 1, replayed_as = $3,"
	"       resolution = CASE WHEN " DEADLETTER_OPEN("d", "e") " THEN 'replayed'"
	"                         ELSE d.resolution END,"
	"       resolved_at = CASE WHEN " DEADLETTER_OPEN("d", "e") " THEN now()"
	"                          ELSE d.resolved_at END,"
	"       resolved_by = CASE WHEN " DEADLETTER_OPEN("d", "e") " THEN session_user"
	"                          ELSE d.resolved_by END,"
	"       resolutions = d.resolutions || " DEADLETTER_HISTORY("'replayed'")
	"  FROM effect_outbox e"
	" WHERE e.id = d.effect_id AND d.client_id = $1::bigint AND d.idempotency_key = $2"
	" RETURNING d.id",
	3, false,
};

/* Letters past their retention deadline whose content is still there. */
#define PURGEABLE                                                                    \
	"SELECT id FROM dead_letters WHERE retention_until < now() AND purged_at IS NULL"

static const struct db_stmt st_purge_count = {
	"deadletter_purge_count",
	"SELECT count(*) AS n FROM (" PURGEABLE ") AS y",
	0, true,
};

/* A letter keeps its ids, hashes, states, class and resolution; its
 * snapshot loses any payload and the answers in its attempt history. */
static const struct db_stmt st_purge = {
	"deadletter_purge",
	"WITH dl AS (UPDATE dead_letters d"
	"          SET purged_at = now(),"
	"              evidence = CASE WHEN jsonb_typeof(d.evidence->'attempts') = 'array'"
	"                THEN jsonb_set(d.evidence - ARRAY['payload', 'payload_snapshot'],"
	"                  '{attempts}', coalesce((SELECT jsonb_agg(CASE"
	"                      WHEN jsonb_typeof(x->'evidence') = 'object' THEN jsonb_set(x,"
	"                        '{evidence}', ((x->'evidence') - " OUTBOX_PURGE_EVIDENCE_KEYS ")"
	"                          || '{\"purged\": true}'::jsonb)"
	"                      ELSE x END ORDER BY i)"
	"                    FROM jsonb_array_elements(d.evidence->'attempts')"
	"                         WITH ORDINALITY AS t(x, i)), '[]'::jsonb))"
	"                ELSE d.evidence - ARRAY['payload', 'payload_snapshot'] END"
	"         WHERE d.id IN (" PURGEABLE ") RETURNING d.id)"
	"SELECT count(*) AS n FROM dl",
	0, false,
};

static const struct db_stmt st_list = {
	"deadletter_list",
	"SELECT d.id, d.effect_id, c.name AS client, d.idempotency_key, e.effect_type,"
	"       e.target, e.provider_key, d.error_class, d.reason, og_ts(d.created_at) AS created_at,"
	"       floor(extract(epoch FROM now() - d.created_at))::bigint AS age_seconds,"
	"       e.state AS effect_state, d.resolution, d.resolved_by,"
	"       og_ts(d.resolved_at) AS resolved_at, d.replay_count,"
	"       og_ts(d.retention_until) AS retention_until,"
	"       " DEADLETTER_OPEN("d", "e") " AS open"
	"  FROM dead_letters d"
	"  JOIN effect_outbox e ON e.id = d.effect_id"
	"  LEFT JOIN api_clients c ON c.id = d.client_id"
	" WHERE ($1::timestamptz IS NULL OR d.created_at >= $1::timestamptz)"
	"   AND ($2::bigint IS NULL OR d.created_at >= now() - make_interval(secs => $2::bigint))"
	"   AND ($3::text IS NULL OR d.error_class = $3)"
	"   AND ($4::text IS NULL OR e.target = $4)"
	"   AND ($5::text IS NULL OR " DEADLETTER_OPEN("d", "e") " = ($5 = 'open'))"
	" ORDER BY d.created_at, d.id"
	" LIMIT $6::int",
	6, true,
};

/* The whole record as one JSON document: the letter as written, and what
 * happened since (the effect now, later attempts, operators' actions). */
static const struct db_stmt st_show = {
	"deadletter_show",
	"SELECT jsonb_build_object("
	"  'dead_letter_id', d.id, 'effect_id', d.effect_id,"
	"  'state', CASE WHEN " DEADLETTER_OPEN("d", "e") " THEN 'open' ELSE 'resolved' END,"
	"  'client', c.name, 'key', d.idempotency_key,"
	"  'created_at', og_ts(d.created_at),"
	"  'age_seconds', floor(extract(epoch FROM now() - d.created_at))::bigint,"
	"  'event_id', d.evidence->'event_id', 'correlation_id', d.evidence->'correlation_id',"
	"  'workflow_version', d.evidence->'workflow_version',"
	"  'contract', d.evidence->'contract', 'contract_hash', d.evidence->'contract_hash',"
	"  'payload_hash', d.evidence->'payload_hash', 'payload_ref', d.evidence->'payload_ref',"
	"  'payload_kept', e.payload IS NOT NULL,"
	"  'component', d.component, 'error_class', d.error_class, 'reason', d.reason,"
	"  'provider_key', e.provider_key,"
	"  'ledger_state', d.evidence->'ledger_state',"
	"  'owner', coalesce(d.owner, 'client:' || c.name),"
	"  'next_action', CASE"
	"     WHEN NOT " DEADLETTER_OPEN("d", "e") " THEN 'none: resolved'"
	"     WHEN e.state = 'unknown' THEN 'find out whether the provider acted, then"
	" oncegatectl reconcile EFFECT --delivered --provider-id ID or --not-delivered'"
	"     WHEN " OUTBOX_KNOWN_UNDELIVERED("e") " THEN 'known not delivered:"
	" oncegatectl resume EFFECT (same key) or oncegatectl reject EFFECT'"
	"     ELSE d.next_action END,"
	"  'next_action_when_written', d.next_action,"
	"  'retention_until', og_ts(d.retention_until), 'replay_count', d.replay_count,"
	"  'replayed_as', d.replayed_as,"
	"  'resolution', d.resolution, 'resolved_at', og_ts(d.resolved_at),"
	"  'resolved_by', d.resolved_by, 'resolutions', d.resolutions,"
	"  'approved_by', CASE r.decision WHEN 'approve' THEN r.decided_by"
	"                 WHEN 'auto' THEN 'gate:auto' END,"
	"  'decision', jsonb_build_object('decision', r.decision, 'decided_by', r.decided_by,"
	"      'decided_at', og_ts(r.decided_at)),"
	"  'evidence', d.evidence,"
	"  'effect', jsonb_build_object('state', e.state, 'type', e.effect_type,"
	"      'target', e.target, 'provider_key', e.provider_key, 'provider_id', e.provider_id,"
	"      'attempt', e.attempt, 'error_class', e.error_class, 'reason', e.reason,"
	"      'known_undelivered', " OUTBOX_KNOWN_UNDELIVERED("e") ","
	"      'updated_at', og_ts(e.updated_at), 'completed_at', og_ts(e.completed_at)),"
	"  'run', jsonb_build_object('state', r.state, 'version', r.version,"
	"      'error_class', r.error_class, 'reason', r.reason,"
	"      'workflow_version', r.workflow_version, 'correlation_id', r.correlation_id),"
	"  'attempts', (SELECT coalesce(jsonb_agg(jsonb_build_object("
	"       'id', a.id, 'attempt', a.attempt, 'kind', a.kind,"
	"       'started_at', og_ts(a.started_at), 'duration_ms', a.duration_ms,"
	"       'dispatcher', a.dispatcher, 'classification', a.classification,"
	"       'reason', a.reason, 'status', a.status, 'provider_id', a.provider_id,"
	"       'evidence', a.evidence) ORDER BY a.id), '[]'::jsonb)"
	"     FROM effect_attempts a WHERE a.effect_id = e.id),"
	"  'operator_actions', (SELECT coalesce(jsonb_agg(jsonb_build_object("
	"       'id', o.id, 'ts', og_ts(o.ts), 'operator', o.operator, 'action', o.action,"
	"       'reason', o.reason, 'details', o.details) ORDER BY o.id), '[]'::jsonb)"
	"     FROM operator_actions o WHERE o.effect_id = e.id),"
	"  'envelope', jsonb_build_object('event_id', coalesce(r.event_id, r.correlation_id),"
	"      'correlation_id', r.correlation_id, 'operation', e.effect_type,"
	"      'idempotency_key', e.provider_key, 'payload_hash', e.payload_hash,"
	"      'attempt', e.attempt,"
	"      'max_attempts', coalesce($2::int, (d.evidence->>'max_attempts')::int),"
	"      'classification', e.error_class,"
	"      'next_attempt_at', CASE WHEN e.state IN ('pending', 'unknown')"
	"          THEN og_ts(e.next_attempt_at) END,"
	"      'workflow_version', r.workflow_version, 'status', e.state)"
	")::text AS doc, e.target"
	"  FROM dead_letters d"
	"  JOIN effect_outbox e ON e.id = d.effect_id"
	"  JOIN workflow_runs r ON r.client_id = e.client_id"
	"   AND r.idempotency_key = e.idempotency_key"
	"  LEFT JOIN api_clients c ON c.id = d.client_id"
	" WHERE d.id = $1::uuid OR d.effect_id = $1::uuid",
	2, true,
};

/* The target of a dead letter, to look up its max_attempts first. */
static const struct db_stmt st_target = {
	"deadletter_target",
	"SELECT e.target FROM dead_letters d JOIN effect_outbox e ON e.id = d.effect_id"
	" WHERE d.id = $1::uuid OR d.effect_id = $1::uuid",
	1, true,
};

enum db_rc
deadletter_resolve(struct db *db, const char *ids, const char *resolution)
{
	const char *p[2] = { ids, resolution };

	return db_exec_void(db, &st_resolve, p);
}

enum og_rc
deadletter_assign(struct db *db, const char *id, const char *owner, struct deadletter_assigned *out)
{
	const char *p[2] = { id, owner };
	PGresult *res = NULL;
	enum db_rc rc;
	const char *v;

	memset(out, 0, sizeof(*out));
	if ((rc = db_exec(db, &st_assign, p, &res)) != DB_OK)
		/* class 22: not a uuid, so no letter's */
		return rc == DB_ERROR && strncmp(db_sqlstate(db), "22", 2) == 0 ? OG_NOT_FOUND
		                                                               : og_rc_of(rc);
	if (PQntuples(res) != 1) {
		PQclear(res);
		return OG_NOT_FOUND;
	}
	snprintf(out->id, sizeof(out->id), "%s", db_get(res, 0, "id"));
	snprintf(out->effect_id, sizeof(out->effect_id), "%s", db_get(res, 0, "effect_id"));
	out->client_id = db_get_ll(res, 0, "client_id");
	snprintf(out->key, sizeof(out->key), "%s", db_get(res, 0, "idempotency_key"));
	v = db_get(res, 0, "was");
	snprintf(out->was, sizeof(out->was), "%s", v != NULL ? v : "");
	PQclear(res);
	return OG_OK;
}

enum db_rc
deadletter_replayed(struct db *db, long long client_id, const char *key, const char *new_key,
                    int *count)
{
	char client[24];
	const char *p[3] = { client, key, new_key };
	PGresult *res = NULL;
	enum db_rc rc;

	snprintf(client, sizeof(client), "%lld", client_id);
	rc = db_exec(db, &st_replayed, p, &res);
	*count = rc == DB_OK ? PQntuples(res) : 0;
	PQclear(res);
	return rc;
}

enum db_rc
deadletter_purge(struct db *db, bool dry_run, long long *count)
{
	PGresult *res = NULL;
	enum db_rc rc;

	*count = 0;
	if ((rc = db_exec(db, dry_run ? &st_purge_count : &st_purge, NULL, &res)) != DB_OK)
		return rc;
	*count = db_get_ll(res, 0, "n");
	PQclear(res);
	return DB_OK;
}

enum og_rc
deadletter_list(struct db *db, const struct deadletter_filter *f, json_t **out)
{
	char secs[24], limit[16];
	const char *p[6] = {
		f->since_ts, NULL, f->error_class, f->target, f->state, limit,
	};
	PGresult *res = NULL;
	enum db_rc drc;
	json_t *list;
	int i;

	*out = NULL;
	if (f->since_seconds > 0) {
		snprintf(secs, sizeof(secs), "%lld", f->since_seconds);
		p[1] = secs;
	}
	snprintf(limit, sizeof(limit), "%d", f->limit > 0 ? f->limit : 200);
	drc = db_exec(db, &st_list, p, &res);
	if (drc != DB_OK) {
		/* class 22: the --since timestamp is not one PostgreSQL reads */
		if (drc == DB_ERROR && strncmp(db_sqlstate(db), "22", 2) == 0)
			return OG_BAD_INPUT;
		return og_rc_of(drc);
	}
	list = json_array();
	for (i = 0; i < PQntuples(res); i++) {
		static const char *const text_cols[] = {
			"id", "effect_id", "client", "idempotency_key", "effect_type", "target",
			"provider_key", "error_class", "reason", "created_at", "effect_state", "resolution",
			"resolved_by", "resolved_at", "retention_until",
		};
		/* the names the API gives the same things (NULL: the column's) */
		static const char *const json_names[sizeof(text_cols) / sizeof(text_cols[0])] = {
			"dead_letter_id", NULL, NULL, "key", "type",
		};
		json_t *o = json_object();
		size_t k;

		for (k = 0; k < sizeof(text_cols) / sizeof(text_cols[0]); k++) {
			const char *v = db_get(res, i, text_cols[k]);

			json_object_set_new(o, json_names[k] != NULL ? json_names[k] : text_cols[k],
			                    v != NULL ? json_string(v) : json_null());
		}
		json_object_set_new(o, "age_seconds", json_integer(db_get_ll(res, i, "age_seconds")));
		json_object_set_new(o, "replay_count",
		                    json_integer(db_get_ll(res, i, "replay_count")));
		json_object_set_new(o, "state", json_string(db_get_bool(res, i, "open")
		                                                    ? "open" : "resolved"));
		json_array_append_new(list, o);
	}
	PQclear(res);
	*out = list;
	return OG_OK;
}

enum og_rc
deadletter_show(struct db *db, const struct config *cfg, const char *id, json_t **out)
{
	const char *p[2] = { id, NULL };
	char maxa[16];
	PGresult *res = NULL;
	enum og_rc rc;
	json_error_t jerr;

	*out = NULL;
	if ((rc = og_rc_of(db_exec(db, &st_target, p, &res))) != OG_OK)
		return rc;
	if (PQntuples(res) != 1) {
		PQclear(res);
		return OG_NOT_FOUND;
	}
	if (cfg != NULL) {
		const struct config_target *t = config_target(cfg, db_get(res, 0, "target"));

		if (t != NULL) {
			snprintf(maxa, sizeof(maxa), "%d", t->max_attempts);
			p[1] = maxa;
		}
	}
	PQclear(res);
	res = NULL;
	if ((rc = og_rc_of(db_exec(db, &st_show, p, &res))) != OG_OK)
		return rc;
	if (PQntuples(res) != 1) {
		PQclear(res);
		return OG_NOT_FOUND;
	}
	*out = json_loads(db_get(res, 0, "doc"), 0, &jerr);
	PQclear(res);
	return *out != NULL ? OG_OK : OG_ERROR;
}


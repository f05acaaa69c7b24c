/*
 * gate.c — approval challenges: create, find by token hash, consume once;
 * expire, revoke and purge them; votes toward a quorum; the links a
 * notification replaced; the inbox. The one file with SQL text for
 * approvals, approval_votes and approval_replaced_links.
 *
 * Over 1,000 lines on purpose: it is the sole owner of those three tables,
 * and every statement that reads or writes them lives here; split, a
 * table would have two files with its SQL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "gate.h"
#include "listq.h"

static const char *const state_names[] = {
	"pending", "decided", "voided", "revoked", "expired",
};

static const struct db_stmt st_create = {
	"gate_create",
	"INSERT INTO approvals (client_id, idempotency_key, token_hash, approver,"
	"    allowed_decisions, requested_by, separation_of_duties, expires_at,"
	"    effect, callback_url, min_approvals)"
	" VALUES ($1, $2, decode($3, 'hex'), $4,"
	"    ARRAY(SELECT json_array_elements_text($5::json)), $6, $7::boolean,"
	"    now() + make_interval(secs => $8::int), $9::jsonb, $10, $11::int)"
	" RETURNING id, og_ts(expires_at) AS expires_at",
	11, false,
};

static const struct db_stmt st_find = {
	"gate_find",
	"SELECT id, client_id, idempotency_key, approver, requested_by,"
	"       array_to_json(allowed_decisions)::text AS allowed_decisions,"
	"       separation_of_duties, state, expires_at <= now() AS expired,"
	"       og_ts(expires_at) AS expires_at, og_ts(consumed_at) AS consumed_at,"
	"       decision, approver_subject, reason, effect::text AS effect, callback_url,"
	"       min_approvals, round"
	"  FROM approvals WHERE token_hash = decode($1, 'hex')",
	1, true,
};

/* The single-use step: pending, unexpired, decision allowed — all checked
 * by the same statement that consumes. It also voids the run's other
 * pending challenges (the first valid decision settles the run):
 * one round trip for both. */
static const struct db_stmt st_consume = {
	"gate_consume",
	"WITH consumed AS ("
	"  UPDATE approvals"
	"     SET state = 'decided', consumed_at = now(), decision = $2,"
	"         approver_subject = $3, reason = $4"
	"   WHERE token_hash = decode($1, 'hex') AND state = 'pending'"
	"     AND expires_at > now() AND $2 = ANY (allowed_decisions)"
	"  RETURNING id, client_id, idempotency_key"
	"), voided AS ("
	"  UPDATE approvals a SET state = 'voided'"
	"    FROM consumed c"
	"   WHERE a.client_id = c.client_id AND a.idempotency_key = c.idempotency_key"
	"     AND a.state = 'pending' AND a.id <> c.id"
	")"
	"SELECT id FROM consumed",
	4, false,
};

/*
 * A vote: the decision of one person on a challenge, recorded, and the
 * challenge consumed as the quorum says. Run inside the decision's
 * transaction after the run's row lock (ledger_lock_draft), which
 * serialises the votes of one run, so the approvals counted here are all
 * there are. The challenge must be pending, unexpired and allow the
 * decision; the person must not have voted in the challenge's round of the
 * run already (by any link, group or inbox entry: subjects compared
 * ignoring ASCII case); only that round's approvals count towards its
 * quorum. The vote is final when it rejects, requests changes (which ends
 * the round) or makes min_approvals distinct approvals. A challenge named for one person is consumed by their vote; a
 * group's stays pending for the group's other members until a final vote,
 * which consumes its own challenge and voids the run's pending others.
 * $5 is the hash of the draft decided on, $6 whether this vote edited it,
 * $7 the API client that vouched for the person (NULL: the page).
 * One row: found (the challenge could take the vote), voted (recorded),
 * approvals (counted with this vote), needed, final.
 */
#define SUBJECT_FOLD(x) \
	"translate(" x ", 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')"
static const struct db_stmt st_vote = {
	"gate_vote",
	"WITH ch AS ("
	"  SELECT id, client_id, idempotency_key, approver, min_approvals, round FROM approvals"
	"   WHERE token_hash = decode($1, 'hex') AND state = 'pending'"
	"     AND expires_at > now() AND $2 = ANY (allowed_decisions)"
	"   FOR UPDATE"
	"), prior AS ("
	"  SELECT count(*) FILTER (WHERE v.decision = 'approve') AS approvals,"
	"         count(*) FILTER (WHERE " SUBJECT_FOLD("v.subject") " = " SUBJECT_FOLD("$3")
	") AS mine"
	"    FROM approval_votes v JOIN ch"
	"      ON v.client_id = ch.client_id AND v.idempotency_key = ch.idempotency_key"
	"     AND v.round = ch.round"
	"), vote AS ("
	"  INSERT INTO approval_votes (approval_id, client_id, idempotency_key, subject,"
	"      decision, reason, output_hash, edited, via_client_id, via_chat, round, final)"
	"  SELECT ch.id, ch.client_id, ch.idempotency_key, $3, $2, $4, $5, $6::boolean,"
	"         $7::bigint, $8, ch.round,"
	"         $2 <> 'approve' OR prior.approvals + 1 >= ch.min_approvals"
	"    FROM ch, prior WHERE prior.mine = 0"
	"  RETURNING approval_id, client_id, idempotency_key, final"
	"), consumed AS ("
	"  UPDATE approvals a"
	"     SET state = 'decided', consumed_at = now(), decision = $2,"
	"         approver_subject = $3, reason = $4, decided_via_client_id = $7::bigint"
	"    FROM vote v"
	"   WHERE a.id = v.approval_id AND (v.final OR a.approver NOT LIKE 'group:%')"
	"  RETURNING a.id"
	"), voided AS ("
	"  UPDATE approvals a SET state = 'voided'"
	"    FROM vote v"
	"   WHERE v.final AND a.client_id = v.client_id"
	"     AND a.idempotency_key = v.idempotency_key"
	"     AND a.state = 'pending' AND a.id <> v.approval_id"
	"  RETURNING a.id"
	")"
	"SELECT (SELECT count(*) FROM ch) AS found,"
	"       (SELECT count(*) FROM vote) AS voted,"
	"       coalesce((SELECT approvals FROM prior), 0)"
	"         + CASE WHEN $2 = 'approve' THEN (SELECT count(*) FROM vote) ELSE 0 END"
	"         AS approvals,"
	"       (SELECT min_approvals FROM ch) AS needed,"
	"       coalesce((SELECT final FROM vote), false) AS final",
	8, false,
};

/* A run's votes, oldest first. */
static const struct db_stmt st_votes = {
	"gate_votes",
	"SELECT v.approval_id, v.subject, v.decision, v.reason, v.output_hash, v.edited,"
	"       v.final, v.round, og_ts(v.created_at) AS at,"
	"       (SELECT c.name FROM api_clients c WHERE c.id = v.via_client_id) AS via,"
	"       v.via_chat,"
	"       (SELECT max(a.min_approvals) FROM approvals a"
	"         WHERE a.client_id = $1 AND a.idempotency_key = $2) AS needed"
	"  FROM approval_votes v WHERE v.client_id = $1 AND v.idempotency_key = $2"
	" ORDER BY v.created_at, v.id",
	2, true,
};

static const struct db_stmt st_list = {
	"gate_list",
	"SELECT id, approver, state, og_ts(created_at) AS created_at,"
	"       og_ts(expires_at) AS expires_at, og_ts(consumed_at) AS consumed_at,"
	"       decision, approver_subject, reason, min_approvals, round"
	"  FROM approvals WHERE client_id = $1 AND idempotency_key = $2"
	" ORDER BY created_at, id",
	2, true,
};

/* Runs whose every pending challenge has expired, a few at a time. */
static const struct db_stmt st_expired_runs = {
	"gate_expired_runs",
	"SELECT x.client_id, x.idempotency_key,"
	"       (SELECT c.name FROM api_clients c WHERE c.id = x.client_id) AS client_name"
	"  FROM (SELECT DISTINCT a.client_id, a.idempotency_key FROM approvals a"
	"         WHERE a.state = 'pending' AND a.expires_at <= now()"
	"         LIMIT $1::int) AS x",
	1, true,
};

static const struct db_stmt st_expire = {
	"gate_expire",
	"UPDATE approvals SET state = 'expired'"
	" WHERE client_id = $1::bigint AND idempotency_key = $2 AND state = 'pending'"
	"   AND expires_at <= now()"
	" RETURNING id",
	2, false,
};

static const struct db_stmt st_revoke_run = {
	"gate_revoke_run",
	"UPDATE approvals SET state = 'revoked'"
	" WHERE client_id = $1::bigint AND idempotency_key = $2 AND state = 'pending'"
	" RETURNING id",
	2, false,
};

static const struct db_stmt st_find_by_id = {
	"gate_find_by_id",
	"SELECT a.id, a.client_id, c.name AS client_name, a.idempotency_key, a.approver,"
	"       a.state, a.expires_at <= now() AS expired"
	"  FROM approvals a LEFT JOIN api_clients c ON c.id = a.client_id"
	" WHERE a.id = $1::uuid",
	1, false,
};

static const struct db_stmt st_revoke = {
	"gate_revoke",
	"WITH revoked AS ("
	"  UPDATE approvals SET state = 'revoked'"
	"   WHERE id = $1::uuid AND state = 'pending' AND expires_at > now()"
	"  RETURNING id, client_id, idempotency_key"
	")"
	"SELECT (SELECT count(*) FROM approvals a, revoked v"
	"         WHERE a.client_id = v.client_id AND a.idempotency_key = v.idempotency_key"
	"           AND a.state = 'pending' AND a.id <> v.id) AS left_pending"
	"  FROM revoked",
	1, false,
};

/* The challenges, pending ones only ($2) longest waiting first, or all of
 * them newest first. */
static const struct db_stmt st_pending = {
	"gate_pending",
	"SELECT a.id, c.name AS client, a.idempotency_key, a.approver, a.state,"
	"       og_ts(a.created_at) AS created_at,"
	"       floor(extract(epoch FROM now() - a.created_at))::bigint AS waiting_seconds,"
	"       og_ts(a.expires_at) AS expires_at,"
	"       floor(extract(epoch FROM a.expires_at - now()))::bigint AS expires_in_seconds,"
	"       r.state AS run_state, r.contract"
	"  FROM approvals a"
	"  JOIN workflow_runs r ON r.client_id = a.client_id"
	"   AND r.idempotency_key = a.idempotency_key"
	"  LEFT JOIN api_clients c ON c.id = a.client_id"
	" WHERE a.state = 'pending' OR NOT $2::bool"
	" ORDER BY CASE WHEN $2::bool THEN a.created_at END,"
	"          CASE WHEN NOT $2::bool THEN a.created_at END DESC, a.id"
	" LIMIT $1::int",
	2, true,
};

OG_NAME_FN(gate_state_name, enum approval_state, state_names, "unknown");

static const char *const decision_names[] = {
	[GATE_APPROVE] = "approve",
	[GATE_REJECT] = "reject",
	[GATE_CHANGES_REQUESTED] = "changes_requested",
};

OG_NAME_FN(gate_decision_name, enum gate_decision, decision_names, NULL);
OG_PARSE_FN(gate_decision_parse, enum gate_decision, decision_names, GATE_DECISION_NONE);

const char *
gate_decision_label(enum gate_decision d)
{
	return d == GATE_CHANGES_REQUESTED ? "changes requested" : gate_decision_name(d) ?: "";
}

static const char *const outcome_names[GATE_OUTCOME_COUNT] = {
	"approved", "rejected", "changes_requested", "expired",
};

OG_NAME_FN(gate_outcome_name, enum gate_outcome, outcome_names, "");

enum gate_outcome
gate_outcome_of(enum gate_decision d)
{
	if (d == GATE_APPROVE)
		return GATE_OUTCOME_APPROVED;
	return d == GATE_CHANGES_REQUESTED ? GATE_OUTCOME_CHANGES_REQUESTED : GATE_OUTCOME_REJECTED;
}

/* A state the database has and this build does not know is never usable. */
static OG_PARSE_FN(state_parse, enum approval_state, state_names, APPROVAL_REVOKED);

/* A conflict of a challenge's statement is another decision that came
 * first. */
static enum og_rc
gate_rc_of(enum db_rc rc)
{
	return rc == DB_CONFLICT ? OG_CONFLICT : og_rc_of(rc);
}

/* A challenge's columns as they are; gate_find reads the others itself.
 * The run's key is the column idempotency_key. */
#define AP(kind, f) DB_##kind(struct gate_approval, f)
static const struct db_col approval_cols[] = {
	{ "idempotency_key", offsetof(struct gate_approval, key), DB_COL_TEXT },
	AP(INT, client_id), AP(TEXT, approver), AP(TEXT, requested_by),
	AP(BOOL, separation_of_duties), AP(BOOL, expired), AP(TEXT, decision),
	AP(TEXT, approver_subject), AP(TEXT, reason), AP(TEXT, callback_url),
};
#undef AP

void
gate_approval_clear(struct gate_approval *a)
{
	json_decref(a->effect);
	json_decref(a->allowed_decisions);
	db_row_clear(approval_cols, DB_NCOLS(approval_cols), a, sizeof(*a));
}

enum og_rc
gate_create(struct db *db, long long client_id, const char *key, const char *approver,
            const json_t *allowed_decisions, const char *requested_by,
            bool separation_of_duties, int expires_seconds,
            const unsigned char token_hash[32], const char *effect,
            const char *callback_url, int min_approvals, char id[GATE_ID_LEN],
            char expires_at[GATE_TS_LEN])
{
	char client[24], hex[DIGEST_HEX_LEN], secs[16], quorum[16];
	char *decisions = json_dumps(allowed_decisions, JSON_COMPACT);
	const char *params[11] = { client, key, hex, approver, decisions, requested_by,
		                   separation_of_duties ? "true" : "false", secs, effect,
		                   callback_url, quorum };
	PGresult *res = NULL;
	enum og_rc grc = OG_OK;
	enum db_rc rc;

	if (decisions == NULL)
		return OG_ERROR;
	snprintf(client, sizeof(client), "%lld", client_id);
	snprintf(secs, sizeof(secs), "%d", expires_seconds);
	snprintf(quorum, sizeof(quorum), "%d", min_approvals > 0 ? min_approvals : 1);
	digest_hex(token_hash, 32, hex);
	if ((rc = db_exec(db, &st_create, params, &res)) != DB_OK) {
		grc = gate_rc_of(rc);
		goto out;
	}
	snprintf(id, GATE_ID_LEN, "%s", db_get(res, 0, "id"));
	snprintf(expires_at, GATE_TS_LEN, "%s", db_get(res, 0, "expires_at"));
out:
	PQclear(res);
	free(decisions);
	return grc;
}

enum og_rc
gate_find(struct db *db, const unsigned char token_hash[32], struct gate_approval *a)
{
	char hex[DIGEST_HEX_LEN];
	const char *params[1] = { hex };
	PGresult *res;
	enum db_rc rc;
	enum og_rc orc;
	const char *v;

	memset(a, 0, sizeof(*a));
	digest_hex(token_hash, 32, hex);
	if ((rc = db_exec(db, &st_find, params, &res)) != DB_OK)
		return gate_rc_of(rc);
	if (PQntuples(res) != 1) {
		PQclear(res);
		return OG_NOT_FOUND;
	}
	snprintf(a->id, sizeof(a->id), "%s", db_get(res, 0, "id"));
	orc = db_row_get(res, 0, approval_cols, DB_NCOLS(approval_cols), a);
	v = db_get(res, 0, "allowed_decisions");
	a->allowed_decisions = v != NULL ? json_loads(v, 0, NULL) : json_array();
	a->state = state_parse(db_get(res, 0, "state"));
	snprintf(a->expires_at, sizeof(a->expires_at), "%s", db_get(res, 0, "expires_at"));
	v = db_get(res, 0, "consumed_at");
	snprintf(a->consumed_at, sizeof(a->consumed_at), "%s", v != NULL ? v : "");
	v = db_get(res, 0, "effect");
	a->effect = v != NULL ? json_loads(v, 0, NULL) : NULL;
	a->min_approvals = db_get(res, 0, "min_approvals") != NULL
	                       ? (int)db_get_ll(res, 0, "min_approvals")
	                       : 1;
	a->round = db_get(res, 0, "round") != NULL ? (int)db_get_ll(res, 0, "round") : 1;
	PQclear(res);
	if (orc != OG_OK || a->key == NULL || a->approver == NULL ||
	    a->allowed_decisions == NULL) {
		gate_approval_clear(a);
		return OG_ERROR;
	}
	return OG_OK;
}

void
gate_consume_call(struct gate_consume_call *g, const unsigned char token_hash[32],
                  const char *decision, const char *subject, const char *reason,
                  struct db_call *call)
{
	digest_hex(token_hash, 32, g->hash);
	g->params[0] = g->hash;
	g->params[1] = decision;
	g->params[2] = subject;
	g->params[3] = reason;
	call->stmt = &st_consume;
	call->params = g->params;
}

enum og_rc
gate_consume_result(const struct db_call *call)
{
	if (call->rc != DB_OK)
		return gate_rc_of(call->rc);
	return PQntuples(call->res) == 1 ? OG_OK : OG_NOT_PENDING;
}

enum og_rc
gate_consume(struct db *db, const unsigned char token_hash[32], const char *decision,
             const char *subject, const char *reason)
{
	struct gate_consume_call g;
	struct db_call call = { 0 };
	enum og_rc grc;

	gate_consume_call(&g, token_hash, decision, subject, reason, &call);
	call.rc = db_exec(db, call.stmt, call.params, &call.res);
	grc = gate_consume_result(&call);
	PQclear(call.res);
	return grc;
}

static void
set_opt(json_t *o, const char *name, const PGresult *res, int row)
{
	const char *v = db_get(res, row, name);

	if (v != NULL)
		json_object_set_new(o, name, json_string(v));
}

/* set_opt of each of names (NULL-terminated). */
static void
set_opts(json_t *o, const char *const *names, const PGresult *res, int row)
{
	for (; o != NULL && *names != NULL; names++)
		set_opt(o, *names, res, row);
}

void
gate_vote_call(struct gate_vote_call *g, const unsigned char token_hash[32],
               const char *decision, const char *subject, const char *reason,
               const char *draft_hash, bool edited, long long via_client,
               const char *via_chat, struct db_call *call)
{
	if (via_client > 0)
		snprintf(g->via, sizeof(g->via), "%lld", via_client);
	digest_hex(token_hash, 32, g->hash);
	g->params[0] = g->hash;
	g->params[1] = decision;
	g->params[2] = subject;
	g->params[3] = reason;
	g->params[4] = draft_hash;
	g->params[5] = edited ? "true" : "false";
	g->params[6] = via_client > 0 ? g->via : NULL;
	g->params[7] = via_chat;
	call->stmt = &st_vote;
	call->params = g->params;
}

enum og_rc
gate_vote_result(const struct db_call *call, struct gate_vote *v)
{
	memset(v, 0, sizeof(*v));
	if (call->rc != DB_OK)
		return gate_rc_of(call->rc);
	if (PQntuples(call->res) != 1)
		return OG_ERROR;
	v->approvals = (int)db_get_ll(call->res, 0, "approvals");
	v->needed = db_get(call->res, 0, "needed") != NULL
	                ? (int)db_get_ll(call->res, 0, "needed")
	                : 1;
	v->final = db_get_bool(call->res, 0, "final");
	if (db_get_ll(call->res, 0, "found") != 1)
		return OG_NOT_PENDING;
	if (db_get_ll(call->res, 0, "voted") != 1)
		return OG_DUPLICATE;
	return OG_OK;
}

void
gate_votes_call(struct og_key_call *k, long long client_id, const char *key,
                struct db_call *call)
{
	og_key_call(k, &st_votes, client_id, key, call);
}

/* A vote as JSON; the quorum the run needs, where the row says, into
 * *needed. */
static json_t *
vote_json(const PGresult *res, int i, void *needed)
{
	json_t *v = json_object();

	json_object_set_new(v, "approval_id", json_string(db_get(res, i, "approval_id")));
	json_object_set_new(v, "subject", json_string(db_get(res, i, "subject")));
	json_object_set_new(v, "decision", json_string(db_get(res, i, "decision")));
	json_object_set_new(v, "at", json_string(db_get(res, i, "at")));
	set_opt(v, "reason", res, i);
	set_opt(v, "output_hash", res, i);
	set_opt(v, "via", res, i);
	set_opt(v, "via_chat", res, i);
	json_object_set_new(v, "edited", json_boolean(db_get_bool(res, i, "edited")));
	json_object_set_new(v, "final", json_boolean(db_get_bool(res, i, "final")));
	json_object_set_new(v, "round", json_integer(db_get_ll(res, i, "round")));
	if (db_get(res, i, "needed") != NULL)
		*(int *)needed = (int)db_get_ll(res, i, "needed");
	return v;
}

enum og_rc
gate_votes_read(const struct db_call *call, json_t **out, int *needed)
{
	*needed = 1;
	if (call->rc != DB_OK) {
		*out = NULL;
		return og_rc_of(call->rc);
	}
	*out = db_json_array(call->res, vote_json, needed);
	return *out != NULL ? OG_OK : OG_ERROR;
}

enum og_rc
gate_votes(struct db *db, long long client_id, const char *key, json_t **out, int *needed)
{
	struct og_key_call k;
	struct db_call call;
	enum og_rc rc;

	gate_votes_call(&k, client_id, key, &call);
	call.rc = db_exec(db, call.stmt, call.params, &call.res);
	rc = gate_votes_read(&call, out, needed);
	PQclear(call.res);
	return rc;
}

static json_t *
challenge_json(const PGresult *res, int i, void *arg)
{
	static const char *const opt[] = { "approver", "state", "created_at", "expires_at",
		                           "consumed_at", "decision", "approver_subject",
		                           "reason", NULL };
	json_t *a = json_object();

	json_object_set_new(a, "approval_id", json_string(db_get(res, i, "id")));
	set_opts(a, opt, res, i);
	json_object_set_new(a, "min_approvals", json_integer(db_get_ll(res, i, "min_approvals")));
	json_object_set_new(a, "round", json_integer(db_get_ll(res, i, "round")));
	return a;
}

enum og_rc
gate_list(struct db *db, long long client_id, const char *key, json_t **out)
{
	struct og_key_call k;
	struct db_call call;

	og_key_call(&k, &st_list, client_id, key, &call);
	return gate_rc_of(db_json_rows(db, call.stmt, call.params, challenge_json, NULL, out));
}

/* The challenges of the purged runs (ledger_purge) lose the effect they
 * showed. */
static const struct db_stmt st_purge_effects = {
	"gate_purge_effects",
	/* the approvers' reasons too (votes and challenges): free text */
	"WITH k AS (SELECT * FROM unnest($1::bigint[], $2::text[]) AS k(client_id, idempotency_key)),"
	" v AS (UPDATE approval_votes av SET reason = NULL FROM k"
	"        WHERE av.client_id = k.client_id AND av.idempotency_key = k.idempotency_key"
	"          AND av.reason IS NOT NULL RETURNING av.id)"
	"UPDATE approvals ap SET effect = NULL, reason = NULL"
	"  FROM k"
	" WHERE ap.client_id = k.client_id AND ap.idempotency_key = k.idempotency_key"
	"   AND (ap.effect IS NOT NULL OR ap.reason IS NOT NULL) RETURNING ap.id",
	2, false,
};

/* ---- the inbox: challenges found by the person, not by the token ---------- */

/* Pending, unexpired challenges named to the subject itself (addresses
 * compared without case, as the card does) or to one of the groups (the
 * identity header split at the separator, each item trimmed of spaces and
 * tabs and compared whole);
 * per run only the newest such challenge (deciding one settles the run).
 * Newest first. The caller holds each row to the card's own rule. */
static const struct db_stmt st_inbox = {
	"gate_inbox",
	"SELECT * FROM ("
	"  SELECT DISTINCT ON (a.client_id, a.idempotency_key)"
	"         a.id, a.client_id, a.idempotency_key, a.approver, a.requested_by,"
	"         a.separation_of_duties, a.created_at,"
	"         og_ts(a.created_at) AS created_ts, og_ts(a.expires_at) AS expires_ts,"
	"         floor(extract(epoch FROM now() - a.created_at))::bigint AS age_s,"
	"         floor(extract(epoch FROM a.expires_at - now()))::bigint AS left_s,"
	"         a.effect->>'type' AS effect_type, a.effect->>'target' AS effect_target,"
	"         a.effect->'payload'->>'subject' AS effect_subject,"
	"         (SELECT c.name FROM api_clients c WHERE c.id = a.client_id) AS client,"
	/* what the run answers (its context), read from the ledger's row */
	"         (SELECT r.context->>'subject' FROM workflow_runs r"
	"           WHERE r.client_id = a.client_id"
	"             AND r.idempotency_key = a.idempotency_key) AS context_subject,"
	"         (SELECT r.context->>'customer' FROM workflow_runs r"
	"           WHERE r.client_id = a.client_id"
	"             AND r.idempotency_key = a.idempotency_key) AS context_customer"
	"    FROM approvals a"
	"   WHERE a.state = 'pending' AND a.expires_at > now()"
	"     AND (lower(a.approver) = lower($1)"
	"          OR a.approver = ANY (ARRAY(SELECT 'group:' || btrim(g, E' \\t')"
	"                                       FROM unnest(string_to_array($2, $3)) g)))"
	/* a run the person has already voted on waits for others, not them */
	"     AND NOT EXISTS (SELECT 1 FROM approval_votes v"
	"          WHERE v.client_id = a.client_id AND v.idempotency_key = a.idempotency_key"
	"            AND " SUBJECT_FOLD("v.subject") " = " SUBJECT_FOLD("$1") ")"
	"   ORDER BY a.client_id, a.idempotency_key, a.created_at DESC, a.id"
	") newest ORDER BY created_at DESC, id LIMIT $4::int",
	4, true,
};

/* The challenge behind an inbox entry, with its token hash: the decision
 * taken from the inbox consumes it by the same statement as a token's. */
static const struct db_stmt st_find_id = {
	"gate_find_id",
	"SELECT encode(token_hash, 'hex') AS token_hash FROM approvals WHERE id = $1::uuid",
	1, true,
};

static json_t *
inbox_json(const PGresult *res, int i, void *arg)
{
	static const char *const effect_opt[] = { "effect_type", "effect_target",
		                                  "effect_subject", "context_subject",
		                                  "context_customer", NULL };
	json_t *a = json_object();

	json_object_set_new(a, "approval_id", json_string(db_get(res, i, "id")));
	json_object_set_new(a, "client_id", json_integer(db_get_ll(res, i, "client_id")));
	set_opt(a, "client", res, i);
	json_object_set_new(a, "key", json_string(db_get(res, i, "idempotency_key")));
	set_opt(a, "approver", res, i);
	set_opt(a, "requested_by", res, i);
	json_object_set_new(a, "separation_of_duties",
	                    json_boolean(db_get_bool(res, i, "separation_of_duties")));
	json_object_set_new(a, "created_at", json_string(db_get(res, i, "created_ts")));
	json_object_set_new(a, "expires_at", json_string(db_get(res, i, "expires_ts")));
	json_object_set_new(a, "age_seconds", json_integer(db_get_ll(res, i, "age_s")));
	json_object_set_new(a, "seconds_left", json_integer(db_get_ll(res, i, "left_s")));
	set_opts(a, effect_opt, res, i);
	return a;
}

enum og_rc
gate_inbox(struct db *db, const char *subject, const char *groups, char sep, int limit,
           json_t **out)
{
	char lim[16], sp[2] = { sep, '\0' };
	const char *params[4] = { subject, sep != '\0' ? groups : NULL, sp, lim };

	snprintf(lim, sizeof(lim), "%d", limit);
	return gate_rc_of(db_json_rows(db, &st_inbox, params, inbox_json, NULL, out));
}

enum og_rc
gate_find_id(struct db *db, const char *id, unsigned char token_hash[32],
             struct gate_approval *out)
{
	const char *params[1] = { id };
	PGresult *res;
	enum db_rc rc;
	const char *hex;
	size_t i;

	memset(out, 0, sizeof(*out));
	if ((rc = db_exec(db, &st_find_id, params, &res)) != DB_OK)
		return gate_rc_of(rc);
	hex = PQntuples(res) == 1 ? db_get(res, 0, "token_hash") : NULL;
	if (hex == NULL || strlen(hex) != 64) {
		PQclear(res);
		return OG_NOT_FOUND;
	}
	for (i = 0; i < 32; i++) {
		unsigned v;

		if (sscanf(hex + 2 * i, "%2x", &v) != 1) {
			PQclear(res);
			return OG_ERROR;
		}
		token_hash[i] = (unsigned char)v;
	}
	PQclear(res);
	return gate_find(db, token_hash, out);
}

/* client_id, idempotency_key and (when the statement has it) client_name. */
static const struct db_col run_cols[] = {
	DB_INT(struct gate_run, client_id),
	{ "idempotency_key", offsetof(struct gate_run, key), DB_COL_TEXT },
	DB_TEXT(struct gate_run, client_name),
};

void
gate_runs_clear(struct gate_runs *r)
{
	db_rows_clear(run_cols, DB_NCOLS(run_cols), sizeof(*r->v), r->v, r->n);
	memset(r, 0, sizeof(*r));
}

/* The rows as runs; each has a key. */
static enum og_rc
runs_read(PGresult *res, struct gate_runs *out)
{
	void *v;
	int i;

	if (db_rows_get(res, run_cols, DB_NCOLS(run_cols), sizeof(*out->v), &v, &out->n) != OG_OK)
		return OG_ERROR;
	out->v = v;
	for (i = 0; i < out->n; i++)
		if (out->v[i].key == NULL) {
			gate_runs_clear(out);
			return OG_ERROR;
		}
	return OG_OK;
}

static enum og_rc
runs_exec(struct db *db, const struct db_stmt *st, int limit, struct gate_runs *out)
{
	char lim[16];
	const char *p[1] = { lim };
	PGresult *res = NULL;
	enum og_rc rc;

	memset(out, 0, sizeof(*out));
	snprintf(lim, sizeof(lim), "%d", limit);
	if ((rc = og_rc_of(db_exec(db, st, p, &res))) == OG_OK)
		rc = runs_read(res, out);
	PQclear(res);
	return rc;
}

enum og_rc
gate_expired_runs(struct db *db, int limit, struct gate_runs *out)
{
	return runs_exec(db, &st_expired_runs, limit, out);
}

enum og_rc
gate_expire(struct db *db, long long client_id, const char *key, long long *count)
{
	PGresult *res = NULL;
	enum og_rc rc = og_exec_key(db, &st_expire, client_id, key, &res);

	*count = rc == OG_OK ? PQntuples(res) : 0;
	PQclear(res);
	return rc;
}

enum og_rc
gate_revoke_run(struct db *db, long long client_id, const char *key, json_t **ids)
{
	return og_exec_key_ids(db, &st_revoke_run, client_id, key, ids);
}

#define REF(kind, f) DB_##kind(struct gate_ref, f)
static const struct db_col ref_cols[] = {
	{ "idempotency_key", offsetof(struct gate_ref, key), DB_COL_TEXT },
	REF(INT, client_id), REF(TEXT, client_name), REF(TEXT, approver), REF(BOOL, expired),
};
#undef REF

void
gate_ref_clear(struct gate_ref *r)
{
	db_row_clear(ref_cols, DB_NCOLS(ref_cols), r, sizeof(*r));
}

enum og_rc
gate_find_by_id(struct db *db, const char *id, struct gate_ref *out)
{
	const char *p[1] = { id };
	PGresult *res = NULL;
	enum og_rc rc;

	memset(out, 0, sizeof(*out));
	if ((rc = og_exec_one(db, &st_find_by_id, p, OG_NOT_FOUND, &res)) != OG_OK)
		return rc;
	snprintf(out->id, sizeof(out->id), "%s", db_get(res, 0, "id"));
	rc = db_row_get(res, 0, ref_cols, DB_NCOLS(ref_cols), out);
	out->state = state_parse(db_get(res, 0, "state"));
	PQclear(res);
	if (rc != OG_OK || out->key == NULL || out->approver == NULL) {
		gate_ref_clear(out);
		return OG_ERROR;
	}
	return OG_OK;
}

enum og_rc
gate_revoke(struct db *db, const char *id, int *left_pending)
{
	const char *p[1] = { id };
	PGresult *res = NULL;
	enum og_rc rc;

	*left_pending = 0;
	if ((rc = og_exec_one(db, &st_revoke, p, OG_CHANGED, &res)) != OG_OK)
		return rc;
	*left_pending = (int)db_get_ll(res, 0, "left_pending");
	PQclear(res);
	return OG_OK;
}

static json_t *
pending_json(const PGresult *res, int i, void *arg)
{
	const char *contract = db_get(res, i, "contract");
	const char *client = db_get(res, i, "client");

	return json_pack("{s:s, s:o, s:s, s:s, s:s, s:s, s:I, s:s, s:I, s:s, s:o}",
	                 "approval_id", db_get(res, i, "id"),
	                 "client", client != NULL ? json_string(client) : json_null(),
	                 "key", db_get(res, i, "idempotency_key"),
	                 "approver", db_get(res, i, "approver"),
	                 "state", db_get(res, i, "state"),
	                 "created_at", db_get(res, i, "created_at"),
	                 "waiting_seconds", (json_int_t)db_get_ll(res, i, "waiting_seconds"),
	                 "expires_at", db_get(res, i, "expires_at"),
	                 "expires_in_seconds", (json_int_t)db_get_ll(res, i, "expires_in_seconds"),
	                 "run_state", db_get(res, i, "run_state"),
	                 "contract", contract != NULL ? json_string(contract) : json_null());
}

enum og_rc
gate_challenges(struct db *db, bool pending_only, int limit, json_t **out)
{
	char lim[16];
	const char *p[2] = { lim, pending_only ? "true" : "false" };

	snprintf(lim, sizeof(lim), "%d", limit);
	return og_rc_of(db_json_rows(db, &st_pending, p, pending_json, NULL, out));
}

enum db_rc
gate_purge_effects(struct db *db, const char *clients, const char *keys, long long *count)
{
	const char *p[2] = { clients, keys };

	return db_exec_count(db, &st_purge_effects, p, count);
}

/* ---- notifications ------------------------------------------------------ */

/* A challenge as its notification needs it (gate_notice_at). */
#define GATE_NOTICE_COLS                                                                  \
	"a.id, a.client_id,"                                                              \
	" (SELECT c.name FROM api_clients c WHERE c.id = a.client_id) AS client_name,"   \
	" a.idempotency_key, a.approver, a.notify::text AS notify, a.requested_by,"      \
	" og_ts(a.expires_at) AS expires_at, a.effect::text AS effect,"                  \
	" (SELECT r.contract FROM workflow_runs r WHERE r.client_id = a.client_id"        \
	"     AND r.idempotency_key = a.idempotency_key) AS contract,"                     \
	" (SELECT r.context::text FROM workflow_runs r WHERE r.client_id = a.client_id"   \
	"     AND r.idempotency_key = a.idempotency_key) AS context"

static const struct db_stmt st_set_notify = {
	"gate_set_notify",
	"UPDATE approvals SET notify = $2::jsonb,"
	"       remind_at = CASE WHEN $3::int > 0"
	"           THEN created_at + make_interval(secs => $3::int) END,"
	"       escalate_at = CASE WHEN $4::int > 0"
	"           THEN created_at + make_interval(secs => $4::int) END,"
	"       escalate_to = $5::jsonb"
	" WHERE id = $1::uuid RETURNING id",
	5, false,
};

/* A fresh link: the new hash replaces the challenge's, and the one it
 * replaces is kept (only if a notification carried it) so that its page can
 * say it is no longer valid. Only while the challenge can be decided. */
static const struct db_stmt st_mint = {
	"gate_mint",
	"WITH cur AS ("
	"  SELECT id, token_hash, notified_at FROM approvals"
	"   WHERE id = $1::uuid AND state = 'pending' AND expires_at > now() FOR UPDATE"
	"), old AS ("
	"  INSERT INTO approval_replaced_links (token_hash, approval_id)"
	"  SELECT token_hash, id FROM cur WHERE notified_at IS NOT NULL"
	"  ON CONFLICT DO NOTHING"
	")"
	"UPDATE approvals a SET token_hash = decode($2, 'hex'), notified_at = now()"
	"  FROM cur WHERE a.id = cur.id RETURNING a.id",
	2, false,
};

static const struct db_stmt st_replaced = {
	"gate_replaced",
	"SELECT approval_id FROM approval_replaced_links WHERE token_hash = decode($1, 'hex')",
	1, true,
};

/* One reminder per challenge: taken (remind_at cleared) by the statement
 * that finds it, so two dispatchers never remind twice. Only an entry on
 * which nobody has voted yet is reminded (a group's challenge stays
 * pending after a member's vote while the run waits for its quorum): the
 * reminder of an entry that has voted is taken and dropped. */
static const struct db_stmt st_due_reminders = {
	"gate_due_reminders",
	"WITH due AS ("
	"  UPDATE approvals SET remind_at = NULL"
	"   WHERE id = ANY(ARRAY("
	"     SELECT id FROM approvals"
	"      WHERE state = 'pending' AND remind_at <= now() AND expires_at > now()"
	"        AND notify IS NOT NULL"
	"      ORDER BY remind_at LIMIT $1::int FOR UPDATE SKIP LOCKED))"
	"     AND state = 'pending' AND remind_at IS NOT NULL"
	"  RETURNING *"
	")"
	"SELECT " GATE_NOTICE_COLS " FROM due a"
	" WHERE NOT EXISTS (SELECT 1 FROM approval_votes v WHERE v.approval_id = a.id)"
	" ORDER BY a.created_at, a.id",
	1, false,
};

static const struct db_stmt st_due_escalations = {
	"gate_due_escalations",
	"SELECT DISTINCT a.client_id, a.idempotency_key FROM approvals a"
	" WHERE a.state = 'pending' AND a.escalate_at <= now() LIMIT $1::int",
	1, true,
};

/* The run's escalation, taken once (escalate_at cleared on every one of its
 * challenges); the rows of its challenges still pending, each with the
 * approver entries to add and whether the run is still undecided: no
 * challenge decided it and no vote settled it (a run with a quorum may
 * hold approving votes that are not yet enough: it is escalated too, and
 * the added approvers' votes count towards its quorum). */
static const struct db_stmt st_escalate_take = {
	"gate_escalate_take",
	"WITH taken AS ("
	"  UPDATE approvals SET escalate_at = NULL"
	"   WHERE client_id = $1::bigint AND idempotency_key = $2 AND escalate_at IS NOT NULL"
	"  RETURNING *"
	")"
	"SELECT " GATE_NOTICE_COLS ", a.escalate_to::text AS escalate_to,"
	"       NOT EXISTS (SELECT 1 FROM approval_votes v WHERE v.client_id = a.client_id"
	"           AND v.idempotency_key = a.idempotency_key AND v.final)"
	"       AND NOT EXISTS (SELECT 1 FROM approvals d WHERE d.client_id = a.client_id"
	"           AND d.idempotency_key = a.idempotency_key AND d.state = 'decided'"
	"           AND NOT EXISTS (SELECT 1 FROM approval_votes dv"
	"                            WHERE dv.approval_id = d.id))"
	"         AS nobody_decided"
	"  FROM taken a WHERE a.state = 'pending' AND a.expires_at > now()"
	" ORDER BY a.created_at, a.id",
	2, false,
};

/* A challenge added by an escalation: the run's challenge `template` with
 * another approver, their notify and a token hash of its own; the same
 * expiry, decisions and quorum (its votes count towards the run's). */
static const struct db_stmt st_create_escalated = {
	"gate_create_escalated",
	"INSERT INTO approvals (client_id, idempotency_key, token_hash, approver,"
	"    allowed_decisions, requested_by, separation_of_duties, expires_at,"
	"    effect, callback_url, min_approvals, notify, escalated)"
	"SELECT client_id, idempotency_key, decode($2, 'hex'), $3, allowed_decisions,"
	"       requested_by, separation_of_duties, expires_at, effect, callback_url,"
	"       min_approvals, $4::jsonb, true"
	"  FROM approvals WHERE id = $1::uuid"
	" RETURNING id, og_ts(expires_at) AS expires_at",
	4, false,
};

static const struct db_stmt st_notice = {
	"gate_notice",
	"SELECT " GATE_NOTICE_COLS " FROM approvals a"
	" WHERE a.id = $1::uuid AND a.state = 'pending' AND a.expires_at > now()"
	"   AND a.notify IS NOT NULL",
	1, true,
};

enum og_rc
gate_set_notify(struct db *db, const char *id, const json_t *notify, int remind_seconds,
                int escalate_seconds, const json_t *escalate_to)
{
	char remind[16], escalate[16];
	char *n = notify != NULL ? json_dumps(notify, JSON_COMPACT) : NULL;
	char *e = escalate_to != NULL ? json_dumps(escalate_to, JSON_COMPACT) : NULL;
	const char *p[5] = { id, n, remind, escalate, e };
	PGresult *res = NULL;
	enum og_rc rc = OG_OK;
	enum db_rc drc;

	if ((notify != NULL && n == NULL) || (escalate_to != NULL && e == NULL)) {
		rc = OG_ERROR;
		goto out;
	}
	snprintf(remind, sizeof(remind), "%d", remind_seconds);
	snprintf(escalate, sizeof(escalate), "%d", escalate_seconds);
	if ((drc = db_exec(db, &st_set_notify, p, &res)) != DB_OK)
		rc = gate_rc_of(drc);
	else if (PQntuples(res) != 1)
		rc = OG_NOT_FOUND;
out:
	PQclear(res);
	free(n);
	free(e);
	return rc;
}

/* stmt with a token's hash (hex) as its last parameter, after id when
 * there is one: OG_OK when it returned one row, none when not. The hex is
 * wiped after. */
static enum og_rc
token_exec(struct db *db, const struct db_stmt *stmt, const char *id,
           const unsigned char token_hash[32], enum og_rc none)
{
	char hex[DIGEST_HEX_LEN];
	const char *p[2] = { id != NULL ? id : hex, hex };
	PGresult *res = NULL;
	enum og_rc rc = OG_OK;
	enum db_rc drc;

	digest_hex(token_hash, 32, hex);
	if ((drc = db_exec(db, stmt, p, &res)) != DB_OK)
		rc = gate_rc_of(drc);
	else if (PQntuples(res) != 1)
		rc = none;
	PQclear(res);
	digest_wipe(hex, sizeof(hex));
	return rc;
}

enum og_rc
gate_mint(struct db *db, const char *id, const unsigned char token_hash[32])
{
	return token_exec(db, &st_mint, id, token_hash, OG_NOT_PENDING);
}

enum og_rc
gate_replaced(struct db *db, const unsigned char token_hash[32])
{
	return token_exec(db, &st_replaced, NULL, token_hash, OG_NOT_FOUND);
}

/* A notice's columns but its texts; escalate_to and nobody_decided are
 * NULL and false when the statement has none. */
#define NO(kind, f) DB_##kind(struct gate_notice, f)
static const struct db_col notice_cols[] = {
	NO(INT, client_id), NO(JSON, notify), NO(JSON, effect), NO(JSON, context),
	NO(JSON, escalate_to), NO(BOOL, nobody_decided),
};
#undef NO

/* The row of GATE_NOTICE_COLS (and escalate_to, nobody_decided when the
 * statement has them) as a notice; -1: a column it cannot go without is
 * missing, or no memory. */
static int
notice_read(const PGresult *res, int row, struct gate_notice *n)
{
	const char *v;

	static const char *const cols[] = { "id", "client_name", "idempotency_key", "approver",
		                            "requested_by", "expires_at", "contract" };
	const char **to[] = { &n->id, &n->client, &n->key, &n->approver,
		              &n->requested_by, &n->expires_at, &n->contract };
	size_t i, len = 0, at = 0;

	memset(n, 0, sizeof(*n));
	for (i = 0; i < sizeof(cols) / sizeof(cols[0]); i++)
		if ((v = db_get(res, row, cols[i])) != NULL)
			len += strlen(v) + 1;
	if ((n->strings = malloc(len + 1)) == NULL)
		return -1;
	for (i = 0; i < sizeof(cols) / sizeof(cols[0]); i++)
		if ((v = db_get(res, row, cols[i])) != NULL) {
			*to[i] = memcpy(n->strings + at, v, strlen(v) + 1);
			at += strlen(v) + 1;
		}
	if (db_row_get(res, row, notice_cols, DB_NCOLS(notice_cols), n) != OG_OK)
		return -1;
	return n->id != NULL && n->key != NULL && n->approver != NULL ? 0 : -1;
}

static enum og_rc
notices_exec(struct db *db, const struct db_stmt *st, const char *const *p,
             struct gate_notices *out)
{
	PGresult *res = NULL;
	enum db_rc drc;
	int i;

	memset(out, 0, sizeof(*out));
	if ((drc = db_exec(db, st, p, &res)) != DB_OK) {
		PQclear(res);
		return gate_rc_of(drc);
	}
	if (PQntuples(res) > 0 &&
	    (out->v = calloc((size_t)PQntuples(res), sizeof(*out->v))) == NULL) {
		PQclear(res);
		return OG_ERROR;
	}
	for (i = 0; i < PQntuples(res); i++, out->n++)
		if (notice_read(res, i, &out->v[i]) != 0) {
			gate_notice_clear(&out->v[i]);
			gate_notices_clear(out);
			PQclear(res);
			return OG_ERROR;
		}
	PQclear(res);
	return OG_OK;
}

enum og_rc
gate_due_reminders(struct db *db, int limit, struct gate_notices *out)
{
	char l[16];
	const char *p[1] = { l };

	snprintf(l, sizeof(l), "%d", limit);
	return notices_exec(db, &st_due_reminders, p, out);
}

enum og_rc
gate_due_escalations(struct db *db, int limit, struct gate_runs *out)
{
	return runs_exec(db, &st_due_escalations, limit, out);
}

enum og_rc
gate_escalate_take(struct db *db, long long client_id, const char *key,
                   struct gate_notices *out)
{
	char client[24];
	const char *p[2] = { client, key };

	snprintf(client, sizeof(client), "%lld", client_id);
	return notices_exec(db, &st_escalate_take, p, out);
}

enum og_rc
gate_notice(struct db *db, const char *id, struct gate_notice *out)
{
	const char *p[1] = { id };
	struct gate_notices l;
	enum og_rc rc;

	memset(out, 0, sizeof(*out));
	if ((rc = notices_exec(db, &st_notice, p, &l)) != OG_OK)
		return rc;
	if (l.n != 1) {
		gate_notices_clear(&l);
		return OG_NOT_PENDING;
	}
	*out = l.v[0];
	free(l.v);
	return OG_OK;
}

enum og_rc
gate_create_escalated(struct db *db, const char *template_id, const char *approver,
                      const json_t *notify, const unsigned char token_hash[32],
                      char id[GATE_ID_LEN], char expires_at[GATE_TS_LEN])
{
	char hex[DIGEST_HEX_LEN];
	char *n = notify != NULL ? json_dumps(notify, JSON_COMPACT) : NULL;
	const char *p[4] = { template_id, hex, approver, n };
	PGresult *res = NULL;
	enum og_rc rc = OG_OK;
	enum db_rc drc;

	if (notify != NULL && n == NULL)
		return OG_ERROR;
	digest_hex(token_hash, 32, hex);
	if ((drc = db_exec(db, &st_create_escalated, p, &res)) != DB_OK) {
		rc = gate_rc_of(drc);
	} else if (PQntuples(res) != 1) {
		rc = OG_NOT_FOUND;
	} else {
		snprintf(id, GATE_ID_LEN, "%s", db_get(res, 0, "id"));
		snprintf(expires_at, GATE_TS_LEN, "%s", db_get(res, 0, "expires_at"));
	}
	PQclear(res);
	free(n);
	return rc;
}

void
gate_notice_clear(struct gate_notice *n)
{
	free(n->strings);
	db_row_clear(notice_cols, DB_NCOLS(notice_cols), n, sizeof(*n));
}

void
gate_notices_clear(struct gate_notices *l)
{
	int i;

	for (i = 0; l->v != NULL && i < l->n; i++)
		gate_notice_clear(&l->v[i]);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

/* ---- a client's challenges, a page at a time ------------------------------ */

/* Oldest first by (created_at, id), after the cursor; "pending" means
 * still open to a decision (pending and unexpired). */
static const struct db_stmt st_list_page = {
	"gate_list_page",
	"SELECT a.id AS approval_id, a.idempotency_key AS key, a.approver, a.requested_by,"
	"       CASE WHEN a.state = 'pending' AND a.expires_at <= now() THEN 'expired'"
	"            ELSE a.state END AS state,"
	"       r.contract, a.effect->>'type' AS effect_type, a.effect->>'target' AS effect_target,"
	"       a.decision, a.approver_subject, og_ts(a.created_at) AS created_at,"
	"       og_ts(a.expires_at) AS expires_at,"
	"       (extract(epoch FROM a.created_at) * 1000000)::bigint AS at_us"
	"  FROM approvals a JOIN workflow_runs r"
	"    ON r.client_id = a.client_id AND r.idempotency_key = a.idempotency_key"
	" WHERE a.client_id = $1::bigint"
	"   AND ($2::text IS NULL OR ($2 = 'pending' AND a.state = 'pending' AND a.expires_at > now())"
	"        OR ($2 = 'expired' AND (a.state = 'expired' OR (a.state = 'pending'"
	"                                AND a.expires_at <= now())))"
	"        OR ($2 NOT IN ('pending', 'expired') AND a.state = $2))"
	"   AND ($3::timestamptz IS NULL OR a.created_at >= $3::timestamptz)"
	"   AND ($4::text IS NULL OR r.contract = $4)"
	"   AND ($5::bigint IS NULL OR (a.created_at, a.id::text) >"
	"        ('epoch'::timestamptz + $5::bigint * interval '1 microsecond', $6::text))"
	" ORDER BY a.created_at, a.id::text LIMIT $7::int",
	7, true,
};

static json_t *
page_json(const PGresult *res, int i, void *arg)
{
	static const char *const opt[] = { "requested_by", "contract", "effect_type",
		                           "effect_target", "decision", "approver_subject", NULL };
	json_t *a = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I}", "approval_id",
	                      db_get(res, i, "approval_id"), "key", db_get(res, i, "key"),
	                      "approver", db_get(res, i, "approver"), "state",
	                      db_get(res, i, "state"), "created_at", db_get(res, i, "created_at"),
	                      "expires_at", db_get(res, i, "expires_at"), "at_us",
	                      (json_int_t)db_get_ll(res, i, "at_us"));

	set_opts(a, opt, res, i);
	return a;
}

enum og_rc
gate_list_page(struct db *db, const struct og_list_query *q, json_t **out)
{
	struct og_list_params lp;

	og_list_params(q, &lp);
	return gate_rc_of(db_json_rows(db, &st_list_page, lp.p, page_json, NULL, out));
}

/* ---- decisions, for an export --------------------------------------------- */

/* Every decision taken at or after $1, oldest first by (at, seq), after
 * the cursor ($2 µs, $3 seq): each person's vote — through the approval
 * page, or through the API client that vouched for the person — and each
 * run the contract's rules approved. seq orders the decisions of one
 * instant: "v" and the vote's id, or "r" and the run's client and key.
 * The hashes: the draft the person decided on, the model's output, the
 * approver's corrected output, the contract, and the effect enqueued. */
static const struct db_stmt st_export = {
	"gate_export",
	"WITH d AS ("
	"  SELECT v.created_at AS at, 'v' || lpad(v.id::text, 19, '0') AS seq, v.client_id,"
	"         v.idempotency_key, v.approval_id::text AS approval_id, v.subject, v.decision,"
	"         v.reason, v.output_hash AS draft_hash, v.edited, v.final,"
	"         CASE WHEN v.via_client_id IS NULL THEN 'page' ELSE 'client' END AS via,"
	"         (SELECT c.name FROM api_clients c WHERE c.id = v.via_client_id) AS via_client"
	"    FROM approval_votes v"
	"  UNION ALL"
	"  SELECT r.decided_at, 'r' || r.client_id || '/' || r.idempotency_key, r.client_id,"
	"         r.idempotency_key, NULL, NULL, 'auto', NULL, r.output_hash, false, true,"
	"         'contract', NULL"
	"    FROM workflow_runs r WHERE r.decision = 'auto' AND r.decided_at IS NOT NULL"
	")"
	"SELECT og_ts(d.at) AS at, (extract(epoch FROM d.at) * 1000000)::bigint AS at_us, d.seq,"
	"       (SELECT c.name FROM api_clients c WHERE c.id = d.client_id) AS client,"
	"       d.idempotency_key AS key, r.contract, d.approval_id, d.subject, d.decision,"
	"       d.reason, d.via, d.via_client, d.final, d.edited, d.draft_hash, r.output_hash,"
	"       r.edited_output_hash, r.contract_hash,"
	"       (SELECT o.payload_hash FROM effect_outbox o"
	"         WHERE o.client_id = d.client_id AND o.idempotency_key = d.idempotency_key"
	"           AND o.effect_type = r.effect->>'type' AND o.target = r.effect->>'target')"
	"         AS effect_hash"
	"  FROM d JOIN workflow_runs r"
	"    ON r.client_id = d.client_id AND r.idempotency_key = d.idempotency_key"
	" WHERE d.at >= $1::timestamptz"
	"   AND ($2::bigint IS NULL OR (d.at, d.seq) >"
	"        ('epoch'::timestamptz + $2::bigint * interval '1 microsecond', $3::text))"
	" ORDER BY d.at, d.seq LIMIT $4::int",
	4, true,
};

/* A decision as JSON; one that cannot be made fails the export (*failed)
 * rather than leave a decision out. */
static json_t *
export_json(const PGresult *res, int i, void *failed)
{
	static const char *const opt[] = { "client", "contract", "approval_id", "subject",
		                           "reason", "via_client", "draft_hash", "output_hash",
		                           "edited_output_hash", "contract_hash", "effect_hash",
		                           NULL };
	json_t *d = json_pack("{s:s, s:I, s:s, s:s, s:s, s:s, s:b, s:b}", "at",
	                      db_get(res, i, "at"), "at_us", (json_int_t)db_get_ll(res, i, "at_us"),
	                      "seq", db_get(res, i, "seq"), "key", db_get(res, i, "key"),
	                      "decision", db_get(res, i, "decision"), "via", db_get(res, i, "via"),
	                      "final", db_get_bool(res, i, "final"), "edited",
	                      db_get_bool(res, i, "edited"));

	if (d == NULL)
		*(bool *)failed = true;
	set_opts(d, opt, res, i);
	return d;
}

enum og_rc
gate_export_page(struct db *db, const char *since, long long after_us, const char *after_seq,
                 int limit, json_t **out)
{
	char after[24], lim[16];
	const char *p[4] = { since, after_seq != NULL ? after : NULL, after_seq, lim };
	bool failed = false;
	enum og_rc rc;

	snprintf(after, sizeof(after), "%lld", after_us);
	snprintf(lim, sizeof(lim), "%d", limit);
	rc = gate_rc_of(db_json_rows(db, &st_export, p, export_json, &failed, out));
	if (rc == OG_OK && failed) {
		json_decref(*out);
		*out = NULL;
		rc = OG_ERROR;
	}
	return rc;
}

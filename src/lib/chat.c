/*
 * chat.c — the chat door's tables: requests seen, replies owed; see
 * chat.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "digest.h"

static const struct db_stmt st_seen = {
	"chat_seen",
	"WITH gone AS ("
	"  DELETE FROM chat_requests_seen"
	"   WHERE seen_at < now() - interval '" CHAT_SEEN_KEEP "'"
	"), added AS ("
	"  INSERT INTO chat_requests_seen (signature_sha256, chat)"
	"  VALUES (decode($1, 'hex'), $2) ON CONFLICT DO NOTHING RETURNING 1"
	")"
	"SELECT count(*) AS added FROM added",
	2, false,
};

static const struct db_stmt st_reply_queue = {
	"chat_reply_queue",
	"INSERT INTO chat_replies (chat, target, approval_id, response_url, body)"
	" VALUES ($1, $2, $3::uuid, $4, $5::jsonb)",
	5, false,
};

static const struct db_stmt st_reply_take = {
	"chat_reply_take",
	"UPDATE chat_replies r"
	"   SET attempts = r.attempts + 1, next_at = now() + interval '1 minute',"
	"       updated_at = now()"
	"  FROM (SELECT id FROM chat_replies"
	"         WHERE state = 'pending' AND next_at <= now()"
	"         ORDER BY next_at LIMIT $1::int FOR UPDATE SKIP LOCKED) due"
	" WHERE r.id = due.id"
	" RETURNING r.id, r.target, r.response_url, r.body::text AS body, r.attempts",
	1, false,
};

static const struct db_stmt st_reply_settle = {
	"chat_reply_settle",
	"UPDATE chat_replies"
	"   SET state = CASE WHEN $2::bool THEN 'sent'"
	"                    WHEN $3::bool THEN 'pending' ELSE 'failed' END,"
	"       response_url = CASE WHEN $2::bool OR NOT $3::bool THEN NULL"
	"                           ELSE response_url END,"
	"       next_at = now() + make_interval(secs => $4::int),"
	"       updated_at = now(), last_status = $5::int, last_error = $6"
	" WHERE id = $1::bigint AND state = 'pending'",
	6, true,
};

static char *
chat_dup(const char *v)
{
	return v != NULL ? strdup(v) : NULL;
}

enum og_rc
chat_seen_note(struct db *db, const char *chat, const unsigned char sig_sha256[32])
{
	char hex[65];
	const char *p[2] = { hex, chat };
	PGresult *res = NULL;
	enum og_rc rc;

	digest_hex(sig_sha256, 32, hex);
	rc = og_rc_of(db_exec(db, &st_seen, p, &res));
	if (rc == OG_OK)
		rc = db_get_ll(res, 0, "added") == 1 ? OG_OK : OG_DUPLICATE;
	PQclear(res);
	return rc;
}

enum og_rc
chat_reply_queue(struct db *db, const char *chat, const char *target, const char *approval_id,
                 const char *url, const char *body)
{
	const char *p[5] = { chat, target, approval_id, url, body };

	return og_rc_of(db_exec_void(db, &st_reply_queue, p));
}

enum og_rc
chat_reply_take(struct db *db, int limit, struct chat_replies *out)
{
	char n[16];
	const char *p[1] = { n };
	PGresult *res = NULL;
	enum og_rc rc;
	int i;

	memset(out, 0, sizeof(*out));
	snprintf(n, sizeof(n), "%d", limit);
	if ((rc = og_rc_of(db_exec(db, &st_reply_take, p, &res))) != OG_OK)
		return rc;
	if (PQntuples(res) > 0 &&
	    (out->r = calloc((size_t)PQntuples(res), sizeof(*out->r))) == NULL) {
		PQclear(res);
		return OG_ERROR;
	}
	for (i = 0; i < PQntuples(res); i++) {
		struct chat_reply *r = &out->r[out->n++];

		snprintf(r->id, sizeof(r->id), "%s", db_get(res, i, "id"));
		r->target = chat_dup(db_get(res, i, "target"));
		r->response_url = chat_dup(db_get(res, i, "response_url"));
		r->body = chat_dup(db_get(res, i, "body"));
		r->approval_id = chat_dup(db_get(res, i, "approval_id"));
		r->attempts = (int)db_get_ll(res, i, "attempts");
	}
	PQclear(res);
	return OG_OK;
}

void
chat_replies_clear(struct chat_replies *out)
{
	int i;

	for (i = 0; out->r != NULL && i < out->n; i++) {
		free(out->r[i].target);
		free(out->r[i].response_url);
		free(out->r[i].body);
		free(out->r[i].approval_id);
	}
	free(out->r);
	memset(out, 0, sizeof(*out));
}

enum og_rc
chat_reply_settle(struct db *db, const char *id, bool sent, bool retry, int retry_s, int status,
                  const char *error)
{
	char secs[16], st[16];
	const char *p[6] = { id, sent ? "true" : "false", retry ? "true" : "false", secs,
		             status > 0 ? st : NULL, error };

	snprintf(secs, sizeof(secs), "%d", retry_s);
	snprintf(st, sizeof(st), "%d", status);
	return og_rc_of(db_exec_void(db, &st_reply_settle, p));
}

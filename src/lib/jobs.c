/*
 * jobs.c — the SQL of the bulk jobs and of the replay links; see jobs.h.
 */
#include <stdio.h>

#include "jobs.h"
#include "outbox.h"

/*
 * A run that was replayed has handed its event to the new run: its own
 * effects are never resumed, whatever their state, or the event could have
 * two business effects. The newest replay's key, or NULL.
 */
#define JOBS_REPLAYED_AS(r)                                                                \
	"(SELECT x.replay_key FROM run_replays x WHERE x.client_id = " r ".client_id"        \
	"    AND x.original_key = " r ".idempotency_key ORDER BY x.id DESC LIMIT 1)"

/* After ledger_lock: the newest replay of the run, or NULL. */
static const struct db_stmt st_replayed_as = {
	"jobs_replayed_as",
	"SELECT " JOBS_REPLAYED_AS("r") " AS replayed_as"
	"  FROM workflow_runs r WHERE r.client_id = $1::bigint AND r.idempotency_key = $2",
	2, false,
};

/* Each id of the selection ($1, in order) with its effect and the verdict's
 * inputs: the same rule as outbox_st_resume, read without changing anything. */
const struct db_stmt jobs_st_resume_check = {
	"jobs_resume_check",
	"SELECT s.seq, e.id AS effect_id, c.name AS client_name, e.idempotency_key,"
	"       e.target, e.effect_type, e.state, e.provider_key, r.state AS run_state,"
	"       " JOBS_REPLAYED_AS("r") " AS replayed_as,"
	"       coalesce(" OUTBOX_KNOWN_UNDELIVERED("e") ", false) AS undelivered"
	"  FROM unnest($1::uuid[]) WITH ORDINALITY AS s(id, seq)"
	"  LEFT JOIN effect_outbox e ON e.id = coalesce("
	"       (SELECT x.id FROM effect_outbox x WHERE x.id = s.id),"
	"       (SELECT d.effect_id FROM dead_letters d WHERE d.id = s.id))"
	"  LEFT JOIN workflow_runs r ON r.client_id = e.client_id"
	"   AND r.idempotency_key = e.idempotency_key"
	"  LEFT JOIN api_clients c ON c.id = e.client_id"
	" ORDER BY s.seq",
	1, true,
};

/* A resume job: no client of its own (a selection may span clients). */
const struct db_stmt jobs_st_resume_create = {
	"jobs_resume_create",
	"INSERT INTO replay_jobs (kind, operator, reason, source, client_id, rate_per_second)"
	" VALUES ('resume', $1, $2, $3, NULL, $4::numeric) RETURNING id",
	4, false,
};

const struct db_stmt jobs_st_resume_item = {
	"jobs_resume_item",
	"INSERT INTO resume_job_items (job_id, seq, effect_id, given_id)"
	" VALUES ($1::bigint, $2::int, $3::uuid, $4)",
	4, false,
};

const struct db_stmt jobs_st_resume_next = {
	"jobs_resume_next",
	"SELECT i.seq, i.effect_id,"
	"       (SELECT stop_requested_at IS NOT NULL FROM replay_jobs WHERE id = $1::bigint)"
	"           AS stop"
	"  FROM (SELECT 1) one"
	"  LEFT JOIN LATERAL (SELECT seq, effect_id FROM resume_job_items"
	"     WHERE job_id = $1::bigint AND state = 'pending' ORDER BY seq LIMIT 1) i ON true",
	1, true,
};

/* Marked done in the transaction that resumes the effect: never twice. */
static const struct db_stmt st_resume_done = {
	"jobs_resume_done",
	"UPDATE resume_job_items SET state = 'done', done_at = now(), detail = 'resumed'"
	" WHERE job_id = $1::bigint AND seq = $2::int AND effect_id = $3::uuid"
	"   AND state = 'pending'"
	" RETURNING seq",
	3, false,
};

const struct db_stmt jobs_st_resume_refuse = {
	"jobs_resume_refuse",
	"UPDATE resume_job_items SET state = 'refused', done_at = now(), detail = $3"
	" WHERE job_id = $1::bigint AND seq = $2::int AND state = 'pending'",
	3, false,
};

const struct db_stmt jobs_st_link = {
	"jobs_link",
	"INSERT INTO run_replays (client_id, original_key, replay_key, operator, reason,"
	"    payload_source, payload_hash, start_state, job_id)"
	" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::bigint) RETURNING id",
	9, false,
};

const struct db_stmt jobs_st_replay_done = {
	"jobs_replay_done",
	"UPDATE replay_job_items SET state = 'done', done_at = now(), detail = $3"
	" WHERE job_id = $1 AND seq = $2 AND state = 'pending' RETURNING seq",
	3, false,
};

const struct db_stmt jobs_st_replay_create = {
	"jobs_replay_create",
	"INSERT INTO replay_jobs (operator, reason, source, client_id, rate_per_second)"
	" VALUES ($1, $2, $3, $4, $5::numeric) RETURNING id",
	5, false,
};

const struct db_stmt jobs_st_replay_item = {
	"jobs_replay_item",
	"INSERT INTO replay_job_items (job_id, seq, original_key, replay_key)"
	" VALUES ($1, $2, $3, $4)",
	4, false,
};

/* Both kinds of job (sql/008): a replay job's items are replay_job_items,
 * a resume job's resume_job_items (written by repair.c); a job has items
 * in one of them only. */
const struct db_stmt jobs_st_counts = {
	"jobs_counts",
	"SELECT count(*) FILTER (WHERE state = 'done') AS done,"
	"       count(*) FILTER (WHERE state = 'refused') AS refused,"
	"       count(*) FILTER (WHERE state = 'pending') AS pending"
	"  FROM (SELECT state FROM replay_job_items WHERE job_id = $1"
	"        UNION ALL SELECT state FROM resume_job_items WHERE job_id = $1) i",
	1, true,
};

/* A session-level advisory lock per job: held by the one process running
 * it, released when that process exits (or dies). */
const struct db_stmt jobs_st_lock = {
	"jobs_lock",
	"SELECT pg_try_advisory_lock(hashtext('oncegate.replay_job'), $1::int) AS locked,"
	"       j.state, j.kind, j.client_id, j.rate_per_second::float8 AS rate"
	"  FROM replay_jobs j WHERE j.id = $1::bigint",
	1, false,
};

const struct db_stmt jobs_st_run = {
	"jobs_run",
	"UPDATE replay_jobs SET state = 'running', stop_requested_at = NULL,"
	"       stop_requested_by = NULL, updated_at = now()"
	" WHERE id = $1 AND state <> 'completed' RETURNING id",
	1, false,
};

const struct db_stmt jobs_st_replay_next = {
	"jobs_replay_next",
	"SELECT i.seq, i.original_key, i.replay_key,"
	"       (SELECT stop_requested_at IS NOT NULL FROM replay_jobs WHERE id = $1) AS stop"
	"  FROM (SELECT 1) one"
	"  LEFT JOIN LATERAL (SELECT seq, original_key, replay_key FROM replay_job_items"
	"     WHERE job_id = $1 AND state = 'pending' ORDER BY seq LIMIT 1) i ON true",
	1, true,
};

const struct db_stmt jobs_st_replay_refuse = {
	"jobs_replay_refuse",
	"UPDATE replay_job_items SET state = 'refused', done_at = now(), detail = $3"
	" WHERE job_id = $1 AND seq = $2 AND state = 'pending'",
	3, false,
};

const struct db_stmt jobs_st_finish = {
	"jobs_finish",
	"UPDATE replay_jobs SET state = $2, updated_at = now(),"
	"       stop_requested_by = COALESCE(stop_requested_by, $3)"
	" WHERE id = $1 AND state = 'running' RETURNING client_id, kind",
	3, false,
};

const struct db_stmt jobs_st_stop = {
	"jobs_stop",
	"UPDATE replay_jobs SET stop_requested_at = now(), stop_requested_by = $2,"
	"       updated_at = now()"
	" WHERE id = $1 AND state = 'running' AND stop_requested_at IS NULL"
	" RETURNING client_id, kind",
	2, false,
};

const struct db_stmt jobs_st_state = {
	"jobs_state",
	"SELECT state, kind, stop_requested_at IS NOT NULL AS stopping FROM replay_jobs"
	" WHERE id = $1",
	1, true,
};

/* Both directions of a run's replay links (the status API, explain): dir
 * and other say them from this run's side. */
static const struct db_stmt st_links = {
	"jobs_links",
	"SELECT original_key, replay_key,"
	"       CASE WHEN replay_key = $2 THEN 'replay_of' ELSE 'replayed_as' END AS dir,"
	"       CASE WHEN replay_key = $2 THEN original_key ELSE replay_key END AS other,"
	"       og_ts(created_at) AS at, operator, reason, payload_source, start_state, job_id"
	"  FROM run_replays WHERE client_id = $1::bigint AND (replay_key = $2 OR original_key = $2)"
	" ORDER BY id",
	2, true,
};

enum og_rc
jobs_replayed_as(struct db *db, long long client_id, const char *key, char *out, size_t outlen)
{
	PGresult *res = NULL;
	enum og_rc rc = og_exec_key(db, &st_replayed_as, client_id, key, &res);

	out[0] = '\0';
	if (rc == OG_OK && PQntuples(res) == 1 && db_get(res, 0, "replayed_as") != NULL)
		snprintf(out, outlen, "%s", db_get(res, 0, "replayed_as"));
	PQclear(res);
	return rc;
}

enum og_rc
jobs_resume_done(struct db *db, long long job, int seq, const char *effect_id)
{
	char j[24], q[16];
	const char *p[3] = { j, q, effect_id };

	snprintf(j, sizeof(j), "%lld", job);
	snprintf(q, sizeof(q), "%d", seq);
	return og_exec_one(db, &st_resume_done, p, OG_CHANGED, NULL);
}

enum og_rc
jobs_links(struct db *db, long long client_id, const char *key, PGresult **rows)
{
	return og_exec_key(db, &st_links, client_id, key, rows);
}

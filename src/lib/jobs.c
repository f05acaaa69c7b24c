/*
 * jobs.c — the SQL of the bulk jobs and of the replay links; see jobs.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs.h"
#include "ledger.h"
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
 * inputs: the same rule as outbox_resume, read without changing anything. */
static const struct db_stmt st_resume_check = {
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
static const struct db_stmt st_resume_create = {
	"jobs_resume_create",
	"INSERT INTO replay_jobs (kind, operator, reason, source, client_id, rate_per_second)"
	" VALUES ('resume', session_user, $1, $2, NULL, $3::numeric) RETURNING id",
	3, false,
};

static const struct db_stmt st_resume_item = {
	"jobs_resume_item",
	"INSERT INTO resume_job_items (job_id, seq, effect_id, given_id)"
	" VALUES ($1::bigint, $2::int, $3::uuid, $4)",
	4, false,
};

static const struct db_stmt st_resume_next = {
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

static const struct db_stmt st_resume_refuse = {
	"jobs_resume_refuse",
	"UPDATE resume_job_items SET state = 'refused', done_at = now(), detail = $3"
	" WHERE job_id = $1::bigint AND seq = $2::int AND state = 'pending'",
	3, false,
};

static const struct db_stmt st_link = {
	"jobs_link",
	"INSERT INTO run_replays (client_id, original_key, replay_key, operator, reason,"
	"    payload_source, payload_hash, start_state, job_id)"
	" VALUES ($1, $2, $3, session_user, $4, $5, $6, $7, $8::bigint) RETURNING id",
	8, false,
};

static const struct db_stmt st_replay_done = {
	"jobs_replay_done",
	"UPDATE replay_job_items SET state = 'done', done_at = now(), detail = $3"
	" WHERE job_id = $1 AND seq = $2 AND state = 'pending' RETURNING seq",
	3, false,
};

static const struct db_stmt st_replay_create = {
	"jobs_replay_create",
	"INSERT INTO replay_jobs (operator, reason, source, client_id, rate_per_second)"
	" VALUES (session_user, $1, $2, $3, $4::numeric) RETURNING id",
	4, false,
};

static const struct db_stmt st_replay_item = {
	"jobs_replay_item",
	"INSERT INTO replay_job_items (job_id, seq, original_key, replay_key)"
	" VALUES ($1, $2, $3, $4)",
	4, false,
};

/* Both kinds of job (sql/008): a replay job's items are replay_job_items,
 * a resume job's resume_job_items (written by repair.c); a job has items
 * in one of them only. */
static const struct db_stmt st_counts = {
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
static const struct db_stmt st_lock = {
	"jobs_lock",
	"SELECT pg_try_advisory_lock(hashtext('oncegate.replay_job'), $1::int) AS locked,"
	"       j.state, j.kind, j.client_id, j.rate_per_second::float8 AS rate"
	"  FROM replay_jobs j WHERE j.id = $1::bigint",
	1, false,
};

static const struct db_stmt st_run = {
	"jobs_run",
	"UPDATE replay_jobs SET state = 'running', stop_requested_at = NULL,"
	"       stop_requested_by = NULL, updated_at = now()"
	" WHERE id = $1 AND state <> 'completed' RETURNING id",
	1, false,
};

static const struct db_stmt st_replay_next = {
	"jobs_replay_next",
	"SELECT i.seq, i.original_key, i.replay_key,"
	"       (SELECT stop_requested_at IS NOT NULL FROM replay_jobs WHERE id = $1) AS stop"
	"  FROM (SELECT 1) one"
	"  LEFT JOIN LATERAL (SELECT seq, original_key, replay_key FROM replay_job_items"
	"     WHERE job_id = $1 AND state = 'pending' ORDER BY seq LIMIT 1) i ON true",
	1, true,
};

static const struct db_stmt st_replay_refuse = {
	"jobs_replay_refuse",
	"UPDATE replay_job_items SET state = 'refused', done_at = now(), detail = $3"
	" WHERE job_id = $1 AND seq = $2 AND state = 'pending'",
	3, false,
};

static const struct db_stmt st_finish = {
	"jobs_finish",
	"UPDATE replay_jobs SET state = $2, updated_at = now(),"
	"       stop_requested_by = COALESCE(stop_requested_by, session_user)"
	" WHERE id = $1 AND state = 'running' RETURNING client_id, kind",
	2, false,
};

static const struct db_stmt st_stop = {
	"jobs_stop",
	"UPDATE replay_jobs SET stop_requested_at = now(), stop_requested_by = session_user,"
	"       updated_at = now()"
	" WHERE id = $1 AND state = 'running' AND stop_requested_at IS NULL"
	" RETURNING client_id, kind",
	1, false,
};

static const struct db_stmt st_state = {
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

#define LK(f) DB_TEXT(struct jobs_replay_link, f)
static const struct db_col link_cols[] = {
	LK(original_key), LK(replay_key), LK(dir), LK(other), LK(at), LK(operator), LK(reason),
	LK(payload_source), LK(start_state), LK(job_id),
};
#undef LK

OG_KEY_LIST(jobs_links, jobs_replay_links, &st_links, link_cols);
DB_LIST_CLEAR(jobs_replay_links_clear, jobs_replay_links, link_cols);

/* --- bulk jobs --------------------------------------------------------------- */

/* stmt over ($1 job, $2 seq, $3 text): OG_OK when it changed one row, or
 * any number when want_one is false; OG_DONE_ALREADY otherwise. */
static enum og_rc
item_exec(struct db *db, const struct db_stmt *stmt, long long job, int seq, const char *text,
          bool want_one)
{
	char j[24], q[16];
	const char *p[3] = { j, q, text };
	long long n = 0;
	enum db_rc rc;

	snprintf(j, sizeof(j), "%lld", job);
	snprintf(q, sizeof(q), "%d", seq);
	if ((rc = db_exec_count(db, stmt, p, &n)) != DB_OK)
		return og_rc_of(rc);
	return !want_one || n == 1 ? OG_OK : OG_DONE_ALREADY;
}

static void
copy_word(char out[JOBS_WORD_LEN], const PGresult *res, const char *col)
{
	snprintf(out, JOBS_WORD_LEN, "%s", db_get(res, 0, col) != NULL ? db_get(res, 0, col) : "");
}

/* The job's client and kind from a RETURNING client_id, kind row. */
static enum og_rc
job_moved(enum og_rc rc, PGresult *res, long long *client_id, char kind[JOBS_WORD_LEN])
{
	*client_id = 0;
	kind[0] = '\0';
	if (rc == OG_OK && PQntuples(res) == 1) {
		*client_id = db_get_ll(res, 0, "client_id");
		copy_word(kind, res, "kind");
	} else if (rc == OG_OK) {
		rc = OG_NOT_FOUND;
	}
	PQclear(res);
	return rc;
}

enum og_rc
jobs_lock(struct db *db, long long job, struct jobs_job *out)
{
	PGresult *res = NULL;
	enum og_rc rc;

	memset(out, 0, sizeof(*out));
	if ((rc = og_exec_key(db, &st_lock, job, NULL, &res)) != OG_OK)
		return rc;
	if (PQntuples(res) != 1) {
		PQclear(res);
		return OG_NOT_FOUND;
	}
	out->locked = db_get_bool(res, 0, "locked");
	copy_word(out->state, res, "state");
	out->completed = strcmp(out->state, JOBS_COMPLETED) == 0;
	copy_word(out->kind, res, "kind");
	out->client_id = db_get_ll(res, 0, "client_id");
	out->rate = strtod(db_get(res, 0, "rate") != NULL ? db_get(res, 0, "rate") : "0", NULL);
	PQclear(res);
	return OG_OK;
}

enum og_rc
jobs_run(struct db *db, long long job)
{
	PGresult *res = NULL;
	enum og_rc rc = og_exec_key(db, &st_run, job, NULL, &res);

	if (rc == OG_OK && PQntuples(res) != 1)
		rc = OG_DONE_ALREADY;
	PQclear(res);
	return rc;
}

enum og_rc
jobs_finish(struct db *db, long long job, bool completed, long long *client_id,
            char kind[JOBS_WORD_LEN])
{
	char j[24];
	const char *p[2] = { j, completed ? JOBS_COMPLETED : JOBS_STOPPED };
	PGresult *res = NULL;
	enum og_rc rc;

	snprintf(j, sizeof(j), "%lld", job);
	rc = og_rc_of(db_exec(db, &st_finish, p, &res));
	rc = job_moved(rc, res, client_id, kind);
	return rc == OG_NOT_FOUND ? OG_OK : rc;
}

enum og_rc
jobs_stop(struct db *db, long long job, long long *client_id, char kind[JOBS_WORD_LEN])
{
	PGresult *res = NULL;
	enum og_rc rc = og_exec_key(db, &st_stop, job, NULL, &res);

	return job_moved(rc, res, client_id, kind);
}

enum og_rc
jobs_state(struct db *db, long long job, char state[JOBS_WORD_LEN], char kind[JOBS_WORD_LEN],
           bool *stopping)
{
	PGresult *res = NULL;
	enum og_rc rc;

	state[0] = kind[0] = '\0';
	*stopping = false;
	if ((rc = og_exec_key(db, &st_state, job, NULL, &res)) != OG_OK)
		return rc;
	if (PQntuples(res) != 1) {
		PQclear(res);
		return OG_NOT_FOUND;
	}
	copy_word(state, res, "state");
	copy_word(kind, res, "kind");
	*stopping = db_get_bool(res, 0, "stopping");
	PQclear(res);
	return OG_OK;
}

#define IC(f) DB_INT(struct jobs_item_counts, f)
static const struct db_col count_cols[] = { IC(done), IC(refused), IC(pending) };
#undef IC

enum og_rc
jobs_counts(struct db *db, long long job, struct jobs_item_counts *out)
{
	PGresult *res = NULL;
	enum og_rc rc = og_exec_key(db, &st_counts, job, NULL, &res);

	memset(out, 0, sizeof(*out));
	if (rc == OG_OK)
		rc = db_row_get(res, 0, count_cols, DB_NCOLS(count_cols), out);
	PQclear(res);
	return rc;
}

/* A new job's row: its id from RETURNING id. */
static enum og_rc
job_created(struct db *db, const struct db_stmt *stmt, const char *const *p, long long *job)
{
	PGresult *res = NULL;
	enum og_rc rc = og_exec_one(db, stmt, p, OG_ERROR, &res);

	*job = rc == OG_OK ? db_get_ll(res, 0, "id") : 0;
	PQclear(res);
	return rc;
}

enum og_rc
jobs_replay_create(struct db *db, const char *reason, const char *source, long long client_id,
                   double rate, long long *job)
{
	char cid[24], r[32];
	const char *p[4] = { reason, source, cid, r };

	snprintf(cid, sizeof(cid), "%lld", client_id);
	snprintf(r, sizeof(r), "%.6f", rate);
	return job_created(db, &st_replay_create, p, job);
}

enum og_rc
jobs_resume_create(struct db *db, const char *reason, const char *source, double rate,
                   long long *job)
{
	char r[32];
	const char *p[3] = { reason, source, r };

	snprintf(r, sizeof(r), "%.6f", rate);
	return job_created(db, &st_resume_create, p, job);
}

/* An item row ($1 job, $2 seq, $3, $4). */
static enum og_rc
item_insert(struct db *db, const struct db_stmt *stmt, long long job, int seq, const char *a,
            const char *b)
{
	char j[24], q[16];
	const char *p[4] = { j, q, a, b };
	long long n = 0;

	snprintf(j, sizeof(j), "%lld", job);
	snprintf(q, sizeof(q), "%d", seq);
	return og_rc_of(db_exec_count(db, stmt, p, &n));
}

enum og_rc
jobs_replay_item(struct db *db, long long job, int seq, const char *key, const char *new_key)
{
	return item_insert(db, &st_replay_item, job, seq, key, new_key);
}

enum og_rc
jobs_resume_item(struct db *db, long long job, int seq, const char *effect_id,
                 const char *given_id)
{
	return item_insert(db, &st_resume_item, job, seq, effect_id, given_id);
}

/* The next pending item's row (seq NULL when none) and the stop flag. */
static enum og_rc
next_item(struct db *db, const struct db_stmt *stmt, long long job, int *seq, bool *stop,
          PGresult **res)
{
	enum og_rc rc;

	*seq = 0;
	*stop = false;
	if ((rc = og_exec_key(db, stmt, job, NULL, res)) != OG_OK)
		return rc;
	if (PQntuples(*res) != 1) {
		PQclear(*res);
		*res = NULL;
		return OG_ERROR;
	}
	*stop = db_get_bool(*res, 0, "stop");
	if (db_get(*res, 0, "seq") != NULL)
		*seq = (int)db_get_ll(*res, 0, "seq");
	return OG_OK;
}

enum og_rc
jobs_replay_next(struct db *db, long long job, int *seq, char **key, char **new_key,
                 bool *stop)
{
	PGresult *res = NULL;
	enum og_rc rc;

	*key = *new_key = NULL;
	if ((rc = next_item(db, &st_replay_next, job, seq, stop, &res)) != OG_OK || *seq == 0) {
		PQclear(res);
		return rc;
	}
	*key = strdup(db_get(res, 0, "original_key"));
	*new_key = strdup(db_get(res, 0, "replay_key"));
	PQclear(res);
	if (*key == NULL || *new_key == NULL) {
		free(*key);
		free(*new_key);
		*key = *new_key = NULL;
		return OG_ERROR;
	}
	return OG_OK;
}

enum og_rc
jobs_resume_next(struct db *db, long long job, int *seq, char effect_id[37], bool *stop)
{
	PGresult *res = NULL;
	enum og_rc rc;

	effect_id[0] = '\0';
	if ((rc = next_item(db, &st_resume_next, job, seq, stop, &res)) == OG_OK && *seq != 0)
		snprintf(effect_id, 37, "%s", db_get(res, 0, "effect_id"));
	PQclear(res);
	return rc;
}

enum og_rc
jobs_replay_done(struct db *db, long long job, int seq, const char *detail)
{
	return item_exec(db, &st_replay_done, job, seq, detail, true);
}

enum og_rc
jobs_replay_refuse(struct db *db, long long job, int seq, const char *detail)
{
	return item_exec(db, &st_replay_refuse, job, seq, detail, false);
}

enum og_rc
jobs_resume_refuse(struct db *db, long long job, int seq, const char *detail)
{
	return item_exec(db, &st_resume_refuse, job, seq, detail, false);
}

enum og_rc
jobs_resume_done(struct db *db, long long job, int seq, const char *effect_id)
{
	enum og_rc rc = item_exec(db, &st_resume_done, job, seq, effect_id, true);

	return rc == OG_DONE_ALREADY ? OG_CHANGED : rc;
}

enum og_rc
jobs_link(struct db *db, const struct jobs_link *l)
{
	char cid[24], job[24];
	const char *p[8] = { cid, l->key, l->new_key, l->reason, l->payload_source,
		             l->payload_hash, l->start_state, l->job > 0 ? job : NULL };

	snprintf(cid, sizeof(cid), "%lld", l->client_id);
	snprintf(job, sizeof(job), "%lld", l->job);
	return og_exec_one(db, &st_link, p, OG_DONE_ALREADY, NULL);
}

#define RS(type, f) DB_##type(struct jobs_resume_seen, f)
static const struct db_col seen_cols[] = {
	RS(TEXT, effect_id), RS(TEXT, client_name), RS(TEXT, idempotency_key), RS(TEXT, target),
	RS(TEXT, effect_type), RS(TEXT, state), RS(TEXT, provider_key), RS(TEXT, replayed_as),
	RS(BOOL, undelivered),
};
#undef RS

/* The check's rows as structs, each run's state parsed. */
static enum og_rc
resume_seen(const PGresult *res, struct jobs_resume_check *out)
{
	void *v = NULL;
	enum og_rc rc = db_rows_get(res, seen_cols, DB_NCOLS(seen_cols), sizeof(*out->v), &v,
	                            &out->n);
	int i;

	out->v = v;
	for (i = 0; i < out->n; i++)
		out->v[i].run_state = ledger_state_parse(db_get(res, i, "run_state"));
	return rc;
}

DB_LIST_CLEAR(jobs_resume_check_clear, jobs_resume_check, seen_cols);

enum og_rc
jobs_resume_check(struct db *db, const char *const *ids, int n, struct jobs_resume_check *out)
{
	const char *p[1];
	char *list, *q;
	size_t len = 3;
	PGresult *res = NULL;
	enum og_rc rc;
	int i;

	memset(out, 0, sizeof(*out));
	for (i = 0; i < n; i++)
		len += strlen(ids[i]) + 1;
	if ((list = malloc(len)) == NULL)
		return OG_ERROR;
	q = list;
	*q++ = '{';
	for (i = 0; i < n; i++)
		q += sprintf(q, "%s%s", i > 0 ? "," : "", ids[i]); /* uuids: no quoting */
	*q++ = '}';
	*q = '\0';
	p[0] = list;
	rc = og_rc_of(db_exec(db, &st_resume_check, p, &res));
	free(list);
	if (rc == OG_OK)
		rc = resume_seen(res, out);
	PQclear(res);
	return rc;
}

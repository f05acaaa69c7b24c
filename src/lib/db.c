/*
 * db.c — one libpq connection per thread, statements prepared lazily on
 * each session, and recovery from a lost server without a restart.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db.h"
#include "caps.h"
#include "log.h"

struct db {
	PGconn *conn;
	char *conninfo;
	int statement_timeout_ms;
	bool pooled;   /* behind a transaction pooler: no session state */
	bool in_hook;  /* running the connect hook: no second one inside it */
	const struct db_stmt **prepared; /* statements prepared on this session */
	size_t nprepared, aprepared;
	struct timespec last_failed_connect; /* CLOCK_MONOTONIC; zero: none */
	char err[512];
	char sqlstate[6];
};

static void (*connect_hook)(struct db *db);

void
db_on_connect(void (*hook)(struct db *db))
{
	connect_hook = hook;
}

struct db *
db_new(const char *conninfo, int statement_timeout_ms)
{
	return db_new_pooled(conninfo, statement_timeout_ms, false);
}

struct db *
db_new_pooled(const char *conninfo, int statement_timeout_ms, bool pooled)
{
	struct db *db = calloc(1, sizeof(*db));

	if (db == NULL)
		return NULL;
	db->conninfo = strdup(conninfo != NULL ? conninfo : "");
	if (db->conninfo == NULL) {
		free(db);
		return NULL;
	}
	db->statement_timeout_ms = statement_timeout_ms;
	db->pooled = pooled;
	return db;
}

void
db_free(struct db *db)
{
	if (db == NULL)
		return;
	if (db->conn != NULL)
		PQfinish(db->conn);
	free(db->prepared);
	free(db->conninfo);
	free(db);
}

static void
db_set_error(struct db *db, const char *what, const PGresult *res)
{
	const char *msg = res != NULL ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	const char *state = res != NULL ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	if (msg == NULL)
		msg = db->conn != NULL ? PQerrorMessage(db->conn) : "no connection";
	snprintf(db->err, sizeof(db->err), "%s: %s", what, msg);
	db->err[strcspn(db->err, "\n")] = '\0';
	snprintf(db->sqlstate, sizeof(db->sqlstate), "%s", state != NULL ? state : "");
}

/* Class 08 (connection exception), 57P0x (server shutting down or
 * starting), 53300 (too many connections), 57014 (statement_timeout: e.g.
 * waiting on a row lock held by a session whose client was cut off) and
 * 55P03 (lock not available) mean "try again later", not "your request is
 * wrong": the statement was rolled back. */
static bool
db_state_unavailable(const char *state)
{
	return strncmp(state, "08", 2) == 0 || strcmp(state, "57P01") == 0 ||
	       strcmp(state, "57P02") == 0 || strcmp(state, "57P03") == 0 ||
	       strcmp(state, "53300") == 0 || strcmp(state, "57014") == 0 ||
	       strcmp(state, "55P03") == 0;
}

static enum db_rc
db_classify(struct db *db, const PGresult *res, const char *what)
{
	db_set_error(db, what, res);
	if (PQstatus(db->conn) != CONNECTION_OK || db->sqlstate[0] == '\0' ||
	    db_state_unavailable(db->sqlstate))
		return DB_UNAVAILABLE;
	if (strcmp(db->sqlstate, "23505") == 0 || strcmp(db->sqlstate, "40001") == 0 ||
	    strcmp(db->sqlstate, "40P01") == 0)
		return DB_CONFLICT;
	return DB_ERROR;
}

static enum db_rc
db_session_setup(struct db *db)
{
	char timeout[32], idle[32];
	const char *params[2];
	PGresult *res;
	enum db_rc rc = DB_OK;

	snprintf(timeout, sizeof(timeout), "%d", db->statement_timeout_ms);
	snprintf(idle, sizeof(idle), "%d", OG_DB_IDLE_IN_TX_MS);
	params[0] = timeout;
	params[1] = idle;
	/* client_min_messages: NOTICEs (IF NOT EXISTS, …) are not ours to print.
	 * plan_cache_mode: every statement of ours is a key look-up whose
	 * generic plan is the right one; without this, PostgreSQL plans the
	 * claim afresh on every execution, which costs more than running it. */
	res = PQexecParams(db->conn,
	                   "SELECT set_config('statement_timeout', $1, false),"
	                   "       set_config('client_min_messages', 'warning', false),"
	                   "       set_config('plan_cache_mode', 'force_generic_plan', false),"
	                   "       set_config('idle_in_transaction_session_timeout', $2, false)",
	                   2, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		rc = db_classify(db, res, "session setup");
	PQclear(res);
	return rc;
}

enum db_rc
db_ensure(struct db *db)
{
	/* Our defaults come first: the conninfo in dbname is expanded in its
	 * place, so what the operator wrote there overrides them. */
	static const char *const keys[] = { "connect_timeout", "application_name",
	                                    "keepalives", "keepalives_idle",
	                                    "keepalives_interval", "keepalives_count",
	                                    "tcp_user_timeout", "dbname", NULL };
	char timeout[16], idle[16], interval[16], count[16], user_timeout[16];
	const char *values[9];
	struct timespec now;
	long long since_ms;
	enum db_rc rc;

	if (db->conn != NULL && PQstatus(db->conn) == CONNECTION_OK)
		return DB_OK;
	/* While the server is away, each connection tries again at most every
	 * OG_DB_RETRY_MS, so an outage costs a request one quick refusal, not a
	 * pile-up of connects; a recovered server is seen within that time. */
	clock_gettime(CLOCK_MONOTONIC, &now);
	since_ms = (long long)(now.tv_sec - db->last_failed_connect.tv_sec) * 1000 +
	           (now.tv_nsec - db->last_failed_connect.tv_nsec) / 1000000;
	if (db->last_failed_connect.tv_sec != 0 && since_ms < OG_DB_RETRY_MS) {
		snprintf(db->err, sizeof(db->err), "database unavailable (retrying)");
		return DB_UNAVAILABLE;
	}
	db->nprepared = 0;
	if (db->conn != NULL) {
		PQreset(db->conn);
	} else {
		snprintf(timeout, sizeof(timeout), "%d", OG_DB_CONNECT_TIMEOUT_S);
		snprintf(idle, sizeof(idle), "%d", OG_DB_KEEPALIVES_IDLE_S);
		snprintf(interval, sizeof(interval), "%d", OG_DB_KEEPALIVES_INTERVAL_S);
		snprintf(count, sizeof(count), "%d", OG_DB_KEEPALIVES_COUNT);
		snprintf(user_timeout, sizeof(user_timeout), "%d", OG_DB_TCP_USER_TIMEOUT_MS);
		values[0] = timeout;
		values[1] = "oncegate";
		values[2] = "1";
		values[3] = idle;
		values[4] = interval;
		values[5] = count;
		values[6] = user_timeout;
		values[7] = db->conninfo;
		values[8] = NULL;
		db->conn = PQconnectdbParams(keys, values, 1);
	}
	if (db->conn == NULL || PQstatus(db->conn) != CONNECTION_OK) {
		snprintf(db->err, sizeof(db->err), "connect: %s",
		         db->conn != NULL ? PQerrorMessage(db->conn) : "out of memory");
		db->err[strcspn(db->err, "\n")] = '\0';
		db->last_failed_connect = now;
		return DB_UNAVAILABLE;
	}
	memset(&db->last_failed_connect, 0, sizeof(db->last_failed_connect));
	/* Behind a transaction pooler a session setting would stay on whichever
	 * server connection ran it: the pooler sets them on its own
	 * connections (PgBouncer: connect_query). */
	rc = db->pooled ? DB_OK : db_session_setup(db);
	if (rc == DB_OK && connect_hook != NULL && !db->in_hook) {
		db->in_hook = true;
		connect_hook(db);
		db->in_hook = false;
	}
	return rc;
}

static bool
db_is_prepared(const struct db *db, const struct db_stmt *stmt)
{
	size_t i;

	for (i = 0; i < db->nprepared; i++)
		if (db->prepared[i] == stmt)
			return true;
	return false;
}

static enum db_rc
db_prepare(struct db *db, const struct db_stmt *stmt)
{
	PGresult *res;
	enum db_rc rc = DB_OK;

	if (db->nprepared == db->aprepared) {
		size_t n = db->aprepared ? db->aprepared * 2 : 32;
		const struct db_stmt **p = realloc(db->prepared, n * sizeof(*p));

		if (p == NULL) {
			snprintf(db->err, sizeof(db->err), "out of memory");
			return DB_ERROR;
		}
		db->prepared = p;
		db->aprepared = n;
	}
	res = PQprepare(db->conn, stmt->name, stmt->sql, stmt->nparams, NULL);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		rc = db_classify(db, res, stmt->name);
	else
		db->prepared[db->nprepared++] = stmt;
	PQclear(res);
	return rc;
}

static enum db_rc
db_exec_once(struct db *db, const struct db_stmt *stmt, const char *const *params,
             PGresult **res)
{
	ExecStatusType st;
	enum db_rc rc;

	if (db->pooled) {
		*res = PQexecParams(db->conn, stmt->sql, stmt->nparams, NULL, params, NULL, NULL, 0);
	} else {
		if (!db_is_prepared(db, stmt) && (rc = db_prepare(db, stmt)) != DB_OK)
			return rc;
		*res = PQexecPrepared(db->conn, stmt->name, stmt->nparams, params, NULL, NULL, 0);
	}
	st = PQresultStatus(*res);
	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
		return DB_OK;
	rc = db_classify(db, *res, stmt->name);
	PQclear(*res);
	*res = NULL;
	return rc;
}

enum db_rc
db_exec(struct db *db, const struct db_stmt *stmt, const char *const *params,
        PGresult **res)
{
	bool in_tx;
	enum db_rc rc;

	*res = NULL;
	if ((rc = db_ensure(db)) != DB_OK)
		return rc;
	in_tx = PQtransactionStatus(db->conn) != PQTRANS_IDLE;
	rc = db_exec_once(db, stmt, params, res);
	/* A session dropped while we were idle (server restart, pooler, a
	 * terminated backend) is found only when it is next used. A read can
	 * simply run again on a fresh session; a write cannot, because it may
	 * have committed before the connection went — unless its second run
	 * answers as the caller's own retry would (rerun_safe). */
	if (rc == DB_UNAVAILABLE && stmt->rerun_safe && !in_tx &&
	    PQstatus(db->conn) != CONNECTION_OK) {
		memset(&db->last_failed_connect, 0, sizeof(db->last_failed_connect));
		if ((rc = db_ensure(db)) == DB_OK)
			rc = db_exec_once(db, stmt, params, res);
	}
	return rc;
}

static void
db_batch_clear(struct db_call *calls, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		PQclear(calls[i].res);
		calls[i].res = NULL;
		calls[i].rc = DB_ERROR;
	}
}

/* Drains what a broken pipeline left on the connection. */
static void
db_pipeline_abandon(struct db *db)
{
	PGresult *r;
	int nulls = 0;

	if (PQstatus(db->conn) == CONNECTION_OK) {
		while (nulls < 2 && PQpipelineStatus(db->conn) != PQ_PIPELINE_OFF) {
			r = PQgetResult(db->conn);
			if (r == NULL) {
				nulls++;
				continue;
			}
			nulls = 0;
			if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
				PQclear(r);
				break;
			}
			PQclear(r);
		}
		if (PQexitPipelineMode(db->conn) == 1)
			return;
	}
	/* Cannot get the connection back to a known state: start afresh. */
	PQfinish(db->conn);
	db->conn = NULL;
	db->nprepared = 0;
}

/* Reads the results of n pipelined calls and the closing sync, and leaves
 * pipeline mode. *rc becomes the first failure (it must start as DB_OK).
 * -1 when the pipeline broke (the caller abandons it). */
static int
db_pipeline_collect(struct db *db, struct db_call *calls, int n, enum db_rc *rc)
{
	PGresult *r;
	int i;

	for (i = 0; i < n; i++) {
		ExecStatusType st;

		if ((r = PQgetResult(db->conn)) == NULL)
			return -1;
		st = PQresultStatus(r);
		if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
			calls[i].res = r;
			calls[i].rc = DB_OK;
		} else {
			calls[i].rc = st == PGRES_PIPELINE_ABORTED
			                  ? DB_ERROR
			                  : db_classify(db, r, calls[i].stmt->name);
			if (*rc == DB_OK)
				*rc = calls[i].rc;
			PQclear(r);
		}
		/* each query's results end with a NULL */
		if ((r = PQgetResult(db->conn)) != NULL) {
			PQclear(r);
			return -1;
		}
	}
	r = PQgetResult(db->conn);
	if (r == NULL || PQresultStatus(r) != PGRES_PIPELINE_SYNC) {
		PQclear(r);
		return -1;
	}
	PQclear(r);
	return PQexitPipelineMode(db->conn) == 1 ? 0 : -1;
}

/* Prepares what this session lacks of the calls' statements and enters
 * pipeline mode. */
static enum db_rc
db_pipeline_enter(struct db *db, const struct db_call *calls, int n)
{
	enum db_rc rc;
	int i;

	for (i = 0; i < n && !db->pooled; i++)
		if (!db_is_prepared(db, calls[i].stmt) && (rc = db_prepare(db, calls[i].stmt)) != DB_OK)
			return rc;
	if (PQenterPipelineMode(db->conn) != 1) {
		snprintf(db->err, sizeof(db->err), "cannot enter pipeline mode");
		return DB_ERROR;
	}
	return DB_OK;
}

/* Sends the calls and the closing sync; -1 when the pipeline broke. */
static int
db_pipeline_send(struct db *db, const struct db_call *calls, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if ((db->pooled ? PQsendQueryParams(db->conn, calls[i].stmt->sql, calls[i].stmt->nparams,
		                                    NULL, calls[i].params, NULL, NULL, 0)
		                : PQsendQueryPrepared(db->conn, calls[i].stmt->name,
		                                      calls[i].stmt->nparams, calls[i].params, NULL,
		                                      NULL, 0)) != 1)
			return -1;
	return PQpipelineSync(db->conn) == 1 ? 0 : -1;
}

/* A broken pipeline, abandoned: unavailable when the connection is gone
 * with it. A server that dies first says so (FATAL, e.g. "terminating
 * connection due to unexpected postmaster exit") while libpq still counts
 * the connection as good; only reading on finds the socket closed, so the
 * connection's state is judged after the abandon. The error text is kept
 * when the caller set one and the connection looked good. */
static enum db_rc
db_pipeline_broken(struct db *db, bool keep_error)
{
	if (!keep_error || PQstatus(db->conn) != CONNECTION_OK)
		db_set_error(db, "pipeline", NULL);
	db_pipeline_abandon(db);
	return db->conn == NULL || PQstatus(db->conn) != CONNECTION_OK ? DB_UNAVAILABLE : DB_ERROR;
}

/* One try of db_batch: the calls, then one Sync, in ONE round trip. */
static enum db_rc
db_batch_once(struct db *db, struct db_call *calls, int n)
{
	enum db_rc rc;

	if ((rc = db_pipeline_enter(db, calls, n)) != DB_OK)
		return rc;
	if (db_pipeline_send(db, calls, n) != 0 || db_pipeline_collect(db, calls, n, &rc) != 0)
		return db_pipeline_broken(db, db->err[0] != '\0');
	return rc;
}

enum db_rc
db_batch(struct db *db, struct db_call *calls, int n)
{
	enum db_rc rc;
	int i;

	db_batch_clear(calls, n);
	for (i = 0; i < n; i++)
		if (!calls[i].stmt->rerun_safe)
			return DB_ERROR; /* a programming error: reads only */
	if ((rc = db_ensure(db)) != DB_OK)
		goto out;
	if (PQtransactionStatus(db->conn) != PQTRANS_IDLE) {
		/* a pipeline carries its own implicit transaction: one by one */
		for (i = 0; i < n; i++)
			if ((calls[i].rc = db_exec(db, calls[i].stmt, calls[i].params,
			                           &calls[i].res)) != DB_OK)
				return calls[i].rc;
		return DB_OK;
	}
	db->err[0] = '\0';
	rc = db_batch_once(db, calls, n);
	/* Reads only, so a batch lost with an idle session runs again on a
	 * fresh one, as db_exec runs a read again. */
	if (rc == DB_UNAVAILABLE && (db->conn == NULL || PQstatus(db->conn) != CONNECTION_OK)) {
		db_batch_clear(calls, n);
		memset(&db->last_failed_connect, 0, sizeof(db->last_failed_connect));
		if ((rc = db_ensure(db)) == DB_OK)
			rc = db_batch_once(db, calls, n);
	}
out:
	/* calls that never ran carry the reason the batch stopped */
	for (i = 0; i < n && rc != DB_OK; i++)
		if (calls[i].res == NULL && calls[i].rc == DB_ERROR)
			calls[i].rc = rc;
	return rc;
}

enum db_rc
db_pipeline_tx(struct db *db, struct db_call *calls, int n)
{
	enum db_rc rc;
	PGresult *r;
	int i;

	db_batch_clear(calls, n);
	if ((rc = db_ensure(db)) != DB_OK)
		goto unsent;
	rc = DB_ERROR;
	if (PQtransactionStatus(db->conn) != PQTRANS_IDLE) {
		snprintf(db->err, sizeof(db->err), "db_pipeline_tx inside a transaction");
		goto unsent;
	}
	if ((rc = db_pipeline_enter(db, calls, n)) != DB_OK)
		goto unsent;
	if (PQsendQueryParams(db->conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) != 1 ||
	    db_pipeline_send(db, calls, n) != 0)
		goto broken;
	/* BEGIN */
	r = PQgetResult(db->conn);
	if (r == NULL || PQresultStatus(r) != PGRES_COMMAND_OK) {
		PQclear(r);
		goto broken;
	}
	PQclear(r);
	if ((r = PQgetResult(db->conn)) != NULL) {
		PQclear(r);
		goto broken;
	}
	rc = DB_OK;
	if (db_pipeline_collect(db, calls, n, &rc) != 0)
		goto broken;
	return rc;
broken:
	rc = db_pipeline_broken(db, false);
unsent:
	/* nothing ran (or its results are lost): every call says why */
	for (i = 0; i < n; i++) {
		PQclear(calls[i].res);
		calls[i].res = NULL;
		calls[i].rc = rc;
	}
	return rc;
}

enum db_rc
db_ping(struct db *db)
{
	static const struct db_stmt st_ping = { "db_ping", "SELECT 1", 0, true };

	return db_exec_void(db, &st_ping, NULL);
}

enum db_rc
db_exec_void(struct db *db, const struct db_stmt *stmt, const char *const *params)
{
	PGresult *res = NULL;
	enum db_rc rc = db_exec(db, stmt, params, &res);

	PQclear(res);
	return rc;
}

enum db_rc
db_exec_count(struct db *db, const struct db_stmt *stmt, const char *const *params,
              long long *n)
{
	return db_exec_ll(db, stmt, params, NULL, n);
}

enum db_rc
db_exec_ll(struct db *db, const struct db_stmt *stmt, const char *const *params,
           const char *col, long long *v)
{
	PGresult *res = NULL;
	enum db_rc rc;

	*v = 0;
	if ((rc = db_exec(db, stmt, params, &res)) != DB_OK)
		return rc;
	if (col == NULL)
		*v = PQntuples(res);
	else if (PQntuples(res) == 1)
		*v = db_get_ll(res, 0, col);
	PQclear(res);
	return DB_OK;
}

static enum db_rc
db_simple(struct db *db, const char *sql)
{
	PGresult *res;
	enum db_rc rc = DB_OK;

	res = PQexec(db->conn, sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		rc = db_classify(db, res, sql);
	PQclear(res);
	return rc;
}

enum db_rc
db_begin(struct db *db)
{
	enum db_rc rc = db_ensure(db);

	return rc != DB_OK ? rc : db_simple(db, "BEGIN");
}

enum db_rc
db_commit(struct db *db)
{
	return db_simple(db, "COMMIT");
}

void
db_rollback(struct db *db)
{
	PGresult *res;

	if (db->conn == NULL || PQstatus(db->conn) != CONNECTION_OK ||
	    PQtransactionStatus(db->conn) == PQTRANS_IDLE)
		return;
	res = PQexec(db->conn, "ROLLBACK");
	PQclear(res);
}

enum db_rc
db_script(struct db *db, const char *sql)
{
	PGresult *res;
	enum db_rc rc;

	if ((rc = db_ensure(db)) != DB_OK)
		return rc;
	res = PQexec(db->conn, sql);
	rc = PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK
	         ? DB_OK
	         : db_classify(db, res, "script");
	PQclear(res);
	return rc;
}

const char *
db_role(const struct db *db)
{
	const char *r;

	if (db == NULL || db->conn == NULL || PQstatus(db->conn) != CONNECTION_OK)
		return NULL;
	r = PQparameterStatus(db->conn, "session_authorization");
	return r != NULL && *r != '\0' ? r : PQuser(db->conn);
}

const char *
db_error(const struct db *db)
{
	return db->err;
}

const char *
db_sqlstate(const struct db *db)
{
	return db->sqlstate;
}

PGconn *
db_conn(struct db *db)
{
	return db->conn;
}

const char *
db_get(const PGresult *res, int row, const char *col)
{
	int c = PQfnumber(res, col);

	if (c < 0 || row >= PQntuples(res) || PQgetisnull(res, row, c))
		return NULL;
	return PQgetvalue(res, row, c);
}

long long
db_get_ll(const PGresult *res, int row, const char *col)
{
	const char *v = db_get(res, row, col);

	return v != NULL ? strtoll(v, NULL, 10) : 0;
}

bool
db_get_bool(const PGresult *res, int row, const char *col)
{
	const char *v = db_get(res, row, col);

	return v != NULL && v[0] == 't';
}

/* Frees what db_row_get made of col in the struct at out (a string, a
 * JSON value) and forgets it. */
static void
col_free(const struct db_col *col, void *out)
{
	void **at = (void **)(void *)((char *)out + col->off);

	if (col->type == DB_COL_TEXT)
		free(*at);
	else if (col->type == DB_COL_JSON)
		json_decref(*at);
	else
		return;
	*at = NULL;
}

enum og_rc
db_row_get(const PGresult *res, int row, const struct db_col *cols, size_t ncols, void *out)
{
	size_t i;

	for (i = 0; i < ncols; i++) {
		const char *v = db_get(res, row, cols[i].name);
		char *at = (char *)out + cols[i].off;

		if (cols[i].type == DB_COL_INT)
			*(long long *)(void *)at = v != NULL ? strtoll(v, NULL, 10) : 0;
		else if (cols[i].type == DB_COL_BOOL)
			*(bool *)(void *)at = v != NULL && v[0] == 't';
		else if (cols[i].type == DB_COL_JSON)
			*(json_t **)(void *)at = v != NULL ? json_loads(v, JSON_DECODE_ANY, NULL) : NULL;
		else if ((*(char **)(void *)at = v != NULL ? strdup(v) : NULL) == NULL && v != NULL)
			goto oom;
	}
	return OG_OK;
oom:
	while (i-- > 0)
		col_free(&cols[i], out);
	return OG_ERROR;
}

void
db_row_clear(const struct db_col *cols, size_t ncols, void *out, size_t size)
{
	size_t i;

	for (i = 0; i < ncols; i++)
		col_free(&cols[i], out);
	memset(out, 0, size);
}

enum og_rc
db_rows_get(const PGresult *res, const struct db_col *cols, size_t ncols, size_t size,
            void **arr, int *count)
{
	int n = PQntuples(res), i;
	char *a = calloc(n > 0 ? (size_t)n : 1, size);

	*arr = NULL;
	*count = 0;
	if (a == NULL)
		return OG_ERROR;
	for (i = 0; i < n; i++)
		if (db_row_get(res, i, cols, ncols, a + (size_t)i * size) != OG_OK) {
			db_rows_clear(cols, ncols, size, a, i);
			return OG_ERROR;
		}
	*arr = a;
	*count = n;
	return OG_OK;
}

void
db_rows_clear(const struct db_col *cols, size_t ncols, size_t size, void *arr, int count)
{
	int i;

	for (i = 0; arr != NULL && i < count; i++)
		db_row_clear(cols, ncols, (char *)arr + (size_t)i * size, size);
	free(arr);
}

enum og_rc
db_rows_take(enum og_rc rc, PGresult *res, const struct db_col *cols, size_t ncols,
             size_t size, void **arr, int *count)
{
	*arr = NULL;
	*count = 0;
	if (rc == OG_OK)
		rc = db_rows_get(res, cols, ncols, size, arr, count);
	PQclear(res);
	return rc;
}

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

static json_t *
id_of(const PGresult *res, int i, void *arg)
{
	return json_string(db_get(res, i, "id"));
}

enum og_rc
og_exec_key_ids(struct db *db, const struct db_stmt *stmt, long long client_id, const char *key,
                json_t **ids)
{
	PGresult *res = NULL;
	enum og_rc rc;

	*ids = NULL;
	if ((rc = og_exec_key(db, stmt, client_id, key, &res)) != OG_OK)
		return rc;
	*ids = db_json_array(res, id_of, NULL);
	PQclear(res);
	return *ids != NULL ? OG_OK : OG_ERROR;
}

json_t *
db_json_array(const PGresult *res, db_json_row *row, void *arg)
{
	json_t *list = json_array();
	int i;

	for (i = 0; list != NULL && i < PQntuples(res); i++) {
		json_t *v = row(res, i, arg);

		if (v != NULL && json_array_append_new(list, v) != 0) {
			json_decref(list);
			list = NULL;
		}
	}
	return list;
}

enum db_rc
db_json_rows(struct db *db, const struct db_stmt *stmt, const char *const *params,
             db_json_row *row, void *arg, json_t **out)
{
	PGresult *res = NULL;
	enum db_rc rc = db_exec(db, stmt, params, &res);

	*out = NULL;
	if (rc == DB_OK && (*out = db_json_array(res, row, arg)) == NULL)
		rc = DB_ERROR;
	PQclear(res);
	return rc;
}

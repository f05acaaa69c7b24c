/*
 * db.h — one libpq connection per thread, with lazily prepared statements.
 *
 * Each module owns its SQL as static `struct db_stmt` values and runs them
 * with db_exec(); this module only knows how to prepare, execute, check and
 * recover. A broken connection is reset on the next use, and statements are
 * prepared again on the new session.
 */
#ifndef OG_DB_H
#define OG_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <libpq-fe.h>

#include <jansson.h>

#include "rc.h"

struct db_stmt {
	const char *name;   /* unique prepared-statement name */
	const char *sql;
	int nparams;
	bool rerun_safe;    /* may run again after a lost connection: a read, or a
	                     * statement whose second run answers as a retry would */
};

enum db_rc {
	DB_OK = 0,
	DB_UNAVAILABLE,  /* cannot reach the database: answer 503 */
	DB_CONFLICT,     /* unique violation or serialization failure */
	DB_ERROR,        /* anything else: a bug or a broken invariant */
};

struct db;

struct db *db_new(const char *conninfo, int statement_timeout_ms);
/* pooled: the connection goes through a pooler in transaction mode that
 * keeps no session state (PgBouncer 1.18 and older: no prepared
 * statements). Every statement then travels with its text (unnamed,
 * PQexecParams: the same single round trip, planned on each execution),
 * and the session settings (statement_timeout, ...) are the pooler's to set
 * on its server connections. */
struct db *db_new_pooled(const char *conninfo, int statement_timeout_ms, bool pooled);
void db_free(struct db *db);
/* A function every new or renewed connection runs once, before anything
 * else uses it (the daemons' schema check). Set once, before threads. */
void db_on_connect(void (*hook)(struct db *db));
/* Connects (or reconnects) if needed. */
enum db_rc db_ensure(struct db *db) __attribute__((warn_unused_result));
/* Runs a prepared statement; on DB_OK *res holds a tuples/command result the
 * caller PQclear()s. params may hold NULLs for SQL NULL. */
enum db_rc db_exec(struct db *db, const struct db_stmt *stmt,
                   const char *const *params, PGresult **res)
	__attribute__((warn_unused_result));
/* Does the database answer? One trivial statement (the health check). */
enum db_rc db_ping(struct db *db) __attribute__((warn_unused_result));
/* Runs a prepared statement for what it does: the rows it returns, if
 * any, are dropped. */
enum db_rc db_exec_void(struct db *db, const struct db_stmt *stmt, const char *const *params)
	__attribute__((warn_unused_result));
/* Runs a prepared statement for the rows it returns (or changed, with
 * RETURNING); *n is how many. */
enum db_rc db_exec_count(struct db *db, const struct db_stmt *stmt,
                         const char *const *params, long long *n)
	__attribute__((warn_unused_result));
/* Runs it for col of the one row it returns: *v is 0 when it returns no
 * row, or several (col NULL: *v is how many rows, as db_exec_count). */
enum db_rc db_exec_ll(struct db *db, const struct db_stmt *stmt, const char *const *params,
                      const char *col, long long *v) __attribute__((warn_unused_result));
/* One statement of a batch or a pipelined transaction: set stmt and
 * params; db_batch or db_pipeline_tx fills rc and res (the caller
 * PQclear()s res). */
struct db_call {
	const struct db_stmt *stmt;
	const char *const *params;
	enum db_rc rc;
	PGresult *res;
};

/* Runs n reads (statements marked rerun_safe) in ONE round trip (libpq
 * pipeline mode, one Sync); each has its own result. Returns DB_OK when every call ran;
 * otherwise the first failure (calls after a failed one carry DB_ERROR with
 * no result). Inside a transaction the calls run one by one. */
enum db_rc db_batch(struct db *db, struct db_call *calls, int n);

/* BEGIN and the n calls in ONE round trip (pipeline mode); the
 * transaction is left open for the caller to commit or roll back after
 * looking at each call's result. Statements after a failing one carry
 * DB_ERROR and no result, and the transaction can then only be rolled
 * back. Outside a transaction only. */
enum db_rc db_pipeline_tx(struct db *db, struct db_call *calls, int n);

/* BEGIN / COMMIT / ROLLBACK. db_rollback is a no-op outside a transaction;
 * call it before reusing a connection for a new request, so a session left
 * in a failed transaction is never reused as it is. */
enum db_rc db_begin(struct db *db) __attribute__((warn_unused_result));
enum db_rc db_commit(struct db *db) __attribute__((warn_unused_result));
void db_rollback(struct db *db);
/* Runs a whole SQL script with no parameters (migrations only). */
enum db_rc db_script(struct db *db, const char *sql) __attribute__((warn_unused_result));
/* The last error text (never contains parameter values). */
const char *db_error(const struct db *db);
/* The session's role (session_user, as the server reports it), or NULL
 * while not connected. Owned by db; valid until the connection changes. */
const char *db_role(const struct db *db);
/* The last SQLSTATE, "" when none. */
const char *db_sqlstate(const struct db *db);
PGconn *db_conn(struct db *db);

/* Field access helpers: NULL for SQL NULL. */
const char *db_get(const PGresult *res, int row, const char *col);
long long db_get_ll(const PGresult *res, int row, const char *col);
/* A boolean column: true for 't', false for 'f' and NULL. */
bool db_get_bool(const PGresult *res, int row, const char *col);

/* Rows as typed structs: an owner names, in a table, the column behind
 * each field of its struct; a use case then reads the struct, never the
 * rows. A text column becomes a new string (NULL for SQL NULL) in a
 * char *, an integer a long long (0 for NULL), a boolean a bool, a JSON
 * column a json_t * (any value; NULL for NULL or what does not parse). */
enum db_col_type { DB_COL_TEXT, DB_COL_INT, DB_COL_BOOL, DB_COL_JSON };
struct db_col {
	const char *name;
	size_t off;
	enum db_col_type type;
};
#define DB_TEXT(type, field) { #field, offsetof(type, field), DB_COL_TEXT }
#define DB_INT(type, field)  { #field, offsetof(type, field), DB_COL_INT }
#define DB_BOOL(type, field) { #field, offsetof(type, field), DB_COL_BOOL }
#define DB_JSON(type, field) { #field, offsetof(type, field), DB_COL_JSON }
#define DB_NCOLS(cols) (sizeof(cols) / sizeof((cols)[0]))
/* A list of such structs: v[0..n), owned by the list. */
#define DB_LIST(name, type) \
	struct name {           \
		struct type *v; \
		int n;          \
	}
/* Row row of res into the struct at out. OG_ERROR: out of memory
 * (nothing is kept). */
enum og_rc db_row_get(const PGresult *res, int row, const struct db_col *cols, size_t ncols,
                      void *out) __attribute__((warn_unused_result));
/* Frees the strings and JSON values db_row_get made in out and zeroes the
 * struct of size bytes. */
void db_row_clear(const struct db_col *cols, size_t ncols, void *out, size_t size);
/* Every row of res as a new array of *count structs of size bytes. */
enum og_rc db_rows_get(const PGresult *res, const struct db_col *cols, size_t ncols,
                       size_t size, void **arr, int *count) __attribute__((warn_unused_result));
void db_rows_clear(const struct db_col *cols, size_t ncols, size_t size, void *arr, int count);
/* An owner's read of rows as structs: when rc is OG_OK, res's rows by
 * db_rows_get; res is cleared either way. */
enum og_rc db_rows_take(enum og_rc rc, PGresult *res, const struct db_col *cols, size_t ncols,
                        size_t size, void **arr, int *count) __attribute__((warn_unused_result));

/* The one translation of the database layer's result: DB_OK → OG_OK,
 * DB_UNAVAILABLE → OG_UNAVAILABLE, anything else → OG_ERROR (a caller for
 * which a conflict means something says so before calling this). */
enum og_rc og_rc_of(enum db_rc rc);
/* The table owners' compare-and-set and look-up by key: runs stmt; OG_OK
 * when it returned exactly one row (kept in *res for the caller to
 * PQclear when res is not NULL), none when it returned no row (or more),
 * the database's failure otherwise. */
enum og_rc og_exec_one(struct db *db, const struct db_stmt *stmt, const char *const *params,
                       enum og_rc none, PGresult **res) __attribute__((warn_unused_result));
/* stmt with an id and a text as its parameters (the run's key: $1 client
 * id, $2 key; a job: $1 job id, $2 NULL or a text): its rows in *rows (the
 * caller PQclears them). */
enum og_rc og_exec_key(struct db *db, const struct db_stmt *stmt, long long client_id,
                       const char *key, PGresult **rows) __attribute__((warn_unused_result));
/* A call by the run's key ($1 client id, $2 key) for db_batch: k holds
 * its parameters and must live until the batch has run. */
struct og_key_call {
	char client[24];
	const char *params[2];
};
void og_key_call(struct og_key_call *k, const struct db_stmt *stmt, long long client_id,
                 const char *key, struct db_call *call);
/* The same, for a statement that returns ids: *ids a new JSON array of
 * their "id" column. */
enum og_rc og_exec_key_ids(struct db *db, const struct db_stmt *stmt, long long client_id,
                           const char *key, json_t **ids) __attribute__((warn_unused_result));

/* An owner's rows as JSON, each row's value made by row(res, i, arg); a
 * row it makes nothing of (NULL) is left out. db_json_array: the rows of
 * res as a new array, NULL when out of memory. db_json_rows: runs stmt and
 * gives its rows so in *out (NULL unless DB_OK); the statement's failure,
 * or DB_ERROR when out of memory, for the owner to translate as its other
 * reads. */
typedef json_t *db_json_row(const PGresult *res, int i, void *arg);
json_t *db_json_array(const PGresult *res, db_json_row *row, void *arg);
enum db_rc db_json_rows(struct db *db, const struct db_stmt *stmt, const char *const *params,
                        db_json_row *row, void *arg, json_t **out)
	__attribute__((warn_unused_result));

/* An owner's DB_LIST of struct list read by its column table cols:
 * DB_LIST_CLEAR defines clear(l), which frees the rows and empties l;
 * OG_KEY_LIST defines fn(db, client_id, key, out), the rows of stmt by
 * the run's key (og_exec_key) as out (db_rows_take). Each is written as a
 * declaration, ending with ';' (the struct's tag, declared again). */
#define DB_LIST_CLEAR(clear, list, cols)                                        \
	void clear(struct list *l)                                              \
	{                                                                       \
		db_rows_clear(cols, DB_NCOLS(cols), sizeof(*l->v), l->v, l->n); \
		memset(l, 0, sizeof(*l));                                      \
	}                                                                       \
	struct list
#define OG_KEY_LIST(fn, list, stmt, cols)                                                   \
	enum og_rc fn(struct db *db, long long client_id, const char *key, struct list *out) \
	{                                                                                   \
		PGresult *res = NULL;                                                       \
		enum og_rc rc = og_exec_key(db, stmt, client_id, key, &res);                \
		void *v;                                                                    \
                                                                                            \
		rc = db_rows_take(rc, res, cols, DB_NCOLS(cols), sizeof(*out->v), &v,       \
		                  &out->n);                                                 \
		out->v = v;                                                                 \
		return rc;                                                                  \
	}                                                                                   \
	struct list
#endif

/*
 * migrate.c — applies sql/NNN_*.sql in order, once each.
 *
 * A migration file changed after it was applied is refused: the files are
 * the schema's one source of truth, so a silent divergence is a bug.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "buf.h"
#include "digest.h"
#include "migrate.h"

#define MIGRATE_FILE_MAX (1024 * 1024)
#define MIGRATE_COUNT_MAX 1000

static const char sql_table[] =
	"CREATE TABLE IF NOT EXISTS schema_migrations ("
	"  version text PRIMARY KEY, sha256 text NOT NULL,"
	"  applied_at timestamptz NOT NULL DEFAULT now())";

/* Serialises concurrent `migrate` runs for the length of the transaction. */
static const struct db_stmt st_lock = {
	"migrate_lock", "SELECT pg_advisory_xact_lock(7461283)", 0, false,
};

/* Whether the table exists: --status reads, and a role that only reads
 * (an operator, an auditor) may not create it. */
static const struct db_stmt st_table = {
	"migrate_table", "SELECT to_regclass('schema_migrations') IS NOT NULL AS present",
	0, true,
};

/* The schema's version: the last migration applied (names sort in order). */
static const struct db_stmt st_current = {
	"migrate_current", "SELECT coalesce(max(version), '') AS version FROM schema_migrations",
	0, true,
};

static const struct db_stmt st_applied = {
	"migrate_applied", "SELECT sha256 FROM schema_migrations WHERE version = $1", 1, false,
};

static const struct db_stmt st_record = {
	"migrate_record", "INSERT INTO schema_migrations (version, sha256) VALUES ($1, $2)",
	2, false,
};

/* Who owns the schema (the table's owner, else the database's, as
 * createdb --owner made it) and whether this session is, or is a member of,
 * that role. */
static const struct db_stmt st_owner = {
	"migrate_owner",
	"SELECT r.rolname AS owner, pg_has_role(r.oid, 'MEMBER') AS may, current_user AS me"
	"  FROM pg_roles r"
	" WHERE r.oid = coalesce((SELECT relowner FROM pg_class"
	"                          WHERE oid = to_regclass('schema_migrations')),"
	"                        (SELECT datdba FROM pg_database"
	"                          WHERE datname = current_database()))",
	0, false,
};

static void
errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void
errf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static int
cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* File names NNN_words.sql, digits first so they sort in order. */
static bool
migration_name(const char *n)
{
	size_t len = strlen(n), i = 0;

	while (n[i] >= '0' && n[i] <= '9')
		i++;
	return i >= 3 && n[i] == '_' && len > 4 && strcmp(n + len - 4, ".sql") == 0;
}

static int
list_migrations(const char *dir, char ***names, size_t *count, char *err, size_t errlen)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **v = NULL;
	size_t n = 0;

	if (d == NULL) {
		errf(err, errlen, "%s: %s", dir, strerror(errno));
		return -1;
	}
	while ((e = readdir(d)) != NULL) {
		char **nv;

		if (!migration_name(e->d_name))
			continue;
		if (n == MIGRATE_COUNT_MAX || (nv = realloc(v, (n + 1) * sizeof(*v))) == NULL ||
		    (nv[n] = strdup(e->d_name)) == NULL) {
			errf(err, errlen, "%s: too many migrations or out of memory", dir);
			closedir(d);
			while (n > 0)
				free(v[--n]);
			free(v);
			return -1;
		}
		v = nv;
		n++;
	}
	closedir(d);
	qsort(v, n, sizeof(*v), cmp_names);
	*names = v;
	*count = n;
	return 0;
}

static int
read_file(const char *path, struct buf *b, char *err, size_t errlen)
{
	char chunk[8192];
	FILE *f = fopen(path, "r");
	size_t n;

	if (f == NULL) {
		errf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		if (buf_append(b, chunk, n) != 0) {
			errf(err, errlen, "%s: larger than %d bytes", path, MIGRATE_FILE_MAX);
			fclose(f);
			return -1;
		}
	fclose(f);
	return 0;
}

static void
free_names(char **names, size_t n)
{
	while (n > 0)
		free(names[--n]);
	free(names);
}

/* Whether this session may apply migrations, before it tries: a role that
 * may not is told which role must, instead of the server's "permission
 * denied" halfway through a file. */
static bool
may_apply(struct db *db, const char *first, char *err, size_t errlen)
{
	PGresult *res = NULL;
	bool may;

	if (db_exec(db, &st_owner, NULL, &res) != DB_OK) {
		errf(err, errlen, "%s", db_error(db));
		return false;
	}
	may = PQntuples(res) == 1 && db_get_bool(res, 0, "may");
	if (!may)
		errf(err, errlen,
		     "migration %.*s is pending, and role \"%s\" may not apply it: migrations "
		     "run as the schema's owner, \"%s\" (PGUSER=%s oncegatectl migrate); "
		     "nothing was changed", (int)(strlen(first) - 4), first,
		     PQntuples(res) == 1 ? db_get(res, 0, "me") : "?",
		     PQntuples(res) == 1 ? db_get(res, 0, "owner") : "?",
		     PQntuples(res) == 1 ? db_get(res, 0, "owner") : "?");
	PQclear(res);
	return may;
}

/* Applies (or, when dry, only reports) every migration. */
static int
migrate_run(struct db *db, const char *dir, bool dry, FILE *out, char *err, size_t errlen)
{
	char **names = NULL;
	size_t count = 0, i;
	int done = 0;
	bool present, checked = false;
	PGresult *res = NULL;
	struct buf sql;

	buf_init(&sql, MIGRATE_FILE_MAX);
	if (list_migrations(dir, &names, &count, err, errlen) != 0)
		return -1;
	if (db_begin(db) != DB_OK || db_exec(db, &st_lock, NULL, &res) != DB_OK)
		goto dberr;
	PQclear(res);
	if (db_exec(db, &st_table, NULL, &res) != DB_OK)
		goto dberr;
	present = PQntuples(res) == 1 && PQgetvalue(res, 0, 0)[0] == 't';
	PQclear(res);
	res = NULL;
	if (!present && dry) {
		/* a database no migration ever touched: all of them pending */
		for (i = 0; i < count; i++)
			fprintf(out, MIGRATE_PENDING "  %.*s\n", (int)(strlen(names[i]) - 4),
			        names[i]);
		done = (int)count;
		goto out;
	}
	/* Only the owner creates the table: a role that may only read the
	 * schema gets here with nothing pending, or is told who must run it. */
	if (!present && count > 0) {
		if (!may_apply(db, names[0], err, errlen))
			goto fail;
		checked = true;
		if (db_script(db, sql_table) != DB_OK || db_commit(db) != DB_OK)
			goto dberr;
	}
	db_rollback(db);
	for (i = 0; i < count; i++) {
		char path[4096], hex[DIGEST_HEX_LEN], version[256];
		const char *params[2] = { version, hex };

		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		snprintf(version, sizeof(version), "%.*s", (int)(strlen(names[i]) - 4), names[i]);
		buf_reset(&sql);
		if (read_file(path, &sql, err, errlen) != 0)
			goto fail;
		digest_sha256_hex(sql.data, sql.len, hex);

		if (db_begin(db) != DB_OK || db_exec(db, &st_lock, NULL, &res) != DB_OK)
			goto dberr;
		PQclear(res);
		if (db_exec(db, &st_applied, params, &res) != DB_OK)
			goto dberr;
		if (PQntuples(res) == 1) {
			if (strcmp(PQgetvalue(res, 0, 0), hex) != 0) {
				errf(err, errlen, "%s changed after it was applied (recorded "
				     "sha256 %.12s…, file %.12s…); write a new migration instead",
				     names[i], PQgetvalue(res, 0, 0), hex);
				goto fail;
			}
			if (dry)
				fprintf(out, MIGRATE_APPLIED "  %s\n", version);
			PQclear(res);
			res = NULL;
			db_rollback(db);
			continue;
		}
		PQclear(res);
		res = NULL;
		if (dry) {
			fprintf(out, MIGRATE_PENDING "  %s\n", version);
			db_rollback(db);
			done++;
			continue;
		}
		if (!checked && !may_apply(db, names[i], err, errlen))
			goto fail;
		checked = true;
		if (db_script(db, sql.data) != DB_OK || db_exec(db, &st_record, params, &res) != DB_OK ||
		    db_commit(db) != DB_OK) {
			errf(err, errlen, "%s: %s", names[i], db_error(db));
			goto fail;
		}
		PQclear(res);
		res = NULL;
		fprintf(out, MIGRATE_APPLIED "  %s\n", version);
		done++;
	}
	goto out;
dberr:
	errf(err, errlen, "%s", db_error(db));
fail:
	done = -1;
out:
	PQclear(res);
	db_rollback(db);
	buf_free(&sql);
	free_names(names, count);
	return done;
}

int
migrate_apply(struct db *db, const char *dir, FILE *out, char *err, size_t errlen)
{
	return migrate_run(db, dir, false, out, err, errlen);
}

int
migrate_status(struct db *db, const char *dir, FILE *out, char *err, size_t errlen)
{
	return migrate_run(db, dir, true, out, err, errlen);
}

enum db_rc
migrate_current(struct db *db, char *version, size_t len)
{
	PGresult *res = NULL;
	enum db_rc rc;

	version[0] = '\0';
	if ((rc = db_exec(db, &st_table, NULL, &res)) != DB_OK)
		return rc;
	if (PQntuples(res) != 1 || PQgetvalue(res, 0, 0)[0] != 't') {
		PQclear(res);
		return DB_OK; /* a database no migration touched */
	}
	PQclear(res);
	if ((rc = db_exec(db, &st_current, NULL, &res)) != DB_OK)
		return rc;
	if (PQntuples(res) == 1)
		snprintf(version, len, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	return DB_OK;
}

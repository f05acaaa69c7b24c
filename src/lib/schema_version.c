/*
 * schema_version.c — the schema guard of the daemons; see schema_version.h.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "caps.h"
#include "log.h"
#include "migrate.h"
#include "schema_expected.h"
#include "ready.h"
#include "schema_version.h"
#include "service.h"

static atomic_bool guarded;
static atomic_int state; /* enum schema_version_state */
static atomic_llong last_read_ms;

/* What the last reading found, and what the log last said. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char found[128];
static enum schema_version_state logged = SCHEMA_VERSION_UNKNOWN;
static char logged_found[128];
static bool logged_error;

static long long
now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

const char *
schema_version_expected(void)
{
	return SCHEMA_VERSION_EXPECTED;
}

enum schema_version_state
schema_version_compare(const char *v, const char *expected)
{
	int c = strcmp(v, expected);

	/* Names begin with zero-padded numbers, so they sort in the order they
	 * apply; the same number under another name is a different schema. */
	if (c == 0)
		return SCHEMA_VERSION_MATCH;
	if (strncmp(v, expected, 3) == 0)
		return SCHEMA_VERSION_AHEAD;
	return c < 0 ? SCHEMA_VERSION_BEHIND : SCHEMA_VERSION_AHEAD;
}

/* Called with mu held. */
static void
describe(enum schema_version_state s, char *why, size_t len)
{
	const char *v = found[0] != '\0' ? found : "none";

	switch (s) {
	case SCHEMA_VERSION_MATCH:
		snprintf(why, len, "%s", "");
		break;
	case SCHEMA_VERSION_BEHIND:
		snprintf(why, len,
		         "not serving: the database schema is at %s and this build needs %s; "
		         "run oncegatectl migrate as the schema's owner",
		         v, SCHEMA_VERSION_EXPECTED);
		break;
	case SCHEMA_VERSION_AHEAD:
		snprintf(why, len,
		         "not serving: the database schema is at %s, newer than the %s this "
		         "build knows; install the release that migrated it",
		         v, SCHEMA_VERSION_EXPECTED);
		break;
	default:
		snprintf(why, len, "not serving: the database schema's version is not read yet");
		break;
	}
}

/* One line when the state or the version found changes (mu held). */
static void
log_change(enum schema_version_state s)
{
	struct log_fields f = { 0 };
	char why[256];

	if (s == SCHEMA_VERSION_UNKNOWN || (s == logged && strcmp(found, logged_found) == 0))
		return;
	f.state_from = found[0] != '\0' ? found : "none"; /* found */
	f.state_to = SCHEMA_VERSION_EXPECTED;             /* expected */
	describe(s, why, sizeof(why));
	if (s == SCHEMA_VERSION_MATCH) {
		f.detail = "the database schema is the one this build expects: serving";
		log_event(logged == SCHEMA_VERSION_UNKNOWN ? LOG_LEVEL_INFO : LOG_LEVEL_NOTICE,
		          "schema.current", &f);
		service_status("serving");
		ready_clear(READY_SCHEMA_MISMATCH);
	} else {
		f.reason = s == SCHEMA_VERSION_BEHIND ? "schema_behind" : "schema_ahead";
		f.detail = s == SCHEMA_VERSION_BEHIND
		               ? "the database schema is older than this build: nothing is served "
		                 "or sent until it is migrated (state_from: found, state_to: "
		                 "expected)"
		               : "the database schema is newer than this build: nothing is served "
		                 "or sent (state_from: found, state_to: expected)";
		f.hint = s == SCHEMA_VERSION_BEHIND
		             ? "run oncegatectl migrate as the schema's owner; this process "
		               "serves again by itself"
		             : "install the release that migrated the schema";
		log_event(LOG_LEVEL_ERROR, "schema.mismatch", &f);
		service_status(why);
		ready_set(READY_SCHEMA_MISMATCH, why);
	}
	logged = s;
	snprintf(logged_found, sizeof(logged_found), "%s", found);
}

enum db_rc
schema_version_check(struct db *db)
{
	char v[sizeof(found)];
	enum db_rc rc;
	enum schema_version_state s;

	atomic_store(&last_read_ms, now_ms());
	rc = migrate_current(db, v, sizeof(v));
	pthread_mutex_lock(&mu);
	if (rc != DB_OK) {
		/* unread: nothing is written until a reading succeeds */
		atomic_store(&state, SCHEMA_VERSION_UNKNOWN);
		if (rc == DB_ERROR && !logged_error)
			log_event(LOG_LEVEL_ERROR, "schema.unreadable",
			          &(struct log_fields){ .detail = db_error(db),
			                                .hint = "the role needs SELECT on "
			                                        "schema_migrations (sql/015_roles.sql)" });
		logged_error = rc == DB_ERROR;
		pthread_mutex_unlock(&mu);
		return rc;
	}
	logged_error = false;
	snprintf(found, sizeof(found), "%s", v);
	s = schema_version_compare(v, SCHEMA_VERSION_EXPECTED);
	atomic_store(&state, s);
	if (atomic_load(&guarded))
		log_change(s);
	pthread_mutex_unlock(&mu);
	return DB_OK;
}

static void
on_connect(struct db *db)
{
	schema_version_check(db);
}

void
schema_version_guard(void)
{
	atomic_store(&guarded, true);
	db_on_connect(on_connect);
}

bool
schema_version_ok(void)
{
	return !atomic_load(&guarded) || atomic_load(&state) == SCHEMA_VERSION_MATCH;
}

bool
schema_version_serving(struct db *db)
{
	long long last, now;

	if (schema_version_ok())
		return true;
	now = now_ms();
	last = atomic_load(&last_read_ms);
	/* one thread reads again per interval; the others answer at once */
	if (now - last >= OG_SCHEMA_RECHECK_MS &&
	    atomic_compare_exchange_strong(&last_read_ms, &last, now))
		schema_version_check(db);
	return schema_version_ok();
}

enum schema_version_state
schema_version_why(char *why, size_t len)
{
	enum schema_version_state s;

	pthread_mutex_lock(&mu);
	s = (enum schema_version_state)atomic_load(&state);
	if (!atomic_load(&guarded))
		snprintf(why, len, "%s", "");
	else
		describe(s, why, len);
	pthread_mutex_unlock(&mu);
	return s;
}

/*
 * metrics.c — GET /metrics: see metrics.h for the design.
 *
 * Owns metric_counters. It READS the tables of the ledger, the gate, the
 * outbox and the dispatcher (never writes them): the figures are counts of
 * the rows those modules keep, so they agree with `oncegatectl` and with SQL
 * run by hand, and they survive restarts.
 *
 * Lag, for the operator reading a graph: a claim shows up in the /metrics
 * of the responder that answered it within OG_METRICS_CACHE_MS (a refresh
 * flushes that process's own counts first), and in every other responder's
 * within OG_METRICS_FLUSH_MS + OG_METRICS_CACHE_MS. Everything read from the
 * other tables lags by the cache alone.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "caps.h"
#include "log.h"
#include "metrics.h"

/* metric_counters.name of each enum metrics_counter, in enum order. The
 * flush names them in this order, so concurrent flushes of several
 * responders lock the rows in one order and never deadlock. */
static const char *const counter_names[METRICS_NCOUNTERS] = {
	[METRICS_CLAIM_CLAIMED] = "claims_claimed",
	[METRICS_CLAIM_DUPLICATE] = "claims_duplicate",
	[METRICS_CLAIM_MISMATCH] = "claims_payload_mismatch",
};

/* Upper bounds (le) of the approval-wait histogram, in seconds: from a
 * person answering at once to the default approval expiry of a day. */
static const double wait_bounds[] = {
	1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 43200, 86400,
};
#define NBOUNDS (sizeof(wait_bounds) / sizeof(wait_bounds[0]))

/* Effect states (mirrors enum effect_state, outbox.h) and dead-letter
 * classes (dispatch.c): always listed, zero when none, so a series never
 * disappears from a graph. */
static const char *const effect_states[] = {
	"pending", "sending", "completed", "unknown", "failed", "cancelled",
};
static const char *const letter_classes[] = { "permanent", "exhausted", "unknown" };
/* Mirrors the CHECK on workflow_runs.decision. */
static const char *const decisions[] = { "auto", "approve", "reject", "expired" };

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static atomic_ullong counts[METRICS_NCOUNTERS];

static const struct db_stmt st_flush = {
	"metrics_flush",
	"INSERT INTO metric_counters AS m (name, value)"
	" SELECT * FROM unnest($1::text[], $2::bigint[])"
	" ON CONFLICT (name) DO UPDATE SET value = m.value + EXCLUDED.value,"
	"     updated_at = now()",
	2, false,
};

/* Every figure in one statement, so one answer is one snapshot.
 * $1: the histogram's bounds, negated and ascending. width_bucket(-w, $1)
 * is then the number of bounds b with w <= b, i.e. how many `le` buckets
 * hold the wait w (Prometheus buckets include their upper bound, while
 * width_bucket's include their lower one; negating turns one into the
 * other). Waits are grouped by that number in one pass; metrics.c makes
 * the cumulative counts. */
static const struct db_stmt st_snapshot = {
	"metrics_snapshot",
	"WITH hist AS ("
	"  SELECT width_bucket(-w, $1::float8[]) AS k, count(*) AS n, sum(w) AS s"
	"    FROM (SELECT extract(epoch FROM consumed_at - created_at)::float8 AS w"
	"            FROM approvals WHERE state = 'decided') AS waits"
	"   GROUP BY 1"
	")"
	"SELECT"
	"  (SELECT coalesce(json_object_agg(name, value), '{}') FROM metric_counters)::text"
	"      AS counters,"
	"  (SELECT coalesce(sum(invalid_outputs), 0) FROM workflow_runs"
	"    WHERE invalid_outputs > 0) AS invalid_outputs,"
	"  (SELECT coalesce(json_object_agg(decision, n), '{}') FROM"
	"     (SELECT decision, count(*) AS n FROM workflow_runs"
	"       WHERE decision IS NOT NULL GROUP BY decision) AS d)::text AS decisions,"
	"  (SELECT coalesce(json_object_agg(state, n), '{}') FROM"
	"     (SELECT state, count(*) AS n FROM effect_outbox GROUP BY state) AS e)::text"
	"      AS effects,"
	"  (SELECT count(*) FROM dead_letters WHERE error_class = 'exhausted') AS exhausted,"
	"  (SELECT coalesce(json_object_agg(error_class, n), '{}') FROM"
	"     (SELECT error_class, count(*) AS n FROM dead_letters"
	"       WHERE resolution IS NULL GROUP BY error_class) AS o)::text AS open_letters,"
	"  (SELECT coalesce(extract(epoch FROM now() - min(created_at))::float8, 0)"
	"     FROM dead_letters WHERE resolution IS NULL) AS oldest_open_s,"
	"  (SELECT actions_enabled FROM dispatch_control) AS actions_enabled,"
	"  (SELECT coalesce(blocked_sends, 0) FROM dispatch_control) AS blocked_sends,"
	"  (SELECT coalesce(sum(n), 0) FROM hist) AS wait_count,"
	"  (SELECT coalesce(sum(s), 0)::float8 FROM hist) AS wait_sum,"
	"  (SELECT coalesce(json_object_agg(k, n), '{}') FROM hist)::text AS wait_buckets",
	1, true,
};

void
metrics_count(enum metrics_counter c)
{
	if ((unsigned)c < METRICS_NCOUNTERS)
		atomic_fetch_add_explicit(&counts[c], 1, memory_order_relaxed);
}

enum metrics_rc
metrics_flush(struct db *db)
{
	unsigned long long taken[METRICS_NCOUNTERS];
	char names[METRICS_NCOUNTERS * 40 + 3], values[METRICS_NCOUNTERS * 24 + 3];
	const char *params[2] = { names, values };
	size_t nl = 0, vl = 0;
	bool any = false;
	PGresult *res;
	enum db_rc rc;
	int i;

	for (i = 0; i < METRICS_NCOUNTERS; i++) {
		taken[i] = atomic_exchange_explicit(&counts[i], 0, memory_order_relaxed);
		any = any || taken[i] != 0;
	}
	if (!any)
		return METRICS_OK;
	names[nl++] = '{';
	values[vl++] = '{';
	for (i = 0; i < METRICS_NCOUNTERS; i++) {
		nl += (size_t)snprintf(names + nl, sizeof(names) - nl, "%s%s", i ? "," : "",
		                       counter_names[i]);
		vl += (size_t)snprintf(values + vl, sizeof(values) - vl, "%s%llu", i ? "," : "",
		                       taken[i]);
	}
	snprintf(names + nl, sizeof(names) - nl, "}");
	snprintf(values + vl, sizeof(values) - vl, "}");
	rc = db_exec(db, &st_flush, params, &res);
	PQclear(res);
	if (rc == DB_OK)
		return METRICS_OK;
	/* Keep them for the next flush: a count is late, not lost. */
	for (i = 0; i < METRICS_NCOUNTERS; i++)
		atomic_fetch_add_explicit(&counts[i], taken[i], memory_order_relaxed);
	return rc == DB_UNAVAILABLE ? METRICS_UNAVAILABLE : METRICS_ERROR;
}

/* ---- rendering ---------------------------------------------------------- */

/* What one refresh read. */
struct snapshot {
	json_t *counters, *decisions, *effects, *open_letters, *wait_buckets;
	long long invalid_outputs, exhausted, blocked_sends, wait_count;
	double oldest_open_s, wait_sum;
	bool actions_enabled;
};

static void
snapshot_clear(struct snapshot *s)
{
	json_decref(s->counters);
	json_decref(s->decisions);
	json_decref(s->effects);
	json_decref(s->open_letters);
	json_decref(s->wait_buckets);
	memset(s, 0, sizeof(*s));
}

/* A json_object_agg column; an object whatever happens. */
static json_t *
object_col(const PGresult *res, const char *col)
{
	const char *v = db_get(res, 0, col);
	json_t *o = v != NULL ? json_loads(v, 0, NULL) : NULL;

	if (!json_is_object(o)) {
		json_decref(o);
		o = json_object();
	}
	return o;
}

/* An integer member of o (a count), 0 when absent. */
static long long
member(const json_t *o, const char *name)
{
	json_t *v = json_object_get(o, name);

	return json_is_integer(v) ? (long long)json_integer_value(v) : 0;
}

/* HELP text escapes only backslash and newline; ours are written here, so
 * none has either, and a label value is escaped where it may come from a
 * row (an error class). */
static int
family(struct buf *b, const char *name, const char *type, const char *help)
{
	return buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static int
label_value(struct buf *b, const char *v)
{
	for (; *v != '\0'; v++) {
		int rc;

		if (*v == '\\')
			rc = buf_puts(b, "\\\\");
		else if (*v == '"')
			rc = buf_puts(b, "\\\"");
		else if (*v == '\n')
			rc = buf_puts(b, "\\n");
		else
			rc = buf_append(b, v, 1);
		if (rc != 0)
			return -1;
	}
	return 0;
}

static int
labelled(struct buf *b, const char *name, const char *label, const char *value, long long n)
{
	return buf_printf(b, "%s{%s=\"", name, label) != 0 || label_value(b, value) != 0 ||
	               buf_printf(b, "\"} %lld\n", n) != 0
	           ? -1
	           : 0;
}

/* One family with a label over a fixed list of values, plus any other value
 * the rows hold (so nothing counted is ever hidden). */
static int
labelled_family(struct buf *b, const char *name, const char *type, const char *help,
                const char *label, const char *const *known, size_t nknown, json_t *rows)
{
	const char *k;
	json_t *v;
	size_t i;

	if (family(b, name, type, help) != 0)
		return -1;
	for (i = 0; i < nknown; i++)
		if (labelled(b, name, label, known[i], member(rows, known[i])) != 0)
			return -1;
	json_object_foreach(rows, k, v) {
		for (i = 0; i < nknown; i++)
			if (strcmp(k, known[i]) == 0)
				break;
		if (i == nknown && labelled(b, name, label, k, member(rows, k)) != 0)
			return -1;
	}
	return 0;
}

static int
render_histogram(struct buf *b, const struct snapshot *s)
{
	static const char *const name = "oncegate_approval_wait_seconds";
	long long per_k[NBOUNDS + 1] = { 0 }, cum = 0;
	const char *key;
	json_t *v;
	size_t j;

	if (family(b, name, "histogram",
	           "Time from an approval challenge's creation to a person's decision on it "
	           "(approve or reject), over every decided challenge. Runs the gate "
	           "approves on its own and challenges that expire are not in it.") != 0)
		return -1;
	/* k = how many buckets hold the wait (st_snapshot): the top k. */
	json_object_foreach(s->wait_buckets, key, v) {
		long k = strtol(key, NULL, 10);

		if (k >= 0 && (size_t)k <= NBOUNDS && json_is_integer(v))
			per_k[k] += (long long)json_integer_value(v);
	}
	for (j = 0; j < NBOUNDS; j++) {
		cum += per_k[NBOUNDS - j];
		if (buf_printf(b, "%s_bucket{le=\"%g\"} %lld\n", name, wait_bounds[j], cum) != 0)
			return -1;
	}
	return buf_printf(b, "%s_bucket{le=\"+Inf\"} %lld\n%s_sum %.6f\n%s_count %lld\n", name,
	                  s->wait_count, name, s->wait_sum, name, s->wait_count);
}

static int
render(struct buf *b, const struct snapshot *s)
{
	static const char *const outcomes[] = { "claimed", "duplicate", "payload_mismatch" };
	json_t *claims = json_object();
	size_t i;
	int rc = -1;

	if (claims == NULL)
		return -1;
	for (i = 0; i < METRICS_NCOUNTERS; i++)
		json_object_set_new(claims, outcomes[i],
		                    json_integer(member(s->counters, counter_names[i])));
	if (labelled_family(b, "oncegate_claims_total", "counter",
	                    "Claims (POST /v1/runs) by outcome: claimed (a new key or a reclaim), "
	                    "duplicate (the key exists and cannot be claimed; answered from the "
	                    "ledger, nothing changed), payload_mismatch (same key, different "
	                    "payload). Counted in each responder's memory and added to the "
	                    "database at most a second later.",
	                    "outcome", outcomes, NELEM(outcomes), claims) != 0 ||
	    family(b, "oncegate_duplicate_deliveries_total", "counter",
	           "Deliveries of an event whose key already had a run: the claims answered as "
	           "duplicates (the same figure as oncegate_claims_total{outcome=\"duplicate\"}).") !=
	        0 ||
	    buf_printf(b, "oncegate_duplicate_deliveries_total %lld\n",
	               member(claims, "duplicate")) != 0 ||
	    family(b, "oncegate_validation_failures_total", "counter",
	           "Model outputs that broke their contract (422 invalid), including the one that "
	           "spent a run's repair budget.") != 0 ||
	    buf_printf(b, "oncegate_validation_failures_total %lld\n", s->invalid_outputs) != 0 ||
	    render_histogram(b, s) != 0 ||
	    labelled_family(b, "oncegate_gate_decisions_total", "counter",
	                    "Runs decided at the gate: auto (the contract's rules let it act with "
	                    "no person: approve_by_exception not sampled, act_with_window), approve "
	                    "and reject (a person, on the approval page), expired (nobody decided "
	                    "in time). Auto vs. human: decision=\"auto\" vs. approve + reject.",
	                    "decision", decisions, NELEM(decisions), s->decisions) != 0 ||
	    family(b, "oncegate_retry_budget_exhaustions_total", "counter",
	           "Effects the dispatcher gave up on because the retry budget of their target "
	           "(max_attempts or max_elapsed_s) was spent: dead letters of class exhausted.") !=
	        0 ||
	    buf_printf(b, "oncegate_retry_budget_exhaustions_total %lld\n", s->exhausted) != 0 ||
	    labelled_family(b, "oncegate_effects", "gauge",
	                    "Effects in the outbox by state, now.", "state", effect_states,
	                    NELEM(effect_states), s->effects) != 0 ||
	    labelled_family(b, "oncegate_dead_letters_open", "gauge",
	                    "Dead letters not yet resolved by an operator, by error class.",
	                    "error_class", letter_classes, NELEM(letter_classes),
	                    s->open_letters) != 0 ||
	    family(b, "oncegate_dead_letter_oldest_age_seconds", "gauge",
	           "Age of the oldest dead letter not yet resolved; 0 when there is none.") != 0 ||
	    buf_printf(b, "oncegate_dead_letter_oldest_age_seconds %.3f\n", s->oldest_open_s) !=
	        0 ||
	    family(b, "oncegate_kill_switch_actions_enabled", "gauge",
	           "The database half of the kill switch: 1 while it allows sends (oncegatectl "
	           "kill-switch on), 0 while off. A dispatcher also needs AI_ACTIONS_ENABLED=true "
	           "in its own environment, which the database cannot see.") != 0 ||
	    buf_printf(b, "oncegate_kill_switch_actions_enabled %d\n", s->actions_enabled ? 1 : 0) !=
	        0 ||
	    family(b, "oncegate_dispatch_blocked_sends_total", "counter",
	           "Sends a dispatcher refused because the kill switch was off; the effect stayed "
	           "pending (dispatch_control.blocked_sends, counted by every dispatcher).") != 0 ||
	    buf_printf(b, "oncegate_dispatch_blocked_sends_total %lld\n", s->blocked_sends) != 0)
		goto out;
	rc = 0;
out:
	json_decref(claims);
	return rc;
}

/* ---- the snapshot and the cache ----------------------------------------- */

static enum metrics_rc
snapshot_read(struct db *db, struct snapshot *s)
{
	char bounds[NBOUNDS * 16 + 3];
	const char *params[1] = { bounds };
	size_t n = 0, j;
	const char *v;
	PGresult *res;
	enum db_rc rc;

	/* negated and ascending: see st_snapshot */
	bounds[n++] = '{';
	for (j = 0; j < NBOUNDS; j++)
		n += (size_t)snprintf(bounds + n, sizeof(bounds) - n, "%s%g", j ? "," : "",
		                      -wait_bounds[NBOUNDS - 1 - j]);
	snprintf(bounds + n, sizeof(bounds) - n, "}");

	rc = db_exec(db, &st_snapshot, params, &res);
	if (rc != DB_OK)
		return rc == DB_UNAVAILABLE ? METRICS_UNAVAILABLE : METRICS_ERROR;
	if (PQntuples(res) != 1) {
		PQclear(res);
		return METRICS_ERROR;
	}
	s->counters = object_col(res, "counters");
	s->decisions = object_col(res, "decisions");
	s->effects = object_col(res, "effects");
	s->open_letters = object_col(res, "open_letters");
	s->wait_buckets = object_col(res, "wait_buckets");
	s->invalid_outputs = db_get_ll(res, 0, "invalid_outputs");
	s->exhausted = db_get_ll(res, 0, "exhausted");
	s->blocked_sends = db_get_ll(res, 0, "blocked_sends");
	s->wait_count = db_get_ll(res, 0, "wait_count");
	v = db_get(res, 0, "oldest_open_s");
	s->oldest_open_s = v != NULL ? strtod(v, NULL) : 0;
	v = db_get(res, 0, "wait_sum");
	s->wait_sum = v != NULL ? strtod(v, NULL) : 0;
	v = db_get(res, 0, "actions_enabled");
	s->actions_enabled = v != NULL && strcmp(v, "t") == 0;
	PQclear(res);
	return METRICS_OK;
}

/* The last answer, shared by the worker threads of this process. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t done;     /* a refresh finished */
	struct buf text;
	struct timespec at;      /* CLOCK_MONOTONIC of the last refresh */
	bool valid;
	bool refreshing;         /* one thread is computing a new answer */
} cache = { .lock = PTHREAD_MUTEX_INITIALIZER, .done = PTHREAD_COND_INITIALIZER };

static long long
ms_since(const struct timespec *t)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (long long)(now.tv_sec - t->tv_sec) * 1000 + (now.tv_nsec - t->tv_nsec) / 1000000;
}

static int
copy_out(struct buf *out)
{
	buf_reset(out);
	return buf_append(out, cache.text.data, cache.text.len);
}

static enum metrics_rc
refresh(struct db *db, struct buf *text)
{
	struct snapshot s = { 0 };
	enum metrics_rc rc;

	/* This process's own counts first, so its answer includes them. A failed
	 * flush keeps them for later and does not stop the read. */
	if (metrics_flush(db) != METRICS_OK)
		log_event(LOG_LEVEL_WARNING, "metrics.flush_failed",
		          &(struct log_fields){ .detail = db_error(db),
		                                .hint = "claim counts stay in memory until a "
		                                        "flush succeeds" });
	rc = snapshot_read(db, &s);
	if (rc == METRICS_OK && render(text, &s) != 0)
		rc = METRICS_ERROR;
	snapshot_clear(&s);
	return rc;
}

enum metrics_rc
metrics_text(struct db *db, struct buf *out)
{
	struct buf fresh;
	enum metrics_rc rc;

	pthread_mutex_lock(&cache.lock);
	for (;;) {
		if (cache.valid && !cache.refreshing && ms_since(&cache.at) < OG_METRICS_CACHE_MS) {
			rc = copy_out(out) == 0 ? METRICS_OK : METRICS_ERROR;
			pthread_mutex_unlock(&cache.lock);
			return rc;
		}
		if (!cache.refreshing)
			break;
		/* Another thread is at it: the previous answer (at most one cache
		 * interval plus one query old) rather than a second query. */
		if (cache.valid) {
			rc = copy_out(out) == 0 ? METRICS_OK : METRICS_ERROR;
			pthread_mutex_unlock(&cache.lock);
			return rc;
		}
		pthread_cond_wait(&cache.done, &cache.lock);
	}
	cache.refreshing = true;
	pthread_mutex_unlock(&cache.lock);

	/* The query runs outside the lock: no thread waits on the database
	 * except the first scrape ever, which has nothing older to answer. */
	buf_init(&fresh, OG_METRICS_TEXT_MAX);
	rc = refresh(db, &fresh);

	pthread_mutex_lock(&cache.lock);
	cache.refreshing = false;
	if (rc == METRICS_OK) {
		struct buf old = cache.text;

		cache.text = fresh;
		fresh = old;
		cache.valid = true;
		clock_gettime(CLOCK_MONOTONIC, &cache.at);
		if (copy_out(out) != 0)
			rc = METRICS_ERROR;
	}
	pthread_cond_broadcast(&cache.done);
	pthread_mutex_unlock(&cache.lock);
	buf_free(&fresh);
	return rc;
}

/* ---- the flush thread --------------------------------------------------- */

static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_t thread;
	struct db *db;
	bool running;
	bool stop;
} flusher = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void *
flusher_main(void *arg)
{
	bool failing = false, last;
	struct timespec until;

	(void)arg;
	pthread_mutex_lock(&flusher.lock);
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_sec += OG_METRICS_FLUSH_MS / 1000;
		until.tv_nsec += (long)(OG_METRICS_FLUSH_MS % 1000) * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		while (!flusher.stop &&
		       pthread_cond_timedwait(&flusher.wake, &flusher.lock, &until) == 0)
			;
		last = flusher.stop;
		pthread_mutex_unlock(&flusher.lock);
		if (metrics_flush(flusher.db) != METRICS_OK) {
			/* once per outage, not once a second */
			if (!failing)
				log_event(LOG_LEVEL_WARNING, "metrics.flush_failed",
				          &(struct log_fields){
				              .detail = db_error(flusher.db),
				              .hint = "claim counts stay in memory until a flush "
				                      "succeeds; /metrics lags meanwhile" });
			failing = true;
		} else {
			failing = false;
		}
		pthread_mutex_lock(&flusher.lock);
		if (last)
			break;
	}
	pthread_mutex_unlock(&flusher.lock);
	return NULL;
}

int
metrics_flusher_start(const char *conninfo, int statement_timeout_ms, char *err,
                      size_t errlen)
{
	pthread_condattr_t attr;
	int rc;

	if (flusher.running) {
		snprintf(err, errlen, "the metrics flush thread is already running");
		return -1;
	}
	/* The connection is made on the first flush with something to add:
	 * a responder that answers no claims never opens it. */
	flusher.db = db_new(conninfo, statement_timeout_ms);
	if (flusher.db == NULL || pthread_condattr_init(&attr) != 0) {
		db_free(flusher.db);
		flusher.db = NULL;
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&flusher.wake, &attr);
	pthread_condattr_destroy(&attr);
	flusher.stop = false;
	rc = pthread_create(&flusher.thread, NULL, flusher_main, NULL);
	if (rc != 0) {
		pthread_cond_destroy(&flusher.wake);
		db_free(flusher.db);
		flusher.db = NULL;
		snprintf(err, errlen, "cannot start the metrics flush thread: %s", strerror(rc));
		return -1;
	}
	flusher.running = true;
	return 0;
}

void
metrics_flusher_stop(void)
{
	if (!flusher.running)
		return;
	pthread_mutex_lock(&flusher.lock);
	flusher.stop = true;
	pthread_cond_signal(&flusher.wake);
	pthread_mutex_unlock(&flusher.lock);
	pthread_join(flusher.thread, NULL);
	pthread_cond_destroy(&flusher.wake);
	db_free(flusher.db);
	flusher.db = NULL;
	flusher.running = false;
}

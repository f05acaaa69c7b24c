/*
 * metrics.c — the counts the code bumps (metrics.h), and their flush: the
 * only writer of metric_counters, metric_route_latency and metric_attempts.
 * The other files of the module read those tables (metrics_int.h).
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

#include "buf.h"
#include "log.h"
#include "metrics_int.h"
#include "schema_version.h"

/* The flush names the counters in this order, so concurrent flushes of
 * several responders lock the rows in one order and never deadlock. */
const char *const metrics_counter_names[METRICS_NCOUNTERS] = {
	[METRICS_CLAIM_CLAIMED] = "claims_claimed",
	[METRICS_CLAIM_DUPLICATE] = "claims_duplicate",
	[METRICS_CLAIM_MISMATCH] = "claims_payload_mismatch",
	[METRICS_RUN_LEASE_RECLAIMED] = "runs_lease_reclaimed",
	[METRICS_APPROVAL_REMINDED] = "approvals_reminded",
	[METRICS_APPROVAL_ESCALATED] = "approvals_escalated",
	[METRICS_OUTPUT_SUBMITTED] = "outputs_submitted",
	[METRICS_AUTH_FAILED] = "auth_failed",
};

const double metrics_lat_bounds[METRICS_NLAT] = {
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};

/* The routes' labels: set once (metrics_routes), read by the flush and
 * the exposition from any thread. */
static const struct metrics_route *route_labels;
static atomic_size_t nroute_labels;

void
metrics_routes(const struct metrics_route *routes, size_t n)
{
	route_labels = routes;
	atomic_store_explicit(&nroute_labels, n < METRICS_ROUTES_MAX ? n : METRICS_ROUTES_MAX,
	                      memory_order_release);
}

size_t
metrics_route_labels(const struct metrics_route **routes)
{
	size_t n = atomic_load_explicit(&nroute_labels, memory_order_acquire);

	*routes = route_labels;
	return n;
}

/* Per route of this process: requests per bucket (the last one: above
 * every bound), and the sum in microseconds. */
static atomic_ullong lat_counts[METRICS_ROUTES_MAX][METRICS_NLAT + 1];
static atomic_ullong lat_sum_us[METRICS_ROUTES_MAX];

/* Send attempts of this process by (target, class), flushed to
 * metric_attempts. */
static struct {
	pthread_mutex_t lock;
	size_t n;
	bool full_said;
	struct attempt_count {
		char target[64];
		char cls[16];
		unsigned long long attempts, retries, lease_expired;
	} k[METRICS_ATTEMPT_KEYS];
} att = { .lock = PTHREAD_MUTEX_INITIALIZER };


static atomic_ullong counts[METRICS_NCOUNTERS];

/* $1 methods, $2 routes, $3 bucket arrays (as text), $4 counts, $5 sums;
 * rows in key order so concurrent flushes lock them in one order. Buckets
 * add up element by element. */
static const struct db_stmt st_flush_latency = {
	"metrics_flush_latency",
	"INSERT INTO metric_route_latency AS m (method, route, buckets, count, sum_seconds)"
	" SELECT t.method, t.route, t.b::bigint[], t.n, t.s"
	"   FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::float8[])"
	"        AS t(method, route, b, n, s)"
	"  ORDER BY 1, 2"
	" ON CONFLICT (method, route) DO UPDATE SET"
	"     buckets = ARRAY(SELECT coalesce(x, 0) + coalesce(y, 0)"
	"                       FROM unnest(m.buckets, EXCLUDED.buckets) WITH ORDINALITY"
	"                            AS u(x, y, i) ORDER BY i),"
	"     count = m.count + EXCLUDED.count,"
	"     sum_seconds = m.sum_seconds + EXCLUDED.sum_seconds, updated_at = now()",
	5, false,
};

/* $1 targets, $2 classes, $3 attempts, $4 retries, $5 lease expiries. */
static const struct db_stmt st_flush_attempts = {
	"metrics_flush_attempts",
	"INSERT INTO metric_attempts AS m (target, class, attempts, retries, lease_expired)"
	" SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[])"
	"  ORDER BY 1, 2"
	" ON CONFLICT (target, class) DO UPDATE SET attempts = m.attempts + EXCLUDED.attempts,"
	"     retries = m.retries + EXCLUDED.retries,"
	"     lease_expired = m.lease_expired + EXCLUDED.lease_expired, updated_at = now()",
	5, false,
};

static const struct db_stmt st_flush = {
	"metrics_flush",
	"INSERT INTO metric_counters AS m (name, value)"
	" SELECT * FROM unnest($1::text[], $2::bigint[])"
	" ON CONFLICT (name) DO UPDATE SET value = m.value + EXCLUDED.value,"
	"     updated_at = now()",
	2, false,
};

void
metrics_observe_request(size_t route, double seconds)
{
	size_t k = 0;

	if (route >= METRICS_ROUTES_MAX)
		return;
	if (!(seconds >= 0))
		seconds = 0;
	while (k < METRICS_NLAT && seconds > metrics_lat_bounds[k])
		k++;
	atomic_fetch_add_explicit(&lat_counts[route][k], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&lat_sum_us[route],
	                          (unsigned long long)(seconds * 1e6 + 0.5),
	                          memory_order_relaxed);
}

/* The array parameters of a flush statement ($1 … $5), each a PostgreSQL
 * array literal ("{a,b}") built one element a row. */
#define FLUSH_COLS 5
struct flush_cols {
	struct buf c[FLUSH_COLS];
	bool failed;               /* a column outgrew its cap */
};

static void
cols_open(struct flush_cols *k, size_t cap)
{
	int i;

	k->failed = false;
	for (i = 0; i < FLUSH_COLS; i++) {
		buf_init(&k->c[i], cap);
		k->failed = buf_puts(&k->c[i], "{") != 0 || k->failed;
	}
}

/* What goes before the next row's element: every column has as many. */
static const char *
cols_sep(const struct flush_cols *k)
{
	return k->c[0].len > 1 ? "," : "";
}

/* Closes the arrays, runs st with them and frees them. */
static enum og_rc
cols_exec(struct db *db, const struct db_stmt *st, struct flush_cols *k)
{
	const char *params[FLUSH_COLS];
	enum db_rc rc = DB_ERROR;
	int i;

	for (i = 0; i < FLUSH_COLS; i++) {
		k->failed = buf_puts(&k->c[i], "}") != 0 || k->failed;
		params[i] = k->c[i].data;
	}
	if (!k->failed)
		rc = db_exec_void(db, st, params);
	for (i = 0; i < FLUSH_COLS; i++)
		buf_free(&k->c[i]);
	return rc == DB_OK ? OG_OK : rc == DB_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
}

/* Adds this process's latency observations; on failure they stay. */
static enum og_rc
flush_latency(struct db *db)
{
	unsigned long long taken[METRICS_ROUTES_MAX][METRICS_NLAT + 1], sums[METRICS_ROUTES_MAX];
	const struct metrics_route *labels;
	size_t nroutes = metrics_route_labels(&labels), r, k;
	struct flush_cols cols;
	bool any = false;
	enum og_rc rc;

	for (r = 0; r < nroutes; r++) {
		for (k = 0; k <= METRICS_NLAT; k++) {
			taken[r][k] = atomic_exchange_explicit(&lat_counts[r][k], 0,
			                                       memory_order_relaxed);
			any = any || taken[r][k] != 0;
		}
		sums[r] = atomic_exchange_explicit(&lat_sum_us[r], 0, memory_order_relaxed);
	}
	if (!any)
		return OG_OK;
	cols_open(&cols, 65536);
	for (r = 0; r < nroutes && !cols.failed; r++) {
		const char *sep = cols_sep(&cols);
		unsigned long long total = 0;

		for (k = 0; k <= METRICS_NLAT; k++)
			total += taken[r][k];
		if (total == 0)
			continue;
		/* $1 methods, $2 routes, $3 bucket arrays (as text), $4 counts,
		 * $5 sums; patterns hold braces ({key}): quoted array elements;
		 * they hold no quote or backslash */
		cols.failed = buf_printf(&cols.c[0], "%s%s", sep, labels[r].method) ||
		              buf_printf(&cols.c[1], "%s\"%s\"", sep, labels[r].pattern) ||
		              buf_printf(&cols.c[2], "%s\"{", sep) ||
		              buf_printf(&cols.c[3], "%s%llu", sep, total) ||
		              buf_printf(&cols.c[4], "%s%.6f", sep, (double)sums[r] / 1e6);
		for (k = 0; k <= METRICS_NLAT && !cols.failed; k++)
			cols.failed = buf_printf(&cols.c[2], "%s%llu", k ? "," : "", taken[r][k]) != 0;
		cols.failed = cols.failed || buf_puts(&cols.c[2], "}\"");
	}
	if ((rc = cols_exec(db, &st_flush_latency, &cols)) == OG_OK)
		return OG_OK;
	/* late, not lost */
	for (r = 0; r < nroutes; r++) {
		for (k = 0; k <= METRICS_NLAT; k++)
			atomic_fetch_add_explicit(&lat_counts[r][k], taken[r][k], memory_order_relaxed);
		atomic_fetch_add_explicit(&lat_sum_us[r], sums[r], memory_order_relaxed);
	}
	return rc;
}

void
metrics_count_attempt(const char *target, const char *cls, bool retry, bool lease_expired)
{
	size_t i;

	if (target == NULL || cls == NULL)
		return;
	pthread_mutex_lock(&att.lock);
	for (i = 0; i < att.n; i++)
		if (strcmp(att.k[i].target, target) == 0 && strcmp(att.k[i].cls, cls) == 0)
			break;
	if (i == att.n) {
		if (att.n == METRICS_ATTEMPT_KEYS || strlen(target) >= sizeof(att.k[0].target) ||
		    strlen(cls) >= sizeof(att.k[0].cls)) {
			bool say = !att.full_said;

			att.full_said = true;
			pthread_mutex_unlock(&att.lock);
			if (say)
				log_event(LOG_LEVEL_WARNING, "metrics.attempts_not_counted",
				          &(struct log_fields){ .target = target, .error_class = cls,
				                                .detail = "too many targets and classes in "
				                                          "one process, or a name too long" });
			return;
		}
		snprintf(att.k[i].target, sizeof(att.k[i].target), "%s", target);
		snprintf(att.k[i].cls, sizeof(att.k[i].cls), "%s", cls);
		att.n++;
	}
	att.k[i].attempts++;
	att.k[i].retries += retry ? 1 : 0;
	att.k[i].lease_expired += lease_expired ? 1 : 0;
	pthread_mutex_unlock(&att.lock);
}

/* An element of a text[] literal, quoted. Target names and classes hold
 * no quote or backslash (config and classify.h say what they are). */
static int
array_word(struct buf *b, const char *w)
{
	return buf_printf(b, "%s\"%s\"", b->len > 1 ? "," : "", w);
}

/* Adds this process's attempt counts; on failure they stay. */
static enum og_rc
flush_attempts(struct db *db)
{
	static struct attempt_count taken[METRICS_ATTEMPT_KEYS];
	static pthread_mutex_t one = PTHREAD_MUTEX_INITIALIZER;
	struct flush_cols cols;
	size_t n = 0, i, j;
	enum og_rc rc;

	/* taken[] is static (it is large): one flush at a time */
	pthread_mutex_lock(&one);
	pthread_mutex_lock(&att.lock);
	for (i = 0; i < att.n; i++)
		if (att.k[i].attempts != 0) {
			taken[n++] = att.k[i];
			att.k[i].attempts = att.k[i].retries = att.k[i].lease_expired = 0;
		}
	pthread_mutex_unlock(&att.lock);
	if (n == 0) {
		pthread_mutex_unlock(&one);
		return OG_OK;
	}
	cols_open(&cols, 65536);
	for (i = 0; i < n && !cols.failed; i++) {
		const char *sep = cols_sep(&cols);

		/* $1 targets, $2 classes, $3 attempts, $4 retries, $5 lease expiries */
		cols.failed = array_word(&cols.c[0], taken[i].target) ||
		              array_word(&cols.c[1], taken[i].cls) ||
		              buf_printf(&cols.c[2], "%s%llu", sep, taken[i].attempts) ||
		              buf_printf(&cols.c[3], "%s%llu", sep, taken[i].retries) ||
		              buf_printf(&cols.c[4], "%s%llu", sep, taken[i].lease_expired);
	}
	rc = cols_exec(db, &st_flush_attempts, &cols);
	if (rc != OG_OK) {
		/* late, not lost */
		pthread_mutex_lock(&att.lock);
		for (i = 0; i < n; i++)
			for (j = 0; j < att.n; j++)
				if (strcmp(att.k[j].target, taken[i].target) == 0 &&
				    strcmp(att.k[j].cls, taken[i].cls) == 0) {
					att.k[j].attempts += taken[i].attempts;
					att.k[j].retries += taken[i].retries;
					att.k[j].lease_expired += taken[i].lease_expired;
					break;
				}
		pthread_mutex_unlock(&att.lock);
	}
	pthread_mutex_unlock(&one);
	return rc;
}

void
metrics_count(enum metrics_counter c)
{
	if ((unsigned)c < METRICS_NCOUNTERS)
		atomic_fetch_add_explicit(&counts[c], 1, memory_order_relaxed);
}

enum og_rc
metrics_flush(struct db *db)
{
	unsigned long long taken[METRICS_NCOUNTERS];
	char names[METRICS_NCOUNTERS * 40 + 3], values[METRICS_NCOUNTERS * 24 + 3];
	const char *params[2] = { names, values };
	size_t nl = 0, vl = 0;
	bool any = false;
	enum db_rc rc;
	int i;

	/* Nothing is taken while the schema is not this build's: the counts
	 * wait in memory for the next flush (the schema guard logged why). */
	if (!schema_version_ok())
		return OG_OK;

	enum og_rc lrc = flush_latency(db), arc = flush_attempts(db);

	if (lrc == OG_OK)
		lrc = arc;

	for (i = 0; i < METRICS_NCOUNTERS; i++) {
		taken[i] = atomic_exchange_explicit(&counts[i], 0, memory_order_relaxed);
		any = any || taken[i] != 0;
	}
	if (!any)
		return lrc;
	names[nl++] = '{';
	values[vl++] = '{';
	for (i = 0; i < METRICS_NCOUNTERS; i++) {
		nl += (size_t)snprintf(names + nl, sizeof(names) - nl, "%s%s", i ? "," : "",
		                       metrics_counter_names[i]);
		vl += (size_t)snprintf(values + vl, sizeof(values) - vl, "%s%llu", i ? "," : "",
		                       taken[i]);
	}
	snprintf(names + nl, sizeof(names) - nl, "}");
	snprintf(values + vl, sizeof(values) - vl, "}");
	rc = db_exec_void(db, &st_flush, params);
	if (rc == DB_OK)
		return lrc;
	/* Keep them for the next flush: a count is late, not lost. */
	for (i = 0; i < METRICS_NCOUNTERS; i++)
		atomic_fetch_add_explicit(&counts[i], taken[i], memory_order_relaxed);
	return rc == DB_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
}

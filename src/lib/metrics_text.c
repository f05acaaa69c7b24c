/*
 * metrics_text.c — GET /metrics (metrics_text.h): every figure read in one
 * statement, so one answer is one snapshot; the exposition text made of
 * it; the answer cached per process and shared by its threads.
 *
 * It READS the tables of the ledger, the gate, the outbox and the dead
 * letters and the module's own metric tables (never writes them): the
 * figures are counts of the rows those modules keep, so they agree with
 * `oncegatectl` and with SQL run by hand, and they survive restarts.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "caps.h"
#include "deadletter.h"
#include "ledger.h"
#include "log.h"
#include "metrics_int.h"
#include "metrics_text.h"
#include "outbox.h"

/* Outcome classes of a send attempt (classify.h), always listed. */
static const char *const attempt_classes[] = { "success", "transient", "permanent",
	                                       "ambiguous" };

/* Upper bounds (le) of the approval-wait histogram, in seconds: from a
 * person answering at once to the default approval expiry of a day. */
static const double wait_bounds[] = {
	1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 43200, 86400,
};
#define NBOUNDS (sizeof(wait_bounds) / sizeof(wait_bounds[0]))

/* Dead-letter classes (deadletter.h), like the states of runs and effects
 * and the runs' decisions (their owners name them): always listed, zero
 * when none, so a series never disappears from a graph. */
static const char *const letter_classes[] = { DEADLETTER_PERMANENT, DEADLETTER_EXHAUSTED,
	                                      DEADLETTER_UNKNOWN };

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

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
	"  (SELECT coalesce(json_object_agg(name, value ORDER BY name), '{}') FROM metric_counters)::text"
	"      AS counters,"
	"  (SELECT coalesce(sum(invalid_outputs), 0) FROM workflow_runs"
	"    WHERE invalid_outputs > 0) AS invalid_outputs,"
	"  (SELECT count(*) FROM workflow_runs WHERE invalid_outputs > 0"
	"    AND state = 'failed_terminal' AND error_class = 'validation') AS failed_validation,"
	"  (SELECT coalesce(json_object_agg(decision, n ORDER BY decision), '{}') FROM"
	"     (SELECT decision, count(*) AS n FROM workflow_runs"
	"       WHERE decision IS NOT NULL GROUP BY decision) AS d)::text AS decisions,"
	"  (SELECT coalesce(json_object_agg(state, n ORDER BY state), '{}') FROM"
	"     (SELECT state, count(*) AS n FROM effect_outbox GROUP BY state) AS e)::text"
	"      AS effects,"
	"  (SELECT coalesce(json_object_agg(state, n ORDER BY state), '{}') FROM"
	"     (SELECT state, count(*) AS n FROM workflow_runs GROUP BY state) AS r)::text"
	"      AS runs,"
	"  (SELECT coalesce(sum(exhaustions), 0) FROM dead_letters) AS exhausted,"
	"  (SELECT coalesce(json_object_agg(error_class, n ORDER BY error_class), '{}') FROM"
	"     (SELECT d.error_class, count(*) AS n FROM " METRICS_OPEN_LETTERS
	"       GROUP BY d.error_class) AS o)::text AS open_letters,"
	"  (SELECT coalesce(extract(epoch FROM now() - min(d.created_at))::float8, 0)"
	"     FROM " METRICS_OPEN_LETTERS ") AS oldest_open_s,"
	"  (SELECT actions_enabled FROM dispatch_control) AS actions_enabled,"
	"  (SELECT coalesce(blocked_sends, 0) FROM dispatch_control) AS blocked_sends,"
	"  (SELECT count(*) FROM effect_outbox WHERE held_at IS NOT NULL AND state = 'pending')"
	"      AS held,"
	"  (SELECT count(DISTINCT (client_id, idempotency_key)) FROM approvals"
	"    WHERE state = 'pending' AND expires_at > now()"
	"      AND expires_at <= now() + interval '1 hour') AS expiring_soon,"
	"  (SELECT coalesce(json_agg(x), '[]') FROM"
	"     (SELECT target, class, attempts, retries, lease_expired FROM metric_attempts)"
	"     AS x)::text AS attempts,"
	"  (SELECT coalesce(json_agg(json_build_object('method', method, 'route', route,"
	"       'buckets', buckets, 'count', count, 'sum', sum_seconds)), '[]')"
	"     FROM metric_route_latency)::text AS latency,"
	"  (SELECT coalesce(sum(n), 0) FROM hist) AS wait_count,"
	"  (SELECT coalesce(sum(s), 0)::float8 FROM hist) AS wait_sum,"
	"  (SELECT coalesce(json_object_agg(k, n), '{}') FROM hist)::text AS wait_buckets",
	1, true,
};

/* ---- rendering ---------------------------------------------------------- */

/* What one refresh read. */
struct snapshot {
	json_t *counters, *decisions, *effects, *runs, *open_letters, *wait_buckets;
	json_t *attempts, *latency; /* arrays of objects */
	long long invalid_outputs, failed_validation, exhausted, blocked_sends, wait_count, held, expiring_soon;
	double oldest_open_s, wait_sum;
	bool actions_enabled;
};

/* The snapshot's aggregate columns, each read into the member of its name:
 * a json_object_agg, or a json_agg (array). */
static const struct aggregate {
	const char *col;
	size_t off;
	bool array;
} aggregates[] = {
#define AGG(f, array) { #f, offsetof(struct snapshot, f), array }
	AGG(counters, false), AGG(decisions, false), AGG(effects, false), AGG(runs, false),
	AGG(open_letters, false), AGG(wait_buckets, false), AGG(attempts, true),
	AGG(latency, true),
#undef AGG
};

static json_t **
aggregate_at(struct snapshot *s, const struct aggregate *a)
{
	return (json_t **)(void *)((char *)s + a->off);
}

static void
snapshot_clear(struct snapshot *s)
{
	size_t i;

	for (i = 0; i < NELEM(aggregates); i++)
		json_decref(*aggregate_at(s, &aggregates[i]));
	memset(s, 0, sizeof(*s));
}

/* A json_object_agg (or json_agg, array) column: that type whatever happens. */
static json_t *
json_col(const PGresult *res, const char *col, bool array)
{
	const char *v = db_get(res, 0, col);
	json_t *o = v != NULL ? json_loads(v, 0, NULL) : NULL;

	if (array ? !json_is_array(o) : !json_is_object(o)) {
		json_decref(o);
		o = array ? json_array() : json_object();
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

/* A family of one sample without labels. */
static int
single(struct buf *b, const char *name, const char *type, const char *help, long long n)
{
	return family(b, name, type, help) != 0 || buf_printf(b, "%s %lld\n", name, n) != 0 ? -1 : 0;
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

/* A sample with two labels, both escaped. */
static int
labelled2(struct buf *b, const char *name, const char *l1, const char *v1, const char *l2,
          const char *v2, long long n)
{
	return buf_printf(b, "%s{%s=\"", name, l1) != 0 || label_value(b, v1) != 0 ||
	               buf_printf(b, "\",%s=\"", l2) != 0 || label_value(b, v2) != 0 ||
	               buf_printf(b, "\"} %lld\n", n) != 0
	           ? -1
	           : 0;
}

/* oncegate_effect_attempts_total and _retries_total{target, class}: every
 * class of every target that has attempts, zero when none of a class. */
static int
render_attempts(struct buf *b, const struct snapshot *s)
{
	static const char *const fams[2][3] = {
		{ "oncegate_effect_attempts_total", "attempts",
		  "Send attempts of effects by target and outcome class (success, transient, "
		  "permanent, ambiguous) as the attempt history records them, counted by each "
		  "dispatcher and added at its housekeeping tick; a sending lease that ran out "
		  "is an ambiguous attempt." },
		{ "oncegate_effect_retries_total", "retries",
		  "Send attempts after an effect's first, by target and outcome class: the retry "
		  "rate is sum(rate(oncegate_effect_retries_total)) / "
		  "sum(rate(oncegate_effect_attempts_total))." },
	};
	json_t *targets = json_object(), *row;
	const char *t;
	size_t i, j, f;
	int rc = -1;

	if (targets == NULL)
		return -1;
	json_array_foreach(s->attempts, i, row) {
		const char *target = json_string_value(json_object_get(row, "target"));
		const char *cls = json_string_value(json_object_get(row, "class"));

		if (target == NULL || cls == NULL)
			continue;
		if (json_object_get(targets, target) == NULL)
			json_object_set_new(targets, target, json_object());
		json_object_set(json_object_get(targets, target), cls, row);
	}
	for (f = 0; f < 2; f++) {
		if (family(b, fams[f][0], "counter", fams[f][2]) != 0)
			goto out;
		json_object_foreach(targets, t, row) {
			const char *cls;
			json_t *r;

			for (j = 0; j < NELEM(attempt_classes); j++) {
				r = json_object_get(row, attempt_classes[j]);
				if (labelled2(b, fams[f][0], "target", t, "class", attempt_classes[j],
				              member(r, fams[f][1])) != 0)
					goto out;
			}
			json_object_foreach(row, cls, r) {
				for (j = 0; j < NELEM(attempt_classes); j++)
					if (strcmp(cls, attempt_classes[j]) == 0)
						break;
				if (j == NELEM(attempt_classes) &&
				    labelled2(b, fams[f][0], "target", t, "class", cls,
				              member(r, fams[f][1])) != 0)
					goto out;
			}
		}
	}
	rc = 0;
out:
	json_decref(targets);
	return rc;
}

/* One sample of the latency family: NAME_SUFFIX{method,route[,le]} value. */
static int
latency_sample(struct buf *b, const char *suffix, const char *method, const char *route,
               const char *le, const char *value)
{
	return buf_printf(b, "oncegate_http_request_duration_seconds%s{method=\"", suffix) != 0 ||
	               label_value(b, method) != 0 || buf_puts(b, "\",route=\"") != 0 ||
	               label_value(b, route) != 0 ||
	               (le != NULL && buf_printf(b, "\",le=\"%s", le) != 0) ||
	               buf_printf(b, "\"} %s\n", value) != 0
	           ? -1
	           : 0;
}

/* oncegate_http_request_duration_seconds{method, route}: every route of the
 * responder's table, zero when it has answered nothing yet. */
static int
render_latency(struct buf *b, const struct snapshot *s)
{
	const struct metrics_route *labels;
	size_t r, k, i, nroutes = metrics_route_labels(&labels);
	char le[32], v[48];
	json_t *row;

	if (family(b, "oncegate_http_request_duration_seconds", "histogram",
	           "Time the responder took to answer a request, by route of its route table "
	           "(method and path pattern), from matching the route to the answer being "
	           "ready; every responder's requests, flushed at most a second later.") != 0)
		return -1;
	for (r = 0; r < nroutes; r++) {
		const char *method = labels[r].method, *pattern = labels[r].pattern;
		json_t *found = NULL, *bk;
		long long cum = 0;

		json_array_foreach(s->latency, i, row)
			if (strcmp(json_string_value(json_object_get(row, "method")) ?: "", method) == 0 &&
			    strcmp(json_string_value(json_object_get(row, "route")) ?: "", pattern) == 0)
				found = row;
		bk = json_object_get(found, "buckets");
		for (k = 0; k < METRICS_NLAT; k++) {
			json_t *n = json_array_get(bk, k);

			cum += json_is_integer(n) ? (long long)json_integer_value(n) : 0;
			snprintf(le, sizeof(le), "%g", metrics_lat_bounds[k]);
			snprintf(v, sizeof(v), "%lld", cum);
			if (latency_sample(b, "_bucket", method, pattern, le, v) != 0)
				return -1;
		}
		snprintf(v, sizeof(v), "%lld", member(found, "count"));
		if (latency_sample(b, "_bucket", method, pattern, "+Inf", v) != 0)
			return -1;
		snprintf(v, sizeof(v), "%.6f", json_number_value(json_object_get(found, "sum")));
		if (latency_sample(b, "_sum", method, pattern, NULL, v) != 0)
			return -1;
		snprintf(v, sizeof(v), "%lld", member(found, "count"));
		if (latency_sample(b, "_count", method, pattern, NULL, v) != 0)
			return -1;
	}
	return 0;
}

static long long
sum_member(const json_t *rows, const char *name)
{
	long long n = 0;
	size_t i;
	json_t *row;

	json_array_foreach(rows, i, row)
		n += member(row, name);
	return n;
}

/* The version, lease reclaims, held work, approvals about to lapse and
 * request latency. */
static int
render_build_info(struct buf *b)
{
	return family(b, "oncegate_build_info", "gauge",
	              "The oncegate version that answers this scrape; always 1.") != 0 ||
	               buf_puts(b, "oncegate_build_info{version=\"") != 0 ||
	               label_value(b, PACKAGE_VERSION) != 0 || buf_puts(b, "\"} 1\n") != 0
	           ? -1
	           : 0;
}

static int
render_more(struct buf *b, const struct snapshot *s)
{
	static const char *const leases[] = { "run", "effect" };
	static const char *const followup_actions[] = { "reminded", "escalated" };
	json_t *reclaims = json_object(), *followups = json_object();
	int rc = -1;

	if (reclaims == NULL || followups == NULL) {
		json_decref(reclaims);
		json_decref(followups);
		return -1;
	}
	json_object_set_new(reclaims, "run",
	                    json_integer(member(s->counters, "runs_lease_reclaimed")));
	json_object_set_new(reclaims, "effect",
	                    json_integer(sum_member(s->attempts, "lease_expired")));
	json_object_set_new(followups, "reminded",
	                    json_integer(member(s->counters, "approvals_reminded")));
	json_object_set_new(followups, "escalated",
	                    json_integer(member(s->counters, "approvals_escalated")));
	if (render_build_info(b) != 0 || render_attempts(b, s) != 0 ||
	    labelled_family(b, "oncegate_lease_reclaims_total", "counter",
	                    "Leases that ran out and were taken back: run (a claim took over a "
	                    "run whose owner's lease had ended) and effect (a sending lease "
	                    "ended mid-send, so the effect became unknown and was not resent).",
	                    "lease", leases, NELEM(leases), reclaims) != 0 ||
	    labelled_family(b, "oncegate_approval_followups_total", "counter",
	                    "What the dispatcher did about approvals nobody decided: reminded (a "
	                    "challenge's approvers told again, with a new link) and escalated (an "
	                    "approver entry added to a run nobody decided in time).",
	                    "action", followup_actions, NELEM(followup_actions), followups) != 0 ||
	    single(b, "oncegate_dispatch_held_effects", "gauge",
	           "Effects due now that a dispatcher holds back because sends are stopped "
	           "(pending; each counted once in oncegate_dispatch_blocked_sends_total).",
	           s->held) != 0 ||
	    single(b, "oncegate_approvals_expiring_soon", "gauge",
	           "Runs waiting for a person whose pending approval challenges expire within "
	           "the next hour.", s->expiring_soon) != 0 ||
	    render_latency(b, s) != 0)
		goto out;
	rc = 0;
out:
	json_decref(reclaims);
	json_decref(followups);
	return rc;
}

/* oncegate_effects{state} and oncegate_runs{state}: every state of the
 * outbox's and the ledger's, as their owners name them. */
static int
render_states(struct buf *b, const struct snapshot *s)
{
	const char *effect_states[EFFECT_STATE_COUNT], *run_states[RUN_STATE_COUNT];
	int i;

	for (i = 0; i < EFFECT_STATE_COUNT; i++)
		effect_states[i] = outbox_state_name((enum effect_state)i);
	for (i = 0; i < RUN_STATE_COUNT; i++)
		run_states[i] = ledger_state_name((enum run_state)i);
	return labelled_family(b, "oncegate_effects", "gauge", "Effects in the outbox by state, now.",
	                       "state", effect_states, EFFECT_STATE_COUNT, s->effects) != 0 ||
	               labelled_family(b, "oncegate_runs", "gauge",
	                               "Runs in the ledger by state, now: processing (a workflow "
	                               "holds the run), awaiting_human, approved (its effect "
	                               "queued), completed, failed_retryable, failed_terminal, "
	                               "rejected (a person said no).",
	                               "state", run_states, RUN_STATE_COUNT, s->runs) != 0
	           ? -1
	           : 0;
}

static int
render(struct buf *b, const struct snapshot *s)
{
	static const char *const outcomes[] = { "claimed", "duplicate", "payload_mismatch" };
	const char *decisions[RUN_DECISION_COUNT];
	json_t *claims = json_object();
	size_t i;
	int rc = -1;

	if (claims == NULL)
		return -1;
	for (i = 0; i < RUN_DECISION_COUNT; i++)
		decisions[i] = ledger_decision_name((enum run_decision)i);
	for (i = 0; i < NELEM(outcomes); i++)
		json_object_set_new(claims, outcomes[i],
		                    json_integer(member(s->counters, metrics_counter_names[i])));
	if (labelled_family(b, "oncegate_claims_total", "counter",
	                    "Claims (POST /v1/runs) by outcome: claimed (a new key or a reclaim), "
	                    "duplicate (the key exists and cannot be claimed; answered from the "
	                    "ledger, nothing changed), payload_mismatch (same key, different "
	                    "payload). Counted in each responder's memory and added to the "
	                    "database at most a second later.",
	                    "outcome", outcomes, NELEM(outcomes), claims) != 0 ||
	    single(b, "oncegate_duplicate_deliveries_total", "counter",
	           "Deliveries of an event whose key already had a run: the claims answered as "
	           "duplicates (the same figure as oncegate_claims_total{outcome=\"duplicate\"}).",
	           member(claims, "duplicate")) != 0 ||
	    single(b, "oncegate_outputs_total", "counter",
	           "Model outputs handed in (POST /v1/runs/{key}/output) and checked against "
	           "their contract, valid or not: the denominator of the validation-failure "
	           "rate, rate(oncegate_validation_failures_total) / "
	           "rate(oncegate_outputs_total).",
	           member(s->counters, metrics_counter_names[METRICS_OUTPUT_SUBMITTED])) != 0 ||
	    single(b, "oncegate_auth_failures_total", "counter",
	           "API requests refused with 401: no API key, or one that is not valid "
	           "(unknown or revoked). Counted like the claims.",
	           member(s->counters, metrics_counter_names[METRICS_AUTH_FAILED])) != 0 ||
	    single(b, "oncegate_runs_failed_validation_total", "counter",
	           "Runs that failed for good because their model output still broke its "
	           "contract after the repairs the contract allows (failed_terminal, "
	           "error_class validation).", s->failed_validation) != 0 ||
	    single(b, "oncegate_validation_failures_total", "counter",
	           "Model outputs that broke their contract (422 invalid), including the one that "
	           "spent a run's repair budget.", s->invalid_outputs) != 0 ||
	    render_histogram(b, s) != 0 ||
	    labelled_family(b, "oncegate_gate_decisions_total", "counter",
	                    "Runs decided at the gate: auto (the contract's rules let it act with "
	                    "no person: approve_by_exception not sampled, act_with_window), approve "
	                    "and reject (a person, on the approval page), expired (nobody decided "
	                    "in time). Auto vs. human: decision=\"auto\" vs. approve + reject.",
	                    "decision", decisions, NELEM(decisions), s->decisions) != 0 ||
	    single(b, "oncegate_retry_budget_exhaustions_total", "counter",
	           "Times the dispatcher gave up on an effect because the retry budget of its "
	           "target (max_attempts or max_elapsed_s) was spent: each time, also when an "
	           "operator resumed the effect and its budget was spent again "
	           "(dead_letters.exhaustions).", s->exhausted) != 0 ||
	    render_states(b, s) != 0 ||
	    labelled_family(b, "oncegate_dead_letters_open", "gauge",
	                    "Dead letters open, by error class: the effect is still failed or unknown "
	                    "and no operator settled it (the rule of oncegatectl deadletter list "
	                    "--state open and of report).",
	                    "error_class", letter_classes, NELEM(letter_classes),
	                    s->open_letters) != 0 ||
	    family(b, "oncegate_dead_letter_oldest_age_seconds", "gauge",
	           "Age of the oldest open dead letter; 0 when there is none.") != 0 ||
	    buf_printf(b, "oncegate_dead_letter_oldest_age_seconds %.3f\n", s->oldest_open_s) !=
	        0 ||
	    single(b, "oncegate_kill_switch_engaged", "gauge",
	           "The kill switch: 1 while it stops every send (oncegatectl sends stop), 0 "
	           "while sends are allowed (oncegatectl sends resume). A dispatcher also needs "
	           "AI_ACTIONS_ENABLED=true in its own environment, which the database cannot "
	           "see.",
	           s->actions_enabled ? 0 : 1) != 0 ||
	    single(b, "oncegate_dispatch_blocked_sends_total", "counter",
	           "Effects held back because sends were stopped (the kill switch engaged, or "
	           "AI_ACTIONS_ENABLED not true): each effect due while they are counts once per "
	           "hold, whether a dispatcher saw it in the queue "
	           "or had claimed it and refused it right before its send; it stays pending "
	           "(dispatch_control.blocked_sends, counted by every dispatcher).",
	           s->blocked_sends) != 0 ||
	    render_more(b, s) != 0)
		goto out;
	rc = 0;
out:
	json_decref(claims);
	return rc;
}

/* ---- the snapshot and the cache ----------------------------------------- */

static enum og_rc
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
		return rc == DB_UNAVAILABLE ? OG_UNAVAILABLE : OG_ERROR;
	if (PQntuples(res) != 1) {
		PQclear(res);
		return OG_ERROR;
	}
	for (j = 0; j < NELEM(aggregates); j++)
		*aggregate_at(s, &aggregates[j]) =
			json_col(res, aggregates[j].col, aggregates[j].array);
	s->held = db_get_ll(res, 0, "held");
	s->expiring_soon = db_get_ll(res, 0, "expiring_soon");
	s->invalid_outputs = db_get_ll(res, 0, "invalid_outputs");
	s->failed_validation = db_get_ll(res, 0, "failed_validation");
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
	return OG_OK;
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

static enum og_rc
refresh(struct db *db, struct buf *text)
{
	struct snapshot s = { 0 };
	enum og_rc rc;

	/* This process's own counts first, so its answer includes them. A failed
	 * flush keeps them for later and does not stop the read. */
	if (metrics_flush(db) != OG_OK)
		log_event(LOG_LEVEL_WARNING, "metrics.flush_failed",
		          &(struct log_fields){ .detail = db_error(db),
		                                .hint = "claim counts stay in memory until a "
		                                        "flush succeeds" });
	rc = snapshot_read(db, &s);
	if (rc == OG_OK && render(text, &s) != 0)
		rc = OG_ERROR;
	snapshot_clear(&s);
	return rc;
}

enum og_rc
metrics_text(struct db *db, struct buf *out)
{
	struct buf fresh;
	enum og_rc rc;

	pthread_mutex_lock(&cache.lock);
	for (;;) {
		if (cache.valid && !cache.refreshing && ms_since(&cache.at) < OG_METRICS_CACHE_MS) {
			rc = copy_out(out) == 0 ? OG_OK : OG_ERROR;
			pthread_mutex_unlock(&cache.lock);
			return rc;
		}
		if (!cache.refreshing)
			break;
		/* Another thread is at it: the previous answer (at most one cache
		 * interval plus one query old) rather than a second query. */
		if (cache.valid) {
			rc = copy_out(out) == 0 ? OG_OK : OG_ERROR;
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
	if (rc == OG_OK) {
		struct buf old = cache.text;

		cache.text = fresh;
		fresh = old;
		cache.valid = true;
		clock_gettime(CLOCK_MONOTONIC, &cache.at);
		if (copy_out(out) != 0)
			rc = OG_ERROR;
	}
	pthread_cond_broadcast(&cache.done);
	pthread_mutex_unlock(&cache.lock);
	buf_free(&fresh);
	return rc;
}

enum og_rc
metrics_answer(struct db *db, struct buf *out)
{
	enum og_rc rc = metrics_text(db, out);
	double age = 0;
	bool known = rc == OG_OK;

	if (rc != OG_OK) {
		/* The database is out of reach (or the figures failed): the last
		 * figures this process read, with their age, so that an alert that
		 * fires keeps firing instead of resolving with a failed scrape. */
		log_event(LOG_LEVEL_WARNING, "metrics.stale",
		          &(struct log_fields){ .detail = db_error(db),
		                                .hint = "the figures are the last ones read; "
		                                        "oncegate_database_up is 0" });
		pthread_mutex_lock(&cache.lock);
		if (cache.valid && copy_out(out) == 0) {
			known = true;
			age = (double)ms_since(&cache.at) / 1000.0;
		}
		pthread_mutex_unlock(&cache.lock);
		if (!known) {
			buf_reset(out);
			if (render_build_info(out) != 0)
				return OG_ERROR;
		}
	}
	return family(out, "oncegate_database_up", "gauge",
	              "1 while the responder that answers this scrape reads its figures from "
	              "the database, 0 while it cannot: the other figures are then the last "
	              "ones it read (none after a start without a database).") != 0 ||
	               buf_printf(out, "oncegate_database_up %d\n", rc == OG_OK ? 1 : 0) != 0 ||
	               family(out, "oncegate_metrics_age_seconds", "gauge",
	                      "How old the database figures of this answer are: 0 when read "
	                      "now (within the cache interval), more while the database is out "
	                      "of reach; absent when this process has none.") != 0 ||
	               (known && buf_printf(out, "oncegate_metrics_age_seconds %.3f\n", age) != 0)
	           ? OG_ERROR
	           : OG_OK;
}

/*
 * metrics_report.c — the weekly report's figures (metrics_report.h), read
 * in one statement: counts of the rows the ledger, the gate, the outbox and
 * the dead letters keep, and the lifetime counters of metric_counters.
 */
#include <stdio.h>

#include <jansson.h>

#include "metrics_int.h"
#include "metrics_report.h"

/* The weekly figures, one JSON document. Duplicate deliveries
 * and claims by outcome change no row of their own: the responders add
 * them to metric_counters (sql/007, metrics.c), which holds lifetime
 * totals (since the counters were installed), not figures per period —
 * hence the _lifetime names. */
static const struct db_stmt st_report = {
	"metrics_report",
	"WITH since AS (SELECT now() - make_interval(secs => $1::float8) AS t),"
	" dec AS (SELECT decision, extract(epoch FROM consumed_at - created_at) AS wait"
	"           FROM approvals, since WHERE state = 'decided' AND consumed_at >= since.t)"
	"SELECT json_build_object("
	" 'since', (SELECT og_ts(t) FROM since), 'until', og_ts(now()),"
	" 'runs_claimed', (SELECT count(*) FROM workflow_runs, since WHERE created_at >= since.t),"
	" 'runs_by_state', (SELECT coalesce(json_object_agg(state, n ORDER BY state), '{}') FROM"
	"     (SELECT state, count(*) AS n FROM workflow_runs, since"
	"       WHERE created_at >= since.t GROUP BY state) x),"
	" 'reclaims', (SELECT count(*) FROM run_events, since WHERE event = 'run.claimed'"
	"     AND attempt > 1 AND ts >= since.t),"
	" 'invalid_outputs', (SELECT count(*) FROM run_events, since"
	"     WHERE event = 'run.output_invalid' AND ts >= since.t),"
	" 'failed_validation', (SELECT count(*) FROM workflow_runs, since"
	"     WHERE error_class = 'validation' AND updated_at >= since.t),"
	" 'runs_rejected', (SELECT count(*) FROM workflow_runs, since"
	"     WHERE state = 'rejected' AND decided_at >= since.t),"
	" 'approvals_by_decision', (SELECT coalesce("
	"     json_object_agg(decision, n ORDER BY decision), '{}') FROM"
	"     (SELECT decision, count(*) AS n FROM dec GROUP BY decision) x),"
	" 'approvals_expired', (SELECT count(*) FROM approvals, since WHERE state = 'expired'"
	"     AND expires_at >= since.t),"
	" 'approvals_pending', (SELECT count(*) FROM approvals WHERE state = 'pending'"
	"     AND expires_at > now()),"
	" 'approval_wait_p50_s', (SELECT round(percentile_cont(0.5) WITHIN GROUP"
	"     (ORDER BY wait)::numeric, 1) FROM dec),"
	" 'approval_wait_p95_s', (SELECT round(percentile_cont(0.95) WITHIN GROUP"
	"     (ORDER BY wait)::numeric, 1) FROM dec),"
	" 'decisions', (SELECT coalesce(json_object_agg(decision, n ORDER BY decision), '{}') FROM"
	"     (SELECT decision, count(*) AS n FROM workflow_runs, since"
	"       WHERE decided_at >= since.t AND decision IS NOT NULL GROUP BY decision) x),"
	" 'effects_by_state', (SELECT coalesce(json_object_agg(state, n ORDER BY state), '{}') FROM"
	"     (SELECT state, count(*) AS n FROM effect_outbox, since"
	"       WHERE created_at >= since.t GROUP BY state) x),"
	" 'dead_letters_by_class', (SELECT coalesce("
	"     json_object_agg(error_class, n ORDER BY error_class), '{}') FROM"
	"     (SELECT error_class, count(*) AS n FROM dead_letters, since"
	"       WHERE created_at >= since.t GROUP BY error_class) x),"
	" 'dead_letters_open', (SELECT count(*) FROM " METRICS_OPEN_LETTERS "),"
	" 'oldest_open_dead_letter_s', (SELECT round(extract(epoch FROM now() - min(d.created_at)))"
	"     FROM " METRICS_OPEN_LETTERS "),"
	" 'retry_exhaustions', (SELECT coalesce(sum(exhaustions), 0) FROM dead_letters, since"
	"     WHERE created_at >= since.t),"
	" 'replays', (SELECT count(*) FROM run_replays, since WHERE created_at >= since.t),"
	" 'operator_actions', (SELECT coalesce(json_object_agg(action, n ORDER BY action), '{}') FROM"
	"     (SELECT action, count(*) AS n FROM operator_actions, since"
	"       WHERE ts >= since.t GROUP BY action) x),"
	" 'sends_stopped', (SELECT NOT actions_enabled FROM dispatch_control),"
	" 'blocked_sends', (SELECT blocked_sends FROM dispatch_control),"
	" 'duplicates_lifetime', (SELECT value FROM metric_counters"
	"     WHERE name = 'claims_duplicate'),"
	" 'claims_by_outcome_lifetime', (SELECT coalesce(json_object_agg("
	"     substr(name, 8), value ORDER BY name), '{}') FROM metric_counters"
	"     WHERE name LIKE 'claims\\_%'),"
	" 'counters_updated_at', (SELECT og_ts(max(updated_at)) FROM metric_counters)"
	")::text AS report",
	1, true,
};

enum og_rc
metrics_report(struct db *db, long long since_seconds, json_t **out)
{
	char secs[24];
	const char *params[1] = { secs };
	PGresult *res = NULL;
	enum og_rc rc;

	*out = NULL;
	snprintf(secs, sizeof(secs), "%lld", since_seconds);
	if ((rc = og_exec_one(db, &st_report, params, OG_ERROR, &res)) != OG_OK)
		return rc;
	*out = json_loads(db_get(res, 0, "report"), 0, NULL);
	PQclear(res);
	return *out != NULL ? OG_OK : OG_ERROR;
}

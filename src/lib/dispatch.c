/*
 * dispatch.c — claim, send, settle, reconcile, tick; see dispatch.h.
 *
 * Every change to an effect is a compare-and-set on its state (and, while
 * it is being sent, on this process's lease), so two dispatchers, a slow
 * dispatcher whose lease ran out, or an operator acting at the same moment
 * can never both win: the loser's statement matches no row, and it logs
 * that instead of acting.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "adapter.h"
#include "buf.h"
#include "backoff.h"
#include "canon.h"
#include "classify.h"
#include "digest.h"
#include "dispatch.h"
#include "effect.h"
#include "log.h"
#include "metrics.h"
#include "outbox.h"

/* Reconciliation: "not found" must be seen this many times, a
 * reconcile_interval apart, before an unknown effect is resumed (a provider
 * still working on the request when it was first asked must not be sent it
 * twice); a target that cannot answer this many look-ups dead-letters it. */
#define RECONCILE_NOT_FOUND_TO_RESUME 2
#define RECONCILE_ERRORS_TO_DEAD_LETTER 10
/* A send is started only with at least this much lease left beyond the
 * target's timeout; otherwise the lease is renewed first. */
#define LEASE_MARGIN_S 10
/* A worker claims what it expects to start within this long (see
 * dispatch_worker). */
#define CLAIM_AHEAD_MS 100
/* An effect whose contract is not loaded here is looked at again after
 * this long (seconds). */
#define HOLD_S 30
/* Rows per housekeeping statement. */
#define TICK_BATCH 100

/* --- statements ------------------------------------------------------------ */

/* Due effects, oldest first, leased to this process. The partial index on
 * next_attempt_at (state = 'pending') is the only access path; effects of
 * a window are due at not_before (enqueue sets both). */
static const struct db_stmt st_claim = {
	"dispatch_claim",
	/* = ANY(ARRAY(…)): the chosen ids become one value, so the UPDATE finds
	 * them through the primary key whatever the generic plan guesses for
	 * LIMIT $2 (a join here was planned as a hash over the whole table). */
	"UPDATE effect_outbox e"
	"   SET state = 'sending', lease_owner = $1::uuid,"
	"       lease_expires_at = now() + make_interval(secs => $3::int),"
	"       attempt = e.attempt + 1, first_attempt_at = coalesce(e.first_attempt_at, now()),"
	"       held_at = NULL, updated_at = now()"
	" WHERE e.id = ANY(ARRAY("
	"   SELECT id FROM effect_outbox"
	"    WHERE state = 'pending' AND next_attempt_at <= now() AND not_before <= now()"
	"    ORDER BY next_attempt_at"
	"    LIMIT $2::int"
	"    FOR UPDATE SKIP LOCKED))"
	" RETURNING e.id, e.client_id, e.idempotency_key, e.effect_type, e.target,"
	"       (SELECT c.name FROM api_clients c WHERE c.id = e.client_id) AS client_name,"
	"       e.payload::text AS payload, e.payload_hash, e.provider_key, e.attempt,"
	"       (extract(epoch FROM now() - e.first_attempt_at) * 1000)::bigint AS elapsed_ms,"
	/* what the payload is checked against again right before the send:
	 * the run's output and, for the effect the run proposed, its contract */
	"       (SELECT r.output::text FROM workflow_runs r"
	"         WHERE r.client_id = e.client_id AND r.idempotency_key = e.idempotency_key)"
	"         AS run_output,"
	"       (SELECT r.contract FROM workflow_runs r"
	"         WHERE r.client_id = e.client_id AND r.idempotency_key = e.idempotency_key"
	"           AND r.effect->>'type' = e.effect_type AND r.effect->>'target' = e.target)"
	"         AS run_contract",
	3, false,
};

/* Right before a send: the database half of the kill switch, and whether
 * the lease is still ours and how long it has left. */
static const struct db_stmt st_check = {
	"dispatch_check",
	"SELECT (SELECT actions_enabled FROM dispatch_control) AS enabled,"
	"       (state = 'sending' AND lease_owner = $2::uuid) AS owned,"
	"       extract(epoch FROM lease_expires_at - now())::float8 AS lease_left"
	"  FROM effect_outbox WHERE id = $1::uuid",
	2, true,
};

static const struct db_stmt st_renew = {
	"dispatch_renew",
	"UPDATE effect_outbox SET lease_expires_at = now() + make_interval(secs => $3::int)"
	" WHERE id = $1::uuid AND state = 'sending' AND lease_owner = $2::uuid"
	" RETURNING 1",
	3, false,
};

/* Not sent after all (kill switch, shutdown): pending again, the attempt
 * given back. */
static const struct db_stmt st_release = {
	"dispatch_release",
	"UPDATE effect_outbox"
	"   SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL,"
	"       attempt = attempt - 1,"
	"       first_attempt_at = CASE WHEN attempt = 1 THEN NULL ELSE first_attempt_at END,"
	"       next_attempt_at = now() + make_interval(secs => $3::int), updated_at = now()"
	" WHERE id = $1::uuid AND state = 'sending' AND lease_owner = $2::uuid"
	" RETURNING attempt",
	3, false,
};

/* The rest of a claimed batch keeps its lease while the worker sends the
 * effects before it: one statement for all of them, only when short. */
static const struct db_stmt st_renew_batch = {
	"dispatch_renew_batch",
	"UPDATE effect_outbox SET lease_expires_at = now() + make_interval(secs => $3::int)"
	" WHERE id = ANY($1::uuid[]) AND state = 'sending' AND lease_owner = $2::uuid",
	3, false,
};

/* Shutdown past its deadline: what this process holds and is not sending. */
static const struct db_stmt st_release_unsent = {
	"dispatch_release_unsent",
	"UPDATE effect_outbox"
	"   SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL,"
	"       attempt = attempt - 1,"
	"       first_attempt_at = CASE WHEN attempt = 1 THEN NULL ELSE first_attempt_at END,"
	"       next_attempt_at = now(), updated_at = now()"
	" WHERE lease_owner = $1::uuid AND state = 'sending' AND NOT (id = ANY($2::uuid[]))"
	" RETURNING id",
	2, false,
};

/* Held back by the kill switch: due pending effects not yet marked ($1: one
 * effect just refused before its send, or NULL: any, up to $2) are marked
 * and counted, each once per hold however many dispatchers see it; the
 * claim clears the mark. */
static const struct db_stmt st_hold = {
	"dispatch_hold",
	"WITH held AS ("
	"  UPDATE effect_outbox SET held_at = now()"
	"   WHERE id = ANY(ARRAY("
	"     SELECT id FROM effect_outbox"
	"      WHERE state = 'pending' AND next_attempt_at <= now() AND not_before <= now()"
	"        AND held_at IS NULL AND ($1::uuid IS NULL OR id = $1::uuid)"
	"      LIMIT $2::int FOR UPDATE SKIP LOCKED))"
	"     AND held_at IS NULL"
	"  RETURNING 1"
	")"
	"UPDATE dispatch_control SET blocked_sends = blocked_sends + (SELECT count(*) FROM held)"
	" WHERE (SELECT count(*) FROM held) > 0"
	" RETURNING (SELECT count(*) FROM held) AS n",
	2, false,
};

/* The run's row lock, taken first in a completing transaction: two effects
 * of one run completing at once then see each other, and the second one
 * completes the run. Same lock order as the responder (run, then effects). */
static const struct db_stmt st_lock_run = {
	"dispatch_lock_run",
	"SELECT 1 FROM workflow_runs WHERE client_id = $1::bigint AND idempotency_key = $2"
	"   FOR UPDATE",
	2, false,
};

/* Settles one attempt (send or look-up) by compare-and-set and records it.
 *  $1 effect  $2 expected state  $3 lease owner or NULL  $4 new state
 *  $5 provider id  $6 class  $7 reason  $8 delay ms (pending/unknown)
 *  $9 kind  $10 duration ms  $11 dispatcher  $12 attempt classification
 *  $13 status  $14 evidence  $15 expected reconcile_attempts or NULL */
static const struct db_stmt st_settle = {
	"dispatch_settle",
	"WITH moved AS ("
	"  UPDATE effect_outbox"
	"     SET state = $4, provider_id = coalesce($5, provider_id),"
	"         error_class = $6, reason = $7,"
	"         next_attempt_at = CASE WHEN $4 IN ('pending', 'unknown')"
	"             THEN now() + make_interval(secs => $8::float8 / 1000)"
	"             ELSE next_attempt_at END,"
	"         lease_owner = NULL, lease_expires_at = NULL,"
	"         completed_at = CASE WHEN $4 = 'completed' THEN now() END,"
	"         updated_at = now()"
	"   WHERE id = $1::uuid AND state = $2"
	"     AND ($3::uuid IS NULL OR lease_owner = $3::uuid)"
	"     AND ($15::int IS NULL OR reconcile_attempts = $15::int)"
	"  RETURNING id, attempt, client_id, idempotency_key"
	"), att AS ("
	"  INSERT INTO effect_attempts (effect_id, kind, attempt, started_at, duration_ms,"
	"      dispatcher, classification, reason, status, provider_id, evidence)"
	"  SELECT id, $9, attempt, now() - make_interval(secs => $10::float8 / 1000),"
	"         $10::int, $11, $12, $7, $13::int, $5, $14::jsonb FROM moved"
	")"
	"SELECT attempt FROM moved",
	15, false,
};

/* Runs after st_settle in the same transaction, so the attempt just made is
 * part of the history it copies. */
static const struct db_stmt st_dead_letter = {
	"dispatch_dead_letter",
	"INSERT INTO dead_letters (effect_id, client_id, idempotency_key, component,"
	"    error_class, reason, evidence, next_action, retention_until, owner)"
	"SELECT e.id, e.client_id, e.idempotency_key, 'dispatcher', $2, $3,"
	"  jsonb_build_object("
	"    'event_id', coalesce(r.event_id, r.correlation_id),"
	"    'correlation_id', r.correlation_id,"
	"    'operation', e.effect_type, 'target', e.target,"
	"    'workflow_version', r.workflow_version, 'contract', r.contract,"
	"    'contract_hash', r.contract_hash, 'payload_hash', e.payload_hash,"
	"    'payload_ref', 'effect_outbox/' || e.id || '/payload',"
	"    'idempotency_key', e.idempotency_key, 'provider_key', e.provider_key,"
	"    'ledger_state', r.state, 'effect_state', e.state, 'attempt', e.attempt,"
	"    'max_attempts', $5::int, 'classification', e.error_class, 'reason', e.reason,"
	"    'first_attempt_at', og_ts(e.first_attempt_at),"
	"    'attempts', (SELECT coalesce(jsonb_agg(jsonb_build_object("
	"         'attempt', a.attempt, 'kind', a.kind, 'started_at', og_ts(a.started_at),"
	"         'duration_ms', a.duration_ms, 'dispatcher', a.dispatcher,"
	"         'classification', a.classification, 'reason', a.reason,"
	"         'status', a.status, 'provider_id', a.provider_id, 'evidence', a.evidence)"
	"         ORDER BY a.id), '[]'::jsonb)"
	"       FROM effect_attempts a WHERE a.effect_id = e.id)),"
	"  $4, now() + make_interval(days => $6::int),"
	/* who answers for it until an operator takes it: the workflow's client */
	"  (SELECT 'client:' || c.name FROM api_clients c WHERE c.id = e.client_id)"
	"  FROM effect_outbox e"
	"  JOIN workflow_runs r ON r.client_id = e.client_id"
	"   AND r.idempotency_key = e.idempotency_key"
	" WHERE e.id = $1::uuid"
	" ON CONFLICT (effect_id) DO NOTHING"
	" RETURNING id",
	6, false,
};

/* approved → completed once every effect of the run is completed (or was
 * cancelled inside its window). */
static const struct db_stmt st_run_complete = {
	"dispatch_run_complete",
	"WITH moved AS ("
	"  UPDATE workflow_runs r SET state = 'completed', version = version + 1,"
	"         updated_at = now()"
	"   WHERE r.client_id = $1::bigint AND r.idempotency_key = $2 AND r.state = 'approved'"
	"     AND NOT EXISTS (SELECT 1 FROM effect_outbox e"
	"          WHERE e.client_id = r.client_id AND e.idempotency_key = r.idempotency_key"
	"            AND e.state NOT IN ('completed', 'cancelled'))"
	"  RETURNING client_id, idempotency_key, version, attempt"
	"), ev AS ("
	"  INSERT INTO run_events (client_id, idempotency_key, event, state_from,"
	"      state_to, version, attempt, actor)"
	"  SELECT client_id, idempotency_key, 'run.completed', 'approved', 'completed',"
	"         version, attempt, 'dispatcher' FROM moved"
	")"
	"SELECT version FROM moved",
	2, false,
};

/* unknown effects of targets that can be asked, leased for one interval by
 * pushing next_attempt_at forward. */
static const struct db_stmt st_claim_reconcile = {
	"dispatch_claim_reconcile",
	"UPDATE effect_outbox e"
	"   SET next_attempt_at = now() + make_interval(secs => $2::int),"
	"       reconcile_attempts = e.reconcile_attempts + 1, updated_at = now()"
	" WHERE e.id = ANY(ARRAY("
	"   SELECT id FROM effect_outbox"
	"    WHERE state = 'unknown' AND next_attempt_at <= now() AND target = ANY($1::text[])"
	"    ORDER BY next_attempt_at LIMIT $3::int"
	"    FOR UPDATE SKIP LOCKED))"
	" RETURNING e.id, e.client_id, e.idempotency_key, e.effect_type, e.target,"
	"       (SELECT c.name FROM api_clients c WHERE c.id = e.client_id) AS client_name,"
	"       e.provider_key, e.attempt, e.reconcile_attempts,"
	"       (extract(epoch FROM now() - e.first_attempt_at) * 1000)::bigint AS elapsed_ms,"
	/* only the answers since the last send count: a resumed effect that
	 * is unknown again must be found missing twice again */
	"       (SELECT count(*) FROM effect_attempts a WHERE a.effect_id = e.id"
	"           AND a.kind = 'lookup' AND a.classification = 'not_found'"
	"           AND a.id > coalesce((SELECT max(b.id) FROM effect_attempts b"
	"                 WHERE b.effect_id = e.id AND b.kind = 'send'), 0)) AS not_found,"
	"       (SELECT count(*) FROM effect_attempts a WHERE a.effect_id = e.id"
	"           AND a.kind = 'lookup' AND a.classification = 'error') AS errors",
	3, false,
};

/* A sending lease that ran out: the dispatcher died or stalled mid-send, so
 * the provider may have acted. unknown, never pending. */
static const struct db_stmt st_expire_leases = {
	"dispatch_expire_leases",
	"WITH moved AS ("
	"  UPDATE effect_outbox e"
	"     SET state = 'unknown', error_class = 'ambiguous', reason = 'lease_expired_while_sending',"
	"         lease_owner = NULL, lease_expires_at = NULL, next_attempt_at = now(),"
	"         updated_at = now()"
	"   WHERE e.id = ANY(ARRAY("
	"     SELECT id FROM effect_outbox"
	"      WHERE state = 'sending' AND lease_expires_at < now()"
	"      LIMIT $1::int FOR UPDATE SKIP LOCKED))"
	"     AND e.state = 'sending' AND e.lease_expires_at < now()"
	"  RETURNING e.id, e.attempt, e.target, e.idempotency_key, e.client_id"
	"), att AS ("
	"  INSERT INTO effect_attempts (effect_id, kind, attempt, started_at, duration_ms,"
	"      dispatcher, classification, reason, evidence)"
	"  SELECT id, 'send', attempt, now(), 0, $2, 'ambiguous',"
	"         'lease_expired_while_sending', '{\"request_sent\": \"unknown\"}'::jsonb"
	"    FROM moved"
	")"
	"SELECT id, attempt, target, idempotency_key,"
	"       (SELECT c.name FROM api_clients c WHERE c.id = moved.client_id) AS client_name"
	"  FROM moved",
	2, false,
};

static const struct db_stmt st_switch = {
	"dispatch_switch",
	"SELECT actions_enabled,"
	"       CASE WHEN NOT (actions_enabled AND $1::bool) THEN"
	"         (SELECT count(*) FROM effect_outbox WHERE state = 'pending'"
	"             AND next_attempt_at <= now()) END AS due"
	"  FROM dispatch_control",
	1, true,
};

/* Runs whose every pending challenge has expired, a few at a time. */
static const struct db_stmt st_expired_runs = {
	"dispatch_expired_runs",
	"SELECT x.client_id, x.idempotency_key,"
	"       (SELECT c.name FROM api_clients c WHERE c.id = x.client_id) AS client_name"
	"  FROM (SELECT DISTINCT a.client_id, a.idempotency_key FROM approvals a"
	"         WHERE a.state = 'pending' AND a.expires_at <= now()"
	"         LIMIT $1::int) AS x",
	1, true,
};

static const struct db_stmt st_expire_approvals = {
	"dispatch_expire_approvals",
	"UPDATE approvals SET state = 'expired'"
	" WHERE client_id = $1::bigint AND idempotency_key = $2 AND state = 'pending'"
	"   AND expires_at <= now()"
	" RETURNING id",
	2, false,
};

static const struct db_stmt st_expire_run = {
	"dispatch_expire_run",
	"WITH moved AS ("
	"  UPDATE workflow_runs r"
	"     SET state = 'failed_terminal', error_class = 'approval_expired',"
	"         reason = 'the approval expired before anyone decided',"
	"         decision = 'expired', decided_at = now(), version = version + 1,"
	"         updated_at = now()"
	"   WHERE r.client_id = $1::bigint AND r.idempotency_key = $2"
	"     AND r.state = 'awaiting_human'"
	"     AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.client_id = r.client_id"
	"          AND a.idempotency_key = r.idempotency_key AND a.state IN ('pending', 'decided'))"
	"  RETURNING client_id, idempotency_key, version, attempt, callback_url,"
	"            correlation_id, workflow_version"
	"), ev AS ("
	"  INSERT INTO run_events (client_id, idempotency_key, event, state_from,"
	"      state_to, version, attempt, actor, reason)"
	"  SELECT client_id, idempotency_key, 'run.approval_expired', 'awaiting_human',"
	"         'failed_terminal', version, attempt, 'dispatcher', 'approval_expired'"
	"    FROM moved"
	")"
	"SELECT version, callback_url, correlation_id, workflow_version FROM moved",
	2, false,
};

const char *
dispatch_listen_sql(void)
{
	return "LISTEN oncegate_outbox";
}

/* --- shared state ---------------------------------------------------------- */

static long long
mono_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

struct dispatch_config *
dispatch_config_new(struct config *cfg)
{
	struct dispatch_config *dc = calloc(1, sizeof(*dc));

	if (dc == NULL)
		return NULL;
	dc->cfg = *cfg;
	memset(cfg, 0, sizeof(*cfg));
	dc->refs = 1;
	/* The contracts every payload is checked against again before it is
	 * sent. A directory that does not load holds the effects that need
	 * one (never sent unchecked); the rest go out. */
	dc->contracts = contract_load_dir(dc->cfg.contracts_dir, dc->contracts_err,
	                                  sizeof(dc->contracts_err));
	if (dc->contracts == NULL) {
		struct log_fields f = { .reason = dc->contracts_err,
			                .hint = "effects of runs under a contract wait until the "
			                        "contracts load (SIGHUP)" };

		log_event(LOG_LEVEL_ERROR, "dispatch.contracts_failed", &f);
	}
	pthread_mutex_init(&dc->rate_mu, NULL);
	dc->next_slot_ns = calloc((size_t)(dc->cfg.ntargets > 0 ? dc->cfg.ntargets : 1),
	                          sizeof(long long));
	if (dc->next_slot_ns == NULL) {
		*cfg = dc->cfg;
		contract_set_free(dc->contracts);
		pthread_mutex_destroy(&dc->rate_mu);
		free(dc);
		return NULL;
	}
	return dc;
}

static void
dispatch_config_free(struct dispatch_config *dc)
{
	contract_set_free(dc->contracts);
	config_free(&dc->cfg);
	pthread_mutex_destroy(&dc->rate_mu);
	free(dc->next_slot_ns);
	free(dc);
}

struct dispatch_config *
dispatch_config_get(struct dispatch_shared *s)
{
	struct dispatch_config *dc;

	pthread_mutex_lock(&s->cfg_mu);
	dc = s->current;
	dc->refs++;
	pthread_mutex_unlock(&s->cfg_mu);
	return dc;
}

void
dispatch_config_put(struct dispatch_shared *s, struct dispatch_config *dc)
{
	bool last;

	pthread_mutex_lock(&s->cfg_mu);
	last = --dc->refs == 0;
	pthread_mutex_unlock(&s->cfg_mu);
	if (last)
		dispatch_config_free(dc);
}

void
dispatch_config_swap(struct dispatch_shared *s, struct dispatch_config *dc)
{
	struct dispatch_config *old;

	pthread_mutex_lock(&s->cfg_mu);
	old = s->current;
	s->current = dc;
	pthread_mutex_unlock(&s->cfg_mu);
	dispatch_config_put(s, old);
}

int
dispatch_shared_init(struct dispatch_shared *s, struct dispatch_config *dc)
{
	unsigned char r[16];
	char host[64];
	const char *env = getenv("AI_ACTIONS_ENABLED");

	memset(s, 0, sizeof(*s));
	if (digest_random(r, sizeof(r)) != 0)
		return -1;
	r[6] = (unsigned char)((r[6] & 0x0f) | 0x40);
	r[8] = (unsigned char)((r[8] & 0x3f) | 0x80);
	snprintf(s->owner, sizeof(s->owner),
	         "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
	         r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11],
	         r[12], r[13], r[14], r[15]);
	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = '\0';
	snprintf(s->name, sizeof(s->name), "%s:%ld", host, (long)getpid());
	/* Deny by default: exactly "true" turns it on. */
	s->env_enabled = env != NULL && strcmp(env, "true") == 0;
	atomic_init(&s->db_enabled, false);
	atomic_init(&s->stopping, false);
	s->nslots = dc->cfg.dispatch_workers;
	s->inflight = calloc((size_t)s->nslots, sizeof(*s->inflight));
	if (s->inflight == NULL)
		return -1;
	atomic_init(&s->next_slot, 0);
	pthread_mutex_init(&s->inflight_mu, NULL);
	pthread_mutex_init(&s->cfg_mu, NULL);
	pthread_mutex_init(&s->wake_mu, NULL);
	pthread_cond_init(&s->wake_cv, NULL);
	s->current = dc;
	return 0;
}

void
dispatch_shared_destroy(struct dispatch_shared *s)
{
	if (s->current != NULL)
		dispatch_config_put(s, s->current);
	s->current = NULL;
	pthread_mutex_destroy(&s->cfg_mu);
	pthread_mutex_destroy(&s->inflight_mu);
	pthread_mutex_destroy(&s->wake_mu);
	free(s->inflight);
	s->inflight = NULL;
	pthread_cond_destroy(&s->wake_cv);
}

void
dispatch_wake(struct dispatch_shared *s)
{
	pthread_mutex_lock(&s->wake_mu);
	s->wake_seq++;
	pthread_cond_broadcast(&s->wake_cv);
	pthread_mutex_unlock(&s->wake_mu);
}

/* Sleeps until woken (after `seen`), the timeout, or shutdown. */
static void
wait_wake(struct dispatch_shared *s, unsigned long seen, int timeout_ms)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&s->wake_mu);
	while (s->wake_seq == seen && !atomic_load(&s->stopping))
		if (pthread_cond_timedwait(&s->wake_cv, &s->wake_mu, &until) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&s->wake_mu);
}

static unsigned long
wake_seq(struct dispatch_shared *s)
{
	unsigned long v;

	pthread_mutex_lock(&s->wake_mu);
	v = s->wake_seq;
	pthread_mutex_unlock(&s->wake_mu);
	return v;
}

static bool
sending_allowed(struct dispatch_shared *s)
{
	return s->env_enabled && atomic_load(&s->db_enabled);
}

/* Per-target rate limit, per process: waits for the target's next slot.
 * False when shutdown came first. */
static bool
rate_wait(struct dispatch_shared *s, struct dispatch_config *dc, int ti)
{
	const struct config_target *t = &dc->cfg.targets[ti];
	long long slot, now, gap;

	if (t->rate_per_second <= 0)
		return true;
	gap = 1000000000LL / t->rate_per_second;
	pthread_mutex_lock(&dc->rate_mu);
	now = mono_ns();
	slot = dc->next_slot_ns[ti] > now ? dc->next_slot_ns[ti] : now;
	dc->next_slot_ns[ti] = slot + gap;
	pthread_mutex_unlock(&dc->rate_mu);
	while ((now = mono_ns()) < slot) {
		long long left = slot - now;
		struct timespec ts;

		if (atomic_load(&s->stopping))
			return false;
		if (left > 100000000LL)
			left = 100000000LL;
		ts.tv_sec = 0;
		ts.tv_nsec = (long)left;
		nanosleep(&ts, NULL);
	}
	return true;
}

/* --- one effect ------------------------------------------------------------- */

struct job {
	char id[40];
	long long client_id;
	char client[72];             /* the API client's name (its id if it has none) */
	char *key, *type, *target, *payload, *payload_hash, *provider_key, *run_output;
	char *run_contract;        /* the contract of the effect the run proposed, or NULL */
	int attempt;
	long long elapsed_ms;
	/* reconciliation */
	int reconcile_attempts;
	long long not_found, errors;
};

static char *
dup_field(const PGresult *res, int row, const char *col)
{
	const char *v = db_get(res, row, col);

	return v != NULL ? strdup(v) : NULL;
}

static void
job_clear(struct job *j)
{
	free(j->key);
	free(j->type);
	free(j->target);
	free(j->payload);
	free(j->payload_hash);
	free(j->provider_key);
	free(j->run_output);
	free(j->run_contract);
	memset(j, 0, sizeof(*j));
}

static void
job_read(struct job *j, const PGresult *res, int row)
{
	memset(j, 0, sizeof(*j));
	snprintf(j->id, sizeof(j->id), "%s", db_get(res, row, "id"));
	j->client_id = db_get_ll(res, row, "client_id");
	if (db_get(res, row, "client_name") != NULL)
		snprintf(j->client, sizeof(j->client), "%s", db_get(res, row, "client_name"));
	else
		snprintf(j->client, sizeof(j->client), "%lld", j->client_id);
	j->key = dup_field(res, row, "idempotency_key");
	j->type = dup_field(res, row, "effect_type");
	j->target = dup_field(res, row, "target");
	j->provider_key = dup_field(res, row, "provider_key");
	j->attempt = (int)db_get_ll(res, row, "attempt");
	if (PQfnumber(res, "payload") >= 0) {
		j->payload = dup_field(res, row, "payload");
		j->payload_hash = dup_field(res, row, "payload_hash");
		j->run_output = dup_field(res, row, "run_output");
		j->run_contract = dup_field(res, row, "run_contract");
		j->elapsed_ms = db_get_ll(res, row, "elapsed_ms");
	}
	if (PQfnumber(res, "reconcile_attempts") >= 0) {
		j->elapsed_ms = db_get_ll(res, row, "elapsed_ms");
		j->reconcile_attempts = (int)db_get_ll(res, row, "reconcile_attempts");
		j->not_found = db_get_ll(res, row, "not_found");
		j->errors = db_get_ll(res, row, "errors");
	}
}

static int
target_index(const struct config *cfg, const char *name)
{
	int i;

	for (i = 0; name != NULL && i < cfg->ntargets; i++)
		if (strcmp(cfg->targets[i].name, name) == 0)
			return i;
	return -1;
}

static void
log_effect(enum log_level level, const char *event, const struct job *j,
           const char *from, const char *to, const char *provider_id, const char *error_class,
           const char *reason, long long duration_ms, const char *hint)
{
	struct log_fields f = { 0 };

	f.client = j->client[0] ? j->client : NULL;
	f.key = j->key;
	f.effect_id = j->id;
	f.target = j->target;
	f.attempt = j->attempt;
	f.state_from = from;
	f.state_to = to;
	f.provider_id = provider_id != NULL && *provider_id ? provider_id : NULL;
	f.error_class = error_class;
	f.reason = reason;
	f.duration_ms = duration_ms;
	f.hint = hint;
	f.detail = j->type;
	log_event(level, event, &f);
}

/* The run moved approved → completed with this effect, its last. */
static void
log_run_completed(const struct job *j)
{
	struct log_fields f = { .client = j->client[0] ? j->client : NULL, .key = j->key,
		                .state_from = "approved", .state_to = "completed",
		                .actor = "dispatcher", .effect_id = j->id };

	log_event(LOG_LEVEL_INFO, "run.completed", &f);
}

/* What a settle transaction should do besides the compare-and-set. */
struct settle {
	const char *expect;          /* expected state */
	const char *owner;           /* lease owner, or NULL (reconciliation) */
	const char *to;              /* new state */
	const char *provider_id;
	const char *error_class;
	const char *reason;
	long long delay_ms;          /* pending / unknown: next_attempt_at */
	const char *kind;            /* send | lookup */
	long long duration_ms;
	const char *attempt_class;   /* success … / found / not_found / error */
	int status;
	const json_t *evidence;
	int expect_reconcile;        /* -1: any */
	/* dead letter */
	const char *dl_class;        /* NULL: none */
	const char *dl_action;
	int max_attempts;
	int retention_days;
	bool complete_run;
};

enum settle_rc { SETTLED = 0, SETTLE_LOST, SETTLE_DB };

/* One transaction, one round trip: [lock run,] CAS + history, [dead
 * letter,] [complete run]. */
static enum settle_rc
settle(struct dispatch_shared *s, struct db *db, const struct job *j, const struct settle *st,
       bool *run_completed)
{
	char delay[32], dur[32], status[16], maxa[16], days[16], recon[16];
	char *ev = st->evidence != NULL ? json_dumps(st->evidence, JSON_COMPACT) : NULL;
	char cid[24];
	const char *lock_p[2] = { cid, j->key };
	const char *settle_p[15] = {
		j->id, st->expect, st->owner, st->to, st->provider_id, st->error_class,
		st->reason, delay, st->kind, dur, s->name, st->attempt_class,
		st->status ? status : NULL, ev != NULL ? ev : "{}",
		st->expect_reconcile >= 0 ? recon : NULL,
	};
	const char *dl_p[6] = { j->id, st->dl_class, st->reason, st->dl_action, maxa, days };
	struct db_call calls[4];
	int n = 0, i_settle, i_dl = -1, i_run = -1, k;
	enum settle_rc rc = SETTLE_DB;

	snprintf(cid, sizeof(cid), "%lld", j->client_id);
	snprintf(delay, sizeof(delay), "%lld", st->delay_ms > 0 ? st->delay_ms : 0);
	snprintf(dur, sizeof(dur), "%lld", st->duration_ms);
	snprintf(status, sizeof(status), "%d", st->status);
	snprintf(maxa, sizeof(maxa), "%d", st->max_attempts);
	snprintf(days, sizeof(days), "%d", st->retention_days);
	snprintf(recon, sizeof(recon), "%d", st->expect_reconcile);
	memset(calls, 0, sizeof(calls));
	*run_completed = false;
	if (st->complete_run) {
		calls[n].stmt = &st_lock_run;
		calls[n++].params = lock_p;
	}
	i_settle = n;
	calls[n].stmt = &st_settle;
	calls[n++].params = settle_p;
	if (st->dl_class != NULL) {
		i_dl = n;
		calls[n].stmt = &st_dead_letter;
		calls[n++].params = dl_p;
	}
	if (st->complete_run) {
		i_run = n;
		calls[n].stmt = &st_run_complete;
		calls[n++].params = lock_p;
	}
	(void)db_pipeline_tx(db, calls, n);
	for (k = 0; k < n; k++)
		if (calls[k].rc != DB_OK)
			goto out;
	if (PQntuples(calls[i_settle].res) != 1) {
		rc = SETTLE_LOST;
		goto out;
	}
	(void)i_dl;
	if (db_commit(db) != DB_OK)
		goto out_noroll;
	if (i_run >= 0)
		*run_completed = PQntuples(calls[i_run].res) == 1;
	rc = SETTLED;
	goto out_noroll;
out:
	db_rollback(db);
out_noroll:
	for (k = 0; k < n; k++)
		PQclear(calls[k].res);
	free(ev);
	return rc;
}

/* Marks and counts effects held back by the kill switch (effect_id: that
 * one, or NULL: any due one); how many were new, -1 on a database error. */
static long long
hold(struct db *db, const char *effect_id)
{
	char lim[16];
	const char *p[2] = { effect_id, lim };
	PGresult *res = NULL;
	long long n;

	snprintf(lim, sizeof(lim), "%d", effect_id != NULL ? 1 : 10 * TICK_BATCH);
	if (db_exec(db, &st_hold, p, &res) != DB_OK)
		return -1;
	n = PQntuples(res) == 1 ? db_get_ll(res, 0, "n") : 0;
	PQclear(res);
	return n;
}

static bool
release(struct dispatch_shared *s, struct db *db, const struct job *j, int delay_s)
{
	char d[16];
	const char *p[3] = { j->id, s->owner, d };
	PGresult *res = NULL;
	bool ok;

	snprintf(d, sizeof(d), "%d", delay_s);
	if (db_exec(db, &st_release, p, &res) != DB_OK)
		return false;
	ok = PQntuples(res) == 1;
	PQclear(res);
	return ok;
}

/* What one send of target t needs of its lease (no rate-limit wait: it is
 * over by the time of the check). */
static int
lease_need_s_t(const struct config_target *t)
{
	return LEASE_MARGIN_S + 2 * (t->timeout_ms / 1000 + 1);
}

/* Is sending this effect allowed right now? Reads the kill switch's
 * database half and the lease; renews a lease too short for the send.
 * 1: send; 0: blocked by the switch; -1: not ours any more / no database. */
static int
presend_check(struct dispatch_shared *s, struct db *db, const struct job *j,
              const struct config_target *t, int lease_s)
{
	const char *p[2] = { j->id, s->owner };
	PGresult *res = NULL;
	const char *enabled, *owned, *left;
	int rc = -1;

	if (db_exec(db, &st_check, p, &res) != DB_OK)
		return -1;
	if (PQntuples(res) != 1)
		goto out;
	enabled = db_get(res, 0, "enabled");
	owned = db_get(res, 0, "owned");
	left = db_get(res, 0, "lease_left");
	atomic_store(&s->db_enabled, enabled != NULL && enabled[0] == 't');
	if (owned == NULL || owned[0] != 't')
		goto out;
	if (!s->env_enabled || enabled == NULL || enabled[0] != 't') {
		rc = 0;
		goto out;
	}
	/* keep_batch_leased() made the lease long enough for this send; one
	 * that is not (a clock far off, a renewal that failed) is renewed. */
	if (left == NULL || atof(left) < lease_need_s_t(t)) {
		char secs[16];
		const char *rp[3] = { j->id, s->owner, secs };
		PGresult *r2 = NULL;
		int need = 2 * lease_need_s_t(t);

		snprintf(secs, sizeof(secs), "%d", need > lease_s ? need : lease_s);
		if (db_exec(db, &st_renew, rp, &r2) != DB_OK)
			goto out;
		if (PQntuples(r2) != 1) {
			PQclear(r2);
			goto out;
		}
		PQclear(r2);
	}
	rc = 1;
out:
	PQclear(res);
	return rc;
}

static const char *
next_action_for(const char *dl_class)
{
	if (strcmp(dl_class, "unknown") == 0)
		return "find out whether the provider acted, then `oncegatectl reconcile EFFECT "
		       "--delivered --provider-id ID` or `--not-delivered` (and `resume`)";
	if (strcmp(dl_class, "exhausted") == 0)
		return "check the target, then `oncegatectl resume EFFECT` (same key) or "
		       "`oncegatectl reject EFFECT`";
	return "fix the cause (payload, credentials, target), then `oncegatectl replay KEY "
	       "--new-key NEWKEY` or `oncegatectl reject EFFECT`";
}

enum recheck { RECHECK_SEND = 0, RECHECK_REFUSED, RECHECK_HOLD, RECHECK_NOMEM };

/* Right before the send: the payload that goes out, built and checked
 * again against the run's output and, for the effect the run proposed,
 * its contract as loaded now (effect.h). *text is what to send (the stored
 * text when nothing was added); RECHECK_REFUSED leaves evidence and a
 * reason in *at. */
static enum recheck
recheck(const struct dispatch_config *dc, const struct config_target *t, const struct job *j,
        char **text, struct adapter_attempt *at)
{
	const struct contract *c = NULL;
	json_t *payload = NULL, *output = NULL, *errors = NULL, *sent = NULL;
	enum recheck rc = RECHECK_NOMEM;

	*text = NULL;
	if (j->run_contract != NULL) {
		c = dc->contracts != NULL ? contract_find(dc->contracts, j->run_contract) : NULL;
		if (c == NULL)
			return RECHECK_HOLD;
	}
	payload = j->payload != NULL ? json_loads(j->payload, JSON_DECODE_ANY, NULL) : NULL;
	output = j->run_output != NULL ? json_loads(j->run_output, JSON_DECODE_ANY, NULL) : NULL;
	errors = json_array();
	if (errors == NULL)
		goto out;
	sent = effect_build(c, j->type, strcmp(t->kind, "smtp") == 0, payload, output,
	                    EFFECT_AT_SEND, errors);
	if (sent == NULL && json_array_size(errors) == 0)
		goto out;
	if (sent == NULL) {
		const json_t *e0 = json_array_get(errors, 0);

		snprintf(at->invalid_reason, sizeof(at->invalid_reason), "%s %s",
		         json_string_value(json_object_get(e0, "path")),
		         json_string_value(json_object_get(e0, "message")));
		at->invalid = true;
		at->duration_ms = 1;
		at->evidence = json_pack("{s:s, s:O, s:b}", "invalid", at->invalid_reason,
		                         "errors", errors, "request_sent", 0);
		rc = RECHECK_REFUSED;
		goto out;
	}
	*text = payload != NULL && json_equal(sent, payload)
	            ? strdup(j->payload)
	            : json_dumps(sent, JSON_COMPACT | JSON_ENCODE_ANY);
	rc = *text != NULL ? RECHECK_SEND : RECHECK_NOMEM;
out:
	json_decref(payload);
	json_decref(output);
	json_decref(errors);
	json_decref(sent);
	return rc;
}

/* Sends one claimed effect and settles it. */
static void
process(struct dispatch_shared *s, struct db *db, struct adapter *ad, struct job *j)
{
	struct dispatch_config *dc = dispatch_config_get(s);
	const struct config *cfg = &dc->cfg;
	int ti = target_index(cfg, j->target), chk;
	const struct config_target *t = ti >= 0 ? &cfg->targets[ti] : NULL;
	struct adapter_effect e = { j->id, j->type, j->provider_key, NULL };
	struct adapter_attempt at;
	char *sent = NULL;
	enum recheck rck;
	struct outcome o;
	struct settle st;
	const char *hint = NULL;
	bool run_done = false;
	enum settle_rc src;

	memset(&at, 0, sizeof(at));
	memset(&st, 0, sizeof(st));
	st.expect = "sending";
	st.owner = s->owner;
	st.kind = "send";
	st.expect_reconcile = -1;
	st.retention_days = cfg->retention_days;

	if (t == NULL) {
		/* Nothing can be sent to a target this dispatcher does not know:
		 * nothing went out, so a later resume is safe. */
		at.evidence = json_pack("{s:s, s:b}", "invalid", "target not configured",
		                        "request_sent", 0);
		at.duration_ms = 1;
		st.to = "failed";
		st.error_class = "permanent";
		st.reason = "target_not_configured";
		st.attempt_class = "permanent";
		st.dl_class = "permanent";
		st.max_attempts = 1;
		goto settle_it;
	}
	st.max_attempts = t->max_attempts;
	if (!rate_wait(s, dc, ti)) {
		(void)release(s, db, j, 0);
		goto out;
	}
	chk = presend_check(s, db, j, t, cfg->dispatch_lease_seconds);
	if (chk < 0) {
		log_effect(LOG_LEVEL_WARNING, "effect.lease_lost", j, "sending", NULL, NULL, NULL,
		           "lease no longer held or database unavailable: not sent", 0,
		           "another dispatcher or the lease sweep owns it now");
		goto out;
	}
	if (chk == 0) {
		if (release(s, db, j, 0)) {
			j->attempt--;
			(void)hold(db, j->id);
			log_effect(LOG_LEVEL_NOTICE, "dispatch.blocked", j, "sending", "pending", NULL,
			           NULL, s->env_enabled ? "kill switch off (database flag)"
			                                : "kill switch off (AI_ACTIONS_ENABLED)",
			           0, "oncegatectl kill-switch status");
		}
		goto out;
	}

	rck = recheck(dc, t, j, &sent, &at);
	if (rck == RECHECK_HOLD || rck == RECHECK_NOMEM) {
		/* Not checked, so not sent: pending again, the attempt given back. */
		if (release(s, db, j, HOLD_S))
			log_effect(LOG_LEVEL_WARNING, "effect.held", j, "sending", "pending", NULL,
			           NULL, rck == RECHECK_HOLD ? "contract_not_loaded" : "out_of_memory",
			           0, rck == RECHECK_HOLD ? "the run's contract is not loaded here: "
			                                    "check contracts_dir, then SIGHUP"
			                                  : NULL);
		goto out;
	}
	log_effect(LOG_LEVEL_INFO, "effect.claimed", j, "pending", "sending", NULL, NULL, NULL,
	           0, NULL);
	if (rck == RECHECK_SEND) {
		e.payload = sent;
		adapter_send(ad, t, &e, &at);
	}
	if (at.invalid) {
		/* Nothing went out: what cannot be sent as approved never is. */
		o.cls = OUTCOME_PERMANENT;
		o.reason = REASON_INVALID_INPUT;
		o.retry_after_ms = -1;
		st.reason = "payload_invalid";
		hint = at.invalid_reason;
	} else {
		o = classify_attempt(&at.r, time(NULL));
		st.reason = classify_reason_name(o.reason);
		log_effect(LOG_LEVEL_INFO, "effect.sent", j, NULL, NULL, at.provider_id,
		           classify_class_name(o.cls), st.reason, at.duration_ms, NULL);
	}
	st.error_class = classify_class_name(o.cls);
	st.attempt_class = st.error_class;
	st.status = at.r.status;
	st.provider_id = at.provider_id[0] ? at.provider_id : NULL;
	switch (o.cls) {
	case OUTCOME_SUCCESS:
		st.to = "completed";
		st.complete_run = true;
		break;
	case OUTCOME_TRANSIENT: {
		struct retry_policy p = { t->max_attempts, t->base_ms, t->cap_ms,
			                  (long)t->max_elapsed_s * 1000L, t->jitter_percent / 100.0 };
		unsigned char rb[4];
		double rnd = 0.5;
		long delay = -1;
		enum retry_decision d;

		if (digest_random(rb, sizeof(rb)) == 0)
			rnd = (double)(((unsigned)rb[0] << 24 | (unsigned)rb[1] << 16 |
			                (unsigned)rb[2] << 8 | rb[3]) >> 8) / 16777216.0;
		d = backoff_next(&p, &o, j->attempt, (long)(j->elapsed_ms + at.duration_ms), rnd,
		                 &delay);
		if (d == RETRY_AT) {
			st.to = "pending";
			st.delay_ms = delay;
		} else {
			st.to = "failed";
			st.dl_class = "exhausted";
			hint = backoff_decision_name(d);
		}
		break;
	}
	case OUTCOME_PERMANENT:
		st.to = "failed";
		st.dl_class = "permanent";
		break;
	case OUTCOME_AMBIGUOUS:
	default:
		st.to = "unknown";
		if (t->lookup_url[0] != '\0')
			st.delay_ms = (long long)cfg->reconcile_interval_seconds * 1000;
		else
			st.dl_class = "unknown";
		break;
	}
settle_it:
	if (st.dl_class != NULL)
		st.dl_action = next_action_for(st.dl_class);
	st.duration_ms = at.duration_ms;
	st.evidence = at.evidence;
	src = settle(s, db, j, &st, &run_done);
	if (src == SETTLE_LOST) {
		log_effect(LOG_LEVEL_WARNING, "effect.lease_lost", j, "sending", st.to,
		           st.provider_id, st.error_class, st.reason, at.duration_ms,
		           "the lease ran out during the send; the sweep made it unknown");
		goto out;
	}
	/* as the attempt history now says (a lost settle: the sweep's row) */
	if (src == SETTLED)
		metrics_count_attempt(j->target, st.attempt_class, j->attempt > 1, false);
	if (src == SETTLE_DB) {
		/* The outcome is lost with the connection; the lease runs out and
		 * the sweep makes it unknown: never resent blindly. */
		log_effect(LOG_LEVEL_ERROR, "effect.settle_failed", j, "sending", st.to,
		           st.provider_id, st.error_class, db_error(db), at.duration_ms,
		           "the database did not take the outcome; the lease sweep will mark it unknown");
		goto out;
	}
	if (strcmp(st.to, "completed") == 0) {
		log_effect(LOG_LEVEL_INFO, "effect.completed", j, "sending", "completed",
		           st.provider_id, "success", st.reason, at.duration_ms, NULL);
		if (run_done)
			log_run_completed(j);
	} else if (strcmp(st.to, "pending") == 0) {
		char next[64];

		snprintf(next, sizeof(next), "next attempt in %lld ms", st.delay_ms);
		log_effect(LOG_LEVEL_NOTICE, "effect.retry_scheduled", j, "sending", "pending", NULL,
		           st.error_class, st.reason, at.duration_ms, next);
	} else if (strcmp(st.to, "unknown") == 0) {
		log_effect(LOG_LEVEL_WARNING, "effect.unknown", j, "sending", "unknown", NULL,
		           st.error_class, st.reason, at.duration_ms,
		           t != NULL && t->lookup_url[0] ? "will be reconciled through the lookup URL"
		                                         : "not resent; waits for an operator");
	} else {
		log_effect(LOG_LEVEL_WARNING, "effect.failed", j, "sending", "failed", NULL,
		           st.error_class, st.reason, at.duration_ms, hint);
	}
	if (st.dl_class != NULL)
		log_effect(LOG_LEVEL_WARNING, "effect.dead_lettered", j, NULL, st.to, NULL,
		           st.dl_class, st.reason, 0, st.dl_action);
out:
	adapter_attempt_clear(&at);
	free(sent);
	dispatch_config_put(s, dc);
}

/* Looks up one unknown effect at its target. */
static void
reconcile(struct dispatch_shared *s, struct db *db, struct adapter *ad, struct job *j)
{
	struct dispatch_config *dc = dispatch_config_get(s);
	const struct config *cfg = &dc->cfg;
	const struct config_target *t = config_target(cfg, j->target);
	struct adapter_attempt at;
	struct settle st;
	enum lookup_result lr;
	bool run_done = false;
	enum settle_rc src;

	memset(&at, 0, sizeof(at));
	memset(&st, 0, sizeof(st));
	if (t == NULL || t->lookup_url[0] == '\0' || !sending_allowed(s))
		goto out;
	lr = adapter_lookup(ad, t, j->provider_key, &at);
	st.expect = "unknown";
	st.kind = "lookup";
	st.expect_reconcile = j->reconcile_attempts;
	st.status = at.r.status;
	st.duration_ms = at.duration_ms;
	st.evidence = at.evidence;
	st.max_attempts = t->max_attempts;
	st.retention_days = cfg->retention_days;
	st.delay_ms = (long long)cfg->reconcile_interval_seconds * 1000;
	if (lr == LOOKUP_FOUND) {
		st.to = "completed";
		st.provider_id = at.provider_id;
		st.error_class = "success";
		st.reason = "reconciled_found";
		st.attempt_class = "found";
		st.complete_run = true;
	} else if (lr == LOOKUP_NOT_FOUND) {
		st.attempt_class = "not_found";
		st.error_class = "ambiguous";
		if (j->not_found + 1 >= RECONCILE_NOT_FOUND_TO_RESUME &&
		    (j->attempt >= t->max_attempts ||
		     j->elapsed_ms >= (long long)t->max_elapsed_s * 1000)) {
			/* Known not delivered, and the budget is spent: an
			 * operator decides (resume is safe). */
			st.to = "failed";
			st.reason = "reconciled_not_found";
			st.dl_class = "exhausted";
			st.dl_action = next_action_for("exhausted");
		} else if (j->not_found + 1 >= RECONCILE_NOT_FOUND_TO_RESUME) {
			/* Known not delivered: resumed with the same key. */
			st.to = "pending";
			st.delay_ms = 0;
			st.reason = "reconciled_not_found";
		} else {
			st.to = "unknown";
			st.reason = "lookup_not_found_once";
		}
	} else {
		st.attempt_class = "error";
		st.error_class = "ambiguous";
		st.to = "unknown";
		st.reason = "lookup_failed";
		if (j->errors + 1 >= RECONCILE_ERRORS_TO_DEAD_LETTER) {
			st.dl_class = "unknown";
			st.dl_action = next_action_for("unknown");
			st.delay_ms = 365LL * 86400 * 1000; /* stop asking: an operator decides */
		}
	}
	src = settle(s, db, j, &st, &run_done);
	if (src != SETTLED) {
		log_effect(LOG_LEVEL_WARNING, "effect.reconcile_lost", j, "unknown", st.to, NULL, NULL,
		           src == SETTLE_LOST ? "changed by someone else meanwhile" : db_error(db),
		           at.duration_ms, NULL);
		goto out;
	}
	if (lr == LOOKUP_FOUND || strcmp(st.to, "pending") == 0 || strcmp(st.to, "failed") == 0)
		log_effect(LOG_LEVEL_INFO, "effect.reconciled", j, "unknown", st.to,
		           st.provider_id, st.error_class, st.reason, at.duration_ms,
		           lr == LOOKUP_FOUND ? "the provider has it: completed without resending"
		           : strcmp(st.to, "pending") == 0
		                   ? "the provider does not have it: resumed with the same key"
		                   : "the provider does not have it and the retry budget is spent");
	else
		log_effect(LOG_LEVEL_NOTICE, "effect.reconcile_pending", j, "unknown", "unknown", NULL,
		           st.error_class, st.reason, at.duration_ms, NULL);
	if (st.dl_class != NULL)
		log_effect(LOG_LEVEL_WARNING, "effect.dead_lettered", j, NULL, "unknown", NULL,
		           st.dl_class, st.reason, 0, st.dl_action);
	if (run_done)
		log_run_completed(j);
out:
	adapter_attempt_clear(&at);
	dispatch_config_put(s, dc);
}

/* --- the worker --------------------------------------------------------------- */

/* A PostgreSQL array literal of words that need no quoting (target names
 * are [a-z0-9_], effect ids are uuids), built word by word; empty words
 * are left out. */
#define WORDS_MAX ((size_t)1 << 24)

struct words {
	struct buf b;
	bool failed;
};

static void
words_init(struct words *w)
{
	buf_init(&w->b, WORDS_MAX);
	w->failed = buf_puts(&w->b, "{") != 0;
}

static void
words_add(struct words *w, const char *word)
{
	if (!w->failed && word[0] != '\0' &&
	    buf_printf(&w->b, "%s%s", w->b.len > 1 ? "," : "", word) != 0)
		w->failed = true;
}

/* The literal, or NULL when memory ran out. */
static char *
words_end(struct words *w)
{
	if (w->failed || buf_puts(&w->b, "}") != 0) {
		buf_free(&w->b);
		return NULL;
	}
	return buf_steal(&w->b);
}

/* The targets with a lookup URL, as a text[] literal. */
static char *
lookup_targets(const struct config *cfg)
{
	struct words w;
	int i;

	words_init(&w);
	for (i = 0; i < cfg->ntargets; i++)
		if (cfg->targets[i].lookup_url[0] != '\0')
			words_add(&w, cfg->targets[i].name);
	return words_end(&w);
}

static int
claim_reconcile(struct dispatch_shared *s, struct db *db, struct adapter *ad)
{
	struct dispatch_config *dc = dispatch_config_get(s);
	char *targets = lookup_targets(&dc->cfg);
	char interval[16], limit[16];
	const char *p[3] = { targets, interval, limit };
	PGresult *res = NULL;
	int n = 0, i;

	snprintf(interval, sizeof(interval), "%d", dc->cfg.reconcile_interval_seconds);
	snprintf(limit, sizeof(limit), "%d", dc->cfg.dispatch_batch);
	dispatch_config_put(s, dc);
	if (targets == NULL || strcmp(targets, "{}") == 0 ||
	    db_exec(db, &st_claim_reconcile, p, &res) != DB_OK) {
		free(targets);
		return 0;
	}
	free(targets);
	n = PQntuples(res);
	for (i = 0; i < n; i++) {
		struct job j;

		job_read(&j, res, i);
		reconcile(s, db, ad, &j);
		job_clear(&j);
	}
	PQclear(res);
	return n;
}

static void
set_inflight(struct dispatch_shared *s, int slot, const char *id)
{
	if (slot < 0 || slot >= s->nslots)
		return;
	pthread_mutex_lock(&s->inflight_mu);
	snprintf(s->inflight[slot], sizeof(s->inflight[slot]), "%s", id);
	pthread_mutex_unlock(&s->inflight_mu);
}

/* How long the rest of a batch must stay leased while the worker handles
 * one effect of target t: its rate-limit wait, two timeouts (an SMTP
 * server's goodbye after a timeout waits as long again), and a margin. */
static int
lease_need_s(const struct config *cfg, const char *target)
{
	const struct config_target *t = config_target(cfg, target);

	if (t == NULL)
		return LEASE_MARGIN_S;
	return lease_need_s_t(t) +
	       (t->rate_per_second > 0 ? cfg->dispatch_workers / t->rate_per_second + 1 : 0);
}

/* Renews the lease of rows [from, n) of a claimed batch when it has less
 * than the next effect needs; *until is the local estimate of its end. */
static void
keep_batch_leased(struct dispatch_shared *s, struct db *db, const PGresult *res, int from,
                  long long *until)
{
	struct dispatch_config *dc = dispatch_config_get(s);
	int need = lease_need_s(&dc->cfg, db_get(res, from, "target"));
	int secs = dc->cfg.dispatch_lease_seconds > 2 * need ? dc->cfg.dispatch_lease_seconds
	                                                     : 2 * need;
	long long t0 = mono_ns();
	char lease[16], *ids;
	const char *p[3];
	PGresult *r = NULL;
	struct words w;
	int i;

	dispatch_config_put(s, dc);
	if (*until - t0 >= (long long)need * 1000000000LL)
		return;
	words_init(&w);
	for (i = from; i < PQntuples(res); i++)
		words_add(&w, db_get(res, i, "id"));
	if ((ids = words_end(&w)) == NULL)
		return;
	snprintf(lease, sizeof(lease), "%d", secs);
	p[0] = ids;
	p[1] = s->owner;
	p[2] = lease;
	if (db_exec(db, &st_renew_batch, p, &r) == DB_OK) {
		*until = t0 + (long long)secs * 1000000000LL;
		PQclear(r);
	}
	free(ids);
}

int
dispatch_release_unsent(struct dispatch_shared *s, struct db *db)
{
	char *busy;
	const char *p[2];
	PGresult *res = NULL;
	struct words w;
	int i, n;

	words_init(&w);
	pthread_mutex_lock(&s->inflight_mu);
	for (i = 0; i < s->nslots; i++)
		words_add(&w, s->inflight[i]);
	pthread_mutex_unlock(&s->inflight_mu);
	busy = words_end(&w);
	if (busy == NULL)
		return -1;
	p[0] = s->owner;
	p[1] = busy;
	if (db_exec(db, &st_release_unsent, p, &res) != DB_OK) {
		free(busy);
		return -1;
	}
	n = PQntuples(res);
	PQclear(res);
	free(busy);
	return n;
}

void *
dispatch_worker(void *arg)
{
	struct dispatch_shared *s = arg;
	struct dispatch_config *dc = dispatch_config_get(s);
	struct db *db = db_new(dc->cfg.database, dc->cfg.statement_timeout_ms);
	struct adapter *ad = adapter_new();
	int slot = atomic_fetch_add(&s->next_slot, 1);
	/* How many effects the next claim takes: no more than this worker
	 * expects to start within CLAIM_AHEAD_MS (from the last batch's pace),
	 * at most dispatch_batch. A claimed effect that waits its turn is, if
	 * this process is killed, an effect nobody can prove unsent: it turns
	 * unknown with its lease. Fast targets get full batches (fewer claim
	 * round trips); slow or rate-limited ones one effect at a time. */
	int ahead = 1;

	dispatch_config_put(s, dc);
	if (db == NULL || ad == NULL) {
		log_event(LOG_LEVEL_ERROR, "dispatch.worker_failed", NULL);
		goto out;
	}
	while (!atomic_load(&s->stopping)) {
		unsigned long seen = wake_seq(s);
		char owner_lease[16], batch[16];
		const char *p[3] = { s->owner, batch, owner_lease };
		PGresult *res = NULL;
		int n = 0, i, poll_ms, lease_s;
		long long until;

		dc = dispatch_config_get(s);
		if (ahead > dc->cfg.dispatch_batch)
			ahead = dc->cfg.dispatch_batch;
		snprintf(batch, sizeof(batch), "%d", ahead);
		lease_s = dc->cfg.dispatch_lease_seconds;
		snprintf(owner_lease, sizeof(owner_lease), "%d", lease_s);
		poll_ms = dc->cfg.dispatch_poll_ms;
		dispatch_config_put(s, dc);

		/* the local estimate of the batch's lease starts before the claim */
		until = mono_ns() + (long long)lease_s * 1000000000LL;
		if (sending_allowed(s) && db_exec(db, &st_claim, p, &res) == DB_OK) {
			long long t0 = mono_ns(), per;

			n = PQntuples(res);
			for (i = 0; i < n; i++) {
				struct job j;

				job_read(&j, res, i);
				if (atomic_load(&s->stopping)) {
					/* shutdown: the rest of the batch goes back */
					(void)release(s, db, &j, 0);
				} else {
					keep_batch_leased(s, db, res, i, &until);
					set_inflight(s, slot, j.id);
					process(s, db, ad, &j);
					set_inflight(s, slot, "");
				}
				job_clear(&j);
			}
			PQclear(res);
			if (n > 0) {
				per = (mono_ns() - t0) / n;
				ahead = per <= 0 ? 1 << 20
				                 : (int)((long long)CLAIM_AHEAD_MS * 1000000LL / per > 1 << 20
				                             ? 1 << 20
				                             : (long long)CLAIM_AHEAD_MS * 1000000LL / per);
				if (ahead < 1)
					ahead = 1;
			}
		}
		if (n == 0 && sending_allowed(s) && !atomic_load(&s->stopping))
			n = claim_reconcile(s, db, ad);
		if (n == 0)
			wait_wake(s, seen, poll_ms);
	}
out:
	adapter_free(ad);
	db_free(db);
	return NULL;
}

/* --- the tick ------------------------------------------------------------------ */

static void
expire_leases(struct dispatch_shared *s, struct db *db, const struct config *cfg)
{
	char limit[16], maxa[16], days[16];
	const char *p[2] = { limit, s->name };
	PGresult *res = NULL;
	bool *lettered = NULL;
	int i, n;

	/* The effect turns unknown and, where no lookup URL can settle it, gets
	 * its dead letter in the same transaction: a dispatcher that dies in
	 * between never leaves an unknown effect nobody is told about. */
	snprintf(limit, sizeof(limit), "%d", TICK_BATCH);
	snprintf(days, sizeof(days), "%d", cfg->retention_days);
	if (db_begin(db) != DB_OK)
		return;
	if (db_exec(db, &st_expire_leases, p, &res) != DB_OK)
		goto fail;
	n = PQntuples(res);
	if (n == 0) {
		PQclear(res);
		if (db_commit(db) != DB_OK)
			db_rollback(db);
		return;
	}
	lettered = calloc((size_t)n, sizeof(*lettered));
	if (lettered == NULL)
		goto fail;
	for (i = 0; i < n; i++) {
		const struct config_target *t = config_target(cfg, db_get(res, i, "target"));
		const char *dp[6] = { db_get(res, i, "id"), "unknown", "lease_expired_while_sending",
			              next_action_for("unknown"), maxa, days };
		PGresult *r2 = NULL;

		if (t != NULL && t->lookup_url[0] != '\0')
			continue;
		snprintf(maxa, sizeof(maxa), "%d", t != NULL ? t->max_attempts : 0);
		if (db_exec(db, &st_dead_letter, dp, &r2) != DB_OK)
			goto fail;
		lettered[i] = PQntuples(r2) == 1;
		PQclear(r2);
	}
	if (db_commit(db) != DB_OK)
		goto fail;
	for (i = 0; i < n; i++) {
		struct job j = { 0 };
		const struct config_target *t;

		snprintf(j.id, sizeof(j.id), "%s", db_get(res, i, "id"));
		j.key = (char *)(uintptr_t)db_get(res, i, "idempotency_key");
		j.target = (char *)(uintptr_t)db_get(res, i, "target");
		j.attempt = (int)db_get_ll(res, i, "attempt");
		snprintf(j.client, sizeof(j.client), "%s", db_get(res, i, "client_name") ?: "");
		metrics_count_attempt(j.target, "ambiguous", j.attempt > 1, true);
		t = config_target(cfg, j.target);
		log_effect(LOG_LEVEL_WARNING, "effect.unknown", &j, "sending", "unknown", NULL,
		           "ambiguous", "lease_expired_while_sending", 0,
		           t != NULL && t->lookup_url[0] ? "will be reconciled through the lookup URL"
		                                         : "not resent; waits for an operator");
		if (lettered[i])
			log_effect(LOG_LEVEL_WARNING, "effect.dead_lettered", &j, NULL, "unknown", NULL,
			           "unknown", "lease_expired_while_sending", 0,
			           next_action_for("unknown"));
	}
	free(lettered);
	PQclear(res);
	return;
fail:
	db_rollback(db);
	free(lettered);
	PQclear(res);
}

/* One run whose approval expired: challenges expired, run failed_terminal,
 * and the workflow told through its callback, in one transaction. */
static void
expire_run(struct db *db, long long client_id, const char *client_name, const char *key)
{
	char client[24], id[OUTBOX_ID_LEN] = "", nb[OUTBOX_TS_LEN];
	const char *p[2] = { client, key };
	PGresult *ra = NULL, *rr = NULL;
	const char *callback;
	char *payload = NULL;
	char hash[CANON_HASH_LEN];
	struct log_fields f = { 0 };

	snprintf(client, sizeof(client), "%lld", client_id);
	if (db_begin(db) != DB_OK)
		return;
	if (db_exec(db, &st_expire_approvals, p, &ra) != DB_OK ||
	    db_exec(db, &st_expire_run, p, &rr) != DB_OK)
		goto fail;
	f.client = client_name;
	f.key = key;
	f.actor = "dispatcher";
	f.reason = "approval_expired";
	if (PQntuples(rr) == 1) {
		f.state_from = "awaiting_human";
		f.state_to = "failed_terminal";
		f.decision = "expired";
		f.version = db_get_ll(rr, 0, "version");
		f.correlation_id = db_get(rr, 0, "correlation_id");
		f.workflow_version = db_get(rr, 0, "workflow_version");
		callback = db_get(rr, 0, "callback_url");
		if (callback != NULL) {
			json_t *cb = json_pack("{s:s, s:s, s:s}", "url", callback, "key", key,
			                       "decision", "expired");
			char *text = cb != NULL ? json_dumps(cb, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
			char *canon = NULL;
			size_t clen = 0;
			struct outbox_effect e = { 0 };

			json_decref(cb);
			if (text == NULL ||
			    canon_json(text, strlen(text), &canon, &clen) != CANON_OK) {
				free(text);
				goto fail;
			}
			free(text);
			canon_hash(canon, clen, hash);
			payload = canon;
			e.client_id = client_id;
			e.key = key;
			e.type = "decision.callback";
			e.target = "callback";
			e.payload = payload;
			e.payload_hash = hash;
			if (outbox_enqueue(db, &e, id, nb) != OUTBOX_OK)
				goto fail;
		}
	}
	if (db_commit(db) != DB_OK)
		goto done;
	if (PQntuples(ra) > 0)
		log_event(LOG_LEVEL_NOTICE, "approval.expired", &f);
	if (id[0] != '\0') {
		struct log_fields e = { .client = client_name, .key = key, .effect_id = id,
			                .target = "callback", .decision = "expired" };

		log_event(LOG_LEVEL_INFO, "effect.enqueued", &e);
	}
	goto done;
fail:
	db_rollback(db);
	log_event(LOG_LEVEL_ERROR, "approval.expire_failed", &f);
done:
	PQclear(ra);
	PQclear(rr);
	free(payload);
}

static void
expire_approvals(struct db *db)
{
	char limit[16];
	const char *p[1] = { limit };
	PGresult *res = NULL;
	int i;

	snprintf(limit, sizeof(limit), "%d", TICK_BATCH);
	if (db_exec(db, &st_expired_runs, p, &res) != DB_OK)
		return;
	for (i = 0; i < PQntuples(res); i++)
		expire_run(db, db_get_ll(res, i, "client_id"), db_get(res, i, "client_name"),
		           db_get(res, i, "idempotency_key"));
	PQclear(res);
}

bool
dispatch_tick(struct dispatch_shared *s, struct db *db)
{
	static long long last_blocked_log;
	struct dispatch_config *dc = dispatch_config_get(s);
	PGresult *res = NULL;
	bool was, now_on;
	const char *sp[1] = { s->env_enabled ? "true" : "false" };

	if (db_exec(db, &st_switch, sp, &res) != DB_OK) {
		dispatch_config_put(s, dc);
		return false;
	}
	was = atomic_load(&s->db_enabled);
	now_on = PQntuples(res) == 1 && db_get(res, 0, "actions_enabled")[0] == 't';
	atomic_store(&s->db_enabled, now_on);
	if (!s->env_enabled || !now_on) {
		long long due = PQntuples(res) == 1 ? db_get_ll(res, 0, "due") : 0;
		long long t = mono_ns();

		/* each effect held back is counted once (metrics) */
		if (due > 0)
			(void)hold(db, NULL);

		/* Held back by the switch: said at most every 30 s per process. */
		if (due > 0 && (last_blocked_log == 0 || t - last_blocked_log > 30000000000LL)) {
			struct log_fields f = { .count = due,
				                .reason = !s->env_enabled ? "AI_ACTIONS_ENABLED is not true"
				                                          : "database flag off",
				                .hint = "oncegatectl kill-switch status" };

			log_event(LOG_LEVEL_NOTICE, "dispatch.blocked", &f);
			last_blocked_log = t;
		}
	} else {
		last_blocked_log = 0;
		if (!was)
			dispatch_wake(s);
	}
	PQclear(res);
	expire_leases(s, db, &dc->cfg);
	expire_approvals(db);
	dispatch_config_put(s, dc);
	return true;
}

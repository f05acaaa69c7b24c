/*
 * dispatch_effect.c — one claimed effect: the checks right before its send
 * (kill switch, lease, rate limit, payload against its contract), the send
 * through the target's provider, the classification and the settle
 * (backoff, dead letter, run completion); and the look-up of an unknown
 * effect. See dispatch.h for the rules in order.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "canon.h"
#include "backoff.h"
#include "classify.h"
#include "digest.h"
#include "deadletter.h"
#include "dispatch.h"
#include "dispatch_int.h"
#include "effect.h"
#include "ledger.h"
#include "log.h"
#include "metrics.h"
#include "notify.h"
#include "outbox.h"
#include "payload.h"
#include "provider.h"

/* Reconciliation: "not found" must be seen this many times, a
 * reconcile_interval apart, before an unknown effect is resumed (a provider
 * still working on the request when it was first asked must not be sent it
 * twice); a target that cannot answer this many look-ups dead-letters it. */
#define RECONCILE_NOT_FOUND_TO_RESUME 2
#define RECONCILE_ERRORS_TO_DEAD_LETTER 10
/* An effect whose contract is not loaded here is looked at again after
 * this long (seconds). */
#define HOLD_S 30

/* Per-target rate limit, per process: waits for the target's next slot
 * (a held settle committed first). False when shutdown came first. */
static void held_flush(struct db *db);

static bool
rate_wait(struct dispatch_shared *s, struct db *db, struct dispatch_config *dc, int ti)
{
	const struct config_target *t = &dc->cfg.targets[ti];
	long long slot, now, gap;

	if (t->rate_per_second <= 0)
		return true;
	gap = 1000000000LL / t->rate_per_second;
	pthread_mutex_lock(&dc->rate_mu);
	now = dispatch_mono_ns();
	slot = dc->next_slot_ns[ti] > now ? dc->next_slot_ns[ti] : now;
	dc->next_slot_ns[ti] = slot + gap;
	pthread_mutex_unlock(&dc->rate_mu);
	if (slot > now)
		held_flush(db); /* the outcome before it waits its turn */
	while ((now = dispatch_mono_ns()) < slot) {
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

/* What a job's send or look-up works with: the configuration now (held
 * until dispatch_config_put) and the job's target in it (its index in ti),
 * or NULL (-1) when this dispatcher does not know it. */
struct job_on {
	struct dispatch_config *dc;
	const struct config *cfg;
	const struct config_target *t;
	int ti;
};

static struct job_on
job_on(struct dispatch_shared *s, const struct outbox_job *j)
{
	struct job_on on = { dispatch_config_get(s), NULL, NULL, -1 };
	int i;

	on.cfg = &on.dc->cfg;
	for (i = 0; j->target != NULL && i < on.cfg->ntargets; i++)
		if (strcmp(on.cfg->targets[i].name, j->target) == 0) {
			on.t = &on.cfg->targets[i];
			on.ti = i;
			break;
		}
	return on;
}

/* The run moved approved → completed with this effect, its last. */
static void
log_run_completed(const struct outbox_job *j)
{
	struct log_fields f = { .client = j->client[0] ? j->client : NULL, .key = j->key,
		                .state_from = ledger_state_name(RUN_APPROVED),
		                .state_to = ledger_state_name(RUN_COMPLETED),
		                .actor = "dispatcher", .effect_id = j->id };

	log_event(LOG_LEVEL_INFO, "run.completed", &f);
}

/* What a settle transaction should do besides the compare-and-set. */
struct settle {
	enum effect_state expect;    /* expected state */
	const char *owner;           /* lease owner, or NULL (reconciliation) */
	enum effect_state to;        /* new state */
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

enum settle_rc { SETTLED = 0, SETTLE_LOST, SETTLE_DB, SETTLE_MARK_LOST };

/* One transaction, one round trip: [lock run,] CAS + history, [dead
 * letter,] [complete run,] [mark: the next send's send_started, committed
 * with this outcome or not at all]. SETTLE_MARK_LOST: the mark found its
 * effect not (any more) ours; nothing was committed. */
static enum settle_rc
settle(struct dispatch_shared *s, struct db *db, const struct outbox_job *j,
       const struct settle *st, bool *run_completed, const struct db_call *mark)
{
	char *ev = st->evidence != NULL ? canon_dumps(st->evidence, JSON_COMPACT) : NULL;
	const struct outbox_settle in = {
		.id = j->id, .expect = st->expect, .owner = st->owner, .to = st->to,
		.provider_id = st->provider_id, .error_class = st->error_class,
		.reason = st->reason, .delay_ms = st->delay_ms, .kind = st->kind,
		.duration_ms = st->duration_ms, .dispatcher = s->name,
		.attempt_class = st->attempt_class, .status = st->status, .evidence = ev,
		.expect_reconcile = st->expect_reconcile,
	};
	const struct deadletter_open dl = {
		.effect_id = j->id, .error_class = st->dl_class, .reason = st->reason,
		.next_action = st->dl_action, .max_attempts = st->max_attempts,
		.retention_days = st->retention_days,
	};
	struct ledger_key_call lock_c, complete_c;
	struct outbox_settle_call settle_c;
	struct deadletter_open_call dl_c;
	struct db_call calls[5];
	int n = 0, i_settle, i_run = -1, i_mark = -1, k;
	enum settle_rc rc = SETTLE_DB;
	enum og_rc orc;

	memset(calls, 0, sizeof(calls));
	*run_completed = false;
	if (st->complete_run)
		ledger_lock_call(&lock_c, j->client_id, j->key, &calls[n++]);
	i_settle = n;
	outbox_settle_call(&settle_c, &in, &calls[n++]);
	if (st->dl_class != NULL)
		deadletter_open_call(&dl_c, &dl, &calls[n++]);
	if (st->complete_run) {
		i_run = n;
		ledger_complete_call(&complete_c, j->client_id, j->key, "dispatcher", &calls[n++]);
	}
	if (mark != NULL) {
		i_mark = n;
		calls[n++] = *mark;
	}
	(void)db_pipeline_tx(db, calls, n);
	for (k = 0; k < n; k++)
		if (calls[k].rc != DB_OK)
			goto out;
	if ((orc = outbox_settle_result(&calls[i_settle])) != OG_OK) {
		if (orc == OG_LEASE_LOST)
			rc = SETTLE_LOST;
		goto out;
	}
	if (i_mark >= 0 && outbox_send_started_result(&calls[i_mark]) != OG_OK) {
		rc = SETTLE_MARK_LOST;
		goto out;
	}
	if (db_commit(db) != DB_OK)
		goto out_noroll;
	if (i_run >= 0)
		*run_completed = ledger_completed(&calls[i_run]);
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

/* Is sending this effect allowed right now? Reads the kill switch's
 * database half and the lease; renews a lease too short for the send.
 * 1: send; 0: blocked by the switch; -1: not ours any more / no database. */
static int
presend_check(struct dispatch_shared *s, struct db *db, const struct outbox_job *j,
              const struct config_target *t, int lease_s)
{
	struct outbox_presend ps;
	int need;

	if (outbox_presend(db, j->id, s->owner, &ps) != OG_OK)
		return -1;
	atomic_store(&s->db_enabled, ps.enabled);
	if (!ps.owned)
		return -1;
	if (!s->env_enabled || !ps.enabled)
		return 0;
	/* dispatch_keep_leased() made the lease long enough for this send; one
	 * that is not (a clock far off, a renewal that failed) is renewed. */
	if (ps.lease_left < dispatch_send_lease_s(t)) {
		need = 2 * dispatch_send_lease_s(t);
		if (outbox_renew(db, j->id, s->owner, need > lease_s ? need : lease_s) != OG_OK)
			return -1;
	}
	return 1;
}

enum recheck { RECHECK_SEND = 0, RECHECK_REFUSED, RECHECK_HOLD, RECHECK_NOMEM };

/* The stored payload is the one decided: its hash, computed again the way
 * every effect's is (outbox_payload_hash), is the payload_hash stored when
 * the decision enqueued it. A payload changed in the database since
 * (anyone with write access to effect_outbox) is refused with both hashes
 * as evidence. A payload that is gone (purged) or does not parse is left
 * to recheck(), which refuses it. */
static enum recheck
hash_check(const struct outbox_job *j, struct provider_attempt *at)
{
	char now[OUTBOX_HASH_LEN];
	json_t *v;
	int rc;

	if (j->payload == NULL || j->payload_hash == NULL)
		return RECHECK_SEND;
	if ((v = json_loads(j->payload, JSON_DECODE_ANY, NULL)) == NULL)
		return RECHECK_SEND;
	rc = outbox_payload_hash(v, now, NULL);
	json_decref(v);
	if (rc != 0)
		return RECHECK_NOMEM;
	if (strcmp(now, j->payload_hash) == 0)
		return RECHECK_SEND;
	snprintf(at->invalid_reason, sizeof(at->invalid_reason),
	         "the payload differs from the one decided: its hash is not the payload_hash "
	         "stored with the decision");
	at->invalid = true;
	at->duration_ms = 1;
	at->evidence = json_pack("{s:s, s:s, s:s, s:b}", "invalid",
	                         "payload changed since it was decided", "payload_hash_decided",
	                         j->payload_hash, "payload_hash_at_send", now, "request_sent", 0);
	return at->evidence != NULL ? RECHECK_REFUSED : RECHECK_NOMEM;
}

/* Right before the send: the payload that goes out, built and checked
 * again against the run's output and, for the effect the run proposed,
 * its contract as loaded now (effect.h). *text is what to send (the stored
 * text when nothing was added); RECHECK_REFUSED leaves evidence and a
 * reason in *at. */
static enum recheck
recheck(const struct dispatch_config *dc, const struct provider *pv, const struct outbox_job *j,
        char **text, struct provider_attempt *at)
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
	sent = effect_build(c, j->type, pv->mail, payload, output,
	                    EFFECT_AT_SEND, errors);
	if (sent == NULL && json_array_size(errors) == 0)
		goto out;
	if (sent == NULL) {
		payload_error_text(errors, at->invalid_reason, sizeof(at->invalid_reason));
		at->invalid = true;
		at->duration_ms = 1;
		at->evidence = json_pack("{s:s, s:O, s:b}", "invalid", at->invalid_reason,
		                         "errors", errors, "request_sent", 0);
		rc = RECHECK_REFUSED;
		goto out;
	}
	*text = payload != NULL && json_equal(sent, payload)
	            ? strdup(j->payload)
	            : canon_dumps(sent, JSON_COMPACT | JSON_ENCODE_ANY);
	rc = *text != NULL ? RECHECK_SEND : RECHECK_NOMEM;
out:
	json_decref(payload);
	json_decref(output);
	json_decref(errors);
	json_decref(sent);
	return rc;
}

/* The send starts: once the transfer of the request has started and right
 * before its body goes out (HTTP: request line and headers written; SMTP:
 * DATA accepted), send_started is committed (outbox_send_started). From
 * then on a lease that runs out makes the effect unknown; before, it goes
 * back to pending: a dispatcher that dies while it waits for its rate
 * slot, checks the payload, connects or writes the headers has delivered
 * nothing a provider could act on (a request without its body). When the
 * mark fails (the lease is gone, the database is) the body is not sent.
 * Only for targets that do not honour the idempotency key: on one that
 * does, an effect whose lease ran out is sent again with its key (pending),
 * as after a timeout. */
struct mark {
	struct dispatch_shared *s;
	struct db *db;
	const struct outbox_job *j;
	bool tried;
	enum og_rc rc;
};

/* What stands between a claimed effect and its send: its rate slot, the
 * kill switch and the lease (presend_check), the stored payload's hash and
 * the payload built and checked again (recheck, or the notice's fresh
 * link). SEND_GO: *sent is what to send; SEND_REFUSED: not sendable as
 * approved (evidence in *at; *tampered: its payload was changed after
 * the decision), to be settled; SEND_DONE: released, held or
 * lost, nothing more to do. */
enum send_gate { SEND_GO = 0, SEND_REFUSED, SEND_DONE };

static enum send_gate
send_gate(struct dispatch_shared *s, struct db *db, struct dispatch_config *dc, int ti,
          struct outbox_job *j, char token[44], char **sent, struct provider_attempt *at,
          bool *tampered)
{
	const struct config *cfg = &dc->cfg;
	const struct config_target *t = &cfg->targets[ti];
	const struct provider *pv = dc->providers[ti];
	enum recheck rck;
	int chk;

	if (!rate_wait(s, db, dc, ti)) {
		(void)dispatch_release(s, db, j, 0);
		return SEND_DONE;
	}
	chk = presend_check(s, db, j, t, cfg->dispatch_lease_seconds);
	if (chk < 0) {
		dispatch_log_effect(LOG_LEVEL_WARNING, "effect.lease_lost", j, EFFECT_SENDING,
		                    DISPATCH_NO_STATE, NULL, NULL,
		                    "lease no longer held or database unavailable: not sent", 0,
		                    "another dispatcher or the lease sweep owns it now");
		return SEND_DONE;
	}
	if (chk == 0) {
		if (dispatch_release(s, db, j, 0)) {
			j->attempt--;
			(void)dispatch_hold(db, j->id);
			dispatch_log_effect(LOG_LEVEL_NOTICE, "dispatch.blocked", j, EFFECT_SENDING,
			                    EFFECT_PENDING, NULL, NULL,
			                    s->env_enabled ? "sends stopped (kill switch engaged)"
			                                   : "sends stopped (AI_ACTIONS_ENABLED)",
			                    0, "oncegatectl sends status");
		}
		return SEND_DONE;
	}
	rck = hash_check(j, at);
	*tampered = rck == RECHECK_REFUSED;
	if (rck == RECHECK_SEND && strcmp(j->type, NOTIFY_EFFECT_TYPE) == 0) {
		/* A notice: its link is minted now, never stored. */
		switch (dispatch_notify_prepare(db, cfg, pv, j, token, sent, at)) {
		case NOTIFY_PREP_SEND:
			rck = RECHECK_SEND;
			break;
		case NOTIFY_PREP_REFUSED:
			rck = RECHECK_REFUSED;
			break;
		case NOTIFY_PREP_MOOT:
			dispatch_notify_moot(s, db, j);
			return SEND_DONE;
		case NOTIFY_PREP_RETRY:
		default:
			rck = RECHECK_NOMEM;
			break;
		}
	} else if (rck == RECHECK_SEND) {
		rck = recheck(dc, pv, j, sent, at);
	}
	if (rck == RECHECK_HOLD || rck == RECHECK_NOMEM) {
		/* Not checked, so not sent: pending again, the attempt given back. */
		if (dispatch_release(s, db, j, HOLD_S))
			dispatch_log_effect(LOG_LEVEL_WARNING, "effect.held", j, EFFECT_SENDING,
			                    EFFECT_PENDING, NULL, NULL,
			                    rck == RECHECK_HOLD ? "contract_not_loaded" : "out_of_memory",
			                    0, rck == RECHECK_HOLD ? "the run's contract is not loaded here: "
			                                             "check contracts_dir, then SIGHUP"
			                                           : NULL);
		return SEND_DONE;
	}
	return rck == RECHECK_SEND ? SEND_GO : SEND_REFUSED;
}

/* The settle of an attempt as classified: its outcome's class and reason
 * into st, and the next state (backoff for a transient failure, a dead
 * letter for what is given up on). */
static void
send_outcome(const struct config *cfg, const struct config_target *t, const struct outbox_job *j,
             const struct provider_attempt *at, bool tampered, struct settle *st,
             const char **hint)
{
	struct outcome o;

	if (at->invalid) {
		/* Nothing went out: what cannot be sent as approved never is. */
		o.cls = OUTCOME_PERMANENT;
		o.reason = REASON_INVALID_INPUT;
		o.retry_after_ms = -1;
		st->reason = tampered ? "payload_changed" : "payload_invalid";
		*hint = at->invalid_reason;
	} else {
		o = classify_attempt(&at->r, time(NULL));
		st->reason = classify_reason_name(o.reason);
		dispatch_log_effect(LOG_LEVEL_INFO, "effect.sent", j, DISPATCH_NO_STATE,
		                    DISPATCH_NO_STATE, at->provider_id, classify_class_name(o.cls),
		                    st->reason, at->duration_ms, NULL);
	}
	st->error_class = classify_class_name(o.cls);
	st->attempt_class = st->error_class;
	st->status = at->r.status;
	st->provider_id = at->provider_id[0] ? at->provider_id : NULL;
	switch (o.cls) {
	case OUTCOME_SUCCESS:
		st->to = EFFECT_COMPLETED;
		st->complete_run = true;
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
		d = backoff_next(&p, &o, j->attempt, (long)(j->elapsed_ms + at->duration_ms), rnd,
		                 &delay);
		if (d == RETRY_AT) {
			st->to = EFFECT_PENDING;
			st->delay_ms = delay;
		} else {
			st->to = EFFECT_FAILED;
			st->dl_class = DEADLETTER_EXHAUSTED;
			*hint = backoff_decision_name(d);
		}
		break;
	}
	case OUTCOME_PERMANENT:
		st->to = EFFECT_FAILED;
		st->dl_class = DEADLETTER_PERMANENT;
		break;
	case OUTCOME_AMBIGUOUS:
	default:
		st->to = EFFECT_UNKNOWN;
		if (t->lookup_url[0] != '\0')
			st->delay_ms = (long long)cfg->reconcile_interval_seconds * 1000;
		else
			st->dl_class = DEADLETTER_UNKNOWN;
		break;
	}
}

/* The decision log of a settled send (src: how its settle went). */
static void
log_settled(struct db *db, const struct outbox_job *j, const struct config_target *t,
            const struct settle *st, long long duration_ms, const char *hint,
            enum settle_rc src, bool run_done)
{
	if (src == SETTLE_LOST) {
		dispatch_log_effect(LOG_LEVEL_WARNING, "effect.lease_lost", j, EFFECT_SENDING,
		                    st->to, st->provider_id, st->error_class, st->reason,
		                    duration_ms,
		                    "the lease ran out during the send; the sweep made it unknown");
		return;
	}
	if (src == SETTLE_DB) {
		/* The outcome is lost with the connection; the lease runs out and
		 * the sweep makes it unknown: never resent blindly. */
		dispatch_log_effect(LOG_LEVEL_ERROR, "effect.settle_failed", j, EFFECT_SENDING,
		                    st->to, st->provider_id, st->error_class, db_error(db),
		                    duration_ms,
		                    "the database did not take the outcome; the lease sweep will "
		                    "mark it unknown");
		return;
	}
	/* as the attempt history now says */
	metrics_count_attempt(j->target, st->attempt_class, j->attempt > 1, false);
	if (st->to == EFFECT_COMPLETED) {
		dispatch_log_effect(LOG_LEVEL_INFO, "effect.completed", j, EFFECT_SENDING,
		                    EFFECT_COMPLETED, st->provider_id,
		                    classify_class_name(OUTCOME_SUCCESS), st->reason, duration_ms, NULL);
		if (run_done)
			log_run_completed(j);
	} else if (st->to == EFFECT_PENDING) {
		char next[64];

		snprintf(next, sizeof(next), "next attempt in %lld ms", st->delay_ms);
		dispatch_log_effect(LOG_LEVEL_NOTICE, "effect.retry_scheduled", j, EFFECT_SENDING,
		                    EFFECT_PENDING, NULL, st->error_class, st->reason, duration_ms,
		                    next);
	} else if (st->to == EFFECT_UNKNOWN) {
		dispatch_log_effect(LOG_LEVEL_WARNING, "effect.unknown", j, EFFECT_SENDING,
		                    EFFECT_UNKNOWN, NULL, st->error_class, st->reason, duration_ms,
		                    t != NULL && t->lookup_url[0] ? "will be reconciled through the lookup URL"
		                                                  : "not resent; waits for an operator");
	} else {
		dispatch_log_effect(LOG_LEVEL_WARNING, "effect.failed", j, EFFECT_SENDING,
		                    EFFECT_FAILED, NULL, st->error_class, st->reason, duration_ms,
		                    hint);
	}
	if (st->dl_class != NULL)
		dispatch_log_effect(LOG_LEVEL_WARNING, "effect.dead_lettered", j, DISPATCH_NO_STATE,
		                    st->to, NULL, st->dl_class, st->reason, 0, st->dl_action);
}

/* A marked send's settle held back, so that the next send's mark commits
 * it: one commit per effect instead of two (the outcome of one request
 * rides in the transaction that marks the next). Only while the next send
 * follows at once: before a rate wait, a send without a mark, anything
 * that ends a send before its mark, and after each batch
 * (dispatch_effect_flush) it is committed by itself. A dispatcher killed
 * meanwhile leaves it sending with its mark, so when its lease runs out it
 * becomes unknown: it had reached the provider. One per worker thread. */
struct held {
	bool on;
	struct dispatch_shared *s;
	struct dispatch_config *dc; /* its reference: t points into it */
	const struct config_target *t;
	struct outbox_job j;
	struct settle st;
	struct provider_attempt at;
	const char *hint;
};
static _Thread_local struct held held;

/* Holds the settle st of j: dc's reference, j and at are moved in (the
 * caller's are left empty). */
static void
hold(struct dispatch_shared *s, struct dispatch_config *dc, const struct config_target *t,
     struct outbox_job *j, const struct settle *st, struct provider_attempt *at,
     const char *hint)
{
	held.on = true;
	held.s = s;
	held.dc = dc;
	held.t = t;
	held.j = *j;
	memset(j, 0, sizeof(*j));
	held.at = *at;
	held.st = *st;
	held.st.evidence = held.at.evidence;
	if (st->provider_id != NULL)
		held.st.provider_id = held.at.provider_id;
	held.hint = hint == at->invalid_reason ? held.at.invalid_reason : hint;
	memset(at, 0, sizeof(*at));
}

/* The held settle is over (src): logged and let go. */
static void
held_done(struct db *db, enum settle_rc src, bool run_done)
{
	log_settled(db, &held.j, held.t, &held.st, held.at.duration_ms, held.hint, src, run_done);
	provider_attempt_clear(&held.at);
	outbox_job_clear(&held.j);
	dispatch_config_put(held.s, held.dc);
	memset(&held, 0, sizeof(held));
}

static void
held_flush(struct db *db)
{
	bool run_done = false;
	enum settle_rc src;

	if (!held.on)
		return;
	src = settle(held.s, db, &held.j, &held.st, &run_done, NULL);
	held_done(db, src, run_done);
}

void
dispatch_effect_flush(struct db *db)
{
	held_flush(db);
}

/* The body is about to go out (provider_conn_before_send): the mark,
 * committed with the held settle when there is one. */
static int
mark_started(void *arg)
{
	struct mark *m = arg;
	const char *p[2] = { m->j->id, m->s->owner };
	struct db_call call;
	bool run_done = false;
	enum settle_rc src;

	m->tried = true;
	if (!held.on) {
		m->rc = outbox_send_started(m->db, m->j->id, m->s->owner);
		return m->rc == OG_OK ? 0 : -1;
	}
	memset(&call, 0, sizeof(call));
	outbox_send_started_call(p, &call);
	src = settle(held.s, m->db, &held.j, &held.st, &run_done, &call);
	if (src == SETTLED) {
		m->rc = OG_OK;
	} else if (src == SETTLE_MARK_LOST) {
		/* this send is not ours any more: the outcome alone */
		m->rc = OG_LEASE_LOST;
		src = settle(held.s, m->db, &held.j, &held.st, &run_done, NULL);
	} else if (src == SETTLE_LOST) {
		/* the held one was not ours any more: the mark alone */
		m->rc = outbox_send_started(m->db, m->j->id, m->s->owner);
	} else {
		m->rc = OG_ERROR;
	}
	held_done(m->db, src, run_done);
	return m->rc == OG_OK ? 0 : -1;
}

/* Sends one claimed effect and settles it (or holds its settle back for
 * the next send's mark: see held above). */
void
dispatch_effect_send(struct dispatch_shared *s, struct db *db, struct provider_conn *pc,
                     struct outbox_job *j)
{
	struct job_on on = job_on(s, j);
	struct provider_effect e = { j->id, j->type, j->provider_key, NULL };
	struct provider_attempt at = { 0 };
	struct mark mark = { s, db, j, false, OG_ERROR };
	char *sent = NULL, token[44] = "";
	struct settle st = { 0 };
	const char *hint = NULL;
	bool run_done = false, tampered = false;
	enum send_gate gate = SEND_REFUSED;
	enum settle_rc src;

	st.expect = EFFECT_SENDING;
	st.owner = s->owner;
	st.kind = "send";
	st.expect_reconcile = -1;
	st.retention_days = on.cfg->retention_days;

	if (on.t == NULL || on.t->idempotency_key)
		held_flush(db); /* this send has no mark to share its commit */
	if (on.t == NULL) {
		/* Nothing can be sent to a target this dispatcher does not know:
		 * nothing went out, so a later resume is safe. */
		at.evidence = json_pack("{s:s, s:b}", "invalid", "target not configured",
		                        "request_sent", 0);
		at.duration_ms = 1;
		st.to = EFFECT_FAILED;
		st.error_class = classify_class_name(OUTCOME_PERMANENT);
		st.reason = "target_not_configured";
		st.attempt_class = st.error_class;
		st.dl_class = DEADLETTER_PERMANENT;
		st.max_attempts = 1;
	} else {
		st.max_attempts = on.t->max_attempts;
		gate = send_gate(s, db, on.dc, on.ti, j, token, &sent, &at, &tampered);
		if (gate == SEND_DONE) {
			held_flush(db);
			goto out;
		}
		dispatch_log_effect(LOG_LEVEL_INFO, "effect.claimed", j, EFFECT_PENDING,
		                    EFFECT_SENDING, NULL, NULL, NULL, 0, NULL);
	}
	if (gate == SEND_REFUSED)
		held_flush(db);
	if (gate == SEND_GO) {
		e.payload = sent;
		/* A target that honours the key needs no mark: its lease
		 * running out sends it again with the same key, which the
		 * provider answers with the first one's outcome. */
		if (!on.t->idempotency_key)
			provider_conn_before_send(pc, mark_started, &mark);
		on.dc->providers[on.ti]->send(pc, on.t, &e, &at);
		provider_conn_before_send(pc, NULL, NULL);
		held_flush(db); /* when the mark was never reached */
		if (mark.tried && mark.rc != OG_OK) {
			dispatch_log_effect(LOG_LEVEL_WARNING, "effect.lease_lost", j,
			                    EFFECT_SENDING, DISPATCH_NO_STATE, NULL, NULL,
			                    "the send could not be marked started: its body not sent",
			                    0,
			                    "when its lease runs out: pending again (unknown if the "
			                    "mark committed after all)");
			goto out;
		}
	}
	if (on.t != NULL) {
		dispatch_notify_scrub(at.evidence, token);
		send_outcome(on.cfg, on.t, j, &at, tampered, &st, &hint);
	}
	if (st.dl_class != NULL)
		st.dl_action = dispatch_next_action(st.dl_class);
	st.duration_ms = at.duration_ms;
	st.evidence = at.evidence;
	if (mark.tried) {
		/* marked: the next send's mark commits this outcome */
		hold(s, on.dc, on.t, j, &st, &at, hint);
		on.dc = NULL;
		goto out;
	}
	src = settle(s, db, j, &st, &run_done, NULL);
	log_settled(db, j, on.t, &st, at.duration_ms, hint, src, run_done);
out:
	provider_attempt_clear(&at);
	if (sent != NULL)
		digest_wipe(sent, strlen(sent));
	digest_wipe(token, sizeof(token));
	free(sent);
	if (on.dc != NULL)
		dispatch_config_put(s, on.dc);
}

/* The settle of a look-up as its answer says: completed when the provider
 * has it; when it does not, pending again (same key) once that was seen
 * often enough, or failed with a dead letter when the budget is spent; an
 * error keeps it unknown (dead-lettered after too many). */
static void
lookup_outcome(const struct config *cfg, const struct config_target *t,
               const struct outbox_job *j, enum provider_lookup lr,
               const struct provider_attempt *at, struct settle *st)
{
	st->expect = EFFECT_UNKNOWN;
	st->kind = "lookup";
	st->expect_reconcile = j->reconcile_attempts;
	st->status = at->r.status;
	st->duration_ms = at->duration_ms;
	st->evidence = at->evidence;
	st->max_attempts = t->max_attempts;
	st->retention_days = cfg->retention_days;
	st->delay_ms = (long long)cfg->reconcile_interval_seconds * 1000;
	if (lr == PROVIDER_FOUND) {
		st->to = EFFECT_COMPLETED;
		st->provider_id = at->provider_id;
		st->error_class = classify_class_name(OUTCOME_SUCCESS);
		st->reason = "reconciled_found";
		st->attempt_class = "found";
		st->complete_run = true;
	} else if (lr == PROVIDER_NOT_FOUND) {
		st->attempt_class = "not_found";
		st->error_class = classify_class_name(OUTCOME_AMBIGUOUS);
		if (j->not_found + 1 >= RECONCILE_NOT_FOUND_TO_RESUME &&
		    (j->attempt >= t->max_attempts ||
		     j->elapsed_ms >= (long long)t->max_elapsed_s * 1000)) {
			/* Known not delivered, and the budget is spent: an
			 * operator decides (resume is safe). */
			st->to = EFFECT_FAILED;
			st->reason = "reconciled_not_found";
			st->dl_class = DEADLETTER_EXHAUSTED;
			st->dl_action = dispatch_next_action(DEADLETTER_EXHAUSTED);
		} else if (j->not_found + 1 >= RECONCILE_NOT_FOUND_TO_RESUME) {
			/* Known not delivered: resumed with the same key. */
			st->to = EFFECT_PENDING;
			st->delay_ms = 0;
			st->reason = "reconciled_not_found";
		} else {
			st->to = EFFECT_UNKNOWN;
			st->reason = "lookup_not_found_once";
		}
	} else {
		st->attempt_class = "error";
		st->error_class = classify_class_name(OUTCOME_AMBIGUOUS);
		st->to = EFFECT_UNKNOWN;
		st->reason = "lookup_failed";
		if (j->errors + 1 >= RECONCILE_ERRORS_TO_DEAD_LETTER) {
			st->dl_class = DEADLETTER_UNKNOWN;
			st->dl_action = dispatch_next_action(DEADLETTER_UNKNOWN);
			st->delay_ms = 365LL * 86400 * 1000; /* stop asking: an operator decides */
		}
	}
}

/* Looks up one unknown effect at its target. */
void
dispatch_effect_reconcile(struct dispatch_shared *s, struct db *db, struct provider_conn *pc,
                                          struct outbox_job *j)
{
	struct job_on on = job_on(s, j);
	struct provider_attempt at = { 0 };
	struct settle st = { 0 };
	enum provider_lookup lr;
	bool run_done = false;
	enum settle_rc src;

	if (on.t == NULL || on.t->lookup_url[0] == '\0' || !dispatch_sending_allowed(s))
		goto out;
	lr = on.dc->providers[on.ti]->lookup(pc, on.t, j->provider_key, &at);
	lookup_outcome(on.cfg, on.t, j, lr, &at, &st);
	src = settle(s, db, j, &st, &run_done, NULL);
	if (src != SETTLED) {
		dispatch_log_effect(LOG_LEVEL_WARNING, "effect.reconcile_lost", j, EFFECT_UNKNOWN,
		                    st.to, NULL, NULL,
		                    src == SETTLE_LOST ? "changed by someone else meanwhile" : db_error(db),
		                    at.duration_ms, NULL);
		goto out;
	}
	if (lr == PROVIDER_FOUND || st.to == EFFECT_PENDING || st.to == EFFECT_FAILED)
		dispatch_log_effect(LOG_LEVEL_INFO, "effect.reconciled", j, EFFECT_UNKNOWN, st.to,
		                    st.provider_id, st.error_class, st.reason, at.duration_ms,
		                    lr == PROVIDER_FOUND ? "the provider has it: completed without resending"
		                    : st.to == EFFECT_PENDING
		                            ? "the provider does not have it: resumed with the same key"
		                            : "the provider does not have it and the retry budget is spent");
	else
		dispatch_log_effect(LOG_LEVEL_NOTICE, "effect.reconcile_pending", j, EFFECT_UNKNOWN,
		                    EFFECT_UNKNOWN, NULL, st.error_class, st.reason, at.duration_ms,
		                    NULL);
	if (st.dl_class != NULL)
		dispatch_log_effect(LOG_LEVEL_WARNING, "effect.dead_lettered", j, DISPATCH_NO_STATE,
		                    EFFECT_UNKNOWN, NULL, st.dl_class, st.reason, 0, st.dl_action);
	if (run_done)
		log_run_completed(j);
out:
	provider_attempt_clear(&at);
	dispatch_config_put(s, on.dc);
}

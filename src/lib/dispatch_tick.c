/*
 * dispatch_tick.c — the dispatcher's housekeeping rules, which the janitor
 * of oncegate-dispatch runs every poll interval: the kill switch read again
 * (effects it holds back counted once), expired sending leases made
 * unknown (or pending again when the send had not started), expired
 * approvals failed with their callback; see dispatch_tick.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "control.h"
#include "deadletter.h"
#include "dispatch.h"
#include "dispatch_int.h"
#include "dispatch_tick.h"
#include "gate.h"
#include "ledger.h"
#include "log.h"
#include "metrics.h"
#include "outbox.h"

/* An expired lease's log lines, after the commit. */
static void
expire_leases_log(const struct config *cfg, struct outbox_job *j, enum effect_state to,
                  bool lettered)
{
	const struct config_target *t;

	if (to == EFFECT_PENDING) {
		dispatch_log_effect(LOG_LEVEL_NOTICE, "effect.requeued", j, EFFECT_SENDING,
		                    EFFECT_PENDING, NULL, NULL, "lease_expired_requeued", 0,
		                    "its dispatcher stopped before the send started (or its "
		                    "target honours the key): sent again now, once");
		return;
	}
	metrics_count_attempt(j->target, "ambiguous", j->attempt > 1, true);
	t = config_target(cfg, j->target);
	dispatch_log_effect(LOG_LEVEL_WARNING, "effect.unknown", j, EFFECT_SENDING, EFFECT_UNKNOWN,
	                    NULL, "ambiguous", "lease_expired_while_sending", 0,
	                    t != NULL && t->lookup_url[0] ? "will be reconciled through the lookup URL"
	                                                  : "not resent; waits for an operator");
	if (lettered)
		dispatch_log_effect(LOG_LEVEL_WARNING, "effect.dead_lettered", j, DISPATCH_NO_STATE,
		                    EFFECT_UNKNOWN, NULL, DEADLETTER_UNKNOWN,
		                    "lease_expired_while_sending", 0,
		                    dispatch_next_action(DEADLETTER_UNKNOWN));
}

static void
expire_leases(struct dispatch_shared *s, struct db *db, const struct config *cfg)
{
	struct outbox_batch b = { 0 };
	bool *lettered = NULL;
	int i;

	/* The effect turns unknown and, where no lookup URL can settle it, gets
	 * its dead letter in the same transaction: a dispatcher that dies in
	 * between never leaves an unknown effect nobody is told about. One
	 * whose send had not started is pending again: nothing to tell. */
	if (db_begin(db) != DB_OK)
		return;
	if (outbox_expire_leases(db, DISPATCH_TICK_BATCH, s->name, &b) != DB_OK)
		goto fail;
	if (b.n == 0) {
		if (db_commit(db) != DB_OK)
			db_rollback(db);
		return;
	}
	lettered = calloc((size_t)b.n, sizeof(*lettered));
	if (lettered == NULL)
		goto fail;
	for (i = 0; i < b.n; i++) {
		const struct config_target *t = config_target(cfg, b.jobs[i].target);
		const struct deadletter_open dl = {
			.effect_id = b.jobs[i].id, .error_class = DEADLETTER_UNKNOWN,
			.reason = "lease_expired_while_sending",
			.next_action = dispatch_next_action(DEADLETTER_UNKNOWN),
			.max_attempts = t != NULL ? t->max_attempts : 0,
			.retention_days = cfg->retention_days,
		};

		if (b.states[i] != EFFECT_UNKNOWN || (t != NULL && t->lookup_url[0] != '\0'))
			continue;
		if (deadletter_open(db, &dl, &lettered[i]) != DB_OK)
			goto fail;
	}
	if (db_commit(db) != DB_OK)
		goto fail;
	for (i = 0; i < b.n; i++)
		expire_leases_log(cfg, &b.jobs[i], b.states[i], lettered[i]);
	free(lettered);
	outbox_batch_clear(&b);
	return;
fail:
	db_rollback(db);
	free(lettered);
	outbox_batch_clear(&b);
}

/* One run whose approval expired: challenges expired, run failed_terminal,
 * and the workflow told through its callback, in one transaction. */
static void
expire_run(struct db *db, const struct gate_run *r)
{
	long long client_id = r->client_id;
	const char *client_name = r->client_name, *key = r->key;
	char id[OUTBOX_ID_LEN] = "", nb[OUTBOX_TS_LEN];
	struct ledger_expired run = { 0 };
	long long expired = 0;
	enum og_rc rc = OG_ERROR;
	char *payload = NULL;
	char hash[OUTBOX_HASH_LEN];
	struct log_fields f = { 0 };

	if (db_begin(db) != DB_OK)
		return;
	if (gate_expire(db, client_id, key, &expired) != OG_OK ||
	    ((rc = ledger_expire(db, client_id, key, &run)) != OG_OK && rc != OG_LEASE_LOST))
		goto fail;
	f.client = client_name;
	f.key = key;
	f.actor = "dispatcher";
	f.reason = "approval_expired";
	if (rc == OG_OK) {
		f.state_from = ledger_state_name(RUN_AWAITING_HUMAN);
		f.state_to = ledger_state_name(RUN_FAILED_TERMINAL);
		f.decision = gate_outcome_name(GATE_OUTCOME_EXPIRED);
		f.version = run.version;
		f.correlation_id = run.correlation_id;
		f.workflow_version = run.workflow_version;
		if (run.callback_url != NULL) {
			struct outbox_effect e;

			if (outbox_callback_effect(&e, client_id, key, run.callback_url,
			                           gate_outcome_name(GATE_OUTCOME_EXPIRED), NULL,
			                           NULL, hash, &payload) != 0)
				goto fail;
			e.slot = run.round > 0 ? run.round - 1 : 0;
			if (outbox_enqueue(db, &e, id, nb) != OG_OK)
				goto fail;
		}
	}
	if (db_commit(db) != DB_OK)
		goto done;
	if (expired > 0)
		log_event(LOG_LEVEL_NOTICE, "approval.expired", &f);
	if (id[0] != '\0') {
		struct log_fields e = { .client = client_name, .key = key, .effect_id = id,
			                .target = "callback",
			                .decision = gate_outcome_name(GATE_OUTCOME_EXPIRED) };

		log_event(LOG_LEVEL_INFO, "effect.enqueued", &e);
	}
	goto done;
fail:
	db_rollback(db);
	log_event(LOG_LEVEL_ERROR, "approval.expire_failed", &f);
done:
	ledger_expired_clear(&run);
	free(payload);
}

void
dispatch_each_run(struct db *db, enum og_rc (*fetch)(struct db *, int, struct gate_runs *),
                  void (*each)(struct db *, const struct gate_run *))
{
	struct gate_runs runs;
	int i;

	if (fetch(db, DISPATCH_TICK_BATCH, &runs) != OG_OK)
		return;
	for (i = 0; i < runs.n; i++)
		each(db, &runs.v[i]);
	gate_runs_clear(&runs);
}

void
dispatch_tick_expire_approvals(struct db *db)
{
	dispatch_each_run(db, gate_expired_runs, expire_run);
}

bool
dispatch_tick_switch(struct dispatch_shared *s, struct db *db)
{
	static long long last_blocked_log;
	struct control_flag sw;
	bool was, now_on;

	if (control_switch(db, s->env_enabled, &sw) != DB_OK)
		return false;
	was = atomic_load(&s->db_enabled);
	now_on = sw.actions_enabled;
	atomic_store(&s->db_enabled, now_on);
	if (!s->env_enabled || !now_on) {
		long long due = sw.due;
		long long t = dispatch_mono_ns();

		/* each effect held back is counted once (metrics) */
		if (due > 0)
			(void)dispatch_hold(db, NULL);

		/* Held back by the switch: said at most every 30 s per process. */
		if (due > 0 && (last_blocked_log == 0 || t - last_blocked_log > 30000000000LL)) {
			struct log_fields f = { .count = due,
				                .reason = !s->env_enabled ? "AI_ACTIONS_ENABLED is not true"
				                                          : "sends stopped (kill switch engaged)",
				                .hint = "oncegatectl sends status" };

			log_event(LOG_LEVEL_NOTICE, "dispatch.blocked", &f);
			last_blocked_log = t;
		}
	} else {
		last_blocked_log = 0;
		if (!was)
			dispatch_wake(s);
	}
	return true;
}

void
dispatch_tick_expire_leases(struct dispatch_shared *s, struct db *db)
{
	struct dispatch_config *dc = dispatch_config_get(s);

	expire_leases(s, db, &dc->cfg);
	dispatch_config_put(s, dc);
}

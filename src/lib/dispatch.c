/*
 * dispatch.c — the dispatcher's shared state and what its workers' loop
 * (src/dispatcher/worker.c) asks of the rules: keep a claimed batch
 * leased, claim unknown effects for reconciliation, give back what a
 * shutdown leaves unsent; see dispatch.h. One effect's send is
 * dispatch_effect.c; the housekeeping the janitor runs is dispatch_tick.c.
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

#include "buf.h"
#include "control.h"
#include "deadletter.h"
#include "digest.h"
#include "dispatch.h"
#include "dispatch_int.h"
#include "log.h"
#include "outbox.h"
#include "provider.h"
#include "schema_version.h"

/* --- statements ------------------------------------------------------------ */

/* --- statements ------------------------------------------------------------ */

const char *
dispatch_listen_sql(void)
{
	return "LISTEN oncegate_outbox";
}

/* --- shared state ---------------------------------------------------------- */

long long
dispatch_mono_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

struct dispatch_config *
dispatch_config_new(struct config *cfg)
{
	struct dispatch_config *dc = calloc(1, sizeof(*dc));
	int i;

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
	dc->providers = calloc((size_t)(dc->cfg.ntargets > 0 ? dc->cfg.ntargets : 1),
	                       sizeof(*dc->providers));
	if (dc->next_slot_ns == NULL || dc->providers == NULL)
		goto fail;
	/* Each target's provider, chosen once from its kind (the configuration
	 * admits only kinds a provider serves). */
	for (i = 0; i < dc->cfg.ntargets; i++)
		if ((dc->providers[i] = provider_for(dc->cfg.targets[i].kind)) == NULL)
			goto fail;
	return dc;
fail:
	*cfg = dc->cfg;
	contract_set_free(dc->contracts);
	pthread_mutex_destroy(&dc->rate_mu);
	free(dc->next_slot_ns);
	free(dc->providers);
	free(dc);
	return NULL;
}

static void
dispatch_config_free(struct dispatch_config *dc)
{
	contract_set_free(dc->contracts);
	config_free(&dc->cfg);
	pthread_mutex_destroy(&dc->rate_mu);
	free(dc->next_slot_ns);
	free(dc->providers);
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

bool
dispatch_sending_allowed(struct dispatch_shared *s)
{
	return s->env_enabled && atomic_load(&s->db_enabled) && schema_version_ok();
}

/* --- one effect ------------------------------------------------------------- */

void
dispatch_log_effect(enum log_level level, const char *event, const struct outbox_job *j,
                    int from, int to, const char *provider_id,
                    const char *error_class, const char *reason, long long duration_ms,
                    const char *hint)
{
	struct log_fields f = { 0 };
	/* a provider's error text may name an internal host or echo a key */
	char *safe;

	if (!log_enabled(level))
		return;
	safe = reason != NULL ? strdup(reason) : NULL;
	if (safe != NULL)
		(void)log_redact_provider(safe);
	f.client = j->client[0] ? j->client : NULL;
	f.key = j->key;
	f.effect_id = j->id;
	f.target = j->target;
	f.attempt = j->attempt;
	f.state_from = from >= 0 ? outbox_state_name((enum effect_state)from) : NULL;
	f.state_to = to >= 0 ? outbox_state_name((enum effect_state)to) : NULL;
	f.provider_id = provider_id != NULL && *provider_id ? provider_id : NULL;
	f.error_class = error_class;
	f.reason = reason != NULL && safe == NULL ? "(provider text left out: out of memory)" : safe;
	f.duration_ms = duration_ms;
	f.hint = hint;
	f.detail = j->type;
	log_event(level, event, &f);
	free(safe);
}

/* Marks and counts effects held back by the kill switch (effect_id: that
 * one, or NULL: any due one); how many were new, -1 on a database error. */
long long
dispatch_hold(struct db *db, const char *effect_id)
{
	long long n = 0;

	if (db_begin(db) != DB_OK)
		return -1;
	if (outbox_hold(db, effect_id, effect_id != NULL ? 1 : 10 * DISPATCH_TICK_BATCH, &n) !=
	        DB_OK ||
	    (n > 0 && control_add_blocked(db, n) != DB_OK) || db_commit(db) != DB_OK) {
		db_rollback(db);
		return -1;
	}
	return n;
}

bool
dispatch_release(struct dispatch_shared *s, struct db *db, const struct outbox_job *j,
                          int delay_s)
{
	return outbox_release(db, j->id, s->owner, delay_s) == OG_OK;
}

/* What one send of target t needs of its lease (no rate-limit wait: it is
 * over by the time of the check). */
int
dispatch_send_lease_s(const struct config_target *t)
{
	return DISPATCH_LEASE_MARGIN_S + 2 * (t->timeout_ms / 1000 + 1);
}

const char *
dispatch_next_action(const char *dl_class)
{
	if (strcmp(dl_class, DEADLETTER_UNKNOWN) == 0)
		return "find out whether the provider acted, then `oncegatectl reconcile EFFECT "
		       "--delivered --provider-id ID` or `--not-delivered` (and `resume`)";
	if (strcmp(dl_class, DEADLETTER_EXHAUSTED) == 0)
		return "check the target, then `oncegatectl resume EFFECT` (same key) or "
		       "`oncegatectl reject EFFECT`";
	return "fix the cause (payload, credentials, target), then `oncegatectl replay KEY "
	       "--new-key NEWKEY` or `oncegatectl reject EFFECT`";
}

/* --- what a worker's loop (src/dispatcher/worker.c) calls --------------------- */

int
dispatch_reconcile_due(struct dispatch_shared *s, struct db *db, struct provider_conn *pc)
{
	struct dispatch_config *dc = dispatch_config_get(s);
	const char **targets = calloc((size_t)dc->cfg.ntargets + 1, sizeof(*targets));
	struct outbox_batch b = { 0 };
	enum og_rc rc = OG_ERROR;
	int n = 0, i;

	/* the targets with a lookup URL */
	for (i = 0; targets != NULL && i < dc->cfg.ntargets; i++)
		if (dc->cfg.targets[i].lookup_url[0] != '\0')
			targets[n++] = dc->cfg.targets[i].name;
	if (targets != NULL && n > 0)
		rc = outbox_claim_reconcile(db, targets, n, dc->cfg.reconcile_interval_seconds,
		                            dc->cfg.dispatch_batch, &b);
	dispatch_config_put(s, dc);
	free(targets);
	if (rc != OG_OK)
		return 0;
	for (i = 0; i < b.n; i++) {
		struct outbox_job j;

		outbox_batch_job(&b, i, &j);
		dispatch_effect_reconcile(s, db, pc, &j);
		outbox_job_clear(&j);
	}
	n = b.n;
	outbox_batch_clear(&b);
	return n;
}

/* How long the rest of a batch must stay leased while the worker handles
 * one effect of target t: its rate-limit wait, two timeouts (an SMTP
 * server's goodbye after a timeout waits as long again), and a margin. */
static int
lease_need_s(const struct config *cfg, const char *target)
{
	const struct config_target *t = config_target(cfg, target);

	if (t == NULL)
		return DISPATCH_LEASE_MARGIN_S;
	return dispatch_send_lease_s(t) +
	       (t->rate_per_second > 0 ? cfg->dispatch_workers / t->rate_per_second + 1 : 0);
}

/* Renews the lease of rows [from, n) of a claimed batch when it has less
 * than the next effect needs; *until is the local estimate of its end. */
void
dispatch_keep_leased(struct dispatch_shared *s, struct db *db, const struct outbox_batch *b,
                     int from, const char *target, long long *until)
{
	struct dispatch_config *dc = dispatch_config_get(s);
	int need = lease_need_s(&dc->cfg, target);
	int secs = dc->cfg.dispatch_lease_seconds > 2 * need ? dc->cfg.dispatch_lease_seconds
	                                                     : 2 * need;
	long long t0 = dispatch_mono_ns();

	dispatch_config_put(s, dc);
	if (*until - t0 >= (long long)need * 1000000000LL)
		return;
	if (outbox_renew_batch(db, b, from, s->owner, secs) == OG_OK)
		*until = t0 + (long long)secs * 1000000000LL;
}

int
dispatch_release_unsent(struct dispatch_shared *s, struct db *db)
{
	char(*copy)[40] = calloc((size_t)s->nslots + 1, sizeof(*copy));
	const char **busy = calloc((size_t)s->nslots + 1, sizeof(*busy));
	int i, n = -1;

	if (copy != NULL && busy != NULL) {
		pthread_mutex_lock(&s->inflight_mu);
		for (i = 0; i < s->nslots; i++) {
			memcpy(copy[i], s->inflight[i], sizeof(copy[i]));
			busy[i] = copy[i];
		}
		pthread_mutex_unlock(&s->inflight_mu);
		if (outbox_release_unsent(db, s->owner, busy, s->nslots, &n) != OG_OK)
			n = -1;
	}
	free(busy);
	free(copy);
	return n;
}


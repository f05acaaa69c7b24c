/*
 * dispatch.c — the dispatcher's shared state and its workers: claim a batch
 * of due effects, keep it leased, hand each effect to dispatch_effect.c,
 * claim unknown effects for reconciliation, give back what a shutdown
 * leaves unsent; see dispatch.h. The housekeeping the janitor runs is in
 * dispatch_tick.c.
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
#include "digest.h"
#include "dispatch.h"
#include "dispatch_int.h"
#include "log.h"
#include "outbox.h"
#include "provider.h"

/* A worker claims what it expects to start within this long (see
 * dispatch_worker). */
#define CLAIM_AHEAD_MS 100

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

bool
dispatch_sending_allowed(struct dispatch_shared *s)
{
	return s->env_enabled && atomic_load(&s->db_enabled);
}

/* --- one effect ------------------------------------------------------------- */

static char *
dup_field(const PGresult *res, int row, const char *col)
{
	const char *v = db_get(res, row, col);

	return v != NULL ? strdup(v) : NULL;
}

static void
job_clear(struct dispatch_job *j)
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
job_read(struct dispatch_job *j, const PGresult *res, int row)
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

void
dispatch_log_effect(enum log_level level, const char *event, const struct dispatch_job *j,
                    const char *from, const char *to, const char *provider_id,
                    const char *error_class, const char *reason, long long duration_ms,
                    const char *hint)
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
dispatch_release(struct dispatch_shared *s, struct db *db, const struct dispatch_job *j,
                          int delay_s)
{
	char d[16];
	const char *p[3] = { j->id, s->owner, d };
	PGresult *res = NULL;
	bool ok;

	snprintf(d, sizeof(d), "%d", delay_s);
	if (db_exec(db, &outbox_st_release, p, &res) != DB_OK)
		return false;
	ok = PQntuples(res) == 1;
	PQclear(res);
	return ok;
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
	if (strcmp(dl_class, "unknown") == 0)
		return "find out whether the provider acted, then `oncegatectl reconcile EFFECT "
		       "--delivered --provider-id ID` or `--not-delivered` (and `resume`)";
	if (strcmp(dl_class, "exhausted") == 0)
		return "check the target, then `oncegatectl resume EFFECT` (same key) or "
		       "`oncegatectl reject EFFECT`";
	return "fix the cause (payload, credentials, target), then `oncegatectl replay KEY "
	       "--new-key NEWKEY` or `oncegatectl reject EFFECT`";
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
claim_reconcile(struct dispatch_shared *s, struct db *db, struct provider_conn *pc)
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
	    db_exec(db, &outbox_st_claim_reconcile, p, &res) != DB_OK) {
		free(targets);
		return 0;
	}
	free(targets);
	n = PQntuples(res);
	for (i = 0; i < n; i++) {
		struct dispatch_job j;

		job_read(&j, res, i);
		dispatch_effect_reconcile(s, db, pc, &j);
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
		return DISPATCH_LEASE_MARGIN_S;
	return dispatch_send_lease_s(t) +
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
	long long t0 = dispatch_mono_ns();
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
	if (db_exec(db, &outbox_st_renew_batch, p, &r) == DB_OK) {
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
	if (db_exec(db, &outbox_st_release_unsent, p, &res) != DB_OK) {
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
	struct provider_conn *pc = provider_conn_new();
	int slot = atomic_fetch_add(&s->next_slot, 1);
	/* How many effects the next claim takes: no more than this worker
	 * expects to start within CLAIM_AHEAD_MS (from the last batch's pace),
	 * at most dispatch_batch. A claimed effect that waits its turn is, if
	 * this process is killed, an effect nobody can prove unsent: it turns
	 * unknown with its lease. Fast targets get full batches (fewer claim
	 * round trips); slow or rate-limited ones one effect at a time. */
	int ahead = 1;

	dispatch_config_put(s, dc);
	if (db == NULL || pc == NULL) {
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
		until = dispatch_mono_ns() + (long long)lease_s * 1000000000LL;
		if (dispatch_sending_allowed(s) && db_exec(db, &outbox_st_claim, p, &res) == DB_OK) {
			long long t0 = dispatch_mono_ns(), per;

			n = PQntuples(res);
			for (i = 0; i < n; i++) {
				struct dispatch_job j;

				job_read(&j, res, i);
				if (atomic_load(&s->stopping)) {
					/* shutdown: the rest of the batch goes back */
					(void)dispatch_release(s, db, &j, 0);
				} else {
					keep_batch_leased(s, db, res, i, &until);
					set_inflight(s, slot, j.id);
					dispatch_effect_send(s, db, pc, &j);
					set_inflight(s, slot, "");
				}
				job_clear(&j);
			}
			PQclear(res);
			if (n > 0) {
				per = (dispatch_mono_ns() - t0) / n;
				ahead = per <= 0 ? 1 << 20
				                 : (int)((long long)CLAIM_AHEAD_MS * 1000000LL / per > 1 << 20
				                             ? 1 << 20
				                             : (long long)CLAIM_AHEAD_MS * 1000000LL / per);
				if (ahead < 1)
					ahead = 1;
			}
		}
		if (n == 0 && dispatch_sending_allowed(s) && !atomic_load(&s->stopping))
			n = claim_reconcile(s, db, pc);
		if (n == 0)
			wait_wake(s, seen, poll_ms);
	}
out:
	provider_conn_free(pc);
	db_free(db);
	return NULL;
}

/*
 * worker.c — one worker thread of oncegate-dispatch; see worker.h. The
 * loop: claim a batch of due effects (as many as this worker expects to
 * start soon), keep it leased while each effect is sent, then claim
 * unknown effects for reconciliation, and sleep until woken when there was
 * nothing. What happens to an effect is the library's (dispatch.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "db.h"
#include "deadline.h"
#include "dispatch.h"
#include "log.h"
#include "outbox.h"
#include "provider.h"
#include "worker.h"

/* A worker claims what it expects to start within this long (see
 * worker_main). */
#define CLAIM_AHEAD_MS 100

/* Sleeps until woken (after `seen`), the timeout, or shutdown. */
static void
wait_wake(struct dispatch_shared *s, unsigned long seen, int timeout_ms)
{
	struct timespec until = deadline_in_ms(CLOCK_REALTIME, timeout_ms);

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

static void
set_inflight(struct dispatch_shared *s, int slot, const char *id)
{
	if (slot < 0 || slot >= s->nslots)
		return;
	pthread_mutex_lock(&s->inflight_mu);
	snprintf(s->inflight[slot], sizeof(s->inflight[slot]), "%s", id);
	pthread_mutex_unlock(&s->inflight_mu);
}

void *
worker_main(void *arg)
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
		struct outbox_batch b = { 0 };
		int n = 0, i, poll_ms, lease_s;
		long long until;

		dc = dispatch_config_get(s);
		if (ahead > dc->cfg.dispatch_batch)
			ahead = dc->cfg.dispatch_batch;
		lease_s = dc->cfg.dispatch_lease_seconds;
		poll_ms = dc->cfg.dispatch_poll_ms;
		dispatch_config_put(s, dc);

		/* the local estimate of the batch's lease starts before the claim */
		until = dispatch_mono_ns() + (long long)lease_s * 1000000000LL;
		if (dispatch_sending_allowed(s) &&
		    outbox_claim(db, s->owner, ahead, lease_s, &b) == OG_OK) {
			long long t0 = dispatch_mono_ns(), per;

			n = b.n;
			for (i = 0; i < n; i++) {
				struct outbox_job j;

				outbox_batch_job(&b, i, &j);
				if (atomic_load(&s->stopping)) {
					/* shutdown: the rest of the batch goes back */
					(void)dispatch_release(s, db, &j, 0);
				} else {
					dispatch_keep_leased(s, db, &b, i, j.target, &until);
					set_inflight(s, slot, j.id);
					dispatch_effect_send(s, db, pc, &j);
					set_inflight(s, slot, "");
				}
				outbox_job_clear(&j);
			}
			dispatch_effect_flush(db);
			outbox_batch_clear(&b);
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
			n = dispatch_reconcile_due(s, db, pc);
		if (n == 0)
			wait_wake(s, seen, poll_ms);
	}
out:
	provider_conn_free(pc);
	db_free(db);
	return NULL;
}

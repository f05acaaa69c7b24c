/*
 * dispatch.h — the outbox dispatcher's rules: claim, send,
 * settle, reconcile (dispatch.c, dispatch_effect.c), and the housekeeping
 * tick (dispatch_tick.h). oncegate-dispatch (src/dispatcher/) runs the
 * threads, their loop (worker.c) and the schedule; everything they decide
 * is here.
 *
 * Concurrency: a pool of worker threads, each with its own database
 * connection and its own libcurl handle, each sending one effect at a time
 * with blocking calls. Every effect in flight needs its own compare-and-set
 * round trips anyway, so a connection per worker is no extra cost, and
 * blocking code reads top to bottom: at 3 a.m. the stack trace of a stuck
 * worker says exactly which effect and which call. The limit on effects in
 * flight is the number of workers (dispatch_workers).
 *
 * The rules, in the order an effect meets them:
 *   claim     pending and due → sending, leased to this process, attempt+1
 *             (FOR UPDATE SKIP LOCKED: any number of dispatchers, any host);
 *   check     right before the send: the kill switch (environment AND the
 *             database flag), that the lease is still ours and long enough
 *             for the send; blocked → back to pending, counted, logged;
 *             the stored payload's hash against the one decided, then the
 *             payload against the run's output and contract; refused →
 *             failed + dead letter, nothing sent;
 *   mark      the send started (send_started), committed once the
 *             request's transfer has started, before its body goes out:
 *             from here a lease that runs out makes the effect unknown,
 *             before it pending;
 *   send      the target's provider (provider.h), then the classifier (classify.h);
 *   settle    one transaction, compare-and-set on (sending, our lease):
 *             success → completed (and the run, when all its effects are);
 *             transient → pending at the backoff (backoff.h), or failed +
 *             dead letter once the budget is spent; permanent → failed +
 *             dead letter; ambiguous → unknown, never resent.
 *   reconcile unknown effects of targets with a lookup URL are looked up:
 *             found → completed; not found twice, an interval apart →
 *             pending (resumed with the same key); unanswerable → dead letter.
 *   tick      expired sending leases → unknown (send started) or pending
 *             (send not started, the attempt given back); expired approvals → run
 *             failed_terminal + decision callback; the kill switch re-read.
 */
#ifndef OG_DISPATCH_H
#define OG_DISPATCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "config.h"
#include "contract.h"
#include "db.h"
#include "provider.h"

struct outbox_batch;
struct outbox_job;

/* A configuration in use, shared by the workers and replaced on SIGHUP; the
 * last holder frees it. Per-target rate state lives with it, so a reload
 * starts the limits afresh. */
struct dispatch_config {
	struct config cfg;
	struct contract_set *contracts; /* NULL: contracts_dir did not load */
	char contracts_err[512];
	int refs;                       /* under dispatch_shared.cfg_mu */
	pthread_mutex_t rate_mu;
	long long *next_slot_ns;        /* per target, CLOCK_MONOTONIC */
	const struct provider **providers; /* per target, from its kind */
};

struct dispatch_shared {
	pthread_mutex_t cfg_mu;
	struct dispatch_config *current;
	char owner[37];                 /* lease owner: a random uuid per process */
	char name[128];                 /* host:pid, in the attempt history */
	bool env_enabled;               /* AI_ACTIONS_ENABLED=true at start */
	atomic_bool db_enabled;         /* the database flag, as last read */
	atomic_bool stopping;           /* SIGTERM: claim nothing more */
	/* The effect each worker is sending ("" when none), so that a shutdown
	 * past its deadline gives back the rest of the claimed batches. */
	pthread_mutex_t inflight_mu;
	char (*inflight)[40];
	int nslots;
	atomic_int next_slot;
	/* wake-ups: NOTIFY oncegate_outbox, the poll interval, shutdown */
	pthread_mutex_t wake_mu;
	pthread_cond_t wake_cv;
	unsigned long wake_seq;
};

int dispatch_shared_init(struct dispatch_shared *s, struct dispatch_config *dc)
	__attribute__((warn_unused_result));
void dispatch_shared_destroy(struct dispatch_shared *s);
/* A new reference-counted config owning *cfg's contents (cfg is zeroed). */
struct dispatch_config *dispatch_config_new(struct config *cfg);
struct dispatch_config *dispatch_config_get(struct dispatch_shared *s);
void dispatch_config_put(struct dispatch_shared *s, struct dispatch_config *dc);
/* SIGHUP: the workers pick the new one up at their next effect. */
void dispatch_config_swap(struct dispatch_shared *s, struct dispatch_config *dc);

/* Wakes every worker (a NOTIFY arrived, or shutdown). */
void dispatch_wake(struct dispatch_shared *s);

/* ---- what a worker's loop asks (src/dispatcher/worker.c) ---- */

/* CLOCK_MONOTONIC in nanoseconds. */
long long dispatch_mono_ns(void);
/* The kill switch: the environment AND the database flag as last read. */
bool dispatch_sending_allowed(struct dispatch_shared *s);
/* Not sent after all: back to pending after delay_s, the attempt given
 * back. False when the lease was no longer ours. */
bool dispatch_release(struct dispatch_shared *s, struct db *db, const struct outbox_job *j,
                      int delay_s);
/* Renews the lease of rows [from, n) of a claimed batch when it has less
 * than the next effect (of target) needs; *until is the local estimate of
 * the lease's end (dispatch_mono_ns). */
void dispatch_keep_leased(struct dispatch_shared *s, struct db *db, const struct outbox_batch *b,
                          int from, const char *target, long long *until);
/* dispatch_effect.c: sends one claimed effect and settles it. */
void dispatch_effect_send(struct dispatch_shared *s, struct db *db, struct provider_conn *pc,
                          struct outbox_job *j);
/* Commits the settle dispatch_effect_send held back for the next send's
 * mark (this thread's, if any): after each batch, before the worker waits. */
void dispatch_effect_flush(struct db *db);
/* Claims the unknown effects due for a look-up at targets that have one
 * and reconciles each; how many. */
int dispatch_reconcile_due(struct dispatch_shared *s, struct db *db, struct provider_conn *pc);

/* SIGTERM past the deadline: every effect this process claimed but is not
 * sending right now goes back to pending (nothing of it went out). Returns
 * how many, or -1 when the database did not answer. */
int dispatch_release_unsent(struct dispatch_shared *s, struct db *db);

/* The statements on the LISTEN connection's first use. */
const char *dispatch_listen_sql(void);

#endif

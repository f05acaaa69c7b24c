/*
 * jobs.h — the bulk jobs and the replay links: the one owner of
 * replay_jobs, replay_job_items, resume_job_items and run_replays.
 *
 * A job (replay_jobs) has a kind, replay or resume, and its items in the
 * table of its kind; run_replays links a replayed run to its original,
 * whether one operator replayed it or a job did. The use cases (replay.c,
 * repair.c, audit.c) run these statements inside their own transactions.
 */
#ifndef OG_JOBS_H
#define OG_JOBS_H

#include <stdbool.h>
#include <stddef.h>

#include "db.h"
#include "rc.h"

/* The newest replay of the run (after its lock, ledger_lock) in out, ""
 * when it was never replayed. */
enum og_rc jobs_replayed_as(struct db *db, long long client_id, const char *key, char *out,
                            size_t outlen) __attribute__((warn_unused_result));
/* A resume job's item seq (of effect_id) marked done, in the transaction
 * that resumed it. OG_CHANGED: no longer pending (done or refused). */
enum og_rc jobs_resume_done(struct db *db, long long job, int seq, const char *effect_id)
	__attribute__((warn_unused_result));

/* Both directions of a run's replay links, oldest first; strings owned. */
struct jobs_replay_link {
	char *original_key, *replay_key;
	char *dir;                   /* replay_of | replayed_as, from this run's side */
	char *other;                 /* the other run's key */
	char *at, *operator, *reason, *payload_source, *start_state;
	char *job_id;                /* NULL: not a job's */
};
DB_LIST(jobs_replay_links, jobs_replay_link);
enum og_rc jobs_links(struct db *db, long long client_id, const char *key,
                      struct jobs_replay_links *out) __attribute__((warn_unused_result));
void jobs_replay_links_clear(struct jobs_replay_links *l);

/* --- bulk jobs: a job's row (replay_jobs), both kinds ---------------------- */

#define JOBS_WORD_LEN 16

/* The states a job ends in (replay_jobs.state; it runs as 'running'), and
 * the state of the items still to do (jobs_item_counts.pending), as the
 * job's summary names them. */
#define JOBS_STOPPED      "stopped"
#define JOBS_COMPLETED    "completed"
#define JOBS_ITEM_PENDING "pending"

/* A job as its runner takes it. */
struct jobs_job {
	bool locked;                 /* this session holds its advisory lock now */
	char state[JOBS_WORD_LEN];   /* running | stopped | completed */
	bool completed;              /* every item was done or refused */
	char kind[JOBS_WORD_LEN];    /* replay | resume */
	long long client_id;         /* 0: none (a resume job) */
	double rate;                 /* items per second */
};
/* Reads the job and tries its session-level advisory lock (held by the one
 * process running it, released when that process exits or dies).
 * OG_NOT_FOUND: no such job. */
enum og_rc jobs_lock(struct db *db, long long job, struct jobs_job *out)
	__attribute__((warn_unused_result));
/* A stopped (or abandoned) job running again. OG_DONE_ALREADY: it is
 * completed. */
enum og_rc jobs_run(struct db *db, long long job) __attribute__((warn_unused_result));
/* A running job ends (completed, or stopped by an operator: the session's
 * role, unless one asked before); *client_id and kind are the job's (0 and
 * "" when it was not running). */
enum og_rc jobs_finish(struct db *db, long long job, bool completed, long long *client_id,
                       char kind[JOBS_WORD_LEN])
	__attribute__((warn_unused_result));
/* Asks a running job to stop (its runner stops before its next item),
 * recorded as asked by the session's role. OG_NOT_FOUND: the job is not
 * running, or was asked already. */
enum og_rc jobs_stop(struct db *db, long long job, long long *client_id,
                     char kind[JOBS_WORD_LEN])
	__attribute__((warn_unused_result));
/* The job's state and kind and whether it was asked to stop.
 * OG_NOT_FOUND: no such job. */
enum og_rc jobs_state(struct db *db, long long job, char state[JOBS_WORD_LEN],
                      char kind[JOBS_WORD_LEN], bool *stopping)
	__attribute__((warn_unused_result));
/* The job's items done, refused and pending (either kind). */
struct jobs_item_counts {
	long long done, refused, pending;
};
enum og_rc jobs_counts(struct db *db, long long job, struct jobs_item_counts *out)
	__attribute__((warn_unused_result));

/* --- replay jobs (replay_job_items) and the replay links (run_replays) ----- */

/* Every job, replay or resume, records the session's role (session_user)
 * as its operator. */
enum og_rc jobs_replay_create(struct db *db, const char *reason, const char *source,
                              long long client_id, double rate, long long *job)
	__attribute__((warn_unused_result));
enum og_rc jobs_replay_item(struct db *db, long long job, int seq, const char *key,
                            const char *new_key) __attribute__((warn_unused_result));
/* The job's next pending item (*seq 0 when none: *key and *new_key NULL,
 * else new strings) and whether it was asked to stop. */
enum og_rc jobs_replay_next(struct db *db, long long job, int *seq, char **key, char **new_key,
                            bool *stop) __attribute__((warn_unused_result));
/* Item seq done (detail: the new run's state), in the replay's
 * transaction. OG_DONE_ALREADY: no longer pending. */
enum og_rc jobs_replay_done(struct db *db, long long job, int seq, const char *detail)
	__attribute__((warn_unused_result));
enum og_rc jobs_replay_refuse(struct db *db, long long job, int seq, const char *detail)
	__attribute__((warn_unused_result));

/* One replay: the original key handed its event to the new key (by the
 * session's role). */
struct jobs_link {
	long long client_id;
	const char *key, *new_key;
	const char *reason;
	const char *payload_source;  /* original | corrected */
	const char *payload_hash;
	const char *start_state;     /* the new run's */
	long long job;               /* 0: not a job's */
};
enum og_rc jobs_link(struct db *db, const struct jobs_link *l)
	__attribute__((warn_unused_result));

/* --- resume jobs (resume_job_items) ------------------------------------------ */

/* Each id of the selection (effect or dead-letter ids, in order) with its
 * effect and the resume verdict's inputs, read without changing anything:
 * one each, in order. Strings owned, NULL when none. */
struct jobs_resume_seen {
	char *effect_id;             /* NULL: no such effect */
	char *client_name, *idempotency_key, *target, *effect_type;
	char *state;                 /* the effect's */
	char *provider_key;
	int run_state;               /* enum run_state; -1: no run */
	char *replayed_as;           /* the run's newest replay */
	bool undelivered;            /* known undelivered */
};
DB_LIST(jobs_resume_check, jobs_resume_seen);
enum og_rc jobs_resume_check(struct db *db, const char *const *ids, int n,
                             struct jobs_resume_check *out) __attribute__((warn_unused_result));
void jobs_resume_check_clear(struct jobs_resume_check *c);
/* A resume job has no client of its own (a selection may span clients). */
enum og_rc jobs_resume_create(struct db *db, const char *reason, const char *source,
                              double rate, long long *job)
	__attribute__((warn_unused_result));
enum og_rc jobs_resume_item(struct db *db, long long job, int seq, const char *effect_id,
                            const char *given_id) __attribute__((warn_unused_result));
/* The job's next pending item (*seq 0 and effect_id "" when none) and
 * whether it was asked to stop. */
enum og_rc jobs_resume_next(struct db *db, long long job, int *seq, char effect_id[37],
                            bool *stop) __attribute__((warn_unused_result));
enum og_rc jobs_resume_refuse(struct db *db, long long job, int seq, const char *detail)
	__attribute__((warn_unused_result));

#endif

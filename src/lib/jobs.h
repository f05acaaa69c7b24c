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

/* Both directions of a run's replay links, oldest first: rows of
 * original_key, replay_key, dir (replay_of | replayed_as, from this run's
 * side), other (the other run's key), at, operator, reason,
 * payload_source, start_state, job_id in *rows (PQclear them). */
enum og_rc jobs_links(struct db *db, long long client_id, const char *key, PGresult **rows)
	__attribute__((warn_unused_result));

/* Statement rows for the use cases' transactions and pipelines (their
 * parameters are the $n of the SQL text in jobs.c). */
extern const struct db_stmt jobs_st_resume_check;
extern const struct db_stmt jobs_st_resume_create;
extern const struct db_stmt jobs_st_resume_item;
extern const struct db_stmt jobs_st_resume_next;
extern const struct db_stmt jobs_st_resume_refuse;
extern const struct db_stmt jobs_st_link;
extern const struct db_stmt jobs_st_replay_done;
extern const struct db_stmt jobs_st_replay_create;
extern const struct db_stmt jobs_st_replay_item;
extern const struct db_stmt jobs_st_counts;
extern const struct db_stmt jobs_st_lock;
extern const struct db_stmt jobs_st_run;
extern const struct db_stmt jobs_st_replay_next;
extern const struct db_stmt jobs_st_replay_refuse;
extern const struct db_stmt jobs_st_finish;
extern const struct db_stmt jobs_st_stop;
extern const struct db_stmt jobs_st_state;

#endif

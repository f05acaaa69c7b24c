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

#include "db.h"

/* Statement rows for the use cases' transactions and pipelines (their
 * parameters are the $n of the SQL text in jobs.c). */
extern const struct db_stmt jobs_st_replayed_as;
extern const struct db_stmt jobs_st_resume_check;
extern const struct db_stmt jobs_st_resume_create;
extern const struct db_stmt jobs_st_resume_item;
extern const struct db_stmt jobs_st_resume_next;
extern const struct db_stmt jobs_st_resume_done;
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
extern const struct db_stmt jobs_st_links;

#endif

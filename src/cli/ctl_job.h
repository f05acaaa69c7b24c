/*
 * ctl_job.h — the one runner of oncegatectl's bulk jobs, for bulk resume
 * and bulk replay alike, and `oncegatectl stop`.
 *
 * A job is a stored list of items (its kind "resume" or "replay") that its
 * command checked whole before creating it. The runner goes through the
 * pending items at a rate (item n starts no earlier than n / rate seconds
 * after the start), until none is left, `oncegatectl stop JOB` asks it to
 * stop, or SIGINT/SIGTERM arrives; what is done stays done and recorded,
 * and the job's command continues it later. A job stopped before its end
 * exits EXIT_STOPPED (ctl.h). Its lines in the decision log are
 * `<kind>.job_created`, `.job_resumed`, `.job_stopped`, `.job_completed`,
 * `.job_interrupted` and `<kind>.dry_run` for a check that ran nothing.
 */
#ifndef OG_CTL_JOB_H
#define OG_CTL_JOB_H

#include "ctl.h"

#define CTL_JOB_RATE_DEFAULT 5.0     /* items per second when --rate is not given */
#define CTL_JOB_RATE_MAX     1000.0

/* What one step of a job came to. */
enum ctl_job_step {
	CTL_JOB_DONE,      /* the item was carried out */
	CTL_JOB_REFUSED,   /* the item was refused, and recorded so in the job */
	CTL_JOB_END,       /* no pending item is left */
	CTL_JOB_STOP,      /* `oncegatectl stop` asked the job to stop */
	CTL_JOB_LOST,      /* the database went away during the item */
	CTL_JOB_FAILED,    /* the job cannot go on; the step set the exit code */
};

struct ctl_job {
	const char *kind;              /* "resume" or "replay" */
	long long id;
	double rate;                   /* items per second */
	const char *op, *reason;       /* the operator running it, and why */
	bool tty;                      /* set by the runner: progress on a terminal */
	/* Takes the next pending item and carries it out: prints and logs
	 * it, records a refusal in the job. *ex with CTL_JOB_FAILED. */
	enum ctl_job_step (*step)(struct ctl *ctl, struct ctl_job *job, int *ex);
	void *arg;                     /* the command's own state, for step */
	json_t *results;               /* --json: what each item came to, in order */
};

/* "--rate N" or "N/s", 0 < N <= CTL_JOB_RATE_MAX; -1 otherwise. */
int ctl_job_rate(const char *text, double *rate) __attribute__((warn_unused_result));
/* The log line of a dry run: source (the map file or the selection) checked
 * with n items, ok to run, refused; nothing changed. */
void ctl_job_dry_run(struct ctl *ctl, const char *kind, const char *op, const char *reason,
                     const char *source, int n, int ok, int refused);
/* Says (log, stderr) that the job was created from source with n items,
 * and how to stop and continue it. */
void ctl_job_created(struct ctl *ctl, const struct ctl_job *job, const char *source, int n);
/* Says (log, stderr) that a job taken again goes on at its rate. */
void ctl_job_continued(struct ctl *ctl, const struct ctl_job *job);
/* Runs the job, already taken (replay_job_take), to its end, a stop or an
 * interruption; says what it did and returns the exit code: EXIT_REFUSED
 * when an item was refused, EXIT_STOPPED when it did not reach its end.
 * With --json the steps add what each item came to (ctl_job_result) and
 * the run prints one document at its end: {job, kind, rate, results,
 * totals {done, refused, pending}, end}. */
int ctl_job_run(struct ctl *ctl, struct ctl_job *job) __attribute__((warn_unused_result));

/* Adds one item's outcome to the job's --json document (steals v). */
void ctl_job_result(struct ctl_job *job, json_t *v);

/* `oncegatectl stop JOB --reason TEXT`: a job of either kind stops before
 * its next item. */
ctl_command_fn ctl_job_stop;

#endif

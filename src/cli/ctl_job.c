/*
 * ctl_job.c — the bulk-job runner of oncegatectl and `stop`; see ctl_job.h.
 * The jobs' rows are the library's (replay_job_*: take, next, finish, stop,
 * counts serve both kinds); what differs between kinds is the step.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl_job.h"
#include "digest.h"
#include "jobs.h"
#include "replay.h"

/* How each kind names what it does and how it is continued. */
struct job_kind {
	const char *kind;
	const char *did;         /* an item carried out: "done", "resumed" */
	const char *again;       /* going on later: "resume", "continue" */
	const char *again_did;   /* ... and when it does: "resumed", "continued" */
	const char *command;     /* the command that continues it */
	const char *would;       /* a dry run's verdict: "would be replayed" */
	bool this_run;           /* counts only what this run does */
};

static const struct job_kind kinds[] = {
	{ "replay", "done", "resume", "resumed", "replay --resume", "replayed", false },
	{ "resume", "resumed", "continue", "continued", "resume --job", "resumed", true },
};

static const struct job_kind *
kind_of(const char *kind)
{
	size_t i;

	for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (strcmp(kinds[i].kind, kind) == 0)
			return &kinds[i];
	return &kinds[0];
}

static volatile sig_atomic_t g_interrupted;

static void
on_signal(int sig)
{
	g_interrupted = sig;
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int
ctl_job_rate(const char *s, double *rate)
{
	char *end;
	double r;

	errno = 0;
	r = strtod(s, &end);
	if (errno != 0 || end == s || !(r > 0) || r > CTL_JOB_RATE_MAX ||
	    (*end != '\0' && strcmp(end, "/s") != 0))
		return -1;
	*rate = r;
	return 0;
}

void
ctl_job_dry_run(struct ctl *ctl, const char *kind, const char *op, const char *reason,
                const char *source, int n, int ok, int refused)
{
	struct log_fields f = { .actor = op, .reason = reason, .count = n };
	char detail[400], event[48];

	snprintf(detail, sizeof(detail), "dry run of %s: %d items, %d would be %s, %d refused; "
	         "nothing changed", source, n, ok, kind_of(kind)->would, refused);
	f.detail = detail;
	snprintf(event, sizeof(event), "%s.dry_run", kind);
	ctl_log(ctl, LOG_LEVEL_INFO, event, &f);
}

void
ctl_job_created(struct ctl *ctl, const struct ctl_job *job, const char *source, int n)
{
	const struct job_kind *k = kind_of(job->kind);
	struct log_fields f = { .actor = job->op, .reason = job->reason, .count = n };
	char detail[400], event[48];

	snprintf(detail, sizeof(detail), "job %lld from %s: %d items at %g/s", job->id, source, n,
	         job->rate);
	f.detail = detail;
	snprintf(event, sizeof(event), "%s.job_created", job->kind);
	ctl_log(ctl, LOG_LEVEL_NOTICE, event, &f);
	fprintf(stderr, "oncegatectl: job %lld: %d items at %g/s; stop it with `oncegatectl stop "
	        "%lld --reason TEXT` (or Ctrl-C), %s with `oncegatectl %s %lld --reason TEXT`\n",
	        job->id, n, job->rate, job->id, k->again, k->command, job->id);
	(void)ctl;
}

void
ctl_job_result(struct ctl_job *job, json_t *v)
{
	if (job->results == NULL)
		job->results = json_array();
	json_array_append_new(job->results, v);
}

void
ctl_job_continued(struct ctl *ctl, const struct ctl_job *job)
{
	struct log_fields f = { .actor = job->op, .reason = job->reason };
	char detail[128], event[48];

	snprintf(detail, sizeof(detail), "job %lld %s at %g/s", job->id,
	         kind_of(job->kind)->again_did, job->rate);
	f.detail = detail;
	snprintf(event, sizeof(event), "%s.job_resumed", job->kind);
	ctl_log(ctl, LOG_LEVEL_NOTICE, event, &f);
	fprintf(stderr, "oncegatectl: %s\n", detail);
}

static void
progress(const struct ctl_job *job, int done, int refused, int pending)
{
	if (!job->tty)
		return;
	printf("\r\033[Kjob %lld: %d %s, %d refused, %d to go", job->id, done,
	       kind_of(job->kind)->did, refused, pending);
	fflush(stdout);
}

/* The job ends before its end (interrupted or stopped): what happened and
 * how to go on, on stderr; why, in the job; EXIT_STOPPED once recorded. */
static int
halt(struct ctl *ctl, const struct ctl_job *job, const char *what, const char *why)
{
	const struct job_kind *k = kind_of(job->kind);
	enum og_rc rc;

	if (job->tty)
		printf("\n");
	fprintf(stderr, "oncegatectl: job %lld %s; %s with: oncegatectl %s %lld --reason TEXT\n",
	        job->id, what, k->again, k->command, job->id);
	rc = replay_job_finish(ctl->db, job->id, false, why);
	return rc == OG_OK ? EXIT_STOPPED : ctl_exit(rc);
}

/* The approval links items carry hold raw tokens: wiped before they are
 * freed. */
static void
wipe_links(json_t *results)
{
	json_t *item, *a;
	size_t i, k;

	json_array_foreach(results, i, item) {
		json_array_foreach(json_object_get(item, "approvals"), k, a) {
			const char *u = json_string_value(json_object_get(a, "url"));

			if (u != NULL)
				digest_wipe((char *)(uintptr_t)u, strlen(u));
		}
	}
}

/* What the run did, on stderr and in the log; the log's event says how the
 * job ended. */
static void
summary(struct ctl *ctl, struct ctl_job *job, int ex)
{
	int d = 0, r = 0, p = 0;
	struct log_fields f = { .actor = job->op, .reason = job->reason };
	char detail[160], event[48];
	const char *end;

	if (replay_job_counts(ctl->db, job->id, &d, &r, &p) == OG_OK) {
		snprintf(detail, sizeof(detail), "job %lld: %d %s, %d refused, %d pending", job->id,
		         d, kind_of(job->kind)->did, r, p);
		f.detail = detail;
		f.count = d;
		fprintf(stderr, "oncegatectl: %s\n", detail);
	}
	end = ex == EXIT_STOPPED                 ? JOBS_STOPPED
	      : p == 0 && ex != EXIT_UNAVAILABLE ? JOBS_COMPLETED
	                                         : "interrupted";
	snprintf(event, sizeof(event), "%s.job_%s", job->kind, end);
	ctl_log(ctl, LOG_LEVEL_NOTICE, event, &f);
	if (ctl->json) {
		json_t *doc;

		if (job->results == NULL)
			job->results = json_array();
		doc = json_pack("{s:I, s:s, s:f, s:O, s:{s:i, s:i, s:i}, s:s}", "job",
		                (json_int_t)job->id, "kind", job->kind, "rate", job->rate, "results",
		                job->results, "totals", "done", d, "refused", r,
		                JOBS_ITEM_PENDING, p, "end", end);
		ctl_print_json(doc);
		json_decref(doc);
	}
	wipe_links(job->results);
	json_decref(job->results);
	job->results = NULL;
}

int
ctl_job_run(struct ctl *ctl, struct ctl_job *job)
{
	const struct job_kind *k = kind_of(job->kind);
	struct sigaction sa;
	double t0 = now_s();
	int done = 0, refused = 0, pending = 0, n = 0, ex = EXIT_SUCCESS;
	enum og_rc rc;

	job->tty = isatty(STDOUT_FILENO) && !ctl->json;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: a sleep ends at once */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (replay_job_counts(ctl->db, job->id, &done, &refused, &pending) != OG_OK)
		return EXIT_UNAVAILABLE;
	if (k->this_run)
		done = refused = 0;
	progress(job, done, refused, pending);
	for (;;) {
		double due = t0 + (double)n / job->rate;
		enum ctl_job_step st;

		/* the rate limit: item n starts no earlier than t0 + n / rate */
		while (!g_interrupted && now_s() < due) {
			double left = due - now_s();
			struct timespec ts = { 0, (long)((left < 0.1 ? left : 0.1) * 1e9) };

			nanosleep(&ts, NULL);
		}
		if (g_interrupted) {
			const char *sig = g_interrupted == SIGINT ? "SIGINT" : "SIGTERM";
			char what[64], why[32];

			snprintf(what, sizeof(what), "interrupted (%s); what is done stays done", sig);
			snprintf(why, sizeof(why), "interrupted (%s)", sig);
			ex = halt(ctl, job, what, why);
			break;
		}
		st = job->step(ctl, job, &ex);
		if (st == CTL_JOB_FAILED)
			break;
		if (st == CTL_JOB_STOP) {
			ex = halt(ctl, job, "stopped as asked (oncegatectl stop)",
			          "stopped as asked by oncegatectl stop");
			break;
		}
		if (st == CTL_JOB_END) {
			rc = replay_job_finish(ctl->db, job->id, true, NULL);
			ex = rc != OG_OK ? ctl_exit(rc)
			     : refused > 0   ? EXIT_REFUSED
			                     : EXIT_SUCCESS;
			break;
		}
		if (st == CTL_JOB_LOST) {
			if (job->tty)
				printf("\n");
			fprintf(stderr, "oncegatectl: job %lld: the database went away; what is done "
			        "stays done; %s with: oncegatectl %s %lld\n", job->id, k->again,
			        k->command, job->id);
			ex = EXIT_UNAVAILABLE;
			break;
		}
		if (st == CTL_JOB_DONE)
			done++;
		else
			refused++;
		pending--;
		n++;
		progress(job, done, refused, pending);
		fflush(stdout);
	}
	if (job->tty && ex == EXIT_SUCCESS)
		printf("\n");
	summary(ctl, job, ex);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	return ex;
}

int
ctl_job_stop(struct ctl *ctl, int argc, char **argv)
{
	const char *reason = NULL, *op = NULL;
	const struct ctl_opt opts[] = {
		{ "reason", CTL_OPT_TEXT, &reason, 0, NULL },
		{ NULL, 0, NULL, 0, NULL },
	};
	char msg[512], kind[16] = "replay", event[48], *end;
	long long job;
	enum og_rc rc;

	if (ctl_options(ctl, argc, argv, opts, false) != 0)
		return EXIT_USAGE;
	if (optind != argc - 1)
		return ctl_usage(ctl);
	job = strtoll(argv[optind], &end, 10);
	if (*end != '\0' || job <= 0)
		return ctl_refuse(ctl, "stop", EXIT_USAGE, op, NULL, reason, "JOB is a job number");
	if (reason == NULL || reason[0] == '\0')
		return ctl_refuse(ctl, "stop", EXIT_USAGE, op, NULL, NULL,
		                  "--reason TEXT is required: it is recorded with the operator");
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	/* the stop is recorded under the session's role; the log names it too */
	op = ctl_operator(ctl);
	rc = replay_job_stop(ctl->db, job, reason, kind, sizeof(kind), msg, sizeof(msg));
	if (rc != OG_OK)
		return ctl_refuse(ctl, "stop", ctl_exit(rc), op, NULL, reason,
		                  "%s", rc == OG_UNAVAILABLE ? db_error(ctl->db) : msg);
	{
		struct log_fields f = { .actor = op, .reason = reason };
		char detail[64];

		snprintf(detail, sizeof(detail), "%s job %lld asked to stop", kind, job);
		f.detail = detail;
		snprintf(event, sizeof(event), "%s.job_stop", kind);
		ctl_log(ctl, LOG_LEVEL_NOTICE, event, &f);
	}
	if (ctl->json)
		ctl_print_new(json_pack("{s:I, s:s, s:b}", "job", (json_int_t)job, "kind", kind,
		                        "stop_requested", 1));
	fprintf(stderr, "oncegatectl: job %lld stops before its next item; what is done stays "
	        "done (continue with `oncegatectl %s %lld --reason TEXT`)\n", job,
	        kind_of(kind)->command, job);
	return EXIT_SUCCESS;
}

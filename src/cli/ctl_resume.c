/*
 * ctl_resume.c — bulk resume: a selection of failed effects (a file of
 * effect or dead-letter ids, or the open dead letters a filter matches),
 * checked whole, then stored as a job and run by the job runner
 * (ctl_job.c). `--dry-run` lists every item with its verdict and changes
 * nothing. Refusals are logged as `operator.refused`, as in ctl_repair.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* getline */
#endif
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "ctl_job.h"
#include "ctl_repair.h"
#include "ctl_resume.h"
#include "deadletter.h"
#include "repair.h"
#include "replay.h"

#define BULK_ITEMS_MAX  10000    /* ids of one selection */
#define BULK_LINE_MAX   256



struct bulk_opts {
	const char *select, *cls, *target, *since, *rate_text;
	long long since_seconds;
	bool dead_letters, dry_run;
	long long job;
	double rate;
};

struct selection {
	struct repair_bulk_item *items;
	int n;
	char source[300];
};

static int
sel_add(struct selection *sel, const char *id, char *err, size_t errlen)
{
	struct repair_bulk_item *p;

	if (sel->n >= BULK_ITEMS_MAX) {
		snprintf(err, errlen, "a selection holds at most %d ids", BULK_ITEMS_MAX);
		return -1;
	}
	if ((sel->n & (sel->n - 1)) == 0) {  /* 0, 1, 2, 4, …: double */
		p = realloc(sel->items, sizeof(*p) * (size_t)(sel->n == 0 ? 16 : sel->n * 2));
		if (p == NULL) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		sel->items = p;
	}
	memset(&sel->items[sel->n], 0, sizeof(sel->items[0]));
	sel->items[sel->n].seq = sel->n + 1;
	snprintf(sel->items[sel->n].given, sizeof(sel->items[0].given), "%s", id);
	sel->n++;
	return 0;
}

/* FILE: one id a line; blank lines and # comments skipped. */
static int
sel_read(const char *path, struct selection *sel, char *err, size_t errlen)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int lineno = 0, rc = 0, i;

	if (f == NULL) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
		return -1;
	}
	while (rc == 0 && (len = getline(&line, &cap, f)) != -1) {
		char *p = line, *e;

		lineno++;
		if (len > BULK_LINE_MAX) {
			snprintf(err, errlen, "%s line %d is longer than %d bytes", path, lineno,
			         BULK_LINE_MAX);
			rc = -1;
			break;
		}
		while (*p == ' ' || *p == '\t')
			p++;
		e = p + strlen(p);
		while (e > p && isspace((unsigned char)e[-1]))
			*--e = '\0';
		if (*p == '\0' || *p == '#')
			continue;
		if (!repair_is_uuid(p)) {
			snprintf(err, errlen, "%s line %d: \"%.60s\" is not an effect or dead-letter id "
			         "(a UUID)", path, lineno, p);
			rc = -1;
			break;
		}
		for (i = 0; i < sel->n; i++) {
			if (strcasecmp(sel->items[i].given, p) == 0) {
				snprintf(err, errlen, "%s line %d names %s again", path, lineno, p);
				rc = -1;
				break;
			}
		}
		if (rc == 0)
			rc = sel_add(sel, p, err, errlen);
	}
	free(line);
	if (f != stdin)
		fclose(f);
	return rc;
}

/* --dead-letters: the open letters the filters match, oldest first. */
static int
sel_letters(struct ctl *ctl, const struct bulk_opts *o, struct selection *sel, char *err,
            size_t errlen)
{
	struct deadletter_filter f = { 0 };
	json_t *list = NULL, *v;
	enum og_rc rc;
	size_t i;

	f.error_class = o->cls;
	f.target = o->target;
	f.state = "open";
	f.limit = BULK_ITEMS_MAX + 1;
	f.since_seconds = o->since_seconds;
	rc = deadletter_list(ctl->db, &f, &list);
	if (rc != OG_OK) {
		snprintf(err, errlen, "%s", db_error(ctl->db));
		return ctl_exit(rc);
	}
	if (json_array_size(list) > BULK_ITEMS_MAX) {
		json_decref(list);
		snprintf(err, errlen, "more than %d letters match: narrow the selection",
		         BULK_ITEMS_MAX);
		return EXIT_REFUSED;
	}
	json_array_foreach(list, i, v) {
		if (sel_add(sel, ctl_jstr(v, "dead_letter_id"), err, errlen) != 0) {
			json_decref(list);
			return EXIT_REFUSED;
		}
	}
	json_decref(list);
	snprintf(sel->source, sizeof(sel->source), "dead letters: open%s%s%s%s%s%s",
	         o->cls ? ", class " : "", o->cls ? o->cls : "", o->target ? ", target " : "",
	         o->target ? o->target : "", o->since ? ", since " : "",
	         o->since ? o->since : "");
	return 0;
}

static void
sel_print(struct ctl *ctl, const struct selection *sel, int ok, int refused)
{
	int i;

	if (ctl->json) {
		json_t *list = json_array(), *doc;

		for (i = 0; i < sel->n; i++) {
			const struct repair_bulk_item *it = &sel->items[i];

			json_array_append_new(list, json_pack(
				"{s:i, s:s, s:s?, s:s?, s:s?, s:s?, s:s?, s:s?, s:s, s:s}", "seq", it->seq,
				"id", it->given, "effect_id", it->effect_id[0] ? it->effect_id : NULL,
				"client", it->client_name[0] ? it->client_name : NULL,
				"key", it->key[0] ? it->key : NULL,
				"target", it->target[0] ? it->target : NULL,
				"type", it->type[0] ? it->type : NULL,
				"state", it->state[0] ? it->state : NULL,
				"verdict", it->ok ? "resume" : "refused", "detail", it->why));
		}
		doc = json_pack("{s:b, s:s, s:o, s:{s:i, s:i, s:i}}", "dry_run", 1, "source",
		                sel->source, "items", list, "totals", "items", sel->n,
		                "would_resume", ok, "refused", refused);
		ctl_print_json(doc);
		json_decref(doc);
		return;
	}
	printf("%-5s %-36s  %-36s  %-9s %-14s %-30s %s\n", "SEQ", "ID", "EFFECT", "STATE",
	       "TARGET", "KEY", "VERDICT");
	for (i = 0; i < sel->n; i++) {
		const struct repair_bulk_item *it = &sel->items[i];

		printf("%-5d %-36s  %-36s  %-9s %-14s %-30s %s%s\n", it->seq, it->given,
		       it->effect_id[0] ? it->effect_id : "-", it->state[0] ? it->state : "-",
		       it->target[0] ? it->target : "-", it->key[0] ? it->key : "-",
		       it->ok ? "" : "REFUSED: ", it->why);
	}
	printf("total %d: %d would be resumed, %d refused\n", sel->n, ok, refused);
}

/* The job's state for its steps: who resumes and why. */
struct resume_job {
	struct ctl_repair_act *a;
};

/* One item of a resume job: the next pending effect, resumed or refused. */
static enum ctl_job_step
resume_step(struct ctl *ctl, struct ctl_job *job, int *ex)
{
	struct resume_job *rj = job->arg;
	struct repair_who who = { rj->a->op, rj->a->reason };
	struct repair_out out;
	char effect[REPAIR_ID_LEN], detail[64], why[REPAIR_WHY_MAX + 80];
	bool stop = false;
	int seq;
	enum og_rc rc;

	if ((rc = repair_bulk_next(ctl->db, job->id, &seq, effect, &stop)) != OG_OK) {
		*ex = ctl_exit(rc);
		return CTL_JOB_FAILED;
	}
	if (stop)
		return CTL_JOB_STOP;
	if (seq == 0)
		return CTL_JOB_END;
	memset(&out, 0, sizeof(out));
	rc = repair_bulk_resume(ctl->db, job->id, seq, effect, &who, &out);
	snprintf(detail, sizeof(detail), "job %lld item %d", job->id, seq);
	if (rc == OG_OK) {
		ctl_repair_log_change(ctl, "effect.resumed", rj->a, &out, NULL, detail);
		if (ctl->json)
			ctl_job_result(job, json_pack("{s:i, s:s, s:s, s:s, s:s}", "seq", seq,
			                              "effect_id", out.effect_id, "key", out.key,
			                              "outcome", "resumed", "provider_key",
			                              out.provider_key));
		return CTL_JOB_DONE;
	}
	if (rc == OG_UNAVAILABLE)
		return CTL_JOB_LOST;
	if (rc == OG_ERROR || out.why[0] == '\0')
		snprintf(out.why, sizeof(out.why), "%s", db_error(ctl->db));
	snprintf(why, sizeof(why), "%s: %s", detail, out.why);
	(void)ctl_repair_refuse(ctl, rj->a, ctl_repair_code(rc), why, &out, EXIT_REFUSED);
	if (ctl->json)
		ctl_job_result(job, json_pack("{s:i, s:s, s:s, s:s}", "seq", seq, "effect_id", effect,
		                              "outcome", "refused", "detail", out.why));
	if (repair_bulk_refuse(ctl->db, job->id, seq, out.why) != OG_OK) {
		*ex = EXIT_UNAVAILABLE;
		return CTL_JOB_FAILED;
	}
	return CTL_JOB_REFUSED;
}

/* Runs a resume job, taken. */
static int
resume_job_go(struct ctl *ctl, struct ctl_repair_act *a, struct ctl_job *job)
{
	struct resume_job rj = { a };

	job->step = resume_step;
	job->arg = &rj;
	return ctl_job_run(ctl, job);
}

/* The options of a bulk resume into *o and a->reason, checked; 0, or the
 * exit status of the refusal it printed. */
static int
bulk_options(struct ctl *ctl, int argc, char **argv, struct bulk_opts *o,
             struct ctl_repair_act *a)
{
	const struct ctl_opt opts[] = {
		{ "select", CTL_OPT_TEXT, &o->select, 0, NULL },
		{ "dead-letters", CTL_OPT_FLAG, &o->dead_letters, 0, NULL },
		{ "class", CTL_OPT_TEXT, &o->cls, 0, NULL },
		{ "target", CTL_OPT_TEXT, &o->target, 0, NULL },
		{ "since", CTL_OPT_TEXT, &o->since, 0, NULL },
		{ "job", CTL_OPT_JOB, &o->job, 0, NULL },
		{ "rate", CTL_OPT_TEXT, &o->rate_text, 0, NULL },
		{ "dry-run", CTL_OPT_FLAG, &o->dry_run, 0, NULL },
		{ "reason", CTL_OPT_TEXT, &a->reason, 0, NULL },
		{ NULL, 0, NULL, 0, NULL },
	};
	char err[128];
	int bad, ex;

	memset(o, 0, sizeof(*o));
	o->rate = CTL_JOB_RATE_DEFAULT;
	bad = ctl_options(ctl, argc, argv, opts, true);
	if (bad || optind != argc) {
		(void)ctl_usage(ctl);
		return ctl_repair_refuse(ctl, a, "usage", "bulk resume takes --select FILE, "
		                         "--dead-letters or --job JOB, and no EFFECT", NULL,
		                         EXIT_USAGE);
	}
	if ((o->select != NULL) + o->dead_letters + (o->job > 0) != 1)
		return ctl_repair_refuse(ctl, a, "usage", "name one selection: --select FILE, "
		                         "--dead-letters [filters] or --job JOB", NULL, EXIT_USAGE);
	if (!o->dead_letters && (o->cls != NULL || o->target != NULL || o->since != NULL))
		return ctl_repair_refuse(ctl, a, "usage", "--class, --target and --since filter "
		                         "--dead-letters", NULL, EXIT_USAGE);
	if (o->since != NULL && ctl_time(ctl, "--since", o->since, &o->since_seconds) != 0)
		return ctl_repair_refuse(ctl, a, "usage", "--since takes a TIME", NULL, EXIT_USAGE);
	if (o->cls != NULL && !ctl_one_of(CTL_DEAD_LETTER_CLASSES, o->cls))
		return ctl_repair_refuse(ctl, a, "usage", "--class is permanent, exhausted or unknown",
		                         NULL, EXIT_USAGE);
	if (o->job > 0 && o->dry_run)
		return ctl_repair_refuse(ctl, a, "usage", "--dry-run is for a new selection; a job's "
		                         "list is fixed (see it with --json)", NULL, EXIT_USAGE);
	if (o->rate_text != NULL && ctl_job_rate(o->rate_text, &o->rate) != 0) {
		snprintf(err, sizeof(err), "--rate is N or N/s with 0 < N <= %g", CTL_JOB_RATE_MAX);
		return ctl_repair_refuse(ctl, a, "usage", err, NULL, EXIT_USAGE);
	}
	if (!o->dry_run && (ex = ctl_repair_check_reason(ctl, a)) != 0)
		return ex;
	if (o->dry_run && a->reason != NULL && strlen(a->reason) > CTL_REPAIR_REASON_MAX)
		return ctl_repair_refuse(ctl, a, "usage", "--reason is at most 1000 characters", NULL,
		                         EXIT_USAGE);
	return 0;
}

/* --job JOB: a job that stopped, continued. */
static int
bulk_continue(struct ctl *ctl, const struct bulk_opts *o, struct ctl_repair_act *a,
              struct ctl_job *job)
{
	char err[1024];
	long long cid;
	double rate;
	enum og_rc jrc;

	job->id = o->job;
	jrc = replay_job_take(ctl->db, o->job, "resume", true, a->reason, &cid, &rate,
	                      err, sizeof(err));
	if (jrc != OG_OK)
		return ctl_repair_refuse(ctl, a,
		                         jrc == OG_NOT_FOUND ? "not_found" : "wrong_state",
		                         jrc == OG_UNAVAILABLE ? db_error(ctl->db) : err,
		                         NULL, ctl_exit(jrc));
	job->rate = o->rate_text == NULL ? rate : o->rate;
	ctl_job_continued(ctl, job);
	return resume_job_go(ctl, a, job);
}

/* A new selection (sel, read; --dead-letters: read here), checked whole
 * and, unless a dry run, made a job and run. Frees sel's items. */
static int
bulk_new(struct ctl *ctl, const struct bulk_opts *o, struct ctl_repair_act *a,
         struct ctl_job *job, const struct repair_who *who, struct selection *sel)
{
	char err[1024];
	int ex, i, ok = 0, refused_n = 0;
	long long cid;
	double rate;
	enum og_rc rc, jrc;

	if (o->dead_letters && (ex = sel_letters(ctl, o, sel, err, sizeof(err))) != 0) {
		free(sel->items);
		return ctl_repair_refuse(ctl, a, ex == EXIT_USAGE ? "usage" : "error", err, NULL,
		                         ex);
	}
	if (sel->n == 0) {
		free(sel->items);
		return ctl_repair_refuse(ctl, a, "not_found", "the selection is empty", NULL,
		                         EXIT_REFUSED);
	}
	rc = repair_bulk_check(ctl->db, sel->items, sel->n);
	if (rc != OG_OK) {
		free(sel->items);
		return ctl_repair_refuse(ctl, a, ctl_repair_code(rc), db_error(ctl->db), NULL,
		                         ctl_exit(rc));
	}
	/* an effect named twice (by its id and its letter's): a usage error */
	for (i = 0; i < sel->n; i++) {
		int k;

		for (k = 0; k < i && sel->items[i].effect_id[0]; k++) {
			if (strcmp(sel->items[i].effect_id, sel->items[k].effect_id) == 0) {
				snprintf(err, sizeof(err), "items %d (%s) and %d (%s) name the same effect "
				         "%s", sel->items[k].seq, sel->items[k].given, sel->items[i].seq,
				         sel->items[i].given, sel->items[i].effect_id);
				free(sel->items);
				return ctl_repair_refuse(ctl, a, "usage", err, NULL, EXIT_USAGE);
			}
		}
		if (sel->items[i].ok)
			ok++;
		else
			refused_n++;
	}
	if (o->dry_run) {
		sel_print(ctl, sel, ok, refused_n);
		ctl_job_dry_run(ctl, "resume", a->op, a->reason, sel->source, sel->n, ok, refused_n);
		free(sel->items);
		return refused_n > 0 ? EXIT_REFUSED : EXIT_SUCCESS;
	}
	if (refused_n > 0) {
		/* all or nothing at the start: a job runs only a list that checked */
		sel_print(ctl, sel, ok, refused_n);
		free(sel->items);
		snprintf(err, sizeof(err), "%d of the selection's %d items would be refused (listed "
		         "above); fix the selection (--dry-run shows it) and run it again",
		         refused_n, ok + refused_n);
		return ctl_repair_refuse(ctl, a, "not_known_undelivered", err, NULL, EXIT_REFUSED);
	}
	rc = repair_bulk_create(ctl->db, sel->source, o->rate, who, sel->items, sel->n, &job->id);
	free(sel->items);
	if (rc != OG_OK)
		return ctl_repair_refuse(ctl, a, ctl_repair_code(rc), db_error(ctl->db), NULL,
		                         ctl_exit(rc));
	job->rate = o->rate;
	ctl_job_created(ctl, job, sel->source, ok);
	jrc = replay_job_take(ctl->db, job->id, "resume", false, a->reason, &cid, &rate, err,
	                      sizeof(err));
	if (jrc != OG_OK)
		return ctl_repair_refuse(ctl, a, "wrong_state", err, NULL,
		                         ctl_exit(jrc));
	return resume_job_go(ctl, a, job);
}

/* `resume --select FILE | --dead-letters [filters] | --job JOB`. */
static int
resume_bulk(struct ctl *ctl, int argc, char **argv)
{
	struct ctl_repair_act a = { "resume", NULL, NULL };
	struct ctl_job job = { .kind = "resume" };
	struct bulk_opts o;
	struct selection sel;
	struct repair_who who;
	char err[1024];
	int ex;

	if ((ex = bulk_options(ctl, argc, argv, &o, &a)) != 0)
		return ex;
	memset(&sel, 0, sizeof(sel));
	if (o.select != NULL) {
		snprintf(sel.source, sizeof(sel.source), "select: %s", o.select);
		if (sel_read(o.select, &sel, err, sizeof(err)) != 0) {
			free(sel.items);
			return ctl_repair_refuse(ctl, &a, "usage", err, NULL, EXIT_USAGE);
		}
	}
	if (ctl_db(ctl) != 0) {
		free(sel.items);
		return EXIT_UNAVAILABLE;
	}
	a.op = ctl_operator(ctl);
	who.operator_name = a.op;
	who.reason = a.reason;
	job.op = a.op;
	job.reason = a.reason;
	if (o.job > 0)
		return bulk_continue(ctl, &o, &a, &job);
	return bulk_new(ctl, &o, &a, &job, &who, &sel);
}

/* Is this a bulk resume (--select, --dead-letters or --job)? */
static bool
is_bulk(int argc, char **argv)
{
	int i;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			break;
		if (strncmp(argv[i], "--select", 8) == 0 || strcmp(argv[i], "--dead-letters") == 0 ||
		    strncmp(argv[i], "--job", 5) == 0)
			return true;
	}
	return false;
}

int
ctl_resume(struct ctl *ctl, int argc, char **argv)
{
	if (is_bulk(argc, argv))
		return resume_bulk(ctl, argc, argv);
	return ctl_repair_one(ctl, argc, argv);
}

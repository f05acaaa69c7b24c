/*
 * ctl_replay.c — `replay` (one key, or a bulk job from a map file), `stop`,
 * `explain`, `report` and `purge`.
 *
 * Every mutating command needs --reason and records the operator; every
 * refusal says why on stderr, logs `*.refused`, changes nothing and exits
 * non-zero (1 refused, 2 usage, 3 database unavailable, 4 a bulk job
 * stopped before its end).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* getline */
#endif
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "audit.h"
#include "caps.h"
#include "canon.h"
#include "clients.h"
#include "contract.h"
#include "ctl_replay.h"
#include "replay.h"

#define MAP_ITEMS_MAX   100000   /* lines of one map file */
#define MAP_LINE_MAX    1024
#define RATE_DEFAULT    5.0      /* items per second when --rate is not given */
#define RATE_MAX        1000.0

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

static int
exit_of(enum replay_rc rc)
{
	switch (rc) {
	case REPLAY_OK:
		return EXIT_SUCCESS;
	case REPLAY_UNAVAILABLE:
		return EXIT_UNAVAILABLE;
	default:
		return EXIT_REFUSED;
	}
}

/* A refusal: the message on stderr and a `<what>.refused` line. */
static int
refuse(struct ctl *ctl, const char *what, int code, const char *op, const char *key,
       const char *reason, const char *fmt, ...) __attribute__((format(printf, 7, 8)));

static int
refuse(struct ctl *ctl, const char *what, int code, const char *op, const char *key,
       const char *reason, const char *fmt, ...)
{
	char msg[1024], event[64];
	struct log_fields f = { 0 };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "oncegatectl: %s refused: %s\n", what, msg);
	snprintf(event, sizeof(event), "%s.refused", what);
	f.actor = op;
	f.key = key;
	f.reason = reason;
	f.detail = msg;
	ctl_log(ctl, LOG_LEVEL_WARNING, event, &f);
	return code;
}

/* ---- replay --------------------------------------------------------------- */

struct replay_opts {
	const char *new_key, *reason, *payload_file, *op, *client, *map, *rate_text;
	long long resume;
	bool dry_run, force;
	double rate;
	struct contract_set *contracts;
	char *payload, payload_hash[CANON_HASH_LEN];
};

static int
read_payload(struct replay_opts *o, char *err, size_t errlen)
{
	FILE *f = fopen(o->payload_file, "r");
	char *text = NULL;
	size_t len = 0, cap = OG_BODY_MAX_DEFAULT, n;
	enum canon_rc crc;
	int rc = -1;

	if (f == NULL) {
		snprintf(err, errlen, "cannot read %s: %s", o->payload_file, strerror(errno));
		return -1;
	}
	text = malloc(cap + 1);
	if (text == NULL)
		goto out;
	while ((n = fread(text + len, 1, cap + 1 - len, f)) > 0)
		len += n;
	if (len > cap) {
		snprintf(err, errlen, "%s is larger than a claim body may be (%zu bytes)",
		         o->payload_file, cap);
		goto out;
	}
	if ((crc = canon_json(text, len, &o->payload, &n)) != CANON_OK) {
		snprintf(err, errlen, "%s is not a JSON payload: %s", o->payload_file,
		         canon_strerror(crc));
		goto out;
	}
	canon_hash(o->payload, n, o->payload_hash);
	rc = 0;
out:
	free(text);
	fclose(f);
	return rc;
}

static void
print_links(struct ctl *ctl, const char *new_key, const json_t *approvals, bool tty)
{
	size_t i;
	json_t *a;

	json_array_foreach(approvals, i, a) {
		if (ctl->json)
			continue;
		printf("%s%s  approval for %-16s %s\n", tty ? "\r\033[K" : "", new_key,
		       json_string_value(json_object_get(a, "approver")),
		       json_string_value(json_object_get(a, "url")));
	}
}

static void
log_replayed(struct ctl *ctl, const struct replay_req *req, const struct replay_result *res)
{
	char client[72], detail[2048];
	struct log_fields f = { 0 };

	/* the log names a client by its name, in every program */
	if (clients_name(ctl->db, res->client_id, client, sizeof(client)) != CLIENTS_OK)
		snprintf(client, sizeof(client), "%lld", res->client_id);
	snprintf(detail, sizeof(detail), "replay of %s%s%s; %s", req->key,
	         res->forced_past[0] ? "; forced past " : "", res->forced_past, res->note);
	f.client = client;
	f.key = req->new_key;
	f.actor = req->operator_name;
	f.reason = req->reason;
	f.state_to = res->start_state;
	f.payload_hash = res->payload_hash;
	f.detail = detail;
	f.count = (long long)json_array_size(res->approvals);
	ctl_log(ctl, LOG_LEVEL_NOTICE, "replay.done", &f);
}

static int
replay_one(struct ctl *ctl, struct replay_opts *o, const char *key)
{
	struct replay_req req = { 0 };
	struct replay_result res = { 0 };
	enum replay_rc rc;
	int ex;

	req.client = o->client;
	req.key = key;
	req.new_key = o->new_key;
	req.operator_name = operator_name(o->op);
	req.reason = o->reason;
	req.payload = o->payload;
	req.payload_hash = o->payload ? o->payload_hash : NULL;
	req.contracts = o->contracts;
	req.public_url = ctl->cfg.public_url;
	req.dry_run = o->dry_run;
	req.force = o->force;
	rc = replay_run(ctl->db, &req, &res);
	if (rc != REPLAY_OK) {
		ex = refuse(ctl, "replay", exit_of(rc), req.operator_name, key, o->reason, "%s",
		            res.message);
		replay_result_clear(&res);
		return ex;
	}
	if (ctl->json) {
		json_t *doc = json_pack("{s:s, s:s, s:s, s:b, s:s, s:s, s:s, s:O?}", "outcome",
		                        o->dry_run ? "would_replay" : "replayed", "key", key,
		                        "new_key", o->new_key, "dry_run", o->dry_run,
		                        "state", res.start_state, "payload_hash", res.payload_hash,
		                        "note", res.note, "approvals", res.approvals);

		if (doc != NULL && res.forced_past[0])
			json_object_set_new(doc, "forced_past", json_string(res.forced_past));
		if (doc != NULL)
			json_object_set_new(doc, "dead_letters_linked", json_integer(res.letters));
		char *s = doc != NULL ? json_dumps(doc, JSON_COMPACT) : NULL;

		printf("%s\n", s != NULL ? s : "{}");
		free(s);
		json_decref(doc);
	} else {
		printf("original   %s\n", key);
		printf("new run    %s (%s)%s\n", o->new_key, res.start_state,
		       o->dry_run ? "  [dry run: nothing written]" : "");
		printf("payload    %s, %s\n", o->payload ? "corrected (--payload)" : "the original's",
		       res.payload_hash);
		printf("note       %s\n", res.note);
		if (res.forced_past[0])
			printf("forced     past %s: a second business effect is on you\n",
			       res.forced_past);
		if (res.letters > 0)
			printf("letters    %d dead letter(s) of the original now name %s\n", res.letters,
			       o->new_key);
		print_links(ctl, o->new_key, res.approvals, false);
	}
	fflush(stdout);
	if (!o->dry_run) {
		log_replayed(ctl, &req, &res);
		if (json_array_size(res.approvals) > 0)
			fprintf(stderr, "oncegatectl: the approval link(s) above are shown once: only "
			        "their SHA-256 is stored\n");
		else
			fprintf(stderr, "oncegatectl: no approval yet: the workflow drafts again when "
			        "it claims %s with this payload\n", o->new_key);
	}
	replay_result_clear(&res);
	return EXIT_SUCCESS;
}

/* ---- bulk ------------------------------------------------------------------ */

struct map {
	struct replay_item *items;
	int n;
};

static void
map_free(struct map *m)
{
	int i;

	for (i = 0; i < m->n; i++)
		replay_item_clear(&m->items[i]);
	free(m->items);
	memset(m, 0, sizeof(*m));
}

/* "OLDKEY NEWKEY" per line; blank lines and lines starting with # are
 * skipped. Keys are single words here (a key with a space cannot be mapped:
 * replay it alone). The same new key twice, or a new key that is also an
 * old key of the file, is refused: the selection must be unambiguous. */
static int
map_read(const char *path, struct map *m, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int lineno = 0, i, j;

	memset(m, 0, sizeof(*m));
	if (f == NULL) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
		return -1;
	}
	while ((len = getline(&line, &cap, f)) >= 0) {
		char *a, *b, *extra, *save = NULL;
		struct replay_item *grown;

		lineno++;
		if (len > MAP_LINE_MAX) {
			snprintf(err, errlen, "%s:%d: line longer than %d bytes", path, lineno,
			         MAP_LINE_MAX);
			goto fail;
		}
		a = strtok_r(line, " \t\r\n", &save);
		if (a == NULL || a[0] == '#')
			continue;
		b = strtok_r(NULL, " \t\r\n", &save);
		extra = strtok_r(NULL, " \t\r\n", &save);
		if (b == NULL || extra != NULL) {
			snprintf(err, errlen, "%s:%d: expected \"OLDKEY NEWKEY\"", path, lineno);
			goto fail;
		}
		if (!api_key_valid(a, strlen(a)) || !api_key_valid(b, strlen(b))) {
			snprintf(err, errlen, "%s:%d: a key is 1-%d printable characters", path, lineno,
			         OG_KEY_MAX_CHARS);
			goto fail;
		}
		if (api_key_claim_problem(b, strlen(b)) != NULL) {
			snprintf(err, errlen, "%s:%d: new %s", path, lineno,
			         api_key_claim_problem(b, strlen(b)));
			goto fail;
		}
		if (m->n >= MAP_ITEMS_MAX) {
			snprintf(err, errlen, "%s: more than %d items", path, MAP_ITEMS_MAX);
			goto fail;
		}
		grown = realloc(m->items, sizeof(*m->items) * (size_t)(m->n + 1));
		if (grown == NULL) {
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		m->items = grown;
		memset(&m->items[m->n], 0, sizeof(m->items[0]));
		m->items[m->n].seq = lineno;
		m->items[m->n].key = strdup(a);
		m->items[m->n].new_key = strdup(b);
		m->n++;
		if (m->items[m->n - 1].key == NULL || m->items[m->n - 1].new_key == NULL) {
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
	}
	free(line);
	line = NULL;
	fclose(f);
	f = NULL;
	if (m->n == 0) {
		snprintf(err, errlen, "%s selects nothing", path);
		goto fail;
	}
	/* quadratic, but only over an operator's explicit list */
	for (i = 0; i < m->n; i++)
		for (j = 0; j < m->n; j++) {
			if (i != j && strcmp(m->items[i].new_key, m->items[j].new_key) == 0) {
				snprintf(err, errlen, "%s: lines %d and %d give the same new key", path,
				         m->items[i].seq, m->items[j].seq);
				goto fail;
			}
			if (strcmp(m->items[i].new_key, m->items[j].key) == 0) {
				snprintf(err, errlen, "%s: line %d's new key is an old key on line %d",
				         path, m->items[i].seq, m->items[j].seq);
				goto fail;
			}
		}
	return 0;
fail:
	free(line);
	if (f != NULL)
		fclose(f);
	map_free(m);
	return -1;
}

/* Checks every item as the real run would, writing nothing. Fills each
 * item's state ("would_replay" with the start state in detail, or
 * "refused" with why) and the client the job belongs to. */
static enum replay_rc
map_check(struct ctl *ctl, struct replay_opts *o, struct map *m, long long *client_id,
          int *ok, int *human, int *refused)
{
	int i;

	*ok = *human = *refused = 0;
	*client_id = 0;
	for (i = 0; i < m->n; i++) {
		struct replay_item *it = &m->items[i];
		struct replay_req req = { 0 };
		struct replay_result res = { 0 };
		enum replay_rc rc;

		req.client = o->client;
		req.key = it->key;
		req.new_key = it->new_key;
		req.operator_name = operator_name(o->op);
		req.reason = o->reason;
		req.contracts = o->contracts;
		req.public_url = ctl->cfg.public_url;
		req.dry_run = true;
		rc = replay_run(ctl->db, &req, &res);
		if (rc == REPLAY_UNAVAILABLE) {
			replay_result_clear(&res);
			return rc;
		}
		if (rc == REPLAY_OK && *client_id != 0 && res.client_id != *client_id) {
			rc = REPLAY_AMBIGUOUS;
			snprintf(res.message, sizeof(res.message),
			         "belongs to another API client than the items before it; a job "
			         "replays one client's keys (use --client)");
		}
		if (rc == REPLAY_OK && *client_id == 0)
			*client_id = res.client_id;
		it->state = strdup(rc == REPLAY_OK ? "would_replay" : "refused");
		it->detail = strdup(rc == REPLAY_OK ? res.start_state : res.message);
		if (rc == REPLAY_OK) {
			(*ok)++;
			if (strcmp(res.start_state, "awaiting_human") == 0)
				(*human)++;
		} else {
			(*refused)++;
		}
		replay_result_clear(&res);
	}
	return REPLAY_OK;
}

static void
map_print(struct ctl *ctl, const struct map *m, int ok, int human, int refused)
{
	int i;

	if (ctl->json) {
		json_t *list = json_array(), *doc;
		char *s;

		for (i = 0; i < m->n; i++)
			json_array_append_new(list,
			                      json_pack("{s:i, s:s, s:s, s:s, s:s}", "line",
			                                m->items[i].seq, "key", m->items[i].key,
			                                "new_key", m->items[i].new_key, "outcome",
			                                m->items[i].state ?: "?", "detail",
			                                m->items[i].detail ?: ""));
		doc = json_pack("{s:b, s:o, s:{s:i, s:i, s:i, s:i, s:i}}", "dry_run", 1, "items", list,
		                "totals", "items", m->n, "would_replay", ok, "awaiting_human", human,
		                "failed_retryable", ok - human, "refused", refused);
		s = doc != NULL ? json_dumps(doc, JSON_COMPACT) : NULL;
		printf("%s\n", s ? s : "{}");
		free(s);
		json_decref(doc);
		return;
	}
	printf("%-6s %-40s %-40s %s\n", "LINE", "KEY", "NEW KEY", "OUTCOME");
	for (i = 0; i < m->n; i++)
		printf("%-6d %-40s %-40s %s%s%s\n", m->items[i].seq, m->items[i].key,
		       m->items[i].new_key,
		       strcmp(m->items[i].state ?: "", "refused") == 0 ? "REFUSED: " : "starts ",
		       m->items[i].detail ?: "", "");
	printf("total %d: %d would be replayed (%d to a fresh approval, %d for the workflow to "
	       "draft again), %d refused\n", m->n, ok, human, ok - human, refused);
}

static void
progress(bool tty, long long job, int done, int refused, int pending)
{
	if (!tty)
		return;
	printf("\r\033[Kjob %lld: %d done, %d refused, %d to go", job, done, refused, pending);
	fflush(stdout);
}

/* Runs the job's pending items at rate per second, until done, stopped or
 * interrupted. The job is already taken (advisory lock). */
static int
job_run(struct ctl *ctl, struct replay_opts *o, long long job_id, long long client_id)
{
	const char *op = operator_name(o->op);
	bool tty = isatty(STDOUT_FILENO) && !ctl->json;
	struct sigaction sa;
	double t0 = now_s();
	int done = 0, refused = 0, pending = 0, n = 0, ex = EXIT_SUCCESS;
	enum replay_rc rc;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: a sleep ends at once */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (replay_job_counts(ctl->db, job_id, &done, &refused, &pending) != REPLAY_OK)
		return EXIT_UNAVAILABLE;
	progress(tty, job_id, done, refused, pending);
	for (;;) {
		struct replay_item it;
		struct replay_req req = { 0 };
		struct replay_result res = { 0 };
		bool stop = false;
		double due = t0 + (double)n / o->rate;

		/* the rate limit: item n starts no earlier than t0 + n / rate */
		while (!g_interrupted && now_s() < due) {
			double left = due - now_s();
			struct timespec ts = { 0, (long)((left < 0.1 ? left : 0.1) * 1e9) };

			nanosleep(&ts, NULL);
		}
		if (g_interrupted) {
			if (tty)
				printf("\n");
			fprintf(stderr, "oncegatectl: job %lld interrupted (%s); what is done stays "
			        "done; resume with: oncegatectl replay --resume %lld --reason TEXT\n",
			        job_id, g_interrupted == SIGINT ? "SIGINT" : "SIGTERM", job_id);
			rc = replay_job_finish(ctl->db, job_id, false, op,
			                       g_interrupted == SIGINT ? "interrupted (SIGINT)"
			                                               : "interrupted (SIGTERM)");
			ex = rc == REPLAY_OK ? EXIT_STOPPED : exit_of(rc);
			break;
		}
		if ((rc = replay_job_next(ctl->db, job_id, &it, &stop)) != REPLAY_OK) {
			ex = exit_of(rc);
			break;
		}
		if (stop) {
			replay_item_clear(&it);
			if (tty)
				printf("\n");
			fprintf(stderr, "oncegatectl: job %lld stopped as asked (oncegatectl stop); "
			        "resume with: oncegatectl replay --resume %lld --reason TEXT\n", job_id,
			        job_id);
			rc = replay_job_finish(ctl->db, job_id, false, op,
			                       "stopped as asked by oncegatectl stop");
			ex = rc == REPLAY_OK ? EXIT_STOPPED : exit_of(rc);
			break;
		}
		if (it.seq == 0) {
			rc = replay_job_finish(ctl->db, job_id, true, op, NULL);
			ex = rc != REPLAY_OK ? exit_of(rc) : refused > 0 ? EXIT_REFUSED : EXIT_SUCCESS;
			break;
		}
		req.key = it.key;
		req.new_key = it.new_key;
		req.operator_name = op;
		req.reason = o->reason;
		req.contracts = o->contracts;
		req.public_url = ctl->cfg.public_url;
		req.job_id = job_id;
		req.job_seq = it.seq;
		/* the job's client, by the id stored with the job: a key that
		 * several clients share is replayed for this one only */
		req.client = NULL;
		req.client_id = client_id;
		rc = replay_run(ctl->db, &req, &res);
		if (rc == REPLAY_OK && res.client_id != client_id) {
			/* cannot happen for a checked job; never mix clients silently */
			rc = REPLAY_ERROR;
		}
		if (rc == REPLAY_OK) {
			done++;
			log_replayed(ctl, &req, &res);
			if (ctl->json) {
				json_t *doc = json_pack("{s:I, s:i, s:s, s:s, s:s, s:O?}", "job",
				                        (json_int_t)job_id, "line", it.seq, "key", it.key,
				                        "new_key", it.new_key, "state", res.start_state,
				                        "approvals", res.approvals);
				char *s = doc != NULL ? json_dumps(doc, JSON_COMPACT) : NULL;

				printf("%s\n", s ? s : "{}");
				free(s);
				json_decref(doc);
			} else {
				print_links(ctl, it.new_key, res.approvals, tty);
			}
		} else if (rc == REPLAY_UNAVAILABLE) {
			replay_result_clear(&res);
			replay_item_clear(&it);
			if (tty)
				printf("\n");
			fprintf(stderr, "oncegatectl: job %lld: the database went away; what is done "
			        "stays done; resume with: oncegatectl replay --resume %lld\n", job_id,
			        job_id);
			ex = EXIT_UNAVAILABLE;
			break;
		} else {
			refused++;
			(void)refuse(ctl, "replay", EXIT_REFUSED, op, it.key, o->reason,
			             "job %lld line %d: %s", job_id, it.seq, res.message);
			if (replay_job_refuse(ctl->db, job_id, it.seq, res.message) != REPLAY_OK) {
				replay_result_clear(&res);
				replay_item_clear(&it);
				ex = EXIT_UNAVAILABLE;
				break;
			}
		}
		pending--;
		n++;
		progress(tty, job_id, done, refused, pending);
		replay_result_clear(&res);
		replay_item_clear(&it);
		fflush(stdout);
	}
	if (tty && ex == EXIT_SUCCESS)
		printf("\n");
	{
		int d = 0, r = 0, p = 0;
		struct log_fields f = { .actor = op, .reason = o->reason };
		char detail[128];

		if (replay_job_counts(ctl->db, job_id, &d, &r, &p) == REPLAY_OK) {
			snprintf(detail, sizeof(detail), "job %lld: %d done, %d refused, %d pending",
			         job_id, d, r, p);
			f.detail = detail;
			f.count = d;
			fprintf(stderr, "oncegatectl: %s\n", detail);
		}
		ctl_log(ctl, LOG_LEVEL_NOTICE,
		        ex == EXIT_STOPPED ? "replay.job_stopped"
		        : p == 0 && ex != EXIT_UNAVAILABLE ? "replay.job_completed"
		                                             : "replay.job_interrupted",
		        &f);
	}
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	return ex;
}

static int
replay_map(struct ctl *ctl, struct replay_opts *o)
{
	const char *op = operator_name(o->op);
	struct map m;
	char err[1024];
	long long client_id, job_id = 0, cid;
	double rate;
	int ok, human, refused, ex;
	enum replay_rc rc;

	if (map_read(o->map, &m, err, sizeof(err)) != 0)
		return refuse(ctl, "replay", EXIT_USAGE, op, NULL, o->reason, "%s", err);
	rc = map_check(ctl, o, &m, &client_id, &ok, &human, &refused);
	if (rc != REPLAY_OK) {
		map_free(&m);
		return refuse(ctl, "replay", exit_of(rc), op, NULL, o->reason,
		              "the database is unavailable");
	}
	if (o->dry_run) {
		struct log_fields f = { .actor = op, .reason = o->reason, .count = m.n };
		char detail[256];

		map_print(ctl, &m, ok, human, refused);
		snprintf(detail, sizeof(detail), "dry run of %s: %d items, %d would be replayed, "
		         "%d refused; nothing changed", o->map, m.n, ok, refused);
		f.detail = detail;
		ctl_log(ctl, LOG_LEVEL_INFO, "replay.dry_run", &f);
		map_free(&m);
		return refused > 0 ? EXIT_REFUSED : EXIT_SUCCESS;
	}
	if (refused > 0) {
		/* all or nothing at the start: a job runs only a list that checked */
		map_print(ctl, &m, ok, human, refused);
		map_free(&m);
		return refuse(ctl, "replay", EXIT_REFUSED, op, NULL, o->reason,
		              "%d of the map's items would be refused (listed above); fix the map "
		              "and run it again: nothing was replayed", refused);
	}
	rc = replay_job_create(ctl->db, client_id, o->map, o->rate, op, o->reason, m.items, m.n,
	                       &job_id);
	map_free(&m);
	if (rc != REPLAY_OK)
		return refuse(ctl, "replay", exit_of(rc), op, NULL, o->reason,
		              "the job could not be created: %s", db_error(ctl->db));
	{
		struct log_fields f = { .actor = op, .reason = o->reason, .count = ok };
		char detail[256];

		snprintf(detail, sizeof(detail), "job %lld from %s: %d items at %g/s", job_id, o->map,
		         ok, o->rate);
		f.detail = detail;
		ctl_log(ctl, LOG_LEVEL_NOTICE, "replay.job_created", &f);
	}
	fprintf(stderr, "oncegatectl: job %lld: %d items at %g/s; stop it with `oncegatectl stop "
	        "%lld --reason TEXT` (or Ctrl-C), resume with `oncegatectl replay --resume %lld "
	        "--reason TEXT`\n", job_id, ok, o->rate, job_id, job_id);
	if (ctl->json)
		printf("{\"job\":%lld,\"items\":%d}\n", job_id, ok);
	fflush(stdout);
	rc = replay_job_take(ctl->db, job_id, "replay", false, op, o->reason, &cid, &rate, err,
	                     sizeof(err));
	if (rc != REPLAY_OK)
		return refuse(ctl, "replay", exit_of(rc), op, NULL, o->reason, "%s", err);
	ex = job_run(ctl, o, job_id, client_id);
	return ex;
}

static int
replay_resume(struct ctl *ctl, struct replay_opts *o)
{
	const char *op = operator_name(o->op);
	char err[512];
	long long client_id;
	double rate;
	enum replay_rc rc;

	rc = replay_job_take(ctl->db, o->resume, "replay", true, op, o->reason, &client_id, &rate,
	                     err, sizeof(err));
	if (rc != REPLAY_OK)
		return refuse(ctl, "replay", exit_of(rc), op, NULL, o->reason, "%s",
		              rc == REPLAY_UNAVAILABLE ? db_error(ctl->db) : err);
	if (o->rate_text == NULL)
		o->rate = rate;
	{
		struct log_fields f = { .actor = op, .reason = o->reason };
		char detail[128];

		snprintf(detail, sizeof(detail), "job %lld resumed at %g/s", o->resume, o->rate);
		f.detail = detail;
		ctl_log(ctl, LOG_LEVEL_NOTICE, "replay.job_resumed", &f);
		fprintf(stderr, "oncegatectl: %s\n", detail);
	}
	return job_run(ctl, o, o->resume, client_id);
}

static int
parse_rate(const char *s, double *rate)
{
	char *end;
	double r;

	errno = 0;
	r = strtod(s, &end);
	if (errno != 0 || end == s || !(r > 0) || r > RATE_MAX ||
	    (*end != '\0' && strcmp(end, "/s") != 0))
		return -1;
	*rate = r;
	return 0;
}

#define REPLAY_USAGE                                                                        \
	"usage: oncegatectl replay KEY --new-key NEWKEY --reason TEXT [--payload FILE]\n"       \
	"                          [--client NAME] [--operator NAME] [--dry-run] [--force]\n"    \
	"       oncegatectl replay --map FILE --reason TEXT [--rate N/s] [--client NAME]\n"    \
	"                          [--operator NAME] [--dry-run]\n"                              \
	"       oncegatectl replay --resume JOB --reason TEXT [--rate N/s] [--operator NAME]\n"   \
	"  Refused while an effect of the original is pending. When a business effect of it\n"   \
	"  was sent, is being sent or unknown, or was resumed, only one KEY with --force\n"      \
	"  (and --reason): one event, at most one business effect. A replayed run is never\n"  \
	"  resumed; its open dead letters are answered by the new run.\n"

int
ctl_replay(struct ctl *ctl, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "new-key", required_argument, NULL, 'k' },
		{ "reason", required_argument, NULL, 'r' },
		{ "payload", required_argument, NULL, 'p' },
		{ "operator", required_argument, NULL, 'o' },
		{ "client", required_argument, NULL, 'c' },
		{ "map", required_argument, NULL, 'm' },
		{ "rate", required_argument, NULL, 'R' },
		{ "resume", required_argument, NULL, 'J' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "force", no_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct replay_opts o;
	const char *key = NULL, *op;
	char err[1024];
	int opt, ex;

	memset(&o, 0, sizeof(o));
	o.rate = RATE_DEFAULT;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'k': o.new_key = optarg; break;
		case 'r': o.reason = optarg; break;
		case 'p': o.payload_file = optarg; break;
		case 'o': o.op = optarg; break;
		case 'c': o.client = optarg; break;
		case 'm': o.map = optarg; break;
		case 'R': o.rate_text = optarg; break;
		case 'n': o.dry_run = true; break;
		case 'F': o.force = true; break;
		case 'J': {
			char *end;

			o.resume = strtoll(optarg, &end, 10);
			if (*end != '\0' || o.resume <= 0) {
				fprintf(stderr, "oncegatectl: replay: --resume takes a job number\n");
				return EXIT_USAGE;
			}
			break;
		}
		case 'h':
			printf(REPLAY_USAGE);
			return EXIT_SUCCESS;
		default:
			fprintf(stderr, REPLAY_USAGE);
			return EXIT_USAGE;
		}
	}
	op = operator_name(o.op);
	if (optind < argc)
		key = argv[optind++];
	if (optind < argc)
		return refuse(ctl, "replay", EXIT_USAGE, op, key, o.reason,
		              "unexpected argument \"%s\"\n%s", argv[optind], REPLAY_USAGE);
	if ((key != NULL) + (o.map != NULL) + (o.resume > 0) != 1)
		return refuse(ctl, "replay", EXIT_USAGE, op, key, o.reason,
		              "name one KEY, or --map FILE, or --resume JOB\n%s", REPLAY_USAGE);
	if (key != NULL && (o.new_key == NULL || o.new_key[0] == '\0'))
		return refuse(ctl, "replay", EXIT_USAGE, op, key, o.reason,
		              "--new-key NEWKEY is required: a correction is a new event whose key "
		              "is issued upstream, never invented by oncegate");
	if (key == NULL && (o.new_key != NULL || o.payload_file != NULL || o.force))
		return refuse(ctl, "replay", EXIT_USAGE, op, NULL, o.reason,
		              "--new-key, --payload and --force are for one KEY; a map file names its "
		              "keys, and a bulk job never forces");
	if (key != NULL && (!api_key_valid(key, strlen(key)) ||
	                    !api_key_valid(o.new_key, strlen(o.new_key))))
		return refuse(ctl, "replay", EXIT_USAGE, op, key, o.reason,
		              "a key is 1-%d printable characters", OG_KEY_MAX_CHARS);
	/* the new run must be reachable through the API like any claimed one */
	if (key != NULL && api_key_claim_problem(o.new_key, strlen(o.new_key)) != NULL)
		return refuse(ctl, "replay", EXIT_USAGE, op, key, o.reason, "--new-key: %s",
		              api_key_claim_problem(o.new_key, strlen(o.new_key)));
	if (!o.dry_run && (o.reason == NULL || o.reason[0] == '\0'))
		return refuse(ctl, "replay", EXIT_USAGE, op, key, NULL,
		              "--reason TEXT is required: it is recorded with the operator");
	if (o.reason != NULL && strlen(o.reason) > 1000)
		return refuse(ctl, "replay", EXIT_USAGE, op, key, NULL,
		              "--reason is at most 1000 bytes");
	if (o.rate_text != NULL && parse_rate(o.rate_text, &o.rate) != 0)
		return refuse(ctl, "replay", EXIT_USAGE, op, key, o.reason,
		              "--rate is N or N/s with 0 < N <= %g", RATE_MAX);
	if (o.payload_file != NULL && read_payload(&o, err, sizeof(err)) != 0)
		return refuse(ctl, "replay", EXIT_USAGE, op, key, o.reason, "%s", err);
	/* the approvers of a fresh approval are the contract's, as loaded now */
	o.contracts = contract_load_dir(ctl->cfg.contracts_dir, err, sizeof(err));
	if (o.contracts == NULL) {
		free(o.payload);
		return refuse(ctl, "replay", EXIT_REFUSED, op, key, o.reason,
		              "the contracts cannot be loaded: %s", err);
	}
	if (ctl_db(ctl) != 0) {
		ex = EXIT_UNAVAILABLE;
		goto out;
	}
	if (key != NULL)
		ex = replay_one(ctl, &o, key);
	else if (o.map != NULL)
		ex = replay_map(ctl, &o);
	else
		ex = replay_resume(ctl, &o);
out:
	contract_set_free(o.contracts);
	free(o.payload);
	return ex;
}

int
ctl_stop(struct ctl *ctl, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "reason", required_argument, NULL, 'r' },
		{ "operator", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	const char *reason = NULL, *opname = NULL, *op;
	char msg[512], kind[16] = "replay", event[48], *end;
	long long job;
	enum replay_rc rc;
	int opt;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (opt == 'r')
			reason = optarg;
		else if (opt == 'o')
			opname = optarg;
		else
			goto usage;
	}
	op = operator_name(opname);
	if (optind != argc - 1)
		goto usage;
	job = strtoll(argv[optind], &end, 10);
	if (*end != '\0' || job <= 0)
		return refuse(ctl, "stop", EXIT_USAGE, op, NULL, reason, "JOB is a job number");
	if (reason == NULL || reason[0] == '\0')
		return refuse(ctl, "stop", EXIT_USAGE, op, NULL, NULL,
		              "--reason TEXT is required: it is recorded with the operator");
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	rc = replay_job_stop(ctl->db, job, op, reason, kind, sizeof(kind), msg, sizeof(msg));
	if (rc != REPLAY_OK)
		return refuse(ctl, "stop", exit_of(rc), op, NULL, reason, "%s",
		              rc == REPLAY_UNAVAILABLE ? db_error(ctl->db) : msg);
	{
		struct log_fields f = { .actor = op, .reason = reason };
		char detail[64];

		snprintf(detail, sizeof(detail), "%s job %lld asked to stop", kind, job);
		f.detail = detail;
		snprintf(event, sizeof(event), "%s.job_stop", kind);
		ctl_log(ctl, LOG_LEVEL_NOTICE, event, &f);
	}
	if (ctl->json)
		printf("{\"job\":%lld,\"kind\":\"%s\",\"stop_requested\":true}\n", job, kind);
	fprintf(stderr, "oncegatectl: job %lld stops before its next item; what is done stays "
	        "done (continue with `oncegatectl %s %lld --reason TEXT`)\n", job,
	        strcmp(kind, "resume") == 0 ? "resume --job" : "replay --resume", job);
	return EXIT_SUCCESS;
usage:
	fprintf(stderr, "usage: oncegatectl stop JOB --reason TEXT [--operator NAME]\n");
	return EXIT_USAGE;
}

/* ---- explain --------------------------------------------------------------- */

static const char *
jtext(const json_t *o, const char *a, const char *b)
{
	const char *s = json_string_value(json_object_get(json_object_get(o, a), b));

	return s != NULL ? s : "-";
}

int
ctl_explain(struct ctl *ctl, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "client", required_argument, NULL, 'c' },
		{ NULL, 0, NULL, 0 },
	};
	const char *client = NULL, *key;
	char msg[512];
	json_t *doc = NULL, *v;
	enum audit_rc rc;
	size_t i;
	int opt;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (opt == 'c')
			client = optarg;
		else
			goto usage;
	}
	if (optind != argc - 1)
		goto usage;
	key = argv[optind];
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	rc = audit_explain(ctl->db, client, key, &doc, msg, sizeof(msg));
	if (rc == AUDIT_NOT_FOUND) {
		/* "did we process this key?" has an answer here too: no */
		if (ctl->json) {
			json_t *no = json_pack("{s:s, s:{s:s, s:s}}", "key", key, "processed", "answer",
			                       "no", "text", msg);
			char *s = no != NULL ? json_dumps(no, JSON_COMPACT) : NULL;

			printf("%s\n", s ? s : "{}");
			free(s);
			json_decref(no);
		}
		fprintf(stderr, "oncegatectl: explain: %s\n", msg);
		return EXIT_REFUSED;
	}
	if (rc != AUDIT_OK) {
		fprintf(stderr, "oncegatectl: explain: %s\n", msg);
		return rc == AUDIT_UNAVAILABLE ? EXIT_UNAVAILABLE : EXIT_REFUSED;
	}
	{
		struct log_fields f = { .key = key, .actor = operator_name(NULL) };

		ctl_log(ctl, LOG_LEVEL_INFO, "audit.explain", &f);
	}
	if (ctl->json) {
		char *s = json_dumps(doc, JSON_COMPACT);

		printf("%s\n", s ? s : "{}");
		free(s);
		json_decref(doc);
		return EXIT_SUCCESS;
	}
	ctl_terminal_safe(doc);
	printf("%s (client %s)\n\n", key, json_string_value(json_object_get(doc, "client")) ?: "?");
	printf("Did we process this key?   %s\n", jtext(doc, "processed", "text"));
	printf("Did we send?               %s\n", jtext(doc, "sent", "text"));
	printf("Who approved?              %s\n", jtext(doc, "approved", "text"));
	printf("Which model drafted it?    %s\n", jtext(doc, "model", "text"));
	printf("Payload                    %s (%s)\n",
	       json_is_true(json_object_get(json_object_get(doc, "processed"), "payload_kept"))
	           ? "kept"
	           : "purged by retention",
	       jtext(doc, "processed", "payload_hash"));
	printf("Model output               %s (%s)\n",
	       json_is_true(json_object_get(json_object_get(doc, "model"), "output_kept"))
	           ? "kept"
	           : "none or purged",
	       jtext(doc, "model", "output_hash"));
	json_array_foreach(json_object_get(doc, "replays"), i, v)
		printf("%-27s%s (%s by %s: %s)\n",
		       strcmp(json_string_value(json_object_get(v, "direction")) ?: "", "replay_of") == 0
		           ? "Replay of"
		           : "Replayed as",
		       json_string_value(json_object_get(v, "key")) ?: "?",
		       json_string_value(json_object_get(v, "at")) ?: "?",
		       json_string_value(json_object_get(v, "operator")) ?: "?",
		       json_string_value(json_object_get(v, "reason")) ?: "");
	printf("\nEffects\n  %-36s %-18s %-12s %-10s %-5s %s\n", "ID", "TYPE", "TARGET", "STATE",
	       "SENDS", "PROVIDER ID");
	json_array_foreach(json_object_get(doc, "effects"), i, v) {
		printf("  %-36s %-18s %-12s %-10s %-5lld %s\n",
		       json_string_value(json_object_get(v, "effect_id")) ?: "",
		       json_string_value(json_object_get(v, "type")) ?: "",
		       json_string_value(json_object_get(v, "target")) ?: "",
		       json_string_value(json_object_get(v, "state")) ?: "",
		       (long long)json_integer_value(json_object_get(v, "sends")),
		       json_string_value(json_object_get(v, "provider_id")) ?: "-");
		printf("  %-36s provider key %s\n", "",
		       json_string_value(json_object_get(v, "provider_key")) ?: "-");
	}
	printf("\nTimeline\n");
	json_array_foreach(json_object_get(doc, "timeline"), i, v)
		printf("  %-24s %-9s %-26s %-22s %s\n",
		       json_string_value(json_object_get(v, "ts")) ?: "",
		       json_string_value(json_object_get(v, "source")) ?: "",
		       json_string_value(json_object_get(v, "event")) ?: "",
		       json_string_value(json_object_get(v, "actor")) ?: "-",
		       json_string_value(json_object_get(v, "detail")) ?: "");
	json_decref(doc);
	return EXIT_SUCCESS;
usage:
	fprintf(stderr, "usage: oncegatectl explain KEY [--client NAME]\n");
	return EXIT_USAGE;
}

/* ---- report ---------------------------------------------------------------- */

/* "7d", "36h", "90m", "600s" or plain seconds. */
static long long
parse_since(const char *s)
{
	char *end;
	long long n;

	errno = 0;
	n = strtoll(s, &end, 10);
	if (errno != 0 || end == s || n <= 0 || n > 3650LL * 86400)
		return -1;
	switch (*end) {
	case 'd': n *= 86400; end++; break;
	case 'h': n *= 3600; end++; break;
	case 'm': n *= 60; end++; break;
	case 's': end++; break;
	default: break;
	}
	return *end == '\0' ? n : -1;
}

static void
report_line(const char *label, const json_t *v)
{
	char *s;

	if (json_is_object(v)) {
		const char *k;
		json_t *x;
		bool any = false;

		printf("%-34s", label);
		json_object_foreach((json_t *)(uintptr_t)v, k, x) {
			printf("%s%s %lld", any ? ", " : "", k, (long long)json_integer_value(x));
			any = true;
		}
		printf("%s\n", any ? "" : "none");
		return;
	}
	s = json_is_null(v) ? NULL : json_dumps(v, JSON_ENCODE_ANY);
	printf("%-34s%s\n", label, s != NULL ? s : "-");
	free(s);
}

int
ctl_report(struct ctl *ctl, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "since", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	static const struct {
		const char *name, *label;
	} rows[] = {
		{ "runs_claimed", "runs claimed (new keys)" },
		{ "reclaims", "reclaims (attempt > 1)" },
		{ "invalid_outputs", "invalid model outputs" },
		{ "failed_validation", "runs failed on validation" },
		{ "approvals_by_decision", "approvals by decision" },
		{ "approvals_expired", "approvals expired" },
		{ "approvals_pending", "approvals pending now" },
		{ "approval_wait_p50_s", "approval wait p50 (s)" },
		{ "approval_wait_p95_s", "approval wait p95 (s)" },
		{ "decisions", "runs decided (auto vs human)" },
		{ "effects_by_state", "effects by state" },
		{ "dead_letters_by_class", "dead letters by class" },
		{ "retry_exhaustions", "retry budgets exhausted" },
		{ "dead_letters_open", "dead letters open now" },
		{ "oldest_open_dead_letter_s", "oldest open dead letter (s)" },
		{ "replays", "replays" },
		{ "operator_actions", "operator actions" },
		{ "kill_switch_on", "kill switch database flag on" },
		{ "blocked_sends", "sends blocked by the switch" },
	}, lifetime[] = {
		{ "duplicates_lifetime", "duplicate deliveries" },
		{ "claims_by_outcome_lifetime", "claims by outcome" },
	};
	const char *since = "7d";
	long long secs;
	json_t *doc;
	size_t i;
	int opt;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (opt == 's')
			since = optarg;
		else
			goto usage;
	}
	if (optind != argc)
		goto usage;
	if ((secs = parse_since(since)) < 0) {
		fprintf(stderr, "oncegatectl: report: --since is N followed by d, h, m or s "
		        "(e.g. 7d)\n");
		return EXIT_USAGE;
	}
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	if (audit_report(ctl->db, secs, &doc) != AUDIT_OK) {
		fprintf(stderr, "oncegatectl: report: %s\n", db_error(ctl->db));
		return EXIT_UNAVAILABLE;
	}
	if (ctl->json) {
		char *s = json_dumps(doc, JSON_COMPACT);

		printf("%s\n", s ? s : "{}");
		free(s);
	} else {
		printf("oncegate report, %s to %s\n\n",
		       json_string_value(json_object_get(doc, "since")) ?: "?",
		       json_string_value(json_object_get(doc, "until")) ?: "?");
		for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
			report_line(rows[i].label, json_object_get(doc, rows[i].name));
		/* not per period: the responders' counters only ever add up */
		printf("\nlifetime totals (not for the period above; counted by the responders, "
		       "as GET /metrics shows them; last added %s)\n",
		       json_string_value(json_object_get(doc, "counters_updated_at")) ?: "never");
		for (i = 0; i < sizeof(lifetime) / sizeof(lifetime[0]); i++)
			report_line(lifetime[i].label, json_object_get(doc, lifetime[i].name));
	}
	json_decref(doc);
	return EXIT_SUCCESS;
usage:
	fprintf(stderr, "usage: oncegatectl report [--since 7d]\n");
	return EXIT_USAGE;
}

/* ---- purge ----------------------------------------------------------------- */

int
ctl_purge(struct ctl *ctl, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "older-than", required_argument, NULL, 'd' },
		{ "reason", required_argument, NULL, 'r' },
		{ "operator", required_argument, NULL, 'o' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	const char *reason = NULL, *opname = NULL, *op;
	struct audit_purge p;
	bool dry = false;
	long days = -1;
	enum audit_rc rc;
	char *end;
	int opt;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'd':
			errno = 0;
			days = strtol(optarg, &end, 10);
			if (errno != 0 || *end != '\0' || end == optarg || days < 0 || days > 36500)
				return refuse(ctl, "purge", EXIT_USAGE, operator_name(NULL), NULL, NULL,
				              "--older-than takes a number of days (0-36500)");
			break;
		case 'r': reason = optarg; break;
		case 'o': opname = optarg; break;
		case 'n': dry = true; break;
		default: goto usage;
		}
	}
	op = operator_name(opname);
	if (optind != argc)
		goto usage;
	if (days < 0)
		days = ctl->cfg.retention_days;
	if (!dry && (reason == NULL || reason[0] == '\0'))
		return refuse(ctl, "purge", EXIT_USAGE, op, NULL, NULL,
		              "--reason TEXT is required: it is recorded with the operator");
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	rc = audit_purge(ctl->db, (int)days, dry, op, reason, &p);
	if (rc != AUDIT_OK)
		return refuse(ctl, "purge", rc == AUDIT_UNAVAILABLE ? EXIT_UNAVAILABLE : EXIT_REFUSED,
		              op, NULL, reason, "%s", db_error(ctl->db));
	{
		struct log_fields f = { .actor = op, .reason = reason, .count = p.runs };
		char detail[256];

		snprintf(detail, sizeof(detail), "%s runs finished more than %ld days ago: %lld runs, "
		         "%lld effect payloads, %lld approval copies, %lld attempt excerpts, "
		         "%lld dead letters past retention", dry ? "would purge" : "purged",
		         days, p.runs, p.effects, p.approvals, p.attempts, p.dead_letters);
		f.detail = detail;
		ctl_log(ctl, dry ? LOG_LEVEL_INFO : LOG_LEVEL_NOTICE,
		        dry ? "purge.dry_run" : "purge.done", &f);
	}
	if (ctl->json)
		printf("{\"dry_run\":%s,\"older_than_days\":%ld,\"runs\":%lld,\"effects\":%lld,"
		       "\"approvals\":%lld,\"attempts\":%lld,\"dead_letters\":%lld}\n",
		       dry ? "true" : "false", days, p.runs, p.effects, p.approvals, p.attempts,
		       p.dead_letters);
	else
		printf("%s (finished more than %ld days ago)\n  runs (payload, output, effect "
		       "payload)  %lld\n  effect payloads                       %lld\n  approval "
		       "copies of the effect          %lld\n  attempt evidence excerpts             "
		       "%lld\n  dead letters past retention           %lld\nHashes, states and "
		       "decisions are kept: `oncegatectl explain KEY` still answers.\n",
		       dry ? "Would purge (dry run, nothing changed)" : "Purged", days, p.runs,
		       p.effects, p.approvals, p.attempts, p.dead_letters);
	return EXIT_SUCCESS;
usage:
	fprintf(stderr, "usage: oncegatectl purge --older-than DAYS --reason TEXT [--dry-run] "
	        "[--operator NAME]\n");
	return EXIT_USAGE;
}

/*
 * ctl_replay.c — `replay`: one key, or a bulk job from a map file (run by
 * the job runner, ctl_job.c).
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "caps.h"
#include "canon.h"
#include "clients.h"
#include "contract.h"
#include "ctl_job.h"
#include "ctl_replay.h"
#include "ledger.h"
#include "replay.h"

#define MAP_ITEMS_MAX   100000   /* lines of one map file */
#define MAP_LINE_MAX    1024

/* ---- replay --------------------------------------------------------------- */

struct replay_opts {
	const char *new_key, *reason, *payload_file, *client, *map, *rate_text;
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
	/* kept as written, hashed as a claim of the new key will be */
	if ((crc = canon_json(CANON_AS_WRITTEN, text, len, &o->payload, &n)) != CANON_OK ||
	    (crc = canon_hash_as(CANON_JCS, o->payload, n, o->payload_hash)) != CANON_OK) {
		snprintf(err, errlen, "%s is not a JSON payload: %s", o->payload_file,
		         canon_strerror(crc));
		goto out;
	}
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
		const char *url = json_string_value(json_object_get(a, "url"));

		if (ctl->json)
			continue;
		printf("%s%s  approval for %-16s %s\n", tty ? "\r\033[K" : "", new_key,
		       json_string_value(json_object_get(a, "approver")),
		       url != NULL ? url : "(notified: the approver's notice carries the link)");
	}
}

static void
log_replayed(struct ctl *ctl, const struct replay_req *req, const struct replay_result *res)
{
	char client[72], detail[2048];
	struct log_fields f = { 0 };

	/* the log names a client by its name, in every program */
	if (clients_name(ctl->db, res->client_id, client, sizeof(client)) != OG_OK)
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
	enum og_rc rc;
	int ex;

	req.client = o->client;
	req.key = key;
	req.new_key = o->new_key;
	req.operator_name = ctl_operator(ctl);
	req.reason = o->reason;
	req.payload = o->payload;
	req.payload_hash = o->payload ? o->payload_hash : NULL;
	req.contracts = o->contracts;
	req.public_url = ctl->cfg.public_url;
	req.dry_run = o->dry_run;
	req.force = o->force;
	rc = replay_run(ctl->db, &req, &res);
	if (rc != OG_OK) {
		ex = ctl_refuse(ctl, "replay", ctl_exit(rc), req.operator_name,
		                key, o->reason, "%s", res.message);
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
		ctl_print_new(doc);
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
		if (json_array_size(res.approvals) > 0 &&
		    json_object_get(json_array_get(res.approvals, 0), "url") == NULL)
			fprintf(stderr, "oncegatectl: the approvers are notified; their notices carry "
			        "the links\n");
		else if (json_array_size(res.approvals) > 0)
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
/* The line's pair of keys added to m; -1 when memory runs out (the item
 * counted, so that map_free frees what it holds). */
static int
map_add(struct map *m, int lineno, const char *key, const char *new_key)
{
	struct replay_item *grown = realloc(m->items, sizeof(*m->items) * (size_t)(m->n + 1));

	if (grown == NULL)
		return -1;
	m->items = grown;
	memset(&m->items[m->n], 0, sizeof(m->items[0]));
	m->items[m->n].seq = lineno;
	m->items[m->n].key = strdup(key);
	m->items[m->n].new_key = strdup(new_key);
	m->n++;
	return m->items[m->n - 1].key == NULL || m->items[m->n - 1].new_key == NULL ? -1 : 0;
}

/* No new key given twice, and none that is an old key of the map: 0, or
 * -1 with err set. Quadratic, but only over an operator's explicit list. */
static int
map_distinct(const char *path, const struct map *m, char *err, size_t errlen)
{
	int i, j;

	for (i = 0; i < m->n; i++)
		for (j = 0; j < m->n; j++) {
			if (i != j && strcmp(m->items[i].new_key, m->items[j].new_key) == 0) {
				snprintf(err, errlen, "%s: lines %d and %d give the same new key", path,
				         m->items[i].seq, m->items[j].seq);
				return -1;
			}
			if (strcmp(m->items[i].new_key, m->items[j].key) == 0) {
				snprintf(err, errlen, "%s: line %d's new key is an old key on line %d",
				         path, m->items[i].seq, m->items[j].seq);
				return -1;
			}
		}
	return 0;
}

static int
map_read(const char *path, struct map *m, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int lineno = 0;

	memset(m, 0, sizeof(*m));
	if (f == NULL) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
		return -1;
	}
	while ((len = getline(&line, &cap, f)) >= 0) {
		char *a, *b, *extra, *save = NULL;

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
		if (map_add(m, lineno, a, b) != 0) {
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
	if (map_distinct(path, m, err, errlen) == 0)
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
static enum og_rc
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
		enum og_rc rc;

		req.client = o->client;
		req.key = it->key;
		req.new_key = it->new_key;
		req.operator_name = ctl_operator(ctl);
		req.reason = o->reason;
		req.contracts = o->contracts;
		req.public_url = ctl->cfg.public_url;
		req.dry_run = true;
		rc = replay_run(ctl->db, &req, &res);
		if (rc == OG_UNAVAILABLE) {
			replay_result_clear(&res);
			return rc;
		}
		if (rc == OG_OK && *client_id != 0 && res.client_id != *client_id) {
			rc = OG_AMBIGUOUS;
			snprintf(res.message, sizeof(res.message),
			         "belongs to another API client than the items before it; a job "
			         "replays one client's keys (use --client)");
		}
		if (rc == OG_OK && *client_id == 0)
			*client_id = res.client_id;
		it->state = strdup(rc == OG_OK ? "would_replay" : "refused");
		it->detail = strdup(rc == OG_OK ? res.start_state : res.message);
		if (rc == OG_OK) {
			(*ok)++;
			if (ledger_state_parse(res.start_state) == RUN_AWAITING_HUMAN)
				(*human)++;
		} else {
			(*refused)++;
		}
		replay_result_clear(&res);
	}
	return OG_OK;
}

static void
map_print(struct ctl *ctl, const struct map *m, int ok, int human, int refused)
{
	int i;

	if (ctl->json) {
		json_t *list = json_array(), *doc;

		for (i = 0; i < m->n; i++)
			json_array_append_new(list,
			                      json_pack("{s:i, s:s, s:s, s:s, s:s}", "line",
			                                m->items[i].seq, "key", m->items[i].key,
			                                "new_key", m->items[i].new_key, "outcome",
			                                m->items[i].state ?: "?", "detail",
			                                m->items[i].detail ?: ""));
		doc = json_pack("{s:b, s:o, s:{s:i, s:i, s:i, s:i, s:i}}", "dry_run", 1, "items", list,
		                "totals", "items", m->n, "would_replay", ok,
		                ledger_state_name(RUN_AWAITING_HUMAN), human,
		                ledger_state_name(RUN_FAILED_RETRYABLE), ok - human, "refused", refused);
		ctl_print_new(doc);
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

/* A job's state for its steps: the options and the one client it is for. */
struct replay_job {
	struct replay_opts *o;
	long long client_id;
};

/* One item of a replay job: the next pending one, replayed or refused. */
static enum ctl_job_step
replay_step(struct ctl *ctl, struct ctl_job *job, int *ex)
{
	struct replay_job *rj = job->arg;
	struct replay_item it;
	struct replay_req req = { 0 };
	struct replay_result res = { 0 };
	enum ctl_job_step st;
	enum og_rc rc;
	bool stop = false;

	if ((rc = replay_job_next(ctl->db, job->id, &it, &stop)) != OG_OK) {
		*ex = ctl_exit(rc);
		return CTL_JOB_FAILED;
	}
	if (stop || it.seq == 0) {
		replay_item_clear(&it);
		return stop ? CTL_JOB_STOP : CTL_JOB_END;
	}
	/* the job's client, by the id stored with the job: a key that several
	 * clients share is replayed for this one only */
	req.client = NULL;
	req.client_id = rj->client_id;
	req.key = it.key;
	req.new_key = it.new_key;
	req.operator_name = job->op;
	req.reason = job->reason;
	req.contracts = rj->o->contracts;
	req.public_url = ctl->cfg.public_url;
	req.job_id = job->id;
	req.job_seq = it.seq;
	rc = replay_run(ctl->db, &req, &res);
	if (rc == OG_OK && res.client_id != rj->client_id) {
		/* cannot happen for a checked job; never mix clients silently */
		rc = OG_ERROR;
	}
	if (rc == OG_OK) {
		st = CTL_JOB_DONE;
		log_replayed(ctl, &req, &res);
		if (ctl->json) {
			/* a copy: the result's links are wiped when it is cleared; the
			 * job wipes its copies once the document is out */
			ctl_job_result(job, json_pack("{s:i, s:s, s:s, s:s, s:s, s:o?}", "line", it.seq,
			                              "key", it.key, "new_key", it.new_key, "outcome",
			                              "replayed", "state", res.start_state, "approvals",
			                              json_deep_copy(res.approvals)));
		} else {
			print_links(ctl, it.new_key, res.approvals, job->tty);
		}
	} else if (rc == OG_UNAVAILABLE) {
		st = CTL_JOB_LOST;
	} else {
		st = CTL_JOB_REFUSED;
		(void)ctl_refuse(ctl, "replay", EXIT_REFUSED, job->op, it.key, job->reason,
		                 "job %lld line %d: %s", job->id, it.seq, res.message);
		if (ctl->json)
			ctl_job_result(job, json_pack("{s:i, s:s, s:s, s:s, s:s}", "line", it.seq, "key",
			                              it.key, "new_key", it.new_key, "outcome",
			                              "refused", "detail", res.message));
		if (replay_job_refuse(ctl->db, job->id, it.seq, res.message) != OG_OK) {
			*ex = EXIT_UNAVAILABLE;
			st = CTL_JOB_FAILED;
		}
	}
	replay_result_clear(&res);
	replay_item_clear(&it);
	return st;
}

/* Runs a replay job, taken, for its client. */
static int
replay_job_go(struct ctl *ctl, struct replay_opts *o, struct ctl_job *job, long long client_id)
{
	struct replay_job rj = { o, client_id };

	job->step = replay_step;
	job->arg = &rj;
	return ctl_job_run(ctl, job);
}

static int
replay_map(struct ctl *ctl, struct replay_opts *o)
{
	const char *op = ctl_operator(ctl);
	struct ctl_job job = { .kind = "replay", .rate = o->rate, .op = op, .reason = o->reason };
	struct map m;
	char err[1024];
	long long client_id, cid;
	double rate;
	int ok, human, refused;
	enum og_rc rc;

	if (map_read(o->map, &m, err, sizeof(err)) != 0)
		return ctl_refuse(ctl, "replay", EXIT_USAGE, op, NULL, o->reason, "%s", err);
	rc = map_check(ctl, o, &m, &client_id, &ok, &human, &refused);
	if (rc != OG_OK) {
		map_free(&m);
		return ctl_refuse(ctl, "replay", ctl_exit(rc), op, NULL,
		                  o->reason, "the database is unavailable");
	}
	if (o->dry_run) {
		map_print(ctl, &m, ok, human, refused);
		ctl_job_dry_run(ctl, "replay", op, o->reason, o->map, m.n, ok, refused);
		map_free(&m);
		return refused > 0 ? EXIT_REFUSED : EXIT_SUCCESS;
	}
	if (refused > 0) {
		/* all or nothing at the start: a job runs only a list that checked */
		map_print(ctl, &m, ok, human, refused);
		map_free(&m);
		return ctl_refuse(ctl, "replay", EXIT_REFUSED, op, NULL, o->reason,
		                  "%d of the map's items would be refused (listed above); fix the "
		                  "map and run it again: nothing was replayed", refused);
	}
	rc = replay_job_create(ctl->db, client_id, o->map, o->rate, o->reason, m.items, m.n,
	                       &job.id);
	map_free(&m);
	if (rc != OG_OK)
		return ctl_refuse(ctl, "replay", ctl_exit(rc), op, NULL,
		                  o->reason, "the job could not be created: %s", db_error(ctl->db));
	ctl_job_created(ctl, &job, o->map, ok);
	rc = replay_job_take(ctl->db, job.id, "replay", false, o->reason, &cid, &rate, err,
	                     sizeof(err));
	if (rc != OG_OK)
		return ctl_refuse(ctl, "replay", ctl_exit(rc), op, NULL,
		                  o->reason, "%s", err);
	return replay_job_go(ctl, o, &job, client_id);
}

static int
replay_resume(struct ctl *ctl, struct replay_opts *o)
{
	struct ctl_job job = { .kind = "replay", .id = o->resume, .op = ctl_operator(ctl),
		               .reason = o->reason };
	char err[512];
	long long client_id;
	double rate;
	enum og_rc rc;

	rc = replay_job_take(ctl->db, job.id, "replay", true, o->reason, &client_id, &rate,
	                     err, sizeof(err));
	if (rc != OG_OK)
		return ctl_refuse(ctl, "replay", ctl_exit(rc), job.op, NULL,
		                  o->reason, "%s", rc == OG_UNAVAILABLE ? db_error(ctl->db) : err);
	job.rate = o->rate_text == NULL ? rate : o->rate;
	ctl_job_continued(ctl, &job);
	return replay_job_go(ctl, o, &job, client_id);
}

int
ctl_replay(struct ctl *ctl, int argc, char **argv)
{
	struct replay_opts o;
	const struct ctl_opt opts[] = {
		{ "new-key", CTL_OPT_TEXT, &o.new_key, 0, NULL },
		{ "reason", CTL_OPT_TEXT, &o.reason, 0, NULL },
		{ "payload", CTL_OPT_TEXT, &o.payload_file, 0, NULL },
		{ "client", CTL_OPT_TEXT, &o.client, 0, NULL },
		{ "map", CTL_OPT_TEXT, &o.map, 0, NULL },
		{ "rate", CTL_OPT_TEXT, &o.rate_text, 0, NULL },
		{ "resume", CTL_OPT_JOB, &o.resume, 0, NULL },
		{ "dry-run", CTL_OPT_FLAG, &o.dry_run, 0, NULL },
		{ "force", CTL_OPT_FLAG, &o.force, 0, NULL },
		{ NULL, 0, NULL, 0, NULL },
	};
	const char *key = NULL, *op = NULL; /* no operator before the connection */
	char err[1024];
	int ex;

	memset(&o, 0, sizeof(o));
	o.rate = CTL_JOB_RATE_DEFAULT;
	if (ctl_options(ctl, argc, argv, opts, false) != 0)
		return EXIT_USAGE;
	if (optind < argc)
		key = argv[optind++];
	if (optind < argc)
		return ctl_refuse(ctl, "replay", EXIT_USAGE, op, key, o.reason,
		                  "unexpected argument \"%s\"", argv[optind]);
	if ((key != NULL) + (o.map != NULL) + (o.resume > 0) != 1)
		return ctl_refuse(ctl, "replay", EXIT_USAGE, op, key, o.reason,
		                  "name one KEY, or --map FILE, or --resume JOB");
	if (key != NULL && (o.new_key == NULL || o.new_key[0] == '\0'))
		return ctl_refuse(ctl, "replay", EXIT_USAGE, op, key, o.reason,
		                  "--new-key NEWKEY is required: a correction is a new event whose "
		                  "key is issued upstream, never invented by oncegate");
	if (key == NULL && (o.new_key != NULL || o.payload_file != NULL || o.force))
		return ctl_refuse(ctl, "replay", EXIT_USAGE, op, NULL, o.reason,
		                  "--new-key, --payload and --force are for one KEY; a map file "
		                  "names its keys, and a bulk job never forces");
	if (key != NULL && (!api_key_valid(key, strlen(key)) ||
	                    !api_key_valid(o.new_key, strlen(o.new_key))))
		return ctl_refuse(ctl, "replay", EXIT_USAGE, op, key, o.reason,
		                  "a key is 1-%d printable characters", OG_KEY_MAX_CHARS);
	/* the new run must be reachable through the API like any claimed one */
	if (key != NULL && api_key_claim_problem(o.new_key, strlen(o.new_key)) != NULL)
		return ctl_refuse(ctl, "replay", EXIT_USAGE, op, key, o.reason, "--new-key: %s",
		                  api_key_claim_problem(o.new_key, strlen(o.new_key)));
	if (!o.dry_run && (o.reason == NULL || o.reason[0] == '\0'))
		return ctl_refuse(ctl, "replay", EXIT_USAGE, op, key, NULL,
		                  "--reason TEXT is required: it is recorded with the operator");
	if (o.reason != NULL && strlen(o.reason) > 1000)
		return ctl_refuse(ctl, "replay", EXIT_USAGE, op, key, NULL,
		                  "--reason is at most 1000 bytes");
	if (o.rate_text != NULL && ctl_job_rate(o.rate_text, &o.rate) != 0)
		return ctl_refuse(ctl, "replay", EXIT_USAGE, op, key, o.reason,
		                  "--rate is N or N/s with 0 < N <= %g", CTL_JOB_RATE_MAX);
	if (o.payload_file != NULL && read_payload(&o, err, sizeof(err)) != 0)
		return ctl_refuse(ctl, "replay", EXIT_USAGE, op, key, o.reason, "%s", err);
	/* the approvers of a fresh approval are the contract's, as loaded now */
	o.contracts = contract_load_dir(ctl->cfg.contracts_dir, err, sizeof(err));
	if (o.contracts == NULL) {
		free(o.payload);
		return ctl_refuse(ctl, "replay", EXIT_REFUSED, op, key, o.reason,
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


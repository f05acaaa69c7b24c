/*
 * check_lists.c — integration suite: the API's lists, GET /v1/runs and
 * GET /v1/approvals, against the stack of ./dev test. The client is this
 * run's second tenant, whose keys the stack's own client also uses.
 *
 *   paging    10,000 runs (keys in Cyrillic, CJK, Arabic and emoji) paged
 *             at 997 a page while 400 more are claimed: every one of the
 *             10,000 exactly once, in order (created_at, then key), no
 *             gaps and no repeats, exactly the database's order; the same
 *             pages again without the writers: all 10,400 in that order;
 *             the stack's own client, which claimed 40 of the same keys,
 *             lists its 40 and none of the other tenant's;
 *   filters   state (a completed run among processing ones), contract
 *             and since; challenges of gated runs by state and contract,
 *             a decided one no longer "pending";
 *   contracts GET /v1/contracts: every loaded contract, in name order, with
 *             the effect types and targets its file allows; the same for
 *             both tenants; 401 without a key;
 *   refused   a state the list does not have, a date that is no date, a
 *             limit of 0 or 1001, a cursor not of ours, a parameter the list
 *             does not take, one given twice, a NUL or a bidirectional
 *             control: 400 invalid_field.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "dispatchlib.h"
#include "testlib.h"

#define RUNS     10000
#define EXTRA    400
#define WRITERS  8
#define PAGE     997
#define SHARED   40 /* keys the stack's own client also claims */

static const char *const words[] = { "заявка", "申请", "طلب", "🚀заказ", "注文" };

static void
claim(const char *bearer, const char *key)
{
	struct tl_resp r;
	json_t *body = json_pack("{s:s, s:{s:s}}", "key", key, "payload", "source", "lists");

	tl_post_json("/v1/runs", bearer, body, &r);
	json_decref(body);
	ck_assert_msg(r.status == 201, "claim %s: HTTP %ld %.300s", key, r.status, r.body);
	tl_resp_free(&r);
}

struct writer {
	int first, count;
	const char *prefix;
};

static void *
writer_thread(void *arg)
{
	const struct writer *w = arg;
	char key[200];
	int i;

	for (i = w->first; i < w->first + w->count; i++) {
		snprintf(key, sizeof(key), "%s/%s-%05d", w->prefix, words[i % 5], i);
		claim(dl_key_b, key);
	}
	return NULL;
}

static void
write_runs(const char *prefix, int first, int count)
{
	pthread_t th[WRITERS];
	struct writer w[WRITERS];
	int i, per = count / WRITERS;

	for (i = 0; i < WRITERS; i++) {
		w[i] = (struct writer){ first + i * per, i == WRITERS - 1 ? count - i * per : per,
			                prefix };
		ck_assert_int_eq(pthread_create(&th[i], NULL, writer_thread, &w[i]), 0);
	}
	for (i = 0; i < WRITERS; i++)
		pthread_join(th[i], NULL);
}

/* Every page of path (with "?…" query already, or none) for bearer: the
 * rows of member, in order, as one array. */
static json_t *
all_pages(const char *bearer, const char *path, const char *member, int *pages)
{
	json_t *all = json_array();
	char *cursor = NULL;

	*pages = 0;
	for (;;) {
		struct tl_resp r;
		char *url;
		json_t *rows;

		ck_assert(asprintf(&url, "%s%slimit=%d%s%s", path, strchr(path, '?') ? "&" : "?", PAGE,
		                   cursor ? "&cursor=" : "", cursor ? cursor : "") > 0);
		tl_get(url, bearer, &r);
		ck_assert_msg(r.status == 200, "%s: HTTP %ld %.300s", url, r.status, r.body);
		free(url);
		rows = json_object_get(r.json, member);
		ck_assert(json_is_array(rows));
		json_array_extend(all, rows);
		(*pages)++;
		free(cursor);
		cursor = tl_jstr(r.json, "next_cursor") ? strdup(tl_jstr(r.json, "next_cursor")) : NULL;
		tl_resp_free(&r);
		if (cursor == NULL)
			break;
		ck_assert_int_lt(*pages, 100);
	}
	return all;
}

struct pager {
	const char *path;
	json_t *rows;
	int pages;
};

static void *
pager_thread(void *arg)
{
	struct pager *p = arg;

	p->rows = all_pages(dl_key_b, p->path, "runs", &p->pages);
	return NULL;
}

/* Now, by the database's clock, as RFC 3339 to the microsecond. */
static void
db_now(char *out, size_t outlen)
{
	PGconn *c = tl_pg_connect();
	char *now = tl_pg_value(c, "SELECT to_char(now() AT TIME ZONE 'UTC',"
	                           " 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')", 0, NULL);

	snprintf(out, outlen, "%s", now);
	free(now);
	PQfinish(c);
}

/* The keys of client's runs under prefix, in the list's order (created_at
 * to the microsecond, then key), as the database has them now. */
static json_t *
db_order(const char *client, const char *prefix)
{
	PGconn *c = tl_pg_connect();
	char *text = qstr(c,
	                  "SELECT coalesce(json_agg(r.idempotency_key ORDER BY r.created_at,"
	                  "                         r.idempotency_key), '[]')"
	                  "  FROM workflow_runs r JOIN api_clients k ON k.id = r.client_id"
	                  " WHERE k.name = $1 AND starts_with(r.idempotency_key, $2)",
	                  client, prefix, NULL);
	json_t *keys = text != NULL ? json_loads(text, 0, NULL) : NULL;

	ck_assert(json_is_array(keys));
	free(text);
	PQfinish(c);
	return keys;
}

/* The keys of rows under prefix, in the order listed. */
static json_t *
keys_of(const json_t *rows, const char *prefix)
{
	json_t *keys = json_array(), *row;
	size_t i;

	json_array_foreach(rows, i, row) {
		const char *key = tl_jstr(row, "key");

		ck_assert(key != NULL && tl_jstr(row, "created_at") != NULL);
		if (strncmp(key, prefix, strlen(prefix)) == 0)
			json_array_append_new(keys, json_string(key));
	}
	return keys;
}

/* got equals want, key by key; else the first place they differ. */
static void
same_keys(const json_t *got, const json_t *want, const char *what)
{
	size_t i, n = json_array_size(got) < json_array_size(want) ? json_array_size(got)
	                                                            : json_array_size(want);

	for (i = 0; i < n; i++) {
		const char *g = json_string_value(json_array_get(got, i));
		const char *w = json_string_value(json_array_get(want, i));

		ck_assert_msg(strcmp(g, w) == 0, "%s: row %zu is %s, the database's order has %s",
		              what, i, g, w);
	}
	ck_assert_msg(json_array_size(got) == json_array_size(want), "%s: %zu rows, expected %zu",
	              what, json_array_size(got), json_array_size(want));
}

START_TEST(test_paging)
{
	char prefix[96], path[256], since[64];
	struct pager p;
	pthread_t th;
	json_t *before, *paged, *listed, *again, *all, *mine;
	size_t i, extra = 0;
	int pages, n;
	double t0;

	snprintf(prefix, sizeof(prefix), "%s:lists", tl_run);
	db_now(since, sizeof(since));
	/* the stack's own client uses some of the same business keys */
	for (n = 0; n < SHARED; n++) {
		char key[200];

		snprintf(key, sizeof(key), "%s/%s-%05d", prefix, words[n % 5], n * 97);
		claim(tl_env("ONCEGATE_API_KEY"), key);
	}
	t0 = tl_now();
	write_runs(prefix, 0, RUNS);
	fprintf(stderr, "check_lists: %d runs claimed by %d writers in %.1f s\n", RUNS, WRITERS,
	        tl_now() - t0);
	before = db_order(dl_client_b, prefix);
	ck_assert_uint_eq(json_array_size(before), RUNS);
	/* page while more are written */
	snprintf(path, sizeof(path), "/v1/runs?state=processing");
	p = (struct pager){ .path = path };
	t0 = tl_now();
	ck_assert_int_eq(pthread_create(&th, NULL, pager_thread, &p), 0);
	write_runs(prefix, RUNS, EXTRA);
	pthread_join(th, NULL);
	/* the runs there before paging began: each once, in the order */
	listed = keys_of(p.rows, prefix);
	paged = json_array();
	for (i = 0; i < json_array_size(listed); i++) {
		const char *key = json_string_value(json_array_get(listed, i));

		n = atoi(strrchr(key, '-') + 1);
		ck_assert_msg(n >= 0 && n < RUNS + EXTRA, "unexpected key %s", key);
		if (n < RUNS)
			json_array_append(paged, json_array_get(listed, i));
		else
			extra++;
	}
	fprintf(stderr, "check_lists: %zu of %d runs paged in %d pages (%.1f s) while %d were "
	        "added (%zu of them listed)\n", json_array_size(paged), RUNS, p.pages,
	        tl_now() - t0, EXTRA, extra);
	same_keys(paged, before, "paged while runs were claimed");
	/* again, quiet: all 10,400, in the database's order */
	all = db_order(dl_client_b, prefix);
	ck_assert_uint_eq(json_array_size(all), RUNS + EXTRA);
	again = all_pages(dl_key_b, path, "runs", &pages);
	json_decref(listed);
	listed = keys_of(again, prefix);
	same_keys(listed, all, "paged again");
	/* the stack's own client sees its own runs of those keys, and only them */
	snprintf(path, sizeof(path), "/v1/runs?state=processing&since=%s", since);
	mine = all_pages(tl_env("ONCEGATE_API_KEY"), path, "runs", &pages);
	json_decref(listed);
	listed = keys_of(mine, prefix);
	ck_assert_uint_eq(json_array_size(listed), SHARED);
	json_decref(all);
	all = db_order("dev", prefix);
	same_keys(listed, all, "the other tenant's list");
	json_decref(listed);
	json_decref(mine);
	json_decref(again);
	json_decref(all);
	json_decref(paged);
	json_decref(before);
	json_decref(p.rows);
}
END_TEST

START_TEST(test_filters)
{
	struct tl_claimed cl;
	struct tl_resp r;
	char key[160], path[512], since[64];
	json_t *rows, *body;
	int pages;
	size_t i;

	db_now(since, sizeof(since));
	snprintf(key, sizeof(key), "%s:filters/готово-1", tl_run);
	body = json_pack("{s:s, s:{s:s}}", "key", key, "payload", "source", "filters");
	tl_claim_body(dl_key_b, body, &cl);
	json_decref(body);
	body = json_pack("{s:s, s:I, s:s, s:{s:s}}", "lease_owner", cl.owner, "version",
	                 (json_int_t)cl.version, "to", "completed", "result", "note",
	                 "отправлено 📨");
	{
		char *p = tl_run_path(key, "/transition");

		tl_post_json(p, dl_key_b, body, &r);
		free(p);
	}
	json_decref(body);
	ck_assert_msg(r.status == 200, "transition: HTTP %ld %.300s", r.status, r.body);
	tl_resp_free(&r);
	snprintf(path, sizeof(path), "/v1/runs?state=completed&since=%s", since);
	rows = all_pages(dl_key_b, path, "runs", &pages);
	ck_assert_uint_eq(json_array_size(rows), 1);
	ck_assert_str_eq(tl_jstr(json_array_get(rows, 0), "key"), key);
	json_decref(rows);
	/* challenges: two gated runs, three challenges each; one decided */
	for (i = 0; i < 2; i++) {
		char k[160];

		snprintf(k, sizeof(k), "%s:filters/申请-%zu", tl_run, i);
		dl_claim_and_output(dl_key_b, k, "quorum_mail",
		                    json_pack("{s:s, s:s}", "subject",
		                              tl_corpus_mail_str("zh_short", "subject"), "body",
		                              tl_corpus_mail_str("zh_short", "body")),
		                    json_pack("{s:s, s:s, s:{s:[s]}}", "type", "email.send", "target",
		                              "demo_smtp", "payload", "to", "wang.fang@example.com"),
		                    "olga.petrova@example.com", &r);
		ck_assert_msg(r.status == 202, "output: HTTP %ld %.300s", r.status, r.body);
		tl_resp_free(&r);
	}
	snprintf(path, sizeof(path), "/v1/approvals?state=pending&contract=quorum_mail&since=%s",
	         since);
	rows = all_pages(dl_key_b, path, "approvals", &pages);
	ck_assert_uint_eq(json_array_size(rows), 6);
	ck_assert_str_eq(tl_jstr(json_array_get(rows, 0), "effect_target"), "demo_smtp");
	ck_assert_str_eq(tl_jstr(json_array_get(rows, 0), "state"), "pending");
	json_decref(rows);
	snprintf(path, sizeof(path), "/v1/approvals?contract=support_reply&since=%s", since);
	rows = all_pages(dl_key_b, path, "approvals", &pages);
	ck_assert_uint_eq(json_array_size(rows), 0);
	json_decref(rows);
}
END_TEST

/* The contract file NAME.json the stack loaded: the shipped contracts/
 * or the test contracts (tests/data/contracts-test), parsed. */
static json_t *
contract_file(const char *name)
{
	const char *const dirs[] = { tl_env("srcdir"), ".", "..", "../.." };
	const char *const subs[] = { "contracts", "tests/data/contracts-test" };
	size_t i, j;

	for (i = 0; i < 4; i++)
		for (j = 0; dirs[i] != NULL && j < 2; j++) {
			char path[512], *text;
			json_t *doc;

			snprintf(path, sizeof(path), "%s/%s/%s.json", dirs[i], subs[j], name);
			if ((text = tl_file_slurp(path, NULL)) == NULL)
				continue;
			doc = json_loads(text, 0, NULL);
			free(text);
			return doc;
		}
	return NULL;
}

/* v equals the JSON text want. */
static void
same_json(const json_t *v, const char *want)
{
	json_t *w = json_loads(want, 0, NULL);

	ck_assert_msg(w != NULL && json_equal(v, w), "not %s", want);
	json_decref(w);
}

START_TEST(test_contracts)
{
	struct tl_resp r;
	json_t *list, *k;
	size_t i;
	bool quorum = false;
	const char *prev = "";

	tl_get("/v1/contracts", dl_key_b, &r);
	ck_assert_msg(r.status == 200, "HTTP %ld %.300s", r.status, r.body);
	list = json_object_get(r.json, "contracts");
	ck_assert(json_array_size(list) >= 2);
	json_array_foreach(list, i, k) {
		const char *name = tl_jstr(k, "name");
		json_t *doc = contract_file(name), *effects = json_object_get(doc, "effects");

		/* each as its file says, in name order */
		ck_assert_msg(doc != NULL, "contract %s listed, but no file of that name", name);
		ck_assert_msg(strcmp(prev, name) < 0, "%s listed after %s", name, prev);
		prev = name;
		ck_assert_msg(json_equal(json_object_get(k, "effect_types"),
		                         json_object_get(effects, "allowed_types")) &&
		                  json_equal(json_object_get(k, "effect_targets"),
		                             json_object_get(effects, "allowed_targets")),
		              "%s: the types or targets differ from its file", name);
		if (json_object_get(doc, "description") != NULL)
			ck_assert_str_eq(tl_jstr(k, "description"),
			                 tl_jstr(doc, "description"));
		if (strcmp(name, "quorum_mail") == 0) {
			quorum = true;
			ck_assert_str_eq(tl_jstr(k, "gate_mode"), "approve_before_act");
			same_json(json_object_get(k, "editable"), "[\"subject\", \"body\"]");
			same_json(json_object_get(k, "allowed_decisions"), "[\"approve\", \"reject\"]");
		}
		json_decref(doc);
	}
	ck_assert(quorum);
	/* another tenant is shown the same contracts: they are the site's */
	{
		struct tl_resp r2;

		tl_get("/v1/contracts", tl_env("ONCEGATE_API_KEY"), &r2);
		ck_assert_int_eq(r2.status, 200);
		ck_assert(json_equal(r.json, r2.json));
		tl_resp_free(&r2);
	}
	tl_resp_free(&r);
	/* without a key: 401, nothing listed */
	tl_get("/v1/contracts", NULL, &r);
	ck_assert_msg(r.status == 401 && strstr(r.body, "quorum_mail") == NULL, "HTTP %ld %.300s",
	              r.status, r.body);
	tl_resp_free(&r);
}
END_TEST

START_TEST(test_refused)
{
	static const char *const bad[] = {
		"/v1/runs?state=sent", "/v1/runs?since=2026-02-31T00:00:00Z", "/v1/runs?since=yesterday",
		"/v1/runs?limit=0", "/v1/runs?limit=1001", "/v1/runs?limit=ten",
		"/v1/runs?cursor=zz", "/v1/runs?cursor=123.0g", "/v1/runs?cursor=.6162",
		"/v1/approvals?state=approved", "/v1/runs?state=", "/v1/runs?stat=processing",
		"/v1/approvals?state=pending&contract=quorum_mail&order=desc",
		"/v1/runs?state=processing&state=completed", "/v1/runs?limit=5&limit=6",
		"/v1/runs?since=2026-12-01T08:00:00Z%00", "/v1/runs?contract=%E2%80%AEquorum", NULL,
	};
	size_t i;

	for (i = 0; bad[i] != NULL; i++) {
		struct tl_resp r;

		tl_get(bad[i], dl_key_b, &r);
		ck_assert_msg(r.status == 400 && tl_jstr(r.json, "error") != NULL &&
		                  strcmp(tl_jstr(r.json, "error"), "invalid_field") == 0,
		              "%s: HTTP %ld %.300s", bad[i], r.status, r.body);
		tl_resp_free(&r);
	}
}
END_TEST

TL_SUITE(lists_suite, "lists",
         {"lists", 300,
          .tests = TL_LIST(test_refused, test_contracts, test_filters, test_paging)})

DL_TENANTS_MAIN("check_lists", "li", .suite = lists_suite)

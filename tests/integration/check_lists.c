/*
 * check_lists.c — integration suite: the API's lists, GET /v1/runs and
 * GET /v1/approvals, against the stack of ./dev test. The client is this
 * run's second tenant, whose keys the stack's own client also uses.
 *
 *   paging    10,000 runs (keys in Cyrillic, CJK, Arabic and emoji) paged
 *             at 997 a page while 400 more are claimed: every one of the
 *             10,000 exactly once, in order (created_at, then key), no
 *             gaps and no repeats; the same pages again without the
 *             writers give the same order; the other client sees none;
 *   filters   state (a completed run among processing ones), contract
 *             and since; challenges of gated runs by state and contract,
 *             a decided one no longer "pending";
 *   refused   a state the list does not have, a date that is no date, a
 *             limit of 0 or 1001, a cursor not of ours: 400 invalid_field.
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

START_TEST(test_paging)
{
	char prefix[96], path[256];
	struct pager p;
	pthread_t th;
	json_t *again, *row, *mine;
	size_t i, seen = 0, extra = 0;
	int pages;
	double t0;
	char *last_at = NULL, *last_key = NULL;
	bool *got = calloc(RUNS, sizeof(bool));

	snprintf(prefix, sizeof(prefix), "%s:lists", tl_run);
	t0 = tl_now();
	write_runs(prefix, 0, RUNS);
	fprintf(stderr, "check_lists: %d runs claimed by %d writers in %.1f s\n", RUNS, WRITERS,
	        tl_now() - t0);
	/* page while more are written */
	snprintf(path, sizeof(path), "/v1/runs?state=processing");
	p = (struct pager){ .path = path };
	ck_assert_int_eq(pthread_create(&th, NULL, pager_thread, &p), 0);
	write_runs(prefix, RUNS, EXTRA);
	pthread_join(th, NULL);
	json_array_foreach(p.rows, i, row) {
		const char *key = tl_jstr(row, "key"), *at = tl_jstr(row, "created_at");
		const char *dash = key != NULL ? strrchr(key, '-') : NULL;
		int n;

		ck_assert(key != NULL && at != NULL);
		if (strncmp(key, prefix, strlen(prefix)) != 0)
			continue; /* another suite's run of this client: none expected */
		n = dash != NULL ? atoi(dash + 1) : -1;
		ck_assert_msg(n >= 0 && n < RUNS + EXTRA, "unexpected key %s", key);
		if (n < RUNS) {
			ck_assert_msg(!got[n], "run %s listed twice", key);
			got[n] = true;
			seen++;
		} else {
			extra++;
		}
		/* in order: created_at, then key (created_at is to the millisecond
		 * here, so equal ones are ordered by key only among themselves) */
		if (last_at != NULL)
			ck_assert_msg(strcmp(at, last_at) >= 0, "%s after %s", at, last_at);
		free(last_at);
		free(last_key);
		last_at = strdup(at);
		last_key = strdup(key);
	}
	fprintf(stderr, "check_lists: %zu of %d runs paged in %d pages while %d were added "
	        "(%zu of them seen)\n", seen, RUNS, p.pages, EXTRA, extra);
	ck_assert_uint_eq(seen, RUNS);
	/* again, quiet: the same order, all 10,400 */
	again = all_pages(dl_key_b, path, "runs", &pages);
	ck_assert_uint_eq(json_array_size(again), RUNS + EXTRA);
	for (i = 0; i + extra < json_array_size(p.rows) && i < json_array_size(again); i++)
		ck_assert_str_eq(tl_jstr(json_array_get(p.rows, i), "key"),
		                 tl_jstr(json_array_get(again, i), "key"));
	/* the stack's own client sees none of them */
	mine = all_pages(tl_env("ONCEGATE_API_KEY"), "/v1/runs?state=processing", "runs", &pages);
	json_array_foreach(mine, i, row)
		ck_assert_msg(strncmp(tl_jstr(row, "key"), prefix, strlen(prefix)) != 0,
		              "another client's run listed: %s", tl_jstr(row, "key"));
	json_decref(mine);
	json_decref(again);
	json_decref(p.rows);
	free(last_at);
	free(last_key);
	free(got);
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

	/* since: now, by the database's clock */
	{
		PGconn *c = tl_pg_connect();
		char *now = tl_pg_value(c, "SELECT to_char(now() AT TIME ZONE 'UTC',"
		                           " 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')", 0, NULL);

		snprintf(since, sizeof(since), "%s", now);
		free(now);
		PQfinish(c);
	}
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

START_TEST(test_refused)
{
	static const char *const bad[] = {
		"/v1/runs?state=sent", "/v1/runs?since=2026-02-31T00:00:00Z", "/v1/runs?since=yesterday",
		"/v1/runs?limit=0", "/v1/runs?limit=1001", "/v1/runs?limit=ten",
		"/v1/runs?cursor=zz", "/v1/runs?cursor=123.0g", "/v1/runs?cursor=.6162",
		"/v1/approvals?state=approved", "/v1/runs?state=", NULL,
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

static Suite *
lists_suite(void)
{
	Suite *s = suite_create("lists");
	TCase *tc = tcase_create("lists");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_refused);
	tcase_add_test(tc, test_filters);
	tcase_add_test(tc, test_paging);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	static const struct dl_suite s = {
		.name = "check_lists", .prefix = "li", .needed = "ONCEGATE_API_KEY",
		.suite = lists_suite, .prepare = dl_tenants_prepare, .finish = dl_tenants_finish,
	};

	return dl_suite_main(&s);
}

/*
 * check_provider_key.c — integration suite of the provider idempotency key:
 * one per (API client, run key, effect type, target, slot), ASCII and
 * header-safe, at most 255 bytes, stored on the effect when it is enqueued
 * and never recomputed. On the stack that `./dev test` starts; without
 * ONCEGATE_URL or ONCEGATE_DISPATCH the suite is skipped (exit 77).
 *
 * Work goes through the API as a workflow sends it: API clients of their
 * own (two or three tenants that use the same business keys, long and in
 * several scripts) claim a key and post an output under the test-only
 * contract pkey_auto (tests/data/contracts-test), which lets a CRM tag or
 * a short mail go out without a person. The suite's own dispatchers send to
 * the loopback providers of tests/providers (demo_http and demo_smtp, the
 * targets the responder knows, pointed at them); each test asserts what the
 * provider received and committed, the rows, GET /v1/runs/{key} and
 * `oncegatectl explain`.
 *
 * The migration test applies sql/001-008 to a schema of its own, writes
 * effects with the keys earlier versions stored, then sql/009, and checks
 * that no stored key moved.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "dispatchlib.h"
#include "outbox.h"
#include "testlib.h"

#define CONTRACT       "pkey_auto"
#define MAIL_FROM      "oncegate@tenants.example"
#define MAIL_DOMAIN    "tenants.example"
#define TEST_TIMEOUT_S 300
#define PROP_KEYS      70    /* business keys of the property test... */
#define PROP_CLIENTS   3     /* ...each used by every one of these clients */


#define JSTR(o, n) (tl_jstr((o), (n)) ? tl_jstr((o), (n)) : "(none)")

/* ---- tenants ------------------------------------------------------------------ */

struct tenant {
	char name[96];
	char *api_key;
	char id[24];
};

static void
tenant_add(PGconn *c, struct tenant *t, const char *tag)
{
	char *id;

	snprintf(t->name, sizeof(t->name), "pk-%s-%s", tag, tl_run);
	t->api_key = tl_client_add(t->name);
	ck_assert_msg(t->api_key != NULL, "oncegatectl client add %s failed", t->name);
	id = qstr(c, "SELECT id FROM api_clients WHERE name = $1", t->name, (char *)NULL);
	ck_assert_ptr_nonnull(id);
	snprintf(t->id, sizeof(t->id), "%s", id);
	free(id);
}

static void
tenant_free(struct tenant *t)
{
	free(t->api_key);
	t->api_key = NULL;
}

/* ---- runs through the API ------------------------------------------------------- */

/* Claims key as tenant t and posts an output whose effect goes out without
 * a person; the answer must be 202 approved. */
static void
run_auto(const struct tenant *t, const char *key, const char *type, const char *target,
         json_t *output, json_t *payload)
{
	struct tl_claimed cl;
	struct tl_resp r;
	json_t *body;
	char *path;

	body = json_pack("{s:s, s:{s:s, s:s}, s:i}", "key", key, "payload", "suite", tl_run,
	                 "tenant", t->name, "lease_seconds", 60);
	tl_claim_body(t->api_key, body, &cl);
	json_decref(body);

	path = tl_run_path(key, "/output");
	body = json_pack("{s:s, s:I, s:s, s:o, s:{s:s, s:s, s:s}, s:{s:s, s:s, s:o}, s:s, s:s}",
	                 "lease_owner", cl.owner, "version", (json_int_t)cl.version,
	                 "contract", CONTRACT, "output", output,
	                 "model", "provider", "openai-compatible", "name", "qwen2.5-7b-instruct",
	                 "revision", "2024-09-19",
	                 "effect", "type", type, "target", target, "payload", payload,
	                 "source_url", "https://crm.example/contacts/4711",
	                 "requested_by", "workflow@tenants.example");
	tl_post_json(path, t->api_key, body, &r);
	json_decref(body);
	free(path);
	ASSERT_STATUS(&r, 202);
	ck_assert_msg(streq(tl_jstr(r.json, "outcome"), "approved"), "output of %s as %s: %s", key,
	              t->name, r.body);
	tl_resp_free(&r);
}

static void
run_tag(const struct tenant *t, const char *key, json_t *fault)
{
	json_t *payload = json_pack("{s:s, s:s}", "contact", "4711", "tag", "lead");

	if (fault != NULL)
		json_object_set_new(payload, "fault", fault);
	run_auto(t, key, "crm.tag", "demo_http", json_pack("{s:s}", "tag", "lead"), payload);
}

static void
run_mail(const struct tenant *t, const char *key, const char *to)
{
	run_auto(t, key, "email.send", "demo_smtp",
	         json_pack("{s:s, s:s}", "subject", "Ваш заказ 4711 / 您的订单",
	                   "body", "Здравствуйте! Заказ отправлен. 您的订单已发货。 שלום 🚚"),
	         json_pack("{s:s}", "to", to));
}

/* The effect row of tenant t's run `key` (its only effect), as JSON. */
static json_t *
effect_of(PGconn *c, const struct tenant *t, const char *key)
{
	json_t *v = qjson(c, "SELECT row_to_json(e)::text FROM effect_outbox e"
	                  " WHERE client_id = $1::bigint AND idempotency_key = $2",
	                  t->id, key, (char *)NULL);

	ck_assert_msg(v != NULL, "%s has no effect for %s", t->name, key);
	return v;
}

/* Polls until every effect of the given tenants' runs whose key starts
 * with prefix is in state want; fails with the rows otherwise. */
static void
wait_all(PGconn *c, const char *prefix, const char *want, long long n, double secs)
{
	double deadline = tl_now() + secs;
	char like[256];
	long long got;

	snprintf(like, sizeof(like), "%s%%", prefix);
	for (;;) {
		got = qnum(c, "SELECT count(*) FROM effect_outbox WHERE idempotency_key LIKE $1"
		           " AND state = $2", like, want, (char *)NULL);
		if (got >= n || tl_now() > deadline)
			break;
		tl_sleep_ms(100);
	}
	if (got < n) {
		char *rows = qstr(c, "SELECT json_agg(json_build_object('key', idempotency_key,"
		                  " 'client', client_id, 'state', state, 'reason', reason))::text"
		                  " FROM effect_outbox WHERE idempotency_key LIKE $1 AND state <> $2",
		                  like, want, (char *)NULL);

		ck_abort_msg("%lld of %lld effects %s after %.0f s; the others: %.3000s", got, n,
		             want, secs, rows ? rows : "(none)");
	}
}

/* ---- the suite's dispatcher ------------------------------------------------------- */

enum http_mode {
	HTTP_IDEM,    /* demo_http honours Idempotency-Key */
	HTTP_LOOKUP,  /* demo_http ignores it, but can be asked whether it acted */
};

static void
disp_start(struct dl_disp *d, enum http_mode mode)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	ck_assert_ptr_nonnull(f);
	fprintf(f, "# check_provider_key: one of the suite's dispatchers\n"
	        "log_file = %s\nlog_level = info\ndispatch_workers = 4\ndispatch_poll_ms = 200\n"
	        "dispatch_shutdown_seconds = 10\nreconcile_interval_seconds = 1\n"
	        "retention_days = 7\n", dl_disp_files(d));
	/* It re-checks each payload against the run's contract before sending. */
	dl_conf_contracts(f);
	fputc('\n', f);
	if (mode == HTTP_IDEM)
		fprintf(f, "[target demo_http]\nkind = http\nurl = http://127.0.0.1:%d/idem/effects\n"
		        "idempotency_key = 1\nprovider_id_header = X-Provider-Id\n"
		        "timeout_ms = 5000\nmax_attempts = 5\nbase_ms = 100\ncap_ms = 500\n"
		        "jitter_percent = 0\n\n", g_http_port);
	else
		fprintf(f, "[target demo_http]\nkind = http\nurl = http://127.0.0.1:%d/plain/effects\n"
		        "lookup_url = http://127.0.0.1:%d/plain/effects/lookup\nidempotency_key = 0\n"
		        "provider_id_header = X-Provider-Id\ntimeout_ms = 2000\nmax_attempts = 5\n"
		        "base_ms = 100\ncap_ms = 500\njitter_percent = 0\n\n", g_http_port,
		        g_http_port);
	fprintf(f, "[target demo_smtp]\nkind = smtp\nurl = smtp://127.0.0.1:%d\nmail_from = %s\n"
	        "timeout_ms = 5000\nmax_attempts = 3\nbase_ms = 100\ncap_ms = 500\n\n",
	        g_smtp_port, MAIL_FROM);
	ck_assert_int_eq(fclose(f), 0);
	dl_disp_start(d, text, ENV_TRUE);
	free(text);
}

static void
disp_stop(struct dl_disp *d)
{
	dl_disp_stop(d, 30);
}

static void
kill_switch_on(void)
{
	char *out = NULL;
	int rc = tl_ctl(&out, "sends", "resume", "--reason", "check_provider_key sends",
	                (char *)NULL);

	ck_assert_msg(rc == 0, "oncegatectl sends resume: exit %d: %s", rc, out ? out : "");
	free(out);
}

/* ---- what the providers received -------------------------------------------------- */

/* How many recorded mails carry this Message-ID. */
static size_t
mails_with(const char *message_id_want)
{
	size_t len, n = 0;
	char *text = tl_file_slurp(g_smtp_record, &len), *p, *nl;

	if (text == NULL)
		return 0;
	for (p = text; (nl = memchr(p, '\n', len - (size_t)(p - text))) != NULL; p = nl + 1) {
		json_t *rec = json_loadb(p, (size_t)(nl - p), 0, NULL);

		if (rec != NULL && streq(tl_jstr(rec, "message_id"), message_id_want))
			n++;
		json_decref(rec);
	}
	free(text);
	return n;
}

/* The key of a provider request: its Idempotency-Key header. */
static const char *
req_key(const json_t *req)
{
	return tl_jstr(req, "idempotency_key");
}

/* A stored key as the contract asks: the documented form for (client, run
 * key, type, target, slot 0), at most 255 bytes, printable ASCII without
 * spaces. */
static void
expect_key_form(const json_t *row, const char *client_id, const char *key)
{
	const char *pk = tl_jstr(row, "provider_key");
	char *want = tl_provider_key(client_id, key, JSTR(row, "effect_type"), JSTR(row, "target"),
	                             0);

	ck_assert_msg(pk != NULL, "effect without a provider key");
	ck_assert_msg(strlen(pk) <= 255, "provider key of %zu bytes: %s", strlen(pk), pk);
	ck_assert_msg(tl_header_safe(pk), "provider key is not header-safe: %s", pk);
	ck_assert_msg(streq(pk, want), "stored provider key %s, expected %s (client %s)", pk, want,
	              client_id);
	free(want);
}

/* GET /v1/runs/{key} as tenant t shows the stored key of its one effect. */
static void
expect_status_key(const struct tenant *t, const char *key, const char *pk)
{
	struct tl_resp r;
	char *path = tl_run_path(key, NULL);
	json_t *effects, *e;

	tl_get(path, t->api_key, &r);
	free(path);
	ASSERT_STATUS(&r, 200);
	effects = json_object_get(r.json, "effects");
	ck_assert_msg(json_array_size(effects) == 1, "status of %s as %s: %s", key, t->name, r.body);
	e = json_array_get(effects, 0);
	ck_assert_msg(streq(tl_jstr(e, "provider_key"), pk),
	              "GET /v1/runs/{key} as %s shows provider_key %s, stored %s", t->name,
	              JSTR(e, "provider_key"), pk);
	tl_resp_free(&r);
}

/* `oncegatectl explain KEY --client NAME` names the stored key, in text and
 * in --json. */
static void
expect_explain_key(const struct tenant *t, const char *key, const char *pk)
{
	char *out = NULL, line[512];
	json_t *doc, *e;
	int rc;

	rc = tl_ctl(&out, "explain", key, "--client", t->name, (char *)NULL);
	ck_assert_msg(rc == 0 && out != NULL, "explain %s --client %s: exit %d", key, t->name, rc);
	snprintf(line, sizeof(line), "provider key %s\n", pk);
	ck_assert_msg(strstr(out, line) != NULL, "explain as %s does not show \"%s\":\n%s", t->name,
	              pk, out);
	free(out);
	out = NULL;
	rc = tl_ctl(&out, "--json", "explain", key, "--client", t->name, (char *)NULL);
	ck_assert_msg(rc == 0 && out != NULL, "--json explain: exit %d", rc);
	doc = json_loads(out, 0, NULL);
	ck_assert_msg(doc != NULL, "--json explain is not JSON: %s", out);
	e = json_array_get(json_object_get(doc, "effects"), 0);
	ck_assert_msg(streq(tl_jstr(e, "provider_key"), pk), "--json explain as %s: %s", t->name,
	              out);
	json_decref(doc);
	free(out);
}

/* A business key as a CRM hands it over: an order number in Cyrillic, CJK,
 * Hebrew and Arabic, an emoji, spaces and a slash. */
static void
shared_key(char *buf, size_t n, const char *test)
{
	snprintf(buf, n, "Заказ №4711 / 订单 ✉️ 🚚 הזמנה طلب %s-%s", tl_run, test);
}

/* Two tenants that use one business key, each with one effect: made by
 * `make` (which: 0 for a, 1 for b), sent by one of the suite's dispatchers,
 * completed; their rows, with keys of the documented form. */
struct pair {
	struct tenant a, b;
	char key[256];
	json_t *ra, *rb;
	char pka[256], pkb[256];
};

static void
pair_send(PGconn *c, struct pair *p, const char *test, enum http_mode mode,
          void (*make)(const struct tenant *, const char *, int), double secs)
{
	struct dl_disp d;
	char tag[16];

	snprintf(tag, sizeof(tag), "%.6sa", test);
	tenant_add(c, &p->a, tag);
	snprintf(tag, sizeof(tag), "%.6sb", test);
	tenant_add(c, &p->b, tag);
	shared_key(p->key, sizeof(p->key), test);
	make(&p->a, p->key, 0);
	make(&p->b, p->key, 1);

	kill_switch_on();
	disp_start(&d, mode);
	wait_all(c, p->key, "completed", 2, secs);
	disp_stop(&d);

	p->ra = effect_of(c, &p->a, p->key);
	p->rb = effect_of(c, &p->b, p->key);
	expect_key_form(p->ra, p->a.id, p->key);
	expect_key_form(p->rb, p->b.id, p->key);
	snprintf(p->pka, sizeof(p->pka), "%s", JSTR(p->ra, "provider_key"));
	snprintf(p->pkb, sizeof(p->pkb), "%s", JSTR(p->rb, "provider_key"));
	ck_assert_msg(strcmp(p->pka, p->pkb) != 0, "two clients share the provider key %s",
	              p->pka);
	ck_assert_msg(!streq(tl_jstr(p->ra, "provider_id"), tl_jstr(p->rb, "provider_id")),
	              "both tenants' effects completed with provider id %s",
	              JSTR(p->ra, "provider_id"));
}

static void
pair_free(struct pair *p)
{
	json_decref(p->ra);
	json_decref(p->rb);
	tenant_free(&p->a);
	tenant_free(&p->b);
}

/* The provider committed exactly one effect under tenant's key, and the
 * effect completed with the id the provider gave it. */
static void
expect_own_commit(const json_t *row, const char *pk, const char *who)
{
	json_t *com = prov_committed(pk);

	ck_assert_msg(json_array_size(com) == 1, "%s's effect was committed %zu times", who,
	              json_array_size(com));
	ck_assert_msg(streq(tl_jstr(row, "provider_id"), tl_jstr(json_array_get(com, 0), "id")),
	              "%s's effect completed with provider id %s; the provider committed %s", who,
	              JSTR(row, "provider_id"), JSTR(json_array_get(com, 0), "id"));
	json_decref(com);
}

/* ===== two tenants, one business key, a provider that honours the key ===== */

static void
make_tag(const struct tenant *t, const char *key, int which)
{
	(void)which;
	run_tag(t, key, NULL);
}

START_TEST(test_two_tenants_http)
{
	PGconn *c = tl_pg_connect();
	struct pair p;
	json_t *reqs, *req;
	size_t i, na = 0, nb = 0;

	pair_send(c, &p, "http", HTTP_IDEM, make_tag, 20);
	/* the provider got two effects under two keys, and committed both */
	reqs = prov_requests("", "effect");
	json_array_foreach(reqs, i, req) {
		na += streq(req_key(req), p.pka);
		nb += streq(req_key(req), p.pkb);
	}
	json_decref(reqs);
	ck_assert_msg(na == 1 && nb == 1, "the provider got %zu POSTs with %s and %zu with %s", na,
	              p.pka, nb, p.pkb);
	expect_own_commit(p.ra, p.pka, p.a.name);
	expect_own_commit(p.rb, p.pkb, p.b.name);
	/* status and explain show each tenant its own key */
	expect_status_key(&p.a, p.key, p.pka);
	expect_status_key(&p.b, p.key, p.pkb);
	expect_explain_key(&p.a, p.key, p.pka);
	expect_explain_key(&p.b, p.key, p.pkb);
	pair_free(&p);
	PQfinish(c);
}
END_TEST

/* ===== the same with mail: two Message-IDs ===== */

static void
make_mail(const struct tenant *t, const char *key, int which)
{
	run_mail(t, key, which == 0 ? "kunde.a@shop-a.example" : "kunde.b@shop-b.example");
}

START_TEST(test_two_tenants_smtp)
{
	PGconn *c = tl_pg_connect();
	struct pair p;
	char mida[128], midb[128];

	pair_send(c, &p, "smtp", HTTP_IDEM, make_mail, 20);
	dl_message_id(p.pka, MAIL_DOMAIN, mida);
	dl_message_id(p.pkb, MAIL_DOMAIN, midb);
	ck_assert_msg(strcmp(mida, midb) != 0, "both tenants' mails carry Message-ID %s", mida);
	ck_assert_msg(mails_with(mida) == 1, "%zu mails with %s's Message-ID %s", mails_with(mida),
	              p.a.name, mida);
	ck_assert_msg(mails_with(midb) == 1, "%zu mails with %s's Message-ID %s", mails_with(midb),
	              p.b.name, midb);
	expect_status_key(&p.a, p.key, p.pka);
	expect_explain_key(&p.b, p.key, p.pkb);
	pair_free(&p);
	PQfinish(c);
}
END_TEST

/* ===== reconciliation asks for each tenant's own key ===== */

/* a's send reaches the provider, which acts, but the answer is lost; b's
 * is lost before the provider acts, and goes through when resent */
static void
make_lost(const struct tenant *t, const char *key, int which)
{
	run_tag(t, key, which == 0 ? json_string("reset") : json_pack("[s, s]", "drop", "ok"));
}

START_TEST(test_two_tenants_lookup)
{
	PGconn *c = tl_pg_connect();
	struct pair p;
	json_t *reqs, *req;
	char *want_a, *want_b;
	size_t i, la = 0, lb = 0;

	pair_send(c, &p, "lookup", HTTP_LOOKUP, make_lost, 40);
	/* each was looked up under its own stored key */
	want_a = tl_urlencode(p.pka);
	want_b = tl_urlencode(p.pkb);
	reqs = prov_requests("", "lookup");
	json_array_foreach(reqs, i, req) {
		la += strstr(JSTR(req, "query"), want_a) != NULL;
		lb += strstr(JSTR(req, "query"), want_b) != NULL;
	}
	json_decref(reqs);
	free(want_a);
	free(want_b);
	ck_assert_msg(la >= 1 && lb >= 1, "lookups: %zu for %s's key, %zu for %s's", la, p.a.name,
	              lb, p.b.name);
	/* a: found, completed with the id the provider gave it */
	ck_assert_str_eq(JSTR(p.ra, "reason"), "reconciled_found");
	expect_own_commit(p.ra, p.pka, p.a.name);
	/* b: not found (a's effect is not b's), resent, committed once */
	expect_own_commit(p.rb, p.pkb, p.b.name);
	pair_free(&p);
	PQfinish(c);
}
END_TEST

/* ===== the property: random tuples, long multilingual keys ===== */

/* A "." or ".." between slashes is refused at claim (no URL path can
 * carry it): such a part of a random key becomes "x" or ".x". */
static void
dot_parts_out(char *key)
{
	char *part = key, *end;

	for (;;) {
		end = strchr(part, '/');
		if (end == NULL)
			end = part + strlen(part);
		if (end - part == 1 && part[0] == '.')
			part[0] = 'x';
		else if (end - part == 2 && part[0] == '.' && part[1] == '.')
			part[1] = 'x';
		if (*end == '\0')
			return;
		part = end + 1;
	}
}

/* A random printable key of up to 200 characters from several scripts. */
static void
random_key(char *buf, size_t n, unsigned *seed, int i)
{
	static const char *const pieces[] = {
		"Заказ", "№", "счёт", "订单", "发票", "顧客", "הזמנה", "لطلب", "🚚", "✉️", "👩🏽‍💼",
		"order", "-", "_", " ", "/", ".", "ä", "ß", "é", "%20", "+", "#", "?", "\"", "'",
	};
	int want = (i % 5 == 0) ? 200 : 1 + rand_r(seed) % 120;
	int chars = 0;
	size_t len;

	len = (size_t)snprintf(buf, n, "%s %d ", tl_run, i);
	chars = (int)len;
	while (chars < want) {
		const char *p = pieces[rand_r(seed) % (sizeof(pieces) / sizeof(pieces[0]))];
		int pc = 0;
		const char *q;

		for (q = p; *q != '\0'; q++)
			pc += ((unsigned char)*q & 0xC0) != 0x80;
		if (chars + pc > want || len + strlen(p) + 1 > n) {
			if (chars < want && len + 2 <= n) {
				buf[len++] = 'x';
				buf[len] = '\0';
				chars++;
				continue;
			}
			break;
		}
		memcpy(buf + len, p, strlen(p) + 1);
		len += strlen(p);
		chars += pc;
	}
	/* no trailing space: keys are sent as they are, but keep them tidy */
	if (len > 0 && buf[len - 1] == ' ')
		buf[len - 1] = 'x';
	dot_parts_out(buf);
}

/* Every effect of the suite's property runs: id and stored key, in order. */
static json_t *
prop_keys(PGconn *c, const char *like)
{
	return qjson(c, "SELECT json_agg(json_build_array(id, provider_key, client_id::text,"
	             " idempotency_key, effect_type, target) ORDER BY id)::text"
	             " FROM effect_outbox WHERE idempotency_key LIKE $1", like, (char *)NULL);
}

START_TEST(test_property)
{
	PGconn *c = tl_pg_connect();
	struct tenant t[PROP_CLIENTS];
	struct dl_disp d;
	char like[96], key[1024];
	unsigned seed = (unsigned)getpid();
	json_t *before, *after, *row, *reqs, *req, *seen;
	size_t i, n, total = PROP_KEYS * PROP_CLIENTS;
	char *out = NULL;
	int k, j, rc;

	fprintf(stderr, "check_provider_key: property seed %u\n", seed);
	for (j = 0; j < PROP_CLIENTS; j++) {
		char tag[16];

		snprintf(tag, sizeof(tag), "p%d", j);
		tenant_add(c, &t[j], tag);
	}
	/* every key is used by every client; type and target vary by key */
	for (k = 0; k < PROP_KEYS; k++) {
		random_key(key, sizeof(key), &seed, k);
		for (j = 0; j < PROP_CLIENTS; j++) {
			if (k % 3 == 2)
				run_mail(&t[j], key, "kunde@shop.example");
			else /* a first attempt that fails before the provider acts */
				run_tag(&t[j], key, json_pack("[s, s]", "503", "ok"));
		}
	}
	snprintf(like, sizeof(like), "%s %%", tl_run);
	before = prop_keys(c, like);
	ck_assert_int_eq(json_array_size(before), total);

	/* no two alike, each as documented, at most 255 bytes, header-safe */
	seen = json_object();
	json_array_foreach(before, i, row) {
		const char *pk = json_string_value(json_array_get(row, 1));
		char *want = tl_provider_key(json_string_value(json_array_get(row, 2)),
		                             json_string_value(json_array_get(row, 3)),
		                             json_string_value(json_array_get(row, 4)),
		                             json_string_value(json_array_get(row, 5)), 0);

		ck_assert_msg(pk != NULL && strlen(pk) <= 255 && tl_header_safe(pk),
		              "provider key %s", pk ? pk : "(null)");
		ck_assert_msg(streq(pk, want), "stored %s, expected %s", pk, want);
		ck_assert_msg(json_object_get(seen, pk) == NULL, "provider key %s twice", pk);
		json_object_set_new(seen, pk, json_true());
		free(want);
	}
	json_decref(seen);

	/* send: a dispatcher that stops half-way, another that finishes */
	kill_switch_on();
	disp_start(&d, HTTP_IDEM);
	tl_sleep_ms(1500);
	disp_stop(&d);
	disp_start(&d, HTTP_IDEM);
	wait_all(c, tl_run, "completed", (long long)total, 120);
	disp_stop(&d);

	/* and the schema migrations once more */
	rc = tl_ctl(&out, "migrate", (char *)NULL);
	ck_assert_msg(rc == 0, "oncegatectl migrate: exit %d: %s", rc, out ? out : "");
	free(out);

	after = prop_keys(c, like);
	ck_assert_msg(json_equal(before, after), "stored provider keys changed on the way");

	/* every attempt carried the stored key: each crm.tag effect's key was
	 * POSTed twice (503, then ok), each mail went out once with the
	 * Message-ID derived from it */
	reqs = prov_requests("", "effect");
	json_array_foreach(after, i, row) {
		const char *pk = json_string_value(json_array_get(row, 1));
		const char *type = json_string_value(json_array_get(row, 4));
		size_t m;

		if (streq(type, "email.send")) {
			char mid[128];

			dl_message_id(pk, MAIL_DOMAIN, mid);
			ck_assert_msg(mails_with(mid) == 1, "%zu mails with Message-ID %s (key %s)",
			              mails_with(mid), mid, pk);
			continue;
		}
		n = 0;
		json_array_foreach(reqs, m, req)
			n += streq(req_key(req), pk);
		ck_assert_msg(n == 2, "the provider got %zu POSTs with key %s, expected 2", n, pk);
	}
	json_decref(reqs);
	json_decref(before);
	json_decref(after);
	for (j = 0; j < PROP_CLIENTS; j++)
		tenant_free(&t[j]);
	PQfinish(c);
}
END_TEST

/* ===== the same property for the outbox's function, over every field ===== */

/* Beyond what one run per key can vary through the API: types, targets
 * and slots too, and tuples built to meet where a naive key would (the
 * same readable form, a field boundary moved). The outbox's own function,
 * called as the enqueue calls it, against the documented form. */
START_TEST(test_property_fields)
{
	static const char *const types[] = { "crm.tag", "email.send", "ticket.update",
		                             "decision.callback", "approval.notify", "crm.tag/x" };
	static const char *const targets[] = { "demo_http", "demo_smtp", "callback", "crm-eu",
		                               "crm_eu", "demo" };
	static const struct {
		long long client;
		const char *key, *type, *target;
		int slot;
	} edge[] = {
		{ 1, "Заказ 1", "crm.tag", "demo_http", 0 }, /* readable "_1" ... */
		{ 1, "Счёт 1", "crm.tag", "demo_http", 0 },  /* ... the same */
		{ 1, "a/b", "c", "demo_http", 0 },           /* boundaries moved */
		{ 1, "a", "b/c", "demo_http", 0 },
		{ 1, "a", "b", "c/demo_http", 0 },
		{ 1, "a/b/c", "demo_http", "", 0 },
		{ 12, "3", "crm.tag", "demo_http", 0 },       /* client and key digits */
		{ 1, "23", "crm.tag", "demo_http", 0 },
		{ 1, "k", "crm.tag", "demo_http", 10 },       /* slot digits */
		{ 1, "k1", "crm.tag", "demo_http", 0 },
		{ 1, "k", "crm.tag", "demo_http", 1 },
	};
	unsigned seed = (unsigned)getpid() ^ 0x5eedu;
	json_t *seen = json_object();
	char key[1024], client[24], *tuple = NULL;
	size_t i, n = sizeof(edge) / sizeof(edge[0]);

	for (i = 0; i < n + 4000; i++) {
		long long cid;
		const char *k, *type, *target;
		int slot;
		char *pk, *again, *want;
		const char *prev;

		if (i < n) {
			cid = edge[i].client;
			k = edge[i].key;
			type = edge[i].type;
			target = edge[i].target;
			slot = edge[i].slot;
		} else {
			random_key(key, sizeof(key), &seed, (int)i);
			cid = 1 + rand_r(&seed) % 5;
			k = key;
			type = types[rand_r(&seed) % (sizeof(types) / sizeof(types[0]))];
			target = targets[rand_r(&seed) % (sizeof(targets) / sizeof(targets[0]))];
			slot = rand_r(&seed) % 4;
		}
		snprintf(client, sizeof(client), "%lld", cid);
		pk = outbox_provider_key(cid, k, type, target, slot);
		again = outbox_provider_key(cid, k, type, target, slot);
		want = tl_provider_key(client, k, type, target, slot);
		ck_assert_ptr_nonnull(pk);
		ck_assert_msg(strlen(pk) <= 255 && tl_header_safe(pk), "provider key %s", pk);
		ck_assert_msg(streq(pk, again), "computed twice: %s, then %s", pk, again);
		ck_assert_msg(streq(pk, want), "%s, documented form %s", pk, want);
		ck_assert_int_ge(asprintf(&tuple, "%s|%zu:%s|%s|%s|%d", client, strlen(k), k, type,
		                          target, slot), 0);
		prev = json_string_value(json_object_get(seen, pk));
		ck_assert_msg(prev == NULL || strcmp(prev, tuple) == 0,
		              "provider key %s for both (%s) and (%s)", pk, prev, tuple);
		json_object_set_new(seen, pk, json_string(tuple));
		free(tuple);
		free(pk);
		free(again);
		free(want);
	}
	json_decref(seen);
}
END_TEST

/* ===== a migration never moves a stored key ===== */

/* The sql_dir of the stack's config. */
static char *
conf_value(const char *conf, const char *name)
{
	char *text = tl_file_slurp(conf, NULL), *line, *save = NULL, *v = NULL;

	ck_assert_msg(text != NULL, "cannot read %s", conf);
	for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save))
		if (strncmp(line, name, strlen(name)) == 0 && strncmp(line + strlen(name), " = ", 3) == 0)
			v = strdup(line + strlen(name) + 3);
	free(text);
	ck_assert_msg(v != NULL, "%s has no %s", conf, name);
	return v;
}

static void
copy_file(const char *from, const char *to)
{
	char *text = tl_file_slurp(from, NULL);

	ck_assert_msg(text != NULL, "cannot read %s", from);
	write_file(to, text);
	free(text);
}

/* oncegatectl migrate with conf; its exit status. */
static int
migrate_with(const char *conf, char **out)
{
	char *cmd = NULL, *o;
	int rc;

	ck_assert_int_ge(asprintf(&cmd, "'%s' -c '%s' migrate 2>&1; echo \"exit=$?\"",
	                          tl_env("ONCEGATE_CTL"), conf), 0);
	o = tl_shell_output(cmd);
	free(cmd);
	ck_assert_ptr_nonnull(o);
	rc = strstr(o, "exit=0") != NULL ? 0 : 1;
	if (out != NULL)
		*out = o;
	else
		free(o);
	return rc;
}

START_TEST(test_migration_keeps_keys)
{
	PGconn *c = tl_pg_connect();
	char schema[64], dir[PATH_MAX], conf[PATH_MAX + 80];
	char from[PATH_MAX + NAME_MAX + 2], to[PATH_MAX + NAME_MAX + 2];
	char *sql_dir = conf_value(tl_env("ONCEGATE_CONF"), "sql_dir");
	char *db = conf_value(tl_env("ONCEGATE_CONF"), "database");
	char *out = NULL, *v;
	char key[256], old_key[300];
	const char *old_pk;
	struct dirent *de;
	DIR *dh;
	bool have_009 = false;

	snprintf(schema, sizeof(schema), "pkmig_%d", (int)getpid());
	snprintf(dir, sizeof(dir), "%s/sql-%s", g_tmp, schema);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	/* sql/001-008: the schema as the last release left it */
	dh = opendir(sql_dir);
	ck_assert_msg(dh != NULL, "cannot list %s", sql_dir);
	while ((de = readdir(dh)) != NULL) {
		if (strncmp(de->d_name, "009_", 4) == 0)
			have_009 = true;
		if (strlen(de->d_name) < 5 || strcmp(de->d_name + strlen(de->d_name) - 4, ".sql") != 0 ||
		    strncmp(de->d_name, "009", 3) >= 0)
			continue;
		snprintf(from, sizeof(from), "%s/%s", sql_dir, de->d_name);
		snprintf(to, sizeof(to), "%s/%s", dir, de->d_name);
		copy_file(from, to);
	}
	closedir(dh);
	ck_assert_msg(have_009, "%s has no migration 009_*.sql", sql_dir);

	/* the stack's config, on a schema of its own */
	{
		char *text = tl_file_slurp(tl_env("ONCEGATE_CONF"), NULL), *p;
		size_t dl = strlen(db);
		FILE *f;

		ck_assert_ptr_nonnull(text);
		snprintf(conf, sizeof(conf), "%s/%s.conf", g_tmp, schema);
		f = fopen(conf, "w");
		ck_assert_ptr_nonnull(f);
		/* database = "conninfo" → the same with the search path set */
		ck_assert_msg(dl >= 2 && db[0] == '"' && db[dl - 1] == '"', "database = %s", db);
		fprintf(f, "database = \"%.*s options='-csearch_path=%s'\"\nsql_dir = %s\n",
		        (int)(dl - 2), db + 1, schema, dir);
		/* everything else as it is (targets and the rest) */
		for (p = strtok(text, "\n"); p != NULL; p = strtok(NULL, "\n"))
			if (strncmp(p, "database =", 10) != 0 && strncmp(p, "sql_dir =", 9) != 0)
				fprintf(f, "%s\n", p);
		ck_assert_int_eq(fclose(f), 0);
		free(text);
	}
	{
		char sql[128];

		snprintf(sql, sizeof(sql), "CREATE SCHEMA %s", schema);
		qexec(c, sql, (char *)NULL);
		snprintf(sql, sizeof(sql), "SET search_path TO %s", schema);
		qexec(c, sql, (char *)NULL);
	}
	ck_assert_msg(migrate_with(conf, &out) == 0, "migrate 001-008: %s", out);
	free(out);

	/* two clients, one business key, the effects an earlier version wrote:
	 * "<run key>/<type>", the same for both */
	shared_key(key, sizeof(key), "migration");
	snprintf(old_key, sizeof(old_key), "%s/crm.tag", key);
	qexec(c, "INSERT INTO api_clients (name, key_hash) VALUES"
	      " ('old-a', sha256('a'::bytea)), ('old-b', sha256('b'::bytea))", (char *)NULL);
	qexec(c, "INSERT INTO workflow_runs (client_id, idempotency_key, payload_hash, payload,"
	      "    state, claim_started_at)"
	      " SELECT id, $1, 'sha256:00', '{}', 'approved', now() FROM api_clients",
	      key, (char *)NULL);
	qexec(c, "INSERT INTO effect_outbox (client_id, idempotency_key, effect_type, target,"
	      "    payload, payload_hash, provider_key, state, attempt, provider_id)"
	      " SELECT id, $1, 'crm.tag', 'demo_http', '{\"tag\":\"lead\"}', 'sha256:01', $2,"
	      "    CASE name WHEN 'old-a' THEN 'completed' ELSE 'unknown' END, 1,"
	      "    CASE name WHEN 'old-a' THEN 'prov-legacy' END"
	      "  FROM api_clients", key, old_key, (char *)NULL);

	/* sql/009, and migrate */
	snprintf(to, sizeof(to), "%s", dir);
	dh = opendir(sql_dir);
	while ((de = readdir(dh)) != NULL) {
		if (strncmp(de->d_name, "009_", 4) != 0)
			continue;
		snprintf(from, sizeof(from), "%s/%s", sql_dir, de->d_name);
		snprintf(to, sizeof(to), "%s/%s", dir, de->d_name);
		copy_file(from, to);
	}
	closedir(dh);
	ck_assert_msg(migrate_with(conf, &out) == 0, "migrate 009: %s", out);
	free(out);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE provider_key = $1"
	                      " AND slot = 0", old_key, (char *)NULL), 2);
	/* once more: nothing to apply, nothing moved */
	ck_assert_msg(migrate_with(conf, &out) == 0, "migrate again: %s", out);
	free(out);
	v = qstr(c, "SELECT string_agg(provider_key || ' ' || state, ',' ORDER BY client_id)"
	         "  FROM effect_outbox", (char *)NULL);
	ck_assert_ptr_nonnull(v);
	old_pk = old_key;
	{
		char want[700];

		snprintf(want, sizeof(want), "%s completed,%s unknown", old_pk, old_pk);
		ck_assert_str_eq(v, want);
	}
	free(v);
	/* one effect per (run, type, target, slot) */
	ck_assert_int_eq(qexec(c, "INSERT INTO effect_outbox (client_id, idempotency_key,"
	                       "    effect_type, target, payload_hash, provider_key, slot)"
	                       " SELECT id, $1, 'crm.tag', 'demo_http', 'sha256:02', 'k2', 1"
	                       "   FROM api_clients WHERE name = 'old-a'", key, (char *)NULL), 1);
	{
		const char *p[1] = { key };
		PGresult *res = PQexecParams(c, "INSERT INTO effect_outbox (client_id, idempotency_key,"
		                             "    effect_type, target, payload_hash, provider_key)"
		                             " SELECT id, $1, 'crm.tag', 'demo_http', 'sha256:03', 'k3'"
		                             "   FROM api_clients WHERE name = 'old-a'",
		                             1, NULL, p, NULL, NULL, 0);

		ck_assert_str_eq(PQresultErrorField(res, PG_DIAG_SQLSTATE) ?: "none", "23505");
		PQclear(res);
	}
	{
		char sql[128];

		snprintf(sql, sizeof(sql), "DROP SCHEMA %s CASCADE", schema);
		qexec(c, "RESET search_path", (char *)NULL);
		qexec(c, "SET client_min_messages = warning", (char *)NULL);
		qexec(c, sql, (char *)NULL);
	}
	free(sql_dir);
	free(db);
	PQfinish(c);
}
END_TEST

TL_SUITE(pkey_suite, "provider_key",
         {"provider_key", TEST_TIMEOUT_S, dl_tcase,
          .tests = TL_LIST(test_two_tenants_http, test_two_tenants_smtp, test_two_tenants_lookup,
                           test_property, test_property_fields, test_migration_keeps_keys)})

DL_SUITE_MAIN(.name = "check_provider_key", .prefix = "pk", .suite = pkey_suite,
              .http_stall_s = 30, .smtp = true)

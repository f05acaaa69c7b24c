/*
 * check_operator_paths.c — one event, at most one business effect, whatever
 * the caller and the operators do (integration; needs the stack of
 * ./dev check / ./dev test).
 *
 *  1. The gate's sample (approve_by_exception) is a CSPRNG draw kept on the
 *     run: not a function of the key (two API clients with the same keys,
 *     and the old offline SHA-256 predictor, disagree with it), not rolled
 *     again by a resubmitted output, rate 0 and 1 exact, logged and shown
 *     by explain.
 *  2. Replay and resume: a replayed run is never resumed (single and bulk),
 *     a run whose effect was resumed or may have been sent is replayed only
 *     with --force, a replay counts in the original's dead letter and names
 *     the new run there, and two operators racing on one run cannot both
 *     succeed (the run's row lock decides).
 *  3. Revoking the last approval link ends the run like an expiry, and
 *     tells the waiting workflow `expired`.
 *  4. oncegatectl cancel EFFECT: inside the window only, recorded and
 *     logged, the run failed like the API's cancel.
 *
 * The dispatcher's outcomes (a failed send, an unknown one, a dead letter)
 * are written as dispatch.c writes them, so each operator path starts from
 * a known state without waiting for real retries.
 */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <openssl/sha.h>

#include "testlib.h"

#define OPERATOR        tl_ctl_role() /* the role oncegatectl connects as: the operator recorded */
#define HALF_CONTRACT   "crm_tag_half"        /* tests/data/contracts-test: rate 0.5 */
#define NEVER_CONTRACT  "crm_tag_unsampled"   /* rate 0 */
#define ALWAYS_CONTRACT "crm_tag_sampled"     /* rate 1 */
#define PAIR_CONTRACT   "support_pair"        /* two approvers */
#define WINDOW_CONTRACT "support_window"      /* act_with_window, 600 s */
#define SAMPLE_RUNS     40
#define CALLBACK_URL    "http://127.0.0.1:5678/webhook-waiting/7f3c-opath"
#define TEST_TIMEOUT_S  240

static char g_tmp[256];
static const char *g_key_a;      /* tenant A (the stack's client) */
static char *g_key_b;            /* tenant B, sharing business keys with A */
static char g_client_b[96];

/* Long multilingual text, as support replies really are. */
static const char *const BODY =
	"Здравствуйте, Анна! Ваш заказ №4711 отправлен сегодня курьерской службой; "
	"трек-номер придёт отдельным письмом. 您的订单已于今天发货，预计三个工作日内送达。"
	"مرحباً، تم شحن طلبك اليوم وسيصل خلال ثلاثة أيام عمل. "
	"שלום, ההזמנה שלך נשלחה היום ותגיע תוך שלושה ימי עסקים. 📦🚚 "
	"If anything is missing, answer this mail and quote the order number.";

/* ---- API -------------------------------------------------------------------- */

static void
claim(const char *bearer, const char *key, struct tl_claimed *c)
{
	json_t *body = json_pack("{s:s, s:{s:s, s:s, s:[s,s]}, s:s, s:i}", "key", key, "payload",
	                         "contact", "c-4711", "note", "Анна Кузнецова / 王芳",
	                         "recipients", "anna@example.ru", "wang.fang@example.cn",
	                         "workflow_version", "opath@1", "lease_seconds", 60);

	tl_claim_body(bearer, body, c);
	json_decref(body);
}

static json_t *
model(void)
{
	return json_pack("{s:s, s:s, s:s}", "provider", "openai-compatible", "name",
	                 "qwen2.5-7b-instruct", "revision", "2024-09-19");
}

/* A confident crm_tag-shaped output: eligible by the rules. */
static void
post_tag(const char *bearer, const char *key, const struct tl_claimed *c, long long version,
         const char *contract, struct tl_resp *r)
{
	char *path = tl_run_path(key, "/output");
	json_t *body = json_pack(
		"{s:s, s:I, s:s, s:{s:s, s:f, s:s}, s:o, s:{s:s, s:s, s:{s:s}}, s:s, s:s}",
		"lease_owner", c->owner, "version", (json_int_t)version, "contract", contract,
		"output", "tag", "lead", "confidence", 0.97, "reason",
		"Asked twice for a quote for 40 seats — «нужен счёт до пятницы»",
		"model", model(), "effect", "type", "crm.tag", "target", "demo_http", "payload",
		"contact_id", "c-4711", "source_url", "https://crm.example/contact/4711",
		"requested_by", "agent.bot@example.com");

	tl_post_json(path, bearer, body, r);
	json_decref(body);
	free(path);
}

/* A support reply under contract; callback: the workflow's resume URL. */
static void
post_reply(const char *key, const struct tl_claimed *c, const char *contract, bool callback,
           struct tl_resp *r)
{
	char *path = tl_run_path(key, "/output");
	json_t *body = json_pack(
		"{s:s, s:I, s:s, s:{s:s, s:s, s:s, s:f}, s:o, s:{s:s, s:s, s:{s:s, s:i}}, s:s, s:s}",
		"lease_owner", c->owner, "version", (json_int_t)c->version, "contract", contract,
		"output", "subject", "Re: заказ №4711 / 订单 4711", "body", BODY, "tone", "friendly",
		"confidence", 0.84, "model", model(), "effect", "type", "email.send", "target",
		"demo_smtp", "payload", "to", "anna@example.ru", "ticket", 4711, "source_url",
		"https://crm.example/ticket/4711", "requested_by", "agent.bot@example.com");

	if (callback)
		json_object_set_new(body, "callback_url", json_string(CALLBACK_URL));
	tl_post_json(path, g_key_a, body, r);
	json_decref(body);
	free(path);
}

/* ---- database ---------------------------------------------------------------- */

/* The old rule: the first 53 bits of SHA-256(key) as a fraction. What an
 * attacker computes offline to pick keys that dodge the sample. */
static bool
sha_predicts_sampled(const char *key, double rate)
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	uint64_t x = 0;
	int i;

	SHA256((const unsigned char *)key, strlen(key), md);
	for (i = 0; i < 8; i++)
		x = x << 8 | md[i];
	return (double)(x >> 11) / 9007199254740992.0 < rate;
}

/* A run of tenant A approved by the rules, its crm.tag effect pending;
 * the effect's id in eid. */
static void
make_approved(PGconn *pc, const char *key, char *eid, size_t n)
{
	struct tl_claimed c;
	struct tl_resp r;
	char *id;

	claim(g_key_a, key, &c);
	post_tag(g_key_a, key, &c, c.version, NEVER_CONTRACT, &r);
	ASSERT_STATUS(&r, 202);
	ck_assert_str_eq(tl_jstr(r.json, "outcome"), "approved");
	tl_resp_free(&r);
	id = qstr(pc, "SELECT e.id FROM effect_outbox e JOIN api_clients a ON a.id = e.client_id"
	        " WHERE e.idempotency_key = $1 AND a.name = 'dev'", key, (char *)NULL);
	ck_assert_ptr_nonnull(id);
	snprintf(eid, n, "%s", id);
	free(id);
}

/* The dispatcher's part, as dispatch.c writes it: one send attempt, the
 * effect settled in `state`, and (failed, unknown) its dead letter.
 * sent: the attempt's request_sent ("true", "false", "\"unknown\""). */
static void
dispatcher_settles(PGconn *pc, const char *eid, const char *state, const char *sent)
{
	char ev[64];
	const char *cls = strcmp(state, "failed") == 0
	                      ? (strcmp(sent, "false") == 0 ? "transient" : "permanent")
	                  : strcmp(state, "unknown") == 0 ? "ambiguous"
	                                                  : "success";
	const char *p[4] = { eid, state, cls, ev };

	snprintf(ev, sizeof(ev), "{\"request_sent\": %s}", sent);
	tl_pg_exec(pc, "INSERT INTO effect_attempts (effect_id, kind, attempt, started_at,"
	           " duration_ms, dispatcher, classification, reason, status, evidence)"
	           " SELECT id, 'send', attempt + 1, now() - interval '1 s', 840, 'opath:1', $3,"
	           "   CASE $3 WHEN 'permanent' THEN 'http_422' WHEN 'transient' THEN"
	           "   'connect_refused' WHEN 'ambiguous' THEN 'timeout_after_send' ELSE 'http_2xx'"
	           "   END, CASE $3 WHEN 'permanent' THEN 422 WHEN 'success' THEN 200 END,"
	           "   $4::jsonb FROM effect_outbox WHERE id = $1::uuid AND $2::text IS NOT NULL",
	           4, p);
	tl_pg_exec(pc, "UPDATE effect_outbox SET state = $2, attempt = attempt + 1,"
	           " first_attempt_at = coalesce(first_attempt_at, now()), error_class = $3,"
	           " provider_id = CASE WHEN $2 = 'completed' THEN 'crm-evt-88123' END,"
	           " completed_at = CASE WHEN $2 = 'completed' THEN now() END, updated_at = now()"
	           " WHERE id = $1::uuid", 3, p);
	if (strcmp(state, "completed") == 0) {
		tl_pg_exec(pc, "UPDATE workflow_runs r SET state = 'completed', version = version + 1"
		           " FROM effect_outbox e WHERE e.id = $1::uuid AND r.client_id = e.client_id"
		           " AND r.idempotency_key = e.idempotency_key", 1, p);
		return;
	}
	tl_pg_exec(pc, "INSERT INTO dead_letters (effect_id, client_id, idempotency_key, component,"
	           " error_class, reason, evidence, next_action, retention_until)"
	           " SELECT id, client_id, idempotency_key, 'dispatcher',"
	           "   CASE $2 WHEN 'unknown' THEN 'unknown' ELSE 'permanent' END, $3,"
	           "   jsonb_build_object('event_id', id, 'attempt', attempt),"
	           "   'an operator decides', now() + interval '30 days'"
	           " FROM effect_outbox WHERE id = $1::uuid"
	           " ON CONFLICT (effect_id) DO UPDATE SET resolution = NULL", 3, p);
}

/* ---- oncegatectl ----------------------------------------------------------- */

/* oncegatectl ARGS... run under sudo by someone else than OPERATOR (the
 * database role, which is what is recorded); exit status, stdout in *out
 * (may be NULL), stderr merged into it for messages. */
static int
ctl(char **out, ...) __attribute__((sentinel));

static int
ctl(char **out, ...)
{
	/* a login name is no operator: the rows must name the role all the same */
	static const struct tl_ctl_how how = { .sudo_user = "nadia.petrova", .merge_stderr = true };
	va_list ap;
	int rc;

	va_start(ap, out);
	rc = tl_vctl(&how, out, ap);
	va_end(ap);
	ck_assert_msg(rc >= 0, "cannot run oncegatectl");
	return rc;
}

static bool
has(const char *hay, const char *needle)
{
	return hay != NULL && strstr(hay, needle) != NULL;
}

/* ===== 1. the gate's sample ================================================== */

/* Many runs at rate 0.5, the same keys under two tenants: the verdict
 * follows each run's recorded draw, and is not a function of the key. */
START_TEST(test_sample_is_a_draw_per_run)
{
	PGconn *pc = tl_pg_connect();
	int i, sampled = 0, predicted = 0, tenants_differ = 0, human[2];
	long off = tl_log_offset();
	json_t *lines;

	for (i = 0; i < SAMPLE_RUNS; i++) {
		char key[200], draw_s[2][64];
		int t;

		snprintf(key, sizeof(key), "%s-half-%02d:Кузнецова", tl_run, i);
		for (t = 0; t < 2; t++) {
			const char *bearer = t == 0 ? g_key_a : g_key_b;
			const char *client = t == 0 ? "dev" : g_client_b;
			const char *p[2] = { key, client };
			struct tl_claimed c;
			struct tl_resp r;
			char *d;
			double draw;

			claim(bearer, key, &c);
			post_tag(bearer, key, &c, c.version, HALF_CONTRACT, &r);
			ASSERT_STATUS(&r, 202);
			human[t] = strcmp(tl_jstr(r.json, "outcome"), "awaiting_human") == 0;
			ck_assert_msg(human[t] || strcmp(tl_jstr(r.json, "outcome"), "approved") == 0,
			              "%s", r.body);
			tl_resp_free(&r);
			d = tl_pg_value(pc, "SELECT r.sample_draw || ' ' || r.sample_rate"
			                " FROM workflow_runs r JOIN api_clients a ON a.id = r.client_id"
			                " WHERE r.idempotency_key = $1 AND a.name = $2", 2, p);
			ck_assert_msg(d != NULL, "no sample draw recorded on run %s of %s", key, client);
			snprintf(draw_s[t], sizeof(draw_s[t]), "%s", d);
			draw = strtod(d, NULL);
			ck_assert_msg(strtod(strchr(d, ' ') + 1, NULL) == 0.5, "rate recorded: %s", d);
			free(d);
			ck_assert_msg(draw >= 0 && draw < 1, "draw %f", draw);
			ck_assert_msg(human[t] == (draw < 0.5),
			              "run %s of %s: draw %f at rate 0.5 but outcome %s", key, client,
			              draw, human[t] ? "awaiting_human" : "approved");
			sampled += human[t];
			predicted += human[t] == sha_predicts_sampled(key, 0.5);
		}
		tenants_differ += human[0] != human[1];
		ck_assert_msg(strcmp(draw_s[0], draw_s[1]) != 0, "one key, two tenants, one draw");
	}
	/* 80 fair draws: outside these bounds with probability < 1e-6 */
	ck_assert_msg(sampled >= 20 && sampled <= 60, "%d of %d runs sampled at rate 0.5",
	              sampled, 2 * SAMPLE_RUNS);
	ck_assert_msg(predicted <= 2 * SAMPLE_RUNS - 10,
	              "an offline SHA-256 of the key predicted %d of %d verdicts", predicted,
	              2 * SAMPLE_RUNS);
	ck_assert_msg(tenants_differ >= 5,
	              "the same key under two tenants got different verdicts only %d of %d times",
	              tenants_differ, SAMPLE_RUNS);
	/* every gate line carries the draw */
	lines = tl_log_collect(off, NULL, NULL, 0);
	{
		size_t k, gate = 0, with_draw = 0;
		json_t *l;

		json_array_foreach(lines, k, l) {
			const char *ev = json_string_value(json_object_get(l, "event"));
			const char *det = json_string_value(json_object_get(l, "detail"));

			if (ev == NULL || strncmp(ev, "gate.", 5) != 0 ||
			    !has(json_string_value(json_object_get(l, "key")), "-half-"))
				continue;
			gate++;
			with_draw += has(det, "sample draw 0.") && has(det, "rate 0.5");
		}
		ck_assert_msg(gate == 2 * SAMPLE_RUNS && with_draw == gate,
		              "%zu gate lines, %zu with the sample draw", gate, with_draw);
	}
	json_decref(lines);
	PQfinish(pc);
}
END_TEST

/* A resubmitted output (here: the first try lost its lease) meets the
 * draw of the first try; explain shows it. */
START_TEST(test_sample_draw_kept)
{
	PGconn *pc = tl_pg_connect();
	char key[200], *d1, *d2, *out = NULL;
	struct tl_claimed c;
	struct tl_resp r;
	json_t *doc, *ap;
	bool human;
	int i;

	for (i = 0; i < 6; i++) {
		char name[32];

		snprintf(name, sizeof(name), "resubmit-%d", i);
		tl_mkkey(key, sizeof(key), name);
		claim(g_key_a, key, &c);
		post_tag(g_key_a, key, &c, c.version + 7, HALF_CONTRACT, &r);
		ASSERT_STATUS(&r, 409);
		tl_resp_free(&r);
		d1 = qstr(pc, "SELECT sample_draw::text FROM workflow_runs WHERE idempotency_key = $1",
		        key, (char *)NULL);
		ck_assert_msg(d1 != NULL, "the first try's draw was not kept");
		post_tag(g_key_a, key, &c, c.version, HALF_CONTRACT, &r);
		ASSERT_STATUS(&r, 202);
		human = strcmp(tl_jstr(r.json, "outcome"), "awaiting_human") == 0;
		tl_resp_free(&r);
		d2 = qstr(pc, "SELECT sample_draw::text FROM workflow_runs WHERE idempotency_key = $1",
		        key, (char *)NULL);
		ck_assert_msg(d2 != NULL && strcmp(d1, d2) == 0, "draw %s, then %s", d1, d2);
		ck_assert_msg(human == (strtod(d1, NULL) < 0.5), "draw %s, outcome human=%d", d1,
		              human);
		free(d1);
		free(d2);
	}
	/* explain: the draw, the rate and the verdict */
	ck_assert_int_eq(ctl(&out, "--json", "explain", key, (char *)NULL), 0);
	doc = json_loads(out, 0, NULL);
	ck_assert_msg(doc != NULL, "explain --json: %s", out);
	ap = json_object_get(doc, "approved");
	d1 = qstr(pc, "SELECT sample_draw::text FROM workflow_runs WHERE idempotency_key = $1", key, (char *)NULL);
	ck_assert_msg(fabs(json_real_value(json_object_get(ap, "sample_draw")) - strtod(d1, NULL)) <
	                  1e-12 &&
	                  json_real_value(json_object_get(ap, "sample_rate")) == 0.5 &&
	                  json_is_boolean(json_object_get(ap, "sampled")) &&
	                  has(tl_jstr(ap, "text"), "sample drew"),
	              "explain's approved answer: %s", out);
	free(d1);
	json_decref(doc);
	free(out);
	PQfinish(pc);
}
END_TEST

/* Rate 0 and rate 1 stay exact. */
START_TEST(test_sample_rate_zero_and_one)
{
	PGconn *pc = tl_pg_connect();
	int i;

	for (i = 0; i < 12; i++) {
		char key[200], name[32];
		struct tl_claimed c;
		struct tl_resp r;

		snprintf(name, sizeof(name), "rate%d-%d", i % 2, i);
		tl_mkkey(key, sizeof(key), name);
		claim(g_key_a, key, &c);
		post_tag(g_key_a, key, &c, c.version, i % 2 ? ALWAYS_CONTRACT : NEVER_CONTRACT, &r);
		ASSERT_STATUS(&r, 202);
		ck_assert_str_eq(tl_jstr(r.json, "outcome"), i % 2 ? "awaiting_human" : "approved");
		tl_resp_free(&r);
		ck_assert_int_eq(qnum(pc, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
		                    " AND sample_draw >= 0 AND sample_draw < 1", key, (char *)NULL), 1);
	}
	PQfinish(pc);
}
END_TEST

/* ===== 2. replay and resume ================================================== */

/* The path: replayed, then reconciled not delivered, then resume:
 * refused, single and bulk; the dead letter counts the replay and names
 * the new run. */
START_TEST(test_no_resume_after_replay)
{
	PGconn *pc = tl_pg_connect();
	char key[200], nkey[200], eid[64], path[512], *out = NULL, *v;
	FILE *f;
	long off;
	json_t *lines;

	tl_mkkey(key, sizeof(key), "replayed");
	tl_mkkey(nkey, sizeof(nkey), "replayed-v2");
	make_approved(pc, key, eid, sizeof(eid));
	/* the provider refused it (422): failed, dead letter */
	dispatcher_settles(pc, eid, "failed", "true");

	ck_assert_int_eq(ctl(&out, "replay", key, "--new-key", nkey, "--reason",
	                     "CRM-Kontakt korrigiert, neu taggen", (char *)NULL), 0);
	free(out);
	v = qstr(pc, "SELECT replay_count || ' ' || replayed_as || ' ' || resolution"
	       " FROM dead_letters WHERE effect_id = $1::uuid", eid, (char *)NULL);
	{
		char want[300];

		snprintf(want, sizeof(want), "1 %s replayed", nkey);
		ck_assert_msg(strcmp(v, want) == 0, "dead letter: \"%s\", want \"%s\"", v, want);
	}
	free(v);
	ck_assert_int_eq(ctl(&out, "--json", "deadletter", "show", eid, (char *)NULL), 0);
	ck_assert_msg(has(out, "\"replay_count\":1") && has(out, "\"replayed_as\":") &&
	              has(out, nkey) && has(out, "\"resolution\":\"replayed\""),
	              "deadletter show: %s", out);
	free(out);

	/* someone finds out at the provider that it never arrived */
	ck_assert_int_eq(ctl(&out, "reconcile", eid, "--not-delivered", "--reason",
	                     "провайдер подтвердил: не доставлено", (char *)NULL), 0);
	free(out);
	off = tl_log_offset();
	ck_assert_int_eq(ctl(&out, "resume", eid, "--reason", "send it now", (char *)NULL), 1);
	ck_assert_msg(has(out, "replayed as") && has(out, nkey), "resume refusal: %s", out);
	free(out);
	ck_assert_int_eq(qnum(pc, "SELECT count(*) FROM effect_outbox WHERE id = $1::uuid"
	                    " AND state = 'failed'", eid, (char *)NULL), 1);
	lines = tl_log_collect(off, tl_log_is_key, key, 1);
	{
		json_t *l = tl_log_find_event(lines, "operator.refused");

		ck_assert_msg(l != NULL && strcmp(tl_jstr(l, "error_class"), "replayed") == 0,
		              "no operator.refused line with error_class replayed");
	}
	json_decref(lines);

	/* bulk: the dry run says why, the real run refuses the whole selection */
	snprintf(path, sizeof(path), "%s/resume.sel", g_tmp);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "# from the night shift\n%s\n", eid);
	fclose(f);
	ck_assert_int_eq(ctl(&out, "--json", "resume", "--select", path, "--dry-run", (char *)NULL),
	                 1);
	ck_assert_msg(has(out, "replayed as"), "bulk dry run: %s", out);
	free(out);
	ck_assert_int_ne(ctl(&out, "resume", "--select", path, "--reason", "bulk after outage",
	                     "--rate", "100/s", (char *)NULL), 0);
	free(out);
	ck_assert_int_eq(qnum(pc, "SELECT count(*) FROM effect_outbox WHERE id = $1::uuid"
	                    " AND state = 'failed'", eid, (char *)NULL), 1);
	ck_assert_int_eq(qnum(pc, "SELECT count(*) FROM operator_actions WHERE effect_id = $1::uuid"
	                    " AND action = 'resume'", eid, (char *)NULL), 0);
	PQfinish(pc);
}
END_TEST

/* Resumed, then failed again: replay only with --force, recorded as
 * forced; an effect still pending is never replayed past. */
START_TEST(test_no_replay_after_resume)
{
	PGconn *pc = tl_pg_connect();
	char key[200], nkey[200], eid[64], *out = NULL;

	tl_mkkey(key, sizeof(key), "resumed");
	tl_mkkey(nkey, sizeof(nkey), "resumed-v2");
	make_approved(pc, key, eid, sizeof(eid));
	/* connection refused: known not delivered */
	dispatcher_settles(pc, eid, "failed", "false");
	ck_assert_int_eq(ctl(&out, "resume", eid, "--reason", "provider back up", (char *)NULL), 0);
	free(out);
	/* pending again: never, even with --force */
	ck_assert_int_eq(ctl(&out, "replay", key, "--new-key", nkey, "--reason", "fix",
	                     "--force", (char *)NULL), 1);
	ck_assert_msg(has(out, "pending"), "%s", out);
	free(out);
	/* and the resumed send failed again */
	dispatcher_settles(pc, eid, "failed", "false");
	ck_assert_int_eq(ctl(&out, "replay", key, "--new-key", nkey, "--reason", "fix",
	                     (char *)NULL), 1);
	ck_assert_msg(has(out, "resumed") && has(out, "--force"), "%s", out);
	free(out);
	ck_assert_int_eq(qnum(pc, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1",
	                    nkey, (char *)NULL), 0);
	ck_assert_int_eq(ctl(&out, "replay", key, "--new-key", nkey, "--reason",
	                     "customer asked again; the resumed tag is known lost", "--force",
	                     (char *)NULL), 0);
	free(out);
	ck_assert_int_eq(qnum(pc, "SELECT count(*) FROM operator_actions WHERE action = 'replay'"
	                    " AND idempotency_key = $1 AND (details->>'forced')::bool"
	                    " AND details->>'forced_past' LIKE '%resumed%'"
	                    " AND operator = $2", nkey, OPERATOR, (char *)NULL), 1);
	PQfinish(pc);
}
END_TEST

/* Unknown (it may have been sent) and sent: --force needed; bulk never
 * forces. */
START_TEST(test_no_replay_of_maybe_sent)
{
	PGconn *pc = tl_pg_connect();
	char k1[200], k2[200], n1[200], n2[200], e1[64], e2[64], path[512], *out = NULL;
	FILE *f;

	tl_mkkey(k1, sizeof(k1), "unknown");
	tl_mkkey(n1, sizeof(n1), "unknown-v2");
	tl_mkkey(k2, sizeof(k2), "sent");
	tl_mkkey(n2, sizeof(n2), "sent-v2");
	make_approved(pc, k1, e1, sizeof(e1));
	make_approved(pc, k2, e2, sizeof(e2));
	dispatcher_settles(pc, e1, "unknown", "\"unknown\"");
	dispatcher_settles(pc, e2, "completed", "true");

	ck_assert_int_eq(ctl(&out, "replay", k1, "--new-key", n1, "--reason", "fix", (char *)NULL),
	                 1);
	ck_assert_msg(has(out, "unknown") && has(out, "--force"), "%s", out);
	free(out);
	/* bulk: refused, and no run under the new key */
	snprintf(path, sizeof(path), "%s/replay.map", g_tmp);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "%s %s\n", k2, n2);
	fclose(f);
	ck_assert_int_ne(ctl(&out, "replay", "--map", path, "--reason", "bulk fix", "--rate",
	                     "100/s", (char *)NULL), 0);
	free(out);
	ck_assert_int_eq(ctl(&out, "replay", "--map", path, "--reason", "bulk fix", "--force",
	                     (char *)NULL), 2);
	free(out);
	ck_assert_int_eq(qnum(pc, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1",
	                    n2, (char *)NULL), 0);
	/* one key, forced: done, and the letter of the unknown effect names it */
	ck_assert_int_eq(ctl(&out, "replay", k1, "--new-key", n1, "--reason",
	                     "the provider lost it; we take the risk", "--force", (char *)NULL), 0);
	free(out);
	ck_assert_int_eq(qnum(pc, "SELECT count(*) FROM dead_letters WHERE effect_id = $1::uuid"
	                    " AND replay_count = 1 AND replayed_as IS NOT NULL", e1, (char *)NULL), 1);
	PQfinish(pc);
}
END_TEST

/* Two operators at once, one resuming and one replaying the same event:
 * the run's row lock lets exactly one of them through. */
START_TEST(test_resume_replay_race)
{
	PGconn *pc = tl_pg_connect(), *holder = tl_pg_connect();
	char key[200], nkey[200], eid[64], cmd[2][2048];
	const char *conf = tl_env("ONCEGATE_CONF"), *bin = tl_env("ONCEGATE_CTL");
	pid_t pid[2];
	int i, ok = 0, st;
	PGresult *res;
	const char *p[1];

	tl_mkkey(key, sizeof(key), "race");
	tl_mkkey(nkey, sizeof(nkey), "race-v2");
	make_approved(pc, key, eid, sizeof(eid));
	dispatcher_settles(pc, eid, "failed", "false"); /* both are allowed on their own */

	/* hold the run's row, start both, then let go */
	res = PQexec(holder, "BEGIN");
	PQclear(res);
	p[0] = key;
	res = PQexecParams(holder, "SELECT 1 FROM workflow_runs WHERE idempotency_key = $1"
	                   " FOR UPDATE", 1, NULL, p, NULL, NULL, 0);
	ck_assert_int_eq(PQresultStatus(res), PGRES_TUPLES_OK);
	PQclear(res);
	snprintf(cmd[0], sizeof(cmd[0]), "'%s' -c '%s' resume %s --reason racing "
	         ">/dev/null 2>&1", bin, conf, eid);
	snprintf(cmd[1], sizeof(cmd[1]), "'%s' -c '%s' replay '%s' --new-key '%s' --reason racing"
	         " >/dev/null 2>&1", bin, conf, key, nkey);
	for (i = 0; i < 2; i++) {
		pid[i] = fork();
		ck_assert_int_ge(pid[i], 0);
		if (pid[i] == 0) {
			execl("/bin/sh", "sh", "-c", cmd[i], (char *)NULL);
			_exit(127);
		}
	}
	tl_sleep_ms(1500);
	res = PQexec(holder, "COMMIT");
	PQclear(res);
	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(waitpid(pid[i], &st, 0), pid[i]);
		ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
	}
	ck_assert_msg(ok == 1, "%d of resume and replay succeeded on one event", ok);
	ck_assert_int_eq(qnum(pc, "SELECT count(*) FROM effect_outbox WHERE id = $1::uuid"
	                    " AND state = 'pending'", eid, (char *)NULL) +
	                 qnum(pc, "SELECT count(*) FROM run_replays WHERE original_key = $1", key, (char *)NULL),
	                 1);
	PQfinish(holder);
	PQfinish(pc);
}
END_TEST

/* ===== 3. every link revoked ================================================= */

START_TEST(test_revoke_last_link_ends_run)
{
	PGconn *pc = tl_pg_connect();
	char key[200], *out = NULL, *v;
	struct tl_claimed c;
	struct tl_resp r;
	const char *a1, *a2;
	long off;
	json_t *lines, *l, *approvals;

	tl_mkkey(key, sizeof(key), "revoked");
	claim(g_key_a, key, &c);
	post_reply(key, &c, PAIR_CONTRACT, true, &r);
	ASSERT_STATUS(&r, 202);
	approvals = json_incref(json_object_get(r.json, "approvals"));
	tl_resp_free(&r);
	ck_assert_uint_eq(json_array_size(approvals), 2);
	a1 = tl_jstr(json_array_get(approvals, 0), "approval_id");
	a2 = tl_jstr(json_array_get(approvals, 1), "approval_id");

	ck_assert_int_eq(ctl(&out, "approval", "revoke", a1, "--reason", "approver on leave",
	                     (char *)NULL), 0);
	free(out);
	ck_assert_int_eq(qnum(pc, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1"
	                    " AND state = 'awaiting_human'", key, (char *)NULL), 1);
	off = tl_log_offset();
	ck_assert_int_eq(ctl(&out, "approval", "revoke", a2, "--reason",
	                     "wrong recipient list — отозвано", (char *)NULL), 0);
	ck_assert_msg(has(out, "failed_terminal"), "%s", out);
	free(out);
	v = qstr(pc, "SELECT state || ' ' || error_class || ' ' || decision FROM workflow_runs"
	       " WHERE idempotency_key = $1", key, (char *)NULL);
	ck_assert_msg(v != NULL && strcmp(v, "failed_terminal approval_revoked expired") == 0,
	              "run: %s", v);
	free(v);
	ck_assert_int_eq(qnum(pc, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                    " AND effect_type = 'decision.callback' AND state = 'pending'"
	                    " AND payload->>'decision' = 'expired'"
	                    " AND payload->>'url' = '" CALLBACK_URL "'", key, (char *)NULL), 1);
	ck_assert_int_eq(qnum(pc, "SELECT count(*) FROM effect_outbox WHERE idempotency_key = $1"
	                    " AND effect_type = 'email.send'", key, (char *)NULL), 0);
	ck_assert_int_eq(qnum(pc, "SELECT count(*) FROM run_events WHERE idempotency_key = $1"
	                    " AND event = 'run.approval_revoked' AND state_to = 'failed_terminal'",
	                    key, (char *)NULL), 1);
	lines = tl_log_collect(off, tl_log_is_key, key, 3);
	l = tl_log_find_event(lines, "run.approval_revoked");
	ck_assert_msg(l != NULL && strcmp(tl_jstr(l, "state_to"), "failed_terminal") == 0 &&
	              strcmp(tl_jstr(l, "decision"), "expired") == 0,
	              "no run.approval_revoked line");
	ck_assert_ptr_nonnull(tl_log_find_event(lines, "effect.enqueued"));
	json_decref(lines);
	/* explain says why nobody decided */
	ck_assert_int_eq(ctl(&out, "explain", key, (char *)NULL), 0);
	ck_assert_msg(has(out, "every approval link was revoked"), "explain: %s", out);
	free(out);
	json_decref(approvals);
	PQfinish(pc);
}
END_TEST

/* ===== 4. cancel inside the window =========================================== */

static void
make_window(PGconn *pc, const char *key, char *eid, size_t n)
{
	struct tl_claimed c;
	struct tl_resp r;

	claim(g_key_a, key, &c);
	post_reply(key, &c, WINDOW_CONTRACT, false, &r);
	ASSERT_STATUS(&r, 202);
	ck_assert_str_eq(tl_jstr(r.json, "outcome"), "approved");
	ck_assert_ptr_nonnull(tl_jstr(r.json, "not_before"));
	snprintf(eid, n, "%s", tl_jstr(r.json, "effect_id"));
	tl_resp_free(&r);
	(void)pc;
}

START_TEST(test_cancel_in_window)
{
	PGconn *pc = tl_pg_connect();
	char k1[200], k2[200], k3[200], e1[64], e2[64], e3[64], *out = NULL, *v, *b2, *b3;
	struct tl_resp r;
	char *path;
	long off;
	json_t *lines;

	tl_mkkey(k1, sizeof(k1), "cancel");
	tl_mkkey(k2, sizeof(k2), "cancel-late");
	tl_mkkey(k3, sizeof(k3), "cancel-sending");
	make_window(pc, k1, e1, sizeof(e1));
	make_window(pc, k2, e2, sizeof(e2));
	make_window(pc, k3, e3, sizeof(e3));

	/* usage: a reason is required */
	ck_assert_int_eq(ctl(&out, "cancel", e1, (char *)NULL), 2);
	free(out);

	off = tl_log_offset();
	ck_assert_int_eq(ctl(&out, "--json", "cancel", e1, "--reason",
	                     "Kunde hat angerufen: Antwort nicht senden", (char *)NULL), 0);
	ck_assert_msg(has(out, "\"outcome\":\"cancelled\""), "%s", out);
	free(out);
	ck_assert_int_eq(qnum(pc, "SELECT count(*) FROM effect_outbox WHERE id = $1::uuid"
	                    " AND state = 'cancelled'", e1, (char *)NULL), 1);
	v = qstr(pc, "SELECT state || ' ' || error_class FROM workflow_runs WHERE idempotency_key = $1",
	       k1, (char *)NULL);
	ck_assert_msg(v != NULL && strcmp(v, "failed_terminal cancelled") == 0, "run: %s", v);
	free(v);
	ck_assert_int_eq(qnum(pc, "SELECT count(*) FROM operator_actions WHERE action = 'cancel'"
	                    " AND effect_id = $1::uuid AND operator = $2"
	                    " AND reason = 'Kunde hat angerufen: Antwort nicht senden'", e1, OPERATOR,
	                    (char *)NULL), 1);
	ck_assert_int_eq(qnum(pc, "SELECT count(*) FROM run_events WHERE idempotency_key = $1"
	                    " AND event = 'run.cancelled' AND actor = 'operator:' || $2", k1, OPERATOR,
	                    (char *)NULL), 1);
	lines = tl_log_collect(off, tl_log_is_key, k1, 2);
	ck_assert_ptr_nonnull(tl_log_find_event(lines, "effect.cancelled"));
	ck_assert_ptr_nonnull(tl_log_find_event(lines, "run.cancelled"));
	json_decref(lines);
	/* the owning client's cancel now finds nothing in a window */
	path = tl_run_path(k1, "/cancel");
	tl_post_text(path, g_key_a, "{\"reason\":\"too late\"}", &r);
	free(path);
	ASSERT_STATUS(&r, 409);
	tl_resp_free(&r);
	/* and a second cancel is refused */
	ck_assert_int_eq(ctl(&out, "cancel", e1, "--reason", "again", (char *)NULL), 1);
	free(out);

	/* after the window: refused, nothing changed */
	qexec(pc, "UPDATE effect_outbox SET not_before = now() - interval '1 s',"
	   " next_attempt_at = now() - interval '1 s' WHERE id = $1::uuid", e2, (char *)NULL);
	b2 = tl_run_snapshot(pc, k2);
	ck_assert_int_eq(ctl(&out, "cancel", e2, "--reason", "too late", (char *)NULL), 1);
	ck_assert_msg(has(out, "window") && has(out, "refused"), "%s", out);
	free(out);
	tl_expect_run_unchanged(pc, k2, b2, "a cancel after the window");

	/* being sent: refused */
	qexec(pc, "UPDATE effect_outbox SET state = 'sending', lease_owner = gen_random_uuid(),"
	   " lease_expires_at = now() + interval '30 s' WHERE id = $1::uuid", e3, (char *)NULL);
	b3 = tl_run_snapshot(pc, k3);
	ck_assert_int_eq(ctl(&out, "cancel", e3, "--reason", "stop it", (char *)NULL), 1);
	ck_assert_msg(has(out, "sending"), "%s", out);
	free(out);
	tl_expect_run_unchanged(pc, k3, b3, "a cancel while sending");
	/* hand it back, so no dispatcher of another suite finds a stale lease */
	qexec(pc, "UPDATE effect_outbox SET state = 'cancelled', lease_owner = NULL,"
	   " lease_expires_at = NULL WHERE id = $1::uuid", e3, (char *)NULL);
	qexec(pc, "UPDATE effect_outbox SET state = 'cancelled' WHERE id = $1::uuid", e2, (char *)NULL);
	free(b2);
	free(b3);
	PQfinish(pc);
}
END_TEST

TL_SUITE(paths_suite, "operator_paths",
         {"operator_paths", TEST_TIMEOUT_S,
          .tests = TL_LIST(test_sample_is_a_draw_per_run, test_sample_draw_kept,
                           test_sample_rate_zero_and_one, test_no_resume_after_replay,
                           test_no_replay_after_resume, test_no_replay_of_maybe_sent,
                           test_resume_replay_race, test_revoke_last_link_ends_run,
                           test_cancel_in_window)})

static bool
prepare(void)
{
	char tmpl[] = "/tmp/check_operator_paths.XXXXXX";

	g_key_a = tl_env("ONCEGATE_API_KEY");
	if (mkdtemp(tmpl) == NULL)
		return false;
	snprintf(g_tmp, sizeof(g_tmp), "%s", tmpl);
	snprintf(g_client_b, sizeof(g_client_b), "tenant-b-%s", tl_run);
	g_key_b = tl_client_add(g_client_b);
	if (g_key_b == NULL) {
		fprintf(stderr, "check_operator_paths: client add %s failed\n", g_client_b);
		return false;
	}
	return true;
}

static void
finish(void)
{
	free(g_key_b);
}

TL_STACK_MAIN(.name = "check_operator_paths", .prefix = "op",
              .needed = "ONCEGATE_API_KEY ONCEGATE_CTL", .suite = paths_suite,
              .prepare = prepare, .finish = finish)

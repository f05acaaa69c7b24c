/*
 * check_ops.c — integration suite of the operator's repair commands: dead letters and their evidence, reconcile, resume,
 * reject and approval revoke, the kill switch's record and bulk resume
 * (dry run, rate, stop half-way, continue, each effect sent once),
 * through oncegatectl against the stack that
 * `./dev test` starts, with oncegate-dispatch and the loopback HTTP
 * provider doing the sending. Without ONCEGATE_URL or ONCEGATE_DISPATCH the
 * suite is skipped (exit 77).
 *
 * Like check_dispatch, each test starts the dispatcher it needs with its
 * own config (targets o_*) and decision log in the suite's temporary
 * directory, and stops it by PID; the HTTP provider is started once by
 * main(). Work is created as the responder and the dispatcher leave it: a
 * run in `approved`, effects in the outbox — and, for "the dispatcher died
 * before its request went out", an effect still `sending` under a lease
 * that has run out, which the dispatcher's housekeeping makes `unknown`.
 * Keys carry a per-run prefix ("op<epoch>-<pid>").
 *
 * What each test asserts is what an operator relies on: what the provider
 * received (its own record), the rows before and after, the JSON and the
 * text the commands print, their exit codes, and the decision log that
 * oncegatectl writes ($ONCEGATE_LOG). Every refusal is checked to change
 * nothing: the rows it could touch are compared before and after.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "db.h"
#include "deadletter.h"
#include "dispatchlib.h"
#include "testlib.h"

#define STALL_S         60
#define TEST_TIMEOUT_S  120
#define OPERATOR        tl_ctl_role() /* the role oncegatectl connects as: the operator recorded */

static const char *g_key_dev;
static char g_client[24];         /* id of client "dev" */
static int g_closed_port;
static int g_flaky_port;          /* o_flaky's port: 0 = nobody listens */

#define JSTR(o, n) (tl_jstr((o), (n)) ? tl_jstr((o), (n)) : "(none)")








/* ---- runs and effects ------------------------------------------------------ */

/* A run as the responder leaves it once its effect may go out: approved,
 * with the event's ids, versions and contract a dead letter must carry. */
static void
make_run(PGconn *c, const char *key)
{
	dl_make_run(c, g_client, key, "ops-suite@3", "support_reply", NULL);
}

/* One effect of run `key`: state 'pending' (due now), or 'sending' under
 * a lease that ran out — what a dispatcher that died before its request
 * went out leaves behind. Its id in id[40]. */
static void
add_effect(PGconn *c, const char *key, const char *type, const char *target,
           const char *payload, bool dead_sender, char id[40])
{
	/* one transaction: no dispatcher sees it pending first */
	qexec(c, "BEGIN", (char *)NULL);
	dl_add_effect(c, g_client, key, type, target, payload, 0, id);
	if (dead_sender)
		ck_assert_int_eq(qexec(c, "UPDATE effect_outbox SET state = 'sending',"
		                          "    lease_owner = gen_random_uuid(),"
		                          "    lease_expires_at = now() - interval '1 second',"
		                          "    attempt = 1,"
		                          "    first_attempt_at = now() - interval '5 seconds'"
		                          " WHERE id = $1::uuid", id, (char *)NULL),
		                 1);
	qexec(c, "COMMIT", (char *)NULL);
	qexec(c, "NOTIFY oncegate_outbox", (char *)NULL);
}

/* Polls until the effect has a dead letter. */
static json_t *
wait_dead_letter(PGconn *c, const char *effect, double secs)
{
	double deadline = tl_now() + secs;
	json_t *dl;

	while ((dl = dl_dead_letter_of(c, effect)) == NULL && tl_now() < deadline)
		tl_sleep_ms(100);
	ck_assert_msg(dl != NULL, "effect %s has no dead letter after %.0f s", effect, secs);
	return dl;
}

/* Everything a repair of run `key` could touch, as one JSON text: the run,
 * its effects, their attempts and dead letters, its approvals, its events
 * and the operator actions about it. Equal before and after = nothing
 * changed. */
static char *
snapshot(PGconn *c, const char *key)
{
	char *s = qstr(c,
	        "SELECT json_build_object("
	        " 'run', (SELECT row_to_json(r) FROM workflow_runs r"
	        "          WHERE client_id = $1::bigint AND idempotency_key = $2),"
	        " 'effects', (SELECT json_agg(e ORDER BY e.id) FROM effect_outbox e"
	        "          WHERE client_id = $1::bigint AND idempotency_key = $2),"
	        " 'attempts', (SELECT json_agg(a ORDER BY a.id) FROM effect_attempts a"
	        "          JOIN effect_outbox e ON e.id = a.effect_id"
	        "          WHERE e.client_id = $1::bigint AND e.idempotency_key = $2),"
	        " 'letters', (SELECT json_agg(d ORDER BY d.id) FROM dead_letters d"
	        "          WHERE client_id = $1::bigint AND idempotency_key = $2),"
	        " 'approvals', (SELECT json_agg(json_build_object('id', a.id, 'state', a.state,"
	        "          'decision', a.decision, 'consumed_at', a.consumed_at) ORDER BY a.id)"
	        "          FROM approvals a WHERE client_id = $1::bigint AND idempotency_key = $2),"
	        " 'events', (SELECT json_agg(v ORDER BY v.id) FROM run_events v"
	        "          WHERE client_id = $1::bigint AND idempotency_key = $2),"
	        " 'actions', (SELECT json_agg(o ORDER BY o.id) FROM operator_actions o"
	        "          WHERE (client_id = $1::bigint AND idempotency_key = $2)"
	        "             OR effect_id IN (SELECT id FROM effect_outbox"
	        "                 WHERE client_id = $1::bigint AND idempotency_key = $2)))::text",
	        g_client, key, (char *)NULL);

	ck_assert_ptr_nonnull(s);
	return s;
}

static long long
actions_of(PGconn *c, const char *key, const char *action)
{
	return qnum(c, "SELECT count(*) FROM operator_actions WHERE client_id = $1::bigint"
	            " AND idempotency_key = $2 AND action = $3", g_client, key, action, (char *)NULL);
}

/* ---- oncegatectl, with its stderr ------------------------------------------- */

/* Runs a command that must succeed; returns its stdout. */
#define CTL_OK(outp, ...)                                                              \
	do {                                                                           \
		char *e_ = NULL;                                                       \
		int rc_ = tl_ctl_err((outp), &e_, __VA_ARGS__, (char *)NULL);                 \
		ck_assert_msg(rc_ == 0, "oncegatectl exit %d: %s%s", rc_, e_, *(outp)); \
		free(e_);                                                              \
	} while (0)

static bool
is_event(const json_t *line, const void *ev)
{
	return streq(tl_jstr(line, "event"), ev);
}

/* The one decision-log line of event ev written after offset (a new
 * reference); fails unless there is exactly one. */
static json_t *
log_one(long offset, const char *ev)
{
	json_t *lines = tl_log_collect(offset, is_event, ev, 1), *l;
	char *all;

	if (json_array_size(lines) != 1) {
		all = tl_json_text(lines);
		ck_abort_msg("%zu lines of %s in the decision log, expected 1: %s",
		             json_array_size(lines), ev, all);
	}
	l = json_incref(json_array_get(lines, 0));
	json_decref(lines);
	return l;
}

/* A refusal: exit code `want_exit`, stderr names it (and says nothing was
 * changed) and contains `says`, run `key`'s rows are unchanged, and one
 * operator.refused line with error_class `code` and the operator. */
#define REFUSED(c, key, want_exit, says, code, ...)                                    \
	do {                                                                           \
		char *b_ = snapshot((c), (key)), *a_, *o_ = NULL, *e_ = NULL;          \
		long off_ = tl_log_offset();                                           \
		int rc_ = tl_ctl_err(&o_, &e_, __VA_ARGS__, (char *)NULL);                    \
		json_t *l_;                                                            \
		ck_assert_msg(rc_ == (want_exit), "exit %d, expected %d; stderr: %s",  \
		              rc_, (want_exit), e_);                                   \
		ck_assert_msg(strstr(e_, (says)) != NULL && strstr(e_, "refused") != NULL \
		              && strstr(e_, "Nothing was changed") != NULL,            \
		              "stderr does not say \"%s\", refused and that nothing was " \
		              "changed: %s", (says), e_);                              \
		a_ = snapshot((c), (key));                                             \
		ck_assert_msg(strcmp(b_, a_) == 0, "a refusal changed rows:\n before %s\n" \
		              " after  %s", b_, a_);                                   \
		l_ = log_one(off_, "operator.refused");                                \
		ck_assert_str_eq(JSTR(l_, "error_class"), (code));                     \
		/* the operator is the database role: a usage error never connects */ \
		if ((want_exit) != 2)                                                  \
			ck_assert_str_eq(JSTR(l_, "actor"), OPERATOR);                 \
		else                                                                   \
			ck_assert_ptr_null(tl_jstr(l_, "actor"));                      \
		ck_assert_msg(strstr(JSTR(l_, "detail"), (says)) != NULL,              \
		              "log detail: %s", JSTR(l_, "detail"));                   \
		json_decref(l_);                                                       \
		free(b_);                                                              \
		free(a_);                                                              \
		free(o_);                                                              \
		free(e_);                                                              \
	} while (0)

/* ---- the dispatcher ----------------------------------------------------------- */

/* The suite's dispatchers (dispatchlib's), with the suite's targets. */
static void
disp_start(struct dl_disp *d)
{
	struct dl_conf c;
	FILE *f;
	int P = g_http_port;

	dl_conf_open(&c, d);
	f = c.f;
	fputs("retention_days = 7\n\n", f);
	/* honours Idempotency-Key; a 4xx is permanent */
	fprintf(f, "[target o_idem]\nkind = http\nurl = http://127.0.0.1:%d/idem/effects\n"
	        "idempotency_key = 1\nprovider_id_header = X-Provider-Id\ntimeout_ms = 5000\n"
	        "max_attempts = 3\nbase_ms = 100\ncap_ms = 1000\njitter_percent = 0\n\n", P);
	/* no keys, no lookup URL: an ambiguous outcome waits for an operator */
	fprintf(f, "[target o_plain]\nkind = http\nurl = http://127.0.0.1:%d/plain/effects\n"
	        "idempotency_key = 0\nprovider_id_header = X-Provider-Id\ntimeout_ms = 1500\n"
	        "max_attempts = 3\nbase_ms = 100\ncap_ms = 1000\njitter_percent = 0\n\n", P);
	/* nobody listens: every attempt is refused before anything is sent */
	fprintf(f, "[target o_refused]\nkind = http\nurl = http://127.0.0.1:%d/effects\n"
	        "idempotency_key = 0\nconnect_timeout_ms = 1000\ntimeout_ms = 2000\n"
	        "max_attempts = 2\nbase_ms = 100\ncap_ms = 500\njitter_percent = 0\n\n",
	        g_closed_port);
	/* down (nobody listens) until a test brings it back (g_flaky_port) */
	fprintf(f, "[target o_flaky]\nkind = http\nurl = http://127.0.0.1:%d/idem/effects\n"
	        "idempotency_key = 1\nprovider_id_header = X-Provider-Id\n"
	        "connect_timeout_ms = 1000\ntimeout_ms = 5000\nmax_attempts = 2\nbase_ms = 100\n"
	        "cap_ms = 500\njitter_percent = 0\n",
	        g_flaky_port > 0 ? g_flaky_port : g_closed_port);
	dl_conf_start(&c, d, ENV_TRUE);
}

static void
disp_stop(struct dl_disp *d)
{
	dl_disp_stop(d, 20);
}

/* ---- the fixture ---------------------------------------------------------------- */

static void
setup(void)
{
	proc_sweep();
}

static void
teardown(void)
{
	proc_sweep();
}

/* A JSON member that must be a non-empty string. */
static void
must_str(const json_t *o, const char *name, const char *what)
{
	const char *v = tl_jstr(o, name);
	char *all;

	if (v == NULL || *v == '\0') {
		all = tl_json_text(o);
		ck_abort_msg("%s: \"%s\" is missing or empty in %s", what, name, all);
	}
}

/* ===== 1. a dead letter holds the whole evidence ================================ */

START_TEST(test_dead_letter_evidence)
{
	PGconn *c = tl_pg_connect();
	struct dl_disp d;
	char key[200], pk[256], id[40], corr[256];
	char *out = NULL, *dlid;
	json_t *dl, *ev, *atts, *a, *doc, *env, *list, *o, *l;
	size_t i;
	bool seen;
	long off;

	tl_mkkey(key, sizeof(key), "evidence");
	snprintf(pk, sizeof(pk), "%s/ticket.update", key);
	snprintf(corr, sizeof(corr), "corr-%s", key);
	make_run(c, key);
	/* the provider refuses it: 422, a permanent failure after the send */
	add_effect(c, key, "ticket.update", "o_idem", "{\"ticket\":42,\"fault\":\"422\"}", false, id);
	dl_sends(true);
	disp_start(&d);
	DL_EXPECT_EFFECT(c, id, "failed", 15);
	dl = wait_dead_letter(c, id, 5);
	disp_stop(&d);
	ck_assert_int_eq(prov_count(pk, "effect"), 1);

	/* The record itself, item by item as the dead-letter record is defined. */
	dlid = strdup(JSTR(dl, "id"));
	ck_assert_str_eq(JSTR(dl, "component"), "dispatcher");
	ck_assert_str_eq(JSTR(dl, "error_class"), "permanent");
	must_str(dl, "reason", "dead letter");
	must_str(dl, "next_action", "dead letter");
	ck_assert_str_eq(JSTR(dl, "idempotency_key"), key);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM dead_letters WHERE id = $1::uuid"
	                      " AND retention_until > now() + interval '6 days'", dlid, (char *)NULL),
	                 1);
	ck_assert_int_eq(json_integer_value(json_object_get(dl, "replay_count")), 0);
	ck_assert_msg(json_is_null(json_object_get(dl, "resolution")), "a new letter is resolved");
	ev = json_object_get(dl, "evidence");
	/* the run names no upstream event id: its correlation id stands for it */
	ck_assert_str_eq(JSTR(ev, "event_id"), corr);
	ck_assert_str_eq(JSTR(ev, "correlation_id"), corr);
	ck_assert_str_eq(JSTR(ev, "workflow_version"), "ops-suite@3");
	ck_assert_str_eq(JSTR(ev, "contract"), "support_reply");
	must_str(ev, "contract_hash", "evidence");
	must_str(ev, "payload_hash", "evidence");
	must_str(ev, "payload_ref", "evidence");
	ck_assert_str_eq(JSTR(ev, "idempotency_key"), key);
	ck_assert_str_eq(JSTR(ev, "provider_key"), pk);
	ck_assert_str_eq(JSTR(ev, "ledger_state"), "approved");
	atts = json_object_get(ev, "attempts");
	ck_assert_int_eq(json_array_size(atts), 1);
	a = json_array_get(atts, 0);
	ck_assert_int_eq(json_integer_value(json_object_get(a, "status")), 422);
	ck_assert_str_eq(JSTR(a, "classification"), "permanent");
	ck_assert_msg(json_is_object(json_object_get(json_object_get(a, "evidence"), "headers")),
	              "no selected headers in the attempt's evidence: %s", tl_json_text(a));
	ck_assert_msg(strstr(JSTR(json_object_get(a, "evidence"), "body_excerpt"),
	                     "unprocessable") != NULL, "no body excerpt: %s", tl_json_text(a));
	ck_assert_msg(json_is_true(json_object_get(json_object_get(a, "evidence"), "request_sent")),
	              "request_sent is not true: %s", tl_json_text(a));

	/* `show`, for people: every item on its line. */
	CTL_OK(&out, "deadletter", "show", dlid);
	{
		static const char *const labels[] = {
			"dead letter", "event id", "correlation id", "workflow", "contract", "payload",
			"idempotency key", "ledger state", "failed", "owner", "next action",
			"retention until", "replay count", "resolution", "attempts (1)",
			"last target evidence", "body excerpt", "operator actions (0)",
		};
		const char *const values[] = {
			dlid, id, corr, "ops-suite@3", "support_reply", pk, "dispatcher", "permanent",
			"422", "unprocessable", "client:dev", "open", "effect_outbox/",
		};

		for (i = 0; i < sizeof(labels) / sizeof(labels[0]); i++)
			ck_assert_msg(strstr(out, labels[i]) != NULL, "show has no \"%s\": %s",
			              labels[i], out);
		for (i = 0; i < sizeof(values) / sizeof(values[0]); i++)
			ck_assert_msg(strstr(out, values[i]) != NULL, "show does not say %s: %s",
			              values[i], out);
	}
	free(out);

	/* `--json show`, for scripts, by the effect's id: it parses and holds
	 * the same, plus the recovery envelope. */
	CTL_OK(&out, "--json", "deadletter", "show", id);
	doc = json_loads(out, 0, NULL);
	ck_assert_msg(doc != NULL, "deadletter show --json is not JSON: %s", out);
	free(out);
	ck_assert_str_eq(JSTR(doc, "dead_letter_id"), dlid);
	ck_assert_str_eq(JSTR(doc, "event_id"), corr);
	ck_assert_str_eq(JSTR(doc, "correlation_id"), corr);
	ck_assert_str_eq(JSTR(doc, "workflow_version"), "ops-suite@3");
	ck_assert_str_eq(JSTR(doc, "contract"), "support_reply");
	ck_assert_str_eq(JSTR(doc, "component"), "dispatcher");
	ck_assert_str_eq(JSTR(doc, "error_class"), "permanent");
	ck_assert_str_eq(JSTR(doc, "key"), key);
	ck_assert_str_eq(JSTR(doc, "provider_key"), pk);
	ck_assert_str_eq(JSTR(doc, "ledger_state"), "approved");
	ck_assert_str_eq(JSTR(doc, "owner"), "client:dev");
	/* who approved the effect: here the contract's rules */
	ck_assert_str_eq(JSTR(doc, "approved_by"), "gate:auto");
	ck_assert_str_eq(JSTR(json_object_get(doc, "decision"), "decision"), "auto");
	ck_assert_str_eq(JSTR(doc, "state"), "open");
	must_str(doc, "payload_hash", "show --json");
	must_str(doc, "payload_ref", "show --json");
	must_str(doc, "next_action", "show --json");
	must_str(doc, "retention_until", "show --json");
	ck_assert_msg(json_is_integer(json_object_get(doc, "replay_count")) &&
	              json_object_get(doc, "resolution") != NULL, "replay_count / resolution");
	ck_assert_int_eq(json_integer_value(json_object_get(
		json_array_get(json_object_get(doc, "attempts"), 0), "status")), 422);
	ck_assert_msg(json_is_false(json_object_get(json_object_get(doc, "effect"),
	                                            "known_undelivered")),
	              "a 422 after the send is called known undelivered");
	env = json_object_get(doc, "envelope");
	{
		static const char *const keys[] = {
			"event_id", "correlation_id", "operation", "idempotency_key", "payload_hash",
			"attempt", "max_attempts", "classification", "next_attempt_at",
			"workflow_version", "status",
		};

		for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
			ck_assert_msg(json_object_get(env, keys[i]) != NULL, "envelope has no %s: %s",
			              keys[i], tl_json_text(env));
		ck_assert_str_eq(JSTR(env, "idempotency_key"), pk);
		ck_assert_int_eq(json_integer_value(json_object_get(env, "max_attempts")), 3);
		ck_assert_str_eq(JSTR(env, "status"), "failed");
	}
	json_decref(doc);

	/* `list` with its filters and age. */
	CTL_OK(&out, "--json", "deadletter", "list", "--since", "1h", "--class", "permanent",
	       "--target", "o_idem", "--state", "open");
	list = json_loads(out, 0, NULL);
	ck_assert_msg(json_is_array(list), "deadletter list --json: %s", out);
	free(out);
	seen = false;
	json_array_foreach(list, i, o)
		if (streq(tl_jstr(o, "dead_letter_id"), dlid)) {
			seen = true;
			ck_assert_msg(json_integer_value(json_object_get(o, "age_seconds")) >= 0 &&
			              json_integer_value(json_object_get(o, "age_seconds")) < 3600,
			              "age: %s", tl_json_text(o));
			ck_assert_str_eq(JSTR(o, "effect_id"), id);
		}
	ck_assert_msg(seen, "the letter is not in the filtered list");
	json_decref(list);
	{
		static const char *const other[][2] = {
			{ "--class", "unknown" }, { "--target", "o_plain" }, { "--state", "resolved" },
		};

		for (i = 0; i < 3; i++) {
			CTL_OK(&out, "--json", "deadletter", "list", other[i][0], other[i][1]);
			ck_assert_msg(strstr(out, dlid) == NULL, "%s %s lists the letter", other[i][0],
			              other[i][1]);
			free(out);
		}
	}
	CTL_OK(&out, "deadletter", "list", "--since", "2000-01-01T00:00:00Z");
	ck_assert_msg(strstr(out, dlid) != NULL && strstr(out, "AGE") != NULL, "list: %s", out);
	free(out);

	/* a person takes the letter over from the client */
	off = tl_log_offset();
	CTL_OK(&out, "--json", "deadletter", "assign", dlid, "--to", "Zoë Ødegård <zoe@example.org>",
	       "--reason", "Ночная смена берёт — 夜班接手 — משמרת לילה");
	doc = json_loads(out, 0, NULL);
	ck_assert_msg(doc != NULL, "assign --json: %s", out);
	free(out);
	ck_assert_str_eq(JSTR(doc, "owner"), "Zoë Ødegård <zoe@example.org>");
	ck_assert_str_eq(JSTR(doc, "was"), "client:dev");
	ck_assert_str_eq(JSTR(doc, "assigned_by"), OPERATOR);
	json_decref(doc);
	CTL_OK(&out, "--json", "deadletter", "show", id);
	doc = json_loads(out, 0, NULL);
	free(out);
	ck_assert_str_eq(JSTR(doc, "owner"), "Zoë Ødegård <zoe@example.org>");
	json_decref(doc);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM operator_actions WHERE effect_id = $1::uuid"
	                      " AND action = 'deadletter.assigned' AND operator = $2"
	                      " AND details->>'was' = 'client:dev'", id, OPERATOR, (char *)NULL), 1);
	l = log_one(off, "deadletter.assigned");
	ck_assert_str_eq(JSTR(l, "actor"), OPERATOR);
	ck_assert_str_eq(JSTR(l, "effect_id"), id);
	json_decref(l);
	/* without --to or --reason, or for no letter: refused, nothing changed */
	ck_assert_int_eq(tl_ctl(NULL, "deadletter", "assign", dlid, "--reason", "x", (char *)NULL), 2);
	ck_assert_int_eq(tl_ctl(NULL, "deadletter", "assign", dlid, "--to", "bob", (char *)NULL), 2);
	ck_assert_int_eq(tl_ctl(NULL, "deadletter", "assign", "00000000-0000-4000-8000-000000000000",
	                        "--to", "bob", "--reason", "x", (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM dead_letters WHERE id = $1::uuid"
	                      " AND owner = 'Zoë Ødegård <zoe@example.org>'", dlid, (char *)NULL), 1);

	/* resume: the request reached the provider, so it is refused */
	REFUSED(c, key, 1, "not known undelivered", "not_known_undelivered", "resume", id,
	        "--reason", "customer asked again");

	/* reject: terminal; the run fails, the letter is resolved */
	off = tl_log_offset();
	CTL_OK(&out, "reject", id, "--reason", "ticket closed by hand");
	free(out);
	DL_EXPECT_EFFECT(c, id, "cancelled", 0);
	{
		char *st = dl_run_state(c, g_client, key);

		ck_assert_str_eq(st, "failed_terminal");
		free(st);
	}
	json_decref(dl);
	dl = dl_dead_letter_of(c, id);
	ck_assert_str_eq(JSTR(dl, "resolution"), "rejected");
	ck_assert_str_eq(JSTR(dl, "resolved_by"), OPERATOR);
	/* its history: the one resolution, with who and when */
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM dead_letters WHERE id = $1::uuid"
	                      " AND jsonb_array_length(resolutions) = 1"
	                      " AND resolutions->0->>'resolution' = 'rejected'"
	                      " AND resolutions->0->>'by' = $2 AND resolutions->0 ? 'at'",
	                      dlid, OPERATOR, (char *)NULL), 1);
	/* a letter a replay answered stays replayed: what is learnt about the
	 * original effect later is added to its history, never written over
	 * it (deadletter_resolve, as reconcile calls it) */
	{
		struct db *db = db_new("", 10000);
		char ids[48];

		ck_assert_ptr_nonnull(db);
		snprintf(ids, sizeof(ids), "{%s}", id);
		qexec(c, "UPDATE dead_letters SET resolution = 'replayed' WHERE id = $1::uuid", dlid,
		      (char *)NULL);
		ck_assert_int_eq(deadletter_resolve(db, ids, "not_delivered"), DB_OK);
		db_free(db);
		ck_assert_int_eq(qnum(c, "SELECT count(*) FROM dead_letters WHERE id = $1::uuid"
		                      " AND resolution = 'replayed' AND jsonb_array_length(resolutions) = 2"
		                      " AND resolutions->1->>'resolution' = 'not_delivered'",
		                      dlid, (char *)NULL), 1);
	}
	ck_assert_int_eq(actions_of(c, key, "reject"), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM operator_actions WHERE effect_id = $1::uuid"
	                      " AND operator = $2 AND reason = 'ticket closed by hand'",
	                      id, OPERATOR, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM run_events WHERE client_id = $1::bigint"
	                      " AND idempotency_key = $2 AND event = 'run.rejected_by_operator'"
	                      " AND actor = 'operator:' || $3", g_client, key, OPERATOR,
	                      (char *)NULL), 1);
	l = log_one(off, "effect.rejected");
	ck_assert_str_eq(JSTR(l, "actor"), OPERATOR);
	ck_assert_str_eq(JSTR(l, "reason"), "ticket closed by hand");
	ck_assert_str_eq(JSTR(l, "effect_id"), id);
	ck_assert_str_eq(JSTR(l, "key"), key);
	json_decref(l);
	l = log_one(off, "run.rejected");
	ck_assert_str_eq(JSTR(l, "state_to"), "failed_terminal");
	json_decref(l);
	CTL_OK(&out, "--json", "deadletter", "list", "--state", "resolved");
	ck_assert_msg(strstr(out, dlid) != NULL, "the rejected letter is not resolved: %s", out);
	free(out);
	/* rejected twice: refused */
	REFUSED(c, key, 1, "cancelled already", "wrong_state", "reject", id, "--reason", "again");
	/* and nothing was ever sent again */
	ck_assert_int_eq(prov_count(pk, "effect"), 1);
	json_decref(dl);
	free(dlid);
	PQfinish(c);
}
END_TEST

/* ===== 2. reconcile --not-delivered, then resume: sent once ===================== */

START_TEST(test_not_delivered_then_resume)
{
	PGconn *c = tl_pg_connect();
	struct dl_disp d;
	char key[200], pk[256], id[40];
	char *out = NULL, *st;
	json_t *dl, *row, *doc, *reqs, *l, *res;
	long off;

	tl_mkkey(key, sizeof(key), "resume");
	snprintf(pk, sizeof(pk), "%s/crm.note", key);
	make_run(c, key);
	/* A dispatcher died holding it, before its request went out: the
	 * sweep makes it unknown, and without a lookup URL it waits for us. */
	add_effect(c, key, "crm.note", "o_plain", "{\"contact\":\"c-7\",\"note\":\"hello\"}", true, id);
	dl_sends(true);
	disp_start(&d);
	DL_EXPECT_EFFECT(c, id, "unknown", 10);
	dl = wait_dead_letter(c, id, 5);
	ck_assert_str_eq(JSTR(dl, "error_class"), "unknown");
	json_decref(dl);
	ck_assert_int_eq(prov_count(pk, NULL), 0);

	/* Not yet known: resume is refused, and so are bad reconciles. */
	REFUSED(c, key, 1, "reconcile first", "not_known_undelivered", "resume", id, "--reason",
	        "try again");
	REFUSED(c, key, 2, "--reason TEXT is required", "usage", "reconcile", id,
	        "--not-delivered");
	REFUSED(c, key, 2, "--delivered --provider-id ID or --not-delivered", "usage", "reconcile",
	        id, "--delivered", "--reason", "found it");
	REFUSED(c, key, 2, "--delivered --provider-id ID or --not-delivered", "usage", "reconcile",
	        id, "--delivered", "--not-delivered", "--provider-id", "x", "--reason", "both");
	REFUSED(c, key, 1, "not pending as expected", "changed_meanwhile", "reconcile", id,
	        "--not-delivered", "--expect", "pending", "--reason", "stale view");

	/* The provider has nothing (its record says so): not delivered. */
	off = tl_log_offset();
	CTL_OK(&out, "--json", "reconcile", id, "--not-delivered", "--expect", "unknown",
	       "--reason", "provider console shows nothing for this key");
	res = json_loads(out, 0, NULL);
	ck_assert_msg(res != NULL && streq(tl_jstr(res, "state_from"), "unknown") &&
	              streq(tl_jstr(res, "state_to"), "failed"), "reconcile --json: %s", out);
	json_decref(res);
	free(out);
	row = dl_effect_row(c, id);
	ck_assert_str_eq(JSTR(row, "state"), "failed");
	ck_assert_str_eq(JSTR(row, "provider_key"), pk);
	json_decref(row);
	dl = dl_dead_letter_of(c, id);
	ck_assert_str_eq(JSTR(dl, "resolution"), "not_delivered");
	json_decref(dl);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM operator_actions WHERE effect_id = $1::uuid"
	                      " AND action = 'reconcile' AND details->>'finding' = 'not_delivered'"
	                      " AND operator = $2", id, OPERATOR, (char *)NULL), 1);
	l = log_one(off, "effect.reconciled");
	ck_assert_str_eq(JSTR(l, "actor"), OPERATOR);
	ck_assert_str_eq(JSTR(l, "reason"), "provider console shows nothing for this key");
	ck_assert_str_eq(JSTR(l, "effect_id"), id);
	ck_assert_str_eq(JSTR(l, "state_to"), "failed");
	json_decref(l);
	CTL_OK(&out, "--json", "deadletter", "show", id);
	doc = json_loads(out, 0, NULL);
	free(out);
	ck_assert_msg(json_is_true(json_object_get(json_object_get(doc, "effect"),
	                                           "known_undelivered")) &&
	              streq(tl_jstr(doc, "state"), "open") &&
	              strstr(JSTR(doc, "next_action"), "resume") != NULL,
	              "after --not-delivered: %s", tl_json_text(doc));
	json_decref(doc);
	/* Still nothing sent: a finding sends nothing. */
	tl_sleep_ms(600);
	ck_assert_int_eq(prov_count(pk, NULL), 0);

	/* resume: pending again, the same key; the dispatcher sends it once */
	off = tl_log_offset();
	CTL_OK(&out, "resume", id, "--reason", "provider fixed, send it");
	free(out);
	DL_EXPECT_EFFECT(c, id, "completed", 15);
	st = dl_run_state(c, g_client, key);
	ck_assert_str_eq(st, "completed");
	free(st);
	ck_assert_int_eq(wait_prov(pk, NULL, 1, 2), 1);
	tl_sleep_ms(600);
	reqs = prov_requests(pk, NULL);
	ck_assert_msg(json_array_size(reqs) == 1, "the provider received %zu requests, expected 1",
	              json_array_size(reqs));
	ck_assert_str_eq(JSTR(json_array_get(reqs, 0), "idempotency_key"), pk);
	json_decref(reqs);
	reqs = prov_committed(pk);
	ck_assert_int_eq(json_array_size(reqs), 1);
	row = dl_effect_row(c, id);
	ck_assert_str_eq(JSTR(row, "provider_key"), pk);
	ck_assert_str_eq(JSTR(row, "provider_id"), JSTR(json_array_get(reqs, 0), "id"));
	json_decref(row);
	json_decref(reqs);
	l = log_one(off, "effect.resumed");
	ck_assert_str_eq(JSTR(l, "actor"), OPERATOR);
	ck_assert_str_eq(JSTR(l, "reason"), "provider fixed, send it");
	ck_assert_str_eq(JSTR(l, "state_from"), "failed");
	ck_assert_str_eq(JSTR(l, "state_to"), "pending");
	json_decref(l);
	ck_assert_int_eq(actions_of(c, key, "resume"), 1);
	dl = dl_dead_letter_of(c, id);
	ck_assert_str_eq(JSTR(dl, "resolution"), "resumed");
	json_decref(dl);
	CTL_OK(&out, "--json", "deadletter", "show", id);
	ck_assert_msg(strstr(out, "\"state\":\"resolved\"") != NULL, "after the resume: %s", out);
	free(out);
	disp_stop(&d);
	/* Delivered now: a second resume is refused. */
	REFUSED(c, key, 1, "it was delivered", "wrong_state", "resume", id, "--reason", "again");
	ck_assert_int_eq(prov_count(pk, NULL), 1);
	PQfinish(c);
}
END_TEST

/* ===== 3. known undelivered from the evidence alone ============================== */

START_TEST(test_resume_before_send)
{
	PGconn *c = tl_pg_connect();
	struct dl_disp d;
	char key[200], key2[200], id[40], id2[40];
	char *out = NULL;
	json_t *dl, *row;

	/* A target this dispatcher does not know: failed, nothing went out. */
	tl_mkkey(key, sizeof(key), "unconfigured");
	make_run(c, key);
	add_effect(c, key, "crm.tag", "o_gone", "{\"contact\":\"c-9\"}", false, id);
	/* A target nobody listens on: every attempt refused before sending,
	 * the budget spent. */
	tl_mkkey(key2, sizeof(key2), "refused");
	make_run(c, key2);
	add_effect(c, key2, "crm.tag", "o_refused", "{\"contact\":\"c-10\"}", false, id2);
	dl_sends(true);
	disp_start(&d);
	DL_EXPECT_EFFECT(c, id, "failed", 10);
	DL_EXPECT_EFFECT(c, id2, "failed", 15);
	dl = wait_dead_letter(c, id2, 5);
	ck_assert_str_eq(JSTR(dl, "error_class"), "exhausted");
	json_decref(dl);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_attempts WHERE effect_id = $1::uuid"
	                      " AND evidence->'request_sent' = 'false'::jsonb", id2, (char *)NULL), 2);
	disp_stop(&d);

	/* Both are known undelivered without anyone reconciling. */
	CTL_OK(&out, "--json", "deadletter", "show", id2);
	ck_assert_msg(strstr(out, "\"known_undelivered\":true") != NULL, "show: %s", out);
	free(out);
	CTL_OK(&out, "resume", id2, "--reason", "the target is back");
	free(out);
	row = dl_effect_row(c, id2);
	ck_assert_str_eq(JSTR(row, "state"), "pending");
	ck_assert_int_eq(json_integer_value(json_object_get(row, "attempt")), 0);
	ck_assert_msg(json_is_null(json_object_get(row, "first_attempt_at")),
	              "the retry budget did not start afresh: %s", tl_json_text(row));
	json_decref(row);
	/* resumed by its dead letter's id */
	dl = dl_dead_letter_of(c, id);
	CTL_OK(&out, "resume", JSTR(dl, "id"), "--reason", "target configured now");
	free(out);
	json_decref(dl);
	DL_EXPECT_EFFECT(c, id, "pending", 0);

	/* Both fail again (the targets are still wrong): their letters reopen. */
	disp_start(&d);
	DL_EXPECT_EFFECT(c, id, "failed", 10);
	DL_EXPECT_EFFECT(c, id2, "failed", 15);
	disp_stop(&d);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM dead_letters WHERE effect_id = $1::uuid",
	                      id, (char *)NULL), 1);
	CTL_OK(&out, "--json", "deadletter", "list", "--state", "open", "--target", "o_gone");
	ck_assert_msg(strstr(out, id) != NULL, "the letter of a resumed effect that failed again "
	              "is not open: %s", out);
	free(out);
	/* Done with them. */
	CTL_OK(&out, "reject", id, "--reason", "wrong target, replay later");
	free(out);
	CTL_OK(&out, "reject", key2, "--reason", "give up on this key");
	free(out);
	DL_EXPECT_EFFECT(c, id2, "cancelled", 0);
	PQfinish(c);
}
END_TEST

/* ===== 4. reconcile --delivered completes the effect and the run =================== */

START_TEST(test_reconcile_delivered)
{
	PGconn *c = tl_pg_connect();
	struct dl_disp d;
	char key[200], id[40], id2[40];
	char *out = NULL, *st;
	json_t *row, *dl, *l;
	long off;

	tl_mkkey(key, sizeof(key), "delivered");
	make_run(c, key);
	add_effect(c, key, "crm.note", "o_plain", "{\"contact\":\"c-11\"}", true, id);
	/* a second effect of the run, delivered already */
	add_effect(c, key, "crm.tag", "o_plain", "{\"contact\":\"c-11\"}", false, id2);
	qexec(c, "UPDATE effect_outbox SET state = 'completed', completed_at = now(),"
	      " provider_id = 'prov-done' WHERE id = $1::uuid", id2, (char *)NULL);
	dl_sends(true);
	disp_start(&d);
	DL_EXPECT_EFFECT(c, id, "unknown", 10);
	disp_stop(&d);
	dl = wait_dead_letter(c, id, 5);
	ck_assert_str_eq(JSTR(dl, "error_class"), "unknown");
	json_decref(dl);

	REFUSED(c, key, 2, "--delivered --provider-id ID or --not-delivered", "usage",
	        "reconcile", id, "--delivered", "--provider-id", "", "--reason", "empty id");
	/* an effect that is not unknown or failed */
	REFUSED(c, key, 1, "only an unknown or failed effect is reconciled", "wrong_state",
	        "reconcile", id2, "--delivered", "--provider-id", "prov-x", "--reason", "no");

	off = tl_log_offset();
	CTL_OK(&out, "reconcile", id, "--delivered", "--provider-id", "prov-ext-77", "--reason",
	       "found in the CRM audit log");
	free(out);
	row = dl_effect_row(c, id);
	ck_assert_str_eq(JSTR(row, "state"), "completed");
	ck_assert_str_eq(JSTR(row, "provider_id"), "prov-ext-77");
	ck_assert_msg(json_is_string(json_object_get(row, "completed_at")), "completed_at unset");
	json_decref(row);
	st = dl_run_state(c, g_client, key);
	ck_assert_str_eq(st, "completed");
	free(st);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM run_events WHERE client_id = $1::bigint"
	                      " AND idempotency_key = $2 AND event = 'run.completed'"
	                      " AND actor = 'operator:' || $3", g_client, key, OPERATOR,
	                      (char *)NULL), 1);
	dl = dl_dead_letter_of(c, id);
	ck_assert_str_eq(JSTR(dl, "resolution"), "delivered");
	json_decref(dl);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM operator_actions WHERE effect_id = $1::uuid"
	                      " AND action = 'reconcile' AND details->>'provider_id' = 'prov-ext-77'",
	                      id, (char *)NULL), 1);
	l = log_one(off, "effect.reconciled");
	ck_assert_str_eq(JSTR(l, "provider_id"), "prov-ext-77");
	ck_assert_str_eq(JSTR(l, "actor"), OPERATOR);
	ck_assert_str_eq(JSTR(l, "state_to"), "completed");
	json_decref(l);
	l = log_one(off, "run.completed");
	ck_assert_str_eq(JSTR(l, "actor"), OPERATOR);
	json_decref(l);
	/* nothing was sent for it, ever */
	ck_assert_int_eq(prov_count(key, NULL), 0);
	REFUSED(c, key, 1, "only an unknown or failed effect is reconciled", "wrong_state",
	        "reconcile", id, "--not-delivered", "--reason", "changed my mind");
	REFUSED(c, key, 1, "it was delivered and cannot be taken back", "wrong_state", "reject", id,
	        "--reason", "too late");
	REFUSED(c, key, 1, "already: nothing to reject", "wrong_state", "reject", key, "--reason",
	        "too late");
	PQfinish(c);
}
END_TEST

/* ===== 5. approval revoke, list, and reject KEY ===================================== */

/* The hidden csrf input's value on an approval page (malloc'd). */
static char *
csrf_of(const char *page)
{
	const char *p = strstr(page, "name=\"csrf\""), *v, *end;

	ck_assert_msg(p != NULL, "the page has no csrf input: %.2000s", page);
	while (p > page && *p != '<')
		p--;
	v = strstr(p, "value=\"");
	ck_assert_ptr_nonnull(v);
	v += 7;
	end = strchr(v, '"');
	ck_assert_msg(end != NULL && end - v >= 16, "no csrf value");
	return strndup(v, (size_t)(end - v));
}

static void
page(const char *token, const char *form, struct tl_resp *r)
{
	char path[256], origin[512];
	const char *h[6] = { "X-Dev-User: alice@example.com", "X-Dev-Groups: support", NULL };

	snprintf(path, sizeof(path), "/approve/%s", token);
	snprintf(origin, sizeof(origin), "Origin: %s", tl_env("ONCEGATE_URL"));
	if (form != NULL) {
		h[2] = origin;
		h[3] = "Sec-Fetch-Site: same-origin";
		h[4] = NULL;
	}
	memset(r, 0, sizeof(*r));
	ck_assert_int_eq(tl_http_hdrs(form != NULL ? "POST" : "GET", path, h,
	                              form != NULL ? "application/x-www-form-urlencoded" : NULL,
	                              form, form != NULL ? strlen(form) : 0, r, NULL), 0);
}

START_TEST(test_approval_revoke_and_reject_key)
{
	PGconn *c = tl_pg_connect();
	char key[200], tok_b[44], hash_b[65], n8n_url[512];
	char *out = NULL, *aid, *bid, *csrf, *form, *st;
	const char *url, *tok_a;
	json_t *list, *o, *l, *cb;
	struct tl_resp r;
	size_t i;
	long off;
	bool seen_a = false, seen_b = false;

	/* claim → output (support_reply: a person from group support decides) */
	tl_mkkey(key, sizeof(key), "revoke");
	snprintf(n8n_url, sizeof(n8n_url), "http://127.0.0.1:5678/webhook-waiting/%s", tl_run);
	/* the shipped contracts separate duties: an output names its requester */
	dl_reply_run(key, "Re: refund", "Refund approved.", n8n_url, "check-ops@workflows.example",
	             &r);
	o = json_array_get(json_object_get(r.json, "approvals"), 0);
	aid = strdup(JSTR(o, "approval_id"));
	url = tl_jstr(o, "url");
	ck_assert_ptr_nonnull(url);
	tok_a = strstr(url, "/approve/");
	ck_assert_ptr_nonnull(tok_a);
	tok_a = strdup(tok_a + 9);
	tl_resp_free(&r);
	/* A second approver's challenge, as a contract naming two would
	 * create: its own token. */
	tl_random_token(tok_b);
	tl_sha256_hex(tok_b, hash_b);
	bid = qstr(c, "INSERT INTO approvals (client_id, idempotency_key, token_hash, approver,"
	           "    allowed_decisions, requested_by, separation_of_duties, expires_at, effect,"
	           "    callback_url)"
	           " SELECT client_id, idempotency_key, decode($2, 'hex'), 'bob@example.com',"
	           "    allowed_decisions, requested_by, separation_of_duties, expires_at, effect,"
	           "    callback_url FROM approvals WHERE id = $1::uuid RETURNING id",
	           aid, hash_b, (char *)NULL);
	ck_assert_ptr_nonnull(bid);

	/* The approver has the page open (and its csrf) when the link is revoked. */
	page(tok_a, NULL, &r);
	ck_assert_msg(r.status == 200, "GET approval page: %ld", r.status);
	csrf = csrf_of(r.body);
	tl_resp_free(&r);

	/* approval list --pending: both, with their wait */
	CTL_OK(&out, "--json", "approval", "list", "--pending");
	list = json_loads(out, 0, NULL);
	ck_assert_msg(json_is_array(list), "approval list --json: %s", out);
	free(out);
	json_array_foreach(list, i, o) {
		if (streq(tl_jstr(o, "approval_id"), aid) || streq(tl_jstr(o, "approval_id"), bid)) {
			seen_a |= streq(tl_jstr(o, "approval_id"), aid);
			seen_b |= streq(tl_jstr(o, "approval_id"), bid);
			ck_assert_str_eq(JSTR(o, "key"), key);
			ck_assert_str_eq(JSTR(o, "state"), "pending");
			ck_assert_msg(json_integer_value(json_object_get(o, "waiting_seconds")) >= 0 &&
			              json_integer_value(json_object_get(o, "expires_in_seconds")) > 3600,
			              "wait / expiry: %s", tl_json_text(o));
		}
	}
	ck_assert_msg(seen_a && seen_b, "approval list misses a pending challenge");
	json_decref(list);
	CTL_OK(&out, "approval", "list", "--pending");
	ck_assert_msg(strstr(out, aid) != NULL && strstr(out, "STATE") != NULL, "list: %s", out);
	free(out);

	/* refusals */
	REFUSED(c, key, 2, "--reason TEXT is required", "usage", "approval", "revoke", aid);
	REFUSED(c, key, 1, "no approval has the id", "not_found", "approval", "revoke",
	        "00000000-0000-4000-8000-000000000000", "--reason", "typo");
	REFUSED(c, key, 1, "is not an approval id", "not_found", "approval", "revoke", "nope",
	        "--reason", "typo");

	/* revoke A: A's link is dead, B's still works, the run still waits */
	off = tl_log_offset();
	CTL_OK(&out, "approval", "revoke", aid, "--reason", "alice left the team");
	free(out);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE id = $1::uuid"
	                      " AND state = 'revoked'", aid, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE id = $1::uuid"
	                      " AND state = 'pending'", bid, (char *)NULL), 1);
	st = dl_run_state(c, g_client, key);
	ck_assert_str_eq(st, "awaiting_human");
	free(st);
	ck_assert_int_eq(actions_of(c, key, "approval_revoke"), 1);
	l = log_one(off, "approval.revoked");
	ck_assert_str_eq(JSTR(l, "approval_id"), aid);
	ck_assert_str_eq(JSTR(l, "actor"), OPERATOR);
	ck_assert_str_eq(JSTR(l, "reason"), "alice left the team");
	ck_assert_str_eq(JSTR(l, "key"), key);
	json_decref(l);
	page(tok_a, NULL, &r);
	ck_assert_msg(r.status == 410 && strstr(r.body, "revoked") != NULL,
	              "GET of a revoked link: %ld %.1000s", r.status, r.body);
	tl_resp_free(&r);
	form = tl_form("decision", "approve", "csrf", csrf, "reason", "ok", (char *)NULL);
	{
		char *before = snapshot(c, key), *after;

		page(tok_a, form, &r);
		ck_assert_msg(r.status == 410 || r.status == 409, "POST to a revoked link: %ld %.1000s",
		              r.status, r.body);
		tl_resp_free(&r);
		after = snapshot(c, key);
		ck_assert_msg(strcmp(before, after) == 0, "a POST to a revoked link changed rows");
		free(before);
		free(after);
	}
	free(form);
	/* still live (not revoked: 410), and not alice's: bob's page says so */
	page(tok_b, NULL, &r);
	ck_assert_msg(r.status == 403 && strstr(r.body, "Not your approval") != NULL,
	              "the other approver's link, opened by alice: %ld %.500s", r.status, r.body);
	tl_resp_free(&r);
	REFUSED(c, key, 1, "only a pending challenge is revoked", "wrong_state", "approval",
	        "revoke", aid, "--reason", "twice");

	/* reject KEY: the run ends, B's link is revoked, the workflow is told */
	REFUSED(c, key, 1, "no run has the key", "not_found", "reject", "no-such-key-anywhere",
	        "--reason", "typo");
	REFUSED(c, key, 2, "--reason TEXT is required", "usage", "reject", key);
	off = tl_log_offset();
	CTL_OK(&out, "reject", key, "--reason", "customer withdrew the request");
	free(out);
	st = dl_run_state(c, g_client, key);
	ck_assert_str_eq(st, "failed_terminal");
	free(st);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM approvals WHERE client_id = $1::bigint"
	                      " AND idempotency_key = $2 AND state = 'pending'", g_client, key,
	                      (char *)NULL), 0);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM effect_outbox WHERE client_id = $1::bigint"
	                      " AND idempotency_key = $2 AND effect_type = 'email.send'", g_client,
	                      key, (char *)NULL), 0);
	cb = qjson(c, "SELECT payload::text FROM effect_outbox WHERE client_id = $1::bigint"
	           " AND idempotency_key = $2 AND effect_type = 'decision.callback'", g_client, key,
	           (char *)NULL);
	ck_assert_msg(cb != NULL && streq(tl_jstr(cb, "decision"), "rejected") &&
	              streq(tl_jstr(cb, "url"), n8n_url), "callback: %s", tl_json_text(cb));
	json_decref(cb);
	l = log_one(off, "run.rejected");
	ck_assert_str_eq(JSTR(l, "state_from"), "awaiting_human");
	ck_assert_str_eq(JSTR(l, "state_to"), "failed_terminal");
	ck_assert_str_eq(JSTR(l, "actor"), OPERATOR);
	json_decref(l);
	/* B's link is revoked; alice, whose it is not, is told no more than that */
	{
		char *bst = qstr(c, "SELECT state FROM approvals WHERE id = $1::uuid", bid,
		                 (char *)NULL);

		ck_assert_msg(bst != NULL && (strcmp(bst, "revoked") == 0 ||
		                              strcmp(bst, "voided") == 0),
		              "B's challenge after reject KEY: %s", bst);
		free(bst);
	}
	page(tok_b, NULL, &r);
	ck_assert_msg(r.status == 410 || (r.status == 403 && strstr(r.body, "Not your approval")),
	              "B's link after reject KEY: %ld", r.status);
	tl_resp_free(&r);
	REFUSED(c, key, 1, "already: nothing to reject", "wrong_state", "reject", key, "--reason",
	        "twice");
	/* The callback is the workflow's; rejecting it leaves the run as it is. */
	{
		char *cbid = qstr(c, "SELECT id FROM effect_outbox WHERE client_id = $1::bigint"
		                  " AND idempotency_key = $2 AND effect_type = 'decision.callback'",
		                  g_client, key, (char *)NULL);

		CTL_OK(&out, "reject", cbid, "--reason", "n8n is not there in tests");
		free(out);
		st = dl_run_state(c, g_client, key);
		ck_assert_str_eq(st, "failed_terminal");
		free(st);
		free(cbid);
	}
	free(aid);
	free(bid);
	free(csrf);
	free((char *)(uintptr_t)tok_a);
	PQfinish(c);
}
END_TEST

/* ===== 6. refusals of every command on things that do not exist ==================== */

START_TEST(test_refusals)
{
	static const char *const nobody = "00000000-0000-4000-8000-000000000001";
	PGconn *c = tl_pg_connect();
	char key[200], id[40];
	char *out = NULL, *err = NULL;
	int rc;

	tl_mkkey(key, sizeof(key), "refusals");
	make_run(c, key);
	add_effect(c, key, "crm.tag", "o_idem", "{\"contact\":\"c-12\"}", false, id);
	/* pending; no dispatcher of this suite runs in this test */

	REFUSED(c, key, 1, "no effect or dead letter has the id", "not_found", "resume", nobody,
	        "--reason", "x");
	REFUSED(c, key, 1, "no effect or dead letter has the id", "not_found", "reconcile", nobody,
	        "--not-delivered", "--reason", "x");
	REFUSED(c, key, 1, "is not an effect or dead-letter id", "not_found", "resume", "12",
	        "--reason", "x");
	REFUSED(c, key, 1, "no effect or dead letter has the id", "not_found", "reject", nobody,
	        "--reason", "x");
	/* wrong states of a pending effect */
	REFUSED(c, key, 1, "nothing to resume", "wrong_state", "resume", id, "--reason", "x");
	REFUSED(c, key, 1, "it is waiting to be sent", "wrong_state", "reconcile", id,
	        "--not-delivered", "--reason", "x");
	/* usage */
	REFUSED(c, key, 2, "--reason TEXT is required", "usage", "resume", id);
	REFUSED(c, key, 2, "--reason TEXT is required", "usage", "resume", id, "--reason", "");
	REFUSED(c, key, 2, "--reason TEXT is required", "usage", "reject", id);
	REFUSED(c, key, 2, "name one EFFECT", "usage", "resume", "--reason", "x");
	REFUSED(c, key, 2, "name one EFFECT", "usage", "resume", id, id, "--reason", "x");
	/* a reason longer than operator_actions keeps */
	{
		char *longr = malloc(1200);

		memset(longr, 'r', 1100);
		longr[1100] = '\0';
		REFUSED(c, key, 2, "at most 1000 characters", "usage", "reject", id, "--reason",
		        longr);
		free(longr);
	}
	/* reads: unknown ids, bad filters */
	rc = tl_ctl_err(&out, &err, "deadletter", "show", nobody, (char *)NULL);
	ck_assert_msg(rc == 1 && strstr(err, "no dead letter has the id") != NULL, "show: %d %s", rc,
	              err);
	free(out);
	free(err);
	rc = tl_ctl_err(&out, &err, "deadletter", "list", "--class", "bogus", (char *)NULL);
	ck_assert_msg(rc == 2 && strstr(err, "usage") != NULL, "list --class bogus: %d %s", rc, err);
	free(out);
	free(err);
	rc = tl_ctl_err(&out, &err, "deadletter", "list", "--since", "2024-99-99", (char *)NULL);
	ck_assert_msg(rc == 2 && strstr(err, "not a time") != NULL, "--since: %d %s", rc, err);
	free(out);
	free(err);
	/* --help of each command */
	{
		static const char *const cmds[] = { "deadletter", "reconcile", "resume", "reject",
			                            "approval" };
		size_t i;

		for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
			rc = tl_ctl_err(&out, &err, cmds[i], "--help", (char *)NULL);
			ck_assert_msg(rc == 0 && strstr(out, "usage: oncegatectl") != NULL &&
			              strstr(out, cmds[i]) != NULL, "%s --help: %d %s", cmds[i], rc, out);
			free(out);
			free(err);
		}
	}
	/* the pending effect is still pending and untouched; reject it now */
	CTL_OK(&out, "reject", id, "--reason", "test done");
	free(out);
	DL_EXPECT_EFFECT(c, id, "cancelled", 0);
	PQfinish(c);
}
END_TEST

/* How many lines of event ev were written after offset (waits for want). */
static size_t
log_count(long offset, const char *ev, size_t want)
{
	json_t *lines = tl_log_collect(offset, is_event, ev, want);
	size_t n = json_array_size(lines);

	json_decref(lines);
	return n;
}

/* ===== 7. the kill switch: who turned it and why ================================= */

START_TEST(test_kill_switch_logged)
{
	/* stop, resume, then the same through kill-switch engage/release */
	static const char *const verbs[4][2] = { { "sends", "stop" }, { "sends", "resume" },
		                                 { "kill-switch", "engage" },
		                                 { "kill-switch", "release" } };
	static const char *const reasons[4] = { "incident 42: stop every send now",
		                                "incident 42 over: sends may resume",
		                                "Инцидент 43 — 停止 — עצור 🛑",
		                                "Инцидент 43 закрыт ✅" };
	PGconn *c = tl_pg_connect();
	char *out = NULL, *err = NULL, *before, *after;
	json_t *l, *row, *doc;
	long off;
	int k, rc;

	for (k = 0; k < 4; k++) {
		bool allowed = k % 2 == 1;
		const char *event = allowed ? "sends.resumed" : "sends.stopped";

		off = tl_log_offset();
		CTL_OK(&out, verbs[k][0], verbs[k][1], "--reason", reasons[k]);
		free(out);
		/* the decision log: one line, with the operator and the reason */
		l = log_one(off, event);
		ck_assert_str_eq(JSTR(l, "actor"), OPERATOR);
		ck_assert_str_eq(JSTR(l, "reason"), reasons[k]);
		ck_assert_str_eq(JSTR(l, "state_to"), allowed ? "allowed" : "stopped");
		ck_assert_str_eq(JSTR(l, "program"), "oncegatectl");
		json_decref(l);
		/* the stored flag keeps its meaning: actions_enabled = sends allowed */
		row = qjson(c, "SELECT row_to_json(d)::text FROM dispatch_control d", (char *)NULL);
		ck_assert_ptr_nonnull(row);
		ck_assert_msg(json_is_boolean(json_object_get(row, "actions_enabled")) &&
		              json_is_true(json_object_get(row, "actions_enabled")) == allowed,
		              "dispatch_control after %s %s: %s", verbs[k][0], verbs[k][1],
		              tl_json_text(row));
		ck_assert_str_eq(JSTR(row, "changed_by"), OPERATOR);
		ck_assert_str_eq(JSTR(row, "reason"), reasons[k]);
		json_decref(row);
		ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM operator_actions WHERE action = $1"
		                                " AND reason = $2 AND details->>'now' = $3",
		                             3, (const char *const[]){ event, reasons[k],
		                                                        allowed ? "allowed" : "stopped" }),
		                 1);
		/* status --json parses, says in words whether sends go out and what
		 * the environment of a dispatcher must hold */
		CTL_OK(&out, "--json", k < 2 ? "sends" : "kill-switch", "status");
		doc = json_loads(out, 0, NULL);
		ck_assert_msg(doc != NULL, "status --json does not parse: %s", out);
		free(out);
		ck_assert_str_eq(JSTR(doc, "sends"), allowed ? "allowed" : "stopped");
		ck_assert_str_eq(JSTR(doc, "environment_needs"), "AI_ACTIONS_ENABLED=true");
		ck_assert_msg(json_is_integer(json_object_get(doc, "blocked_sends")) &&
		              json_is_integer(json_object_get(doc, "due_effects")),
		              "status: %s", tl_json_text(doc));
		json_decref(doc);
		CTL_OK(&out, "sends", "status");
		ck_assert_msg(strstr(out, allowed ? "ALLOWED" : "STOPPED") != NULL &&
		              strstr(out, "AI_ACTIONS_ENABLED=true") != NULL &&
		              strstr(out, OPERATOR) != NULL && strstr(out, reasons[k]) != NULL,
		              "sends status: %s", out);
		free(out);
	}
	/* without a reason, or in the old spelling (on once allowed sends):
	 * refused, the new spellings named, nothing changed */
	before = qstr(c, "SELECT row_to_json(d)::text FROM dispatch_control d", (char *)NULL);
	off = tl_log_offset();
	rc = tl_ctl_err(&out, &err, "sends", "stop", (char *)NULL);
	ck_assert_msg(rc == 2 && strstr(err, "--reason") != NULL, "stop without a reason: %d %s",
	              rc, err);
	free(out);
	free(err);
	for (k = 0; k < 2; k++) {
		rc = tl_ctl_err(&out, &err, "kill-switch", k == 0 ? "on" : "off", "--reason",
		                "an old runbook", (char *)NULL);
		ck_assert_msg(rc == 2 && strstr(err, "sends stop") != NULL &&
		              strstr(err, "sends resume") != NULL &&
		              strstr(err, "kill-switch engage") != NULL,
		              "kill-switch %s: %d %s", k == 0 ? "on" : "off", rc, err);
		free(out);
		free(err);
	}
	after = qstr(c, "SELECT row_to_json(d)::text FROM dispatch_control d", (char *)NULL);
	ck_assert_str_eq(before, after);
	ck_assert_int_eq(log_count(off, "sends.stopped", (size_t)0) +
	                     log_count(off, "sends.resumed", (size_t)0),
	                 0);
	free(before);
	free(after);
	PQfinish(c);
}
END_TEST

/* ===== 8. bulk resume: dry run, rate, stop half-way, continue, sent once ========== */

#define BULK_N     20
#define BULK_RATE  5.0

/* Everything of this test's runs a bulk resume could touch, plus the
 * number of jobs and operator actions: equal before and after = nothing
 * changed. */
static char *
bulk_snapshot(PGconn *c, const char *like)
{
	char *s = qstr(c,
	        "SELECT json_build_object("
	        " 'effects', (SELECT json_agg(e ORDER BY e.id) FROM effect_outbox e"
	        "          WHERE client_id = $1::bigint AND idempotency_key LIKE $2),"
	        " 'letters', (SELECT json_agg(d ORDER BY d.id) FROM dead_letters d"
	        "          WHERE client_id = $1::bigint AND idempotency_key LIKE $2),"
	        " 'runs', (SELECT json_agg(r ORDER BY r.idempotency_key) FROM workflow_runs r"
	        "          WHERE client_id = $1::bigint AND idempotency_key LIKE $2),"
	        " 'jobs', (SELECT count(*) FROM replay_jobs),"
	        " 'items', (SELECT count(*) FROM resume_job_items),"
	        " 'actions', (SELECT count(*) FROM operator_actions))::text",
	        g_client, like, (char *)NULL);

	ck_assert_ptr_nonnull(s);
	return s;
}

/* Items of the job whose effect and record disagree with the item's
 * state: a done item's effect is resumed (pending, or sent since) with
 * exactly one resume action of this job; a pending item's effect is
 * still failed with none. */
static long long
bulk_inconsistent(PGconn *c, const char *job)
{
	return qnum(c,
	        "SELECT count(*) FROM resume_job_items i JOIN effect_outbox e ON e.id = i.effect_id"
	        " WHERE i.job_id = $1::bigint AND ("
	        "   (i.state = 'done') <> (e.state IN ('pending', 'sending', 'completed'))"
	        "   OR (i.state = 'pending') <> (e.state = 'failed')"
	        "   OR (SELECT count(*) FROM operator_actions o WHERE o.effect_id = i.effect_id"
	        "        AND o.action = 'resume' AND o.details->>'job_id' = $1::text)"
	        "      <> CASE WHEN i.state = 'done' THEN 1 ELSE 0 END)",
	        job, (char *)NULL);
}

START_TEST(test_bulk_resume)
{
	PGconn *c = tl_pg_connect();
	struct dl_disp d;
	char keys[BULK_N][200], ids[BULK_N][40], pend_key[200], pend[40], like[128];
	char sel[PATH_MAX], sel_all[PATH_MAX], outp[PATH_MAX], errp[PATH_MAX];
	char *since, *out = NULL, *err = NULL, *before, *after, *job = NULL, *v;
	char *argv[16];
	json_t *doc, *items, *it, *l;
	FILE *f;
	size_t k;
	int i, rc, st = 0;
	long long done, pending, at_stop;
	double t, took;
	long off;
	pid_t pid;

	since = qstr(c, "SELECT og_ts(now() - interval '1 second')", (char *)NULL);
	snprintf(like, sizeof(like), "%s-bulk%%", tl_run);
	/* BULK_N runs whose one effect goes to o_flaky while nobody listens
	 * there: every attempt refused before anything was sent, the budget
	 * spent, a dead letter each — known undelivered. */
	g_flaky_port = 0;
	for (i = 0; i < BULK_N; i++) {
		char name[32], payload[64];

		snprintf(name, sizeof(name), "bulk%02d", i);
		snprintf(payload, sizeof(payload), "{\"contact\":\"b-%d\"}", i);
		tl_mkkey(keys[i], sizeof(keys[i]), name);
		make_run(c, keys[i]);
		add_effect(c, keys[i], "crm.tag", "o_flaky", payload, false, ids[i]);
	}
	dl_sends(true);
	disp_start(&d);
	for (i = 0; i < BULK_N; i++)
		DL_EXPECT_EFFECT(c, ids[i], "failed", 30);
	for (i = 0; i < BULK_N; i++)
		json_decref(wait_dead_letter(c, ids[i], 5));
	disp_stop(&d);
	/* and one effect that is not known undelivered: it waits to be sent */
	tl_mkkey(pend_key, sizeof(pend_key), "bulkpending");
	make_run(c, pend_key);
	add_effect(c, pend_key, "crm.tag", "o_idem", "{\"contact\":\"b-p\"}", false, pend);

	/* The selection: effect ids and dead-letter ids mixed, comments. */
	snprintf(sel, sizeof(sel), "%s/bulk.sel", g_tmp);
	snprintf(sel_all, sizeof(sel_all), "%s/bulk-all.sel", g_tmp);
	for (k = 0; k < 2; k++) {
		f = fopen(k == 0 ? sel : sel_all, "w");
		ck_assert_ptr_nonnull(f);
		fprintf(f, "# check_ops bulk resume\n\n");
		for (i = 0; i < BULK_N; i++) {
			if (i % 2 == 1) {
				v = qstr(c, "SELECT id FROM dead_letters WHERE effect_id = $1::uuid", ids[i],
				         (char *)NULL);
				fprintf(f, "%s\n", v);
				free(v);
			} else {
				fprintf(f, "  %s  \n", ids[i]);
			}
		}
		if (k == 1)
			fprintf(f, "%s\n", pend);
		ck_assert_int_eq(fclose(f), 0);
	}

	/* --dry-run lists exactly the selection with each verdict, changes
	 * nothing, and exits 1 because one item would be refused. */
	before = bulk_snapshot(c, like);
	off = tl_log_offset();
	rc = tl_ctl_err(&out, &err, "--json", "resume", "--select", sel_all, "--dry-run", (char *)NULL);
	ck_assert_msg(rc == 1, "dry run with a refused item: exit %d: %s", rc, err);
	doc = json_loads(out, 0, NULL);
	ck_assert_msg(doc != NULL, "dry run --json does not parse: %s", out);
	free(out);
	free(err);
	items = json_object_get(doc, "items");
	ck_assert_int_eq(json_array_size(items), BULK_N + 1);
	json_array_foreach(items, k, it) {
		const char *want = k < BULK_N ? ids[k] : pend;

		ck_assert_int_eq(json_integer_value(json_object_get(it, "seq")), (int)k + 1);
		ck_assert_str_eq(JSTR(it, "effect_id"), want);
		ck_assert_str_eq(JSTR(it, "verdict"), k < BULK_N ? "resume" : "refused");
		if (k < BULK_N) {
			ck_assert_str_eq(JSTR(it, "state"), "failed");
			ck_assert_str_eq(JSTR(it, "key"), keys[k]);
		} else {
			ck_assert_msg(strstr(JSTR(it, "detail"), "not known undelivered") != NULL,
			              "the pending effect's verdict: %s", tl_json_text(it));
		}
	}
	it = json_object_get(doc, "totals");
	ck_assert_int_eq(json_integer_value(json_object_get(it, "items")), BULK_N + 1);
	ck_assert_int_eq(json_integer_value(json_object_get(it, "would_resume")), BULK_N);
	ck_assert_int_eq(json_integer_value(json_object_get(it, "refused")), 1);
	json_decref(doc);
	l = log_one(off, "resume.dry_run");
	ck_assert_str_eq(JSTR(l, "actor"), OPERATOR);
	json_decref(l);
	/* the human table too */
	rc = tl_ctl_err(&out, &err, "resume", "--select", sel_all, "--dry-run", (char *)NULL);
	ck_assert_msg(rc == 1 && strstr(out, "total 21: 20 would be resumed, 1 refused") != NULL &&
	              strstr(out, pend) != NULL && strstr(out, "REFUSED") != NULL,
	              "dry run table: %d %s", rc, out);
	free(out);
	free(err);
	/* the dead letters of this test, by filter: exactly the BULK_N */
	CTL_OK(&out, "--json", "resume", "--dead-letters", "--target", "o_flaky", "--class",
	       "exhausted", "--since", since, "--dry-run");
	doc = json_loads(out, 0, NULL);
	ck_assert_msg(doc != NULL, "--dead-letters --dry-run: %s", out);
	free(out);
	items = json_object_get(doc, "items");
	ck_assert_int_eq(json_array_size(items), BULK_N);
	for (i = 0; i < BULK_N; i++) {
		bool found = false;

		json_array_foreach(items, k, it)
			found = found || streq(tl_jstr(it, "effect_id"), ids[i]);
		ck_assert_msg(found, "effect %s is not in the --dead-letters selection", ids[i]);
	}
	json_decref(doc);
	/* a real run over a selection with a refused item: refused whole */
	REFUSED(c, keys[0], 1, "would be refused", "not_known_undelivered", "resume", "--select",
	        sel_all, "--reason", "all of them");
	after = bulk_snapshot(c, like);
	ck_assert_msg(strcmp(before, after) == 0, "a dry run or a refusal changed rows:\n before "
	              "%s\n after  %s", before, after);
	free(before);
	free(after);
	REFUSED(c, keys[0], 2, "name one selection", "usage", "resume", "--select", sel,
	        "--job", "1", "--reason", "x");
	REFUSED(c, keys[0], 2, "--reason TEXT is required", "usage", "resume", "--select", sel);

	/* A real run at 5/s in the background, stopped half-way. */
	snprintf(outp, sizeof(outp), "%s/bulk.out", g_tmp);
	snprintf(errp, sizeof(errp), "%s/bulk.err", g_tmp);
	i = 0;
	argv[i++] = (char *)(uintptr_t)tl_env("ONCEGATE_CTL");
	argv[i++] = (char *)(uintptr_t)"-c";
	argv[i++] = (char *)(uintptr_t)tl_env("ONCEGATE_CONF");
	argv[i++] = (char *)(uintptr_t)"--json";
	argv[i++] = (char *)(uintptr_t)"resume";
	argv[i++] = (char *)(uintptr_t)"--select";
	argv[i++] = sel;
	argv[i++] = (char *)(uintptr_t)"--rate";
	argv[i++] = (char *)(uintptr_t)"5/s";
	argv[i++] = (char *)(uintptr_t)"--reason";
	argv[i++] = (char *)(uintptr_t)"bulk: the target is back";
	argv[i] = NULL;
	off = tl_log_offset();
	pid = spawn(argv, outp, errp, ENV_UNSET);
	proc_register(pid);
	t = tl_now();
	while ((job = qstr(c, "SELECT max(id)::text FROM replay_jobs WHERE kind = 'resume'"
	                   " AND source = 'select: ' || $1", sel, (char *)NULL)) == NULL &&
	       tl_now() < t + 10)
		tl_sleep_ms(20);
	ck_assert_msg(job != NULL, "no resume job appeared");
	while ((done = qnum(c, "SELECT count(*) FROM resume_job_items WHERE job_id = $1::bigint"
	                    " AND state = 'done'", job, (char *)NULL)) < 5 && tl_now() < t + 15)
		tl_sleep_ms(20);
	ck_assert_int_ge(done, 5);
	CTL_OK(&out, "stop", job, "--reason", "half-way: check what went out");
	free(out);
	/* what was done when the stop was recorded: the job may finish the one
	 * item in hand, no more (however slowly oncegatectl started) */
	at_stop = qnum(c, "SELECT count(*) FROM resume_job_items WHERE job_id = $1::bigint"
	               " AND state = 'done'", job, (char *)NULL);
	ck_assert_msg(wait_exit(pid, 10, &st), "the bulk resume did not stop");
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 4, "a stopped job exits 4, not %d", st);
	/* what is done is consistent, and no more than was due at 5/s */
	done = qnum(c, "SELECT count(*) FROM resume_job_items WHERE job_id = $1::bigint"
	            " AND state = 'done'", job, (char *)NULL);
	pending = qnum(c, "SELECT count(*) FROM resume_job_items WHERE job_id = $1::bigint"
	               " AND state = 'pending'", job, (char *)NULL);
	ck_assert_msg(done >= 5 && done <= at_stop + 1 && done + pending == BULK_N && pending >= 1,
	              "after the stop: %lld done (%lld when it was recorded), %lld pending", done,
	              at_stop, pending);
	ck_assert_int_eq(bulk_inconsistent(c, job), 0);
	v = qstr(c, "SELECT extract(epoch FROM max(done_at) - min(done_at))::text"
	         " FROM resume_job_items WHERE job_id = $1::bigint AND state = 'done'", job,
	         (char *)NULL);
	ck_assert_msg(strtod(v, NULL) >= (double)(done - 1) / BULK_RATE - 0.05,
	              "%lld items done in %s s: faster than 5/s", done, v);
	free(v);
	v = qstr(c, "SELECT state || ' ' || coalesce(stop_requested_by, '-') FROM replay_jobs"
	         " WHERE id = $1::bigint", job, (char *)NULL);
	{
		char want[96];

		snprintf(want, sizeof(want), "stopped %s", OPERATOR);
		ck_assert_str_eq(v, want);
	}
	free(v);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM operator_actions WHERE action = $2"
	                      " AND details->>'job_id' = $1 AND operator = $3", job,
	                      "resume.job_stop", OPERATOR, (char *)NULL), 1);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM operator_actions WHERE action = $2"
	                      " AND details->>'job_id' = $1", job, "resume.job_created",
	                      (char *)NULL), 1);
	l = log_one(off, "resume.job_stop");
	ck_assert_str_eq(JSTR(l, "actor"), OPERATOR);
	ck_assert_str_eq(JSTR(l, "reason"), "half-way: check what went out");
	json_decref(l);
	ck_assert_int_eq(log_count(off, "effect.resumed", (size_t)done),
	                 done);
	{
		char *e = tl_file_slurp(errp, NULL);

		ck_assert_msg(e != NULL && strstr(e, "resume --job") != NULL &&
		              strstr(e, "AddressSanitizer") == NULL && strstr(e, "runtime error") == NULL,
		              "the stopped runner's stderr: %s", e ? e : "");
		free(e);
	}
	/* a replay cannot take it over */
	{
		rc = tl_ctl_err(&out, &err, "replay", "--resume", job, "--reason", "x", (char *)NULL);
		ck_assert_msg(rc == 1 && strstr(err, "resume job") != NULL, "replay --resume of a "
		              "resume job: %d %s", rc, err);
		free(out);
		free(err);
	}

	/* Continued: the pending items only, at 5/s, none twice. */
	off = tl_log_offset();
	t = tl_now();
	CTL_OK(&out, "resume", "--job", job, "--reason", "checked: continue");
	took = tl_now() - t;
	free(out);
	ck_assert_msg(took >= (double)(pending - 1) / BULK_RATE - 0.05,
	              "%lld items at 5/s took %.2f s", pending, took);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM resume_job_items WHERE job_id = $1::bigint"
	                      " AND state = 'done'", job, (char *)NULL), BULK_N);
	ck_assert_int_eq(bulk_inconsistent(c, job), 0);
	ck_assert_int_eq(qnum(c, "SELECT count(*) FROM operator_actions WHERE action = 'resume'"
	                      " AND details->>'job_id' = $1", job, (char *)NULL), BULK_N);
	ck_assert_int_eq(log_count(off, "effect.resumed", (size_t)pending),
	                 pending);
	l = log_one(off, "resume.job_resumed");
	ck_assert_str_eq(JSTR(l, "actor"), OPERATOR);
	json_decref(l);
	v = qstr(c, "SELECT state FROM replay_jobs WHERE id = $1::bigint", job, (char *)NULL);
	ck_assert_str_eq(v, "completed");
	free(v);
	for (i = 0; i < BULK_N; i++)
		DL_EXPECT_EFFECT(c, ids[i], "pending", 0);
	rc = tl_ctl_err(&out, &err, "resume", "--job", job, "--reason", "again", (char *)NULL);
	ck_assert_msg(rc == 1 && strstr(err, "completed") != NULL, "a completed job again: %d %s",
	              rc, err);
	free(out);
	free(err);

	/* not part of the job: it must not go out with it */
	CTL_OK(&out, "reject", pend, "--reason", "bulk test done");
	free(out);

	/* The target is back: the dispatcher sends each effect exactly once. */
	g_flaky_port = g_http_port;
	disp_start(&d);
	for (i = 0; i < BULK_N; i++)
		DL_EXPECT_EFFECT(c, ids[i], "completed", 30);
	tl_sleep_ms(600);
	for (i = 0; i < BULK_N; i++) {
		char pk[256];
		json_t *reqs;

		snprintf(pk, sizeof(pk), "%.199s/crm.tag", keys[i]);
		ck_assert_msg(prov_count(pk, NULL) == 1, "the provider received %zu requests for %s",
		              prov_count(pk, NULL), pk);
		reqs = prov_committed(pk);
		ck_assert_int_eq(json_array_size(reqs), 1);
		json_decref(reqs);
	}
	disp_stop(&d);
	g_flaky_port = 0;
	free(job);
	free(since);
	PQfinish(c);
}
END_TEST

/* ---- the suite -------------------------------------------------------------------- */

TL_SUITE(ops_suite, "ops",
         {"ops", TEST_TIMEOUT_S, .setup = setup, .teardown = teardown,
          .tests = TL_LIST(test_dead_letter_evidence, test_not_delivered_then_resume,
                           test_resume_before_send, test_reconcile_delivered,
                           test_approval_revoke_and_reject_key, test_refusals,
                           test_kill_switch_logged, test_bulk_resume)})

/* The client id of "dev", and a port nobody listens on. No Check here. */
static bool
suite_prepare(void)
{
	struct sockaddr_in a;
	socklen_t alen = sizeof(a);
	int fd;

	g_key_dev = tl_env("ONCEGATE_API_KEY");
	if (!dl_client_id("dev", g_client, sizeof(g_client)))
		return false;
	fd = socket(AF_INET, SOCK_STREAM, 0);
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
		perror("check_ops: a free port");
		if (fd >= 0)
			close(fd);
		return false;
	}
	g_closed_port = ntohs(a.sin_port);
	close(fd);
	return true;
}

DL_SUITE_MAIN(.name = "check_ops", .prefix = "op", .needed = "ONCEGATE_API_KEY ONCEGATE_LOG",
              .suite = ops_suite, .prepare = suite_prepare, .http_stall_s = STALL_S)

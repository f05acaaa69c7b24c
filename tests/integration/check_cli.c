/*
 * check_cli.c — integration suite: oncegatectl as an operator types it,
 * the real binary against the stack of ./dev test. Two tenants (dev and
 * RUN-b) hold the same key, a support reply waiting for approval on each;
 * one tenant's run is rejected with a reason in Russian, Chinese and emoji.
 *
 *   help       every command's --help (before or after it) exits 0 and
 *              prints its full usage, every option a wrong call names, the
 *              JSON rule and the exit codes; a wrong call prints the same
 *              usage on stderr and exits 2; --version anywhere;
 *   anywhere   every command gives the same exit code and the same JSON
 *              whether -c and --json stand before or after it (or between
 *              its words);
 *   json       every --json output is exactly one JSON document, an array
 *              for a list, with the API's field names (key, type; never
 *              idempotency_key or effect_type for the run's key and the
 *              effect's type); a bulk replay job is one document too;
 *   time       every option that takes a time (report --since, deadletter
 *              list --since, resume --dead-letters --since, purge
 *              --older-than) reads 90s, 15m, 2h, 7d, 2w and RFC 3339
 *              timestamps, and refuses anything else with exit 2 and a
 *              message naming the option;
 *   pending    approval list shows the revoked challenges of the rejected
 *              run, approval list --pending only the ones still waiting;
 *   operator   --operator is no option (exit 2); the operator recorded is
 *              the database role, whatever USER or SUDO_USER say;
 *   export     decisions through the page, the decision API (two tenants
 *              sharing a key) and a contract's rules, exported as CSV and as
 *              JSON lines: the CSV parsed back per RFC 4180 (a reason with
 *              commas and quotes in four scripts intact) equals the
 *              JSON lines and the database's rows, hashes included; read
 *              a decision a page, the pages give the same rows in order;
 *   migrate    with nothing pending, migrate exits 0 for every role that may
 *              read the schema (operator, auditor, both daemons' roles);
 *              with a migration pending, run as the operator, it exits 1,
 *              names the role that must apply it, never says "permission
 *              denied", and applies nothing.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "dispatchlib.h"
#include "gate.h"
#include "testlib.h"

#define REASON   "Клиент отозвал заказ — 客户取消了订单 🚫📦 (тикет #48213)"
#define MAXARGS  32

#define JSTR(o, n) (tl_jstr((o), (n)) ? tl_jstr((o), (n)) : "(none)")

static char g_key[160];      /* the key both tenants claimed */
static char g_new[2][160];   /* the keys the bulk replay gives */

/* ---- running the binary ------------------------------------------------------ */

/* Runs oncegatectl with exactly these words (no -c added) and env extra
 * ("NAME=value" or NULL) set, connected as the stack's operator role
 * (tl_ctl_role); stdout and stderr captured (malloc'd). */
static int
run_env(char **out, char **err, const char *extra, const char *const *words)
{
	char po[300], pe[300];
	char *argv[MAXARGS + 2];
	int st, i, n = 0;
	pid_t pid;

	snprintf(po, sizeof(po), "%s/cli.out", g_tmp);
	snprintf(pe, sizeof(pe), "%s/cli.err", g_tmp);
	argv[n++] = (char *)(uintptr_t)tl_env("ONCEGATE_CTL");
	for (i = 0; words[i] != NULL && n < MAXARGS; i++)
		argv[n++] = (char *)(uintptr_t)words[i];
	argv[n] = NULL;
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0)
			_exit(127);
		if (*tl_ctl_role() != '\0')
			setenv("PGUSER", tl_ctl_role(), 1);
		if (extra != NULL)
			putenv(strdup(extra));
		execv(argv[0], argv);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	*out = tl_file_slurp(po, NULL);
	*err = tl_file_slurp(pe, NULL);
	if (*out == NULL)
		*out = strdup("");
	if (*err == NULL)
		*err = strdup("");
	ck_assert_msg(WIFEXITED(st), "oncegatectl did not exit");
	return WEXITSTATUS(st);
}

static int
run(char **out, char **err, const char *const *words)
{
	return run_env(out, err, NULL, words);
}

/* Does the word before position at take it as its value? */
static bool
splits_value(const char *const *words, int at)
{
	static const char *const valued[] = { "--since", "--client", "--new-key", "--reason",
		                              "--limit", "--older-than", NULL };
	int i;

	for (i = 0; at > 0 && valued[i] != NULL; i++)
		if (strcmp(words[at - 1], valued[i]) == 0)
			return true;
	return false;
}

/* words with "-c CONF" put at position at (0: first; -1: last) and --json
 * at jat (-2: none), into buf. */
static const char *const *
place(const char *buf[MAXARGS + 1], const char *const *words, int at, int jat)
{
	const char *w[MAXARGS];
	int n = 0, m = 0, i, len = 0;

	while (words[len] != NULL)
		len++;
	for (i = 0; i <= len; i++) {
		if (i == (at < 0 ? len : at)) {
			w[n++] = "-c";
			w[n++] = tl_env("ONCEGATE_CONF");
		}
		if (jat != -2 && i == (jat < 0 ? len : jat))
			w[n++] = "--json";
		if (i < len)
			w[n++] = words[i];
	}
	for (m = 0; m < n; m++)
		buf[m] = w[m];
	buf[n] = NULL;
	return buf;
}

/* The words as one line, for messages. */
static const char *
line_of(const char *const *words)
{
	static char s[1024];
	size_t n = 0;
	int i;

	s[0] = '\0';
	for (i = 0; words[i] != NULL && n < sizeof(s) - 2; i++)
		n += (size_t)snprintf(s + n, sizeof(s) - n, "%s%s", i ? " " : "", words[i]);
	return s;
}

/* out as exactly one JSON document (trailing text, a second document or
 * NDJSON fail the test). */
static json_t *
one_doc(const char *out, const char *const *words)
{
	json_error_t e;
	json_t *v = json_loads(out, JSON_DECODE_ANY, &e);

	ck_assert_msg(v != NULL, "`%s --json` is not one JSON document (%s): %.600s",
	              line_of(words), e.text, out);
	return v;
}

/* ---- the data ------------------------------------------------------------------ */

static void
support_run(const char *bearer, const char *to)
{
	struct tl_resp r;

	dl_claim_and_output(bearer, g_key, "support_reply",
	                    json_pack("{s:s, s:s, s:f}", "subject",
	                              "Re: Заказ №48213 — 订单状态 📦",
	                              "body", "Здравствуйте! 您好! Ваш заказ отправлен 🚚. "
	                              "مرحبا، تم شحن طلبك.", "confidence", 0.82),
	                    json_pack("{s:s, s:s, s:{s:s}}", "type", "email.send", "target",
	                              "demo_smtp", "payload", "to", to),
	                    "support-inbox@workflows.example", &r);
	ck_assert_msg(r.status == 202 && strcmp(JSTR(r.json, "outcome"), "awaiting_human") == 0,
	              "support_reply output: HTTP %ld %.800s", r.status, r.body);
	tl_resp_free(&r);
}

/* Both tenants claim g_key and wait for approval; dev's run is then
 * rejected by the operator (its challenge revoked). */
static bool
prepare(void)
{
	if (!dl_tenants_prepare())
		return false;
	snprintf(g_key, sizeof(g_key), "%s-заказ-48213-订单-🚀", tl_run);
	snprintf(g_new[0], sizeof(g_new[0]), "%s-заказ-48213-v2", tl_run);
	snprintf(g_new[1], sizeof(g_new[1]), "%s-заказ-48213-v3", tl_run);
	return true;
}

/* An unchecked fixture: once, in the suite's own process. */
static void
data_setup(void)
{
	const char *w[] = { "-c", tl_env("ONCEGATE_CONF"), "reject", g_key, "--client", "dev",
		            "--reason", REASON, NULL };
	char *out, *err;
	int rc;

	ck_assert_msg(dl_key_b != NULL, "the second tenant could not be added");
	support_run(dl_key_dev, "kunde@example.de");
	support_run(dl_key_b, "klient.ivanova@primer.example");
	rc = run(&out, &err, w);
	ck_assert_msg(rc == 0, "reject: exit %d: %s", rc, err);
	free(out);
	free(err);
}

/* ---- the commands -------------------------------------------------------------- */

struct form {
	const char *words[12];
	bool list;             /* --json gives an array */
};

/* One form of every command that leaves the data as it is (or that is
 * refused the same way each time). */
static const struct form *
forms(size_t *n)
{
	static struct form f[] = {
		{ { "migrate", "--status", NULL }, true },
		{ { "client", "list", NULL }, true },
		{ { "config", "check", NULL }, false },
		{ { "sends", "status", NULL }, false },
		{ { "kill-switch", "status", NULL }, false },
		{ { "explain", NULL, "--client", "dev", NULL }, false },
		{ { "report", "--since", "7d", NULL }, false },
		{ { "deadletter", "list", "--since", "2h", NULL }, true },
		{ { "deadletter", "show", "00000000-0000-4000-8000-000000000000", NULL }, false },
		{ { "approval", "list", NULL }, true },
		{ { "approval", "list", "--pending", "--limit", "50", NULL }, true },
		{ { "purge", "--older-than", "3650d", "--dry-run", NULL }, false },
		{ { "replay", NULL, "--new-key", NULL, "--client", "dev", "--reason", "проверка",
		    "--dry-run", NULL }, false },
		{ { "resume", "--dead-letters", "--since", "15m", "--dry-run", NULL }, false },
		{ { "stop", "999999999", "--reason", "нет такой работы", NULL }, false },
		{ { "reconcile", "00000000-0000-4000-8000-000000000000", "--not-delivered",
		    "--reason", "проверка", NULL }, false },
		{ { "reject", "00000000-0000-4000-8000-000000000000", "--reason", "проверка",
		    NULL }, false },
		{ { "cancel", "00000000-0000-4000-8000-000000000000", "--reason", "проверка",
		    NULL }, false },
		{ { "approval", "revoke", "00000000-0000-4000-8000-000000000000", "--reason",
		    "проверка", NULL }, false },
	};

	f[5].words[1] = g_key;
	f[12].words[1] = g_key;
	f[12].words[3] = g_new[0];
	*n = sizeof(f) / sizeof(f[0]);
	return f;
}

/* What stays the same from one call to the next: the exit code, and the
 * JSON without the clocks (ages, waits, the report's period). */
static void
strip_clocks(json_t *v)
{
	static const char *const clocks[] = {
		"waiting_seconds", "expires_in_seconds", "age_seconds", "since", "until",
		"counters_updated_at", "approval_wait_p50_s", "approval_wait_p95_s",
		"oldest_open_dead_letter_s",
	};
	const char *k;
	json_t *m;
	size_t i;

	if (json_is_object(v)) {
		for (i = 0; i < sizeof(clocks) / sizeof(clocks[0]); i++)
			json_object_del(v, clocks[i]);
		json_object_foreach(v, k, m)
			strip_clocks(m);
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, m)
			strip_clocks(m);
	}
}

/* ---- help ---------------------------------------------------------------------- */

static const struct {
	const char *name;
	const char *options[12];   /* every option the command takes */
} g_commands[] = {
	{ "migrate", { "--status", NULL } },
	{ "client", { "add", "revoke", "list", "--reason", NULL } },
	{ "config", { "check", NULL } },
	{ "sends", { "stop|resume", "status", "--reason", NULL } },
	{ "kill-switch", { "engage|release", "status", "--reason", NULL } },
	{ "replay", { "--new-key", "--reason", "--payload", "--client", "--dry-run", "--force",
	              "--map", "--rate", "--resume", NULL } },
	{ "stop", { "JOB", "--reason", NULL } },
	{ "explain", { "KEY", "--client", NULL } },
	{ "report", { "--since TIME", "RFC 3339", NULL } },
	{ "purge", { "--older-than TIME", "--reason", "--dry-run", "RFC 3339", NULL } },
	{ "deadletter", { "list", "show", "--since TIME", "--class", "--target", "--state",
	                  "--limit", "RFC 3339", NULL } },
	{ "reconcile", { "--delivered", "--provider-id", "--not-delivered", "--reason",
	                 "--expect", NULL } },
	{ "resume", { "--reason", "--expect", "--select", "--dead-letters", "--class",
	              "--target", "--since TIME", "--rate", "--dry-run", "--job", NULL } },
	{ "reject", { "EFFECT", "KEY", "--reason", "--client", "--expect", NULL } },
	{ "approval", { "list", "--pending", "--limit", "revoke", "resend", "--reason", NULL } },
	{ "cancel", { "EFFECT", "--reason", NULL } },
	{ "export", { "--format", "jsonl|csv", "--since TIME", "RFC 3339", NULL } },
};

#define NCOMMANDS (sizeof(g_commands) / sizeof(g_commands[0]))

static void
expect_exit_codes(const char *text, const char *what)
{
	ck_assert_msg(strstr(text, "0 done") != NULL && strstr(text, "1 refused") != NULL &&
	              strstr(text, "2 usage") != NULL && strstr(text, "3 database unavailable") &&
	              strstr(text, "4 a bulk job stopped") != NULL,
	              "%s does not give the exit codes: %s", what, text);
}

START_TEST(test_help_full_usage)
{
	const char *buf[MAXARGS + 1];
	char *out, *err, *out2, *err2, usage[64];
	size_t i, k;
	int rc;

	for (i = 0; i < NCOMMANDS; i++) {
		const char *after[] = { g_commands[i].name, "--help", NULL };
		const char *before[] = { "--help", g_commands[i].name, NULL };
		const char *wrong[] = { g_commands[i].name, "--no-such-option", NULL };

		snprintf(usage, sizeof(usage), "usage: oncegatectl %s ", g_commands[i].name);
		rc = run(&out, &err, place(buf, after, -1, -2));
		ck_assert_msg(rc == 0, "%s --help: exit %d: %s", g_commands[i].name, rc, err);
		ck_assert_msg(strstr(out, usage) != NULL, "%s --help: no usage: %s",
		              g_commands[i].name, out);
		for (k = 0; g_commands[i].options[k] != NULL; k++)
			ck_assert_msg(strstr(out, g_commands[i].options[k]) != NULL,
			              "%s --help does not name %s: %s", g_commands[i].name,
			              g_commands[i].options[k], out);
		ck_assert_msg(strstr(out, "--json") != NULL, "%s --help: no --json: %s",
		              g_commands[i].name, out);
		expect_exit_codes(out, g_commands[i].name);
		/* --help before the command says the same */
		rc = run(&out2, &err2, place(buf, before, 0, -2));
		ck_assert_msg(rc == 0 && strcmp(out, out2) == 0, "--help %s differs from %s --help",
		              g_commands[i].name, g_commands[i].name);
		free(out2);
		free(err2);
		/* a wrong call: exit 2 and no less than --help says */
		rc = run(&out2, &err2, place(buf, wrong, 0, -2));
		ck_assert_msg(rc == 2, "%s --no-such-option: exit %d", g_commands[i].name, rc);
		ck_assert_msg(strstr(err2, strstr(out, usage)) != NULL ||
		              strstr(out, strstr(err2, usage) ?: "\x01") != NULL,
		              "%s: a wrong call's usage differs from --help:\n%s\n---\n%s",
		              g_commands[i].name, err2, out);
		ck_assert_msg(strstr(err2, "2 usage") != NULL, "%s: a wrong call hides the exit "
		              "codes: %s", g_commands[i].name, err2);
		free(out2);
		free(err2);
		free(out);
		free(err);
	}
	/* the whole program's */
	{
		const char *h[] = { "--help", NULL }, *v1[] = { "--version", NULL },
		           *v2[] = { "report", "--version", NULL }, *none[] = { NULL };

		rc = run(&out, &err, h);
		ck_assert_int_eq(rc, 0);
		for (i = 0; i < NCOMMANDS; i++)
			ck_assert_msg(strstr(out, g_commands[i].name) != NULL, "--help lacks %s",
			              g_commands[i].name);
		ck_assert_msg(strstr(out, "before or after the command") != NULL, "%s", out);
		expect_exit_codes(out, "--help");
		free(out);
		free(err);
		rc = run(&out, &err, v1);
		ck_assert_msg(rc == 0 && strstr(out, "oncegatectl") != NULL, "--version: %d %s", rc,
		              out);
		free(out);
		free(err);
		rc = run(&out2, &err2, place(buf, v2, -1, -2));
		ck_assert_msg(rc == 0 && strstr(out2, "oncegatectl") != NULL, "report --version");
		free(out2);
		free(err2);
		rc = run(&out, &err, none);
		ck_assert_msg(rc == 2 && strstr(err, "usage: oncegatectl") != NULL, "no command: %d",
		              rc);
		free(out);
		free(err);
	}
}
END_TEST

/* ---- global options anywhere -------------------------------------------------- */

START_TEST(test_global_options_anywhere)
{
	const char *buf[MAXARGS + 1];
	const struct form *f;
	size_t n, i;
	char *out, *err;

	f = forms(&n);
	for (i = 0; i < n; i++) {
		int len = 0, rc0, rc, at;
		json_t *d0, *d;
		char *t0;

		while (f[i].words[len] != NULL)
			len++;
		/* the reference: both before the command */
		rc0 = run(&out, &err, place(buf, f[i].words, 0, 0));
		ck_assert_msg(rc0 != 2 && rc0 != 3, "`%s`: exit %d: %s", line_of(buf), rc0, err);
		d0 = one_doc(out, buf);
		strip_clocks(d0);
		t0 = tl_json_text(d0);
		free(out);
		free(err);
		/* -c and --json after the command, at its end, and between its words */
		for (at = 1; at <= len; at++) {
			if (splits_value(f[i].words, at))
				continue;
			rc = run(&out, &err, place(buf, f[i].words, at == len ? -1 : at,
			                           at == len ? 1 : -1));
			ck_assert_msg(rc == rc0, "`%s`: exit %d, but %d with the options first: %s",
			              line_of(buf), rc, rc0, err);
			d = one_doc(out, buf);
			strip_clocks(d);
			{
				char *t = tl_json_text(d);

				ck_assert_msg(strcmp(t, t0) == 0, "`%s` says\n%s\nbut with the options "
				              "first\n%s", line_of(buf), t, t0);
				free(t);
			}
			json_decref(d);
			free(out);
			free(err);
		}
		free(t0);
		json_decref(d0);
	}
}
END_TEST

/* ---- one JSON document, API names ---------------------------------------------- */

/* No run key or effect type under another name than the API's, anywhere
 * but in an effect's recovery envelope (where the API, too, calls the
 * provider's key idempotency_key). */
static void
expect_api_names(const json_t *v, const char *where)
{
	const char *k;
	json_t *m;
	size_t i;

	if (json_is_object(v)) {
		ck_assert_msg(json_object_get(v, "effect_type") == NULL,
		              "%s: effect_type (the API says type): %s", where, tl_json_text(v));
		ck_assert_msg(json_object_get(v, "idempotency_key") == NULL ||
		              json_object_get(v, "operation") != NULL,
		              "%s: idempotency_key (the API says key): %s", where, tl_json_text(v));
		json_object_foreach((json_t *)(uintptr_t)v, k, m)
			expect_api_names(m, where);
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, m)
			expect_api_names(m, where);
	}
}

START_TEST(test_json_one_document)
{
	const char *buf[MAXARGS + 1];
	const struct form *f;
	char *out, *err, path[300];
	size_t n, i;
	json_t *d, *o;
	int rc;

	f = forms(&n);
	for (i = 0; i < n; i++) {
		rc = run(&out, &err, place(buf, f[i].words, -1, -1));
		d = one_doc(out, buf);
		if (f[i].list)
			ck_assert_msg(json_is_array(d), "`%s` lists, but not as an array: %s",
			              line_of(buf), out);
		else
			ck_assert_msg(json_is_object(d), "`%s`: %s", line_of(buf), out);
		/* a dry run that lists items it would refuse exits 1 with its list */
		ck_assert_msg(rc == 0 || json_integer_value(json_object_get(d, "exit")) == rc ||
		              strcmp(f[i].words[0], "explain") == 0 ||
		              (rc == 1 && json_is_true(json_object_get(d, "dry_run")) &&
		               json_integer_value(json_object_get(json_object_get(d, "totals"),
		                                                  "refused")) > 0),
		              "`%s` exits %d; its document: %s", line_of(buf), rc, out);
		/* (the settings of config check are named as in the file) */
		if (strcmp(f[i].words[0], "config") != 0)
			expect_api_names(d, line_of(buf));
		json_decref(d);
		free(out);
		free(err);
	}
	/* explain: the effects' type, the run's key */
	{
		const char *w[] = { "explain", g_key, "--client", "dev", "--json", NULL };

		rc = run(&out, &err, place(buf, w, 0, -2));
		ck_assert_msg(rc == 0, "explain: %d %s", rc, err);
		d = one_doc(out, buf);
		ck_assert_str_eq(JSTR(d, "key"), g_key);
		json_decref(d);
		free(out);
		free(err);
	}
	/* approval list: the key as the API names it, both tenants */
	{
		const char *w[] = { "approval", "list", NULL };
		int mine = 0;

		rc = run(&out, &err, place(buf, w, -1, -1));
		d = one_doc(out, buf);
		json_array_foreach(d, i, o)
			mine += strcmp(JSTR(o, "key"), g_key) == 0;
		ck_assert_msg(mine == 2, "approval list shows %d challenges of the shared key, "
		              "expected 2 (one a tenant): %s", mine, out);
		json_decref(d);
		free(out);
		free(err);
	}
	/* a bulk replay job (two tenants' key, dev's rejected run and one more):
	 * one document with every item, not a line an item */
	{
		FILE *m;
		const char *w[] = { "replay", "--map", path, "--client", "dev", "--rate", "50/s",
			            "--reason", REASON, NULL };
		json_t *res;

		snprintf(path, sizeof(path), "%s/map.txt", g_tmp);
		m = fopen(path, "w");
		ck_assert_ptr_nonnull(m);
		fprintf(m, "# the rejected order, corrected\n%s %s\n", g_key, g_new[0]);
		fclose(m);
		rc = run(&out, &err, place(buf, w, -1, -1));
		ck_assert_msg(rc == 0, "replay --map: exit %d: %s", rc, err);
		d = one_doc(out, buf);
		res = json_object_get(d, "results");
		ck_assert_msg(json_is_array(res) && json_array_size(res) == 1 &&
		              json_integer_value(json_object_get(d, "job")) > 0 &&
		              strcmp(JSTR(d, "end"), "completed") == 0 &&
		              strcmp(JSTR(json_array_get(res, 0), "key"), g_key) == 0 &&
		              strcmp(JSTR(json_array_get(res, 0), "new_key"), g_new[0]) == 0,
		              "replay --map --json: %s", out);
		json_decref(d);
		free(out);
		free(err);
	}
}
END_TEST

/* ---- one time grammar ---------------------------------------------------------- */

/* The options that take a time, with what else they need; the time goes
 * where NULL stands. */
static const char *const g_timed[][8] = {
	{ "report", "--since", NULL },
	{ "deadletter", "list", "--since", NULL },
	{ "resume", "--dead-letters", "--dry-run", "--since", NULL },
	{ "purge", "--dry-run", "--older-than", NULL },
};

START_TEST(test_time_grammar)
{
	char ts[5][64], future[64];
	const char *good[] = { "90s", "15m", "2h", "7d", "2w", ts[0], ts[1], ts[2], ts[3], ts[4] };
	const char *bad[] = { "5x", "7", "-3d", "3 d", "7D", "0s", "", "yesterday", "P7D",
		              "2026-13-01T00:00:00Z", "2025-02-30T00:00:00Z", "2025-05-01T08:00:00",
		              "2025-05-01T25:00:00Z", "2025-05-01T08:00:00+2:00", future };
	const char *buf[MAXARGS + 1], *w[12];
	time_t now = time(NULL), then = now - 3 * 86400;
	struct tm tm;
	size_t i, j;
	char *out, *err;
	int rc, k;

	gmtime_r(&then, &tm);
	strftime(ts[0], sizeof(ts[0]), "%Y-%m-%dT%H:%M:%SZ", &tm);
	strftime(ts[1], sizeof(ts[1]), "%Y-%m-%dT%H:%M:%S.250Z", &tm);
	strftime(ts[2], sizeof(ts[2]), "%Y-%m-%d", &tm);
	then += 2 * 3600;   /* the same instant, two hours east */
	gmtime_r(&then, &tm);
	strftime(ts[3], sizeof(ts[3]), "%Y-%m-%dT%H:%M:%S+02:00", &tm);
	then -= 2 * 3600 + 90 * 60;
	gmtime_r(&then, &tm);
	strftime(ts[4], sizeof(ts[4]), "%Y-%m-%dt%H:%M:%S-01:30", &tm);
	then = now + 86400;
	gmtime_r(&then, &tm);
	strftime(future, sizeof(future), "%Y-%m-%dT%H:%M:%SZ", &tm);

	for (i = 0; i < sizeof(g_timed) / sizeof(g_timed[0]); i++) {
		for (j = 0; j < sizeof(good) / sizeof(good[0]) + sizeof(bad) / sizeof(bad[0]); j++) {
			bool ok = j < sizeof(good) / sizeof(good[0]);
			const char *t = ok ? good[j] : bad[j - sizeof(good) / sizeof(good[0])];

			for (k = 0; g_timed[i][k] != NULL; k++)
				w[k] = g_timed[i][k];
			w[k++] = t;
			w[k] = NULL;
			rc = run(&out, &err, place(buf, w, 0, -1));
			if (ok) {
				/* an empty selection of resume is refused (1), never a usage error */
				ck_assert_msg(rc == 0 || (rc == 1 && strcmp(w[0], "resume") == 0),
				              "`%s`: exit %d: %s", line_of(buf), rc, err);
				json_decref(one_doc(out, buf));
			} else {
				ck_assert_msg(rc == 2, "`%s`: exit %d, expected 2 (usage)", line_of(buf),
				              rc);
				ck_assert_msg(strstr(err, g_timed[i][k - 2]) != NULL &&
				              (t == future ? strstr(err, "not in the past") != NULL
				                           : strstr(err, "not a time") != NULL &&
				                                 strstr(err, "RFC 3339") != NULL),
				              "`%s`: the message must name the option and say what a "
				              "time is: %s", line_of(buf), err);
				{
					json_t *d = one_doc(out, buf);

					ck_assert_msg(strcmp(JSTR(d, "error"), "usage") == 0 &&
					              json_integer_value(json_object_get(d, "exit")) == 2,
					              "`%s` printed %s", line_of(buf), out);
					json_decref(d);
				}
			}
			free(out);
			free(err);
		}
	}
}
END_TEST

/* ---- approval list --pending --------------------------------------------------- */

START_TEST(test_approval_list_pending)
{
	const char *all[] = { "approval", "list", "--json", NULL };
	const char *pend[] = { "--json", "approval", "list", "--pending", NULL };
	const char *buf[MAXARGS + 1];
	int dev_all = 0, dev_pend = 0, b_pend = 0;
	char *out, *err;
	json_t *d, *o;
	size_t i;

	ck_assert_int_eq(run(&out, &err, place(buf, all, 0, -2)), 0);
	d = one_doc(out, buf);
	json_array_foreach(d, i, o) {
		if (strcmp(JSTR(o, "key"), g_key) == 0 && strcmp(JSTR(o, "client"), "dev") == 0) {
			dev_all++;
			ck_assert_msg(strcmp(JSTR(o, "state"), "pending") != 0,
			              "the rejected run's challenge is still pending: %s",
			              tl_json_text(o));
		}
	}
	json_decref(d);
	free(out);
	free(err);
	ck_assert_msg(dev_all >= 1, "approval list leaves out the rejected run's challenge");
	ck_assert_int_eq(run(&out, &err, place(buf, pend, 0, -2)), 0);
	d = one_doc(out, buf);
	json_array_foreach(d, i, o) {
		ck_assert_msg(strcmp(JSTR(o, "state"), "pending") == 0,
		              "approval list --pending shows a %s challenge", JSTR(o, "state"));
		if (strcmp(JSTR(o, "key"), g_key) == 0) {
			dev_pend += strcmp(JSTR(o, "client"), "dev") == 0;
			b_pend += strcmp(JSTR(o, "client"), dl_client_b) == 0;
		}
	}
	json_decref(d);
	free(out);
	free(err);
	ck_assert_msg(dev_pend == 0 && b_pend == 1,
	              "--pending: %d of dev's, %d of the other tenant's (expected 0 and 1)",
	              dev_pend, b_pend);
	/* the text form says the state too */
	{
		const char *txt[] = { "approval", "list", NULL };

		ck_assert_int_eq(run(&out, &err, place(buf, txt, -1, -2)), 0);
		ck_assert_msg(strstr(out, "STATE") != NULL && strstr(out, "revoked") != NULL,
		              "approval list: %s", out);
		free(out);
		free(err);
	}
}
END_TEST

/* ---- the operator is the database role ---------------------------------------- */

START_TEST(test_operator_is_the_role)
{
	const char *buf[MAXARGS + 1];
	const char *w[] = { "reject", g_key, "--client", dl_client_b, "--reason", REASON,
		            "--operator", "ops.ivanova", NULL };
	const char *ok[] = { "reject", g_key, "--client", dl_client_b, "--reason", REASON, NULL };
	PGconn *c = tl_pg_connect();
	const char *p[3] = { g_key, REASON, tl_ctl_role() };
	char *out, *err;
	int rc;

	rc = run(&out, &err, place(buf, w, 0, -2));
	ck_assert_msg(rc == 2, "--operator: exit %d, expected 2 (no such option): %s", rc, err);
	free(out);
	free(err);
	rc = run_env(&out, &err, "SUDO_USER=ops.ivanova", place(buf, ok, 0, -1));
	ck_assert_msg(rc == 0, "reject of the other tenant's run: exit %d: %s", rc, err);
	{
		json_t *d = one_doc(out, buf);

		ck_assert_str_eq(JSTR(d, "operator"), tl_ctl_role());
		ck_assert_str_eq(JSTR(d, "key"), g_key);
		json_decref(d);
	}
	free(out);
	free(err);
	/* both rejections (dev's in the setup, this one) name the role */
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM operator_actions WHERE"
	                             " idempotency_key = $1 AND reason = $2 AND action = 'reject'"
	                             " AND operator = $3", 3, p), 2);
	p[1] = tl_ctl_role();
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM operator_actions WHERE"
	                             " idempotency_key = $1 AND operator <> $2", 2, p), 0);
	PQfinish(c);
}
END_TEST

/* ---- migrate as a role that may only read the schema ------------------------ */

START_TEST(test_migrate_roles)
{
	static const char *const roles[] = { "ONCEGATE_PGUSER_OPERATOR", "ONCEGATE_PGUSER_AUDITOR",
		                             "ONCEGATE_PGUSER_FCGI", "ONCEGATE_PGUSER_DISPATCH" };
	const char *conf = tl_env("ONCEGATE_CONF");
	char env[160], dir[300], path[400], cmd[1200], *text, *at, *out, *err;
	const char *w[] = { "-c", conf, "migrate", NULL };
	PGconn *c = tl_pg_connect();
	size_t i;
	FILE *f;
	int rc;

	for (i = 0; i < sizeof(roles) / sizeof(roles[0]); i++) {
		snprintf(env, sizeof(env), "PGUSER=%s", tl_env(roles[i]));
		rc = run_env(&out, &err, env, w);
		ck_assert_msg(rc == 0, "migrate with nothing pending as %s: exit %d: %s", env, rc, err);
		ck_assert_msg(strstr(err, "0 migrations applied") != NULL, "as %s: %s", env, err);
		free(out);
		free(err);
	}

	/* the stack's migrations and one more, in a directory of their own */
	snprintf(dir, sizeof(dir), "%s/sql-pending", g_tmp);
	text = tl_file_slurp(conf, NULL);
	ck_assert_msg(text != NULL && (at = strstr(text, "\nsql_dir = ")) != NULL,
	              "%s has no sql_dir line", conf);
	at += strlen("\nsql_dir = ");
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s' && cp '%.*s'/[0-9]*_*.sql '%s'/", dir,
	         (int)strcspn(at, "\n"), at, dir);
	ck_assert_int_eq(system(cmd), 0);
	snprintf(path, sizeof(path), "%s/990_upgrade_probe.sql", dir);
	ck_assert((f = fopen(path, "w")) != NULL);
	fputs("-- a migration only the owner may apply; the test never applies it\n"
	      "CREATE TABLE upgrade_probe (note text NOT NULL);\n", f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/pending.conf", g_tmp);
	ck_assert((f = fopen(path, "w")) != NULL);
	fprintf(f, "%.*s%s%s", (int)(at - text), text, dir, at + strcspn(at, "\n"));
	fclose(f);
	free(text);

	w[1] = path;
	rc = run(&out, &err, w);
	ck_assert_msg(rc == 1, "migrate with 990 pending as the operator: exit %d: %s", rc, err);
	ck_assert_msg(strstr(err, "990_upgrade_probe") != NULL && strstr(err, "\"oncegate\"") &&
	                  strstr(err, "PGUSER=oncegate oncegatectl migrate") != NULL,
	              "migrate names neither the migration nor the owner: %s", err);
	ck_assert_msg(strstr(err, "permission denied") == NULL, "a raw refusal: %s", err);
	free(out);
	free(err);
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM schema_migrations"
	                             " WHERE version = '990_upgrade_probe'", 0, NULL), 0);
	ck_assert_int_eq(tl_pg_count(c, "SELECT count(*) FROM pg_class"
	                             " WHERE relname = 'upgrade_probe'", 0, NULL), 0);
	/* --status as the operator lists it as pending */
	{
		const char *st[] = { "-c", path, "--json", "migrate", "--status", NULL };

		rc = run(&out, &err, st);
		ck_assert_msg(rc == 0 && strstr(out, "\"990_upgrade_probe\"") != NULL &&
		                  strstr(out, "\"pending\"") != NULL,
		              "migrate --status: exit %d: %s %s", rc, out, err);
		free(out);
		free(err);
	}
	PQfinish(c);
}
END_TEST


/* ---- export -------------------------------------------------------------------- */

/* An approver's reason that CSV must quote: commas and double quotes (a
 * reason is one line of plain text), in Russian, Chinese, Arabic (right
 * to left) and emoji. */
#define EXPORT_REASON "Проверил, \"всё верно\" — отправляйте. 已核对，可以发送。 تمت المراجعة ✅"

/* One RFC 4180 record of text at *pos (advanced past its CRLF) as a new
 * array of strings; NULL at the end of the text. */
static json_t *
csv_record(const char *text, size_t *pos)
{
	const char *p = text + *pos;
	json_t *rec;
	char *field;
	size_t n;

	if (*p == '\0')
		return NULL;
	rec = json_array();
	field = malloc(strlen(p) + 1);
	ck_assert(field != NULL);
	for (;;) {
		n = 0;
		if (*p == '"') {
			for (p++;; p++) {
				ck_assert_msg(*p != '\0', "a quoted field never ends: %.200s", text + *pos);
				if (*p == '"' && p[1] == '"')
					field[n++] = *p++;
				else if (*p == '"')
					break;
				else
					field[n++] = *p;
			}
			p++;
		} else {
			while (*p != ',' && *p != '\r' && *p != '\n' && *p != '\0' && *p != '"')
				field[n++] = *p++;
			ck_assert_msg(*p != '"', "a quote inside an unquoted field: %.200s", text + *pos);
		}
		field[n] = '\0';
		json_array_append_new(rec, json_string(field));
		if (*p == ',') {
			p++;
			continue;
		}
		ck_assert_msg(p[0] == '\r' && p[1] == '\n', "a record not ended by CRLF: %.200s",
		              text + *pos);
		p += 2;
		break;
	}
	free(field);
	*pos = (size_t)(p - text);
	return rec;
}

/* What the database holds for the decisions of the run key of client,
 * oldest first: one object a vote (or the contract's approval) with the
 * export's columns, every value as text ("" for none). */
static json_t *
expected_decisions(PGconn *c, const char *client, const char *key)
{
	char *text = qstr(c,
	    "SELECT coalesce(json_agg(d ORDER BY d.o), '[]') FROM ("
	    "  SELECT v.created_at AS o, og_ts(v.created_at) AS at, k.name AS client,"
	    "         v.idempotency_key AS key, r.contract, v.approval_id::text AS approval_id,"
	    "         v.subject, CASE WHEN v.via_client_id IS NULL THEN 'page' ELSE 'client' END"
	    "         AS via, coalesce(vc.name, '') AS via_client, v.decision,"
	    "         coalesce(v.reason, '') AS reason, v.final::text AS final,"
	    "         v.edited::text AS edited, v.output_hash AS draft_hash, r.output_hash,"
	    "         coalesce(r.edited_output_hash, '') AS edited_output_hash, r.contract_hash,"
	    "         coalesce((SELECT o.payload_hash FROM effect_outbox o"
	    "                    WHERE o.client_id = r.client_id"
	    "                      AND o.idempotency_key = r.idempotency_key"
	    "                      AND o.effect_type = r.effect->>'type'), '') AS effect_hash"
	    "    FROM approval_votes v JOIN api_clients k ON k.id = v.client_id"
	    "    JOIN workflow_runs r ON r.client_id = v.client_id"
	    "                        AND r.idempotency_key = v.idempotency_key"
	    "    LEFT JOIN api_clients vc ON vc.id = v.via_client_id"
	    "   WHERE k.name = $1 AND v.idempotency_key = $2"
	    "  UNION ALL"
	    "  SELECT r.decided_at, og_ts(r.decided_at), k.name, r.idempotency_key, r.contract, '',"
	    "         '', 'contract', '', 'auto', '', 'true', 'false', r.output_hash,"
	    "         r.output_hash, '', r.contract_hash,"
	    "         (SELECT o.payload_hash FROM effect_outbox o"
	    "           WHERE o.client_id = r.client_id AND o.idempotency_key = r.idempotency_key"
	    "             AND o.effect_type = r.effect->>'type')"
	    "    FROM workflow_runs r JOIN api_clients k ON k.id = r.client_id"
	    "   WHERE k.name = $1 AND r.idempotency_key = $2 AND r.decision = 'auto') d",
	    client, key, NULL);
	json_t *rows = json_loads(text, 0, NULL), *row;
	size_t i;

	ck_assert(json_is_array(rows));
	json_array_foreach(rows, i, row)
		json_object_del(row, "o");
	free(text);
	return rows;
}

/* The exported rows (objects of the export's columns, values as text) of
 * one run, in the order exported. */
static json_t *
rows_of(json_t *all, const char *client, const char *key)
{
	json_t *rows = json_array(), *row;
	size_t i;

	json_array_foreach(all, i, row)
		if (strcmp(JSTR(row, "client"), client) == 0 && strcmp(JSTR(row, "key"), key) == 0)
			json_array_append(rows, row);
	return rows;
}

/* A JSON lines row as text values: null as "", booleans as true/false. */
static json_t *
as_text(const json_t *o)
{
	json_t *t = json_object(), *v;
	const char *k;

	json_object_foreach((json_t *)(uintptr_t)o, k, v) {
		if (json_is_string(v))
			json_object_set(t, k, v);
		else if (json_is_boolean(v))
			json_object_set_new(t, k, json_string(json_is_true(v) ? "true" : "false"));
		else
			ck_assert_msg(json_is_null(v), "%s is neither text, a boolean nor null", k);
		if (json_is_null(v))
			json_object_set_new(t, k, json_string(""));
	}
	return t;
}

static void
same_rows(json_t *got, json_t *want, const char *what)
{
	char *g = json_dumps(got, JSON_SORT_KEYS), *w = json_dumps(want, JSON_SORT_KEYS);

	ck_assert_msg(json_equal(got, want), "%s:\n got  %s\n want %s", what, g, w);
	free(g);
	free(w);
}

START_TEST(test_export)
{
	const char *csvw[] = { "-c", tl_env("ONCEGATE_CONF"), "export", "--since", NULL,
		               "--format", "csv", NULL };
	const char *jw[] = { "-c", tl_env("ONCEGATE_CONF"), "export", "--format", "jsonl",
		             "--since", NULL, NULL };
	static const char *const columns[] = {
		"at", "client", "key", "contract", "approval_id", "subject", "via", "via_client",
		"decision", "reason", "final", "edited", "draft_hash", "output_hash",
		"edited_output_hash", "contract_hash", "effect_hash", NULL,
	};
	PGconn *c = tl_pg_connect();
	char key[160], auto_key[160], since[64], *out, *err, *now, *line, *save = NULL;
	long long since_s;
	const char *tenants[2] = { "dev", dl_client_b };
	json_t *csv = json_array(), *jsonl = json_array(), *rec, *head, *want, *got;
	struct tl_resp r;
	size_t pos = 0, i, t;
	int rc;

	now = qstr(c, "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
	           NULL);
	snprintf(since, sizeof(since), "%s", now);
	free(now);
	since_s = qnum(c, "SELECT floor(extract(epoch FROM $1::timestamptz))::bigint", since,
	               (char *)NULL);
	csvw[4] = since;
	jw[6] = since;
	/* both tenants: the same key, a quorum mail; anna approves on the page,
	 * then on the other tenant's run a person rejects through the API */
	snprintf(key, sizeof(key), "%s:export/счёт-7 📑", tl_run);
	for (t = 0; t < 2; t++) {
		char id[64], group_id[64], path[128], *token, *csrf, *form;

		dl_claim_and_output(t == 0 ? dl_key_dev : dl_key_b, key, "quorum_mail",
		                    json_pack("{s:s, s:s}", "subject", "Счёт №7 · 請求書 7", "body",
		                              "مرحبا — ваш счёт готов 🧾"),
		                    json_pack("{s:s, s:s, s:{s:[s]}}", "type", "email.send", "target",
		                              "demo_smtp", "payload", "to", "buh@primer.example"),
		                    "olga.petrova@example.com", &r);
		ck_assert_msg(r.status == 202, "output: HTTP %ld %.600s", r.status, r.body);
		free(dl_token_of(&r, 0, group_id, sizeof(group_id))); /* group:customer support */
		token = dl_token_of(&r, 2, id, sizeof(id)); /* anna.kowalska@example.com's */
		tl_resp_free(&r);
		snprintf(path, sizeof(path), "/approve/%s", token);
		csrf = tl_csrf_for(id, "anna.kowalska@example.com");
		form = tl_form("decision", "approve", "reason", EXPORT_REASON, "csrf", csrf,
		               (char *)NULL);
		dl_page_request(path, "anna.kowalska@example.com", NULL, form, NULL, &r, NULL);
		ck_assert_msg(r.status == 303, "page: HTTP %ld %.600s", r.status, r.body);
		tl_resp_free(&r);
		free(form);
		free(csrf);
		free(token);
		if (t == 1) {
			char dpath[160];
			json_t *body = json_pack("{s:s, s:[s], s:s, s:s}", "subject",
			                         "dmitri.volkov@example.com", "groups", "customer support",
			                         "decision", "reject", "reason", "Нет, = неверная сумма; 金额不对");

			rc = tl_ctl(&out, "client", "grant", dl_client_b, "--decide", "quorum_mail",
			            "--approver", "*", "--reason", "экспорт: чат-бот", (char *)NULL);
			ck_assert_msg(rc == 0, "grant: %s", out ? out : "");
			free(out);
			snprintf(dpath, sizeof(dpath), "/v1/approvals/%s/decisions", group_id);
			tl_post_json(dpath, dl_key_b, body, &r);
			json_decref(body);
			ck_assert_msg(r.status == 200, "decide: HTTP %ld %.600s", r.status, r.body);
			tl_resp_free(&r);
			rc = tl_ctl(&out, "client", "ungrant", dl_client_b, "--decide", "quorum_mail",
			            "--approver", "*", "--reason", "экспорт: готово", (char *)NULL);
			free(out);
		}
	}
	/* and a run the contract's rules approve */
	snprintf(auto_key, sizeof(auto_key), "%s:export/лид-8 🏷️", tl_run);
	dl_claim_and_output(dl_key_b, auto_key, "pkey_auto", json_pack("{s:s}", "tag", "lead"),
	                    json_pack("{s:s, s:s, s:{s:s}}", "type", "crm.tag", "target", "demo_http",
	                              "payload", "contact_id", "c-экспорт-8"),
	                    "olga.petrova@example.com", &r);
	ck_assert_msg(r.status == 202, "auto output: HTTP %ld %.600s", r.status, r.body);
	tl_resp_free(&r);

	/* oncegatectl reads --since to the whole second, and refuses one not
	 * yet past: a quick machine waits for the second to end */
	while ((long long)time(NULL) <= since_s)
		tl_sleep_ms(50);
	/* CSV: a header, then records that parse back to the database's rows */
	rc = run(&out, &err, csvw);
	ck_assert_msg(rc == 0, "export csv: exit %d: %s", rc, err);
	ck_assert_msg(strstr(err, "decisions since") != NULL, "export: %s", err);
	head = csv_record(out, &pos);
	ck_assert(head != NULL);
	for (i = 0; columns[i] != NULL; i++)
		ck_assert_str_eq(json_string_value(json_array_get(head, i)), columns[i]);
	ck_assert_uint_eq(json_array_size(head), i);
	while ((rec = csv_record(out, &pos)) != NULL) {
		json_t *o = json_object();

		ck_assert_uint_eq(json_array_size(rec), json_array_size(head));
		for (i = 0; columns[i] != NULL; i++)
			json_object_set(o, columns[i], json_array_get(rec, i));
		json_array_append_new(csv, o);
		json_decref(rec);
	}
	json_decref(head);
	free(out);
	free(err);
	/* JSON lines: one object a line, every column */
	rc = run(&out, &err, jw);
	ck_assert_msg(rc == 0, "export jsonl: exit %d: %s", rc, err);
	for (line = strtok_r(out, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		json_t *o = json_loads(line, 0, NULL);

		ck_assert_msg(json_is_object(o) && json_object_size(o) == i, "a line: %s", line);
		json_array_append_new(jsonl, as_text(o));
		json_decref(o);
	}
	free(out);
	free(err);
	ck_assert_uint_eq(json_array_size(csv), json_array_size(jsonl));
	same_rows(csv, jsonl, "csv and jsonl");
	/* each run's decisions as the database has them, the tenants apart */
	for (t = 0; t < 2; t++) {
		want = expected_decisions(c, tenants[t], key);
		got = rows_of(csv, tenants[t], key);
		ck_assert_uint_eq(json_array_size(want), t == 0 ? 1 : 2);
		same_rows(got, want, tenants[t]);
		json_decref(got);
		json_decref(want);
	}
	got = rows_of(csv, dl_client_b, key);
	rec = json_array_get(got, 0);
	ck_assert_str_eq(JSTR(rec, "reason"), EXPORT_REASON);
	ck_assert_str_eq(JSTR(rec, "via"), "page");
	ck_assert_str_eq(JSTR(rec, "subject"), "anna.kowalska@example.com");
	rec = json_array_get(got, 1);
	ck_assert_str_eq(JSTR(rec, "via"), "client");
	ck_assert_str_eq(JSTR(rec, "via_client"), dl_client_b);
	ck_assert_str_eq(JSTR(rec, "decision"), "reject");
	ck_assert_str_eq(JSTR(rec, "final"), "true");
	json_decref(got);
	want = expected_decisions(c, dl_client_b, auto_key);
	got = rows_of(csv, dl_client_b, auto_key);
	ck_assert_uint_eq(json_array_size(want), 1);
	same_rows(got, want, "the contract's approval");
	ck_assert_msg(strncmp(JSTR(json_array_get(got, 0), "effect_hash"), "sha256:", 7) == 0,
	              "no effect hash: %s", JSTR(json_array_get(got, 0), "effect_hash"));
	json_decref(got);
	json_decref(want);
	/* the export's pages, one decision a page: the cursor carries across
	 * every boundary, each decision once, in the export's order */
	{
		struct db *db = db_new("", 10000);
		long long after_us = 0;
		char *after_seq = NULL;
		size_t n = 0;

		for (;;) {
			json_t *page = NULL, *row;

			ck_assert_int_eq(gate_export_page(db, since, after_us, after_seq, 1, &page), OG_OK);
			if (json_array_size(page) == 0) {
				json_decref(page);
				break;
			}
			row = json_array_get(page, 0);
			rec = json_array_get(csv, n);
			ck_assert_msg(rec != NULL && strcmp(JSTR(row, "key"), JSTR(rec, "key")) == 0 &&
			                  strcmp(JSTR(row, "at"), JSTR(rec, "at")) == 0 &&
			                  strcmp(JSTR(row, "decision"), JSTR(rec, "decision")) == 0,
			              "page %zu: %s %s, the export's row: %s %s", n, JSTR(row, "key"),
			              JSTR(row, "decision"), JSTR(rec, "key"), JSTR(rec, "decision"));
			after_us = (long long)json_integer_value(json_object_get(row, "at_us"));
			free(after_seq);
			after_seq = strdup(JSTR(row, "seq"));
			json_decref(page);
			n++;
		}
		ck_assert_uint_eq(n, json_array_size(csv));
		free(after_seq);
		db_free(db);
	}
	/* oldest first */
	for (i = 1; i < json_array_size(csv); i++)
		ck_assert_msg(strcmp(JSTR(json_array_get(csv, i - 1), "at"),
		                     JSTR(json_array_get(csv, i), "at")) <= 0, "out of order at %zu", i);
	json_decref(csv);
	json_decref(jsonl);
	PQfinish(c);
}
END_TEST

TL_SUITE(cli_suite, "cli",
         {"cli", 240, .unchecked_setup = data_setup,
          .tests = TL_LIST(test_help_full_usage, test_global_options_anywhere,
                           test_json_one_document, test_time_grammar, test_approval_list_pending,
                           test_operator_is_the_role, test_migrate_roles, test_export)})

DL_SUITE_MAIN(.name = "check_cli", .prefix = "cl", .needed = "ONCEGATE_API_KEY",
              .suite = cli_suite, .prepare = prepare, .finish = dl_tenants_finish)

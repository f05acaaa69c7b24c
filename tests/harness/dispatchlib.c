/*
 * dispatchlib.c — what the suites that run oncegate-dispatch share: child
 * processes registered so that a failed test's leftovers are killed by the
 * next, the loopback providers of tests/providers started and stopped, and
 * the HTTP provider's own record of what it received and committed.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
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
#include "dispatchlib.h"
#include "testlib.h"

const char *g_suite = "check";
char g_tmp[256];
char g_procs[PATH_MAX];
int g_http_port;
int g_smtp_port;
char g_smtp_record[PATH_MAX];

/* ---- small things ------------------------------------------------------- */

bool
streq(const char *a, const char *b)
{
	return a != NULL && b != NULL && strcmp(a, b) == 0;
}

void
write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	ck_assert_msg(f != NULL, "cannot write %s: %s", path, strerror(errno));
	ck_assert_msg(fputs(text, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
}

/* ---- processes ------------------------------------------------------------- */

/* Is pid running (not a zombie)? Reaps it when it is our child. */
bool
proc_running(pid_t pid)
{
	char path[64], buf[512];
	FILE *f;
	char *p;
	size_t n;

	if (pid <= 0)
		return false;
	(void)waitpid(pid, NULL, WNOHANG);
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p != NULL && p[1] == ' ' && p[2] != 'Z';
}

/* Does pid's command line mention the suite's temporary directory? (So a
 * recycled PID is never taken for one of ours.) */
bool
proc_ours(pid_t pid)
{
	return tl_cmdline_has(pid, g_tmp);
}

void
proc_register(pid_t pid)
{
	char line[32];
	int fd = open(g_procs, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);

	if (fd < 0)
		return;
	snprintf(line, sizeof(line), "%d\n", (int)pid);
	if (write(fd, line, strlen(line)) < 0)
		fprintf(stderr, "%s: cannot register pid %d\n", g_suite, (int)pid);
	close(fd);
}

/* Kills every registered process still running (a test that failed
 * half-way leaves its dispatchers behind), then forgets them. */
void
proc_sweep(void)
{
	char *text = tl_file_slurp(g_procs, NULL);
	char *p, *end;

	if (text == NULL)
		return;
	for (p = text; *p != '\0'; p = end) {
		pid_t pid = (pid_t)strtol(p, &end, 10);
		double deadline;

		if (end == p)
			break;
		while (*end == '\n')
			end++;
		if (!proc_running(pid) || !proc_ours(pid))
			continue;
		fprintf(stderr, "%s: killing pid %d left by an earlier test\n", g_suite,
		        (int)pid);
		kill(pid, SIGKILL);
		deadline = tl_now() + 5;
		while (proc_running(pid) && tl_now() < deadline)
			tl_sleep_ms(20);
	}
	free(text);
	if (truncate(g_procs, 0) != 0)
		fprintf(stderr, "%s: cannot truncate %s\n", g_suite, g_procs);
}

/* In a forked child: stdin from /dev/null, stdout and stderr to the files
 * out and err (opened with O_APPEND or O_TRUNC as mode says), every other
 * descriptor closed. */
static void
child_stdio(const char *out, const char *err, int mode)
{
	int fd;

	if ((fd = open("/dev/null", O_RDONLY)) >= 0)
		dup2(fd, 0);
	if ((fd = open(out, O_WRONLY | O_CREAT | mode, 0644)) >= 0)
		dup2(fd, 1);
	if ((fd = open(err, O_WRONLY | O_CREAT | mode, 0644)) >= 0)
		dup2(fd, 2);
	for (fd = 3; fd < 1024; fd++)
		close(fd);
}

/* fork + exec with stdout and stderr to files (appended) and the kill
 * switch's environment half set as asked. */
pid_t
spawn(char *const argv[], const char *out, const char *err, enum env_switch env)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		const char *base, *role;
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		child_stdio(out, err, O_APPEND);
		if (env == ENV_TRUE)
			setenv("AI_ACTIONS_ENABLED", "true", 1);
		else if (env == ENV_FALSE)
			setenv("AI_ACTIONS_ENABLED", "false", 1);
		else
			unsetenv("AI_ACTIONS_ENABLED");
		setenv("ASAN_OPTIONS", "detect_leaks=1", 1);
		setenv("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1", 1);
		/* each program connects as the stack's login role for it */
		base = strrchr(argv[0], '/') != NULL ? strrchr(argv[0], '/') + 1 : argv[0];
		role = getenv(strcmp(base, "oncegatectl") == 0 ? "ONCEGATE_PGUSER_OPERATOR"
		              : strcmp(base, "oncegate-dispatch") == 0 ? "ONCEGATE_PGUSER_DISPATCH"
		                                                       : "ONCEGATE_PGUSER_NONE");
		if (role != NULL && *role != '\0')
			setenv("PGUSER", role, 1);
		execv(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* Waits up to secs for our child pid to exit; true with its status. */
bool
wait_exit(pid_t pid, double secs, int *status)
{
	double deadline = tl_now() + secs;

	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);

		if (r == pid)
			return true;
		if (r < 0 && errno != EINTR)
			return false;
		if (tl_now() > deadline)
			return false;
		tl_sleep_ms(20);
	}
}

/* ---- the providers (started by main) -------------------------------------- */

/* Starts a provider and reads "ready <port>" from its stdout file. -1 when
 * it did not come up. Used outside any test: no Check assertions. */
int
provider_start(const char *script, const char *name, char *const extra[], pid_t *pid_out)
{
	char path[PATH_MAX], out[PATH_MAX], err[PATH_MAX], pidf[PATH_MAX];
	char *argv[16];
	int argc = 0, i, port = -1;
	double deadline;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/%s", tl_env("ONCEGATE_PROVIDERS"), script);
	snprintf(out, sizeof(out), "%s/%s.out", g_tmp, name);
	snprintf(err, sizeof(err), "%s/%s.err", g_tmp, name);
	snprintf(pidf, sizeof(pidf), "%s/%s.pid", g_tmp, name);
	argv[argc++] = (char *)(uintptr_t)tl_env("ONCEGATE_PYTHON");
	argv[argc++] = path;
	argv[argc++] = (char *)(uintptr_t)"--port";
	argv[argc++] = (char *)(uintptr_t)"0";
	argv[argc++] = (char *)(uintptr_t)"--pid";
	argv[argc++] = pidf;
	for (i = 0; extra[i] != NULL && argc < 15; i++)
		argv[argc++] = extra[i];
	argv[argc] = NULL;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		child_stdio(out, err, O_TRUNC);
		execv(argv[0], argv);
		_exit(127);
	}
	*pid_out = pid;
	deadline = tl_now() + START_WAIT_S;
	while (tl_now() < deadline) {
		char *text = tl_file_slurp(out, NULL);
		char *r = text != NULL ? strstr(text, "ready ") : NULL;

		if (r != NULL && strchr(r, '\n') != NULL)
			port = atoi(r + 6);
		free(text);
		if (port > 0 || !proc_running(pid))
			break;
		tl_sleep_ms(50);
	}
	if (port <= 0) {
		char *e = tl_file_slurp(err, NULL);

		fprintf(stderr, "%s: %s did not start: %s\n", g_suite, name, e ? e : "");
		free(e);
	}
	return port;
}

void
provider_stop(pid_t pid, const char *name)
{
	int st = 0;

	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	if (!wait_exit(pid, 10, &st)) {
		fprintf(stderr, "%s: %s did not stop on SIGTERM: SIGKILL\n", g_suite, name);
		kill(pid, SIGKILL);
		(void)wait_exit(pid, 5, &st);
	}
}

/* ---- the HTTP provider's own record ----------------------------------------- */

/* GET (or POST with an empty body) of a control endpoint, parsed. */
json_t *
prov_call(const char *method, const char *path)
{
	char url[256];
	struct tl_resp r;
	json_t *v;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", g_http_port, path);
	tl_http_url(method, url, NULL, NULL, NULL, NULL, 0, &r);
	ck_assert_msg(r.status == 200, "provider %s %s: %s (HTTP %ld)", method, path, r.error,
	              r.status);
	ck_assert_msg(r.json != NULL, "provider %s: not JSON: %.500s", path, r.body);
	v = json_incref(r.json);
	tl_resp_free(&r);
	return v;
}

static int
hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The key= of a query string, percent-decoded (malloc'd), or NULL. */
static char *
query_key(const char *q)
{
	const char *p = q;
	char *out, *o;

	while (p != NULL && *p != '\0') {
		if (strncmp(p, "key=", 4) == 0)
			break;
		p = strchr(p, '&');
		if (p != NULL)
			p++;
	}
	if (p == NULL || *p == '\0')
		return NULL;
	p += 4;
	out = o = malloc(strlen(p) + 1);
	if (out == NULL)
		return NULL;
	for (; *p != '\0' && *p != '&'; p++) {
		if (*p == '%' && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
			*o++ = (char)(hexval(p[1]) * 16 + hexval(p[2]));
			p += 2;
		} else {
			*o++ = *p == '+' ? ' ' : *p;
		}
	}
	*o = '\0';
	return out;
}

/* Does this recorded request concern provider keys starting with prefix?
 * (its Idempotency-Key, or the key it looks up) */
static bool
req_matches(const json_t *req, const char *prefix)
{
	const char *k = tl_jstr(req, "idempotency_key");
	char *qk = NULL;
	bool m;
	const char *kind = tl_jstr(req, "kind"), *query = tl_jstr(req, "query");

	if (k == NULL && streq(kind, "lookup"))
		k = qk = query_key(query != NULL ? query : "(none)");
	m = k != NULL && strncmp(k, prefix, strlen(prefix)) == 0;
	free(qk);
	return m;
}

/* Requests the provider received about keys starting with prefix, of the
 * given kind (effect, lookup, other; NULL: any), in arrival order. */
json_t *
prov_requests(const char *prefix, const char *kind)
{
	json_t *all = prov_call("GET", "/_requests"), *out = json_array(), *r;
	size_t i;

	json_array_foreach(all, i, r)
		if (req_matches(r, prefix) && (kind == NULL || streq(tl_jstr(r, "kind"), kind)))
			json_array_append(out, r);
	json_decref(all);
	return out;
}

size_t
prov_count(const char *prefix, const char *kind)
{
	json_t *a = prov_requests(prefix, kind);
	size_t n = json_array_size(a);

	json_decref(a);
	return n;
}

/* Effects the provider committed for keys starting with prefix. */
json_t *
prov_committed(const char *prefix)
{
	json_t *all = prov_call("GET", "/_committed"), *out = json_array(), *r;
	size_t i;

	json_array_foreach(all, i, r) {
		const char *k = tl_jstr(r, "idempotency_key");

		if (k != NULL && strncmp(k, prefix, strlen(prefix)) == 0)
			json_array_append(out, r);
	}
	json_decref(all);
	return out;
}

/* Polls until the provider has at least `want` matching requests. */
size_t
wait_prov(const char *prefix, const char *kind, size_t want, double secs)
{
	double deadline = tl_now() + secs;
	size_t n;

	for (;;) {
		n = prov_count(prefix, kind);
		if (n >= want || tl_now() > deadline)
			return n;
		tl_sleep_ms(50);
	}
}

/* Cancels every effect still waiting (pending, unknown, or leased by a
 * dispatcher an earlier test left behind), so that the next test's
 * dispatchers never see another test's or suite's work. */
void
dl_cancel_waiting(void)
{
	PGconn *c = tl_pg_connect();

	qexec(c, "UPDATE effect_outbox SET state = 'cancelled', lease_owner = NULL,"
	      "    lease_expires_at = NULL, updated_at = now()"
	      " WHERE state IN ('pending', 'unknown', 'sending')", (char *)NULL);
	PQfinish(c);
}

bool
dl_client_id(const char *name, char *out, size_t outlen)
{
	PGconn *c = PQconnectdb("");
	const char *p[1] = { name };
	PGresult *res = NULL;
	bool ok = false;

	if (PQstatus(c) == CONNECTION_OK) {
		res = PQexecParams(c, "SELECT id FROM api_clients WHERE name = $1", 1, NULL, p, NULL,
		                   NULL, 0);
		if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
			snprintf(out, outlen, "%s", PQgetvalue(res, 0, 0));
			ok = true;
		}
	}
	if (!ok)
		fprintf(stderr, "%s: no API client named %s: %s", g_suite, name, PQerrorMessage(c));
	PQclear(res);
	PQfinish(c);
	return ok;
}

void
dl_conf_open(struct dl_conf *c, struct dl_disp *d)
{
	c->text = NULL;
	c->len = 0;
	c->f = open_memstream(&c->text, &c->len);
	ck_assert_ptr_nonnull(c->f);
	fprintf(c->f, "log_file = %s\nlog_level = info\ndispatch_workers = 2\ndispatch_batch = 4\n"
	        "dispatch_lease_seconds = 30\ndispatch_poll_ms = 200\n"
	        "dispatch_shutdown_seconds = 5\nreconcile_interval_seconds = 1\n",
	        dl_disp_files(d));
	dl_conf_contracts(c->f);
}

void
dl_conf_start(struct dl_conf *c, struct dl_disp *d, enum env_switch env)
{
	ck_assert_int_eq(fclose(c->f), 0);
	c->f = NULL;
	dl_disp_start(d, c->text, env);
	free(c->text);
	c->text = NULL;
}

/* ---- effects and runs in the database ------------------------------------------ */

json_t *
dl_effect_row(PGconn *c, const char *id)
{
	json_t *v = qjson(c, "SELECT row_to_json(e)::text FROM effect_outbox e WHERE id = $1::uuid",
	                  id, (char *)NULL);

	ck_assert_msg(v != NULL, "effect %s does not exist", id);
	return v;
}

json_t *
dl_attempts_of(PGconn *c, const char *id)
{
	return qjson(c, "SELECT coalesce(json_agg(a ORDER BY a.id), '[]')::text"
	             "  FROM effect_attempts a WHERE a.effect_id = $1::uuid", id, (char *)NULL);
}

char *
dl_effect_state(PGconn *c, const char *id)
{
	return qstr(c, "SELECT state FROM effect_outbox WHERE id = $1::uuid", id, (char *)NULL);
}

json_t *
dl_dead_letter_of(PGconn *c, const char *id)
{
	return qjson(c, "SELECT row_to_json(d)::text FROM dead_letters d WHERE effect_id = $1::uuid",
	             id, (char *)NULL);
}

char *
dl_wait_effect(PGconn *c, const char *id, const char *want, double secs)
{
	double deadline = tl_now() + secs;
	char *st;

	for (;;) {
		st = dl_effect_state(c, id);
		if (streq(st, want) || tl_now() > deadline)
			return st;
		free(st);
		tl_sleep_ms(100);
	}
}

char *
dl_run_state(PGconn *c, const char *client, const char *key)
{
	return qstr(c, "SELECT state FROM workflow_runs WHERE client_id = $1::bigint"
	            " AND idempotency_key = $2", client, key, (char *)NULL);
}

void
dl_message_id(const char *provider_key, const char *domain, char out[128])
{
	char hex[65];

	tl_sha256_hex(provider_key, hex);
	snprintf(out, 128, "<%.32s.oncegate@%s>", hex, domain);
}

/* ---- a suite's main --------------------------------------------------------- */

static int
dl_suite_begin(const struct dl_suite *s)
{
	char needed[512];
	int rc;

	g_suite = s->name;
	if (tl_env("ONCEGATE_URL") != NULL && tl_env("ONCEGATE_DISPATCH") == NULL) {
		printf("%s: ONCEGATE_DISPATCH is not set; run `./dev test` to start the stack."
		       " Skipping.\n", s->name);
		return 77;
	}
	snprintf(needed, sizeof(needed), "ONCEGATE_CONF ONCEGATE_CTL ONCEGATE_PROVIDERS ONCEGATE_PYTHON %s",
	         s->needed != NULL ? s->needed : "");
	if ((rc = tl_suite_begin(s->name, s->prefix, needed)) != 0)
		return rc;
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/%s.XXXXXX", s->name);
	if (mkdtemp(g_tmp) == NULL) {
		fprintf(stderr, "%s: mkdtemp: %s\n", s->name, strerror(errno));
		tl_suite_end(1);
		return 99;
	}
	snprintf(g_procs, sizeof(g_procs), "%s/procs", g_tmp);
	snprintf(g_smtp_record, sizeof(g_smtp_record), "%s/mail.jsonl", g_tmp);
	return 0;
}

static int
dl_suite_end(int failed)
{
	char reason[128];

	proc_sweep();
	/* Deny by default once the suite is done. */
	snprintf(reason, sizeof(reason), "%s finished", g_suite);
	(void)tl_ctl(NULL, "sends", "stop", "--reason", reason, (char *)NULL);
	/* the files of a failed run are kept for the post-mortem */
	if (failed == 0) {
		char *cmd = NULL;

		if (asprintf(&cmd, "rm -rf '%s'", g_tmp) > 0)
			(void)tl_shell(cmd);
		free(cmd);
	} else {
		fprintf(stderr, "%s: configs, decision logs and stderr kept in %s\n", g_suite, g_tmp);
	}
	return tl_suite_end(failed);
}

int
dl_suite_main(const struct dl_suite *s)
{
	char stall[16];
	char *http_extra[] = { (char *)(uintptr_t)"--stall-seconds", stall, NULL };
	char *smtp_extra[] = { (char *)(uintptr_t)"--record", g_smtp_record, NULL };
	pid_t http_pid = -1, smtp_pid = -1;
	int failed = 1, rc;

	if ((rc = dl_suite_begin(s)) != 0)
		return rc;
	if (s->prepare != NULL && !s->prepare())
		goto out;
	snprintf(stall, sizeof(stall), "%d", s->http_stall_s);
	g_http_port = provider_start("http_provider.py", "http_provider",
	                             s->http_stall_s > 0 ? http_extra : http_extra + 2, &http_pid);
	if (s->smtp)
		g_smtp_port = provider_start("smtp_sink.py", "smtp_sink", smtp_extra, &smtp_pid);
	if (g_http_port <= 0 || (s->smtp && g_smtp_port <= 0))
		goto out;
	fprintf(stderr, "%s: run %s, files in %s, http provider :%d", s->name, tl_run, g_tmp,
	        g_http_port);
	if (s->smtp)
		fprintf(stderr, ", smtp sink :%d", g_smtp_port);
	fputc('\n', stderr);

	failed = tl_suite_run(s->suite(), false);
out:
	if (s->finish != NULL)
		s->finish();
	provider_stop(smtp_pid, "smtp_sink");
	provider_stop(http_pid, "http_provider");
	return dl_suite_end(failed);
}

void
dl_conf_contracts(FILE *f)
{
	char *state = tl_state_dir();

	fprintf(f, "contracts_dir = %s/contracts\n", state != NULL ? state : ".");
	free(state);
}

void
dl_fixture_setup(void)
{
	proc_sweep();
	dl_cancel_waiting();
}

void
dl_fixture_teardown(void)
{
	proc_sweep();
}

TCase *
dl_tcase(Suite *s, const char *name, double timeout_s)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, timeout_s);
	tcase_add_checked_fixture(tc, dl_fixture_setup, dl_fixture_teardown);
	suite_add_tcase(s, tc);
	return tc;
}

const char *
dl_disp_files(struct dl_disp *d)
{
	static int seq;

	memset(d, 0, sizeof(*d));
	d->pid = -1;
	seq++;
	/* each test runs in a process of its own, whose seq starts again */
	snprintf(d->conf, sizeof(d->conf), "%s/d%d-%d.conf", g_tmp, (int)getpid(), seq);
	snprintf(d->log, sizeof(d->log), "%s/d%d-%d.log", g_tmp, (int)getpid(), seq);
	snprintf(d->err, sizeof(d->err), "%s/d%d-%d.err", g_tmp, (int)getpid(), seq);
	return d->log;
}

void
dl_disp_start(struct dl_disp *d, const char *conf_text, enum env_switch env)
{
	char *argv[5];
	double deadline;
	int st = 0;
	pid_t pid;

	write_file(d->conf, conf_text);
	argv[0] = (char *)(uintptr_t)tl_env("ONCEGATE_DISPATCH");
	argv[1] = (char *)(uintptr_t)"-c";
	argv[2] = d->conf;
	argv[3] = (char *)(uintptr_t)"-n";
	argv[4] = NULL;
	pid = spawn(argv, "/dev/null", d->err, env);
	ck_assert_msg(wait_exit(pid, START_WAIT_S, &st) && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	              "oncegate-dispatch -n refused %s; see %s", d->conf, d->err);
	argv[3] = NULL;
	d->pid = spawn(argv, "/dev/null", d->err, env);
	proc_register(d->pid);
	deadline = tl_now() + START_WAIT_S;
	for (;;) {
		char *logtext = tl_file_slurp(d->log, NULL);
		bool up = logtext != NULL && strstr(logtext, "\"dispatch.started\"") != NULL;

		free(logtext);
		if (up)
			break;
		if (!proc_running(d->pid) || tl_now() > deadline) {
			char *e = tl_file_slurp(d->err, NULL);

			ck_abort_msg("oncegate-dispatch did not start: %.2000s", e ? e : "");
		}
		tl_sleep_ms(20);
	}
}

void
dl_disp_check_sanitizers(const struct dl_disp *d)
{
	char *text = tl_file_slurp(d->err, NULL);
	const char *hit = NULL;

	if (text != NULL) {
		hit = strstr(text, "AddressSanitizer");
		if (hit == NULL)
			hit = strstr(text, "runtime error:");
		if (hit == NULL)
			hit = strstr(text, "LeakSanitizer");
	}
	if (hit != NULL)
		ck_abort_msg("sanitizer finding in the dispatcher (%s):\n%.4000s", d->err, hit);
	free(text);
}

double
dl_disp_stop(struct dl_disp *d, int wait_s)
{
	double t0 = tl_now(), took;
	int st = 0;

	if (d->pid <= 0)
		return 0;
	ck_assert_int_eq(kill(d->pid, SIGTERM), 0);
	if (!wait_exit(d->pid, wait_s, &st)) {
		kill(d->pid, SIGKILL);
		(void)wait_exit(d->pid, 5, &st);
		d->pid = -1;
		ck_abort_msg("oncegate-dispatch (config %s) did not exit within %d s of SIGTERM",
		             d->conf, wait_s);
	}
	took = tl_now() - t0;
	d->pid = -1;
	dl_disp_check_sanitizers(d);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		char *e = tl_file_slurp(d->err, NULL);

		ck_abort_msg("oncegate-dispatch exited with status %d%s after SIGTERM: %.3000s",
		             WIFEXITED(st) ? WEXITSTATUS(st) : -1,
		             WIFSIGNALED(st) ? " (signal)" : "", e ? e : "");
	}
	return took;
}

/* ---- runs, approval pages and mails ------------------------------------------ */

const char *dl_key_dev;
char dl_client_b[96];
char *dl_key_b;

bool
dl_tenants_prepare(void)
{
	dl_key_dev = tl_env("ONCEGATE_API_KEY");
	snprintf(dl_client_b, sizeof(dl_client_b), "%s-b", tl_run);
	dl_key_b = tl_client_add(dl_client_b);
	return true;
}

void
dl_tenants_finish(void)
{
	free(dl_key_b);
	dl_key_b = NULL;
}

void
dl_claim_and_output(const char *bearer, const char *key, const char *contract, json_t *output,
                    json_t *effect, const char *requested_by, struct tl_resp *r)
{
	json_t *body = json_pack("{s:s, s:{s:s, s:s}, s:i}", "key", key, "payload", "run", tl_run,
	                         "contract", contract, "lease_seconds", 60);
	struct tl_claimed cl;
	char *path;

	tl_claim_body(bearer, body, &cl);
	json_decref(body);
	body = json_pack("{s:s, s:I, s:s, s:o, s:o, s:{s:s, s:s, s:s}, s:s, s:s}", "lease_owner",
	                 cl.owner, "version", (json_int_t)cl.version, "contract", contract, "output",
	                 output, "effect", effect, "model", "provider", "openai-compatible", "name",
	                 "qwen2.5-7b-instruct", "revision", "2024-09-19", "source_url",
	                 "https://crm.example/ticket/48213", "requested_by", requested_by);
	path = tl_run_path(key, "/output");
	tl_post_json(path, bearer, body, r);
	json_decref(body);
	free(path);
}

void
dl_mail_output(const char *bearer, const char *key, const char *contract, const char *subject,
               const char *body, json_t *to, const char *requested_by, struct tl_resp *r)
{
	dl_claim_and_output(bearer, key, contract,
	                    json_pack("{s:s, s:s}", "subject", subject, "body", body),
	                    json_pack("{s:s, s:s, s:{s:o}}", "type", "email.send", "target",
	                              "demo_smtp", "payload", "to", to),
	                    requested_by, r);
}

void
dl_corpus_mail_output(const char *bearer, const char *key, const char *contract,
                      const char *mail_id, json_t *to, const char *requested_by,
                      struct tl_resp *r)
{
	dl_mail_output(bearer, key, contract, tl_corpus_mail_str(mail_id, "subject"),
	               tl_corpus_mail_str(mail_id, "body"), to, requested_by, r);
	ck_assert_msg(r->status == 202 && streq(tl_jstr(r->json, "outcome"), "awaiting_human"),
	              "%s output of mail %s: HTTP %ld %.1000s", contract, mail_id, r->status,
	              r->body);
}

void
dl_mail_run(const char *bearer, const char *key, const char *contract, const char *subject,
            const char *body, const char *to, const char *requested_by, struct dl_links *l)
{
	struct tl_resp r;
	size_t i;

	dl_mail_output(bearer, key, contract, subject, body, json_pack("[s]", to), requested_by,
	               &r);
	ck_assert_msg(r.status == 202 &&
	                  json_array_size(json_object_get(r.json, "approvals")) == DL_LINKS,
	              "output: HTTP %ld %.1000s", r.status, r.body);
	for (i = 0; i < DL_LINKS; i++) {
		char *token = dl_token_of(&r, i, l->id[i], sizeof(l->id[i]));

		snprintf(l->path[i], sizeof(l->path[i]), "/approve/%s", token);
		free(token);
	}
	tl_resp_free(&r);
}

char *
dl_token_of(const struct tl_resp *r, size_t i, char *id, size_t idsz)
{
	const json_t *a = json_array_get(json_object_get(r->json, "approvals"), i);
	const char *url = tl_jstr(a, "url");
	const char *t = url != NULL ? strstr(url, "/approve/") : NULL;

	ck_assert_msg(r->status == 202 && t != NULL,
	              "%s: expected 202 with approval link %zu: HTTP %ld %.1000s", r->what, i,
	              r->status, r->body);
	if (id != NULL)
		snprintf(id, idsz, "%s", tl_jstr(a, "approval_id") ? tl_jstr(a, "approval_id") : "");
	return strdup(t + 9);
}

int
dl_sso_headers(struct dl_sso *sso, const char *user, const char *groups, const char **h)
{
	int n = 0;

	if (user != NULL) {
		snprintf(sso->user, sizeof(sso->user), "X-Dev-User: %s", user);
		h[n++] = sso->user;
	}
	if (groups != NULL) {
		snprintf(sso->groups, sizeof(sso->groups), "X-Dev-Groups: %s", groups);
		h[n++] = sso->groups;
	}
	return n;
}

void
dl_page_request(const char *path, const char *user, const char *groups, const char *form,
                const char *origin, struct tl_resp *r, char **hdrs)
{
	struct dl_sso sso;
	char ho[256];
	const char *h[6];
	int n = dl_sso_headers(&sso, user, groups, h);

	if (form != NULL) {
		snprintf(ho, sizeof(ho), "Origin: %s", origin ? origin : tl_env("ONCEGATE_URL"));
		h[n++] = ho;
		if (origin == NULL)
			h[n++] = "Sec-Fetch-Site: same-origin";
	}
	h[n] = NULL;
	dl_page_send(path, h, form, r, hdrs);
}

void
dl_page_send(const char *path, const char *const *h, const char *form, struct tl_resp *r,
             char **hdrs)
{
	int attempt;

	for (attempt = 0;; attempt++) {
		if (hdrs != NULL)
			*hdrs = NULL;
		if (form != NULL)
			tl_http_hdrs("POST", path, h, "application/x-www-form-urlencoded", form,
			             strlen(form), r, hdrs);
		else
			tl_http_hdrs("GET", path, h, NULL, NULL, 0, r, hdrs);
		if (r->status != 429 || attempt >= DL_RATE_RETRIES)
			return;
		tl_resp_free(r);
		if (hdrs != NULL)
			free(*hdrs);
		tl_sleep_ms(1000);
	}
}

void
dl_disp_start_linked(struct dl_disp *d, const char *targets, ...)
{
	struct dl_conf c;
	va_list ap;

	dl_conf_open(&c, d);
	fprintf(c.f, "public_url = %s\n", tl_env("ONCEGATE_URL"));
	va_start(ap, targets);
	vfprintf(c.f, targets, ap);
	va_end(ap);
	dl_conf_start(&c, d, ENV_TRUE);
}

void
dl_disp_start_demo(struct dl_disp *d, const char *mail_from)
{
	dl_disp_start_linked(
	    d,
	    "\n[target demo_http]\nkind = http\nurl = http://127.0.0.1:%d/idem/effects\n"
	    "lookup_url = http://127.0.0.1:%d/idem/effects/lookup\nidempotency_key = 1\n"
	    "provider_id_header = X-Provider-Id\ntimeout_ms = 5000\nmax_attempts = 3\n"
	    "base_ms = 200\ncap_ms = 1000\n\n"
	    "[target demo_smtp]\nkind = smtp\nurl = smtp://127.0.0.1:%d\nmail_from = %s\n"
	    "timeout_ms = 5000\nmax_attempts = 2\nbase_ms = 200\ncap_ms = 1000\n",
	    g_http_port, g_http_port, g_smtp_port, mail_from);
}

json_t *
dl_mails_received(void)
{
	static const char script[] =
	    "import json, sys, email, email.policy, email.utils\n"
	    "for line in open(sys.argv[1], encoding='utf-8'):\n"
	    "    r = json.loads(line)\n"
	    "    m = email.message_from_string(r['data'], policy=email.policy.default)\n"
	    "    print(json.dumps({'rcpt': r['rcpt_tos'], 'queue_id': r['queue_id'],\n"
	    "        'message_id': str(m.get('Message-ID', '')).strip(),\n"
	    "        'from': [a for _, a in email.utils.getaddresses([str(m['From'])])],\n"
	    "        'to': [a for _, a in email.utils.getaddresses([str(m['To'])])],\n"
	    "        'subject': str(m.get('Subject', '')),\n"
	    "        'body': m.get_content().replace('\\r\\n', '\\n')}))\n";
	char path[PATH_MAX], cmd[PATH_MAX * 2 + 256], *out, *line, *save = NULL;
	json_t *list = json_array();

	snprintf(path, sizeof(path), "%s/decode.py", g_tmp);
	write_file(path, script);
	snprintf(cmd, sizeof(cmd), "'%s' '%s' '%s'", tl_env("ONCEGATE_PYTHON"), path, g_smtp_record);
	out = tl_shell_output(cmd);
	ck_assert_msg(out != NULL, "decoding the SMTP sink's record failed");
	for (line = strtok_r(out, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		json_t *m = json_loads(line, 0, NULL);

		ck_assert_msg(m != NULL, "decoder output: %.300s", line);
		json_array_append_new(list, m);
	}
	free(out);
	return list;
}

void
dl_make_run(PGconn *c, const char *client, const char *key, const char *version,
            const char *contract, const char *output)
{
	char hash[72], corr[256], payload[128];
	const char *p[9] = { client, key, hash, corr, output, payload, version, contract, g_suite };

	snprintf(payload, sizeof(payload), "{\"suite\":\"%s\"}", g_suite);
	tl_payload_hash(payload, hash);
	snprintf(corr, sizeof(corr), "corr-%s", key);
	tl_pg_exec(c,
	           "INSERT INTO workflow_runs (client_id, idempotency_key, payload_hash, payload,"
	           "    state, claim_started_at, workflow_version, trigger, correlation_id,"
	           "    output, contract, contract_hash, decision, decided_at)"
	           " VALUES ($1::bigint, $2, $3, $6::jsonb, 'approved', now(), $7, $9, $4,"
	           "    $5::jsonb, $8, CASE WHEN $8::text IS NOT NULL THEN 'sha256:0c0ffee0c0ffee"
	           "0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0' END, 'auto', now())",
	           9, p);
}

void
dl_add_effect(PGconn *c, const char *client, const char *key, const char *type,
              const char *target, const char *payload, double delay_s, char id[40])
{
	char hash[72], delay[32];
	char *v;

	tl_effect_hash(payload, hash);
	snprintf(delay, sizeof(delay), "%.3f", delay_s);
	v = qstr(c, "INSERT INTO effect_outbox (client_id, idempotency_key, effect_type, target,"
	         "    payload, payload_hash, provider_key, not_before, next_attempt_at)"
	         " VALUES ($1::bigint, $2, $3, $4, $5::jsonb, $6, $2 || '/' || $3,"
	         "    now() + make_interval(secs => $7::float8),"
	         "    now() + make_interval(secs => $7::float8))"
	         " RETURNING id",
	         client, key, type, target, payload, hash, delay, (char *)NULL);
	ck_assert_ptr_nonnull(v);
	snprintf(id, 40, "%s", v);
	free(v);
}

void
dl_sends(bool on)
{
	char *out = NULL, reason[160];
	int rc;

	snprintf(reason, sizeof(reason), "%s: this test %s", g_suite,
	         on ? "sends" : "holds sends");
	rc = tl_ctl(&out, "sends", on ? "resume" : "stop", "--reason", reason, (char *)NULL);
	ck_assert_msg(rc == 0, "oncegatectl sends %s: exit %d: %s", on ? "resume" : "stop", rc,
	              out ? out : "");
	free(out);
}

void
dl_reply_run(const char *key, const char *subject, const char *text, const char *callback_url,
             const char *requested_by, struct tl_resp *r)
{
	struct tl_claimed cl;
	json_t *body;
	char *path;

	body = json_pack("{s:s, s:{s:s}, s:i}", "key", key, "payload", "suite", tl_run,
	                 "lease_seconds", 60);
	tl_claim_body(tl_env("ONCEGATE_API_KEY"), body, &cl);
	json_decref(body);
	path = tl_run_path(key, "/output");
	body = json_pack("{s:s, s:I, s:s, s:{s:s, s:s, s:s, s:f},"
	                 " s:{s:s, s:s, s:s}, s:{s:s, s:s, s:{s:s}}, s:s, s:s, s:s}",
	                 "lease_owner", cl.owner, "version", (json_int_t)cl.version,
	                 "contract", "support_reply",
	                 "output", "subject", subject, "body", text,
	                 "tone", "friendly", "confidence", 0.8,
	                 "model", "provider", "openai-compatible", "name", "qwen2.5-7b-instruct",
	                 "revision", "2024-09-19",
	                 "effect", "type", "email.send", "target", "demo_smtp", "payload", "to",
	                 "customer@example.com",
	                 "source_url", "https://crm.example/ticket/9",
	                 "callback_url", callback_url, "requested_by", requested_by);
	tl_post_json(path, tl_env("ONCEGATE_API_KEY"), body, r);
	json_decref(body);
	free(path);
	ck_assert_msg(r->status == 202 && streq(tl_jstr(r->json, "outcome"), "awaiting_human"),
	              "%s: output: HTTP %ld %.1000s", key, r->status, r->body);
}

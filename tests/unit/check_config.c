/*
 * check_config.c — the config loader: defaults, every value type, bounds,
 * quoting, comments, and the errors an operator sees (file and line).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "suitelib.h"

static char path[64];

/* Writes len bytes of text into a new file, path. */
static void
write_file(const char *text, size_t len)
{
	FILE *f;
	int fd;

	strcpy(path, "/tmp/og-config-XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	f = fdopen(fd, "w");
	fwrite(text, 1, len, f);
	fclose(f);
}

/* Loads len bytes of text as a config file over the defaults. */
static int
load_bytes(const char *text, size_t len, struct config *c, char *err, size_t errlen)
{
	int rc;

	write_file(text, len);
	config_defaults(c);
	rc = config_load(path, c, err, errlen);
	unlink(path);
	return rc;
}

static int
load_text(const char *text, struct config *c, char *err, size_t errlen)
{
	return load_bytes(text, strlen(text), c, err, errlen);
}

START_TEST(test_defaults)
{
	struct config c;
	char err[256];

	config_defaults(&c);
	ck_assert_int_eq(c.threads, 8);
	ck_assert_int_eq(c.max_body_bytes, 262144);
	ck_assert_int_eq(c.listen_mode, 0660);
	ck_assert_int_eq(c.lease_cap_seconds, 86400);
	/* a key answers duplicate for as long as its run exists */
	ck_assert_int_eq(c.duplicate_window_days, 0);
	ck_assert_str_eq(c.log_level, "info");
	ck_assert_int_eq(config_validate(&c, err, sizeof(err)), 0);
	config_free(&c);
	config_free(NULL);
}
END_TEST

START_TEST(test_values)
{
	struct config c;
	char err[256];

	ck_assert_int_eq(load_text("# comment\n\n"
	                           "threads = 4\n"
	                           "  listen_mode=0600   # owner only\n"
	                           "database = \"host=/tmp dbname=x password=s3cr#t\"\n"
	                           "log_file = /var/log/og.log\n"
	                           "listen_group = www-data\n"
	                           "log_level = debug\n",
	                           &c, err, sizeof(err)),
	                 0);
	ck_assert_int_eq(c.threads, 4);
	ck_assert_int_eq(c.listen_mode, 0600);
	ck_assert_str_eq(c.database, "host=/tmp dbname=x password=s3cr#t");
	ck_assert_str_eq(c.log_file, "/var/log/og.log");
	ck_assert_str_eq(c.listen_group, "www-data");
	config_free(&c);
}
END_TEST

START_TEST(test_listen_tcp)
{
	struct config c;
	char err[256];

	ck_assert_int_eq(load_text("listen = 10.77.0.11:9000\n"
	                           "listen_allow = 10.77.0.1,127.0.0.1\n",
	                           &c, err, sizeof(err)),
	                 0);
	ck_assert(config_listen_is_tcp(c.listen));
	ck_assert_str_eq(c.listen_allow, "10.77.0.1,127.0.0.1");
	ck_assert(!config_listen_is_tcp("/run/oncegate/fcgi.sock"));
	config_free(&c);
}
END_TEST

START_TEST(test_dump_masks_secrets)
{
	struct config c;
	char err[256], *text = NULL;
	size_t len = 0;
	FILE *out;

	ck_assert_int_eq(load_text("database = \"password=hunter2\"\n", &c, err, sizeof(err)), 0);
	out = open_memstream(&text, &len);
	config_dump(&c, out);
	fclose(out);
	ck_assert_ptr_null(strstr(text, "hunter2"));
	ck_assert_ptr_nonnull(strstr(text, "database = [secret]"));
	ck_assert_ptr_nonnull(strstr(text, "threads = 8"));
	free(text);
	config_free(&c);
}
END_TEST

struct bad_case {
	const char *text;
	const char *message; /* expected substring */
};

static const struct bad_case bad_cases[] = {
	{ "nosuch = 1\n", ":1: unknown setting \"nosuch\"" },
	{ "\nthreads = many\n", ":2: threads: \"many\" is not an integer" },
	{ "threads = 0\n", "threads: 0 is out of range 1..256" },
	{ "threads = 100000000000000000000\n", "is not an integer" },
	{ "threads = 4x\n", "is not an integer" },
	{ "listen_mode = 0999\n", "not an octal mode" },
	{ "threads\n", "expected `name = value`" },
	{ "= 4\n", "missing setting name" },
	{ "database = \"open\n", "unterminated quoted value" },
	{ "database = \"a\" b\n", "text after the closing quote" },
	{ "log_level = loud\n", "log_level" },
	{ "listen = relative.sock\n", "neither an absolute socket path nor IPV4:PORT" },
	{ "listen = 10.0.0.1:9000\n", "needs listen_allow" },
	{ "listen = 10.0.0.1:0\nlisten_allow = 10.0.0.2\n", "the port must be 1-65535" },
	{ "listen = 10.0.0.1:9x\nlisten_allow = 10.0.0.2\n", "the port must be 1-65535" },
	{ "listen = 010.0.0.1:9000\nlisten_allow = 10.0.0.2\n", "nor IPV4:PORT" },
	{ "listen = :9000\nlisten_allow = 10.0.0.2\n", "nor IPV4:PORT" },
	{ "listen = 10.0.0.1:9000\nlisten_allow = 10.0.0.2,,10.0.0.3\n", "listen_allow: " },
	{ "listen = 10.0.0.1:9000\nlisten_allow = 10.0.0.0/24\n", "listen_allow: " },
	{ "listen_allow = 10.0.0.2\n", "TCP listen (HOST:PORT) only" },
	{ "lease_default_seconds = 600\nlease_max_seconds = 60\n", "above lease_max_seconds" },
	{ "max_body_bytes = 1\n", "out of range" },
	{ "duplicate_window_days = -1\n", "duplicate_window_days: -1 is out of range 0..36500" },
	{ "duplicate_window_days = 36501\n", "duplicate_window_days: 36501 is out of range 0..36500" },
	{ "duplicate_window_days = 30 days\n", "duplicate_window_days: \"30 days\" is not an integer" },
	{ "[source x]\n", "unknown section" },
	{ "[target Bad-Name]\nurl = http://x\n", "must be 1-64 of a-z 0-9 _" },
	{ "[target a]\nurl = http://x\n[target a]\nurl = http://y\n", ":3: target \"a\" defined twice" },
	{ "[target a]\nurl = http://x\nthreads = 4\n", "unknown setting \"threads\" in a [target] section" },
	{ "[target a]\nkind = ftp\nurl = http://x\n", "kind \"ftp\" is not http, smtp or slack" },
	{ "[target a]\nkind = http\n", "target a: url is required" },
	{ "csrf_secret = short\n", "at least 32 characters" },
	{ "public_url = ftp://x\n", "public_url must start with https://" },
};

START_TEST(test_bad)
{
	const struct bad_case *t = &bad_cases[_i];
	struct config c;
	char err[512];

	ck_assert_int_ne(load_text(t->text, &c, err, sizeof(err)), 0);
	ck_assert_msg(strstr(err, t->message) != NULL, "\"%s\" lacks \"%s\"", err, t->message);
	config_free(&c);
}
END_TEST

START_TEST(test_targets)
{
	struct config c;
	char err[512];
	const struct config_target *t;

	ck_assert_int_eq(load_text("threads = 2\n"
	                           "callback_origins = http://127.0.0.1:5678 https://n8n.example/\n"
	                           "[target demo_http]\n"
	                           "url = http://127.0.0.1:9000/effects\n"
	                           "idempotency_key = 1\n"
	                           "lookup_url = http://127.0.0.1:9000/effects/lookup\n"
	                           "[target demo_smtp]\n"
	                           "kind = smtp\n"
	                           "url = smtp://127.0.0.1:2525\n"
	                           "max_attempts = 3\n",
	                           &c, err, sizeof(err)),
	                 0);
	ck_assert_int_eq(c.threads, 2);
	/* the two named, and the callback target made from callback_origins */
	ck_assert_int_eq(c.ntargets, 3);
	t = config_target(&c, "callback");
	ck_assert_ptr_nonnull(t);
	ck_assert_str_eq(t->kind, "http");
	ck_assert_str_eq(t->url, "http://127.0.0.1:5678 https://n8n.example/");
	t = config_target(&c, "demo_http");
	ck_assert_ptr_nonnull(t);
	ck_assert_str_eq(t->kind, "http");
	ck_assert_int_eq(t->idempotency_key, 1);
	ck_assert_int_eq(t->max_attempts, 5);
	t = config_target(&c, "demo_smtp");
	ck_assert_str_eq(t->kind, "smtp");
	ck_assert_int_eq(t->max_attempts, 3);
	ck_assert_ptr_null(config_target(&c, "nope"));
	ck_assert(config_callback_allowed(&c, "http://127.0.0.1:5678/webhook-waiting/12"));
	ck_assert(config_callback_allowed(&c, "HTTPS://N8N.example/x"));
	ck_assert(!config_callback_allowed(&c, "http://127.0.0.1:5679/x"));
	ck_assert(!config_callback_allowed(&c, "http://n8n.example/x"));
	ck_assert(!config_callback_allowed(&c, "https://n8n.example.evil.com/x"));
	ck_assert(!config_callback_allowed(&c, "https://user@n8n.example/x"));
	ck_assert(!config_callback_allowed(&c, "javascript:alert(1)"));
	ck_assert(!config_callback_allowed(&c, NULL));
	{
		char why[512];

		ck_assert(!config_callback_refusal(&c, "http://127.0.0.1:5678/webhook-waiting/1",
		                                   why, sizeof(why)));
		ck_assert(config_callback_refusal(&c, "http://127.0.0.1:5679/webhook-waiting/1?s=x",
		                                  why, sizeof(why)));
		ck_assert_msg(strstr(why, "origin http://127.0.0.1:5679 ") != NULL &&
		              strstr(why, "callback_origins") != NULL && strstr(why, "?s=x") == NULL,
		              "%s", why);
	}
	config_free(&c);
}
END_TEST

START_TEST(test_long_line)
{
	struct config c;
	char err[512], *text = malloc(10000);

	strcpy(text, "database = ");
	memset(text + 11, 'x', 9000);
	strcpy(text + 9011, "\n");
	ck_assert_int_ne(load_text(text, &c, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, "longer than"));
	config_free(&c);
	free(text);
}
END_TEST

/* A NUL byte must not cut a line short and hide what follows it. */
START_TEST(test_nul_byte)
{
	static const char text[] = "threads = 4\0 # hidden\nlog_level = debug\n";
	struct config c;
	char err[512];

	ck_assert_int_ne(load_bytes(text, sizeof(text) - 1, &c, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, ":1: NUL byte in line"));
	config_free(&c);
}
END_TEST

START_TEST(test_missing_file)
{
	struct config c;
	char err[512];

	config_defaults(&c);
	ck_assert_int_ne(config_load("/nonexistent/oncegate.conf", &c, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/oncegate.conf: cannot open"));
	config_free(&c);
}
END_TEST

/* AUTH_GROUPS is split at one character; "," unless configured. */
START_TEST(test_separator_setting)
{
	static const struct {
		const char *line;
		char want; /* '\0': refused */
	} cases[] = {
		{ "", ',' },
		{ "auth_groups_separator = ,\n", ',' },
		{ "auth_groups_separator = ;\n", ';' },
		{ "auth_groups_separator = |\n", '|' },
		{ "auth_groups_separator = \" \"\n", ' ' },
		{ "auth_groups_separator = \"\"\n", '\0' },
		{ "auth_groups_separator = ,;\n", '\0' },
		{ "auth_groups_separator = a\n", '\0' },
		{ "auth_groups_separator = 7\n", '\0' },
		{ "auth_groups_separator = \"\t\"\n", '\0' },
		{ "auth_groups_separator = \xc2\xb7\n", '\0' },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct config c;
		char err[512] = "";
		int rc = load_text(cases[i].line, &c, err, sizeof(err));

		if (cases[i].want != '\0') {
			ck_assert_msg(rc == 0, "\"%s\" refused: %s", cases[i].line, err);
			ck_assert_msg(c.auth_groups_separator[0] == cases[i].want &&
			              c.auth_groups_separator[1] == '\0', "\"%s\" gave \"%s\"",
			              cases[i].line, c.auth_groups_separator);
		} else {
			ck_assert_msg(rc != 0, "\"%s\" accepted", cases[i].line);
			ck_assert_msg(strstr(err, "auth_groups_separator") != NULL,
			              "\"%s\": the error does not name the setting: %s", cases[i].line, err);
		}
		config_free(&c);
	}
}
END_TEST


/* config_check_ready over a file that sets what `config check` needs plus
 * extra; the file stays until the caller unlinks path. */
static int
check_ready(const char *extra, struct config *c, char *err, size_t errlen)
{
	char text[1024], secret[] = "/tmp/og-proxy-secret-XXXXXX";
	int n, fd;

	/* the proxy secret nginx proves itself with, 0600 (config check
	 * refuses a responder without one) */
	fd = mkstemp(secret);
	ck_assert(fd >= 0);
	ck_assert(write(fd, "b3f1c2d4e5a6978877665544332211ffeeddccbbaa99\n", 45) == 45);
	close(fd);
	n = snprintf(text, sizeof(text), "public_url = https://gate.example.com\n"
	             "csrf_secret = 0123456789abcdef0123456789abcdef\n"
	             "contracts_dir = /tmp\ntemplates_dir = /tmp\nsql_dir = /tmp\n"
	             "proxy_secret_file = %s\n%s", secret, extra);
	ck_assert(n > 0 && (size_t)n < sizeof(text));
	write_file(text, (size_t)n);
	config_defaults(c);
	ck_assert_msg(config_load(path, c, err, errlen) == 0, "%s", err);
	n = config_check_ready(c, path, err, errlen);
	unlink(secret);
	return n;
}

/* What config check refuses beyond the loader, each naming file:line. */
static const struct {
	const char *extra;
	int line;            /* of the setting to blame */
	const char *want;
} ready_cases[] = {
	{ "database = \"host=/run/postgresql dbname\"\n", 7, "database is not a libpq connection string" },
	{ "database = \"postgresql://[::1\"\n", 7, "database is not a libpq connection string" },
	{ "pooled_database = \"hostaddr=127.0.0.1 port='5432\"\n", 7,
	  "pooled_database is not a libpq connection string" },
	{ "listen_group = no-such-group-ог\n", 7, "listen_group: no group \"no-such-group-ог\"" },
	{ "user = no_such_user_42\n", 7, "user: no user \"no_such_user_42\"" },
	{ "listen_owner = nobody_not_here\n", 7, "listen_owner: no user" },
	{ "[target mail]\nkind = smtp\nurl = smtp://mail.example.com:587\n"
	  "credentials_env = MAIL_PASSWORD\n", 10, "target mail: credentials_env with smtp://" },
};

START_TEST(test_check_ready)
{
	struct config c;
	char err[1024], want[128];
	int rc;

	rc = check_ready(ready_cases[_i].extra, &c, err, sizeof(err));
	snprintf(want, sizeof(want), "%s:%d: ", path, ready_cases[_i].line);
	unlink(path);
	ck_assert_msg(rc != 0, "accepted: %s", ready_cases[_i].extra);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "not at %s: %s", want, err);
	ck_assert_msg(strstr(err, ready_cases[_i].want) != NULL, "%s: %s", ready_cases[_i].want,
	              err);
	/* a password in a conninfo is never repeated */
	ck_assert_ptr_null(strstr(err, "dbname\""));
	config_free(&c);
}
END_TEST

START_TEST(test_check_ready_accepts)
{
	struct config c;
	char err[1024];
	FILE *out;
	char *text = NULL;
	size_t len = 0;
	int rc, n;

	rc = check_ready("database = \"host=/var/run/postgresql dbname=oncegate password='p w'\"\n"
	                 "pooled_database = postgresql://og@127.0.0.1:6432/oncegate\n"
	                 "listen_group = root\nuser = root\n"
	                 "public_url = http://127.0.0.1:8080\n"
	                 "[target mail]\nkind = smtp\nurl = smtps://mail.example.com:465\n"
	                 "credentials_env = MAIL_PASSWORD\n"
	                 "[target relay]\nkind = smtp\nurl = smtp://localhost:25\n",
	                 &c, err, sizeof(err));
	ck_assert_msg(rc == 0, "refused: %s", err);
	/* plain http: accepted with a warning naming the line */
	out = open_memstream(&text, &len);
	n = config_check_warnings(&c, path, out);
	fclose(out);
	unlink(path);
	ck_assert_int_eq(n, 1);
	snprintf(err, sizeof(err), "%s:11: warning: public_url is plain http://", path);
	ck_assert_msg(strncmp(text, err, strlen(err)) == 0, "%s", text);
	free(text);
	config_free(&c);
	/* https: no warning */
	rc = check_ready("", &c, err, sizeof(err));
	out = open_memstream(&text, &len);
	n = config_check_warnings(&c, path, out);
	fclose(out);
	unlink(path);
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(n, 0);
	free(text);
	config_free(&c);
}
END_TEST

TL_SUITE(config_suite, "config",
         {"load", 0,
          .loops = TL_LOOPS({test_bad, (int)(sizeof(bad_cases) / sizeof(bad_cases[0]))},
                            {test_check_ready,
                             (int)(sizeof(ready_cases) / sizeof(ready_cases[0]))}),
          .tests = TL_LIST(test_defaults, test_values, test_listen_tcp, test_dump_masks_secrets,
                           test_targets, test_long_line, test_nul_byte, test_missing_file,
                           test_separator_setting, test_check_ready_accepts)})

TL_SUITE_MAIN(config_suite, false)

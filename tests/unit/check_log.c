/*
 * check_log.c — the decision log: what reaches the file is what a
 * reader (jq, an auditor) sees, so every test reads the file back and
 * parses it with jansson.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "caps.h"
#include "log.h"
#include "suitelib.h"

static char tmpdir[64];
static char logpath[128];

static void
setup(void)
{
	strcpy(tmpdir, "/tmp/check_log.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	snprintf(logpath, sizeof(logpath), "%s/decisions.log", tmpdir);
}

static void
teardown(void)
{
	DIR *d;
	struct dirent *e;
	char p[512];

	log_close();
	d = opendir(tmpdir);
	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", tmpdir, e->d_name);
		unlink(p);
	}
	closedir(d);
	rmdir(tmpdir);
}

static char *
slurp(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	char *s = NULL;
	long n;

	ck_assert_msg(fp != NULL, "open %s: %s", path, strerror(errno));
	ck_assert_int_eq(fseek(fp, 0, SEEK_END), 0);
	n = ftell(fp);
	ck_assert_int_ge(n, 0);
	rewind(fp);
	s = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(s);
	ck_assert_uint_eq(fread(s, 1, (size_t)n, fp), (size_t)n);
	s[n] = '\0';
	fclose(fp);
	if (len != NULL)
		*len = (size_t)n;
	return s;
}

/* Every line of the file as a JSON array of objects; fails the test if any
 * line is not a whole JSON object or the file does not end in a newline. */
static json_t *
load_lines(const char *path)
{
	size_t len, n;
	char *s = slurp(path, &len), *p = s, *nl;
	json_t *arr = json_array(), *o;
	json_error_t err;

	ck_assert_ptr_nonnull(arr);
	ck_assert_msg(len == 0 || s[len - 1] == '\n', "file does not end in newline");
	while (p < s + len) {
		nl = memchr(p, '\n', (size_t)(s + len - p));
		ck_assert_ptr_nonnull(nl);
		n = (size_t)(nl - p);
		ck_assert_msg(n + 1 <= OG_LOG_LINE_MAX, "line of %zu bytes", n + 1);
		o = json_loadb(p, n, JSON_REJECT_DUPLICATES, &err);
		ck_assert_msg(o != NULL, "line %zu does not parse: %s: %.*s",
		              json_array_size(arr) + 1, err.text, (int)(n > 200 ? 200 : n), p);
		ck_assert_msg(json_is_object(o), "line is not an object");
		ck_assert_int_eq(json_array_append_new(arr, o), 0);
		p = nl + 1;
	}
	free(s);
	return arr;
}

static const char *
str_field(json_t *o, const char *name)
{
	json_t *v = json_object_get(o, name);

	return json_is_string(v) ? json_string_value(v) : NULL;
}

static void
open_log(enum log_level level)
{
	ck_assert_int_eq(log_open(logpath, level, "check_log"), 0);
}

START_TEST(test_fields)
{
	struct log_fields f = {
		.client = "n8n-main",
		.key = "acme:lead-sync:42:v1",
		.payload_hash = "sha256:015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862",
		.state_from = "processing",
		.state_to = "awaiting_human",
		.version = 3,
		.attempt = 2,
		.request_id = "0123456789abcdef0123456789abcdef",
		.method = "POST",
		.path = "/v1/runs",
		.status = 201,
	};
	json_t *lines, *o;
	const char *ts;
	int y, mo, d, h, mi, s, ms;
	char z = 0;

	open_log(LOG_LEVEL_INFO);
	log_event(LOG_LEVEL_NOTICE, "run.claimed", &f);
	lines = load_lines(logpath);
	ck_assert_uint_eq(json_array_size(lines), 1);
	o = json_array_get(lines, 0);

	ts = str_field(o, "ts");
	ck_assert_ptr_nonnull(ts);
	ck_assert_uint_eq(strlen(ts), 24);
	ck_assert_int_eq(sscanf(ts, "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c", &y, &mo, &d,
	                        &h, &mi, &s, &ms, &z), 8);
	ck_assert_int_eq(z, 'Z');
	ck_assert_int_ge(y, 2024);

	ck_assert_str_eq(str_field(o, "level"), "notice");
	ck_assert_str_eq(str_field(o, "event"), "run.claimed");
	ck_assert_str_eq(str_field(o, "program"), "check_log");
	ck_assert_str_eq(str_field(o, "client"), "n8n-main");
	ck_assert_str_eq(str_field(o, "key"), "acme:lead-sync:42:v1");
	/* named fields are not redacted: a payload hash is not a secret */
	ck_assert_str_eq(str_field(o, "payload_hash"), f.payload_hash);
	ck_assert_str_eq(str_field(o, "state_from"), "processing");
	ck_assert_str_eq(str_field(o, "state_to"), "awaiting_human");
	ck_assert_int_eq(json_integer_value(json_object_get(o, "version")), 3);
	ck_assert_int_eq(json_integer_value(json_object_get(o, "attempt")), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(o, "status")), 201);
	ck_assert_str_eq(str_field(o, "request_id"), f.request_id);
	ck_assert_str_eq(str_field(o, "method"), "POST");
	ck_assert_str_eq(str_field(o, "path"), "/v1/runs");
	/* NULL and zero fields are left out */
	ck_assert_uint_eq(json_object_size(o), 15);
	ck_assert_ptr_null(json_object_get(o, "actor"));
	ck_assert_ptr_null(json_object_get(o, "reason"));
	ck_assert_ptr_null(json_object_get(o, "detail"));
	ck_assert_ptr_null(json_object_get(o, "truncated"));
	json_decref(lines);
}
END_TEST

START_TEST(test_field_order)
{
	static const char *const order[] = {
		"ts", "level", "event", "program", "client", "key", "correlation_id",
		"workflow_version", "contract", "trigger", "payload_hash",
		"state_from", "state_to", "version", "actor", "decision",
		"approval_id", "previous_owner", "effect_id", "target", "provider_id", "error_class",
		"attempt", "model", "validation", "reason", "detail", "hint",
		"request_id", "method", "path", "status",
	};
	struct log_fields f = {
		.client = "c", .key = "k", .correlation_id = "ci",
		.workflow_version = "wv", .contract = "co", .trigger = "tr",
		.payload_hash = "ph", .state_from = "sf", .state_to = "st",
		.actor = "ac", .decision = "de", .approval_id = "ap", .previous_owner = "po",
		.effect_id = "ef", .target = "ta", .provider_id = "pi",
		.error_class = "ec", .model = "mo", .validation = "va",
		.reason = "re", .detail = "dt", .hint = "hi", .request_id = "ri",
		.method = "me", .path = "pa", .version = 7, .attempt = 8,
		.status = 200,
	};
	char *line, *prev, *at, needle[64];
	json_t *lines;
	size_t i;

	open_log(LOG_LEVEL_DEBUG);
	log_event(LOG_LEVEL_DEBUG, "x.y", &f);
	lines = load_lines(logpath);
	ck_assert_uint_eq(json_array_size(lines), 1);
	ck_assert_uint_eq(json_object_size(json_array_get(lines, 0)),
	                  sizeof(order) / sizeof(order[0]));
	json_decref(lines);

	line = slurp(logpath, NULL);
	prev = line;
	for (i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		snprintf(needle, sizeof(needle), "\"%s\":", order[i]);
		at = strstr(line, needle);
		ck_assert_msg(at != NULL, "%s missing", order[i]);
		ck_assert_msg(at >= prev, "%s out of order", order[i]);
		prev = at;
	}
	free(line);
}
END_TEST

START_TEST(test_no_fields)
{
	json_t *lines, *o;

	open_log(LOG_LEVEL_INFO);
	log_event(LOG_LEVEL_INFO, "janitor.tick", NULL);
	log_event(LOG_LEVEL_INFO, NULL, NULL);
	lines = load_lines(logpath);
	ck_assert_uint_eq(json_array_size(lines), 2);
	o = json_array_get(lines, 0);
	ck_assert_uint_eq(json_object_size(o), 4);
	ck_assert_str_eq(str_field(o, "event"), "janitor.tick");
	ck_assert_ptr_nonnull(str_field(json_array_get(lines, 1), "event"));
	json_decref(lines);
}
END_TEST

START_TEST(test_levels)
{
	static const enum log_level all[] = {
		LOG_LEVEL_DEBUG, LOG_LEVEL_INFO, LOG_LEVEL_NOTICE,
		LOG_LEVEL_WARNING, LOG_LEVEL_ERROR, LOG_LEVEL_ALERT,
	};
	json_t *lines;
	size_t i;

	open_log(LOG_LEVEL_WARNING);
	ck_assert(!log_enabled(LOG_LEVEL_NOTICE));
	ck_assert(log_enabled(LOG_LEVEL_WARNING));
	ck_assert(!log_enabled((enum log_level)99));
	ck_assert(!log_enabled((enum log_level)-1));
	for (i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		log_event(all[i], "level.test", NULL);
	lines = load_lines(logpath);
	ck_assert_uint_eq(json_array_size(lines), 3);
	ck_assert_str_eq(str_field(json_array_get(lines, 0), "level"), "warning");
	ck_assert_str_eq(str_field(json_array_get(lines, 1), "level"), "error");
	ck_assert_str_eq(str_field(json_array_get(lines, 2), "level"), "alert");
	json_decref(lines);

	log_set_level(LOG_LEVEL_ALERT);
	log_event(LOG_LEVEL_ERROR, "level.test", NULL);
	log_set_level(LOG_LEVEL_DEBUG);
	ck_assert(log_enabled(LOG_LEVEL_DEBUG));
	log_event(LOG_LEVEL_DEBUG, "level.test", NULL);
	lines = load_lines(logpath);
	ck_assert_uint_eq(json_array_size(lines), 4);
	ck_assert_str_eq(str_field(json_array_get(lines, 3), "level"), "debug");
	json_decref(lines);
}
END_TEST

START_TEST(test_level_names)
{
	int i;

	for (i = LOG_LEVEL_DEBUG; i <= LOG_LEVEL_ALERT; i++)
		ck_assert_int_eq(log_level_parse(log_level_name((enum log_level)i)), i);
	ck_assert_str_eq(log_level_name(LOG_LEVEL_WARNING), "warning");
	ck_assert_int_eq(log_level_parse("alert"), LOG_LEVEL_ALERT);
	ck_assert_int_eq(log_level_parse("verbose"), -1);
	ck_assert_int_eq(log_level_parse(""), -1);
	ck_assert_int_eq(log_level_parse(NULL), -1);
	ck_assert_ptr_nonnull(log_level_name((enum log_level)42));
}
END_TEST

#define TOKEN43 "Zm9vYmFyYmF6cXV4LXF1dXgtY29yZ2UtZ3JhdWx0X2E" /* 43 chars */
#define HEX64 "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"

static const struct redact_case {
	const char *in;
	const char *want;
	size_t runs;
} redact_cases[] = {
	{ "no secrets here", "no secrets here", 0 },
	{ "", "", 0 },
	{ "Authorization: Bearer og_live_abc.def/ghi+jk= next",
	  "Authorization: Bearer [redacted] next", 1 },
	{ "bearer xyz", "bearer ***", 1 },
	{ "BEARER\tabcdefghijkl", "BEARER\t[redacted]", 1 },
	{ "Bearer  two-spaces-token", "Bearer  [redacted]", 1 },
	{ "Bearer", "Bearer", 0 },
	{ "Bearer ", "Bearer ", 0 },
	{ "unbearer abc", "unbearer abc", 0 },
	{ "token " TOKEN43 " rejected", "token [redacted] rejected", 1 },
	{ "hash sha256:" HEX64, "hash sha256:[redacted]", 1 },
	{ "31 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "31 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 0 },
	{ "32 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "32 [redacted]", 1 },
	/* a kept name (test_redact sets one) stays readable; anything else that
	 * long does not, however much it looks like a name */
	{ "connection_lost_after_send_not_idempotent", "connection_lost_after_send_not_idempotent", 0 },
	{ "x connection_lost_after_send_Not_idempotent", "x [redacted]", 1 },
	{ "timeout_after_send_not_idempotent", "[redacted]", 1 },
	{ TOKEN43 "," TOKEN43, "[redacted],[redacted]", 2 },
	{ "key=" TOKEN43 "; Bearer abc", "key=[redacted]; Bearer ***", 2 },
	{ "tenant:lead-sync:object-42:v1.2.3", "tenant:lead-sync:object-42:v1.2.3", 0 },
};

/* The one name the redaction cases keep. */
static const char *const kept[] = { "connection_lost_after_send_not_idempotent" };

START_TEST(test_redact)
{
	const struct redact_case *c = &redact_cases[_i];
	char buf[256];

	log_keep_names(kept, 1);
	ck_assert_uint_lt(strlen(c->in), sizeof(buf));
	strcpy(buf, c->in);
	ck_assert_uint_eq(log_redact(buf), c->runs);
	ck_assert_str_eq(buf, c->want);
	/* redacting twice changes nothing more */
	log_redact(buf);
	ck_assert_str_eq(buf, c->want);
}
END_TEST

/* A provider's error text: internal hosts, URLs and short keys go; the
 * words an operator needs (the status, the SMTP code, the rule) stay. */
static const struct redact_case provider_cases[] = {
	{ "Failed to connect to crm.internal.corp port 8443: Connection refused",
	  "Failed to connect to [host] port 8443: Connection refused", 1 },
	{ "Could not resolve host: smtp-relay.prod.lan", "Could not resolve host: [host]", 1 },
	{ "connect to 10.20.30.40:587 timed out after 5000 ms",
	  "connect to [host] timed out after 5000 ms", 1 },
	{ "HTTP 401 from https://crm.example.net/api/v2/tags?api_key=abc: invalid key",
	  "HTTP 401 from [host] invalid key", 1 },
	{ "401 Unauthorized: api_key=sk_test_51Hq9 rejected",
	  "401 Unauthorized: api_key=[redacted] rejected", 1 },
	{ "invalid token sk_live_4eC39HqLyj rejected", "invalid token [redacted] rejected", 1 },
	{ "550 5.7.1 Отказано: получатель заблокирован 🚫", "550 5.7.1 Отказано: получатель заблокирован 🚫", 0 },
	{ "421 4.7.0 Try again later (v1.2)", "421 4.7.0 Try again later (v1.2)", 0 },
	{ "connection_lost_after_send_not_idempotent", "connection_lost_after_send_not_idempotent", 0 },
	{ "550 5.1.1 <bob.smith+billing@corp.example.com>: Recipient address rejected",
	  "550 5.1.1 <[address]>: Recipient address rejected", 1 },
	{ "552 ящик ольга.петрова@pochta.example.ru переполнен",
	  "552 ящик [address] переполнен", 1 },
	{ "{\"error\":\"denied\",\"echo\":\"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc\"}",
	  "{\"error\":\"denied\",\"echo\":\"Authorization: Bearer ********", 2 },
	{ "提供者错误: 主机 mail.内部 无法访问 — password: hunter2",
	  "提供者错误: 主机 mail.内部 无法访问 — password: *******", 1 },
};

START_TEST(test_redact_provider)
{
	const struct redact_case *c = &provider_cases[_i];
	char buf[256];

	log_keep_names(kept, 1);
	ck_assert_uint_lt(strlen(c->in), sizeof(buf));
	strcpy(buf, c->in);
	ck_assert_uint_eq(log_redact_provider(buf), c->runs);
	ck_assert_str_eq(buf, c->want);
	ck_assert_uint_le(strlen(buf), strlen(c->in));
	log_redact_provider(buf);
	ck_assert_str_eq(buf, c->want);
}
END_TEST

START_TEST(test_redact_null)
{
	ck_assert_uint_eq(log_redact(NULL), 0);
}
END_TEST

START_TEST(test_redact_in_log)
{
	const char *detail = "provider said 401 for Authorization: Bearer sk_live_q8Zr2LmN";
	const char *reason = "token " TOKEN43 " already used";
	struct log_fields f = {
		.reason = reason,
		.detail = detail,
		.hint = "rotate key " HEX64,
	};
	json_t *lines, *o;
	char *all;

	open_log(LOG_LEVEL_INFO);
	log_event(LOG_LEVEL_WARNING, "auth.failed", &f);
	/* the caller's text is not touched */
	ck_assert_str_eq(f.detail, detail);

	all = slurp(logpath, NULL);
	ck_assert_ptr_null(strstr(all, "sk_live_q8Zr2LmN"));
	ck_assert_ptr_null(strstr(all, "q8Zr2LmN"));
	ck_assert_ptr_null(strstr(all, TOKEN43));
	ck_assert_ptr_null(strstr(all, "Zm9vYmFy"));
	ck_assert_ptr_null(strstr(all, HEX64));
	free(all);

	lines = load_lines(logpath);
	o = json_array_get(lines, 0);
	ck_assert_str_eq(str_field(o, "detail"),
	                 "provider said 401 for Authorization: Bearer [redacted]");
	ck_assert_str_eq(str_field(o, "reason"), "token [redacted] already used");
	ck_assert_str_eq(str_field(o, "hint"), "rotate key [redacted]");
	json_decref(lines);
}
END_TEST

START_TEST(test_redact_at_cut)
{
	/* A secret near the points where over-long free text is cut (the
	 * copy that is redacted, the line) must not leak even in part. */
	size_t n = 3 * OG_LOG_LINE_MAX, i;
	char *detail = malloc(n + 1), *all;
	struct log_fields f = { 0 };

	ck_assert_ptr_nonnull(detail);
	for (i = 0; i < n; i++)
		detail[i] = i % 2 ? ' ' : 'x';
	for (i = 0; i < 64; i++)
		detail[OG_LOG_LINE_MAX - 20 + i] = 'Q';
	detail[n] = '\0';
	f.detail = detail;
	f.reason = detail;
	open_log(LOG_LEVEL_INFO);
	log_event(LOG_LEVEL_INFO, "cut.test", &f);
	all = slurp(logpath, NULL);
	ck_assert_ptr_null(strstr(all, "QQ"));
	free(all);
	json_decref(load_lines(logpath));
	free(detail);
}
END_TEST

START_TEST(test_truncation)
{
	size_t big = 100 * 1024, i, len;
	char *detail = malloc(big + 1), *hint = malloc(2049), *all;
	char field[OG_FIELD_MAX + 1];
	struct log_fields f = { 0 };
	json_t *lines, *o;

	ck_assert_ptr_nonnull(detail);
	ck_assert_ptr_nonnull(hint);
	/* control characters and invalid UTF-8 expand when escaped */
	for (i = 0; i < big; i++)
		detail[i] = "ab\x01\"\\\xff\xc3\n"[i % 8];
	detail[big] = '\0';
	memset(hint, 'h', 2048);
	for (i = 5; i < 2048; i += 6)
		hint[i] = ' ';
	hint[2048] = '\0';
	memset(field, 'f', sizeof(field) - 1);
	for (i = 7; i < sizeof(field) - 1; i += 8)
		field[i] = '.';
	field[sizeof(field) - 1] = '\0';

	f.key = "the-key";
	f.detail = detail;
	f.hint = hint;
	f.request_id = "rid-1";
	f.status = 500;
	open_log(LOG_LEVEL_INFO);
	log_event(LOG_LEVEL_ERROR, "big.detail", &f);

	/* every named field at its longest, too */
	f.client = f.correlation_id = f.workflow_version = f.contract = field;
	f.trigger = f.payload_hash = f.state_from = f.state_to = field;
	f.actor = f.decision = f.approval_id = f.effect_id = f.target = field;
	f.provider_id = f.error_class = f.model = f.validation = f.reason = field;
	f.method = f.path = field;
	log_event(LOG_LEVEL_ERROR, "big.everything", &f);

	lines = load_lines(logpath);
	ck_assert_uint_eq(json_array_size(lines), 2);
	for (i = 0; i < 2; i++) {
		o = json_array_get(lines, i);
		ck_assert(json_is_true(json_object_get(o, "truncated")));
		ck_assert_str_eq(str_field(o, "key"), "the-key");
		ck_assert_str_eq(str_field(o, "request_id"), "rid-1");
		ck_assert_int_eq(json_integer_value(json_object_get(o, "status")), 500);
	}
	o = json_array_get(lines, 0);
	ck_assert_ptr_nonnull(str_field(o, "detail"));
	ck_assert_uint_gt(strlen(str_field(o, "detail")), 1000);
	/* the hint kept its share */
	ck_assert_ptr_nonnull(str_field(o, "hint"));
	ck_assert_uint_gt(strlen(str_field(o, "hint")), 100);
	o = json_array_get(lines, 1);
	ck_assert_str_eq(str_field(o, "client"), field);
	ck_assert_str_eq(str_field(o, "validation"), field);
	ck_assert_str_eq(str_field(o, "reason"), field);
	ck_assert_str_eq(str_field(o, "method"), field);
	ck_assert_str_eq(str_field(o, "path"), field);
	ck_assert_ptr_nonnull(str_field(o, "detail"));
	json_decref(lines);

	/* load_lines() has checked every line against OG_LOG_LINE_MAX */
	all = slurp(logpath, &len);
	ck_assert_uint_gt(len, OG_LOG_LINE_MAX);
	free(all);
	free(detail);
	free(hint);
}
END_TEST

START_TEST(test_bad_utf8)
{
	struct log_fields f = { .key = "caf\xc3\xa9\xff\xed\xa0\x80!", .detail = "a\tb" };
	json_t *lines, *o;

	open_log(LOG_LEVEL_INFO);
	log_event(LOG_LEVEL_INFO, "utf8", &f);
	lines = load_lines(logpath);
	o = json_array_get(lines, 0);
	ck_assert_str_eq(str_field(o, "key"),
	                 "caf\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd!");
	ck_assert_str_eq(str_field(o, "detail"), "a\tb");
	json_decref(lines);
}
END_TEST

START_TEST(test_reopen)
{
	char rotated[256];
	struct stat st;
	json_t *lines;

	umask(022);
	snprintf(rotated, sizeof(rotated), "%s.1", logpath);
	open_log(LOG_LEVEL_INFO);
	log_event(LOG_LEVEL_INFO, "before.rotate", NULL);
	ck_assert_int_eq(rename(logpath, rotated), 0);
	log_event(LOG_LEVEL_INFO, "still.old", NULL);
	ck_assert_int_eq(log_reopen(), 0);
	log_event(LOG_LEVEL_INFO, "after.rotate", NULL);

	lines = load_lines(rotated);
	ck_assert_uint_eq(json_array_size(lines), 2);
	ck_assert_str_eq(str_field(json_array_get(lines, 0), "event"), "before.rotate");
	ck_assert_str_eq(str_field(json_array_get(lines, 1), "event"), "still.old");
	json_decref(lines);
	lines = load_lines(logpath);
	ck_assert_uint_eq(json_array_size(lines), 1);
	ck_assert_str_eq(str_field(json_array_get(lines, 0), "event"), "after.rotate");
	json_decref(lines);

	ck_assert_int_eq(stat(logpath, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0640);
}
END_TEST

START_TEST(test_open_fails)
{
	ck_assert_int_eq(log_open("/nonexistent-dir/x/decisions.log",
	                          LOG_LEVEL_INFO, "t"), -1);
}
END_TEST

/* Runs fn with fd 2 sent to a file; returns what was written there. */
static char *
capture_stderr(void (*fn)(void))
{
	char path[256];
	int saved, fd;
	char *s;

	snprintf(path, sizeof(path), "%s/stderr", tmpdir);
	fflush(stderr);
	saved = dup(STDERR_FILENO);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_ge(saved, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_ge(dup2(fd, STDERR_FILENO), 0);
	close(fd);
	fn();
	fflush(stderr);
	ck_assert_int_ge(dup2(saved, STDERR_FILENO), 0);
	close(saved);
	s = slurp(path, NULL);
	unlink(path);
	return s;
}

static void
write_to_stderr(void)
{
	ck_assert_int_eq(log_open("-", LOG_LEVEL_INFO, "check_log"), 0);
	log_event(LOG_LEVEL_INFO, "to.stderr", NULL);
}

START_TEST(test_stderr)
{
	char *s = capture_stderr(write_to_stderr);
	json_t *o = json_loads(s, 0, NULL);

	ck_assert_ptr_nonnull(o);
	ck_assert_str_eq(str_field(o, "event"), "to.stderr");
	json_decref(o);
	free(s);
}
END_TEST

static char linkpath[256];
static char goodpath[256];

static void
fail_then_recover(void)
{
	int i;

	/* the log path is a symlink to /dev/full: every write fails */
	ck_assert_int_eq(log_open(linkpath, LOG_LEVEL_INFO, "check_log"), 0);
	for (i = 0; i < 5; i++)
		log_event(LOG_LEVEL_INFO, "lost", NULL);
	/* point it at a real file, as an operator would after fixing things */
	ck_assert_int_eq(unlink(linkpath), 0);
	ck_assert_int_eq(symlink(goodpath, linkpath), 0);
	ck_assert_int_eq(log_reopen(), 0);
	for (i = 0; i < 3; i++)
		log_event(LOG_LEVEL_INFO, "kept", NULL);
}

START_TEST(test_write_failure)
{
	const char *first, *again;
	char *s;
	json_t *lines;

	snprintf(linkpath, sizeof(linkpath), "%s/link.log", tmpdir);
	snprintf(goodpath, sizeof(goodpath), "%s/good.log", tmpdir);
	ck_assert_int_eq(symlink("/dev/full", linkpath), 0);
	s = capture_stderr(fail_then_recover);
	/* one failure line, one recovery line, nothing per lost line */
	first = strstr(s, "oncegate: decision log write failed: ");
	ck_assert_msg(first != NULL, "stderr: %s", s);
	ck_assert_ptr_null(strstr(first + 1, "oncegate: decision log write failed"));
	again = strstr(s, "succeed again");
	ck_assert_ptr_nonnull(again);
	ck_assert_ptr_null(strstr(again + 1, "succeed again"));
	ck_assert_ptr_null(strstr(s, "\"event\""));
	free(s);

	lines = load_lines(goodpath);
	ck_assert_uint_eq(json_array_size(lines), 3);
	json_decref(lines);
}
END_TEST

#define THREADS 8
#define LINES_PER_THREAD 2000

static void *
writer(void *arg)
{
	int id = (int)(long)arg, i;
	char detail[6000], idbuf[32];
	struct log_fields f = { 0 };
	size_t n, j;

	snprintf(idbuf, sizeof(idbuf), "thread-%d", id);
	f.client = idbuf;
	f.detail = detail;
	for (i = 0; i < LINES_PER_THREAD; i++) {
		/* lengths vary past a page, so a torn write would show */
		n = (size_t)((i * 7919 + id * 104729) % (int)(sizeof(detail) - 1));
		/* spaced out, or redaction would mask it as a token */
		memset(detail, 'a' + id, n);
		for (j = 1; j < n; j += 8)
			detail[j] = ' ';
		detail[n] = '\0';
		f.attempt = i + 1;
		log_event(LOG_LEVEL_INFO, "thread.line", &f);
	}
	return NULL;
}

static void
check_thread_lines(json_t *lines, int counts[THREADS])
{
	size_t i;
	json_t *o;
	const char *c, *d;

	for (i = 0; i < json_array_size(lines); i++) {
		o = json_array_get(lines, i);
		c = str_field(o, "client");
		d = str_field(o, "detail");
		ck_assert_ptr_nonnull(c);
		ck_assert(strncmp(c, "thread-", 7) == 0 && c[7] >= '0' && c[7] < '0' + THREADS);
		/* a line only ever holds its own thread's text */
		if (d != NULL)
			ck_assert_uint_eq(strspn(d, (char[]){ (char)('a' + c[7] - '0'), ' ', 0 }),
			                  strlen(d));
		counts[c[7] - '0']++;
	}
}

START_TEST(test_threads)
{
	pthread_t t[THREADS];
	int counts[THREADS] = { 0 }, i;
	json_t *lines;

	open_log(LOG_LEVEL_INFO);
	for (i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, writer, (void *)(long)i), 0);
	for (i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
	lines = load_lines(logpath);
	ck_assert_uint_eq(json_array_size(lines), THREADS * LINES_PER_THREAD);
	check_thread_lines(lines, counts);
	for (i = 0; i < THREADS; i++)
		ck_assert_int_eq(counts[i], LINES_PER_THREAD);
	json_decref(lines);
}
END_TEST

static atomic_int writers_done;

static void *
rotator(void *arg)
{
	char rotated[256];
	int n = 0;

	(void)arg;
	while (!writers_done) {
		snprintf(rotated, sizeof(rotated), "%s.%d", logpath, ++n);
		ck_assert_int_eq(rename(logpath, rotated), 0);
		ck_assert_int_eq(log_reopen(), 0);
		usleep(2000);
	}
	return (void *)(long)n;
}

START_TEST(test_threads_with_reopen)
{
	pthread_t t[THREADS], rot;
	int counts[THREADS] = { 0 }, i, rotations;
	void *ret;
	char p[256];
	json_t *lines;

	open_log(LOG_LEVEL_INFO);
	writers_done = 0;
	ck_assert_int_eq(pthread_create(&rot, NULL, rotator, NULL), 0);
	for (i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, writer, (void *)(long)i), 0);
	for (i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
	writers_done = 1;
	ck_assert_int_eq(pthread_join(rot, &ret), 0);
	rotations = (int)(long)ret;
	ck_assert_int_gt(rotations, 0);

	/* no line lost or torn across all the rotated files */
	for (i = 0; i <= rotations; i++) {
		if (i == 0)
			snprintf(p, sizeof(p), "%s", logpath);
		else
			snprintf(p, sizeof(p), "%s.%d", logpath, i);
		lines = load_lines(p);
		check_thread_lines(lines, counts);
		json_decref(lines);
	}
	for (i = 0; i < THREADS; i++)
		ck_assert_int_eq(counts[i], LINES_PER_THREAD);
}
END_TEST

/* The model as an object of its parts; the loggable output fields as one
 * object, written whole or left out whole, never cut into invalid JSON. */
START_TEST(test_model_and_output_fields)
{
	static char big[OG_LOG_LINE_MAX + 64];
	struct log_fields f = { .key = "k", .model = "qwen2.5-7b-instruct",
		                .model_provider = "openai-compatible", .model_revision = "2024-09-19",
		                .output_fields = "{\"/confidence\":0.82,\"/tone\":\"дружелюбный\"}" };
	json_t *lines, *o, *m;

	open_log(LOG_LEVEL_INFO);
	log_event(LOG_LEVEL_INFO, "output.valid", &f);
	f.model_provider = f.model_revision = NULL;
	memset(big, 'x', sizeof(big) - 1);
	big[0] = '{';
	big[1] = '"';
	big[sizeof(big) - 3] = '"';
	big[sizeof(big) - 2] = '}';
	f.output_fields = big;
	log_event(LOG_LEVEL_INFO, "output.big", &f);
	f.output_fields = "[1,2]"; /* not an object */
	log_event(LOG_LEVEL_INFO, "output.array", &f);
	lines = load_lines(logpath);
	ck_assert_uint_eq(json_array_size(lines), 3);

	o = json_array_get(lines, 0);
	m = json_object_get(o, "model");
	ck_assert_uint_eq(json_object_size(m), 3);
	ck_assert_str_eq(json_string_value(json_object_get(m, "provider")), "openai-compatible");
	ck_assert_str_eq(json_string_value(json_object_get(m, "name")), "qwen2.5-7b-instruct");
	ck_assert_str_eq(json_string_value(json_object_get(m, "revision")), "2024-09-19");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(o, "output"), "/tone")),
	                 "дружелюбный");
	ck_assert(json_object_get(o, "truncated") == NULL);

	for (size_t i = 1; i < 3; i++) {
		o = json_array_get(lines, i);
		ck_assert_msg(json_object_get(o, "output") == NULL, "line %zu kept output", i);
		ck_assert(json_is_true(json_object_get(o, "truncated")));
		ck_assert_str_eq(str_field(o, "key"), "k");
		ck_assert_uint_eq(json_object_size(json_object_get(o, "model")), 1);
	}
	json_decref(lines);
}
END_TEST

TL_SUITE(log_suite, "log",
         {"lines", 0, .setup = setup, .teardown = teardown,
          .tests = TL_LIST(test_fields, test_field_order, test_no_fields,
                           test_model_and_output_fields, test_levels, test_level_names,
                           test_truncation, test_bad_utf8, test_stderr)},
         {"redact", 0, .setup = setup, .teardown = teardown,
          .loops = TL_LOOPS({test_redact, sizeof(redact_cases) / sizeof(redact_cases[0])},
                            {test_redact_provider,
                             (int)(sizeof(provider_cases) / sizeof(provider_cases[0]))}),
          .tests = TL_LIST(test_redact_null, test_redact_in_log,
                           test_redact_at_cut)},
         /* generous: valgrind runs the threads tests ~50x slower */
         {"files", 600, .setup = setup, .teardown = teardown,
          .tests = TL_LIST(test_reopen, test_open_fails, test_write_failure, test_threads,
                           test_threads_with_reopen)})

TL_SUITE_MAIN(log_suite, false)

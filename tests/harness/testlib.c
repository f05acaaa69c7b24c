/*
 * testlib.c — see testlib.h. The product is driven from outside only.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <netdb.h>
#include <pthread.h>
#include <poll.h>
#include <sys/socket.h>

#include <check.h>
#include <curl/curl.h>
#include <openssl/sha.h>

#include "config.h"
#include "csrf.h"
#include "outbox.h"
#include "testlib.h"

const char *
tl_env(const char *name)
{
	const char *v = getenv(name);

	return v != NULL && *v != '\0' ? v : NULL;
}

/* ---- a suite's run --------------------------------------------------------- */

char tl_run[64];

int
tl_suite_begin(const char *suite, const char *prefix, const char *needed)
{
	const char *p = needed != NULL ? needed : "";

	if (tl_env("ONCEGATE_URL") == NULL) {
		printf("%s: ONCEGATE_URL is not set; run `./dev test` to start the stack. "
		       "Skipping.\n", suite);
		return 77;
	}
	while (*p != '\0') {
		char name[64];
		size_t n = strcspn(p, " ");

		snprintf(name, sizeof(name), "%.*s", (int)n, p);
		if (n > 0 && tl_env(name) == NULL) {
			fprintf(stderr, "%s: ONCEGATE_URL is set but %s is not\n", suite, name);
			return 99;
		}
		p += n + (p[n] == ' ');
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return 99;
	snprintf(tl_run, sizeof(tl_run), "%s%lld-%d", prefix, (long long)time(NULL), (int)getpid());
	return 0;
}

int
tl_suite_end(int failed)
{
	curl_global_cleanup();
	return failed == 0 ? 0 : 1;
}

void
tl_mkkey(char *buf, size_t n, const char *what)
{
	snprintf(buf, n, "%s-%s", tl_run, what);
}

void
tl_claim_body(const char *bearer, const json_t *body, struct tl_claimed *c)
{
	struct tl_resp r;

	tl_post_json("/v1/runs", bearer, body, &r);
	ASSERT_STATUS(&r, 201);
	ck_assert_msg(tl_jstr(r.json, "lease_owner") != NULL && tl_jint(r.json, "version", &c->version),
	              "claim answer: %s", r.body);
	snprintf(c->owner, sizeof(c->owner), "%s", tl_jstr(r.json, "lease_owner"));
	tl_resp_free(&r);
}

void
tl_claim_run(const char *key, struct tl_claimed *c)
{
	tl_claim_payload(tl_env("ONCEGATE_API_KEY"), key,
	                 json_pack("{s:i, s:s}", "ticket", 42, "m", tl_run), c);
}

void
tl_claim_payload(const char *bearer, const char *key, json_t *payload, struct tl_claimed *c)
{
	json_t *body = json_pack("{s:s, s:o, s:i}", "key", key, "payload", payload,
	                         "lease_seconds", 60);

	tl_claim_body(bearer, body, c);
	json_decref(body);
}

void
tl_sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

double
tl_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- HTTP -------------------------------------------------------------- */

struct sink {
	char *data;
	size_t len;
	size_t cap;
	bool overflow;
};

static size_t
body_cb(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct sink *s = ud;
	size_t n = size * nmemb;

	if (s->len + n + 1 > TL_RESPONSE_MAX) {
		s->overflow = true;
		return 0;
	}
	if (s->len + n + 1 > s->cap) {
		size_t cap = s->cap ? s->cap : 4096;
		char *p;

		while (cap < s->len + n + 1)
			cap *= 2;
		p = realloc(s->data, cap);
		if (p == NULL)
			return 0;
		s->data = p;
		s->cap = cap;
	}
	memcpy(s->data + s->len, ptr, n);
	s->len += n;
	s->data[s->len] = '\0';
	return n;
}

static void
header_value(const char *line, size_t n, const char *name, char *dst)
{
	size_t nl = strlen(name);
	size_t i, end;

	if (n <= nl || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
		return;
	i = nl + 1;
	while (i < n && (line[i] == ' ' || line[i] == '\t'))
		i++;
	end = n;
	while (end > i && (line[end - 1] == '\r' || line[end - 1] == '\n' ||
	                   line[end - 1] == ' '))
		end--;
	if (end - i >= TL_HEADER_MAX)
		end = i + TL_HEADER_MAX - 1;
	memcpy(dst, line + i, end - i);
	dst[end - i] = '\0';
}

static size_t
header_cb(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct tl_resp *r = ud;
	size_t n = size * nmemb;

	/* A new status line (e.g. after 100 Continue) starts a new header set. */
	if (n >= 5 && strncmp(ptr, "HTTP/", 5) == 0) {
		r->retry_after[0] = r->allow[0] = r->content_type[0] = '\0';
		r->location[0] = r->www_authenticate[0] = '\0';
		return n;
	}
	header_value(ptr, n, "Location", r->location);
	header_value(ptr, n, "WWW-Authenticate", r->www_authenticate);
	header_value(ptr, n, "Retry-After", r->retry_after);
	header_value(ptr, n, "Allow", r->allow);
	header_value(ptr, n, "Content-Type", r->content_type);
	return n;
}

/* $ONCEGATE_URL + path (malloc'd); NULL, with r filled as a request that
 * failed, when there is none. */
static char *
stack_url(const char *path, struct tl_resp *r)
{
	const char *base = tl_env("ONCEGATE_URL");
	char *url = NULL;

	if (base != NULL && asprintf(&url, "%s%s", base, path) >= 0)
		return url;
	memset(r, 0, sizeof(*r));
	r->body = strdup("");
	snprintf(r->error, sizeof(r->error), "%s",
	         base == NULL ? "ONCEGATE_URL is not set" : "request failed");
	return NULL;
}

/* With $ONCEGATE_API_RECORD set, every answer of the API (/v1/, /healthz, /readyz)
 * is appended to that file as one JSON line, for tests/openapi/validate.mjs
 * to check against the OpenAPI document after make check. One write(2) a
 * line on an O_APPEND file: suites running side by side do not mix lines. */
static void
record(const char *method, const char *path, const struct tl_resp *r)
{
	const char *file = tl_env("ONCEGATE_API_RECORD");
	json_t *line;
	char *text;
	int fd;

	if (file == NULL || r->status == 0 ||
	    (strncmp(path, "/v1/", 4) != 0 && strncmp(path, "/healthz", 8) != 0 &&
	     strncmp(path, "/readyz", 7) != 0))
		return;
	line = json_pack("{s:s, s:s, s:i, s:s, s:s%, s:s, s:s, s:s, s:s}", "method", method,
	                 "path", path, "status", (int)r->status, "content_type", r->content_type,
	                 "body", r->body, r->body_len, "retry_after", r->retry_after, "allow",
	                 r->allow, "location", r->location, "www_authenticate",
	                 r->www_authenticate);
	text = line != NULL ? json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
	json_decref(line);
	fd = text != NULL ? open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600) : -1;
	if (fd >= 0) {
		size_t n = strlen(text);

		text[n] = '\n'; /* json_dumps's NUL: the line is written by length */
		ck_assert_msg(write(fd, text, n + 1) == (ssize_t)(n + 1), "%s: cannot append to %s",
		              r->what, file);
		close(fd);
	}
	free(text);
}

int
tl_http(const char *method, const char *path, const char *bearer,
        const char *ctype, const char *body, size_t body_len,
        struct tl_resp *r)
{
	char *url = stack_url(path, r);
	int rc = url != NULL ? tl_http_url(method, url, NULL, bearer, ctype, body, body_len, r) : -1;

	snprintf(r->what, sizeof(r->what), "%s %s", method, path);
	record(method, path, r);
	free(url);
	return rc;
}

/* One request, the core of tl_http, tl_http_url and tl_http_hdrs. */
struct req {
	const char *method, *url;
	const char *iface;                /* local address (NULL: any) */
	const char *bearer;
	const char *const *headers;       /* more request headers (NULL-terminated) */
	const char *ctype, *body;
	size_t body_len;
	bool always_body;                 /* any method but GET and HEAD sends a body,
	                                   * empty when body is NULL */
};

struct hdr_sink {
	struct tl_resp *r;
	struct sink block;
};

static size_t
hdrs_cb(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct hdr_sink *hs = ud;
	size_t n = size * nmemb;

	if (n >= 5 && strncmp(ptr, "HTTP/", 5) == 0)
		hs->block.len = 0; /* a new response (after 1xx): start over */
	else if (body_cb(ptr, 1, n, &hs->block) != n)
		return 0;
	if (hs->block.data != NULL)
		hs->block.data[hs->block.len] = '\0';
	return header_cb(ptr, size, nmemb, hs->r);
}

static int
request(const struct req *q, struct tl_resp *r, char **headers)
{
	struct curl_slist *hdrs = NULL;
	struct sink sink = { 0 };
	struct hdr_sink hs = { 0 };
	char errbuf[CURL_ERROR_SIZE] = "";
	char *auth = NULL, *ct = NULL;
	CURL *h = NULL;
	CURLcode cc;
	int rc = -1;
	size_t i;

	memset(r, 0, sizeof(*r));
	hs.r = r;
	snprintf(r->what, sizeof(r->what), "%s %s", q->method, q->url);
	h = curl_easy_init();
	if (h == NULL)
		goto out;
	curl_easy_setopt(h, CURLOPT_URL, q->url);
	if (q->iface != NULL)
		curl_easy_setopt(h, CURLOPT_INTERFACE, q->iface);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)TL_HTTP_TIMEOUT_S);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)TL_CONNECT_TIMEOUT_S);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, body_cb);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, hdrs_cb);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, &hs);
	curl_easy_setopt(h, CURLOPT_PROXY, "");
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	/* Send big bodies at once: the test is about what the server answers. */
	hdrs = curl_slist_append(hdrs, "Expect:");
	if (q->bearer != NULL) {
		if (asprintf(&auth, "Authorization: Bearer %s", q->bearer) < 0) {
			auth = NULL;
			goto out;
		}
		hdrs = curl_slist_append(hdrs, auth);
	}
	for (i = 0; q->headers != NULL && q->headers[i] != NULL; i++)
		hdrs = curl_slist_append(hdrs, q->headers[i]);
	if (q->ctype != NULL) {
		if (asprintf(&ct, "Content-Type: %s", q->ctype) < 0) {
			ct = NULL;
			goto out;
		}
		hdrs = curl_slist_append(hdrs, ct);
	} else if (q->body != NULL) {
		/* Otherwise libcurl would add a form content type of its own. */
		hdrs = curl_slist_append(hdrs, "Content-Type:");
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	if (strcmp(q->method, "GET") == 0) {
		curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	} else if (strcmp(q->method, "HEAD") == 0) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else if (q->always_body) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
		                 (curl_off_t)(q->body != NULL ? q->body_len : 0));
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, q->body != NULL ? q->body : "");
		if (strcmp(q->method, "POST") != 0)
			curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, q->method);
	} else {
		if (q->body != NULL) {
			curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)q->body_len);
			curl_easy_setopt(h, CURLOPT_POSTFIELDS, q->body);
		}
		if (strcmp(q->method, "POST") != 0 || q->body == NULL)
			curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, q->method);
		if (strcmp(q->method, "POST") == 0 && q->body == NULL) {
			curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
			curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
		}
	}
	cc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
	if (cc != CURLE_OK) {
		snprintf(r->error, sizeof(r->error), "%s: %s",
		         curl_easy_strerror(cc), errbuf);
		/* An early answer (e.g. nginx's 413) may still have arrived. */
		if (r->status == 0)
			goto out;
	}
	rc = 0;
out:
	if (sink.data == NULL)
		sink.data = strdup("");
	r->body = sink.data;
	r->body_len = sink.len;
	if (r->body != NULL && r->body_len > 0)
		r->json = json_loadb(r->body, r->body_len, JSON_DECODE_ANY, NULL);
	if (rc != 0 && r->error[0] == '\0')
		snprintf(r->error, sizeof(r->error), "request failed");
	if (headers != NULL)
		*headers = hs.block.data != NULL ? hs.block.data : strdup("");
	else
		free(hs.block.data);
	curl_slist_free_all(hdrs);
	if (h != NULL)
		curl_easy_cleanup(h);
	free(auth);
	free(ct);
	return rc;
}

int
tl_http_url(const char *method, const char *url, const char *iface, const char *bearer,
            const char *ctype, const char *body, size_t body_len, struct tl_resp *r)
{
	const struct req q = { .method = method, .url = url, .iface = iface, .bearer = bearer,
		               .ctype = ctype, .body = body, .body_len = body_len };

	return request(&q, r, NULL);
}

int
tl_post_json(const char *path, const char *bearer, const json_t *body,
             struct tl_resp *r)
{
	char *text = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
	int rc;

	if (text == NULL) {
		memset(r, 0, sizeof(*r));
		r->body = strdup("");
		snprintf(r->error, sizeof(r->error), "json_dumps failed");
		return -1;
	}
	rc = tl_http("POST", path, bearer, "application/json", text,
	             strlen(text), r);
	free(text);
	return rc;
}

int
tl_post_text(const char *path, const char *bearer, const char *text,
             struct tl_resp *r)
{
	return tl_http("POST", path, bearer, "application/json", text,
	               strlen(text), r);
}

int
tl_get(const char *path, const char *bearer, struct tl_resp *r)
{
	return tl_http("GET", path, bearer, NULL, NULL, 0, r);
}

void
tl_resp_free(struct tl_resp *r)
{
	if (r == NULL)
		return;
	free(r->body);
	json_decref(r->json);
	r->body = NULL;
	r->json = NULL;
}

const char *
tl_jstr(const json_t *obj, const char *name)
{
	json_t *v;

	if (!json_is_object(obj))
		return NULL;
	v = json_object_get(obj, name);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

bool
tl_jint(const json_t *obj, const char *name, long long *out)
{
	json_t *v;

	if (!json_is_object(obj))
		return false;
	v = json_object_get(obj, name);
	if (!json_is_integer(v))
		return false;
	*out = json_integer_value(v);
	return true;
}

char *
tl_urlencode(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = strlen(s);
	char *out = malloc(n * 3 + 1);
	char *p = out;

	if (out == NULL)
		return NULL;
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if (isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
			*p++ = (char)c;
		} else {
			*p++ = '%';
			*p++ = hex[c >> 4];
			*p++ = hex[c & 15];
		}
	}
	*p = '\0';
	return out;
}

void
tl_payload_hash(const char *text, char out[72])
{
	memcpy(out, "sha256:", 7);
	tl_sha256_hex(text, out + 7);
}

void
tl_effect_hash(const char *payload, char out[72])
{
	json_t *v = json_loads(payload, JSON_DECODE_ANY, NULL);

	ck_assert_msg(v != NULL, "not JSON: %s", payload);
	ck_assert_int_eq(outbox_payload_hash(v, out, NULL), 0);
	json_decref(v);
}

bool
tl_ts_parse(const char *s, double *epoch)
{
	static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";
	struct tm tm;
	size_t i;

	if (s == NULL || strlen(s) != sizeof(shape) - 1)
		return false;
	for (i = 0; i < sizeof(shape) - 1; i++) {
		if (shape[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != shape[i])
			return false;
	}
	memset(&tm, 0, sizeof(tm));
	tm.tm_year = atoi(s) - 1900;
	tm.tm_mon = atoi(s + 5) - 1;
	tm.tm_mday = atoi(s + 8);
	tm.tm_hour = atoi(s + 11);
	tm.tm_min = atoi(s + 14);
	tm.tm_sec = atoi(s + 17);
	if (tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
	    tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
		return false;
	*epoch = (double)timegm(&tm) + atoi(s + 20) / 1000.0;
	return true;
}

/* ---- PostgreSQL -------------------------------------------------------- */

PGconn *
tl_pg_connect(void)
{
	PGconn *c = PQconnectdb("");

	ck_assert_msg(c != NULL && PQstatus(c) == CONNECTION_OK,
	              "cannot connect to PostgreSQL (PGHOST=%s PGPORT=%s PGDATABASE=%s): %s",
	              getenv("PGHOST") ? getenv("PGHOST") : "",
	              getenv("PGPORT") ? getenv("PGPORT") : "",
	              getenv("PGDATABASE") ? getenv("PGDATABASE") : "",
	              c != NULL ? PQerrorMessage(c) : "out of memory");
	return c;
}

char *
tl_pg_value(PGconn *c, const char *sql, int nparams, const char *const *params)
{
	PGresult *res = PQexecParams(c, sql, nparams, NULL, params, NULL, NULL, 0);
	char *v = NULL;

	ck_assert_msg(res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK,
	              "SQL failed: %s\n  %s", sql,
	              res != NULL ? PQresultErrorMessage(res) : PQerrorMessage(c));
	if (PQntuples(res) > 0 && !PQgetisnull(res, 0, 0))
		v = strdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return v;
}

long long
tl_pg_count(PGconn *c, const char *sql, int nparams, const char *const *params)
{
	char *v = tl_pg_value(c, sql, nparams, params);
	long long n = v != NULL ? strtoll(v, NULL, 10) : -1;

	free(v);
	return n;
}

double
tl_pg_double(PGconn *c, const char *sql, int nparams, const char *const *params)
{
	char *v = tl_pg_value(c, sql, nparams, params);
	double d = v != NULL ? strtod(v, NULL) : (double)NAN;

	free(v);
	return d;
}

static int
qparams(va_list ap, const char *p[QMAX])
{
	const char *v;
	int n = 0;

	while ((v = va_arg(ap, const char *)) != NULL) {
		ck_assert_int_lt(n, QMAX);
		p[n++] = v;
	}
	return n;
}

/* A query helper: the parameters collected, then fn's answer. */
#define TL_QUERY(type, name, fn)                                                       \
	type name(PGconn *c, const char *sql, ...)                                     \
	{                                                                              \
		const char *p[QMAX];                                                   \
		va_list ap;                                                            \
		int n;                                                                 \
                                                                                       \
		va_start(ap, sql);                                                     \
		n = qparams(ap, p);                                                    \
		va_end(ap);                                                            \
		return fn(c, sql, n, p);                                               \
	}

/* The first column of the first row (malloc'd) or NULL; it as a number; the
 * rows a statement touched. */
TL_QUERY(char *, qstr, tl_pg_value)
TL_QUERY(long long, qnum, tl_pg_count)
TL_QUERY(long long, qexec, tl_pg_exec)

/* tl_pg_value's answer parsed as JSON (NULL for no row / SQL NULL). */
static json_t *
pg_json(PGconn *c, const char *sql, int n, const char *const *p)
{
	char *text = tl_pg_value(c, sql, n, p);
	json_t *v;

	if (text == NULL)
		return NULL;
	v = json_loads(text, JSON_DECODE_ANY, NULL);
	ck_assert_msg(v != NULL, "not JSON: %s", text);
	free(text);
	return v;
}

/* A query returning one JSON text, parsed (NULL for no row / SQL NULL). */
TL_QUERY(json_t *, qjson, pg_json)

long long
tl_runs_of_key(PGconn *c, const char *key)
{
	return qnum(c, "SELECT count(*) FROM workflow_runs WHERE idempotency_key = $1", key,
	            (char *)NULL);
}

char *
tl_run_row(PGconn *c, const char *client, const char *key)
{
	const char *p[2] = { client, key };

	return tl_pg_value(c,
	    "SELECT row_to_json(r)::text FROM workflow_runs r "
	    "JOIN api_clients c ON c.id = r.client_id "
	    "WHERE c.name = $1 AND r.idempotency_key = $2", 2, p);
}

/* ---- the decision log -------------------------------------------------- */

long
tl_log_offset(void)
{
	const char *path = tl_env("ONCEGATE_LOG");
	struct stat st;

	if (path == NULL || stat(path, &st) != 0)
		return 0;
	return (long)st.st_size;
}

/* The file from offset on, NUL-terminated (malloc'd; its length in *len
 * when len is not NULL); NULL when it cannot be read. */
static char *
slurp_from(const char *path, long offset, size_t *len)
{
	char *buf = NULL;
	size_t cap = 0, n = 0;
	FILE *f;

	if (len != NULL)
		*len = 0;
	if (path == NULL || (f = fopen(path, "rb")) == NULL)
		return NULL;
	if (offset > 0 && fseek(f, offset, SEEK_SET) != 0) {
		fclose(f);
		return NULL;
	}
	for (;;) {
		size_t got;

		if (cap - n < 65536) {
			char *p = realloc(buf, cap + 65536 + 1);

			if (p == NULL) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = p;
			cap += 65536;
		}
		got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	fclose(f);
	buf[n] = '\0';
	if (len != NULL)
		*len = n;
	return buf;
}

static char *
read_from(long offset, size_t *len)
{
	return slurp_from(tl_env("ONCEGATE_LOG"), offset, len);
}

char *
tl_log_slurp(size_t *len)
{
	return read_from(0, len);
}

json_t *
tl_json_lines(const char *text, size_t len, tl_log_pred pred, const void *arg)
{
	json_t *out = json_array();
	const char *p, *nl;

	if (text == NULL)
		return out;
	for (p = text; (nl = memchr(p, '\n', len - (size_t)(p - text))) != NULL;
	     p = nl + 1) {
		json_t *line;

		if (nl == p)
			continue;
		line = json_loadb(p, (size_t)(nl - p), 0, NULL);
		if (!json_is_object(line)) {
			json_decref(line);
			line = json_stringn(p, (size_t)(nl - p));
			if (line == NULL)
				line = json_string("<line is not UTF-8>");
		}
		if (pred == NULL || pred(line, arg))
			json_array_append(out, line);
		json_decref(line);
	}
	return out;
}

/* Complete lines (ending in '\n') after offset, parsed. */
static json_t *
log_lines(long offset, tl_log_pred pred, const void *arg)
{
	size_t len;
	char *text = read_from(offset, &len);
	json_t *out = tl_json_lines(text, len, pred, arg);

	free(text);
	return out;
}

json_t *
tl_log_collect(long offset, tl_log_pred pred, const void *arg, size_t want)
{
	double deadline = tl_now() + TL_LOG_WAIT_MS / 1000.0;
	json_t *lines;

	for (;;) {
		lines = log_lines(offset, pred, arg);
		if (json_array_size(lines) >= want || tl_now() > deadline)
			break;
		json_decref(lines);
		tl_sleep_ms(20);
	}
	json_decref(lines);
	tl_sleep_ms(TL_LOG_SETTLE_MS);
	return log_lines(offset, pred, arg);
}

bool
tl_log_is_key(const json_t *line, const void *key)
{
	const char *k = tl_jstr(line, "key");

	return k != NULL && strcmp(k, (const char *)key) == 0;
}

bool
tl_log_is_request(const json_t *line, const void *unused)
{
	static const char *const events[] = {
		"run.claimed", "run.reclaimed", "run.duplicate", "run.payload_mismatch",
		"lease.renewed", "lease.lost", "lease.cap_reached",
		"run.transitioned", "auth.failed", "request.invalid",
		"run.not_found", "db.unavailable", NULL,
	};
	const char *ev = tl_jstr(line, "event");
	size_t i;

	(void)unused;
	if (!json_is_object(line))
		return true; /* garbage is always worth reporting */
	if (json_object_get(line, "method") != NULL ||
	    json_object_get(line, "status") != NULL ||
	    json_object_get(line, "request_id") != NULL)
		return true;
	for (i = 0; ev != NULL && events[i] != NULL; i++) {
		if (strcmp(ev, events[i]) == 0)
			return true;
	}
	return false;
}

size_t
tl_log_count_event(const json_t *lines, const char *event)
{
	size_t i, n = 0;

	for (i = 0; i < json_array_size(lines); i++) {
		const char *ev = tl_jstr(json_array_get(lines, i), "event");

		if (ev != NULL && strcmp(ev, event) == 0)
			n++;
	}
	return n;
}

json_t *
tl_log_find_event(const json_t *lines, const char *event)
{
	size_t i;

	for (i = 0; i < json_array_size(lines); i++) {
		json_t *l = json_array_get(lines, i);
		const char *ev = tl_jstr(l, "event");

		if (ev != NULL && strcmp(ev, event) == 0)
			return l;
	}
	return NULL;
}

/* ---- oncegatectl and processes ----------------------------------------- */

static int
append_quoted(char **cmd, const char *word)
{
	size_t n = strlen(*cmd), extra = 3;
	const char *s;
	char *p;

	for (s = word; *s != '\0'; s++)
		extra += *s == '\'' ? 4 : 1;
	p = realloc(*cmd, n + extra + 1);
	if (p == NULL)
		return -1;
	*cmd = p;
	p += n;
	*p++ = ' ';
	*p++ = '\'';
	for (s = word; *s != '\0'; s++) {
		if (*s == '\'') {
			memcpy(p, "'\\''", 4);
			p += 4;
		} else {
			*p++ = *s;
		}
	}
	*p++ = '\'';
	*p = '\0';
	return 0;
}

static int
run_capture(const char *cmdline, char **out)
{
	char buf[4096];
	char *acc = NULL;
	size_t n = 0;
	FILE *f;
	int st;

	if (out != NULL)
		*out = NULL;
	fflush(NULL);
	f = popen(cmdline, "r");
	if (f == NULL)
		return -1;
	for (;;) {
		size_t got = fread(buf, 1, sizeof(buf), f);
		char *p;

		if (got == 0)
			break;
		if (n + got > TL_RESPONSE_MAX)
			continue; /* drain, keep what fits */
		p = realloc(acc, n + got + 1);
		if (p == NULL)
			continue;
		acc = p;
		memcpy(acc + n, buf, got);
		n += got;
		acc[n] = '\0';
	}
	st = pclose(f);
	if (acc == NULL)
		acc = calloc(1, 1);
	if (out != NULL)
		*out = acc;
	else
		free(acc);
	if (st == -1 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

/* Appends text as it is (shell syntax). */
static int
append_raw(char **cmd, const char *text)
{
	size_t n = strlen(*cmd), m = strlen(text);
	char *p = realloc(*cmd, n + m + 1);

	if (p == NULL)
		return -1;
	memcpy(p + n, text, m + 1);
	*cmd = p;
	return 0;
}

const char *
tl_ctl_role(void)
{
	if (tl_env("ONCEGATE_PGUSER_OPERATOR") != NULL)
		return tl_env("ONCEGATE_PGUSER_OPERATOR");
	return tl_env("PGUSER") != NULL ? tl_env("PGUSER") : "";
}

int
tl_vctl(const struct tl_ctl_how *how, char **out, va_list ap)
{
	const char *ctl = tl_env("ONCEGATE_CTL");
	const char *conf = tl_env("ONCEGATE_CONF");
	/* oncegatectl connects as the stack's operator login role; migrate as
	 * the schema's owner (PGUSER of the environment) */
	const char *role = tl_env("ONCEGATE_PGUSER_OPERATOR");
	const char *arg;
	char *cmd, *user = NULL;
	int rc, bad = 0;
	va_list peek;

	va_copy(peek, ap);
	arg = va_arg(peek, const char *);
	if (arg != NULL && strcmp(arg, "migrate") == 0)
		role = NULL;
	va_end(peek);
	if (out != NULL)
		*out = NULL;
	if (ctl == NULL || conf == NULL)
		return -1;
	cmd = calloc(1, 1);
	if (cmd == NULL)
		return -1;
	if (how->sudo_user != NULL || role != NULL)
		bad |= append_quoted(&cmd, "env") != 0;
	if (role != NULL) {
		bad |= bad || asprintf(&user, "PGUSER=%s", role) < 0;
		bad |= bad || append_quoted(&cmd, user) != 0;
		free(user);
		user = NULL;
	}
	if (how->sudo_user != NULL) {
		bad |= bad || asprintf(&user, "SUDO_USER=%s", how->sudo_user) < 0;
		bad |= bad || append_quoted(&cmd, user) != 0;
		free(user);
	}
	bad |= bad || append_quoted(&cmd, ctl) != 0 || append_quoted(&cmd, "-c") != 0 ||
	       append_quoted(&cmd, conf) != 0;
	if (how->json)
		bad |= bad || append_quoted(&cmd, "--json") != 0;
	while (!bad && (arg = va_arg(ap, const char *)) != NULL)
		bad |= append_quoted(&cmd, arg) != 0;
	if (how->merge_stderr)
		bad |= bad || append_raw(&cmd, " 2>&1") != 0;
	if (how->errpath != NULL)
		bad |= bad || append_raw(&cmd, " 2>") != 0 || append_quoted(&cmd, how->errpath) != 0;
	rc = bad ? -1 : run_capture(cmd, out);
	free(cmd);
	return rc;
}

int
tl_ctl(char **out, ...)
{
	va_list ap;
	int rc;

	static const struct tl_ctl_how plain;

	va_start(ap, out);
	rc = tl_vctl(&plain, out, ap);
	va_end(ap);
	return rc;
}

int
tl_ctl_err(char **out, char **err, ...)
{
	char errpath[] = "/tmp/tl_ctl_err.XXXXXX";
	struct tl_ctl_how how = { .errpath = errpath };
	va_list ap;
	int fd, rc;

	fd = mkstemp(errpath);
	ck_assert_msg(fd >= 0, "mkstemp: %s", strerror(errno));
	close(fd);
	va_start(ap, err);
	rc = tl_vctl(&how, out, ap);
	va_end(ap);
	*err = tl_file_slurp(errpath, NULL);
	unlink(errpath);
	if (*err == NULL)
		*err = strdup("");
	if (out != NULL && *out == NULL)
		*out = strdup("");
	ck_assert_msg((out == NULL || *out != NULL) && *err != NULL, "out of memory");
	return rc;
}

char *
tl_client_add(const char *name)
{
	char *out = NULL;
	size_t n;
	int rc = tl_ctl(&out, "client", "add", name, "--reason",
	                "a test suite's own API client", (char *)NULL);

	if (rc != 0 || out == NULL) {
		fprintf(stderr, "oncegatectl client add %s: exit %d, output: %s\n",
		        name, rc, out != NULL ? out : "");
		free(out);
		return NULL;
	}
	n = strlen(out);
	while (n > 0 && isspace((unsigned char)out[n - 1]))
		out[--n] = '\0';
	if (n == 0 || strchr(out, '\n') != NULL || strchr(out, ' ') != NULL) {
		fprintf(stderr, "oncegatectl client add %s: expected the key alone "
		        "on one line, got: %s\n", name, out);
		free(out);
		return NULL;
	}
	return out;
}

int
tl_client_revoke(const char *name)
{
	return tl_ctl(NULL, "client", "revoke", name, "--reason",
	              "a test suite revokes its client", (char *)NULL);
}

char *
tl_shell_output(const char *cmdline)
{
	char *out = NULL;

	if (run_capture(cmdline, &out) < 0) {
		free(out);
		return NULL;
	}
	return out;
}

int
tl_shell(const char *cmdline)
{
	int st;

	fflush(NULL);
	st = system(cmdline);
	if (st == -1 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

/* ---- approval pages (check_gate) ---------------------------------------- */

/* "METHOD path", with an approval token masked. */
static void
what_masked(struct tl_resp *r, const char *method, const char *path)
{
	const char *at = strstr(path, "/approve/");

	if (at == NULL)
		snprintf(r->what, sizeof(r->what), "%s %s", method, path);
	else
		snprintf(r->what, sizeof(r->what), "%s %.*s/approve/[token]", method,
		         (int)(at - path), path);
}

int
tl_http_hdrs(const char *method, const char *path, const char *const *req_headers,
             const char *ctype, const char *body, size_t body_len, struct tl_resp *r,
             char **headers)
{
	const struct req q = { .method = method, .headers = req_headers, .ctype = ctype,
		               .body = body, .body_len = body_len, .always_body = true };
	char *url;
	int rc = -1;

	if (headers != NULL)
		*headers = NULL;
	if ((url = stack_url(path, r)) != NULL) {
		struct req qu = q;

		qu.url = url;
		rc = request(&qu, r, headers);
	}
	what_masked(r, method, path);
	record(method, path, r);
	free(url);
	return rc;
}

char *
tl_header_get(const char *headers, const char *name)
{
	size_t nl = strlen(name);
	const char *p = headers, *found = NULL, *end = NULL;

	while (p != NULL && *p != '\0') {
		const char *eol = strchr(p, '\n');
		size_t n = eol != NULL ? (size_t)(eol - p) : strlen(p);

		if (n > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
			found = p + nl + 1;
			end = p + n;
		}
		p = eol != NULL ? eol + 1 : NULL;
	}
	if (found == NULL)
		return NULL;
	while (found < end && (*found == ' ' || *found == '\t'))
		found++;
	while (end > found && (end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t'))
		end--;
	return strndup(found, (size_t)(end - found));
}

char *
tl_form(const char *name, ...)
{
	char *out = calloc(1, 1);
	const char *n = name;
	va_list ap;

	if (out == NULL)
		return NULL;
	va_start(ap, name);
	while (n != NULL) {
		const char *v = va_arg(ap, const char *);
		char *en = tl_urlencode(n), *ev = tl_urlencode(v != NULL ? v : "");
		char *next = NULL;

		if (en == NULL || ev == NULL ||
		    asprintf(&next, "%s%s%s=%s", out, *out ? "&" : "", en, ev) < 0) {
			free(en);
			free(ev);
			free(out);
			va_end(ap);
			return NULL;
		}
		free(en);
		free(ev);
		free(out);
		out = next;
		n = va_arg(ap, const char *);
	}
	va_end(ap);
	return out;
}

void
tl_sha256_hex(const char *s, char out[65])
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	int i;

	SHA256((const unsigned char *)s, strlen(s), md);
	for (i = 0; i < SHA256_DIGEST_LENGTH; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* The readable part of a provider key, written here from the documented
 * rule, not from outbox.c: [A-Za-z0-9._-] kept, each run of anything else
 * one '_', at most 48 bytes, "_" when nothing is left. */
static void
pkey_readable(const char *s, char out[49])
{
	size_t n = 0;

	for (; *s != '\0' && n < 48; s++) {
		if (isalnum((unsigned char)*s) && (unsigned char)*s < 0x80)
			out[n++] = *s;
		else if (strchr("._-", *s) != NULL)
			out[n++] = *s;
		else if (n == 0 || out[n - 1] != '_' || strchr("._-", s[-1]) != NULL ||
		         isalnum((unsigned char)s[-1]))
			out[n++] = '_';
	}
	if (n == 0)
		out[n++] = '_';
	out[n] = '\0';
}

char *
tl_provider_key(const char *client_id, const char *key, const char *type, const char *target,
                int slot)
{
	char slots[16], hex[65], rk[49], rt[49], *tuple = NULL, *out = NULL;

	snprintf(slots, sizeof(slots), "%d", slot);
	ck_assert_int_ge(asprintf(&tuple, "oncegate provider key 1\n%zu:%s,%zu:%s,%zu:%s,%zu:%s,"
	                          "%zu:%s,", strlen(client_id), client_id, strlen(key), key,
	                          strlen(type), type, strlen(target), target, strlen(slots),
	                          slots), 0);
	tl_sha256_hex(tuple, hex);
	free(tuple);
	pkey_readable(key, rk);
	pkey_readable(type, rt);
	ck_assert_int_ge(asprintf(&out, "og1/c%s/%s/%s/%s/%s", client_id, rk, rt, slots, hex), 0);
	return out;
}

bool
tl_header_safe(const char *s)
{
	size_t i;

	for (i = 0; s[i] != '\0'; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
			return false;
	return i > 0;
}

void
tl_random_token(char out[44])
{
	static const char b64[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	unsigned char raw[33] = { 0 };
	size_t i, o = 0;
	FILE *f = fopen("/dev/urandom", "rb");

	ck_assert_msg(f != NULL && fread(raw, 1, 32, f) == 32, "cannot read /dev/urandom");
	fclose(f);
	raw[32] = 0;
	/* 32 bytes = 10 groups of 3, then 2 bytes → 3 characters. */
	for (i = 0; i < 30; i += 3) {
		unsigned v = (unsigned)raw[i] << 16 | (unsigned)raw[i + 1] << 8 | raw[i + 2];

		out[o++] = b64[v >> 18 & 63];
		out[o++] = b64[v >> 12 & 63];
		out[o++] = b64[v >> 6 & 63];
		out[o++] = b64[v & 63];
	}
	{
		unsigned v = (unsigned)raw[30] << 16 | (unsigned)raw[31] << 8;

		out[o++] = b64[v >> 18 & 63];
		out[o++] = b64[v >> 12 & 63];
		out[o++] = b64[v >> 6 & 63];
	}
	out[o] = '\0';
}

static char *
nginx_file(const char *name)
{
	const char *conf = tl_env("ONCEGATE_CONF");
	const char *slash;
	char *p = NULL;

	if (conf == NULL || (slash = strrchr(conf, '/')) == NULL)
		return NULL;
	if (asprintf(&p, "%.*s/nginx/%s", (int)(slash - conf), conf, name) < 0)
		return NULL;
	return p;
}

char *
tl_access_log_path(void)
{
	return nginx_file("access.log");
}

char *
tl_error_log_path(void)
{
	return nginx_file("error.log");
}

void
tl_setup_healthy(void)
{
	ck_assert_msg(tl_wait_healthy(30), "the stack is not healthy (GET /healthz)");
}

char *
tl_json_text(const json_t *v)
{
	char *s = v != NULL ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;

	return s != NULL ? s : strdup("(null)");
}

json_t *
tl_model_json(void)
{
	return json_pack("{s:s, s:s, s:s}", "provider", "openai-compatible", "name",
	                 "qwen2.5-7b-instruct", "revision", "2024-09-19");
}

json_t *
tl_tag_effect_json(void)
{
	return json_pack("{s:s, s:s, s:{s:s}}", "type", "crm.tag", "target", "demo_http",
	                 "payload", "contact_id", "c-42");
}

char *
tl_file_slurp(const char *path, size_t *len)
{
	return slurp_from(path, 0, len);
}

char *
tl_data_slurp(const char *name, size_t *len)
{
	const char *const dirs[] = { tl_env("srcdir"), ".", "..", "../.." };
	char path[4096];
	char *buf = NULL;
	size_t i;

	for (i = 0; buf == NULL && i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		if (dirs[i] == NULL)
			continue;
		snprintf(path, sizeof(path), "%s/tests/data/%s", dirs[i], name);
		buf = tl_file_slurp(path, len);
	}
	ck_assert_msg(buf != NULL, "tests/data/%s not found", name);
	return buf;
}

long long
tl_pg_rows_holding(PGconn *c, const char *needle)
{
	PGresult *tables = PQexec(c, "SELECT quote_ident(tablename) FROM pg_tables "
	                             "WHERE schemaname = 'public' ORDER BY 1");
	const char *p[1] = { needle };
	long long n = 0;
	int i;

	ck_assert_msg(tables != NULL && PQresultStatus(tables) == PGRES_TUPLES_OK,
	              "listing tables: %s", PQerrorMessage(c));
	for (i = 0; i < PQntuples(tables); i++) {
		char *sql = NULL;

		ck_assert_int_ge(asprintf(&sql, "SELECT count(*) FROM %s x WHERE"
		                          " strpos(x::text, $1) > 0", PQgetvalue(tables, i, 0)), 0);
		n += tl_pg_count(c, sql, 1, p);
		free(sql);
	}
	PQclear(tables);
	return n;
}

long long
tl_pg_exec(PGconn *c, const char *sql, int nparams, const char *const *params)
{
	PGresult *res = PQexecParams(c, sql, nparams, NULL, params, NULL, NULL, 0);
	long long n;

	ck_assert_msg(res != NULL && (PQresultStatus(res) == PGRES_COMMAND_OK ||
	                              PQresultStatus(res) == PGRES_TUPLES_OK),
	              "SQL failed: %s\n  %s", sql,
	              res != NULL ? PQresultErrorMessage(res) : PQerrorMessage(c));
	n = strtoll(PQcmdTuples(res), NULL, 10);
	PQclear(res);
	return n;
}

bool
tl_wait_healthy(int seconds)
{
	double deadline = tl_now() + seconds;
	struct tl_resp r;

	for (;;) {
		long st;

		tl_get("/healthz", NULL, &r);
		st = r.status;
		tl_resp_free(&r);
		if (st == 200)
			return true;
		if (tl_now() > deadline)
			return false;
		tl_sleep_ms(200);
	}
}

/* ---- raw HTTP (check_security) ------------------------------------------ */

int
tl_raw_connect(void)
{
	const char *base = tl_env("ONCEGATE_URL");
	struct addrinfo hints, *ai = NULL;
	char host[256], port[16];
	const char *h, *colon, *end;
	int fd;

	if (base == NULL || strncmp(base, "http://", 7) != 0)
		return -1;
	h = base + 7;
	end = h + strcspn(h, "/");
	colon = memchr(h, ':', (size_t)(end - h));
	if (colon == NULL || (size_t)(colon - h) >= sizeof(host) ||
	    (size_t)(end - colon - 1) >= sizeof(port))
		return -1;
	snprintf(host, sizeof(host), "%.*s", (int)(colon - h), h);
	snprintf(port, sizeof(port), "%.*s", (int)(end - colon - 1), colon + 1);
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	if (getaddrinfo(host, port, &hints, &ai) != 0 || ai == NULL)
		return -1;
	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
	if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	return fd;
}

long
tl_raw_request(const char *req, size_t len, int timeout_ms, char **out)
{
	double deadline = tl_now() + timeout_ms / 1000.0;
	struct sink s = { 0 };
	size_t sent = 0;
	long status = 0;
	int fd = tl_raw_connect();

	if (out != NULL)
		*out = NULL;
	if (fd < 0)
		return -1;
	for (;;) {
		struct pollfd p = { fd, POLLIN | (sent < len ? POLLOUT : 0), 0 };
		int left = (int)((deadline - tl_now()) * 1000);
		char buf[16384];
		ssize_t n;

		if (left <= 0 || poll(&p, 1, left) <= 0)
			break;
		if (p.revents & POLLIN) {
			n = recv(fd, buf, sizeof(buf), 0);
			if (n <= 0)
				break;
			if (body_cb(buf, 1, (size_t)n, &s) != (size_t)n)
				break;
			continue;
		}
		if (p.revents & (POLLERR | POLLHUP))
			break;
		if ((p.revents & POLLOUT) && sent < len) {
			n = send(fd, req + sent, len - sent, MSG_NOSIGNAL);
			if (n < 0 && errno != EINTR && errno != EAGAIN)
				sent = len; /* cut short: read what the server said */
			else if (n > 0)
				sent += (size_t)n;
		}
	}
	close(fd);
	if (s.data != NULL && strncmp(s.data, "HTTP/1.", 7) == 0 && s.len > 12)
		status = strtol(s.data + 9, NULL, 10);
	if (out != NULL)
		*out = s.data != NULL ? s.data : strdup("");
	else
		free(s.data);
	return status;
}

char *
tl_state_dir(void)
{
	const char *conf = tl_env("ONCEGATE_CONF");
	const char *slash;

	if (conf == NULL || (slash = strrchr(conf, '/')) == NULL)
		return NULL;
	return strndup(conf, (size_t)(slash - conf));
}

char *
tl_run_snapshot(PGconn *c, const char *key)
{
	const char *p[1] = { key };
	char *s = tl_pg_value(c,
	    "SELECT concat_ws(E'\\n',"
	    " (SELECT json_agg(r ORDER BY r.client_id)::text FROM workflow_runs r"
	    "   WHERE idempotency_key = $1),"
	    " (SELECT coalesce(json_agg(a ORDER BY a.id)::text, '[]') FROM approvals a"
	    "   WHERE idempotency_key = $1),"
	    " (SELECT coalesce(json_agg(v ORDER BY v.id)::text, '[]') FROM approval_votes v"
	    "   WHERE idempotency_key = $1),"
	    " (SELECT coalesce(json_agg(e ORDER BY e.id)::text, '[]') FROM effect_outbox e"
	    "   WHERE idempotency_key = $1),"
	    " (SELECT coalesce(json_agg(t ORDER BY t.id)::text, '[]') FROM effect_attempts t"
	    "   JOIN effect_outbox e ON e.id = t.effect_id WHERE e.idempotency_key = $1),"
	    " (SELECT coalesce(json_agg(v ORDER BY v.id)::text, '[]') FROM run_events v"
	    "   WHERE idempotency_key = $1),"
	    " (SELECT coalesce(json_agg(d ORDER BY d.id)::text, '[]') FROM dead_letters d"
	    "   WHERE idempotency_key = $1))", 1, p);

	ck_assert_ptr_nonnull(s);
	return s;
}

void
tl_expect_run_unchanged(PGconn *c, const char *key, const char *before, const char *what)
{
	char *after = tl_run_snapshot(c, key);

	ck_assert_msg(strcmp(before, after) == 0,
	              "%s changed the stored run %s.\nbefore: %.3000s\nafter:  %.3000s", what, key,
	              before, after);
	free(after);
}

char *
tl_run_path(const char *key, const char *suffix)
{
	char *enc = tl_urlencode(key), *p = NULL;

	ck_assert_ptr_nonnull(enc);
	ck_assert_int_ge(asprintf(&p, "/v1/runs/%s%s", enc, suffix ? suffix : ""), 0);
	free(enc);
	return p;
}

bool
tl_contains_ci(const char *hay, const char *needle)
{
	return hay != NULL && needle != NULL && strcasestr(hay, needle) != NULL;
}

char *
tl_csrf_for(const char *approval_id, const char *subject)
{
	struct config cfg;
	char err[512], tok[CSRF_TEXT_LEN + 1];
	const char *conf = tl_env("ONCEGATE_CONF");

	ck_assert_msg(conf != NULL, "ONCEGATE_CONF is not set");
	config_defaults(&cfg);
	ck_assert_msg(config_load(conf, &cfg, err, sizeof(err)) == 0, "%s", err);
	csrf_issue((const unsigned char *)cfg.csrf_secret, strlen(cfg.csrf_secret), approval_id,
	           subject, tok);
	config_free(&cfg);
	ck_assert_msg(tok[0] != '\0', "no CSRF value for approval %s", approval_id);
	return strdup(tok);
}

void
tl_keep_sample_draw(const char *key, const char *draw)
{
	PGconn *c = tl_pg_connect();
	const char *p[2] = { key, draw };

	ck_assert_msg(tl_pg_exec(c, "UPDATE workflow_runs SET sample_draw = $2::float8"
	                         " WHERE idempotency_key = $1 AND state = 'processing'", 2, p) == 1,
	              "keeping sample draw %s on run %s", draw, key);
	PQfinish(c);
}

/* ---- the corpus ---------------------------------------------------------- */

#define TL_CORPUS_DIR  "tests/data/corpus"
#define TL_CORPUS_MAILS_MAX 64

static json_t *
corpus_try(const char *dir, const char *file, json_error_t *err)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s%s" TL_CORPUS_DIR "/%s", dir != NULL ? dir : "",
	         dir != NULL ? "/" : "", file);
	return json_load_file(path, 0, err);
}

json_t *
tl_corpus_load(const char *file)
{
	static const char *const rel[] = { ".", "..", "../..", NULL };
	json_error_t err = { 0 };
	json_t *doc = NULL;
	size_t i;

	if (tl_env("srcdir") != NULL)
		doc = corpus_try(tl_env("srcdir"), file, &err);
	for (i = 0; doc == NULL && rel[i] != NULL; i++)
		doc = corpus_try(rel[i], file, &err);
	ck_assert_msg(doc != NULL, "corpus %s/%s: %s (line %d)", TL_CORPUS_DIR, file, err.text,
	              err.line);
	return doc;
}

static json_t *corpus_mails;
static const char *corpus_ids[TL_CORPUS_MAILS_MAX + 1];

static const json_t *
corpus_mail_list(void)
{
	json_t *list, *m;
	size_t i;

	if (corpus_mails == NULL) {
		corpus_mails = tl_corpus_load("mails.json");
		list = json_object_get(corpus_mails, "mails");
		ck_assert_msg(json_is_array(list) && json_array_size(list) <= TL_CORPUS_MAILS_MAX,
		              "corpus mails.json: no \"mails\" array of at most %d",
		              TL_CORPUS_MAILS_MAX);
		json_array_foreach(list, i, m)
			corpus_ids[i] = tl_jstr(m, "id");
	}
	return json_object_get(corpus_mails, "mails");
}

const json_t *
tl_corpus_mail(const char *id)
{
	const json_t *m;
	size_t i;

	json_array_foreach(corpus_mail_list(), i, m)
		if (tl_jstr(m, "id") != NULL && strcmp(tl_jstr(m, "id"), id) == 0)
			return m;
	ck_abort_msg("corpus mails.json has no mail %s", id);
	return NULL;
}

const char *
tl_corpus_mail_str(const char *id, const char *member)
{
	const char *s = tl_jstr(tl_corpus_mail(id), member);

	ck_assert_msg(s != NULL, "corpus mail %s has no string %s", id, member);
	return s;
}

const char *const *
tl_corpus_mail_ids(void)
{
	corpus_mail_list();
	return corpus_ids;
}

size_t
tl_utf8_chars(const char *s)
{
	size_t n = 0;

	for (; *s != '\0'; s++)
		n += ((unsigned char)*s & 0xc0) != 0x80;
	return n;
}

char *
tl_corpus_key(const char *prefix, const char *key, size_t max_chars)
{
	size_t room, plen = strlen(prefix), i = 0;
	char *out;

	ck_assert_msg(tl_utf8_chars(prefix) < max_chars, "prefix %s is too long for a key", prefix);
	room = max_chars - tl_utf8_chars(prefix);
	/* i: bytes of key that hold its first `room` code points */
	for (; key[i] != '\0'; i++)
		if (((unsigned char)key[i] & 0xc0) != 0x80 && room-- == 0)
			break;
	out = malloc(plen + i + 1);
	ck_assert_ptr_nonnull(out);
	memcpy(out, prefix, plen);
	memcpy(out + plen, key, i);
	out[plen + i] = '\0';
	return out;
}

void
tl_expect_problem(const struct tl_resp *r, long status, const char *code)
{
	const char *type = tl_jstr(r->json, "type");

	ck_assert_msg(r->status == status && type != NULL && strstr(type, code) != NULL,
	              "want %ld %s, got HTTP %ld %.600s", status, code, r->status, r->body);
}

void
tl_expect_approval_headers(const char *hdrs, long status, const char *what)
{
	/* each header: what its value must contain */
	static const char *const want[] = {
		"Cache-Control: no-store", "Referrer-Policy: no-referrer",
		"X-Content-Type-Options: nosniff", "X-Frame-Options: DENY",
		"Content-Security-Policy: frame-ancestors 'none'",
		"Content-Security-Policy: default-src 'none'",
	};
	char name[64], *csp;
	const char *must;
	size_t i;

	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		char *v;

		must = strchr(want[i], ':') + 2;
		snprintf(name, sizeof(name), "%.*s", (int)(must - 2 - want[i]), want[i]);
		v = tl_header_get(hdrs, name);
		ck_assert_msg(v != NULL && tl_contains_ci(v, must),
		              "%s (HTTP %ld): header %s is \"%s\", must contain \"%s\"; headers:\n%s",
		              what, status, name, v ? v : "(absent)", must, hdrs);
		free(v);
	}
	csp = tl_header_get(hdrs, "Content-Security-Policy");
	ck_assert_msg(!tl_contains_ci(csp, "unsafe-inline") && !tl_contains_ci(csp, "unsafe-eval") &&
	              !tl_contains_ci(csp, "*"),
	              "%s: the CSP is not strict: %s", what, csp);
	free(csp);
}

/* One thread of tl_race: waits for the others, then runs. */
struct race_lane {
	pthread_barrier_t *go;
	void (*fn)(void *arg);
	void *arg;
};

static void *
race_lane_main(void *p)
{
	struct race_lane *lane = p;

	pthread_barrier_wait(lane->go);
	lane->fn(lane->arg);
	return NULL;
}

void
tl_race(void (*fn)(void *arg), void *args, size_t size, int n)
{
	struct race_lane *lanes = calloc((size_t)n, sizeof(*lanes));
	pthread_t *th = calloc((size_t)n, sizeof(*th));
	pthread_barrier_t go;
	int i;

	ck_assert(lanes != NULL && th != NULL);
	ck_assert_int_eq(pthread_barrier_init(&go, NULL, (unsigned)n), 0);
	for (i = 0; i < n; i++) {
		lanes[i] = (struct race_lane){ &go, fn, (char *)args + (size_t)i * size };
		ck_assert_int_eq(pthread_create(&th[i], NULL, race_lane_main, &lanes[i]), 0);
	}
	for (i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&go);
	free(th);
	free(lanes);
}

int
tl_stack_main(const struct tl_stack_suite *s)
{
	int failed, rc;

	if ((rc = tl_suite_begin(s->name, s->prefix, s->needed)) != 0)
		return rc;
	if (s->prepare != NULL && !s->prepare())
		return tl_suite_end(1);
	failed = tl_suite_run(s->suite(), s->nofork);
	if (s->finish != NULL)
		s->finish();
	return tl_suite_end(failed);
}

long
tl_decide_api(const char *bearer, const char *id, json_t *body, struct tl_resp *r)
{
	char path[160];

	snprintf(path, sizeof(path), "/v1/approvals/%s/decisions", id);
	tl_post_json(path, bearer, body, r);
	json_decref(body);
	return r->status;
}

void
tl_decide_refused(const char *bearer, const char *id, json_t *body, long status,
                  const char *code)
{
	struct tl_resp r;

	tl_decide_api(bearer, id, body, &r);
	tl_expect_problem(&r, status, code);
	tl_resp_free(&r);
}

bool
tl_cmdline_has(pid_t pid, const char *needle)
{
	char path[64], buf[4096];
	size_t n, i;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	if ((f = fopen(path, "rb")) == NULL)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	for (i = 0; i < n; i++)
		if (buf[i] == '\0')
			buf[i] = ' ';
	buf[n] = '\0';
	return strstr(buf, needle) != NULL;
}

/*
 * adapter.c — HTTP and SMTP delivery through libcurl; see adapter.h.
 *
 * Connections are never reused: libcurl retries a request on its own when a
 * reused keep-alive connection turns out to be dead, and that silent resend
 * is exactly the duplicate oncegate exists to prevent. One fresh connection
 * per attempt costs a TCP handshake and removes the question.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* asprintf */
#endif
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "adapter.h"
#include "buf.h"
#include "caps.h"
#include "digest.h"
#include "effect.h"
#include "jptr.h"
#include "log.h"

/* configure defines it; a build outside autotools (the fuzzers) does not */
#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

/* The SMTP attempt's deadline, enforced from outside libcurl. libcurl's own
 * timeout stops the transfer, but then it still says goodbye (QUIT) to a
 * server that stalled and waits for the answer, and some waits for a
 * reply run on their own clock: a stalled server could hold a send twice
 * the target's timeout. At the deadline the watchdog shuts the sockets
 * down; every wait ends at once, and the attempt is a timeout. */
#define WATCH_FDS 4

struct watchdog {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct timespec deadline;  /* CLOCK_MONOTONIC */
	curl_socket_t fds[WATCH_FDS];
	bool done, fired;
};

struct adapter {
	CURL *curl;
	/* Lives as long as the handle: a socket libcurl closes late still
	 * finds it. */
	struct watchdog watch;
	bool watch_ok;             /* its mutex and condition exist */
};

/* The response as it arrives: body up to the cap, a few headers. */
struct sink {
	struct buf body;
	size_t cap;
	bool over;                 /* the cap was hit */
	const char *id_header;     /* target's provider_id_header, or NULL */
	json_t *headers;           /* selected headers, lower-case names */
	char smtp_reply[512];      /* SMTP: the last reply line */
};

static bool
watch_init(struct watchdog *w)
{
	pthread_condattr_t ca;
	size_t i;
	bool ok;

	memset(w, 0, sizeof(*w));
	for (i = 0; i < WATCH_FDS; i++)
		w->fds[i] = CURL_SOCKET_BAD;
	if (pthread_condattr_init(&ca) != 0)
		return false;
	ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
	     pthread_cond_init(&w->cv, &ca) == 0;
	pthread_condattr_destroy(&ca);
	if (ok && pthread_mutex_init(&w->mu, NULL) != 0) {
		pthread_cond_destroy(&w->cv);
		ok = false;
	}
	return ok;
}

struct adapter *
adapter_new(void)
{
	struct adapter *a = calloc(1, sizeof(*a));

	if (a == NULL)
		return NULL;
	a->curl = curl_easy_init();
	if (a->curl == NULL) {
		free(a);
		return NULL;
	}
	a->watch_ok = watch_init(&a->watch);
	return a;
}

void
adapter_free(struct adapter *a)
{
	if (a == NULL)
		return;
	curl_easy_cleanup(a->curl);
	if (a->watch_ok) {
		pthread_cond_destroy(&a->watch.cv);
		pthread_mutex_destroy(&a->watch.mu);
	}
	free(a);
}

void
adapter_attempt_clear(struct adapter_attempt *out)
{
	free(out->body);
	json_decref(out->evidence);
	memset(out, 0, sizeof(*out));
}

static size_t
on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct sink *s = userdata;
	size_t n = size * nmemb, room;

	room = s->body.len < s->cap ? s->cap - s->body.len : 0;
	if (n > room) {
		s->over = true;
		/* keep what fits as evidence (out of memory: less of it) */
		if (room > 0 && buf_append(&s->body, ptr, room) != 0)
			return 0;
		return 0; /* stops the transfer: CURLE_WRITE_ERROR */
	}
	if (buf_append(&s->body, ptr, n) != 0)
		return 0;
	return n;
}

/* Headers worth keeping as evidence, besides the provider id header. */
static const char *const kept_headers[] = {
	"content-type", "retry-after", "location", "x-request-id", "date",
};

static size_t
on_header(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct sink *s = userdata;
	size_t n = size * nmemb, nl, i;
	char name[64], value[512];
	const char *colon;

	colon = memchr(ptr, ':', n);
	if (colon == NULL || (size_t)(colon - ptr) >= sizeof(name))
		return n;
	nl = (size_t)(colon - ptr);
	for (i = 0; i < nl; i++)
		name[i] = (char)tolower((unsigned char)ptr[i]);
	name[nl] = '\0';
	{
		const char *v = colon + 1, *end = ptr + n;
		size_t vl;

		while (v < end && (*v == ' ' || *v == '\t'))
			v++;
		while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
			end--;
		vl = (size_t)(end - v);
		if (vl >= sizeof(value))
			vl = sizeof(value) - 1;
		memcpy(value, v, vl);
		value[vl] = '\0';
	}
	for (i = 0; i < sizeof(kept_headers) / sizeof(kept_headers[0]); i++)
		if (strcmp(name, kept_headers[i]) == 0)
			goto keep;
	if (s->id_header != NULL && strcasecmp(name, s->id_header) == 0)
		goto keep;
	return n;
keep:
	/* Only printable text goes into the evidence. */
	for (i = 0; value[i] != '\0'; i++)
		if ((unsigned char)value[i] < 0x20 || value[i] == 0x7f)
			value[i] = '?';
	json_object_set_new(s->headers, name, json_string(value));
	return n;
}

/* SMTP: the server's reply lines reach us only as protocol trace; the
 * last one (the answer to the end of DATA, on success) names the queue id. */
static int
on_debug(CURL *c, curl_infotype type, char *data, size_t size, void *userdata)
{
	struct sink *s = userdata;
	size_t n;

	(void)c;
	if (type != CURLINFO_HEADER_IN || size < 4 || !isdigit((unsigned char)data[0]))
		return 0;
	/* the goodbye after the verdict is not the verdict */
	if (strncmp(data, "221", 3) == 0 && s->smtp_reply[0] != '\0')
		return 0;
	n = size < sizeof(s->smtp_reply) - 1 ? size : sizeof(s->smtp_reply) - 1;
	memcpy(s->smtp_reply, data, n);
	while (n > 0 && (s->smtp_reply[n - 1] == '\r' || s->smtp_reply[n - 1] == '\n'))
		n--;
	s->smtp_reply[n] = '\0';
	for (n = 0; s->smtp_reply[n] != '\0'; n++)
		if ((unsigned char)s->smtp_reply[n] < 0x20 || (unsigned char)s->smtp_reply[n] >= 0x7f)
			s->smtp_reply[n] = '?';
	return 0;
}

static enum attempt_error
map_error(CURLcode rc, bool over)
{
	if (over)
		return ATTEMPT_ERR_TOO_LARGE;
	switch (rc) {
	case CURLE_OK:
		return ATTEMPT_ERR_NONE;
	case CURLE_COULDNT_CONNECT:
		return ATTEMPT_ERR_CONNECT;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return ATTEMPT_ERR_DNS;
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CACERT_BADFILE:
		return ATTEMPT_ERR_TLS;
	case CURLE_OPERATION_TIMEDOUT:
		return ATTEMPT_ERR_TIMEOUT;
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_HTTP2_STREAM:
	case CURLE_HTTP2:
	case CURLE_WEIRD_SERVER_REPLY:
		return ATTEMPT_ERR_RESET;
	case CURLE_SEND_ERROR:
		return ATTEMPT_ERR_SEND;
	case CURLE_FILESIZE_EXCEEDED:
		return ATTEMPT_ERR_TOO_LARGE;
	default:
		return ATTEMPT_ERR_OTHER;
	}
}

static long long
elapsed_ms(const struct timespec *t0)
{
	struct timespec t1;
	long long us;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	us = (long long)(t1.tv_sec - t0->tv_sec) * 1000000 + (t1.tv_nsec - t0->tv_nsec) / 1000;
	return us <= 0 ? 1 : (us + 999) / 1000;
}

/* Settings every transfer gets: no redirects, no signals, bounded time,
 * only the target's own scheme, a fresh connection. */
static void
common_options(CURL *c, const struct config_target *t, struct sink *s, char *errbuf)
{
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)t->connect_timeout_ms);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)t->timeout_ms);
	curl_easy_setopt(c, CURLOPT_FRESH_CONNECT, 1L);
	curl_easy_setopt(c, CURLOPT_FORBID_REUSE, 1L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, s);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)t->response_cap_bytes);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "oncegate-dispatch/" PACKAGE_VERSION);
}

static void
sink_init(struct sink *s, const struct config_target *t)
{
	memset(s, 0, sizeof(*s));
	/* the buffer's cap is the target's: on_body keeps to it */
	buf_init(&s->body, (size_t)t->response_cap_bytes);
	s->cap = (size_t)t->response_cap_bytes;
	s->id_header = t->provider_id_header[0] != '\0' ? t->provider_id_header : NULL;
	s->headers = json_object();
}

/* The evidence a dead letter keeps of an attempt: what came back, bounded. */
static void
fill_evidence(struct adapter_attempt *out, struct sink *s, CURLcode rc, const char *errbuf)
{
	size_t n = out->body_len < ADAPTER_EXCERPT_MAX ? out->body_len : ADAPTER_EXCERPT_MAX;
	char *excerpt = malloc(n + 1);

	out->evidence = json_object();
	if (rc != CURLE_OK)
		json_object_set_new(out->evidence, "transport_error",
		                    json_string(errbuf[0] ? errbuf : curl_easy_strerror(rc)));
	if (out->r.status != 0)
		json_object_set_new(out->evidence, "status", json_integer(out->r.status));
	json_object_set_new(out->evidence, "request_sent", json_boolean(out->r.request_sent));
	if (json_object_size(s->headers) > 0)
		json_object_set(out->evidence, "headers", s->headers);
	if (s->smtp_reply[0] != '\0')
		json_object_set_new(out->evidence, "reply", json_string(s->smtp_reply));
	if (excerpt != NULL && n > 0) {
		size_t i;

		memcpy(excerpt, out->body, n);
		excerpt[n] = '\0';
		/* Keep it printable and valid UTF-8 for jsonb: bytes outside
		 * printable ASCII become '?'; secrets are masked. */
		for (i = 0; i < n; i++)
			if (((unsigned char)excerpt[i] < 0x20 && excerpt[i] != '\n' && excerpt[i] != '\t') ||
			    (unsigned char)excerpt[i] >= 0x7f)
				excerpt[i] = '?';
		(void)log_redact(excerpt);
		json_object_set_new(out->evidence, "body_excerpt", json_string(excerpt));
		if (out->body_len > n || s->over)
			json_object_set_new(out->evidence, "body_truncated", json_true());
	}
	free(excerpt);
}

/* Copies a printable provider id of at most ADAPTER_PROVIDER_ID_MAX-1 bytes. */
static void
set_provider_id(struct adapter_attempt *out, const char *v)
{
	size_t i;

	if (v == NULL || *v == '\0')
		return;
	for (i = 0; v[i] != '\0' && i < sizeof(out->provider_id) - 1; i++)
		out->provider_id[i] = ((unsigned char)v[i] < 0x21 || (unsigned char)v[i] >= 0x7f)
		                              ? '_' : v[i];
	out->provider_id[i] = '\0';
}

static void
provider_id_from_response(struct adapter_attempt *out, const struct config_target *t,
                          const struct sink *s)
{
	if (t->provider_id_header[0] != '\0') {
		char lower[64];
		size_t i;

		for (i = 0; t->provider_id_header[i] != '\0' && i < sizeof(lower) - 1; i++)
			lower[i] = (char)tolower((unsigned char)t->provider_id_header[i]);
		lower[i] = '\0';
		set_provider_id(out, json_string_value(json_object_get(s->headers, lower)));
	}
	if (out->provider_id[0] == '\0' && t->provider_id_pointer[0] != '\0' &&
	    out->body_len > 0 && !s->over) {
		json_t *doc = json_loadb(out->body, out->body_len, JSON_DECODE_ANY, NULL);
		json_t *v = doc != NULL ? jptr_get(doc, t->provider_id_pointer, 1024) : NULL;
		char num[32];

		if (json_is_string(v))
			set_provider_id(out, json_string_value(v));
		else if (json_is_integer(v)) {
			snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
			set_provider_id(out, num);
		}
		json_decref(doc);
	}
}

/* Does url lie under base (same scheme, host and port, path prefix)? */
static bool
url_under(const char *url, const char *base)
{
	size_t n = strlen(base);

	if (n == 0 || strncasecmp(url, base, n) != 0)
		return false;
	/* "http://h:1" must not accept "http://h:10/…" */
	return base[n - 1] == '/' || url[n] == '\0' || url[n] == '/' || url[n] == '?';
}

static bool header_safe(const char *s, size_t max);

/* The target's credential (the environment variable credentials_env
 * names) as a bearer token; the header text is wiped once libcurl has its
 * copy. */
static struct curl_slist *
add_bearer(struct curl_slist *hdrs, const struct config_target *t)
{
	const char *secret;
	char *line = NULL;

	if (t->credentials_env[0] == '\0' || (secret = getenv(t->credentials_env)) == NULL ||
	    asprintf(&line, "Authorization: Bearer %s", secret) < 0)
		return hdrs;
	hdrs = curl_slist_append(hdrs, line);
	digest_wipe(line, strlen(line));
	free(line);
	return hdrs;
}

static void
invalid(struct adapter_attempt *out, const char *why)
{
	out->invalid = true;
	snprintf(out->invalid_reason, sizeof(out->invalid_reason), "%s", why);
	out->evidence = json_pack("{s:s, s:b}", "invalid", why, "request_sent", 0);
	out->duration_ms = 1;
}

static void
http_send(struct adapter *a, const struct config_target *t, const struct adapter_effect *e,
          struct adapter_attempt *out)
{
	CURL *c = a->curl;
	struct curl_slist *hdrs = NULL;
	struct sink s;
	char errbuf[CURL_ERROR_SIZE] = "", *body = NULL, *line = NULL, *cb_url = NULL;
	const char *url = t->url, *post = e->payload;
	json_t *payload = NULL;
	struct timespec t0;
	CURLcode rc;
	long status = 0;
	curl_off_t sent = 0;

	/* A decision callback goes to the resume URL it carries; the rest of
	 * its payload is the body. */
	if (strcmp(e->type, "decision.callback") == 0) {
		const char *u;

		payload = json_loads(e->payload, 0, NULL);
		u = json_string_value(json_object_get(payload, "url"));
		if (u == NULL || !url_under(u, t->url) || !header_safe(u, 4096)) {
			invalid(out, "callback url missing or outside its target");
			json_decref(payload);
			return;
		}
		cb_url = strdup(u);
		json_object_del(payload, "url");
		body = json_dumps(payload, JSON_COMPACT | JSON_SORT_KEYS);
		post = body;
		url = cb_url;
	}
	if (post == NULL || url == NULL) {
		invalid(out, "payload is not JSON");
		free(cb_url);
		free(body);
		json_decref(payload);
		return;
	}
	curl_easy_reset(c);
	sink_init(&s, t);
	common_options(c, t, &s, errbuf);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POST, 1L);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, post);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(post));
	hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	hdrs = curl_slist_append(hdrs, "Expect:");
	if (asprintf(&line, "Idempotency-Key: %s", e->provider_key) > 0) {
		hdrs = curl_slist_append(hdrs, line);
		free(line);
		line = NULL;
	}
	if (asprintf(&line, "X-Oncegate-Effect: %s", e->id) > 0) {
		hdrs = curl_slist_append(hdrs, line);
		free(line);
		line = NULL;
	}
	hdrs = add_bearer(hdrs, t);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = curl_easy_perform(c);
	out->duration_ms = elapsed_ms(&t0);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	{
		long reqsize = 0;

		curl_easy_getinfo(c, CURLINFO_REQUEST_SIZE, &reqsize);
		curl_easy_getinfo(c, CURLINFO_SIZE_UPLOAD_T, &sent);
		/* When in doubt, the request went out (classify.h). */
		out->r.request_sent = reqsize > 0 || sent > 0;
	}
	out->r.kind = ATTEMPT_HTTP;
	out->r.transport_error = map_error(rc, s.over);
	out->r.status = (int)status;
	out->body_len = s.body.len;
	out->body = buf_steal(&s.body);
	out->r.body = out->body;
	out->r.body_len = out->body_len;
	{
		const char *ra = json_string_value(json_object_get(s.headers, "retry-after"));

		if (ra != NULL) {
			snprintf(out->retry_after, sizeof(out->retry_after), "%s", ra);
			out->r.retry_after = out->retry_after;
		}
	}
	out->r.rejection_pointer = t->rejection_pointer[0] ? t->rejection_pointer : NULL;
	out->r.target_idempotent = t->idempotency_key != 0;
	if (status >= 200 && status < 300)
		provider_id_from_response(out, t, &s);
	fill_evidence(out, &s, rc, errbuf);

	curl_slist_free_all(hdrs);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	buf_free(&s.body);
	json_decref(s.headers);
	free(body);
	free(cb_url);
	json_decref(payload);
}

/* --- SMTP ------------------------------------------------------------------ */

void
adapter_message_id(const char *provider_key, const char *mail_from, char *out, size_t outlen)
{
	char hex[DIGEST_HEX_LEN];
	const char *at = mail_from != NULL ? strrchr(mail_from, '@') : NULL;
	const char *domain = at != NULL && at[1] != '\0' ? at + 1 : "oncegate.invalid";
	size_t dl = strcspn(domain, "> \t\r\n");

	digest_sha256_hex(provider_key, strlen(provider_key), hex);
	snprintf(out, outlen, "<%.32s.oncegate@%.*s>", hex, (int)(dl > 200 ? 200 : dl), domain);
}

/* A header value: one line of printable text (CR, LF and controls would
 * let a payload add headers of its own). */
static bool
header_safe(const char *s, size_t max)
{
	size_t i;

	for (i = 0; s[i] != '\0'; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return i <= max;
}

static bool
ascii_only(const char *s)
{
	for (; *s != '\0'; s++)
		if ((unsigned char)*s >= 0x80)
			return false;
	return true;
}

/* Header lines are folded before this many characters (RFC 5322 says
 * SHOULD 78, MUST 998). */
#define FOLD_AT 78
/* Bytes of text per RFC 2047 word: 42 bytes are 56 base64 characters, a
 * word of 68, and "Subject: " plus one word stays within FOLD_AT. */
#define WORD_BYTES 42

/* "Subject: " + the text: as it is when it is short printable ASCII that
 * cannot be mistaken for an encoded word; otherwise RFC 2047 "B" words of
 * UTF-8, each on a line of its own, never splitting a character. */
static int
put_subject(struct buf *b, const char *s)
{
	size_t n = strlen(s), off = 0;
	unsigned char enc[4 * ((WORD_BYTES + 2) / 3) + 1];

	if (ascii_only(s) && n + 9 <= FOLD_AT && strstr(s, "=?") == NULL)
		return buf_printf(b, "Subject: %s\r\n", s);
	if (buf_puts(b, "Subject:") != 0)
		return -1;
	while (off < n) {
		size_t take = n - off < WORD_BYTES ? n - off : WORD_BYTES, back = take;

		/* end the word before a UTF-8 sequence, never inside one */
		while (off + back < n && back > 0 && ((unsigned char)s[off + back] & 0xc0) == 0x80)
			back--;
		if (back > 0)
			take = back;
		EVP_EncodeBlock(enc, (const unsigned char *)s + off, (int)take);
		if (buf_printf(b, "%s=?UTF-8?B?%s?=", off > 0 ? "\r\n " : " ", (const char *)enc) != 0)
			return -1;
		off += take;
	}
	return buf_puts(b, "\r\n");
}

/* "To: " and the addresses, folded between them. */
static int
put_to(struct buf *b, const json_t *to)
{
	size_t i, col = 3;
	const json_t *v;

	if (buf_puts(b, "To:") != 0)
		return -1;
	json_array_foreach(to, i, v) {
		size_t len = json_string_length(v) + 3; /* " <" … ">" */
		bool last = i + 1 == json_array_size(to);

		if (i > 0 && col + len + 1 > FOLD_AT) {
			if (buf_puts(b, "\r\n") != 0)
				return -1;
			col = 0;
		}
		if (buf_printf(b, " <%s>%s", json_string_value(v), last ? "" : ",") != 0)
			return -1;
		col += len + (last ? 0 : 1);
	}
	return buf_puts(b, "\r\n");
}

/* The body, base64 in lines of 76: any script, any line length, no line
 * that starts with a dot, and the approved text byte for byte (its own
 * line ends included) once decoded. */
static int
put_base64_body(struct buf *b, const char *s)
{
	size_t n = strlen(s), off;
	unsigned char enc[80];

	for (off = 0; off < n; off += 57) {
		size_t chunk = n - off < 57 ? n - off : 57;

		EVP_EncodeBlock(enc, (const unsigned char *)s + off, (int)chunk);
		if (buf_printf(b, "%s\r\n", (const char *)enc) != 0)
			return -1;
	}
	return 0;
}

char *
adapter_smtp_message(const struct config_target *t, const struct adapter_effect *e,
                     json_t **rcpt, char *why, size_t whylen)
{
	json_t *payload = json_loads(e->payload, 0, NULL);
	json_t *errors = json_array(), *to = NULL, *v;
	const char *reply_to;
	char msgid[300], date[64];
	struct buf b;
	time_t now = time(NULL);
	struct tm tm;

	*rcpt = NULL;
	buf_init(&b, OG_MAIL_MESSAGE_MAX);
	if (errors == NULL)
		goto oom;
	/* The dispatcher checked it already (effect.h); the adapter refuses
	 * on its own anything it could not turn into a message. */
	if (!effect_mail_check(payload, errors)) {
		const json_t *e0 = json_array_get(errors, 0);

		snprintf(why, whylen, "%s %s", json_string_value(json_object_get(e0, "path")),
		         json_string_value(json_object_get(e0, "message")));
		goto fail;
	}
	if (!effect_mail_address_ok(t->mail_from)) {
		snprintf(why, whylen, "target mail_from is not plain local@domain");
		goto fail;
	}
	v = json_object_get(payload, "to");
	to = json_is_array(v) ? json_incref(v) : json_pack("[O]", v);
	if (to == NULL)
		goto oom;
	reply_to = json_string_value(json_object_get(payload, "in_reply_to"));
	adapter_message_id(e->provider_key, t->mail_from, msgid, sizeof(msgid));
	gmtime_r(&now, &tm);
	strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S +0000", &tm);
	if (buf_printf(&b, "Message-ID: %s\r\nDate: %s\r\nFrom: <%s>\r\n", msgid, date,
	               t->mail_from) != 0 ||
	    put_to(&b, to) != 0 ||
	    put_subject(&b, json_string_value(json_object_get(payload, "subject"))) != 0)
		goto toolong;
	if (reply_to != NULL && buf_printf(&b, "In-Reply-To: %s\r\nReferences: %s\r\n",
	                                   reply_to, reply_to) != 0)
		goto toolong;
	if (buf_puts(&b, "MIME-Version: 1.0\r\n"
	                 "Content-Type: text/plain; charset=utf-8\r\n"
	                 "Content-Transfer-Encoding: base64\r\n"
	                 "Auto-Submitted: auto-generated\r\n\r\n") != 0 ||
	    put_base64_body(&b, json_string_value(json_object_get(payload, "body"))) != 0)
		goto toolong;
	json_decref(payload);
	json_decref(errors);
	*rcpt = to;
	return buf_steal(&b);
toolong:
	if (b.overflow) {
		snprintf(why, whylen, "the message would exceed %d bytes", OG_MAIL_MESSAGE_MAX);
		goto fail;
	}
oom:
	snprintf(why, whylen, "out of memory");
fail:
	json_decref(to);
	json_decref(errors);
	json_decref(payload);
	buf_free(&b);
	return NULL;
}

struct upload {
	const char *data;
	size_t len, off;
};

static size_t
on_read(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct upload *u = userdata;
	size_t n = size * nmemb;

	if (n > u->len - u->off)
		n = u->len - u->off;
	memcpy(ptr, u->data + u->off, n);
	u->off += n;
	return n;
}

/* "250 2.0.0 Ok: queued as 4F1X2Y" → 4F1X2Y (Postfix, aiosmtpd, most MTAs);
 * "250 OK id=1abc-…" (Exim) → 1abc-…. */
static void
queue_id(const char *reply, char *out, size_t outlen)
{
	const char *p = strstr(reply, "queued as ");
	size_t n;

	if (p != NULL)
		p += 10;
	else if ((p = strstr(reply, " id=")) != NULL)
		p += 4;
	out[0] = '\0';
	if (p == NULL)
		return;
	n = strcspn(p, " \t\r\n");
	if (n >= outlen)
		n = outlen - 1;
	memcpy(out, p, n);
	out[n] = '\0';
}

static curl_socket_t
watch_open(void *clientp, curlsocktype purpose, struct curl_sockaddr *addr)
{
	struct watchdog *w = clientp;
	curl_socket_t fd;
	size_t i;

	(void)purpose;
	pthread_mutex_lock(&w->mu);
	if (w->fired) {
		pthread_mutex_unlock(&w->mu);
		return CURL_SOCKET_BAD;
	}
	fd = socket(addr->family, addr->socktype, addr->protocol);
	for (i = 0; fd != CURL_SOCKET_BAD && i < WATCH_FDS; i++)
		if (w->fds[i] == CURL_SOCKET_BAD) {
			w->fds[i] = fd;
			break;
		}
	if (fd != CURL_SOCKET_BAD && i == WATCH_FDS) {
		close(fd); /* one the watchdog could not stop is not opened */
		fd = CURL_SOCKET_BAD;
	}
	pthread_mutex_unlock(&w->mu);
	return fd;
}

/* Under the lock, so the watchdog never shuts down a number that another
 * thread's socket took over. */
static int
watch_close(void *clientp, curl_socket_t fd)
{
	struct watchdog *w = clientp;
	size_t i;
	int rc;

	pthread_mutex_lock(&w->mu);
	for (i = 0; i < WATCH_FDS; i++)
		if (w->fds[i] == fd)
			w->fds[i] = CURL_SOCKET_BAD;
	rc = close(fd);
	pthread_mutex_unlock(&w->mu);
	return rc;
}

static void *
watch_run(void *arg)
{
	struct watchdog *w = arg;
	size_t i;

	pthread_mutex_lock(&w->mu);
	while (!w->done)
		if (pthread_cond_timedwait(&w->cv, &w->mu, &w->deadline) != 0 && !w->done) {
			struct timespec now;

			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec < w->deadline.tv_sec ||
			    (now.tv_sec == w->deadline.tv_sec && now.tv_nsec < w->deadline.tv_nsec))
				continue;
			w->fired = true;
			for (i = 0; i < WATCH_FDS; i++)
				if (w->fds[i] != CURL_SOCKET_BAD)
					(void)shutdown(w->fds[i], SHUT_RDWR);
			break;
		}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* Arms the watchdog for timeout_ms from t0; false when it cannot run (then
 * libcurl's own timeouts are all there is). */
static bool
watch_start(struct watchdog *w, pthread_t *th, const struct timespec *t0, int timeout_ms)
{
	size_t i;

	pthread_mutex_lock(&w->mu);
	for (i = 0; i < WATCH_FDS; i++)
		w->fds[i] = CURL_SOCKET_BAD;
	w->done = w->fired = false;
	w->deadline = *t0;
	w->deadline.tv_sec += timeout_ms / 1000;
	w->deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (w->deadline.tv_nsec >= 1000000000L) {
		w->deadline.tv_sec++;
		w->deadline.tv_nsec -= 1000000000L;
	}
	pthread_mutex_unlock(&w->mu);
	return pthread_create(th, NULL, watch_run, w) == 0;
}

static void
watch_stop(struct watchdog *w, pthread_t th)
{
	pthread_mutex_lock(&w->mu);
	w->done = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(th, NULL);
}

static void
smtp_send(struct adapter *a, const struct config_target *t, const struct adapter_effect *e,
          struct adapter_attempt *out)
{
	CURL *c = a->curl;
	struct curl_slist *rcpts = NULL;
	struct sink s;
	struct upload up = { 0 };
	char errbuf[CURL_ERROR_SIZE] = "", why[160], from[300], qid[ADAPTER_PROVIDER_ID_MAX];
	char *msg, *user = NULL;
	json_t *rcpt = NULL, *v;
	struct timespec t0;
	struct watchdog *w = &a->watch;
	pthread_t wth;
	bool watched;
	CURLcode rc;
	long status = 0;
	curl_off_t sent = 0;
	size_t i;
	const char *secret;

	msg = adapter_smtp_message(t, e, &rcpt, why, sizeof(why));
	if (msg == NULL) {
		invalid(out, why);
		return;
	}
	curl_easy_reset(c);
	sink_init(&s, t);
	common_options(c, t, &s, errbuf);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "smtp,smtps");
	curl_easy_setopt(c, CURLOPT_URL, t->url);
	/* Also bounds each wait for a server reply, the QUIT after a timeout
	 * included: without it libcurl waits 120 s for a stalled server's
	 * goodbye, long after the transfer's own timeout. */
	curl_easy_setopt(c, CURLOPT_SERVER_RESPONSE_TIMEOUT, (long)(t->timeout_ms + 999) / 1000);
	curl_easy_setopt(c, CURLOPT_DEBUGFUNCTION, on_debug);
	curl_easy_setopt(c, CURLOPT_DEBUGDATA, &s);
	curl_easy_setopt(c, CURLOPT_VERBOSE, 1L);
	snprintf(from, sizeof(from), "<%s>", t->mail_from);
	curl_easy_setopt(c, CURLOPT_MAIL_FROM, from);
	json_array_foreach(rcpt, i, v) {
		char r[300];

		snprintf(r, sizeof(r), "<%s>", json_string_value(v));
		rcpts = curl_slist_append(rcpts, r);
	}
	curl_easy_setopt(c, CURLOPT_MAIL_RCPT, rcpts);
	/* credentials_env holds "user:password" for SMTP AUTH */
	if (t->credentials_env[0] != '\0' && (secret = getenv(t->credentials_env)) != NULL &&
	    (user = strdup(secret)) != NULL) {
		curl_easy_setopt(c, CURLOPT_USERPWD, user);
		curl_easy_setopt(c, CURLOPT_USE_SSL, (long)CURLUSESSL_TRY);
	}
	up.data = msg;
	up.len = strlen(msg);
	curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
	curl_easy_setopt(c, CURLOPT_READDATA, &up);
	curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)up.len);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	watched = a->watch_ok && watch_start(w, &wth, &t0, t->timeout_ms);
	if (watched) {
		curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, watch_open);
		curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, w);
		curl_easy_setopt(c, CURLOPT_CLOSESOCKETFUNCTION, watch_close);
		curl_easy_setopt(c, CURLOPT_CLOSESOCKETDATA, w);
	}
	rc = curl_easy_perform(c);
	out->duration_ms = elapsed_ms(&t0);
	if (watched) {
		watch_stop(w, wth);
		/* what a shut-down socket looks like to libcurl is a timeout */
		if (w->fired && rc != CURLE_OK) {
			rc = CURLE_OPERATION_TIMEDOUT;
			snprintf(errbuf, sizeof(errbuf), "no answer within timeout_ms (%d ms)",
			         t->timeout_ms);
		}
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(c, CURLINFO_SIZE_UPLOAD_T, &sent);
	out->r.kind = ATTEMPT_SMTP;
	/* Before the message content went out no server can have queued it;
	 * once any of it did, it may have (classify.h). */
	out->r.request_sent = sent > 0 || up.off > 0;
	out->r.transport_error = map_error(rc, s.over);
	out->r.status = (int)status;
	out->body_len = s.body.len;
	out->body = buf_steal(&s.body);
	out->r.body = out->body;
	out->r.body_len = out->body_len;
	if (rc == CURLE_OK && status >= 200 && status < 300) {
		queue_id(s.smtp_reply, qid, sizeof(qid));
		set_provider_id(out, qid);
	}
	fill_evidence(out, &s, rc, errbuf);
	{
		char mid[300];

		adapter_message_id(e->provider_key, t->mail_from, mid, sizeof(mid));
		json_object_set_new(out->evidence, "message_id", json_string(mid));
	}

	if (user != NULL) {
		digest_wipe(user, strlen(user));
		free(user);
		curl_easy_setopt(c, CURLOPT_USERPWD, NULL);
	}
	curl_slist_free_all(rcpts);
	curl_easy_setopt(c, CURLOPT_MAIL_RCPT, NULL);
	buf_free(&s.body);
	json_decref(s.headers);
	json_decref(rcpt);
	free(msg);
}

void
adapter_send(struct adapter *a, const struct config_target *t, const struct adapter_effect *e,
             struct adapter_attempt *out)
{
	memset(out, 0, sizeof(*out));
	if (strcmp(t->kind, "smtp") == 0)
		smtp_send(a, t, e, out);
	else
		http_send(a, t, e, out);
}

enum lookup_result
adapter_lookup(struct adapter *a, const struct config_target *t, const char *provider_key,
               struct adapter_attempt *out)
{
	CURL *c = a->curl;
	struct curl_slist *hdrs = NULL;
	struct sink s;
	char errbuf[CURL_ERROR_SIZE] = "", *esc, *url = NULL;
	struct timespec t0;
	CURLcode rc;
	long status = 0;
	enum lookup_result lr = LOOKUP_ERROR;

	memset(out, 0, sizeof(*out));
	if (t->lookup_url[0] == '\0')
		return LOOKUP_ERROR;
	curl_easy_reset(c);
	esc = curl_easy_escape(c, provider_key, 0);
	if (esc == NULL || asprintf(&url, "%s%skey=%s", t->lookup_url,
	                            strchr(t->lookup_url, '?') ? "&" : "?", esc) < 0) {
		curl_free(esc);
		return LOOKUP_ERROR;
	}
	curl_free(esc);
	sink_init(&s, t);
	common_options(c, t, &s, errbuf);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
	hdrs = add_bearer(hdrs, t);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = curl_easy_perform(c);
	out->duration_ms = elapsed_ms(&t0);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	out->r.kind = ATTEMPT_HTTP;
	out->r.transport_error = map_error(rc, s.over);
	out->r.status = (int)status;
	out->body_len = s.body.len;
	out->body = buf_steal(&s.body);
	if (rc == CURLE_OK && status >= 200 && status < 300) {
		provider_id_from_response(out, t, &s);
		/* found, but without an id we can keep: still found */
		lr = LOOKUP_FOUND;
		if (out->provider_id[0] == '\0')
			set_provider_id(out, "unknown-id");
	} else if (rc == CURLE_OK && (status == 404 || status == 410)) {
		lr = LOOKUP_NOT_FOUND;
	}
	fill_evidence(out, &s, rc, errbuf);
	curl_slist_free_all(hdrs);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	buf_free(&s.body);
	json_decref(s.headers);
	free(url);
	return lr;
}

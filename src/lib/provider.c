/*
 * provider.c — what every provider shares: the connection state of a
 * worker, the response sink, the transfer settings, the evidence of an
 * attempt, and the choice of a provider by target kind; see provider.h.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "digest.h"
#include "log.h"
#include "provider.h"
#include "provider_int.h"

/* Every target kind oncegate speaks: adding one is its file and its row. */
static const struct provider *const providers[] = { &provider_http, &provider_smtp,
	                                                  &provider_slack };
#define NPROVIDERS (sizeof(providers) / sizeof(providers[0]))

const struct provider *
provider_for(const char *kind)
{
	size_t i;

	for (i = 0; kind != NULL && i < NPROVIDERS; i++)
		if (strcmp(providers[i]->kind, kind) == 0)
			return providers[i];
	return NULL;
}

const struct provider *
provider_of(const struct config_target *t)
{
	return t != NULL ? provider_for(t->kind) : NULL;
}

bool
provider_takes_mail(const struct config_target *t)
{
	const struct provider *pv = provider_of(t);

	return pv != NULL && pv->mail;
}

const struct provider *
provider_at(size_t i)
{
	return i < NPROVIDERS ? providers[i] : NULL;
}

void
provider_kinds(int mail, char *out, size_t outlen)
{
	size_t i, n = 0, shown = 0, len = 0;

	for (i = 0; i < NPROVIDERS; i++)
		n += mail < 0 || providers[i]->mail == (mail > 0);
	out[0] = '\0';
	for (i = 0; i < NPROVIDERS && len < outlen; i++) {
		if (mail >= 0 && providers[i]->mail != (mail > 0))
			continue;
		shown++;
		len += (size_t)snprintf(out + len, outlen - len, "%s%s",
		                        shown == 1 ? "" : shown == n ? " or " : ", ",
		                        providers[i]->kind);
	}
}

struct provider_conn *
provider_conn_new(void)
{
	struct provider_conn *pc = calloc(1, sizeof(*pc));

	if (pc == NULL)
		return NULL;
	pc->curl = curl_easy_init();
	if (pc->curl == NULL) {
		free(pc);
		return NULL;
	}
	return pc;
}

void
provider_conn_free(struct provider_conn *pc)
{
	size_t i;

	if (pc == NULL)
		return;
	curl_easy_cleanup(pc->curl);
	for (i = 0; i < PROVIDER_STATES; i++)
		if (pc->states[i].pv != NULL)
			pc->states[i].drop(pc->states[i].state);
	free(pc);
}

void *
provider_conn_state(struct provider_conn *pc, const struct provider *pv, void *(*make)(void),
                    void (*drop)(void *state))
{
	size_t i;

	for (i = 0; i < PROVIDER_STATES && pc->states[i].pv != NULL; i++)
		if (pc->states[i].pv == pv)
			return pc->states[i].state;
	if (i == PROVIDER_STATES || (pc->states[i].state = make()) == NULL)
		return NULL;
	pc->states[i].pv = pv;
	pc->states[i].drop = drop;
	return pc->states[i].state;
}

void
provider_attempt_clear(struct provider_attempt *out)
{
	free(out->body);
	json_decref(out->evidence);
	memset(out, 0, sizeof(*out));
}

static size_t
on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct provider_sink *s = userdata;
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
	struct provider_sink *s = userdata;
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

enum attempt_error
provider_map_error(CURLcode rc, bool over)
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

long long
provider_elapsed_ms(const struct timespec *t0)
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
common_options(CURL *c, const struct config_target *t, struct provider_sink *s, char *errbuf)
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
sink_init(struct provider_sink *s, const struct config_target *t)
{
	memset(s, 0, sizeof(*s));
	/* the buffer's cap is the target's: on_body keeps to it */
	buf_init(&s->body, (size_t)t->response_cap_bytes);
	s->cap = (size_t)t->response_cap_bytes;
	s->id_header = t->provider_id_header[0] != '\0' ? t->provider_id_header : NULL;
	s->headers = json_object();
}

void
provider_prepare(CURL *c, const struct config_target *t, struct provider_sink *s, char *errbuf,
                 const char *protocols, const char *url)
{
	curl_easy_reset(c);
	sink_init(s, t);
	common_options(c, t, s, errbuf);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, protocols);
	curl_easy_setopt(c, CURLOPT_URL, url);
}

void
provider_conn_before_send(struct provider_conn *pc, int (*fn)(void *arg), void *arg)
{
	pc->before_send = fn;
	pc->before_send_arg = arg;
}

static size_t
read_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct provider_upload *u = userdata;
	size_t n = size * nmemb;

	if (!u->started) {
		u->started = true;
		if (u->pc->before_send != NULL && u->pc->before_send(u->pc->before_send_arg) != 0)
			return CURL_READFUNC_ABORT;
	}
	if (n > u->len - u->off)
		n = u->len - u->off;
	memcpy(ptr, u->data + u->off, n);
	u->off += n;
	return n;
}

void
provider_upload_set(CURL *c, struct provider_conn *pc, struct provider_upload *up,
                    const char *data, bool post)
{
	up->pc = pc;
	up->data = data;
	up->len = strlen(data);
	curl_easy_setopt(c, post ? CURLOPT_POST : CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(c, CURLOPT_READFUNCTION, read_body);
	curl_easy_setopt(c, CURLOPT_READDATA, up);
	curl_easy_setopt(c, post ? CURLOPT_POSTFIELDSIZE_LARGE : CURLOPT_INFILESIZE_LARGE,
	                 (curl_off_t)up->len);
}

void
provider_sink_free(struct provider_sink *s)
{
	buf_free(&s->body);
	json_decref(s->headers);
}

/* Sets member name of evidence to text as the decision log would write a
 * provider's text (log_redact_provider: credentials, keys, hosts, URLs and
 * mail addresses masked): what the database keeps of an answer is never
 * more than the log shows. Out of memory: the member is left out. */
static void
evidence_text(json_t *evidence, const char *name, const char *text)
{
	char *safe = strdup(text);

	if (safe == NULL)
		return;
	(void)log_redact_provider(safe);
	json_object_set_new(evidence, name, json_string(safe));
	free(safe);
}

/* The evidence a dead letter keeps of an attempt: what came back, bounded,
 * the provider's text redacted. The provider id header stays whole: it is
 * the provider's own name for the effect. */
void
provider_fill_evidence(struct provider_attempt *out, struct provider_sink *s, CURLcode rc,
                       const char *errbuf)
{
	size_t n = out->body_len < PROVIDER_EXCERPT_MAX ? out->body_len : PROVIDER_EXCERPT_MAX;
	char *excerpt = malloc(n + 1);
	const char *name;
	json_t *v;

	out->evidence = json_object();
	if (rc != CURLE_OK)
		evidence_text(out->evidence, "transport_error",
		              errbuf[0] ? errbuf : curl_easy_strerror(rc));
	if (out->r.status != 0)
		json_object_set_new(out->evidence, "status", json_integer(out->r.status));
	json_object_set_new(out->evidence, "request_sent", json_boolean(out->r.request_sent));
	if (json_object_size(s->headers) > 0) {
		json_t *h = json_object();

		json_object_foreach(s->headers, name, v) {
			if (s->id_header != NULL && strcasecmp(name, s->id_header) == 0)
				json_object_set(h, name, v);
			else
				evidence_text(h, name, json_string_value(v));
		}
		json_object_set_new(out->evidence, "headers", h);
	}
	if (s->smtp_reply[0] != '\0')
		evidence_text(out->evidence, "reply", s->smtp_reply);
	if (excerpt != NULL && n > 0) {
		size_t i;

		memcpy(excerpt, out->body, n);
		excerpt[n] = '\0';
		/* Keep it printable and valid UTF-8 for jsonb: bytes outside
		 * printable ASCII become '?'; the provider's text is redacted. */
		for (i = 0; i < n; i++)
			if (((unsigned char)excerpt[i] < 0x20 && excerpt[i] != '\n' && excerpt[i] != '\t') ||
			    (unsigned char)excerpt[i] >= 0x7f)
				excerpt[i] = '?';
		evidence_text(out->evidence, "body_excerpt", excerpt);
		if (out->body_len > n || s->over)
			json_object_set_new(out->evidence, "body_truncated", json_true());
	}
	free(excerpt);
}

/* Copies a printable provider id of at most PROVIDER_ID_MAX-1 bytes. */
void
provider_set_id(struct provider_attempt *out, const char *v)
{
	size_t i;

	if (v == NULL || *v == '\0')
		return;
	for (i = 0; v[i] != '\0' && i < sizeof(out->provider_id) - 1; i++)
		out->provider_id[i] = ((unsigned char)v[i] < 0x21 || (unsigned char)v[i] >= 0x7f)
		                              ? '_' : v[i];
	out->provider_id[i] = '\0';
}

/* A header value: one line of printable text (CR, LF and controls would
 * let a payload add headers of its own). */
bool
provider_header_safe(const char *s, size_t max)
{
	size_t i;

	for (i = 0; s[i] != '\0'; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return i <= max;
}


/* The target's credential (the environment variable credentials_env
 * names) as a bearer token; the header text is wiped once libcurl has its
 * copy. */
struct curl_slist *
provider_add_bearer(struct curl_slist *hdrs, const struct config_target *t)
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

void
provider_invalid(struct provider_attempt *out, const char *why)
{
	out->invalid = true;
	snprintf(out->invalid_reason, sizeof(out->invalid_reason), "%s", why);
	out->evidence = json_pack("{s:s, s:b}", "invalid", why, "request_sent", 0);
	out->duration_ms = 1;
}

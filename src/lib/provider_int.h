/*
 * provider_int.h — what the providers (provider_http.c, provider_smtp.c)
 * share from provider.c: the connection state, the response sink, the
 * transfer settings every attempt gets and the evidence it leaves. Only the
 * provider files include it.
 */
#ifndef OG_PROVIDER_INT_H
#define OG_PROVIDER_INT_H

#include <stdbool.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "buf.h"
#include "config_target.h"
#include "provider.h"

/* Providers with state of their own on one connection, at most. */
#define PROVIDER_STATES 4

struct provider_conn {
	CURL *curl;
	/* Each provider's own state (provider_conn_state), freed after the
	 * handle: a socket libcurl closes late still finds it. */
	struct {
		const struct provider *pv;
		void *state;
		void (*drop)(void *state);
	} states[PROVIDER_STATES];
	int (*before_send)(void *arg); /* provider_conn_before_send */
	void *before_send_arg;
};

/* The response as it arrives: body up to the cap, a few headers. */
struct provider_sink {
	struct buf body;
	size_t cap;
	bool over;                 /* the cap was hit */
	const char *id_header;     /* target's provider_id_header, or NULL */
	json_t *headers;           /* selected headers, lower-case names */
	char smtp_reply[512];      /* SMTP: the last reply line */
};

/* A fresh transfer on pc's handle: the sink set up for target t, the
 * settings every transfer gets (no redirects, no signals, bounded time, a
 * fresh connection), only the given protocols, and the URL. */
void provider_prepare(CURL *c, const struct config_target *t, struct provider_sink *s,
                      char *errbuf, const char *protocols, const char *url);
void provider_sink_free(struct provider_sink *s);
/* A request body handed to libcurl by a read callback: its first call,
 * before any byte of the body goes out, calls pc's before_send
 * (provider_conn_before_send) and aborts the transfer when that fails. */
struct provider_upload {
	struct provider_conn *pc;
	const char *data;
	size_t len, off;
	bool started;
};
/* Makes data (a string) the body of the transfer on c, read through *up
 * (zeroed, the caller's, alive until the transfer ends): POSTed (post), or
 * else uploaded, which SMTP sends as DATA. */
void provider_upload_set(CURL *c, struct provider_conn *pc, struct provider_upload *up,
                         const char *data, bool post);
enum attempt_error provider_map_error(CURLcode rc, bool over);
/* Milliseconds since t0 (CLOCK_MONOTONIC), rounded up, at least 1. */
long long provider_elapsed_ms(const struct timespec *t0);
/* The evidence a dead letter keeps of an attempt: what came back, bounded. */
void provider_fill_evidence(struct provider_attempt *out, struct provider_sink *s, CURLcode rc,
                            const char *errbuf);
/* Copies a printable provider id of at most PROVIDER_ID_MAX-1 bytes. */
void provider_set_id(struct provider_attempt *out, const char *v);
/* A header value: one line of printable text of at most max bytes. */
bool provider_header_safe(const char *s, size_t max);
/* The target's credential as a bearer token header. */
struct curl_slist *provider_add_bearer(struct curl_slist *hdrs, const struct config_target *t);
/* The payload cannot be sent at all: nothing went out. */
void provider_invalid(struct provider_attempt *out, const char *why);
/* One POST of body to url on target t, observed into *out (cleared by the
 * caller first): JSON, the target's credential (credentials_env) and extra
 * (one more header line, or NULL); for an effect e (NULL: none) its
 * Idempotency-Key and X-Oncegate-Effect. The send of an HTTP effect, and
 * Slack's (provider_http.c). */
void provider_http_post(struct provider_conn *pc, const struct config_target *t,
                        const struct provider_effect *e, const char *url, const char *body,
                        const char *extra, struct provider_attempt *out);
/* The look-up every kind uses (provider_http.c). */
enum provider_lookup provider_http_lookup(struct provider_conn *pc, const struct config_target *t,
                                          const char *provider_key,
                                          struct provider_attempt *out);
#endif

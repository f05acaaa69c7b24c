/*
 * adapter.h — one delivery attempt to a provider, through libcurl.
 *
 * An adapter performs the request and reports what it observed; it decides
 * nothing. The observation goes to classify_attempt() (classify.h), and the
 * dispatcher acts on the class. One adapter per dispatcher worker thread: it
 * owns a curl easy handle and is never shared.
 *
 * HTTP: POST of the effect's JSON payload with `Idempotency-Key` (the
 * effect's provider key), the target's credential as a bearer token, a
 * bounded response kept as evidence, the provider id from a configured
 * header or JSON Pointer. A `decision.callback` effect is POSTed to the URL
 * it carries (the n8n Wait node's resume URL), which must lie under its
 * target's URL.
 *
 * SMTP: the payload becomes one text/plain UTF-8 message (body base64 in
 * lines of 76, CRLF line ends, a non-ASCII subject as RFC 2047 words, To:
 * folded; up to OG_MAIL_RCPT_MAX recipients) with a deterministic
 * Message-ID derived from the provider key, so the same effect is the same
 * message on every attempt; the server's queue id ("queued as …") is the
 * provider id. The target's timeout_ms bounds the whole attempt, the
 * goodbye to a server that stalled included.
 */
#ifndef OG_ADAPTER_H
#define OG_ADAPTER_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "classify.h"
#include "config.h"

/* Evidence kept per attempt: this much of the response body. */
#define ADAPTER_EXCERPT_MAX 1024
#define ADAPTER_PROVIDER_ID_MAX 256

/* The effect as the adapter needs it. Borrowed pointers. */
struct adapter_effect {
	const char *id;            /* effect id (uuid) */
	const char *type;          /* effect type, e.g. email.send, decision.callback */
	const char *provider_key;  /* "<run key>/<type>", the same on every attempt */
	/* JSON text: the payload as it goes out, built and checked by the
	 * dispatcher (effect.h); mail takes to, subject, body and in_reply_to
	 * from it and nothing from anywhere else. */
	const char *payload;
};

/* What one attempt observed. attempt_result's pointers point into this
 * struct; adapter_attempt_clear() releases it. */
struct adapter_attempt {
	struct attempt_result r;
	/* The payload cannot be sent at all (no recipient, a callback URL
	 * outside its target, …): nothing went out; a permanent failure. */
	bool invalid;
	char invalid_reason[160];
	char provider_id[ADAPTER_PROVIDER_ID_MAX];
	char retry_after[64];
	char *body;                /* response, at most the target's cap */
	size_t body_len;
	long long duration_ms;     /* rounded up, >= 1 */
	/* {"transport_error", "status", "headers": {…}, "body_excerpt",
	 * "body_truncated", "request_sent"}; never the request, never
	 * credentials. */
	json_t *evidence;
};

struct adapter;

struct adapter *adapter_new(void);
void adapter_free(struct adapter *a);

/* One attempt of effect e on target t; fills *out (clear it afterwards). */
void adapter_send(struct adapter *a, const struct config_target *t,
                  const struct adapter_effect *e, struct adapter_attempt *out);

enum lookup_result {
	LOOKUP_FOUND = 0,     /* the provider has the effect; provider id set */
	LOOKUP_NOT_FOUND,     /* a clear 404 */
	LOOKUP_ERROR,         /* anything else: ask again later */
};

/* Reconciliation: GET <lookup_url>?key=<provider key>. */
enum lookup_result adapter_lookup(struct adapter *a, const struct config_target *t,
                                  const char *provider_key, struct adapter_attempt *out);

void adapter_attempt_clear(struct adapter_attempt *out);

/* The Message-ID an SMTP effect carries: "<" 32 hex "@" domain ">" from the
 * provider key and the sender's domain. out holds at least 128 bytes. */
void adapter_message_id(const char *provider_key, const char *mail_from, char *out,
                        size_t outlen);

/* Builds the whole RFC 5322 message of an email effect; NULL with a reason
 * when the payload cannot make one. *rcpt is a new array of recipients. */
char *adapter_smtp_message(const struct config_target *t, const struct adapter_effect *e,
                           json_t **rcpt, char *why, size_t whylen);

#endif

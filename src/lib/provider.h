/*
 * provider.h — one delivery attempt to a provider, through libcurl.
 *
 * A provider performs the request and reports what it observed; it decides
 * nothing. The observation goes to classify_attempt() (classify.h), and the
 * dispatcher acts on the class. Each target kind has one `struct provider`
 * (its config checks, its card part, its notice, its send and its look-up)
 * in its own file, chosen from the target's kind (provider_of) when a
 * configuration is loaded (provider_for). One connection state per
 * dispatcher worker thread (provider_conn_new): it owns a curl easy handle
 * and is never shared.
 *
 * HTTP (provider_http.c): POST of the effect's JSON payload with
 * `Idempotency-Key` (the effect's provider key), the target's credential as
 * a bearer token, a bounded response kept as evidence, the provider id from
 * a configured header or JSON Pointer. A `decision.callback` effect is
 * POSTed to the URL it carries (the n8n Wait node's resume URL), which must
 * lie under its target's URL.
 *
 * SMTP (provider_smtp.c): the payload becomes one text/plain UTF-8 message
 * (body base64 in lines of 76, CRLF line ends, a non-ASCII subject as RFC
 * 2047 words, To: folded; up to OG_MAIL_RCPT_MAX recipients) with a
 * deterministic Message-ID derived from the provider key, so the same
 * effect is the same message on every attempt; the server's queue id
 * ("queued as …") is the provider id. The target's timeout_ms bounds the
 * whole attempt, the goodbye to a server that stalled included.
 *
 * Look-up (reconciliation) is an HTTP GET of the target's lookup_url for
 * every kind.
 */
#ifndef OG_PROVIDER_H
#define OG_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "classify.h"
#include "config_target.h"

/* Evidence kept per attempt: this much of the response body. */
#define PROVIDER_EXCERPT_MAX 1024
#define PROVIDER_ID_MAX 256

/* The effect as the provider needs it. Borrowed pointers. */
struct provider_effect {
	const char *id;            /* effect id (uuid) */
	const char *type;          /* effect type, e.g. email.send, decision.callback */
	const char *provider_key;  /* "<run key>/<type>", the same on every attempt */
	/* JSON text: the payload as it goes out, built and checked by the
	 * dispatcher (effect.h); mail takes to, subject, body and in_reply_to
	 * from it and nothing from anywhere else. */
	const char *payload;
};

/* What one attempt observed. attempt_result's pointers point into this
 * struct; provider_attempt_clear() releases it. */
struct provider_attempt {
	struct attempt_result r;
	/* The payload cannot be sent at all (no recipient, a callback URL
	 * outside its target, …): nothing went out; a permanent failure. */
	bool invalid;
	char invalid_reason[160];
	char provider_id[PROVIDER_ID_MAX];
	char retry_after[64];
	char *body;                /* response, at most the target's cap */
	size_t body_len;
	long long duration_ms;     /* rounded up, >= 1 */
	/* {"transport_error", "status", "headers": {…}, "body_excerpt",
	 * "body_truncated", "request_sent"}; never the request, never
	 * credentials. */
	json_t *evidence;
};

enum provider_lookup {
	PROVIDER_FOUND = 0,        /* the provider has the effect; provider id set */
	PROVIDER_NOT_FOUND,        /* a clear 404 */
	PROVIDER_LOOKUP_ERROR,     /* anything else: ask again later */
};

/* A worker's connection state: the curl handle, and whatever state a
 * provider keeps per connection (provider_conn_state). */
struct provider_conn;
struct page;

/* A target kind: everything oncegate knows of it lives in its own file,
 * behind one of these, and in the table in provider.c. Nothing outside
 * those names a kind. */
struct provider {
	const char *kind;          /* the config's target kind: "http", "smtp" */
	/* The scheme its url takes ("smtp": smtp:// or smtps://). */
	const char *scheme;
	/* Payloads are mail messages (effect.h: effect_build checks they make
	 * one), and a notify entry with "to" addresses needs such a target. */
	bool mail;
	/* The card's section that shows the effect as it will be sent
	 * (templates/card.html); the card removes the sections of the others. */
	const char *card_part;
	/* A check of target t beyond its kind and url, by config check: NULL,
	 * or the option at fault with a message in msg. NULL: none. */
	const char *(*check_target)(const struct config_target *t, char *msg, size_t len);
	/* Fills card_part's slots of page p with the effect (type, payload as
	 * JSON text) as it will be sent, by the function the send uses; false
	 * when it cannot be sent (the section is then removed). */
	bool (*card)(struct page *p, const struct config_target *t, const char *type,
	             const char *payload);
	/* The message an approval notice becomes on this kind (notify.h);
	 * NULL with a reason when it cannot. NULL: notice_message's
	 * (notice.h), for mail when the kind's payloads are mail messages. */
	json_t *(*notice)(const json_t *notice, const char *link, const char *client, char *why,
	                  size_t whylen);
	/* One attempt of effect e on target t; fills *out (clear it afterwards). */
	void (*send)(struct provider_conn *pc, const struct config_target *t,
	             const struct provider_effect *e, struct provider_attempt *out);
	/* A chat's reply after a decision (the message updated to say who
	 * decided): one POST of body (JSON) to url, which the chat handed out
	 * with the interaction; refused (out->invalid) unless url lies where
	 * the target allows. NULL: the kind takes no replies. */
	void (*reply)(struct provider_conn *pc, const struct config_target *t, const char *url,
	              const char *body, struct provider_attempt *out);
	/* Reconciliation: GET <lookup_url>?key=<provider key>. */
	enum provider_lookup (*lookup)(struct provider_conn *pc, const struct config_target *t,
	                               const char *provider_key, struct provider_attempt *out);
};

extern const struct provider provider_http;
extern const struct provider provider_smtp;
extern const struct provider provider_slack;

/* The provider of a target kind; NULL for a kind no provider serves. */
const struct provider *provider_for(const char *kind);
/* The provider of target t (its kind was checked when the configuration
 * was loaded; NULL for a kind no provider serves). */
const struct provider *provider_of(const struct config_target *t);
/* Are target t's payloads mail messages (its provider's mail)? */
bool provider_takes_mail(const struct config_target *t);
/* The i-th provider of the table, NULL past the end. */
const struct provider *provider_at(size_t i);
/* The kinds, "a, b or c", into out: all of them (mail < 0), or those whose
 * payloads are (mail > 0) or are not (mail == 0) mail messages. */
void provider_kinds(int mail, char *out, size_t outlen);

struct provider_conn *provider_conn_new(void);
void provider_conn_free(struct provider_conn *pc);
/* fn(arg) is called once by each following send on pc when the transfer
 * of the request has started and its body is about to go out: HTTP, once
 * the request line and headers are written; SMTP, once the server has
 * accepted DATA (354). No byte of the body has left yet, and a server acts
 * on no request whose body did not arrive whole. Non-zero aborts the
 * attempt there, its body unsent. The dispatcher marks the send started
 * there. fn NULL: nothing is called. */
void provider_conn_before_send(struct provider_conn *pc, int (*fn)(void *arg), void *arg);
/* Provider pv's state on connection pc: made by make() on first use, freed
 * by drop() after the curl handle when pc is freed; NULL when make failed
 * (it is asked again next time). */
void *provider_conn_state(struct provider_conn *pc, const struct provider *pv,
                          void *(*make)(void), void (*drop)(void *state));

void provider_attempt_clear(struct provider_attempt *out);

/* The Message-ID an SMTP effect carries: "<" 32 hex "@" domain ">" from the
 * provider key and the sender's domain. out holds at least 128 bytes. */
void provider_smtp_message_id(const char *provider_key, const char *mail_from, char *out,
                              size_t outlen);

/* Where and what an HTTP effect POSTs (the one function the send uses):
 * the target's URL and the payload as it is, or, for a decision.callback,
 * the resume URL it carries and the rest of it. *url and *body malloc'd;
 * false with a reason when it cannot be sent. */
bool provider_http_request(const struct config_target *t, const char *type, const char *payload,
                           char **url, char **body, char *why, size_t whylen)
	__attribute__((warn_unused_result));

/* An email effect as its recipients get it: the values the message
 * carries, taken by the one function that builds it, so the approval page
 * shows exactly what goes out. from is the envelope sender and From:, to
 * every recipient (RCPT TO and To:, in order), subject the Subject: text
 * and body the text the recipients read once the transfer encoding is
 * undone, byte for byte. Pointers into payload and the target. */
struct provider_mail {
	json_t *payload;           /* owned */
	json_t *to;                /* array of addresses (in payload) */
	const char *from;
	const char *subject;
	const char *body;
	const char *in_reply_to;   /* NULL when none */
};

/* The mail an effect's payload (JSON text) becomes on target t; false with
 * a reason when it cannot make one. Release with provider_mail_clear. */
bool provider_smtp_mail(const struct config_target *t, const char *payload,
                        struct provider_mail *m, char *why, size_t whylen)
	__attribute__((warn_unused_result));
void provider_mail_clear(struct provider_mail *m);

/* Builds the whole RFC 5322 message of an email effect from
 * provider_smtp_mail's values; NULL with a reason when the payload cannot
 * make one. *rcpt is a new array of recipients. */
char *provider_smtp_message(const struct config_target *t, const struct provider_effect *e,
                            json_t **rcpt, char *why, size_t whylen);

#endif

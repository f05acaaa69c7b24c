/*
 * provider_smtp.c — the SMTP provider: the message an email effect
 * becomes, and one submission of it; see provider.h.
 *
 * The attempt's deadline is enforced from outside libcurl. libcurl's own
 * timeout stops the transfer, but then it still says goodbye (QUIT) to a
 * server that stalled and waits for the answer, and some waits for a reply
 * run on their own clock: a stalled server could hold a send twice the
 * target's timeout. At the deadline the watchdog shuts the sockets down;
 * every wait ends at once, and the attempt is a timeout.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
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

#include <openssl/evp.h>

#include "caps.h"
#include "deadline.h"
#include "digest.h"
#include "payload.h"
#include "page.h"
#include "provider.h"
#include "provider_int.h"

/* The attempt's deadline, enforced from outside libcurl: at the deadline
 * the sockets it watches are shut down. One per connection
 * (provider_conn_state). */
#define WATCH_FDS 4

struct watchdog {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct timespec deadline;  /* CLOCK_MONOTONIC */
	curl_socket_t fds[WATCH_FDS];
	bool done, fired;
};

static void *
watch_new(void)
{
	struct watchdog *w = calloc(1, sizeof(*w));
	pthread_condattr_t ca;
	size_t i;
	bool ok;

	if (w == NULL)
		return NULL;
	for (i = 0; i < WATCH_FDS; i++)
		w->fds[i] = CURL_SOCKET_BAD;
	ok = pthread_condattr_init(&ca) == 0;
	if (ok) {
		ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
		     pthread_cond_init(&w->cv, &ca) == 0;
		pthread_condattr_destroy(&ca);
	}
	if (ok && pthread_mutex_init(&w->mu, NULL) != 0) {
		pthread_cond_destroy(&w->cv);
		ok = false;
	}
	if (!ok) {
		free(w);
		return NULL;
	}
	return w;
}

static void
watch_free(void *state)
{
	struct watchdog *w = state;

	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	free(w);
}

/* SMTP: the server's reply lines reach us only as protocol trace; the
 * last one (the answer to the end of DATA, on success) names the queue id. */
static int
on_debug(CURL *c, curl_infotype type, char *data, size_t size, void *userdata)
{
	struct provider_sink *s = userdata;
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

/* --- SMTP ------------------------------------------------------------------ */

void
provider_smtp_message_id(const char *provider_key, const char *mail_from, char *out,
                         size_t outlen)
{
	char hex[DIGEST_HEX_LEN];
	const char *at = mail_from != NULL ? strrchr(mail_from, '@') : NULL;
	const char *domain = at != NULL && at[1] != '\0' ? at + 1 : "oncegate.invalid";
	size_t dl = strcspn(domain, "> \t\r\n");

	digest_sha256_hex(provider_key, strlen(provider_key), hex);
	snprintf(out, outlen, "<%.32s.oncegate@%.*s>", hex, (int)(dl > 200 ? 200 : dl), domain);
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

bool
provider_smtp_mail(const struct config_target *t, const char *payload, struct provider_mail *m,
                   char *why, size_t whylen)
{
	json_t *v;

	memset(m, 0, sizeof(*m));
	m->payload = payload != NULL ? json_loads(payload, 0, NULL) : NULL;
	/* The dispatcher checked it already (effect.h); the provider refuses
	 * on its own anything it could not turn into a message. */
	if (!payload_mail_ok(m->payload, why, whylen))
		goto fail;
	if (!payload_mail_address_ok(t->mail_from)) {
		snprintf(why, whylen, "target mail_from is not plain local@domain");
		goto fail;
	}
	/* one address stands for a list of one, in the payload itself */
	v = json_object_get(m->payload, "to");
	if (!json_is_array(v) && json_object_set_new(m->payload, "to", json_pack("[O]", v)) != 0) {
		snprintf(why, whylen, "out of memory");
		goto fail;
	}
	m->to = json_object_get(m->payload, "to");
	m->from = t->mail_from;
	m->subject = json_string_value(json_object_get(m->payload, "subject"));
	m->body = json_string_value(json_object_get(m->payload, "body"));
	m->in_reply_to = json_string_value(json_object_get(m->payload, "in_reply_to"));
	return true;
fail:
	provider_mail_clear(m);
	return false;
}

void
provider_mail_clear(struct provider_mail *m)
{
	json_decref(m->payload);
	memset(m, 0, sizeof(*m));
}

char *
provider_smtp_message(const struct config_target *t, const struct provider_effect *e,
                      json_t **rcpt, char *why, size_t whylen)
{
	struct provider_mail m;
	char msgid[300], date[64];
	struct buf b;
	time_t now = time(NULL);
	struct tm tm;

	*rcpt = NULL;
	if (!provider_smtp_mail(t, e->payload, &m, why, whylen))
		return NULL;
	buf_init(&b, OG_MAIL_MESSAGE_MAX);
	provider_smtp_message_id(e->provider_key, m.from, msgid, sizeof(msgid));
	gmtime_r(&now, &tm);
	strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S +0000", &tm);
	if (buf_printf(&b, "Message-ID: %s\r\nDate: %s\r\nFrom: <%s>\r\n", msgid, date,
	               m.from) != 0 ||
	    put_to(&b, m.to) != 0 || put_subject(&b, m.subject) != 0)
		goto toolong;
	if (m.in_reply_to != NULL && buf_printf(&b, "In-Reply-To: %s\r\nReferences: %s\r\n",
	                                        m.in_reply_to, m.in_reply_to) != 0)
		goto toolong;
	if (buf_puts(&b, "MIME-Version: 1.0\r\n"
	                 "Content-Type: text/plain; charset=utf-8\r\n"
	                 "Content-Transfer-Encoding: base64\r\n"
	                 "Auto-Submitted: auto-generated\r\n\r\n") != 0 ||
	    put_base64_body(&b, m.body) != 0)
		goto toolong;
	*rcpt = json_incref(m.to);
	provider_mail_clear(&m);
	return buf_steal(&b);
toolong:
	if (b.overflow)
		snprintf(why, whylen, "the message would exceed %d bytes", OG_MAIL_MESSAGE_MAX);
	else
		snprintf(why, whylen, "out of memory");
	provider_mail_clear(&m);
	buf_free(&b);
	return NULL;
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
watch_start(struct watchdog *w, pthread_t *th, const struct timespec *t0,
            int timeout_ms)
{
	size_t i;

	pthread_mutex_lock(&w->mu);
	for (i = 0; i < WATCH_FDS; i++)
		w->fds[i] = CURL_SOCKET_BAD;
	w->done = w->fired = false;
	w->deadline = *t0;
	deadline_add_ms(&w->deadline, timeout_ms);
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
smtp_send(struct provider_conn *pc, const struct config_target *t,
          const struct provider_effect *e, struct provider_attempt *out)
{
	CURL *c = pc->curl;
	struct curl_slist *rcpts = NULL;
	struct provider_sink s;
	struct provider_upload up = { 0 };
	char errbuf[CURL_ERROR_SIZE] = "", why[160], from[300], qid[PROVIDER_ID_MAX];
	char *msg, *user = NULL;
	json_t *rcpt = NULL, *v;
	struct timespec t0;
	struct watchdog *w = provider_conn_state(pc, &provider_smtp, watch_new, watch_free);
	pthread_t wth;
	bool watched;
	CURLcode rc;
	long status = 0;
	curl_off_t sent = 0;
	size_t i;
	const char *secret;

	memset(out, 0, sizeof(*out));
	msg = provider_smtp_message(t, e, &rcpt, why, sizeof(why));
	if (msg == NULL) {
		provider_invalid(out, why);
		return;
	}
	provider_prepare(c, t, &s, errbuf, "smtp,smtps", t->url);
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
	/* read once the server has accepted DATA (provider_upload_set) */
	provider_upload_set(c, pc, &up, msg, false);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	watched = w != NULL && watch_start(w, &wth, &t0, t->timeout_ms);
	if (watched) {
		curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, watch_open);
		curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, w);
		curl_easy_setopt(c, CURLOPT_CLOSESOCKETFUNCTION, watch_close);
		curl_easy_setopt(c, CURLOPT_CLOSESOCKETDATA, w);
	}
	rc = curl_easy_perform(c);
	out->duration_ms = provider_elapsed_ms(&t0);
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
	out->r.transport_error = provider_map_error(rc, s.over);
	out->r.status = (int)status;
	out->body_len = s.body.len;
	out->body = buf_steal(&s.body);
	out->r.body = out->body;
	out->r.body_len = out->body_len;
	if (rc == CURLE_OK && status >= 200 && status < 300) {
		queue_id(s.smtp_reply, qid, sizeof(qid));
		provider_set_id(out, qid);
	}
	provider_fill_evidence(out, &s, rc, errbuf);
	{
		char mid[300];

		provider_smtp_message_id(e->provider_key, t->mail_from, mid, sizeof(mid));
		json_object_set_new(out->evidence, "message_id", json_string(mid));
	}

	if (user != NULL) {
		digest_wipe(user, strlen(user));
		free(user);
		curl_easy_setopt(c, CURLOPT_USERPWD, NULL);
	}
	curl_slist_free_all(rcpts);
	curl_easy_setopt(c, CURLOPT_MAIL_RCPT, NULL);
	provider_sink_free(&s);
	json_decref(rcpt);
	free(msg);
}

/* SMTP AUTH's password only where TLS is required. */
static const char *
smtp_check_target(const struct config_target *t, char *msg, size_t len)
{
	if (t->credentials_env[0] != '\0' && strncasecmp(t->url, "smtps://", 8) != 0) {
		snprintf(msg, len, "target %s: credentials_env with %.64s: the password would "
		         "go out where TLS is not required; use an smtps:// url", t->name, t->url);
		return "credentials_env";
	}
	return NULL;
}

/* The message's From, To, Subject and body. */
static bool
smtp_card(struct page *p, const struct config_target *t, const char *type, const char *payload)
{
	struct provider_mail m;
	char why[160], count[24];
	size_t i;
	json_t *v;

	(void)type;
	if (!provider_smtp_mail(t, payload, &m, why, sizeof(why)))
		return false;
	(void)page_text(p, "mail_from", m.from);
	snprintf(count, sizeof(count), "%zu", json_array_size(m.to));
	(void)page_text(p, "mail_count", count);
	json_array_foreach(m.to, i, v) {
		struct page_scope *sc = page_repeat(p, "mail_rcpt");

		if (sc == NULL)
			break;
		(void)page_scope_text(sc, "mail_rcpt", json_string_value(v) ?: "");
	}
	page_repeat_done(p, "mail_rcpt");
	(void)page_text(p, "mail_subject", m.subject);
	(void)page_text(p, "mail_body", m.body);
	provider_mail_clear(&m);
	return true;
}

const struct provider provider_smtp = {
	.kind = "smtp",
	.scheme = "smtp",
	.mail = true,
	.card_part = "mail",
	.check_target = smtp_check_target,
	.card = smtp_card,
	.send = smtp_send,
	/* a mail target is looked up through its HTTP lookup_url */
	.lookup = provider_http_lookup,
};

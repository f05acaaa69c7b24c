/*
 * provider_http.c — the HTTP provider: one POST of an effect, and the
 * look-up every kind uses for reconciliation; see provider.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* asprintf */
#endif
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "canon.h"
#include "jptr.h"
#include "page.h"
#include "provider.h"
#include "provider_int.h"

static void
provider_id_from_response(struct provider_attempt *out, const struct config_target *t,
                          const struct provider_sink *s)
{
	if (t->provider_id_header[0] != '\0') {
		char lower[64];
		size_t i;

		for (i = 0; t->provider_id_header[i] != '\0' && i < sizeof(lower) - 1; i++)
			lower[i] = (char)tolower((unsigned char)t->provider_id_header[i]);
		lower[i] = '\0';
		provider_set_id(out, json_string_value(json_object_get(s->headers, lower)));
	}
	if (out->provider_id[0] == '\0' && t->provider_id_pointer[0] != '\0' &&
	    out->body_len > 0 && !s->over) {
		json_t *doc = json_loadb(out->body, out->body_len, JSON_DECODE_ANY, NULL);
		json_t *v = doc != NULL ? jptr_get(doc, t->provider_id_pointer, 1024) : NULL;
		char num[32];

		if (json_is_string(v))
			provider_set_id(out, json_string_value(v));
		else if (json_is_integer(v)) {
			snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
			provider_set_id(out, num);
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

/* Is url under one of bases, separated by spaces (a callback target made
 * from callback_origins lists each origin)? */
static bool
url_under_any(const char *url, const char *bases)
{
	char base[2048];

	while (*bases != '\0') {
		size_t n = strcspn(bases += strspn(bases, " "), " ");

		if (n > 0 && n < sizeof(base)) {
			memcpy(base, bases, n);
			base[n] = '\0';
			if (url_under(url, base))
				return true;
		}
		bases += n;
	}
	return false;
}

/* Sends the request prepared on c with its headers and the target's
 * credential, and notes in *out what came back. */
static CURLcode
http_perform(CURL *c, const struct config_target *t, struct curl_slist **hdrs,
             struct provider_sink *s, struct provider_attempt *out, long *status)
{
	struct timespec t0;
	CURLcode rc;

	*hdrs = provider_add_bearer(*hdrs, t);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdrs);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = curl_easy_perform(c);
	out->duration_ms = provider_elapsed_ms(&t0);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	out->r.kind = ATTEMPT_HTTP;
	out->r.transport_error = provider_map_error(rc, s->over);
	out->r.status = (int)*status;
	out->body_len = s->body.len;
	out->body = buf_steal(&s->body);
	out->r.body = out->body;
	out->r.body_len = out->body_len;
	return rc;
}

bool
provider_http_request(const struct config_target *t, const char *type, const char *payload,
                      char **url, char **body, char *why, size_t whylen)
{
	json_t *p = NULL;
	const char *u;

	*url = *body = NULL;
	if (payload == NULL)
		goto invalid;
	/* A decision callback goes to the resume URL it carries; the rest of
	 * its payload is the body. */
	if (strcmp(type, "decision.callback") != 0) {
		*url = t->url != NULL ? strdup(t->url) : NULL;
		*body = strdup(payload);
		goto done;
	}
	p = json_loads(payload, 0, NULL);
	u = json_string_value(json_object_get(p, "url"));
	if (u == NULL || !url_under_any(u, t->url) || !provider_header_safe(u, 4096)) {
		snprintf(why, whylen, "callback url missing or outside its target");
		json_decref(p);
		return false;
	}
	*url = strdup(u);
	json_object_del(p, "url");
	*body = canon_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(p);
done:
	if (*url != NULL && *body != NULL)
		return true;
	free(*url);
	free(*body);
	*url = *body = NULL;
invalid:
	snprintf(why, whylen, "payload is not JSON");
	return false;
}

void
provider_http_post(struct provider_conn *pc, const struct config_target *t,
                   const struct provider_effect *e, const char *url, const char *body,
                   const char *extra, struct provider_attempt *out)
{
	CURL *c = pc->curl;
	struct curl_slist *hdrs = NULL;
	struct provider_sink s;
	struct provider_upload up = { 0 };
	char errbuf[CURL_ERROR_SIZE] = "", *line = NULL;
	CURLcode rc;
	long status = 0;
	curl_off_t sent = 0;

	provider_prepare(c, t, &s, errbuf, "http,https", url);
	/* The body through a read callback, not in the request's first
	 * write: the headers go out before it (provider_upload_set). */
	provider_upload_set(c, pc, &up, body, true);
	hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	hdrs = curl_slist_append(hdrs, "Expect:");
	if (extra != NULL)
		hdrs = curl_slist_append(hdrs, extra);
	if (e != NULL && asprintf(&line, "Idempotency-Key: %s", e->provider_key) > 0) {
		hdrs = curl_slist_append(hdrs, line);
		free(line);
		line = NULL;
	}
	if (e != NULL && asprintf(&line, "X-Oncegate-Effect: %s", e->id) > 0) {
		hdrs = curl_slist_append(hdrs, line);
		free(line);
		line = NULL;
	}
	rc = http_perform(c, t, &hdrs, &s, out, &status);
	{
		long reqsize = 0;

		curl_easy_getinfo(c, CURLINFO_REQUEST_SIZE, &reqsize);
		curl_easy_getinfo(c, CURLINFO_SIZE_UPLOAD_T, &sent);
		/* When in doubt, the request went out (classify.h). */
		out->r.request_sent = reqsize > 0 || sent > 0;
	}
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
	provider_fill_evidence(out, &s, rc, errbuf);

	curl_slist_free_all(hdrs);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	provider_sink_free(&s);
}

static void
http_send(struct provider_conn *pc, const struct config_target *t,
          const struct provider_effect *e, struct provider_attempt *out)
{
	char *body = NULL, *url = NULL;
	char why[160];

	memset(out, 0, sizeof(*out));
	if (!provider_http_request(t, e->type, e->payload, &url, &body, why, sizeof(why))) {
		provider_invalid(out, why);
		return;
	}
	if (body[0] == '\0')
		/* no body, no point to mark the send started at */
		provider_invalid(out, "empty request body");
	else
		provider_http_post(pc, t, e, url, body, NULL, out);
	free(body);
	free(url);
}

enum provider_lookup
provider_http_lookup(struct provider_conn *pc, const struct config_target *t,
                     const char *provider_key, struct provider_attempt *out)
{
	CURL *c = pc->curl;
	struct curl_slist *hdrs = NULL;
	struct provider_sink s;
	char errbuf[CURL_ERROR_SIZE] = "", *esc, *url = NULL;
	CURLcode rc;
	long status = 0;
	enum provider_lookup lr = PROVIDER_LOOKUP_ERROR;

	memset(out, 0, sizeof(*out));
	if (t->lookup_url[0] == '\0')
		return PROVIDER_LOOKUP_ERROR;
	esc = curl_easy_escape(c, provider_key, 0);
	if (esc == NULL || asprintf(&url, "%s%skey=%s", t->lookup_url,
	                            strchr(t->lookup_url, '?') ? "&" : "?", esc) < 0) {
		curl_free(esc);
		return PROVIDER_LOOKUP_ERROR;
	}
	curl_free(esc);
	provider_prepare(c, t, &s, errbuf, "http,https", url);
	curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
	rc = http_perform(c, t, &hdrs, &s, out, &status);
	if (rc == CURLE_OK && status >= 200 && status < 300) {
		provider_id_from_response(out, t, &s);
		/* found, but without an id we can keep: still found */
		lr = PROVIDER_FOUND;
		if (out->provider_id[0] == '\0')
			provider_set_id(out, "unknown-id");
	} else if (rc == CURLE_OK && (status == 404 || status == 410)) {
		lr = PROVIDER_NOT_FOUND;
	}
	provider_fill_evidence(out, &s, rc, errbuf);
	curl_slist_free_all(hdrs);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	provider_sink_free(&s);
	free(url);
	return lr;
}

/* The request's method, URL and body. */
static bool
http_card(struct page *p, const struct config_target *t, const char *type, const char *payload)
{
	char why[160], *url = NULL, *body = NULL, *shown;
	json_t *b;

	if (type == NULL || !provider_http_request(t, type, payload, &url, &body, why, sizeof(why)))
		return false;
	b = json_loads(body, JSON_DECODE_ANY, NULL);
	shown = b != NULL ? page_json_text(b) : NULL;
	json_decref(b);
	(void)page_text(p, "http_method", "POST");
	(void)page_text(p, "http_url", url);
	(void)page_text(p, "http_body", shown != NULL ? shown : body);
	free(shown);
	free(url);
	free(body);
	return true;
}

const struct provider provider_http = {
	.kind = "http",
	.scheme = "http",
	.mail = false,
	.card_part = "http",
	.card = http_card,
	.send = http_send,
	.lookup = provider_http_lookup,
};

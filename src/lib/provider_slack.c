/*
 * provider_slack.c — the Slack provider: an approval notice posted with
 * chat.postMessage as a Block Kit message with Approve, Reject and Open
 * buttons (chat_slack.h), and the reply after a decision posted to the
 * interaction's response_url; see provider.h.
 *
 * The target's url is the Web API's base (https://slack.com/api; a
 * stand-in's in tests); the bot token comes from token_file (0600), read
 * at each send so that a rotated token needs no reload, and goes out only
 * in the Authorization header. Slack answers 200 with {"ok": false,
 * "error"} for what it refuses: a business rejection (classify.h, "!/ok"),
 * so a bad channel or a revoked token is a dead letter, not a retry; 429
 * with Retry-After is waited out. The message's ts is the provider id.
 * Slack keeps no idempotency key: a send that timed out is unknown and
 * never resent automatically.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* asprintf */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "canon.h"
#include "caps.h"
#include "chat_slack.h"
#include "digest.h"
#include "page.h"
#include "provider.h"
#include "provider_int.h"
#include "secret.h"

static char ok_pointer[] = "!/ok";
static char ts_pointer[] = "/ts";
static char no_header[] = "";

/* What the target's answers mean: Slack's, whatever the section says. */
static struct config_target
slack_view(const struct config_target *t)
{
	struct config_target v = *t;

	v.rejection_pointer = ok_pointer;
	v.provider_id_pointer = ts_pointer;
	v.provider_id_header = no_header;
	v.idempotency_key = 0;
	v.credentials_env = no_header; /* the bot token is token_file's */
	return v;
}

static bool
http_url(const char *u)
{
	return strncmp(u, "https://", 8) == 0 || strncmp(u, "http://", 7) == 0;
}

static const char *
slack_check(const struct config_target *t, char *msg, size_t len)
{
	char secret[OG_SECRET_FILE_MAX + 1];

	if (t->channel[0] == '\0' || strlen(t->channel) > 80 ||
	    strspn(t->channel, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-#") !=
	        strlen(t->channel)) {
		snprintf(msg, len, "target %s: channel must name the Slack channel notices go to "
		         "(its id, e.g. C0123ABCDEF)", t->name);
		return "channel";
	}
	if (t->token_file[0] == '\0' || secret_read("token_file", t->token_file, secret, msg, len) != 0) {
		if (t->token_file[0] == '\0')
			snprintf(msg, len, "target %s: token_file must name the file (0600) holding "
			         "the Slack app's bot token (xoxb-…)", t->name);
		return "token_file";
	}
	digest_wipe(secret, sizeof(secret));
	if (t->signing_secret_file[0] != '\0' &&
	    secret_read("signing_secret_file", t->signing_secret_file, secret, msg, len) != 0)
		return "signing_secret_file";
	digest_wipe(secret, sizeof(secret));
	if (!http_url(t->response_url_base)) {
		snprintf(msg, len, "target %s: response_url_base must be an http(s):// URL "
		         "(Slack's: https://hooks.slack.com/)", t->name);
		return "response_url_base";
	}
	return NULL;
}

/* "Authorization: Bearer TOKEN" of the target's token file; NULL with a
 * reason when it cannot be read. */
static char *
bearer(const struct config_target *t, char *why, size_t whylen)
{
	char secret[OG_SECRET_FILE_MAX + 1], *line = NULL;

	if (secret_read("token_file", t->token_file, secret, why, whylen) != 0)
		return NULL;
	if (asprintf(&line, "Authorization: Bearer %s", secret) < 0)
		line = NULL;
	digest_wipe(secret, sizeof(secret));
	return line;
}

static void
wipe_free(char *s)
{
	if (s != NULL)
		digest_wipe(s, strlen(s));
	free(s);
}

/* The effect's message with the target's channel (a payload that names
 * its own keeps it). */
static char *
with_channel(const struct config_target *t, const char *payload)
{
	json_t *m = payload != NULL ? json_loads(payload, 0, NULL) : NULL;
	char *out = NULL;

	if (json_is_object(m)) {
		if (json_object_get(m, "channel") == NULL)
			json_object_set_new(m, "channel", json_string(t->channel));
		out = canon_dumps(m, JSON_COMPACT);
	}
	json_decref(m);
	return out;
}

static void
slack_send(struct provider_conn *pc, const struct config_target *t,
           const struct provider_effect *e, struct provider_attempt *out)
{
	struct config_target v = slack_view(t);
	char why[200], *auth = NULL, *body = NULL, *url = NULL;

	memset(out, 0, sizeof(*out));
	if ((body = with_channel(t, e->payload)) == NULL)
		provider_invalid(out, "payload is not a JSON object");
	else if (asprintf(&url, "%s/chat.postMessage", t->url) < 0 || url == NULL)
		provider_invalid(out, "out of memory");
	else if ((auth = bearer(t, why, sizeof(why))) == NULL)
		/* nothing went out: the token is the site's to fix */
		provider_invalid(out, why);
	else
		provider_http_post(pc, &v, e, url, body, auth, out);
	wipe_free(auth);
	free(body);
	free(url);
}

/* Does url lie under base (its scheme, host, port and path prefix)? */
static bool
under(const char *url, const char *base)
{
	size_t n = strlen(base);

	return n > 0 && strncasecmp(url, base, n) == 0 &&
	       (base[n - 1] == '/' || url[n] == '/' || url[n] == '\0');
}

/* The reply to an interaction, to its response_url: no token (the URL is
 * the capability), only under response_url_base. */
static void
slack_reply(struct provider_conn *pc, const struct config_target *t, const char *url,
            const char *body, struct provider_attempt *out)
{
	struct config_target v = slack_view(t);

	memset(out, 0, sizeof(*out));
	v.rejection_pointer = no_header; /* response_url answers "ok" as text */
	v.provider_id_pointer = no_header;
	if (!http_url(url) || !under(url, t->response_url_base) ||
	    !provider_header_safe(url, CHAT_SLACK_URL_MAX))
		provider_invalid(out, "response_url is not under the target's response_url_base");
	else
		provider_http_post(pc, &v, NULL, url, body, NULL, out);
}

/* The message as it will be posted: its channel and its JSON. */
static bool
slack_card(struct page *p, const struct config_target *t, const char *type, const char *payload)
{
	char *body = with_channel(t, payload), *shown = NULL;
	json_t *m = body != NULL ? json_loads(body, 0, NULL) : NULL;

	(void)type;
	if (m != NULL) {
		shown = page_json_text(m);
		(void)page_text(p, "slack_channel",
		                json_string_value(json_object_get(m, "channel")) ?: t->channel);
		(void)page_text(p, "slack_body", shown != NULL ? shown : body);
	}
	free(shown);
	json_decref(m);
	free(body);
	return m != NULL;
}

const struct provider provider_slack = {
	.kind = "slack",
	.scheme = "http",
	.mail = false,
	.card_part = "slack",
	.check_target = slack_check,
	.card = slack_card,
	.notice = chat_slack_message,
	.send = slack_send,
	.reply = slack_reply,
	.lookup = provider_http_lookup,
};

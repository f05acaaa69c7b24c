/*
 * chat_slack.c — Slack's side of a chat approval, as text; see
 * chat_slack.h.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/params.h>

#include "chat_slack.h"
#include "digest.h"
#include "http.h"
#include "notice.h"

/* ---- the signature ------------------------------------------------------ */

/* HMAC-SHA256 of "v0:" timestamp ":" body with secret into mac. */
static bool
v0_mac(const char *secret, const char *timestamp, const char *body, size_t len,
       unsigned char mac[32])
{
	static char digest_name[] = "SHA256";
	EVP_MAC *alg = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *ctx = alg != NULL ? EVP_MAC_CTX_new(alg) : NULL;
	OSSL_PARAM params[2];
	size_t n = 0;
	bool ok;

	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0);
	params[1] = OSSL_PARAM_construct_end();
	ok = ctx != NULL &&
	     EVP_MAC_init(ctx, (const unsigned char *)secret, strlen(secret), params) == 1 &&
	     EVP_MAC_update(ctx, (const unsigned char *)"v0:", 3) == 1 &&
	     EVP_MAC_update(ctx, (const unsigned char *)timestamp, strlen(timestamp)) == 1 &&
	     EVP_MAC_update(ctx, (const unsigned char *)":", 1) == 1 &&
	     (len == 0 || EVP_MAC_update(ctx, (const unsigned char *)body, len) == 1) &&
	     EVP_MAC_final(ctx, mac, &n, 32) == 1 && n == 32;
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(alg);
	return ok;
}

enum chat_slack_verdict
chat_slack_verify(const char *secret, const char *timestamp, const char *signature,
                  const char *body, size_t len, long long now)
{
	unsigned char mac[32];
	char want[3 + 64 + 1];
	long long ts = 0;
	size_t n, i;
	bool ok;

	if (secret == NULL || secret[0] == '\0' || timestamp == NULL || signature == NULL)
		return CHAT_SLACK_UNSIGNED;
	n = strlen(timestamp);
	if (n == 0 || n > 12 || strspn(timestamp, "0123456789") != n)
		return CHAT_SLACK_UNSIGNED;
	for (i = 0; i < n; i++)
		ts = ts * 10 + (timestamp[i] - '0');
	if (strlen(signature) != 3 + 64 || strncmp(signature, "v0=", 3) != 0)
		return CHAT_SLACK_UNSIGNED;
	if (ts < now - CHAT_SLACK_WINDOW_S || ts > now + CHAT_SLACK_WINDOW_S)
		return CHAT_SLACK_STALE;
	if (!v0_mac(secret, timestamp, body, len, mac))
		return CHAT_SLACK_FORGED;
	memcpy(want, "v0=", 3);
	digest_hex(mac, 32, want + 3);
	digest_wipe(mac, sizeof(mac));
	/* hex is compared as Slack sends it: lower case */
	ok = CRYPTO_memcmp(want, signature, 3 + 64) == 0;
	digest_wipe(want, sizeof(want));
	return ok ? CHAT_SLACK_SIGNED : CHAT_SLACK_FORGED;
}

const char *
chat_slack_verdict_text(enum chat_slack_verdict v)
{
	switch (v) {
	case CHAT_SLACK_SIGNED:
		return "signed";
	case CHAT_SLACK_UNSIGNED:
		return "the X-Slack-Request-Timestamp or X-Slack-Signature header is missing or "
		       "malformed";
	case CHAT_SLACK_STALE:
		return "the request's timestamp is more than 5 minutes from now";
	case CHAT_SLACK_FORGED:
		return "the signature is not the signing secret's";
	}
	return "?";
}

/* ---- the request -------------------------------------------------------- */

/* Copies a string member of o of 1..cap-1 printable ASCII bytes. */
static bool
take(const json_t *o, const char *name, char *out, size_t cap)
{
	const json_t *v = json_object_get(o, name);
	const char *s = json_string_value(v);
	size_t n = s != NULL ? json_string_length(v) : 0, i;

	if (n == 0 || n >= cap)
		return false;
	for (i = 0; i < n; i++)
		if (s[i] <= ' ' || s[i] > '~')
			return false;
	memcpy(out, s, n + 1);
	return true;
}

static bool
uuid_shaped(const char *s)
{
	size_t i;

	if (strlen(s) != 36)
		return false;
	for (i = 0; i < 36; i++)
		if ((i == 8 || i == 13 || i == 18 || i == 23) ? s[i] != '-'
		                                               : !isxdigit((unsigned char)s[i]))
			return false;
	return true;
}

static enum chat_slack_read
bad(char *why, size_t whylen, const char *msg)
{
	snprintf(why, whylen, "%s", msg);
	return CHAT_SLACK_MALFORMED;
}

/* The interaction's JSON, checked into out. */
static enum chat_slack_read
read_interaction(const json_t *p, struct chat_slack_press *out, char *why, size_t whylen)
{
	const json_t *actions = json_object_get(p, "actions"), *a;
	const char *type = json_string_value(json_object_get(p, "type"));

	if (!json_is_object(p) || type == NULL)
		return bad(why, whylen, "payload must be a JSON object with a type");
	if (strcmp(type, "block_actions") != 0)
		return CHAT_SLACK_OTHER;
	if (!take(json_object_get(p, "user"), "id", out->user, sizeof(out->user)))
		return bad(why, whylen, "user.id is missing or malformed");
	if (json_object_get(p, "team") != NULL && !json_is_null(json_object_get(p, "team")) &&
	    !take(json_object_get(p, "team"), "id", out->team, sizeof(out->team)))
		return bad(why, whylen, "team.id is malformed");
	if (!json_is_array(actions) || json_array_size(actions) != 1)
		return bad(why, whylen, "actions must hold the one button pressed");
	a = json_array_get(actions, 0);
	if (!take(a, "action_id", out->action, sizeof(out->action)))
		return CHAT_SLACK_OTHER;
	if (strcmp(out->action, CHAT_SLACK_APPROVE) != 0 && strcmp(out->action, CHAT_SLACK_REJECT) != 0)
		return CHAT_SLACK_OTHER; /* Open, or another app's button: nothing to do */
	if (!take(a, "value", out->approval_id, sizeof(out->approval_id)) ||
	    !uuid_shaped(out->approval_id))
		return bad(why, whylen, "the button's value is not an approval id");
	if (!take(p, "response_url", out->response_url, sizeof(out->response_url)) ||
	    (strncmp(out->response_url, "https://", 8) != 0 &&
	     strncmp(out->response_url, "http://", 7) != 0))
		return bad(why, whylen, "response_url is missing or not an http(s) URL");
	return CHAT_SLACK_PRESS;
}

enum chat_slack_read
chat_slack_read(const char *body, size_t len, struct chat_slack_press *out, char *why,
                size_t whylen)
{
	enum chat_slack_read rc;
	json_t *p;
	char *text;
	long n;

	memset(out, 0, sizeof(*out));
	if (body == NULL || len == 0)
		return bad(why, whylen, "the body is empty");
	if ((text = malloc(len + 1)) == NULL)
		return bad(why, whylen, "out of memory");
	n = http_form_get(body, len, "payload", text, len + 1);
	if (n <= 0) {
		free(text);
		return bad(why, whylen, "the body must be a form with one payload field");
	}
	p = json_loadb(text, (size_t)n, JSON_REJECT_DUPLICATES, NULL);
	free(text);
	if (p == NULL)
		return bad(why, whylen, "payload is not JSON");
	rc = read_interaction(p, out, why, whylen);
	json_decref(p);
	if (rc != CHAT_SLACK_PRESS)
		memset(out, 0, sizeof(*out));
	return rc;
}

/* ---- the notice --------------------------------------------------------- */

static json_t *
plain(const char *text)
{
	return json_pack("{s:s, s:s, s:b}", "type", "plain_text", "text", text, "emoji", 0);
}

static json_t *
button(const char *action, const char *label, const char *style, const char *value,
       const char *url)
{
	json_t *b = json_pack("{s:s, s:s, s:o}", "type", "button", "action_id", action, "text",
	                      plain(label));

	if (b == NULL)
		return NULL;
	if (style != NULL)
		json_object_set_new(b, "style", json_string(style));
	if (value != NULL)
		json_object_set_new(b, "value", json_string(value));
	if (url != NULL)
		json_object_set_new(b, "url", json_string(url));
	return b;
}

/* The first max bytes of s, cut at a character boundary. */
static char *
cut(const char *s, size_t max)
{
	size_t n = strlen(s);
	char *out;

	if (n > max) {
		n = max;
		while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
			n--;
	}
	if ((out = malloc(n + 4)) == NULL)
		return NULL;
	memcpy(out, s, n);
	strcpy(out + n, n < strlen(s) ? "\xe2\x80\xa6" : "");
	return out;
}

json_t *
chat_slack_message(const json_t *notice, const char *link, const char *client, char *why,
                   size_t whylen)
{
	const char *id = json_string_value(json_object_get(notice, "approval_id"));
	json_t *m = notice_message(notice, link, client, false, why, whylen), *out = NULL;
	const char *text = json_string_value(json_object_get(m, "text"));
	char *shown = NULL, *fallback = NULL;

	if (m == NULL)
		return NULL;
	if (id == NULL || text == NULL) {
		snprintf(why, whylen, "the notice names no challenge");
		goto out;
	}
	shown = cut(text, CHAT_SLACK_SECTION_MAX);
	fallback = cut(text, strcspn(text, "\n"));
	if (shown == NULL || fallback == NULL)
		goto oom;
	/* Approve and Reject carry the challenge's id: the token stays in
	 * the link alone, which only Open (and the text) holds. */
	out = json_pack(
		"{s:s, s:[{s:s, s:{s:s, s:s, s:b}}, {s:s, s:s, s:[o, o, o]}]}",
		"text", fallback, "blocks",
		"type", "section", "text", "type", "mrkdwn", "text", shown, "verbatim", 1,
		"type", "actions", "block_id", id, "elements",
		button(CHAT_SLACK_APPROVE, "Approve", "primary", id, NULL),
		button(CHAT_SLACK_REJECT, "Reject", "danger", id, NULL),
		button(CHAT_SLACK_OPEN, "Open", NULL, NULL, link));
	if (out != NULL) {
		/* no previews of the links the quoted text defanged anyway */
		json_object_set_new(out, "unfurl_links", json_false());
		json_object_set_new(out, "unfurl_media", json_false());
		goto out;
	}
oom:
	snprintf(why, whylen, "out of memory");
out:
	free(shown);
	free(fallback);
	json_decref(m);
	return out;
}

/* ---- the person --------------------------------------------------------- */

/* Does the map's first column col (TEAM/USER or USER) name team/user? */
static bool
names(const char *col, size_t n, const char *team, const char *user)
{
	const char *slash = memchr(col, '/', n);
	size_t tl, ul = strlen(user);

	if (slash == NULL)
		return n == ul && memcmp(col, user, n) == 0;
	tl = (size_t)(slash - col);
	return team != NULL && strlen(team) == tl && memcmp(col, team, tl) == 0 &&
	       n - tl - 1 == ul && memcmp(slash + 1, user, ul) == 0;
}

/* The next column of line[0..n) from *at: its start and length (0: none). */
static size_t
column(const char *line, size_t n, size_t *at, const char **start)
{
	size_t i = *at, b;

	while (i < n && (line[i] == ' ' || line[i] == '\t'))
		i++;
	b = i;
	while (i < n && line[i] != ' ' && line[i] != '\t')
		i++;
	*at = i;
	*start = line + b;
	return i - b;
}

/* The groups of a map line, rest[0..n) ("a, b c,d": commas between them,
 * each trimmed), joined by sep into out; false when they do not fit. */
static bool
map_groups(const char *rest, size_t n, char sep, char *out, size_t cap)
{
	size_t i = 0, o = 0, b, e;

	while (i < n) {
		while (i < n && (rest[i] == ' ' || rest[i] == '\t'))
			i++;
		b = i;
		while (i < n && rest[i] != ',')
			i++;
		e = i++;
		while (e > b && (rest[e - 1] == ' ' || rest[e - 1] == '\t' || rest[e - 1] == '\r'))
			e--;
		if (e == b)
			continue;
		if (o + (o > 0) + (e - b) + 1 > cap || memchr(rest + b, sep, e - b) != NULL)
			return false;
		if (o > 0)
			out[o++] = sep;
		memcpy(out + o, rest + b, e - b);
		o += e - b;
	}
	out[o] = '\0';
	return true;
}

/* Does s[0..n) hold a control character (NUL included)? Tabs separate. */
static bool
has_control(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (((unsigned char)s[i] < 0x20 && s[i] != '\t' && s[i] != '\r') || s[i] == 0x7f)
			return true;
	return false;
}

/* One line of the map ("USER SUBJECT GROUP, GROUP"): true with the
 * subject and groups when it names team/user; a line with a control
 * character names nobody. */
static bool
map_line(const char *line, size_t n, const char *team, const char *user, char sep,
         char *subject, size_t subjectlen, char *groups, size_t groupslen)
{
	const char *col, *subj;
	size_t at = 0, cl, sl;

	if (has_control(line, n))
		return false;
	cl = column(line, n, &at, &col);
	if (cl == 0 || col[0] == '#' || !names(col, cl, team, user))
		return false;
	sl = column(line, n, &at, &subj);
	while (sl > 0 && subj[sl - 1] == '\r')
		sl--;
	if (sl == 0 || sl >= subjectlen)
		return false;
	if (!map_groups(line + at, n - at, sep, groups, groupslen))
		return false;
	memcpy(subject, subj, sl);
	subject[sl] = '\0';
	return true;
}

bool
chat_slack_map_find(const char *map, size_t len, const char *team, const char *user, char sep,
                    char *subject, size_t subjectlen, char *groups, size_t groupslen)
{
	const char *p = map, *end = map + len, *nl;

	if (user == NULL || user[0] == '\0' || subjectlen == 0 || groupslen == 0)
		return false;
	for (; p < end; p = nl + 1) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (nl == NULL)
			nl = end;
		if (map_line(p, (size_t)(nl - p), team, user, sep, subject, subjectlen, groups,
		             groupslen))
			return true;
	}
	subject[0] = groups[0] = '\0';
	return false;
}

/* ---- the reply ---------------------------------------------------------- */

json_t *
chat_slack_reply(enum chat_slack_reply how, const char *text)
{
	switch (how) {
	case CHAT_SLACK_REPLACE:
		return json_pack("{s:b, s:s, s:[{s:s, s:{s:s, s:s}}]}", "replace_original", 1,
		                 "text", text, "blocks", "type", "section", "text", "type",
		                 "plain_text", "text", text);
	case CHAT_SLACK_ADD:
		return json_pack("{s:b, s:s, s:s}", "replace_original", 0, "response_type",
		                 "in_channel", "text", text);
	case CHAT_SLACK_EPHEMERAL:
		return json_pack("{s:b, s:s, s:s}", "replace_original", 0, "response_type",
		                 "ephemeral", "text", text);
	}
	return NULL;
}

/*
 * payload.c — what an effect's payload must be, short of its contract:
 * errors in the output's format and a mail message's rules; see payload.h.
 */
#include <stdio.h>
#include <string.h>

#include "caps.h"
#include "payload.h"

#define PAYLOAD_PATH "/effect/payload"

bool
payload_error(json_t *errors, const char *member, const char *rule, const char *message)
{
	char path[sizeof(PAYLOAD_PATH) + OG_CONTRACT_NAME_MAX + 2];

	snprintf(path, sizeof(path), member != NULL ? PAYLOAD_PATH "/%s" : PAYLOAD_PATH,
	         member);
	return json_array_append_new(errors, json_pack("{s:s, s:s, s:s}", "path", path, "rule",
	                                               rule, "message", message)) == 0;
}

void
payload_error_text(const json_t *errors, char *out, size_t len)
{
	const json_t *e0 = json_array_get(errors, 0);

	snprintf(out, len, "%s %s", json_string_value(json_object_get(e0, "path")),
	         json_string_value(json_object_get(e0, "message")));
}

/* RFC 5322 atext, the characters of a dot-atom besides '.'. */
static bool
atext(unsigned char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       (ch != '\0' && strchr("!#$%&'*+/=?^_`{|}~-", ch) != NULL);
}

static bool
dot_atom(const char *s, size_t n, bool domain)
{
	size_t i;

	if (n == 0 || s[0] == '.' || s[n - 1] == '.')
		return false;
	for (i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch == '.') {
			if (s[i + 1] == '.')
				return false;
			continue;
		}
		if (domain ? !((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		               (ch >= '0' && ch <= '9') || ch == '-')
		           : !atext(ch))
			return false;
	}
	return true;
}

bool
payload_mail_address_ok(const char *s)
{
	const char *at = s != NULL ? strrchr(s, '@') : NULL;
	size_t n;

	if (at == NULL)
		return false;
	n = strlen(s);
	return n <= OG_MAIL_ADDRESS_MAX && at - s <= 64 && dot_atom(s, (size_t)(at - s), false) &&
	       dot_atom(at + 1, n - (size_t)(at - s) - 1, true);
}

/* One line of UTF-8 text of at most max characters: no control character
 * (CR and LF would start a header of the payload's own). */
static const char *
one_line(const json_t *v, size_t max)
{
	const unsigned char *p;
	size_t chars = 0, i, n;

	if (!json_is_string(v))
		return "must be a string";
	p = (const unsigned char *)json_string_value(v);
	n = json_string_length(v);
	for (i = 0; i < n; i++) {
		if (p[i] < 0x20 || p[i] == 0x7f)
			return "must be one line of text: no CR, LF or other control characters";
		/* C1 controls (U+0080..U+009F) are 0xC2 0x80..0x9F in UTF-8 */
		if (p[i] == 0xc2 && i + 1 < n && p[i + 1] < 0xa0)
			return "must be one line of text: no CR, LF or other control characters";
		if ((p[i] & 0xc0) != 0x80)
			chars++;
	}
	if (chars > max)
		return "is longer than a mail header can carry";
	return NULL;
}

/* "<left@right>" in ASCII: In-Reply-To and References carry it as it is. */
static bool
message_id(const char *s)
{
	size_t n = strlen(s), i;

	for (i = 0; i < n; i++)
		if ((unsigned char)s[i] >= 0x80)
			return false;
	return n >= 5 && s[0] == '<' && s[n - 1] == '>' && memchr(s, '@', n) != NULL &&
	       strcspn(s + 1, "<> ") == n - 2;
}

bool
payload_mail_check(const json_t *payload, json_t *errors)
{
	size_t before = json_array_size(errors), i;
	const json_t *to, *v;
	const char *why;

	if (!json_is_object(payload)) {
		(void)payload_error(errors, NULL, "type", "a mail payload must be an object");
		return false;
	}
	to = json_object_get(payload, "to");
	if (to == NULL) {
		(void)payload_error(errors, "to", "required", "is required but missing");
	} else if (json_is_string(to)) {
		if (!payload_mail_address_ok(json_string_value(to)))
			(void)payload_error(errors, "to", "address",
			                       "must be one plain address local@domain");
	} else if (json_is_array(to)) {
		if (json_array_size(to) == 0 || json_array_size(to) > OG_MAIL_RCPT_MAX) {
			char msg[96];

			snprintf(msg, sizeof(msg), "must list 1..%d addresses", OG_MAIL_RCPT_MAX);
			(void)payload_error(errors, "to", "recipients", msg);
		}
		json_array_foreach(to, i, v) {
			char member[32];

			if (json_is_string(v) && payload_mail_address_ok(json_string_value(v)))
				continue;
			snprintf(member, sizeof(member), "to/%zu", i);
			(void)payload_error(errors, member, "address", "must be one plain address "
			                    "local@domain");
			if (json_array_size(errors) - before >= OG_CONTRACT_ERRORS_MAX)
				break;
		}
	} else {
		(void)payload_error(errors, "to", "type",
		                       "must be an address or an array of addresses");
	}

	v = json_object_get(payload, "subject");
	if (v == NULL)
		(void)payload_error(errors, "subject", "required", "is required but missing");
	else if ((why = one_line(v, OG_MAIL_SUBJECT_MAX)) != NULL)
		(void)payload_error(errors, "subject", "header", why);

	v = json_object_get(payload, "body");
	if (v == NULL)
		(void)payload_error(errors, "body", "required", "is required but missing");
	else if (!json_is_string(v))
		(void)payload_error(errors, "body", "type", "must be a string");
	else if (strlen(json_string_value(v)) != json_string_length(v))
		(void)payload_error(errors, "body", "text", "must not contain a NUL character");
	else if (json_string_length(v) > OG_MAIL_BODY_MAX)
		(void)payload_error(errors, "body", "size", "is longer than a mail body may be");

	v = json_object_get(payload, "in_reply_to");
	if (v != NULL) {
		const char *s = json_string_value(v);

		if ((why = one_line(v, OG_MAIL_MSGID_MAX)) != NULL)
			(void)payload_error(errors, "in_reply_to", "header", why);
		else if (!message_id(s))
			(void)payload_error(errors, "in_reply_to", "header",
			                       "must be one message id \"<…@…>\"");
	}
	return json_array_size(errors) == before;
}

bool
payload_mail_ok(const json_t *payload, char *why, size_t whylen)
{
	json_t *errors = json_array();
	bool ok = errors != NULL && payload_mail_check(payload, errors);

	if (errors == NULL)
		snprintf(why, whylen, "out of memory");
	else if (!ok)
		payload_error_text(errors, why, whylen);
	json_decref(errors);
	return ok;
}

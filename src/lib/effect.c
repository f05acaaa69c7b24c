/*
 * effect.c — the payload that goes out, built and checked; see effect.h.
 */
#include <stdio.h>
#include <string.h>

#include "caps.h"
#include "effect.h"

#define PAYLOAD_PATH "/effect/payload"

/* Appends {"path", "rule", "message"}; false when out of memory. */
static bool
add_error(json_t *errors, const char *path, const char *rule, const char *message)
{
	return json_array_append_new(errors, json_pack("{s:s, s:s, s:s}", "path", path, "rule",
	                                               rule, "message", message)) == 0;
}

static bool
add_member_error(json_t *errors, const char *member, const char *rule, const char *message)
{
	char path[sizeof(PAYLOAD_PATH) + OG_CONTRACT_NAME_MAX + 2];

	snprintf(path, sizeof(path), PAYLOAD_PATH "/%s", member);
	return add_error(errors, path, rule, message);
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
effect_mail_address_ok(const char *s)
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
effect_mail_check(const json_t *payload, json_t *errors)
{
	size_t before = json_array_size(errors), i;
	const json_t *to, *v;
	const char *why;

	if (!json_is_object(payload)) {
		(void)add_error(errors, PAYLOAD_PATH, "type", "a mail payload must be an object");
		return false;
	}
	to = json_object_get(payload, "to");
	if (to == NULL) {
		(void)add_member_error(errors, "to", "required", "is required but missing");
	} else if (json_is_string(to)) {
		if (!effect_mail_address_ok(json_string_value(to)))
			(void)add_member_error(errors, "to", "address",
			                       "must be one plain address local@domain");
	} else if (json_is_array(to)) {
		if (json_array_size(to) == 0 || json_array_size(to) > OG_MAIL_RCPT_MAX) {
			char msg[96];

			snprintf(msg, sizeof(msg), "must list 1..%d addresses", OG_MAIL_RCPT_MAX);
			(void)add_member_error(errors, "to", "recipients", msg);
		}
		json_array_foreach(to, i, v) {
			char path[64];

			if (json_is_string(v) && effect_mail_address_ok(json_string_value(v)))
				continue;
			snprintf(path, sizeof(path), PAYLOAD_PATH "/to/%zu", i);
			(void)add_error(errors, path, "address", "must be one plain address "
			                "local@domain");
			if (json_array_size(errors) - before >= OG_CONTRACT_ERRORS_MAX)
				break;
		}
	} else {
		(void)add_member_error(errors, "to", "type",
		                       "must be an address or an array of addresses");
	}

	v = json_object_get(payload, "subject");
	if (v == NULL)
		(void)add_member_error(errors, "subject", "required", "is required but missing");
	else if ((why = one_line(v, OG_MAIL_SUBJECT_MAX)) != NULL)
		(void)add_member_error(errors, "subject", "header", why);

	v = json_object_get(payload, "body");
	if (v == NULL)
		(void)add_member_error(errors, "body", "required", "is required but missing");
	else if (!json_is_string(v))
		(void)add_member_error(errors, "body", "type", "must be a string");
	else if (strlen(json_string_value(v)) != json_string_length(v))
		(void)add_member_error(errors, "body", "text", "must not contain a NUL character");
	else if (json_string_length(v) > OG_MAIL_BODY_MAX)
		(void)add_member_error(errors, "body", "size", "is longer than a mail body may be");

	v = json_object_get(payload, "in_reply_to");
	if (v != NULL) {
		const char *s = json_string_value(v);

		if ((why = one_line(v, OG_MAIL_MSGID_MAX)) != NULL)
			(void)add_member_error(errors, "in_reply_to", "header", why);
		else if (!message_id(s))
			(void)add_member_error(errors, "in_reply_to", "header",
			                       "must be one message id \"<…@…>\"");
	}
	return json_array_size(errors) == before;
}

/* The from_output members of type: the contract's, or, for email.send that
 * it does not describe, the drafted subject and body. */
size_t
effect_from_output(const struct contract *c, const char *type, const char **names, size_t max)
{
	size_t n = 0, i;

	if (c != NULL && contract_effect_declared(c, type)) {
		for (i = 0; i < contract_from_output_count(c, type) && n < max; i++)
			names[n++] = contract_from_output(c, type, i);
		return n;
	}
	if (strcmp(type, "email.send") == 0 && max >= 2) {
		names[n++] = "subject";
		names[n++] = "body";
	}
	return n;
}

json_t *
effect_build(const struct contract *c, const char *type, bool mail, const json_t *payload,
             const json_t *output, enum effect_when when, json_t *errors)
{
	const char *names[OG_CONTRACT_FROM_OUTPUT_MAX];
	size_t n, i, before = json_array_size(errors);
	json_t *out = NULL, *more = NULL;

	n = type != NULL ? effect_from_output(c, type, names, OG_CONTRACT_FROM_OUTPUT_MAX) : 0;
	if (payload == NULL) {
		(void)add_error(errors, PAYLOAD_PATH, "required", "is required but missing");
		return NULL;
	}
	if (n > 0 && !json_is_object(payload)) {
		(void)add_error(errors, PAYLOAD_PATH, "type", "must be an object: the contract adds "
		                "members of the output to it");
		return NULL;
	}
	out = json_deep_copy(payload);
	if (out == NULL)
		return NULL;
	for (i = 0; i < n; i++) {
		json_t *mine = json_object_get(payload, names[i]);
		json_t *theirs = json_is_object(output) ? json_object_get(output, names[i]) : NULL;

		if (mine != NULL && when == EFFECT_AT_OUTPUT) {
			(void)add_member_error(errors, names[i], "from_output",
			                       "comes from the output (the contract says so); the "
			                       "payload must not carry it");
			continue;
		}
		if (mine != NULL) {
			if (theirs != NULL && !json_equal(mine, theirs))
				(void)add_member_error(errors, names[i], "from_output",
				                       "differs from the approved output");
			continue;
		}
		if (theirs != NULL && json_object_set(out, names[i], theirs) != 0)
			goto nomem;
	}
	/* the schema too, so that one answer names every problem */
	if (c != NULL) {
		more = contract_validate_effect(c, type, out);
		if (more == NULL || json_array_extend(errors, more) != 0)
			goto nomem;
		json_decref(more);
		more = NULL;
	}
	if (mail && json_array_size(errors) == before)
		(void)effect_mail_check(out, errors);
	if (json_array_size(errors) > before)
		goto fail;
	return out;
nomem:
	json_array_clear(errors);
fail:
	json_decref(more);
	json_decref(out);
	return NULL;
}

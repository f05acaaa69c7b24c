/*
 * check_chat_slack.c — Slack's side of a chat approval as text
 * (chat_slack.h), against Slack's published examples (tests/data/slack).
 *
 *   verify   the worked example of "Verifying requests from Slack" is
 *            signed at its own time and at the window's edges, stale one
 *            second past them; one changed byte of the body, the
 *            timestamp or the signature, or another secret, is forged;
 *            missing or malformed headers are unsigned;
 *   read     the documented block_actions payload is well formed but not
 *            ours (its button is another app's); with our button's
 *            action_id and an approval id it is a press naming the
 *            documented user, team and response_url; malformed forms,
 *            JSON, types and members are refused with a reason;
 *   message  a notice with Cyrillic, CJK, Arabic and emoji text becomes a
 *            section with the text (link first, quoted text neutralised)
 *            and Approve/Reject carrying the challenge's id, never the
 *            link's token, and Open the link; a long subject is cut
 *            below Slack's 3000 characters;
 *   map      users named with and without their team, groups joined by
 *            the site's separator, comments and unknown users;
 *   reply    the three shapes, as response_url takes them.
 */
#define _GNU_SOURCE
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chat_slack.h"
#include "suitelib.h"
#include "testlib.h"
#include "utf8.h"

#define ID    "5d0f1c2e-7a4b-4c1d-9e8f-0a1b2c3d4e5f"
#define TOKEN "Zk3xQ9vB2mN7pL4sT8wR1yU6iO0aE5dF3gH2jK9lMnB"
#define LINK  "https://gate.example.com/approve/" TOKEN

static json_t *
example(const char *name)
{
	char path[512];
	json_t *j;

	snprintf(path, sizeof(path), "%s/%s", SLACK_DATA_DIR, name);
	j = json_load_file(path, 0, NULL);
	ck_assert_msg(j != NULL, "cannot read %s", path);
	return j;
}

static const char *
str(const json_t *o, const char *name)
{
	return json_string_value(json_object_get(o, name));
}

START_TEST(test_verify_documented_example)
{
	json_t *ex = example("signing_example.json");
	const char *secret = str(ex, "signing_secret"), *ts = str(ex, "timestamp");
	const char *body = str(ex, "body"), *sig = str(ex, "signature");
	long long t = atoll(ts);
	size_t len = strlen(body);
	char *copy = strdup(body), bad_sig[80];

	ck_assert_int_eq(chat_slack_verify(secret, ts, sig, body, len, t), CHAT_SLACK_SIGNED);
	ck_assert_int_eq(chat_slack_verify(secret, ts, sig, body, len, t + 300), CHAT_SLACK_SIGNED);
	ck_assert_int_eq(chat_slack_verify(secret, ts, sig, body, len, t - 300), CHAT_SLACK_SIGNED);
	ck_assert_int_eq(chat_slack_verify(secret, ts, sig, body, len, t + 301), CHAT_SLACK_STALE);
	ck_assert_int_eq(chat_slack_verify(secret, ts, sig, body, len, t - 301), CHAT_SLACK_STALE);
	/* one byte of the body */
	copy[len / 2] ^= 1;
	ck_assert_int_eq(chat_slack_verify(secret, ts, sig, copy, len, t), CHAT_SLACK_FORGED);
	/* the body cut short */
	ck_assert_int_eq(chat_slack_verify(secret, ts, sig, body, len - 1, t), CHAT_SLACK_FORGED);
	/* another timestamp, within the window */
	ck_assert_int_eq(chat_slack_verify(secret, "1531420619", sig, body, len, t),
	                 CHAT_SLACK_FORGED);
	/* another secret */
	ck_assert_int_eq(chat_slack_verify("8f742231b10e8888abcd99yyyzzz85a6", ts, sig, body, len, t),
	                 CHAT_SLACK_FORGED);
	/* the signature with one digit changed, and in upper case */
	snprintf(bad_sig, sizeof(bad_sig), "%s", sig);
	bad_sig[10] = bad_sig[10] == '0' ? '1' : '0';
	ck_assert_int_eq(chat_slack_verify(secret, ts, bad_sig, body, len, t), CHAT_SLACK_FORGED);
	for (size_t i = 3; bad_sig[i]; i++)
		bad_sig[i] = sig[i] >= 'a' && sig[i] <= 'f' ? (char)(sig[i] - 32) : sig[i];
	ck_assert_int_eq(chat_slack_verify(secret, ts, bad_sig, body, len, t), CHAT_SLACK_FORGED);
	free(copy);
	json_decref(ex);
}
END_TEST

START_TEST(test_verify_unsigned)
{
	const char *sig = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
	const char *secret = "8f742231b10e8888abcd99yyyzzz85a5";
	long long t = 1531420618;

	ck_assert_int_eq(chat_slack_verify(secret, NULL, sig, "a", 1, t), CHAT_SLACK_UNSIGNED);
	ck_assert_int_eq(chat_slack_verify(secret, "1531420618", NULL, "a", 1, t),
	                 CHAT_SLACK_UNSIGNED);
	ck_assert_int_eq(chat_slack_verify(NULL, "1531420618", sig, "a", 1, t), CHAT_SLACK_UNSIGNED);
	ck_assert_int_eq(chat_slack_verify("", "1531420618", sig, "a", 1, t), CHAT_SLACK_UNSIGNED);
	ck_assert_int_eq(chat_slack_verify(secret, "", sig, "a", 1, t), CHAT_SLACK_UNSIGNED);
	ck_assert_int_eq(chat_slack_verify(secret, "-1531420618", sig, "a", 1, t),
	                 CHAT_SLACK_UNSIGNED);
	ck_assert_int_eq(chat_slack_verify(secret, "1531420618.5", sig, "a", 1, t),
	                 CHAT_SLACK_UNSIGNED);
	ck_assert_int_eq(chat_slack_verify(secret, "99999999999999999999", sig, "a", 1, t),
	                 CHAT_SLACK_UNSIGNED);
	ck_assert_int_eq(chat_slack_verify(secret, "1531420618", "v1=" "a2114d57b48eac39b9ad189dd"
	                                   "8316235a7b4a8d21a10bd27519666489c69b503", "a", 1, t),
	                 CHAT_SLACK_UNSIGNED);
	ck_assert_int_eq(chat_slack_verify(secret, "1531420618", "v0=abc", "a", 1, t),
	                 CHAT_SLACK_UNSIGNED);
	ck_assert_int_eq(chat_slack_verify(secret, "1531420618", "", "a", 1, t), CHAT_SLACK_UNSIGNED);
}
END_TEST

/* payload=JSON, form-encoded as Slack sends it */
static char *
form_of(const json_t *payload)
{
	char *text = json_dumps(payload, JSON_COMPACT), *out;
	size_t n = strlen(text), i, o = 0;

	out = malloc(8 + 3 * n + 1);
	o = (size_t)sprintf(out, "payload=");
	for (i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)text[i];

		if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
		    ch == '-' || ch == '_' || ch == '.' || ch == '~')
			out[o++] = (char)ch;
		else if (ch == ' ')
			out[o++] = '+';
		else
			o += (size_t)sprintf(out + o, "%%%02X", ch);
	}
	out[o] = '\0';
	free(text);
	return out;
}

static enum chat_slack_read
read_json(const json_t *payload, struct chat_slack_press *p, char *why)
{
	char *form = form_of(payload);
	enum chat_slack_read rc = chat_slack_read(form, strlen(form), p, why, 160);

	free(form);
	return rc;
}

START_TEST(test_read_documented_payload)
{
	json_t *ex = example("block_actions.json"), *a;
	struct chat_slack_press p;
	char why[160] = "";

	/* as published: another app's button */
	ck_assert_int_eq(read_json(ex, &p, why), CHAT_SLACK_OTHER);
	/* our button on the same payload */
	a = json_array_get(json_object_get(ex, "actions"), 0);
	json_object_set_new(a, "action_id", json_string(CHAT_SLACK_APPROVE));
	json_object_set_new(a, "value", json_string(ID));
	ck_assert_int_eq(read_json(ex, &p, why), CHAT_SLACK_PRESS);
	ck_assert_str_eq(p.action, CHAT_SLACK_APPROVE);
	ck_assert_str_eq(p.approval_id, ID);
	ck_assert_str_eq(p.user, "UA8RXUSPL");
	ck_assert_str_eq(p.team, "T9TK3CUKW");
	ck_assert_str_eq(p.response_url,
	                 "https://hooks.slack.com/actions/AABA1ABCD/1232321423432/D09sSasdasdAS9091209");
	json_object_set_new(a, "action_id", json_string(CHAT_SLACK_REJECT));
	ck_assert_int_eq(read_json(ex, &p, why), CHAT_SLACK_PRESS);
	ck_assert_str_eq(p.action, CHAT_SLACK_REJECT);
	/* Open is a link: nothing to do */
	json_object_set_new(a, "action_id", json_string(CHAT_SLACK_OPEN));
	ck_assert_int_eq(read_json(ex, &p, why), CHAT_SLACK_OTHER);
	json_decref(ex);
}
END_TEST

/* A member of the documented payload (with our button) changed. */
struct bad_case {
	const char *name, *path, *value; /* value: JSON text; NULL: the member removed */
};

static const struct bad_case bad_cases[] = {
	{ "value not a uuid", "action", "\"click_me_123\"" },
	{ "value a token", "action", "\"" TOKEN "\"" },
	{ "no user", "user", NULL },
	{ "user id empty", "user", "{\"id\": \"\"}" },
	{ "user id with a space", "user", "{\"id\": \"U1 2\"}" },
	{ "user id cyrillic", "user", "{\"id\": \"Пользователь\"}" },
	{ "no response_url", "response_url", NULL },
	{ "response_url not http", "response_url", "\"javascript:alert(1)\"" },
	{ "response_url a number", "response_url", "42" },
	{ "two actions", "actions", "[{\"action_id\": \"oncegate_approve\", \"value\": \"" ID "\"},"
	                            " {\"action_id\": \"oncegate_reject\", \"value\": \"" ID "\"}]" },
	{ "no actions", "actions", "[]" },
	{ "actions an object", "actions", "{}" },
	{ "team id a number", "team", "{\"id\": 7}" },
	{ "type missing", "type", NULL },
};

START_TEST(test_read_refused)
{
	const struct bad_case *bc = &bad_cases[_i];
	json_t *ex = example("block_actions.json"), *a, *v;
	struct chat_slack_press p;
	char why[160] = "";

	a = json_array_get(json_object_get(ex, "actions"), 0);
	json_object_set_new(a, "action_id", json_string(CHAT_SLACK_APPROVE));
	json_object_set_new(a, "value", json_string(ID));
	v = bc->value != NULL ? json_loads(bc->value, JSON_DECODE_ANY, NULL) : NULL;
	if (strcmp(bc->path, "action") == 0)
		json_object_set_new(a, "value", v);
	else if (v == NULL)
		json_object_del(ex, bc->path);
	else
		json_object_set_new(ex, bc->path, v);
	ck_assert_msg(read_json(ex, &p, why) == CHAT_SLACK_MALFORMED, "%s: accepted", bc->name);
	ck_assert_msg(why[0] != '\0', "%s: no reason", bc->name);
	ck_assert_str_eq(p.approval_id, "");
	json_decref(ex);
}
END_TEST

START_TEST(test_read_not_forms)
{
	static const char *const bodies[] = {
		"", "payload", "payload=", "payload=%7B", "payload=%ZZ", "payload=[]", "payload=42",
		"token=x&payload=%7B%7D&payload=%7B%7D", "other=%7B%7D", "payload=%00",
		"payload=%7B%22type%22%3A%22block_actions%22%2C%22type%22%3A%22x%22%7D",
	};
	struct chat_slack_press p;
	char why[160];
	size_t i;

	for (i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++)
		ck_assert_msg(chat_slack_read(bodies[i], strlen(bodies[i]), &p, why, sizeof(why)) ==
		                  CHAT_SLACK_MALFORMED,
		              "accepted: %s", bodies[i]);
	/* a well-formed interaction of another type (a modal) is not ours */
	{
		static const char modal[] = "payload=%7B%22type%22%3A%22view_submission%22%7D";

		ck_assert_int_eq(chat_slack_read(modal, strlen(modal), &p, why, sizeof(why)),
		                 CHAT_SLACK_OTHER);
	}
}
END_TEST

static json_t *
notice(const char *subject)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:{s:s, s:s, s:s}}", "approval_id", ID,
	                 "approver", "group:служба поддержки", "why", "new", "contract",
	                 "support_reply", "key", "tenant-a:reply:заказ-4821:v1", "requested_by",
	                 "Мария Иванова <maria.ivanova@example.com>", "expires_at",
	                 "2026-12-07T10:00:00Z", "summary", "type", "email.send", "target",
	                 "demo_smtp", "subject", subject);
}

START_TEST(test_message_multilingual)
{
	/* the request's scripts as written; quoted text inert: no mention, no
	 * live link */
	static const struct tl_verdict shown[] = {
		{ "Ваш заказ №4821", true }, { "承認", true }, { "مرحبا", true },
		{ "👨‍👩‍👧", true }, { "<@U123>", false }, { "http://evil.example", false },
	};
	size_t i;
	json_t *n = notice("Ваш заказ №4821 — 承認 — مرحبا 👨‍👩‍👧 <@U123> http://evil.example/x");
	char why[160] = "";
	json_t *m = chat_slack_message(n, LINK, "tenant-a", why, sizeof(why));
	json_t *blocks, *section, *actions, *els;
	const char *text;
	char *all;

	ck_assert_msg(m != NULL, "no message: %s", why);
	blocks = json_object_get(m, "blocks");
	ck_assert_int_eq(json_array_size(blocks), 2);
	section = json_array_get(blocks, 0);
	ck_assert_str_eq(str(section, "type"), "section");
	text = str(json_object_get(section, "text"), "text");
	/* the link first, then the request, its scripts as written */
	ck_assert_msg(strstr(text, LINK) != NULL && strstr(text, LINK) < strstr(text, "email.send"),
	              "%s", text);
	for (i = 0; i < sizeof(shown) / sizeof(shown[0]); i++)
		ck_assert_msg((strstr(text, shown[i].given) != NULL) == shown[i].ok, "\"%s\" %s: %s",
		              shown[i].given, shown[i].ok ? "missing" : "shown", text);
	ck_assert_ptr_nonnull(strstr(str(m, "text"), "Approval needed"));
	actions = json_array_get(blocks, 1);
	ck_assert_str_eq(str(actions, "type"), "actions");
	els = json_object_get(actions, "elements");
	ck_assert_int_eq(json_array_size(els), 3);
	ck_assert_str_eq(str(json_array_get(els, 0), "action_id"), CHAT_SLACK_APPROVE);
	ck_assert_str_eq(str(json_array_get(els, 0), "value"), ID);
	ck_assert_str_eq(str(json_array_get(els, 0), "style"), "primary");
	ck_assert_str_eq(str(json_array_get(els, 1), "action_id"), CHAT_SLACK_REJECT);
	ck_assert_str_eq(str(json_array_get(els, 1), "value"), ID);
	ck_assert_str_eq(str(json_array_get(els, 2), "action_id"), CHAT_SLACK_OPEN);
	ck_assert_str_eq(str(json_array_get(els, 2), "url"), LINK);
	ck_assert_ptr_null(json_object_get(json_array_get(els, 2), "value"));
	/* the token only where the link is: the text and Open */
	json_object_del(json_array_get(els, 2), "url");
	json_object_del(json_object_get(section, "text"), "text");
	all = json_dumps(m, JSON_COMPACT);
	ck_assert_msg(strstr(all, TOKEN) == NULL, "token outside the link: %s", all);
	free(all);
	json_decref(m);
	json_decref(n);
}
END_TEST

START_TEST(test_message_long_subject)
{
	char *subject = malloc(20001), why[160];
	json_t *n, *m;
	const char *text;
	size_t i;

	/* 5,000 three-byte characters */
	for (i = 0; i + 3 <= 15000; i += 3)
		memcpy(subject + i, "語", 3);
	subject[i] = '\0';
	n = notice(subject);
	m = chat_slack_message(n, LINK, NULL, why, sizeof(why));
	ck_assert_msg(m != NULL, "%s", why);
	text = str(json_object_get(json_array_get(json_object_get(m, "blocks"), 0), "text"), "text");
	ck_assert_uint_le(strlen(text), CHAT_SLACK_SECTION_MAX + 3);
	ck_assert(utf8_valid(text, strlen(text)));
	json_decref(m);
	json_decref(n);
	free(subject);
}
END_TEST

START_TEST(test_message_refused)
{
	json_t *n = notice("x"), *m;
	char why[160] = "";

	json_object_set_new(n, "to", json_pack("[s]", "a@example.com"));
	m = chat_slack_message(n, LINK, NULL, why, sizeof(why));
	ck_assert_ptr_null(m);
	ck_assert_ptr_nonnull(strstr(why, "mail"));
	json_object_del(n, "to");
	json_object_del(n, "approval_id");
	ck_assert_ptr_null(chat_slack_message(n, LINK, NULL, why, sizeof(why)));
	json_decref(n);
}
END_TEST

START_TEST(test_map)
{
	static const char map[] =
		"# Slack user        approver subject             groups\n"
		"U0ANNA              anna.kowalska@example.com\n"
		"T0ACME/U0OLGA       olga.petrova@example.com     служба поддержки,sales team\n"
		"T0OTHER/U0OLGA      someone.else@example.com\n"
		"\n"
		"   U0ZHANG\t张伟@example.com\tфинансовый контроль ,  , audit\r\n"
		"U0BROKEN\n";
	char subject[321], groups[4096];
	size_t n = strlen(map);

	ck_assert(chat_slack_map_find(map, n, "T0ACME", "U0ANNA", ',', subject, sizeof(subject),
	                              groups, sizeof(groups)));
	ck_assert_str_eq(subject, "anna.kowalska@example.com");
	ck_assert_str_eq(groups, "");
	ck_assert(chat_slack_map_find(map, n, "T0ACME", "U0OLGA", '|', subject, sizeof(subject),
	                              groups, sizeof(groups)));
	ck_assert_str_eq(subject, "olga.petrova@example.com");
	ck_assert_str_eq(groups, "служба поддержки|sales team");
	ck_assert(chat_slack_map_find(map, n, "T0OTHER", "U0OLGA", ',', subject, sizeof(subject),
	                              groups, sizeof(groups)));
	ck_assert_str_eq(subject, "someone.else@example.com");
	ck_assert(!chat_slack_map_find(map, n, "T0THIRD", "U0OLGA", ',', subject, sizeof(subject),
	                               groups, sizeof(groups)));
	ck_assert(!chat_slack_map_find(map, n, NULL, "U0OLGA", ',', subject, sizeof(subject), groups,
	                               sizeof(groups)));
	ck_assert(chat_slack_map_find(map, n, "", "U0ZHANG", ',', subject, sizeof(subject), groups,
	                              sizeof(groups)));
	ck_assert_str_eq(subject, "张伟@example.com");
	ck_assert_str_eq(groups, "финансовый контроль,audit");
	/* a group holding the site's separator is refused */
	ck_assert(!chat_slack_map_find(map, n, "T0ACME", "U0OLGA", ' ', subject, sizeof(subject),
	                               groups, sizeof(groups)));
	ck_assert(!chat_slack_map_find(map, n, "T0ACME", "U0BROKEN", ',', subject, sizeof(subject),
	                               groups, sizeof(groups)));
	ck_assert(!chat_slack_map_find(map, n, "T0ACME", "U0AN", ',', subject, sizeof(subject),
	                               groups, sizeof(groups)));
	ck_assert(!chat_slack_map_find(map, n, "T0ACME", "#", ',', subject, sizeof(subject), groups,
	                               sizeof(groups)));
	ck_assert(!chat_slack_map_find(map, n, "T0ACME", "", ',', subject, sizeof(subject), groups,
	                               sizeof(groups)));
	/* a NUL or another control character: the line names nobody */
	{
		static const char nul[] = "U0NUL \0evil@example.com\nU0BEL anna@example.com a\007b\n";

		ck_assert(!chat_slack_map_find(nul, sizeof(nul) - 1, "", "U0NUL", ',', subject,
		                               sizeof(subject), groups, sizeof(groups)));
		ck_assert(!chat_slack_map_find(nul, sizeof(nul) - 1, "", "U0BEL", ',', subject,
		                               sizeof(subject), groups, sizeof(groups)));
	}
}
END_TEST

START_TEST(test_reply_shapes)
{
	json_t *ex = example("response_url_reply.json");
	json_t *r = chat_slack_reply(CHAT_SLACK_REPLACE, "Approved by anna.kowalska@example.com");

	/* the documented reply's members, with replace_original as a boolean */
	ck_assert(json_is_true(json_object_get(r, "replace_original")));
	ck_assert_ptr_nonnull(json_object_get(ex, "replace_original"));
	ck_assert_str_eq(str(r, "text"), "Approved by anna.kowalska@example.com");
	json_decref(r);
	r = chat_slack_reply(CHAT_SLACK_EPHEMERAL, "not linked");
	ck_assert_str_eq(str(r, "response_type"), "ephemeral");
	ck_assert(json_is_false(json_object_get(r, "replace_original")));
	json_decref(r);
	r = chat_slack_reply(CHAT_SLACK_ADD, "1 of 2");
	ck_assert_str_eq(str(r, "response_type"), "in_channel");
	json_decref(r);
	json_decref(ex);
}
END_TEST

TL_SUITE(chat_slack_suite, "chat_slack",
         {"chat_slack", 30,
          .loops = TL_LOOPS({test_read_refused, (int)(sizeof(bad_cases) / sizeof(bad_cases[0]))}),
          .tests = TL_LIST(test_verify_documented_example, test_verify_unsigned,
                           test_read_documented_payload, test_read_not_forms,
                           test_message_multilingual, test_message_long_subject,
                           test_message_refused, test_map, test_reply_shapes)})

TL_SUITE_MAIN(chat_slack_suite, false)

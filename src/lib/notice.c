/*
 * notice.c — the message a stored approval notice becomes with its link
 * (notice_message); see notice.h.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "neutralise.h"
#include "notice.h"

/* An effect type or target: a name the contract and the configuration
 * admit ([a-z0-9_.-], "email.send") as it is; anything else neutralised. */
static int
put_name(struct buf *b, const char *s, enum neutralise_to to)
{
	size_t n = strlen(s);

	if (n > 0 && n <= 64 && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_.-") == n)
		return buf_puts(b, s);
	return neutralise_line(b, s, 64, to);
}

/* "email.send to demo_smtp: “subject”" (cut at max characters of the
 * subject), the subject (the model's) neutralised. */
static int
put_what(struct buf *b, const json_t *summary, size_t max, enum neutralise_to to)
{
	const char *type = json_string_value(json_object_get(summary, "type"));
	const char *target = json_string_value(json_object_get(summary, "target"));
	const char *subject = json_string_value(json_object_get(summary, "subject"));

	if (put_name(b, type != NULL ? type : "an effect", to) != 0 || buf_puts(b, " to ") != 0 ||
	    put_name(b, target != NULL ? target : "?", to) != 0)
		return -1;
	if (subject == NULL)
		return 0;
	return buf_puts(b, ": \xe2\x80\x9c") != 0 || neutralise_line(b, subject, max, to) != 0 ||
	               buf_puts(b, "\xe2\x80\x9d") != 0
	           ? -1
	           : 0;
}

/* "“ticket subject” from customer — ": what the action answers, from the
 * run's context, before what it does; nothing without a context subject.
 * Each text neutralised and cut at max characters. */
static int
put_about(struct buf *b, const json_t *summary, size_t max, enum neutralise_to to)
{
	const char *about = json_string_value(json_object_get(summary, "context_subject"));
	const char *who = json_string_value(json_object_get(summary, "context_customer"));

	if (about == NULL || about[0] == '\0')
		return 0;
	if (buf_puts(b, "\xe2\x80\x9c") != 0 || neutralise_line(b, about, max, to) != 0 ||
	    buf_puts(b, "\xe2\x80\x9d") != 0)
		return -1;
	if (who != NULL && who[0] != '\0' &&
	    (buf_puts(b, " from ") != 0 || neutralise_line(b, who, max, to) != 0))
		return -1;
	return buf_puts(b, " \xe2\x80\x94 ");
}

/* Summary members that are free text (the rest are names). */
static bool
summary_text(const char *name)
{
	return strcmp(name, "subject") == 0 || strcmp(name, "context_subject") == 0 ||
	       strcmp(name, "context_customer") == 0;
}

/* The chat body's summary: the card's, each text neutralised. */
static json_t *
chat_summary(const json_t *summary)
{
	json_t *out = json_object(), *v;
	const char *name;
	struct buf t;
	int bad = 0;

	if (out == NULL)
		return NULL;
	buf_init(&t, 16384);
	json_object_foreach((json_t *)(uintptr_t)summary, name, v) {
		if (!json_is_string(v))
			continue;
		buf_reset(&t);
		bad |= (summary_text(name)
		            ? neutralise_line(&t, json_string_value(v), 1000, NEUTRALISE_CHAT)
		            : put_name(&t, json_string_value(v), NEUTRALISE_CHAT)) != 0 ||
		       json_object_set_new(out, name, json_string(t.data != NULL ? t.data : "")) != 0;
	}
	buf_free(&t);
	if (bad) {
		json_decref(out);
		return NULL;
	}
	return out;
}

/* The body's lines of what the action answers, from the run's context:
 * "Answers:" (its subject) and "Customer:", each when known. */
static int
put_context(struct buf *b, const json_t *summary, enum neutralise_to to)
{
	const char *about = json_string_value(json_object_get(summary, "context_subject"));
	const char *who = json_string_value(json_object_get(summary, "context_customer"));
	int bad = 0;

	if (about != NULL && about[0] != '\0')
		bad |= buf_puts(b, "Answers:    ") != 0 || neutralise_line(b, about, 1000, to) != 0 ||
		       buf_puts(b, "\n") != 0;
	if (who != NULL && who[0] != '\0')
		bad |= buf_puts(b, "Customer:   ") != 0 || neutralise_line(b, who, 1000, to) != 0 ||
		       buf_puts(b, "\n") != 0;
	return bad ? -1 : 0;
}

static const char *
lead_of(const char *why)
{
	if (why != NULL && strcmp(why, "reminder") == 0)
		return "Reminder: approval needed";
	if (why != NULL && strcmp(why, "escalation") == 0)
		return "Escalated to you: approval needed";
	return "Approval needed";
}

void
notice_strings(const json_t *o, ...)
{
	const char *name, **out;
	va_list ap;

	va_start(ap, o);
	while ((name = va_arg(ap, const char *)) != NULL) {
		out = va_arg(ap, const char **);
		*out = json_string_value(json_object_get(o, name));
	}
	va_end(ap);
}

json_t *
notice_message(const json_t *notice, const char *link, const char *client, bool mail,
               char *why, size_t whylen)
{
	const json_t *to = json_object_get(notice, "to"), *summary = json_object_get(notice, "summary");
	const char *reason, *approver, *asked, *expires, *contract, *key;
	enum neutralise_to how = mail ? NEUTRALISE_MAIL : NEUTRALISE_CHAT;
	struct buf subject, body;
	json_t *out = NULL, *shown = NULL;
	int bad = 0;

	notice_strings(notice, "why", &reason, "approver", &approver, "requested_by", &asked,
	               "expires_at", &expires, "contract", &contract, "key", &key, NULL);
	if (!json_is_object(summary) || link == NULL || approver == NULL || key == NULL) {
		snprintf(why, whylen, "the notice lacks its summary, approver or run key");
		return NULL;
	}
	if (mail && !json_is_array(to)) {
		snprintf(why, whylen, "a mail target needs the notify entry's \"to\" addresses");
		return NULL;
	}
	if (!mail && to != NULL) {
		snprintf(why, whylen, "\"to\" addresses need a mail target, not a webhook");
		return NULL;
	}
	buf_init(&subject, 4096);
	buf_init(&body, 65536);
	/* The link first, alone on its line, before any quoted text: whatever
	 * the model wrote comes after it, neutralised (neutralise.h). */
	bad |= buf_puts(&subject, lead_of(reason)) != 0 || buf_puts(&subject, ": ") != 0 ||
	       put_about(&subject, summary, NOTICE_SUBJECT_QUOTE_MAX, NEUTRALISE_MAIL) != 0 ||
	       put_what(&subject, summary, NOTICE_SUBJECT_QUOTE_MAX, NEUTRALISE_MAIL) != 0;
	bad |= buf_puts(&body, lead_of(reason)) != 0 || buf_puts(&body, ".\n\n") != 0 ||
	       buf_puts(&body, "Read the request and decide here (sign-in required):\n") != 0 ||
	       buf_puts(&body, link) != 0 || buf_puts(&body, "\n\n") != 0;
	bad |= buf_puts(&body, "What:       ") != 0 || put_what(&body, summary, 1000, how) != 0 ||
	       buf_puts(&body, "\n") != 0;
	bad |= put_context(&body, summary, how) != 0;
	bad |= buf_puts(&body, "Asked by:   ") != 0 ||
	       neutralise_line(&body, asked != NULL ? asked : "the workflow", 256, how) != 0;
	if (client != NULL && client[0] != '\0')
		bad |= buf_puts(&body, " (API client ") != 0 ||
		       neutralise_line(&body, client, 72, how) != 0 || buf_puts(&body, ")") != 0;
	bad |= buf_puts(&body, "\nRun:        ") != 0 || neutralise_line(&body, key, 256, how) != 0;
	if (contract != NULL)
		bad |= buf_puts(&body, " (contract ") != 0 ||
		       neutralise_line(&body, contract, 64, how) != 0 || buf_puts(&body, ")") != 0;
	bad |= buf_puts(&body, "\nFor:        ") != 0 ||
	       neutralise_line(&body, approver, 256, how) != 0;
	bad |= buf_puts(&body, "\nExpires:    ") != 0 ||
	       neutralise_line(&body, expires != NULL ? expires : "?", 64, how) != 0;
	if (reason != NULL && strcmp(reason, "reminder") == 0)
		bad |= buf_puts(&body, "\n\nThe request still waits for a decision. This reminder "
		                       "carries a new link; the link of the earlier message no "
		                       "longer works.") != 0;
	else if (reason != NULL && strcmp(reason, "escalation") == 0)
		bad |= buf_puts(&body, "\n\nThe request was not decided in time, so it now comes to "
		                       "you as well.") != 0;
	else if (reason != NULL && strcmp(reason, "resend") == 0)
		bad |= buf_puts(&body, "\n\nThis message was sent again with a new link; the link "
		                       "of the earlier message no longer works.") != 0;
	bad |= buf_puts(&body, "\n\nOnly the link at the top is oncegate's: links and markup in "
	                       "the quoted request are shown inert (hxxps[:]//, [.]). Opening the "
	                       "link changes nothing; only the buttons on the page decide. "
	                       "Approving sends the effect once. The link is for you alone: do "
	                       "not forward it.\n") != 0;
	if (bad || subject.overflow || body.overflow) {
		snprintf(why, whylen, "the message could not be made");
		goto out;
	}
	if (mail)
		out = json_pack("{s:O, s:s, s:s}", "to", to, "subject", subject.data, "body",
		                body.data);
	else
		out = (shown = chat_summary(summary)) == NULL
		          ? NULL
		          : json_pack("{s:s, s:O, s:s}", "text", body.data, "summary", shown, "link",
		                      link);
	if (out == NULL)
		snprintf(why, whylen, "out of memory");
out:
	json_decref(shown);
	buf_free(&subject);
	buf_free(&body);
	return out;
}

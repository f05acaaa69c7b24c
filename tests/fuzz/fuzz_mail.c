/*
 * fuzz_mail.c — the message an SMTP effect becomes (src/lib/effect.c builds
 * the payload that goes out from the effect payload and the run's approved
 * output, src/lib/provider_smtp.c provider_smtp_message the message): both are
 * fuzzed input, as they come from a workflow and a model.
 *
 * Input: NUL-separated fields: the payload (JSON text), the run's output
 * (JSON text), the provider key.
 *
 * Properties: a payload the builder refuses makes no message either; a
 * message is made only with 1..OG_MAIL_RCPT_MAX recipients, and then every
 * recipient is a plain address; the header block is CRLF lines of at most
 * 998 characters with exactly one Message-ID, From, To and Subject each
 * (folded lines start with a space) and nothing a payload could inject (no
 * bare CR or LF, no header the builder did not write);
 * the body is base64 lines only; the Message-ID depends on the provider
 * key alone, so every attempt of an effect is the same message.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "provider.h"
#include "caps.h"
#include "config.h"
#include "effect.h"
#include "fuzzlib.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const headers[] = {
	"Message-ID: ", "Date: ", "From: ", "To: ", "Subject: ", "In-Reply-To: ",
	"References: ", "MIME-Version: ", "Content-Type: ", "Content-Transfer-Encoding: ",
	"Auto-Submitted: ",
};

static int
header_index(const char *line)
{
	size_t i;

	for (i = 0; i < sizeof(headers) / sizeof(headers[0]); i++)
		if (strncmp(line, headers[i], strlen(headers[i])) == 0)
			return (int)i;
	return -1;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzzlib_in in = { data, size };
	char *payload = fuzzlib_field(&in), *output = fuzzlib_field(&in);
	char *pkey = fuzzlib_field(&in);
	struct config_target t;
	struct provider_effect e = { "00000000-0000-4000-8000-000000000000", "email.send", pkey,
		                    NULL };
	json_t *rcpt = NULL, *v, *pj, *oj, *errors = json_array(), *sent;
	char why[160], mid[300], *msg = NULL, *p, *end, *text = NULL;
	int seen[sizeof(headers) / sizeof(headers[0])] = { 0 };
	size_t i;
	bool in_body = false;

	memset(&t, 0, sizeof(t));
	t.mail_from = (char *)(uintptr_t)"oncegate@example.com";
	pj = json_loads(payload, JSON_DECODE_ANY, NULL);
	oj = output[0] ? json_loads(output, JSON_DECODE_ANY, NULL) : NULL;
	sent = effect_build(NULL, "email.send", true, pj, oj, EFFECT_AT_SEND, errors);
	json_decref(pj);
	json_decref(oj);
	if (sent == NULL) {
		/* and the provider alone refuses a payload that is no mail */
		e.payload = payload;
		msg = provider_smtp_message(&t, &e, &rcpt, why, sizeof(why));
		FUZZ_ASSERT(msg != NULL || (rcpt == NULL && why[0] != '\0'));
		free(msg);
		msg = NULL;
		goto out;
	}
	text = json_dumps(sent, JSON_COMPACT);
	json_decref(sent);
	FUZZ_ASSERT(text != NULL);
	e.payload = text;
	msg = provider_smtp_message(&t, &e, &rcpt, why, sizeof(why));
	FUZZ_ASSERT(msg != NULL);
	FUZZ_ASSERT(json_array_size(rcpt) >= 1 && json_array_size(rcpt) <= OG_MAIL_RCPT_MAX);
	json_array_foreach(rcpt, i, v) {
		const char *a = json_string_value(v);

		FUZZ_ASSERT(a != NULL && strchr(a, '@') != NULL);
		FUZZ_ASSERT(strpbrk(a, "\r\n<>,; ") == NULL);
	}
	for (p = msg; *p != '\0'; p = end + 2) {
		end = strstr(p, "\r\n");
		FUZZ_ASSERT(end != NULL);           /* every line ends in CRLF */
		FUZZ_ASSERT(memchr(p, '\n', (size_t)(end - p)) == NULL);
		FUZZ_ASSERT(memchr(p, '\r', (size_t)(end - p)) == NULL);
		FUZZ_ASSERT(end - p <= 998);
		if (!in_body && end == p) {
			in_body = true;
			continue;
		}
		if (!in_body && *p == ' ') {
			FUZZ_ASSERT(p != msg);      /* a folded line continues a header */
		} else if (!in_body) {
			int h = header_index(p);

			FUZZ_ASSERT(h >= 0);
			seen[h]++;
		} else {
			for (; p < end; p++)
				FUZZ_ASSERT(isalnum((unsigned char)*p) || *p == '+' || *p == '/' ||
				            *p == '=');
		}
	}
	FUZZ_ASSERT(in_body);
	FUZZ_ASSERT(seen[0] == 1 && seen[2] == 1 && seen[3] == 1 && seen[4] == 1);
	provider_smtp_message_id(pkey, t.mail_from, mid, sizeof(mid));
	FUZZ_ASSERT(strncmp(msg + 12, mid, strlen(mid)) == 0);
	free(msg);
out:
	free(text);
	json_decref(errors);
	json_decref(rcpt);
	free(payload);
	free(output);
	free(pkey);
	return 0;
}

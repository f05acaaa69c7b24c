/*
 * fuzz_slack.c — a Slack interaction request as the responder reads it
 * (src/lib/chat_slack.c): chat_slack_read on arbitrary form bodies,
 * chat_slack_verify on the same bytes with a fixed secret, and the user
 * map read from them.
 *
 * Properties, beyond "no crash, no leak": a press names one of our two
 * buttons, an approval id of 36 characters in the uuid's shape, a user id
 * of printable ASCII and an http(s) response_url within its cap; anything
 * else leaves the press empty and, when malformed, says why. A body signed
 * with a signature derived from nothing but the input is never accepted.
 * A user the map names yields a subject of 1..320 bytes without blanks.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_slack.h"
#include "fuzzlib.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_press(const struct chat_slack_press *p)
{
	size_t i;

	FUZZ_ASSERT(strcmp(p->action, CHAT_SLACK_APPROVE) == 0 ||
	            strcmp(p->action, CHAT_SLACK_REJECT) == 0);
	FUZZ_ASSERT(strlen(p->approval_id) == 36 && p->approval_id[8] == '-');
	FUZZ_ASSERT(p->user[0] != '\0');
	for (i = 0; p->user[i] != '\0'; i++)
		FUZZ_ASSERT(p->user[i] > ' ' && p->user[i] <= '~');
	FUZZ_ASSERT(strncmp(p->response_url, "http://", 7) == 0 ||
	            strncmp(p->response_url, "https://", 8) == 0);
	FUZZ_ASSERT(strlen(p->response_url) <= CHAT_SLACK_URL_MAX);
}

static void
check_map(const char *text, size_t size)
{
	char subject[321], groups[512];

	if (chat_slack_map_find(text, size, "T0", "U0", ',', subject, sizeof(subject), groups,
	                        sizeof(groups))) {
		FUZZ_ASSERT(subject[0] != '\0' && strlen(subject) <= 320);
		FUZZ_ASSERT(strpbrk(subject, " \t\n") == NULL);
		FUZZ_ASSERT(strlen(groups) < sizeof(groups));
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct chat_slack_press p;
	char why[160] = "", *text = malloc(size + 1);
	enum chat_slack_read rc;

	if (text == NULL)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	rc = chat_slack_read(text, size, &p, why, sizeof(why));
	if (rc == CHAT_SLACK_PRESS)
		check_press(&p);
	else
		FUZZ_ASSERT(p.approval_id[0] == '\0' && p.action[0] == '\0');
	if (rc == CHAT_SLACK_MALFORMED)
		FUZZ_ASSERT(why[0] != '\0');
	/* the first 67 bytes as a signature of the rest: never the secret's */
	if (size > 80) {
		char sig[68];

		memcpy(sig, "v0=", 3);
		memcpy(sig + 3, text, 64);
		sig[67] = '\0';
		FUZZ_ASSERT(chat_slack_verify("8f742231b10e8888abcd99yyyzzz85a5", "1531420618", sig,
		                              text + 64, size - 64, 1531420618) != CHAT_SLACK_SIGNED);
	}
	check_map(text, size);
	free(text);
	return 0;
}

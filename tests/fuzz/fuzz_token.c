/*
 * fuzz_token.c — the shapes of approval tokens and CSRF tokens:
 * token_shape_valid, token_hash (src/lib/token.c), csrf_issue and
 * csrf_verify (src/lib/csrf.c) with input-derived values.
 *
 * Input: NUL-separated fields secret, approval id, subject, given token;
 * the whole input is also checked as a token.
 *
 * Properties: a valid token shape is exactly 43 base64url characters; an
 * issued CSRF token has a token's shape and verifies, and stops verifying
 * when one character, the approval or the subject changes; nothing
 * verifies when csrf_issue gives "" (short secret, empty id or subject).
 */
#define _GNU_SOURCE /* asprintf */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "csrf.h"
#include "token.h"
#include "fuzzlib.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_shape(const char *s)
{
	unsigned char h1[TOKEN_HASH_LEN], h2[TOKEN_HASH_LEN];

	if (token_shape_valid(s))
		FUZZ_ASSERT(strlen(s) == TOKEN_TEXT_LEN &&
		            strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		                      "0123456789-_") == TOKEN_TEXT_LEN);
	token_hash(s, h1);
	token_hash(s, h2);
	FUZZ_ASSERT(memcmp(h1, h2, sizeof(h1)) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzzlib_in in = { data, size };
	char *secret = fuzzlib_field(&in), *id = fuzzlib_field(&in);
	char *subject = fuzzlib_field(&in), *given = fuzzlib_field(&in);
	const unsigned char *sec = (const unsigned char *)secret;
	size_t slen = strlen(secret);
	char *raw = strndup((const char *)data, size), *other;
	char tok[CSRF_TEXT_LEN + 1], tok2[CSRF_TEXT_LEN + 1];
	bool issued;

	if (raw == NULL)
		abort();
	check_shape(raw);
	check_shape(given);
	FUZZ_ASSERT(!token_shape_valid(NULL));

	csrf_issue(sec, slen, id, subject, tok);
	issued = tok[0] != '\0';
	FUZZ_ASSERT(issued == (slen >= CSRF_SECRET_MIN && id[0] != '\0' && subject[0] != '\0'));
	if (issued) {
		FUZZ_ASSERT(strlen(tok) == CSRF_TEXT_LEN && token_shape_valid(tok));
		FUZZ_ASSERT(csrf_verify(sec, slen, id, subject, tok));
		csrf_issue(sec, slen, id, subject, tok2);
		FUZZ_ASSERT(strcmp(tok, tok2) == 0);
		/* one character off */
		memcpy(tok2, tok, sizeof(tok));
		tok2[size % CSRF_TEXT_LEN] = tok2[size % CSRF_TEXT_LEN] == 'A' ? 'B' : 'A';
		FUZZ_ASSERT(!csrf_verify(sec, slen, id, subject, tok2));
		/* another approval, another person */
		if (asprintf(&other, "%sx", id) < 0)
			abort();
		FUZZ_ASSERT(!csrf_verify(sec, slen, other, subject, tok));
		free(other);
		if (asprintf(&other, "%sx", subject) < 0)
			abort();
		FUZZ_ASSERT(!csrf_verify(sec, slen, id, other, tok));
		free(other);
		/* the fields are length-prefixed: swapping them is another token */
		if (strcmp(id, subject) != 0)
			FUZZ_ASSERT(!csrf_verify(sec, slen, subject, id, tok));
		/* the token given: only the issued one verifies */
		FUZZ_ASSERT(csrf_verify(sec, slen, id, subject, given) == (strcmp(given, tok) == 0));
	} else {
		FUZZ_ASSERT(!csrf_verify(sec, slen, id, subject, given));
		FUZZ_ASSERT(!csrf_verify(sec, slen, id, subject, tok));
	}
	FUZZ_ASSERT(!csrf_verify(sec, slen, id, subject, NULL));

	free(raw);
	free(secret);
	free(id);
	free(subject);
	free(given);
	return 0;
}

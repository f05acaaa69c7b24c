/*
 * token.c — approval tokens. The randomness, base64url, hashing and wiping
 * are digest.c's; this file only fixes the shape.
 */
#include <string.h>

#include "digest.h"
#include "token.h"

_Static_assert(TOKEN_TEXT_LEN == (TOKEN_BYTES * 4 + 2) / 3,
               "TOKEN_TEXT_LEN is base64url of TOKEN_BYTES without padding");
_Static_assert(TOKEN_HASH_LEN == DIGEST_SHA256_LEN, "token hash is SHA-256");

/* digest_base64url asks for 4*ceil(len/3)+1 bytes, one more than we keep. */
#define TOKEN_B64_BUF (4 * ((TOKEN_BYTES + 2) / 3) + 1)

int
token_new(char out[TOKEN_TEXT_LEN + 1], unsigned char hash[TOKEN_HASH_LEN])
{
	unsigned char raw[TOKEN_BYTES];
	char text[TOKEN_B64_BUF];
	int rc = -1;

	out[0] = '\0';
	memset(hash, 0, TOKEN_HASH_LEN);
	if (digest_random(raw, sizeof(raw)) != 0)
		goto out;
	digest_base64url(raw, sizeof(raw), text);
	memcpy(out, text, TOKEN_TEXT_LEN);
	out[TOKEN_TEXT_LEN] = '\0';
	/* the text, not the bytes, is hashed: the link carries the text and a
	 * lookup hashes what it was given without decoding it */
	digest_sha256(out, TOKEN_TEXT_LEN, hash);
	rc = 0;
out:
	digest_wipe(raw, sizeof(raw));
	digest_wipe(text, sizeof(text));
	return rc;
}

static bool
token_b64_char(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* 32 bytes = 256 bits in 43 six-bit characters: the last character holds
 * the last 4 bits and two zero bits, so it is one of 16 characters. */
static bool
token_last_char_ok(unsigned char c)
{
	static const char last[] = "AEIMQUYcgkosw048";

	return c != '\0' && strchr(last, c) != NULL;
}

bool
token_shape_valid(const char *s)
{
	size_t i;

	if (s == NULL)
		return false;
	for (i = 0; i < TOKEN_TEXT_LEN; i++)
		if (!token_b64_char((unsigned char)s[i]))
			return false; /* also stops at a NUL: the string is short */
	return s[TOKEN_TEXT_LEN] == '\0' &&
	       token_last_char_ok((unsigned char)s[TOKEN_TEXT_LEN - 1]);
}

void
token_hash(const char *text, unsigned char hash[TOKEN_HASH_LEN])
{
	if (text == NULL)
		text = "";
	digest_sha256(text, strlen(text), hash);
}

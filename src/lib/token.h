/*
 * token.h — approval tokens: 256 bits from the CSPRNG, sent as
 * base64url text inside the approval link. Only the SHA-256 of that text is
 * ever stored, so a database dump cannot be turned back into links.
 */
#ifndef OG_TOKEN_H
#define OG_TOKEN_H

#include <stdbool.h>

#define TOKEN_BYTES    32
#define TOKEN_TEXT_LEN 43   /* base64url of 32 bytes, no padding */
#define TOKEN_HASH_LEN 32   /* SHA-256 */

/* A fresh token: TOKEN_BYTES from RAND_bytes as base64url text (out,
 * NUL-terminated) and the SHA-256 of that TEXT (hash), the only thing ever
 * stored. -1 if the CSPRNG fails (out is then "" and hash zeroed). The raw
 * bytes are wiped before returning. */
int token_new(char out[TOKEN_TEXT_LEN + 1], unsigned char hash[TOKEN_HASH_LEN])
	__attribute__((warn_unused_result));

/* true when s has the exact shape of a token as token_new writes it:
 * TOKEN_TEXT_LEN characters of [A-Za-z0-9_-], the last one carrying no
 * stray low bits. Lets a handler answer "unknown" without a query. */
bool token_shape_valid(const char *s);

/* SHA-256 of the token text (NULL hashes as ""). */
void token_hash(const char *text, unsigned char hash[TOKEN_HASH_LEN]);

#endif

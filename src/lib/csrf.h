/*
 * csrf.h — CSRF tokens for the approval form, bound to one
 * approval and one SSO subject: HMAC-SHA256 with a server secret over a
 * length-prefixed ("oncegate-csrf-v1", approval id, subject), as base64url.
 * Nothing is stored; a token from another approval or another person's
 * page never verifies.
 */
#ifndef OG_CSRF_H
#define OG_CSRF_H

#include <stdbool.h>
#include <stddef.h>

#define CSRF_TEXT_LEN   43  /* base64url of 32 bytes, no padding */
#define CSRF_SECRET_MIN 32  /* bytes; a shorter secret is refused */

/* out gets the token, NUL-terminated. It gets "" (which never verifies)
 * when the secret is NULL or shorter than CSRF_SECRET_MIN, approval_id or
 * subject is NULL or empty, or OpenSSL fails. */
void csrf_issue(const unsigned char *secret, size_t secret_len,
                const char *approval_id, const char *subject,
                char out[CSRF_TEXT_LEN + 1]);

/* true when given is exactly the token csrf_issue makes for these inputs.
 * Compared in constant time (CRYPTO_memcmp); false for NULL or wrong
 * length, and whenever csrf_issue would give "". */
bool csrf_verify(const unsigned char *secret, size_t secret_len,
                 const char *approval_id, const char *subject,
                 const char *given);

#endif

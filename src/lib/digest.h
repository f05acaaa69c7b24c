/*
 * digest.h — hashing, randomness and constant-time comparison (OpenSSL).
 */
#ifndef OG_DIGEST_H
#define OG_DIGEST_H

#include <stdbool.h>
#include <stddef.h>

#define DIGEST_SHA256_LEN 32
#define DIGEST_HEX_LEN    (DIGEST_SHA256_LEN * 2 + 1)

void digest_sha256(const void *data, size_t len, unsigned char out[DIGEST_SHA256_LEN]);
void digest_sha256_hex(const void *data, size_t len, char out[DIGEST_HEX_LEN]);
void digest_hex(const unsigned char *in, size_t len, char *out);
/* Fills out with len bytes from the CSPRNG; -1 if it is not seeded. */
int digest_random(unsigned char *out, size_t len) __attribute__((warn_unused_result));
/* base64url without padding; out must hold 4*ceil(len/3)+1 bytes. */
void digest_base64url(const unsigned char *in, size_t len, char *out);
bool digest_equal(const void *a, const void *b, size_t len);
void digest_wipe(void *p, size_t len);

#endif

/*
 * digest.c — SHA-256, CSPRNG bytes, base64url and constant-time compare,
 * all through OpenSSL.
 */
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <string.h>

#include "digest.h"

/* SHA-256 is looked up in OpenSSL's provider tables once per process:
 * EVP_sha256() would repeat that look-up on every digest, which cost more
 * than hashing an API key or a payload of a few hundred bytes. The fetched
 * method is shared by all threads and kept for the life of the process. */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void
sha256_fetch(void)
{
	sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

void
digest_sha256(const void *data, size_t len, unsigned char out[DIGEST_SHA256_LEN])
{
	unsigned int n = 0;

	(void)pthread_once(&sha256_once, sha256_fetch);
	/* EVP_Digest only fails on allocation failure inside OpenSSL; a zeroed
	 * digest then never matches a stored one. */
	if (EVP_Digest(data, len, out, &n, sha256_md != NULL ? sha256_md : EVP_sha256(),
	               NULL) != 1)
		memset(out, 0, DIGEST_SHA256_LEN);
}

void
digest_hex(const unsigned char *in, size_t len, char *out)
{
	static const char hex[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < len; i++) {
		out[2 * i] = hex[in[i] >> 4];
		out[2 * i + 1] = hex[in[i] & 0xf];
	}
	out[2 * len] = '\0';
}

void
digest_sha256_hex(const void *data, size_t len, char out[DIGEST_HEX_LEN])
{
	unsigned char md[DIGEST_SHA256_LEN];

	digest_sha256(data, len, md);
	digest_hex(md, sizeof(md), out);
}

int
digest_random(unsigned char *out, size_t len)
{
	if (len > 0x7fffffff || RAND_bytes(out, (int)len) != 1)
		return -1;
	return 0;
}

void
digest_base64url(const unsigned char *in, size_t len, char *out)
{
	static const char tab[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	size_t i, o = 0;

	for (i = 0; i + 2 < len; i += 3) {
		unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8 | in[i + 2];
		out[o++] = tab[v >> 18 & 63];
		out[o++] = tab[v >> 12 & 63];
		out[o++] = tab[v >> 6 & 63];
		out[o++] = tab[v & 63];
	}
	if (len - i == 1) {
		unsigned v = (unsigned)in[i] << 16;
		out[o++] = tab[v >> 18 & 63];
		out[o++] = tab[v >> 12 & 63];
	} else if (len - i == 2) {
		unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8;
		out[o++] = tab[v >> 18 & 63];
		out[o++] = tab[v >> 12 & 63];
		out[o++] = tab[v >> 6 & 63];
	}
	out[o] = '\0';
}

bool
digest_equal(const void *a, const void *b, size_t len)
{
	return CRYPTO_memcmp(a, b, len) == 0;
}

void
digest_wipe(void *p, size_t len)
{
	OPENSSL_cleanse(p, len);
}

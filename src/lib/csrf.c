/*
 * csrf.c — HMAC-SHA256 CSRF tokens bound to (approval, subject).
 *
 * The MAC input is each of the domain string, the approval id and the
 * subject as an 8-byte big-endian length followed by the bytes. Lengths
 * make the encoding injective, so ("ab","c") and ("a","bc") differ; the
 * domain string keeps this MAC apart from anything else the secret might
 * ever sign. Changing the encoding means a new domain string (v2).
 */
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdint.h>
#include <string.h>

#include "csrf.h"
#include "digest.h"

#define CSRF_DOMAIN  "oncegate-csrf-v1"
#define CSRF_MAC_LEN 32
/* digest_base64url asks for 4*ceil(len/3)+1 bytes */
#define CSRF_B64_BUF (4 * ((CSRF_MAC_LEN + 2) / 3) + 1)

_Static_assert(CSRF_TEXT_LEN == (CSRF_MAC_LEN * 4 + 2) / 3,
               "CSRF_TEXT_LEN is base64url of the MAC without padding");

static int
csrf_field(EVP_MAC_CTX *ctx, const char *s)
{
	size_t len = strlen(s);
	unsigned char prefix[8];
	int i;

	for (i = 7; i >= 0; i--) {
		prefix[i] = (unsigned char)(len & 0xff);
		len >>= 8;
	}
	if (EVP_MAC_update(ctx, prefix, sizeof(prefix)) != 1 ||
	    EVP_MAC_update(ctx, (const unsigned char *)s, strlen(s)) != 1)
		return -1;
	return 0;
}

static int
csrf_mac(const unsigned char *secret, size_t secret_len,
         const char *approval_id, const char *subject,
         unsigned char mac[CSRF_MAC_LEN])
{
	static char digest_name[] = "SHA256";
	EVP_MAC *alg = NULL;
	EVP_MAC_CTX *ctx = NULL;
	OSSL_PARAM params[2];
	size_t n = 0;
	int rc = -1;

	if (secret == NULL || secret_len < CSRF_SECRET_MIN ||
	    approval_id == NULL || approval_id[0] == '\0' ||
	    subject == NULL || subject[0] == '\0')
		goto out;
	if ((alg = EVP_MAC_fetch(NULL, "HMAC", NULL)) == NULL ||
	    (ctx = EVP_MAC_CTX_new(alg)) == NULL)
		goto out;
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
	                                             digest_name, 0);
	params[1] = OSSL_PARAM_construct_end();
	if (EVP_MAC_init(ctx, secret, secret_len, params) != 1 ||
	    csrf_field(ctx, CSRF_DOMAIN) != 0 ||
	    csrf_field(ctx, approval_id) != 0 ||
	    csrf_field(ctx, subject) != 0 ||
	    EVP_MAC_final(ctx, mac, &n, CSRF_MAC_LEN) != 1 ||
	    n != CSRF_MAC_LEN)
		goto out;
	rc = 0;
out:
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(alg);
	if (rc != 0)
		digest_wipe(mac, CSRF_MAC_LEN);
	return rc;
}

void
csrf_issue(const unsigned char *secret, size_t secret_len,
           const char *approval_id, const char *subject,
           char out[CSRF_TEXT_LEN + 1])
{
	unsigned char mac[CSRF_MAC_LEN];
	char text[CSRF_B64_BUF];

	out[0] = '\0';
	if (csrf_mac(secret, secret_len, approval_id, subject, mac) != 0)
		return;
	digest_base64url(mac, sizeof(mac), text);
	memcpy(out, text, CSRF_TEXT_LEN);
	out[CSRF_TEXT_LEN] = '\0';
	digest_wipe(mac, sizeof(mac));
	digest_wipe(text, sizeof(text));
}

bool
csrf_verify(const unsigned char *secret, size_t secret_len,
            const char *approval_id, const char *subject, const char *given)
{
	char want[CSRF_TEXT_LEN + 1];
	bool ok;

	/* the length is not secret: every issued token has the same one */
	if (given == NULL || strnlen(given, CSRF_TEXT_LEN + 1) != CSRF_TEXT_LEN)
		return false;
	csrf_issue(secret, secret_len, approval_id, subject, want);
	ok = want[0] != '\0' && digest_equal(want, given, CSRF_TEXT_LEN);
	digest_wipe(want, sizeof(want));
	return ok;
}

/*
 * fuzz_route.c — request routing and the small HTTP parsers: api_route and
 * api_key_valid (src/lib/api.c), http_pct_decode, http_path_len,
 * http_form_get, http_is_json, http_is_form and http_bearer (src/lib/http.c).
 *
 * Input: NUL-separated fields method, uri, form body, form field name,
 * content type, authorization, a size byte; the whole input is also given
 * raw to the functions that take a length.
 *
 * Properties: a matched route's key is a valid key and comes back the same
 * when every byte of it is sent percent-encoded; a refused request is 400,
 * 404 or 405 (405 with an Allow method); decoders never write past their
 * buffers and return what they wrote.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "http.h"
#include "caps.h"
#include "fuzzlib.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* as struct call's key in api.c */
#define KEY_BUF (OG_KEY_MAX_CHARS * 4 + 1)

/* Sends the matched key back fully percent-encoded through the same route. */
static void
check_reencoded(const char *method, const char *pattern, const char *key)
{
	const char *open = strchr(pattern, '{'), *close = open != NULL ? strchr(open, '}') : NULL;
	char uri[OG_URI_MAX], key2[KEY_BUF];
	const char *allow, *p2;
	size_t o, i;
	int status;

	FUZZ_ASSERT(open != NULL && close != NULL);
	o = (size_t)(open - pattern);
	memcpy(uri, pattern, o);
	for (i = 0; key[i] != '\0'; i++)
		o += (size_t)snprintf(uri + o, sizeof(uri) - o, "%%%02X", (unsigned char)key[i]);
	snprintf(uri + o, sizeof(uri) - o, "%s?x=1", close + 1);
	p2 = api_route(method, uri, key2, sizeof(key2), &status, &allow);
	FUZZ_ASSERT(p2 != NULL && strcmp(p2, pattern) == 0 && status == 200);
	FUZZ_ASSERT(strcmp(key, key2) == 0);
}

static void
check_route(const char *method, const char *uri, size_t keylen)
{
	char *key = malloc(keylen);
	const char *pattern, *allow = (const char *)1;
	int status = 0;

	if (key == NULL)
		abort();
	pattern = api_route(method, uri, key, keylen, &status, &allow);
	if (pattern != NULL) {
		FUZZ_ASSERT(status == 200);
		FUZZ_ASSERT(strncmp(uri, pattern, strcspn(pattern, "{")) == 0);
		if (strchr(pattern, '{') != NULL) {
			FUZZ_ASSERT(strlen(key) < keylen);
			FUZZ_ASSERT(api_key_valid(key, strlen(key)));
			check_reencoded(method, pattern, key);
		}
	} else {
		FUZZ_ASSERT(status == 400 || status == 404 || status == 405);
		/* (a 400 may leave allow set: callers read it only for 405) */
		if (status == 405)
			FUZZ_ASSERT(allow != NULL);
	}
	free(key);
}

static void
check_form(const char *body, size_t len, const char *name, size_t outlen)
{
	char *out = malloc(outlen);
	long n;

	if (out == NULL)
		abort();
	n = http_form_get(body, len, name, out, outlen);
	FUZZ_ASSERT(n >= -2);
	if (n >= 0) {
		FUZZ_ASSERT((size_t)n < outlen);
		FUZZ_ASSERT(strlen(out) == (size_t)n);
	}
	free(out);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzzlib_in in = { data, size };
	char *method = fuzzlib_field(&in), *uri = fuzzlib_field(&in);
	char *body = fuzzlib_field(&in), *name = fuzzlib_field(&in);
	char *ctype = fuzzlib_field(&in), *auth = fuzzlib_field(&in);
	uint8_t small = fuzzlib_byte(&in);
	char *dst = malloc(size + 1);
	const char *tok;
	long n;

	if (dst == NULL)
		abort();

	/* the raw bytes */
	(void)api_key_valid((const char *)data, size);
	n = http_pct_decode((const char *)data, size, dst);
	if (n >= 0) {
		FUZZ_ASSERT((size_t)n <= size && dst[n] == '\0');
		FUZZ_ASSERT(strlen(dst) == (size_t)n);
	}
	check_form((const char *)data, size, "reason", 1024);

	/* the fields */
	FUZZ_ASSERT(http_path_len(uri) <= strlen(uri));
	check_route(method, uri, KEY_BUF);
	check_route(method, uri, 1 + small % 64);
	check_form(body, strlen(body), "decision", 16);
	check_form(body, strlen(body), "csrf", 64);
	check_form(body, strlen(body), name, 1 + small);
	(void)http_is_json(ctype);
	(void)http_is_form(ctype);
	tok = http_bearer(auth);
	if (tok != NULL) {
		FUZZ_ASSERT(tok > auth && tok < auth + strlen(auth));
		FUZZ_ASSERT(*tok != ' ' && *tok != '\0');
	}

	free(dst);
	free(method);
	free(uri);
	free(body);
	free(name);
	free(ctype);
	free(auth);
	return 0;
}

/*
 * check_token.c — approval tokens and CSRF tokens.
 *
 * Known-answer vectors were computed independently (sha256sum, Python's
 * hmac module), so the tests pin the stored hash and the MAC encoding: a
 * change to either would silently invalidate every link or form in flight.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "csrf.h"
#include "digest.h"
#include "token.h"
#include "suitelib.h"

#define DRAWS 100000

static const char b64url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static void
hex(const unsigned char *in, size_t len, char *out)
{
	digest_hex(in, len, out);
}

/* ---- tokens ------------------------------------------------------------ */

START_TEST(test_token_shape)
{
	char tok[TOKEN_TEXT_LEN + 1], h1[65], h2[65];
	unsigned char hash[TOKEN_HASH_LEN], again[TOKEN_HASH_LEN];
	int i;

	for (i = 0; i < 1000; i++) {
		ck_assert_int_eq(token_new(tok, hash), 0);
		ck_assert_uint_eq(strlen(tok), TOKEN_TEXT_LEN);
		ck_assert_uint_eq(strspn(tok, b64url), TOKEN_TEXT_LEN);
		ck_assert_msg(token_shape_valid(tok), "fresh token %s has a bad shape",
		              tok);
		/* the stored hash is SHA-256 of the text, not of the raw bytes */
		digest_sha256(tok, strlen(tok), again);
		hex(hash, sizeof(hash), h1);
		hex(again, sizeof(again), h2);
		ck_assert_str_eq(h1, h2);
		token_hash(tok, again);
		hex(again, sizeof(again), h2);
		ck_assert_str_eq(h1, h2);
	}
}
END_TEST

static int
cmp_tok(const void *a, const void *b)
{
	return memcmp(a, b, TOKEN_TEXT_LEN + 1);
}

START_TEST(test_token_distinct)
{
	char (*toks)[TOKEN_TEXT_LEN + 1] = malloc(DRAWS * sizeof(*toks));
	unsigned char hash[TOKEN_HASH_LEN];
	bool seen[256] = { false }, last_seen[256] = { false };
	size_t i, nseen = 0, nlast = 0;

	ck_assert_ptr_nonnull(toks);
	for (i = 0; i < DRAWS; i++) {
		ck_assert_int_eq(token_new(toks[i], hash), 0);
		for (const char *c = toks[i]; *c != '\0'; c++)
			seen[(unsigned char)*c] = true;
		last_seen[(unsigned char)toks[i][TOKEN_TEXT_LEN - 1]] = true;
	}
	qsort(toks, DRAWS, sizeof(*toks), cmp_tok);
	for (i = 1; i < DRAWS; i++)
		ck_assert_msg(strcmp(toks[i - 1], toks[i]) != 0,
		              "token drawn twice: %s", toks[i]);
	/* every base64url character shows up, and the last one only ever
	 * holds 4 bits: 16 characters */
	for (i = 0; i < 256; i++) {
		nseen += seen[i];
		nlast += last_seen[i];
	}
	ck_assert_uint_eq(nseen, 64);
	ck_assert_uint_eq(nlast, 16);
	free(toks);
}
END_TEST

START_TEST(test_token_hash_vectors)
{
	unsigned char h[TOKEN_HASH_LEN];
	char x[65];

	token_hash("abc", h);
	hex(h, sizeof(h), x);
	ck_assert_str_eq(x, "ba7816bf8f01cfea414140de5dae2223"
	                    "b00361a396177a9cb410ff61f20015ad");
	token_hash("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", h);
	hex(h, sizeof(h), x);
	ck_assert_str_eq(x, "0f007385b6f9d4b7eeb2748605afe1a9"
	                    "84a0a3bfa3f014d09e2a784ce9e5cd1a");
	token_hash(NULL, h);
	hex(h, sizeof(h), x);
	ck_assert_str_eq(x, "e3b0c44298fc1c149afbf4c8996fb924"
	                    "27ae41e4649b934ca495991b7852b855");
}
END_TEST

struct shape_case {
	const char *s;
	bool ok;
};

static const struct shape_case shape_cases[] = {
	{ "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", true },
	{ "zyx-_0123456789abcdefghijklmnopqrstuvwxyz_w", true },
	{ "-__________________________________________8", false }, /* 44 */
	{ "_________________________________________8", false },   /* 42 */
	{ "__________________________________________8", true },
	/* the last character must carry two zero bits */
	{ "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB", false },
	{ "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA_", false },
	/* standard base64 and padding are not base64url */
	{ "AAAAAAAAAAAAAAAAAAAA+AAAAAAAAAAAAAAAAAAAAAA", false },
	{ "AAAAAAAAAAAAAAAAAAAA/AAAAAAAAAAAAAAAAAAAAAA", false },
	{ "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", false },
	{ "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==", false },
	{ "AAAAAAAAAAAAAAAAAAAA AAAAAAAAAAAAAAAAAAAAAA", false },
	{ "AAAAAAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA", false },
	{ "AAAAAAAAAAAAAAAAAAAA%AAAAAAAAAAAAAAAAAAAAAA", false },
	{ "AAAAAAAAAAAAAAAAAAAA\xc3\xa9" "AAAAAAAAAAAAAAAAAAAAA", false },
	{ "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n", false },
	{ "", false },
};

START_TEST(test_token_shape_valid)
{
	const struct shape_case *c = &shape_cases[_i];

	ck_assert_msg(token_shape_valid(c->s) == c->ok, "\"%s\": want %s", c->s,
	              c->ok ? "valid" : "invalid");
}
END_TEST

START_TEST(test_token_shape_null)
{
	ck_assert(!token_shape_valid(NULL));
}
END_TEST

/* ---- CSRF -------------------------------------------------------------- */

static unsigned char secret[32], other_secret[32];

static void
csrf_setup(void)
{
	size_t i;

	for (i = 0; i < sizeof(secret); i++) {
		secret[i] = (unsigned char)i;
		other_secret[i] = (unsigned char)(i + 1);
	}
}

#define ISSUE(out, a, s) csrf_issue(secret, sizeof(secret), (a), (s), (out))
#define VERIFY(a, s, g)  csrf_verify(secret, sizeof(secret), (a), (s), (g))

START_TEST(test_csrf_known_answer)
{
	char tok[CSRF_TEXT_LEN + 1];

	/* HMAC-SHA256(key 00..1f, len64be|"oncegate-csrf-v1"|len64be|"42"|
	 * len64be|"alice@example.com"), base64url */
	ISSUE(tok, "42", "alice@example.com");
	ck_assert_str_eq(tok, "HCgYxNTJJSdMvdfbu2LDNx9oheQWv-5FNN9Hn1JgUUw");
	ck_assert_uint_eq(strlen(tok), CSRF_TEXT_LEN);
	ck_assert(VERIFY("42", "alice@example.com", tok));
}
END_TEST

START_TEST(test_csrf_refusals)
{
	char tok[CSRF_TEXT_LEN + 1], bad[CSRF_TEXT_LEN + 2], other[CSRF_TEXT_LEN + 1];
	size_t i;

	ISSUE(tok, "42", "alice");
	ck_assert(VERIFY("42", "alice", tok));
	ISSUE(other, "42", "alice");
	ck_assert_str_eq(tok, other); /* stateless: the same every time */

	ck_assert(!VERIFY("42", "bob", tok));
	ck_assert(!VERIFY("42", "Alice", tok));
	ck_assert(!VERIFY("43", "alice", tok));
	ck_assert(!VERIFY("420", "alice", tok));
	ck_assert(!csrf_verify(other_secret, sizeof(other_secret), "42", "alice",
	                       tok));
	/* a secret differing in its last byte only */
	memcpy(bad, secret, sizeof(secret));
	bad[31] ^= 1;
	ck_assert(!csrf_verify((const unsigned char *)bad, sizeof(secret), "42",
	                       "alice", tok));

	/* every position changed to every other character */
	for (i = 0; i < CSRF_TEXT_LEN; i++) {
		for (const char *c = b64url; *c != '\0'; c++) {
			if (*c == tok[i])
				continue;
			strcpy(bad, tok);
			bad[i] = *c;
			ck_assert_msg(!VERIFY("42", "alice", bad),
			              "tampered at %zu accepted", i);
		}
	}

	strcpy(bad, tok);
	bad[CSRF_TEXT_LEN - 1] = '\0';
	ck_assert(!VERIFY("42", "alice", bad));           /* truncated */
	strcpy(bad, tok);
	strcat(bad, "A");
	ck_assert(!VERIFY("42", "alice", bad));           /* extended */
	ck_assert(!VERIFY("42", "alice", ""));
	ck_assert(!VERIFY("42", "alice", NULL));
	ck_assert(!VERIFY("42", "alice", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"));
}
END_TEST

START_TEST(test_csrf_boundaries)
{
	char a[CSRF_TEXT_LEN + 1], b[CSRF_TEXT_LEN + 1];

	/* the same concatenation, split differently */
	ISSUE(a, "ab", "c");
	ISSUE(b, "a", "bc");
	ck_assert_str_ne(a, b);
	ck_assert(!VERIFY("a", "bc", a));
	ck_assert(!VERIFY("ab", "c", b));
	/* a length prefix is not mistaken for data */
	ISSUE(a, "1", "\x01" "x");
	ISSUE(b, "1\x01", "x");
	ck_assert_str_ne(a, b);
	/* approval and subject are not interchangeable */
	ISSUE(a, "alice", "42");
	ISSUE(b, "42", "alice");
	ck_assert_str_ne(a, b);
}
END_TEST

START_TEST(test_csrf_fail_closed)
{
	char tok[CSRF_TEXT_LEN + 1];

	csrf_issue(secret, CSRF_SECRET_MIN - 1, "42", "alice", tok);
	ck_assert_str_eq(tok, "");
	ck_assert(!csrf_verify(secret, CSRF_SECRET_MIN - 1, "42", "alice", tok));
	csrf_issue(NULL, 32, "42", "alice", tok);
	ck_assert_str_eq(tok, "");
	ISSUE(tok, NULL, "alice");
	ck_assert_str_eq(tok, "");
	ISSUE(tok, "42", NULL);
	ck_assert_str_eq(tok, "");
	ISSUE(tok, "", "alice");
	ck_assert_str_eq(tok, "");
	ISSUE(tok, "42", "");
	ck_assert_str_eq(tok, "");
	ck_assert(!VERIFY("42", "", ""));
	ck_assert(!VERIFY(NULL, NULL, NULL));
	/* a token made for a real subject does not verify for an empty one */
	ISSUE(tok, "42", "alice");
	ck_assert(!VERIFY("42", "", tok));
	ck_assert(!VERIFY("", "alice", tok));
}
END_TEST

TL_SUITE(token_suite, "token",
         {"token", 300,
          .loops = TL_LOOPS({test_token_shape_valid,
                             sizeof(shape_cases) / sizeof(shape_cases[0])}),
          .tests = TL_LIST(test_token_shape, test_token_distinct, test_token_hash_vectors,
                           test_token_shape_null)},
         /* 100,000 draws take seconds under valgrind */
         {"csrf", 300, .setup = csrf_setup,
          .tests = TL_LIST(test_csrf_known_answer, test_csrf_refusals, test_csrf_boundaries,
                           test_csrf_fail_closed)})

TL_SUITE_MAIN(token_suite, false)

/*
 * check_http.c — request parsing and routing under the size caps: the
 * route table, percent-decoding of keys, the key rule, media types and the
 * bearer header. Table-driven.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "http.h"
#include "caps.h"
#include "suitelib.h"

struct route_case {
	const char *method;
	const char *uri;
	const char *pattern; /* NULL: no route */
	int status;
	const char *key;     /* decoded key when pattern takes one */
	const char *allow;
};

static const struct route_case route_cases[] = {
	{ "POST", "/v1/runs", "/v1/runs", 200, "", NULL },
	{ "POST", "/v1/runs?x=1", "/v1/runs", 200, "", NULL },
	{ "GET", "/v1/runs", "/v1/runs", 200, "", NULL }, /* the list */
	{ "HEAD", "/v1/runs", "/v1/runs", 200, "", NULL },
	{ "DELETE", "/v1/runs", NULL, 405, "", "GET, HEAD, POST" },
	{ "GET", "/v1/runs/acme:lead:42:v1", "/v1/runs/{key}", 200, "acme:lead:42:v1", NULL },
	{ "GET", "/v1/runs/a%2Fb%20c", "/v1/runs/{key}", 200, "a/b c", NULL },
	{ "GET", "/v1/runs/%C3%A9t%C3%A9", "/v1/runs/{key}", 200, "\xc3\xa9t\xc3\xa9", NULL },
	{ "POST", "/v1/runs/k/lease", "/v1/runs/{key}/lease", 200, "k", NULL },
	{ "POST", "/v1/runs/k%2Flease/lease", "/v1/runs/{key}/lease", 200, "k/lease", NULL },
	{ "POST", "/v1/runs/k/transition", "/v1/runs/{key}/transition", 200, "k", NULL },
	{ "GET", "/v1/runs/k/lease", NULL, 405, "", "POST" },
	{ "POST", "/v1/runs/k", NULL, 405, "", "GET, HEAD" },
	{ "GET", "/v1/runs/", NULL, 404, "", NULL },
	{ "GET", "/v1/runs/k/other", NULL, 404, "", NULL },
	{ "GET", "/v1/runs/k/lease/x", NULL, 404, "", NULL },
	{ "GET", "/v1/runs//lease", NULL, 404, "", NULL },
	{ "GET", "/healthz", "/healthz", 200, "", NULL },
	{ "PUT", "/approve/abc", NULL, 405, "", "GET, HEAD, POST" },
	{ "POST", "/approve/abc", "/approve/{token}", 200, "abc", NULL },
	{ "GET", "/healthz/", NULL, 404, "", NULL },
	{ "GET", "/", NULL, 404, "", NULL },
	{ "GET", "", NULL, 404, "", NULL },
	{ "GET", "/v1/nope", NULL, 404, "", NULL },
	/* bad keys in the path */
	{ "GET", "/v1/runs/%00", NULL, 400, "", NULL },
	{ "GET", "/v1/runs/%01x", NULL, 400, "", NULL },
	{ "GET", "/v1/runs/%zz", NULL, 400, "", NULL },
	{ "GET", "/v1/runs/%4", NULL, 400, "", NULL },
	{ "GET", "/v1/runs/%ff", NULL, 400, "", NULL },
	{ "GET", "/v1/runs/%C2%85", NULL, 400, "", NULL }, /* C1 control NEL */
};

START_TEST(test_route_table)
{
	const struct route_case *t = &route_cases[_i];
	char key[OG_KEY_MAX_CHARS * 4 + 1];
	const char *allow, *pattern;
	int status;

	pattern = api_route(t->method, t->uri, key, sizeof(key), &status, &allow);
	if (t->pattern == NULL)
		ck_assert_msg(pattern == NULL, "%s %s matched %s", t->method, t->uri, pattern);
	else
		ck_assert_str_eq(pattern, t->pattern);
	ck_assert_int_eq(status, t->status);
	if (t->pattern != NULL)
		ck_assert_str_eq(key, t->key);
	if (t->allow != NULL)
		ck_assert_str_eq(allow, t->allow);
}
END_TEST

START_TEST(test_route_key_length)
{
	char uri[4096], key[OG_KEY_MAX_CHARS * 4 + 1];
	const char *allow;
	int status;

	/* 200 characters pass, 201 do not, whether raw or encoded */
	strcpy(uri, "/v1/runs/");
	memset(uri + 9, 'k', 200);
	uri[209] = '\0';
	ck_assert_ptr_nonnull(api_route("GET", uri, key, sizeof(key), &status, &allow));
	ck_assert_uint_eq(strlen(key), 200);
	strcat(uri, "k");
	ck_assert_ptr_null(api_route("GET", uri, key, sizeof(key), &status, &allow));
	ck_assert_int_eq(status, 400);
	/* 200 two-byte characters are 200 characters */
	strcpy(uri, "/v1/runs/");
	for (int i = 0; i < 200; i++)
		strcat(uri, "%C3%A9");
	ck_assert_ptr_nonnull(api_route("GET", uri, key, sizeof(key), &status, &allow));
	/* a path far over any cap is refused, never overflows */
	memset(uri + 9, 'x', sizeof(uri) - 10);
	uri[sizeof(uri) - 1] = '\0';
	ck_assert_ptr_null(api_route("GET", uri, key, sizeof(key), &status, &allow));
	ck_assert_int_eq(status, 400);
}
END_TEST

START_TEST(test_key_rule)
{
	ck_assert_int_eq(api_key_valid("a", 1), 1);
	ck_assert_int_eq(api_key_valid("tenant:op:obj:1.2.3", 19), 1);
	ck_assert_int_eq(api_key_valid("with space", 10), 1);
	ck_assert_int_eq(api_key_valid("", 0), 0);
	ck_assert_int_eq(api_key_valid("a\tb", 3), 0);
	ck_assert_int_eq(api_key_valid("a\x7f", 2), 0);
	ck_assert_int_eq(api_key_valid("\xc0\xaf", 2), 0);         /* overlong '/' */
	ck_assert_int_eq(api_key_valid("\xed\xa0\x80", 3), 0);     /* surrogate */
	ck_assert_int_eq(api_key_valid("\xf4\x90\x80\x80", 4), 0); /* > U+10FFFF */
	ck_assert_int_eq(api_key_valid("\xe2\x82", 2), 0);         /* truncated */
	ck_assert_int_eq(api_key_valid("\xf0\x9f\x98\x80", 4), 1); /* emoji */
}
END_TEST

START_TEST(test_pct_decode)
{
	char out[64];

	ck_assert_int_eq(http_pct_decode("a%20b", 5, out), 3);
	ck_assert_str_eq(out, "a b");
	ck_assert_int_eq(http_pct_decode("%2f%2F", 6, out), 2);
	ck_assert_str_eq(out, "//");
	ck_assert_int_eq(http_pct_decode("plus+", 5, out), 5); /* '+' is not a space in paths */
	ck_assert_str_eq(out, "plus+");
	ck_assert_int_eq(http_pct_decode("%", 1, out), -1);
	ck_assert_int_eq(http_pct_decode("%2", 2, out), -1);
	ck_assert_int_eq(http_pct_decode("%g0", 3, out), -1);
	ck_assert_int_eq(http_pct_decode("%00", 3, out), -1);
}
END_TEST

START_TEST(test_media_type)
{
	ck_assert(http_is_json("application/json"));
	ck_assert(http_is_json("Application/JSON; charset=utf-8"));
	ck_assert(http_is_json("application/json ;charset=utf-8"));
	ck_assert(!http_is_json("application/jsonx"));
	ck_assert(!http_is_json("text/plain"));
	ck_assert(!http_is_json("application/x-www-form-urlencoded"));
	ck_assert(!http_is_json(""));
	ck_assert(!http_is_json(NULL));
}
END_TEST

START_TEST(test_bearer)
{
	ck_assert_str_eq(http_bearer("Bearer og_abc"), "og_abc");
	ck_assert_str_eq(http_bearer("bearer   og_abc"), "og_abc");
	ck_assert_ptr_null(http_bearer("Basic dXNlcjpwYXNz"));
	ck_assert_ptr_null(http_bearer("Bearer "));
	ck_assert_ptr_null(http_bearer("Bearer"));
	ck_assert_ptr_null(http_bearer(NULL));
}
END_TEST

START_TEST(test_response_caps)
{
	struct http_response r;
	json_t *big;
	char *s;

	http_response_init(&r);
	ck_assert_int_eq(http_header(&r, "X-Ok", "1"), 0);
	ck_assert_int_ne(http_header(&r, "X-Bad", "a\r\nSet-Cookie: x"), 0);
	ck_assert_ptr_null(strstr(r.headers.data, "Set-Cookie"));
	http_problem(&r, 404, "not_found", "No such route", "no \"such\" route", NULL);
	ck_assert_int_eq(r.status, 404);
	ck_assert_str_eq(r.content_type, "application/problem+json");
	ck_assert_str_eq(r.body.data,
	                 "{\"type\":\"https://oncegate.dev/problems/not_found\","
	                 "\"title\":\"No such route\",\"status\":404,"
	                 "\"detail\":\"no \\\"such\\\" route\",\"error\":\"not_found\","
	                 "\"message\":\"no \\\"such\\\" route\"}\n");
	/* a response over the cap turns into a clean 500, never a truncated body */
	s = malloc(OG_RESPONSE_MAX + 10);
	memset(s, 'a', OG_RESPONSE_MAX + 9);
	s[OG_RESPONSE_MAX + 9] = '\0';
	big = json_pack("{s:s}", "x", s);
	http_json(&r, 200, big);
	ck_assert_int_eq(r.status, 500);
	ck_assert_str_eq(r.content_type, "application/problem+json");
	ck_assert_ptr_nonnull(strstr(r.body.data, "\"type\":\"https://oncegate.dev/problems/internal_error\""));
	big = json_loads(r.body.data, 0, NULL);
	ck_assert_msg(big != NULL, "the fallback is not JSON: %s", r.body.data);
	json_decref(big);
	free(s);
	http_response_free(&r);
}
END_TEST

TL_SUITE(http_suite, "http",
         {"parse", 0,
          .loops = TL_LOOPS({test_route_table,
                             (int)(sizeof(route_cases) / sizeof(route_cases[0]))}),
          .tests = TL_LIST(test_route_key_length, test_key_rule, test_pct_decode,
                           test_media_type, test_bearer, test_response_caps)})

TL_SUITE_MAIN(http_suite, false)

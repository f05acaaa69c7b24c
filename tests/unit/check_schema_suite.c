/*
 * check_schema_suite.c — the contract validator against the official
 * JSON-Schema-Test-Suite (draft 2020-12), vendored unchanged under
 * tests/data/json-schema-test-suite/: every case of the files of the
 * keywords the validator supports, and of the formats it checks.
 *
 * A case is skipped only when it is listed below with its reason; a listed
 * group must really be refused at compile time (so the list cannot hide a
 * schema that compiles and then judges wrongly), and every entry of the list
 * must match something (so it cannot go stale). The counts are printed:
 * "schema suite: N cases, N run, N passed, N skipped".
 *
 * Then production-shaped values for the formats (multilingual, emoji, RTL,
 * long) and the contract-level behaviour: annotations load, an unsupported
 * format fails the load naming the file, the pointer and the format.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "contract.h"
#include "jload.h"
#include "schema.h"
#include "suitelib.h"

#ifndef SCHEMA_SUITE_DIR
#define SCHEMA_SUITE_DIR "tests/data/json-schema-test-suite"
#endif

static const char *const files[] = {
	"type.json", "properties.json", "required.json", "additionalProperties.json",
	"enum.json", "const.json", "minLength.json", "maxLength.json", "minimum.json",
	"maximum.json", "items.json", "minItems.json", "maxItems.json", "format.json",
	"default.json", "optional/format/email.json", "optional/format/uri.json",
	"optional/format/date-time.json",
};

/* What the validator deliberately does not do. A NULL test skips the whole
 * group, whose schema the compiler must refuse. */
static const struct skip {
	const char *file, *group, *test, *reason;
} skip_list[] = {
	/* Keywords outside the contract subset: refused at load, so that no
	 * contract relies on a rule that is not checked. */
	{ "properties.json", "properties, patternProperties, additionalProperties interaction", NULL,
	  "patternProperties and additionalProperties as a schema are not supported" },
	{ "properties.json", "properties with boolean schema", NULL,
	  "boolean schemas are not supported (every schema is an object)" },
	{ "additionalProperties.json", "additionalProperties being false does not allow other properties", NULL,
	  "patternProperties is not supported" },
	{ "additionalProperties.json", "non-ASCII pattern with additionalProperties", NULL,
	  "patternProperties is not supported" },
	{ "additionalProperties.json", "additionalProperties with schema", NULL,
	  "additionalProperties is true or false only, not a schema" },
	{ "additionalProperties.json", "additionalProperties can exist by itself", NULL,
	  "additionalProperties is true or false only, not a schema" },
	{ "additionalProperties.json", "additionalProperties does not look in applicators", NULL,
	  "allOf is not supported" },
	{ "additionalProperties.json", "additionalProperties with null valued instance properties", NULL,
	  "additionalProperties is true or false only, not a schema" },
	{ "additionalProperties.json", "additionalProperties with propertyNames", NULL,
	  "propertyNames is not supported" },
	{ "additionalProperties.json", "dependentSchemas with additionalProperties", NULL,
	  "dependentSchemas is not supported" },
	{ "enum.json", "empty enum", NULL,
	  "an empty enum is refused at load: a field no value can meet is a contract mistake" },
	{ "items.json", "items with boolean schema (true)", NULL,
	  "boolean schemas are not supported" },
	{ "items.json", "items with boolean schema (false)", NULL,
	  "boolean schemas are not supported" },
	{ "items.json", "items and subitems", NULL, "$defs and $ref are not supported" },
	{ "items.json", "prefixItems with no additional items allowed", NULL,
	  "prefixItems is not supported" },
	{ "items.json", "items does not look in applicators, valid case", NULL,
	  "allOf is not supported" },
	{ "items.json", "prefixItems validation adjusts the starting index for items", NULL,
	  "prefixItems is not supported" },
	{ "items.json", "items with heterogeneous array", NULL, "prefixItems is not supported" },
	/* Formats other than email, uri and date-time are refused at load:
	 * a contract author who writes one believes it is checked. */
	{ "format.json", "idn-email format", NULL, "format idn-email is not supported" },
	{ "format.json", "regex format", NULL, "format regex is not supported" },
	{ "format.json", "ipv4 format", NULL, "format ipv4 is not supported" },
	{ "format.json", "ipv6 format", NULL, "format ipv6 is not supported" },
	{ "format.json", "idn-hostname format", NULL, "format idn-hostname is not supported" },
	{ "format.json", "hostname format", NULL, "format hostname is not supported" },
	{ "format.json", "date format", NULL, "format date is not supported" },
	{ "format.json", "time format", NULL, "format time is not supported" },
	{ "format.json", "json-pointer format", NULL, "format json-pointer is not supported" },
	{ "format.json", "relative-json-pointer format", NULL,
	  "format relative-json-pointer is not supported" },
	{ "format.json", "iri format", NULL, "format iri is not supported" },
	{ "format.json", "iri-reference format", NULL, "format iri-reference is not supported" },
	{ "format.json", "uri-reference format", NULL, "format uri-reference is not supported" },
	{ "format.json", "uri-template format", NULL, "format uri-template is not supported" },
	{ "format.json", "uuid format", NULL, "format uuid is not supported" },
	{ "format.json", "duration format", NULL, "format duration is not supported" },
	/* Draft 2020-12 makes format an annotation unless the format-assertion
	 * vocabulary is on; contracts always assert it (the optional/format
	 * files test exactly that), so these three annotation-only cases are
	 * the one place the validator answers "invalid" on purpose. */
	{ "format.json", "email format", "invalid email string is only an annotation by default",
	  "format is asserted, not an annotation" },
	{ "format.json", "date-time format",
	  "invalid date-time string is only an annotation by default",
	  "format is asserted, not an annotation" },
	{ "format.json", "uri format", "invalid uri string is only an annotation by default",
	  "format is asserted, not an annotation" },
};

#define NSKIPS (sizeof(skip_list) / sizeof(skip_list[0]))

static unsigned skip_used[NSKIPS];

static const struct skip *
skip_of(const char *file, const char *group, const char *test)
{
	size_t i;

	for (i = 0; i < NSKIPS; i++)
		if (strcmp(skip_list[i].file, file) == 0 && strcmp(skip_list[i].group, group) == 0 &&
		    (skip_list[i].test == NULL ||
		     (test != NULL && strcmp(skip_list[i].test, test) == 0)))
			return &skip_list[i];
	return NULL;
}

/* Is instance valid against the compiled schema? */
static bool
valid(const struct schema *s, const json_t *instance)
{
	json_t *errors = schema_validate(s, instance, "", "value");
	bool ok;

	ck_assert_ptr_nonnull(errors);
	ok = json_array_size(errors) == 0;
	json_decref(errors);
	return ok;
}

START_TEST(test_suite)
{
	size_t total = 0, run = 0, passed = 0, skipped = 0, wrong = 0, f, g, t, i;

	for (f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
		char path[512];
		json_error_t jerr;
		json_t *doc, *group, *test;

		snprintf(path, sizeof(path), "%s/%s", SCHEMA_SUITE_DIR, files[f]);
		/* ALLOW_NUL: enum.json and const.json match strings holding U+0000. */
		doc = json_load_file(path, JSON_ALLOW_NUL, &jerr);
		ck_assert_msg(doc != NULL, "%s: %s", path, jerr.text);
		json_array_foreach(doc, g, group) {
			const char *gdesc = json_string_value(json_object_get(group, "description"));
			json_t *tests = json_object_get(group, "tests");
			const struct skip *sk = skip_of(files[f], gdesc, NULL);
			struct jload ld;
			struct schema *s;

			memset(&ld, 0, sizeof(ld));
			s = schema_compile(&ld, json_object_get(group, "schema"));
			total += json_array_size(tests);
			if (sk != NULL) {
				/* Refused, and loudly: a message at a pointer. */
				ck_assert_msg(s == NULL, "%s: \"%s\" is on the skip list (%s) but compiles",
				              files[f], gdesc, sk->reason);
				ck_assert(ld.failed && ld.msg[0] != '\0');
				skip_used[sk - skip_list]++;
				skipped += json_array_size(tests);
				continue;
			}
			ck_assert_msg(s != NULL, "%s: \"%s\" does not compile: %s: %s", files[f], gdesc,
			              ld.where.s, ld.msg);
			json_array_foreach(tests, t, test) {
				const char *tdesc = json_string_value(json_object_get(test, "description"));
				bool want = json_is_true(json_object_get(test, "valid"));

				sk = skip_of(files[f], gdesc, tdesc);
				if (sk != NULL) {
					skip_used[sk - skip_list]++;
					skipped++;
					continue;
				}
				run++;
				if (valid(s, json_object_get(test, "data")) == want) {
					passed++;
				} else {
					wrong++;
					printf("WRONG %s: %s: %s: expected %s\n", files[f], gdesc, tdesc,
					       want ? "valid" : "invalid");
				}
			}
			schema_free(s);
		}
		json_decref(doc);
	}
	printf("schema suite: %zu cases, %zu run, %zu passed, %zu skipped\n", total, run,
	       passed, skipped);
	for (i = 0; i < NSKIPS; i++)
		ck_assert_msg(skip_used[i] > 0, "skip entry %s: \"%s\" matches nothing",
		              skip_list[i].file, skip_list[i].group);
	ck_assert_msg(wrong == 0, "%zu cases judged wrong (listed above)", wrong);
	ck_assert_uint_eq(run + skipped, total);
	ck_assert_uint_eq(passed, run);
	/* The suite is the point: most of it must run. */
	ck_assert_uint_ge(run, 390);
}
END_TEST

/* ---- formats on production-shaped values --------------------------------- */

static const struct fcase {
	const char *format, *value;
	bool valid;
} fcases[] = {
	{ "email", "support+tickets@example.com", true },
	{ "email", "o'brien.sean@mail.example.co.uk", true },
	{ "email", "\"Иван Петров\"@example.com", false },  /* non-ASCII even quoted */
	{ "email", "иван.петров@пример.рф", false },        /* IDN: idn-email, not email */
	{ "email", "ivan@xn--e1afmkfd.xn--p1ai", true },    /* the same domain, punycode */
	{ "email", "山田太郎@例え.jp", false },
	{ "email", "مدير@مثال.مصر", false },
	{ "email", "support@example.com 📧", false },
	{ "email", "a@b.c, d@e.f", false },
	{ "email", "line@example.com\r\nBcc: x@evil.example", false },
	{ "email", "", false },
	/* 64 bytes of local part is the most RFC 5321 allows. */
	{ "email", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa@example.com", true },
	{ "email", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa@example.com", false },
	{ "email", "x@-example.com", false },
	{ "uri", "https://crm.example.com/tickets/48151623?lang=ru#reply", true },
	{ "uri", "https://ru.wikipedia.org/wiki/%D0%9C%D0%BE%D1%81%D0%BA%D0%B2%D0%B0", true },
	{ "uri", "https://ru.wikipedia.org/wiki/Москва", false },  /* an IRI, not a URI */
	{ "uri", "https://例え.jp/", false },
	{ "uri", "https://xn--r8jz45g.jp/", true },
	{ "uri", "https://example.com/שלום", false },
	{ "uri", "https://example.com/%F0%9F%93%A7", true },
	{ "uri", "https://example.com/📧", false },
	{ "uri", "/tickets/42", false },
	{ "uri", "https://example.com:8443/a b", false },
	{ "uri", "https://[2001:db8::1]:8443/", true },
	{ "uri", "https://[2001:db8::1/", false },
	{ "date-time", "2026-12-01T17:04:49Z", true },
	{ "date-time", "2026-12-01T17:04:49.123456+03:00", true },
	{ "date-time", "2024-02-29T00:00:00Z", true },
	{ "date-time", "2026-02-29T00:00:00Z", false },
	{ "date-time", "2100-02-29T00:00:00Z", false },
	{ "date-time", "2000-02-29T00:00:00Z", true },
	{ "date-time", "2026-12-01 17:04:49Z", false },
	{ "date-time", "2026-12-01T17:04:49", false },
	{ "date-time", "١٩٩٨-١٢-٣١T23:59:59Z", false },  /* Arabic-Indic digits */
	{ "date-time", "2026-12-01T17:04:49Z 📅", false },
	{ "date-time", "2016-12-31T23:59:60Z", true },
	{ "date-time", "2017-01-01T02:59:60+03:00", true },   /* 2016-12-31T23:59:60Z */
	{ "date-time", "2016-12-31T23:59:60+03:00", false },  /* 23:59:60 local, not UTC */
	{ "date-time", "2016-12-31T20:59:60-03:00", true },
	{ "date-time", "", false },
};

START_TEST(test_formats)
{
	const struct fcase *c = &fcases[_i];
	json_t *schema = json_pack("{s:s}", "format", c->format), *v = json_string(c->value);
	struct jload ld;
	struct schema *s;

	memset(&ld, 0, sizeof(ld));
	s = schema_compile(&ld, schema);
	ck_assert_msg(s != NULL, "%s", ld.msg);
	ck_assert_ptr_nonnull(v);
	ck_assert_msg(valid(s, v) == c->valid, "%s \"%s\": expected %s", c->format, c->value,
	              c->valid ? "valid" : "invalid");
	schema_free(s);
	json_decref(v);
	json_decref(schema);
}
END_TEST

/* The error a reader (or a model repairing its output) sees. */
START_TEST(test_format_error)
{
	json_t *schema = json_pack("{s:s, s:{s:{s:s, s:i}}}", "type", "object", "properties",
	                           "reply_to", "format", "email", "maxLength", 254);
	json_t *inst = json_pack("{s:s}", "reply_to", "Отдел поддержки <support@example.com>");
	struct jload ld;
	struct schema *s;
	json_t *errors, *e;

	memset(&ld, 0, sizeof(ld));
	s = schema_compile(&ld, schema);
	ck_assert_ptr_nonnull(s);
	errors = schema_validate(s, inst, "/effect/payload", "payload");
	ck_assert_uint_eq(json_array_size(errors), 1);
	e = json_array_get(errors, 0);
	ck_assert_str_eq(json_string_value(json_object_get(e, "path")), "/effect/payload/reply_to");
	ck_assert_str_eq(json_string_value(json_object_get(e, "rule")), "format");
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(e, "message")), "e-mail"));
	json_decref(errors);
	schema_free(s);
	json_decref(inst);
	json_decref(schema);
}
END_TEST

/* ---- contracts ---------------------------------------------------------------- */

static char scratch[] = "/tmp/check_schema_suite.XXXXXX";

/* Loads a directory holding one contract NAME.json with this schema;
 * returns the set (or NULL with the error in err). */
static struct contract_set *
load_one(const char *name, const char *schema, char *err, size_t errlen)
{
	char dir[256], path[512];
	FILE *f;

	snprintf(dir, sizeof(dir), "%s/%s", scratch, name);
	ck_assert_msg(mkdir(dir, 0700) == 0, "mkdir %s: %s", dir, strerror(errno));
	snprintf(path, sizeof(path), "%s/%s.json", dir, name);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "{\"name\": \"%s\", \"schema\": %s,\n"
	        " \"gate\": {\"approvers\": [\"group:поддержка\"]},\n"
	        " \"effects\": {\"allowed_types\": [\"email.send\"],"
	        " \"allowed_targets\": [\"smtp_main\"]}}\n", name, schema);
	ck_assert_int_eq(fclose(f), 0);
	return contract_load_dir(dir, err, errlen);
}

/* What n8n's schema generator and LLM tooling emit: $schema, $id, titles,
 * descriptions in any language, examples and defaults. */
START_TEST(test_annotations_load)
{
	char err[1024];
	struct contract_set *set = load_one("n8n_generated",
		"{\"$schema\": \"http://json-schema.org/draft-07/schema#\","
		" \"$id\": \"https://example.com/schemas/reply.json\","
		" \"$comment\": \"generated by n8n\", \"title\": \"Ответ клиенту\","
		" \"description\": \"回复客户 — رد على العميل 📨\", \"type\": \"object\","
		" \"properties\": {"
		"  \"subject\": {\"type\": \"string\", \"maxLength\": 200, \"title\": \"Тема\","
		"   \"examples\": [\"Re: ваш заказ №4815\", \"回复：您的订单\"], \"default\": \"\"},"
		"  \"reply_to\": {\"type\": \"string\", \"format\": \"email\"},"
		"  \"ticket_url\": {\"type\": \"string\", \"format\": \"uri\"},"
		"  \"due\": {\"type\": \"string\", \"format\": \"date-time\","
		"   \"default\": \"2026-12-01T17:04:49Z\"}},"
		" \"required\": [\"subject\"]}", err, sizeof(err));
	const struct contract *c;
	json_t *out, *errors;

	ck_assert_msg(set != NULL, "%s", err);
	c = contract_find(set, "n8n_generated");
	ck_assert_ptr_nonnull(c);
	out = json_pack("{s:s, s:s, s:s, s:s}", "subject", "Re: ваш заказ №4815 — שלום 👋",
	                "reply_to", "support@example.com", "ticket_url",
	                "https://crm.example.com/t/4815?lang=ar#رد", "due", "2026-12-02T09:00:00+03:00");
	errors = contract_validate(c, out);
	/* The fragment holds unescaped Arabic: not a URI. */
	ck_assert_uint_eq(json_array_size(errors), 1);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(errors, 0), "path")),
	                 "/ticket_url");
	json_decref(errors);
	json_object_set_new(out, "ticket_url",
	                    json_string("https://crm.example.com/t/4815?lang=ar#%D8%B1%D8%AF"));
	errors = contract_validate(c, out);
	ck_assert_uint_eq(json_array_size(errors), 0);
	json_decref(errors);
	json_decref(out);
	contract_set_free(set);
}
END_TEST

START_TEST(test_unsupported_format)
{
	char err[1024], expect[512];
	struct contract_set *set = load_one("phone_format",
		"{\"type\": \"object\", \"properties\": {\"клиент\": {\"type\": \"object\","
		" \"properties\": {\"phone\": {\"type\": \"string\", \"format\": \"phone\"}}}}}",
		err, sizeof(err));

	ck_assert_ptr_null(set);
	snprintf(expect, sizeof(expect), "%s/phone_format/phone_format.json: "
	         "/schema/properties/клиент/properties/phone/format: unsupported format "
	         "\"phone\" (supported: email, uri, date-time)", scratch);
	ck_assert_str_eq(err, expect);
}
END_TEST

/* Unknown keywords stay refused; an annotation of the wrong type too. */
START_TEST(test_still_refused)
{
	char err[1024];
	struct contract_set *set;

	set = load_one("pattern_kw", "{\"type\": \"string\", \"pattern\": \"^[a-z]+$\"}", err,
	               sizeof(err));
	ck_assert_ptr_null(set);
	ck_assert_ptr_nonnull(strstr(err, "pattern_kw.json: /schema/pattern: unsupported "
	                             "schema keyword \"pattern\""));
	set = load_one("examples_kw", "{\"type\": \"string\", \"examples\": \"нет\"}", err,
	               sizeof(err));
	ck_assert_ptr_null(set);
	ck_assert_ptr_nonnull(strstr(err, "examples_kw.json: /schema/examples: must be an array"));
	set = load_one("format_kw", "{\"type\": \"string\", \"format\": 5}", err, sizeof(err));
	ck_assert_ptr_null(set);
	ck_assert_ptr_nonnull(strstr(err, "format_kw.json: /schema/format: must be a string"));
	set = load_one("schema_kw", "{\"$schema\": true}", err, sizeof(err));
	ck_assert_ptr_null(set);
	ck_assert_ptr_nonnull(strstr(err, "schema_kw.json: /schema/$schema: must be a string"));
}
END_TEST

static Suite *
schema_suite(void)
{
	Suite *s = suite_create("schema_suite");
	TCase *tc = tl_tcase(s, "official", 60);

	tcase_add_test(tc, test_suite);

	tc = tl_tcase(s, "formats", 0);
	tcase_add_loop_test(tc, test_formats, 0, sizeof(fcases) / sizeof(fcases[0]));
	tcase_add_test(tc, test_format_error);

	tc = tl_tcase(s, "contracts", 0);
	TL_TESTS(tc, test_annotations_load, test_unsupported_format, test_still_refused);
	return s;
}

int
main(void)
{
	return tl_suite_run_in(schema_suite(), scratch) != 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}

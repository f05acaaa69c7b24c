/*
 * ctl_export.c — oncegatectl export --since TIME --format jsonl|csv.
 *
 * Every decision taken since TIME, oldest first: a person's vote (who,
 * when, through the approval page or through the API client that vouched
 * for the person), or a run the contract's rules approved. Each row names
 * the run (client, key, contract), the decision and its reason, and the
 * hashes the record keeps: the draft decided on, the model's output, the
 * approver's correction, the contract and the effect enqueued.
 *
 * jsonl: one JSON object a line, the columns below as members (null when
 * a row has none). csv: RFC 4180 — a header line, CRLF line ends, a field
 * holding a comma, a quote, CR or LF quoted, quotes doubled; text is
 * written as stored (UTF-8), nothing escaped or cut. Read a page at a
 * time, so an export of any length runs in bounded memory.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl_export.h"
#include "gate.h"

#define EXPORT_PAGE 2000

/* The columns, in order: the member names of a row of gate_export_page. */
static const char *const columns[] = {
	"at", "client", "key", "contract", "approval_id", "subject", "via", "via_client",
	"decision", "reason", "final", "edited", "draft_hash", "output_hash",
	"edited_output_hash", "contract_hash", "effect_hash", NULL,
};

static void
csv_field(const char *s)
{
	if (strpbrk(s, ",\"\r\n") == NULL) {
		fputs(s, stdout);
		return;
	}
	putchar('"');
	for (; *s != '\0'; s++) {
		if (*s == '"')
			putchar('"');
		putchar(*s);
	}
	putchar('"');
}

static void
csv_row(const json_t *row)
{
	size_t i;

	for (i = 0; columns[i] != NULL; i++) {
		const json_t *v = json_object_get(row, columns[i]);

		if (i > 0)
			putchar(',');
		if (json_is_string(v))
			csv_field(json_string_value(v));
		else if (json_is_boolean(v))
			fputs(json_is_true(v) ? "true" : "false", stdout);
	}
	fputs("\r\n", stdout);
}

/* One line of JSON with every column, in order. */
static int
jsonl_row(const json_t *row)
{
	json_t *o = json_object();
	char *s;
	size_t i;

	for (i = 0; o != NULL && columns[i] != NULL; i++) {
		json_t *v = json_object_get(row, columns[i]);

		json_object_set_new(o, columns[i], v != NULL ? json_incref(v) : json_null());
	}
	s = o != NULL ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(o);
	if (s == NULL)
		return -1;
	puts(s);
	free(s);
	return 0;
}

/* --since as the statement takes it: an RFC 3339 time as given, a date
 * as its midnight UTC, a duration as the time it reaches back to. */
static void
since_text(const char *s, long long ago, char *out, size_t outlen)
{
	time_t t;
	struct tm tm;

	if (strchr(s, '-') != NULL) {
		snprintf(out, outlen, "%s%s", s, strlen(s) == 10 ? "T00:00:00Z" : "");
		return;
	}
	t = time(NULL) - (time_t)ago;
	gmtime_r(&t, &tm);
	strftime(out, outlen, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Every page, each row written as it comes; OG_OK or the failure. */
static enum og_rc
export_pages(struct ctl *ctl, const char *since, bool csv, long long *rows)
{
	long long after_us = 0;
	char *after_seq = NULL;
	enum og_rc rc = OG_OK;

	for (;;) {
		json_t *page = NULL, *row;
		size_t i, n;

		if ((rc = gate_export_page(ctl->db, since, after_us, after_seq, EXPORT_PAGE,
		                           &page)) != OG_OK)
			break;
		n = json_array_size(page);
		json_array_foreach(page, i, row) {
			if (csv)
				csv_row(row);
			else if (jsonl_row(row) != 0)
				rc = OG_ERROR;
		}
		*rows += (long long)n;
		free(after_seq);
		after_seq = NULL;
		if (n == EXPORT_PAGE) {
			row = json_array_get(page, n - 1);
			after_us = (long long)json_integer_value(json_object_get(row, "at_us"));
			after_seq = strdup(json_string_value(json_object_get(row, "seq")));
			if (after_seq == NULL)
				rc = OG_ERROR;
		}
		json_decref(page);
		if (rc != OG_OK || after_seq == NULL)
			break;
	}
	free(after_seq);
	return rc;
}

int
ctl_export(struct ctl *ctl, int argc, char **argv)
{
	const char *since = NULL, *format = NULL;
	const struct ctl_opt opts[] = {
		{ "since", CTL_OPT_TEXT, &since, 0, NULL },
		{ "format", CTL_OPT_TEXT, &format, 0, NULL },
		{ NULL, 0, NULL, 0, NULL },
	};
	char from[64] = "1970-01-01T00:00:00Z";
	long long ago = 0, rows = 0;
	enum og_rc rc;
	size_t i;

	if (ctl_options(ctl, argc, argv, opts, false) != 0)
		return EXIT_USAGE;
	if (optind != argc || format == NULL ||
	    (strcmp(format, "jsonl") != 0 && strcmp(format, "csv") != 0))
		return ctl_usage(ctl);
	if (since != NULL) {
		if (ctl_time(ctl, "--since", since, &ago) != 0)
			return EXIT_USAGE;
		since_text(since, ago, from, sizeof(from));
	}
	if (ctl_db(ctl) != 0)
		return EXIT_UNAVAILABLE;
	if (strcmp(format, "csv") == 0) {
		for (i = 0; columns[i] != NULL; i++)
			printf("%s%s", i > 0 ? "," : "", columns[i]);
		fputs("\r\n", stdout);
	}
	rc = export_pages(ctl, from, strcmp(format, "csv") == 0, &rows);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "oncegatectl: export: could not write the output\n");
		return EXIT_REFUSED;
	}
	if (rc != OG_OK) {
		fprintf(stderr, "oncegatectl: export: stopped after %lld decisions: %s\n", rows,
		        db_error(ctl->db));
		return ctl_exit(rc);
	}
	fprintf(stderr, "oncegatectl: export: %lld decisions since %s\n", rows, from);
	return EXIT_SUCCESS;
}

/*
 * fuzz_log.c — the decision logger (src/lib/log.c): log_event with
 * input-derived fields into a scratch file, and log_redact on free text.
 *
 * Input: NUL-separated fields. The first is a control field: its bytes give
 * the level, which string fields are left NULL, and the version, attempt
 * and status numbers. The following fields fill the string members of
 * struct log_fields in order, the event name first.
 *
 * Properties: each event is one line, at most OG_LOG_LINE_MAX bytes, that
 * parses as a JSON object; free text (reason, detail, hint) never keeps a
 * run of 32 token characters (a key or a token) in the line or after
 * log_redact; log_redact only shortens text.
 */
#define _GNU_SOURCE /* asprintf */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "caps.h"
#include "log.h"
#include "fuzzlib.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NSTR 24

static char *path;
static int rfd = -1;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	path = fuzzlib_tempfile("log", "decisions.log");
	if (log_open(path, LOG_LEVEL_DEBUG, "fuzz") != 0 ||
	    (rfd = open(path, O_RDWR | O_CLOEXEC)) < 0) {
		fprintf(stderr, "fuzz: cannot open %s\n", path);
		abort();
	}
	return 0;
}

static void
check_redact(const char *s)
{
	char *copy = strdup(s);
	size_t runs;

	if (copy == NULL)
		abort();
	runs = log_redact(copy);
	FUZZ_ASSERT(strlen(copy) <= strlen(s));
	/* (a masked run may read the same: "Bearer **") */
	if (runs == 0)
		FUZZ_ASSERT(strcmp(copy, s) == 0);
	FUZZ_ASSERT(!fuzzlib_token_run(copy, 32));
	free(copy);
}

/* The line log_event wrote; the file is emptied for the next one. */
static char *
read_line(size_t *len)
{
	off_t end = lseek(rfd, 0, SEEK_END);
	char *buf;

	FUZZ_ASSERT(end >= 0);
	buf = malloc((size_t)end + 1);
	if (buf == NULL)
		abort();
	FUZZ_ASSERT(pread(rfd, buf, (size_t)end, 0) == end);
	buf[end] = '\0';
	FUZZ_ASSERT(ftruncate(rfd, 0) == 0);
	*len = (size_t)end;
	return buf;
}

static void
check_free_text(const json_t *line, const char *name)
{
	const char *v = json_string_value(json_object_get(line, name));

	if (v != NULL)
		FUZZ_ASSERT(!fuzzlib_token_run(v, 32));
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzzlib_in in = { data, size };
	char *ctl = fuzzlib_field(&in), *str[NSTR], *text;
	size_t ctllen = strlen(ctl), len, i;
	uint32_t nulls = 0;
	struct log_fields f;
	const char **members[NSTR] = {
		NULL, &f.client, &f.key, &f.correlation_id, &f.workflow_version, &f.contract,
		&f.trigger, &f.payload_hash, &f.state_from, &f.state_to, &f.actor,
		&f.decision, &f.approval_id, &f.effect_id, &f.target, &f.provider_id,
		&f.error_class, &f.model, &f.validation, &f.reason, &f.detail, &f.hint,
		&f.request_id, &f.method,
	};
	enum log_level level = (enum log_level)((ctllen > 0 ? (uint8_t)ctl[0] : 1) % 6);
	json_t *line;

	memset(&f, 0, sizeof(f));
	for (i = 1; i < 4 && i < ctllen; i++)
		nulls = nulls << 8 | (uint8_t)ctl[i];
	if (ctllen > 4)
		f.version = (long long)(int8_t)ctl[4] * 1000003LL;
	if (ctllen > 5)
		f.attempt = (int8_t)ctl[5];
	if (ctllen > 6)
		f.status = (int8_t)ctl[6] * 7;
	f.path = "/v1/runs/{key}";
	for (i = 0; i < NSTR; i++) {
		str[i] = fuzzlib_field(&in);
		if (i > 0 && !(nulls & 1u << i))
			*members[i] = str[i];
	}
	check_redact(str[0]);
	check_redact(f.reason != NULL ? f.reason : "");
	check_redact(f.detail != NULL ? f.detail : "");

	log_event(level, nulls & 1u ? NULL : str[0], &f);
	text = read_line(&len);
	FUZZ_ASSERT(len > 0 && len <= OG_LOG_LINE_MAX);
	FUZZ_ASSERT(text[len - 1] == '\n' && strchr(text, '\n') == text + len - 1);
	line = json_loadb(text, len - 1, JSON_REJECT_DUPLICATES, NULL);
	FUZZ_ASSERT(json_is_object(line));
	check_free_text(line, "reason");
	check_free_text(line, "detail");
	check_free_text(line, "hint");
	json_decref(line);
	free(text);

	/* no fields at all */
	log_event(LOG_LEVEL_ALERT, str[0], NULL);
	text = read_line(&len);
	FUZZ_ASSERT(len > 0 && text[len - 1] == '\n');
	free(text);

	for (i = 0; i < NSTR; i++)
		free(str[i]);
	free(ctl);
	return 0;
}

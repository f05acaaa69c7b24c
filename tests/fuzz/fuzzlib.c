/*
 * fuzzlib.c — helpers shared by the libFuzzer targets (see fuzzlib.h).
 */
#define _GNU_SOURCE /* asprintf */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzzlib.h"

#ifndef OG_FUZZ_SRCDIR
#define OG_FUZZ_SRCDIR "."
#endif

void
fuzzlib_fail(const char *file, int line, const char *what)
{
	fprintf(stderr, "%s:%d: fuzz property failed: %s\n", file, line, what);
	abort();
}

const char *
fuzzlib_srcdir(void)
{
	const char *s = getenv("ONCEGATE_SRCDIR");

	return s != NULL && *s != '\0' ? s : OG_FUZZ_SRCDIR;
}

char *
fuzzlib_field(struct fuzzlib_in *in)
{
	const uint8_t *nul = memchr(in->p, '\0', in->n);
	size_t len = nul != NULL ? (size_t)(nul - in->p) : in->n;
	char *s = malloc(len + 1);

	if (s == NULL)
		abort();
	memcpy(s, in->p, len);
	s[len] = '\0';
	/* skip the separator too */
	len += nul != NULL;
	in->p += len;
	in->n -= len;
	return s;
}

uint8_t
fuzzlib_byte(struct fuzzlib_in *in)
{
	char *f = fuzzlib_field(in);
	uint8_t b = (uint8_t)f[0];

	free(f);
	return b;
}

bool
fuzzlib_done(const struct fuzzlib_in *in)
{
	return in->n == 0;
}

#define TEMPDIRS_MAX 4

static char *tempdirs[TEMPDIRS_MAX];

/* At exit: the scratch directories and the files the targets left in them
 * (they write no subdirectories). */
static void
tempdirs_remove(void)
{
	size_t i;

	for (i = 0; i < TEMPDIRS_MAX && tempdirs[i] != NULL; i++) {
		DIR *d = opendir(tempdirs[i]);
		struct dirent *de;

		while (d != NULL && (de = readdir(d)) != NULL)
			if (de->d_name[0] != '.')
				(void)unlinkat(dirfd(d), de->d_name, 0);
		if (d != NULL)
			closedir(d);
		(void)rmdir(tempdirs[i]);
		free(tempdirs[i]);
		tempdirs[i] = NULL;
	}
}

char *
fuzzlib_tempdir(const char *what)
{
	const char *tmp = getenv("TMPDIR");
	struct stat st;
	char *dir;
	size_t i;

	/* tmpfs when there is one: the config and contract targets write a
	 * file per input */
	if (tmp == NULL || *tmp == '\0')
		tmp = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
	if (asprintf(&dir, "%s/og-fuzz-%s.XXXXXX", tmp, what) < 0 || mkdtemp(dir) == NULL) {
		fprintf(stderr, "fuzz: cannot make a scratch directory in %s: %s\n", tmp,
		        strerror(errno));
		abort();
	}
	for (i = 0; i < TEMPDIRS_MAX && tempdirs[i] != NULL; i++)
		;
	if (i == 0)
		atexit(tempdirs_remove);
	if (i < TEMPDIRS_MAX && (tempdirs[i] = strdup(dir)) == NULL)
		abort();
	return dir;
}

char *
fuzzlib_tempfile(const char *what, const char *name)
{
	char *dir = fuzzlib_tempdir(what), *path;

	if (asprintf(&path, "%s/%s", dir, name) < 0)
		abort();
	free(dir);
	return path;
}

void
fuzzlib_write(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	const char *p = data;
	ssize_t n;

	if (fd < 0) {
		fprintf(stderr, "fuzz: %s: %s\n", path, strerror(errno));
		abort();
	}
	while (len > 0) {
		n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "fuzz: writing %s: %s\n", path, strerror(errno));
			abort();
		}
		p += n;
		len -= (size_t)n;
	}
	close(fd);
}

bool
fuzzlib_token_run(const char *s, size_t n)
{
	size_t run = 0;

	for (; *s != '\0'; s++) {
		char c = *s;

		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		    (c >= '0' && c <= '9') || c == '_' || c == '-') {
			if (++run >= n)
				return true;
		} else {
			run = 0;
		}
	}
	return false;
}

bool
fuzzlib_known(const char *id)
{
	const char *k = getenv("OG_FUZZ_KNOWN");
	size_t n = strlen(id);

	while (k != NULL && *k != '\0') {
		size_t len = strcspn(k, ",");

		if (len == n && strncmp(k, id, n) == 0)
			return true;
		k += len;
		k += *k == ',';
	}
	return false;
}

void
fuzzlib_check_errors(const json_t *errors)
{
	size_t i;
	json_t *e;

	FUZZ_ASSERT(json_is_array(errors));
	FUZZ_ASSERT(json_array_size(errors) <= 50);
	json_array_foreach(errors, i, e) {
		const char *path = json_string_value(json_object_get(e, "path"));

		FUZZ_ASSERT(path != NULL && (path[0] == '\0' || path[0] == '/'));
		FUZZ_ASSERT(json_is_string(json_object_get(e, "rule")));
		FUZZ_ASSERT(json_is_string(json_object_get(e, "message")));
	}
}

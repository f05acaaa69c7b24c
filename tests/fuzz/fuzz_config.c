/*
 * fuzz_config.c — the config loader (src/lib/config.c): the input is
 * written to a scratch file and loaded over the defaults with config_load,
 * [target NAME] sections included.
 *
 * Properties: a file holding a NUL byte never loads (the loader promises
 * "NUL byte in line"); a loaded config passes config_validate, its targets
 * are well named and found by name, and config_dump masks the secrets.
 */
#define _GNU_SOURCE /* asprintf */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fuzzlib.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *path;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	path = fuzzlib_tempfile("config", "oncegate.conf");
	return 0;
}

/* The value config_dump printed for name (at the start of a line). */
static const char *
dumped(const char *dump, const char *name, char *out, size_t outlen)
{
	size_t n = strlen(name);
	const char *p = dump;

	for (; p != NULL; p = strchr(p, '\n'), p = p != NULL ? p + 1 : NULL)
		if (strncmp(p, name, n) == 0 && strncmp(p + n, " = ", 3) == 0) {
			p += n + 3;
			snprintf(out, outlen, "%.*s", (int)strcspn(p, "\n"), p);
			return out;
		}
	return NULL;
}

static void
check_loaded(const struct config *c)
{
	char err[512], val[64], *dump = NULL;
	size_t dumplen = 0;
	FILE *f;
	int i;

	FUZZ_ASSERT(config_validate(c, err, sizeof(err)) == 0);
	FUZZ_ASSERT(c->ntargets >= 0 && c->ntargets <= CONFIG_TARGETS_MAX);
	for (i = 0; i < c->ntargets; i++) {
		const char *name = c->targets[i].name;
		size_t n = strlen(name);

		FUZZ_ASSERT(n >= 1 && n <= 64);
		FUZZ_ASSERT(strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") == n);
		FUZZ_ASSERT(config_target(c, name) == &c->targets[i]);
	}
	FUZZ_ASSERT(config_target(c, "no such target!") == NULL);
	(void)config_callback_allowed(c, "http://127.0.0.1:5678/webhook/x");
	(void)config_callback_allowed(c, "HTTPS://Example.COM:443?x");
	(void)config_callback_allowed(c, "http://user@127.0.0.1:5678/");

	f = open_memstream(&dump, &dumplen);
	FUZZ_ASSERT(f != NULL);
	config_dump(c, f);
	FUZZ_ASSERT(fclose(f) == 0);
	FUZZ_ASSERT(dumped(dump, "csrf_secret", val, sizeof(val)) != NULL);
	FUZZ_ASSERT(c->csrf_secret[0] == '\0' ? val[0] == '\0' : strcmp(val, "[secret]") == 0);
	FUZZ_ASSERT(dumped(dump, "database", val, sizeof(val)) != NULL);
	FUZZ_ASSERT(c->database[0] == '\0' ? val[0] == '\0' : strcmp(val, "[secret]") == 0);
	free(dump);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config c;
	char err[1024];
	int rc;

	fuzzlib_write(path, data, size);
	config_defaults(&c);
	err[0] = '\0';
	rc = config_load(path, &c, err, sizeof(err));
	if (rc == 0) {
		if (!fuzzlib_known("config-nul"))
			FUZZ_ASSERT(memchr(data, '\0', size) == NULL);
		check_loaded(&c);
	} else {
		/* every failure names the file */
		FUZZ_ASSERT(strncmp(err, path, strlen(path)) == 0);
	}
	config_free(&c);
	return 0;
}

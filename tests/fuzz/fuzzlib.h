/*
 * fuzzlib.h — what the libFuzzer targets in tests/fuzz share: the checkout
 * (for the real contracts/ and templates/), NUL-separated input fields,
 * scratch files, and an assertion that a fuzzer reports as a crash.
 */
#ifndef OG_FUZZLIB_H
#define OG_FUZZLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

/* A broken property aborts with the condition and its place, so libFuzzer
 * keeps the input as a crash and prints the stack. */
#define FUZZ_ASSERT(cond)                                                   \
	do {                                                                \
		if (!(cond))                                                \
			fuzzlib_fail(__FILE__, __LINE__, #cond);            \
	} while (0)

void fuzzlib_fail(const char *file, int line, const char *what)
	__attribute__((noreturn));

/* The oncegate checkout: $ONCEGATE_SRCDIR, else the one build.sh compiled
 * the target from. */
const char *fuzzlib_srcdir(void);

/* The input read as fields separated by NUL bytes (C strings cannot hold
 * one, so NUL is the natural separator and seed files stay readable). */
struct fuzzlib_in {
	const uint8_t *p;
	size_t n;
};

/* The next field as a fresh NUL-terminated string, "" once the input is
 * used up; never NULL (out of memory aborts). */
char *fuzzlib_field(struct fuzzlib_in *in);
/* The next field's first byte, 0 once the input is used up. */
uint8_t fuzzlib_byte(struct fuzzlib_in *in);
bool fuzzlib_done(const struct fuzzlib_in *in);

/* A fresh scratch directory under $TMPDIR (else /dev/shm, else /tmp),
 * made at start-up and removed with its files at exit. */
char *fuzzlib_tempdir(const char *what);
/* The path of a file `name` in a fresh scratch directory (fuzzlib_tempdir),
 * not made yet (malloc'd). */
char *fuzzlib_tempfile(const char *what, const char *name);
/* Replaces path's content with data[0..len); aborts on failure. */
void fuzzlib_write(const char *path, const void *data, size_t len);

/* Is finding `id` listed in $OG_FUZZ_KNOWN (comma-separated)? Lets one
 * fuzz past an open finding whose property would otherwise fire at once. */
bool fuzzlib_known(const char *id);

/* Is there a run of at least n characters of [A-Za-z0-9_-] in s? */
bool fuzzlib_token_run(const char *s, size_t n);

/* The error list a contract validation returns is well formed: an array
 * of at most 50 {path (empty or a JSON pointer), rule, message}. */
void fuzzlib_check_errors(const json_t *errors);

#endif

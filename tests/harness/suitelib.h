/*
 * suitelib.h — what every Check suite's main shares, unit and integration
 * alike: running its Suite.
 */
#ifndef OG_SUITELIB_H
#define OG_SUITELIB_H

#include <stdbool.h>
#include <stdlib.h>
#include <check.h>

/* A new test case NAME of suite s (added to it now: the suite runs its
 * cases in the order they were made), each test limited to timeout_s
 * seconds (0: Check's default). */
TCase *tl_tcase(Suite *s, const char *name, double timeout_s);

/* Adds each test of tests, a NULL-ended list, to tc in order: what
 * TL_TESTS(tc, test_a, test_b, ...) writes, one call for a test case's
 * whole list. */
void tl_add_tests(TCase *tc, const TTest *const *tests);
#define TL_TESTS(tc, ...) tl_add_tests((tc), (const TTest *const[]){__VA_ARGS__, NULL})

/* Runs the Check suite (the output CK_VERBOSITY asks for; normal by
 * default), in a child per test unless nofork (then the tests share the
 * process's state), and frees it. Returns how many tests failed. When
 * ONCEGATE_TEST_TIMES names a directory, each test's duration goes to
 * Check's XML log DIR/PROGRAM.xml there. */
int tl_suite_run(Suite *s, bool nofork);

/* A suite's whole main: runs the Suite suite_fn() makes (tl_suite_run,
 * nofork as there); EXIT_FAILURE when a test failed. */
#define TL_SUITE_MAIN(suite_fn, nofork)                                      \
	int main(void)                                                       \
	{                                                                    \
		int failed_ = tl_suite_run(suite_fn(), nofork);              \
		return failed_ != 0 ? EXIT_FAILURE : EXIT_SUCCESS;           \
	}

/* tl_suite_run (forking) in a scratch directory made from the mkdtemp
 * template scratch (filled in: the tests write below it), removed with
 * everything in it afterwards. -1 when it cannot be made. */
int tl_suite_run_in(Suite *s, char *scratch);

#endif

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
/* The NULL-ended list of tests a struct tl_case takes. */
#define TL_LIST(...) ((const TTest *const[]){__VA_ARGS__, NULL})

/* A loop test: run for _i from 0 to end - 1. */
struct tl_loop {
	const TTest *test;	/* NULL ends a list */
	int end;
};
/* The list of loop tests a struct tl_case takes. */
#define TL_LOOPS(...) ((const struct tl_loop[]){__VA_ARGS__, {NULL, 0}})

/* Rows of a suite's table of cases: a text given and what is expected of
 * it (a problem's code, a status, a message; NULL where the row says so);
 * or whether it is accepted. */
struct tl_given {
	const char *given;
	const char *want;
};
struct tl_verdict {
	const char *given;
	bool ok;
};

/* A test case of a suite written as a table (TL_SUITE): made, fixtures
 * set and tests added in the order of these fields. */
struct tl_case {
	const char *name;	/* NULL ends the table */
	double timeout_s;	/* each test's limit (0: Check's default) */
	/* How the case is made: NULL is tl_tcase; dl_tcase for a case whose
	 * tests run dispatchers (with its checked fixture). */
	TCase *(*make)(Suite *s, const char *name, double timeout_s);
	SFun unchecked_setup;	/* in the runner's process, once (NULL: none) */
	SFun unchecked_teardown;
	SFun setup;		/* around each test (NULL: none) */
	SFun teardown;
	const struct tl_loop *loops; /* TL_LOOPS({test_a, end}, ...), first */
	const TTest *const *tests; /* TL_LIST(test_a, ...), after the loops */
};

/* The suite NAME of the cases in the table cases (ended by a NULL name),
 * in that order. */
Suite *tl_suite_of(const char *name, const struct tl_case *cases);

/* Defines static Suite *suite_fn(void), which makes the suite suite_name
 * of the test cases given (struct tl_case initialisers, in order):
 *     TL_SUITE(x_suite, "x", {"cases", 60, .tests = TL_LIST(test_a, test_b)})
 */
#define TL_SUITE(suite_fn, suite_name, ...)                                          \
	static Suite *suite_fn(void)                                                 \
	{                                                                            \
		const struct tl_case suite_cases_[] = {__VA_ARGS__, {.name = NULL}}; \
		return tl_suite_of((suite_name), suite_cases_);                      \
	}

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

/* A main that calls main_fn with a struct of type type made of the
 * designated initialisers given (a suite's description), and returns what
 * it returns: TL_STACK_MAIN and DL_SUITE_MAIN. */
#define TL_MAIN_OF(type, main_fn, ...)                             \
	int main(void)                                             \
	{                                                          \
		static const type main_of_suite_ = {__VA_ARGS__}; \
		return main_fn(&main_of_suite_);                  \
	}

/* tl_suite_run (forking) in a scratch directory made from the mkdtemp
 * template scratch (filled in: the tests write below it), removed with
 * everything in it afterwards. -1 when it cannot be made. */
int tl_suite_run_in(Suite *s, char *scratch);

#endif

/*
 * suitelib.h — what every Check suite's main shares, unit and integration
 * alike: running its Suite.
 */
#ifndef OG_SUITELIB_H
#define OG_SUITELIB_H

#include <stdbool.h>
#include <check.h>

/* Runs the Check suite (the output CK_VERBOSITY asks for; normal by
 * default), in a child per test unless nofork (then the tests share the
 * process's state), and frees it. Returns how many tests failed. When
 * ONCEGATE_TEST_TIMES names a directory, each test's duration goes to
 * Check's XML log DIR/PROGRAM.xml there. */
int tl_suite_run(Suite *s, bool nofork);

/* tl_suite_run (forking) in a scratch directory made from the mkdtemp
 * template scratch (filled in: the tests write below it), removed with
 * everything in it afterwards. -1 when it cannot be made. */
int tl_suite_run_in(Suite *s, char *scratch);

#endif

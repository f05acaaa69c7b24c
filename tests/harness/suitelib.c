/*
 * suitelib.c — see suitelib.h.
 */
#define _GNU_SOURCE /* nftw, program_invocation_short_name */
#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include "suitelib.h"

TCase *
tl_tcase(Suite *s, const char *name, double timeout_s)
{
	TCase *tc = tcase_create(name);

	if (timeout_s > 0)
		tcase_set_timeout(tc, timeout_s);
	suite_add_tcase(s, tc);
	return tc;
}

void
tl_add_tests(TCase *tc, const TTest *const *tests)
{
	for (; *tests != NULL; tests++)
		tcase_add_test(tc, *tests);
}

Suite *
tl_suite_of(const char *name, const struct tl_case *cases)
{
	Suite *s = suite_create(name);
	const struct tl_loop *loop;
	TCase *tc;

	for (; cases->name != NULL; cases++) {
		tc = cases->make != NULL ? cases->make(s, cases->name, cases->timeout_s)
		                         : tl_tcase(s, cases->name, cases->timeout_s);
		if (cases->unchecked_setup != NULL || cases->unchecked_teardown != NULL)
			tcase_add_unchecked_fixture(tc, cases->unchecked_setup,
			                            cases->unchecked_teardown);
		if (cases->setup != NULL || cases->teardown != NULL)
			tcase_add_checked_fixture(tc, cases->setup, cases->teardown);
		for (loop = cases->loops; loop != NULL && loop->test != NULL; loop++)
			tcase_add_loop_test(tc, loop->test, 0, loop->end);
		if (cases->tests != NULL)
			tl_add_tests(tc, cases->tests);
	}
	return s;
}

int
tl_suite_run(Suite *s, bool nofork)
{
	SRunner *sr = srunner_create(s);
	const char *times = getenv("ONCEGATE_TEST_TIMES");
	char xml[4096];
	int failed;

	if (nofork)
		srunner_set_fork_status(sr, CK_NOFORK);
	/* Each test's duration, in Check's XML log named after the program. */
	if (times != NULL && times[0] != '\0' &&
	    snprintf(xml, sizeof(xml), "%s/%s.xml", times, program_invocation_short_name) <
	        (int)sizeof(xml))
		srunner_set_xml(sr, xml);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed;
}

static int
rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int
tl_suite_run_in(Suite *s, char *scratch)
{
	int failed;

	if (mkdtemp(scratch) == NULL) {
		perror("mkdtemp");
		srunner_free(srunner_create(s));
		return -1;
	}
	failed = tl_suite_run(s, false);
	nftw(scratch, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return failed;
}

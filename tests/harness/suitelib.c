/*
 * suitelib.c — see suitelib.h.
 */
#include <check.h>
#include "suitelib.h"

int
tl_suite_run(Suite *s, bool nofork)
{
	SRunner *sr = srunner_create(s);
	int failed;

	if (nofork)
		srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed;
}

/*
 * rc.c — the one result type's names; see rc.h.
 */
#include <stdio.h>
#include <string.h>

#include "rc.h"

const char *
og_rc_name(enum og_rc rc)
{
	static const char *const names[] = {
		[OG_OK] = "ok",
		[OG_CLAIMED] = "claimed",
		[OG_DUPLICATE] = "duplicate",
		[OG_MISMATCH] = "mismatch",
		[OG_NOT_FOUND] = "not_found",
		[OG_EXISTS] = "exists",
		[OG_AMBIGUOUS] = "ambiguous",
		[OG_LEASE_LOST] = "lease_lost",
		[OG_CAP_REACHED] = "cap_reached",
		[OG_NOT_PENDING] = "not_pending",
		[OG_USED] = "used",
		[OG_NOT_AWAITING] = "not_awaiting",
		[OG_CONFLICT] = "conflict",
		[OG_DENIED] = "denied",
		[OG_BAD_NAME] = "bad_name",
		[OG_BAD_INPUT] = "bad_input",
		[OG_WRONG_STATE] = "wrong_state",
		[OG_NOT_UNDELIVERED] = "not_undelivered",
		[OG_CHANGED] = "changed",
		[OG_REPLAYED] = "replayed",
		[OG_WINDOW_CLOSED] = "window_closed",
		[OG_NOT_FINISHED] = "not_finished",
		[OG_NO_PAYLOAD] = "no_payload",
		[OG_NO_APPROVERS] = "no_approvers",
		[OG_DONE_ALREADY] = "done_already",
		[OG_NEEDS_FORCE] = "needs_force",
		[OG_UNAVAILABLE] = "unavailable",
		[OG_ERROR] = "error",
	};

	return (unsigned)rc < sizeof(names) / sizeof(names[0]) && names[rc] != NULL ? names[rc]
	                                                                            : "error";
}

int
og_name_index(const char *const *names, int n, const char *word)
{
	int i;

	for (i = 0; word != NULL && i < n; i++)
		if (names[i] != NULL && strcmp(word, names[i]) == 0)
			return i;
	return -1;
}

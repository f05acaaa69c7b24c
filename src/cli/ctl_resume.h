/*
 * ctl_resume.h — bulk resume: a selection (--select FILE, --dead-letters
 * with filters) checked whole and run as a job, or a job continued (--job).
 */
#ifndef OG_CTL_RESUME_H
#define OG_CTL_RESUME_H

#include <stdbool.h>

#include "ctl.h"

/* Is this a bulk resume (--select, --dead-letters or --job)? */
bool ctl_resume_is_bulk(int argc, char **argv);
/* `resume --select FILE | --dead-letters [filters] | --job JOB`. */
int ctl_resume_bulk(struct ctl *ctl, int argc, char **argv);

#endif

/*
 * ctl_resume.h — the resume command: one effect (ctl_repair.c), or in
 * bulk a selection (--select FILE, --dead-letters with filters) checked
 * whole and run as a job, or a job continued (--job).
 */
#ifndef OG_CTL_RESUME_H
#define OG_CTL_RESUME_H

#include "ctl.h"

/* `resume`: a bulk resume (--select FILE | --dead-letters [filters] |
 * --job JOB) here, one EFFECT by ctl_repair_one (ctl_repair.h). */
ctl_command_fn ctl_resume;

#endif

/*
 * ctl_repair.h — oncegatectl's repair commands: dead
 * letters, reconcile, resume, reject, cancel, approval revoke and list. The SQL is
 * in src/lib/repair.c; these parse, print and log.
 */
#ifndef OG_CTL_REPAIR_H
#define OG_CTL_REPAIR_H

#include "ctl.h"

int ctl_deadletter(struct ctl *ctl, int argc, char **argv);
int ctl_reconcile(struct ctl *ctl, int argc, char **argv);
int ctl_resume(struct ctl *ctl, int argc, char **argv);
int ctl_reject(struct ctl *ctl, int argc, char **argv);
int ctl_approval(struct ctl *ctl, int argc, char **argv);
int ctl_cancel(struct ctl *ctl, int argc, char **argv);

#endif

/*
 * ctl_audit.h — oncegatectl's explain, report and purge.
 * The SQL is in src/lib/audit.c.
 */
#ifndef OG_CTL_AUDIT_H
#define OG_CTL_AUDIT_H

#include "ctl.h"

int ctl_audit_explain(struct ctl *ctl, int argc, char **argv);
int ctl_audit_report(struct ctl *ctl, int argc, char **argv);
int ctl_audit_purge(struct ctl *ctl, int argc, char **argv);

#endif

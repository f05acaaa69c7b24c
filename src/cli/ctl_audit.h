/*
 * ctl_audit.h — oncegatectl's explain, report and purge.
 * The SQL is in src/lib/audit.c.
 */
#ifndef OG_CTL_AUDIT_H
#define OG_CTL_AUDIT_H

#include "ctl.h"

ctl_command_fn ctl_audit_explain;
ctl_command_fn ctl_audit_report;
ctl_command_fn ctl_audit_purge;

#endif

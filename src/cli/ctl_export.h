/*
 * ctl_export.h — oncegatectl export: the decisions, for an auditor's
 * spreadsheet or archive. The SQL is in src/lib/gate.c.
 */
#ifndef OG_CTL_EXPORT_H
#define OG_CTL_EXPORT_H

#include "ctl.h"

ctl_command_fn ctl_export;

#endif

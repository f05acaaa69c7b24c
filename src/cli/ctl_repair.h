/*
 * ctl_repair.h — oncegatectl's repair commands: reconcile, resume (one
 * effect; bulk resume is ctl_resume.c), reject, cancel, approval revoke and
 * list. The SQL is in src/lib/repair.c; these parse, print and log.
 *
 * A refusal of any of them is logged as `operator.refused` with an
 * error_class naming the kind of refusal; the helpers below are shared with
 * bulk resume so that its refusals read the same.
 */
#ifndef OG_CTL_REPAIR_H
#define OG_CTL_REPAIR_H

#include "ctl.h"
#include "repair.h"

/* operator_actions' CHECKs, told before the database refuses them. */
#define CTL_REPAIR_REASON_MAX 1000

/* What a command knows when it logs: its name and the operator's words. */
struct ctl_repair_act {
	const char *cmd;
	const char *op;
	const char *reason;
};

/* The error_class of a refusal for a repair result. */
const char *ctl_repair_code(enum og_rc rc);
/* Logs and prints a refusal ("... refused: why. Nothing was changed.");
 * returns exit_code. out (what the refused change was about) may be NULL. */
int ctl_repair_refuse(struct ctl *ctl, const struct ctl_repair_act *a, const char *code,
                      const char *why, const struct repair_out *out, int exit_code);
/* --reason is required for every change, within operator_actions' limits:
 * 0, or the exit code of the refusal. */
int ctl_repair_check_reason(struct ctl *ctl, struct ctl_repair_act *a);
/* The decision-log line of a change. */
void ctl_repair_log_change(struct ctl *ctl, const char *event, const struct ctl_repair_act *a,
                           const struct repair_out *o, const char *provider_id,
                           const char *detail);

/* reconcile, resume (one effect), reject and cancel: the command named by
 * ctl->command. */
ctl_command_fn ctl_repair_one;
/* approval list | revoke ID | resend ID. */
ctl_command_fn ctl_repair_approval;

#endif

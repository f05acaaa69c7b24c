/*
 * ctl_admin.h — oncegatectl's migrate, client, config and sends (the kill
 * switch, also spelt kill-switch engage|release|status).
 */
#ifndef OG_CTL_ADMIN_H
#define OG_CTL_ADMIN_H

#include "ctl.h"

ctl_command_fn ctl_admin_migrate, ctl_admin_client, ctl_admin_config, ctl_admin_sends,
	ctl_admin_kill_switch;

#endif

/*
 * ctl_admin.h — oncegatectl's migrate, client, config and sends (the kill
 * switch, also spelt kill-switch engage|release|status).
 */
#ifndef OG_CTL_ADMIN_H
#define OG_CTL_ADMIN_H

#include "ctl.h"

int ctl_admin_migrate(struct ctl *ctl, int argc, char **argv);
int ctl_admin_client(struct ctl *ctl, int argc, char **argv);
int ctl_admin_config(struct ctl *ctl, int argc, char **argv);
int ctl_admin_sends(struct ctl *ctl, int argc, char **argv);
int ctl_admin_kill_switch(struct ctl *ctl, int argc, char **argv);

#endif

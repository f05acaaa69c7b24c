/*
 * ctl_deadletter.h — `oncegatectl deadletter list | show ID`: what
 * automatic recovery gave up on, with its evidence.
 */
#ifndef OG_CTL_DEADLETTER_H
#define OG_CTL_DEADLETTER_H

#include "ctl.h"

int ctl_deadletter(struct ctl *ctl, int argc, char **argv);

#endif

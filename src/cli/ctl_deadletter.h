/*
 * ctl_deadletter.h — `oncegatectl deadletter list | show ID`: what
 * automatic recovery gave up on, with its evidence.
 */
#ifndef OG_CTL_DEADLETTER_H
#define OG_CTL_DEADLETTER_H

#include "ctl.h"

ctl_command_fn ctl_deadletter;

#endif

/*
 * ctl_replay.h — oncegatectl's replay: a correction as a new run linked to
 * the original, for one key or a map file of them. The SQL is in
 * src/lib/replay.c.
 */
#ifndef OG_CTL_REPLAY_H
#define OG_CTL_REPLAY_H

#include "ctl.h"

/* A bulk replay stopped before its end (oncegatectl stop, SIGINT) exits
 * EXIT_STOPPED (ctl.h): what was done is done and recorded; `replay
 * --resume JOB` continues. */
ctl_command_fn ctl_replay;

#endif

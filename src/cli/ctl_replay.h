/*
 * ctl_replay.h — oncegatectl's replay, stop, explain, report and purge.
 * The SQL is in src/lib/replay.c and src/lib/audit.c.
 */
#ifndef OG_CTL_REPLAY_H
#define OG_CTL_REPLAY_H

#include "ctl.h"

/* A bulk replay stopped before its end (oncegatectl stop, SIGINT) exits
 * EXIT_STOPPED (ctl.h): what was done is done and recorded; `replay
 * --resume JOB` continues. */

int ctl_replay(struct ctl *ctl, int argc, char **argv);
int ctl_stop(struct ctl *ctl, int argc, char **argv);
int ctl_explain(struct ctl *ctl, int argc, char **argv);
int ctl_report(struct ctl *ctl, int argc, char **argv);
int ctl_purge(struct ctl *ctl, int argc, char **argv);

#endif

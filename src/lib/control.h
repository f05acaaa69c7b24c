/*
 * control.h — the kill-switch row: the one owner of dispatch_control.
 *
 * The row holds the database half of the kill switch (a dispatcher sends
 * only while it is on and its own environment allows actions) and how many
 * due effects the switch has held back. Every function runs in the
 * caller's transaction, if one is open.
 */
#ifndef OG_CONTROL_H
#define OG_CONTROL_H

#include <stdbool.h>

#include "db.h"

/* One row: actions_enabled, changed_at (og_ts), changed_by, reason,
 * blocked_sends, and due (pending effects whose time has come). */
enum db_rc control_status(struct db *db, PGresult **res);

/* The flag and, while it holds sends back (it is off, or env_enabled is
 * false), the number of due effects (column "due", NULL otherwise). */
enum db_rc control_switch(struct db *db, bool env_enabled, PGresult **res);

/* Turns the flag on or off with `reason`, recorded as changed by the
 * session's role (session_user); *was: its value before. DB_ERROR when the
 * row is missing. */
enum db_rc control_set(struct db *db, bool on, const char *reason, bool *was);

/* Adds n sends held back by the switch to blocked_sends: inside the
 * transaction of the outbox_hold that marked them, so each is counted
 * exactly when it is marked. */
enum db_rc control_add_blocked(struct db *db, long long n) __attribute__((warn_unused_result));

#endif

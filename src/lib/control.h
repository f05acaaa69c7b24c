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

/* Turns the flag on or off for `by` with `reason`; *was: its value before.
 * DB_ERROR when the row is missing. */
enum db_rc control_set(struct db *db, bool on, const char *by, const char *reason,
                       bool *was);

/* Due pending effects held back by the switch and not yet marked
 * (effect_id: that one, or NULL: any, up to limit) are marked and added to
 * blocked_sends, each once per hold however many dispatchers see it; the
 * claim clears the mark. How many were new, -1 on a database error. */
long long control_hold(struct db *db, const char *effect_id, int limit);

#endif

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

/* The row as an operator reads it. */
struct control_status {
	bool actions_enabled;     /* sends allowed */
	char changed_at[40];      /* og_ts */
	char *changed_by;         /* NULL: never recorded */
	char *reason;             /* NULL: none given */
	long long blocked_sends;  /* sends the switch has held back, ever */
	long long due;            /* pending effects whose time has come */
};

/* The flag as a dispatcher reads it before sending. */
struct control_flag {
	bool found;               /* the row is there (always, once migrated) */
	bool actions_enabled;     /* false when not found */
	long long due;            /* while it holds sends back, the due effects; else 0 */
};

/* The row into *out (control_status_clear frees it, also after an error).
 * DB_ERROR when the row is missing. */
enum db_rc control_status(struct db *db, struct control_status *out)
	__attribute__((warn_unused_result));
void control_status_clear(struct control_status *s);

/* The flag and, while it holds sends back (it is off, or env_enabled is
 * false), the number of due effects. */
enum db_rc control_switch(struct db *db, bool env_enabled, struct control_flag *out)
	__attribute__((warn_unused_result));

/* Turns the flag on or off with `reason`, recorded as changed by the
 * session's role (session_user); *was: its value before. DB_ERROR when the
 * row is missing. */
enum db_rc control_set(struct db *db, bool on, const char *reason, bool *was);

/* Adds n sends held back by the switch to blocked_sends: inside the
 * transaction of the outbox_hold that marked them, so each is counted
 * exactly when it is marked. */
enum db_rc control_add_blocked(struct db *db, long long n) __attribute__((warn_unused_result));

#endif

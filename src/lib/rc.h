/*
 * rc.h — the one result type of the data and use-case layers (the table
 * owners, decide, dispatch, repair, replay, audit, metrics).
 *
 * OG_OK is success; OG_UNAVAILABLE (the database cannot be reached: try
 * again later) and OG_ERROR (anything else: a bug or a broken invariant)
 * can come from every function; the others say which outcome a function
 * can return in its own comment. The web layer turns a result into an HTTP
 * status in one place (api_fail), the CLI into an exit code in one place
 * (ctl_exit).
 *
 * A leaf: it includes nothing, and the database layer (db.h) translates
 * its own results into this type (og_rc_of), never the other way round.
 */
#ifndef OG_RC_H
#define OG_RC_H

enum og_rc {
	OG_OK = 0,
	OG_CLAIMED,          /* a claim took the run (new, or a reclaim) */
	OG_DUPLICATE,        /* the run exists with the same payload */
	OG_MISMATCH,         /* same key, different payload */
	OG_NOT_FOUND,        /* no such run, effect, dead letter, approval, client */
	OG_EXISTS,           /* already there: an enqueued slot, a client name, a key */
	OG_AMBIGUOUS,        /* a key that several clients use: name the client */
	OG_LEASE_LOST,       /* a compare-and-set matched nothing: the lease or state moved */
	OG_CAP_REACHED,      /* the lease already reaches the claim's cap */
	OG_NOT_PENDING,      /* a challenge decided, voided, revoked or expired */
	OG_USED,             /* a decision: the challenge was used meanwhile */
	OG_NOT_AWAITING,     /* a decision: the run no longer awaits one */
	OG_CONFLICT,         /* another challenge of the run was decided first */
	OG_DENIED,           /* an unknown or revoked API key */
	OG_BAD_NAME,         /* a client name that is not allowed */
	OG_BAD_INPUT,        /* a filter the database cannot read (a timestamp) */
	OG_WRONG_STATE,      /* the state does not allow it (the caller says why) */
	OG_NOT_UNDELIVERED,  /* resume: not known to be undelivered */
	OG_CHANGED,          /* changed by someone else since it was read */
	OG_REPLAYED,         /* resume: the run was replayed; its event is the new run's */
	OG_WINDOW_CLOSED,    /* cancel: not (or no longer) inside a cancellation window */
	OG_NOT_FINISHED,     /* replay: the original is still live */
	OG_NO_PAYLOAD,       /* replay: purged by retention and no payload given */
	OG_NO_APPROVERS,     /* replay: the contract is not loaded or names no approver */
	OG_DONE_ALREADY,     /* a job item that is no longer pending */
	OG_NEEDS_FORCE,      /* replay: the original's effect may have been sent */
	OG_UNAVAILABLE,      /* the database cannot be reached */
	OG_ERROR,            /* anything else */
};

/* Lower-case name ("ok", "not_found", …) for logs and JSON. */
const char *og_rc_name(enum og_rc rc);

/* The index of word in names[0..n), an owner's table of the names of its
 * enum (a state, a decision; a NULL entry names nothing); -1 when word is
 * NULL or none of them. */
int og_name_index(const char *const *names, int n, const char *word);

/*
 * The two functions of a vocabulary over its owner's table names (an array
 * indexed by the enum, every entry set), so that each is written once:
 * OG_NAME_FN defines `const char *fn(type value)`, names[value], or none
 * when value is outside the table; OG_PARSE_FN defines
 * `type fn(const char *word)`, the value word names (og_name_index), or
 * none when word is NULL or names none. A vocabulary that is only written
 * (or only read) defines only the one. Each is written as a declaration,
 * ending with ';' (the function, declared again), and may be static.
 */
#define OG_NAME_FN(fn, type, names, none)                                               \
	const char *fn(type value)                                                      \
	{                                                                               \
		return (unsigned)value < sizeof(names) / sizeof((names)[0]) ? (names)[value] \
		                                                            : (none);        \
	}                                                                               \
	const char *fn(type value)
#define OG_PARSE_FN(fn, type, names, none)                                              \
	type fn(const char *word)                                                       \
	{                                                                               \
		int i = og_name_index(names, (int)(sizeof(names) / sizeof((names)[0])), word); \
                                                                                        \
		return i >= 0 ? (type)i : (none);                                       \
	}                                                                               \
	type fn(const char *word)

#endif

/*
 * chat.h — what the chat door keeps (chat_requests_seen, chat_replies):
 * the signatures of the chat requests accepted, so that one sent again is
 * refused, and the replies owed to a chat after a decision, which the
 * dispatcher sends. The owner of both tables: their SQL is here only.
 */
#ifndef OG_CHAT_H
#define OG_CHAT_H

#include <stdbool.h>

#include "db.h"
#include "rc.h"

/* A seen request is kept this long: past it, its timestamp is outside the
 * window whichever way the sender's clock was off. */
#define CHAT_SEEN_KEEP "15 minutes"
/* A reply is tried this often before it is given up on. */
#define CHAT_REPLY_ATTEMPTS 5

/* Notes the signature (its SHA-256) of a request of chat; OG_OK when it
 * was not seen before, OG_DUPLICATE when it was (a replay). Rows past
 * CHAT_SEEN_KEEP go in the same statement. Commits by itself. */
enum og_rc chat_seen_note(struct db *db, const char *chat, const unsigned char sig_sha256[32])
	__attribute__((warn_unused_result));

/* Queues a reply (JSON text body) to url, sent through target's provider
 * (its reply). Commits by itself. */
enum og_rc chat_reply_queue(struct db *db, const char *chat, const char *target,
                            const char *approval_id, const char *url, const char *body)
	__attribute__((warn_unused_result));

/* A reply owed to a chat, as the dispatcher sends it. */
struct chat_reply {
	char id[24];
	char *target, *response_url, *body; /* owned; NULL when none */
	char *approval_id;                  /* owned; NULL when none */
	int attempts;                       /* this one included */
};
struct chat_replies {
	struct chat_reply *r;
	int n;
};

/* Takes up to limit replies that are due, each held for a minute against
 * other dispatchers, into *out (chat_replies_clear it). */
enum og_rc chat_reply_take(struct db *db, int limit, struct chat_replies *out)
	__attribute__((warn_unused_result));
void chat_replies_clear(struct chat_replies *out);

/* A reply's attempt: sent (done), retry after retry_s, or given up on
 * (neither); status and error (NULL: none) are kept. A settled reply
 * forgets its URL. */
enum og_rc chat_reply_settle(struct db *db, const char *id, bool sent, bool retry, int retry_s,
                             int status, const char *error) __attribute__((warn_unused_result));

#endif

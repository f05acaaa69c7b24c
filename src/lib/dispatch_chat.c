/*
 * dispatch_chat.c — the dispatcher's side of chat approvals: the replies a
 * decision owes a chat (the message updated to say who decided), taken
 * from chat_replies (chat.c) and sent through the target's provider
 * (its reply); see dispatch_tick.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "dispatch_int.h"
#include "dispatch_tick.h"
#include "log.h"

/* Replies sent per tick, and the longest one may take: the housekeeping
 * thread sends them, and the rest of its work waits meanwhile. */
#define CHAT_REPLIES_PER_TICK 8
#define CHAT_REPLY_TIMEOUT_MS 5000

/* One reply's attempt; settled by what came back. */
static void
send_one(struct db *db, const struct config *cfg, struct provider_conn *pc,
         const struct chat_reply *r)
{
	const char *id = r->id, *name = r->target;
	const struct config_target *t = config_target(cfg, name);
	const struct provider *pv = provider_of(t);
	int attempts = r->attempts;
	struct provider_attempt at = { 0 };
	struct config_target v;
	bool sent, retry;
	const char *error;

	if (pv == NULL || pv->reply == NULL) {
		error = "the reply's target is no longer a configured chat target";
		sent = retry = false;
	} else {
		v = *t;
		if (v.timeout_ms > CHAT_REPLY_TIMEOUT_MS)
			v.timeout_ms = CHAT_REPLY_TIMEOUT_MS;
		pv->reply(pc, &v, r->response_url, r->body, &at);
		sent = !at.invalid && at.r.transport_error == ATTEMPT_ERR_NONE && at.r.status >= 200 &&
		       at.r.status < 300;
		/* a refusal (4xx: the URL expired or was used up) is final */
		retry = !sent && !at.invalid && attempts < CHAT_REPLY_ATTEMPTS &&
		        (at.r.status == 0 || at.r.status == 429 || at.r.status >= 500);
		error = at.invalid ? at.invalid_reason : sent ? NULL : "the chat did not take it";
	}
	if (chat_reply_settle(db, id, sent, retry, 1 << (attempts < 8 ? attempts : 8), at.r.status,
	                      error) != OG_OK)
		log_event(LOG_LEVEL_ERROR, "chat.reply_settle_failed",
		          &(struct log_fields){ .detail = db_error(db), .actor = "dispatcher" });
	log_event(sent ? LOG_LEVEL_INFO : LOG_LEVEL_WARNING,
	          sent ? "chat.replied" : retry ? "chat.reply_retry" : "chat.reply_failed",
	          &(struct log_fields){ .target = name,
	                                .approval_id = r->approval_id,
	                                .status = at.r.status, .attempt = attempts,
	                                .detail = error, .actor = "dispatcher" });
	provider_attempt_clear(&at);
}

void
dispatch_tick_chat_replies(struct dispatch_shared *s, struct db *db, struct provider_conn *pc)
{
	struct dispatch_config *dc;
	struct chat_replies rs = { 0 };
	int i;

	/* nothing goes out while sends are stopped */
	if (pc == NULL || !s->env_enabled || !atomic_load(&s->db_enabled))
		return;
	if (chat_reply_take(db, CHAT_REPLIES_PER_TICK, &rs) != OG_OK)
		return;
	dc = dispatch_config_get(s);
	for (i = 0; i < rs.n; i++)
		send_one(db, &dc->cfg, pc, &rs.r[i]);
	dispatch_config_put(s, dc);
	chat_replies_clear(&rs);
}

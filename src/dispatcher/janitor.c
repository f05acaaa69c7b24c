/*
 * janitor.c — the dispatcher's periodic housekeeping; see janitor.h.
 */
#include "dispatch_tick.h"
#include "janitor.h"
#include "log.h"
#include "metrics.h"
#include "provider.h"

void
janitor_init(struct janitor *j, const char *conninfo, int statement_timeout_ms)
{
	j->db = db_new(conninfo, statement_timeout_ms);
	j->pc = provider_conn_new();
	j->last_tick_ms = 0;
}

void
janitor_flush_metrics(struct janitor *j)
{
	if (metrics_flush(j->db) != OG_OK)
		log_event(LOG_LEVEL_DEBUG, "metrics.flush_failed",
		          &(struct log_fields){ .detail = db_error(j->db),
		                                .hint = "attempt counts stay in memory until a "
		                                        "flush succeeds" });
}

void
janitor_tick(struct janitor *j, struct dispatch_shared *s, int poll_ms, long long now_ms)
{
	if (now_ms - j->last_tick_ms < poll_ms)
		return;
	j->last_tick_ms = now_ms;
	/* the database away: the rest waits for the next tick */
	if (dispatch_tick_switch(s, j->db)) {
		dispatch_tick_expire_leases(s, j->db);
		dispatch_tick_expire_approvals(j->db);
		dispatch_tick_remind(j->db);
		dispatch_tick_escalate(j->db);
		dispatch_tick_chat_replies(s, j->db, j->pc);
	}
	janitor_flush_metrics(j);
	/* effects due by time (retries, windows) need no NOTIFY */
	dispatch_wake(s);
}

void
janitor_free(struct janitor *j)
{
	db_free(j->db);
	j->db = NULL;
	provider_conn_free(j->pc);
	j->pc = NULL;
}

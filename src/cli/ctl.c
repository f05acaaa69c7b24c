/*
 * ctl.c — the shared part of oncegatectl's commands; see ctl.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ctl.h"

int
ctl_db(struct ctl *ctl)
{
	if (ctl->db == NULL)
		ctl->db = db_new(ctl->cfg.database, ctl->cfg.statement_timeout_ms);
	if (ctl->db == NULL || db_ensure(ctl->db) != DB_OK) {
		fprintf(stderr, "oncegatectl: %s\n",
		        ctl->db != NULL ? db_error(ctl->db) : "out of memory");
		return -1;
	}
	return 0;
}

const char *
operator_name(const char *given)
{
	const char *u;

	if (given != NULL && *given != '\0')
		return given;
	u = getenv("SUDO_USER");
	if (u == NULL || *u == '\0')
		u = getenv("USER");
	if (u == NULL || *u == '\0')
		u = getlogin();
	return u != NULL && *u != '\0' ? u : "unknown";
}

void
ctl_log(struct ctl *ctl, enum log_level level, const char *event, const struct log_fields *f)
{
	if (!ctl->log_opened) {
		if (log_open(ctl->cfg.log_file, LOG_LEVEL_INFO, "oncegatectl") != 0) {
			fprintf(stderr, "oncegatectl: cannot open the decision log %s\n",
			        ctl->cfg.log_file);
			return;
		}
		ctl->log_opened = true;
	}
	log_event(level, event, f);
}

void
ctl_close(struct ctl *ctl)
{
	if (ctl->log_opened)
		log_close();
	ctl->log_opened = false;
	db_free(ctl->db);
	ctl->db = NULL;
	config_free(&ctl->cfg);
}

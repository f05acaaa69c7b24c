/*
 * repair_int.h — what repair.c shares with repair_bulk.c (not for other
 * modules).
 */
#ifndef OG_REPAIR_INT_H
#define OG_REPAIR_INT_H

#include <stddef.h>
#include <jansson.h>

#include "db.h"
#include "repair.h"

/* snprintf of src ("" for NULL) into dst. */
void repair_copy(char *dst, size_t n, const char *src);
/* One operator_actions row, inside the caller's transaction; details NULL
 * (out of memory) is OG_ERROR. */
enum og_rc repair_record_action(struct db *db, const struct repair_who *who,
                                const char *action, struct repair_out *out,
                                json_t *details);
/* Commits when rc is OG_OK (a failed commit becomes its rc), else rolls
 * back; returns the outcome. */
enum og_rc repair_finish(struct db *db, enum og_rc rc);
/* One resume; job > 0: the job's item seq is marked done in the same
 * transaction, or nothing happens. */
enum og_rc repair_resume_one(struct db *db, const char *effect, const char *expect,
                             const struct repair_who *who, long long job, int seq,
                             struct repair_out *out);

#endif

/*
 * migrate.h — ordered schema migrations from sql/ (NNN_name.sql), each
 * applied once in its own transaction and recorded in schema_migrations.
 */
#ifndef OG_MIGRATE_H
#define OG_MIGRATE_H

#include <stddef.h>
#include <stdio.h>

#include "db.h"

/* A migration's state as the lines printed to out give it ("STATE  VERSION"). */
#define MIGRATE_APPLIED "applied"
#define MIGRATE_PENDING "pending"

/* Applies what is missing; prints one line per applied migration to out.
 * Safe to run again and from two hosts at once (advisory lock). Returns the
 * number applied, or -1 with a message in err. */
int migrate_apply(struct db *db, const char *dir, FILE *out, char *err, size_t errlen)
	__attribute__((warn_unused_result));
/* Prints applied and pending migrations. Returns pending count or -1. */
int migrate_status(struct db *db, const char *dir, FILE *out, char *err, size_t errlen)
	__attribute__((warn_unused_result));

/* The schema's version: the name of the last migration applied
 * ("016_run_domains"), "" on a database no migration touched. Any role
 * the migrations grant to may read it. */
enum db_rc migrate_current(struct db *db, char *version, size_t len)
	__attribute__((warn_unused_result));

#endif

/*
 * secret.h — a secret kept in a file of its own (the responder's CSRF and
 * proxy secrets, a chat's bot token and signing secret): one line of
 * 32..OG_SECRET_FILE_MAX characters of A-Z a-z 0-9 + / = _ . -, in a
 * regular file the group may not write and others may not read (0600 or
 * 0640). A leaf: the configuration and the providers both read them.
 */
#ifndef OG_SECRET_H
#define OG_SECRET_H

#include <stddef.h>

/* Reads the secret of path into out (at least OG_SECRET_FILE_MAX + 1
 * bytes); -1 with a message naming the setting (name) and the file in
 * err, and out wiped. */
int secret_read(const char *name, const char *path, char *out, char *err, size_t errlen)
	__attribute__((warn_unused_result));

#endif

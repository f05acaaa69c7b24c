/*
 * secret.c — a secret kept in a file of its own; see secret.h.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "caps.h"
#include "digest.h"
#include "secret.h"

/* Reads the one-line secret of path into out (at least
 * OG_SECRET_FILE_MAX + 1 bytes); -1 with a message naming the file. */
int
secret_read(const char *name, const char *path, char *out, char *err, size_t errlen)
{
	static const char allowed[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	                              "0123456789+/=_.-";
	struct stat st;
	size_t n = 0;
	FILE *f;
	int rc = -1;

	out[0] = '\0';
	f = fopen(path, "re");
	if (f == NULL) {
		snprintf(err, errlen, "%s: %s: %s", name, path, strerror(errno));
		return -1;
	}
	if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: %s is not a regular file", name, path);
		goto out;
	}
	/* The group may read (0640: the daemon's group), nobody else. */
	if ((st.st_mode & 0037) != 0) {
		snprintf(err, errlen, "%s: %s is mode %04o: the group may not write it and "
		     "others may not read it (0600 or 0640)", name, path,
		     (unsigned)(st.st_mode & 07777));
		goto out;
	}
	n = fread(out, 1, OG_SECRET_FILE_MAX + 1, f);
	while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r'))
		n--;
	out[n > OG_SECRET_FILE_MAX ? OG_SECRET_FILE_MAX : n] = '\0';
	if (n < 32 || n > OG_SECRET_FILE_MAX || strspn(out, allowed) != n) {
		snprintf(err, errlen, "%s: %s must hold one line of 32-%d characters of "
		     "A-Z a-z 0-9 + / = _ . - (openssl rand -hex 32)", name, path,
		     OG_SECRET_FILE_MAX);
		goto out;
	}
	rc = 0;
out:
	if (rc != 0)
		digest_wipe(out, OG_SECRET_FILE_MAX + 1);
	fclose(f);
	return rc;
}


/*
 * utf8.h — the one UTF-8 decoder (RFC 3629), and hex digits.
 *
 * Well-formed means: no overlong forms, no surrogates (U+D800–U+DFFF),
 * nothing above U+10FFFF. Everything that reads UTF-8 (the JSON parser, the
 * log writer, the page cleaner) decodes it here, so they agree on what is
 * valid.
 */
#ifndef OG_UTF8_H
#define OG_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Decodes the sequence at s[0..n) (n >= 1). A well-formed sequence: *cp
 * gets its code point and the result is its length (1 to 4). Otherwise *cp
 * is -1 and the result is the length of its longest valid prefix (at least
 * 1), so one truncated sequence counts as one bad character, as browsers
 * count it (maximal subpart, Unicode 3.9). A NUL is never a continuation
 * byte, so a NUL-terminated string stops the decoder at its end. */
size_t utf8_decode(const unsigned char *s, size_t n, long *cp);

/* Whether s[0..len) is well-formed UTF-8. */
bool utf8_valid(const char *s, size_t len);

/* The characters (code points) of well-formed UTF-8 text s: what a JSON
 * Schema maxLength counts, and what every documented limit on text means. */
size_t utf8_chars(const char *s);

/* Encodes code point cp (at most U+10FFFF, not a surrogate) into out (room
 * for 4 bytes); returns the bytes written. */
size_t utf8_encode(unsigned long cp, char *out);

/* The value of hex digit c (either case), or -1: for \u escapes and
 * percent-encoding alike. */
int utf8_hex_digit(char c);

/* The JSON escape of byte c, which must be '"', '\\' or a control
 * character below 0x20 (RFC 8259: the two-character forms where one
 * exists, else \u00XX in lower case), written to out; returns its length
 * (2 or 6). The one escape table of both JSON writers (the canonical
 * serialiser and the decision log). */
size_t utf8_json_escape(unsigned char c, char out[6]);

#endif

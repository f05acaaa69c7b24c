/*
 * fuzz_neutralise.c — text quoted in a notice (src/lib/neutralise.c): a
 * model's draft, a caller's requested_by, any bytes.
 *
 * Input: one byte (bit 0: chat or mail; the rest: the character cap, 0 to
 * 127, 255 meaning "no cap") then the text (up to the first NUL).
 *
 * Properties: the result is UTF-8 on one line (no control character); it
 * holds no bidi control and no invisible character, but for a zero-width
 * (non-)joiner after a character from U+0300 up; no "://" and no "http:"
 * or "https:" in any case; no dot between two ASCII letters; for chat no
 * "<" or ">" (Slack reads those as links and mentions) and no "](" (a
 * Markdown link); at most the cap's characters of the text plus what the
 * escapes add; the same input always gives the same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "buf.h"
#include "fuzzlib.h"
#include "neutralise.h"
#include "utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool
has_ci(const char *s, const char *needle)
{
	size_t n = strlen(needle);

	for (; *s != '\0'; s++)
		if (strncasecmp(s, needle, n) == 0)
			return true;
	return false;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzzlib_in in = { data, size };
	uint8_t mode = fuzzlib_byte(&in);
	char *text = fuzzlib_field(&in);
	enum neutralise_to to = (mode & 1) != 0 ? NEUTRALISE_CHAT : NEUTRALISE_MAIL;
	size_t max = mode == 255 ? (size_t)-1 : (size_t)(mode >> 1), i = 0, n, len, chars = 0;
	struct buf a, b;
	long cp, prev = -1;

	buf_init(&a, 1 << 22);
	buf_init(&b, 1 << 22);
	FUZZ_ASSERT(neutralise_line(&a, text, max, to) == 0);
	FUZZ_ASSERT(neutralise_line(&b, text, max, to) == 0);
	FUZZ_ASSERT(a.len == b.len && (a.len == 0 || memcmp(a.data, b.data, a.len) == 0));
	if (a.data == NULL)
		goto out;
	n = a.len;
	FUZZ_ASSERT(utf8_valid(a.data, n));
	FUZZ_ASSERT(strstr(a.data, "://") == NULL);
	FUZZ_ASSERT(!has_ci(a.data, "http:") && !has_ci(a.data, "https:"));
	while (i < n) {
		const unsigned char *p = (const unsigned char *)a.data;

		len = utf8_decode(p + i, n - i, &cp);
		FUZZ_ASSERT(cp >= 0x20 && cp != 0x7f && !(cp >= 0x80 && cp < 0xa0));
		FUZZ_ASSERT(cp != 0x2028 && cp != 0x2029);
		FUZZ_ASSERT(!(cp >= 0x202a && cp <= 0x202e) && !(cp >= 0x2066 && cp <= 0x2069));
		FUZZ_ASSERT(cp != 0x200b && cp != 0x200e && cp != 0x200f && cp != 0x2060 &&
		            cp != 0xfeff && cp != 0x061c && cp != 0x00ad &&
		            !(cp >= 0xe0000 && cp <= 0xe007f));
		if (cp == 0x200c || cp == 0x200d)
			FUZZ_ASSERT(prev >= 0x300);
		if (cp == '.' && i > 0 && i + 1 < n)
			FUZZ_ASSERT(!(((p[i - 1] | 0x20) >= 'a' && (p[i - 1] | 0x20) <= 'z') &&
			              ((p[i + 1] | 0x20) >= 'a' && (p[i + 1] | 0x20) <= 'z')));
		if (to == NEUTRALISE_CHAT) {
			FUZZ_ASSERT(cp != '<' && cp != '>');
			FUZZ_ASSERT(!(cp == '(' && i > 0 && p[i - 1] == ']'));
		}
		prev = cp;
		chars++;
		i += len;
	}
	/* an escape is at most 15 bytes for one character of the text */
	if (max != (size_t)-1)
		FUZZ_ASSERT(n <= 15 * max + 3 + 16);
out:
	buf_free(&a);
	buf_free(&b);
	free(text);
	return 0;
}

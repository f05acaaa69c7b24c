/*
 * page.h — HTML pages from templates/, filled as a DOM.
 *
 * A template is well-formed XHTML. Elements to fill carry data-slot, a
 * space-separated list of slot names (like class), so one element can be
 * both a repeated item and a slot inside it. Callers set text and attribute
 * values only, never markup, so whatever a run or a model wrote is escaped
 * by construction. An element with data-repeat is a repeat prototype: it is
 * never rendered itself, only the copies page_repeat makes of it.
 *
 * Failures are sticky: a fill that fails for any reason but a refused URL
 * (see page_attr) also makes page_render fail, so a half-filled card is
 * never sent even when a caller ignores a return value.
 *
 * Threads: a page_set is read-only after page_set_load and shared; each
 * page is private to one thread. A page refers to its set's compiled
 * template, so free every page before page_set_free of its set.
 */
#ifndef OG_PAGE_H
#define OG_PAGE_H

#include <stddef.h>

#include <jansson.h>

struct buf;

struct page_set;   /* the parsed templates of a directory */
struct page;       /* one page being filled (private; refers to its set) */
struct page_scope; /* one repeated item, owned by its page */

/* The pages, by the name of their template (NAME.xhtml). */
#define PAGE_APPROVAL "approval"  /* an approval's card, to decide on */
#define PAGE_DECIDED "decided"    /* a decision taken: the vote, what became of the effect */
#define PAGE_NOTICE "notice"      /* a refusal or a message of one paragraph */
#define PAGE_INBOX "inbox"        /* a person's waiting approvals */

/* Loads dir/NAME.xhtml for NAME in approval, decided, notice, inbox. Each must be
 * well-formed XML with an XHTML <html> root, no script/style/on* content
 * and every slot the handlers fill; it is parsed with no network, no DTD
 * loading and no entity expansion. Calls xmlInitParser(), so call it from
 * one thread at start-up. NULL and a message naming the file on error. */
struct page_set *page_set_load(const char *dir, char *err, size_t errlen)
	__attribute__((warn_unused_result));
void page_set_free(struct page_set *set);

/* A fresh copy of template `name`; NULL if there is no such template or
 * memory runs out. */
struct page *page_new(const struct page_set *set, const char *name)
	__attribute__((warn_unused_result));
void page_free(struct page *p);

/* Every element with slot `slot` gets text as its only content (old
 * children removed). Invalid UTF-8, control characters other than \t and
 * \n, and bidi overrides become U+FFFD; \r\n and \r become \n. 0 on
 * success; -1 when no element carries the slot, one is a void element
 * (input, meta …), text is NULL, or memory runs out. */
int page_text(struct page *p, const char *slot, const char *text);

/* Every element with slot `slot` gets attribute attr=value (value cleaned
 * as in page_text). attr must be a plain lowercase name; on*, style,
 * srcdoc, srcset, xmlns*, data-slot and data-repeat are refused. In URL
 * attributes (href, src, action, formaction, …) a value with a scheme other
 * than http, https or mailto (javascript:, data:, vbscript: …) is refused:
 * -1 and the page unchanged, but NOT sticky, so the caller may still show
 * the URL as text. Other failures as for page_text. */
int page_attr(struct page *p, const char *slot, const char *attr,
              const char *value);

/* Removes every element with slot `slot` (optional parts: the form, the
 * errors list). Removing again is fine; a slot the template never had
 * fails the page (a typo would otherwise leave the part on show). Filling
 * a removed part later does nothing and succeeds. */
void page_remove(struct page *p, const char *slot);

/* Repeats: the first element with slot `slot` is the prototype. Each call
 * appends a deep copy after the last copy and returns a scope in which the
 * slots inside the copy, and the copy's own, are filled. NULL when there
 * is no such element or memory runs out (sticky). */
struct page_scope *page_repeat(struct page *p, const char *slot);
int page_scope_text(struct page_scope *s, const char *slot, const char *text);
int page_scope_attr(struct page_scope *s, const char *slot, const char *attr,
                    const char *value);
/* Removes the prototype (also right when there were no items at all).
 * page_render drops a data-repeat prototype by itself anyway. */
void page_repeat_done(struct page *p, const char *slot);

/* Appends the page to out as UTF-8 XHTML that HTML parsers read the same
 * way: "<!DOCTYPE html>" first, data-slot and data-repeat attributes
 * stripped, comments dropped. -1 (out left as it was) when a fill failed
 * before or out's cap is reached. The page is not changed. */
/* Levels of a JSON value page_json_text indents; deeper ones are shown as
 * compact JSON text on one line. */
#define PAGE_JSON_INDENT_DEPTH 4

/* v as JSON text for a person to read (members sorted, numbers in their
 * shortest form), in time and size linear in v whatever its depth: the
 * first PAGE_JSON_INDENT_DEPTH levels indented, deeper ones compact.
 * malloc'd; NULL when memory runs out. "" for NULL. */
char *page_json_text(const json_t *v);

int page_render(const struct page *p, struct buf *out)
	__attribute__((warn_unused_result));

/* Why the page failed (the first failure), or NULL. For the log. */
const char *page_error(const struct page *p);

#endif

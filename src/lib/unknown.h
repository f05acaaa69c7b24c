/*
 * unknown.h — the word written where a value has no name to give: a
 * number outside its table of names, a log line written without an
 * event, a figure a page could not read just now. A leaf: it includes
 * nothing of the application.
 */
#ifndef OG_UNKNOWN_H
#define OG_UNKNOWN_H

#define OG_UNKNOWN "unknown"

#endif

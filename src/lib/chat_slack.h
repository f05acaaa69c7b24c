/*
 * chat_slack.h — Slack's side of a chat approval, as text: no database, no
 * network (pure, fuzzed).
 *
 *   the notice   an approval notice (notify.h) as a Block Kit message for
 *                chat.postMessage: the notice's text (notice.h, every quoted
 *                text neutralised) and the buttons Approve, Reject (their
 *                value the challenge's id, never its token) and Open (the
 *                SSO page's link);
 *   the request  a button press, as Slack sends it to the interactivity
 *                URL: checked by Slack's v0 signing scheme (HMAC-SHA256 of
 *                "v0:" TIMESTAMP ":" BODY with the app's signing secret,
 *                hex, "v0=" in X-Slack-Signature; the timestamp within
 *                CHAT_SLACK_WINDOW_S of now; compared in constant time),
 *                then its form field payload= read as a block_actions
 *                interaction;
 *   the person   the Slack user named in the site's map (one line a person:
 *                "TEAM/USER SUBJECT GROUP, GROUP ..." or "USER SUBJECT ...":
 *                the Slack ids, the approver's subject as the approver
 *                entries name people, then the groups, separated by commas;
 *                "#" starts a comment line);
 *   the reply    what the message becomes once decided (response_url).
 */
#ifndef OG_CHAT_SLACK_H
#define OG_CHAT_SLACK_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* A signature is good this long either side of its timestamp (Slack's
 * documented five minutes). */
#define CHAT_SLACK_WINDOW_S 300
/* A response_url at most this long (Slack's are about 100 bytes). */
#define CHAT_SLACK_URL_MAX 2048
/* Characters of the notice's text one section block holds (Slack: 3000). */
#define CHAT_SLACK_SECTION_MAX 2900
/* The action ids of the notice's buttons. */
#define CHAT_SLACK_APPROVE "oncegate_approve"
#define CHAT_SLACK_REJECT  "oncegate_reject"
#define CHAT_SLACK_OPEN    "oncegate_open"

enum chat_slack_verdict {
	CHAT_SLACK_SIGNED = 0,   /* the signature is the secret's, in time */
	CHAT_SLACK_UNSIGNED,     /* a header is missing or malformed */
	CHAT_SLACK_STALE,        /* the timestamp is outside the window */
	CHAT_SLACK_FORGED,       /* the signature is not the secret's */
};

/* Checks a request's X-Slack-Request-Timestamp and X-Slack-Signature
 * against body[0..len) with secret, at now (seconds since the epoch). */
enum chat_slack_verdict chat_slack_verify(const char *secret, const char *timestamp,
                                          const char *signature, const char *body, size_t len,
                                          long long now);
/* The verdict in words, for the answer and the log. */
const char *chat_slack_verdict_text(enum chat_slack_verdict v);

/* A button press, read from a block_actions interaction. */
struct chat_slack_press {
	char action[24];         /* CHAT_SLACK_APPROVE, _REJECT or _OPEN */
	char approval_id[40];    /* the button's value: a challenge's id (uuid) */
	char team[32];           /* team.id, "" when absent */
	char user[32];           /* user.id */
	char response_url[CHAT_SLACK_URL_MAX + 1];
};

enum chat_slack_read {
	CHAT_SLACK_PRESS = 0,    /* one of our buttons was pressed: *out filled */
	CHAT_SLACK_OTHER,        /* a well-formed interaction that is not ours */
	CHAT_SLACK_MALFORMED,    /* not a form with a JSON payload of that shape */
};

/* Reads the form body of an interaction request: payload= decoded, parsed
 * and checked (type block_actions, user.id, response_url, one action whose
 * action_id is ours with a uuid value). why says what is wrong. */
enum chat_slack_read chat_slack_read(const char *body, size_t len, struct chat_slack_press *out,
                                     char *why, size_t whylen);

/* The Block Kit message of a notice with its link (notice.h's text in a
 * section, then the buttons): {"text", "blocks"}; the channel is the
 * target's, added when it is sent. NULL with a reason when it cannot be
 * made. */
json_t *chat_slack_message(const json_t *notice, const char *link, const char *client, char *why,
                           size_t whylen) __attribute__((warn_unused_result));

/* The Slack user team/user in the map file's text (map[0..len)): the
 * subject into subject, the groups joined by sep into groups. False when
 * the user is not in the map. */
bool chat_slack_map_find(const char *map, size_t len, const char *team, const char *user,
                         char sep, char *subject, size_t subjectlen, char *groups,
                         size_t groupslen);

/* The reply after a decision, for response_url: final replaces the
 * message (its buttons gone) with who decided; a vote below the quorum
 * is a new message in the thread; an answer only the presser sees
 * (ephemeral) otherwise. text is oncegate's, already plain. */
enum chat_slack_reply { CHAT_SLACK_REPLACE, CHAT_SLACK_ADD, CHAT_SLACK_EPHEMERAL };
json_t *chat_slack_reply(enum chat_slack_reply how, const char *text);

#endif

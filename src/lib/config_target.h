/*
 * config_target.h — one `[target NAME]` section of the configuration, as
 * the providers read it. A leaf: it includes nothing, so a provider sees a
 * target without the configuration layer above it (config.h loads them).
 */
#ifndef OG_CONFIG_TARGET_H
#define OG_CONFIG_TARGET_H

/* A provider the dispatcher may send to, named in config as a
 * `[target NAME]` section. Effects name targets, never URLs. */
struct config_target {
	char *name;
	char *kind;              /* a provider's kind (provider.h) */
	char *url;
	char *lookup_url;        /* reconciliation; empty: none */
	char *credentials_env;   /* name of the environment variable holding the secret */
	int idempotency_key;     /* 1: the provider honours Idempotency-Key */
	int connect_timeout_ms;
	int timeout_ms;
	int response_cap_bytes;
	int rate_per_second;     /* 0: unlimited */
	int max_attempts;
	int base_ms;
	int cap_ms;
	int max_elapsed_s;
	int jitter_percent;      /* random share added to each retry delay */
	/* Where the provider puts its id for the effect: a response header
	 * name, else a JSON Pointer into the 2xx body (HTTP only). */
	char *provider_id_header;
	char *provider_id_pointer;
	/* A 2xx whose body has this (RFC 6901) value truthy is a business
	 * rejection; "!/ok": when falsy (classify.h). Empty: no check. */
	char *rejection_pointer;
	char *mail_from;         /* SMTP envelope and From: address */
	/* Slack (provider_slack.c): url is the Web API's base
	 * (https://slack.com/api); the channel notices are posted to; the
	 * files (0600) of the bot token and of the app's signing secret; the
	 * map of Slack users to approvers; where a response_url may point. */
	char *channel;
	char *token_file;
	char *signing_secret_file;
	char *user_map_file;
	char *response_url_base;
};

#endif

/* internal.h — what the client's files share and nothing outside sees: the
 * client's state (credentials, cached tokens, curl handles) and the
 * WWW-Authenticate challenge parser. */
#ifndef KILN_REGCLIENT_INTERNAL_H
#define KILN_REGCLIENT_INTERNAL_H

#include "regclient/regclient.h"

struct rc_token {
	char *scope; /* space-separated scopes, as asked for */
	char *token;
	int64_t expires; /* unix seconds */
};

struct rc_client {
	char *host;
	char *base; /* "http://HOST" or "https://HOST" */
	char *user, *pass;
	int basic;  /* the registry challenged with Basic: send it up front */
	struct rc_token *tokens;
	size_t ntokens;
	CURLSH *share; /* connections and DNS shared by every handle */
	CURL *easy;    /* for synchronous requests */
	unsigned retries, timeout_s;
	uint64_t max_rate;
	char *ca_file; /* $KILN_REGISTRY_CA_FILE: trust these CAs instead of the system's */
	struct rc_client_stats stats;
	int no_batch_exists; /* the registry has no batch blob query (exists.c): HEADs */
};

/* WWW-Authenticate: the first challenge's scheme and its parameters. */
struct rc_challenge {
	char *scheme; /* "Bearer", "Basic" */
	char *realm, *service, *scope;
};
int rc_challenge_parse(const char *header, struct rc_challenge *ch, kiln_error **err);
void rc_challenge_free(struct rc_challenge *ch);
/* "Authorization: …" for a scope from the cache, or NULL. */
char *rc_auth_header(rc_client *c, const char *scope);

#endif

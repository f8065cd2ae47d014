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
	int plain;  /* not a registry: rc_client_opts.plain */
	int public_only; /* rc_client_opts.public_only */
	struct rc_token *tokens;
	size_t ntokens;
	CURLSH *share; /* connections and DNS shared by every handle */
	CURL *easy;    /* for synchronous requests */
	unsigned retries, timeout_s;
	uint64_t max_rate;
	char *ca_file; /* $KILN_REGISTRY_CA_FILE: trust these CAs instead of the system's */
	struct rc_client_stats stats;
	int no_batch_exists; /* the registry has no batch blob query (exists.c): HEADs */
	/* kiln serve's batch upload, as its batch query's answer offered it
	 * (0: not offered, or refused once: one upload per blob) */
	unsigned batch_max_blobs;
	uint64_t batch_max_bytes;
};

/* The body of a batch upload (batch.c): for each blob a line "DIGEST SIZE\n"
 * and its bytes, read from its file (opened when reached) or memory. */
struct rc_batch_body {
	const struct rc_blob *const *blobs;
	const uint64_t *sizes;
	size_t n, i;              /* blobs; the one being sent */
	char head[200];
	size_t head_len, head_pos;
	uint64_t off;             /* bytes of blobs[i] sent */
	int fd;
	kiln_error *err;          /* why the body was cut (a file that cannot be read) */
};

/* Sets up b for blobs[0..n) of sizes[]; returns the body's length. */
uint64_t rc_batch_body_init(struct rc_batch_body *b, const struct rc_blob *const *blobs, const uint64_t *sizes,
			    size_t n);
void rc_batch_body_free(struct rc_batch_body *b);
/* rc_http's body_read and body_rewind for it. */
long rc_batch_body_read(void *ud, char *p, size_t n);
int rc_batch_body_rewind(void *ud);
/* A 201 answer to a batch upload: it must list exactly the blobs sent. */
int rc_batch_answer(const struct rc_http *r, const struct rc_blob *const *blobs, size_t n, kiln_error **err);

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

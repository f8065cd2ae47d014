/* regclient.h — the contract of kiln's registry client: OCI Distribution
 * over libcurl (credentials, manifests, parallel blob transfers with resume)
 * and the HTTP transport under it, which every outbound request of kiln
 * uses (the S3 storage backend of the server and ADD <url> ride on it too). */
#ifndef KILN_REGCLIENT_H
#define KILN_REGCLIENT_H

#include <stdint.h>

#include <curl/curl.h>

#include "kiln.h"
#include "oci/oci.h"

/* ===========================================================================
 * The client: OCI Distribution over libcurl, for `kiln login`,
 * `kiln push`/`kiln pull`, FROM a registry and chunked template transfer.
 * Plain HTTP for loopback hosts and $KILN_INSECURE_REGISTRIES (comma-
 * separated HOST[:PORT]), HTTPS otherwise.  Keep-alive connections shared by
 * every request of a client; connection errors, 429 and 5xx are retried with
 * exponential backoff; 401 runs the Bearer/Basic challenge flow (tokens
 * cached per scope).  See docs/registry.md, "Client".
 * ========================================================================= */

/* Credentials.  kiln's own file is $KILN_HOME/auth.json (0600), in docker's
 * config.json shape {"auths":{"HOST":{"auth":"base64(user:pass)"}}}; lookups
 * fall back to $REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json and
 * ~/.docker/config.json.  Docker Hub is also found under its legacy keys. */
char *rc_auth_path(void);
/* 1 found (*user, *pass set, caller frees), 0 none. */
int rc_auth_lookup(const char *host, char **user, char **pass, kiln_error **err);
int rc_auth_store(const char *host, const char *user, const char *pass, kiln_error **err);
/* KILN_E_NOTFOUND when kiln's file has no entry for host. */
int rc_auth_remove(const char *host, kiln_error **err);

typedef struct rc_client rc_client;

struct rc_client_opts {
	const char *user, *pass; /* explicit credentials; NULL: from the auth files */
	int anonymous;           /* ignore stored credentials */
	unsigned retries;        /* retries after a transient failure; 0: 4 ($KILN_REGISTRY_RETRIES) */
	unsigned timeout_s;      /* connect timeout and stall limit; 0: 30 */
	uint64_t max_rate;       /* bytes/s per transfer, each way; 0: unlimited */
	const char *base;        /* "SCHEME://HOST[:PORT]" to use as is (S3 endpoints); NULL: derived */
	int plain;               /* a web server, not a registry (rc_client_for_url): no credentials, no
				  * challenge flow (a 401 is the caller's answer), the system's CAs (not
				  * $KILN_REGISTRY_CA_FILE), errors name HOST alone */
	int public_only;         /* connect to public addresses only — no loopback, private,
				  * link-local, multicast or reserved one — checked at each connect, so
				  * neither DNS nor a redirect leads elsewhere (a URL a build service
				  * fetches for a team: its own host and network stay out of reach) */
};

struct rc_client_stats {
	uint64_t bytes_up, bytes_down; /* body bytes sent and received */
	uint64_t requests, retries;
	uint64_t connects;             /* new connections opened (the rest reused one) */
};

/* A client for one registry host (HOST[:PORT] as in struct oci_imgref);
 * used by one thread at a time (its parallelism is curl multi, not threads). */
rc_client *rc_client_new(const char *host, const struct rc_client_opts *o, kiln_error **err);
/* The transport's one-time set-up (libcurl, OpenSSL and its configuration),
 * which the first rc_client_new does: for a process started ahead of its work. */
void rc_global_init(void);

/* One HTTP request to the abstract unix socket named socket_name (a
 * sandbox's own port through its agent, runtime/ports.c); url names the path
 * and the Host curl would use.  The answer's headers ("Name: value", the last block after
 * any 1xx) and body (transfer-decoded, content as sent), at most max_answer
 * bytes (0: 64 MiB). */
struct rc_forward {
	const char *method, *url;
	const char *const *headers; /* "Name: value", NULL-terminated */
	const void *body;
	size_t body_len, max_answer;
	long timeout_ms;            /* 0: 60 s */
};
struct rc_forward_answer {
	long status;
	kiln_strv headers;
	kiln_buf body;
};
int rc_forward(const char *socket_name, const struct rc_forward *f, struct rc_forward_answer *a, kiln_error **err);
void rc_forward_answer_free(struct rc_forward_answer *a);
void rc_client_free(rc_client *c);
const struct rc_client_stats *rc_client_stats(const rc_client *c);
/* A plain client for the server of an http:// or https:// URL (ADD <url>):
 * the transport's connections, redirects, timeouts and retries, and no
 * registry credentials, which must never go to an arbitrary web server. */
rc_client *rc_client_for_url(const char *url, int public_only, kiln_error **err);
/* GET /v2/, authenticating if challenged: checks that the registry answers
 * and that the credentials (if any) are accepted. */
int rc_client_ping(rc_client *c, kiln_error **err);

/* Manifests are asked for with the four OCI_MT_* types of oci.h by default. */
struct rc_doc {
	char *data;                   /* NUL-terminated */
	size_t len;
	char *media_type;             /* Content-Type of the answer */
	char digest[KILN_DIGEST_MAX]; /* computed over data (never trusted from headers) */
};
void rc_doc_free(struct rc_doc *d);

/* GET a manifest by tag or digest.  accept: NULL = the four types above.
 * A digest reference is verified against the bytes.  Max 4 MiB. */
int rc_manifest_get(rc_client *c, const char *repo, const char *ref, const char *accept, struct rc_doc *out,
		     kiln_error **err);
/* Like rc_manifest_get, an index (or docker list) resolved to its
 * linux/amd64 image manifest. */
int rc_image_manifest_get(rc_client *c, const char *repo, const char *ref, struct rc_doc *out,
			   kiln_error **err);
/* 1 present (digest, may be NULL), 0 missing: HEAD of the manifest. */
int rc_manifest_exists(rc_client *c, const char *repo, const char *ref, char digest[KILN_DIGEST_MAX],
			kiln_error **err);
/* PUT under ref (tag or digest); *digest (may be NULL) gets the sha256. */
int rc_manifest_put(rc_client *c, const char *repo, const char *ref, const char *media_type, const void *data,
		     size_t len, char digest[KILN_DIGEST_MAX], kiln_error **err);

/* The OCI 1.1 referrers of manifest digest (GET /v2/REPO/referrers/DIGEST),
 * only those of artifact_type if given (filtered here when the registry did
 * not): 1 with *index the image index it answered, 0 when the registry has
 * no referrers API (404, or 400/405/501: read cosign's sha256-HEX tags
 * instead). */
int rc_referrers(rc_client *c, const char *repo, const char *digest, const char *artifact_type, json_t **index,
		 kiln_error **err);

/* 1 present (*size if not NULL), 0 missing: HEAD of the blob. */
int rc_blob_exists(rc_client *c, const char *repo, const char *digest, int64_t *size, kiln_error **err);
/* A whole blob into memory (at most max bytes), verified. */
int rc_blob_get_mem(rc_client *c, const char *repo, const char *digest, size_t max, char **data, size_t *len,
		     kiln_error **err);

/* One blob to move.  Push: the source is `path` (a file) or `data`/`len`;
 * pull: the sink is `path`, staged as PATH.part (kept after an interruption
 * and resumed with Range next time), verified against the digest, fsync'd,
 * then renamed: PATH only ever appears complete and correct. */
struct rc_blob {
	char digest[KILN_DIGEST_MAX]; /* sha256 or sha512 */
	int64_t size;                 /* push: ignored (taken from the source); pull: -1 if unknown */
	const char *path;
	const void *data;
	size_t len;
	const char *mount_from;       /* push: a repository of the same registry that may have it */
};

struct rc_progress {
	uint64_t bytes_done, bytes_total; /* skipped blobs count as done */
	uint64_t bytes_moved;             /* bytes actually sent / received (retries included) */
	size_t blobs_done, blobs_total, blobs_skipped;
	const char *digest;               /* the blob just finished, or NULL */
};

struct rc_xfer_opts {
	unsigned parallel;      /* transfers at once; 0: 4 */
	uint64_t chunk_size;    /* push: larger blobs go in PATCH chunks of this size; 0: 32 MiB */
	/* pull: 1 = the caller already has this blob, skip it */
	int (*have)(void *ud, const char *digest);
	void (*progress)(void *ud, const struct rc_progress *p); /* at most ~10/s, and per blob */
	void *ud;
	/* pull: rename each verified blob into place without fsync (of it or of
	 * its directory).  Only for destinations that verify every read against
	 * the digest and fetch again what fails (the chunk store): after a power
	 * loss PATH may then be torn, which such a reader detects.  Otherwise
	 * (0) PATH is durable before it appears, and so only ever complete. */
	int no_fsync;
};

/* kiln serve's batch blob query (docs/registry.md, "Batch blob query"): the
 * most digests one request may ask about (the server refuses more). */
#define RC_BLOBS_EXIST_MAX 1000
/* kiln serve's batch upload (docs/registry.md, "Batch upload"): the most
 * blobs, and blob bytes, one request may carry. */
#define RC_BLOBS_BATCH_MAX 1000
#define RC_BLOBS_BATCH_BYTES (64u << 20)
/* Which of blobs[0..n) repo holds (present[i] = 1/0), in one request per
 * RC_BLOBS_EXIST_MAX.  1 answered; 0 the registry has no such query (the
 * client remembers: ask with HEADs); -1 error. */
int rc_blobs_exist(rc_client *c, const char *repo, const struct rc_blob *blobs, size_t n, unsigned char *present,
		   kiln_error **err);

/* Parallel transfers over one curl multi handle.  Push skips the blobs the
 * registry has (the batch query, else a HEAD each), tries a cross-repository
 * mount when mount_from is set, then uploads (POST + PUT, or PATCH chunks for
 * large blobs, resumed from the session's offset after a failure; a registry
 * with the batch query gets small blobs in one monolithic POST).  Pull skips what have() reports, then
 * GETs into PATH.part with resume.  Stops at the first failed blob. */
int rc_blobs_push(rc_client *c, const char *repo, const struct rc_blob *blobs, size_t n,
		   const struct rc_xfer_opts *o, kiln_error **err);
int rc_blobs_pull(rc_client *c, const char *repo, const struct rc_blob *blobs, size_t n,
		   const struct rc_xfer_opts *o, kiln_error **err);
/* For CLIs: "3/5 blobs (1 present), 12.0/40.0 MiB, 5.1 MiB/s, ETA 6s" and
 * the same as a JSON object {"blobs_done",…,"bytes_moved","rate"}. */
void rc_progress_format(const struct rc_progress *p, double elapsed_s, kiln_buf *out);
json_t *rc_progress_json(const struct rc_progress *p, double elapsed_s);

/* One blob (the same machinery, parallel 1). */
int rc_blob_push(rc_client *c, const char *repo, const struct rc_blob *b, kiln_error **err);
int rc_blob_get(rc_client *c, const char *repo, const struct rc_blob *b, kiln_error **err);

/* ---------------------------------------------------------------------------
 * The HTTP transport (http.c): one request and its answer over the client's
 * shared connections, with retries, backoff and the auth challenge flow.
 * ------------------------------------------------------------------------- */
/* One HTTP request and its answer. */
struct rc_http {
	const char *method;
	char *url;
	const char *scope;          /* auth scope(s), "repository:R:pull" …; NULL for /v2/ */
	int token_request;          /* to a token realm: Basic credentials if any, no token */
	int sent_basic;             /* this attempt carried Basic credentials */
	struct curl_slist *headers; /* the caller's extra headers */
	/* body: memory, a file range, or made by body_read (which returns the
	 * bytes it put in p, at most n, or -1 to abort; body_rewind starts it over) */
	const char *body_mem;
	int body_fd;                /* -1: none */
	uint64_t body_off, body_len, body_pos;
	int has_body;
	long (*body_read)(void *ud, char *p, size_t n);
	int (*body_rewind)(void *ud);
	void *body_ud;
	/* sink for 2xx bodies: a callback (returns < 0 to abort), else `out` bounded by out_max */
	int (*sink)(void *ud, struct rc_http *r, const char *p, size_t n);
	void *sink_ud;
	kiln_buf out;
	size_t out_max;
	kiln_buf errbody;           /* body of a non-2xx answer (bounded) */
	/* answer */
	CURL *h;
	struct curl_slist *all;     /* headers as sent */
	long status;
	CURLcode cr;
	char errbuf[CURL_ERROR_SIZE];
	char *www_auth, *location, *digest, *ctype, *range, *retry_after;
	char *etag, *last_modified, *date; /* kept for S3 (s3.c) */
	unsigned attempts;          /* attempts started (rc_http_setup): a sink sees each start over */
	int64_t clen;
	int sink_failed;            /* the sink refused (error already recorded by its owner) */
	char refused[64];           /* public_only: the address a connect was refused to, or "" */
	rc_client *c;
};

void rc_http_init(struct rc_http *r, rc_client *c, const char *method, char *url, const char *scope);
void rc_http_free(struct rc_http *r);
/* Forget the previous answer before another attempt. */
void rc_http_reset(struct rc_http *r);
/* Configure handle h for r (resets h; keeps its connections). */
void rc_http_setup(struct rc_http *r, CURL *h);
/* After a transfer on r->h: status and connection statistics. */
void rc_http_done(struct rc_http *r);
/* Worth retrying: connection-level errors, 408, 429, 5xx. */
int rc_http_transient(const struct rc_http *r);
/* r got 401: run the challenge flow so the next attempt is authorised.
 * -1 with a clear error when it cannot be (no/invalid credentials). */
int rc_http_authorize(struct rc_http *r, kiln_error **err);
/* Perform synchronously with retries and auth; 0 with r->status set
 * (any status), -1 on a transport failure after the retries. */
int rc_http_do(struct rc_http *r, kiln_error **err);
/* The error for an unexpected answer: "WHAT: HTTP 404 BLOB_UNKNOWN: message". */
int rc_http_fail(const struct rc_http *r, const char *what, kiln_error **err);
/* Milliseconds to wait before retry number `attempt` (1-based). */
unsigned rc_backoff_ms(unsigned attempt);
/* The same, or the answer's Retry-After (seconds, at most 60) if longer. */
unsigned rc_retry_delay_ms(const struct rc_http *r, unsigned attempt);
char *rc_url(const rc_client *c, const char *fmt, ...) KILN_PRINTF(2, 3);
/* A Location header resolved against the client's base URL. */
char *rc_url_resolve(const rc_client *c, const char *location);

#endif

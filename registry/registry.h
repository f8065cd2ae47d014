/* registry.h — the contract of kiln's OCI Distribution v1.1 registry server
 * (`kiln serve`): configuration, starting and stopping the server, manifest
 * validation (also used by the fuzzer), tokens and garbage collection.
 * Blobs live content-addressed on the filesystem, metadata in sqlite (WAL).
 * Second half: the client (references, credentials, blobs, manifests). */
#ifndef KILN_REGISTRY_H
#define KILN_REGISTRY_H

#include <stdint.h>

#include "kiln.h"

/* ---------------------------------------------------------------------------
 * Configuration.  reg_config_init() gives the embedded defaults; a JSON file
 * (see docs/registry.md) overrides any of them; flags override the file.
 * ------------------------------------------------------------------------- */
struct reg_config {
	char *host;                 /* listen address, IPv4 or IPv6 literal */
	uint16_t port;              /* 0 = pick an ephemeral port */
	char *data_dir;             /* blobs/, uploads/, meta.db */
	uint64_t manifest_max;      /* bytes; larger manifests get 413 */
	uint64_t blob_max;          /* bytes per blob upload; 0 = no limit */
	unsigned connection_limit;  /* concurrent connections (the library refuses more at accept) */
	unsigned connection_headroom; /* over limit - headroom: close the oldest idle connection, else 503 */
	unsigned per_ip_connection_limit; /* per client address (more are closed at accept); 0 = none */
	unsigned timeout_s;         /* no progress either way this long: closed (libmicrohttpd's timeout) */
	unsigned header_timeout_s;  /* a request's headers must be in within this (0 = no limit) */
	uint64_t body_min_rate;     /* bytes/s a body must average over each window (0 = no check) */
	unsigned body_rate_window_s;
	unsigned idle_timeout_s;    /* keep-alive connections idle this long are closed (0 = no limit) */
	unsigned auth_fail_burst;   /* failed authentications per address / token name before 429 */
	unsigned auth_fail_refill_s; /* then one more try per this many seconds */
	unsigned auth_fail_slots;   /* the limiter's fixed table size (entries) */
	uint64_t sndbuf;            /* socket send buffer per connection; 0 = kernel's autotuning */
	unsigned threads;           /* 0: a thread per connection; N: N event-loop threads */
	unsigned blob_streams;      /* large blob GETs sent at once, the rest queue in order; 0 = no limit */
	int64_t upload_expiry_s;    /* gc removes uploads idle longer than this */
	int64_t gc_grace_s;         /* gc keeps unreferenced blobs younger than this */
	int64_t gc_pin_s;           /* S3: a writer's pin protects a blob from gc this long */
	int auth;                   /* 1: Bearer tokens required (anonymous pull of public repos only) */
	char *realm;                /* token endpoint URL for the challenge; NULL = derived */
	char *service;              /* the "service" of the Bearer challenge */
	int64_t token_ttl_s;        /* lifetime of tokens issued by the token endpoint */
	/* S3 object storage (s3_endpoint NULL: the local filesystem): blobs and
	 * the metadata too (links, manifests, tags, history: meta_s3.c; tokens and
	 * the token key: auth_s3.c), so replicas share one bucket; uploads still
	 * stage under data_dir. */
	char *s3_endpoint, *s3_region, *s3_bucket, *s3_access_key, *s3_secret_key;
	json_t *build;              /* "build": true or {...}: the build service's settings (service/), else NULL */
};

void reg_config_init(struct reg_config *c);
void reg_config_free(struct reg_config *c);
/* Merge a JSON config file into c. */
int reg_config_load(struct reg_config *c, const char *path, kiln_error **err);
/* "HOST:PORT", "[V6]:PORT" or ":PORT". */
int reg_config_set_addr(struct reg_config *c, const char *addr, kiln_error **err);

/* ---------------------------------------------------------------------------
 * The server.  Runs its own threads; reg_server_stop() waits for them.
 * ------------------------------------------------------------------------- */
typedef struct reg_server reg_server;

reg_server *reg_server_start(const struct reg_config *c, kiln_error **err);
uint16_t reg_server_port(const reg_server *s);
const struct reg_config *reg_server_config(const reg_server *s);
void reg_server_stop(reg_server *s);

/* ---------------------------------------------------------------------------
 * Extra routes: another module (the build service, service/) serves its
 * endpoints from the same daemon.  The registry never includes it; `kiln
 * serve` wires the two (cli/cmd_serve.c).  A request whose path starts with a
 * mounted prefix is handed over whole and passes no registry auth of its own:
 * the handler asks reg_req_identify()/reg_req_allows().  Mount before
 * announcing the address; requests that came earlier got 404.
 * ------------------------------------------------------------------------- */
typedef struct reg_req reg_req;

/* Actions a token's scope grants ("NS:pull,push,delete,build" or "*"). */
enum reg_action { REG_PULL = 1, REG_PUSH = 2, REG_DELETE = 4, REG_BUILD = 8 };

struct reg_routes {
	const char *prefix;       /* e.g. "/build/": paths starting with it */
	void *ud;
	/* Headers are in: answer now (then a body is dropped) or not (the body follows). */
	void (*begin)(void *ud, reg_req *r);
	/* A piece of the body; < 0 closes the connection. */
	int (*body)(void *ud, reg_req *r, const char *data, size_t len);
	/* The body is in (or there was none): answer, if begin did not. */
	void (*end)(void *ud, reg_req *r);
	/* The request is over, answered or not (the client may have gone away
	 * mid-body): free what begin attached.  May be NULL. */
	void (*done)(void *ud, reg_req *r);
};
#define REG_ROUTES_MAX 4
/* rt is borrowed until reg_server_stop(). */
int reg_server_mount(reg_server *s, const struct reg_routes *rt, kiln_error **err);

const char *reg_req_method(const reg_req *r);
const char *reg_req_path(const reg_req *r);          /* unescaped, without the query */
const char *reg_req_header(reg_req *r, const char *key);
const char *reg_query(reg_req *r, const char *key);
const char *reg_req_client(const reg_req *r);        /* the client's address, "" unknown */
void reg_req_set_state(reg_req *r, void *state);     /* the handler's per-request state */
void *reg_req_state(const reg_req *r);
/* Who is asking: 1 a valid credential (Authorization Bearer/Basic, or the
 * secret in X-API-Key), 0 none, -2 invalid (counted by the failed-auth
 * limiter), -3 too many failures (429 already answered), -1 internal error.
 * With auth off: 1.  Idempotent per request. */
int reg_req_identify(reg_req *r, kiln_error **err);
/* Does the identified credential grant a on repo (a namespace)?  Auth off: 1. */
int reg_req_allows(reg_req *r, const char *repo, enum reg_action a);
/* The credential's namespaces that grant a, ";"-separated ("*" for every
 * namespace); NULL when none or anonymous.  Auth off: "*".  Caller frees. */
char *reg_req_namespaces(reg_req *r, enum reg_action a);
/* Answers (the handler's body and headers; a later call replaces it). */
void reg_respond(reg_req *r, unsigned status, const void *body, size_t len, const char *content_type);
void reg_header(reg_req *r, const char *name, const char *value);
/* A body of unknown length sent chunked as read() produces it: read blocks
 * until it has bytes (returns how many, at most max), returns 0 at the end
 * and < 0 to cut the connection; free_ud runs when the answer is done.
 * Blocking is fine with a thread per connection (the default `threads` 0). */
typedef long (*reg_stream_read)(void *ud, uint64_t pos, char *buf, size_t max);
void reg_respond_stream(reg_req *r, unsigned status, const char *content_type, reg_stream_read read, void *ud,
			void (*free_ud)(void *ud));

/* ---------------------------------------------------------------------------
 * Manifests.  reg_manifest_parse() checks that data is a manifest of one of
 * the supported media types (OCI image manifest / index, Docker schema2
 * manifest / list) and collects what it references.  content_type may be
 * NULL (then the body's mediaType decides).
 * ------------------------------------------------------------------------- */
enum reg_ref_kind { REG_REF_CONFIG, REG_REF_LAYER, REG_REF_MANIFEST };

struct reg_ref {
	enum reg_ref_kind kind;
	char digest[KILN_DIGEST_MAX];
	int64_t size;
	int external;               /* has urls (foreign layer): need not exist here */
};

struct reg_manifest {
	char *media_type;
	char *artifact_type;        /* artifactType, else config.mediaType (image manifests), or NULL */
	char subject[KILN_DIGEST_MAX]; /* "" when there is no subject */
	int is_index;
	struct reg_ref *refs;
	size_t nrefs;
	json_t *annotations;        /* borrowed from json, or NULL */
	json_t *json;               /* the parsed document (owned) */
};

int reg_manifest_parse(const char *data, size_t len, const char *content_type, struct reg_manifest *m,
		       kiln_error **err);
void reg_manifest_free(struct reg_manifest *m);

/* Repository names and tags as the distribution spec defines them (the
 * grammar of every reference: common/ref.c). */
static inline int reg_name_valid(const char *name) { return kiln_ref_name_valid(name); }
static inline int reg_tag_valid(const char *tag) { return kiln_ref_tag_valid(tag); }

/* ---------------------------------------------------------------------------
 * Administration on a data directory (safe while a server runs on it).
 * ------------------------------------------------------------------------- */
struct reg_gc_stats {
	uint64_t blobs_kept, blobs_removed, bytes_removed, uploads_removed;
};

/* Remove blobs no manifest references (older than the grace period) and
 * uploads idle past their expiry.  dry_run: count only. */
int reg_gc(const struct reg_config *c, int dry_run, struct reg_gc_stats *st, kiln_error **err);

struct reg_repo_info {
	char *name;
	int64_t tags, manifests;
	int public_;
};

/* All repositories (and their counts), sorted by name; prefix filters ("team/"). */
int reg_list_repos(const struct reg_config *c, const char *prefix, struct reg_repo_info **out, size_t *n,
		   kiln_error **err);
void reg_repo_info_free(struct reg_repo_info *r, size_t n);
/* One line per change of a tag: "TIME DIGEST" oldest first, into out. */
int reg_tag_history(const struct reg_config *c, const char *repo, const char *tag, kiln_buf *out,
		    kiln_error **err);
/* Note on the newest change of repo:tag to digest (shown after it by
 * reg_tag_history): the build service records its build id.  S3: none. */
int reg_tag_note(const struct reg_config *c, const char *repo, const char *tag, const char *digest, const char *note,
		 kiln_error **err);
int reg_set_public(const struct reg_config *c, const char *repo, int public_, kiln_error **err);

/* Tokens: a random secret shown once; only its sha256 is stored.
 * scopes: "NAMESPACE:ACTIONS" entries, e.g. "team-a:pull,push", "*:pull". */
int reg_token_create(const struct reg_config *c, const char *label, const char *const *scopes, int64_t ttl_s,
		     char **token_out, kiln_error **err);
int reg_token_list(const struct reg_config *c, kiln_buf *out, kiln_error **err);
int reg_token_revoke(const struct reg_config *c, const char *label, kiln_error **err);

/* ===========================================================================
 * The client (client_*.c): OCI Distribution over libcurl, for `kiln login`,
 * `kiln push`/`kiln pull`, FROM a registry and chunked template transfer.
 * Plain HTTP for loopback hosts and $KILN_INSECURE_REGISTRIES (comma-
 * separated HOST[:PORT]), HTTPS otherwise.  Keep-alive connections shared by
 * every request of a client; connection errors, 429 and 5xx are retried with
 * exponential backoff; 401 runs the Bearer/Basic challenge flow (tokens
 * cached per scope).  See docs/registry.md, "Client".
 * ========================================================================= */

/* An image reference (kiln_ref_parse, common/ref.c) as a registry sees it:
 * no host (or docker.io) means Docker Hub ("registry-1.docker.io", single
 * names get "library/").  Neither tag nor digest: tag "latest". */
struct reg_imgref {
	char *host;   /* "127.0.0.1:5000", "registry-1.docker.io" */
	char *repo;   /* "team/app", "library/busybox" */
	char *tag;    /* NULL when only a digest was given */
	char *digest; /* "sha256:…" or NULL */
};

int reg_imgref_parse(const char *s, struct reg_imgref *r, kiln_error **err);
void reg_imgref_free(struct reg_imgref *r);
/* "HOST/REPO:TAG", "HOST/REPO@DIGEST" or "HOST/REPO:TAG@DIGEST". */
char *reg_imgref_str(const struct reg_imgref *r);
/* What to ask the registry for: the digest if any, else the tag. */
const char *reg_imgref_reference(const struct reg_imgref *r);
/* 1 when HOST[:PORT] is spoken to over plain HTTP (loopback, insecure list). */
int reg_host_insecure(const char *host);

/* Credentials.  kiln's own file is $KILN_HOME/auth.json (0600), in docker's
 * config.json shape {"auths":{"HOST":{"auth":"base64(user:pass)"}}}; lookups
 * fall back to $REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json and
 * ~/.docker/config.json.  Docker Hub is also found under its legacy keys. */
char *reg_auth_path(void);
/* 1 found (*user, *pass set, caller frees), 0 none. */
int reg_auth_lookup(const char *host, char **user, char **pass, kiln_error **err);
int reg_auth_store(const char *host, const char *user, const char *pass, kiln_error **err);
/* KILN_E_NOTFOUND when kiln's file has no entry for host. */
int reg_auth_remove(const char *host, kiln_error **err);

typedef struct reg_client reg_client;

struct reg_client_opts {
	const char *user, *pass; /* explicit credentials; NULL: from the auth files */
	int anonymous;           /* ignore stored credentials */
	unsigned retries;        /* retries after a transient failure; 0: 4 ($KILN_REGISTRY_RETRIES) */
	unsigned timeout_s;      /* connect timeout and stall limit; 0: 30 */
	uint64_t max_rate;       /* bytes/s per transfer, each way; 0: unlimited */
	const char *base;        /* "SCHEME://HOST[:PORT]" to use as is (S3 endpoints); NULL: derived */
};

struct reg_client_stats {
	uint64_t bytes_up, bytes_down; /* body bytes sent and received */
	uint64_t requests, retries;
	uint64_t connects;             /* new connections opened (the rest reused one) */
};

/* A client for one registry host (HOST[:PORT] as in struct reg_imgref);
 * used by one thread at a time (its parallelism is curl multi, not threads). */
reg_client *reg_client_new(const char *host, const struct reg_client_opts *o, kiln_error **err);
void reg_client_free(reg_client *c);
const struct reg_client_stats *reg_client_stats(const reg_client *c);
/* GET /v2/, authenticating if challenged: checks that the registry answers
 * and that the credentials (if any) are accepted. */
int reg_client_ping(reg_client *c, kiln_error **err);

/* Media types the client asks for by default when getting a manifest. */
#define REG_MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define REG_MT_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define REG_MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define REG_MT_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"

struct reg_doc {
	char *data;                   /* NUL-terminated */
	size_t len;
	char *media_type;             /* Content-Type of the answer */
	char digest[KILN_DIGEST_MAX]; /* computed over data (never trusted from headers) */
};
void reg_doc_free(struct reg_doc *d);

/* GET a manifest by tag or digest.  accept: NULL = the four types above.
 * A digest reference is verified against the bytes.  Max 4 MiB. */
int reg_manifest_get(reg_client *c, const char *repo, const char *ref, const char *accept, struct reg_doc *out,
		     kiln_error **err);
/* Like reg_manifest_get, an index (or docker list) resolved to its
 * linux/amd64 image manifest. */
int reg_image_manifest_get(reg_client *c, const char *repo, const char *ref, struct reg_doc *out,
			   kiln_error **err);
/* 1 present (digest, may be NULL), 0 missing: HEAD of the manifest. */
int reg_manifest_exists(reg_client *c, const char *repo, const char *ref, char digest[KILN_DIGEST_MAX],
			kiln_error **err);
/* PUT under ref (tag or digest); *digest (may be NULL) gets the sha256. */
int reg_manifest_put(reg_client *c, const char *repo, const char *ref, const char *media_type, const void *data,
		     size_t len, char digest[KILN_DIGEST_MAX], kiln_error **err);

/* 1 present (*size if not NULL), 0 missing: HEAD of the blob. */
int reg_blob_exists(reg_client *c, const char *repo, const char *digest, int64_t *size, kiln_error **err);
/* A whole blob into memory (at most max bytes), verified. */
int reg_blob_get_mem(reg_client *c, const char *repo, const char *digest, size_t max, char **data, size_t *len,
		     kiln_error **err);

/* One blob to move.  Push: the source is `path` (a file) or `data`/`len`;
 * pull: the sink is `path`, staged as PATH.part (kept after an interruption
 * and resumed with Range next time), verified against the digest, fsync'd,
 * then renamed: PATH only ever appears complete and correct. */
struct reg_blob {
	char digest[KILN_DIGEST_MAX]; /* sha256 or sha512 */
	int64_t size;                 /* push: ignored (taken from the source); pull: -1 if unknown */
	const char *path;
	const void *data;
	size_t len;
	const char *mount_from;       /* push: a repository of the same registry that may have it */
};

struct reg_progress {
	uint64_t bytes_done, bytes_total; /* skipped blobs count as done */
	uint64_t bytes_moved;             /* bytes actually sent / received (retries included) */
	size_t blobs_done, blobs_total, blobs_skipped;
	const char *digest;               /* the blob just finished, or NULL */
};

struct reg_xfer_opts {
	unsigned parallel;      /* transfers at once; 0: 4 */
	uint64_t chunk_size;    /* push: larger blobs go in PATCH chunks of this size; 0: 32 MiB */
	/* pull: 1 = the caller already has this blob, skip it */
	int (*have)(void *ud, const char *digest);
	void (*progress)(void *ud, const struct reg_progress *p); /* at most ~10/s, and per blob */
	void *ud;
	/* pull: rename each verified blob into place without fsync (of it or of
	 * its directory).  Only for destinations that verify every read against
	 * the digest and fetch again what fails (the chunk store): after a power
	 * loss PATH may then be torn, which such a reader detects.  Otherwise
	 * (0) PATH is durable before it appears, and so only ever complete. */
	int no_fsync;
};

/* Parallel transfers over one curl multi handle.  Push skips the blobs the
 * registry has (HEAD), tries a cross-repository mount when mount_from is set,
 * then uploads (POST + PUT, or PATCH chunks for large blobs, resumed from the
 * session's offset after a failure).  Pull skips what have() reports, then
 * GETs into PATH.part with resume.  Stops at the first failed blob. */
int reg_blobs_push(reg_client *c, const char *repo, const struct reg_blob *blobs, size_t n,
		   const struct reg_xfer_opts *o, kiln_error **err);
int reg_blobs_pull(reg_client *c, const char *repo, const struct reg_blob *blobs, size_t n,
		   const struct reg_xfer_opts *o, kiln_error **err);
/* For CLIs: "3/5 blobs (1 present), 12.0/40.0 MiB, 5.1 MiB/s, ETA 6s" and
 * the same as a JSON object {"blobs_done",…,"bytes_moved","rate"}. */
void reg_progress_format(const struct reg_progress *p, double elapsed_s, kiln_buf *out);
json_t *reg_progress_json(const struct reg_progress *p, double elapsed_s);

/* One blob (the same machinery, parallel 1). */
int reg_blob_push(reg_client *c, const char *repo, const struct reg_blob *b, kiln_error **err);
int reg_blob_get(reg_client *c, const char *repo, const struct reg_blob *b, kiln_error **err);

/* ---------------------------------------------------------------------------
 * Template distribution (docs/distribution.md).  A template version travels
 * as an OCI image manifest: config = the template config, layers = an index
 * blob then the zstd chunks of its files.  reg_chunks is the host's chunk
 * store ($KILN_HOME/chunks), shared by all templates, LRU-evicted.
 * ------------------------------------------------------------------------- */
#define REG_TMPL_ARTIFACT_TYPE "application/vnd.kiln.template.v1"
#define REG_TMPL_CONFIG_MEDIA "application/vnd.kiln.template.config.v1+json"
#define REG_TMPL_INDEX_MEDIA "application/vnd.kiln.template.index.v1+json"
#define REG_TMPL_CHUNK_MEDIA "application/vnd.kiln.template.chunk.v1+zstd"

typedef struct reg_chunks reg_chunks;

/* dir NULL: $KILN_HOME/chunks (created). */
reg_chunks *reg_chunks_open(const char *dir, kiln_error **err);
void reg_chunks_close(reg_chunks *cs);
const char *reg_chunks_dir(const reg_chunks *cs);
char *reg_chunks_path(const reg_chunks *cs, const char *digest);
/* 1 if the chunk is stored (and marks it used), else 0. */
int reg_chunks_has(reg_chunks *cs, const char *digest);
/* A new temp file in the store (for a download); then commit verifies it
 * against digest and moves it in, or removes it. */
char *reg_chunks_tmp(reg_chunks *cs, int *fd, kiln_error **err);
int reg_chunks_commit(reg_chunks *cs, const char *tmp, const char *digest, kiln_error **err);
int reg_chunks_put(reg_chunks *cs, const void *data, size_t len, char digest[KILN_DIGEST_MAX], kiln_error **err);
/* A chunk's bytes, verified (a corrupted one is removed and is an error). */
int reg_chunks_get(reg_chunks *cs, const char *digest, char **data, size_t *len, kiln_error **err);
/* Keep these chunks from eviction until unpin/close (or this process dies). */
int reg_chunks_pin(reg_chunks *cs, const char *const *digests, size_t n, kiln_error **err);
void reg_chunks_unpin(reg_chunks *cs);

struct reg_chunks_stats {
	uint64_t chunks, bytes;        /* in the store after eviction */
	uint64_t evicted, evicted_bytes, pinned;
};
/* Remove least recently used chunks until the store holds at most max_bytes
 * (disk usage), never a pinned one. */
int reg_chunks_evict(reg_chunks *cs, uint64_t max_bytes, struct reg_chunks_stats *st, kiln_error **err);
/* The store's size limit: $KILN_CHUNKS_MAX ("20G"), default 20 GiB. */
uint64_t reg_chunks_limit(void);

/* Whether a manifest is a kiln template artifact. */
int reg_tmpl_is_artifact(const char *manifest, size_t len);

struct reg_tmpl_xfer_opts {
	unsigned parallel;             /* 0: the client's default */
	void (*progress)(void *ud, const struct reg_progress *p);
	void *ud;
};

struct reg_tmpl_stats {
	uint64_t bytes_total;          /* the artifact: manifest, config, index and every chunk blob */
	uint64_t bytes_moved;          /* HTTP body bytes sent (push) or received (pull), retries included */
	size_t blobs_total, blobs_moved;
	double seconds;
	char manifest_digest[KILN_DIGEST_MAX];
	char template_digest[KILN_DIGEST_MAX]; /* pull: the local template */
};

/* Push a local template (NAME[:TAG] or digest) to repo under ref (tag or
 * digest): only blobs the registry lacks are uploaded. */
int reg_tmpl_push(reg_client *c, const char *template_ref, const char *repo, const char *ref,
		  const struct reg_tmpl_xfer_opts *o, struct reg_tmpl_stats *st, kiln_error **err);
/* Pull the template artifact whose manifest was fetched from repo: only
 * chunks the chunk store lacks are downloaded; then assembled, verified and
 * imported as template name (NAME[:TAG]). */
int reg_tmpl_pull(reg_client *c, const char *repo, const struct reg_doc *manifest, const char *name,
		  const struct reg_tmpl_xfer_opts *o, struct reg_tmpl_stats *st, kiln_error **err);

#endif

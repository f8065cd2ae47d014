/* registry.h — the contract of kiln's OCI Distribution v1.1 registry server
 * (`kiln serve`): configuration, starting and stopping the server, manifest
 * validation (also used by the fuzzer), tokens and garbage collection.
 * Blobs live content-addressed on the filesystem, metadata in sqlite (WAL). */
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
	unsigned connection_limit;  /* concurrent connections */
	unsigned timeout_s;         /* idle connection timeout (slow clients) */
	uint64_t sndbuf;            /* socket send buffer per connection; 0 = kernel's autotuning */
	unsigned threads;           /* 0: a thread per connection; N: N event-loop threads */
	int64_t upload_expiry_s;    /* gc removes uploads idle longer than this */
	int64_t gc_grace_s;         /* gc keeps unreferenced blobs younger than this */
	int auth;                   /* 1: Bearer tokens required (anonymous pull of public repos only) */
	char *realm;                /* token endpoint URL for the challenge; NULL = derived */
	char *service;              /* the "service" of the Bearer challenge */
	int64_t token_ttl_s;        /* lifetime of tokens issued by the token endpoint */
	/* S3 object storage for blobs (s3_endpoint NULL: the local filesystem);
	 * uploads still stage under data_dir, metadata stays in data_dir/meta.db. */
	char *s3_endpoint, *s3_region, *s3_bucket, *s3_access_key, *s3_secret_key;
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
void reg_server_stop(reg_server *s);

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

/* Repository names and tags as the distribution spec defines them. */
int reg_name_valid(const char *name);
int reg_tag_valid(const char *tag);

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
int reg_set_public(const struct reg_config *c, const char *repo, int public_, kiln_error **err);

/* Tokens: a random secret shown once; only its sha256 is stored.
 * scopes: "NAMESPACE:ACTIONS" entries, e.g. "team-a:pull,push", "*:pull". */
int reg_token_create(const struct reg_config *c, const char *label, const char *const *scopes, int64_t ttl_s,
		     char **token_out, kiln_error **err);
int reg_token_list(const struct reg_config *c, kiln_buf *out, kiln_error **err);
int reg_token_revoke(const struct reg_config *c, const char *label, kiln_error **err);

#endif

/* registry.h — the contract of kiln's OCI Distribution v1.1 registry server
 * (`kiln serve`): configuration, starting and stopping the server,
 * administration, tokens and garbage collection.  Blobs live content-addressed on the
 * filesystem with metadata in sqlite (WAL), or everything in an S3 bucket.
 * The formats are oci/'s, the client is regclient/. */
#ifndef KILN_REGISTRY_H
#define KILN_REGISTRY_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln.h"

/* ---------------------------------------------------------------------------
 * Configuration.  reg_config_init() gives the embedded defaults; a JSON file
 * (see docs/registry.md) overrides any of them; flags override the file.
 * ------------------------------------------------------------------------- */
struct reg_config {
	char *host;                 /* listen address, IPv4 or IPv6 literal */
	uint16_t port;              /* 0 = pick an ephemeral port */
	char *data_dir;             /* uploads/, meta.db, and blobs/ with no S3 backend */
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
	int64_t gc_interval_s;      /* kiln serve runs retention + gc this often; 0 = never */
	json_t *retention;          /* "retention": the rules (validated, reg_retain_check), or NULL */
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
	json_t *sandboxes;          /* "sandboxes": true or {...}: the sandbox service's (service/), else NULL */
	enum reg_access_log { REG_LOG_OFF, REG_LOG_TEXT, REG_LOG_JSON } access_log; /* a line per request on stderr */
	json_t *quotas;             /* "quotas": {"TEAM" or "*": {KEY: N or null}} (checked at load), else NULL */
	int ui;                     /* "ui": the dashboard at /ui/ and its /kiln/v1/ JSON (1 by default; docs/dashboard.md) */
};

void reg_config_init(struct reg_config *c);
void reg_config_free(struct reg_config *c);
/* Merge a JSON config file into c. */
int reg_config_load(struct reg_config *c, const char *path, kiln_error **err);
/* "text", "json" or "off" (the config's "access_log", kiln serve --log-format). */
int reg_access_log_parse(const char *s, enum reg_access_log *out, kiln_error **err);
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
/* What repo's ref (a tag or a digest) names in this server's store now:
 * 1 found (digest set), 0 not, -1 error.  No HTTP and no database opened
 * (the build service's look at a tag, service/replay.c). */
int reg_server_resolve(reg_server *s, const char *repo, const char *ref, char digest[KILN_DIGEST_MAX], kiln_error **err);

/* ---------------------------------------------------------------------------
 * Extra routes: another module (the build service, service/) serves its
 * endpoints from the same daemon.  The registry never includes it; `kiln
 * serve` wires the two (cli/cmd_serve.c).  A request whose path starts with a
 * mounted prefix is handed over whole and passes no registry auth of its own:
 * the handler asks reg_req_identify()/reg_req_allows().  Mount before
 * announcing the address; requests that came earlier got 404.
 * ------------------------------------------------------------------------- */
typedef struct reg_req reg_req;

/* Actions a token's scope grants ("NS:pull,push,delete,build,sandbox,metrics"
 * or "*"); metrics (GET /metrics) is granted by namespace "*" only. */
enum reg_action { REG_PULL = 1, REG_PUSH = 2, REG_DELETE = 4, REG_BUILD = 8, REG_SANDBOX = 16, REG_METRICS = 32 };

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
	/* Or, instead of the prefix, whether a request is the module's: asked
	 * with the headers in, before the registry's own routes.  May be NULL. */
	bool (*match)(void *ud, reg_req *r);
	/* Its requests' route label in /metrics ("build", "sandbox"); NULL: the prefix. */
	const char *name;
};
#define REG_ROUTES_MAX 8
/* rt is borrowed until reg_server_stop(). */
int reg_server_mount(reg_server *s, const struct reg_routes *rt, kiln_error **err);

/* What a module adds to GET /metrics, GET /readyz and GET /kiln/v1/usage.
 * metrics appends whole metric families in Prometheus' text format
 * (reg_metric_head, then samples); ready returns 0, or -1 with err saying
 * what is failing; usage sets, in quotas, each quota key the module enforces
 * to what team uses of it now, counted as its check counts:
 * reg_usage_set().  Any may be NULL; all run on request threads.  o is
 * borrowed until stop. */
struct reg_observer {
	const char *name;          /* its line in /readyz: "queue", "sandboxes" */
	void *ud;
	void (*metrics)(void *ud, kiln_buf *out);
	int (*ready)(void *ud, kiln_error **err);
	int (*usage)(void *ud, const char *team, json_t *quotas, kiln_error **err);
};
/* quotas[key] = {"used": used, "limit": limit}; limit < 0: none. */
void reg_usage_set(json_t *quotas, const char *key, int64_t used, int64_t limit);
int reg_server_observe(reg_server *s, const struct reg_observer *o, kiln_error **err);
void reg_metric_head(kiln_buf *out, const char *name, const char *type, const char *help);
void reg_metric_label(kiln_buf *out, const char *value); /* escaped for inside "..." */
/* A duration histogram kept for /metrics (1 ms .. 1 h buckets): observed
 * lock-free from any thread; zeroed memory is an empty one. */
#define REG_HIST_BUCKETS 17
struct reg_histogram {
	uint64_t n[REG_HIST_BUCKETS + 1]; /* per bucket, not cumulative; the last: past them all */
	uint64_t sum_us;
};
void reg_histogram_observe(struct reg_histogram *h, double seconds);
/* Its _bucket, _sum and _count samples (after the family's head), labels
 * `k="v",...` (escaped) or NULL; nothing when nothing was observed. */
void reg_metric_histogram(kiln_buf *out, const char *name, const char *labels, const struct reg_histogram *h);
/* Whole families with a series per value of one label: counters (read
 * atomically) and histograms. */
void reg_metric_counters(kiln_buf *out, const char *name, const char *help, const char *label,
			 const char *const *values, const uint64_t *counters, size_t n);
void reg_metric_histograms(kiln_buf *out, const char *name, const char *help, const char *label,
			   const char *const *values, const struct reg_histogram *h, size_t n);

const char *reg_req_method(const reg_req *r);
const char *reg_req_path(const reg_req *r);          /* unescaped, without the query */
const char *reg_req_header(reg_req *r, const char *key);
/* A well-formed Content-Length: true with *n, false when none is declared. */
bool reg_req_content_length(reg_req *r, uint64_t *n);
const char *reg_query(reg_req *r, const char *key);
/* Every header (args false) or query argument (true, unescaped; value NULL
 * for a bare key), in the order the client sent them: for a proxy. */
void reg_req_each(const reg_req *r, bool args, void (*fn)(void *ud, const char *key, const char *value), void *ud);
const char *reg_req_client(const reg_req *r);        /* the client's address, "" unknown */
/* The request's id: the client's X-Request-Id when it is 1-64 of [A-Za-z0-9._-],
 * else one made here; sent back in X-Request-Id and in its access-log line. */
const char *reg_req_id(const reg_req *r);
/* Whose request it is, for its access-log line (a module's own team rule). */
void reg_req_set_team(reg_req *r, const char *team);
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
 * Administration on a data directory (safe while a server runs on it).
 * ------------------------------------------------------------------------- */
struct reg_gc_stats {
	uint64_t blobs_kept, blobs_removed, bytes_removed, uploads_removed;
};

/* Remove blobs no manifest references (older than the grace period) and
 * uploads idle past their expiry.  dry_run: count only. */
int reg_gc(const struct reg_config *c, int dry_run, struct reg_gc_stats *st, kiln_error **err);

/* Retention (retain.c, docs/operations.md "Retention"): the config's rules
 * remove tags beyond each repository's newest N (unless a keep pattern names
 * them), then the manifests nothing points at any more, and untagged
 * manifests older than a rule's age, all in one write transaction.  Blobs are
 * left to the next gc, their grace period counted from now.  Filesystem
 * metadata only. */
struct reg_retain_item {
	const char *repo;
	const char *tag;            /* a removed tag, or NULL: a removed manifest */
	const char *digest;         /* the manifest (the tag's, for a tag) */
	const char *reason;         /* "retention[0].keep_newest", "untagged manifest of sha256:..." */
};
struct reg_retain_stats {
	uint64_t repos, tags_removed, manifests_removed;
	uint64_t blobs_freed, bytes_freed; /* blobs (manifests' bytes too) nothing references after the run */
};
/* Each item removed (or, dry_run, that would be) after the transaction ends. */
typedef void (*reg_retain_fn)(void *ud, const struct reg_retain_item *it);
int reg_retain(const struct reg_config *c, int dry_run, reg_retain_fn fn, void *ud, struct reg_retain_stats *st,
	       kiln_error **err);
/* Whether a "retention" value is valid: INVALID naming retention[i].KEY. */
int reg_retain_check(const json_t *rules, kiln_error **err);

/* What a garbage collection does, as `kiln registry gc` and kiln serve's gc
 * timer run it: the retention rules (when the config has any), then reg_gc.
 * A run that is not dry is counted in meta.db (table gc_runs, by source and
 * outcome), which /metrics reads, so the CLI's runs are seen too. */
struct reg_gc_run {
	bool retained; /* the config has retention rules: retain holds what they did */
	struct reg_retain_stats retain;
	struct reg_gc_stats gc;
};
int reg_gc_run(const struct reg_config *c, const char *source, int dry_run, struct reg_gc_run *run, kiln_error **err);

/* A backup of a filesystem data directory while it serves (docs/operations.md):
 * DEST/meta.db (and e2b/e2b.db) as one consistent snapshot each, the token
 * and sandbox keys, blobs.txt (each blob that snapshot needs, "DIGEST SIZE"),
 * with_blobs: those blobs under DEST/blobs (only the ones an earlier backup
 * there lacks), and backup.json last.  DEST: new, empty, or an earlier backup. */
struct reg_backup_stats {
	uint64_t blobs, bytes;          /* what the metadata needs */
	uint64_t copied, copied_bytes;  /* blobs copied this time */
	kiln_strv missing;              /* blobs found nowhere */
};
int reg_backup(const struct reg_config *c, const char *dest, bool with_blobs, struct reg_backup_stats *st,
	       kiln_error **err);
/* Onto a data directory without metadata: every listed blob placed in its
 * blobs/ (verified, from the backup's blobs/ when it lacks one) before the
 * metadata is; KILN_E_NOTFOUND naming the missing ones, metadata untouched. */
int reg_restore(const struct reg_config *c, const char *backup, struct reg_backup_stats *st, kiln_error **err);
void reg_backup_stats_free(struct reg_backup_stats *st);

/* ---------------------------------------------------------------------------
 * Quotas per team (quota.c): a team is a repository name's first component.
 * A value is set for "*" (every team) or one team, in the config file's
 * "quotas" or in meta.db (`kiln registry quota`); per key, the team's own
 * beats "*"'s and at each the database's beats the config's.  The registry
 * enforces bytes and repos (403 DENIED naming quota and usage); the build
 * and sandbox services read the rest.
 * ------------------------------------------------------------------------- */
enum reg_quota_key {
	REG_QUOTA_BYTES,          /* stored bytes, each blob and manifest once per team */
	REG_QUOTA_REPOS,
	REG_QUOTA_BUILDS,         /* running at once (the others wait in the queue) */
	REG_QUOTA_BUILD_MINUTES,  /* per UTC day: submits past it are refused */
	REG_QUOTA_SANDBOXES, REG_QUOTA_SANDBOX_MEMORY, REG_QUOTA_SANDBOX_VCPUS,
	REG_QUOTA_N
};
#define REG_QUOTA_NONE (-1)
struct reg_quota {
	int64_t v[REG_QUOTA_N];   /* REG_QUOTA_NONE: no limit */
	enum reg_quota_src { REG_QUOTA_UNSET, REG_QUOTA_CONFIG_ALL, REG_QUOTA_DB_ALL, REG_QUOTA_CONFIG, REG_QUOTA_DB }
		src[REG_QUOTA_N];  /* where v came from */
};
const char *reg_quota_key_name(enum reg_quota_key k);  /* "bytes", "build_minutes", ... */
const char *reg_quota_key_what(enum reg_quota_key k);  /* "stored bytes", ... */
int reg_quota_key_parse(const char *name, enum reg_quota_key *k, kiln_error **err);
/* A number ("10G" for bytes) or "none" (REG_QUOTA_NONE). */
int reg_quota_value_parse(enum reg_quota_key k, const char *s, int64_t *out, kiln_error **err);
bool reg_quota_team_valid(const char *team);
int reg_quota_get(const struct reg_config *c, const char *team, struct reg_quota *q, kiln_error **err);
/* Store team's k in meta.db (clear: remove it, the config's applies again). */
int reg_quota_set(const struct reg_config *c, const char *team, enum reg_quota_key k, int64_t v, bool clear,
		  kiln_error **err);
/* The running server's view (the services'): team's quotas, and the teams
 * with a value of their own for k (not "*"), appended to teams. */
int reg_server_quota(reg_server *s, const char *team, struct reg_quota *q, kiln_error **err);
int reg_server_quota_teams(reg_server *s, enum reg_quota_key k, kiln_strv *teams, kiln_error **err);

/* What each team holds (filesystem metadata), sorted by team. */
struct reg_team_usage {
	char *team;
	int64_t repos, tags, blobs, bytes;
};
int reg_usage(const struct reg_config *c, struct reg_team_usage **out, size_t *n, kiln_error **err);
void reg_team_usage_free(struct reg_team_usage *u, size_t n);

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
 * reg_tag_history): the build service records its build id (S3: in that
 * change's history object, after the digest). */
int reg_tag_note(const struct reg_config *c, const char *repo, const char *tag, const char *digest, const char *note,
		 kiln_error **err);
int reg_set_public(const struct reg_config *c, const char *repo, int public_, kiln_error **err);

/* Tokens: a random secret shown once; only its sha256 is stored.
 * scopes: "NAMESPACE:ACTIONS" entries, e.g. "team-a:pull,push", "*:pull". */
int reg_token_create(const struct reg_config *c, const char *label, const char *const *scopes, int64_t ttl_s,
		     char **token_out, kiln_error **err);
/* The same with the secret's prefix: "kiln_" (reg_token_create's) or "e2b_",
 * the shape E2B's SDKs check an API key for before sending it. */
int reg_token_create_as(const struct reg_config *c, const char *label, const char *const *scopes, int64_t ttl_s,
			const char *prefix, char **token_out, kiln_error **err);
int reg_token_list(const struct reg_config *c, kiln_buf *out, kiln_error **err);
int reg_token_revoke(const struct reg_config *c, const char *label, kiln_error **err);

#endif

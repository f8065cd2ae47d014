/* internal.h — what the registry's files share and nothing outside sees: the
 * server and per-request state, the blob store and upload sessions, the
 * metadata database and the HTTP response helpers. */
#ifndef KILN_REGISTRY_INTERNAL_H
#define KILN_REGISTRY_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include <microhttpd.h>
#include <sqlite3.h>

#include "registry/registry.h"
#include "oci/oci.h"
#include "regclient/regclient.h"

/* ---- metadata database (db.c, db_query.c) ---- */
struct reg_db_commit;
typedef struct reg_db {
	sqlite3 *h;
	pthread_mutex_t lock;
	/* group commit of blob links (db_group.c) */
	pthread_mutex_t glock;
	pthread_cond_t gdone;
	struct reg_db_commit *gqueue, **gtail;
	int gleader;               /* a thread is committing a group */
	uint64_t groups, grouped;  /* groups committed, links in them (tests, logs) */
	const json_t *quotas;      /* the config's "quotas" (borrowed), or NULL */
} reg_db;
void reg_db_group_init(reg_db *db);
/* Quotas (quota.c), caller holds the lock: team's values; whether adding
 * digest (size bytes, a manifest or a blob) or creating repository repo
 * stays within its team's quota (else KILN_E_QUOTA saying which and how much). */
#define REG_TEAM_MAX 256
void reg_team_of(const char *repo, char team[REG_TEAM_MAX]);
int reg_db_quota_locked(reg_db *db, const char *team, struct reg_quota *q, kiln_error **err);
struct reg_quota_acc {      /* a stored-bytes check across one set of links (zeroed to start) */
	bool loaded;
	char team[REG_TEAM_MAX];
	int64_t limit, used;
};
int reg_db_quota_add_locked(reg_db *db, struct reg_quota_acc *a, const char *repo, const char *digest, int64_t size,
			    bool manifest, kiln_error **err);
int reg_db_quota_repo_locked(reg_db *db, const char *repo, kiln_error **err);
int reg_quota_config_check(const json_t *q, kiln_error **err); /* the config's "quotas" */
/* Refuse quotas c's backend cannot enforce (only: that key, or REG_QUOTA_N: the config's). */
int reg_quota_backend_check(const struct reg_config *c, enum reg_quota_key only, kiln_error **err);
int reg_db_team_bytes_locked(reg_db *db, const char *team, int64_t *bytes, kiln_error **err);
int reg_db_team_holds_locked(reg_db *db, const char *team, const char *digest, bool manifest, kiln_error **err);
void reg_db_group_destroy(reg_db *db);

reg_db *reg_db_open(const char *path, kiln_error **err);
/* meta.db's schema version (PRAGMA user_version); KILN_E_INVALID for a
 * version newer than this kiln's (docs/operations.md "Upgrades"). */
int reg_db_schema_read(sqlite3 *h, kiln_error **err);
/* Low-level helpers for db*.c; the caller holds db->lock. */
int reg_db_fail(reg_db *db, kiln_error **err, const char *what);
sqlite3_stmt *reg_db_prep(reg_db *db, const char *sql, kiln_error **err);
int reg_db_exec(reg_db *db, const char *sql, kiln_error **err);
int reg_db_repo_locked(reg_db *db, const char *name, int create, int64_t *id, kiln_error **err);
int reg_db_change(reg_db *db, const char *sql, int64_t id, const char *a, const char *b, kiln_error **err);
int64_t reg_db_now(void);
/* A connection on c's data directory (for administration). */
reg_db *reg_db_open_cfg(const struct reg_config *c, kiln_error **err);
void reg_db_close(reg_db *db);
/* Repository id; create=0 and missing: returns 0 with *id = 0. */
int reg_db_repo(reg_db *db, const char *name, int create, int64_t *id, kiln_error **err);
/* Puts a blob's bytes in place; run inside the write transaction that links or
 * records it.  gc removes a blob file only inside its own write transaction,
 * so the two are serialised: the bytes and their link appear together. */
typedef int (*reg_db_place_fn)(void *ud, kiln_error **err);
/* Links digest into repo, with place (may be NULL: bytes already stored) run
 * inside the write transaction.  Group commit (db_group.c): links that arrive
 * while another group commits go together in the next transaction, one
 * directory fsync per distinct directory of sync_path (the placed file, whose
 * place left its rename unsynced; NULL: nothing to sync) and one sqlite
 * commit; each returns only once its own link is durable (or failed). */
int reg_db_blob_link(reg_db *db, const char *repo, const char *digest, int64_t size, reg_db_place_fn place,
		     void *ud, const char *sync_path, kiln_error **err);
/* One link of reg_db_blob_link_many: the same fields. */
struct reg_db_link {
	const char *digest, *sync_path;
	int64_t size;
	reg_db_place_fn place;
	void *ud;
};
/* n links into repo that stand or fall together (a batch upload): queued at
 * once, so they commit in one group; if one fails, none of them is linked. */
int reg_db_blob_link_many(reg_db *db, const char *repo, const struct reg_db_link *links, size_t n,
			  kiln_error **err);
/* 1 linked (size set), 0 not, -1 error. */
int reg_db_blob_linked(reg_db *db, const char *repo, const char *digest, int64_t *size, kiln_error **err);
int reg_db_blob_unlink(reg_db *db, const char *repo, const char *digest, kiln_error **err);
/* The first max repositories (by name) that hold digest (for mounts without from=). */
int reg_db_blob_holders(reg_db *db, const char *digest, long max, kiln_strv *out, kiln_error **err);
/* Records a manifest whose refs all exist in repo (checked in the same
 * transaction): 1 stored; 0 when m->refs[*missing] is not there; -1 error. */
int reg_db_manifest_put(reg_db *db, const char *repo, const char *digest, int64_t size,
			const struct oci_manifest *m, const char *tag, reg_db_place_fn place, void *ud, long *missing,
			kiln_error **err);
/* Link digest into repo if `from` has it (atomically): 1 mounted, 0 not, -1 error. */
int reg_db_blob_mount(reg_db *db, const char *repo, const char *from, const char *digest, kiln_error **err);
int reg_db_blob_linked_locked(reg_db *db, int64_t id, const char *digest);
/* ref is a tag or a digest.  1 found (digest, media type, size), 0 not, -1 error. */
int reg_db_manifest_get(reg_db *db, const char *repo, const char *ref, char digest[KILN_DIGEST_MAX],
			char **media_type, int64_t *size, kiln_error **err);
int reg_db_manifest_delete(reg_db *db, const char *repo, const char *digest, kiln_error **err);
int reg_db_tag_delete(reg_db *db, const char *repo, const char *tag, kiln_error **err);
/* The same two inside the caller's write transaction, lock held (retain.c). */
int reg_db_manifest_delete_locked(reg_db *db, int64_t id, const char *digest, kiln_error **err);
int reg_db_tag_delete_locked(reg_db *db, int64_t id, const char *tag, kiln_error **err);
/* Sorted names after `last` (may be NULL), at most n (n < 0: all); *more set if cut. */
int reg_db_tags(reg_db *db, const char *repo, const char *last, long n, kiln_strv *out, int *more, kiln_error **err);
int reg_db_catalog(reg_db *db, const char *last, long n, kiln_strv *out, int *more, kiln_error **err);
/* Descriptors (json array) of manifests in repo whose subject is digest. */
int reg_db_referrers(reg_db *db, const char *repo, const char *subject, const char *artifact_type,
		     json_t *out, kiln_error **err);
int reg_db_repo_public(reg_db *db, const char *repo, kiln_error **err);

/* ---- blob store (store.c) and upload sessions (upload_store.c) ---- */
struct reg_s3_cfg {
	char *endpoint;     /* "http://127.0.0.1:8000" */
	char *region;       /* "us-east-1" */
	char *bucket;
	char *access_key, *secret_key;
};

struct reg_backend;
/* One blob of a batch upload: a verified file src (uploads/) of size bytes. */
struct reg_staged {
	const char *digest, *src;
	int64_t size;
};

typedef struct reg_store {
	const struct reg_backend *ops; /* reg_backend_fs or reg_backend_s3 (by config) */
	char *root, *blobs, *uploads;
	kiln_cas *cas;       /* the filesystem store (NULL with S3) */
	struct reg_s3_cfg s3;
	int64_t pin_s;       /* S3: lifetime of a writer's gc pin (gc_pin_s) */
} reg_store;

int reg_store_open(reg_store *st, const struct reg_config *c, kiln_error **err);
void reg_store_close(reg_store *st);
/* The file of a blob in the filesystem backend. */
char *reg_store_blob_path(const reg_store *st, const char *digest);

/* ---- storage backends (backend_fs.c, backend_s3.c) ----
 * Everything the server and the administration commands store goes through
 * one const table per backend, the way git's ref backends or curl's protocol
 * handlers are tables: the filesystem + sqlite backend (blobs/ + meta.db) and
 * the S3 backend (blobs and metadata as objects in a bucket, so replicas
 * share it).  st is the open store; db is meta.db, open in both (uploads and
 * the fs metadata use it; S3 ignores it).  Return conventions are those of
 * the reg_db_* functions: 1 found / 0 not / -1 error for lookups. */
struct reg_backend {
	const char *name;
	/* blob bytes */
	int (*blob_stat)(const reg_store *st, const char *digest, int64_t *size, kiln_error **err);
	/* Store bytes whose digest the caller computed (manifests). */
	int (*blob_put)(const reg_store *st, const char *digest, const void *data, size_t len, kiln_error **err);
	int (*blob_read)(const reg_store *st, const char *digest, size_t max, char **data, size_t *len,
			 kiln_error **err);
	/* Rename / upload a verified, fsync'd file src into place as digest. */
	int (*blob_adopt)(const reg_store *st, const char *digest, const char *src, kiln_error **err);
	/* A response with len bytes of the blob from off (sendfile, or ranged S3 reads). */
	struct MHD_Response *(*blob_response)(const reg_store *st, const char *digest, int64_t off, int64_t len,
					      kiln_error **err);
	/* repositories' blobs */
	int (*blob_linked)(const reg_store *st, reg_db *db, const char *repo, const char *digest, int64_t *size,
			   kiln_error **err);
	int (*blob_unlink)(const reg_store *st, reg_db *db, const char *repo, const char *digest, kiln_error **err);
	/* The verified upload src becomes blob digest of repo (atomically with its link). */
	int (*blob_commit)(const reg_store *st, reg_db *db, const char *repo, const char *digest, const char *src,
			   int64_t size, kiln_error **err);
	/* n verified staged files, already durable (a batch upload), become blobs
	 * of repo together: all linked, or none.  NULL: blob_commit each. */
	int (*blob_commit_batch)(const reg_store *st, reg_db *db, const char *repo, const struct reg_staged *v,
				 size_t n, kiln_error **err);
	/* Link digest into repo if `from` has it: 1 mounted, 0 not, -1 error. */
	int (*blob_mount)(const reg_store *st, reg_db *db, const char *repo, const char *from, const char *digest,
			  kiln_error **err);
	/* The first max repositories holding digest, by name (a mount without
	 * from= picks one the caller may read).  NULL: the backend cannot say
	 * (S3: links are per repository), and such a mount is an upload. */
	int (*blob_holders)(const reg_store *st, reg_db *db, const char *digest, long max, kiln_strv *out,
			    kiln_error **err);
	/* manifests and tags */
	int (*manifest_get)(const reg_store *st, reg_db *db, const char *repo, const char *ref,
			    char digest[KILN_DIGEST_MAX], char **media_type, kiln_buf *bytes, kiln_error **err);
	/* 1 stored; 0 when m->refs[*missing] is not in repo; -1 error. */
	int (*manifest_put)(const reg_store *st, reg_db *db, const char *repo, const char *digest, const kiln_buf *bytes,
			    const struct oci_manifest *m, const char *tag, long *missing, kiln_error **err);
	int (*manifest_delete)(const reg_store *st, reg_db *db, const char *repo, const char *digest, kiln_error **err);
	int (*tag_delete)(const reg_store *st, reg_db *db, const char *repo, const char *tag, kiln_error **err);
	int (*repo_exists)(const reg_store *st, reg_db *db, const char *repo, kiln_error **err);
	int (*tags)(const reg_store *st, reg_db *db, const char *repo, const char *last, long n, kiln_strv *out,
		    int *more, kiln_error **err);
	int (*catalog)(const reg_store *st, reg_db *db, const char *last, long n, kiln_strv *out, int *more,
		       kiln_error **err);
	int (*referrers)(const reg_store *st, reg_db *db, const char *repo, const char *subject,
			 const char *artifact_type, json_t *out, kiln_error **err);
	int (*history)(const reg_store *st, reg_db *db, const char *repo, const char *tag, kiln_buf *out,
		       kiln_error **err);
	/* A note on the latest change of tag to digest, shown by history (S3: none kept, 0). */
	int (*tag_note)(const reg_store *st, reg_db *db, const char *repo, const char *tag, const char *digest,
			const char *note, kiln_error **err);
	int (*list_repos)(const reg_store *st, reg_db *db, const char *prefix, struct reg_repo_info **out, size_t *n,
			  kiln_error **err);
	/* access */
	int (*repo_public)(const reg_store *st, reg_db *db, const char *repo, kiln_error **err);
	int (*set_public)(const reg_store *st, reg_db *db, const char *repo, int public_, kiln_error **err);
	int (*auth_key)(const reg_store *st, reg_db *db, unsigned char key[32], kiln_error **err);
	/* A token by its secret / by id: 1 valid (id, scopes set), 0 unknown or expired. */
	int (*token_secret)(const reg_store *st, reg_db *db, const char *secret, int64_t *id, char **scopes,
			    kiln_error **err);
	int (*token_id)(const reg_store *st, reg_db *db, int64_t id, char **scopes, kiln_error **err);
	int (*token_put)(const reg_store *st, reg_db *db, const char *label, const char *hash, const char *scopes,
			 int64_t expires, kiln_error **err);
	int (*token_list)(const reg_store *st, reg_db *db, kiln_buf *out, kiln_error **err);
	int (*token_revoke)(const reg_store *st, reg_db *db, const char *label, kiln_error **err);
	/* gc of unreferenced blobs (uploads are swept by gc.c for both) */
	int (*gc)(const reg_store *st, reg_db *db, const struct reg_config *c, int dry_run, struct reg_gc_stats *stats,
		  kiln_error **err);
};
extern const struct reg_backend reg_backend_fs, reg_backend_s3;

/* The store and meta.db of a data directory, for administration. */
struct reg_admin {
	reg_store st;
	reg_db *db;
};
int reg_admin_open(struct reg_admin *a, const struct reg_config *c, kiln_error **err);
void reg_admin_close(struct reg_admin *a);

/* The filesystem backend's SQL (db.c, db_query.c, tokens.c, auth.c, gc.c). */
int reg_db_tag_note(reg_db *db, const char *repo, const char *tag, const char *digest, const char *note,
		    kiln_error **err);
int reg_db_history(reg_db *db, const char *repo, const char *tag, kiln_buf *out, kiln_error **err);
int reg_db_list_repos(reg_db *db, const char *prefix, struct reg_repo_info **out, size_t *n, kiln_error **err);
int reg_db_set_public(reg_db *db, const char *repo, int public_, kiln_error **err);
int reg_db_token_secret(reg_db *db, const char *secret, int64_t *id, char **scopes, kiln_error **err);
int reg_db_token_id(reg_db *db, int64_t id, char **scopes, kiln_error **err);
int reg_db_token_put(reg_db *db, const char *label, const char *hash, const char *scopes, int64_t expires,
		     kiln_error **err);
int reg_db_token_list(reg_db *db, kiln_buf *out, kiln_error **err);
int reg_db_token_revoke(reg_db *db, const char *label, kiln_error **err);
int reg_gc_fs(const reg_store *st, reg_db *db, const struct reg_config *c, int dry_run, struct reg_gc_stats *stats,
	      kiln_error **err);
/* gc's root test: 1 some manifest references digest (or it is one), 0 not, -1 error. */
int reg_gc_referenced(reg_db *db, const char *digest, kiln_error **err);
/* kiln serve's gc timer (gc_timer.c): retention, then gc, every gc_interval_s. */
struct reg_gc_timer;
int reg_gc_timer_start(reg_server *s, kiln_error **err);
void reg_gc_timer_stop(reg_server *s);

typedef struct reg_upload {
	char uuid[40];
	char *repo;
	int fd;              /* append-only data file while acquired */
	uint64_t offset;     /* bytes received */
	kiln_hasher *h;      /* sha256 of bytes [0, offset); NULL = recompute */
	int busy;
	int once;            /* monolithic: uploads/UUID.once, in no list (upload_store.c) */
	int64_t last_used;   /* for dropping idle sessions from memory */
	struct reg_upload *next;
} reg_upload;

typedef struct reg_uploads {
	const reg_store *st;
	pthread_mutex_t lock;
	pthread_cond_t released;
	reg_upload *list;    /* sessions seen since start; state is on disk */
} reg_uploads;

void reg_uploads_init(reg_uploads *u, const reg_store *st);
void reg_uploads_destroy(reg_uploads *u);
/* New session for repo; the returned one is acquired. */
reg_upload *reg_upload_new(reg_uploads *u, const char *repo, kiln_error **err);
/* The same for a monolithic upload (POST ?digest= with the body): its client
 * learns of no session before the 201, so none needs to survive a crash and
 * its files are not fsync'd (the data still is, at the commit). */
reg_upload *reg_upload_new_once(reg_uploads *u, const char *repo, kiln_error **err);
/* Acquire an existing session (from memory or disk).  NULL + KILN_E_NOTFOUND
 * when it does not exist for this repo, KILN_E_EXISTS when in use. */
reg_upload *reg_upload_acquire(reg_uploads *u, const char *repo, const char *uuid, kiln_error **err);
int reg_upload_write(reg_upload *up, const void *data, size_t len, kiln_error **err);
void reg_upload_release(reg_uploads *u, reg_upload *up);
/* Verify the data against digest, move it into the store (atomically,
 * fsync'd) and link it into the session's repository, the rename inside the
 * link's write transaction; the session is ended either way on a digest
 * mismatch (KILN_E_INVALID).  Returns the size. */
int64_t reg_upload_commit(reg_uploads *u, reg_upload *up, const char *digest, reg_db *db, kiln_error **err);
/* The session's received bytes against digest: 0 they match; -1 with
 * KILN_E_INVALID naming both digests, or an I/O error.  Consumes the running
 * hash (a second call rereads the file). */
int reg_upload_verify(reg_uploads *u, reg_upload *up, const char *digest, kiln_error **err);
/* The file holding the session's bytes (uploads/UUID.once or uploads/UUID/data). */
char *reg_upload_path(const reg_uploads *u, const reg_upload *up);
/* Test hook: gc calls it (when set) inside its write transaction, after the
 * blob's links are deleted and before it commits. */
extern void (*reg_gc_test_hook)(const char *digest);
/* Test hook: a group commit's leader calls it before its COMMIT, holding the
 * write transaction with n links in it (db_group.c). */
extern void (*reg_db_group_test_hook)(reg_db *db, size_t n);
/* Test hook: S3 gc calls it right after putting its tomb on digest. */
extern void (*reg_gc_s3_test_hook)(const char *digest);
void reg_upload_cancel(reg_uploads *u, reg_upload *up);

/* ---- FIFO admission of large blob responses (streams.c) ---- */
struct reg_waiter;
typedef struct reg_streams {
	pthread_mutex_t lock;
	unsigned active, max;        /* max 0: no limit */
	unsigned waiting;            /* queued requests */
	struct reg_waiter *head, **tail;
} reg_streams;

void reg_streams_init(reg_streams *s, unsigned max);
void reg_streams_destroy(reg_streams *s);
/* Blocks (in arrival order) for a slot, at most wait_s: 1 holding one, 0 not. */
int reg_streams_acquire(reg_streams *s, unsigned wait_s);
void reg_streams_release(reg_streams *s);

/* ---- the server and requests (http.c, router.c) ---- */
struct reg_limits;
/* Counters of requests as they end (metrics.c), indexed by route class
 * (enum reg_route, then the mounted modules), method and status code. */
enum { R_METRIC_EXT0 = 18, REG_METRIC_ROUTES = R_METRIC_EXT0 + REG_ROUTES_MAX, REG_METRIC_METHODS = 7,
       REG_METRIC_CODES = 31 };
struct reg_metrics {
	int64_t started;
	uint64_t requests[REG_METRIC_ROUTES][REG_METRIC_METHODS][REG_METRIC_CODES];
	struct reg_histogram latency[REG_METRIC_ROUTES];
	uint64_t received[REG_METRIC_ROUTES], sent[REG_METRIC_ROUTES], streamed;
	uint64_t in_flight, uploads_in_flight, auth_failures, auth_limited;
};
#define REG_OBSERVERS_MAX 8

struct reg_server {
	reg_streams streams;
	struct reg_config cfg;
	struct MHD_Daemon *mhd;
	reg_store store;
	reg_db *db;
	reg_uploads uploads;
	uint16_t port;
	unsigned char auth_key[32];
	struct reg_limits *limits;   /* connection tracking and the auth limiter (server_limits.c) */
	const struct reg_routes *routes[REG_ROUTES_MAX]; /* mounted modules; published by nroutes */
	unsigned nroutes;
	const struct reg_observer *observers[REG_OBSERVERS_MAX]; /* published by nobservers */
	unsigned nobservers;
	struct reg_metrics metrics;
	struct reg_gc_timer *gc_timer; /* NULL: gc_interval_s 0 */
};

/* The server without a listening socket (store, db, uploads, auth key): what
 * reg_server_start() runs the daemon on, and what the fuzzer routes into. */
reg_server *reg_server_open(const struct reg_config *c, kiln_error **err);

enum reg_route {
	R_NONE, R_BASE, R_CATALOG, R_TAGS, R_MANIFEST, R_BLOB, R_UPLOAD_START, R_UPLOAD, R_REFERRERS, R_TOKEN,
	R_BLOBS_EXIST,  /* POST /v2/NAME/blobs/_exists (exists.c) */
	R_BLOBS_BATCH,  /* POST /v2/NAME/blobs/_batch (batch.c) */
	R_METRICS, R_HEALTHZ, R_READYZ, /* GET /metrics, /healthz, /readyz (metrics.c) */
	R_UI,           /* GET /, /ui/...: the dashboard's files (ui.c) */
	R_OVERVIEW,     /* GET /kiln/v1/...: what the dashboard reads of the store (overview.c) */
	R_EXT,          /* a mounted module's (reg_server_mount) */
};
_Static_assert((int)R_EXT <= (int)R_METRIC_EXT0, "route classes fit before the modules'");

enum reg_body { BODY_IGNORE, BODY_MEM, BODY_UPLOAD, BODY_BATCH };

struct reg_kvs {
	struct reg_kv { const char *key, *value; } *kv;  /* borrowed strings, valid for the request */
	size_t n, cap;
};

typedef struct reg_req {
	struct reg_server *srv;
	const char *method, *url;  /* borrowed; the URL is the unescaped path */
	struct reg_kvs headers, args;
	char client[64];           /* the client's address ("" unknown), for the auth limiter */
	int begun;
	enum reg_route route;
	const struct reg_routes *ext; /* R_EXT: whose */
	void *ext_state;
	char *name, *ref;
	/* body sink */
	enum reg_body body;
	kiln_buf mem;
	uint64_t mem_max;
	reg_upload *up;
	struct reg_batch *batch;   /* BODY_BATCH: the blobs staged so far (batch.c) */
	uint64_t received;
	int body_error;            /* the response is already queued; drop the rest */
	int stream_slot;           /* holds a reg_streams slot until completed */
	uint64_t discarded;        /* body bytes dropped after an error */
	/* identity (auth.c): who is asking, with which grants */
	int authed;                /* 1: a valid token (tok_id 0 = anonymous token) */
	int identified;            /* reg_req_identify ran: its answer */
	int64_t tok_id;
	char *scopes;              /* "NS:ACTIONS;..." of the token, or NULL */
	/* response */
	struct MHD_Response *resp;
	unsigned status;
	uint64_t sent;             /* the answer's body length when known */
	/* metrics (metrics.c) and the access log (access_log.c) */
	double t0_ms;
	int counted, counted_upload;
	char id[65];
	char *team;                /* reg_req_set_team; else the repository's first segment */
} reg_req;

/* The router (router.c).  A request is made with its method and URL, given
 * its headers and query arguments, then called: once with no data when the
 * headers are in, once per piece of body, and once with no data at the end.
 * REG_STEP_RESPOND: send r->resp with r->status now (before the body, the
 * rest of it is dropped); REG_STEP_ABORT: close the connection. */
enum reg_step { REG_STEP_CONTINUE, REG_STEP_RESPOND, REG_STEP_ABORT };
reg_req *reg_req_new(reg_server *s, const char *method, const char *url);
void reg_req_add_header(reg_req *r, const char *key, const char *value);
void reg_req_add_arg(reg_req *r, const char *key, const char *value);
enum reg_step reg_router_call(reg_req *r, const char *data, size_t len);
/* Ends the request: releases its upload session, stream slot and response. */
void reg_req_free(reg_req *r);

/* Metrics and health (metrics.c): a request is counted once routed and
 * again as it ends; auth.c and http.c count what only they see. */
void reg_metrics_begin(reg_req *r);
void reg_metrics_end(reg_req *r);
void reg_metrics_auth_failed(reg_server *s);
void reg_metrics_auth_limited(reg_server *s);
void reg_metrics_streamed(reg_server *s, uint64_t n);
void reg_metrics_handle(reg_req *r);
void reg_health_handle(reg_req *r);   /* R_HEALTHZ and R_READYZ */
void reg_ui_handle(reg_req *r);       /* R_UI (ui.c) */
void reg_overview_handle(reg_req *r); /* R_OVERVIEW (overview.c) */
/* What /kiln/v1/ says of a tag and of a change (overview.c), for either
 * backend; with S3 the bucket is read for it (overview_s3.c). */
struct reg_ov_tag {
	const char *tag, *digest, *media_type, *artifact_type, *build, *attestation; /* the last four may be NULL */
	int64_t updated, created, size, blobs, new_bytes, manifest_size;
	bool signed_;
};
json_t *reg_ov_tag_json(const struct reg_ov_tag *t);
/* Adds to row the counts of set's blobs (digest: size) new and shared against prev (NULL: the first). */
void reg_ov_change(json_t *row, const json_t *prev, const json_t *set);
/* The repository object of /kiln/v1/repos; 0 when it is gone. */
int reg_ov_s3_repo(reg_server *s, const char *repo, json_t **out, kiln_error **err);
/* The changes of repo:tag, oldest first, each with its blobs (the digests'). */
int reg_ov_s3_history(reg_server *s, const char *repo, const char *tag, json_t *out, kiln_error **err);
/* What the team holds in the bucket (repos, tags, blobs and bytes: each once). */
int reg_ov_s3_team(reg_server *s, struct reg_team_usage *u, kiln_error **err);
/* The access log (access_log.c): the id taken once the headers are in, the
 * line written as the request ends. */
void reg_req_take_id(reg_req *r);
void reg_access_log(reg_req *r);
const char *reg_metrics_route_name(const reg_req *r);
/* Per team (a repository name's first segment), sorted by team (db_query.c). */
int reg_db_team_usage(reg_db *db, struct reg_team_usage **out, size_t *n, kiln_error **err);

/* Error codes of the distribution spec. */
void reg_error(reg_req *r, unsigned status, const char *code, const char *fmt, ...) KILN_PRINTF(4, 5);
void reg_respond_json(reg_req *r, unsigned status, json_t *body, const char *content_type);
/* Answer with a prepared response (which r then owns). */
void reg_respond_with(reg_req *r, unsigned status, struct MHD_Response *resp, uint64_t len);
/* 500 with the error logged (and freed). */
void reg_internal(reg_req *r, kiln_error *err);

/* Handlers: begin runs once the headers are in (may set up a body sink or
 * answer at once), finish once the body is in. */
void reg_blob_handle(reg_req *r);
void reg_upload_begin(reg_req *r);
void reg_upload_finish(reg_req *r);
void reg_manifest_begin(reg_req *r);
void reg_manifest_finish(reg_req *r);
void reg_tags_handle(reg_req *r);
void reg_catalog_handle(reg_req *r);
void reg_referrers_handle(reg_req *r);
void reg_exists_begin(reg_req *r);
void reg_exists_finish(reg_req *r);
/* The batch upload: begin, each piece of body, finish; free (with the
 * request) removes whatever it staged and did not commit. */
void reg_batch_begin(reg_req *r);
void reg_batch_body(reg_req *r, const char *data, size_t len);
void reg_batch_finish(reg_req *r);
void reg_batch_free(reg_req *r);

/* Auth (auth.c).  reg_auth_request() decides whether r may proceed (0) or
 * sets a 401/403 answer (-1); reg_auth_allows() asks about another repository
 * (a mount's source).  Actions: "pull", "push", "delete". */
int reg_auth_request(reg_req *r);
int reg_auth_allows(reg_req *r, const char *repo, enum reg_action a);
void reg_token_handle(reg_req *r);
/* The server's HMAC key for issued tokens (DATA/auth.key, made on first use). */
int reg_auth_key(const char *data_dir, unsigned char key[32], kiln_error **err);

/* S3 client (s3.c) for the object-storage backend: path-style requests
 * signed with AWS SigV4. */
/* The Authorization header value for a request (headers: "name:value", any
 * order and case); path and query already URI-encoded and canonical. */
char *reg_s3_authorization(const struct reg_s3_cfg *s3, const char *method, const char *path, const char *query,
			   const char *const *headers, const char *payload_sha256, const char *amz_date);
void reg_s3_uri_encode(kiln_buf *b, const char *s, int keep_slash);
int reg_s3_create_bucket(const struct reg_s3_cfg *s3, kiln_error **err);
int reg_s3_put(const struct reg_s3_cfg *s3, const char *key, const void *data, size_t len, kiln_error **err);
int reg_s3_put_multipart(const struct reg_s3_cfg *s3, const char *key, const void *data, size_t len, size_t part_size,
			 kiln_error **err);
/* 1 exists (size set), 0 missing, -1 error. */
int reg_s3_head(const struct reg_s3_cfg *s3, const char *key, int64_t *size, kiln_error **err);
/* len < 0: to the end.  sink returns < 0 to stop. */
int reg_s3_get(const struct reg_s3_cfg *s3, const char *key, int64_t off, int64_t len,
	       int (*sink)(void *ud, const void *data, size_t len), void *ud, kiln_error **err);
int reg_s3_delete(const struct reg_s3_cfg *s3, const char *key, kiln_error **err);
int reg_s3_put_type(const struct reg_s3_cfg *s3, const char *key, const void *data, size_t len, const char *type,
		    kiln_error **err);
/* HEAD with Last-Modified (Unix time); 1 exists, 0 missing, -1 error. */
int reg_s3_stat(const struct reg_s3_cfg *s3, const char *key, int64_t *size, int64_t *mtime, kiln_error **err);
/* A whole small object (at most max bytes) and its Content-Type: 1, 0 missing, -1. */
int reg_s3_get_small(const struct reg_s3_cfg *s3, const char *key, size_t max, kiln_buf *out, char **type,
		     kiln_error **err);
/* The S3 server's clock (its Date header): times compared with Last-Modified. */
int reg_s3_time(const struct reg_s3_cfg *s3, int64_t *now, kiln_error **err);
/* Keys under prefix after start_after (NULL: all), in order, at most max
 * (<= 0: no limit; *more set when cut).  fn returns < 0 to fail the listing. */
typedef int (*reg_s3_list_fn)(void *ud, const char *key, int64_t size, int64_t mtime);
extern int reg_s3_page_size; /* keys per listing request (1000; tests make it small) */
int reg_s3_list(const struct reg_s3_cfg *s3, const char *prefix, const char *start_after, long max, reg_s3_list_fn fn,
		void *ud, int *more, kiln_error **err);
typedef int (*reg_s3_upload_fn)(void *ud, const char *key, const char *upload_id, int64_t initiated);
int reg_s3_list_multipart(const struct reg_s3_cfg *s3, reg_s3_upload_fn fn, void *ud, kiln_error **err);
int reg_s3_multipart_start(const struct reg_s3_cfg *s3, const char *key, char **upload_id, kiln_error **err);
int reg_s3_abort_multipart(const struct reg_s3_cfg *s3, const char *key, const char *upload_id, kiln_error **err);

/* ---- metadata in the bucket (meta_s3.c): with the S3 backend the bucket is
 * the single source of truth for repositories, so replicas sharing it agree.
 * Same contracts as the reg_db_* functions above. ---- */
char *reg_s3m_blob_key(const char *digest);
int reg_s3m_blob_linked(const reg_store *st, const char *repo, const char *digest, int64_t *size, kiln_error **err);
int reg_s3m_blob_unlink(const reg_store *st, const char *repo, const char *digest, kiln_error **err);
/* Verified staged file src becomes blob digest of repo (pin, put unless present, link). */
int reg_s3m_blob_commit(const reg_store *st, const char *repo, const char *digest, const char *src, int64_t size,
			kiln_error **err);
int reg_s3m_blob_mount(const reg_store *st, const char *repo, const char *from, const char *digest, kiln_error **err);
/* 1 found (digest, media type, bytes), 0 not, -1 error. */
int reg_s3m_manifest_get(const reg_store *st, const char *repo, const char *ref, char digest[KILN_DIGEST_MAX],
			 char **media_type, kiln_buf *bytes, kiln_error **err);
int reg_s3m_manifest_put(const reg_store *st, const char *repo, const char *digest, const kiln_buf *bytes,
			 const struct oci_manifest *m, const char *tag, long *missing, kiln_error **err);
int reg_s3m_manifest_delete(const reg_store *st, const char *repo, const char *digest, kiln_error **err);
int reg_s3m_tag_delete(const reg_store *st, const char *repo, const char *tag, kiln_error **err);
int reg_s3m_repo_exists(const reg_store *st, const char *repo, kiln_error **err);
int reg_s3m_tags(const reg_store *st, const char *repo, const char *last, long n, kiln_strv *out, int *more,
		 kiln_error **err);
int reg_s3m_catalog(const reg_store *st, const char *last, long n, kiln_strv *out, int *more, kiln_error **err);
int reg_s3m_referrers(const reg_store *st, const char *repo, const char *subject, const char *artifact_type,
		      json_t *out, kiln_error **err);
int reg_s3m_history(const reg_store *st, const char *repo, const char *tag, kiln_buf *out, kiln_error **err);
int reg_s3m_tag_note(const reg_store *st, const char *repo, const char *tag, const char *digest, const char *note,
		     kiln_error **err);
/* Tokens, the issued-token key and public flags in the bucket (auth_s3.c). */
int reg_s3a_key(const reg_store *st, unsigned char key[32], kiln_error **err);
int reg_s3a_lookup_secret(const reg_store *st, const char *secret, int64_t *id, char **scopes, kiln_error **err);
int reg_s3a_lookup_id(const reg_store *st, int64_t id, char **scopes, kiln_error **err);
int reg_s3a_token_put(const reg_store *st, const char *label, const char *hash, const char *scopes, int64_t expires,
		      kiln_error **err);
int reg_s3a_token_list(const reg_store *st, kiln_buf *out, kiln_error **err);
int reg_s3a_token_revoke(const reg_store *st, const char *label, kiln_error **err);
int reg_s3a_public(const reg_store *st, const char *repo, kiln_error **err);
int reg_s3a_set_public(const reg_store *st, const char *repo, int public_, kiln_error **err);
/* gc's side of the pin/tomb protocol (gc_s3.c). */
int reg_s3m_gc(const reg_store *st, const struct reg_config *c, int dry_run, struct reg_gc_stats *stats,
	       kiln_error **err);

/* Parse "n" / "last" query args; -1 when n is invalid (response set). */
int reg_page_args(reg_req *r, long *n, const char **last);

#endif

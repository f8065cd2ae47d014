/* service.h — the build service's contract (`kiln serve --build`): a build
 * request, its submission into the queue, its status, its log read with a
 * cursor, cancel, and the per-team context store (files by content).
 * Frontends — kiln's own HTTP API (api.c) and E2B's REST (e2b*.c) — translate
 * their requests into these calls; docs/service.md describes both. */
#ifndef KILN_SERVICE_H
#define KILN_SERVICE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "builder/request.h"
#include "kiln.h"
#include "registry/registry.h"

/* ---------------------------------------------------------------------------
 * The service: a queue (in the registry's data directory as sqlite, or in
 * PostgreSQL shared by several `kiln serve` hosts), workers that claim builds
 * and run them, and the HTTP routes it mounts on the registry's daemon.
 * ------------------------------------------------------------------------- */
typedef struct svc svc;

struct svc_config {
	const char *exe;            /* the kiln binary a build runs (`kiln build --json`); NULL: /proc/self/exe */
	const char *db;             /* NULL: sqlite DATA/build/queue.db; "postgresql://…" (libpq conninfo) */
	const char *host_id;        /* this host's name in the queue; NULL: "HOSTNAME:PORT" */
	const char *state_dir;      /* contexts, team homes, scratch; NULL: DATA/build (shared storage
	                             * when several hosts share a PostgreSQL queue) */
	unsigned host_builds;       /* builds running at once on this host (default 2) */
	unsigned team_builds;       /* builds of one team running at once, all hosts (default 2) */
	int64_t time_limit_s;       /* default per build (3600); a request may ask for less */
	uint64_t context_max;       /* bytes of one build's context (default 1 GiB), a tar's extracted too */
	unsigned context_files;     /* entries of one build's context, a tar's too (default 200,000) */
	bool fetch_private;         /* ADD may fetch from loopback, private and link-local addresses
	                             * (default false: public ones only, so a team's build cannot
	                             * reach the server's own host or network) */
	uint64_t cache_max;         /* per team: step cache + image store bytes kept by prune (default 10 GiB) */
	int64_t cache_age_s;        /* prune removes cache entries unused this long (default 7 days) */
	bool provenance;            /* builds record SLSA provenance (kiln build --provenance; default true) */
	const char *builder_id;     /* the builder their provenance names (NULL: "kiln-serve@HOSTNAME",
	                             * never a local build's "kiln@HOSTNAME") */
	const char *sign_key;       /* private key (kiln key generate) signing what builds publish, and
	                             * their provenance, or NULL; read by the push alone, never logged */
	const json_t *team_sign_keys; /* {"TEAM": "KEY"}: a team's own key, instead of sign_key */
};

/* Defaults, then the "build" value of the registry config (true or an object
 * with keys db, host_id, state_dir, host_builds, team_builds, time_limit_s,
 * context_max, context_files, fetch_private, cache_max, cache_age_s,
 * provenance, builder_id, sign_key, team_sign_keys).  Strings point into `build`; each
 * key file is checked to be a readable private key. */
int svc_config_load(struct svc_config *c, const json_t *build, kiln_error **err);

/* Open the queue, fail builds this host left running (restart), start the
 * workers and mount the routes ("/build/") on srv. */
svc *svc_start(reg_server *srv, const struct svc_config *c, kiln_error **err);
/* Stop claiming; running builds are killed and recorded as failed
 * ("the server stopped"); queued ones stay queued; log streams end.  Then
 * stop the registry (its HTTP threads may be in the service's routes), then
 * svc_free. */
void svc_stop(svc *s);
void svc_free(svc *s);
reg_server *svc_registry(const svc *s);

/* ---------------------------------------------------------------------------
 * A build request.  Either Dockerfile text or a step list (rendered into a
 * Dockerfile by the service, FROM base first); a context given as files by
 * content (each already in the team's store, svc_blob_*); what to publish.
 * ------------------------------------------------------------------------- */
/* A step of a step list (E2B's template steps map onto these). */
enum svc_step_kind {
	SVC_STEP_RUN,     /* args[0]: a shell command */
	SVC_STEP_COPY,    /* args: SRC... DEST (context paths; chown/mode below) */
	SVC_STEP_ENV,     /* args: K V [K V]... */
	SVC_STEP_WORKDIR, /* args[0] */
	SVC_STEP_USER,    /* args[0] */
	SVC_STEP_ARG,     /* args[0] NAME[=DEFAULT] */
};
struct svc_step {
	enum svc_step_kind kind;
	const char *const *args;
	size_t nargs;
	const char *chown;          /* COPY --chown, or NULL */
	const char *chmod;          /* COPY --chmod (octal), or NULL */
};

/* One entry of the context, after .dockerignore (the client applied it). */
struct svc_file {
	const char *path;           /* relative, cleaned, "/"-separated */
	mode_t mode;                /* S_IFREG/S_IFDIR/S_IFLNK | permission bits */
	const char *digest;         /* files: sha256 of the content (in the team's store) */
	const char *link;           /* symlinks: the target */
	bool tar;                   /* digest names a tar (plain or gzip) extracted at path
	                             * (E2B uploads a step's files as one tar.gz) */
};

struct svc_request {
	const char *team;           /* the namespace builds, cache and results belong to */
	const char *dockerfile;     /* Dockerfile text, or NULL with steps */
	const char *dockerfile_name; /* its name in errors (default "Dockerfile") */
	const char *base;           /* with steps: the FROM (registry reference, "scratch") */
	const struct svc_step *steps;
	size_t nsteps;
	const struct svc_file *files;
	size_t nfiles;
	/* what is built, and its name (builder/request.h: the fields kiln build's
	 * flags set); the service publishes build.name as TEAM/NAME:TAG */
	struct build_request build;
	int64_t time_limit_s;       /* 0: the server's; more than the server's is capped */
	const char *source_date_epoch; /* the build's SOURCE_DATE_EPOCH (digits), or NULL */
	const char *request_id;     /* the submitting request's id (X-Request-Id): opens the build's log */
};

#define SVC_ID_MAX 40           /* "b-" + 32 hex + NUL, room to spare */

/* Check and queue: the Dockerfile must parse (else KILN_E_INVALID with
 * FILE:LINE:COL first), bases must be registry references or scratch (no
 * server-side oci:/archive: paths), every file's blob must be in the team's
 * store, the context within context_max.  The request is copied. */
int svc_submit(svc *s, const struct svc_request *req, char id[SVC_ID_MAX], kiln_error **err);

enum svc_state { SVC_QUEUED, SVC_BUILDING, SVC_DONE, SVC_FAILED, SVC_CANCELLED };
const char *svc_state_name(enum svc_state st); /* "queued", "building", "done", "failed", "cancelled" */

struct svc_status {
	char id[SVC_ID_MAX];
	char *team, *name;          /* name as requested, or NULL */
	enum svc_state state;
	int step, total;            /* building: step N of M (0 before the first) */
	char *instruction;          /* the current (or failed) step's text, or NULL */
	char *reason;               /* failed/cancelled: the error, "FILE:LINE[:COL]: …" when it has a place */
	char *location;             /* failed: "FILE:LINE[:COL]" alone, or NULL */
	char *image, *image_digest; /* done: HOST/TEAM/NAME:TAG published, and its manifest digest */
	char *template_ref, *template_digest; /* done with a template */
	char *host;                 /* the host that claimed it */
	int64_t created, started, ended; /* unix seconds, 0 = not yet */
};
void svc_status_free(struct svc_status *st);

/* A build of team (another team's id is KILN_E_NOTFOUND, as a missing one). */
int svc_status(svc *s, const char *team, const char *id, struct svc_status *out, kiln_error **err);
/* The team's builds, newest first, at most max (name NULL: all). */
int svc_list(svc *s, const char *team, const char *name, size_t max, struct svc_status **out, size_t *n,
	     kiln_error **err);
void svc_list_free(struct svc_status *v, size_t n);

/* Log lines from cursor on (0: the start), each one JSON event as `kiln build
 * --json` prints it (step, step_done, output, vm, done, error) plus the
 * service's own ({"event":"status",...}).  Waits up to wait_ms for a first
 * new line.  *next is the cursor after what was returned; *ended says the
 * build is over and nothing more will come after *next. */
int svc_logs(svc *s, const char *team, const char *id, int64_t cursor, int wait_ms, kiln_strv *lines,
	     int64_t *next, bool *ended, kiln_error **err);
/* Queued: cancelled at once; building: its processes are killed (any host)
 * and it ends cancelled; over: KILN_E_EXISTS. */
int svc_cancel(svc *s, const char *team, const char *id, kiln_error **err);

/* ---------------------------------------------------------------------------
 * The team's context store (content-addressed, sha256).  A blob is visible
 * only once complete and verified; an aborted writer leaves nothing.
 * ------------------------------------------------------------------------- */
/* Which of digests the team's store lacks (in the order given). */
int svc_blobs_missing(svc *s, const char *team, const char *const *digests, size_t n, kiln_strv *missing,
		      kiln_error **err);
enum svc_encoding { SVC_ENC_IDENTITY, SVC_ENC_ZSTD, SVC_ENC_GZIP };
typedef struct svc_blob_writer svc_blob_writer;
/* digest: what the decoded bytes must hash to; max: bytes allowed (0: context_max). */
int svc_blob_begin(svc *s, const char *team, const char *digest, enum svc_encoding enc, uint64_t max,
		   svc_blob_writer **out, kiln_error **err);
int svc_blob_write(svc_blob_writer *w, const void *data, size_t len, kiln_error **err);
int svc_blob_commit(svc_blob_writer *w, kiln_error **err); /* frees w */
void svc_blob_abort(svc_blob_writer *w);                     /* frees w; NULL ok */

/* ---------------------------------------------------------------------------
 * Auth for frontends: the team a request may build for.  want NULL: the
 * credential's only namespace with the build action (E2B keys name one team).
 * Returns the team (caller frees), or NULL with *status the HTTP answer to
 * give and err saying why: 401 no or bad credential, 403 no build grant on
 * want (or several teams and none asked for), 429 too many failed tries
 * (already answered by the registry), 500.  Auth off: want, else "default".
 * ------------------------------------------------------------------------- */
char *svc_auth_team(reg_req *r, const char *want, unsigned *status, kiln_error **err);
/* The same for another action (REG_SANDBOX: the sandbox service's). */
char *svc_auth_team_for(reg_req *r, const char *want, enum reg_action action, unsigned *status, kiln_error **err);

/* A frontend's routes: rows of its own type whose first member is a struct
 * svc_route, matched in order against the path below its prefix (method
 * "*" takes any; a GET row takes HEAD too).  A pattern
 * is literal text and {name} segments (one path segment each, not empty;
 * {name*} takes the rest of the path, slashes too), captured in order.
 * Returns the matching row (m->param holding the captures: free with
 * svc_route_match_free), or NULL: m->other_method says the path matched a
 * row of another method. */
#define SVC_ROUTE_PARAMS 4
struct svc_route {
	const char *method, *pattern;
};
struct svc_route_match {
	const struct svc_route *route;
	char *param[SVC_ROUTE_PARAMS];
	size_t n;
	bool other_method;
};
const struct svc_route *svc_route_find(const void *rows, size_t n, size_t stride, const char *method, const char *path,
				       struct svc_route_match *m);
void svc_route_match_free(struct svc_route_match *m);
/* rows: an array of the frontend's row type */
#define SVC_ROUTE_FIND(rows, method, path, m) \
	svc_route_find((rows), sizeof(rows) / sizeof((rows)[0]), sizeof((rows)[0]), (method), (path), (m))

/* A request body read whole by a frontend, at most max bytes: the core's one
 * limit rule.  svc_body_start says at once when Content-Length is already
 * over (the frontend answers 413 before any byte); svc_body_add stops
 * keeping bytes once over; svc_body_limit_msg is the one wording of the 413. */
struct svc_body {
	kiln_buf buf;
	uint64_t max;
	bool over;
};
bool svc_body_start(struct svc_body *b, reg_req *r, uint64_t max); /* false: declared over max */
void svc_body_add(struct svc_body *b, const char *data, size_t len);
const char *svc_body_limit_msg(const struct svc_body *b, char *buf, size_t n);
void svc_body_free(struct svc_body *b);

/* An error from below as every frontend answers it: the HTTP status its kind
 * (or a full disk: 507) gives, and what the client is told — its message, or
 * for a full disk the fact without the server's paths.  A 5xx is logged
 * here with its message, once, naming what ("build service", "e2b", ...). */
unsigned svc_err_status(const kiln_error *err);
const char *svc_err_reply(kiln_error *err, unsigned status, const char *what);

/* ---------------------------------------------------------------------------
 * Cache: the team's step cache and images on the server, pruned by size and
 * age (also POST /build/v1/cache/prune).
 * ------------------------------------------------------------------------- */
struct svc_prune_stats {
	uint64_t entries_removed, bytes_before, bytes_after;
	uint64_t files_removed;     /* of the team's context store and its linked copies */
};
/* max_bytes 0: cache_max; older_than_s < 0: cache_age_s (0: every entry). */
int svc_cache_prune(svc *s, const char *team, uint64_t max_bytes, int64_t older_than_s, struct svc_prune_stats *st,
		    kiln_error **err);

/* `kiln --wait-job` (a build service's child started ahead): wait for the
 * job on fd (JSON {argv, env, cwd} up to the end of the stream), apply its
 * environment and directory, its argv into argv.  1: the stream ended
 * without a job (the server let it go). */
int svc_child_wait(int fd, kiln_strv *argv, kiln_error **err);

/* ---------------------------------------------------------------------------
 * The sandbox service (`kiln serve --sandboxes`, docs/sandbox-api.md): E2B's
 * control plane and envd's plane over runtime/'s sandboxes, mounted on srv.
 * config: the "sandboxes" settings (true or an object, may be NULL);
 * templates: E2B's template names when the build service runs here (NULL:
 * kiln references only); ensure makes a reference restorable here (pulls
 * it), called before each create.  Stop after reg_server_stop().
 * ------------------------------------------------------------------------- */
typedef struct svc_sandboxes svc_sandboxes;
typedef struct e2b e2b;
/* The E2B template API the build service mounted (its names for templates). */
e2b *svc_templates(const svc *s);
svc_sandboxes *svc_sandboxes_start(reg_server *srv, const json_t *config, e2b *templates,
				   int (*ensure)(void *ud, const char *ref, kiln_error **err), void *ud,
				   kiln_error **err);
void svc_sandboxes_stop(svc_sandboxes *s); /* NULL ok */

#endif

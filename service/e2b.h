/* e2b.h — the E2B-compatible template build API of `kiln serve --build`
 * (service/e2b*.c, docs/e2b.md): E2B's build request (fromImage or
 * fromTemplate, a step list, start/ready commands) translated into a
 * Dockerfile over a context of the uploaded file tarballs, which the build
 * service then runs as any other build.  Internal to service/. */
#ifndef KILN_SERVICE_E2B_H
#define KILN_SERVICE_E2B_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln.h"
#include "service/internal.h"
#include "service/service.h"

/* Bounds on a request: past one, a 400 names the field. */
#define E2B_MAX_STEPS 512
#define E2B_MAX_ARGS 1024          /* args of one step (ENV: key/value pairs) */
#define E2B_MAX_ARG (256u << 10)   /* bytes of one argument, startCmd or readyCmd */
#define E2B_MAX_DOCKERFILE (4u << 20)

/* A step list as a Dockerfile without its FROM line.  COPY steps name their
 * sources as HASH/PATH: the context holds each uploaded tarball of a COPY
 * extracted under its files hash (e2b_files.c). */
struct e2b_plan {
	char *from_image;    /* as given, or NULL */
	char *from_template; /* as given, or NULL */
	char *start_cmd;     /* NULL when not given */
	char *ready_cmd;
	bool force;          /* the build (or one of its steps) asked for no cache */
	kiln_strv hashes;    /* files hashes of the COPY steps, each once, in order */
	kiln_buf body;       /* the Dockerfile's instructions after FROM */
	size_t steps;        /* E2B steps translated */
	int *line_step;      /* body line i (0-based; Dockerfile line i + 2) came from step line_step[i] */
	size_t lines;
};

/* Parses and checks a TemplateBuildStartV2 body (POST /v2/templates/ID/builds/ID):
 * exactly one of fromImage/fromTemplate, steps of type COPY, RUN, ENV,
 * WORKDIR, USER with their arguments.  KILN_E_INVALID (a 400) names the step
 * ("steps[3] (COPY): ..."); KILN_E_LIMIT a bound above. */
int e2b_plan_parse(const json_t *body, struct e2b_plan *out, kiln_error **err);
/* "FROM base\n" + the plan's instructions; base is what fromImage or
 * fromTemplate resolved to (a reference the builder's FROM takes). */
char *e2b_plan_dockerfile(const struct e2b_plan *p, const char *base);
/* The E2B step a Dockerfile line came from (0-based), -1 for the FROM line or
 * a line past the end: what a failed build's status names as its step. */
int e2b_plan_step_of_line(const struct e2b_plan *p, long line);
void e2b_plan_free(struct e2b_plan *p);

/* ---- state (e2b_db.c): the e2b_ tables of the service's database ---- */
typedef struct e2b_db e2b_db;

struct e2b_template {
	char *id, *team, *name;    /* name: the kiln repository under the team ("my-app") */
	int cpus, memory;          /* asked for at creation (0: the server's defaults) */
	int64_t created, updated;  /* unix seconds */
};
struct e2b_build {
	char *id, *template_id, *team, *tag;
	char *svc_id;              /* the service's build once triggered ("" while submitting), else NULL */
	char *error;               /* failed before the service had it, else NULL */
	char *lines;               /* JSON array: the E2B step of each Dockerfile line after FROM */
	int cpus, memory;
	int64_t created, updated;
};

/* On the service's database; an older kiln's state at legacy_path
 * (DATA/e2b/e2b.db), if there, is moved in first. */
int e2b_db_open(svc_db *db, const char *legacy_path, e2b_db **out, kiln_error **err);
void e2b_db_close(e2b_db *db);
char *e2b_new_template_id(void);  /* 20 of [a-z0-9], as E2B's */
char *e2b_new_build_id(void);     /* a version 4 UUID */
/* Lookups return 1 found, 0 not (another team's is not found either), -1 error. */
int e2b_db_template_find(e2b_db *db, const char *team, const char *id_or_name, struct e2b_template *out,
			 kiln_error **err);
/* The team's template of that name, made if new (E2B: a name keeps its id). */
int e2b_db_template_ensure(e2b_db *db, const char *team, const char *name, int cpus, int memory,
			   struct e2b_template *out, kiln_error **err);
int e2b_db_templates(e2b_db *db, const char *team, struct e2b_template **v, size_t *n, kiln_error **err);
int e2b_db_template_delete(e2b_db *db, const char *team, const char *id, kiln_error **err);
void e2b_template_free(struct e2b_template *t);
int e2b_db_build_new(e2b_db *db, const struct e2b_template *t, const char *tag, char **id, kiln_error **err);
int e2b_db_build_get(e2b_db *db, const char *team, const char *template_id, const char *id, struct e2b_build *out,
		     kiln_error **err);
int e2b_db_builds(e2b_db *db, const char *team, const char *template_id, struct e2b_build **v, size_t *n,
		  kiln_error **err);
void e2b_build_free(struct e2b_build *b);
void e2b_builds_free(struct e2b_build *v, size_t n);
/* A trigger claims the build (1; 0: started or failed already), then records
 * the service's id (started) or gives it up with the reason (unclaim). */
int e2b_db_build_claim(e2b_db *db, const char *id, kiln_error **err);
int e2b_db_build_started(e2b_db *db, const char *id, const char *svc_id, const char *lines, kiln_error **err);
int e2b_db_build_unclaim(e2b_db *db, const char *id, const char *msg, kiln_error **err);
int e2b_db_build_failed(e2b_db *db, const char *id, const char *msg, kiln_error **err);
int e2b_db_tag_set(e2b_db *db, const char *template_id, const char *tag, const char *build_id, kiln_error **err);
int e2b_db_tag_get(e2b_db *db, const char *template_id, const char *tag, char **build, kiln_error **err);
int e2b_db_tag_delete(e2b_db *db, const char *template_id, const char *tag, kiln_error **err);
json_t *e2b_db_tags(e2b_db *db, const char *template_id, kiln_error **err);
/* Uploaded files: the team's files hash -> the digest of the tarball in the
 * service's context store, and size: the bytes of the files in it (rows from
 * before it was counted: the tarball's).  size may be NULL. */
int e2b_db_file_get(e2b_db *db, const char *team, const char *hash, char digest[KILN_DIGEST_MAX], int64_t *size,
		    kiln_error **err);
int e2b_db_file_put(e2b_db *db, const char *team, const char *hash, const char *digest, int64_t size,
		    kiln_error **err);
int e2b_db_file_forget(e2b_db *db, const char *team, const char *hash, kiln_error **err);

/* ---- uploads (e2b_files.c) ---- */
#define E2B_MAX_UPLOAD (1ull << 30)  /* bytes of one COPY's tarball, and of the files in it */
#define E2B_MAX_ENTRIES 200000
#define E2B_UPLOAD_TTL_S 3600

/* The key upload links are signed with: read, or made (0600) on first use. */
int e2b_key_load(const char *path, unsigned char key[32], kiln_error **err);
/* "team=T&expires=E&signature=HEX" for an upload of hash to template tid. */
char *e2b_upload_query(const unsigned char key[32], const char *team, const char *tid, const char *hash,
		       int64_t ttl_s);
/* The link's query checked (KILN_E_INVALID: bad, forged or expired). */
int e2b_upload_check(const unsigned char key[32], const char *team, const char *tid, const char *hash,
		     const char *expires, const char *sig, kiln_error **err);

/* An upload body spooled to a file in dir, hashed as it comes, at most max bytes. */
struct e2b_spool;
int e2b_spool_open(const char *dir, uint64_t max, struct e2b_spool **out, kiln_error **err);
int e2b_spool_write(struct e2b_spool *sp, const void *data, size_t len, kiln_error **err);
/* Its sha256, after checking it is a tar a context may hold (KILN_E_INVALID,
 * KILN_E_LIMIT: a 400 / 413) with at most max_files bytes of files in it:
 * what extracting it writes, which a compressed tarball may make thousands
 * of times its own size.  *files gets that count. */
int e2b_spool_finish(struct e2b_spool *sp, uint64_t max_files, char digest[KILN_DIGEST_MAX], uint64_t *files,
		     kiln_error **err);
int e2b_spool_replay(struct e2b_spool *sp, int (*fn)(void *ud, const void *data, size_t len, kiln_error **err),
		     void *ud, kiln_error **err);
uint64_t e2b_spool_size(const struct e2b_spool *sp);
void e2b_spool_free(struct e2b_spool *sp); /* removes the file; NULL ok */

/* ---- the HTTP API (e2b_http.c: routing, create, files, status;
 * e2b_templates.c: trigger, list, get, delete, alias, tags) ---- */
typedef struct e2b e2b;

/* svc_e2b_frontend (internal.h) mounts E2B's routes (/templates,
 * /v3/templates, /v2/templates/) on the service's registry; state in the
 * service's database and DATA/e2b (key, tmp/). */

struct e2b {
	svc *svc;
	e2b_db *db;
	char *dir, *tmp;
	unsigned char key[32];
	struct reg_routes routes[3];
};

/* A request in flight: its route's captures (a template's ID, a build's,
 * a files hash, an alias: in the order the route names them), its team. */
struct e2b_req {
	const struct e2b_route *route;
	struct svc_route_match m;
	char *team;
	struct svc_body body;      /* a JSON body (svc_body: the core's limit) */
	struct e2b_spool *spool;
	kiln_error *body_err;
};
#define E2B_ARG(q, i) ((q)->m.param[i])

/* Answers in E2B's shapes: the JSON (taken), {"code","message"} errors, and
 * an error from below whose kind picks the status (taken too). */
void e2b_reply_json(reg_req *r, unsigned status, json_t *j);
void e2b_reply_error(reg_req *r, unsigned status, const char *fmt, ...) KILN_PRINTF(3, 4);
void e2b_reply_err(reg_req *r, kiln_error *err, const char *what);
json_t *e2b_json_time(int64_t unix_s); /* "2026-12-01T12:00:00Z" */
/* The request's Host header when it is a plain HOST[:PORT], else NULL. */
const char *e2b_req_host(reg_req *r);
/* E2B's state of a build: "waiting", "building", "ready", "error" (st filled
 * for a build the service has: st->id set); NULL with *err. */
const char *e2b_build_state(e2b *e, const struct e2b_build *b, struct svc_status *st, kiln_error **err);
/* E2B's "NAME[:TAG]": a repository name of one component, an optional tag. */
int e2b_split_name(const char *s, char **name, char **tag, kiln_error **err);
/* The kiln template (REPO:TAG, on this server's registry) the team's E2B
 * template "NAME[:TAG]" or id last built ready: 1 found (*out), 0 the team
 * has none of that name (or e is NULL), -1 none finished or an error. */
int e2b_sandbox_template(e2b *e, const char *team, const char *ref, char **out, kiln_error **err);

void h_trigger(e2b *e, reg_req *r, struct e2b_req *q, json_t *body);
void h_list(e2b *e, reg_req *r, struct e2b_req *q, json_t *body);
void h_get(e2b *e, reg_req *r, struct e2b_req *q, json_t *body);
void h_delete(e2b *e, reg_req *r, struct e2b_req *q, json_t *body);
void h_alias(e2b *e, reg_req *r, struct e2b_req *q, json_t *body);
void h_tags_list(e2b *e, reg_req *r, struct e2b_req *q, json_t *body);
void h_tags_assign(e2b *e, reg_req *r, struct e2b_req *q, json_t *body);
void h_tags_remove(e2b *e, reg_req *r, struct e2b_req *q, json_t *body);

/* A files hash as the SDK computes it: 64 lowercase hex digits (sha256). */
bool e2b_hash_valid(const char *s);

#endif

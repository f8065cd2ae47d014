/* internal.h — what the build service's files share and nothing outside
 * sees: the service's state, the queue database (sqlite or PostgreSQL), the
 * workers and the HTTP API of kiln's own client. */
#ifndef KILN_SERVICE_INTERNAL_H
#define KILN_SERVICE_INTERNAL_H

#include <pthread.h>

#include "service/service.h"

/* ---- the queue's database (db.c) ---- */
typedef struct svc_db svc_db;
struct svc_rows {
	size_t n, cols;
	char **v;            /* n * cols strings, NULL for SQL NULL */
};
svc_db *svc_db_open(const char *where, kiln_error **err);  /* a sqlite path or a libpq conninfo/URL */
void svc_db_close(svc_db *db);
int svc_db_is_pg(const svc_db *db);
/* $1..$N text parameters; out (may be NULL) gets the rows.  Returns rows
 * changed (or returned), -1 on error. */
int svc_db_q(svc_db *db, struct svc_rows *out, const char *sql, const char *const *p, size_t n, kiln_error **err);
/* A transaction holds the connection (other threads wait) until commit/rollback. */
int svc_db_begin(svc_db *db, kiln_error **err);
int svc_db_commit(svc_db *db, kiln_error **err);
void svc_db_rollback(svc_db *db);
void svc_rows_free(struct svc_rows *r);
const char *svc_row(const struct svc_rows *r, size_t row, size_t col);
int64_t svc_row_int(const struct svc_rows *r, size_t row, size_t col);

/* ---- the service (svc.c) ---- */
struct svc {
	reg_server *srv;
	struct svc_config cfg;
	char *host_id, *state_dir, *exe;
	svc_db *db;
	struct reg_routes routes;
	pthread_t *workers;
	unsigned nworkers;
	volatile int stopping;
	pthread_mutex_t lock;   /* running, team tokens */
	pthread_cond_t wake;
	unsigned running;
	kiln_strv teams_authed; /* teams whose build token this process made (svc_team_auth) */
};

struct svc_result {
	char *image, *image_digest, *template_ref, *template_digest;
};

int64_t svc_now(void);
void svc_i64(char buf[24], int64_t v);
void svc_new_id(char id[SVC_ID_MAX]);
/* STATE/teams/TEAM/SUB */
char *svc_team_dir(svc *s, const char *team, const char *sub);
int svc_team_cas(svc *s, const char *team, kiln_cas **out, kiln_error **err);
/* The team's registry credentials (a token with TEAM:pull,push) in home/auth.json. */
int svc_team_auth(svc *s, const char *team, const char *home, kiln_error **err);
int svc_path_ok(const char *p);
/* "sha256:HEX" well formed. */
bool svc_digest_ok(const char *d);
/* "FILE:LINE[:COL]" that starts msg, or NULL. */
char *svc_error_location(const char *msg);

/* ---- queue rows (queue.c) ---- */
int svc_q_insert(svc *s, const char *id, const char *team, const char *name, const char *request,
		 int64_t time_limit, kiln_error **err);
int svc_q_claim(svc *s, char id[SVC_ID_MAX], kiln_error **err);   /* 1 claimed, 0 none */
int svc_q_job(svc *s, const char *id, char **team, char **request, int64_t *time_limit, kiln_error **err);
int svc_q_heartbeat(svc *s, const char *id, kiln_error **err);    /* 1: cancel asked */
int svc_q_progress(svc *s, const char *id, int step, int total, const char *instruction, kiln_error **err);
int svc_q_finish(svc *s, const char *id, enum svc_state state, const char *reason, const char *location,
		 const struct svc_result *res, kiln_error **err);
int svc_q_recover(svc *s, int64_t stale_s, kiln_error **err);
int svc_log_append(svc *s, const char *id, const char *line, kiln_error **err);

/* ---- requests (request.c), contexts (context.c), builds (worker.c), HTTP (api.c) ---- */
/* The request as stored and as kiln's HTTP API takes it (docs/service.md). */
json_t *svc_request_to_json(const struct svc_request *req);
/* Check, render steps, queue. */
int svc_submit_json(svc *s, const char *team, json_t *req, char id[SVC_ID_MAX], kiln_error **err);
int svc_context_make(svc *s, const char *team, const json_t *files, const char *dir, kiln_error **err);
void svc_run_build(svc *s, const char *id);
/* Run a kiln command (argv[0] = s->exe) with KILN_HOME=home; its output discarded. */
int svc_exec_quiet(svc *s, char *const *argv, const char *home, kiln_error **err);
void svc_api_mount(svc *s);
json_t *svc_status_json(const struct svc_status *st);

#endif

/* internal.h — what the build service's files share and nothing outside
 * sees: the service's state, the queue database (sqlite or PostgreSQL), the
 * workers and the HTTP API of kiln's own client. */
#ifndef KILN_SERVICE_INTERNAL_H
#define KILN_SERVICE_INTERNAL_H

#include <pthread.h>
#include <sys/stat.h>

#include "service/service.h"

/* ---- the queue's database (db.c) ---- */
typedef struct svc_db svc_db;
struct svc_rows {
	size_t n, cols;
	char **v;            /* n * cols strings, NULL for SQL NULL */
};
svc_db *svc_db_open(const char *where, kiln_error **err);  /* a sqlite path or a libpq conninfo/URL */
void svc_db_close(svc_db *db);
int svc_db_schema_version(void); /* of the svc_ tables this kiln writes (svc_meta 'schema') */
int svc_db_is_pg(const svc_db *db);
/* $1..$N text parameters; out (may be NULL) gets the rows.  Returns rows
 * changed (or returned), -1 on error. */
int svc_db_q(svc_db *db, struct svc_rows *out, const char *sql, const char *const *p, size_t n, kiln_error **err);
/* A transaction holds the connection (other threads wait) until commit/rollback. */
int svc_db_begin(svc_db *db, kiln_error **err);
int svc_db_commit(svc_db *db, kiln_error **err);
/* The same, its commit not waiting for the disk (log lines; db.c says why). */
int svc_db_begin_relaxed(svc_db *db, kiln_error **err);
void svc_db_rollback(svc_db *db);
void svc_rows_free(struct svc_rows *r);
const char *svc_row(const struct svc_rows *r, size_t row, size_t col);
int64_t svc_row_int(const struct svc_rows *r, size_t row, size_t col);

/* A frontend of the service's core (api.c: kiln's build API; e2b_http.c:
 * E2B's template API): svc_start starts each in turn, and each mounts its
 * route rows on the registry's daemon; svc_free stops them once the
 * registry has stopped. */
struct svc_frontend {
	const char *name;
	int (*start)(svc *s, void **state, kiln_error **err);
	void (*stop)(void *state); /* NULL: nothing to stop */
};
extern const struct svc_frontend svc_api_frontend, svc_e2b_frontend;
#define SVC_FRONTENDS 2

/* ---- the service (svc.c) ---- */
struct svc {
	reg_server *srv;
	struct svc_config cfg;
	char *host_id, *state_dir, *exe;
	svc_db *db;
	struct reg_routes routes;
	void *frontend[SVC_FRONTENDS]; /* each frontend's state, in svc_start's order */
	pthread_t *workers;
	unsigned nworkers;
	volatile int stopping;
	pthread_mutex_t lock;   /* running, team tokens */
	pthread_cond_t wake;
	pthread_cond_t logged;  /* a line appended or a build ended (svc_logged) */
	uint64_t log_seq;
	unsigned running;
	kiln_strv teams_authed; /* teams whose build token this process made (svc_team_auth) */
	struct svc_secrets *secrets; /* queued builds' secrets, in memory only (secrets.c) */
	struct { char id[SVC_ID_MAX]; json_t *req; } fresh[16]; /* the last requests queued here, as */
	size_t nfresh;               /* stored (parsed): a worker of this host takes its own (svc_fresh_take) */
	struct svc_metrics {         /* what this process's workers ran (observe.c) */
		uint64_t ended[3];   /* done, failed, cancelled */
		struct reg_histogram duration[3];
		uint64_t steps[2];   /* step cache: hits, misses */
	} metrics;
	struct reg_observer observer;
};

/* ---- a build's secrets (secrets.c): sent with the request, held in this
 * process's memory only (never the queue, a log, a file or a cache key),
 * handed to the build's process through memfds, wiped when it is done. ---- */
struct svc_secrets;
/* req's "secrets" ([{"id","data": base64}]) taken out of req (so never
 * stored); *out NULL when it had none.  KILN_E_INVALID for a bad one. */
int svc_secrets_take_json(json_t *req, struct svc_secrets **out, kiln_error **err);
/* Keep them for build id (after it is queued). */
void svc_secrets_keep(svc *s, const char *id, struct svc_secrets *sec);
/* The build's, removed from the service (NULL: none kept). */
struct svc_secrets *svc_secrets_claim(svc *s, const char *id);
/* Each as a memfd and a --secret id=ID,src=/proc/self/fd/N argument for the
 * build's child; fds (caller closes) are the ones it must inherit. */
int svc_secrets_args(const struct svc_secrets *sec, kiln_strv *argv, int **fds, size_t *nfds, kiln_error **err);
void svc_secrets_free(struct svc_secrets *sec); /* wipes the bytes */
size_t svc_secrets_count(const struct svc_secrets *sec);
const char *svc_secrets_id(const struct svc_secrets *sec, size_t i);
void svc_secrets_free_all(svc *s);

struct svc_result {
	char *image, *image_digest, *template_ref, *template_digest;
	const char *replay;     /* the request's replay key (replay.c), or NULL */
};

/* db.c: the time and numbers as the queue stores them */
int64_t svc_now(void);
int64_t svc_now_ms(void); /* the order of queued builds and lists (qms, seq) */
void svc_i64(char buf[24], int64_t v);
void svc_new_id(char id[SVC_ID_MAX]);
/* team.c: what every other file stands on.  The registry host builds push
 * to and pull from: this server ("HOST:PORT"). */
char *svc_registry_host(svc *s);
/* Whether ref ("TEAM/NAME:TAG") is tagged digest in this registry now: 1 yes, 0 no (or not a
 * NAME:TAG), -1 error. */
int svc_tag_holds(svc *s, const char *ref, const char *digest, kiln_error **err);
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
/* pin: the only host that may claim it (its secrets are there), or NULL;
 * key: the client's key for the request (unique per team), or NULL. */
int svc_q_insert(svc *s, const char *id, const char *team, const char *name, const char *request,
		 int64_t time_limit, const char *pin, const char *key, kiln_error **err);
/* The build queued under the client's key: 1 found (id set), 0 none. */
int svc_q_by_key(svc *s, const char *team, const char *key, char id[SVC_ID_MAX], kiln_error **err);
int svc_q_claim(svc *s, char id[SVC_ID_MAX], kiln_error **err);   /* 1 claimed, 0 none */
/* Quotas (quota.c): each team with a running limit of its own ({"team": n},
 * caller decrefs) and everyone else's; the seconds of team's builds inside
 * today (UTC); KILN_E_QUOTA once they reach its build minutes. */
int svc_quota_builds(svc *s, json_t **teams, int64_t *dflt, kiln_error **err);
int svc_quota_minutes_today(svc *s, const char *team, int64_t now, int64_t *seconds, kiln_error **err);
int svc_quota_check_minutes(svc *s, const char *team, kiln_error **err);
int svc_quota_usage(void *ud, const char *team, json_t *quotas, kiln_error **err);
int svc_q_job(svc *s, const char *id, char **team, char **request, int64_t *time_limit, kiln_error **err);
int svc_q_heartbeat(svc *s, const char *id, kiln_error **err);    /* 1: cancel asked */
int svc_q_finish(svc *s, const char *id, enum svc_state state, const char *reason, const char *location,
		 const struct svc_result *res, kiln_error **err);
int svc_q_recover(svc *s, int64_t stale_s, kiln_error **err);
int svc_log_append(svc *s, const char *id, const char *line, kiln_error **err);
struct svc_progress {
	int step, total;
	const char *instruction;
};
/* Lines in one transaction, with the step reached (pr may be NULL). */
int svc_log_append_lines(svc *s, const char *id, const char *const *lines, size_t n, const struct svc_progress *pr,
			 kiln_error **err);
void svc_logged(svc *s);

/* ---- a build's processes (child.c) ---- */
/* A `kiln --wait-job` started ahead by a worker (pid 0: none). */
struct svc_ready {
	pid_t pid;
	int job, out, errfd;    /* the socket its job goes to, its stdout, its stderr */
	struct stat exe;        /* the binary it runs (a newer one on disk: not used) */
};
/* A running child: its stdout (a pipe) and stderr (an unnamed file). */
struct svc_proc {
	pid_t pid;
	int out, errfd;
};
int svc_ready_start(svc *s, struct svc_ready *rd, kiln_error **err);
void svc_ready_stop(struct svc_ready *rd);
/* argv (argv[0] = s->exe) in its own process group, killed with the
 * server, with env (NAME=VALUE set, NAME unset) in cwd: rd's ready child
 * when it has one (and nothing to inherit), else forked now. */
int svc_proc_start(svc *s, struct svc_ready *rd, char *const *argv, const char *const *env, const char *cwd,
		   const int *keep, size_t nkeep, struct svc_proc *p, kiln_error **err);

/* ---- requests (request.c), contexts (context.c), builds (worker.c), HTTP (api.c) ---- */
/* The request as stored and as kiln's HTTP API takes it (docs/service.md). */
json_t *svc_request_to_json(const struct svc_request *req);
/* Check, render steps, queue.  missing (when not NULL): the files' digests
 * the team's store lacks, and 1 with nothing queued when there are any;
 * 2: answered at once, the build already done (a replay). */
int svc_submit_json(svc *s, const char *team, json_t *req, char id[SVC_ID_MAX], kiln_strv *missing, kiln_error **err);
/* The request's files (a JSON array, checked by svc_submit_json) made into
 * dir (context_make.c): links to the team's blobs, directories, symlinks,
 * tars extracted; nothing is made through a symlink. */
int svc_context_make(svc *s, const char *team, const json_t *files, const char *dir, kiln_error **err);
/* The context directory of this file list (made once, then shared by every
 * build of the list), held for reading until *lockfd is closed. */
int svc_context_use(svc *s, const char *team, const json_t *files, char **dir, int *lockfd, kiln_error **err);
/* At start: every team's context directories no build holds, removed. */
void svc_contexts_clear_all(svc *s);
/* The team's uploaded files and their linked copies: the context
 * directories no build holds are removed, then a file unused (not linked
 * into a held context, nor named by a queued build) for older_than_s
 * goes, then the least recently used while they hold more than budget
 * bytes.  *removed: files unlinked; *bytes: what is left. */
int svc_context_prune(svc *s, const char *team, uint64_t budget, int64_t older_than_s, uint64_t *removed,
		      uint64_t *bytes, kiln_error **err);
void svc_run_build(svc *s, const char *id, struct svc_ready *rd);

/* ---- what /metrics and /readyz say of the service (observe.c) ---- */
/* A build this process ran ended as st (done, failed or cancelled). */
void svc_metrics_build_ended(svc *s, enum svc_state st, double seconds);
void svc_metrics_step(svc *s, bool cached);
void svc_observe(svc *s);    /* fills s->observer */
/* The request of a build queued by this process, as it was stored, or NULL
 * (then it is read from the queue); svc_fresh_keep under s->lock, before
 * the row is inserted (a worker may claim it at once). */
json_t *svc_fresh_take(svc *s, const char *id);
void svc_fresh_keep(svc *s, const char *id, json_t *req);
/* A new file with text (O_EXCL, not followed, 0600), not synced: a build's
 * scratch, gone with its work directory (team.c). */
int svc_write_scratch(const char *path, const char *text, kiln_error **err);
/* Run a kiln command (argv[0] = s->exe) with KILN_HOME=home; its output discarded. */
int svc_exec_quiet(svc *s, char *const *argv, const char *home, kiln_error **err);

/* ---- replays (replay.c): a request whose inputs match an earlier build's
 * is answered from that build's record, as a rebuild from the cache ---- */
struct df_plan;
/* The request's replay key and its bases' digests now, as {"key", "bases"}
 * (stored with the request); 0 and *out NULL when it cannot be replayed
 * (no name, no_cache, secrets, a base outside the team's namespace of this
 * registry, ADD of a URL, COPY/mount from an image). */
int svc_replay_key(svc *s, const char *team, json_t *req, const struct df_plan *plan, json_t **out,
		   kiln_error **err);
/* Whether the FROM digests a build printed are the key's bases. */
bool svc_replay_bases_match(const json_t *replay, const kiln_strv *from);
/* 1: recorded as build id (done, the matching build's results, its log
 * as a rebuild from the cache prints it, its tags checked); 0: no such
 * build, or a tag moved since. */
int svc_replay_answer(svc *s, const char *team, const char *key, const char *request, const char *request_id,
		      int64_t limit, const char *client_key, char id[SVC_ID_MAX], kiln_error **err);
json_t *svc_status_json(const struct svc_status *st);

#endif

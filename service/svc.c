/* svc.c — the service's life: open the queue, fail what a restart cut,
 * start one worker per allowed concurrent build on this host, mount the
 * HTTP routes; each worker claims a build, runs it and claims the next.
 * Also each team's registry credentials for its builds (a token limited to
 * TEAM:pull,push, so a build can pull bases only from its own namespace or
 * public repositories) and the server-side cache prune. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "service/internal.h"

static void *worker(void *ud)
{
	svc *s = ud;
	struct svc_ready rd = { 0 };
	bool warned = false;

	while (!s->stopping) {
		char id[SVC_ID_MAX];
		kiln_error *err = NULL;
		/* the next build's process, started while there is none to run */
		if (rd.pid == 0 && svc_ready_start(s, &rd, &err) < 0) {
			if (!warned)
				kiln_warn("build service: a child started ahead: %s (each build starts its own)",
					  kiln_error_message(err));
			warned = true;
			kiln_error_clear(&err);
		}
		int got = svc_q_claim(s, id, &err);

		if (got < 0) {
			kiln_warn("build service: claim: %s", kiln_error_message(err));
			kiln_error_free(err);
		}
		if (got == 1) {
			svc_run_build(s, id, &rd);
			continue;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_mutex_lock(&s->lock);
		if (!s->stopping)
			pthread_cond_timedwait(&s->wake, &s->lock, &ts);
		pthread_mutex_unlock(&s->lock);
	}
	svc_ready_stop(&rd);
	return NULL;
}

reg_server *svc_registry(const svc *s)
{
	return s->srv;
}

svc *svc_start(reg_server *srv, const struct svc_config *c, kiln_error **err)
{
	const struct reg_config *rc = reg_server_config(srv);
	svc *s = kiln_xcalloc(1, sizeof(*s));
	char host[256], *dbpath = NULL;

	s->srv = srv;
	s->cfg = *c;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->wake, NULL);
	pthread_cond_init(&s->logged, NULL);
	if (c->host_id) {
		s->host_id = kiln_xstrdup(c->host_id);
	} else {
		if (gethostname(host, sizeof(host)) < 0)
			snprintf(host, sizeof(host), "localhost");
		host[sizeof(host) - 1] = '\0';
		s->host_id = kiln_xasprintf("%s:%u", host, reg_server_port(srv));
	}
	s->state_dir = c->state_dir ? kiln_xstrdup(c->state_dir) : kiln_path_join(rc->data_dir, "build");
	if (c->exe) {
		s->exe = kiln_xstrdup(c->exe);
	} else {
		char buf[4096];
		ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
		if (n <= 0) {
			kiln_err_errno(err, errno, "build service: where is the kiln binary (/proc/self/exe)");
			goto fail;
		}
		buf[n] = '\0';
		s->exe = kiln_xstrdup(buf);
	}
	s->cfg.exe = s->exe;
	s->cfg.host_id = s->host_id;
	s->cfg.state_dir = s->state_dir;
	if (kiln_mkdir_p(s->state_dir, 0700, err) < 0)
		goto fail;
	dbpath = c->db ? kiln_xstrdup(c->db) : kiln_path_join(rc->data_dir, "meta.db");
	if (kiln_mkdir_p(rc->data_dir, 0755, err) < 0)
		goto fail;
	s->db = svc_db_open(dbpath, err);
	s->cfg.db = NULL;
	if (s->db == NULL || svc_q_recover(s, 60, err) < 0)
		goto fail;
	svc_contexts_clear_all(s); /* a crash may have torn one */
	s->nworkers = c->host_builds ? c->host_builds : 1;
	s->workers = kiln_xcalloc(s->nworkers, sizeof(*s->workers));
	for (unsigned i = 0; i < s->nworkers; i++)
		if (pthread_create(&s->workers[i], NULL, worker, s) != 0) {
			s->nworkers = i;
			kiln_err(err, KILN_E_IO, "build service: cannot start its workers");
			goto fail;
		}
	svc_api_mount(s);
	if (reg_server_mount(srv, &s->routes, err) < 0)
		goto fail;
	svc_observe(s);
	if (reg_server_observe(srv, &s->observer, err) < 0)
		goto fail;
	free(dbpath);
	return s;
fail:
	free(dbpath);
	kiln_error_wrap(err, "build service");
	svc_stop(s);
	svc_free(s);
	return NULL;
}

void svc_stop(svc *s)
{
	if (s == NULL)
		return;
	pthread_mutex_lock(&s->lock);
	s->stopping = 1;
	pthread_cond_broadcast(&s->wake);
	pthread_cond_broadcast(&s->logged);
	pthread_mutex_unlock(&s->lock);
	for (unsigned i = 0; i < s->nworkers; i++)
		pthread_join(s->workers[i], NULL);
	s->nworkers = 0;
}

void svc_free(svc *s)
{
	if (s == NULL)
		return;
	svc_stop(s);
	svc_db_close(s->db);
	svc_secrets_free_all(s);
	for (size_t i = 0; i < s->nfresh; i++)
		json_decref(s->fresh[i].req);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->wake);
	pthread_cond_destroy(&s->logged);
	free(s->workers);
	free(s->host_id);
	free(s->state_dir);
	free(s->exe);
	free(s);
}

/* ---- the team's registry credentials ---- */

int svc_team_auth(svc *s, const char *team, const char *home, kiln_error **err)
{
	const struct reg_config *rc = reg_server_config(s->srv);
	char *path = kiln_home_path(home, KILN_PATH_AUTH, NULL), *label = NULL, *secret = NULL, *host = NULL, *user = NULL;
	char *scope = NULL;
	unsigned char *b64 = NULL;
	json_t *j = NULL;
	int ret = -1;

	if (!rc->auth) {
		ret = 0;
		goto out;
	}
	pthread_mutex_lock(&s->lock);
	/* made once per server start: a new secret, the old token revoked */
	label = kiln_xasprintf("kiln-build-%s@%s", team, s->host_id);
	for (size_t i = 0; i < s->teams_authed.n; i++)
		if (strcmp(s->teams_authed.v[i], team) == 0) {
			pthread_mutex_unlock(&s->lock);
			ret = 0;
			goto out;
		}
	scope = kiln_xasprintf("%s:pull,push", team);
	const char *scopes[] = { scope, NULL };
	kiln_error *e = NULL;
	if (reg_token_revoke(rc, label, &e) < 0)
		kiln_error_free(e);
	if (reg_token_create(rc, label, scopes, 0, &secret, err) < 0) {
		pthread_mutex_unlock(&s->lock);
		goto out;
	}
	const struct reg_config *c = rc;
	const char *h = strcmp(c->host, "0.0.0.0") == 0 || strcmp(c->host, "::") == 0 ? "127.0.0.1" : c->host;
	host = kiln_xasprintf(strchr(h, ':') ? "[%s]:%u" : "%s:%u", h, reg_server_port(s->srv));
	user = kiln_xasprintf("kiln-build:%s", secret);
	b64 = kiln_xcalloc(1, 4 * strlen(user) / 3 + 8);
	EVP_EncodeBlock(b64, (const unsigned char *)user, (int)strlen(user));
	j = json_pack("{s:{s:{s:s}}}", "auths", host, "auth", (const char *)b64);
	char *text = json_dumps(j, JSON_INDENT(1));
	ret = kiln_write_atomic(path, text, strlen(text), 0600, err);
	free(text);
	if (ret == 0)
		kiln_strv_push(&s->teams_authed, team);
	pthread_mutex_unlock(&s->lock);
out:
	json_decref(j);
	free(b64);
	free(user);
	free(host);
	free(scope);
	if (secret)
		memset(secret, 0, strlen(secret));
	free(secret);
	free(label);
	free(path);
	return ret;
}

/* ---- cache on the server ---- */

struct entry {
	char *path;
	int64_t last_used;
	uint64_t size;
};

static int by_age(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;

	return x->last_used < y->last_used ? -1 : x->last_used > y->last_used;
}

/* Bytes under dir (files only, not following links). */
static uint64_t du(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	uint64_t total = 0;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL) {
		struct stat sb;
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char *p = kiln_path_join(dir, e->d_name);
		if (lstat(p, &sb) == 0)
			total += S_ISDIR(sb.st_mode) ? du(p) : (uint64_t)sb.st_blocks * 512;
		free(p);
	}
	closedir(d);
	return total;
}

char *svc_registry_host(svc *s)
{
	const struct reg_config *c = reg_server_config(s->srv);
	const char *h = strcmp(c->host, "0.0.0.0") == 0 || strcmp(c->host, "::") == 0 ? "127.0.0.1" : c->host;

	return kiln_xasprintf(strchr(h, ':') ? "[%s]:%u" : "%s:%u", h, reg_server_port(s->srv));
}

int svc_tag_holds(svc *s, const char *ref, const char *digest, kiln_error **err)
{
	char *repo, *colon, d[KILN_DIGEST_MAX];
	int rc;

	if (ref == NULL || digest == NULL || (colon = strrchr(ref, ':')) == NULL || strchr(colon, '/'))
		return 0;
	repo = kiln_xstrndup(ref, (size_t)(colon - ref));
	rc = reg_server_resolve(s->srv, repo, colon + 1, d, err);
	free(repo);
	return rc <= 0 ? rc : strcmp(d, digest) == 0;
}

/* The team's step cache (its KILN_HOME): entries unused for older_than_s go,
 * then the least recently used until the store fits max_bytes; blobs no
 * image or remaining entry references go with them (`kiln cache prune`). */
int svc_cache_prune(svc *s, const char *team, uint64_t max_bytes, int64_t older_than_s, struct svc_prune_stats *st,
		    kiln_error **err)
{
	char *home = svc_team_dir(s, team, "home"), *cdir = kiln_path_join(home, "cache");
	struct entry *v = NULL;
	size_t n = 0, cap = 0;
	DIR *d;
	struct dirent *e;
	int ret = -1;
	int64_t now = svc_now();

	memset(st, 0, sizeof(*st));
	if (max_bytes == 0)
		max_bytes = s->cfg.cache_max;
	if (older_than_s < 0)
		older_than_s = s->cfg.cache_age_s;
	{
		char *store = svc_team_dir(s, team, "context"), *linked = svc_team_dir(s, team, "linked");
		st->bytes_before = du(home) + du(store) + du(linked);
		free(store);
		free(linked);
	}
	d = opendir(cdir);
	while (d && (e = readdir(d)) != NULL) {
		size_t l = strlen(e->d_name);
		char *data = NULL;
		size_t len = 0;
		kiln_error *e2 = NULL;
		if (l < 6 || strcmp(e->d_name + l - 5, ".json") != 0)
			continue;
		char *p = kiln_path_join(cdir, e->d_name);
		json_t *j = NULL;
		if (kiln_read_file(p, &data, &len, 1 << 20, &e2) == 0)
			j = json_loadb(data, len, 0, NULL);
		kiln_error_free(e2);
		free(data);
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			v = kiln_xrealloc(v, cap * sizeof(*v));
		}
		json_t *lu = json_object_get(j, "last_used");
		v[n].path = p;
		v[n].last_used = json_is_integer(lu) ? json_integer_value(lu) : 0;
		v[n].size = (uint64_t)json_integer_value(json_object_get(j, "size"));
		n++;
		json_decref(j);
	}
	if (d)
		closedir(d);
	qsort(v, n, sizeof(*v), by_age);
	uint64_t total = du(home);
	for (size_t i = 0; i < n; i++) {
		if (v[i].last_used > now - older_than_s && total <= max_bytes)
			break;
		if (unlink(v[i].path) == 0) {
			st->entries_removed++;
			total = total > v[i].size ? total - v[i].size : 0;
		}
	}
	/* a pruned step runs again: no build of the team is answered from an
	 * earlier one's record any more (replay.c) */
	if (st->entries_removed) {
		const char *p[] = { team };
		if (svc_db_q(s->db, NULL, "UPDATE svc_builds SET replay = NULL WHERE team = $1 AND replay IS NOT NULL",
			     p, 1, err) < 0)
			goto out;
	}
	/* the blobs of removed entries: kiln's own prune of the team's store */
	if (st->entries_removed) {
		kiln_strv a = KILN_STRV_INIT;
		kiln_strv_push(&a, s->exe);
		kiln_strv_push(&a, "cache");
		kiln_strv_push(&a, "prune");
		kiln_strv_push(&a, "--older-than");
		kiln_strv_push_owned(&a, kiln_xasprintf("%llds", (long long)older_than_s));
		ret = svc_exec_quiet(s, a.v, home, err);
		kiln_strv_free(&a);
		if (ret < 0)
			goto out;
	}
	/* then the context store, in what the budget leaves */
	uint64_t home_bytes = du(home), ctx_bytes = 0;
	if (svc_context_prune(s, team, max_bytes > home_bytes ? max_bytes - home_bytes : 0, older_than_s,
			      &st->files_removed, &ctx_bytes, err) < 0)
		goto out;
	st->bytes_after = home_bytes + ctx_bytes;
	ret = 0;
out:
	for (size_t i = 0; i < n; i++)
		free(v[i].path);
	free(v);
	free(cdir);
	free(home);
	return ret;
}

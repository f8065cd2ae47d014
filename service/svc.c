/* svc.c — the service's life: open the queue, fail what a restart cut,
 * start one worker per allowed concurrent build on this host, mount the
 * HTTP routes; each worker claims a build, runs it and claims the next. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* kiln's build API first: /build/ is mounted before E2B's prefixes */
static const struct svc_frontend *const frontends[SVC_FRONTENDS] = { &svc_api_frontend, &svc_e2b_frontend };

e2b *svc_templates(const svc *s)
{
	return s ? s->frontend[1] : NULL;
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
	for (size_t i = 0; i < SVC_FRONTENDS; i++)
		if (frontends[i]->start(s, &s->frontend[i], err) < 0) {
			kiln_error_wrap(err, "%s", frontends[i]->name);
			goto fail;
		}
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
	for (size_t i = SVC_FRONTENDS; i-- > 0;)
		if (s->frontend[i] && frontends[i]->stop)
			frontends[i]->stop(s->frontend[i]);
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


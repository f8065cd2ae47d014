/* worker.c — running a claimed build: its context made from the team's
 * store, the Dockerfile written, then `kiln build --json` in the team's own
 * KILN_HOME (so the step cache, images and builder VM snapshot are per team
 * and shared by all its builds), its events appended to the log as they
 * come, cancel and the time limit enforced by killing its process group,
 * and only after a build that succeeded, `kiln push` of the result into the
 * team's namespace of this registry. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "service/internal.h"

struct run {
	svc *s;
	const char *id, *team;
	const char *epoch;              /* SOURCE_DATE_EPOCH for the build, or NULL */
	struct svc_ready *rd;           /* the worker's child started ahead, or NULL */
	const int *keep_fds;            /* the build's secrets (memfds) its child inherits */
	size_t n_keep_fds;
	pid_t pid;
	pid_t done_pid;                 /* the build's process after its done event, reaped last */
	int done_out, done_err;
	char *reason, *location;       /* from the error event */
	char *digest, *template_digest; /* from the done event */
	kiln_strv pending;              /* lines not yet stored: the service's own events, stored with
	                                 * the next lines, and those a full disk refused (log_store) */
	bool log_kept;                  /* pending holds lines a full disk refused */
	kiln_strv from;                 /* the bases' digests its FROM steps printed */
};

/* The pending lines stored (0), or kept for the next try when the queue's
 * database is full (-1, *err the cause): the log of a build that met a
 * full disk loses no line once space is freed, up to LOG_KEEP_MAX lines
 * held in memory; past that, or for another error, they are dropped with
 * a warning, as before the build's end. */
#define LOG_KEEP_MAX 100000
static int log_store(struct run *r, const struct svc_progress *pr, kiln_error **err)
{
	kiln_error *e = NULL;

	if (r->pending.n == 0)
		return 0;
	if (svc_log_append_lines(r->s, r->id, (const char *const *)r->pending.v, r->pending.n, pr, &e) == 0) {
		if (r->log_kept)
			kiln_warn("build %s: %zu log lines kept in memory stored once space was freed", r->id,
				  r->pending.n);
		r->log_kept = false;
		kiln_strv_free(&r->pending);
		return 0;
	}
	if (kiln_error_disk_full(e) && r->pending.n <= LOG_KEEP_MAX) {
		if (!r->log_kept)
			kiln_warn("build %s: log: %s; its lines are kept in memory until space is freed", r->id,
				  kiln_error_message(e));
		r->log_kept = true;
	} else {
		kiln_warn("build %s: log: %s; %zu lines dropped", r->id, kiln_error_message(e), r->pending.n);
		r->log_kept = false;
		kiln_strv_free(&r->pending);
	}
	if (err && !*err)
		*err = e;
	else
		kiln_error_free(e);
	return -1;
}

/* "FILE:LINE[:COL]" at the start of an error message, or NULL. */
char *svc_error_location(const char *msg)
{
	const char *p = msg;
	size_t n = 0;

	while (p[n] && p[n] != ':' && p[n] != ' ')
		n++;
	if (n == 0 || p[n] != ':' || !(p[n + 1] >= '0' && p[n + 1] <= '9'))
		return NULL;
	n++;
	while (p[n] >= '0' && p[n] <= '9')
		n++;
	if (p[n] == ':' && p[n + 1] >= '0' && p[n + 1] <= '9') {
		n++;
		while (p[n] >= '0' && p[n] <= '9')
			n++;
	}
	if (p[n] != ':')
		return NULL;
	return kiln_xstrndup(p, n);
}

/* One read's worth of the build's --json lines: each looked at for what the
 * status keeps (the step, the error, the result), all stored at once. */
static void on_lines(struct run *r, const kiln_strv *lines)
{
	struct svc_progress pr = { 0 };
	json_t *step = NULL;

	for (size_t i = 0; i < lines->n; i++) {
		json_t *j = json_loads(lines->v[i], 0, NULL);
		const char *ev = j ? json_string_value(json_object_get(j, "event")) : NULL;

		if (ev && strcmp(ev, "step") == 0) {
			json_decref(step);
			step = json_incref(j);
		} else if (ev && strcmp(ev, "step_done") == 0) {
			const char *ins = json_string_value(json_object_get(j, "instruction"));
			const char *cache = json_string_value(json_object_get(j, "cache"));
			if (ins && strncmp(ins, "FROM ", 5) == 0 && strchr(ins, '@'))
				kiln_strv_push(&r->from, strrchr(ins, '@') + 1);
			if (cache)
				svc_metrics_step(r->s, strcmp(cache, "hit") == 0);
		} else if (ev && strcmp(ev, "error") == 0 && json_string_value(json_object_get(j, "message"))) {
			free(r->reason);
			r->reason = kiln_xstrdup(json_string_value(json_object_get(j, "message")));
			free(r->location);
			r->location = svc_error_location(r->reason);
		} else if (ev && strcmp(ev, "done") == 0) {
			free(r->digest);
			r->digest = kiln_xstrdup(json_string_value(json_object_get(j, "digest")) ?: "");
			if (json_string_value(json_object_get(j, "template"))) {
				free(r->template_digest);
				r->template_digest = kiln_xstrdup(json_string_value(json_object_get(j, "template")));
			}
		}
		json_decref(j);
	}
	if (step) {
		pr.step = (int)json_integer_value(json_object_get(step, "step"));
		pr.total = (int)json_integer_value(json_object_get(step, "total"));
		pr.instruction = json_string_value(json_object_get(step, "instruction"));
	}
	for (size_t i = 0; i < lines->n; i++)
		kiln_strv_push(&r->pending, lines->v[i]);
	log_store(r, step ? &pr : NULL, NULL);
	json_decref(step);
}

/* One of the service's own events (status, published): stored with the
 * build's next lines, or at its end (log_flush), one commit for them all. */
static void log_event(struct run *r, json_t *j)
{
	kiln_strv_push_owned(&r->pending, json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER));
	json_decref(j);
}

static void log_flush(struct run *r)
{
	log_store(r, NULL, NULL);
}

static void kill_group(pid_t pid)
{
	kill(-pid, SIGTERM);
	for (int i = 0; i < 50; i++) {
		if (waitpid(pid, NULL, WNOHANG) != 0)
			return;
		kiln_sleep_ms(100);
	}
	kill(-pid, SIGKILL);
}

/* The last lines a child wrote to stderr (its unnamed file), at most 64 KiB. */
static char *err_tail(int fd)
{
	struct stat st;
	size_t max = 64 << 10;
	off_t from;
	char *buf;
	ssize_t n;

	if (fstat(fd, &st) < 0)
		return NULL;
	from = st.st_size > (off_t)max ? st.st_size - (off_t)max : 0;
	buf = kiln_xmalloc(max + 1);
	n = kiln_pread_full(fd, buf, (size_t)(st.st_size - from), from);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

/* Run argv (with KILN_HOME=home, the build's SOURCE_DATE_EPOCH, in cwd),
 * each stdout line to fn (when set); 0 exit status, else -1 with a reason
 * (cancel, time limit, exit code). */
static int run_child(struct run *r, char *const *argv, const char *home, const char *cwd, int64_t deadline,
		     void (*fn)(struct run *, const kiln_strv *), kiln_buf *capture, kiln_error **err)
{
	kiln_buf acc = KILN_BUF_INIT;
	int fd = -1, status = 0, cut = 0;
	int64_t last_beat = svc_now(); /* the claim's own is the first beat */
	char *kh = kiln_xasprintf("KILN_HOME=%s", home), *sde = r->epoch ? kiln_xasprintf("SOURCE_DATE_EPOCH=%s", r->epoch)
									    : kiln_xstrdup("SOURCE_DATE_EPOCH");
	const char *env[] = { kh, sde, NULL };
	struct svc_proc proc;
	int prc = svc_proc_start(r->s, r->rd, argv, env, cwd, r->keep_fds, r->n_keep_fds, &proc, err);
	pid_t pid = proc.pid;

	free(kh);
	free(sde);
	if (prc < 0)
		return -1;
	fd = proc.out;
	pthread_mutex_lock(&r->s->lock);
	r->pid = pid;
	pthread_mutex_unlock(&r->s->lock);
	for (;;) {
		struct pollfd pf = { fd, POLLIN, 0 };
		int pr = poll(&pf, 1, 1000);
		int64_t now = svc_now();

		if (pr > 0) {
			char buf[16 << 10];
			ssize_t n = read(fd, buf, sizeof(buf));
			if (n <= 0)
				break;
			kiln_buf_add(&acc, buf, (size_t)n);
			kiln_strv lines = KILN_STRV_INIT;
			char *nl;
			while ((nl = memchr(acc.buf, '\n', acc.len)) != NULL) {
				*nl = '\0';
				kiln_strv_push(&lines, acc.buf);
				if (capture)
					kiln_buf_addf(capture, "%s\n", acc.buf);
				size_t used = (size_t)(nl - acc.buf) + 1;
				memmove(acc.buf, nl + 1, acc.len - used);
				acc.len -= used;
				acc.buf[acc.len] = '\0';
			}
			if (fn && lines.n)
				fn(r, &lines);
			kiln_strv_free(&lines);
			/* the build's result is stored (done comes last, after the image
			 * is committed and tagged in the team's home): go on publishing
			 * while its process exits, reaped at the end (reap_done) */
			if (fn == on_lines && r->digest) {
				pthread_mutex_lock(&r->s->lock);
				r->pid = 0;
				pthread_mutex_unlock(&r->s->lock);
				r->done_pid = pid;
				r->done_out = fd;
				r->done_err = proc.errfd;
				kiln_buf_free(&acc);
				return 0;
			}
		}
		if (now - last_beat >= 2) {
			kiln_error *e = NULL;
			last_beat = now;
			int c = svc_q_heartbeat(r->s, r->id, &e);
			kiln_error_free(e);
			if (c == 1 || r->s->stopping) {
				cut = c == 1 ? 1 : 3;
				break;
			}
		}
		if (deadline && now >= deadline) {
			cut = 2;
			break;
		}
	}
	if (cut)
		kill_group(pid);
	waitpid(pid, &status, 0);
	pthread_mutex_lock(&r->s->lock);
	r->pid = 0;
	pthread_mutex_unlock(&r->s->lock);
	close(fd);
	kiln_buf_free(&acc);
	if (cut)
		close(proc.errfd);
	if (cut == 1)
		return kiln_err(err, KILN_E_GENERIC, "cancelled");
	if (cut == 2)
		return kiln_err(err, KILN_E_LIMIT, "the build ran past its time limit");
	if (cut == 3)
		return kiln_err(err, KILN_E_GENERIC, "the server stopped while the build was running");
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char *tail = err_tail(proc.errfd);
		/* the child's last "kiln: ..." line says why */
		char *last = NULL;
		for (char *p = tail ? strstr(tail, "kiln: ") : NULL; p; p = strstr(p + 1, "kiln: "))
			last = p;
		if (last)
			last[strcspn(last, "\n")] = '\0';
		if (WIFEXITED(status))
			kiln_err(err, KILN_E_GENERIC, "%s exited with %d%s%s", argv[1], WEXITSTATUS(status),
				 last ? ": " : "", last ? last + 6 : "");
		else
			kiln_err(err, KILN_E_GENERIC, "%s killed by signal %d", argv[1], WTERMSIG(status));
		free(tail);
		close(proc.errfd);
		return -1;
	}
	close(proc.errfd);
	return 0;
}

/* The build's process that gave its done event: given 30 s to exit. */
static void reap_done(struct run *r)
{
	int status = 0, i;

	if (r->done_pid <= 0)
		return;
	close(r->done_out);
	for (i = 0; i < 300 && waitpid(r->done_pid, &status, WNOHANG) == 0; i++)
		kiln_sleep_ms(100);
	if (i == 300) {
		kill_group(r->done_pid);
		waitpid(r->done_pid, &status, 0);
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		kiln_warn("build %s: its process ended with status %d after its result was stored", r->id, status);
	close(r->done_err);
	r->done_pid = 0;
}

static void argv_add(kiln_strv *a, const char *s)
{
	kiln_strv_push(a, s);
}

static int publish(struct run *r, const char *home, const char *cwd, const char *name, bool tmpl,
		   struct svc_result *res, kiln_error **err)
{
	char *host = svc_registry_host(r->s), *repo_tag = kiln_xasprintf("%s/%s", r->team, name);
	char *dest = NULL;
	kiln_strv a = KILN_STRV_INIT;
	kiln_buf out = KILN_BUF_INIT;
	int ret = -1;
	/* the push signs what it stores, and attaches the build's provenance */
	const char *key = kiln_json_str(r->s->cfg.team_sign_keys, r->team);
	if (!key)
		key = r->s->cfg.sign_key;

	if (strchr(name, ':') == NULL) {
		char *t = kiln_xasprintf("%s:latest", repo_tag);
		free(repo_tag);
		repo_tag = t;
	}
	/* the template under NAME:TAG (what kiln run starts), the image beside it */
	const char *kinds[2] = { tmpl ? "--template" : "--image", tmpl ? "--image" : NULL };
	for (int k = 0; k < 2 && kinds[k]; k++) {
		free(dest);
		dest = k == 0 ? kiln_xasprintf("%s/%s", host, repo_tag) : kiln_xasprintf("%s/%s-image", host, repo_tag);
		kiln_strv_free(&a);
		argv_add(&a, r->s->exe);
		argv_add(&a, "push");
		if (key) {
			argv_add(&a, "--sign");
			argv_add(&a, key);
		}
		argv_add(&a, kinds[k]);
		argv_add(&a, name);
		argv_add(&a, dest);
		kiln_buf_free(&out);
		char *digest = NULL;
		/* an image push sends the same manifest bytes (same digest): a tag
		 * already there (a rebuild all from the cache) needs no push, and
		 * its history keeps the build that made that change */
		kiln_error *te = NULL;
		bool unchanged = !key && strcmp(kinds[k], "--image") == 0 && r->digest &&
				 svc_tag_holds(r->s, dest + strlen(host) + 1, r->digest, &te) == 1;
		kiln_error_free(te); /* then it is pushed */
		if (unchanged)
			digest = kiln_xstrdup(r->digest);
		if (digest == NULL && run_child(r, a.v, home, cwd, 0, NULL, &out, err) < 0) {
			kiln_error_wrap(err, "publish %s", dest + strlen(host) + 1);
			goto out;
		}
		char *d = out.buf ? strstr(out.buf, "sha256:") : NULL;
		if (digest == NULL)
			digest = d ? kiln_xstrndup(d, strcspn(d, "\n ")) : kiln_xstrdup("");
		char *ref = kiln_xstrdup(dest + strlen(host) + 1);
		/* the build's id beside the tag's change in the registry's history */
		{
			char *repo = kiln_xstrdup(ref), *colon = strrchr(repo, ':');
			char *note = kiln_xasprintf("build %s", r->id);
			kiln_error *e = NULL;
			*colon = '\0';
			if (*digest && !unchanged && reg_tag_note(reg_server_config(r->s->srv), repo, colon + 1, digest, note, &e) < 0) {
				kiln_warn("build %s: tag history note: %s", r->id, kiln_error_message(e));
				kiln_error_free(e);
			}
			free(note);
			free(repo);
		}
		if (tmpl && k == 0) {
			res->template_ref = ref;
			res->template_digest = digest;
		} else {
			res->image = ref;
			res->image_digest = digest;
		}
		log_event(r, json_pack("{s:s,s:s,s:s,s:s}", "event", "published", "kind",
						 tmpl && k == 0 ? "template" : "image", "ref", dest + strlen(host) + 1,
						 "digest", digest));
	}
	ret = 0;
out:
	kiln_strv_free(&a);
	kiln_buf_free(&out);
	free(dest);
	free(repo_tag);
	free(host);
	return ret;
}

static void result_free(struct svc_result *res)
{
	free(res->image);
	free(res->image_digest);
	free(res->template_ref);
	free(res->template_digest);
	memset(res, 0, sizeof(*res));
}

/* `kiln build --json --request FILE` for the stored request, in the work
 * directory: FILE is the request's build fields (builder/request.h) and the
 * server's own (bases from registries only, ADD from public addresses unless
 * fetch_private, the context's digests); its Dockerfile by name (errors name
 * it as the client does). */
static int build_argv(svc *s, const json_t *req, const char *dfname, const char *cdir, const char *work,
		      kiln_strv *a, kiln_error **err)
{
	struct build_request br;
	char *digests = kiln_path_join(cdir, "digests.json"), *text;
	/* a name no Dockerfile's has (theirs have no ':') */
	char *path = kiln_path_join(work, "kiln:request.json");
	json_t *out = json_object();
	int ret = -1;

	if (build_request_from_json(req, false, &br, err) < 0)
		goto out;
	br.registry_bases = true;
	br.public_urls = !s->cfg.fetch_private;
	/* asked by the request, or the service's default for every build */
	br.provenance = br.provenance || s->cfg.provenance;
	bool provenance = br.provenance;
	br.context_digests = digests;
	build_request_to_json(&br, out);
	build_request_free(&br);
	text = json_dumps(out, JSON_COMPACT);
	ret = svc_write_scratch(path, text, err);
	free(text);
	if (ret < 0)
		goto out;
	argv_add(a, s->exe);
	argv_add(a, "build");
	argv_add(a, "--json");
	argv_add(a, "--request");
	argv_add(a, path);
	argv_add(a, "-f");
	argv_add(a, dfname);
	if (provenance) {
		/* the service's own builder, so a policy can tell its builds from
		 * a local one signed with the same key */
		char host[256] = "", *id;
		gethostname(host, sizeof(host) - 1);
		id = s->cfg.builder_id ? kiln_xstrdup(s->cfg.builder_id) : kiln_xasprintf("kiln-serve@%s", host);
		argv_add(a, "--builder-id");
		argv_add(a, id);
		free(id);
	}
out:
	json_decref(out);
	free(digests);
	free(path);
	return ret;
}

/* What a build's run holds, released once at its end (job_free). */
struct job {
	char *team, *request, *home, *work, *cdir;
	int ctx_lock;
	json_t *req;
	struct svc_secrets *sec;
	int *sec_fds;
	size_t n_sec_fds;
	kiln_strv argv;
};

/* The team's home, the work directory with its context (a symlink to the
 * file list's shared one, held) and Dockerfile, the argv, the secrets. */
static int job_prepare(svc *s, const char *id, struct run *r, struct job *j, kiln_error **err)
{
	const char *dfname = json_string_value(json_object_get(j->req, "dockerfile_name")) ?: "Dockerfile";
	char *ts = kiln_xasprintf("work/%s", id), *ctx = NULL, *cctx = NULL, *df = NULL;
	int ret = -1;

	j->home = svc_team_dir(s, j->team, "home");
	j->work = kiln_path_join(s->state_dir, ts);
	ctx = kiln_path_join(j->work, "context");
	df = kiln_path_join(j->work, dfname);
	/* work/ID/context leads to the list's shared context (a rebuild links nothing) */
	if (kiln_mkdir_p(j->home, 0700, err) < 0 || svc_team_auth(s, j->team, j->home, err) < 0 ||
	    kiln_mkdir_p(j->work, 0700, err) < 0 ||
	    svc_context_use(s, j->team, json_object_get(j->req, "files"), &j->cdir, &j->ctx_lock, err) < 0)
		goto out;
	cctx = kiln_path_join(j->cdir, "context");
	if (symlink(cctx, ctx) < 0) {
		kiln_err_errno(err, errno, "symlink %s", ctx);
		goto out;
	}
	if (svc_write_scratch(df, json_string_value(json_object_get(j->req, "dockerfile")), err) < 0)
		goto out;
	if (build_argv(s, j->req, dfname, j->cdir, j->work, &j->argv, err) < 0)
		goto out;
	if (json_array_size(json_object_get(j->req, "secret_ids"))) {
		/* in this process's memory since the request came (the build is pinned here) */
		if ((j->sec = svc_secrets_claim(s, id)) == NULL) {
			kiln_err(err, KILN_E_NOTFOUND, "the build's secrets are gone (they are kept in memory only, "
				 "by the server that took the request): submit it again");
			goto out;
		}
		if (svc_secrets_args(j->sec, &j->argv, &j->sec_fds, &j->n_sec_fds, err) < 0)
			goto out;
		r->keep_fds = j->sec_fds;
		r->n_keep_fds = j->n_sec_fds;
	}
	argv_add(&j->argv, "context");
	ret = 0;
out:
	free(ts);
	free(ctx);
	free(cctx);
	free(df);
	return ret;
}

static void job_free(struct job *j)
{
	if (j->ctx_lock >= 0)
		close(j->ctx_lock);
	for (size_t k = 0; k < j->n_sec_fds; k++)
		close(j->sec_fds[k]);
	free(j->sec_fds);
	svc_secrets_free(j->sec);
	if (j->work) {
		kiln_error *e = NULL;
		if (kiln_rm_rf(j->work, &e) < 0)
			kiln_error_free(e);
	}
	kiln_strv_free(&j->argv);
	json_decref(j->req);
	free(j->team);
	free(j->request);
	free(j->home);
	free(j->work);
	free(j->cdir);
}

/* A build's end recorded.  On a full disk it is retried until space is
 * freed (or the server stops, whose restart fails the build): a build left
 * 'building' by a failed write would hold its client and its team's slot. */
static int finish(struct run *r, enum svc_state state, const char *reason, const char *location,
		  const struct svc_result *res, kiln_error **err)
{
	bool said = false;

	for (;;) {
		kiln_error *e = NULL;
		/* its log first: a client reading the end reads every line */
		if (log_store(r, NULL, &e) == 0 && svc_q_finish(r->s, r->id, state, reason, location, res, &e) == 0) {
			if (said)
				kiln_warn("build %s: its end recorded once space was freed", r->id);
			return 0;
		}
		if (!kiln_error_disk_full(e) || r->s->stopping) {
			if (err && !*err)
				*err = e;
			else
				kiln_error_free(e);
			return -1;
		}
		if (!said)
			kiln_warn("build %s: its end cannot be recorded: %s; retrying every 2 s", r->id,
				  kiln_error_message(e));
		said = true;
		kiln_error_free(e);
		sleep(2);
	}
}

/* A build that succeeded: its final status (with what it published) logged
 * with the lines still pending, its replay key kept (replay.c), done. */
static int job_done(svc *s, const char *id, struct run *r, const struct job *j, struct svc_result *res,
		    kiln_error **err)
{
	json_t *st = json_pack("{s:s,s:s}", "event", "status", "state", "done");
	const json_t *rp = json_object_get(j->req, "replay");

	if (res->image)
		json_object_set_new(st, "image", json_string(res->image));
	if (res->image_digest)
		json_object_set_new(st, "image_digest", json_string(res->image_digest));
	if (res->template_ref)
		json_object_set_new(st, "template_ref", json_string(res->template_ref));
	if (res->template_digest)
		json_object_set_new(st, "template_digest", json_string(res->template_digest));
	log_event(r, st);
	log_flush(r);
	/* built on the bases its key was made with: the next request with that
	 * key is answered from this build (a key is only made for a named one) */
	if (rp && svc_replay_bases_match(rp, &r->from))
		res->replay = json_string_value(json_object_get(rp, "key"));
	return finish(r, SVC_DONE, NULL, NULL, res, err);
}

/* A build that failed or was cancelled: the reason (with its place) logged
 * unless the build's own error event said it, and recorded. */
static enum svc_state job_failed(svc *s, const char *id, struct run *r, kiln_error *err)
{
	const char *msg = err ? kiln_error_message(err) : "unknown error";
	bool cancelled = err && strcmp(msg, "cancelled") == 0;
	char *loc = r->location ? kiln_xstrdup(r->location) : svc_error_location(msg);
	kiln_error *e2 = NULL;

	if (!r->reason || strcmp(r->reason, msg) != 0)
		log_event(r, json_pack("{s:s,s:s}", "event", "error", "message", msg));
	json_t *j = json_pack("{s:s,s:s,s:s}", "event", "status", "state", cancelled ? "cancelled" : "failed", "reason", msg);
	if (loc)
		json_object_set_new(j, "location", json_string(loc));
	log_event(r, j);
	log_flush(r);
	if (finish(r, cancelled ? SVC_CANCELLED : SVC_FAILED, msg, loc, NULL, &e2) < 0) {
		kiln_warn("build %s: %s", id, kiln_error_message(e2));
		kiln_error_free(e2);
	}
	free(loc);
	return cancelled ? SVC_CANCELLED : SVC_FAILED;
}

void svc_run_build(svc *s, const char *id, struct svc_ready *rd)
{
	struct run r = { .s = s, .id = id, .rd = rd, .pending = KILN_STRV_INIT, .from = KILN_STRV_INIT };
	struct job j = { .ctx_lock = -1, .argv = KILN_STRV_INIT };
	struct svc_result res = { 0 };
	kiln_error *err = NULL;
	json_error_t je;
	int64_t limit = 0;
	double t0 = kiln_now_ms();
	enum svc_state outcome = SVC_DONE;

	pthread_mutex_lock(&s->lock);
	s->running++;
	pthread_mutex_unlock(&s->lock);
	if (svc_q_job(s, id, &j.team, &j.request, &limit, &err) < 0)
		goto fail;
	r.team = j.team;
	if ((j.req = svc_fresh_take(s, id)) == NULL && (j.req = json_loads(j.request, 0, &je)) == NULL) {
		kiln_err(&err, KILN_E_INVALID, "stored request: %s", je.text);
		goto fail;
	}
	json_t *first = json_pack("{s:s,s:s,s:s}", "event", "status", "state", "building", "host", s->host_id);
	const char *rid = json_string_value(json_object_get(j.req, "request_id"));
	if (rid) /* the id of the submit's HTTP request: its access-log line */
		json_object_set_new(first, "request_id", json_string(rid));
	log_event(&r, first);
	if (job_prepare(s, id, &r, &j, &err) < 0)
		goto fail;
	const char *name = json_string_value(json_object_get(j.req, "name"));
	r.epoch = json_string_value(json_object_get(j.req, "source_date_epoch"));
	int brc = run_child(&r, j.argv.v, j.home, j.work, svc_now() + limit, on_lines, NULL, &err);
	r.keep_fds = NULL;
	r.n_keep_fds = 0;
	close(j.ctx_lock); /* its build has read it */
	j.ctx_lock = -1;
	if (brc < 0) {
		if (r.reason && err && err->kind == KILN_E_GENERIC && strstr(kiln_error_message(err), "exited with")) {
			/* the build's own error event says it best */
			kiln_error_clear(&err);
			kiln_err(&err, KILN_E_GENERIC, "%s", r.reason);
		} else if (err && err->kind == KILN_E_LIMIT) {
			kiln_error_clear(&err);
			kiln_err(&err, KILN_E_LIMIT, "the build ran past its time limit of %lld s", (long long)limit);
		}
		goto fail;
	}
	if (name && publish(&r, j.home, j.work, name, json_is_true(json_object_get(j.req, "template")), &res, &err) < 0)
		goto fail;
	if (!name) {
		res.image_digest = kiln_xstrdup(r.digest ? r.digest : "");
		if (r.template_digest)
			res.template_digest = kiln_xstrdup(r.template_digest);
	}
	if (job_done(s, id, &r, &j, &res, &err) == 0)
		goto out;
fail:
	outcome = job_failed(s, id, &r, err);
out:
	svc_metrics_build_ended(s, outcome, (kiln_now_ms() - t0) / 1000.0);
	reap_done(&r);
	job_free(&j);
	kiln_error_free(err);
	result_free(&res);
	kiln_strv_free(&r.pending);
	kiln_strv_free(&r.from);
	free(r.reason);
	free(r.location);
	free(r.digest);
	free(r.template_digest);
	pthread_mutex_lock(&s->lock);
	s->running--;
	pthread_mutex_unlock(&s->lock);
}

int svc_exec_quiet(svc *s, char *const *argv, const char *home, kiln_error **err)
{
	struct run r = { .s = s, .id = "" };
	return run_child(&r, argv, home, home, 0, NULL, NULL, err);
}

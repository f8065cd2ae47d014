/* sandbox.c — one sandbox's envd plane: its agent connection held for the
 * sandbox's life behind one lock, a thread pumping it while no handler does,
 * and the process table.  Processes belong to this connection, not to the
 * HTTP client that started them, so they outlive it; an ended one's exit is
 * kept RT_KEEP_EXIT_MS for a late Connect (docs/sandbox-api.md). */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

static void push(struct rt_proc *p, enum rt_ev_kind kind, const void *data, size_t len)
{
	for (struct rt_sub *s = p->subs; s; s = s->next) {
		if (s->queued + len > RT_MAX_OUTPUT_QUEUE)
			continue; /* a reader that does not read loses output, never the daemon's memory */
		struct rt_ev *e = kiln_xcalloc(1, sizeof(*e));
		e->kind = kind;
		e->data = (kiln_buf)KILN_BUF_INIT;
		kiln_buf_add(&e->data, data, len);
		if (s->tail)
			s->tail->next = e;
		else
			s->head = e;
		s->tail = e;
		s->queued += len;
	}
}

static void on_stdout(void *user, const void *data, size_t len)
{
	struct rt_proc *p = user;
	push(p, p->pty ? RT_EV_PTY : RT_EV_STDOUT, data, len);
}

static void on_stderr(void *user, const void *data, size_t len)
{
	push(user, RT_EV_STDERR, data, len);
}

void rt_ev_free(struct rt_ev *e)
{
	if (e) {
		kiln_buf_free(&e->data);
		free(e);
	}
}

struct rt_ev *rt_sub_take_locked(struct rt_sub *s)
{
	struct rt_ev *e = s->head;

	if (e) {
		s->head = e->next;
		if (s->head == NULL)
			s->tail = NULL;
		s->queued -= e->data.len;
		e->next = NULL;
	}
	return e;
}

struct rt_sub *rt_sub_add_locked(struct rt_proc *p)
{
	struct rt_sub *s = kiln_xcalloc(1, sizeof(*s));
	s->next = p->subs;
	p->subs = s;
	return s;
}

void rt_sub_drop_locked(struct rt_proc *p, struct rt_sub *s)
{
	for (struct rt_sub **pp = &p->subs; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	while (s->head)
		rt_ev_free(rt_sub_take_locked(s));
	free(s);
}

static void proc_free(struct rt_proc *p)
{
	while (p->subs)
		rt_sub_drop_locked(p, p->subs);
	guest_proc_free(p->gp);
	json_decref(p->config);
	free(p->tag);
	free(p);
}

void rt_proc_forget_locked(rt_sandbox *sb, struct rt_proc *p)
{
	for (struct rt_proc **pp = &sb->procs; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			proc_free(p);
			return;
		}
	}
}

void rt_reap_locked(rt_sandbox *sb)
{
	uint64_t now = (uint64_t)kiln_now_ms();
	struct rt_proc **pp = &sb->procs;

	while (*pp) {
		struct rt_proc *p = *pp;
		if (!p->ended && guest_proc_done(p->gp)) {
			kiln_error *e = NULL;
			if (guest_proc_wait(p->gp, 0, &p->res, &e) < 0)
				kiln_error_free(e);
			p->ended = true;
			p->ended_at = now;
			pthread_cond_broadcast(&sb->cv);
		}
		if (p->ended && !p->subs && now - p->ended_at > RT_KEEP_EXIT_MS) {
			*pp = p->next;
			proc_free(p);
			continue;
		}
		pp = &p->next;
	}
}

static void set_broken(rt_sandbox *sb, kiln_error *e)
{
	if (!sb->broken) {
		sb->broken = true;
		sb->broken_why = kiln_xstrdup(kiln_error_message(e));
		/* every process of the connection is gone with it */
		for (struct rt_proc *p = sb->procs; p; p = p->next) {
			if (!p->ended) {
				p->ended = true;
				p->ended_at = (uint64_t)kiln_now_ms();
				p->res.exit_code = -1;
			}
		}
		pthread_cond_broadcast(&sb->cv);
	}
	kiln_error_free(e);
}

int rt_check_locked(rt_sandbox *sb, kiln_error **err)
{
	if (sb->broken)
		return kiln_err(err, KILN_E_IO, "the sandbox's agent connection is gone: %s", sb->broken_why);
	return 0;
}

/* While no handler uses the connection, output and exits still arrive:
 * this thread takes them in as soon as they do. */
static void *pump_main(void *arg)
{
	rt_sandbox *sb = arg;

	pthread_mutex_lock(&sb->mu);
	while (!sb->stop && !sb->broken) {
		struct pollfd pfd = { guest_conn_fd(sb->conn), POLLIN, 0 };
		kiln_error *e = NULL;
		pthread_mutex_unlock(&sb->mu);
		poll(&pfd, 1, 200);
		pthread_mutex_lock(&sb->mu);
		if (sb->stop)
			break;
		if (guest_pump(sb->conn, 0, &e) < 0)
			set_broken(sb, e);
		rt_reap_locked(sb);
		pthread_cond_broadcast(&sb->cv);
	}
	pthread_mutex_unlock(&sb->mu);
	return NULL;
}

rt_sandbox *rt_sandbox_new(guest_conn *conn, const char *const *env, const char *default_user,
			   const char *default_cwd, kiln_error **err)
{
	rt_sandbox *sb = kiln_xcalloc(1, sizeof(*sb));
	pthread_condattr_t ca;

	pthread_mutex_init(&sb->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&sb->cv, &ca);
	pthread_condattr_destroy(&ca);
	sb->conn = conn;
	for (size_t i = 0; env && env[i]; i++)
		kiln_strv_push(&sb->env, env[i]);
	sb->default_user = default_user ? kiln_xstrdup(default_user) : NULL;
	sb->has_bash = -1;
	sb->default_cwd = default_cwd && *default_cwd ? kiln_xstrdup(default_cwd) : NULL;
	if (pthread_create(&sb->pump, NULL, pump_main, sb) != 0) {
		sb->conn = NULL;
		rt_sandbox_free(sb);
		guest_close(conn);
		kiln_err(err, KILN_E_IO, "cannot start the sandbox's agent thread");
		return NULL;
	}
	return sb;
}

void rt_sandbox_free(rt_sandbox *sb)
{
	if (sb == NULL)
		return;
	if (sb->conn) {
		pthread_mutex_lock(&sb->mu);
		sb->stop = true;
		pthread_mutex_unlock(&sb->mu);
		pthread_join(sb->pump, NULL);
	}
	rt_watchers_free(sb);
	while (sb->procs) {
		struct rt_proc *p = sb->procs;
		sb->procs = p->next;
		proc_free(p);
	}
	guest_close(sb->conn);
	kiln_strv_free(&sb->env);
	free(sb->default_user);
	free(sb->default_cwd);
	free(sb->broken_why);
	pthread_cond_destroy(&sb->cv);
	pthread_mutex_destroy(&sb->mu);
	free(sb);
}

struct rt_proc *rt_proc_start_locked(rt_sandbox *sb, const struct guest_exec_opts *o, struct rt_sub **sub,
				     kiln_error **err)
{
	struct rt_proc *p = kiln_xcalloc(1, sizeof(*p));
	struct guest_exec_opts opts = *o;
	kiln_error *e = NULL;

	if (rt_check_locked(sb, err) < 0)
		goto fail;
	/* subscribed before the spawn: output may come in with STARTED */
	if (sub)
		*sub = rt_sub_add_locked(p);
	opts.on_stdout = on_stdout;
	opts.on_stderr = on_stderr;
	opts.user = p;
	p->gp = guest_spawn(sb->conn, &opts, 30000, &e);
	if (p->gp == NULL) {
		/* a failed start (no such program, cwd, user) is the request's
		 * error; a failed connection is every later request's too */
		if (e->kind == KILN_E_IO && guest_ping(sb->conn, 5000, NULL) < 0) {
			kiln_error *dup = NULL;
			kiln_err(&dup, KILN_E_IO, "%s", kiln_error_message(e));
			set_broken(sb, dup);
		}
		*err = e;
		while (p->subs)
			rt_sub_drop_locked(p, p->subs);
		goto fail;
	}
	p->pid = (uint32_t)guest_proc_pid(p->gp);
	p->has_stdin = o->want_stdin;
	p->next = sb->procs;
	sb->procs = p;
	return p;
fail:
	free(p);
	return NULL;
}

struct rt_proc *rt_proc_find_locked(rt_sandbox *sb, uint32_t pid, const char *tag)
{
	for (struct rt_proc *p = sb->procs; p; p = p->next)
		if (!p->is_watch && (tag ? p->tag && strcmp(p->tag, tag) == 0 : p->pid == pid))
			return p;
	return NULL;
}

int rt_wait_locked(rt_sandbox *sb, struct rt_proc *p, struct rt_sub *s, uint64_t deadline_ms)
{
	while (!s->head && !p->ended) {
		struct timespec ts;
		uint64_t now = (uint64_t)kiln_now_ms(), until;
		if (deadline_ms && now >= deadline_ms)
			return 0;
		until = deadline_ms ? deadline_ms : now + 1000;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t ns = (uint64_t)ts.tv_nsec + (until - now) * 1000000ull;
		ts.tv_sec += (time_t)(ns / 1000000000ull);
		ts.tv_nsec = (long)(ns % 1000000000ull);
		pthread_cond_timedwait(&sb->cv, &sb->mu, &ts);
		if (!deadline_ms)
			return s->head || p->ended;
	}
	return 1;
}

const char *rt_user(rt_sandbox *sb, const struct rt_call *call)
{
	return call && call->user ? call->user : sb->default_user ? sb->default_user : "root";
}

void rt_env_build(rt_sandbox *sb, const char *user, const json_t *envs, kiln_strv *out)
{
	const char *k;
	json_t *v;

	kiln_strv_push(out, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
	kiln_strv_push_owned(out, kiln_xasprintf("USER=%s", user));
	kiln_strv_push_owned(out, kiln_xasprintf("LOGNAME=%s", user));
	for (size_t i = 0; i < sb->env.n; i++)
		kiln_strv_push(out, sb->env.v[i]);
	if (json_is_object(envs))
		json_object_foreach((json_t *)envs, k, v)
			if (json_is_string(v) && *k && !strchr(k, '='))
				kiln_strv_push_owned(out, kiln_xasprintf("%s=%s", k, json_string_value(v)));
	/* later entries win: drop an earlier one of the same name */
	for (size_t i = 0; i < out->n; i++) {
		size_t klen = strcspn(out->v[i], "=");
		for (size_t j = i + 1; j < out->n; j++) {
			if (strncmp(out->v[i], out->v[j], klen + 1) == 0) {
				free(out->v[i]);
				memmove(&out->v[i], &out->v[i + 1], (out->n - i) * sizeof(char *));
				out->n--;
				i--;
				break;
			}
		}
	}
}

struct helper_io {
	kiln_buf *out;
	kiln_buf err;
};

static void h_out(void *user, const void *data, size_t len)
{
	kiln_buf_add(((struct helper_io *)user)->out, data, len);
}

static void h_err(void *user, const void *data, size_t len)
{
	struct helper_io *io = user;
	if (io->err.len < 4096)
		kiln_buf_add(&io->err, data, len);
}

int rt_fs_helper(rt_sandbox *sb, const char *user, const char *op, const char *path, const char *arg,
		 const void *in, size_t in_len, kiln_buf *out, enum rt_code *code, kiln_error **err)
{
	const char *argv[] = { "/proc/self/exe", "--fs", op, path, arg, NULL };
	struct helper_io io = { out, KILN_BUF_INIT };
	struct guest_exec_opts o;
	struct guest_result res;
	int rc = -1;

	guest_exec_opts_init(&o);
	o.argv = argv;
	o.run_as = user;
	o.want_stdin = in != NULL;
	o.on_stdout = h_out;
	o.on_stderr = h_err;
	o.user = &io;
	pthread_mutex_lock(&sb->mu);
	if (rt_check_locked(sb, err) < 0)
		goto out;
	if (guest_exec(sb->conn, &o, in, in_len, 120000, &res, err) < 0) {
		*code = kiln_error_cause(*err) && strstr(kiln_error_cause(*err), "unable to find user") ? RT_UNAUTHENTICATED
													 : RT_UNAVAILABLE;
		goto out;
	}
	if (res.signal || res.exit_code) {
		*code = res.exit_code == GUEST_FS_EXIT_NOTFOUND ? RT_NOT_FOUND
			: res.exit_code == GUEST_FS_EXIT_EXISTS ? RT_ALREADY_EXISTS
			: res.exit_code == GUEST_FS_EXIT_INVALID ? RT_INVALID_ARGUMENT
			: strstr(io.err.buf, "Permission denied") ? RT_PERMISSION_DENIED
								  : RT_UNKNOWN;
		kiln_err(err, KILN_E_IO, "%.*s", (int)strcspn(io.err.buf, "\n"), io.err.buf);
		goto out;
	}
	rc = 0;
out:
	rt_reap_locked(sb);
	pthread_mutex_unlock(&sb->mu);
	kiln_buf_free(&io.err);
	return rc;
}

const char *rt_shell(rt_sandbox *sb, const char *cmd)
{
	pthread_mutex_lock(&sb->mu);
	bool none = sb->has_bash == 0;
	pthread_mutex_unlock(&sb->mu);
	return none && strcmp(cmd, "/bin/bash") == 0 ? "/bin/sh" : cmd;
}

bool rt_shell_missing(rt_sandbox *sb, const char *cmd, const kiln_error *err)
{
	/* the agent's words when execvp fails (guest/agent/session.c) */
	if (strcmp(cmd, "/bin/bash") != 0 || err == NULL ||
	    strstr(kiln_error_message((kiln_error *)err), "cannot execute /bin/bash: No such file") == NULL)
		return false;
	sb->has_bash = 0; /* lock held by the caller */
	return true;
}

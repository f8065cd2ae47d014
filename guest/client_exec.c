/* client_exec.c — running processes in the guest from the host: spawn with
 * argv or a shell string, env, cwd, user and timeout; stdin under the agent's
 * flow-control window; kill; wait for the exit while stdout/stderr callbacks
 * fire for every process on the connection (that is what makes several
 * processes run at once over one connection). */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "guest/internal.h"

void guest_exec_opts_init(struct guest_exec_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->uid = o->gid = -1;
}

static size_t strv_len(const char *const *v)
{
	size_t n = 0;

	while (v && v[n])
		n++;
	return n;
}

guest_proc *guest_spawn(guest_conn *c, const struct guest_exec_opts *o, int timeout_ms, kiln_error **err)
{
	uint64_t deadline = gc_deadline(timeout_ms);
	const char *shell_argv[] = { "/bin/sh", "-c", o->shell, NULL };
	const char *const *argv = o->shell ? shell_argv : o->argv;
	struct guest_exec_req req = {
		.argv = (char **)argv,
		.argc = strv_len(argv),
		.env = (char **)o->env,
		.envc = strv_len(o->env),
		.cwd = (char *)o->cwd,
		.uid = o->uid,
		.gid = o->gid,
		.groups = (uint32_t *)o->groups,
		.ngroups = o->groups ? o->ngroups : 0,
		.timeout_ms = o->timeout_ms,
		.flags = (o->want_stdin ? GUEST_EXEC_STDIN : 0) | (o->detach ? GUEST_EXEC_DETACH : 0) |
			 (o->no_network ? GUEST_EXEC_NONET : 0),
		.user = (char *)o->run_as,
		.root = (char *)o->root,
		.log_dir = (char *)o->log_dir,
	};
	struct guest_proc *p = NULL;

	if ((o->shell != NULL) == (o->argv != NULL && o->argv[0] != NULL)) {
		kiln_err(err, KILN_E_USAGE, "give either argv or a shell string");
		goto fail;
	}
	if (o->run_as && (o->uid >= 0 || o->gid >= 0 || o->groups)) {
		kiln_err(err, KILN_E_USAGE, "give either a user name or numeric uid/gid");
		goto fail;
	}
	if (req.argc > GUEST_MAX_LIST || req.envc > GUEST_MAX_LIST || req.ngroups > GUEST_MAX_LIST) {
		kiln_err(err, KILN_E_LIMIT, "more than %u arguments, env entries or groups", GUEST_MAX_LIST);
		goto fail;
	}
	for (size_t i = 0; i < req.envc; i++) {
		if (strchr(req.env[i], '=') == NULL || req.env[i][0] == '=') {
			kiln_err(err, KILN_E_INVALID, "env entry '%s' is not NAME=VALUE", req.env[i]);
			goto fail;
		}
	}
	if (gc_check(c, err) < 0)
		goto fail;
	/* an older agent would ignore the field and run in its own root */
	if ((o->root || o->no_network) && gc_wait_for(c, &c->have_hello, deadline, "HELLO", err) < 0)
		goto fail;
	if ((o->root || o->no_network) && !(guest_conn_caps(c) & GUEST_CAP_ROOT)) {
		kiln_err(err, KILN_E_GENERIC, "the agent cannot run a command in another root or without network");
		goto fail;
	}
	if (o->log_dir && (!o->detach || o->log_dir[0] != '/')) {
		kiln_err(err, KILN_E_USAGE, "a log dir must be absolute and is for detached processes");
		goto fail;
	}
	/* an older agent would skip the field and throw the output away */
	if (o->log_dir && gc_wait_for(c, &c->have_hello, deadline, "HELLO", err) < 0)
		goto fail;
	if (o->log_dir && !(guest_conn_caps(c) & GUEST_CAP_EXEC_LOG)) {
		kiln_err(err, KILN_E_GENERIC, "the agent (%s) cannot keep a detached process's output: rebuild the "
			 "template with this kiln", guest_conn_agent(c));
		goto fail;
	}
	p = gc_req_new(c, R_PROC);
	p->on_stdout = o->on_stdout;
	p->on_stderr = o->on_stderr;
	p->user = o->user;
	p->window = GUEST_STDIN_WINDOW;
	p->stdin_open = o->want_stdin;
	p->detached = o->detach;
	guest_encode_exec(&c->out, p->id, &req);
	if (gc_flush(c, deadline, err) < 0)
		goto fail;
	if (gc_wait_started(p, deadline, argv[0], err) < 0)
		goto fail;
	if (p->failed) {
		gc_req_error(p, err);
		goto fail;
	}
	return p;
fail:
	gc_req_free(p);
	kiln_error_wrap(err, "agent exec");
	return NULL;
}

int guest_proc_write(guest_proc *p, const void *data, size_t len, int timeout_ms, kiln_error **err)
{
	uint64_t deadline = gc_deadline(timeout_ms);
	const uint8_t *d = data;

	if (!p->stdin_open)
		return kiln_err(err, KILN_E_USAGE, "agent exec: stdin of process %u is not open", p->id);
	while (len > 0) {
		size_t chunk = len;
		if (p->done)
			return kiln_err_errno(err, EPIPE, "agent exec: the process exited before reading its stdin");
		if (p->window == 0) {
			if (gc_pump(p->c, deadline, err) < 0)
				return kiln_error_wrap(err, "agent exec");
			if (p->window == 0 && !p->done && (uint64_t)kiln_now_ms() >= deadline)
				return kiln_err(err, KILN_E_IO, "agent exec: the process did not read its stdin within %d ms",
						timeout_ms);
			continue;
		}
		if (chunk > p->window)
			chunk = p->window;
		if (chunk > GUEST_DATA_CHUNK)
			chunk = GUEST_DATA_CHUNK;
		guest_frame_raw(&p->c->out, GUEST_F_STDIN, p->id, d, chunk);
		if (gc_flush(p->c, deadline, err) < 0)
			return kiln_error_wrap(err, "agent exec");
		p->window -= chunk;
		d += chunk;
		len -= chunk;
	}
	return 0;
}

int guest_proc_close_stdin(guest_proc *p, kiln_error **err)
{
	if (!p->stdin_open)
		return 0;
	p->stdin_open = false;
	if (p->done)
		return 0;
	guest_frame_raw(&p->c->out, GUEST_F_STDIN_EOF, p->id, NULL, 0);
	if (gc_flush(p->c, gc_deadline(10000), err) < 0)
		return kiln_error_wrap(err, "agent exec: close stdin");
	return 0;
}

int guest_proc_kill(guest_proc *p, int sig, kiln_error **err)
{
	uint8_t b[4];

	if (sig < 1 || sig > 64)
		return kiln_err(err, KILN_E_USAGE, "agent exec: bad signal %d", sig);
	if (p->done)
		return 0;
	guest_put_u32(b, (uint32_t)sig);
	guest_frame_raw(&p->c->out, GUEST_F_KILL, p->id, b, 4);
	if (gc_flush(p->c, gc_deadline(10000), err) < 0)
		return kiln_error_wrap(err, "agent exec: kill");
	return 0;
}

pid_t guest_proc_pid(const guest_proc *p)
{
	return p->pid;
}

bool guest_proc_done(const guest_proc *p)
{
	return p->done;
}

int guest_proc_wait(guest_proc *p, int timeout_ms, struct guest_result *res, kiln_error **err)
{
	if (gc_wait_for(p->c, &p->done, gc_deadline(timeout_ms), "exit of the process", err) < 0)
		return kiln_error_wrap(err, "agent exec");
	if (p->failed) {
		gc_req_error(p, err);
		return kiln_error_wrap(err, "agent exec");
	}
	if (res)
		*res = p->res;
	return 0;
}

void guest_proc_free(guest_proc *p)
{
	if (p == NULL)
		return;
	if (!p->done && !p->detached)
		gc_send_kill(p->c, p->id, SIGKILL);
	gc_req_free(p);
}

int guest_exec(guest_conn *c, const struct guest_exec_opts *o, const void *stdin_data, size_t stdin_len,
	       int wait_ms, struct guest_result *res, kiln_error **err)
{
	uint64_t deadline = gc_deadline(wait_ms);
	struct guest_exec_opts mine = *o;
	guest_proc *p;
	int rc = -1;

	mine.want_stdin = o->want_stdin || stdin_data != NULL;
	p = guest_spawn(c, &mine, wait_ms, err);
	if (p == NULL)
		return -1;
	if (stdin_data && stdin_len > 0) {
		kiln_error *e = NULL;
		/* A command that exits without reading its stdin is not an error here. */
		if (guest_proc_write(p, stdin_data, stdin_len, gc_remaining(deadline), &e) < 0) {
			if (!p->done) {
				kiln_err(err, e->kind, "%s", kiln_error_message(e));
				kiln_error_free(e);
				goto out;
			}
			kiln_error_free(e);
		}
	}
	if (guest_proc_close_stdin(p, err) < 0)
		goto out;
	if (guest_proc_wait(p, gc_remaining(deadline), res, err) < 0)
		goto out;
	rc = 0;
out:
	guest_proc_free(p);
	return rc;
}

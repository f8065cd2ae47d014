/* sandbox_opts.c — what a sandbox is given beyond its template: env and
 * labels at creation (kept in its state, the env applied to every exec), a
 * timeout, and per-exec env, workdir, user, stdin and detached processes
 * whose output the guest agent keeps in SNAP_GUEST_LOG_DIR. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "snapshots/internal.h"

#define AGENT_TIMEOUT_MS 10000

void snap_env_merge(kiln_strv *out, const json_t *base, const char *const *over)
{
	for (size_t i = 0; json_is_array(base) && i < json_array_size(base); i++)
		if (json_is_string(json_array_get(base, i)))
			kiln_strv_push(out, json_string_value(json_array_get(base, i)));
	for (size_t i = 0; over && over[i]; i++) {
		size_t k = strcspn(over[i], "=");
		bool replaced = false;
		for (size_t j = 0; j < out->n && !replaced; j++) {
			if (strncmp(out->v[j], over[i], k) == 0 && out->v[j][k] == '=') {
				free(out->v[j]);
				out->v[j] = kiln_xstrdup(over[i]);
				replaced = true;
			}
		}
		if (!replaced)
			kiln_strv_push(out, over[i]);
	}
}

static int check_pairs(const char *const *v, const char *what, kiln_error **err)
{
	for (size_t i = 0; v && v[i]; i++)
		if (v[i][0] == '=' || strchr(v[i], '=') == NULL)
			return kiln_err(err, KILN_E_USAGE, "%s '%s' is not KEY=VALUE", what, v[i]);
	return 0;
}

/* The options as state fields: "env" (the template's with o->env over it),
 * "labels", "timeout_s" and "expires_ms". */
int snap_state_apply_opts(json_t *st, const struct snap_create_opts *o, kiln_error **err)
{
	kiln_strv env = KILN_STRV_INIT;
	json_t *arr, *labels;

	if (o == NULL)
		return 0;
	if (check_pairs(o->env, "env entry", err) < 0 || check_pairs(o->labels, "label", err) < 0)
		return -1;
	if (o->timeout_s < 0)
		return kiln_err(err, KILN_E_USAGE, "a timeout cannot be negative");
	if (o->env && o->env[0]) {
		snap_env_merge(&env, json_object_get(st, "env"), o->env);
		arr = json_array();
		for (size_t i = 0; i < env.n; i++)
			json_array_append_new(arr, json_string(env.v[i]));
		json_object_set_new(st, "env", arr);
		kiln_strv_free(&env);
	}
	labels = json_object();
	for (size_t i = 0; o->labels && o->labels[i]; i++) {
		size_t k = strcspn(o->labels[i], "=");
		char *key = kiln_xstrndup(o->labels[i], k);
		json_object_set_new(labels, key, json_string(o->labels[i] + k + 1));
		free(key);
	}
	json_object_set_new(st, "labels", labels);
	snap_state_set_timeout(st, o->timeout_s);
	return 0;
}

int snap_sandbox_filter(const json_t *item, const char *filter, kiln_error **err)
{
	const char *eq = strchr(filter, '=');
	size_t kl = eq ? (size_t)(eq - filter) : 0;

	if (eq && kl == 5 && strncmp(filter, "label", 5) == 0) {
		const char *kv = eq + 1, *veq = strchr(kv, '=');
		char *key = veq ? kiln_xstrndup(kv, (size_t)(veq - kv)) : kiln_xstrdup(kv);
		const json_t *v = json_object_get(json_object_get(item, "labels"), key);
		int m = v && (veq == NULL || (json_is_string(v) && strcmp(json_string_value(v), veq + 1) == 0));
		free(key);
		return m;
	}
	if (eq && ((kl == 5 && strncmp(filter, "state", 5) == 0) || (kl == 8 && strncmp(filter, "template", 8) == 0) ||
		   (kl == 2 && strncmp(filter, "id", 2) == 0))) {
		char *key = kiln_xstrndup(filter, kl);
		const char *have = kiln_json_str(item, key);
		free(key);
		return have && (kl == 2 ? strncmp(have, eq + 1, strlen(eq + 1)) == 0 : strcmp(have, eq + 1) == 0);
	}
	return kiln_err(err, KILN_E_USAGE, "unknown filter '%s' (label=KEY[=VALUE], state=S, template=DIGEST, id=PREFIX)",
			filter);
}

char *snap_sandbox_create_with(const char *template_ref, const struct snap_create_opts *o,
			       struct snap_create_stats *stats, guest_conn **conn, kiln_error **err)
{
	json_t *probe = json_pack("{s:[]}", "env");
	char *id;
	int lock;

	/* Bad options are found before anything is started. */
	if (snap_state_apply_opts(probe, o, err) < 0) {
		json_decref(probe);
		return NULL;
	}
	json_decref(probe);
	id = o && o->identity_unawaited && conn ? snap_sandbox_create_sent(template_ref, o->net, stats, conn, err)
					       : snap_sandbox_create_net(template_ref, o ? o->net : NULL, stats, conn, err);
	if (id == NULL || o == NULL)
		return id;
	/* One more state write (under the sandbox's lock: a watcher or a
	 * timeout may write too), then the watcher that enforces the timeout. */
	json_t *st = NULL;
	char *dir = snap_sandbox_dir(id);
	if ((lock = snap_state_lock(id, err)) < 0 || (st = snap_sandbox_state(id, err)) == NULL ||
	    snap_state_apply_opts(st, o, err) < 0 || snap_state_write(dir, st, err) < 0) {
		kiln_error *e = NULL;
		if (conn && *conn) {
			guest_close(*conn);
			*conn = NULL;
		}
		snap_sandbox_kill(id, &e);
		kiln_error_free(e);
		free(id);
		id = NULL;
	}
	if (lock >= 0)
		close(lock);
	if (id && o->timeout_s > 0)
		snap_watch_start(id);
	json_decref(st);
	free(dir);
	return id;
}

void snap_exec_opts_init(struct snap_exec_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->stdin_fd = -1;
}

/* Copy fd to the process's stdin while its output flows, then close it. */
static int feed_stdin(guest_conn *c, guest_proc *p, int fd, kiln_error **err)
{
	static char buf[GUEST_DATA_CHUNK];

	for (;;) {
		struct pollfd pf[2] = { { fd, POLLIN, 0 }, { guest_conn_fd(c), POLLIN, 0 } };
		if (poll(pf, 2, -1) < 0 && errno != EINTR)
			return kiln_err_errno(err, errno, "poll");
		if (pf[1].revents && guest_pump(c, 0, err) < 0)
			return -1;
		if (guest_proc_done(p))
			return 0; /* it exited without reading all of it */
		if (pf[0].revents == 0)
			continue;
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			return kiln_err_errno(err, errno, "read stdin");
		if (n == 0)
			break;
		if (guest_proc_write(p, buf, (size_t)n, -1, err) < 0) {
			if (guest_proc_done(p)) {
				kiln_error_clear(err);
				return 0;
			}
			return -1;
		}
	}
	return guest_proc_close_stdin(p, err);
}

int snap_exec_conn_with(guest_conn *c, const char *id, const char *const *argv, const struct snap_exec_opts *o,
			guest_output_fn on_stdout, guest_output_fn on_stderr, void *user, struct guest_result *res,
			kiln_error **err)
{
	json_t *st = snap_sandbox_state(id, err);
	struct guest_exec_opts x;
	kiln_strv envv = KILN_STRV_INIT;
	guest_proc *p = NULL;
	int rc = -1;

	memset(res, 0, sizeof(*res));
	if (st == NULL)
		return -1;
	if (o && check_pairs(o->env, "env entry", err) < 0)
		goto out;
	guest_exec_opts_init(&x);
	x.argv = argv;
	snap_env_merge(&envv, json_object_get(st, "env"), o ? o->env : NULL);
	x.env = envv.n ? (const char *const *)envv.v : NULL;
	x.cwd = o && o->cwd ? o->cwd : kiln_json_str(st, "workdir");
	x.run_as = o && o->user ? o->user : kiln_json_str(st, "user");
	x.on_stdout = on_stdout;
	x.on_stderr = on_stderr;
	x.user = user;
	if (o) {
		x.timeout_ms = o->timeout_ms;
		x.want_stdin = o->stdin_fd >= 0 && !o->detach;
		x.detach = o->detach;
		x.log_dir = o->detach ? SNAP_GUEST_LOG_DIR : NULL;
	}
	if ((p = guest_spawn(c, &x, AGENT_TIMEOUT_MS, err)) == NULL)
		goto failed;
	if (o && o->detach) {
		if (o->pid)
			*o->pid = guest_proc_pid(p);
		rc = 0;
		goto out;
	}
	if (x.want_stdin && feed_stdin(c, p, o->stdin_fd, err) < 0)
		goto out;
	if (guest_proc_wait(p, -1, res, err) < 0)
		goto out;
	rc = 0;
	goto out;
failed:
	/* The agent could not start it (its ERROR carries the guest's errno):
	 * the shell's codes, as docker gives them. */
	if (err && *err && ((*err)->errnum == ENOENT || (*err)->errnum == EACCES || (*err)->errnum == ENOEXEC))
		res->exit_code = (*err)->errnum == ENOENT ? 127 : 126;
out:
	guest_proc_free(p);
	json_decref(st);
	kiln_strv_free(&envv);
	return rc;
}

/* An exec that lost its agent because the sandbox's QEMU died says so (QEMU
 * may take a moment to go). */
static void say_if_dead(const char *id, kiln_error **err)
{
	for (int i = 0; i < 20 && err && *err && (*err)->kind == KILN_E_IO; i++) {
		json_t *st = snap_sandbox_state(id, NULL);
		bool dead = st && strcmp(snap_sandbox_liveness(st), "dead") == 0;
		json_decref(st);
		if (dead) {
			kiln_error_wrap(err, "sandbox %s stopped: its QEMU is gone (for a lazy template, a memory page that "
					"could not be fetched ends it: $KILN_HOME/chunkfs/log names the chunk; kiln "
					"sandbox gc removes it)", id);
			return;
		}
		kiln_sleep_ms(50);
	}
}

int snap_sandbox_exec_with(const char *id, const char *const *argv, const struct snap_exec_opts *o,
			   guest_output_fn on_stdout, guest_output_fn on_stderr, void *user, struct guest_result *res,
			   kiln_error **err)
{
	guest_conn *c;
	int rc;

	memset(res, 0, sizeof(*res));
	if ((c = snap_sandbox_connect(id, AGENT_TIMEOUT_MS, err)) == NULL)
		return -1;
	rc = snap_exec_conn_with(c, id, argv, o, on_stdout, on_stderr, user, res, err);
	guest_close(c);
	if (rc < 0)
		say_if_dead(id, err);
	return rc;
}

struct logs_ctx {
	guest_output_fn err;
	void *user;
	kiln_buf status;
	int part; /* 0: stdout, then the "\n--kiln-exit--\n" marker, then the exit line */
};

/* The guest's busybox reads the files (every kiln VM has it at
 * /run/kiln/bin/busybox): stdout's file to stdout, stderr's to stderr, and
 * the end (or "running") after a marker on stdout, split off here. */
static void logs_out(void *user, const void *data, size_t len)
{
	struct logs_ctx *l = user;

	kiln_buf_add(&l->status, data, len);
}

static void logs_err(void *user, const void *data, size_t len)
{
	struct logs_ctx *l = user;

	if (l->err)
		l->err(l->user, data, len);
}

int snap_sandbox_logs(const char *id, pid_t pid, guest_output_fn on_stdout, guest_output_fn on_stderr, void *user,
		      char **status, kiln_error **err)
{
	static const char marker[] = "\n--kiln-exit--\n";
	char *script = kiln_xasprintf("d=%s/%ld; [ -e $d.out ] || exit 3; "
				      "cat $d.out; cat $d.err >&2; printf '%s'; cat $d.exit 2>/dev/null || echo running",
				      SNAP_GUEST_LOG_DIR, (long)pid, "\\n--kiln-exit--\\n");
	const char *argv[] = { VM_GUEST_BUSYBOX, "sh", "-c", script, NULL };
	struct logs_ctx l = { .err = on_stderr, .user = user, .status = KILN_BUF_INIT };
	struct snap_exec_opts o;
	struct guest_result res;
	int rc = -1;

	snap_exec_opts_init(&o);
	o.user = "0:0"; /* the files are root's */
	o.cwd = "/";
	if (snap_sandbox_exec_with(id, argv, &o, logs_out, logs_err, &l, &res, err) < 0)
		goto out;
	if (res.exit_code == 3) {
		kiln_err(err, KILN_E_NOTFOUND, "sandbox %s has no detached process %ld (kiln sandbox exec --detach "
			 "starts one)", id, (long)pid);
		goto out;
	}
	if (res.exit_code != 0 || res.signal) {
		kiln_err(err, KILN_E_GENERIC, "reading the logs of %ld in sandbox %s failed (exit %d)", (long)pid, id,
			 res.signal ? 128 + res.signal : res.exit_code);
		goto out;
	}
	/* split the stdout file from the end line at the last marker */
	size_t m = sizeof(marker) - 1, at = l.status.len;
	for (size_t i = l.status.len >= m ? l.status.len - m + 1 : 0; i-- > 0;)
		if (memcmp(l.status.buf + i, marker, m) == 0) {
			at = i;
			break;
		}
	if (at == l.status.len) {
		kiln_err(err, KILN_E_INVALID, "the guest's answer about %ld has no end marker", (long)pid);
		goto out;
	}
	if (on_stdout && at)
		on_stdout(user, l.status.buf, at);
	if (status) {
		char *s = kiln_xstrndup(l.status.buf + at + m, l.status.len - at - m);
		s[strcspn(s, "\n")] = '\0';
		*status = s;
	}
	rc = 0;
out:
	kiln_buf_free(&l.status);
	free(script);
	return rc;
}

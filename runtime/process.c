/* process.c — process.Process: Start, Connect, List, SendInput, SendSignal,
 * CloseStdin, Update, on the agent's EXEC.  A command runs as EXEC asks for
 * it (E2B's SDK sends /bin/bash -l -c CMD); a PTY one through the agent's
 * `--pty` helper, whose stdin carries input and resizes. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

#define MAX_INPUT (1u << 20)

static json_t *event(const char *kind, json_t *body)
{
	return json_pack("{s:{s:o}}", "event", kind, body);
}

/* The process named by msg.process {pid | tag}; NULL with RT_NOT_FOUND. */
static struct rt_proc *select_locked(rt_sandbox *sb, const json_t *msg, enum rt_code *code, kiln_error **err)
{
	const json_t *sel = json_object_get(msg, "process");
	const char *tag;
	int64_t pid;
	struct rt_proc *p;

	*code = RT_INVALID_ARGUMENT;
	if (!json_is_object(sel)) {
		kiln_err(err, KILN_E_INVALID, "process (a selector with pid or tag) is missing");
		return NULL;
	}
	if (rt_get_string(sel, "tag", false, &tag, err) < 0 || rt_get_int(sel, "pid", -1, &pid, err) < 0)
		return NULL;
	if (!tag && (pid < 0 || pid > UINT32_MAX)) {
		kiln_err(err, KILN_E_INVALID, "process has neither a pid nor a tag");
		return NULL;
	}
	p = rt_proc_find_locked(sb, (uint32_t)pid, tag);
	if (p == NULL) {
		*code = RT_NOT_FOUND;
		if (tag)
			kiln_err(err, KILN_E_NOTFOUND, "no process with tag %.64s%s", tag, strlen(tag) > 64 ? "..." : "");
		else
			kiln_err(err, KILN_E_NOTFOUND, "no process with pid %lld", (long long)pid);
	}
	return p;
}

static json_t *end_event(const struct rt_proc *p)
{
	json_t *end = json_object();
	char status[64];

	if (p->res.signal) {
		snprintf(status, sizeof(status), "signal: %s", strsignal(p->res.signal));
		json_object_set_new(end, "exitCode", json_integer(-1));
		json_object_set_new(end, "exited", json_false());
	} else {
		snprintf(status, sizeof(status), "exit status %d", p->res.exit_code);
		if (p->res.exit_code)
			json_object_set_new(end, "exitCode", json_integer(p->res.exit_code));
		json_object_set_new(end, "exited", json_true());
	}
	json_object_set_new(end, "status", json_string(status));
	if (p->res.exit_code || p->res.signal)
		json_object_set_new(end, "error", json_string(status));
	return event("end", end);
}

/* Stream p's output and end to st, from subscription s (dropped here). */
static int follow(rt_sandbox *sb, struct rt_proc *p, struct rt_sub *s, const struct rt_call *call, rt_stream *st,
		  enum rt_code *code, kiln_error **err)
{
	static const char *const names[] = { "stdout", "stderr", "pty" };
	uint64_t keep = call->keepalive_s ? call->keepalive_s * 1000ull : 90000, next_keep = (uint64_t)kiln_now_ms() + keep;
	int rc = 0;

	pthread_mutex_lock(&sb->mu);
	for (;;) {
		struct rt_ev *e;
		rt_wait_locked(sb, p, s, next_keep);
		if ((e = rt_sub_take_locked(s))) {
			pthread_mutex_unlock(&sb->mu);
			json_t *data = json_pack("{s:o}", names[e->kind], rt_json_bytes(e->data.buf, e->data.len));
			rt_ev_free(e);
			rc = rt_stream_send(st, event("data", data));
			pthread_mutex_lock(&sb->mu);
			next_keep = (uint64_t)kiln_now_ms() + keep;
		} else if (p->ended) {
			break;
		} else if ((uint64_t)kiln_now_ms() >= next_keep) {
			pthread_mutex_unlock(&sb->mu);
			rc = rt_stream_send(st, event("keepalive", json_object()));
			pthread_mutex_lock(&sb->mu);
			next_keep = (uint64_t)kiln_now_ms() + keep;
		}
		if (rc < 0)
			break; /* the client went away; the process goes on */
	}
	bool timed_out = p->res.timed_out, broken = sb->broken;
	json_t *end = p->ended && rc == 0 ? end_event(p) : NULL;
	rt_sub_drop_locked(p, s);
	pthread_mutex_unlock(&sb->mu);
	if (rc < 0)
		return -1;
	if (broken) {
		json_decref(end);
		*code = RT_UNAVAILABLE;
		return kiln_err(err, KILN_E_IO, "the sandbox's agent connection is gone");
	}
	if (timed_out) {
		json_decref(end);
		*code = RT_DEADLINE_EXCEEDED;
		return kiln_err(err, KILN_E_IO, "the process ran past its deadline and was killed");
	}
	return rt_stream_send(st, end);
}

int rt_process_start(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, json_t **reply, rt_stream *st,
		     enum rt_code *code, kiln_error **err)
{
	const json_t *cfg = json_object_get(msg, "process"), *args, *pty = json_object_get(msg, "pty");
	const char *cmd, *cwd, *tag, *user = rt_user(sb, call);
	kiln_strv argv = { 0 }, env = { 0 };
	struct guest_exec_opts o;
	struct rt_proc *p;
	struct rt_sub *s;
	bool want_stdin;
	int64_t cols = 80, rows = 24;
	int rc = -1;

	*code = RT_INVALID_ARGUMENT;
	if (!json_is_object(cfg)) {
		kiln_err(err, KILN_E_INVALID, "process (the command's config) is missing");
		goto out;
	}
	args = json_object_get(cfg, "args");
	if (rt_get_string(cfg, "cmd", true, &cmd, err) < 0 || rt_get_string(cfg, "cwd", false, &cwd, err) < 0 ||
	    rt_get_string(msg, "tag", false, &tag, err) < 0 || rt_get_bool(msg, "stdin", true, &want_stdin, err) < 0)
		goto out;
	if (args && !json_is_array(args)) {
		kiln_err(err, KILN_E_INVALID, "process.args is not a list");
		goto out;
	}
	if (json_array_size(args) > 4096) {
		kiln_err(err, KILN_E_INVALID, "process.args has %zu entries, over the limit of 4096", json_array_size(args));
		goto out;
	}
	if (pty) {
		const json_t *size = json_object_get(pty, "size");
		if (rt_get_int(size, "cols", 80, &cols, err) < 0 || rt_get_int(size, "rows", 24, &rows, err) < 0)
			goto out;
		if (cols < 1 || cols > 65535 || rows < 1 || rows > 65535) {
			kiln_err(err, KILN_E_INVALID, "pty.size %lldx%lld is not a terminal size", (long long)cols, (long long)rows);
			goto out;
		}
		kiln_strv_push(&argv, "/proc/self/exe");
		kiln_strv_push(&argv, "--pty");
		kiln_strv_push_owned(&argv, kiln_xasprintf("%lld", (long long)cols));
		kiln_strv_push_owned(&argv, kiln_xasprintf("%lld", (long long)rows));
		want_stdin = true;
	}
	size_t cmd_at = argv.n;
	kiln_strv_push(&argv, rt_shell(sb, cmd));
	for (size_t i = 0; i < json_array_size(args); i++) {
		const json_t *a = json_array_get(args, i);
		if (!json_is_string(a) || memchr(json_string_value(a), 0, json_string_length(a))) {
			kiln_err(err, KILN_E_INVALID, "process.args[%zu] is not a string", i);
			goto out;
		}
		kiln_strv_push(&argv, json_string_value(a));
	}
	rt_env_build(sb, user, json_object_get(cfg, "envs"), &env);
	guest_exec_opts_init(&o);
	o.argv = (const char *const *)argv.v;
	o.env = (const char *const *)env.v;
	o.run_as = user;
	/* E2B's rule: the template's workdir, else the user's home ("." the
	 * agent takes in it, as any relative cwd) */
	o.cwd = cwd && *cwd ? cwd : sb->default_cwd ? sb->default_cwd : ".";
	o.timeout_ms = call->timeout_ms;
	o.want_stdin = want_stdin;
	/* envd's processes outlive the connection that started them: a daemon
	 * restart or a resume reconnects to the agent, whose new HELLO ends the
	 * sessions of the old one but not detached ones (their output then goes
	 * nowhere; docs/sandbox-api.md) */
	o.detach = true;
	pthread_mutex_lock(&sb->mu);
	p = rt_proc_start_locked(sb, &o, &s, err);
	if (p == NULL && rt_shell_missing(sb, argv.v[cmd_at], *err)) {
		/* a template without bash: E2B's /bin/bash -l -c CMD runs in sh */
		kiln_error_clear(err);
		free(argv.v[cmd_at]);
		argv.v[cmd_at] = kiln_xstrdup("/bin/sh");
		p = rt_proc_start_locked(sb, &o, &s, err);
	}
	if (p == NULL) {
		pthread_mutex_unlock(&sb->mu);
		*code = strstr(kiln_error_message(*err), "chdir") ? RT_INVALID_ARGUMENT
			: strstr(kiln_error_message(*err), "unable to find user") ? RT_UNAUTHENTICATED
										   : RT_UNKNOWN;
		goto out;
	}
	p->pty = pty != NULL;
	p->tag = tag ? kiln_xstrdup(tag) : NULL;
	p->config = json_deep_copy(cfg);
	uint32_t pid = p->pid;
	pthread_mutex_unlock(&sb->mu);
	if (rt_stream_send(st, event("start", json_pack("{s:I}", "pid", (json_int_t)pid))) < 0) {
		pthread_mutex_lock(&sb->mu);
		rt_sub_drop_locked(p, s);
		pthread_mutex_unlock(&sb->mu);
		goto out;
	}
	rc = follow(sb, p, s, call, st, code, err);
out:
	kiln_strv_free(&argv);
	kiln_strv_free(&env);
	return rc;
}

int rt_process_connect(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, json_t **reply,
		       rt_stream *st, enum rt_code *code, kiln_error **err)
{
	struct rt_proc *p;
	struct rt_sub *s;

	pthread_mutex_lock(&sb->mu);
	rt_reap_locked(sb);
	p = select_locked(sb, msg, code, err);
	if (p == NULL) {
		pthread_mutex_unlock(&sb->mu);
		return -1;
	}
	s = rt_sub_add_locked(p);
	uint32_t pid = p->pid;
	pthread_mutex_unlock(&sb->mu);
	if (rt_stream_send(st, event("start", json_pack("{s:I}", "pid", (json_int_t)pid))) < 0) {
		pthread_mutex_lock(&sb->mu);
		rt_sub_drop_locked(p, s);
		pthread_mutex_unlock(&sb->mu);
		return -1;
	}
	return follow(sb, p, s, call, st, code, err);
}

int rt_process_list(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, json_t **reply, rt_stream *st,
		    enum rt_code *code, kiln_error **err)
{
	json_t *list = json_array();

	pthread_mutex_lock(&sb->mu);
	rt_reap_locked(sb);
	for (struct rt_proc *p = sb->procs; p; p = p->next) {
		if (p->ended || p->is_watch)
			continue;
		json_t *o = json_pack("{s:O, s:I}", "config", p->config, "pid", (json_int_t)p->pid);
		if (p->tag)
			json_object_set_new(o, "tag", json_string(p->tag));
		json_array_append_new(list, o);
	}
	pthread_mutex_unlock(&sb->mu);
	*reply = json_pack("{s:o}", "processes", list);
	return 0;
}

/* Send bytes to p's stdin (a PTY helper's as an input message). */
static int input_locked(rt_sandbox *sb, struct rt_proc *p, uint8_t type, const kiln_buf *data, enum rt_code *code,
			kiln_error **err)
{
	if (p->ended || !p->has_stdin) {
		*code = p->ended ? RT_NOT_FOUND : RT_FAILED_PRECONDITION;
		return kiln_err(err, KILN_E_INVALID, p->ended ? "the process has ended" : "the process has no stdin");
	}
	if (p->pty) {
		uint8_t h[5] = { type, (uint8_t)(data->len >> 24), (uint8_t)(data->len >> 16), (uint8_t)(data->len >> 8),
				 (uint8_t)data->len };
		if (guest_proc_write(p->gp, h, sizeof(h), 30000, err) < 0)
			goto fail;
	}
	if (data->len && guest_proc_write(p->gp, data->buf, data->len, 30000, err) < 0)
		goto fail;
	return 0;
fail:
	*code = RT_UNAVAILABLE;
	return -1;
}

int rt_process_send_input(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, json_t **reply,
			  rt_stream *st, enum rt_code *code, kiln_error **err)
{
	const json_t *in = json_object_get(msg, "input");
	kiln_buf data = KILN_BUF_INIT;
	struct rt_proc *p;
	int rc = -1;

	*code = RT_INVALID_ARGUMENT;
	if (!json_is_object(in)) {
		kiln_err(err, KILN_E_INVALID, "input is missing");
		return -1;
	}
	bool is_pty = json_object_get(in, "pty") != NULL;
	if (rt_get_bytes(in, is_pty ? "pty" : "stdin", MAX_INPUT, &data, err) < 0)
		goto out;
	pthread_mutex_lock(&sb->mu);
	if ((p = select_locked(sb, msg, code, err)) != NULL) {
		if (is_pty != p->pty) {
			*code = RT_INVALID_ARGUMENT;
			kiln_err(err, KILN_E_INVALID, is_pty ? "the process has no terminal" : "the process's input is its terminal (input.pty)");
		} else {
			rc = input_locked(sb, p, GUEST_PTY_INPUT, &data, code, err);
		}
	}
	rt_reap_locked(sb);
	pthread_mutex_unlock(&sb->mu);
out:
	kiln_buf_free(&data);
	if (rc == 0)
		*reply = json_object();
	return rc;
}

int rt_process_send_signal(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, json_t **reply,
			   rt_stream *st, enum rt_code *code, kiln_error **err)
{
	const json_t *v = json_object_get(msg, "signal");
	struct rt_proc *p;
	int sig = 0, rc = -1;

	*code = RT_INVALID_ARGUMENT;
	if (json_is_string(v))
		sig = strcmp(json_string_value(v), "SIGNAL_SIGKILL") == 0	  ? SIGKILL
		      : strcmp(json_string_value(v), "SIGNAL_SIGTERM") == 0 ? SIGTERM
									    : 0;
	else if (json_is_integer(v) && (json_integer_value(v) == SIGKILL || json_integer_value(v) == SIGTERM))
		sig = (int)json_integer_value(v);
	if (sig == 0)
		return kiln_err(err, KILN_E_INVALID, "signal is not SIGNAL_SIGKILL or SIGNAL_SIGTERM");
	pthread_mutex_lock(&sb->mu);
	if ((p = select_locked(sb, msg, code, err)) != NULL) {
		if (p->ended) {
			*code = RT_NOT_FOUND;
			kiln_err(err, KILN_E_NOTFOUND, "the process %u has ended", p->pid);
		} else if (guest_proc_kill(p->gp, sig, err) < 0) {
			*code = RT_UNAVAILABLE;
		} else {
			rc = 0;
		}
	}
	pthread_mutex_unlock(&sb->mu);
	if (rc == 0)
		*reply = json_object();
	return rc;
}

int rt_process_close_stdin(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, json_t **reply,
			   rt_stream *st, enum rt_code *code, kiln_error **err)
{
	struct rt_proc *p;
	int rc = -1;

	pthread_mutex_lock(&sb->mu);
	if ((p = select_locked(sb, msg, code, err)) != NULL) {
		if (p->pty) {
			*code = RT_FAILED_PRECONDITION;
			kiln_err(err, KILN_E_INVALID, "a terminal's input cannot be closed (send its end-of-file character)");
		} else if (!p->ended && p->has_stdin && guest_proc_close_stdin(p->gp, err) < 0) {
			*code = RT_UNAVAILABLE;
		} else {
			rc = 0;
		}
	}
	pthread_mutex_unlock(&sb->mu);
	if (rc == 0)
		*reply = json_object();
	return rc;
}

int rt_process_update(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, json_t **reply, rt_stream *st,
		      enum rt_code *code, kiln_error **err)
{
	const json_t *size = json_object_get(json_object_get(msg, "pty"), "size");
	int64_t cols, rows;
	struct rt_proc *p;
	int rc = -1;

	*code = RT_INVALID_ARGUMENT;
	if (!size)
		return *reply = json_object(), 0; /* nothing to update */
	if (rt_get_int(size, "cols", 0, &cols, err) < 0 || rt_get_int(size, "rows", 0, &rows, err) < 0)
		return -1;
	if (cols < 1 || cols > 65535 || rows < 1 || rows > 65535)
		return kiln_err(err, KILN_E_INVALID, "pty.size %lldx%lld is not a terminal size", (long long)cols, (long long)rows);
	uint8_t sz[4] = { (uint8_t)(cols >> 8), (uint8_t)cols, (uint8_t)(rows >> 8), (uint8_t)rows };
	kiln_buf data = KILN_BUF_INIT;
	kiln_buf_add(&data, sz, sizeof(sz));
	pthread_mutex_lock(&sb->mu);
	if ((p = select_locked(sb, msg, code, err)) != NULL) {
		if (!p->pty) {
			*code = RT_INVALID_ARGUMENT;
			kiln_err(err, KILN_E_INVALID, "the process has no terminal");
		} else {
			rc = input_locked(sb, p, GUEST_PTY_RESIZE, &data, code, err);
		}
	}
	pthread_mutex_unlock(&sb->mu);
	kiln_buf_free(&data);
	if (rc == 0)
		*reply = json_object();
	return rc;
}

/* qmp.c — a small QMP client: one unix socket, newline-delimited JSON (jansson).
 * Commands carry an "id" so a reply is matched to its request; events read
 * while waiting are queued.  Every wait is bounded by a deadline. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "vm/vm.h"

#define QMP_MAX_LINE (16u << 20) /* a longer line is a broken peer */

struct vm_qmp {
	int fd;
	char *path;
	kiln_buf in;          /* bytes read, not yet consumed */
	json_t *events;       /* array of queued events */
	json_t *greeting;
	json_int_t next_id;
};

static int remaining(int64_t deadline)
{
	int64_t r = deadline - (int64_t)kiln_now_ms();
	return r < 0 ? 0 : (int)r;
}

/* Read one JSON object (one line) before the deadline; NULL on error/timeout. */
static json_t *read_msg(vm_qmp *q, int64_t deadline, kiln_error **err)
{
	for (;;) {
		char *nl = memchr(q->in.buf, '\n', q->in.len);
		if (nl) {
			size_t n = (size_t)(nl - q->in.buf) + 1;
			json_t *v = kiln_json_loadb(q->in.buf, n, "QMP message", err);
			memmove(q->in.buf, q->in.buf + n, q->in.len - n);
			q->in.len -= n;
			q->in.buf[q->in.len] = '\0';
			if (v == NULL)
				return NULL;
			if (!json_is_object(v)) {
				json_decref(v);
				kiln_err(err, KILN_E_INVALID, "QMP %s: message is not a JSON object", q->path);
				return NULL;
			}
			return v;
		}
		if (q->in.len > QMP_MAX_LINE) {
			kiln_err(err, KILN_E_LIMIT, "QMP %s: message longer than %u bytes", q->path, QMP_MAX_LINE);
			return NULL;
		}
		struct pollfd p = { .fd = q->fd, .events = POLLIN };
		int r = poll(&p, 1, remaining(deadline));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			kiln_err_errno(err, errno, "QMP %s: poll", q->path);
			return NULL;
		}
		if (r == 0) {
			kiln_err(err, KILN_E_GENERIC, "QMP %s: no answer from QEMU in time", q->path);
			return NULL;
		}
		kiln_buf_grow(&q->in, 65536);
		ssize_t got = read(q->fd, q->in.buf + q->in.len, 65536);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got < 0) {
			kiln_err_errno(err, errno, "QMP %s: read", q->path);
			return NULL;
		}
		if (got == 0) {
			kiln_err(err, KILN_E_IO, "QMP %s: QEMU closed the connection", q->path);
			return NULL;
		}
		q->in.len += (size_t)got;
		q->in.buf[q->in.len] = '\0';
	}
}

/* fd >= 0 rides along with the first bytes (SCM_RIGHTS), as QMP's getfd wants. */
static int write_all(vm_qmp *q, const char *s, size_t len, int fd, int64_t deadline, kiln_error **err)
{
	while (len > 0) {
		ssize_t n;
		if (fd >= 0) {
			char cbuf[CMSG_SPACE(sizeof(int))];
			struct iovec iov = { .iov_base = (void *)s, .iov_len = len };
			struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
					     .msg_controllen = sizeof(cbuf) };
			struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
			memset(cbuf, 0, sizeof(cbuf));
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(cm), &fd, sizeof(int));
			n = sendmsg(q->fd, &mh, MSG_NOSIGNAL);
			if (n > 0)
				fd = -1;
		} else {
			n = send(q->fd, s, len, MSG_NOSIGNAL);
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			struct pollfd p = { .fd = q->fd, .events = POLLOUT };
			if (poll(&p, 1, remaining(deadline)) == 0)
				return kiln_err(err, KILN_E_GENERIC, "QMP %s: QEMU does not read", q->path);
			continue;
		}
		if (n < 0)
			return kiln_err_errno(err, errno, "QMP %s: write", q->path);
		s += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Send a command (with fd, if >= 0); returns its id, or -1. */
static json_int_t send_cmd_fd(vm_qmp *q, const char *command, json_t *args, int fd, int64_t deadline,
			      kiln_error **err)
{
	json_t *req = json_object();
	json_int_t id = ++q->next_id;
	char *text;
	int rc;

	json_object_set_new(req, "execute", json_string(command));
	if (args)
		json_object_set(req, "arguments", args);
	json_object_set_new(req, "id", json_integer(id));
	text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	kiln_buf line = KILN_BUF_INIT;
	kiln_buf_adds(&line, text);
	kiln_buf_addc(&line, '\n');
	free(text);
	rc = write_all(q, line.buf, line.len, fd, deadline, err);
	kiln_buf_free(&line);
	return rc < 0 ? -1 : id;
}

static json_int_t send_cmd(vm_qmp *q, const char *command, json_t *args, int64_t deadline, kiln_error **err)
{
	return send_cmd_fd(q, command, args, -1, deadline, err);
}

/* Wait for the reply to command id; events go to the queue. */
static json_t *wait_reply(vm_qmp *q, const char *command, json_int_t id, int64_t deadline, kiln_error **err)
{
	json_t *ret = NULL;

	for (;;) {
		json_t *m = read_msg(q, deadline, err), *mid;
		if (m == NULL)
			return NULL;
		if (json_object_get(m, "event")) {
			json_array_append_new(q->events, m);
			continue;
		}
		mid = json_object_get(m, "id");
		if (!json_is_integer(mid) || json_integer_value(mid) != id) {
			json_decref(m); /* a late reply to a command that timed out */
			continue;
		}
		if ((ret = json_object_get(m, "return")) != NULL) {
			json_incref(ret);
		} else {
			json_t *e = json_object_get(m, "error");
			const char *cls = kiln_json_str(e, "class"), *desc = kiln_json_str(e, "desc");
			kiln_err(err, KILN_E_GENERIC, "QMP %s: %s", command, desc ? desc : "malformed error reply");
			if (cls && strcmp(cls, "CommandNotFound") == 0)
				(*err)->kind = KILN_E_NOTFOUND;
		}
		json_decref(m);
		return ret;
	}
}

static json_t *transact(vm_qmp *q, const char *command, json_t *args, int64_t deadline, kiln_error **err)
{
	json_int_t id = send_cmd(q, command, args, deadline, err);

	return id < 0 ? NULL : wait_reply(q, command, id, deadline, err);
}

/* Until something is created in the socket's directory (watch: an
 * inotify fd on it, or -1) or ms pass: a restore waits for QEMU's socket,
 * and a fixed sleep would add half its period to every start. */
static void wait_created(int watch, int ms)
{
	struct pollfd p = { watch, POLLIN, 0 };
	char ev[sizeof(struct inotify_event) + 256];

	if (watch < 0 || poll(&p, 1, ms) <= 0) {
		if (watch < 0)
			kiln_sleep_ms(ms);
		return;
	}
	while (read(watch, ev, sizeof(ev)) > 0)
		;
}

/* Connect, retrying until QEMU has created the socket and accepts. */
static vm_qmp *open_socket(const char *socket_path, int64_t deadline, kiln_error **err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	vm_qmp *q = NULL;
	int fd = -1, watch = -1;
	char *dir = NULL;

	if (strlen(socket_path) >= sizeof(sa.sun_path)) {
		kiln_err(err, KILN_E_INVALID, "QMP socket path too long: %s", socket_path);
		return NULL;
	}
	strcpy(sa.sun_path, socket_path);
	/* QEMU creates the socket shortly after it starts: retry until then,
	 * woken by its creation (bound, then listening: a refused connect
	 * waits 1 ms; without inotify, 5 ms polls as before) */
	dir = kiln_xstrdup(socket_path);
	if (strrchr(dir, '/'))
		*strrchr(dir, '/') = '\0';
	if ((watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) >= 0 &&
	    inotify_add_watch(watch, strchr(socket_path, '/') ? dir : ".", IN_CREATE) < 0) {
		close(watch);
		watch = -1;
	}
	for (;;) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			kiln_err_errno(err, errno, "QMP socket");
			goto out;
		}
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			break;
		int e = errno;
		close(fd);
		fd = -1;
		if ((e != ENOENT && e != ECONNREFUSED) || (int64_t)kiln_now_ms() >= deadline) {
			kiln_err_errno(err, e, "QMP connect %s", socket_path);
			goto out;
		}
		if (e == ECONNREFUSED)
			kiln_sleep_ms(1);
		else
			wait_created(watch, 5);
	}
	q = kiln_xcalloc(1, sizeof(*q));
	q->fd = fd;
	q->path = kiln_xstrdup(socket_path);
	q->in = (kiln_buf)KILN_BUF_INIT;
	q->events = json_array();
out:
	if (watch >= 0)
		close(watch);
	free(dir);
	return q;
}

static int read_greeting(vm_qmp *q, int64_t deadline, kiln_error **err)
{
	json_t *m = read_msg(q, deadline, err);

	if (m == NULL)
		return -1;
	if (!json_is_object(json_object_get(m, "QMP"))) {
		json_decref(m);
		return kiln_err(err, KILN_E_INVALID, "QMP %s: the greeting has no \"QMP\" object", q->path);
	}
	q->greeting = m;
	return 0;
}

vm_qmp *vm_qmp_connect(const char *socket_path, int timeout_ms, kiln_error **err)
{
	int64_t deadline = (int64_t)kiln_now_ms() + timeout_ms;
	vm_qmp *q = open_socket(socket_path, deadline, err);
	json_t *ret = NULL;

	if (q == NULL)
		return NULL;
	if (read_greeting(q, deadline, err) < 0 || (ret = transact(q, "qmp_capabilities", NULL, deadline, err)) == NULL) {
		vm_qmp_close(q);
		return NULL;
	}
	json_decref(ret);
	return q;
}

int vm_socket_peer_check(int fd, uid_t uid, const char *what, kiln_error **err)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (uid == 0)
		return 0;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return kiln_err_errno(err, errno, "%s: SO_PEERCRED", what);
	if (cr.uid != uid)
		return kiln_err(err, KILN_E_GENERIC,
				"%s answers as uid %u, not as the VM's uid %u (a socket replaced by its QEMU?): refused",
				what, (unsigned)cr.uid, (unsigned)uid);
	return 0;
}

int vm_qmp_peer_check(const vm_qmp *q, uid_t uid, kiln_error **err)
{
	return vm_socket_peer_check(q->fd, uid, q->path, err);
}

json_t *vm_qmp_run_once(const char *socket_path, const char *command, uid_t peer_uid, int timeout_ms,
			kiln_error **err)
{
	int64_t deadline = (int64_t)kiln_now_ms() + timeout_ms;
	vm_qmp *q = open_socket(socket_path, deadline, err);
	json_int_t caps, id;
	json_t *ret = NULL, *r;

	if (q == NULL)
		return NULL;
	if (vm_qmp_peer_check(q, peer_uid, err) < 0)
		goto out;
	/* QEMU reads commands in order once it has sent its greeting: both go
	 * in one write, and the three answers come back in one go. */
	if ((caps = send_cmd(q, "qmp_capabilities", NULL, deadline, err)) < 0 ||
	    (id = send_cmd(q, command, NULL, deadline, err)) < 0 || read_greeting(q, deadline, err) < 0 ||
	    (r = wait_reply(q, "qmp_capabilities", caps, deadline, err)) == NULL)
		goto out;
	json_decref(r);
	ret = wait_reply(q, command, id, deadline, err);
out:
	vm_qmp_close(q);
	return ret;
}

json_t *vm_qmp_execute(vm_qmp *q, const char *command, json_t *args, int timeout_ms, kiln_error **err)
{
	return transact(q, command, args, (int64_t)kiln_now_ms() + timeout_ms, err);
}

json_t *vm_qmp_execute_fd(vm_qmp *q, const char *command, json_t *args, int fd, int timeout_ms, kiln_error **err)
{
	int64_t deadline = (int64_t)kiln_now_ms() + timeout_ms;
	json_int_t id = send_cmd_fd(q, command, args, fd, deadline, err);

	return id < 0 ? NULL : wait_reply(q, command, id, deadline, err);
}

json_t *vm_qmp_wait_event(vm_qmp *q, const char *name, int timeout_ms, kiln_error **err)
{
	int64_t deadline = (int64_t)kiln_now_ms() + timeout_ms;

	for (;;) {
		for (size_t i = 0; i < json_array_size(q->events); i++) {
			json_t *ev = json_array_get(q->events, i);
			const char *evname = kiln_json_str(ev, "event");
			if (name == NULL || (evname && strcmp(evname, name) == 0)) {
				json_incref(ev);
				json_array_remove(q->events, i);
				return ev;
			}
		}
		json_t *m = read_msg(q, deadline, err);
		if (m == NULL) {
			if (name)
				kiln_error_wrap(err, "waiting for QMP event %s", name);
			return NULL;
		}
		if (json_object_get(m, "event"))
			json_array_append_new(q->events, m);
		else
			json_decref(m); /* a stray reply */
	}
}

const json_t *vm_qmp_version(const vm_qmp *q)
{
	return json_object_get(json_object_get(q->greeting, "QMP"), "version");
}

void vm_qmp_close(vm_qmp *q)
{
	if (q == NULL)
		return;
	if (q->fd >= 0)
		close(q->fd);
	kiln_buf_free(&q->in);
	json_decref(q->events);
	json_decref(q->greeting);
	free(q->path);
	free(q);
}

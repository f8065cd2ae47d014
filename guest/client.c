/* client.c — the host end of the agent connection: connect to the unix socket
 * behind the guest's port, the version handshake, the frame pump that routes
 * the agent's frames to the requests waiting for them, ping and stat.  Any
 * protocol breach by the agent makes the connection unusable with a clear error. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "guest/internal.h"

uint64_t gc_deadline(int timeout_ms)
{
	return timeout_ms < 0 ? UINT64_MAX : (uint64_t)kiln_now_ms() + (uint64_t)timeout_ms;
}

int gc_remaining(uint64_t deadline)
{
	uint64_t now = (uint64_t)kiln_now_ms();

	if (deadline == UINT64_MAX)
		return -1;
	return deadline <= now ? 0 : deadline - now > INT32_MAX ? INT32_MAX : (int)(deadline - now);
}

static int poll_ms(uint64_t deadline)
{
	uint64_t now = (uint64_t)kiln_now_ms();

	if (deadline == UINT64_MAX)
		return -1;
	if (deadline <= now)
		return 0;
	return deadline - now > 60000 ? 60000 : (int)(deadline - now);
}

static void set_broken(guest_conn *c, enum kiln_errkind kind, const char *fmt, ...) KILN_PRINTF(3, 4);
static void set_broken(guest_conn *c, enum kiln_errkind kind, const char *fmt, ...)
{
	kiln_buf b = KILN_BUF_INIT;
	va_list ap;

	if (c->broken)
		return;
	va_start(ap, fmt);
	kiln_buf_vaddf(&b, fmt, ap);
	va_end(ap);
	c->broken = kiln_buf_detach(&b);
	c->broken_kind = kind;
}

int gc_check(guest_conn *c, kiln_error **err)
{
	if (c->broken)
		return kiln_err(err, c->broken_kind, "agent connection: %s", c->broken);
	return 0;
}

int gc_flush(guest_conn *c, uint64_t deadline, kiln_error **err)
{
	size_t off = 0;
	int rc = -1;

	if (c->out.failed) {
		/* Only an oversized request (a huge argv or env) can get here. */
		c->out.failed = false;
		c->out.len = 0;
		return kiln_err(err, KILN_E_LIMIT, "request larger than the %u byte frame limit", GUEST_MAX_PAYLOAD);
	}
	if (gc_check(c, err) < 0)
		goto out;
	while (off < c->out.len) {
		ssize_t n = write(c->fd, c->out.data + off, c->out.len - off);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
			/* the same news as EOF on a read: the agent went away (what it sent first is lost) */
			set_broken(c, KILN_E_IO, "the agent closed the connection");
			gc_check(c, err);
			goto out;
		}
		if (n < 0 && errno != EAGAIN) {
			set_broken(c, KILN_E_IO, "write to the agent: %s", strerror(errno));
			gc_check(c, err);
			goto out;
		}
		struct pollfd p = { c->fd, POLLOUT, 0 };
		int r = poll(&p, 1, poll_ms(deadline));
		if (r == 0 && (uint64_t)kiln_now_ms() >= deadline) {
			kiln_err(err, KILN_E_IO, "the agent does not read its input");
			goto out;
		}
	}
	rc = 0;
out:
	/* A partly written frame cannot be taken back: the stream is unusable then. */
	if (rc < 0 && off > 0 && off < c->out.len)
		set_broken(c, KILN_E_IO, "a frame to the agent was cut short");
	c->out.len = 0;
	return rc;
}

static struct guest_proc *find_req(guest_conn *c, uint32_t id)
{
	for (struct guest_proc *p = c->reqs; p; p = p->next)
		if (p->id == id)
			return p;
	return NULL;
}

static void keep_reply(struct guest_proc *p, const struct guest_frame *f)
{
	free(p->reply);
	p->reply = kiln_xmalloc(f->len ? f->len : 1);
	memcpy(p->reply, f->payload, f->len);
	p->reply_len = f->len;
	p->done = true;
}

static void dispatch(guest_conn *c, const struct guest_frame *f)
{
	struct guest_proc *p = f->id ? find_req(c, f->id) : NULL;
	const char *why = NULL;
	char tn[8];

	/* Whatever precedes the agent's HELLO belongs to an earlier session. */
	if (!c->have_hello && f->type != GUEST_F_HELLO)
		return;
	switch (f->type) {
	case GUEST_F_HELLO:
		if (c->have_hello)
			return; /* the answer to our HELLO, or a reconnect announcement */
		if (guest_decode_hello(f->payload, f->len, &c->hello, &why) < 0) {
			set_broken(c, KILN_E_INVALID, "bad HELLO from the agent: %s", why);
			return;
		}
		c->have_hello = true;
		if (c->late_hello && c->hello.version != GUEST_PROTO_VERSION)
			set_broken(c, KILN_E_INVALID,
				   "the agent (%s) speaks protocol version %u, this kiln speaks %u: rebuild the guest "
				   "image with a matching kiln-agent",
				   c->hello.agent ? c->hello.agent : "unknown", c->hello.version, GUEST_PROTO_VERSION);
		return;
	case GUEST_F_ERROR: {
		struct guest_error_msg m;
		if (guest_decode_error(f->payload, f->len, &m, &why) < 0) {
			set_broken(c, KILN_E_INVALID, "bad ERROR frame from the agent: %s", why);
			return;
		}
		if (f->id == 0) {
			set_broken(c, KILN_E_IO, "the agent reported: %s", m.msg);
		} else if (p && p->unwaited) {
			set_broken(c, KILN_E_GENERIC, "setting the guest's identity: %s", m.msg);
			gc_req_free(p);
		} else if (p) {
			free(p->errmsg);
			p->errmsg = m.msg;
			m.msg = NULL;
			p->errnum = m.errnum;
			p->failed = p->done = true;
		}
		guest_error_msg_free(&m);
		return;
	}
	case GUEST_F_PONG:
	case GUEST_F_STAT_REPLY:
		if (p && p->kind == (f->type == GUEST_F_PONG ? R_PING : R_STAT))
			keep_reply(p, f);
		return;
	case GUEST_F_STARTED:
	case GUEST_F_WINDOW:
		if (f->len != 4) {
			set_broken(c, KILN_E_INVALID, "bad %s frame from the agent", guest_frame_name(f->type, tn));
			return;
		}
		if (p == NULL)
			return;
		if (f->type == GUEST_F_STARTED) {
			p->started = true;
			p->pid = (pid_t)guest_get_u32(f->payload);
		} else {
			p->window += guest_get_u32(f->payload);
			if (p->window > GUEST_STDIN_WINDOW)
				set_broken(c, KILN_E_INVALID, "the agent acknowledged more stdin than was sent");
		}
		return;
	case GUEST_F_STDOUT:
	case GUEST_F_STDERR:
		if (p == NULL)
			return; /* output of a process the caller let go of */
		if (f->type == GUEST_F_STDOUT && p->on_stdout)
			p->on_stdout(p->user, f->payload, f->len);
		if (f->type == GUEST_F_STDERR && p->on_stderr)
			p->on_stderr(p->user, f->payload, f->len);
		return;
	case GUEST_F_EXIT: {
		struct guest_exit ex;
		if (guest_decode_exit(f->payload, f->len, &ex, &why) < 0) {
			set_broken(c, KILN_E_INVALID, "bad EXIT frame from the agent: %s", why);
			return;
		}
		if (p && p->unwaited) {
			gc_req_free(p);
		} else if (p) {
			p->res.exit_code = ex.code;
			p->res.signal = ex.signal;
			p->res.timed_out = ex.timed_out;
			p->done = true;
		}
		return;
	}
	}
	set_broken(c, KILN_E_INVALID, "unexpected frame type %s from the agent", guest_frame_name(f->type, tn));
}

int gc_pump(guest_conn *c, uint64_t deadline, kiln_error **err)
{
	struct pollfd pfd = { c->fd, POLLIN, 0 };
	struct guest_frame f;
	const char *why = NULL;
	size_t room;
	uint8_t *space;
	ssize_t n;
	int r;

	if (gc_check(c, err) < 0)
		return -1;
	if (c->late_hello && !c->have_hello && c->hello_deadline < deadline)
		deadline = c->hello_deadline;
	r = poll(&pfd, 1, poll_ms(deadline));
	if (r < 0 && errno != EINTR)
		return kiln_err_errno(err, errno, "agent connection: poll");
	if (r <= 0) {
		if (c->late_hello && !c->have_hello && (uint64_t)kiln_now_ms() >= c->hello_deadline) {
			set_broken(c, KILN_E_IO, "no HELLO from the agent in time (is the guest running?)");
			return gc_check(c, err);
		}
		return 0;
	}
	space = guest_framer_space(&c->in, &room);
	if (space == NULL)
		return kiln_err(err, KILN_E_IO, "agent connection: out of buffer space");
	n = read(c->fd, space, room);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n < 0 && errno != ECONNRESET)
		set_broken(c, KILN_E_IO, "read from the agent: %s", strerror(errno));
	else if (n <= 0)
		set_broken(c, KILN_E_IO, "the agent closed the connection");
	else
		guest_framer_commit(&c->in, (size_t)n);
	while (!c->broken && (r = guest_framer_next(&c->in, &f, &why)) > 0)
		dispatch(c, &f);
	if (!c->broken && r < 0)
		set_broken(c, KILN_E_INVALID, "agent protocol: %s", why);
	if (c->late_hello && !c->have_hello && (uint64_t)kiln_now_ms() >= c->hello_deadline)
		set_broken(c, KILN_E_IO, "no HELLO from the agent in time (is the guest running?)");
	return gc_check(c, err);
}

int guest_flush(guest_conn *c, int timeout_ms, kiln_error **err)
{
	return gc_flush(c, gc_deadline(timeout_ms), err);
}

int guest_pump(guest_conn *c, int timeout_ms, kiln_error **err)
{
	return gc_pump(c, gc_deadline(timeout_ms), err) < 0 ? -1 : 0;
}

int gc_wait_for(guest_conn *c, const bool *flag, uint64_t deadline, const char *what, kiln_error **err)
{
	uint64_t start = (uint64_t)kiln_now_ms();

	while (!*flag) {
		if (gc_pump(c, deadline, err) < 0)
			return -1;
		if (!*flag && (uint64_t)kiln_now_ms() >= deadline)
			return kiln_err(err, KILN_E_IO, "no %s from the agent after %llu ms", what,
					(unsigned long long)((uint64_t)kiln_now_ms() - start));
	}
	return 0;
}

/* Best effort: the id is forgotten on our side, so its process must not live on. */
void gc_send_kill(guest_conn *c, uint32_t id, int sig)
{
	uint8_t b[4];
	kiln_error *e = NULL;

	if (c->broken)
		return;
	guest_put_u32(b, (uint32_t)sig);
	guest_frame_raw(&c->out, GUEST_F_KILL, id, b, 4);
	if (gc_flush(c, gc_deadline(1000), &e) < 0)
		kiln_error_free(e);
}

int gc_wait_started(struct guest_proc *p, uint64_t deadline, const char *what, kiln_error **err)
{
	uint64_t start = (uint64_t)kiln_now_ms();

	while (!p->started && !p->done) {
		if (gc_pump(p->c, deadline, err) < 0)
			return -1;
		if (!p->started && !p->done && (uint64_t)kiln_now_ms() >= deadline) {
			kiln_err(err, KILN_E_IO, "the agent did not start %s within %llu ms", what,
				 (unsigned long long)((uint64_t)kiln_now_ms() - start));
			gc_send_kill(p->c, p->id, SIGKILL);
			return -1;
		}
	}
	return 0;
}

struct guest_proc *gc_req_new(guest_conn *c, enum req_kind kind)
{
	struct guest_proc *p = kiln_xcalloc(1, sizeof(*p));

	do {
		if (++c->next_id == 0)
			c->next_id = 1;
	} while (find_req(c, c->next_id));
	p->c = c;
	p->kind = kind;
	p->id = c->next_id;
	p->next = c->reqs;
	c->reqs = p;
	return p;
}

void gc_req_free(struct guest_proc *p)
{
	if (p == NULL)
		return;
	for (struct guest_proc **pp = &p->c->reqs; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	}
	free(p->errmsg);
	free(p->reply);
	free(p);
}

int gc_req_error(struct guest_proc *p, kiln_error **err)
{
	enum kiln_errkind kind = p->errnum == ENOENT ? KILN_E_NOTFOUND : p->errnum == EEXIST ? KILN_E_EXISTS
				 : p->errnum ? KILN_E_IO : KILN_E_GENERIC;

	kiln_err(err, kind, "%s", p->errmsg ? p->errmsg : "failed");
	if (err && *err)
		(*err)->errnum = p->errnum;
	return -1;
}

/* ---- connecting ----------------------------------------------------------- */

guest_conn *guest_conn_from_fd(int fd, int timeout_ms, kiln_error **err)
{
	guest_conn *c = kiln_xcalloc(1, sizeof(*c));
	uint64_t deadline = gc_deadline(timeout_ms);
	struct guest_hello mine = { .version = GUEST_PROTO_VERSION, .agent = "kiln " KILN_VERSION, .pid = getpid() };

	c->fd = fd;
	c->hold_fd = -1;
	guest_framer_init(&c->in);
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	/* Ours makes the agent announce itself again should its first HELLO predate us. */
	guest_encode_hello(&c->out, 0, &mine);
	if (gc_flush(c, deadline, err) < 0 || gc_wait_for(c, &c->have_hello, deadline, "HELLO", err) < 0)
		goto fail;
	if (c->hello.version != GUEST_PROTO_VERSION) {
		kiln_err(err, KILN_E_INVALID,
			 "the agent (%s) speaks protocol version %u, this kiln speaks %u: rebuild the guest image "
			 "with a matching kiln-agent",
			 c->hello.agent ? c->hello.agent : "unknown", c->hello.version, GUEST_PROTO_VERSION);
		goto fail;
	}
	kiln_debug("agent: %s, protocol %u, caps 0x%llx", c->hello.agent ? c->hello.agent : "?", c->hello.version,
		   (unsigned long long)c->hello.caps);
	return c;
fail:
	kiln_error_wrap(err, "agent handshake");
	guest_close(c);
	return NULL;
}

/* Connect to the socket, retrying while it does not exist or refuses; the fd or -1. */
static int connect_socket(const char *socket_path, uint64_t deadline, kiln_error **err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = -1, last = 0;

	if (strlen(socket_path) >= sizeof(sa.sun_path)) {
		kiln_err(err, KILN_E_INVALID, "agent connect: socket path too long: %s", socket_path);
		return -1;
	}
	strcpy(sa.sun_path, socket_path);
	/* QEMU (or a test agent) may not have created the socket yet.  Non-blocking,
	 * because a blocking connect waits without end while the listen backlog is
	 * full (QEMU accepts one client at a time). */
	for (;;) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0) {
			kiln_err_errno(err, errno, "agent connect: socket");
			return -1;
		}
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
		last = errno;
		close(fd);
		if ((last != ENOENT && last != ECONNREFUSED && last != EAGAIN) || (uint64_t)kiln_now_ms() >= deadline) {
			if (last == EAGAIN)
				kiln_err(err, KILN_E_IO, "agent connect: %s: busy, its backlog is full (another client "
					 "holds the agent?)", socket_path);
			else
				kiln_err_errno(err, last, "agent connect: %s", socket_path);
			return -1;
		}
		kiln_sleep_ms(20);
	}
}

guest_conn *guest_connect(const char *socket_path, int timeout_ms, kiln_error **err)
{
	uint64_t deadline = gc_deadline(timeout_ms);
	int fd = connect_socket(socket_path, deadline, err);
	guest_conn *c;

	if (fd < 0)
		return NULL;
	c = guest_conn_from_fd(fd, poll_ms(deadline), err);
	if (c == NULL) {
		/* Accepted into the backlog, never served: QEMU has another client. */
		if (err && *err && strstr(kiln_error_message(*err), "no HELLO"))
			kiln_error_wrap(err, "agent connect: %s (QEMU serves one client at a time: is another connected?)",
					socket_path);
		else
			kiln_error_wrap(err, "agent connect: %s", socket_path);
	}
	return c;
}

guest_conn *guest_connect_nowait(const char *socket_path, int timeout_ms, kiln_error **err)
{
	uint64_t deadline = gc_deadline(timeout_ms);
	int fd = connect_socket(socket_path, deadline, err);
	struct guest_hello mine = { .version = GUEST_PROTO_VERSION, .agent = "kiln " KILN_VERSION, .pid = getpid() };
	guest_conn *c;

	if (fd < 0)
		return NULL;
	c = kiln_xcalloc(1, sizeof(*c));
	c->fd = fd;
	c->hold_fd = -1;
	c->late_hello = true;
	c->hello_deadline = deadline == UINT64_MAX ? UINT64_MAX : deadline;
	guest_framer_init(&c->in);
	guest_encode_hello(&c->out, 0, &mine);
	if (gc_flush(c, deadline, err) < 0) {
		kiln_error_wrap(err, "agent connect: %s", socket_path);
		guest_close(c);
		return NULL;
	}
	return c;
}

void guest_close(guest_conn *c)
{
	if (c == NULL)
		return;
	while (c->reqs)
		gc_req_free(c->reqs);
	if (c->fd >= 0)
		close(c->fd);
	if (c->hold_fd >= 0)
		close(c->hold_fd);
	guest_framer_free(&c->in);
	guest_wbuf_free(&c->out);
	guest_hello_free(&c->hello);
	free(c->broken);
	free(c);
}

int guest_conn_fd(const guest_conn *c)
{
	return c->fd;
}

void guest_conn_hold_fd(guest_conn *c, int fd)
{
	if (c->hold_fd >= 0)
		close(c->hold_fd);
	c->hold_fd = fd;
}

uint32_t guest_conn_version(const guest_conn *c)
{
	return c->hello.version;
}

uint64_t guest_conn_caps(const guest_conn *c)
{
	return c->hello.caps;
}

const char *guest_conn_agent(const guest_conn *c)
{
	return c->hello.agent ? c->hello.agent : "";
}

/* ---- ping and stat -------------------------------------------------------- */

int guest_ping(guest_conn *c, int timeout_ms, kiln_error **err)
{
	uint64_t deadline = gc_deadline(timeout_ms);
	struct guest_proc *p = gc_req_new(c, R_PING);
	uint8_t token[8];
	int rc = -1;

	guest_put_u32(token, p->id);
	guest_put_u32(token + 4, (uint32_t)(uint64_t)kiln_now_ms());
	guest_frame_raw(&c->out, GUEST_F_PING, p->id, token, sizeof(token));
	if (gc_flush(c, deadline, err) < 0 || gc_wait_for(c, &p->done, deadline, "PONG", err) < 0)
		goto out;
	if (p->failed) {
		gc_req_error(p, err);
		goto out;
	}
	if (p->reply_len != sizeof(token) || memcmp(p->reply, token, sizeof(token)) != 0) {
		kiln_err(err, KILN_E_INVALID, "PONG does not echo the PING");
		goto out;
	}
	rc = 0;
out:
	gc_req_free(p);
	if (rc < 0)
		kiln_error_wrap(err, "agent ping");
	return rc;
}

int guest_stat_path(guest_conn *c, const char *path, unsigned flags, struct guest_stat *st, int timeout_ms,
		    kiln_error **err)
{
	uint64_t deadline = gc_deadline(timeout_ms);
	struct guest_stat_req req = {
		.path = (char *)path,
		.follow = flags & GUEST_STAT_FOLLOW,
		.xattrs = flags & GUEST_STAT_XATTRS,
	};
	struct guest_proc *p = gc_req_new(c, R_STAT);
	const char *why = NULL;
	int rc = -1;

	memset(st, 0, sizeof(*st));
	guest_encode_stat_req(&c->out, p->id, &req);
	if (gc_flush(c, deadline, err) < 0 || gc_wait_for(c, &p->done, deadline, "stat reply", err) < 0)
		goto out;
	if (p->failed) {
		gc_req_error(p, err);
		gc_req_free(p);
		return kiln_error_wrap(err, "agent");
	}
	if (guest_decode_stat(p->reply, p->reply_len, st, &why) < 0) {
		kiln_err(err, KILN_E_INVALID, "bad stat reply: %s", why);
		goto out;
	}
	rc = 0;
out:
	gc_req_free(p);
	if (rc < 0)
		kiln_error_wrap(err, "agent stat %s", path);
	return rc;
}

int guest_set_identity(guest_conn *c, const struct guest_identity *m, bool wait, int timeout_ms, kiln_error **err)
{
	uint64_t deadline = gc_deadline(timeout_ms);
	struct guest_proc *p;
	int rc = -1;

	if (gc_check(c, err) < 0)
		return kiln_error_wrap(err, "agent identity");
	p = gc_req_new(c, R_IDENT);
	guest_encode_identity(&c->out, p->id, m);
	if (!wait) {
		p->unwaited = true;
		return 0;
	}
	if (gc_flush(c, deadline, err) < 0 || gc_wait_for(c, &p->done, deadline, "identity reply", err) < 0)
		goto out;
	if (p->failed) {
		gc_req_error(p, err);
		goto out;
	}
	if (p->res.exit_code != 0) {
		kiln_err(err, KILN_E_INVALID, "unexpected identity reply (code %d)", p->res.exit_code);
		goto out;
	}
	rc = 0;
out:
	gc_req_free(p);
	if (rc < 0)
		kiln_error_wrap(err, "agent identity");
	return rc;
}

const struct guest_xattr *guest_stat_xattr(const struct guest_stat *st, const char *name)
{
	for (size_t i = 0; i < st->nxattrs; i++)
		if (strcmp(st->xattrs[i].name, name) == 0)
			return &st->xattrs[i];
	return NULL;
}

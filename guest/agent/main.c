/* main.c — kiln-agent, the static program the guest's init starts: it opens
 * the virtio-serial port org.kiln.agent (or an fd / unix socket for tests),
 * announces itself with HELLO and serves requests in one poll loop until the
 * host goes away.  A bad frame gets an ERROR frame, never a crash. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "guest/agent/agent.h"

static const char usage[] =
	"Usage: kiln-agent [--name PORT | --port DEV | --fd N | --listen SOCKET [--once]] [--tar PROGRAM] [-v]\n"
	"Serve the kiln host over the virtio-serial port " GUEST_PORT_NAME " (default)\n"
	"or the port named PORT, a port device DEV, an inherited stream fd N, or\n"
	"connections to a unix socket SOCKET, one after another (--once: only the\n"
	"first), as QEMU's chardev would.  One agent serves one port: a VM with\n"
	"several ports (several host clients at once) runs one agent per port.\n"
	"--tar names the tar (or busybox) used for uploads, and then for downloads too\n"
	"(else the agent writes downloads itself: kiln-agent --tar-create DIR [NAME]).\n"
	"kiln-agent --relay PATH MODE UID GID: listen on the unix socket PATH and carry\n"
	"its connections over stdin/stdout (a build step's ssh-agent socket).\n"
	"kiln-agent --fs OP /PATH [ARG]: stat, list DEPTH, mkdir, move DEST, remove, read, write,\n"
	"  watch RECURSIVE: the filesystem calls of envd, run through EXEC as a user.\n"
	"kiln-agent --pty COLS ROWS PROGRAM ARGS...: PROGRAM on a terminal of its own.\n"
	"kiln-agent --xattrs-dump DIR | --xattrs-apply DIR: a tree's extended attributes as\n"
	"hex lines \"PATH NAME VALUE\" on stdout, or set from stdin (the host runs these).\n";

uint64_t agent_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void agent_log(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	/* One write per line so it does not interleave with a child's output on the console. */
	dprintf(2, "kiln-agent: %.*s", n, line);
}

void agent_send_error(struct agent *a, uint32_t id, int errnum, const char *fmt, ...)
{
	struct guest_error_msg m = { .errnum = errnum };
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	m.msg = msg;
	if (a->verbose)
		agent_log("error for id %u: %s", id, msg);
	guest_encode_error(&a->out, id, &m);
}

size_t agent_out_pending(const struct agent *a)
{
	return a->out.len - a->out_off;
}

static void send_hello(struct agent *a)
{
	struct guest_hello h = {
		.version = GUEST_PROTO_VERSION,
		.caps = a->caps,
		.agent = AGENT_VERSION,
		.pid = getpid(),
	};
	guest_encode_hello(&a->out, 0, &h);
}

/* ---- the channel ---------------------------------------------------------- */

/* The port of a given name, found through sysfs because the guest has no udev
 * to make /dev/virtio-ports/NAME. */
static char *find_port(const char *want)
{
	DIR *d;
	struct dirent *e;
	char path[512], name[128], *found = NULL;

	snprintf(path, sizeof(path), "/dev/virtio-ports/%s", want);
	if (access(path, F_OK) == 0)
		return strdup(path);
	d = opendir("/sys/class/virtio-ports");
	if (d == NULL)
		return NULL;
	while (found == NULL && (e = readdir(d)) != NULL) {
		FILE *f;
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/name", e->d_name);
		f = fopen(path, "re");
		if (f == NULL)
			continue;
		if (fgets(name, sizeof(name), f) != NULL) {
			name[strcspn(name, "\n")] = '\0';
			if (strcmp(name, want) == 0) {
				snprintf(path, sizeof(path), "/dev/%s", e->d_name);
				found = strdup(path);
			}
		}
		fclose(f);
	}
	closedir(d);
	return found;
}

static int open_port(const char *dev, const char *name)
{
	char *path = dev ? strdup(dev) : NULL;
	int fd = -1;

	/* The port appears when virtio_console probes; give it a few seconds. */
	for (int tries = 0; tries < 200 && path == NULL; tries++) {
		path = find_port(name);
		if (path == NULL)
			usleep(25000);
	}
	if (path == NULL) {
		agent_log("no virtio-serial port named %s", name);
		return -1;
	}
	fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		agent_log("open %s: %s", path, strerror(errno));
	free(path);
	return fd;
}

static int listen_open(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int ls;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		agent_log("socket path too long: %s", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(ls, 1) < 0) {
		agent_log("listen on %s: %s", path, strerror(errno));
		if (ls >= 0)
			close(ls);
		return -1;
	}
	return ls;
}

/* The host disconnected: its processes go with it. */
static void lost(struct agent *a)
{
	sessions_drop_all(a);
	guest_framer_reset(&a->in);
	a->out.len = a->out_off = 0;
	a->connected = false;
	a->broken = false;
}

static int flush_out(struct agent *a)
{
	while (a->out_off < a->out.len) {
		ssize_t n = write(a->chan, a->out.data + a->out_off, a->out.len - a->out_off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return 0;
			return -1;
		}
		a->out_off += (size_t)n;
	}
	a->out.len = a->out_off = 0;
	return 0;
}

/* A HELLO from the host starts a new session.  Over a virtio port a quick
 * reconnect shows no EOF, so this is where the previous host's processes die
 * and its unsent output is dropped (all but a frame already half written,
 * which must be completed to keep the stream framed). */
static void new_session(struct agent *a)
{
	size_t keep = 0;

	sessions_drop_all(a);
	while (keep < a->out_off)
		keep += GUEST_HDR_LEN + guest_get_u32(a->out.data + keep + 8);
	a->out.len = keep;
}

/* Device mode after a framing error: skip to the next host HELLO header,
 * which is how every new connection starts.  true once found. */
static bool resync(struct agent *a)
{
	static const uint8_t hello[8] = { GUEST_FRAME_MAGIC >> 8, GUEST_FRAME_MAGIC & 0xff, GUEST_F_HELLO, 0, 0, 0, 0, 0 };
	struct guest_framer *fr = &a->in;

	for (size_t i = fr->off; i + sizeof(hello) <= fr->len; i++) {
		if (memcmp(fr->buf + i, hello, sizeof(hello)) == 0) {
			fr->off = i;
			a->broken = false;
			agent_log("resynchronised on a new HELLO");
			return true;
		}
	}
	/* The header may straddle two reads. */
	if (fr->len - fr->off > sizeof(hello))
		fr->off = fr->len - sizeof(hello);
	return false;
}

static void dispatch(struct agent *a, const struct guest_frame *f)
{
	const char *why = NULL;
	char tn[8];
	struct session *s;

	switch (f->type) {
	case GUEST_F_HELLO: {
		struct guest_hello h;
		if (guest_decode_hello(f->payload, f->len, &h, &why) < 0) {
			agent_send_error(a, 0, 0, "bad HELLO frame: %s", why);
			return;
		}
		new_session(a);
		if (h.version != GUEST_PROTO_VERSION)
			agent_send_error(a, 0, 0, "host speaks agent protocol %u, this agent speaks %u", h.version,
					 GUEST_PROTO_VERSION);
		else
			send_hello(a);
		guest_hello_free(&h);
		return;
	}
	case GUEST_F_PING:
		guest_frame_raw(&a->out, GUEST_F_PONG, f->id, f->payload, f->len);
		return;
	case GUEST_F_EXEC: {
		struct guest_exec_req req;
		if (guest_decode_exec(f->payload, f->len, &req, &why) < 0) {
			agent_send_error(a, f->id, 0, "bad EXEC frame: %s", why);
			return;
		}
		session_exec(a, f->id, &req);
		guest_exec_req_free(&req);
		return;
	}
	case GUEST_F_STDIN:
	case GUEST_F_STDIN_EOF:
	case GUEST_F_KILL:
		/* Unknown ids are processes that already finished: the host may not know yet. */
		s = session_find(a, f->id);
		if (f->type == GUEST_F_STDIN) {
			if (s)
				session_stdin(a, s, f->payload, f->len);
		} else if (f->type == GUEST_F_STDIN_EOF) {
			if (s)
				session_stdin_eof(a, s);
		} else if (f->len != 4 || guest_get_u32(f->payload) == 0 || guest_get_u32(f->payload) > 64) {
			agent_send_error(a, 0, 0, "bad KILL frame for id %u: want a signal number 1-64", f->id);
		} else if (s) {
			session_kill(s, (int)guest_get_u32(f->payload));
		}
		return;
	case GUEST_F_UPLOAD:
	case GUEST_F_DOWNLOAD:
		files_xfer(a, f->type, f->id, f->payload, f->len);
		return;
	case GUEST_F_STAT:
		files_stat(a, f->id, f->payload, f->len);
		return;
	case GUEST_F_IDENTITY:
		identity_apply(a, f->id, f->payload, f->len);
		return;
	}
	agent_send_error(a, f->id, 0, "unexpected frame type %s from the host", guest_frame_name(f->type, tn));
}

/* 0 on success, -1 when the host is gone. */
static int read_chan(struct agent *a)
{
	struct guest_frame f;
	const char *why = NULL;
	size_t room;
	uint8_t *space = guest_framer_space(&a->in, &room);
	ssize_t n;
	int r;

	if (space == NULL) {
		agent_log("out of memory for input");
		return -1;
	}
	n = read(a->chan, space, room);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -1;
	if (n == 0)
		return -1;
	if (a->broken && !a->device) {
		guest_framer_reset(&a->in);
		return 0;
	}
	guest_framer_commit(&a->in, (size_t)n);
	if (a->broken && !resync(a))
		return 0;
	while ((r = guest_framer_next(&a->in, &f, &why)) > 0)
		dispatch(a, &f);
	if (r < 0) {
		/* Frame boundaries are lost: nothing after this can be trusted. */
		agent_log("protocol error: %s", why);
		agent_send_error(a, 0, EPROTO, "agent protocol: %s; closing the connection", why);
		guest_framer_reset(&a->in);
		sessions_drop_all(a);
		a->broken = true;
	}
	return 0;
}

/* Listen mode: accept the next host, keeping orphans drained meanwhile. */
static int wait_accept(struct agent *a)
{
	for (;;) {
		struct pollfd p[2] = { { a->listen_fd, POLLIN, 0 }, { a->sigfd, POLLIN, 0 } };
		if (poll(p, 2, 50) < 0 && errno != EINTR)
			return -1;
		if (p[1].revents & POLLIN)
			sessions_reap(a);
		if (a->quit)
			return -1;
		sessions_drain_orphans(a);
		if (p[0].revents & POLLIN) {
			a->chan = accept4(a->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
			if (a->chan >= 0)
				break;
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
				agent_log("accept: %s", strerror(errno));
				return -1;
			}
		}
	}
	a->connected = true;
	send_hello(a);
	return 0;
}

static volatile sig_atomic_t got_quit;

static void on_wake(int sig)
{
	/* Only there to interrupt the blocking write (and note a quit). */
	if (sig == SIGTERM || sig == SIGINT)
		got_quit = 1;
}

/* Device mode: wait until the host end of the port is open.  A disconnected
 * port reports POLLHUP at once, so poll cannot wait for the host; a blocking
 * write can (the kernel holds it until the host connects), so the HELLO is
 * written blocking, and a restored snapshot's new host is answered at once
 * instead of at the next tick.  SIGALRM interrupts it every 100 ms to drain
 * orphans' output, but only while there are processes; SIGCHLD, SIGTERM and
 * SIGINT (otherwise taken from the signalfd) are let through meanwhile, so a
 * child is reaped and a quit seen at once. */
static void wait_host(struct agent *a)
{
	struct pollfd p = { a->chan, POLLIN, 0 };
	struct sigaction sa = { .sa_handler = on_wake }; /* no SA_RESTART */
	sigset_t wake, old;
	struct itimerval tick = { { 0, 100000 }, { 0, 100000 } }, off = { { 0, 0 }, { 0, 0 } };
	struct guest_hello h = { .version = GUEST_PROTO_VERSION, .caps = a->caps, .agent = AGENT_VERSION,
				 .pid = getpid() };
	struct guest_wbuf w = { 0 };
	int fl = fcntl(a->chan, F_GETFL);
	size_t done = 0;

	if (poll(&p, 1, 0) >= 0 && !(p.revents & (POLLHUP | POLLERR))) {
		a->connected = true;
		send_hello(a);
		return;
	}
	guest_encode_hello(&w, 0, &h);
	if (w.failed)
		return;
	sigemptyset(&wake);
	sigaddset(&wake, SIGCHLD);
	sigaddset(&wake, SIGTERM);
	sigaddset(&wake, SIGINT);
	sigaction(SIGALRM, &sa, NULL);
	sigaction(SIGCHLD, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	fcntl(a->chan, F_SETFL, fl & ~O_NONBLOCK);
	/* Without processes there is nothing to reap or drain: no tick, so an
	 * idle guest's agents (one per port) cost no wake-ups.  (An orphan a
	 * command left behind is reaped once a host connects.) */
	for (unsigned i = 0; i < GUEST_MAX_SESSIONS; i++)
		if (a->sess[i]) {
			setitimer(ITIMER_REAL, &tick, NULL);
			break;
		}
	sessions_reap(a); /* what is already pending on the signalfd */
	got_quit = 0;
	sigprocmask(SIG_UNBLOCK, &wake, &old);
	while (done < w.len && !a->quit) {
		ssize_t n;
		if (got_quit) {
			a->quit = true;
			break;
		}
		n = write(a->chan, w.data + done, w.len - done);
		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n < 0 && errno != EINTR)
			usleep(50000); /* the port is going away or resetting */
		sessions_reap(a);
		sessions_drain_orphans(a);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	setitimer(ITIMER_REAL, &off, NULL);
	fcntl(a->chan, F_SETFL, fl);
	guest_wbuf_free(&w);
	a->connected = done > 0;
}

static int serve(struct agent *a)
{
	struct pollfd pf[2 + 3 * GUEST_MAX_SESSIONS];
	int idx[GUEST_MAX_SESSIONS][3];
	struct session *at[GUEST_MAX_SESSIONS];

	if (!a->device && a->listen_fd < 0) {
		a->connected = true;
		send_hello(a);
	}
	for (;;) {
		int np = 2, timeout;
		bool room = agent_out_pending(a) < AGENT_OUT_HIGH;

		if (!a->connected && a->device)
			wait_host(a);
		if (!a->connected && a->listen_fd >= 0 && wait_accept(a) < 0)
			return a->quit ? 0 : 1;
		if (a->quit) {
			lost(a);
			return 0;
		}
		pf[0] = (struct pollfd){ a->chan, POLLIN | (agent_out_pending(a) ? POLLOUT : 0), 0 };
		pf[1] = (struct pollfd){ a->sigfd, POLLIN, 0 };
		for (unsigned i = 0; i < GUEST_MAX_SESSIONS; i++) {
			struct session *s = a->sess[i];
			int fds[3];
			at[i] = s;
			if (s == NULL)
				continue;
			fds[0] = room ? s->fd_out : -1;
			fds[1] = room ? s->fd_err : -1;
			fds[2] = s->in_len > s->in_off ? s->fd_in : -1;
			for (int k = 0; k < 3; k++) {
				idx[i][k] = -1;
				if (fds[k] < 0)
					continue;
				idx[i][k] = np;
				pf[np++] = (struct pollfd){ fds[k], k == 2 ? POLLOUT : POLLIN, 0 };
			}
		}
		timeout = sessions_next_timeout(a);
		if (poll(pf, (nfds_t)np, timeout) < 0) {
			if (errno == EINTR)
				continue;
			agent_log("poll: %s", strerror(errno));
			return 1;
		}
		if (pf[1].revents & POLLIN)
			sessions_reap(a);
		if (a->quit) {
			lost(a);
			return 0;
		}
		for (unsigned i = 0; i < GUEST_MAX_SESSIONS; i++) {
			short rv[3] = { 0, 0, 0 };
			if (at[i] == NULL || a->sess[i] != at[i])
				continue;
			for (int k = 0; k < 3; k++)
				if (idx[i][k] >= 0)
					rv[k] = pf[idx[i][k]].revents;
			session_io(a, at[i], rv[0], rv[1], rv[2]);
		}
		sessions_tick(a);
		if ((pf[0].revents & (POLLIN | POLLHUP | POLLERR)) && read_chan(a) < 0)
			goto gone;
		if (flush_out(a) < 0)
			goto gone;
		if (a->broken && !a->device && agent_out_pending(a) == 0) {
			/* The error frame is out; ending the connection is the only way to resync. */
			shutdown(a->chan, SHUT_RDWR);
			if (a->listen_fd < 0 || a->once) {
				lost(a);
				return 1;
			}
			goto gone;
		}
		if (a->out.failed) {
			agent_log("out of memory for output");
			goto gone;
		}
		continue;
gone:
		if (a->verbose)
			agent_log("host disconnected");
		lost(a);
		if (a->device)
			continue;
		if (a->listen_fd < 0 || a->once)
			return 0;
		close(a->chan);
		a->chan = -1;
	}
}

/* Make sure 0, 1 and 2 are open so pipes never land on them. */
static void std_fds(void)
{
	for (int fd = 0; fd < 3; fd++) {
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
			int n = open("/dev/null", O_RDWR);
			if (n >= 0 && n != fd) {
				dup2(n, fd);
				close(n);
			}
		}
	}
}

int main(int argc, char **argv)
{
	struct agent a;
	const char *port = NULL, *listen_path = NULL, *tar = NULL, *port_name = GUEST_PORT_NAME;
	bool once = false;
	int fd = -1, rc;
	sigset_t mask;

	/* helpers the host runs through EXEC (xattrs.c) */
	if (argc == 3 && strcmp(argv[1], "--xattrs-dump") == 0)
		return xattrs_dump(argv[2]);
	if (argc == 3 && strcmp(argv[1], "--xattrs-apply") == 0)
		return xattrs_apply(argv[2]);
	/* envd's filesystem calls and terminals (fsops.c, pty.c) */
	if (argc >= 2 && strcmp(argv[1], "--fs") == 0)
		return fs_main(argc, argv);
	if (argc >= 2 && strcmp(argv[1], "--pty") == 0)
		return pty_main(argc, argv);
	/* a sandbox's own port, for the host's proxy (relay.c) */
	if (argc == 3 && strcmp(argv[1], "--connect") == 0)
		return agent_connect(argv[2]);
	/* the tar writer DOWNLOAD runs (tarc.c) */
	if ((argc == 3 || argc == 4) && strcmp(argv[1], "--tar-create") == 0)
		return tar_create(argv[2], argc == 4 ? argv[3] : NULL);
	memset(&a, 0, sizeof(a));
	a.chan = -1;
	a.listen_fd = -1;
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
			fputs(usage, stdout);
			return 0;
		} else if (strcmp(arg, "--relay") == 0 && i + 4 < argc) {
			/* not the agent: one RUN's ssh-agent socket (relay.c) */
			return agent_relay(argv[i + 1], argv[i + 2], argv[i + 3], argv[i + 4]);
		} else if (strcmp(arg, "--version") == 0) {
			printf("%s (protocol %u)\n", AGENT_VERSION, GUEST_PROTO_VERSION);
			return 0;
		} else if (strcmp(arg, "-v") == 0) {
			a.verbose++;
		} else if (strcmp(arg, "--once") == 0) {
			once = true;
		} else if (val && strcmp(arg, "--name") == 0) {
			port_name = val, i++;
		} else if (val && strcmp(arg, "--port") == 0) {
			port = val, i++;
		} else if (val && strcmp(arg, "--listen") == 0) {
			listen_path = val, i++;
		} else if (val && strcmp(arg, "--tar") == 0) {
			tar = val, i++;
		} else if (val && strcmp(arg, "--fd") == 0) {
			char *end;
			long v = strtol(val, &end, 10);
			if (*end || v < 0 || v > 65535) {
				fprintf(stderr, "kiln-agent: bad --fd %s\n", val);
				return 2;
			}
			fd = (int)v, i++;
		} else {
			fprintf(stderr, "kiln-agent: unknown argument %s\n%s", arg, usage);
			return 2;
		}
	}
	std_fds();
	/* Orphans of the commands we run are reparented here and reaped like ours. */
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	a.sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (a.sigfd < 0) {
		agent_log("signalfd: %s", strerror(errno));
		return 1;
	}
	files_find_tar(&a, tar);
	a.caps = GUEST_CAP_EXEC | GUEST_CAP_STDIN | GUEST_CAP_KILL | GUEST_CAP_STAT | GUEST_CAP_EXEC_LOG;
	if (a.tar[0])
		a.caps |= GUEST_CAP_UPLOAD;
	if (a.tar[0] || a.tar_self)
		a.caps |= GUEST_CAP_DOWNLOAD | GUEST_CAP_XFER_NAME;
	if (geteuid() == 0)
		a.caps |= GUEST_CAP_SETUID | GUEST_CAP_ROOT;
	if (geteuid() == 0 && fd < 0 && listen_path == NULL)
		a.caps |= GUEST_CAP_IDENTITY;
	guest_framer_init(&a.in);

	if (fd >= 0) {
		a.chan = fd;
		fcntl(fd, F_SETFD, FD_CLOEXEC);
	} else if (listen_path) {
		a.listen_fd = listen_open(listen_path);
		a.once = once;
		if (a.listen_fd < 0)
			return 1;
	} else {
		a.device = true;
		a.chan = open_port(port, port_name);
	}
	if (a.chan < 0 && a.listen_fd < 0)
		return 1;
	if (a.chan >= 0)
		fcntl(a.chan, F_SETFL, fcntl(a.chan, F_GETFL) | O_NONBLOCK);
	if (a.verbose)
		agent_log("serving (pid %d, tar %s)", (int)getpid(), a.tar[0] ? a.tar[0] : "none");
	rc = serve(&a);
	sessions_free_all(&a);
	guest_framer_free(&a.in);
	guest_wbuf_free(&a.out);
	for (int i = 0; i < 2; i++)
		free(a.tar[i]);
	if (a.chan >= 0)
		close(a.chan);
	if (a.listen_fd >= 0) {
		close(a.listen_fd);
		unlink(listen_path);
	}
	close(a.sigfd);
	return rc;
}

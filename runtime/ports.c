/* ports.c — a sandbox's own TCP ports reached from the host (E2B's
 * getHost(port)): one connection to the guest's 127.0.0.1:PORT per agent
 * exec of the `--connect` helper, joined to a one-use abstract unix socket
 * by two threads, so any HTTP client can speak through it whatever the
 * sandbox's network. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <stddef.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "runtime/internal.h"

#define WHY_MAX 1024

struct rt_tunnel {
	rt_sandbox *sb;
	struct rt_proc *p;
	struct rt_sub *sub;
	int listen_fd, conn_fd;
	pthread_t bridge, to_host;
	char name[48];
	kiln_buf why; /* the helper's stderr */
};

/* kiln_write_full, but with MSG_NOSIGNAL: kiln serve does not ignore SIGPIPE,
 * and a client gone mid-answer must not end the daemon. */
static int send_all(int fd, const void *p, size_t n)
{
	const char *b = p;

	while (n > 0) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The guest's bytes to the host socket until the helper ends. */
static void *to_host_main(void *arg)
{
	struct rt_tunnel *t = arg;
	rt_sandbox *sb = t->sb;
	bool host_gone = false;

	pthread_mutex_lock(&sb->mu);
	for (;;) {
		struct rt_ev *e;
		while ((e = rt_sub_take_locked(t->sub)) != NULL) {
			if (e->kind == RT_EV_STDERR) {
				if (t->why.len < WHY_MAX)
					kiln_buf_add(&t->why, e->data.buf, e->data.len);
			} else if (!host_gone) {
				pthread_mutex_unlock(&sb->mu);
				host_gone = send_all(t->conn_fd, e->data.buf, e->data.len) < 0;
				pthread_mutex_lock(&sb->mu);
			}
			rt_ev_free(e);
		}
		if (t->p->ended)
			break;
		rt_wait_locked(sb, t->p, t->sub, 0);
	}
	pthread_mutex_unlock(&sb->mu);
	/* the server closed (or the helper failed): the client reads the end */
	shutdown(t->conn_fd, SHUT_WR);
	return NULL;
}

static void kill_helper(struct rt_tunnel *t)
{
	pthread_mutex_lock(&t->sb->mu);
	if (!t->p->ended)
		guest_proc_kill(t->p->gp, SIGKILL, NULL);
	pthread_mutex_unlock(&t->sb->mu);
}

/* The one connection this process makes to the socket (its peer checked:
 * no other local process takes its place), then the host's bytes to the
 * helper's stdin; the host closing ends the connection (an HTTP client
 * closes only once it is done). */
static void *bridge_main(void *arg)
{
	struct rt_tunnel *t = arg;
	rt_sandbox *sb = t->sb;
	char buf[65536];

	for (;;) {
		struct pollfd pfd = { t->listen_fd, POLLIN, 0 };
		struct ucred cr;
		socklen_t cl = sizeof(cr);
		if (poll(&pfd, 1, 30000) <= 0 || (pfd.revents & (POLLHUP | POLLERR))) {
			kill_helper(t);
			return NULL;
		}
		int fd = accept4(t->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			kill_helper(t);
			return NULL;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 && cr.pid == getpid()) {
			t->conn_fd = fd;
			break;
		}
		close(fd);
	}
	if (pthread_create(&t->to_host, NULL, to_host_main, t) != 0) {
		kill_helper(t);
		return NULL;
	}
	for (;;) {
		ssize_t n = read(t->conn_fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		pthread_mutex_lock(&sb->mu);
		if (n <= 0 || t->p->ended || guest_proc_write(t->p->gp, buf, (size_t)n, 30000, NULL) < 0) {
			pthread_mutex_unlock(&sb->mu);
			break;
		}
		pthread_mutex_unlock(&sb->mu);
	}
	kill_helper(t);
	pthread_join(t->to_host, NULL);
	return NULL;
}

rt_tunnel *rt_tunnel_open(rt_sandbox *sb, unsigned port, const char **socket_name, kiln_error **err)
{
	struct rt_tunnel *t = kiln_xcalloc(1, sizeof(*t));
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	unsigned char rnd[12];
	char port_s[12];
	const char *argv[] = { "/proc/self/exe", "--connect", port_s, NULL };
	struct guest_exec_opts o;

	t->listen_fd = t->conn_fd = -1;
	if (port == 0 || port > 65535) {
		kiln_err(err, KILN_E_INVALID, "port %u is not a TCP port (1-65535)", port);
		goto fail;
	}
	/* an abstract socket with a name no one guesses, made for one connect */
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		kiln_err_errno(err, errno, "getrandom");
		goto fail;
	}
	snprintf(t->name, sizeof(t->name), "kiln-port-%d-", (int)getpid());
	for (size_t i = 0; i < sizeof(rnd); i++)
		snprintf(t->name + strlen(t->name), 3, "%02x", rnd[i]);
	memcpy(sa.sun_path + 1, t->name, strlen(t->name));
	if ((t->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    bind(t->listen_fd, (struct sockaddr *)&sa,
		 (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(t->name))) < 0 ||
	    listen(t->listen_fd, 1) < 0) {
		kiln_err(err, KILN_E_IO, "a socket for port %u: %s", port, strerror(errno));
		goto fail;
	}
	snprintf(port_s, sizeof(port_s), "%u", port);
	t->sb = sb;
	guest_exec_opts_init(&o);
	o.argv = argv;
	o.want_stdin = true;
	pthread_mutex_lock(&sb->mu);
	o.run_as = rt_user(sb, NULL);
	t->p = rt_proc_start_locked(sb, &o, &t->sub, err);
	if (t->p)
		t->p->is_watch = true; /* a helper, not the user's process: not listed */
	pthread_mutex_unlock(&sb->mu);
	if (t->p == NULL)
		goto fail;
	if (pthread_create(&t->bridge, NULL, bridge_main, t) != 0) {
		kiln_err(err, KILN_E_IO, "cannot start a port's thread");
		kill_helper(t);
		pthread_mutex_lock(&sb->mu);
		rt_proc_forget_locked(sb, t->p);
		pthread_mutex_unlock(&sb->mu);
		goto fail;
	}
	*socket_name = t->name;
	return t;
fail:
	if (t->listen_fd >= 0)
		close(t->listen_fd);
	kiln_buf_free(&t->why);
	free(t);
	return NULL;
}

char *rt_tunnel_close(rt_tunnel *t)
{
	char *why = NULL;

	if (t == NULL)
		return NULL;
	/* a client that never connected: the bridge's wait ends */
	shutdown(t->listen_fd, SHUT_RDWR);
	pthread_join(t->bridge, NULL);
	pthread_mutex_lock(&t->sb->mu);
	if (t->p->res.exit_code > 0 && t->why.len) {
		const char *nl = memchr(t->why.buf, '\n', t->why.len);
		why = kiln_xstrndup(t->why.buf, nl ? (size_t)(nl - t->why.buf) : t->why.len);
	}
	rt_proc_forget_locked(t->sb, t->p);
	pthread_mutex_unlock(&t->sb->mu);
	close(t->listen_fd);
	if (t->conn_fd >= 0)
		close(t->conn_fd);
	kiln_buf_free(&t->why);
	free(t);
	return why;
}

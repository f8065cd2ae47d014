/* agent_port.c — which of a sandbox's agent ports (one agent each) a host
 * client talks to: QEMU's socket chardev serves one client at a time, so a
 * client holds an flock on its port's lock file while connected and takes
 * the first free port; more clients than ports wait for one. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "snapshots/internal.h"

static int open_lock(const char *dir, unsigned port, kiln_error **err)
{
	char *path = port == 0 ? kiln_path_join(dir, "agent.lock") : kiln_xasprintf("%s/agent-%u.lock", dir, port);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

	if (fd < 0)
		kiln_err_errno(err, errno, "open %s", path);
	free(path);
	return fd;
}

/* The fd of a held lock on a free port (*port), or -1.  port_want >= 0: that
 * port only.  Waits while every port is busy. */
static int lock_port(const char *dir, int port_want, unsigned *port, kiln_error **err)
{
	int fds[VM_AGENT_PORTS], held = -1;
	bool said = false;

	for (unsigned i = 0; i < VM_AGENT_PORTS; i++)
		fds[i] = -1;
	for (unsigned i = 0; i < VM_AGENT_PORTS; i++) {
		if (port_want >= 0 && i != (unsigned)port_want)
			continue;
		if ((fds[i] = open_lock(dir, i, err)) < 0)
			goto out;
	}
	for (;;) {
		for (unsigned i = 0; i < VM_AGENT_PORTS && held < 0; i++) {
			if (fds[i] < 0)
				continue;
			if (flock(fds[i], LOCK_EX | LOCK_NB) == 0) {
				held = fds[i];
				fds[i] = -1;
				*port = i;
			} else if (errno != EWOULDBLOCK && errno != EINTR) {
				kiln_err_errno(err, errno, "lock agent port %u of %s", i, dir);
				goto out;
			}
		}
		if (held >= 0)
			break;
		if (!said) {
			kiln_info("sandbox: all %u agent ports of %s are in use; waiting for one", VM_AGENT_PORTS, dir);
			said = true;
		}
		kiln_sleep_ms(20);
	}
out:
	for (unsigned i = 0; i < VM_AGENT_PORTS; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return held;
}

guest_conn *snap_agent_connect(const char *dir, int port_want, bool wait_hello, uid_t peer_uid, int timeout_ms,
			       kiln_error **err)
{
	unsigned port = 0;
	int lock = lock_port(dir, port_want, &port, err);
	char *sock;
	guest_conn *c;

	if (lock < 0)
		return NULL;
	sock = vm_agent_socket_path(dir, port);
	c = wait_hello ? guest_connect(sock, timeout_ms, err) : guest_connect_nowait(sock, timeout_ms, err);
	if (c && vm_socket_peer_check(guest_conn_fd(c), peer_uid, sock, err) < 0) {
		guest_close(c);
		c = NULL;
	}
	if (c)
		guest_conn_hold_fd(c, lock);
	else
		close(lock);
	free(sock);
	return c;
}

/* relay.c — connections carried over this process's stdin/stdout (an agent
 * exec session).  `--relay PATH MODE UID GID`: a unix socket in the guest
 * whose connections the host joins to its ssh-agent; frames both ways: u32
 * connection, u32 length, bytes (big-endian); length 0 closes the connection;
 * connection 0 length 0 from here: listening.  `--connect PORT`: one TCP
 * connection to the guest's own port, unframed (a sandbox's getHost). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "guest/agent/agent.h"

#define RELAY_MAX_CONNS 32
#define RELAY_MAX_FRAME (1u << 20)

struct relay_conn {
	int fd;
	uint32_t id;
};

static int write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n > 0) {
		ssize_t w = write(fd, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

static int send_frame(uint32_t id, const void *p, uint32_t n)
{
	uint8_t h[8];

	guest_put_u32(h, id);
	guest_put_u32(h + 4, n);
	return write_all(1, h, 8) < 0 || (n && write_all(1, p, n) < 0) ? -1 : 0;
}

static struct relay_conn *find(struct relay_conn *c, uint32_t id)
{
	for (int i = 0; i < RELAY_MAX_CONNS; i++)
		if (c[i].fd >= 0 && c[i].id == id)
			return &c[i];
	return NULL;
}

static void drop(struct relay_conn *c)
{
	close(c->fd);
	c->fd = -1;
}

/* Frames from the host: the bytes go to their connection. */
static int from_host(struct relay_conn *conns, uint8_t *buf, size_t *len)
{
	size_t off = 0;

	while (*len - off >= 8) {
		uint32_t id = guest_get_u32(buf + off), n = guest_get_u32(buf + off + 4);
		if (n > RELAY_MAX_FRAME)
			return -1;
		if (*len - off - 8 < n)
			break;
		struct relay_conn *c = find(conns, id);
		if (c && (n == 0 || write_all(c->fd, buf + off + 8, n) < 0)) {
			if (n)
				send_frame(id, NULL, 0);
			drop(c);
		}
		off += 8 + n;
	}
	memmove(buf, buf + off, *len - off);
	*len -= off;
	return 0;
}

int agent_relay(const char *path, const char *mode, const char *uid, const char *gid)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct relay_conn conns[RELAY_MAX_CONNS];
	size_t cap = 2 * RELAY_MAX_FRAME + 16, len = 0;
	uint8_t *in = malloc(cap), chunk[16384];
	uint32_t next = 1;
	int ls;

	for (int i = 0; i < RELAY_MAX_CONNS; i++)
		conns[i].fd = -1;
	if (!in || strlen(path) >= sizeof(sa.sun_path)) {
		agent_log("relay: bad socket path %s", path);
		return 1;
	}
	strcpy(sa.sun_path, path);
	unlink(path);
	ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(ls, 8) < 0 ||
	    chown(path, (uid_t)strtoul(uid, NULL, 10), (gid_t)strtoul(gid, NULL, 10)) < 0 ||
	    chmod(path, (mode_t)strtoul(mode, NULL, 8)) < 0) {
		agent_log("relay: %s: %s", path, strerror(errno));
		return 1;
	}
	if (send_frame(0, NULL, 0) < 0)
		return 1;
	for (;;) {
		struct pollfd p[RELAY_MAX_CONNS + 2];
		int map[RELAY_MAX_CONNS + 2], np = 0;
		p[np] = (struct pollfd){ .fd = 0, .events = POLLIN };
		map[np++] = -1;
		p[np] = (struct pollfd){ .fd = ls, .events = POLLIN };
		map[np++] = -2;
		for (int i = 0; i < RELAY_MAX_CONNS; i++)
			if (conns[i].fd >= 0) {
				p[np] = (struct pollfd){ .fd = conns[i].fd, .events = POLLIN };
				map[np++] = i;
			}
		if (poll(p, (nfds_t)np, -1) < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		for (int k = 0; k < np; k++) {
			if (!p[k].revents)
				continue;
			if (map[k] == -1) {
				ssize_t n = read(0, in + len, cap - len);
				if (n <= 0)
					return 0; /* the host is done with us */
				len += (size_t)n;
				if (from_host(conns, in, &len) < 0)
					return 1;
			} else if (map[k] == -2) {
				int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
				int slot = -1;
				for (int i = 0; i < RELAY_MAX_CONNS && slot < 0; i++)
					if (conns[i].fd < 0)
						slot = i;
				if (fd >= 0 && slot < 0)
					close(fd);
				else if (fd >= 0)
					conns[slot] = (struct relay_conn){ .fd = fd, .id = next++ };
			} else {
				struct relay_conn *c = &conns[map[k]];
				if (c->fd < 0) /* closed by the host's frame just now */
					continue;
				ssize_t n = read(c->fd, chunk, sizeof(chunk));
				if (n < 0 && errno == EINTR)
					continue;
				if (n <= 0) {
					if (send_frame(c->id, NULL, 0) < 0)
						return 1;
					drop(c);
				} else if (send_frame(c->id, chunk, (uint32_t)n) < 0) {
					return 1;
				}
			}
		}
	}
}

int agent_connect(const char *port_s)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	char *end;
	unsigned long port = strtoul(port_s, &end, 10);
	uint8_t buf[65536];
	bool in_open = true;
	int fd;

	if (*port_s == '\0' || *end != '\0' || port == 0 || port > 65535) {
		dprintf(2, "kiln-agent --connect: bad port %s\n", port_s);
		return 2;
	}
	sa.sin_port = htons((uint16_t)port);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		dprintf(2, "connect to 127.0.0.1:%lu: %s\n", port, strerror(errno));
		return 3;
	}
	for (;;) {
		struct pollfd p[2] = { { .fd = in_open ? 0 : -1, .events = POLLIN }, { .fd = fd, .events = POLLIN } };
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		if (p[0].revents) {
			ssize_t n = read(0, buf, sizeof(buf));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				/* the host sent all it will: the server sees the end */
				shutdown(fd, SHUT_WR);
				in_open = false;
			} else if (write_all(fd, buf, (size_t)n) < 0) {
				return 1;
			}
		}
		if (p[1].revents) {
			ssize_t n = read(fd, buf, sizeof(buf));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return n < 0 ? 1 : 0;
			if (write_all(1, buf, (size_t)n) < 0)
				return 1;
		}
	}
}

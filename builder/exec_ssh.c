/* exec_ssh.c — RUN --mount=type=ssh on the host's side: `kiln-agent --relay`
 * listens in the guest, and each of its connections is joined here to one
 * connection to the caller's ssh-agent.  The agent protocol is one reply per
 * request (u32 length, body), so the relay is driven from the guest's output
 * callback while the step runs: no thread, no second channel into the VM. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "builder/internal.h"
#include "guest/guest.h"

/* where vm/init_script.c puts the agent in every guest */
#ifndef BUILD_GUEST_AGENT
#define BUILD_GUEST_AGENT "/run/kiln/bin/kiln-agent"
#endif
#define SSH_MSG_MAX (256u * 1024u)
#define SSH_AGENT_TIMEOUT_MS 120000 /* a confirming agent (ssh-add -c) waits for a person */
#define RELAY_CONNS 32

struct relay_peer {
	uint32_t id;
	int fd;                 /* to the host's agent */
	kiln_buf req;           /* bytes of a request not complete yet */
};

struct build_ssh_relay {
	guest_proc *p;
	const char *socket;
	kiln_buf in;            /* frames from the guest not handled yet */
	bool busy, ready, failed;
	struct relay_peer peers[RELAY_CONNS];
};

static void to_guest(struct build_ssh_relay *r, uint32_t id, const void *data, uint32_t len)
{
	uint8_t h[8];
	kiln_error *e = NULL;

	guest_put_u32(h, id);
	guest_put_u32(h + 4, len);
	if (guest_proc_write(r->p, h, 8, 10000, &e) < 0 || (len && guest_proc_write(r->p, data, len, 10000, &e) < 0)) {
		kiln_warn("build: ssh relay: %s", kiln_error_message(e));
		kiln_error_free(e);
		r->failed = true;
	}
}

static int read_full(int fd, void *p, size_t n)
{
	uint8_t *b = p;

	while (n > 0) {
		struct pollfd pf = { fd, POLLIN, 0 };
		int pr = poll(&pf, 1, SSH_AGENT_TIMEOUT_MS);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			return -1;
		ssize_t got = read(fd, b, n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return -1;
		b += got;
		n -= (size_t)got;
	}
	return 0;
}

static int agent_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -1;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static void peer_close(struct relay_peer *pe)
{
	if (pe->fd >= 0)
		close(pe->fd);
	kiln_buf_free(&pe->req);
	memset(pe, 0, sizeof(*pe));
	pe->fd = -1;
}

static struct relay_peer *peer(struct build_ssh_relay *r, uint32_t id)
{
	struct relay_peer *free_slot = NULL;

	for (int i = 0; i < RELAY_CONNS; i++) {
		if (r->peers[i].id == id)
			return &r->peers[i];
		if (!r->peers[i].id && !free_slot)
			free_slot = &r->peers[i];
	}
	if (free_slot) {
		free_slot->id = id;
		free_slot->fd = agent_connect(r->socket);
	}
	return free_slot;
}

/* Whole requests of one connection go to the host's agent, its replies back. */
static void serve_peer(struct build_ssh_relay *r, struct relay_peer *pe)
{
	while (pe->req.len >= 4) {
		uint32_t n = guest_get_u32((const uint8_t *)pe->req.buf);
		if (n > SSH_MSG_MAX || pe->fd < 0)
			goto drop;
		if (pe->req.len < 4 + (size_t)n)
			return;
		uint8_t h[4];
		if (kiln_write_full(pe->fd, pe->req.buf, 4 + (size_t)n) < 0 || read_full(pe->fd, h, 4) < 0)
			goto drop;
		uint32_t rn = guest_get_u32(h);
		if (rn > SSH_MSG_MAX)
			goto drop;
		uint8_t *reply = kiln_xmalloc(4 + (size_t)rn);
		memcpy(reply, h, 4);
		if (read_full(pe->fd, reply + 4, rn) < 0) {
			free(reply);
			goto drop;
		}
		to_guest(r, pe->id, reply, 4 + rn);
		free(reply);
		memmove(pe->req.buf, pe->req.buf + 4 + n, pe->req.len - 4 - n);
		pe->req.len -= 4 + (size_t)n;
	}
	return;
drop:
	to_guest(r, pe->id, NULL, 0);
	peer_close(pe);
}

/* The relay's stdout.  Writing a reply can pump the connection and bring
 * more output here: that is only queued, the outer call goes on with it. */
static void on_relay_out(void *ud, const void *data, size_t len)
{
	struct build_ssh_relay *r = ud;

	kiln_buf_add(&r->in, data, len);
	if (r->busy)
		return;
	r->busy = true;
	size_t off = 0;
	while (!r->failed && r->in.len - off >= 8) {
		const uint8_t *f = (const uint8_t *)r->in.buf + off;
		uint32_t id = guest_get_u32(f), n = guest_get_u32(f + 4);
		if (r->in.len - off - 8 < n)
			break;
		if (id == 0) {
			r->ready = true;
		} else {
			struct relay_peer *pe = peer(r, id);
			if (!pe) {
				to_guest(r, id, NULL, 0);
			} else if (n == 0) {
				peer_close(pe);
			} else {
				kiln_buf_add(&pe->req, f + 8, n);
				serve_peer(r, pe);
			}
		}
		off += 8 + (size_t)n;
		/* r->in may have grown meanwhile (nested output): offsets stay valid */
	}
	memmove(r->in.buf, r->in.buf + off, r->in.len - off);
	r->in.len -= off;
	r->busy = false;
}

/* The relay's complaints (it cannot listen, ...) go to kiln's log. */
static void on_relay_err(void *ud, const void *data, size_t len)
{
	kiln_warn("build: ssh relay: %.*s", (int)(len && ((const char *)data)[len - 1] == '\n' ? len - 1 : len),
		  (const char *)data);
}

int build_ssh_relay_start(guest_conn *c, const char *guest_path, const struct build_run_mount *m,
			  struct build_ssh_relay **out, kiln_error **err)
{
	struct build_ssh_relay *r = kiln_xcalloc(1, sizeof(*r));
	char mode[16], uid[16], gid[16];
	struct guest_exec_opts eo;

	for (int i = 0; i < RELAY_CONNS; i++)
		r->peers[i].fd = -1;
	r->socket = m->socket;
	snprintf(mode, sizeof(mode), "%o", (unsigned)m->mode);
	snprintf(uid, sizeof(uid), "%u", (unsigned)m->uid);
	snprintf(gid, sizeof(gid), "%u", (unsigned)m->gid);
	const char *argv[] = { BUILD_GUEST_AGENT, "--relay", guest_path, mode, uid, gid, NULL };
	guest_exec_opts_init(&eo);
	eo.argv = argv;
	eo.want_stdin = true;
	eo.on_stdout = on_relay_out;
	eo.on_stderr = on_relay_err;
	eo.user = r;
	r->p = guest_spawn(c, &eo, 30000, err);
	if (!r->p)
		goto fail;
	/* waiting (briefly) for its exit pumps the connection until the relay
	 * says it listens; a loaded host can take a while to start it */
	for (int i = 0; i < 600 && !r->ready && !guest_proc_done(r->p); i++) {
		kiln_error *e = NULL;
		if (guest_proc_wait(r->p, 50, NULL, &e) < 0 && !guest_proc_done(r->p) && !r->ready &&
		    guest_ping(c, 10000, err) < 0) {
			kiln_error_free(e);
			goto fail;
		}
		kiln_error_free(e);
	}
	if (!r->ready) {
		kiln_err(err, KILN_E_GENERIC, "the ssh-agent relay did not start in the builder VM");
		goto fail;
	}
	*out = r;
	return 0;
fail:
	build_ssh_relay_stop(r);
	return kiln_error_wrap(err, "RUN --mount=type=ssh,target=%s", m->target);
}

void build_ssh_relay_stop(struct build_ssh_relay *r)
{
	if (!r)
		return;
	if (r->p) {
		kiln_error *e = NULL;
		if (guest_proc_kill(r->p, SIGKILL, &e) < 0)
			kiln_error_free(e);
		guest_proc_free(r->p);
	}
	for (int i = 0; i < RELAY_CONNS; i++)
		peer_close(&r->peers[i]);
	kiln_buf_free(&r->in);
	free(r);
}

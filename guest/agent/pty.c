/* pty.c — `kiln-agent --pty COLS ROWS PROGRAM ARGS...`: a program on a
 * terminal of its own, for envd's PTY processes.  The agent's EXEC gives
 * processes pipes; this helper, run through EXEC, opens a pty, starts the
 * program as the leader of a new session with the pty as its controlling
 * terminal, and relays: stdin messages (guest.h: input or a resize) to the
 * terminal, what the terminal shows to stdout.  Killed, its end of the pty
 * closes and the kernel hangs the program's session up. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "guest/agent/agent.h"

static volatile sig_atomic_t child_pid;

static void forward(int sig)
{
	if (child_pid > 0)
		kill(-child_pid, sig);
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w, n -= (size_t)w;
	}
	return 0;
}

/* Handle the whole messages in buf; returns the bytes used. */
static size_t messages(int master, const uint8_t *buf, size_t n)
{
	size_t off = 0;

	while (n - off >= 5) {
		uint32_t len = (uint32_t)buf[off + 1] << 24 | (uint32_t)buf[off + 2] << 16 | (uint32_t)buf[off + 3] << 8 |
			       buf[off + 4];
		if (n - off - 5 < len)
			break;
		const uint8_t *p = buf + off + 5;
		if (buf[off] == GUEST_PTY_INPUT) {
			write_all(master, p, len);
		} else if (buf[off] == GUEST_PTY_RESIZE && len == 4) {
			struct winsize ws = { .ws_col = (unsigned short)(p[0] << 8 | p[1]),
					      .ws_row = (unsigned short)(p[2] << 8 | p[3]) };
			ioctl(master, TIOCSWINSZ, &ws);
		}
		off += 5 + len;
	}
	return off;
}

int pty_main(int argc, char **argv)
{
	struct winsize ws = { 0 };
	uint8_t in[65536 + 5], out[16384];
	size_t in_len = 0;
	bool in_open = true;
	int master, status = 0;
	char *slave;

	if (argc < 5) {
		dprintf(2, "usage: kiln-agent --pty COLS ROWS PROGRAM [ARGS...]\n");
		return 2;
	}
	ws.ws_col = (unsigned short)atoi(argv[2]);
	ws.ws_row = (unsigned short)atoi(argv[3]);
	if ((master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0 || grantpt(master) < 0 ||
	    unlockpt(master) < 0 || (slave = ptsname(master)) == NULL) {
		dprintf(2, "cannot open a pty: %s\n", strerror(errno));
		return 1;
	}
	ioctl(master, TIOCSWINSZ, &ws);
	pid_t pid = fork();
	if (pid < 0) {
		dprintf(2, "fork: %s\n", strerror(errno));
		return 1;
	}
	if (pid == 0) {
		setsid();
		int s = open(slave, O_RDWR);
		if (s < 0 || ioctl(s, TIOCSCTTY, 0) < 0 || dup2(s, 0) < 0 || dup2(s, 1) < 0 || dup2(s, 2) < 0)
			_exit(126);
		if (s > 2)
			close(s);
		execvp(argv[4], argv + 4);
		dprintf(2, "cannot execute %s: %s\n", argv[4], strerror(errno));
		_exit(127);
	}
	child_pid = pid;
	signal(SIGTERM, forward);
	signal(SIGINT, forward);
	signal(SIGHUP, forward);
	signal(SIGPIPE, SIG_IGN);
	for (;;) {
		struct pollfd p[2] = { { master, POLLIN, 0 }, { in_open ? 0 : -1, POLLIN, 0 } };
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[0].revents) {
			ssize_t n = read(master, out, sizeof(out));
			if (n <= 0) /* EIO: every holder of the terminal has gone */
				break;
			if (write_all(1, out, (size_t)n) < 0)
				break;
		}
		if (p[1].revents) {
			ssize_t n = read(0, in + in_len, sizeof(in) - in_len);
			if (n <= 0) {
				in_open = false;
				continue;
			}
			in_len += (size_t)n;
			size_t used = messages(master, in, in_len);
			memmove(in, in + used, in_len - used);
			in_len -= used;
			if (in_len == sizeof(in)) /* a message over the limit */
				in_open = false;
		}
	}
	close(master);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFSIGNALED(status)) {
		signal(WTERMSIG(status), SIG_DFL);
		raise(WTERMSIG(status));
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

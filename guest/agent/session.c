/* session.c — the agent's processes: spawn with pipes in a new process group
 * (user, cwd, env applied in the child), forward stdout/stderr as they come,
 * feed stdin under the host's window, kill, time out, reap (also orphans, as
 * a subreaper or PID 1) and report the exit once all output has been sent. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/close_range.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guest/agent/agent.h"

extern char **environ;

static char *default_env[] = { "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", NULL };

/* What the child failed at, reported through the status pipe. */
enum { STEP_DUP, STEP_NET, STEP_ROOT, STEP_GROUPS, STEP_GID, STEP_UID, STEP_CWD, STEP_EXEC };
static const char *const step_names[] = { "set up stdio", "new network namespace", "chroot", "setgroups",
					  "setgid", "setuid", "chdir", "execute" };

struct session *session_find(struct agent *a, uint32_t id)
{
	if (id == 0)
		return NULL; /* orphans are nobody's */
	for (unsigned i = 0; i < GUEST_MAX_SESSIONS; i++)
		if (a->sess[i] && a->sess[i]->id == id)
			return a->sess[i];
	return NULL;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void send_window(struct agent *a, uint32_t id, size_t n)
{
	uint8_t b[4];

	guest_put_u32(b, (uint32_t)n);
	guest_frame_raw(&a->out, GUEST_F_WINDOW, id, b, 4);
}

static _Noreturn void child_fail(int fd, int step)
{
	int msg[2] = { step, errno };

	if (write(fd, msg, sizeof(msg)) < 0) {
		/* nothing more can be reported */
	}
	_exit(127);
}

/* A network namespace of its own with loopback up, as docker's --network=none. */
static int net_isolate(void)
{
	struct ifreq ifr;
	int fd, rc = -1;

	if (unshare(CLONE_NEWNET) < 0)
		return -1;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP;
		rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
	}
	close(fd);
	return rc;
}

/* A detached process with a log dir writes straight into DIR/PID.out and
 * DIR/PID.err (opened here, as root, before any user switch; a pid reused
 * later starts them afresh) and the agent records its end in DIR/PID.exit,
 * so its output can be read after the session that started it is gone. */
static int log_open(const char *dir, int *out, int *err)
{
	char path[4200];
	int fds[2];

	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%ld.%s", dir, (long)getpid(), i ? "err" : "out");
		fds[i] = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fds[i] < 0)
			return -1;
	}
	snprintf(path, sizeof(path), "%s/%ld.exit", dir, (long)getpid());
	unlink(path);
	*out = fds[0];
	*err = fds[1];
	return 0;
}

static void log_exit(const struct session *s)
{
	char path[4200], line[64];
	int fd, len;

	snprintf(path, sizeof(path), "%s/%ld.exit", s->log_dir, (long)s->pid);
	if (WIFSIGNALED(s->status))
		len = snprintf(line, sizeof(line), "signal %d\n", WTERMSIG(s->status));
	else
		len = snprintf(line, sizeof(line), "exit %d\n", WEXITSTATUS(s->status));
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd >= 0) {
		if (write(fd, line, (size_t)len) != len) {
			/* nothing to tell: the process is gone either way */
		}
		close(fd);
	}
}

static _Noreturn void child_run(int in, int out, int err, int status_fd, char *const argv[], char *const env[],
				const char *cwd, const struct guest_exec_req *cred)
{
	sigset_t none;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	setsid();
	/* What the agent itself inherited must not reach the command either. */
	if (close_range(3, ~0u, CLOSE_RANGE_CLOEXEC) < 0)
		for (int fd = 3; fd < 4096; fd++)
			fcntl(fd, F_SETFD, FD_CLOEXEC);
	if (cred && cred->log_dir && log_open(cred->log_dir, &out, &err) < 0)
		child_fail(status_fd, STEP_DUP);
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
		child_fail(status_fd, STEP_DUP);
	if (cred && (cred->flags & GUEST_EXEC_NONET) && net_isolate() < 0)
		child_fail(status_fd, STEP_NET);
	/* Before the user switch, which would take the right to chroot away. */
	if (cred && cred->root && (chroot(cred->root) < 0 || chdir("/") < 0))
		child_fail(status_fd, STEP_ROOT);
	if (cred && (cred->uid >= 0 || cred->gid >= 0)) {
		gid_t g = cred->gid >= 0 ? (gid_t)cred->gid : 0;
		int rc;
		if (cred->ngroups > 0)
			rc = setgroups(cred->ngroups, (const gid_t *)cred->groups);
		else
			rc = setgroups(1, &g);
		if (rc < 0)
			child_fail(status_fd, STEP_GROUPS);
		if (cred->gid >= 0 && setgid((gid_t)cred->gid) < 0)
			child_fail(status_fd, STEP_GID);
		if (cred->uid >= 0 && setuid((uid_t)cred->uid) < 0)
			child_fail(status_fd, STEP_UID);
	}
	umask(022);
	/* After the user switch, so the directory must be usable by that user. */
	if (chdir(cwd ? cwd : "/") < 0)
		child_fail(status_fd, STEP_CWD);
	environ = (char **)env;
	execvp(argv[0], argv);
	child_fail(status_fd, STEP_EXEC);
}

struct session *session_spawn(struct agent *a, uint32_t id, enum session_kind kind, char *const argv[],
			      char *const env[], const char *cwd, const struct guest_exec_req *cred,
			      bool want_stdin, uint64_t timeout_ms)
{
	int po[2] = { -1, -1 }, pe[2] = { -1, -1 }, pi[2] = { -1, -1 }, px[2] = { -1, -1 };
	int slot = -1, msg[2];
	struct session *s = NULL;
	pid_t pid;
	ssize_t n;
	uint8_t pidb[4];

	if (id == 0) {
		agent_send_error(a, 0, 0, "request id 0 is reserved");
		return NULL;
	}
	if (session_find(a, id)) {
		/* Not an error for id: that would end the running one on the host side. */
		agent_send_error(a, 0, 0, "request id %u is already running", id);
		return NULL;
	}
	for (unsigned i = 0; i < GUEST_MAX_SESSIONS && slot < 0; i++)
		if (a->sess[i] == NULL)
			slot = (int)i;
	if (slot < 0) {
		agent_send_error(a, id, EAGAIN, "too many running processes (limit %u)", GUEST_MAX_SESSIONS);
		return NULL;
	}
	if (cred && cred->log_dir && mkdir(cred->log_dir, 0700) < 0 && errno != EEXIST) {
		agent_send_error(a, id, errno, "create %s: %s", cred->log_dir, strerror(errno));
		return NULL;
	}
	if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0 || pipe2(px, O_CLOEXEC) < 0 ||
	    (want_stdin ? pipe2(pi, O_CLOEXEC) : (pi[0] = open("/dev/null", O_RDONLY | O_CLOEXEC))) < 0) {
		agent_send_error(a, id, errno, "cannot create pipes: %s", strerror(errno));
		goto fail;
	}
	pid = fork();
	if (pid < 0) {
		agent_send_error(a, id, errno, "fork: %s", strerror(errno));
		goto fail;
	}
	if (pid == 0)
		child_run(pi[0], po[1], pe[1], px[1], argv, env ? env : default_env, cwd, cred);
	close_fd(&po[1]);
	close_fd(&pe[1]);
	close_fd(&pi[0]);
	close_fd(&px[1]);
	/* The status pipe closes on a successful exec or carries the failed step. */
	do
		n = read(px[0], msg, sizeof(msg));
	while (n < 0 && errno == EINTR);
	close_fd(&px[0]);
	if (n == (ssize_t)sizeof(msg)) {
		int st;
		waitpid(pid, &st, 0);
		if (msg[0] == STEP_CWD)
			agent_send_error(a, id, msg[1], "chdir %s: %s", cwd ? cwd : "/", strerror(msg[1]));
		else if (msg[0] == STEP_ROOT)
			agent_send_error(a, id, msg[1], "chroot %s: %s", cred->root, strerror(msg[1]));
		else if (msg[0] == STEP_EXEC)
			agent_send_error(a, id, msg[1], "cannot execute %s: %s", argv[0], strerror(msg[1]));
		else if (msg[0] >= 0 && msg[0] <= STEP_EXEC)
			agent_send_error(a, id, msg[1], "%s: %s", step_names[msg[0]], strerror(msg[1]));
		else
			agent_send_error(a, id, 0, "child failed to start");
		goto fail;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		kill(-pid, SIGKILL);
		agent_send_error(a, id, ENOMEM, "out of memory");
		goto fail;
	}
	s->id = id;
	s->kind = kind;
	s->pid = pid;
	s->fd_out = po[0];
	s->fd_err = pe[0];
	s->fd_in = want_stdin ? pi[1] : -1;
	fcntl(s->fd_out, F_SETFL, O_NONBLOCK);
	fcntl(s->fd_err, F_SETFL, O_NONBLOCK);
	if (s->fd_in >= 0)
		fcntl(s->fd_in, F_SETFL, O_NONBLOCK);
	/* Pipes as deep as the stdin window and a few output frames: a bulk
	 * transfer then wakes each side once per window, not per 64 KiB (best
	 * effort: the default size still works). */
	if (s->fd_in >= 0)
		fcntl(s->fd_in, F_SETPIPE_SZ, (int)GUEST_STDIN_WINDOW);
	fcntl(s->fd_out, F_SETPIPE_SZ, (int)(4 * GUEST_DATA_CHUNK));
	if (timeout_ms)
		s->deadline = agent_now_ms() + timeout_ms;
	a->sess[slot] = s;
	guest_put_u32(pidb, (uint32_t)pid);
	guest_frame_raw(&a->out, GUEST_F_STARTED, id, pidb, 4);
	if (a->verbose)
		agent_log("id %u: started %s as pid %d", id, argv[0], (int)pid);
	return s;
fail:
	close_fd(&po[0]);
	close_fd(&po[1]);
	close_fd(&pe[0]);
	close_fd(&pe[1]);
	close_fd(&pi[0]);
	close_fd(&pi[1]);
	close_fd(&px[0]);
	close_fd(&px[1]);
	return NULL;
}

void session_exec(struct agent *a, uint32_t id, struct guest_exec_req *req)
{
	char **env = req->env ? req->env : default_env, **with_home = NULL, *home = NULL;
	struct session *s;
	struct user_cred uc;
	char why[512];
	bool has_home = false;
	size_t n;

	if (req->user) {
		if (user_resolve(req->user, req->root, &uc, why, sizeof(why)) < 0) {
			agent_send_error(a, id, ENOENT, "%s", why);
			return;
		}
		req->uid = uc.uid;
		req->gid = uc.gid;
		if (uc.ngroups > 0) {
			req->groups = malloc(uc.ngroups * sizeof(uint32_t));
			if (req->groups == NULL) {
				agent_send_error(a, id, ENOMEM, "out of memory");
				return;
			}
			memcpy(req->groups, uc.groups, uc.ngroups * sizeof(uint32_t));
			req->ngroups = uc.ngroups;
		}
		/* As docker does: HOME follows the user unless it was given. */
		for (n = 0; env[n]; n++)
			has_home |= strncmp(env[n], "HOME=", 5) == 0;
		if (!has_home) {
			with_home = calloc(n + 2, sizeof(char *));
			home = malloc(strlen(uc.home) + 6);
			if (with_home == NULL || home == NULL) {
				agent_send_error(a, id, ENOMEM, "out of memory");
				goto out;
			}
			memcpy(with_home, env, n * sizeof(char *));
			sprintf(home, "HOME=%s", uc.home);
			with_home[n] = home;
			env = with_home;
		}
	}
	/* A relative cwd is taken in the user's home (E2B's rule; before, it
	 * was relative to "/", the agent's own directory, which still holds
	 * for a request without a user). */
	if (req->user && req->cwd && req->cwd[0] != '/') {
		char *joined = malloc(strlen(uc.home) + strlen(req->cwd) + 2);
		if (joined == NULL) {
			agent_send_error(a, id, ENOMEM, "out of memory");
			goto out;
		}
		sprintf(joined, "%s/%s", uc.home, req->cwd);
		free(req->cwd);
		req->cwd = joined;
	}
	if ((req->uid >= 0 || req->gid >= 0) && !(a->caps & GUEST_CAP_SETUID)) {
		agent_send_error(a, id, EPERM, "the agent does not run as root and cannot switch user");
		goto out;
	}
	s = session_spawn(a, id, S_EXEC, req->argv, env, req->cwd, req, req->flags & GUEST_EXEC_STDIN,
			  req->timeout_ms);
	if (s) {
		s->detached = req->flags & GUEST_EXEC_DETACH;
		if (req->log_dir && (s->log_dir = strdup(req->log_dir)) == NULL)
			agent_log("id %u: out of memory for the log dir", id);
	}
out:
	free(with_home);
	free(home);
}

static void drop_stdin(struct agent *a, struct session *s)
{
	size_t left = s->in_len - s->in_off;

	/* Whatever the child will never read still counts as consumed for the window. */
	if (left)
		send_window(a, s->id, left);
	s->in_off = s->in_len = 0;
	close_fd(&s->fd_in);
}

void session_stdin(struct agent *a, struct session *s, const uint8_t *p, size_t n)
{
	size_t held = s->in_len - s->in_off;

	if (n == 0)
		return;
	if (s->fd_in < 0 || s->in_eof) {
		send_window(a, s->id, n);
		return;
	}
	/* Nothing queued: straight into the pipe, one copy fewer per byte (the
	 * guest's CPU is what a transfer waits on under TCG). */
	if (held == 0) {
		ssize_t w = write(s->fd_in, p, n);
		if (w > 0) {
			send_window(a, s->id, (size_t)w);
			p += w;
			n -= (size_t)w;
			if (n == 0)
				return;
		} else if (w < 0 && errno != EAGAIN && errno != EINTR) {
			send_window(a, s->id, n);
			close_fd(&s->fd_in);
			return;
		}
	}
	if (held + n > GUEST_STDIN_WINDOW) {
		agent_send_error(a, 0, 0, "stdin for id %u exceeds the %u byte window; data dropped", s->id,
				 GUEST_STDIN_WINDOW);
		return;
	}
	if (s->in_off > 0 && s->in_cap - s->in_len < n) {
		memmove(s->in, s->in + s->in_off, held);
		s->in_off = 0;
		s->in_len = held;
	}
	if (s->in_cap < held + n) {
		uint8_t *nb = realloc(s->in, GUEST_STDIN_WINDOW);
		if (nb == NULL) {
			agent_send_error(a, 0, ENOMEM, "out of memory for stdin of id %u", s->id);
			return;
		}
		s->in = nb;
		s->in_cap = GUEST_STDIN_WINDOW;
	}
	memcpy(s->in + s->in_len, p, n);
	s->in_len += n;
}

void session_stdin_eof(struct agent *a, struct session *s)
{
	s->in_eof = true;
	if (s->in_len == s->in_off)
		close_fd(&s->fd_in);
}

void session_kill(struct session *s, int sig)
{
	/* A reaped leader's pid may already belong to someone else. */
	if (!s->reaped)
		kill(-s->pid, sig);
}

void sessions_reap(struct agent *a)
{
	struct signalfd_siginfo si;
	pid_t pid;
	int st;

	while (read(a->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT)
			a->quit = true;
	while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
		for (unsigned i = 0; i < GUEST_MAX_SESSIONS; i++) {
			struct session *s = a->sess[i];
			if (s && s->pid == pid && !s->reaped) {
				s->reaped = true;
				s->status = st;
				if (s->log_dir)
					log_exit(s);
				s->quiet_since = agent_now_ms();
				drop_stdin(a, s);
			}
		}
	}
}

static void free_session(struct agent *a, struct session *s)
{
	for (unsigned i = 0; i < GUEST_MAX_SESSIONS; i++)
		if (a->sess[i] == s)
			a->sess[i] = NULL;
	close_fd(&s->fd_out);
	close_fd(&s->fd_err);
	close_fd(&s->fd_in);
	free(s->in);
	free(s->what);
	free(s->log_dir);
	free(s);
}

static void finish(struct agent *a, struct session *s)
{
	struct guest_exit ex = { .timed_out = s->timed_out };

	if (s->id == 0) {
		free_session(a, s);
		return;
	}
	if (WIFEXITED(s->status))
		ex.code = WEXITSTATUS(s->status);
	else if (WIFSIGNALED(s->status))
		ex.signal = WTERMSIG(s->status);
	if (s->kind != S_EXEC && (ex.code != 0 || ex.signal != 0 || s->timed_out)) {
		/* Transfers fail as a whole, with tar's own words. */
		while (s->errlen > 0 && (s->errcap[s->errlen - 1] == '\n' || s->errcap[s->errlen - 1] == ' '))
			s->errlen--;
		for (size_t i = 0; i < s->errlen; i++)
			if (s->errcap[i] == '\n' || s->errcap[i] == '\0')
				s->errcap[i] = ' ';
		agent_send_error(a, s->id, 0, "%s %s (%s %d)%s%.*s", s->what ? s->what : "transfer",
				 s->timed_out ? "timed out" : "failed", ex.signal ? "signal" : "exit",
				 ex.signal ? ex.signal : ex.code, s->errlen ? ": " : "", (int)s->errlen, s->errcap);
	} else {
		guest_encode_exit(&a->out, s->id, &ex);
	}
	if (a->verbose)
		agent_log("id %u: done (status 0x%x%s)", s->id, s->status, s->timed_out ? ", timed out" : "");
	free_session(a, s);
}

/* Read one chunk from a child pipe and forward or capture it; forwarded
 * data is read straight into its STDOUT/STDERR frame.  Returns the bytes read. */
static size_t pump_pipe(struct agent *a, struct session *s, int *fd, uint8_t type)
{
	bool capture = type == GUEST_F_STDERR && s->kind != S_EXEC;
	bool forward = s->id != 0 && !capture && !(type == GUEST_F_STDOUT && s->kind == S_UPLOAD);
	uint8_t scratch[4096], *dst = scratch;
	size_t start = 0, cap = sizeof(scratch);
	ssize_t n;

	if (forward) {
		start = guest_frame_begin(&a->out, type, s->id);
		dst = guest_wbuf_reserve(&a->out, GUEST_DATA_CHUNK);
		if (dst == NULL)
			return 0; /* out.failed: the loop reports it */
		cap = GUEST_DATA_CHUNK;
	}
	n = read(*fd, dst, cap);
	if (n <= 0) {
		if (forward)
			a->out.len = start;
		if (n == 0 || (errno != EAGAIN && errno != EINTR))
			close_fd(fd);
		return 0;
	}
	s->quiet_since = agent_now_ms();
	if (forward) {
		a->out.len += (size_t)n;
		guest_frame_end(&a->out, start);
	} else if (capture && s->errlen < AGENT_ERRCAP) {
		size_t take = (size_t)n < AGENT_ERRCAP - s->errlen ? (size_t)n : AGENT_ERRCAP - s->errlen;
		memcpy(s->errcap + s->errlen, dst, take);
		s->errlen += take;
	}
	return (size_t)n;
}

static void push_stdin(struct agent *a, struct session *s)
{
	ssize_t n = write(s->fd_in, s->in + s->in_off, s->in_len - s->in_off);

	if (n < 0) {
		if (errno == EAGAIN || errno == EINTR)
			return;
		/* EPIPE: the child closed its stdin; the rest is dropped. */
		drop_stdin(a, s);
		return;
	}
	s->in_off += (size_t)n;
	send_window(a, s->id, (size_t)n);
	if (s->in_off == s->in_len) {
		s->in_off = s->in_len = 0;
		if (s->in_eof)
			close_fd(&s->fd_in);
	}
}

void session_io(struct agent *a, struct session *s, short rev_out, short rev_err, short rev_in)
{
	/* A few chunks per wakeup while they come full: fewer polls under load. */
	if (rev_out & (POLLIN | POLLHUP | POLLERR))
		for (int k = 0; k < 8 && pump_pipe(a, s, &s->fd_out, GUEST_F_STDOUT) == GUEST_DATA_CHUNK &&
				agent_out_pending(a) < AGENT_OUT_HIGH;
		     k++)
			;
	if (rev_err & (POLLIN | POLLHUP | POLLERR))
		for (int k = 0; k < 8 && pump_pipe(a, s, &s->fd_err, GUEST_F_STDERR) == GUEST_DATA_CHUNK &&
				agent_out_pending(a) < AGENT_OUT_HIGH;
		     k++)
			;
	if (rev_in & (POLLOUT | POLLERR | POLLHUP))
		push_stdin(a, s);
	if (s->reaped && s->fd_out < 0 && s->fd_err < 0)
		finish(a, s);
}

void sessions_tick(struct agent *a)
{
	uint64_t now = agent_now_ms();
	bool backlog = agent_out_pending(a) >= AGENT_OUT_HIGH;

	for (unsigned i = 0; i < GUEST_MAX_SESSIONS; i++) {
		struct session *s = a->sess[i];
		if (s == NULL)
			continue;
		if (!s->reaped && s->deadline && now >= s->deadline && !s->timed_out) {
			s->timed_out = true;
			kill(-s->pid, SIGKILL);
			if (a->verbose)
				agent_log("id %u: timed out, killed process group %d", s->id, (int)s->pid);
		}
		if (!s->reaped)
			continue;
		/* Output waiting for the host is not silence. */
		if (backlog)
			s->quiet_since = now;
		if (now - s->quiet_since >= AGENT_LINGER_MS) {
			close_fd(&s->fd_out);
			close_fd(&s->fd_err);
		}
		if (s->fd_out < 0 && s->fd_err < 0)
			finish(a, s);
	}
}

void sessions_drain_orphans(struct agent *a)
{
	for (unsigned i = 0; i < GUEST_MAX_SESSIONS; i++) {
		struct session *s = a->sess[i];
		if (s == NULL || s->id != 0)
			continue;
		/* Bounded, so one chatty daemon cannot keep the agent here. */
		for (int k = 0; k < 16 && (s->fd_out >= 0 || s->fd_err >= 0); k++) {
			if (s->fd_out >= 0)
				pump_pipe(a, s, &s->fd_out, GUEST_F_STDOUT);
			if (s->fd_err >= 0)
				pump_pipe(a, s, &s->fd_err, GUEST_F_STDERR);
		}
	}
	sessions_tick(a);
}

int sessions_next_timeout(struct agent *a)
{
	uint64_t now = agent_now_ms(), best = UINT64_MAX;

	for (unsigned i = 0; i < GUEST_MAX_SESSIONS; i++) {
		struct session *s = a->sess[i];
		uint64_t t;
		if (s == NULL)
			continue;
		if (s->reaped)
			t = s->quiet_since + AGENT_LINGER_MS;
		else if (s->deadline && !s->timed_out)
			t = s->deadline;
		else
			continue;
		if (t < best)
			best = t;
	}
	if (best == UINT64_MAX)
		return -1;
	return best <= now ? 0 : (int)(best - now > 60000 ? 60000 : best - now);
}

void sessions_drop_all(struct agent *a)
{
	for (unsigned i = 0; i < GUEST_MAX_SESSIONS; i++) {
		struct session *s = a->sess[i];
		if (s == NULL)
			continue;
		if (s->detached && !s->reaped) {
			s->id = 0;
			drop_stdin(a, s);
			continue;
		}
		if (!s->reaped)
			kill(-s->pid, SIGKILL);
		free_session(a, s);
	}
}

void sessions_free_all(struct agent *a)
{
	for (unsigned i = 0; i < GUEST_MAX_SESSIONS; i++)
		if (a->sess[i])
			free_session(a, a->sess[i]);
}

/* proc.c — child processes of the VM layer: the one QEMU spawner (attached
 * or detached), tools such as qemu-img, and the registry of live VMs: on SIGINT/SIGTERM/SIGHUP the handler kills each QEMU and
 * unlinks the VM's files with async-signal-safe calls only, then lets the
 * signal take its default course so the exit status stays honest. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vm/internal.h"

#define MAX_LIVE 64

static struct vm_files *volatile live[MAX_LIVE];

static void block_signals(sigset_t *old)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, old);
}

void vm_registry_add(struct vm_files *f)
{
	sigset_t old;

	block_signals(&old);
	for (int i = 0; i < MAX_LIVE; i++) {
		if (live[i] == NULL) {
			live[i] = f;
			break;
		}
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
}

void vm_registry_remove(struct vm_files *f)
{
	sigset_t old;

	block_signals(&old);
	for (int i = 0; i < MAX_LIVE; i++)
		if (live[i] == f)
			live[i] = NULL;
	sigprocmask(SIG_SETMASK, &old, NULL);
}

static void on_signal(int sig)
{
	for (int i = 0; i < MAX_LIVE; i++) {
		struct vm_files *f = live[i];
		if (f == NULL)
			continue;
		if (f->pid > 0) {
			kill(f->pid, SIGKILL);
			waitpid(f->pid, NULL, 0);
		}
		for (int j = 0; j < VM_MAX_FILES && f->paths[j]; j++)
			unlink(f->paths[j]);
		rmdir(f->dir);
	}
	struct sigaction dfl;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigaction(sig, &dfl, NULL);
	raise(sig); /* delivered when the handler returns */
}

void vm_cleanup_on_signals(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigfillset(&sa.sa_mask); /* one cleanup at a time */
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
}

static void child_setup(int out_fd)
{
	int devnull = open("/dev/null", O_RDONLY);

	/* The terminal's ^C goes to kiln, which stops the VM itself; and
	 * setpriority(PRIO_PGRP) reaches every thread of QEMU. */
	setpgid(0, 0);
	if (devnull >= 0)
		dup2(devnull, 0);
	if (out_fd >= 0) {
		dup2(out_fd, 1);
		dup2(out_fd, 2);
	}
	/* Signals blocked or ignored by kiln must not leak into QEMU. */
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
}

/* The detached QEMU: the middle process makes it an orphan of init in its
 * own session (no signal to kiln or its terminal reaches it), and tells its
 * pid through the pipe. */
static void spawn_detached_child(char *const argv[], int out_fd, const struct vm_spawn_opts *o, int pfd)
{
	setsid();
	pid_t g = fork();
	if (g == 0) {
		child_setup(out_fd);
		if (o->tmpdir)
			setenv("TMPDIR", o->tmpdir, 1);
		execvp(argv[0], argv);
		dprintf(2, "kiln: cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	(void)!write(pfd, &g, sizeof(g));
	_exit(g > 0 ? 0 : 1);
}

pid_t vm_spawn(char *const argv[], const struct vm_spawn_opts *o, kiln_error **err)
{
	int fd = open(o->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600), pfd[2] = { -1, -1 }, status;
	pid_t parent = getpid(), pid, g = -1;

	if (fd < 0)
		return kiln_err_errno(err, errno, "open %s", o->log_path);
	if (o->detached && pipe2(pfd, O_CLOEXEC) < 0) {
		kiln_err_errno(err, errno, "pipe");
		close(fd);
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		kiln_err_errno(err, errno, "fork");
		g = -1;
		goto out;
	}
	if (pid == 0) {
		if (o->detached)
			spawn_detached_child(argv, fd, o, pfd[1]);
		child_setup(fd);
		/* PDEATHSIG: no VM outlives the kiln that started it */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent) /* kiln died before PDEATHSIG was armed */
			_exit(127);
		if (o->tmpdir)
			setenv("TMPDIR", o->tmpdir, 1);
		execvp(argv[0], argv);
		dprintf(2, "kiln: cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	if (!o->detached) {
		g = pid;
		goto out;
	}
	close(pfd[1]);
	pfd[1] = -1;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (read(pfd[0], &g, sizeof(g)) != (ssize_t)sizeof(g) || g <= 0)
		g = kiln_err(err, KILN_E_GENERIC, "could not start %s", argv[0]);
out:
	close(fd);
	if (pfd[0] >= 0)
		close(pfd[0]);
	if (pfd[1] >= 0)
		close(pfd[1]);
	return g;
}

unsigned long long vm_proc_start_time(pid_t pid)
{
	char path[64], *data = NULL, *p;
	size_t len = 0;
	unsigned long long start = 0;
	kiln_error *e = NULL;

	if (pid <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
	if (kiln_read_file(path, &data, &len, 4096, &e) < 0) {
		kiln_error_free(e);
		return 0;
	}
	/* Field 22 (starttime), counted after the command name's closing ')'. */
	p = strrchr(data, ')');
	if (p) {
		int field = 2;
		char state = 0;
		for (char *q = p + 1; *q; q++) {
			if (*q != ' ')
				continue;
			field++;
			if (field == 3)
				state = q[1];
			if (field == 22) {
				start = strtoull(q + 1, NULL, 10);
				break;
			}
		}
		if (state == 'Z' || state == 'X')
			start = 0; /* exited, not yet reaped */
	}
	free(data);
	return start;
}

double vm_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

void vm_nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

int vm_run_tool(char *const argv[], kiln_error **err)
{
	kiln_buf out = KILN_BUF_INIT;
	int pipefd[2], status = 0, rc = -1;
	pid_t pid;

	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return kiln_err_errno(err, errno, "pipe");
	pid = fork();
	if (pid < 0) {
		close(pipefd[0]);
		close(pipefd[1]);
		return kiln_err_errno(err, errno, "fork");
	}
	if (pid == 0) {
		child_setup(pipefd[1]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execvp(argv[0], argv);
		dprintf(2, "cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(pipefd[1]);
	for (;;) {
		char chunk[4096];
		ssize_t n = read(pipefd[0], chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (out.len < 8192)
			kiln_buf_add(&out, chunk, (size_t)n);
	}
	close(pipefd[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	while (out.len > 0 && (out.buf[out.len - 1] == '\n' || out.buf[out.len - 1] == '\r'))
		out.buf[--out.len] = '\0';
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		rc = 0;
	else if (WIFEXITED(status))
		kiln_err(err, KILN_E_GENERIC, "%s exited with status %d: %s", argv[0], WEXITSTATUS(status), out.buf);
	else
		kiln_err(err, KILN_E_GENERIC, "%s was killed by signal %d", argv[0], WTERMSIG(status));
	kiln_buf_free(&out);
	return rc;
}

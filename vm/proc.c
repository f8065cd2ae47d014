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
#include <sys/resource.h>
#include <sys/syscall.h>
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
			kiln_waitpid(f->pid, NULL, 0);
		}
		for (int j = 0; j < VM_MAX_FILES && f->paths[j]; j++)
			unlink(f->paths[j]);
		for (int j = 0; j < 2; j++)
			if (f->subdirs[j])
				rmdir(f->subdirs[j]);
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
	kiln_child_signals_reset();
}

static bool jailed(const struct vm_spawn_opts *o)
{
	return o->jail && o->jail->on;
}

/* fork(), or a clone into the jail's new namespaces and its cgroups: the
 * child is pid 1 of its pid namespace and the returned pid is the host's. */
static pid_t spawn_fork(const struct vm_spawn_opts *o, struct vm_jail_joined *cg)
{
	if (!jailed(o))
		return fork();
	return vm_jail_fork(o->jail, vm_jail_clone_flags(o->jail), false, cg);
}

/* PDEATHSIG: no VM outlives the kiln that started it; and if kiln died
 * before it was armed, the error pipe's reader is gone (a jailed QEMU is
 * pid 1 of its namespace: getppid cannot tell). */
static void die_with_kiln(int errfd)
{
	struct pollfd p = { .fd = errfd, .events = 0 };

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (poll(&p, 1, 0) > 0 && (p.revents & POLLERR))
		_exit(127);
}

/* The process that becomes QEMU.  errfd (close-on-exec) gets the reason if
 * it does not get to exec. */
static void spawn_child(char *const argv[], int out_fd, const struct vm_spawn_opts *o, const struct vm_jail_joined *cg,
			int errfd)
{
	child_setup(out_fd);
	if (!o->detached)
		die_with_kiln(errfd);
	/* no core dump: a QEMU killed by a signal (SIGBUS from a lazy
	 * template's unreachable memory) would write the guest's RAM, up to
	 * gigabytes of a sandbox's data, wherever core_pattern says */
	struct rlimit no_core = { 0, 0 };
	setrlimit(RLIMIT_CORE, &no_core);
	if (jailed(o)) {
		vm_jail_enter(o->jail, cg, errfd);
		/* the switch to the VM's uid cleared the parent-death signal
		 * (the kernel does on a change of credentials): armed again */
		if (!o->detached)
			die_with_kiln(errfd);
	}
	for (int i = 0; i < 3; i++) {
		int kfd = o->keep_fd[i], fl = kfd > 0 ? fcntl(kfd, F_GETFD) : 0;
		if (kfd > 0 && (fl < 0 || fcntl(kfd, F_SETFD, fl & ~FD_CLOEXEC) < 0)) {
			dprintf(errfd, "keeping fd %d for QEMU: %s", kfd, strerror(errno));
			_exit(127);
		}
	}
	if (o->tmpdir)
		setenv("TMPDIR", o->tmpdir, 1);
	execvp(argv[0], argv);
	dprintf(errfd, "cannot run %s: %s", argv[0], strerror(errno));
	_exit(127);
}

pid_t vm_spawn(char *const argv[], const struct vm_spawn_opts *o, kiln_error **err)
{
	int fd = open(o->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600), pfd[2] = { -1, -1 };
	int efd[2] = { -1, -1 }, status;
	pid_t pid, g = -1;
	char why[512];
	ssize_t n;

	if (fd < 0)
		return kiln_err_errno(err, errno, "open %s", o->log_path);
	if (pipe2(efd, O_CLOEXEC) < 0 || (o->detached && pipe2(pfd, O_CLOEXEC) < 0)) {
		kiln_err_errno(err, errno, "pipe");
		goto out;
	}
	double t0 = kiln_now_ms();
	struct vm_jail_joined cg = { 0 };
	pid = o->detached ? fork() : spawn_fork(o, &cg);
	if (pid < 0) {
		kiln_err_errno(err, errno, jailed(o) ? "clone into the jail's namespaces and cgroup (the jail needs mount, "
						      "pid, IPC, UTS and network namespaces; or run with --unconfined)"
						    : "fork");
		goto out;
	}
	if (pid == 0) {
		close(efd[0]);
		if (!o->detached)
			spawn_child(argv, fd, o, &cg, efd[1]);
		/* The middle process makes QEMU an orphan of init in its own
		 * session (no signal to kiln or its terminal reaches it) and
		 * tells its pid through the pipe. */
		setsid();
		pid_t c = spawn_fork(o, &cg);
		if (c == 0)
			spawn_child(argv, fd, o, &cg, efd[1]);
		if (c < 0)
			dprintf(efd[1], "%s: %s",
				jailed(o) ? "clone into the jail's namespaces and cgroup (the jail needs mount, pid, IPC, "
					    "UTS and network namespaces; or run with --unconfined)"
					  : "fork",
				strerror(errno));
		(void)!write(pfd[1], &c, sizeof(c));
		_exit(c > 0 ? 0 : 1);
	}
	close(efd[1]);
	efd[1] = -1;
	if (o->detached) {
		close(pfd[1]);
		pfd[1] = -1;
		kiln_waitpid(pid, &status, 0);
		if (read(pfd[0], &g, sizeof(g)) != (ssize_t)sizeof(g) || g <= 0)
			g = -1;
	} else {
		g = pid;
	}
	/* EOF: QEMU was exec'd (the pipe is close-on-exec) */
	n = kiln_read_full(efd[0], why, sizeof(why) - 1);
	/* the jail's own work (namespaces, cgroup, mounts, privileges) is in here */
	kiln_debug("vm: %s exec'd %.1f ms after the fork (%s)", argv[0], kiln_now_ms() - t0,
		   jailed(o) ? "jailed" : "unconfined");
	if (n > 0 || g <= 0) {
		why[n > 0 ? n : 0] = '\0';
		kiln_err(err, KILN_E_GENERIC, "could not start %s%s%s", argv[0], n > 0 ? ": " : "", why);
		if (g > 0 && !o->detached)
			kiln_waitpid(g, &status, 0);
		g = -1;
	}
out:
	close(fd);
	for (int i = 0; i < 2; i++) {
		if (pfd[i] >= 0)
			close(pfd[i]);
		if (efd[i] >= 0)
			close(efd[i]);
	}
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

int vm_run_tool(char *const argv[], kiln_error **err)
{
	kiln_buf out = KILN_BUF_INIT;
	/* the head of its output is enough for the error */
	int rc = vm_run_tool_out(argv, &out, 8192, err);

	kiln_buf_free(&out);
	return rc;
}

int vm_run_tool_out(char *const argv[], kiln_buf *out_, size_t max, kiln_error **err)
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
	kiln_read_all(pipefd[0], &out, max); /* a read error ends it early */
	close(pipefd[0]);
	kiln_waitpid(pid, &status, 0);
	while (out.len > 0 && (out.buf[out.len - 1] == '\n' || out.buf[out.len - 1] == '\r'))
		out.buf[--out.len] = '\0';
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		rc = 0;
	else if (WIFEXITED(status))
		kiln_err(err, KILN_E_GENERIC, "%s exited with status %d: %s", argv[0], WEXITSTATUS(status), out.buf);
	else
		kiln_err(err, KILN_E_GENERIC, "%s was killed by signal %d", argv[0], WTERMSIG(status));
	kiln_buf_free(out_);
	*out_ = out;
	return rc;
}

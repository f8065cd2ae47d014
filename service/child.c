/* child.c — the processes a build runs (`kiln build --json`, `kiln push`):
 * each in a process group of its own that dies with the server, its stdout
 * a pipe the worker reads, its stderr an unnamed file.  A worker keeps one
 * such `kiln --wait-job` started ahead, its exec and dynamic linking (tens
 * of ms on a loaded host) already paid, waiting on a socket for its job —
 * the argv, the environment that differs and the directory — so a build
 * claimed starts at once.  One job per process: it never serves another. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "regclient/regclient.h"
#include "service/internal.h"

/* An unnamed file for a child's stderr in the service's state directory. */
static int err_file(svc *s, kiln_error **err)
{
	char *dir = kiln_path_join(s->state_dir, "work");
	int fd = kiln_mkdir_p(dir, 0700, err) < 0 ? -1 : open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd < 0 && (err == NULL || *err == NULL)) {
		/* no O_TMPFILE (some file systems): a named one, unlinked at once */
		char *p = kiln_xasprintf("%s/stderr-XXXXXX", dir);
		fd = mkostemp(p, O_CLOEXEC);
		if (fd >= 0)
			unlink(p);
		else
			kiln_err_errno(err, errno, "create %s", p);
		free(p);
	}
	free(dir);
	return fd;
}

/* A team's process must not find the server's own registry credentials:
 * kiln's lookup (regclient/cred.c) falls back from $KILN_HOME's auth file to
 * $REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json and
 * $HOME/.docker/config.json, which are the operator's, so a `FROM
 * private.example/img` of any team pulled with whatever the operator logged
 * in to.  HOME becomes the team's KILN_HOME (nothing of the operator's
 * there); without one, it goes. */
static void team_env(void)
{
	const char *kh = getenv("KILN_HOME");

	unsetenv("REGISTRY_AUTH_FILE");
	unsetenv("XDG_RUNTIME_DIR");
	unsetenv("DOCKER_CONFIG");
	if (kh && *kh)
		setenv("HOME", kh, 1);
	else
		unsetenv("HOME");
}

/* fork + exec argv: stdin from in (or /dev/null), stdout to a new pipe
 * (*out), stderr to *errfd (made here); env: NAME=VALUE to set, NAME alone
 * to unset; keep: descriptors it inherits. */
static pid_t spawn(svc *s, char *const *argv, const char *const *env, const char *cwd, int in, const int *keep,
		   size_t nkeep, int *out, int *errfd, kiln_error **err)
{
	int p[2], efd = err_file(s, err);
	pid_t pid;

	if (efd < 0)
		return -1;
	if (pipe2(p, O_CLOEXEC) < 0) {
		close(efd);
		return kiln_err_errno(err, errno, "pipe");
	}
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		close(efd);
		return kiln_err_errno(err, errno, "fork");
	}
	if (pid == 0) {
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(p[1], 1);
		dup2(efd, 2);
		int nul = in >= 0 ? in : open("/dev/null", O_RDONLY);
		if (nul >= 0)
			dup2(nul, 0);
		for (size_t i = 0; i < nkeep; i++)
			fcntl(keep[i], F_SETFD, 0);
		unsetenv("KILN_BUILDER");
		for (size_t i = 0; env && env[i]; i++) {
			const char *eq = strchr(env[i], '=');
			if (eq) {
				char *name = strndup(env[i], (size_t)(eq - env[i]));
				if (name)
					setenv(name, eq + 1, 1);
				free(name);
			} else {
				unsetenv(env[i]);
			}
		}
		team_env();
		if (cwd && chdir(cwd) < 0)
			_exit(126);
		execv(s->exe, argv);
		_exit(127);
	}
	setpgid(pid, pid);
	close(p[1]);
	*out = p[0];
	*errfd = efd;
	return pid;
}

/* The kiln binary's identity: a ready child of an older one is not used. */
static void exe_id(const svc *s, struct stat *st)
{
	if (stat(s->exe, st) < 0)
		memset(st, 0, sizeof(*st));
}

int svc_ready_start(svc *s, struct svc_ready *rd, kiln_error **err)
{
	int sp[2];
	char *argv[] = { s->exe, (char *)"--wait-job", NULL };

	memset(rd, 0, sizeof(*rd));
	rd->job = rd->out = rd->errfd = -1;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
		return kiln_err_errno(err, errno, "socketpair");
	exe_id(s, &rd->exe);
	rd->pid = spawn(s, argv, NULL, NULL, sp[1], NULL, 0, &rd->out, &rd->errfd, err);
	close(sp[1]);
	if (rd->pid < 0) {
		close(sp[0]);
		rd->pid = 0;
		return -1;
	}
	rd->job = sp[0];
	return 0;
}

void svc_ready_stop(struct svc_ready *rd)
{
	if (rd == NULL || rd->pid <= 0)
		return;
	close(rd->job); /* it reads the end of its job: exits without one */
	close(rd->out);
	close(rd->errfd);
	if (kill(-rd->pid, 0) == 0) {
		for (int i = 0; i < 20 && waitpid(rd->pid, NULL, WNOHANG) == 0; i++)
			kiln_sleep_ms(10);
		if (waitpid(rd->pid, NULL, WNOHANG) == 0) {
			kill(-rd->pid, SIGKILL);
			waitpid(rd->pid, NULL, 0);
		}
	} else {
		waitpid(rd->pid, NULL, WNOHANG);
	}
	memset(rd, 0, sizeof(*rd));
	rd->pid = 0;
}

static int send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Hand the job to the ready child: 0 it took it, -1 it is gone or stale
 * (the caller starts one afresh). */
static int ready_take(svc *s, struct svc_ready *rd, char *const *argv, const char *const *env, const char *cwd,
		      struct svc_proc *p)
{
	struct stat now;
	json_t *j = json_pack("{s:[],s:{},s:s}", "argv", "env", "cwd", cwd);
	char *text;
	int ret = -1;

	exe_id(s, &now);
	if (now.st_ino != rd->exe.st_ino || now.st_dev != rd->exe.st_dev || now.st_mtim.tv_sec != rd->exe.st_mtim.tv_sec ||
	    now.st_mtim.tv_nsec != rd->exe.st_mtim.tv_nsec || waitpid(rd->pid, NULL, WNOHANG) != 0) {
		json_decref(j);
		return -1;
	}
	for (size_t i = 0; argv[i]; i++)
		json_array_append_new(json_object_get(j, "argv"), json_string(argv[i]));
	for (size_t i = 0; env && env[i]; i++) {
		const char *eq = strchr(env[i], '=');
		char *name = eq ? kiln_xstrndup(env[i], (size_t)(eq - env[i])) : kiln_xstrdup(env[i]);
		json_object_set_new(json_object_get(j, "env"), name, eq ? json_string(eq + 1) : json_null());
		free(name);
	}
	text = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (text && send_all(rd->job, text, strlen(text)) == 0 && shutdown(rd->job, SHUT_WR) == 0) {
		p->pid = rd->pid;
		p->out = rd->out;
		p->errfd = rd->errfd;
		close(rd->job);
		memset(rd, 0, sizeof(*rd));
		rd->pid = 0;
		ret = 0;
	}
	free(text);
	return ret;
}

int svc_proc_start(svc *s, struct svc_ready *rd, char *const *argv, const char *const *env, const char *cwd,
		   const int *keep, size_t nkeep, struct svc_proc *p, kiln_error **err)
{
	memset(p, 0, sizeof(*p));
	p->out = p->errfd = -1;
	/* descriptors to inherit (secrets) need a child forked for them */
	if (rd && rd->pid > 0 && nkeep == 0) {
		if (ready_take(s, rd, argv, env, cwd, p) == 0)
			return 0;
		svc_ready_stop(rd);
	}
	p->pid = spawn(s, argv, env, cwd, -1, keep, nkeep, &p->out, &p->errfd, err);
	return p->pid < 0 ? -1 : 0;
}

/* ---- the child's side: `kiln --wait-job` ---- */

int svc_child_wait(int fd, kiln_strv *argv, kiln_error **err)
{
	kiln_buf in = KILN_BUF_INIT;
	char buf[16 << 10];
	ssize_t n;
	json_t *j = NULL, *v;
	const char *k, *cwd;
	size_t i;
	int ret = -1;

	/* what every build does first, done while there is none: the HTTP
	 * transport's set-up (libcurl, OpenSSL's configuration) */
	rc_global_init();
	while ((n = read(fd, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			kiln_err_errno(err, errno, "read the job");
			goto out;
		}
		kiln_buf_add(&in, buf, (size_t)n);
		if (in.len > (64u << 20)) {
			kiln_err(err, KILN_E_LIMIT, "the job is too large");
			goto out;
		}
	}
	if (in.len == 0) { /* the server let it go without a job */
		ret = 1;
		goto out;
	}
	j = json_loadb(in.buf, in.len, 0, NULL);
	cwd = json_string_value(json_object_get(j, "cwd"));
	if (!json_is_array(json_object_get(j, "argv")) || json_array_size(json_object_get(j, "argv")) < 2 || !cwd) {
		kiln_err(err, KILN_E_INVALID, "the job is not {argv, env, cwd}");
		goto out;
	}
	json_object_foreach(json_object_get(j, "env"), k, v) {
		if (json_is_string(v))
			setenv(k, json_string_value(v), 1);
		else
			unsetenv(k);
	}
	team_env(); /* its job's KILN_HOME is known only now */
	if (chdir(cwd) < 0) {
		kiln_err_errno(err, errno, "cd %s", cwd);
		goto out;
	}
	json_array_foreach(json_object_get(j, "argv"), i, v)
		kiln_strv_push(argv, json_string_value(v) ? json_string_value(v) : "");
	int nul = open("/dev/null", O_RDONLY);
	if (nul >= 0 && nul != fd) {
		dup2(nul, fd);
		close(nul);
	}
	ret = 0;
out:
	json_decref(j);
	kiln_buf_free(&in);
	return ret;
}

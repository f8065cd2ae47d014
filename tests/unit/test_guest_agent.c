/* test_guest_agent.c — the real bin/kiln-agent run on the host over a
 * socketpair (the guest's port is a plain byte stream too) and driven by the
 * host client: handshake, exec with separate streams, large output, stdin,
 * env/cwd/user, timeout, kill, signals, concurrency, fd and zombie hygiene. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kiln.h"
#include "guest/guest.h"
#include "test.h"

static pid_t agent_pid;
static guest_conn *conn;

static const char *agent_bin(void)
{
	const char *p = getenv("KILN_AGENT");
	return p && *p ? p : "bin/kiln-agent";
}

static guest_conn *start_agent(void)
{
	int sv[2];
	kiln_error *err = NULL;
	guest_conn *c;

	if (access(agent_bin(), X_OK) != 0) {
		printf("# %s missing: run make all first\n", agent_bin());
		return NULL;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return NULL;
	agent_pid = fork();
	if (agent_pid == 0) {
		dup2(sv[1], 3);
		execl(agent_bin(), agent_bin(), "--fd", "3", (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	c = guest_conn_from_fd(sv[0], 10000, &err);
	if (c == NULL) {
		printf("# connect: %s\n", kiln_error_message(err));
		kiln_error_free(err);
	}
	return c;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct out2 {
	kiln_buf out, err;
};

static void on_out(void *user, const void *data, size_t len)
{
	kiln_buf_add(&((struct out2 *)user)->out, data, len);
}

static void on_err(void *user, const void *data, size_t len)
{
	kiln_buf_add(&((struct out2 *)user)->err, data, len);
}

static void out2_free(struct out2 *o)
{
	kiln_buf_free(&o->out);
	kiln_buf_free(&o->err);
}

/* Run a shell script; its error message (if any) goes to *error. */
static int sh(const char *script, struct guest_exec_opts *base, const void *in, size_t inlen, struct out2 *o,
	      struct guest_result *res, char **error)
{
	struct guest_exec_opts opts;
	kiln_error *err = NULL;
	int rc;

	if (base)
		opts = *base;
	else
		guest_exec_opts_init(&opts);
	if (!opts.argv)
		opts.shell = script;
	opts.on_stdout = on_out;
	opts.on_stderr = on_err;
	opts.user = o;
	rc = guest_exec(conn, &opts, in, inlen, 30000, res, &err);
	if (rc < 0) {
		printf("#   exec: %s\n", kiln_error_message(err));
		if (error)
			*error = kiln_xstrdup(kiln_error_message(err));
	}
	kiln_error_free(err);
	return rc;
}

static void test_handshake(void)
{
	kiln_error *err = NULL;

	CHECK_INT(guest_conn_version(conn), GUEST_PROTO_VERSION);
	CHECK((guest_conn_caps(conn) & (GUEST_CAP_EXEC | GUEST_CAP_STDIN | GUEST_CAP_KILL | GUEST_CAP_STAT)) ==
	      (GUEST_CAP_EXEC | GUEST_CAP_STDIN | GUEST_CAP_KILL | GUEST_CAP_STAT));
	CHECK(strncmp(guest_conn_agent(conn), "kiln-agent ", 11) == 0);
	CHECK_INT(guest_ping(conn, 5000, &err), 0);
	CHECK_INT(guest_ping(conn, 5000, &err), 0);
	kiln_error_free(err);
}

static void test_streams_apart(void)
{
	struct out2 o = { KILN_BUF_INIT, KILN_BUF_INIT };
	struct guest_result res;

	CHECK_INT(sh("echo out1; echo err1 >&2; echo out2; exit 3", NULL, NULL, 0, &o, &res, NULL), 0);
	CHECK_STR(o.out.buf, "out1\nout2\n");
	CHECK_STR(o.err.buf, "err1\n");
	CHECK_INT(res.exit_code, 3);
	CHECK_INT(res.signal, 0);
	CHECK(!res.timed_out);
	out2_free(&o);
}

static void test_argv(void)
{
	const char *argv[] = { "printf", "[%s]", "a b", "", "c", NULL };
	struct guest_exec_opts opts;
	struct out2 o = { KILN_BUF_INIT, KILN_BUF_INIT };
	struct guest_result res;

	guest_exec_opts_init(&opts);
	opts.argv = argv;
	CHECK_INT(sh(NULL, &opts, NULL, 0, &o, &res, NULL), 0);
	CHECK_STR(o.out.buf, "[a b][][c]");
	CHECK_INT(res.exit_code, 0);
	out2_free(&o);
}

static void test_large_output(void)
{
	struct out2 o = { KILN_BUF_INIT, KILN_BUF_INIT };
	struct guest_result res;
	kiln_buf want = KILN_BUF_INIT;

	/* ~6.9 MB on stdout and 1 MB on stderr at the same time. */
	CHECK_INT(sh("head -c 1048576 /dev/zero >&2 & seq 1 1000000; wait", NULL, NULL, 0, &o, &res, NULL), 0);
	for (int i = 1; i <= 1000000; i++)
		kiln_buf_addf(&want, "%d\n", i);
	CHECK_INT(o.out.len, want.len);
	CHECK(o.out.len == want.len && memcmp(o.out.buf, want.buf, want.len) == 0);
	CHECK_INT(o.err.len, 1048576);
	CHECK_INT(res.exit_code, 0);
	kiln_buf_free(&want);
	out2_free(&o);
}

static void test_stdin(void)
{
	struct out2 o = { KILN_BUF_INIT, KILN_BUF_INIT };
	struct guest_result res;
	size_t n = 3 * 1024 * 1024 + 17; /* several flow-control windows */
	char *in = kiln_xmalloc(n);

	for (size_t i = 0; i < n; i++)
		in[i] = (char)('a' + (i * 7 + i / 4096) % 26);
	CHECK_INT(sh("cat", NULL, in, n, &o, &res, NULL), 0);
	CHECK_INT(o.out.len, n);
	CHECK(o.out.len == n && memcmp(o.out.buf, in, n) == 0);
	out2_free(&o);
	/* A command that ignores its stdin still finishes. */
	CHECK_INT(sh("exit 0", NULL, in, n, &o, &res, NULL), 0);
	CHECK_INT(res.exit_code, 0);
	out2_free(&o);
	/* Without stdin data the process reads EOF at once. */
	CHECK_INT(sh("wc -c", NULL, NULL, 0, &o, &res, NULL), 0);
	CHECK_STR(o.out.buf, "0\n");
	out2_free(&o);
	free(in);
}

static void test_stdin_interactive(void)
{
	struct guest_exec_opts opts;
	struct out2 o = { KILN_BUF_INIT, KILN_BUF_INIT };
	struct guest_result res;
	kiln_error *err = NULL;
	guest_proc *p;

	guest_exec_opts_init(&opts);
	opts.shell = "while read l; do echo \"got $l\"; done; echo bye";
	opts.want_stdin = true;
	opts.on_stdout = on_out;
	opts.user = &o;
	p = guest_spawn(conn, &opts, 5000, &err);
	CHECK(p != NULL);
	if (p == NULL)
		goto out;
	CHECK(guest_proc_pid(p) > 0);
	CHECK_INT(guest_proc_write(p, "one\n", 4, 5000, &err), 0);
	/* The answer arrives before stdin is closed: streams flow as produced. */
	for (int i = 0; i < 100 && o.out.len < 8; i++)
		guest_proc_wait(p, 50, NULL, &err), kiln_error_clear(&err);
	CHECK_STR(o.out.buf, "got one\n");
	CHECK(!guest_proc_done(p));
	CHECK_INT(guest_proc_write(p, "two\n", 4, 5000, &err), 0);
	CHECK_INT(guest_proc_close_stdin(p, &err), 0);
	CHECK_INT(guest_proc_wait(p, 10000, &res, &err), 0);
	CHECK_STR(o.out.buf, "got one\ngot two\nbye\n");
	guest_proc_free(p);
out:
	kiln_error_free(err);
	out2_free(&o);
}

static void test_env_cwd(void)
{
	const char *env[] = { "FOO=bar baz", "PATH=/usr/bin:/bin", NULL };
	struct guest_exec_opts opts;
	struct out2 o = { KILN_BUF_INIT, KILN_BUF_INIT };
	struct guest_result res;

	guest_exec_opts_init(&opts);
	opts.env = env;
	opts.cwd = "/usr";
	CHECK_INT(sh("echo \"$FOO\"; pwd; echo \"$PATH\"", &opts, NULL, 0, &o, &res, NULL), 0);
	CHECK_STR(o.out.buf, "bar baz\n/usr\n/usr/bin:/bin\n");
	out2_free(&o);
	/* No env given: only the default PATH, nothing leaks from the agent's own. */
	setenv("KILN_TEST_LEAK", "1", 1);
	CHECK_INT(sh("env | grep -v '^PWD=' | grep -v '^SHLVL=' | grep -v '^_='; pwd", NULL, NULL, 0, &o, &res, NULL), 0);
	CHECK_STR(o.out.buf, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n/\n");
	out2_free(&o);
}

static void test_user(void)
{
	static const uint32_t groups[] = { 65534, 4 };
	struct guest_exec_opts opts;
	struct out2 o = { KILN_BUF_INIT, KILN_BUF_INIT };
	struct guest_result res;

	if (geteuid() != 0)
		SKIP("needs root to switch users");
	CHECK(guest_conn_caps(conn) & GUEST_CAP_SETUID);
	guest_exec_opts_init(&opts);
	opts.uid = 65534;
	opts.gid = 65534;
	CHECK_INT(sh("id -u; id -g; id -G", &opts, NULL, 0, &o, &res, NULL), 0);
	CHECK_STR(o.out.buf, "65534\n65534\n65534\n");
	out2_free(&o);
	opts.uid = 1234;
	opts.gid = 5678;
	opts.groups = groups;
	opts.ngroups = 2;
	CHECK_INT(sh("id -u; id -g; id -G", &opts, NULL, 0, &o, &res, NULL), 0);
	CHECK_STR(o.out.buf, "1234\n5678\n5678 4 65534\n");
	out2_free(&o);
}

static void test_timeout(void)
{
	struct guest_exec_opts opts;
	struct out2 o = { KILN_BUF_INIT, KILN_BUF_INIT };
	struct guest_result res;
	uint64_t t0 = now_ms();

	guest_exec_opts_init(&opts);
	opts.timeout_ms = 300;
	/* The background sleep is in the process group too and must die with it. */
	CHECK_INT(sh("echo started; sleep 30 & sleep 30", &opts, NULL, 0, &o, &res, NULL), 0);
	CHECK(res.timed_out);
	CHECK_INT(res.signal, SIGKILL);
	CHECK_STR(o.out.buf, "started\n");
	CHECK(now_ms() - t0 < 5000);
	out2_free(&o);
}

static void test_kill_and_signal(void)
{
	struct guest_exec_opts opts;
	struct guest_result res;
	struct out2 o = { KILN_BUF_INIT, KILN_BUF_INIT };
	kiln_error *err = NULL;
	guest_proc *p;

	guest_exec_opts_init(&opts);
	opts.shell = "sleep 30";
	p = guest_spawn(conn, &opts, 5000, &err);
	CHECK(p != NULL);
	if (p) {
		CHECK_INT(guest_proc_kill(p, SIGTERM, &err), 0);
		CHECK_INT(guest_proc_wait(p, 5000, &res, &err), 0);
		CHECK_INT(res.signal, SIGTERM);
		CHECK(!res.timed_out);
		guest_proc_free(p);
	}
	/* A process that dies of a signal by itself. */
	CHECK_INT(sh("kill -SEGV $$", NULL, NULL, 0, &o, &res, NULL), 0);
	CHECK_INT(res.signal, SIGSEGV);
	out2_free(&o);
	/* Waiting with a short host timeout fails cleanly and the process stays killable. */
	p = guest_spawn(conn, &opts, 5000, &err);
	CHECK(p != NULL);
	if (p) {
		CHECK_INT(guest_proc_wait(p, 100, &res, &err), -1);
		CHECK(err && strstr(kiln_error_message(err), "agent exec: no exit"));
		kiln_error_clear(&err);
		guest_proc_free(p); /* kills it */
	}
	kiln_error_free(err);
}

static void test_detach_handle(void)
{
	struct guest_exec_opts opts;
	kiln_error *err = NULL;
	guest_proc *p;
	pid_t pid;

	/* Freeing the handle of a detached process leaves it running ... */
	guest_exec_opts_init(&opts);
	opts.shell = "exec sleep 30";
	opts.detach = true;
	p = guest_spawn(conn, &opts, 5000, &err);
	CHECK(p != NULL);
	if (p == NULL)
		return;
	pid = guest_proc_pid(p);
	guest_proc_free(p);
	CHECK_INT(guest_ping(conn, 5000, &err), 0);
	CHECK(kill(pid, 0) == 0);
	kill(pid, SIGKILL);
	/* ... while an ordinary one is killed. */
	opts.detach = false;
	p = guest_spawn(conn, &opts, 5000, &err);
	CHECK(p != NULL);
	if (p == NULL)
		return;
	pid = guest_proc_pid(p);
	guest_proc_free(p);
	for (int i = 0; i < 100 && kill(pid, 0) == 0; i++) {
		usleep(20000);
		guest_ping(conn, 5000, &err);
	}
	CHECK(kill(pid, 0) < 0);
	kiln_error_free(err);
}

static void test_concurrent(void)
{
	enum { N = 6 };
	struct out2 o[N];
	guest_proc *p[N];
	kiln_error *err = NULL;
	char script[256];

	for (int i = 0; i < N; i++) {
		struct guest_exec_opts opts;
		o[i] = (struct out2){ KILN_BUF_INIT, KILN_BUF_INIT };
		guest_exec_opts_init(&opts);
		snprintf(script, sizeof(script),
			 "for j in 1 2 3 4 5; do echo p%d-$j; echo e%d-$j >&2; sleep 0.0%d; done; exit %d", i, i, i, i);
		opts.shell = script;
		opts.on_stdout = on_out;
		opts.on_stderr = on_err;
		opts.user = &o[i];
		p[i] = guest_spawn(conn, &opts, 5000, &err);
		CHECK(p[i] != NULL);
	}
	/* Wait in reverse order: the others' output is dispatched meanwhile. */
	for (int i = N - 1; i >= 0; i--) {
		struct guest_result res;
		char want[256];
		if (p[i] == NULL)
			continue;
		CHECK_INT(guest_proc_wait(p[i], 20000, &res, &err), 0);
		CHECK_INT(res.exit_code, i);
		snprintf(want, sizeof(want), "p%d-1\np%d-2\np%d-3\np%d-4\np%d-5\n", i, i, i, i, i);
		CHECK_STR(o[i].out.buf, want);
		snprintf(want, sizeof(want), "e%d-1\ne%d-2\ne%d-3\ne%d-4\ne%d-5\n", i, i, i, i, i);
		CHECK_STR(o[i].err.buf, want);
		guest_proc_free(p[i]);
		out2_free(&o[i]);
	}
	kiln_error_free(err);
}

/* An agent on the host (--fd, --listen) must never set the host's clock or
 * hostname: it refuses IDENTITY, and does not announce the capability. */
static void test_identity_refused_on_host(void)
{
	struct guest_identity m = { .set_time = true, .time_sec = 1, .hostname = "nope" };
	kiln_error *err = NULL;

	CHECK((guest_conn_caps(conn) & GUEST_CAP_IDENTITY) == 0);
	CHECK_INT(guest_set_identity(conn, &m, true, 5000, &err), -1);
	CHECK(err && strstr(kiln_error_message(err), "only served by an agent on its virtio port"));
	kiln_error_clear(&err);
	CHECK_INT(guest_ping(conn, 5000, &err), 0); /* the connection goes on */
	kiln_error_clear(&err);
}

static void test_exec_errors(void)
{
	const char *argv[] = { "/nonexistent/prog", NULL };
	struct guest_exec_opts opts;
	struct out2 o = { KILN_BUF_INIT, KILN_BUF_INIT };
	struct guest_result res;
	kiln_error *err = NULL;
	char *msg = NULL;

	guest_exec_opts_init(&opts);
	opts.argv = argv;
	CHECK_INT(sh(NULL, &opts, NULL, 0, &o, &res, &msg), -1);
	CHECK(msg && strstr(msg, "agent exec: cannot execute /nonexistent/prog: No such file"));
	free(msg), msg = NULL;
	guest_exec_opts_init(&opts);
	opts.cwd = "/nonexistent-dir";
	CHECK_INT(sh("true", &opts, NULL, 0, &o, &res, &msg), -1);
	CHECK(msg && strstr(msg, "chdir /nonexistent-dir: No such file"));
	free(msg), msg = NULL;
	/* Both argv and a shell string is a usage error caught before sending. */
	guest_exec_opts_init(&opts);
	opts.argv = argv;
	opts.shell = "true";
	CHECK(guest_spawn(conn, &opts, 1000, &err) == NULL);
	CHECK(err && err->kind == KILN_E_USAGE);
	kiln_error_clear(&err);
	/* The connection is still fine afterwards. */
	CHECK_INT(guest_ping(conn, 5000, &err), 0);
	kiln_error_free(err);
	out2_free(&o);
}

static void test_no_fd_leaks(void)
{
	const char *argv[] = { "ls", "/proc/self/fd", NULL };
	struct guest_exec_opts opts;
	struct out2 o = { KILN_BUF_INIT, KILN_BUF_INIT };
	struct guest_result res;

	/* The program sees stdin, stdout and stderr, plus ls's own directory fd;
	 * nothing of the agent's and nothing the agent inherited. */
	guest_exec_opts_init(&opts);
	opts.argv = argv;
	CHECK_INT(sh(NULL, &opts, NULL, 0, &o, &res, NULL), 0);
	CHECK_STR(o.out.buf, "0\n1\n2\n3\n");
	out2_free(&o);
}

/* Processes in state Z whose parent is the agent. */
static int agent_zombies(void)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)) != NULL) {
		char path[300], buf[512];
		FILE *f;
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		f = fopen(path, "r");
		if (f == NULL)
			continue;
		if (fgets(buf, sizeof(buf), f)) {
			char *rp = strrchr(buf, ')');
			char state;
			int ppid;
			if (rp && sscanf(rp + 2, "%c %d", &state, &ppid) == 2 && ppid == agent_pid && state == 'Z')
				n++;
		}
		fclose(f);
	}
	if (d)
		closedir(d);
	return n;
}

static void test_reaps_orphans(void)
{
	struct out2 o = { KILN_BUF_INIT, KILN_BUF_INIT };
	struct guest_result res;

	/* The subshell's child is orphaned to the agent (a subreaper) and must be reaped. */
	CHECK_INT(sh("(sleep 0.2 >/dev/null 2>&1 &); exit 0", NULL, NULL, 0, &o, &res, NULL), 0);
	for (int i = 0; i < 30; i++) {
		kiln_error *err = NULL;
		usleep(50000);
		guest_ping(conn, 1000, &err);
		kiln_error_free(err);
	}
	CHECK_INT(agent_zombies(), 0);
	out2_free(&o);
}

static void test_clean_exit(void)
{
	int st = -1;

	guest_close(conn);
	conn = NULL;
	waitpid(agent_pid, &st, 0);
	/* The host going away ends the agent normally, not by a crash. */
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	conn = start_agent();
	if (conn == NULL) {
		printf("not ok - start the agent\n");
		return 1;
	}
	RUN(test_handshake);
	RUN(test_streams_apart);
	RUN(test_argv);
	RUN(test_large_output);
	RUN(test_stdin);
	RUN(test_stdin_interactive);
	RUN(test_env_cwd);
	RUN(test_user);
	RUN(test_timeout);
	RUN(test_kill_and_signal);
	RUN(test_detach_handle);
	RUN(test_concurrent);
	RUN(test_exec_errors);
	RUN(test_identity_refused_on_host);
	RUN(test_no_fd_leaks);
	RUN(test_reaps_orphans);
	RUN(test_clean_exit);
	return test_done();
}

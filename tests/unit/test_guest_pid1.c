/* test_guest_pid1.c — the agent as the guest sees it: PID 1 of its own pid
 * namespace (unshare), with its own /etc (passwd and group) bind-mounted
 * in.  Checks that orphans are reaped when the agent is PID 1 and that
 * "user[:group]" is resolved against the guest's files with docker's rules. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln.h"
#include "guest/guest.h"
#include "test.h"

static pid_t unshare_pid;
static guest_conn *conn;
static char *tmp;

static const char *agent_bin(void)
{
	const char *p = getenv("KILN_AGENT");
	return p && *p ? p : "bin/kiln-agent";
}

static guest_conn *start_agent(void)
{
	kiln_error *err = NULL;
	/* A private /etc, not bind mounts on the two files: a file bind mount is dissolved when the
	 * host renames a new /etc/passwd over it (useradd by anything else on the machine). */
	char *etc = kiln_path_join(tmp, "etc");
	char *passwd = kiln_path_join(etc, "passwd"), *group = kiln_path_join(etc, "group");
	char *script;
	int sv[2];
	guest_conn *c = NULL;

	static const char pw[] = "root:x:0:0:root:/root:/bin/sh\n"
				 "# a comment line and a broken one\n"
				 "broken:x\n"
				 "app:x:1000:1000:App:/home/app:/bin/sh\n"
				 "nohome:x:1001:1001::::\n";
	static const char gr[] = "root:x:0:\n"
				 "app:x:1000:\n"
				 "staff:x:50:other,app\n"
				 "extra:x:2000:app\n"
				 "unrelated:x:3000:other\n";

	if (mkdir(etc, 0755) < 0) {
		printf("# mkdir %s: %s\n", etc, strerror(errno));
		goto out;
	}
	if (kiln_write_atomic(passwd, pw, strlen(pw), 0644, &err) < 0 ||
	    kiln_write_atomic(group, gr, strlen(gr), 0644, &err) < 0)
		goto out;
	script = kiln_xasprintf("mount --bind '%s' /etc && exec '%s' --fd 3", etc, agent_bin());
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		goto out;
	unshare_pid = fork();
	if (unshare_pid == 0) {
		dup2(sv[1], 3);
		execlp("unshare", "unshare", "--mount", "--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c",
		       script, (char *)NULL);
		_exit(127);
	}
	free(script);
	close(sv[1]);
	c = guest_conn_from_fd(sv[0], 10000, &err);
out:
	if (err)
		printf("# %s\n", kiln_error_message(err));
	kiln_error_free(err);
	free(passwd);
	free(group);
	free(etc);
	return c;
}

static void on_out(void *user, const void *data, size_t len)
{
	kiln_buf_add(user, data, len);
}

/* Run a script as run_as (NULL: root); returns stdout, or the error text. */
static char *run(const char *script, const char *run_as, const char *const *env)
{
	struct guest_exec_opts o;
	struct guest_result res;
	kiln_buf out = KILN_BUF_INIT;
	kiln_error *err = NULL;

	guest_exec_opts_init(&o);
	o.shell = script;
	o.run_as = run_as;
	o.env = env;
	o.on_stdout = on_out;
	o.user = &out;
	if (guest_exec(conn, &o, NULL, 0, 10000, &res, &err) < 0) {
		kiln_buf_reset(&out);
		kiln_buf_addf(&out, "error: %s", kiln_error_message(err));
		kiln_error_free(err);
	}
	return kiln_buf_detach(&out);
}

#define CHECK_RUN(script, run_as, env, want)                   \
	do {                                                   \
		char *got_ = run(script, run_as, env);         \
		CHECK_STR(got_, want);                         \
		free(got_);                                    \
	} while (0)

static const char ids[] = "echo $(id -u) $(id -g) $(id -G | tr ' ' '\\n' | sort -n | tr '\\n' ' ')$HOME";

static void test_is_pid1(void)
{
	CHECK_RUN("cat /proc/1/comm", NULL, NULL, "kiln-agent\n");
}

static void test_reaps_as_pid1(void)
{
	char *z;

	/* Orphans land on PID 1, i.e. the agent; none may stay a zombie. */
	for (int i = 0; i < 5; i++)
		free(run("(sleep 0.05 &); (true &); exit 0", NULL, NULL));
	usleep(400000);
	z = run("for f in /proc/[0-9]*/stat; do read -r l < $f && set -- ${l##*) } && [ \"$1\" = Z ] && echo zombie; done; "
		"echo done",
		NULL, NULL);
	CHECK_STR(z, "done\n");
	free(z);
}

static void test_user_names(void)
{
	if (geteuid() != 0)
		SKIP("needs root");
	/* A named user: its uid, primary gid, memberships and home. */
	CHECK_RUN(ids, "app", NULL, "1000 1000 50 1000 2000 /home/app\n");
	/* An explicit group replaces the memberships. */
	CHECK_RUN(ids, "app:extra", NULL, "1000 2000 2000 /home/app\n");
	CHECK_RUN(ids, "app:50", NULL, "1000 50 50 /home/app\n");
	/* Numeric ids need not exist. */
	CHECK_RUN(ids, "4242", NULL, "4242 0 0 /\n");
	CHECK_RUN(ids, "4242:77", NULL, "4242 77 77 /\n");
	/* A numeric uid that exists is the user with that uid. */
	CHECK_RUN(ids, "1000", NULL, "1000 1000 50 1000 2000 /home/app\n");
	CHECK_RUN(ids, "nohome", NULL, "1001 1001 1001 /\n");
	CHECK_RUN(ids, "root", NULL, "0 0 0 /root\n");
}

static void test_user_home_given(void)
{
	const char *env[] = { "PATH=/usr/bin:/bin", "HOME=/custom", NULL };

	if (geteuid() != 0)
		SKIP("needs root");
	CHECK_RUN("echo $HOME", "app", env, "/custom\n");
}

static void test_user_errors(void)
{
	CHECK_RUN("true", "nosuch", NULL,
		  "error: agent exec: unable to find user nosuch: no matching entries in /etc/passwd");
	CHECK_RUN("true", "app:nogroup", NULL,
		  "error: agent exec: unable to find group nogroup: no matching entries in /etc/group");
	CHECK_RUN("true", ":1", NULL, "error: agent exec: empty user name in ':1'");
}

int main(void)
{
	kiln_error *err = NULL;
	int st;

	signal(SIGPIPE, SIG_IGN);
	if (geteuid() != 0 || system("unshare --mount --pid --fork true 2>/dev/null") != 0) {
		printf("ok - pid namespace tests # skip needs root and unshare --pid\n");
		return 0;
	}
	tmp = kiln_mkdtemp("kiln-test-pid1", &err);
	conn = tmp ? start_agent() : NULL;
	if (conn == NULL) {
		printf("not ok - start the agent in a pid namespace\n");
		return 1;
	}
	RUN(test_is_pid1);
	RUN(test_reaps_as_pid1);
	RUN(test_user_names);
	RUN(test_user_home_given);
	RUN(test_user_errors);
	guest_close(conn);
	waitpid(unshare_pid, &st, 0);
	kiln_rm_rf(tmp, &err);
	kiln_error_free(err);
	free(tmp);
	return test_done();
}

/* cmd_agent.c — `kiln agent`: talk to a guest agent directly through its
 * socket (a VM's agent.sock, or `kiln-agent --listen`) to debug a guest or
 * script one: exec, ping, stat, upload, download.  A thin wrapper over the
 * guest_* client; the protocol is in docs/agent-protocol.md. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "guest/guest.h"

struct common {
	const char *socket;
	int connect_ms;
};

static int connect_timeout(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	char *end;
	double v = strtod(arg, &end);

	if (end == arg || *end || v < 0 || v > 3600)
		return cli_usage_error(cmd, "bad --connect-timeout '%s'", arg);
	*(int *)opt->value = (int)(v * 1000);
	return 0;
}

/* --timeout SECS: more than 0, at most a day; into a double of seconds */
static int timeout_secs(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	char *end;
	double v = strtod(arg, &end);

	if (end == arg || *end || v <= 0 || v > 86400)
		return cli_usage_error(cmd, "bad --timeout '%s'", arg);
	*(double *)opt->value = v;
	return 0;
}

/* The options every sub-command takes. */
#define COMMON_OPTIONS(co)                                                                               \
	CLI_STRING(0, "socket", &(co)->socket, "PATH", "the agent's unix socket (required)"),             \
		CLI_CALLBACK(0, "connect-timeout", &(co)->connect_ms, "SECS", connect_timeout,           \
			     "wait this long for the socket and the agent (default 30)")

static guest_conn *open_conn(const struct kiln_command *cmd, const struct common *co, int *rc)
{
	kiln_error *err = NULL;
	guest_conn *c;

	if (co->socket == NULL) {
		*rc = cli_usage_error(cmd, "--socket PATH is required");
		return NULL;
	}
	c = guest_connect(co->socket, co->connect_ms, &err);
	if (c == NULL)
		*rc = cli_fail(err);
	return c;
}

/* ---- exec ----------------------------------------------------------------- */

static void to_fd(int fd, const void *data, size_t len)
{
	/* a closed stdout must not stop the command */
	(void)kiln_write_full(fd, data, len);
}

static void out_cb(void *user, const void *data, size_t len)
{
	to_fd(1, data, len);
}

static void err_cb(void *user, const void *data, size_t len)
{
	to_fd(2, data, len);
}

static int run_exec(const struct kiln_command *cmd, int argc, char **argv)
{
	struct common co = { NULL, 30000 };
	struct guest_exec_opts o;
	struct guest_result res;
	kiln_strv env = KILN_STRV_INIT;
	kiln_error *err = NULL;
	guest_conn *c = NULL;
	guest_proc *p = NULL;
	bool use_stdin = false;
	double timeout = 0;
	int i, rc = KILN_EXIT_FAIL;

	guest_exec_opts_init(&o);
	const struct cli_option opts[] = {
		COMMON_OPTIONS(&co),
		CLI_ENV(0, "env", &env, "environment (repeatable; default: only PATH)"),
		CLI_STRING(0, "cwd", &o.cwd, "DIR", "working directory (default /)"),
		CLI_STRING(0, "user", &o.run_as, "USER[:GROUP]", "names or ids, resolved in the guest (default root)"),
		CLI_CALLBACK(0, "timeout", &timeout, "SECS", timeout_secs, "kill the process group after SECS"),
		CLI_BOOL(0, "stdin", &use_stdin, "forward kiln's stdin"),
		CLI_BOOL(0, "detach", &o.detach, "start it, print its pid, leave it running"),
		CLI_END,
	};

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		goto out;
	if (timeout > 0)
		o.timeout_ms = (uint64_t)(timeout * 1000);
	if (i < argc && strcmp(argv[i], "--") == 0)
		i++;
	if (i >= argc) {
		cli_usage_error(cmd, "no command given (put it after --)");
		goto usage;
	}
	if ((c = open_conn(cmd, &co, &rc)) == NULL)
		goto out;
	o.argv = (const char *const *)argv + i;
	o.env = env.n ? (const char *const *)env.v : NULL;
	o.want_stdin = use_stdin;
	o.on_stdout = out_cb;
	o.on_stderr = err_cb;
	if ((p = guest_spawn(c, &o, co.connect_ms, &err)) == NULL)
		goto fail;
	if (use_stdin) {
		char buf[65536];
		ssize_t n;
		while ((n = read(0, buf, sizeof(buf))) != 0) {
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				kiln_err_errno(&err, errno, "read stdin");
				goto fail;
			}
			if (guest_proc_write(p, buf, (size_t)n, -1, &err) < 0) {
				if (!guest_proc_done(p))
					goto fail;
				kiln_error_clear(&err); /* it exited without reading it all */
				break;
			}
		}
		if (guest_proc_close_stdin(p, &err) < 0)
			goto fail;
	}
	if (o.detach) {
		printf("%d\n", (int)guest_proc_pid(p));
		rc = KILN_EXIT_OK;
		goto out;
	}
	if (guest_proc_wait(p, -1, &res, &err) < 0)
		goto fail;
	if (res.timed_out) {
		fprintf(stderr, "kiln: command timed out after %.3g s and was killed\n", (double)o.timeout_ms / 1000);
		rc = 124;
	} else {
		/* Like a shell: 128 + the signal. */
		rc = res.signal ? 128 + res.signal : res.exit_code;
	}
	goto out;
fail:
	rc = cli_fail(err);
	goto out;
usage:
	rc = KILN_EXIT_USAGE;
out:
	guest_proc_free(p);
	guest_close(c);
	kiln_strv_free(&env);
	return rc;
}

/* ---- ping, stat ----------------------------------------------------------- */

static int run_ping(const struct kiln_command *cmd, int argc, char **argv)
{
	struct common co = { NULL, 30000 };
	kiln_error *err = NULL;
	guest_conn *c;
	unsigned count = 1;
	int i, rc = KILN_EXIT_OK;
	const struct cli_option opts[] = {
		COMMON_OPTIONS(&co),
		CLI_UINT(0, "count", &count, "N", 1, 100000, "pings to send (default 1)"),
		CLI_END,
	};

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i < argc)
		return cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
	if ((c = open_conn(cmd, &co, &rc)) == NULL)
		return rc;
	printf("agent %s, protocol %u, capabilities 0x%llx\n", guest_conn_agent(c), guest_conn_version(c),
	       (unsigned long long)guest_conn_caps(c));
	for (unsigned n = 0; n < count; n++) {
		double t0 = kiln_now_ms();
		if (guest_ping(c, 10000, &err) < 0) {
			rc = cli_fail(err);
			break;
		}
		printf("pong in %.3f ms\n", kiln_now_ms() - t0);
	}
	guest_close(c);
	return rc;
}

static const char *type_name(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: return "file";
	case S_IFDIR: return "directory";
	case S_IFLNK: return "symlink";
	case S_IFCHR: return "char-device";
	case S_IFBLK: return "block-device";
	case S_IFIFO: return "fifo";
	case S_IFSOCK: return "socket";
	}
	return "unknown";
}

static int run_stat(const struct kiln_command *cmd, int argc, char **argv)
{
	struct common co = { NULL, 30000 };
	struct guest_stat st;
	kiln_error *err = NULL;
	bool follow = false, xattrs = false;
	guest_conn *c;
	int i, rc = KILN_EXIT_OK;
	const struct cli_option opts[] = {
		COMMON_OPTIONS(&co),
		CLI_BOOL(0, "follow", &follow, "stat what a symlink points to"),
		CLI_BOOL(0, "xattrs", &xattrs, "also print the extended attributes"),
		CLI_END,
	};

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i + 1 != argc)
		return cli_usage_error(cmd, "want exactly one guest path");
	unsigned flags = (follow ? GUEST_STAT_FOLLOW : 0) | (xattrs ? GUEST_STAT_XATTRS : 0);
	if ((c = open_conn(cmd, &co, &rc)) == NULL)
		return rc;
	if (guest_stat_path(c, argv[i], flags, &st, 10000, &err) < 0) {
		rc = cli_fail(err);
	} else {
		printf("type %s\nmode %04o\nuid %u\ngid %u\nsize %llu\nmtime %lld.%09u\n", type_name(st.mode),
		       st.mode & 07777, st.uid, st.gid, (unsigned long long)st.size, (long long)st.mtime_sec,
		       st.mtime_nsec);
		if (st.link)
			printf("link %s\n", st.link);
		for (size_t x = 0; x < st.nxattrs; x++) {
			/* Values are bytes: hex, as getfattr -e hex prints them. */
			printf("xattr %s=0x", st.xattrs[x].name);
			for (size_t k = 0; k < st.xattrs[x].len; k++)
				printf("%02x", st.xattrs[x].value[k]);
			printf("\n");
		}
		guest_stat_free(&st);
	}
	guest_close(c);
	return rc;
}

/* ---- upload, download ----------------------------------------------------- */

static int chown_opt(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	long long *owner = opt->value;
	char tail;

	if (sscanf(arg, "%lld:%lld%c", &owner[0], &owner[1], &tail) != 2 || owner[0] < 0 || owner[1] < 0 ||
	    owner[0] >= 0xffffffffLL || owner[1] >= 0xffffffffLL)
		return cli_usage_error(cmd, "--chown wants numeric UID:GID, not '%s'", arg);
	return 0;
}

static int run_xfer(const struct kiln_command *cmd, int argc, char **argv, bool up)
{
	struct common co = { NULL, 30000 };
	kiln_error *err = NULL;
	long long owner[2] = { -1, -1 };
	double timeout = 0;
	int timeout_ms = -1;
	guest_conn *c;
	int i, r, rc = KILN_EXIT_OK;
	const struct cli_option opts[] = {
		COMMON_OPTIONS(&co),
		CLI_CALLBACK(0, "timeout", &timeout, "SECS", timeout_secs, "give up after SECS"),
		CLI_CALLBACK(0, "chown", owner, "UID:GID", chown_opt, "the owner of everything uploaded"),
		CLI_END,
	};
	/* download has no --chown */
	struct cli_option dl_opts[sizeof(opts) / sizeof(opts[0])];

	memcpy(dl_opts, opts, sizeof(opts));
	dl_opts[3] = (struct cli_option)CLI_END;
	if ((i = cli_parse(cmd, up ? opts : dl_opts, argc, argv, 0, &rc)) < 0)
		return rc;
	if (timeout > 0)
		timeout_ms = (int)(timeout * 1000);
	if (i + 2 != argc)
		return cli_usage_error(cmd, up ? "want HOST_DIR GUEST_DIR" : "want GUEST_DIR HOST_DIR");
	if ((c = open_conn(cmd, &co, &rc)) == NULL)
		return rc;
	if (up)
		r = guest_upload_dir_owned(c, argv[i], argv[i + 1], owner[0], owner[1], timeout_ms, &err);
	else
		r = guest_download_dir(c, argv[i], argv[i + 1], timeout_ms, &err);
	if (r < 0)
		rc = cli_fail(err);
	guest_close(c);
	return rc;
}

static int run_upload(const struct kiln_command *cmd, int argc, char **argv)
{
	return run_xfer(cmd, argc, argv, true);
}

static int run_download(const struct kiln_command *cmd, int argc, char **argv)
{
	return run_xfer(cmd, argc, argv, false);
}

static const struct kiln_command sub_exec = {
	.name = "agent exec",
	.summary = "run a command in the guest",
	.usage = "Usage: kiln agent exec --socket PATH [OPTIONS] -- CMD [ARG...]\n\n"
		 "Run CMD in the guest; its stdout and stderr become kiln's, its exit code kiln's\n"
		 "(128+N if killed by signal N, 124 if --timeout killed it).\n",
	.run = run_exec,
};

static const struct kiln_command sub_ping = {
	.name = "agent ping",
	.summary = "check that the agent answers",
	.usage = "Usage: kiln agent ping --socket PATH [--count N]\n\n"
		 "Print the agent's version and capabilities and the round-trip time of N pings.\n",
	.run = run_ping,
};

static const struct kiln_command sub_stat = {
	.name = "agent stat",
	.summary = "stat a path in the guest",
	.usage = "Usage: kiln agent stat --socket PATH [--follow] [--xattrs] GUEST_PATH\n\n"
		 "Print type, mode, owner, size, mtime and symlink target (lstat unless --follow),\n"
		 "and with --xattrs the extended attributes (values in hex).\n",
	.run = run_stat,
};

static const struct kiln_command sub_upload = {
	.name = "agent upload",
	.summary = "copy a host directory into the guest",
	.usage = "Usage: kiln agent upload --socket PATH [--chown UID:GID] [--timeout SECS] HOST_DIR GUEST_DIR\n\n"
		 "Copy the contents of HOST_DIR into GUEST_DIR (created if missing), keeping\n"
		 "modes, times, symlinks, hard links and numeric owners (or --chown's).\n",
	.run = run_upload,
};

static const struct kiln_command sub_download = {
	.name = "agent download",
	.summary = "copy a guest directory to the host",
	.usage = "Usage: kiln agent download --socket PATH [--timeout SECS] GUEST_DIR HOST_DIR\n\n"
		 "Copy the contents of GUEST_DIR into HOST_DIR (created if missing); owners are\n"
		 "kept when kiln runs as root.  The guest's tar cannot write outside HOST_DIR:\n"
		 "'..' is refused, absolute names stay inside, symlinks are not followed.\n",
	.run = run_download,
};

extern const struct kiln_command cli_agent_envd; /* agent_envd.c */

static const struct kiln_command *const subcommands[] = {
	&sub_exec, &sub_ping, &sub_stat, &sub_upload, &sub_download, &cli_agent_envd, NULL,
};

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	return cli_dispatch(cmd, subcommands, argc, argv);
}

const struct kiln_command kiln_cmd_agent = {
	.name = "agent",
	.summary = "talk to a guest agent (exec, ping, stat, upload, download)",
	.usage = "Usage: kiln agent SUBCOMMAND --socket PATH [OPTIONS] ...\n\n"
		 "Talk to a kiln guest agent through its unix socket: a VM's agent.sock, or\n"
		 "`kiln-agent --listen PATH` run on this host.\n\n"
		 "Sub-commands:\n"
		 "  exec       run a command, stream its output, exit with its code\n"
		 "  ping       show the agent's version and round-trip time\n"
		 "  stat       stat a guest path\n"
		 "  upload     copy a host directory into the guest\n"
		 "  download   copy a guest directory to the host\n"
		 "  envd       serve E2B envd's Connect methods, requests from stdin\n\n"
		 "Run 'kiln agent SUBCOMMAND --help' for its options.  Protocol: docs/agent-protocol.md.\n",
	.run = run,
};

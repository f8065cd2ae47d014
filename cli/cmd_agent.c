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

enum { O_SOCKET = 256, O_CONNECT_TIMEOUT, O_ENV, O_CWD, O_USER, O_TIMEOUT, O_STDIN, O_DETACH, O_CHOWN, O_FOLLOW,
       O_COUNT, O_XATTRS };

#define COMMON_OPTS                                                                   \
	{ "help", no_argument, NULL, 'h' }, { "socket", required_argument, NULL, O_SOCKET }, \
	{ "connect-timeout", required_argument, NULL, O_CONNECT_TIMEOUT }

#define COMMON_HELP                                                                          \
	"  --socket PATH            the agent's unix socket (required)\n"                        \
	"  --connect-timeout SECS   wait this long for the socket and the agent (default 30)\n" \
	"  -h, --help\n"

struct common {
	const char *socket;
	int connect_ms;
};

/* Shared options; 1 if handled, 0 if not ours, -1 on a usage error (printed). */
static int common_opt(const struct kiln_command *cmd, int c, struct common *co)
{
	char *end;
	double v;

	switch (c) {
	case O_SOCKET:
		co->socket = optarg;
		return 1;
	case O_CONNECT_TIMEOUT:
		v = strtod(optarg, &end);
		if (*end || v < 0 || v > 3600) {
			cli_usage_error(cmd, "bad --connect-timeout '%s'", optarg);
			return -1;
		}
		co->connect_ms = (int)(v * 1000);
		return 1;
	}
	return 0;
}

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
	const char *d = data;

	while (len > 0) {
		ssize_t n = write(fd, d, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return; /* a closed stdout must not stop the command */
		d += n;
		len -= (size_t)n;
	}
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
	static const struct option opts[] = { COMMON_OPTS,
					      { "env", required_argument, NULL, O_ENV },
					      { "cwd", required_argument, NULL, O_CWD },
					      { "user", required_argument, NULL, O_USER },
					      { "timeout", required_argument, NULL, O_TIMEOUT },
					      { "stdin", no_argument, NULL, O_STDIN },
					      { "detach", no_argument, NULL, O_DETACH },
					      { NULL, 0, NULL, 0 } };
	struct common co = { NULL, 30000 };
	struct guest_exec_opts o;
	struct guest_result res;
	kiln_strv env = KILN_STRV_INIT;
	kiln_error *err = NULL;
	guest_conn *c = NULL;
	guest_proc *p = NULL;
	bool use_stdin = false;
	int ch, rc = KILN_EXIT_FAIL, r;
	char *end;

	guest_exec_opts_init(&o);
	while ((ch = cli_getopt(cmd, argc, argv, "h", opts)) != -1) {
		if ((r = common_opt(cmd, ch, &co)) != 0) {
			if (r < 0)
				goto usage;
			continue;
		}
		switch (ch) {
		case O_ENV:
			if (strchr(optarg, '=') == NULL || optarg[0] == '=') {
				cli_usage_error(cmd, "--env wants NAME=VALUE, not '%s'", optarg);
				goto usage;
			}
			kiln_strv_push(&env, optarg);
			break;
		case O_CWD: o.cwd = optarg; break;
		case O_USER: o.run_as = optarg; break;
		case O_TIMEOUT: {
			double v = strtod(optarg, &end);
			if (*end || v <= 0 || v > 86400) {
				cli_usage_error(cmd, "bad --timeout '%s'", optarg);
				goto usage;
			}
			o.timeout_ms = (uint64_t)(v * 1000);
			break;
		}
		case O_STDIN: use_stdin = true; break;
		case O_DETACH: o.detach = true; break;
		case 'h': rc = KILN_EXIT_OK; goto out;
		default: goto usage;
		}
	}
	if (optind < argc && strcmp(argv[optind], "--") == 0)
		optind++;
	if (optind >= argc) {
		cli_usage_error(cmd, "no command given (put it after --)");
		goto usage;
	}
	if ((c = open_conn(cmd, &co, &rc)) == NULL)
		goto out;
	o.argv = (const char *const *)argv + optind;
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
	static const struct option opts[] = { COMMON_OPTS, { "count", required_argument, NULL, O_COUNT },
					      { NULL, 0, NULL, 0 } };
	struct common co = { NULL, 30000 };
	kiln_error *err = NULL;
	guest_conn *c;
	int ch, rc = KILN_EXIT_OK, count = 1, r;

	while ((ch = cli_getopt(cmd, argc, argv, "h", opts)) != -1) {
		if ((r = common_opt(cmd, ch, &co)) != 0) {
			if (r < 0)
				return KILN_EXIT_USAGE;
			continue;
		}
		if (ch == O_COUNT) {
			count = atoi(optarg);
			if (count < 1 || count > 100000)
				return cli_usage_error(cmd, "bad --count '%s'", optarg);
			continue;
		}
		return ch == 'h' ? KILN_EXIT_OK : KILN_EXIT_USAGE;
	}
	if (optind < argc)
		return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
	if ((c = open_conn(cmd, &co, &rc)) == NULL)
		return rc;
	printf("agent %s, protocol %u, capabilities 0x%llx\n", guest_conn_agent(c), guest_conn_version(c),
	       (unsigned long long)guest_conn_caps(c));
	for (int i = 0; i < count; i++) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		if (guest_ping(c, 10000, &err) < 0) {
			rc = cli_fail(err);
			break;
		}
		clock_gettime(CLOCK_MONOTONIC, &b);
		printf("pong in %.3f ms\n", (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6);
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
	static const struct option opts[] = { COMMON_OPTS, { "follow", no_argument, NULL, O_FOLLOW },
					      { "xattrs", no_argument, NULL, O_XATTRS }, { NULL, 0, NULL, 0 } };
	struct common co = { NULL, 30000 };
	struct guest_stat st;
	kiln_error *err = NULL;
	unsigned flags = 0;
	guest_conn *c;
	int ch, rc = KILN_EXIT_OK, r;

	while ((ch = cli_getopt(cmd, argc, argv, "h", opts)) != -1) {
		if ((r = common_opt(cmd, ch, &co)) != 0) {
			if (r < 0)
				return KILN_EXIT_USAGE;
			continue;
		}
		if (ch == O_FOLLOW || ch == O_XATTRS) {
			flags |= ch == O_FOLLOW ? GUEST_STAT_FOLLOW : GUEST_STAT_XATTRS;
			continue;
		}
		return ch == 'h' ? KILN_EXIT_OK : KILN_EXIT_USAGE;
	}
	if (optind + 1 != argc)
		return cli_usage_error(cmd, "want exactly one guest path");
	if ((c = open_conn(cmd, &co, &rc)) == NULL)
		return rc;
	if (guest_stat_path(c, argv[optind], flags, &st, 10000, &err) < 0) {
		rc = cli_fail(err);
	} else {
		printf("type %s\nmode %04o\nuid %u\ngid %u\nsize %llu\nmtime %lld.%09u\n", type_name(st.mode),
		       st.mode & 07777, st.uid, st.gid, (unsigned long long)st.size, (long long)st.mtime_sec,
		       st.mtime_nsec);
		if (st.link)
			printf("link %s\n", st.link);
		for (size_t i = 0; i < st.nxattrs; i++) {
			/* Values are bytes: hex, as getfattr -e hex prints them. */
			printf("xattr %s=0x", st.xattrs[i].name);
			for (size_t k = 0; k < st.xattrs[i].len; k++)
				printf("%02x", st.xattrs[i].value[k]);
			printf("\n");
		}
		guest_stat_free(&st);
	}
	guest_close(c);
	return rc;
}

/* ---- upload, download ----------------------------------------------------- */

static int run_xfer(const struct kiln_command *cmd, int argc, char **argv, bool up)
{
	static const struct option opts[] = { COMMON_OPTS, { "chown", required_argument, NULL, O_CHOWN },
					      { "timeout", required_argument, NULL, O_TIMEOUT },
					      { NULL, 0, NULL, 0 } };
	struct common co = { NULL, 30000 };
	kiln_error *err = NULL;
	long long uid = -1, gid = -1;
	int timeout_ms = -1;
	guest_conn *c;
	int ch, rc = KILN_EXIT_OK, r;

	while ((ch = cli_getopt(cmd, argc, argv, "h", opts)) != -1) {
		if ((r = common_opt(cmd, ch, &co)) != 0) {
			if (r < 0)
				return KILN_EXIT_USAGE;
			continue;
		}
		if (ch == O_CHOWN && up) {
			char tail;
			if (sscanf(optarg, "%lld:%lld%c", &uid, &gid, &tail) != 2 || uid < 0 || gid < 0 ||
			    uid >= 0xffffffffLL || gid >= 0xffffffffLL)
				return cli_usage_error(cmd, "--chown wants numeric UID:GID, not '%s'", optarg);
			continue;
		}
		if (ch == O_TIMEOUT) {
			char *end;
			double v = strtod(optarg, &end);
			if (*end || v <= 0 || v > 86400)
				return cli_usage_error(cmd, "bad --timeout '%s'", optarg);
			timeout_ms = (int)(v * 1000);
			continue;
		}
		if (ch == O_CHOWN)
			return cli_usage_error(cmd, "--chown is for uploads");
		return ch == 'h' ? KILN_EXIT_OK : KILN_EXIT_USAGE;
	}
	if (optind + 2 != argc)
		return cli_usage_error(cmd, up ? "want HOST_DIR GUEST_DIR" : "want GUEST_DIR HOST_DIR");
	if ((c = open_conn(cmd, &co, &rc)) == NULL)
		return rc;
	if (up)
		r = guest_upload_dir_owned(c, argv[optind], argv[optind + 1], uid, gid, timeout_ms, &err);
	else
		r = guest_download_dir(c, argv[optind], argv[optind + 1], timeout_ms, &err);
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
		 "(128+N if killed by signal N, 124 if --timeout killed it).\n\n" COMMON_HELP
		 "  --env NAME=VALUE         environment (repeatable; default: only PATH)\n"
		 "  --cwd DIR                working directory (default /)\n"
		 "  --user USER[:GROUP]      names or ids, resolved in the guest (default root)\n"
		 "  --timeout SECS           kill the process group after SECS\n"
		 "  --stdin                  forward kiln's stdin\n"
		 "  --detach                 start it, print its pid, leave it running\n",
	.run = run_exec,
};

static const struct kiln_command sub_ping = {
	.name = "agent ping",
	.summary = "check that the agent answers",
	.usage = "Usage: kiln agent ping --socket PATH [--count N]\n\n"
		 "Print the agent's version and capabilities and the round-trip time of N pings.\n\n" COMMON_HELP,
	.run = run_ping,
};

static const struct kiln_command sub_stat = {
	.name = "agent stat",
	.summary = "stat a path in the guest",
	.usage = "Usage: kiln agent stat --socket PATH [--follow] [--xattrs] GUEST_PATH\n\n"
		 "Print type, mode, owner, size, mtime and symlink target (lstat unless --follow),\n"
		 "and with --xattrs the extended attributes (values in hex).\n\n" COMMON_HELP,
	.run = run_stat,
};

static const struct kiln_command sub_upload = {
	.name = "agent upload",
	.summary = "copy a host directory into the guest",
	.usage = "Usage: kiln agent upload --socket PATH [--chown UID:GID] [--timeout SECS] HOST_DIR GUEST_DIR\n\n"
		 "Copy the contents of HOST_DIR into GUEST_DIR (created if missing), keeping\n"
		 "modes, times, symlinks, hard links and numeric owners (or --chown's).\n\n" COMMON_HELP,
	.run = run_upload,
};

static const struct kiln_command sub_download = {
	.name = "agent download",
	.summary = "copy a guest directory to the host",
	.usage = "Usage: kiln agent download --socket PATH [--timeout SECS] GUEST_DIR HOST_DIR\n\n"
		 "Copy the contents of GUEST_DIR into HOST_DIR (created if missing); owners are\n"
		 "kept when kiln runs as root.  The guest's tar cannot write outside HOST_DIR:\n"
		 "'..' is refused, absolute names stay inside, symlinks are not followed.\n\n" COMMON_HELP,
	.run = run_download,
};

static const struct kiln_command *const subcommands[] = {
	&sub_exec, &sub_ping, &sub_stat, &sub_upload, &sub_download, NULL,
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
		 "  download   copy a guest directory to the host\n\n"
		 "Run 'kiln agent SUBCOMMAND --help' for its options.  Protocol: docs/agent-protocol.md.\n",
	.run = run,
};

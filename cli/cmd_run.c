/* cmd_run.c — `kiln run TEMPLATE -- CMD...`: restore a sandbox, run one
 * command in it with streamed output, remove the sandbox, exit with the
 * command's code (snap_run).  A registry reference not on the host is pulled
 * first (cli_tmpl_need).  --time reports where the start time went. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/sandbox.h"
#include "cli/net_flags.h"
#include "cli/xfer.h"
#include "snapshots/snapshots.h"

static double entered_ms, began_ms, first_ms; /* when run() was entered, when the restore began (after a
						 * pull), when the first output came (--time) */

static void to_stdout(void *user, const void *data, size_t len)
{
	(void)user;
	if (first_ms == 0)
		first_ms = kiln_now_ms();
	fwrite(data, 1, len, stdout);
	fflush(stdout);
}

static void to_stderr(void *user, const void *data, size_t len)
{
	(void)user;
	if (first_ms == 0)
		first_ms = kiln_now_ms();
	fwrite(data, 1, len, stderr);
}

void cli_pool_refill(const char *tmpl); /* cmd_sandbox.c */

/* Run it and say where the time went; the exit code kiln exits with. */
static int run_with(const char *tmpl, const char *const *argv, const struct snap_exec_opts *o, bool timing)
{
	struct snap_create_stats st;
	struct guest_result res = { 0 };
	kiln_error *err = NULL;
	int rc;

	rc = snap_run_with(tmpl, argv, o, to_stdout, to_stderr, NULL, &res, &st, &err);
	if (timing && st.total_ms > 0)
		fprintf(stderr, "kiln: sandbox started in %.1f ms%s (check %.1f, jail %.1f, qemu %.1f, %s %.1f, agent %.1f, setup %.1f)"
			"; first output %.1f ms after the request (%.1f ms after kiln run began, a pull included)\n",
			st.total_ms, st.pooled ? " from the pool" : "", st.check_ms, st.jail_ms, st.spawn_ms,
			st.pooled ? "cont" : "load", st.load_ms, st.agent_ms, st.setup_ms,
			first_ms > 0 ? first_ms - began_ms : 0.0, first_ms > 0 ? first_ms - entered_ms : 0.0);
	if (st.pooled)
		cli_pool_refill(tmpl);
	if (rc < 0 && res.exit_code == 0)
		return cli_fail(err);
	if (rc < 0) { /* the command could not be started: said why, exit like a shell */
		cli_fail(err);
		return res.exit_code;
	}
	if (res.timed_out)
		return 124;
	return res.signal ? 128 + res.signal : res.exit_code;
}

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	struct snap_exec_opts o;
	struct cli_net_flags net = { 0 };
	kiln_strv env = KILN_STRV_INIT;
	kiln_error *err = NULL;
	const char *timeout = NULL;
	bool timing = false, interactive = false;
	int64_t secs;
	int i, rc;

	entered_ms = kiln_now_ms();
	snap_exec_opts_init(&o);
	o.net = &net.opts;
	const struct cli_option opts[] = {
		CLI_BOOL(0, "time", &timing, "print where the start time went on stderr"),
		CLI_BOOL('i', "interactive", &interactive, "copy kiln's stdin to CMD's stdin"),
		CLI_STRING('w', "workdir", &o.cwd, "DIR", "run CMD in DIR"),
		CLI_STRING('u', "user", &o.user, "USER[:GROUP]", "run CMD as USER"),
		CLI_ENV('e', "env", &env, "over the template's env"),
		CLI_STRING(0, "timeout", &timeout, "DURATION", "kill CMD after DURATION (exit 124); the sandbox goes with it"),
		CLI_NET_OPTIONS(&net),
		CLI_END,
	};

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		goto out;
	rc = KILN_EXIT_USAGE;
	if (i >= argc) {
		rc = cli_usage_error(cmd, "which template?");
		goto out;
	}
	const char *tmpl = argv[i++];
	if (i < argc && strcmp(argv[i], "--") == 0)
		i++;
	if (i >= argc) {
		rc = cli_usage_error(cmd, "no command given (kiln run TEMPLATE -- CMD [ARG...])");
		goto out;
	}
	if (timeout) {
		if (cli_parse_timeout(timeout, &secs, &err) < 0) {
			rc = cli_fail(err);
			goto out;
		}
		o.timeout_ms = (uint64_t)secs * 1000;
	}
	if (interactive)
		o.stdin_fd = 0;
	o.env = env.n ? (const char *const *)env.v : NULL;
	if (cli_tmpl_need(tmpl, &err) < 0) {
		rc = cli_fail(err);
		goto out;
	}
	began_ms = kiln_now_ms();
	rc = run_with(tmpl, (const char *const *)argv + i, &o, timing);
out:
	kiln_strv_free(&env);
	cli_net_flags_free(&net);
	return rc;
}

const struct kiln_command kiln_cmd_run = {
	.name = "run",
	.summary = "start a sandbox from a template, run a command in it, remove it",
	.usage = "Usage: kiln run [--time] [-i] [-w DIR] [-u USER] [-e NAME=VALUE]... [--timeout DURATION]\n"
		 "                [--network none|outbound] [--allow-egress CIDR[:PORT]]... [--deny-egress CIDR[:PORT]]...\n"
		 "                [-p 127.0.0.1:HOSTPORT:GUESTPORT]... TEMPLATE -- CMD [ARG...]\n\n"
		 "kiln sandbox create + exec + kill in one go: exits with CMD's exit code.\n"
		 "TEMPLATE is NAME[:TAG], REGISTRY/REPO[:TAG], either @sha256:DIGEST, or a\n"
		 "template digest; one that names a registry and is not here is pulled first\n"
		 "(progress on a terminal), as docker run does.\n",
	.run = run,
};

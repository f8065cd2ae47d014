/* sandbox_files.c — `kiln sandbox cp` (files in and out of a sandbox) and
 * `kiln sandbox logs` (the output of a process started with exec --detach). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/sandbox.h"
#include "snapshots/snapshots.h"

int cli_sb_plain_opts(const struct kiln_command *cmd, int argc, char **argv, int n, int *first)
{
	int rc;

	if ((*first = cli_parse(cmd, NULL, argc, argv, 0, &rc)) < 0)
		return rc;
	if (argc - *first != n)
		return cli_usage_error(cmd, "%d operand%s, please", n, n == 1 ? "" : "s");
	return -1;
}

/* "ID:PATH" -> the id (12 hex digits) and the path, else NULL. */
static char *sandbox_side(const char *arg, const char **path)
{
	const char *colon = strchr(arg, ':');

	if (colon == NULL || colon - arg != 12 || strspn(arg, "0123456789abcdef") != 12)
		return NULL;
	*path = colon + 1;
	return strndup(arg, 12);
}

static int run_cp(const struct kiln_command *cmd, int argc, char **argv)
{
	int first;
	kiln_error *err = NULL;
	const char *gsrc = NULL, *gdst = NULL;
	char *from, *to;
	int rc;

	if ((rc = cli_sb_plain_opts(cmd, argc, argv, 2, &first)) >= 0)
		return rc;
	from = sandbox_side(argv[first], &gsrc);
	to = sandbox_side(argv[first + 1], &gdst);
	if ((from == NULL) == (to == NULL))
		rc = cli_usage_error(cmd, "one side must be ID:PATH, the other a host path");
	else if ((from ? *gsrc : *gdst) == '\0')
		rc = cli_usage_error(cmd, "no path after the sandbox id");
	else if (from ? snap_sandbox_cp_out(from, gsrc, argv[first + 1], &err) < 0
		      : snap_sandbox_cp_in(to, argv[first], gdst, &err) < 0)
		rc = cli_fail(err);
	else
		rc = KILN_EXIT_OK;
	free(from);
	free(to);
	return rc;
}

static void to_stdout(void *user, const void *data, size_t len)
{
	(void)user;
	fwrite(data, 1, len, stdout);
}

static void to_stderr(void *user, const void *data, size_t len)
{
	(void)user;
	fwrite(data, 1, len, stderr);
}

static int run_logs(const struct kiln_command *cmd, int argc, char **argv)
{
	int first;
	kiln_error *err = NULL;
	char *status = NULL, *end;
	long pid;
	int rc;

	if ((rc = cli_sb_plain_opts(cmd, argc, argv, 2, &first)) >= 0)
		return rc;
	pid = strtol(argv[first + 1], &end, 10);
	if (*end || pid <= 0)
		return cli_usage_error(cmd, "PID wants a process id, not '%s'", argv[first + 1]);
	if (snap_sandbox_logs(argv[first], (pid_t)pid, to_stdout, to_stderr, NULL, &status, &err) < 0)
		return cli_fail(err);
	fflush(stdout);
	fprintf(stderr, "kiln: process %ld: %s\n", pid, status);
	free(status);
	return KILN_EXIT_OK;
}

const struct kiln_command cli_sb_cp = {
	.name = "cp",
	.summary = "copy files into or out of a sandbox",
	.usage = "Usage: kiln sandbox cp SRC ID:DST\n"
		 "       kiln sandbox cp ID:SRC DST\n\n"
		 "Copy a file or a directory tree between the host and a running sandbox, owners,\n"
		 "modes and times kept (owners on the host when kiln runs as root), names as they\n"
		 "are (bytes).  A DST that is an existing directory (or ends in /) receives SRC\n"
		 "under its own name; otherwise DST is the copy's name.  Paths in the sandbox are\n"
		 "absolute (a relative one is taken from /).\n",
	.run = run_cp,
};
const struct kiln_command cli_sb_logs = {
	.name = "logs",
	.summary = "the output of a detached process",
	.usage = "Usage: kiln sandbox logs ID PID\n\n"
		 "Print what the process PID, started with 'kiln sandbox exec --detach', wrote so\n"
		 "far: its stdout on stdout, its stderr on stderr, then on stderr whether it is\n"
		 "still running or how it ended (\"exit N\", \"signal N\").\n",
	.run = run_logs,
};

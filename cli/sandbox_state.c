/* sandbox_state.c — `kiln sandbox timeout` (how long a sandbox has left),
 * `pause` / `resume` (memory, device state and disk to its directory and
 * back) and `commit` (a running sandbox made into a template). */
#include <stdio.h>
#include <stdlib.h>

#include "cli/sandbox.h"
#include "snapshots/snapshots.h"

static int run_timeout(const struct kiln_command *cmd, int argc, char **argv)
{
	int first;
	kiln_error *err = NULL;
	int64_t secs;
	int rc;

	if ((rc = cli_sb_plain_opts(cmd, argc, argv, 2, &first)) >= 0)
		return rc;
	if (cli_parse_timeout(argv[first + 1], &secs, &err) < 0 ||
	    snap_sandbox_set_timeout(argv[first], secs, &err) < 0)
		return cli_fail(err);
	return KILN_EXIT_OK;
}

const struct kiln_command cli_sb_timeout = {
	.name = "timeout",
	.summary = "set how long a sandbox has left",
	.usage = "Usage: kiln sandbox timeout ID DURATION\n\n"
		 "Remove the sandbox DURATION from now (90s, 30m, 12h, 7d; 0: never), replacing\n"
		 "its timeout.  A paused sandbox's timeout starts again when it is resumed.\n",
	.run = run_timeout,
};

/* pause and resume: one ID, one library call that reports its time */
static int run_timed(const struct kiln_command *cmd, int argc, char **argv,
		     int (*fn)(const char *id, double *ms, kiln_error **err), const char *done)
{
	int first;
	kiln_error *err = NULL;
	double ms = 0;
	int rc;

	if ((rc = cli_sb_plain_opts(cmd, argc, argv, 1, &first)) >= 0)
		return rc;
	if (fn(argv[first], &ms, &err) < 0)
		return cli_fail(err);
	fprintf(stderr, "kiln: sandbox %s %s in %.0f ms\n", argv[first], done, ms);
	return KILN_EXIT_OK;
}

static int run_pause(const struct kiln_command *cmd, int argc, char **argv)
{
	return run_timed(cmd, argc, argv, snap_sandbox_pause, "paused");
}

static int run_resume(const struct kiln_command *cmd, int argc, char **argv)
{
	return run_timed(cmd, argc, argv, snap_sandbox_resume, "resumed");
}

static int run_commit(const struct kiln_command *cmd, int argc, char **argv)
{
	int first;
	kiln_error *err = NULL;
	char *digest;
	int rc;

	if ((rc = cli_sb_plain_opts(cmd, argc, argv, 2, &first)) >= 0)
		return rc;
	if ((digest = snap_sandbox_commit(argv[first], argv[first + 1], &err)) == NULL)
		return cli_fail(err);
	printf("%s\n", digest);
	free(digest);
	return KILN_EXIT_OK;
}

const struct kiln_command cli_sb_pause = {
	.name = "pause",
	.summary = "save a sandbox to disk and stop its VM",
	.usage = "Usage: kiln sandbox pause ID\n\n"
		 "Write the sandbox's memory, device state and disk into its directory\n"
		 "($KILN_HOME/sandboxes/ID/paused) and stop its QEMU; 'kiln sandbox resume ID'\n"
		 "brings it back with the same processes and files.  exec and cp on a paused\n"
		 "sandbox fail at once; its timeout stops and starts again at resume.\n",
	.run = run_pause,
};
const struct kiln_command cli_sb_resume = {
	.name = "resume",
	.summary = "bring a paused sandbox back",
	.usage = "Usage: kiln sandbox resume ID\n\n"
		 "Restore a paused sandbox (as a template is restored) with its processes, files\n"
		 "and id; its clock is set to now and its timeout starts again.\n",
	.run = run_resume,
};
const struct kiln_command cli_sb_commit = {
	.name = "commit",
	.summary = "make a template from a running sandbox",
	.usage = "Usage: kiln sandbox commit ID NAME[:TAG]\n\n"
		 "Save the running sandbox's memory, device state and disk as a new template\n"
		 "NAME[:TAG] (its env becomes the template's); the sandbox goes on.  The template\n"
		 "pushes, pulls and runs like any other.  Needs a jailed sandbox (an unconfined\n"
		 "one has no memory file of its own).\n",
	.run = run_commit,
};

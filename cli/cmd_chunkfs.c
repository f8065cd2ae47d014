/* cmd_chunkfs.c — `kiln chunkfs serve|stop|status`: the host's template file
 * server (distrib/chunkfs.c), which kiln starts on demand for lazily pulled
 * templates and `kiln sandbox gc` stops once no sandbox runs. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "distrib/distrib.h"

/* Each subcommand takes no option and no argument. */
static int no_args(const struct kiln_command *cmd, int argc, char **argv, int *rc)
{
	int i = cli_parse(cmd, NULL, argc, argv, 0, rc);

	if (i >= 0 && i < argc) {
		*rc = cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
		return -1;
	}
	return i < 0 ? -1 : 0;
}

static int run_serve(const struct kiln_command *cmd, int argc, char **argv)
{
	kiln_error *err = NULL;
	int rc;

	if (no_args(cmd, argc, argv, &rc) < 0)
		return rc;
	return dist_chunkfs_serve(&err) < 0 ? cli_fail(err) : KILN_EXIT_OK;
}

static int run_stop(const struct kiln_command *cmd, int argc, char **argv)
{
	kiln_error *err = NULL;
	int rc;

	if (no_args(cmd, argc, argv, &rc) < 0)
		return rc;
	return dist_chunkfs_stop(&err) < 0 ? cli_fail(err) : KILN_EXIT_OK;
}

static int run_status(const struct kiln_command *cmd, int argc, char **argv)
{
	int rc;

	if (no_args(cmd, argc, argv, &rc) < 0)
		return rc;
	bool up = dist_chunkfs_running();
	printf("%s\n", up ? "running" : "stopped");
	return up ? KILN_EXIT_OK : KILN_EXIT_FAIL;
}

static const struct kiln_command cf_serve = {
	.name = "serve",
	.summary = "run the file server in the foreground (what kiln starts, detached)",
	.usage = "Usage: kiln chunkfs serve\n\n"
		 "Mount $KILN_HOME/chunkfs/mnt and serve the lazy templates' files until stopped.\n",
	.run = run_serve,
};
static const struct kiln_command cf_stop = {
	.name = "stop",
	.summary = "stop the file server",
	.usage = "Usage: kiln chunkfs stop\n\nStop this KILN_HOME's file server (a dead one's mount is detached).\n",
	.run = run_stop,
};
static const struct kiln_command cf_status = {
	.name = "status",
	.summary = "say whether the file server runs",
	.usage = "Usage: kiln chunkfs status\n\nPrint running or stopped; exit 0 if it runs.\n",
	.run = run_status,
};

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	static const struct kiln_command *const subs[] = { &cf_serve, &cf_stop, &cf_status, NULL };

	return cli_dispatch(cmd, subs, argc, argv);
}

const struct kiln_command kiln_cmd_chunkfs = {
	.name = "chunkfs",
	.summary = "the template file server of lazily pulled templates: serve, stop, status",
	.usage = "Usage: kiln chunkfs serve|stop|status\n\n"
		 "The host's template file server: a FUSE file system at $KILN_HOME/chunkfs/mnt\n"
		 "serving the rootfs, memory and disk of templates pulled with kiln pull --lazy\n"
		 "(or by kiln run) from the chunk store, fetching missing chunks from the registry\n"
		 "on first touch.  kiln starts it when a sandbox needs it and kiln sandbox gc\n"
		 "stops it when no sandbox runs; its log is $KILN_HOME/chunkfs/log.\n"
		 "  serve   run it in the foreground (what kiln starts, detached)\n"
		 "  stop    stop it\n"
		 "  status  exit 0 if it runs\n",
	.run = run,
};

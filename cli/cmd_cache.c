/* cmd_cache.c — `kiln cache ls|prune`: the build step cache. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "builder/store.h"
#include "cli/cli.h"
#include "remote/remote.h"

static int run_ls(const struct kiln_command *cmd, int argc, char **argv)
{
	kiln_error *err = NULL;
	build_store *s = NULL;
	json_t *list = NULL, *e;
	bool json;
	size_t i;
	int c;

	if ((c = cli_list_opts(cmd, argc, argv, &json)) >= 0)
		return c;
	if (build_store_open(NULL, &s, &err) < 0 || !(list = build_cache_list(s, &err))) {
		build_store_close(s);
		return cli_fail(err);
	}
	if (json) {
		cli_print_json(list);
	} else {
		printf("%-19s %-19s %10s %-20s %s\n", "KEY", "LAYER", "SIZE", "LAST USED", "STEP");
		json_array_foreach(list, i, e) {
			char when[KILN_TIME_MAX];
			const char *k = kiln_json_str(e, "key"), *l = kiln_json_str(e, "layer");
			kiln_time_rfc3339(kiln_json_int(e, "last_used", 0), when);
			printf("%-19.19s %-19.19s %10lld %-20s %s\n", k ? k : "?", l ? l : "?",
			       (long long)kiln_json_int(e, "size", 0), when, kiln_json_str(e, "instruction"));
		}
	}
	json_decref(list);
	build_store_close(s);
	return KILN_EXIT_OK;
}

static int older_than(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	kiln_error *err = NULL;
	int rc;

	if (kiln_parse_duration(arg, opt->value, &err) < 0) {
		rc = cli_usage_error(cmd, "%s", kiln_error_message(err));
		kiln_error_free(err);
		return rc;
	}
	return 0;
}

static int max_size_opt(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	kiln_error *err = NULL;

	if (kiln_parse_size(arg, opt->value, &err) < 0 || *(uint64_t *)opt->value == 0) {
		kiln_error_free(err);
		return cli_usage_error(cmd, "--max-size '%s': want a size like 500M", arg);
	}
	return 0;
}

static int run_prune(const struct kiln_command *cmd, int argc, char **argv)
{
	kiln_error *err = NULL;
	build_store *s = NULL;
	struct build_prune_stats st;
	bool all = false;
	int64_t older = -1;
	const char *remote = NULL;
	uint64_t max_size = 0;
	int i, rc;
	const struct cli_option opts[] = {
		CLI_BOOL(0, "all", &all, "remove every cache entry"),
		CLI_CALLBACK(0, "older-than", &older, "DURATION", older_than,
			     "remove the entries unused for DURATION (90s, 30m, 12h, 7d)"),
		CLI_STRING(0, "remote", &remote, "URL", "prune the team's cache on a `kiln serve --build` instead\n"
							 "($KILN_TOKEN, $KILN_TEAM; docs/service.md)"),
		CLI_CALLBACK(0, "max-size", &max_size, "SIZE", max_size_opt,
			     "with --remote: then the least recently used until the team's store fits SIZE"),
		CLI_END,
	};

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i < argc)
		return cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
	if (remote || max_size) {
		struct remote_opts ro = { .url = remote, .token = getenv("KILN_TOKEN"), .team = getenv("KILN_TEAM") };
		struct remote_prune_stats ps;
		if (!remote || all)
			return cli_usage_error(cmd, remote ? "--all is for the local cache" : "--max-size goes with --remote");
		if (remote_prune(&ro, max_size, older, &ps, &err) < 0)
			return cli_fail(err);
		printf("removed %llu cache entries and %llu context files on %s (team store %llu -> %llu bytes)\n",
		       (unsigned long long)ps.entries_removed, (unsigned long long)ps.files_removed, remote,
		       (unsigned long long)ps.bytes_before, (unsigned long long)ps.bytes_after);
		return KILN_EXIT_OK;
	}
	if (build_store_open(NULL, &s, &err) < 0 || build_cache_prune(s, all, older, &st, &err) < 0) {
		build_store_close(s);
		return cli_fail(err);
	}
	printf("removed %zu cache entries, %zu blobs (%llu bytes)\n", st.entries, st.blobs,
	       (unsigned long long)st.bytes);
	build_store_close(s);
	return KILN_EXIT_OK;
}

static const struct kiln_command sub_ls = {
	.name = "cache ls",
	.summary = "list cached build steps",
	.usage = "Usage: kiln cache ls [--json]\n\nList the cached build steps, least recently used first.\n",
	.run = run_ls,
};

static const struct kiln_command sub_prune = {
	.name = "cache prune",
	.summary = "remove cached build steps",
	.usage = "Usage: kiln cache prune [--all] [--older-than DURATION]\n"
		 "       kiln cache prune --remote URL [--older-than DURATION] [--max-size SIZE]\n\n"
		 "Remove cache entries (all of them with --all, or those unused for DURATION,\n"
		 "e.g. 90s, 30m, 12h, 7d), then every blob no image or remaining entry uses,\n"
		 "and temp files of interrupted builds.  Waits for running builds.  Without\n"
		 "options only unreferenced blobs and temp files go.  --remote: the team's\n"
		 "cache on a build server (DURATION default the server's, then by SIZE).\n",
	.run = run_prune,
};

static const struct kiln_command *const subcommands[] = { &sub_ls, &sub_prune, NULL };

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	return cli_dispatch(cmd, subcommands, argc, argv);
}

const struct kiln_command kiln_cmd_cache = {
	.name = "cache",
	.summary = "inspect and prune the build cache (ls, prune)",
	.usage = "Usage: kiln cache SUBCOMMAND [OPTIONS]\n\n"
		 "Sub-commands:\n"
		 "  ls      list cached build steps\n"
		 "  prune   remove cached steps (--all, --older-than D) and unused blobs\n",
	.run = run,
};

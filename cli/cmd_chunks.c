/* cmd_chunks.c — `kiln chunks du|gc`: the host's template chunk store
 * ($KILN_HOME/chunks, docs/distribution.md): its size, and eviction of the
 * least recently used chunks down to a limit (pull and push do it too). */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "distrib/distrib.h"

static int show(dist_chunks *cs, const struct dist_chunks_stats *st, bool json, uint64_t limit)
{
	if (json) {
		json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "dir", dist_chunks_dir(cs), "chunks",
				      (json_int_t)st->chunks, "bytes", (json_int_t)st->bytes, "limit", (json_int_t)limit,
				      "evicted", (json_int_t)st->evicted, "evicted_bytes", (json_int_t)st->evicted_bytes,
				      "pinned_kept", (json_int_t)st->pinned);
		cli_print_json(o);
		json_decref(o);
	} else {
		printf("%s: %llu chunks, %.1f MiB (limit %.1f MiB)", dist_chunks_dir(cs), (unsigned long long)st->chunks,
		       (double)st->bytes / 1048576.0, (double)limit / 1048576.0);
		if (st->evicted || st->pinned)
			printf("; evicted %llu chunks (%.1f MiB), kept %llu pinned", (unsigned long long)st->evicted,
			       (double)st->evicted_bytes / 1048576.0, (unsigned long long)st->pinned);
		printf("\n");
	}
	return KILN_EXIT_OK;
}

static int max_size(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	kiln_error *err = NULL;

	if (kiln_parse_size(arg, opt->value, &err) < 0) {
		kiln_error_free(err);
		return cli_usage_error(cmd, "--max '%s': want a size like 10G", arg);
	}
	return 0;
}

/* du (max = no limit: a scan) and gc (max = the limit) share this. */
static int run_store(const struct kiln_command *cmd, int argc, char **argv, bool gc)
{
	struct dist_chunks_stats st;
	kiln_error *err = NULL;
	uint64_t limit = dist_chunks_limit();
	bool json = false;
	int i, rc;
	const struct cli_option opts[] = {
		CLI_CALLBACK(0, "max", &limit, "SIZE", max_size, "evict down to SIZE"),
		CLI_BOOL(0, "json", &json, "print JSON"),
		CLI_END,
	};

	/* du has no --max */
	if ((i = cli_parse(cmd, gc ? opts : opts + 1, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i < argc)
		return cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
	dist_chunks *cs = dist_chunks_open(NULL, &err);
	if (cs == NULL || dist_chunks_evict(cs, gc ? limit : UINT64_MAX, &st, &err) < 0) {
		dist_chunks_close(cs);
		return cli_fail(err);
	}
	rc = show(cs, &st, json, limit);
	dist_chunks_close(cs);
	return rc;
}

static int run_du(const struct kiln_command *cmd, int argc, char **argv) { return run_store(cmd, argc, argv, false); }
static int run_gc(const struct kiln_command *cmd, int argc, char **argv) { return run_store(cmd, argc, argv, true); }

static const struct kiln_command sub_du = {
	.name = "chunks du",
	.summary = "size of the chunk store",
	.usage = "Usage: kiln chunks du [--json]\n\nHow many chunks the host's chunk store holds and their disk usage.\n",
	.run = run_du,
};
static const struct kiln_command sub_gc = {
	.name = "chunks gc",
	.summary = "evict least recently used chunks",
	.usage = "Usage: kiln chunks gc [--json] [--max SIZE]\n\n"
		 "Remove the least recently used chunks until the store holds at most SIZE\n"
		 "(default $KILN_CHUNKS_MAX, else 20G); chunks of a push or pull in progress are\n"
		 "kept. --max 0 empties it (pulled templates stay usable: they are assembled).\n",
	.run = run_gc,
};
static const struct kiln_command *const subcommands[] = { &sub_du, &sub_gc, NULL };

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	return cli_dispatch(cmd, subcommands, argc, argv);
}

const struct kiln_command kiln_cmd_chunks = {
	.name = "chunks",
	.summary = "the template chunk store (du, gc)",
	.usage = "Usage: kiln chunks SUBCOMMAND [OPTIONS]\n\n"
		 "Sub-commands:\n"
		 "  du      chunks stored and their size\n"
		 "  gc      evict least recently used chunks down to a limit\n",
	.run = run,
};

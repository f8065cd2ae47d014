/* cmd_registry.c — `kiln registry ls|history|public|gc`: administration of a
 * `kiln serve` data directory (safe while the server runs). */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "registry/registry.h"

static const struct option opts[] = {
	{ "data", required_argument, NULL, 'd' },
	{ "config", required_argument, NULL, 'c' },
	{ "off", no_argument, NULL, 'o' },
	{ "dry-run", no_argument, NULL, 'n' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static int run_sub(const struct kiln_command *cmd, int argc, char **argv)
{
	const char *data = NULL, *config = NULL, *arg;
	int c, off = 0, dry = 0, ret = KILN_EXIT_OK, nargs;
	struct reg_config cfg;
	kiln_error *err = NULL;
	kiln_buf out = KILN_BUF_INIT;

	optind = 0;
	while ((c = cli_getopt(cmd, argc, argv, "d:c:onh", opts)) != -1) {
		switch (c) {
		case 'd': data = optarg; break;
		case 'c': config = optarg; break;
		case 'o': off = 1; break;
		case 'n': dry = 1; break;
		case 'h': return KILN_EXIT_OK;
		default: return KILN_EXIT_USAGE;
		}
	}
	nargs = argc - optind;
	arg = nargs > 0 ? argv[optind] : NULL;
	if (strcmp(cmd->name, "gc") == 0 ? nargs != 0 : strcmp(cmd->name, "ls") == 0 ? nargs > 1 : nargs != 1)
		return cli_usage_error(cmd, "wrong number of arguments");
	reg_config_init(&cfg);
	if (config && reg_config_load(&cfg, config, &err) < 0)
		goto fail;
	if (data) {
		free(cfg.data_dir);
		cfg.data_dir = kiln_xstrdup(data);
	}
	if (strcmp(cmd->name, "ls") == 0) {
		struct reg_repo_info *repos;
		size_t n;
		if (reg_list_repos(&cfg, arg, &repos, &n, &err) < 0)
			goto fail;
		for (size_t i = 0; i < n; i++) {
			if (repos[i].manifests < 0) /* S3: not counted (one listing per repository) */
				printf("%-40s %4lld tags\n", repos[i].name, (long long)repos[i].tags);
			else
				printf("%-40s %4lld tags %4lld manifests%s\n", repos[i].name, (long long)repos[i].tags,
				       (long long)repos[i].manifests, repos[i].public_ ? "  public" : "");
		}
		reg_repo_info_free(repos, n);
	} else if (strcmp(cmd->name, "history") == 0) {
		char *repo = kiln_xstrdup(arg), *colon = strrchr(repo, ':');
		if (colon)
			*colon++ = '\0';
		c = reg_tag_history(&cfg, repo, colon, &out, &err);
		free(repo);
		if (c < 0)
			goto fail;
		fputs(out.buf, stdout);
	} else if (strcmp(cmd->name, "public") == 0) {
		if (reg_set_public(&cfg, arg, !off, &err) < 0)
			goto fail;
	} else {
		struct reg_gc_stats st;
		if (reg_gc(&cfg, dry, &st, &err) < 0)
			goto fail;
		printf("%s%llu blobs removed (%llu bytes), %llu kept, %llu expired uploads removed\n",
		       dry ? "dry run: " : "", (unsigned long long)st.blobs_removed, (unsigned long long)st.bytes_removed,
		       (unsigned long long)st.blobs_kept, (unsigned long long)st.uploads_removed);
	}
	goto out;
fail:
	ret = cli_fail(err);
out:
	kiln_buf_free(&out);
	reg_config_free(&cfg);
	return ret;
}

#define COMMON "Options: --data DIR / --config FILE name the registry (as for kiln serve).\n"
static const struct kiln_command sub_ls = {
	.name = "ls",
	.usage = "Usage: kiln registry ls [--data DIR] [--config FILE] [PREFIX]\n\n"
		 "List repositories (optionally under a team namespace, e.g. team/) with tag and\n"
		 "manifest counts.\n" COMMON,
	.run = run_sub,
};
static const struct kiln_command sub_history = {
	.name = "history",
	.usage = "Usage: kiln registry history [--data DIR] [--config FILE] REPO[:TAG]\n\n"
		 "Every change of the repository's tags (or one tag), oldest first: TIME TAG DIGEST.\n" COMMON,
	.run = run_sub,
};
static const struct kiln_command sub_public = {
	.name = "public",
	.usage = "Usage: kiln registry public [--data DIR] [--config FILE] [--off] REPO\n\n"
		 "Allow anonymous pulls of REPO (with --off: stop allowing them).\n" COMMON,
	.run = run_sub,
};
static const struct kiln_command sub_gc = {
	.name = "gc",
	.usage = "Usage: kiln registry gc [--data DIR] [--config FILE] [--dry-run]\n\n"
		 "Remove blobs that no manifest references (older than gc_grace_s) and uploads idle\n"
		 "longer than upload_expiry_s.  Safe while kiln serve runs.\n" COMMON,
	.run = run_sub,
};
static const struct kiln_command *const subs[] = { &sub_ls, &sub_history, &sub_public, &sub_gc, NULL };

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	return cli_dispatch(cmd, subs, argc, argv);
}

const struct kiln_command kiln_cmd_registry = {
	.name = "registry",
	.summary = "administer a kiln serve data directory (ls, history, public, gc)",
	.usage = "Usage: kiln registry ls|history|public|gc [OPTIONS] [ARGS]\n\n"
		 "  ls [PREFIX]          repositories with tag and manifest counts\n"
		 "  history REPO[:TAG]   tag history (every version a tag pointed at)\n"
		 "  public [--off] REPO  allow (or stop) anonymous pulls\n"
		 "  gc [--dry-run]       remove unreferenced blobs and expired uploads\n\n"
		 "All take --data DIR / --config FILE to name the registry (as for kiln serve).\n",
	.run = run,
};

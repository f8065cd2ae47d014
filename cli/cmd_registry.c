/* cmd_registry.c — `kiln registry ls|history|public|gc|retain|backup|restore`:
 * administration of a `kiln serve` data directory (safe while the server
 * runs; restore only onto a fresh one).  quota and usage: registry_quota.c. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "registry/registry.h"

static int run_sub(const struct kiln_command *cmd, int argc, char **argv)
{
	const char *data = NULL, *config = NULL, *arg;
	bool off = false, dry = false, blobs = false;
	int c, first, ret = KILN_EXIT_OK, nargs;
	struct reg_config cfg;
	kiln_error *err = NULL;
	kiln_buf out = KILN_BUF_INIT;
	struct cli_option opts[] = {
		CLI_REGISTRY_OPTIONS(&data, &config),
		CLI_END,
		CLI_END,
	};

	if (strcmp(cmd->name, "public") == 0)
		opts[2] = (struct cli_option)CLI_BOOL('o', "off", &off, "stop allowing anonymous pulls");
	else if (strcmp(cmd->name, "gc") == 0)
		opts[2] = (struct cli_option)CLI_BOOL('n', "dry-run", &dry, "only say what would be removed");
	else if (strcmp(cmd->name, "backup") == 0)
		opts[2] = (struct cli_option)CLI_BOOL('b', "blobs", &blobs, "copy the blobs too (only those DEST lacks)");
	if ((first = cli_parse(cmd, opts, argc, argv, 0, &ret)) < 0)
		return ret;
	nargs = argc - first;
	arg = nargs > 0 ? argv[first] : NULL;
	if (strcmp(cmd->name, "gc") == 0 ? nargs != 0 : strcmp(cmd->name, "ls") == 0 ? nargs > 1 : nargs != 1)
		return cli_usage_error(cmd, "wrong number of arguments");
	if (cli_registry_config(&cfg, data, config, &err) < 0)
		goto fail;
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
	} else if (strcmp(cmd->name, "backup") == 0 || strcmp(cmd->name, "restore") == 0) {
		struct reg_backup_stats st;
		bool backup = cmd->name[0] == 'b';
		c = backup ? reg_backup(&cfg, arg, blobs, &st, &err) : reg_restore(&cfg, arg, &st, &err);
		if (c == 0)
			printf("%s: metadata and %llu blobs (%llu bytes) it needs; %llu blobs copied (%llu bytes)\n",
			       backup ? "backed up" : "restored", (unsigned long long)st.blobs, (unsigned long long)st.bytes,
			       (unsigned long long)st.copied, (unsigned long long)st.copied_bytes);
		reg_backup_stats_free(&st);
		if (c < 0)
			goto fail;
	} else {
		struct reg_gc_run run;
		const struct reg_gc_stats *st = &run.gc;
		if (reg_gc_run(&cfg, "cli", dry, &run, &err) < 0)
			goto fail;
		if (run.retained)
			printf("retention: %s%llu tags, %llu manifests (their %llu bytes go once gc_grace_s has passed)\n",
			       dry ? "would remove " : "removed ", (unsigned long long)run.retain.tags_removed,
			       (unsigned long long)run.retain.manifests_removed, (unsigned long long)run.retain.bytes_freed);
		printf("%s%llu blobs removed (%llu bytes), %llu kept, %llu expired uploads removed\n",
		       dry ? "dry run: " : "", (unsigned long long)st->blobs_removed, (unsigned long long)st->bytes_removed,
		       (unsigned long long)st->blobs_kept, (unsigned long long)st->uploads_removed);
	}
	goto out;
fail:
	ret = cli_fail(err);
out:
	kiln_buf_free(&out);
	reg_config_free(&cfg);
	return ret;
}

static const struct kiln_command sub_ls = {
	.name = "ls",
	.usage = "Usage: kiln registry ls [--data DIR] [--config FILE] [PREFIX]\n\n"
		 "List repositories (optionally under a team namespace, e.g. team/) with tag and\n"
		 "manifest counts.\n",
	.run = run_sub,
};
static const struct kiln_command sub_history = {
	.name = "history",
	.usage = "Usage: kiln registry history [--data DIR] [--config FILE] REPO[:TAG]\n\n"
		 "Every change of the repository's tags (or one tag), oldest first: TIME TAG DIGEST,\n"
		 "then \"build ID\" for a result of the build service (kiln serve --build).\n",
	.run = run_sub,
};
static const struct kiln_command sub_public = {
	.name = "public",
	.usage = "Usage: kiln registry public [--data DIR] [--config FILE] [--off] REPO\n\n"
		 "Allow anonymous pulls of REPO (with --off: stop allowing them).\n",
	.run = run_sub,
};
static const struct kiln_command sub_gc = {
	.name = "gc",
	.usage = "Usage: kiln registry gc [--data DIR] [--config FILE] [--dry-run]\n\n"
		 "Apply the config's retention rules (as kiln registry retain), then remove blobs\n"
		 "that no manifest references (older than gc_grace_s) and uploads idle longer than\n"
		 "upload_expiry_s.  Safe while kiln serve runs.\n",
	.run = run_sub,
};
static const struct kiln_command sub_backup = {
	.name = "backup",
	.usage = "Usage: kiln registry backup [--data DIR] [--config FILE] [--blobs] DEST\n\n"
		 "Copy the metadata (meta.db, e2b/e2b.db: one consistent snapshot each, taken while\n"
		 "kiln serve runs), the token and sandbox keys and the list of blobs that copy needs\n"
		 "(DEST/blobs.txt) to DEST: a new or empty directory, or an earlier backup.  --blobs:\n"
		 "the blobs too, only those DEST lacks.  Filesystem data directories only.\n",
	.run = run_sub,
};
static const struct kiln_command sub_restore = {
	.name = "restore",
	.usage = "Usage: kiln registry restore [--data DIR] [--config FILE] BACKUP\n\n"
		 "Make DIR (without meta.db) serve what BACKUP holds: every blob it needs placed in\n"
		 "DIR/blobs (copied and verified from BACKUP/blobs when DIR lacks it), then the\n"
		 "metadata and keys.  A blob found in neither is named and nothing is restored.\n",
	.run = run_sub,
};
static const struct kiln_command *const subs[] = { &sub_ls, &sub_history, &sub_public, &sub_gc, &cli_registry_retain,
						   &sub_backup, &sub_restore, &kiln_cmd_registry_quota, &kiln_cmd_registry_usage, NULL };

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	return cli_dispatch(cmd, subs, argc, argv);
}

const struct kiln_command kiln_cmd_registry = {
	.name = "registry",
	.summary = "administer a kiln serve data directory (ls, history, public, gc, retain, backup, restore, quota, usage)",
	.usage = "Usage: kiln registry ls|history|public|gc|retain|backup|restore|quota|usage [OPTIONS] [ARGS]\n\n"
		 "  ls [PREFIX]          repositories with tag and manifest counts\n"
		 "  history REPO[:TAG]   tag history (every version a tag pointed at)\n"
		 "  public [--off] REPO  allow (or stop) anonymous pulls\n"
		 "  gc [--dry-run]       retention, then remove unreferenced blobs and expired uploads\n"
		 "  retain [--dry-run] [--json]  apply the retention rules: what goes and why\n"
		 "  backup [--blobs] DEST  a consistent copy of the metadata while serving\n"
		 "  restore BACKUP       onto a fresh data directory\n"
		 "  quota TEAM [KEY=VALUE...]  show or set a team's quotas\n"
		 "  usage [--json]       what each team stores, against its quotas\n\n"
		 "All take --data DIR / --config FILE to name the registry (as for kiln serve).\n",
	.run = run,
};

/* registry_retain.c — `kiln registry retain [--dry-run] [--json]`: apply the
 * config's retention rules to a data directory now (kiln serve does it on its
 * gc timer) and say what went, why, and what the next gc frees. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "registry/registry.h"

struct out {
	bool json, dry;
	json_t *items;
};

static void item(void *ud, const struct reg_retain_item *it)
{
	struct out *o = ud;

	if (o->json) {
		json_array_append_new(o->items, json_pack("{s:s,s:s?,s:s,s:s}", "repository", it->repo, "tag", it->tag,
							  "digest", it->digest, "reason", it->reason));
		return;
	}
	if (it->tag)
		printf("%s tag %s:%s (%s) %s\n", o->dry ? "would remove" : "removed", it->repo, it->tag, it->digest,
		       it->reason);
	else
		printf("%s manifest %s@%s %s\n", o->dry ? "would remove" : "removed", it->repo, it->digest, it->reason);
}

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	const char *data = NULL, *config = NULL;
	struct out o = { 0 };
	const struct cli_option opts[] = {
		CLI_REGISTRY_OPTIONS(&data, &config),
		CLI_BOOL('n', "dry-run", &o.dry, "only say what would be removed (nothing changes)"),
		CLI_BOOL('j', "json", &o.json, "one JSON object: the removals and the totals"),
		CLI_END,
	};
	struct reg_retain_stats st;
	struct reg_config cfg;
	kiln_error *err = NULL;
	int first, ret = KILN_EXIT_OK;

	if ((first = cli_parse(cmd, opts, argc, argv, 0, &ret)) < 0)
		return ret;
	if (first != argc)
		return cli_usage_error(cmd, "unexpected argument '%s'", argv[first]);
	reg_config_init(&cfg);
	if (config && reg_config_load(&cfg, config, &err) < 0)
		goto fail;
	if (data) {
		free(cfg.data_dir);
		cfg.data_dir = kiln_xstrdup(data);
	}
	if (cfg.retention == NULL && !cfg.s3_endpoint)
		fprintf(stderr, "kiln registry retain: no \"retention\" rules in the config: nothing to do\n");
	o.items = json_array();
	if (reg_retain(&cfg, o.dry, item, &o, &st, &err) < 0)
		goto fail;
	if (o.json) {
		json_t *v = json_pack("{s:b,s:o,s:I,s:I,s:I,s:I,s:I}", "dry_run", o.dry, "removed", json_incref(o.items),
				      "repositories", (json_int_t)st.repos, "tags", (json_int_t)st.tags_removed,
				      "manifests", (json_int_t)st.manifests_removed, "blobs_freed", (json_int_t)st.blobs_freed,
				      "bytes_freed", (json_int_t)st.bytes_freed);
		cli_print_json(v);
		json_decref(v);
	} else {
		printf("%s%llu tags, %llu manifests in %llu repositories; %llu blobs (%llu bytes) freed by gc after "
		       "gc_grace_s\n", o.dry ? "dry run: would remove " : "removed ", (unsigned long long)st.tags_removed,
		       (unsigned long long)st.manifests_removed, (unsigned long long)st.repos,
		       (unsigned long long)st.blobs_freed, (unsigned long long)st.bytes_freed);
	}
	goto out;
fail:
	ret = cli_fail(err);
out:
	json_decref(o.items);
	reg_config_free(&cfg);
	return ret;
}

const struct kiln_command cli_registry_retain = {
	.name = "retain",
	.usage = "Usage: kiln registry retain [--data DIR] [--config FILE] [--dry-run] [--json]\n\n"
		 "Apply the config's \"retention\" rules now (kiln serve applies them every\n"
		 "gc_interval_s): tags beyond each repository's newest keep_newest that no\n"
		 "keep_tags pattern names, then manifests nothing points at any more, and untagged\n"
		 "manifests older than untagged_older_than (docs/operations.md, \"Retention\").\n"
		 "A line per removal (what, why), then the totals; the blobs go at a gc once\n"
		 "gc_grace_s has passed.  Safe while kiln serve runs; filesystem metadata only.\n",
	.run = run,
};

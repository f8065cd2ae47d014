/* registry_quota.c — `kiln registry quota TEAM [KEY=VALUE...]` (show or set a
 * team's quotas in meta.db) and `kiln registry usage` (what each team holds,
 * against its quotas).  The values and their rules are registry/quota.c's. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "registry/registry.h"

int cli_registry_config(struct reg_config *cfg, const char *data, const char *config, kiln_error **err)
{
	reg_config_init(cfg);
	if (config && reg_config_load(cfg, config, err) < 0)
		return -1;
	if (data) {
		free(cfg->data_dir);
		cfg->data_dir = kiln_xstrdup(data);
	}
	return 0;
}

static const char *const src_name[] = {
	[REG_QUOTA_UNSET] = "", [REG_QUOTA_CONFIG_ALL] = "config \"*\"", [REG_QUOTA_DB_ALL] = "kiln registry quota \"*\"",
	[REG_QUOTA_CONFIG] = "config", [REG_QUOTA_DB] = "kiln registry quota",
};

static void value(char buf[32], int64_t v)
{
	if (v == REG_QUOTA_NONE)
		snprintf(buf, 32, "none");
	else
		snprintf(buf, 32, "%lld", (long long)v);
}

/* "KEY=VALUE": VALUE a number, a size for bytes, "none" or "default" (clear). */
static int parse_one(const char *arg, enum reg_quota_key *k, int64_t *v, bool *clear, kiln_error **err)
{
	const char *eq = strchr(arg, '=');
	char *key;
	int rc;

	if (eq == NULL || eq == arg || !eq[1])
		return kiln_err(err, KILN_E_USAGE, "'%s': want KEY=VALUE (e.g. bytes=10G, repos=20, builds=2)", arg);
	key = kiln_xstrndup(arg, (size_t)(eq - arg));
	rc = reg_quota_key_parse(key, k, err);
	free(key);
	if (rc < 0)
		return -1;
	*clear = strcmp(eq + 1, "default") == 0;
	*v = 0;
	return *clear ? 0 : reg_quota_value_parse(*k, eq + 1, v, err);
}

static int quota(const struct reg_config *cfg, const char *team, int nset, char **set, kiln_error **err)
{
	struct reg_quota q;
	enum reg_quota_key k;
	int64_t x;
	bool clear;
	char v[32];

	/* all or nothing: every KEY=VALUE checked before any is stored */
	for (int i = 0; i < nset; i++)
		if (parse_one(set[i], &k, &x, &clear, err) < 0)
			return -1;
	for (int i = 0; i < nset; i++)
		if (parse_one(set[i], &k, &x, &clear, err) < 0 || reg_quota_set(cfg, team, k, x, clear, err) < 0)
			return -1;
	if (reg_quota_get(cfg, team, &q, err) < 0)
		return -1;
	printf("%-20s %-14s %s\n", "QUOTA", "VALUE", "SET BY");
	for (int i = 0; i < REG_QUOTA_N; i++) {
		/* unset: no limit, or the service's own setting */
		const char *unset = i == REG_QUOTA_BUILDS ? "not set: the build service's team_builds"
				    : i >= REG_QUOTA_SANDBOXES ? "not set: the sandbox service's team_limits"
							       : "not set: no limit";
		value(v, q.v[i]);
		printf("%-20s %-14s %s\n", reg_quota_key_name((enum reg_quota_key)i), q.src[i] ? v : "-",
		       q.src[i] ? src_name[q.src[i]] : unset);
	}
	return 0;
}

static int usage(const struct reg_config *cfg, bool json, kiln_error **err)
{
	struct reg_team_usage *u = NULL;
	json_t *arr = json ? json_array() : NULL;
	size_t n = 0;
	int ret = -1;

	if (reg_usage(cfg, &u, &n, err) < 0)
		goto out;
	if (!json)
		printf("%-24s %6s %6s %8s %16s %16s %8s %8s\n", "TEAM", "REPOS", "TAGS", "BLOBS", "BYTES", "BYTES QUOTA",
		       "USED", "REPOS QUOTA");
	for (size_t i = 0; i < n; i++) {
		struct reg_quota q;
		char b[32], r[32], pct[16] = "-";
		if (reg_quota_get(cfg, u[i].team, &q, err) < 0)
			goto out;
		if (json) {
			json_t *o = json_pack("{s:s,s:I,s:I,s:I,s:I,s:{}}", "team", u[i].team, "repos", (json_int_t)u[i].repos,
					      "tags", (json_int_t)u[i].tags, "blobs", (json_int_t)u[i].blobs, "bytes",
					      (json_int_t)u[i].bytes, "quotas");
			for (int k = 0; k < REG_QUOTA_N; k++)
				json_object_set_new(json_object_get(o, "quotas"), reg_quota_key_name((enum reg_quota_key)k),
						    q.v[k] == REG_QUOTA_NONE ? json_null() : json_integer(q.v[k]));
			json_array_append_new(arr, o);
			continue;
		}
		value(b, q.v[REG_QUOTA_BYTES]);
		value(r, q.v[REG_QUOTA_REPOS]);
		if (q.v[REG_QUOTA_BYTES] > 0)
			snprintf(pct, sizeof(pct), "%.1f%%", 100.0 * (double)u[i].bytes / (double)q.v[REG_QUOTA_BYTES]);
		printf("%-24s %6lld %6lld %8lld %16lld %16s %8s %8s\n", u[i].team, (long long)u[i].repos,
		       (long long)u[i].tags, (long long)u[i].blobs, (long long)u[i].bytes, b, pct, r);
	}
	if (json) {
		char *s = json_dumps(arr, JSON_INDENT(2));
		puts(s);
		free(s);
	}
	ret = 0;
out:
	json_decref(arr);
	reg_team_usage_free(u, n);
	return ret;
}

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	const char *data = NULL, *config = NULL;
	bool json = false, is_usage = strcmp(cmd->name, "usage") == 0;
	int first, ret = KILN_EXIT_OK, nargs;
	struct reg_config cfg;
	kiln_error *err = NULL;
	struct cli_option opts[] = {
		CLI_REGISTRY_OPTIONS(&data, &config),
		CLI_BOOL('j', "json", &json, "JSON: one object per team"),
		CLI_END,
	};

	if (!is_usage)
		opts[2] = (struct cli_option)CLI_END;
	if ((first = cli_parse(cmd, opts, argc, argv, CLI_PARSE_PERMUTE, &ret)) < 0)
		return ret;
	nargs = argc - first;
	if (is_usage ? nargs != 0 : nargs < 1)
		return cli_usage_error(cmd, is_usage ? "no arguments expected" : "want a TEAM (or \"*\")");
	if (cli_registry_config(&cfg, data, config, &err) < 0 ||
	    (is_usage ? usage(&cfg, json, &err) : quota(&cfg, argv[first], nargs - 1, argv + first + 1, &err)) < 0)
		ret = cli_fail(err);
	reg_config_free(&cfg);
	return ret;
}

const struct kiln_command kiln_cmd_registry_quota = {
	.name = "quota",
	.usage = "Usage: kiln registry quota [--data DIR] [--config FILE] TEAM [KEY=VALUE...]\n\n"
		 "Show TEAM's quotas and where each is set; with KEY=VALUE, first store them in\n"
		 "meta.db (they beat the config file's \"quotas\"; TEAM \"*\" is every team's).\n"
		 "KEY: bytes (a size: 10G), repos, builds (running at once), build_minutes (per UTC\n"
		 "day), sandboxes, sandbox_memory_mib, sandbox_vcpus.  VALUE: a number, \"none\" (no\n"
		 "limit) or \"default\" (remove this one: the config's or \"*\"'s applies again).\n",
	.run = run,
};

const struct kiln_command kiln_cmd_registry_usage = {
	.name = "usage",
	.usage = "Usage: kiln registry usage [--data DIR] [--config FILE] [--json]\n\n"
		 "What each team holds (repositories, tags, blobs and stored bytes, each blob and\n"
		 "manifest counted once per team) against its stored-bytes and repositories quotas.\n",
	.run = run,
};

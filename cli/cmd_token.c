/* cmd_token.c — `kiln token create|ls|revoke`: access tokens of a `kiln serve`
 * data directory.  The secret is printed once on create; only its hash is kept. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "registry/registry.h"

static const struct option common_opts[] = {
	{ "data", required_argument, NULL, 'd' },
	{ "config", required_argument, NULL, 'c' },
	{ "scope", required_argument, NULL, 's' },
	{ "ttl", required_argument, NULL, 't' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* "90", "30s", "15m", "12h", "30d" -> seconds; -1 when malformed. */
static int64_t parse_ttl(const char *s)
{
	char *end;
	long long v = strtoll(s, &end, 10);

	if (end == s || v <= 0)
		return -1;
	switch (tolower((unsigned char)*end)) {
	case '\0': case 's': break;
	case 'm': v *= 60; break;
	case 'h': v *= 3600; break;
	case 'd': v *= 86400; break;
	default: return -1;
	}
	return end[0] && end[1] ? -1 : v;
}

static int run_sub(const struct kiln_command *cmd, int argc, char **argv)
{
	const char *data = NULL, *config = NULL;
	kiln_strv scopes = KILN_STRV_INIT;
	int64_t ttl = 0;
	struct reg_config cfg;
	kiln_error *err = NULL;
	kiln_buf out = KILN_BUF_INIT;
	int c, ret = KILN_EXIT_OK;

	optind = 0;
	while ((c = cli_getopt(cmd, argc, argv, "d:c:s:t:h", common_opts)) != -1) {
		switch (c) {
		case 'd': data = optarg; break;
		case 'c': config = optarg; break;
		case 's': kiln_strv_push(&scopes, optarg); break;
		case 't':
			if ((ttl = parse_ttl(optarg)) < 0) {
				kiln_strv_free(&scopes);
				return cli_usage_error(cmd, "bad --ttl '%s' (want e.g. 3600, 90m, 12h, 30d)", optarg);
			}
			break;
		case 'h': kiln_strv_free(&scopes); return KILN_EXIT_OK;
		default: kiln_strv_free(&scopes); return KILN_EXIT_USAGE;
		}
	}
	if ((strcmp(cmd->name, "ls") == 0) != (optind == argc) || argc - optind > 1) {
		kiln_strv_free(&scopes);
		return cli_usage_error(cmd, strcmp(cmd->name, "ls") == 0 ? "no arguments expected" : "want one LABEL");
	}
	reg_config_init(&cfg);
	if (config && reg_config_load(&cfg, config, &err) < 0)
		goto fail;
	if (data) {
		free(cfg.data_dir);
		cfg.data_dir = kiln_xstrdup(data);
	}
	if (strcmp(cmd->name, "create") == 0) {
		char *secret = NULL;
		const char *none[] = { NULL };
		if (reg_token_create(&cfg, argv[optind], scopes.v ? (const char *const *)scopes.v : none, ttl, &secret,
				     &err) < 0)
			goto fail;
		printf("%s\n", secret);
		free(secret);
	} else if (strcmp(cmd->name, "ls") == 0) {
		if (reg_token_list(&cfg, &out, &err) < 0)
			goto fail;
		fputs(out.buf, stdout);
	} else if (reg_token_revoke(&cfg, argv[optind], &err) < 0) {
		goto fail;
	}
	goto out;
fail:
	ret = cli_fail(err);
out:
	kiln_buf_free(&out);
	kiln_strv_free(&scopes);
	reg_config_free(&cfg);
	return ret;
}

static const struct kiln_command sub_create = {
	.name = "create",
	.usage = "Usage: kiln token create [--data DIR] [--config FILE] --scope NS:ACTIONS... [--ttl DUR] LABEL\n\n"
		 "Create an access token for `kiln serve` and print its secret (shown only once).\n"
		 "NS is a namespace (\"team\" covers team and team/...) or * for all; ACTIONS is a\n"
		 "comma list of pull, push, delete, build (or *).  --ttl: 3600, 90m, 12h, 30d (default: none).\n",
	.run = run_sub,
};
static const struct kiln_command sub_ls = {
	.name = "ls",
	.usage = "Usage: kiln token ls [--data DIR] [--config FILE]\n\nList tokens (label, scopes, dates).\n",
	.run = run_sub,
};
static const struct kiln_command sub_revoke = {
	.name = "revoke",
	.usage = "Usage: kiln token revoke [--data DIR] [--config FILE] LABEL\n\nRevoke a token; takes effect at once.\n",
	.run = run_sub,
};
static const struct kiln_command *const subs[] = { &sub_create, &sub_ls, &sub_revoke, NULL };

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	return cli_dispatch(cmd, subs, argc, argv);
}

const struct kiln_command kiln_cmd_token = {
	.name = "token",
	.summary = "create, list and revoke registry access tokens",
	.usage = "Usage: kiln token create|ls|revoke [OPTIONS] [LABEL]\n\n"
		 "  create --scope NS:ACTIONS... [--ttl DUR] LABEL   new token; prints the secret once\n"
		 "  ls                                             list tokens\n"
		 "  revoke LABEL                                   revoke a token\n\n"
		 "All take --data DIR / --config FILE to name the registry (as for kiln serve).\n",
	.run = run,
};

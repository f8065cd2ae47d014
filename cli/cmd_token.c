/* cmd_token.c — `kiln token create|ls|revoke`: access tokens of a `kiln serve`
 * data directory.  The secret is printed once on create; only its hash is kept. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "registry/registry.h"

static int ttl_opt(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	kiln_error *err = NULL;
	int64_t *ttl = opt->value;

	if (kiln_parse_duration(arg, ttl, &err) < 0 || *ttl <= 0) {
		kiln_error_free(err);
		return cli_usage_error(cmd, "bad --ttl '%s' (want e.g. 3600, 90m, 12h, 30d)", arg);
	}
	return 0;
}

static int run_sub(const struct kiln_command *cmd, int argc, char **argv)
{
	const char *data = NULL, *config = NULL;
	kiln_strv scopes = KILN_STRV_INIT;
	int64_t ttl = 0;
	struct reg_config cfg;
	kiln_error *err = NULL;
	kiln_buf out = KILN_BUF_INIT;
	bool e2b_shape = false;
	int i, ret = KILN_EXIT_OK;
	struct cli_option opts[] = {
		CLI_REGISTRY_OPTIONS(&data, &config),
		CLI_END,
		CLI_END,
		CLI_END,
		CLI_END,
	};

	if (strcmp(cmd->name, "create") == 0) {
		opts[2] = (struct cli_option)CLI_STRV('s', "scope", &scopes, "NS:ACTIONS", "what the token may do (repeatable)");
		opts[3] = (struct cli_option)CLI_CALLBACK('t', "ttl", &ttl, "DUR", ttl_opt,
							  "expire after DUR (3600, 90m, 12h, 30d; default: never)");
		opts[4] = (struct cli_option)CLI_BOOL(0, "e2b", &e2b_shape, "in E2B's API key shape (e2b_ and hex), which the\n"
									 "E2B SDKs check a key for before sending it");
	}
	if ((i = cli_parse(cmd, opts, argc, argv, 0, &ret)) < 0) {
		kiln_strv_free(&scopes);
		return ret;
	}
	if ((strcmp(cmd->name, "ls") == 0) != (i == argc) || argc - i > 1) {
		kiln_strv_free(&scopes);
		return cli_usage_error(cmd, strcmp(cmd->name, "ls") == 0 ? "no arguments expected" : "want one LABEL");
	}
	if (cli_registry_config(&cfg, data, config, &err) < 0)
		goto fail;
	if (strcmp(cmd->name, "create") == 0) {
		char *secret = NULL;
		const char *none[] = { NULL };
		if (reg_token_create_as(&cfg, argv[i], scopes.v ? (const char *const *)scopes.v : none, ttl,
					e2b_shape ? "e2b_" : "kiln_", &secret, &err) < 0)
			goto fail;
		printf("%s\n", secret);
		free(secret);
	} else if (strcmp(cmd->name, "ls") == 0) {
		if (reg_token_list(&cfg, &out, &err) < 0)
			goto fail;
		fputs(out.buf, stdout);
	} else if (reg_token_revoke(&cfg, argv[i], &err) < 0) {
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

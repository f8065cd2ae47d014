/* cmd_logout.c — `kiln logout`: forget a registry's credentials in
 * $KILN_HOME/auth.json (other tools' files are left alone). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "regclient/regclient.h"

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	kiln_error *err = NULL;
	int i, rc;

	if ((i = cli_parse(cmd, NULL, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i + 1 != argc)
		return cli_usage_error(cmd, i >= argc ? "missing REGISTRY" : "unexpected argument '%s'", argv[argc - 1]);
	const char *a = argv[i], *p = strstr(a, "://");
	p = p ? p + 3 : a;
	char *host = kiln_xstrndup(p, strcspn(p, "/"));
	if (strcmp(host, "docker.io") == 0 || strcmp(host, "index.docker.io") == 0) {
		free(host);
		host = kiln_xstrdup("registry-1.docker.io");
	}
	if (rc_auth_remove(host, &err) < 0) {
		free(host);
		return cli_fail(err);
	}
	printf("Removed the credentials for %s\n", host);
	free(host);
	return KILN_EXIT_OK;
}

const struct kiln_command kiln_cmd_logout = {
	.name = "logout",
	.summary = "forget a registry's credentials",
	.usage = "Usage: kiln logout REGISTRY\n\n"
		 "Remove REGISTRY's entry from $KILN_HOME/auth.json (written by kiln login).\n",
	.run = run,
};

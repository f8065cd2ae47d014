/* cmd_key.c — `kiln key generate PREFIX`: an ECDSA P-256 key pair for
 * signing templates and images (sign/key.c); the private key stays in its
 * 0600 file and is never printed, only its public key's id is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "sign/sign.h"

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	kiln_error *err = NULL;
	sign_key *k = NULL;
	int i, rc;

	if ((i = cli_parse(cmd, NULL, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i >= argc || strcmp(argv[i], "generate") != 0)
		return cli_usage_error(cmd, i >= argc ? "missing 'generate'" : "unknown subcommand '%s'", argv[i]);
	if (i + 2 != argc)
		return cli_usage_error(cmd, i + 1 >= argc ? "missing PREFIX" : "unexpected argument '%s'", argv[argc - 1]);
	char *pub = kiln_xasprintf("%s.pub", argv[i + 1]);
	if (sign_key_generate(argv[i + 1], &err) < 0 || (k = sign_key_load_public(pub, &err)) == NULL) {
		free(pub);
		return cli_fail(err);
	}
	printf("%s.key (private, 0600) and %s: key %s\n", argv[i + 1], pub, sign_key_id(k));
	sign_key_free(k);
	free(pub);
	return KILN_EXIT_OK;
}

const struct kiln_command kiln_cmd_key = {
	.name = "key",
	.summary = "make a signing key pair",
	.usage = "Usage: kiln key generate PREFIX\n\n"
		 "Write an ECDSA P-256 key pair: PREFIX.key, the private key (PKCS#8 PEM, mode\n"
		 "0600, never overwritten), for kiln push --sign, and PREFIX.pub, the public key\n"
		 "a runtime host's policy names (docs/security.md). Prints the key's id, the\n"
		 "sha256 of its public key.\n",
	.run = run,
};

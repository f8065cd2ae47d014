/* cmd_inspect.c — `kiln inspect --provenance REF`: the provenance statements
 * attached to a registry's manifest (sign/provenance.c), each with the key
 * that signed it when --key names it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "regclient/regclient.h"
#include "sign/sign.h"

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	bool provenance = false;
	kiln_strv keys = KILN_STRV_INIT;
	const struct cli_option opts[] = {
		CLI_BOOL(0, "provenance", &provenance, "print the provenance statements attached to REF"),
		CLI_STRV(0, "key", &keys, "FILE", "a public key: say which statements it signed"),
		CLI_END,
	};
	struct oci_imgref r = { 0 };
	struct rc_doc m = { 0 };
	kiln_error *err = NULL;
	rc_client *c = NULL;
	sign_key **k = NULL;
	json_t *st = NULL;
	size_t nk = 0;
	int i, rc;

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i + 1 != argc)
		return cli_usage_error(cmd, i >= argc ? "missing REFERENCE" : "unexpected argument '%s'", argv[argc - 1]);
	if (!provenance)
		return cli_usage_error(cmd, "what to inspect? --provenance");
	k = kiln_xcalloc(keys.n + 1, sizeof(*k));
	for (; nk < keys.n; nk++)
		if ((k[nk] = sign_key_load_public(keys.v[nk], &err)) == NULL)
			goto fail;
	if (oci_imgref_parse(argv[i], &r, &err) < 0 || (c = rc_client_new(r.host, NULL, &err)) == NULL ||
	    rc_manifest_get(c, r.repo, oci_imgref_reference(&r), NULL, &m, &err) < 0 ||
	    (st = sign_provenance_fetch(c, r.repo, m.digest, k, nk, &err)) == NULL)
		goto fail;
	if (json_array_size(st) == 0) {
		kiln_err(&err, KILN_E_NOTFOUND, "%s (%s): no provenance attached", argv[i], m.digest);
		goto fail;
	}
	char *s = json_dumps(st, JSON_INDENT(2));
	printf("%s\n", s);
	free(s);
	rc = KILN_EXIT_OK;
	goto out;
fail:
	rc = cli_fail(err);
out:
	json_decref(st);
	for (size_t j = 0; j < nk; j++)
		sign_key_free(k[j]);
	free(k);
	kiln_strv_free(&keys);
	rc_doc_free(&m);
	rc_client_free(c);
	oci_imgref_free(&r);
	return rc;
}

const struct kiln_command kiln_cmd_inspect = {
	.name = "inspect",
	.summary = "show what is attached to a registry's manifest",
	.usage = "Usage: kiln inspect --provenance [--key FILE]... [REGISTRY/]REPO[:TAG|@DIGEST]\n\n"
		 "Print the in-toto SLSA provenance statements attached to the manifest (the tag\n"
		 "sha256-HEX.att that kiln push --sign writes for a build made with --provenance),\n"
		 "as a JSON list of {\"statement\", \"key\"}: key is the id of the --key that signed\n"
		 "it, or null. A statement whose subject is another manifest is an error.\n",
	.run = run,
};

/* cmd_pull.c — `kiln pull`: an image from any OCI registry into the local
 * store (`kiln images` lists it, FROM uses it), pinned by digest, or a
 * template artifact into the chunk and template stores (cli/tmpl_xfer.c).
 * Progress on a terminal, nothing but the digest otherwise, JSON events with --json. */
#include <stdio.h>
#include <string.h>

#include "builder/store.h"
#include "cli/xfer.h"

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	struct cli_xfer x;
	const struct cli_option opts[] = {
		CLI_XFER_OPTIONS(&x),
		CLI_STRING(0, "name", &x.name, "NAME[:TAG]", "the local template's name (default REPO:TAG)"),
		CLI_BOOL(0, "lazy", &x.lazy, "a template served from the chunk store, fetched on first touch"),
		CLI_STRING(0, "policy", &x.policy, "FILE", "the signing policy (default: $KILN_POLICY,\n$KILN_HOME/policy.json, /etc/kiln/policy.json)"),
		CLI_END,
	};
	struct build_remote_opts o = { .progress = cli_xfer_progress, .ud = &x };
	kiln_error *err = NULL;
	build_store *s = NULL;
	char digest[KILN_DIGEST_MAX];
	int i, prc;

	cli_xfer_init(&x, "pull");
	if ((i = cli_parse(cmd, opts, argc, argv, 0, &prc)) < 0)
		return prc;
	if (i + 1 != argc)
		return cli_usage_error(cmd, i >= argc ? "missing REFERENCE" : "unexpected argument '%s'", argv[argc - 1]);
	const char *dest = argv[i];
	int trc = cli_tmpl_pull(dest, &x);
	if (trc >= 0)
		return trc;
	if (x.name)
		return cli_usage_error(cmd, "--name is for templates; %s is not one", dest);
	o.parallel = x.parallel;
	o.max_rate = x.max_rate;
	o.pin = x.pin[0] ? x.pin : NULL; /* what was verified, even if the tag moves meanwhile */
	cli_xfer_start(&x, "pull", true);
	int rc = build_store_open(NULL, &s, &err) < 0 ? -1 : build_image_pull(s, dest, &o, digest, &err);
	cli_xfer_end_line(&x);
	build_store_close(s);
	if (rc < 0)
		return cli_fail(err);
	return cli_xfer_done_image(&x, digest, dest);
}

const struct kiln_command kiln_cmd_pull = {
	.name = "pull",
	.summary = "pull a template or an image from a registry",
	.usage = "Usage: kiln pull [--json] [--parallel N] [--limit-rate RATE] [--name NAME[:TAG]] [--lazy]\n"
		 "                 [--policy FILE]\n"
		 "                 [REGISTRY/]REPO[:TAG|@DIGEST]\n\n"
		 "When the signing policy names the registry or repository, the manifest must\n"
		 "be signed by each key it lists before anything else is fetched\n"
		 "(docs/security.md).\n\n"
		 "--lazy: fetch only the template's config, device state, disk and recorded working\n"
		 "set; its rootfs and memory are served from the chunk store by the host's file\n"
		 "server (kiln chunkfs), which fetches every other chunk on first touch and\n"
		 "prefetches the rest in the background.\n\n"
		 "A template artifact (kiln push of a template) becomes the local template\n"
		 "REPO:TAG (or --name): only the chunks this host's chunk store lacks are\n"
		 "fetched, each verified; the template appears only once all of it is there and\n"
		 "checked (docs/distribution.md). The bytes received are reported on stderr.\n\n"
		 "Pull a plain OCI or Docker image (an index: its linux/amd64 image) into the\n"
		 "local store under that name, so kiln images lists it and FROM uses it.\n"
		 "Blobs already stored are not fetched; an interrupted pull resumes; every\n"
		 "blob is checked against its digest before it is stored; RATE (e.g. 10M) caps\n"
		 "each blob transfer, in bytes per second. No registry host:\n"
		 "Docker Hub. Prints the image manifest digest; progress on a terminal;\n"
		 "--json prints progress events and a final {\"event\":\"done\"}.\n",
	.run = run,
};

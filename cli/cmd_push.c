/* cmd_push.c — `kiln push`: a locally built image to any OCI registry as a
 * plain image (same manifest bytes, so the same digest anywhere), or a
 * template as a chunked artifact (cli/tmpl_xfer.c).  Progress on a terminal,
 * nothing but the digest otherwise, JSON events with --json. */
#include <stdio.h>
#include <string.h>

#include "builder/builder.h"
#include "cli/xfer.h"

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "parallel", required_argument, NULL, 'P' },
		{ "limit-rate", required_argument, NULL, 'L' },
		{ "chunk-size", required_argument, NULL, 'C' },
		{ "template", no_argument, NULL, 'T' },
		{ "image", no_argument, NULL, 'I' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli_xfer x;
	struct build_remote_opts o = { .progress = cli_xfer_progress, .ud = &x };
	kiln_error *err = NULL;
	build_store *s = NULL;
	char digest[KILN_DIGEST_MAX];
	int c, kind = 0; /* 'T' template, 'I' image, 0: a template if NAME is one */

	cli_xfer_init(&x, "push");
	while ((c = cli_getopt(cmd, argc, argv, "h", opts)) != -1) {
		int rc = cli_xfer_option(cmd, &x, c, optarg);
		if (rc != -1) {
			if (rc != KILN_EXIT_OK)
				return rc;
			continue;
		}
		switch (c) {
		case 'C':
			if (kiln_parse_size(optarg, &o.chunk_size, &err) < 0 || o.chunk_size < 4096) {
				kiln_error_free(err);
				return cli_usage_error(cmd, "--chunk-size '%s': want a size of at least 4K", optarg);
			}
			break;
		case 'T':
		case 'I':
			kind = c;
			break;
		case 'h':
			return KILN_EXIT_OK;
		default:
			return KILN_EXIT_USAGE;
		}
	}
	if (optind >= argc || optind + 2 < argc)
		return cli_usage_error(cmd, optind >= argc ? "missing NAME" : "unexpected argument '%s'", argv[argc - 1]);
	const char *name = argv[optind], *dest = optind + 1 < argc ? argv[optind + 1] : argv[optind];
	if (optind + 1 == argc && !kiln_ref_has_host(name))
		return cli_usage_error(cmd, "where to? give [REGISTRY/]REPO[:TAG] after %s", name);
	/* what exists under that name decides, and a wrong guess says which flag fits */
	bool is_tmpl = cli_is_template(name), is_image = cli_is_image(name);
	if (kind == 'T' && !is_tmpl && is_image)
		kiln_err(&err, KILN_E_NOTFOUND,
			 "%s is an image, not a template; push it without --template, or make the template "
			 "first (`kiln snapshot %s`, or kiln build --template)", name, name);
	else if (kind == 'I' && !is_image && is_tmpl)
		kiln_err(&err, KILN_E_NOTFOUND,
			 "%s is a template, not an image; push it without --image (it goes as a chunked "
			 "artifact), or build the image with kiln build -t %s", name, name);
	else if (kind == 0 && !is_tmpl && !is_image)
		kiln_err(&err, KILN_E_NOTFOUND, "no image or template %s here (kiln images, kiln snapshot ls)", name);
	if (err)
		return cli_fail(err);
	if (kind == 'T' || (kind == 0 && is_tmpl))
		return cli_tmpl_push(name, dest, &x);
	o.parallel = x.parallel;
	o.max_rate = x.max_rate;
	cli_xfer_start(&x, "push", true);
	int rc = build_store_open(NULL, &s, &err) < 0 ? -1 : build_image_push(s, name, dest, &o, digest, &err);
	cli_xfer_end_line(&x);
	build_store_close(s);
	if (rc < 0)
		return cli_fail(err);
	return cli_xfer_done_image(&x, digest, dest);
}

const struct kiln_command kiln_cmd_push = {
	.name = "push",
	.summary = "push a local template or image to a registry",
	.usage = "Usage: kiln push [--json] [--parallel N] [--limit-rate RATE] [--chunk-size SIZE]\n"
		 "                 [--template|--image] NAME[:TAG] [[REGISTRY/]REPO[:TAG]]\n\n"
		 "A template (kiln snapshot ls; --template) goes as a chunked artifact: only\n"
		 "the chunks the registry lacks are sent (docs/distribution.md); the bytes sent\n"
		 "are reported on stderr (--json: in the \"done\" event). --image pushes the\n"
		 "image of that name even when a template has it too.\n\n"
		 "Push the image NAME (see kiln images) to a registry as a plain OCI image any\n"
		 "client can pull; the destination defaults to NAME when it names a registry.\n"
		 "Blobs the registry already has are skipped; up to N (4) blobs move at once;\n"
		 "blobs larger than SIZE (32M) go up in PATCH chunks of that size; RATE\n"
		 "(e.g. 10M) caps each blob transfer, in bytes per second.\n"
		 "Plain HTTP for loopback and $KILN_INSECURE_REGISTRIES, HTTPS otherwise;\n"
		 "credentials from kiln login. Prints the manifest digest; progress on a\n"
		 "terminal; --json prints progress events and a final {\"event\":\"done\"}.\n",
	.run = run,
};

/* cmd_push.c — `kiln push`: a locally built image to any OCI registry as a
 * plain image (same manifest bytes, so the same digest anywhere), or a
 * template as a chunked artifact (cli/tmpl_xfer.c).  Progress on a terminal,
 * nothing but the digest otherwise, JSON events with --json. */
#include <stdio.h>
#include <string.h>

#include "builder/store.h"
#include "cli/xfer.h"

static int chunk_size(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	uint64_t *size = opt->value;
	kiln_error *err = NULL;

	if (kiln_parse_size(arg, size, &err) < 0 || *size < 4096) {
		kiln_error_free(err);
		return cli_usage_error(cmd, "--chunk-size '%s': want a size of at least 4K", arg);
	}
	return 0;
}

/* --template / --image: the last one given counts */
static int push_kind(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	(void)cmd, (void)arg;
	*(int *)opt->value = opt->long_name[0] == 't' ? 'T' : 'I';
	return 0;
}

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	struct cli_xfer x;
	struct build_remote_opts o = { .progress = cli_xfer_progress, .ud = &x };
	kiln_error *err = NULL;
	build_store *s = NULL;
	char digest[KILN_DIGEST_MAX];
	int i, prc, kind = 0; /* 'T' template, 'I' image, 0: a template if NAME is one */
	const struct cli_option opts[] = {
		CLI_XFER_OPTIONS(&x),
		CLI_CALLBACK(0, "chunk-size", &o.chunk_size, "SIZE", chunk_size,
			     "blobs larger than SIZE go up in PATCH chunks of SIZE\n(default 32M, at least 4K)"),
		CLI_STRING(0, "sign", &x.sign, "KEY", "sign the pushed manifest with the private key file KEY\n(kiln key generate; cosign's format)"),
		CLI_CALLBACK(0, "template", &kind, NULL, push_kind, "push the template NAME (a chunked artifact)"),
		CLI_CALLBACK(0, "image", &kind, NULL, push_kind, "push the image NAME, even when a template has that name"),
		CLI_END,
	};

	cli_xfer_init(&x, "push");
	if ((i = cli_parse(cmd, opts, argc, argv, 0, &prc)) < 0)
		return prc;
	if (i >= argc || i + 2 < argc)
		return cli_usage_error(cmd, i >= argc ? "missing NAME" : "unexpected argument '%s'", argv[argc - 1]);
	const char *name = argv[i], *dest = i + 1 < argc ? argv[i + 1] : argv[i];
	if (i + 1 == argc && !kiln_ref_has_host(name))
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
	int rc = cli_sign_check_key(x.sign, &err) < 0 || build_store_open(NULL, &s, &err) < 0
			 ? -1
			 : build_image_push(s, name, dest, &o, digest, &err);
	if (rc == 0 && x.sign)
		rc = cli_sign_pushed(x.sign, dest, digest, &err) < 0 ? -1
		     : cli_provenance_pushed(x.sign, digest, dest, digest, &err);
	cli_xfer_end_line(&x);
	build_store_close(s);
	if (rc < 0)
		return cli_fail(err);
	return cli_xfer_done_image(&x, digest, dest);
}

const struct kiln_command kiln_cmd_push = {
	.name = "push",
	.summary = "push a local template or image to a registry",
	.usage = "Usage: kiln push [--json] [--parallel N] [--limit-rate RATE] [--chunk-size SIZE] [--sign KEY]\n"
		 "                 [--template|--image] NAME[:TAG] [[REGISTRY/]REPO[:TAG]]\n\n"
		 "A template (kiln snapshot ls; --template) goes as a chunked artifact: only\n"
		 "the chunks the registry lacks are sent (docs/distribution.md); the bytes sent\n"
		 "are reported on stderr (--json: in the \"done\" event). --image pushes the\n"
		 "image of that name even when a template has it too.\n\n"
		 "--sign KEY signs the pushed manifest (template or image) with the private key\n"
		 "KEY: a cosign signature stored as the tag sha256-HEX.sig (docs/security.md);\n"
		 "the provenance kiln build --provenance recorded for it goes along, signed, as\n"
		 "the tag sha256-HEX.att (kiln inspect --provenance prints it).\n\n"
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

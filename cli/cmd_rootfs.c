/* cmd_rootfs.c — `kiln rootfs`: an OCI image (or a directory) in, an ext4
 * image out, written directly with libext2fs; prints a one-line summary. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "rootfs/rootfs.h"

static int count_opt(const struct kiln_command *cmd, const struct cli_option *opt, const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (*s == '\0' || *end != '\0' || *s == '-')
		return cli_usage_error(cmd, "--%s: '%s' is not a number", opt->long_name, s);
	*(uint64_t *)opt->value = v;
	return 0;
}

static int size_opt(const struct kiln_command *cmd, const struct cli_option *opt, const char *s)
{
	kiln_error *err = NULL;
	int rc;

	if (kiln_parse_size(s, opt->value, &err) < 0) {
		rc = cli_usage_error(cmd, "%s", kiln_error_message(err));
		kiln_error_free(err);
		return rc;
	}
	return 0;
}

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	struct rootfs_options o;
	struct rootfs_stats st;
	const char *out = NULL, *dir = NULL, *image = NULL;
	kiln_error *err = NULL;
	int i, rc;

	rootfs_options_default(&o);
	const struct cli_option opts[] = {
		CLI_STRING('o', "output", &out, "FILE", "the ext4 image to write (replaced atomically)"),
		CLI_CALLBACK(0, "size", &o.size, "N", size_opt, "fixed image size (e.g. 2G); fails if the content does not fit"),
		CLI_CALLBACK(0, "free", &o.free, "N", size_opt, "free space to leave when the size is computed (default 256M)"),
		CLI_STRING(0, "from-dir", &dir, "DIR", "use a directory tree instead of an image"),
		CLI_CALLBACK(0, "max-entries", &o.limits.max_entries, "N", count_opt,
			     "refuse layers with more entries in total (default 4000000)"),
		CLI_CALLBACK(0, "max-bytes", &o.limits.max_bytes, "N", size_opt,
			     "refuse layers declaring more file bytes (default 256G)"),
		CLI_CALLBACK(0, "place-min", &o.place_min, "N", size_opt,
			     "write file data while reading layers when there is at\n"
			     "least N of it (default 256M; smaller: tight layout + data pass)"),
		CLI_END,
	};

	/* The image may come before or after the options. */
	if ((i = cli_parse(cmd, opts, argc, argv, CLI_PARSE_PERMUTE, &rc)) < 0)
		return rc;
	if (i < argc)
		image = argv[i++];
	if (i < argc)
		return cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
	if (out == NULL)
		return cli_usage_error(cmd, "missing -o OUT.ext4");
	if (dir && image)
		return cli_usage_error(cmd, "--from-dir takes no IMAGE");
	if (!dir && !image)
		return cli_usage_error(cmd, "missing IMAGE");
	if (o.size && o.size < (8u << 20))
		return cli_usage_error(cmd, "--size must be at least 8M");
	double t0 = kiln_now_ms();
	if (dir)
		rc = rootfs_build_dir(dir, out, &o, &st, &err);
	else
		rc = rootfs_build_image(image, out, &o, &st, &err);
	if (rc < 0)
		return cli_fail(err);
	double secs = (kiln_now_ms() - t0) / 1e3;
	fprintf(stderr, "kiln rootfs: %s: %llu layers, %llu entries, %llu inodes, %.1f MiB of content, "
		"%llu MiB image, %.2fs\n", out, (unsigned long long)st.layers,
		(unsigned long long)st.entries, (unsigned long long)st.inodes,
		(double)st.content_bytes / 1048576.0, (unsigned long long)(st.image_bytes >> 20), secs);
	return KILN_EXIT_OK;
}

const struct kiln_command kiln_cmd_rootfs = {
	.name = "rootfs",
	.summary = "write an ext4 root filesystem from an OCI image or a directory",
	.usage = "Usage: kiln rootfs IMAGE -o OUT.ext4 [--size N] [--free N]\n"
		 "       kiln rootfs --from-dir DIR -o OUT.ext4 [--size N] [--free N]\n"
		 "\n"
		 "Merge the image's layers (OCI whiteouts applied) and write them as an ext4\n"
		 "image with libext2fs, without extracting or mounting anything.\n"
		 "\n"
		 "IMAGE is oci:DIR[:TAG], oci-archive:FILE[:TAG] or docker-archive:FILE;\n"
		 "the linux/amd64 image is used.  Every blob's digest is verified.\n",
	.run = run,
};

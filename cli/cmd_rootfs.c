/* cmd_rootfs.c — `kiln rootfs`: an OCI image (or a directory) in, an ext4
 * image out, written directly with libext2fs; prints a one-line summary. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "rootfs/rootfs.h"

static int parse_count(const struct kiln_command *cmd, const char *opt, const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (*s == '\0' || *end != '\0' || *s == '-') {
		cli_usage_error(cmd, "%s: '%s' is not a number", opt, s);
		return -1;
	}
	*out = v;
	return 0;
}

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "output", required_argument, NULL, 'o' },
		{ "size", required_argument, NULL, 's' },
		{ "free", required_argument, NULL, 'f' },
		{ "from-dir", required_argument, NULL, 'd' },
		{ "max-entries", required_argument, NULL, 'E' },
		{ "max-bytes", required_argument, NULL, 'B' },
		{ "place-min", required_argument, NULL, 'P' },
		{ NULL, 0, NULL, 0 },
	};
	struct rootfs_options o;
	struct rootfs_stats st;
	const char *out = NULL, *dir = NULL, *image = NULL;
	kiln_error *err = NULL;
	struct timespec t0, t1;
	int c, rc;

	rootfs_options_default(&o);
	/* The image may come before or after the options: collect it and go on. */
	for (;;) {
		c = cli_getopt(cmd, argc, argv, "ho:", opts);
		if (c == -1) {
			if (optind >= argc)
				break;
			if (image)
				return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
			image = argv[optind++];
			continue;
		}
		switch (c) {
		case 'h':
			return KILN_EXIT_OK;
		case 'o':
			out = optarg;
			break;
		case 'd':
			dir = optarg;
			break;
		case 's':
		case 'f':
		case 'B':
		case 'P':
			if (kiln_parse_size(optarg, c == 's' ? &o.size : c == 'f' ? &o.free :
					    c == 'P' ? &o.place_min : &o.limits.max_bytes, &err) < 0) {
				rc = cli_usage_error(cmd, "%s", kiln_error_message(err));
				kiln_error_free(err);
				return rc;
			}
			break;
		case 'E':
			if (parse_count(cmd, "--max-entries", optarg, &o.limits.max_entries) < 0)
				return KILN_EXIT_USAGE;
			break;
		default:
			return KILN_EXIT_USAGE;
		}
	}
	if (out == NULL)
		return cli_usage_error(cmd, "missing -o OUT.ext4");
	if (dir && image)
		return cli_usage_error(cmd, "--from-dir takes no IMAGE");
	if (!dir && !image)
		return cli_usage_error(cmd, "missing IMAGE");
	if (o.size && o.size < (8u << 20))
		return cli_usage_error(cmd, "--size must be at least 8M");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (dir)
		rc = rootfs_build_dir(dir, out, &o, &st, &err);
	else
		rc = rootfs_build_image(image, out, &o, &st, &err);
	if (rc < 0)
		return cli_fail(err);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
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
		 "the linux/amd64 image is used.  Every blob's digest is verified.\n"
		 "\n"
		 "Options:\n"
		 "  -o, --output FILE    the ext4 image to write (replaced atomically)\n"
		 "  --size N             fixed image size (e.g. 2G); fails if the content does not fit\n"
		 "  --free N             free space to leave when the size is computed (default 256M)\n"
		 "  --from-dir DIR       use a directory tree instead of an image\n"
		 "  --max-entries N      refuse layers with more entries in total (default 4000000)\n"
		 "  --max-bytes N        refuse layers declaring more file bytes (default 256G)\n"
		 "  --place-min N        write file data while reading layers when there is at\n"
		 "                       least N of it (default 256M; smaller: tight layout + data pass)\n",
	.run = run,
};

/* rootfs_out.c — the built image as an ext4 rootfs, made by the rootfs stage:
 * kiln's store is offered to it as one more image source (rootfs_source_ops),
 * so the layers are read straight from the store, verified, in one pass. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "builder/builder.h"
#include "rootfs/rootfs.h"

struct store_src {
	build_store *s;
	char manifest[KILN_DIGEST_MAX];
};

static int src_open(const char *location, void **src, kiln_error **err)
{
	/* only reached through build_rootfs_write, which builds the source itself */
	return kiln_err(err, KILN_E_USAGE, "kiln store source '%s': open through build_rootfs_write", location);
}

static int src_root(void *src, const char *tag, char **json, size_t *len, kiln_error **err)
{
	struct store_src *ss = src;
	return build_store_read(ss->s, ss->manifest, json, len, 16 << 20, err);
}

static int blob_open(void *src, const char *digest, void **blob, kiln_error **err)
{
	struct store_src *ss = src;
	char *p;
	int fd;

	if (kiln_digest_parse(digest, NULL, err) < 0)
		return -1;
	p = build_store_blob_path(ss->s, digest);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		kiln_err_errno(err, errno, "store blob %s", digest);
		free(p);
		return -1;
	}
	free(p);
	int *h = kiln_xmalloc(sizeof(*h));
	*h = fd;
	*blob = h;
	return 0;
}

static ssize_t blob_read(void *blob, void *buf, size_t len, kiln_error **err)
{
	ssize_t n = kiln_read_full(*(int *)blob, buf, len);

	if (n < 0)
		kiln_err_errno(err, errno, "store blob read");
	return n;
}

static void blob_close(void *blob)
{
	close(*(int *)blob);
	free(blob);
}

static void src_close(void *src)
{
	free(src);
}

static const struct rootfs_source_ops store_ops = {
	.transport = "kiln-store",
	.open = src_open,
	.root = src_root,
	.blob_open = blob_open,
	.blob_read = blob_read,
	.blob_close = blob_close,
	.close = src_close,
};

int build_rootfs_write(build_store *s, const char *manifest, const char *out, kiln_error **err)
{
	struct store_src *ss = kiln_xcalloc(1, sizeof(*ss));
	rootfs_image *img = NULL;
	struct rootfs_options o;
	int rc;

	ss->s = s;
	snprintf(ss->manifest, sizeof(ss->manifest), "%s", manifest);
	if (rootfs_image_open_source(&store_ops, ss, NULL, manifest, &img, err) < 0)
		return kiln_error_wrap(err, "rootfs"); /* the image closed the source */
	rootfs_options_default(&o);
	rc = rootfs_build_image_open(img, out, &o, NULL, err);
	rootfs_image_close(img);
	return rc < 0 ? kiln_error_wrap(err, "--rootfs-out %s", out) : 0;
}

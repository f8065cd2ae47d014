/* image.c — resolve an image reference to its linux/amd64 manifest, config and
 * layers (index → manifest → config), and read blobs through a stream that
 * hashes every byte, so a blob whose digest or size is wrong is an error that
 * names it, whichever source served it. */
#include <stdlib.h>
#include <string.h>

#include "rootfs/internal.h"

#define DOC_MAX (8u << 20)
#define VBLOB_CHUNK (1u << 17)

struct rootfs_image {
	const struct rootfs_source_ops *ops;
	void *src;
	char *name;
	char manifest_digest[KILN_DIGEST_MAX];
	char config_digest[KILN_DIGEST_MAX];
	json_t *config;
	struct rootfs_layer_desc *layers;
	size_t nlayers;
};

/* ---- verified streams ---------------------------------------------------- */
int rootfs_vblob_open(const struct rootfs_source_ops *ops, void *src, const char *digest,
		      int64_t size, const char *what, struct rootfs_vblob **out, kiln_error **err)
{
	enum kiln_digest_algo algo;
	struct rootfs_vblob *vb;

	if (kiln_digest_parse(digest, &algo, err) < 0)
		return kiln_error_wrap(err, "%s", what);
	vb = kiln_xcalloc(1, sizeof(*vb));
	vb->ops = ops;
	vb->want_size = size;
	vb->what = kiln_xstrdup(what);
	snprintf(vb->digest, sizeof(vb->digest), "%s", digest);
	if (ops->blob_open(src, digest, &vb->blob, err) < 0) {
		kiln_error_wrap(err, "%s", what);
		free(vb->what);
		free(vb);
		return -1;
	}
	vb->hasher = kiln_hasher_new(algo);
	*out = vb;
	return 0;
}

static int vblob_check(struct rootfs_vblob *vb, kiln_error **err)
{
	char got[KILN_DIGEST_MAX];

	if (vb->want_size >= 0 && vb->got != (uint64_t)vb->want_size)
		return kiln_err(err, KILN_E_INVALID, "%s: size mismatch: read %llu bytes, descriptor says %lld",
				vb->what, (unsigned long long)vb->got, (long long)vb->want_size);
	kiln_hasher_final(vb->hasher, got);
	vb->hasher = NULL;
	if (strcmp(got, vb->digest) != 0)
		return kiln_err(err, KILN_E_INVALID, "%s: digest mismatch: content is %s", vb->what, got);
	return 0;
}

ssize_t rootfs_vblob_read(struct rootfs_vblob *vb, void *buf, size_t len, kiln_error **err)
{
	ssize_t n;

	if (vb->eof)
		return 0;
	n = vb->ops->blob_read(vb->blob, buf, len, err);
	if (n < 0)
		return kiln_error_wrap(err, "%s", vb->what);
	if (n == 0) {
		vb->eof = 1;
		return vblob_check(vb, err) < 0 ? -1 : 0;
	}
	vb->got += (uint64_t)n;
	if (vb->want_size >= 0 && vb->got > (uint64_t)vb->want_size)
		return kiln_err(err, KILN_E_INVALID, "%s: longer than its descriptor's %lld bytes",
				vb->what, (long long)vb->want_size);
	kiln_hasher_update(vb->hasher, buf, (size_t)n);
	return n;
}

int rootfs_vblob_finish(struct rootfs_vblob *vb, kiln_error **err)
{
	ssize_t n;

	if (vb->chunk == NULL)
		vb->chunk = kiln_xmalloc(VBLOB_CHUNK);
	while ((n = rootfs_vblob_read(vb, vb->chunk, VBLOB_CHUNK, err)) > 0)
		;
	return n < 0 ? -1 : 0;
}

void rootfs_vblob_close(struct rootfs_vblob *vb)
{
	if (vb == NULL)
		return;
	vb->ops->blob_close(vb->blob);
	kiln_hasher_free(vb->hasher);
	kiln_error_free(vb->err);
	free(vb->chunk);
	free(vb->what);
	free(vb);
}

/* libarchive pulls through this callback; our error is kept for the caller. */
static la_ssize_t vblob_archive_read(struct archive *a, void *ctx, const void **buf)
{
	struct rootfs_vblob *vb = ctx;
	ssize_t n;

	/* the block must stay valid until libarchive's next read: one per stream */
	if (vb->chunk == NULL)
		vb->chunk = kiln_xmalloc(VBLOB_CHUNK);
	n = rootfs_vblob_read(vb, vb->chunk, VBLOB_CHUNK, &vb->err);

	if (n < 0) {
		archive_set_error(a, EIO, "%s", kiln_error_message(vb->err));
		return -1;
	}
	*buf = vb->chunk;
	return n;
}

struct archive *rootfs_vblob_archive(struct rootfs_vblob *vb, kiln_error **err)
{
	struct archive *a = kiln_tar_reader_new();

	archive_read_support_format_empty(a);
	if (archive_read_open(a, vb, NULL, vblob_archive_read, NULL) != ARCHIVE_OK) {
		kiln_err(err, KILN_E_INVALID, "%s: %s", vb->what,
			 vb->err ? kiln_error_message(vb->err) : archive_error_string(a));
		archive_read_free(a);
		return NULL;
	}
	return a;
}

static int read_doc(rootfs_image *img, const char *digest, int64_t size, const char *what,
		    json_t **out, kiln_error **err)
{
	struct rootfs_vblob *vb = NULL;
	kiln_buf b = KILN_BUF_INIT;
	char chunk[65536], *label;
	ssize_t n;
	int rc = -1;

	label = kiln_xasprintf("%s %s", what, digest);
	if (rootfs_vblob_open(img->ops, img->src, digest, size, label, &vb, err) < 0)
		goto out;
	while ((n = rootfs_vblob_read(vb, chunk, sizeof(chunk), err)) > 0) {
		if (b.len + (size_t)n > DOC_MAX) {
			kiln_err(err, KILN_E_LIMIT, "%s: larger than %u bytes", label, DOC_MAX);
			goto out;
		}
		kiln_buf_add(&b, chunk, (size_t)n);
	}
	if (n < 0)
		goto out;
	*out = kiln_json_loadb(b.buf, b.len, label, err);
	rc = *out ? 0 : -1;
out:
	rootfs_vblob_close(vb);
	kiln_buf_free(&b);
	free(label);
	return rc;
}

/* ---- resolution ----------------------------------------------------------- */
static int is_index(const json_t *doc)
{
	const char *mt = kiln_json_str(doc, "mediaType");

	if (mt && (strcmp(mt, "application/vnd.oci.image.index.v1+json") == 0 ||
		   strcmp(mt, "application/vnd.docker.distribution.manifest.list.v2+json") == 0))
		return 1;
	return mt == NULL && json_is_array(json_object_get(doc, "manifests"));
}

static int platform_ok(const json_t *desc)
{
	const json_t *p = json_object_get(desc, "platform");

	if (p == NULL)
		return 1;
	const char *os = kiln_json_str(p, "os"), *arch = kiln_json_str(p, "architecture");
	return os && arch && strcmp(os, "linux") == 0 && strcmp(arch, "amd64") == 0;
}

/* Choose the descriptor for `tag` (by org.opencontainers.image.ref.name) and
 * linux/amd64 among an index's manifests. */
static const json_t *pick(rootfs_image *img, const json_t *index, const char *tag, kiln_error **err)
{
	const json_t *manifests = json_object_get(index, "manifests"), *found = NULL;
	size_t i, candidates = 0;
	json_t *d;

	if (!json_is_array(manifests) || json_array_size(manifests) == 0) {
		kiln_err(err, KILN_E_INVALID, "%s: image index lists no manifests", img->name);
		return NULL;
	}
	json_array_foreach(manifests, i, d) {
		const char *ref = kiln_json_str(json_object_get(d, "annotations"),
						"org.opencontainers.image.ref.name");
		if (tag && (ref == NULL || strcmp(ref, tag) != 0))
			continue;
		candidates++;
		if (platform_ok(d) && found == NULL)
			found = d;
	}
	if (found == NULL) {
		if (tag && candidates == 0)
			kiln_err(err, KILN_E_NOTFOUND, "%s: no image tagged '%s'", img->name, tag);
		else
			kiln_err(err, KILN_E_NOTFOUND, "%s: no linux/amd64 image%s%s", img->name,
				 tag ? " tagged " : "", tag ? tag : "");
		return NULL;
	}
	return found;
}

static int desc_fields(const rootfs_image *img, const json_t *d, const char **digest,
		       int64_t *size, const char *what, kiln_error **err)
{
	*digest = kiln_json_str(d, "digest");
	*size = json_is_integer(json_object_get(d, "size")) ? (int64_t)kiln_json_int(d, "size", -1) : -1;
	if (*digest == NULL)
		return kiln_err(err, KILN_E_INVALID, "%s: %s descriptor has no digest", img->name, what);
	return kiln_digest_parse(*digest, NULL, err) < 0 ? kiln_error_wrap(err, "%s: %s", img->name, what) : 0;
}

static int resolve(rootfs_image *img, const char *tag, kiln_error **err)
{
	char *data = NULL;
	size_t len = 0;
	json_t *doc = NULL, *next = NULL;
	const char *digest;
	int64_t size;
	int rc = -1;

	if (img->ops->root(img->src, tag, &data, &len, err) < 0)
		goto out;
	doc = kiln_json_loadb(data, len, img->name, err);
	if (doc == NULL)
		goto out;
	kiln_digest_buf(KILN_SHA256, data, len, img->manifest_digest);
	/* An index may point at another index (multi-arch images in a layout). */
	for (int depth = 0; is_index(doc); depth++) {
		const json_t *d = pick(img, doc, depth == 0 ? tag : NULL, err);
		if (d == NULL || depth > 4 || desc_fields(img, d, &digest, &size, "manifest", err) < 0) {
			if (*err == NULL)
				kiln_err(err, KILN_E_INVALID, "%s: image indexes nested too deep", img->name);
			goto out;
		}
		snprintf(img->manifest_digest, sizeof(img->manifest_digest), "%s", digest);
		if (read_doc(img, digest, size, "manifest", &next, err) < 0)
			goto out;
		json_decref(doc);
		doc = next;
		next = NULL;
	}
	json_t *cfg = json_object_get(doc, "config"), *layers = json_object_get(doc, "layers");
	if (!json_is_object(cfg) || !json_is_array(layers)) {
		kiln_err(err, KILN_E_INVALID, "%s: manifest %s has no config or layers", img->name,
			 img->manifest_digest);
		goto out;
	}
	if (desc_fields(img, cfg, &digest, &size, "config", err) < 0)
		goto out;
	snprintf(img->config_digest, sizeof(img->config_digest), "%s", digest);
	if (read_doc(img, digest, size, "config", &img->config, err) < 0)
		goto out;
	const char *os = kiln_json_str(img->config, "os"), *arch = kiln_json_str(img->config, "architecture");
	if ((os && strcmp(os, "linux") != 0) || (arch && strcmp(arch, "amd64") != 0)) {
		kiln_err(err, KILN_E_INVALID, "%s: image is %s/%s, not linux/amd64", img->name,
			 os ? os : "?", arch ? arch : "?");
		goto out;
	}
	img->nlayers = json_array_size(layers);
	img->layers = kiln_xcalloc(img->nlayers ? img->nlayers : 1, sizeof(*img->layers));
	for (size_t i = 0; i < img->nlayers; i++) {
		json_t *l = json_array_get(layers, i);
		const char *mt = kiln_json_str(l, "mediaType");
		if (desc_fields(img, l, &digest, &size, "layer", err) < 0)
			goto out;
		if (mt && strstr(mt, "tar") == NULL) {
			kiln_err(err, KILN_E_INVALID, "%s: layer %zu (%s) has media type %s, not a tar",
				 img->name, i, digest, mt);
			goto out;
		}
		img->layers[i].digest = kiln_xstrdup(digest);
		img->layers[i].media_type = kiln_xstrdup(mt ? mt : "application/vnd.oci.image.layer.v1.tar");
		img->layers[i].size = size;
	}
	rc = 0;
out:
	free(data);
	json_decref(doc);
	return rc;
}

int rootfs_image_open_source(const struct rootfs_source_ops *ops, void *src, const char *tag,
			     const char *name, rootfs_image **out, kiln_error **err)
{
	rootfs_image *img = kiln_xcalloc(1, sizeof(*img));

	img->ops = ops;
	img->src = src;
	img->name = kiln_xstrdup(name);
	if (resolve(img, tag, err) < 0) {
		rootfs_image_close(img);
		return -1;
	}
	*out = img;
	return 0;
}

int rootfs_image_open(const char *ref, rootfs_image **out, kiln_error **err)
{
	const struct rootfs_source_ops *ops;
	char *loc = NULL, *tag = NULL;
	void *src = NULL;
	int rc = -1;

	if (rootfs_ref_parse(ref, &ops, &loc, &tag, err) < 0)
		goto out;
	if (ops->open(loc, &src, err) < 0)
		goto out;
	rc = rootfs_image_open_source(ops, src, tag, ref, out, err);
out:
	free(loc);
	free(tag);
	return rc;
}

void rootfs_image_close(rootfs_image *img)
{
	if (img == NULL)
		return;
	if (img->src)
		img->ops->close(img->src);
	for (size_t i = 0; i < img->nlayers; i++) {
		free(img->layers[i].digest);
		free(img->layers[i].media_type);
	}
	free(img->layers);
	json_decref(img->config);
	free(img->name);
	free(img);
}

int rootfs_image_layer_open(rootfs_image *img, size_t i, struct rootfs_vblob **out, kiln_error **err)
{
	char *what = kiln_xasprintf("layer %zu (%s)", i, img->layers[i].digest);
	int rc = rootfs_vblob_open(img->ops, img->src, img->layers[i].digest, img->layers[i].size,
				   what, out, err);
	free(what);
	return rc;
}

const char *rootfs_image_manifest_digest(const rootfs_image *img) { return img->manifest_digest; }
const char *rootfs_image_config_digest(const rootfs_image *img) { return img->config_digest; }
const json_t *rootfs_image_config(const rootfs_image *img) { return img->config; }
size_t rootfs_image_layer_count(const rootfs_image *img) { return img->nlayers; }
const struct rootfs_layer_desc *rootfs_image_layer(const rootfs_image *img, size_t i)
{
	return i < img->nlayers ? &img->layers[i] : NULL;
}

/* rootfs.h — the rootfs stage's contract: read an OCI image (oci:, oci-archive:,
 * docker-archive:, or any source plugged in through rootfs_source_ops), merge
 * its layers in memory with OCI whiteout rules, and write an ext4 image with
 * libext2fs in one pass over the layer contents (no extraction, no mount). */
#ifndef KILN_ROOTFS_H
#define KILN_ROOTFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kiln.h"

/* ---------------------------------------------------------------------------
 * Image sources.  A source serves the image's top document (an OCI image
 * index or manifest) and blobs by digest; rootfs verifies every blob's digest
 * and size itself, so a source only moves bytes.  A registry client plugs in
 * by supplying one more const table.
 * ------------------------------------------------------------------------- */
struct rootfs_source_ops {
	const char *transport; /* "oci", "oci-archive", ... */
	/* Open the source at `location` (the reference without "transport:"). */
	int (*open)(const char *location, void **src, kiln_error **err);
	/* The top-level JSON document (index or manifest) for `tag` (may be NULL);
	 * *json is malloc'd. */
	int (*root)(void *src, const char *tag, char **json, size_t *len, kiln_error **err);
	/* Open a blob for sequential reading; read returns bytes, 0 at end, <0 on error. */
	int (*blob_open)(void *src, const char *digest, void **blob, kiln_error **err);
	ssize_t (*blob_read)(void *blob, void *buf, size_t len, kiln_error **err);
	void (*blob_close)(void *blob);
	void (*close)(void *src);
};

extern const struct rootfs_source_ops rootfs_source_oci;
extern const struct rootfs_source_ops rootfs_source_oci_archive;
extern const struct rootfs_source_ops rootfs_source_docker_archive;

/* Split "TRANSPORT:LOCATION[:TAG]" into its parts (tag only for oci and
 * oci-archive).  Returns the ops for the transport. */
int rootfs_ref_parse(const char *ref, const struct rootfs_source_ops **ops, char **location,
		     char **tag, kiln_error **err);

/* A resolved image: linux/amd64 manifest, config and layer descriptors. */
typedef struct rootfs_image rootfs_image;

struct rootfs_layer_desc {
	char *digest;
	char *media_type;
	int64_t size; /* -1 when unknown */
};

int rootfs_image_open(const char *ref, rootfs_image **out, kiln_error **err);
int rootfs_image_open_source(const struct rootfs_source_ops *ops, void *src, const char *tag,
			     const char *name, rootfs_image **out, kiln_error **err);
void rootfs_image_close(rootfs_image *img);
const char *rootfs_image_manifest_digest(const rootfs_image *img);
const char *rootfs_image_config_digest(const rootfs_image *img);
const json_t *rootfs_image_config(const rootfs_image *img);
size_t rootfs_image_layer_count(const rootfs_image *img);
const struct rootfs_layer_desc *rootfs_image_layer(const rootfs_image *img, size_t i);

/* ---------------------------------------------------------------------------
 * The merged tree.  Layers are applied in order, in memory; regular files
 * keep a reference to where their content is (layer + entry), so the ext4
 * writer later streams each live file's bytes exactly once.
 * ------------------------------------------------------------------------- */
typedef struct rootfs_tree rootfs_tree;

struct rootfs_limits {
	uint64_t max_entries;   /* tar entries over all layers */
	uint64_t max_bytes;     /* sum of declared file sizes over all layers */
	uint64_t max_file_size; /* one file's declared size */
	uint32_t max_path;      /* bytes in one path */
	uint32_t max_xattr;     /* bytes in one xattr value */
};

void rootfs_limits_default(struct rootfs_limits *l);
rootfs_tree *rootfs_tree_new(const struct rootfs_limits *limits);
void rootfs_tree_free(rootfs_tree *t);
/* Apply a layer given as an in-memory tar (optionally compressed); `layer`
 * is its index (later layers win), `name` is used in messages. */
int rootfs_tree_apply_buffer(rootfs_tree *t, unsigned layer, const void *data, size_t len,
			     const char *name, kiln_error **err);
/* A sorted listing, one line per path:
 *   "PATH TYPE MODE UID GID SIZE NLINK [-> TARGET] [xattr=NAME...]"
 * (TYPE one of d f l c b p; MODE in octal; paths without a leading "/"). */
void rootfs_tree_list(const rootfs_tree *t, kiln_buf *out);
uint64_t rootfs_tree_entries(const rootfs_tree *t);

/* ---------------------------------------------------------------------------
 * OCI whiteouts: the one reading of a layer entry's name, used by the merge
 * here and by the builder (image index, extraction, capture).
 * ------------------------------------------------------------------------- */
#define ROOTFS_WH_PREFIX ".wh."
#define ROOTFS_WH_OPAQUE_NAME ".wh..wh..opq"
enum rootfs_whiteout {
	ROOTFS_WH_NONE,    /* an ordinary name */
	ROOTFS_WH_FILE,    /* ".wh.NAME": NAME of lower layers is removed */
	ROOTFS_WH_OPAQUE,  /* ".wh..wh..opq": the directory hides lower layers' entries */
	ROOTFS_WH_META,    /* any other ".wh..wh.*" (AUFS metadata): ignored */
	ROOTFS_WH_INVALID, /* ".wh.", ".wh..", ".wh...": no name to remove; refused */
};
/* Classify one path component (a base name, no "/"); for ROOTFS_WH_FILE,
 * *victim (if victim is not NULL) points at NAME inside base. */
enum rootfs_whiteout rootfs_whiteout_kind(const char *base, const char **victim);
/* The whiteout entry for an image path: "a/b" -> "a/.wh.b" (caller frees). */
char *rootfs_whiteout_path(const char *path);

/* ---------------------------------------------------------------------------
 * Building an ext4 image.
 * ------------------------------------------------------------------------- */
struct rootfs_options {
	uint64_t size;  /* fixed image size in bytes; 0 = content + free */
	uint64_t free;  /* free-space margin when the size is computed */
	/* Place file data while reading the layers (one pass) when there is at
	 * least this much; smaller images get a tight layout and a data pass. */
	uint64_t place_min;
	struct rootfs_limits limits;
};

struct rootfs_stats {
	uint64_t layers;
	uint64_t entries;      /* tar entries read (or directory entries walked) */
	uint64_t inodes;       /* inodes in the result */
	uint64_t content_bytes; /* file bytes written */
	uint64_t image_bytes;  /* size of the ext4 image */
};

void rootfs_options_default(struct rootfs_options *o);
int rootfs_build_image(const char *ref, const char *out, const struct rootfs_options *o,
		       struct rootfs_stats *stats, kiln_error **err);
int rootfs_build_image_open(rootfs_image *img, const char *out, const struct rootfs_options *o,
			    struct rootfs_stats *stats, kiln_error **err);
int rootfs_build_dir(const char *dir, const char *out, const struct rootfs_options *o,
		     struct rootfs_stats *stats, kiln_error **err);

#endif

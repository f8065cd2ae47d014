/* internal.h — what the rootfs stage's files share: the in-memory merged tree
 * (nodes, inodes with a content reference), verified blob streams, and the
 * ext4 writer's entry point.  Not part of the stage's contract. */
#ifndef KILN_ROOTFS_INTERNAL_H
#define KILN_ROOTFS_INTERNAL_H

#include <archive.h>
#include <archive_entry.h>
#include <ext2fs/ext2fs.h>

#include "rootfs/rootfs.h"

/* ---- verified blob streams (image.c) ---------------------------------- */
struct rootfs_vblob {
	const struct rootfs_source_ops *ops;
	void *blob;
	kiln_hasher *hasher;
	char digest[KILN_DIGEST_MAX];
	int64_t want_size;
	uint64_t got;
	int eof;
	char *what; /* "layer 2 sha256:..." for messages */
	char *chunk; /* read buffer handed to libarchive */
	kiln_error *err;
};

int rootfs_vblob_open(const struct rootfs_source_ops *ops, void *src, const char *digest,
		      int64_t size, const char *what, struct rootfs_vblob **out, kiln_error **err);
ssize_t rootfs_vblob_read(struct rootfs_vblob *vb, void *buf, size_t len, kiln_error **err);
/* Read to the end and check the digest and size. */
int rootfs_vblob_finish(struct rootfs_vblob *vb, kiln_error **err);
void rootfs_vblob_close(struct rootfs_vblob *vb);
/* A libarchive reader over a verified blob (tar, any compression). */
struct archive *rootfs_vblob_archive(struct rootfs_vblob *vb, kiln_error **err);
/* The image's source, for re-opening layer blobs. */
int rootfs_image_layer_open(rootfs_image *img, size_t i, struct rootfs_vblob **out, kiln_error **err);

/* ---- the merged tree (tree.c) ----------------------------------------- */
struct rootfs_xattr {
	char *name;
	void *value;
	size_t len;
};

struct rootfs_extent { /* file data segments (sparse map); one covering the file if dense */
	uint64_t off, len;
};

enum rootfs_src_kind { SRC_NONE, SRC_LAYER, SRC_PATH };

struct rootfs_inode {
	mode_t mode; /* type + permission bits */
	uint32_t uid, gid;
	int64_t mtime;
	uint32_t mtime_ns;
	uint64_t size;
	uint32_t rdev_major, rdev_minor;
	char *symlink;
	struct rootfs_xattr *xattrs;
	size_t nxattrs;
	struct rootfs_extent *exts;
	size_t nexts;
	uint32_t nlink;   /* names pointing here in the tree */
	uint32_t refs;    /* owners (nodes), frees at 0 */
	enum rootfs_src_kind src;
	unsigned src_layer;
	uint64_t src_entry; /* ordinal of the tar entry inside its layer */
	char *src_path;     /* SRC_PATH: host file */
	uint32_t ino;       /* ext4 inode once written */
	unsigned mark;      /* scratch for walks that visit each inode once */
	/* physical runs of the file in the image, filled by the writer */
	struct rootfs_run { uint64_t lblk, pblk, len; } *runs;
	size_t nruns;
};

struct rootfs_node {
	char *name;
	struct rootfs_node *parent;
	struct rootfs_node **kids; /* unsorted; sorted before writing */
	size_t nkids, capkids;
	struct rootfs_node *hnext; /* hash chain */
	struct rootfs_inode *inode;
	unsigned layer; /* last layer that declared (or implied) this node */
	int declared;   /* declared by an entry, not only implied as a parent */
};

struct rootfs_tree {
	struct rootfs_node *root;
	struct rootfs_node **htab;
	size_t hsize, hcount;
	struct rootfs_limits limits;
	uint64_t entries, bytes;
	uint64_t nnodes;
	int64_t default_mtime;
	/* Placement (build.c): when data_fd >= 0, pass 1 writes each regular
	 * file's bytes straight into the image file at block data_next and up,
	 * skipping the backup-superblock areas, so no second pass is needed. */
	int data_fd;
	uint64_t data_start, data_next, data_bytes;
	const char *data_name;
};

struct rootfs_inode *rootfs_inode_new(mode_t mode);
void rootfs_inode_unref(struct rootfs_inode *ino);
struct rootfs_node *rootfs_node_lookup(rootfs_tree *t, struct rootfs_node *dir, const char *name);
struct rootfs_node *rootfs_node_add(rootfs_tree *t, struct rootfs_node *dir, const char *name,
				    struct rootfs_inode *ino);
void rootfs_node_remove(rootfs_tree *t, struct rootfs_node *n);
/* Resolve a relative path's directory part the way a container runtime does:
 * symlinks are followed but scoped to the root (".." stops at "/", absolute
 * targets start at the root), missing directories are created (layer
 * `layer`).  Returns the directory node or NULL with *err set. */
struct rootfs_node *rootfs_tree_mkparents(rootfs_tree *t, char **comps, size_t n, unsigned layer,
					  int create, kiln_error **err);
/* Split a tar path into components; rejects "..", empty and over-long paths. */
int rootfs_path_split(const rootfs_tree *t, const char *path, char ***comps, size_t *n,
		      kiln_error **err);
void rootfs_path_free(char **comps, size_t n);
/* Sort every directory's children by name (bytewise), for a stable order. */
void rootfs_tree_sort(rootfs_tree *t);

/* Blocks reserved at the start of each backup group for the superblock,
 * group descriptors (up to 64 blocks) and reserved GDT blocks (up to 1024). */
#define ROOTFS_BACKUP_RESERVE 1089u
#define ROOTFS_GROUP_BLOCKS 32768u
int rootfs_backup_group(uint64_t g);
/* Give a regular file physical runs at the tree's placement cursor. */
void rootfs_place(rootfs_tree *t, struct rootfs_inode *ino);
/* Write file bytes [off, off+len) through the inode's runs into fd. */
int rootfs_runs_write(int fd, const char *name, const struct rootfs_inode *ino, uint64_t off,
		      const void *data, size_t len, kiln_error **err);

/* ---- layers (layer.c) ------------------------------------------------- */
/* Apply every entry of a libarchive reader (layer index `layer`). */
int rootfs_layer_apply(rootfs_tree *t, unsigned layer, struct archive *a, const char *name,
		       kiln_error **err);

/* ---- from a directory (fromdir.c) ------------------------------------- */
int rootfs_tree_from_dir(rootfs_tree *t, const char *dir, kiln_error **err);

/* ---- ext4 writer (ext4.c, ext4data.c) --------------------------------- */
struct rootfs_ext4 {
	ext2_filsys fs;
	int fd;           /* the image file, for data writes that bypass the cache */
	char *out, *tmp;  /* written as tmp, renamed to out when complete */
	rootfs_tree *tree;
	blk64_t goal;     /* next block to allocate near: keeps files contiguous */
	int placed;       /* file data already in place (pass 1 wrote it) */
	uint64_t inodes, content_bytes;
};
const char *rootfs_ext2_strerror(errcode_t code);
int rootfs_ext2_err(kiln_error **err, errcode_t code, const char *what);
struct rootfs_ext4_params {
	uint64_t size, free;
	unsigned char uuid[16], hash_seed[16];
	int64_t fs_time;
	int fd;              /* the image file when data was placed in pass 1, else -1 */
	uint64_t data_start, data_end; /* placed data region, in blocks */
};
#define ROOTFS_NO_FIT (-2) /* placed data cannot be kept: redo with a data pass */
int rootfs_ext4_create(rootfs_tree *t, const char *out, const struct rootfs_ext4_params *p,
		       struct rootfs_ext4 **w, kiln_error **err);
/* Write `len` bytes at offset `off` of a regular file's content. */
int rootfs_ext4_write(struct rootfs_ext4 *w, struct rootfs_inode *ino, uint64_t off,
		      const void *data, size_t len, kiln_error **err);
int rootfs_ext4_close(struct rootfs_ext4 *w, struct rootfs_stats *st, kiln_error **err);
void rootfs_ext4_abort(struct rootfs_ext4 *w);

#endif

/* ext4.c — create the ext4 image with libext2fs: size it from the merged tree,
 * lay down the filesystem (4 KiB blocks, extents, flex_bg, metadata_csum,
 * journal), then every directory, inode and name in tree order.  File data
 * blocks are allocated here, contiguously; ext4data.c fills them later. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <et/com_err.h>
#include <ext2fs/ext2fs.h>

#include "rootfs/internal.h"

#define BS 4096u
#define INODE_SIZE 256u

/* com_err's error_message() lives in a library kiln does not link; the
 * ext2 table itself is exported by libext2fs. */
const char *rootfs_ext2_strerror(errcode_t code)
{
	long base = et_ext2_error_table.base;

	if (code >= base && code < base + et_ext2_error_table.n_msgs)
		return et_ext2_error_table.msgs[code - base];
	if (code > 0 && code < 4096)
		return strerror((int)code);
	return "unknown libext2fs error";
}

int rootfs_ext2_err(kiln_error **err, errcode_t code, const char *what)
{
	return kiln_err(err, code == EXT2_ET_BLOCK_ALLOC_FAIL || code == EXT2_ET_INODE_ALLOC_FAIL ||
				     code == EXT2_ET_DIR_NO_SPACE ? KILN_E_LIMIT : KILN_E_IO,
			"%s: %s", what, rootfs_ext2_strerror(code));
}

/* ---- sizing --------------------------------------------------------------- */
static uint64_t dirent_bytes(const struct rootfs_node *dir)
{
	uint64_t b = 24; /* "." and ".." */

	for (size_t i = 0; i < dir->nkids; i++)
		b += EXT2_DIR_REC_LEN(strlen(dir->kids[i]->name));
	return b;
}

/* Directories that outgrow one block are built as hash trees from the start. */
static int wants_htree(const struct rootfs_node *dir)
{
	return dirent_bytes(dir) > BS - sizeof(struct ext2_dir_entry_tail);
}

static uint64_t file_blocks(const struct rootfs_inode *ino)
{
	uint64_t n = 0, last_end = 0;

	for (size_t i = 0; i < ino->nexts; i++) {
		uint64_t a = ino->exts[i].off / BS, b = (ino->exts[i].off + ino->exts[i].len + BS - 1) / BS;
		if (a < last_end)
			a = last_end;
		if (b > a)
			n += b - a;
		if (b > last_end)
			last_end = b;
	}
	/* extent tree blocks for fragmented (sparse) files */
	if (ino->nexts > 4)
		n += ino->nexts / 300 + 2;
	return n;
}

static void count(const struct rootfs_node *n, int placed, uint64_t *blocks, uint64_t *inodes)
{
	struct rootfs_inode *ino = n->inode;

	if (ino->mark == 0) {
		ino->mark = 1;
		(*inodes)++;
		if (S_ISREG(ino->mode) && placed)
			*blocks += ino->nruns > 4 ? ino->nruns / 300 + 2 : 0; /* extent tree blocks */
		else if (S_ISREG(ino->mode))
			*blocks += file_blocks(ino);
		else if (S_ISLNK(ino->mode) && strlen(ino->symlink) >= 60)
			*blocks += 1;
		size_t xb = 0;
		for (size_t i = 0; i < ino->nxattrs; i++)
			xb += strlen(ino->xattrs[i].name) + ino->xattrs[i].len + 20;
		if (xb > 96)
			*blocks += 1 + xb / BS;
	}
	if (S_ISDIR(ino->mode)) {
		uint64_t b = dirent_bytes(n);
		*blocks += wants_htree(n) ? 3 + (2 * b) / BS : 1;
		for (size_t i = 0; i < n->nkids; i++)
			count(n->kids[i], placed, blocks, inodes);
	}
}

static void unmark(const struct rootfs_node *n)
{
	n->inode->mark = 0;
	for (size_t i = 0; i < n->nkids; i++)
		unmark(n->kids[i]);
}

static errcode_t fs_init(const char *path, uint64_t blocks, uint64_t inodes, int placed, ext2_filsys *fs)
{
	struct ext2_super_block param;

	memset(&param, 0, sizeof(param));
	ext2fs_blocks_count_set(&param, blocks);
	param.s_log_block_size = 2; /* 4 KiB */
	param.s_rev_level = EXT2_DYNAMIC_REV;
	param.s_inode_size = INODE_SIZE;
	param.s_inodes_count = (__u32)(inodes > 0xfffffff0ULL ? 0xfffffff0ULL : inodes);
	/* placed data fills the groups after group 0: keep every group's
	 * bitmaps and inode table together in front of it */
	param.s_log_groups_per_flex = placed ? 10 : 4;
	param.s_desc_size = EXT2_MIN_DESC_SIZE_64BIT;
	param.s_min_extra_isize = param.s_want_extra_isize = 32;
	param.s_feature_compat = EXT2_FEATURE_COMPAT_EXT_ATTR | EXT2_FEATURE_COMPAT_RESIZE_INODE |
				 EXT2_FEATURE_COMPAT_DIR_INDEX;
	param.s_feature_incompat = EXT2_FEATURE_INCOMPAT_FILETYPE | EXT3_FEATURE_INCOMPAT_EXTENTS |
				   EXT4_FEATURE_INCOMPAT_64BIT | EXT4_FEATURE_INCOMPAT_FLEX_BG;
	param.s_feature_ro_compat = EXT2_FEATURE_RO_COMPAT_SPARSE_SUPER |
				    EXT2_FEATURE_RO_COMPAT_LARGE_FILE | EXT4_FEATURE_RO_COMPAT_HUGE_FILE |
				    EXT4_FEATURE_RO_COMPAT_DIR_NLINK |
				    EXT4_FEATURE_RO_COMPAT_EXTRA_ISIZE |
				    EXT4_FEATURE_RO_COMPAT_METADATA_CSUM;
	return ext2fs_initialize(path, EXT2_FLAG_64BITS | EXT2_FLAG_RW, &param, unix_io_manager, fs);
}

/* Blocks left for content once the layout and the journal are in place. */
static int avail_blocks(const char *path, uint64_t blocks, uint64_t inodes, int placed, int64_t *avail,
			kiln_error **err)
{
	ext2_filsys fs = NULL;
	errcode_t rc = fs_init(path, blocks, inodes, placed, &fs);
	int j;

	if (rc)
		return rootfs_ext2_err(err, rc, "sizing the filesystem");
	j = ext2fs_default_journal_size(blocks);
	*avail = (int64_t)ext2fs_free_blocks_count(fs->super) - (j > 0 ? j : 0) - 64;
	if (fs->super->s_inodes_count < inodes)
		*avail = -1;
	ext2fs_free(fs);
	return 0;
}

/* ---- filesystem creation ------------------------------------------------ */
static void set_times(struct ext2_inode_large *in, int64_t sec, uint32_t nsec)
{
	uint32_t extra = ((uint32_t)(((uint64_t)(sec - (int64_t)(int32_t)sec)) >> 32) & EXT4_EPOCH_MASK) |
			 (nsec << EXT4_EPOCH_BITS);

	in->i_atime = in->i_ctime = in->i_mtime = (__u32)sec;
	in->i_crtime = (__u32)sec;
	in->i_atime_extra = in->i_ctime_extra = in->i_mtime_extra = in->i_crtime_extra = extra;
}

static void fill_inode(struct ext2_inode_large *in, const struct rootfs_inode *ino)
{
	in->i_mode = (__u16)ino->mode;
	in->i_uid = (__u16)ino->uid;
	ext2fs_set_i_uid_high(*in, ino->uid >> 16);
	in->i_gid = (__u16)ino->gid;
	ext2fs_set_i_gid_high(*in, ino->gid >> 16);
	in->i_extra_isize = 32;
	set_times(in, ino->mtime, ino->mtime_ns);
}

static int link_name(struct rootfs_ext4 *w, ext2_ino_t dir, const char *name, ext2_ino_t ino,
		     mode_t mode, kiln_error **err)
{
	int ft = S_ISDIR(mode) ? EXT2_FT_DIR : S_ISREG(mode) ? EXT2_FT_REG_FILE :
		 S_ISLNK(mode) ? EXT2_FT_SYMLINK : S_ISCHR(mode) ? EXT2_FT_CHRDEV :
		 S_ISBLK(mode) ? EXT2_FT_BLKDEV : EXT2_FT_FIFO;
	errcode_t rc;

	for (int tries = 0; tries < 2; tries++) {
		rc = ext2fs_link(w->fs, dir, name, ino, ft);
		if (rc != EXT2_ET_DIR_NO_SPACE)
			break;
		rc = ext2fs_expand_dir(w->fs, dir);
		if (rc)
			break;
	}
	return rc ? rootfs_ext2_err(err, rc, name) : 0;
}

static int write_inode(struct rootfs_ext4 *w, ext2_ino_t ino, struct ext2_inode_large *in,
		       const char *what, kiln_error **err)
{
	errcode_t rc = ext2fs_write_inode_full(w->fs, ino, (struct ext2_inode *)in, sizeof(*in));

	return rc ? rootfs_ext2_err(err, rc, what) : 0;
}

static int read_inode(struct rootfs_ext4 *w, ext2_ino_t ino, struct ext2_inode_large *in,
		      const char *what, kiln_error **err)
{
	errcode_t rc;

	memset(in, 0, sizeof(*in));
	rc = ext2fs_read_inode_full(w->fs, ino, (struct ext2_inode *)in, sizeof(*in));
	return rc ? rootfs_ext2_err(err, rc, what) : 0;
}

static int set_xattrs(struct rootfs_ext4 *w, ext2_ino_t ino, const struct rootfs_inode *ri,
		      const char *what, kiln_error **err)
{
	struct ext2_xattr_handle *h = NULL;
	errcode_t rc;

	if (ri->nxattrs == 0)
		return 0;
	rc = ext2fs_xattrs_open(w->fs, ino, &h);
	if (!rc)
		rc = ext2fs_xattrs_read(h);
	for (size_t i = 0; !rc && i < ri->nxattrs; i++)
		rc = ext2fs_xattr_set(h, ri->xattrs[i].name, ri->xattrs[i].value, ri->xattrs[i].len);
	if (h) {
		errcode_t rc2 = ext2fs_xattrs_close(&h);
		if (!rc)
			rc = rc2;
	}
	return rc ? rootfs_ext2_err(err, rc, what) : 0;
}

/* Allocate a regular file's data blocks now (so they are contiguous, in tree
 * order) and remember where they landed for the data pass. */
static int alloc_data(struct rootfs_ext4 *w, ext2_ino_t ino, struct rootfs_inode *ri,
		      const char *what, kiln_error **err)
{
	ext2_extent_handle_t h = NULL;
	struct ext2fs_extent ex;
	uint64_t last_end = 0;
	errcode_t rc = 0;
	size_t cap = 0;

	for (size_t i = 0; i < ri->nexts && !rc; i++) {
		uint64_t a = ri->exts[i].off / BS, b = (ri->exts[i].off + ri->exts[i].len + BS - 1) / BS;
		if (a < last_end)
			a = last_end;
		if (b <= a)
			continue;
		rc = ext2fs_fallocate(w->fs, EXT2_FALLOCATE_FORCE_INIT, ino, NULL, w->goal, a, b - a);
		last_end = b;
	}
	if (rc)
		return rootfs_ext2_err(err, rc, what);
	if (last_end == 0)
		return 0;
	rc = ext2fs_extent_open(w->fs, ino, &h);
	if (!rc)
		rc = ext2fs_extent_get(h, EXT2_EXTENT_ROOT, &ex);
	while (!rc) {
		if ((ex.e_flags & EXT2_EXTENT_FLAGS_LEAF) && ex.e_len > 0) {
			if (ri->nruns == cap) {
				cap = cap ? cap * 2 : 2;
				ri->runs = kiln_xrealloc(ri->runs, cap * sizeof(*ri->runs));
			}
			ri->runs[ri->nruns].lblk = ex.e_lblk;
			ri->runs[ri->nruns].pblk = ex.e_pblk;
			ri->runs[ri->nruns++].len = ex.e_len;
			if (ex.e_pblk + ex.e_len > w->goal)
				w->goal = ex.e_pblk + ex.e_len;
		}
		rc = ext2fs_extent_get(h, EXT2_EXTENT_NEXT, &ex);
	}
	ext2fs_extent_free(h);
	if (rc != EXT2_ET_EXTENT_NO_NEXT && rc != EXT2_ET_NO_CURRENT_NODE)
		return rootfs_ext2_err(err, rc, what);
	return 0;
}

/* Placed files: their blocks were written in pass 1; point extents at them. */
static int set_extents(struct rootfs_ext4 *w, ext2_ino_t ino, struct rootfs_inode *ri,
		       const char *what, kiln_error **err)
{
	struct ext2_inode_large in;
	ext2_extent_handle_t h = NULL;
	uint64_t total = 0;
	errcode_t e;

	if (ri->nruns == 0)
		return 0;
	e = ext2fs_extent_open(w->fs, ino, &h);
	for (size_t i = 0; !e && i < ri->nruns; i++) {
		uint64_t done = 0;
		while (!e && done < ri->runs[i].len) {
			struct ext2fs_extent ex;
			uint64_t n = ri->runs[i].len - done;
			if (n > EXT_INIT_MAX_LEN)
				n = EXT_INIT_MAX_LEN;
			memset(&ex, 0, sizeof(ex));
			ex.e_lblk = (blk64_t)(ri->runs[i].lblk + done);
			ex.e_pblk = ri->runs[i].pblk + done;
			ex.e_len = (__u32)n;
			e = ext2fs_extent_insert(h, EXT2_EXTENT_INSERT_AFTER, &ex);
			if (!e)
				e = ext2fs_extent_fix_parents(h);
			done += n;
			total += n;
		}
	}
	if (h)
		ext2fs_extent_free(h);
	if (e)
		return rootfs_ext2_err(err, e, what);
	if (read_inode(w, ino, &in, what, err) < 0)
		return -1;
	e = ext2fs_iblk_add_blocks(w->fs, (struct ext2_inode *)&in, total);
	if (e)
		return rootfs_ext2_err(err, e, what);
	return write_inode(w, ino, &in, what, err);
}

static int make_dir(struct rootfs_ext4 *w, ext2_ino_t parent, struct rootfs_node *n,
		    ext2_ino_t *out, kiln_error **err)
{
	struct ext2_inode_large in;
	ext2_extent_handle_t h = NULL;
	ext2_ino_t ino;
	blk64_t pblk;
	char *buf = NULL;
	int htree = wants_htree(n), rc = -1;
	errcode_t e;

	e = ext2fs_new_inode(w->fs, parent, LINUX_S_IFDIR | 0755, 0, &ino);
	if (e)
		return rootfs_ext2_err(err, e, n->name);
	ext2fs_inode_alloc_stats2(w->fs, ino, +1, 1);
	memset(&in, 0, sizeof(in));
	fill_inode(&in, n->inode);
	in.i_links_count = 2;
	in.i_size = (htree ? 2 : 1) * BS;
	if (htree)
		in.i_flags |= EXT2_INDEX_FL;
	e = ext2fs_extent_open2(w->fs, ino, (struct ext2_inode *)&in, &h);
	if (e)
		goto fail;
	ext2fs_extent_free(h);
	if (write_inode(w, ino, &in, n->name, err) < 0)
		goto out;
	e = ext2fs_fallocate(w->fs, EXT2_FALLOCATE_FORCE_INIT, ino, NULL, w->goal, 0, htree ? 2 : 1);
	if (e)
		goto fail;
	e = ext2fs_get_mem(BS, &buf);
	if (e)
		goto fail;
	if (htree) {
		/* block 0: ".", ".." and the index root pointing at leaf block 1 */
		struct ext2_dir_entry *de = (struct ext2_dir_entry *)buf;
		int csum = ext2fs_has_feature_metadata_csum(w->fs->super) ? sizeof(struct ext2_dx_tail) : 0;
		memset(buf, 0, BS);
		de->inode = ino;
		ext2fs_dirent_set_name_len(de, 1);
		ext2fs_dirent_set_file_type(de, EXT2_FT_DIR);
		de->name[0] = '.';
		ext2fs_set_rec_len(w->fs, 12, de);
		de = (struct ext2_dir_entry *)(buf + 12);
		de->inode = parent;
		ext2fs_dirent_set_name_len(de, 2);
		ext2fs_dirent_set_file_type(de, EXT2_FT_DIR);
		de->name[0] = de->name[1] = '.';
		ext2fs_set_rec_len(w->fs, BS - 12, de);
		struct ext2_dx_root_info *ri = (struct ext2_dx_root_info *)(buf + 24);
		ri->hash_version = w->fs->super->s_def_hash_version;
		ri->info_length = 8;
		struct ext2_dx_countlimit *cl = (struct ext2_dx_countlimit *)(buf + 32);
		cl->limit = ext2fs_cpu_to_le16((BS - 32 - csum) / sizeof(struct ext2_dx_entry));
		cl->count = ext2fs_cpu_to_le16(1);
		((struct ext2_dx_entry *)cl)->block = ext2fs_cpu_to_le32(1);
		e = ext2fs_bmap2(w->fs, ino, NULL, NULL, 0, 0, NULL, &pblk);
		if (!e)
			e = ext2fs_write_dir_block4(w->fs, pblk, buf, 0, ino);
		ext2fs_free_mem(&buf);
		if (!e)
			e = ext2fs_new_dir_block(w->fs, 0, 0, &buf); /* the empty leaf */
		if (!e)
			e = ext2fs_bmap2(w->fs, ino, NULL, NULL, 0, 1, NULL, &pblk);
		if (!e)
			e = ext2fs_write_dir_block4(w->fs, pblk, buf, 0, ino);
	} else {
		ext2fs_free_mem(&buf);
		e = ext2fs_new_dir_block(w->fs, ino, parent, &buf);
		if (!e)
			e = ext2fs_bmap2(w->fs, ino, NULL, NULL, 0, 0, NULL, &pblk);
		if (!e)
			e = ext2fs_write_dir_block4(w->fs, pblk, buf, 0, ino);
	}
	if (e)
		goto fail;
	if (pblk + 1 > w->goal)
		w->goal = pblk + 1;
	if (set_xattrs(w, ino, n->inode, n->name, err) < 0)
		goto out;
	if (link_name(w, parent, n->name, ino, LINUX_S_IFDIR, err) < 0)
		goto out;
	/* the new ".." is one more link to the parent */
	if (read_inode(w, parent, &in, n->name, err) < 0)
		goto out;
	if (in.i_links_count >= EXT2_LINK_MAX || in.i_links_count == 1)
		in.i_links_count = 1;
	else
		in.i_links_count++;
	if (write_inode(w, parent, &in, n->name, err) < 0)
		goto out;
	*out = ino;
	rc = 0;
	goto out;
fail:
	rootfs_ext2_err(err, e, n->name);
out:
	if (buf)
		ext2fs_free_mem(&buf);
	return rc;
}

/* libext2fs splits hash-tree leaves in uninitialised memory, so the slack
 * after each name would carry heap garbage; zero it for reproducible bytes. */
static int scrub_proc(ext2_ino_t dir, int entry, struct ext2_dir_entry *de, int offset,
		      int blocksize, char *buf, void *priv)
{
	unsigned rec_len = 0, name_len = ext2fs_dirent_name_len(de);
	(void)dir; (void)entry;

	if (ext2fs_get_rec_len(priv, de, &rec_len) || rec_len >= (unsigned)blocksize ||
	    (offset == 12 && rec_len == (unsigned)blocksize - 12))
		return 0; /* an index node or the index root: not a leaf entry */
	if (8 + name_len >= rec_len)
		return 0;
	memset((char *)de + 8 + name_len, 0, rec_len - 8 - name_len);
	return DIRENT_CHANGED;
}

static int scrub_htree(struct rootfs_ext4 *w, ext2_ino_t ino, kiln_error **err)
{
	errcode_t e = ext2fs_dir_iterate2(w->fs, ino, DIRENT_FLAG_INCLUDE_EMPTY, NULL, scrub_proc, w->fs);

	return e ? rootfs_ext2_err(err, e, "directory index") : 0;
}

static int make_other(struct rootfs_ext4 *w, ext2_ino_t dir, struct rootfs_node *n,
		      kiln_error **err)
{
	struct rootfs_inode *ri = n->inode;
	struct ext2_inode_large in;
	ext2_extent_handle_t h = NULL;
	ext2_ino_t ino;
	errcode_t e;

	if (ri->ino)
		return link_name(w, dir, n->name, ri->ino, ri->mode, err); /* a hardlink */
	e = ext2fs_new_inode(w->fs, dir, (int)ri->mode, 0, &ino);
	if (e)
		return rootfs_ext2_err(err, e, n->name);
	if (S_ISLNK(ri->mode)) {
		/* the library stores fast (in-inode) and slow symlinks */
		e = ext2fs_symlink(w->fs, dir, ino, NULL, ri->symlink);
		if (e)
			return rootfs_ext2_err(err, e, n->name);
		if (read_inode(w, ino, &in, n->name, err) < 0)
			return -1;
		fill_inode(&in, ri);
		in.i_mode = (__u16)(LINUX_S_IFLNK | (ri->mode & 07777));
	} else {
		ext2fs_inode_alloc_stats2(w->fs, ino, +1, 0);
		memset(&in, 0, sizeof(in));
		fill_inode(&in, ri);
		if (S_ISREG(ri->mode)) {
			e = ext2fs_extent_open2(w->fs, ino, (struct ext2_inode *)&in, &h);
			if (e)
				return rootfs_ext2_err(err, e, n->name);
			ext2fs_extent_free(h);
			e = ext2fs_inode_size_set(w->fs, (struct ext2_inode *)&in, ri->size);
			if (e)
				return rootfs_ext2_err(err, e, n->name);
		} else if (S_ISCHR(ri->mode) || S_ISBLK(ri->mode)) {
			unsigned maj = ri->rdev_major, min = ri->rdev_minor;
			if (maj < 256 && min < 256)
				in.i_block[0] = maj * 256 + min;
			else
				in.i_block[1] = (min & 0xff) | (maj << 8) | ((min & ~0xffu) << 12);
		}
	}
	in.i_links_count = (__u16)(ri->nlink > EXT2_LINK_MAX ? EXT2_LINK_MAX : ri->nlink);
	if (write_inode(w, ino, &in, n->name, err) < 0)
		return -1;
	if (S_ISREG(ri->mode) &&
	    (w->placed ? set_extents(w, ino, ri, n->name, err) : alloc_data(w, ino, ri, n->name, err)) < 0)
		return -1;
	if (set_xattrs(w, ino, ri, n->name, err) < 0)
		return -1;
	ri->ino = ino;
	w->inodes++;
	return link_name(w, dir, n->name, ino, ri->mode, err);
}

static int build(struct rootfs_ext4 *w, struct rootfs_node *dir, ext2_ino_t dino, kiln_error **err)
{
	for (size_t i = 0; i < dir->nkids; i++) {
		struct rootfs_node *k = dir->kids[i];
		int rc;
		if (S_ISDIR(k->inode->mode)) {
			ext2_ino_t sub = 0;
			rc = make_dir(w, dino, k, &sub, err);
			if (rc == 0) {
				w->inodes++;
				rc = build(w, k, sub, err);
			}
			if (rc == 0 && wants_htree(k))
				rc = scrub_htree(w, sub, err);
		} else {
			rc = make_other(w, dino, k, err);
		}
		if (rc < 0)
			return kiln_error_wrap(err, "%s", dir->parent ? dir->name : "/");
	}
	return 0;
}

static void mark_runs(struct rootfs_ext4 *w, const struct rootfs_node *n)
{
	struct rootfs_inode *ino = n->inode;

	if (!ino->mark) {
		ino->mark = 1;
		for (size_t i = 0; i < ino->nruns; i++)
			ext2fs_block_alloc_stats_range(w->fs, ino->runs[i].pblk, (unsigned)ino->runs[i].len, +1);
	}
	for (size_t i = 0; i < n->nkids; i++)
		mark_runs(w, n->kids[i]);
}

static int lay_out(struct rootfs_ext4 *w, const struct rootfs_ext4_params *p, kiln_error **err)
{
	ext2_filsys fs = w->fs;
	struct ext2_inode_large in;
	struct ext2fs_journal_params jp;
	errcode_t e;

	fs->now = p->fs_time;
	memcpy(fs->super->s_uuid, p->uuid, 16);
	memcpy(fs->super->s_hash_seed, p->hash_seed, 16);
	ext2fs_init_csum_seed(fs);
	fs->super->s_def_hash_version = EXT2_HASH_HALF_MD4;
	fs->super->s_flags |= ((char)-1 < 0) ? EXT2_FLAGS_SIGNED_HASH : EXT2_FLAGS_UNSIGNED_HASH;
	fs->super->s_mkfs_time = fs->super->s_lastcheck = fs->super->s_wtime = (__u32)p->fs_time;
	fs->super->s_max_mnt_count = (__u16)-1;
	fs->super->s_checksum_type = EXT2_CRC32C_CHKSUM;
	fs->super->s_r_blocks_count = 0;
	snprintf((char *)fs->super->s_volume_name, sizeof(fs->super->s_volume_name), "rootfs");
	if (w->placed) {
		/* claim the placed data first, so nothing else lands on it */
		for (dgrp_t g = 1; g < fs->group_desc_count; g++) {
			blk64_t sb = 0, od = 0, nd = 0;
			blk_t used = 0;
			if (ext2fs_super_and_bgd_loc2(fs, g, &sb, &od, &nd, &used) == 0 &&
			    used > ROOTFS_BACKUP_RESERVE)
				return ROOTFS_NO_FIT;
		}
		mark_runs(w, w->tree->root);
		unmark(w->tree->root);
	}
	e = ext2fs_allocate_tables(fs);
	if (e)
		return rootfs_ext2_err(err, e, "allocating group tables");
	/* The image file starts as zeros, so the inode tables already are. */
	for (dgrp_t g = 0; g < fs->group_desc_count; g++) {
		ext2fs_bg_flags_set(fs, g, EXT2_BG_INODE_ZEROED);
		ext2fs_group_desc_csum_set(fs, g);
	}
	e = ext2fs_mkdir(fs, EXT2_ROOT_INO, EXT2_ROOT_INO, 0);
	if (e)
		return rootfs_ext2_err(err, e, "root directory");
	for (ext2_ino_t i = EXT2_ROOT_INO + 1; i < EXT2_FIRST_INODE(fs->super); i++)
		ext2fs_inode_alloc_stats2(fs, i, +1, 0);
	ext2fs_mark_inode_bitmap2(fs->inode_map, EXT2_BAD_INO);
	ext2fs_inode_alloc_stats2(fs, EXT2_BAD_INO, +1, 0);
	e = ext2fs_update_bb_inode(fs, NULL);
	if (!e)
		e = ext2fs_create_resize_inode(fs);
	if (e)
		return rootfs_ext2_err(err, e, "reserved inodes");
	e = ext2fs_get_journal_params(&jp, fs);
	if (!e)
		e = ext2fs_add_journal_inode3(fs, &jp, w->placed ? p->data_end : ~0ULL,
					      EXT2_MKJOURNAL_LAZYINIT | EXT2_MKJOURNAL_NO_MNT_CHECK);
	if (e)
		return rootfs_ext2_err(err, e, "creating the journal");
	if (read_inode(w, EXT2_ROOT_INO, &in, "/", err) < 0)
		return -1;
	fill_inode(&in, w->tree->root->inode);
	in.i_mode = (__u16)(LINUX_S_IFDIR | (w->tree->root->inode->mode & 07777));
	if (write_inode(w, EXT2_ROOT_INO, &in, "/", err) < 0)
		return -1;
	if (set_xattrs(w, EXT2_ROOT_INO, w->tree->root->inode, "/", err) < 0)
		return -1;
	w->inodes = 1;
	return build(w, w->tree->root, EXT2_ROOT_INO, err);
}

int rootfs_ext4_create(rootfs_tree *t, const char *out, const struct rootfs_ext4_params *p,
		       struct rootfs_ext4 **wp, kiln_error **err)
{
	struct rootfs_ext4 *w = kiln_xcalloc(1, sizeof(*w));
	uint64_t content = 0, inodes = 0, blocks, floor_blocks = 0;
	uint64_t free_blocks = p->size ? 0 : (p->free + BS - 1) / BS;
	int64_t avail = 0;
	errcode_t e;
	int rc;

	w->tree = t;
	w->fd = p->fd;
	w->placed = p->fd >= 0;
	w->out = kiln_xstrdup(out);
	w->tmp = kiln_xasprintf("%s.kiln-tmp", out);
	count(t->root, w->placed, &content, &inodes);
	unmark(t->root);
	inodes += EXT2_GOOD_OLD_FIRST_INO + 16;
	if (w->placed) {
		/* the placed region is fixed; the rest must fit after it */
		content += p->data_end - p->data_start;
		floor_blocks = p->data_end + 64;
	} else {
		w->fd = open(w->tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (w->fd < 0) {
			kiln_err_errno(err, errno, "create %s", w->tmp);
			goto fail;
		}
	}
	if (p->size) {
		blocks = p->size / BS;
		inodes += p->size / 16384 / 4;
		if (blocks < floor_blocks)
			goto no_fit;
	} else {
		/* content + layout overhead + the free margin, grown until it fits */
		inodes += p->free / 16384;
		blocks = content + free_blocks;
		blocks += blocks / 16 + 4096;
		if (blocks < floor_blocks + free_blocks)
			blocks = floor_blocks + free_blocks;
	}
	for (int tries = 0;; tries++) {
		if (ftruncate(w->fd, (off_t)(blocks * BS)) < 0) {
			kiln_err_errno(err, errno, "size %s", w->tmp);
			goto fail;
		}
		if (avail_blocks(w->tmp, blocks, inodes, w->placed, &avail, err) < 0)
			goto fail;
		uint64_t need = content + free_blocks;
		if (avail >= 0 && (uint64_t)avail >= need)
			break;
		if (p->size && w->placed)
			goto no_fit; /* a tighter layout without placement may still fit */
		if (p->size || tries > 8) {
			kiln_err(err, KILN_E_LIMIT,
				 "the content needs about %llu MiB (%llu inodes) but the image is %llu MiB; "
				 "use a larger --size", (unsigned long long)((content * BS) >> 20),
				 (unsigned long long)inodes, (unsigned long long)((blocks * BS) >> 20));
			goto fail;
		}
		blocks += (avail < 0 ? blocks / 4 : need - (uint64_t)avail) + 1024;
	}
	if (!p->size)
		blocks = (blocks + 255) & ~255ULL; /* whole MiB */
	if (w->placed) {
		if (ftruncate(w->fd, (off_t)(blocks * BS)) < 0) {
			kiln_err_errno(err, errno, "size %s", w->tmp);
			goto fail;
		}
	} else if (ftruncate(w->fd, 0) < 0 || ftruncate(w->fd, (off_t)(blocks * BS)) < 0) {
		kiln_err_errno(err, errno, "size %s", w->tmp);
		goto fail;
	}
	e = fs_init(w->tmp, blocks, inodes, w->placed, &w->fs);
	if (e) {
		rootfs_ext2_err(err, e, w->tmp);
		goto fail;
	}
	rc = lay_out(w, p, err);
	if (rc == ROOTFS_NO_FIT)
		goto no_fit;
	if (rc < 0)
		goto fail;
	*wp = w;
	return 0;
no_fit:
	/* the caller owns the placed file and redoes the build without it */
	if (w->fs)
		ext2fs_free(w->fs);
	free(w->tmp);
	free(w->out);
	free(w);
	return ROOTFS_NO_FIT;
fail:
	rootfs_ext4_abort(w);
	return -1;
}

void rootfs_ext4_abort(struct rootfs_ext4 *w)
{
	if (w == NULL)
		return;
	if (w->fs)
		ext2fs_free(w->fs);
	if (w->fd >= 0)
		close(w->fd);
	unlink(w->tmp);
	free(w->tmp);
	free(w->out);
	free(w);
}

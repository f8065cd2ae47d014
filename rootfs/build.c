/* build.c — the stage's driver: pass 1 reads every layer's headers into the
 * merged tree (verifying digests), the ext4 layout is written from the tree,
 * then pass 2 streams only the live files' bytes from the layers straight
 * into their pre-allocated blocks.  Shadowed files are never written. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rootfs/internal.h"

void rootfs_options_default(struct rootfs_options *o)
{
	memset(o, 0, sizeof(*o));
	o->free = 256ULL << 20;
	o->place_min = 256ULL << 20;
	rootfs_limits_default(&o->limits);
}

/* ---- data writes ---------------------------------------------------------- */
int rootfs_ext4_write(struct rootfs_ext4 *w, struct rootfs_inode *ino, uint64_t off,
		      const void *data, size_t len, kiln_error **err)
{
	if (rootfs_runs_write(w->fd, w->tmp, ino, off, data, len, err) < 0)
		return -1;
	w->content_bytes += len;
	return 0;
}

int rootfs_runs_write(int fd, const char *name, const struct rootfs_inode *ino, uint64_t off,
		      const void *data, size_t len, kiln_error **err)
{
	const char *p = data;
	size_t r = 0;

	while (len > 0) {
		uint64_t lblk = off / 4096;
		while (r < ino->nruns && lblk >= ino->runs[r].lblk + ino->runs[r].len)
			r++;
		if (r == ino->nruns || lblk < ino->runs[r].lblk) {
			/* runs are sorted; data before the current run means a restart */
			for (r = 0; r < ino->nruns; r++)
				if (lblk >= ino->runs[r].lblk && lblk < ino->runs[r].lblk + ino->runs[r].len)
					break;
			if (r == ino->nruns)
				return kiln_err(err, KILN_E_INVALID,
						"data at offset %llu lies outside the file's declared extents",
						(unsigned long long)off);
		}
		uint64_t run_end = (ino->runs[r].lblk + ino->runs[r].len) * 4096;
		size_t n = (size_t)(run_end - off < len ? run_end - off : len);
		off_t phys = (off_t)((ino->runs[r].pblk + (lblk - ino->runs[r].lblk)) * 4096 + off % 4096);
		if (kiln_pwrite_full(fd, p, n, phys) < 0)
			return kiln_err_errno(err, errno, "write %s", name);
		p += n;
		off += (uint64_t)n;
		len -= n;
	}
	return 0;
}

int rootfs_ext4_close(struct rootfs_ext4 *w, struct rootfs_stats *st, kiln_error **err)
{
	errcode_t e;
	uint64_t bytes = ext2fs_blocks_count(w->fs->super) * 4096;

	if (st) {
		st->inodes = w->inodes;
		st->content_bytes = w->content_bytes;
		st->image_bytes = bytes;
	}
	e = ext2fs_close_free(&w->fs);
	if (e) {
		rootfs_ext2_err(err, e, w->tmp);
		goto fail;
	}
	if (fdatasync(w->fd) < 0 || close(w->fd) < 0) {
		w->fd = -1;
		kiln_err_errno(err, errno, "write %s", w->tmp);
		goto fail;
	}
	w->fd = -1;
	if (rename(w->tmp, w->out) < 0) {
		kiln_err_errno(err, errno, "rename %s to %s", w->tmp, w->out);
		goto fail;
	}
	free(w->tmp);
	free(w->out);
	free(w);
	return 0;
fail:
	rootfs_ext4_abort(w);
	return -1;
}

/* ---- pass 2: contents ----------------------------------------------------- */
struct want {
	uint64_t entry;
	struct rootfs_inode *ino;
};

struct wants {
	struct want *v;
	size_t n, cap;
};

static void collect(struct rootfs_node *n, struct wants *per_layer, size_t nlayers,
		    struct rootfs_inode ***paths, size_t *npaths, size_t *cpaths)
{
	struct rootfs_inode *ino = n->inode;

	if (S_ISREG(ino->mode) && ino->nruns > 0 && !ino->mark) {
		ino->mark = 1;
		if (ino->src == SRC_LAYER && ino->src_layer < nlayers) {
			struct wants *w = &per_layer[ino->src_layer];
			if (w->n == w->cap) {
				w->cap = w->cap ? w->cap * 2 : 64;
				w->v = kiln_xrealloc(w->v, w->cap * sizeof(*w->v));
			}
			w->v[w->n].entry = ino->src_entry;
			w->v[w->n++].ino = ino;
		} else if (ino->src == SRC_PATH) {
			if (*npaths == *cpaths) {
				*cpaths = *cpaths ? *cpaths * 2 : 64;
				*paths = kiln_xrealloc(*paths, *cpaths * sizeof(**paths));
			}
			(*paths)[(*npaths)++] = ino;
		}
	}
	for (size_t i = 0; i < n->nkids; i++)
		collect(n->kids[i], per_layer, nlayers, paths, npaths, cpaths);
}

static int want_cmp(const void *a, const void *b)
{
	const struct want *x = a, *y = b;

	return x->entry < y->entry ? -1 : x->entry > y->entry;
}

static int stream_layer(struct rootfs_ext4 *w, rootfs_image *img, size_t layer, struct wants *ws,
			kiln_error **err)
{
	struct rootfs_vblob *vb = NULL;
	struct archive *a = NULL;
	struct archive_entry *e;
	uint64_t ordinal = 0;
	size_t k = 0;
	int r, rc = -1;

	qsort(ws->v, ws->n, sizeof(*ws->v), want_cmp);
	if (rootfs_image_layer_open(img, layer, &vb, err) < 0)
		return -1;
	a = rootfs_vblob_archive(vb, err);
	if (a == NULL)
		goto out;
	while (k < ws->n && (r = kiln_tar_next(a, &e)) == ARCHIVE_OK) {
		if (ordinal++ != ws->v[k].entry)
			continue;
		struct rootfs_inode *ino = ws->v[k++].ino;
		if (archive_entry_size(e) != (la_int64_t)ino->size) {
			kiln_err(err, KILN_E_INVALID, "%s: changed while being read", vb->what);
			goto out;
		}
		const void *buf;
		size_t len;
		la_int64_t off;
		while ((r = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
			if (len > 0 && rootfs_ext4_write(w, ino, (uint64_t)off, buf, len, err) < 0) {
				kiln_error_wrap(err, "%s: '%s'", vb->what, archive_entry_pathname(e));
				goto out;
			}
		}
		if (r != ARCHIVE_EOF)
			break;
	}
	if (k < ws->n) {
		kiln_err(err, KILN_E_INVALID, "%s: %s", vb->what,
			 vb->err ? kiln_error_message(vb->err) : archive_error_string(a));
		goto out;
	}
	rc = rootfs_vblob_finish(vb, err);
out:
	archive_read_free(a);
	rootfs_vblob_close(vb);
	return rc;
}

static int stream_path(struct rootfs_ext4 *w, struct rootfs_inode *ino, kiln_error **err)
{
	enum { BUFSZ = 1 << 20 };
	int fd = open(ino->src_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	char *buf;
	int rc = -1;

	if (fd < 0)
		return kiln_err_errno(err, errno, "open %s", ino->src_path);
	buf = kiln_xmalloc(BUFSZ);
	for (size_t i = 0; i < ino->nexts; i++) {
		uint64_t off = ino->exts[i].off, end = off + ino->exts[i].len;
		while (off < end) {
			size_t want = end - off < BUFSZ ? (size_t)(end - off) : BUFSZ;
			ssize_t n = kiln_pread_full(fd, buf, want, (off_t)off);
			if (n <= 0) {
				kiln_err(err, KILN_E_IO, "read %s: %s", ino->src_path,
					 n < 0 ? strerror(errno) : "file shrank while being read");
				goto out;
			}
			if (rootfs_ext4_write(w, ino, off, buf, (size_t)n, err) < 0)
				goto out;
			off += (uint64_t)n;
		}
	}
	rc = 0;
out:
	free(buf);
	close(fd);
	return rc;
}

static int write_contents(struct rootfs_ext4 *w, rootfs_tree *t, rootfs_image *img, size_t nlayers,
			  kiln_error **err)
{
	struct wants *per = kiln_xcalloc(nlayers ? nlayers : 1, sizeof(*per));
	struct rootfs_inode **paths = NULL;
	size_t npaths = 0, cpaths = 0;
	int rc = 0;

	collect(t->root, per, nlayers, &paths, &npaths, &cpaths);
	for (size_t i = 0; rc == 0 && i < nlayers; i++)
		if (per[i].n)
			rc = stream_layer(w, img, i, &per[i], err);
	for (size_t i = 0; rc == 0 && i < npaths; i++)
		rc = stream_path(w, paths[i], err);
	for (size_t i = 0; i < nlayers; i++)
		free(per[i].v);
	free(per);
	free(paths);
	return rc;
}

/* ---- drivers ------------------------------------------------------------- */
static void derive(const char *seed, const char *purpose, unsigned char out[16])
{
	char d[KILN_DIGEST_MAX], *s = kiln_xasprintf("kiln rootfs %s %s", purpose, seed);
	const char *hex;

	kiln_digest_buf(KILN_SHA256, s, strlen(s), d);
	free(s);
	hex = kiln_digest_hex(d);
	for (int i = 0; i < 16; i++) {
		unsigned v;
		sscanf(hex + 2 * i, "%2x", &v);
		out[i] = (unsigned char)v;
	}
	out[6] = (out[6] & 0x0f) | 0x50; /* a name-based UUID (version 5 layout) */
	out[8] = (out[8] & 0x3f) | 0x80;
}

static int64_t created_time(const json_t *config)
{
	const char *c = config ? kiln_json_str(config, "created") : NULL;
	struct tm tm;

	memset(&tm, 0, sizeof(tm));
	if (c && sscanf(c, "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
			&tm.tm_min, &tm.tm_sec) == 6) {
		tm.tm_year -= 1900;
		tm.tm_mon -= 1;
		time_t t = timegm(&tm);
		if (t > 0)
			return (int64_t)t;
	}
	return 1; /* libext2fs takes 0 as "now" */
}

static void ensure_lost_found(rootfs_tree *t)
{
	if (rootfs_node_lookup(t, t->root, "lost+found") == NULL) {
		struct rootfs_inode *ino = rootfs_inode_new(S_IFDIR | 0700);
		ino->mtime = t->default_mtime;
		rootfs_node_add(t, t->root, "lost+found", ino);
	}
}

struct run_ref {
	uint64_t pblk, len;
};

static void live_runs(struct rootfs_node *n, struct run_ref **v, size_t *len, size_t *cap)
{
	struct rootfs_inode *ino = n->inode;

	if (!ino->mark) {
		ino->mark = 1;
		for (size_t i = 0; i < ino->nruns; i++) {
			if (*len == *cap) {
				*cap = *cap ? *cap * 2 : 256;
				*v = kiln_xrealloc(*v, *cap * sizeof(**v));
			}
			(*v)[*len].pblk = ino->runs[i].pblk;
			(*v)[(*len)++].len = ino->runs[i].len;
		}
	}
	for (size_t i = 0; i < n->nkids; i++)
		live_runs(n->kids[i], v, len, cap);
}

static void clear_marks(struct rootfs_node *n)
{
	n->inode->mark = 0;
	for (size_t i = 0; i < n->nkids; i++)
		clear_marks(n->kids[i]);
}

static void drop_runs(struct rootfs_node *n)
{
	free(n->inode->runs);
	n->inode->runs = NULL;
	n->inode->nruns = 0;
	for (size_t i = 0; i < n->nkids; i++)
		drop_runs(n->kids[i]);
}

static int run_cmp(const void *a, const void *b)
{
	const struct run_ref *x = a, *y = b;

	return x->pblk < y->pblk ? -1 : x->pblk > y->pblk;
}

/* Bytes of files that later layers removed or replaced must not stay in the
 * image (nor its free space): punch them out before anything reuses them. */
static int punch_dead(rootfs_tree *t, kiln_error **err)
{
	struct run_ref *v = NULL;
	size_t n = 0, cap = 0;
	uint64_t pos = t->data_start;
	int rc = 0;

	live_runs(t->root, &v, &n, &cap);
	clear_marks(t->root);
	qsort(v, n, sizeof(*v), run_cmp);
	for (size_t i = 0; i <= n && rc == 0; i++) {
		uint64_t next = i < n ? v[i].pblk : t->data_next;
		if (next > pos && fallocate(t->data_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					    (off_t)(pos * 4096), (off_t)((next - pos) * 4096)) < 0 &&
		    errno != EOPNOTSUPP)
			rc = kiln_err_errno(err, errno, "punch %s", t->data_name);
		if (i < n && v[i].pblk + v[i].len > pos)
			pos = v[i].pblk + v[i].len;
	}
	free(v);
	return rc;
}

static int finish(rootfs_tree *t, rootfs_image *img, size_t nlayers, const char *out,
		  const struct rootfs_options *o, const char *seed, int64_t fs_time,
		  struct rootfs_stats *st, kiln_error **err)
{
	struct rootfs_ext4_params p;
	struct rootfs_ext4 *w = NULL;
	int rc;

	memset(&p, 0, sizeof(p));
	p.size = o->size;
	p.free = o->free;
	p.fs_time = fs_time;
	p.fd = t->data_fd;
	p.data_start = t->data_start;
	p.data_end = t->data_next;
	derive(seed, "uuid", p.uuid);
	derive(seed, "hash-seed", p.hash_seed);
	double t0 = kiln_now_ms() / 1e3, t1, t2;
	ensure_lost_found(t);
	rootfs_tree_sort(t);
	/* placed data starts after group 0 (132 MiB): worth it for big images */
	if (p.fd >= 0 && (t->data_next - t->data_start) * 4096 < o->place_min)
		rc = ROOTFS_NO_FIT;
	else
		rc = rootfs_ext4_create(t, out, &p, &w, err);
	if (rc == ROOTFS_NO_FIT) {
		/* the placed data cannot stay where it is: lay out afresh, then stream */
		kiln_info("rootfs: not keeping the placed data (small image or no fit); using a data pass");
		drop_runs(t->root);
		close(t->data_fd);
		t->data_fd = p.fd = -1;
		rc = rootfs_ext4_create(t, out, &p, &w, err);
	}
	t->data_fd = -1; /* the writer owns the file now (or closed it on failure) */
	if (rc < 0)
		return -1;
	t1 = kiln_now_ms() / 1e3;
	kiln_info("rootfs: ext4 layout and %llu inodes in %.2fs", (unsigned long long)w->inodes, t1 - t0);
	if (w->placed)
		w->content_bytes = t->data_bytes;
	else if (write_contents(w, t, img, nlayers, err) < 0) {
		rootfs_ext4_abort(w);
		return -1;
	}
	t2 = kiln_now_ms() / 1e3;
	kiln_info("rootfs: %.1f MiB of file data in %.2fs", (double)w->content_bytes / 1048576.0, t2 - t1);
	rc = rootfs_ext4_close(w, st, err);
	kiln_info("rootfs: closed the image in %.2fs", kiln_now_ms() / 1e3 - t2);
	return rc;
}

/* A corrupted blob usually fails to decompress before its end is reached;
 * the digest mismatch is the more useful message, so check for it. */
static void prefer_digest_error(struct rootfs_vblob *vb, kiln_error **err)
{
	kiln_error *derr = NULL;

	if (vb->err) {
		derr = vb->err;
		vb->err = NULL;
	} else if (!vb->eof) {
		rootfs_vblob_finish(vb, &derr);
	}
	if (derr && derr->kind == KILN_E_INVALID) {
		kiln_error_free(*err);
		*err = derr;
	} else {
		kiln_error_free(derr);
	}
}

int rootfs_build_image_open(rootfs_image *img, const char *out, const struct rootfs_options *o,
			    struct rootfs_stats *st, kiln_error **err)
{
	size_t n = rootfs_image_layer_count(img);
	rootfs_tree *t = rootfs_tree_new(&o->limits);
	struct rootfs_stats local;
	int rc = -1;

	if (st == NULL)
		st = &local;
	memset(st, 0, sizeof(*st));
	double t0 = kiln_now_ms() / 1e3;
	char *tmp = kiln_xasprintf("%s.kiln-tmp", out);
	/* pass 1 writes file bytes straight into the image, from group 1 on */
	t->data_fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (t->data_fd < 0) {
		kiln_err_errno(err, errno, "create %s", tmp);
		free(tmp);
		rootfs_tree_free(t);
		return -1;
	}
	t->data_name = tmp;
	t->data_start = t->data_next = ROOTFS_GROUP_BLOCKS + ROOTFS_BACKUP_RESERVE;
	t->default_mtime = created_time(rootfs_image_config(img));
	t->root->inode->mtime = t->default_mtime;
	for (size_t i = 0; i < n; i++) {
		struct rootfs_vblob *vb = NULL;
		struct archive *a;
		if (rootfs_image_layer_open(img, i, &vb, err) < 0)
			goto out;
		a = rootfs_vblob_archive(vb, err);
		int lrc = a ? rootfs_layer_apply(t, (unsigned)i, a, vb->what, err) : -1;
		if (lrc == 0)
			lrc = rootfs_vblob_finish(vb, err);
		else
			prefer_digest_error(vb, err);
		archive_read_free(a);
		rootfs_vblob_close(vb);
		if (lrc < 0)
			goto out;
	}
	st->layers = n;
	st->entries = t->entries;
	kiln_info("rootfs: read %zu layers, %llu entries, %.1f MiB placed, in %.2fs", n,
		  (unsigned long long)t->entries, (double)t->data_bytes / 1048576.0, kiln_now_ms() / 1e3 - t0);
	if (punch_dead(t, err) < 0)
		goto out;
	rc = finish(t, img, n, out, o, rootfs_image_manifest_digest(img), t->default_mtime, st, err);
	st->entries = t->entries;
	st->layers = n;
out:
	if (t->data_fd >= 0) { /* failed before the writer took the file over */
		close(t->data_fd);
		unlink(tmp);
	}
	free(tmp);
	rootfs_tree_free(t);
	return rc;
}

int rootfs_build_image(const char *ref, const char *out, const struct rootfs_options *o,
		       struct rootfs_stats *st, kiln_error **err)
{
	rootfs_image *img = NULL;
	int rc;

	if (rootfs_image_open(ref, &img, err) < 0)
		return -1;
	rc = rootfs_build_image_open(img, out, o, st, err);
	rootfs_image_close(img);
	return rc;
}

int rootfs_build_dir(const char *dir, const char *out, const struct rootfs_options *o,
		     struct rootfs_stats *st, kiln_error **err)
{
	rootfs_tree *t = rootfs_tree_new(&o->limits);
	struct rootfs_stats local;
	kiln_buf listing = KILN_BUF_INIT;
	char seed[KILN_DIGEST_MAX];
	int rc = -1;

	if (st == NULL)
		st = &local;
	memset(st, 0, sizeof(*st));
	t->default_mtime = 1;
	if (rootfs_tree_from_dir(t, dir, err) < 0)
		goto out;
	/* same tree (names, modes, owners, sizes) → same UUID and hash seed */
	rootfs_tree_list(t, &listing);
	kiln_digest_buf(KILN_SHA256, listing.buf, listing.len, seed);
	st->entries = t->entries;
	rc = finish(t, NULL, 0, out, o, seed, 1, st, err);
	st->entries = t->entries;
out:
	kiln_buf_free(&listing);
	rootfs_tree_free(t);
	return rc;
}

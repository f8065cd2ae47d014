/* client_tar.c — moving trees between host and guest as tar streams: the
 * agent pipes them through the guest's tar; here libarchive packs a host
 * directory (numeric owners, hard links kept) and extracts a downloaded one
 * safely (no absolute paths, no "..", no writing through symlinks). */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guest/internal.h"

/* out/user receive the download's tar: they must be in place before the
 * request goes out, as data may arrive together with STARTED. */
static struct guest_proc *xfer_start(guest_conn *c, uint8_t type, const char *dir, const char *name,
				     uint64_t deadline, guest_output_fn out, void *user, kiln_error **err)
{
	struct guest_xfer_req req = { .dir = (char *)dir, .name = (char *)name };
	struct guest_proc *p;

	if (dir[0] != '/') {
		kiln_err(err, KILN_E_USAGE, "guest directory must be absolute: %s", dir);
		return NULL;
	}
	if (gc_check(c, err) < 0)
		return NULL;
	/* capabilities are known once the agent's HELLO came (guest_connect_nowait) */
	if (gc_wait_for(c, &c->have_hello, deadline, "HELLO", err) < 0)
		return NULL;
	if (!(c->hello.caps & (type == GUEST_F_UPLOAD ? GUEST_CAP_UPLOAD : GUEST_CAP_DOWNLOAD))) {
		kiln_err(err, KILN_E_INVALID, "the agent cannot transfer files (no tar in the guest)");
		return NULL;
	}
	if (name && !(c->hello.caps & GUEST_CAP_XFER_NAME)) {
		kiln_err(err, KILN_E_INVALID, "the agent (%s) cannot download one entry of a directory: rebuild the "
			 "template with this kiln", c->hello.agent ? c->hello.agent : "unknown");
		return NULL;
	}
	/* The agent's own timeout kills tar; ours (deadline) also covers a silent agent. */
	if (deadline != UINT64_MAX)
		req.timeout_ms = deadline - (uint64_t)kiln_now_ms() + 1;
	p = gc_req_new(c, type == GUEST_F_UPLOAD ? R_UPLOAD : R_DOWNLOAD);
	p->window = GUEST_STDIN_WINDOW;
	p->stdin_open = type == GUEST_F_UPLOAD;
	p->on_stdout = out;
	p->user = user;
	guest_encode_xfer(&c->out, type, p->id, &req);
	if (gc_flush(c, deadline, err) < 0)
		goto fail;
	if (gc_wait_started(p, deadline, type == GUEST_F_UPLOAD ? "the upload" : "the download", err) < 0)
		goto fail;
	if (p->failed) {
		gc_req_error(p, err);
		goto fail;
	}
	return p;
fail:
	gc_req_free(p);
	return NULL;
}

/* Finish a transfer: the agent's verdict wins over local trouble it caused. */
static int xfer_finish(struct guest_proc *p, uint64_t deadline, kiln_error **err)
{
	if (p->stdin_open && guest_proc_close_stdin(p, err) < 0)
		return -1;
	if (gc_wait_for(p->c, &p->done, deadline, "end of the transfer", err) < 0)
		return -1;
	if (p->failed)
		return gc_req_error(p, err);
	return 0;
}

/* ---- upload --------------------------------------------------------------- */

int guest_upload_tar(guest_conn *c, const char *guest_dir, int tar_fd, int timeout_ms, kiln_error **err)
{
	uint64_t deadline = gc_deadline(timeout_ms);
	struct guest_proc *p = xfer_start(c, GUEST_F_UPLOAD, guest_dir, NULL, deadline, NULL, NULL, err);
	uint8_t *buf = kiln_xmalloc(GUEST_DATA_CHUNK);
	int rc = -1;

	if (p == NULL)
		goto out;
	for (;;) {
		ssize_t n = read(tar_fd, buf, GUEST_DATA_CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			kiln_err_errno(err, errno, "read the tar");
			goto out;
		}
		if (n == 0)
			break;
		if (guest_proc_write(p, buf, (size_t)n, gc_remaining(deadline), err) < 0) {
			if (p->failed) {
				kiln_error_clear(err);
				gc_req_error(p, err);
			}
			goto out;
		}
	}
	rc = xfer_finish(p, deadline, err);
out:
	free(buf);
	guest_proc_free(p);
	if (rc < 0)
		kiln_error_wrap(err, "agent upload into %s", guest_dir);
	return rc;
}

struct up_ctx {
	struct guest_proc *p;
	uint64_t deadline;
	kiln_error *err;
};

static la_ssize_t up_write(struct archive *a, void *user, const void *buf, size_t n)
{
	struct up_ctx *u = user;

	if (u->err == NULL && guest_proc_write(u->p, buf, n, gc_remaining(u->deadline), &u->err) == 0)
		return (la_ssize_t)n;
	archive_set_error(a, EIO, "%s", kiln_error_message(u->err));
	return -1;
}

static int copy_file(struct archive *aw, const char *path, kiln_error **err)
{
	char buf[65536];
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	int rc = -1;

	if (fd < 0)
		return kiln_err_errno(err, errno, "open %s", path);
	for (;;) {
		ssize_t n = kiln_read_full(fd, buf, sizeof(buf));
		if (n < 0) {
			kiln_err_errno(err, errno, "read %s", path);
			goto out;
		}
		if (n == 0)
			break;
		if (archive_write_data(aw, buf, (size_t)n) != n) {
			kiln_err(err, KILN_E_IO, "%s", archive_error_string(aw));
			goto out;
		}
	}
	rc = 0;
out:
	close(fd);
	return rc;
}

int guest_upload_dir(guest_conn *c, const char *host_dir, const char *guest_dir, int timeout_ms, kiln_error **err)
{
	return guest_upload_dir_owned(c, host_dir, guest_dir, -1, -1, timeout_ms, err);
}

/* host_dir's tree into guest_dir: without as_name its contents (host_dir
 * itself left out), with it host_dir (a file or a tree) named as_name. */
static int upload_tree(guest_conn *c, const char *host_dir, const char *guest_dir, const char *as_name, int64_t uid,
		       int64_t gid, int timeout_ms, kiln_error **err)
{
	struct up_ctx u = { .deadline = gc_deadline(timeout_ms) };
	struct archive *disk = archive_read_disk_new(), *aw = kiln_tar_writer_new();
	struct archive_entry_linkresolver *lr = NULL;
	struct archive_entry *e = archive_entry_new();
	size_t plen = strlen(host_dir);
	bool root = true;
	int r, rc = -1;

	while (plen > 1 && host_dir[plen - 1] == '/')
		plen--;
	u.p = xfer_start(c, GUEST_F_UPLOAD, guest_dir, NULL, u.deadline, NULL, NULL, err);
	if (u.p == NULL)
		goto out;
	archive_write_set_bytes_in_last_block(aw, 1);
	if (archive_write_open(aw, &u, NULL, up_write, NULL) != ARCHIVE_OK)
		goto archive_fail;
	lr = archive_entry_linkresolver_new();
	archive_entry_linkresolver_set_strategy(lr, archive_format(aw));
	archive_read_disk_set_symlink_physical(disk);
	if (archive_read_disk_open(disk, host_dir) != ARCHIVE_OK) {
		kiln_err(err, KILN_E_IO, "%s", archive_error_string(disk));
		goto out;
	}
	while ((r = archive_read_next_header2(disk, e)) != ARCHIVE_EOF) {
		struct archive_entry *spare = NULL, *cur = e;
		const char *path = archive_entry_pathname(e);
		if (r < ARCHIVE_WARN) {
			kiln_err(err, KILN_E_IO, "%s", archive_error_string(disk));
			goto out;
		}
		archive_read_disk_descend(disk);
		if (root && as_name == NULL) {
			/* The directory itself: guest_dir keeps its own owner and mode. */
			root = false;
			continue;
		}
		archive_entry_copy_sourcepath(e, path);
		if (root) {
			archive_entry_copy_pathname(e, as_name);
			root = false;
		} else if (strncmp(path, host_dir, plen) != 0 || path[plen] != '/') {
			kiln_err(err, KILN_E_IO, "unexpected path %s while reading %s", path, host_dir);
			goto out;
		} else if (as_name) {
			char *n = kiln_path_join(as_name, path + plen + 1);
			archive_entry_copy_pathname(e, n);
			free(n);
		} else {
			archive_entry_copy_pathname(e, path + plen + 1);
		}
		if (uid >= 0)
			archive_entry_set_uid(e, uid);
		if (gid >= 0)
			archive_entry_set_gid(e, gid);
		archive_entry_linkify(lr, &cur, &spare);
		if (cur == NULL)
			continue;
		if (kiln_tar_write_header(aw, cur) != ARCHIVE_OK)
			goto archive_fail;
		if (archive_entry_filetype(cur) == AE_IFREG && archive_entry_size(cur) > 0 &&
		    archive_entry_hardlink(cur) == NULL && copy_file(aw, archive_entry_sourcepath(cur), err) < 0)
			goto out;
	}
	if (archive_write_close(aw) != ARCHIVE_OK)
		goto archive_fail;
	rc = xfer_finish(u.p, u.deadline, err);
	goto out;
archive_fail:
	if (u.p && u.p->failed) {
		gc_req_error(u.p, err);
	} else if (u.err) {
		kiln_err(err, u.err->kind, "%s", kiln_error_message(u.err));
	} else {
		kiln_err(err, KILN_E_IO, "%s", archive_error_string(aw));
	}
out:
	if (rc < 0 && u.p && u.p->failed) {
		/* tar in the guest stopped reading: say why it did, not just that it did. */
		kiln_error_clear(err);
		gc_req_error(u.p, err);
	}
	kiln_error_free(u.err);
	archive_read_free(disk);
	archive_write_free(aw);
	archive_entry_linkresolver_free(lr);
	archive_entry_free(e);
	guest_proc_free(u.p);
	if (rc < 0)
		kiln_error_wrap(err, "agent upload of %s into %s", host_dir, guest_dir);
	return rc;
}

int guest_upload_dir_owned(guest_conn *c, const char *host_dir, const char *guest_dir, int64_t uid, int64_t gid,
			   int timeout_ms, kiln_error **err)
{
	return upload_tree(c, host_dir, guest_dir, NULL, uid, gid, timeout_ms, err);
}

int guest_upload_entry(guest_conn *c, const char *host_path, const char *guest_dir, const char *guest_name,
		       int timeout_ms, kiln_error **err)
{
	if (guest_name == NULL || *guest_name == '\0' || strchr(guest_name, '/') || strcmp(guest_name, ".") == 0 ||
	    strcmp(guest_name, "..") == 0)
		return kiln_err(err, KILN_E_USAGE, "'%s' is not a name for an entry", guest_name ? guest_name : "");
	return upload_tree(c, host_path, guest_dir, guest_name, -1, -1, timeout_ms, err);
}

/* ---- download ------------------------------------------------------------- */

struct to_fd {
	int fd;
	int errnum;
};

static void write_fd(void *user, const void *data, size_t len)
{
	struct to_fd *t = user;

	if (t->errnum == 0 && kiln_write_full(t->fd, data, len) < 0)
		t->errnum = errno;
}

int guest_download_tar(guest_conn *c, const char *guest_dir, int out_fd, int timeout_ms, kiln_error **err)
{
	uint64_t deadline = gc_deadline(timeout_ms);
	struct to_fd t = { .fd = out_fd };
	struct guest_proc *p = xfer_start(c, GUEST_F_DOWNLOAD, guest_dir, NULL, deadline, write_fd, &t, err);
	int rc = -1;

	if (p == NULL)
		goto out;
	if (xfer_finish(p, deadline, err) < 0)
		goto out;
	if (t.errnum) {
		kiln_err_errno(err, t.errnum, "write the tar");
		goto out;
	}
	rc = 0;
out:
	guest_proc_free(p);
	if (rc < 0)
		kiln_error_wrap(err, "agent download of %s", guest_dir);
	return rc;
}

struct dl_ctx {
	struct guest_proc *p;
	kiln_buf data;
	size_t given; /* bytes handed to libarchive by the last read */
	uint64_t deadline;
	kiln_error *err;
};

static void dl_collect(void *user, const void *data, size_t len)
{
	kiln_buf_add(&((struct dl_ctx *)user)->data, data, len);
}

static la_ssize_t dl_read(struct archive *a, void *user, const void **buf)
{
	struct dl_ctx *d = user;

	/* Drop only what libarchive already had: data may have come in before its first read. */
	if (d->given) {
		memmove(d->data.buf, d->data.buf + d->given, d->data.len - d->given);
		d->data.len -= d->given;
		d->data.buf[d->data.len] = '\0';
		d->given = 0;
	}
	while (d->data.len == 0 && !d->p->done && d->err == NULL) {
		if (gc_pump(d->p->c, d->deadline, &d->err) == 0 && (uint64_t)kiln_now_ms() >= d->deadline && d->data.len == 0)
			kiln_err(&d->err, KILN_E_IO, "the tar stream stalled past the timeout");
	}
	if (d->err) {
		archive_set_error(a, EIO, "%s", kiln_error_message(d->err));
		return -1;
	}
	*buf = d->data.buf;
	d->given = d->data.len;
	return (la_ssize_t)d->data.len;
}

/* "./a/b" -> "a/b"; "." and "./" -> ""; a leading "/" is dropped, as tar does. */
static const char *rel_name(const char *name)
{
	while (name[0] == '.' && name[1] == '/')
		name += 2;
	while (name[0] == '/')
		name++;
	return strcmp(name, ".") == 0 ? "" : name;
}

/* root/NAME, or with from: root/TO[/REST] for NAME = FROM[/REST], else NULL. */
static char *renamed(const char *root, const char *name, const char *from, const char *to)
{
	size_t fl;
	char *t, *full;

	if (from == NULL)
		return kiln_path_join(root, name);
	fl = strlen(from);
	if (strncmp(name, from, fl) != 0 || (name[fl] != '\0' && name[fl] != '/'))
		return NULL;
	t = kiln_xasprintf("%s%s", to, name + fl);
	full = kiln_path_join(root, t);
	free(t);
	return full;
}

/* A name the guest sent, made relative and checked (guest_download_each);
 * NULL when it is unusable. */
static char *clean_name(const char *name)
{
	char *r = kiln_xstrdup(rel_name(name));
	size_t n = strlen(r);

	while (n > 0 && r[n - 1] == '/')
		r[--n] = '\0';
	for (const char *p = r;;) {
		size_t k = strcspn(p, "/");
		if (k == 0 || (k == 1 && p[0] == '.') || (k == 2 && p[0] == '.' && p[1] == '.')) {
			free(r);
			return NULL;
		}
		if (p[k] == '\0')
			break;
		p += k + 1;
	}
	return r;
}

static int each_entry(struct archive *ar, guest_entry_fn fn, void *user, kiln_error **err)
{
	struct archive_entry *e;
	int r;

	while ((r = kiln_tar_next(ar, &e)) != ARCHIVE_EOF) {
		char *name, *link = NULL;
		if (r != ARCHIVE_OK)
			return kiln_err(err, KILN_E_INVALID, "%s", archive_error_string(ar));
		if (rel_name(archive_entry_pathname(e))[0] == '\0' && archive_entry_filetype(e) == AE_IFDIR)
			continue; /* the top directory */
		if ((name = clean_name(archive_entry_pathname(e))) == NULL)
			return kiln_err(err, KILN_E_INVALID, "the guest sent the name '%s'", archive_entry_pathname(e));
		archive_entry_copy_pathname(e, name);
		if (archive_entry_hardlink(e) && (link = clean_name(archive_entry_hardlink(e))) == NULL) {
			kiln_err(err, KILN_E_INVALID, "the guest sent a hard link to '%s'", archive_entry_hardlink(e));
			free(name);
			return -1;
		}
		if (link)
			archive_entry_copy_hardlink(e, link);
		free(name);
		free(link);
		if (fn(user, ar, e, err) < 0)
			return -1;
	}
	return 0;
}

/* from/to (both or neither): every entry must be `from` or under it, and is
 * extracted as `to` (a single entry downloaded under another name). */
static int extract(struct archive *ar, const char *root, const char *from, const char *to, kiln_error **err)
{
	/* Names are made relative (rel_name) and prefixed with the resolved root, so
	 * NOABSOLUTEPATHS cannot be used; ".." and symlinked parents are refused. */
	int flags = ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
		    ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_UNLINK;
	struct archive *aw = archive_write_disk_new();
	struct archive_entry *e;
	int r, rc = -1;

	if (geteuid() == 0)
		flags |= ARCHIVE_EXTRACT_OWNER;
	archive_write_disk_set_options(aw, flags);
	while ((r = kiln_tar_next(ar, &e)) != ARCHIVE_EOF) {
		const char *name, *link;
		char *full;
		if (r != ARCHIVE_OK) {
			kiln_err(err, KILN_E_INVALID, "%s", archive_error_string(ar));
			goto out;
		}
		name = rel_name(archive_entry_pathname(e));
		if (*name == '\0' && from == NULL)
			continue; /* the root: host_dir keeps its own owner and mode */
		if ((full = renamed(root, name, from, to)) == NULL) {
			kiln_err(err, KILN_E_INVALID, "the guest sent %s, which is not under %s", name, from);
			goto out;
		}
		archive_entry_copy_pathname(e, full);
		free(full);
		link = archive_entry_hardlink(e);
		if (link) {
			if ((full = renamed(root, rel_name(link), from, to)) == NULL) {
				kiln_err(err, KILN_E_INVALID, "the guest sent a link to %s, which is not under %s", link, from);
				goto out;
			}
			archive_entry_copy_hardlink(e, full);
			free(full);
		}
		if (archive_write_header(aw, e) < ARCHIVE_WARN) {
			kiln_err(err, KILN_E_INVALID, "%s", archive_error_string(aw));
			goto out;
		}
		if (archive_entry_size(e) > 0) {
			const void *buf;
			size_t len;
			la_int64_t off;
			while ((r = archive_read_data_block(ar, &buf, &len, &off)) == ARCHIVE_OK) {
				if (archive_write_data_block(aw, buf, len, off) < ARCHIVE_WARN) {
					kiln_err(err, KILN_E_IO, "%s", archive_error_string(aw));
					goto out;
				}
			}
			if (r != ARCHIVE_EOF) {
				kiln_err(err, KILN_E_INVALID, "%s", archive_error_string(ar));
				goto out;
			}
		}
		if (archive_write_finish_entry(aw) < ARCHIVE_WARN) {
			kiln_err(err, KILN_E_IO, "%s", archive_error_string(aw));
			goto out;
		}
	}
	if (archive_write_close(aw) != ARCHIVE_OK) {
		kiln_err(err, KILN_E_IO, "%s", archive_error_string(aw));
		goto out;
	}
	rc = 0;
out:
	archive_write_free(aw);
	return rc;
}

static int download(guest_conn *c, const char *guest_dir, const char *name, const char *host_dir,
		    const char *host_name, guest_entry_fn fn, void *user, int timeout_ms, kiln_error **err)
{
	struct dl_ctx d = { .deadline = gc_deadline(timeout_ms), .data = KILN_BUF_INIT };
	struct archive *ar = kiln_tar_reader_new();
	char *root = NULL;
	int rc = -1;

	if (host_dir && kiln_mkdir_p(host_dir, 0755, err) < 0)
		goto out;
	/* Symlinks above host_dir are the caller's; only those inside are refused. */
	if (host_dir && (root = realpath(host_dir, NULL)) == NULL) {
		kiln_err_errno(err, errno, "resolve %s", host_dir);
		goto out;
	}
	d.p = xfer_start(c, GUEST_F_DOWNLOAD, guest_dir, name, d.deadline, dl_collect, &d, err);
	if (d.p == NULL)
		goto out;
	if (archive_read_open(ar, &d, NULL, dl_read, NULL) != ARCHIVE_OK ||
	    (fn ? each_entry(ar, fn, user, err) : extract(ar, root, name, host_name, err)) < 0) {
		if (d.p->failed || d.err) {
			kiln_error_clear(err);
			if (d.p->failed)
				gc_req_error(d.p, err);
			else
				kiln_err(err, d.err->kind, "%s", kiln_error_message(d.err));
		} else if (err && *err == NULL) {
			kiln_err(err, KILN_E_INVALID, "%s", archive_error_string(ar));
		}
		goto out;
	}
	rc = xfer_finish(d.p, d.deadline, err);
out:
	archive_read_free(ar);
	kiln_error_free(d.err);
	kiln_buf_free(&d.data);
	guest_proc_free(d.p);
	free(root);
	if (rc < 0 && name)
		kiln_error_wrap(err, "agent download of %s%s%s into %s", guest_dir, strcmp(guest_dir, "/") ? "/" : "",
				name, host_dir);
	else if (rc < 0)
		kiln_error_wrap(err, "agent download of %s%s%s", guest_dir, host_dir ? " into " : "",
				host_dir ? host_dir : "");
	return rc;
}

int guest_download_each(guest_conn *c, const char *guest_dir, guest_entry_fn fn, void *user, int timeout_ms,
			kiln_error **err)
{
	return download(c, guest_dir, NULL, NULL, NULL, fn, user, timeout_ms, err);
}

int guest_download_dir(guest_conn *c, const char *guest_dir, const char *host_dir, int timeout_ms,
		       kiln_error **err)
{
	return download(c, guest_dir, NULL, host_dir, NULL, NULL, NULL, timeout_ms, err);
}

int guest_download_entry(guest_conn *c, const char *guest_dir, const char *name, const char *host_dir,
			 const char *host_name, int timeout_ms, kiln_error **err)
{
	if (name == NULL || host_name == NULL || *host_name == '\0' || strchr(host_name, '/') ||
	    strcmp(host_name, ".") == 0 || strcmp(host_name, "..") == 0)
		return kiln_err(err, KILN_E_USAGE, "'%s' is not a name for an entry", host_name ? host_name : "");
	return download(c, guest_dir, name, host_dir, host_name, NULL, NULL, timeout_ms, err);
}

/* context_make.c — a build's context directory made from its file list:
 * directories and symlinks as listed, tars extracted, and each regular file
 * a hard link to the team's copy of its blob with its mode (made once);
 * never anything through a symlink, whatever the list says. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "service/internal.h"

static int copy_out(const char *src, const char *dst, mode_t mode, bool sync, kiln_error **err)
{
	int in = open(src, O_RDONLY | O_CLOEXEC), out = -1, ret = -1;
	char buf[64 << 10];
	ssize_t n;

	if (in < 0)
		return kiln_err_errno(err, errno, "open %s", src);
	out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (out < 0) {
		kiln_err_errno(err, errno, "create %s", dst);
		goto out;
	}
	/* in the kernel where it can (no copy through user space); a file
	 * system without it (nothing copied yet) falls back to read and write */
	off_t copied = 0;
	while ((n = copy_file_range(in, NULL, out, NULL, 1 << 30, 0)) > 0)
		copied += n;
	if (n < 0 && (copied > 0 || (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP))) {
		kiln_err_errno(err, errno, "copy to %s", dst);
		goto out;
	}
	if (n < 0) {
		while ((n = read(in, buf, sizeof(buf))) > 0)
			if (kiln_write_full(out, buf, (size_t)n) < 0) {
				kiln_err_errno(err, errno, "write %s", dst);
				goto out;
			}
		if (n < 0) {
			kiln_err_errno(err, errno, "read %s", src);
			goto out;
		}
	}
	if (fchmod(out, mode & 07777) < 0) {
		kiln_err_errno(err, errno, "chmod %s", dst);
		goto out;
	}
	if (sync && fsync(out) < 0) {
		kiln_err_errno(err, errno, "fsync %s", dst);
		goto out;
	}
	ret = 0;
out:
	close(in);
	if (out >= 0)
		close(out);
	return ret;
}

/* A regular file of a build's context: a hard link to the team's copy of
 * that blob with that mode (LINKED/MODE/HEX, made once from the verified
 * blob and durable before it is named), so a rebuild moves no bytes.  Safe
 * to share: the builder only reads its context (COPY reads, bind mounts are
 * tarred), and a file's mode is that copy's own, never changed after.  Where
 * a link cannot be made (too many links, another file system): a copy. */
static int link_out(const char *linked, const char *blob, const char *digest, const char *dst, mode_t mode,
		    kiln_error **err)
{
	char *dir = kiln_xasprintf("%s/%04o", linked, (unsigned)(mode & 07777));
	char *path = kiln_xasprintf("%s/%s", dir, kiln_digest_hex(digest)), *tmp = NULL;
	int ret = -1;

	if (link(path, dst) == 0) {
		ret = 0;
		goto out;
	}
	if (errno == ENOENT) {
		/* concurrent builds each write their own temporary, the rename decides */
		tmp = kiln_xasprintf("%s.tmp-%d-%d", path, (int)getpid(), (int)gettid());
		unlink(tmp);
		if (kiln_mkdir_p(dir, 0700, err) < 0 || copy_out(blob, tmp, mode, true, err) < 0) {
			unlink(tmp);
			goto out;
		}
		if (rename(tmp, path) < 0) {
			kiln_err_errno(err, errno, "rename %s", tmp);
			unlink(tmp);
			goto out;
		}
		if (link(path, dst) == 0) {
			ret = 0;
			goto out;
		}
	}
	ret = copy_out(blob, dst, mode, false, err);
out:
	free(tmp);
	free(path);
	free(dir);
	return ret;
}

/* Extract a tar (any compression libarchive reads) under dir, refusing
 * entries that leave it (absolute, "..", through symlinks). */
/* What the tars of one context may still extract to: context_max and
 * context_files hold for what they make too, not only for what was sent
 * (a few KB of zstd can make GBs of zeros). */
struct budget {
	uint64_t bytes;
	size_t entries;
};

static int untar(const char *tarpath, const char *dir, struct budget *left, kiln_error **err)
{
	struct archive *a = kiln_tar_reader_new(), *d = archive_write_disk_new();
	struct archive_entry *e;
	int ret = -1, rc;

	/* Entries are written as dir/NAME, an absolute path by construction (so
	 * no SECURE_NOABSOLUTEPATHS): NAME itself was checked by svc_path_ok, and
	 * SECURE_SYMLINKS refuses writing through a symlink the tar made. */
	archive_write_disk_set_options(d, ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
					      ARCHIVE_EXTRACT_SECURE_SYMLINKS);
	if (archive_read_open_filename(a, tarpath, 64 << 10) != ARCHIVE_OK) {
		kiln_err(err, KILN_E_INVALID, "%s: %s", tarpath, archive_error_string(a));
		goto out;
	}
	while ((rc = kiln_tar_next(a, &e)) == ARCHIVE_OK) {
		const char *name = archive_entry_pathname(e);
		while (name && name[0] == '.' && name[1] == '/')
			name += 2;
		if (name == NULL || *name == '\0' || strcmp(name, ".") == 0)
			continue;
		char *clean = kiln_xstrdup(name);
		size_t l = strlen(clean);
		while (l > 1 && clean[l - 1] == '/')
			clean[--l] = '\0';
		if (!svc_path_ok(clean)) {
			kiln_err(err, KILN_E_INVALID, "tar entry '%s' leaves the context", name);
			free(clean);
			goto out;
		}
		la_int64_t size = archive_entry_size(e);
		if (left->entries == 0 || (size > 0 && (uint64_t)size > left->bytes)) {
			kiln_err(err, KILN_E_LIMIT, "tar entry '%s': the tar extracts to more than the context's limit "
				 "(%s)", name, left->entries == 0 ? "its entries" : "its bytes");
			free(clean);
			goto out;
		}
		left->entries--;
		left->bytes -= size > 0 ? (uint64_t)size : 0;
		char *full = kiln_xasprintf("%s/%s", dir, clean);
		archive_entry_set_pathname(e, full);
		if (archive_entry_hardlink(e)) {
			char *hl = kiln_xasprintf("%s/%s", dir, archive_entry_hardlink(e));
			archive_entry_set_hardlink(e, hl);
			free(hl);
		}
		archive_entry_set_uid(e, getuid());
		archive_entry_set_gid(e, getgid());
		rc = archive_write_header(d, e);
		if (rc == ARCHIVE_OK && archive_entry_size(e) > 0) {
			const void *buf;
			size_t sz;
			la_int64_t off;
			while ((rc = archive_read_data_block(a, &buf, &sz, &off)) == ARCHIVE_OK)
				if (archive_write_data_block(d, buf, sz, off) != ARCHIVE_OK)
					break;
			rc = rc == ARCHIVE_EOF ? ARCHIVE_OK : rc;
		}
		free(full);
		free(clean);
		if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) {
			kiln_err(err, KILN_E_INVALID, "extract %s: %s", tarpath,
				 archive_error_string(d) ? archive_error_string(d) : archive_error_string(a));
			goto out;
		}
	}
	if (rc != ARCHIVE_EOF) {
		kiln_err(err, KILN_E_INVALID, "%s: %s", tarpath, archive_error_string(a));
		goto out;
	}
	ret = 0;
out:
	archive_write_close(d);
	archive_write_free(d);
	archive_read_free(a);
	return ret;
}

/* The first len bytes of rel (a cleaned relative path) as directories under
 * dir, each made if missing and each a directory of its own — never a
 * symlink, which a hostile list (or a tar in it) could point anywhere on
 * the server: nothing is ever made through one. */
static int real_dirs(const char *dir, const char *rel, size_t len, kiln_error **err)
{
	size_t base = strlen(dir) + 1;
	char *p = kiln_xasprintf("%s/%.*s", dir, (int)len, rel);
	struct stat st;
	int ret = 0;

	for (char *s = p + base;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char saved = *s;
		*s = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST) {
			ret = kiln_err_errno(err, errno, "mkdir %s", p + base);
			break;
		}
		if (lstat(p, &st) < 0) {
			ret = kiln_err_errno(err, errno, "stat %s", p + base);
			break;
		}
		if (!S_ISDIR(st.st_mode)) {
			ret = kiln_err(err, KILN_E_INVALID, "%s is %s, not a directory: nothing is made through it",
				       p + base, S_ISLNK(st.st_mode) ? "a symlink" : "a file");
			break;
		}
		*s = saved;
		if (saved == '\0')
			break;
	}
	free(p);
	return ret;
}

/* The regular files of a list, linked by a few threads once their
 * directories are there: a first build's copies each wait for an fsync,
 * and concurrent ones share the journal's commits (200 files of 4 KiB: 64
 * ms one at a time, 45 ms on four threads, here). */
struct links {
	const char *linked;
	kiln_cas *cas;
	const json_t *files;
	const char *dir;
	size_t *todo, n;
};

static int link_one(void *ud, size_t k, unsigned worker, kiln_error **err)
{
	struct links *l = ud;
	const json_t *f = json_array_get(l->files, l->todo[k]);
	const char *path = json_string_value(json_object_get(f, "path"));
	const char *digest = json_string_value(json_object_get(f, "digest"));
	char *full = kiln_xasprintf("%s/%s", l->dir, path), *src = kiln_cas_path(l->cas, digest);
	int rc = link_out(l->linked, src, digest, full, (mode_t)json_integer_value(json_object_get(f, "mode")), err);

	(void)worker;
	if (rc < 0)
		kiln_error_wrap(err, "context file %s", path);
	free(src);
	free(full);
	return rc;
}

int svc_context_make(svc *s, const char *team, const json_t *files, const char *dir, kiln_error **err)
{
	kiln_cas *cas = NULL;
	char *linked = svc_team_dir(s, team, "linked"), *made = NULL;
	struct links l = { .linked = linked, .files = files, .dir = dir };
	struct budget left = { s->cfg.context_max, s->cfg.context_files };
	bool tars = false;
	size_t i;
	json_t *f;
	int ret = -1;

	if (kiln_mkdir_p(dir, 0755, err) < 0 || svc_team_cas(s, team, &cas, err) < 0)
		goto out;
	l.cas = cas;
	json_array_foreach(files, i, f)
		tars |= json_is_true(json_object_get(f, "tar"));
	/* with a tar in the list, in the list's order (a tar may make what a later entry lands in) */
	if (!tars)
		l.todo = kiln_xcalloc(json_array_size(files) + 1, sizeof(*l.todo));
	json_array_foreach(files, i, f) {
		const char *path = json_string_value(json_object_get(f, "path"));
		const char *digest = json_string_value(json_object_get(f, "digest"));
		const char *link = json_string_value(json_object_get(f, "link"));
		mode_t mode = (mode_t)json_integer_value(json_object_get(f, "mode"));
		bool tar = json_is_true(json_object_get(f, "tar"));
		char *full = kiln_xasprintf("%s/%s", dir, path), *src = NULL;
		const char *slash = path ? strrchr(path, '/') : NULL;
		size_t plen = slash ? (size_t)(slash - path) : 0;
		int r = 0;
		/* a file's directory is checked once for a run of files in it */
		if (plen && !(made && strlen(made) == plen && strncmp(made, path, plen) == 0)) {
			r = real_dirs(dir, path, plen, err);
			free(made);
			made = r == 0 ? kiln_xstrndup(path, plen) : NULL;
		}

		if (r == 0 && tar) {
			src = kiln_cas_path(cas, digest);
			r = real_dirs(dir, path, strlen(path), err) < 0 ? -1 : untar(src, full, &left, err);
			free(made); /* what it extracted is not known here */
			made = NULL;
		} else if (r == 0 && S_ISDIR(mode)) {
			r = real_dirs(dir, path, strlen(path), err) < 0 ? -1 : chmod(full, mode & 07777) < 0 ? kiln_err_errno(err, errno, "chmod %s", path) : 0;
		} else if (r == 0 && S_ISLNK(mode)) {
			r = symlink(link, full) < 0 ? kiln_err_errno(err, errno, "symlink %s", path) : 0;
		} else if (r == 0 && l.todo) {
			l.todo[l.n++] = i; /* once every directory is there */
		} else if (r == 0) {
			src = kiln_cas_path(cas, digest);
			r = link_out(linked, src, digest, full, mode, err);
		}
		free(src);
		free(full);
		if (r < 0) {
			kiln_error_wrap(err, "context file %s", path);
			goto out;
		}
	}
	/* four threads for 16 files or more, even on one core: a copy mostly waits for its fsync */
	if (l.n && kiln_parallel(l.n, l.n < 16 ? 1 : 4, link_one, &l, err) < 0)
		goto out;
	ret = 0;
out:
	free(l.todo);
	kiln_cas_close(cas);
	free(made);
	free(linked);
	return ret;
}

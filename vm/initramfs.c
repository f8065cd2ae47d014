/* initramfs.c — writes the guest's initramfs with libarchive: an uncompressed
 * cpio (newc) archive, since unpacking costs the guest nothing while a
 * decompressor under TCG costs hundreds of milliseconds.  Contents: /init,
 * busybox, the modules (flat, in load order listed in /etc/kiln/modules), and
 * the agent when there is one. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "vm/vm.h"

const char *const *vm_default_modules(bool net)
{
	static const char *const base[] = { "virtio_mmio", "virtio_blk", "virtio_console", "overlay", NULL };
	static const char *const with_net[] = { "virtio_mmio", "virtio_blk", "virtio_console", "overlay",
						"virtio_net", NULL };
	return net ? with_net : base;
}

static int ar_fail(struct archive *a, const char *path, const char *what, kiln_error **err)
{
	return kiln_err(err, KILN_E_IO, "writing initramfs %s: %s: %s", path, what, archive_error_string(a));
}

static int add_entry(struct archive *a, const char *out, const char *name, mode_t mode, dev_t rdev,
		     const void *data, size_t len, kiln_error **err)
{
	struct archive_entry *e = archive_entry_new();
	int rc = 0;

	archive_entry_set_pathname(e, name);
	archive_entry_set_mode(e, mode);
	archive_entry_set_uid(e, 0);
	archive_entry_set_gid(e, 0);
	archive_entry_set_nlink(e, S_ISDIR(mode) ? 2 : 1);
	if (S_ISCHR(mode) || S_ISBLK(mode))
		archive_entry_set_rdev(e, rdev);
	archive_entry_set_size(e, (la_int64_t)len); /* newc wants a size on every entry */
	if (archive_write_header(a, e) != ARCHIVE_OK)
		rc = ar_fail(a, out, name, err);
	else if (len > 0 && archive_write_data(a, data, len) != (la_ssize_t)len)
		rc = ar_fail(a, out, name, err);
	archive_entry_free(e);
	return rc;
}

static int add_file(struct archive *a, const char *out, const char *name, const char *src, mode_t mode,
		    kiln_error **err)
{
	char *data = NULL;
	size_t len = 0;
	int rc;

	if (kiln_read_file(src, &data, &len, 256u << 20, err) < 0)
		return kiln_error_wrap(err, "initramfs");
	rc = add_entry(a, out, name, S_IFREG | mode, 0, data, len, err);
	free(data);
	return rc;
}

int vm_initramfs_write(const struct vm_initramfs_opts *o, const char *path, kiln_error **err)
{
	static const char *const dirs[] = { "bin", "dev", "proc", "sys", "run", "newroot", "etc", "etc/kiln",
					    "lib", "lib/modules", NULL };
	const char *busybox = o->busybox ? o->busybox : "/bin/busybox";
	const char *const *names = o->modules ? o->modules : vm_default_modules(false);
	kiln_strv mods = KILN_STRV_INIT;
	kiln_buf list = KILN_BUF_INIT;
	struct archive *a = NULL;
	char *tmp = kiln_xasprintf("%s.tmp", path);
	int rc = -1;

	if (vm_kernel_resolve_modules(o->kernel, names, &mods, err) < 0)
		goto out;
	a = archive_write_new();
	if (archive_write_set_format_cpio_newc(a) != ARCHIVE_OK || archive_write_add_filter_none(a) != ARCHIVE_OK ||
	    archive_write_open_filename(a, tmp) != ARCHIVE_OK) {
		ar_fail(a, tmp, "open", err);
		goto out;
	}
	for (size_t i = 0; dirs[i]; i++)
		if (add_entry(a, tmp, dirs[i], S_IFDIR | 0755, 0, NULL, 0, err) < 0)
			goto out;
	/* The kernel opens /dev/console for init's stdio before init can mount devtmpfs. */
	if (add_entry(a, tmp, "dev/console", S_IFCHR | 0600, makedev(5, 1), NULL, 0, err) < 0 ||
	    add_entry(a, tmp, "init", S_IFREG | 0755, 0, vm_init_script, strlen(vm_init_script), err) < 0 ||
	    add_file(a, tmp, "bin/busybox", busybox, 0755, err) < 0)
		goto out;
	if (o->agent && add_file(a, tmp, "bin/kiln-agent", o->agent, 0755, err) < 0)
		goto out;
	for (size_t i = 0; i < mods.n; i++) {
		const char *base = strrchr(mods.v[i], '/');
		char *src = kiln_path_join(o->kernel->modules, mods.v[i]);
		char *name;
		base = base ? base + 1 : mods.v[i];
		name = kiln_xasprintf("lib/modules/%s", base);
		rc = add_file(a, tmp, name, src, 0644, err);
		free(src);
		free(name);
		if (rc < 0)
			goto out;
		rc = -1;
		kiln_buf_addf(&list, "%s\n", base);
	}
	if (add_entry(a, tmp, "etc/kiln/modules", S_IFREG | 0644, 0, list.buf, list.len, err) < 0)
		goto out;
	if (archive_write_close(a) != ARCHIVE_OK) {
		ar_fail(a, tmp, "close", err);
		goto out;
	}
	if (rename(tmp, path) < 0) {
		kiln_err_errno(err, errno, "rename %s", tmp);
		goto out;
	}
	rc = 0;
out:
	if (a)
		archive_write_free(a);
	if (rc < 0)
		unlink(tmp);
	free(tmp);
	kiln_buf_free(&list);
	kiln_strv_free(&mods);
	return rc;
}

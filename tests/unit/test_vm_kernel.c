/* test_vm_kernel.c — the two things that decide how a guest starts besides
 * the image: a kernel directory laid out by vm/build-kernel.sh (every driver
 * built in, no modules: the initramfs carries none), the KVM decision on a
 * host whose /dev/kvm comes from kvm_pvm, which kiln must refuse, and where
 * kiln looks for its kernel. */
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "vm/internal.h"

static char *tmpdir;

static void put(const char *dir, const char *rel, const char *text)
{
	kiln_error *err = NULL;
	char *path = kiln_path_join(dir, rel), *slash = strrchr(path, '/');

	*slash = '\0';
	kiln_mkdir_p(path, 0755, &err);
	*slash = '/';
	CHECK(kiln_write_atomic(path, text, strlen(text), 0644, &err) == 0);
	kiln_error_free(err);
	free(path);
}

/* What build-kernel.sh writes: an empty modules.dep, and modules.builtin as
 * Kbuild generates it for the drivers vm/kernel.config builds in. */
static char *builtin_kernel(const char *builtin)
{
	char *dir = kiln_path_join(tmpdir, "min");

	put(dir, "release", "6.1.0-kiln-test\n");
	put(dir, "root/boot/vmlinuz-6.1.0-kiln-test", "bzImage");
	put(dir, "root/boot/vmlinux-6.1.0-kiln-test", "\177ELF");
	put(dir, "root/lib/modules/6.1.0-kiln-test/modules.dep", "");
	put(dir, "root/lib/modules/6.1.0-kiln-test/modules.builtin", builtin);
	return dir;
}

static const char all_builtin[] = "kernel/drivers/virtio/virtio.ko\n"
				  "kernel/drivers/virtio/virtio_ring.ko\n"
				  "kernel/drivers/virtio/virtio_mmio.ko\n"
				  "kernel/drivers/block/virtio_blk.ko\n"
				  "kernel/drivers/char/virtio_console.ko\n"
				  "kernel/drivers/net/virtio_net.ko\n"
				  "kernel/fs/overlayfs/overlay.ko\n"
				  "kernel/fs/ext4/ext4.ko\n";

static size_t count_entries(const char *path, const char *prefix, char **modlist)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	size_t n = 0;

	archive_read_support_format_cpio(a);
	CHECK(archive_read_open_filename(a, path, 4096) == ARCHIVE_OK);
	while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
		const char *name = archive_entry_pathname(e);
		if (strncmp(name, prefix, strlen(prefix)) == 0 && strlen(name) > strlen(prefix))
			n++;
		if (strcmp(name, "etc/kiln/modules") == 0) {
			size_t len = (size_t)archive_entry_size(e);
			*modlist = calloc(1, len + 1);
			CHECK(archive_read_data(a, *modlist, len) == (la_ssize_t)len);
		}
	}
	archive_read_free(a);
	return n;
}

static void test_all_builtin(void)
{
	struct vm_kernel k;
	kiln_strv mods = KILN_STRV_INIT;
	kiln_error *err = NULL;
	char *dir = builtin_kernel(all_builtin), *out = kiln_path_join(tmpdir, "min.cpio"), *modlist = NULL;
	const char *const names[] = { "virtio_mmio", "virtio_blk", "virtio_console", "overlay", "virtio_net", NULL };

	CHECK(vm_kernel_open(dir, &k, &err) == 0);
	/* The ELF beside the bzImage is what QEMU enters (PVH). */
	CHECK(k.image && strstr(k.image, "/vmlinux-6.1.0-kiln-test") != NULL);
	CHECK(vm_kernel_resolve_modules(&k, names, &mods, &err) == 0);
	CHECK_INT(mods.n, 0);
	struct vm_initramfs_opts o = { .kernel = &k, .busybox = "/bin/busybox", .modules = names };
	CHECK(vm_initramfs_write(&o, out, &err) == 0);
	CHECK_INT(count_entries(out, "lib/modules/", &modlist), 0);
	CHECK(modlist != NULL && modlist[0] == '\0'); /* init loads nothing */
	kiln_error_free(err);
	free(modlist);
	kiln_strv_free(&mods);
	vm_kernel_free(&k);
	free(out);
	free(dir);
}

/* A driver the config lost is named, not skipped: init would wait for a disk
 * that never appears. */
static void test_builtin_missing(void)
{
	struct vm_kernel k;
	kiln_strv mods = KILN_STRV_INIT;
	kiln_error *err = NULL;
	char *dir = builtin_kernel("kernel/drivers/virtio/virtio_mmio.ko\n");
	const char *const names[] = { "virtio_mmio", "virtio_blk", NULL };

	CHECK(vm_kernel_open(dir, &k, &err) == 0);
	CHECK(vm_kernel_resolve_modules(&k, names, &mods, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "virtio_blk") && strstr(kiln_error_message(err), "6.1.0-kiln-test"));
	kiln_error_free(err);
	kiln_strv_free(&mods);
	vm_kernel_free(&k);
	free(dir);
}

/* Where kiln looks for a kernel (vm/locate.c): $KILN_KERNEL alone when set,
 * else $KILN_HOME/kernel, then PREFIX/lib/kiln/kernel and the checkout's
 * build/kernel beside this program; a miss lists every place looked at. */
static void test_search_path(void)
{
	kiln_strv sp = KILN_STRV_INIT;
	kiln_error *err = NULL;
	struct vm_kernel k;
	char *home = kiln_path_join(tmpdir, "home"), *hk = kiln_path_join(home, "kernel");
	char *other = kiln_path_join(tmpdir, "other"), *d;
	char *old_home = getenv("KILN_HOME") ? kiln_xstrdup(getenv("KILN_HOME")) : NULL;

	setenv("KILN_HOME", home, 1);
	unsetenv("KILN_KERNEL");
	unsetenv("KILN_KERNEL_DIR");
	vm_kernel_search_path(&sp);
	CHECK_INT(sp.n, 3);
	if (sp.n == 3) {
		CHECK_STR(sp.v[0], hk);
		CHECK(strstr(sp.v[1], "/lib/kiln/kernel") != NULL);
		CHECK(strstr(sp.v[2], "/build/kernel") != NULL);
		/* this test runs from build/asan/tests/: neither of those exists */
		CHECK(access(sp.v[1], F_OK) < 0 && access(sp.v[2], F_OK) < 0);
	}
	d = vm_kernel_default_dir();
	CHECK(d == NULL);
	free(d);
	CHECK(vm_kernel_open(NULL, &k, &err) < 0);
	CHECK(err && err->kind == KILN_E_NOTFOUND);
	CHECK(err && strstr(kiln_error_message(err), hk) && sp.n == 3 &&
	      strstr(kiln_error_message(err), sp.v[1]) && strstr(kiln_error_message(err), sp.v[2]));
	kiln_error_free(err);
	err = NULL;
	kiln_strv_free(&sp);

	/* A kernel in KILN_HOME is taken first. */
	put(hk, "release", "6.1.0-kiln-home\n");
	put(hk, "root/boot/vmlinuz-6.1.0-kiln-home", "bzImage");
	d = vm_kernel_default_dir();
	CHECK_STR(d, hk);
	free(d);
	CHECK(vm_kernel_open(NULL, &k, &err) == 0);
	CHECK_STR(k.release, "6.1.0-kiln-home");
	vm_kernel_free(&k);
	d = vm_kernel_user_dir();
	CHECK_STR(d, hk);
	free(d);

	/* $KILN_KERNEL (and its older name) is the only place looked at. */
	setenv("KILN_KERNEL_DIR", other, 1);
	vm_kernel_search_path(&sp);
	CHECK(sp.n == 1 && strcmp(sp.v[0], other) == 0);
	kiln_strv_free(&sp);
	setenv("KILN_KERNEL", other, 1);
	d = vm_kernel_user_dir();
	CHECK_STR(d, other);
	free(d);
	CHECK(vm_kernel_default_dir() == NULL);
	CHECK(vm_kernel_open(NULL, &k, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), other) && strstr(kiln_error_message(err), "$KILN_KERNEL"));
	kiln_error_free(err);

	unsetenv("KILN_KERNEL");
	unsetenv("KILN_KERNEL_DIR");
	if (old_home)
		setenv("KILN_HOME", old_home, 1);
	else
		unsetenv("KILN_HOME");
	free(old_home);
	free(home);
	free(hk);
	free(other);
}

static void mkdir_in(const char *dir, const char *name)
{
	char *p = kiln_path_join(dir, name);
	CHECK(mkdir(p, 0755) == 0);
	free(p);
}

/* /dev/kvm can be opened and answers KVM_GET_API_VERSION with 12. */
static bool dev_kvm_answers(void)
{
	const char *why;
	char *fake = kiln_path_join(tmpdir, "hw");

	mkdir(fake, 0755);
	mkdir_in(fake, "kvm_intel");
	bool ok = vm_kvm_check(fake, "/dev/kvm", NULL, &why);
	char *p = kiln_path_join(fake, "kvm_intel");
	rmdir(p);
	free(p);
	free(fake);
	return ok;
}

static void test_kvm_pvm_refused(void)
{
	const char *why = NULL;
	char *pvm = kiln_path_join(tmpdir, "pvm"), *hw = kiln_path_join(tmpdir, "intel");
	char *nodev = kiln_path_join(tmpdir, "no-such-kvm");

	/* A host like this one: kvm + kvm_pvm loaded, no hardware KVM module. */
	CHECK(mkdir(pvm, 0755) == 0);
	mkdir_in(pvm, "kvm");
	mkdir_in(pvm, "kvm_pvm");
	CHECK(!vm_kvm_check(pvm, "/dev/kvm", NULL, &why));
	CHECK(why && strstr(why, "kvm_pvm"));
	CHECK(!vm_kvm_check(pvm, "/dev/null", NULL, &why));
	/* Hardware KVM loaded, but the device is not KVM or is missing. */
	CHECK(mkdir(hw, 0755) == 0);
	mkdir_in(hw, "kvm");
	mkdir_in(hw, "kvm_intel");
	CHECK(!vm_kvm_check(hw, "/dev/null", NULL, &why));
	CHECK(why && strstr(why, "stable KVM API"));
	CHECK(!vm_kvm_check(hw, nodev, NULL, &why));
	CHECK(why && strstr(why, "cannot open"));
	CHECK(!vm_kvm_check(hw, "/dev/kvm", "tcg", &why));
	CHECK_STR(why, "KILN_ACCEL=tcg");
	/* Where /dev/kvm answers (this host's kvm_pvm does), it is the module
	 * check alone that refuses it, and KILN_ACCEL=kvm overrides that. */
	if (dev_kvm_answers()) {
		CHECK(vm_kvm_check(hw, "/dev/kvm", NULL, &why));
		CHECK(vm_kvm_check(pvm, "/dev/kvm", "kvm", &why));
		CHECK(!vm_kvm_check(pvm, "/dev/kvm", NULL, &why));
	}
	/* And the real host: kvm_pvm without kvm_intel/kvm_amd means TCG. */
	if (access("/sys/module/kvm_pvm", F_OK) == 0 && access("/sys/module/kvm_intel", F_OK) < 0 &&
	    access("/sys/module/kvm_amd", F_OK) < 0 && getenv("KILN_ACCEL") == NULL)
		CHECK(!vm_kvm_usable());
	free(pvm);
	free(hw);
	free(nodev);
}

int main(void)
{
	kiln_error *err = NULL;

	tmpdir = kiln_mkdtemp("kiln-test-vmk", &err);
	if (tmpdir == NULL)
		return 1;
	RUN(test_all_builtin);
	RUN(test_builtin_missing);
	RUN(test_kvm_pvm_refused);
	RUN(test_search_path);
	kiln_rm_rf(tmpdir, &err);
	free(tmpdir);
	return test_done();
}

/* test_vm_initramfs.c — kernel directory checks, module dependency order from
 * modules.dep (and modules.builtin), and the initramfs read back with
 * libarchive: entries, modes, device node, init script, module list. */
#include <archive.h>
#include <archive_entry.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "test.h"
#include "vm/vm.h"

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

/* A fake kernel: the files the VM layer reads, with a made-up module graph. */
static char *fake_kernel(const char *name, const char *moddep)
{
	char *dir = kiln_path_join(tmpdir, name);
	static const char *const mods[] = { "kernel/a/virtio.ko", "kernel/a/virtio_ring.ko", "kernel/b/virtio_mmio.ko",
					    "kernel/c/virtio_blk.ko", "kernel/d/virtio-console.ko", NULL };

	put(dir, "release", "9.9.9-test\n");
	put(dir, "root/boot/vmlinuz-9.9.9-test", "not really a kernel");
	put(dir, "root/lib/modules/9.9.9-test/modules.dep", moddep);
	put(dir, "root/lib/modules/9.9.9-test/modules.builtin", "kernel/fs/overlayfs/overlay.ko\n");
	for (size_t i = 0; mods[i]; i++) {
		char *rel = kiln_xasprintf("root/lib/modules/9.9.9-test/%s", mods[i]);
		put(dir, rel, mods[i]);
		free(rel);
	}
	return dir;
}

static const char good_dep[] = "kernel/a/virtio_ring.ko:\n"
			       "kernel/a/virtio.ko: kernel/a/virtio_ring.ko\n"
			       "kernel/b/virtio_mmio.ko: kernel/a/virtio.ko kernel/a/virtio_ring.ko\n"
			       "kernel/c/virtio_blk.ko: kernel/a/virtio.ko kernel/a/virtio_ring.ko\n"
			       "kernel/d/virtio-console.ko: kernel/a/virtio.ko kernel/a/virtio_ring.ko\n";

static void test_kernel_open(void)
{
	struct vm_kernel k;
	kiln_error *err = NULL;
	char *dir = fake_kernel("k1", good_dep), *missing = kiln_path_join(tmpdir, "nothing");

	CHECK(vm_kernel_open(dir, &k, &err) == 0);
	CHECK_STR(k.release, "9.9.9-test");
	CHECK(strstr(k.vmlinuz, "/root/boot/vmlinuz-9.9.9-test") != NULL);
	CHECK_STR(k.image, k.vmlinuz); /* no extracted ELF: boot the bzImage */
	vm_kernel_free(&k);
	put(dir, "root/boot/vmlinux-9.9.9-test", "\177ELF");
	CHECK(vm_kernel_open(dir, &k, &err) == 0);
	CHECK(k.image && strstr(k.image, "/root/boot/vmlinux-9.9.9-test") != NULL);
	vm_kernel_free(&k);

	CHECK(vm_kernel_open(missing, &k, &err) < 0);
	CHECK(err && err->kind == KILN_E_NOTFOUND && strstr(kiln_error_message(err), "fetch") != NULL);
	kiln_error_clear(&err);

	/* A release that would escape the directory is refused. */
	put(missing, "release", "../../etc\n");
	CHECK(vm_kernel_open(missing, &k, &err) < 0);
	CHECK(err && err->kind == KILN_E_INVALID);
	kiln_error_clear(&err);
	free(dir);
	free(missing);
}

static void test_resolve(void)
{
	const char *const names[] = { "virtio_mmio", "virtio_blk", "virtio_console", "overlay", NULL };
	const char *const unknown[] = { "virtio_gpu", NULL };
	const char *const want[] = { "kernel/a/virtio_ring.ko", "kernel/a/virtio.ko", "kernel/b/virtio_mmio.ko",
				     "kernel/c/virtio_blk.ko", "kernel/d/virtio-console.ko", NULL };
	struct vm_kernel k;
	kiln_strv out = KILN_STRV_INIT;
	kiln_error *err = NULL;
	char *dir = fake_kernel("k2", good_dep);

	CHECK(vm_kernel_open(dir, &k, &err) == 0);
	/* Dependencies first, each once; overlay is built in; '-' and '_' match. */
	CHECK(vm_kernel_resolve_modules(&k, names, &out, &err) == 0);
	CHECK_INT(out.n, 5);
	for (size_t i = 0; i < out.n && want[i]; i++)
		CHECK_STR(out.v[i], want[i]);
	kiln_strv_free(&out);

	CHECK(vm_kernel_resolve_modules(&k, unknown, &out, &err) < 0);
	CHECK(err && err->kind == KILN_E_NOTFOUND && strstr(kiln_error_message(err), "virtio_gpu"));
	kiln_error_clear(&err);
	kiln_strv_free(&out);
	vm_kernel_free(&k);
	free(dir);

	/* A dependency without an entry, a cycle and a malformed line are errors. */
	static const char *const bad[] = {
		"kernel/b/virtio_mmio.ko: kernel/a/gone.ko\n",
		"kernel/b/virtio_mmio.ko: kernel/a/virtio.ko\nkernel/a/virtio.ko: kernel/b/virtio_mmio.ko\n",
		"no colon here\n",
	};
	for (size_t i = 0; i < 3; i++) {
		char name[8];
		snprintf(name, sizeof(name), "bad%zu", i);
		dir = fake_kernel(name, bad[i]);
		CHECK(vm_kernel_open(dir, &k, &err) == 0);
		CHECK(vm_kernel_resolve_modules(&k, names, &out, &err) < 0);
		CHECK(err && err->kind == KILN_E_INVALID);
		kiln_error_clear(&err);
		kiln_strv_free(&out);
		vm_kernel_free(&k);
		free(dir);
	}
}

static void test_initramfs(void)
{
	const char *const names[] = { "virtio_blk", "virtio_mmio", NULL };
	struct vm_kernel k;
	kiln_error *err = NULL;
	char *dir = fake_kernel("k3", good_dep), *out = kiln_path_join(tmpdir, "initrd.cpio");
	char *agent = kiln_path_join(tmpdir, "agent-bin"), *bb = kiln_path_join(tmpdir, "busybox-bin");
	struct archive *a;
	struct archive_entry *e;
	int seen_init = 0, seen_console = 0, seen_agent = 0, seen_bb = 0, nmods = 0;
	char list[256] = "";

	put(tmpdir, "agent-bin", "AGENT");
	put(tmpdir, "busybox-bin", "BUSYBOX");
	CHECK(vm_kernel_open(dir, &k, &err) == 0);
	struct vm_initramfs_opts o = { .kernel = &k, .busybox = bb, .agent = agent, .modules = names };
	CHECK(vm_initramfs_write(&o, out, &err) == 0);
	if (err)
		printf("#   %s\n", kiln_error_message(err));

	a = archive_read_new();
	archive_read_support_format_cpio(a);
	CHECK(archive_read_open_filename(a, out, 16384) == ARCHIVE_OK);
	while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
		const char *p = archive_entry_pathname(e);
		char buf[65536];
		la_ssize_t n = archive_read_data(a, buf, sizeof(buf) - 1);
		buf[n > 0 ? n : 0] = '\0';
		if (strcmp(p, "init") == 0) {
			seen_init = 1;
			CHECK_INT(archive_entry_mode(e), S_IFREG | 0755);
			CHECK_STR(buf, vm_init_script);
		} else if (strcmp(p, "dev/console") == 0) {
			seen_console = 1;
			CHECK(S_ISCHR(archive_entry_mode(e)));
			CHECK_INT(major(archive_entry_rdev(e)), 5);
			CHECK_INT(minor(archive_entry_rdev(e)), 1);
		} else if (strcmp(p, "bin/kiln-agent") == 0) {
			seen_agent = 1;
			CHECK_STR(buf, "AGENT");
		} else if (strcmp(p, "bin/busybox") == 0) {
			seen_bb = 1;
			CHECK_STR(buf, "BUSYBOX");
			CHECK_INT(archive_entry_mode(e) & 07777, 0755);
		} else if (strncmp(p, "lib/modules/", 12) == 0 && strstr(p, ".ko")) {
			nmods++;
		} else if (strcmp(p, "etc/kiln/modules") == 0) {
			snprintf(list, sizeof(list), "%.200s", buf);
		}
		CHECK_INT(archive_entry_uid(e), 0);
	}
	archive_read_free(a);
	CHECK(seen_init && seen_console && seen_agent && seen_bb);
	CHECK_INT(nmods, 4);
	CHECK_STR(list, "virtio_ring.ko\nvirtio.ko\nvirtio_blk.ko\nvirtio_mmio.ko\n");

	/* A missing busybox fails cleanly and leaves no file behind. */
	o.busybox = "/nonexistent/busybox";
	char *out2 = kiln_path_join(tmpdir, "initrd2.cpio");
	struct stat st;
	CHECK(vm_initramfs_write(&o, out2, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "/nonexistent/busybox") != NULL);
	kiln_error_clear(&err);
	CHECK(stat(out2, &st) < 0);
	char *tmp2 = kiln_xasprintf("%s.tmp", out2);
	CHECK(access(tmp2, F_OK) < 0);
	free(tmp2);

	vm_kernel_free(&k);
	free(out2);
	free(dir);
	free(out);
	free(agent);
	free(bb);
}

static void test_host(void)
{
	uint32_t a = 0, b = 0;
	kiln_error *err = NULL;

	CHECK(vm_host_tsc_khz(&a, &err) == 0);
	CHECK(vm_host_tsc_khz(&b, &err) == 0);
	CHECK(a > 100000 && a < 10000000); /* 100 MHz .. 10 GHz */
	/* Two measurements agree to 0.5% even on a busy machine. */
	CHECK((a > b ? a - b : b - a) < a / 200);
	kiln_error_free(err);
}

int main(void)
{
	kiln_error *err = NULL;

	tmpdir = kiln_mkdtemp("kiln-test-vm", &err);
	if (tmpdir == NULL)
		return 1;
	RUN(test_kernel_open);
	RUN(test_resolve);
	RUN(test_initramfs);
	RUN(test_host);
	kiln_rm_rf(tmpdir, &err);
	free(tmpdir);
	return test_done();
}

/* exec_warm.c — a builder VM restored from a snapshot instead of booted: the
 * first build on a host boots a generic builder VM once (an empty rootfs, a
 * large tmpfs for step files), snapshots it into $KILN_HOME/builder-vm/KEY and
 * later stages restore it in a fraction of a cold boot; the stage's layers are
 * then uploaded as lower directories.  KEY covers everything the snapshot
 * depends on (kernel, agent, busybox, QEMU's machine, host boot, accel). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "builder/internal.h"
#include "guest/guest.h"
#include "vm/vm.h"

#define WARM_MEMORY_MIB 2048u

struct build_warm_vm {
	pid_t pid;
	char *dir;
	vm_qmp *q;
	guest_conn *g;
};

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A copy that keeps holes (the guest's RAM file is mostly holes). */
static int copy_sparse(const char *src, const char *dst, kiln_error **err)
{
	int in = open(src, O_RDONLY | O_CLOEXEC), out = -1, rc = -1;
	struct stat st;
	char *buf = kiln_xmalloc(1 << 20);

	if (in < 0 || fstat(in, &st) < 0) {
		kiln_err_errno(err, errno, "%s", src);
		goto out;
	}
	out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0 || ftruncate(out, st.st_size) < 0) {
		kiln_err_errno(err, errno, "%s", dst);
		goto out;
	}
	for (off_t off = 0; off < st.st_size;) {
		off_t data = lseek(in, off, SEEK_DATA);
		if (data < 0)
			break; /* only a hole is left */
		off_t hole = lseek(in, data, SEEK_HOLE);
		for (off_t p = data; p < hole;) {
			size_t want = (size_t)(hole - p < (1 << 20) ? hole - p : (1 << 20));
			ssize_t n = pread(in, buf, want, p);
			if (n <= 0 || pwrite(out, buf, (size_t)n, p) != n) {
				kiln_err_errno(err, n < 0 ? errno : EIO, "copying %s", src);
				goto out;
			}
			p += n;
		}
		off = hole;
	}
	if (fsync(out) < 0) {
		kiln_err_errno(err, errno, "%s", dst);
		goto out;
	}
	rc = 0;
out:
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	free(buf);
	return rc;
}

static char *agent_path(void)
{
	const char *env = getenv("KILN_AGENT");
	if (env && *env)
		return kiln_xstrdup(env);
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return kiln_xstrdup("kiln-agent");
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	return kiln_path_join(self, "kiln-agent");
}

/* The snapshot's directory: a digest over what it depends on. */
static int warm_key(const struct build_vm_opts *vo, char key[KILN_DIGEST_MAX], kiln_error **err)
{
	struct vm_kernel k = { 0 };
	char dk[KILN_DIGEST_MAX], da[KILN_DIGEST_MAX], db[KILN_DIGEST_MAX];
	char *agent = agent_path(), *boot = NULL;
	size_t len = 0;
	int rc = -1;

	if (vm_kernel_open(vo ? vo->kernel_dir : NULL, &k, err) < 0 || kiln_digest_file(KILN_SHA256, k.vmlinuz, dk, err) < 0 ||
	    kiln_digest_file(KILN_SHA256, agent, da, err) < 0 || kiln_digest_file(KILN_SHA256, "/bin/busybox", db, err) < 0)
		goto out;
	/* a snapshot's guest keeps the TSC rate it booted with: same host boot only */
	if (kiln_read_file("/proc/sys/kernel/random/boot_id", &boot, &len, 100, err) < 0)
		goto out;
	char *text = kiln_xasprintf("kiln-builder-vm/1\n%s\n%s\n%s\n%s\n%s\n%u\n%u\n%u\n%s", dk, k.release, da, db, boot,
				    vo && vo->cpus ? vo->cpus : 1, WARM_MEMORY_MIB, GUEST_PROTO_VERSION,
				    vm_kvm_usable() ? "kvm" : "tcg");
	kiln_digest_buf(KILN_SHA256, text, strlen(text), key);
	free(text);
	rc = 0;
out:
	vm_kernel_free(&k);
	free(agent);
	free(boot);
	return rc;
}

/* An empty root: the builder VM only needs its /run, the steps bring the rest. */
static int empty_rootfs(build_store *s, const char *path, kiln_error **err)
{
	static const char *const dirs[] = { "bin", "dev", "etc", "proc", "run", "sys", "tmp" };
	struct build_changes ch = { 0 };
	struct build_layer l;
	char manifest[KILN_DIGEST_MAX], config[KILN_DIGEST_MAX];
	json_t *cfg = build_config_scratch();
	int rc = -1;

	ch.v = kiln_xcalloc(sizeof(dirs) / sizeof(dirs[0]), sizeof(*ch.v));
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		ch.v[ch.n].dest = kiln_xstrdup(dirs[i]);
		ch.v[ch.n].mode = ch.v[ch.n].src_mode = S_IFDIR | (strcmp(dirs[i], "tmp") ? 0755 : 01777);
		ch.n++;
	}
	ch.cap = ch.n;
	if (build_layer_write(s, &ch, BUILD_GZIP, 0, &l, err) == 0 &&
	    build_image_commit(s, cfg, &l, 1, "1970-01-01T00:00:00Z", manifest, config, err) == 0)
		rc = build_rootfs_write(s, manifest, path, err);
	build_changes_free(&ch);
	json_decref(cfg);
	return rc;
}

static int guest_sh(guest_conn *g, const char *script, kiln_error **err)
{
	const char *argv[] = { VM_GUEST_BUSYBOX, "sh", "-c", script, NULL };
	struct guest_exec_opts eo;
	struct guest_result res;

	guest_exec_opts_init(&eo);
	eo.argv = argv;
	if (guest_exec(g, &eo, NULL, 0, 60000, &res, err) < 0)
		return -1;
	if (res.exit_code || res.signal)
		return kiln_err(err, KILN_E_GENERIC, "builder VM: '%s' failed (%d)", script, res.exit_code);
	return 0;
}

/* Boot the generic builder VM once and snapshot it into dir. */
static int make_snapshot(build_store *s, const struct build_vm_opts *vo, const char *dir, kiln_error **err)
{
	char *root = kiln_path_join(dir, "rootfs.ext4"), *disk = kiln_path_join(dir, "disk.qcow2");
	char *mem = kiln_path_join(dir, "memory"), *state = kiln_path_join(dir, "state");
	char *ok = kiln_path_join(dir, "ok"), *overlay = NULL;
	vm_instance *v = NULL;
	struct vm_config c;
	double t0 = now_ms();
	int rc = -1;

	if (kiln_mkdir_p(dir, 0700, err) < 0 || empty_rootfs(s, root, err) < 0)
		goto out;
	vm_config_init(&c);
	c.rootfs = root;
	c.root_mode = VM_ROOT_OVERLAY;
	c.net = true; /* --network=none steps get a namespace of their own */
	c.memory_mib = WARM_MEMORY_MIB;
	c.cpus = vo && vo->cpus ? vo->cpus : 1;
	c.kernel_dir = vo ? vo->kernel_dir : NULL;
	if (!(v = vm_boot(&c, err)))
		goto out;
	/* the steps' files live in guest RAM: a tmpfs of most of it; the agent's
	 * exec path is warmed up so restored VMs start with it translated */
	if (guest_sh(vm_agent(v), "mkdir -p /run/kiln/w && mount -t tmpfs -o size=90% kiln-steps /run/kiln/w", err) < 0 ||
	    guest_sh(vm_agent(v), "true", err) < 0)
		goto out;
	overlay = vm_overlay_path(v);
	if (vm_snapshot_save(v, state, 60000, err) < 0 || copy_sparse(vm_memory_path(v), mem, err) < 0 ||
	    copy_sparse(overlay, disk, err) < 0)
		goto out;
	vm_destroy(v);
	v = NULL;
	if (vm_overlay_rebase(disk, root, err) < 0 || kiln_write_atomic(ok, "1\n", 2, 0600, err) < 0)
		goto out;
	kiln_info("build: builder VM snapshot made in %.0f ms (%s)", now_ms() - t0, dir);
	rc = 0;
out:
	vm_destroy(v);
	if (rc < 0)
		kiln_error_wrap(err, "making the builder VM snapshot");
	free(root);
	free(disk);
	free(mem);
	free(state);
	free(ok);
	free(overlay);
	return rc;
}

/* Snapshots for another kernel, agent or host boot cannot be used again. */
static void remove_others(const char *base, const char *keep)
{
	DIR *d = opendir(base);
	struct dirent *de;

	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.' || !strcmp(de->d_name, keep) || !strcmp(de->d_name, "lock"))
			continue;
		char *p = kiln_path_join(base, de->d_name);
		kiln_error *e = NULL;
		if (kiln_rm_rf(p, &e) < 0)
			kiln_error_free(e);
		free(p);
	}
	if (d)
		closedir(d);
}

static pid_t spawn(char *const argv[], const char *dir, kiln_error **err)
{
	char *log = kiln_path_join(dir, "qemu.log");
	int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	pid_t parent = getpid(), pid;

	free(log);
	if (fd < 0)
		return kiln_err_errno(err, errno, "qemu.log");
	pid = fork();
	if (pid == 0) {
		/* QEMU dies with kiln (^C, kill): no VM outlives its build */
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		int null = open("/dev/null", O_RDONLY);
		if (null >= 0)
			dup2(null, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		setenv("TMPDIR", dir, 1); /* the disk's snapshot=on overlay */
		execvp(argv[0], argv);
		_exit(127);
	}
	close(fd);
	if (pid < 0)
		return kiln_err_errno(err, errno, "fork");
	return pid;
}

void build_warm_stop(struct build_warm_vm *w)
{
	if (!w)
		return;
	guest_close(w->g);
	vm_qmp_close(w->q);
	if (w->pid > 0) {
		kill(w->pid, SIGKILL);
		waitpid(w->pid, NULL, 0);
	}
	if (w->dir) {
		kiln_error *e = NULL;
		if (kiln_rm_rf(w->dir, &e) < 0)
			kiln_error_free(e);
	}
	free(w->dir);
	free(w);
}

guest_conn *build_warm_conn(struct build_warm_vm *w)
{
	return w->g;
}

int build_warm_start(build_store *s, const struct build_vm_opts *vo, const char *scratch, struct build_warm_vm **out,
		     kiln_error **err)
{
	char key[KILN_DIGEST_MAX];
	char *base = kiln_xasprintf("%s/builder-vm", build_store_home(s)), *snap = NULL, *ok = NULL, *lock = NULL;
	struct build_warm_vm *w = kiln_xcalloc(1, sizeof(*w));
	kiln_strv av = KILN_STRV_INIT;
	int lfd = -1, rc = -1;

	if (warm_key(vo, key, err) < 0 || kiln_mkdir_p(base, 0700, err) < 0)
		goto out;
	snap = kiln_path_join(base, kiln_digest_hex(key));
	ok = kiln_path_join(snap, "ok");
	lock = kiln_path_join(base, "lock");
	if (access(ok, F_OK) < 0) {
		/* one build makes it; others wait for it */
		lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (lfd < 0 || flock(lfd, LOCK_EX) < 0) {
			kiln_err_errno(err, errno, "%s", lock);
			goto out;
		}
		if (access(ok, F_OK) < 0) {
			kiln_error *e = NULL;
			if (kiln_rm_rf(snap, &e) < 0)
				kiln_error_free(e);
			if (make_snapshot(s, vo, snap, err) < 0)
				goto out;
			remove_others(base, kiln_digest_hex(key));
		}
	}
	w->dir = kiln_xasprintf("%s/warm-XXXXXX", scratch);
	if (!mkdtemp(w->dir)) {
		kiln_err_errno(err, errno, "%s", w->dir);
		goto out;
	}
	char *mem = kiln_path_join(snap, "memory"), *disk = kiln_path_join(snap, "disk.qcow2");
	struct vm_restore_config rc_ = { .accel = vm_kvm_usable() ? VM_ACCEL_KVM : VM_ACCEL_TCG,
					 .cpus = vo && vo->cpus ? vo->cpus : 1, .memory_mib = WARM_MEMORY_MIB,
					 .net = true, .memory_file = mem, .disk = disk, .dir = w->dir };
	vm_restore_argv(&rc_, &av);
	free(mem);
	free(disk);
	if ((w->pid = spawn(av.v, w->dir, err)) < 0)
		goto out;
	char *qmp = kiln_path_join(w->dir, "qmp.sock"), *agent = kiln_path_join(w->dir, "agent.sock");
	char *state = kiln_path_join(snap, "state");
	if ((w->q = vm_qmp_connect(qmp, 10000, err)) && vm_snapshot_load(w->q, state, 30000, err) == 0)
		w->g = guest_connect(agent, 30000, err);
	free(qmp);
	free(agent);
	free(state);
	if (!w->g) {
		kiln_error_wrap(err, "restoring the builder VM (log: %s/qemu.log)", w->dir);
		goto out;
	}
	*out = w;
	w = NULL;
	rc = 0;
out:
	if (lfd >= 0)
		close(lfd);
	build_warm_stop(w);
	kiln_strv_free(&av);
	free(base);
	free(snap);
	free(ok);
	free(lock);
	return rc;
}

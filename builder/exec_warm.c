/* exec_warm.c — a builder VM restored from a snapshot instead of booted: the
 * first build on a host boots a generic builder VM once (an empty rootfs, a
 * large tmpfs for step files), snapshots it into $KILN_HOME/builder-vm/KEY and
 * later stages restore it in a fraction of a cold boot; the stage's layers are
 * then uploaded as lower directories.  KEY covers everything the snapshot
 * depends on (kernel, agent, busybox, QEMU's machine, host boot, accel).
 * A base image seen a second time gets a snapshot of its own (KEY/base-B:
 * the builder VM with that base uploaded), so later stages on it upload
 * nothing of it.  A large stage is not uploaded at all: its ext4 is attached
 * as the VM's spare disk (a virtio disk the snapshot has, holding nothing,
 * which the restore points at the stage's file) and mounted in the guest. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "builder/internal.h"
#include "guest/guest.h"
#include "vm/vm.h"

/* per-base snapshots kept per KEY (≈ 60 MiB of RAM file each, the newest
 * used kept) and bases remembered as seen once */
#define MAX_BASE_SNAPSHOTS 4
#define MAX_SEEN_BASES 64

struct build_warm_vm {
	vm_instance *vm; /* restored by vm_restore: its directory is in scratch */
	char *dir;
	guest_conn *g;
	char *lock;      /* $KILN_HOME/builder-vm/lock */
	char *save_dir;  /* the per-base snapshot to make once the base is uploaded */
	bool has_base;   /* restored from a per-base snapshot: the base is in place */
	bool tainted;    /* has held a secret: never saved again */
};

/* A file of size bytes that holds nothing (all hole). */
static int sparse_file(const char *path, int64_t size, kiln_error **err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0 || ftruncate(fd, (off_t)size) < 0) {
		kiln_err_errno(err, errno, "%s", path);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* The snapshot's directory: a digest over what it depends on (vm/'s one
 * fingerprint of a snapshot, with this machine's options) and the agent and
 * busybox it runs. */
static int warm_key(const struct build_vm_opts *vo, char key[KILN_DIGEST_MAX], kiln_error **err)
{
	char da[KILN_DIGEST_MAX], db[KILN_DIGEST_MAX];
	char *agent = vm_agent_default_path(), *deps = NULL, *text = NULL;
	json_t *d = vm_snapshot_depends(vo ? vo->kernel_dir : NULL, VM_ACCEL_AUTO, vo && vo->cpus ? vo->cpus : 1,
					BUILD_VM_MEMORY_MIB, true, NULL, err);
	int rc = -1;

	if (d == NULL || kiln_digest_file(KILN_SHA256, agent, da, err) < 0 ||
	    kiln_digest_file(KILN_SHA256, "/bin/busybox", db, err) < 0)
		goto out;
	deps = kiln_json_dumps_canonical(d);
	/* 3: the machine has the spare disk */
	text = kiln_xasprintf("kiln-builder-vm/3\n%s\n%s\n%s", deps, da, db);
	kiln_digest_buf(KILN_SHA256, text, strlen(text), key);
	rc = 0;
out:
	json_decref(d);
	free(agent);
	free(deps);
	free(text);
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

/* The spare disk now holds the stage's ext4: the guest probed it as an empty
 * disk before the snapshot, so its cached blocks are dropped first. */
static int mount_stage(guest_conn *g, kiln_error **err)
{
	return guest_sh(g,
			"for b in /sys/block/vd*; do [ \"$(cat $b/serial 2>/dev/null)\" = " VM_SPARE_SERIAL " ] && "
			"d=/dev/${b##*/}; done; [ -n \"$d\" ] && " VM_GUEST_BUSYBOX " blockdev --flushbufs $d && mkdir -p " BUILD_GUEST_STAGE_DIR
			" && mount -t ext4 -o ro,noload $d " BUILD_GUEST_STAGE_DIR,
			err);
}

/* Boot the generic builder VM once and snapshot it into dir. */
static int make_snapshot(build_store *s, const struct build_vm_opts *vo, const char *dir, kiln_error **err)
{
	char *root = kiln_path_join(dir, "rootfs.ext4"), *disk = kiln_path_join(dir, "disk.qcow2");
	char *mem = kiln_path_join(dir, "memory"), *state = kiln_path_join(dir, "state");
	char *ok = kiln_path_join(dir, "ok"), *overlay = NULL, *spare = kiln_path_join(dir, "spare.img");
	vm_instance *v = NULL;
	struct vm_config c;
	double t0 = kiln_now_ms();
	int rc = -1;

	if (kiln_mkdir_p(dir, 0700, err) < 0 || empty_rootfs(s, root, err) < 0 ||
	    sparse_file(spare, VM_SPARE_BYTES, err) < 0)
		goto out;
	vm_config_init(&c);
	c.rootfs = root;
	c.spare_disk = spare;
	c.root_mode = VM_ROOT_OVERLAY;
	c.net = true; /* --network=none steps get a namespace of their own */
	c.memory_mib = BUILD_VM_MEMORY_MIB;
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
	if (vm_snapshot_save(v, state, 60000, err) < 0 || kiln_copy_sparse(vm_memory_path(v), mem, true, err) < 0 ||
	    kiln_copy_sparse(overlay, disk, true, err) < 0)
		goto out;
	vm_destroy(v);
	v = NULL;
	/* a restore attaches a spare disk of its own: no 64 GiB file (a hole,
	 * but grep, cp or a backup would read it) stays in $KILN_HOME */
	unlink(spare);
	if (vm_overlay_rebase(disk, root, err) < 0 || kiln_write_atomic(ok, "1\n", 2, 0600, err) < 0)
		goto out;
	kiln_info("build: builder VM snapshot made in %.0f ms (%s)", kiln_now_ms() - t0, dir);
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
	if (rc < 0)
		unlink(spare);
	free(spare);
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

/* The QEMU process and its connections; the directory goes with it. */
static void warm_kill(struct build_warm_vm *w)
{
	guest_close(w->g);
	w->g = NULL;
	vm_destroy(w->vm);
	w->vm = NULL;
	free(w->dir);
	w->dir = NULL;
}

void build_warm_stop(struct build_warm_vm *w)
{
	if (!w)
		return;
	warm_kill(w);
	free(w->lock);
	free(w->save_dir);
	free(w);
}

guest_conn *build_warm_conn(struct build_warm_vm *w)
{
	return w->g;
}

void build_warm_taint(struct build_warm_vm *w)
{
	w->tainted = true;
}

bool build_warm_has_base(const struct build_warm_vm *w)
{
	return w->has_base;
}

/* Start QEMU on a snapshot's RAM file and state.  shared: the RAM is first
 * copied into the VM's own directory and mapped share=on, so that the VM
 * can be saved again (build_warm_save_base). */
static int restore(struct build_warm_vm *w, const struct build_vm_opts *vo, const char *scratch, const char *mem,
		   const char *state, const char *disk, const char *spare, bool shared, kiln_error **err)
{
	char *own = NULL, *agent = NULL, *backing = NULL, *empty = NULL;
	int rc = -1;

	w->dir = kiln_xasprintf("%s/warm-XXXXXX", scratch);
	if (!mkdtemp(w->dir)) {
		kiln_err_errno(err, errno, "%s", w->dir);
		goto out;
	}
	if (!spare) { /* the snapshot's spare disk, empty: a hole, removed with the VM */
		empty = kiln_path_join(w->dir, "spare.img");
		if (sparse_file(empty, VM_SPARE_BYTES, err) < 0)
			goto out;
		spare = empty;
	}
	if (shared) {
		own = kiln_path_join(w->dir, "memory");
		if (kiln_copy_sparse(mem, own, false, err) < 0)
			goto out;
	}
	/* the disk's backing, given explicitly: the rootfs beside it (make_snapshot) */
	backing = kiln_xasprintf("%.*s/rootfs.ext4", (int)(strrchr(disk, '/') - disk), disk);
	struct vm_restore_config rc_ = { .accel = vm_kvm_usable() ? VM_ACCEL_KVM : VM_ACCEL_TCG,
					 .cpus = vo && vo->cpus ? vo->cpus : 1, .memory_mib = BUILD_VM_MEMORY_MIB,
					 .net = true, .memory_file = shared ? own : mem, .memory_shared = shared,
					 .disk = disk, .disk_backing = backing, .state = state, .spare_disk = spare,
					 .dir = w->dir };
	/* kiln's child, removed with its directory on ^C (vm_cleanup_on_signals) */
	if ((w->vm = vm_restore(&rc_, NULL, err)) == NULL) {
		/* the failed VM took its directory with it */
		free(w->dir);
		w->dir = NULL;
		goto fail;
	}
	agent = vm_agent_socket_path(w->dir, 0);
	if ((w->g = guest_connect(agent, 30000, err)) == NULL ||
	    vm_socket_peer_check(guest_conn_fd(w->g), vm_jail_uid(w->vm), "the builder VM's agent", err) < 0)
		goto fail;
	rc = 0;
	goto out;
fail:
	kiln_error_wrap(err, "restoring the builder VM");
out:
	if (rc < 0 && w->dir && !w->vm) {
		kiln_error *e = NULL;
		if (kiln_rm_rf(w->dir, &e) < 0)
			kiln_error_free(e);
	}
	free(own);
	free(agent);
	free(backing);
	free(empty);
	return rc;
}

/* Keep the `keep` newest entries of dir named prefix* (by mtime). */
static void keep_newest(const char *dir, const char *prefix, size_t keep)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	kiln_strv names = KILN_STRV_INIT;

	while (d && (de = readdir(d)))
		if (!strncmp(de->d_name, prefix, strlen(prefix)))
			kiln_strv_push(&names, de->d_name);
	if (d)
		closedir(d);
	while (names.n > keep) {
		size_t oldest = 0;
		struct timespec ot = { 0, 0 };
		for (size_t i = 0; i < names.n; i++) {
			char *p = kiln_path_join(dir, names.v[i]);
			struct stat st;
			struct timespec t = stat(p, &st) == 0 ? st.st_mtim : (struct timespec){ 0, 0 };
			free(p);
			if (i == 0 || t.tv_sec < ot.tv_sec || (t.tv_sec == ot.tv_sec && t.tv_nsec < ot.tv_nsec)) {
				oldest = i;
				ot = t;
			}
		}
		char *p = kiln_path_join(dir, names.v[oldest]);
		kiln_error *e = NULL;
		if (kiln_rm_rf(p, &e) < 0)
			kiln_error_free(e);
		free(p);
		free(names.v[oldest]);
		names.v[oldest] = names.v[--names.n];
	}
	kiln_strv_free(&names);
}

/* The builder-vm lock without waiting: -1 when another build holds it. */
static int try_lock(const char *lock)
{
	int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

int build_warm_save_base(struct build_warm_vm *w, kiln_error **err)
{
	char *tmp = NULL, *state = NULL, *mem = NULL, *own = NULL, *ok = NULL;
	double t0 = kiln_now_ms();
	bool paused = false;
	int lfd = -1, rc = 0;
	kiln_error *e = NULL;

	if (!w->save_dir)
		return 0;
	if (w->tainted) { /* its memory holds a secret: it must not become a file */
		kiln_info("build: no builder VM snapshot of a VM that held a secret");
		goto out;
	}
	/* another build making a snapshot: it is only an optimisation, skip */
	if ((lfd = try_lock(w->lock)) < 0)
		goto out;
	ok = kiln_path_join(w->save_dir, "ok");
	if (access(ok, F_OK) == 0)
		goto out;
	tmp = kiln_xasprintf("%s.tmp", w->save_dir);
	state = kiln_path_join(tmp, "state");
	mem = kiln_path_join(tmp, "memory");
	own = kiln_path_join(w->dir, "memory");
	if (kiln_rm_rf(tmp, &e) < 0 || kiln_rm_rf(w->save_dir, &e) < 0 || kiln_mkdir_p(tmp, 0700, &e) < 0)
		goto out;
	paused = true;
	if (vm_snapshot_save_qmp(vm_get_qmp(w->vm), state, 60000, &e) < 0 || kiln_copy_sparse(own, mem, true, &e) < 0)
		goto out;
	json_t *r = vm_qmp_execute(vm_get_qmp(w->vm), "cont", NULL, 5000, err);
	paused = false;
	if (!r) {
		rc = -1; /* the VM cannot go on */
		goto out;
	}
	json_decref(r);
	if (rename(tmp, w->save_dir) < 0) {
		kiln_err_errno(&e, errno, "%s", w->save_dir);
		goto out;
	}
	if (kiln_write_atomic(ok, "1\n", 2, 0600, &e) < 0)
		goto out;
	char *parent = kiln_xstrdup(w->save_dir);
	*strrchr(parent, '/') = '\0';
	keep_newest(parent, "base-", MAX_BASE_SNAPSHOTS);
	free(parent);
	kiln_info("build: builder VM snapshot with the base made in %.0f ms (%s)", kiln_now_ms() - t0, w->save_dir);
out:
	if (paused) {
		json_t *c = vm_qmp_execute(vm_get_qmp(w->vm), "cont", NULL, 5000, err);
		if (c)
			json_decref(c);
		else
			rc = -1;
	}
	if (e) {
		kiln_warn("build: no builder VM snapshot with the base (%s)", kiln_error_message(e));
		kiln_error_free(e);
		if (tmp) {
			kiln_error *e2 = NULL;
			if (kiln_rm_rf(tmp, &e2) < 0)
				kiln_error_free(e2);
		}
	}
	if (rc < 0)
		kiln_error_wrap(err, "resuming the builder VM");
	if (lfd >= 0)
		close(lfd);
	free(w->save_dir);
	w->save_dir = NULL;
	free(tmp);
	free(state);
	free(mem);
	free(own);
	free(ok);
	return rc;
}

int build_warm_start(build_store *s, const struct build_vm_opts *vo, const char *scratch, char *const *base,
		     size_t n_base, bool no_save, const char *stage_disk, struct build_warm_vm **out,
		     kiln_error **err)
{
	char key[KILN_DIGEST_MAX];
	char *dir = kiln_home_path(build_store_home(s), KILN_PATH_BUILDER_VM, NULL), *snap = NULL, *ok = NULL;
	char *bdir = NULL, *seen = NULL, *mem = NULL, *disk = NULL, *state = NULL, *spare = NULL;
	struct build_warm_vm *w = kiln_xcalloc(1, sizeof(*w));
	int lfd = -1, rc = -1;

	if (warm_key(vo, key, err) < 0 || kiln_mkdir_p(dir, 0700, err) < 0)
		goto out;
	snap = kiln_path_join(dir, kiln_digest_hex(key));
	ok = kiln_path_join(snap, "ok");
	w->lock = kiln_path_join(dir, "lock");
	if (access(ok, F_OK) < 0) {
		/* one build makes it; others wait for it */
		lfd = open(w->lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (lfd < 0 || flock(lfd, LOCK_EX) < 0) {
			kiln_err_errno(err, errno, "%s", w->lock);
			goto out;
		}
		if (access(ok, F_OK) < 0) {
			kiln_error *e = NULL;
			if (kiln_rm_rf(snap, &e) < 0)
				kiln_error_free(e);
			if (make_snapshot(s, vo, snap, err) < 0)
				goto out;
			remove_others(dir, kiln_digest_hex(key));
		}
		close(lfd);
		lfd = -1;
	}
	disk = kiln_path_join(snap, "disk.qcow2");
	spare = stage_disk ? kiln_xstrdup(stage_disk) : NULL;
	if (n_base && !stage_disk) {
		/* the base's snapshot: KEY (it lives under it) + the base's layers */
		kiln_buf t = KILN_BUF_INIT;
		char bk[KILN_DIGEST_MAX];
		kiln_buf_adds(&t, "kiln-builder-vm-base/1\n");
		for (size_t i = 0; i < n_base; i++)
			kiln_buf_addf(&t, "%s\n", base[i]);
		kiln_digest_buf(KILN_SHA256, t.buf, t.len, bk);
		kiln_buf_free(&t);
		bdir = kiln_xasprintf("%s/base-%s", snap, kiln_digest_hex(bk));
		seen = kiln_xasprintf("%s/seen-%s", snap, kiln_digest_hex(bk));
		char *bok = kiln_path_join(bdir, "ok");
		bool have = access(bok, F_OK) == 0;
		free(bok);
		if (have) {
			kiln_error *e = NULL;
			mem = kiln_path_join(bdir, "memory");
			state = kiln_path_join(bdir, "state");
			utimensat(AT_FDCWD, bdir, NULL, 0); /* recently used: kept */
			if (restore(w, vo, scratch, mem, state, disk, spare, false, &e) == 0) {
				w->has_base = true;
				goto done;
			}
			/* never fatal: the generic snapshot and an upload instead */
			kiln_warn("build: the builder VM snapshot with the base did not start (%s): "
				  "using the generic one", kiln_error_message(e));
			kiln_error_free(e);
			e = NULL;
			warm_kill(w);
			if ((lfd = try_lock(w->lock)) >= 0 && kiln_rm_rf(bdir, &e) < 0)
				kiln_error_free(e);
			free(mem);
			free(state);
		} else if (access(seen, F_OK) == 0) {
			/* second time this base: this VM saves it once it is uploaded
			 * (not one that will hold secrets: a later stage then does) */
			if (!no_save)
				w->save_dir = kiln_xstrdup(bdir);
		} else {
			kiln_error *e = NULL;
			if (kiln_write_atomic(seen, "1\n", 2, 0600, &e) < 0)
				kiln_error_free(e);
			keep_newest(snap, "seen-", MAX_SEEN_BASES);
		}
	}
	mem = kiln_path_join(snap, "memory");
	state = kiln_path_join(snap, "state");
	if (restore(w, vo, scratch, mem, state, disk, spare, w->save_dir != NULL, err) < 0)
		goto out;
	if (stage_disk && mount_stage(w->g, err) < 0) {
		kiln_error_wrap(err, "mounting the stage's disk in the builder VM");
		goto out;
	}
done:
	*out = w;
	w = NULL;
	rc = 0;
out:
	if (lfd >= 0)
		close(lfd);
	build_warm_stop(w);
	free(dir);
	free(snap);
	free(ok);
	free(bdir);
	free(seen);
	free(mem);
	free(disk);
	free(state);
	free(spare);
	return rc;
}

/* restore.c — the one restore of a VM snapshot, for sandboxes and builder
 * VMs: QEMU started (vm_spawn) with the snapshot's machine (machine.c), its
 * RAM file (private copy-on-write, or shared for a VM that is saved again)
 * and disk under a temporary overlay, waiting with `-incoming defer`; then
 * the device state is loaded over QMP and the guest resumed. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guest/guest.h"
#include "vm/internal.h"

/* QEMU's own files live in dir/run (the only directory it may write, owned
 * by its uid when jailed); dir's names for them are symlinks, so callers
 * keep using dir/qmp.sock, dir/agent.sock, ...  The RAM copy of a jailed
 * VM (below) is named by the symlink dir/ram. */
static const char *const linked[] = { "console.log", "qmp.sock" };
enum { R_QEMU_LOG, R_LINKS, R_RUN = R_LINKS + 2 + VM_AGENT_PORTS,
       R_MEM = R_RUN + 2 + VM_AGENT_PORTS, R_RAM_LINK, R_END };
_Static_assert(R_END < VM_MAX_FILES, "vm_files has room for every file (and the NULL)");

/* fds[0] >= 0 (jailed): the disk and its backing (and the spare disk),
 * opened read-only by kiln, go to QEMU as fd sets 2, 1 (and 3): their modes
 * need not let the VM's uid read them and their paths are not in the jail. */
static void restore_argv(const struct vm_restore_config *c, const char *run, const char *mem, bool shared,
			 bool sandbox, const int fds[3], kiln_strv *av)
{
	struct vm_machine m = {
		.accel = c->accel, .cpus = c->cpus, .memory_mib = c->memory_mib, .net = c->net, .dir = run,
		.memory_file = mem, .memory_private = !shared, .disk = fds[0] >= 0 ? "/dev/fdset/2" : c->disk,
		.disk_snapshot = true, .disk_backing = fds[1] >= 0 ? "/dev/fdset/1" : c->disk_backing, .sandbox = sandbox,
		.spare = fds[2] >= 0 ? "/dev/fdset/3" : c->spare_disk,
	};
	static const int set[3] = { 2, 1, 3 };
	static const char *const what[3] = { "disk", "rootfs", "spare" };

	char *netdev = c->net ? vm_net_netdev(c->net_opts) : NULL;
	m.netdev = netdev;
	vm_machine_argv(&m, av);
	free(netdev);
	for (int i = 0; i < 3; i++) {
		if (fds[i] < 0)
			continue;
		kiln_strv_push(av, "-add-fd");
		kiln_strv_push_owned(av, kiln_xasprintf("fd=%d,set=%d,opaque=%s", fds[i], set[i], what[i]));
	}
	kiln_strv_push(av, "-incoming");
	kiln_strv_push(av, "defer");
}

/* Why QEMU is gone, from its log. */
static void wrap_died(vm_instance *v, kiln_error **err)
{
	char *tail = vm_file_tail(v->files.paths[R_QEMU_LOG], 600);

	kiln_error_wrap(err, "QEMU exited%s%s", *tail ? ": " : "", tail);
	free(tail);
}

/* A jailed QEMU 7.2 cannot map the shared RAM blob: memory-backend-file
 * opens its file read-write even for share=off, and an unprivileged uid
 * must not hold a writable descriptor of a blob every sandbox of the
 * template maps.  So it gets a private copy (sparse, in /dev/shm, made in
 * its cgroup while QEMU starts: vm_jail_copy_start) mapped share=on. */
static char *ram_copy_path(const char *dir)
{
	struct stat st;
	const char *base = strrchr(dir, '/');

	if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0)
		return kiln_xasprintf("/dev/shm/kiln-%s-%ld.mem", base ? base + 1 : "vm", (long)getpid());
	return kiln_path_join(dir, "run/memory");
}

static int setup_dir(vm_instance *v, const struct vm_restore_config *c, kiln_error **err)
{
	char *run = kiln_path_join(c->dir, "run");
	int rc = -1;

	if (mkdir(run, 0700) < 0 && errno != EEXIST) {
		kiln_err_errno(err, errno, "vm: mkdir %s", run);
		goto out;
	}
	v->files.subdirs[0] = run;
	run = NULL;
	for (size_t i = 0; i < 2 + VM_AGENT_PORTS; i++) {
		char *name = i < 2 ? kiln_xstrdup(linked[i]) : NULL;
		if (name == NULL) {
			char *p = vm_agent_socket_path(c->dir, (unsigned)(i - 2));
			name = kiln_xstrdup(strrchr(p, '/') + 1);
			free(p);
		}
		char *target = kiln_xasprintf("run/%s", name);
		v->files.paths[R_LINKS + i] = kiln_path_join(c->dir, name);
		v->files.paths[R_RUN + i] = kiln_path_join(v->files.subdirs[0], name);
		unlink(v->files.paths[R_LINKS + i]);
		int r = symlink(target, v->files.paths[R_LINKS + i]);
		free(target);
		free(name);
		if (r < 0) {
			kiln_err_errno(err, errno, "vm: symlink %s", v->files.paths[R_LINKS + i]);
			goto out;
		}
	}
	rc = 0;
out:
	free(run);
	return rc;
}

/* Jailed: the guest RAM QEMU maps, reachable inside the jail — the blob
 * itself (memory_direct), a private copy made while QEMU starts, or the
 * caller's own shared copy; *mem and *shared become what QEMU maps. */
static int jail_memory(vm_instance *v, const struct vm_restore_config *c, const char **mem, bool *shared,
		       kiln_error **err)
{
	if (!*shared && c->memory_direct) {
		/* QEMU opens it read-write (7.2), but its server refuses
		 * writes: the private mapping is all the guest gets, and the
		 * page cache stays shared by every sandbox of the template */
		vm_jail_add(&v->jail, *mem, true);
		return 0;
	}
	if (!*shared) {
		char *link = kiln_path_join(c->dir, "ram");
		v->files.paths[R_MEM] = ram_copy_path(c->dir);
		v->files.paths[R_RAM_LINK] = link;
		unlink(link);
		if (symlink(v->files.paths[R_MEM], link) < 0)
			return kiln_err_errno(err, errno, "vm: symlink %s", link);
		unlink(v->files.paths[R_MEM]);
		v->jail.copy_from = c->memory_file;
		v->jail.copy_to = v->files.paths[R_MEM];
		*mem = v->files.paths[R_MEM];
		*shared = true;
		/* the copy is created inside, before the bind: a mount point */
		int fd = open(*mem, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0)
			return kiln_err_errno(err, errno, "vm: %s", *mem);
		close(fd);
	} else {
		/* the caller's own copy */
		v->files.paths[R_MEM] = kiln_xstrdup(c->memory_file);
	}
	if (vm_jail_own(&v->jail, *mem, err) < 0)
		return -1;
	vm_jail_add(&v->jail, *mem, true);
	return 0;
}

/* Jailed: the disk, its backing and the spare disk, opened read-only for
 * QEMU's fd sets (restore_argv). */
static int open_disks(const struct vm_restore_config *c, int fds[3], kiln_error **err)
{
	if (!c->disk_backing)
		return kiln_err(err, KILN_E_USAGE, "vm: a jailed restore needs the disk's backing file named");
	if ((fds[0] = open(c->disk, O_RDONLY | O_CLOEXEC)) < 0 ||
	    (fds[1] = open(c->disk_backing, O_RDONLY | O_CLOEXEC)) < 0)
		return kiln_err_errno(err, errno, "vm: %s", fds[0] < 0 ? c->disk : c->disk_backing);
	if (c->spare_disk && (fds[2] = open(c->spare_disk, O_RDONLY | O_CLOEXEC)) < 0)
		return kiln_err_errno(err, errno, "vm: spare disk %s", c->spare_disk);
	return 0;
}

/* QEMU started and waiting for the device state (-incoming defer), its QMP
 * connected and checked, the RAM copy (made beside QEMU's start) done; the
 * fds are QEMU's then, closed here.  s->spawn_ms is this part. */
static int start_incoming(vm_instance *v, const struct vm_restore_config *c, const char *mem, bool shared,
			  int fds[3], struct vm_restore_stats *s, kiln_error **err)
{
	kiln_strv av = KILN_STRV_INIT;
	char *qmp = NULL;
	int copy_fd = -1, rc = -1;
	pid_t copier = -1;

	restore_argv(c, v->files.subdirs[0], mem, shared, v->jail.on, fds, &av);
	struct vm_spawn_opts so = { .log_path = v->files.paths[R_QEMU_LOG], .tmpdir = v->files.subdirs[0],
				    .detached = c->detached, .jail = &v->jail, .keep_fd = { fds[0], fds[1], fds[2] } };
	double t0 = kiln_now_ms();
	/* the RAM copy and QEMU's start (exec, machine init) side by side */
	if (v->jail.copy_from && (copier = vm_jail_copy_start(&v->jail, &copy_fd, err)) < 0)
		goto out;
	if ((v->files.pid = vm_spawn(av.v, &so, err)) < 0) {
		v->files.pid = 0;
		goto out;
	}
	if (v->jail.on) {
		close(v->jail.slot_fd); /* QEMU holds the slot now */
		v->jail.slot_fd = -1;
	}
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	fds[0] = fds[1] = fds[2] = -1;
	if (c->detached)
		v->start_time = vm_proc_start_time(v->files.pid);
	if (c->on_spawn && c->on_spawn(c->ud, v->files.pid, err) < 0)
		goto out;
	qmp = kiln_path_join(v->files.subdirs[0], "qmp.sock");
	if ((v->qmp = vm_qmp_connect(qmp, c->qmp_timeout_ms > 0 ? c->qmp_timeout_ms : 10000, err)) == NULL) {
		if (vm_qemu_gone(v, WNOHANG))
			wrap_died(v, err);
		goto out;
	}
	if (vm_qmp_peer_check(v->qmp, vm_jail_uid(v), err) < 0)
		goto out;
	/* loading the device state reads guest RAM (virtqueues) */
	if (copier > 0) {
		int r = vm_jail_copy_wait(copier, copy_fd, err);
		copier = copy_fd = -1;
		if (r < 0)
			goto out;
	}
	s->spawn_ms = kiln_now_ms() - t0;
	rc = 0;
out:
	if (copier > 0) {
		kill(copier, SIGKILL);
		kiln_error *e = NULL;
		vm_jail_copy_wait(copier, copy_fd, &e);
		kiln_error_free(e);
	}
	kiln_strv_free(&av);
	free(qmp);
	return rc;
}

vm_instance *vm_restore(const struct vm_restore_config *c, struct vm_restore_stats *stats, kiln_error **err)
{
	struct vm_restore_stats dummy;
	struct vm_restore_stats *s = stats ? stats : &dummy;
	vm_instance *v = kiln_xcalloc(1, sizeof(*v));
	char *version = NULL;
	const char *mem = c->memory_file;
	bool shared = c->memory_shared;
	int fds[3] = { -1, -1, -1 };
	double t0 = kiln_now_ms();

	memset(s, 0, sizeof(*s));
	v->accel = c->accel;
	v->detached = c->detached;
	v->keep_dir = c->detached;
	v->files.dir = kiln_xstrdup(c->dir);
	v->files.paths[R_QEMU_LOG] = kiln_path_join(c->dir, "qemu.log");
	if (!c->detached)
		vm_registry_add(&v->files);
	if (setup_dir(v, c, err) < 0 ||
	    vm_jail_setup(&v->jail, c->dir, v->files.subdirs[0], c->cpus, c->memory_mib,
			  vm_net_host_ns(c->net, c->net_opts), c->net ? c->net_opts : NULL, c->accel, err) < 0)
		goto fail;
	if (v->jail.on) {
		v->files.subdirs[1] = kiln_xstrdup(v->jail.root);
		if (jail_memory(v, c, &mem, &shared, err) < 0 || open_disks(c, fds, err) < 0)
			goto fail;
	} else if (shared) {
		/* a shared RAM file is the VM's own copy: removed with it */
		v->files.paths[R_MEM] = kiln_xstrdup(c->memory_file);
	}
	s->jail_ms = kiln_now_ms() - t0;
	if (start_incoming(v, c, mem, shared, fds, s, err) < 0)
		goto fail;
	version = vm_qmp_version_string(v->qmp);
	if (c->on_version && c->on_version(c->ud, version, err) < 0)
		goto fail;
	t0 = kiln_now_ms();
	if (vm_snapshot_load(v->qmp, c->state, 30000, err) < 0) {
		if (vm_qemu_gone(v, WNOHANG))
			wrap_died(v, err);
		goto fail;
	}
	s->load_ms = kiln_now_ms() - t0;
	free(version);
	return v;
fail:
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(version);
	/* detached: QEMU is killed, dir (and the RAM copy it names, see
	 * vm_dir_cleanup) stays for the caller to remove */
	vm_destroy(v);
	return NULL;
}

bool vm_jailed(const vm_instance *v)
{
	return v->jail.on;
}

uid_t vm_jail_uid(const vm_instance *v)
{
	return v->jail.on ? v->jail.uid : 0;
}

void vm_dir_cleanup(const char *dir)
{
	char *link = kiln_path_join(dir, "ram"), target[4096];
	ssize_t n = readlink(link, target, sizeof(target) - 1);

	if (n > 0) {
		target[n] = '\0';
		if (strncmp(target, "/dev/shm/kiln-", 14) == 0 && !strstr(target, ".."))
			unlink(target);
	}
	free(link);
}

void vm_release(vm_instance *v)
{
	if (v == NULL)
		return;
	guest_close(v->conn);
	vm_qmp_close(v->qmp);
	if (!v->detached)
		vm_registry_remove(&v->files);
	for (int i = 0; i < VM_MAX_FILES; i++)
		free(v->files.paths[i]);
	for (int i = 0; i < 2; i++)
		free(v->files.subdirs[i]);
	vm_jail_release(&v->jail);
	free(v->files.dir);
	free(v);
}

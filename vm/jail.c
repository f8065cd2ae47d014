/* jail.c — the jail every QEMU runs in (docs/security.md), in the spirit of
 * Firecracker's jailer: a uid/gid of its own from a slot of the configured
 * range (a lock file plus the slot's cgroup, so two live VMs never share
 * one) and a cgroup with CPU, memory, pids and I/O limits (v2 or v1), both
 * in cgroup.c; its own mount namespace whose root (a tmpfs, pivot_root'ed
 * into) holds only /usr and that VM's files, its own pid, IPC and (without
 * network) network namespace, no capabilities and no_new_privs.  The parent prepares (slot,
 * cgroup, ownership); the child, between fork and exec, enters it. */
#include <grp.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/capability.h>

#include "vm/internal.h"

static bool unconfined;

void vm_set_unconfined(bool on)
{
	unconfined = on;
}

bool vm_unconfined(void)
{
	const char *e = getenv("KILN_UNCONFINED");

	return unconfined || (e && *e && strcmp(e, "0") != 0);
}

int vm_jail_prepare(struct vm_jail *j, unsigned cpus, unsigned memory_mib, kiln_error **err)
{
	if (geteuid() != 0)
		return kiln_err(err, KILN_E_USAGE,
				"the VM jail needs root (namespaces, cgroups, a uid per VM): run kiln as root, or "
				"pass --unconfined to run VMs without it");
	if (vm_jail_slot_take(j, cpus, memory_mib, err) < 0) {
		kiln_error_wrap(err, "jail");
		vm_jail_release(j);
		return -1;
	}
	j->on = true;
	return 0;
}

void vm_jail_add(struct vm_jail *j, const char *path, bool writable)
{
	kiln_strv_push(writable ? &j->rw : &j->ro, path);
}

void vm_jail_release(struct vm_jail *j)
{
	if (j->slot_fd == 0 && !j->on && !j->root)
		return; /* never prepared (zeroed) */
	if (j->slot_fd >= 0)
		close(j->slot_fd);
	j->slot_fd = -1;
	vm_jail_free_cgroups(j);
	kiln_strv_free(&j->ro);
	kiln_strv_free(&j->rw);
	free(j->root);
	j->root = NULL;
}

int vm_jail_own(const struct vm_jail *j, const char *path, kiln_error **err)
{
	if (j && j->on && chown(path, j->uid, j->gid) < 0)
		return kiln_err_errno(err, errno, "jail: chown %s", path);
	return 0;
}

void vm_net_release(uid_t uid)
{
	unsigned slot;

	if (vm_jail_uid_slot(uid, &slot))
		vm_netfw_clear(slot, uid);
}

/* ---- the child: entering the jail (no allocation-free guarantees needed:
 * this is a fork of a single-threaded kiln) ---------------------------------- */

static void child_fail(int errfd, const char *what, const char *path)
{
	int e = errno;

	dprintf(errfd, "jail: %s%s%s: %s", what, path ? " " : "", path ? path : "", strerror(e));
	_exit(126);
}

static void mkdirs(const char *path, int errfd)
{
	char buf[4096];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			child_fail(errfd, "mkdir", buf);
		*p = '/';
	}
}

/* Bind path at the same place under root (read-only unless writable). */
static void bind_one(const char *root, const char *path, bool writable, int errfd)
{
	char target[4096];
	struct stat st;

	if (stat(path, &st) < 0)
		child_fail(errfd, "stat", path);
	snprintf(target, sizeof(target), "%s%s", root, path);
	mkdirs(target, errfd);
	if (S_ISDIR(st.st_mode)) {
		if (mkdir(target, 0755) < 0 && errno != EEXIST)
			child_fail(errfd, "mkdir", target);
	} else {
		int fd = open(target, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			child_fail(errfd, "create", target);
		close(fd);
	}
	if (mount(path, target, NULL, MS_BIND, NULL) < 0)
		child_fail(errfd, "bind mount", path);
	unsigned long fl = MS_REMOUNT | MS_BIND | MS_NOSUID | (writable ? 0 : MS_RDONLY);
	if (!S_ISCHR(st.st_mode))
		fl |= MS_NODEV;
	if (mount(NULL, target, NULL, fl, NULL) < 0)
		child_fail(errfd, "remount", path);
}

/* /dev/kvm as a node of the jail's own, the VM's uid's, 0600 (as
 * Firecracker's jailer makes it): the host's node is root's (0600, or 0660
 * group kvm), and the VM's uid is in no group, so a bind of it could not be
 * opened.  The jail's tmpfs root then allows device nodes: only the ones kiln
 * makes here, since QEMU cannot make any (no CAP_MKNOD, a read-only root). */
static void kvm_node(const char *root, const struct vm_jail *j, int errfd)
{
	char target[4096];
	struct stat st;

	if (stat("/dev/kvm", &st) < 0 || !S_ISCHR(st.st_mode))
		child_fail(errfd, "stat", "/dev/kvm");
	snprintf(target, sizeof(target), "%s/dev/kvm", root);
	mkdirs(target, errfd);
	if (mknod(target, S_IFCHR | 0600, st.st_rdev) < 0)
		child_fail(errfd, "mknod", target);
	if (chown(target, j->uid, j->gid) < 0)
		child_fail(errfd, "chown", target);
}

static int by_length(const void *a, const void *b)
{
	size_t x = strlen(*(char *const *)a), y = strlen(*(char *const *)b);
	return x < y ? -1 : x > y;
}

static void drop_privileges(const struct vm_jail *j, int errfd)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct d[2];

	for (int c = 0; c <= 63; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			child_fail(errfd, "dropping the capability bounding set", NULL);
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	if (setgroups(0, NULL) < 0 || setresgid(j->gid, j->gid, j->gid) < 0 || setresuid(j->uid, j->uid, j->uid) < 0)
		child_fail(errfd, "switching to the VM's uid/gid", NULL);
	memset(d, 0, sizeof(d));
	if (syscall(SYS_capset, &h, d) < 0)
		child_fail(errfd, "capset", NULL);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		child_fail(errfd, "no_new_privs", NULL);
}

/* The RAM copy: data extents only (the file is mostly holes), into the
 * file the parent made. */
static void copy_ram(const struct vm_jail *j, int errfd)
{
	int in = open(j->copy_from, O_RDONLY | O_CLOEXEC), out = open(j->copy_to, O_WRONLY | O_CLOEXEC);
	static char buf[1 << 20];
	struct stat st;

	if (in < 0 || fstat(in, &st) < 0)
		child_fail(errfd, "opening the snapshot's RAM", j->copy_from);
	if (out < 0 || ftruncate(out, st.st_size) < 0)
		child_fail(errfd, "creating the RAM copy", j->copy_to);
	if (kiln_copy_data(in, out, st.st_size, buf, sizeof(buf)) < 0)
		child_fail(errfd, "copying the snapshot's RAM", j->copy_from);
	close(in);
	close(out);
}

pid_t vm_jail_copy_start(const struct vm_jail *j, int *done_fd, kiln_error **err)
{
	struct stat st;
	int efd[2];
	pid_t pid;

	/* sized before QEMU maps it (it would size an empty file itself) */
	if (stat(j->copy_from, &st) < 0 || truncate(j->copy_to, st.st_size) < 0)
		return kiln_err_errno(err, errno, "jail: sizing the RAM copy %s", j->copy_to);
	if (pipe2(efd, O_CLOEXEC) < 0)
		return kiln_err_errno(err, errno, "jail: pipe");
	/* the memory controller's cgroup only: its pages are charged there */
	struct vm_jail_joined cg;
	if ((pid = vm_jail_fork(j, 0, true, &cg)) < 0) {
		kiln_err_errno(err, errno, "jail: fork for the RAM copy into its cgroup %s", j->cg[0]);
		close(efd[0]);
		close(efd[1]);
		return -1;
	}
	if (pid == 0) {
		close(efd[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (cg.failed)
			child_fail(efd[1], "joining cgroup", cg.failed);
		copy_ram(j, efd[1]);
		_exit(0);
	}
	close(efd[1]);
	*done_fd = efd[0];
	return pid;
}

int vm_jail_copy_wait(pid_t pid, int done_fd, kiln_error **err)
{
	char why[512];
	/* the copier's report of what failed, or EOF when it is done */
	ssize_t n = kiln_read_full(done_fd, why, sizeof(why) - 1);
	size_t got = n > 0 ? (size_t)n : 0;
	int status = 0;

	why[got] = '\0';
	close(done_fd);
	kiln_waitpid(pid, &status, 0);
	if (got > 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return kiln_err(err, KILN_E_GENERIC, "the RAM copy failed: %s", got ? why : "killed");
	return 0;
}

void vm_jail_enter(const struct vm_jail *j, const struct vm_jail_joined *cg, int errfd)
{
	static const char *const devs[] = { "/dev/null", "/dev/zero", "/dev/urandom" };
	static const char *const top[] = { "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin" };
	const char *root = j->root;
	char path[4096];
	kiln_strv binds = KILN_STRV_INIT;

	/* in the cgroup since vm_jail_fork: whatever this becomes is limited
	 * and holds the slot */
	if (cg->failed)
		child_fail(errfd, "joining cgroup", cg->failed);
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		child_fail(errfd, "making mounts private", NULL);
	if (mount("kiln-jail", root, "tmpfs", MS_NOSUID | (j->kvm ? 0 : MS_NODEV), "size=1m,mode=0755") < 0)
		child_fail(errfd, "mounting the jail's root on", root);
	/* the host's programs and libraries (QEMU, its firmware), read-only */
	bind_one(root, "/usr", false, errfd);
	for (size_t i = 0; i < sizeof(top) / sizeof(top[0]); i++) {
		char link[4096];
		ssize_t n = readlink(top[i], link, sizeof(link) - 1);
		snprintf(path, sizeof(path), "%s%s", root, top[i]);
		if (n > 0) {
			link[n] = '\0';
			if (symlink(link, path) < 0)
				child_fail(errfd, "symlink", path);
		} else if (access(top[i], F_OK) == 0) {
			bind_one(root, top[i], false, errfd);
		}
	}
	if (access("/etc/ld.so.cache", R_OK) == 0)
		bind_one(root, "/etc/ld.so.cache", false, errfd);
	/* a VM with user-mode network (builder VMs): slirp's DNS forwarder reads it */
	if (!j->netns && access("/etc/resolv.conf", R_OK) == 0)
		bind_one(root, "/etc/resolv.conf", false, errfd);
	for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++)
		bind_one(root, devs[i], true, errfd);
	if (j->kvm)
		kvm_node(root, j, errfd);
	/* the VM's own files; parents before what lies inside them */
	for (size_t i = 0; i < j->ro.n; i++)
		kiln_strv_push(&binds, j->ro.v[i]);
	for (size_t i = 0; i < j->rw.n; i++)
		kiln_strv_push_owned(&binds, kiln_xasprintf("+%s", j->rw.v[i]));
	qsort(binds.v, binds.n, sizeof(binds.v[0]), by_length);
	for (size_t i = 0; i < binds.n; i++) {
		bool w = binds.v[i][0] == '+';
		bind_one(root, binds.v[i] + w, w, errfd);
	}
	snprintf(path, sizeof(path), "%s/.old", root);
	if (mkdir(path, 0700) < 0 || syscall(SYS_pivot_root, root, path) < 0)
		child_fail(errfd, "pivot_root into", root);
	if (chdir("/") < 0 || umount2("/.old", MNT_DETACH) < 0 || rmdir("/.old") < 0)
		child_fail(errfd, "leaving the host's root", NULL);
	if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | (j->kvm ? 0 : MS_NODEV), NULL) < 0)
		child_fail(errfd, "making the jail's root read-only", NULL);
	/* the slot's lock stays held by QEMU for its life */
	int fl = fcntl(j->slot_fd, F_GETFD);
	if (fl < 0 || fcntl(j->slot_fd, F_SETFD, fl & ~FD_CLOEXEC) < 0)
		child_fail(errfd, "keeping the slot lock", NULL);
	drop_privileges(j, errfd);
}

int vm_jail_clone_flags(const struct vm_jail *j)
{
	return CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | (j->netns ? CLONE_NEWNET : 0);
}

int vm_jail_setup(struct vm_jail *j, const char *dir, const char *writable_dir, unsigned cpus, unsigned memory_mib,
		  bool host_net, const struct vm_net_opts *egress, enum vm_accel accel, kiln_error **err)
{
	static bool said;

	memset(j, 0, sizeof(*j));
	j->slot_fd = -1;
	if (vm_unconfined()) {
		if (egress && host_net && (egress->n_rules || egress->mode == VM_NET_NONE))
			return kiln_err(err, KILN_E_USAGE, "egress rules (and published ports without outbound network) "
					"need the jail: they hold QEMU's own uid, and unconfined QEMU runs as kiln's");
		if (!said)
			kiln_warn("unconfined: VMs run without their jail (no own uid, namespaces, cgroup or seccomp)%s",
				  egress && host_net ? "; the sandbox's egress is not filtered" : "");
		said = true;
		return 0;
	}
	if (vm_jail_prepare(j, cpus, memory_mib, err) < 0)
		return -1;
	j->root = kiln_path_join(dir, "jail");
	j->netns = !host_net;
	/* the slot's egress chain is this VM's before it runs (a previous VM
	 * of the slot may have left its own) */
	if (host_net && egress && vm_netfw_apply(j->slot, j->uid, egress, err) < 0)
		goto fail;
	if (host_net && !egress)
		vm_netfw_clear(j->slot, j->uid);
	j->kvm = accel == VM_ACCEL_KVM;
	if (mkdir(j->root, 0755) < 0 && errno != EEXIST) {
		kiln_err_errno(err, errno, "jail: mkdir %s", j->root);
		goto fail;
	}
	/* QEMU's files: reachable by its uid and root only (dir is 0700) */
	if (chmod(writable_dir, 0700) < 0 || vm_jail_own(j, writable_dir, err) < 0) {
		if (err && !*err)
			kiln_err_errno(err, errno, "jail: chmod %s", writable_dir);
		goto fail;
	}
	vm_jail_add(j, writable_dir, true);
	return 0;
fail:
	vm_jail_release(j);
	j->on = false;
	return -1;
}

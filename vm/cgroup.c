/* cgroup.c — the cgroup and the uid slot of a jailed VM (docs/security.md):
 * a slot is a lock file plus the slot's cgroup kiln/vm-N (v2, or one per v1
 * controller), with the VM's CPU, memory, pids and I/O limits.  Apart from
 * jail.c's namespaces so it can be driven alone (tests/guest/cgroup_probe.c
 * runs it on a real cgroup v2 hierarchy inside a guest, t0925). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <linux/sched.h>

#include "vm/internal.h"

#define CGROUP2_MAGIC 0x63677270
#define DEFAULT_UID_BASE 2000000u
#define DEFAULT_SLOTS 4096u
#define SLOT_DIR "/run/kiln/slots"
#define QEMU_OVERHEAD_MIB 384u /* QEMU's own memory beside guest RAM: TCG code cache, devices */
_Static_assert(QEMU_OVERHEAD_MIB >= VM_TCG_TB_MIB + 128u, "the cgroup holds the TCG cache and 128 MiB more");
#define PIDS_MAX 256           /* QEMU's threads; a guest's processes are not host pids */

static unsigned env_uint(const char *name, unsigned def)
{
	const char *e = getenv(name);
	char *end;
	unsigned long v;

	if (!e || !*e)
		return def;
	v = strtoul(e, &end, 10);
	return *end || v == 0 || v > 0x7fffffffUL ? def : (unsigned)v;
}

/* ---- cgroups ---------------------------------------------------------- */

static int write_str(const char *dir, const char *file, const char *val, bool optional, kiln_error **err)
{
	char *p = kiln_path_join(dir, file);
	int fd = open(p, O_WRONLY | O_CLOEXEC), rc = 0;

	if (fd < 0 || write(fd, val, strlen(val)) < 0) {
		if (!optional || (errno != ENOENT && errno != EACCES))
			rc = kiln_err_errno(err, errno, "cgroup: writing '%s' to %s", val, p);
	}
	if (fd >= 0)
		close(fd);
	free(p);
	return rc;
}

/* Whether the space-separated list holds word. */
static bool has_word(const char *list, const char *word)
{
	size_t n = strlen(word);

	for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' ' || p[n] == '\n'))
			return true;
	return false;
}

/* A cgroup file's first line ("" when unreadable). */
static void read_line(const char *dir, const char *file, char *buf, size_t size)
{
	char *p = kiln_path_join(dir, file);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, size - 1) : 0;

	buf[n > 0 ? n : 0] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	if (fd >= 0)
		close(fd);
	free(p);
}

/* v2: turn on each of the n controllers in want for dir's children that is
 * not on yet, one write each: a write naming one controller dir does not
 * offer fails whole, and a write that changes nothing is skipped (a change
 * under a populated subtree takes the cgroup core's global lock).
 * required: one that cannot be enabled is an error naming it. */
static int cg_enable(const char *dir, const char *const *want, size_t n, bool required, kiln_error **err)
{
	char on[512], avail[512], v[32];

	read_line(dir, "cgroup.subtree_control", on, sizeof(on));
	for (size_t i = 0; i < n; i++) {
		if (has_word(on, want[i]))
			continue;
		char *p = kiln_path_join(dir, "cgroup.subtree_control");
		int fd = open(p, O_WRONLY | O_CLOEXEC), e = 0;
		snprintf(v, sizeof(v), "+%s", want[i]);
		if (fd < 0 || write(fd, v, strlen(v)) < 0)
			e = errno;
		if (fd >= 0)
			close(fd);
		free(p);
		if (e && required) {
			read_line(dir, "cgroup.controllers", avail, sizeof(avail));
			return kiln_err(err, KILN_E_GENERIC,
					"cgroup: cannot enable the %s controller for the VMs under %s: %s (the controllers "
					"offered there: '%s'); each VM's CPU, memory and processes are limited with cpu, "
					"memory and pids: enable %s in the parent's cgroup.subtree_control",
					want[i], dir, strerror(e), avail, want[i]);
		}
	}
	return 0;
}

/* Whether a cgroup directory holds a process (absent: no). */
static bool cg_busy(const char *dir)
{
	char *p = kiln_path_join(dir, "cgroup.procs"), buf[16];
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf)) : 0;

	if (fd >= 0)
		close(fd);
	free(p);
	return n > 0;
}

/* The path of this process's cgroup in the v1 hierarchy of controller c,
 * as seen through its mount (mountinfo's root subtracted). */
static char *v1_dir(const char *c)
{
	char *cg = NULL, *mi = NULL, *own = NULL, *out = NULL;
	size_t len = 0;
	kiln_error *e = NULL;

	if (kiln_read_file("/proc/self/cgroup", &cg, &len, 65536, &e) < 0)
		goto out;
	char *s1, *s2;
	for (char *line = strtok_r(cg, "\n", &s1); line && !own; line = strtok_r(NULL, "\n", &s1)) {
		char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
		if (!b)
			continue;
		*b = '\0';
		for (char *tok = strtok_r(a + 1, ",", &s2); tok; tok = strtok_r(NULL, ",", &s2))
			if (strcmp(tok, c) == 0)
				own = kiln_xstrdup(b + 1);
		if (own)
			break;
	}
	if (!own || kiln_read_file("/proc/self/mountinfo", &mi, &len, 1 << 20, &e) < 0)
		goto out;
	for (char *line = strtok_r(mi, "\n", &s1); line && !out; line = strtok_r(NULL, "\n", &s1)) {
		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ... - FSTYPE SOURCE SUPEROPTS */
		char root[512], mnt[512], fstype[32], super[512];
		char *dash = strstr(line, " - ");
		if (!dash || sscanf(line, "%*s %*s %*s %511s %511s", root, mnt) != 2 ||
		    sscanf(dash + 3, "%31s %*s %511s", fstype, super) != 2 || strcmp(fstype, "cgroup") != 0)
			continue;
		bool has = false;
		for (char *tok = strtok_r(super, ",", &s2); tok; tok = strtok_r(NULL, ",", &s2))
			has |= strcmp(tok, c) == 0;
		if (!has)
			continue;
		const char *rel = own;
		size_t rl = strlen(root);
		if (strcmp(root, "/") != 0 && strncmp(own, root, rl) == 0 && (own[rl] == '/' || own[rl] == '\0'))
			rel = own + rl;
		out = kiln_xasprintf("%s%s", mnt, strcmp(rel, "/") == 0 ? "" : rel);
	}
out:
	kiln_error_free(e);
	free(cg);
	free(mi);
	free(own);
	return out;
}

/* The VMs' parent cgroup: "kiln", or KILN_CGROUP_PARENT when that is one
 * plain name (a benchmark or a second installation keeps its VMs apart:
 * the parent's CPU weight is shared by all VMs under it). */
static const char *cg_parent(void)
{
	const char *e = getenv("KILN_CGROUP_PARENT");

	if (!e || !*e || e[0] == '.' || strlen(e) > 64 || strspn(e, "abcdefghijklmnopqrstuvwxyz"
				"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != strlen(e))
		return "kiln";
	return e;
}

/* The slot's cgroup directories, into j->cg; created (or reused) when create. */
static int cg_paths(struct vm_jail *j, unsigned slot, bool create, kiln_error **err)
{
	struct statfs sf;
	const char *pname = cg_parent();

	j->n_cg = 0;
	if (statfs("/sys/fs/cgroup", &sf) == 0 && sf.f_type == CGROUP2_MAGIC) {
		/* v2: a leaf under /sys/fs/cgroup/kiln with the controllers on */
		char *parent = kiln_path_join("/sys/fs/cgroup", pname);
		j->cg_v2 = true;
		j->cg[j->n_cg++] = kiln_xasprintf("%s/vm-%u", parent, slot);
		if (create && mkdir(parent, 0755) < 0 && errno != EEXIST) {
			kiln_err_errno(err, errno, "cgroup: mkdir %s", parent);
			free(parent);
			return -1;
		}
		if (create) {
			static const char *const all[] = { "cpu", "memory", "pids", "io" };
			cg_enable("/sys/fs/cgroup", all, 4, false, NULL);
			int rc = cg_enable(parent, all, 3, true, err);
			cg_enable(parent, all + 3, 1, false, NULL); /* I/O weight: best effort */
			if (rc < 0) {
				free(parent);
				return -1;
			}
		}
		free(parent);
		if (!create)
			return 0;
	} else {
		static const char *const ctl[] = { "memory", "cpu", "pids", "blkio" };
		j->cg_v2 = false;
		for (size_t i = 0; i < sizeof(ctl) / sizeof(ctl[0]); i++) {
			char *base = v1_dir(ctl[i]);
			if (base == NULL) {
				if (strcmp(ctl[i], "blkio") == 0)
					continue; /* I/O weight is best effort */
				return kiln_err(err, KILN_E_GENERIC,
						"no cgroup %s controller (neither cgroup v2 nor a v1 %s hierarchy is "
						"mounted under /sys/fs/cgroup)", ctl[i], ctl[i]);
			}
			char *parent = kiln_path_join(base, pname);
			free(base);
			if (create && mkdir(parent, 0755) < 0 && errno != EEXIST) {
				kiln_err_errno(err, errno, "cgroup: mkdir %s", parent);
				free(parent);
				return -1;
			}
			j->cg[j->n_cg++] = kiln_xasprintf("%s/vm-%u", parent, slot);
			free(parent);
		}
	}
	for (size_t i = 0; create && i < j->n_cg; i++)
		if (mkdir(j->cg[i], 0755) < 0 && errno != EEXIST)
			return kiln_err_errno(err, errno, "cgroup: mkdir %s", j->cg[i]);
	return 0;
}

static int cg_limits(const struct vm_jail *j, unsigned cpus, unsigned memory_mib, kiln_error **err)
{
	/* the vCPUs, and half a CPU for QEMU's own threads (main loop, I/O) */
	unsigned long long quota = (unsigned long long)cpus * 100000ull + 50000ull;
	unsigned long long mem = ((unsigned long long)memory_mib + QEMU_OVERHEAD_MIB) << 20;
	char v[64];

	for (size_t i = 0; i < j->n_cg; i++) {
		const char *d = j->cg[i];
		if (j->cg_v2) {
			snprintf(v, sizeof(v), "%llu 100000", quota);
			if (write_str(d, "cpu.max", v, false, err) < 0)
				return -1;
			snprintf(v, sizeof(v), "%llu", mem);
			if (write_str(d, "memory.max", v, false, err) < 0 ||
			    write_str(d, "memory.oom.group", "1", false, err) < 0)
				return -1;
			write_str(d, "memory.swap.max", "0", true, NULL);
			snprintf(v, sizeof(v), "%d", PIDS_MAX);
			if (write_str(d, "pids.max", v, false, err) < 0)
				return -1;
			write_str(d, "io.weight", "default 50", true, NULL);
			continue;
		}
		if (strstr(d, "/memory/")) {
			/* v1 refuses a memory limit above the memory+swap one (EINVAL), and a
			 * reused slot's cgroup may still hold a smaller VM's pair: lift
			 * memsw first, then set both */
			snprintf(v, sizeof(v), "%llu", mem);
			write_str(d, "memory.memsw.limit_in_bytes", "-1", true, NULL);
			if (write_str(d, "memory.limit_in_bytes", v, false, err) < 0)
				return -1;
			write_str(d, "memory.memsw.limit_in_bytes", v, true, NULL);
		} else if (strstr(d, "/cpu/") || strstr(d, "/cpu,")) {
			snprintf(v, sizeof(v), "%llu", quota);
			if (write_str(d, "cpu.cfs_period_us", "100000", false, err) < 0 ||
			    write_str(d, "cpu.cfs_quota_us", v, false, err) < 0)
				return -1;
		} else if (strstr(d, "/pids/")) {
			snprintf(v, sizeof(v), "%d", PIDS_MAX);
			if (write_str(d, "pids.max", v, false, err) < 0)
				return -1;
		} else if (strstr(d, "/blkio/")) {
			/* the weight exists only under a proportional I/O scheduler */
			write_str(d, "blkio.weight", "100", true, NULL);
			write_str(d, "blkio.bfq.weight", "100", true, NULL);
		}
	}
	return 0;
}

/* ---- slots --------------------------------------------------------------- */

/* A slot is free when its lock can be taken and its cgroup holds no process
 * (a QEMU that closed its copy of the lock is still in its cgroup). */
static int take_slot(struct vm_jail *j, kiln_error **err)
{
	unsigned n = env_uint("KILN_JAIL_SLOTS", DEFAULT_SLOTS), start;

	if (kiln_mkdir_p(SLOT_DIR, 0700, err) < 0)
		return kiln_error_wrap(err, "jail: the uid slot locks");
	start = (unsigned)getpid() % n;
	for (unsigned k = 0; k < n; k++) {
		unsigned s = (start + k) % n;
		char path[64];
		snprintf(path, sizeof(path), SLOT_DIR "/%u", s);
		int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			return kiln_err_errno(err, errno, "jail: %s", path);
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			close(fd);
			continue;
		}
		if (cg_paths(j, s, true, err) < 0) {
			close(fd);
			return -1;
		}
		bool busy = false;
		for (size_t i = 0; i < j->n_cg; i++)
			busy |= cg_busy(j->cg[i]);
		if (busy) {
			close(fd);
			vm_jail_free_cgroups(j);
			continue;
		}
		j->slot = s;
		j->slot_fd = fd;
		j->uid = env_uint("KILN_JAIL_UID_BASE", DEFAULT_UID_BASE) + s;
		j->gid = j->uid;
		return 0;
	}
	return kiln_err(err, KILN_E_LIMIT, "jail: all %u uid slots are in use (KILN_JAIL_SLOTS)", n);
}

void vm_jail_free_cgroups(struct vm_jail *j)
{
	for (size_t i = 0; i < j->n_cg; i++)
		free(j->cg[i]);
	j->n_cg = 0;
}

/* Slot s's lock taken when no VM holds the slot (the lock free and its
 * cgroups empty): the fd, its cgroup paths in j; else -1. */
static int slot_claim_free(unsigned s, bool create, struct vm_jail *j)
{
	char path[64];
	kiln_error *e = NULL;

	snprintf(path, sizeof(path), SLOT_DIR "/%u", s);
	int fd = open(path, O_RDONLY | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
	if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0 || cg_paths(j, s, false, &e) < 0) {
		if (fd >= 0)
			close(fd);
		kiln_error_free(e);
		return -1;
	}
	for (size_t i = 0; i < j->n_cg; i++)
		if (cg_busy(j->cg[i])) {
			vm_jail_free_cgroups(j);
			close(fd);
			return -1;
		}
	return fd;
}

int vm_jail_gc(void)
{
	int n = 0;
	struct vm_jail j = { .slot_fd = -1 };
	DIR *d = opendir(SLOT_DIR);
	struct dirent *de;
	unsigned *chains = NULL;
	size_t n_chains = 0;
	kiln_error *e = NULL;

	/* empty cgroups of slots no VM holds */
	while (d && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		int fd = slot_claim_free((unsigned)atoi(de->d_name), false, &j);
		if (fd < 0)
			continue;
		for (size_t i = 0; i < j.n_cg; i++)
			if (access(j.cg[i], F_OK) == 0)
				n += rmdir(j.cg[i]) == 0;
		vm_jail_free_cgroups(&j);
		close(fd);
	}
	if (d)
		closedir(d);
	/* and their egress chains: a kiln killed between writing a sandbox's
	 * chain and recording the sandbox left one nothing else removes (a
	 * slot's next VM would rewrite it; until then it is an orphan) */
	if (vm_netfw_slots(&chains, &n_chains, &e) < 0)
		kiln_debug("jail gc: %s", kiln_error_message(e));
	for (size_t k = 0; k < n_chains; k++) {
		int fd = slot_claim_free(chains[k], true, &j);
		if (fd < 0)
			continue;
		kiln_error_free(e);
		e = NULL;
		if (vm_netfw_remove(chains[k], &e) < 0)
			kiln_warn("jail gc: %s", kiln_error_message(e));
		else
			n++;
		vm_jail_free_cgroups(&j);
		close(fd);
	}
	kiln_error_free(e);
	free(chains);
	return n;
}

void vm_jail_remove_cgroups(const struct vm_jail *j)
{
	for (size_t i = 0; i < j->n_cg; i++)
		rmdir(j->cg[i]); /* fails (EBUSY) while a process is in it */
}


int vm_jail_slot_take(struct vm_jail *j, unsigned cpus, unsigned memory_mib, kiln_error **err)
{
	j->slot_fd = -1;
	j->n_cg = 0;
	if (take_slot(j, err) < 0)
		return -1;
	if (cg_limits(j, cpus, memory_mib, err) < 0) {
		close(j->slot_fd);
		j->slot_fd = -1;
		vm_jail_free_cgroups(j);
		return -1;
	}
	return 0;
}

/* "0" to file in each of j's cgroup directories: the writing task moves. */
static const char *cg_join(const struct vm_jail *j, bool memory_only, const char *file)
{
	char path[4096];

	for (size_t i = 0; i < j->n_cg; i++) {
		if (memory_only && !j->cg_v2 && !strstr(j->cg[i], "/memory/"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", j->cg[i], file);
		int fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, "0", 1) != 1) {
			int e = errno;
			if (fd >= 0)
				close(fd);
			errno = e;
			return j->cg[i];
		}
		close(fd);
	}
	return NULL;
}

/* Joining without the global lock.  A write of a pid to cgroup.procs (v1
 * or v2) takes cgroup_threadgroup_rwsem for writing, and that waits for an
 * RCU grace period (12-19 ms for a VM's four v1 joins, measured on this
 * project's hosts).  Two ways around it:
 *  - v2: clone3(CLONE_INTO_CGROUP) (Linux 5.7) makes the child in its
 *    cgroup: no migration at all.  Kernels or seccomp profiles without it
 *    (ENOSYS; EINVAL before 5.7; E2BIG) fall back to cgroup.procs;
 *  - v1: the child writes "0" to each controller's tasks file: a thread
 *    moving itself skips the lock (Linux 6.0, "cgroup: Optimize single
 *    thread migration"; older kernels take it, still correct), and right
 *    after fork the child is its process's only thread, so the process
 *    moves whole; QEMU's threads are made later, in it. */
pid_t vm_jail_fork(const struct vm_jail *j, int ns_flags, bool memory_only, struct vm_jail_joined *cg)
{
	pid_t pid;

	cg->failed = NULL;
	cg->how = j->cg_v2 ? VM_CG_BORN : VM_CG_THREAD;
	if (j->cg_v2) {
		int fd = open(j->cg[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			return -1;
		struct clone_args a;
		memset(&a, 0, sizeof(a));
		a.flags = (unsigned long long)(unsigned)ns_flags | CLONE_INTO_CGROUP;
		a.exit_signal = SIGCHLD;
		a.cgroup = (unsigned long long)fd;
		pid = (pid_t)syscall(SYS_clone3, &a, sizeof(a));
		int e = errno;
		close(fd);
		if (pid >= 0 || (e != ENOSYS && e != EINVAL && e != E2BIG)) {
			errno = e;
			return pid;
		}
		cg->how = VM_CG_PROCS;
	}
	/* a plain fork keeps glibc's own fork handling where no namespace is asked */
	pid = ns_flags ? (pid_t)syscall(SYS_clone, SIGCHLD | ns_flags, NULL, NULL, NULL, NULL) : fork();
	if (pid == 0)
		cg->failed = cg_join(j, memory_only, cg->how == VM_CG_THREAD ? "tasks" : "cgroup.procs");
	return pid;
}

bool vm_jail_uid_slot(uid_t uid, unsigned *slot)
{
	unsigned base = env_uint("KILN_JAIL_UID_BASE", DEFAULT_UID_BASE), n = env_uint("KILN_JAIL_SLOTS", DEFAULT_SLOTS);

	if (uid < base || uid - base >= n)
		return false;
	*slot = uid - base;
	return true;
}

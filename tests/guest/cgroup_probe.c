/* cgroup_probe.c — drives kiln's cgroup code (vm/cgroup.c, the functions a
 * jailed VM's start calls) on a real cgroup v2 hierarchy: run as root inside
 * a guest whose kernel has cgroups, with cgroup2 mounted on /sys/fs/cgroup
 * (t0925).  Prints one "ok - NAME" / "not ok - NAME" line per check and
 * "probe: done" at the end; processes stand in for QEMU. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vm/internal.h"

#define CGROUP2_MAGIC 0x63677270
#define HOG_MIB 640 /* more than the limit below (16 + 384 MiB), less than the guest's RAM */
#define BOMB_MAX 2000

static int failed;

static void check(bool good, const char *name, const char *detail)
{
	printf("%s - %s%s%s\n", good ? "ok" : "not ok", name, good || !detail ? "" : ": ", good || !detail ? "" : detail);
	fflush(stdout);
	failed += !good;
}

/* The contents of a file, trailing newlines cut ("" when unreadable). */
static char *read_text(const char *path)
{
	char *data = NULL;
	size_t len = 0;
	kiln_error *e = NULL;

	if (kiln_read_file(path, &data, &len, 1 << 16, &e) < 0) {
		kiln_error_free(e);
		return kiln_xstrdup("");
	}
	while (len > 0 && data[len - 1] == '\n')
		data[--len] = '\0';
	return data;
}

static char *cg_read(const char *dir, const char *file)
{
	char *p = kiln_path_join(dir, file), *data = read_text(p);

	free(p);
	return data;
}

static int cg_write(const char *dir, const char *file, const char *val)
{
	char *p = kiln_path_join(dir, file);
	FILE *f = fopen(p, "w");
	int rc = f && fputs(val, f) >= 0 ? 0 : -1;

	if (f && fclose(f) != 0)
		rc = -1;
	free(p);
	return rc;
}

/* Whether the space-separated list holds word. */
static bool has_word(const char *list, const char *word)
{
	size_t n = strlen(word);

	for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
		if ((p == list || p[-1] == ' ' || p[-1] == '\n') && (p[n] == '\0' || p[n] == ' ' || p[n] == '\n'))
			return true;
	return false;
}

/* The number after "key " in a flat-keyed file (memory.events, pids.events). */
static long long cg_key(const char *dir, const char *file, const char *key)
{
	char *s = cg_read(dir, file), *p = s;
	long long v = -1;
	size_t n = strlen(key);

	for (; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, key, n) == 0 && p[n] == ' ')
			v = atoll(p + n + 1);
	free(s);
	return v;
}

static int last_how; /* how in_cgroup's last child joined (vm_jail_joined) */

/* A child made in j's cgroup by vm_jail_fork, as QEMU's is, that says so on
 * the pipe, then runs fn (NULL: sleeps until killed). */
static pid_t in_cgroup(const struct vm_jail *j, void (*fn)(int wfd), int *rfd)
{
	struct vm_jail_joined cg;
	int p[2];
	pid_t pid;

	if (pipe(p) < 0)
		return -1;
	pid = vm_jail_fork(j, 0, false, &cg);
	if (pid == 0) {
		/* none of the probe's slot locks (QEMU inherits only its own) */
		for (int fd = 3; fd < 1024; fd++)
			if (fd != p[1])
				close(fd);
		char how = cg.failed ? 'E' : (char)('0' + cg.how);
		if (write(p[1], &how, 1) != 1 || cg.failed)
			_exit(125);
		if (fn)
			fn(p[1]);
		for (;;)
			pause();
	}
	close(p[1]);
	char c = 0;
	if (pid < 0 || read(p[0], &c, 1) != 1 || c < '1' || c > '9') {
		if (pid > 0)
			kill(pid, SIGKILL);
		close(p[0]);
		return -1;
	}
	last_how = c - '0';
	if (rfd)
		*rfd = p[0];
	else
		close(p[0]);
	return pid;
}

/* The parent's side of a child that answers on the pipe p: what it wrote
 * (at most len - 1 bytes, "" if nothing or it never ran), once it has exited. */
static void child_answer(pid_t pid, int p[2], char *buf, size_t len)
{
	close(p[1]);
	ssize_t n = pid > 0 ? read(p[0], buf, len - 1) : -1;
	buf[n > 0 ? n : 0] = '\0';
	close(p[0]);
	if (pid > 0)
		waitpid(pid, NULL, 0);
}

/* What a child cloned with the jail's namespace flags into j's cgroup
 * reads first, before it runs anything else: its /proc/self/cgroup. */
static char *born_with_namespaces(const struct vm_jail *j, int *how)
{
	struct vm_jail_joined cg;
	char buf[256] = "";
	int p[2];
	struct vm_jail ns = *j;

	ns.netns = true;
	*how = 0;
	if (pipe(p) < 0)
		return kiln_xstrdup("pipe failed");
	pid_t pid = vm_jail_fork(j, vm_jail_clone_flags(&ns), false, &cg);
	if (pid == 0) {
		char *own = read_text("/proc/self/cgroup");
		dprintf(p[1], "%d %s", cg.failed ? 0 : (int)cg.how, own);
		_exit(0);
	}
	child_answer(pid, p, buf, sizeof(buf));
	char *sp = strchr(buf, ' ');
	if (pid < 0 || !sp)
		return kiln_xasprintf("vm_jail_fork: %s", pid < 0 ? strerror(errno) : "no answer");
	*how = atoi(buf);
	return kiln_xstrdup(sp + 1);
}

/* Touch HOG_MIB of fresh memory, then exit 0: only a limit stops it. */
static void hog(int wfd)
{
	for (int i = 0; i < HOG_MIB; i++) {
		char *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			_exit(3);
		memset(m, i | 1, 1 << 20);
	}
	_exit(0);
}

/* Fork children that wait, until a fork fails or BOMB_MAX; report the count
 * and the failing errno on the pipe. */
static void bomb(int wfd)
{
	int n = 0, e = 0;

	setpgid(0, 0);
	for (; n < BOMB_MAX; n++) {
		pid_t c = fork();
		if (c == 0) {
			for (;;)
				pause();
		}
		if (c < 0) {
			e = errno;
			break;
		}
	}
	dprintf(wfd, "%d %d\n", n, e);
	for (;;)
		pause();
}

/* waitpid with a deadline; 0 on timeout. */
static pid_t wait_for(pid_t pid, int *status, int seconds)
{
	for (int i = 0; i < seconds * 20; i++) {
		pid_t r = waitpid(pid, status, WNOHANG);
		if (r != 0)
			return r;
		usleep(50000);
	}
	return 0;
}

static void reap_all(void)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

/* cgroup.procs empty within seconds (killed processes take a moment). */
static bool empties(const char *dir, int seconds)
{
	for (int i = 0; i < seconds * 20; i++) {
		reap_all();
		char *p = cg_read(dir, "cgroup.procs");
		bool empty = *p == '\0';
		free(p);
		if (empty)
			return true;
		usleep(50000);
	}
	return false;
}

/* vm_jail_slot_take where /sys/fs/cgroup offers cpu and memory only: in a
 * mount namespace of a child's own, a cgroup whose parent enables only those
 * is bound over /sys/fs/cgroup.  Its error message, or what went wrong. */
static char *without_pids(void)
{
	static const char *const top = "/sys/fs/cgroup/probe-nopids", *const fake = "/sys/fs/cgroup/probe-nopids/root";
	char buf[1024] = "";
	int p[2];

	if (mkdir(top, 0755) < 0 || cg_write(top, "cgroup.subtree_control", "+cpu +memory") < 0 || mkdir(fake, 0755) < 0 ||
	    pipe(p) < 0)
		return kiln_xasprintf("setting up %s: %s", fake, strerror(errno));
	pid_t pid = fork();
	if (pid == 0) {
		struct vm_jail d = { .slot_fd = -1 };
		kiln_error *e = NULL;
		if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount(fake, "/sys/fs/cgroup", NULL, MS_BIND, NULL) < 0) {
			dprintf(p[1], "bind mount: %s", strerror(errno));
			_exit(1);
		}
		if (vm_jail_slot_take(&d, 1, 16, &e) == 0)
			dprintf(p[1], "slot %u taken", d.slot);
		else
			dprintf(p[1], "%s", kiln_error_message(e));
		_exit(0);
	}
	child_answer(pid, p, buf, sizeof(buf));
	/* what kiln made under the fake root, then the fake root */
	char path[256];
	for (unsigned s = 0; s < 2; s++) {
		snprintf(path, sizeof(path), "%s/kiln/vm-%u", fake, s);
		rmdir(path);
	}
	snprintf(path, sizeof(path), "%s/kiln", fake);
	rmdir(path);
	rmdir(fake);
	rmdir(top);
	return kiln_xstrdup(buf);
}

int main(void)
{
	struct vm_jail a = { .slot_fd = -1 }, b = { .slot_fd = -1 }, c = { .slot_fd = -1 };
	struct statfs sf;
	kiln_error *err = NULL;
	char buf[512], want[64];

	/* orphans of the bomb come back to the probe, which reaps them */
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	setenv("KILN_JAIL_SLOTS", "2", 1);
	check(statfs("/sys/fs/cgroup", &sf) == 0 && sf.f_type == CGROUP2_MAGIC, "the guest's /sys/fs/cgroup is cgroup v2",
	      NULL);
	char *ctl = cg_read("/sys/fs/cgroup", "cgroup.controllers");
	snprintf(buf, sizeof(buf), "root controllers: '%s'", ctl);
	check(has_word(ctl, "cpu") && has_word(ctl, "memory") && has_word(ctl, "pids") && has_word(ctl, "io"),
	      "the guest's kernel offers cpu, memory, pids and io", buf);
	free(ctl);

	/* ---- a VM's slot: cgroup under kiln's parent, controllers, limits ---- */
	int rc = vm_jail_slot_take(&a, 1, 16, &err);
	check(rc == 0, "vm_jail_slot_take: a slot and its cgroup", err ? kiln_error_message(err) : NULL);
	kiln_error_clear(&err);
	if (rc < 0)
		goto out;
	snprintf(want, sizeof(want), "/sys/fs/cgroup/kiln/vm-%u", a.slot);
	snprintf(buf, sizeof(buf), "v2=%d n=%zu first=%s", a.cg_v2, a.n_cg, a.n_cg ? a.cg[0] : "-");
	struct stat st;
	check(a.cg_v2 && a.n_cg == 1 && strcmp(a.cg[0], want) == 0 && stat(want, &st) == 0 && S_ISDIR(st.st_mode),
	      "the VM's cgroup is kiln/vm-N, one directory on v2", buf);
	char *sub = cg_read("/sys/fs/cgroup/kiln", "cgroup.subtree_control");
	snprintf(buf, sizeof(buf), "kiln/cgroup.subtree_control: '%s'", sub);
	check(has_word(sub, "cpu") && has_word(sub, "memory") && has_word(sub, "pids") && has_word(sub, "io"),
	      "kiln's parent enables cpu, memory, pids and io in subtree_control", buf);
	free(sub);
	const char *A = a.n_cg ? a.cg[0] : want;
	static const struct {
		const char *file, *value, *name;
	} lim[] = {
		{ "cpu.max", "150000 100000", "cpu.max: one vCPU and half a CPU for QEMU" },
		{ "memory.max", "419430400", "memory.max: guest RAM (16 MiB) + 384 MiB for QEMU" },
		{ "memory.oom.group", "1", "memory.oom.group: an OOM kills the whole VM" },
		{ "pids.max", "256", "pids.max: 256" },
		{ "io.weight", "default 50", "io.weight: default 50" },
	};
	for (size_t i = 0; i < sizeof(lim) / sizeof(lim[0]); i++) {
		char *v = cg_read(A, lim[i].file);
		snprintf(buf, sizeof(buf), "%s is '%s', want '%s'", lim[i].file, v, lim[i].value);
		check(strcmp(v, lim[i].value) == 0, lim[i].name, buf);
		free(v);
	}

	/* ---- a second VM gets another slot; processes move in ---- */
	rc = vm_jail_slot_take(&b, 1, 16, &err);
	snprintf(buf, sizeof(buf), "%s (slots %u, %u)", err ? kiln_error_message(err) : "", a.slot, b.slot);
	check(rc == 0 && b.slot != a.slot, "a second VM takes the other slot while the first holds its lock", buf);
	kiln_error_clear(&err);
	if (rc < 0)
		goto out;
	const char *B = b.cg[0];
	pid_t a1 = in_cgroup(&a, NULL, NULL), a2 = in_cgroup(&a, NULL, NULL), b1 = in_cgroup(&b, NULL, NULL);
	check(a1 > 0 && a2 > 0 && b1 > 0, "vm_jail_fork makes processes in the VM's cgroup", NULL);
	snprintf(buf, sizeof(buf), "joined by way %d, want %d (born)", last_how, VM_CG_BORN);
	check(last_how == VM_CG_BORN, "on v2 they are born there (clone3 CLONE_INTO_CGROUP), not moved in", buf);
	snprintf(want, sizeof(want), "0::/kiln/vm-%u", a.slot);
	snprintf(buf, sizeof(buf), "/proc/%d/cgroup", (int)a1);
	char *own = read_text(buf);
	char *procs = cg_read(A, "cgroup.procs");
	snprintf(buf, sizeof(buf), "/proc/PID/cgroup '%s', want '%s'; cgroup.procs '%s'", own, want, procs);
	bool listed = false;
	for (char *p = procs; *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p))
		listed |= atoi(p) == a1;
	check(strcmp(own, want) == 0 && listed, "the process is in kiln/vm-N (its /proc/PID/cgroup, the cgroup's procs)",
	      buf);
	free(own);
	free(procs);
	/* QEMU's own clone: the jail's namespaces (mount, pid, IPC, UTS, net) too */
	int how = 0;
	char *first = born_with_namespaces(&a, &how);
	snprintf(want, sizeof(want), "0::/kiln/vm-%u", a.slot);
	snprintf(buf, sizeof(buf), "first read '%s' (way %d), want '%s' (way %d)", first, how, want, VM_CG_BORN);
	check(strcmp(first, want) == 0 && how == VM_CG_BORN,
	      "a child cloned with the jail's namespaces is in kiln/vm-N from its first instruction", buf);
	free(first);

	/* ---- a memory hog: OOM-killed with its VM, the sibling VM lives ---- */
	int status = 0;
	pid_t h = in_cgroup(&a, hog, NULL);
	pid_t r = h > 0 ? wait_for(h, &status, 120) : -1;
	snprintf(buf, sizeof(buf), "hog %s (status %#x)",
		 r == 0 ? "still running after 120 s" : WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "exited", status);
	check(r == h && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
	      "a memory hog in the VM's cgroup is killed (SIGKILL) at memory.max", buf);
	long long ooms = cg_key(A, "memory.events", "oom_kill");
	snprintf(buf, sizeof(buf), "memory.events oom_kill %lld", ooms);
	check(ooms >= 1, "the kill is the cgroup's OOM killer's (memory.events oom_kill)", buf);
	int s1 = 0, s2 = 0;
	pid_t r1 = wait_for(a1, &s1, 10), r2 = wait_for(a2, &s2, 10);
	check(r1 == a1 && r2 == a2 && WIFSIGNALED(s1) && WIFSIGNALED(s2),
	      "memory.oom.group: the rest of that VM's processes go with it", NULL);
	check(kill(b1, 0) == 0 && waitpid(b1, &status, WNOHANG) == 0, "the sibling VM's process stays alive", NULL);
	check(empties(A, 10), "the OOM-killed VM's cgroup is left empty", NULL);

	/* ---- a fork bomb stops at pids.max ---- */
	int rfd = -1, forks = -1, ferr = 0;
	pid_t f = in_cgroup(&a, bomb, &rfd);
	FILE *fp = f > 0 ? fdopen(rfd, "r") : NULL;
	alarm(120);
	if (!fp || fscanf(fp, "%d %d", &forks, &ferr) != 2)
		forks = -1;
	alarm(0);
	char *curs = cg_read(A, "pids.current");
	long long cur = atoll(curs), maxed = cg_key(A, "pids.events", "max");
	free(curs);
	snprintf(buf, sizeof(buf), "%d forks, then %s; pids.current %lld, pids.events max %lld", forks,
		 ferr ? strerror(ferr) : "no failure", cur, maxed);
	check(forks >= 0 && forks < 256 && ferr == EAGAIN && cur <= 256 && maxed >= 1,
	      "a fork bomb in the VM's cgroup is stopped at pids.max (EAGAIN)", buf);
	pid_t outside = fork();
	if (outside == 0)
		_exit(0);
	check(outside > 0 && wait_for(outside, &status, 10) == outside, "a fork outside the VM's cgroup still succeeds",
	      NULL);
	if (f > 0)
		kill(-f, SIGKILL);
	if (fp)
		fclose(fp);
	check(empties(A, 30), "the bomb, killed, leaves the cgroup empty", NULL);

	/* ---- slots: a cgroup that still holds a process is not reused ---- */
	close(b.slot_fd); /* B's lock is free, but its cgroup holds b1 */
	b.slot_fd = -1;
	rc = vm_jail_slot_take(&c, 1, 16, &err);
	snprintf(buf, sizeof(buf), "got slot %u", c.slot);
	check(rc < 0 && err && err->kind == KILN_E_LIMIT,
	      "with one slot locked and the other's cgroup busy, no slot is handed out", rc == 0 ? buf : NULL);
	kiln_error_clear(&err);
	if (rc == 0) {
		close(c.slot_fd);
		vm_jail_free_cgroups(&c);
	}
	close(a.slot_fd); /* A's lock free, its cgroup empty: reusable */
	a.slot_fd = -1;
	rc = vm_jail_slot_take(&c, 1, 16, &err);
	snprintf(buf, sizeof(buf), "%s got slot %u, A was %u, busy B %u", err ? kiln_error_message(err) : "", c.slot,
		 a.slot, b.slot);
	check(rc == 0 && c.slot == a.slot, "the empty, unlocked slot is reused, the busy one is not", buf);
	kiln_error_clear(&err);
	if (rc == 0) {
		close(c.slot_fd);
		vm_jail_free_cgroups(&c);
	}

	/* ---- removal: gc and remove leave busy cgroups alone ---- */
	int removed = vm_jail_gc();
	bool a_gone = access(A, F_OK) < 0, b_there = access(B, F_OK) == 0;
	snprintf(buf, sizeof(buf), "gc removed %d; A %s, B %s", removed, a_gone ? "gone" : "there", b_there ? "there" : "gone");
	check(removed == 1 && a_gone && b_there, "vm_jail_gc removes the empty unlocked cgroup, not the busy one", buf);
	vm_jail_remove_cgroups(&b);
	check(access(B, F_OK) == 0, "vm_jail_remove_cgroups leaves a cgroup that still holds a process", NULL);
	kill(b1, SIGKILL);
	wait_for(b1, &status, 10);
	vm_jail_remove_cgroups(&b);
	check(access(B, F_OK) < 0 && errno == ENOENT, "once its process is gone, the VM's cgroup is removed", NULL);
	char *left = cg_read("/sys/fs/cgroup/kiln", "cgroup.procs");
	check(*left == '\0', "nothing is left in kiln's parent", left);
	free(left);

	/* ---- a host whose cgroups lack one controller: a clear refusal ---- */
	char *msg = without_pids();
	check(strstr(msg, "cannot enable the pids controller") && strstr(msg, "'cpu memory'"),
	      "a parent without the pids controller is refused, naming it and what is offered", msg);
	free(msg);
out:
	vm_jail_free_cgroups(&a);
	vm_jail_free_cgroups(&b);
	printf("probe: done, %d failed\n", failed);
	return failed ? 1 : 0;
}

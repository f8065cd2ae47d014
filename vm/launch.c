/* launch.c — booting a microVM: a private directory per VM (initramfs, qcow2
 * overlay over the base rootfs, sockets, console log; guest RAM in /dev/shm),
 * QEMU `-M microvm` under KVM or TCG, and the wait for init's ready marker on
 * the serial console.  Every failure and vm_destroy remove all of it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "guest/guest.h"
#include "vm/internal.h"

#define READY_MARKER "kiln-init: ready"
#define FAILED_MARKER "kiln-init: FAILED"

enum {
	F_CONSOLE, F_QMP, F_AGENT, F_INITRD, F_INITRD_TMP, F_OVERLAY, F_MEM, F_QEMU_LOG, F_SCRATCH,
	F_AGENT_MORE, /* the sockets of agent ports 1.. */
	F_COUNT = F_AGENT_MORE + VM_AGENT_PORTS - 1
};
_Static_assert(F_COUNT < VM_MAX_FILES, "vm_files has room for every file (and the NULL)");

void vm_config_init(struct vm_config *c)
{
	memset(c, 0, sizeof(*c));
	c->cpus = 1;
	c->memory_mib = 256;
}

const char *vm_dir(const vm_instance *v) { return v->files.dir; }
const char *vm_console_path(const vm_instance *v) { return v->files.paths[F_CONSOLE]; }
const char *vm_agent_socket(const vm_instance *v) { return v->files.paths[F_AGENT]; }
const char *vm_memory_path(const vm_instance *v) { return v->files.paths[F_MEM]; }
vm_qmp *vm_get_qmp(vm_instance *v) { return v->qmp; }
pid_t vm_qemu_pid(const vm_instance *v) { return v->files.pid; }
bool vm_has_agent(const vm_instance *v) { return v->agent; }
enum vm_accel vm_accel_used(const vm_instance *v) { return v->accel; }
uint32_t vm_tsc_khz_used(const vm_instance *v) { return v->tsc_khz; }
double vm_boot_ms(const vm_instance *v) { return v->boot_ms; }
double vm_agent_ms(const vm_instance *v) { return v->agent_ms; }
guest_conn *vm_agent(vm_instance *v) { return v->conn; }

void vm_agent_release(vm_instance *v)
{
	guest_close(v->conn);
	v->conn = NULL;
}

/* The agent binary: explicit, or vm_agent_default_path() if it is there. */
static char *find_agent(const struct vm_config *c, kiln_error **err)
{
	bool chosen = c->agent || (getenv("KILN_AGENT") && *getenv("KILN_AGENT"));
	char *path;

	if (c->no_agent)
		return NULL;
	path = c->agent ? kiln_xstrdup(c->agent) : vm_agent_default_path();
	if (access(path, X_OK) == 0)
		return path;
	if (chosen) {
		kiln_err_errno(err, errno, "guest agent %s", path);
		free(path);
		return (char *)-1;
	}
	kiln_debug("vm: no guest agent at %s; booting without one", path);
	free(path);
	return NULL;
}

char *vm_file_tail(const char *path, size_t max)
{
	char *data = NULL, *start, *out;
	size_t len = 0;
	kiln_error *e = NULL;

	if (kiln_read_file(path, &data, &len, 0, &e) < 0) {
		kiln_error_free(e);
		return kiln_xstrdup("");
	}
	while (len > 0 && (data[len - 1] == '\n' || data[len - 1] == '\r'))
		data[--len] = '\0';
	start = len > max ? data + len - max : data;
	if (start != data) {
		char *nl = strchr(start, '\n');
		if (nl)
			start = nl + 1;
	}
	for (char *p = start; *p; p++)
		if (*p == '\r')
			*p = ' ';
	out = kiln_xstrdup(start);
	free(data);
	return out;
}

/* The console's last lines, for an error message. */
static char *console_tail(const vm_instance *v, size_t max)
{
	char *t = vm_file_tail(v->files.paths[F_CONSOLE], max);

	if (*t)
		return t;
	free(t);
	return kiln_xstrdup("(no console output)");
}

bool vm_qemu_gone(vm_instance *v, int flags)
{
	int status;
	pid_t r;

	if (v->exited || v->files.pid <= 0)
		return true;
	if (v->detached) {
		/* not our child: gone when its pid no longer names it */
		if (vm_proc_start_time(v->files.pid) != v->start_time)
			v->exited = true;
		return v->exited;
	}
	r = kiln_waitpid(v->files.pid, &status, flags);
	if (r == v->files.pid || (r < 0 && errno == ECHILD)) {
		v->exited = true;
		v->exit_status = r == v->files.pid ? status : 0;
		return true;
	}
	return false;
}

static int qemu_died(vm_instance *v, const char *when, kiln_error **err)
{
	char *tail = console_tail(v, 1500), *log = NULL;
	size_t len = 0;
	kiln_error *e = NULL;

	if (kiln_read_file(v->files.paths[F_QEMU_LOG], &log, &len, 4096, &e) < 0) {
		kiln_error_free(e);
		log = kiln_xstrdup("");
	}
	while (len > 0 && log[len - 1] == '\n')
		log[--len] = '\0';
	kiln_err(err, KILN_E_GENERIC, "QEMU exited %s (%s %d)%s%s; console:\n%s", when,
		 WIFSIGNALED(v->exit_status) ? "signal" : "status",
		 WIFSIGNALED(v->exit_status) ? WTERMSIG(v->exit_status) : WEXITSTATUS(v->exit_status),
		 *log ? ": " : "", log, tail);
	free(tail);
	free(log);
	return -1;
}

/* Watch the console log until init's marker, a failure marker, QEMU's exit or
 * the deadline.  The log only grows, so only new bytes (plus a marker's length
 * of overlap) are scanned. */
static int wait_ready(vm_instance *v, int timeout_ms, kiln_error **err)
{
	double deadline = kiln_now_ms() + timeout_ms;
	kiln_buf seen = KILN_BUF_INIT;
	FILE *f = NULL;
	int rc = -1;

	for (;;) {
		if (f == NULL)
			f = fopen(v->files.paths[F_CONSOLE], "re");
		if (f) {
			char chunk[8192];
			size_t n;
			clearerr(f);
			while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
				size_t keep = 64;
				if (seen.len > keep) {
					memmove(seen.buf, seen.buf + seen.len - keep, keep);
					seen.len = keep;
				}
				kiln_buf_add(&seen, chunk, n);
				for (size_t i = 0; i < seen.len; i++)
					if (seen.buf[i] == '\0')
						seen.buf[i] = ' ';
				/* The whole line: the guest's uptime follows the marker, and
				 * a console printed at once would show it cut off. */
				const char *ready = strstr(seen.buf, READY_MARKER);
				if (ready && strchr(ready, '\n')) {
					rc = 0;
					goto out;
				}
				if (strstr(seen.buf, FAILED_MARKER)) {
					char *tail = console_tail(v, 1500);
					kiln_err(err, KILN_E_GENERIC, "guest init failed; console:\n%s", tail);
					free(tail);
					goto out;
				}
			}
		}
		if (vm_qemu_gone(v, WNOHANG)) {
			qemu_died(v, "during boot", err);
			goto out;
		}
		if (kiln_now_ms() >= deadline) {
			char *tail = console_tail(v, 1500);
			kiln_err(err, KILN_E_GENERIC, "guest did not reach init's ready marker within %d ms; console:\n%s",
				 timeout_ms, tail);
			free(tail);
			goto out;
		}
		kiln_sleep_ms(5);
	}
out:
	if (f)
		fclose(f);
	kiln_buf_free(&seen);
	return rc;
}

static bool use_scratch(const struct vm_config *c)
{
	return c->scratch_mib > 0 && c->root_mode == VM_ROOT_OVERLAY;
}

static char *kernel_cmdline(const struct vm_config *c, const vm_instance *v)
{
	kiln_buf b = KILN_BUF_INIT;

	/* panic=-1 + QEMU's -no-reboot: a guest panic ends QEMU at once. */
	kiln_buf_adds(&b, "console=ttyS0 panic=-1 rdinit=/init");
	if (!c->console_verbose)
		kiln_buf_adds(&b, " quiet");
	kiln_buf_addf(&b, " kiln.root=%s kiln.net=%d kiln.scratch=%d kiln.agent_ports=%u",
		      c->root_mode == VM_ROOT_WRITABLE ? "rw" : "overlay", c->net ? 1 : 0, use_scratch(c) ? 1 : 0,
		      VM_AGENT_PORTS);
	/* See docs/vm.md: microvm's ACPI tables route IRQ0 nowhere, so a guest
	 * that cannot calibrate its TSC against the PIT has no timer at all.
	 * Under TCG the guest's TSC is the host's: tell it the rate, and that it
	 * is reliable (the host's is invariant; the only watchdog a microvm guest
	 * has is jiffies, which lag whenever the host deschedules the vCPU). */
	if (v->tsc_khz)
		kiln_buf_addf(&b, " tsc_early_khz=%u tsc=reliable", v->tsc_khz);
	/* Work the guest need not do: crypto self-tests, probing 4 UARTs. */
	kiln_buf_adds(&b, " cryptomgr.notests 8250.nr_uarts=1 random.trust_cpu=on");
	if (c->extra_cmdline && *c->extra_cmdline)
		kiln_buf_addf(&b, " %s", c->extra_cmdline);
	return kiln_buf_detach(&b);
}

/* base_fd >= 0 (jailed): the base rootfs, opened by kiln, goes to QEMU as an
 * fd set: its owner and mode need not let the VM's uid read it, and its path
 * need not exist inside the jail. */
static int start_qemu(const struct vm_config *c, vm_instance *v, const char *kernel, int base_fd, int spare_fd,
		      kiln_error **err)
{
	struct vm_machine m = {
		.accel = v->accel, .cpus = c->cpus, .memory_mib = c->memory_mib, .net = c->net, .dir = v->files.dir,
		.memory_file = v->files.paths[F_MEM], .disk = v->files.paths[F_OVERLAY],
		.scratch = use_scratch(c) ? v->files.paths[F_SCRATCH] : NULL, .sandbox = v->jail.on,
		.disk_backing = base_fd >= 0 ? "/dev/fdset/1" : NULL,
		.spare = spare_fd >= 0 ? "/dev/fdset/3" : c->spare_disk,
	};
	/* a template whose network is none: the NIC, and slirp forwarding nothing */
	static const struct vm_net_opts isolated = { .mode = VM_NET_NONE };
	char *netdev = c->net ? vm_net_netdev(c->net_isolated ? &isolated : NULL) : NULL;
	char *cmdline = kernel_cmdline(c, v);
	kiln_strv av = KILN_STRV_INIT;
	pid_t pid;

	m.netdev = netdev;
	vm_machine_argv(&m, &av);
	free(netdev);
	if (base_fd >= 0) {
		kiln_strv_push(&av, "-add-fd");
		kiln_strv_push_owned(&av, kiln_xasprintf("fd=%d,set=1,opaque=rootfs", base_fd));
	}
	if (spare_fd >= 0) {
		kiln_strv_push(&av, "-add-fd");
		kiln_strv_push_owned(&av, kiln_xasprintf("fd=%d,set=3,opaque=spare", spare_fd));
	}
	kiln_strv_push(&av, "-kernel");
	kiln_strv_push(&av, kernel);
	kiln_strv_push(&av, "-initrd");
	kiln_strv_push(&av, v->files.paths[F_INITRD]);
	kiln_strv_push(&av, "-append");
	kiln_strv_push(&av, cmdline);
	if (kiln_log_level() >= KILN_LOG_DEBUG) {
		kiln_buf line = KILN_BUF_INIT;
		for (size_t i = 0; i < av.n; i++)
			kiln_buf_addf(&line, "%s%s", i ? " " : "", av.v[i]);
		kiln_debug("vm: %s", line.buf);
		kiln_buf_free(&line);
	}
	struct vm_spawn_opts so = { .log_path = v->files.paths[F_QEMU_LOG], .jail = &v->jail,
				    .keep_fd = { base_fd, spare_fd, -1 } };
	pid = vm_spawn(av.v, &so, err);
	kiln_strv_free(&av);
	free(cmdline);
	if (pid < 0)
		return -1;
	v->files.pid = pid; /* the signal handler may kill it from now on */
	return 0;
}

static void files_init(vm_instance *v, const char *dir)
{
	static const char *const names[F_AGENT_MORE] = {
		[F_CONSOLE] = "console.log", [F_QMP] = "qmp.sock", [F_AGENT] = "agent.sock",
		[F_INITRD] = "initramfs.cpio", [F_INITRD_TMP] = "initramfs.cpio.tmp", [F_OVERLAY] = "root.qcow2",
		[F_QEMU_LOG] = "qemu.log", [F_SCRATCH] = "scratch.ext4",
	};
	const char *base = strrchr(dir, '/');
	struct stat st;

	v->files.dir = kiln_xstrdup(dir);
	for (int i = 0; i < F_COUNT; i++)
		if (i < F_AGENT_MORE && names[i])
			v->files.paths[i] = kiln_path_join(dir, names[i]);
	for (unsigned i = 1; i < VM_AGENT_PORTS; i++)
		v->files.paths[F_AGENT_MORE + i - 1] = vm_agent_socket_path(dir, i);
	/* Guest RAM lives in shared memory when there is some: on a disk it would
	 * be written back for nothing.  Snapshots map this file. */
	if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0)
		v->files.paths[F_MEM] = kiln_xasprintf("/dev/shm/%s.mem", base ? base + 1 : dir);
	else
		v->files.paths[F_MEM] = kiln_path_join(dir, "guest.mem");
}

/* The config's limits, and its rootfs resolved to a disk image file or a
 * block device (*base: its real path, the overlay's backing). */
static int check_config(const struct vm_config *c, char **base, kiln_error **err)
{
	struct stat st;

	if (c->rootfs == NULL)
		return kiln_err(err, KILN_E_USAGE, "vm: no rootfs image given");
	if (c->cpus < 1 || c->cpus > 64 || c->memory_mib < 64 || c->memory_mib > 1024 * 1024)
		return kiln_err(err, KILN_E_USAGE, "vm: want 1-64 vCPUs and at least 64 MiB of memory (got %u, %u MiB)",
				c->cpus, c->memory_mib);
	if ((*base = realpath(c->rootfs, NULL)) == NULL)
		return kiln_err_errno(err, errno, "vm: rootfs %s", c->rootfs);
	if (stat(*base, &st) < 0 || !(S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)))
		return kiln_err(err, KILN_E_INVALID, "vm: rootfs %s is not a disk image file", c->rootfs);
	return 0;
}

/* KVM when usable (unless the config names one), else TCG with the host's
 * TSC rate: a property of the host, measured once per host boot. */
static int choose_accel(const struct vm_config *c, vm_instance *v, kiln_error **err)
{
	v->accel = c->accel;
	if (v->accel == VM_ACCEL_AUTO)
		v->accel = vm_kvm_usable() ? VM_ACCEL_KVM : VM_ACCEL_TCG;
	if (v->accel == VM_ACCEL_TCG) {
		v->tsc_khz = c->tsc_khz;
		if (v->tsc_khz == 0 && vm_host_tsc_khz_cached(&v->tsc_khz, err) < 0)
			return -1;
	}
	return 0;
}

/* Jailed: what QEMU opens besides its directory — the guest RAM file (made
 * here, owned by the VM's uid), the kernel, and the base rootfs (the
 * overlay's backing, read-only) and spare disk, opened for fd sets. */
static int jail_files(const struct vm_config *c, vm_instance *v, const char *kernel, const char *base, int *base_fd,
		      int *spare_fd, kiln_error **err)
{
	int fd = open(v->files.paths[F_MEM], O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

	if (fd < 0)
		return kiln_err_errno(err, errno, "vm: %s", v->files.paths[F_MEM]);
	close(fd);
	if (vm_jail_own(&v->jail, v->files.paths[F_MEM], err) < 0)
		return -1;
	v->files.subdirs[0] = kiln_xstrdup(v->jail.root);
	vm_jail_add(&v->jail, v->files.paths[F_MEM], true);
	vm_jail_add(&v->jail, kernel, false);
	if ((*base_fd = open(base, O_RDONLY | O_CLOEXEC)) < 0)
		return kiln_err_errno(err, errno, "vm: rootfs %s", base);
	if (c->spare_disk && (*spare_fd = open(c->spare_disk, O_RDONLY | O_CLOEXEC)) < 0)
		return kiln_err_errno(err, errno, "vm: spare disk %s", c->spare_disk);
	return 0;
}

/* The files the guest boots from: the initramfs (with the agent, if any),
 * the rootfs overlay over base and the scratch disk, owned by the VM's uid. */
static int boot_files(const struct vm_config *c, vm_instance *v, const struct vm_kernel *k, const char *agent,
		      const char *base, kiln_error **err)
{
	struct vm_initramfs_opts io = { .kernel = k, .busybox = c->busybox, .agent = agent,
					.modules = vm_default_modules(c->net) };
	char *const img[] = { "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", (char *)base,
			      v->files.paths[F_OVERLAY], NULL };

	if (vm_initramfs_write(&io, v->files.paths[F_INITRD], err) < 0)
		return -1;
	if (vm_run_tool(img, err) < 0)
		return kiln_error_wrap(err, "vm: creating the rootfs overlay");
	if (use_scratch(c)) {
		char *size = kiln_xasprintf("%uM", c->scratch_mib);
		char *const mkfs[] = { "mke2fs", "-q", "-F", "-t", "ext4", "-m", "0", "-L", "kiln-scratch",
				       v->files.paths[F_SCRATCH], size, NULL };
		int r = vm_run_tool(mkfs, err);
		free(size);
		if (r < 0)
			return kiln_error_wrap(err, "vm: creating the scratch disk");
	}
	if (vm_jail_own(&v->jail, v->files.paths[F_OVERLAY], err) < 0 ||
	    (use_scratch(c) && vm_jail_own(&v->jail, v->files.paths[F_SCRATCH], err) < 0))
		return -1;
	return 0;
}

/* A started QEMU's guest up: QMP (checked to be QEMU's), init's ready
 * marker, then the agent; boot_ms and agent_ms count from t0. */
static int wait_guest(const struct vm_config *c, vm_instance *v, double t0, kiln_error **err)
{
	int timeout = c->boot_timeout_ms > 0 ? c->boot_timeout_ms : v->accel == VM_ACCEL_KVM ? 30000 : 120000;

	v->qmp = vm_qmp_connect(v->files.paths[F_QMP], timeout < 20000 ? timeout : 20000, err);
	if (v->qmp == NULL) {
		/* Most often QEMU refused its arguments: say why, from its log. */
		for (int i = 0; i < 100 && !vm_qemu_gone(v, WNOHANG); i++)
			kiln_sleep_ms(10);
		if (vm_qemu_gone(v, WNOHANG)) {
			kiln_error_clear(err);
			qemu_died(v, "at start", err);
		}
		return -1;
	}
	if (vm_qmp_peer_check(v->qmp, vm_jail_uid(v), err) < 0 || wait_ready(v, timeout, err) < 0)
		return -1;
	v->boot_ms = kiln_now_ms() - t0;
	if (!v->agent)
		return 0;
	int left = timeout - (int)v->boot_ms;
	v->conn = guest_connect(v->files.paths[F_AGENT], left > 5000 ? left : 5000, err);
	if (v->conn && vm_socket_peer_check(guest_conn_fd(v->conn), vm_jail_uid(v), "the agent's socket", err) < 0) {
		guest_close(v->conn);
		v->conn = NULL;
	}
	if (v->conn == NULL) {
		char *tail = console_tail(v, 1500);
		kiln_error_wrap(err, "the guest agent did not answer; console:\n%s\n", tail);
		free(tail);
		return -1;
	}
	v->agent_ms = kiln_now_ms() - t0;
	return 0;
}

vm_instance *vm_boot(const struct vm_config *c, kiln_error **err)
{
	struct vm_kernel k = { 0 };
	vm_instance *v = kiln_xcalloc(1, sizeof(*v));
	char *dir = NULL, *agent = NULL, *base = NULL;
	int base_fd = -1, spare_fd = -1;
	double t0;

	if (check_config(c, &base, err) < 0 || vm_kernel_open(c->kernel_dir, &k, err) < 0)
		goto fail;
	agent = find_agent(c, err);
	if (agent == (char *)-1) {
		agent = NULL;
		goto fail;
	}
	v->agent = agent != NULL;
	if (choose_accel(c, v, err) < 0 || (dir = kiln_mkdtemp("kiln-vm", err)) == NULL)
		goto fail;
	files_init(v, dir);
	vm_registry_add(&v->files);
	if (vm_jail_setup(&v->jail, dir, dir, c->cpus, c->memory_mib, c->net && !c->net_isolated, NULL, v->accel,
			  err) < 0 ||
	    (v->jail.on && jail_files(c, v, k.image, base, &base_fd, &spare_fd, err) < 0) ||
	    boot_files(c, v, &k, agent, base, err) < 0)
		goto fail;
	t0 = kiln_now_ms();
	if (start_qemu(c, v, k.image, base_fd, spare_fd, err) < 0)
		goto fail;
	if (base_fd >= 0)
		close(base_fd);
	if (spare_fd >= 0)
		close(spare_fd);
	base_fd = spare_fd = -1;
	if (v->jail.on) {
		/* QEMU holds the slot now; the cgroup is removed with the VM */
		close(v->jail.slot_fd);
		v->jail.slot_fd = -1;
	}
	if (wait_guest(c, v, t0, err) < 0)
		goto fail;
	kiln_info("vm: %s booted in %.0f ms (%s%s)", v->files.dir, v->boot_ms, v->accel == VM_ACCEL_KVM ? "kvm" : "tcg",
		  v->agent ? ", agent" : "");
	vm_kernel_free(&k);
	free(agent);
	free(base);
	free(dir);
	return v;
fail:
	if (base_fd >= 0)
		close(base_fd);
	if (spare_fd >= 0)
		close(spare_fd);
	kiln_error_wrap(err, "booting a VM");
	vm_kernel_free(&k);
	free(agent);
	free(base);
	free(dir);
	vm_destroy(v);
	return NULL;
}

int vm_wait_exit(vm_instance *v, int timeout_ms, kiln_error **err)
{
	double deadline = kiln_now_ms() + timeout_ms;

	(void)err;
	while (!vm_qemu_gone(v, WNOHANG)) {
		if (timeout_ms >= 0 && kiln_now_ms() >= deadline)
			return 0;
		kiln_sleep_ms(10);
	}
	return 1;
}

void vm_destroy(vm_instance *v)
{
	kiln_error *e = NULL;

	if (v == NULL)
		return;
	guest_close(v->conn);
	v->conn = NULL;
	if (!vm_qemu_gone(v, WNOHANG) && v->qmp) {
		json_t *r = vm_qmp_execute(v->qmp, "quit", NULL, 2000, &e);
		json_decref(r);
		kiln_error_clear(&e);
		for (int i = 0; i < 200 && !vm_qemu_gone(v, WNOHANG); i++)
			kiln_sleep_ms(5);
	}
	if (!vm_qemu_gone(v, WNOHANG)) {
		kill(v->files.pid, SIGKILL);
		if (v->detached)
			for (int i = 0; i < 400 && !vm_qemu_gone(v, WNOHANG); i++)
				kiln_sleep_ms(5);
		else
			vm_qemu_gone(v, 0);
	}
	if (vm_qemu_gone(v, WNOHANG) && !v->detached)
		vm_jail_remove_cgroups(&v->jail);
	if (!v->keep_dir) {
		/* files outside the directory too (guest RAM in /dev/shm) */
		for (int i = 0; i < VM_MAX_FILES && v->files.paths[i]; i++)
			unlink(v->files.paths[i]);
		if (v->files.dir && kiln_rm_rf(v->files.dir, &e) < 0) {
			kiln_warn("vm: cleaning up %s: %s", v->files.dir, kiln_error_message(e));
			kiln_error_clear(&e);
		}
	}
	vm_release(v);
}

/* internal.h — helpers shared by the vm/ sources: child processes and the
 * registry of live VMs that the signal handler cleans up. */
#ifndef KILN_VM_INTERNAL_H
#define KILN_VM_INTERNAL_H

#include <sys/types.h>

#include "vm/vm.h"

/* Run a program to completion; a non-zero exit becomes an error quoting its
 * stderr.  Used for qemu-img. */
int vm_run_tool(char *const argv[], kiln_error **err);
/* The same, its output (up to max bytes, trailing newlines cut) into out. */
int vm_run_tool_out(char *const argv[], kiln_buf *out, size_t max, kiln_error **err);

/* The one way kiln starts QEMU (a boot, a restore, for a sandbox, a
 * template, a builder or `kiln vm`).  stdin from /dev/null, stdout+stderr
 * appended to log_path.  Attached: a child of kiln in its own process group,
 * killed if kiln dies (PDEATHSIG).  Detached: an orphan of init in its own
 * session, outliving kiln (a sandbox). */
/* The jail of one QEMU (jail.c, docs/security.md). */
struct vm_jail {
	bool on;
	uid_t uid;
	gid_t gid;
	unsigned slot;
	int slot_fd;          /* the slot's lock, held by QEMU for its life */
	char *root;           /* an empty directory: the tmpfs root pivot_root enters */
	kiln_strv ro, rw;     /* host paths bound at the same place inside */
	bool netns;           /* a network namespace of its own (the VM has no network) */
	bool kvm;             /* /dev/kvm inside */
	const char *copy_from, *copy_to; /* the RAM copy (sparse), vm_jail_copy_start's */
	bool cg_v2;
	char *cg[4];          /* the slot's cgroup directories (one per v1 controller) */
	size_t n_cg;
};
/* Take a uid slot and set up its cgroup with the VM's limits; refused (with
 * what to do) when kiln is not root or the host has no cgroups. */
int vm_jail_prepare(struct vm_jail *j, unsigned cpus, unsigned memory_mib, kiln_error **err);
void vm_jail_add(struct vm_jail *j, const char *path, bool writable);
/* The RAM copy (copy_from into copy_to) made by a process of its own in
 * the VM's memory cgroup, while QEMU starts; *done_fd reaches EOF when it
 * ends.  vm_jail_copy_wait waits for it (before anything reads guest RAM)
 * and says why it failed. */
pid_t vm_jail_copy_start(const struct vm_jail *j, int *done_fd, kiln_error **err);
int vm_jail_copy_wait(pid_t pid, int done_fd, kiln_error **err);
/* chown path to the VM's uid/gid (nothing when j is off or NULL). */
int vm_jail_own(const struct vm_jail *j, const char *path, kiln_error **err);
/* How a child of vm_jail_fork got into its cgroups, and whether it did. */
struct vm_jail_joined {
	enum {
		VM_CG_BORN = 1, /* v2: born there (clone3 CLONE_INTO_CGROUP) */
		VM_CG_THREAD,   /* v1: it moved itself as a thread ("0" to each tasks) */
		VM_CG_PROCS,    /* v2 without clone3 into a cgroup: "0" to cgroup.procs */
	} how;
	const char *failed; /* NULL, or the cgroup directory that refused it (errno set) */
};
/* In the child between clone and exec: its cgroup join checked, mounts,
 * pivot_root, privileges dropped; a failure is written to errfd and ends
 * the child. */
void vm_jail_enter(const struct vm_jail *j, const struct vm_jail_joined *cg, int errfd);
int vm_jail_clone_flags(const struct vm_jail *j);
void vm_jail_free_cgroups(struct vm_jail *j);
/* cgroup.c: take a free uid slot (its lock into j->slot_fd, its cgroup
 * directories, created under kiln's parent, into j->cg) and write the
 * limits for cpus vCPUs and memory_mib of guest RAM.  Needs root. */
int vm_jail_slot_take(struct vm_jail *j, unsigned cpus, unsigned memory_mib, kiln_error **err);
/* fork(), or clone with ns_flags (CLONE_NEW*), a child that is in j's
 * cgroups (memory_only: the memory controller's, on v1) before it runs
 * anything of its caller's; without the cgroup core's global lock, whose
 * every write waits for an RCU grace period (cgroup.c).  Returns as fork();
 * in the child, *cg says how it joined and whether that failed. */
pid_t vm_jail_fork(const struct vm_jail *j, int ns_flags, bool memory_only, struct vm_jail_joined *cg);
/* Whether uid is a jail uid, and its slot. */
bool vm_jail_uid_slot(uid_t uid, unsigned *slot);
/* The parent's side: close its slot lock, free.  The cgroup stays for
 * QEMU; vm_jail_remove_cgroups removes it once QEMU is gone. */
void vm_jail_release(struct vm_jail *j);
void vm_jail_remove_cgroups(const struct vm_jail *j);
/* The jail of a VM whose directory is dir (the tmpfs root goes on dir/jail):
 * prepared for cpus/memory_mib with dir bound writable and owned by the VM's
 * uid; j->on stays false when vm_unconfined().  host_net: QEMU stays in the
 * host's network namespace, its uid's packets passing the slot's egress
 * chain, written from egress (NULL: emptied, a builder VM). */
int vm_jail_setup(struct vm_jail *j, const char *dir, const char *writable_dir, unsigned cpus, unsigned memory_mib,
		  bool host_net, const struct vm_net_opts *egress, enum vm_accel accel, kiln_error **err);

struct vm_spawn_opts {
	const char *log_path;
	const char *tmpdir;  /* $TMPDIR of QEMU (a snapshot=on disk's overlay), or NULL */
	bool detached;
	const struct vm_jail *jail; /* NULL or off: unconfined */
	int keep_fd[3];      /* > 0: fds QEMU inherits (-add-fd), else none */
};
pid_t vm_spawn(char *const argv[], const struct vm_spawn_opts *o, kiln_error **err);

/* The QEMU options a boot and the restore of its snapshot share (machine.c);
 * a boot adds its kernel, a restore `-incoming defer`. */
struct vm_machine {
	enum vm_accel accel;
	unsigned cpus, memory_mib;
	bool net;
	const char *dir;          /* console.log, qmp.sock, agent*.sock go here */
	const char *memory_file;  /* guest RAM */
	bool memory_private;      /* mapped share=off (a restore), else shared */
	const char *disk;         /* the root disk, qcow2 */
	bool disk_snapshot;       /* snapshot=on: writes go to a temporary overlay */
	const char *disk_backing; /* raw backing of disk, given to QEMU (the name in the
				   * qcow2 header is then not used), or NULL */
	const char *spare;        /* a raw disk the guest reads later (read-only), or NULL */
	const char *netdev;       /* with net: -netdev's value (vm_net_netdev) */
	const char *scratch;      /* a raw scratch disk (boot only), or NULL */
	bool sandbox;             /* QEMU's seccomp policy (-sandbox ...deny) */
};
void vm_machine_argv(const struct vm_machine *m, kiln_strv *av);

/* Network (net.c): -netdev's value for a sandbox's options (NULL: a
 * builder VM's plain user network); whether QEMU needs the host's network
 * namespace; the egress chain of a jailed QEMU in it, written before QEMU
 * starts (apply), or emptied for one that has none (clear). */
char *vm_net_netdev(const struct vm_net_opts *o);
bool vm_net_host_ns(bool nic, const struct vm_net_opts *o);
int vm_netfw_apply(unsigned slot, uid_t uid, const struct vm_net_opts *o, kiln_error **err);
void vm_netfw_clear(unsigned slot, uid_t uid);
/* The slots with a KILN-VM-N chain on the host (none without iptables);
 * and a slot's chain and every OUTPUT jump to it removed (vm_jail_gc: the
 * chain of a slot no VM holds, left by a kiln killed mid-start). */
int vm_netfw_slots(unsigned **slots, size_t *n, kiln_error **err);
int vm_netfw_remove(unsigned slot, kiln_error **err);

/* Files of a VM, removed by vm_destroy and by the signal handler. */
/* TCG's translation cache, bounded (QEMU's default is 1 GiB on a 64-bit host):
 * it is part of what the VM's memory cgroup must hold (vm/cgroup.c), and a
 * QEMU whose cache outgrew it was OOM-killed mid-build */
#define VM_TCG_TB_MIB 256u
#define VM_MAX_FILES 16
struct vm_files {
	pid_t pid;                        /* QEMU, 0 before it starts */
	char *dir;
	char *paths[VM_MAX_FILES];        /* absolute, NULL-terminated */
	char *subdirs[2];                 /* emptied by then: removed before dir */
};
void vm_registry_add(struct vm_files *f);
void vm_registry_remove(struct vm_files *f);

/* A VM, booted (launch.c) or restored (restore.c). */
struct vm_instance {
	struct vm_files files;
	vm_qmp *qmp;
	guest_conn *conn;
	bool agent;
	bool exited;             /* QEMU reaped (or, detached, gone) */
	bool detached;           /* not kiln's child: liveness from /proc */
	bool keep_dir;           /* vm_destroy leaves files.dir (its owner removes it) */
	unsigned long long start_time; /* of a detached QEMU, vm_proc_start_time */
	int exit_status;
	enum vm_accel accel;
	uint32_t tsc_khz;
	double boot_ms;
	double agent_ms;
	struct vm_jail jail;
};
/* Reap QEMU if it has exited (flags: WNOHANG or 0); true when it is gone. */
bool vm_qemu_gone(vm_instance *v, int flags);
/* The last max bytes of a file (whole lines), "" if unreadable. */
char *vm_file_tail(const char *path, size_t max);
/* Load device state into a QEMU waiting with `-incoming defer`, reachable at
 * q; the guest runs when this returns 0.  A refused state is an error
 * quoting QEMU's reason (QEMU then exits). */
int vm_snapshot_load(vm_qmp *q, const char *state_path, int timeout_ms, kiln_error **err);

/* vm_kvm_usable() with the host's paths and KILN_ACCEL as parameters (tests
 * present a kvm_pvm-only host); *why gets a static reason either way. */
bool vm_kvm_check(const char *sys_module, const char *dev_kvm, const char *force, const char **why);

#endif

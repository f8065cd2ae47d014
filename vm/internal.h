/* internal.h — helpers shared by the vm/ sources: child processes and the
 * registry of live VMs that the signal handler cleans up. */
#ifndef KILN_VM_INTERNAL_H
#define KILN_VM_INTERNAL_H

#include <sys/types.h>

#include "vm/vm.h"

/* Run a program to completion; a non-zero exit becomes an error quoting its
 * stderr.  Used for qemu-img. */
int vm_run_tool(char *const argv[], kiln_error **err);

/* The one way kiln starts QEMU (a boot, a restore, for a sandbox, a
 * template, a builder or `kiln vm`).  stdin from /dev/null, stdout+stderr
 * appended to log_path.  Attached: a child of kiln in its own process group,
 * killed if kiln dies (PDEATHSIG).  Detached: an orphan of init in its own
 * session, outliving kiln (a sandbox). */
struct vm_spawn_opts {
	const char *log_path;
	const char *tmpdir;  /* $TMPDIR of QEMU (a snapshot=on disk's overlay), or NULL */
	bool detached;
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
	const char *scratch;      /* a raw scratch disk (boot only), or NULL */
};
void vm_machine_argv(const struct vm_machine *m, kiln_strv *av);

/* Files of a VM, removed by vm_destroy and by the signal handler. */
#define VM_MAX_FILES 16
struct vm_files {
	pid_t pid;                        /* QEMU, 0 before it starts */
	char *dir;
	char *paths[VM_MAX_FILES];        /* absolute, NULL-terminated */
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
};
/* Reap QEMU if it has exited (flags: WNOHANG or 0); true when it is gone. */
bool vm_qemu_gone(vm_instance *v, int flags);
/* The last max bytes of a file (whole lines), "" if unreadable. */
char *vm_file_tail(const char *path, size_t max);
double vm_now_ms(void);
/* Load device state into a QEMU waiting with `-incoming defer`, reachable at
 * q; the guest runs when this returns 0.  A refused state is an error
 * quoting QEMU's reason (QEMU then exits). */
int vm_snapshot_load(vm_qmp *q, const char *state_path, int timeout_ms, kiln_error **err);
void vm_nap_ms(long ms);

/* vm_kvm_usable() with the host's paths and KILN_ACCEL as parameters (tests
 * present a kvm_pvm-only host); *why gets a static reason either way. */
bool vm_kvm_check(const char *sys_module, const char *dev_kvm, const char *force, const char **why);

#endif

/* internal.h — helpers shared by the vm/ sources: child processes and the
 * registry of live VMs that the signal handler cleans up. */
#ifndef KILN_VM_INTERNAL_H
#define KILN_VM_INTERNAL_H

#include <sys/types.h>

#include "vm/vm.h"

/* Run a program to completion; a non-zero exit becomes an error quoting its
 * stderr.  Used for qemu-img. */
int vm_run_tool(char *const argv[], kiln_error **err);

/* Start a program in its own process group, killed if kiln dies (PDEATHSIG),
 * stdin from /dev/null, stdout+stderr appended to log_path. */
pid_t vm_spawn(char *const argv[], const char *log_path, kiln_error **err);

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

/* vm_kvm_usable() with the host's paths and KILN_ACCEL as parameters (tests
 * present a kvm_pvm-only host); *why gets a static reason either way. */
bool vm_kvm_check(const char *sys_module, const char *dev_kvm, const char *force, const char **why);

#endif

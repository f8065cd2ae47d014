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

/* Files of a VM, removed by vm_destroy and by the signal handler. */
#define VM_MAX_FILES 10
struct vm_files {
	pid_t pid;                        /* QEMU, 0 before it starts */
	char *dir;
	char *paths[VM_MAX_FILES];        /* absolute, NULL-terminated */
};
void vm_registry_add(struct vm_files *f);
void vm_registry_remove(struct vm_files *f);

#endif

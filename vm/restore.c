/* restore.c — the one restore of a VM snapshot, for sandboxes and builder
 * VMs: QEMU started (vm_spawn) with the snapshot's machine (machine.c), its
 * RAM file (private copy-on-write, or shared for a VM that is saved again)
 * and disk under a temporary overlay, waiting with `-incoming defer`; then
 * the device state is loaded over QMP and the guest resumed. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guest/guest.h"
#include "vm/internal.h"

enum { R_CONSOLE, R_QMP, R_QEMU_LOG, R_AGENT0, R_MEM = R_AGENT0 + VM_AGENT_PORTS };
_Static_assert(R_MEM + 1 < VM_MAX_FILES, "vm_files has room for every file (and the NULL)");

static void restore_argv(const struct vm_restore_config *c, kiln_strv *av)
{
	struct vm_machine m = {
		.accel = c->accel, .cpus = c->cpus, .memory_mib = c->memory_mib, .net = c->net, .dir = c->dir,
		.memory_file = c->memory_file, .memory_private = !c->memory_shared, .disk = c->disk, .disk_snapshot = true,
		.disk_backing = c->disk_backing,
	};

	vm_machine_argv(&m, av);
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

vm_instance *vm_restore(const struct vm_restore_config *c, struct vm_restore_stats *stats, kiln_error **err)
{
	struct vm_restore_stats dummy;
	struct vm_restore_stats *s = stats ? stats : &dummy;
	vm_instance *v = kiln_xcalloc(1, sizeof(*v));
	kiln_strv av = KILN_STRV_INIT;
	char *version = NULL;
	double t0;

	memset(s, 0, sizeof(*s));
	v->accel = c->accel;
	v->detached = c->detached;
	v->keep_dir = c->detached;
	v->files.dir = kiln_xstrdup(c->dir);
	v->files.paths[R_CONSOLE] = kiln_path_join(c->dir, "console.log");
	v->files.paths[R_QMP] = kiln_path_join(c->dir, "qmp.sock");
	v->files.paths[R_QEMU_LOG] = kiln_path_join(c->dir, "qemu.log");
	for (unsigned i = 0; i < VM_AGENT_PORTS; i++)
		v->files.paths[R_AGENT0 + i] = vm_agent_socket_path(c->dir, i);
	/* a shared RAM file is the VM's own copy: removed with it */
	if (c->memory_shared)
		v->files.paths[R_MEM] = kiln_xstrdup(c->memory_file);
	if (!c->detached)
		vm_registry_add(&v->files);

	restore_argv(c, &av);
	struct vm_spawn_opts so = { .log_path = v->files.paths[R_QEMU_LOG], .tmpdir = c->dir, .detached = c->detached };
	t0 = vm_now_ms();
	if ((v->files.pid = vm_spawn(av.v, &so, err)) < 0) {
		v->files.pid = 0;
		goto fail;
	}
	if (c->detached)
		v->start_time = vm_proc_start_time(v->files.pid);
	if (c->on_spawn && c->on_spawn(c->ud, v->files.pid, err) < 0)
		goto fail;
	if ((v->qmp = vm_qmp_connect(v->files.paths[R_QMP], c->qmp_timeout_ms > 0 ? c->qmp_timeout_ms : 10000, err)) ==
	    NULL)
		goto died;
	s->spawn_ms = vm_now_ms() - t0;
	version = vm_qmp_version_string(v->qmp);
	if (c->on_version && c->on_version(c->ud, version, err) < 0)
		goto fail;
	t0 = vm_now_ms();
	if (vm_snapshot_load(v->qmp, c->state, 30000, err) < 0)
		goto died;
	s->load_ms = vm_now_ms() - t0;
	kiln_strv_free(&av);
	free(version);
	return v;
died:
	if (vm_qemu_gone(v, WNOHANG))
		wrap_died(v, err);
fail:
	kiln_strv_free(&av);
	free(version);
	vm_destroy(v);
	return NULL;
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
	free(v->files.dir);
	free(v);
}

/* snapshot.c — the VM side of snapshots: saving a paused guest's device state
 * with x-ignore-shared (the RAM file stays put) and loading it into a QEMU
 * waiting with `-incoming defer`, both through a file descriptor passed over
 * QMP; and the one fingerprint of what a snapshot depends on. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

#include "guest/guest.h"
#include "vm/internal.h"

char *vm_overlay_path(const vm_instance *v)
{
	return kiln_path_join(vm_dir(v), "root.qcow2");
}

char *vm_qmp_version_string(const vm_qmp *q)
{
	const json_t *v = vm_qmp_version(q);
	const json_t *qe = v ? json_object_get(v, "qemu") : NULL;
	const char *pkg = v ? kiln_json_str(v, "package") : NULL;

	if (qe == NULL)
		return kiln_xstrdup("unknown");
	return kiln_xasprintf("%d.%d.%d%s%s", (int)kiln_json_int(qe, "major", 0), (int)kiln_json_int(qe, "minor", 0),
			      (int)kiln_json_int(qe, "micro", 0), pkg && *pkg ? " " : "", pkg ? pkg : "");
}

/* The state file goes to QEMU as a file descriptor (QMP getfd, migration
 * URI fd:NAME): a jailed QEMU can neither open host paths nor spawn a
 * helper (-sandbox spawn=deny rules out exec:), and it needs no path. */
#define STATE_FD_NAME "kiln-state"

static int pass_state_fd(vm_qmp *q, const char *path, bool write, kiln_error **err)
{
	int fd = write ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : open(path, O_RDONLY | O_CLOEXEC);
	json_t *args, *r;

	if (fd < 0)
		return kiln_err_errno(err, errno, "%s", path);
	args = json_pack("{s:s}", "fdname", STATE_FD_NAME);
	r = vm_qmp_execute_fd(q, "getfd", args, fd, 5000, err);
	json_decref(args);
	close(fd); /* QEMU has its own copy */
	if (r == NULL)
		return -1;
	json_decref(r);
	return 0;
}

static int set_ignore_shared(vm_qmp *q, bool events, kiln_error **err)
{
	json_t *caps = json_array(), *r;

	json_array_append_new(caps, json_pack("{s:s, s:b}", "capability", "x-ignore-shared", "state", 1));
	if (events)
		json_array_append_new(caps, json_pack("{s:s, s:b}", "capability", "events", "state", 1));
	json_t *args = json_pack("{s:o}", "capabilities", caps);
	r = vm_qmp_execute(q, "migrate-set-capabilities", args, 5000, err);
	json_decref(args);
	if (r == NULL)
		return -1;
	json_decref(r);
	return 0;
}

/* Poll query-migrate until the migration ends. */
static int wait_migration(vm_qmp *q, double deadline, kiln_error **err)
{
	for (;;) {
		json_t *r = vm_qmp_execute(q, "query-migrate", NULL, 5000, err);
		const char *st;
		int rc = 1;
		if (r == NULL)
			return -1;
		st = kiln_json_str(r, "status");
		if (st && strcmp(st, "completed") == 0)
			rc = 0;
		else if (st && (strcmp(st, "failed") == 0 || strcmp(st, "cancelled") == 0)) {
			const char *why = kiln_json_str(r, "error-desc");
			rc = kiln_err(err, KILN_E_GENERIC, "migration %s: %s", st, why ? why : "no reason given");
		}
		json_decref(r);
		if (rc <= 0)
			return rc;
		if (kiln_now_ms() >= deadline)
			return kiln_err(err, KILN_E_GENERIC, "saving the VM state did not finish in time");
		kiln_sleep_ms(2);
	}
}

int vm_snapshot_save(vm_instance *v, const char *state_path, int timeout_ms, kiln_error **err)
{
	vm_qmp *q = vm_get_qmp(v);

	if (q == NULL)
		return kiln_err(err, KILN_E_GENERIC, "saving the VM state to %s: no QMP connection", state_path);
	return vm_snapshot_save_qmp(q, state_path, timeout_ms, err);
}

int vm_snapshot_save_qmp(vm_qmp *q, const char *state_path, int timeout_ms, kiln_error **err)
{
	double deadline = kiln_now_ms() + timeout_ms;
	json_t *r = NULL, *args = NULL;
	char *uri = NULL;
	int rc = -1;

	if ((r = vm_qmp_execute(q, "stop", NULL, 5000, err)) == NULL)
		goto out;
	json_decref(r);
	if (set_ignore_shared(q, false, err) < 0 || pass_state_fd(q, state_path, true, err) < 0)
		goto out;
	uri = kiln_xstrdup("fd:" STATE_FD_NAME);
	args = json_pack("{s:s}", "uri", uri);
	if ((r = vm_qmp_execute(q, "migrate", args, 5000, err)) == NULL)
		goto out;
	json_decref(r);
	rc = wait_migration(q, deadline, err);
out:
	if (rc < 0)
		kiln_error_wrap(err, "saving the VM state to %s", state_path);
	json_decref(args);
	free(uri);
	return rc;
}

json_t *vm_snapshot_depends(const char *kernel_dir, enum vm_accel accel, unsigned cpus, unsigned memory_mib, bool net,
			    const char *qemu_version, kiln_error **err)
{
	struct vm_kernel k = { 0 };
	char dk[KILN_DIGEST_MAX], *sig = NULL, *boot = NULL;
	uint32_t khz = 0;
	json_t *d = NULL;

	if (accel == VM_ACCEL_AUTO)
		accel = vm_kvm_usable() ? VM_ACCEL_KVM : VM_ACCEL_TCG;
	if (vm_kernel_open(kernel_dir, &k, err) < 0 || kiln_digest_file(KILN_SHA256, k.vmlinuz, dk, err) < 0)
		goto out;
	/* a restored TCG guest keeps the TSC rate it calibrated at boot */
	if (accel == VM_ACCEL_TCG && vm_host_tsc_khz_cached(&khz, err) < 0)
		goto out;
	sig = vm_machine_signature(accel, cpus, memory_mib, net);
	d = json_pack("{s:s, s:s, s:s, s:i, s:s, s:I}", "kernel_digest", dk, "kernel_release", k.release, "machine", sig,
		      "agent_protocol", (int)GUEST_PROTO_VERSION, "accel", accel == VM_ACCEL_KVM ? "kvm" : "tcg",
		      "tsc_khz", (json_int_t)khz);
	if (qemu_version)
		json_object_set_new(d, "qemu", json_string(qemu_version));
	if ((boot = vm_host_boot_id()) != NULL)
		json_object_set_new(d, "boot_id", json_string(boot));
out:
	vm_kernel_free(&k);
	free(sig);
	free(boot);
	return d;
}

int vm_snapshot_load(vm_qmp *q, const char *state_path, int timeout_ms, kiln_error **err)
{
	double deadline = kiln_now_ms() + timeout_ms;
	json_t *r, *args = NULL;
	char *uri = NULL;
	int rc = -1;

	if (set_ignore_shared(q, false, err) < 0 || pass_state_fd(q, state_path, false, err) < 0)
		goto out;
	uri = kiln_xstrdup("fd:" STATE_FD_NAME);
	args = json_pack("{s:s}", "uri", uri);
	if ((r = vm_qmp_execute(q, "migrate-incoming", args, 5000, err)) == NULL)
		goto out;
	json_decref(r);
	if ((rc = wait_migration(q, deadline, err)) < 0)
		goto out;
	/* The state says "paused" (it was saved from a stopped guest). */
	if ((r = vm_qmp_execute(q, "cont", NULL, 5000, err)) == NULL)
		rc = -1;
	json_decref(r);
out:
	if (rc < 0)
		kiln_error_wrap(err, "loading the VM state from %s", state_path);
	json_decref(args);
	free(uri);
	return rc;
}

int vm_overlay_rebase(const char *overlay, const char *backing_raw, kiln_error **err)
{
	char *const av[] = { "qemu-img", "rebase", "-q", "-u", "-f", "qcow2", "-F", "raw", "-b", (char *)backing_raw,
			     (char *)overlay, NULL };

	if (vm_run_tool(av, err) < 0)
		return kiln_error_wrap(err, "rebasing %s onto %s", overlay, backing_raw);
	return 0;
}

int vm_disk_flatten(const char *top, const char *base, const char *rootfs, const char *rootfs_name, kiln_error **err)
{
	char *const to_base[] = { "qemu-img", "rebase", "-q", "-u", "-f", "qcow2", "-F", "qcow2", "-b", (char *)base,
				  (char *)top, NULL };
	char *const commit[] = { "qemu-img", "commit", "-q", "-d", "-f", "qcow2", (char *)top, NULL };

	/* qemu-img opens the chain by the names in the headers: point them at
	 * the real files for the commit, then give base its stored name back */
	if (vm_run_tool(to_base, err) < 0 || vm_overlay_rebase(base, rootfs, err) < 0 || vm_run_tool(commit, err) < 0 ||
	    vm_overlay_rebase(base, rootfs_name, err) < 0)
		return kiln_error_wrap(err, "writing the changes of %s into %s", top, base);
	return 0;
}

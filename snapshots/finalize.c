/* finalize.c — making a template: boot the rootfs (disk writable, so the
 * start command's files land on it), start the start command detached through
 * the agent, poll the ready command, then pause and save device state, the
 * RAM file and the disk overlay into the store with what they depend on. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "snapshots/internal.h"

#define READY_POLL_MS 100

static void collect(void *user, const void *data, size_t len)
{
	kiln_buf *b = user;

	if (b->len < 16384)
		kiln_buf_add(b, data, len);
}

static void exec_opts(const struct snap_finalize_opts *o, struct guest_exec_opts *x)
{
	guest_exec_opts_init(x);
	x->env = o->env;
	x->cwd = o->workdir;
	x->run_as = o->user;
}

/* Poll the ready command until it exits 0. */
static int wait_ready(guest_conn *c, const struct snap_finalize_opts *o, kiln_error **err)
{
	int timeout = o->ready_timeout_ms > 0 ? o->ready_timeout_ms : 60000;
	double deadline = kiln_now_ms() + timeout;
	kiln_buf out = KILN_BUF_INIT;
	struct guest_result res = { 0 };
	int tries = 0, rc = -1;

	for (;;) {
		struct guest_exec_opts x;
		double left = deadline - kiln_now_ms();
		exec_opts(o, &x);
		x.shell = o->ready_cmd;
		x.on_stdout = x.on_stderr = collect;
		x.user = &out;
		x.timeout_ms = left > 1000 ? (uint64_t)left : 1000;
		kiln_buf_reset(&out);
		tries++;
		if (guest_exec(c, &x, NULL, 0, (int)x.timeout_ms + 5000, &res, err) < 0)
			goto out;
		if (res.signal == 0 && res.exit_code == 0) {
			kiln_info("snapshot: ready after %d tries", tries);
			rc = 0;
			goto out;
		}
		if (kiln_now_ms() + READY_POLL_MS >= deadline)
			break;
		kiln_sleep_ms(READY_POLL_MS);
	}
	while (out.len && (out.buf[out.len - 1] == '\n' || out.buf[out.len - 1] == ' '))
		out.buf[--out.len] = '\0';
	if (res.signal)
		kiln_err(err, KILN_E_GENERIC, "ready command '%s' did not succeed within %d ms (%d tries, last killed by "
			 "signal %d); its output: %s", o->ready_cmd, timeout, tries, res.signal, out.len ? out.buf : "(none)");
	else
		kiln_err(err, KILN_E_GENERIC, "ready command '%s' did not succeed within %d ms (%d tries, last exit %d); "
			 "its output: %s", o->ready_cmd, timeout, tries, res.exit_code, out.len ? out.buf : "(none)");
out:
	kiln_buf_free(&out);
	return rc;
}

static int start_and_wait(vm_instance *v, const struct snap_finalize_opts *o, kiln_error **err)
{
	struct guest_exec_opts x;
	struct guest_result res;
	guest_conn *c = vm_agent(v); /* owned by the VM */
	guest_proc *p;
	int rc = -1;

	if (c == NULL)
		return kiln_err(err, KILN_E_GENERIC, "the VM has no agent connection");
	if (o->start_cmd && *o->start_cmd) {
		exec_opts(o, &x);
		x.shell = o->start_cmd;
		x.detach = true;
		if ((p = guest_spawn(c, &x, 10000, err)) == NULL) {
			kiln_error_wrap(err, "start command '%s'", o->start_cmd);
			goto out;
		}
		guest_proc_free(p);
	}
	if (o->ready_cmd && *o->ready_cmd && wait_ready(c, o, err) < 0)
		goto out;
	/* The disk blob should hold what the guest wrote so far. */
	guest_exec_opts_init(&x);
	x.shell = "sync";
	if (guest_exec(c, &x, NULL, 0, 30000, &res, err) < 0)
		goto out;
	rc = 0;
out:
	return rc;
}

static char *dup_or_null(const char *s) { return s ? kiln_xstrdup(s) : NULL; }

/* Copy a file (the overlay, before vm_destroy removes it). */
static int copy_file(const char *src, const char *dst, kiln_error **err)
{
	char *data = NULL;
	size_t len = 0;
	int rc;

	if (kiln_read_file(src, &data, &len, 0, err) < 0)
		return -1;
	rc = kiln_write_atomic(dst, data, len, 0644, err);
	free(data);
	return rc;
}

/* The machine a template is made on: its vCPUs, memory and NIC are what its
 * sandboxes get. */
static void machine_of(const struct snap_finalize_opts *o, struct vm_config *vc)
{
	vm_config_init(vc);
	vc->rootfs = o->rootfs;
	vc->cpus = o->cpus ? o->cpus : 1;
	vc->memory_mib = o->memory_mib ? o->memory_mib : 256;
	vc->root_mode = VM_ROOT_WRITABLE;
	vc->kernel_dir = o->kernel_dir;
	/* every template has the NIC (a sandbox may ask for either network);
	 * the start command gets the template's network */
	vc->net = true;
	vc->net_isolated = o->network == VM_NET_NONE;
}

/* Save a ready VM: device state, RAM and disk into the store as c's state,
 * memory and disk blobs (the rootfs blob is in c already); *qemu gets the
 * QEMU version.  The VM is destroyed, also on error. */
static int capture(vm_instance *v, const char *tmpdir, struct snap_config *c, char **qemu, kiln_error **err)
{
	char *state = kiln_path_join(tmpdir, "state"), *overlay = vm_overlay_path(v);
	char *disk = kiln_path_join(tmpdir, "disk.qcow2");
	struct snap_config_blob *b = c->blob;
	double t_save = kiln_now_ms();
	int rc = -1;

	*qemu = vm_qmp_version_string(vm_get_qmp(v));
	if (vm_snapshot_save(v, state, 60000, err) < 0)
		goto out;
	kiln_info("snapshot: device state saved in %.0f ms", kiln_now_ms() - t_save);
	if (snap_blob_put_file(vm_memory_path(v), true, b[SNAP_ROLE_MEMORY].digest, &b[SNAP_ROLE_MEMORY].size, err) < 0 ||
	    snap_blob_put_file(state, false, b[SNAP_ROLE_STATE].digest, &b[SNAP_ROLE_STATE].size, err) < 0 ||
	    copy_file(overlay, disk, err) < 0)
		goto out;
	vm_destroy(v);
	v = NULL;
	/* The backing name is the rootfs blob's own name, relative: the disk blob
	 * sits next to it, and its bytes do not depend on where the store is (a
	 * pulled template keeps its digest). A restore names the backing anyway. */
	if (vm_overlay_rebase(disk, kiln_digest_hex(b[SNAP_ROLE_ROOTFS].digest), err) < 0 ||
	    snap_blob_put_file(disk, false, b[SNAP_ROLE_DISK].digest, &b[SNAP_ROLE_DISK].size, err) < 0)
		goto out;
	rc = 0;
out:
	vm_destroy(v);
	free(state);
	free(overlay);
	free(disk);
	return rc;
}

/* What the template runs and what a restore depends on (the host's record
 * with the QEMU version it ran). */
static int describe(const struct snap_finalize_opts *o, const struct vm_config *vc, json_t *depends,
		    const char *qemu, struct snap_config *c, kiln_error **err)
{
	c->created = snap_utc_now();
	c->start = dup_or_null(o->start_cmd);
	c->ready = dup_or_null(o->ready_cmd);
	c->user = dup_or_null(o->user);
	c->workdir = dup_or_null(o->workdir);
	for (size_t i = 0; o->env && o->env[i]; i++)
		kiln_strv_push(&c->env, o->env[i]);
	c->cpus = vc->cpus;
	c->memory_mib = vc->memory_mib;
	c->has_network = true;
	c->network = o->network;
	json_object_set_new(depends, "qemu", json_string(qemu));
	if (snap_depends_read(depends, "this host's snapshot dependencies", &c->depends, err) < 0)
		return -1;
	c->has_depends = true;
	return 0;
}

/* The working set a lazy start fetches first: a trial restore of the new
 * template (only where templates are served; $KILN_WORKSET=0 skips it). */
static void record_workset(const char *digest)
{
	const char *ws = getenv("KILN_WORKSET");
	kiln_error *e = NULL;

	if (!snap_serve() || (ws && strcmp(ws, "0") == 0))
		return;
	if (snap_workset_record(digest, &e) < 0) {
		kiln_warn("%s (a lazy start fetches on first touch only)", kiln_error_message(e));
		kiln_error_free(e);
	}
}

char *snap_finalize(const struct snap_finalize_opts *o, kiln_error **err)
{
	struct vm_config vc;
	vm_instance *v = NULL;
	struct snap_config cfg = { 0 };
	struct snap_config_blob *root = &cfg.blob[SNAP_ROLE_ROOTFS];
	json_t *depends = NULL;
	char *tmpdir = NULL, *qemu = NULL, *text = NULL, *result = NULL;
	char d_cfg[KILN_DIGEST_MAX];
	double t0 = kiln_now_ms();

	machine_of(o, &vc);
	if (o->rootfs == NULL) {
		kiln_err(err, KILN_E_USAGE, "no rootfs given");
		goto out;
	}
	if (o->name && snap_ref_check(o->name, err) < 0)
		goto out;
	/* what the snapshot depends on (the QEMU version is added once it runs);
	 * a TCG guest boots with the host's TSC rate recorded here */
	if ((depends = vm_snapshot_depends(o->kernel_dir, VM_ACCEL_AUTO, vc.cpus, vc.memory_mib, vc.net, NULL, err)) ==
	    NULL)
		goto out;
	vc.tsc_khz = (uint32_t)kiln_json_int(depends, "tsc_khz", 0);
	if (o->on_rootfs)
		o->on_rootfs(o->on_rootfs_ud, o->rootfs);
	/* The rootfs goes into the store first: the disk overlay will point at it. */
	if (snap_blob_put_file(o->rootfs, true, root->digest, &root->size, err) < 0)
		goto out;
	if ((tmpdir = kiln_mkdtemp("kiln-snap", err)) == NULL)
		goto out;
	if ((v = vm_boot(&vc, err)) == NULL)
		goto out;
	if (!vm_has_agent(v)) {
		kiln_err(err, KILN_E_NOTFOUND, "no guest agent (PREFIX/lib/kiln/kiln-agent, bin/kiln-agent in a checkout, or $KILN_AGENT) to run the start command");
		goto out;
	}
	if (start_and_wait(v, o, err) < 0)
		goto out;
	int saved = capture(v, tmpdir, &cfg, &qemu, err);
	v = NULL; /* capture destroyed it */
	if (saved < 0 || describe(o, &vc, depends, qemu, &cfg, err) < 0)
		goto out;
	text = snap_config_write(&cfg);
	if (snap_blob_put_data(text, strlen(text), d_cfg, err) < 0)
		goto out;
	if (o->name && snap_ref_set(o->name, d_cfg, err) < 0)
		goto out;
	kiln_info("snapshot: template %s made in %.0f ms", d_cfg, kiln_now_ms() - t0);
	result = kiln_xstrdup(d_cfg);
	record_workset(d_cfg);
out:
	if (result == NULL)
		kiln_error_wrap(err, "snapshot of %s", o->rootfs ? o->rootfs : "(none)");
	vm_destroy(v);
	if (tmpdir) {
		kiln_error *e = NULL;
		if (kiln_rm_rf(tmpdir, &e) < 0)
			kiln_error_free(e);
	}
	snap_config_free(&cfg);
	free(tmpdir);
	free(qemu);
	json_decref(depends);
	free(text);
	return result;
}

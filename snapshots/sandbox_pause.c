/* sandbox_pause.c — a running sandbox saved: pause (memory, device state
 * and disk into ID/paused/, QEMU stopped), resume (vm_restore of those files,
 * as a template's), commit (the same files made into a new template while
 * the sandbox goes on).  The guest's RAM is the jail's private copy in
 * /dev/shm (share=on: it is the guest's memory), its disk the template's
 * under QEMU's temporary overlay, reached through QEMU's fd of it and
 * written into a copy of the base disk (vm_disk_flatten). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "snapshots/internal.h"

/* QEMU's temporary disk overlay (snapshot=on: created in dir/run and
 * unlinked at once), as /proc/PID/fd/N. */
static char *overlay_of(pid_t pid, const char *dir, kiln_error **err)
{
	char *fds = kiln_xasprintf("/proc/%ld/fd", (long)pid), *want = kiln_xasprintf("%s/run/vl.", dir);
	char *found = NULL;
	DIR *d = opendir(fds);
	struct dirent *de;

	while (d && found == NULL && (de = readdir(d)) != NULL) {
		char *p = kiln_xasprintf("%s/%s", fds, de->d_name), target[4096];
		ssize_t n = readlink(p, target, sizeof(target) - 1);
		if (n > 0 && (target[n] = '\0', strncmp(target, want, strlen(want)) == 0))
			found = p;
		else
			free(p);
	}
	if (d)
		closedir(d);
	if (found == NULL)
		kiln_err(err, KILN_E_NOTFOUND, "QEMU %ld has no disk overlay in %s/run", (long)pid, dir);
	free(fds);
	free(want);
	return found;
}

static vm_qmp *qmp_of(const char *dir, const json_t *st, kiln_error **err)
{
	char *path = kiln_path_join(dir, "qmp.sock");
	vm_qmp *q = vm_qmp_connect(path, 5000, err);

	if (q && vm_qmp_peer_check(q, (uid_t)kiln_json_int(st, "uid", 0), err) < 0) {
		vm_qmp_close(q);
		q = NULL;
	}
	free(path);
	return q;
}

static int qmp_simple(vm_qmp *q, const char *cmd, kiln_error **err)
{
	json_t *r = vm_qmp_execute(q, cmd, NULL, 5000, err);

	json_decref(r);
	return r ? 0 : -1;
}

/* The disk the sandbox's QEMU runs on: a paused-and-resumed one's own,
 * else its template's. */
static char *base_disk(const char *dir, const json_t *st, const snap_template *t)
{
	const char *own = kiln_json_str(st, "disk");

	return own ? kiln_path_join(dir, own) : kiln_xstrdup(t->disk);
}

/* Save a running sandbox into out/: state (the guest is stopped by it),
 * memory (with a RAM copy: jailed), top.qcow2 (the disk's changes). */
static int save(vm_qmp *q, const char *dir, const json_t *st, const char *out, bool *have_mem, kiln_error **err)
{
	char *state = kiln_path_join(out, "state"), *mem = kiln_path_join(out, "memory");
	char *ram = kiln_path_join(dir, "ram"), *top = kiln_path_join(out, "top.qcow2"), *ov = NULL;
	int rc = -1;

	if (kiln_mkdir_p(out, 0700, err) < 0 || vm_snapshot_save_qmp(q, state, 30000, err) < 0)
		goto out;
	*have_mem = access(ram, F_OK) == 0;
	if (*have_mem && kiln_copy_sparse(ram, mem, false, err) < 0)
		goto out;
	if ((ov = overlay_of((pid_t)kiln_json_int(st, "pid", 0), dir, err)) == NULL || kiln_copy_sparse(ov, top, false, err) < 0)
		goto out;
	rc = 0;
out:
	free(state);
	free(mem);
	free(ram);
	free(top);
	free(ov);
	return rc;
}

static int flatten(const char *out, const char *base, const snap_template *t, bool move, kiln_error **err)
{
	char *top = kiln_path_join(out, "top.qcow2"), *disk = kiln_path_join(out, "disk.qcow2");
	int rc = -1;

	if (move ? rename(base, disk) < 0 : kiln_copy_sparse(base, disk, false, err) < 0) {
		if (move)
			kiln_err_errno(err, errno, "rename %s", base);
		goto out;
	}
	if (vm_disk_flatten(top, disk, t->rootfs, strrchr(t->rootfs, '/') + 1, err) < 0)
		goto out;
	unlink(top);
	rc = 0;
out:
	free(top);
	free(disk);
	return rc;
}

/* The sandbox's state under its lock, checked to be `want`. */
static json_t *locked_state(const char *id, const char *want, int *lock, kiln_error **err)
{
	json_t *st;

	if ((st = snap_sandbox_state(id, err)) == NULL)
		return NULL;
	json_decref(st);
	if ((*lock = snap_state_lock(id, err)) < 0)
		return NULL;
	if ((st = snap_sandbox_state(id, err)) != NULL && strcmp(snap_sandbox_liveness(st), want) != 0) {
		kiln_err(err, KILN_E_GENERIC, "sandbox %s is %s, not %s", id, snap_sandbox_liveness(st), want);
		json_decref(st);
		st = NULL;
	}
	if (st == NULL) {
		close(*lock);
		*lock = -1;
	}
	return st;
}

static void set_creator(json_t *st, const char *state)
{
	json_object_set_new(st, "state", json_string(state));
	json_object_set_new(st, "creator", json_integer(getpid()));
	json_object_set_new(st, "creator_start", json_integer((json_int_t)vm_proc_start_time(getpid())));
}

int snap_sandbox_pause(const char *id, double *ms, kiln_error **err)
{
	double t0 = kiln_now_ms();
	char *dir = snap_sandbox_dir(id), *out = kiln_path_join(dir, "paused.new"), *paused = kiln_path_join(dir, "paused");
	char *base = NULL, *run = kiln_path_join(dir, "run");
	snap_template *t = NULL;
	vm_qmp *q = NULL;
	json_t *st;
	bool have_mem = false, stopped = false;
	int lock = -1, rc = -1;

	if ((st = locked_state(id, "running", &lock, err)) == NULL)
		goto out;
	if ((t = snap_template_open(kiln_json_str(st, "template"), err)) == NULL)
		goto out;
	base = base_disk(dir, st, t);
	set_creator(st, "pausing");
	if (snap_state_write(dir, st, err) < 0 || (q = qmp_of(dir, st, err)) == NULL)
		goto fail;
	kiln_rm_rf(out, NULL);
	if (save(q, dir, st, out, &have_mem, err) < 0)
		goto fail;
	vm_qmp_close(q);
	q = NULL;
	/* Everything of the guest is out: QEMU, its RAM copy and run/ go. */
	snap_qemu_stop(st);
	stopped = true;
	vm_dir_cleanup(dir);
	if (kiln_rm_rf(run, err) < 0 ||
	    flatten(out, base, t, kiln_json_str(st, "disk") != NULL, err) < 0 || kiln_rm_rf(paused, err) < 0)
		goto fail;
	if (rename(out, paused) < 0) {
		kiln_err_errno(err, errno, "rename %s", out);
		goto fail;
	}
	json_object_set_new(st, "state", json_string("paused"));
	json_object_set_new(st, "disk", json_string("paused/disk.qcow2"));
	json_object_set_new(st, "memory", have_mem ? json_string("paused/memory") : json_null());
	json_object_del(st, "expires_ms"); /* its timeout starts again at resume */
	if (snap_state_write(dir, st, err) < 0)
		goto out;
	if (ms)
		*ms = kiln_now_ms() - t0;
	rc = 0;
	goto out;
fail:
	/* Not stopped yet: let the guest go on as it was. */
	if (q && !stopped) {
		kiln_error *e = NULL;
		if (qmp_simple(q, "cont", &e) < 0)
			kiln_error_free(e);
	}
	json_object_set_new(st, "state", json_string("running"));
	snap_state_write(dir, st, NULL);
out:
	if (rc < 0)
		kiln_error_wrap(err, "pausing sandbox %s", id);
	if (lock >= 0)
		close(lock);
	vm_qmp_close(q);
	json_decref(st);
	snap_template_free(t);
	free(dir);
	free(out);
	free(paused);
	free(base);
	free(run);
	return rc;
}

int snap_sandbox_resume(const char *id, double *ms, kiln_error **err)
{
	double t0 = kiln_now_ms();
	char *dir = snap_sandbox_dir(id), *mem = kiln_path_join(dir, "paused/memory");
	char *state = kiln_path_join(dir, "paused/state"), *disk = kiln_path_join(dir, "paused/disk.qcow2");
	char *run = kiln_path_join(dir, "run");
	struct snap_create_stats s;
	struct snap_net_opts net;
	struct vm_egress_rule *rules = NULL;
	struct vm_port *ports = NULL;
	snap_template *t = NULL;
	json_t *st;
	int lock = -1, rc = -1;

	if ((st = locked_state(id, "paused", &lock, err)) == NULL)
		goto out;
	/* the network it was created with (mode, egress rules, published ports), not the template's default */
	if (snap_net_from_state(json_object_get(st, "network"), &net, &rules, &ports, err) < 0)
		goto out;
	if ((t = snap_template_open(kiln_json_str(st, "template"), err)) == NULL ||
	    snap_template_check(t, false, err) < 0)
		goto out;
	/* The template's machine with the paused files (an unconfined one's RAM
	 * is the template's, its pages in the state stream). */
	struct snap_template paused = *t;
	if (json_is_string(json_object_get(st, "memory")))
		paused.memory = mem;
	paused.disk = disk;
	paused.state = state;
	/* a QEMU an interrupted resume left (its pid is recorded) goes first */
	snap_qemu_stop(st);
	vm_dir_cleanup(dir);
	set_creator(st, "resuming");
	if (snap_state_write(dir, st, err) < 0 || kiln_rm_rf(run, err) < 0)
		goto fail;
	if (snap_sandbox_restore_into(&paused, id, dir, st, json_object_get(st, "network") ? &net : NULL, &s, err) <
	    0) {
		snap_qemu_stop(st);
		vm_dir_cleanup(dir);
		goto fail;
	}
	unlink(mem); /* copied into the jail's RAM copy; the disk stays: QEMU runs on it */
	unlink(state);
	json_object_set_new(st, "state", json_string("running"));
	json_object_del(st, "memory");
	snap_state_set_timeout(st, kiln_json_int(st, "timeout_s", 0));
	if (snap_state_write(dir, st, err) < 0)
		goto out;
	if (kiln_json_int(st, "timeout_s", 0) > 0)
		snap_watch_start(id);
	if (ms)
		*ms = kiln_now_ms() - t0;
	rc = 0;
	goto out;
fail:
	json_object_set_new(st, "state", json_string("paused"));
	snap_state_write(dir, st, NULL);
out:
	if (rc < 0)
		kiln_error_wrap(err, "resuming sandbox %s", id);
	if (lock >= 0)
		close(lock);
	json_decref(st);
	snap_template_free(t);
	free(rules);
	free(ports);
	free(dir);
	free(mem);
	free(state);
	free(disk);
	free(run);
	return rc;
}

char *snap_sandbox_commit(const char *id, const char *name, kiln_error **err)
{
	char *dir = snap_sandbox_dir(id), *out = kiln_path_join(dir, "commit.tmp"), *ram = kiln_path_join(dir, "ram");
	char *base = NULL, *f_mem = kiln_path_join(out, "memory"), *f_state = kiln_path_join(out, "state");
	char *f_disk = kiln_path_join(out, "disk.qcow2"), *text = NULL, *result = NULL;
	char d_mem[KILN_DIGEST_MAX], d_state[KILN_DIGEST_MAX], d_disk[KILN_DIGEST_MAX], d_cfg[KILN_DIGEST_MAX];
	uint64_t s_mem = 0, s_state = 0, s_disk = 0;
	snap_template *t = NULL;
	vm_qmp *q = NULL;
	json_t *st = NULL;
	bool have_mem = false, cont = false;
	int lock = -1;

	if (snap_ref_check(name, err) < 0 || (st = locked_state(id, "running", &lock, err)) == NULL)
		goto out;
	if (access(ram, F_OK) < 0) {
		kiln_err(err, KILN_E_USAGE, "sandbox %s runs unconfined: its memory is the template's, copy-on-write, "
			 "with no file of its own to commit", id);
		goto out;
	}
	if ((t = snap_template_open(kiln_json_str(st, "template"), err)) == NULL || (q = qmp_of(dir, st, err)) == NULL)
		goto out;
	base = base_disk(dir, st, t);
	kiln_rm_rf(out, NULL);
	cont = true;
	if (save(q, dir, st, out, &have_mem, err) < 0)
		goto out;
	/* The guest goes on; what it was is in out/. */
	cont = false;
	if (qmp_simple(q, "cont", err) < 0 || flatten(out, base, t, false, err) < 0)
		goto out;
	if (snap_blob_put_file(f_mem, true, d_mem, &s_mem, err) < 0 ||
	    snap_blob_put_file(f_state, false, d_state, &s_state, err) < 0 ||
	    snap_blob_put_file(f_disk, false, d_disk, &s_disk, err) < 0)
		goto out;
	/* the template's config, with the sandbox's env and its own files */
	struct snap_config *cfg = &t->cfg;
	free(cfg->created);
	cfg->created = snap_utc_now();
	const json_t *env = json_object_get(st, "env");
	if (json_is_array(env)) {
		kiln_strv_free(&cfg->env);
		for (size_t i = 0; i < json_array_size(env); i++)
			if (json_is_string(json_array_get(env, i)))
				kiln_strv_push(&cfg->env, json_string_value(json_array_get(env, i)));
	}
	snap_config_set_blob(cfg, SNAP_ROLE_DISK, d_disk, s_disk);
	snap_config_set_blob(cfg, SNAP_ROLE_MEMORY, d_mem, s_mem);
	snap_config_set_blob(cfg, SNAP_ROLE_STATE, d_state, s_state);
	text = snap_config_write(cfg);
	if (snap_blob_put_data(text, strlen(text), d_cfg, err) < 0 || snap_ref_set(name, d_cfg, err) < 0)
		goto out;
	result = kiln_xstrdup(d_cfg);
out:
	if (cont && q) {
		kiln_error *e = NULL;
		if (qmp_simple(q, "cont", &e) < 0)
			kiln_error_free(e);
	}
	if (result == NULL)
		kiln_error_wrap(err, "committing sandbox %s as %s", id, name);
	kiln_rm_rf(out, NULL);
	if (lock >= 0)
		close(lock);
	vm_qmp_close(q);
	json_decref(st);
	snap_template_free(t);
	free(dir);
	free(out);
	free(ram);
	free(base);
	free(f_mem);
	free(f_state);
	free(f_disk);
	free(text);
	return result;
}

/* exec_vm.c — the microVM executor for RUN: one VM per stage, started at
 * the stage's first RUN that misses the cache (restored from the builder VM
 * snapshot, exec_warm.c, or booted from the stage as ext4) and kept for its
 * later RUNs.  Each step runs chrooted in an overlay of its own
 * whose lower layers are the earlier steps' upper directories (and the layers
 * the host made meanwhile, uploaded), so its upper directory is exactly its
 * change set: downloaded, it becomes the layer.  Layout: docs/builder.md. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "builder/internal.h"
#include "guest/guest.h"
#include "vm/vm.h"

#define DEFAULT_SCRATCH_MIB 16384u

/* Secrets and ssh-agent sockets in the guest: a tmpfs of their own (RAM only,
 * never the scratch disk), bind-mounted onto their targets for one step. */
#define SECRETS_DIR "/run/kiln/secrets"

/* Stages up to this size (compressed layers) start from the builder VM
 * snapshot and upload their layers; bigger ones boot from their ext4. */
#define WARM_MAX_BYTES (64ll << 20)
/* Stages from this size on are not uploaded into the restored VM: their
 * ext4 is attached as its spare disk (busybox tar creating a Debian base's
 * 6,700 entries under TCG took 36 s; writing its ext4 on the host 2 s). */
#define WARM_DISK_MIN_BYTES (8ll << 20)

struct build_exec_session {
	vm_instance *vm;       /* booted from the stage's ext4, or */
	struct build_warm_vm *warm; /* restored from the builder VM snapshot */
	guest_conn *conn;      /* the agent, either way */
	const char *bottom;    /* the stage's ext4 in the guest (cold), else NULL */
	bool net;              /* booted with user-mode networking */
	char *work;            /* guest directory holding every step's directories */
	kiln_strv lowers;      /* guest dirs relative to work, bottom first */
	kiln_strv synced;      /* digests of the stage's layers the VM has, bottom first */
	unsigned seq;          /* next step directory number */
	char *rootfs;          /* host ext4 of the stage at boot */
	bool secrets_dir;      /* SECRETS_DIR is mounted */
};

static void end_vm(void *ctx, build_exec_session *s)
{
	if (!s)
		return;
	vm_destroy(s->vm);
	build_warm_stop(s->warm);
	if (s->rootfs)
		unlink(s->rootfs);
	free(s->rootfs);
	free(s->work);
	kiln_strv_free(&s->lowers);
	kiln_strv_free(&s->synced);
	free(s);
}

struct out_ctx {
	const struct build_run_request *req;
	kiln_buf *capture; /* a helper script's output, for its error message */
};

static void on_out(void *user, const void *data, size_t len)
{
	struct out_ctx *o = user;
	if (o->capture) {
		if (o->capture->len < 4096)
			kiln_buf_add(o->capture, data, len);
	} else if (o->req->on_output) {
		o->req->on_output(o->req->output_ud, data, len);
	}
}

/* A script of kiln's own, as root in the VM's root, from the work directory. */
static int guest_script(build_exec_session *s, const char *script, const char *what, kiln_error **err)
{
	const char *argv[] = { VM_GUEST_BUSYBOX, "sh", "-c", script, NULL };
	kiln_buf out = KILN_BUF_INIT;
	struct out_ctx oc = { .capture = &out };
	struct guest_exec_opts eo;
	struct guest_result res;
	int rc = -1;

	guest_exec_opts_init(&eo);
	eo.argv = argv;
	eo.cwd = s->work;
	eo.on_stdout = eo.on_stderr = on_out;
	eo.user = &oc;
	if (guest_exec(s->conn, &eo, NULL, 0, 600000, &res, err) < 0)
		goto out;
	if (res.signal || res.exit_code) {
		while (out.len && out.buf[out.len - 1] == '\n')
			out.buf[--out.len] = '\0';
		kiln_err(err, KILN_E_GENERIC, "%s failed in the builder VM: %s", what, out.len ? out.buf : "(no output)");
		goto out;
	}
	rc = 0;
out:
	kiln_buf_free(&out);
	return rc;
}

/* The stage's layers as an image in the store, then as ext4. */
static int stage_rootfs(const struct build_run_request *req, const char *path, kiln_error **err)
{
	json_t *cfg = build_config_scratch();
	char manifest[KILN_DIGEST_MAX], config[KILN_DIGEST_MAX];
	int rc = build_image_commit(req->store, cfg, req->layers, req->n_layers, "1970-01-01T00:00:00Z", manifest,
				    config, err);

	json_decref(cfg);
	if (rc == 0)
		rc = build_rootfs_write(req->store, manifest, path, err);
	return rc;
}

static int boot(const struct build_vm_opts *vo, const struct build_run_request *req, build_exec_session **out,
		struct build_run_stats *st, kiln_error **err)
{
	build_exec_session *s = kiln_xcalloc(1, sizeof(*s));
	struct vm_config c;
	double t0 = kiln_now_ms();

	s->rootfs = kiln_xasprintf("%s/vm-rootfs-XXXXXX", req->scratch);
	int fd = mkstemp(s->rootfs);
	if (fd < 0) {
		kiln_err_errno(err, errno, "%s", s->rootfs);
		goto fail;
	}
	close(fd);
	if (stage_rootfs(req, s->rootfs, err) < 0)
		goto fail;
	st->ext4_ms = kiln_now_ms() - t0;
	vm_config_init(&c);
	c.rootfs = s->rootfs;
	c.root_mode = VM_ROOT_OVERLAY;
	c.net = s->net = req->stage_network;
	c.scratch_mib = vo && vo->scratch_mib ? vo->scratch_mib : DEFAULT_SCRATCH_MIB;
	c.memory_mib = vo && vo->memory_mib ? vo->memory_mib : BUILD_VM_MEMORY_MIB;
	if (vo && vo->cpus)
		c.cpus = vo->cpus;
	if (vo)
		c.kernel_dir = vo->kernel_dir;
	t0 = kiln_now_ms();
	s->vm = vm_boot(&c, err);
	if (!s->vm) {
		kiln_error_wrap(err, "builder microVM");
		goto fail;
	}
	st->boot_ms = kiln_now_ms() - t0;
	st->booted = true;
	if ((s->conn = vm_agent(s->vm)) == NULL) {
		kiln_err(err, KILN_E_NOTFOUND, "builder microVM: no guest agent (PREFIX/lib/kiln/kiln-agent, "
			 "bin/kiln-agent in a checkout, or $KILN_AGENT) to run the step");
		goto fail;
	}
	s->bottom = VM_GUEST_LOWER_DIR;
	/* on the scratch disk, next to the VM's own upper directory */
	s->work = kiln_xstrdup("/run/kiln/scratch/steps");
	kiln_info("build: builder VM booted in %.0f ms (ext4 of the stage %.0f ms), %s", st->boot_ms, st->ext4_ms,
		  vm_console_path(s->vm));
	const char *argv[] = { VM_GUEST_BUSYBOX, "mkdir", "-p", s->work, NULL };
	struct guest_exec_opts eo;
	struct guest_result res;
	guest_exec_opts_init(&eo);
	eo.argv = argv;
	if (guest_exec(s->conn, &eo, NULL, 0, 60000, &res, err) < 0)
		goto fail;
	if (res.exit_code || res.signal) {
		kiln_err(err, KILN_E_GENERIC, "builder VM: cannot create %s", s->work);
		goto fail;
	}
	for (size_t i = 0; i < req->n_layers; i++)
		kiln_strv_push(&s->synced, req->layers[i].digest);
	*out = s;
	return 0;
fail:
	end_vm(NULL, s);
	return -1;
}

/* Restore the builder VM snapshot and upload the stage's layers: 1 when
 * that cannot be (a layer with whiteouts), the caller then boots. */
static int warm(const struct build_vm_opts *vo, const struct build_run_request *req, bool disk,
		build_exec_session **out, struct build_run_stats *st, kiln_error **err);

/* Does the VM still hold a prefix of the request's layers, and can every
 * layer made since then be handed to it?  0: yes, 1: start afresh. */
static int usable(build_exec_session *s, const struct build_run_request *req)
{
	if (s->synced.n > req->n_layers || (req->stage_network && !s->net))
		return 1;
	for (size_t i = 0; i < s->synced.n; i++)
		if (strcmp(s->synced.v[i], req->layers[i].digest) != 0)
			return 1;
	return 0;
}

/* Layers the host made since the last RUN (COPY, ADD, WORKDIR, cached RUNs)
 * become lower directories.  1 when one has whiteouts: the caller reboots. */
static int sync_layers(build_exec_session *s, const struct build_run_request *req, size_t upto, kiln_error **err)
{
	kiln_strv names = KILN_STRV_INIT;
	size_t first = s->synced.n;
	char *tar = kiln_xasprintf("%s/sync.tar", req->scratch);
	struct guest_xattr_list xl = { 0 };
	int rc = 0;

	if (first >= upto)
		goto out;
	/* one tar for all of them: one guest tar process (each costs under TCG) */
	for (size_t i = first; i < upto; i++)
		kiln_strv_push_owned(&names, kiln_xasprintf("l%u", s->seq++));
	rc = build_layers_plain_tar(req->store, req->layers + first, (const char *const *)names.v, names.n, tar, &xl,
				    err);
	if (rc == 0)
		rc = build_upload_tar_file(s->conn, tar, s->work, err);
	if (rc == 0)
		rc = guest_xattrs_apply(s->conn, s->work, &xl, 60000, err);
	if (rc == 0)
		for (size_t i = first; i < upto; i++) {
			kiln_strv_push(&s->lowers, names.v[i - first]);
			kiln_strv_push(&s->synced, req->layers[i].digest);
		}
out:
	guest_xattr_list_free(&xl);
	unlink(tar);
	free(tar);
	kiln_strv_free(&names);
	return rc;
}

/* The step's overlay, its /proc /sys /dev and resolv.conf, and its mounts.
 * Mount points the image lacks come from a stub directory at the bottom of
 * the overlay, so they never reach the upper directory (the layer). */
static char *setup_script(build_exec_session *s, const struct build_run_request *req, const char *d)
{
	kiln_buf b = KILN_BUF_INIT;

	kiln_buf_addf(&b, "set -e\nd=%s\nmkdir -p $d/u $d/w $d/r $d/stub/proc $d/stub/sys $d/stub/dev $d/stub/etc\n"
			  ": > $d/stub/etc/resolv.conf\n", d);
	for (size_t i = 0; i < req->n_mounts; i++) {
		const struct build_run_mount *m = &req->mounts[i];
		kiln_buf_adds(&b, "t=$d/stub");
		build_shell_quote(&b, m->target);
		kiln_buf_adds(&b, m->file ? "\nmkdir -p \"${t%/*}\"\n[ -e \"$t\" ] || : > \"$t\"\n" : "\nmkdir -p \"$t\"\n");
	}
	kiln_buf_adds(&b, "mount -t overlay -o lowerdir=");
	for (size_t i = s->lowers.n; i-- > 0;)
		kiln_buf_addf(&b, "%s:", s->lowers.v[i]);
	if (s->bottom)
		kiln_buf_addf(&b, "%s:", s->bottom);
	kiln_buf_adds(&b, "$d/stub,upperdir=$d/u,workdir=$d/w,redirect_dir=off,metacopy=off,index=off "
			  "kiln-step $d/r\n");
	kiln_buf_adds(&b, "mount -t proc proc $d/r/proc\nmount -o rbind /sys $d/r/sys\nmount -o rbind /dev $d/r/dev\n");
	if (req->network && s->net)
		kiln_buf_adds(&b, "[ -f /run/kiln/resolv.conf ] && [ -f $d/r/etc/resolv.conf ] && "
				  "mount -o bind /run/kiln/resolv.conf $d/r/etc/resolv.conf\n");
	for (size_t i = 0; i < req->n_mounts; i++) {
		const struct build_run_mount *m = &req->mounts[i];
		kiln_buf_adds(&b, "t=$d/r");
		build_shell_quote(&b, m->target);
		kiln_buf_adds(&b, "\n[ -e \"$t\" ] || mkdir -p \"$t\"\n");
		if (m->type == BUILD_MOUNT_TMPFS) {
			kiln_buf_adds(&b, "mount -t tmpfs");
			if (m->size)
				kiln_buf_addf(&b, " -o size=%llu", (unsigned long long)m->size);
			kiln_buf_adds(&b, " tmpfs \"$t\"\n");
		} else if (m->type == BUILD_MOUNT_SECRET || m->type == BUILD_MOUNT_SSH) {
			kiln_buf_addf(&b, "mount -o bind " SECRETS_DIR "/%s-m%zu \"$t\"\n", d, i);
		} else {
			kiln_buf_addf(&b, "mount -o bind $d/m%zu%s \"$t\"\n", i, m->file ? "/f" : "");
		}
		if (m->readonly)
			kiln_buf_adds(&b, "mount -o remount,bind,ro \"$t\"\n");
	}
	return kiln_buf_detach(&b);
}

/* Processes the command left behind are killed (docker ends the container),
 * then the step's mounts go, so its upper directory is final. */
static char *teardown_script(build_exec_session *s, const char *d)
{
	return kiln_xasprintf("d=%s\nr=$PWD/$d/r\n"
			      "for p in $(ls -l /proc/[0-9]*/root 2>/dev/null | grep -F \" -> $r\" | "
			      "sed 's|.*/proc/\\([0-9]*\\)/root.*|\\1|'); do kill -9 $p; done\n"
			      "umount -l $d/r\n",
			      d);
}

static int run_command(build_exec_session *s, const struct build_run_request *req, const char *root,
		       kiln_error **err)
{
	kiln_strv argv = KILN_STRV_INIT, env = KILN_STRV_INIT;
	struct out_ctx oc = { .req = req };
	struct guest_exec_opts eo;
	struct guest_result res;
	size_t i;
	json_t *a;
	int rc = -1;

	json_array_foreach(req->argv, i, a)
		kiln_strv_push(&argv, json_string_value(a) ? json_string_value(a) : "");
	for (size_t k = 0; k < req->n_env; k++) {
		size_t kl = strcspn(req->env[k], "=");
		bool over = false;
		for (size_t j = 0; j < req->n_step_env; j++)
			over |= !strncmp(req->step_env[j], req->env[k], kl + 1);
		if (!over)
			kiln_strv_push(&env, req->env[k]);
	}
	for (size_t k = 0; k < req->n_step_env; k++)
		kiln_strv_push(&env, req->step_env[k]);
	if (argv.n == 0) {
		kiln_err(err, KILN_E_INVALID, "RUN with an empty command");
		goto out;
	}
	guest_exec_opts_init(&eo);
	eo.argv = (const char *const *)argv.v;
	eo.env = (const char *const *)env.v;
	eo.cwd = req->workdir;
	eo.root = root;
	eo.no_network = s->net && !req->network;
	/* root too goes through the image's passwd: HOME=/root as docker sets it */
	eo.run_as = req->user && req->user[0] ? req->user : "0";
	eo.on_stdout = eo.on_stderr = on_out;
	eo.user = &oc;
	if (guest_exec(s->conn, &eo, NULL, 0, -1, &res, err) < 0)
		goto out;
	if (res.signal) {
		kiln_err(err, KILN_E_GENERIC, "the command was killed by signal %d", res.signal);
		goto out;
	}
	if (res.exit_code != 0) {
		kiln_err(err, KILN_E_GENERIC, "the command returned a non-zero code: %d", res.exit_code);
		goto out;
	}
	rc = 0;
out:
	kiln_strv_free(&argv);
	for (size_t k = 0; k < env.n; k++) /* secrets' copies */
		explicit_bzero(env.v[k], strlen(env.v[k]));
	kiln_strv_free(&env);
	return rc;
}

/* The step's ssh relays stop and its secrets go (best effort: the VM ends
 * with the stage anyway, and it is never snapshotted once it held them). */
static void stop_relays(build_exec_session *s, const struct build_run_request *req, const char *d,
			struct build_ssh_relay **relays)
{
	bool any = false;

	for (size_t i = 0; i < req->n_mounts; i++) {
		build_ssh_relay_stop(relays[i]);
		relays[i] = NULL;
		any |= req->mounts[i].type == BUILD_MOUNT_SECRET || req->mounts[i].type == BUILD_MOUNT_SSH;
	}
	if (any && s && s->secrets_dir) {
		char *script = kiln_xasprintf("rm -f " SECRETS_DIR "/%s-m*", d);
		kiln_error *e = NULL;
		if (guest_script(s, script, "removing the step's secrets", &e) < 0)
			kiln_error_free(e);
		free(script);
	}
}

/* Cache mounts come back to the host: a fresh copy replaces the old one. */
static int save_mounts(build_exec_session *s, const struct build_run_request *req, const char *d, kiln_error **err)
{
	for (size_t i = 0; i < req->n_mounts; i++) {
		const struct build_run_mount *m = &req->mounts[i];
		if (!m->save)
			continue;
		char *g = kiln_xasprintf("%s/%s/m%zu", s->work, d, i);
		char *fresh = kiln_xasprintf("%s.new", m->src_dir), *old = kiln_xasprintf("%s.old", m->src_dir);
		int rc = kiln_rm_rf(fresh, err);
		if (rc == 0)
			rc = kiln_rm_rf(old, err);
		if (rc == 0)
			rc = guest_download_dir(s->conn, g, fresh, 600000, err);
		if (rc == 0 && (rename(m->src_dir, old) < 0 || rename(fresh, m->src_dir) < 0))
			rc = kiln_err_errno(err, errno, "cache mount %s", m->src_dir);
		if (rc == 0)
			rc = kiln_rm_rf(old, err);
		free(g);
		free(fresh);
		free(old);
		if (rc < 0)
			return kiln_error_wrap(err, "saving the cache mount %s", m->target);
	}
	return 0;
}

/* A secret goes through the exec's stdin into the secrets tmpfs: never a
 * file on the host, the scratch disk or in a command line. */
static int put_secret(build_exec_session *s, const struct build_run_mount *m, const char *path, kiln_error **err)
{
	char owner[32], mode[16];
	struct guest_exec_opts eo;
	struct guest_result res;

	snprintf(owner, sizeof(owner), "%u:%u", (unsigned)m->uid, (unsigned)m->gid);
	snprintf(mode, sizeof(mode), "%o", (unsigned)m->mode);
	const char *argv[] = { VM_GUEST_BUSYBOX, "sh", "-c", "umask 077 && cat > \"$1\" && chown \"$2\" \"$1\" && chmod \"$3\" \"$1\"",
			       "sh", path, owner, mode, NULL };
	guest_exec_opts_init(&eo);
	eo.argv = argv;
	if (guest_exec(s->conn, &eo, m->data, m->len, 60000, &res, err) < 0)
		return -1;
	if (res.exit_code || res.signal)
		return kiln_err(err, KILN_E_GENERIC, "cannot write the secret in the builder VM");
	return 0;
}

/* The VM now holds secrets (or an agent's socket): no snapshot of it. */
static int secrets_begin(build_exec_session *s, kiln_error **err)
{
	if (s->warm)
		build_warm_taint(s->warm);
	if (s->secrets_dir)
		return 0;
	if (guest_script(s, "mkdir -p " SECRETS_DIR " && mount -t tmpfs -o mode=0700,size=64m kiln-secrets " SECRETS_DIR,
			 "making the secrets' tmpfs", err) < 0)
		return -1;
	s->secrets_dir = true;
	return 0;
}

static int upload_mounts(build_exec_session *s, const struct build_run_request *req, const char *d,
			 struct build_ssh_relay **relays, kiln_error **err)
{
	for (size_t i = 0; i < req->n_mounts; i++) {
		const struct build_run_mount *m = &req->mounts[i];
		char *g = kiln_xasprintf("%s/%s/m%zu", s->work, d, i);
		int rc = 0;
		if (m->type == BUILD_MOUNT_SECRET || m->type == BUILD_MOUNT_SSH) {
			char *path = kiln_xasprintf(SECRETS_DIR "/%s-m%zu", d, i);
			rc = secrets_begin(s, err);
			if (rc == 0 && m->type == BUILD_MOUNT_SECRET)
				rc = put_secret(s, m, path, err);
			else if (rc == 0)
				rc = build_ssh_relay_start(s->conn, path, m, &relays[i], err);
			free(path);
		} else if (m->src_tar)
			rc = build_upload_tar_file(s->conn, m->src_tar, g, err);
		else if (m->src_dir)
			rc = guest_upload_dir(s->conn, m->src_dir, g, 600000, err);
		free(g);
		if (rc < 0)
			return kiln_error_wrap(err, "RUN --mount %s", m->target);
	}
	return 0;
}

/* The session a step runs in: the stage's VM if it can take the step (its
 * layers synced), else a new one, restored from the warm snapshot or booted. */
static int session_for(void *ctx, build_exec_session **sp, const struct build_run_request *req,
		       struct build_run_stats *st, kiln_error **err)
{
	const struct build_vm_opts *vo = ctx;
	double t = kiln_now_ms();

	if (*sp && usable(*sp, req)) {
		end_vm(ctx, *sp);
		*sp = NULL;
	}
	if (*sp) {
		int r = sync_layers(*sp, req, req->n_layers, err);
		if (r < 0)
			return -1;
		if (r == 1) {
			kiln_info("build: a layer with whiteouts since the last RUN: restarting the builder VM");
			end_vm(ctx, *sp);
			*sp = NULL;
		}
	}
	st->sync_ms = kiln_now_ms() - t;
	if (!*sp) {
		int64_t bytes = 0;
		for (size_t i = 0; i < req->n_layers; i++)
			bytes += req->layers[i].size;
		const char *w = getenv("KILN_BUILDER_WARM"), *mx = getenv("KILN_BUILDER_WARM_MAX_MIB");
		int64_t max = mx && *mx ? strtoll(mx, NULL, 10) << 20 : WARM_MAX_BYTES;
		const char *dm = getenv("KILN_BUILDER_DISK_MIN_MIB");
		int64_t disk_min = dm && *dm ? strtoll(dm, NULL, 10) << 20 : WARM_DISK_MIN_BYTES;
		int r = 1;
		if (bytes <= max && !(w && !strcmp(w, "0")) && (r = warm(vo, req, bytes >= disk_min, sp, st, err)) < 0)
			return -1;
		if (r == 1 && boot(vo, req, sp, st, err) < 0)
			return -1;
	}
	return 0;
}

/* Step d's command in the session: its mounts uploaded and set up, the
 * command run in the step's root, torn down, what cache mounts keep saved. */
static int exec_step(build_exec_session *s, const struct build_run_request *req, const char *d, kiln_error **err)
{
	char *root = kiln_xasprintf("%s/%s/r", s->work, d), *script = NULL;
	struct build_ssh_relay **relays = req->n_mounts ? kiln_xcalloc(req->n_mounts, sizeof(*relays)) : NULL;
	bool mounted = false;
	int rc = -1;

	if (upload_mounts(s, req, d, relays, err) < 0)
		goto out;
	script = setup_script(s, req, d);
	if (guest_script(s, script, "setting up the step", err) < 0)
		goto out;
	mounted = true;
	rc = run_command(s, req, root, err);
	free(script);
	script = teardown_script(s, d);
	mounted = false;
	if (rc == 0)
		rc = guest_script(s, script, "ending the step", err);
	else
		guest_script(s, script, "ending the step", NULL);
	stop_relays(s, req, d, relays);
	if (rc < 0 || save_mounts(s, req, d, err) < 0) {
		rc = -1;
		goto out;
	}
	if (req->n_mounts) {
		/* the mounts' copies can be large: not kept for the stage */
		free(script);
		script = kiln_xasprintf("rm -rf %s/m*", d);
		rc = guest_script(s, script, "removing the step's mounts", err);
	}
out:
	if (mounted) {
		free(script);
		script = teardown_script(s, d);
		guest_script(s, script, "ending the step", NULL);
	}
	if (relays)
		stop_relays(s, req, d, relays);
	free(relays);
	free(script);
	free(root);
	return rc < 0 ? -1 : 0;
}

static int run_vm(void *ctx, build_exec_session **sp, const struct build_run_request *req, struct build_layer *out,
		  kiln_error **err)
{
	struct build_run_stats dummy, *st = req->stats ? req->stats : &dummy;
	char *d = NULL, *upper = NULL, *gupper = NULL;
	struct build_changes ch = { 0 };
	int rc = -1;
	double t;

	memset(st, 0, sizeof(*st));
	if (session_for(ctx, sp, req, st, err) < 0)
		goto out;
	build_exec_session *s = *sp;

	t = kiln_now_ms();
	d = kiln_xasprintf("s%u", s->seq++);
	if (exec_step(s, req, d, err) < 0)
		goto out;
	st->exec_ms = kiln_now_ms() - t;

	t = kiln_now_ms();
	upper = kiln_xasprintf("%s/upper-%s", req->scratch, d);
	gupper = kiln_xasprintf("%s/%s/u", s->work, d);
	if (kiln_rm_rf(upper, err) < 0 || build_upper_changes(s->conn, gupper, upper, &ch, err) < 0)
		goto out;
	build_changes_finish(&ch);
	double t_ch = kiln_now_ms();
	int64_t epoch = 0;
	const char *sde = getenv("SOURCE_DATE_EPOCH");
	if (sde && *sde)
		epoch = strtoll(sde, NULL, 10);
	if (build_layer_write(req->store, &ch, req->compression, epoch, out, err) < 0)
		goto out;
	kiln_info("run: capture: download and change list %.0f ms, layer %.0f ms (%zu entries)", t_ch - t,
		  kiln_now_ms() - t_ch, ch.n);
	char *rel = kiln_xasprintf("%s/u", d);
	kiln_strv_push_owned(&s->lowers, rel);
	for (size_t i = s->synced.n; i < req->n_layers; i++) /* none left: synced above or at boot */
		kiln_strv_push(&s->synced, req->layers[i].digest);
	kiln_strv_push(&s->synced, out->digest);
	st->capture_ms = kiln_now_ms() - t;
	/* the time split of a RUN step, for bench/build.sh (KILN_LOG=info) */
	kiln_info("run: ext4 %.0f ms, vm start %.0f ms, sync %.0f ms, command %.0f ms, layer capture %.0f ms",
		  st->ext4_ms, st->boot_ms, st->sync_ms, st->exec_ms, st->capture_ms);
	rc = 0;
out:
	if (upper) {
		kiln_error *e2 = NULL;
		if (kiln_rm_rf(upper, &e2) < 0)
			kiln_error_free(e2);
	}
	build_changes_free(&ch);
	free(d);
	free(upper);
	free(gupper);
	return rc;
}

/* A stage's layers as an ext4 the size of the builder VM's spare disk. */
static int stage_disk(const struct build_run_request *req, build_exec_session *s, kiln_error **err)
{
	s->rootfs = kiln_xasprintf("%s/vm-stage-XXXXXX", req->scratch);
	int fd = mkstemp(s->rootfs);
	if (fd < 0)
		return kiln_err_errno(err, errno, "%s", s->rootfs);
	close(fd);
	if (stage_rootfs(req, s->rootfs, err) < 0)
		return -1;
	struct stat st;
	if (stat(s->rootfs, &st) < 0)
		return kiln_err_errno(err, errno, "%s", s->rootfs);
	if (st.st_size > VM_SPARE_BYTES)
		return kiln_err(err, KILN_E_LIMIT, "the stage's ext4 is larger than the builder VM's disk");
	if (truncate(s->rootfs, (off_t)VM_SPARE_BYTES) < 0)
		return kiln_err_errno(err, errno, "%s", s->rootfs);
	return 0;
}

/* disk: attach the stage as an ext4 instead of uploading its layers. */
static int warm(const struct build_vm_opts *vo, const struct build_run_request *req, bool disk,
		build_exec_session **out, struct build_run_stats *st, kiln_error **err)
{
	build_exec_session *s = kiln_xcalloc(1, sizeof(*s));
	double t0 = kiln_now_ms();
	int rc = -1;

	kiln_strv base = KILN_STRV_INIT;
	size_t n_base = req->n_base_layers <= req->n_layers ? req->n_base_layers : 0;

	if (disk) {
		if (stage_disk(req, s, err) < 0)
			goto out;
		st->ext4_ms = kiln_now_ms() - t0;
		t0 = kiln_now_ms();
		n_base = 0;
	}
	for (size_t i = 0; i < n_base; i++)
		kiln_strv_push(&base, req->layers[i].digest);
	rc = build_warm_start(req->store, vo, req->scratch, base.v, n_base, req->stage_secrets, s->rootfs, &s->warm,
			      err);
	kiln_strv_free(&base);
	if (rc < 0)
		goto out;
	s->conn = build_warm_conn(s->warm);
	s->net = true;
	s->work = kiln_xstrdup("/run/kiln/w");
	st->boot_ms = kiln_now_ms() - t0;
	st->booted = st->restored = true;
	t0 = kiln_now_ms();
	if (disk) {
		/* every layer is in the ext4, the bottom of each step's overlay */
		s->bottom = BUILD_GUEST_STAGE_DIR;
		for (size_t i = 0; i < req->n_layers; i++)
			kiln_strv_push(&s->synced, req->layers[i].digest);
	} else if (build_warm_has_base(s->warm)) {
		/* restored with the base in place, where sync_layers puts it */
		for (size_t i = 0; i < n_base; i++) {
			kiln_strv_push_owned(&s->lowers, kiln_xasprintf("l%u", s->seq++));
			kiln_strv_push(&s->synced, req->layers[i].digest);
		}
		st->base_restored = true;
	} else if ((rc = sync_layers(s, req, n_base, err)) == 0) {
		rc = build_warm_save_base(s->warm, err);
	}
	if (rc == 0)
		rc = sync_layers(s, req, req->n_layers, err);
	st->sync_ms = kiln_now_ms() - t0;
	if (rc == 0) {
		kiln_info("build: builder VM restored in %.0f ms%s, %zu layers uploaded in %.0f ms", st->boot_ms,
			  disk ? " with the stage's ext4 as its disk" : st->base_restored ? " with its base" : "",
			  disk ? (size_t)0 : req->n_layers - (st->base_restored ? n_base : 0), st->sync_ms);
		*out = s;
		s = NULL;
	} else if (rc == 1) {
		kiln_info("build: the stage has a layer with whiteouts: booting its ext4 instead");
	}
out:
	if (rc < 0) {
		/* a snapshot that will not restore must not fail the build */
		kiln_warn("build: the builder VM snapshot did not start (%s): booting instead", kiln_error_message(*err));
		kiln_error_clear(err);
		rc = 1;
	}
	if (rc == 1)
		st->booted = st->restored = st->base_restored = false;
	end_vm(NULL, s);
	return rc;
}

const struct build_executor_ops build_executor_vm = {
	.name = "microvm",
	.run = run_vm,
	.end = end_vm,
};

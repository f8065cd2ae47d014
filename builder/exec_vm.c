/* exec_vm.c — the microVM executor for RUN: the stage so far becomes an ext4
 * rootfs (rootfs stage), a VM boots it read-only under an overlayfs whose
 * upper directory is the step's change set, the command runs through the
 * guest agent, and the upper directory comes back as one OCI layer (overlay
 * whiteouts → .wh. files, opaque directories → .wh..wh..opq). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "builder/internal.h"
#include "guest/guest.h"
#include "vm/vm.h"

#define UPPER "/run/kiln/upper"


static void on_out(void *user, const void *data, size_t len)
{
	const struct build_run_request *req = user;
	if (req->on_output)
		req->on_output(req->output_ud, data, len);
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

/* Overlayfs upper dir (downloaded to `dir`) → change items. */
static int upper_changes(guest_conn *conn, const char *dir, struct build_changes *ch, kiln_error **err)
{
	build_tree *t = NULL;

	if (build_tree_open(dir, NULL, &t, err) < 0)
		return -1;
	for (size_t i = 0; i < build_tree_count(t); i++) {
		const struct build_entry *e = build_tree_entry(t, i);
		/* as docker: these are the runtime's, never part of a layer */
		if (strcmp(e->path, "etc/resolv.conf") == 0 || strcmp(e->path, "etc/hosts") == 0 ||
		    strcmp(e->path, "etc/hostname") == 0)
			continue;
		char *host = kiln_path_join(dir, e->path);
		struct build_item it = { 0 };

		if (S_ISCHR(e->st.st_mode) && major(e->st.st_rdev) == 0 && minor(e->st.st_rdev) == 0) {
			/* overlayfs whiteout: the path was deleted */
			const char *slash = strrchr(e->path, '/');
			it.dest = slash ? kiln_xasprintf("%.*s/.wh.%s", (int)(slash - e->path), e->path, slash + 1)
					: kiln_xasprintf(".wh.%s", e->path);
			it.mode = S_IFREG | 0644;
		} else {
			it.dest = kiln_xstrdup(e->path);
			it.mode = e->st.st_mode;
			it.uid = e->st.st_uid;
			it.gid = e->st.st_gid;
			it.src_mode = e->st.st_mode;
			it.src_uid = e->st.st_uid;
			it.src_gid = e->st.st_gid;
			it.link = e->link ? kiln_xstrdup(e->link) : NULL;
			if (S_ISREG(e->st.st_mode)) {
				it.src = kiln_xstrdup(host);
				it.size = (uint64_t)e->st.st_size;
			}
		}
		if (S_ISDIR(e->st.st_mode)) {
			/* an opaque directory hides everything below it in the lower layers */
			struct guest_stat gs;
			char *gpath = kiln_xasprintf("%s/%s", UPPER, e->path);
			memset(&gs, 0, sizeof(gs));
			if (guest_stat_path(conn, gpath, GUEST_STAT_XATTRS, &gs, 30000, err) < 0) {
				free(gpath);
				free(host);
				free(it.dest);
				free(it.link);
				free(it.src);
				build_tree_free(t);
				return -1;
			}
			const struct guest_xattr *x = guest_stat_xattr(&gs, "trusted.overlay.opaque");
			if (x && x->len >= 1 && x->value[0] == 'y') {
				struct build_item op = { .dest = kiln_xasprintf("%s/.wh..wh..opq", e->path),
							 .mode = S_IFREG | 0644 };
				if (ch->n == ch->cap) {
					ch->cap = ch->cap ? 2 * ch->cap : 32;
					ch->v = kiln_xrealloc(ch->v, ch->cap * sizeof(*ch->v));
				}
				ch->v[ch->n++] = op;
			}
			guest_stat_free(&gs);
			free(gpath);
		}
		if (ch->n == ch->cap) {
			ch->cap = ch->cap ? 2 * ch->cap : 32;
			ch->v = kiln_xrealloc(ch->v, ch->cap * sizeof(*ch->v));
		}
		ch->v[ch->n++] = it;
		free(host);
	}
	build_tree_free(t);
	return 0;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int run_vm(void *ctx, const struct build_run_request *req, struct build_layer *out, kiln_error **err)
{
	double t0 = now_ms(), t_rootfs = 0, t_boot = 0, t_exec = 0;
	const struct build_vm_opts *vo = ctx;
	char *rootfs = kiln_xasprintf("%s/run-rootfs.ext4", req->scratch);
	char *upper = kiln_xasprintf("%s/run-upper", req->scratch);
	struct build_changes ch = { 0 };
	vm_instance *v = NULL;
	kiln_strv argv = KILN_STRV_INIT, env = KILN_STRV_INIT;
	struct vm_config c;
	int rc = -1;

	if (kiln_rm_rf(upper, err) < 0 || stage_rootfs(req, rootfs, err) < 0)
		goto out;
	t_rootfs = now_ms();
	vm_config_init(&c);
	c.rootfs = rootfs;
	c.root_mode = VM_ROOT_OVERLAY;
	c.net = req->network;
	if (vo) {
		c.cpus = vo->cpus;
		c.memory_mib = vo->memory_mib;
		c.kernel_dir = vo->kernel_dir;
	}
	v = vm_boot(&c, err);
	if (!v) {
		kiln_error_wrap(err, "builder microVM");
		goto out;
	}
	t_boot = now_ms();
	size_t i;
	json_t *a;
	json_array_foreach(req->argv, i, a)
		kiln_strv_push(&argv, json_string_value(a) ? json_string_value(a) : "");
	for (size_t k = 0; k < req->n_env; k++)
		kiln_strv_push(&env, req->env[k]);
	struct guest_exec_opts eo;
	struct guest_result res;
	guest_exec_opts_init(&eo);
	eo.argv = (const char *const *)argv.v;
	eo.env = (const char *const *)env.v;
	eo.cwd = req->workdir;
	eo.run_as = req->user && req->user[0] ? req->user : NULL;
	eo.on_stdout = eo.on_stderr = on_out;
	eo.user = (void *)req;
	if (argv.n == 0) {
		kiln_err(err, KILN_E_INVALID, "RUN with an empty command");
		goto out;
	}
	if (guest_exec(vm_agent(v), &eo, NULL, 0, -1, &res, err) < 0)
		goto out;
	if (res.signal) {
		kiln_err(err, KILN_E_GENERIC, "the command was killed by signal %d", res.signal);
		goto out;
	}
	if (res.exit_code != 0) {
		kiln_err(err, KILN_E_GENERIC, "the command returned a non-zero code: %d", res.exit_code);
		goto out;
	}
	t_exec = now_ms();
	if (guest_download_dir(vm_agent(v), UPPER, upper, 600000, err) < 0 ||
	    upper_changes(vm_agent(v), upper, &ch, err) < 0)
		goto out;
	build_changes_finish(&ch);
	int64_t epoch = 0;
	const char *sde = getenv("SOURCE_DATE_EPOCH");
	if (sde && *sde)
		epoch = strtoll(sde, NULL, 10);
	rc = build_layer_write(req->store, &ch, req->compression, epoch, out, err);
	/* the time split of a RUN step, for bench/build.sh (KILN_LOG=info) */
	kiln_info("run: ext4 %.0f ms, vm start %.0f ms, command %.0f ms, layer capture %.0f ms", t_rootfs - t0,
		  t_boot - t_rootfs, t_exec - t_boot, now_ms() - t_exec);
out:
	vm_destroy(v);
	build_changes_free(&ch);
	kiln_strv_free(&argv);
	kiln_strv_free(&env);
	kiln_error *e2 = NULL;
	if (kiln_rm_rf(upper, &e2) < 0)
		kiln_error_free(e2);
	unlink(rootfs);
	free(rootfs);
	free(upper);
	return rc;
}

const struct build_executor_ops build_executor_vm = {
	.name = "microvm",
	.run = run_vm,
};

/* template.c — the end of `kiln build --template`: the image's filesystem as
 * ext4 (rootfs stage) finalised into a template by the snapshot stage, with
 * the start command (default: ENTRYPOINT + CMD), ready command, resources and
 * the image's USER, WORKDIR and ENV. */
#include <stdlib.h>
#include <string.h>

#include "builder/internal.h"
#include "snapshots/snapshots.h"

void build_shell_quote(kiln_buf *b, const char *s)
{
	kiln_buf_addc(b, '\'');
	for (; *s; s++) {
		if (*s == '\'')
			kiln_buf_adds(b, "'\\''");
		else
			kiln_buf_addc(b, *s);
	}
	kiln_buf_addc(b, '\'');
}

char *build_default_start_cmd(const json_t *config)
{
	const json_t *cfg = json_object_get(config, "config");
	kiln_buf b = KILN_BUF_INIT;
	const char *keys[] = { "Entrypoint", "Cmd" };
	size_t i;
	json_t *v;

	for (int k = 0; k < 2; k++)
		json_array_foreach(json_object_get(cfg, keys[k]), i, v) {
			if (!json_is_string(v))
				continue;
			if (b.len)
				kiln_buf_addc(&b, ' ');
			build_shell_quote(&b, json_string_value(v));
		}
	return b.len ? kiln_buf_detach(&b) : NULL;
}

int build_template_make(build_store *s, const char *manifest, const struct build_template_opts *t, const char *rootfs,
			char digest[KILN_DIGEST_MAX], kiln_error **err)
{
	char *data = NULL, *start = NULL, *tdigest = NULL;
	size_t len = 0;
	json_t *m = NULL, *c = NULL;
	kiln_strv env = KILN_STRV_INIT;
	int rc = -1;

	if (build_store_read(s, manifest, &data, &len, 16 << 20, err) < 0 ||
	    !(m = kiln_json_loadb(data, len, manifest, err)))
		goto out;
	free(data);
	data = NULL;
	const char *cd = kiln_json_str(json_object_get(m, "config"), "digest");
	if (!cd || build_store_read(s, cd, &data, &len, 16 << 20, err) < 0 || !(c = kiln_json_loadb(data, len, cd, err))) {
		if (!*err)
			kiln_err(err, KILN_E_INVALID, "manifest %s has no config", manifest);
		goto out;
	}
	if (build_rootfs_write(s, manifest, rootfs, err) < 0)
		goto out;
	const json_t *cfg = json_object_get(c, "config");
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(cfg, "Env"), i, v)
		if (json_is_string(v))
			kiln_strv_push(&env, json_string_value(v));
	start = t->start_cmd ? kiln_xstrdup(t->start_cmd) : build_default_start_cmd(c);
	const char *user = kiln_json_str(cfg, "User"), *wd = kiln_json_str(cfg, "WorkingDir");
	struct snap_finalize_opts so = {
		.rootfs = rootfs,
		.name = t->name,
		.start_cmd = start,
		.ready_cmd = t->ready_cmd,
		.user = user && user[0] ? user : NULL,
		.workdir = wd && wd[0] ? wd : NULL,
		.env = env.n ? (const char *const *)env.v : NULL,
		.cpus = t->cpus,
		.memory_mib = t->memory_mib,
		.network = t->network,
		.ready_timeout_ms = t->ready_timeout_ms,
		.on_rootfs = t->on_rootfs,
		.on_rootfs_ud = t->on_rootfs_ud,
	};
	tdigest = snap_finalize(&so, err);
	if (!tdigest)
		goto out;
	snprintf(digest, KILN_DIGEST_MAX, "%s", tdigest);
	rc = 0;
out:
	if (rc < 0)
		kiln_error_wrap(err, "template");
	free(tdigest);
	free(start);
	free(data);
	json_decref(m);
	json_decref(c);
	kiln_strv_free(&env);
	return rc;
}

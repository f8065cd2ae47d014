/* workset.c — a template's working set: the parts of its rootfs, memory and
 * disk that a restore and a first exec read, recorded at build time by a
 * trial restore whose files the host's file server serves (and logs), stored
 * beside the template so a push carries it and a lazy start fetches it first
 * (docs/distribution.md "Lazy templates"). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "snapshots/internal.h"

static char *workset_path(const char *digest)
{
	char *store = snap_store_dir(), *p = kiln_xasprintf("%s/worksets/%s.json", store, kiln_digest_hex(digest));

	free(store);
	return p;
}

json_t *snap_template_workset(const snap_template *t)
{
	char *p = workset_path(t->digest), *data = NULL;
	size_t len = 0;
	json_t *j = NULL;

	if (kiln_read_file(p, &data, &len, 64 << 20, NULL) == 0)
		j = kiln_json_loadb(data, len, p, NULL);
	free(p);
	free(data);
	return json_is_object(j) ? j : (json_decref(j), NULL);
}

int snap_workset_record(const char *template_ref, kiln_error **err)
{
	const struct snap_serve_ops *ops = snap_serve();
	snap_template *t = NULL;
	char *key = NULL, *dir = NULL, *id = NULL, *path = NULL, *text = NULL;
	guest_conn *c = NULL;
	json_t *ranges = NULL;
	double t0 = kiln_now_ms();
	int rc = -1;

	if (ops == NULL || ops->record_start == NULL || ops->record_end == NULL) {
		kiln_err(err, KILN_E_USAGE, "no file server to record a working set with");
		goto out;
	}
	if ((t = snap_template_open(template_ref, err)) == NULL)
		goto out;
	if (t->served) {
		kiln_err(err, KILN_E_USAGE, "template %s is served lazily: its working set came with it", template_ref);
		goto out;
	}
	if ((dir = ops->record_start(t->digest, t->rootfs, t->memory, t->disk, &key, err)) == NULL)
		goto out;
	free(t->memory);
	free(t->disk);
	free(t->rootfs);
	t->memory = kiln_path_join(dir, "memory");
	t->disk = kiln_path_join(dir, "disk");
	t->rootfs = kiln_path_join(dir, "rootfs");
	t->served = true;
	/* what kiln run does: restore, identity, one command through the agent */
	struct snap_create_stats cs = { 0 };
	if ((id = snap_sandbox_make(t, false, true, NULL, &cs, &c, err)) == NULL)
		goto out;
	static const char *const argv[] = { "/bin/sh", "-c", "true", NULL };
	struct guest_result res = { 0 };
	kiln_error *e = NULL;
	if (snap_guest_setup(c, id, false, &e) < 0 || snap_sandbox_exec_conn(c, id, argv, NULL, NULL, NULL, &res, &e) < 0) {
		kiln_info("working set: the trial exec failed (%s); the restore's reads are kept", kiln_error_message(e));
		kiln_error_free(e);
	}
	rc = 0;
out:
	guest_close(c);
	if (id) {
		kiln_error *ke = NULL;
		if (snap_sandbox_kill(id, &ke) < 0) {
			kiln_warn("removing trial sandbox %s: %s", id, kiln_error_message(ke));
			kiln_error_free(ke);
		}
	}
	if (key) {
		ranges = ops->record_end(key, rc == 0 ? err : NULL);
		if (rc == 0 && ranges == NULL)
			rc = -1;
	}
	if (rc == 0) {
		path = workset_path(t->digest);
		char *d = kiln_xstrdup(path);
		*strrchr(d, '/') = '\0';
		text = kiln_json_dumps_canonical(ranges);
		rc = kiln_mkdir_p(d, 0755, err) < 0 ? -1 : kiln_write_atomic(path, text, strlen(text), 0644, err);
		free(d);
	}
	if (rc == 0) {
		uint64_t bytes[3] = { 0 };
		const char *roles[] = { "rootfs", "memory", "disk" };
		for (int r = 0; r < 3; r++) {
			const json_t *a = json_object_get(ranges, roles[r]);
			for (size_t i = 0; i < json_array_size(a); i++)
				bytes[r] += (uint64_t)json_integer_value(json_array_get(json_array_get(a, i), 1));
		}
		kiln_info("working set of %.19s: rootfs %llu KiB, memory %llu KiB, disk %llu KiB (%.0f ms)", t->digest,
			  (unsigned long long)bytes[0] >> 10, (unsigned long long)bytes[1] >> 10,
			  (unsigned long long)bytes[2] >> 10, kiln_now_ms() - t0);
	}
	if (rc < 0)
		kiln_error_wrap(err, "recording the working set of %s", template_ref);
	json_decref(ranges);
	free(text);
	free(path);
	free(id);
	free(dir);
	free(key);
	snap_template_free(t);
	return rc;
}

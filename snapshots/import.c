/* import.c — the hook template distribution (distrib/tmpl*.c) uses: the
 * stored files of a template for a push, and adding a pulled template to the
 * store.  Imported files must hash to the digests its config names and are
 * stored unchanged (the disk names its backing relative to the blob directory),
 * so a pulled template has the digest it had on its builder.  What a restore
 * checks (docs/security.md) is checked here too, before anything is stored:
 * blob names that are digests, regular files, a disk naming no host file. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "snapshots/internal.h"

char *snap_template_blob(const snap_template *t, const char *role, kiln_error **err)
{
	const char *d = strcmp(role, "config") == 0 ? t->digest : kiln_json_str(json_object_get(t->config, role), "digest");
	enum kiln_digest_algo algo;

	if (d == NULL || kiln_digest_parse(d, &algo, NULL) < 0 || algo != KILN_SHA256) {
		kiln_err(err, KILN_E_INVALID, "template %.19s names no %s blob", t->digest, role);
		return NULL;
	}
	/* a lazy template's big files are the server's (reading them fetches what is missing) */
	if (t->served && strcmp(role, "memory") == 0)
		return kiln_xstrdup(t->memory);
	if (t->served && strcmp(role, "disk") == 0)
		return kiln_xstrdup(t->disk);
	if (t->served && strcmp(role, "rootfs") == 0)
		return kiln_xstrdup(t->rootfs);
	return snap_blob_path(d);
}

/* Move a file the caller hashed into the store, if it has the config's size. */
static int adopt_blob(const json_t *o, const char *src, bool sparse, kiln_error **err)
{
	struct stat st;

	if (stat(src, &st) < 0)
		return kiln_err_errno(err, errno, "stat %s", src);
	if ((json_int_t)st.st_size != kiln_json_int(o, "size", -1))
		return kiln_err(err, KILN_E_INVALID, "%s has %lld bytes, the config wants %lld", src,
				(long long)st.st_size, (long long)kiln_json_int(o, "size", -1));
	return snap_blob_adopt(src, kiln_json_str(o, "digest"), sparse, err);
}

/* A pulled file must be a regular file (a symlink would be moved into the
 * store, or followed to a host file) named by a digest of the store's kind. */
static int check_source(const json_t *cfg, const char *role, const char *src, kiln_error **err)
{
	struct stat st;

	if (snap_check_digest("being imported", role, kiln_json_str(json_object_get(cfg, role), "digest"), err) < 0)
		return -1;
	if (lstat(src, &st) < 0)
		return kiln_err_errno(err, errno, "the template's %s %s", role, src);
	if (!S_ISREG(st.st_mode))
		return kiln_err(err, KILN_E_INVALID, "the template's %s %s is not a regular file (%s): refused", role, src,
				S_ISLNK(st.st_mode) ? "a symlink" : "a special file");
	return 0;
}

/* Store src, which must hash to the digest and size the config gives role. */
static int import_blob(const json_t *cfg, const char *role, const char *src, bool sparse, bool verified,
		       kiln_error **err)
{
	const json_t *o = json_object_get(cfg, role);
	const char *want = kiln_json_str(o, "digest");
	char got[KILN_DIGEST_MAX];
	uint64_t size = 0;

	if (verified) {
		if (adopt_blob(o, src, sparse, err) < 0)
			return kiln_error_wrap(err, "storing the %s", role);
		return 0;
	}
	if (snap_blob_put_file(src, sparse, got, &size, err) < 0)
		return kiln_error_wrap(err, "storing the %s", role);
	if (strcmp(got, want) != 0 || (json_int_t)size != kiln_json_int(o, "size", -1))
		return kiln_err(err, KILN_E_INVALID, "the assembled %s has digest %s (%llu bytes), the config wants %s", role,
				got, (unsigned long long)size, want);
	return 0;
}

char *snap_template_import(const struct snap_import *im, kiln_error **err)
{
	json_t *cfg = NULL;
	char *result = NULL;
	char d_cfg[KILN_DIGEST_MAX];

	if (im->name && snap_ref_check(im->name, err) < 0)
		goto out;
	if ((cfg = kiln_json_loadb(im->config, im->config_len, "template config", err)) == NULL)
		goto out;
	if (kiln_json_int(cfg, "schemaVersion", 0) != SNAP_SCHEMA ||
	    strcmp(kiln_json_str(cfg, "mediaType") ? kiln_json_str(cfg, "mediaType") : "", SNAP_CONFIG_MEDIA) != 0) {
		kiln_err(err, KILN_E_INVALID, "not a kiln template config (schema %d)", (int)kiln_json_int(cfg, "schemaVersion", 0));
		goto out;
	}
	static const char *const roles[] = { "rootfs", "memory", "state", "disk" };
	const char *srcs[] = { im->rootfs, im->memory, im->state, im->disk };
	for (size_t i = 0; i < 4; i++) {
		/* served: only the state is a file here; the others' names are checked */
		if (im->served && strcmp(roles[i], "state") != 0) {
			if (snap_check_digest("being imported", roles[i],
					      kiln_json_str(json_object_get(cfg, roles[i]), "digest"), err) < 0)
				goto out;
		} else if (check_source(cfg, roles[i], srcs[i], err) < 0) {
			goto out;
		}
	}
	/* the disk's qcow2 header may name no backing but the rootfs blob's own
	 * name beside it, and no external data file (as snap_template_check,
	 * which checks a served disk at restore) */
	if (!im->served &&
	    vm_qcow2_check(im->disk, kiln_digest_hex(kiln_json_str(json_object_get(cfg, "rootfs"), "digest")), err) < 0)
		goto out;
	if ((!im->served && (import_blob(cfg, "rootfs", im->rootfs, true, im->verified, err) < 0 ||
			     import_blob(cfg, "memory", im->memory, true, im->verified, err) < 0)) ||
	    import_blob(cfg, "state", im->state, false, im->verified, err) < 0 ||
	    (!im->served && import_blob(cfg, "disk", im->disk, false, im->verified, err) < 0))
		goto out;
	/* The config as pushed (the registry client verified its digest). */
	if (snap_blob_put_data(im->config, im->config_len, d_cfg, err) < 0)
		goto out;
	if (im->name && snap_ref_set(im->name, d_cfg, err) < 0)
		goto out;
	result = kiln_xstrdup(d_cfg);
out:
	if (result == NULL)
		kiln_error_wrap(err, "importing a template");
	json_decref(cfg);
	return result;
}

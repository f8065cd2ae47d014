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
	const struct snap_config_blob *b = snap_config_blob(&t->cfg, role);
	const char *d = strcmp(role, "config") == 0 ? t->digest : b ? b->digest : NULL;
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
static int adopt_blob(const struct snap_config_blob *b, const char *src, bool sparse, kiln_error **err)
{
	struct stat st;

	if (stat(src, &st) < 0)
		return kiln_err_errno(err, errno, "stat %s", src);
	if ((uint64_t)st.st_size != b->size)
		return kiln_err(err, KILN_E_INVALID, "%s has %lld bytes, the config wants %llu", src,
				(long long)st.st_size, (unsigned long long)b->size);
	return snap_blob_adopt(src, b->digest, sparse, err);
}

/* A pulled file must be a regular file (a symlink would be moved into the
 * store, or followed to a host file); its name in the config, a digest of the
 * store's kind, was checked by snap_config_read. */
static int check_source(const char *role, const char *src, kiln_error **err)
{
	struct stat st;

	if (lstat(src, &st) < 0)
		return kiln_err_errno(err, errno, "the template's %s %s", role, src);
	if (!S_ISREG(st.st_mode))
		return kiln_err(err, KILN_E_INVALID, "the template's %s %s is not a regular file (%s): refused", role, src,
				S_ISLNK(st.st_mode) ? "a symlink" : "a special file");
	return 0;
}

/* Store src, which must hash to the digest and size the config gives role. */
static int import_blob(const struct snap_config *cfg, enum snap_role role, const char *src, bool sparse,
		       bool verified, kiln_error **err)
{
	const struct snap_config_blob *b = &cfg->blob[role];
	const char *name = snap_role_name(role);
	char got[KILN_DIGEST_MAX];
	uint64_t size = 0;

	if (verified) {
		if (adopt_blob(b, src, sparse, err) < 0)
			return kiln_error_wrap(err, "storing the %s", name);
		return 0;
	}
	if (snap_blob_put_file(src, sparse, got, &size, err) < 0)
		return kiln_error_wrap(err, "storing the %s", name);
	if (strcmp(got, b->digest) != 0 || size != b->size)
		return kiln_err(err, KILN_E_INVALID, "the assembled %s has digest %s (%llu bytes), the config wants %s", name,
				got, (unsigned long long)size, b->digest);
	return 0;
}

char *snap_template_import(const struct snap_import *im, kiln_error **err)
{
	struct snap_config cfg = { 0 };
	char *result = NULL;
	char d_cfg[KILN_DIGEST_MAX];

	if (im->name && snap_ref_check(im->name, err) < 0)
		goto out;
	if (snap_config_read(im->config, im->config_len, "the imported template's config", &cfg, err) < 0)
		goto out;
	static const enum snap_role roles[] = { SNAP_ROLE_ROOTFS, SNAP_ROLE_MEMORY, SNAP_ROLE_STATE, SNAP_ROLE_DISK };
	const char *srcs[] = { im->rootfs, im->memory, im->state, im->disk };
	for (size_t i = 0; i < 4; i++) {
		/* served: only the state is a file here */
		if ((!im->served || roles[i] == SNAP_ROLE_STATE) && check_source(snap_role_name(roles[i]), srcs[i], err) < 0)
			goto out;
	}
	/* the disk's qcow2 header may name no backing but the rootfs blob's own
	 * name beside it, and no external data file (as snap_template_check,
	 * which checks a served disk at restore) */
	if (!im->served && vm_qcow2_check(im->disk, kiln_digest_hex(cfg.blob[SNAP_ROLE_ROOTFS].digest), err) < 0)
		goto out;
	if ((!im->served && (import_blob(&cfg, SNAP_ROLE_ROOTFS, im->rootfs, true, im->verified, err) < 0 ||
			     import_blob(&cfg, SNAP_ROLE_MEMORY, im->memory, true, im->verified, err) < 0)) ||
	    import_blob(&cfg, SNAP_ROLE_STATE, im->state, false, im->verified, err) < 0 ||
	    (!im->served && import_blob(&cfg, SNAP_ROLE_DISK, im->disk, false, im->verified, err) < 0))
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
	snap_config_free(&cfg);
	return result;
}

/* store.c — the template store under $KILN_HOME/snapshots: blobs by digest
 * (memory files sparse, so zero pages take no space), refs NAME/TAG -> config
 * digest, loading a template with its config blob verified, and the checks
 * that refuse a template this host cannot restore. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "snapshots/internal.h"

char *snap_utc_now(void)
{
	char buf[KILN_TIME_MAX];

	return kiln_xstrdup(kiln_time_rfc3339(time(NULL), buf));
}

char *snap_store_dir(void)
{
	return kiln_home_path(NULL, KILN_PATH_SNAPSHOTS, NULL);
}

char *snap_sandboxes_dir(void)
{
	return kiln_home_path(NULL, KILN_PATH_SANDBOXES, NULL);
}

/* The template blobs: read-only once stored (QEMU maps the memory and backs
 * disks on them), durable before a ref names them. */
static kiln_cas *open_blobs(kiln_error **err)
{
	char *root = kiln_home_path(NULL, KILN_PATH_SNAP_BLOBS, NULL), *tmp = kiln_home_path(NULL, KILN_PATH_SNAP_TMP, NULL);
	const struct kiln_cas_layout lay = { .mode = 0444, .sync = KILN_CAS_SYNC_FULL, .tmp = tmp };
	kiln_cas *c = NULL;

	if (kiln_cas_open(root, &lay, &c, err) < 0)
		c = NULL;
	free(root);
	free(tmp);
	return c;
}

char *snap_blob_path(const char *digest)
{
	return kiln_home_path(NULL, KILN_PATH_SNAP_BLOBS, "sha256/%s", kiln_digest_hex(digest));
}

int snap_blob_put_file(const char *src, bool sparse, char digest[KILN_DIGEST_MAX], uint64_t *size, kiln_error **err)
{
	kiln_cas *c = open_blobs(err);
	int64_t n = 0;
	int rc;

	if (!c)
		return -1;
	rc = kiln_cas_import(c, src, NULL, sparse, digest, &n, err);
	kiln_cas_close(c);
	if (rc == 0 && size)
		*size = (uint64_t)n;
	return rc;
}

int snap_blob_put_data(const void *data, size_t len, char digest[KILN_DIGEST_MAX], kiln_error **err)
{
	kiln_cas *c = open_blobs(err);
	int rc;

	if (!c)
		return -1;
	rc = kiln_cas_put(c, data, len, digest, err);
	kiln_cas_close(c);
	return rc;
}

int snap_blob_adopt(const char *src, const char *digest, bool sparse, kiln_error **err)
{
	kiln_cas *c = open_blobs(err);
	int rc;

	if (!c)
		return -1;
	rc = kiln_cas_adopt(c, src, digest, sparse ? KILN_CAS_SPARSE : 0, err);
	kiln_cas_close(c);
	return rc;
}

/* A reference (common/ref.c) as the store keeps it: refs/[HOST/]NAME/TAG,
 * or refs/[HOST/]NAME/sha256:HEX for one pulled by digest (a tag has no ':'). */
static int split_ref(const char *ref, char **name, char **tag, kiln_error **err)
{
	struct kiln_ref r;

	*name = *tag = NULL;
	if (kiln_ref_parse(ref, &r, err) < 0)
		return kiln_error_wrap(err, "bad template name");
	*name = kiln_ref_repo(&r);
	*tag = kiln_xstrdup(r.digest ? r.digest : r.tag);
	kiln_ref_free(&r);
	return 0;
}

int snap_ref_check(const char *ref, kiln_error **err)
{
	char *name = NULL, *tag = NULL;

	if (split_ref(ref, &name, &tag, err) < 0)
		return -1;
	free(name);
	free(tag);
	return 0;
}

int snap_ref_set(const char *ref, const char *digest, kiln_error **err)
{
	char *name = NULL, *tag = NULL, *dir = NULL, *path = NULL;
	int rc = -1;

	if (split_ref(ref, &name, &tag, err) < 0)
		goto out;
	dir = kiln_home_path(NULL, KILN_PATH_SNAP_REFS, "%s", name);
	path = kiln_xasprintf("%s/%s", dir, tag);
	if (kiln_mkdir_p(dir, 0755, err) < 0)
		goto out;
	char *line = kiln_xasprintf("%s\n", digest);
	rc = kiln_write_atomic(path, line, strlen(line), 0644, err);
	free(line);
out:
	free(name);
	free(tag);
	free(dir);
	free(path);
	return rc;
}

static bool is_hex(const char *s, size_t min)
{
	size_t n = strspn(s, "0123456789abcdef");
	return n >= min && s[n] == '\0';
}

/* A unique blob whose hex starts with prefix. */
static char *resolve_prefix(const char *prefix, kiln_error **err)
{
	char *dir = kiln_home_path(NULL, KILN_PATH_SNAP_BLOBS, "sha256"), *found = NULL;
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	while (d && (de = readdir(d)) != NULL) {
		if (strncmp(de->d_name, prefix, strlen(prefix)) == 0 && is_hex(de->d_name, 64)) {
			if (n++ == 0)
				found = kiln_xasprintf("sha256:%s", de->d_name);
		}
	}
	if (d)
		closedir(d);
	if (n != 1) {
		free(found);
		found = NULL;
		kiln_err(err, n ? KILN_E_USAGE : KILN_E_NOTFOUND, "template %s: %s", prefix,
			 n ? "ambiguous digest prefix" : "no such template");
	}
	free(dir);
	return found;
}

/* The digest a ref file holds, or NULL (NOTFOUND when there is no file). */
static char *read_ref(const char *name, const char *tag, kiln_error **err)
{
	char *path = kiln_home_path(NULL, KILN_PATH_SNAP_REFS, "%s/%s", name, tag), *data = NULL, *digest = NULL;
	size_t len = 0;

	if (kiln_read_file(path, &data, &len, 200, err) < 0) {
		kiln_error_clear(err);
		kiln_err(err, KILN_E_NOTFOUND, "no template %s%s%s", name, strchr(tag, ':') ? "@" : ":", tag);
	} else {
		while (len && (data[len - 1] == '\n' || data[len - 1] == ' '))
			data[--len] = '\0';
		if (strncmp(data, "sha256:", 7) == 0 && is_hex(data + 7, 64))
			digest = kiln_xstrdup(data);
		else
			kiln_err(err, KILN_E_INVALID, "template ref %s is corrupted", path);
	}
	free(path);
	free(data);
	return digest;
}

/* NAME@DIGEST not pulled by that digest: the template DIGEST, if a tag of
 * NAME names it. */
static char *tagged_digest(const char *name, const char *digest)
{
	char *dir = kiln_home_path(NULL, KILN_PATH_SNAP_REFS, "%s", name), *found = NULL;
	DIR *d = opendir(dir);
	struct dirent *de;

	while (d && !found && (de = readdir(d)) != NULL) {
		kiln_error *e = NULL;
		char *got = de->d_name[0] == '.' ? NULL : read_ref(name, de->d_name, &e);
		if (got && strcmp(got, digest) == 0)
			found = got;
		else
			free(got);
		kiln_error_free(e);
	}
	if (d)
		closedir(d);
	free(dir);
	return found;
}

static bool host_dir(const char *s)
{
	return strcmp(s, "localhost") == 0 || strchr(s, '.') || strchr(s, ':') || s[0] == '[';
}

/* NAME:TAG given without a host and not a local name: the template pulled as
 * HOST/NAME:TAG, when exactly one registry's is here (docs/snapshots.md). */
static char *pulled_as(const char *name, const char *tag, kiln_error **err)
{
	char *refs = kiln_home_path(NULL, KILN_PATH_SNAP_REFS, NULL), *found = NULL;
	kiln_strv hosts = KILN_STRV_INIT;
	DIR *d = opendir(refs);
	struct dirent *de;

	while (d && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.' || !host_dir(de->d_name))
			continue;
		char *p = kiln_xasprintf("%s/%s/%s/%s", refs, de->d_name, name, tag);
		if (access(p, F_OK) == 0)
			kiln_strv_push(&hosts, de->d_name);
		free(p);
	}
	if (d)
		closedir(d);
	if (hosts.n == 1) {
		char *full = kiln_xasprintf("%s/%s", hosts.v[0], name);
		found = read_ref(full, tag, err);
		free(full);
	} else if (hosts.n > 1) {
		kiln_buf b = KILN_BUF_INIT;
		for (size_t i = 0; i < hosts.n; i++)
			kiln_buf_addf(&b, "%s%s/%s:%s", i ? ", " : "", hosts.v[i], name, tag);
		kiln_err(err, KILN_E_USAGE, "template %s:%s: pulled from several registries (%s): name one", name, tag,
			 b.buf);
		kiln_buf_free(&b);
	}
	kiln_strv_free(&hosts);
	free(refs);
	return found;
}

static char *resolve_ref(const char *ref, kiln_error **err)
{
	char *name = NULL, *tag = NULL, *digest = NULL;
	struct kiln_ref r = { 0 };

	if (strncmp(ref, "sha256:", 7) == 0) {
		if (!is_hex(ref + 7, 64)) {
			kiln_err(err, KILN_E_USAGE, "bad digest '%s'", ref);
			return NULL;
		}
		return kiln_xstrdup(ref);
	}
	if (is_hex(ref, 8) && strlen(ref) <= 64) {
		kiln_error *e = NULL;
		digest = resolve_prefix(ref, &e);
		if (digest)
			return digest;
		if (strstr(kiln_error_message(e), "ambiguous")) {
			if (err)
				*err = e;
			else
				kiln_error_free(e);
			return NULL;
		}
		kiln_error_free(e); /* not a digest: maybe a name made of hex digits */
	}
	if (split_ref(ref, &name, &tag, err) < 0 || kiln_ref_parse(ref, &r, err) < 0)
		goto out;
	kiln_error *e = NULL;
	digest = read_ref(name, tag, &e);
	if (!digest && e->kind == KILN_E_NOTFOUND && r.digest && (digest = tagged_digest(name, r.digest)))
		kiln_error_clear(&e);
	if (!digest && e->kind == KILN_E_NOTFOUND && !r.host && !r.digest) {
		kiln_error *e2 = NULL;
		if ((digest = pulled_as(name, tag, &e2)) != NULL || e2) {
			kiln_error_free(e);
			e = e2;
		}
	}
	if (e && err)
		*err = e;
	else
		kiln_error_free(e);
out:
	kiln_ref_free(&r);
	free(name);
	free(tag);
	return digest;
}

static const struct snap_serve_ops *serve_ops;

void snap_set_serve_ops(const struct snap_serve_ops *ops) { serve_ops = ops; }
const struct snap_serve_ops *snap_serve(void) { return serve_ops; }
bool snap_template_served(const snap_template *t) { return t->served; }

snap_template *snap_template_open(const char *ref, kiln_error **err)
{
	snap_template *t = kiln_xcalloc(1, sizeof(*t));
	char *path = NULL, *data = NULL;
	char got[KILN_DIGEST_MAX];
	size_t len = 0;

	if ((t->digest = resolve_ref(ref, err)) == NULL)
		goto fail;
	path = snap_blob_path(t->digest);
	if (kiln_read_file(path, &data, &len, 1 << 20, err) < 0) {
		kiln_error_clear(err);
		kiln_err(err, KILN_E_NOTFOUND, "template %s: config blob %s is missing", ref, path);
		goto fail;
	}
	kiln_digest_buf(KILN_SHA256, data, len, got);
	if (strcmp(got, t->digest) != 0) {
		kiln_err(err, KILN_E_INVALID, "template %s is corrupted: its config blob has digest %s, not %s", ref, got,
			 t->digest);
		goto fail;
	}
	if (snap_config_read(data, len, path, &t->cfg, err) < 0)
		goto fail;
	t->memory = snap_blob_path(t->cfg.blob[SNAP_ROLE_MEMORY].digest);
	t->state = snap_blob_path(t->cfg.blob[SNAP_ROLE_STATE].digest);
	t->disk = snap_blob_path(t->cfg.blob[SNAP_ROLE_DISK].digest);
	t->rootfs = snap_blob_path(t->cfg.blob[SNAP_ROLE_ROOTFS].digest);
	if (access(t->memory, F_OK) != 0 && serve_ops && serve_ops->files) {
		/* a lazy template: its big files come from the host's file server */
		kiln_error *e = NULL;
		char *dir = serve_ops->files(t->digest, &e);
		if (dir == NULL && e->kind != KILN_E_NOTFOUND) {
			if (err)
				*err = e;
			else
				kiln_error_free(e);
			goto fail;
		}
		kiln_error_free(e);
		if (dir) {
			free(t->memory);
			free(t->disk);
			free(t->rootfs);
			t->memory = kiln_path_join(dir, "memory");
			t->disk = kiln_path_join(dir, "disk");
			t->rootfs = kiln_path_join(dir, "rootfs");
			t->served = true;
			free(dir);
		}
	}
	free(path);
	free(data);
	return t;
fail:
	kiln_error_wrap(err, "opening template %s", ref);
	free(path);
	free(data);
	snap_template_free(t);
	return NULL;
}

void snap_template_free(snap_template *t)
{
	if (t == NULL)
		return;
	free(t->digest);
	snap_config_free(&t->cfg);
	free(t->memory);
	free(t->state);
	free(t->disk);
	free(t->rootfs);
	free(t);
}

const char *snap_template_digest(const snap_template *t) { return t->digest; }
const struct snap_config *snap_template_config(const snap_template *t) { return &t->cfg; }

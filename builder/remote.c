/* remote.c — `kiln pull`, `kiln push` and FROM a registry: an image's
 * manifest, config and layers moved between the local store and a registry
 * through the registry client.  Pulled blobs land in tmp/ (resumable) and
 * enter the store only through its verifying import. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "builder/internal.h"
#include "regclient/regclient.h"

struct ctx {
	build_store *s;
	const struct build_remote_opts *o;
};

static int have_blob(void *ud, const char *digest)
{
	struct ctx *x = ud;
	return build_store_has_blob(x->s, digest);
}

static void progress(void *ud, const struct rc_progress *p)
{
	struct ctx *x = ud;
	if (x->o->progress)
		x->o->progress(x->o->ud, p);
}

/* The descriptors an image manifest needs: config first, then the layers. */
static int descriptors(const char *what, json_t *m, json_t **out, kiln_error **err)
{
	json_t *all = json_array(), *layers = json_object_get(m, "layers"), *d;
	size_t i;

	json_array_append(all, json_object_get(m, "config"));
	json_array_foreach(layers, i, d) {
		if (json_object_get(d, "urls")) {
			json_decref(all);
			return kiln_err(err, KILN_E_INVALID, "%s: layer %zu is a foreign layer (urls), not supported",
					what, i);
		}
		json_array_append(all, d);
	}
	json_array_foreach(all, i, d) {
		const char *dg = kiln_json_str(d, "digest");
		if (!dg || kiln_digest_parse(dg, NULL, err) < 0 || strncmp(dg, "sha256:", 7) != 0) {
			json_decref(all);
			if (!*err)
				kiln_err(err, KILN_E_INVALID, "%s: descriptor %zu has no digest", what, i);
			else
				kiln_error_wrap(err, "%s: descriptor %zu (the local store keeps sha256 blobs)", what,
						i);
			return -1;
		}
	}
	*out = all;
	return 0;
}

int build_image_pull(build_store *s, const char *ref, const struct build_remote_opts *o,
		     char digest[KILN_DIGEST_MAX], kiln_error **err)
{
	static const struct build_remote_opts none = { 0 };
	struct oci_imgref r = { 0 };
	struct oci_manifest check = { 0 };
	struct rc_doc doc = { 0 };
	rc_client *c = NULL;
	json_t *m = NULL, *descs = NULL, *d;
	struct rc_blob *blobs = NULL;
	char **paths = NULL;
	char stored[KILN_DIGEST_MAX];
	size_t n = 0, i;
	int rc = -1;

	if (!o)
		o = &none;
	if (oci_imgref_parse(ref, &r, err) < 0 || build_store_lock(s, false, err) < 0)
		goto out;
	if (!(c = rc_client_new(r.host, &(struct rc_client_opts){ .max_rate = o->max_rate, .user = o->user, .pass = o->pass }, err)) ||
	    rc_image_manifest_get(c, r.repo, o->pin ? o->pin : oci_imgref_reference(&r), &doc, err) < 0)
		goto out;
	if (oci_tmpl_is_artifact(doc.data, doc.len)) {
		kiln_err(err, KILN_E_INVALID,
			 "%s is a kiln template, not an image: kiln run and kiln sandbox create take it; "
			 "FROM and image pulls want the image it was built from (kiln push --image NAME %s)",
			 ref, ref);
		goto out;
	}
	if (oci_manifest_parse(doc.data, doc.len, doc.media_type, &check, err) < 0 ||
	    !(m = kiln_json_loadb(doc.data, doc.len, "manifest", err))) {
		kiln_error_wrap(err, "%s: manifest %s", ref, doc.digest);
		goto out;
	}
	if (strncmp(doc.digest, "sha256:", 7) != 0 || descriptors(ref, m, &descs, err) < 0)
		goto out;
	n = json_array_size(descs);
	blobs = kiln_xcalloc(n, sizeof(*blobs));
	paths = kiln_xcalloc(n, sizeof(*paths));
	json_array_foreach(descs, i, d) {
		const char *dg = kiln_json_str(d, "digest");
		/* a stable name: an interrupted pull resumes from its .part */
		paths[i] = kiln_home_path(build_store_home(s), KILN_PATH_TMP, "pull-%s", kiln_digest_hex(dg));
		snprintf(blobs[i].digest, sizeof(blobs[i].digest), "%s", dg);
		blobs[i].size = json_is_integer(json_object_get(d, "size")) ? kiln_json_int(d, "size", -1) : -1;
		blobs[i].path = paths[i];
	}
	struct ctx x = { s, o };
	struct rc_xfer_opts xo = { .parallel = o->parallel, .have = have_blob, .progress = progress, .ud = &x };
	if (rc_blobs_pull(c, r.repo, blobs, n, &xo, err) < 0)
		goto out;
	for (i = 0; i < n; i++) {
		if (access(paths[i], F_OK) != 0)
			continue; /* it was already in the store */
		if (build_store_adopt(s, paths[i], blobs[i].digest, err) < 0)
			goto out;
	}
	if (build_store_put(s, doc.data, doc.len, stored, err) < 0)
		goto out;
	if (strcmp(stored, doc.digest) != 0) {
		kiln_err(err, KILN_E_INVALID, "%s: manifest stored as %s, expected %s", ref, stored, doc.digest);
		goto out;
	}
	if (build_store_tag(s, ref, doc.digest, err) < 0)
		goto out;
	memcpy(digest, doc.digest, KILN_DIGEST_MAX);
	rc = 0;
out:
	for (i = 0; i < n; i++)
		free(paths[i]);
	free(paths);
	free(blobs);
	json_decref(descs);
	json_decref(m);
	oci_manifest_free(&check);
	rc_doc_free(&doc);
	rc_client_free(c);
	oci_imgref_free(&r);
	return rc;
}

/* Blobs of local images named HOST/REPO:… (pulled from HOST) are likely in
 * REPO there: a cross-repository mount then replaces their upload. */
static void find_mounts(build_store *s, json_t *images, const struct oci_imgref *dest, struct rc_blob *blobs,
			size_t n, kiln_strv *repos)
{
	const char *name;
	json_t *v;

	json_object_foreach(images, name, v) {
		struct oci_imgref r;
		kiln_error *e = NULL;
		char *data = NULL;
		size_t len = 0;
		json_t *m = NULL;
		const char *dg = kiln_json_str(v, "digest");
		if (!kiln_ref_has_host(name) || oci_imgref_parse(name, &r, &e) < 0) {
			kiln_error_free(e);
			continue;
		}
		if (dg && strcmp(r.host, dest->host) == 0 && strcmp(r.repo, dest->repo) != 0 &&
		    build_store_read(s, dg, &data, &len, 4 << 20, &e) == 0 && (m = json_loadb(data, len, 0, NULL))) {
			json_t *descs = NULL;
			if (descriptors(name, m, &descs, &e) == 0) {
				for (size_t i = 0; i < n; i++) {
					json_t *d;
					size_t k;
					json_array_foreach(descs, k, d) {
						if (!blobs[i].mount_from &&
						    strcmp(kiln_json_str(d, "digest"), blobs[i].digest) == 0) {
							kiln_strv_push(repos, r.repo);
							blobs[i].mount_from = repos->v[repos->n - 1];
						}
					}
				}
			}
			json_decref(descs);
		}
		kiln_error_free(e);
		json_decref(m);
		free(data);
		oci_imgref_free(&r);
	}
}

int build_image_push(build_store *s, const char *name, const char *ref, const struct build_remote_opts *o,
		     char digest[KILN_DIGEST_MAX], kiln_error **err)
{
	static const struct build_remote_opts none = { 0 };
	struct oci_imgref r = { 0 };
	rc_client *c = NULL;
	json_t *images = NULL, *m = NULL, *descs = NULL, *d;
	struct rc_blob *blobs = NULL;
	char **paths = NULL, *norm = NULL, *data = NULL;
	kiln_strv repos = KILN_STRV_INIT;
	size_t n = 0, len = 0, i;
	int rc = -1;

	if (!o)
		o = &none;
	if ((norm = kiln_ref_normalize(name, err)) == NULL || oci_imgref_parse(ref, &r, err) < 0 ||
	    build_store_lock(s, false, err) < 0)
		goto out;
	if (r.digest) {
		kiln_err(err, KILN_E_INVALID, "%s: push to a tag, not a digest", ref);
		goto out;
	}
	if (!(images = build_store_images(s, err)))
		goto out;
	const char *local = kiln_json_str(json_object_get(images, norm), "digest");
	if (!local) {
		kiln_err(err, KILN_E_NOTFOUND, "no local image %s (see kiln images)", norm);
		goto out;
	}
	if (build_store_read(s, local, &data, &len, 4 << 20, err) < 0 ||
	    !(m = kiln_json_loadb(data, len, local, err)) || descriptors(name, m, &descs, err) < 0)
		goto out;
	n = json_array_size(descs);
	blobs = kiln_xcalloc(n, sizeof(*blobs));
	paths = kiln_xcalloc(n, sizeof(*paths));
	json_array_foreach(descs, i, d) {
		const char *dg = kiln_json_str(d, "digest");
		paths[i] = build_store_blob_path(s, dg);
		if (!build_store_has_blob(s, dg)) {
			kiln_err(err, KILN_E_NOTFOUND, "%s: blob %s is missing from the local store", name, dg);
			goto out;
		}
		snprintf(blobs[i].digest, sizeof(blobs[i].digest), "%s", dg);
		blobs[i].path = paths[i];
	}
	find_mounts(s, images, &r, blobs, n, &repos);
	struct ctx x = { s, o };
	struct rc_xfer_opts xo = { .parallel = o->parallel, .chunk_size = o->chunk_size, .progress = progress,
				    .ud = &x };
	if (!(c = rc_client_new(r.host, &(struct rc_client_opts){ .max_rate = o->max_rate, .user = o->user, .pass = o->pass }, err)) || rc_blobs_push(c, r.repo, blobs, n, &xo, err) < 0)
		goto out;
	const char *mt = kiln_json_str(m, "mediaType");
	if (rc_manifest_put(c, r.repo, r.tag, mt ? mt : OCI_MT_OCI_MANIFEST, data, len, digest, err) < 0)
		goto out;
	rc = 0;
out:
	if (rc < 0 && *err)
		kiln_error_wrap(err, "push %s to %s", name, ref);
	for (i = 0; i < n; i++)
		free(paths[i]);
	free(paths);
	free(blobs);
	free(data);
	free(norm);
	kiln_strv_free(&repos);
	json_decref(descs);
	json_decref(m);
	json_decref(images);
	rc_client_free(c);
	oci_imgref_free(&r);
	return rc;
}

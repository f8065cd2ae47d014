/* tags.c — the listing endpoints: tags of a repository and the catalog, both
 * paginated with n/last and an RFC 5988 Link header, and the referrers API
 * (manifests whose subject is a digest, optionally filtered by artifactType). */
#include <stdlib.h>
#include <string.h>

#include "registry/internal.h"

static json_t *strv_json(const kiln_strv *v)
{
	json_t *a = json_array();

	for (size_t i = 0; i < v->n; i++)
		json_array_append_new(a, json_string(v->v[i]));
	return a;
}

static void next_link(reg_req *r, const char *path, long n, const char *last)
{
	char *link = kiln_xasprintf("<%s?n=%ld&last=%s>; rel=\"next\"", path, n, last);

	reg_header(r, "Link", link);
	free(link);
}

void reg_tags_handle(reg_req *r)
{
	kiln_strv tags = KILN_STRV_INIT;
	kiln_error *err = NULL;
	const reg_store *st = &r->srv->store;
	const char *last;
	int more = 0, exists;
	long n;

	if (reg_page_args(r, &n, &last) < 0)
		return;
	exists = st->ops->repo_exists(st, r->srv->db, r->name, &err);
	if (exists < 0) {
		reg_internal(r, err);
		return;
	}
	if (exists == 0) {
		reg_error(r, 404, "NAME_UNKNOWN", "repository %s not known to registry", r->name);
		return;
	}
	if (n != 0 && st->ops->tags(st, r->srv->db, r->name, last, n, &tags, &more, &err) < 0) {
		reg_internal(r, err);
		return;
	}
	reg_respond_json(r, 200, json_pack("{s:s,s:o}", "name", r->name, "tags", strv_json(&tags)), NULL);
	if (more) {
		char *path = kiln_xasprintf("/v2/%s/tags/list", r->name);
		next_link(r, path, n, tags.v[tags.n - 1]);
		free(path);
	}
	kiln_strv_free(&tags);
}

void reg_catalog_handle(reg_req *r)
{
	kiln_strv repos = KILN_STRV_INIT;
	kiln_error *err = NULL;
	const char *last;
	int more = 0;
	long n;

	if (reg_page_args(r, &n, &last) < 0)
		return;
	if (n != 0 && r->srv->store.ops->catalog(&r->srv->store, r->srv->db, last, n, &repos, &more, &err) < 0) {
		reg_internal(r, err);
		return;
	}
	reg_respond_json(r, 200, json_pack("{s:o}", "repositories", strv_json(&repos)), NULL);
	if (more)
		next_link(r, "/v2/_catalog", n, repos.v[repos.n - 1]);
	kiln_strv_free(&repos);
}

void reg_referrers_handle(reg_req *r)
{
	static const char index_type[] = "application/vnd.oci.image.index.v1+json";
	const char *at = reg_query(r, "artifactType");
	kiln_error *err = NULL;
	json_t *list;

	if (kiln_digest_parse(r->ref, NULL, &err) < 0) {
		reg_error(r, 400, "DIGEST_INVALID", "%s", kiln_error_message(err));
		kiln_error_free(err);
		return;
	}
	list = json_array();
	if (r->srv->store.ops->referrers(&r->srv->store, r->srv->db, r->name, r->ref, at && *at ? at : NULL, list,
					 &err) < 0) {
		json_decref(list);
		reg_internal(r, err);
		return;
	}
	reg_respond_json(r, 200, json_pack("{s:i,s:s,s:o}", "schemaVersion", 2, "mediaType", index_type, "manifests", list),
			 index_type);
	if (at && *at)
		reg_header(r, "OCI-Filters-Applied", "artifactType");
}

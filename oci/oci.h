/* oci.h — the contract of the OCI formats kiln's registry client and server
 * share: manifest validation (media types, what a manifest references, also
 * used by the fuzzer), image references as a registry sees them, and the
 * names and tags the distribution spec allows.  No I/O, no network. */
#ifndef KILN_OCI_H
#define KILN_OCI_H

#include <stdint.h>

#include "kiln.h"

/* Media types of manifests (the client asks for these four by default). */
#define OCI_MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define OCI_MT_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define OCI_MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define OCI_MT_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"

/* A kiln template version travels as an OCI image manifest with these types
 * and KILN_TMPL_CONFIG_MEDIA (kiln.h) for its config (docs/distribution.md);
 * distrib/ makes and reads them. */
#define OCI_TMPL_ARTIFACT_TYPE "application/vnd.kiln.template.v1"
#define OCI_TMPL_INDEX_MEDIA "application/vnd.kiln.template.index.v1+json"
#define OCI_TMPL_CHUNK_MEDIA "application/vnd.kiln.template.chunk.v1+zstd"
/* Whether a manifest is a kiln template artifact (so image pulls refuse it). */
int oci_tmpl_is_artifact(const char *manifest, size_t len);

/* ---------------------------------------------------------------------------
 * Manifests.  oci_manifest_parse() checks that data is a manifest of one of
 * the supported media types (OCI image manifest / index, Docker schema2
 * manifest / list) and collects what it references.  content_type may be
 * NULL (then the body's mediaType decides).
 * ------------------------------------------------------------------------- */
enum oci_ref_kind { OCI_REF_CONFIG, OCI_REF_LAYER, OCI_REF_MANIFEST };

struct oci_ref {
	enum oci_ref_kind kind;
	char digest[KILN_DIGEST_MAX];
	int64_t size;
	int external;               /* has urls (foreign layer): need not exist here */
};

struct oci_manifest {
	char *media_type;
	char *artifact_type;        /* artifactType, else config.mediaType (image manifests), or NULL */
	char subject[KILN_DIGEST_MAX]; /* "" when there is no subject */
	int is_index;
	struct oci_ref *refs;
	size_t nrefs;
	json_t *annotations;        /* borrowed from json, or NULL */
	json_t *json;               /* the parsed document (owned) */
};

int oci_manifest_parse(const char *data, size_t len, const char *content_type, struct oci_manifest *m,
		       kiln_error **err);
void oci_manifest_free(struct oci_manifest *m);

/* Repository names and tags as the distribution spec defines them (the
 * grammar of every reference: common/ref.c). */
static inline int oci_name_valid(const char *name) { return kiln_ref_name_valid(name); }
static inline int oci_tag_valid(const char *tag) { return kiln_ref_tag_valid(tag); }

/* ---------------------------------------------------------------------------
 * An image reference (kiln_ref_parse, common/ref.c) as a registry sees it
 * (imgref.c): no host (or docker.io) means Docker Hub
 * ("registry-1.docker.io", single names get "library/").  Neither tag nor
 * digest: tag "latest".
 * ------------------------------------------------------------------------- */
struct oci_imgref {
	char *host;   /* "127.0.0.1:5000", "registry-1.docker.io" */
	char *repo;   /* "team/app", "library/busybox" */
	char *tag;    /* NULL when only a digest was given */
	char *digest; /* "sha256:…" or NULL */
};

int oci_imgref_parse(const char *s, struct oci_imgref *r, kiln_error **err);
void oci_imgref_free(struct oci_imgref *r);
/* "HOST/REPO:TAG", "HOST/REPO@DIGEST" or "HOST/REPO:TAG@DIGEST". */
char *oci_imgref_str(const struct oci_imgref *r);
/* What to ask the registry for: the digest if any, else the tag. */
const char *oci_imgref_reference(const struct oci_imgref *r);
/* 1 when HOST[:PORT] is spoken to over plain HTTP (loopback, and the
 * comma-separated HOST[:PORT] list $KILN_INSECURE_REGISTRIES). */
int oci_host_insecure(const char *host);

#endif

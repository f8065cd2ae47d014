/* internal.h — what the files of sign/ share and nothing else uses: storing
 * an attachment (a signature or attestation manifest) and the trust records. */
#ifndef KILN_SIGN_INTERNAL_H
#define KILN_SIGN_INTERNAL_H

#include "sign/sign.h"

/* Store layers as the manifest tagged tag in repo (cosign's shape: a config
 * listing them), with an artifactType and an OCI 1.1 subject when given. */
int sign_attach_put(rc_client *c, const char *repo, const char *tag, json_t *layers, const char *artifact_type,
		    const char *subject, const char *subject_media, size_t subject_size, kiln_error **err);
/* Add layer to what tag holds (an identical one is replaced), then store it;
 * subject (a manifest digest in repo, or NULL) is read for its descriptor. */
int sign_attach_append(rc_client *c, const char *repo, const char *tag, json_t *layer, const char *artifact_type,
		       const char *subject, kiln_error **err);
/* The manifest tagged tag, parsed; NULL with *err NULL when there is none. */
json_t *sign_attach_get(rc_client *c, const char *repo, const char *tag, kiln_error **err);
/* The layers attached to digest (none: an empty array): those of its
 * referrers of artifact_type, when the registry has the API, and of the
 * manifest tagged sha256-HEX.suffix, each once; *found says where. */
json_t *sign_attach_layers(rc_client *c, const char *repo, const char *digest, const char *suffix,
			   const char *artifact_type, struct sign_found *found, kiln_error **err);

#endif

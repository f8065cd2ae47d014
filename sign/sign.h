/* sign.h — the contract of signing and verification (docs/security.md,
 * "Signed templates"): ECDSA P-256 keys, cosign/sigstore signatures stored
 * beside what they sign in any OCI registry, in-toto SLSA provenance, and
 * the runtime host's policy of which keys must have signed what it runs. */
#ifndef KILN_SIGN_H
#define KILN_SIGN_H

#include <stdbool.h>

#include "kiln.h"
#include "regclient/regclient.h"

/* ---------------------------------------------------------------------------
 * Keys (key.c): ECDSA P-256, PEM (PKCS#8 private key, SubjectPublicKeyInfo
 * public key), as cosign's and skopeo's public keys are.
 * ------------------------------------------------------------------------- */
typedef struct sign_key sign_key;

/* Write PREFIX.key (0600, created exclusively: an existing key is never
 * overwritten) and PREFIX.pub. */
int sign_key_generate(const char *prefix, kiln_error **err);
sign_key *sign_key_load_private(const char *path, kiln_error **err);
/* A public key file, or the public half of a private key file. */
sign_key *sign_key_load_public(const char *path, kiln_error **err);
void sign_key_free(sign_key *k);
/* "sha256:HEX" of the public key's DER: how errors, trust records and
 * provenance name a key. */
const char *sign_key_id(const sign_key *k);
/* The file it was read from. */
const char *sign_key_path(const sign_key *k);
/* base64 of the DER ECDSA-SHA256 signature of data (caller frees). */
char *sign_key_sign(const sign_key *k, const void *data, size_t len, kiln_error **err);
/* 1 the base64 signature b64 of data verifies with k, 0 it does not
 * (malformed included: no error then), -1 an error of openssl itself. */
int sign_key_verify(const sign_key *k, const void *data, size_t len, const char *b64, kiln_error **err);

/* ---------------------------------------------------------------------------
 * cosign signatures (cosign.c): a simple-signing payload naming the signed
 * reference and manifest digest, signed with a key, stored as a layer of the
 * OCI image manifest tagged sha256-HEX.sig in the same repository, the
 * signature in the layer's annotation dev.cosignproject.cosign/signature
 * (what `cosign sign --key` and `skopeo copy --sign-by-sigstore-private-key`
 * write and what skopeo's sigstoreSigned policy reads).
 * ------------------------------------------------------------------------- */
#define SIGN_PAYLOAD_MEDIA "application/vnd.dev.cosign.simplesigning.v1+json"
#define SIGN_ANNOTATION "dev.cosignproject.cosign/signature"
#define SIGN_PAYLOAD_TYPE "cosign container image signature"
/* the artifactType of a signature manifest as a referrer: cosign's (what
 * `cosign sign --registry-referrers-mode=oci-1-1` writes as its config's
 * type and `cosign verify --experimental-oci11` asks the referrers API for) */
#define SIGN_SIG_ARTIFACT "application/vnd.dev.cosign.artifact.sig.v1+json"

/* The docker reference a signature names: "HOST/REPO[:TAG]", Docker Hub as
 * "docker.io/…" (tag NULL: the repository alone). */
char *sign_docker_ref(const char *host, const char *repo, const char *tag);
/* The payload JSON for docker_ref and digest (caller frees). */
char *sign_payload_make(const char *docker_ref, const char *digest);
/* The tag of an attachment of digest: "sha256-HEX.sig" / ".att". */
char *sign_attach_tag(const char *digest, const char *suffix);
/* Sign repo's manifest digest as docker_ref with k and store it, keeping the
 * signatures already there (another signer's, a previous one): tagged
 * sha256-HEX.sig, with digest as its OCI 1.1 subject and SIGN_SIG_ARTIFACT
 * as its artifactType, so the referrers API lists it where the registry has
 * one (the tag's earlier manifests stay listed too: each holds a subset). */
int sign_push(rc_client *c, const char *repo, const char *docker_ref, const char *digest, const sign_key *k,
	      kiln_error **err);

/* One signature as found in the registry, not yet trusted. */
struct sign_sig {
	char *payload;                 /* the layer blob */
	size_t payload_len;
	char *b64;                     /* its signature annotation, or NULL */
};
/* Where attachments were found. */
struct sign_found {
	bool api;                      /* the registry answered the referrers API */
	size_t referrers;              /* referrer manifests read */
	bool tagged;                   /* the sha256-HEX.SUFFIX tag was there */
};
struct sign_sigs {
	struct sign_sig *v;
	size_t n;
	struct sign_found found;
};
void sign_sigs_free(struct sign_sigs *s);
/* The signatures attached to digest in repo (none: n = 0, not an error):
 * those of its referrers of SIGN_SIG_ARTIFACT (what cosign's OCI 1.1 mode
 * writes, with no tag), when the registry has the referrers API (a 404: it
 * has not), and those of the sha256-HEX.sig tag, each once. */
int sign_fetch(rc_client *c, const char *repo, const char *digest, struct sign_sigs *out, kiln_error **err);
/* Check a payload: its type, that it names digest, and that its identity
 * matches what was asked for: the exact "HOST/REPO:TAG" when pulled by tag,
 * the repository when pulled by digest (tag NULL), as skopeo's
 * matchRepoDigestOrExact.  0 ok, -1 with *err saying what differs. */
int sign_payload_check(const char *payload, size_t len, const char *host, const char *repo, const char *tag,
		       const char *digest, kiln_error **err);

/* ---------------------------------------------------------------------------
 * Provenance (provenance.c): an in-toto v1 statement with a SLSA v1
 * provenance predicate, in a DSSE envelope signed with a key, stored as the
 * layer of the manifest tagged sha256-HEX.att (cosign's attestation).
 * ------------------------------------------------------------------------- */
#define SIGN_DSSE_MEDIA "application/vnd.dsse.envelope.v1+json"
#define SIGN_INTOTO_TYPE "application/vnd.in-toto+json"
#define SIGN_STATEMENT_TYPE "https://in-toto.io/Statement/v1"
#define SIGN_SLSA_PREDICATE "https://slsa.dev/provenance/v1"
#define SIGN_BUILD_TYPE "https://kiln.dev/build/v1"

/* What a build records (kiln build --provenance); the strings are borrowed. */
struct sign_build_info {
	const char *dockerfile_digest, *context_digest; /* or NULL */
	const char *const *base_refs, *const *base_digests; /* n_bases each */
	size_t n_bases;
	const char *const *args;       /* NAME=VALUE build args (secrets never reach here) */
	size_t n_args;
	const char *target;            /* or NULL */
	const char *builder_id;        /* NULL: "kiln@HOSTNAME" */
	double started, finished;      /* seconds since the epoch */
};
/* The SLSA v1 predicate of a build. */
json_t *sign_provenance_predicate(const struct sign_build_info *b);
/* Where a build's predicate waits for its push: $KILN_HOME/provenance/HEX.json,
 * HEX of the template's (or image manifest's) digest.  load: NULL, *err
 * untouched, when there is none. */
int sign_provenance_save(const char *digest, const json_t *predicate, kiln_error **err);
json_t *sign_provenance_load(const char *digest, kiln_error **err);
/* The statement of predicate for subject (docker_ref, digest), signed with
 * k, stored as digest's attestation in repo: tagged sha256-HEX.att, with
 * digest as its subject and SIGN_INTOTO_TYPE as its artifactType. */
int sign_provenance_push(rc_client *c, const char *repo, const char *docker_ref, const char *digest,
			 const json_t *predicate, const sign_key *k, kiln_error **err);
/* The statements attached to digest (its referrers of SIGN_INTOTO_TYPE, as
 * cosign's later releases write them, and the sha256-HEX.att tag): a JSON
 * array of {"statement", "key"}
 * (key: the id of the one of keys[0..nkeys) whose signature verifies, or
 * null); empty when none.  A statement about another subject is an error. */
json_t *sign_provenance_fetch(rc_client *c, const char *repo, const char *digest, sign_key *const *keys,
			      size_t nkeys, kiln_error **err);

/* ---------------------------------------------------------------------------
 * Policy (policy.c): which keys must have signed a template or image before
 * a runtime host uses it.  A JSON file:
 *   {"default": "accept" | "reject",
 *    "scopes": {"HOST[/REPO-PREFIX]": {"keys": ["FILE.pub", …],
 *                                      "builder": "ID",        (optional)
 *                                      "identity": "exact" | "repository",
 *                                      "reject": true}}}       (optional)
 * The most specific scope (longest, on a '/' boundary) applies; with none,
 * the default (accept).  Every key listed must have signed the manifest; a
 * builder means a provenance statement signed by one of those keys must name
 * it as runDetails.builder.id.  Relative key paths are relative to the file.
 * ------------------------------------------------------------------------- */
typedef struct sign_policy sign_policy;

/* What applies to one repository. */
struct sign_rule {
	const char *scope;             /* the matching scope, or NULL (the default) */
	bool reject;                   /* refuse whatever is there */
	sign_key **keys;               /* required signers */
	size_t nkeys;
	const char *builder;           /* required provenance builder, or NULL */
	/* "identity": "repository": a signature naming the repository (what
	 * cosign sign writes, skopeo's matchRepository) is enough, pulled by tag
	 * too; default: the exact tag (matchRepoDigestOrExact) */
	bool match_repository;
};

/* path NULL: $KILN_POLICY, else $KILN_HOME/policy.json, else
 * /etc/kiln/policy.json, the first that exists; none: an empty policy that
 * accepts everything. */
sign_policy *sign_policy_load(const char *path, kiln_error **err);
void sign_policy_free(sign_policy *p);
/* The file read, or NULL (no policy). */
const char *sign_policy_path(const sign_policy *p);
void sign_policy_rule(const sign_policy *p, const char *host, const char *repo, struct sign_rule *out);
/* Whether the rule asks for anything (keys or reject). */
bool sign_rule_active(const struct sign_rule *r);

/* ---------------------------------------------------------------------------
 * Verification (verify.c) and the host's trust records
 * ($KILN_HOME/trust/HEX.json: a digest verified, by which keys, as what).
 * ------------------------------------------------------------------------- */
struct sign_verified {
	bool cached;                   /* a trust record answered: nothing fetched */
	double ms;                     /* the time it took */
	struct sign_found found;       /* where the signatures were (not cached) */
};

/* Check repo's manifest digest, fetched as host/repo:tag (tag NULL: by
 * digest), against rule: each key's valid signature (and the builder's
 * provenance).  A pass is recorded as trusted under digest and, if given,
 * also_digest (a template's config digest: what kiln run finds locally).
 * Refused: -1, the error naming the reference, the digest and what was
 * missing or wrong. */
int sign_verify(rc_client *c, const struct sign_rule *rule, const char *host, const char *repo, const char *tag,
		const char *digest, const char *also_digest, struct sign_verified *v, kiln_error **err);
/* A local template or image (named ref, digest) against rule, by its trust
 * record alone: 0 trusted, -1 not (error says why). */
int sign_trusted(const struct sign_rule *rule, const char *ref, const char *digest, kiln_error **err);

#endif

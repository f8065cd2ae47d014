/* xfer.h — what `kiln push` and `kiln pull` share: the transfer flags, the
 * progress view (a line on a terminal, JSON events with --json; cli/xfer.c)
 * and the template half of both commands (cli/tmpl_xfer.c). */
#ifndef KILN_CLI_XFER_H
#define KILN_CLI_XFER_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "cli/cli.h"
#include "distrib/distrib.h"
#include "regclient/regclient.h"

struct cli_xfer {
	/* flags */
	bool json;          /* progress events and a final "done" event on stdout */
	unsigned parallel;  /* 0: the client's default */
	uint64_t max_rate;  /* bytes/s per blob transfer; 0: unlimited */
	const char *name;   /* pull: the local template name (NULL: REPO:TAG) */
	bool lazy;          /* pull a template lazily: served from the chunk store (chunkfs) */
	const char *sign;   /* push: sign what was pushed with this private key file */
	const char *policy; /* pull: the signing policy file (NULL: the host's, sign.h) */
	char pin[KILN_DIGEST_MAX]; /* pull: the image manifest digest verified, to pull by */
	/* view */
	const char *label;  /* "push", "pull template", ...: starts the terminal line */
	bool per_blob;      /* an event per finished blob (a template has thousands: no) */
	bool quiet;         /* nothing on stdout (kiln run pulling first): stdout is the command's */
	bool tty, drawn;
	double t0_ms;       /* kiln_now_ms() at the start */
};

void cli_xfer_init(struct cli_xfer *x, const char *label);
/* The options both commands take, as entries of their option tables. */
#define CLI_XFER_OPTIONS(x)                                                                                  \
	CLI_BOOL(0, "json", &(x)->json, "progress events and a final {\"event\":\"done\"} on stdout"),        \
	CLI_UINT(0, "parallel", &(x)->parallel, "N", 1, 64, "blobs moved at once (default 4)"),                           \
	CLI_CALLBACK(0, "limit-rate", (x), "RATE", cli_xfer_limit_rate,                                       \
		     "cap each blob transfer, in bytes per second (e.g. 10M)")
int cli_xfer_limit_rate(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg);
/* Start the clock; the transfer begins. */
void cli_xfer_start(struct cli_xfer *x, const char *label, bool per_blob);
double cli_xfer_elapsed(const struct cli_xfer *x);
/* The progress callback of the registry client (ud: struct cli_xfer). */
void cli_xfer_progress(void *ud, const struct rc_progress *p);
/* Ends the terminal progress line, if one was drawn. */
void cli_xfer_end_line(struct cli_xfer *x);
/* One compact JSON event on stdout, flushed (takes j). */
void cli_xfer_event(json_t *j);
/* An image moved: its digest on stdout, or the "done" event. Exit code. */
int cli_xfer_done_image(struct cli_xfer *x, const char *digest, const char *ref);

/* Chunking a template for kiln push while kiln build / kiln snapshot makes it
 * (distrib/prechunk.c): the hook of snap_finalize_opts.on_rootfs (ud: a
 * dist_prechunk * set to NULL), then the end: template_digest NULL (the build
 * failed) stops it; otherwise it keeps the artifact, warning if it cannot. */
void cli_prechunk_hook(void *ud, const char *rootfs);
void cli_prechunk_end(dist_prechunk **pc, const char *template_digest);

/* Whether ref names a local template. */
bool cli_is_template(const char *ref);
/* Push template ref to dest ([REGISTRY/]REPO[:TAG]); returns an exit code. */
int cli_tmpl_push(const char *ref, const char *dest, struct cli_xfer *x);
/* If src names a template artifact, pull it and return an exit code; else
 * return -1 (a plain image: the caller's path). */
int cli_tmpl_pull(const char *src, struct cli_xfer *x);
/* Whether ref names an image of the local store. */
bool cli_is_image(const char *ref);
/* What kiln run, kiln sandbox create and kiln sandbox pool do first: the
 * template ref is here (no network), or ref names a registry and is pulled
 * now, with progress on a terminal (as docker run does).  Otherwise an error
 * saying what exists instead (an image: which flag or command makes the
 * template). */
int cli_tmpl_need(const char *ref, kiln_error **err);
/* Whether a template that kiln run / sandbox create pulls is pulled lazily:
 * $KILN_LAZY (1 or 0), else the default (docs/distribution.md). */
bool cli_lazy_default(void);

/* Signing and verification (cli/verify.c, sign/): sign dest's manifest
 * digest with the private key file; check a key file before a push; check a
 * pulled manifest m of r against the signing policy (policy NULL: the
 * host's) before anything else of it is fetched; check a local template or
 * image (ref, its digest) against its trust record. */
int cli_sign_pushed(const char *key_path, const char *dest, const char *digest, kiln_error **err);
int cli_sign_check_key(const char *key_path, kiln_error **err);
int cli_verify_pulled(rc_client *c, const struct oci_imgref *r, const struct rc_doc *m, const char *policy,
		      kiln_error **err);
int cli_verify_local(const char *ref, const char *digest, kiln_error **err);
/* kiln build --provenance: the build's SLSA predicate, kept under the
 * template's (else the image's) digest until kiln push --sign attaches it;
 * builder_id NULL: kiln@HOSTNAME. */
struct build_options;
struct build_result;
int cli_provenance_record(const struct build_options *o, const struct build_result *res, double started,
			  double finished, const char *builder_id, kiln_error **err);
/* After a signed push of local (a template or image) as dest, digest: its
 * recorded provenance, if any, signed and attached. */
int cli_provenance_pushed(const char *key_path, const char *local_digest, const char *dest, const char *digest,
			  kiln_error **err);

#endif

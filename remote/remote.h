/* remote.h — the client of a build service: `kiln build --remote URL` and
 * `kiln cache prune --remote URL`.  The context moves by content (only what
 * the server lacks, zstd), the build is submitted, its log followed with
 * resume; events arrive as the local builder's (builder.h), so a remote
 * build prints what a local one does.  The wire is docs/service.md's. */
#ifndef KILN_REMOTE_H
#define KILN_REMOTE_H

#include <stdint.h>

#include "builder/event.h"
#include "builder/request.h"
#include "kiln.h"

#define REMOTE_ID_MAX 40 /* a build's id, "b-" + 32 hex, room to spare */

/* kiln build --remote --secret: sent with the request, held in the server's
 * memory for that build only. */
struct remote_secret {
	const char *id;
	const char *data;
	size_t len;
};

struct remote_request {
	struct build_request build;   /* build.name: NAME[:TAG], published as TEAM/NAME:TAG */
	const char *source_date_epoch; /* the build's SOURCE_DATE_EPOCH (digits), or NULL */
	const struct remote_secret *secrets;
	size_t nsecrets;
};

struct remote_result {
	char id[REMOTE_ID_MAX];
	size_t files, uploaded;     /* context entries; blobs the server lacked */
	uint64_t bytes_sent;        /* compressed bytes of those */
	uint64_t bytes_request;     /* JSON sent besides: the request (file list), twice when files were missing */
	double upload_s;            /* spent sending the blobs the server lacked */
	size_t steps, cached;
	char digest[KILN_DIGEST_MAX], template_digest[KILN_DIGEST_MAX];
	char image[512], template_ref[512]; /* TEAM/NAME:TAG published on the server's registry */
};

struct remote_opts {
	const char *url;            /* http://HOST:PORT of `kiln serve --build` */
	const char *token;          /* NULL: $KILN_HOME/auth.json etc. for the host (kiln login) */
	const char *team;           /* NULL: the token's only team */
	void (*on_event)(void *ud, const struct build_event *ev);
	void (*on_other)(void *ud, const json_t *ev); /* the service's own: published, status, error */
	void (*on_uploaded)(void *ud, const struct remote_result *r);
	void *ud;
};

/* The Dockerfile and files come from context and dockerfile (NULL:
 * CONTEXT/Dockerfile; "-": standard input, named <stdin> as a local build
 * names it).  Fails with the build's reason.  Secrets go only over HTTPS or
 * to a loopback / $KILN_INSECURE_REGISTRIES host. */
int remote_build(const struct remote_opts *o, const struct remote_request *req, const char *context,
		 const char *dockerfile, struct remote_result *res, kiln_error **err);

struct remote_prune_stats {
	uint64_t entries_removed, bytes_before, bytes_after;
	uint64_t files_removed;     /* of the team's context store and its linked copies */
};
/* The team's cache on the server (max_bytes 0, older_than_s < 0: the
 * server's defaults). */
int remote_prune(const struct remote_opts *o, uint64_t max_bytes, int64_t older_than_s, struct remote_prune_stats *st,
		 kiln_error **err);

#endif

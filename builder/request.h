/* request.h — one build request in every shape it travels in: a table of its
 * fields (kind, kiln build's flag, the JSON key of the build service's
 * request, bounds) that kiln build's flags, the service's submit and stored
 * request, and a service build's child all read.  A new build flag is a row. */
#ifndef KILN_BUILDER_REQUEST_H
#define KILN_BUILDER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include "kiln.h"

struct df_kv;
struct build_options;
struct build_template_opts;

enum build_field_kind {
	BUILD_FIELD_STRING, /* const char *: NULL unset */
	BUILD_FIELD_BOOL,   /* bool */
	BUILD_FIELD_UINT,   /* unsigned: 0 unset, else within [min, max] */
	BUILD_FIELD_ARGS,   /* struct df_kv * + its count: [[KEY, VALUE], ...] in JSON */
};

enum {
	BUILD_FIELD_TEMPLATE = 1, /* setting it makes a template too */
	BUILD_FIELD_SERVER = 2,   /* set by the build service for its child, refused from a client */
};

struct build_request {
	const char *name;             /* NAME[:TAG] (the service publishes TEAM/NAME:TAG) */
	const char *target;
	struct df_kv *build_args;
	size_t n_build_args;
	bool no_cache;
	bool provenance;              /* record SLSA provenance (a service's build: ask it to attach it) */
	const char *compression;      /* "gzip" (NULL), "zstd", "none" */
	bool template_;
	const char *start_cmd, *ready_cmd;
	unsigned ready_timeout_s, cpus, memory_mib;
	const char *template_network; /* "none" (NULL) or "outbound" */
	bool registry_bases, public_urls;
	const char *context_digests;
	void *owned;                  /* what build_request_from_json made: build_request_free */
};

struct build_field {
	const char *key;              /* the JSON key, and the field's name in errors */
	const char *flag;             /* kiln build's --FLAG, or NULL */
	enum build_field_kind kind;
	size_t offset;                /* in struct build_request (ARGS: the array; its count follows) */
	unsigned min, max;            /* UINT: bounds; STRING: max is the longest value */
	const char *const *choices;   /* STRING: the values it takes (NULL-terminated), or NULL */
	const char *noun;             /* errors' word for the value ("network", "seconds"), or NULL */
	unsigned flags;               /* BUILD_FIELD_* */
	const char *argh, *help;      /* for kiln build --help */
};

extern const struct build_field build_fields[];
extern const size_t build_nfields;

/* Is the field set (not its default)? */
bool build_field_is_set(const struct build_request *r, const struct build_field *f);
/* The fields that only the service sets (flags & BUILD_FIELD_SERVER) are
 * refused from JSON unless server_fields. Other keys are left to the caller.
 * Errors name the key: "ready_timeout_s: want a number from 1 to 86400". */
int build_request_from_json(const json_t *j, bool server_fields, struct build_request *r, kiln_error **err);
/* Each set field into the object (unset ones are not written). */
void build_request_to_json(const struct build_request *r, json_t *j);
/* What flags gave: strings in their choices and lengths, numbers in their
 * bounds, as JSON is checked; errors name the --flag when flags, else the key. */
int build_request_check(const struct build_request *r, bool flags, kiln_error **err);
/* A template is asked for: --template or any option of one. */
bool build_request_wants_template(const struct build_request *r);
/* The request as build_run's options (t is filled, and o->template set to
 * it, when a template is asked for); pointers into r stay r's. */
int build_request_options(const struct build_request *r, struct build_options *o, struct build_template_opts *t,
			  kiln_error **err);
void build_request_free(struct build_request *r);

#endif

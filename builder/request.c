/* request.c — the build request's field table and its codecs: JSON in and out
 * (the service's wire form and stored request, the child's --request file),
 * checks with the key in every error, and build_run's options from it. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builder/builder.h"
#include "builder/request.h"

static const char *const compressions[] = { "gzip", "zstd", "none", NULL };
static const char *const networks[] = { "none", "outbound", NULL };

#define OFF(m) offsetof(struct build_request, m)
const struct build_field build_fields[] = {
	{ "name", NULL, BUILD_FIELD_STRING, OFF(name), 0, 512, NULL, NULL, 0, NULL, NULL },
	{ "target", "target", BUILD_FIELD_STRING, OFF(target), 0, 256, NULL, NULL, 0, "STAGE",
	  "build this stage (and what it needs)" },
	{ "build_args", "build-arg", BUILD_FIELD_ARGS, OFF(build_args), 0, 0, NULL, NULL, 0, "KEY[=VALUE]",
	  "set a build-time ARG" },
	{ "no_cache", "no-cache", BUILD_FIELD_BOOL, OFF(no_cache), 0, 0, NULL, NULL, 0, NULL, "do not reuse cached steps" },
	{ "provenance", "provenance", BUILD_FIELD_BOOL, OFF(provenance), 0, 0, NULL, NULL, 0, NULL,
	  "record SLSA provenance of the result (Dockerfile and context\n"
	  "digests, base images, build args, builder, times), attached by\n"
	  "kiln push --sign; with --remote, asked of the service, which signs\n"
	  "and attaches it (refused by one that signs nothing of the team's)" },
	{ "compression", "compression", BUILD_FIELD_STRING, OFF(compression), 0, 8, compressions, NULL, 0, "C",
	  "layer compression: gzip (default), zstd or none" },
	{ "template", "template", BUILD_FIELD_BOOL, OFF(template_), 0, 0, NULL, NULL, 0, NULL,
	  "also make a template (rootfs, boot, start, ready, snapshot)\n"
	  "named after the first -t; implied by the options below" },
	{ "start_cmd", "start-cmd", BUILD_FIELD_STRING, OFF(start_cmd), 0, 65536, NULL, NULL, BUILD_FIELD_TEMPLATE, "CMD",
	  "the template's start command (default ENTRYPOINT + CMD)" },
	{ "ready_cmd", "ready-cmd", BUILD_FIELD_STRING, OFF(ready_cmd), 0, 65536, NULL, NULL, BUILD_FIELD_TEMPLATE, "CMD",
	  "polled until it succeeds before the snapshot" },
	{ "ready_timeout_s", "ready-timeout", BUILD_FIELD_UINT, OFF(ready_timeout_s), 1, 86400, NULL, "seconds",
	  BUILD_FIELD_TEMPLATE, "SECS", "give up waiting for the ready command (default 60)" },
	{ "cpus", "cpus", BUILD_FIELD_UINT, OFF(cpus), 1, 64, NULL, NULL, BUILD_FIELD_TEMPLATE, "N", "the template's vCPUs" },
	{ "memory_mib", "memory", BUILD_FIELD_UINT, OFF(memory_mib), 1, 1u << 20, NULL, NULL, BUILD_FIELD_TEMPLATE, "MiB",
	  "the template's memory" },
	{ "template_network", "template-network", BUILD_FIELD_STRING, OFF(template_network), 0, 16, networks, "network",
	  BUILD_FIELD_TEMPLATE, "none|outbound", "its start command's network and its sandboxes' default (none)" },
	{ "public_urls", "public-urls", BUILD_FIELD_BOOL, OFF(public_urls), 0, 0, NULL, NULL, BUILD_FIELD_SERVER, NULL,
	  "ADD fetches URLs from public addresses only: no loopback, private\n"
	  "or link-local one, whatever DNS or a redirect says (what the build\n"
	  "service runs for its teams unless its fetch_private is set)" },
	{ "registry_bases", "registry-bases", BUILD_FIELD_BOOL, OFF(registry_bases), 0, 0, NULL, NULL, BUILD_FIELD_SERVER,
	  NULL,
	  "bases (FROM, COPY --from, RUN --mount from=, ONBUILD's) from\n"
	  "registries and stages only, never an oci:/archive path on this\n"
	  "host (what the build service runs for its teams)" },
	{ "context_digests", "context-digests", BUILD_FIELD_STRING, OFF(context_digests), 0, 4096, NULL, NULL,
	  BUILD_FIELD_SERVER, "FILE",
	  "the context's file digests, JSON {\"PATH\": \"sha256:...\"}, taken as\n"
	  "they are for cache keys (what the build service passes from its\n"
	  "verified store; a wrong one makes wrong cache hits)" },
};
#undef OFF
const size_t build_nfields = sizeof(build_fields) / sizeof(*build_fields);

#define FIELD(r, f, type) ((type *)((char *)(r) + (f)->offset))
#define CFIELD(r, f, type) ((type const *)((const char *)(r) + (f)->offset))

bool build_field_is_set(const struct build_request *r, const struct build_field *f)
{
	switch (f->kind) {
	case BUILD_FIELD_STRING: return *CFIELD(r, f, const char *) != NULL;
	case BUILD_FIELD_BOOL: return *CFIELD(r, f, bool);
	case BUILD_FIELD_UINT: return *CFIELD(r, f, unsigned) != 0;
	case BUILD_FIELD_ARGS: return r->n_build_args != 0;
	}
	return false;
}

/* the field as errors name it: its JSON key, or its flag */
static const char *field_name(const struct build_field *f, bool flag, char *buf, size_t n)
{
	if (!flag || f->flag == NULL)
		return f->key;
	snprintf(buf, n, "--%s", f->flag);
	return buf;
}

/* "want a number from 1 to 64", "want seconds from 1 to 86400" */
static int bad_uint(const struct build_field *f, const char *name, kiln_error **err)
{
	return kiln_err(err, KILN_E_INVALID, "%s: want %s from %u to %u", name, f->noun ? f->noun : "a number", f->min,
			f->max);
}

static int check_string(const struct build_field *f, const char *v, const char *name, kiln_error **err)
{
	if (f->max && strlen(v) > f->max)
		return kiln_err(err, KILN_E_INVALID, "%s: longer than %u bytes", name, f->max);
	if (f->choices == NULL)
		return 0;
	for (const char *const *c = f->choices; *c; c++)
		if (strcmp(v, *c) == 0)
			return 0;
	kiln_buf want = KILN_BUF_INIT;
	for (const char *const *c = f->choices; *c; c++)
		kiln_buf_addf(&want, "%s%s", c == f->choices ? "" : c[1] ? ", " : " or ", *c);
	if (f->noun) /* "template_network: network 'all': want none or outbound" */
		kiln_err(err, KILN_E_INVALID, "%s: %s '%s': want %s", name, f->noun, v, want.buf);
	else
		kiln_err(err, KILN_E_INVALID, "%s '%s': want %s", name, v, want.buf);
	kiln_buf_free(&want);
	return -1;
}

int build_request_check(const struct build_request *r, bool flags, kiln_error **err)
{
	char buf[64];

	for (size_t i = 0; i < build_nfields; i++) {
		const struct build_field *f = &build_fields[i];
		const char *name = field_name(f, flags, buf, sizeof(buf));
		if (f->kind == BUILD_FIELD_STRING && build_field_is_set(r, f) &&
		    check_string(f, *CFIELD(r, f, const char *), name, err) < 0)
			return -1;
		if (f->kind == BUILD_FIELD_UINT && build_field_is_set(r, f) &&
		    (*CFIELD(r, f, unsigned) < f->min || *CFIELD(r, f, unsigned) > f->max))
			return bad_uint(f, name, err);
	}
	return 0;
}

static int args_from_json(const json_t *v, struct build_request *r, kiln_error **err)
{
	const json_t *kv;
	size_t i;

	if (!json_is_array(v))
		return kiln_err(err, KILN_E_INVALID, "build_args: want [[KEY, VALUE], ...]");
	r->build_args = kiln_xcalloc(json_array_size(v) + 1, sizeof(*r->build_args));
	json_array_foreach(v, i, kv) {
		const char *k = json_string_value(json_array_get(kv, 0));
		const json_t *val = json_array_get(kv, 1);
		if (!json_is_array(kv) || json_array_size(kv) > 2 || k == NULL || *k == '\0' ||
		    (val && !json_is_string(val) && !json_is_null(val))) {
			free(r->build_args);
			r->build_args = NULL;
			return kiln_err(err, KILN_E_INVALID, "build_args[%zu]: want [KEY, VALUE] with a non-empty KEY", i);
		}
		r->build_args[i].key = (char *)k;
		r->build_args[i].value = (char *)json_string_value(val);
	}
	r->n_build_args = json_array_size(v);
	return 0;
}

int build_request_from_json(const json_t *j, bool server_fields, struct build_request *r, kiln_error **err)
{
	memset(r, 0, sizeof(*r));
	if (!json_is_object(j))
		return kiln_err(err, KILN_E_INVALID, "a build request is a JSON object");
	for (size_t i = 0; i < build_nfields; i++) {
		const struct build_field *f = &build_fields[i];
		const json_t *v = json_object_get(j, f->key);
		if (v == NULL || json_is_null(v))
			continue;
		if ((f->flags & BUILD_FIELD_SERVER) && !server_fields) {
			kiln_err(err, KILN_E_INVALID, "%s: set by the build server, not by a request", f->key);
			goto fail;
		}
		switch (f->kind) {
		case BUILD_FIELD_STRING:
			if (!json_is_string(v) || check_string(f, json_string_value(v), f->key, err) < 0) {
				if (*err == NULL)
					kiln_err(err, KILN_E_INVALID, "%s: want a string", f->key);
				goto fail;
			}
			*FIELD(r, f, const char *) = json_string_value(v);
			break;
		case BUILD_FIELD_BOOL:
			if (!json_is_boolean(v)) {
				kiln_err(err, KILN_E_INVALID, "%s: want true or false", f->key);
				goto fail;
			}
			*FIELD(r, f, bool) = json_is_true(v);
			break;
		case BUILD_FIELD_UINT:
			if (!json_is_integer(v) || json_integer_value(v) < f->min || json_integer_value(v) > f->max) {
				bad_uint(f, f->key, err);
				goto fail;
			}
			*FIELD(r, f, unsigned) = (unsigned)json_integer_value(v);
			break;
		case BUILD_FIELD_ARGS:
			if (args_from_json(v, r, err) < 0)
				goto fail;
			break;
		}
	}
	/* the strings are the object's: held as long as the request */
	r->owned = json_incref((json_t *)j);
	return 0;
fail:
	free(r->build_args);
	memset(r, 0, sizeof(*r));
	return -1;
}

void build_request_to_json(const struct build_request *r, json_t *j)
{
	for (size_t i = 0; i < build_nfields; i++) {
		const struct build_field *f = &build_fields[i];
		json_t *v = NULL;
		if (!build_field_is_set(r, f))
			continue;
		switch (f->kind) {
		case BUILD_FIELD_STRING: v = json_string(*CFIELD(r, f, const char *)); break;
		case BUILD_FIELD_BOOL: v = json_true(); break;
		case BUILD_FIELD_UINT: v = json_integer(*CFIELD(r, f, unsigned)); break;
		case BUILD_FIELD_ARGS:
			v = json_array();
			for (size_t k = 0; k < r->n_build_args; k++)
				json_array_append_new(v, json_pack("[s,s]", r->build_args[k].key,
								   r->build_args[k].value ? r->build_args[k].value : ""));
			break;
		}
		json_object_set_new(j, f->key, v);
	}
	if (build_request_wants_template(r))
		json_object_set_new(j, "template", json_true());
}

bool build_request_wants_template(const struct build_request *r)
{
	if (r->template_)
		return true;
	for (size_t i = 0; i < build_nfields; i++)
		if ((build_fields[i].flags & BUILD_FIELD_TEMPLATE) && build_field_is_set(r, &build_fields[i]))
			return true;
	return false;
}

int build_request_options(const struct build_request *r, struct build_options *o, struct build_template_opts *t,
			  kiln_error **err)
{
	if (build_request_check(r, false, err) < 0)
		return -1;
	o->target = r->target;
	o->build_args = r->build_args;
	o->n_build_args = r->n_build_args;
	o->no_cache = r->no_cache;
	o->compression = !r->compression || strcmp(r->compression, "gzip") == 0 ? BUILD_GZIP
			 : strcmp(r->compression, "zstd") == 0			  ? BUILD_ZSTD
										  : BUILD_NONE;
	o->public_urls = r->public_urls;
	o->registry_bases = r->registry_bases;
	o->context_digests = r->context_digests;
	o->template = NULL;
	if (!build_request_wants_template(r))
		return 0;
	t->start_cmd = r->start_cmd;
	t->ready_cmd = r->ready_cmd;
	t->cpus = r->cpus;
	t->memory_mib = r->memory_mib;
	t->ready_timeout_ms = (int)r->ready_timeout_s * 1000;
	t->network = VM_NET_NONE;
	if (r->template_network && vm_net_mode_parse(r->template_network, &t->network, err) < 0)
		return kiln_error_wrap(err, "template_network");
	o->template = t;
	return 0;
}

void build_request_free(struct build_request *r)
{
	if (r->owned) {
		free(r->build_args);
		json_decref(r->owned);
	}
	memset(r, 0, sizeof(*r));
}

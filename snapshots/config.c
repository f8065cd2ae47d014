/* config.c — a template's config blob (docs/snapshots.md "Store layout") as
 * struct snap_config: one reader that checks every field (a config that was
 * pulled or planted in the store is untrusted input, docs/security.md) and one
 * writer giving the canonical JSON whose digest names the template. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshots/internal.h"

static const char *const ROLE_NAME[SNAP_NROLES] = { "rootfs", "disk", "memory", "state" };
static const char *const ROLE_MEDIA[SNAP_NROLES] = { "application/vnd.kiln.rootfs.ext4",
						     "application/vnd.kiln.disk.qcow2",
						     "application/vnd.kiln.memory.raw",
						     "application/vnd.kiln.qemu-state" };

#define MAX_CPUS 4096
#define MAX_MEMORY_MIB (1u << 24)

const char *snap_role_name(enum snap_role r) { return ROLE_NAME[r]; }

const struct snap_config_blob *snap_config_blob(const struct snap_config *c, const char *role)
{
	for (int r = 0; r < SNAP_NROLES; r++)
		if (strcmp(role, ROLE_NAME[r]) == 0)
			return &c->blob[r];
	return NULL;
}

void snap_config_set_blob(struct snap_config *c, enum snap_role r, const char *digest, uint64_t size)
{
	snprintf(c->blob[r].digest, sizeof(c->blob[r].digest), "%s", digest);
	c->blob[r].size = size;
}

void snap_config_free(struct snap_config *c)
{
	struct snap_depends *d = &c->depends;

	free(c->created);
	free(c->start);
	free(c->ready);
	free(c->user);
	free(c->workdir);
	kiln_strv_free(&c->env);
	free(d->qemu);
	free(d->machine);
	free(d->accel);
	free(d->kernel_digest);
	free(d->kernel_release);
	free(d->boot_id);
	memset(c, 0, sizeof(*c));
}

/* The field "where: field: ..." errors name, e.g. "memory.digest". */
static int bad(kiln_error **err, const char *where, const char *field, const char *what)
{
	return kiln_err(err, KILN_E_INVALID, "%s: template config field \"%s\" %s", where, field, what);
}

/* Only the keys in keys (NULL-terminated) may appear in o. */
static int only_keys(const json_t *o, const char *const *keys, const char *where, const char *prefix,
		     kiln_error **err)
{
	const char *k;
	json_t *v;

	json_object_foreach((json_t *)o, k, v) {
		size_t i = 0;
		while (keys[i] && strcmp(keys[i], k) != 0)
			i++;
		if (keys[i] == NULL) {
			char *f = kiln_xasprintf("%s%.64s", prefix, k);
			bad(err, where, f, "is unknown (refused: this kiln would not keep it)");
			free(f);
			return -1;
		}
	}
	return 0;
}

/* A string field, or absent/null with nullable (*out NULL). */
static int get_str(const json_t *o, const char *key, const char *where, const char *field, bool nullable,
		   char **out, kiln_error **err)
{
	const json_t *v = json_object_get(o, key);

	*out = NULL;
	if (v == NULL || json_is_null(v))
		return nullable ? 0 : bad(err, where, field, "is missing");
	if (!json_is_string(v))
		return bad(err, where, field, nullable ? "is not a string or null" : "is not a string");
	*out = kiln_xstrdup(json_string_value(v));
	return 0;
}

/* An integer field in [lo, hi]; absent gives *out = 0 unless required. */
static int get_int(const json_t *o, const char *key, const char *where, const char *field, bool required,
		   json_int_t lo, json_int_t hi, json_int_t *out, kiln_error **err)
{
	const json_t *v = json_object_get(o, key);

	*out = 0;
	if (v == NULL)
		return required ? bad(err, where, field, "is missing") : 0;
	if (!json_is_integer(v))
		return bad(err, where, field, "is not an integer");
	if (json_integer_value(v) < lo || json_integer_value(v) > hi) {
		char *m = kiln_xasprintf("is %lld, not in [%lld, %lld]", (long long)json_integer_value(v), (long long)lo,
					 (long long)hi);
		bad(err, where, field, m);
		free(m);
		return -1;
	}
	*out = json_integer_value(v);
	return 0;
}

static bool is_sha256(const char *d)
{
	return strncmp(d, "sha256:", 7) == 0 && strlen(d) == 71 && strspn(d + 7, "0123456789abcdef") == 64;
}

static int read_blob(const json_t *cfg, enum snap_role r, const char *where, struct snap_config_blob *b,
		     kiln_error **err)
{
	static const char *const keys[] = { "mediaType", "digest", "size", NULL };
	const char *name = ROLE_NAME[r];
	const json_t *o = json_object_get(cfg, name);
	char *media = NULL, *digest = NULL, field[32];
	json_int_t size;
	int rc = -1;

	if (!json_is_object(o))
		return bad(err, where, name, o ? "is not an object" : "is missing (the config names no such blob)");
	snprintf(field, sizeof(field), "%s.", name);
	if (only_keys(o, keys, where, field, err) < 0)
		return -1;
	snprintf(field, sizeof(field), "%s.mediaType", name);
	if (get_str(o, "mediaType", where, field, true, &media, err) < 0)
		goto out;
	if (media && strcmp(media, ROLE_MEDIA[r]) != 0) {
		char *m = kiln_xasprintf("is '%.80s', not %s", media, ROLE_MEDIA[r]);
		bad(err, where, field, m);
		free(m);
		goto out;
	}
	snprintf(field, sizeof(field), "%s.digest", name);
	if (get_str(o, "digest", where, field, false, &digest, err) < 0)
		goto out;
	/* the digest names a file of the store: nothing but sha256:<64 hex> */
	if (!is_sha256(digest)) {
		kiln_err(err, KILN_E_INVALID,
			 "%s: template config's %s digest '%.80s' is not sha256:<64 hex digits> (refused: it would name "
			 "a file outside the store)", where, name, digest);
		goto out;
	}
	snprintf(field, sizeof(field), "%s.size", name);
	if (get_int(o, "size", where, field, true, 0, INT64_MAX, &size, err) < 0)
		goto out;
	snprintf(b->digest, sizeof(b->digest), "%s", digest);
	b->size = (uint64_t)size;
	rc = 0;
out:
	free(media);
	free(digest);
	return rc;
}

int snap_depends_read(const json_t *d, const char *where, struct snap_depends *out, kiln_error **err)
{
	static const char *const keys[] = { "qemu", "machine", "accel", "agent_protocol", "tsc_khz", "kernel_digest",
					    "kernel_release", "boot_id", NULL };
	json_int_t proto, khz;

	if (!json_is_object(d))
		return bad(err, where, "depends", "is not an object");
	if (only_keys(d, keys, where, "depends.", err) < 0 ||
	    get_str(d, "qemu", where, "depends.qemu", false, &out->qemu, err) < 0 ||
	    get_str(d, "machine", where, "depends.machine", false, &out->machine, err) < 0 ||
	    get_str(d, "accel", where, "depends.accel", false, &out->accel, err) < 0 ||
	    get_str(d, "kernel_digest", where, "depends.kernel_digest", false, &out->kernel_digest, err) < 0 ||
	    get_str(d, "kernel_release", where, "depends.kernel_release", false, &out->kernel_release, err) < 0 ||
	    get_str(d, "boot_id", where, "depends.boot_id", true, &out->boot_id, err) < 0 ||
	    get_int(d, "agent_protocol", where, "depends.agent_protocol", true, 1, 0xffff, &proto, err) < 0 ||
	    get_int(d, "tsc_khz", where, "depends.tsc_khz", true, 0, UINT32_MAX, &khz, err) < 0)
		return -1;
	if (strcmp(out->accel, "kvm") != 0 && strcmp(out->accel, "tcg") != 0)
		return bad(err, where, "depends.accel", "is neither \"kvm\" nor \"tcg\"");
	out->agent_protocol = (unsigned)proto;
	out->tsc_khz = (uint32_t)khz;
	return 0;
}

static int read_env(const json_t *cfg, const char *where, kiln_strv *env, kiln_error **err)
{
	const json_t *e = json_object_get(cfg, "env");

	if (e == NULL || json_is_null(e))
		return 0;
	if (!json_is_array(e))
		return bad(err, where, "env", "is not an array");
	for (size_t i = 0; i < json_array_size(e); i++) {
		const json_t *v = json_array_get(e, i);
		const char *s = json_string_value(v);
		if (s == NULL || s[0] == '=' || strchr(s, '=') == NULL) {
			char f[32];
			snprintf(f, sizeof(f), "env[%zu]", i);
			return bad(err, where, f, "is not a NAME=VALUE string");
		}
		kiln_strv_push(env, s);
	}
	return 0;
}

static int read_fields(const json_t *j, const char *where, struct snap_config *c, kiln_error **err)
{
	static const char *const keys[] = { "schemaVersion", "mediaType", "created", "start", "ready", "user",
					    "workdir", "env", "cpus", "memory_mib", "network", "depends", "rootfs",
					    "disk", "memory", "state", NULL };
	const char *media = kiln_json_str(j, "mediaType");
	json_int_t n;
	char *net = NULL;

	/* schema and media type first: anything else is no template config at all */
	if (kiln_json_int(j, "schemaVersion", 0) != SNAP_SCHEMA || media == NULL || strcmp(media, KILN_TMPL_CONFIG_MEDIA) != 0)
		return kiln_err(err, KILN_E_INVALID, "%s: not a kiln template config (schema %d, media type %.80s)", where,
				(int)kiln_json_int(j, "schemaVersion", 0), media ? media : "none");
	if (only_keys(j, keys, where, "", err) < 0 || get_str(j, "created", where, "created", true, &c->created, err) < 0 ||
	    get_str(j, "start", where, "start", true, &c->start, err) < 0 ||
	    get_str(j, "ready", where, "ready", true, &c->ready, err) < 0 ||
	    get_str(j, "user", where, "user", true, &c->user, err) < 0 ||
	    get_str(j, "workdir", where, "workdir", true, &c->workdir, err) < 0 || read_env(j, where, &c->env, err) < 0)
		return -1;
	if (get_int(j, "cpus", where, "cpus", false, 1, MAX_CPUS, &n, err) < 0)
		return -1;
	c->cpus = (unsigned)n;
	if (get_int(j, "memory_mib", where, "memory_mib", false, 1, MAX_MEMORY_MIB, &n, err) < 0)
		return -1;
	c->memory_mib = (unsigned)n;
	if (get_str(j, "network", where, "network", true, &net, err) < 0)
		return -1;
	if (net) {
		kiln_error *e = NULL;
		int rc = vm_net_mode_parse(net, &c->network, &e);
		if (rc < 0) {
			bad(err, where, "network", kiln_error_message(e));
			kiln_error_free(e);
		}
		free(net);
		if (rc < 0)
			return -1;
		c->has_network = true;
	}
	if (json_object_get(j, "depends")) {
		if (snap_depends_read(json_object_get(j, "depends"), where, &c->depends, err) < 0)
			return -1;
		c->has_depends = true;
	}
	for (int r = 0; r < SNAP_NROLES; r++)
		if (read_blob(j, (enum snap_role)r, where, &c->blob[r], err) < 0)
			return -1;
	return 0;
}

int snap_config_read(const char *data, size_t len, const char *where, struct snap_config *c, kiln_error **err)
{
	json_t *j;
	int rc = -1;

	memset(c, 0, sizeof(*c));
	if ((j = kiln_json_loadb(data, len, where, err)) == NULL)
		return -1;
	if (!json_is_object(j))
		kiln_err(err, KILN_E_INVALID, "%s: not a kiln template config (not a JSON object)", where);
	else
		rc = read_fields(j, where, c, err);
	json_decref(j);
	if (rc < 0)
		snap_config_free(c);
	return rc;
}

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

char *snap_config_write(const struct snap_config *c)
{
	json_t *j = json_object(), *env = json_array();
	char *text;

	json_object_set_new(j, "schemaVersion", json_integer(SNAP_SCHEMA));
	json_object_set_new(j, "mediaType", json_string(KILN_TMPL_CONFIG_MEDIA));
	if (c->created)
		json_object_set_new(j, "created", json_string(c->created));
	/* the commands, user and workdir are always there, null when unset */
	json_object_set_new(j, "start", str_or_null(c->start));
	json_object_set_new(j, "ready", str_or_null(c->ready));
	json_object_set_new(j, "user", str_or_null(c->user));
	json_object_set_new(j, "workdir", str_or_null(c->workdir));
	for (size_t i = 0; i < c->env.n; i++)
		json_array_append_new(env, json_string(c->env.v[i]));
	json_object_set_new(j, "env", env);
	if (c->cpus)
		json_object_set_new(j, "cpus", json_integer(c->cpus));
	if (c->memory_mib)
		json_object_set_new(j, "memory_mib", json_integer(c->memory_mib));
	if (c->has_network)
		json_object_set_new(j, "network", json_string(vm_net_mode_name(c->network)));
	if (c->has_depends) {
		const struct snap_depends *d = &c->depends;
		json_t *o = json_pack("{s:s?, s:s?, s:s?, s:i, s:I, s:s?, s:s?}", "qemu", d->qemu, "machine", d->machine,
				      "accel", d->accel, "agent_protocol", (int)d->agent_protocol, "tsc_khz",
				      (json_int_t)d->tsc_khz, "kernel_digest", d->kernel_digest, "kernel_release",
				      d->kernel_release);
		if (d->boot_id)
			json_object_set_new(o, "boot_id", json_string(d->boot_id));
		json_object_set_new(j, "depends", o);
	}
	for (int r = 0; r < SNAP_NROLES; r++)
		json_object_set_new(j, ROLE_NAME[r],
				    json_pack("{s:s, s:s, s:I}", "mediaType", ROLE_MEDIA[r], "digest", c->blob[r].digest,
					      "size", (json_int_t)c->blob[r].size));
	text = kiln_json_dumps_canonical(j);
	json_decref(j);
	return text;
}

/* config.c — the registry's settings: embedded defaults that need no file,
 * a JSON config file that overrides them, and the --addr syntax.  Unknown
 * keys in the file are errors so a typo never silently changes nothing. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "registry/internal.h"

void reg_config_init(struct reg_config *c)
{
	memset(c, 0, sizeof(*c));
	c->host = kiln_xstrdup("127.0.0.1");
	c->port = 5000;
	c->data_dir = kiln_home_path(NULL, KILN_PATH_REGISTRY, NULL);
	c->manifest_max = 4 << 20;
	c->blob_max = 0;
	c->connection_limit = 4096;
	c->connection_headroom = 256;
	c->per_ip_connection_limit = 512;
	c->timeout_s = 60;
	c->header_timeout_s = 10;
	c->body_min_rate = 1024;
	c->body_rate_window_s = 20;
	c->idle_timeout_s = 30;
	c->auth_fail_burst = 10;
	c->auth_fail_refill_s = 6;
	c->auth_fail_slots = 4096;
	c->sndbuf = 256 << 10;
	c->blob_streams = 64;
	c->upload_expiry_s = 24 * 3600;
	c->gc_grace_s = 3600;
	c->gc_pin_s = 600;
	c->auth = 0;
	c->ui = 1;
	c->service = kiln_xstrdup("kiln");
	c->token_ttl_s = 3600;
}

void reg_config_free(struct reg_config *c)
{
	free(c->host);
	free(c->data_dir);
	free(c->realm);
	free(c->service);
	free(c->s3_endpoint);
	free(c->s3_region);
	free(c->s3_bucket);
	free(c->s3_access_key);
	free(c->s3_secret_key);
	json_decref(c->build);
	json_decref(c->sandboxes);
	json_decref(c->quotas);
	json_decref(c->retention);
	memset(c, 0, sizeof(*c));
}

int reg_config_set_addr(struct reg_config *c, const char *addr, kiln_error **err)
{
	const char *colon = strrchr(addr, ':');
	char *host, *end;
	long port;

	if (colon == NULL)
		return kiln_err(err, KILN_E_USAGE, "address '%s': want HOST:PORT", addr);
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (colon[1] == '\0' || *end != '\0' || errno != 0 || port < 0 || port > 65535)
		return kiln_err(err, KILN_E_USAGE, "address '%s': bad port", addr);
	if (colon == addr)
		host = kiln_xstrdup("127.0.0.1");
	else if (addr[0] == '[' && colon[-1] == ']')
		host = kiln_xstrndup(addr + 1, (size_t)(colon - addr - 2));
	else
		host = kiln_xstrndup(addr, (size_t)(colon - addr));
	free(c->host);
	c->host = host;
	c->port = (uint16_t)port;
	return 0;
}

static int get_size(json_t *v, const char *key, uint64_t *out, kiln_error **err)
{
	if (json_is_integer(v) && json_integer_value(v) >= 0) {
		*out = (uint64_t)json_integer_value(v);
		return 0;
	}
	if (json_is_string(v))
		return kiln_parse_size(json_string_value(v), out, err) < 0 ? kiln_error_wrap(err, "%s", key) : 0;
	return kiln_err(err, KILN_E_INVALID, "%s: want a size (number or \"64M\")", key);
}

static int get_int(json_t *v, const char *key, int64_t min, int64_t *out, kiln_error **err)
{
	if (!json_is_integer(v) || json_integer_value(v) < min)
		return kiln_err(err, KILN_E_INVALID, "%s: want an integer >= %lld", key, (long long)min);
	*out = json_integer_value(v);
	return 0;
}

static int set_str(json_t *v, const char *key, char **dst, kiln_error **err)
{
	if (!json_is_string(v))
		return kiln_err(err, KILN_E_INVALID, "%s: want a string", key);
	free(*dst);
	*dst = kiln_xstrdup(json_string_value(v));
	return 0;
}

/* "s3": {"endpoint", "bucket", "access_key", "secret_key", "region"} */
static int load_s3(struct reg_config *c, json_t *o, kiln_error **err)
{
	static const char *const keys[] = { "endpoint", "bucket", "access_key", "secret_key", "region" };
	char **dst[] = { &c->s3_endpoint, &c->s3_bucket, &c->s3_access_key, &c->s3_secret_key, &c->s3_region };
	const char *key;
	json_t *v;

	if (!json_is_object(o))
		return kiln_err(err, KILN_E_INVALID, "s3: want an object");
	json_object_foreach(o, key, v) {
		size_t i;
		for (i = 0; i < 5 && strcmp(key, keys[i]) != 0; i++)
			;
		if (i == 5)
			return kiln_err(err, KILN_E_INVALID, "s3: unknown key '%s'", key);
		if (set_str(v, key, dst[i], err) < 0)
			return kiln_error_wrap(err, "s3");
	}
	for (size_t i = 0; i < 4; i++)
		if (*dst[i] == NULL || **dst[i] == '\0')
			return kiln_err(err, KILN_E_INVALID, "s3: '%s' is required", keys[i]);
	if (strncmp(c->s3_endpoint, "http://", 7) != 0 && strncmp(c->s3_endpoint, "https://", 8) != 0)
		return kiln_err(err, KILN_E_INVALID, "s3: endpoint must be an http:// or https:// URL");
	if (c->s3_region == NULL)
		c->s3_region = kiln_xstrdup("us-east-1");
	return 0;
}

/* The limits of hostile load (server_limits.c): plain counts and seconds. */
static const struct uint_key {
	const char *key;
	size_t off;
	int64_t min;
} uint_keys[] = {
	{ "connection_headroom", offsetof(struct reg_config, connection_headroom), 0 },
	{ "per_ip_connection_limit", offsetof(struct reg_config, per_ip_connection_limit), 0 },
	{ "header_timeout_s", offsetof(struct reg_config, header_timeout_s), 0 },
	{ "body_rate_window_s", offsetof(struct reg_config, body_rate_window_s), 1 },
	{ "idle_timeout_s", offsetof(struct reg_config, idle_timeout_s), 0 },
	{ "auth_fail_burst", offsetof(struct reg_config, auth_fail_burst), 1 },
	{ "auth_fail_refill_s", offsetof(struct reg_config, auth_fail_refill_s), 1 },
	{ "auth_fail_slots", offsetof(struct reg_config, auth_fail_slots), 16 },
};

static const struct uint_key *uint_key(const char *key)
{
	for (size_t i = 0; i < sizeof(uint_keys) / sizeof(uint_keys[0]); i++)
		if (strcmp(key, uint_keys[i].key) == 0)
			return &uint_keys[i];
	return NULL;
}

int reg_config_load(struct reg_config *c, const char *path, kiln_error **err)
{
	const struct uint_key *u;
	json_t *root = kiln_json_load_file(path, err), *v;
	const char *key;
	int64_t i = 0;
	int ret = -1;

	if (root == NULL)
		return -1;
	if (!json_is_object(root)) {
		kiln_err(err, KILN_E_INVALID, "want a JSON object");
		goto out;
	}
	json_object_foreach(root, key, v) {
		int r = 0;
		if (strcmp(key, "addr") == 0) {
			r = json_is_string(v) ? reg_config_set_addr(c, json_string_value(v), err)
					      : kiln_err(err, KILN_E_INVALID, "addr: want a string");
		} else if (strcmp(key, "data") == 0) {
			r = set_str(v, key, &c->data_dir, err);
		} else if (strcmp(key, "manifest_max") == 0) {
			r = get_size(v, key, &c->manifest_max, err);
		} else if (strcmp(key, "sndbuf") == 0) {
			if ((r = get_size(v, key, &c->sndbuf, err)) == 0 && c->sndbuf > (1 << 30))
				r = kiln_err(err, KILN_E_INVALID, "sndbuf: at most 1G");
		} else if (strcmp(key, "blob_max") == 0) {
			r = get_size(v, key, &c->blob_max, err);
		} else if (strcmp(key, "connection_limit") == 0) {
			if ((r = get_int(v, key, 1, &i, err)) == 0)
				c->connection_limit = (unsigned)i;
		} else if ((u = uint_key(key)) != NULL) {
			if ((r = get_int(v, key, u->min, &i, err)) == 0 && i > (int64_t)UINT32_MAX)
				r = kiln_err(err, KILN_E_INVALID, "%s: at most %u", key, (unsigned)UINT32_MAX);
			if (r == 0)
				*(unsigned *)((char *)c + u->off) = (unsigned)i;
		} else if (strcmp(key, "body_min_rate") == 0) {
			r = get_size(v, key, &c->body_min_rate, err);
		} else if (strcmp(key, "blob_streams") == 0) {
			if ((r = get_int(v, key, 0, &i, err)) == 0)
				c->blob_streams = (unsigned)i;
		} else if (strcmp(key, "threads") == 0) {
			if ((r = get_int(v, key, 0, &i, err)) == 0)
				c->threads = (unsigned)i;
		} else if (strcmp(key, "timeout_s") == 0) {
			if ((r = get_int(v, key, 1, &i, err)) == 0)
				c->timeout_s = (unsigned)i;
		} else if (strcmp(key, "upload_expiry_s") == 0) {
			r = get_int(v, key, 0, &c->upload_expiry_s, err);
		} else if (strcmp(key, "gc_grace_s") == 0) {
			r = get_int(v, key, 0, &c->gc_grace_s, err);
		} else if (strcmp(key, "gc_pin_s") == 0) {
			r = get_int(v, key, 2, &c->gc_pin_s, err);
		} else if (strcmp(key, "gc_interval_s") == 0) {
			r = get_int(v, key, 0, &c->gc_interval_s, err);
		} else if (strcmp(key, "retention") == 0) {
			if ((r = reg_retain_check(v, err)) == 0) {
				json_decref(c->retention);
				c->retention = json_incref(v);
			}
		} else if (strcmp(key, "token_ttl_s") == 0) {
			r = get_int(v, key, 1, &c->token_ttl_s, err);
		} else if (strcmp(key, "auth") == 0) {
			if (!json_is_boolean(v))
				r = kiln_err(err, KILN_E_INVALID, "auth: want true or false");
			else
				c->auth = json_is_true(v);
		} else if (strcmp(key, "ui") == 0) {
			if (!json_is_boolean(v))
				r = kiln_err(err, KILN_E_INVALID, "ui: want true or false");
			else
				c->ui = json_is_true(v);
		} else if (strcmp(key, "s3") == 0) {
			r = load_s3(c, v, err);
		} else if (strcmp(key, "build") == 0 || strcmp(key, "sandboxes") == 0) {
			/* the build and sandbox services' settings (service/ reads them): kept as they are */
			json_t **slot = key[0] == 'b' ? &c->build : &c->sandboxes;
			if (!json_is_boolean(v) && !json_is_object(v)) {
				r = kiln_err(err, KILN_E_INVALID, "%s: want true, false or an object", key);
			} else {
				json_decref(*slot);
				*slot = json_is_false(v) ? NULL : json_incref(v);
			}
		} else if (strcmp(key, "quotas") == 0) {
			if ((r = reg_quota_config_check(v, err)) == 0) {
				json_decref(c->quotas);
				c->quotas = json_incref(v);
			}
		} else if (strcmp(key, "access_log") == 0) {
			r = json_is_string(v) ? reg_access_log_parse(json_string_value(v), &c->access_log, err)
					      : kiln_err(err, KILN_E_INVALID, "access_log: want \"text\", \"json\" or \"off\"");
		} else if (strcmp(key, "realm") == 0) {
			r = set_str(v, key, &c->realm, err);
		} else if (strcmp(key, "service") == 0) {
			r = set_str(v, key, &c->service, err);
		} else {
			r = kiln_err(err, KILN_E_INVALID, "unknown key '%s'", key);
		}
		if (r < 0)
			goto out;
	}
	if (c->retention && c->s3_endpoint) {
		kiln_err(err, KILN_E_INVALID, "retention: needs the filesystem metadata backend (meta.db), not S3");
		goto out;
	}
	ret = 0;
out:
	if (ret < 0)
		kiln_error_wrap(err, "config %s", path);
	json_decref(root);
	return ret;
}

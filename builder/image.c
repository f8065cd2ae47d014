/* image.c — the OCI image config as docker/BuildKit write it (Env, Cmd,
 * Entrypoint, WorkingDir, User, Labels, ExposedPorts, Volumes, StopSignal,
 * Healthcheck, Shell, OnBuild, history, rootfs.diff_ids), the manifest, and
 * the export to a standard OCI image layout that skopeo and umoci read. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "builder/internal.h"

static json_t *obj_child(json_t *parent, const char *key)
{
	json_t *o = json_object_get(parent, key);
	if (!json_is_object(o)) {
		o = json_object();
		json_object_set_new(parent, key, o);
	}
	return o;
}

json_t *build_config_scratch(void)
{
	return json_pack("{s:s,s:s,s:{s:[s]},s:{s:s,s:[]},s:[]}", "architecture", "amd64", "os", "linux", "config",
			 "Env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "rootfs", "type",
			 "layers", "diff_ids", "history");
}

static void env_set(json_t *cfg, const char *k, const char *v)
{
	json_t *env = json_object_get(cfg, "Env");
	size_t kl = strlen(k), i;
	json_t *e;
	char *kv = kiln_xasprintf("%s=%s", k, v ? v : "");

	if (!json_is_array(env)) {
		env = json_array();
		json_object_set_new(cfg, "Env", env);
	}
	json_array_foreach(env, i, e) {
		const char *s = json_string_value(e);
		if (s && strncmp(s, k, kl) == 0 && s[kl] == '=') {
			json_array_set_new(env, i, json_string(kv));
			free(kv);
			return;
		}
	}
	json_array_append_new(env, json_string(kv));
	free(kv);
}

static json_t *strv_json(char *const *v, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_string(v[i]));
	return a;
}

/* Shell form → SHELL (or /bin/sh -c) + the command; exec form as written. */
json_t *build_command_json(const struct df_step *st)
{
	if (st->exec_form)
		return strv_json(st->args.v, st->args.n);
	json_t *a = st->shell.n ? strv_json(st->shell.v, st->shell.n) : json_pack("[s,s]", "/bin/sh", "-c");
	kiln_buf cmd = KILN_BUF_INIT;
	for (size_t i = 0; i < st->args.n; i++)
		kiln_buf_addf(&cmd, "%s%s", i ? " " : "", st->args.v[i]);
	json_array_append_new(a, json_string(cmd.buf));
	kiln_buf_free(&cmd);
	return a;
}

/* Go's time.ParseDuration for HEALTHCHECK flags → nanoseconds. */
static int parse_go_duration(const char *s, const char *flag, json_int_t *ns, kiln_error **err)
{
	const char *p = s;
	double total = 0;

	if (strcmp(s, "0") == 0) {
		*ns = 0;
		return 0;
	}
	while (*p) {
		char *end;
		double v = strtod(p, &end);
		double unit = 0;
		if (end == p || v < 0)
			return kiln_err(err, KILN_E_INVALID, "--%s=%s: invalid duration", flag, s);
		p = end;
		if (strncmp(p, "ns", 2) == 0)
			unit = 1, p += 2;
		else if (strncmp(p, "us", 2) == 0 || strncmp(p, "\xc2\xb5s", 3) == 0)
			unit = 1e3, p += p[0] == 'u' ? 2 : 3;
		else if (strncmp(p, "ms", 2) == 0)
			unit = 1e6, p += 2;
		else if (*p == 's')
			unit = 1e9, p++;
		else if (*p == 'm')
			unit = 60e9, p++;
		else if (*p == 'h')
			unit = 3600e9, p++;
		else
			return kiln_err(err, KILN_E_INVALID, "--%s=%s: missing unit in duration", flag, s);
		total += v * unit;
	}
	*ns = (json_int_t)total;
	return 0;
}

static const char *flag_of(const struct df_step *st, const char *name)
{
	const char *v = NULL;
	for (size_t i = 0; i < st->n_flags; i++)
		if (strcmp(st->flags[i].key, name) == 0)
			v = st->flags[i].value;
	return v;
}

static int healthcheck(json_t *cfg, const struct df_step *st, kiln_error **err)
{
	static const struct {
		const char *flag, *key;
	} durs[] = { { "interval", "Interval" }, { "timeout", "Timeout" }, { "start-period", "StartPeriod" },
		     { "start-interval", "StartInterval" } };
	json_t *hc = json_object();

	if (st->args.n == 0) {
		json_decref(hc);
		return kiln_err(err, KILN_E_INVALID, "HEALTHCHECK needs NONE or CMD");
	}
	if (strcasecmp(st->args.v[0], "NONE") == 0) {
		json_object_set_new(hc, "Test", json_pack("[s]", "NONE"));
	} else {
		json_t *test;
		if (st->exec_form) {
			test = strv_json(st->args.v + 1, st->args.n - 1);
			json_array_insert_new(test, 0, json_string("CMD"));
		} else {
			kiln_buf cmd = KILN_BUF_INIT;
			for (size_t i = 1; i < st->args.n; i++)
				kiln_buf_addf(&cmd, "%s%s", i > 1 ? " " : "", st->args.v[i]);
			test = json_pack("[s,s]", "CMD-SHELL", cmd.buf);
			kiln_buf_free(&cmd);
		}
		json_object_set_new(hc, "Test", test);
		for (size_t i = 0; i < sizeof(durs) / sizeof(durs[0]); i++) {
			const char *v = flag_of(st, durs[i].flag);
			json_int_t ns = 0;
			if (!v)
				continue;
			if (parse_go_duration(v, durs[i].flag, &ns, err) < 0) {
				json_decref(hc);
				return -1;
			}
			if (ns)
				json_object_set_new(hc, durs[i].key, json_integer(ns));
		}
		const char *r = flag_of(st, "retries");
		if (r) {
			char *end;
			long n = strtol(r, &end, 10);
			if (!*r || *end || n < 0) {
				json_decref(hc);
				return kiln_err(err, KILN_E_INVALID, "--retries=%s: not a number", r);
			}
			if (n)
				json_object_set_new(hc, "Retries", json_integer(n));
		}
	}
	json_object_set_new(cfg, "Healthcheck", hc);
	return 0;
}

static int expose(json_t *cfg, const char *spec, kiln_error **err)
{
	json_t *ports = obj_child(cfg, "ExposedPorts");
	char *s = kiln_xstrdup(spec), *proto = strchr(s, '/');
	long lo, hi;
	char *end;
	int rc = -1;

	if (proto)
		*proto++ = '\0';
	for (char *q = proto; q && *q; q++)
		*q = (char)(*q >= 'A' && *q <= 'Z' ? *q + 32 : *q);
	lo = strtol(s, &end, 10);
	hi = lo;
	if (*end == '-')
		hi = strtol(end + 1, &end, 10);
	if (end == s || *end || lo < 0 || hi < lo || hi > 65535 ||
	    (proto && strcmp(proto, "tcp") && strcmp(proto, "udp") && strcmp(proto, "sctp"))) {
		kiln_err(err, KILN_E_INVALID, "EXPOSE %s: invalid port", spec);
		goto out;
	}
	for (long p = lo; p <= hi; p++) {
		char *key = kiln_xasprintf("%ld/%s", p, proto && *proto ? proto : "tcp");
		json_object_set_new(ports, key, json_object());
		free(key);
	}
	rc = 0;
out:
	free(s);
	return rc;
}

int build_config_step(json_t *root, const struct df_step *st, bool *cmd_set, kiln_error **err)
{
	json_t *cfg = obj_child(root, "config");

	switch (st->kind) {
	case DF_ENV:
		for (size_t i = 0; i < st->n_kvs; i++)
			env_set(cfg, st->kvs[i].key, st->kvs[i].value);
		break;
	case DF_LABEL: {
		json_t *labels = obj_child(cfg, "Labels");
		for (size_t i = 0; i < st->n_kvs; i++)
			json_object_set_new(labels, st->kvs[i].key, json_string(st->kvs[i].value ? st->kvs[i].value : ""));
		break;
	}
	case DF_MAINTAINER:
		json_object_set_new(root, "author", json_string(st->args.n ? st->args.v[0] : ""));
		break;
	case DF_EXPOSE:
		for (size_t i = 0; i < st->args.n; i++)
			if (expose(cfg, st->args.v[i], err) < 0)
				return -1;
		break;
	case DF_VOLUME: {
		json_t *vols = obj_child(cfg, "Volumes");
		for (size_t i = 0; i < st->args.n; i++) {
			if (!st->args.v[i][0])
				return kiln_err(err, KILN_E_INVALID, "VOLUME specified can not be an empty string");
			json_object_set_new(vols, st->args.v[i], json_object());
		}
		break;
	}
	case DF_STOPSIGNAL:
		json_object_set_new(cfg, "StopSignal", json_string(st->args.n ? st->args.v[0] : ""));
		break;
	case DF_USER:
		json_object_set_new(cfg, "User", json_string(st->args.n ? st->args.v[0] : ""));
		break;
	case DF_WORKDIR:
		json_object_set_new(cfg, "WorkingDir", json_string(st->workdir ? st->workdir : "/"));
		break;
	case DF_CMD:
		json_object_set_new(cfg, "Cmd", build_command_json(st));
		*cmd_set = true;
		break;
	case DF_ENTRYPOINT:
		json_object_set_new(cfg, "Entrypoint", build_command_json(st));
		/* an ENTRYPOINT resets a CMD inherited from the base, as docker does */
		if (!*cmd_set)
			json_object_set_new(cfg, "Cmd", json_null());
		break;
	case DF_HEALTHCHECK:
		return healthcheck(cfg, st, err);
	case DF_SHELL:
		if (!st->exec_form)
			return kiln_err(err, KILN_E_INVALID, "SHELL requires the arguments to be in JSON form");
		json_object_set_new(cfg, "Shell", strv_json(st->args.v, st->args.n));
		break;
	case DF_ONBUILD: {
		json_t *ob = json_object_get(cfg, "OnBuild");
		if (!json_is_array(ob)) {
			ob = json_array();
			json_object_set_new(cfg, "OnBuild", ob);
		}
		json_array_append_new(ob, json_string(st->args.n ? st->args.v[0] : ""));
		break;
	}
	default:
		break;
	}
	return 0;
}

void build_config_history(json_t *root, const char *created, const char *created_by, bool empty_layer)
{
	json_t *h = json_object_get(root, "history");
	if (!json_is_array(h)) {
		h = json_array();
		json_object_set_new(root, "history", h);
	}
	json_t *e = json_pack("{s:s,s:s,s:s}", "created", created, "created_by", created_by, "comment",
			      "buildkit.dockerfile.v0");
	if (empty_layer)
		json_object_set_new(e, "empty_layer", json_true());
	json_array_append_new(h, e);
}

int build_image_commit(build_store *s, json_t *root, const struct build_layer *layers, size_t n,
		       const char *created, char manifest[KILN_DIGEST_MAX], char config[KILN_DIGEST_MAX],
		       kiln_error **err)
{
	json_t *rfs = obj_child(root, "rootfs"), *ids = json_array(), *ls = json_array();
	char *text;
	int rc;

	json_object_set_new(rfs, "type", json_string("layers"));
	for (size_t i = 0; i < n; i++) {
		json_array_append_new(ids, json_string(layers[i].diff_id));
		json_array_append_new(ls, json_pack("{s:s,s:s,s:I}", "mediaType", layers[i].media_type, "digest",
						    layers[i].digest, "size", (json_int_t)layers[i].size));
	}
	json_object_set_new(rfs, "diff_ids", ids);
	json_object_set_new(root, "created", json_string(created));
	text = kiln_json_dumps_canonical(root);
	size_t clen = strlen(text);
	rc = build_store_put(s, text, clen, config, err);
	free(text);
	if (rc < 0) {
		json_decref(ls);
		return -1;
	}
	json_t *m = json_pack("{s:i,s:s,s:{s:s,s:s,s:I},s:o}", "schemaVersion", 2, "mediaType",
			      "application/vnd.oci.image.manifest.v1+json", "config", "mediaType",
			      "application/vnd.oci.image.config.v1+json", "digest", config, "size", (json_int_t)clen,
			      "layers", ls);
	text = kiln_json_dumps_canonical(m);
	rc = build_store_put(s, text, strlen(text), manifest, err);
	free(text);
	json_decref(m);
	return rc;
}

static int export_blob(build_store *s, const char *digest, const char *dir, kiln_error **err)
{
	char *src = build_store_blob_path(s, digest);
	char *dst = kiln_xasprintf("%s/blobs/sha256/%s", dir, kiln_digest_hex(digest));
	int rc = 0;

	if (access(dst, F_OK) != 0 && link(src, dst) < 0) {
		char *data = NULL;
		size_t len = 0;
		rc = build_store_read(s, digest, &data, &len, 0, err);
		if (rc == 0)
			rc = kiln_write_atomic(dst, data, len, 0644, err);
		free(data);
	}
	free(src);
	free(dst);
	return rc;
}

int build_oci_export(build_store *s, const char *manifest, const char *dir, const char *refname, kiln_error **err)
{
	char *data = NULL, *p = NULL;
	size_t len = 0;
	json_t *m = NULL, *index = NULL;
	int rc = -1;

	p = kiln_xasprintf("%s/blobs/sha256", dir);
	if (kiln_mkdir_p(p, 0755, err) < 0)
		goto out;
	free(p);
	p = NULL;
	if (build_store_read(s, manifest, &data, &len, 16 << 20, err) < 0)
		goto out;
	m = kiln_json_loadb(data, len, manifest, err);
	if (!m)
		goto out;
	/* blobs first, index last: a reader never sees a manifest whose blobs are missing */
	if (export_blob(s, kiln_json_str(json_object_get(m, "config"), "digest"), dir, err) < 0)
		goto out;
	json_t *l;
	size_t i;
	json_array_foreach(json_object_get(m, "layers"), i, l)
		if (export_blob(s, kiln_json_str(l, "digest"), dir, err) < 0)
			goto out;
	if (export_blob(s, manifest, dir, err) < 0)
		goto out;
	p = kiln_xasprintf("%s/oci-layout", dir);
	const char *layout = "{\"imageLayoutVersion\":\"1.0.0\"}";
	if (kiln_write_atomic(p, layout, strlen(layout), 0644, err) < 0)
		goto out;
	free(p);
	p = kiln_xasprintf("%s/index.json", dir);
	if (access(p, F_OK) == 0) {
		index = kiln_json_load_file(p, err);
		if (!index)
			goto out;
	} else {
		index = json_pack("{s:i,s:s,s:[]}", "schemaVersion", 2, "mediaType",
				  "application/vnd.oci.image.index.v1+json", "manifests");
	}
	json_t *ms = json_object_get(index, "manifests");
	if (!json_is_array(ms)) {
		kiln_err(err, KILN_E_INVALID, "%s: no manifests array", p);
		goto out;
	}
	/* the same name now points at the new manifest */
	for (i = json_array_size(ms); i-- > 0;) {
		const char *rn = kiln_json_str(json_object_get(json_array_get(ms, i), "annotations"),
					      "org.opencontainers.image.ref.name");
		if (rn && refname && strcmp(rn, refname) == 0)
			json_array_remove(ms, i);
	}
	json_t *desc = json_pack("{s:s,s:s,s:I}", "mediaType", "application/vnd.oci.image.manifest.v1+json",
				 "digest", manifest, "size", (json_int_t)len);
	if (refname)
		json_object_set_new(desc, "annotations",
				    json_pack("{s:s}", "org.opencontainers.image.ref.name", refname));
	json_array_append_new(ms, desc);
	rc = kiln_json_write_file(p, index, err);
out:
	if (rc < 0)
		kiln_error_wrap(err, "--oci-out %s", dir);
	free(p);
	free(data);
	json_decref(m);
	json_decref(index);
	return rc;
}

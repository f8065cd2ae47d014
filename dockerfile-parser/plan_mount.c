/* plan_mount.c — RUN --mount parsed once, into struct df_mount: BuildKit's
 * parseMount (encoding/csv fields, keys and type/sharing values
 * case-insensitive, strconv.ParseBool/ParseUint, go-units sizes), its checks
 * after expansion and the defaults its dispatch applies (secret and ssh ids
 * and targets, file modes).  The builder consumes the struct as it is. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dockerfile-parser/internal.h"

static const char *const mount_types[] = { "bind", "cache", "tmpfs", "secret", "ssh", NULL };
static const char *const sharing_modes[] = { "shared", "private", "locked", NULL };

/* go-units RAMInBytes: "64m", "1.5 GiB", "100" (binary multiples). */
static int ram_in_bytes(const char *s, uint64_t *out)
{
	static const char units[] = "kmgtp";
	const char *p = s;
	double mul = 1;

	if (!(*p >= '0' && *p <= '9'))
		return -1;
	while (*p >= '0' && *p <= '9')
		p++;
	if (*p == '.') {
		p++;
		if (!(*p >= '0' && *p <= '9'))
			return -1;
		while (*p >= '0' && *p <= '9')
			p++;
		if (*p == '.') /* the regexp takes "1.2.3", ParseFloat does not */
			return -1;
	}
	const char *num_end = p;
	if (*p == ' ')
		p++;
	if (*p) {
		const char *u = strchr(units, *p | 0x20);
		if (u && *p != ' ') {
			for (const char *k = units; k <= u; k++)
				mul *= 1024;
			p++;
		}
	}
	if (*p == 'i' || *p == 'I')
		p++;
	if (*p == 'b' || *p == 'B')
		p++;
	if (*p)
		return -1;
	char *num = kiln_xstrndup(s, (size_t)(num_end - s));
	double v = strtod(num, NULL) * mul;
	free(num);
	if (!isfinite(v) || v >= 9.2233720368547758e18)
		return -1;
	*out = (uint64_t)v;
	return 0;
}

/* BuildKit tests these fields against "": an empty value is no value. */
static int set_str(char **dst, const char *v)
{
	free(*dst);
	*dst = *v ? kiln_xstrdup(v) : NULL;
	return 0;
}

/* Go's path.Base. */
static char *path_base(const char *p)
{
	size_t len = strlen(p);

	while (len > 1 && p[len - 1] == '/')
		len--;
	if (len == 0)
		return kiln_xstrdup(".");
	const char *s = p + len;
	while (s > p && s[-1] != '/')
		s--;
	if (s == p + len) /* all slashes */
		return kiln_xstrdup("/");
	return kiln_xstrndup(s, (size_t)(p + len - s));
}

static const char *type_name(enum df_mount_type t)
{
	return mount_types[t];
}

/* The checks of BuildKit's parseMount once every field is read, and the
 * defaults of its dispatchSecret / dispatchSSH / cache mounts. */
static int finish(const struct dfp_ctx *c, const struct df_node *n, struct df_mount *m, bool ro_auto,
		  bool has_sharing, bool has_mode, bool has_uid, bool has_gid, unsigned ssh_index, kiln_error **err)
{
	bool file_info = m->type == DF_MOUNT_SECRET || m->type == DF_MOUNT_SSH || m->type == DF_MOUNT_CACHE;
	const char *t = type_name(m->type);

	if (!file_info) {
		const char *bad = has_mode ? "mode" : has_uid ? "uid" : has_gid ? "gid" : NULL;
		if (bad)
			return dfp_fail(c, n, err, "%s not allowed for \"%s\" type mounts", bad, t);
	}
	if (ro_auto)
		m->readonly = !(m->type == DF_MOUNT_CACHE || m->type == DF_MOUNT_TMPFS);
	if (m->type == DF_MOUNT_SECRET) {
		if (m->from)
			return dfp_fail(c, n, err, "secret mount should not have a from");
		if (has_sharing)
			return dfp_fail(c, n, err, "secret mount should not define sharing");
		if (!m->source && !m->target && !m->id)
			return dfp_fail(c, n, err, "invalid secret mount. one of source, target required");
		if (m->source && m->id)
			return dfp_fail(c, n, err, "both source and id can't be set");
	}
	if (has_sharing && m->type != DF_MOUNT_CACHE)
		return dfp_fail(c, n, err, "invalid cache sharing set for %s mount", t);
	switch (m->type) {
	case DF_MOUNT_SECRET:
		if (m->source) {
			free(m->id);
			m->id = m->source;
			m->source = NULL;
		}
		if (!m->id)
			m->id = path_base(m->target);
		if (!m->target && !m->env) {
			char *b = path_base(m->id);
			m->target = kiln_xasprintf("/run/secrets/%s", b);
			free(b);
		}
		if (!has_mode)
			m->mode = 0400;
		break;
	case DF_MOUNT_SSH:
		if (m->source)
			return dfp_fail(c, n, err, "ssh does not support source");
		if (!m->id)
			m->id = kiln_xstrdup("default");
		if (!m->target)
			m->target = kiln_xasprintf("/run/buildkit/ssh_agent.%u", ssh_index);
		if (!has_mode)
			m->mode = 0600;
		break;
	case DF_MOUNT_CACHE:
		if (!m->id)
			m->id = m->target && m->target[0] == '/' ? dfp_path_clean_abs(m->target)
							  : kiln_xstrdup(m->target ? m->target : ".");
		if (!has_mode)
			m->mode = 0755;
		break;
	default:
		break;
	}
	return 0;
}

/* One key=value field, its value already expanded. */
static int field(const struct dfp_ctx *c, const struct df_node *n, struct df_mount *m, const char *key,
		 const char *value, const char *raw, bool *ro_auto, bool *has_sharing, bool *has_mode, bool *has_uid,
		 bool *has_gid, kiln_error **err)
{
	bool b;

	if (!strcmp(key, "type")) {
		char *low = df_go_lower(value);
		size_t t;
		for (t = 0; mount_types[t]; t++)
			if (!strcmp(mount_types[t], low))
				break;
		free(low);
		if (!mount_types[t]) {
			kiln_buf q = KILN_BUF_INIT;
			const char *hint = df_suggest(value, mount_types);
			df_go_quote(&q, value, strlen(value));
			if (hint)
				dfp_fail(c, n, err, "unsupported mount type %s (did you mean %s?)", q.buf, hint);
			else
				dfp_fail(c, n, err, "unsupported mount type %s", q.buf);
			kiln_buf_free(&q);
			return -1;
		}
		m->type = (enum df_mount_type)t;
		return 0;
	}
	if (!strcmp(key, "from"))
		return set_str(&m->from, value);
	if (!strcmp(key, "source") || !strcmp(key, "src"))
		return set_str(&m->source, value);
	if (!strcmp(key, "target") || !strcmp(key, "dst") || !strcmp(key, "destination"))
		return set_str(&m->target, value);
	if (!strcmp(key, "readonly") || !strcmp(key, "ro") || !strcmp(key, "readwrite") || !strcmp(key, "rw")) {
		if (df_go_parse_bool(value, &b) < 0)
			return dfp_fail(c, n, err, "invalid value for %s: %s", key, value);
		m->readonly = !strcmp(key, "readonly") || !strcmp(key, "ro") ? b : !b;
		*ro_auto = false;
		return 0;
	}
	if (!strcmp(key, "required")) {
		if (m->type != DF_MOUNT_SECRET && m->type != DF_MOUNT_SSH)
			return dfp_fail(c, n, err, "unexpected key '%s' for mount type '%s'", key, type_name(m->type));
		if (df_go_parse_bool(value, &b) < 0)
			return dfp_fail(c, n, err, "invalid value for %s: %s", key, value);
		m->required = b;
		return 0;
	}
	if (!strcmp(key, "size")) {
		if (m->type != DF_MOUNT_TMPFS)
			return dfp_fail(c, n, err, "unexpected key '%s' for mount type '%s'", key, type_name(m->type));
		if (ram_in_bytes(value, &m->size) < 0)
			return dfp_fail(c, n, err, "invalid value for %s: %s", key, value);
		return 0;
	}
	if (!strcmp(key, "id"))
		return set_str(&m->id, value);
	if (!strcmp(key, "sharing")) {
		char *low = df_go_lower(value);
		size_t t;
		for (t = 0; sharing_modes[t]; t++)
			if (!strcmp(sharing_modes[t], low))
				break;
		free(low);
		if (!sharing_modes[t]) {
			kiln_buf q = KILN_BUF_INIT;
			const char *hint = df_suggest(value, sharing_modes);
			df_go_quote(&q, value, strlen(value));
			if (hint)
				dfp_fail(c, n, err, "unsupported sharing value %s (did you mean %s?)", q.buf, hint);
			else
				dfp_fail(c, n, err, "unsupported sharing value %s", q.buf);
			kiln_buf_free(&q);
			return -1;
		}
		m->sharing = (enum df_mount_sharing)t;
		*has_sharing = true;
		return 0;
	}
	if (!strcmp(key, "mode") || !strcmp(key, "uid") || !strcmp(key, "gid")) {
		uint32_t *dst = key[0] == 'm' ? &m->mode : key[0] == 'u' ? &m->uid : &m->gid;
		bool *has = key[0] == 'm' ? has_mode : key[0] == 'u' ? has_uid : has_gid;
		if (!df_go_parse_uint32(value, key[0] == 'm' ? 8 : 10, dst))
			return dfp_fail(c, n, err, "invalid value %s for %s", value, key);
		*has = true;
		return 0;
	}
	if (!strcmp(key, "env")) { /* a pointer in BuildKit: env= is set, if empty */
		free(m->env);
		m->env = kiln_xstrdup(value);
		return 0;
	}
	static const char *const keys[] = { "type", "from", "source", "target", "readonly", "id", "sharing",
					    "required", "size", "mode", "uid", "gid", "src", "dst", "destination",
					    "ro", "rw", "readwrite", "env", NULL };
	const char *hint = df_suggest(key, keys);
	if (hint)
		return dfp_fail(c, n, err, "unexpected key '%s' in '%s' (did you mean %s?)", key, raw, hint);
	return dfp_fail(c, n, err, "unexpected key '%s' in '%s'", key, raw);
}

int dfp_mount_parse(const struct dfp_ctx *c, const struct df_node *n, const char *spec, const struct dfp_env *env,
		    unsigned ssh_index, struct df_mount *m, kiln_error **err)
{
	kiln_strv fields = KILN_STRV_INIT;
	bool ro_auto = true, has_sharing = false, has_mode = false, has_uid = false, has_gid = false;
	size_t errcol = 0;
	const char *e;
	int rc = -1;

	memset(m, 0, sizeof(*m));
	m->type = DF_MOUNT_BIND;
	m->from_stage = -1;
	if ((e = df_csv_fields(spec, &fields, &errcol)) != NULL) {
		if (errcol)
			dfp_fail(c, n, err, "failed to parse csv mounts: parse error on line 1, column %zu: %s", errcol, e);
		else
			dfp_fail(c, n, err, "failed to parse csv mounts: %s", e);
		goto out;
	}
	for (size_t i = 0; i < fields.n; i++) {
		const char *f = fields.v[i], *eq = strchr(f, '=');
		char *rk = eq ? kiln_xstrndup(f, (size_t)(eq - f)) : kiln_xstrdup(f);
		char *key = df_go_lower(rk), *value = NULL;
		int r = 0;

		free(rk);
		if (!env) {
			/* before expansion: only from= matters (the stage graph) */
			if (eq && !strcmp(key, "from"))
				set_str(&m->from, eq + 1);
			free(key);
			continue;
		}
		if (!eq) {
			if (!strcmp(key, "readonly") || !strcmp(key, "ro") || !strcmp(key, "readwrite") ||
			    !strcmp(key, "rw")) {
				m->readonly = !strcmp(key, "readonly") || !strcmp(key, "ro");
				ro_auto = false;
			} else if (!strcmp(key, "required") && (m->type == DF_MOUNT_SECRET || m->type == DF_MOUNT_SSH)) {
				m->required = true;
			} else if (!strcmp(key, "required")) {
				r = dfp_fail(c, n, err, "unexpected key '%s' for mount type '%s'", key, type_name(m->type));
			} else {
				r = dfp_fail(c, n, err, "invalid field '%s' must be a key=value pair", f);
			}
		} else if (!strcmp(key, "from")) {
			/* not expanded: the stage graph was built from it as written */
			r = field(c, n, m, key, eq + 1, f, &ro_auto, &has_sharing, &has_mode, &has_uid, &has_gid, err);
		} else {
			kiln_error *xe = NULL;
			if (dfx_process(eq + 1, c->ast->escape, 0, dfp_env_lookup, (void *)env, &value, NULL, &xe) < 0) {
				r = dfp_fail(c, n, err, "%s", kiln_error_message(xe));
				kiln_error_free(xe);
			} else {
				r = field(c, n, m, key, value, f, &ro_auto, &has_sharing, &has_mode, &has_uid, &has_gid,
					  err);
			}
		}
		free(key);
		free(value);
		if (r < 0)
			goto out;
	}
	if (env && finish(c, n, m, ro_auto, has_sharing, has_mode, has_uid, has_gid, ssh_index, err) < 0)
		goto out;
	rc = 0;
out:
	if (rc < 0)
		dfp_mount_free(m);
	kiln_strv_free(&fields);
	return rc;
}

void dfp_mount_free(struct df_mount *m)
{
	free(m->from);
	free(m->source);
	free(m->target);
	free(m->id);
	free(m->env);
	memset(m, 0, sizeof(*m));
	m->from_stage = -1;
}

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

json_t *dfp_mount_json(const struct df_mount *m)
{
	json_t *o = json_object();
	bool file_info = m->type == DF_MOUNT_SECRET || m->type == DF_MOUNT_SSH || m->type == DF_MOUNT_CACHE;
	char mode[16];

	json_object_set_new(o, "type", json_string(type_name(m->type)));
	json_object_set_new(o, "from", str_or_null(m->from));
	json_object_set_new(o, "from_stage", json_integer(m->from_stage));
	json_object_set_new(o, "source", str_or_null(m->source));
	json_object_set_new(o, "target", str_or_null(m->target));
	json_object_set_new(o, "id", str_or_null(m->id));
	json_object_set_new(o, "env", str_or_null(m->env));
	json_object_set_new(o, "readonly", json_boolean(m->readonly));
	json_object_set_new(o, "required", json_boolean(m->required));
	json_object_set_new(o, "sharing", m->type == DF_MOUNT_CACHE ? json_string(sharing_modes[m->sharing]) : json_null());
	json_object_set_new(o, "size", json_integer((json_int_t)m->size));
	snprintf(mode, sizeof(mode), "%04o", (unsigned)m->mode);
	json_object_set_new(o, "mode", file_info ? json_string(mode) : json_null());
	json_object_set_new(o, "uid", file_info ? json_integer(m->uid) : json_null());
	json_object_set_new(o, "gid", file_info ? json_integer(m->gid) : json_null());
	return o;
}

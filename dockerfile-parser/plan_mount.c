/* plan_mount.c — RUN --mount in the plan: each value read after ARG
 * expansion by the one reading of mount_spec.c, then the defaults BuildKit's
 * dispatch applies (secret and ssh ids and targets, cache ids, file modes);
 * the builder consumes struct df_mount as it is. */
#include <stdlib.h>
#include <string.h>

#include "dockerfile-parser/internal.h"

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

/* The defaults of BuildKit's dispatchSecret / dispatchSSH / cache mounts. */
static int dispatch_defaults(struct df_mount *m, bool mode_given, unsigned ssh_index, char **msg)
{
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
		if (!mode_given)
			m->mode = 0400;
		break;
	case DF_MOUNT_SSH:
		if (m->source) {
			*msg = kiln_xstrdup("ssh does not support source");
			return -1;
		}
		if (!m->id)
			m->id = kiln_xstrdup("default");
		if (!m->target)
			m->target = kiln_xasprintf("/run/buildkit/ssh_agent.%u", ssh_index);
		if (!mode_given)
			m->mode = 0600;
		break;
	case DF_MOUNT_CACHE:
		if (!m->id)
			m->id = m->target && m->target[0] == '/' ? dfp_path_clean_abs(m->target)
							  : kiln_xstrdup(m->target ? m->target : ".");
		if (!mode_given)
			m->mode = 0755;
		break;
	default:
		break;
	}
	return 0;
}

struct expansion {
	const struct dfp_ctx *c;
	const struct dfp_env *env;
};

static int expand_value(void *ctx, const char *value, char **out, char **msg)
{
	const struct expansion *x = ctx;
	kiln_error *xe = NULL;

	if (dfx_process(value, x->c->ast->escape, 0, dfp_env_lookup, (void *)x->env, out, NULL, &xe) < 0) {
		*msg = kiln_xstrdup(kiln_error_message(xe));
		kiln_error_free(xe);
		return -1;
	}
	return 0;
}

int dfp_mount_parse(const struct dfp_ctx *c, const struct df_node *n, const char *spec, const struct dfp_env *env,
		    unsigned ssh_index, struct df_mount *m, kiln_error **err)
{
	struct expansion x = { c, env };
	bool mode_given = false;
	char *msg = NULL;

	if (df_mount_read(spec, env ? expand_value : NULL, &x, m, &mode_given, &msg) < 0 ||
	    (env && dispatch_defaults(m, mode_given, ssh_index, &msg) < 0)) {
		dfp_fail(c, n, err, "%s", msg);
		free(msg);
		df_mount_free(m);
		return -1;
	}
	return 0;
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

	json_object_set_new(o, "type", json_string(df_mount_type_name(m->type)));
	json_object_set_new(o, "from", str_or_null(m->from));
	json_object_set_new(o, "from_stage", json_integer(m->from_stage));
	json_object_set_new(o, "source", str_or_null(m->source));
	json_object_set_new(o, "target", str_or_null(m->target));
	json_object_set_new(o, "id", str_or_null(m->id));
	json_object_set_new(o, "env", str_or_null(m->env));
	json_object_set_new(o, "readonly", json_boolean(m->readonly));
	json_object_set_new(o, "required", json_boolean(m->required));
	json_object_set_new(o, "sharing", m->type == DF_MOUNT_CACHE ? json_string(df_mount_sharing_name(m->sharing)) : json_null());
	json_object_set_new(o, "size", json_integer((json_int_t)m->size));
	snprintf(mode, sizeof(mode), "%04o", (unsigned)m->mode);
	json_object_set_new(o, "mode", file_info ? json_string(mode) : json_null());
	json_object_set_new(o, "uid", file_info ? json_integer(m->uid) : json_null());
	json_object_set_new(o, "gid", file_info ? json_integer(m->gid) : json_null());
	return o;
}

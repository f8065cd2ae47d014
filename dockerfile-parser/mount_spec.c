/* mount_spec.c — RUN --mount's one vocabulary and its one reading: BuildKit's
 * parseMount keys (aliases, the mount types that take them, how their values
 * read), the type and sharing values, and validateMount's checks.  The check
 * before ARG expansion (parse_check_values.c) and the plan after it
 * (plan_mount.c) both read a value here, so they cannot disagree. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "dockerfile-parser/internal.h"

static const char *const type_names[] = { "bind", "cache", "tmpfs", "secret", "ssh", NULL };
static const char *const sharing_names[] = { "shared", "private", "locked", NULL };

const char *df_mount_type_name(enum df_mount_type t)
{
	return (unsigned)t < sizeof(type_names) / sizeof(type_names[0]) - 1 ? type_names[t] : "?";
}

const char *df_mount_sharing_name(enum df_mount_sharing s)
{
	return (unsigned)s < sizeof(sharing_names) / sizeof(sharing_names[0]) - 1 ? sharing_names[s] : "?";
}

enum mount_field { F_TYPE, F_FROM, F_SOURCE, F_TARGET, F_READONLY, F_READWRITE, F_REQUIRED, F_SIZE, F_ID,
		   F_SHARING, F_MODE, F_UID, F_GID, F_ENV };
enum mount_value { V_STRING, V_BOOL, V_TYPE, V_SHARING, V_SIZE, V_OCTAL, V_DECIMAL };

#define ONLY(t) (1u << DF_MOUNT_##t)
/* In BuildKit's order of allKeys, which the suggestion for an unknown key
 * follows (the first closest wins). */
static const struct mount_key {
	const char *name;
	enum mount_field field;
	enum mount_value value;
	unsigned types; /* the mount types (as read so far) that take the key; 0: all */
	bool bare;      /* may stand alone, without '=': a boolean, true */
} mount_keys[] = {
	{ "type", F_TYPE, V_TYPE, 0, false },
	{ "from", F_FROM, V_STRING, 0, false },
	{ "source", F_SOURCE, V_STRING, 0, false },
	{ "target", F_TARGET, V_STRING, 0, false },
	{ "readonly", F_READONLY, V_BOOL, 0, true },
	{ "id", F_ID, V_STRING, 0, false },
	{ "sharing", F_SHARING, V_SHARING, 0, false },
	{ "required", F_REQUIRED, V_BOOL, ONLY(SECRET) | ONLY(SSH), true },
	{ "size", F_SIZE, V_SIZE, ONLY(TMPFS), false },
	{ "mode", F_MODE, V_OCTAL, 0, false },
	{ "uid", F_UID, V_DECIMAL, 0, false },
	{ "gid", F_GID, V_DECIMAL, 0, false },
	{ "src", F_SOURCE, V_STRING, 0, false },
	{ "dst", F_TARGET, V_STRING, 0, false },
	{ "destination", F_TARGET, V_STRING, 0, false },
	{ "ro", F_READONLY, V_BOOL, 0, true },
	{ "rw", F_READWRITE, V_BOOL, 0, true },
	{ "readwrite", F_READWRITE, V_BOOL, 0, true },
	{ "env", F_ENV, V_STRING, 0, false }, /* a pointer in BuildKit: env= is given, if empty */
};
#define N_KEYS (sizeof(mount_keys) / sizeof(mount_keys[0]))

/* What one reading learnt beyond struct df_mount. */
struct reading {
	struct df_mount *m;
	char **msg;
	bool type_waits;   /* type=$X before expansion: what hangs on the type waits too */
	bool ro_auto;      /* no readonly/readwrite key: the type decides */
	bool sharing, mode, uid, gid;
	unsigned waiting;  /* (1u << field): its value waits for expansion */
};

static int say(struct reading *r, const char *fmt, ...) KILN_PRINTF(2, 3);
static int say(struct reading *r, const char *fmt, ...)
{
	kiln_buf b = KILN_BUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	kiln_buf_vaddf(&b, fmt, ap);
	va_end(ap);
	free(*r->msg);
	*r->msg = kiln_buf_detach(&b);
	return -1;
}

/* "unsupported WHAT %q", with BuildKit's suggestion when one is close. */
static int say_unsupported(struct reading *r, const char *what, const char *val, const char *const *names)
{
	kiln_buf q = KILN_BUF_INIT;
	const char *hint = df_suggest(val, names);

	df_go_quote(&q, val, strlen(val));
	if (hint)
		say(r, "unsupported %s %s (did you mean %s?)", what, q.buf, hint);
	else
		say(r, "unsupported %s %s", what, q.buf);
	kiln_buf_free(&q);
	return -1;
}

static const struct mount_key *find_key(const char *key)
{
	for (size_t i = 0; i < N_KEYS; i++)
		if (!strcmp(mount_keys[i].name, key))
			return &mount_keys[i];
	return NULL;
}

static int unknown_key(struct reading *r, const char *key, const char *field)
{
	const char *names[N_KEYS + 1];

	for (size_t i = 0; i < N_KEYS; i++)
		names[i] = mount_keys[i].name;
	names[N_KEYS] = NULL;
	const char *hint = df_suggest(key, names);
	if (hint)
		return say(r, "unexpected key '%s' in '%s' (did you mean %s?)", key, field, hint);
	return say(r, "unexpected key '%s' in '%s'", key, field);
}

/* The index of val (case-insensitive) in names, or -1. */
static int lookup_lower(const char *val, const char *const *names)
{
	char *low = df_go_lower(val);
	int t;

	for (t = 0; names[t] && strcmp(names[t], low) != 0; t++)
		;
	free(low);
	return names[t] ? t : -1;
}

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
static void set_str(char **dst, const char *v)
{
	free(*dst);
	*dst = *v ? kiln_xstrdup(v) : NULL;
}

/* The key's value: checked by its kind, then stored. */
static int take_value(struct reading *r, const struct mount_key *k, const char *v)
{
	struct df_mount *m = r->m;
	uint32_t *num = k->field == F_MODE ? &m->mode : k->field == F_UID ? &m->uid : &m->gid;
	bool b = false;
	int t = 0;

	switch (k->value) {
	case V_BOOL:
		if (df_go_parse_bool(v, &b) < 0)
			return say(r, "invalid value for %s: %s", k->name, v);
		break;
	case V_TYPE:
		if ((t = lookup_lower(v, type_names)) < 0)
			return say_unsupported(r, "mount type", v, type_names);
		break;
	case V_SHARING:
		if ((t = lookup_lower(v, sharing_names)) < 0)
			return say_unsupported(r, "sharing value", v, sharing_names);
		break;
	case V_SIZE:
		if (ram_in_bytes(v, &m->size) < 0)
			return say(r, "invalid value for %s: %s", k->name, v);
		break;
	case V_OCTAL:
	case V_DECIMAL:
		if (!df_go_parse_uint32(v, k->value == V_OCTAL ? 8 : 10, num))
			return say(r, "invalid value %s for %s", v, k->name);
		break;
	case V_STRING:
		break;
	}
	switch (k->field) {
	case F_TYPE:
		m->type = (enum df_mount_type)t;
		r->type_waits = false;
		break;
	case F_SHARING:
		m->sharing = (enum df_mount_sharing)t;
		break;
	case F_READONLY:
	case F_READWRITE:
		m->readonly = k->field == F_READONLY ? b : !b;
		break;
	case F_REQUIRED:
		m->required = b;
		break;
	case F_FROM:
		set_str(&m->from, v);
		break;
	case F_SOURCE:
		set_str(&m->source, v);
		break;
	case F_TARGET:
		set_str(&m->target, v);
		break;
	case F_ID:
		set_str(&m->id, v);
		break;
	case F_ENV:
		free(m->env);
		m->env = kiln_xstrdup(v);
		break;
	default:
		break;
	}
	return 0;
}

/* What reading the key says about the mount, whatever its value. */
static void note_key(struct reading *r, const struct mount_key *k)
{
	r->ro_auto &= k->field != F_READONLY && k->field != F_READWRITE;
	r->sharing |= k->field == F_SHARING;
	r->mode |= k->field == F_MODE;
	r->uid |= k->field == F_UID;
	r->gid |= k->field == F_GID;
}

/* One field, as parseMount reads it: a bare key, else the value expanded
 * (expand NULL: before expansion, where a value holding '$' waits, kept as
 * written so that it counts as given), then the key and its value. */
static int read_field(struct reading *r, const char *field, df_mount_expand_fn expand, void *ctx)
{
	const char *eq = strchr(field, '=');
	char *raw = eq ? kiln_xstrndup(field, (size_t)(eq - field)) : kiln_xstrdup(field);
	char *key = df_go_lower(raw), *value = NULL;
	const struct mount_key *k = find_key(key);
	const char *v = eq ? eq + 1 : "true", *dollar = eq ? strchr(v, '$') : NULL;
	bool waits = false;
	int rc = -1;

	free(raw);
	if (!eq && !(k && k->bare)) {
		say(r, "invalid field '%s' must be a key=value pair", field);
		goto out;
	}
	if (k && k->field == F_FROM) {
		/* never expanded: the stage graph is built from it as written */
		if (!expand && dollar && dollar[1] != '\0') {
			say(r, "'%s' doesn't support variable expansion, define alias stage instead", key);
			goto out;
		}
	} else if (eq && expand) {
		if (expand(ctx, v, &value, r->msg) < 0)
			goto out;
		v = value;
	} else {
		waits = dollar != NULL;
	}
	if (!k) {
		unknown_key(r, key, field);
		goto out;
	}
	if (k->types && !r->type_waits && !(k->types & (1u << r->m->type))) {
		say(r, "unexpected key '%s' for mount type '%s'", key, df_mount_type_name(r->m->type));
		goto out;
	}
	note_key(r, k);
	if (waits) {
		r->waiting |= 1u << k->field;
		r->type_waits |= k->field == F_TYPE;
		if (k->value == V_STRING)
			take_value(r, k, v);
		rc = 0;
		goto out;
	}
	rc = take_value(r, k, v);
out:
	free(key);
	free(value);
	return rc;
}

/* validateMount, once every field is read (all of it hangs on the type). */
static int validate(struct reading *r)
{
	struct df_mount *m = r->m;
	const char *t = df_mount_type_name(m->type);
	bool file_info = m->type == DF_MOUNT_SECRET || m->type == DF_MOUNT_SSH || m->type == DF_MOUNT_CACHE;
	bool src_and_id = m->source && m->id && !(r->waiting & (1u << F_SOURCE | 1u << F_ID));

	if (r->type_waits)
		return 0;
	if (!file_info) {
		const char *bad = r->mode ? "mode" : r->uid ? "uid" : r->gid ? "gid" : NULL;
		if (bad)
			return say(r, "%s not allowed for \"%s\" type mounts", bad, t);
	}
	if (r->ro_auto)
		m->readonly = !(m->type == DF_MOUNT_CACHE || m->type == DF_MOUNT_TMPFS);
	if (m->type == DF_MOUNT_SECRET) {
		if (m->from)
			return say(r, "secret mount should not have a from");
		if (r->sharing)
			return say(r, "secret mount should not define sharing");
		if (!m->source && !m->target && !m->id)
			return say(r, "invalid secret mount. one of source, target required");
		if (src_and_id)
			return say(r, "both source and id can't be set");
	}
	if (r->sharing && m->type != DF_MOUNT_CACHE)
		return say(r, "invalid cache sharing set for %s mount", t);
	return 0;
}

int df_mount_read(const char *spec, df_mount_expand_fn expand, void *ctx, struct df_mount *m, bool *mode_given,
		  char **msg)
{
	struct reading r = { .m = m, .msg = msg, .ro_auto = true };
	kiln_strv fields = KILN_STRV_INIT;
	size_t errcol = 0;
	const char *e;
	int rc = -1;

	*msg = NULL;
	memset(m, 0, sizeof(*m));
	m->type = DF_MOUNT_BIND;
	m->from_stage = -1;
	if ((e = df_csv_fields(spec, &fields, &errcol)) != NULL) {
		if (errcol)
			say(&r, "failed to parse csv mounts: parse error on line 1, column %zu: %s", errcol, e);
		else
			say(&r, "failed to parse csv mounts: %s", e);
		goto out;
	}
	for (size_t i = 0; i < fields.n; i++)
		if (read_field(&r, fields.v[i], expand, ctx) < 0)
			goto out;
	if (validate(&r) < 0)
		goto out;
	if (mode_given)
		*mode_given = r.mode;
	rc = 0;
out:
	if (rc < 0)
		df_mount_free(m);
	kiln_strv_free(&fields);
	return rc;
}

void df_mount_free(struct df_mount *m)
{
	free(m->from);
	free(m->source);
	free(m->target);
	free(m->id);
	free(m->env);
	memset(m, 0, sizeof(*m));
	m->from_stage = -1;
}

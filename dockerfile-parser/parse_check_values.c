/* parse_check_values.c — flag values that need parsing: RUN --mount (a CSV
 * record of key=value fields, read as encoding/csv does), HEALTHCHECK
 * durations (Go's time.ParseDuration) and retries.  Values holding a '$' wait
 * for the expansion pass, as BuildKit checks them after expanding. */
#include <ctype.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "dockerfile-parser/internal.h"

/* ---- --mount ------------------------------------------------------------- */

const char *df_csv_fields(const char *s, kiln_strv *out, size_t *errcol)
{
	size_t i = 0, len = strlen(s);
	kiln_buf f = KILN_BUF_INIT;

	if (len == 0)
		return "EOF";
	for (;;) {
		kiln_buf_reset(&f);
		if (i < len && s[i] == '"') {
			i++;
			for (;;) {
				if (i >= len) /* Go's reader takes the rest as the field */
					break;
				if (s[i] == '"') {
					if (i + 1 < len && s[i + 1] == '"') {
						kiln_buf_addc(&f, '"');
						i += 2;
						continue;
					}
					i++;
					break;
				}
				kiln_buf_addc(&f, s[i++]);
			}
			if (i < len && s[i] != ',') {
				*errcol = i + 1;
				kiln_buf_free(&f);
				return "extraneous or missing \" in quoted-field";
			}
		} else {
			while (i < len && s[i] != ',') {
				if (s[i] == '"') {
					*errcol = i + 1;
					kiln_buf_free(&f);
					return "bare \" in non-quoted field";
				}
				kiln_buf_addc(&f, s[i++]);
			}
		}
		kiln_strv_push(out, f.buf);
		if (i >= len)
			break;
		i++; /* the comma */
	}
	kiln_buf_free(&f);
	return NULL;
}

int df_go_parse_bool(const char *v, bool *out)
{
	static const char *const t[] = { "1", "t", "T", "TRUE", "true", "True", NULL };
	static const char *const f[] = { "0", "f", "F", "FALSE", "false", "False", NULL };

	for (int i = 0; t[i]; i++) {
		if (!strcmp(v, t[i])) {
			*out = true;
			return 0;
		}
		if (!strcmp(v, f[i])) {
			*out = false;
			return 0;
		}
	}
	return -1;
}

bool df_go_parse_uint32(const char *v, int base, uint32_t *out)
{
	unsigned long long x = 0;

	if (*v == '\0')
		return false;
	for (; *v; v++) {
		int d = *v >= '0' && *v <= '9' ? *v - '0' : -1;
		if (d < 0 || d >= base)
			return false;
		x = x * (unsigned)base + (unsigned)d;
		if (x > 0xFFFFFFFFull)
			return false;
	}
	if (out)
		*out = (uint32_t)x;
	return true;
}

/* What the fields of one --mount said so far: its type ("?" while it
 * waits for expansion) and which keys were given. */
struct mount_seen {
	char type[8];
	bool from, sharing, src, dst, id, env, mode, uid, gid;
};

struct mount_ctx {
	const struct df_src *src;
	const struct df_node *n;
	const char *flag;
	kiln_error **err;
	struct mount_seen seen;
};

#define MOUNT_ERR(c, ...) df_check_errf((c)->src, (c)->n, (c)->flag, (c)->err, __VA_ARGS__)

static bool is_bool_key(const char *key)
{
	return !strcmp(key, "readonly") || !strcmp(key, "ro") || !strcmp(key, "readwrite") || !strcmp(key, "rw");
}

/* A field without '=': a boolean key alone means true. */
static int mount_bare_key(struct mount_ctx *c, const char *key, const char *field)
{
	const char *type = c->seen.type;

	if (is_bool_key(key))
		return 0;
	if (!strcmp(key, "required")) {
		if (!strcmp(type, "secret") || !strcmp(type, "ssh"))
			return 0;
		return MOUNT_ERR(c, "unexpected key '%s' for mount type '%s'", key, type);
	}
	return MOUNT_ERR(c, "invalid field '%s' must be a key=value pair", field);
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

static int mount_type(struct mount_ctx *c, const char *val)
{
	static const char *const types[] = { "bind", "cache", "tmpfs", "secret", "ssh", NULL };
	kiln_buf q = KILN_BUF_INIT;
	int t;

	if (strchr(val, '$')) {
		snprintf(c->seen.type, sizeof(c->seen.type), "?");
		return 0;
	}
	if ((t = lookup_lower(val, types)) >= 0) {
		snprintf(c->seen.type, sizeof(c->seen.type), "%s", types[t]);
		return 0;
	}
	const char *hint = df_suggest(val, types);
	df_go_quote(&q, val, strlen(val));
	if (hint)
		MOUNT_ERR(c, "unsupported mount type %s (did you mean %s?)", q.buf, hint);
	else
		MOUNT_ERR(c, "unsupported mount type %s", q.buf);
	kiln_buf_free(&q);
	return -1;
}

static int mount_sharing(struct mount_ctx *c, const char *val)
{
	static const char *const sharing[] = { "shared", "private", "locked", NULL };
	kiln_buf q = KILN_BUF_INIT;

	c->seen.sharing = true;
	if (strchr(val, '$') || lookup_lower(val, sharing) >= 0)
		return 0;
	df_go_quote(&q, val, strlen(val));
	MOUNT_ERR(c, "unsupported sharing value %s", q.buf);
	kiln_buf_free(&q);
	return -1;
}

static int mount_unknown_key(struct mount_ctx *c, const char *key, const char *field)
{
	static const char *const keys[] = { "type", "from", "source", "target", "readonly", "id", "sharing",
					    "required", "mode", "uid", "gid", "src", "dst", "ro", "rw",
					    "readwrite", "size", "env", NULL };
	const char *hint = df_suggest(key, keys);

	if (hint)
		return MOUNT_ERR(c, "unexpected key '%s' in '%s' (did you mean %s?)", key, field, hint);
	return MOUNT_ERR(c, "unexpected key '%s' in '%s'", key, field);
}

/* One key=value field (key lowered). */
static int mount_key_value(struct mount_ctx *c, const char *key, const char *val, const char *field)
{
	struct mount_seen *s = &c->seen;
	bool dollar = strchr(val, '$') != NULL, b;

	if (!strcmp(key, "from")) {
		const char *d = strchr(val, '$');
		if (d && d[1] != '\0')
			return MOUNT_ERR(c, "'%s' doesn't support variable expansion, define alias stage instead", key);
		s->from = true;
		return 0;
	}
	if (!strcmp(key, "type"))
		return mount_type(c, val);
	bool *named = NULL;
	if (!strcmp(key, "source") || !strcmp(key, "src"))
		named = &s->src;
	else if (!strcmp(key, "target") || !strcmp(key, "dst") || !strcmp(key, "destination"))
		named = &s->dst;
	else if (!strcmp(key, "id"))
		named = &s->id;
	if (named) {
		*named = true;
		return 0;
	}
	if (is_bool_key(key) || !strcmp(key, "required")) {
		if (!strcmp(key, "required") && strcmp(s->type, "secret") && strcmp(s->type, "ssh") && strcmp(s->type, "?"))
			return MOUNT_ERR(c, "unexpected key '%s' for mount type '%s'", key, s->type);
		if (!dollar && df_go_parse_bool(val, &b) < 0)
			return MOUNT_ERR(c, "invalid value for %s: %s", key, val);
		return 0;
	}
	if (!strcmp(key, "sharing"))
		return mount_sharing(c, val);
	if (!strcmp(key, "mode") || !strcmp(key, "uid") || !strcmp(key, "gid")) {
		bool *has = key[0] == 'm' ? &s->mode : key[0] == 'u' ? &s->uid : &s->gid;
		*has = true;
		if (!dollar && !df_go_parse_uint32(val, key[0] == 'm' ? 8 : 10, NULL))
			return MOUNT_ERR(c, "invalid value %s for %s", val, key);
		return 0;
	}
	if (!strcmp(key, "size") || !strcmp(key, "env")) {
		const char *want = key[0] == 's' ? "tmpfs" : "secret";
		if (strcmp(s->type, want) && strcmp(s->type, "?"))
			return MOUNT_ERR(c, "unexpected key '%s' for mount type '%s'", key, s->type);
		s->env |= key[0] == 'e';
		return 0;
	}
	return mount_unknown_key(c, key, field);
}

/* What the keys given together must agree on, once the type is known. */
static int mount_combination(struct mount_ctx *c)
{
	const struct mount_seen *s = &c->seen;
	const char *type = s->type;

	if (strcmp(type, "?") == 0)
		return 0;
	bool file_info = !strcmp(type, "secret") || !strcmp(type, "ssh") || !strcmp(type, "cache");
	const char *bad = s->mode ? "mode" : s->uid ? "uid" : s->gid ? "gid" : NULL;
	if (bad && !file_info)
		return MOUNT_ERR(c, "%s not allowed for \"%s\" type mounts", bad, type);
	if (s->sharing && strcmp(type, "cache"))
		return MOUNT_ERR(c, "invalid cache sharing set for %s mount", type);
	if (!strcmp(type, "secret")) {
		if (s->from)
			return MOUNT_ERR(c, "secret mount should not have a from");
		if (!s->src && !s->dst && !s->id && !s->env)
			return MOUNT_ERR(c, "invalid secret mount. one of source, target required");
	}
	return 0;
}

int df_check_mount(const struct df_src *src, const struct df_node *n, const char *flag, const char *value,
		   kiln_error **err)
{
	struct mount_ctx c = { .src = src, .n = n, .flag = flag, .err = err, .seen = { .type = "bind" } };
	kiln_strv fields = KILN_STRV_INIT;
	size_t errcol = 0;
	const char *e;
	int ret = -1;

	if ((e = df_csv_fields(value, &fields, &errcol)) != NULL) {
		if (errcol)
			MOUNT_ERR(&c, "failed to parse csv mounts: parse error on line 1, column %zu: %s", errcol, e);
		else
			MOUNT_ERR(&c, "failed to parse csv mounts: %s", e);
		goto out;
	}
	for (size_t i = 0; i < fields.n; i++) {
		char *field = fields.v[i], *eq = strchr(field, '=');
		char *rawkey = eq ? kiln_xstrndup(field, (size_t)(eq - field)) : kiln_xstrdup(field);
		char *lowkey = df_go_lower(rawkey);
		char key[64];

		/* a key longer than any known one stays unknown when cut */
		snprintf(key, sizeof(key), "%s", lowkey);
		free(rawkey);
		free(lowkey);
		if ((eq ? mount_key_value(&c, key, eq + 1, field) : mount_bare_key(&c, key, field)) < 0)
			goto out;
	}
	ret = mount_combination(&c);
out:
	kiln_strv_free(&fields);
	return ret;
}

/* ---- HEALTHCHECK ------------------------------------------------------------ */

static int dur_err(const struct df_src *src, const struct df_node *n, const char *name, const char *fmt,
		   const char *a, const char *orig, kiln_error **err)
{
	kiln_buf qa = KILN_BUF_INIT, qo = KILN_BUF_INIT;
	char *needle = kiln_xasprintf("--%s", name);

	if (a)
		df_go_quote(&qa, a, strlen(a));
	df_go_quote(&qo, orig, strlen(orig));
	if (a)
		df_check_errf(src, n, needle, err, fmt, qa.buf, qo.buf);
	else
		df_check_errf(src, n, needle, err, fmt, qo.buf);
	kiln_buf_free(&qa);
	kiln_buf_free(&qo);
	free(needle);
	return -1;
}

/* time.ParseDuration, in nanoseconds. */
static int go_duration(const char *s, int64_t *out, const char **bad_unit, size_t *bad_len)
{
	static const struct { const char *u; uint64_t ns; } units[] = {
		{ "ns", 1 }, { "us", 1000 }, { "\xc2\xb5s", 1000 }, { "\xce\xbcs", 1000 },
		{ "ms", 1000000 }, { "s", 1000000000ull }, { "m", 60000000000ull }, { "h", 3600000000000ull },
	};
	uint64_t d = 0;
	bool neg = false;

	*bad_unit = NULL;
	if (*s == '-' || *s == '+')
		neg = *s++ == '-';
	if (!strcmp(s, "0")) {
		*out = 0;
		return 0;
	}
	if (*s == '\0')
		return -1;
	while (*s) {
		uint64_t v = 0, f = 0;
		double scale = 1;
		bool pre = false, post = false, overflow = false;
		size_t i = 0, k;

		if (!(*s == '.' || isdigit((unsigned char)*s)))
			return -1;
		while (isdigit((unsigned char)*s)) {
			if (v > (UINT64_MAX >> 1) / 10)
				return -1;
			v = v * 10 + (uint64_t)(*s++ - '0');
			if (v > (UINT64_MAX >> 1))
				return -1;
			pre = true;
		}
		if (*s == '.') {
			s++;
			while (isdigit((unsigned char)*s)) {
				if (!overflow) {
					if (f > (UINT64_MAX >> 1) / 10) {
						overflow = true;
					} else {
						f = f * 10 + (uint64_t)(*s - '0');
						scale *= 10;
					}
				}
				s++;
				post = true;
			}
		}
		if (!pre && !post)
			return -1;
		while (s[i] && s[i] != '.' && !isdigit((unsigned char)s[i]))
			i++;
		if (i == 0)
			return -2;
		for (k = 0; k < sizeof(units) / sizeof(units[0]); k++)
			if (strlen(units[k].u) == i && !strncmp(units[k].u, s, i))
				break;
		if (k == sizeof(units) / sizeof(units[0])) {
			*bad_unit = s;
			*bad_len = i;
			return -3;
		}
		if (v > (UINT64_MAX >> 1) / units[k].ns)
			return -1;
		v *= units[k].ns;
		if (f > 0) {
			v += (uint64_t)((double)f * ((double)units[k].ns / scale));
			if (v > (UINT64_MAX >> 1))
				return -1;
		}
		d += v;
		if (d > (UINT64_MAX >> 1))
			return -1;
		s += i;
	}
	*out = neg ? -(int64_t)d : (int64_t)d;
	return 0;
}

int df_check_duration(const struct df_src *src, const struct df_node *n, const char *name, const char *value,
		      kiln_error **err)
{
	const char *bad = NULL;
	size_t bad_len = 0;
	int64_t d;
	int r;

	if (value[0] == '\0')
		return 0;
	r = go_duration(value, &d, &bad, &bad_len);
	if (r == -2)
		return dur_err(src, n, name, "time: missing unit in duration %s", NULL, value, err);
	if (r == -3) {
		char *u = kiln_xstrndup(bad, bad_len);
		dur_err(src, n, name, "time: unknown unit %s in duration %s", u, value, err);
		free(u);
		return -1;
	}
	if (r < 0)
		return dur_err(src, n, name, "time: invalid duration %s", NULL, value, err);
	if (d != 0 && d < 1000000) {
		char *needle = kiln_xasprintf("--%s", name);
		df_check_errf(src, n, needle, err, "Interval \"%s\" cannot be less than 1ms", name);
		free(needle);
		return -1;
	}
	return 0;
}

int df_check_retries(const struct df_src *src, const struct df_node *n, const char *value, kiln_error **err)
{
	const char *p = value;
	bool neg = false;
	long long v = 0;
	bool range = false;

	if (*p == '+' || *p == '-')
		neg = *p++ == '-';
	if (*p == '\0')
		goto syntax;
	for (; *p; p++) {
		if (!isdigit((unsigned char)*p))
			goto syntax;
		if (!range) {
			v = v * 10 + (*p - '0');
			if (v > 0x80000000LL)
				range = true;
		}
	}
	if (neg)
		v = -v;
	if (range || v > 0x7fffffffLL || v < -0x80000000LL)
		return df_check_errf(src, n, "--retries", err, "strconv.ParseInt: parsing \"%s\": value out of range",
				     value);
	if (v < 0) /* current BuildKit accepts 0 (older releases wanted at least 1) */
		return df_check_errf(src, n, "--retries", err, "--retries cannot be negative (%lld)", v);
	return 0;
syntax:
	return df_check_errf(src, n, "--retries", err, "strconv.ParseInt: parsing \"%s\": invalid syntax", value);
}

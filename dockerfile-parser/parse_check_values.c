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

int df_check_mount(const struct df_src *src, const struct df_node *n, const char *flag, const char *value,
		   kiln_error **err)
{
	static const char *const types[] = { "bind", "cache", "tmpfs", "secret", "ssh", NULL };
	static const char *const sharing[] = { "shared", "private", "locked", NULL };
	kiln_strv fields = KILN_STRV_INIT;
	char type[8] = "bind";
	bool has_from = false, has_sharing = false, has_src = false, has_dst = false, has_id = false, has_env = false;
	bool has_mode = false, has_uid = false, has_gid = false;
	size_t errcol = 0;
	const char *e;
	int ret = -1;

	if ((e = df_csv_fields(value, &fields, &errcol)) != NULL) {
		if (errcol)
			df_check_errf(src, n, flag, err, "failed to parse csv mounts: parse error on line 1, column %zu: %s",
				      errcol, e);
		else
			df_check_errf(src, n, flag, err, "failed to parse csv mounts: %s", e);
		goto out;
	}
	for (size_t i = 0; i < fields.n; i++) {
		char *field = fields.v[i], *eq = strchr(field, '=');
		char *rawkey = eq ? kiln_xstrndup(field, (size_t)(eq - field)) : kiln_xstrdup(field);
		char *lowkey = df_go_lower(rawkey);
		char key[64];
		const char *val = eq ? eq + 1 : "";
		bool b;

		/* a key longer than any known one stays unknown when cut */
		snprintf(key, sizeof(key), "%s", lowkey);
		free(rawkey);
		free(lowkey);
		if (!eq) {
			if (!strcmp(key, "readonly") || !strcmp(key, "ro") || !strcmp(key, "readwrite") || !strcmp(key, "rw"))
				continue;
			if (!strcmp(key, "required")) {
				if (!strcmp(type, "secret") || !strcmp(type, "ssh"))
					continue;
				df_check_errf(src, n, flag, err, "unexpected key '%s' for mount type '%s'", key, type);
				goto out;
			}
			df_check_errf(src, n, flag, err, "invalid field '%s' must be a key=value pair", field);
			goto out;
		}
		if (!strcmp(key, "from")) {
			const char *d = strchr(val, '$');
			if (d && d[1] != '\0') {
				df_check_errf(src, n, flag, err,
					      "'%s' doesn't support variable expansion, define alias stage instead", key);
				goto out;
			}
			has_from = true;
			continue;
		}
		if (!strcmp(key, "type")) {
			size_t t;
			if (strchr(val, '$')) {
				snprintf(type, sizeof(type), "?");
				continue;
			}
			char *low = df_go_lower(val);
			for (t = 0; types[t]; t++)
				if (!strcmp(types[t], low))
					break;
			free(low);
			if (!types[t]) {
				kiln_buf q = KILN_BUF_INIT;
				const char *hint = df_suggest(val, types);
				df_go_quote(&q, val, strlen(val));
				if (hint)
					df_check_errf(src, n, flag, err, "unsupported mount type %s (did you mean %s?)", q.buf,
						      hint);
				else
					df_check_errf(src, n, flag, err, "unsupported mount type %s", q.buf);
				kiln_buf_free(&q);
				goto out;
			}
			snprintf(type, sizeof(type), "%s", types[t]);
			continue;
		}
		if (!strcmp(key, "source") || !strcmp(key, "src")) {
			has_src = true;
			continue;
		}
		if (!strcmp(key, "target") || !strcmp(key, "dst") || !strcmp(key, "destination")) {
			has_dst = true;
			continue;
		}
		if (!strcmp(key, "id")) {
			has_id = true;
			continue;
		}
		bool dollar = strchr(val, '$') != NULL;
		if (!strcmp(key, "readonly") || !strcmp(key, "ro") || !strcmp(key, "readwrite") || !strcmp(key, "rw") ||
		    !strcmp(key, "required")) {
			if (!strcmp(key, "required") && strcmp(type, "secret") && strcmp(type, "ssh") && strcmp(type, "?")) {
				df_check_errf(src, n, flag, err, "unexpected key '%s' for mount type '%s'", key, type);
				goto out;
			}
			if (!dollar && df_go_parse_bool(val, &b) < 0) {
				df_check_errf(src, n, flag, err, "invalid value for %s: %s", key, val);
				goto out;
			}
			continue;
		}
		if (!strcmp(key, "sharing")) {
			size_t t;
			has_sharing = true;
			if (dollar)
				continue;
			char *low = df_go_lower(val);
			for (t = 0; sharing[t]; t++)
				if (!strcmp(sharing[t], low))
					break;
			free(low);
			if (!sharing[t]) {
				kiln_buf q = KILN_BUF_INIT;
				df_go_quote(&q, val, strlen(val));
				df_check_errf(src, n, flag, err, "unsupported sharing value %s", q.buf);
				kiln_buf_free(&q);
				goto out;
			}
			continue;
		}
		if (!strcmp(key, "mode") || !strcmp(key, "uid") || !strcmp(key, "gid")) {
			bool *has = key[0] == 'm' ? &has_mode : key[0] == 'u' ? &has_uid : &has_gid;
			*has = true;
			if (!dollar && !df_go_parse_uint32(val, key[0] == 'm' ? 8 : 10, NULL)) {
				df_check_errf(src, n, flag, err, "invalid value %s for %s", val, key);
				goto out;
			}
			continue;
		}
		if (!strcmp(key, "size") || !strcmp(key, "env")) {
			const char *want = key[0] == 's' ? "tmpfs" : "secret";
			if (strcmp(type, want) && strcmp(type, "?")) {
				df_check_errf(src, n, flag, err, "unexpected key '%s' for mount type '%s'", key, type);
				goto out;
			}
			has_env |= key[0] == 'e';
			continue;
		}
		{
			static const char *const keys[] = { "type", "from", "source", "target", "readonly", "id",
							    "sharing", "required", "mode", "uid", "gid", "src", "dst",
							    "ro", "rw", "readwrite", "size", "env", NULL };
			const char *hint = df_suggest(key, keys);
			if (hint)
				df_check_errf(src, n, flag, err, "unexpected key '%s' in '%s' (did you mean %s?)", key,
					      field, hint);
			else
				df_check_errf(src, n, flag, err, "unexpected key '%s' in '%s'", key, field);
		}
		goto out;
	}
	if (strcmp(type, "?") != 0) {
		bool file_info = !strcmp(type, "secret") || !strcmp(type, "ssh") || !strcmp(type, "cache");
		const char *bad = has_mode ? "mode" : has_uid ? "uid" : has_gid ? "gid" : NULL;
		if (bad && !file_info) {
			df_check_errf(src, n, flag, err, "%s not allowed for \"%s\" type mounts", bad, type);
			goto out;
		}
		if (has_sharing && strcmp(type, "cache")) {
			df_check_errf(src, n, flag, err, "invalid cache sharing set for %s mount", type);
			goto out;
		}
		if (!strcmp(type, "secret")) {
			if (has_from) {
				df_check_errf(src, n, flag, err, "secret mount should not have a from");
				goto out;
			}
			if (!has_src && !has_dst && !has_id && !has_env) {
				df_check_errf(src, n, flag, err, "invalid secret mount. one of source, target required");
				goto out;
			}
		}
	}
	ret = 0;
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

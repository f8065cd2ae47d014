/* parse_check_values.c — flag values that need parsing: the CSV record of
 * RUN --mount (read as encoding/csv does; its fields by mount_spec.c), Go's
 * ParseBool/ParseUint, HEALTHCHECK durations (time.ParseDuration) and
 * retries.  Values holding a '$' wait for the expansion pass, as BuildKit
 * checks them after expanding. */
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

/* Before expansion, a --mount is refused where it would be after it
 * (mount_spec.c reads both), at the flag's FILE:LINE:COL. */
int df_check_mount(const struct df_src *src, const struct df_node *n, const char *flag, const char *value,
		   kiln_error **err)
{
	struct df_mount m;
	char *msg = NULL;
	int rc = df_mount_read(value, NULL, NULL, &m, NULL, &msg);

	if (rc < 0)
		df_check_errf(src, n, flag, err, "%s", msg);
	free(msg);
	df_mount_free(&m);
	return rc;
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

/* ast_go.c — the few Go library behaviours BuildKit's parser output depends
 * on (UTF-8 decoding, unicode.IsSpace, strings.TrimSpace, strconv.Quote),
 * reimplemented so kiln's dump matches BuildKit's byte for byte. */
#include <string.h>

#include "dockerfile-parser/internal.h"

int32_t df_utf8_decode(const char *s, size_t len, int *width)
{
	const unsigned char *p = (const unsigned char *)s;
	unsigned char c = p[0], lo = 0x80, hi = 0xBF;
	int n;
	int32_t r;

	*width = 1;
	if (c < 0x80)
		return c;
	if (c >= 0xC2 && c <= 0xDF) {
		n = 2;
		r = c & 0x1F;
	} else if (c >= 0xE0 && c <= 0xEF) {
		n = 3;
		r = c & 0x0F;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F; /* no surrogates */
	} else if (c >= 0xF0 && c <= 0xF4) {
		n = 4;
		r = c & 0x07;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F; /* nothing above U+10FFFF */
	} else {
		return 0xFFFD;
	}
	if (len < (size_t)n)
		return 0xFFFD;
	for (int i = 1; i < n; i++) {
		unsigned char b = p[i];
		if (b < lo || b > hi)
			return 0xFFFD;
		lo = 0x80;
		hi = 0xBF;
		r = (r << 6) | (b & 0x3F);
	}
	*width = n;
	return r;
}

void df_utf8_encode(kiln_buf *b, int32_t r)
{
	char out[4];

	if (r < 0 || r > 0x10FFFF || (r >= 0xD800 && r <= 0xDFFF))
		r = 0xFFFD;
	if (r < 0x80) {
		kiln_buf_addc(b, (char)r);
	} else if (r < 0x800) {
		out[0] = (char)(0xC0 | (r >> 6));
		out[1] = (char)(0x80 | (r & 0x3F));
		kiln_buf_add(b, out, 2);
	} else if (r < 0x10000) {
		out[0] = (char)(0xE0 | (r >> 12));
		out[1] = (char)(0x80 | ((r >> 6) & 0x3F));
		out[2] = (char)(0x80 | (r & 0x3F));
		kiln_buf_add(b, out, 3);
	} else {
		out[0] = (char)(0xF0 | (r >> 18));
		out[1] = (char)(0x80 | ((r >> 12) & 0x3F));
		out[2] = (char)(0x80 | ((r >> 6) & 0x3F));
		out[3] = (char)(0x80 | (r & 0x3F));
		kiln_buf_add(b, out, 4);
	}
}

bool df_go_isspace(int32_t r)
{
	switch (r) {
	case '\t': case '\n': case '\v': case '\f': case '\r': case ' ':
	case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
	case 0x202F: case 0x205F: case 0x3000:
		return true;
	default:
		return r >= 0x2000 && r <= 0x200A;
	}
}

const char *df_trim_left_space(const char *s, size_t *len)
{
	size_t i = 0;

	while (i < *len) {
		int w;
		int32_t r = df_utf8_decode(s + i, *len - i, &w);
		if (!df_go_isspace(r))
			break;
		i += (size_t)w;
	}
	*len -= i;
	return s + i;
}

/* Go's TrimRightFunc decodes the last rune (utf8.DecodeLastRune): find its
 * lead byte, and treat anything invalid as U+FFFD, which is not a space. */
static size_t trailing_space_len(const char *s, size_t len)
{
	for (size_t w = 1; w <= 4 && w <= len; w++) {
		int got;
		int32_t r;

		if (((unsigned char)s[len - w] & 0xC0) == 0x80 && w < 4 && w < len)
			continue;
		r = df_utf8_decode(s + len - w, w, &got);
		return (size_t)got == w && df_go_isspace(r) ? w : 0;
	}
	return 0;
}

const char *df_trim_space(const char *s, size_t *len)
{
	size_t w;

	s = df_trim_left_space(s, len);
	while (*len > 0 && (w = trailing_space_len(s, *len)) > 0)
		*len -= w;
	return s;
}

static const char hexdig[] = "0123456789abcdef";

void df_go_quote(kiln_buf *b, const char *s, size_t len)
{
	kiln_buf_addc(b, '"');
	for (size_t i = 0; i < len;) {
		int w;
		int32_t r = df_utf8_decode(s + i, len - i, &w);

		if (r == 0xFFFD && w == 1) {
			unsigned char c = (unsigned char)s[i];
			kiln_buf_adds(b, "\\x");
			kiln_buf_addc(b, hexdig[c >> 4]);
			kiln_buf_addc(b, hexdig[c & 15]);
			i++;
			continue;
		}
		if (r == '"' || r == '\\') {
			kiln_buf_addc(b, '\\');
			kiln_buf_addc(b, (char)r);
		} else if (df_go_isprint(r)) {
			kiln_buf_add(b, s + i, (size_t)w);
		} else {
			switch (r) {
			case '\a': kiln_buf_adds(b, "\\a"); break;
			case '\b': kiln_buf_adds(b, "\\b"); break;
			case '\f': kiln_buf_adds(b, "\\f"); break;
			case '\n': kiln_buf_adds(b, "\\n"); break;
			case '\r': kiln_buf_adds(b, "\\r"); break;
			case '\t': kiln_buf_adds(b, "\\t"); break;
			case '\v': kiln_buf_adds(b, "\\v"); break;
			default:
				if (r < ' ' || r == 0x7f) {
					kiln_buf_adds(b, "\\x");
					kiln_buf_addc(b, hexdig[(r >> 4) & 15]);
					kiln_buf_addc(b, hexdig[r & 15]);
				} else if (r < 0x10000) {
					kiln_buf_adds(b, "\\u");
					for (int sh = 12; sh >= 0; sh -= 4)
						kiln_buf_addc(b, hexdig[(r >> sh) & 15]);
				} else {
					kiln_buf_adds(b, "\\U");
					for (int sh = 28; sh >= 0; sh -= 4)
						kiln_buf_addc(b, hexdig[(r >> sh) & 15]);
				}
			}
		}
		i += (size_t)w;
	}
	kiln_buf_addc(b, '"');
}

char *df_utf8_sanitize(const char *s, size_t len, size_t *out_len)
{
	kiln_buf b = KILN_BUF_INIT;

	for (size_t i = 0; i < len;) {
		int w;
		int32_t r = df_utf8_decode(s + i, len - i, &w);
		if (r == 0xFFFD && w == 1)
			df_utf8_encode(&b, 0xFFFD);
		else
			kiln_buf_add(&b, s + i, (size_t)w);
		i += (size_t)w;
	}
	if (out_len)
		*out_len = b.len;
	return kiln_buf_detach(&b);
}

char *df_go_lower(const char *s)
{
	kiln_buf b = KILN_BUF_INIT;
	size_t len = strlen(s);

	for (size_t i = 0; i < len;) {
		int w;
		int32_t r = df_utf8_decode(s + i, len - i, &w), low;
		if (r == 0xFFFD && w == 1) { /* strings.Map writes an invalid byte as U+FFFD */
			df_utf8_encode(&b, 0xFFFD);
		} else if ((low = df_go_tolower(r)) != r) {
			df_utf8_encode(&b, low);
		} else {
			kiln_buf_add(&b, s + i, (size_t)w);
		}
		i += (size_t)w;
	}
	return kiln_buf_detach(&b);
}

static int hex4(const char *s)
{
	int v = 0;

	for (int i = 0; i < 4; i++) {
		char c = s[i];
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (d < 0)
			return -1;
		v = v * 16 + d;
	}
	return v;
}

char *df_json_fix_surrogates(const char *s, size_t len)
{
	kiln_buf b = KILN_BUF_INIT;
	bool in_string = false;

	for (size_t i = 0; i < len;) {
		char c = s[i];
		int v, lo;

		if (!in_string || c != '\\' || i + 1 >= len) {
			if (c == '"')
				in_string = !in_string;
			kiln_buf_addc(&b, c);
			i++;
			continue;
		}
		if (s[i + 1] != 'u' || i + 6 > len || (v = hex4(s + i + 2)) < 0) {
			kiln_buf_add(&b, s + i, 2); /* any other escape, kept for jansson to judge */
			i += 2;
			continue;
		}
		if (v >= 0xD800 && v <= 0xDBFF && i + 12 <= len && s[i + 6] == '\\' && s[i + 7] == 'u' &&
		    (lo = hex4(s + i + 8)) >= 0xDC00 && lo <= 0xDFFF) {
			kiln_buf_add(&b, s + i, 12); /* a proper pair */
			i += 12;
		} else if (v >= 0xD800 && v <= 0xDFFF) {
			kiln_buf_adds(&b, "\\ufffd");
			i += 6;
		} else {
			kiln_buf_add(&b, s + i, 6);
			i += 6;
		}
	}
	return kiln_buf_detach(&b);
}

/* ---- NUL mode (struct df_ast.nul) ----------------------------------------- */

int32_t df_rune_at(const char *s, size_t len, bool nul, int *width)
{
	if (nul && (unsigned char)s[0] == 0xC0 && len >= 2) {
		*width = 2;
		return s[1] == (char)0x80 ? 0 : 0xFFFD;
	}
	return df_utf8_decode(s, len, width);
}

void df_rune_put(kiln_buf *b, int32_t r)
{
	if (r == 0)
		kiln_buf_add(b, "\xC0\x80", 2);
	else
		df_utf8_encode(b, r);
}

char *df_nul_encode(const char *s, size_t len, size_t *out_len)
{
	kiln_buf b = KILN_BUF_INIT;

	kiln_buf_grow(&b, len + len / 8 + 16);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == 0)
			kiln_buf_add(&b, "\xC0\x80", 2);
		else if (c == 0xC0)
			kiln_buf_add(&b, "\xC0\x81", 2);
		else
			kiln_buf_addc(&b, (char)c);
	}
	*out_len = b.len;
	return kiln_buf_detach(&b);
}

char *df_nul_decode(const char *s, size_t *len)
{
	char *out = kiln_xmalloc(*len + 1);
	size_t o = 0;

	for (size_t i = 0; i < *len; i++) {
		if ((unsigned char)s[i] == 0xC0 && i + 1 < *len) {
			out[o++] = s[i + 1] == (char)0x80 ? '\0' : (char)0xC0;
			i++;
			continue;
		}
		out[o++] = s[i];
	}
	out[o] = '\0';
	*len = o;
	return out;
}

/* buf.c — growable strings, string vectors and allocation helpers.  Running
 * out of memory aborts: no caller in kiln could recover meaningfully. */
#include <stdlib.h>
#include <string.h>

#include "kiln.h"

const char kiln_buf_empty[1] = "";

static void oom(void)
{
	fputs("kiln: out of memory\n", stderr);
	abort();
}

void *kiln_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (p == NULL)
		oom();
	return p;
}

void *kiln_xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (p == NULL)
		oom();
	return p;
}

void *kiln_xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (p == NULL)
		oom();
	return p;
}

char *kiln_xstrdup(const char *s)
{
	return kiln_xstrndup(s, strlen(s));
}

char *kiln_xstrndup(const char *s, size_t n)
{
	char *p = kiln_xmalloc(n + 1);
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

char *kiln_xasprintf(const char *fmt, ...)
{
	kiln_buf b = KILN_BUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	kiln_buf_vaddf(&b, fmt, ap);
	va_end(ap);
	return kiln_buf_detach(&b);
}

void kiln_buf_grow(kiln_buf *b, size_t extra)
{
	size_t need;

	if (extra > SIZE_MAX - b->len - 1)
		oom();
	need = b->len + extra + 1;
	if (need <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	if (b->cap == 0) {
		b->buf = kiln_xmalloc(cap);
		b->buf[0] = '\0';
	} else {
		b->buf = kiln_xrealloc(b->buf, cap);
	}
	b->cap = cap;
}

void kiln_buf_add(kiln_buf *b, const void *data, size_t len)
{
	kiln_buf_grow(b, len);
	memcpy(b->buf + b->len, data, len);
	b->len += len;
	b->buf[b->len] = '\0';
}

void kiln_buf_adds(kiln_buf *b, const char *s)
{
	kiln_buf_add(b, s, strlen(s));
}

void kiln_buf_addc(kiln_buf *b, char c)
{
	kiln_buf_add(b, &c, 1);
}

void kiln_buf_vaddf(kiln_buf *b, const char *fmt, va_list ap)
{
	va_list cp;
	int n;

	va_copy(cp, ap);
	n = vsnprintf(NULL, 0, fmt, cp);
	va_end(cp);
	if (n < 0)
		return;
	kiln_buf_grow(b, (size_t)n);
	vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
}

void kiln_buf_addf(kiln_buf *b, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	kiln_buf_vaddf(b, fmt, ap);
	va_end(ap);
}

void kiln_buf_reset(kiln_buf *b)
{
	b->len = 0;
	if (b->cap)
		b->buf[0] = '\0';
}

char *kiln_buf_detach(kiln_buf *b)
{
	char *s = b->cap ? b->buf : kiln_xstrdup("");

	b->buf = (char *)kiln_buf_empty;
	b->len = b->cap = 0;
	return s;
}

void kiln_buf_free(kiln_buf *b)
{
	if (b->cap)
		free(b->buf);
	b->buf = (char *)kiln_buf_empty;
	b->len = b->cap = 0;
}

void kiln_strv_push_owned(kiln_strv *sv, char *s)
{
	if (sv->n + 2 > sv->cap) {
		sv->cap = sv->cap ? sv->cap * 2 : 8;
		sv->v = kiln_xrealloc(sv->v, sv->cap * sizeof(*sv->v));
	}
	sv->v[sv->n++] = s;
	sv->v[sv->n] = NULL;
}

void kiln_strv_push(kiln_strv *sv, const char *s)
{
	kiln_strv_push_owned(sv, kiln_xstrdup(s));
}

void kiln_strv_free(kiln_strv *sv)
{
	for (size_t i = 0; i < sv->n; i++)
		free(sv->v[i]);
	free(sv->v);
	sv->v = NULL;
	sv->n = sv->cap = 0;
}

size_t kiln_lower_bound(const void *base, size_t n, size_t size, size_t key_off, const char *key)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const char *s = *(const char *const *)((const char *)base + mid * size + key_off);
		if (strcmp(s, key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

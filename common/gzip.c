/* gzip.c — whole-buffer gzip with zlib, for HTTP bodies (E2B's /files
 * sends and asks for Content-Encoding: gzip): inflate bounded by the
 * caller's limit, so a small bomb cannot grow past it. */
#include <zlib.h>

#include "kiln.h"

int kiln_gunzip(const void *in, size_t len, size_t max, kiln_buf *out, kiln_error **err)
{
	z_stream z = { 0 };
	unsigned char chunk[65536];
	int rc;

	kiln_buf_reset(out);
	if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
		return kiln_err(err, KILN_E_IO, "zlib: inflateInit2 failed");
	z.next_in = (unsigned char *)in;
	do {
		size_t left = len - (size_t)((const unsigned char *)z.next_in - (const unsigned char *)in);
		z.avail_in = left > (1u << 30) ? 1u << 30 : (uInt)left;
		z.next_out = chunk;
		z.avail_out = sizeof(chunk);
		rc = inflate(&z, Z_NO_FLUSH);
		if (rc != Z_OK && rc != Z_STREAM_END && !(rc == Z_BUF_ERROR && z.avail_out == 0)) {
			inflateEnd(&z);
			return kiln_err(err, KILN_E_INVALID, "the gzip body is not valid gzip (%s)",
					z.msg ? z.msg : rc == Z_BUF_ERROR ? "it ends early" : "zlib error");
		}
		size_t got = sizeof(chunk) - z.avail_out;
		if (out->len + got > max) {
			inflateEnd(&z);
			return kiln_err(err, KILN_E_LIMIT, "the gzip body inflates to more than %zu bytes", max);
		}
		kiln_buf_add(out, chunk, got);
	} while (rc != Z_STREAM_END);
	inflateEnd(&z);
	return 0;
}

int kiln_gzip(const void *in, size_t len, int level, kiln_buf *out, kiln_error **err)
{
	z_stream z = { 0 };
	int rc;

	kiln_buf_reset(out);
	if (len > (1u << 31))
		return kiln_err(err, KILN_E_LIMIT, "%zu bytes are too many to gzip at once", len);
	if (deflateInit2(&z, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return kiln_err(err, KILN_E_IO, "zlib: deflateInit2 failed");
	size_t bound = deflateBound(&z, (uLong)len);
	kiln_buf_grow(out, bound);
	z.next_in = (unsigned char *)in;
	z.avail_in = (uInt)len;
	z.next_out = (unsigned char *)out->buf;
	z.avail_out = (uInt)bound;
	rc = deflate(&z, Z_FINISH);
	if (rc != Z_STREAM_END) {
		deflateEnd(&z);
		return kiln_err(err, KILN_E_IO, "zlib: deflate failed");
	}
	out->len = bound - z.avail_out;
	out->buf[out->len] = '\0';
	deflateEnd(&z);
	return 0;
}

/* connect.c — the Connect protocol as connect-es speaks it with JSON (what
 * E2B's SDK uses, useBinaryFormat: false): envelopes of flags + big-endian
 * length + message, the end-stream message, error codes and the checked
 * readers of request fields.  Every request byte here is hostile. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

static const struct {
	const char *name;
	int status;
} codes[] = {
	[RT_OK] = { "ok", 200 },
	[RT_CANCELED] = { "canceled", 499 },
	[RT_UNKNOWN] = { "unknown", 500 },
	[RT_INVALID_ARGUMENT] = { "invalid_argument", 400 },
	[RT_DEADLINE_EXCEEDED] = { "deadline_exceeded", 504 },
	[RT_NOT_FOUND] = { "not_found", 404 },
	[RT_ALREADY_EXISTS] = { "already_exists", 409 },
	[RT_PERMISSION_DENIED] = { "permission_denied", 403 },
	[RT_RESOURCE_EXHAUSTED] = { "resource_exhausted", 429 },
	[RT_FAILED_PRECONDITION] = { "failed_precondition", 400 },
	[RT_ABORTED] = { "aborted", 409 },
	[RT_OUT_OF_RANGE] = { "out_of_range", 400 },
	[RT_UNIMPLEMENTED] = { "unimplemented", 501 },
	[RT_INTERNAL] = { "internal", 500 },
	[RT_UNAVAILABLE] = { "unavailable", 503 },
	[RT_DATA_LOSS] = { "data_loss", 500 },
	[RT_UNAUTHENTICATED] = { "unauthenticated", 401 },
};

const char *rt_code_name(enum rt_code c)
{
	return (size_t)c < sizeof(codes) / sizeof(codes[0]) ? codes[c].name : "unknown";
}

int rt_code_http_status(enum rt_code c)
{
	return (size_t)c < sizeof(codes) / sizeof(codes[0]) ? codes[c].status : 500;
}

enum rt_code rt_code_from_error(const kiln_error *e)
{
	if (e == NULL)
		return RT_UNKNOWN;
	switch (e->kind) {
	case KILN_E_NOTFOUND: return RT_NOT_FOUND;
	case KILN_E_INVALID:
	case KILN_E_USAGE: return RT_INVALID_ARGUMENT;
	case KILN_E_EXISTS: return RT_ALREADY_EXISTS;
	case KILN_E_LIMIT: return RT_RESOURCE_EXHAUSTED;
	default: return RT_UNKNOWN;
	}
}

static json_t *load_object(const char *data, size_t len, kiln_error **err)
{
	json_error_t je;
	json_t *v;

	if (len == 0)
		return json_object();
	/* JSON_REJECT_DUPLICATES: two values for one field is not one request */
	v = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
	if (v == NULL) {
		kiln_err(err, KILN_E_INVALID, "the request message is not JSON: %s at byte %d", je.text, je.position);
		return NULL;
	}
	if (!json_is_object(v)) {
		json_decref(v);
		kiln_err(err, KILN_E_INVALID, "the request message is not a JSON object");
		return NULL;
	}
	return v;
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

json_t *rt_envelope_decode_request(const void *body, size_t len, size_t max, kiln_error **err)
{
	const uint8_t *p = body;
	uint32_t n;

	if (len < RT_ENVELOPE_HEADER) {
		kiln_err(err, KILN_E_INVALID, "the request is %zu bytes, shorter than an envelope's 5-byte header", len);
		return NULL;
	}
	if (p[0] & RT_FLAG_COMPRESSED) {
		kiln_err(err, KILN_E_INVALID, "the request envelope is compressed, and no compression was negotiated");
		return NULL;
	}
	if (p[0] != 0) {
		kiln_err(err, KILN_E_INVALID, "the request envelope has flags 0x%02x, not a data message", p[0]);
		return NULL;
	}
	n = be32(p + 1);
	if (n > max) {
		kiln_err(err, KILN_E_LIMIT, "the request message is %u bytes, over the limit of %zu", n, max);
		return NULL;
	}
	if (n != len - RT_ENVELOPE_HEADER) {
		kiln_err(err, KILN_E_INVALID, "the request envelope says %u bytes but %zu follow (a stream request is one message)",
			 n, len - RT_ENVELOPE_HEADER);
		return NULL;
	}
	return load_object((const char *)p + RT_ENVELOPE_HEADER, n, err);
}

json_t *rt_unary_decode_request(const void *body, size_t len, size_t max, kiln_error **err)
{
	if (len > max) {
		kiln_err(err, KILN_E_LIMIT, "the request message is %zu bytes, over the limit of %zu", len, max);
		return NULL;
	}
	return load_object(body, len, err);
}

void rt_envelope_reader_init(struct rt_envelope_reader *r, size_t max)
{
	r->buf = (kiln_buf)KILN_BUF_INIT;
	r->max = max;
}

void rt_envelope_reader_free(struct rt_envelope_reader *r)
{
	kiln_buf_free(&r->buf);
}

void rt_envelope_reader_feed(struct rt_envelope_reader *r, const void *data, size_t len)
{
	kiln_buf_add(&r->buf, data, len);
}

int rt_envelope_reader_next(struct rt_envelope_reader *r, uint8_t *flags, kiln_buf *out, kiln_error **err)
{
	const uint8_t *p = (const uint8_t *)r->buf.buf;
	uint32_t n;

	if (r->buf.len < RT_ENVELOPE_HEADER)
		return 0;
	n = be32(p + 1);
	if (n > r->max)
		return kiln_err(err, KILN_E_LIMIT, "an envelope of %u bytes, over the limit of %zu", n, r->max);
	if (r->buf.len - RT_ENVELOPE_HEADER < n)
		return 0;
	*flags = p[0];
	kiln_buf_reset(out);
	kiln_buf_add(out, p + RT_ENVELOPE_HEADER, n);
	memmove(r->buf.buf, r->buf.buf + RT_ENVELOPE_HEADER + n, r->buf.len - RT_ENVELOPE_HEADER - n);
	r->buf.len -= RT_ENVELOPE_HEADER + n;
	r->buf.buf[r->buf.len] = 0;
	return 1;
}

void rt_envelope_encode(kiln_buf *out, uint8_t flags, const void *msg, size_t len)
{
	uint8_t h[RT_ENVELOPE_HEADER] = { flags, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
					  (uint8_t)len };

	kiln_buf_add(out, h, sizeof(h));
	kiln_buf_add(out, msg, len);
}

void rt_envelope_encode_json(kiln_buf *out, const json_t *msg)
{
	char *s = json_dumps(msg, JSON_COMPACT);

	rt_envelope_encode(out, 0, s, strlen(s));
	free(s);
}

static json_t *error_object(enum rt_code code, const char *message)
{
	return json_pack("{s:s, s:s}", "code", rt_code_name(code), "message", message ? message : "");
}

void rt_envelope_encode_end(kiln_buf *out, enum rt_code code, const char *message)
{
	json_t *end = code == RT_OK ? json_object() : json_pack("{s:o}", "error", error_object(code, message));
	char *s = json_dumps(end, JSON_COMPACT);

	rt_envelope_encode(out, RT_FLAG_END_STREAM, s, strlen(s));
	free(s);
	json_decref(end);
}

char *rt_error_body(enum rt_code code, const char *message)
{
	json_t *o = error_object(code, message);
	char *s = json_dumps(o, JSON_COMPACT);

	json_decref(o);
	return s;
}

int rt_get_string(const json_t *obj, const char *key, bool required, const char **out, kiln_error **err)
{
	const json_t *v = json_object_get(obj, key);
	size_t n;

	*out = NULL;
	if (v == NULL || json_is_null(v)) {
		if (required)
			return kiln_err(err, KILN_E_INVALID, "%s is missing", key);
		return 0;
	}
	if (!json_is_string(v))
		return kiln_err(err, KILN_E_INVALID, "%s is not a string", key);
	n = json_string_length(v);
	if (n > RT_MAX_STRING)
		return kiln_err(err, KILN_E_INVALID, "%s is %zu bytes long, over the limit of %u", key, n, RT_MAX_STRING);
	if (memchr(json_string_value(v), 0, n))
		return kiln_err(err, KILN_E_INVALID, "%s holds a NUL character", key);
	*out = json_string_value(v);
	return 0;
}

int rt_get_int(const json_t *obj, const char *key, int64_t fallback, int64_t *out, kiln_error **err)
{
	const json_t *v = json_object_get(obj, key);
	const char *s;
	char *end;
	long long n;

	*out = fallback;
	if (v == NULL || json_is_null(v))
		return 0;
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return 0;
	}
	/* proto3 JSON writes 64-bit integers as strings */
	if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 20)
		return kiln_err(err, KILN_E_INVALID, "%s is not an integer", key);
	s = json_string_value(v);
	errno = 0;
	n = strtoll(s, &end, 10);
	if (errno || *end)
		return kiln_err(err, KILN_E_INVALID, "%s is not an integer: '%s'", key, s);
	*out = n;
	return 0;
}

int rt_get_bool(const json_t *obj, const char *key, bool fallback, bool *out, kiln_error **err)
{
	const json_t *v = json_object_get(obj, key);

	*out = fallback;
	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return kiln_err(err, KILN_E_INVALID, "%s is not a boolean", key);
	*out = json_is_true(v);
	return 0;
}

int rt_get_bytes(const json_t *obj, const char *key, size_t max, kiln_buf *out, kiln_error **err)
{
	const json_t *v = json_object_get(obj, key);

	kiln_buf_reset(out);
	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return kiln_err(err, KILN_E_INVALID, "%s is not a base64 string", key);
	if (json_string_length(v) / 4 * 3 > max + 2)
		return kiln_err(err, KILN_E_INVALID, "%s is over the limit of %zu bytes", key, max);
	if (kiln_b64_decode_bytes(json_string_value(v), json_string_length(v), out) < 0)
		return kiln_err(err, KILN_E_INVALID, "%s is not base64", key);
	if (out->len > max)
		return kiln_err(err, KILN_E_INVALID, "%s is over the limit of %zu bytes", key, max);
	return 0;
}

json_t *rt_json_bytes(const void *data, size_t len)
{
	char *s = kiln_b64_encode_bytes(data, len);
	json_t *v = json_string(s);

	free(s);
	return v;
}

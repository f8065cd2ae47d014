/* fuzz_connect.c — the Connect codec on arbitrary bytes: a stream request
 * (one envelope), a unary body, the incremental reader and the field readers
 * must never crash or leak; whatever decodes is a JSON object, and every
 * refusal says why. */
#include <string.h>

#include "runtime/runtime.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fields(const json_t *v)
{
	static const char *const keys[] = { "path", "watcherId", "tag", "pid", "depth", "stdin", "process" };
	kiln_buf b = KILN_BUF_INIT;
	const json_t *sel = json_object_get(v, "process");

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		kiln_error *err = NULL;
		const char *s;
		int64_t n;
		bool f;
		if (rt_get_string(v, keys[i], false, &s, &err) < 0 && err == NULL)
			__builtin_trap();
		kiln_error_clear(&err);
		if (s && (strlen(s) > RT_MAX_STRING))
			__builtin_trap();
		rt_get_int(v, keys[i], 0, &n, &err);
		kiln_error_clear(&err);
		rt_get_bool(v, keys[i], false, &f, &err);
		kiln_error_clear(&err);
		rt_get_bytes(v, keys[i], 1024, &b, &err);
		if (err == NULL && b.len > 1024)
			__builtin_trap();
		kiln_error_clear(&err);
		if (json_is_object(sel))
			rt_get_int(sel, keys[i], 0, &n, &err);
		kiln_error_clear(&err);
	}
	kiln_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	kiln_error *err = NULL;
	json_t *v;

	v = rt_envelope_decode_request(data, size, 1 << 16, &err);
	if ((v == NULL) != (err != NULL) || (v && !json_is_object(v)))
		__builtin_trap();
	if (v)
		fields(v);
	json_decref(v);
	kiln_error_clear(&err);
	v = rt_unary_decode_request(data, size, 1 << 16, &err);
	if ((v == NULL) != (err != NULL) || (v && !json_is_object(v)))
		__builtin_trap();
	if (v)
		fields(v);
	json_decref(v);
	kiln_error_clear(&err);

	struct rt_envelope_reader r;
	kiln_buf m = KILN_BUF_INIT;
	uint8_t flags;
	int rc;
	rt_envelope_reader_init(&r, 4096);
	for (size_t off = 0; off < size; off += 7) /* in odd pieces */
		rt_envelope_reader_feed(&r, data + off, size - off < 7 ? size - off : 7);
	while ((rc = rt_envelope_reader_next(&r, &flags, &m, &err)) == 1)
		if (m.len > 4096)
			__builtin_trap();
	if (rc < 0 && err == NULL)
		__builtin_trap();
	kiln_error_clear(&err);
	rt_envelope_reader_free(&r);
	kiln_buf_free(&m);
	return 0;
}

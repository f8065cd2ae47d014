/* json.c — thin helpers over jansson: loading with positioned errors,
 * canonical dumps for content addressing, atomic writes of JSON files. */
#include <stdlib.h>
#include <string.h>

#include "kiln.h"

json_t *kiln_json_loadb(const char *data, size_t len, const char *what, kiln_error **err)
{
	json_error_t jerr;
	json_t *v = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);

	if (v == NULL)
		kiln_err(err, KILN_E_INVALID, "%s:%d:%d: invalid JSON: %s", what, jerr.line, jerr.column, jerr.text);
	return v;
}

json_t *kiln_json_load_file(const char *path, kiln_error **err)
{
	char *data = NULL;
	size_t len = 0;
	json_t *v;

	if (kiln_read_file(path, &data, &len, 0, err) < 0)
		return NULL;
	v = kiln_json_loadb(data, len, path, err);
	free(data);
	return v;
}

char *kiln_json_dumps_canonical(const json_t *v)
{
	char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);

	if (s == NULL) {
		fputs("kiln: out of memory\n", stderr);
		abort();
	}
	return s;
}

int kiln_json_write_file(const char *path, const json_t *v, kiln_error **err)
{
	char *s = json_dumps(v, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	kiln_buf b = KILN_BUF_INIT;
	int ret;

	if (s == NULL)
		return kiln_err(err, KILN_E_INVALID, "encode JSON for %s", path);
	kiln_buf_adds(&b, s);
	kiln_buf_addc(&b, '\n');
	free(s);
	ret = kiln_write_atomic(path, b.buf, b.len, 0644, err);
	kiln_buf_free(&b);
	return ret;
}

const char *kiln_json_str(const json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

json_int_t kiln_json_int(const json_t *obj, const char *key, json_int_t fallback)
{
	json_t *v = json_object_get(obj, key);
	return json_is_integer(v) ? json_integer_value(v) : fallback;
}

void kiln_json_array_sort(json_t *arr, int (*cmp)(const void *, const void *))
{
	size_t n = json_array_size(arr);
	json_t **v = kiln_xcalloc(n ? n : 1, sizeof(*v));

	for (size_t i = 0; i < n; i++)
		v[i] = json_incref(json_array_get(arr, i));
	qsort(v, n, sizeof(*v), cmp);
	json_array_clear(arr);
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, v[i]);
	free(v);
}

/* fuzz_manifest.c — manifest validation on arbitrary bytes: oci_manifest_parse
 * must never crash, leak or accept a document without a known media type,
 * and what it accepts must carry only valid digests. */
#include <string.h>

#include "oci/oci.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const types[] = { NULL, "application/vnd.oci.image.manifest.v1+json",
					     "application/vnd.oci.image.index.v1+json; charset=utf-8" };
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		struct oci_manifest m;
		kiln_error *err = NULL;

		if (oci_manifest_parse((const char *)data, size, types[t], &m, &err) < 0) {
			if (err == NULL || kiln_error_message(err)[0] == '\0')
				__builtin_trap();
			kiln_error_free(err);
			continue;
		}
		if (m.media_type == NULL)
			__builtin_trap();
		for (size_t i = 0; i < m.nrefs; i++)
			if (kiln_digest_parse(m.refs[i].digest, NULL, NULL) < 0 || m.refs[i].size < 0)
				__builtin_trap();
		if (m.subject[0] && kiln_digest_parse(m.subject, NULL, NULL) < 0)
			__builtin_trap();
		oci_manifest_free(&m);
	}
	/* Names and tags come from URLs: arbitrary bytes too. */
	if (size < 300) {
		char s[300];
		memcpy(s, data, size);
		s[size] = '\0';
		oci_name_valid(s);
		oci_tag_valid(s);
	}
	return 0;
}

/* fuzz_tmpl.c — a pulled template artifact on arbitrary bytes: the input is a
 * manifest, a blank line, then an index.  dist_tmpl_parse and
 * dist_tmpl_parse_index must never crash or leak, and what they accept must
 * be consistent: every chunk names a blob of the manifest, chunk counts match
 * sizes, chunk sizes stay bounded (they size the assembly buffers). */
#include <stdbool.h>
#include <string.h>

#include "distrib/distrib.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data, *sep = memmem(s, size, "\n\n", 2);
	size_t mlen = sep ? (size_t)(sep - s) : size;
	struct dist_tmpl t;
	kiln_error *err = NULL;

	if (dist_tmpl_parse(&t, s, mlen, &err) < 0) {
		if (err == NULL || kiln_error_message(err)[0] == '\0')
			__builtin_trap();
		kiln_error_free(err);
		dist_tmpl_free(&t);
		return 0;
	}
	if (!oci_tmpl_is_artifact(s, mlen))
		__builtin_trap();
	if (sep && dist_tmpl_parse_index(&t, sep + 2, size - mlen - 2, &err) == 0) {
		for (size_t p = 0; p < t.nparts; p++) {
			const struct dist_tmpl_part *part = &t.parts[p];
			if (part->chunk_size < 4096 || part->chunk_size > (64u << 20) ||
			    part->nchunks != (part->size + part->chunk_size - 1) / part->chunk_size)
				__builtin_trap();
			for (size_t i = 0; i < part->nchunks; i++) {
				bool found = part->chunks[i] == NULL;
				for (size_t b = 0; !found && b < t.nblobs; b++)
					found = strcmp(part->chunks[i], t.blobs[b].digest) == 0;
				if (!found)
					__builtin_trap();
			}
		}
	} else {
		kiln_error_free(err);
	}
	dist_tmpl_free(&t);
	return 0;
}

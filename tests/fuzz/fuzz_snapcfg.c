/* fuzz_snapcfg.c — a template config on arbitrary bytes: snap_config_read
 * must never crash or leak, refuse with a message, and what it accepts must
 * round-trip: written and read again it is the same config, the same bytes,
 * and every blob digest names a file of the store (sha256:<64 hex>). */
#include <string.h>

#include "snapshots/snapshots.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct snap_config c, d;
	kiln_error *err = NULL;

	if (snap_config_read((const char *)data, size, "fuzz", &c, &err) < 0) {
		if (err == NULL || kiln_error_message(err)[0] == '\0')
			__builtin_trap();
		kiln_error_free(err);
		return 0;
	}
	for (int r = 0; r < SNAP_NROLES; r++)
		if (strncmp(c.blob[r].digest, "sha256:", 7) != 0 || strlen(c.blob[r].digest) != 71 ||
		    strspn(c.blob[r].digest + 7, "0123456789abcdef") != 64)
			__builtin_trap();
	char *text = snap_config_write(&c);
	if (snap_config_read(text, strlen(text), "again", &d, &err) < 0)
		__builtin_trap();
	char *again = snap_config_write(&d);
	if (strcmp(text, again) != 0)
		__builtin_trap();
	free(again);
	free(text);
	snap_config_free(&c);
	snap_config_free(&d);
	return 0;
}

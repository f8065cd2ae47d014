/* home.c — the layout of $KILN_HOME as one table of paths (git's git_path
 * family): every path under it is built here from its entry, so a folder is
 * named once, and docs/ARCHITECTURE.md's store listing is checked against
 * this table by tests/unit/test_home.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "kiln.h"

const struct kiln_path_entry kiln_path_table[KILN_PATH_N_] = {
	[KILN_PATH_BLOBS] = { "blobs", "blobs/sha256/HEX" },
	[KILN_PATH_TMP] = { "tmp", "tmp/" },
	[KILN_PATH_CACHE] = { "cache", "cache/HEX.json" },
	[KILN_PATH_IMAGES] = { "images.json", "images.json" },
	[KILN_PATH_IMAGES_LOCK] = { "images.lock", NULL },
	[KILN_PATH_LOCK] = { "lock", NULL },
	[KILN_PATH_HASHES] = { "hashes", "hashes/" },
	[KILN_PATH_LAYER_INDEX] = { "layer-index", "layer-index/HEX" },
	[KILN_PATH_RUN_CACHE] = { "run-cache", "run-cache/HEX/data" },
	[KILN_PATH_BUILDER_VM] = { "builder-vm", "builder-vm/KEY/" },
	[KILN_PATH_SNAPSHOTS] = { "snapshots", NULL },
	[KILN_PATH_SNAP_BLOBS] = { "snapshots/blobs", "snapshots/blobs/sha256/HEX" },
	[KILN_PATH_SNAP_TMP] = { "snapshots/tmp", "snapshots/tmp/" },
	[KILN_PATH_SNAP_REFS] = { "snapshots/refs", "snapshots/refs/[HOST/]NAME/TAG" },
	[KILN_PATH_SNAP_WORKSETS] = { "snapshots/worksets", "snapshots/worksets/HEX.json" },
	[KILN_PATH_SNAP_POOLS] = { "snapshots/pools", "snapshots/pools/HEX" },
	[KILN_PATH_SANDBOXES] = { "sandboxes", "sandboxes/ID/" },
	[KILN_PATH_CHUNKS] = { "chunks", "chunks/" },
	[KILN_PATH_CHUNKFS] = { "chunkfs", "chunkfs/" },
	[KILN_PATH_HOST_TSC] = { "host-tsc.json", "host-tsc.json" },
	[KILN_PATH_AUTH] = { "auth.json", "auth.json" },
	[KILN_PATH_KERNEL] = { "kernel", "kernel/" },
	[KILN_PATH_REGISTRY] = { "registry", "registry/" },
	[KILN_PATH_TRUST] = { "trust", "trust/HEX.json" },
	[KILN_PATH_PROVENANCE] = { "provenance", "provenance/HEX.json" },
};

char *kiln_home_path(const char *home, enum kiln_path which, const char *fmt, ...)
{
	char *own = home ? NULL : kiln_home(), *dir, *suffix, *p;
	va_list ap;

	dir = kiln_path_join(home ? home : own, kiln_path_table[which].path);
	free(own);
	if (fmt == NULL)
		return dir;
	va_start(ap, fmt);
	if (vasprintf(&suffix, fmt, ap) < 0)
		abort();
	va_end(ap);
	p = kiln_path_join(dir, suffix);
	free(dir);
	free(suffix);
	return p;
}

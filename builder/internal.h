/* internal.h — builder internals shared between its files, not part of the
 * stage's contract: the image path index, layer path forms. */
#ifndef KILN_BUILDER_INTERNAL_H
#define KILN_BUILDER_INTERNAL_H

#include "builder/builder.h"

/* "./a/b/" → "a/b"; "/" or "." → "" (the root). */
char *build_layer_path(const char *name);

void build_fsindex_put(build_fsindex *x, const char *path, mode_t mode, uid_t uid, gid_t gid, const char *link);
/* Remember the contents of /etc/passwd or /etc/group (other paths ignored). */
void build_fsindex_set_file(build_fsindex *x, const char *path, const char *data, size_t len);

#endif

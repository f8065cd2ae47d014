/* internal.h — builder internals shared between its files, not part of the
 * stage's contract: the image path index, layer path forms. */
#ifndef KILN_BUILDER_INTERNAL_H
#define KILN_BUILDER_INTERNAL_H

#include "builder/builder.h"

/* "./a/b/" → "a/b"; "/" or "." → "" (the root). */
char *build_layer_path(const char *name);
/* Extract the current entry e of reader a under dir through disk writer w:
 * its path and hardlink target are rebased into dir, then header and data
 * are written.  `what` names the source in errors ("layer X", "ADD F"). */
struct archive;
struct archive_entry;
int build_extract_entry(struct archive *a, struct archive *w, struct archive_entry *e, const char *dir,
			const char *rel, const char *what, kiln_error **err);

void build_fsindex_put(build_fsindex *x, const char *path, mode_t mode, uid_t uid, gid_t gid, const char *link);
/* Remember the contents of /etc/passwd or /etc/group (other paths ignored). */
void build_fsindex_set_file(build_fsindex *x, const char *path, const char *data, size_t len);

#include "dockerfile-parser/dockerfile.h"

/* image.c */
json_t *build_config_scratch(void);
/* Apply a non-filesystem step to the image config; *cmd_set tracks whether
 * this stage set CMD (ENTRYPOINT resets an inherited one). */
int build_config_step(json_t *root, const struct df_step *st, bool *cmd_set, kiln_error **err);
json_t *build_command_json(const struct df_step *st);
void build_config_history(json_t *root, const char *created, const char *created_by, bool empty_layer);
int build_image_commit(build_store *s, json_t *root, const struct build_layer *layers, size_t n,
		       const char *created, char manifest[KILN_DIGEST_MAX], char config[KILN_DIGEST_MAX],
		       kiln_error **err);

#endif
